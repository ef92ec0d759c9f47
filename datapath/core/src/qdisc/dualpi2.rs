//! DualPI2 (RFC 9332, the DualQ Coupled AQM) as Linux's sch_dualpi2 runs it: two FIFOs behind
//! one limit, the L queue for L4S traffic (ECT(1) and CE; with `any_ect`, ECT(0) too) and the
//! C queue for the rest.
//!
//! One PI controller (PI2) runs every `tupdate` on the larger of the two queues' head sojourn
//! times and yields a base probability p'. The C queue drops (or marks, if ECN-capable) with
//! p'^2, the square that suits Reno-like flows; the L queue marks with k * p', the coupled
//! probability that gives a scalable flow the same window as a classic one on the same RTT,
//! or natively when its head packet waited longer than the step threshold. Decisions are made
//! at dequeue (or, with drop_early, at enqueue), never while less than two MTUs are queued.
//! A weighted round robin of bytes (`classic_protection`) lets the L queue go first without
//! starving the C queue.
//!
//! Overload is k * p' above 1, where the L queue's probability saturates. With
//! drop_on_overload (Linux's default) every packet then meets the classic p'^2 drop, so the
//! queue keeps its latency by dropping; with it off (tc's `overflow`), p' is held to 1/k, L
//! packets are all marked and never dropped, and the queue grows to its limit.
//!
//! Like PIE's, the controller runs on a timer: the ticks due since the last event are run, in
//! order and each at its own time, when the next event comes. Linux's timer starts at the
//! qdisc's creation, this one at the first packet; only the phase of the ticks differs.
//!
//! Departures from Linux: memory counts frame bytes where Linux counts socket buffers (its
//! default memory limit, limit x 2 x MTU, doubles the frame for that); frames arrive whole, so
//! there is no GSO splitting; no tc filters classify (ECN alone does).

use std::collections::VecDeque;

use super::{DropReason, Limit, MarkReason, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use crate::wire::{self, Ecn};

/// Which ECN codepoints go to the L queue (Linux's ecn_mask over the two ECN bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EcnMask {
    /// ECT(1) and CE: the L4S identifier (RFC 9331). Linux's default.
    L4sEct,
    /// ECT(0) too: every ECN-capable packet.
    AnyEct,
}

impl EcnMask {
    pub const ALL: [EcnMask; 2] = [EcnMask::L4sEct, EcnMask::AnyEct];
    pub fn name(self) -> &'static str {
        match self {
            EcnMask::L4sEct => "l4s_ect",
            EcnMask::AnyEct => "any_ect",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
    /// Whether a packet with this codepoint goes to the L queue: Linux ANDs the two ECN bits
    /// with 0b01 (l4s_ect) or 0b11 (any_ect). Not-ECT (0b00) never does.
    pub fn to_l(self, ecn: Ecn) -> bool {
        let mask = match self {
            EcnMask::L4sEct => 0b01,
            EcnMask::AnyEct => 0b11,
        };
        ecn as u8 & mask != 0
    }
}

/// DualPI2's parameters. Defaults are Linux's sch_dualpi2 (`tc qdisc add ... dualpi2`); the
/// packet limit (10000 by default) is the queue's `Limit`, counting both queues.
#[derive(Clone, Debug, PartialEq)]
pub struct DualPi2Params {
    /// The queueing delay PI2 steers to. Default 15 ms.
    pub target: Duration,
    /// How often PI2 updates p'. Default 16 ms.
    pub tupdate: Duration,
    /// Integral gain, in Hz: p' moves by alpha times the delay's distance from target (in s)
    /// per update. Default 41/256 (RFC 9332's 0.16, in Linux's 1/256 steps).
    pub alpha: f64,
    /// Proportional gain, in Hz: p' moves by beta times the delay's change since the last
    /// update (in s). Default 819/256 (RFC 9332's 3.2).
    pub beta: f64,
    /// The L queue's native AQM: mark an L packet that waited longer than this. Default 1 ms.
    pub step_thresh: Duration,
    /// The step threshold as a queue length instead: mark an L packet that leaves more than
    /// this many packets behind it in the L queue. Default None (the threshold is a time).
    pub step_packets: Option<u32>,
    /// Step-mark an L packet only if at least this many packets were in the L queue when it
    /// arrived. Default 0 (always).
    pub min_qlen_step: u32,
    /// k: the L queue's probability is k * p', the C queue's p'^2. Default 2 (window fairness
    /// between scalable and classic flows of equal RTT).
    pub coupling_factor: u32,
    /// The C queue's weight in the scheduler, in percent (the L queue's is 100 minus it).
    /// Default 10.
    pub classic_protection_percent: u32,
    /// Which ECN codepoints go to the L queue. Default ECT(1) and CE.
    pub ecn_mask: EcnMask,
    /// On overload drop with p'^2 in both queues (true), or hold p' to 1/k, mark every L
    /// packet and let the queue grow (false, tc's `overflow`). Default true.
    pub drop_on_overload: bool,
    /// Decide drops and coupled marks at enqueue rather than dequeue. Default false.
    pub drop_early: bool,
    /// Bytes both queues may hold; None: with a packet limit, limit x 2 x mtu_bytes (Linux),
    /// with a byte limit, that limit. Default None.
    pub memory_limit_bytes: Option<u64>,
    /// One full frame: below two of these queued nothing is dropped or marked, and the unit of
    /// the scheduler's initial credit. Default 1514.
    pub mtu_bytes: u32,
}

impl Default for DualPi2Params {
    fn default() -> Self {
        DualPi2Params {
            target: Duration::from_millis(15),
            tupdate: Duration::from_millis(16),
            alpha: 41.0 / 256.0,
            beta: 819.0 / 256.0,
            step_thresh: Duration::from_millis(1),
            step_packets: None,
            min_qlen_step: 0,
            coupling_factor: 2,
            classic_protection_percent: 10,
            ecn_mask: EcnMask::L4sEct,
            drop_on_overload: true,
            drop_early: false,
            memory_limit_bytes: None,
            mtu_bytes: 1514,
        }
    }
}

impl DualPi2Params {
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
        if !(1..=255).contains(&self.coupling_factor) {
            return Err(format!("coupling_factor: {} is not from 1 to 255", self.coupling_factor));
        }
        if self.classic_protection_percent > 100 {
            return Err(format!("classic_protection: {}% is above 100%", self.classic_protection_percent));
        }
        if self.memory_limit_bytes == Some(0) {
            return Err("memory_limit: a limit of 0 holds nothing".into());
        }
        Ok(())
    }
}

