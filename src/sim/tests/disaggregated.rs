//! Disaggregated serving: the worked example of docs/disaggregated.md to the nanosecond, and
//! random prefill + decode systems with every checker after every event.

use super::*;
use crate::mocker::transfer::{KvTransfer, TransferTimingMode};
use crate::mocker::{CommonArgs, WorkerRole};

/// `count` workers of `engine` in the role `role`.
fn role_pool(role: WorkerRole, count: u32, engine: &EngineArgs) -> WorkerPool {
    WorkerPool {
        name: role.label().to_string(),
        count,
        engine: EngineArgs {
            common: CommonArgs {
                role,
                ..engine.common.clone()
            },
            ..engine.clone()
        },
    }
}

/// `case`'s system served disaggregated: its engine on both roles (the decode pool as large
/// as the case's), `prefill` and `decode` workers, and `transfer` on the prefill engine.
fn disaggregated(
    case: &Case,
    seed: u64,
    prefill: u32,
    decode: u32,
    transfer: KvTransfer,
) -> SimConfig {
    let mut config = config(case, seed);
    // The case's dp_size on both roles: their workers' ranks run in lock-step.
    let engine = config.pools[0].engine.clone();
    let prefill_engine = EngineArgs {
        common: CommonArgs {
            kv_transfer: transfer,
            ..engine.common.clone()
        },
        ..engine.clone()
    };
    config.pools = vec![
        role_pool(WorkerRole::Prefill, prefill, &prefill_engine),
        role_pool(WorkerRole::Decode, decode, &engine),
    ];
    config
}

/// The prefill router hears only the prefill pool's blocks, so its index makes room for
/// that pool's cache alone, however large the decode pool.
#[test]
fn the_prefill_routers_index_makes_room_for_the_prefill_pool_only() {
    let engine = |num_gpu_blocks| {
        let mut engine = EngineArgs::default();
        engine.common.capacity.num_gpu_blocks = num_gpu_blocks;
        engine
    };
    let config = resolve(RunDescription {
        pools: vec![
            role_pool(WorkerRole::Prefill, 1, &engine(1_000)),
            role_pool(WorkerRole::Decode, 1, &engine(50_000)),
        ],
        ..RunDescription::default()
    })
    .expect("a valid run");
    let system = new_system(config, Stepping::default(), 0, false).expect("a valid fleet");
    let room = system.hub.routers.entry_ref().core().index_room();
    assert!((1_000..2_000).contains(&room), "room for {room} blocks");
}

fn ms(ns: u64) -> SimTime {
    SimTime::from_ns(ns)
}

