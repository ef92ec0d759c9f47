//! One link direction: arrival -> random loss -> queue discipline -> serialiser -> delay -> out.
//!
//! Time only moves forward. `arrive` and `poll` first bring the serialiser up to `now`,
//! processing each completion at its exact virtual time, so a late wake-up of the I/O loop
//! delays the physical send but never shifts the emulated schedule.

use std::collections::VecDeque;

use crate::qdisc::{DropReason, Dropped, DualPi2Stats, Packet, PacketInfo, Queue, QueueConfig, QueueEvent, QueueStats, TinReport};
use crate::rate::{Rate, TRACE_OPPORTUNITY_BYTES};
use crate::rng::Rng;
use crate::stats::DirectionStats;
use crate::time::{Duration, Instant};

/// Ethernet header: anything shorter is not a frame.
pub const MIN_FRAME_BYTES: usize = 14;
/// 1500-byte MTU plus the Ethernet header and one VLAN tag.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1518;

#[derive(Clone, Debug)]
pub struct DirectionConfig {
    pub rate: Rate,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform +-jitter on the delay; packets are never reordered by it. At most `delay`.
    pub jitter: Duration,
    /// Random loss probability in [0, 1).
    pub loss: f64,
    pub queue: QueueConfig,
    pub seed: u64,
    /// Larger frames are dropped as `Oversize`, never queued as one packet.
    pub max_frame_bytes: usize,
    /// Flows whose ECT(0) packets arrive here from their sender: they go on as ECT(1), so every
    /// queue downstream sees the L4S identifier a kernel's TCP does not send.
    pub ect1_rewrite: Vec<Ipv4Pair>,
}

/// IPv4 TCP packets from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Pair {
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

/// What the queue log records. The discriminant is the code in the log file.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Enqueue = 1,
    Dequeue = 2,
    Drop = 3,
    /// Marked CE by the discipline; the packet stays queued (or is sent).
    Mark = 4,
    /// The discipline's controller set its probability (DualPI2's p', PIE's drop probability):
    /// when it starts, and at each update that changes it.
    Probability = 5,
}

/// One queue-log record: backlog is after the event; `value` is the frame's bytes for
/// Enqueue, Drop and Mark, its sojourn in the queue in ns for Dequeue, the probability in
/// parts per 2^32 for Probability (`qdisc::prob_fixed`). `reason` is the DropReason or
/// MarkReason code (0 for the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub t: Instant,
    pub kind: EventKind,
    pub reason: u8,
    pub value: u64,
    pub backlog_pkts: u32,
    pub backlog_bytes: u32,
    /// The packet's id, tag and enqueue time (its arrival time for drops before the queue);
    /// all zero for Probability.
    pub packet: PacketInfo,
}

/// A packet leaving the link, and when it was due to.
#[derive(Debug)]
pub struct Departure {
    pub packet: Packet,
    pub at: Instant,
}

/// A packet the link dropped, whole, when and why: what a capture of drops writes.
#[derive(Debug)]
pub struct DropRecord {
    pub packet: Packet,
    pub reason: DropReason,
    pub at: Instant,
}

/// The dropped packets kept for `take_drops`, when asked for.
#[derive(Default)]
struct DropCapture {
    enabled: bool,
    drops: Vec<DropRecord>,
}

impl DropCapture {
    fn keep(&mut self, at: Instant, d: Dropped) {
        if self.enabled {
            self.drops.push(DropRecord { packet: d.packet, reason: d.reason, at });
        }
    }
}

#[derive(Default)]
struct EventLog {
    enabled: bool,
    events: Vec<Event>,
}

