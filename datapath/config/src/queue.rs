//! A direction's queue as the config gives it (docs/queues.md): the `discipline` key chooses
//! the variant, each discipline's struct takes its own parameters only (another's is an
//! unknown field), and absent or null ones take the core's defaults (Linux's).
//!
//! The JSON is internally tagged, `{"discipline": "codel", "packets": 1000, "target_ns": ...}`,
//! but read by hand rather than by `#[serde(tag = "discipline")]`: serde's derived form buffers
//! the object before choosing the variant, and its errors then name the queue rather than the
//! field (`queue: invalid value`, not `queue.packets: invalid value`).

use std::fmt;

use bloatlab_core::qdisc::{
    AckFilter, CakeParams, CodelParams, DiffservMode, DualPi2Params, EcnMask, FlowMode, FqCodelParams, Framing, Limit, PieParams, QueueConfig, RedParams,
};
use bloatlab_core::Duration;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub const MAX_QUEUE_PACKETS: usize = 1_000_000;
pub const MAX_QUEUE_BYTES: usize = 1 << 30;
/// The longest duration a discipline's parameter may be (the catalogue's, 10 s), held here again
/// so that a config written by hand meets it too: the core adds these to times, and a value
/// near 2^64 ns overflows.
pub const MAX_DURATION_NS: u64 = 10_000_000_000;

/// The disciplines the datapath knows, in the order the docs list them.
pub const DISCIPLINES: [&str; 8] = ["droptail", "drophead", "codel", "fq_codel", "red", "pie", "cake", "dualpi2"];

/// The keys every queue takes, whatever its discipline.
const LIMIT_KEYS: [&str; 3] = ["discipline", "packets", "bytes"];

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "discipline")]
pub enum QueueJson {
    #[serde(rename = "droptail")]
    DropTail(FifoJson),
    #[serde(rename = "drophead")]
    DropHead(FifoJson),
    #[serde(rename = "codel")]
    Codel(CodelJson),
    #[serde(rename = "fq_codel")]
    FqCodel(FqCodelJson),
    #[serde(rename = "red")]
    Red(RedJson),
    #[serde(rename = "pie")]
    Pie(PieJson),
    #[serde(rename = "cake")]
    Cake(CakeJson),
    #[serde(rename = "dualpi2")]
    DualPi2(DualPi2Json),
}

/// droptail's and drophead's: a limit, nothing else.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FifoJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CodelJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub target_ns: Option<u64>,
    pub interval_ns: Option<u64>,
    pub ecn: Option<bool>,
    pub mtu_bytes: Option<u32>,
    pub coarse_time: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FqCodelJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub target_ns: Option<u64>,
    pub interval_ns: Option<u64>,
    pub ecn: Option<bool>,
    pub mtu_bytes: Option<u32>,
    pub coarse_time: Option<bool>,
    pub flows: Option<u32>,
    pub quantum_bytes: Option<u32>,
    pub memory_limit_bytes: Option<u64>,
    pub drop_batch: Option<u32>,
}

/// RED's: null thresholds and burst are derived from the limit (tc's rules, red.rs), a null
/// bandwidth is the direction's rate.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub min: Option<u64>,
    pub max: Option<u64>,
    pub avpkt_bytes: Option<u32>,
    pub burst_pkts: Option<u32>,
    pub probability: Option<f64>,
    pub bandwidth_bps: Option<u64>,
    pub ecn: Option<bool>,
    pub harddrop: Option<bool>,
    pub adaptive: Option<bool>,
    pub gentle: Option<bool>,
    pub ns3: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PieJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub target_ns: Option<u64>,
    pub tupdate_ns: Option<u64>,
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub max_burst_ns: Option<u64>,
    pub ecn: Option<bool>,
    pub ecn_prob: Option<f64>,
    pub bytemode: Option<bool>,
    pub dq_rate_estimator: Option<bool>,
    pub mtu_bytes: Option<u32>,
    pub ns3: Option<bool>,
}

/// CAKE's: a null bandwidth is the direction's rate (0: unlimited), a null overhead the
/// frame's own length, a null memory limit derived from the bandwidth (cake/params.rs).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CakeJson {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub bandwidth_bps: Option<u64>,
    pub diffserv: Option<String>,
    pub flow_mode: Option<String>,
    pub target_ns: Option<u64>,
    pub interval_ns: Option<u64>,
    pub overhead: Option<i32>,
    pub mpu: Option<u32>,
    pub framing: Option<String>,
    pub wash: Option<bool>,
    pub memory_limit_bytes: Option<u64>,
    pub ack_filter: Option<String>,
    pub mtu_bytes: Option<u32>,
}

