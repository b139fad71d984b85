//! Quiet runs of a mock rank: planning the passes whose only effect is one more token for
//! every running request, and applying them at once (the rank's [`QuietRuns`] capability).

use super::{Decision, MockWorker};
use crate::mocker::step_memo::StepMemo;
use crate::mocker::timing;
use crate::mocker::traits::QuietRuns;
use crate::time::SimTime;

impl MockWorker {
    /// Plans the run of *quiet* passes that starts at `start`: pushes onto `ends` (cleared
    /// first) the end of each, at most `max_passes` of them, each pass starting where the
    /// previous one ends. Empty when the next pass is not quiet.
    ///
    /// A quiet pass is one whose only effect is one more token for every running request:
    /// every running request is decoding (exactly one token to compute, with a token already
    /// produced), none of them finishes, nobody is admitted (the waiting queue is empty, the
    /// batch is full, or its head must wait for blocks: with chunked prefill, a head that
    /// must wait keeps waiting while blocks are only taken), the budget covers one token
    /// each, every block a request grows into comes from free blocks or evicts a block no
    /// KV event was published for (so no KV event and no preemption), and the pass takes
    /// time. Its duration is [`Self::pass_end`] of the same decode batch `execute_pass`
    /// would charge, so the planned ends are exactly those of the passes `execute_pass`
    /// would run. Apply them with [`Self::apply_quiet_passes`].
    pub fn plan_quiet_passes(
        &mut self,
        start: SimTime,
        max_passes: usize,
        ends: &mut Vec<SimTime>,
    ) {
        self.with_own_memo(|w, memo| w.plan_quiet_run_with(start, max_passes, memo, ends));
    }

    /// [`Self::plan_quiet_passes`] with decode durations from `memo` (see
    /// [`Self::execute_pass_with`]).
    fn plan_quiet_run_with(
        &mut self,
        start: SimTime,
        max_passes: usize,
        memo: &mut StepMemo,
        ends: &mut Vec<SimTime>,
    ) {
        ends.clear();
        let Some(limit) = self.quiet_pass_limit() else {
            return;
        };
        let passes = self.passes_with_blocks(limit.min(max_passes as u64));
        let n = self.running.len() as u64;
        let decode_kv_tokens: u64 = self.running.iter().map(|&s| self.req(s).seq_len()).sum();
        let mut now = start;
        // Every quiet pass prefills nothing: its prefill part is the same for all.
        let prefill_time = self.prefill_time(&timing::PrefillBatch::default());
        // One pass per iteration, up to `passes`: bounded.
        for j in 0..passes {
            let decode = timing::DecodeBatch {
                count: n,
                active_kv_tokens: decode_kv_tokens + j * n,
            };
            let end = self.pass_end(now, prefill_time, &decode, memo);
            if end <= now {
                break;
            }
            ends.push(end);
            now = end;
        }
    }

    /// How many of the next `passes` decode passes find every block they grow into among the
    /// free blocks or the evictions that publish nothing: the pass needing one more is not
    /// quiet.
    fn passes_with_blocks(&mut self, passes: u64) -> u64 {
        let bs = self.common.block_size;
        let n = self.running.len() as u64;
        let worst = n * passes.div_ceil(bs);
        let spare = self.pool.free_blocks() + self.pool.silent_evictions(worst);
        if worst <= spare {
            return passes;
        }
        // How many requests grow into a fresh block at each pass of the run: request i does
        // at passes first_i, first_i + bs, ... (counted, not listed and sorted: a full pool
        // plans this way at every pass it forms).
        let mut growths_at = std::mem::take(&mut self.growth_counts);
        growths_at.clear();
        growths_at.resize(passes as usize, 0);
        for &slot in &self.running {
            let first = passes_to_growth(self.req(slot).computed, bs);
            // One growth per iteration, fewer than `passes`: bounded.
            for j in (first..passes).step_by(bs as usize) {
                growths_at[j as usize] += 1;
            }
        }
        // The pass of the first growth beyond the spare blocks ends the run before it.
        let mut grown = 0;
        let end = growths_at.iter().position(|&count| {
            grown += count;
            grown > spare
        });
        self.growth_counts = growths_at;
        end.map_or(passes, |j| j as u64)
    }

