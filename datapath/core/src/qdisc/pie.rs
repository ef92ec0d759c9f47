//! PIE (RFC 8033) as Linux's sch_pie runs it: a drop probability updated every `tupdate` by a
//! proportional-integral controller on the queueing delay, which is either each dequeued
//! packet's sojourn time (Linux's default) or the backlog over a measured departure rate
//! (the RFC's estimator); random early drop at enqueue, derandomised, after a burst allowance.
//!
//! With `ns3`, it runs as ns-3's PieQueueDisc does instead (docs/simulation.md): no
//! derandomisation, a burst allowance armed by the first arrival and re-armed only after 1.5 s
//! of quiet, the probability held at 0 during it, decay by 2% per update, no extra step above
//! 250 ms, updates from the queue's creation (t = 0), the low-delay exemption judged on the
//! previous update's delay, and no early drop with 2 packets or fewer queued.
//!
//! The controller runs on a timer. State changes only at enqueues and dequeues, so the ticks
//! due since the last event are run, in order, when the next one comes: the same result as a
//! timer, with no clock in the core.

use super::{DropReason, Fifo, Limit, MarkReason, Overflow, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// PIE's parameters. Defaults are Linux's sch_pie (RFC 8033's, except the RFC's 15 ms
/// target is Linux's too). The packet limit (1000 by default) is the queue's `Limit`.
#[derive(Clone, Debug, PartialEq)]
pub struct PieParams {
    /// Queueing delay the controller steers to. Default 15 ms.
    pub target: Duration,
    /// Period of the probability update. Default 15 ms.
    pub tupdate: Duration,
    /// Gain on the delay's distance from target, per second of delay. Default 0.125.
    pub alpha: f64,
    /// Gain on the delay's change since the last update, per second. Default 1.25.
    pub beta: f64,
    /// How long a burst into an idle queue passes without early drops. Default 150 ms.
    pub max_burst: Duration,
    /// Mark ECN-capable packets instead of dropping them while the probability is at most
    /// `ecn_prob`. Default off.
    pub ecn: bool,
    /// Probability above which even ECN-capable packets are dropped. Default 0.1.
    pub ecn_prob: f64,
    /// Scale each packet's probability by its size over the MTU. Default off.
    pub bytemode: bool,
    /// Estimate the delay from the departure rate (RFC 8033) instead of timestamps. Default off.
    pub dq_rate_estimator: bool,
    /// Bytes: below two of these queued, no early drop. Default 1514.
    pub mtu_bytes: u32,
    /// Follow ns-3's PieQueueDisc rather than Linux's sch_pie. Default off.
    pub ns3: bool,
}

impl Default for PieParams {
    fn default() -> Self {
        PieParams {
            target: Duration::from_millis(15),
            tupdate: Duration::from_millis(15),
            alpha: 0.125,
            beta: 1.25,
            max_burst: Duration::from_millis(150),
            ecn: false,
            ecn_prob: 0.1,
            bytemode: false,
            dq_rate_estimator: false,
            mtu_bytes: 1514,
            ns3: false,
        }
    }
}

impl PieParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.target.nanos() == 0 {
            return Err("target: must be positive".into());
        }
        if self.tupdate.nanos() == 0 {
            return Err("tupdate: must be positive".into());
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return Err(format!("alpha: {} must be a number >= 0", self.alpha));
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(format!("beta: {} must be a number >= 0", self.beta));
        }
        if !(0.0..=1.0).contains(&self.ecn_prob) {
            return Err(format!("ecn_prob: {} is not a probability in [0, 1]", self.ecn_prob));
        }
        Ok(())
    }
}

/// Departure-rate measurement needs this many bytes dequeued in a row (RFC 8033's DQ_THRESHOLD).
const DQ_THRESHOLD_BYTES: u64 = 16_384;
/// Delays above this raise the probability by 2% more per update (Linux, RFC 8033 5.1).
const HIGH_DELAY: Duration = Duration(250_000_000);