/// One PI2 update (RFC 9332 A.1): p' moves by alpha times the delay's distance from target
/// plus beta times its change since the last update, delays in seconds, and stays in [0, 1].
/// Without drop_on_overload it is held to 1/k, where the L queue's k * p' reaches 1.
pub fn update_probability(p: &DualPi2Params, prob: f64, qdelay: Duration, last_qdelay: Duration) -> f64 {
    let secs = |d: Duration| d.nanos() as f64 * 1e-9;
    let delta = p.alpha * (secs(qdelay) - secs(p.target)) + p.beta * (secs(qdelay) - secs(last_qdelay));
    let next = (prob + delta).clamp(0.0, 1.0);
    if p.drop_on_overload {
        next
    } else {
        next.min(1.0 / p.coupling_factor as f64)
    }
}

/// What `tc -s qdisc show` prints for dualpi2.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DualPi2Stats {
    /// p', the base probability (the C queue's is its square, the L queue's k times it).
    pub prob: f64,
    /// How long the head packet of each queue has waited (0: empty).
    pub delay_c: Duration,
    pub delay_l: Duration,
    /// Packets let into each queue.
    pub pkts_in_c: u64,
    pub pkts_in_l: u64,
    /// The most packets (both queues) an arrival found queued.
    pub maxq: u64,
    /// Every CE mark (classic, coupled and step), and the step marks among them.
    pub ecn_mark: u64,
    pub step_mark: u64,
    /// The scheduler's credit in bytes: at or below 0 the L queue goes next, above it the C queue.
    pub credit: i64,
    pub memory_used_bytes: u64,
    pub max_memory_used_bytes: u64,
    pub memory_limit_bytes: u64,
}

/// Which queue a packet is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Classic,
    L4s,
}

pub struct DualPi2 {
    p: DualPi2Params,
    limit: Limit,
    memory_limit: u64,
    c: VecDeque<Packet>,
    /// Each L packet with whether the step may mark it (min_qlen_step met when it arrived).
    l: VecDeque<(Packet, bool)>,
    bytes: usize,
    /// p', and the delay PI2 saw at its last update.
    prob: f64,
    last_qdelay: Duration,
    next_update: Option<Instant>,
    /// Weighted round robin of bytes: each L departure adds wc * len, each C departure
    /// subtracts wl * len (only while the other queue waits); the sign picks the next queue.
    credit: i64,
    credit_init: i64,
    wc: i64,
    wl: i64,
    stats: DualPi2Stats,
}

impl DualPi2 {
    pub fn new(limit: Limit, p: DualPi2Params) -> Self {
        let memory_limit = p.memory_limit_bytes.unwrap_or(match limit {
            Limit::Packets(n) => n as u64 * 2 * p.mtu_bytes as u64,
            Limit::Bytes(b) => b as u64,
        });
        let wc = p.classic_protection_percent as i64;
        let wl = 100 - wc;
        // Starts with the queue of the larger weight: the L queue by default.
        let credit_init = p.mtu_bytes as i64 * (wc - wl);
        DualPi2 {
            p,
            limit,
            memory_limit,
            c: VecDeque::new(),
            l: VecDeque::new(),
            bytes: 0,
            prob: 0.0,
            last_qdelay: Duration::ZERO,
            next_update: None,
            credit: credit_init,
            credit_init,
            wc,
            wl,
            stats: DualPi2Stats { memory_limit_bytes: memory_limit, ..Default::default() },
        }
    }

