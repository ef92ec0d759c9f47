use super::super::testkit::{Harness, MS, US};
use super::super::{DropReason, Limit, Packet, QueueConfig};
use super::cobalt::inverse_sqrt;
use super::*;
use crate::wire::{ipv4_checksum, synthetic_ipv4_udp, Ecn};

fn cake(limit: usize, p: CakeParams) -> Harness {
    Harness::new(QueueConfig::Cake(Limit::Packets(limit), p))
}

/// A UDP/IPv4 packet of `len` bytes from host `host` (10.0.0.host), source port 1024 + `port`,
/// carrying `dscp`; its tag is `tag`.
fn packet(h: &mut Harness, host: u32, port: u32, dscp: u8, ecn: Ecn, len: u32, tag: u32) -> Packet {
    packet_to(h, host, 254, port, dscp, ecn, len, tag)
}

/// As `packet`, to 10.0.1.`dst`.
#[allow(clippy::too_many_arguments)]
fn packet_to(h: &mut Harness, host: u32, dst: u8, port: u32, dscp: u8, ecn: Ecn, len: u32, tag: u32) -> Packet {
    let mut p = h.packet((port << 24) | host, ecn, len);
    let f = &mut p.data;
    f[30..34].copy_from_slice(&[10, 0, 1, dst]);
    f[15] = dscp << 2 | ecn as u8;
    f[24] = 0;
    f[25] = 0;
    let sum = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    p.tag = tag;
    p
}

fn put(h: &mut Harness, t: u64, host: u32, port: u32, dscp: u8, len: u32, tag: u32) {
    let p = packet(h, host, port, dscp, Ecn::NotEct, len, tag);
    h.offer(t, p);
}

fn frame_with(dscp: u8) -> Vec<u8> {
    let mut f = synthetic_ipv4_udp(1, Ecn::Ect0, 100);
    f[15] = dscp << 2 | Ecn::Ect0 as u8;
    f
}

#[test]
fn inverse_square_roots_follow_count_as_count_grows() {
    // The table below 16 (within 1e-9 of 2^32 / sqrt(count)), then one Newton step per count,
    // which lags a little behind (0.16% at 16) and catches up.
    for (count, within) in [(1u32, 1e-9), (2, 1e-9), (3, 1e-9), (10, 1e-9), (15, 1e-9), (16, 2e-3), (17, 2e-3), (30, 1e-3), (100, 1e-3), (1000, 1e-3)] {
        let want = (2f64.powi(32) / (count as f64).sqrt()).min(u32::MAX as f64);
        let got = inverse_sqrt(count) as f64;
        assert!((got / want - 1.0).abs() < within, "count {count}: {got} against {want}");
    }
}

#[test]
fn named_codepoints_land_in_linux_tins() {
    use DiffservMode::*;
    let (le, cs1, af11, cs2, af21, af31, cs3, cs4, af41, cs5, va, ef, cs6, cs7, tos4) =
        (1, 8, 10, 16, 18, 26, 24, 32, 34, 40, 44, 46, 48, 56, 4);
    // diffserv3: best effort 0, bulk 1, voice 2.
    for (d, tin) in [(0, 0), (le, 1), (cs1, 1), (af11, 0), (cs2, 0), (af41, 0), (cs5, 0), (va, 2), (ef, 2), (cs6, 2), (cs7, 2), (tos4, 2)] {
        assert_eq!(Diffserv3.tin_of(d), tin, "diffserv3 dscp {d}");
    }
    // diffserv4: best effort 0, bulk 1, video 2, voice 3.
    for (d, tin) in [(0, 0), (le, 1), (cs1, 1), (af11, 0), (tos4, 2), (cs2, 2), (af21, 2), (cs3, 2), (af31, 2), (af41, 2), (cs4, 3), (cs5, 3), (va, 3), (ef, 3), (cs6, 3), (cs7, 3)] {
        assert_eq!(Diffserv4.tin_of(d), tin, "diffserv4 dscp {d}");
    }
    for (d, tin) in [(le, 0), (0, 2), (2, 1), (cs1, 1), (af11, 1), (cs3, 3), (af31, 3), (af41, 3), (tos4, 4), (af21, 4), (cs2, 5), (cs4, 6), (cs5, 6), (va, 6), (ef, 6), (cs6, 7), (cs7, 7)] {
        assert_eq!(Diffserv8.tin_of(d), tin, "diffserv8 dscp {d}");
    }
    for d in 0..64 {
        assert_eq!(Precedence.tin_of(d), d as usize >> 3);
        assert_eq!(Besteffort.tin_of(d), 0);
        for mode in DiffservMode::ALL {
            assert!(mode.tin_of(d) < mode.tins(1).len(), "{mode:?} dscp {d}: no such tin");
        }
    }
}