/// One controller update (RFC 8033 4.2, with Linux's details). `qdelay` and `qdelay_old`
/// are this and the previous update's delay estimates; `queued` says whether anything is
/// queued. Returns the new probability.
pub fn update_probability(p: &PieParams, prob: f64, qdelay: Duration, qdelay_old: Duration, queued: bool) -> f64 {
    let secs = |d: Duration| d.nanos() as f64 * 1e-9;
    let (mut alpha, mut beta) = (p.alpha, p.beta);
    // Small probabilities move in small steps: the gains shrink by 2 below 10%, and by a
    // further 4 per decade below 1%, down to 1e-6 (the RFC's table of divisors 2..2048).
    if prob < 0.1 {
        alpha /= 2.0;
        beta /= 2.0;
        let mut decade = 0.01;
        while prob < decade && decade >= 1e-6 {
            alpha /= 4.0;
            beta /= 4.0;
            decade /= 10.0;
        }
    }
    let mut delta = alpha * (secs(qdelay) - secs(p.target)) + beta * (secs(qdelay) - secs(qdelay_old));
    // Above 10%, at most 2% up per update, so one burst cannot saturate it.
    if delta > 0.02 && prob >= 0.1 {
        delta = 0.02;
    }
    if qdelay > HIGH_DELAY {
        delta += 0.02;
    }
    let mut next = prob + delta;
    let saturated = next > 1.0;
    next = next.clamp(0.0, 1.0);
    // No delay for two updates in a row, and nothing queued: decay fast (by 1/64 each).
    // (A zero delay with packets queued only means the queue is tiny.)
    if qdelay.nanos() == 0 && qdelay_old.nanos() == 0 && !queued && !saturated {
        next -= next / 64.0;
    }
    next
}

/// ns-3 PIE's burst allowance: armed by an arrival with none armed, spent by the updates, and
/// re-armed only after this many quiet updates in a row once spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BurstState {
    NoBurst,
    Protecting,
    /// Quiet updates in a row since the allowance ran out.
    InBurst(u64),
}
const NS3_QUIET_FOR: Duration = Duration(1_500_000_000);

/// One ns-3 update (PieQueueDisc::CalculateP): the probability is 0 while a burst allowance is
/// left; otherwise the same steps as Linux's without the high-delay term, and a 2% decay
/// whenever the delay was zero twice.
pub fn update_probability_ns3(p: &PieParams, prob: f64, qdelay: Duration, qdelay_old: Duration, burst_left: Duration) -> f64 {
    if burst_left.nanos() > 0 {
        return 0.0;
    }
    let secs = |d: Duration| d.nanos() as f64 * 1e-9;
    let divisor = [(1e-6, 2048.0), (1e-5, 512.0), (1e-4, 128.0), (1e-3, 32.0), (1e-2, 8.0), (0.1, 2.0)]
        .iter()
        .find(|(below, _)| prob < *below)
        .map_or(1.0, |(_, d)| *d);
    let mut delta = (p.alpha * (secs(qdelay) - secs(p.target)) + p.beta * (secs(qdelay) - secs(qdelay_old))) / divisor;
    if delta > 0.02 && prob >= 0.1 {
        delta = 0.02;
    }
    let mut next = prob + delta;
    if qdelay.nanos() == 0 && qdelay_old.nanos() == 0 {
        next *= 0.98;
    }
    next.clamp(0.0, 1.0)
}

/// The controller's state (Linux's pie_vars).
#[derive(Clone, Debug, PartialEq)]
pub struct PieVars {
    pub prob: f64,
    /// Probability accumulated since the last drop, for derandomisation.
    pub accu_prob: f64,
    /// Burst allowance left.
    pub burst_left: Duration,
    pub qdelay: Duration,
    pub qdelay_old: Duration,
    /// Timestamp mode: the last dequeue; rate mode: the start of the measurement.
    dq_tstamp: Option<Instant>,
    /// Rate mode: bytes dequeued in the current measurement, if one is running.
    dq_count: Option<u64>,
    /// Rate mode: bytes per ns, 0 before the first measurement.
    pub avg_dq_rate: f64,
    /// ns-3 only.
    pub burst_state: BurstState,
}

