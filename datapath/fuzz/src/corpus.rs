//! Seeds for the fuzz targets: real-looking inputs that the mutations start from, so that a
//! target spends its cases near the parsers' interesting paths rather than on bytes that fail
//! the first check.

use bloatlab_core::wire::{ipv4_checksum, synthetic_ipv4_udp, Ecn};

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88A8;

pub const TCP_FIN: u16 = 0x01;
pub const TCP_SYN: u16 = 0x02;
pub const TCP_PSH: u16 = 0x08;
pub const TCP_ACK: u16 = 0x10;
pub const TCP_ECE: u16 = 0x40;
pub const TCP_CWR: u16 = 0x80;

/// TCP option kinds.
pub const OPT_NOP: u8 = 1;
pub const OPT_MSS: u8 = 2;
pub const OPT_WSCALE: u8 = 3;
pub const OPT_SACK_PERM: u8 = 4;
pub const OPT_SACK: u8 = 5;
pub const OPT_TIMESTAMP: u8 = 8;
pub const OPT_MD5SIG: u8 = 19;

/// The ones' complement sum of `bytes` as 16-bit words, folded (no final complement).
fn ones_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        sum += u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]) as u32;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum
}

/// An Ethernet header from host `src` to host `dst` (locally administered addresses) with
/// `tags` VLAN tags (0 to 2: an 802.1ad tag, then an 802.1Q one) before `ethertype`.
pub fn ethernet(dst: u8, src: u8, tags: usize, ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, dst, 0x02, 0, 0, 0, 0, src];
    for (i, tpid) in [ETHERTYPE_QINQ, ETHERTYPE_VLAN].iter().rev().take(tags).rev().enumerate() {
        f.extend(tpid.to_be_bytes());
        f.extend((100 + i as u16).to_be_bytes()); // PCP 0, VID 100 + i
    }
    f.extend(ethertype.to_be_bytes());
    f
}

/// A TCP segment as Linux sends one, over IPv4 or IPv6, with valid checksums.
#[derive(Clone, Debug)]
pub struct Tcp {
    pub v6: bool,
    pub vlan_tags: usize,
    /// The host part of 10.0.0.x (or fd00::x).
    pub src: u8,
    pub dst: u8,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    /// DSCP and ECN bits, as IPv4's TOS byte.
    pub tos: u8,
    /// Whole option bytes, padded to 32 bits by `frame`.
    pub options: Vec<u8>,
    pub payload: usize,
}

