//! Read-ahead tests: the row estimate a run reserves by, and the reader thread's hand-off
//! (replays through it, one pass against two, are tested in the pipeline's tests).

use super::*;

/// A valid trace of `rows` rows in time order: fractional timestamps from a non-zero origin,
/// some ties, prompts sharing prefixes.
pub(crate) fn sorted_trace(rows: u64) -> Vec<String> {
    (0..rows)
        .map(|i| {
            let timestamp_ms = 1000.25 + (i - i % 3) as f64 * 7.3;
            let hash_ids: Vec<u64> = (0..1 + i % 4).map(|k| k + 10 * (i % 5)).collect();
            format!(
                r#"{{"timestamp": {timestamp_ms}, "input_length": {}, "output_length": {}, "hash_ids": {hash_ids:?}}}"#,
                hash_ids.len() as u64 * 512 - i % 7,
                1 + i % 20,
            )
        })
        .collect()
}

/// `rows` rows of one length each (fixed-width timestamps and hash ids), in time order.
pub(crate) fn same_length_rows(rows: u64) -> String {
    (0..rows)
        .map(|i| {
            format!(
                r#"{{"timestamp": {i:>6}, "input_length": 64, "output_length": 2, "hash_ids": [{i:>6}]}}"#
            ) + "\n"
        })
        .collect()
}

/// `estimated_rows` of a trace file holding `text`.
fn estimate_of(text: &str) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text).unwrap();
    estimated_rows(&mut open_trace(&path).unwrap())
}

#[test]
fn a_traces_row_count_is_estimated_from_its_first_rows() {
    // Rows of one length: exact, whether the head holds some of them or all.
    assert_eq!(estimate_of(&same_length_rows(5_000)), 5_000);
    assert_eq!(estimate_of(&same_length_rows(3)), 3);
    // Rows of mixed lengths: near.
    let mixed = sorted_trace(2_000).join("\n") + "\n";
    let estimate = estimate_of(&mixed);
    assert!((1_500..=2_500).contains(&estimate), "{estimate}");
    // Nothing to tell from: no guess.
    assert_eq!(estimate_of(""), 0);
    assert_eq!(
        estimate_of(&format!("{{\"x\": \"{}\"}}", "y".repeat(20_000))),
        0
    );
}

/// A trace file holding `text`, in a temporary directory.
fn trace_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn every_row_arrives_hashed_for_the_runs_block_size_and_a_whole_valid_trace_stands() {
    let (_dir, path) = trace_file(&(sorted_trace(300).join("\n") + "\n"));
    let mut rows = ReadAhead::start(&path, 512, 1.0, RowOrder::Time, 16).unwrap();
    let arrivals: Vec<Arrival> = rows.by_ref().collect();
    assert_eq!(arrivals.len(), 300);
    for (row, arrival) in arrivals.iter().enumerate() {
        assert_eq!(arrival.spec.row, row as u64);
        let hashes = arrival.hashes.as_ref().expect("hashed ahead");
        assert_eq!(hashes.block_size, 16);
        assert_eq!(*hashes.hashes, *arrival.spec.block_hashes(16));
    }
    let expected: Vec<RequestSpec> = time_ordered(&path, 512, 1.0).unwrap().collect();
    let specs: Vec<RequestSpec> = arrivals.into_iter().map(|a| a.spec).collect();
    assert_eq!(specs, expected, "the rows a scan, then a read, gives");
    assert!(matches!(rows.finish().map(|j| j.end), Ok(PassEnd::Stands)));
}

/// A row of `ids` (512 tokens each) at `timestamp`.
fn row_of_ids(timestamp: usize, ids: &[u64]) -> String {
    format!(
        r#"{{"timestamp": {timestamp}, "input_length": {}, "output_length": 1, "hash_ids": {ids:?}}}"#,
        512 * ids.len()
    ) + "\n"
}

#[test]
fn rows_after_the_first_messages_are_told_from_which_block_on_no_other_row_holds_their_prompt() {
    // The first UNTOLD_ROWS rows go out before the count: told nothing, though the first
    // holds ids 1 and 2 with a later row and 7 alone, and each filler an id of its own.
    let mut text = row_of_ids(0, &[1, 2, 7]);
    for i in 1..UNTOLD_ROWS {
        text += &row_of_ids(i, &[1000 + i as u64]);
    }
    // Counted: 1 and 2 in two rows (the first's among them), 10, 8 and 9 in one each.
    text += &row_of_ids(UNTOLD_ROWS, &[1, 2]);
    text += &row_of_ids(UNTOLD_ROWS + 1, &[1, 2, 10]);
    text += &row_of_ids(UNTOLD_ROWS + 2, &[8, 9]);
    let (_dir, path) = trace_file(&text);
    let rows = ReadAhead::start(&path, 512, 1.0, RowOrder::Time, 64).unwrap();
    let from: Vec<u64> = rows.map(|a| a.hashes.unwrap().unshared_from).collect();
    assert!(from[..UNTOLD_ROWS].iter().all(|&f| f == u64::MAX));
    // Blocks of 64: the third id of a row starts at its block 16.
    assert_eq!(from[UNTOLD_ROWS..], [u64::MAX, 16, 0]);
    // A line it cannot read for certain: nobody is told anything.
    let escaped = text.replace("\"hash_ids\": [8", "\"hash\\u005fids\": [8");
    let (_dir, path) = trace_file(&escaped);
    let rows = ReadAhead::start(&path, 512, 1.0, RowOrder::Time, 64).unwrap();
    assert!(
        rows.take(UNTOLD_ROWS + 2)
            .all(|a| a.hashes.unwrap().unshared_from == u64::MAX)
    );
}

