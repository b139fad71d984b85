//! How a replay reads its trace: once, each row validated as it streams (a [`OnePass`]) and
//! parsed, validated and hashed by a second thread ahead of the simulation ([`ReadAhead`]);
//! and the scan-then-read road ([`scan_trace`], [`time_ordered`]) when that one pass cannot
//! vouch for what the run saw, or when every row is needed before the run (arrival jitter).

use super::session_trace::{SessionMode, read_sessions};
use super::trace::{
    self, OnePass, PassVerdict, RowOrder, SurplusHashIds, TraceReader, TraceSummary,
};
use super::unshared::TokenCounts;
use super::{Arrival, PromptHashes, PromptSpec, RequestSpec, UniformBlockHashes};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, SyncSender};
use std::thread::JoinHandle;

/// Rows in the reader thread's first message: one, so that the simulation starts at once. A
/// fresh thread reads its first rows slowly (its stack, heap and caches are cold: 16 rows took
/// about 0.2 ms after its 0.15-0.25 ms start), and the simulation waited for all of them; a
/// first message of 1 row instead of 16 took a tenth off a Mooncake-like replay (medians of
/// 60 paired runs, 0.87 on 1 worker, 0.91 on 4).
const READ_AHEAD_FIRST_ROWS: usize = 1;

/// The most rows in one message. Messages double in size up to it, because each hand-off
/// wakes the reader, blocked on a full channel, and a wake-up is a system call (15 µs on a
/// VM): 100k rows in messages of 64 spent 2.5% of a run there.
const READ_AHEAD_MAX_ROWS: usize = 256;

/// A message also ends at this many block hashes, so that long prompts keep it small.
const READ_AHEAD_MAX_HASHES: usize = 1 << 15;

/// Messages the reader thread may be ahead of the simulation: bounds the memory read ahead
/// (with the two limits above, to 4 of at most 256 KB of hashes each).
const READ_AHEAD_BATCHES: usize = 4;

/// Rows handed on before the reader counts the trace's tokens ([`TokenCounts`]), and so told
/// nothing of which of their blocks are theirs alone (which changes nothing but speed). The
/// count reads the whole file (about 0.3 ms for a thousand Mooncake rows) and the simulation
/// used to wait for it before its first row; counted after the first seven messages (1 + 2
/// + ... + 64 rows), it runs while the simulation works through up to 120 rows queued.
const UNTOLD_ROWS: usize = 127;

/// A trace replayed with its rows in `order`, read once: an iterator of the arrivals (each
/// prompt hashed for the run's block size) as a second thread reads them, while they are
/// valid and, for an open loop, in time order. Nothing is kept but what the run keeps.
///
/// Once the run has taken what it wants, [`ReadAhead::finish`] says whether the run stands.
/// The bet of [`OnePass`] (a valid trace, in time order for an open loop) holds for nearly
/// every trace; when it does not, the run is kept or thrown away once the trace is judged as
/// a scan judges it before anything runs, so that every trace gets the result and the error
/// text it got when the scan came first (what the CLI writes is written only after that).
pub struct ReadAhead {
    arrivals: std::iter::Flatten<mpsc::IntoIter<Vec<Arrival>>>,
    reader: JoinHandle<PassVerdict>,
    expected_rows: usize,
    path: PathBuf,
    block_size: u64,
    speedup_ratio: f64,
    order: RowOrder,
}

/// What a replay's run is worth once its trace is judged.
pub enum PassEnd {
    /// The run had every row it asked for, as a scan-then-read would have given them.
    Stands,
    /// The trace is valid but not in time order, or holds sessions: the run must be made
    /// again on these arrivals (rows sorted; sessions gathered).
    RunAgain(Box<dyn Iterator<Item = Arrival>>),
}

/// A judged trace: what its run is worth, and the rows worth a warning.
pub struct Judged {
    pub end: PassEnd,
    pub surplus_hash_ids: SurplusHashIds,
}