impl Tcp {
    /// A pure ACK from 10.0.0.`src`:`sport` to 10.0.0.`dst`:`dport`.
    pub fn ack(src: u8, dst: u8, sport: u16, dport: u16, ack: u32) -> Tcp {
        Tcp { v6: false, vlan_tags: 0, src, dst, sport, dport, seq: 1, ack, flags: TCP_ACK, tos: 0, options: Vec::new(), payload: 0 }
    }
    /// Linux's timestamp option, after two NOPs.
    pub fn timestamps(mut self, tsval: u32, tsecr: u32) -> Tcp {
        self.options.extend([OPT_NOP, OPT_NOP, OPT_TIMESTAMP, 10]);
        self.options.extend(tsval.to_be_bytes());
        self.options.extend(tsecr.to_be_bytes());
        self
    }
    /// A SACK option with these blocks, after two NOPs.
    pub fn sack(mut self, blocks: &[(u32, u32)]) -> Tcp {
        self.options.extend([OPT_NOP, OPT_NOP, OPT_SACK, (2 + 8 * blocks.len()) as u8]);
        for (start, end) in blocks {
            self.options.extend(start.to_be_bytes());
            self.options.extend(end.to_be_bytes());
        }
        self
    }
    pub fn frame(&self) -> Vec<u8> {
        let mut options = self.options.clone();
        while options.len() % 4 != 0 {
            options.push(OPT_NOP);
        }
        let tcp_len = 20 + options.len();
        let mut tcp = Vec::with_capacity(tcp_len + self.payload);
        tcp.extend(self.sport.to_be_bytes());
        tcp.extend(self.dport.to_be_bytes());
        tcp.extend(self.seq.to_be_bytes());
        tcp.extend(self.ack.to_be_bytes());
        tcp.extend(((((tcp_len / 4) as u16) << 12) | self.flags).to_be_bytes());
        tcp.extend(502u16.to_be_bytes()); // window
        tcp.extend([0, 0, 0, 0]); // checksum, urgent pointer
        tcp.extend(&options);
        tcp.extend((0..self.payload).map(|i| i as u8));
        let l4_len = tcp.len();
        let mut f;
        let pseudo;
        if self.v6 {
            f = ethernet(self.dst, self.src, self.vlan_tags, ETHERTYPE_IPV6);
            let (src, dst) = (v6_addr(self.src), v6_addr(self.dst));
            f.push(0x60 | (self.tos >> 4));
            f.push((self.tos << 4) | 0x0A); // flow label 0xA1234
            f.extend([0x12, 0x34]);
            f.extend((l4_len as u16).to_be_bytes());
            f.extend([6, 64]);
            f.extend(src);
            f.extend(dst);
            pseudo = [&src[..], &dst[..], &(l4_len as u32).to_be_bytes(), &[0, 0, 0, 6]].concat();
        } else {
            f = ethernet(self.dst, self.src, self.vlan_tags, ETHERTYPE_IPV4);
            let ip = f.len();
            let (src, dst) = ([10, 0, 0, self.src], [10, 0, 0, self.dst]);
            f.extend([0x45, self.tos]);
            f.extend(((20 + l4_len) as u16).to_be_bytes());
            f.extend([0x1c, 0x46, 0x40, 0x00, 64, 6, 0, 0]); // id, DF, TTL 64, TCP
            f.extend(src);
            f.extend(dst);
            let sum = ipv4_checksum(&f[ip..ip + 20]);
            f[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
            pseudo = [&src[..], &dst[..], &[0, 6], &(l4_len as u16).to_be_bytes()].concat();
        }
        let sum = !(ones_sum(ones_sum(0, &pseudo), &tcp) as u16);
        tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        f.extend(tcp);
        f
    }
}

fn v6_addr(host: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[15] = host;
    a
}

/// A UDP frame of `len` bytes on the wire from flow `flow` (bloatlab's synthetic headers,
/// followed by a payload), with this ECN codepoint.
pub fn udp(flow: u32, ecn: Ecn, len: usize) -> Vec<u8> {
    let mut f = synthetic_ipv4_udp(flow, ecn, len);
    f.resize(len.max(f.len()), 0x5a);
    f
}

/// An ARP request from host `src` for 10.0.0.`target`, broadcast.
pub fn arp(src: u8, target: u8, tags: usize) -> Vec<u8> {
    let mut f = ethernet(0, src, tags, ETHERTYPE_ARP);
    f[..6].copy_from_slice(&[0xff; 6]);
    f.extend([0, 1, 0x08, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
    f.extend([0x02, 0, 0, 0, 0, src, 10, 0, 0, src]);
    f.extend([0, 0, 0, 0, 0, 0, 10, 0, 0, target]);
    f.resize(f.len().max(60), 0); // padded to the least Ethernet frame
    f
}

/// An IPv4 header (with `options` words) and `payload` bytes of protocol `proto`, valid checksum.
pub fn ipv4(tos: u8, proto: u8, flags_frag: u16, options: &[u8], payload: usize, tags: usize) -> Vec<u8> {
    let mut f = ethernet(2, 1, tags, ETHERTYPE_IPV4);
    let ip = f.len();
    let ihl = 5 + options.len() / 4;
    f.extend([0x40 | ihl as u8, tos]);
    f.extend(((ihl * 4 + payload) as u16).to_be_bytes());
    f.extend([0xbe, 0xef]);
    f.extend(flags_frag.to_be_bytes());
    f.extend([64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend(options);
    let sum = ipv4_checksum(&f[ip..ip + ihl * 4]);
    f[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    f.extend((0..payload).map(|i| (i * 7) as u8));
    f
}

/// Frames of the kinds a link carries, each named: TCP as Linux's stack sends it (handshake
/// options, timestamps, SACK, data, ECN), over IPv4 and IPv6, with and without VLAN tags; UDP;
/// ARP; ping; IPv4 options and fragments.
pub fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let syn = Tcp {
        flags: TCP_SYN | TCP_ECE | TCP_CWR,
        seq: 0x1000,
        ack: 0,
        options: [
            vec![OPT_MSS, 4, 0x05, 0xb4, OPT_SACK_PERM, 2],
            vec![OPT_TIMESTAMP, 10, 0, 1, 0x86, 0xa0, 0, 0, 0, 0],
            vec![OPT_NOP, OPT_WSCALE, 3, 7],
        ]
        .concat(),
        ..Tcp::ack(1, 2, 40000, 5201, 0)
    };
    let ack = Tcp::ack(2, 1, 5201, 40000, 0x1001).timestamps(1000, 100_000);
    let sack = Tcp::ack(2, 1, 5201, 40000, 0x9001).timestamps(1001, 100_001).sack(&[(0xA5A1, 0xB0F9), (0xC1A1, 0xC761)]);
    let dsack = Tcp::ack(2, 1, 5201, 40000, 0x9001).timestamps(1002, 100_002).sack(&[(0x8001, 0x85A9)]);
    let data = Tcp { flags: TCP_ACK | TCP_PSH, tos: 0x02, seq: 0x1001, payload: 1448, ..Tcp::ack(1, 2, 40000, 5201, 1).timestamps(100_003, 1002) };
    let md5 = Tcp { options: [vec![OPT_MD5SIG, 18], vec![0xAB; 16]].concat(), ..Tcp::ack(3, 4, 179, 50000, 77) };
    let v6_ack = Tcp { v6: true, tos: 0xB9, ..Tcp::ack(2, 1, 443, 50123, 0xFFFF_FFF0).timestamps(u32::MAX, 7) };
    let v6_data = Tcp { v6: true, tos: 0x01, payload: 1428, flags: TCP_ACK | TCP_PSH, ..Tcp::ack(1, 2, 50123, 443, 3).timestamps(8, 9) };
    let fin = Tcp { flags: TCP_FIN | TCP_ACK, ..Tcp::ack(1, 2, 40000, 5201, 0x2001) };
    let mut ping = ipv4(0, 1, 0x4000, &[], 64, 0);
    let icmp = ping.len() - 64;
    ping[icmp] = 8; // echo request
    vec![
        ("ipv4 tcp syn, ecn setup", syn.frame()),
        ("ipv4 tcp ack, timestamps", ack.frame()),
        ("ipv4 tcp ack, sack", sack.frame()),
        ("ipv4 tcp ack, d-sack", dsack.frame()),
        ("ipv4 tcp data, ect(0)", data.frame()),
        ("ipv4 tcp md5", md5.frame()),
        ("ipv4 tcp fin", fin.frame()),
        ("vlan ipv4 tcp ack", Tcp { vlan_tags: 1, ..ack.clone() }.frame()),
        ("qinq ipv6 tcp ack", Tcp { vlan_tags: 2, ..v6_ack.clone() }.frame()),
        ("ipv6 tcp ack, ef ect(1)", v6_ack.frame()),
        ("ipv6 tcp data, ect(1)", v6_data.frame()),
        ("ipv4 udp ect(0)", udp(7, Ecn::Ect0, 1200)),
        ("ipv4 udp ce", udp(0x0100_0001, Ecn::Ce, 64)),
        ("ipv4 udp headers only", synthetic_ipv4_udp(3, Ecn::NotEct, 1514)),
        ("arp request", arp(1, 2, 0)),
        ("vlan arp", arp(1, 2, 1)),
        ("ipv4 icmp echo", ping),
        ("ipv4 router alert, udp, af41", ipv4(0x88, 17, 0, &[0x94, 4, 0, 0], 32, 0)),
        ("ipv4 fragment, udp", ipv4(0x01, 17, 0x00B9, &[], 100, 0)),
    ]
}

/// Directions as the Python control plane writes them (testbed/datapath.py's direction_config
/// for a 10 Mbit/s, 5 ms direction, each discipline at the catalogue's defaults), and a few more
/// with what a spec may add: a trace, jitter, loss, ECT(1) rewriting, captures, byte limits.
pub const DIRECTIONS: [&str; 12] = [
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "droptail", "packets": 1000, "bytes": null}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "drophead", "packets": 1000, "bytes": null}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "codel", "packets": 1000, "bytes": null, "target_ns": 5000000, "interval_ns": 100000000, "ecn": false, "coarse_time": false, "mtu_bytes": 1514}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "fq_codel", "packets": 1000, "bytes": null, "target_ns": 5000000, "interval_ns": 100000000, "ecn": true, "coarse_time": false, "flows": 1024, "quantum_bytes": 1514, "memory_limit_bytes": 33554432, "drop_batch": 64, "mtu_bytes": 1514}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "red", "packets": 1000, "bytes": null, "min": 83, "max": 250, "avpkt_bytes": 1000, "burst_pkts": 138, "probability": 0.02, "bandwidth_bps": 10000000, "ecn": false, "harddrop": false, "adaptive": false, "gentle": false, "ns3": false}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "pie", "packets": 1000, "bytes": null, "target_ns": 15000000, "tupdate_ns": 15000000, "alpha": 0.125, "beta": 1.25, "max_burst_ns": 150000000, "ecn": false, "ecn_prob": 0.1, "bytemode": false, "dq_rate_estimator": false, "ns3": false, "mtu_bytes": 1514}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "cake", "packets": 1000, "bytes": null, "bandwidth_bps": 10000000, "diffserv": "diffserv3", "flow_mode": "triple-isolate", "target_ns": 5000000, "interval_ns": 100000000, "overhead": null, "mpu": 0, "framing": "none", "wash": false, "memory_limit_bytes": null, "ack_filter": "off", "mtu_bytes": 1514}, "seed": 12345}"#,
    r#"{"rate_bps": 10000000, "trace_path": null, "delay_ns": 5000000, "jitter_ns": 0, "loss": 0.0, "queue": {"discipline": "dualpi2", "packets": 1000, "bytes": null, "target_ns": 15000000, "tupdate_ns": 16000000, "alpha": 0.16015625, "beta": 3.19921875, "step_thresh_ns": 1000000, "step_packets": null, "min_qlen_step": 0, "coupling_factor": 2, "classic_protection_percent": 10, "ecn_mask": "l4s_ect", "drop_on_overload": true, "drop_early": false, "memory_limit_bytes": null, "mtu_bytes": 1514}, "seed": 12345}"#,
    r#"{"rate_bps": null, "trace_path": null, "delay_ns": 20000000, "jitter_ns": 5000000, "loss": 0.01, "queue": {"discipline": "red", "packets": null, "bytes": 100000, "min": 8333, "max": 25000, "avpkt_bytes": 1000, "burst_pkts": 13, "probability": 0.02, "bandwidth_bps": 10000000, "ecn": true, "harddrop": false, "adaptive": true, "gentle": true, "ns3": false}, "seed": 7, "ect1_rewrite": [{"src": "10.0.0.1", "dst": "10.0.0.2"}]}"#,
    r#"{"rate_bps": 1000000000, "delay_ns": 0, "queue": {"discipline": "cake", "packets": null, "bytes": 100000, "bandwidth_bps": null, "diffserv": "diffserv8", "flow_mode": "dual-srchost", "target_ns": 5000000, "interval_ns": 100000000, "overhead": 18, "mpu": 64, "framing": "atm", "wash": true, "memory_limit_bytes": 4194304, "ack_filter": "aggressive", "mtu_bytes": 1514}, "seed": 1, "qlog": false, "capture": {"name": "s0->h2", "departures_path": "/run/x/d.pcapng", "drops_path": "/run/x/x.pcapng", "snaplen": 128, "limit_bytes": 100000000}}"#,
    r#"{"rate_bps": 50000000, "delay_ns": 10000000, "max_frame_bytes": 9018, "queue": {"discipline": "dualpi2", "packets": null, "bytes": 200000, "target_ns": 15000000, "tupdate_ns": 16000000, "alpha": 0.16015625, "beta": 3.19921875, "step_thresh_ns": 1000000, "step_packets": 4, "min_qlen_step": 0, "coupling_factor": 2, "classic_protection_percent": 10, "ecn_mask": "any_ect", "drop_on_overload": false, "drop_early": true, "memory_limit_bytes": 150000, "mtu_bytes": 1514}, "seed": 99}"#,
    r#"{"rate_bps": 10000, "delay_ns": 10000000000, "jitter_ns": 10000000000, "loss": 0.5, "queue": {"discipline": "pie", "packets": 5, "target_ns": 1000, "tupdate_ns": 1000, "alpha": 2.0, "beta": 20.0, "max_burst_ns": 0, "ecn": true, "ecn_prob": 1.0, "bytemode": true, "dq_rate_estimator": true, "ns3": true}, "seed": 18446744073709551615}"#,
];

