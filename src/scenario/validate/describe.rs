//! The text `routersim validate` prints for a validated scenario.

use super::worker_ids;
use crate::mocker::EngineArgs;
use crate::report::verdict::expect::{Expectation, Figure};
use crate::scenario::{Scenario, Workload};
use crate::scheduling::policy;
use crate::sim::{DEFAULT_POOL, RouterMode};
use crate::workload::synth::{Arrival, BurstOrder};

/// The text `routersim validate` prints for a scenario.
pub(in crate::scenario) fn describe(scenario: &Scenario) -> String {
    let mut out = format!(
        "scenario {} (seed {}, source {})\n",
        scenario.name,
        scenario.seed(),
        scenario.source_hash
    );
    match &scenario.policy {
        Some(config) => out.push_str(&policy::describe(config)),
        None => out.push_str("no policy: one synthetic class `default`\n"),
    }
    out.push_str(&describe_workers(scenario));
    out.push_str(&describe_workload(&scenario.workload));
    out.push_str(&format!("expectations: {}\n", scenario.expectations.len()));
    for e in &scenario.expectations {
        out.push_str(&format!("  {}\n", describe_expectation(e)));
    }
    out
}

/// One expectation in the words `check` uses: its label, what it measures when the label is
/// a name, and its bound (`W premium in first 320 (premium among first 320): at least 240`).
fn describe_expectation(e: &Expectation) -> String {
    if *e.figure() == Figure::Stable {
        return format!("{}: the run keeps up with its load", e.label());
    }
    let minus = e.companion().map(|c| format!(" minus {}", c.file));
    let measures = format!("{}{}", e.figure(), minus.unwrap_or_default());
    match e.name() {
        Some(_) => format!("{} ({measures}): {}", e.label(), e.bound()),
        None => format!("{measures}: {}", e.bound()),
    }
}

/// The router mode as a scenario spells it (`router.router_mode`).
fn router_mode_spelling(mode: RouterMode) -> &'static str {
    match mode {
        RouterMode::KvRouter => "kv_router",
        RouterMode::RoundRobin => "round_robin",
    }
}

/// The burst order as a scenario spells it (`workload.burst.order`).
fn burst_order_spelling(order: BurstOrder) -> &'static str {
    match order {
        BurstOrder::Sequential => "sequential",
        BurstOrder::RoundRobin => "round_robin",
        BurstOrder::Alternate => "alternate",
    }
}

/// One line for the unnamed pool; a line per pool, with its worker ids, for named pools.
fn describe_workers(scenario: &Scenario) -> String {
    let engine = |e: &EngineArgs| {
        let chunked = (e.backend.vllm())
            .map(|vllm| format!(", chunked prefill {}", on_off(vllm.enable_chunked_prefill)));
        format!(
            "engine block_size {}, num_gpu_blocks {}, max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}{}",
            e.common.block_size,
            e.common.capacity.num_gpu_blocks,
            e.common.capacity.max_num_seqs,
            e.common.capacity.max_num_batched_tokens,
            on_off(e.common.enable_prefix_caching),
            chunked.unwrap_or_default()
        )
    };
    let (pools, router_mode) = (scenario.pools(), scenario.config().router_mode());
    if let [pool] = pools
        && pool.name == DEFAULT_POOL
    {
        let e = &pool.engine;
        return format!(
            "workers: {} x dp {}, {} router; {}\n",
            pool.count,
            e.common.dp_size,
            router_mode_spelling(router_mode),
            engine(e)
        );
    }
    let total: u64 = pools.iter().map(|p| u64::from(p.count)).sum();
    let mut out = format!(
        "workers: {total} in {} pools, {} router\n",
        pools.len(),
        router_mode_spelling(router_mode),
    );
    let mut first = 0u64;
    for pool in pools {
        let next = first + u64::from(pool.count);
        out.push_str(&format!(
            "  pool {}: {} x dp {} ({}); {}\n",
            pool.name,
            pool.count,
            pool.engine.common.dp_size,
            worker_ids(first, next),
            engine(&pool.engine)
        ));
        first = next;
    }
    out
}

fn on_off(flag: bool) -> &'static str {
    if flag { "on" } else { "off" }
}

fn describe_workload(workload: &Workload) -> String {
    let synth = match workload {
        Workload::Trace {
            path,
            block_size,
            arrival_speedup_ratio,
            ..
        } => {
            let speedup = match *arrival_speedup_ratio == 1.0 {
                true => String::new(),
                false => format!(", timestamps divided by {arrival_speedup_ratio}"),
            };
            return format!(
                "workload: trace {} ({} tokens per hash id{speedup})\n",
                path.display(),
                block_size
            );
        }
        Workload::Synthetic(synth) => synth,
    };
    let count = |sessions: bool| -> u64 {
        let groups = synth.groups.iter();
        groups
            .filter(|g| g.sessions.is_some() == sessions)
            .map(|g| g.count)
            .sum()
    };
    let timed = synth
        .groups
        .iter()
        .any(|g| matches!(g.arrival, Arrival::Timed { .. }));
    // A rate-and-time group's count follows from its draws: only its expectation is known.
    let about = if timed { "about " } else { "" };
    let total = match (count(false), count(true)) {
        (requests, 0) => format!("{about}{requests} requests"),
        (0, sessions) => format!("{about}{sessions} sessions"),
        (requests, sessions) => format!("{about}{requests} requests and {sessions} sessions"),
    };
    // Only burst groups are released by the burst: without one its settings mean nothing.
    let burst = match synth.groups.iter().any(|g| g.arrival == Arrival::Burst) {
        true => format!(
            "; burst at {} ms ({}, spacing {} ns)",
            synth.burst.at.as_ms_f64(),
            burst_order_spelling(synth.burst.order),
            synth.burst.spacing_ns,
        ),
        false => String::new(),
    };
    let mut out = format!(
        "workload: {} groups, {total}{burst}; {} tokens per hash id\n",
        synth.groups.len(),
        synth.tokens_per_hash
    );
    for g in &synth.groups {
        out.push_str(&format!(
            "  {}: class {}, {} {}, input tokens {}, output tokens {}, arrival {}, {}\n",
            g.name,
            g.class.as_deref().unwrap_or("-"),
            match g.arrival {
                Arrival::Timed { .. } => format!("about {}", g.count),
                _ => g.count.to_string(),
            },
            match &g.sessions {
                None => "requests".to_string(),
                Some(s) => format!(
                    "sessions of {} turns (think time {} ms, new input tokens {})",
                    s.turns, s.think_time_ms, s.new_input_tokens
                ),
            },
            g.input_tokens,
            g.output_tokens,
            g.arrival,
            match &g.prefix {
                None => "distinct prompts".to_string(),
                Some(p) => format!("shared {}-token prefixes in {} groups", p.tokens, p.groups),
            }
        ));
    }
    out
}
