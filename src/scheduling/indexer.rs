//! The router's KV overlap indexer: which ranks hold which blocks, fed by KV events.
//!
//! Dynamo keeps a radix tree of blocks with the set of workers holding each node and answers
//! "how many leading blocks of this prompt does each rank hold". Sequence hashes already commit
//! to their whole prefix, so a flat map hash -> ranks answers the same question: walk the query
//! once, narrowing the set of ranks still matching, and a rank's overlap is the depth at which
//! it drops out (a prefix match: the first miss ends it, even if later blocks are held).
//!
//! As in Dynamo, a `Stored` event whose parent block the rank does not hold is dropped whole
//! (the tree has nowhere to attach it); removes of unknown blocks are ignored; duplicate
//! stores are harmless.

use super::types::{KvEvent, KvEventData, SeqHash, WorkerId, WorkerWithDpRank};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

/// What applying one event did, for diagnostics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// The event changed (or confirmed) the index.
    Applied,
    /// A `Stored` event named a parent block its rank does not hold; nothing was stored.
    UnknownParent,
    /// A `Removed` or `Cleared` event for a rank the index has never seen.
    UnknownRank,
}

/// The router's map of cached blocks: for each sequence hash, the ranks holding it.
///
/// A block is usually held by one rank, so the holder list keeps one rank inline and only
/// allocates when a block is shared. Per-rank block counts answer `block_count` and `ranks`;
/// clearing a rank scans the map (Cleared events and worker removal are rare).
#[derive(Clone, Debug, Default)]
pub struct OverlapIndexer {
    holders: FxHashMap<SeqHash, Holders>,
    block_counts: BTreeMap<WorkerWithDpRank, usize>,
}

/// The ranks holding one block, sorted and without duplicates.
#[derive(Clone, Debug)]
enum Holders {
    One(WorkerWithDpRank),
    Many(Vec<WorkerWithDpRank>),
}

impl Holders {
    fn as_slice(&self) -> &[WorkerWithDpRank] {
        match self {
            Holders::One(rank) => std::slice::from_ref(rank),
            Holders::Many(ranks) => ranks,
        }
    }

    /// Adds `rank`; false if it was already a holder.
    fn insert(&mut self, rank: WorkerWithDpRank) -> bool {
        match self {
            Holders::One(only) if *only == rank => false,
            Holders::One(only) => {
                let mut ranks = vec![*only, rank];
                ranks.sort_unstable();
                *self = Holders::Many(ranks);
                true
            }
            Holders::Many(ranks) => match ranks.binary_search(&rank) {
                Ok(_) => false,
                Err(position) => {
                    ranks.insert(position, rank);
                    true
                }
            },
        }
    }

    /// Removes `rank`; returns (whether it was a holder, whether none is left).
    fn remove(&mut self, rank: WorkerWithDpRank) -> (bool, bool) {
        match self {
            Holders::One(only) => (*only == rank, *only == rank),
            Holders::Many(ranks) => match ranks.binary_search(&rank) {
                Ok(position) => {
                    ranks.remove(position);
                    (true, ranks.is_empty())
                }
                Err(_) => (false, ranks.is_empty()),
            },
        }
    }
}

impl OverlapIndexer {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one KV event from `event.worker`.
    pub fn apply(&mut self, event: &KvEvent) -> EventOutcome {
        let rank = event.worker;
        match &event.data {
            KvEventData::Stored { parent, blocks } => self.store(rank, *parent, blocks),
            KvEventData::Removed { blocks } => self.remove_blocks(rank, blocks),
            KvEventData::Cleared => self.clear_rank(rank),
        }
    }

    /// Forgets every rank of `worker` (it left the worker set).
    pub fn remove_worker(&mut self, worker: WorkerId) {
        let ranks: Vec<WorkerWithDpRank> = self
            .block_counts
            .keys()
            .filter(|rank| rank.worker_id == worker)
            .copied()
            .collect();
        for rank in ranks {
            self.clear_rank(rank);
            self.block_counts.remove(&rank);
        }
    }

