//! CAKE (Common Applications Kept Enhanced) as Linux's sch_cake runs it:
//!   - tins: packets sorted by DSCP (tins.rs); with the shaper on, the highest tin still under
//!     its threshold rate goes first, else the one whose own schedule comes soonest; with it
//!     off, deficit round robin between tins by weight;
//!   - flows: per tin, 1024 queues in 8-way sets keyed by the flow hash (or by hosts, per the
//!     flow mode), each with COBALT (cobalt.rs); DRR++ serves new (sparse) flows before old
//!     ones, and a host's bulk flows share one flow's quantum (dual and triple isolation);
//!   - the buffer: over its limit, the fattest flow of any tin loses its head packet, and
//!     BLUE in that flow steps up;
//!   - the shaper: `bandwidth` paces departures by each packet's length on the wire below
//!     (overhead, mpu, ATM or PTM framing); 0 leaves the pace to the link;
//!   - the ACK filter (acks.rs): a TCP ACK joining a flow drops an older one it makes redundant.
//!
//! Its parameters and the shaper's count of a packet's length are in params.rs; a tin's flows,
//! lists and counters in flows.rs.
//!
//! Not modelled: ingress and autorate modes, NAT lookups, GSO splitting.

mod acks;
mod cobalt;
mod flows;
mod params;
mod tins;
mod ways;

pub use acks::AckFilter;
pub use cobalt::{CobaltParams, CobaltVars, Signal};
pub use flows::{TinReport, TinStats};
pub use params::{CakeParams, Framing};
pub use tins::{DiffservMode, FlowMode, TinShare};

