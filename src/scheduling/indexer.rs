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
use crate::memory::CACHE_RESIDENT_BLOCKS;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

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
/// The map holds every cached block of every rank (millions, in a large fleet), so an entry
/// is kept to 12 bytes: the hash and a 32-bit holder code (see [`Holder`]). A block is usually held by one rank,
/// whose small index (ranks are numbered as they first store a block) is the code; a block
/// several ranks hold points into a side table of sorted index lists. Per-rank block counts
/// answer `block_count` and `ranks`; clearing a rank scans the map (Cleared events and worker
/// removal are rare).
#[derive(Clone, Debug)]
pub struct OverlapIndexer {
    holders: HashTable<Holder>,
    /// Holder lists of shared blocks (at least two rank indices, sorted), by `code & !SHARED`;
    /// a free list is empty and listed in `free_lists`.
    lists: Vec<Vec<u32>>,
    free_lists: Vec<u32>,
    /// Each rank index's rank, and back (every event looks its rank up: a hash map, never
    /// iterated, answers in one probe where a tree of 128 ranks walked seven nodes).
    rank_of: Vec<WorkerWithDpRank>,
    index_of: FxHashMap<WorkerWithDpRank, u32>,
    /// `identity[i] == i` for every rank index: a lone holder's code, borrowable as a slice.
    identity: Vec<u32>,
    /// Blocks held, by rank index; `None` for a rank not counted (never stored, or removed).
    block_counts: Vec<Option<usize>>,
    /// An event's blocks are probed first once the map holds this many ([`Self::warm`]).
    warm_from_blocks: usize,
}

/// A holder code with this bit set points into `lists`; otherwise it is a rank index.
const SHARED: u32 = 1 << 31;

/// One block of the index: its sequence hash, held as two halves so that the entry is 12
/// bytes rather than a `(u64, u32)`'s padded 16 (a fleet of 2^21 blocks fills a table of
/// 2^22 entries: 16 MiB less), and its holder code.
#[derive(Clone, Copy, Debug)]
struct Holder {
    hash: [u32; 2],
    code: u32,
}

impl Holder {
    fn new(hash: SeqHash, code: u32) -> Holder {
        let hash = [hash as u32, (hash >> 32) as u32];
        Holder { hash, code }
    }

    fn hash(&self) -> SeqHash {
        u64::from(self.hash[0]) | (u64::from(self.hash[1]) << 32)
    }
}

/// Where the table files a block of hash `hash`.
fn filed(hash: SeqHash) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(hash)
}

/// The table's test for the entry of `hash`.
fn is(hash: SeqHash) -> impl Fn(&Holder) -> bool {
    move |holder| holder.hash() == hash
}

/// Where the table files an entry it moves.
fn filed_holder(holder: &Holder) -> u64 {
    filed(holder.hash())
}

impl Default for OverlapIndexer {
    fn default() -> Self {
        OverlapIndexer {
            holders: HashTable::new(),
            lists: Vec::new(),
            free_lists: Vec::new(),
            rank_of: Vec::new(),
            index_of: FxHashMap::default(),
            identity: Vec::new(),
            block_counts: Vec::new(),
            warm_from_blocks: CACHE_RESIDENT_BLOCKS,
        }
    }
}

impl OverlapIndexer {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index that warms every event's probes, however small it is (tests).
    #[cfg(test)]
    fn always_warming() -> Self {
        OverlapIndexer {
            warm_from_blocks: 0,
            ..Self::default()
        }
    }

    /// Makes room for `blocks` cached blocks at once, so that the index does not grow (and
    /// rehash) step by step while the workers' caches fill.
    pub fn reserve(&mut self, blocks: usize) {
        self.holders
            .reserve(blocks.saturating_sub(self.holders.len()), filed_holder);
    }

    /// How many blocks the index holds without growing (tests).
    #[cfg(test)]
    pub(crate) fn room(&self) -> usize {
        self.holders.capacity()
    }

    /// Applies one KV event from `event.worker`.
    pub fn apply(&mut self, event: &KvEvent) -> EventOutcome {
        let rank = event.worker;
        if let KvEventData::Stored { blocks, .. } | KvEventData::Removed { blocks } = &event.data {
            self.warm(blocks);
        }
        match &event.data {
            KvEventData::Stored { parent, blocks } => self.store(rank, *parent, blocks),
            KvEventData::Removed { blocks } => self.remove_blocks(rank, blocks),
            KvEventData::Cleared => self.clear_rank(rank),
        }
    }

