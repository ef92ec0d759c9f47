//! Fuzz target `config`: a link direction's JSON as bloatlab-config reads it (load_json, then
//! DirectionJson::resolve into the core's DirectionConfig), over arbitrary JSON, arbitrary text,
//! and the directions the Python control plane writes (corpus::DIRECTIONS) with fields removed,
//! retyped, renamed, or set to extreme numbers, and their text cut or edited.
//!
//! Either the config is refused with an error of one line, or it resolves, and then the
//! direction it describes runs: its discipline is built and a burst of packets goes through its
//! pipeline and drains, without a panic (a debug build panics on arithmetic overflow, so an
//! extreme value that the resolution lets through shows here).

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use bloatlab_config::{load_json, DirectionJson, QueueJson};
use bloatlab_core::pipeline::{Departure, Pipeline};
use bloatlab_core::Instant;
use bloatlab_fuzz::corpus::{self, Tcp};
use common::{apply, fuzz, one_line, Edit, Outcomes};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

/// Every key a direction or a queue takes, and some it does not: what mutations put in.
const KEYS: [&str; 48] = [
    "rate_bps", "trace_path", "delay_ns", "jitter_ns", "loss", "queue", "seed", "max_frame_bytes", "qlog", "capture", "ect1_rewrite",
    "discipline", "packets", "bytes", "target_ns", "interval_ns", "ecn", "mtu_bytes", "coarse_time", "flows", "quantum_bytes",
    "memory_limit_bytes", "drop_batch", "min", "max", "avpkt_bytes", "burst_pkts", "probability", "bandwidth_bps", "harddrop",
    "adaptive", "gentle", "ns3", "tupdate_ns", "alpha", "beta", "max_burst_ns", "ecn_prob", "bytemode", "dq_rate_estimator",
    "diffserv", "flow_mode", "overhead", "mpu", "framing", "wash", "ack_filter", "step_thresh_ns",
];

/// Numbers at the edges: of the integer types serde reads, of the bounds, and of floats.
fn extreme_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u32::MAX)),
        Just(json!(u32::MAX as u64 + 1)),
        Just(json!(i32::MIN)),
        Just(json!(1u64 << 53)),
        Just(json!(1u64 << 63)),
        Just(json!(10_000_000_000u64)),
        Just(json!(10_000_000_001u64)),
        Just(json!(400_000_000_000u64)),
        Just(json!(65_549)),
        Just(json!(0.5)),
        Just(json!(1.0)),
        Just(json!(-0.0)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!(f64::MIN_POSITIVE)),
        Just(json!(0.999_999_999_999_999_9)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e20..1e20f64).prop_map(|x| json!(x)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        extreme_number(),
        proptest::sample::select(&KEYS[..]).prop_map(Value::from),
        proptest::sample::select(&bloatlab_config::DISCIPLINES[..]).prop_map(Value::from),
        Just(json!("10.0.0.1")),
        Just(json!("")),
        "[ -~]{0,12}".prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ]
}

/// A queue object of arbitrary values: a discipline (mostly a known one) and keys of the
/// config's, so that some resolve.
fn queue_value() -> impl Strategy<Value = Value> {
    let discipline = prop_oneof![6 => proptest::sample::select(&bloatlab_config::DISCIPLINES[..]).prop_map(Value::from), 1 => leaf()];
    let any_limit = proptest::sample::select(&["packets", "bytes"][..]).prop_flat_map(|k| leaf().prop_map(move |v| (k, v)));
    let limit = prop_oneof![Just(("packets", json!(100))), Just(("bytes", json!(100_000))), any_limit];
    (discipline, limit, proptest::collection::vec((proptest::sample::select(&KEYS[11..]), leaf()), 0..4)).prop_map(|(d, (k, v), rest)| {
        let mut q = serde_json::Map::new();
        q.insert("discipline".into(), d);
        q.insert(k.into(), v);
        q.extend(rest.into_iter().map(|(k, v)| (k.to_string(), v)));
        Value::Object(q)
    })
}

/// An object's key: mostly the config's own, else any (control characters too: a key is quoted
/// in the error that refuses it).
fn key() -> impl Strategy<Value = String> {
    prop_oneof![8 => proptest::sample::select(&KEYS[..]).prop_map(String::from), 2 => "[a-z_]{1,8}", 1 => "[\\x00-\\x7f]{1,6}"]
}

