//! Session traces: a mooncake trace whose rows are turns of sessions, grouped and put in time
//! as Dynamo 1.6.1's loader does (docs/sessions.md gives the rules and their errors).
//!
//! Every row is a turn of a session: of its `session_id`, or of its own one-turn session
//! `request_<line>` when it has none. A session's turns are its rows in file order; its first
//! turn arrives at its timestamp (rebased, divided by the speed-up), each later one a think
//! time after the turn before it ends. The run's feed releases the later turns
//! (`sim::feed`); this module only reads them.

use super::session::{LaterTurn, SessionTag, SessionTurn};
use super::trace::{TraceError, TraceReader, TraceRow};
use super::{Arrival, RequestSpec};
use crate::bounds::{MAX_SESSION_TURNS, number};
use crate::time::{MAX_INPUT_NS, NS_PER_MS, SimDuration, SimTime};
use std::collections::VecDeque;
use std::io::BufRead;
use std::sync::Arc;

/// How a session trace is replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SessionMode {
    /// An open loop: sessions start at their timestamps; timestamps and think times are
    /// divided by `speedup_ratio`.
    Trace { speedup_ratio: f64 },
    /// A closed loop: sessions start in file order as slots free up; timestamps are unused
    /// and think times are as written (Dynamo 1.6.1 ignores the speed-up there).
    ClosedLoop,
}

/// One session as the loader gathers it.
struct Gathered {
    id: Arc<str>,
    /// Some row names the session (`session_id`): its records say so.
    named: bool,
    /// The first turn's row names it.
    first_named: bool,
    /// The first turn, and its timestamp.
    first: RequestSpec,
    first_timestamp_ms: Option<f64>,
    first_line: usize,
    /// The later turns, each with its think time (divided by the speed-up).
    later: VecDeque<LaterTurn>,
    /// The session's latest timestamp so far: what an inferred delay is measured from.
    last_timestamp_ms: Option<f64>,
}

/// Reads every row of `reader` and returns the trace's arrivals: each session's first turn
/// (with the rest of its session behind it), in the order the run takes them (by start time
/// and then first appearance for an open loop; in first appearance for a closed loop). An
/// error names the line and field, with Dynamo 1.6.1's words where it refuses the same row.
pub fn read_sessions<R: BufRead>(
    mut reader: TraceReader<R>,
    mode: SessionMode,
) -> Result<Vec<Arrival>, TraceError> {
    let ratio = match mode {
        SessionMode::Trace { speedup_ratio } => speedup_ratio,
        SessionMode::ClosedLoop => 1.0,
    };
    let mut sessions: Vec<Gathered> = Vec::new();
    let mut by_id: rustc_hash::FxHashMap<String, usize> = Default::default();
    while let Some(row) = reader.next_row() {
        let row = row?;
        let named = row.session_id.is_some();
        let id = row
            .session_id
            .clone()
            .unwrap_or_else(|| format!("request_{}", row.line));
        match by_id.get(&id) {
            Some(&index) => add_later_turn(&reader, &mut sessions[index], row, ratio)?,
            None => {
                by_id.insert(id.clone(), sessions.len());
                sessions.push(first_turn(&reader, id, named, row)?);
            }
        }
    }
    let chained = match mode {
        SessionMode::Trace { .. } => sessions.iter().any(|s| !s.later.is_empty()),
        SessionMode::ClosedLoop => true,
    };
    let starts = start_times(&reader, &sessions, mode)?;
    let mut arrivals: Vec<Arrival> = (sessions.into_iter().zip(starts).enumerate())
        .map(|(index, (session, start))| {
            let index = u32::try_from(index).expect("sessions are bounded by the rows of a run");
            session_arrival(session, index, start, chained)
        })
        .collect();
    if let SessionMode::Trace { .. } = mode {
        // Stable: sessions starting together keep their order of first appearance.
        arrivals.sort_by_key(|a| a.spec.arrival);
    }
    Ok(arrivals)
}

