//! Capacity-planning speed: the two searches of docs/planning.md on the bundled two-tenant
//! scenario (40 req/s for 180 s), each timed whole, with probes and runs per second.
//! Run: `cargo bench --bench plan`.

use routersim::plan::{self, Goal, PlanOptions};
use std::path::Path;
use std::time::Instant;

fn options(parameter: &str, goal: Goal, range: (f64, f64)) -> PlanOptions {
    PlanOptions {
        scenario: Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/capacity-two-tenants.yaml"),
        overrides: Vec::new(),
        parameter: parameter.to_string(),
        goal,
        range,
        seeds: 4,
        precision: 0.01,
        allow_overload: false,
    }
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores)
        .build()
        .expect("a thread pool");
    let searches = [
        (
            "minimize workers.count 1..64",
            options("workers.count", Goal::Minimize, (1.0, 64.0)),
        ),
        (
            "maximize workload.rate_per_s 1..400",
            options("workload.rate_per_s", Goal::Maximize, (1.0, 400.0)),
        ),
    ];
    for (name, options) in &searches {
        let started = Instant::now();
        let result = plan::plan(options, &pool).expect("the bundled plan runs");
        let wall_s = started.elapsed().as_secs_f64();
        let runs = result.probes.len() * options.seeds as usize;
        println!(
            "plan {name} --seeds {}: answer {:?}, {} probes, {runs} runs in {wall_s:.2} s ({:.1} runs/s on {cores} threads)",
            options.seeds,
            result.answer,
            result.probes.len(),
            runs as f64 / wall_s
        );
    }
}