    /// Forgets every rank of `worker` (it left the worker set).
    pub fn remove_worker(&mut self, worker: WorkerId) {
        let ranks: Vec<WorkerWithDpRank> = (self.ranks().into_iter())
            .filter(|rank| rank.worker_id == worker)
            .collect();
        for rank in ranks {
            self.clear_rank(rank);
            if let Some(count) = self.count_mut(rank) {
                *count = None;
            }
        }
    }

    /// For each rank holding a prefix of `query`, the number of leading query blocks it
    /// holds (the first miss ends its match), sorted by rank; ranks with none are left out.
    pub fn overlap_blocks(&self, query: &[SeqHash]) -> Vec<(WorkerWithDpRank, u32)> {
        let Some(first) = query.first() else {
            return Vec::new();
        };
        let Some(first_code) = self.code(*first) else {
            return Vec::new();
        };
        if first_code & SHARED == 0 {
            // One rank holds the first block (the usual case): follow it alone.
            let depth = 1 + query[1..]
                .iter()
                .take_while(|hash| {
                    self.code(**hash)
                        .is_some_and(|code| self.holder_indices(code).contains(&first_code))
                })
                .count();
            return vec![(self.rank_of[first_code as usize], saturating_u32(depth))];
        }
        let mut matching = self.holder_indices(first_code).to_vec();
        let mut overlaps = Vec::with_capacity(matching.len());
        for (depth, hash) in query.iter().enumerate().skip(1) {
            let holders_here = self
                .code(*hash)
                .map_or(&[][..], |code| self.holder_indices(code));
            let depth_blocks = saturating_u32(depth);
            narrow_sorted(&mut matching, holders_here, |dropped| {
                overlaps.push((self.rank_of[dropped as usize], depth_blocks));
            });
            if matching.is_empty() {
                break;
            }
        }
        let full_blocks = saturating_u32(query.len());
        overlaps.extend(
            matching
                .into_iter()
                .map(|index| (self.rank_of[index as usize], full_blocks)),
        );
        overlaps.sort_unstable();
        overlaps
    }

    /// Number of blocks `rank` holds.
    pub fn block_count(&self, rank: WorkerWithDpRank) -> usize {
        self.counted(rank).unwrap_or(0)
    }

    /// Whether `rank` holds `hash`.
    pub fn holds(&self, rank: WorkerWithDpRank, hash: SeqHash) -> bool {
        let (Some(&index), Some(code)) = (self.index_of.get(&rank), self.code(hash)) else {
            return false;
        };
        self.holder_indices(code).binary_search(&index).is_ok()
    }

    /// Ranks that have ever stored a block and not been removed, sorted.
    pub fn ranks(&self) -> Vec<WorkerWithDpRank> {
        let mut ranks: Vec<WorkerWithDpRank> = (self.rank_of.iter().zip(&self.block_counts))
            .filter(|(_, count)| count.is_some())
            .map(|(&rank, _)| rank)
            .collect();
        ranks.sort_unstable();
        ranks
    }

    /// The blocks `rank` is counted to hold, if it is counted.
    fn counted(&self, rank: WorkerWithDpRank) -> Option<usize> {
        let &index = self.index_of.get(&rank)?;
        self.block_counts[index as usize]
    }

    /// The count slot of `rank`, if the rank has an index.
    fn count_mut(&mut self, rank: WorkerWithDpRank) -> Option<&mut Option<usize>> {
        let &index = self.index_of.get(&rank)?;
        Some(&mut self.block_counts[index as usize])
    }