    /// How many passes from now are quiet as far as requests and admission go (see
    /// [`Self::plan_quiet_passes`]), or None if the next one is not.
    fn quiet_pass_limit(&mut self) -> Option<u64> {
        let n = self.running.len() as u64;
        if n == 0 || n > self.common.capacity.max_num_batched_tokens {
            return None;
        }
        let mut limit = u64::MAX;
        // Newest first: a request still in its prefill is among the latest admitted.
        for &s in self.running.iter().rev() {
            let r = self.req(s);
            if r.generated == 0 || r.computed + 1 != r.seq_len() {
                return None;
            }
            // The pass giving the last token completes the request: it is not quiet.
            let mut left = r.max_output_tokens.saturating_sub(r.generated + 1);
            if let Some(m) = self.common.capacity.max_model_len {
                left = left.min(m.saturating_sub(r.seq_len() + 1));
            }
            limit = limit.min(left);
        }
        if limit == 0 {
            return None;
        }
        // A landed handoff may be admitted at the next pass while the batch has room.
        if !self.landed.is_empty() && n < self.common.capacity.max_num_seqs {
            return None;
        }
        // Last, as it walks the head's prefix: the batch checks above fail more often.
        if let Some(&head) = self.waiting.front()
            && n < self.common.capacity.max_num_seqs
        {
            // Without chunking a shrinking prefix hit could turn a wait into a rejection.
            if !self.vllm.enable_chunked_prefill {
                return None;
            }
            if !matches!(self.decide_admission(head), Decision::Wait) {
                return None;
            }
        }
        Some(limit)
    }

    /// Applies the first `count` passes of the run [`Self::plan_quiet_passes`] planned (the
    /// rank's state has not changed since, but for requests added to the waiting queue),
    /// the last of which ends at `last_end`: every running request gets `count` tokens and
    /// grows its blocks, exactly as `count` calls of `execute_pass` would leave it.
    pub fn apply_quiet_passes(&mut self, count: u64, last_end: SimTime) {
        let bs = self.common.block_size;
        // Only block boundaries touch the pool: request i grows into a fresh block at passes
        // j with (computed_i + j) % bs == 0 and fills one when (computed_i + j + 1) % bs == 0.
        // They happen in pass order, then running order, growth before filling, as pass by
        // pass; everything else is one more token each.
        let mut steps = std::mem::take(&mut self.growth_scratch);
        steps.clear();
        for (i, &slot) in self.running.iter().enumerate() {
            let computed = self.req(slot).computed;
            let grow = passes_to_growth(computed, bs);
            let fill = match grow {
                0 => bs - 1,
                _ => grow - 1,
            };
            // One boundary per iteration, fewer than `count`: bounded.
            steps.extend(
                (grow..count)
                    .step_by(bs as usize)
                    .map(|j| (j, 2 * i as u64)),
            );
            steps.extend(
                (fill..count)
                    .step_by(bs as usize)
                    .map(|j| (j, 2 * i as u64 + 1)),
            );
        }
        steps.sort_unstable();
        for &(j, step) in &steps {
            let slot = self.running[(step / 2) as usize];
            let computed = self.req(slot).computed + j;
            if step % 2 == 0 {
                let block = self.pool.allocate();
                let block = block.expect("a planned quiet pass finds its blocks");
                self.req_mut(slot).blocks.push(block);
            } else {
                self.register_computed(slot, computed + 1);
            }
        }
        self.growth_scratch = steps;
        for i in 0..self.running.len() {
            let r = &mut self.reqs[self.running[i] as usize];
            r.computed += count;
            r.generated += count;
        }
        self.last_pass_end = last_end;
    }
}

impl QuietRuns for MockWorker {
    fn plan_quiet_run(
        &mut self,
        start: SimTime,
        max_passes: usize,
        memo: &mut StepMemo,
        ends: &mut Vec<SimTime>,
    ) {
        self.plan_quiet_run_with(start, max_passes, memo, ends);
    }

    fn apply_quiet_run(&mut self, passes: u64, last_end: SimTime) {
        self.apply_quiet_passes(passes, last_end);
    }
}

/// After how many passes a request with `computed` tokens, one more a pass, grows into a
/// fresh block of `bs` tokens: `(bs - computed % bs) % bs`, with one division (a quiet run
/// asks it of every running request, and a division is slow).
fn passes_to_growth(computed: u64, bs: u64) -> u64 {
    match computed % bs {
        0 => 0,
        used => bs - used,
    }
}

#[cfg(test)]
mod tests {
    use super::passes_to_growth;

    #[test]
    fn passes_to_growth_is_the_distance_to_the_next_block_boundary() {
        for bs in 1..=130u64 {
            for computed in 0..400u64 {
                let growth = passes_to_growth(computed, bs);
                assert_eq!(
                    growth,
                    (bs - computed % bs) % bs,
                    "bs {bs}, computed {computed}"
                );
                assert!(growth < bs && (computed + growth).is_multiple_of(bs));
            }
        }
    }
}
