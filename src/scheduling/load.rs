//! Router-side load tracking per worker rank: active prefill tokens, active blocks, requests.
//!
//! This is the router's own book of what it has sent where (Dynamo's `ActiveSequences` per rank
//! and `ActiveSequencesMultiWorker` over them). It is not fed by worker events: a booking is
//! added when a request is admitted, its prefill tokens are dropped when the first output token
//! arrives, and everything is released when the request is freed.
//!
//! Model: the static prefill model (active prefill tokens = sum of the initial effective
//! prefill tokens of requests not yet prefill-completed). Prompt blocks are counted as
//! distinct live sequence hashes per rank (a shared prefix counts once); each sequence hash
//! commits to its whole prefix, so a refcount per hash gives the same count as Dynamo's trie.
//! Not modelled (extension points are marked `EXTENSION`): output-block tracking with OSL decay,
//! the AIC prefill-duration decay, and stale-request expiry.

use super::types::{RequestId, SeqHash, WorkerId, WorkerWithDpRank};
use crate::time::SimTime;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::fmt;

/// Why a booking was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The request id is already booked on some rank (ids must be unique while active).
    DuplicateRequest(RequestId),
    /// The rank is not registered with the tracker.
    WorkerNotFound(WorkerWithDpRank),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::DuplicateRequest(id) => write!(f, "request {id} is already active"),
            LoadError::WorkerNotFound(rank) => write!(f, "{rank} is not registered"),
        }
    }
}

impl std::error::Error for LoadError {}

/// One rank's load as seen by one particular request (Dynamo's `WorkerLoadProjection`).
///
/// Ephemeral and request-specific: `additional_active_blocks` depends on the query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankLoad {
    /// The rank this row describes.
    pub rank: WorkerWithDpRank,
    /// Prefill tokens of requests on this rank that have not produced their first token.
    pub active_prefill_tokens: u64,
    /// Distinct live prompt blocks on this rank ("active decode blocks").
    pub active_decode_blocks: u64,
    /// Blocks the query would add: query length minus its leading blocks already live here.
    pub additional_active_blocks: u64,
    /// Requests booked on this rank.
    pub active_requests: u64,
}

impl RankLoad {
    /// Decode blocks the rank would hold if the request went there.
    pub fn potential_decode_blocks(&self) -> u64 {
        self.active_decode_blocks
            .saturating_add(self.additional_active_blocks)
    }
}

/// One active request's booking.
#[derive(Clone, Debug)]
struct Booking {
    rank: WorkerWithDpRank,
    prompt_hashes: Vec<SeqHash>,
    /// `Some` until the first output token (static prefill model); never `Some(0)`.
    prefill_tokens: Option<u64>,
    /// When it was booked; stale-request expiry (EXTENSION: not modelled) would read it.
    booked_at: SimTime,
}

/// Per-rank counters, kept incrementally so every getter is O(1).
#[derive(Clone, Debug, Default)]
struct RankState {
    /// Live prompt sequence hash -> number of active requests on this rank holding it.
    block_refcounts: FxHashMap<SeqHash, u32>,
    active_prefill_tokens: u64,
    active_requests: u64,
    // EXTENSION: output blocks (weighted by OSL decay) would be summed here and added to
    // `active_blocks`.
}

impl RankState {
    fn acquire_blocks(&mut self, hashes: &[SeqHash]) {
        for &hash in hashes {
            *self.block_refcounts.entry(hash).or_insert(0) += 1;
        }
    }

    fn release_blocks(&mut self, hashes: &[SeqHash]) {
        for hash in hashes {
            // One probe per block: the entry is found once, then decremented or removed.
            let Entry::Occupied(mut count) = self.block_refcounts.entry(*hash) else {
                debug_assert!(false, "released a block that was never acquired");
                continue;
            };
            if *count.get() <= 1 {
                count.remove();
            } else {
                *count.get_mut() -= 1;
            }
        }
    }

    fn active_blocks(&self) -> u64 {
        self.block_refcounts.len() as u64
    }

    /// Number of leading `query` hashes live on this rank.
    fn overlap_depth(&self, query: &[SeqHash]) -> u64 {
        query
            .iter()
            .take_while(|hash| self.block_refcounts.contains_key(hash))
            .count() as u64
    }
}

/// The router's load book over all registered ranks.
///
/// Every public method is total: no sequence of calls panics. Outputs are in rank order.
#[derive(Clone, Debug, Default)]
pub struct LoadTracker {
    ranks: BTreeMap<WorkerWithDpRank, RankState>,
    bookings: FxHashMap<RequestId, Booking>,
}

