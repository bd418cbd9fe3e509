//! The terminal table: nccl-tests' columns plus the algorithm, one line per
//! case with out-of-place and in-place side by side, printed as cases finish.

use super::text::{
    avg_busbw_shown, fmt_time, placement_title, run_verdict, slowest, Layout, Line, TimeDigits,
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
            match (&row.split, row.members.as_slice()) {
                (_, []) if row.split.is_none() => {
                    format!("# {} ({} engine)", row.collective, row.engine)
                }
                // A split file's name is one field of the line: a newline
                // in it is escaped, never a line without its `#`.
                (Some(s), []) => format!(
                    "# {} ({} engine, split {})",
                    row.collective,
                    row.engine,
                    crate::units::shown(s, false)
                ),
                (split, m) => format!(
                    "# group of {}: {} ({} engine{}), each line the group's time, sizes summed",
                    m.len(),
                    m.join(", "),
                    row.engine,
                    split
                        .as_ref()
                        .map(|s| format!(", split {}", crate::units::shown(s, false)))
                        .unwrap_or_default()
                ),
            },
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
        let mut tail = slowest(cells)
            .filter(|_| self.verbose)
            .map(|s| format!("  slowest: {}", s.describe(time)))
            .unwrap_or_default();
        if let (true, Some(p)) = (self.verbose, first.predicted_us) {
            tail.push_str(&format!("  model: {} us", time(p)));
        }
        line.end(&tail)
    }

    fn footer(&self, results: &Results, _opened: bool) -> Vec<String> {
        let mut out = vec![
            format!("# Wrong or NaN/Inf values : {}", run_verdict(results)),
            format!(
                "# Avg bus bandwidth    : {}",
                avg_busbw_shown(&results.rows)
            ),
        ];
        if self.verbose {
            out.extend(model_picks(&results.rows));
        }
        for r in results.rows.iter().filter(|r| r.group_member.is_none()) {
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

/// `-v` with a cost model: per size, the model's pick beside every
/// algorithm's measured p50 (out-of-place, or the first placement), and how
/// far the pick is from the fastest.
fn model_picks(rows: &[Row]) -> Vec<String> {
    use std::collections::BTreeMap;
    type Key<'a> = (&'a str, &'a str, &'a str, u64);
    /// The pick, and each algorithm's p50.
    type Measured<'a> = (String, Vec<(&'a str, f64)>);
    let placement = rows
        .iter()
        .find(|r| r.placement == "out")
        .or(rows.first())
        .map(|r| r.placement.clone());
    let mut sizes: BTreeMap<Key, Measured> = BTreeMap::new();
    for r in rows {
        let Some(pick) = &r.auto_pick else { continue };
        if Some(&r.placement) != placement.as_ref() || r.engine != "builtin" {
            continue;
        }
        let key = (
            r.collective.as_str(),
            r.dtype.as_str(),
            r.op.as_str(),
            r.bytes,
        );
        let e = sizes
            .entry(key)
            .or_insert_with(|| (pick.clone(), Vec::new()));
        e.1.push((r.algo.as_str(), r.stats.p50_us));
    }
    if sizes.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "# the cost model's pick beside each algorithm's measured p50 (us), {}-of-place:",
        if placement.as_deref() == Some("in") {
            "in"
        } else {
            "out"
        }
    )];
    for ((coll, dtype, op, bytes), (pick, measured)) in sizes {
        let best = measured.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let mine = measured.iter().find(|m| m.0 == pick);
        let each: Vec<String> = measured
            .iter()
            .map(|(a, t)| format!("{a} {}", time(*t)))
            .collect();
        let verdict = match (mine, best) {
            (Some(m), Some(b)) => format!("pick {pick}: {:.2}x the fastest ({})", m.1 / b.1, b.0),
            _ => format!("pick {pick}: not measured here"),
        };
        out.push(format!(
            "#   {coll} {dtype} {op} {bytes}B: {}; {verdict}",
            each.join(", ")
        ));
    }
    out
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
            in_case: None,
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

    /// A split file's name with a newline stays on its header line.
    #[test]
    fn a_split_files_name_never_breaks_a_header_line() {
        let mut rows = vec![row(1024, "out"), row(1024, "in")];
        for r in &mut rows {
            r.split = Some("w\nx.txt".into());
        }
        let r = results(rows.clone());
        let text = render_with(Box::new(Table::new(placements_of(&r.rows), false)), &r);
        assert!(text.contains("split w\\u000ax.txt)"), "{text}");
        for r in &mut rows {
            r.members = vec!["all-gather-v".into(), "all-reduce".into()];
        }
        let r = results(rows);
        let text = render_with(Box::new(Table::new(placements_of(&r.rows), false)), &r);
        let data = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(data, 1, "{text}");
    }
}