/// An error about the row on `line`.
fn error_at<R: BufRead>(
    reader: &TraceReader<R>,
    line: usize,
    field: &str,
    message: String,
) -> TraceError {
    let mut e = reader.error(Some(field), message);
    e.line = line;
    e
}

/// A new session, `row` its first turn.
fn first_turn<R: BufRead>(
    reader: &TraceReader<R>,
    id: String,
    named: bool,
    row: TraceRow,
) -> Result<Gathered, TraceError> {
    if row.delay_ms.is_some_and(|ms| ms != 0.0) {
        let message = format!(
            "trace line {} sets delay on the first turn of session {id}",
            row.line
        );
        return Err(error_at(reader, row.line, "delay", message));
    }
    Ok(Gathered {
        id: id.into(),
        named,
        first_named: named,
        first: row.spec,
        first_timestamp_ms: row.timestamp_ms,
        first_line: row.line,
        later: VecDeque::new(),
        last_timestamp_ms: row.timestamp_ms,
    })
}

/// `row` as `session`'s next turn, with its think time divided by `ratio`: its `delay`;
/// else its timestamp less the session's latest one; else none.
fn add_later_turn<R: BufRead>(
    reader: &TraceReader<R>,
    session: &mut Gathered,
    row: TraceRow,
    ratio: f64,
) -> Result<(), TraceError> {
    let line = row.line;
    let named = row.session_id.is_some();
    session.named |= named;
    if session.later.len() as u64 + 1 >= MAX_SESSION_TURNS {
        let message = format!(
            "session {} has more than {MAX_SESSION_TURNS} turns, the most a session may have",
            session.id
        );
        return Err(error_at(reader, line, "session_id", message));
    }
    let (field, delay_ms) = match (row.delay_ms, row.timestamp_ms) {
        (Some(_), Some(_)) => {
            // Dynamo 1.6.1 silently ignores the timestamp; a trace that gives both most
            // likely means one of them, and routersim will not guess which.
            let message = "a later turn of a session gives `delay` or `timestamp`, not both \
                           (Dynamo 1.6.1 would ignore the timestamp)";
            return Err(error_at(reader, line, "delay", message.to_string()));
        }
        (Some(delay_ms), None) => ("delay", delay_ms),
        (None, Some(timestamp_ms)) => {
            let Some(previous_ms) = session.last_timestamp_ms else {
                let message = format!(
                    "trace line {line} for session {} cannot infer delay without a previous timestamp",
                    session.id
                );
                return Err(error_at(reader, line, "timestamp", message));
            };
            session.last_timestamp_ms = Some(timestamp_ms);
            ("timestamp", timestamp_ms - previous_ms)
        }
        (None, None) => ("delay", 0.0),
    };
    if !(delay_ms.is_finite() && delay_ms >= 0.0) {
        let message = format!("trace line {line} has invalid delay {}", number(delay_ms));
        return Err(error_at(reader, line, field, message));
    }
    let Some(ns) = ns_within_bound(delay_ms / ratio) else {
        let message = format!(
            "a think time of {delay_ms:e} ms is more than {} ms (about 146 years), the latest time routersim simulates",
            MAX_INPUT_NS / NS_PER_MS
        );
        return Err(error_at(reader, line, field, message));
    };
    let delay = SimDuration::from_ns(ns);
    session.later.push_back(LaterTurn {
        spec: row.spec,
        delay,
        named,
    });
    Ok(())
}

/// Milliseconds as whole nanoseconds (rounded to the nearest), if within the time bound.
fn ns_within_bound(ms: f64) -> Option<u64> {
    let ns = (ms * NS_PER_MS as f64).round();
    (ns <= MAX_INPUT_NS as f64).then_some(ns as u64)
}

