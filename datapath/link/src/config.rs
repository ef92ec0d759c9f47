//! The JSON config the Python control plane writes (see docs/datapath.md), validated into
//! the core's types. Errors name the field, on one line.

use std::path::PathBuf;

use bloatlab_core::pipeline::DEFAULT_MAX_FRAME_BYTES;
use bloatlab_core::qdisc::{AckFilter, CakeParams, CodelParams, DiffservMode, FlowMode, FqCodelParams, Framing, Limit, PieParams, QueueConfig, RedParams};
use bloatlab_core::rate::{Rate, Trace};
use bloatlab_core::{DirectionConfig, DropReason, Duration, MarkReason};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::capture::CaptureJson;

/// The bounds bloatlab's specs hold a direction to (src/bloatlab/specs: units, topology,
/// disciplines), held here again so that a config written by hand meets the same ones.
pub const MIN_RATE_BPS: u64 = 10_000;
pub const MAX_RATE_BPS: u64 = 400_000_000_000;
pub const MAX_DELAY_NS: u64 = 10_000_000_000;
pub const MAX_QUEUE_PACKETS: usize = 1_000_000;
pub const MAX_QUEUE_BYTES: usize = 1 << 30;
/// The smallest Ethernet header with something after it, and the largest IPv4 packet plus one.
pub const FRAME_BYTES: std::ops::RangeInclusive<usize> = 15..=65_549;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub netns: Option<String>,
    pub stats_path: PathBuf,
    #[serde(default)]
    pub log_dir: Option<PathBuf>,
    pub links: Vec<LinkConfig>,
    /// Wake this long before a departure and spin; 0 sleeps only (less CPU, later departures).
    #[serde(default = "default_spin_ns")]
    pub spin_ns: u64,
    /// SCHED_FIFO priority of the link threads (while the datapath leaves the hosts their
    /// share of the machine: sched.rs); 0 keeps normal scheduling.
    #[serde(default = "default_rt_priority")]
    pub rt_priority: i32,
    /// The CPU wake-up latency, in us, asked of the kernel's PM QoS while frames flow
    /// (sched::CpuLatency); null asks nothing.
    #[serde(default = "default_cpu_latency_us")]
    pub cpu_latency_us: Option<u32>,
    /// While the machine's tasks wait for CPU, a thread past a smaller spin share batches its
    /// departures (sched::CpuPressure); null never batches.
    #[serde(default = "default_batching")]
    pub batching: Option<Batching>,
    /// Worker threads that serve the link directions (worker.rs); absent: one per core.
    #[serde(default)]
    pub workers: Option<usize>,
    /// The most a worker wakes before a departure to spin, however late its wake-ups come
    /// (clock::WakeupLead). Longer buys punctuality on a machine whose wake-ups come late, with
    /// the CPU of spinning through it (docs/datapath.md, "Timing").
    #[serde(default = "default_max_lead_ns")]
    pub max_lead_ns: u64,
    /// The share of a worker's recent wake-ups its lead covers (clock::WakeupLead): 1 covers
    /// them all, the latest included.
    #[serde(default = "default_lead_quantile")]
    pub lead_quantile: f64,
    /// The share of each 10 ms a worker may spin before departures (SPIN_SHARE by default).
    #[serde(default = "default_spin_share")]
    pub spin_share: f64,
    /// A real-time thread that sleeps as the workers sleep while frames flow and records how
    /// late it wakes: the machine's own lateness under the run's load (sentinel.rs).
    #[serde(default = "yes")]
    pub sentinel: bool,
}

/// The default cap of the learnt lead: 500 us covered a VM's usual wake-ups (20-90 us late)
/// with room, at a CPU cost no run notices.
fn default_max_lead_ns() -> u64 {
    500_000
}

fn default_lead_quantile() -> f64 {
    0.95
}

fn default_spin_share() -> f64 {
    SPIN_SHARE
}

