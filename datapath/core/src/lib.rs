//! bloatlab's datapath core: everything a link direction does to packets, with no I/O and no
//! clock. Every entry point takes `now`; every component says when it next needs attention.
//! The I/O shell (`bloatlab-link`) owns sockets, the clock and the event loop, and a
//! virtual-time replay can drive the very same code.

pub mod fabric;
pub mod pipeline;
pub mod qdisc;
pub mod rate;
pub mod reason;
pub mod rng;
pub mod stats;
pub mod time;
pub mod wire;

pub use pipeline::{DirectionConfig, DropRecord, Event, EventKind, Ipv4Pair, Pipeline};
pub use qdisc::Packet;
pub use reason::{DropReason, MarkReason};
pub use time::{Duration, Instant};

/// bloatlab's version (src/bloatlab/version.py, read by build.rs).
pub const VERSION: &str = env!("BLOATLAB_VERSION");
