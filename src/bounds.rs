//! The documented upper bounds on what an input may ask for, and the one door through which
//! routersim opens a file to read it: regular files only (a FIFO, a device such as
//! `/dev/zero`, a socket or a directory is refused without blocking), read through a size cap.
//!
//! Every bound here is listed in docs/scenarios.md ("Limits and bounds") and, for sweeps, in
//! docs/sweeps.md. Each is checked where the input is validated, and an input beyond it is an
//! input error (exit 2) naming the file and field. [`number`] is how such a message, and every
//! other, writes a number.

use std::fs::{self, File};
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
/// Largest magnitude of a trace timestamp, in ms (1e15 ms, about 31,700 years: epoch
/// milliseconds are about 1.7e12). The span of a trace's timestamps must also fit the time
/// bound (`time::MAX_INPUT_NS`).
pub const MAX_TRACE_TIMESTAMP_MS: f64 = 1e15;
/// Longest line of a trace, in bytes (1 MiB: about 100,000 hash ids).
pub const MAX_TRACE_LINE_BYTES: u64 = 1 << 20;
/// Most worker ranks of a run (`workers.count × dp_size`, or summed over `workers.pools`; and
/// each alone).
pub const MAX_RANKS: u64 = 4096;

/// How long a scaling policy may take to answer one question by default, in seconds.
pub const POLICY_ANSWER_DEFAULT_S: f64 = 60.0;
/// The longest answer time limit a scaling policy may be given, in seconds (a day).
pub const POLICY_ANSWER_MAX_S: f64 = 86_400.0;
/// Most requests of a run, over all groups (or trace rows). A request costs about 1.3 KiB
/// through a run, so a run's requests stay near 1.3 GB.
pub const MAX_REQUESTS: u64 = 1_000_000;
/// Most turns of one session (trace rows of one `session_id`, or a synthetic group's `turns`
/// draw): a session issues its turns one after another, so a longer one is a malformed input
/// rather than a conversation (10,000 turns at a second each is almost three hours).
pub const MAX_SESSION_TURNS: u64 = 10_000;
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
/// Memory a process's concurrent runs may hold together, by their estimates, in bytes (2 GB):
/// a sweep, check, plan or tune runs at once only as many runs as fit in it
/// ([`admitted_runs`]), whatever `--jobs` says.
pub const PROCESS_MEMORY_BUDGET_BYTES: u64 = 2_000_000_000;
/// A run's estimated peak per request, in bytes: its record, its drawn prompt and its share of
/// the metrics' lists. Measured (2026-12-07, release, `check --seeds 1`): 990,000 requests of
/// one 64-token block each peaked at 807 MB, about 815 bytes a request with its block.
pub const RUN_BYTES_PER_REQUEST: u64 = 768;
/// A run's estimated peak per prompt block (hash id) of its workload, in bytes: the same
/// requests with 8 blocks each (512 tokens) peaked at 1,346 MB, 78 bytes more a block.
pub const RUN_BYTES_PER_PROMPT_BLOCK: u64 = 80;
/// A run's estimated peak per worker rank, in bytes: 4,096 ranks took 44 MB more than one.
pub const RUN_BYTES_PER_RANK: u64 = 16 << 10;
/// A run's estimated peak beside its requests, blocks and ranks, in bytes (its tables,
/// buffers and threads' stacks).
pub const RUN_BASE_BYTES: u64 = 16 << 20;

/// A run's estimated peak memory, in bytes, from what it is given: `requests`,
/// `prompt_blocks` over all their prompts, and worker `ranks`.
pub fn run_memory_estimate_bytes(requests: u64, prompt_blocks: u64, ranks: u64) -> u64 {
    RUN_BASE_BYTES
        .saturating_add(requests.saturating_mul(RUN_BYTES_PER_REQUEST))
        .saturating_add(prompt_blocks.saturating_mul(RUN_BYTES_PER_PROMPT_BLOCK))
        .saturating_add(ranks.saturating_mul(RUN_BYTES_PER_RANK))
}

