//! The scheduling core: a sans-IO re-implementation of Dynamo's KV-router scheduler.
//!
//! It is handed `now` and inputs and returns decisions. It never reads a clock, a file, the
//! environment or a global RNG, and knows nothing of the simulator around it.

pub mod admission;
pub mod class_queue;
pub mod drr;
pub mod hashing;
pub mod indexer;
pub mod load;
pub mod policy;
pub mod request;
pub mod round_robin;
pub mod router_config;
pub mod scheduler;
pub mod select;
pub mod types;

/// The guide in docs/scheduling.md, compiled as a doctest so its example stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/scheduling.md")]
pub struct SchedulingGuide;
