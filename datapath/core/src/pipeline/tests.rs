//! Scripted-time tests: every expectation is exact to the nanosecond.

use super::*;
use crate::qdisc::Limit;
use crate::rate::Trace;

const MS: u64 = 1_000_000;

fn cfg(rate: Rate, delay_ns: u64, queue: QueueConfig) -> DirectionConfig {
    DirectionConfig {
        rate,
        delay: Duration(delay_ns),
        jitter: Duration::ZERO,
        loss: 0.0,
        queue,
        seed: 1,
        max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        ect1_rewrite: Vec::new(),
    }
}

fn frame(len: usize) -> Vec<u8> {
    vec![0xab; len]
}

/// Polls at `t` and returns (id, due time in ns) of what left.
fn poll_at(p: &mut Pipeline, t: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    p.poll(Instant(t), &mut out);
    check_identity(p);
    out.iter().map(|d| (d.packet.id, d.at.nanos())).collect()
}

/// arrivals = departures + every drop + backlog + in flight
fn check_identity(p: &Pipeline) {
    let (s, q) = (p.stats(), p.queue_stats());
    assert_eq!(
        s.arrivals,
        s.departures + s.drops.total() + q.drops.total() + q.backlog_pkts + p.in_flight(),
        "pipeline accounting"
    );
}

fn arrive(p: &mut Pipeline, t: u64, len: usize) {
    p.arrive(Instant(t), frame(len));
    check_identity(p);
}

#[test]
fn serialisation_and_delay_are_exact() {
    // 10 Mbit/s: a 1514-byte frame takes 1.2112 ms; 5 ms of delay after it.
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 5 * MS, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    for _ in 0..3 {
        arrive(&mut p, 0, 1514);
    }
    assert_eq!(p.next_deadline(), Some(Instant(1_211_200)));
    assert_eq!(p.next_departure(), Some(Instant(6_211_200)), "on the wire, then 5 ms of delay");
    assert_eq!(p.queue_stats().backlog_pkts, 2, "the first frame is on the wire, not in the queue");
    // One late poll: the schedule stays back to back in virtual time.
    let out = poll_at(&mut p, 20 * MS);
    assert_eq!(out, vec![(0, 6_211_200), (1, 7_422_400), (2, 8_633_600)]);
    assert_eq!(p.next_deadline(), None);
}

#[test]
fn polls_hand_out_only_what_is_due() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 5 * MS, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    arrive(&mut p, 0, 1514);
    arrive(&mut p, 0, 1514);
    assert!(poll_at(&mut p, 6_211_199).is_empty());
    assert_eq!(p.next_deadline(), Some(Instant(6_211_200)));
    assert_eq!(poll_at(&mut p, 6_211_200), vec![(0, 6_211_200)]);
    assert_eq!(p.next_deadline(), Some(Instant(7_422_400)));
}

#[test]
fn an_idle_link_starts_at_the_arrival() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 1_000_000_000 }, 0, QueueConfig::DropTail(Limit::Packets(10))), Instant(0));
    arrive(&mut p, 1_000, 1500);
    assert_eq!(poll_at(&mut p, 1_000_000), vec![(0, 13_000)]);
    arrive(&mut p, 2_000_000, 1500);
    assert_eq!(poll_at(&mut p, 3_000_000), vec![(1, 2_012_000)]);
}

#[test]
fn unlimited_rate_is_pure_delay() {
    let mut p = Pipeline::new(&cfg(Rate::Unlimited, 200_000, QueueConfig::DropTail(Limit::Packets(1))), Instant(0));
    for i in 0..5 {
        arrive(&mut p, 10 + i, 100);
    }
    assert_eq!(p.queue_stats().drops.total(), 0, "an unlimited link never queues");
    assert_eq!(poll_at(&mut p, MS), vec![(0, 200_010), (1, 200_011), (2, 200_012), (3, 200_013), (4, 200_014)]);
}

