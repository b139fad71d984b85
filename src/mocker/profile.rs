//! Profile-interpolated timing (Dynamo's `planner_profile_data`): reading the mocker-format NPZ
//! (or converting a Dynamo profiler results directory the way 1.6.1 converts it), validating
//! it, and the linear / bilinear interpolation with extrapolation that 1.6.1's mocker runs
//! over it, and the [`TimingModel`] it is.
//!
//! The mocker-format NPZ holds five float64 arrays: `prefill_isl` and `prefill_ttft_ms`
//! (1-D, the same length), `decode_active_kv_tokens` (the grid's rows) and
//! `decode_context_length` (its columns), and `decode_itl` (2-D, rows × columns), in ms.
//! Axes must rise strictly and hold at least two points; no value may be NaN or infinite.

use super::timing::{DecodeBatch, PrefillBatch, TimingModel};
use crate::bounds::{self, MAX_PROFILE_FILE_BYTES, MAX_PROFILE_POINTS, MAX_STEP_MS};
use std::fmt;
use std::io::{Cursor, Read};
use std::path::Path;

/// The mocker-format keys, in the order they are read.
pub const PREFILL_ISL: &str = "prefill_isl";
/// Prefill time in ms at each `prefill_isl`.
pub const PREFILL_TTFT_MS: &str = "prefill_ttft_ms";
/// Rows of the decode grid: the total context (KV tokens) of the decode batch.
pub const DECODE_ACTIVE_KV_TOKENS: &str = "decode_active_kv_tokens";
/// Columns of the decode grid: the batch's mean context length.
pub const DECODE_CONTEXT_LENGTH: &str = "decode_context_length";
/// Decode step time in ms, rows × columns.
pub const DECODE_ITL: &str = "decode_itl";

/// Grid size Dynamo's converter evaluates a profiler results directory on.
const CONVERTER_RESOLUTION: usize = 100;

/// A validated timing profile.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingProfile {
    source: String,
    prefill_isl: Vec<f64>,
    prefill_ttft_ms: Vec<f64>,
    decode_kv: Vec<f64>,
    decode_ctx: Vec<f64>,
    /// Row-major: `decode_itl[row * decode_ctx.len() + col]`.
    decode_itl: Vec<f64>,
}

/// Why a profile was refused: the file, the key (when one is at fault) and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileError {
    /// The profile file or directory as given.
    pub file: String,
    /// The array (or JSON key) at fault, if any.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: key `{key}`: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ProfileError {}

fn error(file: &str, key: Option<&str>, message: impl Into<String>) -> ProfileError {
    ProfileError {
        file: file.to_string(),
        key: key.map(str::to_string),
        message: message.into(),
    }
}

/// One array read from an NPZ: its shape and its values (row-major).
pub(super) struct Array {
    pub(super) shape: Vec<u64>,
    pub(super) values: Vec<f64>,
}

impl TimingProfile {
    /// Loads the mocker-format NPZ file at `path` (a profiler results directory is
    /// `profile_dir::load`'s).
    pub fn from_npz_file(path: &Path) -> Result<TimingProfile, ProfileError> {
        let name = path.display().to_string();
        let bytes = bounds::read_bytes_capped(path, MAX_PROFILE_FILE_BYTES)
            .map_err(|e| error(&name, None, format!("cannot read the profile: {e}")))?;
        TimingProfile::from_npz_bytes(&bytes, &name)
    }