impl LoadTracker {
    /// An empty tracker with no ranks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a rank. Returns false (and changes nothing) if it was already registered.
    pub fn add_rank(&mut self, rank: WorkerWithDpRank) -> bool {
        if self.ranks.contains_key(&rank) {
            return false;
        }
        self.ranks.insert(rank, RankState::default());
        true
    }

    /// Unregisters every rank of `worker` and drops the requests booked there.
    ///
    /// Returns the dropped request ids, sorted; a later `free` of one of them returns `None`.
    pub fn remove_worker(&mut self, worker: WorkerId) -> Vec<RequestId> {
        let doomed: Vec<WorkerWithDpRank> = self
            .ranks
            .keys()
            .filter(|rank| rank.worker_id == worker)
            .copied()
            .collect();
        for rank in &doomed {
            self.ranks.remove(rank);
        }
        let mut dropped: Vec<RequestId> = self
            .bookings
            .iter()
            .filter(|(_, booking)| booking.rank.worker_id == worker)
            .map(|(id, _)| *id)
            .collect();
        dropped.sort_unstable();
        for id in &dropped {
            self.bookings.remove(id);
        }
        dropped
    }

    /// Books request `id` on `rank`: acquires its prompt blocks and, when `prefill_tokens` is
    /// `Some(n)` with `n > 0`, adds `n` active prefill tokens until prefill completes.
    ///
    /// Pass `prefill_tokens = None` when prefill tracking is off, and an empty `prompt_hashes`
    /// when block tracking is off. On error nothing changes. `now` is kept as the booking
    /// time ([`booked_at`](Self::booked_at)), the input of stale-request expiry.
    pub fn add_request(
        &mut self,
        now: SimTime,
        id: RequestId,
        rank: WorkerWithDpRank,
        prompt_hashes: &[SeqHash],
        prefill_tokens: Option<u64>,
    ) -> Result<(), LoadError> {
        if self.bookings.contains_key(&id) {
            return Err(LoadError::DuplicateRequest(id));
        }
        let Some(state) = self.ranks.get_mut(&rank) else {
            return Err(LoadError::WorkerNotFound(rank));
        };
        let prefill_tokens = prefill_tokens.filter(|&tokens| tokens > 0);
        state.acquire_blocks(prompt_hashes);
        state.active_prefill_tokens = state
            .active_prefill_tokens
            .saturating_add(prefill_tokens.unwrap_or(0));
        state.active_requests += 1;
        let booking = Booking {
            rank,
            prompt_hashes: prompt_hashes.to_vec(),
            prefill_tokens,
            booked_at: now,
        };
        self.bookings.insert(id, booking);
        Ok(())
    }

    /// Drops the request's prefill tokens (its first token arrived); its blocks stay.
    ///
    /// Returns the rank it is on, or `None` for an unknown id. Idempotent.
    pub fn mark_prefill_completed(&mut self, id: RequestId) -> Option<WorkerWithDpRank> {
        let booking = self.bookings.get_mut(&id)?;
        if let Some(tokens) = booking.prefill_tokens.take()
            && let Some(state) = self.ranks.get_mut(&booking.rank)
        {
            state.active_prefill_tokens = state.active_prefill_tokens.saturating_sub(tokens);
        }
        Some(booking.rank)
    }

    /// Releases everything the request holds and returns the rank it was on (`None` if the
    /// id is not active). Shared prefix blocks stay live while other requests hold them.
    pub fn free(&mut self, id: RequestId) -> Option<WorkerWithDpRank> {
        let booking = self.bookings.remove(&id)?;
        // The rank always exists: `remove_worker` drops the bookings of the ranks it removes.
        if let Some(state) = self.ranks.get_mut(&booking.rank) {
            if let Some(tokens) = booking.prefill_tokens {
                state.active_prefill_tokens = state.active_prefill_tokens.saturating_sub(tokens);
            }
            state.release_blocks(&booking.prompt_hashes);
            state.active_requests = state.active_requests.saturating_sub(1);
        }
        Some(booking.rank)
    }

    /// Active prefill tokens on `rank` (0 for an unknown rank).
    pub fn active_prefill_tokens(&self, rank: WorkerWithDpRank) -> u64 {
        self.ranks
            .get(&rank)
            .map_or(0, |state| state.active_prefill_tokens)
    }

    /// Distinct live prompt blocks on `rank` (0 for an unknown rank).
    pub fn active_blocks(&self, rank: WorkerWithDpRank) -> u64 {
        self.ranks.get(&rank).map_or(0, RankState::active_blocks)
    }

