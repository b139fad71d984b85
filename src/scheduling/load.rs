//! Router-side load tracking per worker rank: active prefill tokens, active blocks, requests.
//!
//! This is the router's own book of what it has sent where (Dynamo's `ActiveSequences` per rank
//! and `ActiveSequencesMultiWorker` over them). It is not fed by worker events: a booking is
//! added when a request is admitted, its prefill tokens are dropped when the first output token
//! arrives, and everything is released when the request is freed.
//!
//! Model: the static prefill model (active prefill tokens = sum of the initial effective
//! prefill tokens of requests not yet prefill-completed). Prompt blocks are counted as
//! distinct live prompt prefixes per rank (a shared prefix counts once), kept as a compressed
//! trie of the booked prompts. Booking, release and a query's overlap walk the trie comparing
//! hashes in place: hash-map work is per trie segment (a run of blocks where no booked prompt
//! branches or ends), not per block.
//!
//! The trie compares prompts as sequences of hashes and never assumes what a hash means. For
//! chained prompts (a sequence hash commits to its whole prefix, so the same hash always
//! stands for the same prefix) distinct live prefixes are distinct live hashes, and every
//! count equals that of a refcount per hash. For hashes that are not chains (a hash repeated
//! in a prompt, a hash after two different prefixes) the counts are those of the sequences:
//! `active_blocks` counts distinct live prefixes (`[5, 5]` is two blocks) and a query's
//! overlap is the longest prefix it shares with a booked prompt.
//!
//! Not modelled (extension points are marked `EXTENSION`): output-block tracking with OSL decay,
//! the AIC prefill-duration decay, and stale-request expiry.

use super::types::{RequestId, SeqHash, WorkerId, WorkerWithDpRank};
use crate::time::SimTime;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
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
    /// The segment ending at its prompt's last block; `None` for an empty prompt.
    end: Option<SegmentId>,
    /// `Some` until the first output token (static prefill model); never `Some(0)`.
    prefill_tokens: Option<u64>,
    /// When it was booked; stale-request expiry (EXTENSION: not modelled) would read it.
    booked_at: SimTime,
    /// Its prompt's first block (`None` for an empty prompt): the root it may leave.
    root: Option<SeqHash>,
}

/// A segment's slot in its rank's slab.
type SegmentId = u32;

/// The parent of a root segment.
const NO_SEGMENT: SegmentId = SegmentId::MAX;

/// A run of consecutive live blocks with no branch and no booking ending inside it: an edge
/// of the rank's compressed prefix trie.
#[derive(Clone, Debug, Default)]
struct Segment {
    /// Its blocks in prompt order; empty only in a free slot.
    hashes: Vec<SeqHash>,
    /// The segment ending at the block before its first ([`NO_SEGMENT`] for a root).
    parent: SegmentId,
    /// Bookings whose prompt ends at its last block.
    ending: u32,
    /// Live segments whose parent it is.
    children: u32,
}

/// Where a query leaves a rank's trie.
#[derive(Clone, Copy, Debug)]
struct Divergence {
    /// Leading query blocks that are live: the longest prefix it shares with a booked prompt.
    matched: usize,
    /// The segment holding the last matched block ([`NO_SEGMENT`] when none matched).
    segment: SegmentId,
    /// Blocks of `segment` matched, from its first.
    within: usize,
}

/// Per-rank counters, kept incrementally so every getter is O(1).
///
/// The live blocks are the prefixes of the rank's booked prompts, kept as a compressed trie:
/// each [`Segment`] is a run of blocks, split where prompts branch or end. Booking walks the
/// trie along the prompt, comparing hashes in place, and adds at most one segment (plus one
/// split); release removes the segments nothing holds any more. Per-block work is a
/// sequential comparison or copy, and hash-map work is per segment, not per block.
///
/// Splits are not undone when the booking that caused one ends (a segment then has one child
/// and no booking ending in it): a walk crosses one more edge there, and since every segment
/// holds a block, there are never more segments than live blocks.
#[derive(Clone, Debug, Default)]
struct RankState {
    /// Segment slots; a free one has no hashes and its id is in `free_ids`.
    segments: Vec<Segment>,
    free_ids: Vec<SegmentId>,
    /// (parent segment or [`NO_SEGMENT`], first hash) -> the live segment there.
    edges: FxHashMap<(SegmentId, SeqHash), SegmentId>,
    /// Blocks over all live segments.
    live_blocks: u64,
    active_prefill_tokens: u64,
    active_requests: u64,
    // EXTENSION: output blocks (weighted by OSL decay) would be summed here and added to
    // `active_blocks`.
}

impl RankState {
    fn segment(&self, id: SegmentId) -> &Segment {
        &self.segments[id as usize]
    }

    fn segment_mut(&mut self, id: SegmentId) -> &mut Segment {
        &mut self.segments[id as usize]
    }