    /// Holder lists are sorted and hold a known rank at most once (a shared list at least
    /// two), each shared list is used by exactly one block, and the per-rank counts add up.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut counted: BTreeMap<WorkerWithDpRank, usize> = BTreeMap::new();
        let mut list_users = vec![0usize; self.lists.len()];
        for holder in &self.holders {
            let (hash, code) = (holder.hash(), holder.code);
            if code & SHARED != 0 {
                let list = (code & !SHARED) as usize;
                let Some(users) = list_users.get_mut(list) else {
                    return Err(format!("holders of {hash:#x} point at no list"));
                };
                *users += 1;
            }
            let indices = self.holder_indices(code);
            let shape_ok = if code & SHARED != 0 {
                indices.len() >= 2
            } else {
                indices.len() == 1
            };
            if !shape_ok || !indices.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!(
                    "holders of {hash:#x} are malformed or not strictly sorted"
                ));
            }
            for &index in indices {
                let Some(rank) = self.rank_of.get(index as usize) else {
                    return Err(format!("holders of {hash:#x} name unknown rank {index}"));
                };
                *counted.entry(*rank).or_default() += 1;
            }
        }
        let free: std::collections::BTreeSet<u32> = self.free_lists.iter().copied().collect();
        for (list, &users) in list_users.iter().enumerate() {
            let is_free = free.contains(&(list as u32));
            if users != usize::from(!is_free) || is_free != self.lists[list].is_empty() {
                return Err(format!("shared list {list} has {users} users"));
            }
        }
        for rank in self.ranks() {
            let count = self.block_count(rank);
            if counted.get(&rank).copied().unwrap_or(0) != count {
                return Err(format!(
                    "{rank} counts {count} blocks but holds {:?}",
                    counted.get(&rank)
                ));
            }
        }
        if let Some(rank) = counted.keys().find(|r| self.counted(**r).is_none()) {
            return Err(format!("{rank} holds blocks but is not counted"));
        }
        Ok(())
    }

    /// Reads, changing nothing, the entries of `blocks`, once the map has outgrown the caches
    /// ([`CACHE_RESIDENT_BLOCKS`]): an event's misses then overlap here, where storing or
    /// removing the blocks one by one would wait for each in turn.
    fn warm(&self, blocks: &[SeqHash]) {
        if blocks.len() < 2 || self.holders.len() < self.warm_from_blocks {
            return;
        }
        for &hash in blocks {
            std::hint::black_box(self.code(hash));
        }
    }

    /// The holder code of `hash`, if a rank holds it.
    fn code(&self, hash: SeqHash) -> Option<u32> {
        self.holders.find(filed(hash), is(hash)).map(|h| h.code)
    }

    /// The sorted rank indices a holder code stands for.
    fn holder_indices(&self, code: u32) -> &[u32] {
        if code & SHARED != 0 {
            &self.lists[(code & !SHARED) as usize]
        } else {
            std::slice::from_ref(&self.identity[code as usize])
        }
    }

    /// The index of `rank`, numbering it if it is new.
    fn index(&mut self, rank: WorkerWithDpRank) -> u32 {
        if let Some(&index) = self.index_of.get(&rank) {
            return index;
        }
        let index = self.rank_of.len() as u32;
        assert!(index < SHARED, "more ranks than holder codes can name");
        self.rank_of.push(rank);
        self.identity.push(index);
        self.block_counts.push(None);
        self.index_of.insert(rank, index);
        index
    }

    /// A shared list holding `indices` (sorted, at least two), reusing a free one.
    fn new_list(&mut self, indices: [u32; 2]) -> u32 {
        let list = match self.free_lists.pop() {
            Some(list) => list,
            None => {
                self.lists.push(Vec::new());
                (self.lists.len() - 1) as u32
            }
        };
        self.lists[list as usize].extend_from_slice(&indices);
        SHARED | list
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
        let index = self.index(rank);
        let mut added = 0;
        for &hash in blocks {
            let code = match self.holders.entry(filed(hash), is(hash), filed_holder) {
                Entry::Vacant(slot) => {
                    slot.insert(Holder::new(hash, index));
                    added += 1;
                    continue;
                }
                Entry::Occupied(slot) => slot.get().code,
            };
            if code & SHARED != 0 {
                let list = &mut self.lists[(code & !SHARED) as usize];
                if let Err(position) = list.binary_search(&index) {
                    list.insert(position, index);
                    added += 1;
                }
            } else if code != index {
                let shared = self.new_list([code.min(index), code.max(index)]);
                if let Some(holder) = self.holders.find_mut(filed(hash), is(hash)) {
                    holder.code = shared;
                }
                added += 1;
            }
        }
        let count = &mut self.block_counts[index as usize];
        *count = Some(count.unwrap_or(0) + added);
        EventOutcome::Applied
    }

    fn remove_blocks(&mut self, rank: WorkerWithDpRank, blocks: &[SeqHash]) -> EventOutcome {
        let Some(&index) = self.index_of.get(&rank) else {
            return EventOutcome::UnknownRank;
        };
        if self.block_counts[index as usize].is_none() {
            return EventOutcome::UnknownRank;
        }
        let mut removed = 0;
        for hash in blocks {
            let Ok(mut slot) = self.holders.find_entry(filed(*hash), is(*hash)) else {
                continue;
            };
            match drop_holder(
                &mut self.lists,
                &mut self.free_lists,
                slot.get().code,
                index,
            ) {
                Dropped::NotHeld => {}
                Dropped::Now(code) => {
                    slot.get_mut().code = code;
                    removed += 1;
                }
                Dropped::Empty => {
                    slot.remove();
                    removed += 1;
                }
            }
        }
        if let Some(count) = &mut self.block_counts[index as usize] {
            *count -= removed;
        }
        EventOutcome::Applied
    }

    fn clear_rank(&mut self, rank: WorkerWithDpRank) -> EventOutcome {
        let Some(&index) = self.index_of.get(&rank) else {
            return EventOutcome::UnknownRank;
        };
        let Some(count) = &mut self.block_counts[index as usize] else {
            return EventOutcome::UnknownRank;
        };
        *count = 0;
        let (lists, free_lists) = (&mut self.lists, &mut self.free_lists);
        self.holders.retain(
            |holder| match drop_holder(lists, free_lists, holder.code, index) {
                Dropped::NotHeld => true,
                Dropped::Now(new) => {
                    holder.code = new;
                    true
                }
                Dropped::Empty => false,
            },
        );
        EventOutcome::Applied
    }
}

