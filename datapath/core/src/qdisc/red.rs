//! RED (Floyd and Jacobson 1993) as Linux's sch_red runs it (include/net/red.h): an EWMA of
//! the queue at each arrival, corrected for idle time; below `min` nothing happens, between
//! the thresholds packets are dropped (or CE-marked) with a probability rising to
//! `probability` at `max`, spaced uniformly by the count since the last mark; above `max`
//! everything is dropped, or from `max` to 2·`max` with probability rising to 1 in gentle mode
//! (Floyd 2000; ns-3's default; Linux has no gentle mode). Adaptive RED (Floyd, Gummadi and
//! Shenker 2001) tunes `probability` every 500 ms to keep the average between the thresholds.
//!
//! With `ns3`, arrivals are judged as ns-3's RedQueueDisc does instead (docs/simulation.md):
//! after an idle period the average decays by (1-w)^(m+1) for the m whole packets the link could
//! have sent, and still takes in the queue; the count restarts at 1 on the first arrival above
//! `min` (or with no more than one packet queued, none counts), and each arrival is dropped with
//! ns-3's "wait" probability p_b / (2 - count·p_b), 0 below count·p_b = 1: drops come 1/p_b to
//! 2/p_b arrivals apart, where Linux spaces them over 1 to 1/p_b.
//!
//! Byte mode (a byte limit, as Linux) measures the queue in bytes; packet mode (a packet limit,
//! as the original paper and ns-3) in packets. Thresholds are in the limit's unit.

use super::{DropReason, Fifo, Limit, MarkReason, Overflow, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// RED's parameters. Defaults follow tc-red(8).
#[derive(Clone, Debug, PartialEq)]
pub struct RedParams {
    /// Average queue (in the limit's unit) below which nothing is dropped. Default max / 3.
    pub min: Option<u64>,
    /// Average queue above which everything is dropped (2·max in gentle mode). Default limit / 4.
    pub max: Option<u64>,
    /// Bytes: the average packet size, for the EWMA weight and the idle-time correction. Default 1000.
    pub avpkt_bytes: u32,
    /// Packets: the burst the average should absorb; sets the EWMA weight. Default
    /// (2·min + max) / (3·avpkt), at least the smallest the weight rule accepts.
    pub burst_pkts: Option<u32>,
    /// Drop probability at `max` (max_p). Default 0.02.
    pub probability: f64,
    /// Bits per second the link drains at, to count how many packets an idle period could have
    /// sent. Default 10 Mbit/s (tc's); the control plane sets the link's rate.
    pub bandwidth_bps: u64,
    /// Mark CE instead of dropping ECN-capable packets. Default off.
    pub ecn: bool,
    /// With ecn: above `max`, drop even ECN-capable packets. Default off.
    pub harddrop: bool,
    /// Adaptive RED: tune `probability` every 500 ms. Default off.
    pub adaptive: bool,
    /// Gentle RED: between max and 2·max the probability rises from max_p to 1. Default off.
    pub gentle: bool,
    /// Judge as ns-3's RedQueueDisc rather than Linux's sch_red. Default off.
    pub ns3: bool,
}

impl Default for RedParams {
    fn default() -> Self {
        RedParams {
            min: None,
            max: None,
            avpkt_bytes: 1000,
            burst_pkts: None,
            probability: 0.02,
            bandwidth_bps: 10_000_000,
            ecn: false,
            harddrop: false,
            adaptive: false,
            gentle: false,
            ns3: false,
        }
    }
}

/// Thresholds and weight once defaults are filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct RedResolved {
    pub min: f64,
    pub max: f64,
    /// EWMA weight, 2^-wlog.
    pub wlog: u32,
    pub burst_pkts: u32,
}

