//! routersim: a deterministic discrete-event simulator of Dynamo's KV-router scheduling.
//!
//! Layers (a module uses only the layers below it):
//! L0 `time`, `rng`, `bounds`; L1 `scheduling` | `engine`; L2 `mocker`, `workload`; L3 `sim`;
//! L4 `scenario` | `report`; L5 `pipeline` (the one run pipeline); L6 `sweep`; L7 `cli`.

pub mod bounds;
pub mod cli;
pub mod engine;
pub mod mocker;
pub mod pipeline;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod scheduling;
pub mod sim;
pub mod sweep;
pub mod time;
pub mod workload;
