//! Calibrated timing end to end: profile-interpolated and fixed timing through
//! `routersim replay` and `run`, on single requests whose times are computed by hand, and the
//! exit-2 errors of bad profiles.

use assert_cmd::Command;
use npyz::WriterBuilder;
use std::fs;
use std::io::{Cursor, Write};
use std::path::Path;

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

/// Writes a float64 NPZ (as `numpy.savez` does) of `(key, shape, values)` entries.
fn write_npz(path: &Path, entries: &[(&str, &[u64], &[f64])]) {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (key, shape, values) in entries {
        let mut npy = Vec::new();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(&mut npy)
            .begin_nd()
            .unwrap();
        w.extend(values.iter().copied()).unwrap();
        w.finish().unwrap();
        zip.start_file(
            format!("{key}.npy"),
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        zip.write_all(&npy).unwrap();
    }
    fs::write(path, zip.finish().unwrap().into_inner()).unwrap();
}

/// A profile: prefill `(isl, ttft_ms)`; decode rows (KV tokens), columns (context length) and
/// `itl(kv, ctx)` evaluated on them.
fn write_profile(
    path: &Path,
    prefill: (&[f64], &[f64]),
    rows: &[f64],
    cols: &[f64],
    itl: impl Fn(f64, f64) -> f64,
) {
    let grid: Vec<f64> = rows
        .iter()
        .flat_map(|kv| cols.iter().map(|ctx| itl(*kv, *ctx)).collect::<Vec<_>>())
        .collect();
    let n = |v: &[f64]| v.len() as u64;
    write_npz(
        path,
        &[
            ("prefill_isl", &[n(prefill.0)], prefill.0),
            ("prefill_ttft_ms", &[n(prefill.1)], prefill.1),
            ("decode_active_kv_tokens", &[n(rows)], rows),
            ("decode_context_length", &[n(cols)], cols),
            ("decode_itl", &[n(rows), n(cols)], &grid),
        ],
    );
}

/// Replays mooncake `rows` (input, output tokens; all at time 0, so they share the first
/// pass) with the engine JSON in `dir/engine.json`; returns (first token ms, completion ms)
/// per row.
fn replay(dir: &Path, rows: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let trace: String = rows
        .iter()
        .enumerate()
        .map(|(i, (input, output))| {
            let ids: Vec<String> = (0..input.div_ceil(512))
                .map(|b| (1000 * i as u64 + b).to_string())
                .collect();
            format!(
                "{{\"timestamp\": 0, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            )
        })
        .collect();
    fs::write(dir.join("trace.jsonl"), trace).unwrap();
    let out = dir.join("out");
    routersim()
        .arg("replay")
        .arg("--trace")
        .arg(dir.join("trace.jsonl"))
        .arg("--engine")
        .arg(dir.join("engine.json"))
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .arg("--force")
        .assert()
        .success();
    let mut reader = csv::Reader::from_path(out.join("requests.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (first, done) = (col("first_token_ms"), col("completion_ms"));
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (r[first].parse().unwrap(), r[done].parse().unwrap())
        })
        .collect()
}

fn engine(dir: &Path, engine_section: &str) {
    fs::write(
        dir.join("engine.json"),
        format!("{{\"engine\": {engine_section}}}"),
    )
    .unwrap();
}

fn close(got: f64, want: f64, tolerance_ms: f64) -> bool {
    (got - want).abs() <= tolerance_ms
}

/// Prefill: 10 ms at 0 tokens, 30 ms at 1000, 50 ms at 2000 (0.02 ms per token).
const PREFILL: (&[f64], &[f64]) = (&[0.0, 1000.0, 2000.0], &[10.0, 30.0, 50.0]);

#[test]
fn flat_decode_grid_gives_the_hand_computed_times() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = [0.0, 100_000.0];
    write_profile(&tmp.path().join("p.npz"), PREFILL, &grid, &grid, |_, _| 5.0);
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    // 1000 new tokens: 30 ms to the first token, then three 5 ms steps.
    let got = replay(tmp.path(), &[(1000, 4)]);
    assert!(
        close(got[0].0, 30.0, 0.01) && close(got[0].1, 45.0, 0.01),
        "{got:?}"
    );
}

/// Decode `2 + 0.001 kv + 0.0005 ctx` ms: rows and columns weigh differently.
fn sloped(kv: f64, ctx: f64) -> f64 {
    2.0 + 0.001 * kv + 0.0005 * ctx
}

#[test]
fn sloped_decode_grid_gives_the_hand_computed_times() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = [0.0, 10_000.0];
    write_profile(&tmp.path().join("p.npz"), PREFILL, &grid, &grid, sloped);
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    // Steps after the first token see the sequence at 1001, 1002, 1003 tokens.
    let want = 30.0 + sloped(1001.0, 1001.0) + sloped(1002.0, 1002.0) + sloped(1003.0, 1003.0);
    let got = replay(tmp.path(), &[(1000, 4)]);
    assert!(
        close(got[0].0, 30.0, 1e-6) && close(got[0].1, want, 1e-6),
        "{got:?} vs {want}"
    );
}

