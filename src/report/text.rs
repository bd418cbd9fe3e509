//! What every text writer (the terminal table, nccl-tests' text, Markdown)
//! shares, and nothing that knows them: the [`Layout`] a writer implements,
//! [`Lines`], which groups rows into lines and sections once for all of
//! them, the one [`Line`] builder every line is made with, the one time
//! formatter ([`fmt_time`]), and the cells the writers print alike. The
//! writers import this module; the `--format` dispatch (`report::layout`)
//! imports the writers.

use super::{Meta, Partial, Results, Row};
use std::fmt::Display;

/// What each piece of a text report looks like. Every hook returns whole
/// lines; those with nothing to say return none.
pub trait Layout {
    /// Lines before the first row (where and how the sweep ran).
    fn preamble(&self, _meta: &Meta) -> Vec<String> {
        Vec::new()
    }
    /// Rows with different keys go in different sections.
    fn section_key(&self, row: &Row) -> String {
        section_of(row)
    }
    /// Lines that open a section; `first` is its first row.
    fn open(&self, first: &Row, meta: Option<&Meta>) -> Vec<String>;
    /// One case: `cells[i]` is the row of the i-th placement, if it ran.
    fn line(&self, cells: &[Option<&Row>]) -> String;
    /// Lines that close a section, given its rows and the run's meta;
    /// `stopped`: the run stopped in this section (its last), and why.
    fn close(
        &self,
        _rows: &[Row],
        _meta: Option<&Meta>,
        _stopped: Option<&Partial>,
    ) -> Vec<String> {
        Vec::new()
    }
    /// Lines after everything (`results.meta.partial` says whether the
    /// run finished); `opened`: a section was opened (its header is out),
    /// even if the run stopped before its first row.
    fn footer(&self, _results: &Results, _opened: bool) -> Vec<String> {
        Vec::new()
    }
    /// The placement names each line holds, in column order.
    fn placements(&self) -> &[String];
}

/// The placements that occur in `rows`, out-of-place first.
pub fn placements_of(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = ["out", "in"]
        .into_iter()
        .filter(|p| rows.iter().any(|r| r.placement == *p))
        .map(String::from)
        .collect();
    for r in rows {
        if !out.contains(&r.placement) {
            out.push(r.placement.clone());
        }
    }
    out
}

/// Whether some case of `rows` ran with several algorithms (`--algo all`
/// or a list), rather than one algorithm per size (`--algo auto`).
pub fn several_algos_per_case(rows: &[Row]) -> bool {
    let mut seen = std::collections::HashMap::new();
    rows.iter().any(|r| {
        let key = (
            &r.collective,
            &r.engine,
            &r.dtype,
            &r.op,
            r.root,
            r.bytes,
            &r.placement,
        );
        seen.insert(key, &r.algo).is_some_and(|a| *a != r.algo)
    })
}

