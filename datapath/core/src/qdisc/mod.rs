//! Queue disciplines: one trait, many implementations, and one wrapper (`Queue`) that owns
//! the accounting and checks its identities after every operation:
//!   arrived  = enqueued + dropped at enqueue (the arriving packet refused)
//!   enqueued = dequeued + dropped in queue + backlog
//! A new discipline implements `QueueDisc` and a `QueueConfig` variant; the I/O shell never
//! changes.

mod cake;
mod codel;
mod dualpi2;
mod fifo;
mod fq_codel;
mod pie;
#[cfg(test)]
mod properties;
mod red;
#[cfg(test)]
mod testkit;

pub use cake::{AckFilter, Cake, CakeParams, DiffservMode, FlowMode, Framing, TinReport, TinStats};
pub use codel::{Codel, CodelParams};
pub use dualpi2::{DualPi2, DualPi2Params, DualPi2Stats, EcnMask};
pub use fifo::{Fifo, Limit, Overflow};
pub use fq_codel::{FqCodel, FqCodelParams};
pub use pie::{Pie, PieParams};
pub use red::{Red, RedParams};

pub use crate::reason::{DropReason, MarkReason};
use crate::rng::Rng;
use crate::stats::{DropCounts, MarkCounts};
use crate::time::{Duration, Instant};

/// An Ethernet frame inside the datapath.
#[derive(Debug)]
pub struct Packet {
    /// Unique per link direction, in arrival order.
    pub id: u64,
    /// The frame, or (in a replay) only its headers: disciplines read and mark headers only.
    pub data: Vec<u8>,
    /// Length on the wire in bytes: what queues count and the serialiser carries.
    pub wire_len: u32,
    /// An opaque label carried through unchanged (a replay's flow id).
    pub tag: u32,
    /// Set by `Queue::enqueue`; disciplines that judge sojourn time (CoDel, PIE) read it.
    pub enqueued_at: Instant,
}

impl Packet {
    pub fn new(id: u64, data: Vec<u8>) -> Self {
        let wire_len = data.len() as u32;
        Packet { id, data, wire_len, tag: 0, enqueued_at: Instant::ZERO }
    }
    /// A packet of `wire_len` bytes of which only `headers` are kept.
    pub fn with_headers(id: u64, headers: Vec<u8>, wire_len: u32, tag: u32) -> Self {
        Packet { id, data: headers, wire_len, tag, enqueued_at: Instant::ZERO }
    }
    pub fn len(&self) -> usize {
        self.wire_len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.wire_len == 0
    }
    pub fn info(&self) -> PacketInfo {
        PacketInfo { id: self.id, len: self.wire_len, tag: self.tag, enqueued_at: self.enqueued_at }
    }
}

/// What the logs say of a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    pub id: u64,
    pub len: u32,
    pub tag: u32,
    pub enqueued_at: Instant,
}

/// A packet a discipline decided to drop, and why.
#[derive(Debug)]
pub struct Dropped {
    pub packet: Packet,
    pub reason: DropReason,
}

/// What a discipline did besides queueing: drops (the packets themselves), CE marks, and the
/// updates of its controller's probability that changed it.
#[derive(Debug, Default)]
pub struct Verdicts {
    pub drops: Vec<Dropped>,
    pub marks: Vec<(PacketInfo, MarkReason)>,
    /// (time of the update, the probability in parts per 2^32), in time order.
    pub probs: Vec<(Instant, u64)>,
    /// The last value put in `probs`: the discipline's calls outlive each operation's verdicts.
    last_prob: Option<u64>,
}

/// A probability as the queue log writes it: p x 2^32, rounded to the nearest integer
/// (0 = never, 2^32 = always). Scaling by a power of two is exact; only the rounding is not.
pub fn prob_fixed(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * 4_294_967_296.0).round() as u64
}

