//! Fuzz target `disciplines`: every queue discipline of the catalogue (droptail, drophead,
//! codel, fq_codel, red, pie, cake, dualpi2) with arbitrary parameters within the catalogue's
//! bounds (src/bloatlab/specs/disciplines.py), resolved by bloatlab-config as the datapath
//! resolves them, under arbitrary sequences of enqueues and dequeues: frame sizes from 1 byte to
//! jumbo and beyond, times that never go back but may stand still or leap, and frames of any
//! ECN, DSCP and flow; and the pipeline of a link direction (rate, trace, delay, jitter, loss)
//! under arbitrary arrivals and polls.
//!
//! The queue wrapper (qdisc/mod.rs) asserts its accounting identities after every operation;
//! here besides: every packet has exactly one fate, bytes balance too, marks land only on
//! ECN-capable packets, a flow keeps its order, the backlog stays within the limit, and a drain
//! empties the queue. The pipeline keeps arrivals = departures + drops + backlog + in flight,
//! departs in order and never early, and drains.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bloatlab_config::QueueJson;
use bloatlab_core::pipeline::{Departure, DirectionConfig, Ipv4Pair, Pipeline};
use bloatlab_core::qdisc::{Cake, DualPi2, Limit, Packet, Queue, QueueConfig, QueueEvent};
use bloatlab_core::rate::{Rate, Trace};
use bloatlab_core::rng::Rng;
use bloatlab_core::wire::{ecn, Ecn};
use bloatlab_core::{Duration, Instant};
use bloatlab_fuzz::corpus::{self, Tcp};
use common::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

const MS: u64 = 1_000_000;
/// The catalogue's bounds: durations up to 10 s, sizes up to 1 GiB, queues up to a million packets.
const MAX_DURATION_NS: u64 = 10_000_000_000;
const MAX_BYTES: u64 = 1 << 30;
const MAX_PACKETS: u64 = 1_000_000;
const MAX_RATE_BPS: u64 = 400_000_000_000;

/// A duration within the catalogue's bounds: mostly what specs use, sometimes the extremes.
fn duration() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 100_000..200 * MS,
        1 => 1..100_000u64,
        1 => 200 * MS..=MAX_DURATION_NS,
        1 => prop_oneof![Just(1u64), Just(MAX_DURATION_NS)],
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 1514..200_000u64, 1 => 1..1514u64, 1 => 200_000..=MAX_BYTES]
}

fn rate() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1_000_000..1_000_000_000u64, 1 => 10_000..1_000_000u64, 1 => 1_000_000_000..=MAX_RATE_BPS]
}

fn ratio() -> impl Strategy<Value = f64> {
    prop_oneof![4 => 0.0..10.0f64, 1 => Just(0.0), 1 => 10.0..1000.0f64]
}

fn probability() -> impl Strategy<Value = f64> {
    prop_oneof![4 => 0.0..=1.0f64, 1 => Just(1.0), 1 => Just(0.0)]
}

fn choice(names: &'static [&'static str]) -> impl Strategy<Value = Value> {
    proptest::sample::select(names).prop_map(Value::from)
}

/// A queue's limit: packets or bytes, small ones often (that is where queues overflow).
fn limit() -> impl Strategy<Value = (Option<u64>, Option<u64>)> {
    prop_oneof![
        3 => prop_oneof![4 => 1..64u64, 2 => 64..2000u64, 1 => 2000..=MAX_PACKETS].prop_map(|n| (Some(n), None)),
        2 => prop_oneof![4 => 1514..100_000u64, 1 => 1..1514u64, 1 => 100_000..=MAX_BYTES].prop_map(|b| (None, Some(b))),
    ]
}