    /// Parses a mocker-format NPZ held in memory; `source` names it in errors.
    pub fn from_npz_bytes(bytes: &[u8], source: &str) -> Result<TimingProfile, ProfileError> {
        let mut npz = NpzFile::open(bytes, source)?;
        let float64 = true;
        let isl = npz.array(PREFILL_ISL, float64)?;
        let ttft = npz.array(PREFILL_TTFT_MS, float64)?;
        let kv = npz.array(DECODE_ACTIVE_KV_TOKENS, float64)?;
        let ctx = npz.array(DECODE_CONTEXT_LENGTH, float64)?;
        let itl = npz.array(DECODE_ITL, float64)?;
        for (key, array) in [
            (PREFILL_ISL, &isl),
            (PREFILL_TTFT_MS, &ttft),
            (DECODE_ACTIVE_KV_TOKENS, &kv),
            (DECODE_CONTEXT_LENGTH, &ctx),
        ] {
            if array.shape.len() != 1 {
                return Err(error(
                    source,
                    Some(key),
                    format!("must be 1-D, has shape {:?}", array.shape),
                ));
            }
        }
        if itl.shape.len() != 2 {
            return Err(error(
                source,
                Some(DECODE_ITL),
                format!(
                    "must be 2-D ({DECODE_ACTIVE_KV_TOKENS} rows x {DECODE_CONTEXT_LENGTH} columns), has shape {:?}",
                    itl.shape
                ),
            ));
        }
        let (rows, cols) = (itl.shape[0], itl.shape[1]);
        if rows != kv.values.len() as u64 || cols != ctx.values.len() as u64 {
            return Err(error(
                source,
                Some(DECODE_ITL),
                format!(
                    "has shape [{rows}, {cols}] but the axes have {} {DECODE_ACTIVE_KV_TOKENS} (rows) and {} {DECODE_CONTEXT_LENGTH} (columns)",
                    kv.values.len(),
                    ctx.values.len()
                ),
            ));
        }
        TimingProfile::from_arrays(
            source,
            [isl.values, ttft.values],
            [kv.values, ctx.values],
            itl.values,
        )
    }

    /// Validates arrays: `[prefill_isl, prefill_ttft_ms]`, `[decode_active_kv_tokens,
    /// decode_context_length]` and the row-major `decode_itl`.
    pub fn from_arrays(
        source: &str,
        [prefill_isl, prefill_ttft_ms]: [Vec<f64>; 2],
        [decode_kv, decode_ctx]: [Vec<f64>; 2],
        decode_itl: Vec<f64>,
    ) -> Result<TimingProfile, ProfileError> {
        check_axis(source, PREFILL_ISL, &prefill_isl)?;
        check_axis(source, DECODE_ACTIVE_KV_TOKENS, &decode_kv)?;
        check_axis(source, DECODE_CONTEXT_LENGTH, &decode_ctx)?;
        if prefill_ttft_ms.len() != prefill_isl.len() {
            return Err(error(
                source,
                Some(PREFILL_TTFT_MS),
                format!(
                    "has {} values but {PREFILL_ISL} has {}",
                    prefill_ttft_ms.len(),
                    prefill_isl.len()
                ),
            ));
        }
        let cells = decode_kv.len() as u64 * decode_ctx.len() as u64;
        if decode_itl.len() as u64 != cells {
            return Err(error(
                source,
                Some(DECODE_ITL),
                format!("has {} values, expected {cells}", decode_itl.len()),
            ));
        }
        if cells > MAX_PROFILE_POINTS {
            return Err(error(
                source,
                Some(DECODE_ITL),
                format!("{cells} cells is more than the {MAX_PROFILE_POINTS} routersim reads"),
            ));
        }
        check_finite(source, PREFILL_TTFT_MS, &prefill_ttft_ms)?;
        check_finite(source, DECODE_ITL, &decode_itl)?;
        Ok(TimingProfile {
            source: source.to_string(),
            prefill_isl,
            prefill_ttft_ms,
            decode_kv,
            decode_ctx,
            decode_itl,
        })
    }

    /// The file or directory the profile came from, as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Prefill time in ms of `tokens` new prompt tokens: linear interpolation over
    /// `prefill_isl`, extended along the end segments outside it.
    pub fn prefill_ms(&self, tokens: f64) -> f64 {
        let (x, y) = (&self.prefill_isl, &self.prefill_ttft_ms);
        let i = left_index(x, tokens);
        lerp((x[i], y[i]), (x[i + 1], y[i + 1]), tokens)
    }

