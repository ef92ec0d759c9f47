//! bloatlab's virtual-time replay: a link direction of the datapath core (the very code the
//! live `bloatlab-link` runs) over an arrival trace or a synthetic arrival process, with the
//! fate of every packet. No sockets, no clock: time is the arrivals' and the pipeline's own.

pub mod arrivals;
pub mod fates;
pub mod replay;

pub use arrivals::{Arrival, FlowIds, Process, Synthetic};
pub use fates::{FatesCsv, Tally};
pub use replay::{replay, Fate, FateSink, Outcome};
