use super::super::testkit::{Harness, MS, US};
use super::super::{MarkReason, QueueConfig, QueueEvent};
use super::*;
use crate::wire::Ecn;

fn red(limit: Limit, p: RedParams) -> Red {
    Red::new(limit, p)
}

/// Drives a Red directly: offers a packet, returns true if it was accepted.
struct Drive {
    red: Red,
    rng: Rng,
    out: Verdicts,
    id: u64,
}

impl Drive {
    fn new(limit: Limit, p: RedParams) -> Self {
        Drive { red: red(limit, p), rng: Rng::new(3), out: Verdicts::default(), id: 0 }
    }
    fn offer(&mut self, t: u64, len: u32, ecn: Ecn) -> bool {
        self.id += 1;
        let mut p = Packet::with_headers(self.id, crate::wire::synthetic_ipv4_udp(0, ecn, len as usize), len, 0);
        p.enqueued_at = Instant(t);
        let before = self.out.drops.len();
        self.red.enqueue(Instant(t), p, &mut self.rng, &mut self.out);
        self.out.drops.len() == before
    }
    fn take(&mut self, t: u64) -> bool {
        self.red.dequeue(Instant(t), &mut self.rng, &mut self.out).is_some()
    }
}

#[test]
fn weight_follows_tc() {
    // tc-red(8)'s example: min 30000, avpkt 1000, burst 55 -> wlog 5 (w = 1/32).
    assert_eq!(ewma_wlog(30.0, 55), Ok(5));
    // The CS244 / USTC mitigation lab: min 30000, avpkt 1500, burst 20 -> a fast average.
    assert_eq!(ewma_wlog(20.0, 20), Ok(1));
    assert!(ewma_wlog(30.0, 20).unwrap_err().contains("at least 31"));
    // Defaults: limit 1000 packets -> max 250, min 83, burst (166+250)/3 = 138.
    let r = RedParams::default().resolve(Limit::Packets(1000)).unwrap();
    assert_eq!((r.min, r.max, r.burst_pkts), (83.0, 250.0, 138));
}

#[test]
fn average_follows_the_ewma() {
    let mut d = Drive::new(Limit::Packets(1000), RedParams { min: Some(400), max: Some(800), burst_pkts: Some(500), ..Default::default() });
    let w = 0.5f64.powi(d.red.resolved().wlog as i32);
    d.offer(0, 1000, Ecn::NotEct); // from idle at t=0: no decay, average 0
    let mut want = 0.0;
    for k in 1..50u64 {
        let backlog = d.red.backlog();
        d.offer(k, 1000, Ecn::NotEct);
        want += w * (backlog - want);
        assert!((d.red.avg() - want).abs() < 1e-9, "arrival {k}");
    }
}

#[test]
fn nothing_dropped_below_min_everything_above_max() {
    let mut d = Drive::new(Limit::Packets(1000), RedParams { min: Some(5), max: Some(15), burst_pkts: Some(7), ..Default::default() });
    for k in 0..5 {
        assert!(d.offer(k, 1500, Ecn::NotEct), "below min");
    }
    // Never dequeue: the average climbs past max and every arrival is then forced out.
    for k in 5..400 {
        d.offer(k, 1500, Ecn::NotEct);
    }
    assert!(d.red.avg() >= 15.0);
    let n = d.out.drops.len();
    for k in 400..420 {
        assert!(!d.offer(k, 1500, Ecn::NotEct));
    }
    assert!(d.out.drops[n..].iter().all(|x| x.reason == DropReason::RedForced));
}