    /// Decode step time in ms of a batch holding `active_kv_tokens` of context in total with a
    /// mean context length `context_length`: bilinear interpolation over the grid (rows
    /// `decode_active_kv_tokens`, columns `decode_context_length`), extended along the edge
    /// cells outside it. Interpolates along the rows first, then the columns, as 1.6.1.
    pub fn decode_ms(&self, active_kv_tokens: f64, context_length: f64) -> f64 {
        let (xs, ys, cols) = (&self.decode_kv, &self.decode_ctx, self.decode_ctx.len());
        let i = left_index(xs, active_kv_tokens);
        let j = left_index(ys, context_length);
        let z = |r: usize, c: usize| self.decode_itl[r * cols + c];
        let (x1, x2) = (xs[i], xs[i + 1]);
        let z1 = lerp((x1, z(i, j)), (x2, z(i + 1, j)), active_kv_tokens);
        let z2 = lerp((x1, z(i, j + 1)), (x2, z(i + 1, j + 1)), active_kv_tokens);
        lerp((ys[j], z1), (ys[j + 1], z2), context_length)
    }
}

/// A profile times a pass's parts by interpolation, clamped to at most a day; decode is floored
/// at 1 ms, as 1.6.1 floors it.
impl TimingModel for TimingProfile {
    fn prefill_batch_ms(&self, batch: &PrefillBatch) -> f64 {
        match batch.new_tokens() {
            0 => 0.0,
            tokens => self.prefill_ms(tokens as f64).clamp(0.0, MAX_STEP_MS),
        }
    }

    fn decode_batch_ms(&self, batch: &DecodeBatch, _kv_capacity_tokens: u64) -> f64 {
        let active = batch.active_kv_tokens as f64;
        let context = batch.mean_context_length() as f64;
        self.decode_ms(active, context).clamp(1.0, MAX_STEP_MS)
    }
}

/// The segment `[axis[i], axis[i + 1]]` to interpolate on: the last point at or below `x`,
/// kept inside `0..=len - 2` so that values outside the axis extend its end segments.
fn left_index(axis: &[f64], x: f64) -> usize {
    let at_or_below = axis.partition_point(|&a| a <= x);
    at_or_below.saturating_sub(1).min(axis.len() - 2)
}

/// The line through two points at `x`, evaluated as `slope * (x - x1) + y1`.
fn lerp((x1, y1): (f64, f64), (x2, y2): (f64, f64), x: f64) -> f64 {
    let slope = (y2 - y1) / (x2 - x1);
    slope * (x - x1) + y1
}

fn check_axis(source: &str, key: &str, axis: &[f64]) -> Result<(), ProfileError> {
    if axis.len() < 2 {
        return Err(error(
            source,
            Some(key),
            format!(
                "has {} point(s); interpolation needs at least 2",
                axis.len()
            ),
        ));
    }
    check_finite(source, key, axis)?;
    if let Some(i) = (1..axis.len()).find(|&i| axis[i] <= axis[i - 1]) {
        return Err(error(
            source,
            Some(key),
            format!(
                "must be strictly increasing, but value {i} ({}) is not above value {} ({})",
                axis[i],
                i - 1,
                axis[i - 1]
            ),
        ));
    }
    Ok(())
}

fn check_finite(source: &str, key: &str, values: &[f64]) -> Result<(), ProfileError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(error(
            source,
            Some(key),
            format!(
                "value {i} is {}; every value must be a finite number",
                values[i]
            ),
        )),
        None => Ok(()),
    }
}

/// An NPZ archive (a zip of `.npy` arrays) held in memory.
pub(super) struct NpzFile<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    source: &'a str,
}

