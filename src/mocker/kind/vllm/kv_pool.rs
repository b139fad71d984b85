//! One rank's KV block pool: refcounted active blocks, an LRU of cached inactive blocks keyed by
//! sequence hash, eviction, and the Stored/Removed events those changes publish.
//!
//! Blocks live in a slab indexed by [`BlockId`]. A block is either *private* (a partial block,
//! or any block when prefix caching is off: it has no identity and is freed on release) or
//! *registered* under a sequence hash (a full, computed block that other requests can reuse).
//! A registered block that only its own request could ever look up again ([`Reuse`]) is kept
//! out of the hash index and out of the events' block lists: nobody would find it there.
//! A registered block whose refcount drops to zero stays cached as *inactive* at the tail of an
//! intrusive LRU list; allocation evicts from the head. Every operation is O(1) expected
//! (one hash-table probe at most), and nothing allocates per token.

use crate::scheduling::types::{KvEventData, SeqHash};
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// Index of a block slot in the pool.
pub type BlockId = u32;

const NIL: u32 = u32::MAX;

/// Room a new event's block list starts with: a prefill stores many blocks at once, and
/// growing a list one block at a time reallocates it again and again.
const EVENT_BLOCKS_CAPACITY: usize = 32;

/// A block's slot: 16 bytes, four to a cache line (a fleet's pools hold millions). Its flags
/// are a byte apart, in [`KvPool::marks`]: a pool's marks stay in the caches.
#[derive(Clone, Debug)]
struct Slot {
    /// The sequence hash, meaningful only while [`REGISTERED`].
    hash: SeqHash,
    /// While [`INACTIVE`], its LRU neighbours `[prev, next]` (NIL at either end); otherwise
    /// `[refcount, NIL]`. An inactive block is held by nobody, so the two never meet.
    links: [u32; 2],
}

/// A block's flags ([`KvPool::marks`]).
type Marks = u8;
/// It has a sequence hash (a full, computed block others can reuse).
const REGISTERED: Marks = 1;
/// Its registration was published as a Stored event, so its last copy's eviction is published
/// as Removed (meaningful only while registered).
const PUBLISHED: Marks = 1 << 1;
/// Registered, held by nobody, and in the LRU.
const INACTIVE: Marks = 1 << 2;
/// The current watched probe found it (see [`KvPool::match_prefix_watched`]).
const WATCHED: Marks = 1 << 3;
/// Its events leave its hash out ([`Reuse::OwnerAgain`], [`Reuse::Never`]): no other
/// request can ask the router for it (meaningful only while registered).
const WITHHELD: Marks = 1 << 4;
/// Not in the hash index ([`Reuse::Never`]): no lookup can ask for it (meaningful only while
/// registered).
const UNINDEXED: Marks = 1 << 5;

/// Who may look a block up again once it is registered. Dynamo indexes every block and
/// names every published one in its events; a block no other request of the run can hold
/// needs neither, and leaving it out saves a hash-table insert and removal in the pool and
/// in the router's index, with every answer unchanged. The events keep their shape (one
/// event where Dynamo has one, an empty block list where it names only such blocks), so
/// event counts and ids stay as Dynamo's.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Any request may hold its hash: indexed, and named in its events.
    Shared,
    /// Only its own request holds its hash, and may look it up again (it was preempted and
    /// recomputes): indexed, but left out of its events.
    OwnerAgain,
    /// Nobody will look it up: neither indexed nor named in events, until
    /// [`KvPool::index_unindexed`] says its request may after all.
    Never,
}

/// Emptied event block lists a pool keeps for reuse.
const SPARE_BLOCK_LISTS: usize = 64;

/// How much of a block-hash chain the pool already holds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixMatch {
    /// Leading blocks present (active or inactive).
    pub blocks: u64,
    /// How many of those leading blocks are active (held by some request).
    pub active_blocks: u64,
}

/// The KV block pool of one data-parallel rank.
#[derive(Clone, Debug)]
pub struct KvPool {
    capacity: u64,
    slots: Vec<Slot>,
    /// Each slot's flags.
    marks: Vec<Marks>,
    free: Vec<BlockId>,
    /// The primary copy of each registered hash (the one prefix lookups find), as a block id
    /// hashed by its slot's hash: 4 bytes an entry rather than 16, so that the index of a
    /// full pool stays in the caches (a lookup that finds a block reads its slot anyway, and
    /// an eviction compares ids alone). See [`Self::primary`].
    by_hash: HashTable<BlockId>,
    /// Further copies of a hash, oldest first (two requests computed the same block).
    duplicates: FxHashMap<SeqHash, VecDeque<BlockId>>,
    lru_head: u32,
    lru_tail: u32,
    active: u64,
    inactive: u64,
    events_enabled: bool,
    events: Vec<KvEventData>,
    /// Emptied block lists of applied events, for the next events to fill (bounded by
    /// [`SPARE_BLOCK_LISTS`]).
    spare_block_lists: Vec<Vec<SeqHash>>,
    /// Registrations, then evictions, the caller expects next ([`Self::expect`]): the event
    /// lists that record them make room for all at once instead of doubling again and again.
    expected_stored: usize,
    expected_removed: usize,
    /// The blocks the current watched probe found (marked [`WATCHED`]).
    watched: Vec<BlockId>,
    /// The hash just past the watched prefix, whose registration would lengthen it.
    watch_next: Option<SeqHash>,
    /// Moves on every change that may alter the watched probe's answer.
    watch_changes: u64,
    /// Moves whenever a hash's primary copy is evicted (the hash goes, or a duplicate takes
    /// its place): block ids found by a lookup stay the ones lookups find until it moves.
    primary_changes: u64,
    /// Whether batches of evictions and registrations probe first ([`Self::set_warm_probes`]).
    warm_probes: bool,
    /// The hash of the block last recorded in a Stored event (its list may leave it out): the
    /// parent a block must name to continue that event.
    last_stored: Option<SeqHash>,
}

