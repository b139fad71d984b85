//! Mock workers modelled on Dynamo 1.6.1's mocker: engine arguments, the protocol every
//! worker kind speaks ([`protocol`], [`traits`]), the kinds ([`kind`]; today only
//! [`vllm`], the vLLM-style scheduler core with its KV block pool), the timing models
//! ([`timing::TimingModel`], which a kind asks for a pass's duration) and KV transfers.
//!
//! A rank is a pure state machine: [`Worker::start_pass`] is handed `now` and returns the
//! pass end, with the tokens, completions and KV events it delivers then.
//!
//! Matching Dynamo 1.6.1 request by request (to the ns) is this module's contract; the
//! behaviours of 1.6.1 that differ from other revisions are listed in `vllm::worker`'s docs.

#![deny(missing_docs)]

pub mod config;
pub mod kind;
pub mod launch;
pub mod profile;
mod profile_dir;
pub mod protocol;
pub mod step_memo;
pub mod timing;
pub mod timing_source;
pub mod traits;
pub mod transfer;

#[cfg(test)]
mod dynamo_parity;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use config::{
    Backend, CapacityArgs, CommonArgs, ConfigError, EngineArgs, EngineLaunchConfig, EngineSection,
    PreemptionMode, VllmArgs, WorkerRole,
};
pub use kind::WorkerKind;
pub use kind::vllm;
pub use profile::{ProfileError, TimingProfile};
pub use protocol::{
    AddRequestError, Admitted, Capacity, LengthStats, MockRequest, PassMetrics, PassOutput,
    RejectReason, Rejection, RequestPhase, RequestView, Reservation, TokenOut, WorkerLoad,
    WorkerSetup,
};
pub use step_memo::StepMemo;
pub use timing::{DynamoPolynomial, FixedTiming, TimingModel};
pub use timing_source::TimingSource;
pub use traits::{Handoffs, QuietRuns, Worker};
pub use vllm::{BlockId, KvPool, MockWorker, PrefixMatch, Reuse};
