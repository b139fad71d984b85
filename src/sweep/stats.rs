//! Statistics over replications: mean, min, max and the Student-t 95% confidence interval
//! of the mean.

/// Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..=30.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// t(0.975, df): tabulated up to 30, then the tabulated values at 40, 60 and 120 and the
/// normal quantile, each used up to the next (a slightly wider, so conservative, interval).
pub fn t975(df: usize) -> f64 {
    match df {
        0 => f64::NAN,
        1..=30 => T975[df - 1],
        31..=40 => 2.042,
        41..=60 => 2.021,
        61..=120 => 2.000,
        121..=1000 => 1.980,
        _ => 1.960,
    }
}

/// Summary of one metric over replications.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Summary {
    /// How many replications had a value.
    pub n: usize,
    /// The arithmetic mean.
    pub mean: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The 95% confidence interval of the mean (Student t with n-1 degrees of freedom);
    /// the mean itself for a single value (no spread is known).
    pub ci95_low: f64,
    /// The interval's upper end.
    pub ci95_high: f64,
}

impl Summary {
    /// Summarises `values` (in replication order, so sums round the same way every time);
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let half_width = match n {
            1 => 0.0,
            _ => {
                let variance =
                    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
                t975(n - 1) * (variance / n as f64).sqrt()
            }
        };
        Some(Summary {
            n,
            mean,
            min,
            max,
            ci95_low: mean - half_width,
            ci95_high: mean + half_width,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.n, s.mean, s.min, s.max), (4, 2.5, 1.0, 4.0));
        // sd = sqrt(5/3); half width = 3.182 * sd / 2.
        let half = 3.182 * (5.0f64 / 3.0).sqrt() / 2.0;
        assert!((s.ci95_high - 2.5 - half).abs() < 1e-12);
        assert!((2.5 - s.ci95_low - half).abs() < 1e-12);
    }

    #[test]
    fn one_value_or_equal_values_have_no_spread() {
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.ci95_low, one.ci95_high), (7.0, 7.0));
        let same = Summary::of(&[0.8; 8]).unwrap();
        assert!((same.ci95_high - same.ci95_low).abs() < 1e-12);
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn t_quantiles_shrink_toward_the_normal() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(7), 2.365);
        assert!(t975(31) < t975(30) + 1e-12);
        assert_eq!(t975(100_000), 1.960);
        assert!((2..200).all(|df| t975(df) <= t975(df - 1)));
    }
}
