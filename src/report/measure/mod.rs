//! Measuring: the figures of a run computed from its records (per-class metrics, stability,
//! pools, sessions, disaggregated phases, means by arrival time, service-level figures). Uses no other room.

pub mod fleet;
pub mod latency;
pub mod metrics;
pub mod over_time;
pub mod phases;
pub mod pools;
pub mod sessions;
pub mod slo;
pub mod stability;
