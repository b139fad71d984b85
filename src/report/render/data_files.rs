//! Pure exporters of a run's metrics to the result files `completions.csv`, `classes.csv`,
//! `summary.json` and `scaling.csv` (a contract, spelled out in docs/outputs.md). Every byte is a function
//! of the metrics and the metadata passed in: fixed float formatting, no map iteration.

use crate::mocker::WorkerRole;
use crate::report::measure::fleet::{FleetFigures, FleetMetrics};
use crate::report::measure::latency::{LatencyStats, Stat};
use crate::report::measure::metrics::{ClassMetrics, LatencyKind, RunMetrics};
use crate::report::measure::pools::{PoolMetrics, tokens_per_s};
use crate::report::measure::stability::Stability;
use crate::report::verdict::queries::Queries;
use crate::time::format_ms;
use serde_json::{Value, json};

/// Fixed-point text for a ratio in CSV files (4 decimals).
fn ratio(v: f64) -> String {
    format!("{v:.4}")
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map(ratio).unwrap_or_default()
}

/// A float for JSON, rounded to 6 decimals so the text is short and stable.
fn json_f64(v: f64) -> Value {
    json!((v * 1e6).round() / 1e6)
}

fn json_opt_f64(v: Option<f64>) -> Value {
    v.map_or(Value::Null, json_f64)
}

fn write_row(w: &mut csv::Writer<Vec<u8>>, row: &[String]) {
    w.write_record(row)
        .expect("writing CSV to memory cannot fail");
}

fn finish(w: csv::Writer<Vec<u8>>) -> Vec<u8> {
    w.into_inner().expect("writing CSV to memory cannot fail")
}

/// `completions.csv`: `index,time_ms,row,class`, then one column per class (named after it)
/// with that class's cumulative completions through this row. Rows in completion order.
pub fn completions_csv(metrics: &RunMetrics) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_completions_csv(metrics, &mut bytes).expect("writing CSV to memory cannot fail");
    bytes
}

/// Writes `completions.csv` (see [`completions_csv`]) to `out` row by row.
pub fn write_completions_csv(
    metrics: &RunMetrics,
    out: &mut dyn std::io::Write,
) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(&mut *out);
    let mut header: Vec<String> = ["index", "time_ms", "row", "class"]
        .map(String::from)
        .to_vec();
    header.extend(metrics.classes.iter().map(|c| c.name.clone()));
    w.write_record(&header)?;
    w.flush()?;
    drop(w);
    let chunk_starts = cumulative_at_chunk_starts(metrics);
    let columns = header.len();
    super::csv_row::write_chunked(out, &metrics.completions, |first, chunk, buf| {
        let mut cumulative = chunk_starts(first);
        let mut row = super::csv_row::CsvRow::default();
        for c in chunk {
            if let Some(class) = c.class {
                cumulative[class] += 1;
            }
            row.clear();
            row.u64(c.index);
            row.ms(c.time);
            row.u64(c.row);
            row.text(c.class.map_or("", |i| metrics.classes[i].name.as_str()));
            for &n in &cumulative {
                row.u64(n);
            }
            row.write(buf, columns);
        }
        Ok(())
    })
}

/// Each class's completions before `metrics.completions[first]`, for any `first`: one pass
/// counts them at every [`CUMULATIVE_STRIDE`]-th completion, and the rest is counted from
/// the nearest such point.
fn cumulative_at_chunk_starts(metrics: &RunMetrics) -> impl Fn(usize) -> Vec<u64> + Sync + '_ {
    let classes = metrics.classes.len();
    let mut marks = Vec::new();
    let mut running = vec![0u64; classes];
    for (i, c) in metrics.completions.iter().enumerate() {
        if i % CUMULATIVE_STRIDE == 0 {
            marks.push(running.clone());
        }
        if let Some(class) = c.class {
            running[class] += 1;
        }
    }
    move |first| {
        let mut counts = marks
            .get(first / CUMULATIVE_STRIDE)
            .cloned()
            .unwrap_or_else(|| vec![0; classes]);
        let from = first - first % CUMULATIVE_STRIDE;
        for c in &metrics.completions[from..first] {
            if let Some(class) = c.class {
                counts[class] += 1;
            }
        }
        counts
    }
}

