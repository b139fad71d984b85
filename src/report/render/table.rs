//! The compact per-class table printed after each run, as text and as cells (which
//! `report.html` shows).

use crate::mocker::WorkerRole;
use crate::report::measure::latency::{LatencyStats, Stat};
use crate::report::measure::metrics::RunMetrics;
use crate::report::measure::pools::PoolMetrics;
use crate::report::verdict::queries::Queries;

fn ms(stats: &LatencyStats, stat: Stat) -> String {
    stats
        .get(stat)
        .map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6))
}

/// A table as text cells, row by row: what the terminal prints (padded, see [`Cells::text`])
/// and `report.html` shows, so the two cannot disagree on a figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Cells {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Each column's width in the terminal; the first column is left-aligned, the others
    /// right-aligned.
    widths: Vec<usize>,
}

impl Cells {
    fn new(header: Vec<String>, widths: Vec<usize>) -> Cells {
        debug_assert_eq!(header.len(), widths.len());
        Cells {
            header,
            rows: Vec::new(),
            widths,
        }
    }

    /// The header and every row, padded to the column widths, one line each.
    pub fn text(&self) -> String {
        std::iter::once(&self.header)
            .chain(&self.rows)
            .map(|row| self.line(row))
            .collect()
    }

    fn line(&self, row: &[String]) -> String {
        let mut line = String::new();
        for (i, (cell, &width)) in row.iter().zip(&self.widths).enumerate() {
            match i {
                0 => line += &format!("{cell:<width$}"),
                _ => line += &format!(" {cell:>width$}"),
            }
        }
        line + "\n"
    }
}

fn strings<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.map(String::from).to_vec()
}

/// One line per class: counts, TTFT p50/p99 and E2E p50/p99 in ms; a line per worker pool
/// when there are several; then a totals line. When
/// classes were backlogged together ([`RunMetrics::classes_backlogged_together`]) it also shows
/// each class's count and share of the first `prefix_n` completions against its ideal share
/// of them ([`Queries::ideal_prefix_share`]: DRR's split of requests of the classes' sizes
/// while they are backlogged together, what each class got elsewhere); otherwise each class
/// got what it asked for and those columns would mean nothing.
pub fn class_table(metrics: &RunMetrics) -> String {
    let mut out = class_cells(metrics).text();
    for (_, cells) in pool_cells(metrics) {
        out += &cells.text();
    }
    if let Some(note) = pool_note(metrics) {
        out += &note;
        out += "\n";
    }
    out += &session_cells(metrics).map(|c| c.text()).unwrap_or_default();
    out += &totals_line(metrics);
    out += "\n";
    out
}

/// The class lines of [`class_table`], as cells.
pub fn class_cells(metrics: &RunMetrics) -> Cells {
    let shares = metrics.classes_backlogged_together();
    let n = metrics.prefix_n;
    let mut header = strings(["class", "quantum", "requests", "completed", "rejected"]);
    let mut widths = vec![16, 8, 9, 9, 8];
    if shares {
        header.extend([format!("first {n}"), "share".into(), "ideal".into()]);
        widths.extend([10, 6, 6]);
    }
    header.extend(strings(["ttft p50", "ttft p99", "e2e p50", "e2e p99"]));
    widths.extend([9; 4]);
    let mut cells = Cells::new(header, widths);
    for (i, c) in metrics.classes.iter().enumerate() {
        let mut row = vec![
            c.name.clone(),
            c.quantum_tokens.to_string(),
            c.requests.to_string(),
            c.completed.to_string(),
            c.rejected.to_string(),
        ];
        if shares {
            let share = metrics
                .prefix_share(i, n)
                .map_or_else(|| "-".to_string(), |s| format!("{s:.3}"));
            let first_n = metrics.completed_through(i, n);
            let ideal = metrics
                .ideal_prefix_share(i, n)
                .map_or_else(|| "-".to_string(), |s| format!("{s:.3}"));
            row.extend([first_n.to_string(), share, ideal]);
        }
        row.extend([
            ms(&c.latencies.ttft, Stat::P50),
            ms(&c.latencies.ttft, Stat::P99),
            ms(&c.latencies.e2e, Stat::P50),
            ms(&c.latencies.e2e, Stat::P99),
        ]);
        cells.rows.push(row);
    }
    cells
}

