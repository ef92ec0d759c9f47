use super::super::testkit::{Harness, MS};
use super::super::{prob_fixed, QueueConfig};
use super::*;
use crate::wire::synthetic_ipv4_udp;

fn d(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn pkt(id: u64, ecn: Ecn, len: u32) -> Packet {
    Packet::with_headers(id, synthetic_ipv4_udp(0, ecn, len as usize), len, 0)
}

fn dualpi2(p: DualPi2Params) -> Harness {
    Harness::new(QueueConfig::DualPi2(Limit::Packets(10_000), p))
}

/// A DualPI2 whose p' stays as set: its first update lies far ahead.
fn held_at(prob: f64, p: DualPi2Params) -> DualPi2 {
    let mut q = DualPi2::new(Limit::Packets(10_000), p);
    q.prob = prob;
    q.next_update = Some(Instant(u64::MAX / 2));
    q
}

const ALPHA: f64 = 41.0 / 256.0;
const BETA: f64 = 819.0 / 256.0;

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() < 1e-12
}

#[test]
fn pi2_update_is_the_rfcs_with_linuxs_gains() {
    let p = DualPi2Params::default();
    assert_eq!((p.alpha, p.beta), (0.16015625, 3.19921875), "41/256 and 819/256 Hz, as tc sends 0.16 and 3.2");
    // RFC 9332 A.1: p' += alpha * (curq - target) + beta * (curq - prevq), in seconds.
    // Steady 10 ms above target: only the integral term, 0.16015625 * 0.010.
    assert!(close(update_probability(&p, 0.0, d(25), d(25)), 0.0016015625));
    // Rising from 10 to 20 ms at 0.1: 0.1 + 0.16015625 * 0.005 + 3.19921875 * 0.010.
    assert!(close(update_probability(&p, 0.1, d(20), d(10)), 0.13279296875));
    // Falling from 10 to 5 ms at 0.05: 0.05 - 0.16015625 * 0.010 - 3.19921875 * 0.005.
    assert!(close(update_probability(&p, 0.05, d(5), d(10)), 0.03240234375));
    // The RFC's own gains: 0.16 * 0.015 + 3.2 * 0.010 from 20 to 30 ms.
    let rfc = DualPi2Params { alpha: 0.16, beta: 3.2, ..Default::default() };
    assert!(close(update_probability(&rfc, 0.0, d(30), d(20)), 0.0344));
    // Bounded to [0, 1]; held to 1/k without drop_on_overload.
    assert_eq!(update_probability(&p, 0.01, d(0), d(40)), 0.0);
    assert_eq!(update_probability(&p, 0.99, d(500), d(100)), 1.0);
    let overflow = DualPi2Params { drop_on_overload: false, coupling_factor: 4, ..Default::default() };
    assert_eq!(update_probability(&overflow, 0.2, d(500), d(100)), 0.25);
}

