//! The terminal table: nccl-tests' columns plus the algorithm, one line per
//! case with out-of-place and in-place side by side, printed as cases finish.

use super::layout::{avg_busbw, bad_values, wrong_cell, Layout};
use super::{Meta, Results, Row};

/// collbench's own table.
pub struct Table {
    placements: Vec<String>,
    verbose: bool,
}

impl Table {
    /// `placements`: the placement names each line holds, in column order;
    /// `verbose`: name the slowest rank of each line.
    pub fn new(placements: Vec<String>, verbose: bool) -> Table {
        Table {
            placements,
            verbose,
        }
    }
}

/// `in` -> `in-place`, anything else -> `out-of-place`.
pub fn placement_title(p: &str) -> &'static str {
    if p == "in" {
        "in-place"
    } else {
        "out-of-place"
    }
}

/// The slowest rank among a line's rows, if per-rank times were kept.
pub fn slowest(cells: &[Option<&Row>]) -> Option<(usize, f64)> {
    cells
        .iter()
        .flatten()
        .filter_map(|r| r.slowest_rank())
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

impl Layout for Table {
    fn placements(&self) -> &[String] {
        &self.placements
    }

    fn open(&self, row: &Row, _meta: Option<&Meta>) -> Vec<String> {
        let mut top = format!("#{:>49}", "");
        let mut cols = format!(
            "#{:>11} {:>12} {:>9} {:>6} {:>5} {:>6}",
            "size", "count", "type", "redop", "root", "algo"
        );
        let mut units = format!(
            "#{:>11} {:>12} {:>9} {:>6} {:>5} {:>6}",
            "(B)", "(elements)", "", "", "", ""
        );
        for p in &self.placements {
            top.push_str(&format!("{:>34}", placement_title(p)));
            cols.push_str(&format!(
                " {:>9} {:>7} {:>7} {:>7}",
                "time", "algbw", "busbw", "#wrong"
            ));
            units.push_str(&format!(
                " {:>9} {:>7} {:>7} {:>7}",
                "(us)", "(GB/s)", "(GB/s)", ""
            ));
        }
        vec![
            "#".to_string(),
            format!("# {} ({} engine)", row.collective, row.engine),
            top,
            cols,
            units,
        ]
    }

    fn line(&self, cells: &[Option<&Row>]) -> String {
        let Some(first) = cells.iter().flatten().next() else {
            return String::new();
        };
        let mut s = format!(
            "{:>12} {:>12} {:>9} {:>6} {:>5} {:>6}",
            first.bytes, first.count, first.dtype, first.op, first.root, first.algo
        );
        for cell in cells {
            match cell {
                Some(r) => s.push_str(&format!(
                    " {:>9} {:>7.2} {:>7.2} {:>7}",
                    fmt_time(r.time_us),
                    r.algbw_gbps,
                    r.busbw_gbps,
                    wrong_cell(r)
                )),
                None => s.push_str(&format!(" {:>9} {:>7} {:>7} {:>7}", "-", "-", "-", "-")),
            }
        }
        if self.verbose {
            if let Some((rank, us)) = slowest(cells) {
                s.push_str(&format!("  slowest: rank {rank} ({} us)", fmt_time(us)));
            }
        }
        s
    }

    fn footer(&self, results: &Results) -> Vec<String> {
        let (bad, unchecked) = bad_values(&results.rows);
        let verdict = match (bad, unchecked) {
            (0, true) => "not checked".to_string(),
            (0, false) => "OK".to_string(),
            (n, _) => format!("{n} FAILED"),
        };
        let mut out = vec![
            format!("# Wrong or NaN/Inf values : {verdict}"),
            format!(
                "# Avg bus bandwidth    : {:.3} GB/s",
                avg_busbw(&results.rows)
            ),
        ];
        for r in &results.rows {
            if let Some(e) = &r.first_error {
                out.push(format!(
                    "# first wrong value in {} {} {} {} {}B ({}): {e}",
                    r.collective, r.algo, r.dtype, r.op, r.bytes, r.placement
                ));
            }
        }
        out
    }
}

/// Times as the table prints them: two decimals, fewer when large.
pub fn fmt_time(us: f64) -> String {
    if us >= 1e6 {
        format!("{us:.0}")
    } else if us >= 1e4 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

#[cfg(test)]
mod tests {
    use crate::report::layout::tests::{results, row};
    use crate::report::layout::{render, Format};

    #[test]
    fn table_has_header_rows_footer_and_slowest_rank() {
        let r = results(vec![row(1024, "out"), row(1024, "in")]);
        let text = render(Format::Table, &r, true);
        assert!(text.contains("# all-reduce (builtin engine)"), "{text}");
        assert!(text.contains("out-of-place") && text.contains("in-place"));
        assert!(text.contains("slowest: rank 1 (10.00 us)"), "{text}");
        assert!(text.contains("# Wrong or NaN/Inf values : OK"), "{text}");
        let data = text.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(data.split_whitespace().count(), 6 + 2 * 4 + 5, "{data}");
    }
}
