//! Loading a timing profile from disk ([`load`]: a mocker-format NPZ file, or a Dynamo profiler
//! results directory), and converting such a directory the way 1.6.1's mocker converts one (`planner_profiler_perf_data_converter`, through the planner's regression
//! models): an ordinary least-squares line of prefill time over the prompt length, and a plane
//! of decode step time over (batch size, KV tokens), evaluated on a 100-point grid.
//!
//! Layouts read, as 1.6.1 reads them (the NPZ first, the JSON if there is no NPZ):
//! - prefill: `selected_prefill_interpolation/raw_data.npz` or `prefill_raw_data.json`, with
//!   `prefill_isl` and `prefill_ttft` (ms);
//! - decode: `selected_decode_interpolation/raw_data.npz` or `decode_raw_data.json`, with
//!   `x_kv_usage` (0..1), `y_context_length`, `z_itl` (ms) and `max_kv_tokens`.

use super::profile::{NpzFile, ProfileError, TimingProfile, converter_resolution, linspace};
use crate::bounds::{self, MAX_PROFILE_FILE_BYTES};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Smallest modelled time of the planner's regressions, in seconds.
const MIN_WALL_TIME_S: f64 = 1e-6;
/// A batch-size coefficient this far below 0 is clamped to 0 (noise under collinearity).
const RELAXABLE_NEG_TOLERANCE: f64 = 1e-6;

/// Loads `path`: a mocker-format NPZ file, or a Dynamo profiler results directory
/// (converted as 1.6.1's `planner_profiler_perf_data_converter` converts it).
pub fn load(path: &Path) -> Result<TimingProfile, ProfileError> {
    match path.is_dir() {
        true => convert(path, &path.display().to_string()),
        false => TimingProfile::from_npz_file(path),
    }
}

/// Converts the results directory at `dir` (named `name` in errors).
fn convert(dir: &Path, name: &str) -> Result<TimingProfile, ProfileError> {
    let prefill = read_arrays(
        dir,
        name,
        ["selected_prefill_interpolation", "prefill_raw_data.json"],
        &["prefill_isl", "prefill_ttft"],
    )?;
    let decode = read_arrays(
        dir,
        name,
        ["selected_decode_interpolation", "decode_raw_data.json"],
        &["x_kv_usage", "y_context_length", "z_itl", "max_kv_tokens"],
    )?;
    let [isl, ttft_ms] = [&prefill[0], &prefill[1]];
    let (prefill_x, prefill_ms) = prefill_grid(name, isl, ttft_ms)?;
    let max_kv_tokens = decode[3]
        .first()
        .copied()
        .ok_or_else(|| error(name, "max_kv_tokens", "is empty"))?
        .trunc();
    let (kv, ctx, itl) = decode_grid(name, &decode[0], &decode[1], &decode[2], max_kv_tokens)?;
    TimingProfile::from_arrays(name, [prefill_x, prefill_ms], [kv, ctx], itl)
}

fn error(name: &str, key: &str, message: impl Into<String>) -> ProfileError {
    ProfileError {
        file: name.to_string(),
        key: Some(key.to_string()),
        message: message.into(),
    }
}

/// The named arrays from `<dir>/<subdir>/raw_data.npz`, or else from `<dir>/<json>`.
fn read_arrays(
    dir: &Path,
    name: &str,
    [subdir, json]: [&str; 2],
    keys: &[&str],
) -> Result<Vec<Vec<f64>>, ProfileError> {
    let npz: PathBuf = dir.join(subdir).join("raw_data.npz");
    let json: PathBuf = dir.join(json);
    if npz.is_file() {
        let file = npz.display().to_string();
        let bytes =
            bounds::read_bytes_capped(&npz, MAX_PROFILE_FILE_BYTES).map_err(|e| ProfileError {
                file: file.clone(),
                key: None,
                message: format!("cannot read: {e}"),
            })?;
        let mut archive = NpzFile::open(&bytes, &file)?;
        let float64 = false;
        return keys
            .iter()
            .map(|key| archive.array(key, float64).map(|a| a.values))
            .collect();
    }
    if json.is_file() {
        return read_json(&json, keys);
    }
    Err(ProfileError {
        file: name.to_string(),
        key: None,
        message: format!(
            "is a directory but neither a profiler results directory: it holds neither {subdir}/raw_data.npz nor {}",
            json.file_name()
                .map(|f| f.to_string_lossy())
                .unwrap_or_default()
        ),
    })
}