#[test]
fn two_requests_decode_over_total_kv_tokens_and_mean_context() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = [0.0, 10_000.0];
    write_profile(&tmp.path().join("p.npz"), PREFILL, &grid, &grid, sloped);
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    // One prefill pass of 1000 + 3000 tokens (extrapolated: 10 + 0.02 * 4000 = 90 ms), then
    // steps over KV 4002 with mean context 2001, and KV 4004 with mean 2002.
    let got = replay(tmp.path(), &[(1000, 3), (3000, 3)]);
    let done = 90.0 + sloped(4002.0, 2001.0) + sloped(4004.0, 2002.0);
    for row in &got {
        assert!(
            close(row.0, 90.0, 1e-6) && close(row.1, done, 1e-6),
            "{got:?} vs {done}"
        );
    }
}

#[test]
fn times_extend_beyond_both_ends_of_every_axis() {
    let tmp = tempfile::tempdir().unwrap();
    let (rows, cols) = ([2000.0, 4000.0], [1000.0, 3000.0]);
    write_profile(
        &tmp.path().join("p.npz"),
        (&[1000.0, 2000.0], &[30.0, 50.0]),
        &rows,
        &cols,
        sloped,
    );
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    // Below every axis: 500 tokens (20 ms), then KV 501 / context 501.
    // Above every axis: 6000 tokens (130 ms), then KV 6001 / context 6001.
    let got = replay(tmp.path(), &[(500, 2)]);
    assert!(close(got[0].0, 20.0, 1e-6), "{got:?}");
    assert!(
        close(got[0].1, 20.0 + sloped(501.0, 501.0), 1e-6),
        "{got:?}"
    );
    let got = replay(tmp.path(), &[(6000, 2)]);
    assert!(close(got[0].0, 130.0, 1e-6), "{got:?}");
    assert!(
        close(got[0].1, 130.0 + sloped(6001.0, 6001.0), 1e-6),
        "{got:?}"
    );
}

#[test]
fn profile_times_scale_by_the_speedup_ratios_and_decode_keeps_its_1_ms_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = [0.0, 100_000.0];
    write_profile(&tmp.path().join("p.npz"), PREFILL, &grid, &grid, |_, _| 8.0);
    engine(
        tmp.path(),
        r#"{"planner_profile_data": "p.npz", "speedup_ratio": 2.0, "decode_speedup_ratio": 2.0}"#,
    );
    let got = replay(tmp.path(), &[(1000, 3)]);
    assert!(
        close(got[0].0, 15.0, 1e-6) && close(got[0].1, 19.0, 1e-6),
        "{got:?}"
    );
    write_profile(&tmp.path().join("p.npz"), PREFILL, &grid, &grid, |_, _| {
        0.25
    });
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    let got = replay(tmp.path(), &[(1000, 3)]);
    assert!(
        close(got[0].1, 32.0, 1e-6),
        "a 0.25 ms step is floored at 1 ms: {got:?}"
    );
}

