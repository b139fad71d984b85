//! A pool's table of step durations by batch ([`StepMemo`]): a cache that changes no answer,
//! owned by whoever runs the ranks of one engine configuration and lent to each pass, of
//! whatever kind the ranks are.

use crate::time::SimDuration;

/// Step durations by batch, remembered for the ranks of one engine configuration: a decode
/// step's duration is a function of its batch (request count and context tokens) alone, the
/// same batches recur across passes and ranks, and converting a model's milliseconds to
/// whole ns costs more than the rest of a quiet pass. A direct-mapped table; a miss asks the
/// rank's timing and replaces.
///
/// It starts small and grows only while it pays: in a run of like requests (the same batches
/// recur on many ranks) a larger table keeps more of them, while long varied prompts almost
/// never repeat a batch, and touching a large table's fresh memory would cost more than it
/// saves.
#[derive(Debug)]
pub struct StepMemo {
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
pub const STEP_MEMO_FIRST_SLOTS: usize = 1024;

impl StepMemo {
    /// A table growing to at most `max_slots` slots (24 bytes each), for the ranks of one
    /// engine configuration.
    pub fn new(max_slots: usize) -> StepMemo {
        StepMemo {
            slots: Vec::new(),
            max_slots: max_slots.max(1),
            lookups: 0,
            hits: 0,
            replaced: 0,
        }
    }

    /// The duration of a step of `count` requests with `context_tokens` tokens of context in
    /// all, remembered: `time` computes it on a miss (zero for an empty batch). Every call on
    /// one table must time batches alike (one engine configuration).
    pub fn get(
        &mut self,
        count: u64,
        context_tokens: u64,
        time: impl FnOnce() -> SimDuration,
    ) -> SimDuration {
        if count == 0 {
            return SimDuration::ZERO;
        }
        if self.slots.is_empty() {
            self.resize(STEP_MEMO_FIRST_SLOTS.min(self.max_slots));
        }
        self.lookups += 1;
        let key = context_tokens.wrapping_add(1);
        let slot = (context_tokens % self.slots.len() as u64) as usize;
        let (known, known_count, duration) = self.slots[slot];
        if known == key && known_count == count && key != 0 {
            self.hits += 1;
            return duration;
        }
        self.replaced += u32::from(known != 0);
        let duration = time();
        self.slots[slot] = (key, count, duration);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocker::config::CommonArgs;
    use crate::mocker::timing;

    #[test]
    fn the_step_memo_answers_as_the_timing_model_even_when_slots_collide() {
        let args = CommonArgs::default();
        let mut memo = StepMemo::new(8);
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
                memo.get(count, active_kv_tokens, || args.decode_duration(&batch)),
                args.decode_duration(&batch),
                "{count} requests, {active_kv_tokens} tokens"
            );
        }
    }

    #[test]
    fn the_step_memo_grows_only_while_batches_recur_and_never_past_its_most() {
        let args = CommonArgs::default();
        let time = |active_kv_tokens| {
            let batch = timing::DecodeBatch {
                count: 1,
                active_kv_tokens,
            };
            args.decode_duration(&batch)
        };
        // Ever new contexts (long varied prompts): no hits, the table stays small.
        let mut varied = StepMemo::new(1 << 16);
        for tokens in 0..100_000 {
            varied.get(1, tokens, || time(tokens));
        }
        assert_eq!(varied.slots.len(), STEP_MEMO_FIRST_SLOTS);
        // 1,536 contexts over and over: a third hit, two thirds evict each other.
        let mut recurring = StepMemo::new(4 * STEP_MEMO_FIRST_SLOTS);
        for _ in 0..100 {
            for tokens in 0..1536 {
                recurring.get(1, tokens, || time(tokens));
            }
        }
        assert_eq!(
            recurring.slots.len(),
            4 * STEP_MEMO_FIRST_SLOTS,
            "grew, to its most"
        );
        let len = recurring.slots.len() as u64;
        for tokens in 0..1536u64 {
            let (key, _, _) = recurring.slots[(tokens % len) as usize];
            assert_eq!(key, tokens + 1, "every recurring batch is kept");
        }
    }
}