/// A queue object as the config gives it, every parameter within the catalogue's bounds (or
/// left out: null, the default). `link_bps` is the direction's rate.
fn queue_json() -> impl Strategy<Value = Value> {
    let opt = |s: BoxedStrategy<Value>| proptest::option::weighted(0.8, s).prop_map(|v| v.unwrap_or(Value::Null));
    let dur = || opt(duration().prop_map(Value::from).boxed());
    let boolean = || opt(any::<bool>().prop_map(Value::from).boxed());
    let codel = (dur(), dur(), boolean(), boolean())
        .prop_map(|(t, i, e, c)| json!({"discipline": "codel", "target_ns": t, "interval_ns": i, "ecn": e, "coarse_time": c}));
    let fq_codel = (
        (dur(), dur(), boolean(), boolean()),
        opt(prop_oneof![1..64u64, 1..=65536u64].prop_map(Value::from).boxed()),
        opt(size().prop_map(Value::from).boxed()),
        opt(size().prop_map(Value::from).boxed()),
        opt((1..=1024u64).prop_map(Value::from).boxed()),
    )
        .prop_map(|((t, i, e, c), flows, quantum, memory, batch)| {
            json!({"discipline": "fq_codel", "target_ns": t, "interval_ns": i, "ecn": e, "coarse_time": c, "flows": flows, "quantum_bytes": quantum,
                   "memory_limit_bytes": memory, "drop_batch": batch})
        });
    // RED's thresholds count what the limit counts: drawn as shares of it, resolved below.
    let red = (
        proptest::option::of((0.0..1.0f64, 0.0..1.0f64)),
        opt(size().prop_map(Value::from).boxed()),
        opt(prop_oneof![1..200u64, 1..=MAX_PACKETS].prop_map(Value::from).boxed()),
        opt(probability().prop_filter("above 0", |p| *p > 0.0).prop_map(Value::from).boxed()),
        opt(rate().prop_map(Value::from).boxed()),
        (boolean(), boolean(), boolean(), boolean(), boolean()),
    )
        .prop_map(|(shares, avpkt, burst, p, bw, (ecn, harddrop, adaptive, gentle, ns3))| {
            json!({"discipline": "red", "min_share": shares.map(|s| s.0), "max_share": shares.map(|s| s.1), "avpkt_bytes": avpkt, "burst_pkts": burst,
                   "probability": p, "bandwidth_bps": bw, "ecn": ecn, "harddrop": harddrop, "adaptive": adaptive, "gentle": gentle, "ns3": ns3})
        });
    let pie = (
        (dur(), dur(), opt(ratio().prop_map(Value::from).boxed()), opt(ratio().prop_map(Value::from).boxed())),
        opt(prop_oneof![Just(0u64), duration()].prop_map(Value::from).boxed()),
        opt(probability().prop_map(Value::from).boxed()),
        (boolean(), boolean(), boolean(), boolean()),
    )
        .prop_map(|((t, u, a, b), burst, ecn_prob, (ecn, bytemode, dq, ns3))| {
            json!({"discipline": "pie", "target_ns": t, "tupdate_ns": u, "alpha": a, "beta": b, "max_burst_ns": burst, "ecn": ecn, "ecn_prob": ecn_prob,
                   "bytemode": bytemode, "dq_rate_estimator": dq, "ns3": ns3})
        });
    let cake = (
        opt(prop_oneof![Just(0u64), rate()].prop_map(Value::from).boxed()),
        opt(choice(&["besteffort", "precedence", "diffserv8", "diffserv4", "diffserv3"]).boxed()),
        opt(choice(&["flowblind", "srchost", "dsthost", "hosts", "flows", "dual-srchost", "dual-dsthost", "triple-isolate"]).boxed()),
        (dur(), dur()),
        opt((-64..=256i64).prop_map(Value::from).boxed()),
        opt((0..=256u64).prop_map(Value::from).boxed()),
        opt(choice(&["none", "atm", "ptm"]).boxed()),
        (boolean(), opt(size().prop_map(Value::from).boxed()), opt(choice(&["off", "conservative", "aggressive"]).boxed())),
    )
        .prop_map(|(bw, diffserv, flow_mode, (t, i), overhead, mpu, framing, (wash, memory, acks))| {
            json!({"discipline": "cake", "bandwidth_bps": bw, "diffserv": diffserv, "flow_mode": flow_mode, "target_ns": t, "interval_ns": i,
                   "overhead": overhead, "mpu": mpu, "framing": framing, "wash": wash, "memory_limit_bytes": memory, "ack_filter": acks})
        });
    let dualpi2 = (
        (dur(), dur(), opt(ratio().prop_map(Value::from).boxed()), opt(ratio().prop_map(Value::from).boxed()), dur()),
        opt(prop_oneof![1..10u64, 1..=MAX_PACKETS].prop_map(Value::from).boxed()),
        opt(prop_oneof![0..10u64, 0..=MAX_PACKETS].prop_map(Value::from).boxed()),
        opt((1..=255u64).prop_map(Value::from).boxed()),
        opt((0..=100u64).prop_map(Value::from).boxed()),
        opt(choice(&["l4s_ect", "any_ect"]).boxed()),
        (boolean(), boolean(), opt(size().prop_map(Value::from).boxed())),
    )
        .prop_map(|((t, u, a, b, step), step_packets, min_qlen, k, protection, mask, (overload, early, memory))| {
            json!({"discipline": "dualpi2", "target_ns": t, "tupdate_ns": u, "alpha": a, "beta": b, "step_thresh_ns": step, "step_packets": step_packets,
                   "min_qlen_step": min_qlen, "coupling_factor": k, "classic_protection_percent": protection, "ecn_mask": mask,
                   "drop_on_overload": overload, "drop_early": early, "memory_limit_bytes": memory})
        });
    let disc = prop_oneof![
        Just(json!({"discipline": "droptail"})),
        Just(json!({"discipline": "drophead"})),
        codel,
        fq_codel,
        red,
        pie,
        cake,
        dualpi2,
    ];
    (disc, limit()).prop_map(|(mut q, (packets, bytes))| {
        let obj = q.as_object_mut().unwrap();
        obj.insert("packets".into(), json!(packets));
        obj.insert("bytes".into(), json!(bytes));
        // RED's thresholds from their shares of the limit: min below max, max within the limit.
        if let (Some(lo), Some(hi)) = (obj.remove("min_share"), obj.remove("max_share")) {
            if let (Some(lo), Some(hi)) = (lo.as_f64(), hi.as_f64()) {
                let lim = packets.or(bytes).unwrap();
                let max = ((lim as f64 * hi) as u64).clamp(1, lim);
                obj.insert("max".into(), json!(max));
                obj.insert("min".into(), json!(((max as f64 * lo) as u64).min(max - 1)));
            }
        }
        q
    })
}