impl Verdicts {
    pub fn drop(&mut self, packet: Packet, reason: DropReason) {
        self.drops.push(Dropped { packet, reason });
    }
    /// Marks CE if the packet is ECN-capable and says so; else the caller drops it.
    pub fn try_mark(&mut self, packet: &mut Packet, reason: MarkReason) -> bool {
        let marked = crate::wire::set_ce(&mut packet.data);
        if marked {
            self.marks.push((packet.info(), reason));
        }
        marked
    }
    /// The controller set its probability to `p` at `t` (its start, or an update on its timer,
    /// run late but at its own time). Kept only if the logged value changes, so an idle queue
    /// whose probability rests at 0 (or a saturated one at 1) writes nothing tick after tick.
    pub fn probability(&mut self, t: Instant, p: f64) {
        let value = prob_fixed(p);
        if self.last_prob != Some(value) {
            self.last_prob = Some(value);
            self.probs.push((t, value));
        }
    }
}

/// What every queue discipline implements (cf. ns-3's QueueDisc DoEnqueue / DoDequeue).
/// Random decisions draw from `rng`, the link direction's seeded generator.
pub trait QueueDisc: Send {
    /// Offer `pkt` at `now`. Whatever the decision drops (the arriving packet or packets
    /// already queued) or marks goes to `out`.
    fn enqueue(&mut self, now: Instant, pkt: Packet, rng: &mut Rng, out: &mut Verdicts);
    /// The next packet to transmit at `now`, if any; packets dropped on the way go to `out`.
    fn dequeue(&mut self, now: Instant, rng: &mut Rng, out: &mut Verdicts) -> Option<Packet>;
    /// When a discipline that holds packets back (a shaper) will next give one: asked when
    /// `dequeue` gave nothing with packets queued. None: it holds nothing back.
    fn ready_at(&self) -> Option<Instant> {
        None
    }
    /// The classes it sorts packets into, with their counters (CAKE's tins); none for most.
    fn tins(&self) -> Vec<TinReport> {
        Vec::new()
    }
    /// DualPI2's figures as `tc -s qdisc` shows them, its head delays taken at `now`; None
    /// for the others.
    fn dualpi2(&self, _now: Instant) -> Option<DualPi2Stats> {
        None
    }
    fn backlog_pkts(&self) -> usize;
    fn backlog_bytes(&self) -> usize;
    fn name(&self) -> &'static str;
}

/// A discipline and its parameters, as the spec names it.
#[derive(Clone, Debug, PartialEq)]
pub enum QueueConfig {
    DropTail(Limit),
    DropHead(Limit),
    Codel(Limit, CodelParams),
    FqCodel(Limit, FqCodelParams),
    Red(Limit, RedParams),
    Pie(Limit, PieParams),
    Cake(Limit, CakeParams),
    DualPi2(Limit, DualPi2Params),
}

impl QueueConfig {
    /// Checks the parameters; an error names the parameter, on one line.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            QueueConfig::DropTail(_) | QueueConfig::DropHead(_) => Ok(()),
            QueueConfig::Codel(_, p) => p.validate(),
            QueueConfig::FqCodel(_, p) => p.validate(),
            QueueConfig::Red(l, p) => p.validate(*l),
            QueueConfig::Pie(_, p) => p.validate(),
            QueueConfig::Cake(_, p) => p.validate(),
            QueueConfig::DualPi2(_, p) => p.validate(),
        }
    }
    /// The discipline; `seed` perturbs what needs it (FQ-CoDel's flow hash).
    pub fn build(&self, seed: u64) -> Box<dyn QueueDisc> {
        match self {
            QueueConfig::DropTail(limit) => Box::new(Fifo::new(*limit, Overflow::Tail)),
            QueueConfig::DropHead(limit) => Box::new(Fifo::new(*limit, Overflow::Head)),
            QueueConfig::Codel(limit, p) => Box::new(Codel::new(*limit, p.clone())),
            QueueConfig::FqCodel(limit, p) => Box::new(FqCodel::new(*limit, p.clone(), seed)),
            QueueConfig::Red(limit, p) => Box::new(Red::new(*limit, p.clone())),
            QueueConfig::Pie(limit, p) => Box::new(Pie::new(*limit, p.clone())),
            QueueConfig::Cake(limit, p) => Box::new(Cake::new(*limit, p.clone(), seed)),
            QueueConfig::DualPi2(limit, p) => Box::new(DualPi2::new(*limit, p.clone())),
        }
    }
}

