//! The request lifecycle: "dispatched" on dispatch, cancellation in every state, and
//! a random-operation check that no booking survives its request and each request ends once.

use super::tests::{TWO_CLASSES, decisions, dispatched, request, scheduler, t, workers};
use super::*;
use crate::scheduling::admission::ConcurrencyCap;
use proptest::prelude::*;
use proptest::sample::Index;
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<(u64, AdmissionStatus)>>>;

/// A concurrency cap that records every status it hears.
#[derive(Debug)]
struct Recorder {
    cap: ConcurrencyCap,
    log: Log,
}

impl AdmissionPolicy for Recorder {
    fn on_arrival(&mut self, now: SimTime, request: &ArrivalInfo) -> AdmissionDecision {
        self.cap.on_arrival(now, request)
    }

    fn on_status(&mut self, now: SimTime, id: RequestId, status: AdmissionStatus) {
        self.log.lock().unwrap().push((id.0, status));
        self.cap.on_status(now, id, status);
    }

    fn poll_make_ready(&mut self) -> Option<RequestId> {
        self.cap.poll_make_ready()
    }
}

/// Installs a recording cap of `limit` on `class` and returns its log.
fn record(s: &mut Scheduler, class: &str, limit: usize) -> Log {
    let log = Log::default();
    let policy = Recorder {
        cap: ConcurrencyCap::new(limit),
        log: log.clone(),
    };
    s.set_admission_policy(class, Box::new(policy)).unwrap();
    log
}

/// What the policy heard about request `id`, in order.
fn heard(log: &Log, id: u64) -> Vec<AdmissionStatus> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(r, _)| *r == id)
        .map(|(_, status)| *status)
        .collect()
}

const RANK0: WorkerWithDpRank = WorkerWithDpRank::new(0, 0);

fn assert_nothing_booked(s: &Scheduler) {
    assert_eq!(s.active_count(), 0);
    assert_eq!(s.load().request_count(), 0);
    for rank in s.load().ranks() {
        assert_eq!(s.load().active_prefill_tokens(rank), 0, "{rank}");
        assert_eq!(s.load().active_blocks(rank), 0, "{rank}");
        assert_eq!(s.load().active_requests(rank), 0, "{rank}");
    }
    s.check_invariants().unwrap();
}

use AdmissionStatus::{Aborted, Completed, Dispatched};

#[test]
fn dispatched_is_heard_on_dispatch_not_on_booking() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 10);
    s.handle_arrival(t(0), request(0, "premium", 512));
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(0, DispatchPath::Immediate)]
    );
    let booked = RequestState::Booked {
        rank: RANK0,
        class_index: 0,
    };
    assert_eq!(s.request_state(RequestId(0)), Some(booked));
    assert_eq!(heard(&log, 0), vec![], "booking is not dispatch");

    s.handle_dispatched(t(1), RequestId(0));
    let running = RequestState::Running {
        rank: RANK0,
        class_index: 0,
    };
    assert_eq!(s.request_state(RequestId(0)), Some(running));
    assert_eq!(heard(&log, 0), vec![Dispatched]);
    s.handle_dispatched(t(2), RequestId(0));
    assert_eq!(heard(&log, 0), vec![Dispatched], "reported once");

    s.handle_finished(t(3), RequestId(0), Outcome::Completed);
    assert_eq!(heard(&log, 0), vec![Dispatched, Completed]);
    assert_eq!(s.request_state(RequestId(0)), None);
    s.handle_dispatched(t(4), RequestId(0));
    assert_eq!(heard(&log, 0), vec![Dispatched, Completed], "over is over");
    assert!(decisions(&mut s).is_empty());
    assert_nothing_booked(&s);
}

#[test]
fn cancel_while_queued_for_a_policy_leaves_the_queue_at_once() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    for id in 0..5 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    assert_eq!(dispatched(&decisions(&mut s)).len(), 4);
    assert_eq!(
        s.request_state(RequestId(4)),
        Some(RequestState::Waiting { class_index: 0 })
    );
    s.handle_cancel(t(1), RequestId(4));
    assert_eq!(
        s.pending_count(),
        0,
        "an admission-managed entry leaves now"
    );
    assert_eq!(s.request_state(RequestId(4)), None);
    assert_eq!(heard(&log, 4), vec![Aborted]);
    // Capacity frees: nothing is left to dispatch, and the cancel is not repeated.
    s.handle_finished(t(2), RequestId(0), Outcome::Completed);
    s.handle_cancel(t(2), RequestId(4));
    assert!(decisions(&mut s).is_empty());
    assert_eq!(heard(&log, 4), vec![Aborted]);
    s.check_invariants().unwrap();
}