/// DualPI2's: a null step_packets puts the step threshold in time (step_thresh_ns), a null
/// memory limit derives it from the limit (dualpi2.rs).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DualPi2Json {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
    pub target_ns: Option<u64>,
    pub tupdate_ns: Option<u64>,
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub step_thresh_ns: Option<u64>,
    pub step_packets: Option<u32>,
    pub min_qlen_step: Option<u32>,
    pub coupling_factor: Option<u32>,
    pub classic_protection_percent: Option<u32>,
    pub ecn_mask: Option<String>,
    pub drop_on_overload: Option<bool>,
    pub drop_early: Option<bool>,
    pub memory_limit_bytes: Option<u64>,
    pub mtu_bytes: Option<u32>,
}

impl QueueJson {
    /// The core's queue config; an error names the field from the direction (`queue.target: ...`).
    /// `link_bps` is the direction's rate: RED's and CAKE's default bandwidth when it has one.
    pub fn resolve(&self, link_bps: Option<u64>) -> Result<QueueConfig, String> {
        let (packets, bytes) = self.limit_given();
        let limit = match (packets, bytes) {
            (Some(0), _) | (_, Some(0)) => return Err("queue: a limit of 0 holds nothing".into()),
            (Some(n), _) if n > MAX_QUEUE_PACKETS => return Err(format!("queue.packets: {n} is above {MAX_QUEUE_PACKETS}")),
            (_, Some(b)) if b > MAX_QUEUE_BYTES => return Err(format!("queue.bytes: {b} is above {MAX_QUEUE_BYTES} (1 GiB)")),
            (Some(n), None) => Limit::Packets(n),
            (None, Some(b)) => Limit::Bytes(b),
            _ => return Err("queue: give exactly one of packets or bytes".into()),
        };
        if let Some((key, ns)) = self.durations_given().into_iter().find_map(|(key, ns)| Some((key, ns?)).filter(|&(_, ns)| ns > MAX_DURATION_NS)) {
            return Err(format!("queue.{key}: {ns} is above {MAX_DURATION_NS} (10 s)"));
        }
        let q = match self {
            QueueJson::DropTail(_) => QueueConfig::DropTail(limit),
            QueueJson::DropHead(_) => QueueConfig::DropHead(limit),
            QueueJson::Codel(j) => QueueConfig::Codel(limit, codel(j.target_ns, j.interval_ns, j.ecn, j.mtu_bytes, j.coarse_time, CodelParams::default())),
            QueueJson::FqCodel(j) => {
                let d = FqCodelParams::default();
                QueueConfig::FqCodel(
                    limit,
                    FqCodelParams {
                        flows: j.flows.unwrap_or(d.flows),
                        quantum_bytes: j.quantum_bytes.unwrap_or(d.quantum_bytes),
                        memory_limit_bytes: j.memory_limit_bytes.unwrap_or(d.memory_limit_bytes),
                        drop_batch: j.drop_batch.unwrap_or(d.drop_batch),
                        codel: codel(j.target_ns, j.interval_ns, j.ecn, j.mtu_bytes, j.coarse_time, d.codel),
                    },
                )
            }
            QueueJson::Red(j) => {
                let d = RedParams::default();
                QueueConfig::Red(
                    limit,
                    RedParams {
                        min: j.min.or(d.min),
                        max: j.max.or(d.max),
                        avpkt_bytes: j.avpkt_bytes.unwrap_or(d.avpkt_bytes),
                        burst_pkts: j.burst_pkts.or(d.burst_pkts),
                        probability: j.probability.unwrap_or(d.probability),
                        bandwidth_bps: j.bandwidth_bps.or(link_bps).unwrap_or(d.bandwidth_bps),
                        ecn: j.ecn.unwrap_or(d.ecn),
                        harddrop: j.harddrop.unwrap_or(d.harddrop),
                        adaptive: j.adaptive.unwrap_or(d.adaptive),
                        gentle: j.gentle.unwrap_or(d.gentle),
                        ns3: j.ns3.unwrap_or(d.ns3),
                    },
                )
            }
            QueueJson::Pie(j) => {
                let d = PieParams::default();
                QueueConfig::Pie(
                    limit,
                    PieParams {
                        target: j.target_ns.map_or(d.target, Duration),
                        tupdate: j.tupdate_ns.map_or(d.tupdate, Duration),
                        alpha: j.alpha.unwrap_or(d.alpha),
                        beta: j.beta.unwrap_or(d.beta),
                        max_burst: j.max_burst_ns.map_or(d.max_burst, Duration),
                        ecn: j.ecn.unwrap_or(d.ecn),
                        ecn_prob: j.ecn_prob.unwrap_or(d.ecn_prob),
                        bytemode: j.bytemode.unwrap_or(d.bytemode),
                        dq_rate_estimator: j.dq_rate_estimator.unwrap_or(d.dq_rate_estimator),
                        ns3: j.ns3.unwrap_or(d.ns3),
                        mtu_bytes: j.mtu_bytes.unwrap_or(d.mtu_bytes),
                    },
                )
            }
            QueueJson::Cake(j) => {
                let d = CakeParams::default();
                QueueConfig::Cake(
                    limit,
                    CakeParams {
                        bandwidth_bps: j.bandwidth_bps.or(link_bps).unwrap_or(d.bandwidth_bps),
                        diffserv: choice(&j.diffserv, "diffserv", d.diffserv, DiffservMode::from_name, &DiffservMode::ALL.map(DiffservMode::name))?,
                        flow_mode: choice(&j.flow_mode, "flow_mode", d.flow_mode, FlowMode::from_name, &FlowMode::ALL.map(FlowMode::name))?,
                        target: j.target_ns.map_or(d.target, Duration),
                        interval: j.interval_ns.map_or(d.interval, Duration),
                        overhead: j.overhead,
                        mpu: j.mpu.unwrap_or(d.mpu),
                        framing: choice(&j.framing, "framing", d.framing, Framing::from_name, &["none", "atm", "ptm"])?,
                        wash: j.wash.unwrap_or(d.wash),
                        memory_limit_bytes: j.memory_limit_bytes,
                        ack_filter: choice(&j.ack_filter, "ack_filter", d.ack_filter, AckFilter::from_name, &AckFilter::ALL.map(AckFilter::name))?,
                        mtu_bytes: j.mtu_bytes.unwrap_or(d.mtu_bytes),
                    },
                )
            }
            QueueJson::DualPi2(j) => {
                let d = DualPi2Params::default();
                QueueConfig::DualPi2(
                    limit,
                    DualPi2Params {
                        target: j.target_ns.map_or(d.target, Duration),
                        tupdate: j.tupdate_ns.map_or(d.tupdate, Duration),
                        alpha: j.alpha.unwrap_or(d.alpha),
                        beta: j.beta.unwrap_or(d.beta),
                        step_thresh: j.step_thresh_ns.map_or(d.step_thresh, Duration),
                        step_packets: j.step_packets,
                        min_qlen_step: j.min_qlen_step.unwrap_or(d.min_qlen_step),
                        coupling_factor: j.coupling_factor.unwrap_or(d.coupling_factor),
                        classic_protection_percent: j.classic_protection_percent.unwrap_or(d.classic_protection_percent),
                        ecn_mask: choice(&j.ecn_mask, "ecn_mask", d.ecn_mask, EcnMask::from_name, &EcnMask::ALL.map(EcnMask::name))?,
                        drop_on_overload: j.drop_on_overload.unwrap_or(d.drop_on_overload),
                        drop_early: j.drop_early.unwrap_or(d.drop_early),
                        memory_limit_bytes: j.memory_limit_bytes,
                        mtu_bytes: j.mtu_bytes.unwrap_or(d.mtu_bytes),
                    },
                )
            }
        };
        q.validate().map_err(|e| format!("queue.{e}"))?;
        Ok(q)
    }

