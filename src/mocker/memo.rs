//! A worker rank's two speed-up caches, which change no answer: the table of decode-step
//! durations ([`DecodeMemo`], owned by whoever runs the ranks of one engine and lent to each
//! pass) and the waiting head's last prefix probe ([`HeadProbe`], one per rank).

use super::config::EngineArgs;
use super::kv_pool::{BlockId, KvPool, PrefixMatch};
use super::timing;
use crate::time::SimDuration;

/// Decode-step durations by batch, remembered for one engine configuration: the duration is
/// a function of the batch (request count and context tokens) alone, the same batches recur
/// across passes and ranks, and converting the model's milliseconds to whole ns the way
/// 1.6.1 does costs more than the rest of a quiet pass. A direct-mapped table; a miss
/// computes and replaces.
///
/// It starts small and grows only while it pays: in a run of like requests (the same batches
/// recur on many ranks) a larger table keeps more of them, while long varied prompts almost
/// never repeat a batch, and touching a large table's fresh memory would cost more than it
/// saves.
#[derive(Debug)]
pub struct DecodeMemo {
    args: EngineArgs,
    /// (context + 1, request count, duration): a context key of 0 marks an empty slot.
    /// Allocated on first use.
    slots: Vec<(u64, u64, SimDuration)>,
    /// The most slots the table grows to.
    max_slots: usize,
    /// Lookups, hits, and misses that replaced another batch, since the size last changed.
    lookups: u32,
    hits: u32,
    replaced: u32,
}

/// Slots a table starts with.
pub(super) const DECODE_MEMO_FIRST_SLOTS: usize = 1024;

impl DecodeMemo {
    /// A table growing to at most `max_slots` slots (24 bytes each) for ranks running `args`.
    pub fn new(args: EngineArgs, max_slots: usize) -> DecodeMemo {
        DecodeMemo {
            args,
            slots: Vec::new(),
            max_slots: max_slots.max(1),
            lookups: 0,
            hits: 0,
            replaced: 0,
        }
    }

    /// Whether the table is for ranks running `args` (its durations are theirs).
    pub fn is_for(&self, args: &EngineArgs) -> bool {
        self.args == *args
    }

    /// `timing::decode_duration` of `decode` for the table's engine, remembered.
    pub(super) fn get(&mut self, decode: &timing::DecodeBatch) -> SimDuration {
        if decode.count == 0 {
            return SimDuration::ZERO;
        }
        if self.slots.is_empty() {
            self.resize(DECODE_MEMO_FIRST_SLOTS.min(self.max_slots));
        }
        self.lookups += 1;
        let key = decode.active_kv_tokens.wrapping_add(1);
        let slot = (decode.active_kv_tokens % self.slots.len() as u64) as usize;
        let (known, count, duration) = self.slots[slot];
        if known == key && count == decode.count && key != 0 {
            self.hits += 1;
            return duration;
        }
        self.replaced += u32::from(known != 0);
        let duration = timing::decode_duration(decode, &self.args);
        self.slots[slot] = (key, decode.count, duration);
        if self.lookups as usize >= 16 * self.slots.len() {
            self.review_size();
        }
        duration
    }

    /// Quadruples the table if a quarter of the lookups hit (batches do recur) and an eighth
    /// replaced another batch (it is too small to keep them).
    fn review_size(&mut self) {
        let (lookups, hits, replaced) = (self.lookups, self.hits, self.replaced);
        (self.lookups, self.hits, self.replaced) = (0, 0, 0);
        if hits >= lookups / 4 && replaced >= lookups / 8 && self.slots.len() < self.max_slots {
            self.resize((4 * self.slots.len()).min(self.max_slots));
        }
    }

    fn resize(&mut self, slots: usize) {
        self.slots = vec![(0, 0, SimDuration::ZERO); slots];
    }
}

/// The waiting head's last prefix probe, kept so that asking again (every formed pass and
/// every quiet-run plan while the head waits) costs no walk of its prefix while nothing the
/// answer depends on has changed, and so that admitting it takes the blocks the probe found
/// without looking each up again. Requests are named by their slot in the rank.
#[derive(Debug, Default)]
pub(super) struct HeadProbe {
    /// The request probed; None when no probe is kept.
    slot: Option<u32>,
    /// The probe's block limit (see the rank's `prefix_hit`).
    limit: u64,
    /// What it found.
    hit: PrefixMatch,
    /// The blocks of the hit's leading blocks, in chain order.
    ids: Vec<BlockId>,
    /// The pool's `watch_changes` when the probe was made: its answer stands while equal.
    changes: u64,
    /// The pool's `primary_changes` when `ids` were last known to be what lookups find.
    primaries: u64,
}

