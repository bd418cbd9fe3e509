//! The one template every text report shares: rows grouped into lines (one
//! case per line, out-of-place and in-place side by side), lines grouped into
//! sections, with a preamble, section headers and footers, and a footer at
//! the end. A [`Layout`] says what each piece looks like (the terminal table,
//! nccl-tests' text, Markdown); [`Lines`] does the grouping once for all of
//! them, both for rows streaming out of a sweep ([`LayoutSink`]) and for saved
//! results ([`render`]).

use super::{markdown::Markdown, nccl::NcclTests, table::Table, Meta, Results, Row, Sink};
use std::io;

/// Where finished lines go (stdout, or around a progress bar).
pub type LineOut = Box<dyn FnMut(&str) + Send>;

/// The text formats of `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// collbench's terminal table (nccl-tests' columns plus the algorithm).
    Table,
    /// nccl-tests' own layout, for log parsers written for it.
    NcclTests,
    /// A Markdown table, for tickets and pull requests.
    Markdown,
}

impl Format {
    pub const NAMES: &'static str = "table, nccl-tests, markdown";

    /// Parses a `--format` value.
    pub fn parse(s: &str) -> Result<Format, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "table" => Ok(Format::Table),
            "nccl-tests" | "nccl" | "nccl_tests" => Ok(Format::NcclTests),
            "markdown" | "md" => Ok(Format::Markdown),
            other => Err(format!(
                "unknown --format '{other}' (known: {})",
                Format::NAMES
            )),
        }
    }

    /// The layout of this format. `placements`: the placement names each
    /// line holds, in column order; `verbose`: name the slowest rank;
    /// `sizes`: the sizes the sweep asked for, smallest first.
    pub fn layout(
        self,
        placements: Vec<String>,
        verbose: bool,
        sizes: Vec<u64>,
    ) -> Box<dyn Layout + Send> {
        match self {
            Format::Table => Box::new(Table::new(placements, verbose)),
            Format::NcclTests => Box::new(NcclTests::new(placements, sizes)),
            Format::Markdown => Box::new(Markdown::new(placements, verbose)),
        }
    }

    /// A line that titles one results file among several (`collbench report`).
    pub fn heading(self, text: &str) -> String {
        match self {
            Format::Markdown => format!("## {text}\n"),
            Format::Table | Format::NcclTests => format!("# {text}"),
        }
    }
}

