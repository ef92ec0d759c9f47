//! COBALT, CAKE's AQM per flow queue: CoDel's control law (signals spaced interval/sqrt(count),
//! with count decaying once per spacing after the queue recovers, rather than resetting) and
//! BLUE (a drop probability that rises on each buffer overflow and falls when the queue
//! empties), for flows that do not answer CoDel. As Linux's sch_cake: Q0.32 inverse square
//! roots, BLUE's steps of 1/256 and 1/4096, BLUE drops never marked.

use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// One tin's COBALT parameters (every flow of the tin shares them).
#[derive(Clone, Debug, PartialEq)]
pub struct CobaltParams {
    pub target: Duration,
    pub interval: Duration,
    /// Time to send one MTU at the tin's rate (0 when unshaped): sojourns below 4 of them are
    /// no standing queue.
    pub mtu_time: Duration,
    /// BLUE's steps, as fractions of 2^32.
    pub p_inc: u32,
    pub p_dec: u32,
}

impl CobaltParams {
    /// The tin's parameters from the configured target and interval (rtt) and its rate: the
    /// target rises to 1.5 MTU times on slow tins, and the interval keeps its margin over it.
    pub fn for_rate(target: Duration, rtt: Duration, mtu_bytes: u32, rate_bytes_per_s: u64) -> Self {
        let mtu_time = (mtu_bytes as u64 * 1_000_000_000).checked_div(rate_bytes_per_s).unwrap_or(0);
        let t = (mtu_time * 3 / 2).max(target.nanos());
        let interval = (rtt.nanos() + t - target.nanos()).max(2 * t);
        CobaltParams {
            target: Duration(t),
            interval: Duration(interval),
            mtu_time: Duration(mtu_time),
            p_inc: 1 << 24,
            p_dec: 1 << 20,
        }
    }
}

/// One flow queue's COBALT state.
#[derive(Clone, Debug)]
pub struct CobaltVars {
    pub count: u32,
    /// 1/sqrt(count) in Q0.32.
    pub rec_inv_sqrt: u32,
    pub drop_next: Instant,
    pub blue_timer: Instant,
    /// BLUE's drop probability, as a fraction of 2^32.
    pub p_drop: u32,
    pub dropping: bool,
}

impl Default for CobaltVars {
    /// 1/sqrt(count) starts at 1, so the first signal comes an interval after the sojourn
    /// first exceeds target. (Linux's fresh flow slots start at 0 instead, which signals on
    /// the next packet after it; a slot that has been used once starts at 1, as here.)
    fn default() -> Self {
        CobaltVars {
            count: 0,
            rec_inv_sqrt: u32::MAX,
            drop_next: Instant::ZERO,
            blue_timer: Instant::ZERO,
            p_drop: 0,
            dropping: false,
        }
    }
}

/// What COBALT says of a dequeued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Pass,
    /// CoDel's turn: mark CE if the packet is ECN-capable, else drop.
    Codel,
    /// BLUE's coin: drop, never mark (marks do not slow an unresponsive flow).
    Blue,
}

/// Counts below this take 1/sqrt(count) from a table, not a Newton step.
const CACHE: usize = 16;

/// One Newton step towards 1/sqrt(count) in Q0.32: x' = x (3 - count x^2) / 2.
fn newton(count: u32, x: u32) -> u32 {
    let x = x as u64;
    let x2 = (x * x) >> 32;
    let three_minus = (3u64 << 32).wrapping_sub(count as u64 * x2);
    (((three_minus >> 2) * x) >> 31) as u32
}

/// 1/sqrt(count) in Q0.32 for counts below 16, as Linux's sch_cake tabulates it (count 0
/// counts as 1).
const INV_SQRT: [u32; CACHE] = [
    0xFFFF_FFFF, 0xFFFF_FFFF, 3_037_000_500, 2_479_700_525, 2_147_483_647, 1_920_767_767, 1_753_413_056,
    1_623_345_051, 1_518_500_250, 1_431_655_765, 1_358_187_914, 1_294_981_364, 1_239_850_263, 1_191_209_601,
    1_147_878_294, 1_108_955_788,
];