/// The totals line of [`class_table`], without its newline.
pub fn totals_line(metrics: &RunMetrics) -> String {
    format!(
        "latencies in ms; {} requests, {} completed, {} rejected, {} cancelled, {} aborted ({} migrations); latencies of completed requests only; makespan {:.1} ms; {:.1} req/s",
        metrics.requests,
        metrics.completed,
        metrics.rejected,
        metrics.cancelled,
        metrics.aborted,
        metrics.migrations,
        metrics.makespan.as_ms_f64(),
        metrics.throughput_rps(),
    )
}

/// With two or more worker pools, the pool tables, each with its id on `report.html`
/// (`pool-table`, or `pool-table-prefill` and `pool-table-decode`). Aggregated pools share
/// one table: workers, requests sent to the pool, completed, busy fraction, TTFT p50/p99 and
/// E2E p50/p99 in ms. In disaggregated serving every request passes both roles, so the
/// whole request's TTFT and E2E would read the same on both: each role gets a table of the
/// figures that are its own ([`RoleLatencies`](crate::report::measure::pools::RoleLatencies)). Empty for a
/// single pool (the totals line says it all).
pub fn pool_cells(metrics: &RunMetrics) -> Vec<(&'static str, Cells)> {
    if metrics.pools.len() < 2 {
        return Vec::new();
    }
    let of_role = |role: WorkerRole| metrics.pools.iter().filter(move |p| p.role == role);
    if of_role(WorkerRole::Aggregated).count() == metrics.pools.len() {
        let header = ["ttft p50", "ttft p99", "e2e p50", "e2e p99"];
        let rows = of_role(WorkerRole::Aggregated).map(|p| {
            let figures = [(&p.ttft, Stat::P50), (&p.ttft, Stat::P99)];
            let figures = figures
                .into_iter()
                .chain([(&p.e2e, Stat::P50), (&p.e2e, Stat::P99)]);
            (p, figures.map(|(s, stat)| ms(s, stat)).collect())
        });
        return vec![("pool-table", pool_table(metrics, "pool", &header, rows))];
    }
    let prefill = of_role(WorkerRole::Prefill).map(|p| {
        let l = &p.role_latency;
        let figures = [&l.queue_wait, &l.prefill, &l.handoff];
        let figures = figures
            .into_iter()
            .flat_map(|s| [ms(s, Stat::P50), ms(s, Stat::P99)]);
        (p, figures.collect())
    });
    let prefill_header = [
        "wait p50",
        "wait p99",
        "prefill p50",
        "prefill p99",
        "xfer p50",
        "xfer p99",
    ];
    let decode = of_role(WorkerRole::Decode).map(|p| {
        let figures = [&p.role_latency.itl, &p.role_latency.decode];
        let figures = figures
            .into_iter()
            .flat_map(|s| [ms(s, Stat::P50), ms(s, Stat::P99)]);
        (p, figures.collect())
    });
    let decode_header = ["itl p50", "itl p99", "decode p50", "decode p99"];
    vec![
        (
            "pool-table-prefill",
            pool_table(metrics, "prefill pool", &prefill_header, prefill),
        ),
        (
            "pool-table-decode",
            pool_table(metrics, "decode pool", &decode_header, decode),
        ),
    ]
}

/// A pool table: `first` heads the pool names, then workers, requests, completed and busy,
/// then `header`'s columns with each row's `figures`.
fn pool_table<'a>(
    metrics: &RunMetrics,
    first: &str,
    header: &[&str],
    rows: impl Iterator<Item = (&'a PoolMetrics, Vec<String>)>,
) -> Cells {
    let mut head = strings([first, "workers", "requests", "completed", "busy"]);
    head.extend(header.iter().map(|h| h.to_string()));
    let mut widths = vec![16, 8, 9, 9, 6];
    widths.extend(header.iter().map(|h| h.len().max(9)));
    let mut cells = Cells::new(head, widths);
    for (pool, figures) in rows {
        let busy = pool
            .utilisation(metrics.makespan)
            .map_or_else(|| "-".to_string(), |u| format!("{u:.3}"));
        let mut row = vec![
            pool.name.clone(),
            pool.workers.to_string(),
            pool.requests.to_string(),
            pool.served.completed.to_string(),
            busy,
        ];
        row.extend(figures);
        cells.rows.push(row);
    }
    cells
}