/// When each session starts: in an open loop its first timestamp less the earliest one,
/// divided by the speed-up (every named session's first turn must have one; a plain row
/// without one is at 0, as in a plain trace); in a closed loop, whenever a slot frees (0
/// here: the feed sets it).
fn start_times<R: BufRead>(
    reader: &TraceReader<R>,
    sessions: &[Gathered],
    mode: SessionMode,
) -> Result<Vec<SimTime>, TraceError> {
    let SessionMode::Trace { speedup_ratio } = mode else {
        return Ok(vec![SimTime::ZERO; sessions.len()]);
    };
    if let Some(s) = sessions
        .iter()
        .find(|s| s.named && s.first_timestamp_ms.is_none())
    {
        let message = format!(
            "trace mode requires first_arrival_timestamp_ms for session {}",
            s.id
        );
        return Err(error_at(reader, s.first_line, "timestamp", message));
    }
    let first_ms = |s: &Gathered| s.first_timestamp_ms.unwrap_or(0.0);
    let origin_ms = sessions.iter().map(first_ms).fold(f64::INFINITY, f64::min);
    let mut starts = Vec::with_capacity(sessions.len());
    for s in sessions {
        let ms = first_ms(s);
        let Some(ns) = ns_within_bound((ms - origin_ms) / speedup_ratio) else {
            let message = format!(
                "{ms} ms is more than {} ms (about 146 years) after the earliest session's start, {origin_ms} ms, once divided by the arrival speed-up ratio {speedup_ratio}",
                MAX_INPUT_NS / NS_PER_MS
            );
            return Err(error_at(reader, s.first_line, "timestamp", message));
        };
        starts.push(SimTime::from_ns(ns));
    }
    Ok(starts)
}