/// How often [`cumulative_at_chunk_starts`] keeps the running counts.
const CUMULATIVE_STRIDE: usize = 4096;

/// The latency columns of `classes.csv`, in order.
const CSV_LATENCIES: [LatencyKind; 3] =
    [LatencyKind::Ttft, LatencyKind::E2e, LatencyKind::QueueWait];

/// The per-pool columns of `classes.csv`, for each pool in worker-id order: the class's
/// completions on that pool and their prefill and output tokens per second of the makespan.
const POOL_COLUMNS: [&str; 3] = ["completed", "prefill_tokens_per_s", "output_tokens_per_s"];

/// Columns of `classes.csv`, in order: the class columns, then [`POOL_COLUMNS`] suffixed
/// `_<pool>` for each of `metrics`' pools.
pub fn classes_columns(metrics: &RunMetrics) -> Vec<String> {
    let mut columns: Vec<String> = [
        "class",
        "quantum_tokens",
        "ideal_share",
        "requests",
        "immediate",
        "queued",
        "completed",
        "rejected",
        "aborted",
        "cancelled",
        "migrations",
        "pending",
        "prefix_n",
        "prefix_count",
        "prefix_share",
    ]
    .map(String::from)
    .to_vec();
    for kind in CSV_LATENCIES {
        for stat in Stat::ALL {
            columns.push(format!("{}_ms_{}", kind.name(), stat.name()));
        }
    }
    columns.extend(
        [
            "service_tokens",
            "backlogged_service_tokens",
            "backlogged_share",
            "backlogged_ideal_share",
            "backlogged_share_gap",
        ]
        .map(String::from),
    );
    for pool in &metrics.pools {
        columns.extend(POOL_COLUMNS.map(|c| format!("{c}_{}", pool.name)));
    }
    columns.extend(TRANSFER_STATS.map(|s| format!("kv_transfer_ms_{}", s.name())));
    columns
}

/// The transfer's statistics in `classes.csv` (its last columns; empty in aggregated serving).
const TRANSFER_STATS: [Stat; 2] = [Stat::Mean, Stat::P99];

/// `classes.csv`: one row per class, columns as [`classes_columns`]. Prefix figures are for
/// the first `metrics.prefix_n` completions; latencies in ms with ns precision (empty without
/// samples); shares and token rates with 4 decimals.
pub fn classes_csv(metrics: &RunMetrics) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    write_row(&mut w, &classes_columns(metrics));
    let n = metrics.prefix_n;
    for (i, c) in metrics.classes.iter().enumerate() {
        let mut row = vec![
            c.name.clone(),
            c.quantum_tokens.to_string(),
            ratio(c.ideal_share),
            c.requests.to_string(),
            c.immediate.to_string(),
            c.queued.to_string(),
            c.completed.to_string(),
            c.rejected.to_string(),
            c.aborted.to_string(),
            c.cancelled.to_string(),
            c.migrations.to_string(),
            c.pending.to_string(),
            n.to_string(),
            metrics.completed_through(i, n).to_string(),
            opt_ratio(metrics.prefix_share(i, n)),
        ];
        for kind in CSV_LATENCIES {
            let stats = c.latencies.of(kind);
            row.extend(Stat::ALL.map(|s| stats.get(s).map(format_ms).unwrap_or_default()));
        }
        let shares = metrics.backlogged_shares(i);
        row.extend([
            c.service_tokens.to_string(),
            c.backlogged_service_tokens.to_string(),
            opt_ratio(shares.map(|s| s.0)),
            opt_ratio(shares.map(|s| s.1)),
            opt_ratio(metrics.token_share_gap(i)),
        ]);
        for pool in &metrics.pools {
            let served = pool.classes.get(i).copied().unwrap_or_default();
            row.extend([
                served.completed.to_string(),
                ratio(tokens_per_s(served.prefill_tokens, metrics.makespan)),
                ratio(tokens_per_s(served.output_tokens, metrics.makespan)),
            ]);
        }
        let transfer = &c.latencies.kv_transfer;
        row.extend(TRANSFER_STATS.map(|s| transfer.get(s).map(format_ms).unwrap_or_default()));
        write_row(&mut w, &row);
    }
    finish(w)
}

