//! Counters a link direction reports.

use std::marker::PhantomData;

use crate::reason::{DropReason, MarkReason, Reason};

const MAX_REASONS: usize = 16;
const _: () = assert!(DropReason::COUNT <= MAX_REASONS && MarkReason::COUNT <= MAX_REASONS);

/// Events counted per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts<R> {
    n: [u64; MAX_REASONS],
    _reason: PhantomData<R>,
}

pub type DropCounts = Counts<DropReason>;
pub type MarkCounts = Counts<MarkReason>;

impl<R> Default for Counts<R> {
    fn default() -> Self {
        Counts { n: [0; MAX_REASONS], _reason: PhantomData }
    }
}

impl<R: Reason> Counts<R> {
    pub fn add(&mut self, r: R) {
        self.n[r.index()] += 1;
    }
    pub fn get(&self, r: R) -> u64 {
        self.n[r.index()]
    }
    pub fn total(&self) -> u64 {
        self.n.iter().sum()
    }
    /// (name, count) for every reason, in code order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        R::ALL.iter().map(move |&r| (r.name(), self.get(r)))
    }
}

/// A link direction's counters beyond the queue's own.
#[derive(Clone, Debug)]
pub struct DirectionStats {
    pub arrivals: u64,
    pub bytes_in: u64,
    pub departures: u64,
    pub bytes_out: u64,
    /// Drops before the queue (loss, oversize, runt); the queue's drops are in QueueStats.
    pub drops: DropCounts,
    /// Departures per DSCP (index: the codepoint), so a test can see marks reach the wire;
    /// frames that are not IP are not counted here.
    pub departures_by_dscp: [u64; 64],
    /// Departures per ECN codepoint (index: its two bits, wire::Ecn), IP frames only: the mix
    /// the next hop sees, CE marks included.
    pub departures_by_ecn: [u64; 4],
    /// Arrivals turned from ECT(0) into ECT(1) (the direction's `ect1_rewrite`).
    pub ect1_rewritten: u64,
}

impl Default for DirectionStats {
    fn default() -> Self {
        DirectionStats {
            arrivals: 0,
            bytes_in: 0,
            departures: 0,
            bytes_out: 0,
            drops: DropCounts::default(),
            departures_by_dscp: [0; 64],
            departures_by_ecn: [0; 4],
            ect1_rewritten: 0,
        }
    }
}