impl KvPool {
    /// An empty pool of `capacity` blocks. With `events_enabled`, registrations and evictions
    /// are recorded as KV events (Dynamo publishes none when prefix caching is off).
    pub fn new(capacity: u64, events_enabled: bool) -> KvPool {
        assert!(
            capacity > 0 && capacity < u64::from(NIL),
            "pool capacity out of range"
        );
        KvPool {
            capacity,
            slots: Vec::new(),
            marks: Vec::new(),
            free: Vec::new(),
            by_hash: HashTable::new(),
            duplicates: FxHashMap::default(),
            lru_head: NIL,
            lru_tail: NIL,
            active: 0,
            inactive: 0,
            events_enabled,
            events: Vec::new(),
            spare_block_lists: Vec::new(),
            expected_stored: 0,
            expected_removed: 0,
            watched: Vec::new(),
            watch_next: None,
            watch_changes: 0,
            primary_changes: 0,
            warm_probes: false,
            last_stored: None,
        }
    }

    /// Has [`Self::warm_evictions`] and [`Self::warm_lookups`] probe (for a pool among many,
    /// whose tables together outgrow the caches) or do nothing.
    pub fn set_warm_probes(&mut self, warm: bool) {
        self.warm_probes = warm;
    }

    /// Reads, changing nothing, what the next `evictions` evictions will: the LRU's leading
    /// blocks and their entries in the index. When the pool's tables are out of the caches,
    /// each eviction otherwise waits for its misses in turn; here a batch's misses overlap.
    pub fn warm_evictions(&self, evictions: usize) {
        if !self.warm_probes || evictions < 2 {
            return;
        }
        let mut victim = self.lru_head;
        // One block per iteration, at most `evictions`: bounded.
        for _ in 0..evictions {
            let Some(slot) = self.slots.get(victim as usize) else {
                break; // NIL: fewer inactive blocks than evictions
            };
            // An unindexed block's eviction reads no index entry.
            if !self.is(victim, UNINDEXED) {
                let entry = self.by_hash.find(hash_of(slot.hash), |&id| id == victim);
                std::hint::black_box(entry);
            }
            victim = slot.links[1];
        }
    }

    /// Reads, changing nothing, what registering or looking up `hashes` will read: as
    /// [`Self::warm_evictions`], for a batch of registrations.
    pub fn warm_lookups(&self, hashes: &[SeqHash]) {
        if !self.warm_probes || hashes.len() < 2 {
            return;
        }
        for &hash in hashes {
            std::hint::black_box(self.primary(hash));
        }
    }

    /// Makes room for `blocks` blocks (at most the capacity) at once, so that the pool does
    /// not grow and rehash step by step while it fills.
    pub fn reserve(&mut self, blocks: u64) {
        let room = blocks.min(self.capacity) as usize;
        self.slots.reserve(room.saturating_sub(self.slots.len()));
        self.marks.reserve(room.saturating_sub(self.marks.len()));
        let slots = &self.slots;
        self.by_hash
            .reserve(room.saturating_sub(self.by_hash.len()), |&id| {
                slot_hash(slots, id)
            });
    }

    /// Total blocks the pool may hold.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Blocks held by at least one request (private and registered).
    pub fn active_blocks(&self) -> u64 {
        self.active
    }

    /// Cached blocks held by nobody (evictable).
    pub fn inactive_blocks(&self) -> u64 {
        self.inactive
    }

    /// Blocks neither active nor cached.
    pub fn free_blocks(&self) -> u64 {
        self.capacity - self.active - self.inactive
    }

    /// How many requests hold block `id` (0 if it is inactive or free).
    pub fn refcount(&self, id: BlockId) -> u32 {
        match (id as usize) < self.slots.len() {
            true => self.refs(id),
            false => 0,
        }
    }

    /// How many requests hold block `id`, a slot of the pool.
    fn refs(&self, id: BlockId) -> u32 {
        match self.is(id, INACTIVE) {
            true => 0,
            false => self.slots[id as usize].links[0],
        }
    }

    /// Whether block `id` has flag `mark`.
    fn is(&self, id: BlockId, mark: Marks) -> bool {
        self.marks[id as usize] & mark != 0
    }

    /// True if the block registered under `hash` is cached but held by nobody.
    pub fn is_inactive(&self, hash: SeqHash) -> bool {
        self.primary(hash).is_some_and(|id| self.is(id, INACTIVE))
    }

    /// True if a block is registered under `hash` (active or inactive).
    pub fn contains(&self, hash: SeqHash) -> bool {
        self.primary(hash).is_some()
    }

    /// The longest run of leading `hashes` the pool holds, looking at most at `max_blocks`.
    pub fn match_prefix(
        &self,
        hashes: impl IntoIterator<Item = SeqHash>,
        max_blocks: u64,
    ) -> PrefixMatch {
        let mut m = PrefixMatch::default();
        for hash in hashes
            .into_iter()
            .take(usize::try_from(max_blocks).unwrap_or(usize::MAX))
        {
            let Some(id) = self.primary(hash) else {
                break;
            };
            m.blocks += 1;
            if !self.is(id, INACTIVE) {
                m.active_blocks += 1;
            }
        }
        m
    }

    /// [`Self::match_prefix`] that also lists in `ids` (cleared first) the blocks it found,
    /// in chain order, and *watches* its answer: [`Self::watch_changes`] moves whenever
    /// anything happens that may change what the same probe would answer (a found block
    /// evicted or going active <-> inactive, the hash just past the prefix registered), and
    /// only then, but for rare false alarms. Starting a watched probe ends the previous watch.
    pub fn match_prefix_watched(
        &mut self,
        hashes: impl IntoIterator<Item = SeqHash>,
        max_blocks: u64,
        ids: &mut Vec<BlockId>,
    ) -> PrefixMatch {
        ids.clear();
        for id in self.watched.drain(..) {
            self.marks[id as usize] &= !WATCHED;
        }
        self.watch_next = None;
        let mut m = PrefixMatch::default();
        for hash in hashes
            .into_iter()
            .take(usize::try_from(max_blocks).unwrap_or(usize::MAX))
        {
            let Some(id) = self.primary(hash) else {
                self.watch_next = Some(hash);
                break;
            };
            let marks = &mut self.marks[id as usize];
            if *marks & WATCHED == 0 {
                *marks |= WATCHED;
                self.watched.push(id);
            }
            m.blocks += 1;
            if *marks & INACTIVE == 0 {
                m.active_blocks += 1;
            }
            ids.push(id);
        }
        m
    }