#[test]
fn tail_drop_limit_counts_waiting_packets() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 0, QueueConfig::DropTail(Limit::Packets(2))), Instant(0));
    for _ in 0..5 {
        arrive(&mut p, 0, 1514);
    }
    let q = p.queue_stats();
    assert_eq!((q.backlog_pkts, q.drops.get(DropReason::QueueFull)), (2, 2));
    assert_eq!(poll_at(&mut p, 10 * MS).len(), 3);
}

#[test]
fn byte_limit_and_drop_head() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 0, QueueConfig::DropHead(Limit::Bytes(3028))), Instant(0));
    for _ in 0..5 {
        arrive(&mut p, 0, 1514); // 0 on the wire, 1 and 2 queued, 3 and 4 push out 1 and 2
    }
    assert_eq!(p.queue_stats().drops.get(DropReason::HeadDrop), 2);
    let ids: Vec<u64> = poll_at(&mut p, 10 * MS).iter().map(|d| d.0).collect();
    assert_eq!(ids, vec![0, 3, 4]);
}

#[test]
fn runts_and_oversize_frames_never_reach_the_queue() {
    let mut p = Pipeline::new(&cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(10))), Instant(0));
    arrive(&mut p, 0, 0);
    arrive(&mut p, 0, 13);
    arrive(&mut p, 0, 14);
    arrive(&mut p, 0, 1518);
    arrive(&mut p, 0, 1519);
    arrive(&mut p, 0, 65_000);
    let s = p.stats();
    assert_eq!((s.drops.get(DropReason::Runt), s.drops.get(DropReason::Oversize)), (2, 2));
    assert_eq!(poll_at(&mut p, 0).len(), 2);
}

#[test]
fn loss_is_seeded_and_near_its_probability() {
    let run = |seed| {
        let mut c = cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(10)));
        c.loss = 0.1;
        c.seed = seed;
        let mut p = Pipeline::new(&c, Instant(0));
        let mut kept = Vec::new();
        for t in 0..20_000u64 {
            arrive(&mut p, t, 100);
            kept.extend(poll_at(&mut p, t).into_iter().map(|d| d.0));
        }
        (p.stats().drops.get(DropReason::Loss), kept)
    };
    let (lost, kept) = run(42);
    assert!((1_800..2_200).contains(&lost), "{lost}");
    assert_eq!(run(42), (lost, kept.clone()), "same seed, same losses");
    assert_ne!(run(43).1, kept);
}

#[test]
fn jitter_stays_in_bounds_and_never_reorders() {
    let mut c = cfg(Rate::Unlimited, 10 * MS, QueueConfig::DropTail(Limit::Packets(10)));
    c.jitter = Duration(2 * MS);
    // 5 ms apart, wider than the 4 ms jitter range: no clamping, so the bounds are exact.
    let mut p = Pipeline::new(&c, Instant(0));
    for i in 0..5_000u64 {
        arrive(&mut p, i * 5 * MS, 100);
    }
    let mut out = Vec::new();
    p.poll(Instant(5_000 * 5 * MS + 13 * MS), &mut out);
    check_identity(&p);
    let delays: Vec<u64> = out.iter().map(|d| d.at.nanos() - d.packet.id * 5 * MS).collect();
    let (lo, hi) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
    assert!(lo >= 8 * MS && lo < 8 * MS + 10_000, "{lo}");
    assert!(hi <= 12 * MS && hi > 12 * MS - 10_000, "{hi}");
    // Arrivals 1 us apart: jitter would reorder them; the delay line must not.
    let mut p = Pipeline::new(&c, Instant(0));
    for i in 0..1000 {
        arrive(&mut p, i * 1_000, 100);
    }
    out.clear();
    p.poll(Instant(20 * MS), &mut out);
    check_identity(&p);
    assert_eq!(out.len(), 1000);
    assert!(out.windows(2).all(|w| w[0].packet.id < w[1].packet.id && w[0].at <= w[1].at));
}

