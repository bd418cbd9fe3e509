//! How the v-collectives (all-to-all-v, all-gather-v, reduce-scatter-v)
//! divide their data among ranks: a [`Split`] gives every rank (or every
//! source and destination pair) a weight, and a [`VShape`] turns the
//! weights and a case's element total into per-rank counts.
//!
//! The counts follow the weights: `floor(total * w / W)` each, and what the
//! floors leave to the first of the largest weights, so they always add up
//! to the total. All-gather-v and reduce-scatter-v have one block per rank
//! (their `total` is the gathered buffer); all-to-all-v has a matrix, each
//! source's row adding up to `total` (every rank sends `total` elements, as
//! nccl-tests' `alltoallv_perf` sizes its buffers).

use std::fmt;

/// How much of the data each rank holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// Every rank (pair) the same.
    Uniform,
    /// Seeded random weights from 1 to 16 (per rank; per pair for all-to-all-v).
    Skew(u64),
    /// One rank holds three quarters of the data (all-to-all-v: receives
    /// three quarters of every rank's; the others share the rest).
    Hot(usize),
    /// Weights read from a file: one per rank, or (all-to-all-v) one row per
    /// source rank of one weight per destination.
    Weights {
        name: &'static str,
        rows: u32,
        w: &'static [u64],
    },
}

/// Integer units a file's weight is counted in (weights may have fractions).
pub const WEIGHT_UNIT: f64 = 1_000_000.0;

impl Split {
    /// `uniform`, `skew[:SEED]` or `hot[:RANK]`; `None` for anything else
    /// (which the CLI reads as a file of weights).
    pub fn parse_named(s: &str) -> Result<Option<Split>, String> {
        let t = s.trim();
        let (name, arg) = match t.split_once(':') {
            Some((a, b)) => (a.trim().to_ascii_lowercase(), Some(b.trim())),
            None => (t.to_ascii_lowercase(), None),
        };
        let number = |what: &str, v: &str| {
            v.parse::<u64>().map_err(|_| {
                format!("{name}:{v}: the {what} must be a whole number, e.g. {name}:1")
            })
        };
        match (name.as_str(), arg) {
            ("uniform", None) => Ok(Some(Split::Uniform)),
            ("uniform", Some(_)) => Err("uniform takes no argument".into()),
            ("skew", None) => Ok(Some(Split::Skew(1))),
            ("skew", Some(v)) => Ok(Some(Split::Skew(number("seed", v)?))),
            ("hot", None) => Ok(Some(Split::Hot(0))),
            ("hot", Some(v)) => Ok(Some(Split::Hot(number("rank", v)? as usize))),
            _ => Ok(None),
        }
    }