use super::{DropReason, Limit, MarkReason, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use crate::wire;
use flows::{list_of, List, Set, Tin};
use ways::{claim_host, Placement, QUEUES};

/// The DSCP of frames that are not IP (ARP, mostly): network control, as Linux does.
const NON_IP_DSCP: u8 = 56;
/// The least buffer a shaped CAKE derives from its rate.
const DEFAULT_BUFFER_FLOOR_BYTES: u64 = 4 << 20;

pub struct Cake {
    p: CakeParams,
    seed: u64,
    tins: Vec<Tin>,
    /// Bytes the flows may hold (wire lengths; Linux counts socket buffers, a little more).
    buffer_limit: u64,
    /// The shaper's pace, ns per byte of adjusted length (0: unshaped), and its schedule.
    rate_bytes_per_s: u64,
    time_next: Instant,
    failsafe_next: Instant,
    cur_tin: usize,
    pkts: usize,
    bytes: usize,
    /// 65535 / n for n hosts' bulk flows: a flow's share of its quantum, in 1/65536.
    quantum_div: Vec<u32>,
}

impl Cake {
    pub fn new(limit: Limit, p: CakeParams, seed: u64) -> Self {
        let rate = p.bandwidth_bps / 8;
        let tins = p.diffserv.tins(rate).into_iter().map(|share| Tin::new(share, &p)).collect();
        let by_rate = match p.memory_limit_bytes {
            Some(m) => m,
            // In 128 bits: 400 Gbit/s over a 10 s interval passes 2^64 byte-nanoseconds.
            None if rate != 0 => u64::try_from(rate as u128 * p.interval.nanos() as u128 / 250_000_000).unwrap_or(u64::MAX).max(DEFAULT_BUFFER_FLOOR_BYTES),
            None => u64::MAX,
        };
        let by_limit = match limit {
            Limit::Packets(n) => (n as u64 * p.mtu_bytes as u64).max(p.memory_limit_bytes.unwrap_or(0)),
            Limit::Bytes(b) => b as u64,
        };
        let quantum_div = (0..=QUEUES as u32).map(|n| 65535u32.checked_div(n).unwrap_or(65535)).collect();
        Cake {
            buffer_limit: by_rate.min(by_limit),
            rate_bytes_per_s: rate,
            p,
            seed,
            tins,
            time_next: Instant::ZERO,
            failsafe_next: Instant::ZERO,
            cur_tin: 0,
            pkts: 0,
            bytes: 0,
            quantum_div,
        }
    }

    /// Each tin, in the order `tc -s qdisc` lists them.
    fn tin_reports(&self) -> Vec<TinReport> {
        self.p
            .diffserv
            .display_order()
            .iter()
            .map(|&i| {
                let t = &self.tins[i];
                let mut stats = t.stats.clone();
                stats.backlog_bytes = t.backlog as u64;
                stats.sparse_flows = t.sparse + t.decaying;
                stats.bulk_flows = t.bulk;
                TinReport {
                    name: t.share.name,
                    threshold_bps: t.share.rate_bytes_per_s * 8,
                    target: t.cobalt.target,
                    interval: t.cobalt.interval,
                    flow_quantum: t.flow_quantum,
                    stats,
                }
            })
            .collect()
    }

    /// The buffer limit in bytes, as derived from the rate, the limit and memory_limit.
    pub fn buffer_limit(&self) -> u64 {
        self.buffer_limit
    }

    /// The tin a frame goes to; `wash` clears its DSCP after the choice.
    fn classify_tin(&self, frame: &mut [u8]) -> usize {
        let dscp = wire::dscp(frame).unwrap_or(if wire::is_arp(frame) { NON_IP_DSCP } else { 0 });
        if self.p.wash {
            wire::clear_dscp(frame);
        }
        let tin = self.p.diffserv.tin_of(dscp);
        if tin < self.tins.len() {
            tin
        } else {
            0
        }
    }

    /// The flow queue of a frame within its tin: the set-associative lookup, with host slots
    /// claimed for the isolating modes.
    fn classify_flow(&mut self, tin: usize, frame: &[u8]) -> usize {
        let mode = self.p.flow_mode;
        if mode == FlowMode::Flowblind {
            return 0;
        }
        let (src, dst) = wire::host_hashes(frame, self.seed);
        let (src, dst) = ((src >> 32) as u32, (dst >> 32) as u32);
        let flow_hash = if mode.per_flow() {
            (wire::flow_hash(frame, self.seed) >> 32) as u32
        } else {
            (if mode.keys_sources() { src } else { 0 }) ^ (if mode.keys_destinations() { dst } else { 0 })
        };
        let t = &mut self.tins[tin];
        let (idx, placement) = ways::place(&t.tags, flow_hash, |k| t.flows[k].set != Set::None);
        let claim_hosts = match placement {
            Placement::Home => return idx,
            Placement::Hit { indirect } => {
                t.stats.way_indirect_hits += indirect as u64;
                t.flows[idx].set == Set::None
            }
            Placement::Miss => {
                t.stats.way_misses += 1;
                true
            }
            Placement::Collision => {
                // Its hosts change: a bulk flow there stops counting for the old ones.
                t.stats.way_collisions += 1;
                if t.flows[idx].set == Set::Bulk {
                    let (s, d) = (t.flows[idx].srchost as usize, t.flows[idx].dsthost as usize);
                    if mode.fair_sources() {
                        t.hosts[s].src_bulk = t.hosts[s].src_bulk.saturating_sub(1);
                    }
                    if mode.fair_destinations() {
                        t.hosts[d].dst_bulk = t.hosts[d].dst_bulk.saturating_sub(1);
                    }
                }
                true
            }
        };
        t.tags[idx] = flow_hash;
        if claim_hosts {
            let bulk = t.flows[idx].set == Set::Bulk;
            if mode.fair_sources() {
                let h = claim_host(&mut t.hosts, src, true);
                t.flows[idx].srchost = h as u16;
                if bulk {
                    t.hosts[h].src_bulk += 1;
                }
            }
            if mode.fair_destinations() {
                let h = claim_host(&mut t.hosts, dst, false);
                t.flows[idx].dsthost = h as u16;
                if bulk {
                    t.hosts[h].dst_bulk += 1;
                }
            }
        }
        idx
    }

    /// A flow's quantum for one round: its tin's flow quantum divided among its host's bulk
    /// flows (the busier of its two hosts, in triple isolation), dithered against rounding.
    fn flow_quantum(&self, tin: usize, idx: usize, rng: &mut Rng) -> i32 {
        let t = &self.tins[tin];
        let f = &t.flows[idx];
        let mode = self.p.flow_mode;
        let mut load = 1;
        if mode.fair_sources() {
            load = load.max(t.hosts[f.srchost as usize].src_bulk);
        }
        if mode.fair_destinations() {
            load = load.max(t.hosts[f.dsthost as usize].dst_bulk);
        }
        let div = self.quantum_div[(load as usize).min(QUEUES)] as u64;
        let dither = rng.next_u64() & 0xFFFF;
        ((t.flow_quantum as u64 * div + dither) >> 16) as i32
    }

    fn host_bulk(&mut self, tin: usize, idx: usize, up: bool) {
        let mode = self.p.flow_mode;
        let t = &mut self.tins[tin];
        let (s, d) = (t.flows[idx].srchost as usize, t.flows[idx].dsthost as usize);
        let step = |n: &mut u32| *n = if up { *n + 1 } else { n.saturating_sub(1) };
        if mode.fair_sources() {
            step(&mut t.hosts[s].src_bulk);
        }
        if mode.fair_destinations() {
            step(&mut t.hosts[d].dst_bulk);
        }
    }

    /// Drops the head of the fattest flow of any tin; BLUE steps up in it.
    fn drop_fattest(&mut self, now: Instant, out: &mut Verdicts) {
        let fattest = self
            .tins
            .iter()
            .enumerate()
            .flat_map(|(ti, t)| {
                t.new_flows.iter().chain(&t.old_flows).map(move |&fi| (t.flows[fi as usize].backlog, ti, fi as usize))
            })
            .max();
        let Some((backlog, ti, fi)) = fattest else { return };
        if backlog == 0 {
            return;
        }
        let t = &mut self.tins[ti];
        let f = &mut t.flows[fi];
        let pkt = f.q.pop_front().expect("a flow with a backlog has packets");
        f.backlog -= pkt.len();
        t.backlog -= pkt.len();
        if f.cobalt.queue_full(&t.cobalt, now) {
            t.stats.unresponsive_flows += 1;
        }
        t.stats.drops += 1;
        self.pkts -= 1;
        self.bytes -= pkt.len();
        out.drop(pkt, DropReason::CakeOverflow);
    }

    /// Charges `len` bytes (adjusted) to the shaper: the tin's schedule and the global one.
    fn advance_shaper(&mut self, tin: usize, len: u32, now: Instant) {
        if self.rate_bytes_per_s == 0 {
            return;
        }
        let t = &mut self.tins[tin];
        let tin_dur = Duration(len as u64 * 1_000_000_000 / t.share.rate_bytes_per_s.max(1));
        let global = len as u64 * 1_000_000_000 / self.rate_bytes_per_s;
        if t.time_next < now {
            t.time_next += tin_dur;
        } else if t.time_next < now + tin_dur {
            t.time_next = now + tin_dur;
        }
        self.time_next += Duration(global);
        self.failsafe_next += Duration(global + global / 2);
    }

    /// The tin to serve: by DRR weight when unshaped; shaped, the highest tin on schedule,
    /// else the one whose schedule comes first.
    fn choose_tin(&mut self, now: Instant) -> Option<usize> {
        let n = self.tins.len();
        if self.rate_bytes_per_s == 0 {
            let (mut wrapped, mut empty) = (false, true);
            loop {
                let t = &mut self.tins[self.cur_tin];
                if t.deficit >= 0 && t.has_flows() {
                    return Some(self.cur_tin);
                }
                if t.deficit <= 0 {
                    t.deficit += t.share.quantum as i32;
                }
                if t.has_flows() {
                    empty = false;
                }
                self.cur_tin += 1;
                if self.cur_tin >= n {
                    self.cur_tin = 0;
                    if wrapped && empty {
                        return None;
                    }
                    wrapped = true;
                }
            }
        }
        let mut best: Option<(usize, i128)> = None;
        for (i, t) in self.tins.iter().enumerate() {
            if t.has_flows() {
                let to_go = t.time_next.nanos() as i128 - now.nanos() as i128;
                if to_go <= 0 || best.map_or(true, |(_, b)| to_go <= b) {
                    best = Some((i, to_go));
                }
            }
        }
        let (tin, _) = best?;
        self.cur_tin = tin;
        Some(tin)
    }

    /// A flow found empty: it decays on the decaying list while COBALT remembers it, else it
    /// leaves the lists.
    fn retire(&mut self, tin: usize, idx: usize, from: List, now: Instant) {
        let t = &mut self.tins[tin];
        if t.flows[idx].cobalt.queue_empty(&t.cobalt, now) {
            t.stats.unresponsive_flows = t.stats.unresponsive_flows.saturating_sub(1);
        }
        list_of(t, from).pop_front();
        let was = t.flows[idx].set;
        match was {
            Set::Bulk => t.bulk -= 1,
            Set::Sparse | Set::SparseWait => t.sparse -= 1,
            Set::Decaying => t.decaying -= 1,
            Set::None => {}
        }
        if t.flows[idx].cobalt.active(now) {
            t.flows[idx].set = Set::Decaying;
            t.decaying += 1;
            t.decaying_flows.push_back(idx as u16);
        } else {
            t.flows[idx].set = Set::None;
        }
        if was == Set::Bulk {
            self.host_bulk(tin, idx, false);
        }
    }
}

/// The new average after one sample, weight 1/2^shift.
fn ewma(avg: Duration, sample: Duration, shift: u32) -> Duration {
    Duration(avg.nanos() - (avg.nanos() >> shift) + (sample.nanos() >> shift))
}

impl QueueDisc for Cake {
    fn enqueue(&mut self, now: Instant, mut pkt: Packet, rng: &mut Rng, out: &mut Verdicts) {
        let tin = self.classify_tin(&mut pkt.data);
        let idx = self.classify_flow(tin, &pkt.data);
        let len = pkt.len();
        // A shaper idle since the past starts from now, not from a debt it never ran up.
        if self.pkts == 0 && self.time_next < now {
            self.time_next = now;
            self.failsafe_next = now;
        }
        let t = &mut self.tins[tin];
        if t.backlog == 0 && t.time_next < now {
            t.time_next = now;
        }
        t.backlog += len;
        t.stats.packets += 1;
        t.stats.bytes += len as u64;
        t.stats.max_len = t.stats.max_len.max(len as u32);
        let f = &mut t.flows[idx];
        f.q.push_back(pkt);
        f.backlog += len;
        self.pkts += 1;
        self.bytes += len;
        if self.p.ack_filter != AckFilter::Off {
            let aggressive = self.p.ack_filter == AckFilter::Aggressive;
            if let Some(ack) = acks::redundant_ack(&f.q, aggressive).and_then(|i| f.q.remove(i)) {
                // Its place in the queue goes with it: the newest ACK says all it said.
                let gone = ack.len();
                f.backlog -= gone;
                t.backlog -= gone;
                self.pkts -= 1;
                self.bytes -= gone;
                t.stats.ack_drops += 1;
                out.drop(ack, DropReason::AckFilter);
            }
        }
        match f.set {
            Set::None | Set::Decaying => {
                if f.set == Set::Decaying {
                    // Off whichever list holds it: decaying, or old if its deficit ran out there.
                    t.decaying -= 1;
                    t.decaying_flows.retain(|&i| i as usize != idx);
                    t.old_flows.retain(|&i| i as usize != idx);
                }
                f.set = Set::Sparse;
                t.sparse += 1;
                t.new_flows.push_back(idx as u16);
                let q = self.flow_quantum(tin, idx, rng);
                self.tins[tin].flows[idx].deficit = q;
            }
            Set::SparseWait => {
                f.set = Set::Bulk;
                t.sparse -= 1;
                t.bulk += 1;
                self.host_bulk(tin, idx, true);
            }
            Set::Sparse | Set::Bulk => {}
        }
        while self.bytes as u64 > self.buffer_limit {
            self.drop_fattest(now, out);
        }
    }

    fn dequeue(&mut self, now: Instant, rng: &mut Rng, out: &mut Verdicts) -> Option<Packet> {
        if self.rate_bytes_per_s != 0 && self.time_next > now && self.failsafe_next > now {
            return None; // the shaper holds it: ready_at says when
        }
        let mut first = true; // decaying flows get the first look of each call
        'begin: loop {
            if self.pkts == 0 {
                return None;
            }
            let tin = self.choose_tin(now)?;
            loop {
                // Decaying flows get a look first, then new flows before old ones.
                let t = &mut self.tins[tin];
                let from = if first && !t.decaying_flows.is_empty() {
                    List::Decaying
                } else if !t.new_flows.is_empty() {
                    List::New
                } else if !t.old_flows.is_empty() {
                    List::Old
                } else if !t.decaying_flows.is_empty() {
                    List::Decaying
                } else {
                    continue 'begin;
                };
                first = false;
                let idx = *list_of(t, from).front().unwrap() as usize;
                if t.flows[idx].deficit <= 0 {
                    // Its quantum spent: a new flow with packets left becomes bulk.
                    let f = &mut t.flows[idx];
                    let mut became_bulk = false;
                    if f.set == Set::Sparse {
                        if f.q.is_empty() {
                            f.set = Set::SparseWait;
                        } else {
                            f.set = Set::Bulk;
                            t.sparse -= 1;
                            t.bulk += 1;
                            became_bulk = true;
                        }
                    }
                    list_of(t, from).pop_front();
                    t.old_flows.push_back(idx as u16);
                    if became_bulk {
                        self.host_bulk(tin, idx, true);
                    }
                    let q = self.flow_quantum(tin, idx, rng);
                    self.tins[tin].flows[idx].deficit += q;
                    continue;
                }
                loop {
                    let t = &mut self.tins[tin];
                    let f = &mut t.flows[idx];
                    let Some(mut pkt) = f.q.pop_front() else {
                        self.retire(tin, idx, from, now);
                        continue 'begin;
                    };
                    f.backlog -= pkt.len();
                    t.backlog -= pkt.len();
                    self.pkts -= 1;
                    self.bytes -= pkt.len();
                    let sojourn = now.saturating_since(pkt.enqueued_at);
                    let signal = f.cobalt.should_drop(&t.cobalt, now, sojourn, 0, rng);
                    // The last packet of a flow always goes: dropping it would tell no one.
                    let drop = match signal {
                        Signal::Pass => None,
                        _ if f.q.is_empty() => None,
                        Signal::Codel if out.try_mark(&mut pkt, MarkReason::Cobalt) => {
                            t.stats.marks += 1;
                            None
                        }
                        Signal::Codel => Some(DropReason::Cobalt),
                        Signal::Blue => Some(DropReason::Blue),
                    };
                    if let Some(reason) = drop {
                        out.drop(pkt, reason);
                        t.stats.drops += 1;
                        continue;
                    }
                    let s = &mut t.stats;
                    s.avg_delay = ewma(s.avg_delay, sojourn, 8);
                    s.peak_delay = ewma(s.peak_delay, sojourn, if sojourn > s.peak_delay { 2 } else { 8 });
                    s.base_delay = ewma(s.base_delay, sojourn, if sojourn < s.base_delay { 2 } else { 8 });
                    let len = self.p.adjusted_len(pkt.wire_len);
                    self.advance_shaper(tin, len, now);
                    let t = &mut self.tins[tin];
                    t.flows[idx].deficit -= len as i32;
                    t.deficit -= len as i32;
                    return Some(pkt);
                }
            }
        }
    }

    fn tins(&self) -> Vec<TinReport> {
        self.tin_reports()
    }
    fn ready_at(&self) -> Option<Instant> {
        (self.rate_bytes_per_s != 0 && self.pkts > 0).then(|| self.time_next.min(self.failsafe_next))
    }
    fn backlog_pkts(&self) -> usize {
        self.pkts
    }
    fn backlog_bytes(&self) -> usize {
        self.bytes
    }
    fn name(&self) -> &'static str {
        "cake"
    }
}

#[cfg(test)]
mod tests;