#[test]
fn updates_run_every_tupdate_on_the_larger_head_delay() {
    let mut q = DualPi2::new(Limit::Packets(100), DualPi2Params::default());
    let (mut rng, mut out) = (Rng::new(1), Verdicts::default());
    let mut at = |q: &mut DualPi2, id: u64, t_ms: u64, ecn: Ecn| {
        let mut p = pkt(id, ecn, 1000);
        p.enqueued_at = Instant(t_ms * MS);
        q.enqueue(Instant(t_ms * MS), p, &mut rng, &mut out);
    };
    at(&mut q, 0, 0, Ecn::NotEct); // the C head, from 0
    assert_eq!(q.next_update, Some(Instant(16 * MS)), "the first update tupdate after the first packet");
    at(&mut q, 1, 4, Ecn::Ect1); // the L head, from 4 ms
    q.catch_up(Instant(20 * MS), &mut out);
    // At 16 ms the C head has waited 16 ms, the L head 12: p' = alpha * 0.001 + beta * 0.016.
    let first = ALPHA * 0.001 + BETA * 0.016;
    assert!(close(q.prob(), first), "{}", q.prob());
    assert_eq!((q.next_update, q.last_qdelay), (Some(Instant(32 * MS)), d(16)));
    // The C packet leaves at 20 ms: at 32 and 48 ms only the L head counts (28 and 44 ms).
    q.c.pop_front();
    q.bytes -= 1000;
    q.catch_up(Instant(48 * MS), &mut out);
    let second = first + ALPHA * 0.013 + BETA * 0.012;
    let third = second + ALPHA * 0.029 + BETA * 0.016;
    assert!(close(q.prob(), third), "{} vs {third}", q.prob());
    assert_eq!(q.next_update, Some(Instant(64 * MS)));
    // Each update's p' at its own time (the 32 and 48 ms ones run at 48 ms), after the start's 0
    // at the first packet; in parts per 2^32, to the rounding of the sums above.
    let want = [(0, 0.0), (16, first), (32, second), (48, third)];
    assert_eq!(out.probs.len(), want.len(), "{:?}", out.probs);
    for (&(t, value), (t_ms, p)) in out.probs.iter().zip(want) {
        assert_eq!(t, Instant(t_ms * MS));
        assert!(value.abs_diff(prob_fixed(p)) <= 1, "at {t_ms} ms: {value} vs {p}");
    }
    assert!(out.probs[1].1 > 0 && out.probs[3].1 > out.probs[2].1);
}

#[test]
fn idle_updates_bring_p_down_and_are_skipped_once_nothing_changes() {
    let mut q = DualPi2::new(Limit::Packets(100), DualPi2Params::default());
    q.prob = 0.05;
    q.last_qdelay = d(30);
    q.next_update = Some(Instant(16 * MS));
    let mut out = Verdicts::default();
    // Empty: the first update at 16 ms takes alpha * 0.015 + beta * 0.030 off p' = 0.05: to 0.
    q.catch_up(Instant(16 * MS), &mut out);
    assert_eq!((q.prob(), q.last_qdelay), (0.0, Duration::ZERO));
    // Then an hour of idle costs nothing, and the grid of updates stays where it was.
    q.catch_up(Instant(3_600_000 * MS + 5 * MS), &mut out);
    let next = q.next_update.unwrap().nanos();
    assert!(next > 3_600_000 * MS + 5 * MS && next <= 3_600_000 * MS + 21 * MS && next % (16 * MS) == 0, "{next}");
    assert_eq!(q.prob(), 0.0);
    // One record, the fall to 0 at 16 ms; none for the hour at 0.
    assert_eq!(out.probs, vec![(Instant(16 * MS), 0)]);
}

#[test]
fn classification_follows_the_ecn_mask() {
    for (mask, to_l) in [(EcnMask::L4sEct, [false, true, false, true]), (EcnMask::AnyEct, [false, true, true, true])] {
        let mut q = DualPi2::new(Limit::Packets(100), DualPi2Params { ecn_mask: mask, ..Default::default() });
        let (mut rng, mut out) = (Rng::new(1), Verdicts::default());
        for (i, ecn) in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce].into_iter().enumerate() {
            q.enqueue(Instant(0), pkt(i as u64, ecn, 100), &mut rng, &mut out);
            assert_eq!(q.l.len() == 1, to_l[i], "{mask:?} {ecn:?}");
            q.c.clear();
            q.l.clear();
            q.bytes = 0;
        }
        // A frame that is not IP (ARP) is classic.
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(q.class_of(&arp), Class::Classic);
    }
}