/// All 64 codepoints of each mode against sch_cake's classes as its comments name them
/// (written from the class lists, not from the tables tins.rs holds).
#[test]
fn every_codepoint_goes_where_the_kernels_classes_say() {
    use DiffservMode::*;
    const LE: u8 = 1;
    const TOS2: u8 = 2;
    const TOS4: u8 = 4;
    const CS: [u8; 8] = [0, 8, 16, 24, 32, 40, 48, 56];
    let af = |class: u8| [class * 8 + 2, class * 8 + 4, class * 8 + 6];
    let (va, ef) = (44u8, 46u8);
    // (mode, [(tin, codepoints)], the tin of every other codepoint)
    let d3 = vec![(2, vec![CS[7], CS[6], ef, va, TOS4]), (1, vec![LE, CS[1]])];
    let d4 = vec![
        (3, vec![CS[7], CS[6], ef, va, CS[5], CS[4]]),
        (2, [af(4), af(3), af(2)].concat().into_iter().chain([CS[3], TOS4, CS[2]]).collect()),
        (1, vec![LE, CS[1]]),
    ];
    let d8 = vec![
        (7, vec![CS[6], CS[7]]),
        (6, vec![ef, va, CS[5], CS[4]]),
        (5, vec![CS[2]]),
        (4, af(2).into_iter().chain([TOS4]).collect()),
        (3, [af(4), af(3)].concat().into_iter().chain([CS[3]]).collect()),
        (1, af(1).into_iter().chain([TOS2, CS[1]]).collect()),
        (0, vec![LE]),
    ];
    for (mode, classes, rest) in [(Diffserv3, d3, 0), (Diffserv4, d4, 0), (Diffserv8, d8, 2)] {
        for d in 0..64u8 {
            let want = classes.iter().find(|(_, points)| points.contains(&d)).map_or(rest, |&(tin, _)| tin);
            assert_eq!(mode.tin_of(d), want, "{mode:?} dscp {d}");
        }
    }
}

#[test]
fn tins_get_linux_thresholds_quanta_and_targets() {
    // tc-cake(8)'s example: 100 Mbit/s, diffserv3, listed bulk, best effort, voice.
    let c = Cake::new(Limit::Packets(10240), CakeParams { bandwidth_bps: 100_000_000, ..Default::default() }, 1);
    let r = c.tin_reports();
    let got: Vec<_> = r.iter().map(|t| (t.name, t.threshold_bps, t.flow_quantum, t.target, t.interval)).collect();
    let (t5, i100) = (Duration::from_millis(5), Duration::from_millis(100));
    assert_eq!(got, vec![("Bulk", 6_250_000, 300, t5, i100), ("Best Effort", 100_000_000, 1514, t5, i100), ("Voice", 25_000_000, 762, t5, i100)]);
    assert_eq!(c.buffer_limit(), 5_000_000, "four intervals of 100 Mbit/s");
    // At 1 Mbit/s one MTU takes 12.1 ms: the target rises to 1.5 of it, the interval keeps its margin.
    let slow = Cake::new(Limit::Packets(10240), CakeParams { bandwidth_bps: 1_000_000, ..Default::default() }, 1);
    let be = &slow.tin_reports()[1];
    assert_eq!((be.target.nanos(), be.interval.nanos()), (18_168_000, 113_168_000));
    let bulk = &slow.tin_reports()[0];
    // Bulk's 1/16 is 7812 bytes/s (integer shifts, as Linux): an MTU in 193.8 ms.
    assert_eq!((bulk.target.nanos(), bulk.interval.nanos()), (290_706_604, 581_413_208));
    let d4: Vec<_> = Cake::new(Limit::Packets(10240), CakeParams { bandwidth_bps: 80_000_000, diffserv: DiffservMode::Diffserv4, ..Default::default() }, 1)
        .tin_reports()
        .iter()
        .map(|t| (t.name, t.threshold_bps))
        .collect();
    assert_eq!(d4, vec![("Bulk", 5_000_000), ("Best Effort", 80_000_000), ("Video", 40_000_000), ("Voice", 20_000_000)]);
    let d8: Vec<u32> = DiffservMode::Diffserv8.tins(1).iter().map(|t| t.quantum).collect();
    assert_eq!(d8, vec![256, 224, 196, 171, 149, 130, 113, 98]);
}