    /// p', the base probability.
    pub fn prob(&self) -> f64 {
        self.prob
    }

    /// The memory limit in bytes, given or derived.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    fn qlen(&self) -> usize {
        self.c.len() + self.l.len()
    }

    /// How long each queue's head has waited at `now`: (C, L).
    fn head_delays(&self, now: Instant) -> (Duration, Duration) {
        let c = self.c.front().map_or(Duration::ZERO, |p| now.saturating_since(p.enqueued_at));
        let l = self.l.front().map_or(Duration::ZERO, |(p, _)| now.saturating_since(p.enqueued_at));
        (c, l)
    }

    /// Runs every PI2 update due by `now`, each on the head delays at its own time (the
    /// queues do not change between events), and reports p' at that time to `out` (which keeps
    /// the values that change it), as it does p's start, 0, at the first packet. The first
    /// update is tupdate after the first packet.
    fn catch_up(&mut self, now: Instant, out: &mut Verdicts) {
        let tupdate = self.p.tupdate;
        if self.next_update.is_none() {
            out.probability(now, self.prob);
            self.next_update = Some(now + tupdate);
        }
        let mut t = self.next_update.unwrap();
        while t <= now {
            if self.qlen() == 0 && self.prob == 0.0 && self.last_qdelay == Duration::ZERO {
                // Idle with nothing to forget: every update until now leaves p' at 0.
                let missed = (now.nanos() - t.nanos()) / tupdate.nanos();
                t += Duration(missed * tupdate.nanos() + tupdate.nanos());
                break;
            }
            let (c, l) = self.head_delays(t);
            let qdelay = c.max(l);
            let before = (self.prob, self.last_qdelay);
            self.prob = update_probability(&self.p, self.prob, qdelay, self.last_qdelay);
            self.last_qdelay = qdelay;
            out.probability(t, self.prob);
            t += tupdate;
            // The rest of the updates would change only the delay they saw, and only the last
            // one's is kept: empty, once an update changed nothing (the delay stays 0); queued,
            // once p' is at its ceiling with the delay at or above target (the delay then grows
            // by tupdate per update, so neither term of an update is negative). They are
            // skipped; run, they cost an update per tupdate of the wait (a slow serialiser's).
            let ceiling = if self.p.drop_on_overload { 1.0 } else { 1.0f64.min(1.0 / self.p.coupling_factor as f64) };
            let settled = if self.qlen() == 0 { before == (self.prob, self.last_qdelay) } else { self.prob == ceiling && qdelay >= self.p.target };
            if t <= now && settled {
                let last = t + Duration((now.nanos() - t.nanos()) / tupdate.nanos() * tupdate.nanos());
                let (c, l) = self.head_delays(last);
                self.last_qdelay = c.max(l);
                t = last + tupdate;
            }
        }
        self.next_update = Some(t);
    }

    fn class_of(&self, frame: &[u8]) -> Class {
        match wire::ecn(frame) {
            Some(ecn) if self.p.ecn_mask.to_l(ecn) => Class::L4s,
            _ => Class::Classic,
        }
    }

    fn mark(&mut self, pkt: &mut Packet, reason: MarkReason, out: &mut Verdicts) -> bool {
        let marked = out.try_mark(pkt, reason);
        self.stats.ecn_mark += marked as u64;
        marked
    }

    /// Linux's must_drop: the coupled AQM's verdict on a packet of `class`, with `backlog`
    /// bytes queued besides it. Marks ECN-capable packets it spares; None lets it through.
    fn must_drop(&mut self, pkt: &mut Packet, class: Class, backlog: usize, rng: &mut Rng, out: &mut Verdicts) -> Option<DropReason> {
        if backlog < 2 * self.p.mtu_bytes as usize {
            return None;
        }
        let prob = self.prob;
        let l_prob = prob * self.p.coupling_factor as f64;
        let overload = l_prob > 1.0;
        // p'^2 as two draws against p', as Linux rolls it.
        let squared = |rng: &mut Rng| rng.chance(prob) && rng.chance(prob);
        match class {
            // Hit by both draws: dropped, or marked if ECN-capable and not overloaded.
            Class::Classic => (squared(rng) && (overload || !self.mark(pkt, MarkReason::DualPi2Classic, out))).then_some(DropReason::DualPi2Classic),
            Class::L4s if overload => {
                if self.p.drop_on_overload && squared(rng) {
                    Some(DropReason::DualPi2Overload)
                } else {
                    // The coupled probability is saturated at 1: every survivor is marked.
                    self.mark(pkt, MarkReason::DualPi2Coupled, out);
                    None
                }
            }
            Class::L4s => {
                if !rng.chance(l_prob) || self.mark(pkt, MarkReason::DualPi2Coupled, out) {
                    None
                } else {
                    // Not reached: an L packet is ECN-capable by its classification. Linux
                    // drops one that is not (a tc filter's) as it drops a classic packet.
                    Some(DropReason::DualPi2Classic)
                }
            }
        }
    }

    /// Whether another `len` bytes fit: the queue's limit (packets of both queues, or bytes)
    /// and the memory limit.
    fn fits(&self, len: usize) -> bool {
        let within = match self.limit {
            Limit::Packets(n) => self.qlen() < n,
            Limit::Bytes(b) => self.bytes + len <= b,
        };
        within && self.bytes as u64 + len as u64 <= self.memory_limit
    }

    /// The scheduler: the L queue while its credit is at most 0 or the C queue is empty, else
    /// the C queue. Returns the packet, its queue and step flag, and the credit it would earn.
    fn pick(&mut self) -> Option<(Packet, Class, bool, i64)> {
        let (c_len, l_len) = (self.c.len(), self.l.len());
        let (pkt, class, step, weight) = if l_len > 0 && (c_len == 0 || self.credit <= 0) {
            let (pkt, step) = self.l.pop_front()?;
            (pkt, Class::L4s, step, if c_len > 0 { self.wc } else { 0 })
        } else if c_len > 0 {
            (self.c.pop_front()?, Class::Classic, false, if l_len > 0 { -self.wl } else { 0 })
        } else {
            self.credit = self.credit_init;
            return None;
        };
        self.bytes -= pkt.len();
        let credit_change = weight * pkt.len() as i64;
        Some((pkt, class, step, credit_change))
    }

    /// The L queue's native step AQM on a packet leaving it at `now`.
    fn step(&mut self, pkt: &mut Packet, now: Instant, out: &mut Verdicts) {
        let over = match self.p.step_packets {
            Some(n) => self.l.len() as u64 > n as u64,
            None => now.saturating_since(pkt.enqueued_at) > self.p.step_thresh,
        };
        if over && self.mark(pkt, MarkReason::DualPi2Step, out) {
            self.stats.step_mark += 1;
        }
    }
}

