//! Fuzz target `wire`: the frame parsers and rewriters of datapath/core/src/wire.rs, over
//! arbitrary bytes and over mutations of real frames (corpus::frames), and CAKE's ACK filter
//! (qdisc/cake/acks.rs) over arbitrary ACKs queued together.
//!
//! Beyond "no panic", each function is held to a small model of the headers written here from
//! the RFCs (where the IP header starts, past up to two VLAN tags), and the rewriters to what
//! they may change: set_ce, ect0_to_ect1 and clear_dscp touch the ECN or DSCP bits and the IPv4
//! checksum only, keep a valid checksum valid, are idempotent, and never move a packet to
//! another flow or host queue.

mod common;

use bloatlab_core::qdisc::{AckFilter, Cake, CakeParams, FlowMode, Limit, Packet, Queue, QueueEvent};
use bloatlab_core::rng::Rng;
use bloatlab_core::wire::{
    clear_dscp, dscp, ecn, ect0_to_ect1, flow_hash, host_hashes, ipv4_checksum, ipv4_tcp_addresses, is_arp, set_ce, tcp_segment, traffic_class, Ecn,
};
use bloatlab_core::{DropReason, Instant};
use bloatlab_fuzz::corpus::{self, Tcp, OPT_MSS, OPT_NOP, OPT_SACK_PERM, OPT_WSCALE, TCP_ACK, TCP_CWR, TCP_ECE, TCP_FIN, TCP_PSH, TCP_SYN};
use common::{apply, edit, fuzz, Edit};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Where the model says the IP header starts: (offset, IPv6?), past up to two VLAN tags, if
/// the frame holds a whole fixed header of the version its ethertype names.
fn model_ip(f: &[u8]) -> Option<(usize, bool)> {
    let mut at = 12;
    for _ in 0..3 {
        let ethertype = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        let ip = at + 2;
        match ethertype {
            0x8100 | 0x88A8 => at += 4,
            0x0800 => return (f.len() >= ip + 20 && f[ip] >> 4 == 4).then_some((ip, false)),
            0x86DD => return (f.len() >= ip + 40 && f[ip] >> 4 == 6).then_some((ip, true)),
            _ => return None,
        }
    }
    None
}

fn model_arp(f: &[u8]) -> bool {
    let mut at = 12;
    for _ in 0..3 {
        match f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])) {
            Some(0x8100 | 0x88A8) => at += 4,
            Some(t) => return t == 0x0806,
            None => return false,
        }
    }
    false
}

/// The IPv4 header if the frame has a whole one (IHL >= 5, all of it in the frame).
fn v4_header(f: &[u8]) -> Option<std::ops::Range<usize>> {
    let (ip, false) = model_ip(f)? else { return None };
    let ihl = (f[ip] & 0x0F) as usize * 4;
    (ihl >= 20 && f.len() >= ip + ihl).then_some(ip..ip + ihl)
}

fn checksum_valid(f: &[u8]) -> Option<bool> {
    v4_header(f).map(|h| ipv4_checksum(&f[h]) == 0)
}

/// The offsets where `a` and `b` (of one length) differ.
fn changed(a: &[u8], b: &[u8]) -> Vec<usize> {
    a.iter().zip(b).enumerate().filter(|(_, (x, y))| x != y).map(|(i, _)| i).collect()
}