    /// Follows `query` down the trie as far as it matches.
    fn diverge(&self, query: &[SeqHash]) -> Divergence {
        let mut at = Divergence {
            matched: 0,
            segment: NO_SEGMENT,
            within: 0,
        };
        // Each turn matches at least one more block (the edge's first) or stops: bounded by
        // the query's length.
        while let Some(&next) = query.get(at.matched) {
            if at.segment != NO_SEGMENT && at.within < self.segment(at.segment).hashes.len() {
                break;
            }
            let Some(&child) = self.edges.get(&(at.segment, next)) else {
                break;
            };
            let common = self
                .segment(child)
                .hashes
                .iter()
                .zip(&query[at.matched..])
                .take_while(|(live, asked)| live == asked)
                .count();
            if common == 0 {
                debug_assert!(false, "an edge's key is not its segment's first block");
                break;
            }
            at = Divergence {
                matched: at.matched + common,
                segment: child,
                within: common,
            };
        }
        at
    }

    /// Number of leading `query` hashes live on this rank.
    fn overlap_depth(&self, query: &[SeqHash]) -> usize {
        self.diverge(query).matched
    }

    /// Whether a live prompt starts with block `first` (a root of the trie).
    fn has_root(&self, first: SeqHash) -> bool {
        self.edges.contains_key(&(NO_SEGMENT, first))
    }

    /// The first blocks of its live prompts.
    fn roots(&self) -> impl Iterator<Item = SeqHash> + '_ {
        let roots = self
            .edges
            .keys()
            .filter(|(parent, _)| *parent == NO_SEGMENT);
        roots.map(|&(_, first)| first)
    }

    /// The rank's row for a query that would add `additional_active_blocks` blocks here.
    fn row(&self, rank: WorkerWithDpRank, additional_active_blocks: u64) -> RankLoad {
        RankLoad {
            rank,
            active_prefill_tokens: self.active_prefill_tokens,
            active_decode_blocks: self.active_blocks(),
            additional_active_blocks,
            active_requests: self.active_requests,
        }
    }

    fn active_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Makes `hashes` live for one more booking and returns the segment it ends at.
    fn acquire_blocks(&mut self, hashes: &[SeqHash]) -> Option<SegmentId> {
        if hashes.is_empty() {
            return None;
        }
        let at = self.diverge(hashes);
        let mut end = at.segment;
        if at.segment != NO_SEGMENT && at.within < self.segment(at.segment).hashes.len() {
            end = self.split(at.segment, at.within);
        }
        if at.matched < hashes.len() {
            end = self.add_segment(end, &hashes[at.matched..]);
            self.live_blocks += (hashes.len() - at.matched) as u64;
        }
        let segment = self.segment_mut(end);
        segment.ending = segment.ending.saturating_add(1);
        Some(end)
    }

    /// Splits segment `id` after its first `head_len` blocks (0 < `head_len` < its length).
    /// The tail keeps the id, so bookings ending there and children stay attached; the new
    /// head takes its place under the parent. Returns the head's id.
    fn split(&mut self, id: SegmentId, head_len: usize) -> SegmentId {
        let segment = self.segment_mut(id);
        let tail = segment.hashes.split_off(head_len);
        let head = std::mem::replace(&mut segment.hashes, tail);
        let (parent, head_first, tail_first) = (segment.parent, head[0], segment.hashes[0]);
        let head_id = self.take_slot(Segment {
            hashes: head,
            parent,
            ending: 0,
            children: 1,
        });
        self.segment_mut(id).parent = head_id;
        self.edges.insert((parent, head_first), head_id);
        self.edges.insert((head_id, tail_first), id);
        head_id
    }

    /// Adds a segment of `hashes` (not empty) under `parent` and returns its id.
    fn add_segment(&mut self, parent: SegmentId, hashes: &[SeqHash]) -> SegmentId {
        let id = self.take_slot(Segment {
            hashes: hashes.to_vec(),
            parent,
            ending: 0,
            children: 0,
        });
        self.edges.insert((parent, hashes[0]), id);
        if parent != NO_SEGMENT {
            let parent = self.segment_mut(parent);
            parent.children = parent.children.saturating_add(1);
        }
        id
    }

    fn take_slot(&mut self, segment: Segment) -> SegmentId {
        match self.free_ids.pop() {
            Some(id) => {
                *self.segment_mut(id) = segment;
                id
            }
            None => {
                // Slots never outnumber live blocks, so they fit below `NO_SEGMENT`.
                self.segments.push(segment);
                (self.segments.len() - 1) as SegmentId
            }
        }
    }

    /// Drops one booking ending at segment `end` and removes the segments nothing holds any
    /// more, walking up to the first that stays live.
    fn release_blocks(&mut self, end: SegmentId) {
        let segment = self.segment_mut(end);
        segment.ending = segment.ending.saturating_sub(1);
        let mut id = end;
        // Each turn frees one segment: bounded by the number of live segments.
        loop {
            let segment = self.segment_mut(id);
            if segment.ending > 0 || segment.children > 0 || segment.hashes.is_empty() {
                return;
            }
            let hashes = std::mem::take(&mut segment.hashes);
            let parent = segment.parent;
            self.edges.remove(&(parent, hashes[0]));
            self.live_blocks = self.live_blocks.saturating_sub(hashes.len() as u64);
            self.free_ids.push(id);
            if parent == NO_SEGMENT {
                return;
            }
            let parent_segment = self.segment_mut(parent);
            parent_segment.children = parent_segment.children.saturating_sub(1);
            id = parent;
        }
    }
}

