//! A mock rank's pass metrics (1.6.1's forward-pass metrics, which a scaling policy reads):
//! what the pass being formed computed, for which requests, and what waits behind it.

use super::MockWorker;
use crate::mocker::config::WorkerRole;
use crate::mocker::protocol::{PassMetrics, RequestPhase};
use crate::time::SimDuration;

impl MockWorker {
    /// From now on each pass's output carries its metrics (see
    /// [`Worker::record_pass_metrics`](crate::mocker::Worker::record_pass_metrics)).
    pub fn record_pass_metrics(&mut self) {
        self.record_metrics = true;
    }

    /// The metrics of the pass just formed (every request scheduled, none emitted yet),
    /// which runs for `duration`.
    pub(super) fn pass_metrics(&self, duration: SimDuration) -> PassMetrics {
        let mut metrics = PassMetrics {
            duration,
            ..PassMetrics::default()
        };
        for scheduled in &self.scheduled {
            let r = self.req(scheduled.slot);
            if scheduled.prompt_tokens > 0 {
                metrics.prefill.add(r.prompt_tokens);
                metrics.prefill_computed_tokens += scheduled.tokens;
                metrics.prefill_prefix_tokens += scheduled.prefix_tokens;
            } else if !self.finished(r) {
                metrics.decode.add(r.seq_len());
                metrics.decode_forwards += u64::from(r.computed >= r.seq_len());
            }
        }
        // A token decoded in place left no scheduled entry, only its stamp.
        for &slot in &self.running {
            let r = self.req(slot);
            if r.decoded_in_pass == self.pass_seq {
                metrics.decode.add(r.seq_len());
                metrics.decode_forwards += 1;
            }
        }
        // A prefill rank's tokens are no decode step (it hands its prompts on).
        if self.common.role == WorkerRole::Prefill {
            metrics.decode_forwards = 0;
        }
        for &slot in &self.waiting {
            let r = self.req(slot);
            match r.phase {
                RequestPhase::Preempted => metrics.queued_decode.add(r.seq_len()),
                _ => metrics.queued_prefill.add(r.prompt_tokens),
            }
        }
        // A decode rank's handoffs wait to decode by their prompt: landed, or reserved (in
        // no queue; only a decode rank reserves).
        for &slot in &self.landed {
            metrics.queued_decode.add(self.req(slot).prompt_tokens);
        }
        if self.held > 0 {
            let reserved = self.slot_of.values().map(|&slot| self.req(slot));
            let reserved = reserved.filter(|r| r.phase == RequestPhase::Reserved);
            reserved.for_each(|r| metrics.queued_decode.add(r.prompt_tokens));
        }
        metrics
    }
}

#[cfg(test)]
mod tests {
    use crate::mocker::protocol::{LengthStats, PassOutput};
    use crate::mocker::test_support::row;
    use crate::mocker::{EngineArgs, MockWorker};
    use crate::scheduling::types::WorkerWithDpRank;
    use crate::time::SimTime;

    fn lengths(values: &[u64]) -> LengthStats {
        let mut stats = LengthStats::default();
        values.iter().for_each(|&v| stats.add(v));
        stats
    }

    /// Two prompts share a block; the batch holds two requests, so a third waits. The
    /// first pass prefills both (the second's shared block found in the same pass), the
    /// second decodes both.
    #[test]
    fn a_pass_reports_what_it_prefilled_decoded_and_left_waiting() {
        let mut args = EngineArgs::default();
        args.common.capacity.max_num_seqs = 2;
        let mut worker = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        worker.record_pass_metrics();
        for request in [
            row(0, 1024, 3, &[1, 2], 64),
            row(1, 768, 3, &[1, 3], 64),
            row(2, 700, 3, &[4, 5], 64),
        ] {
            worker.add_request(SimTime::ZERO, request).unwrap();
        }
        let mut out = PassOutput::default();
        let end = worker.execute_pass(SimTime::ZERO, &mut out);
        let first = *out.metrics.take().unwrap();
        assert_eq!(first.duration, end.saturating_since(SimTime::ZERO));
        assert_eq!(first.prefill, lengths(&[1024, 768]));
        assert_eq!(first.prefill_computed_tokens, 1024 + 256);
        assert_eq!(first.prefill_prefix_tokens, 512);
        assert_eq!((first.decode, first.decode_forwards), (lengths(&[]), 0));
        assert_eq!(first.queued_prefill, lengths(&[700]));
        assert_eq!(first.queued_decode, lengths(&[]));
        assert_eq!(first.prefill.variance(), 128.0 * 128.0);

        worker.execute_pass(end, &mut out);
        let second = *out.metrics.take().unwrap();
        assert_eq!(second.prefill, lengths(&[]));
        assert_eq!(
            (second.decode, second.decode_forwards),
            (lengths(&[1025, 769]), 2)
        );
        assert_eq!(second.queued_prefill, lengths(&[700]));
    }

    #[test]
    fn a_rank_not_asked_reports_no_metrics() {
        let mut worker = MockWorker::new(EngineArgs::default(), WorkerWithDpRank::new(0, 0));
        worker
            .add_request(SimTime::ZERO, row(0, 100, 2, &[1], 64))
            .unwrap();
        let mut out = PassOutput::default();
        worker.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(out.metrics, None);
    }

    #[test]
    fn variance_is_the_population_variance_from_exact_sums() {
        assert_eq!(lengths(&[]).variance(), 0.0);
        assert_eq!(lengths(&[7]).variance(), 0.0);
        assert_eq!(lengths(&[2, 4, 4, 4, 5, 5, 7, 9]).variance(), 4.0);
        // Large lengths whose f64 squares would lose the spread keep it exactly.
        let big = 1u64 << 40;
        assert_eq!(lengths(&[big, big + 2]).variance(), 1.0);
    }
}
