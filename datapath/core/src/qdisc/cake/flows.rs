//! A tin's flows: each flow's queue, its set in DRR++ (sparse, bulk, decaying) and its COBALT
//! state; the tin's new, old and decaying lists; and the counters a tin reports.

use std::collections::VecDeque;

use super::ways::{Host, QUEUES};
use super::{CakeParams, CobaltParams, CobaltVars, TinShare};
use crate::qdisc::Packet;
use crate::time::{Duration, Instant};

/// Which list a flow is on, and how it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Set {
    None,
    /// New: on the new list with its first quantum.
    Sparse,
    /// Emptied within its first quantum: counted sparse, served among the old.
    SparseWait,
    Bulk,
    /// Empty, its COBALT state still decaying.
    Decaying,
}

pub(super) struct Flow {
    pub(super) q: VecDeque<Packet>,
    pub(super) backlog: usize,
    pub(super) deficit: i32,
    pub(super) set: Set,
    pub(super) cobalt: CobaltVars,
    pub(super) srchost: u16,
    pub(super) dsthost: u16,
}

/// One tin's counters, as `tc -s qdisc` shows them for cake.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TinStats {
    /// Packets and bytes that arrived (counted at enqueue, as Linux does).
    pub packets: u64,
    pub bytes: u64,
    pub backlog_bytes: u64,
    /// Dropped by COBALT or to make room.
    pub drops: u64,
    /// Dropped by the ACK filter (not among `drops`, as Linux counts them).
    pub ack_drops: u64,
    pub marks: u64,
    /// Found in their set but not at their own slot; took a free way; shared a taken one.
    pub way_indirect_hits: u64,
    pub way_misses: u64,
    pub way_collisions: u64,
    /// Sojourn times: peak (fast up, slow down), average, base (fast down, slow up).
    pub peak_delay: Duration,
    pub avg_delay: Duration,
    pub base_delay: Duration,
    pub sparse_flows: u32,
    pub bulk_flows: u32,
    pub unresponsive_flows: u32,
    pub max_len: u32,
}

/// What a tin reports: its name, threshold, quantum and COBALT parameters, and counters.
#[derive(Clone, Debug, PartialEq)]
pub struct TinReport {
    pub name: &'static str,
    pub threshold_bps: u64,
    pub target: Duration,
    pub interval: Duration,
    pub flow_quantum: u32,
    pub stats: TinStats,
}

pub(super) struct Tin {
    pub(super) share: TinShare,
    pub(super) flows: Vec<Flow>,
    pub(super) tags: Vec<u32>,
    pub(super) hosts: Vec<Host>,
    pub(super) new_flows: VecDeque<u16>,
    pub(super) old_flows: VecDeque<u16>,
    pub(super) decaying_flows: VecDeque<u16>,
    pub(super) cobalt: CobaltParams,
    pub(super) flow_quantum: u32,
    /// The tin's own schedule at its threshold rate (shaped), and its DRR deficit (unshaped).
    pub(super) time_next: Instant,
    pub(super) deficit: i32,
    pub(super) sparse: u32,
    pub(super) bulk: u32,
    pub(super) decaying: u32,
    pub(super) backlog: usize,
    pub(super) stats: TinStats,
}

impl Tin {
    pub(super) fn new(share: TinShare, p: &CakeParams) -> Self {
        let rate = share.rate_bytes_per_s;
        let flow_quantum = if rate == 0 { 1514 } else { (rate >> 12).clamp(300, 1514) as u32 };
        let flows = (0..QUEUES)
            .map(|_| Flow { q: VecDeque::new(), backlog: 0, deficit: 0, set: Set::None, cobalt: CobaltVars::default(), srchost: 0, dsthost: 0 })
            .collect();
        Tin {
            cobalt: CobaltParams::for_rate(p.target, p.interval, p.mtu_bytes, rate),
            share,
            flows,
            tags: vec![0; QUEUES],
            hosts: vec![Host::default(); QUEUES],
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            decaying_flows: VecDeque::new(),
            flow_quantum,
            time_next: Instant::ZERO,
            deficit: 0,
            sparse: 0,
            bulk: 0,
            decaying: 0,
            backlog: 0,
            stats: TinStats::default(),
        }
    }
    pub(super) fn has_flows(&self) -> bool {
        self.sparse + self.bulk > 0
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum List {
    New,
    Old,
    Decaying,
}

pub(super) fn list_of(t: &mut Tin, l: List) -> &mut VecDeque<u16> {
    match l {
        List::New => &mut t.new_flows,
        List::Old => &mut t.old_flows,
        List::Decaying => &mut t.decaying_flows,
    }
}
