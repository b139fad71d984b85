//! The compact per-class table printed after each run.

use super::metrics::{LatencyStats, RunMetrics, Stat};

fn ms(stats: &LatencyStats, stat: Stat) -> String {
    stats
        .get(stat)
        .map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6))
}

/// One line per class: counts, the share of the first `prefix_n` completions against the
/// ideal DRR share, TTFT p50/p99 and E2E p50/p99 in ms; then a totals line.
pub fn class_table(metrics: &RunMetrics) -> String {
    let n = metrics.prefix_n;
    let first_n = format!("first {n}");
    let mut out = format!(
        "{:<16} {:>8} {:>9} {:>9} {:>8} {:>10} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}\n",
        "class",
        "quantum",
        "requests",
        "completed",
        "rejected",
        first_n,
        "share",
        "ideal",
        "ttft p50",
        "ttft p99",
        "e2e p50",
        "e2e p99",
    );
    for (i, c) in metrics.classes.iter().enumerate() {
        let share = metrics
            .prefix_share(i, n)
            .map_or_else(|| "-".to_string(), |s| format!("{s:.3}"));
        out += &format!(
            "{:<16} {:>8} {:>9} {:>9} {:>8} {:>10} {:>6} {:>6.3} {:>9} {:>9} {:>9} {:>9}\n",
            c.name,
            c.quantum_tokens,
            c.requests,
            c.completed,
            c.rejected,
            metrics.completed_through(i, n),
            share,
            c.ideal_share,
            ms(&c.latencies.ttft, Stat::P50),
            ms(&c.latencies.ttft, Stat::P99),
            ms(&c.latencies.e2e, Stat::P50),
            ms(&c.latencies.e2e, Stat::P99),
        );
    }
    out += &format!(
        "latencies in ms; {} requests, {} completed, {} rejected, {} aborted; makespan {:.1} ms; {:.1} req/s\n",
        metrics.requests,
        metrics.completed,
        metrics.rejected,
        metrics.aborted,
        metrics.makespan.as_ms_f64(),
        metrics.throughput_rps(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::run_fixture;

    #[test]
    fn table_snapshot_for_the_weighted_premium_burst() {
        let (result, quanta) = run_fixture("premium-weighted");
        let table = class_table(&RunMetrics::compute(&result, &quanta));
        insta::assert_snapshot!(table);
    }
}
