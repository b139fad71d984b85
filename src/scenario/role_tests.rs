//! Disaggregated serving in scenario files: `workers: {prefill, decode}` in both forms,
//! `--set` on a role, and every error naming file, line and field.

use super::test_support::load;
use super::*;
use crate::mocker::WorkerRole;
use crate::mocker::transfer::TransferTimingMode;

const ROLES: &str = "name: roles
workers:
  prefill: {count: 2, engine: {max_num_seqs: 8, kv_transfer_bandwidth: 50, kv_transfer_bytes_per_token: 131072}}
  decode:
    pools:
      - {name: fast, count: 3, engine: {max_num_seqs: 32}}
      - {name: slow, count: 1, engine: {max_num_seqs: 16, speedup_ratio: 0.5}}
workload:
  groups:
    - {name: g, count: 4, input_tokens: 64, output_tokens: 2}
";

/// `(name, role, count, max_num_seqs)` of every pool.
fn shape(scenario: &Scenario) -> Vec<(String, WorkerRole, u32, u64)> {
    let pools = scenario.pools();
    let shape = pools.iter().map(|p| {
        (
            p.name.clone(),
            p.engine.common.role,
            p.count,
            p.engine.common.capacity.max_num_seqs,
        )
    });
    shape.collect()
}

#[test]
fn roles_are_pools_of_their_role_in_either_form() {
    let scenario = load(ROLES, &[]).unwrap();
    assert_eq!(
        shape(&scenario),
        vec![
            ("prefill".into(), WorkerRole::Prefill, 2, 8),
            ("fast".into(), WorkerRole::Decode, 3, 32),
            ("slow".into(), WorkerRole::Decode, 1, 16),
        ]
    );
    let transfer = scenario.pools()[0].engine.common.kv_transfer;
    assert_eq!(transfer.delay(4096).as_ns(), 10_737_418);
    assert_eq!(transfer.mode, TransferTimingMode::FullPrompt);
    assert!(scenario.config().is_disaggregated());
}

#[test]
fn set_reaches_a_roles_count_and_engine() {
    let scenario = load(
        ROLES,
        &[
            ("workers.prefill.count", "4"),
            ("workers.decode.pools.fast.engine.max_num_seqs", "64"),
        ],
    )
    .unwrap();
    assert_eq!(shape(&scenario)[0].2, 4);
    assert_eq!(shape(&scenario)[1].3, 64);
    let plain = ROLES.replace(
        "  decode:\n    pools:\n      - {name: fast, count: 3, engine: {max_num_seqs: 32}}\n      - {name: slow, count: 1, engine: {max_num_seqs: 16, speedup_ratio: 0.5}}\n",
        "  decode: {count: 2}\n",
    );
    let scenario = load(&plain, &[("workers.decode.engine.max_num_seqs", "64")]).unwrap();
    assert_eq!(
        shape(&scenario)[1],
        ("decode".into(), WorkerRole::Decode, 2, 64)
    );
}

/// Loading `text` fails at `line` and `field` with a message holding `needle`.
fn assert_error(text: &str, line: usize, field: &str, needle: &str) {
    let e = load(text, &[]).unwrap_err();
    assert_eq!((e.line, e.field_path.as_str()), (Some(line), field), "{e}");
    assert!(e.message.contains(needle), "{e}");
}

const GROUPS: &str =
    "workload:\n  groups:\n    - {name: g, count: 4, input_tokens: 64, output_tokens: 2}\n";