#[test]
fn the_l_queue_marks_with_k_times_p_and_the_c_queue_drops_with_p_squared() {
    // p' = 0.2 with k = 2 and 3: L marks 0.4 and 0.6 of its packets, C drops (or, if
    // ECN-capable, marks) 0.04. 200,000 draws each: within 5 standard deviations.
    let n = 200_000u64;
    let within = |hits: u64, p: f64| {
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (hits as f64 - n as f64 * p).abs() < 5.0 * sd
    };
    for k in [2u32, 3] {
        let mut q = held_at(0.2, DualPi2Params { coupling_factor: k, ..Default::default() });
        let mut rng = Rng::new(k as u64);
        let (mut l_marks, mut c_drops, mut c_marks) = (0, 0, 0);
        for i in 0..n {
            let mut out = Verdicts::default();
            let mut l = pkt(i, Ecn::Ect1, 1500);
            assert_eq!(q.must_drop(&mut l, Class::L4s, 100_000, &mut rng, &mut out), None, "L4S is never dropped below overload");
            l_marks += out.marks.len() as u64;
            assert!(out.marks.iter().all(|m| m.1 == MarkReason::DualPi2Coupled));
            let mut c = pkt(i, Ecn::NotEct, 1500);
            c_drops += (q.must_drop(&mut c, Class::Classic, 100_000, &mut rng, &mut out) == Some(DropReason::DualPi2Classic)) as u64;
            let mut ect0 = pkt(i, Ecn::Ect0, 1500);
            let mut marked = Verdicts::default();
            assert_eq!(q.must_drop(&mut ect0, Class::Classic, 100_000, &mut rng, &mut marked), None);
            c_marks += marked.marks.iter().filter(|m| m.1 == MarkReason::DualPi2Classic).count() as u64;
        }
        assert!(within(l_marks, 0.2 * k as f64), "k {k}: {l_marks} L marks");
        assert!(within(c_drops, 0.04), "k {k}: {c_drops} C drops");
        assert!(within(c_marks, 0.04), "k {k}: {c_marks} C marks");
        assert_eq!(q.stats.ecn_mark, l_marks + c_marks);
    }
}

#[test]
fn nothing_is_dropped_or_marked_below_two_mtus_queued() {
    let mut q = held_at(1.0, DualPi2Params::default());
    let mut rng = Rng::new(1);
    let mut out = Verdicts::default();
    for class in [Class::Classic, Class::L4s] {
        let ecn = if class == Class::L4s { Ecn::Ect1 } else { Ecn::NotEct };
        // 3027 bytes besides it: spared, however high p'.
        assert!((0..1000).all(|i| q.must_drop(&mut pkt(i, ecn, 1500), class, 2 * 1514 - 1, &mut rng, &mut out).is_none()));
        assert!(out.marks.is_empty());
    }
    // 3028: p' = 1 is overload (k p' = 2), so both queues drop.
    assert_eq!(q.must_drop(&mut pkt(0, Ecn::NotEct, 1500), Class::Classic, 2 * 1514, &mut rng, &mut out), Some(DropReason::DualPi2Classic));
    assert_eq!(q.must_drop(&mut pkt(1, Ecn::Ect1, 1500), Class::L4s, 2 * 1514, &mut rng, &mut out), Some(DropReason::DualPi2Overload));
    // Through the queue: two full frames and one more, dequeued at p' = 1.
    let mut h = harness_held_at(1.0, DualPi2Params::default());
    for _ in 0..3 {
        h.enqueue(0, 1514);
    }
    // The first leaves 3028 bytes behind: dropped; the second leaves 1514: sent, as is the last.
    let sent = h.drain(0);
    assert_eq!((sent, h.drops().len()), (vec![1, 2], 1));
}

/// A harness around a DualPI2 whose p' stays as set.
fn harness_held_at(prob: f64, p: DualPi2Params) -> Harness {
    let mut h = dualpi2(p.clone());
    h.q = super::super::Queue::new(Box::new(held_at(prob, p)));
    h
}