/// Queues resolved, and those that fell back to their defaults.
static RESOLVED: AtomicU64 = AtomicU64::new(0);
static DEFAULTED: AtomicU64 = AtomicU64::new(0);

/// The queue config `json` resolves to, with the direction's rate; the discipline's own defaults
/// (with the same limit) where the draw is refused (a RED burst its weight rule cannot meet,
/// a target not below the interval): those refusals are the config target's to fuzz.
fn resolve(json: &Value, link_bps: Option<u64>) -> QueueConfig {
    let parsed: QueueJson = serde_json::from_value(json.clone()).expect("the generator writes the config's own keys");
    RESOLVED.fetch_add(1, Ordering::Relaxed);
    parsed.resolve(link_bps).unwrap_or_else(|_| {
        DEFAULTED.fetch_add(1, Ordering::Relaxed);
        let mut fallback = json.clone();
        let obj = fallback.as_object_mut().unwrap();
        obj.retain(|k, _| ["discipline", "packets", "bytes"].contains(&k.as_str()));
        if obj["discipline"] == "red" {
            // The default thresholds (limit / 4 and a third of that) need room for a burst.
            if let Some(n) = obj["packets"].as_u64() {
                obj.insert("packets".into(), json!(n.max(64)));
            }
            if let Some(b) = obj["bytes"].as_u64() {
                obj.insert("bytes".into(), json!(b.max(64_000)));
            }
        }
        let parsed: QueueJson = serde_json::from_value(fallback).unwrap();
        parsed.resolve(link_bps).expect("the defaults resolve")
    })
}