/// A whole process config as testbed/datapath.py's write_config writes one: cs244's h1 - s0 - h2
/// with s0 inside the datapath, punctual settings, `DIRECTIONS[dir]` on each direction.
pub fn link_config(forward: &str, reverse: &str) -> String {
    format!(
        r#"{{"netns": "bloatlab.cs244._dp", "stats_path": "/run/bloatlab/cs244/datapath-stats.json", "log_dir": "/run/bloatlab/cs244/qlog",
  "links": [
    {{"name": "h1-s0", "a_iface": "l0a", "b_switch": "s0", "forward": {forward}, "reverse": {reverse}}},
    {{"name": "s0-h2", "a_switch": "s0", "b_iface": "l1b", "forward": {forward}, "reverse": {reverse}}}
  ],
  "max_lead_ns": 2000000, "lead_quantile": 0.99, "spin_share": 0.85, "workers": 2, "spin_ns": 20000, "rt_priority": 10,
  "cpu_latency_us": 0, "batching": {{"enter_pressure": 0.4, "exit_pressure": 0.2, "spin_share": 0.1, "sleep_ns": 50000}}, "sentinel": true}}"#
    )
}

/// An arrival trace (docs/replay.md): the header in the column order `order` (a permutation
/// of t_ns, size_bytes, flow, ecn by index), then `rows` of (t_ns, size_bytes, flow, ecn).
pub fn arrivals_csv(order: [usize; 4], rows: &[(u64, u32, u32, u8)]) -> String {
    const NAMES: [&str; 4] = ["t_ns", "size_bytes", "flow", "ecn"];
    let mut text = order.iter().map(|&i| NAMES[i]).collect::<Vec<_>>().join(",");
    text.push('\n');
    for &(t, size, flow, ecn) in rows {
        let cols = [t.to_string(), size.to_string(), flow.to_string(), ecn.to_string()];
        text.push_str(&order.iter().map(|&i| cols[i].as_str()).collect::<Vec<_>>().join(","));
        text.push('\n');
    }
    text
}

/// Mahimahi traces (one 1504-byte delivery opportunity per line, at a millisecond).
pub const TRACES: [&str; 3] = ["1\n1\n4\n", "0\n0\n0\n2\n", "5\n6\n6\n6\n7\n8\n12\n12\n40\n"];