impl RedParams {
    fn limit_units(limit: Limit) -> u64 {
        match limit {
            Limit::Packets(n) => n as u64,
            Limit::Bytes(b) => b as u64,
        }
    }
    /// The thresholds in the limit's unit, and the EWMA weight; an error names the parameter.
    pub fn resolve(&self, limit: Limit) -> Result<RedResolved, String> {
        let lim = Self::limit_units(limit);
        let max = self.max.unwrap_or(lim / 4);
        let min = self.min.unwrap_or(max / 3);
        if max == 0 {
            return Err(format!("max: must be positive (the queue's limit {lim} is too small for the default limit / 4)"));
        }
        if min >= max {
            return Err(format!("min: {min} must be below max ({max})"));
        }
        if max > lim {
            return Err(format!("max: {max} must not exceed the queue's limit ({lim})"));
        }
        if !(self.probability > 0.0 && self.probability <= 1.0) {
            return Err(format!("probability: {} is not in (0, 1]", self.probability));
        }
        if self.avpkt_bytes == 0 {
            return Err("avpkt: must be positive".into());
        }
        if self.bandwidth_bps == 0 {
            return Err("bandwidth: must be positive".into());
        }
        // The weight rule works in packets: thresholds in bytes count avpkt-sized packets.
        let per_pkt = match limit {
            Limit::Packets(_) => 1.0,
            Limit::Bytes(_) => self.avpkt_bytes as f64,
        };
        let min_pkts = min as f64 / per_pkt;
        let burst = match self.burst_pkts {
            Some(b) => b,
            None => (((2.0 * min as f64 + max as f64) / (3.0 * per_pkt)) as u32).max(min_pkts.floor() as u32 + 1),
        };
        let wlog = ewma_wlog(min_pkts, burst).map_err(|e| format!("burst: {e}"))?;
        Ok(RedResolved { min: min as f64, max: max as f64, wlog, burst_pkts: burst })
    }
    pub fn validate(&self, limit: Limit) -> Result<(), String> {
        self.resolve(limit).map(|_| ())
    }
}

/// The EWMA weight as tc chooses it: the largest w = 2^-wlog for which `burst` back-to-back
/// packets into an empty queue keep the average below `min_pkts`. After L arrivals the
/// average is L + 1 + ((1-w)^(L+1) - 1)/w (Floyd and Jacobson, section 10); tc's form of the
/// condition is burst + 1 - min <= (1 - (1-w)^burst) / w.
pub fn ewma_wlog(min_pkts: f64, burst: u32) -> Result<u32, String> {
    let a = burst as f64 + 1.0 - min_pkts;
    if a < 1.0 {
        return Err(format!("{burst} packets is too small for the minimum threshold; use at least {}", min_pkts as u32 + 1));
    }
    for wlog in 1..32 {
        let w = 0.5f64.powi(wlog as i32);
        if a <= (1.0 - (1.0 - w).powi(burst as i32)) / w {
            return Ok(wlog);
        }
    }
    Err(format!("{burst} packets needs a weight below 2^-31"))
}

/// Adaptive RED's constants (Floyd, Gummadi, Shenker; as Linux).
const ADAPT_EVERY: Duration = Duration(500_000_000);
const MAX_P_MIN: f64 = 0.01;
const MAX_P_MAX: f64 = 0.50;

pub struct Red {
    limit: Limit,
    p: RedParams,
    r: RedResolved,
    w: f64,
    /// Average queue in the limit's unit.
    avg: f64,
    /// Arrivals between the thresholds since the last mark; -1 when outside them.
    count: i64,
    /// The uniform draw the count is compared against, scaled to count·(avg-min)/(max-min)·max_p.
    r_draw: f64,
    idle_since: Option<Instant>,
    max_p: f64,
    next_adapt: Option<Instant>,
    fifo: Fifo,
    /// ns-3: whether the last arrival found the average above min (its "old"), and the bytes
    /// counted with `count` (its byte mode).
    above: bool,
    count_bytes: u64,
}

enum Verdict {
    Pass,
    Early,
    Forced,
}