    /// For each rank holding a prefix of `query`, the number of leading query blocks it
    /// holds (the first miss ends its match), sorted by rank; ranks with none are left out.
    pub fn overlap_blocks(&self, query: &[SeqHash]) -> Vec<(WorkerWithDpRank, u32)> {
        let Some(first) = query.first() else {
            return Vec::new();
        };
        let Some(first_holders) = self.holders.get(first) else {
            return Vec::new();
        };
        let mut matching = first_holders.as_slice().to_vec();
        let mut overlaps = Vec::with_capacity(matching.len());
        for (depth, hash) in query.iter().enumerate().skip(1) {
            let holders_here = self.holders.get(hash).map_or(&[][..], Holders::as_slice);
            let depth_blocks = saturating_u32(depth);
            narrow_sorted(&mut matching, holders_here, |dropped| {
                overlaps.push((dropped, depth_blocks));
            });
            if matching.is_empty() {
                break;
            }
        }
        let full_blocks = saturating_u32(query.len());
        overlaps.extend(matching.into_iter().map(|rank| (rank, full_blocks)));
        overlaps.sort_unstable();
        overlaps
    }

    /// Number of blocks `rank` holds.
    pub fn block_count(&self, rank: WorkerWithDpRank) -> usize {
        self.block_counts.get(&rank).copied().unwrap_or(0)
    }

    /// Whether `rank` holds `hash`.
    pub fn holds(&self, rank: WorkerWithDpRank, hash: SeqHash) -> bool {
        self.holders
            .get(&hash)
            .is_some_and(|h| h.as_slice().binary_search(&rank).is_ok())
    }

    /// Ranks that have ever stored a block and not been removed, sorted.
    pub fn ranks(&self) -> Vec<WorkerWithDpRank> {
        self.block_counts.keys().copied().collect()
    }

    /// Holder lists are non-empty and strictly sorted, and the per-rank counts add up.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut counted: BTreeMap<WorkerWithDpRank, usize> = BTreeMap::new();
        for (hash, holders) in &self.holders {
            let ranks = holders.as_slice();
            if ranks.is_empty() || !ranks.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!(
                    "holders of {hash:#x} are empty or not strictly sorted"
                ));
            }
            for rank in ranks {
                *counted.entry(*rank).or_default() += 1;
            }
        }
        for (rank, count) in &self.block_counts {
            if counted.get(rank).copied().unwrap_or(0) != *count {
                return Err(format!(
                    "{rank} counts {count} blocks but holds {:?}",
                    counted.get(rank)
                ));
            }
        }
        if let Some(rank) = counted.keys().find(|r| !self.block_counts.contains_key(*r)) {
            return Err(format!("{rank} holds blocks but is not counted"));
        }
        Ok(())
    }

    fn store(
        &mut self,
        rank: WorkerWithDpRank,
        parent: Option<SeqHash>,
        blocks: &[SeqHash],
    ) -> EventOutcome {
        if let Some(parent) = parent
            && !self.holds(rank, parent)
        {
            return EventOutcome::UnknownParent;
        }
        let mut added = 0;
        for &hash in blocks {
            let inserted = match self.holders.entry(hash) {
                Entry::Occupied(mut holders) => holders.get_mut().insert(rank),
                Entry::Vacant(slot) => {
                    slot.insert(Holders::One(rank));
                    true
                }
            };
            added += usize::from(inserted);
        }
        *self.block_counts.entry(rank).or_default() += added;
        EventOutcome::Applied
    }

    fn remove_blocks(&mut self, rank: WorkerWithDpRank, blocks: &[SeqHash]) -> EventOutcome {
        let Some(count) = self.block_counts.get_mut(&rank) else {
            return EventOutcome::UnknownRank;
        };
        for hash in blocks {
            let Entry::Occupied(mut holders) = self.holders.entry(*hash) else {
                continue;
            };
            let (removed, empty) = holders.get_mut().remove(rank);
            if empty {
                holders.remove();
            }
            *count -= usize::from(removed);
        }
        EventOutcome::Applied
    }

    fn clear_rank(&mut self, rank: WorkerWithDpRank) -> EventOutcome {
        let Some(count) = self.block_counts.get_mut(&rank) else {
            return EventOutcome::UnknownRank;
        };
        *count = 0;
        self.holders.retain(|_, holders| !holders.remove(rank).1);
        EventOutcome::Applied
    }
}

