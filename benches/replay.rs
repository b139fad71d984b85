//! Replay speed against Dynamo 1.6.1's own offline replay, side by side in one run.
//!
//! Traces (seeded, written to target/bench-traces/ so that Dynamo replays the very same files):
//! - (a) 10,000 requests at 50 req/s on 8 workers, (b) 100,000 at 200 req/s on 32 workers:
//!   Poisson arrivals, input 1024, output 128 tokens, unique prompts.
//! - `mooncake`: 1,000 Mooncake-like rows ([`write_mooncake_trace`]): long chunked prompts
//!   (890 to 118,753 tokens, mean about 8.3k), heavy prefix reuse (shared system prompts and
//!   multi-turn sessions), short and long outputs (mean about 177); on 1 and 4 workers, and
//!   served disaggregated on 1 prefill + 1 decode and 2 + 2 workers (`mooncake-1p1d`,
//!   `mooncake-2p2d`), against Dynamo's disaggregated replay.
//! - `planner`: trace (a) starting on 1 worker with Dynamo's planner in the loop ([`PLANNER`]:
//!   load-based scaling every 5 s, up to 8 workers): routersim's native planner against
//!   Dynamo's own inside its replay (`tools/dynamo-replay --planner`, whose call time counts
//!   the planner's Python work).
//! - `big`, only with `ROUTERSIM_BENCH_BIG=1`: 1,000,000 requests of the (a)/(b) shape at
//!   1,000 req/s in two classes (premium and regular, quanta 512:128) on 128 workers, timed
//!   once with its peak resident size, without Dynamo's side.
//!
//! Each case is timed three ways: routersim's pipeline (`pipeline::execute` in this process:
//! reading the trace, simulating, computing the metrics; the like-for-like counterpart of
//! Dynamo's timer), routersim's whole process (`routersim replay ... --quiet`: start-up, the
//! same, and writing its CSVs; this build's binary, or the one `ROUTERSIM_BENCH_BINARY`
//! names), and Dynamo's own replay time (`sim_wall_ms` of
//! `tools/dynamo-replay`, or of the driver `ROUTERSIM_DYNAMO_REPLAY` names;
//! `ROUTERSIM_DYNAMO_REPLAY=off` skips it). The three take turns, in 5 rounds
//! (`ROUTERSIM_BENCH_RUNS` to change), so that a burst of load from the machine's neighbours
//! falls on both sides alike; each side counts its best run. Each line gives the process's
//! peak resident size and ends with the ratios Dynamo / routersim, the whole process's first
//! (what a user sees), the pipeline's beside it. Run: `cargo bench --bench replay [-- a b mooncake-1 mooncake-4
//! mooncake-1p1d mooncake-2p2d planner]`.

use rand::RngExt;
use rand_distr::{Distribution, Exp, LogNormal};
use routersim::mocker::{CommonArgs, EngineArgs, WorkerRole};
use routersim::pipeline::{self, DisaggregatedSetup, PlannerSource, ReplaySetup, RunSpec};
use routersim::planner::config::PlannerConfig;
use routersim::scheduling::router_config::RouterConfig;
use routersim::sim::RouterMode;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Rounds unless `ROUTERSIM_BENCH_RUNS` says otherwise. Each round times each side; the best
/// run of each counts (the machine is shared: noise only adds time).
const ROUNDS: usize = 5;

