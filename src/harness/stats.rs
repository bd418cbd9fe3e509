//! Statistics of per-iteration samples.

use crate::report::Stats;

/// p50/p99/min/max of `samples_us` (empty: all zero).
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!(
            (s.p50_us, s.p99_us, s.min_us, s.max_us),
            (50.0, 99.0, 1.0, 100.0)
        );
        let s = summarize(&[3.0]);
        assert_eq!((s.p50_us, s.p99_us), (3.0, 3.0));
        assert_eq!(summarize(&[]), Stats::default());
    }
}
