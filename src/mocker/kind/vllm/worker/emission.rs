//! Token emission of a mock rank's pass: a token for every running request whose known
//! tokens are all computed, completions, and the decode batch the pass is charged for.

use super::MockWorker;
use crate::mocker::config::WorkerRole;
use crate::mocker::protocol::{PassOutput, TokenOut};
use crate::mocker::timing;
use crate::scheduling::types::RequestId;
impl MockWorker {
    /// Gives a token to every running request whose known tokens are all computed and
    /// completes the finished ones. Returns the decode batch the timing model charges: the
    /// ready requests that had already produced a token (1.6.1 charges a request's first
    /// token, emitted at its prefill's end, no decode time).
    pub(super) fn emit_tokens(&mut self, out: &mut PassOutput) -> timing::DecodeBatch {
        if self.common.role == WorkerRole::Prefill {
            self.hold_prefilled(out);
            return timing::DecodeBatch::default();
        }
        // A decode rank's first token of a transferred prompt is a decode step of its own.
        let charge_first = self.common.role == WorkerRole::Decode;
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
            let completed = self.finished(&self.reqs[slot as usize]);
            let r = &mut self.reqs[slot as usize];
            if self.count_middle && !first && !completed {
                r.middle_unlisted = r.middle_unlisted.saturating_add(1);
                r.middle_counted_in_pass = self.pass_seq;
                continue;
            }
            out.tokens.push(TokenOut {
                id: r.id,
                first,
                completed,
                middle_unlisted: std::mem::take(&mut r.middle_unlisted),
            });
            if completed {
                self.release_blocks(slot);
                self.forget(slot);
                self.capacity_generation += 1;
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
                self.capacity_generation += 1;
                self.running.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Counts middle tokens on their requests instead of listing them (see
    /// [`Worker::count_middle_tokens`](crate::mocker::Worker::count_middle_tokens)).
    pub fn count_middle_tokens(&mut self) {
        self.count_middle = true;
    }

    /// Hands each live request's delivered middle-token count to `credit` and forgets the
    /// counts (see [`Worker::credit_unlisted_tokens`](crate::mocker::Worker::credit_unlisted_tokens)). A request that got its latest counted
    /// token in a pass not yet delivered has that token taken off: a request gets at most
    /// one token a pass.
    pub fn credit_unlisted_tokens(&mut self, credit: &mut dyn FnMut(RequestId, u64)) {
        for r in self.reqs.iter_mut().filter(|r| r.live) {
            let undelivered = r.middle_counted_in_pass > self.delivered_seq;
            let delivered = r.middle_unlisted.saturating_sub(u32::from(undelivered));
            if delivered > 0 {
                credit(r.id, u64::from(delivered));
            }
            r.middle_unlisted = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use crate::mocker::test_support::row;

    /// A rank holding requests 0 (6 tokens out), 1 (1 token) and 2 (2 tokens), counting
    /// middle tokens or not.
    fn rank(counting: bool) -> MockWorker {
        let mut w = MockWorker::new(EngineArgs::default(), WorkerWithDpRank::new(0, 0));
        if counting {
            w.count_middle_tokens();
        }
        for (id, output) in [(0, 6), (1, 1), (2, 2)] {
            let request = row(id, 64, output, &[id as u32 + 1], 64);
            w.add_request(SimTime::ZERO, request).unwrap();
        }
        w
    }

    /// Runs `w` until it is idle, each pass's output handed back before the next starts;
    /// returns each pass's end and listed tokens.
    fn passes(w: &mut MockWorker) -> Vec<(SimTime, Vec<TokenOut>)> {
        let (mut now, mut out, mut seen) = (SimTime::ZERO, PassOutput::default(), Vec::new());
        // One pass an iteration; a bounded run.
        for _ in 0..100 {
            if !w.has_work() {
                return seen;
            }
            now = w.execute_pass(now, &mut out);
            seen.push((now, out.tokens.clone()));
        }
        panic!("the rank never went idle");
    }

    #[test]
    fn a_counting_rank_lists_first_and_last_tokens_and_the_last_carries_the_middle_count() {
        let listed = passes(&mut rank(false));
        let counted = passes(&mut rank(true));
        assert_eq!(listed.len(), counted.len(), "the same passes");
        for ((end, all), (counted_end, edges)) in listed.iter().zip(&counted) {
            assert_eq!(end, counted_end);
            let kept: Vec<RequestId> = all
                .iter()
                .filter(|t| t.first || t.completed)
                .map(|t| t.id)
                .collect();
            let ids: Vec<RequestId> = edges.iter().map(|t| t.id).collect();
            assert_eq!(kept, ids, "only first and last tokens are listed");
        }
        let last = |id| {
            let tokens = counted.iter().flat_map(|(_, tokens)| tokens);
            let last = tokens.filter(|t| t.id == RequestId(id) && t.completed);
            last.map(|t| t.middle_unlisted).collect::<Vec<_>>()
        };
        assert_eq!(last(0), [4], "6 tokens: the first, 4 counted, the last");
        assert_eq!(last(1), [0]);
        assert_eq!(last(2), [0]);
        let all = passes(&mut rank(false));
        assert!(
            all.iter()
                .flat_map(|p| &p.1)
                .all(|t| t.middle_unlisted == 0)
        );
    }

    #[test]
    fn counted_tokens_credited_at_a_runs_end_leave_out_the_pass_in_flight() {
        let credits = |deliver_last: bool| {
            let mut w = rank(true);
            let mut out = PassOutput::default();
            let mut now = SimTime::ZERO;
            // Pass 1 prefills and makes first tokens; passes 2 to 4 make request 0's
            // tokens 2 to 4 (request 2's second is its last).
            for _ in 0..4 {
                now = w.execute_pass(now, &mut out);
            }
            if deliver_last {
                w.take_back(&mut out);
            }
            let mut credited = Vec::new();
            w.credit_unlisted_tokens(&mut |id, tokens| credited.push((id, tokens)));
            let mut again = Vec::new();
            w.credit_unlisted_tokens(&mut |id, tokens| again.push((id, tokens)));
            assert!(again.is_empty(), "counts are credited once");
            credited
        };
        assert_eq!(credits(true), [(RequestId(0), 3)]);
        assert_eq!(
            credits(false),
            [(RequestId(0), 2)],
            "pass 4 never reached anyone"
        );
    }
}
