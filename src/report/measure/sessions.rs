//! Session and prefix-cache figures per class: sessions started and completed, turns per
//! session, session durations, the TTFT of first and later turns, and the cache hit rate.
//!
//! Definitions (docs/sessions.md):
//! - A session belongs to its first turn's class; a turn's own latencies count in its own
//!   class (a trace's turn may ask for another class than its session's first).
//! - **Started**: sessions whose first turn is among the measured requests (after warmup).
//!   **Completed**: started sessions all of whose turns completed.
//! - **Turns per session**: turns that arrived, over started sessions.
//! - **Session duration**: a completed session's first arrival to its last completion.
//! - **Cache hit**: reused over input tokens of the class's completed requests (Dynamo's
//!   `prefix_cache_reused_ratio`), sessions or not.

use super::latency::LatencyStats;
use crate::sim::{RequestRecord, Status};
use crate::time::SimTime;
use std::collections::BTreeMap;

/// One class's session and cache counts.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub started: u64,
    pub completed: u64,
    /// Turns that arrived, of the started sessions.
    pub turns: u64,
    /// Prompt tokens of the class's completed requests.
    pub input_tokens: u64,
    /// The part of `input_tokens` the prefix cache served.
    pub reused_input_tokens: u64,
}

impl SessionCounts {
    /// Turns per started session (`None` without sessions).
    pub fn turns_per_session_mean(&self) -> Option<f64> {
        (self.started > 0).then(|| self.turns as f64 / self.started as f64)
    }

    /// Reused over input tokens of completed requests (`None` without completed input).
    pub fn cache_hit(&self) -> Option<f64> {
        (self.input_tokens > 0).then(|| self.reused_input_tokens as f64 / self.input_tokens as f64)
    }

    /// The counts of several classes together.
    pub fn sum<'a>(counts: impl IntoIterator<Item = &'a SessionCounts>) -> SessionCounts {
        counts
            .into_iter()
            .fold(SessionCounts::default(), |a, b| SessionCounts {
                started: a.started + b.started,
                completed: a.completed + b.completed,
                turns: a.turns + b.turns,
                input_tokens: a.input_tokens + b.input_tokens,
                reused_input_tokens: a.reused_input_tokens + b.reused_input_tokens,
            })
    }
}

/// A session as its measured records show it.
struct Tally {
    class: Option<usize>,
    turns: u32,
    first_arrival: Option<SimTime>,
    arrived: u64,
    completed: u64,
    last_end: SimTime,
}

/// One class's session figures: its counts and its first-turn, follow-up and session
/// latencies.
pub(super) struct SessionFigures {
    pub counts: SessionCounts,
    pub first_turn_ttft: LatencyStats,
    pub followup_ttft: LatencyStats,
    pub session: LatencyStats,
}

