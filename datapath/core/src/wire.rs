//! Just enough of Ethernet, IPv4 and IPv6 for queue disciplines: the DSCP and ECN fields
//! (RFC 2474, RFC 3168), marking Congestion Experienced and turning ECT(0) into ECT(1) (RFC 9331)
//! with the IPv4 header checksum kept valid, and a flow key for fair queueing. Frames that are
//! not IP, or too short, are left alone.

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const ETHERTYPE_ARP: u16 = 0x0806;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_SCTP: u8 = 132;

/// The two ECN bits of the IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ecn {
    NotEct = 0,
    Ect1 = 1,
    Ect0 = 2,
    Ce = 3,
}

impl Ecn {
    /// Every codepoint, in the order of their bits (0 to 3).
    pub const ALL: [Ecn; 4] = [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce];

    pub fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// Its name in the stats file.
    pub fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "not_ect",
            Ecn::Ect1 => "ect1",
            Ecn::Ect0 => "ect0",
            Ecn::Ce => "ce",
        }
    }
}

enum L3 {
    V4(usize),
    V6(usize),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Where the IP header starts, past up to two VLAN tags; None if not IP or truncated.
fn l3(frame: &[u8]) -> Option<L3> {
    let mut at = 12;
    for _ in 0..3 {
        if frame.len() < at + 2 {
            return None;
        }
        match be16(frame, at) {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ => at += 4,
            ETHERTYPE_IPV4 if frame.len() >= at + 2 + 20 && frame[at + 2] >> 4 == 4 => return Some(L3::V4(at + 2)),
            ETHERTYPE_IPV6 if frame.len() >= at + 2 + 40 && frame[at + 2] >> 4 == 6 => return Some(L3::V6(at + 2)),
            _ => return None,
        }
    }
    None
}

/// The frame's ECN codepoint; None when it is not an IP packet.
pub fn ecn(frame: &[u8]) -> Option<Ecn> {
    traffic_class(frame).map(Ecn::from_bits)
}

/// The frame's IPv4 TOS byte or IPv6 traffic class: the DSCP above the two ECN bits; None
/// when it is not an IP packet. One look at the headers for both fields.
pub fn traffic_class(frame: &[u8]) -> Option<u8> {
    match l3(frame)? {
        L3::V4(ip) => Some(frame[ip + 1]),
        L3::V6(ip) => Some((frame[ip] << 4) | (frame[ip + 1] >> 4)),
    }
}

/// The source and destination addresses of an IPv4 TCP packet; None for any other frame.
pub fn ipv4_tcp_addresses(frame: &[u8]) -> Option<([u8; 4], [u8; 4])> {
    match l3(frame)? {
        L3::V4(ip) if frame[ip + 9] == IPPROTO_TCP => {
            Some((frame[ip + 12..ip + 16].try_into().ok()?, frame[ip + 16..ip + 20].try_into().ok()?))
        }
        _ => None,
    }
}

/// Replaces IPv4's TOS byte, updating the header checksum incrementally (RFC 1624 eqn. 3:
/// HC' = ~(~HC + ~m + m'), in ones' complement arithmetic, over the 16-bit word holding it).
fn set_tos_v4(frame: &mut [u8], ip: usize, tos: u8) {
    let old_word = be16(frame, ip);
    frame[ip + 1] = tos;
    let new_word = be16(frame, ip);
    let hc = be16(frame, ip + 10);
    let sum = ones_add(ones_add(!hc, !old_word), new_word);
    frame[ip + 10..ip + 12].copy_from_slice(&(!sum).to_be_bytes());
}

/// Turns ECT(0) into ECT(1), the L4S identifier (RFC 9331), keeping a valid IPv4 checksum (IPv6
/// has none). True when it did; Not-ECT, ECT(1), CE and frames that are not IP are left alone.
pub fn ect0_to_ect1(frame: &mut [u8]) -> bool {
    match l3(frame) {
        Some(L3::V4(ip)) if Ecn::from_bits(frame[ip + 1]) == Ecn::Ect0 => {
            set_tos_v4(frame, ip, (frame[ip + 1] & !3) | Ecn::Ect1 as u8);
            true
        }
        Some(L3::V6(ip)) if Ecn::from_bits(frame[ip + 1] >> 4) == Ecn::Ect0 => {
            frame[ip + 1] = (frame[ip + 1] & !0x30) | ((Ecn::Ect1 as u8) << 4);
            true
        }
        _ => false,
    }
}

/// The frame's DSCP (the six high bits of IPv4's TOS or IPv6's traffic class, RFC 2474);
/// None when it is not an IP packet.
pub fn dscp(frame: &[u8]) -> Option<u8> {
    traffic_class(frame).map(|tc| tc >> 2)
}

/// Marks Congestion Experienced. True when the packet now carries CE (it was ECN-capable, or
/// already CE); false when it is not ECN-capable or not IP, and must be dropped instead.
pub fn set_ce(frame: &mut [u8]) -> bool {
    match l3(frame) {
        Some(L3::V4(ip)) => {
            let old = Ecn::from_bits(frame[ip + 1]);
            match old {
                Ecn::NotEct => false,
                Ecn::Ce => true,
                Ecn::Ect0 | Ecn::Ect1 => {
                    set_tos_v4(frame, ip, frame[ip + 1] | 3);
                    true
                }
            }
        }
        Some(L3::V6(ip)) => match Ecn::from_bits(frame[ip + 1] >> 4) {
            Ecn::NotEct => false,
            _ => {
                frame[ip + 1] |= 0x30; // no header checksum in IPv6
                true
            }
        },
        None => false,
    }
}

/// Clears the DSCP, keeping the ECN bits (and a valid IPv4 checksum): CAKE's `wash`. True
/// when the frame carried a DSCP other than 0.
pub fn clear_dscp(frame: &mut [u8]) -> bool {
    match l3(frame) {
        Some(L3::V4(ip)) if frame[ip + 1] >> 2 != 0 => {
            set_tos_v4(frame, ip, frame[ip + 1] & 3);
            true
        }
        Some(L3::V6(ip)) if dscp(frame) != Some(0) => {
            frame[ip] &= 0xF0; // the traffic class's high 4 bits sit in the version byte
            frame[ip + 1] &= 0x3F;
            true
        }
        _ => false,
    }
}

/// Whether the frame is ARP (past up to two VLAN tags).
pub fn is_arp(frame: &[u8]) -> bool {
    let mut at = 12;
    for _ in 0..3 {
        if frame.len() < at + 2 {
            return false;
        }
        match be16(frame, at) {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ => at += 4,
            t => return t == ETHERTYPE_ARP,
        }
    }
    false
}

/// Hashes of the frame's source address alone and of its destination address alone (both 0
/// when it is not IP): what fairness between hosts keys on.
pub fn host_hashes(frame: &[u8], seed: u64) -> (u64, u64) {
    let (src, dst) = match l3(frame) {
        Some(L3::V4(ip)) => (&frame[ip + 12..ip + 16], &frame[ip + 16..ip + 20]),
        Some(L3::V6(ip)) => (&frame[ip + 8..ip + 24], &frame[ip + 24..ip + 40]),
        None => return (0, 0),
    };
    let hash = |addr: &[u8], side: u64| {
        let mut h = Mix::new(seed ^ side);
        h.bytes(addr);
        h.finish()
    };
    (hash(src, 0x5352_4331), hash(dst, 0x4453_5431))
}

fn ones_add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// The IPv4 header checksum over `header` (with its checksum field as it stands): 0 when valid.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u16;
    for pair in header.chunks(2) {
        sum = ones_add(sum, u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    !sum
}

/// A 64-bit hash of the frame's flow: addresses, protocol and ports for TCP, UDP and SCTP over
/// IPv4 or IPv6 (also the IPv6 flow label), the whole Ethernet header for anything else.
/// `seed` perturbs it, as Linux perturbs its flow hash per boot.
pub fn flow_hash(frame: &[u8], seed: u64) -> u64 {
    let mut h = Mix::new(seed);
    match l3(frame) {
        Some(L3::V4(ip)) => {
            let ihl = ((frame[ip] & 0x0F) as usize) * 4;
            let proto = frame[ip + 9];
            h.bytes(&frame[ip + 12..ip + 20]);
            h.word(proto as u64);
            // Fragments after the first carry no ports.
            let first_fragment = be16(frame, ip + 6) & 0x1FFF == 0;
            if first_fragment && ihl >= 20 {
                ports(&mut h, frame, ip + ihl, proto);
            }
        }
        Some(L3::V6(ip)) => {
            let proto = frame[ip + 6];
            h.bytes(&frame[ip + 8..ip + 40]);
            h.word(proto as u64 | ((u32::from_be_bytes([0, frame[ip + 1] & 0x0F, frame[ip + 2], frame[ip + 3]]) as u64) << 8));
            ports(&mut h, frame, ip + 40, proto);
        }
        None => h.bytes(&frame[..frame.len().min(ETH_HEADER)]),
    }
    h.finish()
}

fn ports(h: &mut Mix, frame: &[u8], l4: usize, proto: u8) {
    if matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP) && frame.len() >= l4 + 4 {
        h.word(u32::from_be_bytes([frame[l4], frame[l4 + 1], frame[l4 + 2], frame[l4 + 3]]) as u64);
    }
}

/// TCP flags, as the 16 bits at offset 12 of the header hold them (with the data offset).
pub const TCP_FIN: u16 = 0x0001;
pub const TCP_SYN: u16 = 0x0002;
pub const TCP_ACK: u16 = 0x0010;
pub const TCP_ECE: u16 = 0x0040;
pub const TCP_CWR: u16 = 0x0080;

/// The fields of a TCP segment that CAKE's ACK filter compares.
#[derive(Clone, Copy, Debug)]
pub struct TcpSegment<'a> {
    pub v6: bool,
    /// Source then destination address (8 or 32 bytes).
    pub addrs: &'a [u8],
    /// Source then destination port.
    pub ports: [u8; 4],
    pub ack: u32,
    /// Data offset, reserved bits and flags (the TCP_* constants).
    pub flags: u16,
    /// The options, all of them (the header is whole in the frame).
    pub options: &'a [u8],
    /// Bytes of data after the TCP header, by the IP header's length (negative if it lies).
    pub data_len: i64,
}