#[test]
fn cancel_of_a_deferred_request_does_not_release_another() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "regular", 1);
    for id in 0..3 {
        s.handle_arrival(t(0), request(id, "regular", 64));
    }
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(0, DispatchPath::Immediate)]
    );
    assert_eq!(s.pending_count(), 2, "1 and 2 are deferred by the cap");
    // 2 never held the cap's one slot: cancelling it must not hand 0's slot to 1.
    s.handle_cancel(t(1), RequestId(2));
    assert!(
        decisions(&mut s).is_empty(),
        "1 stays deferred while 0 runs"
    );
    assert_eq!(s.pending_count(), 1);
    assert_eq!(heard(&log, 2), vec![Aborted]);
    s.handle_dispatched(t(1), RequestId(0));
    s.handle_finished(t(2), RequestId(0), Outcome::Completed);
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(1, DispatchPath::Queued)]
    );
    s.handle_dispatched(t(2), RequestId(1));
    s.handle_cancel(t(3), RequestId(1));
    assert_eq!(heard(&log, 1), vec![Dispatched, Aborted]);
    // Every slot came back: a new request runs at once.
    s.handle_arrival(t(4), request(3, "regular", 64));
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(3, DispatchPath::Immediate)]
    );
}

/// 1.6.1's replay takes a cancelled entry out of its queue at once: it stops counting toward
/// the queue limit, and the next arrival is queued instead of refused.
#[test]
fn a_cancelled_queued_request_leaves_its_queue_at_once() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    for id in 0..6 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    assert_eq!(dispatched(&decisions(&mut s)).len(), 4, "4 and 5 queue");
    s.handle_cancel(t(1), RequestId(4));
    assert_eq!(s.request_state(RequestId(4)), None, "over for its caller");
    assert_eq!(s.pending_count(), 1, "its entry left the queue");
    assert!(decisions(&mut s).is_empty(), "no drain for a cancellation");
    s.handle_cancel(t(1), RequestId(4));
    assert!(
        decisions(&mut s).is_empty(),
        "a second cancel changes nothing"
    );
    // The queue holds one of its two places: the next arrival waits instead of being refused.
    s.handle_arrival(t(1), request(6, "premium", 512));
    assert!(decisions(&mut s).is_empty());
    assert_eq!(s.pending_count(), 2);
    // When room frees, the requests still alive are booked in order: 4 already ended.
    s.handle_first_token(t(2), RequestId(0));
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(5, DispatchPath::Queued)]
    );
    s.check_invariants().unwrap();
}

#[test]
fn cancel_after_booking_rolls_back() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    for id in 0..5 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    assert_eq!(dispatched(&decisions(&mut s)).len(), 4);
    assert_eq!(s.load().active_prefill_tokens(RANK0), 2048);
    // 1 was booked and its dispatch polled, but never sent: the booking is rolled back.
    s.handle_cancel(t(1), RequestId(1));
    assert_eq!(heard(&log, 1), vec![Aborted], "never dispatched");
    assert_eq!(s.load().rank_of(RequestId(1)), None);
    // The freed capacity (1536 tokens is not busy) admits the queued request at once.
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(4, DispatchPath::Queued)]
    );
    assert_eq!(s.load().active_prefill_tokens(RANK0), 2048);
    assert_eq!(s.active_count(), 4);
    // Late reports for the cancelled request change nothing.
    s.handle_dispatched(t(2), RequestId(1));
    s.handle_first_token(t(2), RequestId(1));
    s.handle_finished(t(3), RequestId(1), Outcome::Completed);
    assert_eq!(heard(&log, 1), vec![Aborted]);
    assert_eq!(s.active_count(), 4);
    for id in [0, 2, 3, 4] {
        s.handle_finished(t(4), RequestId(id), Outcome::Completed);
    }
    assert_nothing_booked(&s);
}