    /// Weights from a file's text: numbers (fractions allowed, none
    /// negative) separated by spaces or commas, one row per line; `#`
    /// starts a comment. One row: a weight per rank; several: a matrix
    /// whose row `s` weighs what rank `s` sends to each rank. The weights
    /// are kept for the life of the process.
    pub fn from_text(name: &str, text: &str) -> Result<Split, String> {
        let mut rows: Vec<Vec<u64>> = Vec::new();
        for (no, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            // Between two commas there is a weight: `1,,2` is a weight
            // missing, not two weights (a comma at the end is no weight).
            let line = line.trim_end();
            let items: Vec<&str> = line.strip_suffix(',').unwrap_or(line).split(',').collect();
            if items.len() > 1 && items.iter().any(|i| i.trim().is_empty()) {
                return Err(format!(
                    "{name}:{}: an empty weight (two commas, or one at the start)",
                    no + 1
                ));
            }
            let mut row = Vec::new();
            for tok in items.iter().flat_map(|i| i.split_whitespace()) {
                let v: f64 = tok
                    .parse()
                    .map_err(|_| format!("{name}:{}: {tok:?} is not a number", no + 1))?;
                if !v.is_finite() || v < 0.0 || v * WEIGHT_UNIT > 1e15 {
                    return Err(format!(
                        "{name}:{}: weight {tok} must be finite, at least 0 and at most 1e9",
                        no + 1
                    ));
                }
                row.push((v * WEIGHT_UNIT).round() as u64);
            }
            if !row.is_empty() {
                rows.push(row);
            }
        }
        if rows.len() > 1 && rows.iter().all(|r| r.len() == 1) {
            // One weight a line: a column of per-rank weights, as a row is.
            rows = vec![rows.into_iter().flatten().collect()];
        }
        let Some(first) = rows.first() else {
            return Err(format!(
                "{name}: no weights (one per rank, or a row per rank)"
            ));
        };
        let width = first.len();
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != width) {
            return Err(format!(
                "{name}: row {} has {} weights, row 1 has {width}: a matrix needs one weight per rank in every row",
                i + 1,
                r.len()
            ));
        }
        if rows.len() > 1 && rows.len() != width {
            return Err(format!(
                "{name}: {} rows of {width} weights: a matrix is square (a row per sending rank, a weight per receiving rank in each)",
                rows.len()
            ));
        }
        let n = rows.len() as u32;
        let w: Vec<u64> = rows.into_iter().flatten().collect();
        Ok(Split::Weights {
            name: Box::leak(name.to_string().into_boxed_str()),
            rows: n,
            w: Box::leak(w.into_boxed_slice()),
        })
    }

    /// Whether this split can divide `kind`'s data among `nranks` ranks.
    pub fn check(&self, kind: VKind, nranks: usize) -> Result<(), String> {
        match *self {
            Split::Uniform | Split::Skew(_) => Ok(()),
            Split::Hot(r) if r < nranks => Ok(()),
            Split::Hot(r) => Err(format!(
                "--split hot:{r}: rank {r} is outside the {nranks} ranks"
            )),
            Split::Weights { name, rows, w } => {
                let width = w.len() / rows.max(1) as usize;
                if width != nranks {
                    return Err(format!(
                        "--split {name}: {width} weights per row for {nranks} ranks (one per rank)"
                    ));
                }
                if rows > 1 && kind != VKind::AllToAll {
                    return Err(format!(
                        "--split {name}: a matrix of weights is for all-to-all-v; {} takes one row (a weight per rank)",
                        kind.name()
                    ));
                }
                let zero_row = w
                    .chunks(width.max(1))
                    .position(|r| r.iter().all(|&x| x == 0));
                match zero_row {
                    Some(i) if rows > 1 => Err(format!(
                        "--split {name}: row {} is all zero (every rank sends its data somewhere; weights are kept to 6 decimals)",
                        i + 1
                    )),
                    Some(_) => Err(format!(
                        "--split {name}: every weight is zero (weights are kept to 6 decimals)"
                    )),
                    None => Ok(()),
                }
            }
        }
    }

    /// The weight of data `s` sends to `d` (all-to-all-v), or of rank `d`'s
    /// block (`matrix` false, where `s` is ignored).
    fn weight(&self, matrix: bool, n: usize, s: usize, d: usize) -> u64 {
        match *self {
            Split::Uniform => 1,
            Split::Skew(seed) => {
                let key = if matrix { (s * n + d) as u64 } else { d as u64 };
                1 + mix(mix(seed ^ 0x5EED) ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % 16
            }
            Split::Hot(h) if d == h % n.max(1) => 3 * (n as u64).saturating_sub(1).max(1),
            Split::Hot(_) => 1,
            Split::Weights { rows, w, .. } => {
                let width = w.len() / rows.max(1) as usize;
                let row = if rows > 1 { s % rows as usize } else { 0 };
                w.get(row * width + d).copied().unwrap_or(0)
            }
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Uniform => f.write_str("uniform"),
            Split::Skew(seed) => write!(f, "skew:{seed}"),
            Split::Hot(r) => write!(f, "hot:{r}"),
            Split::Weights { name, .. } => f.write_str(name),
        }
    }
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which v-collective a shape divides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VKind {
    /// One block per rank; `total` is every rank's receive buffer.
    AllGather,
    /// One block per rank; `total` is every rank's send buffer.
    ReduceScatter,
    /// A block per (source, destination); `total` is every rank's send buffer.
    AllToAll,
}

impl VKind {
    pub fn name(self) -> &'static str {
        match self {
            VKind::AllGather => "all-gather-v",
            VKind::ReduceScatter => "reduce-scatter-v",
            VKind::AllToAll => "all-to-all-v",
        }
    }
}

/// The per-rank counts of one v-collective case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VShape {
    pub kind: VKind,
    pub split: Split,
    /// Elements: the gathered buffer (all-gather-v, reduce-scatter-v), or
    /// each rank's send buffer (all-to-all-v).
    pub total: usize,
    pub nranks: usize,
}