/// The longest lead a config may ask for: past it a worker would spin through every gap of a
/// 10 Mbit/s link.
pub const MAX_LEAD_LIMIT_NS: u64 = 20_000_000;

/// The most workers a config may ask for.
pub const MAX_WORKERS: usize = 256;

/// When and how the link threads batch departures to leave the hosts CPU (sched::CpuPressure).
/// Absent fields take the defaults, measured on a 2-vCPU VM (docs/datapath.md, "Timing").
#[derive(Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Batching {
    /// Share of a report period in which some task waited for CPU (PSI's "some") that starts
    /// batching: 0.39-0.57 with the links spinning at 1 Gbit/s, 0.15-0.39 at 500 Mbit/s.
    pub enter_pressure: f64,
    /// ... and the share below which batching stops: 0.31-0.41 while batching at 1 Gbit/s.
    pub exit_pressure: f64,
    /// The share of each 10 ms window a thread may spin while batching (0.75 otherwise).
    pub spin_share: f64,
    /// Past that share, the shortest sleep, deaf to arrivals; what fell due meanwhile leaves
    /// together.
    pub sleep_ns: u64,
}

// enter_pressure is also where a run warns that its hosts were short of CPU (Python's
// testbed/machine.py CPU_PRESSURE_WARN; tests/unit/test_cpu_pressure.py keeps the two equal).
impl Default for Batching {
    fn default() -> Self {
        Batching { enter_pressure: 0.4, exit_pressure: 0.2, spin_share: 0.1, sleep_ns: 50_000 }
    }
}

/// The longest a link thread sleeps deaf to arrivals (batching, or within a link's delay):
/// well within what its ring holds (socket.rs's RING_BLOCKS: 5 ms of full-size frames at
/// 20 Gbit/s).
pub const MAX_DEAF_NS: u64 = 1_000_000;

impl Batching {
    fn validate(&self) -> Result<(), String> {
        // A share is at most 1, so batching that starts only above 1 never would.
        if !(0.0..1.0).contains(&self.enter_pressure) {
            return Err(format!("batching.enter_pressure: {} is not a share from 0 to below 1", self.enter_pressure));
        }
        if !(0.0..=1.0).contains(&self.exit_pressure) {
            return Err(format!("batching.exit_pressure: {} is not a share from 0 to 1", self.exit_pressure));
        }
        if self.exit_pressure >= self.enter_pressure {
            return Err(format!("batching.exit_pressure: {} must be below enter_pressure ({})", self.exit_pressure, self.enter_pressure));
        }
        if !(0.0..=SPIN_SHARE).contains(&self.spin_share) {
            return Err(format!("batching.spin_share: {} is not from 0 to {SPIN_SHARE}", self.spin_share));
        }
        if !(1..=MAX_DEAF_NS).contains(&self.sleep_ns) {
            return Err(format!("batching.sleep_ns: {} is not from 1 to {MAX_DEAF_NS} (1 ms)", self.sleep_ns));
        }
        Ok(())
    }
}

/// The share of each 10 ms window a link thread may spin when not batching: at packet rates
/// where a departure is always near, the datapath then sleeps and departures come a little
/// late rather than taking a core from the hosts' stacks.
pub const SPIN_SHARE: f64 = 0.75;

fn default_batching() -> Option<Batching> {
    Some(Batching::default())
}

/// 0: idle CPUs poll rather than halt, so a thread (and a host) woken by a frame runs at once.
fn default_cpu_latency_us() -> Option<u32> {
    Some(0)
}

/// The floor of the learnt lead (clock::WakeupLead). With idle CPUs polling while frames
/// flow (sched::CpuLatency), 20 us left p99 lateness at 100 Mbit/s where 50 us had it (11-23
/// us either way, 3 runs each) and cut the datapath's CPU there from 57-66% to 41-51%.
fn default_spin_ns() -> u64 {
    20_000
}

/// Low among real-time priorities: above every normal thread, below the kernel's
/// threaded interrupt handlers (50).
fn default_rt_priority() -> i32 {
    DEFAULT_RT_PRIORITY
}