/// Keeps the ranks of `matching` that are also in `holders` (both sorted); reports the others.
fn narrow_sorted(
    matching: &mut Vec<WorkerWithDpRank>,
    holders: &[WorkerWithDpRank],
    mut on_dropped: impl FnMut(WorkerWithDpRank),
) {
    let mut holder_index = 0;
    matching.retain(|rank| {
        while holder_index < holders.len() && holders[holder_index] < *rank {
            holder_index += 1;
        }
        let kept = holders.get(holder_index) == Some(rank);
        if !kept {
            on_dropped(*rank);
        }
        kept
    });
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rank(worker_id: u64, dp_rank: u32) -> WorkerWithDpRank {
        WorkerWithDpRank::new(worker_id, dp_rank)
    }

    fn stored(worker: WorkerWithDpRank, parent: Option<SeqHash>, blocks: &[SeqHash]) -> KvEvent {
        KvEvent {
            worker,
            event_id: 0,
            data: KvEventData::Stored {
                parent,
                blocks: blocks.to_vec(),
            },
        }
    }

    fn removed(worker: WorkerWithDpRank, blocks: &[SeqHash]) -> KvEvent {
        KvEvent {
            worker,
            event_id: 0,
            data: KvEventData::Removed {
                blocks: blocks.to_vec(),
            },
        }
    }

    fn cleared(worker: WorkerWithDpRank) -> KvEvent {
        KvEvent {
            worker,
            event_id: 0,
            data: KvEventData::Cleared,
        }
    }

    #[test]
    fn overlap_is_the_leading_prefix_per_rank() {
        let (a, b, c) = (rank(1, 0), rank(2, 0), rank(2, 1));
        let mut index = OverlapIndexer::new();
        index.apply(&stored(a, None, &[1, 2, 3, 4]));
        index.apply(&stored(b, None, &[1, 2]));
        index.apply(&stored(c, None, &[1]));
        index.apply(&stored(c, Some(1), &[5]));
        assert_eq!(
            index.overlap_blocks(&[1, 2, 3, 9]),
            vec![(a, 3), (b, 2), (c, 1)]
        );
        assert_eq!(
            index.overlap_blocks(&[1, 2, 3, 4]),
            vec![(a, 4), (b, 2), (c, 1)]
        );
        assert_eq!(
            index.overlap_blocks(&[7, 1, 2]),
            vec![],
            "first miss ends the match"
        );
        assert_eq!(index.overlap_blocks(&[]), vec![]);
        index.check_invariants().unwrap();
    }

    #[test]
    fn a_hole_stops_the_match_even_if_later_blocks_are_held() {
        let a = rank(1, 0);
        let mut index = OverlapIndexer::new();
        index.apply(&stored(a, None, &[1, 2, 3, 4]));
        index.apply(&removed(a, &[2]));
        assert_eq!(index.overlap_blocks(&[1, 2, 3, 4]), vec![(a, 1)]);
        assert!(index.holds(a, 3));
        index.check_invariants().unwrap();
    }

    #[test]
    fn removal_and_clear_forget_blocks() {
        let (a, b) = (rank(1, 0), rank(2, 0));
        let mut index = OverlapIndexer::new();
        index.apply(&stored(a, None, &[1, 2, 3]));
        index.apply(&stored(b, None, &[1, 2, 3]));
        index.apply(&removed(a, &[3]));
        assert_eq!(index.overlap_blocks(&[1, 2, 3]), vec![(a, 2), (b, 3)]);
        assert_eq!(index.apply(&cleared(b)), EventOutcome::Applied);
        assert_eq!(index.overlap_blocks(&[1, 2, 3]), vec![(a, 2)]);
        assert_eq!(index.block_count(b), 0);
        index.check_invariants().unwrap();
    }

    #[test]
    fn unknown_parent_store_is_dropped_whole() {
        let a = rank(1, 0);
        let mut index = OverlapIndexer::new();
        assert_eq!(
            index.apply(&stored(a, Some(42), &[1, 2])),
            EventOutcome::UnknownParent
        );
        assert_eq!(index.block_count(a), 0);
        assert_eq!(index.overlap_blocks(&[1, 2]), vec![]);
    }

    #[test]
    fn unknown_removes_and_clears_are_ignored() {
        let (a, b) = (rank(1, 0), rank(9, 0));
        let mut index = OverlapIndexer::new();
        assert_eq!(index.apply(&removed(b, &[1])), EventOutcome::UnknownRank);
        assert_eq!(index.apply(&cleared(b)), EventOutcome::UnknownRank);
        index.apply(&stored(a, None, &[1]));
        assert_eq!(index.apply(&removed(a, &[77, 1, 1])), EventOutcome::Applied);
        assert_eq!(index.block_count(a), 0);
        index.check_invariants().unwrap();
    }

    #[test]
    fn duplicate_stores_are_idempotent() {
        let a = rank(1, 0);
        let mut index = OverlapIndexer::new();
        index.apply(&stored(a, None, &[1, 2]));
        index.apply(&stored(a, None, &[1, 2]));
        index.apply(&stored(a, Some(1), &[2]));
        assert_eq!(index.block_count(a), 2);
        index.apply(&removed(a, &[2]));
        assert_eq!(index.overlap_blocks(&[1, 2]), vec![(a, 1)]);
        index.check_invariants().unwrap();
    }

    #[test]
    fn remove_worker_drops_all_its_ranks_only() {
        let (a0, a1, b) = (rank(1, 0), rank(1, 1), rank(2, 0));
        let mut index = OverlapIndexer::new();
        for r in [a0, a1, b] {
            index.apply(&stored(r, None, &[1, 2]));
        }
        index.remove_worker(1);
        assert_eq!(index.ranks(), vec![b]);
        assert_eq!(index.overlap_blocks(&[1, 2]), vec![(b, 2)]);
        index.check_invariants().unwrap();
    }

    /// Reference answer: for each rank, count leading query blocks it holds.
    fn naive_overlaps(index: &OverlapIndexer, query: &[SeqHash]) -> Vec<(WorkerWithDpRank, u32)> {
        index
            .ranks()
            .into_iter()
            .map(|r| {
                (
                    r,
                    query.iter().take_while(|h| index.holds(r, **h)).count() as u32,
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    fn event_strategy() -> impl Strategy<Value = KvEvent> {
        let worker = (0..3u64, 0..2u32).prop_map(|(w, d)| rank(w, d));
        let blocks = prop::collection::vec(0..10u64, 0..5);
        prop_oneof![
            (worker.clone(), prop::option::of(0..10u64), blocks.clone())
                .prop_map(|(w, p, b)| stored(w, p, &b)),
            (worker.clone(), blocks).prop_map(|(w, b)| removed(w, &b)),
            worker.prop_map(cleared),
        ]
    }

    proptest! {
        #[test]
        fn overlap_matches_a_naive_prefix_scan(
            events in prop::collection::vec(event_strategy(), 0..60),
            query in prop::collection::vec(0..10u64, 0..8),
        ) {
            let mut index = OverlapIndexer::new();
            for event in &events {
                index.apply(event);
                prop_assert_eq!(index.check_invariants(), Ok(()));
            }
            prop_assert_eq!(index.overlap_blocks(&query), naive_overlaps(&index, &query));
        }
    }
}
