//! Worker kinds: [`WorkerKind`], which engine a pool's ranks model, following from its engine
//! arguments' [`Backend`]; the one way a rank is built ([`WorkerKind::build`]) and the capacity a kind
//! reports ([`WorkerKind::capacity`]), so the simulator never names a kind's own knobs.

#[cfg(test)]
pub mod fixed_latency;
pub mod vllm;

use super::config::{Backend, EngineArgs};
use super::protocol::{Capacity, WorkerSetup};
use super::traits::Worker;
use crate::scheduling::types::WorkerWithDpRank;

/// Which engine a worker models.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WorkerKind {
    /// Dynamo 1.6.1's mocker, vLLM-style ([`vllm::MockWorker`]).
    Vllm,
    /// A scratch kind for tests ([`fixed_latency`]).
    #[cfg(test)]
    FixedLatency,
}

impl WorkerKind {
    /// The kind of the ranks that run `engine`: the one its backend names.
    pub fn of(engine: &EngineArgs) -> WorkerKind {
        match engine.backend {
            Backend::Vllm(_) => WorkerKind::Vllm,
            #[cfg(test)]
            Backend::FixedLatency(_) => WorkerKind::FixedLatency,
        }
    }

    /// A rank `rank` of this kind, set up as `setup` asks.
    pub fn build(self, rank: WorkerWithDpRank, setup: &WorkerSetup) -> Box<dyn Worker> {
        match self {
            WorkerKind::Vllm => vllm::build(rank, setup),
            #[cfg(test)]
            WorkerKind::FixedLatency => fixed_latency::build(rank, setup),
        }
    }

    /// What a rank of this kind running `engine` holds at most.
    pub fn capacity(self, engine: &EngineArgs) -> Capacity {
        match self {
            WorkerKind::Vllm => vllm::capacity(engine),
            #[cfg(test)]
            WorkerKind::FixedLatency => fixed_latency::capacity(engine),
        }
    }
}