    /// The primary copy of `hash`, if the pool holds it.
    fn primary(&self, hash: SeqHash) -> Option<BlockId> {
        let slots = &self.slots;
        self.by_hash
            .find(hash_of(hash), |&id| slots[id as usize].hash == hash)
            .copied()
    }

    /// Moves whenever the answer of the last [`Self::match_prefix_watched`] may have changed.
    pub fn watch_changes(&self) -> u64 {
        self.watch_changes
    }

    /// Moves whenever a hash's primary copy is evicted: while it stays put, the ids a lookup
    /// found are still the blocks that lookup would find.
    pub fn primary_changes(&self) -> u64 {
        self.primary_changes
    }

    /// The block lookups find under `hash`, if any.
    pub fn lookup(&self, hash: SeqHash) -> Option<BlockId> {
        self.primary(hash)
    }

    /// Takes a reference to the registered block `hash`, reactivating it if it was inactive.
    /// None if the pool does not hold it.
    pub fn acquire(&mut self, hash: SeqHash) -> Option<BlockId> {
        let id = self.primary(hash)?;
        self.add_ref(id);
        Some(id)
    }

    /// [`Self::acquire`] of a block already looked up: `id` must be the block lookups find
    /// under its hash (no primary change since the lookup; see [`Self::primary_changes`]).
    pub fn acquire_id(&mut self, id: BlockId) {
        debug_assert!(
            self.is(id, REGISTERED),
            "acquire_id of an unregistered block"
        );
        self.add_ref(id);
    }