fn rounds() -> usize {
    std::env::var("ROUTERSIM_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(ROUNDS)
}

#[derive(Copy, Clone)]
enum Trace {
    /// Poisson arrivals of unique 1024-in, 128-out prompts; with `two_classes`, rows
    /// alternate between `premium` and `regular` ([`BIG_POLICY`]).
    Poisson {
        requests: u64,
        rate_per_s: f64,
        two_classes: bool,
    },
    Mooncake,
}

/// The classes of the 1M-request case: DRR quanta 512:128, no busy threshold.
const BIG_POLICY: &str = "default_policy_family: regular
uncached_isl_buckets:
  - min_tokens: 0
    bucket: all
policy_classes:
  - name: premium
    policy_family: premium
    cache_bucket: all
    queue_policy: fcfs
    quantum: 512
  - name: regular
    policy_family: regular
    cache_bucket: all
    queue_policy: fcfs
    quantum: 128
";

/// The 1M-request case, run only with `ROUTERSIM_BENCH_BIG=1` (without Dynamo's side, whose
/// replay of it would take many minutes; one round).
const BIG: Case = Case {
    name: "big",
    trace: Trace::Poisson {
        requests: 1_000_000,
        rate_per_s: 1_000.0,
        two_classes: true,
    },
    workers: Workers::Aggregated(128),
    planner: false,
};

fn big_case_asked() -> bool {
    std::env::var_os("ROUTERSIM_BENCH_BIG").is_some_and(|v| v == "1")
}

/// Who serves a case: aggregated workers (of one rank, or of `dp_size` attention-DP ranks
/// that pass in lock-step), or prefill and decode workers.
#[derive(Copy, Clone)]
enum Workers {
    Aggregated(u32),
    DataParallel { workers: u32, dp_size: u32 },
    Disaggregated { prefill: u32, decode: u32 },
}

impl Workers {
    /// The `replay` (and `tools/dynamo-replay`) flags that say so.
    fn flags(self) -> Vec<String> {
        match self {
            Workers::Aggregated(n) => vec!["--workers".into(), n.to_string()],
            Workers::DataParallel { workers, dp_size } => vec![
                "--workers".into(),
                workers.to_string(),
                "--engine".into(),
                format!(r#"{{"engine": {{}}, "dp_size": {dp_size}}}"#),
            ],
            Workers::Disaggregated { prefill, decode } => vec![
                "--prefill-workers".into(),
                prefill.to_string(),
                "--decode-workers".into(),
                decode.to_string(),
            ],
        }
    }

    fn describe(self) -> String {
        match self {
            Workers::Aggregated(n) => format!("{n} workers"),
            Workers::DataParallel { workers, dp_size } => {
                format!("{workers} workers of {dp_size} ranks")
            }
            Workers::Disaggregated { prefill, decode } => {
                format!("{prefill} prefill + {decode} decode workers")
            }
        }
    }
}

struct Case {
    name: &'static str,
    trace: Trace,
    workers: Workers,
    /// Dynamo's planner in the loop ([`PLANNER`]): routersim's native one, Dynamo's own
    /// (`tools/dynamo-replay --planner`, which needs the planner's Python packages).
    planner: bool,
}

/// The planner case's configuration: load-based scaling every 5 s, up to 8 workers.
const PLANNER: &str = "optimization_target: load
load_adjustment_interval_seconds: 5
decode_scale_up_kv_rate: 10
decode_scale_down_kv_rate: 2
min_endpoint: 1
max_gpu_budget: 8
";

const CASES: [Case; 8] = [
    Case {
        name: "a",
        trace: Trace::Poisson {
            requests: 10_000,
            rate_per_s: 50.0,
            two_classes: false,
        },
        workers: Workers::Aggregated(8),
        planner: false,
    },
    Case {
        name: "b",
        trace: Trace::Poisson {
            requests: 100_000,
            rate_per_s: 200.0,
            two_classes: false,
        },
        workers: Workers::Aggregated(32),
        planner: false,
    },
    Case {
        name: "mooncake-1",
        trace: Trace::Mooncake,
        workers: Workers::Aggregated(1),
        planner: false,
    },
    Case {
        name: "mooncake-4",
        trace: Trace::Mooncake,
        workers: Workers::Aggregated(4),
        planner: false,
    },
    Case {
        name: "mooncake-2dp2",
        trace: Trace::Mooncake,
        workers: Workers::DataParallel {
            workers: 2,
            dp_size: 2,
        },
        planner: false,
    },
    Case {
        name: "mooncake-1p1d",
        trace: Trace::Mooncake,
        workers: Workers::Disaggregated {
            prefill: 1,
            decode: 1,
        },
        planner: false,
    },
    Case {
        name: "mooncake-2p2d",
        trace: Trace::Mooncake,
        workers: Workers::Disaggregated {
            prefill: 2,
            decode: 2,
        },
        planner: false,
    },
    Case {
        name: "planner",
        trace: Trace::Poisson {
            requests: 10_000,
            rate_per_s: 50.0,
            two_classes: false,
        },
        workers: Workers::Aggregated(1),
        planner: true,
    },
];

/// Writes a Poisson trace (whole-µs timestamps, two unique 512-token hash ids per request,
/// and with `two_classes` a `policy_class` alternating between premium and regular).
fn write_poisson_trace(path: &Path, requests: u64, rate_per_s: f64, two_classes: bool) {
    let mut rng = routersim::rng::stream(1, "bench/arrivals");
    let gaps = Exp::new(rate_per_s / 1000.0).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut t_us = 0u64;
    for i in 0..requests {
        let id = 1 + 2 * i;
        let class = match (two_classes, i % 2) {
            (false, _) => "",
            (true, 0) => r#", "policy_class": "premium""#,
            (true, _) => r#", "policy_class": "regular""#,
        };
        writeln!(
            out,
            r#"{{"timestamp": {}.{:03}, "input_length": 1024, "output_length": 128, "hash_ids": [{}, {}]{class}}}"#,
            t_us / 1000,
            t_us % 1000,
            id,
            id + 1
        )
        .unwrap();
        let gap_ms: f64 = gaps.sample(&mut rng);
        t_us += (gap_ms * 1000.0).round() as u64;
    }
}

const MOONCAKE_ROWS: u64 = 1_000;
const MOONCAKE_MIN_INPUT: u64 = 890;
const MOONCAKE_MAX_INPUT: u64 = 118_753;
const TRACE_BLOCK_TOKENS: u64 = 512;

/// Writes a Mooncake-like trace and returns a one-line description of what it drew.
///
/// The shape of the public Mooncake conversation trace: whole-ms Poisson arrivals at 6.5
/// req/s; prompts log-normal (mean about 8.3k tokens) clipped to 890..=118,753; 45% of rows
/// continue one of the 64 latest sessions that is shorter than them (the whole earlier
/// prompt is their prefix, as a multi-turn conversation resends its history), 45% start with
/// one of 12 shared system prompts (2 to 16 blocks, Zipf-like popularity), 10% share nothing;
/// outputs 55% short (geometric, mean 24) and 45% long (log-normal, mean about 364, at most
/// 2048). One hash id per 512 tokens, as in the public trace.
fn write_mooncake_trace(path: &Path) -> String {
    let mut rng = routersim::rng::stream(7, "bench/mooncake");
    let gaps = Exp::new(6.5 / 1000.0).unwrap();
    // A log-normal of mean 5.3k: sessions (longer than the history they resend) and the clip
    // raise the mean to about 8.3k.
    let inputs = LogNormal::new((5300f64).ln() - 0.5, 1.0).unwrap();
    let long_outputs = LogNormal::new((364f64).ln() - 0.32, 0.8).unwrap();
    let mut next_id = 1u64;
    let mut fresh = |n: u64| -> Vec<u64> {
        let ids = (next_id..next_id + n).collect();
        next_id += n;
        ids
    };
    let roots: Vec<Vec<u64>> = (0..12)
        .map(|_| {
            let n = rng.random_range(2..=16u64);
            fresh(n)
        })
        .collect();
    let mut sessions: Vec<Vec<u64>> = Vec::new();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let (mut t_ms, mut sum_in, mut sum_out, mut shared_blocks, mut all_blocks) =
        (0f64, 0u64, 0u64, 0u64, 0u64);
    let (mut min_in, mut max_in) = (u64::MAX, 0u64);
    for _ in 0..MOONCAKE_ROWS {
        let mut input =
            (inputs.sample(&mut rng) as u64).clamp(MOONCAKE_MIN_INPUT, MOONCAKE_MAX_INPUT);
        let pick: f64 = rng.random();
        let mut prefix: Vec<u64> = Vec::new();
        if pick < 0.45 {
            let recent = sessions.len().saturating_sub(64);
            let fits: Vec<usize> = (recent..sessions.len())
                .filter(|&s| (sessions[s].len() as u64) * TRACE_BLOCK_TOKENS < MOONCAKE_MAX_INPUT)
                .collect();
            if !fits.is_empty() {
                let s = fits[rng.random_range(0..fits.len())];
                prefix = sessions[s].clone();
                // A later turn is longer than the history it resends.
                let history = prefix.len() as u64 * TRACE_BLOCK_TOKENS;
                input = input
                    .max(history + rng.random_range(1..=2048u64))
                    .min(MOONCAKE_MAX_INPUT);
                sessions.remove(s);
            }
        } else if pick < 0.90 {
            // Zipf-like: root k with weight 1/(k+1).
            let weights: Vec<f64> = (0..roots.len()).map(|k| 1.0 / (k + 1) as f64).collect();
            let mut x = rng.random::<f64>() * weights.iter().sum::<f64>();
            let k = weights
                .iter()
                .position(|w| {
                    x -= w;
                    x < 0.0
                })
                .unwrap_or(roots.len() - 1);
            prefix = roots[k].clone();
        }
        let blocks = input.div_ceil(TRACE_BLOCK_TOKENS);
        // The prefix covers at most all but the prompt's last block.
        prefix.truncate((blocks - 1) as usize);
        shared_blocks += prefix.len() as u64;
        all_blocks += blocks;
        let own = fresh(blocks - prefix.len() as u64);
        let hash_ids: Vec<u64> = prefix.into_iter().chain(own).collect();
        let output = if rng.random::<f64>() < 0.55 {
            1 + (Exp::new(1.0 / 23.0).unwrap().sample(&mut rng) as u64).min(255)
        } else {
            (long_outputs.sample(&mut rng) as u64).clamp(1, 2048)
        };
        let ids: Vec<String> = hash_ids.iter().map(u64::to_string).collect();
        writeln!(
            out,
            r#"{{"timestamp": {}, "input_length": {input}, "output_length": {output}, "hash_ids": [{}]}}"#,
            t_ms.round() as u64,
            ids.join(", ")
        )
        .unwrap();
        sessions.push(hash_ids);
        t_ms += gaps.sample(&mut rng);
        (sum_in, sum_out) = (sum_in + input, sum_out + output);
        (min_in, max_in) = (min_in.min(input), max_in.max(input));
    }
    format!(
        "inputs {min_in}..{max_in} mean {}, outputs mean {}, {:.0}% of prompt blocks shared",
        sum_in / MOONCAKE_ROWS,
        sum_out / MOONCAKE_ROWS,
        100.0 * shared_blocks as f64 / all_blocks as f64
    )
}

/// In each round, routersim's runs of one side go on until they have taken this long: one
/// run of a short case would measure one instant of the machine's load, while each of
/// Dynamo's runs takes seconds.
const ROUND_MEASURE_S: f64 = 0.4;

/// Most timed runs of one side in one round.
const MAX_RUNS_PER_ROUND: usize = 50;

/// Set in the bench's own child that measures a command's peak ([`peak_helper`]).
const PEAK_HELPER_ENV: &str = "ROUTERSIM_BENCH_PEAK_HELPER";

/// Runs `command` to its end (it must succeed) and returns its wall time in ms (from its
/// start to its reaping) and its peak resident size in MiB.
///
/// Linux carries a process's peak across `exec` (`ru_maxrss` is the larger of the new
/// program's and the old address space's), so a child forked straight from this process,
/// which holds the whole of a large in-process replay by then, would report this process's
/// peak as its own. The command is started instead by a fresh copy of this binary
/// ([`peak_helper`]), a few MiB in size, which reports the peak of its child.
fn run_measured(command: &Command) -> (f64, f64) {
    let output = Command::new(std::env::current_exe().expect("the bench binary"))
        .env(PEAK_HELPER_ENV, "1")
        .arg(command.get_program())
        .args(command.get_args())
        .output()
        .expect("the peak helper runs");
    assert!(output.status.success(), "routersim replay failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let figures: Vec<f64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("the peak helper prints numbers"))
        .collect();
    let [wall_ms, peak_kib] = figures[..] else {
        panic!("the peak helper prints its child's wall time and peak, not {text:?}");
    };
    (wall_ms, peak_kib / 1024.0)
}

/// The peak helper: runs the command in its arguments (output discarded), reaps it with
/// `wait4` to read its resource use as std's `wait` cannot, and prints its wall time in ms
/// and its peak resident size in KiB (`ru_maxrss`). Its exit status is the command's
/// success.
#[allow(
    clippy::zombie_processes,
    reason = "wait4 reaps the child, reporting its resource use as std's wait cannot"
)]
fn peak_helper() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let started = Instant::now();
    let child = Command::new(&args[0])
        .args(&args[1..])
        .env_remove(PEAK_HELPER_ENV)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("routersim runs");
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct that `wait4` fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child` is this process's own unreaped child; the pointers are to live locals.
    let reaped = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(reaped, child.id() as libc::pid_t, "wait4 reaps routersim");
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    println!("{wall_ms} {}", usage.ru_maxrss);
    match libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        true => std::process::ExitCode::SUCCESS,
        false => std::process::ExitCode::FAILURE,
    }
}

/// Best of the times in ms that `measure` measures, over at least one run and
/// [`ROUND_MEASURE_S`].
fn best_ms(mut measure: impl FnMut() -> f64) -> f64 {
    let measuring = Instant::now();
    let mut best = f64::INFINITY;
    // One run per iteration, at most MAX_RUNS_PER_ROUND: bounded.
    for run in 0..MAX_RUNS_PER_ROUND {
        if run > 0 && measuring.elapsed().as_secs_f64() >= ROUND_MEASURE_S {
            break;
        }
        best = best.min(measure());
    }
    best
}

/// The driver of Dynamo's replay to compare against, if any: the repository's own unless
/// `ROUTERSIM_DYNAMO_REPLAY` names another (or is `off`).
fn dynamo_replay() -> Option<PathBuf> {
    match std::env::var_os("ROUTERSIM_DYNAMO_REPLAY") {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/dynamo-replay")),
    }
}

/// The routersim binary whose whole process is timed: this build's, unless
/// `ROUTERSIM_BENCH_BINARY` names another (such as the profile-guided build of
/// `tools/pgo-build.sh`).
fn routersim_binary() -> PathBuf {
    match std::env::var_os("ROUTERSIM_BENCH_BINARY") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(env!("CARGO_BIN_EXE_routersim")),
    }
}

/// Dynamo's own replay time (`sim_wall_ms`) of one run.
fn dynamo_ms(
    script: &Path,
    trace: &Path,
    workers: Workers,
    extra: &[&std::ffi::OsStr],
    out: &Path,
) -> Option<f64> {
    let output = Command::new(script)
        .arg("--trace")
        .arg(trace)
        .args(workers.flags())
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!(
            "dynamo-replay failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last()?).ok()?;
    // With a planner, Dynamo's own timer leaves out the planner's work (it answers from
    // Python, between the simulator's steps): the call's wall time counts it.
    match extra.is_empty() {
        true => summary["sim_wall_ms"].as_f64(),
        false => summary["call_wall_ms"].as_f64(),
    }
}

/// The prefill and decode pools of a disaggregated case (each the default engine in its
/// role, as `tools/dynamo-replay` makes them from the default `--engine`).
fn disaggregated(workers: Workers) -> Option<DisaggregatedSetup> {
    let Workers::Disaggregated { prefill, decode } = workers else {
        return None;
    };
    let engine = |role| EngineArgs {
        common: CommonArgs {
            role,
            ..CommonArgs::default()
        },
        ..EngineArgs::default()
    };
    Some(DisaggregatedSetup {
        prefill_workers: prefill,
        prefill_engine: engine(WorkerRole::Prefill),
        decode_workers: decode,
        decode_engine: engine(WorkerRole::Decode),
    })
}

fn main() -> std::process::ExitCode {
    if std::env::var_os(PEAK_HELPER_ENV).is_some() {
        return peak_helper();
    }
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/bench-traces");
    std::fs::create_dir_all(&dir).unwrap();
    let dynamo_replay = dynamo_replay();
    if dynamo_replay.is_none() {
        println!("(no Dynamo side: routersim numbers only)");
    }
    let binary = routersim_binary();
    if std::env::var_os("ROUTERSIM_BENCH_BINARY").is_some() {
        println!("(the process timed is {})", binary.display());
    }
    let big = big_case_asked().then_some(&BIG);
    for case in CASES
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.name))
        .chain(big)
    {
        let two_classes = matches!(
            case.trace,
            Trace::Poisson {
                two_classes: true,
                ..
            }
        );
        let policy_path = dir.join("big-policy.yaml");
        if two_classes {
            std::fs::write(&policy_path, BIG_POLICY).unwrap();
        }
        let trace = match case.trace {
            Trace::Poisson {
                requests,
                rate_per_s,
                two_classes,
            } => {
                let path = dir.join(format!("{}.jsonl", case.name));
                write_poisson_trace(&path, requests, rate_per_s, two_classes);
                path
            }
            Trace::Mooncake => {
                let path = dir.join("mooncake.jsonl");
                let shape = write_mooncake_trace(&path);
                println!("mooncake trace: {shape}");
                path
            }
        };
        let setup = ReplaySetup {
            trace: trace.clone(),
            trace_block_size: TRACE_BLOCK_TOKENS,
            policy: two_classes.then(|| {
                routersim::scenario::load_policy_file(&policy_path).expect("the bench policy")
            }),
            policy_file: None,
            router: RouterConfig::default(),
            engine: EngineArgs {
                common: CommonArgs {
                    dp_size: match case.workers {
                        Workers::DataParallel { dp_size, .. } => dp_size,
                        _ => 1,
                    },
                    ..CommonArgs::default()
                },
                ..EngineArgs::default()
            },
            workers: match case.workers {
                Workers::Aggregated(n) | Workers::DataParallel { workers: n, .. } => n,
                Workers::Disaggregated { .. } => 1,
            },
            router_mode: RouterMode::KvRouter,
            seed: 0,
            kv_event_lag: routersim::time::SimDuration::ZERO,
            disaggregated: disaggregated(case.workers),
        };
        let planner_path = dir.join("planner.yaml");
        let mut spec = RunSpec::from_replay(&setup).expect("the bench replay is valid");
        if case.planner {
            std::fs::write(&planner_path, PLANNER).unwrap();
            let config = PlannerConfig::parse(PLANNER).expect("the bench planner");
            let path = planner_path.clone();
            spec.scaling = Some(std::sync::Arc::new(PlannerSource { config, path }));
        }
        let planner_flags: Vec<&std::ffi::OsStr> = match case.planner {
            true => vec!["--planner".as_ref(), planner_path.as_os_str()],
            false => Vec::new(),
        };
        let out = root.join("target/bench-out").join(case.name);
        let dynamo_csv = root.join(format!("target/bench-out/{}-dynamo.csv", case.name));
        let mut result = None;
        let (mut pipeline_ms, mut process_ms) = (f64::INFINITY, f64::INFINITY);
        let mut peak_mib: f64 = 0.0;
        let mut dynamo: Option<f64> = None;
        let mut dynamo_failed = false;
        let case_rounds = if two_classes { 1 } else { rounds() };
        // One round per iteration: bounded.
        for _ in 0..case_rounds {
            pipeline_ms = pipeline_ms.min(best_ms(|| {
                let started = Instant::now();
                let output = pipeline::execute(&spec).expect("the bench trace replays");
                let ms = started.elapsed().as_secs_f64() * 1000.0;
                result = Some(output.result);
                ms
            }));
            process_ms = process_ms.min(best_ms(|| {
                let mut command = Command::new(&binary);
                command
                    .arg("replay")
                    .arg("--trace")
                    .arg(&trace)
                    .args(case.workers.flags())
                    .args(["--quiet", "--force"])
                    .args(two_classes.then_some("--policy"))
                    .args(two_classes.then_some(&policy_path))
                    .args(&planner_flags)
                    .arg("--out")
                    .arg(&out);
                let (ms, peak) = run_measured(&command);
                peak_mib = peak_mib.max(peak);
                ms
            }));
            if let Some(script) = dynamo_replay
                .as_deref()
                .filter(|_| !dynamo_failed && !two_classes)
            {
                match dynamo_ms(script, &trace, case.workers, &planner_flags, &dynamo_csv) {
                    Some(ms) => dynamo = Some(dynamo.map_or(ms, |best| best.min(ms))),
                    None => dynamo_failed = true,
                }
            }
        }
        let result = result.expect("at least one round");
        print!(
            "replay {}: {} requests on {}, {} events, makespan {:.1} s simulated; routersim process {:.1} ms (peak {:.1} MiB), pipeline {:.1} ms",
            case.name,
            result.records.len(),
            case.workers.describe(),
            result.events,
            result.end_time.as_secs_f64(),
            process_ms,
            peak_mib,
            pipeline_ms,
        );
        match dynamo.filter(|_| !dynamo_failed) {
            Some(dynamo) => println!(
                "; Dynamo {:.0} ms: {:.1}x as a process ({:.1}x pipeline)",
                dynamo,
                dynamo / process_ms,
                dynamo / pipeline_ms
            ),
            None => println!(),
        }
    }
    std::process::ExitCode::SUCCESS
}