/// What dropping one rank from a block's holders left.
enum Dropped {
    /// The rank did not hold it.
    NotHeld,
    /// Others still hold it: the block's new code.
    Now(u32),
    /// Nobody holds it.
    Empty,
}

/// Drops rank `index` from the holders `code` names; a shared list left with one rank is
/// freed and the block coded by that rank again.
fn drop_holder(
    lists: &mut [Vec<u32>],
    free_lists: &mut Vec<u32>,
    code: u32,
    index: u32,
) -> Dropped {
    if code & SHARED == 0 {
        return if code == index {
            Dropped::Empty
        } else {
            Dropped::NotHeld
        };
    }
    let list_index = code & !SHARED;
    let list = &mut lists[list_index as usize];
    let Ok(position) = list.binary_search(&index) else {
        return Dropped::NotHeld;
    };
    list.remove(position);
    if list.len() > 1 {
        return Dropped::Now(code);
    }
    let last = list[0];
    list.clear();
    free_lists.push(list_index);
    Dropped::Now(last)
}

/// Keeps the ranks of `matching` that are also in `holders` (both sorted); reports the others.
fn narrow_sorted(matching: &mut Vec<u32>, holders: &[u32], mut on_dropped: impl FnMut(u32)) {
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

    /// A full fleet's index holds millions of entries: each is 12 bytes, and a hash whose
    /// halves differ is found again whole.
    #[test]
    fn an_index_entry_is_twelve_bytes_and_keeps_its_whole_hash() {
        assert_eq!(std::mem::size_of::<Holder>(), 12);
        let hash: SeqHash = 0x0123_4567_89ab_cdef;
        assert_eq!(Holder::new(hash, 3).hash(), hash);
        let mut index = OverlapIndexer::new();
        let (high_only, low_only) = (0xffff_ffff_0000_0000, 0x0000_0000_ffff_ffff);
        index.apply(&stored(rank(1, 0), None, &[high_only]));
        assert!(index.holds(rank(1, 0), high_only));
        assert!(!index.holds(rank(1, 0), low_only));
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

    /// Everything the index answers about `ranks` and hashes 0..10.
    fn answers(index: &OverlapIndexer) -> Vec<(WorkerWithDpRank, usize, Vec<bool>)> {
        let ranks = index.ranks();
        let hashes = 0..10u64;
        let held = |r| hashes.clone().map(|h| index.holds(r, h)).collect();
        ranks
            .into_iter()
            .map(|r| (r, index.block_count(r), held(r)))
            .collect()
    }

    proptest! {
        #[test]
        fn warming_an_events_probes_changes_no_answer(
            events in prop::collection::vec(event_strategy(), 0..60),
            query in prop::collection::vec(0..10u64, 0..8),
        ) {
            let (mut plain, mut warming) = (OverlapIndexer::new(), OverlapIndexer::always_warming());
            for event in &events {
                prop_assert_eq!(warming.apply(event), plain.apply(event));
            }
            prop_assert_eq!(warming.check_invariants(), Ok(()));
            prop_assert_eq!(answers(&warming), answers(&plain));
            prop_assert_eq!(warming.overlap_blocks(&query), plain.overlap_blocks(&query));
        }

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