    /// Requests booked on `rank` (0 for an unknown rank).
    pub fn active_requests(&self, rank: WorkerWithDpRank) -> u64 {
        self.ranks
            .get(&rank)
            .map_or(0, |state| state.active_requests)
    }

    /// The rank request `id` is booked on, if it is active.
    pub fn rank_of(&self, id: RequestId) -> Option<WorkerWithDpRank> {
        self.bookings.get(&id).map(|booking| booking.rank)
    }

    /// When request `id` was booked, if it is active.
    pub fn booked_at(&self, id: RequestId) -> Option<SimTime> {
        self.bookings.get(&id).map(|booking| booking.booked_at)
    }

    /// Whether `rank` is registered.
    pub fn has_rank(&self, rank: WorkerWithDpRank) -> bool {
        self.ranks.contains_key(&rank)
    }

    /// All registered ranks, sorted by (worker_id, dp_rank).
    pub fn ranks(&self) -> Vec<WorkerWithDpRank> {
        self.ranks.keys().copied().collect()
    }

    /// Number of active requests over all ranks.
    pub fn request_count(&self) -> usize {
        self.bookings.len()
    }

    /// Every registered rank's load as seen by a request whose prompt blocks are
    /// `query_hashes`, in rank order. `now` is where a time-decaying prefill model would
    /// plug in; the static model ignores it.
    pub fn project(&self, _now: SimTime, query_hashes: &[SeqHash]) -> Vec<RankLoad> {
        let query_blocks = query_hashes.len() as u64;
        self.ranks
            .iter()
            .map(|(&rank, state)| RankLoad {
                rank,
                active_prefill_tokens: state.active_prefill_tokens,
                active_decode_blocks: state.active_blocks(),
                additional_active_blocks: query_blocks - state.overlap_depth(query_hashes),
                active_requests: state.active_requests,
            })
            .collect()
    }

    /// Recomputes every counter from the bookings and compares (spec §8 items 14-16).
    ///
    /// O(total booked blocks); for tests and debug runs. The error says what disagrees.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected: BTreeMap<WorkerWithDpRank, RankState> = BTreeMap::new();
        for (id, booking) in &self.bookings {
            if !self.ranks.contains_key(&booking.rank) {
                return Err(format!(
                    "request {id} is booked on unknown {}",
                    booking.rank
                ));
            }
            if booking.prefill_tokens == Some(0) {
                return Err(format!("request {id} holds an empty prefill booking"));
            }
            let state = expected.entry(booking.rank).or_default();
            state.acquire_blocks(&booking.prompt_hashes);
            state.active_prefill_tokens += booking.prefill_tokens.unwrap_or(0);
            state.active_requests += 1;
        }
        let empty = RankState::default();
        for (rank, actual) in &self.ranks {
            let want = expected.get(rank).unwrap_or(&empty);
            check_rank_matches(*rank, actual, want)?;
        }
        Ok(())
    }
}