/// The sizes of `rows`, smallest first, each once.
pub fn sizes_of(rows: &[Row]) -> Vec<u64> {
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Two rows belong on one line when only their placement differs.
fn same_case(a: &Row, b: &Row) -> bool {
    (
        &a.collective,
        &a.engine,
        &a.algo,
        &a.dtype,
        &a.op,
        a.root,
        a.bytes,
    ) == (
        &b.collective,
        &b.engine,
        &b.algo,
        &b.dtype,
        &b.op,
        b.root,
        b.bytes,
    )
}

/// Groups rows into lines and sections for a [`Layout`]; every method
/// returns the lines it completed.
pub struct Lines<L: Layout + ?Sized> {
    layout: Box<L>,
    meta: Option<Meta>,
    pending: Vec<Row>,
    section: Option<String>,
    section_rows: Vec<Row>,
    /// A section was ever opened.
    opened: bool,
}

impl<L: Layout + ?Sized> Lines<L> {
    pub fn new(layout: Box<L>) -> Lines<L> {
        Lines {
            layout,
            meta: None,
            pending: Vec::new(),
            section: None,
            section_rows: Vec::new(),
            opened: false,
        }
    }

    pub fn start(&mut self, meta: &Meta) -> Vec<String> {
        self.meta = Some(meta.clone());
        self.layout.preamble(meta)
    }

    fn flush_line(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let cells: Vec<Option<&Row>> = self
            .layout
            .placements()
            .iter()
            .map(|p| self.pending.iter().find(|r| &r.placement == p))
            .collect();
        let line = self.layout.line(&cells);
        self.pending.clear();
        Some(line)
    }

    fn close_section(&mut self, stopped: Option<&Partial>) -> Vec<String> {
        let mut out: Vec<String> = self.flush_line().into_iter().collect();
        if self.section.take().is_some() {
            out.extend(
                self.layout
                    .close(&self.section_rows, self.meta.as_ref(), stopped),
            );
        }
        self.section_rows.clear();
        out
    }

    /// A case is about to be measured (`proto`: its row, unmeasured): its
    /// section opens now if it is a new one, so its header is out before
    /// the run could stop in it.
    pub fn case(&mut self, proto: &Row) -> Vec<String> {
        let mut out = Vec::new();
        if proto.group_member.is_some() {
            return out;
        }
        let key = self.layout.section_key(proto);
        if self.section.as_ref() != Some(&key) {
            out.extend(self.close_section(None));
            out.extend(self.layout.open(proto, self.meta.as_ref()));
            self.section = Some(key);
            self.opened = true;
        }
        out
    }

    pub fn row(&mut self, row: &Row) -> Vec<String> {
        let mut out = Vec::new();
        // A group's operations are in the results; the text shows the group.
        if row.group_member.is_some() {
            return out;
        }
        let key = self.layout.section_key(row);
        if self.section.as_ref() != Some(&key) {
            out.extend(self.close_section(None));
            out.extend(self.layout.open(row, self.meta.as_ref()));
            self.section = Some(key);
            self.opened = true;
        }
        if self.pending.first().is_some_and(|p| !same_case(p, row)) {
            out.extend(self.flush_line());
        }
        self.pending.push(row.clone());
        self.section_rows.push(row.clone());
        if self.pending.len() >= self.layout.placements().len() {
            out.extend(self.flush_line());
        }
        out
    }

    /// The last lines: the last section's close and the footer, which say
    /// so when the run did not finish (`results.meta.partial`).
    pub fn finish(&mut self, results: &Results) -> Vec<String> {
        let mut out = self.close_section(results.meta.partial.as_ref());
        out.extend(self.layout.footer(results, self.opened));
        out
    }

    /// The last lines of a run that failed: the line in progress, and no
    /// verdict (values that were never all made are not "OK").
    pub fn abandon(&mut self) -> Vec<String> {
        self.section = None;
        self.section_rows.clear();
        self.flush_line().into_iter().collect()
    }
}

/// Saved results through `layout`, one string with a newline after every line.
/// What sets a row's section apart: its collective and engine, and a
/// group's operations or a v-collective's split (`all --group 2` makes a
/// group of each collective: one section each, not one of all).
pub fn section_of(row: &Row) -> String {
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}",
        row.collective,
        row.engine,
        row.members.join(","),
        row.split.as_deref().unwrap_or("")
    )
}