#[test]
fn cancel_before_the_dispatch_is_polled_withdraws_it() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    s.handle_arrival(t(0), request(0, "premium", 512));
    s.handle_arrival(t(0), request(1, "regular", 512));
    // The caller has not acted on either decision yet; 0's client goes away.
    s.handle_cancel(t(0), RequestId(0));
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(1, DispatchPath::Immediate)]
    );
    assert_eq!(heard(&log, 0), vec![Aborted]);
    assert_eq!(s.load().rank_of(RequestId(0)), None);
    assert_eq!(s.load().active_prefill_tokens(RANK0), 512);
    s.check_invariants().unwrap();
}

#[test]
fn cancel_before_the_reject_is_polled_withdraws_it() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    // 0..=3 dispatch at once, 4 and 5 fill the queue (limit 2), 6 is refused.
    for id in 0..7 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    // The caller has not polled 6's refusal when its client goes away: to the caller 6 is
    // still waiting, so no decision about it may follow the cancel.
    s.handle_cancel(t(0), RequestId(6));
    let d = decisions(&mut s);
    assert!(d.iter().all(|x| x.id() != RequestId(6)), "{d:?}");
    let sent: Vec<u64> = dispatched(&d).iter().map(|x| x.0).collect();
    assert_eq!(sent, vec![0, 1, 2, 3]);
    assert_eq!(d.len(), 4, "{d:?}");
    // The policy heard the refusal when it was made, and nothing more.
    assert_eq!(heard(&log, 6), vec![Aborted]);
    assert_eq!(s.request_state(RequestId(6)), None);
    assert_eq!(s.pending_count(), 2);
    s.check_invariants().unwrap();
}

#[test]
fn cancel_while_running_frees_the_booking_and_aborts_once() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    s.handle_arrival(t(0), request(0, "premium", 512));
    decisions(&mut s);
    s.handle_dispatched(t(1), RequestId(0));
    s.handle_first_token(t(2), RequestId(0));
    assert_eq!(s.load().active_prefill_tokens(RANK0), 0);
    assert_eq!(s.load().active_blocks(RANK0), 8);
    s.handle_cancel(t(3), RequestId(0));
    assert_eq!(heard(&log, 0), vec![Dispatched, Aborted]);
    assert_nothing_booked(&s);
    // Tokens already in flight from the worker arrive after the cancel: ignored.
    s.handle_first_token(t(4), RequestId(0));
    s.handle_finished(t(4), RequestId(0), Outcome::Completed);
    s.handle_cancel(t(5), RequestId(0));
    assert_eq!(heard(&log, 0), vec![Dispatched, Aborted]);
    assert!(decisions(&mut s).is_empty());
    assert_nothing_booked(&s);
}

#[test]
fn cancel_after_the_response_completed_is_a_no_op() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "premium", 100);
    for id in 0..7 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    let d = decisions(&mut s);
    assert!(matches!(
        d.last(),
        Some(Decision::Reject {
            id: RequestId(6),
            error: SchedulerError::QueueRejected(_),
            ..
        })
    ));
    s.handle_dispatched(t(1), RequestId(0));
    s.handle_finished(t(2), RequestId(0), Outcome::Completed);
    let queued = dispatched(&decisions(&mut s));
    assert_eq!(queued, vec![(4, DispatchPath::Queued)]);
    let before = log.lock().unwrap().clone();
    let booked = s.load().request_count();
    // The completed request and the refused one are over: cancelling them does nothing.
    s.handle_cancel(t(3), RequestId(0));
    s.handle_cancel(t(3), RequestId(6));
    assert!(decisions(&mut s).is_empty());
    assert_eq!(*log.lock().unwrap(), before);
    assert_eq!(heard(&log, 0), vec![Dispatched, Completed]);
    assert_eq!(heard(&log, 6), vec![Aborted]);
    assert_eq!(s.load().request_count(), booked);
    s.check_invariants().unwrap();
}