/// The arrival of `session`'s first turn at `start`. `chained`: the run replays sessions as
/// sessions (see [`SessionTag::chained`]).
fn session_arrival(session: Gathered, index: u32, start: SimTime, chained: bool) -> Arrival {
    let turns = 1 + session.later.len() as u32;
    let tag = (session.named || turns > 1).then_some(SessionTag {
        index,
        id: session.id,
        turn: 0,
        turns,
        chained,
        named: session.first_named,
    });
    let mut spec = session.first;
    spec.arrival = start;
    let later = session.later;
    Arrival {
        spec,
        hashes: None,
        session: Some(Box::new(SessionTurn { index, tag, later })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(fields: &str) -> String {
        format!(r#"{{{fields}, "input_length": 5, "output_length": 1, "hash_ids": [1]}}"#)
    }

    fn load(lines: &[String], mode: SessionMode) -> Result<Vec<Arrival>, String> {
        let text = lines.join("\n");
        let reader = TraceReader::new(text.as_bytes(), "s.jsonl", 512);
        read_sessions(reader, mode).map_err(|e| e.to_string())
    }

    const OPEN: SessionMode = SessionMode::Trace { speedup_ratio: 1.0 };

    /// A session as (first turn's row, start ns, later turns' (row, delay ns)).
    type Shape = (u64, u64, Vec<(u64, u64)>);

    /// Each session's shape, in run order.
    fn shape(arrivals: &[Arrival]) -> Vec<Shape> {
        arrivals
            .iter()
            .map(|a| {
                let later = a.session.as_ref().unwrap().later.iter();
                let later = later.map(|t| (t.spec.row, t.delay.as_ns())).collect();
                (a.spec.row, a.spec.arrival.as_ns(), later)
            })
            .collect()
    }

    #[test]
    fn rows_group_by_session_over_the_whole_file_and_starts_sort_by_time() {
        let lines = [
            row(r#""session_id": "a", "timestamp": 50"#),
            row(r#""session_id": "b", "timestamp": 10"#),
            row(r#""session_id": "a", "delay": 3"#),
            row(r#""timestamp": 20"#),
            row(r#""session_id": "b""#),
        ];
        let arrivals = load(&lines, OPEN).unwrap();
        assert_eq!(
            shape(&arrivals),
            [
                (1, 0, vec![(4, 0)]),
                (3, 10_000_000, vec![]),
                (0, 40_000_000, vec![(2, 3_000_000)]),
            ]
        );
        let tag = |a: &Arrival| a.session.as_ref().unwrap().tag.clone();
        assert_eq!(tag(&arrivals[1]), None, "a plain row names no session");
        let a = tag(&arrivals[2]).unwrap();
        assert_eq!((&*a.id, a.turns, a.chained, a.index), ("a", 2, true, 0));
    }

    #[test]
    fn an_inferred_delay_counts_from_the_sessions_latest_timestamp() {
        let lines = [
            row(r#""session_id": "a", "timestamp": 10"#),
            row(r#""session_id": "a", "delay": 3"#),
            row(r#""session_id": "a", "timestamp": 40"#),
        ];
        let arrivals = load(&lines, OPEN).unwrap();
        assert_eq!(
            shape(&arrivals),
            [(0, 0, vec![(1, 3_000_000), (2, 30_000_000)])]
        );
    }

    #[test]
    fn a_speedup_divides_starts_and_think_times_and_a_closed_loop_ignores_both() {
        let lines = [
            row(r#""session_id": "a", "timestamp": 0"#),
            row(r#""session_id": "a", "delay": 10"#),
            row(r#""session_id": "b", "timestamp": 50"#),
        ];
        let fast = load(&lines, SessionMode::Trace { speedup_ratio: 4.0 }).unwrap();
        assert_eq!(
            shape(&fast),
            [(0, 0, vec![(1, 2_500_000)]), (2, 12_500_000, vec![])]
        );
        let closed = load(&lines, SessionMode::ClosedLoop).unwrap();
        assert_eq!(
            shape(&closed),
            [(0, 0, vec![(1, 10_000_000)]), (2, 0, vec![])]
        );
    }

    #[test]
    fn a_row_naming_a_plain_rows_implicit_session_joins_it() {
        let lines = [
            row(r#""timestamp": 0"#),
            row(r#""session_id": "request_1", "timestamp": 5"#),
        ];
        let arrivals = load(&lines, OPEN).unwrap();
        assert_eq!(shape(&arrivals), [(0, 0, vec![(1, 5_000_000)])]);
        let tag = arrivals[0].session.as_ref().unwrap().tag.clone().unwrap();
        assert!(!tag.named, "the plain row's own record names no session");
    }

    #[test]
    fn only_sessions_of_several_turns_are_replayed_as_sessions() {
        let lines = [row(r#""session_id": "a", "timestamp": 0"#)];
        let tag = |mode| {
            let arrivals = load(&lines, mode).unwrap();
            arrivals[0].session.as_ref().unwrap().tag.clone().unwrap()
        };
        assert!(!tag(OPEN).chained);
        assert!(tag(SessionMode::ClosedLoop).chained);
    }

    #[test]
    fn bad_session_rows_give_dynamos_words_with_line_and_field() {
        let cases = [
            (
                vec![row(r#""session_id": "a", "timestamp": 0, "delay": 2"#)],
                "s.jsonl:1: field `delay`: trace line 1 sets delay on the first turn of session a",
            ),
            (
                vec![
                    row(r#""session_id": "a", "timestamp": 100"#),
                    row(r#""session_id": "a", "timestamp": 50"#),
                ],
                "s.jsonl:2: field `timestamp`: trace line 2 has invalid delay -50",
            ),
            (
                vec![
                    row(r#""session_id": "a", "timestamp": 0"#),
                    row(r#""session_id": "a", "delay": -1"#),
                ],
                "s.jsonl:2: field `delay`: trace line 2 has invalid delay -1",
            ),
            (
                vec![
                    row(r#""session_id": "b", "timestamp": 0"#),
                    row(r#""session_id": "a""#),
                    row(r#""session_id": "a", "timestamp": 7"#),
                ],
                "s.jsonl:3: field `timestamp`: trace line 3 for session a cannot infer delay without a previous timestamp",
            ),
            (
                vec![row(r#""timestamp": 0"#), row(r#""session_id": "a""#)],
                "s.jsonl:2: field `timestamp`: trace mode requires first_arrival_timestamp_ms for session a",
            ),
            (
                vec![
                    row(r#""session_id": "a", "timestamp": 0"#),
                    row(r#""session_id": "a", "timestamp": 5, "delay": 1"#),
                ],
                "s.jsonl:2: field `delay`: a later turn of a session gives `delay` or `timestamp`, not both",
            ),
            (
                vec![
                    row(r#""session_id": "a", "timestamp": 0"#),
                    row(r#""session_id": "a", "delay": 1e300"#),
                ],
                "s.jsonl:2: field `delay`: a think time of 1e300 ms is more than",
            ),
        ];
        for (lines, expected) in cases {
            let e = load(&lines, OPEN).unwrap_err();
            assert!(
                e.starts_with(expected),
                "{e}\nshould start with\n{expected}"
            );
        }
        // A closed loop needs no start times.
        let lines = [row(r#""session_id": "a""#)];
        assert!(load(&lines, SessionMode::ClosedLoop).is_ok());
    }

    #[test]
    fn a_session_may_have_at_most_the_turn_bound() {
        let turns = |n: u64| -> Vec<String> {
            let mut lines = vec![row(r#""session_id": "a", "timestamp": 0"#)];
            lines.extend((1..n).map(|_| row(r#""session_id": "a""#)));
            lines
        };
        assert!(load(&turns(MAX_SESSION_TURNS), OPEN).is_ok());
        let e = load(&turns(MAX_SESSION_TURNS + 1), OPEN).unwrap_err();
        assert!(
            e.contains("field `session_id`: session a has more than 10000 turns"),
            "{e}"
        );
    }

    /// One random row: a session (of three names, or none), maybe a timestamp, maybe a delay
    /// (either spelling), any of them possibly absurd.
    fn random_row() -> impl Strategy<Value = String> {
        let number = prop_oneof![-1e3f64..1e4, Just(0.0), Just(1e300), Just(-1e300)];
        (
            prop::option::of(prop_oneof![Just("a"), Just("b"), Just("request_1")]),
            prop::option::of(number.clone()),
            prop::option::of(number),
            any::<bool>(),
        )
            .prop_map(|(session, timestamp, delay, alias)| {
                let mut fields = Vec::new();
                if let Some(id) = session {
                    fields.push(format!(r#""session_id": "{id}""#));
                }
                if let Some(t) = timestamp {
                    fields.push(format!(r#""timestamp": {t:?}"#));
                }
                if let Some(d) = delay {
                    let key = if alias { "delay_ms" } else { "delay" };
                    fields.push(format!(r#""{key}": {d:?}"#));
                }
                match fields.is_empty() {
                    true => row(r#""priority": 0"#),
                    false => row(&fields.join(", ")),
                }
            })
    }

    proptest! {
        /// Any sequence of session rows loads or is refused with an error, never a panic, in
        /// every mode; what loads has every row once, first turns in time order.
        #[test]
        fn any_session_rows_load_or_are_refused(
            lines in prop::collection::vec(random_row(), 1..12),
            ratio in prop_oneof![Just(1.0), Just(2.5), Just(0.001)],
            closed in any::<bool>(),
        ) {
            let mode = match closed {
                true => SessionMode::ClosedLoop,
                false => SessionMode::Trace { speedup_ratio: ratio },
            };
            if let Ok(arrivals) = load(&lines, mode) {
                let rows: usize = arrivals
                    .iter()
                    .map(|a| 1 + a.session.as_ref().map_or(0, |s| s.later.len()))
                    .sum();
                prop_assert_eq!(rows, lines.len());
                if !closed {
                    let starts: Vec<SimTime> = arrivals.iter().map(|a| a.spec.arrival).collect();
                    prop_assert!(starts.is_sorted());
                }
            }
        }
    }
}
