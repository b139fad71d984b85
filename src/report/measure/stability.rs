//! Stability: whether an open-loop run kept up with its offered load during the arrival
//! window, judged from a measured trend (docs/planning.md, "Stability").
//!
//! The arrival window runs from the first to the last arrival and is split in halves at its
//! midpoint. A request is *in the system* from its arrival until it ends (completes, is
//! rejected or aborted); a request still pending when the run stopped never ends. The run is
//! **overloaded** when either
//! - the mean number of requests in the system over the second half exceeds the first half's
//!   by more than [`GROWTH_RATIO`]× *and* by more than the slack, or
//! - the completions in the second half fall short of the arrivals in it by more than
//!   [`SERVED_SHORTFALL_FRAC`] of them *and* by more than the slack,
//!
//! where the slack is `max(`[`MIN_SLACK_REQUESTS`]`, `[`SLACK_CAPACITY_FRAC`]` × capacity)`
//! requests and the capacity is the workers' total `max_num_seqs` (every rank's batch): a
//! system filling its batches holds more requests without falling behind. Fewer than
//! [`MIN_REQUESTS`] requests, or an arrival window shorter than [`MIN_WINDOW_SERVICES`] times
//! the fastest completed request's end-to-end latency (a burst: no steady state to judge), is
//! too short to judge. Every figure is a pure function of the records (integer nanoseconds).
//!
//! A session is one arrival: its later turns are the same client coming back, not new load.
//! It is in the system from its first turn's arrival until its last turn ends (think times
//! included), and it is served when every turn completed. A request outside a session is a
//! session of one. Sessions fill the system over their own length, which is a warm-up and not
//! a backlog, so with sessions the first half's mean starts one median session duration into
//! the window (a window whose first half that ramp covers is too short to judge).

use std::collections::BTreeMap;

use crate::bounds::number;
use crate::sim::{EndStatus, RequestRecord, Status};
use crate::time::{SimDuration, SimTime};

/// The second half's mean in-system count must exceed the first's by this factor.
pub const GROWTH_RATIO: f64 = 1.5;
/// The served shortfall, as a fraction of the second half's arrivals.
pub const SERVED_SHORTFALL_FRAC: f64 = 0.1;
/// The smallest slack, in requests, for either test.
pub const MIN_SLACK_REQUESTS: f64 = 2.0;
/// The slack as a fraction of the workers' total `max_num_seqs`.
pub const SLACK_CAPACITY_FRAC: f64 = 0.1;
/// Fewer requests than this are too short to judge.
pub const MIN_REQUESTS: u64 = 50;
/// The arrival window must span this many of the fastest request's end-to-end latency.
pub const MIN_WINDOW_SERVICES: u64 = 10;

/// The stability measurements of a run and the verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stability {
    /// `Some(true)` overloaded, `Some(false)` kept up, `None` too short to judge.
    pub overloaded: Option<bool>,
    /// Why there is no verdict, when there is none.
    pub reason: Option<String>,
    /// First and last arrival (zero for a run without requests).
    pub window_start: SimTime,
    pub window_end: SimTime,
    /// Mean requests in the system over each half of the arrival window.
    pub in_system_first_half: f64,
    pub in_system_second_half: f64,
    /// Arrivals and completions per second over the second half of the arrival window.
    pub offered_rps: f64,
    pub served_rps: f64,
    /// Arrivals and completions in the second half (what the rates count).
    pub arrivals_second_half: u64,
    pub completions_second_half: u64,
    /// The workers' total `max_num_seqs` the slack is based on (0: unknown).
    pub capacity_seqs: u64,
    /// The shortest end-to-end latency of a completed request, in ns (0: none completed).
    pub fastest_e2e_ns: u64,
    /// The median duration of a completed session of several turns, in ns (0: none): the
    /// warm-up the first half's mean leaves out.
    pub session_ramp_ns: u64,
    requests: u64,
}