pub const DEFAULT_RT_PRIORITY: i32 = 10;

/// A link between two ends, each either a veth end in the datapath's namespace (`a_iface`,
/// toward a host or a switch with a namespace of its own) or a switch served inside the
/// datapath (`a_switch`, by name): exactly one of the two.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub name: String,
    #[serde(default)]
    pub a_iface: Option<String>,
    #[serde(default)]
    pub b_iface: Option<String>,
    #[serde(default)]
    pub a_switch: Option<String>,
    #[serde(default)]
    pub b_switch: Option<String>,
    pub forward: DirectionJson,
    pub reverse: DirectionJson,
}

/// One end of a link, as the config gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndConfig {
    Iface(String),
    Switch(String),
}

impl LinkConfig {
    /// Its ends a and b; an error names the field.
    pub fn ends(&self) -> Result<(EndConfig, EndConfig), String> {
        let end = |side: &str, iface: &Option<String>, switch: &Option<String>| match (iface, switch) {
            (Some(i), None) => Ok(EndConfig::Iface(i.clone())),
            (None, Some(s)) if !s.is_empty() => Ok(EndConfig::Switch(s.clone())),
            (None, Some(_)) => Err(format!("{side}_switch: a switch needs a name")),
            (Some(_), Some(_)) => Err(format!("{side}_iface: give an interface or a switch ({side}_switch), not both")),
            (None, None) => Err(format!("{side}_iface: missing; give the end's interface, or {side}_switch for a switch inside the datapath")),
        };
        Ok((end("a", &self.a_iface, &self.a_switch)?, end("b", &self.b_iface, &self.b_switch)?))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionJson {
    rate_bps: Option<u64>,
    #[serde(default)]
    trace_path: Option<PathBuf>,
    #[serde(default)]
    delay_ns: u64,
    #[serde(default)]
    jitter_ns: u64,
    #[serde(default)]
    loss: f64,
    queue: QueueJson,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    max_frame_bytes: Option<usize>,
    /// Write this direction's queue log (when the config has a log_dir).
    #[serde(default = "yes")]
    pub qlog: bool,
    /// Capture its departures and drops to pcapng files.
    #[serde(default)]
    pub capture: Option<CaptureJson>,
}

fn yes() -> bool {
    true
}

/// A direction's queue: the discipline, one limit, and the discipline's own parameters
/// (docs/queues.md); absent parameters take the core's defaults (Linux's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueJson {
    discipline: String,
    packets: Option<usize>,
    bytes: Option<usize>,
    target_ns: Option<u64>,
    interval_ns: Option<u64>,
    ecn: Option<bool>,
    mtu_bytes: Option<u32>,
    flows: Option<u32>,
    quantum_bytes: Option<u32>,
    memory_limit_bytes: Option<u64>,
    drop_batch: Option<u32>,
    min: Option<u64>,
    max: Option<u64>,
    avpkt_bytes: Option<u32>,
    burst_pkts: Option<u32>,
    probability: Option<f64>,
    bandwidth_bps: Option<u64>,
    harddrop: Option<bool>,
    adaptive: Option<bool>,
    gentle: Option<bool>,
    tupdate_ns: Option<u64>,
    alpha: Option<f64>,
    beta: Option<f64>,
    max_burst_ns: Option<u64>,
    ecn_prob: Option<f64>,
    bytemode: Option<bool>,
    dq_rate_estimator: Option<bool>,
    ns3: Option<bool>,
    coarse_time: Option<bool>,
    diffserv: Option<String>,
    flow_mode: Option<String>,
    overhead: Option<i32>,
    mpu: Option<u32>,
    framing: Option<String>,
    wash: Option<bool>,
    ack_filter: Option<String>,
}

impl QueueJson {
    /// The core's queue config; an error starts with the parameter's name.
    /// `link_bps` is the direction's rate: RED's default bandwidth when it has one.
    pub fn resolve(&self, link_bps: Option<u64>) -> Result<QueueConfig, String> {
        let limit = match (self.packets, self.bytes) {
            (Some(0), _) | (_, Some(0)) => return Err("queue: a limit of 0 holds nothing".into()),
            (Some(n), _) if n > MAX_QUEUE_PACKETS => return Err(format!("queue.packets: {n} is above {MAX_QUEUE_PACKETS}")),
            (_, Some(b)) if b > MAX_QUEUE_BYTES => return Err(format!("queue.bytes: {b} is above {MAX_QUEUE_BYTES} (1 GiB)")),
            (Some(n), None) => Limit::Packets(n),
            (None, Some(b)) => Limit::Bytes(b),
            _ => return Err("queue: give exactly one of packets or bytes".into()),
        };
        let given: Vec<&str> = [
            ("target_ns", self.target_ns.is_some()),
            ("interval_ns", self.interval_ns.is_some()),
            ("ecn", self.ecn.is_some()),
            ("mtu_bytes", self.mtu_bytes.is_some()),
            ("flows", self.flows.is_some()),
            ("quantum_bytes", self.quantum_bytes.is_some()),
            ("memory_limit_bytes", self.memory_limit_bytes.is_some()),
            ("drop_batch", self.drop_batch.is_some()),
            ("min", self.min.is_some()),
            ("max", self.max.is_some()),
            ("avpkt_bytes", self.avpkt_bytes.is_some()),
            ("burst_pkts", self.burst_pkts.is_some()),
            ("probability", self.probability.is_some()),
            ("bandwidth_bps", self.bandwidth_bps.is_some()),
            ("harddrop", self.harddrop.is_some()),
            ("adaptive", self.adaptive.is_some()),
            ("gentle", self.gentle.is_some()),
            ("tupdate_ns", self.tupdate_ns.is_some()),
            ("alpha", self.alpha.is_some()),
            ("beta", self.beta.is_some()),
            ("max_burst_ns", self.max_burst_ns.is_some()),
            ("ecn_prob", self.ecn_prob.is_some()),
            ("bytemode", self.bytemode.is_some()),
            ("dq_rate_estimator", self.dq_rate_estimator.is_some()),
            ("ns3", self.ns3.is_some()),
            ("coarse_time", self.coarse_time.is_some()),
            ("diffserv", self.diffserv.is_some()),
            ("flow_mode", self.flow_mode.is_some()),
            ("overhead", self.overhead.is_some()),
            ("mpu", self.mpu.is_some()),
            ("framing", self.framing.is_some()),
            ("wash", self.wash.is_some()),
            ("ack_filter", self.ack_filter.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        let Some(defaults) = discipline_defaults(&self.discipline) else {
            let names: Vec<&str> = DISCIPLINES.to_vec();
            return Err(format!("discipline: unknown discipline {:?} ({})", self.discipline, names.join(", ")));
        };
        if let Some(k) = given.iter().find(|k| !defaults.contains_key(**k)) {
            return Err(format!("{k}: {} has no such parameter", self.discipline));
        }
        let codel = |d: CodelParams| CodelParams {
            target: self.target_ns.map_or(d.target, Duration),
            interval: self.interval_ns.map_or(d.interval, Duration),
            ecn: self.ecn.unwrap_or(d.ecn),
            mtu_bytes: self.mtu_bytes.unwrap_or(d.mtu_bytes),
            coarse_time: self.coarse_time.unwrap_or(d.coarse_time),
        };
        let q = match self.discipline.as_str() {
            "droptail" => QueueConfig::DropTail(limit),
            "drophead" => QueueConfig::DropHead(limit),
            "codel" => QueueConfig::Codel(limit, codel(CodelParams::default())),
            "fq_codel" => {
                let d = FqCodelParams::default();
                QueueConfig::FqCodel(
                    limit,
                    FqCodelParams {
                        flows: self.flows.unwrap_or(d.flows),
                        quantum_bytes: self.quantum_bytes.unwrap_or(d.quantum_bytes),
                        memory_limit_bytes: self.memory_limit_bytes.unwrap_or(d.memory_limit_bytes),
                        drop_batch: self.drop_batch.unwrap_or(d.drop_batch),
                        codel: codel(d.codel),
                    },
                )
            }
            "red" => {
                let d = RedParams::default();
                QueueConfig::Red(
                    limit,
                    RedParams {
                        min: self.min.or(d.min),
                        max: self.max.or(d.max),
                        avpkt_bytes: self.avpkt_bytes.unwrap_or(d.avpkt_bytes),
                        burst_pkts: self.burst_pkts.or(d.burst_pkts),
                        probability: self.probability.unwrap_or(d.probability),
                        bandwidth_bps: self.bandwidth_bps.or(link_bps).unwrap_or(d.bandwidth_bps),
                        ecn: self.ecn.unwrap_or(d.ecn),
                        harddrop: self.harddrop.unwrap_or(d.harddrop),
                        adaptive: self.adaptive.unwrap_or(d.adaptive),
                        gentle: self.gentle.unwrap_or(d.gentle),
                        ns3: self.ns3.unwrap_or(d.ns3),
                    },
                )
            }
            "cake" => {
                let d = CakeParams::default();
                QueueConfig::Cake(
                    limit,
                    CakeParams {
                        bandwidth_bps: self.bandwidth_bps.or(link_bps).unwrap_or(d.bandwidth_bps),
                        diffserv: choice(&self.diffserv, "diffserv", d.diffserv, DiffservMode::from_name, &DiffservMode::ALL.map(DiffservMode::name))?,
                        flow_mode: choice(&self.flow_mode, "flow_mode", d.flow_mode, FlowMode::from_name, &FlowMode::ALL.map(FlowMode::name))?,
                        target: self.target_ns.map_or(d.target, Duration),
                        interval: self.interval_ns.map_or(d.interval, Duration),
                        overhead: self.overhead,
                        mpu: self.mpu.unwrap_or(d.mpu),
                        framing: choice(&self.framing, "framing", d.framing, Framing::from_name, &["none", "atm", "ptm"])?,
                        wash: self.wash.unwrap_or(d.wash),
                        memory_limit_bytes: self.memory_limit_bytes,
                        ack_filter: choice(&self.ack_filter, "ack_filter", d.ack_filter, AckFilter::from_name, &AckFilter::ALL.map(AckFilter::name))?,
                        mtu_bytes: self.mtu_bytes.unwrap_or(d.mtu_bytes),
                    },
                )
            }
            _ => {
                let d = PieParams::default();
                QueueConfig::Pie(
                    limit,
                    PieParams {
                        target: self.target_ns.map_or(d.target, Duration),
                        tupdate: self.tupdate_ns.map_or(d.tupdate, Duration),
                        alpha: self.alpha.unwrap_or(d.alpha),
                        beta: self.beta.unwrap_or(d.beta),
                        max_burst: self.max_burst_ns.map_or(d.max_burst, Duration),
                        ecn: self.ecn.unwrap_or(d.ecn),
                        ecn_prob: self.ecn_prob.unwrap_or(d.ecn_prob),
                        bytemode: self.bytemode.unwrap_or(d.bytemode),
                        dq_rate_estimator: self.dq_rate_estimator.unwrap_or(d.dq_rate_estimator),
                        ns3: self.ns3.unwrap_or(d.ns3),
                        mtu_bytes: self.mtu_bytes.unwrap_or(d.mtu_bytes),
                    },
                )
            }
        };
        q.validate()?;
        Ok(q)
    }
}

/// The disciplines the datapath knows, in the order the docs list them.
pub const DISCIPLINES: [&str; 7] = ["droptail", "drophead", "codel", "fq_codel", "red", "pie", "cake"];

/// A named choice, or the default; an error lists the names.
fn choice<T>(given: &Option<String>, key: &str, default: T, parse: fn(&str) -> Option<T>, names: &[&str]) -> Result<T, String> {
    match given {
        None => Ok(default),
        Some(name) => parse(name).ok_or_else(|| format!("{key}: {name:?} is not one of {}", names.join(", "))),
    }
}

/// A discipline's parameters as the config names them, each with the core's default in the
/// config's unit (null: derived from the limit or the link's rate). The keys are also what
/// `QueueJson::resolve` accepts. bloatlab's catalogue of disciplines
/// (src/bloatlab/specs/disciplines.py) declares the same; a test holds the two equal through
/// `bloatlab-link --describe`.
pub fn discipline_defaults(discipline: &str) -> Option<Map<String, Value>> {
    let codel = |p: &CodelParams| {
        json!({"target_ns": p.target.nanos(), "interval_ns": p.interval.nanos(), "ecn": p.ecn, "mtu_bytes": p.mtu_bytes,
               "coarse_time": p.coarse_time})
    };
    let value = match discipline {
        "droptail" | "drophead" => json!({}),
        "codel" => codel(&CodelParams::default()),
        "fq_codel" => {
            let d = FqCodelParams::default();
            let mut v = codel(&d.codel);
            let extra = json!({"flows": d.flows, "quantum_bytes": d.quantum_bytes,
                               "memory_limit_bytes": d.memory_limit_bytes, "drop_batch": d.drop_batch});
            v.as_object_mut()?.extend(extra.as_object()?.clone());
            v
        }
        "red" => {
            let d = RedParams::default();
            json!({"min": d.min, "max": d.max, "avpkt_bytes": d.avpkt_bytes, "burst_pkts": d.burst_pkts,
                   "probability": d.probability, "bandwidth_bps": d.bandwidth_bps, "ecn": d.ecn,
                   "harddrop": d.harddrop, "adaptive": d.adaptive, "gentle": d.gentle, "ns3": d.ns3})
        }
        "cake" => {
            let d = CakeParams::default();
            // bandwidth null: the link's rate; overhead null: the frame as it is; memory_limit
            // null: derived from the rate.
            json!({"bandwidth_bps": null, "diffserv": d.diffserv.name(), "flow_mode": d.flow_mode.name(),
                   "target_ns": d.target.nanos(), "interval_ns": d.interval.nanos(), "overhead": d.overhead,
                   "mpu": d.mpu, "framing": d.framing.name(), "wash": d.wash, "memory_limit_bytes": d.memory_limit_bytes,
                   "ack_filter": d.ack_filter.name(), "mtu_bytes": d.mtu_bytes})
        }
        "pie" => {
            let d = PieParams::default();
            json!({"target_ns": d.target.nanos(), "tupdate_ns": d.tupdate.nanos(), "alpha": d.alpha, "beta": d.beta,
                   "max_burst_ns": d.max_burst.nanos(), "ecn": d.ecn, "ecn_prob": d.ecn_prob, "bytemode": d.bytemode,
                   "dq_rate_estimator": d.dq_rate_estimator, "mtu_bytes": d.mtu_bytes, "ns3": d.ns3})
        }
        _ => return None,
    };
    value.as_object().cloned()
}

/// What the config takes and the stats and logs report: every discipline's parameters with
/// their defaults, and the codes of the drop and mark reasons (`bloatlab-link --describe`).
pub fn describe() -> Value {
    let disciplines: Map<String, Value> =
        DISCIPLINES.iter().map(|d| (d.to_string(), Value::Object(discipline_defaults(d).unwrap_or_default()))).collect();
    let codes = |all: &mut dyn Iterator<Item = (u8, &'static str)>| -> Map<String, Value> {
        all.map(|(code, name)| (code.to_string(), json!(name))).collect()
    };
    json!({
        "version": bloatlab_core::VERSION,
        "disciplines": disciplines,
        "drop_reasons": codes(&mut DropReason::ALL.iter().map(|r| (*r as u8, r.name()))),
        "mark_reasons": codes(&mut MarkReason::ALL.iter().map(|r| (*r as u8, r.name()))),
    })
}

impl Config {
    pub fn load(path: &str) -> Result<Config, String> {
        let cfg: Config = load_json(path)?;
        if cfg.links.is_empty() {
            return Err("links: no link to emulate".into());
        }
        if let Some(b) = &cfg.batching {
            b.validate()?;
        }
        if let Some(n) = cfg.workers.filter(|n| !(1..=MAX_WORKERS).contains(n)) {
            return Err(format!("workers: {n} is not from 1 to {MAX_WORKERS} (absent: one per core)"));
        }
        if cfg.max_lead_ns > MAX_LEAD_LIMIT_NS {
            return Err(format!("max_lead_ns: {} is above {MAX_LEAD_LIMIT_NS} (20 ms)", cfg.max_lead_ns));
        }
        if !(0.5..=1.0).contains(&cfg.lead_quantile) {
            return Err(format!("lead_quantile: {} is not a share from 0.5 to 1", cfg.lead_quantile));
        }
        if !(0.0..=1.0).contains(&cfg.spin_share) {
            return Err(format!("spin_share: {} is not a share from 0 to 1", cfg.spin_share));
        }
        for (i, l) in cfg.links.iter().enumerate() {
            // Names key the stats file and the queue logs' file names.
            if cfg.links[..i].iter().any(|o| o.name == l.name) {
                return Err(format!("links[{i}].name: {:?} names an earlier link too; names must be unique", l.name));
            }
            let (a, b) = l.ends().map_err(|e| format!("links[{i}].{e}"))?;
            if a == b {
                return Err(format!("links[{i}].b_iface: the link's two ends are the same ({a:?})"));
            }
            l.forward.resolve().map_err(|e| format!("links[{i}].forward.{e}"))?;
            l.reverse.resolve().map_err(|e| format!("links[{i}].reverse.{e}"))?;
            for (which, d) in [("forward", &l.forward), ("reverse", &l.reverse)] {
                if let Some(c) = &d.capture {
                    c.validate().map_err(|e| format!("links[{i}].{which}.{e}"))?;
                }
            }
        }
        Ok(cfg)
    }
}

/// Reads a JSON file into `T`; an error names the offending field (or the file), on one line.
pub fn load_json<T: serde::de::DeserializeOwned>(path: &str) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("config {path}: {e}"))?;
    // Deserialise with the path of the offending field, so errors name it.
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        if field == "." { format!("config {path}: {inner}") } else { format!("{field}: {inner}") }
    })
}