    /// The durations as given, by key.
    fn durations_given(&self) -> Vec<(&'static str, Option<u64>)> {
        match self {
            QueueJson::DropTail(_) | QueueJson::DropHead(_) | QueueJson::Red(_) => vec![],
            QueueJson::Codel(j) => vec![("target_ns", j.target_ns), ("interval_ns", j.interval_ns)],
            QueueJson::FqCodel(j) => vec![("target_ns", j.target_ns), ("interval_ns", j.interval_ns)],
            QueueJson::Pie(j) => vec![("target_ns", j.target_ns), ("tupdate_ns", j.tupdate_ns), ("max_burst_ns", j.max_burst_ns)],
            QueueJson::Cake(j) => vec![("target_ns", j.target_ns), ("interval_ns", j.interval_ns)],
            QueueJson::DualPi2(j) => vec![("target_ns", j.target_ns), ("tupdate_ns", j.tupdate_ns), ("step_thresh_ns", j.step_thresh_ns)],
        }
    }

    /// The limit as given: (packets, bytes).
    fn limit_given(&self) -> (Option<usize>, Option<usize>) {
        match self {
            QueueJson::DropTail(j) | QueueJson::DropHead(j) => (j.packets, j.bytes),
            QueueJson::Codel(j) => (j.packets, j.bytes),
            QueueJson::FqCodel(j) => (j.packets, j.bytes),
            QueueJson::Red(j) => (j.packets, j.bytes),
            QueueJson::Pie(j) => (j.packets, j.bytes),
            QueueJson::Cake(j) => (j.packets, j.bytes),
            QueueJson::DualPi2(j) => (j.packets, j.bytes),
        }
    }

