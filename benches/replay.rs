//! Replay speed: seeded Poisson traces replayed through the whole simulator.
//!
//! (a) 10,000 requests on 8 workers at 50 req/s, (b) 100,000 requests on 32 workers at
//! 200 req/s; input 1024, output 128 tokens, unique prompts. The traces are written to
//! target/bench-traces/ so that Dynamo can replay the very same files:
//! `../shared/tools/dynosim --trace target/bench-traces/a.jsonl --workers 8 --out /tmp/a.csv`
//! (compare its `sim_wall_ms`). Run: `cargo bench --bench replay [-- a|b]`.

use rand_distr::{Distribution, Exp};
use routersim::mocker::EngineArgs;
use routersim::pipeline::{self, ReplaySetup, RunSpec};
use routersim::scheduling::router_config::RouterConfig;
use routersim::sim::RouterMode;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Case {
    name: &'static str,
    requests: u64,
    workers: u32,
    rate_per_s: f64,
}

const CASES: [Case; 2] = [
    Case {
        name: "a",
        requests: 10_000,
        workers: 8,
        rate_per_s: 50.0,
    },
    Case {
        name: "b",
        requests: 100_000,
        workers: 32,
        rate_per_s: 200.0,
    },
];

/// Writes the case's trace (whole-µs timestamps, two unique 512-token hash ids per request).
fn write_trace(case: &Case, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{}.jsonl", case.name));
    let mut rng = routersim::rng::stream(1, "bench/arrivals");
    let gaps = Exp::new(case.rate_per_s / 1000.0).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut t_us = 0u64;
    for i in 0..case.requests {
        let id = 1 + 2 * i;
        writeln!(
            out,
            r#"{{"timestamp": {}.{:03}, "input_length": 1024, "output_length": 128, "hash_ids": [{}, {}]}}"#,
            t_us / 1000,
            t_us % 1000,
            id,
            id + 1
        )
        .unwrap();
        let gap_ms: f64 = gaps.sample(&mut rng);
        t_us += (gap_ms * 1000.0).round() as u64;
    }
    path
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-traces");
    for case in CASES
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.name))
    {
        let trace = write_trace(case, &dir);
        let setup = ReplaySetup {
            trace: trace.clone(),
            trace_block_size: 512,
            policy: None,
            router: RouterConfig::default(),
            engine: EngineArgs::default(),
            workers: case.workers,
            router_mode: RouterMode::KvRouter,
            seed: 0,
        };
        let started = Instant::now();
        let result = pipeline::execute(&RunSpec::from_replay(&setup))
            .expect("the bench trace replays")
            .result;
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        println!(
            "replay {}: {} requests on {} workers, {} events, makespan {:.1} s simulated; wall {:.0} ms, {:.0} simulated requests/s ({})",
            case.name,
            result.records.len(),
            case.workers,
            result.events,
            result.end_time.as_secs_f64(),
            wall_ms,
            result.records.len() as f64 / (wall_ms / 1000.0),
            trace.display()
        );
    }
}
