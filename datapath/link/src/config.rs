//! The process's JSON config the Python control plane writes (see docs/datapath.md): its
//! links, switches and scheduling. Each link direction is read and resolved into the core's
//! types by bloatlab-config, once, as the replay's is. Errors name the field, on one line.

use std::path::PathBuf;

use bloatlab_config::queue::discipline_defaults;
use bloatlab_config::{Direction, DirectionJson, DISCIPLINES};
use bloatlab_core::{DropReason, MarkReason};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use bloatlab_config::load_json;

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
    /// The links' directions as `load` resolved them: link i's forward at 2i, its reverse at
    /// 2i + 1 (the plan's DirId).
    #[serde(skip)]
    pub directions: Vec<Direction>,
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

fn yes() -> bool {
    true
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
        let mut cfg: Config = load_json(path)?;
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
        let mut directions = Vec::with_capacity(2 * cfg.links.len());
        for (i, l) in cfg.links.iter().enumerate() {
            // Names key the stats file and the queue logs' file names.
            if cfg.links[..i].iter().any(|o| o.name == l.name) {
                return Err(format!("links[{i}].name: {:?} names an earlier link too; names must be unique", l.name));
            }
            let (a, b) = l.ends().map_err(|e| format!("links[{i}].{e}"))?;
            if a == b {
                return Err(format!("links[{i}].b_iface: the link's two ends are the same ({a:?})"));
            }
            for (which, d) in [("forward", &l.forward), ("reverse", &l.reverse)] {
                directions.push(d.resolve().map_err(|e| format!("links[{i}].{which}.{e}"))?);
            }
        }
        cfg.directions = directions;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