/// The [`SessionFigures`] of each of `class_count` classes, from the measured `records`.
pub(super) fn session_figures(
    records: &[RequestRecord],
    class_count: usize,
) -> Vec<SessionFigures> {
    let mut counts = vec![SessionCounts::default(); class_count];
    let mut first_ttft = vec![Vec::new(); class_count];
    let mut followup_ttft = vec![Vec::new(); class_count];
    let mut sessions: BTreeMap<u32, Tally> = BTreeMap::new();
    for r in records {
        let class = r.class().filter(|&c| c < class_count);
        let completed = matches!(r.status, Status::Completed);
        if let (Some(c), true) = (class, completed) {
            counts[c].input_tokens += u64::from(r.input_tokens);
            counts[c].reused_input_tokens += u64::from(r.reused_input_tokens.min(r.input_tokens));
        }
        let Some(tag) = r.session() else {
            continue;
        };
        let ttft = r.first_token.filter(|_| completed);
        if let (Some(c), Some(first_token)) = (class, ttft) {
            let samples = if tag.turn == 0 {
                &mut first_ttft
            } else {
                &mut followup_ttft
            };
            samples[c].push(first_token.saturating_since(r.arrival).as_ns());
        }
        let tally = sessions.entry(tag.index).or_insert(Tally {
            class: None,
            turns: tag.turns,
            first_arrival: None,
            arrived: 0,
            completed: 0,
            last_end: SimTime::ZERO,
        });
        if tag.turn == 0 {
            (tally.class, tally.first_arrival) = (class, Some(r.arrival));
        }
        tally.arrived += 1;
        if let (true, Some(end)) = (completed, r.completion) {
            tally.completed += 1;
            tally.last_end = tally.last_end.max(end);
        }
    }
    let mut durations = vec![Vec::new(); class_count];
    for tally in sessions.values() {
        let (Some(c), Some(start)) = (tally.class, tally.first_arrival) else {
            continue; // its first turn was not measured (warmup) or resolved no class
        };
        let counts = &mut counts[c];
        counts.started += 1;
        counts.turns += tally.arrived;
        if tally.completed == u64::from(tally.turns) {
            counts.completed += 1;
            durations[c].push(tally.last_end.saturating_since(start).as_ns());
        }
    }
    (counts.into_iter().enumerate())
        .map(|(c, counts)| SessionFigures {
            counts,
            first_turn_ttft: LatencyStats::from_values(std::mem::take(&mut first_ttft[c])),
            followup_ttft: LatencyStats::from_values(std::mem::take(&mut followup_ttft[c])),
            session: LatencyStats::from_values(std::mem::take(&mut durations[c])),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::report::measure::latency::Stat;
    use crate::report::measure::metrics::{LatencyKind, RunMetrics};
    use crate::report::test_support::{done, ms, rejected, result_of, turn};
    use crate::scheduling::scheduler::DispatchPath::Immediate;

    /// Session 0 (class 0): turns at 0-10 and 110-115 ms (think 100), 100 input tokens each,
    /// the second reusing 80. Session 1 (class 0): a turn at 20-50, then a rejected one.
    /// A plain request of class 1 at 5-45. Session 2 (class 1): one completed turn of two.
    fn records() -> Vec<crate::sim::RequestRecord> {
        let mut reused = turn(done(1, 0, Immediate, [110, 110, 115]), 0, 1, 2);
        reused.reused_input_tokens = 80;
        let mut refused = turn(done(4, 0, Immediate, [60, 60, 60]), 1, 1, 2);
        refused.status = rejected();
        vec![
            turn(done(0, 0, Immediate, [0, 0, 10]), 0, 0, 2),
            reused,
            done(2, 1, Immediate, [5, 5, 45]),
            turn(done(3, 0, Immediate, [20, 20, 50]), 1, 0, 2),
            refused,
            turn(done(5, 1, Immediate, [30, 30, 40]), 2, 0, 2),
        ]
    }

    #[test]
    fn sessions_count_by_their_first_turns_class_and_complete_when_every_turn_did() {
        let m = RunMetrics::compute(&result_of(&["chat", "batch"], records()), &[1, 1]);
        let (chat, batch) = (&m.classes[0], &m.classes[1]);
        assert_eq!((chat.sessions.started, chat.sessions.completed), (2, 1));
        assert_eq!(chat.sessions.turns_per_session_mean(), Some(2.0));
        assert_eq!((batch.sessions.started, batch.sessions.completed), (1, 0));
        assert_eq!(
            batch.sessions.turns_per_session_mean(),
            Some(1.0),
            "one turn ran"
        );
        let session = chat.latencies.of(LatencyKind::Session);
        assert_eq!(
            (session.count, session.get(Stat::Max)),
            (1, Some(ms(115).as_ns()))
        );
    }

    #[test]
    fn first_and_later_turns_have_their_own_ttft_and_plain_requests_neither() {
        let m = RunMetrics::compute(&result_of(&["chat", "batch"], records()), &[1, 1]);
        let chat = &m.classes[0].latencies;
        let ms_of = |ns: Option<u64>| ns.map(|ns| ns / 1_000_000);
        assert_eq!(chat.first_turn_ttft.count, 2);
        assert_eq!(ms_of(chat.first_turn_ttft.get(Stat::Max)), Some(30));
        assert_eq!(chat.followup_ttft.count, 1, "the rejected turn has no TTFT");
        assert_eq!(ms_of(chat.followup_ttft.get(Stat::P50)), Some(5));
        let batch = &m.classes[1].latencies;
        assert_eq!(
            batch.first_turn_ttft.count, 1,
            "the plain request is no first turn"
        );
        assert_eq!(batch.ttft.count, 2);
    }

    #[test]
    fn cache_hit_is_reused_over_input_tokens_of_completed_requests() {
        let m = RunMetrics::compute(&result_of(&["chat", "batch"], records()), &[1, 1]);
        // chat completed three requests of 100 tokens (the rejected one does not count).
        assert_eq!(m.classes[0].sessions.cache_hit(), Some(80.0 / 300.0));
        assert_eq!(m.classes[1].sessions.cache_hit(), Some(0.0));
        let none = RunMetrics::compute(&result_of(&["chat"], Vec::new()), &[1]);
        assert_eq!(none.classes[0].sessions.cache_hit(), None);
    }
}