#[test]
fn trace_opportunities_carry_1504_bytes() {
    // Opportunities at 1, 2, 3, ... ms (period 2 ms, wrapping).
    let trace = Trace::parse("1\n2\n").unwrap();
    let mut p = Pipeline::new(&cfg(Rate::Trace(trace), MS, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    for _ in 0..4 {
        arrive(&mut p, 0, 500); // three fit in the first opportunity (1500 of 1504 bytes)
    }
    arrive(&mut p, 0, 1504);
    assert_eq!(p.next_deadline(), Some(Instant(MS)));
    let out = poll_at(&mut p, 10 * MS);
    // 4th frame: 4 bytes at 1 ms, the rest at 2 ms; the 1504-byte frame ends at 3 ms.
    assert_eq!(out, vec![(0, 2 * MS), (1, 2 * MS), (2, 2 * MS), (3, 3 * MS), (4, 4 * MS)]);
}

#[test]
fn trace_wastes_opportunities_while_idle() {
    let trace = Trace::parse("1\n2\n").unwrap();
    let mut p = Pipeline::new(&cfg(Rate::Trace(trace), 0, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    arrive(&mut p, 10 * MS + 500_000, 1000);
    assert_eq!(p.next_deadline(), Some(Instant(11 * MS)));
    arrive(&mut p, 11 * MS, 1000); // arrives exactly at an opportunity: shares it
    assert_eq!(poll_at(&mut p, 12 * MS), vec![(0, 11 * MS), (1, 12 * MS)]);
    // Queue empty again: nothing to wait for.
    assert_eq!(p.next_deadline(), None);
    arrive(&mut p, 15 * MS, 100); // opportunity exactly at 15 ms
    assert_eq!(poll_at(&mut p, 15 * MS), vec![(2, 15 * MS)]);
}

#[test]
fn trace_rate_matches_its_average() {
    // 1 opportunity per ms = 1504 bytes/ms = 12.032 Mbit/s; 10 s of saturating 1504-byte frames.
    let trace = Trace::parse("1\n").unwrap();
    let mut p = Pipeline::new(&cfg(Rate::Trace(trace), 0, QueueConfig::DropTail(Limit::Packets(20_000))), Instant(0));
    for _ in 0..15_000 {
        arrive(&mut p, 0, 1504);
    }
    assert_eq!(poll_at(&mut p, 10_000 * MS).len(), 10_000);
}

#[test]
fn queue_log_records_backlog_and_sojourn() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 0, QueueConfig::DropTail(Limit::Packets(1))), Instant(0));
    p.record_events(true);
    for _ in 0..3 {
        arrive(&mut p, 0, 1514);
    }
    poll_at(&mut p, 5 * MS);
    let mut ev = Vec::new();
    p.take_events(&mut ev);
    let brief: Vec<(u64, EventKind, u64, u32)> = ev.iter().map(|e| (e.t.nanos(), e.kind, e.value, e.backlog_pkts)).collect();
    assert_eq!(
        brief,
        vec![
            (0, EventKind::Enqueue, 1514, 1),
            (0, EventKind::Dequeue, 0, 0),
            (0, EventKind::Enqueue, 1514, 1),
            (0, EventKind::Drop, 1514, 1),
            (1_211_200, EventKind::Dequeue, 1_211_200, 0),
        ]
    );
    assert_eq!(ev[3].reason, DropReason::QueueFull as u8);
}

/// By `seed`: a constant rate from `lo` to `lo + span` bit/s, a trace, or no limit.
fn random_rate(seed: u64, rng: &mut Rng, lo: u64, span: u64) -> Rate {
    match seed % 3 {
        0 => Rate::Constant { bps: lo + rng.below_incl(span) },
        1 => Rate::Trace(Trace::parse("1\n1\n4\n").unwrap()),
        _ => Rate::Unlimited,
    }
}

#[test]
fn accounting_holds_under_random_traffic() {
    for seed in 0..20u64 {
        let mut rng = Rng::new(seed);
        let queue = if seed % 2 == 0 { QueueConfig::DropTail(Limit::Packets(5)) } else { QueueConfig::DropHead(Limit::Bytes(6000)) };
        let rate = random_rate(seed, &mut rng, 1_000_000, 100_000_000);
        let mut c = cfg(rate, rng.below_incl(5 * MS), queue);
        c.loss = 0.05;
        c.jitter = Duration(c.delay.nanos() / 2);
        c.seed = seed;
        let mut p = Pipeline::new(&c, Instant(0));
        let mut t = 0;
        let mut last_at = 0;
        for _ in 0..3_000 {
            t += rng.below_incl(200_000);
            if rng.chance(0.7) {
                arrive(&mut p, t, 1 + rng.below_incl(1600) as usize);
            }
            for (_, at) in poll_at(&mut p, t) {
                assert!(at <= t && at >= last_at, "departures in order and never early");
                last_at = at;
            }
            if let Some(d) = p.next_deadline() {
                assert!(d.nanos() > t, "a deadline is in the future after a poll");
            }
        }
    }
}

#[test]
fn departures_are_counted_per_dscp() {
    let mut p = Pipeline::new(&cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    for (tos, count) in [(0xb8u8, 3), (0x20, 2), (0x00, 1)] {
        for _ in 0..count {
            let mut f = crate::wire::synthetic_ipv4_udp(1, crate::wire::Ecn::NotEct, 200);
            f[15] = tos; // the checksum is not checked on the way through
            f.resize(200, 0);
            p.arrive(Instant(0), f);
        }
    }
    p.arrive(Instant(0), frame(100)); // not IP: counted as a departure, under no codepoint
    poll_at(&mut p, MS);
    let s = p.stats();
    assert_eq!((s.departures, s.departures_by_dscp[46], s.departures_by_dscp[8], s.departures_by_dscp[0]), (7, 3, 2, 1));
    assert_eq!(s.departures_by_dscp.iter().sum::<u64>(), 6);
}

const TCP: u8 = 6;
const UDP: u8 = 17;

/// An Ethernet + IPv4 frame of `len` bytes from `src` to `dst` carrying `ecn`, of protocol
/// `proto`, its header checksum valid.
fn ipv4_frame(src: [u8; 4], dst: [u8; 4], proto: u8, ecn: crate::wire::Ecn, len: usize) -> Vec<u8> {
    let mut f = crate::wire::synthetic_ipv4_udp(1, ecn, len);
    f[23] = proto;
    f[26..30].copy_from_slice(&src);
    f[30..34].copy_from_slice(&dst);
    f[24..26].copy_from_slice(&[0, 0]);
    let sum = crate::wire::ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f.resize(len, 0);
    f
}

#[test]
fn departures_are_counted_per_ecn_codepoint() {
    use crate::wire::Ecn;
    let mut p = Pipeline::new(&cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(100))), Instant(0));
    for (ecn, count) in [(Ecn::NotEct, 4), (Ecn::Ect1, 3), (Ecn::Ect0, 2), (Ecn::Ce, 1)] {
        for _ in 0..count {
            p.arrive(Instant(0), ipv4_frame([10, 0, 0, 1], [10, 0, 0, 2], TCP, ecn, 200));
        }
    }
    p.arrive(Instant(0), frame(100)); // not IP: a departure under no codepoint
    poll_at(&mut p, MS);
    let s = p.stats();
    assert_eq!((s.departures, s.departures_by_ecn), (11, [4, 3, 2, 1]), "indexed by the ECN bits");
    assert_eq!(s.ect1_rewritten, 0, "no pair to rewrite");
}