impl Stability {
    /// Measures `records` against a capacity of `capacity_seqs` sequences (0 when unknown:
    /// the slack is then [`MIN_SLACK_REQUESTS`]).
    pub fn measure(records: &[RequestRecord], capacity_seqs: u64) -> Stability {
        let visits = visits(records);
        let window_start = visits.iter().map(|v| v.arrival).min();
        let window_end = visits.iter().map(|v| v.arrival).max();
        let (Some(start), Some(end)) = (window_start, window_end) else {
            return Stability::default().with_capacity(capacity_seqs);
        };
        let mid = SimTime::from_ns(start.as_ns() + (end.as_ns() - start.as_ns()) / 2);
        let ramp = session_ramp(&visits);
        let in_second = |t: SimTime| t >= mid && t <= end;
        let arrivals_second_half = visits.iter().filter(|v| in_second(v.arrival)).count() as u64;
        let completions_second_half = visits
            .iter()
            .filter(|v| v.status == EndStatus::Completed)
            .filter(|v| v.end.is_some_and(in_second))
            .count() as u64;
        let requests = visits.len() as u64;
        // Only its means are kept: a plot draws the curve again from the records
        // ([`in_system_curve`]), and a million requests' curve is 32 MB.
        let curve = curve_of(visits);
        let half_s = (end.as_ns() - mid.as_ns()) as f64 / 1e9;
        Stability {
            overloaded: None,
            reason: None,
            window_start: start,
            window_end: end,
            in_system_first_half: mean_over(&curve, start.saturating_add(ramp), mid),
            in_system_second_half: mean_over(&curve, mid, end),
            offered_rps: rate(arrivals_second_half, half_s),
            served_rps: rate(completions_second_half, half_s),
            arrivals_second_half,
            completions_second_half,
            capacity_seqs,
            fastest_e2e_ns: fastest_e2e_ns(records),
            session_ramp_ns: ramp.as_ns(),
            requests,
        }
        .with_capacity(capacity_seqs)
    }

    /// The same measurements judged against a capacity of `capacity_seqs` sequences.
    pub fn with_capacity(mut self, capacity_seqs: u64) -> Stability {
        self.capacity_seqs = capacity_seqs;
        self.reason = self.too_short();
        self.overloaded = match self.reason {
            Some(_) => None,
            None => Some(self.grew() || self.fell_behind()),
        };
        self
    }

    /// The slack, in requests, that either test must exceed.
    pub fn slack_requests(&self) -> f64 {
        MIN_SLACK_REQUESTS.max(SLACK_CAPACITY_FRAC * self.capacity_seqs as f64)
    }

    /// The midpoint of the arrival window.
    pub fn window_mid(&self) -> SimTime {
        let span_ns = self.window_end.as_ns() - self.window_start.as_ns();
        SimTime::from_ns(self.window_start.as_ns() + span_ns / 2)
    }

    fn too_short(&self) -> Option<String> {
        if self.requests < MIN_REQUESTS {
            let n = self.requests;
            return Some(format!(
                "too short to judge: {n} requests, fewer than {MIN_REQUESTS}"
            ));
        }
        let window_ns = self.window_end.as_ns() - self.window_start.as_ns();
        if self.session_ramp_ns > 0 && 2 * self.session_ramp_ns >= window_ns {
            return Some(format!(
                "too short to judge: sessions last {} ms (median), half the arrival window \
                 ({} ms) or more: the system is still filling with sessions",
                number(self.session_ramp_ns as f64 / 1e6),
                number(window_ns as f64 / 1e6)
            ));
        }
        let needed_ns = MIN_WINDOW_SERVICES * self.fastest_e2e_ns;
        if window_ns == 0 || window_ns < needed_ns {
            return Some(format!(
                "too short to judge: the arrival window ({} ms) spans fewer than \
                 {MIN_WINDOW_SERVICES} times the fastest request ({} ms): a burst",
                number(window_ns as f64 / 1e6),
                number(self.fastest_e2e_ns as f64 / 1e6)
            ));
        }
        None
    }

    /// Requests in the system grew from the first half to the second.
    fn grew(&self) -> bool {
        let (first, second) = (self.in_system_first_half, self.in_system_second_half);
        second > GROWTH_RATIO * first && second - first > self.slack_requests()
    }