impl DirectionJson {
    /// The constant rate its ring is sized for; None for an unlimited link or a trace.
    pub fn ring_rate_bps(&self) -> Option<u64> {
        self.rate_bps.filter(|_| self.trace_path.is_none())
    }

    /// The core's config; an error starts with the field's name.
    pub fn resolve(&self) -> Result<DirectionConfig, String> {
        let rate = match (self.rate_bps, &self.trace_path) {
            (Some(_), Some(_)) => return Err("rate_bps: give a rate or a trace, not both".into()),
            (Some(0), None) => return Err("rate_bps: must be positive (null means unlimited)".into()),
            (Some(bps), None) if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&bps) => {
                return Err(format!("rate_bps: {bps} is not from {MIN_RATE_BPS} to {MAX_RATE_BPS} bit/s (null means unlimited)"))
            }
            (Some(bps), None) => Rate::Constant { bps },
            (None, Some(p)) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("trace_path: {}: {e}", p.display()))?;
                Rate::Trace(Trace::parse(&text).map_err(|e| format!("trace_path: {}: {e}", p.display()))?)
            }
            (None, None) => Rate::Unlimited,
        };
        if self.delay_ns > MAX_DELAY_NS {
            return Err(format!("delay_ns: {} is above {MAX_DELAY_NS} (10 s)", self.delay_ns));
        }
        if let Some(n) = self.max_frame_bytes.filter(|n| !FRAME_BYTES.contains(n)) {
            return Err(format!("max_frame_bytes: {n} is not from {} to {}", FRAME_BYTES.start(), FRAME_BYTES.end()));
        }
        if self.jitter_ns > self.delay_ns {
            return Err("jitter_ns: must not exceed delay_ns".into());
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!("loss: {} is not a probability in [0, 1)", self.loss));
        }
        let queue = self.queue.resolve(self.rate_bps).map_err(|e| if e.starts_with("queue") { e } else { format!("queue.{e}") })?;
        Ok(DirectionConfig {
            rate,
            delay: Duration(self.delay_ns),
            jitter: Duration(self.jitter_ns),
            loss: self.loss,
            queue,
            seed: self.seed,
            max_frame_bytes: self.max_frame_bytes.unwrap_or(DEFAULT_MAX_FRAME_BYTES),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direction(extra: &str) -> Result<DirectionConfig, String> {
        let text = format!(r#"{{"queue": {{"discipline": "droptail", "packets": 100}}{extra}}}"#);
        let d: DirectionJson = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        d.resolve()
    }

    #[test]
    fn a_direction_is_held_to_the_bounds_of_the_specs() {
        assert!(direction(r#", "rate_bps": 10000, "delay_ns": 10000000000"#).is_ok());
        let err = |extra: &str| direction(extra).err().unwrap_or_default();
        assert!(err(r#", "rate_bps": 10000000000000000000"#).starts_with("rate_bps: 10000000000000000000 is not from 10000 to"));
        assert!(err(r#", "rate_bps": 9999"#).starts_with("rate_bps: 9999 is not from"));
        assert!(err(r#", "delay_ns": 10000000001"#).starts_with("delay_ns: 10000000001 is above"));
        assert!(err(r#", "loss": 1.0"#).starts_with("loss: 1 is not a probability"));
        assert!(err(r#", "max_frame_bytes": 14"#).starts_with("max_frame_bytes: 14 is not from 15"));
        let queue = |q: &str| {
            let d: DirectionJson = serde_json::from_str(&format!(r#"{{"queue": {q}}}"#)).unwrap();
            d.resolve().err().unwrap_or_default()
        };
        assert!(queue(r#"{"discipline": "droptail", "packets": 1000001}"#).starts_with("queue.packets: 1000001 is above"));
        assert!(queue(r#"{"discipline": "droptail", "bytes": 1073741825}"#).starts_with("queue.bytes: 1073741825 is above"));
    }

    #[test]
    fn batching_takes_defaults_for_what_is_absent_and_is_held_to_its_bounds() {
        let parse = |text: &str| serde_json::from_str::<Batching>(text).map_err(|e| e.to_string()).and_then(|b| b.validate().map(|_| b));
        assert_eq!(parse("{}"), Ok(Batching::default()));
        assert_eq!(parse(r#"{"sleep_ns": 100000}"#).unwrap().sleep_ns, 100_000);
        let err = |text: &str| parse(text).err().unwrap_or_default();
        assert!(err(r#"{"enter_pressure": 1.5}"#).starts_with("batching.enter_pressure: 1.5 is not a share"));
        assert!(err(r#"{"enter_pressure": 1.0}"#).starts_with("batching.enter_pressure: 1 is not a share from 0 to below 1"));
        assert!(err(r#"{"exit_pressure": -0.1}"#).starts_with("batching.exit_pressure: -0.1 is not a share"));
        assert!(err(r#"{"exit_pressure": 0.4}"#).starts_with("batching.exit_pressure: 0.4 must be below enter_pressure (0.4)"));
        assert!(err(r#"{"spin_share": 0.9}"#).starts_with("batching.spin_share: 0.9 is not from 0 to 0.75"));
        assert!(err(r#"{"sleep_ns": 0}"#).starts_with("batching.sleep_ns: 0 is not from 1"));
        assert!(err(r#"{"sleep_ns": 1000001}"#).starts_with("batching.sleep_ns: 1000001"));
        assert!(err(r#"{"spin": 1}"#).contains("unknown field"));
    }
}