#[test]
fn only_ect0_packets_of_a_listed_pair_become_ect1_on_arrival() {
    use crate::wire::{ecn, ipv4_checksum, Ecn};
    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    const C: [u8; 4] = [10, 0, 0, 3];
    let mut c = cfg(Rate::Constant { bps: 10_000_000 }, MS, QueueConfig::DropTail(Limit::Packets(100)));
    c.ect1_rewrite = vec![Ipv4Pair { src: A, dst: B }];
    let mut p = Pipeline::new(&c, Instant(0));
    p.record_events(true);
    // (from, to, protocol, codepoint, what leaves): only A -> B's TCP ECT(0) changes; the
    // reverse (B -> A: the receiver's ACKs), other pairs, a probe between A and B (UDP) and
    // every other codepoint are left alone.
    let cases = [
        (A, B, TCP, Ecn::Ect0, Ecn::Ect1),
        (A, B, TCP, Ecn::Ect0, Ecn::Ect1),
        (A, B, TCP, Ecn::NotEct, Ecn::NotEct),
        (A, B, TCP, Ecn::Ect1, Ecn::Ect1),
        (A, B, TCP, Ecn::Ce, Ecn::Ce),
        (B, A, TCP, Ecn::Ect0, Ecn::Ect0),
        (A, C, TCP, Ecn::Ect0, Ecn::Ect0),
        (C, B, TCP, Ecn::Ect0, Ecn::Ect0),
        (A, B, UDP, Ecn::Ect0, Ecn::Ect0),
    ];
    for (i, &(src, dst, proto, codepoint, _)) in cases.iter().enumerate() {
        p.arrive(Instant(i as u64 * 1000), ipv4_frame(src, dst, proto, codepoint, 1000));
        check_identity(&p);
    }
    // On arrival, before the queue: rewritten by the time the first frame is on the wire.
    assert_eq!(p.stats().ect1_rewritten, 2);
    let mut out = Vec::new();
    p.poll(Instant(20 * MS), &mut out);
    assert_eq!(out.len(), cases.len());
    for (d, &(.., want)) in out.iter().zip(&cases) {
        assert_eq!(ecn(&d.packet.data), Some(want), "packet {}", d.packet.id);
        assert_eq!(ipv4_checksum(&d.packet.data[14..34]), 0, "packet {}: header checksum", d.packet.id);
    }
    let s = p.stats();
    assert_eq!(s.ect1_rewritten, 2);
    assert_eq!(s.departures_by_ecn, [1, 3, 4, 1], "not-ECT, ECT(1), ECT(0), CE");
    assert_eq!(s.arrivals, 9);
}