#[test]
fn overload_drops_with_p_squared_in_both_queues_or_overflows() {
    // p' = 0.8, k = 2: k p' = 1.6 > 1. drop_on_overload: both queues drop with 0.64, and the
    // L packets spared are all marked; ECN-capable classic packets are dropped, not marked.
    let n = 100_000u64;
    let mut q = held_at(0.8, DualPi2Params::default());
    let mut rng = Rng::new(9);
    let (mut l_drops, mut l_marks, mut c_drops) = (0u64, 0u64, 0u64);
    for i in 0..n {
        let mut out = Verdicts::default();
        match q.must_drop(&mut pkt(i, Ecn::Ect1, 1500), Class::L4s, 100_000, &mut rng, &mut out) {
            Some(DropReason::DualPi2Overload) => l_drops += 1,
            None => l_marks += (out.marks.len() == 1 && out.marks[0].1 == MarkReason::DualPi2Coupled) as u64,
            other => panic!("{other:?}"),
        }
        let mut ect0 = pkt(i, Ecn::Ect0, 1500);
        let mut out = Verdicts::default();
        c_drops += (q.must_drop(&mut ect0, Class::Classic, 100_000, &mut rng, &mut out) == Some(DropReason::DualPi2Classic)) as u64;
        assert!(out.marks.is_empty(), "no classic mark on overload");
    }
    let sd = (n as f64 * 0.64 * 0.36).sqrt();
    assert!((l_drops as f64 - 0.64 * n as f64).abs() < 5.0 * sd, "{l_drops}");
    assert_eq!(l_drops + l_marks, n);
    assert!((c_drops as f64 - 0.64 * n as f64).abs() < 5.0 * sd, "{c_drops}");
    // At k p' = 1 exactly it is not overload yet (Linux: above 1): L packets are all marked,
    // ECN-capable classic ones marked rather than dropped.
    let mut q = held_at(0.5, DualPi2Params::default());
    let mut out = Verdicts::default();
    for i in 0..1000 {
        assert_eq!(q.must_drop(&mut pkt(i, Ecn::Ect1, 1500), Class::L4s, 100_000, &mut rng, &mut out), None);
        assert_eq!(q.must_drop(&mut pkt(i, Ecn::Ect0, 1500), Class::Classic, 100_000, &mut rng, &mut out), None);
    }
    let classic_marks = out.marks.iter().filter(|m| m.1 == MarkReason::DualPi2Classic).count();
    assert_eq!(out.marks.len() - classic_marks, 1000);
    assert!((150..350).contains(&classic_marks), "{classic_marks} of 1000 at 0.25");

    // overflow: p' is held to 1/k, where L packets are all marked and none dropped, and the
    // classic ones see 1/k^2.
    let overflow = DualPi2Params { drop_on_overload: false, ..Default::default() };
    let mut q = held_at(update_probability(&overflow, 0.45, d(200), d(100)), overflow);
    assert_eq!(q.prob(), 0.5);
    let mut out = Verdicts::default();
    for i in 0..1000 {
        assert_eq!(q.must_drop(&mut pkt(i, Ecn::Ect1, 1500), Class::L4s, 100_000, &mut rng, &mut out), None);
    }
    assert_eq!(out.marks.len(), 1000);
}

#[test]
fn the_step_marks_only_above_its_threshold() {
    // p' stays 0 (all within 16 ms): any mark is the step's. Linux marks a sojourn above
    // step_thresh, not one equal to it; a lone L packet too (no two-MTU rule for the step).
    let mut h = dualpi2(DualPi2Params::default());
    let ect1 = |h: &mut Harness| h.packet(0, Ecn::Ect1, 1500);
    for (sojourn_ns, marked) in [(MS, false), (MS + 1, true), (MS - 1, false), (5 * MS, true)] {
        let p = ect1(&mut h);
        let id = h.offer(0, p);
        let before = h.marks().len();
        assert_eq!(h.dequeue(sojourn_ns).unwrap().id, id);
        assert_eq!(h.marks().len() - before, marked as usize, "sojourn {sojourn_ns} ns");
    }
    assert!(h.marks().iter().all(|m| m.2 == MarkReason::DualPi2Step));
    assert_eq!(h.q.stats().marks.get(MarkReason::DualPi2Step), 2);
    let stats = h.q.dualpi2(Instant(5 * MS)).unwrap();
    assert_eq!((stats.step_mark, stats.ecn_mark), (2, 2));
    // Classic packets never meet the step.
    let id = h.enqueue(0, 1500);
    assert_eq!(h.dequeue(10 * MS).unwrap().id, id);
    assert_eq!(h.marks().len(), 2);
}

