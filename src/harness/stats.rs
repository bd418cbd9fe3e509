//! Statistics of per-iteration samples.

use crate::report::Stats;

/// p50/p99/min/max of `samples_us` (empty: all zero), and how many are
/// outliers by [`mad_outliers`].
pub fn summarize(samples_us: &[f64]) -> Stats {
    let mut v: Vec<f64> = samples_us
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return Stats::default();
    }
    v.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        let idx = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[idx]
    };
    Stats {
        p50_us: pick(0.50),
        p99_us: pick(0.99),
        min_us: v[0],
        max_us: v[v.len() - 1],
        outliers: mad_outliers(&v) as u64,
    }
}

/// The median of sorted, non-empty `v`.
fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// How many samples are outliers by the modified z-score
/// `M = 0.6745 (x - median) / MAD`, with `|M| > 3.5` an outlier: B. Iglewicz
/// and D. C. Hoaglin, "How to Detect and Handle Outliers", ASQC Basic
/// References in Quality Control vol. 16 (1993). Where more than half the
/// samples are equal the MAD is 0; the mean absolute deviation stands in,
/// scaled by 1.253314 (so `M = (x - median) / (1.253314 MeanAD)`). Fewer than
/// three samples have no outliers.
pub fn mad_outliers(samples: &[f64]) -> usize {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 3 {
        return 0;
    }
    v.sort_by(f64::total_cmp);
    let med = median_sorted(&v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let mad = median_sorted(&dev);
    let scale = if mad > 0.0 {
        mad / 0.6745
    } else {
        1.253_314 * dev.iter().sum::<f64>() / dev.len() as f64
    };
    if scale <= 0.0 {
        return 0;
    }
    v.iter()
        .filter(|x| ((*x - med) / scale).abs() > 3.5)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!(
            (s.p50_us, s.p99_us, s.min_us, s.max_us, s.outliers),
            (50.0, 99.0, 1.0, 100.0, 0)
        );
        let s = summarize(&[3.0]);
        assert_eq!((s.p50_us, s.p99_us), (3.0, 3.0));
        assert_eq!(summarize(&[]), Stats::default());
    }

    #[test]
    fn mad_finds_the_stragglers_and_only_them() {
        let mut v = vec![10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.1];
        assert_eq!(mad_outliers(&v), 0);
        v.push(25.0);
        v.push(40.0);
        assert_eq!(mad_outliers(&v), 2);
        // MAD 0 (most samples equal): the mean absolute deviation stands in.
        assert_eq!(mad_outliers(&[5.0, 5.0, 5.0, 5.0, 5.0, 50.0]), 1);
        assert_eq!(mad_outliers(&[5.0, 5.0, 5.0]), 0);
        assert_eq!(mad_outliers(&[1.0, 100.0]), 0);
    }
}