impl Red {
    pub fn new(limit: Limit, p: RedParams) -> Self {
        let r = p.resolve(limit).expect("RED parameters were validated");
        Red {
            limit,
            w: 0.5f64.powi(r.wlog as i32),
            r,
            avg: 0.0,
            count: -1,
            r_draw: 0.0,
            idle_since: Some(Instant::ZERO),
            max_p: p.probability,
            next_adapt: None,
            fifo: Fifo::new(limit, Overflow::Tail),
            above: false,
            count_bytes: 0,
            p,
        }
    }
    /// The average queue, in the limit's unit.
    pub fn avg(&self) -> f64 {
        self.avg
    }
    pub fn max_p(&self) -> f64 {
        self.max_p
    }
    pub fn resolved(&self) -> &RedResolved {
        &self.r
    }

    fn backlog(&self) -> f64 {
        match self.limit {
            Limit::Packets(_) => self.fifo.len() as f64,
            Limit::Bytes(_) => self.fifo.bytes() as f64,
        }
    }

    /// The average decayed over an idle period: as if (1-w)^m for the m average-sized
    /// packets the link could have sent meanwhile (Linux approximates this by a table).
    fn idle_avg(&self, now: Instant) -> f64 {
        match self.idle_since {
            None => self.avg,
            Some(since) => {
                let pkt_time_ns = self.p.avpkt_bytes as f64 * 8e9 / self.p.bandwidth_bps as f64;
                let m = now.saturating_since(since).nanos() as f64 / pkt_time_ns;
                self.avg * (1.0 - self.w).powf(m)
            }
        }
    }

    /// Adaptive RED's timer, run for every tick up to `now`.
    fn adapt(&mut self, now: Instant) {
        if !self.p.adaptive {
            return;
        }
        let mut t = *self.next_adapt.get_or_insert(now + ADAPT_EVERY);
        let (min, max) = (self.r.min, self.r.max);
        let (target_lo, target_hi) = (min + 0.4 * (max - min), min + 0.6 * (max - min));
        while t <= now {
            let avg = self.idle_avg(t);
            let was = self.max_p;
            if avg > target_hi && self.max_p <= MAX_P_MAX {
                self.max_p += (self.max_p / 4.0).min(0.01); // additive increase
            } else if avg < target_lo && self.max_p >= MAX_P_MIN {
                self.max_p *= 0.9; // multiplicative decrease
            }
            t += ADAPT_EVERY;
            // Nothing changed, and nothing will: the average holds still until an empty queue
            // starts its idle decay, and then only falls, so once below target it stays there.
            // The rest of the ticks are skipped; run, a leap of years in a replay is billions.
            if self.max_p == was && (self.idle_since.is_none() || avg < target_lo) && t <= now {
                t += Duration((now.nanos() - t.nanos()) / ADAPT_EVERY.nanos() * ADAPT_EVERY.nanos() + ADAPT_EVERY.nanos());
            }
        }
        self.next_adapt = Some(t);
    }

    /// Probability of marking at this average (p_b), for the count rule.
    fn p_b(&self, avg: f64) -> f64 {
        let (min, max) = (self.r.min, self.r.max);
        if avg < max {
            self.max_p * (avg - min) / (max - min)
        } else {
            self.max_p + (1.0 - self.max_p) * (avg - max) / max
        }
    }

    /// ns-3's decision (RedQueueDisc::DoEnqueue and DropEarly) for a packet of `len` bytes
    /// arriving to a queue of `q0` (the limit's unit); the average is already updated.
    fn judge_ns3(&mut self, q0: f64, len: usize, rng: &mut Rng) -> Verdict {
        let (min, max) = (self.r.min, self.r.max);
        let bytes = matches!(self.limit, Limit::Bytes(_));
        self.count += 1;
        self.count_bytes += len as u64;
        if !(self.avg >= min && q0 > 1.0) {
            self.above = false;
            return Verdict::Pass;
        }
        let ceiling = if self.p.gentle { 2.0 * max } else { max };
        if self.avg >= ceiling {
            return Verdict::Forced; // the count carries on
        }
        if !self.above {
            self.above = true;
            self.count = 1;
            self.count_bytes = len as u64;
            return Verdict::Pass;
        }
        let p_b = self.p_b(self.avg).min(1.0);
        let counted = if bytes { (self.count_bytes / self.p.avpkt_bytes as u64) as f64 } else { self.count as f64 };
        let mut p_a = if counted * p_b < 1.0 {
            0.0
        } else if counted * p_b < 2.0 {
            p_b / (2.0 - counted * p_b)
        } else {
            1.0
        };
        if bytes && p_a < 1.0 {
            p_a *= len as f64 / self.p.avpkt_bytes as f64;
        }
        if rng.next_f64() <= p_a {
            self.count = 0;
            self.count_bytes = 0;
            return Verdict::Early;
        }
        Verdict::Pass
    }

