//! Sweep throughput: a 200-run sweep of the premium scenario (40 regular quanta x 5 seeds,
//! arrival jitter on) at 1 thread and at all threads, reported as runs per second and the
//! speed-up. Run: `cargo bench --bench sweep`.

use routersim::sweep::{Grid, SweepOptions, SweepPlan};
use std::path::Path;
use std::time::Instant;

fn options(jobs: Option<usize>) -> SweepOptions {
    let quanta: Vec<String> = (1..=40).map(|i| (i * 16).to_string()).collect();
    let axis = format!("router.policy_classes.regular.quantum={}", quanta.join(","));
    SweepOptions {
        scenario: Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/premium-vs-regular-weighted.yaml"),
        grid: Grid::parse(&[axis]).expect("the bench axis parses"),
        seeds: 5,
        jobs,
        shard: None,
        arrival_jitter_ns: 1_000,
        prefix_n: None,
        seed: None,
    }
}

/// Runs a plan on `jobs` threads and returns runs per second (best of `repeats`).
fn runs_per_s(jobs: Option<usize>, repeats: usize) -> (usize, f64) {
    let plan = SweepPlan::new(&options(jobs)).expect("the bench sweep is valid");
    let mut best = 0.0f64;
    let mut runs = 0;
    for _ in 0..repeats {
        let start = Instant::now();
        let rows = plan.run(false).expect("the sweep runs").rows;
        let rate = rows.len() as f64 / start.elapsed().as_secs_f64();
        runs = rows.len();
        best = best.max(rate);
    }
    (runs, best)
}

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (runs, one) = runs_per_s(Some(1), 2);
    let (_, all) = runs_per_s(None, 2);
    println!("sweep: {runs} runs (40 points x 5 seeds) of premium-vs-regular-weighted");
    println!("  1 thread:   {one:8.1} runs/s");
    println!(
        "  {threads} threads: {all:8.1} runs/s  (speed-up {:.2}x)",
        all / one
    );
}