#[test]
fn early_drops_are_spaced_uniformly() {
    // Hold the queue at exactly 10 packets between min 5 and max 15 with max_p 0.2:
    // p_b = 0.2 * 5/10 = 0.1, gaps uniform on 1..10, so the drop share is 2 p_b / (1 + p_b).
    let mut d = Drive::new(Limit::Packets(1000), RedParams { min: Some(5), max: Some(15), burst_pkts: Some(7), probability: 0.2, ..Default::default() });
    let mut t = 0;
    while d.red.backlog() < 10.0 {
        d.offer(t, 1500, Ecn::NotEct);
        t += 1;
    }
    for _ in 0..200 {
        if d.offer(t, 1500, Ecn::NotEct) {
            d.take(t);
        }
        t += 1;
    }
    assert!((d.red.avg() - 10.0).abs() < 0.2, "{}", d.red.avg());
    let (mut drops, mut gap, mut max_gap) = (0, 0, 0);
    let n = 100_000;
    for _ in 0..n {
        gap += 1;
        if d.offer(t, 1500, Ecn::NotEct) {
            d.take(t);
        } else {
            drops += 1;
            max_gap = max_gap.max(gap);
            gap = 0;
        }
        t += 1;
    }
    let share = drops as f64 / n as f64;
    let p_b = 0.2 * (d.red.avg() - 5.0) / 10.0;
    let want = 2.0 * p_b / (1.0 + p_b);
    assert!((share - want).abs() < 0.01, "share {share} vs {want}");
    assert!(max_gap <= (1.0 / p_b).ceil() as u64 + 1, "gap {max_gap}: spacing is bounded by 1/p_b");
    assert!(d.out.drops.iter().all(|x| x.reason == DropReason::RedEarly));
}

#[test]
fn gentle_ramps_from_max_to_twice_max() {
    let p = RedParams { min: Some(5), max: Some(15), burst_pkts: Some(7), gentle: true, ..Default::default() };
    let mut d = Drive::new(Limit::Packets(1000), p);
    let mut t = 0;
    // Hold the backlog at 20 (between max and 2 max): drops are random, none forced.
    while d.red.backlog() < 20.0 {
        d.offer(t, 1000, Ecn::NotEct);
        t += 1;
    }
    for _ in 0..5000 {
        if d.offer(t, 1000, Ecn::NotEct) {
            d.take(t);
        }
        t += 1;
    }
    assert!(d.red.avg() > 15.0 && d.red.avg() < 30.0);
    assert!(d.out.drops.iter().all(|x| x.reason == DropReason::RedEarly));
    // p_b at 20 = 0.02 + 0.98 * 5/15 ~ 0.35: a large share, not all.
    let share = d.out.drops.len() as f64 / 5000.0;
    assert!(share > 0.3 && share < 0.7, "{share}");
}

#[test]
fn ecn_marks_and_harddrop_drops_above_max() {
    for harddrop in [false, true] {
        let p = RedParams { min: Some(5), max: Some(15), burst_pkts: Some(7), probability: 1.0, ecn: true, harddrop, ..Default::default() };
        let mut h = Harness::new(QueueConfig::Red(Limit::Packets(1000), p));
        for k in 0..300 {
            let pkt = h.packet(0, Ecn::Ect0, 1500);
            h.offer(k * US, pkt);
        }
        let forced_marks = h.marks().iter().filter(|m| m.2 == MarkReason::RedForced).count();
        let forced_drops = h.drops().iter().filter(|d| d.2 == DropReason::RedForced).count();
        if harddrop {
            assert!(forced_drops > 100 && forced_marks == 0);
        } else {
            assert!(forced_marks > 100 && forced_drops == 0, "ECT packets are marked, never dropped by RED");
        }
        assert!(h.marks().iter().any(|m| m.2 == MarkReason::RedEarly));
    }
}

#[test]
fn byte_mode_counts_bytes() {
    // Thresholds 30000/35000 bytes (the mitigation lab's): 20 full frames stay below min.
    let p = RedParams { min: Some(30_000), max: Some(35_000), avpkt_bytes: 1500, burst_pkts: Some(20), probability: 1.0, ..Default::default() };
    let mut d = Drive::new(Limit::Bytes(1_000_000), p);
    for k in 0..20 {
        assert!(d.offer(k, 1500, Ecn::NotEct));
    }
    assert!(d.red.avg() < 30_000.0 && d.red.avg() > 25_000.0, "w = 1/2 follows the backlog closely: {}", d.red.avg());
    for k in 20..40 {
        d.offer(k, 1500, Ecn::NotEct);
    }
    assert!(!d.out.drops.is_empty());
}

#[test]
fn idle_time_decays_the_average() {
    let p = RedParams { min: Some(20), max: Some(60), burst_pkts: Some(40), bandwidth_bps: 12_000_000, avpkt_bytes: 1500, ..Default::default() };
    let mut d = Drive::new(Limit::Packets(1000), p);
    for k in 0..200 {
        d.offer(k, 1500, Ecn::NotEct);
    }
    while d.take(MS) {}
    assert!(!d.take(MS)); // idle from 1 ms
    let before = d.red.avg();
    let w = 0.5f64.powi(d.red.resolved().wlog as i32);
    // 1500 B at 12 Mbit/s = 1 ms per packet: 50 ms idle = 50 packet times.
    d.offer(51 * MS, 1500, Ecn::NotEct);
    let want = before * (1.0 - w).powi(50);
    assert!((d.red.avg() - want).abs() < 1e-6 * before, "{} vs {}", d.red.avg(), want);
}