/// A flow of the arrivals: its frames' addresses, ports and protocol, and its DSCP (CAKE sorts
/// by it, so a flow keeps one).
#[derive(Clone, Debug)]
struct Flow {
    v6: bool,
    tcp: bool,
    src: u8,
    dst: u8,
    dscp: u8,
}

fn flow() -> impl Strategy<Value = Flow> {
    (any::<bool>(), any::<bool>(), 1..4u8, 4..6u8, prop_oneof![Just(0u8), Just(46), Just(8), Just(10), Just(34), Just(48), 0..64u8])
        .prop_map(|(v6, tcp, src, dst, dscp)| Flow { v6, tcp, src, dst, dscp })
}

#[derive(Clone, Debug)]
enum Op {
    /// After `gap_ns`, a packet of `flow` (an index into the case's flows) with this ECN
    /// codepoint, `len` bytes on the wire; `raw` replaces its frame with arbitrary bytes.
    Enqueue { gap_ns: u64, flow: usize, ecn: u8, len: u32, raw: Option<Vec<u8>> },
    Dequeue { gap_ns: u64 },
}

/// Gaps between operations: often none, mostly microseconds to milliseconds, sometimes seconds,
/// rarely an hour (an idle link).
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        2 => 1..1_000u64,
        6 => 1_000..20 * MS,
        1 => 20 * MS..2_000 * MS,
        1 => 2_000 * MS..3_600_000 * MS,
    ]
}

fn frame_len() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 40..1515u32, 1 => 1..40u32, 1 => 1515..1600u32, 1 => 1600..9018u32, 1 => 9018..=65535u32]
}

fn op(flows: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (gap(), 0..flows, 0..4u8, frame_len(), proptest::option::weighted(0.05, proptest::collection::vec(any::<u8>(), 0..64)))
            .prop_map(|(gap_ns, flow, ecn, len, raw)| Op::Enqueue { gap_ns, flow, ecn, len, raw }),
        2 => gap().prop_map(|gap_ns| Op::Dequeue { gap_ns }),
    ]
}

/// A case: the queue, the flows, and the operations.
fn case() -> impl Strategy<Value = (Value, Option<u64>, Vec<Flow>, Vec<Op>, u64)> {
    (queue_json(), proptest::option::of(rate()), proptest::collection::vec(flow(), 1..8), any::<u64>()).prop_flat_map(|(q, bps, flows, seed)| {
        let n = flows.len();
        (Just(q), Just(bps), Just(flows), proptest::collection::vec(op(n), 0..250), Just(seed))
    })
}

/// The headers of a packet of `flow`: TCP segments as Linux sends them, or UDP.
fn headers(flow: &Flow, ecn_bits: u8) -> Vec<u8> {
    let tos = flow.dscp << 2 | ecn_bits;
    if flow.tcp || flow.v6 {
        let t = Tcp { v6: flow.v6, tos, ..Tcp::ack(flow.src, flow.dst, 40000 + flow.src as u16, 5201, 1).timestamps(1, 2) };
        t.frame()
    } else {
        let mut f = corpus::udp(flow.src as u32, Ecn::from_bits(ecn_bits), 42);
        f[15] = tos;
        f[24..26].copy_from_slice(&[0, 0]);
        let sum = bloatlab_core::wire::ipv4_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f
    }
}

/// The most FQ-CoDel's backlog went over its memory_limit, in thousandths of it: reported, not
/// held to a bound (one batch per arrival, as Linux drops; its own limit is held).
static FQ_CODEL_MEMORY_OVER: AtomicU64 = AtomicU64::new(0);

