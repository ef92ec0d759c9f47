//! The parts of bloatlab-link other tools share: the JSON config reader (the replay reads a
//! link direction's config with it, so a replay and a live link resolve a config the same way),
//! and the pcapng captures of a direction.

pub mod capture;
pub mod config;
pub mod plan;
pub mod pcapng;