    /// Completions in the second half fell short of its arrivals.
    fn fell_behind(&self) -> bool {
        let arrived = self.arrivals_second_half as f64;
        let shortfall = arrived - self.completions_second_half as f64;
        shortfall > SERVED_SHORTFALL_FRAC * arrived && shortfall > self.slack_requests()
    }

    /// The warning `run` and `check` print for an overloaded run; `None` otherwise. It says
    /// which test found the overload: a run whose completions fell behind while fewer requests
    /// stayed in the system (many ended unserved) did not grow.
    pub fn warning(&self) -> Option<String> {
        let first = number(self.in_system_first_half);
        let second = number(self.in_system_second_half);
        let served = format!(
            "served {} of {} req/s offered",
            number(self.served_rps),
            number(self.offered_rps)
        );
        (self.overloaded == Some(true)).then(|| match self.grew() {
            true => format!(
                "warning: overloaded: requests in the system grew from {first} to {second} \
                 (mean, first vs second half of the arrival window); {served}"
            ),
            false => format!(
                "warning: overloaded: completions fell behind arrivals: {served} over the \
                 second half of the arrival window (requests in the system: {first}, then \
                 {second}, mean per half)"
            ),
        })
    }

    /// `overloaded`, `stable` or `too short to judge`, for titles.
    pub fn verdict(&self) -> &'static str {
        match self.overloaded {
            Some(true) => "overloaded",
            Some(false) => "stable",
            None => "too short to judge",
        }
    }
}

fn fastest_e2e_ns(records: &[RequestRecord]) -> u64 {
    records
        .iter()
        .filter(|r| r.status == Status::Completed)
        .filter_map(|r| {
            r.completion
                .map(|c| c.as_ns().saturating_sub(r.arrival.as_ns()))
        })
        .min()
        .unwrap_or(0)
}

/// The median duration of the completed sessions of several turns (zero without any).
fn session_ramp(visits: &[Visit]) -> SimDuration {
    let mut durations: Vec<u64> = visits
        .iter()
        .filter(|v| v.multi_turn && v.status == EndStatus::Completed)
        .filter_map(|v| v.end.map(|end| end.saturating_since(v.arrival).as_ns()))
        .collect();
    durations.sort_unstable();
    match durations.is_empty() {
        true => SimDuration::ZERO,
        false => SimDuration::from_ns(super::latency::nearest_rank(&durations, 50)),
    }
}

fn rate(count: u64, span_s: f64) -> f64 {
    if span_s <= 0.0 {
        return 0.0;
    }
    count as f64 / span_s
}

/// One client's stay: a request outside a session, or a whole session.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Visit {
    /// A session of several turns.
    multi_turn: bool,
    arrival: SimTime,
    /// When it left; `None` while some request of it is pending.
    end: Option<SimTime>,
    /// `Completed` when every request completed; otherwise the first other ending (a
    /// session that lost a turn to a fault ends with that turn).
    status: EndStatus,
}

/// The visits of `records`: each request outside a session, and each session (by its turns
/// that ran: one cut short by a fault ends with the turn that failed).
fn visits(records: &[RequestRecord]) -> Vec<Visit> {
    let mut visits = Vec::with_capacity(records.len());
    let mut sessions: BTreeMap<u32, (Visit, u32, u32)> = BTreeMap::new();
    for r in records {
        let ended = r.completion.filter(|_| r.status != Status::Pending);
        let visit = Visit {
            multi_turn: r.session().is_some_and(|tag| tag.turns > 1),
            arrival: r.arrival,
            end: ended.map(|end| end.max(r.arrival)),
            status: r.status.kind(),
        };
        let Some(tag) = r.session() else {
            visits.push(visit);
            continue;
        };
        let (session, seen, turns) = sessions.entry(tag.index).or_insert((visit, 0, tag.turns));
        *seen += 1;
        session.arrival = session.arrival.min(visit.arrival);
        session.end = session.end.zip(visit.end).map(|(a, b)| a.max(b));
        if session.status == EndStatus::Completed || visit.status == EndStatus::Pending {
            session.status = visit.status;
        }
        *turns = (*turns).max(*seen);
    }
    for (session, seen, turns) in sessions.into_values() {
        let cut_short = seen < turns && session.status == EndStatus::Completed;
        // Turns never sent: the run stopped before them (pending), or a fault ended it.
        let session = match cut_short {
            true => Visit {
                status: EndStatus::Pending,
                end: None,
                ..session
            },
            false => session,
        };
        visits.push(session);
    }
    visits
}

