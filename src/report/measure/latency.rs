//! Latency statistics: the summary of one distribution (count, mean, nearest-rank
//! percentiles, max) and which statistic of it a figure names.

/// Summary statistics of one latency distribution, in nanoseconds. With `count == 0` every
/// statistic is `None` (see [`LatencyStats::get`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyStats {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// Which statistic of a latency distribution.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stat {
    Mean,
    P50,
    P90,
    P99,
    Max,
}

impl Stat {
    /// Every statistic, in report order.
    pub const ALL: [Stat; 5] = [Stat::Mean, Stat::P50, Stat::P90, Stat::P99, Stat::Max];

    /// The suffix used in metric names (`mean`, `p50`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::Max => "max",
        }
    }
}

impl LatencyStats {
    /// Statistics of `values_ns` (any order) with nearest-rank percentiles.
    pub fn from_values(mut values_ns: Vec<u64>) -> LatencyStats {
        values_ns.sort_unstable();
        LatencyStats::from_sorted(&values_ns)
    }

    /// Statistics of ascending `values_ns` with nearest-rank percentiles.
    pub fn from_sorted(values_ns: &[u64]) -> LatencyStats {
        debug_assert!(values_ns.is_sorted(), "samples are sorted");
        if values_ns.is_empty() {
            return LatencyStats::default();
        }
        let n = values_ns.len() as u64;
        let sum: u128 = values_ns.iter().map(|&v| u128::from(v)).sum();
        let mean = (sum + u128::from(n) / 2) / u128::from(n);
        LatencyStats {
            count: n,
            mean_ns: mean as u64,
            p50_ns: nearest_rank(values_ns, 50),
            p90_ns: nearest_rank(values_ns, 90),
            p99_ns: nearest_rank(values_ns, 99),
            max_ns: *values_ns.last().expect("non-empty"),
        }
    }

    /// One statistic in nanoseconds, `None` when there are no values.
    pub fn get(&self, stat: Stat) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        Some(match stat {
            Stat::Mean => self.mean_ns,
            Stat::P50 => self.p50_ns,
            Stat::P90 => self.p90_ns,
            Stat::P99 => self.p99_ns,
            Stat::Max => self.max_ns,
        })
    }
}

/// The nearest-rank `percent`-th percentile of non-empty ascending `sorted`.
pub fn nearest_rank(sorted: &[u64], percent: u64) -> u64 {
    assert!(!sorted.is_empty() && percent <= 100);
    let n = sorted.len() as u64;
    let rank = (percent * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}
