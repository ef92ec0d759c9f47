//! Counters a link direction reports.

use crate::qdisc::{DropReason, MarkReason};

/// Drops counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts([u64; DropReason::COUNT]);

impl DropCounts {
    pub fn add(&mut self, r: DropReason) {
        self.0[r.index()] += 1;
    }
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r.index()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// (name, count) for every reason, in code order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL.iter().map(move |&r| (r.name(), self.get(r)))
    }
}

/// CE marks counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MarkCounts([u64; MarkReason::COUNT]);

impl MarkCounts {
    pub fn add(&mut self, r: MarkReason) {
        self.0[r.index()] += 1;
    }
    pub fn get(&self, r: MarkReason) -> u64 {
        self.0[r.index()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// (name, count) for every reason, in code order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        MarkReason::ALL.iter().map(move |&r| (r.name(), self.get(r)))
    }
}

/// A link direction's counters beyond the queue's own.
#[derive(Clone, Debug, Default)]
pub struct DirectionStats {
    pub arrivals: u64,
    pub bytes_in: u64,
    pub departures: u64,
    pub bytes_out: u64,
    /// Drops before the queue (loss, oversize, runt); the queue's drops are in QueueStats.
    pub drops: DropCounts,
}