/// A queue filled to 40 packets and held there until 2.1 s, one arrival and one departure a
/// millisecond: the drive and the time it ends at.
fn standing_queue_of_40(p: RedParams) -> (Drive, u64) {
    let mut d = Drive::new(Limit::Packets(1000), p);
    let mut t = 0;
    while d.red.backlog() < 40.0 {
        d.offer(t, 1000, Ecn::NotEct);
        t += 1;
    }
    while t < 2_100 * MS {
        if d.offer(t, 1000, Ecn::NotEct) {
            d.take(t);
        }
        if d.red.backlog() < 40.0 {
            d.offer(t, 1000, Ecn::NotEct);
        }
        t += MS;
    }
    (d, t)
}

#[test]
fn adaptive_tunes_max_p_towards_the_target_band() {
    let p = RedParams { min: Some(10), max: Some(30), burst_pkts: Some(11), adaptive: true, gentle: true, ..Default::default() };
    // A standing queue of 40 (above the target band's top, 22) for 2.1 s: four ticks, each
    // raising max_p by min(0.01, max_p / 4): 0.02 -> 0.025 -> 0.03125 -> 0.0390625 -> 0.048828125.
    let (mut d, t) = standing_queue_of_40(p);
    assert!((d.red.max_p() - 0.048828125).abs() < 1e-12, "{}", d.red.max_p());
    // An empty queue (average below target 18): max_p decays by 0.9 per tick, not below 0.01.
    while d.take(t) {}
    let start = d.red.max_p();
    d.offer(t + 5_000 * MS, 1000, Ecn::NotEct);
    assert!(d.red.max_p() < start * 0.9f64.powi(9));
    assert!(d.red.max_p() >= MAX_P_MIN * 0.9);
}

#[test]
fn bad_parameters_name_the_field() {
    let l = Limit::Packets(100);
    assert_eq!(RedParams { min: Some(30), max: Some(20), ..Default::default() }.validate(l).unwrap_err(), "min: 30 must be below max (20)");
    assert!(RedParams { min: Some(10), max: Some(200), ..Default::default() }.validate(l).unwrap_err().starts_with("max: 200 must not exceed"));
    assert!(RedParams { probability: -0.1, ..Default::default() }.validate(l).unwrap_err().starts_with("probability"));
    assert!(RedParams { probability: 0.0, ..Default::default() }.validate(l).unwrap_err().starts_with("probability"));
    assert!(RedParams { min: Some(30), max: Some(60), burst_pkts: Some(5), ..Default::default() }.validate(l).unwrap_err().starts_with("burst"));
}

#[test]
fn ns3_waits_between_drops_as_ns3_does() {
    // A steady queue of 30 packets between min 15 and max 45 with max_p 0.1: p_b = 0.05, so ns-3
    // drops after a mean of about 1.5 / p_b = 30 arrivals (none before 1 / p_b = 20), where
    // Linux's rule averages about 0.5 / p_b.
    let mean_gap = |ns3: bool| {
        let p = RedParams { min: Some(15), max: Some(45), probability: 0.1, burst_pkts: Some(16), ns3, ..Default::default() };
        let mut red = Red::new(Limit::Packets(1000), p);
        red.avg = 30.0;
        red.w = 0.0; // hold the average where it is
        red.idle_since = None;
        let mut rng = Rng::new(3);
        let mut out = Verdicts::default();
        for id in 0..30 {
            red.fifo.push_or_drop(Packet::new(1_000_000 + id, vec![0; 1000]), &mut out);
        }
        let (mut gaps, mut since, mut least) = (Vec::new(), 0u64, u64::MAX);
        for id in 0..20_000u64 {
            let before = out.drops.len();
            red.enqueue(Instant(id * 1000), Packet::new(id, vec![0; 1000]), &mut rng, &mut out);
            since += 1;
            if out.drops.len() > before {
                gaps.push(since as f64);
                least = least.min(since);
                since = 0;
            } else {
                red.fifo.pop(); // keep the queue at 30
            }
        }
        (gaps.iter().sum::<f64>() / gaps.len() as f64, least)
    };
    let (ns3, least) = mean_gap(true);
    assert!((27.0..33.0).contains(&ns3) && least >= 20, "ns-3: mean {ns3}, least {least}");
    let (linux, _) = mean_gap(false);
    assert!((8.0..13.0).contains(&linux), "Linux: mean {linux}");
}

