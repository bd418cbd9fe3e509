//! Warnings about results that should not be trusted as they stand, each
//! saying what to do next: high variance, outlier iterations, sizes dropped
//! for lack of memory. Variance and outliers are found from each row's
//! statistics (the outlier count comes from the modified z-score on the MAD,
//! computed over the per-iteration times where the sweep ran), so saved
//! results get the same warnings when re-rendered.

use super::Row;
use crate::units::Bytes;
use std::fmt;

/// p99 above this multiple of p50 is high variance.
pub const HIGH_VARIANCE_RATIO: f64 = 2.0;

/// Something a reader of the results should know, with what to do about it.
#[derive(Clone, Debug, PartialEq)]
pub enum Warning {
    /// Rows whose p99 time is more than [`HIGH_VARIANCE_RATIO`] times their p50.
    HighVariance {
        rows: usize,
        of: usize,
        /// The row with the largest p99/p50, described, and that ratio.
        worst: String,
        ratio: f64,
    },
    /// Rows with outlier iterations (modified z-score on the MAD above 3.5).
    Outliers {
        rows: usize,
        of: usize,
        /// The row with the most outliers, described, and how many.
        worst: String,
        outliers: u64,
    },
    /// The largest sizes were dropped because their buffers do not fit.
    SizesCapped {
        kept_max: u64,
        dropped: Vec<u64>,
        available: u64,
        ranks: usize,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::HighVariance {
                rows,
                of,
                worst,
                ratio,
            } => write!(
                f,
                "high variance in {rows} of {of} rows (worst: {worst}, p99 is {ratio:.1}x p50): \
                 something else was running or the iterations are too few; rerun on a quiet \
                 machine, or with more --iters and --warmup"
            ),
            Warning::Outliers {
                rows,
                of,
                worst,
                outliers,
            } => write!(
                f,
                "outlier iterations in {rows} of {of} rows (worst: {worst}, {outliers} \
                 iterations): times are disturbed by other work (interrupts, other processes, \
                 frequency changes); rerun on a quiet machine or with more --iters, and use \
                 stats.p50_us in the JSON rather than the mean"
            ),
            Warning::SizesCapped {
                kept_max,
                dropped,
                available,
                ranks,
            } => {
                let first = dropped.first().copied().unwrap_or(0);
                write!(
                    f,
                    "{} size(s) from {} up skipped: their buffers for {ranks} ranks do not fit \
                     in the {} of memory available, so the sweep stops at {}; use fewer \
                     --ranks, free memory, or a machine with more of it",
                    dropped.len(),
                    Bytes(first),
                    Bytes(*available),
                    Bytes(*kept_max)
                )
            }
        }
    }
}

/// A row, described for a person: `all-reduce ring float sum 8B out-of-place`.
pub fn describe(r: &Row) -> String {
    let op = if r.op == "none" {
        String::new()
    } else {
        format!(" {}", r.op)
    };
    let root = if r.root >= 0 {
        format!(" root {}", r.root)
    } else {
        String::new()
    };
    let place = if r.placement == "in" {
        "in-place"
    } else {
        "out-of-place"
    };
    format!(
        "{} {} {}{op}{root} {} {place}",
        r.collective,
        r.algo,
        r.dtype,
        Bytes(r.bytes)
    )
}

/// The warnings `rows` deserve, at most one of each kind.
pub fn scan(rows: &[Row]) -> Vec<Warning> {
    let mut out = Vec::new();
    let ratio = |r: &Row| {
        if r.stats.p50_us > 0.0 {
            r.stats.p99_us / r.stats.p50_us
        } else {
            0.0
        }
    };
    let noisy: Vec<&Row> = rows
        .iter()
        .filter(|r| ratio(r) > HIGH_VARIANCE_RATIO)
        .collect();
    if let Some(w) = noisy.iter().max_by(|a, b| ratio(a).total_cmp(&ratio(b))) {
        out.push(Warning::HighVariance {
            rows: noisy.len(),
            of: rows.len(),
            worst: describe(w),
            ratio: ratio(w),
        });
    }
    let outlying: Vec<&Row> = rows.iter().filter(|r| r.stats.outliers > 0).collect();
    if let Some(w) = outlying.iter().max_by_key(|r| r.stats.outliers) {
        out.push(Warning::Outliers {
            rows: outlying.len(),
            of: rows.len(),
            worst: describe(w),
            outliers: w.stats.outliers,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::row;

    #[test]
    fn quiet_rows_have_no_warnings() {
        assert!(scan(&[row(8, "out"), row(16, "in")]).is_empty());
        assert!(scan(&[]).is_empty());
    }

    #[test]
    fn variance_and_outliers_are_summed_up_once_each() {
        let mut a = row(8, "out");
        a.stats.p99_us = 35.0;
        let mut b = row(16, "in");
        b.stats.p99_us = 25.0;
        b.stats.outliers = 3;
        let w = scan(&[a, b, row(32, "out")]);
        assert_eq!(w.len(), 2, "{w:?}");
        let text = w[0].to_string();
        assert!(text.contains("2 of 3 rows"), "{text}");
        assert!(
            text.contains("all-reduce ring float sum 8B out-of-place"),
            "{text}"
        );
        assert!(text.contains("3.5x") && text.contains("--iters"), "{text}");
        let text = w[1].to_string();
        assert!(
            text.contains("1 of 3 rows") && text.contains("3 iterations"),
            "{text}"
        );
    }

    #[test]
    fn capped_sizes_say_what_to_do() {
        let w = Warning::SizesCapped {
            kept_max: 1 << 20,
            dropped: vec![2 << 20, 4 << 20],
            available: 3 << 20,
            ranks: 8,
        };
        let text = w.to_string();
        assert!(text.starts_with("2 size(s) from 2MiB up skipped"), "{text}");
        assert!(
            text.contains("stops at 1MiB") && text.contains("fewer --ranks"),
            "{text}"
        );
    }
}