#[test]
fn bad_roles_are_errors_naming_file_line_and_field() {
    let with = |workers: &str| format!("name: r\nworkers:\n{workers}{GROUPS}");
    assert_error(
        &with("  prefill: {count: 0}\n  decode: {count: 1}\n"),
        3,
        "workers.prefill.count",
        "must be positive",
    );
    assert_error(
        &with("  prefill: {count: 1}\n"),
        3,
        "workers.prefill",
        "needs `workers.decode` too",
    );
    assert_error(
        &with("  decode: {count: 1}\n"),
        3,
        "workers.decode",
        "needs `workers.prefill` too",
    );
    assert_error(
        &with("  count: 2\n  prefill: {count: 1}\n  decode: {count: 1}\n"),
        3,
        "workers.count",
        "not both",
    );
    assert_error(
        &with("  prefill: {count: 1, engine: {worker_type: decode}}\n  decode: {count: 1}\n"),
        3,
        "workers.prefill.engine.worker_type",
        "requires prefill_engine_args.worker_type=prefill, got Decode",
    );
    assert_error(
        &with("  count: 1\n  engine: {worker_type: prefill}\n"),
        4,
        "workers.engine.worker_type",
        "only supports aggregated workers, got Prefill",
    );
    assert_error(
        &with("  prefill: {count: 1, engine: {kv_transfer_bandwidth: -1}}\n  decode: {count: 1}\n"),
        3,
        "workers.prefill.engine.kv_transfer_bandwidth",
        "must be finite and non-negative",
    );
    assert_error(
        &with(
            "  prefill: {count: 1, engine: {kv_transfer_timing_mode: eager}}\n  decode: {count: 1}\n",
        ),
        3,
        "workers.prefill.engine.kv_transfer_timing_mode",
        "unknown variant `eager`",
    );
    assert_error(
        &with(
            "  prefill: {count: 1, engine: {kv_transfer_bandwidth: 50, kv_transfer_bytes_per_token: 1000}}\n  decode: {count: 1, engine: {kv_transfer_bandwidth: 25, kv_transfer_bytes_per_token: 1000}}\n",
        ),
        4,
        "workers.decode.engine.kv_transfer_bandwidth",
        "disagree with prefill pool `prefill`'s",
    );
    assert_error(
        &with("  prefill: {count: 1}\n  decode: {count: 1, engine: {block_size: 32}}\n"),
        4,
        "workers.decode.engine.block_size",
        "every pool needs the same block_size",
    );
}

#[test]
fn a_pool_name_is_unique_across_roles() {
    let with = |workers: &str| format!("name: r\nworkers:\n{workers}{GROUPS}");
    assert_error(
        &with("  prefill:\n    pools:\n      - {name: decode, count: 1}\n  decode: {count: 1}\n"),
        5,
        "workers.prefill.pools[0].name",
        "pool `decode` has the name of `workers.decode`'s one pool: pool names are unique across roles",
    );
    assert_error(
        &with("  prefill: {count: 1}\n  decode:\n    pools:\n      - {name: prefill, count: 1}\n"),
        6,
        "workers.decode.pools[0].name",
        "pool `prefill` is named twice",
    );
}

/// A disaggregated scenario with these `faults:` entries (1 prefill, 2 decode workers).
fn with_faults(faults: &str) -> String {
    format!(
        "name: r\nworkers:\n  prefill: {{count: 1}}\n  decode: {{count: 2}}\n{GROUPS}faults:\n{faults}"
    )
}

#[test]
fn a_disaggregated_worker_down_names_its_role_and_its_number_within_it() {
    let scenario = load(
        &with_faults(
            "  - {worker_down: {role: decode, worker: 1, at_ms: 10, until_ms: 20}}\n  - {worker_down: {role: prefill, worker: 0, at_ms: 5}}\n",
        ),
        &[],
    )
    .unwrap();
    let downs: Vec<u64> = scenario
        .config()
        .faults()
        .iter()
        .filter_map(|f| match f {
            crate::sim::Fault::WorkerDown { worker, .. } => Some(*worker),
            _ => None,
        })
        .collect();
    assert_eq!(downs, vec![2, 0], "decode worker 1 is the run's worker 2");
}

#[test]
fn disaggregated_faults_name_the_role_or_are_refused_with_the_field() {
    let cases = [
        (
            "  - {worker_down: {worker: 1, at_ms: 10}}\n",
            "faults.0.worker_down",
            "name the role",
        ),
        (
            "  - {worker_down: {role: decode, worker: 2, at_ms: 10}}\n",
            "faults.0.worker_down.worker",
            "unknown decode worker 2: the decode role has workers 0 to 1",
        ),
        (
            "  - {worker_down: {role: gpu, worker: 0, at_ms: 10}}\n",
            "faults.0.worker_down.role",
            "unknown role `gpu`: prefill or decode",
        ),
        (
            "  - {cancel: {group: g, fraction: 0.5, after_ms: 10}}\n",
            "faults.0.cancel",
            "not modelled yet",
        ),
    ];
    for (faults, field, message) in cases {
        let e = load(&with_faults(faults), &[]).unwrap_err();
        assert_eq!((e.line, e.field_path.as_str()), (Some(9), field), "{e}");
        assert!(e.message.contains(message), "{e}");
    }
}
