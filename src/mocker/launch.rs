//! An engine's arguments written back in Dynamo 1.6.1's launch-config form
//! (`{"engine": {...}, "dp_size": ..}`), for a process that reads them as 1.6.1 does: the
//! scaling policy, which sizes its workers from them (Dynamo's planner reads the pool's KV
//! capacity, batch limits and GPUs).

use super::config::{EngineArgs, PreemptionMode};
use serde_json::{Value, json};

/// `engine`'s launch config, with 1.6.1's key names. Only keys routersim models are written
/// (a timing model other than Dynamo's polynomial is left out: 1.6.1's forms of it are not
/// routersim's).
pub fn launch_config_json(engine: &EngineArgs) -> Value {
    let common = &engine.common;
    let capacity = &common.capacity;
    let mut section = json!({
        "backend": "vllm",
        "worker_type": common.role.label(),
        "block_size": common.block_size,
        "num_gpu_blocks": capacity.num_gpu_blocks,
        "max_num_seqs": capacity.max_num_seqs,
        "max_num_batched_tokens": capacity.max_num_batched_tokens,
        "enable_prefix_caching": common.enable_prefix_caching,
        "speedup_ratio": common.speedup_ratio,
        "decode_speedup_ratio": common.decode_speedup_ratio,
    });
    if let Some(len) = capacity.max_model_len {
        section["max_model_len"] = json!(len);
    }
    if let Some(bytes) = common.kv_transfer.bytes_per_token {
        section["kv_transfer_bytes_per_token"] = json!(bytes);
    }
    if let Some(bandwidth) = common.kv_transfer.bandwidth_gb_per_s {
        section["kv_transfer_bandwidth"] = json!(bandwidth);
    }
    if let Some(vllm) = engine.backend.vllm() {
        section["enable_chunked_prefill"] = json!(vllm.enable_chunked_prefill);
        let mode = match vllm.preemption_mode {
            PreemptionMode::Lifo => "lifo",
            PreemptionMode::Fifo => "fifo",
        };
        section["preemption_mode"] = json!(mode);
    }
    json!({
        "engine": section,
        "dp_size": common.dp_size,
        "tensor_parallel_size": common.tensor_parallel_size,
        "startup_time": common.startup_delay.as_ns() as f64 / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::launch_config_json;
    use crate::mocker::config::{EngineLaunchConfig, PreemptionMode};
    use crate::mocker::{Backend, EngineArgs};

    /// What routersim writes, 1.6.1's launch config parser (routersim's own, which refuses
    /// unknown keys as 1.6.1 does) reads back into the same arguments.
    #[test]
    fn a_launch_config_reads_back_as_the_same_engine() {
        let mut engine = EngineArgs::default();
        engine.common.block_size = 16;
        engine.common.dp_size = 2;
        engine.common.tensor_parallel_size = 4;
        engine.common.capacity.max_model_len = Some(8192);
        engine.common.startup_delay = crate::time::SimDuration::from_ms(2500);
        if let Backend::Vllm(vllm) = &mut engine.backend {
            vllm.preemption_mode = PreemptionMode::Fifo;
            vllm.enable_chunked_prefill = false;
        }
        let text = launch_config_json(&engine).to_string();
        let launch: EngineLaunchConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(
            launch.into_args_in(std::path::Path::new("")).unwrap(),
            engine
        );
    }
}