fn latency_json(stats: &LatencyStats) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("count".into(), json!(stats.count));
    for stat in Stat::ALL {
        let ms = stats.get(stat).map(|ns| ns as f64 / 1e6);
        object.insert(stat.name().into(), json_opt_f64(ms));
    }
    Value::Object(object)
}

fn class_json(metrics: &RunMetrics, i: usize) -> Value {
    let c = &metrics.classes[i];
    let n = metrics.prefix_n;
    let mut latency = serde_json::Map::new();
    for kind in LatencyKind::ALL {
        latency.insert(kind.name().into(), latency_json(c.latencies.of(kind)));
    }
    let shares = metrics.backlogged_shares(i);
    let mut value = json!({
        "class": c.name,
        "quantum_tokens": c.quantum_tokens,
        "ideal_share": json_f64(c.ideal_share),
        "requests": c.requests,
        "immediate": c.immediate,
        "queued": c.queued,
        "completed": c.completed,
        "rejected": c.rejected,
        "aborted": c.aborted,
        "cancelled": c.cancelled,
        "migrations": c.migrations,
        "pending": c.pending,
        "prefix_count": metrics.completed_through(i, n),
        "prefix_share": json_opt_f64(metrics.prefix_share(i, n)),
        "latency_ms": Value::Object(latency),
        "service_tokens": c.service_tokens,
        "backlogged_service_tokens": c.backlogged_service_tokens,
        "backlogged_share": json_opt_f64(shares.map(|s| s.0)),
        "backlogged_ideal_share": json_opt_f64(shares.map(|s| s.1)),
        "backlogged_share_gap": json_opt_f64(metrics.token_share_gap(i)),
        "pools": class_pools_json(metrics, i),
        "cache_hit": json_opt_f64(c.sessions.cache_hit()),
        "sessions": sessions_json(c),
    });
    // Only a disaggregated run transfers KV: an aggregated summary is unchanged.
    if metrics
        .pools
        .iter()
        .any(|p| p.role != WorkerRole::Aggregated)
    {
        value["kv_transfer_ms"] = latency_json(&c.latencies.kv_transfer);
    }
    value
}

/// A class's sessions (docs/sessions.md gives the definitions).
fn sessions_json(c: &ClassMetrics) -> Value {
    let counts = &c.sessions;
    let mut object = serde_json::Map::new();
    object.insert("started".into(), json!(counts.started));
    object.insert("completed".into(), json!(counts.completed));
    let mean = counts.turns_per_session_mean();
    object.insert("turns_per_session_mean".into(), json_opt_f64(mean));
    for kind in LatencyKind::SESSION {
        let key = format!("{}_ms", kind.name());
        object.insert(key, latency_json(c.latencies.of(kind)));
    }
    Value::Object(object)
}

/// Class `class`'s completions and token rates on each pool.
fn class_pools_json(metrics: &RunMetrics, class: usize) -> Value {
    let pools = metrics.pools.iter().map(|pool| {
        let served = pool.classes.get(class).copied().unwrap_or_default();
        json!({
            "pool": pool.name,
            "completed": served.completed,
            "prefill_tokens_per_s": json_f64(tokens_per_s(served.prefill_tokens, metrics.makespan)),
            "output_tokens_per_s": json_f64(tokens_per_s(served.output_tokens, metrics.makespan)),
        })
    });
    Value::Array(pools.collect())
}