/// The CPUs the calling thread may run on.
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero `cpu_set_t` is an empty set, filled by the call for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Runs `f` on a new thread that [`keep_off_this_cpu`] handles before `f` starts; returns
/// the CPU it kept the thread off and what `f` returned.
#[cfg(target_os = "linux")]
fn kept_off_while_it_runs<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (Option<usize>, T) {
    let (go, wait) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        wait.recv().unwrap();
        f()
    });
    let kept_off = keep_off_this_cpu(&thread);
    go.send(()).unwrap();
    (kept_off, thread.join().unwrap())
}

#[cfg(target_os = "linux")]
#[test]
fn the_reader_is_kept_off_the_cpu_the_simulation_runs_on_when_it_may_use_another() {
    let mine = allowed_cpus();
    let (kept_off, its) = kept_off_while_it_runs(allowed_cpus);
    match kept_off {
        Some(cpu) => {
            assert!(mine.contains(&cpu));
            let others: Vec<usize> = mine.into_iter().filter(|&c| c != cpu).collect();
            assert_eq!(its, others);
        }
        // One CPU to run on: the thread keeps it.
        None => {
            assert_eq!(mine.len(), 1);
            assert_eq!(its, mine);
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_reader_under_way_may_run_wherever_the_process_may() {
    let (kept_off, (while_kept_off, after)) = kept_off_while_it_runs(|| {
        let kept_off = allowed_cpus();
        run_where_the_process_may();
        (kept_off, allowed_cpus())
    });
    // The process's main thread is not this test's: its CPUs are what the thread gets back.
    let process = std::fs::read_to_string("/proc/self/status").unwrap();
    let listed = process
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(cpu_list(&after), listed);
    if let Some(cpu) = kept_off {
        assert!(!while_kept_off.contains(&cpu));
    }
}

/// `cpus` as the kernel lists them: ranges joined by commas ("0-3,6").
#[cfg(target_os = "linux")]
fn cpu_list(cpus: &[usize]) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    let text: Vec<String> = ranges
        .iter()
        .map(|&(a, b)| match a == b {
            true => a.to_string(),
            false => format!("{a}-{b}"),
        })
        .collect();
    text.join(",")
}

#[test]
fn a_run_that_stops_taking_rows_stops_the_reader_and_a_scan_judges_the_rest() {
    // Far more rows than the reader reads ahead: it is blocked on a full channel when the
    // run stops, and must still end.
    let mut text = sorted_trace(4_000).join("\n");
    text.push_str("\n{\"timestamp\": 9e9, \"input_length\": 5, \"hash_ids\": [1]}\n");
    let (_dir, path) = trace_file(&text);
    let before = trace_opens();
    let mut rows = ReadAhead::start(&path, 512, 1.0, RowOrder::Time, 16).unwrap();
    assert_eq!(rows.by_ref().take(10).count(), 10);
    let error = rows.finish().err().expect("the last row is invalid");
    assert!(
        error.ends_with(":4001: field `output_length`: missing"),
        "{error}"
    );
    assert_eq!(trace_opens() - before, 2, "the pass, then the scan");
}

#[test]
fn an_unsorted_trace_runs_again_in_time_order_and_a_closed_loop_stands() {
    let rows = [
        r#"{"timestamp": 50, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
        r#"{"timestamp": 10, "input_length": 5, "output_length": 1, "hash_ids": [2]}"#,
    ];
    let (_dir, path) = trace_file(&rows.join("\n"));
    let mut open = ReadAhead::start(&path, 512, 1.0, RowOrder::Time, 16).unwrap();
    assert_eq!(
        open.by_ref().count(),
        1,
        "the pass stops at the row out of order"
    );
    let Ok(PassEnd::RunAgain(sorted)) = open.finish().map(|j| j.end) else {
        panic!("an unsorted trace runs again");
    };
    let order: Vec<(u64, u64)> = sorted
        .map(|r| (r.spec.row, r.spec.arrival.as_ns()))
        .collect();
    assert_eq!(order, [(1, 0), (0, 40_000_000)]);
    let mut closed = ReadAhead::start(&path, 512, 1.0, RowOrder::File, 16).unwrap();
    assert_eq!(
        closed.by_ref().count(),
        2,
        "file order, whatever the timestamps"
    );
    assert!(matches!(
        closed.finish().map(|j| j.end),
        Ok(PassEnd::Stands)
    ));
}