    /// A fresh private block, evicting the least recently used inactive block if the pool is
    /// full (a Removed event). None if every block is active.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let id = if let Some(id) = self.free.pop() {
            id
        } else if (self.slots.len() as u64) < self.capacity {
            self.slots.push(Slot {
                hash: 0,
                links: [0, NIL],
            });
            self.marks.push(0);
            (self.slots.len() - 1) as BlockId
        } else if self.lru_head != NIL {
            self.evict_lru()
        } else {
            return None;
        };
        debug_assert!(self.refs(id) == 0 && !self.is(id, REGISTERED));
        self.slots[id as usize].links[0] = 1;
        self.active += 1;
        Some(id)
    }

    /// Appends `count` fresh private blocks to `blocks`, exactly the ones `count` calls of
    /// [`Self::allocate`] would take, in the same order: the free list's last first, then
    /// never-used slots, then the LRU's head (evicted). False, with the blocks it could take
    /// appended, once every other block is active.
    pub fn allocate_into(&mut self, count: usize, blocks: &mut Vec<BlockId>) -> bool {
        let from_free = count.min(self.free.len());
        let kept = self.free.len() - from_free;
        for &id in self.free[kept..].iter().rev() {
            debug_assert!(self.refs(id) == 0 && !self.is(id, REGISTERED));
            self.slots[id as usize].links[0] = 1;
            blocks.push(id);
        }
        self.free.truncate(kept);
        let first_unused = self.slots.len();
        let unused = (count - from_free).min(self.capacity as usize - first_unused);
        let fresh = Slot {
            hash: 0,
            links: [1, NIL],
        };
        self.slots.resize(first_unused + unused, fresh);
        self.marks.resize(first_unused + unused, 0);
        blocks.extend(first_unused as BlockId..(first_unused + unused) as BlockId);
        self.active += (from_free + unused) as u64;
        // One eviction per iteration, at most `count`: bounded.
        for _ in from_free + unused..count {
            if self.lru_head == NIL {
                return false;
            }
            let id = self.evict_lru();
            self.slots[id as usize].links[0] = 1;
            self.active += 1;
            blocks.push(id);
        }
        true
    }

    /// Gives the full private block `id` (held once, by the caller) the identity `hash`, whose
    /// parent in the chain is `parent`. A hash the pool does not hold yet is recorded as a
    /// Stored event (if `publish`; an unpublished block's eviction is not published either).
    /// If it already holds `hash` (two requests computed the same block), the block becomes a
    /// duplicate copy: it keeps its own capacity, lookups keep finding the older copy, and no
    /// event is recorded, as in 1.6.1.
    pub fn register(
        &mut self,
        id: BlockId,
        hash: SeqHash,
        parent: Option<SeqHash>,
        publish: bool,
        reuse: Reuse,
    ) -> BlockId {
        assert!(
            !self.is(id, REGISTERED) && self.refs(id) == 1,
            "register needs a private block held once"
        );
        let kept = !(PUBLISHED | WITHHELD | UNINDEXED);
        let marks = &mut self.marks[id as usize];
        *marks = (*marks & kept) | REGISTERED | if publish { PUBLISHED } else { 0 };
        *marks |= match reuse {
            Reuse::Shared => 0,
            Reuse::OwnerAgain => WITHHELD,
            Reuse::Never => WITHHELD | UNINDEXED,
        };
        self.slots[id as usize].hash = hash;
        // A `Never` block's hash nobody else holds, so it is new here, as the index would say.
        if reuse == Reuse::Never || self.file(id, hash) {
            self.note_registered(hash, parent, publish, reuse != Reuse::Shared);
        }
        id
    }

    /// Registers the full private blocks `ids` (each held once) as the chain `hashes`, which
    /// continues `parent`, all as [`Reuse::Never`]: exactly as registering them one by one
    /// would, with the event bookkeeping done once for the run (every block after the first
    /// continues the Stored event the first one is in).
    pub fn register_unindexed_run(
        &mut self,
        ids: &[BlockId],
        hashes: &[SeqHash],
        parent: Option<SeqHash>,
        publish: bool,
    ) {
        assert_eq!(ids.len(), hashes.len(), "a block without its hash");
        let Some(&first) = hashes.first() else {
            return;
        };
        let kept = !(PUBLISHED | WITHHELD | UNINDEXED);
        let set = REGISTERED | WITHHELD | UNINDEXED | if publish { PUBLISHED } else { 0 };
        for (&id, &hash) in ids.iter().zip(hashes) {
            assert!(
                !self.is(id, REGISTERED) && self.refs(id) == 1,
                "register needs a private block held once"
            );
            let marks = &mut self.marks[id as usize];
            *marks = (*marks & kept) | set;
            self.slots[id as usize].hash = hash;
            if self.watch_next == Some(hash) {
                self.watch_changes += 1;
            }
        }
        if publish && self.events_enabled {
            self.record_stored(first, parent, true);
            self.last_stored = hashes.last().copied();
            self.expected_stored = self.expected_stored.saturating_sub(hashes.len() - 1);
        }
    }

    /// Files registered block `id` under `hash` in the index: as the copy lookups find if
    /// the pool did not hold the hash yet (true), else as a duplicate behind it (false).
    fn file(&mut self, id: BlockId, hash: SeqHash) -> bool {
        let slots = &self.slots;
        let entry = self.by_hash.entry(
            hash_of(hash),
            |&other| slots[other as usize].hash == hash,
            |&other| slot_hash(slots, other),
        );
        match entry {
            Entry::Occupied(_) => {
                self.duplicates.entry(hash).or_default().push_back(id);
                false
            }
            Entry::Vacant(entry) => {
                entry.insert(id);
                true
            }
        }
    }

    /// A new hash was registered: it may lengthen the watched probe, and is Stored if
    /// published (its hash `withheld` from the event's list).
    fn note_registered(
        &mut self,
        hash: SeqHash,
        parent: Option<SeqHash>,
        publish: bool,
        withheld: bool,
    ) {
        if self.watch_next == Some(hash) {
            self.watch_changes += 1;
        }
        if publish {
            self.record_stored(hash, parent, withheld);
        }
    }

    /// Indexes registered block `id` if it was registered as [`Reuse::Never`]: its request
    /// was preempted and will look its own blocks up again. Its events still leave it out.
    pub fn index_unindexed(&mut self, id: BlockId) {
        if !self.is(id, REGISTERED) || !self.is(id, UNINDEXED) {
            return;
        }
        self.marks[id as usize] &= !UNINDEXED;
        // New to the index while only its own request holds the hash; a duplicate otherwise.
        self.file(id, self.slots[id as usize].hash);
    }

    /// How many of the next evictions (at most `max`) publish nothing: the leading blocks of
    /// the LRU whose registration was not published.
    pub fn silent_evictions(&self, max: u64) -> u64 {
        let (mut n, mut cur) = (0, self.lru_head);
        // One block per iteration, at most `max`: bounded.
        while n < max && cur != NIL {
            if self.is(cur, PUBLISHED) {
                break;
            }
            n += 1;
            cur = self.slots[cur as usize].links[1];
        }
        n
    }

    /// Drops one reference. A registered block left unreferenced joins the LRU tail; a
    /// private one is freed.
    pub fn release(&mut self, id: BlockId) {
        assert!(self.refs(id) > 0, "release of an unreferenced block {id}");
        let refcount = &mut self.slots[id as usize].links[0];
        *refcount -= 1;
        if *refcount > 0 {
            return;
        }
        self.active -= 1;
        if self.is(id, REGISTERED) {
            self.note_watched(id);
            self.inactive += 1;
            self.lru_push_tail(id);
        } else {
            self.free.push(id);
        }
    }

    /// A hint: about `registrations` blocks will be registered and `evictions` evicted next
    /// (a prefill chunk's), so the event lists recording them make room for that many at
    /// once. Only memory depends on it.
    pub fn expect(&mut self, registrations: usize, evictions: usize) {
        self.expected_stored = registrations;
        self.expected_removed = evictions;
    }

    /// Emptied event block lists kept for reuse (tests).
    #[cfg(test)]
    pub(crate) fn spare_block_lists(&self) -> usize {
        self.spare_block_lists.len()
    }

    /// Takes back the block lists of events the router has applied, so that later events
    /// reuse their memory instead of allocating afresh.
    pub fn recycle_events(&mut self, events: impl Iterator<Item = KvEventData>) {
        for data in events {
            let (KvEventData::Stored { mut blocks, .. } | KvEventData::Removed { mut blocks }) =
                data
            else {
                continue;
            };
            if self.spare_block_lists.len() < SPARE_BLOCK_LISTS {
                blocks.clear();
                self.spare_block_lists.push(blocks);
            }
        }
    }

    /// An empty block list for a new event.
    fn new_block_list(&mut self) -> Vec<SeqHash> {
        self.spare_block_lists
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(EVENT_BLOCKS_CAPACITY))
    }

    /// Moves the recorded events into `out` (appending), leaving the pool's buffer empty.
    pub fn drain_events_into(&mut self, out: &mut Vec<KvEventData>) {
        out.append(&mut self.events);
    }

    /// Checks the pool's bookkeeping: counts, LRU links, hash index. Err describes the first
    /// inconsistency found. O(capacity); for tests and checkers.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (mut active, mut inactive, mut registered) = (0u64, 0u64, 0u64);
        if self.marks.len() != self.slots.len() {
            return Err("a slot without marks".to_string());
        }
        for (i, s) in self.slots.iter().enumerate() {
            let id = i as BlockId;
            let is_registered = self.is(id, REGISTERED);
            if self.refs(id) > 0 {
                active += 1;
            } else if self.is(id, INACTIVE) {
                // The LRU walk below checks that exactly these are listed.
                inactive += 1;
            } else if is_registered {
                return Err(format!(
                    "block {i} is registered, held by nobody, not in the LRU"
                ));
            }
            if self.is(id, INACTIVE) && !is_registered {
                return Err(format!("block {i} is inactive but not registered"));
            }
            if is_registered && self.is(id, UNINDEXED) {
                if self.primary(s.hash) == Some(id) {
                    return Err(format!("block {i} is indexed though marked unindexed"));
                }
            } else if is_registered {
                registered += 1;
                let primary = self.primary(s.hash) == Some(id);
                let duplicate = self
                    .duplicates
                    .get(&s.hash)
                    .is_some_and(|d| d.contains(&id));
                if primary == duplicate {
                    return Err(format!("block {i} registered but not indexed exactly once"));
                }
            }
        }
        if active != self.active || inactive != self.inactive {
            return Err(format!(
                "counts drifted: active {active} vs {}, inactive {inactive} vs {}",
                self.active, self.inactive
            ));
        }
        let copies =
            self.by_hash.len() + self.duplicates.values().map(VecDeque::len).sum::<usize>();
        if registered != copies as u64 {
            return Err("hash index holds stale entries".to_string());
        }
        if active + inactive > self.capacity {
            return Err(format!("{active} active + {inactive} inactive > capacity"));
        }
        let free = self.free.len() as u64 + (self.capacity - self.slots.len() as u64);
        if active + inactive + free != self.capacity {
            return Err("free list does not account for every slot".to_string());
        }
        self.check_lru(inactive)
    }

    /// Asserts that `other` holds exactly the same blocks, index, LRU order and events, the
    /// watch bookkeeping aside (tests comparing two ways to reach a state).
    #[cfg(test)]
    pub(crate) fn assert_same_state(&self, other: &KvPool) {
        let slots = |p: &KvPool| {
            let fields = |(s, m): (&Slot, &Marks)| (s.hash, m & !WATCHED, s.links);
            p.slots.iter().zip(&p.marks).map(fields).collect::<Vec<_>>()
        };
        let index = |p: &KvPool| {
            let mut v: Vec<_> = p
                .by_hash
                .iter()
                .map(|&id| (p.slots[id as usize].hash, id))
                .collect();
            v.sort_unstable();
            let mut d: Vec<_> = p.duplicates.iter().map(|(&h, q)| (h, q.clone())).collect();
            d.sort_unstable();
            (v, d)
        };
        assert_eq!(slots(self), slots(other), "block slots differ");
        assert_eq!(self.free, other.free, "free lists differ");
        assert_eq!(index(self), index(other), "hash indexes differ");
        let lru = |p: &KvPool| (p.lru_head, p.lru_tail, p.active, p.inactive, p.capacity);
        assert_eq!(lru(self), lru(other), "LRU or counts differ");
        assert_eq!(self.events, other.events, "pending events differ");
    }

    fn check_lru(&self, inactive: u64) -> Result<(), String> {
        let (mut n, mut prev, mut cur) = (0u64, NIL, self.lru_head);
        while cur != NIL {
            let s = &self.slots[cur as usize];
            if s.links[0] != prev || !self.is(cur, INACTIVE) {
                return Err(format!("LRU list corrupt at block {cur}"));
            }
            n += 1;
            if n > inactive {
                return Err("LRU list longer than the inactive count".to_string());
            }
            prev = cur;
            cur = s.links[1];
        }
        if n != inactive || prev != self.lru_tail {
            return Err(format!(
                "LRU list holds {n} blocks, inactive count is {inactive}"
            ));
        }
        Ok(())
    }

    fn add_ref(&mut self, id: BlockId) {
        if self.is(id, INACTIVE) {
            self.note_watched(id);
            self.lru_unlink(id);
            self.inactive -= 1;
            self.active += 1;
        }
        self.slots[id as usize].links[0] += 1;
    }

    /// Unregisters the oldest inactive block and returns its slot, unreferenced and private.
    fn evict_lru(&mut self) -> BlockId {
        let id = self.lru_head;
        self.lru_unlink(id);
        self.inactive -= 1;
        let published = self.is(id, PUBLISHED);
        let hash = self.slots[id as usize].hash;
        if self.is(id, UNINDEXED) {
            // Its only copy, never looked up: no lookup's answer changes.
            self.marks[id as usize] &= !REGISTERED;
            if published {
                self.record_removed(hash, true);
            }
            return id;
        }
        let withheld = self.is(id, WITHHELD);
        self.marks[id as usize] &= !REGISTERED;
        self.forget_copy(hash, id, published, withheld);
        id
    }

    /// Drops copy `id` of `hash` from the index. The hash disappears (a Removed event, if it
    /// was published) only with its last copy; evicting the primary promotes the oldest
    /// duplicate.
    fn forget_copy(&mut self, hash: SeqHash, id: BlockId, published: bool, withheld: bool) {
        // Most hashes have one copy: the duplicates map, usually empty, is not probed then,
        // and the index is probed once.
        let mut dups = match self.duplicates.is_empty() {
            true => None,
            false => self.duplicates.get_mut(&hash),
        };
        let mut removed = false;
        match self.by_hash.find_entry(hash_of(hash), |&other| other == id) {
            Ok(mut primary) => {
                self.primary_changes += 1;
                if self.marks[id as usize] & WATCHED != 0 {
                    self.watch_changes += 1;
                }
                match dups.as_mut().and_then(|d| d.pop_front()) {
                    Some(next) => {
                        *primary.get_mut() = next;
                    }
                    None => {
                        primary.remove();
                        removed = true;
                    }
                }
            }
            Err(_) => {
                if let Some(d) = dups.as_mut() {
                    d.retain(|&b| b != id);
                }
            }
        }
        if dups.is_some_and(|d| d.is_empty()) {
            self.duplicates.remove(&hash);
        }
        if removed && published {
            self.record_removed(hash, withheld);
        }
    }

    /// A change to block `id` that alters a watched probe's answer if the probe found it.
    fn note_watched(&mut self, id: BlockId) {
        if self.is(id, WATCHED) {
            self.watch_changes += 1;
        }
    }

    /// Lists unreferenced block `id` at the LRU's tail, inactive.
    fn lru_push_tail(&mut self, id: BlockId) {
        let tail = self.lru_tail;
        self.slots[id as usize].links = [tail, NIL];
        self.marks[id as usize] |= INACTIVE;
        if tail == NIL {
            self.lru_head = id;
        } else {
            self.slots[tail as usize].links[1] = id;
        }
        self.lru_tail = id;
    }

    /// Takes inactive block `id` out of the LRU, unreferenced (a refcount of 0).
    fn lru_unlink(&mut self, id: BlockId) {
        let [prev, next] = self.slots[id as usize].links;
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.slots[prev as usize].links[1] = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.slots[next as usize].links[0] = prev;
        }
        self.slots[id as usize].links = [0, NIL];
        self.marks[id as usize] &= !INACTIVE;
    }

    /// Appends to the previous Stored event when this block continues its chain, so a prompt
    /// stored in one step publishes one event, as Dynamo's allocation does. A `withheld`
    /// block shapes the events as any block does, but its hash stays out of their lists.
    fn record_stored(&mut self, hash: SeqHash, parent: Option<SeqHash>, withheld: bool) {
        if !self.events_enabled {
            return;
        }
        let expected = take_one(&mut self.expected_stored);
        let continues = matches!(self.events.last(), Some(KvEventData::Stored { .. }))
            && parent.is_some()
            && self.last_stored == parent;
        self.last_stored = Some(hash);
        if !continues {
            let blocks = self.new_block_list();
            self.events.push(KvEventData::Stored { parent, blocks });
        }
        if let (false, Some(KvEventData::Stored { blocks, .. })) =
            (withheld, self.events.last_mut())
        {
            blocks.reserve(expected);
            blocks.push(hash);
        }
    }

    /// Appends to the previous event when it is a Removed one; a `withheld` block's hash
    /// stays out of the list, as in [`Self::record_stored`].
    fn record_removed(&mut self, hash: SeqHash, withheld: bool) {
        if !self.events_enabled {
            return;
        }
        let expected = take_one(&mut self.expected_removed);
        if !matches!(self.events.last(), Some(KvEventData::Removed { .. })) {
            let blocks = self.new_block_list();
            self.events.push(KvEventData::Removed { blocks });
        }
        if let (false, Some(KvEventData::Removed { blocks })) = (withheld, self.events.last_mut()) {
            blocks.reserve(expected);
            blocks.push(hash);
        }
    }
}