/// One pool's entry in `summary.json`'s `pools` (see [`crate::report::measure::pools`] for the definitions).
fn pool_json(metrics: &RunMetrics, pool: &PoolMetrics) -> Value {
    let makespan = metrics.makespan;
    let mut value = json!({
        "pool": pool.name,
        "workers": pool.workers,
        "dp_size": pool.dp_size,
        "requests": pool.requests,
        "completed": pool.served.completed,
        "busy_ms": json_f64(pool.busy_ns as f64 / 1e6),
        "utilisation": json_opt_f64(pool.utilisation(makespan)),
        "prefill_tokens": pool.served.prefill_tokens,
        "output_tokens": pool.served.output_tokens,
        "prefill_tokens_per_s": json_f64(tokens_per_s(pool.served.prefill_tokens, makespan)),
        "output_tokens_per_s": json_f64(tokens_per_s(pool.served.output_tokens, makespan)),
        "latency_ms": {"ttft": latency_json(&pool.ttft), "e2e": latency_json(&pool.e2e)},
    });
    // Only disaggregated serving's pools say their role: an aggregated summary is unchanged.
    if pool.role != WorkerRole::Aggregated {
        value["role"] = pool.role.label().into();
    }
    value
}

fn fairness_json(metrics: &RunMetrics) -> Value {
    let backlogged_ns: u64 = metrics
        .windows
        .iter()
        .map(|w| w.end.saturating_since(w.start).as_ns())
        .sum();
    json!({
        "backlogged_windows": metrics.windows.len(),
        "backlogged_ms": json_f64(backlogged_ns as f64 / 1e6),
        "worst_token_share_gap": json_opt_f64(metrics.worst_token_share_gap()),
        "worst_window_gap": json_opt_f64(metrics.worst_window_gap()),
        "jain_index": json_opt_f64(metrics.jain_index()),
    })
}

/// The `stability` object of `summary.json` (docs/planning.md): `overloaded` is null when
/// the run was too short to judge, and `reason` says why.
fn stability_json(s: &Stability) -> Value {
    json!({
        "overloaded": s.overloaded,
        "reason": s.reason,
        "window_start_ms": json_f64(s.window_start.as_ms_f64()),
        "window_end_ms": json_f64(s.window_end.as_ms_f64()),
        "in_system_first_half": json_f64(s.in_system_first_half),
        "in_system_second_half": json_f64(s.in_system_second_half),
        "offered_rps": json_f64(s.offered_rps),
        "served_rps": json_f64(s.served_rps),
        "capacity_seqs": s.capacity_seqs,
        "slack_requests": json_f64(s.slack_requests()),
        "session_ramp_ms": json_f64(s.session_ramp_ns as f64 / 1e6),
    })
}

/// `scaling.csv`: `time_ms,role,from,to,reason`, one row per change the scaling policy made
/// to a role's target, in order (`from`: the role's workers not draining before).
pub fn scaling_csv(fleet: &FleetMetrics) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    write_row(
        &mut w,
        &["time_ms", "role", "from", "to", "reason"].map(String::from),
    );
    for event in fleet.events.iter().flatten() {
        let row = [
            format_ms(event.at.as_ns()),
            event.role.label().to_string(),
            event.from.to_string(),
            event.to.to_string(),
            event.reason.clone(),
        ];
        write_row(&mut w, &row);
    }
    finish(w)
}

/// The fleet's figures in `summary.json`: GPU-hours, peak and mean workers in all and per
/// role, and how many scaling events (null without a scaling policy).
fn fleet_json(fleet: &FleetMetrics) -> Value {
    let figures = |f: &FleetFigures| {
        json!({
            "gpu_hours": json_f64(f.gpu_hours),
            "peak_workers": f.peak_workers,
            "mean_workers": json_f64(f.mean_workers),
        })
    };
    let mut value = figures(&fleet.all);
    let roles: serde_json::Map<String, Value> = (fleet.roles.iter())
        .map(|(role, f)| (role.label().to_string(), figures(f)))
        .collect();
    value["roles"] = Value::Object(roles);
    value["scaling_events"] = fleet
        .events
        .as_ref()
        .map_or(Value::Null, |e| json!(e.len()));
    value
}