#[test]
fn the_step_counts_packets_or_waits_for_min_qlen_step() {
    // In packets: marks while more than 3 L packets stay behind the one leaving.
    let mut h = dualpi2(DualPi2Params { step_packets: Some(3), ..Default::default() });
    for _ in 0..6 {
        let p = h.packet(0, Ecn::Ect1, 100);
        h.offer(0, p);
    }
    let ids = h.drain(10 * MS);
    let marked: Vec<u64> = h.marks().iter().map(|m| m.1).collect();
    assert_eq!((ids.len(), marked), (6, vec![0, 1])); // 5 and 4 behind them; then 3, 2, 1, 0
    // min_qlen_step 2: only a packet that found two L packets ahead of it may be marked.
    let mut h = dualpi2(DualPi2Params { min_qlen_step: 2, ..Default::default() });
    for _ in 0..4 {
        let p = h.packet(0, Ecn::Ect1, 100);
        h.offer(0, p);
    }
    h.drain(5 * MS); // all waited 5 ms, above 1 ms
    assert_eq!(h.marks().iter().map(|m| m.1).collect::<Vec<_>>(), vec![2, 3]);
}

#[test]
fn with_both_queues_backlogged_classic_gets_its_protected_share() {
    // Credit starts at 1514 * (10 - 90): nine L packets of 1500 bytes raise it above 0 (by
    // 10 * 1500 each), then one C packet takes it back down (by 90 * 1500): a tenth of the
    // bytes for classic.
    let mut h = dualpi2(DualPi2Params::default());
    let mut classic = std::collections::HashSet::new();
    for _ in 0..1000 {
        classic.insert(h.enqueue(0, 1500));
        let l = h.packet(0, Ecn::Ect1, 1500);
        h.offer(0, l);
    }
    let order: Vec<bool> = (0..500).map(|_| classic.contains(&h.dequeue(0).unwrap().id)).collect();
    assert_eq!(order.iter().filter(|&&c| c).count(), 50);
    let first_c = order.iter().position(|&c| c).unwrap();
    assert_eq!(first_c, 9, "nine L packets first");
    assert!(order.chunks(10).all(|ten| ten == [false, false, false, false, false, false, false, false, false, true]));
    // By bytes, whatever the sizes: 300-byte L packets against 1500-byte C packets.
    for (wc, share) in [(10u32, 0.10), (30, 0.30), (50, 0.50)] {
        let mut h = dualpi2(DualPi2Params { classic_protection_percent: wc, ..Default::default() });
        let mut classic = std::collections::HashSet::new();
        for _ in 0..1000 {
            classic.insert(h.enqueue(0, 1500));
            for _ in 0..5 {
                let l = h.packet(0, Ecn::Ect1, 300);
                h.offer(0, l);
            }
        }
        let (mut c_bytes, mut all) = (0u64, 0u64);
        while all < 1_000_000 {
            let p = h.dequeue(0).unwrap();
            all += p.len() as u64;
            c_bytes += if classic.contains(&p.id) { p.len() as u64 } else { 0 };
        }
        let got = c_bytes as f64 / all as f64;
        assert!((got - share).abs() < 0.005, "classic_protection {wc}%: {got}");
    }
    // A lone queue goes at full rate, and the credit starts over once both are empty.
    let mut h = dualpi2(DualPi2Params::default());
    for _ in 0..20 {
        h.enqueue(0, 1500);
    }
    assert_eq!(h.drain(0).len(), 20);
    assert_eq!(h.q.dualpi2(Instant(0)).unwrap().credit, -121_120);
}

#[test]
fn drop_early_decides_at_enqueue_and_the_default_at_dequeue() {
    for early in [true, false] {
        let mut h = harness_held_at(1.0, DualPi2Params { drop_early: early, ..Default::default() });
        for _ in 0..5 {
            h.enqueue(0, 1514);
        }
        let s = h.q.stats();
        if early {
            // Two frames in, then every arrival finds two MTUs queued at p' = 1.
            assert_eq!((s.enqueued, s.dropped_at_enqueue), (2, 3));
            assert_eq!(h.drain(0).len(), 2);
        } else {
            assert_eq!((s.enqueued, s.dropped_at_enqueue), (5, 0));
            // Each departure leaving two MTUs behind is dropped instead: the last two go.
            assert_eq!(h.drain(0), vec![3, 4]);
            assert_eq!(h.q.stats().dropped_in_queue, 3);
        }
        assert!(h.drops().iter().all(|d| d.2 == DropReason::DualPi2Classic));
        assert_eq!(h.q.stats().drops.get(DropReason::DualPi2Classic), 3);
    }
}