/// Arbitrary JSON, its object keys mostly the config's own.
fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// A change to one place of a config, chosen by index among its places (objects' entries and
/// arrays' items, depth first).
#[derive(Clone, Debug)]
enum Mutation {
    Remove(usize),
    Set(usize, Value),
    /// Adds an entry (a known key of the wrong object, or none of the config's) to an object.
    Add(usize, String, Value),
    /// The queue's discipline becomes another, its parameters kept.
    Discipline(&'static str),
    /// A trace instead of (or besides) the rate: a real trace file, a bad one, or none.
    Trace(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => any::<usize>().prop_map(Mutation::Remove),
        5 => (any::<usize>(), prop_oneof![3 => extreme_number(), 1 => leaf(), 1 => json_value()]).prop_map(|(i, v)| Mutation::Set(i, v)),
        1 => (any::<usize>(), key(), leaf()).prop_map(|(i, k, v)| Mutation::Add(i, k, v)),
        1 => proptest::sample::select(&bloatlab_config::DISCIPLINES[..]).prop_map(Mutation::Discipline),
        1 => (0..4usize).prop_map(Mutation::Trace),
    ]
}

/// The places of a JSON value, depth first: each a path of object keys and array indices.
fn places(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                path.push(json!(k));
                out.push(path.clone());
                places(child, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                path.push(json!(i));
                out.push(path.clone());
                places(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        Value::String(k) => v.get_mut(k.as_str()),
        Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

fn mutate(config: &mut Value, m: &Mutation, traces: &[PathBuf]) {
    let mut all = Vec::new();
    places(config, &mut Vec::new(), &mut all);
    match m {
        Mutation::Remove(i) | Mutation::Set(i, _) if !all.is_empty() => {
            let path = &all[i % all.len()];
            let (parent, last) = path.split_at(path.len() - 1);
            let Some(parent) = at(config, parent) else { return };
            match (m, parent, &last[0]) {
                (Mutation::Remove(_), Value::Object(o), Value::String(k)) => {
                    o.remove(k);
                }
                (Mutation::Remove(_), Value::Array(a), Value::Number(n)) => {
                    a.remove(n.as_u64().unwrap() as usize);
                }
                (Mutation::Set(_, v), p, step) => {
                    if let Some(slot) = at(p, std::slice::from_ref(step)) {
                        *slot = v.clone();
                    }
                }
                _ => {}
            }
        }
        Mutation::Add(i, key, v) => {
            // Into one of its objects: the root, the queue, a capture, a rewrite pair.
            let mut objects: Vec<Vec<Value>> = vec![vec![]];
            objects.extend(all.into_iter().filter(|p| at(config, p).is_some_and(|v| v.is_object())));
            if let Some(Value::Object(o)) = at(config, &objects[i % objects.len()]) {
                o.insert(key.clone(), v.clone());
            }
        }
        Mutation::Discipline(name) => {
            if let Some(Value::Object(q)) = config.get_mut("queue") {
                q.insert("discipline".into(), json!(name));
            }
        }
        Mutation::Trace(k) => {
            if let Value::Object(o) = config {
                o.insert("trace_path".into(), json!(traces[k % traces.len()]));
                if k % 2 == 0 {
                    o.insert("rate_bps".into(), Value::Null);
                }
            }
        }
        _ => {}
    }
}

/// This thread's scratch files: the config, and trace files (a real trace, a bad one, none).
struct Scratch {
    config: PathBuf,
    traces: Vec<PathBuf>,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("bloatlab-fuzz-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let traces = vec![dir.join("good.trace"), dir.join("bad.trace"), dir.join("missing.trace"), dir.join("empty.trace")];
        std::fs::write(&traces[0], corpus::TRACES[2]).unwrap();
        std::fs::write(&traces[1], "3\n2\n").unwrap();
        std::fs::write(&traces[3], "").unwrap();
        Scratch { config: dir.join("direction.json"), traces }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.config.parent().unwrap());
    }
}

/// The config as bloatlab-link and bloatlab-replay read it; the direction it describes, run.
fn check(scratch: &Scratch, text: &[u8], outcomes: &Outcomes) -> Result<(), TestCaseError> {
    std::fs::write(&scratch.config, text).unwrap();
    let path = scratch.config.to_str().unwrap();
    let parsed: DirectionJson = match load_json(path) {
        Ok(d) => d,
        Err(e) => return one_line("load_json", &e),
    };
    outcomes.parsed.fetch_add(1, Ordering::Relaxed);
    let direction = match parsed.resolve() {
        Ok(d) => d,
        Err(e) => return one_line("resolve", &e),
    };
    outcomes.accepted.fetch_add(1, Ordering::Relaxed);
    let mut cfg = direction.config;
    // A controller's updates are bounded as the disciplines target bounds them; the drain of 60
    // frames of 1500 bytes at the slowest rate (10 kbit/s) takes 72 s.
    common::bound_updates(&mut cfg.queue, 100_000_000_000 + cfg.delay.nanos());
    // What bloatlab-link does with it: the discipline, in the pipeline, under a standing queue
    // (a 1500-byte frame each ms: more than the slowest rates carry) and then a drain.
    let mut p = Pipeline::new(&cfg, Instant(0));
    let frames = [
        Tcp { tos: 0x02, payload: 1446, ..Tcp::ack(1, 2, 40000, 5201, 1).timestamps(1, 2) }.frame(),
        Tcp::ack(2, 1, 5201, 40000, 7).timestamps(3, 4).frame(),
        corpus::udp(9, bloatlab_core::wire::Ecn::Ect1, 1514),
    ];
    let mut out: Vec<Departure> = Vec::new();
    for k in 0..60u64 {
        let t = Instant(k * 1_000_000);
        p.arrive(t, frames[k as usize % frames.len()].clone());
        p.poll(t, &mut out);
    }
    let mut steps = 0;
    while let Some(t) = p.next_deadline() {
        steps += 1;
        prop_assert!(steps < 10_000, "the direction does not drain");
        p.poll(t.max(p.last_time()), &mut out);
    }
    let (s, q) = (p.stats(), p.queue_stats());
    prop_assert_eq!(s.arrivals, s.departures + s.drops.total() + q.drops.total());
    Ok(())
}

#[test]
fn arbitrary_json() {
    let scratch = Scratch::new("arbitrary");
    let outcomes = Outcomes::new();
    // A queue inside a direction, as a direction, as a queue alone (QueueJson's own reader).
    let strategy = || (prop_oneof![3 => queue_value(), 1 => json_value()], json_value(), 0..3usize);
    fuzz("config.arbitrary_json", 1_500, strategy, |(queue, rest, shape)| {
        let config = match (shape, rest) {
            (0, Value::Object(mut o)) => {
                o.insert("queue".into(), queue.clone());
                Value::Object(o)
            }
            (1, _) => json!({ "queue": queue }),
            (_, rest) => rest,
        };
        check(&scratch, config.to_string().as_bytes(), &outcomes)?;
        // The queue's own reader (a hand-written visitor) straight from the value: serde's message
        // is not bloatlab's (load_json makes that one line), so only its resolution is held to it.
        if let Ok(q) = serde_json::from_value::<QueueJson>(queue) {
            if let Err(e) = q.resolve(None).and(q.resolve(Some(10_000_000))) {
                one_line("QueueJson::resolve", &e)?;
            }
        }
        Ok(())
    });
    outcomes.report("config.arbitrary_json", "parsed", "resolved and ran");
}

#[test]
fn arbitrary_text() {
    let scratch = Scratch::new("text");
    let outcomes = Outcomes::new();
    let text = || prop_oneof![proptest::collection::vec(any::<u8>(), 0..200), "[ -~\\n]{0,200}".prop_map(String::into_bytes)];
    fuzz("config.arbitrary_text", 2_000, text, |text| check(&scratch, &text, &outcomes));
    outcomes.report("config.arbitrary_text", "parsed", "resolved and ran");
}

#[test]
fn mutated_directions() {
    let scratch = Scratch::new("mutated");
    let outcomes = Outcomes::new();
    let seeds: Vec<Value> = corpus::DIRECTIONS.iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    for (i, seed) in seeds.iter().enumerate() {
        // The seeds themselves are what the Python side writes: all accepted.
        let parsed: DirectionJson = serde_json::from_value(seed.clone()).unwrap_or_else(|e| panic!("seed {i}: {e}"));
        parsed.resolve().unwrap_or_else(|e| panic!("seed {i}: {e}"));
    }
    let n = seeds.len();
    let edits = || prop_oneof![4 => Just(vec![]), 1 => proptest::collection::vec(common::edit(), 1..3)];
    let strategy = || (0..n, proptest::collection::vec(mutation(), 1..4), edits());
    fuzz("config.mutated_directions", 2_000, strategy, |(k, mutations, edits): (usize, Vec<Mutation>, Vec<Edit>)| {
        let mut config = seeds[k].clone();
        for m in &mutations {
            mutate(&mut config, m, &scratch.traces);
        }
        let mut text = serde_json::to_vec(&config).unwrap();
        for e in &edits {
            apply(&mut text, e);
        }
        check(&scratch, &text, &outcomes)
    });
    outcomes.report("config.mutated_directions", "parsed", "resolved and ran");
}