#[test]
fn a_rewritten_frame_is_counted_before_loss_and_an_oversize_one_is_not_rewritten() {
    use crate::wire::{ecn, Ecn};
    let pair = Ipv4Pair { src: [10, 0, 0, 1], dst: [10, 0, 0, 2] };
    let mut c = cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(100)));
    c.ect1_rewrite = vec![pair];
    c.loss = 0.5;
    let mut p = Pipeline::new(&c, Instant(0));
    p.record_drops(true);
    for t in 0..1000 {
        p.arrive(Instant(t), ipv4_frame(pair.src, pair.dst, TCP, Ecn::Ect0, 100));
    }
    let (mut out, mut drops) = (Vec::new(), Vec::new());
    p.poll(Instant(1000), &mut out);
    p.take_drops(&mut drops);
    let s = p.stats();
    assert_eq!(s.ect1_rewritten, 1000, "every arrival, the lost ones too");
    assert_eq!(s.drops.get(DropReason::Loss) as usize, drops.len());
    assert!((400..600).contains(&drops.len()), "{}", drops.len());
    assert!(drops.iter().all(|d| ecn(&d.packet.data) == Some(Ecn::Ect1)), "lost as it entered: ECT(1)");
    assert_eq!(s.departures_by_ecn, [0, out.len() as u64, 0, 0]);
    // A frame the link cannot carry is dropped untouched.
    let mut c = cfg(Rate::Unlimited, 0, QueueConfig::DropTail(Limit::Packets(100)));
    c.ect1_rewrite = vec![pair];
    c.max_frame_bytes = 200;
    let mut p = Pipeline::new(&c, Instant(0));
    p.arrive(Instant(0), ipv4_frame(pair.src, pair.dst, TCP, Ecn::Ect0, 300));
    assert_eq!((p.stats().ect1_rewritten, p.stats().drops.get(DropReason::Oversize)), (0, 1));
}

