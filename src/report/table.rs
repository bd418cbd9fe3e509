//! The terminal table: nccl-tests' columns plus the algorithm, one line per
//! case with out-of-place and in-place side by side, printed as cases finish.

use super::text::{
    avg_busbw, fmt_time, placement_title, run_verdict, slowest, Layout, Line, TimeDigits,
};
use super::{Meta, Results, Row};

/// Widths of the case's columns: size, count, type, redop, root, algo.
const CASE: [usize; 6] = [12, 12, 9, 6, 5, 6];
/// Widths of one placement's columns: time, algbw, busbw, #wrong.
const PLACEMENT: [usize; 4] = [9, 7, 7, 7];
const SEP: &str = " ";

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

/// Times as the table prints them: two decimals, fewer when large.
fn time(us: f64) -> String {
    fmt_time(us, TimeDigits::TABLE)
}

impl Layout for Table {
    fn placements(&self) -> &[String] {
        &self.placements
    }

    fn open(&self, row: &Row, _meta: Option<&Meta>) -> Vec<String> {
        let mut top = Line::new("#", "").right(50, "");
        let mut cols =
            Line::new("#", SEP).rights(&CASE, ["size", "count", "type", "redop", "root", "algo"]);
        let mut units = Line::new("#", SEP).rights(&CASE, ["(B)", "(elements)", "", "", "", ""]);
        for p in &self.placements {
            top = top.right(34, placement_title(p));
            cols = cols.rights(&PLACEMENT, ["time", "algbw", "busbw", "#wrong"]);
            units = units.rights(&PLACEMENT, ["(us)", "(GB/s)", "(GB/s)", ""]);
        }
        vec![
            "#".to_string(),
            format!("# {} ({} engine)", row.collective, row.engine),
            top.into(),
            cols.into(),
            units.into(),
        ]
    }

    fn line(&self, cells: &[Option<&Row>]) -> String {
        let Some(first) = cells.iter().flatten().next() else {
            return String::new();
        };
        let mut line = Line::new("", SEP).rights(
            &CASE,
            [
                first.bytes.to_string(),
                first.count.to_string(),
                first.dtype.clone(),
                first.op.clone(),
                first.root.to_string(),
                first.algo.clone(),
            ],
        );
        for cell in cells {
            line = line.placement(&PLACEMENT, *cell, TimeDigits::TABLE);
        }
        let slowest = slowest(cells)
            .filter(|_| self.verbose)
            .map(|s| format!("  slowest: {}", s.describe(time)));
        line.end(slowest.as_deref().unwrap_or(""))
    }

    fn footer(&self, results: &Results) -> Vec<String> {
        let mut out = vec![
            format!("# Wrong or NaN/Inf values : {}", run_verdict(results)),
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

#[cfg(test)]
mod tests {
    use super::Table;
    use crate::report::fixtures::{results, row};
    use crate::report::text::{placements_of, render_with};
    use crate::report::{Partial, StopReason};

    #[test]
    fn table_has_header_rows_footer_and_slowest_rank() {
        let r = results(vec![row(1024, "out"), row(1024, "in")]);
        let text = render_with(Box::new(Table::new(placements_of(&r.rows), true)), &r);
        assert!(text.contains("# all-reduce (builtin engine)"), "{text}");
        assert!(text.contains("out-of-place") && text.contains("in-place"));
        assert!(text.contains("slowest: rank 1 (10.00 us)"), "{text}");
        assert!(text.contains("# Wrong or NaN/Inf values : OK"), "{text}");
        let data = text.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(data.split_whitespace().count(), 6 + 2 * 4 + 5, "{data}");
    }

    #[test]
    fn an_unfinished_run_never_reads_as_a_pass() {
        let mut r = results(vec![row(1024, "out")]);
        r.meta.partial = Some(Partial {
            reason: StopReason::Hang,
            missing_rows: 3,
        });
        let text = render_with(Box::new(Table::new(placements_of(&r.rows), false)), &r);
        assert!(
            text.contains(
                "# Wrong or NaN/Inf values : 0 FAILED (run interrupted: hang, 3 row(s) missing)"
            ),
            "{text}"
        );
        assert!(!text.contains(": OK"), "{text}");
    }
}
