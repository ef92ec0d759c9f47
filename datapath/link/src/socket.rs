//! AF_PACKET sockets on one interface each: frames in with recvmmsg, out with sendmmsg.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// Receive buffer: enough for a TCP window of frames even when the thread is descheduled.
const RCVBUF_BYTES: libc::c_int = 64 << 20;
/// Per-slot buffer; longer frames are reported with their true length (MSG_TRUNC).
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
    /// A socket bound to `ifindex`. `receive`: take every frame arriving there (not those sent
    /// out of it); otherwise a send-only socket that bypasses the qdisc.
    pub fn open(ifindex: u32, receive: bool) -> io::Result<Self> {
        // Protocol 0 receives nothing until bind names the interface: no frames from other
        // interfaces slip in between socket() and bind().
        let raw = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) }, "socket(AF_PACKET)")?;
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if receive {
            setopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")?;
            setopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF_BYTES, "SO_RCVBUFFORCE")?;
        } else {
            setopt(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")?;
            setopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20, "SO_SNDBUFFORCE")?;
        }
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = if receive { ETH_P_ALL.to_be() } else { 0 };
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

    /// Frames the kernel dropped because our receive buffer was full, since the last call.
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

    /// Waits until a frame is readable or `timeout_ns` passes (None: until a frame).
    pub fn wait(&self, timeout_ns: Option<u64>) {
        let mut pfd = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        let ts = timeout_ns.map(|ns| libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 });
        let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        unsafe { libc::ppoll(&mut pfd, 1, tp, std::ptr::null()) };
    }
}

/// recvmmsg straight into packet buffers: each slot is a Vec the frame then lives in, so a
/// frame is copied once (kernel to user) on its way in. Sent frames' buffers come back
/// through `recycle`, so the steady state allocates nothing.
pub struct RxBatch {
    slots: Vec<Vec<u8>>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    spare: Vec<Vec<u8>>,
}

// The raw pointers in iovs/hdrs point into `slots`, owned by the same struct.
unsafe impl Send for RxBatch {}

impl RxBatch {
    pub fn new(n: usize) -> Self {
        let zeroed: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let empty = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        RxBatch { slots: (0..n).map(|_| Vec::with_capacity(SLOT_BYTES)).collect(), iovs: vec![empty; n], hdrs: vec![zeroed; n], spare: Vec::new() }
    }

    /// Gives a sent frame's buffer back for reuse.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() >= SLOT_BYTES && self.spare.len() < 4096 {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Reads up to a batch of frames without blocking; calls `each` with every frame (a frame
    /// longer than a slot comes padded to its true length, so the core can count it).
    pub fn recv(&mut self, sock: &PacketSocket, mut each: impl FnMut(Vec<u8>)) -> usize {
        for i in 0..self.slots.len() {
            self.iovs[i] = libc::iovec { iov_base: self.slots[i].as_mut_ptr() as *mut libc::c_void, iov_len: SLOT_BYTES };
            self.hdrs[i].msg_hdr.msg_iov = &mut self.iovs[i];
            self.hdrs[i].msg_hdr.msg_iovlen = 1;
            self.hdrs[i].msg_len = 0;
        }
        let n = unsafe {
            libc::recvmmsg(sock.fd(), self.hdrs.as_mut_ptr(), self.hdrs.len() as u32, libc::MSG_DONTWAIT | libc::MSG_TRUNC, std::ptr::null_mut())
        };
        if n <= 0 {
            return 0;
        }
        for i in 0..n as usize {
            let len = self.hdrs[i].msg_len as usize;
            let fresh = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(SLOT_BYTES));
            let mut frame = std::mem::replace(&mut self.slots[i], fresh);
            // The kernel wrote min(len, SLOT_BYTES) bytes; the rest of an oversize frame is
            // zero padding that only carries its length to the core, which drops it.
            unsafe { frame.set_len(len.min(SLOT_BYTES)) };
            frame.resize(len, 0);
            each(frame);
        }
        n as usize
    }
}

/// Sends frames with sendmmsg; returns how many the kernel refused.
pub fn send_all(sock: &PacketSocket, frames: &[&[u8]]) -> u64 {
    let mut iovs: Vec<libc::iovec> =
        frames.iter().map(|f| libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() }).collect();
    let mut hdrs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .map(|iov| {
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    let mut failed = 0;
    let mut off = 0;
    while off < hdrs.len() {
        let n = unsafe { libc::sendmmsg(sock.fd(), hdrs[off..].as_mut_ptr(), (hdrs.len() - off) as u32, 0) };
        if n <= 0 {
            // The first frame of the rest failed (ENOBUFS, ...): count it and go on.
            failed += 1;
            off += 1;
        } else {
            off += n as usize;
        }
    }
    failed
}
