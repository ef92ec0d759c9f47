use super::super::testkit::{Harness, MS};
use super::super::{DropReason, Limit, MarkReason, QueueConfig};
use super::*;
use crate::wire::Ecn;

fn codel(limit: usize, ecn: bool) -> Harness {
    Harness::new(QueueConfig::Codel(Limit::Packets(limit), CodelParams { ecn, ..Default::default() }))
}

fn fill(h: &mut Harness, n: usize, t: u64, len: u32) {
    for _ in 0..n {
        h.enqueue(t, len);
    }
}

const INTERVAL: Duration = Duration(100 * MS);

#[test]
fn newton_converges_to_inverse_sqrt() {
    // As in Linux, one step per increment of count: coarse for the first few counts
    // (count 2 gives exactly 1/2, not 0.707), within 1% from count 8 on.
    let mut x = REC_INV_SQRT_ONE;
    for count in 2..2000u32 {
        x = newton_step(count, x);
        let exact = 65536.0 / (count as f64).sqrt();
        if count == 2 {
            assert_eq!(x, 32769);
        }
        if count >= 8 {
            assert!((x as f64 - exact).abs() / exact < 0.01, "count {count}: {x} vs {exact}");
        }
    }
}

#[test]
fn control_law_spaces_drops_by_interval_over_sqrt_count() {
    assert_eq!(control_law(Instant(0), INTERVAL, REC_INV_SQRT_ONE), Instant(99_998_474));
    let x4 = newton_step(4, newton_step(3, newton_step(2, REC_INV_SQRT_ONE)));
    let gap = control_law(Instant(0), INTERVAL, x4).nanos() as f64;
    assert!((gap - 50e6).abs() < 0.03 * 50e6, "{gap}: within 3% of interval / 2 at count 4");
}

#[test]
fn below_target_never_drops() {
    let mut h = codel(1000, false);
    fill(&mut h, 100, 0, 1000);
    // Each packet waits under 5 ms.
    for k in 0..100u64 {
        h.enqueue(k * MS + MS / 2, 1000);
        assert!(h.dequeue(k * MS + 4 * MS).is_some());
    }
    let mut h2 = codel(1000, false);
    for k in 0..1000u64 {
        h2.enqueue(k * MS, 1000);
        h2.dequeue(k * MS + 4 * MS);
    }
    assert!(h2.drops().is_empty());
}

#[test]
fn first_drop_comes_one_interval_after_sojourn_exceeds_target() {
    let mut h = codel(1000, false);
    fill(&mut h, 100, 0, 1000);
    assert_eq!(h.dequeue(6 * MS).unwrap().id, 0); // above target: the interval starts (ends at 106 ms)
    assert_eq!(h.dequeue(106 * MS).unwrap().id, 1); // not yet strictly after
    let t1 = 106 * MS + 1;
    assert_eq!(h.dequeue(t1).unwrap().id, 3, "packet 2 dropped, 3 sent");
    let next = control_law(Instant(t1), INTERVAL, REC_INV_SQRT_ONE).nanos();
    assert_eq!(h.dequeue(next - 1).unwrap().id, 4, "nothing due before drop_next");
    assert_eq!(h.dequeue(next).unwrap().id, 6, "second drop exactly at drop_next");
    let next2 = control_law(Instant(next), INTERVAL, newton_step(2, REC_INV_SQRT_ONE)).nanos();
    assert_eq!(h.dequeue(next2).unwrap().id, 8);
    assert_eq!(h.drops(), vec![(t1, 2, DropReason::Codel), (next, 5, DropReason::Codel), (next2, 7, DropReason::Codel)]);
    assert!(next2 - next < next - t1, "drops come faster as count grows");
}

#[test]
fn a_late_dequeue_owes_several_drops() {
    let mut h = codel(1000, false);
    fill(&mut h, 200, 0, 1000);
    h.dequeue(6 * MS);
    let t1 = 107 * MS;
    h.dequeue(t1); // enters: one drop
    // 400 ms later the schedule owes drops at t1 + 100, + 70.7, + 57.7, + 50, ...: all at once.
    let late = t1 + 400 * MS;
    h.dequeue(late);
    let at_late = h.drops().iter().filter(|d| d.0 == late).count();
    let mut due = Instant(t1);
    let mut x = REC_INV_SQRT_ONE;
    let mut owed = 0;
    let mut count = 1;
    loop {
        due = control_law(due, INTERVAL, x);
        if due.nanos() > late {
            break;
        }
        owed += 1;
        count += 1;
        x = newton_step(count, x);
    }
    assert_eq!(at_late, owed);
    assert!(owed >= 5, "{owed}");
}

