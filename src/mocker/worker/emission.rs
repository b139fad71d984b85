//! Token emission of a mock rank's pass: a token for every running request whose known
//! tokens are all computed, completions, and the decode batch the pass is charged for.

use super::*;

impl MockWorker {
    /// Gives a token to every running request whose known tokens are all computed and
    /// completes the finished ones. Returns the decode batch the timing model charges: the
    /// ready requests that had already produced a token (1.6.1 charges a request's first
    /// token, emitted at its prefill's end, no decode time).
    pub(super) fn emit_tokens(&mut self, out: &mut PassOutput) -> timing::DecodeBatch {
        if self.args.role == WorkerRole::Prefill {
            self.hold_prefilled(out);
            return timing::DecodeBatch::default();
        }
        // A decode rank's first token of a transferred prompt is a decode step of its own.
        let charge_first = self.args.role == WorkerRole::Decode;
        self.ready.clear();
        let mut decode = timing::DecodeBatch::default();
        let mut any_finished = false;
        for &slot in &self.running {
            let r = &self.reqs[slot as usize];
            if r.computed < r.seq_len() {
                continue;
            }
            if self.finished(r) {
                any_finished = true;
                continue;
            }
            if r.generated > 0 || charge_first {
                decode.count += 1;
                decode.active_kv_tokens += r.seq_len();
            }
            self.ready.push(slot);
        }
        if any_finished {
            self.finish_empty(out);
        }
        let mut ready = std::mem::take(&mut self.ready);
        let mut any_completed = false;
        for &slot in &ready {
            let r = &mut self.reqs[slot as usize];
            r.generated += 1;
            let first = r.generated == 1;
            let id = r.id;
            let completed = self.finished(&self.reqs[slot as usize]);
            out.tokens.push(TokenOut {
                id,
                first,
                completed,
            });
            if completed {
                self.release_blocks(slot);
                self.forget(slot);
                any_completed = true;
            }
        }
        if any_completed {
            // Completed requests leave the batch; the others keep their order.
            let reqs = &self.reqs;
            self.running.retain(|&s| reqs[s as usize].live);
        }
        ready.clear();
        self.ready = ready;
        decode
    }

    /// Completes, without a token, computed requests that have nothing to generate.
    fn finish_empty(&mut self, out: &mut PassOutput) {
        let mut i = 0;
        // Each iteration advances or removes one running request: bounded.
        while i < self.running.len() {
            let slot = self.running[i];
            let r = self.req(slot);
            if r.computed >= r.seq_len() && self.finished(r) {
                out.finished_empty.push(r.id);
                self.release_blocks(slot);
                self.forget(slot);
                self.running.remove(i);
            } else {
                i += 1;
            }
        }
    }
}