    fn judge(&mut self, rng: &mut Rng) -> Verdict {
        let (min, max) = (self.r.min, self.r.max);
        let ceiling = if self.p.gentle { 2.0 * max } else { max };
        if self.avg < min {
            self.count = -1;
            return Verdict::Pass;
        }
        if self.avg >= ceiling {
            self.count = -1;
            return Verdict::Forced;
        }
        // Between the thresholds. Marks are spaced uniformly: after each mark a fresh draw R,
        // and the next mark comes at the first count with count·p_b >= R.
        self.count += 1;
        if self.count == 0 {
            self.r_draw = rng.next_f64();
            return Verdict::Pass;
        }
        if self.count as f64 * self.p_b(self.avg) >= self.r_draw {
            self.count = 0;
            self.r_draw = rng.next_f64();
            return Verdict::Early;
        }
        Verdict::Pass
    }
}

impl QueueDisc for Red {
    fn enqueue(&mut self, now: Instant, mut pkt: Packet, rng: &mut Rng, out: &mut Verdicts) {
        self.adapt(now);
        // The average of the queue this packet finds, before it joins.
        let q0 = self.backlog();
        self.avg = if self.p.ns3 {
            // ns-3: the whole packets the link could have sent while idle, plus this arrival's.
            let m = match self.idle_since.take() {
                Some(since) => {
                    let per_s = self.p.bandwidth_bps as f64 / (8.0 * self.p.avpkt_bytes as f64);
                    (now.saturating_since(since).nanos() as f64 * 1e-9 * per_s).floor()
                }
                None => 0.0,
            };
            self.avg * (1.0 - self.w).powf(m + 1.0) + self.w * q0
        } else if self.idle_since.is_some() {
            let decayed = self.idle_avg(now);
            self.idle_since = None;
            decayed
        } else {
            self.avg + self.w * (q0 - self.avg)
        };
        let verdict = if self.p.ns3 { self.judge_ns3(q0, pkt.len(), rng) } else { self.judge(rng) };
        let (reason, mark) = match verdict {
            Verdict::Pass => (None, None),
            Verdict::Early => (Some(DropReason::RedEarly), Some(MarkReason::RedEarly)),
            Verdict::Forced if self.p.harddrop => (Some(DropReason::RedForced), None),
            Verdict::Forced => (Some(DropReason::RedForced), Some(MarkReason::RedForced)),
        };
        if let Some(reason) = reason {
            let marked = self.p.ecn && mark.is_some_and(|m| out.try_mark(&mut pkt, m));
            if !marked {
                out.drop(pkt, reason);
                return;
            }
        }
        self.fifo.push_or_drop(pkt, out);
    }

    fn dequeue(&mut self, now: Instant, _rng: &mut Rng, _out: &mut Verdicts) -> Option<Packet> {
        self.adapt(now);
        let pkt = self.fifo.pop();
        // Asked for a packet and had none: the idle period starts (ns-3: every such ask restarts it).
        if pkt.is_none() && (self.idle_since.is_none() || self.p.ns3) {
            self.idle_since = Some(now);
        }
        pkt
    }
    fn backlog_pkts(&self) -> usize {
        self.fifo.len()
    }
    fn backlog_bytes(&self) -> usize {
        self.fifo.bytes()
    }
    fn name(&self) -> &'static str {
        "red"
    }
}

#[cfg(test)]
mod tests;
