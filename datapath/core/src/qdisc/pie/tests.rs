use super::super::testkit::{Harness, MS};
use super::super::{prob_fixed, MarkReason, QueueConfig, QueueEvent};
use super::*;
use crate::wire::Ecn;

fn d(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn gains_shrink_with_the_probability() {
    let p = PieParams::default();
    // 10 ms above target, steady: delta = alpha/k * 0.010 + beta/k * 0.
    let step = |prob: f64| update_probability(&p, prob, d(25), d(25), true) - prob;
    let full = 0.125 * 0.010;
    for (prob, divisor) in [(0.5, 1.0), (0.05, 2.0), (0.005, 8.0), (0.0005, 32.0), (0.00005, 128.0), (0.000005, 512.0), (0.0, 2048.0)] {
        let got = step(prob);
        assert!((got - full / divisor).abs() < 1e-12, "prob {prob}: {got} vs {}", full / divisor);
    }
    // beta acts on the change of delay: 0 -> 20 ms at prob 0.5: 0.125*0.005 + 1.25*0.020.
    let got = update_probability(&p, 0.5, d(20), d(0), true) - 0.5;
    assert!((got - 0.02).abs() < 1e-12, "{got}: capped at 2% above 10%");
    let got = update_probability(&p, 0.05, d(20), d(0), true) - 0.05;
    assert!((got - (0.125 * 0.005 + 1.25 * 0.020) / 2.0).abs() < 1e-12, "no cap below 10%: {got}");
}

#[test]
fn very_high_delay_and_decay() {
    let p = PieParams::default();
    let got = update_probability(&p, 0.5, d(300), d(300), true) - 0.5;
    assert!((got - 0.04).abs() < 1e-12, "2% cap plus 2% above 250 ms: {got}");
    assert_eq!(update_probability(&p, 0.99, d(300), d(300), true), 1.0);
    // No delay twice and an empty queue: -1/64 (and the negative proportional term).
    let got = update_probability(&p, 0.64, d(0), d(0), false);
    let want = (0.64 - 0.125 * 0.015) * 63.0 / 64.0;
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    assert_eq!(update_probability(&p, 0.001, d(0), d(0), true), 0.001 - 0.125 * 0.015 / 8.0, "queued: no decay");
    assert_eq!(update_probability(&p, 0.0, d(0), d(0), false), 0.0);
}

/// A queue held at `standing` packets of 1500 bytes, one served per `service_ms` and
/// one offered per `service_ms`, for `for_ms`.
fn hold(h: &mut Harness, t0: u64, standing: usize, service_ms: u64, for_ms: u64) -> u64 {
    let mut t = t0;
    while h.q.stats().backlog_pkts < standing as u64 {
        h.enqueue(t, 1500);
    }
    while t < t0 + for_ms * MS {
        t += service_ms * MS;
        h.dequeue(t);
        h.enqueue(t, 1500);
    }
    t
}

#[test]
fn burst_allowance_then_early_drops() {
    let mut h = Harness::new(QueueConfig::Pie(Limit::Packets(1000), PieParams::default()));
    // 50 packets standing, 1 ms each: a 50 ms delay, far above 15 ms.
    let t = hold(&mut h, 0, 50, 1, 140);
    assert!(h.drops().is_empty(), "inside the 150 ms burst allowance");
    hold(&mut h, t, 50, 1, 2000);
    let drops = h.drops();
    assert!(!drops.is_empty());
    assert!(drops.iter().all(|d| d.2 == DropReason::PieEarly));
    assert!(drops[0].0 >= 150 * MS);
}

#[test]
fn no_early_drop_with_little_delay_or_little_backlog() {
    let mut pie = Pie::new(Limit::Packets(1000), PieParams::default());
    pie.v.burst_left = Duration::ZERO;
    pie.v.prob = 0.15;
    pie.v.qdelay = d(5); // below target/2 with prob < 20%
    let mut rng = Rng::new(1);
    assert!((0..1000).all(|_| !pie.drop_early(100_000, 1500, &mut rng)));
    pie.v.qdelay = d(30);
    let under_two_mtus = 2 * 1514 - 1;
    assert!((0..1000).all(|_| !pie.drop_early(under_two_mtus, 1500, &mut rng)));
}

#[test]
fn derandomised_drops_are_spaced() {
    // prob 0.1: nothing before 0.85 accumulates (9 packets), always by 8.5 (85 packets).
    let mut pie = Pie::new(Limit::Packets(1000), PieParams::default());
    pie.v.burst_left = Duration::ZERO;
    pie.v.prob = 0.1;
    pie.v.qdelay = d(30);
    let mut rng = Rng::new(5);
    let (mut gap, mut gaps) = (0, Vec::new());
    for _ in 0..100_000 {
        gap += 1;
        if pie.drop_early(100_000, 1500, &mut rng) {
            pie.v.accu_prob = 0.0; // as the enqueue does on a drop
            gaps.push(gap);
            gap = 0;
        }
    }
    // 86 where 85 x 0.1 rounds below 8.5 in binary floating point.
    assert!(gaps.iter().all(|&g| (9..=86).contains(&g)), "{:?}", (gaps.iter().min(), gaps.iter().max()));
    let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    assert!(mean > 9.0 && mean < 20.0, "{mean}: about 1/p past the 0.85 dead zone");
}

#[test]
fn bytemode_scales_by_size() {
    let mut pie = Pie::new(Limit::Packets(1000), PieParams { bytemode: true, ..Default::default() });
    pie.v.burst_left = Duration::ZERO;
    pie.v.prob = 0.1;
    pie.v.qdelay = d(30);
    let mut rng = Rng::new(5);
    let small = (0..100_000).filter(|_| {
        let hit = pie.drop_early(100_000, 151, &mut rng);
        if hit {
            pie.v.accu_prob = 0.0;
        }
        hit
    });
    let n = small.count();
    assert!(n < 1500, "151-byte packets see a tenth of the probability: {n} drops");
}

#[test]
fn ecn_marks_below_ecn_prob_and_drops_above() {
    for (prob, marked) in [(0.05, true), (0.5, false)] {
        let mut h = Harness::new(QueueConfig::Pie(Limit::Packets(1000), PieParams::default())); // makes packets
        let mut pie = Pie::new(Limit::Packets(1000), PieParams { ecn: true, ..Default::default() });
        let mut out = Verdicts::default();
        for _ in 0..3 {
            let queued = h.packet(0, Ecn::NotEct, 1500); // over two MTUs queued: early drops may happen
            pie.fifo.push_or_drop(queued, &mut out);
        }
        pie.v.burst_left = Duration::ZERO;
        pie.v.prob = prob;
        pie.v.qdelay = d(30);
        pie.v.accu_prob = 9.0; // the next decision drops for sure
        let p = h.packet(0, Ecn::Ect1, 1500);
        pie.next_update = Some(Instant(u64::MAX));
        pie.enqueue(Instant(0), p, &mut Rng::new(1), &mut out);
        assert_eq!(out.marks.len() == 1, marked, "prob {prob}");
        assert_eq!(out.drops.len() == 1, !marked, "prob {prob}");
        if marked {
            assert_eq!(out.marks[0].1, MarkReason::Pie);
        }
    }
}

#[test]
fn timer_ticks_are_caught_up_exactly() {
    // Updates run every 15 ms from the first packet: 20 ms of silence hold one update,
    // 45 ms three.
    let mut pie = Pie::new(Limit::Packets(1000), PieParams::default());
    let mut rng = Rng::new(1);
    let mut out = Verdicts::default();
    let mut pkt = Packet::new(0, vec![0; 1500]);
    pkt.enqueued_at = Instant(0);
    pie.enqueue(Instant(0), pkt, &mut rng, &mut out);
    assert_eq!(pie.next_update, Some(Instant(15 * MS)));
    pie.dequeue(Instant(20 * MS), &mut rng, &mut out);
    assert_eq!(pie.next_update, Some(Instant(30 * MS)));
    pie.dequeue(Instant(65 * MS), &mut rng, &mut out);
    assert_eq!(pie.next_update, Some(Instant(75 * MS)));
}

#[test]
fn rate_estimator_measures_the_drain() {
    // 1500-byte packets leave every 1.2 ms (10 Mbit/s): the estimate is 1.25 bytes per us.
    let mut h = Pie::new(Limit::Packets(1000), PieParams { dq_rate_estimator: true, ..Default::default() });
    let (mut rng, mut out) = (Rng::new(1), Verdicts::default());
    for i in 0..100 {
        let mut p = Packet::new(i, vec![0; 1500]);
        p.enqueued_at = Instant(0);
        h.enqueue(Instant(0), p, &mut rng, &mut out);
    }
    for k in 1..60u64 {
        h.dequeue(Instant(k * 1_200_000), &mut rng, &mut out);
    }
    // The first measurement counts the packet that starts it too (as Linux does): 11
    // packets over 10 gaps, a 10% overestimate the later ones (exact) average away.
    let rate = h.vars().avg_dq_rate;
    let want = 1500.0 / 1.2e6;
    assert!(rate > want && (rate - want) / want < 0.06, "{rate} bytes/ns");
    // The next update estimates the delay as backlog / rate: 41 packets * 1.2 ms.
    h.dequeue(Instant(75 * MS), &mut rng, &mut out);
    let q = h.vars().qdelay.nanos() as f64;
    assert!((q - 40.0 * 1.2e6).abs() < 0.06 * 48e6, "{q}");
}

#[test]
fn bad_parameters_name_the_field() {
    assert!(PieParams { alpha: -1.0, ..Default::default() }.validate().unwrap_err().starts_with("alpha"));
    assert!(PieParams { ecn_prob: 1.5, ..Default::default() }.validate().unwrap_err().starts_with("ecn_prob"));
    assert!(PieParams { tupdate: Duration::ZERO, ..Default::default() }.validate().unwrap_err().starts_with("tupdate"));
}

#[test]
fn ns3_update_holds_zero_during_the_allowance_and_decays_by_two_percent() {
    let p = PieParams { ns3: true, ..Default::default() };
    assert_eq!(update_probability_ns3(&p, 0.3, d(40), d(40), d(30)), 0.0, "an allowance left: 0");
    // Same steps as Linux below 250 ms...
    assert_eq!(update_probability_ns3(&p, 0.05, d(25), d(25), Duration::ZERO), update_probability(&p, 0.05, d(25), d(25), true));
    // ...no extra 2% above it, and a zero delay twice decays by 2% whatever is queued.
    assert!((update_probability_ns3(&p, 0.5, d(300), d(300), Duration::ZERO) - 0.52).abs() < 1e-12);
    let want = (0.64 - 0.125 * 0.015) * 0.98;
    assert!((update_probability_ns3(&p, 0.64, d(0), d(0), Duration::ZERO) - want).abs() < 1e-12);
}

#[test]
fn ns3_allowance_is_armed_by_the_first_arrival_and_spent_by_the_updates() {
    let mut pie = Pie::new(Limit::Packets(1000), PieParams { ns3: true, ..Default::default() });
    assert_eq!(pie.vars().burst_left, Duration::ZERO, "none at the start");
    let mut rng = Rng::new(1);
    let mut out = Verdicts::default();
    let pkt = |id| Packet::new(id, vec![0; 1514]);
    // Three queued (more than ns-3's two) and a delay well above target: only the allowance saves them.
    for id in 0..3 {
        pie.enqueue(Instant(id * MS), pkt(id), &mut rng, &mut out);
    }
    assert_eq!(pie.vars().burst_state, BurstState::Protecting);
    assert_eq!(pie.vars().burst_left, d(150), "armed by the first arrival, spent only by updates");
    // Updates every 15 ms from t = 0 (that one before the arrival armed it): ten more spend it.
    pie.enqueue(Instant(149 * MS), pkt(3), &mut rng, &mut out);
    assert_eq!(pie.vars().burst_left, d(15), "nine updates, 15 to 135 ms");
    pie.enqueue(Instant(150 * MS), pkt(4), &mut rng, &mut out);
    assert_eq!(pie.vars().burst_left, Duration::ZERO, "the tenth at 150 ms");
    assert!(out.drops.is_empty());
}

/// (time, value) of the probability records the harness saw, at their own times.
fn probability_records(h: &Harness) -> Vec<(u64, u64)> {
    h.events.iter().filter_map(|&(_, e)| if let QueueEvent::Probability { at, value } = e { Some((at.nanos(), value)) } else { None }).collect()
}

#[test]
fn each_update_that_changes_the_probability_is_reported_at_its_own_time() {
    let mut h = Harness::new(QueueConfig::Pie(Limit::Packets(1000), PieParams::default()));
    for _ in 0..100 {
        h.enqueue(0, 1500);
    }
    // The delay is each departure's sojourn: 10 ms at 10 ms, 40 ms at 40 ms. The updates at
    // 15 and 30 ms run at 40 ms on the 10 ms delay, the one at 45 ms at 50 ms on the 40 ms.
    h.dequeue(10 * MS);
    h.dequeue(40 * MS);
    h.dequeue(50 * MS);
    let p = PieParams::default();
    let p15 = update_probability(&p, 0.0, d(10), d(0), true);
    let p30 = update_probability(&p, p15, d(10), d(10), true);
    let p45 = update_probability(&p, p30, d(40), d(10), true);
    assert!(p15 > 0.0 && p30 != p15 && p45 > p30, "{p15} {p30} {p45}");
    let want = vec![(0, 0), (15 * MS, prob_fixed(p15)), (30 * MS, prob_fixed(p30)), (45 * MS, prob_fixed(p45))];
    assert_eq!(probability_records(&h), want, "the start's 0, then each update");
}

#[test]
fn an_idle_queue_at_zero_reports_nothing() {
    let mut h = Harness::new(QueueConfig::Pie(Limit::Packets(1000), PieParams::default()));
    h.enqueue(0, 1500);
    h.drain(0);
    // An hour of updates (240 000 of them, run at the next arrival) leave it at 0: no record.
    h.enqueue(3_600_000 * MS, 1500);
    h.drain(3_600_000 * MS);
    h.enqueue(7_200_000 * MS, 1500);
    assert_eq!(probability_records(&h), vec![(0, 0)], "only the controller's start");
    // Neither does a saturated one tick after tick: values are reported when they change.
    let mut out = Verdicts::default();
    out.probability(Instant(1), 1.0);
    out.probability(Instant(2), 1.0);
    out.probability(Instant(3), 0.5);
    assert_eq!(out.probs, vec![(Instant(1), 1 << 32), (Instant(3), 1 << 31)]);
}

/// A PIE whose controller is under way at `t0`, p at 0.3: with 30 packets queued and a 20 ms
/// delay measured (p climbs to 1 and stays), or emptied (p decays to 0 and stays).
fn under_way(p: PieParams, queued: bool, t0: u64) -> (Pie, Verdicts) {
    let mut pie = Pie::new(Limit::Packets(1000), p);
    let (mut rng, mut out) = (Rng::new(1), Verdicts::default());
    for id in 0..if queued { 30 } else { 0 } {
        pie.enqueue(Instant(0), Packet::with_headers(id, vec![0; 14], 1500, 0), &mut rng, &mut out);
    }
    pie.v.prob = 0.3;
    pie.v.qdelay = if queued { d(20) } else { Duration::ZERO };
    pie.v.avg_dq_rate = 0.001; // bytes per ns: 45 ms for the 45 000 bytes
    pie.v.burst_state = BurstState::Protecting; // ns-3: a burst allowance just spent
    pie.next_update = Some(Instant(t0));
    (pie, out)
}

/// Found by the fuzz target `disciplines`: the timer's catch-up ran every update since the last
/// event, so a long wait with a short tupdate held the operation for as many updates (an hour
/// at 1 ns: 3.6 * 10^12; with ns3, 1.5 * 10^9 after any burst). Updates that change nothing,
/// or only ns-3's count of quiet ones, are now skipped, exactly: one catch-up ends where
/// updating one tupdate at a time does, with the same records.
#[test]
fn a_long_wait_skips_the_updates_that_change_nothing_exactly() {
    for ns3 in [false, true] {
        for dq_rate_estimator in [false, true] {
            for queued in [false, true] {
                let case = format!("ns3 {ns3}, dq_rate_estimator {dq_rate_estimator}, queued {queued}");
                // ns-3's burst state counts 1.5 s of quiet updates before it rests.
                let (tupdate, end) = if ns3 { (10_000, 1_600 * MS + 333) } else { (1_000, 50 * MS + 333) };
                let p = PieParams { tupdate: Duration(tupdate), max_burst: Duration::ZERO, ns3, dq_rate_estimator, ..PieParams::default() };
                let (mut once, mut once_out) = under_way(p.clone(), queued, MS);
                let (mut stepped, mut stepped_out) = under_way(p.clone(), queued, MS);
                once.catch_up(Instant(end), &mut once_out);
                let mut t = MS;
                while t <= end {
                    stepped.catch_up(Instant(t), &mut stepped_out);
                    t += tupdate;
                }
                stepped.catch_up(Instant(end), &mut stepped_out);
                assert_eq!(stepped.v.prob, if queued { 1.0 } else { 0.0 }, "{case}");
                assert_eq!(once.v, stepped.v, "{case}");
                assert_eq!(once.next_update, stepped.next_update, "{case}");
                assert_eq!(once_out.probs, stepped_out.probs, "{case}");

                assert_eq!(stepped.v.burst_state, if ns3 && !queued { BurstState::NoBurst } else { BurstState::Protecting }, "{case}");
                let (mut pie, mut out) = under_way(PieParams { tupdate: Duration(1), ..p }, queued, MS);
                pie.catch_up(Instant(3_600_000 * MS), &mut out);
                assert_eq!(pie.next_update, Some(Instant(3_600_000 * MS + 1)), "{case}: the grid of updates kept");
            }
        }
    }
}
