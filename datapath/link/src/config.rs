//! The JSON config the Python control plane writes (see docs/datapath.md), validated into
//! the core's types. Errors name the field, on one line.

use std::path::PathBuf;

use bloatlab_core::pipeline::DEFAULT_MAX_FRAME_BYTES;
use bloatlab_core::qdisc::{Limit, QueueConfig};
use bloatlab_core::rate::{Rate, Trace};
use bloatlab_core::{DirectionConfig, Duration};
use serde::Deserialize;

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
    /// SCHED_FIFO priority of the link threads; 0 keeps normal scheduling.
    #[serde(default)]
    pub rt_priority: i32,
}

fn default_spin_ns() -> u64 {
    50_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub name: String,
    pub a_iface: String,
    pub b_iface: String,
    pub forward: DirectionJson,
    pub reverse: DirectionJson,
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
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueJson {
    discipline: String,
    packets: Option<usize>,
    bytes: Option<usize>,
}

impl Config {
    pub fn load(path: &str) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("config {path}: {e}"))?;
        // Deserialise with the path of the offending field, so errors name it.
        let cfg: Config = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            if field == "." { format!("config {path}: {inner}") } else { format!("{field}: {inner}") }
        })?;
        if cfg.links.is_empty() {
            return Err("links: no link to emulate".into());
        }
        for (i, l) in cfg.links.iter().enumerate() {
            // Names key the stats file and the queue logs' file names.
            if cfg.links[..i].iter().any(|o| o.name == l.name) {
                return Err(format!("links[{i}].name: {:?} names an earlier link too; names must be unique", l.name));
            }
            l.forward.resolve().map_err(|e| format!("links[{i}].forward.{e}"))?;
            l.reverse.resolve().map_err(|e| format!("links[{i}].reverse.{e}"))?;
        }
        Ok(cfg)
    }
}

impl DirectionJson {
    /// The core's config; an error starts with the field's name.
    pub fn resolve(&self) -> Result<DirectionConfig, String> {
        let rate = match (self.rate_bps, &self.trace_path) {
            (Some(_), Some(_)) => return Err("rate_bps: give a rate or a trace, not both".into()),
            (Some(0), None) => return Err("rate_bps: must be positive (null means unlimited)".into()),
            (Some(bps), None) => Rate::Constant { bps },
            (None, Some(p)) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("trace_path: {}: {e}", p.display()))?;
                Rate::Trace(Trace::parse(&text).map_err(|e| format!("trace_path: {}: {e}", p.display()))?)
            }
            (None, None) => Rate::Unlimited,
        };
        if self.jitter_ns > self.delay_ns {
            return Err("jitter_ns: must not exceed delay_ns".into());
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!("loss: {} is not a probability in [0, 1)", self.loss));
        }
        let limit = match (self.queue.packets, self.queue.bytes) {
            (Some(0), _) | (_, Some(0)) => return Err("queue: a limit of 0 holds nothing".into()),
            (Some(n), None) => Limit::Packets(n),
            (None, Some(b)) => Limit::Bytes(b),
            _ => return Err("queue: give exactly one of packets or bytes".into()),
        };
        let queue = match self.queue.discipline.as_str() {
            "droptail" => QueueConfig::DropTail(limit),
            "drophead" => QueueConfig::DropHead(limit),
            other => return Err(format!("queue.discipline: unknown discipline {other:?} (droptail, drophead)")),
        };
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