/// Requests in the system after every change: arrivals add one, ends take one away; changes
/// at one instant are merged, so the curve has one point per distinct time. A session counts
/// once, from its first arrival to its last end.
pub fn in_system_curve(records: &[RequestRecord]) -> Vec<(SimTime, u64)> {
    curve_of(visits(records))
}

/// Takes the visits, so that they are gone before the curve grows: with a million requests
/// the visits, the sorted instants and the curve are 24, 16 and up to 32 MB.
fn curve_of(visits: Vec<Visit>) -> Vec<(SimTime, u64)> {
    let mut arrivals: Vec<SimTime> = visits.iter().map(|v| v.arrival).collect();
    let mut ends: Vec<SimTime> = visits.iter().filter_map(|v| v.end).collect();
    drop(visits);
    arrivals.sort_unstable();
    ends.sort_unstable();
    // At most a point per instant, reserved at once: grown by doubling, a million requests'
    // curve left as much again behind in freed copies.
    let mut curve: Vec<(SimTime, u64)> = Vec::with_capacity(arrivals.len() + ends.len());
    let mut count = 0u64;
    let (mut a, mut e) = (arrivals.iter().peekable(), ends.iter().peekable());
    // A merge of the two sorted lists; at one instant every change is applied before the
    // point is written, so the order between an arrival and an end there does not matter.
    loop {
        let time = match (a.peek(), e.peek()) {
            (Some(&&t), Some(&&u)) => t.min(u),
            (Some(&&t), None) | (None, Some(&&t)) => t,
            (None, None) => break,
        };
        while a.next_if(|&&t| t == time).is_some() {
            count += 1;
        }
        while e.next_if(|&&t| t == time).is_some() {
            count -= 1;
        }
        curve.push((time, count));
    }
    curve
}

