//! A run's estimated peak memory, from its spec before it runs: how many runs a process runs
//! at once is decided from it ([`crate::bounds::admitted_runs`]), once, before the first.

use super::{RequestSource, RunSpec};
use crate::bounds;
use crate::workload::synth::{LengthDist, Lengths, RequestGroup, SynthWorkload};

/// A trace replay's estimated peak per byte of its trace file. A trace streams through a run
/// (its prompts are not all held), so a run holds about a record per row: the 1,000,000-row
/// bench trace (about 200 bytes a row) peaked at 222 MiB, near 1.2 bytes per byte; twice
/// that leaves room for shorter rows.
const TRACE_RUN_BYTES_PER_FILE_BYTE: u64 = 2;

/// The estimated peak memory of the run `spec` describes, in bytes
/// ([`bounds::run_memory_estimate_bytes`] of its requests, prompt blocks and ranks).
pub fn run_memory_estimate_bytes(spec: &RunSpec) -> u64 {
    let ranks: u64 = spec
        .config
        .pools()
        .iter()
        .map(|p| u64::from(p.count) * u64::from(p.engine.common.dp_size))
        .sum();
    match &spec.source {
        RequestSource::Synthetic { workload, .. } => {
            let (requests, blocks) = requests_and_prompt_blocks(workload);
            bounds::run_memory_estimate_bytes(requests, blocks, ranks)
        }
        RequestSource::Trace { path, .. } => {
            let file_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
            bounds::run_memory_estimate_bytes(0, 0, ranks)
                .saturating_add(file_bytes.saturating_mul(TRACE_RUN_BYTES_PER_FILE_BYTE))
        }
    }
}

/// The requests a synthetic workload draws and their prompt blocks, by the lengths' means.
fn requests_and_prompt_blocks(workload: &SynthWorkload) -> (u64, u64) {
    let block_tokens = workload.tokens_per_hash.max(1) as f64;
    let (mut requests, mut blocks) = (0.0, 0.0);
    for group in &workload.groups {
        let (group_requests, group_tokens) = requests_and_prompt_tokens(group);
        requests += group_requests;
        blocks += group_tokens / block_tokens + group_requests; // a partial block each
    }
    (requests.ceil() as u64, blocks.ceil() as u64)
}

/// A group's requests and the tokens of all their prompts, by the lengths' means: a session
/// of `t` turns has `t` prompts, each after the first the one before plus its output and the
/// turn's new input.
fn requests_and_prompt_tokens(group: &RequestGroup) -> (f64, f64) {
    let count = group.count as f64;
    let prefix = group.prefix.as_ref().map_or(0.0, |p| p.tokens as f64);
    let input = mean(&group.input_tokens) + prefix;
    let Some(sessions) = &group.sessions else {
        return (count, count * input);
    };
    let turns = mean(&sessions.turns);
    let growth = mean(&group.output_tokens) + mean(&sessions.new_input_tokens);
    let tokens_per_session = turns * input + growth * turns * (turns - 1.0) / 2.0;
    (count * turns, count * tokens_per_session)
}

/// The mean of a length's distribution, within its clamps.
fn mean(lengths: &Lengths) -> f64 {
    let (min, max) = (lengths.min as f64, lengths.max as f64);
    let mean = match lengths.dist {
        LengthDist::Fixed(tokens) => tokens as f64,
        LengthDist::Uniform => (min + max) / 2.0,
        LengthDist::Normal { mean, .. }
        | LengthDist::LogNormal { mean, .. }
        | LengthDist::Exponential { mean } => mean,
    };
    mean.clamp(min, max.max(min))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn estimate(yaml: &str) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.yaml");
        std::fs::write(&path, yaml).unwrap();
        let scenario = Scenario::load(&path).unwrap();
        run_memory_estimate_bytes(&RunSpec::from_scenario(&scenario, 1))
    }

    #[test]
    fn a_runs_estimate_grows_with_its_requests_prompt_blocks_and_ranks() {
        let scenario = |workers: u32, count: u64, tokens: u64| {
            estimate(&format!(
                "name: s\nworkers: {{count: {workers}}}\nworkload:\n  groups:\n    - {{name: a, count: {count}, input_tokens: {tokens}, output_tokens: 4}}\n"
            ))
        };
        let base = scenario(1, 1000, 64);
        // The measured 990,000-request runs: 807 MB (one block each), 1,346 MB (eight).
        let one_block = scenario(8, 990_000, 64) as f64 / 1e6;
        let eight_blocks = scenario(8, 990_000, 512) as f64 / 1e6;
        assert!((807.0..1000.0).contains(&one_block), "{one_block} MB");
        assert!(
            (1346.0..1600.0).contains(&eight_blocks),
            "{eight_blocks} MB"
        );
        assert!(scenario(4096, 1000, 64) >= base + 4095 * bounds::RUN_BYTES_PER_RANK);
    }
}