#[test]
fn kept_drops_match_the_drop_counters_and_the_log() {
    // Random loss before the queue, a 5-packet tail-drop queue behind a 1 Mbit/s serialiser,
    // and CoDel in a second run: every drop comes out whole, stamped as the log stamps it.
    for queue in [QueueConfig::DropTail(Limit::Packets(5)), QueueConfig::Codel(Limit::Packets(1000), Default::default())] {
        let mut c = cfg(Rate::Constant { bps: 1_000_000 }, MS, queue);
        c.loss = 0.1;
        let mut p = Pipeline::new(&c, Instant(0));
        p.record_events(true);
        p.record_drops(true);
        let mut kept = Vec::new();
        for i in 0..400u64 {
            let mut f = frame(1000);
            f[14] = i as u8; // a mark of the frame's own, to check that the bytes come out unchanged
            p.arrive(Instant(i * 2 * MS / 3), f);
            p.take_drops(&mut kept);
        }
        poll_at(&mut p, 2_000 * MS);
        p.take_drops(&mut kept);
        let (s, q) = (p.stats(), p.queue_stats());
        assert_eq!(kept.len() as u64, s.drops.total() + q.drops.total());
        for r in DropReason::ALL {
            assert_eq!(kept.iter().filter(|d| d.reason == r).count() as u64, s.drops.get(r) + q.drops.get(r), "{}", r.name());
        }
        assert!(s.drops.get(DropReason::Loss) > 0);
        assert!(kept.iter().any(|d| d.reason != DropReason::Loss), "the queue dropped too");
        let mut events = Vec::new();
        p.take_events(&mut events);
        let logged: Vec<(u64, u64)> = events.iter().filter(|e| e.kind == EventKind::Drop).map(|e| (e.packet.id, e.t.nanos())).collect();
        let captured: Vec<(u64, u64)> = kept.iter().map(|d| (d.packet.id, d.at.nanos())).collect();
        assert_eq!(captured, logged, "the same drops, in the same order, at the same times");
        for d in &kept {
            assert_eq!((d.packet.data.len(), d.packet.data[14]), (1000, d.packet.id as u8));
        }
    }
}

#[test]
fn drops_are_not_kept_unless_asked() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 1_000_000 }, 0, QueueConfig::DropTail(Limit::Packets(1))), Instant(0));
    for _ in 0..10 {
        arrive(&mut p, 0, 1000);
    }
    let mut kept = Vec::new();
    p.take_drops(&mut kept);
    assert!(kept.is_empty() && p.queue_stats().drops.total() == 8);
}

/// What lets a link thread sleep deaf to arrivals until its next wake-up (bloatlab-link's
/// direction.rs): a packet arriving at `t` never leaves before the next departure the pipeline
/// named just before, nor before `t` plus the shortest delay, whatever the discipline (a fair
/// queue's new flow goes first), rate, jitter or loss.
#[test]
fn no_arrival_leaves_before_the_departure_named_before_it() {
    use crate::qdisc::{CakeParams, CodelParams, DualPi2Params, FqCodelParams};
    use crate::wire::{synthetic_ipv4_udp, Ecn};
    for seed in 0..52u64 {
        let mut rng = Rng::new(seed);
        let limit = Limit::Packets(20);
        let queue = match seed % 5 {
            // Its L queue goes first: half the flows L4S.
            _ if seed >= 40 => QueueConfig::DualPi2(limit, DualPi2Params::default()),
            0 => QueueConfig::DropTail(limit),
            1 => QueueConfig::DropHead(limit),
            2 => QueueConfig::Codel(limit, CodelParams::default()),
            3 => QueueConfig::FqCodel(limit, FqCodelParams::default()),
            _ => QueueConfig::Cake(limit, CakeParams::default()),
        };
        let ecn_of = |flow: u32| if seed >= 40 && flow % 2 == 0 { Ecn::Ect1 } else { Ecn::NotEct };
        let rate = random_rate(seed, &mut rng, 10_000_000, 990_000_000);
        let mut c = cfg(rate, rng.below_incl(5 * MS), queue);
        c.loss = 0.02;
        c.jitter = Duration(c.delay.nanos() * (seed % 4) / 3);
        c.seed = seed;
        let mut p = Pipeline::new(&c, Instant(0));
        let shortest = p.shortest_delay().nanos();
        let mut earliest = Vec::new(); // by packet id: the soonest it may leave
        let (mut t, mut departures) = (0, 0);
        for _ in 0..4_000 {
            t += rng.below_incl(150_000);
            if rng.chance(0.7) {
                let named = p.next_departure().map_or(0, |d| d.nanos());
                earliest.push(named.max(t + shortest));
                let len = 60 + rng.below_incl(1400) as usize;
                let flow = rng.below_incl(6) as u32;
                p.arrive_with(Instant(t), synthetic_ipv4_udp(flow, ecn_of(flow), len), len as u32, 0);
            }
            for (id, at) in poll_at(&mut p, t) {
                assert!(at >= earliest[id as usize], "seed {seed}: packet {id} left at {at}, before {}", earliest[id as usize]);
                departures += 1;
            }
        }
        assert!(departures > 100, "seed {seed}: only {departures} left");
    }
}

