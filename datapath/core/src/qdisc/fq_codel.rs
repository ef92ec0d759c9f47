//! FQ-CoDel (RFC 8290) as Linux's sch_fq_codel runs it: packets hashed into flow queues,
//! deficit round robin with a quantum over a list of new flows (served first) and a list of
//! old ones, CoDel per flow, and on overflow a batch dropped from the head of the fattest flow.

use std::collections::VecDeque;

use super::codel::{codel_dequeue, CodelParams, CodelVars};
use super::{DropReason, Limit, Packet, QueueDisc, Verdicts};
use crate::rng::Rng;
use crate::time::Instant;
use crate::wire::flow_hash;

/// FQ-CoDel's parameters. Defaults are Linux's sch_fq_codel (RFC 8290 recommends the same).
/// The packet limit (10240 by default) is the queue's `Limit`.
#[derive(Clone, Debug, PartialEq)]
pub struct FqCodelParams {
    /// Flow queues packets are hashed into. Default 1024.
    pub flows: u32,
    /// Bytes a flow may send per round of deficit round robin. Default 1514 (one MTU frame).
    pub quantum_bytes: u32,
    /// Bytes of frames queued in all flows before overflow drops start. Default 32 MiB.
    /// (Linux counts socket-buffer sizes here, a little more than frame bytes.)
    pub memory_limit_bytes: u64,
    /// Most packets dropped from the fattest flow at one overflow. Default 64.
    pub drop_batch: u32,
    /// CoDel per flow; ECN on by default (sch_fq_codel).
    pub codel: CodelParams,
}

impl Default for FqCodelParams {
    fn default() -> Self {
        FqCodelParams {
            flows: 1024,
            quantum_bytes: 1514,
            memory_limit_bytes: 32 << 20,
            drop_batch: 64,
            codel: CodelParams { ecn: true, ..CodelParams::default() },
        }
    }
}

impl FqCodelParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=65536).contains(&self.flows) {
            return Err(format!("flows: {} is not from 1 to 65536", self.flows));
        }
        if self.quantum_bytes == 0 {
            return Err("quantum: must be positive".into());
        }
        if self.memory_limit_bytes == 0 {
            return Err("memory_limit: must be positive".into());
        }
        if self.drop_batch == 0 {
            return Err("drop_batch: must be positive".into());
        }
        self.codel.validate()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum List {
    None,
    New,
    Old,
}

struct Flow {
    q: VecDeque<Packet>,
    bytes: usize,
    deficit: i64,
    list: List,
    codel: CodelVars,
}

pub struct FqCodel {
    limit: Limit,
    p: FqCodelParams,
    seed: u64,
    flows: Vec<Flow>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    pkts: usize,
    bytes: usize,
}

impl FqCodel {
    pub fn new(limit: Limit, p: FqCodelParams, seed: u64) -> Self {
        let flows = (0..p.flows)
            .map(|_| Flow { q: VecDeque::new(), bytes: 0, deficit: 0, list: List::None, codel: CodelVars::default() })
            .collect();
        FqCodel { limit, p, seed, flows, new_flows: VecDeque::new(), old_flows: VecDeque::new(), pkts: 0, bytes: 0 }
    }

    /// The flow queue a frame lands in: its flow hash scaled onto the flows.
    pub fn bucket_of(&self, frame: &[u8]) -> u32 {
        ((flow_hash(frame, self.seed) >> 32) * self.p.flows as u64 >> 32) as u32
    }

    fn pop_list(&mut self, from_new: bool) {
        if from_new {
            self.new_flows.pop_front();
        } else {
            self.old_flows.pop_front();
        }
    }
    /// The flow's deficit and list, for tests and introspection.
    pub fn flow_state(&self, idx: u32) -> (i64, &'static str, usize) {
        let f = &self.flows[idx as usize];
        let list = match f.list {
            List::None => "none",
            List::New => "new",
            List::Old => "old",
        };
        (f.deficit, list, f.q.len())
    }

