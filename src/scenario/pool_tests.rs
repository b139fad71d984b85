//! Worker pools in scenario files: the `pools` form and the plain form as one `default` pool,
//! every error naming file, line and field, `--set` on a pool, and pins across pools.

use super::test_support::load;
use super::*;
use crate::sim::DEFAULT_POOL;

/// Two pools in the contract's form (with engines this branch supports).
const TWO_POOLS: &str = "name: pools
workers:
  pools:
    - {name: h100, count: 4, engine: {max_num_seqs: 64, max_num_batched_tokens: 4096}}
    - {name: a100, count: 2, dp_size: 2, engine: {max_num_seqs: 32, speedup_ratio: 0.5}}
workload:
  groups:
    - {name: g, count: 4, input_tokens: 64, output_tokens: 2}
";

fn error(text: &str) -> ScenarioError {
    load(text, &[]).unwrap_err()
}

/// `(name, count, dp_size, max_num_seqs)` of every pool.
fn shape(scenario: &Scenario) -> Vec<(String, u32, u32, u64)> {
    scenario
        .pools()
        .iter()
        .map(|p| {
            let e = &p.engine;
            (
                p.name.clone(),
                p.count,
                e.common.dp_size,
                e.common.capacity.max_num_seqs,
            )
        })
        .collect()
}

#[test]
fn pools_are_read_in_file_order_each_with_its_own_engine() {
    let scenario = load(TWO_POOLS, &[]).unwrap();
    assert_eq!(
        shape(&scenario),
        vec![("h100".into(), 4, 1, 64), ("a100".into(), 2, 2, 32)]
    );
    let config = scenario.config();
    assert_eq!(config.pools(), scenario.pools());
    assert_eq!(
        config.pools()[0]
            .engine
            .common
            .capacity
            .max_num_batched_tokens,
        4096
    );
    assert_eq!(config.pools()[1].engine.common.speedup_ratio, 0.5);
    // 4 x 64 + 2 x 2 x 32 sequences.
    assert_eq!(config.capacity_seqs(), 384);
    let described = scenario.describe();
    assert!(
        described.contains("pool h100: 4 x dp 1 (workers 0 to 3)")
            && described.contains("pool a100: 2 x dp 2 (workers 4 to 5)"),
        "{described}"
    );
}

#[test]
fn plain_workers_are_one_pool_named_default() {
    let text = TWO_POOLS.replace(
        "  pools:\n    - {name: h100, count: 4, engine: {max_num_seqs: 64, max_num_batched_tokens: 4096}}\n    - {name: a100, count: 2, dp_size: 2, engine: {max_num_seqs: 32, speedup_ratio: 0.5}}\n",
        "  count: 3\n  dp_size: 2\n  engine: {max_num_seqs: 8}\n",
    );
    let scenario = load(&text, &[]).unwrap();
    assert_eq!(shape(&scenario), vec![(DEFAULT_POOL.into(), 3, 2, 8)]);
    let bare = load(
        &text.replace(
            "workers:\n  count: 3\n  dp_size: 2\n  engine: {max_num_seqs: 8}\n",
            "",
        ),
        &[],
    );
    assert_eq!(
        shape(&bare.unwrap()),
        vec![(DEFAULT_POOL.into(), 1, 1, 256)]
    );
    assert!(
        scenario
            .describe()
            .contains("workers: 3 x dp 2, kv_router router; engine")
    );
}

#[test]
fn pools_beside_count_dp_size_or_engine_is_an_error_naming_the_field() {
    for (line, field) in [
        ("  count: 2\n", "workers.count"),
        ("  dp_size: 2\n", "workers.dp_size"),
        ("  engine: {max_num_seqs: 4}\n", "workers.engine"),
    ] {
        let text = TWO_POOLS.replace("workers:\n", &format!("workers:\n{line}"));
        let e = error(&text);
        assert_eq!((e.line, e.field_path.as_str()), (Some(3), field), "{e}");
        assert!(e.message.contains("not both"), "{e}");
    }
}

/// The first pool as `TWO_POOLS` writes it.
const H100: &str =
    "{name: h100, count: 4, engine: {max_num_seqs: 64, max_num_batched_tokens: 4096}}";

/// Each `(replace, with, line, field, message part)`: `TWO_POOLS` with `replace` written as
/// `with` is an error in `s.yaml` at that line and field, its message containing the part.
fn assert_pool_errors(cases: &[(&str, &str, usize, &str, &str)]) {
    for &(from, to, line, field, part) in cases {
        let e = error(&TWO_POOLS.replace(from, to));
        assert_eq!(e.file, "s.yaml");
        assert_eq!(
            (e.line, e.field_path.as_str()),
            (Some(line), field),
            "{to}: {e}"
        );
        assert!(e.message.contains(part), "{to}: {e}");
    }
}

#[test]
fn bad_pool_names_are_errors_naming_file_line_and_field() {
    assert_pool_errors(&[
        (
            H100,
            "{count: 4}",
            4,
            "workers.pools[0].name",
            "needs a `name`",
        ),
        (
            H100,
            "{name: 4x, count: 4}",
            4,
            "workers.pools[0].name",
            "not a pool name",
        ),
        (
            H100,
            "{name: a.b, count: 4}",
            4,
            "workers.pools[0].name",
            "not a pool name",
        ),
        (
            H100,
            "{name: a100, count: 1}",
            5,
            "workers.pools[1].name",
            "named twice",
        ),
    ]);
}