impl EventLog {
    fn push(&mut self, t: Instant, kind: EventKind, reason: u8, value: u64, packet: PacketInfo, q: &QueueStats) {
        if self.enabled {
            let backlog_pkts = q.backlog_pkts.min(u32::MAX as u64) as u32;
            let backlog_bytes = q.backlog_bytes.min(u32::MAX as u64) as u32;
            self.events.push(Event { t, kind, reason, value, backlog_pkts, backlog_bytes, packet });
        }
    }
    fn queue_event(&mut self, t: Instant, e: QueueEvent, q: &QueueStats) {
        match e {
            QueueEvent::Enqueued(p) => self.push(t, EventKind::Enqueue, 0, p.len as u64, p, q),
            QueueEvent::Dequeued { packet, sojourn } => self.push(t, EventKind::Dequeue, 0, sojourn.nanos(), packet, q),
            QueueEvent::Dropped(p, reason) => self.push(t, EventKind::Drop, reason as u8, p.len as u64, p, q),
            QueueEvent::Marked(p, reason) => self.push(t, EventKind::Mark, reason as u8, p.len as u64, p, q),
            // At the controller's own time, which may be before the operation's `t`; no packet.
            QueueEvent::Probability { at, value } => self.push(at, EventKind::Probability, 0, value, PacketInfo::default(), q),
        }
    }
}

/// The serialiser: takes packets from the queue when the link is free and holds each for
/// its transmission time (constant rate) or until a trace opportunity carries its last byte.
struct Server {
    rate: Rate,
    in_service: Option<Packet>,
    /// The queue held its packets back (a discipline's own shaper) until then.
    retry_at: Option<Instant>,
    /// Trace mode: bytes of `in_service` not yet carried.
    left: u64,
    /// Constant rate: when `in_service` has been transmitted.
    busy_until: Instant,
    /// Trace mode: the trace's time zero, and the next opportunity not yet used.
    origin: Instant,
    next_opp: u64,
}

impl Server {
    /// Processes every completion and trace opportunity up to `now`, each at its own time.
    fn advance(&mut self, now: Instant, take: &mut impl FnMut(Instant) -> Taken, done: &mut impl FnMut(Instant, Packet)) {
        match &self.rate {
            Rate::Unlimited => {
                while let Some(t) = self.retry_at.filter(|&t| t <= now) {
                    self.retry_at = None;
                    self.drain(t, take, done);
                }
            }
            Rate::Constant { bps } => {
                let bps = *bps;
                loop {
                    let t = if self.in_service.is_some() && self.busy_until <= now {
                        let t = self.busy_until;
                        done(t, self.in_service.take().unwrap());
                        t
                    } else if let Some(t) = self.retry_at.filter(|&t| t <= now && self.in_service.is_none()) {
                        self.retry_at = None;
                        t
                    } else {
                        break;
                    };
                    match take(t) {
                        Taken::Packet(p) => {
                            self.busy_until = t + Rate::tx_time(bps, p.len() as u64);
                            self.in_service = Some(p);
                        }
                        Taken::Later(at) => self.retry_at = Some(at),
                        Taken::Empty => {}
                    }
                }
            }
            Rate::Trace(trace) => loop {
                let t = trace.time_of(self.origin, self.next_opp);
                if t > now {
                    break;
                }
                // An opportunity with nothing to carry is wasted, as on a real cellular link.
                let mut budget = TRACE_OPPORTUNITY_BYTES;
                let mut held_until = None;
                while budget > 0 {
                    if self.in_service.is_none() {
                        match take(t) {
                            Taken::Packet(p) => {
                                self.left = p.len() as u64;
                                self.in_service = Some(p);
                            }
                            // Held back by the queue's shaper: this opportunity goes unused.
                            Taken::Later(at) => {
                                held_until = Some(at);
                                break;
                            }
                            Taken::Empty => break,
                        }
                    }
                    let used = budget.min(self.left);
                    budget -= used;
                    self.left -= used;
                    if self.left == 0 {
                        done(t, self.in_service.take().unwrap());
                    }
                }
                self.next_opp += 1;
                if let Some(at) = held_until {
                    // So are those before the shaper lets go: the next is the first at or after
                    // then, whenever poll runs (an arrival's kick would otherwise skip ahead).
                    self.next_opp = self.next_opp.max(trace.first_at_or_after(self.origin, at));
                } else if self.in_service.is_none() && budget > 0 {
                    break; // queue empty: later opportunities are found afresh on arrival
                }
            },
        }
    }

