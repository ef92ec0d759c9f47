//! CoDel (RFC 8289) as Linux runs it (sch_codel, include/net/codel_impl.h): the sojourn-time
//! test, the dropping state machine with Linux's re-entry rule, and the control law with
//! Linux's fixed-point inverse square root. The per-queue machinery (`CodelVars`,
//! `codel_dequeue`) is shared with FQ-CoDel, which runs one instance per flow.

use super::{DropReason, Fifo, Limit, MarkReason, Overflow, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::{Duration, Instant};

/// CoDel's parameters. Defaults are Linux's sch_codel (and RFC 8289's).
#[derive(Clone, Debug, PartialEq)]
pub struct CodelParams {
    /// Acceptable standing queue delay (sojourn time). Default 5 ms.
    pub target: Duration,
    /// How long the sojourn must stay above target before dropping starts; also the base of
    /// the control law's drop spacing. About a worst-case RTT. Default 100 ms.
    pub interval: Duration,
    /// Mark ECN-capable packets CE instead of dropping them. Default off (sch_codel).
    pub ecn: bool,
    /// Bytes: with at most this much left queued, never drop (Linux: the device MTU plus the
    /// link-layer header, 1514 on Ethernet).
    pub mtu_bytes: u32,
    /// Count time in units of 1024 ns, as Linux's codel_time_t and ns-3's CoDelQueueDisc do
    /// (now, sojourn, target, interval and drop times all truncated to it). Default off: exact ns.
    pub coarse_time: bool,
}

impl Default for CodelParams {
    fn default() -> Self {
        CodelParams {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            ecn: false,
            mtu_bytes: 1514,
            coarse_time: false,
        }
    }
}

/// The 1024-ns unit's shift (Linux's CODEL_SHIFT).
const COARSE_SHIFT: u32 = 10;

impl CodelParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.nanos() == 0 {
            return Err("interval: must be positive".into());
        }
        if self.target.nanos() == 0 {
            return Err("target: must be positive".into());
        }
        if self.target >= self.interval {
            return Err(format!(
                "target: {} us must be below interval ({} us)",
                self.target.nanos() / 1000,
                self.interval.nanos() / 1000
            ));
        }
        Ok(())
    }
}

/// The state of one CoDel instance.
#[derive(Clone, Debug)]
pub struct CodelVars {
    /// Drops (or marks) since entering the dropping state.
    pub count: u32,
    /// `count` when the dropping state was last entered.
    pub lastcount: u32,
    pub dropping: bool,
    /// 1/sqrt(count) in Q0.16, refined by one Newton step per change of count.
    pub rec_inv_sqrt: u16,
    /// When the sojourn time, above target since, will have been so for an interval.
    pub first_above_time: Option<Instant>,
    /// When the next drop is due in the dropping state.
    pub drop_next: Instant,
    /// Sojourn time of the last packet looked at.
    pub ldelay: Duration,
}

impl Default for CodelVars {
    fn default() -> Self {
        CodelVars {
            count: 0,
            lastcount: 0,
            dropping: false,
            rec_inv_sqrt: 0,
            first_above_time: None,
            drop_next: Instant::ZERO,
            ldelay: Duration::ZERO,
        }
    }
}

/// 1.0 in Q0.16, as near as 16 bits get: the inverse square root of count 1.
const REC_INV_SQRT_ONE: u16 = 0xFFFF;

/// One Newton-Raphson step towards 1/sqrt(count): x' = x * (3 - count * x^2) / 2, computed in
/// Q0.32 as Linux does. Cheap enough to run at every drop, and it converges quadratically as
/// count grows by one at a time.
pub fn newton_step(count: u32, rec_inv_sqrt: u16) -> u16 {
    let x = (rec_inv_sqrt as u64) << 16; // Q0.32
    let x2 = (x * x) >> 32;
    // 3 - count * x^2 in Q2.32; never negative while x stays at or below 1/sqrt(count - k).
    let three_minus = (3u64 << 32).saturating_sub(count as u64 * x2);
    // Halve via the shift: (three_minus / 4) * x >> 31 = three_minus * x / 2 >> 32.
    let next = ((three_minus >> 2) * x) >> 31;
    (next >> 16).min(REC_INV_SQRT_ONE as u64) as u16
}

/// The control law: the next drop is due interval / sqrt(count) after `t`.
pub fn control_law(t: Instant, interval: Duration, rec_inv_sqrt: u16) -> Instant {
    Instant(t.nanos() + ((interval.nanos() as u128 * ((rec_inv_sqrt as u128) << 16)) >> 32) as u64)
}

/// Has the sojourn time been at or above target for a whole interval? Sets `ldelay` and
/// starts or stops the interval timer. `backlog_after` is the queue's bytes once `pkt` is out.
fn should_drop(v: &mut CodelVars, p: &CodelParams, now: Instant, pkt: &Packet, backlog_after: usize) -> bool {
    let enqueued = if p.coarse_time { Instant(pkt.enqueued_at.nanos() >> COARSE_SHIFT) } else { pkt.enqueued_at };
    v.ldelay = now.saturating_since(enqueued);
    if v.ldelay < p.target || backlog_after <= p.mtu_bytes as usize {
        // Below target (or too little queued to matter): stay below for an interval before acting.
        v.first_above_time = None;
        return false;
    }
    match v.first_above_time {
        None => {
            v.first_above_time = Some(now + p.interval);
            false
        }
        // Strictly after, as Linux's codel_time_after.
        Some(t) => now > t,
    }
}