impl PieVars {
    fn new(max_burst: Duration) -> Self {
        PieVars {
            prob: 0.0,
            accu_prob: 0.0,
            burst_left: max_burst,
            qdelay: Duration::ZERO,
            qdelay_old: Duration::ZERO,
            dq_tstamp: None,
            dq_count: None,
            avg_dq_rate: 0.0,
            burst_state: BurstState::NoBurst,
        }
    }
    /// A new measurement cycle (Linux's pie_vars_init): the probability stays as it is.
    fn restart(&mut self, max_burst: Duration) {
        self.burst_left = max_burst;
        self.dq_tstamp = None;
        self.accu_prob = 0.0;
        self.dq_count = None;
        self.avg_dq_rate = 0.0;
    }
}

pub struct Pie {
    p: PieParams,
    v: PieVars,
    next_update: Option<Instant>,
    fifo: Fifo,
}

impl Pie {
    pub fn new(limit: Limit, p: PieParams) -> Self {
        // ns-3 starts with no allowance: the first arrival arms it.
        let burst = if p.ns3 { Duration::ZERO } else { p.max_burst };
        Pie { v: PieVars::new(burst), p, next_update: None, fifo: Fifo::new(limit, Overflow::Tail) }
    }
    pub fn vars(&self) -> &PieVars {
        &self.v
    }

    /// Runs every controller update due by `now` (the first one tupdate after the first packet;
    /// with ns3, at the queue's creation, t = 0, then every tupdate), each reporting its
    /// probability at its own time to `out` (which keeps those that change it), as does the
    /// controller's start.
    fn catch_up(&mut self, now: Instant, out: &mut Verdicts) {
        if self.next_update.is_none() {
            let (start, first) = if self.p.ns3 { (Instant::ZERO, Instant::ZERO) } else { (now, now + self.p.tupdate) };
            out.probability(start, self.v.prob);
            self.next_update = Some(first);
        }
        let mut t = self.next_update.unwrap();
        let tupdate = self.p.tupdate.nanos();
        while t <= now {
            let before = self.v.clone();
            self.tick();
            out.probability(t, self.v.prob);
            t += self.p.tupdate;
            // A tick reads only the state and the backlog, which holds still between events:
            // once one changes nothing, neither does any later one, so the rest are skipped.
            // Run, they cost a tick per tupdate of the wait: 3.6 * 10^9 for an hour at 1 us.
            if self.v == before && t <= now {
                t += Duration(((now.nanos() - t.nanos()) / tupdate + 1) * tupdate);
            } else if let (BurstState::InBurst(was), BurstState::InBurst(n)) = (before.burst_state, self.v.burst_state) {
                // ns-3's count of quiet updates, the only thing that moved: each update adds one
                // until the count ends the burst state, so those are skipped too.
                if n == was + 1 && t <= now && (PieVars { burst_state: before.burst_state, ..self.v.clone() }) == before {
                    let quiet_for = NS3_QUIET_FOR.nanos() / tupdate;
                    let k = ((now.nanos() - t.nanos()) / tupdate + 1).min(quiet_for.saturating_sub(n));
                    self.v.burst_state = BurstState::InBurst(n + k);
                    t += Duration(k * tupdate);
                }
            }
        }
        self.next_update = Some(t);
    }

    fn tick(&mut self) {
        if self.p.ns3 {
            return self.tick_ns3();
        }
        let (p, v, backlog) = (&self.p, &mut self.v, self.fifo.bytes());
        let (qdelay, qdelay_old) = if p.dq_rate_estimator {
            v.qdelay_old = v.qdelay;
            let q = if v.avg_dq_rate > 0.0 { Duration((backlog as f64 / v.avg_dq_rate) as u64) } else { Duration::ZERO };
            (q, v.qdelay_old)
        } else {
            (v.qdelay, v.qdelay_old)
        };
        v.prob = update_probability(p, v.prob, qdelay, qdelay_old, backlog != 0);
        v.qdelay = qdelay;
        if v.qdelay < p.target / 2 && v.qdelay_old < p.target / 2 && v.prob == 0.0 && (!p.dq_rate_estimator || v.avg_dq_rate > 0.0) {
            v.restart(p.max_burst);
        }
        if !p.dq_rate_estimator {
            v.qdelay_old = qdelay;
        }
    }

