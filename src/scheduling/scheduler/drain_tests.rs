//! A worker that drains (scaled down): out of the set new requests are placed on, its
//! bookings kept until it finishes them, and forgotten when it leaves.

use super::tests::{TWO_CLASSES, decisions, dispatched, request, scheduler, t};
use super::*;
use crate::scheduling::select::WorkerConfig;

/// The rank each decision dispatched to, in order (panics on a refusal).
fn ranks(s: &mut Scheduler) -> Vec<WorkerWithDpRank> {
    decisions(s)
        .into_iter()
        .map(|d| match d {
            Decision::Dispatch(d) => d.rank,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn a_draining_worker_gets_nothing_new_and_keeps_what_it_holds_until_it_finishes() {
    let mut s = scheduler(None, 2);
    s.handle_arrival(t(0), request(1, "premium", 512));
    let [first] = ranks(&mut s)[..] else {
        panic!("one dispatch")
    };
    s.handle_dispatched(t(0), RequestId(1));
    s.handle_worker_draining(t(1), first.worker_id);
    for id in 2..6 {
        s.handle_arrival(t(2), request(id, "premium", 512));
    }
    let later = ranks(&mut s);
    assert_eq!(later.len(), 4);
    assert!(later.iter().all(|r| r.worker_id != first.worker_id));
    // Its booking and load stay: the worker still serves it.
    assert!(matches!(
        s.request_state(RequestId(1)),
        Some(RequestState::Running { rank, .. }) if rank == first
    ));
    assert_eq!(s.load().active_prefill_tokens(first), 512);
    assert!(!s.is_drained(first.worker_id));
    s.check_invariants().unwrap();
    s.handle_finished(t(3), RequestId(1), Outcome::Completed);
    assert!(s.is_drained(first.worker_id));
    s.handle_worker_drained(t(4), first.worker_id);
    assert!(!s.load().has_rank(first));
    assert!(!s.is_drained(first.worker_id), "it left");
    s.check_invariants().unwrap();
}

#[test]
fn queued_requests_are_never_released_to_a_draining_worker() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    // Both ranks busy with a 2,048-token prefill (over the 1,536 threshold).
    s.handle_arrival(t(0), request(1, "premium", 2048));
    s.handle_arrival(t(0), request(2, "premium", 2048));
    let [a, b] = ranks(&mut s)[..] else {
        panic!("two dispatches")
    };
    s.handle_arrival(t(1), request(3, "premium", 512));
    assert_eq!(s.pending_count(), 1, "both ranks are busy");
    s.handle_worker_draining(t(2), a.worker_id);
    // The draining rank frees up first: the waiting request still waits for `b`.
    s.handle_first_token(t(3), RequestId(1));
    assert!(decisions(&mut s).is_empty());
    assert_eq!(s.pending_count(), 1);
    s.handle_first_token(t(4), RequestId(2));
    assert_eq!(ranks(&mut s), vec![b]);
    s.check_invariants().unwrap();
}

#[test]
fn a_request_pinned_to_a_draining_worker_is_refused_not_placed_there() {
    let mut s = scheduler(None, 2);
    s.handle_worker_draining(t(0), 1);
    let mut pinned = request(1, "premium", 64);
    pinned.constraints.pinned = Some(WorkerWithDpRank::new(1, 0));
    s.handle_arrival(t(1), pinned);
    let refused = decisions(&mut s);
    assert!(dispatched(&refused).is_empty(), "{refused:?}");
    assert_eq!(refused.len(), 1);
    s.check_invariants().unwrap();
}

#[test]
fn a_worker_joining_while_another_drains_leaves_the_draining_bookings_alone() {
    let mut s = scheduler(None, 1);
    s.handle_arrival(t(0), request(1, "premium", 512));
    decisions(&mut s);
    s.handle_worker_draining(t(1), 0);
    let mut set = s.workers().clone();
    set.insert(5, WorkerConfig::default());
    s.handle_workers(t(2), set);
    assert!(
        s.request_state(RequestId(1)).is_some(),
        "still booked on worker 0"
    );
    s.handle_arrival(t(3), request(2, "premium", 512));
    assert_eq!(ranks(&mut s), vec![WorkerWithDpRank::new(5, 0)]);
    s.check_invariants().unwrap();
}

#[test]
fn a_worker_that_leaves_with_a_booking_aborts_it_once() {
    let mut s = scheduler(None, 2);
    s.handle_arrival(t(0), request(1, "premium", 512));
    let [rank] = ranks(&mut s)[..] else {
        panic!("one dispatch")
    };
    s.handle_worker_draining(t(1), rank.worker_id);
    s.handle_worker_drained(t(2), rank.worker_id);
    assert_eq!(s.request_state(RequestId(1)), None);
    assert_eq!(s.active_count(), 0);
    // A second word that it left, or a late finish, changes nothing.
    s.handle_worker_drained(t(3), rank.worker_id);
    s.handle_finished(t(3), RequestId(1), Outcome::Completed);
    assert_eq!(s.active_count(), 0);
    s.check_invariants().unwrap();
}
