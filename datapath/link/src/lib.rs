//! bloatlab-link's parts that need no socket or clock of its own: the process's config (its
//! link directions read by bloatlab-config), the plan of its workers, and the pcapng captures of
//! a direction.

pub mod capture;
pub mod config;
pub mod plan;
pub mod pcapng;