/// What lets a link thread wake only for departures (bloatlab-link's direction.rs): what leaves,
/// and when, does not depend on when `poll` runs. One pipeline is polled at every deadline, its
/// twin only as packets arrive and once at the end; both see the same arrivals.
#[test]
fn what_leaves_does_not_depend_on_when_poll_runs() {
    use crate::qdisc::{CakeParams, CodelParams, DualPi2Params, FqCodelParams};
    use crate::wire::{synthetic_ipv4_udp, Ecn};
    for seed in 0..72u64 {
        let mut rng = Rng::new(seed);
        let limit = Limit::Packets(30);
        // CAKE with its own shaper, below the link's rate or a trace's: it holds packets back.
        let shaped = CakeParams { bandwidth_bps: 2_000_000 + rng.below_incl(20_000_000), ..CakeParams::default() };
        let queue = match seed % 6 {
            0 => QueueConfig::DropTail(limit),
            1 => QueueConfig::Codel(limit, CodelParams::default()),
            2 => QueueConfig::FqCodel(limit, FqCodelParams::default()),
            3 => QueueConfig::Cake(limit, CakeParams::default()),
            4 => QueueConfig::Cake(limit, shaped),
            // Its updates run on a timer, caught up at events: polls must not change them.
            _ => QueueConfig::DualPi2(limit, DualPi2Params::default()),
        };
        let ecn_of = |flow: u32| if seed % 6 == 5 && flow % 2 == 0 { Ecn::Ect1 } else { Ecn::NotEct };
        let rate = random_rate(seed / 6, &mut rng, 5_000_000, 100_000_000);
        let mut c = cfg(rate, rng.below_incl(5 * MS), queue);
        c.loss = 0.02;
        c.jitter = Duration(c.delay.nanos() * (seed % 3) / 4);
        c.seed = seed;
        let (mut every, mut sparse) = (Pipeline::new(&c, Instant(0)), Pipeline::new(&c, Instant(0)));
        let (mut left_every, mut left_sparse) = (Vec::new(), Vec::new());
        let mut t = 0;
        for _ in 0..2_000 {
            t += rng.below_incl(400_000);
            while let Some(d) = every.next_deadline().filter(|d| d.nanos() <= t) {
                left_every.extend(poll_at(&mut every, d.nanos()));
            }
            let len = 60 + rng.below_incl(1400) as usize;
            let flow = rng.below_incl(6) as u32;
            every.arrive_with(Instant(t), synthetic_ipv4_udp(flow, ecn_of(flow), len), len as u32, 0);
            sparse.arrive_with(Instant(t), synthetic_ipv4_udp(flow, ecn_of(flow), len), len as u32, 0);
            left_every.extend(poll_at(&mut every, t));
        }
        let end = t + 10_000 * MS;
        while let Some(d) = every.next_deadline().filter(|d| d.nanos() <= end) {
            left_every.extend(poll_at(&mut every, d.nanos()));
        }
        left_sparse.extend(poll_at(&mut sparse, end));
        assert!(left_every.len() > 100, "seed {seed}: only {} left", left_every.len());
        assert_eq!(left_every, left_sparse, "seed {seed}: departures differ");
    }
}