#[test]
fn a_policy_never_hears_dispatched_then_aborted_for_a_request_that_never_ran() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    let log = record(&mut s, "premium", 100);
    let pinned = |id: u64, worker: u64| {
        let mut r = request(id, "premium", 64);
        r.constraints.pinned = Some(WorkerWithDpRank::new(worker, 0));
        r
    };
    for (id, worker) in [(0, 0), (1, 0), (2, 1), (3, 0)] {
        s.handle_arrival(t(0), pinned(id, worker));
    }
    assert_eq!(dispatched(&decisions(&mut s)).len(), 4);
    s.handle_dispatched(t(1), RequestId(3)); // the only one that runs
    s.handle_cancel(t(2), RequestId(0)); // booked, client gone
    s.handle_delivery_failed(t(2), RequestId(1)); // booked, never reached its worker
    s.handle_workers(t(2), workers(1)); // 2 was booked on worker 1, which left
    s.handle_finished(t(3), RequestId(3), Outcome::Aborted);
    for id in 0..3 {
        assert_eq!(heard(&log, id), vec![Aborted], "request {id}");
    }
    assert_eq!(heard(&log, 3), vec![Dispatched, Aborted]);
    assert_nothing_booked(&s);
}

#[test]
fn a_departed_worker_releases_its_bookings_and_aborts_them_once() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    let log = record(&mut s, "premium", 100);
    for id in 0..4 {
        let mut r = request(id, "premium", 512);
        r.constraints.pinned = Some(WorkerWithDpRank::new(id % 2, 0));
        s.handle_arrival(t(0), r);
    }
    decisions(&mut s);
    for id in 0..4 {
        s.handle_dispatched(t(1), RequestId(id));
    }
    s.handle_workers(t(2), workers(1));
    for id in [1, 3] {
        assert_eq!(heard(&log, id), vec![Dispatched, Aborted]);
        assert_eq!(s.request_state(RequestId(id)), None);
        // The worker's own abort, reported later, is not a second end.
        s.handle_finished(t(3), RequestId(id), Outcome::Aborted);
        assert_eq!(heard(&log, id), vec![Dispatched, Aborted]);
    }
    assert_eq!(s.active_count(), 2);
    assert_eq!(s.load().active_prefill_tokens(RANK0), 1024);
    s.check_invariants().unwrap();
}

#[test]
fn finished_for_a_waiting_request_withdraws_it() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    let log = record(&mut s, "regular", 1);
    s.handle_arrival(t(0), request(0, "regular", 64));
    s.handle_arrival(t(0), request(1, "regular", 64));
    decisions(&mut s);
    s.handle_finished(t(1), RequestId(1), Outcome::Aborted);
    assert_eq!(s.pending_count(), 0);
    assert_eq!(heard(&log, 1), vec![Aborted]);
    s.check_invariants().unwrap();
}

// ---- the random-operation check ------------------------------------------------------

/// The lifecycle as the caller sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// Arrived; no decision about it polled yet (queued, or a decision still unpolled).
    Submitted,
    /// Its `Dispatch` was polled; not yet sent.
    Booked,
    /// Reported sent to its worker.
    Running,
    Over,
}

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        premium: bool,
        blocks: u64,
        pin: Option<u64>,
        /// Poll the decisions afterwards (otherwise the next input comes first).
        poll: bool,
    },
    Dispatch(Index),
    FirstToken(Index),
    Finish(Index, bool),
    DeliveryFailed(Index),
    /// Any request, in any state, including over.
    Cancel(Index),
    Tick,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let arrive = (
        any::<bool>(),
        1..12u64,
        prop::option::of(0..2u64),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(premium, blocks, pin, poll)| Op::Arrive {
            premium,
            blocks,
            pin,
            poll,
        });
    prop_oneof![
        6 => arrive,
        3 => any::<Index>().prop_map(Op::Dispatch),
        2 => any::<Index>().prop_map(Op::FirstToken),
        3 => (any::<Index>(), any::<bool>()).prop_map(|(i, c)| Op::Finish(i, c)),
        1 => any::<Index>().prop_map(Op::DeliveryFailed),
        3 => any::<Index>().prop_map(Op::Cancel),
        1 => Just(Op::Tick),
    ]
}

/// Two workers; premium behind a recording cap of 2, regular plain; both classes queue.
struct Harness {
    s: Scheduler,
    log: Log,
    seen: Vec<Seen>,
    premium: Vec<bool>,
    now_ms: u64,
}

