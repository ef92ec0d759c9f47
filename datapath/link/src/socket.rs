//! AF_PACKET sockets on one interface each: frames in through a mapped ring, out with sendmmsg.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// Capacity of a packet buffer: any frame up to the largest MTU frame fits without growing.
pub const SLOT_BYTES: usize = 2048;

fn check(ret: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(ret)
    }
}

fn setopt(fd: RawFd, level: libc::c_int, name: libc::c_int, val: libc::c_int, what: &str) -> io::Result<()> {
    let r = unsafe {
        libc::setsockopt(fd, level, name, &val as *const _ as *const libc::c_void, std::mem::size_of::<libc::c_int>() as u32)
    };
    check(r, what).map(|_| ())
}

pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::new(io::ErrorKind::NotFound, format!("interface {name} does not exist"))),
        i => Ok(i),
    }
}

pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// A send-only socket on `ifindex` that bypasses the qdisc. Protocol 0 receives nothing.
    pub fn open(ifindex: u32) -> io::Result<Self> {
        let raw = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) }, "socket(AF_PACKET)")?;
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        setopt(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")?;
        setopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20, "SO_SNDBUFFORCE")?;
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        let r = unsafe {
            libc::bind(raw, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32)
        };
        check(r, "bind(AF_PACKET)")?;
        Ok(PacketSocket { fd })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Frames the kernel dropped because the receive ring was full, since the last call.
    pub fn take_overruns(&self) -> u64 {
        let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        let r = unsafe {
            libc::getsockopt(self.fd(), libc::SOL_PACKET, libc::PACKET_STATISTICS, &mut st as *mut _ as *mut libc::c_void, &mut len)
        };
        if r < 0 {
            0
        } else {
            st.tp_drops as u64
        }
    }

    /// Walks the kernel's transmit path without sending anything: a zero-length frame, which
    /// the packet socket refuses (EINVAL) after allocating and filling an skb. After a few
    /// milliseconds of idling on a VM that path is cold, and the first real send takes 25-30 us
    /// instead of 2-3 us before the frame reaches the peer; walked once shortly before, about
    /// half of that is saved.
    pub fn warm(&self) {
        let mut byte = 0u8;
        let mut iov = libc::iovec { iov_base: &mut byte as *mut u8 as *mut libc::c_void, iov_len: 0 };
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        unsafe { libc::sendmsg(self.fd(), &msg, libc::MSG_DONTWAIT) };
    }
}

/// Receives through a TPACKET_V2 memory-mapped ring: the kernel copies each frame into the
/// ring in the sender's context, and reading it costs no syscall. (TPACKET_V3 batches more,
/// but hands blocks over on a millisecond timer: too late for a link emulator.)
pub struct RxRing {
    sock: PacketSocket,
    map: *mut u8,
    map_len: usize,
    frames: usize,
    next: usize,
}

// The mapping belongs to this ring alone; one thread uses it at a time.
unsafe impl Send for RxRing {}

const TPACKET_V2: libc::c_int = 1;
const RING_FRAME_BYTES: usize = 2048;
const RING_BLOCK_BYTES: usize = 1 << 16;
/// At most 8192 frames: 50 ms of full-size frames at 2 Gbit/s, the longest a worker demoted to
/// normal priority was seen starved (sched.rs) at the rate a slow start sends into a 1 Gbit/s
/// link. 2048 bounded the queue an overloaded datapath hides in its ring (pings at
/// unlimited rate waited 5-22 ms rather than 10-44) but overran at 1 Gbit/s + 10 ms (256
/// frames in one of nine runs); the run reports that lag instead (runner's lag warnings).
const MAX_RING_BLOCKS: usize = 256;
/// At least 1024 frames (2 MiB): a host hands its veth a whole congestion window at once,
/// whatever the link's rate, and the ring takes it before the link's queue does.
const MIN_RING_BLOCKS: usize = 32;
/// How long a ring must hold what arrives while its worker does not read.
const RING_HOLDS_NS: u64 = 50_000_000;

/// The ring for a link direction of `rate_bps` (None: unlimited or a trace): what a slow start
/// sends at twice that rate in RING_HOLDS_NS, between MIN and MAX_RING_BLOCKS. A network of a
/// hundred hosts then asks the kernel for 200 MiB of rings rather than 1.6 GiB, and brings them
/// up in a tenth of the time (each is allocated and cleared as the ring is set up).
pub fn ring_blocks(rate_bps: Option<u64>) -> usize {
    let Some(bps) = rate_bps else { return MAX_RING_BLOCKS };
    let frames = (2 * bps as u128 * RING_HOLDS_NS as u128 / 1_000_000_000 / (1514 * 8)) as usize;
    frames.div_ceil(RING_BLOCK_BYTES / RING_FRAME_BYTES).clamp(MIN_RING_BLOCKS, MAX_RING_BLOCKS)
}

#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