/// The router's load book over all registered ranks.
///
/// Every public method is total: no sequence of calls panics. Outputs are in rank order.
#[derive(Clone, Debug, Default)]
pub struct LoadTracker {
    ranks: RankStates,
    bookings: FxHashMap<RequestId, Booking>,
    /// For each block that starts a live prompt somewhere, on how many ranks: a query whose
    /// first block is not here overlaps no rank, and [`Self::project`] skips their tries
    /// (a fleet of 128 ranks otherwise looks the block up 128 times per request).
    roots: FxHashMap<SeqHash, u32>,
}

impl LoadTracker {
    /// An empty tracker with no ranks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a rank. Returns false (and changes nothing) if it was already registered.
    pub fn add_rank(&mut self, rank: WorkerWithDpRank) -> bool {
        self.ranks.add(rank)
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
            if let Some(state) = self.ranks.remove(rank) {
                for first in state.roots() {
                    forget_root(&mut self.roots, first);
                }
            }
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
    /// time ([`booked_at`](Self::booked_at)), the input of stale-request expiry. Hashes that
    /// are not a chain are booked as the module documentation says.
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
        let root = prompt_hashes.first().copied();
        let new_root = root.filter(|&first| !state.has_root(first));
        let end = state.acquire_blocks(prompt_hashes);
        if let Some(first) = new_root {
            *self.roots.entry(first).or_insert(0) += 1;
        }
        state.active_prefill_tokens = state
            .active_prefill_tokens
            .saturating_add(prefill_tokens.unwrap_or(0));
        state.active_requests += 1;
        let booking = Booking {
            rank,
            end,
            prefill_tokens,
            booked_at: now,
            root,
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
            if let Some(end) = booking.end {
                state.release_blocks(end);
            }
            if let Some(first) = booking.root.filter(|&first| !state.has_root(first)) {
                forget_root(&mut self.roots, first);
            }
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
        let rooted = self.is_rooted(query_hashes);
        let overlap = |state: &RankState| match rooted {
            true => state.overlap_depth(query_hashes) as u64,
            false => 0,
        };
        self.ranks
            .iter()
            .map(|(&rank, state)| state.row(rank, query_blocks - overlap(state)))
            .collect()
    }

    /// Whether some rank holds the query's first block live: if not, the query overlaps no
    /// rank's booked prompts, and every rank's row for it depends only on its length.
    pub fn is_rooted(&self, query_hashes: &[SeqHash]) -> bool {
        query_hashes
            .first()
            .is_some_and(|first| self.roots.contains_key(first))
    }

    /// The row [`Self::project`] gives for the rank at `index` in rank order, for a query that
    /// is not rooted ([`Self::is_rooted`]) and has `query_blocks` blocks.
    pub fn unrooted_row(&self, index: usize, query_blocks: u64) -> RankLoad {
        let (rank, state) = &self.ranks.entries[index];
        state.row(*rank, query_blocks)
    }

    /// Per rank in rank order, a mark that moves whenever the rank's row may change: a row
    /// derived from a rank stays true while its mark stands and [`Self::layout`] does too.
    pub fn change_marks(&self) -> &[u64] {
        &self.ranks.marks
    }

    /// Moves whenever a rank is added or removed (every rank's position and mark may move).
    pub fn layout(&self) -> u64 {
        self.ranks.layout
    }

    /// Recomputes every counter from the bookings and checks each rank's block trie
    /// (docs/scheduling.md#load-invariants).
    ///
    /// O(bookings + segments); for tests and debug runs. The error says what disagrees.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected: BTreeMap<WorkerWithDpRank, ExpectedRank> = BTreeMap::new();
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
            let want = expected.entry(booking.rank).or_default();
            if let Some(end) = booking.end {
                *want.ending.entry(end).or_insert(0) += 1;
            }
            want.prefill_tokens += booking.prefill_tokens.unwrap_or(0);
            want.requests += 1;
        }
        let empty = ExpectedRank::default();
        let mut roots: FxHashMap<SeqHash, u32> = FxHashMap::default();
        for (rank, actual) in self.ranks.iter() {
            let want = expected.get(rank).unwrap_or(&empty);
            check_rank_matches(*rank, actual, want)?;
            check_trie(*rank, actual, &want.ending)?;
            for first in actual.roots() {
                *roots.entry(first).or_insert(0) += 1;
            }
        }
        if roots != self.roots {
            return Err("the count of ranks per root block drifted from the tries".to_string());
        }
        Ok(())
    }
}