/// `summary.json`: `meta` (run metadata from the caller: seed, scenario hash, version, ...),
/// run totals, throughput, fairness over backlogged windows, per-class figures (each with its
/// per-pool completions and token rates), and per-pool figures.
pub fn summary_json(metrics: &RunMetrics, meta: &Value) -> Vec<u8> {
    let classes: Vec<Value> = (0..metrics.classes.len())
        .map(|i| class_json(metrics, i))
        .collect();
    let value = json!({
        "meta": meta,
        "requests": metrics.requests,
        "completed": metrics.completed,
        "rejected": metrics.rejected,
        "aborted": metrics.aborted,
        "cancelled": metrics.cancelled,
        "migrations": metrics.migrations,
        "pending": metrics.pending,
        "makespan_ms": json_f64(metrics.makespan.as_ms_f64()),
        "events": metrics.events,
        "stop_reason": metrics.stop_reason,
        "preemptions": metrics.preemptions,
        "throughput_rps": json_f64(metrics.throughput_rps()),
        "output_tokens_per_s": json_f64(metrics.output_tokens_per_s()),
        "prefix_n": metrics.prefix_n,
        "fairness": fairness_json(metrics),
        "classes": classes,
        "pools": metrics.pools.iter().map(|p| pool_json(metrics, p)).collect::<Vec<_>>(),
        "stability": stability_json(&metrics.stability),
        "fleet": fleet_json(&metrics.fleet),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON values serialise");
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::weighted_metrics as weighted;

    #[test]
    fn completions_csv_counts_every_class_cumulatively() {
        let m = weighted();
        let text = String::from_utf8(completions_csv(&m)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "index,time_ms,row,class,premium,regular");
        assert_eq!(lines.len(), 641);
        let row_320: Vec<&str> = lines[320].split(',').collect();
        assert_eq!((row_320[0], row_320[4], row_320[5]), ("320", "255", "65"));
        assert!(lines[640].ends_with(",320,320"));
    }

    #[test]
    fn completions_csv_counts_stay_cumulative_across_chunks_formatted_in_parallel() {
        let mut m = weighted();
        let one_run = m.completions.clone();
        // 32 runs' worth: 20,480 rows, several chunks of formatting.
        for copy in 1..32u64 {
            m.completions.extend(one_run.iter().map(|c| {
                let mut c = *c;
                c.index += copy * one_run.len() as u64;
                c
            }));
        }
        let text = String::from_utf8(completions_csv(&m)).unwrap();
        let mut counts = [0u64; 2];
        for (line, c) in text.lines().skip(1).zip(&m.completions) {
            counts[c.class.unwrap()] += 1;
            let expected = format!(",{},{}", counts[0], counts[1]);
            assert!(line.ends_with(&expected), "{line} should end {expected}");
        }
        assert_eq!(text.lines().count(), 1 + m.completions.len());
    }

    #[test]
    fn classes_csv_snapshot() {
        let m = weighted();
        insta::assert_snapshot!(String::from_utf8(classes_csv(&m)).unwrap());
    }

    #[test]
    fn summary_json_holds_totals_fairness_and_classes() {
        let m = weighted();
        let meta = json!({"seed": 7, "scenario_hash": "abc", "version": "0.1.0"});
        let v: Value = serde_json::from_slice(&summary_json(&m, &meta)).unwrap();
        assert_eq!(v["meta"]["seed"], 7);
        assert_eq!(v["completed"], 640);
        assert_eq!(v["prefix_n"], 320);
        assert_eq!(v["classes"][0]["class"], "premium");
        assert_eq!(v["classes"][0]["prefix_count"], 255);
        assert_eq!(v["classes"][0]["ideal_share"], 0.8);
        assert!(
            v["classes"][1]["latency_ms"]["ttft"]["p99"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(v["fairness"]["jain_index"].as_f64().unwrap() > 0.95);
    }

    #[test]
    fn exporters_are_pure_functions_of_the_run() {
        let (a, b) = (weighted(), weighted());
        let meta = json!({"seed": 0});
        assert_eq!(completions_csv(&a), completions_csv(&b));
        assert_eq!(classes_csv(&a), classes_csv(&b));
        assert_eq!(summary_json(&a, &meta), summary_json(&b, &meta));
    }
}