impl<'a> NpzFile<'a> {
    /// Opens the archive; a file that is not a zip is an error naming `source`.
    pub(super) fn open(bytes: &'a [u8], source: &'a str) -> Result<NpzFile<'a>, ProfileError> {
        let zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
            error(
                source,
                None,
                format!("not an NPZ archive (numpy.savez writes one): {e}"),
            )
        })?;
        Ok(NpzFile { zip, source })
    }

    /// The array stored under `key` (as `key.npy`, numpy's name, or `key`). With `float64`
    /// only float64 arrays are accepted, as 1.6.1 reads them; otherwise any integer or float
    /// array is converted.
    pub(super) fn array(&mut self, key: &str, float64: bool) -> Result<Array, ProfileError> {
        let source = self.source;
        let bytes = self.entry_bytes(key)?;
        let npy = npyz::NpyFile::new(&bytes[..])
            .map_err(|e| error(source, Some(key), format!("not a readable .npy array: {e}")))?;
        let shape = npy.shape().to_vec();
        let count = shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
        if count.is_none_or(|n| n > MAX_PROFILE_POINTS) {
            return Err(error(
                source,
                Some(key),
                format!(
                    "shape {shape:?} holds more than the {MAX_PROFILE_POINTS} values routersim reads"
                ),
            ));
        }
        let fortran = npy.order() == npyz::Order::Fortran;
        let descr = npy.dtype().descr().trim_matches('\'').to_string();
        let values = read_values(npy, &descr, float64)
            .map_err(|message| error(source, Some(key), message))?;
        let values = match (fortran, shape.as_slice()) {
            (true, [rows, cols]) => transpose(&values, *rows as usize, *cols as usize),
            _ => values,
        };
        Ok(Array { shape, values })
    }

    /// The raw bytes of the archive member holding `key`, read through the size cap.
    fn entry_bytes(&mut self, key: &str) -> Result<Vec<u8>, ProfileError> {
        let source = self.source;
        let npy_name = format!("{key}.npy");
        let name = [npy_name.as_str(), key]
            .into_iter()
            .find(|n| self.zip.index_for_name(n).is_some());
        let Some(name) = name.map(str::to_string) else {
            let mut keys: Vec<String> = self
                .zip
                .file_names()
                .filter_map(Result::ok)
                .map(|n| n.trim_end_matches(".npy").to_string())
                .collect();
            keys.sort();
            return Err(error(
                source,
                Some(key),
                format!("missing (the archive holds: {})", keys.join(", ")),
            ));
        };
        let entry = self
            .zip
            .by_name(&name)
            .map_err(|e| error(source, Some(key), format!("cannot be read: {e}")))?;
        let mut bytes = Vec::new();
        entry
            .take(MAX_PROFILE_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| error(source, Some(key), format!("cannot be read: {e}")))?;
        if bytes.len() as u64 > MAX_PROFILE_FILE_BYTES {
            return Err(error(
                source,
                Some(key),
                "the array is larger than 64 MiB, the most routersim reads",
            ));
        }
        Ok(bytes)
    }
}

/// The array's values as f64, by its dtype.
fn read_values(npy: npyz::NpyFile<&[u8]>, descr: &str, float64: bool) -> Result<Vec<f64>, String> {
    let kind = descr.trim_start_matches(['<', '>', '|', '=']);
    let read_err = |e: std::io::Error| format!("cannot be read: {e}");
    if kind == "f8" {
        return npy.into_vec::<f64>().map_err(read_err);
    }
    if float64 {
        return Err(format!(
            "has dtype {descr}; the mocker reads only float64 arrays (numpy: `np.asarray(x, dtype=np.float64)`)"
        ));
    }
    macro_rules! widen {
        ($t:ty) => {
            npy.into_vec::<$t>()
                .map_err(read_err)?
                .into_iter()
                .map(|v| v as f64)
                .collect()
        };
    }
    Ok(match kind {
        "f4" => widen!(f32),
        "i8" => widen!(i64),
        "i4" => widen!(i32),
        "i2" => widen!(i16),
        "i1" => widen!(i8),
        "u8" => widen!(u64),
        "u4" => widen!(u32),
        "u2" => widen!(u16),
        "u1" => widen!(u8),
        _ => return Err(format!("has dtype {descr}; expected numbers")),
    })
}

fn transpose(values: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    // Fortran order stores column after column: element (r, c) sits at c * rows + r.
    let mut out = Vec::with_capacity(values.len());
    for r in 0..rows {
        for c in 0..cols {
            out.push(values[c * rows + r]);
        }
    }
    out
}

/// numpy's `linspace(start, stop, num)`: `start + i * step`, the last point exactly `stop`.
pub(super) fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num - 1) as f64;
    let mut points: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    if let Some(last) = points.last_mut() {
        *last = stop;
    }
    points
}

/// The grid size of converted profiler results (exposed for the converter).
pub(super) const fn converter_resolution() -> usize {
    CONVERTER_RESOLUTION
}