const CAP: usize = 2;

impl Harness {
    fn new() -> Self {
        let policy = TWO_CLASSES.replace(
            "request_queue_limit_per_worker: 2",
            "request_queue_limit_per_worker: 3",
        );
        let mut s = scheduler(Some(&policy), 2);
        let log = record(&mut s, "premium", CAP);
        Harness {
            s,
            log,
            seen: Vec::new(),
            premium: Vec::new(),
            now_ms: 0,
        }
    }

    /// A request of the model in state `state`, picked by `which`.
    fn pick(&self, which: &Index, state: Seen) -> Option<RequestId> {
        let ids: Vec<usize> = (0..self.seen.len())
            .filter(|&i| self.seen[i] == state)
            .collect();
        (!ids.is_empty()).then(|| RequestId(ids[which.index(ids.len())] as u64))
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.now_ms += 1;
        let now = t(self.now_ms);
        let mut poll = true;
        match op {
            Op::Arrive {
                premium,
                blocks,
                pin,
                poll: p,
            } => {
                let id = self.seen.len() as u64;
                let class = if *premium { "premium" } else { "regular" };
                let mut r = request(id, class, blocks * 64);
                r.constraints.pinned = pin.map(|w| WorkerWithDpRank::new(w, 0));
                self.seen.push(Seen::Submitted);
                self.premium.push(*premium);
                self.s.handle_arrival(now, r);
                poll = *p;
            }
            Op::Dispatch(which) => {
                if let Some(id) = self.pick(which, Seen::Booked) {
                    self.s.handle_dispatched(now, id);
                    self.seen[id.0 as usize] = Seen::Running;
                }
            }
            Op::FirstToken(which) => {
                if let Some(id) = self.pick(which, Seen::Running) {
                    self.s.handle_first_token(now, id);
                }
            }
            Op::Finish(which, completed) => {
                if let Some(id) = self.pick(which, Seen::Running) {
                    let outcome = if *completed {
                        Outcome::Completed
                    } else {
                        Outcome::Aborted
                    };
                    self.s.handle_finished(now, id, outcome);
                    self.seen[id.0 as usize] = Seen::Over;
                }
            }
            Op::DeliveryFailed(which) => {
                if let Some(id) = self.pick(which, Seen::Booked) {
                    self.s.handle_delivery_failed(now, id);
                    self.seen[id.0 as usize] = Seen::Over;
                }
            }
            Op::Cancel(which) => {
                if !self.seen.is_empty() {
                    let i = which.index(self.seen.len());
                    self.s.handle_cancel(now, RequestId(i as u64));
                    self.seen[i] = Seen::Over;
                }
            }
            Op::Tick => self.s.handle_tick(now),
        }
        if poll {
            self.poll()?;
            self.check()?;
        }
        Ok(())
    }

    /// Acts on every decision; each must be about a request still waiting for one.
    fn poll(&mut self) -> Result<(), TestCaseError> {
        while let Some(decision) = self.s.poll_decision() {
            let (id, next) = match decision {
                Decision::Dispatch(d) => (d.id, Seen::Booked),
                Decision::Reject { id, .. } => (id, Seen::Over),
            };
            let seen = &mut self.seen[id.0 as usize];
            prop_assert_eq!(*seen, Seen::Submitted, "a decision for {} after it", id);
            *seen = next;
        }
        Ok(())
    }

