//! Property tests: every discipline, driven by random arrivals and dequeues from many seeds,
//! keeps the accounting identities (the `Queue` wrapper asserts them after every operation),
//! gives every packet exactly one fate, and never reorders a flow (within its queue, for
//! DualPI2, which sends a flow's L4S and classic packets down two queues).

use std::collections::HashMap;

use super::testkit::{Harness, MS, US};
use super::{CakeParams, CodelParams, DualPi2Params, EcnMask, FlowMode, FqCodelParams, Limit, PieParams, QueueConfig, QueueEvent, RedParams};
use crate::rng::Rng;
use crate::wire::Ecn;

fn configs() -> Vec<QueueConfig> {
    let small_red = RedParams { min: Some(5), max: Some(15), probability: 0.2, ..Default::default() };
    vec![
        QueueConfig::DropTail(Limit::Packets(50)),
        QueueConfig::DropTail(Limit::Bytes(40_000)),
        QueueConfig::DropHead(Limit::Packets(50)),
        QueueConfig::DropHead(Limit::Bytes(40_000)),
        QueueConfig::Codel(Limit::Packets(200), CodelParams { target: MS_5, interval: MS_50, ..Default::default() }),
        QueueConfig::Codel(Limit::Bytes(100_000), CodelParams { ecn: true, ..Default::default() }),
        QueueConfig::FqCodel(Limit::Packets(100), FqCodelParams { flows: 8, drop_batch: 4, ..Default::default() }),
        QueueConfig::FqCodel(Limit::Bytes(60_000), FqCodelParams { flows: 64, memory_limit_bytes: 50_000, ..Default::default() }),
        QueueConfig::Red(Limit::Packets(60), small_red.clone()),
        QueueConfig::Red(Limit::Packets(60), RedParams { gentle: true, adaptive: true, ecn: true, ..small_red.clone() }),
        QueueConfig::Red(Limit::Bytes(90_000), RedParams { min: Some(10_000), max: Some(30_000), ecn: true, harddrop: true, ..Default::default() }),
        QueueConfig::Pie(Limit::Packets(100), PieParams { max_burst: crate::time::Duration::ZERO, ..Default::default() }),
        QueueConfig::Pie(Limit::Bytes(80_000), PieParams { ecn: true, bytemode: true, dq_rate_estimator: true, ..Default::default() }),
        QueueConfig::Cake(Limit::Packets(60), CakeParams { memory_limit_bytes: Some(50_000), ..Default::default() }),
        QueueConfig::Cake(Limit::Bytes(40_000), CakeParams { flow_mode: FlowMode::Flowblind, target: MS_5, interval: MS_50, ..Default::default() }),
        QueueConfig::DualPi2(Limit::Packets(60), DualPi2Params { target: MS_5, tupdate: MS_5, ..Default::default() }),
        QueueConfig::DualPi2(
            Limit::Bytes(60_000),
            DualPi2Params { drop_early: true, drop_on_overload: false, ecn_mask: EcnMask::AnyEct, memory_limit_bytes: Some(50_000), step_packets: Some(3), ..Default::default() },
        ),
        QueueConfig::DualPi2(Limit::Packets(100), DualPi2Params { alpha: 5.0, beta: 50.0, classic_protection_percent: 50, min_qlen_step: 2, ..Default::default() }),
    ]
}

const MS_5: crate::time::Duration = crate::time::Duration(5 * MS);
const MS_50: crate::time::Duration = crate::time::Duration(50 * MS);

#[test]
fn every_packet_has_one_fate_and_flows_keep_their_order() {
    for cfg in configs() {
        for seed in 0..20u64 {
            let mut h = Harness::new(cfg.clone());
            let mut r = Rng::new(seed * 7919 + 1);
            let mut t = 0u64;
            let mut offered = 0u64;
            let mut out = Vec::new();
            // Which of DualPI2's queues each packet went to (0 for other disciplines).
            let mut lane = HashMap::new();
            for _ in 0..3000 {
                // Bursty arrivals against a server that sometimes stalls: the queue fills and drains.
                t += r.below_incl(800) * US / 4;
                if r.chance(0.6) {
                    let flow = r.below_incl(5) as u32;
                    let len = [64u32, 576, 1500, 1514][r.below_incl(3) as usize];
                    let ecn = [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce][r.below_incl(3) as usize];
                    let p = h.packet(flow, ecn, len);
                    if let QueueConfig::DualPi2(_, dp) = &cfg {
                        lane.insert(p.id, dp.ecn_mask.to_l(ecn));
                    }
                    h.offer(t, p);
                    offered += 1;
                }
                if r.chance(0.45) {
                    if let Some(p) = h.dequeue(t) {
                        out.push((p.tag, p.id));
                    }
                }
            }
            out.extend(std::iter::from_fn(|| h.dequeue(t + 10_000 * MS)).map(|p| (p.tag, p.id)));
            let dropped = h.drops().len() as u64;
            assert_eq!(out.len() as u64 + dropped, offered, "{cfg:?} seed {seed}: one fate each");
            let mut seen: HashMap<u64, usize> = HashMap::new();
            for (_, e) in &h.events {
                if let QueueEvent::Dropped(p, _) | QueueEvent::Dequeued { packet: p, .. } = e {
                    *seen.entry(p.id).or_default() += 1;
                }
            }
            assert!(seen.values().all(|&n| n == 1), "{cfg:?} seed {seed}: a packet with two fates");
            let mut last: HashMap<(u32, bool), u64> = HashMap::new();
            for (flow, id) in out {
                let prev = last.insert((flow, lane.get(&id).copied().unwrap_or(false)), id);
                assert!(prev.map_or(true, |p| p < id), "{cfg:?} seed {seed}: flow {flow} reordered");
            }
            let s = h.q.stats();
            assert_eq!((s.backlog_pkts, s.backlog_bytes), (0, 0));
            assert_eq!(s.arrived, s.dequeued + s.dropped_at_enqueue + s.dropped_in_queue);
            assert_eq!(s.drops.total(), s.dropped_at_enqueue + s.dropped_in_queue);
            // The log and the counters agree on marks.
            assert!(h.marks().len() as u64 == s.marks.total());
        }
    }
}

#[test]
fn marks_land_only_on_ecn_capable_packets() {
    let cfg = QueueConfig::Red(Limit::Packets(60), RedParams { min: Some(5), max: Some(15), probability: 1.0, ecn: true, ..Default::default() });
    let mut h = Harness::new(cfg);
    let mut ect = std::collections::HashSet::new();
    for k in 0..500u64 {
        let ecn = if k % 3 == 0 { Ecn::NotEct } else { Ecn::Ect0 };
        let p = h.packet(0, ecn, 1000);
        if ecn != Ecn::NotEct {
            ect.insert(p.id);
        }
        h.offer(k * US, p);
        if k % 2 == 0 {
            h.dequeue(k * US);
        }
    }
    assert!(!h.marks().is_empty());
    assert!(h.marks().iter().all(|m| ect.contains(&m.1)));
}