fn check_rank_matches(
    rank: WorkerWithDpRank,
    actual: &RankState,
    want: &RankState,
) -> Result<(), String> {
    if actual.active_requests != want.active_requests {
        return Err(format!(
            "{rank}: {} active requests, bookings say {}",
            actual.active_requests, want.active_requests
        ));
    }
    if actual.active_prefill_tokens != want.active_prefill_tokens {
        return Err(format!(
            "{rank}: {} active prefill tokens, bookings say {}",
            actual.active_prefill_tokens, want.active_prefill_tokens
        ));
    }
    if actual.block_refcounts != want.block_refcounts {
        return Err(format!(
            "{rank}: block refcounts disagree with bookings ({} live hashes, bookings say {})",
            actual.block_refcounts.len(),
            want.block_refcounts.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: SimTime = SimTime::ZERO;

    fn rank(worker_id: u64, dp_rank: u32) -> WorkerWithDpRank {
        WorkerWithDpRank::new(worker_id, dp_rank)
    }

    fn tracker_with(ranks: &[WorkerWithDpRank]) -> LoadTracker {
        let mut tracker = LoadTracker::new();
        for &r in ranks {
            assert!(tracker.add_rank(r));
        }
        tracker
    }

    #[test]
    fn booking_counts_tokens_blocks_and_requests() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        tracker
            .add_request(T0, RequestId(1), a, &[10, 11, 12], Some(300))
            .unwrap();
        assert_eq!(tracker.active_prefill_tokens(a), 300);
        assert_eq!(tracker.active_blocks(a), 3);
        assert_eq!(tracker.active_requests(a), 1);
        assert_eq!(tracker.rank_of(RequestId(1)), Some(a));
        assert_eq!(tracker.booked_at(RequestId(1)), Some(T0));
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn duplicate_id_is_rejected_and_existing_booking_untouched() {
        let (a, b) = (rank(1, 0), rank(2, 0));
        let mut tracker = tracker_with(&[a, b]);
        tracker
            .add_request(T0, RequestId(7), a, &[1, 2], Some(100))
            .unwrap();
        let again = tracker.add_request(T0, RequestId(7), b, &[5, 6, 7], Some(50));
        assert_eq!(again, Err(LoadError::DuplicateRequest(RequestId(7))));
        assert_eq!(tracker.rank_of(RequestId(7)), Some(a));
        assert_eq!(
            (tracker.active_prefill_tokens(a), tracker.active_blocks(a)),
            (100, 2)
        );
        assert_eq!(
            (tracker.active_prefill_tokens(b), tracker.active_blocks(b)),
            (0, 0)
        );
        assert_eq!(tracker.active_requests(b), 0);
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn unknown_rank_is_rejected_without_side_effects() {
        let mut tracker = tracker_with(&[rank(1, 0)]);
        let missing = rank(1, 1);
        let result = tracker.add_request(T0, RequestId(1), missing, &[1], Some(5));
        assert_eq!(result, Err(LoadError::WorkerNotFound(missing)));
        assert_eq!(tracker.rank_of(RequestId(1)), None);
        assert_eq!(tracker.request_count(), 0);
    }

    #[test]
    fn prefill_state_only_for_positive_tokens() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        tracker
            .add_request(T0, RequestId(1), a, &[1], None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(2), a, &[1], Some(0))
            .unwrap();
        assert_eq!(tracker.active_prefill_tokens(a), 0);
        assert_eq!(tracker.active_requests(a), 2);
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn shared_prefix_is_counted_once_per_rank() {
        let (a, b) = (rank(1, 0), rank(1, 1));
        let mut tracker = tracker_with(&[a, b]);
        tracker
            .add_request(T0, RequestId(1), a, &[1, 2, 3], None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(2), a, &[1, 2, 4, 5], None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(3), b, &[1, 2], None)
            .unwrap();
        assert_eq!(tracker.active_blocks(a), 5, "1,2 shared; 3,4,5 own");
        assert_eq!(
            tracker.active_blocks(b),
            2,
            "other ranks count their own copy"
        );
        tracker.free(RequestId(1));
        assert_eq!(
            tracker.active_blocks(a),
            4,
            "shared prefix survives its other holder"
        );
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn mark_prefill_completed_keeps_blocks_and_is_idempotent() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        tracker
            .add_request(T0, RequestId(1), a, &[1, 2], Some(128))
            .unwrap();
        tracker
            .add_request(T0, RequestId(2), a, &[3], Some(64))
            .unwrap();
        assert_eq!(tracker.mark_prefill_completed(RequestId(1)), Some(a));
        assert_eq!(tracker.active_prefill_tokens(a), 64);
        assert_eq!(tracker.active_blocks(a), 3);
        assert_eq!(tracker.mark_prefill_completed(RequestId(1)), Some(a));
        assert_eq!(
            tracker.active_prefill_tokens(a),
            64,
            "second call changes nothing"
        );
        assert_eq!(tracker.mark_prefill_completed(RequestId(99)), None);
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn free_releases_everything_and_returns_the_rank() {
        let ranks = [rank(1, 0), rank(2, 0), rank(2, 1)];
        let mut tracker = tracker_with(&ranks);
        for id in 0..30u64 {
            let r = ranks[(id % 3) as usize];
            let hashes: Vec<SeqHash> = (0..=(id % 5)).collect();
            tracker
                .add_request(T0, RequestId(id), r, &hashes, Some(10 + id))
                .unwrap();
        }
        tracker.mark_prefill_completed(RequestId(4));
        for id in 0..30u64 {
            assert_eq!(tracker.free(RequestId(id)), Some(ranks[(id % 3) as usize]));
        }
        assert_eq!(tracker.free(RequestId(0)), None, "second free is a no-op");
        for r in ranks {
            assert_eq!(tracker.active_blocks(r), 0);
            assert_eq!(tracker.active_prefill_tokens(r), 0);
            assert_eq!(tracker.active_requests(r), 0);
        }
        assert_eq!(tracker.request_count(), 0);
        tracker.check_invariants().unwrap();
    }

    #[test]
    fn freed_id_can_be_booked_again() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        tracker
            .add_request(T0, RequestId(1), a, &[1], None)
            .unwrap();
        tracker.free(RequestId(1));
        assert!(tracker.add_request(T0, RequestId(1), a, &[1], None).is_ok());
    }

    #[test]
    fn projection_counts_only_leading_live_blocks_as_overlap() {
        let (a, b, c) = (rank(1, 0), rank(2, 0), rank(3, 0));
        let mut tracker = tracker_with(&[c, a, b]);
        tracker
            .add_request(T0, RequestId(1), a, &[1, 2, 3], Some(40))
            .unwrap();
        // b holds blocks 2 and 3 but not the leading block 1: no overlap at all.
        tracker
            .add_request(T0, RequestId(2), b, &[9, 2, 3], Some(20))
            .unwrap();
        let rows = tracker.project(T0, &[1, 2, 7, 8]);
        assert_eq!(
            rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![a, b, c]
        );
        assert_eq!(
            rows[0],
            RankLoad {
                rank: a,
                active_prefill_tokens: 40,
                active_decode_blocks: 3,
                additional_active_blocks: 2,
                active_requests: 1,
            }
        );
        assert_eq!(rows[0].potential_decode_blocks(), 5);
        assert_eq!(rows[1].additional_active_blocks, 4);
        assert_eq!(rows[2].additional_active_blocks, 4);
        assert_eq!(rows[2].active_decode_blocks, 0);
        assert!(
            tracker
                .project(T0, &[])
                .iter()
                .all(|r| r.additional_active_blocks == 0)
        );
    }

    #[test]
    fn ranks_are_sorted_and_remove_worker_drops_its_bookings() {
        let mut tracker = tracker_with(&[rank(2, 1), rank(1, 0), rank(2, 0)]);
        assert!(!tracker.add_rank(rank(1, 0)), "re-adding is a no-op");
        assert_eq!(tracker.ranks(), vec![rank(1, 0), rank(2, 0), rank(2, 1)]);
        tracker
            .add_request(T0, RequestId(5), rank(2, 1), &[1], Some(3))
            .unwrap();
        tracker
            .add_request(T0, RequestId(4), rank(2, 0), &[1], Some(3))
            .unwrap();
        tracker
            .add_request(T0, RequestId(6), rank(1, 0), &[1], Some(3))
            .unwrap();
        assert_eq!(tracker.remove_worker(2), vec![RequestId(4), RequestId(5)]);
        assert_eq!(tracker.ranks(), vec![rank(1, 0)]);
        assert_eq!(tracker.free(RequestId(5)), None);
        assert_eq!(tracker.free(RequestId(6)), Some(rank(1, 0)));
        tracker.check_invariants().unwrap();
    }

    #[derive(Clone, Debug)]
    enum Op {
        AddRank(u64, u32),
        RemoveWorker(u64),
        Add(u64, u64, u32, Vec<SeqHash>, Option<u64>),
        Complete(u64),
        Free(u64),
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u64, 0..3u32).prop_map(|(w, d)| Op::AddRank(w, d)),
            (0..4u64).prop_map(Op::RemoveWorker),
            (
                0..12u64,
                0..4u64,
                0..3u32,
                prop::collection::vec(0..8u64, 0..6),
                prop::option::of(0..500u64)
            )
                .prop_map(|(id, w, d, h, p)| Op::Add(id, w, d, h, p)),
            (0..12u64).prop_map(Op::Complete),
            (0..12u64).prop_map(Op::Free),
        ]
    }

    proptest! {
        #[test]
        fn no_operation_sequence_panics_or_breaks_invariants(
            ops in prop::collection::vec(op_strategy(), 0..80)
        ) {
            let mut tracker = LoadTracker::new();
            for op in ops {
                match op {
                    Op::AddRank(w, d) => { tracker.add_rank(rank(w, d)); }
                    Op::RemoveWorker(w) => { tracker.remove_worker(w); }
                    Op::Add(id, w, d, hashes, prefill) => {
                        let _ = tracker.add_request(T0, RequestId(id), rank(w, d), &hashes, prefill);
                    }
                    Op::Complete(id) => { tracker.mark_prefill_completed(RequestId(id)); }
                    Op::Free(id) => { tracker.free(RequestId(id)); }
                }
                prop_assert_eq!(tracker.check_invariants(), Ok(()));
                let _ = tracker.project(T0, &[0, 1, 2]);
            }
            for id in 0..12 {
                tracker.free(RequestId(id));
            }
            for r in tracker.ranks() {
                prop_assert_eq!(tracker.active_blocks(r), 0);
                prop_assert_eq!(tracker.active_prefill_tokens(r), 0);
                prop_assert_eq!(tracker.active_requests(r), 0);
            }
        }
    }
}
