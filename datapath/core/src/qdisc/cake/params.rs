//! CAKE's parameters, as `tc qdisc add ... cake` takes them, and the length a packet counts
//! for under the shaper (overhead, mpu, ATM or PTM framing).

use super::{AckFilter, DiffservMode, FlowMode};
use crate::time::Duration;

/// Ethernet's link-layer header: what `overhead` replaces (Linux's network offset).
const MAC_HEADER_BYTES: i64 = 14;
/// How the link below frames packets, for the shaper's count of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    /// ATM: 48 bytes of payload in each 53-byte cell.
    Atm,
    /// PTM (VDSL2): one byte of 64/65 encoding per 64 bytes.
    Ptm,
}

impl Framing {
    pub fn name(self) -> &'static str {
        match self {
            Framing::None => "none",
            Framing::Atm => "atm",
            Framing::Ptm => "ptm",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        [Framing::None, Framing::Atm, Framing::Ptm].into_iter().find(|f| f.name() == name)
    }
}

/// CAKE's parameters. Defaults are Linux's sch_cake (`tc qdisc add ... cake`). The packet
/// limit (10240 by default) is the queue's `Limit`; with a rate, the buffer is also held to
/// four intervals of it (at least 4 MiB), unless `memory_limit_bytes` says otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct CakeParams {
    /// The shaper's rate in bits/s; 0 leaves the pace to the link. Default 0.
    pub bandwidth_bps: u64,
    pub diffserv: DiffservMode,
    pub flow_mode: FlowMode,
    /// COBALT's target and interval (tc's `rtt`). Defaults 5 ms and 100 ms.
    pub target: Duration,
    pub interval: Duration,
    /// Bytes added to each packet's length for the shaper, after removing the Ethernet header;
    /// None counts the frame as it is (tc's `raw`). Default None.
    pub overhead: Option<i32>,
    /// The least length a packet counts for. Default 0.
    pub mpu: u32,
    pub framing: Framing,
    /// Clear the DSCP of every packet after choosing its tin. Default off.
    pub wash: bool,
    /// Bytes the flows may hold together; None derives it from the rate. Default None.
    pub memory_limit_bytes: Option<u64>,
    /// Drop TCP ACKs that a later one in their flow makes redundant. Default off.
    pub ack_filter: AckFilter,
    /// The link's MTU with its header: the quantum's ceiling and the unit of the target's floor.
    pub mtu_bytes: u32,
}

impl Default for CakeParams {
    fn default() -> Self {
        CakeParams {
            bandwidth_bps: 0,
            diffserv: DiffservMode::Diffserv3,
            flow_mode: FlowMode::TripleIsolate,
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            overhead: None,
            mpu: 0,
            framing: Framing::None,
            wash: false,
            memory_limit_bytes: None,
            ack_filter: AckFilter::Off,
            mtu_bytes: 1514,
        }
    }
}

impl CakeParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.target.nanos() == 0 {
            return Err("target: must be positive".into());
        }
        if self.interval.nanos() == 0 {
            return Err("interval: must be positive".into());
        }
        if let Some(o) = self.overhead {
            if !(-64..=256).contains(&o) {
                return Err(format!("overhead: {o} is not from -64 to 256 bytes"));
            }
        }
        if self.mpu > 256 {
            return Err(format!("mpu: {} is not from 0 to 256 bytes", self.mpu));
        }
        if self.memory_limit_bytes == Some(0) {
            return Err("memory_limit: must be positive".into());
        }
        Ok(())
    }

    /// A packet's length as the shaper counts it.
    pub fn adjusted_len(&self, wire_len: u32) -> u32 {
        let mut len = wire_len as i64;
        if let Some(o) = self.overhead {
            len = len - MAC_HEADER_BYTES + o as i64;
        }
        let mut len = len.max(self.mpu as i64).max(1) as u64;
        match self.framing {
            Framing::None => {}
            Framing::Atm => len = len.div_ceil(48) * 53,
            Framing::Ptm => len += len.div_ceil(64),
        }
        len as u32
    }
}