/// What each piece of a text report looks like. Every hook returns whole
/// lines; those with nothing to say return none.
pub trait Layout {
    /// Lines before the first row (where and how the sweep ran).
    fn preamble(&self, _meta: &Meta) -> Vec<String> {
        Vec::new()
    }
    /// Rows with different keys go in different sections.
    fn section_key(&self, row: &Row) -> String {
        format!("{}\u{0}{}", row.collective, row.engine)
    }
    /// Lines that open a section; `first` is its first row.
    fn open(&self, first: &Row, meta: Option<&Meta>) -> Vec<String>;
    /// One case: `cells[i]` is the row of the i-th placement, if it ran.
    fn line(&self, cells: &[Option<&Row>]) -> String;
    /// Lines that close a section, given its rows.
    fn close(&self, _rows: &[Row]) -> Vec<String> {
        Vec::new()
    }
    /// Lines after everything.
    fn footer(&self, _results: &Results) -> Vec<String> {
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
}

impl<L: Layout + ?Sized> Lines<L> {
    pub fn new(layout: Box<L>) -> Lines<L> {
        Lines {
            layout,
            meta: None,
            pending: Vec::new(),
            section: None,
            section_rows: Vec::new(),
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

    fn close_section(&mut self) -> Vec<String> {
        let mut out: Vec<String> = self.flush_line().into_iter().collect();
        if self.section.take().is_some() {
            out.extend(self.layout.close(&self.section_rows));
        }
        self.section_rows.clear();
        out
    }

    pub fn row(&mut self, row: &Row) -> Vec<String> {
        let mut out = Vec::new();
        let key = self.layout.section_key(row);
        if self.section.as_ref() != Some(&key) {
            out.extend(self.close_section());
            out.extend(self.layout.open(row, self.meta.as_ref()));
            self.section = Some(key);
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

    pub fn finish(&mut self, results: &Results) -> Vec<String> {
        let mut out = self.close_section();
        out.extend(self.layout.footer(results));
        out
    }
}

/// Streams a layout's lines to `out` as rows finish.
pub struct LayoutSink {
    lines: Lines<dyn Layout + Send>,
    out: LineOut,
}

impl LayoutSink {
    pub fn new(layout: Box<dyn Layout + Send>, out: LineOut) -> LayoutSink {
        LayoutSink {
            lines: Lines::new(layout),
            out,
        }
    }

    fn emit(&mut self, lines: Vec<String>) {
        for l in lines {
            (self.out)(&l);
        }
    }
}

impl Sink for LayoutSink {
    fn start(&mut self, meta: &Meta) -> io::Result<()> {
        let lines = self.lines.start(meta);
        self.emit(lines);
        Ok(())
    }
    fn row(&mut self, row: &Row) -> io::Result<()> {
        let lines = self.lines.row(row);
        self.emit(lines);
        Ok(())
    }
    fn finish(&mut self, results: &Results) -> io::Result<()> {
        let lines = self.lines.finish(results);
        self.emit(lines);
        Ok(())
    }
}

/// Saved results in `format`, one string with a newline after every line.
pub fn render(format: Format, results: &Results, verbose: bool) -> String {
    let mut sizes: Vec<u64> = results.rows.iter().map(|r| r.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let layout = format.layout(placements_of(&results.rows), verbose, sizes);
    let mut lines = Lines::new(layout);
    let mut out = lines.start(&results.meta);
    for r in &results.rows {
        out.extend(lines.row(r));
    }
    out.extend(lines.finish(results));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// Cells laid out in columns two spaces apart, each as wide as its widest
/// cell; `right[i]`: column i is right-aligned (numbers). One line per row.
pub fn align_columns(rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        widths.resize(widths.len().max(r.len()), 0);
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
            if right.get(i).copied().unwrap_or(false) {
                line.push_str(&format!("{c:>w$}  "));
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The mean busbw of `rows` (0 when there are none), as nccl-tests' footer.
pub fn avg_busbw(rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / rows.len() as f64
}

/// Wrong plus NaN/Inf elements over `rows`, and whether any row went unchecked.
pub fn bad_values(rows: &[Row]) -> (i64, bool) {
    let bad = rows.iter().map(|r| r.wrong.max(0) + r.nan.max(0)).sum();
    (bad, rows.iter().any(|r| r.wrong < 0))
}

/// `#wrong` of one row: wrong plus NaN/Inf, or `N/A` when unchecked.
pub fn wrong_cell(r: &Row) -> String {
    if r.wrong < 0 {
        "N/A".to_string()
    } else {
        (r.wrong + r.nan.max(0)).to_string()
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::Stats;

    /// A row for tests: all-reduce ring float sum, checked, 10 us at `bytes`.
    pub fn row(bytes: u64, placement: &str) -> Row {
        Row {
            collective: "all-reduce".into(),
            engine: "builtin".into(),
            algo: "ring".into(),
            dtype: "float".into(),
            op: "sum".into(),
            root: -1,
            bytes,
            count: bytes / 4,
            placement: placement.into(),
            time_us: 10.0,
            algbw_gbps: bytes as f64 / 10e3,
            busbw_gbps: bytes as f64 / 10e3 * 1.5,
            wrong: 0,
            nan: 0,
            stats: Stats {
                p50_us: 10.0,
                p99_us: 11.0,
                min_us: 9.0,
                max_us: 11.0,
                outliers: 0,
            },
            per_rank_us: vec![9.0, 10.0, 9.5, 8.0],
            first_error: None,
        }
    }

    pub fn results(rows: Vec<Row>) -> Results {
        Results::new(
            Meta {
                version: "0.1.0".into(),
                command: "collbench all-reduce".into(),
                host: "node1".into(),
                started_at: "2026-11-21T20:00:00Z".into(),
                world_size: 4,
                device: "host".into(),
                devices: vec!["Test CPU (2 cores)".into()],
                iters: 20,
                warmup: 5,
                seed: 1,
                timing: "wall".into(),
                notes: vec![],
                nccl: None,
            },
            rows,
        )
    }

    #[test]
    fn formats_parse_and_unknown_ones_are_named() {
        assert_eq!(Format::parse("nccl-tests"), Ok(Format::NcclTests));
        assert_eq!(Format::parse(" Markdown "), Ok(Format::Markdown));
        let e = Format::parse("xml").unwrap_err();
        assert!(e.contains("'xml'") && e.contains("nccl-tests"), "{e}");
    }

    #[test]
    fn columns_align() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string(), "x".to_string()],
            vec!["bbb".to_string(), "100".to_string(), String::new()],
        ];
        assert_eq!(
            align_columns(&rows, &[false, true]),
            "a      1  x\nbbb  100\n"
        );
    }

    #[test]
    fn placements_put_out_of_place_first() {
        let rows = vec![row(8, "in"), row(8, "out")];
        assert_eq!(placements_of(&rows), vec!["out", "in"]);
        assert_eq!(placements_of(&[row(8, "in")]), vec!["in"]);
    }

    #[test]
    fn lines_pair_placements_of_one_case() {
        let r = results(vec![
            row(8, "out"),
            row(8, "in"),
            row(16, "out"),
            row(32, "out"),
            row(32, "in"),
        ]);
        let text = render(Format::Table, &r, false);
        let data: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(data.len(), 3, "{text}");
        assert!(
            data[1].trim_end().ends_with('-'),
            "missing in-place: {text}"
        );
    }
}