#[test]
fn fixed_timing_gives_one_prefill_per_pass_and_one_decode_per_step() {
    let tmp = tempfile::tempdir().unwrap();
    engine(
        tmp.path(),
        r#"{"timing_model": {"type": "fixed", "prefill_ms": 40, "decode_ms": 9}}"#,
    );
    // Both prompts share the first pass (40 ms); each later pass is one 9 ms step.
    let got = replay(tmp.path(), &[(3000, 3), (200, 2)]);
    assert_eq!(got, vec![(40.0, 58.0), (40.0, 49.0)]);
}

/// Runs `routersim` with `args`; returns its exit code and stderr.
fn fails(args: &[&str]) -> (i32, String) {
    let out = routersim().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn a_bad_profile_is_exit_2_naming_the_file_and_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = [0.0, 10_000.0];
    let profile = tmp.path().join("p.npz");
    write_profile(&profile, PREFILL, &grid, &grid, |kv, _| match kv > 0.0 {
        true => f64::NAN,
        false => 1.0,
    });
    engine(tmp.path(), r#"{"planner_profile_data": "p.npz"}"#);
    let trace = tmp.path().join("t.jsonl");
    fs::write(&trace, "").unwrap();
    let out = tmp.path().join("out");
    let engine_file = tmp.path().join("engine.json");
    let args = [
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--engine",
        engine_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stderr) = fails(&args);
    assert_eq!(code, 2, "{stderr}");
    let name = profile.display().to_string();
    assert!(
        stderr.contains(&format!(
            "field `planner_profile_data`: {name}: key `decode_itl`: value 2 is NaN"
        )),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing is written");
    fs::write(&profile, "not a zip").unwrap();
    let (code, stderr) = fails(&args);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(&format!("{name}: not an NPZ archive")),
        "{stderr}"
    );
}

/// A one-worker scenario whose engine names `profile` (relative to the scenario file).
fn profile_scenario(dir: &Path, profile: &str) -> std::path::PathBuf {
    let path = dir.join("s.yaml");
    fs::write(
        &path,
        format!(
            "name: profiled\nseed: 1\nworkers:\n  count: 1\n  engine: {{planner_profile_data: {profile}}}\n\
             workload:\n  groups:\n    - {{name: a, count: 1, input_tokens: 1000, output_tokens: 4}}\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_scenario_reads_its_profile_relative_to_itself_and_never_writes_over_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    fs::create_dir(&data).unwrap();
    let grid = [0.0, 100_000.0];
    write_profile(&data.join("p.npz"), PREFILL, &grid, &grid, |_, _| 5.0);
    let scenario = profile_scenario(tmp.path(), "data/p.npz");
    let out = tmp.path().join("out");
    routersim()
        .current_dir("/")
        .arg("run")
        .arg(&scenario)
        .arg("--quiet")
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let csv = fs::read_to_string(out.join("requests.csv")).unwrap();
    assert!(csv.contains(",30.000000,45.000000,"), "{csv}");
    // The directory holding the profile is an input's directory: refused.
    let (code, stderr) = fails(&[
        "run",
        scenario.to_str().unwrap(),
        "--out",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("p.npz"), "{stderr}");
}

#[test]
fn a_scenario_with_a_bad_profile_names_its_line_the_file_and_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    write_npz(
        &tmp.path().join("p.npz"),
        &[("prefill_isl", &[2], &[0.0, 1.0])],
    );
    let scenario = profile_scenario(tmp.path(), "p.npz");
    let (code, stderr) = fails(&["validate", scenario.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("s.yaml:5"), "{stderr}");
    assert!(
        stderr.contains("workers.engine.planner_profile_data"),
        "{stderr}"
    );
    assert!(
        stderr.contains("p.npz: key `prefill_ttft_ms`: missing"),
        "{stderr}"
    );
}