/// The time-weighted mean of the step `curve` over `[from, to)` (0 for an empty span).
fn mean_over(curve: &[(SimTime, u64)], from: SimTime, to: SimTime) -> f64 {
    if to <= from {
        return 0.0;
    }
    let mut area: u128 = 0;
    let mut level = curve
        .iter()
        .take_while(|(t, _)| *t <= from)
        .last()
        .map_or(0, |p| p.1);
    let mut at = from;
    for &(t, count) in curve.iter().filter(|(t, _)| *t > from && *t < to) {
        area += u128::from(level) * u128::from(t.as_ns() - at.as_ns());
        (level, at) = (count, t);
    }
    area += u128::from(level) * u128::from(to.as_ns() - at.as_ns());
    area as f64 / (to.as_ns() - from.as_ns()) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, ms};
    use crate::scheduling::scheduler::DispatchPath;

    /// `n` requests arriving every `gap` ms, each taking `service(i)` ms.
    fn run(n: u64, gap: u64, service: impl Fn(u64) -> u64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let arrival = i * gap;
                done(
                    i,
                    0,
                    DispatchPath::Immediate,
                    [arrival, arrival, arrival + service(i)],
                )
            })
            .collect()
    }

    #[test]
    fn a_session_is_one_arrival_in_the_system_through_its_think_times() {
        use crate::report::test_support::turn;
        // Two sessions of three turns each, 10 ms turns with 100 ms think times.
        let records: Vec<RequestRecord> = (0..2u32)
            .flat_map(|s| {
                (0..3u32).map(move |t| {
                    let at = u64::from(s) * 5 + u64::from(t) * 110;
                    let row = u64::from(s * 3 + t);
                    turn(
                        done(row, 0, DispatchPath::Immediate, [at, at, at + 10]),
                        s,
                        t,
                        3,
                    )
                })
            })
            .collect();
        let curve = in_system_curve(&records);
        assert_eq!(curve.first(), Some(&(ms(0), 1)));
        assert_eq!(curve[1], (ms(5), 2), "the second session arrives");
        assert_eq!(
            curve[2..],
            [(ms(230), 1), (ms(235), 0)],
            "both stay through their thinks"
        );
        let stability = Stability::measure(&records, 0);
        assert_eq!(
            (stability.window_start, stability.window_end),
            (ms(0), ms(5))
        );
        assert_eq!(
            stability.requests, 2,
            "sessions, not turns, are the arrivals"
        );
    }

    /// `n` two-turn sessions arriving every 100 ms, each in the system for `stay` ms.
    fn sessions(n: u32, stay: u64) -> Vec<RequestRecord> {
        use crate::report::test_support::turn;
        (0..n)
            .flat_map(|s| {
                let at = u64::from(s) * 100;
                let row = u64::from(s) * 2;
                let path = DispatchPath::Immediate;
                [
                    turn(done(row, 0, path, [at, at, at + 10]), s, 0, 2),
                    turn(
                        done(
                            row + 1,
                            0,
                            path,
                            [at + stay - 10, at + stay - 10, at + stay],
                        ),
                        s,
                        1,
                        2,
                    ),
                ]
            })
            .collect()
    }

    #[test]
    fn sessions_filling_the_system_are_a_warm_up_not_a_backlog() {
        // 4 s sessions in a 9.9 s window: 40 in the system once full, fewer while filling.
        let stability = Stability::measure(&sessions(100, 4_000), 0);
        assert_eq!(stability.session_ramp_ns, ms(4_000).as_ns());
        assert_eq!(stability.overloaded, Some(false), "{stability:?}");
        assert!(
            (stability.in_system_first_half - 40.0).abs() < 1.0,
            "{stability:?}"
        );
        // Sessions as long as the window leave no steady state to judge.
        let too_long = Stability::measure(&sessions(100, 6_000), 0);
        assert_eq!(too_long.overloaded, None);
        assert!(
            too_long
                .reason
                .unwrap()
                .contains("still filling with sessions")
        );
    }

    #[test]
    fn a_session_whose_turns_never_all_ran_stays_in_the_system() {
        use crate::report::test_support::turn;
        let records = vec![turn(
            done(0, 0, DispatchPath::Immediate, [0, 0, 10]),
            0,
            0,
            2,
        )];
        assert_eq!(in_system_curve(&records), [(ms(0), 1)]);
    }

    #[test]
    fn a_steady_run_is_stable() {
        // 100 arrivals 10 ms apart, 25 ms each: 2.5 requests in the system after the first few.
        let s = Stability::measure(&run(100, 10, |_| 25), 0);
        assert_eq!(s.overloaded, Some(false), "{s:?}");
        assert!((s.in_system_second_half - 2.5).abs() < 0.1, "{s:?}");
        assert!((s.offered_rps - 100.0).abs() < 3.0 && (s.served_rps - 100.0).abs() < 3.0);
        assert_eq!(s.warning(), None);
    }

    #[test]
    fn a_growing_backlog_is_overloaded() {
        // A single server of 15 ms per request fed every 10 ms: request i ends at 15 (i + 1).
        let s = Stability::measure(&run(100, 10, |i| 15 * (i + 1) - 10 * i), 0);
        assert_eq!(s.overloaded, Some(true), "{s:?}");
        assert!(s.in_system_second_half > 2.0 * s.in_system_first_half);
        assert!(s.served_rps < 0.75 * s.offered_rps, "{s:?}");
        let warning = s.warning().unwrap();
        assert!(
            warning.starts_with("warning: overloaded: requests in the system grew from "),
            "{warning}"
        );
    }

    #[test]
    fn capacity_widens_the_slack() {
        // In-system rises from ~1 to ~6 but a 200-sequence capacity absorbs that.
        let records = run(100, 10, |i| if i < 50 { 10 } else { 60 });
        assert_eq!(Stability::measure(&records, 0).overloaded, Some(true));
        assert_eq!(Stability::measure(&records, 200).overloaded, Some(false));
    }

    #[test]
    fn rejections_count_as_not_served() {
        let mut records = run(100, 10, |_| 5);
        for r in records.iter_mut().skip(50).step_by(3) {
            r.status = crate::report::test_support::rejected();
        }
        let s = Stability::measure(&records, 0);
        assert_eq!(s.overloaded, Some(true), "{s:?}");
        assert!(
            !s.grew(),
            "nothing piles up: rejected requests leave at once"
        );
        assert!(s.fell_behind());
    }

    #[test]
    fn an_overload_without_growth_is_not_called_growth() {
        // Most of the second half is rejected at once: the system empties while completions
        // fall behind arrivals, so the warning says that, with the small means unrounded.
        let mut records = run(100, 10, |_| 5);
        for r in records.iter_mut().skip(50).filter(|r| r.row % 4 != 0) {
            r.status = crate::report::test_support::rejected();
            r.completion = Some(r.arrival);
        }
        let s = Stability::measure(&records, 0);
        assert!(s.fell_behind() && !s.grew(), "{s:?}");
        let warning = s.warning().unwrap();
        assert!(
            warning.starts_with("warning: overloaded: completions fell behind arrivals: served "),
            "{warning}"
        );
        assert!(!warning.contains("grew"), "{warning}");
        let second = number(s.in_system_second_half);
        assert!(s.in_system_second_half < s.in_system_first_half, "{s:?}");
        assert_ne!(second, format!("{:.1}", s.in_system_second_half), "{s:?}");
        assert!(
            warning.contains(&format!("then {second}, mean per half")),
            "{warning}"
        );
    }

    #[test]
    fn short_runs_and_bursts_are_not_judged() {
        let s = Stability::measure(&run(49, 10, |_| 5), 0);
        assert_eq!(s.overloaded, None);
        assert_eq!(
            s.reason.as_deref(),
            Some("too short to judge: 49 requests, fewer than 50")
        );
        let burst = Stability::measure(&run(60, 0, |i| i + 1), 0);
        assert_eq!(burst.overloaded, None);
        assert!(burst.reason.unwrap().ends_with(": a burst"));
        // 60 arrivals 1 ms apart (a 59 ms window) of at least 6 ms each: under 10 services.
        let near_burst = Stability::measure(&run(60, 1, |i| 6 + i), 0);
        assert_eq!(
            near_burst.reason.as_deref(),
            Some(
                "too short to judge: the arrival window (59 ms) spans fewer than 10 times the fastest request (6 ms): a burst"
            )
        );
        assert_eq!(Stability::measure(&run(60, 1, |i| 5 + i), 0).reason, None);
        assert_eq!(Stability::measure(&[], 0).overloaded, None);
    }

    #[test]
    fn pending_requests_stay_in_the_system() {
        let mut records = run(2, 10, |_| 5);
        records[1].status = Status::Pending;
        records[1].completion = None;
        let curve = in_system_curve(&records);
        assert_eq!(curve, [(ms(0), 1), (ms(5), 0), (ms(10), 1)]);
        assert_eq!(mean_over(&curve, ms(0), ms(10)), 0.5);
        assert_eq!(mean_over(&curve, ms(10), ms(20)), 1.0);
    }

    proptest::proptest! {
        /// The curve has one point per distinct instant, each the arrivals up to it minus
        /// the ends up to it (counted here the slow way).
        #[test]
        fn the_in_system_curve_counts_arrivals_less_ends_at_every_instant(
            stays in proptest::collection::vec((0u64..40, proptest::option::of(0u64..10)), 0..50),
        ) {
            let visits: Vec<Visit> = stays
                .iter()
                .map(|&(arrival, stay)| Visit {
                    multi_turn: false,
                    arrival: ms(arrival),
                    end: stay.map(|s| ms(arrival + s)),
                    status: EndStatus::Completed,
                })
                .collect();
            let mut instants: Vec<SimTime> = visits
                .iter()
                .flat_map(|v| std::iter::once(v.arrival).chain(v.end))
                .collect();
            instants.sort_unstable();
            instants.dedup();
            let expected: Vec<(SimTime, u64)> = instants
                .into_iter()
                .map(|t| {
                    let arrived = visits.iter().filter(|v| v.arrival <= t).count();
                    let ended = visits.iter().filter(|v| v.end.is_some_and(|e| e <= t)).count();
                    (t, (arrived - ended) as u64)
                })
                .collect();
            proptest::prop_assert_eq!(curve_of(visits), expected);
        }
    }
}