#[test]
fn leaves_dropping_when_sojourn_falls_below_target() {
    let mut h = codel(1000, false);
    fill(&mut h, 20, 0, 1000);
    h.dequeue(6 * MS);
    h.dequeue(107 * MS); // drops one, dropping
    h.drain(107 * MS); // queue empty
    h.enqueue(300 * MS, 1000);
    h.enqueue(300 * MS, 1000);
    h.enqueue(300 * MS, 1000);
    let before = h.drops().len();
    h.dequeue(301 * MS); // sojourn 1 ms: out of the dropping state
    h.dequeue(500 * MS); // sojourn 200 ms but the interval restarts first
    assert_eq!(h.drops().len(), before);
}

#[test]
fn never_drops_the_last_mtu_of_backlog() {
    let mut h = codel(1000, false);
    fill(&mut h, 3, 0, 1514);
    h.dequeue(10 * MS); // leaves 3028 bytes: above target, timer starts
    assert!(h.dequeue(500 * MS).is_some()); // 1514 left: at most one MTU, no drop
    assert!(h.dequeue(900 * MS).is_some());
    assert!(h.drops().is_empty());
}

#[test]
fn ecn_marks_capable_packets_and_drops_the_rest() {
    let mut h = codel(1000, true);
    for i in 0..50 {
        let ecn = if i % 2 == 0 { Ecn::Ect0 } else { Ecn::NotEct };
        let p = h.packet(0, ecn, 1000);
        h.offer(0, p);
    }
    h.dequeue(6 * MS); // id 0
    let t1 = 107 * MS;
    let first = h.dequeue(t1).unwrap(); // id 1 is Not-ECT: dropped
    assert_eq!(first.id, 2);
    let next = control_law(Instant(t1), INTERVAL, REC_INV_SQRT_ONE).nanos();
    let sent = h.dequeue(next - 1).unwrap(); // id 3 Not-ECT, no drop due yet: sent
    assert_eq!(sent.id, 3);
    let p = h.dequeue(next).unwrap(); // id 4 ECT(0): due, marked and sent
    assert_eq!(p.id, 4);
    assert_eq!(crate::wire::ecn(&p.data), Some(Ecn::Ce));
    assert_eq!(h.drops(), vec![(t1, 1, DropReason::Codel)]);
    assert_eq!(h.marks(), vec![(next, 4, MarkReason::Codel)]);
    assert_eq!(h.q.stats().marks.get(MarkReason::Codel), 1);
}

#[test]
fn reentry_resumes_near_the_last_drop_rate() {
    // A long episode reaches count n; after leaving it briefly, CoDel re-enters with
    // count = n - lastcount rather than 1, so the next drop comes sooner than an interval.
    let p = CodelParams::default();
    let mut c = Codel::new(Limit::Packets(10_000), p.clone());
    let mut rng = Rng::new(1);
    let mut out = Verdicts::default();
    let mut id = 0;
    let mut push = |c: &mut Codel, t: u64, n: usize| {
        for _ in 0..n {
            let mut pkt = Packet::new(id, vec![0; 1000]);
            pkt.enqueued_at = Instant(t);
            c.enqueue(Instant(t), pkt, &mut rng, &mut Verdicts::default());
            id += 1;
        }
    };
    push(&mut c, 0, 5000);
    let mut rng2 = Rng::new(2);
    let mut t = 6 * MS;
    while t < 1_000 * MS {
        c.dequeue(Instant(t), &mut rng2, &mut out);
        t += MS;
    }
    let n = c.vars().count;
    assert!(n >= 5, "count {n}");
    // Empty the queue: the episode ends.
    while c.dequeue(Instant(t), &mut rng2, &mut out).is_some() {}
    assert!(!c.vars().dropping);
    // Refill; above target for an interval again, well within 16 intervals.
    push(&mut c, t, 500);
    c.dequeue(Instant(t + 10 * MS), &mut rng2, &mut out);
    c.dequeue(Instant(t + 111 * MS), &mut rng2, &mut out);
    assert!(c.vars().dropping);
    assert_eq!(c.vars().count, n - 1, "count - lastcount (lastcount was 1)");
    // Had it been long ago, count would restart at 1.
    let mut fresh = c.vars().clone();
    fresh.dropping = false;
    fresh.count = n;
    fresh.lastcount = 1;
    fresh.drop_next = Instant(0);
    enter(&mut fresh, &p, Instant(17 * INTERVAL.nanos()));
    assert_eq!(fresh.count, 1);
}

#[test]
fn limit_refuses_arrivals() {
    let mut h = codel(5, false);
    fill(&mut h, 8, 0, 100);
    assert_eq!(h.drops().iter().map(|d| (d.1, d.2)).collect::<Vec<_>>(), (5..8).map(|i| (i, DropReason::QueueFull)).collect::<Vec<_>>());
}

#[test]
fn bad_parameters_name_the_field() {
    let p = CodelParams { target: Duration::from_millis(200), ..Default::default() };
    assert_eq!(p.validate().unwrap_err(), "target: 200000 us must be below interval (100000 us)");
    assert!(CodelParams { interval: Duration::ZERO, ..Default::default() }.validate().unwrap_err().starts_with("interval"));
}