impl ReadAhead {
    /// Opens the trace at `path` (`block_size` tokens per hash id) and starts reading it in
    /// `order`, timestamps divided by `speedup_ratio` (a closed loop, in file order, ignores
    /// timestamps and so the ratio: its time bound is checked as recorded), each prompt
    /// hashed for `hash_block_size` (the run's).
    pub fn start(
        path: &Path,
        block_size: u64,
        speedup_ratio: f64,
        order: RowOrder,
        hash_block_size: u64,
    ) -> Result<ReadAhead, String> {
        let speedup_ratio = match order {
            RowOrder::Time => speedup_ratio,
            RowOrder::File => 1.0,
        };
        let name = path.display().to_string();
        let mut file = open_trace(path)?;
        let expected_rows = estimated_rows(&mut file);
        let (batches, arrivals) = mpsc::sync_channel(READ_AHEAD_BATCHES);
        let reader = std::thread::spawn(move || {
            let bytes = file.get_ref().metadata().map_or(u64::MAX, |m| m.len());
            // The count reads by offset, through a second handle on the same open file.
            let counted = file.get_ref().try_clone().ok();
            let count = move || counted.and_then(|file| count_tokens(&file, bytes));
            // The rows counted are the rows read, even if the file grows meanwhile.
            let file = file.take(bytes);
            let reader =
                TraceReader::new(file, &name, block_size).with_speedup_ratio(speedup_ratio);
            let rows = OnePass::new(reader, order);
            read_ahead(rows, hash_block_size, count, batches)
        });
        keep_off_this_cpu(&reader);
        Ok(ReadAhead {
            arrivals: arrivals.into_iter().flatten(),
            reader,
            expected_rows,
            path: path.to_path_buf(),
            block_size,
            speedup_ratio,
            order,
        })
    }

    /// About how many rows the trace holds (0: no guess): what the run reserves room for.
    pub fn expected_rows(&self) -> usize {
        self.expected_rows
    }

    /// Stops the reader and judges the trace:
    /// - an invalid row: the scan's error (the pass stopped at the row the scan stops at);
    /// - the pass stopped short (a row out of time order, or past the time bound) or the run
    ///   stopped reading (a time limit, a closed loop's end of issue, a caught bug): a scan
    ///   decides. Its error, if any; else a time-ordered trace's run stands (it had every row
    ///   it asked for, with the scan's origin), and an unsorted one must run again sorted.
    pub fn finish(self) -> Result<Judged, String> {
        // The reader, blocked on a full channel or not, stops at its next hand-off.
        drop(self.arrivals);
        let verdict = self
            .reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let judged = |end, surplus_hash_ids| Judged {
            end,
            surplus_hash_ids,
        };
        match verdict {
            PassVerdict::Valid(surplus) => Ok(judged(PassEnd::Stands, surplus)),
            PassVerdict::Invalid(e) => Err(e.to_string()),
            PassVerdict::Undecided => {
                let (path, block_size) = (&self.path, self.block_size);
                let summary = scan_trace(path, block_size, self.speedup_ratio)?;
                let surplus = summary.surplus_hash_ids;
                if summary.sessions {
                    let mode = match self.order {
                        RowOrder::Time => SessionMode::Trace {
                            speedup_ratio: self.speedup_ratio,
                        },
                        RowOrder::File => SessionMode::ClosedLoop,
                    };
                    let arrivals = session_arrivals(path, block_size, mode)?;
                    let end = PassEnd::RunAgain(Box::new(arrivals.into_iter()));
                    return Ok(judged(end, surplus));
                }
                if summary.sorted || self.order == RowOrder::File {
                    return Ok(judged(PassEnd::Stands, surplus));
                }
                let sorted = in_time_order(path, block_size, self.speedup_ratio, &summary)?;
                let end = PassEnd::RunAgain(Box::new(sorted.map(Arrival::from)));
                Ok(judged(end, surplus))
            }
        }
    }
}

impl Iterator for ReadAhead {
    type Item = Arrival;

    // Inlined into the simulation's loop, as the channel's own iterator was.
    #[inline]
    fn next(&mut self) -> Option<Arrival> {
        self.arrivals.next()
    }
}