#[test]
fn queue_log_records_dualpi2_p_at_each_update_time() {
    use crate::qdisc::{prob_fixed, DualPi2Params};
    // 40 frames at 0 through 10 Mbit/s (1.2112 ms each): the queue drains by 48.448 ms. PI2
    // updates every 16 ms from the first frame, each run at the first dequeue after it, on the
    // head's wait at the update's own time.
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 0, QueueConfig::DualPi2(Limit::Packets(100), DualPi2Params::default())), Instant(0));
    p.record_events(true);
    for _ in 0..40 {
        arrive(&mut p, 0, 1514);
    }
    poll_at(&mut p, 100 * MS);
    // Idle until 1 s: the update at 64 ms (run at the arrival) takes p' to 0; none after it.
    arrive(&mut p, 1000 * MS, 1514);
    poll_at(&mut p, 2000 * MS);
    arrive(&mut p, 3_600_000 * MS, 1514);
    poll_at(&mut p, 3_600_100 * MS);
    let mut ev = Vec::new();
    p.take_events(&mut ev);
    let probs: Vec<&Event> = ev.iter().filter(|e| e.kind == EventKind::Probability).collect();
    // RFC 9332's update with Linux's gains (alpha 41/256, beta 819/256), delays in seconds.
    let (alpha, beta, target) = (41.0 / 256.0, 819.0 / 256.0, 0.015);
    let update = |prob: f64, q: f64, last: f64| (prob + alpha * (q - target) + beta * (q - last)).clamp(0.0, 1.0);
    let p16 = update(0.0, 0.016, 0.0); // the head has waited 16 ms
    let p32 = update(p16, 0.032, 0.016);
    let p48 = update(p32, 0.0, 0.032); // empty: the last frame left the queue at 47.2368 ms
    let p64 = update(p48, 0.0, 0.0);
    assert!(p48 > 0.0 && p64 == 0.0, "{p48} {p64}");
    // (time, value, backlog at that time): 14 frames have left the queue by 16 ms, 27 by 32.
    let want = [(0, 0.0, 0), (16 * MS, p16, 26), (32 * MS, p32, 13), (48 * MS, p48, 0), (64 * MS, 0.0, 0)];
    assert_eq!(probs.len(), want.len(), "{probs:?}");
    for (e, (t, prob, backlog)) in probs.iter().zip(want) {
        assert_eq!((e.t.nanos(), e.backlog_pkts, e.backlog_bytes, e.reason), (t, backlog, backlog * 1514, 0), "{e:?}");
        assert!(e.value.abs_diff(prob_fixed(prob)) <= 1, "at {t}: {} vs {prob}", e.value);
    }
    assert!(probs[2].value > probs[1].value && probs[1].value > 0);
    // Each record goes out with the operation that ran its update, later than its own time:
    // the 16 ms update with the dequeue at 16.9568 ms, the 64 ms one with the arrival at 1 s.
    let after = |t: u64| ev.iter().position(|e| e.kind == EventKind::Probability && e.t.nanos() == t).map(|i| &ev[i + 1]).unwrap();
    assert_eq!((after(16 * MS).kind, after(16 * MS).t.nanos()), (EventKind::Dequeue, 16_956_800));
    assert_eq!((after(64 * MS).kind, after(64 * MS).t.nanos()), (EventKind::Enqueue, 1000 * MS));
}

#[test]
fn queue_log_has_no_probability_without_a_controller() {
    let mut p = Pipeline::new(&cfg(Rate::Constant { bps: 10_000_000 }, 0, QueueConfig::DropTail(Limit::Packets(10))), Instant(0));
    p.record_events(true);
    for t in 0..30 {
        arrive(&mut p, t * MS, 1514);
    }
    poll_at(&mut p, 100 * MS);
    let mut ev = Vec::new();
    p.take_events(&mut ev);
    assert!(!ev.is_empty() && ev.iter().all(|e| e.kind != EventKind::Probability));
}