pub fn render_with<L: Layout + ?Sized>(layout: Box<L>, results: &Results) -> String {
    let mut lines = Lines::new(layout);
    let mut out = lines.start(&results.meta);
    for r in &results.rows {
        out.extend(lines.row(r));
    }
    // The case a stopped sweep was in: its section, as the sweep printed it.
    if let Some(proto) = results
        .meta
        .partial
        .as_ref()
        .and_then(|p| p.in_case.as_deref())
    {
        out.extend(lines.case(proto));
    }
    out.extend(lines.finish(results));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// One line of a text report, built cell by cell: the line starts with a
/// lead (`#` for a comment line, `| ` for a Markdown row), every cell but the
/// first comes after the separator, and each is padded to its width (0: as
/// wide as its text). The lead takes its room from the first cell, so a
/// comment line keeps its columns where the data lines have them.
#[derive(Clone, Debug)]
#[must_use]
pub struct Line {
    text: String,
    sep: &'static str,
    /// Room the lead took, still to be taken from the first cell.
    lead: usize,
    empty: bool,
}

impl Line {
    /// A line starting with `lead`, its cells `sep` apart.
    pub fn new(lead: &str, sep: &'static str) -> Line {
        Line {
            text: lead.to_string(),
            sep,
            lead: lead.chars().count(),
            empty: true,
        }
    }

    /// The separator written before the cells that follow.
    pub fn sep(mut self, sep: &'static str) -> Line {
        self.sep = sep;
        self
    }

    fn width(&mut self, width: usize) -> usize {
        if self.empty {
            self.empty = false;
            width.saturating_sub(self.lead)
        } else {
            self.text.push_str(self.sep);
            width
        }
    }

    /// A cell right-aligned in `width` (numbers, and most of everything).
    pub fn right(mut self, width: usize, cell: impl Display) -> Line {
        let w = self.width(width);
        self.text.push_str(&format!("{cell:>w$}"));
        self
    }

    /// A cell left-aligned in `width`.
    pub fn left(mut self, width: usize, cell: impl Display) -> Line {
        let w = self.width(width);
        self.text.push_str(&format!("{cell:<w$}"));
        self
    }

    /// Cells right-aligned in `widths`, one for each.
    pub fn rights<T: Display>(self, widths: &[usize], cells: impl IntoIterator<Item = T>) -> Line {
        widths
            .iter()
            .zip(cells)
            .fold(self, |line, (w, c)| line.right(*w, c))
    }

    /// One placement's cells of `r` (time, algbw, busbw, #wrong) in
    /// `widths`, or dashes when the line has no row for it.
    pub fn placement(self, widths: &[usize; 4], r: Option<&Row>, digits: TimeDigits) -> Line {
        match r {
            Some(r) => self.rights(
                widths,
                [
                    fmt_time(r.time_us, digits),
                    fmt_gbps(r.algbw_gbps),
                    fmt_gbps(r.busbw_gbps),
                    wrong_cell(r),
                ],
            ),
            None => self.rights(widths, ["-"; 4]),
        }
    }

    /// The line, ending with `tail`.
    pub fn end(mut self, tail: &str) -> String {
        self.text.push_str(tail);
        self.text
    }
}

impl From<Line> for String {
    fn from(line: Line) -> String {
        line.text
    }
}

/// How many decimals a time gets as it grows: two below `tenths_from`
/// microseconds, one below `whole_from`, none from there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeDigits {
    pub tenths_from: f64,
    pub whole_from: f64,
}

impl TimeDigits {
    /// collbench's table and Markdown.
    pub const TABLE: TimeDigits = TimeDigits {
        tenths_from: 1e4,
        whole_from: 1e6,
    };
    /// nccl-tests' text.
    pub const NCCL_TESTS: TimeDigits = TimeDigits {
        tenths_from: 100.0,
        whole_from: 10_000.0,
    };
}

