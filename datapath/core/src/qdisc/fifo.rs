//! First-in first-out disciplines: Linux's pfifo/bfifo (tail drop) and pfifo_head_drop.

use std::collections::VecDeque;

use super::{DropReason, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::Instant;

/// A FIFO's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// At most this many packets (pfifo's `limit`).
    Packets(usize),
    /// At most this many bytes of frames (bfifo's `limit`).
    Bytes(usize),
}

/// What a full FIFO sacrifices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Refuse the arriving packet (pfifo, bfifo).
    Tail,
    /// Drop the oldest packets to make room, so what waits is fresh (pfifo_head_drop).
    Head,
}

/// First in, first out, bounded by `limit`.
#[derive(Debug)]
pub struct Fifo {
    limit: Limit,
    overflow: Overflow,
    q: VecDeque<Packet>,
    bytes: usize,
}

impl Fifo {
    pub fn new(limit: Limit, overflow: Overflow) -> Self {
        Fifo { limit, overflow, q: VecDeque::new(), bytes: 0 }
    }
    /// Would one more packet of `len` bytes fit? (pfifo: qlen < limit; bfifo: backlog + len <= limit)
    pub(super) fn fits(&self, len: usize) -> bool {
        match self.limit {
            Limit::Packets(n) => self.q.len() < n,
            Limit::Bytes(b) => self.bytes + len <= b,
        }
    }
    pub(super) fn pop(&mut self) -> Option<Packet> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len();
        Some(p)
    }
    /// Tail drop: queues `pkt` if it fits, else refuses it as QueueFull. The AQMs keep their
    /// packets in a Fifo and call this once they have decided to let a packet in.
    pub(super) fn push_or_drop(&mut self, pkt: Packet, out: &mut Verdicts) {
        if self.fits(pkt.len()) {
            self.bytes += pkt.len();
            self.q.push_back(pkt);
        } else {
            out.drop(pkt, DropReason::QueueFull);
        }
    }
    pub(super) fn len(&self) -> usize {
        self.q.len()
    }
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl QueueDisc for Fifo {
    fn enqueue(&mut self, _now: Instant, pkt: Packet, _rng: &mut Rng, out: &mut Verdicts) {
        // A frame larger than a whole byte limit never fits: refuse it rather than empty the queue.
        let hopeless = matches!(self.limit, Limit::Bytes(b) if pkt.len() > b);
        if self.overflow == Overflow::Head && !hopeless {
            while !self.fits(pkt.len()) {
                let old = self.pop().expect("an empty queue fits any frame within the limit");
                out.drop(old, DropReason::HeadDrop);
            }
        }
        self.push_or_drop(pkt, out);
    }
    fn dequeue(&mut self, _now: Instant, _rng: &mut Rng, _out: &mut Verdicts) -> Option<Packet> {
        self.pop()
    }
    fn backlog_pkts(&self) -> usize {
        self.q.len()
    }
    fn backlog_bytes(&self) -> usize {
        self.bytes
    }
    fn name(&self) -> &'static str {
        match self.overflow {
            Overflow::Tail => "droptail",
            Overflow::Head => "drophead",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::Harness;
    use super::super::{QueueConfig, QueueEvent};
    use super::*;

    fn run(cfg: QueueConfig, sizes: &[u32]) -> (Harness, Vec<(u64, DropReason)>) {
        let mut h = Harness::new(cfg);
        for (i, &len) in sizes.iter().enumerate() {
            h.enqueue(i as u64, len);
        }
        let dropped = h.drops().into_iter().map(|(_, id, r)| (id, r)).collect();
        (h, dropped)
    }

    #[test]
    fn droptail_packets_refuses_the_arrival() {
        let (mut h, dropped) = run(QueueConfig::DropTail(Limit::Packets(3)), &[100; 5]);
        assert_eq!(dropped, vec![(3, DropReason::QueueFull), (4, DropReason::QueueFull)]);
        assert_eq!(h.drain(10), vec![0, 1, 2]);
        let s = h.q.stats();
        assert_eq!((s.arrived, s.enqueued, s.dropped_at_enqueue, s.dequeued), (5, 3, 2, 3));
        assert_eq!(s.max_backlog_pkts, 3);
        assert_eq!(s.drops.get(DropReason::QueueFull), 2);
    }

    #[test]
    fn droptail_bytes_counts_frame_bytes() {
        // bfifo semantics: 1514 + 1000 + 486 fill 3000 bytes exactly; one more byte does not fit.
        let (h, dropped) = run(QueueConfig::DropTail(Limit::Bytes(3000)), &[1514, 1000, 486, 1]);
        assert_eq!(h.q.stats().backlog_bytes, 3000);
        assert_eq!(dropped, vec![(3, DropReason::QueueFull)]);
    }

    #[test]
    fn drophead_keeps_the_newest() {
        let (mut h, dropped) = run(QueueConfig::DropHead(Limit::Packets(2)), &[100; 4]);
        assert_eq!(dropped, vec![(0, DropReason::HeadDrop), (1, DropReason::HeadDrop)]);
        assert_eq!(h.drain(10), vec![2, 3]);
        let s = h.q.stats();
        assert_eq!((s.enqueued, s.dropped_in_queue, s.dropped_at_enqueue), (4, 2, 0));
    }

    #[test]
    fn drophead_bytes_drops_until_it_fits() {
        let (h, _) = run(QueueConfig::DropHead(Limit::Bytes(2000)), &[800, 800, 1500]);
        // 1500 needs 1500 free: both 800s go.
        assert_eq!((h.q.stats().backlog_pkts, h.q.stats().backlog_bytes), (1, 1500));
        let (h, dropped) = run(QueueConfig::DropHead(Limit::Bytes(1000)), &[500, 1200]);
        assert_eq!(dropped, vec![(1, DropReason::QueueFull)]);
        assert_eq!(h.q.stats().backlog_bytes, 500);
    }

    #[test]
    fn sojourn_is_measured_from_enqueue() {
        let mut h = Harness::new(QueueConfig::DropTail(Limit::Packets(10)));
        h.enqueue(1_000, 64);
        h.dequeue(5_500);
        let sojourn = h.events.iter().find_map(|(_, e)| if let QueueEvent::Dequeued { sojourn, .. } = e { Some(sojourn.nanos()) } else { None });
        assert_eq!(sojourn, Some(4_500));
    }
}