#[test]
fn cobalt_signals_at_interval_then_interval_over_root_count() {
    let p = CobaltParams::for_rate(Duration::from_millis(5), Duration::from_millis(100), 1514, 0);
    let mut v = CobaltVars::default();
    let mut rng = crate::rng::Rng::new(1);
    let mut signals = Vec::new();
    // A standing queue of 10 ms from t = 0, one packet a millisecond.
    for ms in 0..400u64 {
        if v.should_drop(&p, Instant(ms * MS), Duration::from_millis(10), 0, &mut rng) == Signal::Codel {
            signals.push(ms);
        }
    }
    // First after an interval, then 100/sqrt(2), 100/sqrt(3), ... ms apart (within a tick).
    let gaps: Vec<u64> = signals.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(signals[0], 100);
    for (k, gap) in gaps.iter().take(5).enumerate() {
        let want = 100.0 / ((k + 2) as f64).sqrt();
        assert!((*gap as f64 - want).abs() <= 1.0, "gap {k}: {gap} ms, want {want:.1}");
    }
    // The queue recovers: count steps down once per spacing, not at once.
    let count = v.count;
    v.should_drop(&p, Instant(400 * MS), Duration::from_millis(1), 0, &mut rng);
    assert!(v.count >= count - 2 && v.count > 0, "count {count} -> {}", v.count);
    for ms in 401..3000u64 {
        v.should_drop(&p, Instant(ms * MS), Duration::from_millis(1), 0, &mut rng);
    }
    assert_eq!(v.count, 0);
}

#[test]
fn blue_ramps_on_overflow_and_decays_on_empty() {
    let p = CobaltParams::for_rate(Duration::from_millis(5), Duration::from_millis(100), 1514, 0);
    let mut v = CobaltVars::default();
    assert!(v.queue_full(&p, Instant(10 * MS)), "BLUE becomes active");
    assert!(!v.queue_full(&p, Instant(12 * MS)), "at most one step a target");
    assert_eq!(v.p_drop, 1 << 24);
    for k in 1..=10u64 {
        v.queue_full(&p, Instant((10 + 6 * k) * MS));
    }
    assert_eq!(v.p_drop, 11 << 24);
    v.queue_empty(&p, Instant(80 * MS));
    assert_eq!(v.p_drop, (11 << 24) - (1 << 20));
    // 16 decrements per increment: back to quiet after 176 - 1 more steps a target apart.
    let mut quiet = false;
    for k in 1..=175u64 {
        quiet = v.queue_empty(&p, Instant((80 + 6 * k) * MS));
    }
    assert!(quiet && v.p_drop == 0);
}

#[test]
fn blue_drops_a_share_of_an_unresponsive_flows_packets() {
    let p = CobaltParams::for_rate(Duration::from_millis(5), Duration::from_millis(100), 1514, 0);
    let mut v = CobaltVars { p_drop: 1 << 30, ..Default::default() }; // a quarter
    let mut rng = crate::rng::Rng::new(3);
    let n = 40_000;
    let drops = (0..n).filter(|&k| v.should_drop(&p, Instant(k * US), Duration::ZERO, 0, &mut rng) == Signal::Blue).count();
    // Binomial(40000, 1/4): sd 87; 4.6 sd either side has odds below 1e-5.
    assert!((9_600..=10_400).contains(&drops), "{drops}");
}

#[test]
fn host_isolation_shares_between_hosts_before_flows() {
    // Host 1 with one flow, host 2 with eight, all backlogged; each host to its own server, or
    // both to one. Host 1's share of the packets sent:
    for (mode, one_server, share) in [
        (FlowMode::TripleIsolate, false, 0.5),
        (FlowMode::DualSrchost, false, 0.5),
        (FlowMode::DualDsthost, false, 0.5),
        (FlowMode::Srchost, false, 0.5),
        (FlowMode::Hosts, false, 0.5),
        (FlowMode::Flows, false, 1.0 / 9.0),
        // One server: its nine flows share it, so triple isolation is fair per flow, and only
        // fairness between sources alone still shares by host.
        (FlowMode::TripleIsolate, true, 1.0 / 9.0),
        (FlowMode::DualSrchost, true, 0.5),
        (FlowMode::Dsthost, true, 1.0 / 9.0), // one queue for everything: the order they came in
    ] {
        let mut h = cake(100_000, CakeParams { flow_mode: mode, ..Default::default() });
        for k in 0..2000u32 {
            let p = packet_to(&mut h, 1, 1, 0, 0, Ecn::NotEct, 1000, 1);
            h.offer(0, p);
            for port in 0..8 {
                if k < 400 {
                    let p = packet_to(&mut h, 2, if one_server { 1 } else { 2 }, port + 1, 0, Ecn::NotEct, 1000, 2);
                    h.offer(0, p);
                }
            }
        }
        let mut sent = [0u64; 3];
        for _ in 0..2000 {
            let p = h.dequeue(MS).unwrap(); // sojourn 1 ms: no AQM
            sent[p.tag as usize] += 1;
        }
        let got = sent[1] as f64 / 2000.0;
        assert!((got - share).abs() < 0.03, "{mode:?}, one server {one_server}: host 1 got {got:.3}, want {share:.3}");
    }
}

