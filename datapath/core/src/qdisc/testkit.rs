//! Scripted-time harness for discipline tests: a `Queue` (so the accounting identities are
//! checked after every step), a seeded generator, and a record of every event.

use super::{DropReason, MarkReason, Packet, Queue, QueueConfig, QueueEvent};
use crate::rng::Rng;
use crate::time::Instant;
use crate::wire::{synthetic_ipv4_udp, Ecn};

pub const MS: u64 = 1_000_000;
pub const US: u64 = 1_000;

pub struct Harness {
    pub q: Queue,
    pub rng: Rng,
    pub events: Vec<(u64, QueueEvent)>,
    next_id: u64,
}

impl Harness {
    pub fn new(cfg: QueueConfig) -> Self {
        cfg.validate().expect("test config is valid");
        Harness { q: Queue::new(cfg.build(7)), rng: Rng::new(1), events: Vec::new(), next_id: 0 }
    }
    /// A UDP/IPv4 packet of `len` bytes on the wire in `flow`.
    pub fn packet(&mut self, flow: u32, ecn: Ecn, len: u32) -> Packet {
        let id = self.next_id;
        self.next_id += 1;
        Packet::with_headers(id, synthetic_ipv4_udp(flow, ecn, len as usize), len, flow)
    }
    /// Enqueues a Not-ECT packet of flow 0 at `t_ns`; returns its id.
    pub fn enqueue(&mut self, t_ns: u64, len: u32) -> u64 {
        let p = self.packet(0, Ecn::NotEct, len);
        self.offer(t_ns, p)
    }
    pub fn offer(&mut self, t_ns: u64, p: Packet) -> u64 {
        let id = p.id;
        let Harness { q, rng, events, .. } = self;
        q.enqueue(Instant(t_ns), p, rng, &mut |e, _| events.push((t_ns, e)));
        id
    }
    pub fn dequeue(&mut self, t_ns: u64) -> Option<Packet> {
        let Harness { q, rng, events, .. } = self;
        q.dequeue(Instant(t_ns), rng, &mut |e, _| events.push((t_ns, e)))
    }
    /// Dequeues everything at `t_ns`: the ids that came out.
    pub fn drain(&mut self, t_ns: u64) -> Vec<u64> {
        std::iter::from_fn(|| self.dequeue(t_ns)).map(|p| p.id).collect()
    }
    /// (time, id, reason) of every drop so far.
    pub fn drops(&self) -> Vec<(u64, u64, DropReason)> {
        self.events.iter().filter_map(|&(t, e)| if let QueueEvent::Dropped(p, r) = e { Some((t, p.id, r)) } else { None }).collect()
    }
    pub fn marks(&self) -> Vec<(u64, u64, MarkReason)> {
        self.events.iter().filter_map(|&(t, e)| if let QueueEvent::Marked(p, r) = e { Some((t, p.id, r)) } else { None }).collect()
    }
}