    /// After an arrival at `now` (and `advance(now)`): start serving if the link is idle.
    fn kick(&mut self, now: Instant, take: &mut impl FnMut(Instant) -> Taken, done: &mut impl FnMut(Instant, Packet)) {
        match &self.rate {
            Rate::Unlimited => {
                if self.retry_at.is_none() {
                    self.drain(now, take, done);
                }
            }
            Rate::Constant { bps } => {
                if self.in_service.is_none() && self.retry_at.is_none() {
                    match take(now) {
                        Taken::Packet(p) => {
                            self.busy_until = now + Rate::tx_time(*bps, p.len() as u64);
                            self.in_service = Some(p);
                        }
                        Taken::Later(at) => self.retry_at = Some(at),
                        Taken::Empty => {}
                    }
                }
            }
            Rate::Trace(trace) => {
                if self.in_service.is_none() {
                    self.next_opp = self.next_opp.max(trace.first_at_or_after(self.origin, now));
                }
            }
        }
        if matches!(self.rate, Rate::Trace(_)) {
            self.advance(now, take, done); // an opportunity may fall exactly on `now`
        }
    }

    /// An unlimited link: everything the queue gives at `t`, until it holds back or is empty.
    fn drain(&mut self, t: Instant, take: &mut impl FnMut(Instant) -> Taken, done: &mut impl FnMut(Instant, Packet)) {
        loop {
            match take(t) {
                Taken::Packet(p) => done(t, p),
                Taken::Later(at) => {
                    self.retry_at = Some(at);
                    return;
                }
                Taken::Empty => return,
            }
        }
    }

    fn next_deadline(&self, queue_empty: bool) -> Option<Instant> {
        match &self.rate {
            Rate::Unlimited => self.retry_at,
            Rate::Constant { .. } => self.in_service.as_ref().map(|_| self.busy_until).or(self.retry_at),
            Rate::Trace(trace) => {
                (self.in_service.is_some() || !queue_empty).then(|| trace.time_of(self.origin, self.next_opp))
            }
        }
    }
}

/// Propagation delay: a FIFO of departures whose times never decrease, so jitter cannot reorder.
struct DelayLine {
    delay: Duration,
    jitter: Duration,
    q: VecDeque<Departure>,
    last: Instant,
}

impl DelayLine {
    fn push(&mut self, sent: Instant, packet: Packet, rng: &mut Rng) {
        let mut d = self.delay;
        if self.jitter.nanos() > 0 {
            d = Duration(self.delay.nanos() - self.jitter.nanos() + rng.below_incl(2 * self.jitter.nanos()));
        }
        let at = (sent + d).max(self.last);
        self.last = at;
        self.q.push_back(Departure { packet, at });
    }
}

/// What the serialiser got from the queue.
enum Taken {
    Packet(Packet),
    /// Nothing now: the discipline holds its packets back until then.
    Later(Instant),
    Empty,
}

/// The serialiser takes the queue's next packet at `t`; what the discipline drops on the way
/// is logged and kept at that same time.
fn take_next(queue: &mut Queue, t: Instant, rng: &mut Rng, log: &mut EventLog, dropped: &mut DropCapture) -> Taken {
    let p = queue.dequeue(t, rng, &mut |e, s| log.queue_event(t, e, s));
    queue.take_dropped(|d| dropped.keep(t, d));
    match p {
        Some(p) => Taken::Packet(p),
        // A time not after `t` would only ask again at once: none.
        None => queue.ready_at().filter(|&at| at > t).map_or(Taken::Empty, Taken::Later),
    }
}

/// Separates the discipline's random stream from the loss and jitter stream.
const QDISC_STREAM: u64 = 0x51ED_2701_A1B2_C3D4;