/// The frame's TCP segment over IPv4 or IPv6 (no extension headers), if its whole TCP header
/// is in the frame.
pub fn tcp_segment(frame: &[u8]) -> Option<TcpSegment<'_>> {
    let (v6, l4, addrs, ip_payload) = match l3(frame)? {
        L3::V4(ip) => {
            let ihl = ((frame[ip] & 0x0F) as usize) * 4;
            if frame[ip + 9] != IPPROTO_TCP || ihl < 20 {
                return None;
            }
            (false, ip + ihl, &frame[ip + 12..ip + 20], be16(frame, ip + 2) as i64 - ihl as i64)
        }
        L3::V6(ip) => {
            if frame[ip + 6] != IPPROTO_TCP {
                return None;
            }
            (true, ip + 40, &frame[ip + 8..ip + 40], be16(frame, ip + 4) as i64)
        }
    };
    if frame.len() < l4 + 20 {
        return None;
    }
    let header = ((frame[l4 + 12] >> 4) as usize) * 4;
    if header < 20 || frame.len() < l4 + header {
        return None;
    }
    Some(TcpSegment {
        v6,
        addrs,
        ports: [frame[l4], frame[l4 + 1], frame[l4 + 2], frame[l4 + 3]],
        ack: u32::from_be_bytes([frame[l4 + 8], frame[l4 + 9], frame[l4 + 10], frame[l4 + 11]]),
        flags: be16(frame, l4 + 12),
        options: &frame[l4 + 20..l4 + header],
        data_len: ip_payload - header as i64,
    })
}