#[test]
fn a_sparse_flow_goes_before_the_bulk_ones() {
    let mut h = cake(10_000, CakeParams::default());
    for k in 0..50 {
        put(&mut h, 0, 2, k % 4, 0, 1500, 2);
    }
    for _ in 0..10 {
        h.dequeue(MS);
    }
    put(&mut h, MS, 1, 0, 0, 100, 1); // a ping
    assert_eq!(h.dequeue(2 * MS).map(|p| p.tag), Some(1));
}

#[test]
fn unshaped_tins_share_by_weight() {
    let mut h = cake(100_000, CakeParams::default()); // diffserv3: best effort 1024, bulk 64
    for _ in 0..3000 {
        put(&mut h, 0, 1, 0, 0, 1000, 0);
        put(&mut h, 0, 2, 0, 8, 1000, 1); // CS1: bulk
    }
    let bulk = (0..1700).filter(|_| h.dequeue(MS).unwrap().tag == 1).count();
    // 64 of 1088 bytes a round.
    assert!((bulk as f64 / 1700.0 - 64.0 / 1088.0).abs() < 0.01, "bulk got {bulk} of 1700");
}

#[test]
fn shaped_voice_is_held_to_its_threshold_and_best_effort_gets_the_rest() {
    // 10 Mbit/s diffserv3: voice first while under 2.5 Mbit/s.
    let p = CakeParams { bandwidth_bps: 10_000_000, ..Default::default() };
    let mut h = cake(100_000, p);
    for _ in 0..4000 {
        put(&mut h, 0, 1, 0, 46, 1000, 1); // EF
        put(&mut h, 0, 2, 0, 0, 1000, 0);
    }
    let mut sent = [0u64; 2];
    let mut t = 0;
    let mut last = 0;
    while t < 2000 * MS {
        match h.dequeue(t) {
            Some(pkt) => {
                sent[pkt.tag as usize] += 1;
                last = t;
            }
            None => t = h.q.ready_at().expect("packets held back have a time").nanos(),
        }
    }
    // 2 s at 10 Mbit/s: 2500 packets of 1000 bytes, a quarter of them voice.
    assert!((sent[0] + sent[1]).abs_diff(2500) <= 1, "{sent:?} by {last}");
    assert!((sent[1] as f64 / 2500.0 - 0.25).abs() < 0.01, "voice {sent:?}");
}

#[test]
fn the_shaper_paces_by_the_framed_length() {
    for (overhead, mpu, framing, wire, counted) in [
        (None, 0, Framing::None, 1000, 1000),
        (Some(18), 0, Framing::None, 1000, 1004),
        (Some(0), 64, Framing::None, 60, 64),
        (None, 0, Framing::Atm, 100, 159),
        (None, 0, Framing::Ptm, 100, 102),
        (Some(-64), 0, Framing::None, 60, 1),
    ] {
        let p = CakeParams { bandwidth_bps: 8_000_000, overhead, mpu, framing, ..Default::default() };
        assert_eq!(p.adjusted_len(wire), counted, "{overhead:?} {mpu} {framing:?}");
        let mut h = cake(1000, p);
        for _ in 0..3 {
            put(&mut h, 0, 1, 0, 0, wire, 0);
        }
        assert!(h.dequeue(0).is_some());
        assert!(h.dequeue(0).is_none(), "the shaper holds the second");
        // 8 Mbit/s is a byte a microsecond.
        assert_eq!(h.q.ready_at(), Some(Instant(counted as u64 * US)));
    }
}