/// Keeps `thread` off the CPU this thread runs on, when it may use another; returns the CPU
/// it is kept off.
///
/// Linux queues a new thread on its parent's CPU and moves it to an idle one only when it
/// next balances: the reader waited there, up to milliseconds, while the simulation set up
/// the run and then waited for the reader's first rows (`perf sched` on a 2-core VM).
#[cfg(target_os = "linux")]
fn keep_off_this_cpu<T>(thread: &JoinHandle<T>) -> Option<usize> {
    use std::os::unix::thread::JoinHandleExt;
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero `cpu_set_t` is an empty set; the calls read and write only the
    // local set, and `thread` is a live thread of this process (its handle is not joined).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return None;
        }
        libc::CPU_CLR(cpu, &mut allowed);
        let kept = libc::CPU_COUNT(&allowed) > 0
            && libc::pthread_setaffinity_np(thread.as_pthread_t(), size, &allowed) == 0;
        kept.then_some(cpu)
    }
}

#[cfg(not(target_os = "linux"))]
fn keep_off_this_cpu<T>(_thread: &JoinHandle<T>) -> Option<usize> {
    None
}

/// Lets the calling thread run on every CPU the process's main thread may use. The reader
/// calls it once it is under way: kept off the simulation's CPU only to start at once, it
/// should not be stuck on one CPU that something else then keeps busy.
#[cfg(target_os = "linux")]
fn run_where_the_process_may() {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero `cpu_set_t` is an empty set; the calls read and write only the
    // local set (the main thread's id is the process's).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(libc::getpid(), size, &mut allowed) == 0 {
            libc::sched_setaffinity(0, size, &allowed);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn run_where_the_process_may() {}

/// The reader thread: hands `rows` on to `batches` hashed for `block_size`, in messages that
/// grow from few rows to many; stops when the pass ends or the simulation stops taking rows.
/// Once [`UNTOLD_ROWS`] are handed on, runs `count` and tells every later row what the
/// counts say of the blocks only it holds. Returns what the pass found.
fn read_ahead<R: BufRead>(
    mut rows: OnePass<R>,
    block_size: u64,
    count: impl FnOnce() -> Option<TokenCounts>,
    batches: SyncSender<Vec<Arrival>>,
) -> PassVerdict {
    let mut known = UniformBlockHashes::default();
    let mut rows_wanted = READ_AHEAD_FIRST_ROWS;
    let mut batch = Vec::with_capacity(rows_wanted);
    let mut batch_hashes = 0;
    let mut count = Some(count);
    let mut counts = None;
    let mut rows_sent = 0;
    for spec in &mut rows {
        let hashes: Arc<[u64]> = spec.block_hashes_with(block_size, &mut known).into();
        batch_hashes += hashes.len();
        let unshared_from = counts
            .as_ref()
            .map_or(u64::MAX, |c| unshared_block(c, &spec, block_size));
        let hashes = Some(PromptHashes {
            block_size,
            hashes,
            unshared_from,
        });
        batch.push(Arrival {
            spec,
            hashes,
            session: None,
        });
        if batch.len() == rows_wanted || batch_hashes >= READ_AHEAD_MAX_HASHES {
            rows_wanted = (rows_wanted * 2).min(READ_AHEAD_MAX_ROWS);
            let full = std::mem::replace(&mut batch, Vec::with_capacity(rows_wanted));
            batch_hashes = 0;
            rows_sent += full.len();
            if batches.send(full).is_err() {
                return rows.verdict(); // the simulation stopped taking rows
            }
            if rows_sent >= UNTOLD_ROWS
                && let Some(count) = count.take()
            {
                counts = count();
                run_where_the_process_may();
            }
        }
    }
    // The last, partial batch; the simulation may have stopped already.
    let _ = batches.send(batch);
    rows.verdict()
}

/// The counts of the tokens in the first `bytes` bytes of `file` (see [`TokenCounts`]; None
/// if they cannot be read for certain, or their number is unknown), read by offset, so the
/// pass reading the same open file is not moved.
fn count_tokens(file: &File, bytes: u64) -> Option<TokenCounts> {
    if bytes == u64::MAX {
        return None;
    }
    TokenCounts::scan(BufReader::new(ReadFromStart { file, at: 0 }), bytes)
}

/// The first block of `spec`'s prompt (in blocks of `block_size`) that no other row holds.
fn unshared_block(counts: &TokenCounts, spec: &RequestSpec, block_size: u64) -> u64 {
    let PromptSpec::HashIds {
        hash_ids,
        tokens_per_hash,
    } = &spec.prompt;
    counts
        .unshared_from_token(hash_ids, *tokens_per_hash)
        .map_or(u64::MAX, |token| token / block_size)
}

/// Reads a file from its start by offset, leaving the file's own offset where it was.
struct ReadFromStart<'a> {
    file: &'a File,
    at: u64,
}