/// The most the discipline may hold: (packets, bytes); None where it does not bound that.
fn bounds(cfg: &QueueConfig) -> (Option<u64>, Option<u64>) {
    let of = |l: &Limit| match *l {
        Limit::Packets(n) => (Some(n as u64), None),
        Limit::Bytes(b) => (None, Some(b as u64)),
    };
    match cfg {
        QueueConfig::DropTail(l) | QueueConfig::DropHead(l) | QueueConfig::Codel(l, _) | QueueConfig::Red(l, _) | QueueConfig::Pie(l, _) => of(l),
        // Over its limit, FQ-CoDel drops one batch from the fattest flow per arrival, as Linux does.
        // Over memory_limit FQ-CoDel drops one batch from the fattest flow per arrival, as Linux
        // does, which may leave it over (see FQ_CODEL_MEMORY_OVER); its limit holds.
        QueueConfig::FqCodel(l, _) => of(l),
        // CAKE's limit is its buffer, in bytes (packets x MTU, memory_limit, the rate's share).
        QueueConfig::Cake(l, p) => (None, Some(Cake::new(*l, p.clone(), 0).buffer_limit())),
        QueueConfig::DualPi2(l, p) => {
            let memory = DualPi2::new(*l, p.clone()).memory_limit();
            match *l {
                Limit::Packets(n) => (Some(n as u64), Some(memory)),
                Limit::Bytes(b) => (None, Some((b as u64).min(memory))),
            }
        }
    }
}