fn read_json(path: &Path, keys: &[&str]) -> Result<Vec<Vec<f64>>, ProfileError> {
    let file = path.display().to_string();
    let fail = |key: Option<&str>, message: String| ProfileError {
        file: file.clone(),
        key: key.map(str::to_string),
        message,
    };
    let text = bounds::read_to_string_capped(path, MAX_PROFILE_FILE_BYTES)
        .map_err(|e| fail(None, format!("cannot read: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| fail(None, format!("not valid JSON: {e}")))?;
    keys.iter()
        .map(|key| match value.get(key) {
            None => Err(fail(Some(key), "missing".to_string())),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_f64()
                        .ok_or_else(|| fail(Some(key), format!("{v} is not a number")))
                })
                .collect(),
            Some(v) => v
                .as_f64()
                .map(|n| vec![n])
                .ok_or_else(|| fail(Some(key), format!("{v} is not a number or a list"))),
        })
        .collect()
}

/// The prefill line (TTFT over prompt tokens) evaluated on the converter's grid.
fn prefill_grid(
    name: &str,
    isl: &[f64],
    ttft_ms: &[f64],
) -> Result<(Vec<f64>, Vec<f64>), ProfileError> {
    if isl.len() != ttft_ms.len() {
        return Err(error(
            name,
            "prefill_ttft",
            format!(
                "has {} values but prefill_isl has {}",
                ttft_ms.len(),
                isl.len()
            ),
        ));
    }
    // The planner takes the prompt length as an integer and the time in seconds.
    let tokens: Vec<f64> = isl.iter().map(|x| x.trunc()).collect();
    let (xs, ys): (Vec<[f64; 1]>, Vec<f64>) = tokens
        .iter()
        .zip(ttft_ms)
        .filter(|(_, t)| **t / 1000.0 != 0.0)
        .map(|(x, t)| ([*x], *t / 1000.0))
        .unzip();
    let fit =
        least_squares(&xs, &ys).ok_or_else(|| error(name, "prefill_ttft", "no point to fit"))?;
    if fit.coef[0] < 0.0 {
        return Err(error(
            name,
            "prefill_ttft",
            "the fitted prefill time falls as prompts grow; Dynamo rejects such a profile",
        ));
    }
    let lo = tokens.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = tokens.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let grid = linspace(lo, hi, converter_resolution());
    let ms = grid
        .iter()
        .map(|x| (x * fit.coef[0] + fit.intercept).max(MIN_WALL_TIME_S) * 1000.0)
        .collect();
    Ok((grid, ms))
}

/// A decode grid: rows (KV tokens), columns (context length), row-major step times in ms.
type DecodeGrid = (Vec<f64>, Vec<f64>, Vec<f64>);

/// The decode plane (step time over batch size and KV tokens) evaluated on the converter's
/// (KV tokens, context length) grid.
fn decode_grid(
    name: &str,
    usage: &[f64],
    context: &[f64],
    itl_ms: &[f64],
    max_kv_tokens: f64,
) -> Result<DecodeGrid, ProfileError> {
    if usage.len() != context.len() || usage.len() != itl_ms.len() {
        return Err(error(
            name,
            "z_itl",
            format!(
                "x_kv_usage, y_context_length and z_itl must have the same length ({}, {}, {})",
                usage.len(),
                context.len(),
                itl_ms.len()
            ),
        ));
    }
    // Each measured point becomes (batch size, total KV tokens) -> step time in seconds.
    let points: Vec<([f64; 2], f64)> = usage
        .iter()
        .zip(context)
        .zip(itl_ms)
        .map(|((u, c), t)| {
            let kv = (u * max_kv_tokens).round_ties_even().trunc();
            let batch = match *c > 0.0 {
                true => (kv / c).round_ties_even().trunc().max(1.0),
                false => 1.0,
            };
            ([batch, kv], t / 1000.0)
        })
        .collect();
    let (xs, ys): (Vec<[f64; 2]>, Vec<f64>) =
        points.iter().filter(|(_, y)| *y != 0.0).copied().unzip();
    let mut fit = least_squares(&xs, &ys).ok_or_else(|| error(name, "z_itl", "no point to fit"))?;
    if fit.coef[1] < 0.0 {
        return Err(error(
            name,
            "z_itl",
            "the fitted decode time falls as the KV tokens grow; Dynamo rejects such a profile",
        ));
    }
    if fit.coef[0] < -RELAXABLE_NEG_TOLERANCE {
        fit.coef[0] = 0.0;
    }
    let max_kv = points
        .iter()
        .map(|(x, _)| x[1])
        .fold(f64::NEG_INFINITY, f64::max);
    let max_ctx = points
        .iter()
        .map(|(x, _)| x[1] / x[0].max(1.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let n = converter_resolution();
    let rows = linspace(0.0, max_kv, n);
    let cols = linspace(1.0, max_ctx, n);
    let mut itl = Vec::with_capacity(n * n);
    for kv in &rows {
        for ctx in &cols {
            let batch = if *ctx > 0.0 { (kv / ctx).max(1.0) } else { 1.0 };
            let seconds = (batch * fit.coef[0] + kv * fit.coef[1]) + fit.intercept;
            itl.push(seconds.max(MIN_WALL_TIME_S) * 1000.0);
        }
    }
    Ok((rows, cols, itl))
}

/// An ordinary least-squares fit with an intercept (scikit-learn's `LinearRegression`).
struct Fit<const N: usize> {
    coef: [f64; N],
    intercept: f64,
}

/// Fits `y = intercept + coef · x` by least squares on centred data; with too few distinct
/// points, the minimum-norm coefficients (as an SVD solver gives). None without points.
fn least_squares<const N: usize>(xs: &[[f64; N]], ys: &[f64]) -> Option<Fit<N>> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let mut x_mean = [0.0; N];
    for x in xs {
        for k in 0..N {
            x_mean[k] += x[k];
        }
    }
    x_mean.iter_mut().for_each(|m| *m /= n);
    let y_mean = ys.iter().sum::<f64>() / n;
    // Centred normal equations: gram · coef = moment.
    let mut gram = [[0.0; N]; N];
    let mut moment = [0.0; N];
    for (x, y) in xs.iter().zip(ys) {
        for a in 0..N {
            moment[a] += (x[a] - x_mean[a]) * (y - y_mean);
            for b in 0..N {
                gram[a][b] += (x[a] - x_mean[a]) * (x[b] - x_mean[b]);
            }
        }
    }
    let coef = solve_min_norm(&gram, &moment);
    let predicted_at_mean: f64 = (0..N).map(|k| x_mean[k] * coef[k]).sum();
    Some(Fit {
        coef,
        intercept: y_mean - predicted_at_mean,
    })
}

/// Solves a 1x1 or 2x2 symmetric positive semi-definite system, taking the minimum-norm
/// solution when it is (numerically) singular.
fn solve_min_norm<const N: usize>(gram: &[[f64; N]; N], moment: &[f64; N]) -> [f64; N] {
    let mut coef = [0.0; N];
    match N {
        1 => {
            if gram[0][0] > 0.0 {
                coef[0] = moment[0] / gram[0][0];
            }
        }
        2 => {
            let (a, b, d) = (gram[0][0], gram[0][1], gram[1][1]);
            let det = a * d - b * b;
            if det > 1e-12 * a * d && det > 0.0 {
                coef[0] = (d * moment[0] - b * moment[1]) / det;
                coef[1] = (a * moment[1] - b * moment[0]) / det;
            } else {
                // Rank one (or zero): project onto the dominant eigenvector.
                let half_trace = (a + d) / 2.0;
                let spread = (((a - d) / 2.0).powi(2) + b * b).sqrt();
                let lambda = half_trace + spread;
                if lambda > 0.0 {
                    let (vx, vy) = if b != 0.0 {
                        (b, lambda - a)
                    } else if a >= d {
                        (1.0, 0.0)
                    } else {
                        (0.0, 1.0)
                    };
                    let norm = (vx * vx + vy * vy).sqrt();
                    let (vx, vy) = (vx / norm, vy / norm);
                    let along = (vx * moment[0] + vy * moment[1]) / lambda;
                    coef[0] = vx * along;
                    coef[1] = vy * along;
                }
            }
        }
        _ => unreachable!("the planner's regressions have one or two features"),
    }
    coef
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_exact_lines_and_planes() {
        let xs = [[0.0], [100.0], [200.0]];
        let fit = least_squares(&xs, &[0.010, 0.020, 0.030]).unwrap();
        assert!((fit.coef[0] - 1e-4).abs() < 1e-15 && (fit.intercept - 0.010).abs() < 1e-15);
        let xs = [[1.0, 10.0], [2.0, 10.0], [1.0, 30.0], [4.0, 50.0]];
        let ys: Vec<f64> = xs.iter().map(|x| 0.5 + 0.25 * x[0] + 0.01 * x[1]).collect();
        let fit = least_squares(&xs, &ys).unwrap();
        assert!((fit.coef[0] - 0.25).abs() < 1e-12, "{}", fit.coef[0]);
        assert!((fit.coef[1] - 0.01).abs() < 1e-12, "{}", fit.coef[1]);
        assert!((fit.intercept - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_single_point_fits_a_constant() {
        let fit = least_squares(&[[3.0, 7.0]], &[0.004]).unwrap();
        assert_eq!(fit.coef, [0.0, 0.0]);
        assert_eq!(fit.intercept, 0.004);
        assert!(least_squares::<1>(&[], &[]).is_none());
    }

    #[test]
    fn collinear_features_take_the_minimum_norm_solution() {
        // x1 = 2 x0 exactly: y = 3 x0 is also 0.6 x0 + 1.2 x1, the minimum-norm split.
        let xs = [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]];
        let fit = least_squares(&xs, &[3.0, 6.0, 9.0]).unwrap();
        assert!((fit.coef[0] - 0.6).abs() < 1e-12, "{:?}", fit.coef);
        assert!((fit.coef[1] - 1.2).abs() < 1e-12, "{:?}", fit.coef);
        assert!(fit.intercept.abs() < 1e-12);
    }

    /// A profiler results directory in the NPZ layout: prefill 2 + 0.1 ms per token, decode
    /// 3 ms + 1 µs per KV token whatever the batch size.
    fn npz_results_dir(dir: &Path) {
        use crate::mocker::profile::npz_writer::{Entry, f64s, npz};
        let prefill = dir.join("selected_prefill_interpolation");
        let decode = dir.join("selected_decode_interpolation");
        std::fs::create_dir_all(&prefill).unwrap();
        std::fs::create_dir_all(&decode).unwrap();
        let isl = Entry {
            key: "prefill_isl",
            shape: vec![3],
            values: vec![100.0, 200.0, 300.0],
            int64: true,
        };
        let bytes = npz(&[isl, f64s("prefill_ttft", &[3], &[12.0, 22.0, 32.0])]);
        std::fs::write(prefill.join("raw_data.npz"), bytes).unwrap();
        let bytes = npz(&[
            f64s("x_kv_usage", &[4], &[0.1, 0.2, 0.4, 0.8]),
            f64s("y_context_length", &[4], &[100.0, 400.0, 200.0, 800.0]),
            f64s("z_itl", &[4], &[4.0, 5.0, 7.0, 11.0]),
            Entry {
                key: "max_kv_tokens",
                shape: vec![1],
                values: vec![10000.0],
                int64: true,
            },
        ]);
        std::fs::write(decode.join("raw_data.npz"), bytes).unwrap();
    }

    #[test]
    fn a_results_directory_becomes_the_fitted_grid() {
        let dir = tempfile::tempdir().unwrap();
        npz_results_dir(dir.path());
        let p = load(dir.path()).unwrap();
        // Prefill grid 100..300 tokens; the fitted line, extended beyond it.
        assert!((p.prefill_ms(250.0) - 27.0).abs() < 1e-9);
        assert!((p.prefill_ms(1000.0) - 102.0).abs() < 1e-9);
        // Decode grid: KV 0..8000 rows, context 1..800 columns; 3 ms + 1 µs per KV token.
        assert!((p.decode_ms(3000.0, 300.0) - 6.0).abs() < 1e-9);
        assert!((p.decode_ms(3000.0, 700.0) - 6.0).abs() < 1e-9);
    }

    #[test]
    fn the_json_layout_is_read_when_there_is_no_npz() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("prefill_raw_data.json"),
            r#"{"prefill_isl": [100, 200, 300], "prefill_ttft": [12, 22, 32],
                "prefill_thpt_per_gpu": [1, 1, 1]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("decode_raw_data.json"),
            r#"{"x_kv_usage": [0.1, 0.2, 0.4, 0.8], "y_context_length": [100, 400, 200, 800],
                "z_itl": [4, 5, 7, 11], "max_kv_tokens": 10000}"#,
        )
        .unwrap();
        let from_json = load(dir.path()).unwrap();
        let npz_dir = tempfile::tempdir().unwrap();
        npz_results_dir(npz_dir.path());
        let from_npz = load(npz_dir.path()).unwrap();
        assert_eq!(from_json.prefill_ms(250.0), from_npz.prefill_ms(250.0));
        assert_eq!(
            from_json.decode_ms(3000.0, 300.0),
            from_npz.decode_ms(3000.0, 300.0)
        );
    }

    #[test]
    fn a_directory_without_either_layout_or_with_a_bad_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("neither a profiler results directory")
                && err.contains("selected_prefill_interpolation/raw_data.npz"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("prefill_raw_data.json"),
            r#"{"prefill_isl": [100, 200]}"#,
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("prefill_ttft"));
        assert!(err.file.ends_with("prefill_raw_data.json"), "{}", err.file);
        // A falling prefill line is rejected, as the planner rejects it.
        std::fs::write(
            dir.path().join("prefill_raw_data.json"),
            r#"{"prefill_isl": [100, 200], "prefill_ttft": [30, 10]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("decode_raw_data.json"),
            r#"{"x_kv_usage": [0.1, 0.2], "y_context_length": [100, 400], "z_itl": [4, 5],
                "max_kv_tokens": 10000}"#,
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("key `prefill_ttft`: the fitted prefill time falls"),
            "{err}"
        );
    }

    #[test]
    fn linspace_matches_numpy() {
        assert_eq!(linspace(0.0, 1.0, 5), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        let g = linspace(1.0, 8192.0, 100);
        assert_eq!((g[0], g[99], g.len()), (1.0, 8192.0, 100));
        assert_eq!(g[1], 1.0 * (8191.0 / 99.0) + 1.0);
    }
}
