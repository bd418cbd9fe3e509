//! The text formats of `--format` and where their lines go: [`Format`]
//! picks a writer (the terminal table, nccl-tests' text, Markdown), each a
//! [`Layout`] of the one template every text report shares (see
//! `report::text`); [`LayoutSink`] streams a sweep's lines as rows finish,
//! [`render`] renders saved results.

use super::markdown::Markdown;
use super::nccl::NcclTests;
use super::table::Table;
use super::text::{placements_of, render_with, several_algos_per_case, sizes_of, Lines};
use super::{Meta, Results, Row, Sink};
use std::io;

pub use super::text::Layout;

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
    /// The layout of this format. `placements`: the placement names each
    /// line holds, in column order; `verbose`: name the slowest rank;
    /// `sizes`: the sizes the sweep asked for, smallest first.
    /// `split_algos`: the sweep ran several algorithms per case, so
    /// nccl-tests' text shows one run per algorithm (else one run per
    /// collective and engine, the algorithm by size on a `#` line).
    pub fn layout(
        self,
        placements: Vec<String>,
        verbose: bool,
        sizes: Vec<u64>,
        split_algos: bool,
    ) -> Box<dyn Layout + Send> {
        match self {
            Format::Table => Box::new(Table::new(placements, verbose)),
            Format::NcclTests => Box::new(NcclTests::new(placements, sizes, split_algos)),
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
    fn case(&mut self, proto: &Row) -> io::Result<()> {
        let lines = self.lines.case(proto);
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
    fn abandon(&mut self, _results: &Results) -> io::Result<()> {
        let lines = self.lines.abandon();
        self.emit(lines);
        Ok(())
    }
}

/// The placements nccl-tests' text of `results` shows: theirs, and both
/// for a run that stopped in its first case before its in-place row (its
/// sweep printed that case with dashes). A finished run, or one of
/// several cases, of one placement has fewer than two: no nccl-tests text.
pub fn nccl_tests_placements(results: &Results) -> Vec<String> {
    let placements = placements_of(&results.rows);
    let same_case = |a: &crate::report::Row, b: &crate::report::Row| {
        (&a.collective, &a.dtype, &a.op, a.root, a.bytes)
            == (&b.collective, &b.dtype, &b.op, b.root, b.bytes)
    };
    let first_case_only = results
        .rows
        .first()
        .is_some_and(|f| results.rows.iter().all(|r| same_case(r, f)));
    if results.meta.partial.is_some() && placements == ["out"] && first_case_only {
        return vec!["out".to_string(), "in".to_string()];
    }
    placements
}

/// Saved results in `format`, one string with a newline after every line.
pub fn render(format: Format, results: &Results, verbose: bool) -> String {
    // The sizes asked for where the results keep them (rows hold each
    // collective's rounded size), else the rows'.
    let sizes = if results.meta.sizes.is_empty() {
        sizes_of(&results.rows)
    } else {
        // Smallest first, once each, whatever a hand-edited file says.
        let mut s = results.meta.sizes.clone();
        s.sort_unstable();
        s.dedup();
        s
    };
    let (placements, split) = (
        placements_of(&results.rows),
        several_algos_per_case(&results.rows),
    );
    let layout: Box<dyn Layout + Send> = match format {
        Format::NcclTests => {
            let shown = nccl_tests_placements(results);
            Box::new(NcclTests::new(shown, sizes, split).wide(results.meta.nccl_tests_wide))
        }
        _ => format.layout(placements, verbose, sizes, split),
    };
    render_with(layout, results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{results, row};

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

    #[test]
    fn a_failed_run_ends_without_a_verdict() {
        use std::sync::{Arc, Mutex};
        let r = results(vec![row(8, "out"), row(8, "in"), row(16, "out")]);
        for format in [Format::Table, Format::NcclTests, Format::Markdown] {
            let seen = Arc::new(Mutex::new(Vec::<String>::new()));
            let s2 = Arc::clone(&seen);
            let layout = format.layout(vec!["out".into(), "in".into()], false, vec![8, 16], false);
            let mut sink = LayoutSink::new(
                layout,
                Box::new(move |l: &str| s2.lock().unwrap().push(l.to_string())),
            );
            sink.start(&r.meta).unwrap();
            for row in &r.rows {
                sink.row(row).unwrap();
            }
            sink.abandon(&r).unwrap();
            let text = seen.lock().unwrap().join("\n");
            assert!(
                !text.contains("OK") && !text.contains("concluded"),
                "{text}"
            );
            assert!(
                text.lines().last().unwrap().contains("16"),
                "the last line is kept: {text}"
            );
        }
    }
}
