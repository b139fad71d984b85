//! Mock aggregated worker modelled on Dynamo 1.6.1's mocker (vLLM-style core): engine
//! arguments, the per-rank KV block pool, the timing models and the scheduler core.
//!
//! A pure state machine per data-parallel rank: [`MockWorker::execute_pass`] is handed `now`
//! and returns the pass end, with the tokens, completions and KV events it delivers then.
//!
//! Matching Dynamo 1.6.1 request by request (to the ns) is this module's contract; the
//! behaviours of 1.6.1 that differ from other revisions are listed in `worker`'s docs.

#![deny(missing_docs)]

pub mod config;
pub mod kv_pool;
pub mod memo;
pub mod profile;
mod profile_dir;
pub mod protocol;
pub mod step_memo;
pub mod timing;
pub mod traits;
pub mod transfer;
pub mod worker;

#[cfg(test)]
mod dynamo_parity;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use config::{
    ConfigError, EngineArgs, EngineLaunchConfig, EngineSection, PreemptionMode, WorkerRole,
};
pub use kv_pool::{BlockId, KvPool, PrefixMatch, Reuse};
pub use profile::{ProfileError, TimingProfile};
pub use protocol::{
    AddRequestError, Admitted, MockRequest, PassOutput, RejectReason, Rejection, RequestPhase,
    RequestView, Reservation, TokenOut, WorkerLoad,
};
pub use step_memo::StepMemo;
pub use timing::TimingModel;
pub use traits::{Handoffs, QuietRuns, Worker};
pub use worker::MockWorker;
