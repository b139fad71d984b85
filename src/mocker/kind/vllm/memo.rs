//! The vLLM rank's speed-up cache that changes no answer: the waiting head's last prefix
//! probe ([`HeadProbe`], one per rank).

use super::kv_pool::{BlockId, KvPool, PrefixMatch};

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
