//! Releasing queued requests as 1.6.1's replay does: placed and booked with the cache seen at
//! arrival, and an empty worker set that keeps requests waiting for a worker.

use super::tests::{TWO_CLASSES, decisions, dispatched, request, scheduler, t, workers};
use super::*;
use crate::scheduling::types::KvEventData;

/// The shared prompt: 8 blocks of 64 tokens.
const PREFIX: [SeqHash; 8] = [901, 902, 903, 904, 905, 906, 907, 908];

fn stored(rank: WorkerWithDpRank, blocks: &[SeqHash]) -> KvEvent {
    let data = KvEventData::Stored {
        parent: None,
        blocks: blocks.to_vec(),
    };
    KvEvent {
        worker: rank,
        event_id: 0,
        data,
    }
}

fn removed(rank: WorkerWithDpRank, blocks: &[SeqHash]) -> KvEvent {
    let data = KvEventData::Removed {
        blocks: blocks.to_vec(),
    };
    KvEvent {
        worker: rank,
        event_id: 0,
        data,
    }
}

/// 768 tokens whose first 512 are [`PREFIX`].
fn prefixed_request(id: u64) -> SchedulingRequest {
    let mut r = request(id, "premium", 768);
    let own = (0..4).map(|b| id << 32 | b);
    r.block_hashes = PREFIX.iter().copied().chain(own).collect::<Vec<_>>().into();
    r
}