/// The registered ranks' states, sorted by rank: every request reads them all (its load on
/// each rank) and looks up one or two, so a sorted vector serves better than a tree.
///
/// Every way to change a state goes through `get_mut`, `add` or `remove`, which mark it, so a
/// reader can keep what it derived from a rank until the rank's mark moves.
#[derive(Clone, Debug, Default)]
struct RankStates {
    entries: Vec<(WorkerWithDpRank, RankState)>,
    /// Per entry, the value of `changes` when it was last handed out for change.
    marks: Vec<u64>,
    /// Mutable accesses so far; every new mark is a fresh value.
    changes: u64,
    /// Ranks added or removed so far: positions (and so marks) move when it does.
    layout: u64,
}

impl RankStates {
    fn position(&self, rank: &WorkerWithDpRank) -> Result<usize, usize> {
        self.entries.binary_search_by(|(r, _)| r.cmp(rank))
    }

    fn contains_key(&self, rank: &WorkerWithDpRank) -> bool {
        self.position(rank).is_ok()
    }

    /// Registers `rank` with an empty state; false (nothing changes) if it is registered.
    fn add(&mut self, rank: WorkerWithDpRank) -> bool {
        match self.position(&rank) {
            Ok(_) => false,
            Err(at) => {
                self.entries.insert(at, (rank, RankState::default()));
                let mark = self.next_mark();
                self.marks.insert(at, mark);
                self.layout += 1;
                true
            }
        }
    }

    fn remove(&mut self, rank: &WorkerWithDpRank) -> Option<RankState> {
        let at = self.position(rank).ok()?;
        self.marks.remove(at);
        self.layout += 1;
        Some(self.entries.remove(at).1)
    }

    fn next_mark(&mut self) -> u64 {
        self.changes += 1;
        self.changes
    }

    fn get(&self, rank: &WorkerWithDpRank) -> Option<&RankState> {
        let at = self.position(rank).ok()?;
        Some(&self.entries[at].1)
    }

    fn get_mut(&mut self, rank: &WorkerWithDpRank) -> Option<&mut RankState> {
        let at = self.position(rank).ok()?;
        self.marks[at] = self.next_mark();
        Some(&mut self.entries[at].1)
    }

    fn iter(&self) -> impl Iterator<Item = (&WorkerWithDpRank, &RankState)> {
        self.entries.iter().map(|(rank, state)| (rank, state))
    }

    fn keys(&self) -> impl Iterator<Item = &WorkerWithDpRank> {
        self.entries.iter().map(|(rank, _)| rank)
    }
}

/// One rank fewer starts a live prompt with block `first`.
fn forget_root(roots: &mut FxHashMap<SeqHash, u32>, first: SeqHash) {
    if let Some(count) = roots.get_mut(&first) {
        *count -= 1;
        if *count == 0 {
            roots.remove(&first);
        }
    }
}

/// What a rank's counters must be, recomputed from the bookings.
#[derive(Default)]
struct ExpectedRank {
    /// Segment -> bookings ending there.
    ending: FxHashMap<SegmentId, u32>,
    prefill_tokens: u64,
    requests: u64,
}

fn check_rank_matches(
    rank: WorkerWithDpRank,
    actual: &RankState,
    want: &ExpectedRank,
) -> Result<(), String> {
    if actual.active_requests != want.requests {
        return Err(format!(
            "{rank}: {} active requests, bookings say {}",
            actual.active_requests, want.requests
        ));
    }
    if actual.active_prefill_tokens != want.prefill_tokens {
        return Err(format!(
            "{rank}: {} active prefill tokens, bookings say {}",
            actual.active_prefill_tokens, want.prefill_tokens
        ));
    }
    Ok(())
}

/// Checks `state`'s trie against the bookings: each live segment is non-empty, held (by a
/// booking ending there or a child), counts its bookings and children right, hangs under a
/// live parent by the one edge keyed by its first block, and reaches a root; free slots are
/// empty; `live_blocks` is the sum of the live segments' lengths.
fn check_trie(
    rank: WorkerWithDpRank,
    state: &RankState,
    ending: &FxHashMap<SegmentId, u32>,
) -> Result<(), String> {
    let slots = state.segments.len();
    let free: BTreeSet<SegmentId> = state.free_ids.iter().copied().collect();
    if free.len() != state.free_ids.len() || free.iter().any(|&id| id as usize >= slots) {
        return Err(format!("{rank}: the free slot list is not a set of slots"));
    }
    let blocks = check_segments(rank, state, ending, &free)?;
    if let Some(id) = ending.keys().find(|id| free.contains(id)) {
        return Err(format!("{rank}: a booking ends at free segment {id}"));
    }
    if let Some(id) = ending.keys().find(|&&id| id as usize >= slots) {
        return Err(format!(
            "{rank}: a booking ends at segment {id}, past the slab"
        ));
    }
    check_rooted(rank, state)?;
    let live = slots - free.len();
    if state.edges.len() != live {
        return Err(format!(
            "{rank}: {} edges for {live} live segments",
            state.edges.len()
        ));
    }
    if state.live_blocks != blocks {
        return Err(format!(
            "{rank}: {} live blocks counted, segments hold {blocks}",
            state.live_blocks
        ));
    }
    Ok(())
}