/// Found by the fuzz target `disciplines`: an arrival marked CE (above max, with ecn) that the
/// full queue then refused was logged dropped first and marked after, so the log said a packet
/// was marked once gone (and the replay kept that mark, for a packet that never left). The mark
/// is logged first now; both are counted, as Linux's sch_red and its child qdisc count them.
#[test]
fn a_marked_arrival_the_full_queue_refuses_is_marked_before_it_is_dropped() {
    let p = RedParams { min: Some(2), max: Some(4), ecn: true, ..Default::default() };
    let mut h = Harness::new(QueueConfig::Red(Limit::Packets(6), p));
    for _ in 0..20 {
        let pkt = h.packet(0, Ecn::Ect0, 1000);
        h.offer(0, pkt);
    }
    let marked_then_dropped: Vec<u64> = h
        .marks()
        .iter()
        .filter(|m| h.drops().iter().any(|d| d.1 == m.1 && d.2 == DropReason::QueueFull))
        .map(|m| m.1)
        .collect();
    assert!(!marked_then_dropped.is_empty(), "marked, then refused by the full queue");
    for id in marked_then_dropped {
        let at = |want: fn(&QueueEvent) -> bool| h.events.iter().position(|(_, e)| want(e) && matches!(e, QueueEvent::Marked(p, _) | QueueEvent::Dropped(p, _) if p.id == id));
        let (mark, drop) = (at(|e| matches!(e, QueueEvent::Marked(..))), at(|e| matches!(e, QueueEvent::Dropped(..))));
        assert!(mark < drop, "packet {id}: the mark is logged before the drop");
    }
    let s = h.q.stats();
    assert_eq!((s.marks.total(), s.drops.total()), (h.marks().len() as u64, h.drops().len() as u64));
}

/// Found by the fuzz target `replay_input`: adaptive RED ran its 500 ms tick for every one due
/// since the last packet, so a replay's leap of years held the replay for hours (2.9 * 10^18 ns
/// is 5.8 * 10^9 ticks). Once a tick changes nothing and nothing can change (busy, or idle with
/// the average below target), the rest are skipped, exactly: one catch-up ends where ticking
/// one at a time does.
#[test]
fn adaptive_skips_the_ticks_that_change_nothing_exactly() {
    let p = RedParams { min: Some(10), max: Some(30), burst_pkts: Some(11), adaptive: true, gentle: true, ..Default::default() };
    // After a standing queue of 40 for 2.1 s (max_p up to 0.0488), emptied (or left standing).
    let busy = |standing: bool| {
        let (mut d, t) = standing_queue_of_40(p.clone());
        if !standing {
            while d.take(t) {}
        }
        (d, t)
    };
    for standing in [false, true] {
        let (mut once, t0) = busy(standing);
        let (mut stepped, _) = busy(standing);
        let end = t0 + 600_000 * MS + 7; // ten minutes: 1200 ticks
        once.red.adapt(Instant(end));
        let mut t = t0;
        while t <= end {
            stepped.red.adapt(Instant(t));
            t += 100 * MS;
        }
        stepped.red.adapt(Instant(end));
        assert_eq!((once.red.max_p(), once.red.next_adapt), (stepped.red.max_p(), stepped.red.next_adapt), "standing {standing}");
        assert_eq!(stepped.red.max_p() > 0.5, standing, "standing {standing}: max_p rose to its ceiling, or fell to its floor");
        // A century later, on the same grid of ticks.
        let (mut d, t0) = busy(standing);
        let next = d.red.next_adapt.unwrap().nanos();
        let century = t0 + 100 * 365 * 86_400_000 * MS;
        d.red.adapt(Instant(century));
        let after = d.red.next_adapt.unwrap().nanos();
        assert!(after > century && after <= century + 500 * MS && (after - next) % (500 * MS) == 0, "standing {standing}");
    }
}