/// CoDel's dequeue over a queue that `pop` takes from (it returns the head and the bytes
/// left behind). Drops go to `out`; the packet to send comes back.
pub fn codel_dequeue(
    v: &mut CodelVars,
    p: &CodelParams,
    now: Instant,
    pop: &mut impl FnMut() -> Option<(Packet, usize)>,
    out: &mut Verdicts,
) -> Option<Packet> {
    if p.coarse_time {
        // Every time the state holds is then in 1024-ns units, as the parameters here.
        let units = CodelParams {
            target: Duration(p.target.nanos() >> COARSE_SHIFT),
            interval: Duration(p.interval.nanos() >> COARSE_SHIFT),
            ..p.clone()
        };
        return codel_dequeue_in(v, &units, Instant(now.nanos() >> COARSE_SHIFT), pop, out);
    }
    codel_dequeue_in(v, p, now, pop, out)
}

fn codel_dequeue_in(
    v: &mut CodelVars,
    p: &CodelParams,
    now: Instant,
    pop: &mut impl FnMut() -> Option<(Packet, usize)>,
    out: &mut Verdicts,
) -> Option<Packet> {
    let Some((head, backlog)) = pop() else {
        v.dropping = false;
        return None;
    };
    let drop = should_drop(v, p, now, &head, backlog);
    let mut next = Some(head);
    if v.dropping {
        if !drop {
            v.dropping = false; // sojourn went below target: leave the dropping state
        } else {
            // One drop per due time; a queue far above target may owe several at once.
            while v.dropping && now >= v.drop_next {
                let mut pkt = next.take().expect("the dropping state holds a packet");
                v.count = v.count.wrapping_add(1);
                v.rec_inv_sqrt = newton_step(v.count, v.rec_inv_sqrt);
                if p.ecn && out.try_mark(&mut pkt, MarkReason::Codel) {
                    v.drop_next = control_law(v.drop_next, p.interval, v.rec_inv_sqrt);
                    return Some(pkt);
                }
                out.drop(pkt, DropReason::Codel);
                let still_above;
                (next, still_above) = judge_next(v, p, now, pop);
                if still_above {
                    v.drop_next = control_law(v.drop_next, p.interval, v.rec_inv_sqrt);
                } else {
                    v.dropping = false;
                }
            }
        }
    } else if drop {
        // Enter the dropping state with this packet.
        let mut pkt = next.take().expect("judged a packet");
        if p.ecn && out.try_mark(&mut pkt, MarkReason::Codel) {
            next = Some(pkt);
        } else {
            out.drop(pkt, DropReason::Codel);
            (next, _) = judge_next(v, p, now, pop);
        }
        v.dropping = true;
        enter(v, p, now);
    }
    next
}

/// Takes the next head and judges it (an empty queue resets the interval timer).
fn judge_next(
    v: &mut CodelVars,
    p: &CodelParams,
    now: Instant,
    pop: &mut impl FnMut() -> Option<(Packet, usize)>,
) -> (Option<Packet>, bool) {
    match pop() {
        None => {
            v.first_above_time = None;
            (None, false)
        }
        Some((pkt, left)) => {
            let above = should_drop(v, p, now, &pkt, left);
            (Some(pkt), above)
        }
    }
}

/// Entering the dropping state. Linux's re-entry rule: if the last episode ended recently
/// (its next drop was due less than 16 intervals ago), resume near the drop rate that
/// controlled the queue then (count - lastcount) instead of starting over at 1.
fn enter(v: &mut CodelVars, p: &CodelParams, now: Instant) {
    let delta = v.count.wrapping_sub(v.lastcount);
    let since_due = now.nanos() as i128 - v.drop_next.nanos() as i128;
    if delta > 1 && since_due < 16 * p.interval.nanos() as i128 {
        v.count = delta;
        v.rec_inv_sqrt = newton_step(v.count, v.rec_inv_sqrt);
    } else {
        v.count = 1;
        v.rec_inv_sqrt = REC_INV_SQRT_ONE;
    }
    v.lastcount = v.count;
    v.drop_next = control_law(now, p.interval, v.rec_inv_sqrt);
}

/// sch_codel: one FIFO under CoDel, with a hard limit (Linux: 1000 packets).
pub struct Codel {
    params: CodelParams,
    vars: CodelVars,
    fifo: Fifo,
}

impl Codel {
    pub fn new(limit: Limit, params: CodelParams) -> Self {
        Codel { params, vars: CodelVars::default(), fifo: Fifo::new(limit, Overflow::Tail) }
    }
    pub fn vars(&self) -> &CodelVars {
        &self.vars
    }
}

impl QueueDisc for Codel {
    fn enqueue(&mut self, _now: Instant, pkt: Packet, _rng: &mut Rng, out: &mut Verdicts) {
        self.fifo.push_or_drop(pkt, out);
    }
    fn dequeue(&mut self, now: Instant, _rng: &mut Rng, out: &mut Verdicts) -> Option<Packet> {
        let Codel { params, vars, fifo } = self;
        let mut pop = || fifo.pop().map(|p| (p, fifo.bytes()));
        codel_dequeue(vars, params, now, &mut pop, out)
    }
    fn backlog_pkts(&self) -> usize {
        self.fifo.len()
    }
    fn backlog_bytes(&self) -> usize {
        self.fifo.bytes()
    }
    fn name(&self) -> &'static str {
        "codel"
    }
}

#[cfg(test)]
mod tests;