impl RxRing {
    /// A ring of `blocks` (ring_blocks) taking every frame that arrives at `ifindex` (not those
    /// sent out of it).
    pub fn open(ifindex: u32, blocks: usize) -> io::Result<Self> {
        let raw = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) }, "socket(AF_PACKET)")?;
        let sock = PacketSocket { fd: unsafe { OwnedFd::from_raw_fd(raw) } };
        setopt(raw, libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V2, "PACKET_VERSION")?;
        setopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")?;
        // Asking for receive stamps makes the kernel stamp every frame when the veth hands it
        // over (netif_rx) rather than when the receive path has brought it to the ring; it
        // does so anyway while any socket on the machine (ping's, say) asks for stamps, so
        // arrival times no longer depend on what else runs.
        setopt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS")?;
        let frames = RING_BLOCK_BYTES / RING_FRAME_BYTES * blocks;
        let req = TpacketReq {
            tp_block_size: RING_BLOCK_BYTES as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: RING_FRAME_BYTES as u32,
            tp_frame_nr: frames as u32,
        };
        let r = unsafe {
            libc::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_RX_RING, &req as *const _ as *const libc::c_void, std::mem::size_of::<TpacketReq>() as u32)
        };
        check(r, "PACKET_RX_RING")?;
        let map_len = RING_BLOCK_BYTES * blocks;
        let map = unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, raw, 0) };
        if map == libc::MAP_FAILED {
            return Err(io::Error::new(io::ErrorKind::Other, format!("mmap of the rx ring: {}", io::Error::last_os_error())));
        }
        // Bound only now, with the ring in place, so no frame takes the slow path.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        let ring = RxRing { sock, map: map as *mut u8, map_len, frames, next: 0 };
        let r = unsafe { libc::bind(raw, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32) };
        check(r, "bind(AF_PACKET)")?;
        Ok(ring)
    }

    pub fn socket(&self) -> &PacketSocket {
        &self.sock
    }

    /// The kernel's receive time (CLOCK_REALTIME ns, 0 if none) of the next frame waiting in
    /// the ring, without taking it; None when the ring is empty.
    pub fn peek_stamp(&self) -> Option<u64> {
        let hdr = unsafe { self.map.add(self.next * RING_FRAME_BYTES) } as *const Tpacket2Hdr;
        let status = unsafe { &*(std::ptr::addr_of!((*hdr).tp_status) as *const AtomicU32) };
        if status.load(AtomicOrdering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        Some(unsafe { (*hdr).tp_sec as u64 * 1_000_000_000 + (*hdr).tp_nsec as u64 })
    }

    /// Takes up to `max` frames from the ring, in arrival order, each with the kernel's
    /// receive time (CLOCK_REALTIME ns, 0 if none). A frame longer than a ring slot comes
    /// padded to its true length, so the core can count it as oversize. Buffers come from
    /// `spare` (sent frames' buffers) while it has any.
    pub fn recv(&mut self, max: usize, spare: &mut Vec<Vec<u8>>, mut each: impl FnMut(Vec<u8>, u64)) -> usize {
        let mut n = 0;
        while n < max {
            let hdr = unsafe { self.map.add(self.next * RING_FRAME_BYTES) } as *mut Tpacket2Hdr;
            let status = unsafe { &*(std::ptr::addr_of!((*hdr).tp_status) as *const AtomicU32) };
            if status.load(AtomicOrdering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            let (len, snap, mac) = unsafe { ((*hdr).tp_len as usize, (*hdr).tp_snaplen as usize, (*hdr).tp_mac as usize) };
            let stamp_ns = unsafe { (*hdr).tp_sec as u64 * 1_000_000_000 + (*hdr).tp_nsec as u64 };
            let mut frame = spare.pop().unwrap_or_else(|| Vec::with_capacity(SLOT_BYTES));
            let data = unsafe { std::slice::from_raw_parts((hdr as *const u8).add(mac), snap) };
            frame.extend_from_slice(data);
            frame.resize(len, 0);
            // Hand the slot back only after the copy.
            status.store(TP_STATUS_KERNEL, AtomicOrdering::Release);
            self.next = (self.next + 1) % self.frames;
            each(frame, stamp_ns);
            n += 1;
        }
        n
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;

/// Reusable sendmmsg headers, so sending a batch allocates nothing.
#[derive(Default)]
pub struct TxBatch {
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// The raw pointers are rebuilt from `frames` on every call and never outlive it.
unsafe impl Send for TxBatch {}

impl TxBatch {
    /// Sends `frames` in order; returns how many the kernel refused.
    pub fn send<'a>(&mut self, sock: &PacketSocket, frames: impl Iterator<Item = &'a [u8]>) -> u64 {
        self.iovs.clear();
        self.iovs.extend(frames.map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() }));
        self.hdrs.clear();
        for iov in self.iovs.iter_mut() {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        let mut failed = 0;
        let mut off = 0;
        while off < self.hdrs.len() {
            let rest = &mut self.hdrs[off..];
            let n = unsafe { libc::sendmmsg(sock.fd(), rest.as_mut_ptr(), rest.len() as u32, 0) };
            if n <= 0 {
                // The first frame of the rest failed (ENOBUFS, ...): count it and go on.
                failed += 1;
                off += 1;
            } else {
                off += n as usize;
            }
        }
        self.iovs.clear(); // the pointers die with the frames
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_holds_a_slow_start_at_twice_its_links_rate_for_50_ms() {
        assert_eq!(ring_blocks(None), 256); // 8192 frames: unlimited, or a trace
        assert_eq!(ring_blocks(Some(1_000_000_000)), 256); // 8256 frames wanted: the most
        assert_eq!(ring_blocks(Some(500_000_000)), 129); // 4127 frames
        assert_eq!(ring_blocks(Some(100_000_000)), 32); // 825: the least, 1024
        assert_eq!(ring_blocks(Some(10_000)), 32);
    }
}
