//! routersim: a deterministic discrete-event simulator of Dynamo's KV-router scheduling.
//!
//! Layers (a module uses only the layers below it; tests/it/tidy.rs checks this):
//! L0 `time`, `rng`, `bounds`, `yaml`; L1 `scheduling` | `engine`; L2 `mocker`, `workload`;
//! L3 `sim`; L4 `scenario` | `report`; L5 `pipeline` (the one run pipeline); L6 `sweep`,
//! `plan`; L7 `cli`. L0 and L1 take text, not paths: only `bounds`' capped reader opens files there.

pub mod bounds;
pub mod cli;
pub mod engine;
pub mod memory;
pub mod mocker;
pub mod pipeline;
pub mod plan;
pub mod planner;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod scheduling;
pub mod sim;
pub mod sweep;
pub mod text;
pub mod time;
pub mod workload;
pub mod yaml;