impl QueueDisc for DualPi2 {
    fn enqueue(&mut self, now: Instant, mut pkt: Packet, rng: &mut Rng, out: &mut Verdicts) {
        self.catch_up(now, out);
        if !self.fits(pkt.len()) {
            return out.drop(pkt, DropReason::QueueFull);
        }
        let class = self.class_of(&pkt.data);
        if self.p.drop_early {
            if let Some(reason) = self.must_drop(&mut pkt, class, self.bytes, rng, out) {
                return out.drop(pkt, reason);
            }
        }
        self.stats.maxq = self.stats.maxq.max(self.qlen() as u64);
        self.bytes += pkt.len();
        self.stats.max_memory_used_bytes = self.stats.max_memory_used_bytes.max(self.bytes as u64);
        match class {
            Class::L4s => {
                let step = self.l.len() as u64 >= self.p.min_qlen_step as u64;
                self.stats.pkts_in_l += 1;
                self.l.push_back((pkt, step));
            }
            Class::Classic => {
                self.stats.pkts_in_c += 1;
                self.c.push_back(pkt);
            }
        }
    }

    fn dequeue(&mut self, now: Instant, rng: &mut Rng, out: &mut Verdicts) -> Option<Packet> {
        self.catch_up(now, out);
        while let Some((mut pkt, class, step, credit_change)) = self.pick() {
            if !self.p.drop_early {
                if let Some(reason) = self.must_drop(&mut pkt, class, self.bytes, rng, out) {
                    out.drop(pkt, reason);
                    continue;
                }
            }
            if class == Class::L4s && step {
                self.step(&mut pkt, now, out);
            }
            self.credit += credit_change;
            return Some(pkt);
        }
        None
    }

    fn dualpi2(&self, now: Instant) -> Option<DualPi2Stats> {
        let (delay_c, delay_l) = self.head_delays(now);
        Some(DualPi2Stats {
            prob: self.prob,
            delay_c,
            delay_l,
            credit: self.credit,
            memory_used_bytes: self.bytes as u64,
            ..self.stats.clone()
        })
    }
    fn backlog_pkts(&self) -> usize {
        self.qlen()
    }
    fn backlog_bytes(&self) -> usize {
        self.bytes
    }
    fn name(&self) -> &'static str {
        "dualpi2"
    }
}

#[cfg(test)]
mod tests;