/// Every property of the parsers and rewriters on one frame.
fn check_frame(f: &[u8]) -> Result<(), TestCaseError> {
    let ip = model_ip(f);
    // The fields, as the model reads them.
    let tc = traffic_class(f);
    let want_tc = ip.map(|(at, v6)| if v6 { (f[at] << 4) | (f[at + 1] >> 4) } else { f[at + 1] });
    prop_assert_eq!(tc, want_tc, "traffic class");
    prop_assert_eq!(dscp(f), tc.map(|t| t >> 2));
    prop_assert_eq!(ecn(f), tc.map(Ecn::from_bits));
    prop_assert_eq!(is_arp(f), model_arp(f));
    prop_assert!(!(is_arp(f) && tc.is_some()));
    let addrs = match ip {
        Some((at, false)) if f[at + 9] == 6 => Some((f[at + 12..at + 16].try_into().unwrap(), f[at + 16..at + 20].try_into().unwrap())),
        _ => None,
    };
    prop_assert_eq!(ipv4_tcp_addresses(f), addrs);
    let seed = 0x5eed;
    let (hash, hosts) = (flow_hash(f, seed), host_hashes(f, seed));
    prop_assert_eq!(hash, flow_hash(f, seed), "deterministic");
    if ip.is_none() {
        prop_assert_eq!(hosts, (0, 0), "no hosts outside IP");
    }
    check_tcp_segment(f, ip)?;

    // The rewriters: what each may change, and that it keeps the checksum and the flow.
    let allowed: Vec<usize> = match ip {
        Some((at, false)) => vec![at + 1, at + 10, at + 11],
        Some((at, true)) => vec![at, at + 1],
        None => vec![],
    };
    let valid = checksum_valid(f);
    let before = (ecn(f), dscp(f));
    type Rewrite = fn(&mut [u8]) -> bool;
    let rewriters: [(&str, Rewrite, Option<bool>); 3] = [
        ("set_ce", set_ce, before.0.map(|e| e != Ecn::NotEct)),
        ("ect0_to_ect1", ect0_to_ect1, before.0.map(|e| e == Ecn::Ect0)),
        ("clear_dscp", clear_dscp, before.1.map(|d| d != 0)),
    ];
    for (name, rewrite, expect) in rewriters {
        let mut g = f.to_vec();
        let did = rewrite(&mut g);
        prop_assert_eq!(did, expect.unwrap_or(false), "{} said", name);
        let diff = changed(f, &g);
        prop_assert!(diff.iter().all(|i| allowed.contains(i)), "{} changed bytes {:?}, may change {:?}", name, diff, allowed);
        if !did {
            prop_assert!(diff.is_empty(), "{}: nothing done, yet bytes changed", name);
        }
        let after = (ecn(&g), dscp(&g));
        match name {
            "set_ce" if did => prop_assert_eq!(after, (Some(Ecn::Ce), before.1)),
            "ect0_to_ect1" if did => prop_assert_eq!(after, (Some(Ecn::Ect1), before.1)),
            "clear_dscp" if did => prop_assert_eq!(after, (before.0, Some(0))),
            _ => {}
        }
        if valid == Some(true) {
            prop_assert_eq!(checksum_valid(&g), Some(true), "{} broke a valid IPv4 checksum", name);
        }
        prop_assert_eq!(flow_hash(&g, seed), hash, "{} moved the packet to another flow", name);
        prop_assert_eq!(host_hashes(&g, seed), hosts, "{} moved the packet to other hosts", name);
        // Idempotent: CE stays CE (and says so); ECT(1) and DSCP 0 are not rewritten again.
        let mut h = g.clone();
        let again = rewrite(&mut h);
        prop_assert_eq!(&h, &g, "{} is not idempotent", name);
        if did {
            prop_assert_eq!(again, name == "set_ce", "{} a second time", name);
        }
    }
    Ok(())
}

/// tcp_segment against the model: Some exactly when the whole TCP header is in the frame, and
/// every slice it returns lies within the frame.
fn check_tcp_segment(f: &[u8], ip: Option<(usize, bool)>) -> Result<(), TestCaseError> {
    let seg = tcp_segment(f);
    let want = ip.and_then(|(at, v6)| {
        let (l4, proto, payload) = if v6 {
            (at + 40, f[at + 6], u16::from_be_bytes([f[at + 4], f[at + 5]]) as i64)
        } else {
            let ihl = (f[at] & 0x0F) as usize * 4;
            if ihl < 20 {
                return None;
            }
            (at + ihl, f[at + 9], u16::from_be_bytes([f[at + 2], f[at + 3]]) as i64 - ihl as i64)
        };
        if proto != 6 || f.len() < l4 + 20 {
            return None;
        }
        let header = (f[l4 + 12] >> 4) as usize * 4;
        (header >= 20 && f.len() >= l4 + header).then_some((v6, l4, header, payload - header as i64))
    });
    match (seg, want) {
        (None, None) => {}
        (Some(s), Some((v6, l4, header, data_len))) => {
            let range = f.as_ptr_range();
            for part in [s.addrs, s.options] {
                let r = part.as_ptr_range();
                prop_assert!(range.start <= r.start && r.end <= range.end, "a slice outside the frame");
            }
            prop_assert_eq!(s.v6, v6);
            prop_assert_eq!(s.addrs.len(), if v6 { 32 } else { 8 });
            prop_assert_eq!(s.options, &f[l4 + 20..l4 + header]);
            prop_assert_eq!(s.ports, [f[l4], f[l4 + 1], f[l4 + 2], f[l4 + 3]]);
            prop_assert_eq!(s.flags, u16::from_be_bytes([f[l4 + 12], f[l4 + 13]]));
            prop_assert_eq!(s.data_len, data_len);
        }
        (s, w) => prop_assert!(false, "tcp_segment {:?}, the model {:?}", s.is_some(), w.is_some()),
    }
    Ok(())
}

