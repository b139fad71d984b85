//! What a run was given, in full, as `summary.json`'s meta and the page name it: the engine
//! every worker ran (with the defaults it took) and the router's settings, in Dynamo's key
//! names; and the rows whose `policy_class` the policy does not know.

use crate::mocker::transfer::TransferTimingMode;
use crate::mocker::{EngineArgs, FixedTiming, TimingSource};
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::router_config::RouterConfig;
use crate::sim::RequestRecord;
use crate::time::SimDuration;
use serde_json::{Value, json};

/// The engine's settings as a worker ran them, every default filled in.
pub fn engine_json(engine: &EngineArgs) -> Value {
    let (common, capacity) = (&engine.common, &engine.common.capacity);
    let timing = match &common.timing {
        TimingSource::Polynomial => json!({"type": "polynomial"}),
        TimingSource::Fixed(FixedTiming {
            prefill_ms,
            decode_ms,
        }) => json!({"type": "fixed", "prefill_ms": prefill_ms, "decode_ms": decode_ms}),
        TimingSource::Profile(profile) => json!({"type": "profile", "source": profile.source()}),
    };
    let transfer = &common.kv_transfer;
    let mode = match transfer.mode {
        TransferTimingMode::FullPrompt => "full_prompt",
        TransferTimingMode::DestinationMissing => "destination_missing",
    };
    let mut settings = json!({
        "worker_type": common.role.label(),
        "block_size": common.block_size,
        "num_gpu_blocks": capacity.num_gpu_blocks,
        "max_num_seqs": capacity.max_num_seqs,
        "max_num_batched_tokens": capacity.max_num_batched_tokens,
        "enable_prefix_caching": common.enable_prefix_caching,
        "speedup_ratio": common.speedup_ratio,
        "decode_speedup_ratio": common.decode_speedup_ratio,
        "dp_size": common.dp_size,
        "max_model_len": capacity.max_model_len,
        "timing_model": timing,
        "kv_transfer_bytes_per_token": transfer.bytes_per_token,
        "kv_transfer_bandwidth": transfer.bandwidth_gb_per_s,
        "kv_transfer_timing_mode": mode,
    });
    // Keys are sorted, so where they are added does not show. A startup delay only matters
    // to workers added during the run: shown when there is one.
    if let (false, Value::Object(map)) = (common.startup_delay == SimDuration::ZERO, &mut settings)
    {
        let seconds = common.startup_delay.as_ns() as f64 / 1e9;
        map.insert("startup_time".into(), json!(seconds));
    }
    // The backend's own settings.
    if let (Some(vllm), Value::Object(map)) = (engine.backend.vllm(), &mut settings) {
        map.insert(
            "enable_chunked_prefill".into(),
            json!(vllm.enable_chunked_prefill),
        );
        map.insert("preemption_mode".into(), json!(vllm.preemption_mode));
    }
    settings
}

/// The router's settings as the run used them, every default filled in.
pub fn router_json(router: &RouterConfig) -> Value {
    serde_json::to_value(router).expect("router settings are plain values")
}

/// Rows whose `policy_class` names neither a class nor a family of the policy (with no
/// policy, any name): they were served as the default class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownClasses {
    pub rows: u64,
    /// The first such row (by row number) and the name it gave.
    pub first: Option<(u64, String)>,
}

impl UnknownClasses {
    /// Counts the records of a run whose class name `profile` does not know.
    pub fn of(records: &[RequestRecord], profile: &PolicyProfile) -> UnknownClasses {
        let mut found = UnknownClasses::default();
        // One record per request: bounded by the run's size.
        for record in records {
            let Some(name) = record.policy_class.as_deref() else {
                continue;
            };
            if profile.knows_name(name) {
                continue;
            }
            found.rows += 1;
            if found
                .first
                .as_ref()
                .is_none_or(|(row, _)| record.row < *row)
            {
                found.first = Some((record.row, name.to_string()));
            }
        }
        found
    }

    /// The count for `summary.json`, with the first row when there is one.
    pub fn json(&self) -> Value {
        let mut value = json!({"rows": self.rows});
        if let Some((row, name)) = &self.first {
            value["first"] = json!({"row": row, "policy_class": name});
        }
        value
    }

    /// What they are, in words, if there are any.
    pub fn describe(&self, trace: &str) -> Option<String> {
        let (row, name) = self.first.as_ref()?;
        Some(format!(
            "{trace}: {} row(s) name a policy_class the policy does not have (the first: row \
             {row}, {name:?})",
            self.rows
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::engine_json;
    use crate::mocker::EngineArgs;
    use crate::time::SimDuration;

    #[test]
    fn a_startup_delay_is_shown_in_seconds_only_when_there_is_one() {
        let mut engine = EngineArgs::default();
        assert!(engine_json(&engine).get("startup_time").is_none());
        engine.common.startup_delay = SimDuration::from_ms(2500);
        assert_eq!(engine_json(&engine)["startup_time"], 2.5);
    }
}