/// What an expectation counter still expects, counting this one off.
fn take_one(expected: &mut usize) -> usize {
    let now = *expected;
    *expected = now.saturating_sub(1);
    now
}

/// The hash by which `by_hash` files a block registered under `hash`.
fn hash_of(hash: SeqHash) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(hash)
}

/// [`hash_of`] the hash block `id` is registered under.
fn slot_hash(slots: &[Slot], id: BlockId) -> u64 {
    hash_of(slots[id as usize].hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fleet's pools hold millions of blocks: a slot is 16 bytes, four to a cache line.
    #[test]
    fn a_block_slot_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }

    fn drain(pool: &mut KvPool) -> Vec<KvEventData> {
        let mut out = Vec::new();
        pool.drain_events_into(&mut out);
        out
    }

    #[test]
    fn recycled_event_lists_carry_only_their_new_blocks_and_are_kept_bounded() {
        let mut pool = KvPool::new(8, true);
        store_chain(&mut pool, &[1, 2, 3]);
        let first = drain(&mut pool);
        pool.recycle_events(first.into_iter());
        assert_eq!(pool.spare_block_lists.len(), 1);
        let id = pool.allocate().unwrap();
        pool.register(id, 9, None, true, Reuse::Shared);
        let second = drain(&mut pool);
        assert_eq!(
            second,
            vec![KvEventData::Stored {
                parent: None,
                blocks: vec![9]
            }]
        );
        assert!(
            pool.spare_block_lists.is_empty(),
            "the spare list was reused"
        );
        let many =
            (0..2 * SPARE_BLOCK_LISTS as u64).map(|h| KvEventData::Removed { blocks: vec![h] });
        pool.recycle_events(many.chain([KvEventData::Cleared]));
        assert_eq!(pool.spare_block_lists.len(), SPARE_BLOCK_LISTS);
        assert!(pool.spare_block_lists.iter().all(Vec::is_empty));
    }

    /// Allocates and registers a chain of blocks, as a prefill would.
    fn store_chain(pool: &mut KvPool, hashes: &[SeqHash]) -> Vec<BlockId> {
        let mut parent = None;
        hashes
            .iter()
            .map(|&h| {
                let id = pool.allocate().expect("room");
                let id = pool.register(id, h, parent, true, Reuse::Shared);
                parent = Some(h);
                id
            })
            .collect()
    }

    /// Registers a chain whose blocks from `unshared_from` on are registered as `reuse`.
    fn store_chain_from(
        pool: &mut KvPool,
        hashes: &[SeqHash],
        unshared_from: usize,
        reuse: Reuse,
    ) -> Vec<BlockId> {
        let mut parent = None;
        let mut ids = Vec::new();
        for (index, &h) in hashes.iter().enumerate() {
            let kind = if index < unshared_from {
                Reuse::Shared
            } else {
                reuse
            };
            let id = pool.allocate().expect("room");
            ids.push(pool.register(id, h, parent, true, kind));
            parent = Some(h);
        }
        ids
    }

    #[test]
    fn unshared_blocks_stay_out_of_index_and_event_lists_but_not_out_of_the_events() {
        let mut pool = KvPool::new(4, true);
        let ids = store_chain_from(&mut pool, &[1, 2, 3], 1, Reuse::Never);
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Stored {
                parent: None,
                blocks: vec![1]
            }]
        );
        assert!(pool.contains(1) && !pool.contains(2) && !pool.contains(3));
        // A later pass continuing the unshared chain still has its (empty) event.
        let next = pool.allocate().unwrap();
        pool.register(next, 4, Some(3), true, Reuse::Never);
        let stored = drain(&mut pool);
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert!(matches!(&stored[0], KvEventData::Stored { blocks, .. } if blocks.is_empty()));
        pool.check_invariants().unwrap();
        for id in ids.iter().chain([&next]).rev() {
            pool.release(*id);
        }
        // Evicting all four: one Removed event, naming the shared block alone.
        for _ in 0..4 {
            pool.allocate().unwrap();
        }
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Removed { blocks: vec![1] }]
        );
        pool.check_invariants().unwrap();
    }

    #[test]
    fn unshared_blocks_indexed_for_their_request_are_found_but_stay_out_of_events() {
        let mut pool = KvPool::new(3, true);
        let ids = store_chain_from(&mut pool, &[1, 2], 0, Reuse::Never);
        for id in ids.iter().rev() {
            pool.release(*id);
        }
        for &id in &ids {
            pool.index_unindexed(id);
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.match_prefix([1, 2], 2).blocks, 2);
        let owner = store_chain_from(&mut pool, &[7], 0, Reuse::OwnerAgain);
        assert!(pool.contains(7));
        drain(&mut pool);
        pool.release(owner[0]);
        for _ in 0..3 {
            pool.allocate().unwrap();
        }
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Removed { blocks: vec![] }]
        );
        assert!(!pool.contains(1) && !pool.contains(2) && !pool.contains(7));
        pool.check_invariants().unwrap();
    }

    #[test]
    fn the_invariants_catch_an_unshared_block_left_in_the_index() {
        let mut pool = KvPool::new(2, true);
        let ids = store_chain_from(&mut pool, &[1], 0, Reuse::Never);
        pool.check_invariants().unwrap();
        // Indexed behind the mark's back.
        let slots = &pool.slots;
        pool.by_hash
            .insert_unique(hash_of(1), ids[0], |&id| slot_hash(slots, id));
        assert!(pool.check_invariants().is_err());
    }

    #[test]
    fn stored_events_only_for_new_blocks_and_chained_into_one() {
        let mut pool = KvPool::new(8, true);
        let a = store_chain(&mut pool, &[1, 2, 3]);
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Stored {
                parent: None,
                blocks: vec![1, 2, 3]
            }]
        );
        // A second request with the same prefix reuses blocks: no events.
        for h in [1, 2, 3] {
            pool.acquire(h).unwrap();
        }
        let extra = pool.allocate().unwrap();
        let extra = pool.register(extra, 4, Some(3), true, Reuse::Shared);
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Stored {
                parent: Some(3),
                blocks: vec![4]
            }]
        );
        assert_eq!(pool.active_blocks(), 4);
        for id in a.iter().rev() {
            pool.release(*id);
        }
        pool.release(extra);
        pool.check_invariants().unwrap();
    }

    #[test]
    fn release_sends_registered_blocks_to_lru_and_frees_private_ones() {
        let mut pool = KvPool::new(4, true);
        let ids = store_chain(&mut pool, &[10, 11]);
        let partial = pool.allocate().unwrap();
        assert_eq!(pool.active_blocks(), 3);
        pool.release(partial);
        for id in ids.iter().rev() {
            pool.release(*id);
        }
        assert_eq!(
            (
                pool.active_blocks(),
                pool.inactive_blocks(),
                pool.free_blocks()
            ),
            (0, 2, 2)
        );
        assert_eq!(
            pool.match_prefix([10, 11, 12], 10),
            PrefixMatch {
                blocks: 2,
                active_blocks: 0
            }
        );
        pool.check_invariants().unwrap();
    }

    #[test]
    fn a_new_pool_takes_no_room_until_reserved_and_never_beyond_its_capacity() {
        let mut pool = KvPool::new(1 << 20, true);
        assert_eq!(pool.slots.capacity(), 0);
        pool.reserve(1000);
        assert!(pool.slots.capacity() >= 1000 && pool.by_hash.capacity() >= 1000);
        let mut small = KvPool::new(8, true);
        small.reserve(1 << 20);
        assert!(
            small.slots.capacity() < 1024,
            "reserving is capped by the capacity"
        );
    }

    #[test]
    fn eviction_is_lru_and_emits_removed() {
        let mut pool = KvPool::new(3, true);
        let ids = store_chain(&mut pool, &[1, 2, 3]);
        // Reverse-order release: the chain's tail becomes the least recently used.
        for id in ids.iter().rev() {
            pool.release(*id);
        }
        drain(&mut pool);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Removed { blocks: vec![3, 2] }]
        );
        assert!(pool.contains(1) && !pool.contains(2) && !pool.contains(3));
        assert!(
            pool.allocate().is_some(),
            "the last inactive block is evictable too"
        );
        assert!(
            pool.allocate().is_none(),
            "every block active: allocation fails"
        );
        pool.release(a);
        pool.release(b);
        pool.check_invariants().unwrap();
    }

    #[test]
    fn reuse_reactivates_an_inactive_block_and_protects_it_from_eviction() {
        let mut pool = KvPool::new(2, true);
        let ids = store_chain(&mut pool, &[1, 2]);
        pool.release(ids[1]);
        pool.release(ids[0]);
        assert_eq!(pool.acquire(1), Some(ids[0]));
        assert_eq!(
            pool.match_prefix([1, 2], 2),
            PrefixMatch {
                blocks: 2,
                active_blocks: 1
            }
        );
        let fresh = pool.allocate().unwrap();
        assert_eq!(fresh, ids[1], "only block 2 was evictable");
        assert!(pool.contains(1));
        pool.check_invariants().unwrap();
    }

    #[test]
    fn a_duplicate_copy_keeps_its_capacity_and_the_hash_outlives_it() {
        let mut pool = KvPool::new(4, true);
        let first = store_chain(&mut pool, &[7]);
        drain(&mut pool);
        let dup = pool.allocate().unwrap();
        assert_eq!(pool.register(dup, 7, None, true, Reuse::Shared), dup);
        assert_eq!(pool.active_blocks(), 2, "the duplicate holds its own block");
        assert!(drain(&mut pool).is_empty(), "not a new store");
        assert_eq!(
            pool.acquire(7),
            Some(first[0]),
            "lookups find the older copy"
        );
        pool.release(first[0]);
        pool.release(first[0]);
        pool.release(dup);
        pool.check_invariants().unwrap();
        // Evicting the primary promotes the duplicate; Removed only with the last copy.
        let (a, b) = (pool.allocate().unwrap(), pool.allocate().unwrap());
        let c = pool.allocate().unwrap();
        assert!(drain(&mut pool).is_empty());
        assert_eq!(pool.acquire(7), Some(dup));
        pool.release(dup);
        let d = pool.allocate().unwrap();
        assert_eq!(
            drain(&mut pool),
            vec![KvEventData::Removed { blocks: vec![7] }]
        );
        for id in [a, b, c, d] {
            pool.release(id);
        }
        pool.check_invariants().unwrap();
    }

    #[test]
    fn events_disabled_records_nothing() {
        let mut pool = KvPool::new(2, false);
        let ids = store_chain(&mut pool, &[1, 2]);
        for id in ids.iter().rev() {
            pool.release(*id);
        }
        pool.allocate().unwrap();
        assert!(drain(&mut pool).is_empty());
    }

    #[test]
    fn a_watched_probe_lists_its_blocks_and_moves_only_on_changes_to_its_answer() {
        let mut pool = KvPool::new(6, true);
        let ids = store_chain(&mut pool, &[1, 2, 3]);
        let other = store_chain(&mut pool, &[10]);
        pool.release(ids[2]);
        let mut found = Vec::new();
        let m = pool.match_prefix_watched([1, 2, 3, 4, 5], 5, &mut found);
        assert_eq!(
            (m, found.as_slice()),
            (pool.match_prefix([1, 2, 3, 4], 5), &ids[..])
        );
        assert_eq!(m.active_blocks, 2);
        let (changes, primaries) = (pool.watch_changes(), pool.primary_changes());
        // Unrelated to the answer: another chain, a second reference, a non-next hash.
        pool.release(other[0]);
        pool.acquire(1).unwrap();
        pool.release(ids[0]);
        let id = pool.allocate().unwrap();
        pool.register(id, 5, Some(4), true, Reuse::Shared);
        assert_eq!(
            pool.watch_changes(),
            changes,
            "nothing the answer depends on moved"
        );
        fn moved(pool: &mut KvPool, what: &str, step: &dyn Fn(&mut KvPool)) {
            let before = pool.watch_changes();
            step(pool);
            assert!(pool.watch_changes() > before, "{what} must move the watch");
        }
        moved(&mut pool, "an inactive found block reused", &|p| {
            p.acquire_id(ids[2]);
        });
        moved(&mut pool, "a found block going inactive", &|p| {
            p.release(ids[2])
        });
        moved(&mut pool, "the next hash registered", &|p| {
            let id = p.allocate().unwrap();
            p.register(id, 4, Some(3), true, Reuse::Shared);
        });
        assert_eq!(pool.primary_changes(), primaries, "no eviction yet");
        // Full (1, 2, 3 and 4, 5 held; 10 and 3 inactive): the next allocations evict 10,
        // which nobody watches, then 3, which the probe found.
        let before = pool.watch_changes();
        let a = pool.allocate().unwrap();
        assert_eq!(pool.primary_changes(), primaries + 1);
        assert_eq!(pool.watch_changes(), before, "evicting an unwatched block");
        moved(&mut pool, "evicting a found block", &|p| {
            p.allocate().unwrap();
        });
        assert!(!pool.contains(3) && pool.primary_changes() == primaries + 2);
        pool.release(a);
        pool.check_invariants().unwrap();
    }

    /// A pool with every source of fresh blocks in play: two private blocks on the free
    /// list, four slots never used, and four cached blocks to evict (one never published).
    fn pool_with_every_source() -> KvPool {
        let mut pool = KvPool::new(10, true);
        let cached = store_chain(&mut pool, &[1, 2, 3]);
        let unpublished = pool.allocate().unwrap();
        pool.register(unpublished, 7, None, false, Reuse::Shared);
        let private: Vec<_> = (0..2).map(|_| pool.allocate().unwrap()).collect();
        for &id in cached.iter().chain(&[unpublished]).chain(&private) {
            pool.release(id);
        }
        pool
    }

    #[test]
    fn allocate_into_takes_the_blocks_allocate_would_in_the_same_order() {
        for count in [0, 1, 3, 6, 9, 10, 11] {
            let (mut batch, mut single) = (pool_with_every_source(), pool_with_every_source());
            let mut ids = vec![99];
            let all = batch.allocate_into(count, &mut ids);
            let mut one_by_one = vec![99];
            let mut ok = true;
            for _ in 0..count {
                match single.allocate() {
                    Some(id) => one_by_one.push(id),
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            assert_eq!((ids, all), (one_by_one, ok), "{count} blocks");
            batch.assert_same_state(&single);
            batch.check_invariants().unwrap();
        }
    }

    #[test]
    fn registering_an_unindexed_run_is_registering_its_blocks_one_by_one() {
        for publish in [true, false] {
            let (mut run, mut single) = (KvPool::new(8, true), KvPool::new(8, true));
            let mut found = Vec::new();
            for pool in [&mut run, &mut single] {
                store_chain(pool, &[1, 2]);
                // Watching 1, 2 then 4: registering 4 may lengthen the probe's answer.
                pool.match_prefix_watched([1, 2, 4], 8, &mut found);
            }
            let watched = run.watch_changes();
            let hashes = [3, 4, 5];
            let ids: Vec<_> = (0..3).map(|_| run.allocate().unwrap()).collect();
            run.register_unindexed_run(&ids, &hashes, Some(2), publish);
            let mut parent = Some(2);
            for &h in &hashes {
                let id = single.allocate().unwrap();
                single.register(id, h, parent, publish, Reuse::Never);
                parent = Some(h);
            }
            run.assert_same_state(&single);
            assert_eq!(run.watch_changes(), single.watch_changes());
            assert!(run.watch_changes() > watched, "4 was watched for");
            // A block after the run continues the same Stored event in both.
            for pool in [&mut run, &mut single] {
                let id = pool.allocate().unwrap();
                pool.register(id, 6, Some(5), true, Reuse::Shared);
            }
            run.assert_same_state(&single);
            run.check_invariants().unwrap();
        }
    }

    #[test]
    fn match_prefix_stops_at_the_first_gap_and_respects_the_limit() {
        let mut pool = KvPool::new(8, false);
        store_chain(&mut pool, &[1, 2, 4]);
        assert_eq!(pool.match_prefix([1, 2, 3, 4], 8).blocks, 2);
        assert_eq!(pool.match_prefix([1, 2, 3, 4], 1).blocks, 1);
        assert_eq!(pool.match_prefix([9], 8).blocks, 0);
    }
}