/// Checks each segment of `state` (see [`check_trie`]) but whether it reaches a root;
/// returns the blocks the live ones hold.
fn check_segments(
    rank: WorkerWithDpRank,
    state: &RankState,
    ending: &FxHashMap<SegmentId, u32>,
    free: &BTreeSet<SegmentId>,
) -> Result<u64, String> {
    let mut children: FxHashMap<SegmentId, u32> = FxHashMap::default();
    let mut blocks = 0u64;
    for (index, segment) in state.segments.iter().enumerate() {
        let id = index as SegmentId;
        if free.contains(&id) != segment.hashes.is_empty() {
            return Err(format!(
                "{rank}: segment {id} is free but holds blocks, or live but empty"
            ));
        }
        if segment.hashes.is_empty() {
            continue;
        }
        blocks += segment.hashes.len() as u64;
        let booked = ending.get(&id).copied().unwrap_or(0);
        if segment.ending != booked {
            return Err(format!(
                "{rank}: segment {id} ends {} bookings, bookings say {booked}",
                segment.ending
            ));
        }
        if state.edges.get(&(segment.parent, segment.hashes[0])) != Some(&id) {
            return Err(format!("{rank}: segment {id} is not reached by its edge"));
        }
        if segment.parent != NO_SEGMENT {
            let parent = state.segments.get(segment.parent as usize);
            if parent.is_none_or(|p| p.hashes.is_empty()) {
                return Err(format!("{rank}: segment {id} hangs under a dead parent"));
            }
            *children.entry(segment.parent).or_insert(0) += 1;
        }
    }
    for (index, segment) in state.segments.iter().enumerate() {
        let id = index as SegmentId;
        let counted = children.get(&id).copied().unwrap_or(0);
        if segment.children != counted {
            return Err(format!(
                "{rank}: segment {id} counts {} children, {counted} name it",
                segment.children
            ));
        }
        if !segment.hashes.is_empty() && segment.ending == 0 && segment.children == 0 {
            return Err(format!("{rank}: segment {id} is live but nothing holds it"));
        }
    }
    Ok(blocks)
}