    /// The discipline with every parameter at the core's default (null where it is derived
    /// from the limit or the link's rate), and no limit.
    pub fn defaults(discipline: &str) -> Option<QueueJson> {
        let (c, fq, red, pie, cake) = (CodelParams::default(), FqCodelParams::default(), RedParams::default(), PieParams::default(), CakeParams::default());
        let dual = DualPi2Params::default();
        Some(match discipline {
            "droptail" => QueueJson::DropTail(FifoJson::default()),
            "drophead" => QueueJson::DropHead(FifoJson::default()),
            "codel" => QueueJson::Codel(CodelJson {
                target_ns: Some(c.target.nanos()), interval_ns: Some(c.interval.nanos()), ecn: Some(c.ecn), mtu_bytes: Some(c.mtu_bytes),
                coarse_time: Some(c.coarse_time), ..CodelJson::default()
            }),
            "fq_codel" => QueueJson::FqCodel(FqCodelJson {
                target_ns: Some(fq.codel.target.nanos()), interval_ns: Some(fq.codel.interval.nanos()), ecn: Some(fq.codel.ecn),
                mtu_bytes: Some(fq.codel.mtu_bytes), coarse_time: Some(fq.codel.coarse_time), flows: Some(fq.flows),
                quantum_bytes: Some(fq.quantum_bytes), memory_limit_bytes: Some(fq.memory_limit_bytes), drop_batch: Some(fq.drop_batch),
                ..FqCodelJson::default()
            }),
            "red" => QueueJson::Red(RedJson {
                min: red.min, max: red.max, avpkt_bytes: Some(red.avpkt_bytes), burst_pkts: red.burst_pkts, probability: Some(red.probability),
                bandwidth_bps: Some(red.bandwidth_bps), ecn: Some(red.ecn), harddrop: Some(red.harddrop), adaptive: Some(red.adaptive),
                gentle: Some(red.gentle), ns3: Some(red.ns3), ..RedJson::default()
            }),
            "pie" => QueueJson::Pie(PieJson {
                target_ns: Some(pie.target.nanos()), tupdate_ns: Some(pie.tupdate.nanos()), alpha: Some(pie.alpha), beta: Some(pie.beta),
                max_burst_ns: Some(pie.max_burst.nanos()), ecn: Some(pie.ecn), ecn_prob: Some(pie.ecn_prob), bytemode: Some(pie.bytemode),
                dq_rate_estimator: Some(pie.dq_rate_estimator), mtu_bytes: Some(pie.mtu_bytes), ns3: Some(pie.ns3), ..PieJson::default()
            }),
            // bandwidth null: the link's rate, else unlimited.
            "cake" => QueueJson::Cake(CakeJson {
                bandwidth_bps: None, diffserv: Some(cake.diffserv.name().into()), flow_mode: Some(cake.flow_mode.name().into()),
                target_ns: Some(cake.target.nanos()), interval_ns: Some(cake.interval.nanos()), overhead: cake.overhead, mpu: Some(cake.mpu),
                framing: Some(cake.framing.name().into()), wash: Some(cake.wash), memory_limit_bytes: cake.memory_limit_bytes,
                ack_filter: Some(cake.ack_filter.name().into()), mtu_bytes: Some(cake.mtu_bytes), ..CakeJson::default()
            }),
            // step_packets null: the step threshold is a time; memory limit null: derived.
            "dualpi2" => QueueJson::DualPi2(DualPi2Json {
                target_ns: Some(dual.target.nanos()), tupdate_ns: Some(dual.tupdate.nanos()), alpha: Some(dual.alpha), beta: Some(dual.beta),
                step_thresh_ns: Some(dual.step_thresh.nanos()), step_packets: dual.step_packets, min_qlen_step: Some(dual.min_qlen_step),
                coupling_factor: Some(dual.coupling_factor), classic_protection_percent: Some(dual.classic_protection_percent),
                ecn_mask: Some(dual.ecn_mask.name().into()), drop_on_overload: Some(dual.drop_on_overload), drop_early: Some(dual.drop_early),
                memory_limit_bytes: dual.memory_limit_bytes, mtu_bytes: Some(dual.mtu_bytes), ..DualPi2Json::default()
            }),
            _ => return None,
        })
    }
}