/// Counters of a `Queue`; the identities in the module doc hold between any two calls.
#[derive(Clone, Debug, Default)]
pub struct QueueStats {
    pub arrived: u64,
    pub enqueued: u64,
    pub dropped_at_enqueue: u64,
    pub dequeued: u64,
    pub dropped_in_queue: u64,
    pub backlog_pkts: u64,
    pub backlog_bytes: u64,
    pub max_backlog_pkts: u64,
    pub max_backlog_bytes: u64,
    pub drops: DropCounts,
    pub marks: MarkCounts,
}

/// What happened to the queue, for the per-packet log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueEvent {
    Enqueued(PacketInfo),
    Dequeued { packet: PacketInfo, sojourn: Duration },
    Dropped(PacketInfo, DropReason),
    Marked(PacketInfo, MarkReason),
    /// The controller's probability changed at `at` (not the operation's time: its timer's
    /// ticks are run at the next operation, each at its own time) to `value` parts per 2^32.
    Probability { at: Instant, value: u64 },
}

/// The wrapper around a discipline: stamps enqueue times, keeps the books, checks them.
pub struct Queue {
    disc: Box<dyn QueueDisc>,
    stats: QueueStats,
    scratch: Verdicts,
    /// Dropped packets, whole, in the order their drop events went out (see `keep_dropped`).
    dropped: Option<Vec<Dropped>>,
}

impl Queue {
    pub fn new(disc: Box<dyn QueueDisc>) -> Self {
        Queue { disc, stats: QueueStats::default(), scratch: Verdicts::default(), dropped: None }
    }

