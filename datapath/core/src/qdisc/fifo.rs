//! First-in first-out disciplines: Linux's pfifo/bfifo (tail drop) and pfifo_head_drop.

use std::collections::VecDeque;

use super::{DropReason, Dropped, Packet, QueueDisc};
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
    fn fits(&self, len: usize) -> bool {
        match self.limit {
            Limit::Packets(n) => self.q.len() < n,
            Limit::Bytes(b) => self.bytes + len <= b,
        }
    }
    fn pop(&mut self) -> Option<Packet> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len();
        Some(p)
    }
}

impl QueueDisc for Fifo {
    fn enqueue(&mut self, _now: Instant, pkt: Packet, drops: &mut Vec<Dropped>) {
        // A frame larger than a whole byte limit never fits: refuse it rather than empty the queue.
        let hopeless = matches!(self.limit, Limit::Bytes(b) if pkt.len() > b);
        if self.overflow == Overflow::Head && !hopeless {
            while !self.fits(pkt.len()) {
                let old = self.pop().expect("an empty queue fits any frame within the limit");
                drops.push(Dropped { packet: old, reason: DropReason::HeadDrop });
            }
        }
        if self.fits(pkt.len()) {
            self.bytes += pkt.len();
            self.q.push_back(pkt);
        } else {
            drops.push(Dropped { packet: pkt, reason: DropReason::QueueFull });
        }
    }
    fn dequeue(&mut self, _now: Instant, _drops: &mut Vec<Dropped>) -> Option<Packet> {
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
    use super::super::{Queue, QueueConfig, QueueEvent};
    use super::*;

    fn pkt(id: u64, len: usize) -> Packet {
        Packet::new(id, vec![0; len])
    }

    fn run(cfg: QueueConfig, sizes: &[usize]) -> (Queue, Vec<(u64, DropReason)>) {
        let mut q = Queue::new(cfg.build());
        let mut dropped = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let mut ev = |e: QueueEvent, _: &_| {
                if let QueueEvent::Dropped { reason, .. } = e {
                    dropped.push((i as u64, reason));
                }
            };
            q.enqueue(Instant(i as u64), pkt(i as u64, len), &mut ev);
        }
        (q, dropped)
    }

    #[test]
    fn droptail_packets_refuses_the_arrival() {
        let (mut q, dropped) = run(QueueConfig::DropTail(Limit::Packets(3)), &[100; 5]);
        assert_eq!(dropped, vec![(3, DropReason::QueueFull), (4, DropReason::QueueFull)]);
        let ids: Vec<u64> = std::iter::from_fn(|| q.dequeue(Instant(10), &mut |_, _| {})).map(|p| p.id).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        let s = q.stats();
        assert_eq!((s.arrived, s.enqueued, s.dropped_at_enqueue, s.dequeued), (5, 3, 2, 3));
        assert_eq!(s.max_backlog_pkts, 3);
        assert_eq!(s.drops.get(DropReason::QueueFull), 2);
    }

    #[test]
    fn droptail_bytes_counts_frame_bytes() {
        // bfifo semantics: 1514 + 1000 + 486 fill 3000 bytes exactly; one more byte does not fit.
        let (q, dropped) = run(QueueConfig::DropTail(Limit::Bytes(3000)), &[1514, 1000, 486, 1]);
        assert_eq!(q.stats().backlog_bytes, 3000);
        assert_eq!(dropped, vec![(3, DropReason::QueueFull)]);
    }

    #[test]
    fn drophead_keeps_the_newest() {
        let (mut q, dropped) = run(QueueConfig::DropHead(Limit::Packets(2)), &[100; 4]);
        assert_eq!(dropped, vec![(2, DropReason::HeadDrop), (3, DropReason::HeadDrop)]);
        let ids: Vec<u64> = std::iter::from_fn(|| q.dequeue(Instant(10), &mut |_, _| {})).map(|p| p.id).collect();
        assert_eq!(ids, vec![2, 3]);
        let s = q.stats();
        assert_eq!((s.enqueued, s.dropped_in_queue, s.dropped_at_enqueue), (4, 2, 0));
    }

    #[test]
    fn drophead_bytes_drops_until_it_fits() {
        let (q, _) = run(QueueConfig::DropHead(Limit::Bytes(2000)), &[800, 800, 1500]);
        // 1500 needs 1500 free: both 800s go.
        assert_eq!((q.stats().backlog_pkts, q.stats().backlog_bytes), (1, 1500));
        let (q, dropped) = run(QueueConfig::DropHead(Limit::Bytes(1000)), &[500, 1200]);
        assert_eq!(dropped, vec![(1, DropReason::QueueFull)]);
        assert_eq!(q.stats().backlog_bytes, 500);
    }

    #[test]
    fn sojourn_is_measured_from_enqueue() {
        let mut q = Queue::new(QueueConfig::DropTail(Limit::Packets(10)).build());
        q.enqueue(Instant(1_000), pkt(0, 64), &mut |_, _| {});
        let mut sojourn = None;
        q.dequeue(Instant(5_500), &mut |e, _| {
            if let QueueEvent::Dequeued { sojourn: s } = e {
                sojourn = Some(s.nanos())
            }
        });
        assert_eq!(sojourn, Some(4_500));
    }
}
