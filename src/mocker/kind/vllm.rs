//! The vLLM worker kind, modelled on Dynamo 1.6.1's mocker (vLLM-style core): one rank
//! ([`MockWorker`]: waiting and running queues, continuous-batching passes, chunked prefill,
//! preemption, quiet runs, handoffs), its per-rank KV block pool ([`kv_pool`]) and its
//! prefix-probe cache; how the kind builds a rank ([`build`]) and the capacity it reports
//! ([`capacity`]). It speaks [`crate::mocker::protocol`] to the rest of the simulator.

pub mod kv_pool;
mod memo;
mod worker;

pub use kv_pool::{BlockId, KvPool, PrefixMatch, Reuse};
pub use worker::MockWorker;

use crate::mocker::config::EngineArgs;
use crate::mocker::protocol::{Capacity, WorkerSetup};
use crate::mocker::traits::Worker;
use crate::scheduling::types::WorkerWithDpRank;

/// A vLLM rank `rank` of the engine `setup` names, set up as it asks (room for blocks, KV
/// events as skipping quiet passes needs them, warm probes, counted middle tokens).
pub fn build(rank: WorkerWithDpRank, setup: &WorkerSetup) -> Box<dyn Worker> {
    let mut worker = MockWorker::new(setup.engine.clone(), rank);
    worker.reserve_blocks(setup.reserved_blocks);
    // Skipped quiet passes publish nothing: the blocks they fill must never be named.
    worker.set_publish_generated_blocks(!setup.skips_quiet_passes);
    worker.set_warm_probes(setup.warm_probes);
    if setup.count_middle_tokens {
        worker.count_middle_tokens();
    }
    if setup.pass_metrics {
        worker.record_pass_metrics();
    }
    Box::new(worker)
}

/// What a vLLM rank of `engine` holds: its `max_num_seqs`, `max_num_batched_tokens` and
/// `num_gpu_blocks`.
pub fn capacity(engine: &EngineArgs) -> Capacity {
    let limits = &engine.common.capacity;
    Capacity {
        max_running: limits.max_num_seqs,
        max_batched_tokens: limits.max_num_batched_tokens,
        kv_blocks: limits.num_gpu_blocks,
    }
}