    /// Keep every dropped packet with its frame (for a capture) until `take_dropped`;
    /// otherwise a drop frees the packet at once.
    pub fn keep_dropped(&mut self, on: bool) {
        self.dropped = on.then(Vec::new);
    }
    /// Hands each packet dropped since the last call to `each`, in drop order.
    pub fn take_dropped(&mut self, mut each: impl FnMut(Dropped)) {
        if let Some(kept) = self.dropped.as_mut() {
            kept.drain(..).for_each(&mut each);
        }
    }

    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }
    pub fn is_empty(&self) -> bool {
        self.stats.backlog_pkts == 0
    }
    pub fn name(&self) -> &'static str {
        self.disc.name()
    }
    /// The discipline's classes and their counters (see `QueueDisc::tins`).
    pub fn tins(&self) -> Vec<TinReport> {
        self.disc.tins()
    }
    /// DualPI2's figures at `now` (see `QueueDisc::dualpi2`).
    pub fn dualpi2(&self, now: Instant) -> Option<DualPi2Stats> {
        self.disc.dualpi2(now)
    }
    /// When the discipline will give a packet it holds back now (see `QueueDisc::ready_at`).
    pub fn ready_at(&self) -> Option<Instant> {
        if self.is_empty() {
            None
        } else {
            self.disc.ready_at()
        }
    }

    /// Offer a packet; `on_event` hears of the enqueue and of every drop and mark, in order.
    pub fn enqueue(&mut self, now: Instant, mut pkt: Packet, rng: &mut Rng, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        pkt.enqueued_at = now;
        let info = pkt.info();
        self.stats.arrived += 1;
        self.disc.enqueue(now, pkt, rng, &mut self.scratch);
        self.report_probabilities(on_event);
        // Marks come first: a packet marked as it arrives may still be refused (RED's verdict,
        // then a full queue, as Linux's sch_red and its child qdisc count them), and its mark
        // happened before its drop.
        self.account_marks(on_event);
        let mut accepted = true;
        // The arriving packet's fate next, so the log reads in causal order.
        if let Some(pos) = self.scratch.drops.iter().position(|d| d.packet.id == info.id) {
            let d = self.scratch.drops.remove(pos);
            accepted = false;
            self.stats.dropped_at_enqueue += 1;
            self.stats.drops.add(d.reason);
            on_event(QueueEvent::Dropped(info, d.reason), &self.stats);
            self.keep(d);
        } else {
            self.stats.enqueued += 1;
            self.stats.backlog_pkts += 1;
            self.stats.backlog_bytes += info.len as u64;
        }
        self.account_verdicts(on_event);
        if accepted {
            self.note_max();
            on_event(QueueEvent::Enqueued(info), &self.stats);
        }
        self.check();
    }

    /// Take the next packet to transmit; drops the discipline makes on the way are reported.
    pub fn dequeue(&mut self, now: Instant, rng: &mut Rng, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) -> Option<Packet> {
        let pkt = self.disc.dequeue(now, rng, &mut self.scratch);
        self.report_probabilities(on_event);
        self.account_verdicts(on_event);
        if let Some(p) = &pkt {
            self.stats.dequeued += 1;
            self.stats.backlog_pkts -= 1;
            self.stats.backlog_bytes -= p.len() as u64;
            on_event(QueueEvent::Dequeued { packet: p.info(), sojourn: now.saturating_since(p.enqueued_at) }, &self.stats);
        }
        self.check();
        pkt
    }

    /// The controller's updates since the last operation, first: they happened before it, while
    /// the queue held what it holds now (it changes only at operations).
    fn report_probabilities(&mut self, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        for (at, value) in self.scratch.probs.drain(..) {
            on_event(QueueEvent::Probability { at, value }, &self.stats);
        }
    }

    fn account_marks(&mut self, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        for (info, reason) in self.scratch.marks.drain(..) {
            self.stats.marks.add(reason);
            on_event(QueueEvent::Marked(info, reason), &self.stats);
        }
    }

    /// Books the marks, and the drops of packets that were in the queue (those left in `scratch`).
    fn account_verdicts(&mut self, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        self.account_marks(on_event);
        for d in self.scratch.drops.drain(..) {
            self.stats.dropped_in_queue += 1;
            self.stats.backlog_pkts -= 1;
            self.stats.backlog_bytes -= d.packet.len() as u64;
            self.stats.drops.add(d.reason);
            on_event(QueueEvent::Dropped(d.packet.info(), d.reason), &self.stats);
            if let Some(kept) = self.dropped.as_mut() {
                kept.push(d);
            }
        }
    }
    fn keep(&mut self, d: Dropped) {
        if let Some(kept) = self.dropped.as_mut() {
            kept.push(d);
        }
    }
    fn note_max(&mut self) {
        let s = &mut self.stats;
        s.max_backlog_pkts = s.max_backlog_pkts.max(s.backlog_pkts);
        s.max_backlog_bytes = s.max_backlog_bytes.max(s.backlog_bytes);
    }

    /// The accounting identities, and agreement with the discipline's own backlog.
    /// A handful of integer compares: cheap enough to keep on in release builds.
    fn check(&self) {
        let s = &self.stats;
        assert_eq!(s.arrived, s.enqueued + s.dropped_at_enqueue, "queue accounting: arrivals");
        assert_eq!(s.enqueued, s.dequeued + s.dropped_in_queue + s.backlog_pkts, "queue accounting: backlog");
        assert_eq!(s.backlog_pkts, self.disc.backlog_pkts() as u64, "queue accounting: {} packets", self.disc.name());
        assert_eq!(s.backlog_bytes, self.disc.backlog_bytes() as u64, "queue accounting: {} bytes", self.disc.name());
    }
}