/// How many runs may run at once, given each run's estimated peak (`run_estimates_bytes`, in
/// any order) and the threads `jobs` would run them on: the most `k` (at most `jobs`) whose
/// `k` largest estimates together fit [`PROCESS_MEMORY_BUDGET_BYTES`], so that any `k` of the
/// runs fit; at least one (a run alone is held to the per-run bounds). Decided once, before
/// any run; outputs do not depend on it (runs are collected in order).
pub fn admitted_runs(run_estimates_bytes: &[u64], jobs: usize) -> usize {
    let mut largest_first = run_estimates_bytes.to_vec();
    largest_first.sort_unstable_by(|a, b| b.cmp(a));
    let mut total_bytes = 0u64;
    let fitting = largest_first
        .iter()
        .take(jobs)
        .take_while(|&&bytes| {
            total_bytes = total_bytes.saturating_add(bytes);
            total_bytes <= PROCESS_MEMORY_BUDGET_BYTES
        })
        .count();
    fitting.max(1)
}

/// Largest output marker (`.routersim-output.json`) or stage marker routersim reads, in bytes
/// (1 MiB; its own list a few dozen files in a few KiB).
pub const MAX_MARKER_BYTES: u64 = 1 << 20;
/// The head of an existing `--junit` file read to find routersim's signature, in bytes.
pub const JUNIT_SIGNATURE_SCAN_BYTES: u64 = 4096;
/// Longest name in an output path (`--out`, `--junit`), in bytes: the file-name limit of the
/// common file systems (NAME_MAX).
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// Opens `path` for reading if it is a regular file (a link to one is followed). A FIFO, a
/// device, a socket or a directory is an `InvalidInput` error saying what it is, and opening
/// never blocks: the type is checked before the open, and the open itself is non-blocking
/// (a FIFO swapped in between opens at once, without a writer) and checked again on the handle.
pub fn open_regular(path: &Path) -> io::Result<File> {
    require_regular(&fs::metadata(path)?)?;
    let file = open_without_blocking(path)?;
    require_regular(&file.metadata()?)?;
    Ok(file)
}

#[cfg(unix)]
fn open_without_blocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK changes nothing for the regular file this must be: its reads never block.
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Opens the directory `path` (a link to one is followed) as a handle to lock, never
/// blocking: anything else there is an `InvalidInput` error saying what it is.
pub fn open_directory(path: &Path) -> io::Result<File> {
    let is_dir = |meta: &fs::Metadata| match meta.is_dir() {
        true => Ok(()),
        false => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "it is {}, not a directory",
                special_file_kind(&meta.file_type())
            ),
        )),
    };
    is_dir(&fs::metadata(path)?)?;
    let handle = open_without_blocking(path)?;
    is_dir(&handle.metadata()?)?;
    Ok(handle)
}

fn require_regular(meta: &fs::Metadata) -> io::Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "it is {}, not a regular file",
            special_file_kind(&meta.file_type())
        ),
    ))
}