impl HeadProbe {
    /// Keeps no probe.
    pub fn clear(&mut self) {
        self.slot = None;
    }

    /// Keeps no probe of the request in `slot` (it left, or was admitted and so changed the
    /// blocks its probe found).
    pub fn forget(&mut self, slot: u32) {
        if self.slot == Some(slot) {
            self.slot = None;
        }
    }

    /// The kept answer for the request in `slot` probed up to `limit` blocks, if it still
    /// stands in `pool` (nothing it depends on changed); its blocks are then still what
    /// lookups find.
    pub fn answer(&mut self, slot: u32, limit: u64, pool: &KvPool) -> Option<PrefixMatch> {
        if self.slot != Some(slot) || self.limit != limit || self.changes != pool.watch_changes() {
            return None;
        }
        self.primaries = pool.primary_changes();
        Some(self.hit)
    }

    /// Probes `pool` afresh for the request in `slot` (its known block hashes `hashes`) up
    /// to `limit` blocks, and keeps the answer.
    pub fn probe(
        &mut self,
        slot: u32,
        limit: u64,
        hashes: impl Iterator<Item = u64>,
        pool: &mut KvPool,
    ) -> PrefixMatch {
        self.hit = pool.match_prefix_watched(hashes, limit, &mut self.ids);
        self.slot = Some(slot);
        self.limit = limit;
        self.changes = pool.watch_changes();
        self.primaries = pool.primary_changes();
        self.hit
    }

    /// The first `blocks` blocks the kept probe of the request in `slot` found, if they are
    /// still what lookups in `pool` would find (else none).
    pub fn found(&self, slot: u32, blocks: usize, pool: &KvPool) -> &[BlockId] {
        match self.slot == Some(slot)
            && self.ids.len() >= blocks
            && self.primaries == pool.primary_changes()
        {
            true => &self.ids[..blocks],
            false => &[],
        }
    }

    /// The kept probe's limit, answer and blocks (test builds check them against fresh
    /// lookups).
    #[cfg(test)]
    pub fn kept(&self) -> (u64, PrefixMatch, &[BlockId]) {
        (self.limit, self.hit, &self.ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decode_memo_answers_as_the_timing_model_even_when_slots_collide() {
        let args = EngineArgs::default();
        let mut memo = DecodeMemo::new(args.clone(), 8);
        let batches = [
            (1, 1025),
            (2, 1025),
            (1, 1033),
            (1, 1025),
            (0, 0),
            (3, 8),
            (2, 1025),
        ];
        for (count, active_kv_tokens) in batches.into_iter().chain([(1, u64::MAX), (1, 7)]) {
            let batch = timing::DecodeBatch {
                count,
                active_kv_tokens,
            };
            assert_eq!(
                memo.get(&batch),
                timing::decode_duration(&batch, &args),
                "{count} requests, {active_kv_tokens} tokens"
            );
        }
    }

    #[test]
    fn the_decode_memo_grows_only_while_batches_recur_and_never_past_its_most() {
        let batch = |active_kv_tokens| timing::DecodeBatch {
            count: 1,
            active_kv_tokens,
        };
        // Ever new contexts (long varied prompts): no hits, the table stays small.
        let mut varied = DecodeMemo::new(EngineArgs::default(), 1 << 16);
        for tokens in 0..100_000 {
            varied.get(&batch(tokens));
        }
        assert_eq!(varied.slots.len(), DECODE_MEMO_FIRST_SLOTS);
        // 1,536 contexts over and over: a third hit, two thirds evict each other.
        let mut recurring = DecodeMemo::new(EngineArgs::default(), 4 * DECODE_MEMO_FIRST_SLOTS);
        for _ in 0..100 {
            for tokens in 0..1536 {
                recurring.get(&batch(tokens));
            }
        }
        assert_eq!(
            recurring.slots.len(),
            4 * DECODE_MEMO_FIRST_SLOTS,
            "grew, to its most"
        );
        let len = recurring.slots.len() as u64;
        for tokens in 0..1536u64 {
            let (key, _, _) = recurring.slots[(tokens % len) as usize];
            assert_eq!(key, tokens + 1, "every recurring batch is kept");
        }
    }

    #[test]
    fn a_decode_memo_is_for_its_own_engine_only() {
        let args = EngineArgs::default();
        let memo = DecodeMemo::new(args.clone(), 64);
        assert!(memo.is_for(&args));
        let fast = EngineArgs {
            speedup_ratio: 2.0,
            ..args
        };
        assert!(!memo.is_for(&fast));
    }
}