    /// No booking survives its request; each live request holds its one; the policy hears
    /// one terminal status per ended request it admitted, after `Dispatched` only if it ran.
    fn check(&self) -> Result<(), TestCaseError> {
        self.s.check_invariants().map_err(TestCaseError::fail)?;
        let log = self.log.lock().unwrap();
        let mut live_premium = 0;
        for (i, &seen) in self.seen.iter().enumerate() {
            let id = RequestId(i as u64);
            let state = self.s.request_state(id);
            let booked = self.s.load().rank_of(id).is_some();
            match seen {
                Seen::Submitted => {
                    prop_assert!(matches!(state, Some(RequestState::Waiting { .. })), "{id}")
                }
                Seen::Booked => {
                    prop_assert!(matches!(state, Some(RequestState::Booked { .. })), "{id}")
                }
                Seen::Running => {
                    prop_assert!(matches!(state, Some(RequestState::Running { .. })), "{id}")
                }
                Seen::Over => prop_assert_eq!(state, None, "{} is over", id),
            }
            prop_assert_eq!(
                booked,
                matches!(seen, Seen::Booked | Seen::Running),
                "booking of {} in state {:?}",
                id,
                seen
            );
            let statuses: Vec<AdmissionStatus> = log
                .iter()
                .filter(|(r, _)| *r == id.0)
                .map(|(_, s)| *s)
                .collect();
            if !self.premium[i] {
                prop_assert!(statuses.is_empty(), "a plain request has no policy");
                continue;
            }
            let ends = statuses.iter().filter(|s| **s != Dispatched).count();
            prop_assert_eq!(
                ends,
                usize::from(seen == Seen::Over),
                "{}: {:?}",
                id,
                statuses
            );
            let ran = statuses.first() == Some(&Dispatched);
            prop_assert!(
                statuses.iter().skip(1).all(|s| *s != Dispatched),
                "{id}: {statuses:?}"
            );
            if seen == Seen::Running {
                prop_assert!(ran, "{id} runs unheard");
            }
            if matches!(seen, Seen::Booked | Seen::Running) {
                live_premium += 1;
            }
        }
        prop_assert!(live_premium <= CAP, "the cap holds: {live_premium} booked");
        Ok(())
    }

    /// Ends every live request, then checks that nothing at all is left behind.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.poll()?;
        for i in 0..self.seen.len() {
            if self.seen[i] != Seen::Over {
                self.now_ms += 1;
                self.s.handle_cancel(t(self.now_ms), RequestId(i as u64));
                self.seen[i] = Seen::Over;
                self.poll()?;
                self.check()?;
            }
        }
        self.apply(&Op::Tick)?;
        prop_assert_eq!(self.s.pending_count(), 0, "cancelled entries drained");
        prop_assert_eq!(self.s.active_count(), 0);
        prop_assert_eq!(self.s.load().request_count(), 0);
        for rank in self.s.load().ranks() {
            prop_assert_eq!(self.s.load().active_prefill_tokens(rank), 0);
            prop_assert_eq!(self.s.load().active_blocks(rank), 0);
        }
        // Every admission slot came back: the cap admits CAP new requests at once.
        for _ in 0..CAP {
            self.apply(&Op::Arrive {
                premium: true,
                blocks: 1,
                pin: None,
                poll: true,
            })?;
            prop_assert_eq!(*self.seen.last().unwrap(), Seen::Booked);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_lifecycles_leave_no_booking_and_end_each_request_once(
        ops in prop::collection::vec(op_strategy(), 1..120),
    ) {
        let mut h = Harness::new();
        for op in &ops {
            h.apply(op)?;
        }
        h.finish()?;
    }
}

#[test]
fn queue_entries_pinned_to_a_departed_worker_are_refused_with_a_typed_reason() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    let gone = WorkerWithDpRank::new(1, 0);
    for id in 0..7 {
        let mut r = request(id, "premium", 512);
        r.constraints.pinned = Some(gone);
        s.handle_arrival(t(0), r);
    }
    assert_eq!(
        dispatched(&decisions(&mut s)).len(),
        4,
        "4..7 wait in the lane"
    );
    assert_eq!(s.pending_count(), 3);
    s.handle_cancel(t(1), RequestId(5)); // plain: over now, its entry lingers
    s.handle_workers(t(2), workers(1));
    let refused: Vec<(u64, SchedulerError)> = decisions(&mut s)
        .into_iter()
        .map(|d| match d {
            Decision::Reject { id, error, .. } => (id.0, error),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let reason = SchedulerError::PinnedWorkerGone(gone);
    assert_eq!(refused, vec![(4, reason.clone()), (6, reason)]);
    assert_eq!(
        SchedulerError::PinnedWorkerGone(gone).kind(),
        "pinned_worker_gone"
    );
    assert_eq!(s.pending_count(), 0, "the cancelled entry is dropped too");
    assert_nothing_booked(&s);
    s.check_invariants().unwrap();
}
