//! Where a disaggregated request's time went, over the run: for each class, the mean queue
//! wait, prefill, transfer and decode of its completed requests, by arrival time.
//!
//! The four phases add up to the end-to-end latency: queue from arrival to the prefill
//! admission, prefill to the end of the last prefill pass, transfer from there to the decode
//! admission (waiting for room on the decode worker, the transfer itself, waiting for a
//! slot), decode from there to the last token.

use super::over_time::{ArrivalBucket, ArrivalCurve, curves_by_arrival};
use crate::sim::RequestRecord;

/// The phases, in the order a request passes them.
pub const PHASE_NAMES: [&str; 4] = ["queue", "prefill", "transfer", "decode"];

/// One arrival-time bucket of a class's completed requests: their mean time in each phase,
/// in [`PHASE_NAMES`] order.
pub type PhaseBucket = ArrivalBucket<4>;

/// One class's phase buckets, in time order (empty buckets left out).
pub type PhaseCurve = ArrivalCurve<4>;

/// The four phase durations of a completed disaggregated request, in ns; `None` for any
/// other request.
pub fn phase_ns(r: &RequestRecord) -> Option<[u64; 4]> {
    let h = r.handoff()?;
    let instants = [
        r.arrival,
        r.admit?,
        h.prefill_end?,
        h.decode_admit?,
        r.completion?,
    ];
    let span = |k: usize| instants[k + 1].saturating_since(instants[k]).as_ns();
    Some([span(0), span(1), span(2), span(3)])
}

/// Each class's phase curve, for the classes with completed disaggregated requests (none in
/// an aggregated run). `records` carry resolved class indices.
pub fn phase_curves(records: &[RequestRecord], class_count: usize) -> Vec<PhaseCurve> {
    curves_by_arrival(records, class_count, phase_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, ms};
    use crate::scheduling::scheduler::DispatchPath;
    use crate::sim::HandoffRecord;

    fn record(class: usize, arrival_ms: u64, completion_ms: u64) -> RequestRecord {
        let times = [arrival_ms, arrival_ms, completion_ms];
        done(0, class, DispatchPath::Immediate, times)
    }

    fn disaggregated(class: usize, times_ms: [u64; 5]) -> RequestRecord {
        let mut r = record(class, times_ms[0], times_ms[4]);
        r.admit = Some(ms(times_ms[1]));
        r.rare_mut().handoff = Some(HandoffRecord {
            prefill_rank: crate::scheduling::types::WorkerWithDpRank::new(0, 0),
            prefill_end: Some(ms(times_ms[2])),
            transfer_start: Some(ms(times_ms[2])),
            transfer_end: Some(ms(times_ms[3])),
            prefill_release: Some(ms(times_ms[3])),
            decode_admit: Some(ms(times_ms[3])),
            decode_reused_input_tokens: 0,
        });
        r
    }

    #[test]
    fn phases_add_up_to_the_end_to_end_latency() {
        let r = disaggregated(0, [10, 15, 45, 50, 250]);
        let phases = phase_ns(&r).unwrap();
        assert_eq!(phases.map(|p| p / 1_000_000), [5, 30, 5, 200]);
        let e2e = r.completion.unwrap().saturating_since(r.arrival).as_ns();
        assert_eq!(phases.iter().sum::<u64>(), e2e);
    }

    #[test]
    fn an_aggregated_or_unfinished_request_has_no_phases() {
        assert_eq!(phase_ns(&record(0, 0, 100)), None);
        let mut r = disaggregated(0, [0, 1, 2, 3, 4]);
        r.completion = None;
        assert_eq!(phase_ns(&r), None);
        assert!(phase_curves(&[record(0, 0, 100)], 1).is_empty());
    }

    #[test]
    fn each_class_gets_the_means_of_its_arrival_buckets() {
        // Two premium requests in the first bucket, one regular in the last.
        let records = vec![
            disaggregated(0, [0, 10, 20, 30, 130]),
            disaggregated(0, [0, 30, 40, 50, 90]),
            disaggregated(1, [5_999, 6_000, 6_010, 6_020, 6_040]),
        ];
        let curves = phase_curves(&records, 2);
        assert_eq!(curves.len(), 2);
        let premium = &curves[0].buckets;
        assert_eq!(premium.len(), 1);
        assert_eq!(premium[0].requests, 2);
        assert_eq!(premium[0].mean_ms, [20.0, 10.0, 10.0, 70.0]);
        let regular = &curves[1];
        assert_eq!(regular.class, 1);
        assert_eq!(regular.buckets[0].mean_ms, [1.0, 10.0, 10.0, 20.0]);
        assert!(regular.buckets[0].start_ms <= 5_999.0 && 5_999.0 < regular.buckets[0].end_ms);
        assert!(regular.buckets[0].end_ms - regular.buckets[0].start_ms <= 6_000.0 / 59.0);
    }
}