#[test]
fn the_packet_limit_counts_both_queues_and_the_memory_limit_bytes() {
    let mut h = Harness::new(QueueConfig::DualPi2(Limit::Packets(4), DualPi2Params::default()));
    for i in 0..6 {
        let p = h.packet(0, if i % 2 == 0 { Ecn::Ect1 } else { Ecn::NotEct }, 500);
        h.offer(0, p);
    }
    assert_eq!(h.drops().iter().map(|d| (d.1, d.2)).collect::<Vec<_>>(), vec![(4, DropReason::QueueFull), (5, DropReason::QueueFull)]);
    // Linux's memory limit by default: limit x 2 x MTU.
    assert_eq!(DualPi2::new(Limit::Packets(10_000), DualPi2Params::default()).memory_limit(), 30_280_000);
    let mut h = dualpi2(DualPi2Params { memory_limit_bytes: Some(4000), ..Default::default() });
    for _ in 0..3 {
        h.enqueue(0, 1500);
    }
    assert_eq!(h.drops().len(), 1, "4500 bytes would pass the 4000-byte memory limit");
    let stats = h.q.dualpi2(Instant(0)).unwrap();
    assert_eq!((stats.memory_used_bytes, stats.max_memory_used_bytes, stats.memory_limit_bytes), (3000, 3000, 4000));
    // A byte limit counts the frames of both queues.
    let mut h = Harness::new(QueueConfig::DualPi2(Limit::Bytes(3000), DualPi2Params::default()));
    h.enqueue(0, 1500);
    let l = h.packet(0, Ecn::Ect1, 1500);
    h.offer(0, l);
    h.enqueue(0, 1);
    assert_eq!(h.drops().len(), 1);
}

#[test]
fn its_stats_are_what_tc_shows() {
    let mut h = dualpi2(DualPi2Params::default());
    h.enqueue(0, 1000); // C, found 0 queued
    let l = h.packet(0, Ecn::Ect1, 500);
    h.offer(2 * MS, l); // L, found 1
    h.enqueue(3 * MS, 1000); // C, found 2
    let s = h.q.dualpi2(Instant(10 * MS)).unwrap();
    assert_eq!((s.pkts_in_c, s.pkts_in_l, s.maxq), (2, 1, 2));
    assert_eq!((s.delay_c, s.delay_l), (d(10), d(8)));
    assert_eq!((s.memory_used_bytes, s.credit, s.prob), (2500, -121_120, 0.0));
    // The L packet leaves first, step-marked (8 ms > 1 ms): the credit rises by 10 x 500.
    h.dequeue(10 * MS);
    let s = h.q.dualpi2(Instant(10 * MS)).unwrap();
    assert_eq!((s.ecn_mark, s.step_mark, s.credit, s.delay_l), (1, 1, -116_120, Duration::ZERO));
}

#[test]
fn a_standing_classic_queue_raises_p_until_drops_begin() {
    // 30 packets kept standing, one served per ms: 30 ms of delay, twice the target. p'
    // climbs by about alpha * 0.015 per update; classic drops follow at p'^2.
    let mut h = dualpi2(DualPi2Params::default());
    let mut t = 0;
    while t < 3000 * MS {
        while h.q.stats().backlog_pkts < 30 {
            h.enqueue(t, 1500);
        }
        t += MS;
        h.dequeue(t);
    }
    let prob = h.q.dualpi2(Instant(t)).unwrap().prob;
    assert!(prob > 0.2, "{prob}");
    let drops = h.drops();
    assert!(!drops.is_empty() && drops.iter().all(|d| d.2 == DropReason::DualPi2Classic));
}

