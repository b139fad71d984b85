//! The compact per-class table printed after each run.

use super::metrics::{LatencyStats, RunMetrics, Stat};

fn ms(stats: &LatencyStats, stat: Stat) -> String {
    stats
        .get(stat)
        .map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6))
}

/// One line per class: counts, TTFT p50/p99 and E2E p50/p99 in ms; a line per worker pool
/// when there are several; then a totals line. When
/// classes were backlogged together ([`RunMetrics::classes_backlogged_together`]) it also shows
/// each class's count and share of the first `prefix_n` completions against its ideal DRR
/// share; otherwise each class got what it asked for and those columns would mean nothing.
pub fn class_table(metrics: &RunMetrics) -> String {
    let shares = metrics.classes_backlogged_together();
    let n = metrics.prefix_n;
    let mut out = format!(
        "{:<16} {:>8} {:>9} {:>9} {:>8}",
        "class", "quantum", "requests", "completed", "rejected"
    );
    if shares {
        out += &format!(
            " {:>10} {:>6} {:>6}",
            format!("first {n}"),
            "share",
            "ideal"
        );
    }
    out += &format!(
        " {:>9} {:>9} {:>9} {:>9}\n",
        "ttft p50", "ttft p99", "e2e p50", "e2e p99"
    );
    for (i, c) in metrics.classes.iter().enumerate() {
        out += &format!(
            "{:<16} {:>8} {:>9} {:>9} {:>8}",
            c.name, c.quantum_tokens, c.requests, c.completed, c.rejected
        );
        if shares {
            let share = metrics
                .prefix_share(i, n)
                .map_or_else(|| "-".to_string(), |s| format!("{s:.3}"));
            let first_n = metrics.completed_through(i, n);
            out += &format!(" {first_n:>10} {share:>6} {:>6.3}", c.ideal_share);
        }
        out += &format!(
            " {:>9} {:>9} {:>9} {:>9}\n",
            ms(&c.latencies.ttft, Stat::P50),
            ms(&c.latencies.ttft, Stat::P99),
            ms(&c.latencies.e2e, Stat::P50),
            ms(&c.latencies.e2e, Stat::P99),
        );
    }
    out += &pool_table(metrics);
    out += &session_table(metrics);
    out += &format!(
        "latencies in ms; {} requests, {} completed, {} rejected, {} cancelled, {} aborted ({} migrations); latencies of completed requests only; makespan {:.1} ms; {:.1} req/s\n",
        metrics.requests,
        metrics.completed,
        metrics.rejected,
        metrics.cancelled,
        metrics.aborted,
        metrics.migrations,
        metrics.makespan.as_ms_f64(),
        metrics.throughput_rps(),
    );
    out
}

/// With two or more worker pools, one line per pool: workers, requests sent to it, completed,
/// utilisation, TTFT p50/p99 and E2E p50/p99 in ms. Empty for a single pool (the totals line
/// says it all).
fn pool_table(metrics: &RunMetrics) -> String {
    if metrics.pools.len() < 2 {
        return String::new();
    }
    let mut out = format!(
        "{:<16} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
        "pool",
        "workers",
        "requests",
        "completed",
        "util",
        "ttft p50",
        "ttft p99",
        "e2e p50",
        "e2e p99"
    );
    for pool in &metrics.pools {
        let utilisation = pool
            .utilisation(metrics.makespan)
            .map_or_else(|| "-".to_string(), |u| format!("{u:.3}"));
        out += &format!(
            "{:<16} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
            pool.name,
            pool.workers,
            pool.requests,
            pool.served.completed,
            utilisation,
            ms(&pool.ttft, Stat::P50),
            ms(&pool.ttft, Stat::P99),
            ms(&pool.e2e, Stat::P50),
            ms(&pool.e2e, Stat::P99),
        );
    }
    out
}

/// When the run had sessions, one line per class that started any: sessions started and
/// completed, turns per session, the cache hit rate, first-turn and follow-up TTFT p99 and
/// session duration p50/p99 in ms. Empty otherwise.
fn session_table(metrics: &RunMetrics) -> String {
    let with_sessions = metrics.classes.iter().filter(|c| c.sessions.started > 0);
    if with_sessions.clone().next().is_none() {
        return String::new();
    }
    let mut out = format!(
        "{:<16} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
        "sessions",
        "started",
        "completed",
        "turns",
        "hit",
        "ttft1 p99",
        "ttftN p99",
        "sess p50",
        "sess p99"
    );
    for c in with_sessions {
        let counts = &c.sessions;
        let fraction = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        out += &format!(
            "{:<16} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
            c.name,
            counts.started,
            counts.completed,
            fraction(counts.turns_per_session_mean(), 2),
            fraction(counts.cache_hit(), 3),
            ms(&c.latencies.first_turn_ttft, Stat::P99),
            ms(&c.latencies.followup_ttft, Stat::P99),
            ms(&c.latencies.session, Stat::P50),
            ms(&c.latencies.session, Stat::P99),
        );
    }
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

    #[test]
    fn first_n_columns_only_where_classes_were_backlogged_together() {
        use crate::report::test_support::{done, result_of};
        use crate::scheduling::scheduler::DispatchPath;
        let served_on_arrival = (0..4)
            .map(|row| {
                done(
                    row,
                    row as usize % 2,
                    DispatchPath::Immediate,
                    [row, row, row + 1],
                )
            })
            .collect();
        let result = result_of(&["gold", "standard"], served_on_arrival);
        let table = class_table(&RunMetrics::compute(&result, &[4, 1]));
        let header = table.lines().next().unwrap();
        assert!(
            !header.contains("first") && !header.contains("ideal"),
            "{header}"
        );
        assert!(header.ends_with("ttft p50  ttft p99   e2e p50   e2e p99"));
        assert!(table.lines().nth(1).unwrap().starts_with("gold"));
        let (result, quanta) = run_fixture("premium-equal");
        let table = class_table(&RunMetrics::compute(&result, &quanta));
        assert!(table.contains("first 320  share  ideal"), "{table}");
    }
}