impl CobaltVars {
    fn invsqrt(&mut self) {
        self.rec_inv_sqrt = match self.count as usize {
            c if c < CACHE => INV_SQRT[c],
            _ => newton(self.count, self.rec_inv_sqrt),
        };
    }

    /// The control law: interval/sqrt(count) after `t`.
    fn control(&self, t: Instant, interval: Duration) -> Instant {
        Instant(t.nanos() + ((interval.nanos() as u128 * self.rec_inv_sqrt as u128) >> 32) as u64)
    }

    /// The verdict on a packet leaving after `sojourn`; `bulk_flows` raises the bar for a
    /// standing queue (CAKE's ingress mode counts its bulk flows here; 0 otherwise).
    pub fn should_drop(&mut self, p: &CobaltParams, now: Instant, sojourn: Duration, bulk_flows: u32, rng: &mut Rng) -> Signal {
        let mtu = p.mtu_time.nanos();
        let over_target = sojourn > p.target && sojourn.nanos() > 2 * mtu * bulk_flows as u64 && sojourn.nanos() > 4 * mtu;
        let mut schedule = now.nanos() as i128 - self.drop_next.nanos() as i128;
        let mut next_due = self.count != 0 && schedule >= 0;
        if over_target {
            if !self.dropping {
                self.dropping = true;
                self.drop_next = self.control(now, p.interval);
            }
            if self.count == 0 {
                self.count = 1;
            }
        } else if self.dropping {
            self.dropping = false;
        }
        let mut signal = Signal::Pass;
        if next_due && self.dropping {
            signal = Signal::Codel;
            self.count = self.count.saturating_add(1);
            self.invsqrt();
            self.drop_next = self.control(self.drop_next, p.interval);
            schedule = now.nanos() as i128 - self.drop_next.nanos() as i128;
        } else {
            // The queue has recovered: count steps down once per spacing that has passed.
            while next_due {
                self.count -= 1;
                self.invsqrt();
                self.drop_next = self.control(self.drop_next, p.interval);
                schedule = now.nanos() as i128 - self.drop_next.nanos() as i128;
                next_due = self.count != 0 && schedule >= 0;
            }
        }
        if signal == Signal::Pass && self.p_drop != 0 && (rng.next_u64() >> 32) < self.p_drop as u64 {
            signal = Signal::Blue;
        }
        if self.count == 0 {
            self.drop_next = now + p.interval;
        } else if schedule > 0 && signal == Signal::Pass {
            self.drop_next = now;
        }
        signal
    }

    /// A packet of this flow was dropped for lack of buffer: BLUE steps up (at most once a
    /// target), and CoDel starts dropping at once. True when BLUE just became active.
    pub fn queue_full(&mut self, p: &CobaltParams, now: Instant) -> bool {
        let mut up = false;
        if now.saturating_since(self.blue_timer) > p.target {
            up = self.p_drop == 0;
            self.p_drop = self.p_drop.saturating_add(p.p_inc);
            self.blue_timer = now;
        }
        self.dropping = true;
        self.drop_next = now;
        if self.count == 0 {
            self.count = 1;
        }
        up
    }

    /// The flow's queue was found empty: BLUE steps down (at most once a target), and CoDel
    /// leaves its dropping state, its count decaying. True when BLUE just went quiet.
    pub fn queue_empty(&mut self, p: &CobaltParams, now: Instant) -> bool {
        let mut down = false;
        if self.p_drop != 0 && now.saturating_since(self.blue_timer) > p.target {
            self.p_drop = self.p_drop.saturating_sub(p.p_dec);
            self.blue_timer = now;
            down = self.p_drop == 0;
        }
        self.dropping = false;
        if self.count != 0 && now >= self.drop_next {
            self.count -= 1;
            self.invsqrt();
            self.drop_next = self.control(self.drop_next, p.interval);
        }
        down
    }

    /// Still worth remembering once empty: BLUE or CoDel has state that decays with time.
    pub fn active(&self, now: Instant) -> bool {
        self.p_drop != 0 || self.count != 0 || now < self.drop_next
    }
}

#[cfg(test)]
pub(super) fn inverse_sqrt(count: u32) -> u32 {
    let mut v = CobaltVars { count: 0, ..Default::default() };
    for c in 1..=count {
        v.count = c;
        v.invsqrt();
    }
    v.rec_inv_sqrt
}