/// docs/disaggregated.md's worked example (Dynamo 1.6.1 gives every instant): two requests
/// sharing their first 512 tokens, a 25 GB/s `destination_missing` transfer of 131,072 bytes
/// per token, one prefill and one decode worker of the default engine.
#[test]
fn the_worked_example_gives_dynamos_twelve_instants() {
    let transfer = KvTransfer {
        bytes_per_token: Some(131_072),
        bandwidth_gb_per_s: Some(25.0),
        mode: TransferTimingMode::DestinationMissing,
    };
    let engine = EngineArgs::default();
    let config = resolve(RunDescription {
        pools: vec![
            role_pool(
                WorkerRole::Prefill,
                1,
                &EngineArgs {
                    common: CommonArgs {
                        kv_transfer: transfer,
                        ..engine.common.clone()
                    },
                    ..engine.clone()
                },
            ),
            role_pool(WorkerRole::Decode, 1, &engine),
        ],
        ..RunDescription::default()
    })
    .expect("a valid run");
    let request = |row: u64, arrival_ns: u64, input: u64, output: u64, ids: Vec<u64>| RequestSpec {
        row,
        arrival: ms(arrival_ns),
        policy_class: None,
        input_tokens: input,
        output_tokens: output,
        priority: 0.0,
        strict_priority: 0,
        prompt: PromptSpec::HashIds {
            hash_ids: ids,
            tokens_per_hash: 512,
        },
        pinned_worker: None,
    };
    let requests = vec![
        request(0, 0, 1024, 3, vec![1, 2]),
        request(1, 10_000_001, 600, 2, vec![1, 5]),
    ];
    let result = run(Options::new(config), requests).unwrap();
    let instants = |r: &RequestRecord| {
        let h = r.handoff().expect("a disaggregated request hands off");
        let times = [
            h.prefill_end,
            h.transfer_start,
            h.transfer_end,
            h.prefill_release,
            r.first_token,
            r.completion,
        ];
        times.map(|t| t.expect("every instant happened").as_ns())
    };
    // R0: held at the prefill pass end, moved whole (16 blocks), released at the end of R1's
    // prefill pass, three decode steps. Dynamo prints 37.85942112 for the activation: the
    // transfer's 0.12 ns are rounded away.
    assert_eq!(
        instants(&result.records[0]),
        [
            32_490_712, 32_490_712, 37_859_421, 50_331_535, 43_652_141, 55_237_735
        ]
    );
    // R1: reuses 512 tokens on the prefill worker, waits for the decode pass end, moves only
    // its 2 blocks the decode cache lacks (0.67108864 ms).
    assert_eq!(
        instants(&result.records[1]),
        [
            50_331_535, 55_237_735, 55_908_824, 55_908_824, 61_679_720, 67_450_668
        ]
    );
    assert_eq!(result.records[1].reused_input_tokens, 512);
    assert_eq!(result.records[1].admit, Some(ms(32_490_712)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// VOPR-style: random prefill and decode pools (small KV pools, few running slots,
    /// random transfer settings) under random workloads, every checker after every event:
    /// every request ends, each handoff's instants come in their order, and a rerun is
    /// identical.
    #[test]
    fn random_disaggregated_systems_hand_every_request_off_in_order(
        case in case(),
        seed in 0u64..1000,
        (prefill, decode) in (1u32..3, 1u32..3),
        transfer in (0u64..3, prop::option::of(0u32..40), any::<bool>()),
    ) {
        let (bytes, bandwidth, missing) = transfer;
        let transfer = KvTransfer {
            bytes_per_token: (bytes > 0).then_some(bytes * 50_000),
            bandwidth_gb_per_s: bandwidth.map(f64::from),
            mode: match missing {
                true => TransferTimingMode::DestinationMissing,
                false => TransferTimingMode::FullPrompt,
            },
        };
        let config = disaggregated(&case, seed, prefill, decode, transfer);
        let run_once = || run(Options::new(config.clone()), requests(&case));
        let result = run_once().map_err(|v| TestCaseError::fail(format!("{v}")))?;
        prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
        prop_assert_eq!(result.count(EndStatus::Pending), 0, "seed {}", seed);
        for r in &result.records {
            check_handoff_order(r).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        }
        prop_assert_eq!(run_once().unwrap().records, result.records);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Decode pools far too small for the load (preemption storms on the decode worker,
    /// handoffs that wait for blocks, prompts that fit only the prefill pool): the run still ends
    /// with every request ended, each completed one handed off in order.
    #[test]
    fn disaggregated_preemption_storms_make_progress(case in storm_case(), seed in 0u64..1000) {
        let mut config = disaggregated(&case, seed, 1, 1, KvTransfer::default());
        // A decode pool half the prefill pool's: some prompts fit only the prefill worker.
        let decode = &mut config.pools[1].engine;
        decode.common.capacity.num_gpu_blocks = (decode.common.capacity.num_gpu_blocks / 2).max(1);
        let result = run(Options::new(config), requests(&case))
            .map_err(|v| TestCaseError::fail(format!("{v}")))?;
        prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
        prop_assert_eq!(result.count(EndStatus::Pending), 0, "seed {}", seed);
        for r in &result.records {
            check_handoff_order(r).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Skipping quiet passes changes nothing in disaggregated serving: a decode worker with a
    /// handoff waiting runs no quiet run, and a handoff reaching one in a run cuts it, so
    /// every record is the one stepping pass by pass gives.
    #[test]
    fn disaggregated_runs_skip_quiet_passes_without_changing_a_record(
        case in case(),
        seed in 0u64..1000,
        (prefill, decode) in (1u32..3, 1u32..3),
        bandwidth in prop::option::of(1u32..40),
    ) {
        let transfer = KvTransfer {
            bytes_per_token: Some(100_000),
            bandwidth_gb_per_s: bandwidth.map(f64::from),
            mode: TransferTimingMode::DestinationMissing,
        };
        let mut config = disaggregated(&case, seed, prefill, decode, transfer);
        config.delays = TransportDelays::default();
        let stepped = run(Options::new(config.clone()).with_stepping(Stepping::PassByPass), requests(&case))
            .map_err(|v| TestCaseError::fail(format!("{v}")))?;
        let skipped = run(Options::new(config), requests(&case))
            .map_err(|v| TestCaseError::fail(format!("{v}")))?;
        prop_assert_eq!(&skipped.records, &stepped.records, "seed {}", seed);
    }
}

/// A completed request's handoff: admitted, prefilled, reserved, landed, admitted on its
/// decode worker, first token, completion, each no earlier than the one before (after a
/// migration, the last attempt's handoff); its source released no earlier than it landed.
fn check_handoff_order(r: &RequestRecord) -> Result<(), String> {
    if r.status != Status::Completed {
        return Ok(());
    }
    let h = r.handoff().ok_or(format!("row {} has no handoff", r.row))?;
    let chain = [
        Some(r.arrival),
        r.admit,
        h.prefill_end,
        h.transfer_start,
        h.transfer_end,
        h.decode_admit,
        r.first_token.or(r.completion),
        r.completion,
    ];
    // A migrated request's first admission and token are its first attempt's; its handoff
    // is its last attempt's.
    let chain = match r.migrations() {
        0 => &chain[..],
        _ => &chain[2..6],
    };
    let times: Option<Vec<SimTime>> = chain.iter().copied().collect();
    let times = times.ok_or(format!("row {}: an instant is missing: {h:?}", r.row))?;
    if times.windows(2).any(|w| w[0] > w[1]) || h.prefill_release < h.transfer_end {
        return Err(format!("row {}: out of order: {times:?}, {h:?}", r.row));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// VOPR-style with faults: random down windows of prefill and decode workers, workers
    /// joining either pool and random migration limits, every checker after every event
    /// (no flight, reservation or booking outlives its request): every request ends once,
    /// each completed one with all its tokens and its last handoff in order, and a rerun is
    /// identical.
    #[test]
    fn losing_prefill_or_decode_workers_ends_every_request_once(
        case in case(),
        seed in 0u64..1000,
        (prefill, decode) in (1u32..3, 1u32..3),
        downs in prop::collection::vec((0u64..4, 0u64..60, prop::option::of(1u64..40)), 0..4),
        join in prop::option::of((0usize..2, 0u64..60)),
        migration_limit in 0u32..3,
        bandwidth in prop::option::of(1u32..40),
    ) {
        let transfer = KvTransfer {
            bytes_per_token: Some(100_000),
            bandwidth_gb_per_s: bandwidth.map(f64::from),
            mode: TransferTimingMode::FullPrompt,
        };
        let mut config = disaggregated(&case, seed, prefill, decode, transfer);
        config.faults = down_windows(u64::from(prefill + decode), &downs);
        if let Some((pool, at)) = join {
            config.faults.push(Fault::WorkerUp { pool, at: ms(at * 1_000_000) });
        }
        config.migration_limit = migration_limit;
        let run_once = || run(Options::new(config.clone()), requests(&case));
        let result = run_once().map_err(|v| TestCaseError::fail(format!("{v}")))?;
        prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
        prop_assert_eq!(result.count(EndStatus::Pending), 0, "seed {}", seed);
        for r in &result.records {
            prop_assert!(r.migrations() <= migration_limit);
            if r.status == Status::Completed {
                prop_assert_eq!(r.tokens_received, r.output_tokens, "seed {}", seed);
            }
            check_handoff_order(r).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        }
        prop_assert_eq!(run_once().unwrap().records, result.records);
    }
}

/// Down windows `(worker, at_ms, length_ms)` of workers below `workers`, dropping those that
/// overlap an earlier one of the same worker.
fn down_windows(workers: u64, downs: &[(u64, u64, Option<u64>)]) -> Vec<Fault> {
    let mut kept: Vec<(u64, u64, Option<u64>)> = Vec::new();
    for &(worker, at, length) in downs {
        let until = length.map(|l| at + l);
        let overlaps = kept.iter().any(|&(w, a, u)| {
            w == worker && until.is_none_or(|until| a < until) && u.is_none_or(|u| at < u)
        });
        if worker < workers && !overlaps {
            kept.push((worker, at, until));
        }
    }
    let at_ms = |v: u64| SimTime::from_ns(v * 1_000_000);
    kept.into_iter()
        .map(|(worker, at, until)| Fault::WorkerDown {
            worker,
            at: at_ms(at),
            until: until.map(at_ms),
        })
        .collect()
}

/// One 1,024-token request with 200 output tokens at 0 ms on `prefill` + `decode` workers of
/// the default engine (transfers of 131,072 B per token at `bandwidth` GB/s), with `faults`
/// and `migration_limit`.
fn one_long_request(
    prefill: u32,
    decode: u32,
    bandwidth: Option<f64>,
    faults: Vec<Fault>,
    migration_limit: u32,
) -> RequestRecord {
    let engine = EngineArgs::default();
    let transfer = KvTransfer {
        bytes_per_token: Some(131_072),
        bandwidth_gb_per_s: bandwidth,
        mode: TransferTimingMode::FullPrompt,
    };
    let prefill_engine = EngineArgs {
        common: CommonArgs {
            kv_transfer: transfer,
            ..engine.common.clone()
        },
        ..engine.clone()
    };
    let config = resolve(RunDescription {
        pools: vec![
            role_pool(WorkerRole::Prefill, prefill, &prefill_engine),
            role_pool(WorkerRole::Decode, decode, &engine),
        ],
        faults,
        migration_limit,
        check_every_event: true,
        ..RunDescription::default()
    })
    .expect("a valid run");
    let request = RequestSpec {
        row: 0,
        arrival: SimTime::ZERO,
        policy_class: None,
        input_tokens: 1024,
        output_tokens: 200,
        priority: 0.0,
        strict_priority: 0,
        prompt: PromptSpec::HashIds {
            hash_ids: vec![1, 2],
            tokens_per_hash: 512,
        },
        pinned_worker: None,
    };
    let result = run(Options::new(config), vec![request]).unwrap();
    result.records[0].clone()
}

fn down(worker: u64, at_ms: u64, until_ms: Option<u64>) -> Fault {
    let at = |v: u64| SimTime::from_ns(v * 1_000_000);
    Fault::WorkerDown {
        worker,
        at: at(at_ms),
        until: until_ms.map(at),
    }
}

#[test]
fn a_lost_decode_worker_migrates_its_request_through_prefill_to_another_decode_worker() {
    let calm = one_long_request(1, 2, None, vec![], 1);
    let decode_worker = calm.rank().unwrap().worker_id;
    let lost = one_long_request(1, 2, None, vec![down(decode_worker, 100, None)], 1);
    assert_eq!(
        (lost.status.clone(), lost.migrations()),
        (Status::Completed, 1)
    );
    assert_eq!(lost.tokens_received, 200, "every token, once");
    assert_ne!(lost.rank().unwrap().worker_id, decode_worker);
    // The tokens sent before the loss joined the prompt, which the prefill worker computed
    // again (at most 512 tokens cached): its second handoff comes after the loss.
    let h = lost.handoff().cloned().unwrap();
    assert!(h.prefill_end.unwrap() > ms(100_000_000), "{h:?}");
    assert_eq!(
        lost.first_token, calm.first_token,
        "the client's first token stays"
    );
    assert!(lost.completion > calm.completion);
    let aborted = one_long_request(1, 2, None, vec![down(decode_worker, 100, None)], 0);
    assert_eq!(
        (aborted.status, aborted.completion),
        (
            Status::Aborted(AbortReason::WorkerDown),
            Some(ms(100_000_000))
        )
    );
}

#[test]
fn a_prefill_worker_lost_mid_transfer_loses_the_handoff_and_one_lost_after_landing_does_not() {
    // At 1 GB/s the 1,024-token prompt moves for 134.2 ms after its 32.5 ms prefill.
    let calm = one_long_request(2, 1, Some(1.0), vec![], 1);
    let h = calm.handoff().cloned().unwrap();
    let source = h.prefill_rank.worker_id;
    assert_eq!(h.transfer_end.unwrap().as_ns(), 32_490_712 + 134_217_728);
    let mid = one_long_request(2, 1, Some(1.0), vec![down(source, 100, None)], 1);
    assert_eq!(
        (mid.status.clone(), mid.migrations()),
        (Status::Completed, 1)
    );
    let again = mid.handoff().cloned().unwrap();
    assert_ne!(
        again.prefill_rank.worker_id, source,
        "prefilled again elsewhere"
    );
    assert!(again.transfer_start.unwrap() > ms(100_000_000));
    assert_eq!(mid.tokens_received, 200);
    // Landed at 166.7 ms: the decode worker holds the prompt, the loss of its source is moot.
    let after = one_long_request(2, 1, Some(1.0), vec![down(source, 170, None)], 1);
    assert_eq!((&after.status, after.migrations()), (&Status::Completed, 0));
    assert_eq!(after.completion, calm.completion);
}

/// Requests `(arrival_ns, input_tokens)` with one output token each (hash ids unique per
/// request) on `prefill` workers of `prefill_dp` ranks and one decode worker of the default
/// engine.
fn prefill_ranks_run(prefill: u32, prefill_dp: u32, requests: &[(u64, u64)]) -> Vec<RequestRecord> {
    let engine = EngineArgs::default();
    let prefill_engine = EngineArgs {
        common: CommonArgs {
            dp_size: prefill_dp,
            ..engine.common.clone()
        },
        ..engine.clone()
    };
    let config = resolve(RunDescription {
        pools: vec![
            role_pool(WorkerRole::Prefill, prefill, &prefill_engine),
            role_pool(WorkerRole::Decode, 1, &engine),
        ],
        check_every_event: true,
        ..RunDescription::default()
    })
    .expect("a valid run");
    let specs: Vec<RequestSpec> = requests
        .iter()
        .enumerate()
        .map(|(row, &(arrival_ns, input))| RequestSpec {
            row: row as u64,
            arrival: ms(arrival_ns),
            policy_class: None,
            input_tokens: input,
            output_tokens: 1,
            priority: 0.0,
            strict_priority: 0,
            prompt: PromptSpec::HashIds {
                hash_ids: (0..input.div_ceil(512))
                    .map(|k| 100 * row as u64 + k)
                    .collect(),
                tokens_per_hash: 512,
            },
            pinned_worker: None,
        })
        .collect();
    run(Options::new(config), specs).unwrap().records
}

/// As 1.6.1 does: a disaggregated worker's data-parallel ranks run their
/// passes in lock-step, each as long as the slowest rank's, and a request reaching an idle
/// rank waits for the worker's pass in progress; two workers of one rank each do not wait.
#[test]
fn a_disaggregated_workers_ranks_run_in_lock_step_passes() {
    // 1,024 and 512 tokens at 0 on the two ranks: both held when P(1024) ends.
    let together = prefill_ranks_run(1, 2, &[(0, 1024), (0, 512)]);
    let ranks: Vec<u32> = together
        .iter()
        .map(|r| r.handoff().unwrap().prefill_rank.dp_rank)
        .collect();
    assert_eq!(ranks.len(), 2);
    assert_ne!(ranks[0], ranks[1], "one request per rank");
    for r in &together {
        let h = r.handoff().unwrap();
        assert_eq!(h.prefill_end, Some(ms(32_490_712)), "row {}", r.row);
    }
    // 512 tokens at 1 ms on the idle rank: admitted when the worker's pass ends.
    let late = prefill_ranks_run(1, 2, &[(0, 1024), (1_000_000, 512)]);
    assert_eq!(late[1].admit, Some(ms(32_490_712)));
    let (h0, h1) = (
        late[0].handoff().cloned().unwrap(),
        late[1].handoff().cloned().unwrap(),
    );
    assert_ne!(h0.prefill_rank, h1.prefill_rank);
    assert_eq!(h1.prefill_end, Some(ms(32_490_712 + 24_385_704)));
    // Two workers of one rank each: admitted at once, held after P(512).
    let apart = prefill_ranks_run(2, 1, &[(0, 1024), (1_000_000, 512)]);
    assert_eq!(apart[1].admit, Some(ms(1_000_000)));
    let h = apart[1].handoff().unwrap();
    assert_eq!(h.prefill_end, Some(ms(1_000_000 + 24_385_704)));
}
