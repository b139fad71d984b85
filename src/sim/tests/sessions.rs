//! Property tests of session runs: random systems, workloads cut into sessions, faults and
//! closed loops; every checker runs after every event, and the session rules must hold.

use super::*;
use crate::workload::Arrival;
use crate::workload::session::{LaterTurn, SessionTag, SessionTurn};
use std::collections::BTreeMap;

/// The case's requests cut into sessions: `cuts[k] = (turns, delay ns)` takes the next
/// `turns` requests (in arrival order) as one session, the first arriving at its own time and
/// each later one `delay` after the one before it ends.
fn sessions(case: &Case, cuts: &[(usize, u64)]) -> Vec<Arrival> {
    let mut specs = requests(case).into_iter().peekable();
    let mut out = Vec::new();
    for (index, &(turns, delay_ns)) in cuts.iter().cycle().enumerate() {
        let Some(first) = specs.next() else { break };
        let later: std::collections::VecDeque<LaterTurn> = (1..turns)
            .map_while(|_| specs.next())
            .map(|spec| LaterTurn {
                spec,
                delay: SimDuration::from_ns(delay_ns),
                named: true,
            })
            .collect();
        let index = index as u32;
        let tag = SessionTag {
            index,
            id: format!("s{index}").into(),
            turn: 0,
            turns: later.len() as u32 + 1,
            chained: true,
            named: true,
        };
        out.push(Arrival {
            spec: first,
            hashes: None,
            session: Some(Box::new(SessionTurn {
                index,
                tag: Some(tag),
                later,
            })),
        });
    }
    out
}

/// Each session's records are its turns in order, none skipped; only a last record may end
/// in a fault (cancelled or aborted) or cut the session short; each later turn arrived
/// exactly `delay` after the turn before it ended.
fn check_sessions(records: &[RequestRecord], cuts: &[(usize, u64)]) -> Result<(), String> {
    let mut by_session: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        let tag = r.session().ok_or(format!("row {} has no session", r.row))?;
        by_session.entry(tag.index).or_default().push(r);
    }
    for (index, turns) in by_session {
        let delay = SimDuration::from_ns(cuts[index as usize % cuts.len()].1);
        let expected_turns = turns[0].session().unwrap().turns as usize;
        for (k, r) in turns.iter().enumerate() {
            let tag = r.session().unwrap();
            if tag.turn as usize != k {
                return Err(format!("session {index}: turn {} at place {k}", tag.turn));
            }
            let lost = matches!(r.status.kind(), EndStatus::Cancelled | EndStatus::Aborted);
            if lost && k + 1 != turns.len() {
                return Err(format!("session {index}: a turn follows lost turn {k}"));
            }
            if k > 0 {
                let before = turns[k - 1]
                    .completion
                    .ok_or("a turn followed an unended one")?;
                if r.arrival != before.saturating_add(delay) {
                    return Err(format!("session {index} turn {k} at {}", r.arrival));
                }
            }
        }
        let last = turns.last().unwrap().status.kind();
        let lost = matches!(last, EndStatus::Cancelled | EndStatus::Aborted);
        if turns.len() < expected_turns && !lost {
            return Err(format!("session {index} stopped at {} turns", turns.len()));
        }
    }
    Ok(())
}

fn cuts() -> impl Strategy<Value = Vec<(usize, u64)>> {
    prop::collection::vec((1usize..5, 0u64..20_000_000), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Sessions on random systems with random faults, open or closed loop: the run drains,
    /// the session rules hold, a closed loop never has more than `n` sessions going, and a
    /// rerun is identical.
    #[test]
    fn random_sessions_keep_their_turns_in_order_under_faults_and_closed_loops(
        case in case(), cuts in cuts(), f in fault_case(), closed in prop::option::of(1u32..4),
        seed in 0u64..1000,
    ) {
        let mut config = config(&case, seed);
        config.faults = faults(&case, &f);
        config.migration_limit = f.migration_limit;
        config.closed_loop = closed.map(|n| ClosedLoop { concurrency: n, issue_until: None });
        let run_once = || run(Options::new(config.clone()), sessions(&case, &cuts));
        let result = run_once().map_err(|v| TestCaseError::fail(format!("seed {seed}: {v}")))?;
        prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
        prop_assert_eq!(result.count(EndStatus::Pending), 0, "seed {}", seed);
        check_sessions(&result.records, &cuts)
            .map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        if let Some(n) = closed {
            let going = |t: SimTime| {
                let mut sessions: BTreeMap<u32, (SimTime, SimTime)> = BTreeMap::new();
                for r in &result.records {
                    let index = r.session().unwrap().index;
                    let end = r.completion.unwrap();
                    let span = sessions.entry(index).or_insert((r.arrival, end));
                    span.1 = span.1.max(end);
                }
                sessions.values().filter(|(a, e)| *a <= t && t < *e).count()
            };
            for r in &result.records {
                prop_assert!(going(r.arrival) <= n as usize, "seed {}: over {} sessions", seed, n);
            }
        }
        let again = run_once().unwrap();
        prop_assert_eq!(again.records, result.records);
    }
}
