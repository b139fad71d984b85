//! The documented upper bounds on what an input may ask for, and the capped readers that keep
//! a huge or endless input file (e.g. `/dev/zero`) from being read into memory.
//!
//! Every bound here is listed in docs/scenarios.md ("Limits and bounds") and, for sweeps, in
//! docs/sweeps.md. Each is checked where the input is validated, and an input beyond it is an
//! input error (exit 2) naming the file and field.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;

/// Largest scenario, policy or engine file, in bytes (4 MiB; real ones are a few KiB).
pub const MAX_INPUT_FILE_BYTES: u64 = 4 << 20;
/// Largest timing-profile file (`planner_profile_data`: an NPZ, or one file of a profiler
/// results directory), in bytes (64 MiB; Dynamo's are a few hundred KiB).
pub const MAX_PROFILE_FILE_BYTES: u64 = 64 << 20;
/// Most points on one axis of a timing profile (and most cells of its decode grid).
pub const MAX_PROFILE_POINTS: u64 = 1 << 20;
/// Longest modelled prefill or decode step, in ms (one day): a fixed `prefill_ms` /
/// `decode_ms` may not exceed it, and an interpolated value is clamped to it, so every pass
/// divided by the smallest speedup ratio stays far inside the time bound.
pub const MAX_STEP_MS: f64 = 86_400_000.0;
/// Longest line of a trace, in bytes (1 MiB: about 100,000 hash ids).
pub const MAX_TRACE_LINE_BYTES: u64 = 1 << 20;
/// Most worker ranks of a run (`workers.count × dp_size`, or summed over `workers.pools`; and
/// each alone).
pub const MAX_RANKS: u64 = 4096;
/// Most requests of a run, over all groups (or trace rows). A request costs about 1.3 KiB
/// through a run, so a run's requests stay near 1.3 GB.
pub const MAX_REQUESTS: u64 = 1_000_000;
/// Most prompt blocks (hash ids) over all requests of a workload: 8 bytes each in the
/// requests, about 40 bytes each through a run (~1.3 GB).
pub const MAX_PROMPT_BLOCKS: u64 = 1 << 25;
/// Longest prompt or output, in tokens (2^24 = 16,777,216).
pub const MAX_TOKENS: u64 = 1 << 24;
/// Largest KV block (and trace hash-id block), in tokens.
pub const MAX_BLOCK_TOKENS: u64 = 1 << 16;
/// Smallest positive engine speedup ratio: the longest pass (2^24 prefill tokens) divided by
/// it still fits well inside the time bound (`time::MAX_INPUT_NS`).
pub const MIN_SPEEDUP_RATIO: f64 = 1e-3;
/// Most runs of one sweep (points × seeds).
pub const MAX_SWEEP_RUNS: u64 = 100_000;
/// Most sweep threads per available core.
pub const MAX_JOBS_PER_CORE: usize = 4;

/// Reads the whole file at `path` as UTF-8, refusing one larger than `cap_bytes` after
/// reading at most `cap_bytes + 1` bytes (so an endless file is refused quickly).
pub fn read_to_string_capped(path: &Path, cap_bytes: u64) -> io::Result<String> {
    let mut text = String::new();
    File::open(path)?
        .take(cap_bytes + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > cap_bytes {
        return Err(too_large(format!(
            "the file is larger than {}, the most routersim reads",
            format_bytes(cap_bytes)
        )));
    }
    Ok(text)
}

/// Reads the whole file at `path` as bytes, refusing one larger than `cap_bytes` after
/// reading at most `cap_bytes + 1` bytes.
pub fn read_bytes_capped(path: &Path, cap_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(cap_bytes + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap_bytes {
        return Err(too_large(format!(
            "the file is larger than {}, the most routersim reads",
            format_bytes(cap_bytes)
        )));
    }
    Ok(bytes)
}

/// Reads one line (through `\n`, or to end of input) into `buf`, which is cleared first.
/// Returns the bytes read (0 at end of input). A line longer than `cap_bytes` is an
/// `InvalidData` error after reading at most `cap_bytes + 1` bytes of it.
pub fn read_line_capped<R: BufRead>(
    input: &mut R,
    buf: &mut String,
    cap_bytes: u64,
) -> io::Result<usize> {
    // The line is read into `buf`'s own allocation, reused from line to line.
    let mut bytes = std::mem::take(buf).into_bytes();
    bytes.clear();
    let read = input.take(cap_bytes + 1).read_until(b'\n', &mut bytes)?;
    if read as u64 > cap_bytes {
        return Err(too_large(format!(
            "a line is longer than {}, the most routersim reads",
            format_bytes(cap_bytes)
        )));
    }
    *buf = String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a line is not valid UTF-8"))?;
    Ok(read)
}

fn too_large(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// `4 MiB`, `1 MiB`, or bytes when not a whole MiB.
fn format_bytes(bytes: u64) -> String {
    match bytes % (1 << 20) {
        0 => format!("{} MiB", bytes >> 20),
        _ => format!("{bytes} bytes"),
    }
}

/// The threads a sweep uses: `requested` (default: every core), at most one per run and at
/// most [`MAX_JOBS_PER_CORE`] per core, and at least one.
pub fn capped_jobs(requested: Option<usize>, runs: usize, cores: usize) -> usize {
    let cores = cores.max(1);
    requested
        .unwrap_or(cores)
        .min(cores.saturating_mul(MAX_JOBS_PER_CORE))
        .min(runs)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    #[test]
    fn a_file_at_the_cap_is_read_and_one_byte_more_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "abcd").unwrap();
        assert_eq!(read_to_string_capped(&path, 4).unwrap(), "abcd");
        let error = read_to_string_capped(&path, 3).unwrap_err();
        assert!(error.to_string().contains("larger than 3 bytes"), "{error}");
    }

    #[test]
    fn dev_zero_is_refused_quickly() {
        let path = Path::new("/dev/zero");
        if !path.exists() {
            return;
        }
        let error = read_to_string_capped(path, MAX_INPUT_FILE_BYTES).unwrap_err();
        assert!(error.to_string().contains("larger than 4 MiB"), "{error}");
        let mut reader = BufReader::new(File::open(path).unwrap());
        let error = read_line_capped(&mut reader, &mut String::new(), 1024).unwrap_err();
        assert!(
            error.to_string().contains("longer than 1024 bytes"),
            "{error}"
        );
    }

    #[test]
    fn lines_are_read_one_at_a_time_up_to_the_cap() {
        let mut input = "ab\ncdef\n\ng".as_bytes();
        let mut buf = String::new();
        let mut lines = Vec::new();
        while read_line_capped(&mut input, &mut buf, 5).unwrap() > 0 {
            lines.push(buf.clone());
        }
        assert_eq!(lines, ["ab\n", "cdef\n", "\n", "g"]);
        let mut long = "abcdef\n".as_bytes();
        assert!(read_line_capped(&mut long, &mut buf, 5).is_err());
    }

    #[test]
    fn jobs_are_capped_at_runs_and_cores() {
        assert_eq!(capped_jobs(Some(10_000), 1, 2), 1, "one run, one thread");
        assert_eq!(capped_jobs(Some(10_000), 1_000, 2), 8, "4 per core");
        assert_eq!(capped_jobs(Some(3), 1_000, 2), 3, "a small request is kept");
        assert_eq!(capped_jobs(None, 1_000, 2), 2, "default: every core");
        assert_eq!(capped_jobs(None, 0, 0), 1, "at least one");
    }
}