/// Runs the operations through a `Queue` over the discipline, checking after each.
fn run_queue(cfg: &QueueConfig, flows: &[Flow], ops: &[Op], seed: u64) -> Result<(), TestCaseError> {
    let mut q = Queue::new(cfg.build(seed));
    let mut rng = Rng::new(seed);
    let (max_pkts, max_bytes) = bounds(cfg);
    let lane = |e: Ecn| match cfg {
        QueueConfig::DualPi2(_, p) => p.ecn_mask.to_l(e),
        _ => false,
    };
    let mut now = 0u64;
    // Per packet: (flow, its lane, ECN-capable on arrival, wire length); then its fate.
    let mut packets: HashMap<u64, (usize, bool, bool, u32)> = HashMap::new();
    let mut fates: HashMap<u64, &'static str> = HashMap::new();
    let mut last_out: HashMap<(usize, bool), u64> = HashMap::new();
    let (mut bytes_in, mut bytes_out, mut bytes_dropped) = (0u64, 0u64, 0u64);
    let mut events = Vec::new();
    let mut next_id = 0u64;
    for op in ops {
        match op {
            Op::Enqueue { gap_ns, flow, ecn: ecn_bits, len, raw } => {
                now += gap_ns;
                let id = next_id;
                next_id += 1;
                let data = raw.clone().unwrap_or_else(|| headers(&flows[*flow], *ecn_bits));
                let arrived_ecn = ecn(&data);
                // A raw frame is its own flow: its order is not the flow's.
                let f = if raw.is_some() { usize::MAX } else { *flow };
                packets.insert(id, (f, lane(arrived_ecn.unwrap_or(Ecn::NotEct)), arrived_ecn.is_some_and(|e| e != Ecn::NotEct), *len));
                bytes_in += *len as u64;
                q.enqueue(Instant(now), Packet::with_headers(id, data, *len, f as u32), &mut rng, &mut |e, _| events.push(e));
            }
            Op::Dequeue { gap_ns } => {
                now += gap_ns;
                if let Some(p) = q.dequeue(Instant(now), &mut rng, &mut |e, _| events.push(e)) {
                    let (f, l, _, _) = packets[&p.id];
                    if f != usize::MAX {
                        let prev = last_out.insert((f, l), p.id);
                        prop_assert!(prev.map_or(true, |prev| prev < p.id), "flow {} reordered: {} after {:?}", f, p.id, prev);
                    }
                }
            }
        }
        settle(&mut events, &packets, &mut fates, &mut bytes_out, &mut bytes_dropped)?;
        let s = q.stats();
        prop_assert_eq!(bytes_in, bytes_out + bytes_dropped + s.backlog_bytes, "bytes: in = out + dropped + backlog");
        if let Some(n) = max_pkts {
            prop_assert!(s.backlog_pkts <= n, "{} packets queued, the limit is {}", s.backlog_pkts, n);
        }
        if let Some(b) = max_bytes {
            prop_assert!(s.backlog_bytes <= b, "{} bytes queued, the limit is {}", s.backlog_bytes, b);
        }
        if let QueueConfig::FqCodel(_, p) = cfg {
            let over = s.backlog_bytes.saturating_sub(p.memory_limit_bytes) * 1000 / p.memory_limit_bytes;
            FQ_CODEL_MEMORY_OVER.fetch_max(over, Ordering::Relaxed);
        }
    }
    // Drain: a shaper (CAKE's) holds packets back until ready_at; at most one step per packet
    // and one per shaper wait.
    let mut steps = 0;
    while !q.is_empty() {
        steps += 1;
        prop_assert!(steps <= 4 * q.stats().arrived + 10, "the queue does not drain: {:?}", q.stats());
        match q.dequeue(Instant(now), &mut rng, &mut |e, _| events.push(e)) {
            Some(_) => {}
            None => {
                let at = q.ready_at();
                prop_assert!(at.is_some_and(|t| t.nanos() > now), "{} packets queued, none given, none promised", q.stats().backlog_pkts);
                now = at.unwrap().nanos();
            }
        }
        settle(&mut events, &packets, &mut fates, &mut bytes_out, &mut bytes_dropped)?;
    }
    let s = q.stats();
    prop_assert_eq!(fates.len() as u64, next_id, "a packet without a fate");
    prop_assert_eq!((s.backlog_pkts, s.backlog_bytes), (0, 0));
    prop_assert_eq!(bytes_in, bytes_out + bytes_dropped);
    prop_assert_eq!(s.arrived, s.dequeued + s.dropped_at_enqueue + s.dropped_in_queue);
    prop_assert_eq!(s.drops.total(), s.dropped_at_enqueue + s.dropped_in_queue);
    prop_assert!(s.max_backlog_pkts <= max_pkts.unwrap_or(u64::MAX));
    Ok(())
}

/// Books the events of one operation: one fate per packet, marks on ECN-capable ones only.
fn settle(
    events: &mut Vec<QueueEvent>,
    packets: &HashMap<u64, (usize, bool, bool, u32)>,
    fates: &mut HashMap<u64, &'static str>,
    bytes_out: &mut u64,
    bytes_dropped: &mut u64,
) -> Result<(), TestCaseError> {
    for e in events.drain(..) {
        match e {
            QueueEvent::Dequeued { packet, .. } | QueueEvent::Dropped(packet, _) => {
                let fate = if matches!(e, QueueEvent::Dequeued { .. }) { "dequeued" } else { "dropped" };
                let prev = fates.insert(packet.id, fate);
                prop_assert!(prev.is_none(), "packet {} {} after it was {:?}", packet.id, fate, prev);
                prop_assert_eq!(packet.len, packets[&packet.id].3);
                *if fate == "dropped" { &mut *bytes_dropped } else { &mut *bytes_out } += packet.len as u64;
            }
            QueueEvent::Marked(packet, reason) => {
                prop_assert!(packets[&packet.id].2, "{:?} marked packet {}, which was not ECN-capable", reason, packet.id);
                prop_assert!(!fates.contains_key(&packet.id), "a packet marked after its fate");
            }
            QueueEvent::Enqueued(_) | QueueEvent::Probability { .. } => {}
        }
    }
    Ok(())
}