/// Multiply-xorshift mixing with a splitmix64 finish: fast, and every input bit reaches
/// every output bit, which is all bucket selection needs.
struct Mix(u64);

impl Mix {
    fn new(seed: u64) -> Self {
        Mix(seed ^ 0x243F_6A88_85A3_08D3)
    }
    fn word(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    fn bytes(&mut self, b: &[u8]) {
        for chunk in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(w));
        }
    }
    fn finish(self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Builds the first bytes of an Ethernet + IPv4 + UDP frame: what a replay needs for a
/// packet whose payload nobody reads. The flow id sets the source address and port, so
/// distinct flows hash apart; `total_len` is the frame's length on the wire.
pub fn synthetic_ipv4_udp(flow: u32, ecn: Ecn, total_len: usize) -> Vec<u8> {
    let mut f = vec![0u8; SYNTHETIC_HEADER_BYTES];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = ETH_HEADER;
    let ip_len = total_len.saturating_sub(ETH_HEADER).min(u16::MAX as usize) as u16;
    f[ip] = 0x45;
    f[ip + 1] = ecn as u8;
    f[ip + 2..ip + 4].copy_from_slice(&ip_len.to_be_bytes());
    f[ip + 8] = 64;
    f[ip + 9] = IPPROTO_UDP;
    f[ip + 12..ip + 16].copy_from_slice(&(0x0A00_0000 | (flow & 0x00FF_FFFF)).to_be_bytes());
    f[ip + 16..ip + 20].copy_from_slice(&[10, 255, 255, 254]);
    let sum = ipv4_checksum(&f[ip..ip + 20]);
    f[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    let udp = ip + 20;
    f[udp..udp + 2].copy_from_slice(&(1024 + (flow >> 24) as u16).to_be_bytes());
    f[udp + 2..udp + 4].copy_from_slice(&9u16.to_be_bytes());
    f[udp + 4..udp + 6].copy_from_slice(&ip_len.saturating_sub(20).to_be_bytes());
    f
}

/// Ethernet (14) + IPv4 (20) + UDP (8).
pub const SYNTHETIC_HEADER_BYTES: usize = 42;

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(tos: u8) -> Vec<u8> {
        let mut f = synthetic_ipv4_udp(7, Ecn::NotEct, 100);
        f[ETH_HEADER + 1] = tos;
        f[ETH_HEADER + 10] = 0;
        f[ETH_HEADER + 11] = 0;
        let sum = ipv4_checksum(&f[ETH_HEADER..ETH_HEADER + 20]);
        f[ETH_HEADER + 10..ETH_HEADER + 12].copy_from_slice(&sum.to_be_bytes());
        f
    }

    #[test]
    fn ce_marking_keeps_the_ipv4_checksum_valid() {
        for tos in 0..=255u8 {
            let mut f = v4(tos);
            let was = Ecn::from_bits(tos);
            let marked = set_ce(&mut f);
            assert_eq!(marked, was != Ecn::NotEct, "tos {tos:#x}");
            assert_eq!(ipv4_checksum(&f[ETH_HEADER..ETH_HEADER + 20]), 0, "tos {tos:#x}");
            let want = if was == Ecn::NotEct { tos } else { tos | 3 };
            assert_eq!(f[ETH_HEADER + 1], want, "DSCP bits kept");
            assert_eq!(ecn(&f), Some(Ecn::from_bits(want)));
        }
    }

    #[test]
    fn only_ect0_becomes_ect1_and_the_ipv4_checksum_stays_valid() {
        for tos in 0..=255u8 {
            let mut f = v4(tos);
            let was = Ecn::from_bits(tos);
            assert_eq!(ect0_to_ect1(&mut f), was == Ecn::Ect0, "tos {tos:#x}");
            assert_eq!(ipv4_checksum(&f[ETH_HEADER..ETH_HEADER + 20]), 0, "tos {tos:#x}");
            let want = if was == Ecn::Ect0 { (tos & !3) | 1 } else { tos };
            assert_eq!(f[ETH_HEADER + 1], want, "tos {tos:#x}: the DSCP kept");
        }
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14] = 0x6B; // traffic class 0xBA: EF, ECT(0)
        f[15] = 0xA5; // flow label's high nibble 5
        assert!(ect0_to_ect1(&mut f));
        assert_eq!((f[14], f[15]), (0x6B, 0x95), "only the ECN bits change");
        assert_eq!((ecn(&f), dscp(&f)), (Some(Ecn::Ect1), Some(46)));
        assert!(!ect0_to_ect1(&mut f), "ECT(1) stays");
        assert!(!ect0_to_ect1(&mut [0u8; 30]), "not IP");
    }

    #[test]
    fn tcp_addresses_are_read_from_ipv4_tcp_only() {
        let mut f = synthetic_ipv4_udp(0x01_0203, Ecn::NotEct, 100);
        assert_eq!(ipv4_tcp_addresses(&f), None, "UDP");
        f[ETH_HEADER + 9] = IPPROTO_TCP;
        assert_eq!(ipv4_tcp_addresses(&f), Some(([10, 1, 2, 3], [10, 255, 255, 254])));
        assert_eq!(ipv4_tcp_addresses(&f[..30]), None, "truncated");
        let mut v6 = vec![0u8; 14 + 40];
        v6[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        v6[14] = 0x60;
        v6[14 + 6] = IPPROTO_TCP;
        assert_eq!(ipv4_tcp_addresses(&v6), None, "IPv6");
    }

    #[test]
    fn dscp_is_the_tos_byte_without_ecn() {
        for tos in 0..=255u8 {
            assert_eq!(dscp(&v4(tos)), Some(tos >> 2), "tos {tos:#x}");
        }
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14] = 0x60 | 0x0B; // traffic class 0xB8 (EF, Not-ECT) across the two bytes
        f[15] = 0x85;
        assert_eq!(dscp(&f), Some(46));
        assert_eq!(dscp(&f[..20]), None, "truncated");
    }

    #[test]
    fn ipv6_traffic_class_ecn() {
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14] = 0x60 | 0x0B; // version 6; the traffic class's high nibble
        f[15] = 0x20 | 0x05; // ECN bits of the traffic class: ECT(0); flow label high nibble 5
        assert_eq!(ecn(&f), Some(Ecn::Ect0));
        assert!(set_ce(&mut f));
        assert_eq!(ecn(&f), Some(Ecn::Ce));
        assert_eq!((f[14], f[15]), (0x6B, 0x35), "only the ECN bits change");
        f[15] = 0x05;
        assert!(!set_ce(&mut f), "Not-ECT is never marked");
    }

    #[test]
    fn vlan_tagged_and_non_ip_frames() {
        let mut f = v4(0x02);
        f.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(ecn(&f), Some(Ecn::Ect0));
        assert!(set_ce(&mut f));
        assert_eq!(ipv4_checksum(&f[18..38]), 0);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(ecn(&arp), None);
        assert!(!set_ce(&mut arp));
        assert!(!set_ce(&mut [0u8; 5]), "a runt is left alone");
        flow_hash(&[0u8; 3], 1); // must not panic
    }

    #[test]
    fn flows_hash_apart_and_seed_matters() {
        let a = synthetic_ipv4_udp(1, Ecn::NotEct, 1500);
        let b = synthetic_ipv4_udp(2, Ecn::NotEct, 1500);
        let a_big = synthetic_ipv4_udp(1, Ecn::Ect0, 64);
        assert_eq!(flow_hash(&a, 9), flow_hash(&a_big, 9), "length and ECN are not part of the flow");
        assert_ne!(flow_hash(&a, 9), flow_hash(&b, 9));
        assert_ne!(flow_hash(&a, 9), flow_hash(&a, 10));
    }
}