/// A discipline's parameters as the config names them, each with the core's default in the
/// config's unit (null: derived from the limit or the link's rate): the keys its struct takes
/// besides the limit. bloatlab's catalogue of disciplines (src/bloatlab/specs/disciplines.py)
/// declares the same; a test holds the two equal through `bloatlab-link --describe`.
pub fn discipline_defaults(discipline: &str) -> Option<Map<String, Value>> {
    let Ok(Value::Object(mut params)) = serde_json::to_value(QueueJson::defaults(discipline)?) else {
        unreachable!("a queue serialises to an object")
    };
    params.retain(|key, _| !LIMIT_KEYS.contains(&key.as_str()));
    Some(params)
}

/// CoDel's parameters as FQ-CoDel's and CoDel's JSON give them, over the defaults `d`.
fn codel(target_ns: Option<u64>, interval_ns: Option<u64>, ecn: Option<bool>, mtu_bytes: Option<u32>, coarse_time: Option<bool>, d: CodelParams) -> CodelParams {
    CodelParams {
        target: target_ns.map_or(d.target, Duration),
        interval: interval_ns.map_or(d.interval, Duration),
        ecn: ecn.unwrap_or(d.ecn),
        mtu_bytes: mtu_bytes.unwrap_or(d.mtu_bytes),
        coarse_time: coarse_time.unwrap_or(d.coarse_time),
    }
}

/// A named choice, or the default; an error lists the names.
fn choice<T>(given: &Option<String>, key: &str, default: T, parse: fn(&str) -> Option<T>, names: &[&str]) -> Result<T, String> {
    match given {
        None => Ok(default),
        Some(name) => parse(name).ok_or_else(|| format!("queue.{key}: {name:?} is not one of {}", names.join(", "))),
    }
}

impl<'de> Deserialize<'de> for QueueJson {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_map(QueueVisitor)
    }
}

struct QueueVisitor;

impl<'de> Visitor<'de> for QueueVisitor {
    type Value = QueueJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a queue: an object with a discipline")
    }

    /// Reads the entries up to `discipline`, then the rest straight into that discipline's
    /// struct, so that an error's path ends at its field. Python writes `discipline` first;
    /// entries ahead of it (a config written by hand) wait as JSON values.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QueueJson, A::Error> {
        let mut ahead = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "discipline" {
                let Named(name) = map.next_value()?;
                let rest = MapAccessDeserializer::new(Rest { ahead: ahead.into_iter(), value: None, map });
                return Ok(match name {
                    "droptail" => QueueJson::DropTail(FifoJson::deserialize(rest)?),
                    "drophead" => QueueJson::DropHead(FifoJson::deserialize(rest)?),
                    "codel" => QueueJson::Codel(CodelJson::deserialize(rest)?),
                    "fq_codel" => QueueJson::FqCodel(FqCodelJson::deserialize(rest)?),
                    "red" => QueueJson::Red(RedJson::deserialize(rest)?),
                    "pie" => QueueJson::Pie(PieJson::deserialize(rest)?),
                    "cake" => QueueJson::Cake(CakeJson::deserialize(rest)?),
                    "dualpi2" => QueueJson::DualPi2(DualPi2Json::deserialize(rest)?),
                    _ => unreachable!("Named holds one of DISCIPLINES"),
                });
            }
            ahead.push((key, map.next_value::<Value>()?));
        }
        Err(de::Error::missing_field("discipline"))
    }
}

/// One of DISCIPLINES, checked as it is read so that an error's path ends at `discipline`.
struct Named(&'static str);

impl<'de> Deserialize<'de> for Named {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let name = String::deserialize(de)?;
        match DISCIPLINES.iter().find(|d| **d == name) {
            Some(d) => Ok(Named(d)),
            None => Err(de::Error::custom(format!("unknown discipline {name:?} ({})", DISCIPLINES.join(", ")))),
        }
    }
}