pub struct Pipeline {
    loss: f64,
    max_frame_bytes: usize,
    ect1_rewrite: Vec<Ipv4Pair>,
    /// Loss and jitter draw from `rng`, the discipline from `qdisc_rng`: two streams from the
    /// direction's seed, so changing the discipline does not change which packets are lost.
    rng: Rng,
    qdisc_rng: Rng,
    queue: Queue,
    server: Server,
    line: DelayLine,
    log: EventLog,
    dropped: DropCapture,
    next_id: u64,
    stats: DirectionStats,
    last_now: Instant,
}

impl Pipeline {
    /// A pipeline whose trace (if any) starts at `origin`.
    pub fn new(cfg: &DirectionConfig, origin: Instant) -> Self {
        assert!(cfg.jitter <= cfg.delay, "jitter must not exceed delay");
        Pipeline {
            loss: cfg.loss,
            max_frame_bytes: cfg.max_frame_bytes,
            ect1_rewrite: cfg.ect1_rewrite.clone(),
            rng: Rng::new(cfg.seed),
            qdisc_rng: Rng::new(cfg.seed ^ QDISC_STREAM),
            queue: Queue::new(cfg.queue.build(cfg.seed)),
            server: Server { rate: cfg.rate.clone(), in_service: None, retry_at: None, left: 0, busy_until: origin, origin, next_opp: 0 },
            line: DelayLine { delay: cfg.delay, jitter: cfg.jitter, q: VecDeque::new(), last: origin },
            log: EventLog::default(),
            dropped: DropCapture::default(),
            next_id: 0,
            stats: DirectionStats::default(),
            last_now: origin,
        }
    }

    /// Keep a per-event log (see `take_events`).
    pub fn record_events(&mut self, on: bool) {
        self.log.enabled = on;
    }

    /// Keep every dropped packet, whole, for `take_drops` (a capture of drops).
    pub fn record_drops(&mut self, on: bool) {
        self.dropped.enabled = on;
        self.queue.keep_dropped(on);
    }

    /// A frame arrives at `now`.
    pub fn arrive(&mut self, now: Instant, data: Vec<u8>) {
        let len = data.len() as u32;
        self.arrive_with(now, data, len, 0);
    }

    /// A packet of `wire_len` bytes arrives at `now`; `data` holds the frame or, in a replay,
    /// its headers only. `tag` is carried through to the logs and the departure.
    pub fn arrive_with(&mut self, now: Instant, mut data: Vec<u8>, wire_len: u32, tag: u32) {
        self.advance(now);
        self.stats.arrivals += 1;
        self.stats.bytes_in += wire_len as u64;
        let len = wire_len as usize;
        let early_drop = if len < MIN_FRAME_BYTES {
            Some(DropReason::Runt)
        } else if len > self.max_frame_bytes {
            Some(DropReason::Oversize)
        } else {
            // Before loss: a frame the link then loses was ECT(1) when it entered, as its capture shows.
            self.rewrite_ect1(&mut data);
            self.rng.chance(self.loss).then_some(DropReason::Loss)
        };
        let mut pkt = Packet::with_headers(self.next_id, data, wire_len, tag);
        self.next_id += 1;
        if let Some(reason) = early_drop {
            self.stats.drops.add(reason);
            pkt.enqueued_at = now;
            self.log.push(now, EventKind::Drop, reason as u8, len as u64, pkt.info(), self.queue.stats());
            self.dropped.keep(now, Dropped { packet: pkt, reason });
            return;
        }
        let Pipeline { queue, server, line, log, dropped, rng, qdisc_rng, .. } = self;
        queue.enqueue(now, pkt, qdisc_rng, &mut |e, s| log.queue_event(now, e, s));
        queue.take_dropped(|d| dropped.keep(now, d));
        let mut take = |t: Instant| take_next(queue, t, qdisc_rng, log, dropped);
        server.kick(now, &mut take, &mut |t, p| line.push(t, p, rng));
    }

