//! Queue disciplines: one trait, many implementations, and one wrapper (`Queue`) that owns
//! the accounting and checks its identities after every operation:
//!   arrived  = enqueued + dropped at enqueue (the arriving packet refused)
//!   enqueued = dequeued + dropped in queue + backlog
//! A new discipline implements `QueueDisc` and a `QueueConfig` variant; the I/O shell never
//! changes.

mod fifo;

pub use fifo::{Fifo, Limit, Overflow};

use crate::stats::DropCounts;
use crate::time::{Duration, Instant};

/// An Ethernet frame inside the datapath.
#[derive(Debug)]
pub struct Packet {
    /// Unique per link direction, in arrival order.
    pub id: u64,
    pub data: Vec<u8>,
    /// Set by `Queue::enqueue`; disciplines that judge sojourn time (CoDel) read it.
    pub enqueued_at: Instant,
}

impl Packet {
    pub fn new(id: u64, data: Vec<u8>) -> Self {
        Packet { id, data, enqueued_at: Instant::ZERO }
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Why a packet was dropped. The discriminant is the code written to queue logs.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The link's emulated random loss.
    Loss = 1,
    /// The queue was full; the arriving packet was refused (tail drop).
    QueueFull = 2,
    /// The queue was full; the oldest packet made room (drop-head).
    HeadDrop = 3,
    /// Larger than the link's largest frame (a super-frame that escaped offload settings).
    Oversize = 4,
    /// Shorter than an Ethernet header.
    Runt = 5,
}

impl DropReason {
    pub const ALL: [DropReason; 5] = [
        DropReason::Loss,
        DropReason::QueueFull,
        DropReason::HeadDrop,
        DropReason::Oversize,
        DropReason::Runt,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::QueueFull => "queue_full",
            DropReason::HeadDrop => "head_drop",
            DropReason::Oversize => "oversize",
            DropReason::Runt => "runt",
        }
    }
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

/// A packet a discipline decided to drop, and why.
#[derive(Debug)]
pub struct Dropped {
    pub packet: Packet,
    pub reason: DropReason,
}

/// What every queue discipline implements (cf. ns-3's QueueDisc DoEnqueue / DoDequeue).
pub trait QueueDisc: Send {
    /// Offer `pkt` at `now`. Whatever the decision drops (the arriving packet or packets
    /// already queued) goes to `drops`.
    fn enqueue(&mut self, now: Instant, pkt: Packet, drops: &mut Vec<Dropped>);
    /// The next packet to transmit at `now`, if any; packets dropped on the way go to `drops`.
    fn dequeue(&mut self, now: Instant, drops: &mut Vec<Dropped>) -> Option<Packet>;
    fn backlog_pkts(&self) -> usize;
    fn backlog_bytes(&self) -> usize;
    fn name(&self) -> &'static str;
}

/// A discipline and its parameters, as the spec names it.
#[derive(Clone, Debug, PartialEq)]
pub enum QueueConfig {
    DropTail(Limit),
    DropHead(Limit),
}

impl QueueConfig {
    pub fn build(&self) -> Box<dyn QueueDisc> {
        match *self {
            QueueConfig::DropTail(limit) => Box::new(Fifo::new(limit, Overflow::Tail)),
            QueueConfig::DropHead(limit) => Box::new(Fifo::new(limit, Overflow::Head)),
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
}

/// What happened to the queue, for the per-packet log.
#[derive(Debug)]
pub enum QueueEvent {
    Enqueued { bytes: usize },
    Dequeued { sojourn: Duration },
    Dropped { bytes: usize, reason: DropReason },
}

/// The wrapper around a discipline: stamps enqueue times, keeps the books, checks them.
pub struct Queue {
    disc: Box<dyn QueueDisc>,
    stats: QueueStats,
    scratch: Vec<Dropped>,
}

impl Queue {
    pub fn new(disc: Box<dyn QueueDisc>) -> Self {
        Queue { disc, stats: QueueStats::default(), scratch: Vec::new() }
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

    /// Offer a packet; `on_event` hears of the enqueue and of every drop, in order.
    pub fn enqueue(&mut self, now: Instant, mut pkt: Packet, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        let (id, bytes) = (pkt.id, pkt.len());
        pkt.enqueued_at = now;
        self.stats.arrived += 1;
        self.disc.enqueue(now, pkt, &mut self.scratch);
        let mut accepted = true;
        // The arriving packet's fate first, so the log reads in causal order.
        if let Some(pos) = self.scratch.iter().position(|d| d.packet.id == id) {
            let d = self.scratch.remove(pos);
            accepted = false;
            self.stats.dropped_at_enqueue += 1;
            self.stats.drops.add(d.reason);
            on_event(QueueEvent::Dropped { bytes, reason: d.reason }, &self.stats);
        } else {
            self.stats.enqueued += 1;
            self.stats.backlog_pkts += 1;
            self.stats.backlog_bytes += bytes as u64;
        }
        self.account_queued_drops(on_event);
        if accepted {
            self.note_max();
            on_event(QueueEvent::Enqueued { bytes }, &self.stats);
        }
        self.check();
    }

    /// Take the next packet to transmit; drops the discipline makes on the way are reported.
    pub fn dequeue(&mut self, now: Instant, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) -> Option<Packet> {
        let pkt = self.disc.dequeue(now, &mut self.scratch);
        self.account_queued_drops(on_event);
        if let Some(p) = &pkt {
            self.stats.dequeued += 1;
            self.stats.backlog_pkts -= 1;
            self.stats.backlog_bytes -= p.len() as u64;
            on_event(QueueEvent::Dequeued { sojourn: now.saturating_since(p.enqueued_at) }, &self.stats);
        }
        self.check();
        pkt
    }

    /// Books the drops of packets that were in the queue (those left in `scratch`).
    fn account_queued_drops(&mut self, on_event: &mut impl FnMut(QueueEvent, &QueueStats)) {
        for d in self.scratch.drain(..) {
            self.stats.dropped_in_queue += 1;
            self.stats.backlog_pkts -= 1;
            self.stats.backlog_bytes -= d.packet.len() as u64;
            self.stats.drops.add(d.reason);
            on_event(QueueEvent::Dropped { bytes: d.packet.len(), reason: d.reason }, &self.stats);
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