#[test]
fn queue_disciplines() {
    fuzz("disciplines.queue", 800, case, |(json, bps, flows, ops, seed)| {
        let mut cfg = resolve(&json, bps);
        let span = ops.iter().map(|op| match op {
            Op::Enqueue { gap_ns, .. } | Op::Dequeue { gap_ns } => gap_ns,
        });
        common::bound_updates(&mut cfg, span.sum());
        run_queue(&cfg, &flows, &ops, seed)
    });
    let over = FQ_CODEL_MEMORY_OVER.load(Ordering::Relaxed);
    println!("fuzz disciplines.queue: fq_codel's backlog went at most {}% over its memory_limit", over / 10);
    println!(
        "fuzz disciplines: {} queues drawn, {} refused by the config and run with their defaults",
        RESOLVED.load(Ordering::Relaxed),
        DEFAULTED.load(Ordering::Relaxed)
    );
}

/// A link direction: its rate (constant, a trace, or none), delay and jitter, loss, and its
/// queue as the config gives it (resolved by the test, where a panic is caught).
fn direction() -> impl Strategy<Value = (DirectionConfig, Value)> {
    let rate = prop_oneof![
        1 => Just(Rate::Unlimited),
        3 => rate().prop_map(|bps| Rate::Constant { bps }),
        1 => proptest::sample::select(&corpus::TRACES[..]).prop_map(|t| Rate::Trace(Trace::parse(t).unwrap())),
        1 => proptest::collection::vec(0..50u64, 1..20).prop_map(|mut ms| {
            ms.sort_unstable();
            let last = ms.last_mut().unwrap();
            *last = (*last).max(1);
            Rate::Trace(Trace::parse(&ms.iter().map(|m| format!("{m}\n")).collect::<String>()).unwrap())
        }),
    ];
    let delay = prop_oneof![2 => Just(0u64), 4 => 0..50 * MS, 1 => 0..=MAX_DURATION_NS];
    let loss = prop_oneof![2 => Just(0.0f64), 1 => 0.0..1.0f64];
    let max_frame = prop_oneof![Just(1518usize), 15..=65_549usize];
    (rate, delay, 0.0..=1.0f64, loss, queue_json(), any::<u64>(), max_frame, any::<bool>())
        .prop_map(|(rate, delay_ns, jitter_share, loss, q, seed, max_frame_bytes, rewrite)| {
            let cfg = DirectionConfig {
                rate,
                delay: Duration(delay_ns),
                jitter: Duration((delay_ns as f64 * jitter_share) as u64),
                loss,
                queue: QueueConfig::DropTail(Limit::Packets(1)),
                seed,
                max_frame_bytes,
                ect1_rewrite: if rewrite { vec![Ipv4Pair { src: [10, 0, 0, 1], dst: [10, 0, 0, 4] }] } else { vec![] },
            };
            (cfg, q)
        })
}

#[derive(Clone, Debug)]
enum PipeOp {
    Arrive { gap_ns: u64, flow: usize, ecn: u8, len: u32 },
    Poll { gap_ns: u64 },
}

fn pipe_op(flows: usize) -> impl Strategy<Value = PipeOp> {
    prop_oneof![
        3 => (gap(), 0..flows, 0..4u8, prop_oneof![8 => frame_len(), 1 => 0..14u32]).prop_map(|(gap_ns, flow, ecn, len)| PipeOp::Arrive { gap_ns, flow, ecn, len }),
        2 => gap().prop_map(|gap_ns| PipeOp::Poll { gap_ns }),
    ]
}

fn check_pipeline(p: &Pipeline) -> Result<(), TestCaseError> {
    let (s, q) = (p.stats(), p.queue_stats());
    prop_assert_eq!(
        s.arrivals,
        s.departures + s.drops.total() + q.drops.total() + q.backlog_pkts + p.in_flight(),
        "arrivals = departures + drops + backlog + in flight"
    );
    Ok(())
}