    fn over_limit(&self) -> bool {
        let over_count = match self.limit {
            Limit::Packets(n) => self.pkts > n,
            Limit::Bytes(b) => self.bytes > b,
        };
        over_count || self.bytes as u64 > self.p.memory_limit_bytes
    }

    /// Drops from the head of the flow with the largest backlog until half of that backlog
    /// is gone or `drop_batch` packets are: one costly scan per batch, not per packet.
    fn drop_from_fattest(&mut self, out: &mut Verdicts) {
        let Some((fat, _)) = self.flows.iter().enumerate().max_by_key(|(i, f)| (f.bytes, std::cmp::Reverse(*i))) else { return };
        let flow = &mut self.flows[fat];
        let threshold = flow.bytes / 2;
        let (mut dropped_bytes, mut dropped) = (0usize, 0u32);
        while let Some(pkt) = flow.q.pop_front() {
            dropped_bytes += pkt.len();
            dropped += 1;
            flow.bytes -= pkt.len();
            self.bytes -= pkt.len();
            self.pkts -= 1;
            out.drop(pkt, DropReason::FqOverflow);
            if dropped >= self.p.drop_batch || dropped_bytes >= threshold {
                break;
            }
        }
    }
}

impl QueueDisc for FqCodel {
    fn enqueue(&mut self, _now: Instant, pkt: Packet, _rng: &mut Rng, out: &mut Verdicts) {
        let idx = self.bucket_of(&pkt.data);
        let flow = &mut self.flows[idx as usize];
        flow.bytes += pkt.len();
        self.bytes += pkt.len();
        self.pkts += 1;
        flow.q.push_back(pkt);
        if flow.list == List::None {
            // A flow with nothing queued starts on the new list, with a full quantum.
            flow.list = List::New;
            flow.deficit = self.p.quantum_bytes as i64;
            self.new_flows.push_back(idx);
        }
        if self.over_limit() {
            self.drop_from_fattest(out);
            // A byte limit (bloatlab's: Linux's counts packets, which one batch always brings
            // back) holds whatever the batch: one batch of small packets may free less than a
            // large arrival takes, and the queue would creep past its limit arrival by arrival.
            while matches!(self.limit, Limit::Bytes(b) if self.bytes > b) {
                self.drop_from_fattest(out);
            }
        }
    }

    fn dequeue(&mut self, now: Instant, _rng: &mut Rng, out: &mut Verdicts) -> Option<Packet> {
        loop {
            let (from_new, idx) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return None,
            };
            let FqCodel { p, flows, bytes, pkts, .. } = self;
            let flow = &mut flows[idx as usize];
            if flow.deficit <= 0 {
                // Used up its quantum: top it up and send it to the back of the old list.
                flow.deficit += p.quantum_bytes as i64;
                flow.list = List::Old;
                self.pop_list(from_new);
                self.old_flows.push_back(idx);
                continue;
            }
            let Flow { q, bytes: flow_bytes, codel, deficit, .. } = flow;
            // CoDel's "at most one MTU left" test looks at the whole qdisc's backlog, as in Linux.
            let mut pop = || {
                let pkt = q.pop_front()?;
                *flow_bytes -= pkt.len();
                *bytes -= pkt.len();
                *pkts -= 1;
                Some((pkt, *bytes))
            };
            if let Some(pkt) = codel_dequeue(codel, &p.codel, now, &mut pop, out) {
                *deficit -= pkt.len() as i64;
                return Some(pkt);
            }
            // Empty. A new flow takes one pass through the old list before it may count as
            // new again, so a flow cannot stay ahead of the old ones by pulsing.
            self.pop_list(from_new);
            if from_new && !self.old_flows.is_empty() {
                self.flows[idx as usize].list = List::Old;
                self.old_flows.push_back(idx);
            } else {
                self.flows[idx as usize].list = List::None;
            }
        }
    }

    fn backlog_pkts(&self) -> usize {
        self.pkts
    }
    fn backlog_bytes(&self) -> usize {
        self.bytes
    }
    fn name(&self) -> &'static str {
        "fq_codel"
    }
}


#[cfg(test)]
mod tests;