    /// ECT(0) into ECT(1) if the frame is TCP of a pair in `ect1_rewrite`: a probe between the
    /// same hosts keeps the codepoint it was sent with.
    fn rewrite_ect1(&mut self, data: &mut [u8]) {
        if self.ect1_rewrite.is_empty() || crate::wire::ecn(data) != Some(crate::wire::Ecn::Ect0) {
            return;
        }
        let Some((src, dst)) = crate::wire::ipv4_tcp_addresses(data) else { return };
        if self.ect1_rewrite.iter().any(|p| p.src == src && p.dst == dst) && crate::wire::ect0_to_ect1(data) {
            self.stats.ect1_rewritten += 1;
        }
    }

    /// Moves time to `now` and hands out every packet due by then, in order.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Departure>) {
        self.advance(now);
        while self.line.q.front().is_some_and(|d| d.at <= now) {
            let d = self.line.q.pop_front().unwrap();
            self.stats.departures += 1;
            self.stats.bytes_out += d.packet.len() as u64;
            if let Some(tos) = crate::wire::traffic_class(&d.packet.data) {
                self.stats.departures_by_dscp[(tos >> 2) as usize] += 1;
                self.stats.departures_by_ecn[(tos & 3) as usize] += 1;
            }
            out.push(d);
        }
    }

    /// When `poll` next has something to do; None while idle.
    pub fn next_deadline(&self) -> Option<Instant> {
        let line = self.line.q.front().map(|d| d.at);
        let server = self.server.next_deadline(self.queue.is_empty());
        match (line, server) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest a packet can leave: the delay line's head, or the serialiser's next
    /// completion plus the shortest delay. Other deadlines only move virtual time, which
    /// `poll` catches up exactly whenever it runs, so only these need a punctual wake-up.
    pub fn next_departure(&self) -> Option<Instant> {
        let shortest = self.shortest_delay();
        let line = self.line.q.front().map(|d| d.at);
        let wire = self.server.next_deadline(self.queue.is_empty()).map(|t| t + shortest);
        match (line, wire) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The least time any packet spends between arrival and departure: a packet arriving
    /// at `t` cannot leave before `t` plus this.
    pub fn shortest_delay(&self) -> Duration {
        Duration(self.line.delay.nanos() - self.line.jitter.nanos())
    }

    fn advance(&mut self, now: Instant) {
        assert!(now >= self.last_now, "time ran backwards: {:?} < {:?}", now, self.last_now);
        self.last_now = now;
        let Pipeline { queue, server, line, log, dropped, rng, qdisc_rng, .. } = self;
        let mut take = |t: Instant| take_next(queue, t, qdisc_rng, log, dropped);
        server.advance(now, &mut take, &mut |t, p| line.push(t, p, rng));
    }

    /// The time of the latest call: arrivals must not come before it.
    pub fn last_time(&self) -> Instant {
        self.last_now
    }

    /// Moves the packets dropped since the last call into `out` (with `record_drops` on).
    pub fn take_drops(&mut self, out: &mut Vec<DropRecord>) {
        out.append(&mut self.dropped.drops);
    }

    /// Moves the recorded events into `out`.
    pub fn take_events(&mut self, out: &mut Vec<Event>) {
        out.append(&mut self.log.events);
    }

    pub fn stats(&self) -> &DirectionStats {
        &self.stats
    }
    pub fn queue_stats(&self) -> &QueueStats {
        self.queue.stats()
    }
    /// The queue's classes and their counters (CAKE's tins), if it has any.
    pub fn queue_tins(&self) -> Vec<TinReport> {
        self.queue.tins()
    }
    /// DualPI2's figures, its head delays at the latest call's time; None for other disciplines.
    pub fn queue_dualpi2(&self) -> Option<DualPi2Stats> {
        self.queue.dualpi2(self.last_now)
    }
    /// Packets past the queue but not yet out: in the serialiser or the delay line.
    pub fn in_flight(&self) -> u64 {
        self.server.in_service.is_some() as u64 + self.line.q.len() as u64
    }
}

#[cfg(test)]
mod tests;