    fn tick_ns3(&mut self) {
        let (p, v) = (&self.p, &mut self.v);
        let qdelay = if p.dq_rate_estimator {
            if v.avg_dq_rate > 0.0 { Duration((self.fifo.bytes() as f64 / v.avg_dq_rate) as u64) } else { Duration::ZERO }
        } else {
            v.qdelay
        };
        v.prob = update_probability_ns3(p, v.prob, qdelay, v.qdelay_old, v.burst_left);
        v.burst_left = Duration(v.burst_left.nanos().saturating_sub(p.tupdate.nanos()));
        let quiet = qdelay < p.target / 2 && v.qdelay_old < p.target / 2 && v.prob == 0.0 && v.burst_left.nanos() == 0;
        if p.dq_rate_estimator && quiet {
            v.dq_count = None;
            v.avg_dq_rate = 0.0;
        }
        let quiet_for = NS3_QUIET_FOR.nanos() / p.tupdate.nanos();
        v.burst_state = match v.burst_state {
            BurstState::Protecting if quiet => BurstState::InBurst(0),
            BurstState::InBurst(n) if quiet && n + 1 > quiet_for => BurstState::NoBurst,
            BurstState::InBurst(n) if quiet => BurstState::InBurst(n + 1),
            BurstState::InBurst(_) => BurstState::InBurst(0),
            other => other,
        };
        v.qdelay = qdelay;
        v.qdelay_old = qdelay;
    }

    /// ns-3's early drop (PieQueueDisc::DropEarly): `queued` packets, `backlog` bytes.
    fn drop_early_ns3(&mut self, queued: usize, backlog: usize, len: usize, rng: &mut Rng) -> bool {
        let (p, v) = (&self.p, &mut self.v);
        if v.burst_left.nanos() > 0 {
            return false;
        }
        if v.burst_state == BurstState::NoBurst {
            v.burst_state = BurstState::Protecting;
            v.burst_left = p.max_burst;
        }
        // Byte mode (ns-3's: a byte limit) scales by size over its mean packet, as avpkt.
        let local = if p.bytemode { v.prob * len as f64 / p.mtu_bytes as f64 } else { v.prob };
        if v.qdelay_old < p.target / 2 && v.prob < 0.2 {
            return false;
        }
        let few = if p.bytemode { backlog <= 2 * p.mtu_bytes as usize } else { queued <= 2 };
        if few {
            return false;
        }
        rng.next_f64() <= local
    }

    /// Random early drop (RFC 8033 4.1 and 5.4) of a packet of `len` bytes arriving to
    /// `backlog` bytes queued.
    fn drop_early(&mut self, backlog: usize, len: usize, rng: &mut Rng) -> bool {
        if self.p.ns3 {
            return self.drop_early_ns3(self.fifo.len(), backlog, len, rng);
        }
        let (p, v) = (&self.p, &mut self.v);
        if v.burst_left.nanos() > 0 {
            return false;
        }
        if v.qdelay < p.target / 2 && v.prob < 0.2 {
            return false;
        }
        if backlog < 2 * p.mtu_bytes as usize {
            return false;
        }
        let local = if p.bytemode && len <= p.mtu_bytes as usize { v.prob * len as f64 / p.mtu_bytes as f64 } else { v.prob };
        // Derandomisation: no drop until 0.85 of probability has accumulated, surely one by 8.5.
        v.accu_prob = if local == 0.0 { 0.0 } else { v.accu_prob + local };
        if v.accu_prob < 0.85 {
            return false;
        }
        if v.accu_prob >= 8.5 {
            return true;
        }
        if rng.next_f64() < local {
            v.accu_prob = 0.0;
            return true;
        }
        false
    }