/// Every walk up from a live segment (through live parents, checked by [`check_segments`])
/// reaches a root: each is walked from once, up to a root or a segment already known to
/// reach one; a walk longer than the slab is a cycle.
fn check_rooted(rank: WorkerWithDpRank, state: &RankState) -> Result<(), String> {
    let slots = state.segments.len();
    let mut rooted = vec![false; slots];
    for start in (0..slots).filter(|&index| !state.segments[index].hashes.is_empty()) {
        let mut path = Vec::new();
        let mut up = start as SegmentId;
        while up != NO_SEGMENT && !rooted[up as usize] && path.len() <= slots {
            path.push(up as usize);
            up = state.segments[up as usize].parent;
        }
        if path.len() > slots {
            return Err(format!("{rank}: segment {start} is on a parent cycle"));
        }
        for index in path {
            rooted[index] = true;
        }
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

    /// A rank's change mark moves with every booking, prefill end and release on it and no
    /// other rank's does; adding or removing a rank moves the layout. An unrooted row is the
    /// row a projection gives.
    #[test]
    fn a_ranks_change_mark_moves_with_its_own_load_only() {
        let (a, b, c) = (rank(1, 0), rank(2, 0), rank(3, 0));
        let mut tracker = tracker_with(&[a, b, c]);
        let mut marks = tracker.change_marks().to_vec();
        let mut moved = |tracker: &LoadTracker| {
            let now = tracker.change_marks().to_vec();
            let moved: Vec<usize> = (0..now.len()).filter(|&i| now[i] != marks[i]).collect();
            marks = now;
            moved
        };
        let hashes = [7, 8];
        tracker
            .add_request(T0, RequestId(1), b, &hashes, Some(100))
            .unwrap();
        assert_eq!(moved(&tracker), [1]);
        tracker.mark_prefill_completed(RequestId(1));
        assert_eq!(moved(&tracker), [1]);
        tracker.free(RequestId(1));
        assert_eq!(moved(&tracker), [1]);
        assert_eq!(tracker.free(RequestId(1)), None);
        assert_eq!(
            moved(&tracker),
            [] as [usize; 0],
            "nothing to free changes nothing"
        );
        tracker
            .add_request(T0, RequestId(2), c, &hashes, None)
            .unwrap();
        assert_eq!(moved(&tracker), [2]);
        let query = [9, 10, 11];
        assert!(!tracker.is_rooted(&query));
        let projected = tracker.project(T0, &query);
        for (index, row) in projected.iter().enumerate() {
            assert_eq!(tracker.unrooted_row(index, 3), *row);
        }
        let layout = tracker.layout();
        tracker.add_rank(rank(4, 0));
        assert_ne!(tracker.layout(), layout);
        let layout = tracker.layout();
        tracker.remove_worker(1);
        assert_ne!(tracker.layout(), layout);
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

    /// Sequence hashes of `tokens`, one token per block, chained like real prompts.
    fn chained(tokens: &[u64]) -> Vec<SeqHash> {
        let mut parent = None;
        tokens
            .iter()
            .map(|&token| {
                let hash = crate::scheduling::hashing::chain(parent, token);
                parent = Some(hash);
                hash
            })
            .collect()
    }

    #[test]
    fn a_prompt_inside_a_longer_live_one_adds_nothing_and_frees_in_either_order() {
        let a = rank(1, 0);
        let long = chained(&[1, 2, 3, 4]);
        let short = &long[..2];
        for long_first in [true, false] {
            let mut tracker = tracker_with(&[a]);
            tracker
                .add_request(T0, RequestId(1), a, &long, None)
                .unwrap();
            let row = tracker.project(T0, short)[0];
            assert_eq!(row.additional_active_blocks, 0, "the prefix is all live");
            tracker
                .add_request(T0, RequestId(2), a, short, None)
                .unwrap();
            assert_eq!(
                tracker.active_blocks(a),
                4,
                "the shorter prompt adds no block"
            );
            tracker.check_invariants().unwrap();
            let (first, second, left) = if long_first {
                (RequestId(1), RequestId(2), 2)
            } else {
                (RequestId(2), RequestId(1), 4)
            };
            tracker.free(first);
            assert_eq!(tracker.active_blocks(a), left, "long first: {long_first}");
            assert_eq!(
                tracker.project(T0, &long)[0].additional_active_blocks,
                4 - left
            );
            tracker.check_invariants().unwrap();
            tracker.free(second);
            assert_eq!(tracker.active_blocks(a), 0);
            assert_eq!(tracker.project(T0, &long)[0].additional_active_blocks, 4);
            tracker.check_invariants().unwrap();
        }
    }

    #[test]
    fn a_branch_dies_alone_and_its_fork_survives() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        let left = chained(&[1, 2, 3, 4]);
        let right = chained(&[1, 2, 5]);
        let again = chained(&[1, 2, 3, 4]);
        tracker
            .add_request(T0, RequestId(1), a, &left, None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(2), a, &right, None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(3), a, &again, None)
            .unwrap();
        assert_eq!(
            tracker.active_blocks(a),
            5,
            "1,2 shared; 3,4 and 5 on their branches"
        );
        tracker.free(RequestId(1));
        assert_eq!(
            tracker.active_blocks(a),
            5,
            "an identical prompt still holds 3,4"
        );
        tracker.free(RequestId(3));
        assert_eq!(
            tracker.active_blocks(a),
            3,
            "3,4 die; the fork at 2 stays for 5"
        );
        assert_eq!(tracker.project(T0, &left)[0].additional_active_blocks, 2);
        tracker.check_invariants().unwrap();
        tracker.free(RequestId(2));
        assert_eq!(tracker.active_blocks(a), 0);
    }

    #[test]
    fn hashes_that_are_not_chains_count_as_sequences_and_free_to_empty() {
        let a = rank(1, 0);
        let mut tracker = tracker_with(&[a]);
        // A repeated hash, then hash 2 after two different prefixes.
        tracker
            .add_request(T0, RequestId(1), a, &[5, 5, 5], None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(2), a, &[1, 2], None)
            .unwrap();
        tracker
            .add_request(T0, RequestId(3), a, &[3, 2, 4], None)
            .unwrap();
        assert_eq!(
            tracker.active_blocks(a),
            8,
            "prefixes [5] [5,5] [5,5,5], [1] [1,2], [3] [3,2] [3,2,4]"
        );
        let overlaps: Vec<u64> = [&[5, 5, 1][..], &[2, 4], &[3, 2, 9]]
            .iter()
            .map(|q| q.len() as u64 - tracker.project(T0, q)[0].additional_active_blocks)
            .collect();
        assert_eq!(
            overlaps,
            vec![2, 0, 2],
            "the longest prefix shared with a prompt"
        );
        tracker.check_invariants().unwrap();
        for id in 1..=3 {
            tracker.free(RequestId(id));
            tracker.check_invariants().unwrap();
        }
        assert_eq!(tracker.active_blocks(a), 0);
    }

    /// A model of the book that keeps a count per key of each booked prompt. With each
    /// prompt's hashes as keys it is the refcount book this tracker replaced (the oracle for
    /// chained prompts); with its prefixes as keys, the sequence semantics for any hashes.
    struct Oracle<K> {
        keys: fn(&[SeqHash]) -> Vec<K>,
        ranks: BTreeMap<WorkerWithDpRank, OracleRank<K>>,
        bookings: BTreeMap<RequestId, (WorkerWithDpRank, Vec<K>, Option<u64>)>,
    }

    struct OracleRank<K> {
        counts: BTreeMap<K, u32>,
        prefill_tokens: u64,
        requests: u64,
    }

    fn hash_keys(hashes: &[SeqHash]) -> Vec<SeqHash> {
        hashes.to_vec()
    }

    fn prefix_keys(hashes: &[SeqHash]) -> Vec<Vec<SeqHash>> {
        (1..=hashes.len()).map(|k| hashes[..k].to_vec()).collect()
    }

    impl<K: Ord + Clone> Oracle<K> {
        fn new(keys: fn(&[SeqHash]) -> Vec<K>) -> Self {
            Oracle {
                keys,
                ranks: BTreeMap::new(),
                bookings: BTreeMap::new(),
            }
        }

        fn add_rank(&mut self, r: WorkerWithDpRank) -> bool {
            let fresh = !self.ranks.contains_key(&r);
            self.ranks.entry(r).or_insert_with(|| OracleRank {
                counts: BTreeMap::new(),
                prefill_tokens: 0,
                requests: 0,
            });
            fresh
        }

        fn remove_worker(&mut self, worker: WorkerId) -> Vec<RequestId> {
            self.ranks.retain(|r, _| r.worker_id != worker);
            let dropped: Vec<RequestId> = self
                .bookings
                .iter()
                .filter(|(_, b)| b.0.worker_id == worker)
                .map(|(id, _)| *id)
                .collect();
            for id in &dropped {
                self.bookings.remove(id);
            }
            dropped
        }

        fn add_request(
            &mut self,
            id: RequestId,
            r: WorkerWithDpRank,
            hashes: &[SeqHash],
            prefill: Option<u64>,
        ) -> Result<(), LoadError> {
            if self.bookings.contains_key(&id) {
                return Err(LoadError::DuplicateRequest(id));
            }
            let state = self.ranks.get_mut(&r).ok_or(LoadError::WorkerNotFound(r))?;
            let prefill = prefill.filter(|&t| t > 0);
            let keys = (self.keys)(hashes);
            for key in &keys {
                *state.counts.entry(key.clone()).or_insert(0) += 1;
            }
            state.prefill_tokens += prefill.unwrap_or(0);
            state.requests += 1;
            self.bookings.insert(id, (r, keys, prefill));
            Ok(())
        }

        fn mark_prefill_completed(&mut self, id: RequestId) -> Option<WorkerWithDpRank> {
            let (r, _, prefill) = self.bookings.get_mut(&id)?;
            if let Some(tokens) = prefill.take() {
                self.ranks.get_mut(r).unwrap().prefill_tokens -= tokens;
            }
            Some(*r)
        }

        fn free(&mut self, id: RequestId) -> Option<WorkerWithDpRank> {
            let (r, keys, prefill) = self.bookings.remove(&id)?;
            let state = self.ranks.get_mut(&r).unwrap();
            for key in keys {
                let count = state.counts.get_mut(&key).unwrap();
                *count -= 1;
                if *count == 0 {
                    state.counts.remove(&key);
                }
            }
            state.prefill_tokens -= prefill.unwrap_or(0);
            state.requests -= 1;
            Some(r)
        }

        fn project(&self, query: &[SeqHash]) -> Vec<RankLoad> {
            let keys = (self.keys)(query);
            self.ranks
                .iter()
                .map(|(&r, state)| {
                    let overlap = keys
                        .iter()
                        .take_while(|k| state.counts.contains_key(k))
                        .count();
                    RankLoad {
                        rank: r,
                        active_prefill_tokens: state.prefill_tokens,
                        active_decode_blocks: state.counts.len() as u64,
                        additional_active_blocks: (query.len() - overlap) as u64,
                        active_requests: state.requests,
                    }
                })
                .collect()
        }
    }

    /// One step of a random workload; prompts are given by index into a pool.
    #[derive(Clone, Debug)]
    enum Op {
        AddRank(u64, u32),
        RemoveWorker(u64),
        /// Request id, worker, dp rank, prompt from the pool, blocks kept, prefill tokens.
        Add(u64, u64, u32, usize, usize, Option<u64>),
        Complete(u64),
        Free(u64),
        /// Project a prompt from the pool, cut to so many blocks.
        Project(usize, usize),
    }

    const POOL: usize = 6;
    const IDS: u64 = 10;

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..3u64, 0..2u32).prop_map(|(w, d)| Op::AddRank(w, d)),
            1 => (0..3u64).prop_map(Op::RemoveWorker),
            6 => (0..IDS, 0..3u64, 0..2u32, 0..POOL, 0..12usize, prop::option::of(0..500u64))
                .prop_map(|(id, w, d, p, cut, pre)| Op::Add(id, w, d, p, cut, pre)),
            2 => (0..IDS).prop_map(Op::Complete),
            4 => (0..IDS).prop_map(Op::Free),
            2 => (0..POOL, 0..12usize).prop_map(|(p, cut)| Op::Project(p, cut)),
        ]
    }

    /// Runs `ops` on a tracker and on `oracle`, comparing every answer and every getter after
    /// each step, then frees everything and checks that every rank is empty.
    fn run_against<K: Ord + Clone>(
        pool: &[Vec<SeqHash>],
        ops: Vec<Op>,
        mut oracle: Oracle<K>,
    ) -> Result<(), TestCaseError> {
        let prompt = |p: usize, cut: usize| &pool[p][..cut.min(pool[p].len())];
        let mut tracker = LoadTracker::new();
        let mut query: &[SeqHash] = &[];
        for op in ops {
            match op {
                Op::AddRank(w, d) => {
                    prop_assert_eq!(tracker.add_rank(rank(w, d)), oracle.add_rank(rank(w, d)));
                }
                Op::RemoveWorker(w) => {
                    prop_assert_eq!(tracker.remove_worker(w), oracle.remove_worker(w));
                }
                Op::Add(id, w, d, p, cut, prefill) => {
                    let (id, r, hashes) = (RequestId(id), rank(w, d), prompt(p, cut));
                    prop_assert_eq!(
                        tracker.add_request(T0, id, r, hashes, prefill),
                        oracle.add_request(id, r, hashes, prefill)
                    );
                    query = hashes;
                }
                Op::Complete(id) => {
                    prop_assert_eq!(
                        tracker.mark_prefill_completed(RequestId(id)),
                        oracle.mark_prefill_completed(RequestId(id))
                    );
                }
                Op::Free(id) => {
                    prop_assert_eq!(tracker.free(RequestId(id)), oracle.free(RequestId(id)));
                }
                Op::Project(p, cut) => query = prompt(p, cut),
            }
            assert_same_as_oracle(&tracker, &oracle, query)?;
            for hashes in pool {
                prop_assert_eq!(tracker.project(T0, hashes), oracle.project(hashes));
            }
        }
        for id in 0..IDS {
            prop_assert_eq!(tracker.free(RequestId(id)), oracle.free(RequestId(id)));
        }
        assert_same_as_oracle(&tracker, &oracle, query)?;
        for r in tracker.ranks() {
            prop_assert_eq!(tracker.active_blocks(r), 0);
            prop_assert_eq!(tracker.active_prefill_tokens(r), 0);
            prop_assert_eq!(tracker.active_requests(r), 0);
        }
        Ok(())
    }

    fn assert_same_as_oracle<K: Ord + Clone>(
        tracker: &LoadTracker,
        oracle: &Oracle<K>,
        query: &[SeqHash],
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(tracker.check_invariants(), Ok(()));
        prop_assert_eq!(tracker.project(T0, query), oracle.project(query));
        prop_assert_eq!(
            tracker.ranks(),
            oracle.ranks.keys().copied().collect::<Vec<_>>()
        );
        for w in 0..3 {
            for d in 0..2 {
                let r = rank(w, d);
                let want = oracle.ranks.get(&r);
                prop_assert_eq!(
                    tracker.active_blocks(r),
                    want.map_or(0, |s| s.counts.len() as u64)
                );
                prop_assert_eq!(
                    tracker.active_prefill_tokens(r),
                    want.map_or(0, |s| s.prefill_tokens)
                );
                prop_assert_eq!(tracker.active_requests(r), want.map_or(0, |s| s.requests));
                prop_assert_eq!(tracker.has_rank(r), want.is_some());
            }
        }
        for id in 0..IDS {
            prop_assert_eq!(
                tracker.rank_of(RequestId(id)),
                oracle.bookings.get(&RequestId(id)).map(|b| b.0)
            );
        }
        prop_assert_eq!(tracker.request_count(), oracle.bookings.len());
        prop_assert_eq!(tracker.check_invariants(), Ok(()));
        Ok(())
    }

    /// A few prompts over a two-token alphabet: paths in a small token tree, so they share
    /// prefixes heavily; cutting them gives prompts that are prefixes of each other or equal.
    fn token_pool() -> impl Strategy<Value = Vec<Vec<u64>>> {
        prop::collection::vec(prop::collection::vec(0..2u64, 0..12), POOL)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn chained_prompts_count_like_a_refcount_per_hash(
            tokens in token_pool(),
            ops in prop::collection::vec(op_strategy(), 0..120)
        ) {
            let pool: Vec<Vec<SeqHash>> = tokens.iter().map(|t| chained(t)).collect();
            run_against(&pool, ops, Oracle::new(hash_keys))?;
        }

        #[test]
        fn any_operations_on_any_hashes_match_the_sequence_model(
            pool in prop::collection::vec(prop::collection::vec(0..4u64, 0..12), POOL),
            ops in prop::collection::vec(op_strategy(), 0..120)
        ) {
            // Hashes drawn from 0..4: repeats within a prompt and hashes after different
            // prefixes. The refcount model does not apply; the sequence model does.
            run_against(&pool, ops, Oracle::new(prefix_keys))?;
        }
    }
}