/// What a file that is not a regular file is, in words.
fn special_file_kind(kind: &fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

/// Reads the whole regular file at `path` ([`open_regular`]) as UTF-8, refusing one larger
/// than `cap_bytes` after reading at most `cap_bytes + 1` bytes (so a file that grows without
/// end is refused quickly).
pub fn read_to_string_capped(path: &Path, cap_bytes: u64) -> io::Result<String> {
    let mut text = String::new();
    open_capped(path, cap_bytes)?.read_to_string(&mut text)?;
    if text.len() as u64 > cap_bytes {
        return Err(file_too_large(cap_bytes));
    }
    Ok(text)
}

/// Reads the whole regular file at `path` ([`open_regular`]) as bytes, refusing one larger
/// than `cap_bytes` after reading at most `cap_bytes + 1` bytes.
pub fn read_bytes_capped(path: &Path, cap_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_capped(path, cap_bytes)?.read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap_bytes {
        return Err(file_too_large(cap_bytes));
    }
    Ok(bytes)
}

/// The regular file at `path`, to be read through a cap of `cap_bytes` (+1 to tell a file
/// at the cap from a larger one: a reader that finds the `Take`'s limit at 0 read past the
/// cap). One already larger is refused before a byte is read; the cap still holds for one
/// that grows while it is read.
pub fn open_capped(path: &Path, cap_bytes: u64) -> io::Result<io::Take<File>> {
    let file = open_regular(path)?;
    if file.metadata()?.len() > cap_bytes {
        return Err(file_too_large(cap_bytes));
    }
    Ok(file.take(cap_bytes + 1))
}

/// The error of a file larger than `cap_bytes`.
pub fn file_too_large(cap_bytes: u64) -> io::Error {
    too_large(format!(
        "the file is larger than {}, the most routersim reads",
        format_bytes(cap_bytes)
    ))
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

/// A number as people write it, the one form of every bound, figure and number of a message:
/// whole numbers below 1e15 without a fraction; magnitudes from 1e-4 to 1e15 in fixed point
/// with at least 4 decimals and at least 4 significant digits; smaller and larger ones in
/// scientific notation with up to 5 significant digits (`1e-6`, `1.5e300`). Trailing zeros
/// are dropped.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs();
    if !(1e-4..1e15).contains(&magnitude) {
        let scientific = format!("{v:.4e}");
        let (mantissa, exponent) = scientific
            .split_once('e')
            .expect("LowerExp writes an exponent");
        return format!("{}e{exponent}", without_trailing_zeros(mantissa));
    }
    if v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    // Zeros between the point and the first significant digit (0.0123 has one).
    let leading_zeros = (-magnitude.log10().floor() - 1.0).max(0.0) as usize;
    without_trailing_zeros(&format!("{v:.*}", 4 + leading_zeros))
}

/// `1.2500` as `1.25`, `2.0000` as `2`.
fn without_trailing_zeros(fixed: &str) -> String {
    match fixed.contains('.') {
        true => fixed
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string(),
        false => fixed.to_string(),
    }
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

    #[cfg(unix)]
    #[test]
    fn dev_zero_is_refused_as_a_device_without_reading_it() {
        let path = Path::new("/dev/zero");
        if !path.exists() {
            return;
        }
        for error in [
            read_to_string_capped(path, MAX_INPUT_FILE_BYTES).unwrap_err(),
            read_bytes_capped(path, MAX_INPUT_FILE_BYTES).unwrap_err(),
            open_regular(path).unwrap_err(),
        ] {
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
            assert!(error.to_string().contains("character device"), "{error}");
        }
        // A link to it is no way around the check.
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink(path, &link).unwrap();
        let error = read_to_string_capped(&link, MAX_INPUT_FILE_BYTES).unwrap_err();
        assert!(error.to_string().contains("character device"), "{error}");
        // A line reader over an endless stream is still bounded.
        let mut reader = BufReader::new(File::open(path).unwrap());
        let error = read_line_capped(&mut reader, &mut String::new(), 1024).unwrap_err();
        assert!(
            error.to_string().contains("longer than 1024 bytes"),
            "{error}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p.npz");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here: the case cannot be built
        }
        // Without a writer, a blocking open of the FIFO would never return.
        let error = read_bytes_capped(&fifo, MAX_PROFILE_FILE_BYTES).unwrap_err();
        assert!(error.to_string().contains("FIFO"), "{error}");
        assert!(open_regular(&fifo).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_is_refused_and_a_link_to_a_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let error = read_to_string_capped(dir.path(), MAX_INPUT_FILE_BYTES).unwrap_err();
        assert!(error.to_string().contains("a directory"), "{error}");
        let file = dir.path().join("s.yaml");
        std::fs::write(&file, "name: s").unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_to_string_capped(&link, 7).unwrap(), "name: s");
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
    fn concurrent_runs_are_admitted_while_their_largest_estimates_fit_the_budget() {
        const MB: u64 = 1_000_000;
        // The 990,000-request check: 8 runs of about 850 MB each fit two at a time.
        let big = run_memory_estimate_bytes(990_000, 990_000, 1);
        assert!((800 * MB..900 * MB).contains(&big), "{big}");
        assert_eq!(admitted_runs(&[big; 8], 8), 2);
        assert_eq!(admitted_runs(&[big; 8], 1), 1, "never more than --jobs");
        // Small runs are all admitted, up to --jobs.
        assert_eq!(admitted_runs(&[10 * MB; 100], 16), 16);
        assert_eq!(admitted_runs(&[10 * MB; 3], 16), 3);
        // A run past the budget alone still runs, one at a time.
        assert_eq!(admitted_runs(&[3_000 * MB, MB], 4), 1);
        assert_eq!(admitted_runs(&[], 4), 1);
        // Mixed sizes: any k runs must fit, so the k largest are counted.
        let mixed = [100 * MB, 950 * MB, 100 * MB, 950 * MB, 100 * MB];
        assert_eq!(
            admitted_runs(&mixed, 8),
            3,
            "950 + 950 + 100 fits, 100 more does not"
        );
        assert_eq!(
            admitted_runs(&[PROCESS_MEMORY_BUDGET_BYTES / 4; 4], 8),
            4,
            "inclusive"
        );
        assert_eq!(admitted_runs(&[u64::MAX; 4], 8), 1);
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