/// A queue's entries after `discipline`: those read ahead of it, then the rest of the object.
struct Rest<A> {
    ahead: std::vec::IntoIter<(String, Value)>,
    /// The value of the entry read ahead whose key was last given, and that key.
    value: Option<(String, Value)>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        match self.ahead.next() {
            Some((key, value)) => {
                let k = seed.deserialize(IntoDeserializer::<A::Error>::into_deserializer(key.clone()))?;
                self.value = Some((key, value));
                Ok(Some(k))
            }
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            // Past the path's tracking: the message names the field instead.
            Some((key, value)) => seed.deserialize(value).map_err(|e| de::Error::custom(format!("{key}: {e}"))),
            None => self.map.next_value_seed(seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direction::DirectionJson;
    use crate::parse_json;

    /// A direction's JSON with this queue, resolved; an error as `load_json` gives it.
    fn resolve(queue: &str) -> Result<QueueConfig, String> {
        let d: DirectionJson = parse_json(&format!(r#"{{"rate_bps": 10000000, "queue": {queue}}}"#), "test.json")?;
        d.resolve().map(|d| d.config.queue)
    }

    fn err(queue: &str) -> String {
        resolve(queue).err().unwrap_or_default()
    }

    /// Each discipline's queue as src/bloatlab/testbed/datapath.py's direction_config writes it
    /// (the catalogue's defaults, resolved for a 10 Mbit/s link), and one limit in bytes.
    const AS_PYTHON_WRITES: [&str; 11] = [
        r#"{"discipline": "droptail", "packets": 1000, "bytes": null}"#,
        r#"{"discipline": "drophead", "packets": 1000, "bytes": null}"#,
        r#"{"discipline": "codel", "packets": 1000, "bytes": null, "target_ns": 5000000, "interval_ns": 100000000, "ecn": false, "coarse_time": false, "mtu_bytes": 1514}"#,
        r#"{"discipline": "fq_codel", "packets": 10240, "bytes": null, "target_ns": 5000000, "interval_ns": 100000000, "ecn": true, "coarse_time": false, "flows": 1024, "quantum_bytes": 1514, "memory_limit_bytes": 33554432, "drop_batch": 64, "mtu_bytes": 1514}"#,
        r#"{"discipline": "red", "packets": 1000, "bytes": null, "min": 83, "max": 250, "avpkt_bytes": 1000, "burst_pkts": 138, "probability": 0.02, "bandwidth_bps": 10000000, "ecn": false, "harddrop": false, "adaptive": false, "gentle": false, "ns3": false}"#,
        r#"{"discipline": "pie", "packets": 1000, "bytes": null, "target_ns": 15000000, "tupdate_ns": 15000000, "alpha": 0.125, "beta": 1.25, "max_burst_ns": 150000000, "ecn": false, "ecn_prob": 0.1, "bytemode": false, "dq_rate_estimator": false, "ns3": false, "mtu_bytes": 1514}"#,
        r#"{"discipline": "cake", "packets": 10240, "bytes": null, "bandwidth_bps": 10000000, "diffserv": "diffserv3", "flow_mode": "triple-isolate", "target_ns": 5000000, "interval_ns": 100000000, "overhead": null, "mpu": 0, "framing": "none", "wash": false, "memory_limit_bytes": null, "ack_filter": "off", "mtu_bytes": 1514}"#,
        r#"{"discipline": "cake", "packets": null, "bytes": 100000, "bandwidth_bps": null, "diffserv": "diffserv3", "flow_mode": "triple-isolate", "target_ns": 5000000, "interval_ns": 100000000, "overhead": null, "mpu": 0, "framing": "none", "wash": false, "memory_limit_bytes": null, "ack_filter": "off", "mtu_bytes": 1514}"#,
        r#"{"discipline": "red", "packets": null, "bytes": 100000, "min": 8333, "max": 25000, "avpkt_bytes": 1000, "burst_pkts": 13, "probability": 0.02, "bandwidth_bps": 10000000, "ecn": false, "harddrop": false, "adaptive": false, "gentle": false, "ns3": false}"#,
        r#"{"discipline": "dualpi2", "packets": 10000, "bytes": null, "target_ns": 15000000, "tupdate_ns": 16000000, "alpha": 0.16015625, "beta": 3.19921875, "step_thresh_ns": 1000000, "step_packets": null, "min_qlen_step": 0, "coupling_factor": 2, "classic_protection_percent": 10, "ecn_mask": "l4s_ect", "drop_on_overload": true, "drop_early": false, "memory_limit_bytes": null, "mtu_bytes": 1514}"#,
        r#"{"discipline": "dualpi2", "packets": null, "bytes": 200000, "target_ns": 15000000, "tupdate_ns": 16000000, "alpha": 0.16015625, "beta": 3.19921875, "step_thresh_ns": 1000000, "step_packets": 4, "min_qlen_step": 0, "coupling_factor": 2, "classic_protection_percent": 10, "ecn_mask": "any_ect", "drop_on_overload": false, "drop_early": false, "memory_limit_bytes": 150000, "mtu_bytes": 1514}"#,
    ];

    #[test]
    fn each_disciplines_queue_as_python_writes_it_is_accepted() {
        let resolved: Vec<QueueConfig> = AS_PYTHON_WRITES.iter().map(|q| resolve(q).unwrap_or_else(|e| panic!("{q}: {e}"))).collect();
        let limits: Vec<Limit> = resolved.iter().map(|q| match q {
            QueueConfig::DropTail(l) | QueueConfig::DropHead(l) | QueueConfig::Codel(l, _) | QueueConfig::FqCodel(l, _)
            | QueueConfig::Red(l, _) | QueueConfig::Pie(l, _) | QueueConfig::Cake(l, _) | QueueConfig::DualPi2(l, _) => *l,
        }).collect();
        assert_eq!(limits[6..], [Limit::Packets(10240), Limit::Bytes(100_000), Limit::Bytes(100_000), Limit::Packets(10_000), Limit::Bytes(200_000)]);
        // Every value lands where it belongs.
        assert_eq!(resolved[2], QueueConfig::Codel(Limit::Packets(1000), CodelParams::default()));
        assert_eq!(resolved[3], QueueConfig::FqCodel(Limit::Packets(10240), FqCodelParams::default()));
        let red = RedParams { min: Some(83), max: Some(250), burst_pkts: Some(138), ..RedParams::default() };
        assert_eq!(resolved[4], QueueConfig::Red(Limit::Packets(1000), red));
        assert_eq!(resolved[5], QueueConfig::Pie(Limit::Packets(1000), PieParams::default()));
        assert_eq!(resolved[6], QueueConfig::Cake(Limit::Packets(10240), CakeParams { bandwidth_bps: 10_000_000, ..CakeParams::default() }));
        // A null bandwidth is the link's rate.
        assert_eq!(resolved[7], QueueConfig::Cake(Limit::Bytes(100_000), CakeParams { bandwidth_bps: 10_000_000, ..CakeParams::default() }));
        assert_eq!(resolved[9], QueueConfig::DualPi2(Limit::Packets(10_000), DualPi2Params::default()));
        let tuned = DualPi2Params {
            step_packets: Some(4), ecn_mask: EcnMask::AnyEct, drop_on_overload: false, memory_limit_bytes: Some(150_000), ..DualPi2Params::default()
        };
        assert_eq!(resolved[10], QueueConfig::DualPi2(Limit::Bytes(200_000), tuned));
    }

    #[test]
    fn a_parameter_of_another_discipline_is_refused_by_name() {
        let e = err(r#"{"discipline": "codel", "packets": 100, "flows": 1024}"#);
        assert!(e.starts_with("queue.flows: unknown field `flows`, expected one of `packets`, `bytes`, `target_ns`"), "{e}");
        let e = err(r#"{"discipline": "droptail", "packets": 100, "target_ns": null}"#);
        assert!(e.starts_with("queue.target_ns: unknown field `target_ns`, expected `packets` or `bytes`"), "{e}");
        // Written ahead of the discipline too.
        let e = err(r#"{"ecn_prob": 0.1, "discipline": "red", "packets": 100}"#);
        assert!(e.starts_with("queue: unknown field `ecn_prob`"), "{e}");
    }

    #[test]
    fn an_unknown_discipline_is_refused_at_discipline_with_the_known_ones() {
        let e = err(r#"{"discipline": "blue", "packets": 100}"#);
        assert!(e.starts_with(r#"queue.discipline: unknown discipline "blue" (droptail, drophead, codel, fq_codel, red, pie, cake, dualpi2)"#), "{e}");
        // An alias of the spec's ("taildrop") is the spec's to resolve: the config takes names only.
        assert!(err(r#"{"discipline": "taildrop", "packets": 100}"#).starts_with("queue.discipline: unknown discipline"));
        assert!(err(r#"{"packets": 100}"#).starts_with("queue: missing field `discipline`"));
    }

    #[test]
    fn an_error_names_its_field_wherever_the_discipline_is_written() {
        let e = err(r#"{"discipline": "codel", "packets": -1}"#);
        assert!(e.starts_with("queue.packets: invalid value: integer `-1`, expected usize"), "{e}");
        let e = err(r#"{"discipline": "pie", "packets": 100, "alpha": "x"}"#);
        assert!(e.starts_with("queue.alpha: invalid type: string"), "{e}");
        let e = err(r#"{"packets": -1, "discipline": "codel"}"#);
        assert!(e.starts_with("queue: packets: invalid value: integer `-1`, expected usize"), "{e}");
        let resolved = resolve(r#"{"target_ns": 2000000, "packets": 100, "discipline": "codel"}"#).unwrap();
        assert_eq!(resolved, QueueConfig::Codel(Limit::Packets(100), CodelParams { target: Duration(2_000_000), ..CodelParams::default() }));
        // The core's checks and the limit's, as before.
        assert!(err(r#"{"discipline": "codel", "packets": 100, "target_ns": 200000000}"#).starts_with("queue.target: "));
        assert!(err(r#"{"discipline": "cake", "packets": 100, "diffserv": "x"}"#).starts_with(r#"queue.diffserv: "x" is not one of besteffort"#));
        assert_eq!(err(r#"{"discipline": "dualpi2", "packets": 100, "ecn_mask": "ect1"}"#), r#"queue.ecn_mask: "ect1" is not one of l4s_ect, any_ect"#);
        assert_eq!(err(r#"{"discipline": "dualpi2", "packets": 100, "coupling_factor": 0}"#), "queue.coupling_factor: 0 is not from 1 to 255");
        let e = err(r#"{"discipline": "dualpi2", "packets": 100, "ecn": true}"#);
        assert!(e.starts_with("queue.ecn: unknown field `ecn`"), "{e}");
        assert_eq!(err(r#"{"discipline": "fq_codel", "packets": 0}"#), "queue: a limit of 0 holds nothing");
        assert_eq!(err(r#"{"discipline": "red", "packets": 10, "bytes": 10000}"#), "queue: give exactly one of packets or bytes");
    }

    /// Found by the fuzz target `config`: a duration of a config written by hand went to the
    /// core unbounded, where adding it to a time overflowed (a panic in a debug build, times
    /// that wrap in a release one). The catalogue's bound, 10 s, holds here too.
    #[test]
    fn a_duration_above_the_catalogues_bound_is_refused_by_name() {
        let e = err(r#"{"discipline": "codel", "packets": 100, "target_ns": 5000000, "interval_ns": 18446744073709551615}"#);
        assert_eq!(e, "queue.interval_ns: 18446744073709551615 is above 10000000000 (10 s)");
        assert!(err(r#"{"discipline": "pie", "packets": 100, "tupdate_ns": 10000000001}"#).starts_with("queue.tupdate_ns: 10000000001 is above"));
        assert!(err(r#"{"discipline": "dualpi2", "packets": 100, "step_thresh_ns": 20000000000}"#).starts_with("queue.step_thresh_ns: "));
        assert!(err(r#"{"discipline": "cake", "packets": 100, "interval_ns": 10000000001}"#).starts_with("queue.interval_ns: "));
        assert!(resolve(r#"{"discipline": "fq_codel", "packets": 100, "target_ns": 1, "interval_ns": 10000000000}"#).is_ok());
    }

    #[test]
    fn the_defaults_resolve_to_the_cores() {
        for name in DISCIPLINES {
            let defaults = discipline_defaults(name).unwrap();
            let mut queue = Map::from_iter([("discipline".to_string(), Value::from(name)), ("packets".to_string(), Value::from(100))]);
            queue.extend(defaults);
            let d: DirectionJson = serde_json::from_value(serde_json::json!({"queue": queue})).unwrap();
            let limit = Limit::Packets(100);
            let core = match name {
                "droptail" => QueueConfig::DropTail(limit),
                "drophead" => QueueConfig::DropHead(limit),
                "codel" => QueueConfig::Codel(limit, CodelParams::default()),
                "fq_codel" => QueueConfig::FqCodel(limit, FqCodelParams::default()),
                "red" => QueueConfig::Red(limit, RedParams::default()),
                "pie" => QueueConfig::Pie(limit, PieParams::default()),
                "cake" => QueueConfig::Cake(limit, CakeParams::default()),
                _ => QueueConfig::DualPi2(limit, DualPi2Params::default()),
            };
            assert_eq!(d.resolve().unwrap().config.queue, core, "{name}");
        }
        assert!(discipline_defaults("blue").is_none());
    }
}