#[test]
fn pipeline() {
    let case = || {
        (direction(), proptest::collection::vec(flow(), 1..6)).prop_flat_map(|(d, flows)| {
            let n = flows.len();
            (Just(d), Just(flows), proptest::collection::vec(pipe_op(n), 0..200))
        })
    };
    fuzz("disciplines.pipeline", 600, case, |((mut cfg, queue), flows, ops)| {
        let bps = match cfg.rate {
            Rate::Constant { bps } => Some(bps),
            _ => None,
        };
        cfg.queue = resolve(&queue, bps);
        // The case's span: its arrivals', then the delay, and serialising all it offered.
        let mut span = cfg.delay.nanos();
        for op in &ops {
            span += match *op {
                PipeOp::Poll { gap_ns } => gap_ns,
                PipeOp::Arrive { gap_ns, len, .. } => {
                    gap_ns
                        + match &cfg.rate {
                            Rate::Unlimited => 0,
                            Rate::Constant { bps } => Rate::tx_time(*bps, len as u64).nanos(),
                            Rate::Trace(t) => (len as u64 / 1504 + 1) * t.period().nanos(),
                        }
                }
            };
        }
        common::bound_updates(&mut cfg.queue, span);
        let mut p = Pipeline::new(&cfg, Instant(0));
        p.record_drops(true);
        let mut now = 0u64;
        let mut last_at = 0u64;
        let mut out: Vec<Departure> = Vec::new();
        let mut gone = 0u64;
        let mut check_out = |out: &mut Vec<Departure>, now: u64| -> Result<(), TestCaseError> {
            for d in out.drain(..) {
                prop_assert!(d.at.nanos() <= now, "a departure due at {} handed out at {}", d.at.nanos(), now);
                prop_assert!(d.at.nanos() >= last_at, "departures out of order");
                prop_assert!(d.at.nanos() >= d.packet.enqueued_at.nanos() + cfg.delay.nanos() - cfg.jitter.nanos(), "left before its delay");
                last_at = d.at.nanos();
                gone += 1;
            }
            Ok(())
        };
        for op in &ops {
            match *op {
                PipeOp::Arrive { gap_ns, flow, ecn: e, len } => {
                    now += gap_ns;
                    let mut frame = headers(&flows[flow], e);
                    frame.resize(len as usize, 0);
                    p.arrive(Instant(now), frame);
                }
                PipeOp::Poll { gap_ns } => {
                    now += gap_ns;
                    p.poll(Instant(now), &mut out);
                    check_out(&mut out, now)?;
                    if let Some(d) = p.next_deadline() {
                        prop_assert!(d.nanos() > now, "a deadline at {} is not after the poll at {}", d.nanos(), now);
                    }
                }
            }
            check_pipeline(&p)?;
        }
        // Drain: every deadline in turn, as the replay does; bounded by the packets (each leaves
        // the queue, the serialiser and the line once) and the trace's idle opportunities.
        let mut steps = 0u64;
        while let Some(t) = p.next_deadline() {
            steps += 1;
            prop_assert!(steps <= 10 * p.stats().arrivals + 100, "the pipeline does not drain");
            now = now.max(t.nanos());
            p.poll(Instant(now), &mut out);
            check_out(&mut out, now)?;
            check_pipeline(&p)?;
        }
        let (s, q) = (p.stats(), p.queue_stats());
        prop_assert_eq!((q.backlog_pkts, p.in_flight()), (0, 0), "drained");
        prop_assert_eq!(s.arrivals, s.departures + s.drops.total() + q.drops.total());
        prop_assert_eq!(gone, s.departures);
        let all_drops = s.drops.total() + q.drops.total();
        let mut drops = Vec::new();
        p.take_drops(&mut drops);
        prop_assert_eq!(drops.len() as u64, all_drops, "every drop kept for the capture");
        Ok(())
    });
}