    /// Whether the probability is low enough to mark rather than drop (ns-3: strictly below).
    fn mark_below(&self, prob: f64) -> bool {
        if self.p.ns3 { prob < self.p.ecn_prob } else { prob <= self.p.ecn_prob }
    }

    fn on_dequeue(&mut self, now: Instant, pkt: &Packet) {
        let (p, v, backlog) = (&self.p, &mut self.v, self.fifo.bytes());
        let elapsed;
        if p.ns3 && !p.dq_rate_estimator {
            // ns-3 records the delay only; the allowance is spent by the updates.
            v.qdelay = if backlog == 0 { Duration::ZERO } else { now.saturating_since(pkt.enqueued_at) };
            return;
        }
        if !p.dq_rate_estimator {
            v.qdelay = if backlog == 0 { Duration::ZERO } else { now.saturating_since(pkt.enqueued_at) };
            elapsed = v.dq_tstamp.map_or(Duration::ZERO, |t| now.saturating_since(t));
            v.dq_tstamp = Some(now);
            if elapsed.nanos() == 0 {
                return;
            }
        } else {
            // Measure the departure rate over DQ_THRESHOLD bytes while at least that much is queued.
            if backlog as u64 >= DQ_THRESHOLD_BYTES && v.dq_count.is_none() {
                v.dq_tstamp = Some(now);
                v.dq_count = Some(0);
            }
            let Some(count) = v.dq_count.as_mut() else { return };
            *count += pkt.len() as u64;
            if *count < DQ_THRESHOLD_BYTES {
                return;
            }
            let start = v.dq_tstamp.expect("a measurement has a start");
            elapsed = now.saturating_since(start);
            if elapsed.nanos() == 0 {
                return;
            }
            let rate = *count as f64 / elapsed.nanos() as f64;
            let keep = if p.ns3 { 0.5 } else { 7.0 / 8.0 }; // ns-3 averages half and half
            v.avg_dq_rate = if v.avg_dq_rate == 0.0 { rate } else { v.avg_dq_rate * keep + rate * (1.0 - keep) };
            if (backlog as u64) < DQ_THRESHOLD_BYTES {
                v.dq_count = None; // too little queued to measure again; keep the last rate
            } else {
                v.dq_count = Some(0);
                v.dq_tstamp = Some(now);
            }
        }
        v.burst_left = Duration(v.burst_left.nanos().saturating_sub(elapsed.nanos()));
    }
}

impl QueueDisc for Pie {
    fn enqueue(&mut self, now: Instant, mut pkt: Packet, rng: &mut Rng, out: &mut Verdicts) {
        self.catch_up(now, out);
        let reason = if !self.fifo.fits(pkt.len()) {
            Some(DropReason::QueueFull)
        } else if !self.drop_early(self.fifo.bytes(), pkt.len(), rng) {
            None
        } else if self.p.ecn && self.mark_below(self.v.prob) && out.try_mark(&mut pkt, MarkReason::Pie) {
            None
        } else {
            Some(DropReason::PieEarly)
        };
        match reason {
            Some(r) => {
                self.v.accu_prob = 0.0;
                out.drop(pkt, r);
            }
            None => self.fifo.push_or_drop(pkt, out),
        }
    }

    fn dequeue(&mut self, now: Instant, _rng: &mut Rng, out: &mut Verdicts) -> Option<Packet> {
        self.catch_up(now, out);
        let pkt = self.fifo.pop()?;
        self.on_dequeue(now, &pkt);
        Some(pkt)
    }
    fn backlog_pkts(&self) -> usize {
        self.fifo.len()
    }
    fn backlog_bytes(&self) -> usize {
        self.fifo.bytes()
    }
    fn name(&self) -> &'static str {
        "pie"
    }
}

#[cfg(test)]
mod tests;
