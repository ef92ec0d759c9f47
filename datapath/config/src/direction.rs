//! One direction of a link as the config gives it: rate or trace, delay, jitter, loss, queue,
//! seed, the flows it marks ECT(1), and the link's own settings for it (queue log, captures).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use bloatlab_core::pipeline::DEFAULT_MAX_FRAME_BYTES;
use bloatlab_core::rate::{Rate, Trace};
use bloatlab_core::{DirectionConfig, Duration, Ipv4Pair};
use serde::Deserialize;

use crate::queue::QueueJson;

/// The bounds bloatlab's specs hold a direction to (src/bloatlab/specs: units, topology,
/// disciplines), held here again so that a config written by hand meets the same ones.
pub const MIN_RATE_BPS: u64 = 10_000;
pub const MAX_RATE_BPS: u64 = 400_000_000_000;
pub const MAX_DELAY_NS: u64 = 10_000_000_000;
/// The smallest Ethernet header with something after it, and the largest IPv4 packet plus one.
pub const FRAME_BYTES: std::ops::RangeInclusive<usize> = 15..=65_549;

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
    #[serde(default = "yes")]
    qlog: bool,
    #[serde(default)]
    capture: Option<CaptureJson>,
    #[serde(default)]
    ect1_rewrite: Vec<Ect1RewriteJson>,
}

/// A flow whose ECT(0) packets this direction turns into ECT(1) as they arrive: IPv4 TCP packets
/// from `src` to `dst` (dotted quads).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ect1RewriteJson {
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

fn yes() -> bool {
    true
}

/// A direction, resolved: what the core runs, and what the link does around it.
#[derive(Clone, Debug)]
pub struct Direction {
    pub config: DirectionConfig,
    /// Write its queue log (when the link's config has a log_dir).
    pub qlog: bool,
    /// Capture its departures and drops to pcapng files.
    pub capture: Option<CaptureJson>,
}

impl DirectionJson {
    /// The core's config, its trace read; an error starts with the field's name.
    pub fn resolve(&self) -> Result<Direction, String> {
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
        let queue = self.queue.resolve(self.rate_bps)?;
        if let Some(c) = &self.capture {
            c.validate()?;
        }
        let config = DirectionConfig {
            rate,
            delay: Duration(self.delay_ns),
            jitter: Duration(self.jitter_ns),
            loss: self.loss,
            queue,
            seed: self.seed,
            max_frame_bytes: self.max_frame_bytes.unwrap_or(DEFAULT_MAX_FRAME_BYTES),
            ect1_rewrite: self.ect1_rewrite.iter().map(|p| Ipv4Pair { src: p.src.octets(), dst: p.dst.octets() }).collect(),
        };
        Ok(Direction { config, qlog: self.qlog, capture: self.capture.clone() })
    }
}

/// Whole Ethernet headers at least; the most any capture tool keeps (tcpdump's default).
pub const SNAPLEN_RANGE: (u32, u32) = (14, 262_144);
/// Room for the header blocks and a frame or two.
pub const MIN_LIMIT_BYTES: u64 = 4096;

/// A direction's `capture` (bloatlab-link's capture.rs writes the files).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct CaptureJson {
    /// What the interface is called in the files (the direction's name, "s0->h2").
    pub name: String,
    pub departures_path: PathBuf,
    pub drops_path: PathBuf,
    /// The most bytes kept of each frame.
    pub snaplen: u32,
    /// The most bytes each file grows to.
    pub limit_bytes: u64,
}

impl CaptureJson {
    pub fn validate(&self) -> Result<(), String> {
        let (lo, hi) = SNAPLEN_RANGE;
        if !(lo..=hi).contains(&self.snaplen) {
            return Err(format!("capture.snaplen: {} is outside {lo}..{hi} bytes", self.snaplen));
        }
        if self.limit_bytes < MIN_LIMIT_BYTES {
            return Err(format!("capture.limit_bytes: {} is below {MIN_LIMIT_BYTES} bytes", self.limit_bytes));
        }
        if self.departures_path == self.drops_path {
            return Err("capture.drops_path: must differ from departures_path".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_json;

    fn direction(extra: &str) -> Result<Direction, String> {
        let text = format!(r#"{{"queue": {{"discipline": "droptail", "packets": 100}}{extra}}}"#);
        parse_json::<DirectionJson>(&text, "test.json")?.resolve()
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
    fn ect1_rewrite_takes_pairs_of_ipv4_addresses() {
        let d = direction(r#", "ect1_rewrite": [{"src": "10.0.0.1", "dst": "10.0.0.2"}]"#).unwrap();
        assert_eq!(d.config.ect1_rewrite, vec![Ipv4Pair { src: [10, 0, 0, 1], dst: [10, 0, 0, 2] }]);
        assert!(direction("").unwrap().config.ect1_rewrite.is_empty(), "absent: none");
        let err = |extra: &str| direction(extra).err().unwrap_or_default();
        assert!(err(r#", "ect1_rewrite": [{"src": "10.0.0.300", "dst": "10.0.0.2"}]"#).starts_with("ect1_rewrite[0].src: "));
        assert!(err(r#", "ect1_rewrite": [{"src": "::1", "dst": "10.0.0.2"}]"#).starts_with("ect1_rewrite[0].src: "));
        assert!(err(r#", "ect1_rewrite": [{"src": "10.0.0.1"}]"#).starts_with("ect1_rewrite[0]: missing field `dst`"));
    }

    #[test]
    fn a_capture_is_checked_with_its_direction() {
        let capture = |snaplen: u32, limit_bytes: u64| {
            direction(&format!(r#", "capture": {{"name": "a->b", "departures_path": "/d", "drops_path": "/x", "snaplen": {snaplen}, "limit_bytes": {limit_bytes}}}"#))
        };
        assert_eq!(capture(128, 1 << 20).unwrap().capture.unwrap().snaplen, 128);
        assert!(capture(4, 1 << 20).err().unwrap().starts_with("capture.snaplen: 4 is outside"));
        assert!(capture(128, 100).err().unwrap().starts_with("capture.limit_bytes: 100 is below"));
    }
}