impl VShape {
    /// Elements of each rank's block (one-block kinds), or what source `s`
    /// sends to each rank (all-to-all-v).
    pub fn row(&self, s: usize) -> Vec<usize> {
        let matrix = self.kind == VKind::AllToAll;
        let n = self.nranks.max(1);
        let w: Vec<u64> = (0..n).map(|d| self.split.weight(matrix, n, s, d)).collect();
        distribute(self.total, &w)
    }

    /// Every row: `[s][d]`, what `s` sends to `d` (a single row for the
    /// one-block kinds).
    pub fn matrix(&self) -> Vec<Vec<usize>> {
        match self.kind {
            VKind::AllToAll => (0..self.nranks.max(1)).map(|s| self.row(s)).collect(),
            _ => vec![self.row(0)],
        }
    }
}

/// `total` divided in proportion to `w`: floors, and their remainder to the
/// first of the largest weights. All zero weights get nothing.
pub fn distribute(total: usize, w: &[u64]) -> Vec<usize> {
    let sum: u128 = w.iter().map(|&x| x as u128).sum();
    if sum == 0 {
        return vec![0; w.len()];
    }
    let mut out: Vec<usize> = w
        .iter()
        .map(|&x| (total as u128 * x as u128 / sum) as usize)
        .collect();
    let given: usize = out.iter().sum();
    let max = w.iter().copied().max().unwrap_or(0);
    if let Some(i) = w.iter().position(|&x| x == max) {
        out[i] += total - given;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn distribute_adds_up_and_follows_the_order_of_weights(
            total in 0usize..(1 << 40),
            w in proptest::collection::vec(0u64..(1 << 40), 1..40),
        ) {
            let d = distribute(total, &w);
            prop_assert_eq!(d.len(), w.len());
            let sum: usize = d.iter().sum();
            if w.iter().any(|&x| x > 0) {
                prop_assert_eq!(sum, total);
            } else {
                prop_assert_eq!(sum, 0);
            }
            // A zero weight gets nothing; a larger weight never less than a smaller.
            for (i, &x) in w.iter().enumerate() {
                if x == 0 {
                    prop_assert_eq!(d[i], 0);
                }
                for (j, &y) in w.iter().enumerate() {
                    if x > y {
                        prop_assert!(d[i] >= d[j], "{:?} -> {:?}", w, d);
                    }
                }
            }
        }

        #[test]
        fn any_weight_file_is_read_or_refused_without_a_panic(text in "[0-9 .,#\\n\\-eExa]{0,200}") {
            if let Ok(split) = Split::from_text("f", &text) {
                for n in 1..6 {
                    for kind in [VKind::AllGather, VKind::AllToAll] {
                        if split.check(kind, n).is_ok() {
                            let v = VShape { kind, split, total: 1000, nranks: n };
                            for row in v.matrix() {
                                prop_assert_eq!(row.iter().sum::<usize>(), 1000);
                            }
                        }
                    }
                }
            }
        }
    }

    fn shape(kind: VKind, split: Split, total: usize, nranks: usize) -> VShape {
        VShape {
            kind,
            split,
            total,
            nranks,
        }
    }

    #[test]
    fn counts_add_up_to_the_total_and_follow_the_weights() {
        assert_eq!(distribute(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(distribute(10, &[1, 3, 1]), vec![2, 6, 2]);
        assert_eq!(distribute(10, &[1, 1, 2, 2]), vec![1, 1, 5, 3]);
        assert_eq!(distribute(7, &[0, 0]), vec![0, 0]);
        assert_eq!(distribute(7, &[0, 5]), vec![0, 7]);
        for n in 1..=9 {
            for split in [Split::Uniform, Split::Skew(3), Split::Hot(n - 1)] {
                for kind in [VKind::AllGather, VKind::AllToAll] {
                    let s = shape(kind, split, 1000 + n, n);
                    for row in s.matrix() {
                        assert_eq!(row.len(), n);
                        assert_eq!(row.iter().sum::<usize>(), 1000 + n, "{split} {kind:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn hot_gives_one_rank_three_quarters() {
        let s = shape(VKind::AllGather, Split::Hot(2), 4000, 5);
        assert_eq!(s.row(0), vec![250, 250, 3000, 250, 250]);
        let a = shape(VKind::AllToAll, Split::Hot(1), 400, 3);
        for row in a.matrix() {
            assert_eq!(row, vec![50, 300, 50]);
        }
    }

    #[test]
    fn skew_is_seeded_and_uneven() {
        let a = shape(VKind::AllToAll, Split::Skew(7), 1 << 20, 8).matrix();
        let b = shape(VKind::AllToAll, Split::Skew(7), 1 << 20, 8).matrix();
        let c = shape(VKind::AllToAll, Split::Skew(8), 1 << 20, 8).matrix();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let flat: Vec<usize> = a.iter().flatten().copied().collect();
        let (lo, hi) = (flat.iter().min().unwrap(), flat.iter().max().unwrap());
        assert!(hi > &(2 * lo), "skew should be uneven: {lo}..{hi}");
        // Rows differ: each source has its own weights.
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn names_parse_and_print() {
        assert_eq!(Split::parse_named("uniform"), Ok(Some(Split::Uniform)));
        assert_eq!(Split::parse_named("skew"), Ok(Some(Split::Skew(1))));
        assert_eq!(Split::parse_named("Skew:42"), Ok(Some(Split::Skew(42))));
        assert_eq!(Split::parse_named("hot:3"), Ok(Some(Split::Hot(3))));
        assert_eq!(Split::parse_named("weights.txt"), Ok(None));
        assert!(Split::parse_named("hot:x")
            .unwrap_err()
            .contains("whole number"));
        assert!(Split::parse_named("uniform:2").is_err());
        assert_eq!(Split::Skew(42).to_string(), "skew:42");
        assert_eq!(Split::Hot(3).to_string(), "hot:3");
    }

    #[test]
    fn weight_files_are_vectors_or_square_matrices() {
        let v = Split::from_text("w.txt", "# per rank\n1, 2 0.5\n").unwrap();
        assert!(v.check(VKind::AllGather, 3).is_ok());
        assert!(v
            .check(VKind::AllGather, 4)
            .unwrap_err()
            .contains("3 weights per row for 4 ranks"));
        let s = shape(VKind::AllGather, v, 700, 3);
        assert_eq!(s.row(0), vec![200, 400, 100]);
        // One weight a line is the same vector.
        let c = Split::from_text("c.txt", "1\n2 # rank 1\n\n0.5\n").unwrap();
        assert_eq!(
            shape(VKind::AllGather, c, 700, 3).row(0),
            vec![200, 400, 100]
        );
        let m = Split::from_text("m.txt", "1 0\n0 1\n").unwrap();
        assert!(m.check(VKind::AllToAll, 2).is_ok());
        assert!(m
            .check(VKind::ReduceScatter, 2)
            .unwrap_err()
            .contains("matrix"));
        assert_eq!(
            shape(VKind::AllToAll, m, 10, 2).matrix(),
            vec![vec![10, 0], vec![0, 10]]
        );
        assert!(Split::from_text("e", "# nothing\n")
            .unwrap_err()
            .contains("no weights"));
        assert!(Split::from_text("e", "1 2\n3\n")
            .unwrap_err()
            .contains("row 2 has 1"));
        let e = Split::from_text("e", "1 2\n3 4\n5 6\n").unwrap_err();
        assert!(
            e.contains("3 rows of 2 weights: a matrix is square") && !e.contains("(2 rows)"),
            "{e}"
        );
        assert!(Split::from_text("e", "1 -2\n")
            .unwrap_err()
            .contains("at least 0"));
        assert!(Split::from_text("e", "1 x\n")
            .unwrap_err()
            .contains("not a number"));
        // A missing weight between commas is said, not skipped.
        for bad in ["1,,2\n", ",1,2\n", "1, ,2\n", "1,2,,\n"] {
            let e = Split::from_text("e", bad).unwrap_err();
            assert!(e.contains("e:1: an empty weight"), "{bad:?}: {e}");
        }
        let trailing = Split::from_text("t", "1,2,3,\n").unwrap();
        assert_eq!(trailing, Split::from_text("t", "1 2 3\n").unwrap());
        let z = Split::from_text("z", "0 0\n").unwrap();
        assert!(z.check(VKind::AllGather, 2).unwrap_err().contains("zero"));
        // Below a millionth is zero, and said why.
        let tiny = Split::from_text("t", "0.0000001 0\n").unwrap();
        assert!(tiny
            .check(VKind::AllGather, 2)
            .unwrap_err()
            .ends_with("every weight is zero (weights are kept to 6 decimals)"));
        let zr = Split::from_text("z", "0 0\n1 1\n").unwrap();
        assert!(zr
            .check(VKind::AllToAll, 2)
            .unwrap_err()
            .contains("row 1 is all zero"));
        assert!(Split::Hot(4)
            .check(VKind::AllToAll, 4)
            .unwrap_err()
            .contains("outside"));
    }
}