/// A time in microseconds, with fewer decimals as it grows (`digits`).
pub fn fmt_time(us: f64, digits: TimeDigits) -> String {
    if us >= digits.whole_from {
        format!("{us:.0}")
    } else if us >= digits.tenths_from {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// A bandwidth cell: two decimals.
pub fn fmt_gbps(gbps: f64) -> String {
    format!("{gbps:.2}")
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
pub fn slowest(cells: &[Option<&Row>]) -> Option<super::Slowest> {
    cells
        .iter()
        .flatten()
        .filter_map(|r| r.slowest_rank())
        .max_by(|a, b| a.us.total_cmp(&b.us))
}

/// One line saying where and how a sweep ran (Markdown's preamble, the
/// plots' subtitle).
pub fn machine_line(meta: &Meta) -> String {
    let parts = [
        meta.host.clone(),
        meta.devices.join(", "),
        format!("{} ranks", meta.world_size),
        format!("{} engine", meta.device),
        meta.started_at.clone(),
        made_by(meta),
    ];
    // A log's run has no start time (nor, hand-written, a host): no empty part.
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.trim().is_empty()).collect();
    parts.join(" · ")
}

/// What made the results: `collbench 0.1.0`, or as a log's run says
/// (`nccl-tests 2.17.8`, not `collbench nccl-tests 2.17.8`).
pub fn made_by(meta: &Meta) -> String {
    match meta.version.chars().next() {
        Some(c) if c.is_ascii_digit() => format!("collbench {}", meta.version),
        Some(_) => meta.version.clone(),
        None => "collbench".into(),
    }
}

/// The mean busbw of `rows` (0 when there are none), as nccl-tests' footer.
/// A group's operations count through their group's row.
pub fn avg_busbw(rows: &[Row]) -> f64 {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.group_member.is_none()).collect();
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / rows.len() as f64
}

/// [`avg_busbw`] with its unit, for the table and Markdown footers; a run
/// without rows has no average (`0.000 GB/s` read as a measurement).
pub fn avg_busbw_shown(rows: &[Row]) -> String {
    if rows.iter().all(|r| r.group_member.is_some()) {
        return "- (no rows)".into();
    }
    format!("{:.3} GB/s", avg_busbw(rows))
}

/// Wrong elements over `rows` (NaN/Inf ones among them: `nan` is the part
/// of `wrong` that is not finite), and whether any row went unchecked.
pub fn bad_values(rows: &[Row]) -> (i64, bool) {
    // A group's row holds its operations' wrong values.
    let rows = || rows.iter().filter(|r| r.group_member.is_none());
    let bad = rows().map(|r| r.wrong.max(0)).sum();
    (bad, rows().any(|r| r.wrong < 0))
}

/// The verdict on the values of `rows`: `OK`, `N FAILED` or `not checked`.
pub fn values_verdict(rows: &[Row]) -> String {
    match bad_values(rows) {
        (0, true) => "not checked".to_string(),
        (0, false) => "OK".to_string(),
        (n, _) => format!("{n} FAILED"),
    }
}

/// The verdict on a run's values: [`values_verdict`] of its rows when it
/// finished, else `N FAILED (run interrupted: REASON, M row(s) missing)`:
/// an unfinished run never reads as a pass.
pub fn run_verdict(results: &Results) -> String {
    let bad = bad_values(&results.rows).0;
    match (&results.meta.partial, results.meta.log_out_of_bounds) {
        (Some(p), _) => format!("{bad} FAILED ({p})"),
        // A log whose footer failed it: its count where its rows say less.
        (None, Some(n)) => format!("{} FAILED (as the log's footer says)", bad.max(n as i64)),
        (None, None) => values_verdict(&results.rows),
    }
}

/// `#wrong` of one row (NaN/Inf elements included, each once), or `N/A`
/// when unchecked.
pub fn wrong_cell(r: &Row) -> String {
    if r.wrong < 0 {
        "N/A".to_string()
    } else {
        r.wrong.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::row;

    #[test]
    fn placements_put_out_of_place_first() {
        let rows = vec![row(8, "in"), row(8, "out")];
        assert_eq!(placements_of(&rows), vec!["out", "in"]);
        assert_eq!(placements_of(&[row(8, "in")]), vec!["in"]);
    }

    #[test]
    fn a_lead_takes_its_room_from_the_first_cell() {
        let data = Line::new("", " ").rights(&[4, 3], ["a", "b"]).end("");
        let head = Line::new("#", " ").rights(&[4, 3], ["x", "y"]).end("");
        assert_eq!((data.as_str(), head.as_str()), ("   a   b", "#  x   y"));
        let md = Line::new("| ", " | ").right(0, "a").right(0, 1).end(" |");
        assert_eq!(md, "| a | 1 |");
        let mixed = Line::new("#", "")
            .right(3, "")
            .left(4, "ab")
            .sep("-")
            .right(2, 7);
        assert_eq!(String::from(mixed), "#  ab  - 7");
    }

    #[test]
    fn times_lose_decimals_as_they_grow() {
        let t = TimeDigits::TABLE;
        assert_eq!(fmt_time(48.812, t), "48.81");
        assert_eq!(fmt_time(12345.67, t), "12345.7");
        assert_eq!(fmt_time(1234567.8, t), "1234568");
        let n = TimeDigits::NCCL_TESTS;
        assert_eq!(fmt_time(48.812, n), "48.81");
        assert_eq!(fmt_time(2374.14, n), "2374.1");
        assert_eq!(fmt_time(173736.2, n), "173736");
    }
}