/// What the pool tables' words mean, printed under them (`None` without pool tables).
pub fn pool_note(metrics: &RunMetrics) -> Option<String> {
    let tables = pool_cells(metrics);
    let busy = "busy: the fraction of the run a pool's ranks spent running passes; a rank \
                runs passes whenever it holds any request, so 1.000 says never idle, not full";
    match tables.first()?.0 {
        "pool-table" => Some(format!("{busy}.")),
        _ => Some(format!(
            "{busy}.\nEach role's own part of a request: wait = arrival to prefill admission, \
             prefill = to its end, xfer = to decode admission (room, the KV transfer, a slot), \
             decode = to the last token, itl = per output token after the first."
        )),
    }
}

/// When the run had sessions, one line per class that started any: sessions started and
/// completed, turns per session, the cache hit rate, first-turn and follow-up TTFT p99 and
/// session duration p50/p99 in ms. `None` otherwise.
pub fn session_cells(metrics: &RunMetrics) -> Option<Cells> {
    let with_sessions = metrics.classes.iter().filter(|c| c.sessions.started > 0);
    with_sessions.clone().next()?;
    let header = strings([
        "sessions",
        "started",
        "completed",
        "turns",
        "hit",
        "ttft1 p99",
        "ttftN p99",
        "sess p50",
        "sess p99",
    ]);
    let mut cells = Cells::new(header, vec![16, 8, 9, 9, 8, 9, 9, 9, 9]);
    for c in with_sessions {
        let counts = &c.sessions;
        let fraction = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        cells.rows.push(vec![
            c.name.clone(),
            counts.started.to_string(),
            counts.completed.to_string(),
            fraction(counts.turns_per_session_mean(), 2),
            fraction(counts.cache_hit(), 3),
            ms(&c.latencies.first_turn_ttft, Stat::P99),
            ms(&c.latencies.followup_ttft, Stat::P99),
            ms(&c.latencies.session, Stat::P50),
            ms(&c.latencies.session, Stat::P99),
        ]);
    }
    Some(cells)
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
    fn a_disaggregated_run_shows_each_roles_own_figures_not_the_same_latencies_twice() {
        let run = crate::report::test_support::disaggregated_run("disagg-prefix-missing");
        let table = class_table(&run.metrics);
        insta::assert_snapshot!(table);
        let line = |start: &str| table.lines().find(|l| l.starts_with(start)).unwrap();
        let prefill_header = line("prefill pool");
        for column in ["busy", "wait p99", "prefill p99", "xfer p99"] {
            assert!(prefill_header.contains(column), "{prefill_header}");
        }
        let decode_header = line("decode pool");
        for column in ["busy", "itl p99", "decode p99"] {
            assert!(decode_header.contains(column), "{decode_header}");
        }
        for header in [prefill_header, decode_header] {
            assert!(
                !header.contains("ttft") && !header.contains("e2e"),
                "{header}"
            );
        }
        let tables = pool_cells(&run.metrics);
        let ids: Vec<&str> = tables.iter().map(|t| t.0).collect();
        assert_eq!(ids, ["pool-table-prefill", "pool-table-decode"]);
        assert_ne!(tables[0].1.rows[0][5..], tables[1].1.rows[0][5..9]);
    }

    #[test]
    fn the_pool_table_says_what_busy_means() {
        let run = crate::report::test_support::disaggregated_run("disagg-prefix-missing");
        let table = class_table(&run.metrics);
        assert!(
            table.contains("busy: the fraction of the run") && table.contains("not full"),
            "{table}"
        );
        let (result, quanta) = run_fixture("premium-weighted");
        let one_pool = RunMetrics::compute(&result, &quanta);
        assert_eq!(pool_note(&one_pool), None, "no pool table, no note");
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