#[test]
fn over_its_buffer_the_fattest_flow_loses_its_head_and_turns_blue() {
    let p = CakeParams { memory_limit_bytes: Some(20_000), ..Default::default() };
    let mut h = cake(10_000, p);
    for k in 0..25u32 {
        put(&mut h, 0, 1, 0, 0, 1000, 1); // the fat one
        if k < 5 {
            put(&mut h, 0, 2, 0, 0, 1000, 2);
        }
    }
    let drops = h.drops();
    assert!(!drops.is_empty() && drops.iter().all(|&(_, _, r)| r == DropReason::CakeOverflow));
    assert_eq!(h.q.stats().backlog_bytes, 20_000);
    let first = drops[0].1;
    assert_eq!(first, 0, "the fat flow's head, not the arrival");
    let c = h.q.stats();
    assert_eq!(c.drops.get(DropReason::CakeOverflow), 0 + drops.len() as u64);
}

#[test]
fn wash_clears_the_dscp_after_the_tin_is_chosen() {
    let mut h = cake(100, CakeParams { wash: true, diffserv: DiffservMode::Diffserv4, ..Default::default() });
    let p = packet(&mut h, 1, 0, 46, Ecn::Ect0, 200, 7);
    h.offer(0, p);
    let out = h.dequeue(0).unwrap();
    assert_eq!(crate::wire::dscp(&out.data), Some(0));
    assert_eq!(crate::wire::ecn(&out.data), Some(Ecn::Ect0));
    assert_eq!(ipv4_checksum(&out.data[14..34]), 0);
    let c = Cake::new(Limit::Packets(10), CakeParams { wash: true, diffserv: DiffservMode::Diffserv4, ..Default::default() }, 1);
    assert_eq!(c.classify_tin(&mut frame_with(46)), 3, "voice, chosen before the wash");
}

#[test]
fn the_accounting_holds_under_random_arrivals_in_every_mode() {
    use crate::rng::Rng;
    for (i, diffserv) in DiffservMode::ALL.into_iter().enumerate() {
        for (j, flow_mode) in FlowMode::ALL.into_iter().enumerate() {
            let shaped = (i + j) % 2 == 0;
            let p = CakeParams {
                bandwidth_bps: if shaped { 20_000_000 } else { 0 },
                diffserv,
                flow_mode,
                memory_limit_bytes: Some(60_000),
                ..Default::default()
            };
            let mut h = cake(80, p);
            let mut r = Rng::new((i * 8 + j) as u64 + 1);
            let (mut t, mut offered, mut out) = (0u64, 0u64, 0u64);
            for _ in 0..4000 {
                t += r.below_incl(400) * US / 2;
                if r.chance(0.7) {
                    let dscp = [0u8, 8, 46, 34, 1, 48][r.below_incl(5) as usize];
                    let ecn = [Ecn::NotEct, Ecn::Ect0][r.below_incl(1) as usize];
                    let host = 1 + r.below_incl(3) as u32;
                    let p = packet(&mut h, host, r.below_incl(6) as u32, dscp, ecn, [64, 576, 1514][r.below_incl(2) as usize], 0);
                    h.offer(t, p);
                    offered += 1;
                }
                if r.chance(0.5) && h.dequeue(t).is_some() {
                    out += 1;
                }
            }
            let mut end = t;
            while h.q.stats().backlog_pkts > 0 {
                end = end.max(h.q.ready_at().map_or(end, |i| i.nanos())) + 1;
                out += std::iter::from_fn(|| h.dequeue(end)).count() as u64;
            }
            assert_eq!(out + h.drops().len() as u64, offered, "{diffserv:?} {flow_mode:?}: one fate each");
            let c = h.q.stats();
            assert_eq!(c.marks.total(), h.marks().len() as u64);
        }
    }
}

/// Found by the fuzz target `config`: the buffer derived from the rate, four intervals of it,
/// overflowed its 64-bit product at the catalogue's own bounds (400 Gbit/s, a 10 s interval):
/// a panic in a debug build, a wrong buffer in a release one.
#[test]
fn the_buffer_of_the_fastest_rate_over_the_longest_interval_is_four_intervals_of_it() {
    let p = CakeParams { bandwidth_bps: 400_000_000_000, interval: Duration::from_millis(10_000), ..CakeParams::default() };
    // 50 GB/s for 40 s.
    assert_eq!(Cake::new(Limit::Bytes(1 << 50), p, 1).buffer_limit(), 2_000_000_000_000);
}