/// Two workers, each busy with a 2,048-token prefill (over the 1,536 threshold): returns
/// (rank of request 1, rank of request 2).
fn two_busy_ranks(s: &mut Scheduler) -> (WorkerWithDpRank, WorkerWithDpRank) {
    s.handle_arrival(t(0), request(1, "premium", 2048));
    s.handle_arrival(t(0), request(2, "premium", 2048));
    let ranks: Vec<WorkerWithDpRank> = decisions(s)
        .into_iter()
        .map(|d| match d {
            Decision::Dispatch(d) => d.rank,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_ne!(ranks[0], ranks[1], "the second goes to the idle rank");
    (ranks[0], ranks[1])
}

fn the_dispatch(s: &mut Scheduler) -> Dispatch {
    match decisions(s).as_slice() {
        [Decision::Dispatch(d)] => d.clone(),
        other => panic!("expected one dispatch, got {other:?}"),
    }
}

#[test]
fn a_released_request_is_placed_with_the_cache_it_saw_on_arrival() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    let (a, b) = two_busy_ranks(&mut s);
    s.handle_kv_event(t(1), &stored(a, &PREFIX));
    s.handle_arrival(t(2), prefixed_request(3));
    assert_eq!(s.pending_count(), 1, "both ranks are busy");
    // The cache moves while it waits: the router's index now has the prefix on b only.
    s.handle_kv_event(t(3), &removed(a, &PREFIX));
    s.handle_kv_event(t(3), &stored(b, &PREFIX));
    s.handle_first_token(t(4), RequestId(1));
    let d = the_dispatch(&mut s);
    assert_eq!((d.id, d.path), (RequestId(3), DispatchPath::Queued));
    assert_eq!(d.rank, a);
    assert_eq!(
        (d.overlap_blocks, d.cached_tokens),
        (8, 512),
        "as at arrival"
    );
    assert_eq!(s.load().active_prefill_tokens(a), 768 - 512);
    s.check_invariants().unwrap();
}

#[test]
fn a_released_request_books_the_cache_of_the_rank_it_goes_to() {
    let mut s = scheduler(Some(TWO_CLASSES), 2);
    let (a, b) = two_busy_ranks(&mut s);
    // The prefix is cached on b, which stays busy; a frees first and takes the request.
    s.handle_kv_event(t(1), &stored(b, &PREFIX));
    s.handle_arrival(t(2), prefixed_request(3));
    s.handle_first_token(t(4), RequestId(1));
    let d = the_dispatch(&mut s);
    assert_eq!((d.id, d.rank, d.cached_tokens), (RequestId(3), a, 0));
    assert_eq!(
        s.load().active_prefill_tokens(a),
        768,
        "a holds none of the prompt: the cache on b is not booked against a"
    );
    s.check_invariants().unwrap();
}

/// [`TWO_CLASSES`] without queue limits, which scale with the worker count (none on an empty
/// set: a request is then refused as the queue is full, as in 1.6.1).
fn unlimited_classes() -> String {
    TWO_CLASSES.replace(", request_queue_limit_per_worker: 2", "")
}

#[test]
fn an_empty_worker_set_is_busy_and_a_request_waits_for_a_worker() {
    let mut s = scheduler(Some(&unlimited_classes()), 1);
    s.handle_workers(t(0), WorkerSet::new());
    s.handle_arrival(t(1), request(1, "premium", 512));
    assert!(decisions(&mut s).is_empty(), "it waits");
    assert_eq!(s.pending_count(), 1);
    assert_eq!(
        s.poll_timeout(),
        None,
        "no recheck can help before a worker joins"
    );
    s.check_invariants().unwrap();
    s.handle_workers(t(2), workers(1));
    assert_eq!(
        dispatched(&decisions(&mut s)),
        vec![(1, DispatchPath::Queued)]
    );
    s.check_invariants().unwrap();
}

#[test]
fn requests_left_waiting_when_no_worker_will_join_are_refused() {
    let mut s = scheduler(Some(&unlimited_classes()), 1);
    assert!(!s.handle_no_more_workers(t(0)), "nothing waits");
    s.handle_workers(t(0), WorkerSet::new());
    s.handle_arrival(t(1), request(1, "premium", 512));
    s.handle_arrival(t(1), request(2, "regular", 512));
    assert!(s.handle_no_more_workers(t(5)));
    let refused: Vec<(u64, SchedulerError)> = decisions(&mut s)
        .into_iter()
        .map(|d| match d {
            Decision::Reject { id, error, .. } => (id.0, error),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let none = SchedulerError::NoEndpoints;
    assert_eq!(refused, vec![(1, none.clone()), (2, none)]);
    assert_eq!(s.pending_count(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn requests_waiting_on_a_worker_set_that_has_a_worker_are_not_refused() {
    let mut s = scheduler(Some(TWO_CLASSES), 1);
    for id in 0..5 {
        s.handle_arrival(t(0), request(id, "premium", 512));
    }
    assert_eq!(s.pending_count(), 1);
    decisions(&mut s);
    assert!(!s.handle_no_more_workers(t(1)));
    assert!(decisions(&mut s).is_empty());
    assert_eq!(s.pending_count(), 1);
}

#[test]
fn a_class_that_never_queues_is_refused_at_once_on_an_empty_worker_set() {
    let mut s = scheduler(None, 1);
    s.handle_workers(t(0), WorkerSet::new());
    s.handle_arrival(t(1), request(1, "default", 512));
    match decisions(&mut s).as_slice() {
        [Decision::Reject { error, .. }] => assert_eq!(*error, SchedulerError::NoEndpoints),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Dynamo's own test of a blocked pinned lane, ported: threshold 0 (any prefill is busy), two
/// workers, requests of 256 tokens. A and B are pinned to worker 1 (A runs, B waits in its
/// lane); a request for idle worker 0 is dispatched at once, pinned there or not.
#[test]
fn a_blocked_pinned_lane_does_not_hold_back_a_request_for_an_idle_worker() {
    let zero_threshold = "
default_policy_family: all
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: all, policy_family: all, cache_bucket: all, quantum: 256, prefill_busy_threshold: 0}
";
    let (w0, w1) = (WorkerWithDpRank::new(0, 0), WorkerWithDpRank::new(1, 0));
    for pin_c in [Some(w0), None] {
        let mut s = scheduler(Some(zero_threshold), 2);
        let pinned = |id, pin| {
            let mut r = request(id, "all", 256);
            r.constraints.pinned = pin;
            r
        };
        s.handle_arrival(t(0), pinned(1, Some(w1)));
        s.handle_arrival(t(0), pinned(2, Some(w1)));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(1, DispatchPath::Immediate)]
        );
        assert_eq!(s.pending_count(), 1, "B waits in worker 1's lane");
        s.handle_arrival(t(1), pinned(3, pin_c));
        let d = the_dispatch(&mut s);
        assert_eq!((d.id, d.rank), (RequestId(3), w0), "pin {pin_c:?}");
        assert_eq!(s.pending_count(), 1);
        s.check_invariants().unwrap();
    }
}