#[test]
fn bad_pool_sizes_are_errors_naming_file_line_and_field() {
    assert_pool_errors(&[
        (
            H100,
            "{name: h100}",
            4,
            "workers.pools.h100",
            "needs `count`",
        ),
        (
            H100,
            "{name: h100, count: 0}",
            4,
            "workers.pools.h100.count",
            "must be positive",
        ),
        (
            H100,
            "{name: h100, count: 1, dp_size: 0}",
            4,
            "workers.pools.h100.dp_size",
            "must be positive",
        ),
        (
            H100,
            "{name: h100, count: 1, size: 3}",
            4,
            "workers.pools.h100.size",
            "unknown field",
        ),
        (
            H100,
            "{name: h100, count: 4093}",
            5,
            "workers.pools.a100.count",
            "4097 worker ranks",
        ),
    ]);
}

#[test]
fn bad_pool_engines_are_errors_naming_file_line_and_field() {
    assert_pool_errors(&[
        (
            H100,
            "{name: h100, count: 1, engine: {max_num_seqs: 0}}",
            4,
            "workers.pools.h100.engine.max_num_seqs",
            "must be positive",
        ),
        (
            "speedup_ratio: 0.5",
            "speedup_ratio: 0.5, block_size: 16",
            5,
            "workers.pools.a100.engine.block_size",
            "pool `h100` has 64",
        ),
    ]);
}

#[test]
fn an_empty_pool_list_is_an_error_at_workers_pools() {
    let e = error(
        &TWO_POOLS
            .replace("  pools:\n", "  pools: []\n")
            .replace("    - {", "#"),
    );
    assert_eq!(e.field_path, "workers.pools", "{e}");
}

#[test]
fn set_edits_a_pool_by_name() {
    let scenario = load(TWO_POOLS, &[("workers.pools.a100.count", "3")]).unwrap();
    assert_eq!(scenario.pools()[1].count, 3);
    let scenario = load(
        TWO_POOLS,
        &[("workers.pools.h100.engine.max_num_seqs", "8")],
    )
    .unwrap();
    assert_eq!(scenario.pools()[0].engine.common.capacity.max_num_seqs, 8);
    let e = load(TWO_POOLS, &[("workers.pools.v100.count", "3")]).unwrap_err();
    assert!(e.message.contains("no entry named `v100`"), "{e}");
    let e = load(TWO_POOLS, &[("workers.pools.a100.count", "1.5")]).unwrap_err();
    assert_eq!(e.field_path, "workers.pools.a100.count", "{e}");
    let plain =
        "name: x\nworkload: {groups: [{name: g, count: 1, input_tokens: 1, output_tokens: 1}]}\n";
    let e = load(plain, &[("workers.pools.a100.count", "3")]).unwrap_err();
    assert!(e.message.contains("--set cannot add list entries"), "{e}");
}

#[test]
fn pins_address_workers_across_pools() {
    let pinned = |worker: u64, dp_rank: u32| {
        let group = format!(
            "- {{name: g, count: 4, input_tokens: 64, output_tokens: 2, pinned_worker: {{worker_id: {worker}, dp_rank: {dp_rank}}}}}"
        );
        load(
            &TWO_POOLS.replace(
                "- {name: g, count: 4, input_tokens: 64, output_tokens: 2}",
                &group,
            ),
            &[],
        )
    };
    assert!(pinned(5, 1).is_ok(), "the last a100 worker has dp rank 1");
    let e = pinned(3, 1).unwrap_err();
    assert_eq!(
        e.field_path, "workload.groups.g.pinned_worker.dp_rank",
        "{e}"
    );
    assert!(
        e.message.contains("pool `h100` have only 1 dp ranks"),
        "{e}"
    );
    let e = pinned(6, 0).unwrap_err();
    assert_eq!(
        e.field_path, "workload.groups.g.pinned_worker.worker_id",
        "{e}"
    );
    assert_eq!(
        e.message, "unknown worker 6: the run has workers 0 to 5",
        "the range `validate` prints for the pools, both ends included"
    );
}

/// `tensor_parallel_size` sits beside `count` and `dp_size`, as Dynamo's launch config has it
/// beside `engine`: GPUs per rank, for what the fleet costs.
#[test]
fn tensor_parallel_size_counts_the_gpus_of_a_pools_workers() {
    let text = TWO_POOLS.replace(
        "{name: a100, count: 2, dp_size: 2,",
        "{name: a100, count: 2, dp_size: 2, tensor_parallel_size: 4,",
    );
    let scenario = load(&text, &[]).unwrap();
    let gpus: Vec<u64> = (scenario.pools().iter())
        .map(|p| p.engine.common.gpus_per_worker())
        .collect();
    assert_eq!(gpus, vec![1, 8]);
    let bad = TWO_POOLS.replace("dp_size: 2,", "dp_size: 2, tensor_parallel_size: 0,");
    let message = error(&bad).to_string();
    assert!(
        message.contains("workers.pools.a100.tensor_parallel_size") && message.contains("positive"),
        "{message}"
    );
}