#[test]
fn bad_parameters_name_the_field() {
    let bad = |p: DualPi2Params| p.validate().unwrap_err();
    assert!(bad(DualPi2Params { alpha: -1.0, ..Default::default() }).starts_with("alpha"));
    assert!(bad(DualPi2Params { beta: f64::NAN, ..Default::default() }).starts_with("beta"));
    assert!(bad(DualPi2Params { tupdate: Duration::ZERO, ..Default::default() }).starts_with("tupdate"));
    assert!(bad(DualPi2Params { coupling_factor: 0, ..Default::default() }).starts_with("coupling_factor"));
    assert!(bad(DualPi2Params { classic_protection_percent: 101, ..Default::default() }).starts_with("classic_protection"));
    assert!(bad(DualPi2Params { memory_limit_bytes: Some(0), ..Default::default() }).starts_with("memory_limit"));
    assert_eq!(EcnMask::from_name("any_ect"), Some(EcnMask::AnyEct));
    assert_eq!(EcnMask::from_name("ect1"), None);
}

/// Found by the fuzz target `disciplines`: the catch-up ran every update since the last event,
/// so a long wait (a slow serialiser's) with a short tupdate held the operation for as many
/// updates (an hour at 1 ns: 3.6 * 10^12). Once p' is held at its ceiling with the delay above
/// target, or an empty queue's update changes nothing (alpha 0 leaves p' where it is), the rest
/// are skipped, exactly: one catch-up ends where updating one tupdate at a time does, with the
/// same records.
#[test]
fn a_long_wait_skips_the_updates_that_change_nothing_exactly() {
    // 200 packets queued at 0 with p' under way (or none queued, p' at 0.3), updates every us.
    let under_way = |p: DualPi2Params, queued: u64| {
        let mut q = DualPi2::new(Limit::Packets(10_000), p);
        let (mut rng, mut out) = (Rng::new(1), Verdicts::default());
        for id in 0..queued {
            q.enqueue(Instant(0), pkt(id, if id % 2 == 0 { Ecn::NotEct } else { Ecn::Ect1 }, 1500), &mut rng, &mut out);
        }
        q.prob = 0.3;
        q.last_qdelay = d(if queued > 0 { 1 } else { 5 });
        q.next_update = Some(Instant(MS));
        (q, out)
    };
    let tupdate = Duration(1_000);
    let cases = [
        ("saturated at 1", DualPi2Params { tupdate, target: d(1), ..Default::default() }, 200),
        ("saturated at 1/k", DualPi2Params { tupdate, target: d(1), drop_on_overload: false, coupling_factor: 3, ..Default::default() }, 200),
        ("empty, alpha 0", DualPi2Params { tupdate, target: d(1), alpha: 0.0, ..Default::default() }, 0),
        ("empty", DualPi2Params { tupdate, target: d(1), ..Default::default() }, 0),
    ];
    for (case, p, queued) in cases {
        let (mut once, mut once_out) = under_way(p.clone(), queued);
        let (mut stepped, mut stepped_out) = under_way(p.clone(), queued);
        let end = 50 * MS + 333;
        once.catch_up(Instant(end), &mut once_out);
        let mut t = MS;
        while t <= end {
            stepped.catch_up(Instant(t), &mut stepped_out);
            t += 1_000;
        }
        stepped.catch_up(Instant(end), &mut stepped_out);
        assert_eq!((once.prob, once.last_qdelay, once.next_update), (stepped.prob, stepped.last_qdelay, stepped.next_update), "{case}");
        assert_eq!(once_out.probs, stepped_out.probs, "{case}");
        assert!(!stepped_out.probs.is_empty(), "{case}: p' moved");

        let (mut q, mut out) = under_way(DualPi2Params { tupdate: Duration(1), ..p }, queued);
        q.catch_up(Instant(3_600_000 * MS), &mut out);
        assert_eq!(q.next_update, Some(Instant(3_600_000 * MS + 1)), "{case}: the grid of updates kept");
    }
}
