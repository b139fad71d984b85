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
    /// Kept for stale-request expiry (EXTENSION: not modelled yet).
    #[allow(dead_code)]
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
            let Some(count) = self.block_refcounts.get_mut(hash) else {
                debug_assert!(false, "released a block that was never acquired");
                continue;
            };
            *count -= 1;
            if *count == 0 {
                self.block_refcounts.remove(hash);
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
    /// when block tracking is off. On error nothing changes.
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