/// A header's checksum, computed into it, verifies.
fn check_checksum(header: &mut [u8]) -> Result<(), TestCaseError> {
    if header.len() < 12 {
        return Ok(());
    }
    header[10..12].copy_from_slice(&[0, 0]);
    let sum = ipv4_checksum(header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    prop_assert_eq!(ipv4_checksum(header), 0);
    Ok(())
}

#[test]
fn arbitrary_bytes() {
    // Mostly short frames, where the length checks matter; some up to a jumbo-ish 1600.
    let frame = prop_oneof![3 => proptest::collection::vec(any::<u8>(), 0..80), 1 => proptest::collection::vec(any::<u8>(), 0..1600)];
    // Arbitrary bytes behind a valid Ethernet start, so the IP paths are reached too.
    let ethertype = prop_oneof![Just(0x0800u16), Just(0x86DD), Just(0x8100), Just(0x88A8), Just(0x0806), any::<u16>()];
    let prefixed = (ethertype, 0u8..16, proptest::collection::vec(any::<u8>(), 0..120))
        .prop_map(|(ethertype, version, rest)| {
            let mut f = corpus::ethernet(2, 1, 0, ethertype);
            f.push(version << 4 | 5);
            f.extend(rest);
            f
        });
    fuzz("wire.arbitrary_bytes", 6_000, || prop_oneof![frame, prefixed], |mut f| {
        check_frame(&f)?;
        check_checksum(&mut f)
    });
}

#[test]
fn mutated_frames() {
    let seeds = corpus::frames();
    let n = seeds.len();
    fuzz("wire.mutated_frames", 6_000, || (0..n, proptest::collection::vec(edit(), 0..6)), |(k, edits)| {
        let mut f = seeds[k].1.clone();
        for e in &edits {
            apply(&mut f, e);
        }
        check_frame(&f)
    });
}

/// Every seed frame cut at every length, and with every bit of its first 80 bytes flipped:
/// the mutations nearest the seeds, all of them, every run.
#[test]
fn every_truncation_and_bit_flip_of_the_seeds() {
    let mut checked = 0u64;
    for (name, f) in corpus::frames() {
        assert_eq!(checksum_valid(&f), if name.contains("ipv4") { Some(true) } else { None }, "{name}: the seed's checksum");
        for len in 0..=f.len() {
            check_frame(&f[..len]).unwrap_or_else(|e| panic!("{name} cut to {len}: {e}"));
            checked += 1;
        }
        for i in 0..f.len().min(80) {
            for bit in 0..8 {
                let mut g = f.clone();
                apply(&mut g, &Edit::Flip(i, bit));
                check_frame(&g).unwrap_or_else(|e| panic!("{name} with bit {bit} of byte {i} flipped: {e}"));
                checked += 1;
            }
        }
    }
    println!("fuzz wire.seed_truncations_and_flips: {checked} cases");
}

/// One packet offered to CAKE's ACK filter: a TCP segment of one of a few connections.
#[derive(Clone, Debug)]
struct Segment {
    conn: u8,
    ack_step: i32,
    flags: u16,
    ts: Option<(u16, u16)>,
    sacks: Vec<(i16, u16)>,
    extra: Vec<u8>,
    payload: u16,
    tos: u8,
    edits: Vec<Edit>,
}

fn segment() -> impl Strategy<Value = Segment> {
    let flags = prop_oneof![
        6 => Just(TCP_ACK),
        1 => Just(TCP_ACK | TCP_ECE),
        1 => Just(TCP_ACK | TCP_CWR),
        1 => Just(TCP_ACK | TCP_PSH),
        1 => Just(TCP_SYN | TCP_ACK),
        1 => Just(TCP_FIN | TCP_ACK),
        1 => any::<u16>().prop_map(|f| f & 0x0FFF),
    ];
    // Options beyond timestamps and SACK: the ones a filter must refuse, and malformed ones.
    let extra = prop_oneof![
        6 => Just(vec![]),
        1 => Just(vec![OPT_MSS, 4, 5, 0xb4]),
        1 => Just(vec![OPT_NOP, OPT_WSCALE, 3, 7]),
        1 => Just(vec![OPT_SACK_PERM, 2]),
        1 => proptest::collection::vec(any::<u8>(), 1..12),
    ];
    (
        0..4u8,
        prop_oneof![4 => 0..3000i32, 1 => -3000..0i32, 1 => any::<i32>()],
        flags,
        proptest::option::of((0..50u16, 0..50u16)),
        proptest::collection::vec((-3000i16..6000, 1..3000u16), 0..5),
        extra,
        prop_oneof![5 => Just(0u16), 1 => 1..1400u16],
        prop_oneof![Just(0u8), Just(0x01), Just(0x02), Just(0x03), any::<u8>()],
        prop_oneof![8 => Just(vec![]), 1 => proptest::collection::vec(edit(), 1..3)],
    )
        .prop_map(|(conn, ack_step, flags, ts, sacks, extra, payload, tos, edits)| Segment { conn, ack_step, flags, ts, sacks, extra, payload, tos, edits })
}

/// The connection a frame belongs to (the filter's notion: version, addresses and ports).
fn conn_key(f: &[u8]) -> Option<(bool, Vec<u8>, [u8; 4])> {
    tcp_segment(f).map(|s| (s.v6, s.addrs.to_vec(), s.ports))
}

#[test]
fn ack_filter() {
    let ops = proptest::collection::vec(prop_oneof![3 => segment().prop_map(Some), 1 => Just(None)], 1..80);
    let flow_modes = prop_oneof![Just(FlowMode::TripleIsolate), Just(FlowMode::Flows), Just(FlowMode::Flowblind)];
    let modes = (prop_oneof![Just(AckFilter::Conservative), Just(AckFilter::Aggressive)], flow_modes, 2..200usize);
    fuzz("wire.ack_filter", 700, || (modes, ops, any::<u64>()), |((mode, flow_mode, limit), ops, seed)| {
        let cake = Cake::new(Limit::Packets(limit), CakeParams { ack_filter: mode, flow_mode, ..CakeParams::default() }, seed);
        let mut q = Queue::new(Box::new(cake));
        q.keep_dropped(true);
        let mut rng = Rng::new(seed);
        // Each connection's next cumulative ACK; connection 3 is IPv6.
        let mut acks = [1000u32; 4];
        let mut ts = [0u32; 4];
        for (id, op) in ops.into_iter().enumerate() {
            let now = Instant(id as u64 * 1000);
            let Some(s) = op else {
                q.dequeue(now, &mut rng, &mut |_, _| {});
                continue;
            };
            let c = s.conn as usize;
            acks[c] = acks[c].wrapping_add_signed(s.ack_step);
            let ack = acks[c];
            let mut t = Tcp { v6: c == 3, flags: s.flags, tos: s.tos, payload: s.payload as usize, ..Tcp::ack(1 + s.conn % 2, 9, 40000 + c as u16, 5201, ack) };
            if let Some((dval, decr)) = s.ts {
                ts[c] += dval as u32;
                t = t.timestamps(ts[c], ts[c].wrapping_sub(decr as u32));
            }
            if !s.sacks.is_empty() {
                let start = |off: i16| ack.wrapping_add_signed(off as i32);
                let blocks: Vec<(u32, u32)> = s.sacks.iter().map(|&(off, len)| (start(off), start(off).wrapping_add(len as u32))).collect();
                t = t.sack(&blocks);
            }
            t.options.extend(&s.extra);
            let mut frame = t.frame();
            for e in &s.edits {
                apply(&mut frame, e);
            }
            let trigger = tcp_segment(&frame).map(|seg| (seg.ack, seg.flags));
            let key = conn_key(&frame);
            let len = frame.len().max(1) as u32;
            let mut ack_drops = 0;
            q.enqueue(now, Packet::with_headers(id as u64, frame, len, c as u32), &mut rng, &mut |e, _| {
                if let QueueEvent::Dropped(_, DropReason::AckFilter) = e {
                    ack_drops += 1;
                }
            });
            prop_assert!(ack_drops <= 1, "one arrival, {} ACKs filtered", ack_drops);
            let mut dropped = Vec::new();
            q.take_dropped(|d| dropped.push(d));
            for d in dropped.iter().filter(|d| d.reason == DropReason::AckFilter) {
                // What went was a pure ACK of the arriving segment's connection, acknowledging
                // no more than it, and the arrival had ACK set and not SYN.
                let (trigger_ack, trigger_flags) = trigger.expect("an ACK was filtered for a segment that is not TCP");
                prop_assert_eq!(trigger_flags & (TCP_ACK | TCP_SYN), TCP_ACK);
                let gone = tcp_segment(&d.packet.data).expect("a filtered packet is TCP");
                prop_assert_eq!(conn_key(&d.packet.data), key.clone(), "an ACK of another connection went");
                prop_assert_eq!(gone.flags & 0x0F3F, TCP_ACK, "not a pure ACK");
                prop_assert_eq!(gone.data_len, 0, "an ACK with data went");
                prop_assert!((trigger_ack.wrapping_sub(gone.ack) as i32) >= 0, "it acknowledged more than the one that replaced it");
                prop_assert!(d.packet.id < id as u64);
            }
        }
        // Drained, every packet accounted for (the queue checks its identities at each step).
        while q.dequeue(Instant(u64::MAX / 2), &mut rng, &mut |_, _| {}).is_some() {}
        let s = q.stats();
        prop_assert_eq!((s.backlog_pkts, s.backlog_bytes), (0, 0));
        prop_assert_eq!(s.arrived, s.dequeued + s.dropped_at_enqueue + s.dropped_in_queue);
        Ok(())
    });
}