impl std::io::Read for ReadFromStart<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let read = self.file.read_at(buf, self.at)?;
        self.at += read as u64;
        Ok(read)
    }
}

#[cfg(test)]
thread_local! {
    /// How many times this thread opened a trace: tests check how often a replay reads one.
    static TRACE_OPENS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How many times this thread opened a trace so far.
#[cfg(test)]
pub(crate) fn trace_opens() -> u32 {
    TRACE_OPENS.with(|opens| opens.get())
}

/// The trace at `path`, buffered; the error names it.
pub fn open_trace(path: &Path) -> Result<BufReader<File>, String> {
    #[cfg(test)]
    TRACE_OPENS.with(|opens| opens.set(opens.get() + 1));
    crate::bounds::open_regular(path)
        .map(BufReader::new)
        .map_err(|e| format!("{}: cannot read the trace: {e}", path.display()))
}

/// About how many rows `trace` holds: its length over the mean length of the whole rows in
/// its first buffer (peeked, not consumed). 0 when nothing can be told (an empty file, an
/// unreadable one, a first row longer than the buffer).
fn estimated_rows(trace: &mut BufReader<File>) -> usize {
    let file_bytes = trace.get_ref().metadata().map_or(0, |m| m.len());
    let Ok(head) = trace.fill_buf() else {
        return 0; // reading again reports the error where it belongs
    };
    // The whole rows at the head end at its last line end.
    let Some(last_end) = head.iter().rposition(|&byte| byte == b'\n') else {
        return 0;
    };
    let head_rows = head.iter().filter(|&&byte| byte == b'\n').count() as u64;
    let estimate = file_bytes.saturating_mul(head_rows) / (last_end as u64 + 1);
    usize::try_from(estimate).unwrap_or(usize::MAX)
}

/// Validates the whole trace at `path` whose timestamps are divided by `speedup_ratio`;
/// returns its summary (origin, whether it is sorted).
pub fn scan_trace(
    path: &Path,
    block_size: u64,
    speedup_ratio: f64,
) -> Result<TraceSummary, String> {
    let name = path.display().to_string();
    trace::scan_scaled(open_trace(path)?, &name, block_size, speedup_ratio)
        .map_err(|e| e.to_string())
}

/// The arrivals of the session trace at `path` (see [`read_sessions`]), read whole.
pub fn session_arrivals(
    path: &Path,
    block_size: u64,
    mode: SessionMode,
) -> Result<Vec<Arrival>, String> {
    let name = path.display().to_string();
    let reader = TraceReader::new(open_trace(path)?, &name, block_size);
    read_sessions(reader, mode).map_err(|e| e.to_string())
}

/// The requests of the trace at `path`, validated whole first, in arrival order, timestamps
/// divided by `speedup_ratio`: streamed when the file is in time order, else read whole and
/// sorted.
pub fn time_ordered(
    path: &Path,
    block_size: u64,
    speedup_ratio: f64,
) -> Result<Box<dyn Iterator<Item = RequestSpec>>, String> {
    let summary = scan_trace(path, block_size, speedup_ratio)?;
    in_time_order(path, block_size, speedup_ratio, &summary)
}

/// [`time_ordered`] for a trace whose scan gave `summary`.
pub fn in_time_order(
    path: &Path,
    block_size: u64,
    speedup_ratio: f64,
    summary: &TraceSummary,
) -> Result<Box<dyn Iterator<Item = RequestSpec>>, String> {
    let name = path.display().to_string();
    let reader = TraceReader::new(open_trace(path)?, &name, block_size)
        .with_origin_ms(summary.origin_ms)
        .with_speedup_ratio(speedup_ratio);
    // Every row was validated by the scan behind `summary`; a row failing now means the file
    // changed under us, and the run ends its arrivals there (conservation still holds).
    let rows = reader.map_while(Result::ok);
    if summary.sorted {
        return Ok(Box::new(rows));
    }
    let mut all: Vec<RequestSpec> = rows.collect();
    all.sort_by_key(|r| (r.arrival, r.row));
    Ok(Box::new(all.into_iter()))
}

#[cfg(test)]
pub(crate) mod tests;
