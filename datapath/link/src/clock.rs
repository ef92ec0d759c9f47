//! The shell's clock: CLOCK_MONOTONIC, as the core's Instant; and how late this machine's
//! timer wake-ups come, so a thread knows how early to stop sleeping before a departure.

use bloatlab_core::Instant;

/// The time on `clock` in nanoseconds (the monotonic clock, or a CPU-time clock).
pub fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_now() -> Instant {
    Instant(read(libc::CLOCK_MONOTONIC))
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, to put queue logs on the wall clock and the kernel's
/// receive stamps on the monotonic clock. The realtime read is bracketed by two monotonic
/// reads, so the offset is not skewed by the time one read takes.
pub fn realtime_offset_ns() -> i64 {
    let before = read(libc::CLOCK_MONOTONIC);
    let real = read(libc::CLOCK_REALTIME);
    let after = read(libc::CLOCK_MONOTONIC);
    real as i64 - (before + (after - before) / 2) as i64
}

/// How long before a departure a thread must stop sleeping, learnt from its own wake-ups.
///
/// A timer wake-up comes late by an amount that depends on how long the thread slept: on a
/// VM whose idle vCPU halts, 20-35 us after a 50 us sleep but 40-90 us (p10-p90) after a
/// 10 ms one, when the host must first run the vCPU again. A fixed lead is then too short
/// for links with delay (every departure late by tens of us) or wasteful for the others. So
/// each timed sleep's overshoot (wake time minus the time asked for) is kept by how far ahead
/// its target lay when the thread went to sleep (classes of powers of two of microseconds),
/// and the lead for a departure `d` ahead is a high quantile of the recent overshoots in d's
/// class, plus a margin. Keyed by the distance to the departure rather than by the sleep's own
/// length (the distance minus the lead), a class learns from the very sleeps its lead decides:
/// a lead that grows shortens those sleeps and with them their overshoots, so it settles.
pub struct WakeupLead {
    classes: Vec<Overshoots>,
    min_ns: u64,
    max_ns: u64,
    quantile: f64,
}

/// The last `WINDOW` overshoots of one class, the lead they imply, and when the last came.
#[derive(Clone, Default)]
struct Overshoots {
    recent_ns: Vec<u64>,
    next: usize,
    lead_ns: Option<u64>,
    last_ns: u64,
}

impl WakeupLead {
    /// Targets [2^k, 2^(k+1)) us ahead fall in class k; the last class takes every farther one.
    const CLASSES: usize = 17;
    /// Overshoots remembered per class: few enough to follow a change of load within a
    /// second or two at a ping's pace, enough that one stall of the host does not set the lead.
    const WINDOW: usize = 64;
    /// Added to the quantile: the read of the clock after waking, and some room.
    const MARGIN_NS: u64 = 10_000;
    /// A class with no wake-up for this long is forgotten. Where the lead covers the whole
    /// distance to the departures the thread never sleeps for them and so learns nothing
    /// new; forgetting lets it try sleeping again once the load that set the lead is gone.
    const FORGET_NS: u64 = 1_000_000_000;

    /// A lead that covers `quantile` of the recent wake-ups (1: all of them, the latest
    /// included; the config's default is 0.95, the rest coming late). Leads stay within
    /// [min_ns, max_ns]; a class with no recent wake-ups uses the nearest shorter class that
    /// has some, or min_ns.
    pub fn covering(min_ns: u64, max_ns: u64, quantile: f64) -> Self {
        WakeupLead { classes: vec![Overshoots::default(); Self::CLASSES], min_ns, max_ns: max_ns.max(min_ns), quantile }
    }

    fn class(ahead_ns: u64) -> usize {
        let us = (ahead_ns / 1_000).max(1);
        ((63 - us.leading_zeros()) as usize).min(Self::CLASSES - 1)
    }

    /// How long before a departure `ahead_ns` from `now_ns` to wake up.
    pub fn lead_ns(&self, ahead_ns: u64, now_ns: u64) -> u64 {
        let k = Self::class(ahead_ns);
        let recent = |c: &Overshoots| c.lead_ns.filter(|_| now_ns.saturating_sub(c.last_ns) < Self::FORGET_NS);
        self.classes[..=k].iter().rev().find_map(recent).unwrap_or(self.min_ns)
    }

    /// A timed sleep ended at `now_ns`, `overshoot_ns` after its due time; when it began,
    /// what it was for (a departure, or the sleep's own end where that was all) lay
    /// `ahead_ns` ahead.
    pub fn record(&mut self, ahead_ns: u64, overshoot_ns: u64, now_ns: u64) {
        let (min_ns, max_ns, quantile) = (self.min_ns, self.max_ns, self.quantile);
        let c = &mut self.classes[Self::class(ahead_ns)];
        if now_ns.saturating_sub(c.last_ns) >= Self::FORGET_NS {
            c.recent_ns.clear();
            c.next = 0;
        }
        c.last_ns = now_ns;
        if c.recent_ns.len() < Self::WINDOW {
            c.recent_ns.push(overshoot_ns);
        } else {
            c.recent_ns[c.next] = overshoot_ns;
        }
        c.next = (c.next + 1) % Self::WINDOW;
        let mut sorted = c.recent_ns.clone();
        let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        let q = *sorted.select_nth_unstable(rank).1;
        c.lead_ns = Some((q + Self::MARGIN_NS).clamp(min_ns, max_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_the_wall_clock_minus_the_monotonic_one() {
        let off = realtime_offset_ns();
        let (mono, real) = (read(libc::CLOCK_MONOTONIC) as i64, read(libc::CLOCK_REALTIME) as i64);
        assert!((real - mono - off).abs() < 1_000_000, "offset {off} far from {}", real - mono);
    }

    const T0: u64 = 5_000_000_000; // scripted CLOCK_MONOTONIC time of the tests' wake-ups

    #[test]
    fn lead_starts_at_the_minimum() {
        let w = WakeupLead::covering(50_000, 500_000, 0.95);
        assert_eq!(w.lead_ns(10_000_000, T0), 50_000);
        assert_eq!(w.lead_ns(0, T0), 50_000);
    }

    #[test]
    fn lead_covers_most_overshoots_of_sleeps_for_targets_that_far() {
        let mut w = WakeupLead::covering(20_000, 500_000, 0.95);
        // Departures 10 ms ahead: overshoots 1..=80 us, the last 64 of them kept (17..=80 us).
        for us in 1..=80u64 {
            w.record(10_000_000, us * 1_000, T0);
        }
        // p95 of 17..=80 is the 61st smallest, 77 us; plus the 10 us margin.
        assert_eq!(w.lead_ns(10_000_000, T0), 87_000);
        assert_eq!(w.lead_ns(9_000_000, T0), 87_000); // same class: [8192, 16384) us
        // Nearer targets have their own class; with no wake-ups there yet, the minimum.
        assert_eq!(w.lead_ns(100_000, T0), 20_000);
        // Farther ones borrow from the nearest class below that has data.
        assert_eq!(w.lead_ns(40_000_000, T0), 87_000);
        w.record(100_000, 15_000, T0);
        assert_eq!(w.lead_ns(100_000, T0), 25_000);
    }

    #[test]
    fn lead_stays_within_its_bounds_and_follows_the_machine() {
        let mut w = WakeupLead::covering(50_000, 300_000, 0.95);
        w.record(1_000_000, 5_000, T0);
        assert_eq!(w.lead_ns(1_000_000, T0), 50_000);
        w.record(1_000_000, 2_000_000, T0); // one stall of the host: as good as all it knows
        assert_eq!(w.lead_ns(1_000_000, T0), 300_000);
        for _ in 0..20 {
            w.record(1_000_000, 30_000, T0);
        }
        assert_eq!(w.lead_ns(1_000_000, T0), 50_000); // 1 in 22: past the quantile
        for _ in 0..64 {
            w.record(1_000_000, 2_000_000, T0); // a stalled host
        }
        assert_eq!(w.lead_ns(1_000_000, T0), 300_000);
        for _ in 0..64 {
            w.record(1_000_000, 30_000, T0); // and a quiet one again: the stall is forgotten
        }
        assert_eq!(w.lead_ns(1_000_000, T0), 50_000);
    }

    #[test]
    fn a_lead_covering_every_wake_up_is_the_latest_of_them() {
        let mut w = WakeupLead::covering(20_000, 5_000_000, 1.0);
        for us in 1..=64u64 {
            w.record(1_200_000, us * 1_000, T0);
        }
        w.record(1_200_000, 1_100_000, T0); // one wake-up 1.1 ms late: the lead covers it
        assert_eq!(w.lead_ns(1_200_000, T0), 1_110_000);
        assert_eq!(WakeupLead::covering(20_000, 5_000_000, 0.95).lead_ns(0, T0), 20_000);
    }

    #[test]
    fn a_class_with_no_recent_wake_up_is_forgotten() {
        let mut w = WakeupLead::covering(50_000, 500_000, 0.95);
        w.record(100_000, 20_000, T0); // 64-128 us ahead
        for _ in 0..64 {
            w.record(300_000, 200_000, T0); // 256-512 us ahead: a lead longer than the distance
        }
        assert_eq!(w.lead_ns(300_000, T0 + 999_999_999), 210_000);
        // No sleep for such departures since (the thread spun for them): after a second the
        // class counts for nothing, the nearest class below with recent wake-ups is none...
        assert_eq!(w.lead_ns(300_000, T0 + 1_000_000_000), 50_000);
        // ...and a new wake-up starts it afresh, the old ones gone.
        w.record(300_000, 30_000, T0 + 1_000_000_000);
        assert_eq!(w.lead_ns(300_000, T0 + 1_000_000_000), 50_000);
        // A class below with a recent wake-up stands in for one forgotten.
        w.record(100_000, 70_000, T0 + 2_500_000_000);
        assert_eq!(w.lead_ns(300_000, T0 + 2_500_000_000), 80_000);
    }
}