/// Writes NPZ archives for tests with the crates routersim reads them with.
#[cfg(test)]
pub(crate) mod npz_writer {
    use npyz::WriterBuilder;
    use std::io::{Cursor, Write};

    /// One array: its key, shape and values (row-major), and whether to store it as int64.
    pub(crate) struct Entry<'a> {
        pub key: &'a str,
        pub shape: Vec<u64>,
        pub values: Vec<f64>,
        pub int64: bool,
    }

    /// A float64 array.
    pub(crate) fn f64s<'a>(key: &'a str, shape: &[u64], values: &[f64]) -> Entry<'a> {
        Entry {
            key,
            shape: shape.to_vec(),
            values: values.to_vec(),
            int64: false,
        }
    }

    /// The NPZ holding `entries`, as `numpy.savez` names them (`key.npy`).
    pub(crate) fn npz(entries: &[Entry]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for e in entries {
            zip.start_file(
                format!("{}.npy", e.key),
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
            let mut npy = Vec::new();
            if e.int64 {
                let mut w = npyz::WriteOptions::new()
                    .default_dtype()
                    .shape(&e.shape)
                    .writer(&mut npy)
                    .begin_nd()
                    .unwrap();
                w.extend(e.values.iter().map(|v| *v as i64)).unwrap();
                w.finish().unwrap();
            } else {
                let mut w = npyz::WriteOptions::new()
                    .default_dtype()
                    .shape(&e.shape)
                    .writer(&mut npy)
                    .begin_nd()
                    .unwrap();
                w.extend(e.values.iter().copied()).unwrap();
                w.finish().unwrap();
            }
            zip.write_all(&npy).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    /// A complete mocker-format profile: prefill `(isl, ttft)`, decode rows, columns and the
    /// row-major grid.
    pub(crate) fn profile(
        prefill: (&[f64], &[f64]),
        rows: &[f64],
        cols: &[f64],
        itl: &[f64],
    ) -> Vec<u8> {
        let n = |v: &[f64]| v.len() as u64;
        npz(&[
            f64s(super::PREFILL_ISL, &[n(prefill.0)], prefill.0),
            f64s(super::PREFILL_TTFT_MS, &[n(prefill.1)], prefill.1),
            f64s(super::DECODE_ACTIVE_KV_TOKENS, &[n(rows)], rows),
            f64s(super::DECODE_CONTEXT_LENGTH, &[n(cols)], cols),
            f64s(super::DECODE_ITL, &[n(rows), n(cols)], itl),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::npz_writer::{Entry, f64s, npz, profile};
    use super::*;

    /// Prefill 10 ms at 0 tokens to 50 ms at 2000; decode over rows (KV) 0..10000 and
    /// columns (context) 0..10000 with `2 + 0.001 kv + 0.0005 ctx` ms, plus `saddle * (kv - 5000)
    /// * (ctx - 5000)` (bilinear but not planar).
    fn sloped(saddle: f64) -> TimingProfile {
        let (rows, cols) = ([0.0, 10000.0], [0.0, 10000.0]);
        let itl: Vec<f64> = rows
            .iter()
            .flat_map(|kv| {
                cols.iter().map(move |ctx| {
                    2.0 + 0.001 * kv + 0.0005 * ctx + saddle * (kv - 5000.0) * (ctx - 5000.0)
                })
            })
            .collect();
        let bytes = profile(
            (&[0.0, 1000.0, 2000.0], &[10.0, 30.0, 50.0]),
            &rows,
            &cols,
            &itl,
        );
        TimingProfile::from_npz_bytes(&bytes, "p.npz").unwrap()
    }

    #[test]
    fn prefill_interpolates_linearly_and_extends_both_end_segments() {
        let p = sloped(0.0);
        assert_eq!(p.prefill_ms(500.0), 20.0);
        assert_eq!(p.prefill_ms(1000.0), 30.0);
        assert_eq!(p.prefill_ms(4000.0), 90.0, "beyond the last point");
        let narrow = TimingProfile::from_npz_bytes(
            &profile(
                (&[100.0, 200.0], &[5.0, 6.0]),
                &[0.0, 1.0],
                &[0.0, 1.0],
                &[1.0; 4],
            ),
            "n.npz",
        )
        .unwrap();
        assert!(
            (narrow.prefill_ms(10.0) - 4.1).abs() < 1e-12,
            "below the first point"
        );
    }

    #[test]
    fn decode_rows_are_kv_tokens_and_columns_the_context_length() {
        let p = sloped(0.0);
        assert!((p.decode_ms(4002.0, 2001.0) - 7.0025).abs() < 1e-12);
        // Swapped axes would give 2 + 2.001 + 2.001.
        assert!((p.decode_ms(2001.0, 4002.0) - 6.002).abs() < 1e-12);
    }

    #[test]
    fn decode_is_bilinear_and_extends_beyond_every_edge() {
        let p = sloped(1e-7);
        // Corners: (0,0) 2 + 2.5, (0,10k) 7 - 2.5, (10k,0) 12 - 2.5, (10k,10k) 17 + 2.5.
        let bilinear = |kv: f64, ctx: f64| {
            let (u, v) = (kv / 10000.0, ctx / 10000.0);
            4.5 * (1.0 - u) * (1.0 - v) + 4.5 * (1.0 - u) * v + 9.5 * u * (1.0 - v) + 19.5 * u * v
        };
        for (kv, ctx) in [
            (2500.0, 7500.0),
            (-3000.0, 5000.0),
            (15000.0, 20000.0),
            (5000.0, -1000.0),
        ] {
            let got = p.decode_ms(kv, ctx);
            assert!(
                (got - bilinear(kv, ctx)).abs() < 1e-9,
                "({kv}, {ctx}): {got}"
            );
        }
    }

    /// The error message for an NPZ built from `entries`.
    fn refused(entries: &[Entry]) -> String {
        TimingProfile::from_npz_bytes(&npz(entries), "bad.npz")
            .unwrap_err()
            .to_string()
    }

    fn good_entries() -> Vec<Entry<'static>> {
        vec![
            f64s(PREFILL_ISL, &[2], &[0.0, 100.0]),
            f64s(PREFILL_TTFT_MS, &[2], &[1.0, 2.0]),
            f64s(DECODE_ACTIVE_KV_TOKENS, &[2], &[0.0, 100.0]),
            f64s(DECODE_CONTEXT_LENGTH, &[3], &[1.0, 10.0, 100.0]),
            f64s(DECODE_ITL, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ]
    }

    fn with(key: &str, entry: Entry<'static>) -> Vec<Entry<'static>> {
        let mut entries = good_entries();
        let i = entries.iter().position(|e| e.key == key).unwrap();
        entries[i] = entry;
        entries
    }

    #[test]
    fn a_good_file_loads() {
        assert!(TimingProfile::from_npz_bytes(&npz(&good_entries()), "ok.npz").is_ok());
    }

    #[test]
    fn a_missing_key_is_named_with_the_keys_present() {
        let mut entries = good_entries();
        entries.retain(|e| e.key != DECODE_ITL);
        let message = refused(&entries);
        assert!(
            message.starts_with("bad.npz: key `decode_itl`: missing"),
            "{message}"
        );
        assert!(message.contains("decode_context_length"), "{message}");
    }

    #[test]
    fn wrong_dimensions_are_named() {
        let message = refused(&with(
            PREFILL_ISL,
            f64s(PREFILL_ISL, &[1, 2], &[0.0, 100.0]),
        ));
        assert_eq!(
            message,
            "bad.npz: key `prefill_isl`: must be 1-D, has shape [1, 2]"
        );
        let message = refused(&with(DECODE_ITL, f64s(DECODE_ITL, &[6], &[1.0; 6])));
        assert!(
            message.starts_with("bad.npz: key `decode_itl`: must be 2-D"),
            "{message}"
        );
        let message = refused(&with(DECODE_ITL, f64s(DECODE_ITL, &[3, 2], &[1.0; 6])));
        assert!(
            message.starts_with("bad.npz: key `decode_itl`: has shape [3, 2] but the axes have 2"),
            "{message}"
        );
        let message = refused(&with(
            PREFILL_TTFT_MS,
            f64s(PREFILL_TTFT_MS, &[3], &[1.0, 2.0, 3.0]),
        ));
        assert!(message.contains("key `prefill_ttft_ms`: has 3 values but prefill_isl has 2"));
    }

    #[test]
    fn axes_must_rise_strictly_and_have_two_points() {
        let message = refused(&with(
            DECODE_CONTEXT_LENGTH,
            f64s(DECODE_CONTEXT_LENGTH, &[3], &[1.0, 10.0, 10.0]),
        ));
        assert_eq!(
            message,
            "bad.npz: key `decode_context_length`: must be strictly increasing, but value 2 (10) is not above value 1 (10)"
        );
        let message = refused(&with(
            DECODE_ACTIVE_KV_TOKENS,
            f64s(DECODE_ACTIVE_KV_TOKENS, &[2], &[100.0, 0.0]),
        ));
        assert!(message.contains("key `decode_active_kv_tokens`: must be strictly increasing"));
        let mut entries = with(PREFILL_ISL, f64s(PREFILL_ISL, &[1], &[5.0]));
        entries[1] = f64s(PREFILL_TTFT_MS, &[1], &[1.0]);
        assert!(refused(&entries).contains("key `prefill_isl`: has 1 point(s)"));
    }

    #[test]
    fn nan_and_infinite_values_are_refused_by_key() {
        let message = refused(&with(
            DECODE_ITL,
            f64s(DECODE_ITL, &[2, 3], &[1.0, 2.0, f64::NAN, 4.0, 5.0, 6.0]),
        ));
        assert_eq!(
            message,
            "bad.npz: key `decode_itl`: value 2 is NaN; every value must be a finite number"
        );
        let message = refused(&with(
            PREFILL_ISL,
            f64s(PREFILL_ISL, &[2], &[0.0, f64::INFINITY]),
        ));
        assert!(
            message.contains("key `prefill_isl`: value 1 is inf"),
            "{message}"
        );
    }

    #[test]
    fn only_float64_arrays_are_read_as_1_6_1_reads_them() {
        let entry = Entry {
            key: PREFILL_ISL,
            shape: vec![2],
            values: vec![0.0, 100.0],
            int64: true,
        };
        let message = refused(&with(PREFILL_ISL, entry));
        assert!(
            message.starts_with(
                "bad.npz: key `prefill_isl`: has dtype <i8; the mocker reads only float64"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_zip_is_refused() {
        let err = TimingProfile::from_npz_bytes(b"prefill_isl,1,2\n", "text.npz").unwrap_err();
        assert!(
            err.to_string().starts_with("text.npz: not an NPZ archive"),
            "{err}"
        );
        assert_eq!(err.key, None);
    }

    #[test]
    fn an_unreadable_path_names_the_file() {
        let err = TimingProfile::from_npz_file(Path::new("/no/such/profile.npz")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/no/such/profile.npz: cannot read the profile"),
            "{err}"
        );
    }

    #[test]
    fn fortran_order_grids_are_read_by_row_and_column() {
        // numpy writes a Fortran-ordered 2x3 grid column by column.
        let mut npy = Vec::new();
        {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&[2, 3])
                .order(npyz::Order::Fortran)
                .writer(&mut npy)
                .begin_nd()
                .unwrap();
            w.extend([1.0, 4.0, 2.0, 5.0, 3.0, 6.0]).unwrap();
            w.finish().unwrap();
        }
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for e in good_entries().iter().filter(|e| e.key != DECODE_ITL) {
            let bytes = npz(&[f64s(e.key, &e.shape, &e.values)]);
            let mut one = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
            let mut file = one.by_index(0).unwrap();
            let mut raw = Vec::new();
            file.read_to_end(&mut raw).unwrap();
            zip.start_file(
                format!("{}.npy", e.key),
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
            std::io::Write::write_all(&mut zip, &raw).unwrap();
        }
        zip.start_file("decode_itl.npy", zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, &npy).unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        let fortran = TimingProfile::from_npz_bytes(&bytes, "f.npz").unwrap();
        let c_order = TimingProfile::from_npz_bytes(&npz(&good_entries()), "c.npz").unwrap();
        assert_eq!(fortran.decode_itl, c_order.decode_itl);
    }
}
