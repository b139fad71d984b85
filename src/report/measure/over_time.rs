//! Means by arrival time: a class's completed requests cut into arrival-time buckets, and
//! the mean of a few durations per bucket (the disaggregated phases, the latency a class saw
//! while the fleet scaled).

use crate::sim::RequestRecord;
use crate::time::SimTime;

/// How many arrival-time buckets a curve has at most: enough to see a burst, few enough that
/// each bucket's mean is made of several requests.
pub const MAX_BUCKETS: usize = 60;

/// One arrival-time bucket of a class's requests, with the mean of `N` durations.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrivalBucket<const N: usize> {
    /// The bucket's arrival window in ms, `[start_ms, end_ms)`.
    pub start_ms: f64,
    pub end_ms: f64,
    /// Requests measured that arrived in the window.
    pub requests: u64,
    /// Their mean of each duration, in ms.
    pub mean_ms: [f64; N],
}

impl<const N: usize> ArrivalBucket<N> {
    /// The middle of the bucket's window, where its means are drawn.
    pub fn mid_ms(&self) -> f64 {
        (self.start_ms + self.end_ms) / 2.0
    }
}

/// One class's buckets, in time order (empty buckets left out).
#[derive(Clone, Debug, PartialEq)]
pub struct ArrivalCurve<const N: usize> {
    pub class: usize,
    pub buckets: Vec<ArrivalBucket<N>>,
}

/// Each class's curve of the records `durations_ns` measures (`None`: left out), for the
/// classes with at least one. All classes share one bucketing, over the arrivals measured.
/// `records` carry resolved class indices.
pub fn curves_by_arrival<const N: usize>(
    records: &[RequestRecord],
    class_count: usize,
    durations_ns: impl Fn(&RequestRecord) -> Option<[u64; N]>,
) -> Vec<ArrivalCurve<N>> {
    let timed: Vec<(usize, SimTime, [u64; N])> = records
        .iter()
        .filter_map(|r| Some((r.class()?, r.arrival, durations_ns(r)?)))
        .collect();
    let Some(last) = timed.iter().map(|t| t.1).max() else {
        return Vec::new();
    };
    let first = timed.iter().map(|t| t.1).min().unwrap_or(last);
    let span_ns = last.saturating_since(first).as_ns() + 1;
    let width_ns = span_ns.div_ceil(MAX_BUCKETS as u64).max(1);
    let bucket_of = |t: SimTime| (t.saturating_since(first).as_ns() / width_ns) as usize;
    let bucket_count = bucket_of(last) + 1;
    let start_ms = |k: usize| (first.as_ns() + k as u64 * width_ns) as f64 / 1e6;
    (0..class_count)
        .filter_map(|class| {
            let mut sums = vec![([0u128; N], 0u64); bucket_count];
            for (_, arrival, durations) in timed.iter().filter(|t| t.0 == class) {
                let (sum, count) = &mut sums[bucket_of(*arrival)];
                for (s, d) in sum.iter_mut().zip(durations) {
                    *s += u128::from(*d);
                }
                *count += 1;
            }
            let buckets: Vec<ArrivalBucket<N>> = (sums.iter().enumerate())
                .filter(|(_, (_, count))| *count > 0)
                .map(|(k, (sum, count))| ArrivalBucket {
                    start_ms: start_ms(k),
                    end_ms: start_ms(k + 1),
                    requests: *count,
                    mean_ms: sum.map(|s| s as f64 / *count as f64 / 1e6),
                })
                .collect();
            (!buckets.is_empty()).then_some(ArrivalCurve { class, buckets })
        })
        .collect()
}

/// What a request's time to first token and end-to-end latency were, in ns (`None`: it did
/// not complete).
pub fn latency_ns(r: &RequestRecord) -> Option<[u64; 2]> {
    let first = r.first_token?.saturating_since(r.arrival).as_ns();
    let end = r.completion?.saturating_since(r.arrival).as_ns();
    Some([first, end])
}

/// Each class's mean TTFT and end-to-end latency by arrival time.
pub fn latency_curves(records: &[RequestRecord], class_count: usize) -> Vec<ArrivalCurve<2>> {
    curves_by_arrival(records, class_count, latency_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, ms};
    use crate::scheduling::scheduler::DispatchPath;

    /// A completed request of `class`: arrived, first token, completed (ms).
    fn timed(row: u64, class: usize, [arrival, first, end]: [u64; 3]) -> RequestRecord {
        let mut r = done(row, class, DispatchPath::Immediate, [arrival, arrival, end]);
        r.first_token = Some(ms(first));
        r
    }

    #[test]
    fn latency_curves_hold_each_classs_mean_ttft_and_end_to_end_per_arrival_bucket() {
        let records = vec![
            timed(0, 0, [0, 40, 100]),
            timed(1, 0, [10, 30, 50]),
            timed(2, 1, [6_000, 6_500, 9_000]),
        ];
        let curves = latency_curves(&records, 3);
        assert_eq!(curves.len(), 2, "a class with no requests has no curve");
        let first = &curves[0].buckets;
        assert_eq!((first.len(), first[0].requests), (1, 2));
        assert_eq!(first[0].mean_ms, [30.0, 70.0]);
        assert_eq!(curves[1].class, 1);
        assert_eq!(curves[1].buckets[0].mean_ms, [500.0, 3_000.0]);
        let mid = curves[1].buckets[0].mid_ms();
        assert!((5_900.0..=6_001.0).contains(&mid), "{mid}");
    }

    #[test]
    fn an_unfinished_request_is_left_out() {
        let mut r = timed(0, 0, [0, 40, 100]);
        r.completion = None;
        assert_eq!(latency_ns(&r), None);
        assert!(latency_curves(&[r], 1).is_empty());
    }
}
