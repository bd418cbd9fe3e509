//! The terminal table: nccl-tests' columns plus the algorithm, one line per
//! case with out-of-place and in-place side by side, printed as cases finish.

use super::{Results, Row, Sink};
use std::io;

/// Where finished lines go (stdout, or around a progress bar).
pub type LineOut = Box<dyn FnMut(&str) + Send>;

/// Streams the table.
pub struct TableSink {
    out: LineOut,
    placements: Vec<String>,
    verbose: bool,
    pending: Vec<Row>,
    section: Option<(String, String)>,
}

fn key(r: &Row) -> (&str, &str, &str, &str, &str, i64, u64) {
    (
        &r.collective,
        &r.engine,
        &r.algo,
        &r.dtype,
        &r.op,
        r.root,
        r.bytes,
    )
}

impl TableSink {
    /// `placements`: the placement names each line holds, in column order.
    pub fn new(out: LineOut, placements: Vec<String>, verbose: bool) -> TableSink {
        TableSink {
            out,
            placements,
            verbose,
            pending: Vec::new(),
            section: None,
        }
    }

    fn header(&mut self, row: &Row) {
        let title = |p: &str| {
            if p == "in" {
                "in-place"
            } else {
                "out-of-place"
            }
        };
        let mut top = format!("#{:>76}", "");
        let mut cols = format!(
            "#{:>11} {:>12} {:>9} {:>6} {:>5} {:>6}",
            "size", "count", "type", "redop", "root", "algo"
        );
        let mut units = format!(
            "#{:>11} {:>12} {:>9} {:>6} {:>5} {:>6}",
            "(B)", "(elements)", "", "", "", ""
        );
        top.truncate(50);
        for p in &self.placements {
            top.push_str(&format!("{:>34}", title(p)));
            cols.push_str(&format!(
                " {:>9} {:>7} {:>7} {:>7}",
                "time", "algbw", "busbw", "#wrong"
            ));
            units.push_str(&format!(
                " {:>9} {:>7} {:>7} {:>7}",
                "(us)", "(GB/s)", "(GB/s)", ""
            ));
        }
        (self.out)(&format!("#\n# {} ({} engine)", row.collective, row.engine));
        (self.out)(&top);
        (self.out)(&cols);
        (self.out)(&units);
    }

    fn line(&self, rows: &[Row]) -> String {
        let first = &rows[0];
        let mut s = format!(
            "{:>12} {:>12} {:>9} {:>6} {:>5} {:>6}",
            first.bytes, first.count, first.dtype, first.op, first.root, first.algo
        );
        for p in &self.placements {
            match rows.iter().find(|r| &r.placement == p) {
                Some(r) => s.push_str(&format!(
                    " {:>9} {:>7.2} {:>7.2} {:>7}",
                    fmt_time(r.time_us),
                    r.algbw_gbps,
                    r.busbw_gbps,
                    if r.wrong < 0 {
                        "N/A".to_string()
                    } else {
                        (r.wrong + r.nan).to_string()
                    }
                )),
                None => s.push_str(&format!(" {:>9} {:>7} {:>7} {:>7}", "-", "-", "-", "-")),
            }
        }
        if self.verbose {
            if let Some((rank, us)) = rows
                .iter()
                .filter_map(|r| r.slowest_rank())
                .max_by(|a, b| a.1.total_cmp(&b.1))
            {
                s.push_str(&format!("  slowest: rank {rank} ({} us)", fmt_time(us)));
            }
        }
        s
    }
}

/// Times as nccl-tests prints them: two decimals, fewer when large.
pub fn fmt_time(us: f64) -> String {
    if us >= 1e6 {
        format!("{us:.0}")
    } else if us >= 1e4 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

impl Sink for TableSink {
    fn row(&mut self, row: &Row) -> io::Result<()> {
        let section = (row.collective.clone(), row.engine.clone());
        if self.section.as_ref() != Some(&section) {
            self.header(row);
            self.section = Some(section);
        }
        if self.pending.first().is_some_and(|p| key(p) != key(row)) {
            let line = self.line(&self.pending);
            (self.out)(&line);
            self.pending.clear();
        }
        self.pending.push(row.clone());
        if self.pending.len() >= self.placements.len() {
            let line = self.line(&self.pending);
            (self.out)(&line);
            self.pending.clear();
        }
        Ok(())
    }

    fn finish(&mut self, results: &Results) -> io::Result<()> {
        if !self.pending.is_empty() {
            let line = self.line(&self.pending);
            (self.out)(&line);
            self.pending.clear();
        }
        let bad: i64 = results
            .rows
            .iter()
            .map(|r| r.wrong.max(0) + r.nan.max(0))
            .sum();
        let unchecked = results.rows.iter().any(|r| r.wrong < 0);
        let avg = if results.rows.is_empty() {
            0.0
        } else {
            results.rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / results.rows.len() as f64
        };
        let verdict = match (bad, unchecked) {
            (0, true) => "not checked".to_string(),
            (0, false) => "OK".to_string(),
            (n, _) => format!("{n} FAILED"),
        };
        (self.out)(&format!("# Wrong or NaN/Inf values : {verdict}"));
        (self.out)(&format!("# Avg bus bandwidth    : {avg:.3} GB/s"));
        for r in results.rows.iter().filter(|r| r.first_error.is_some()) {
            if let Some(e) = &r.first_error {
                (self.out)(&format!(
                    "# first wrong value in {} {} {} {} {}B ({}): {e}",
                    r.collective, r.algo, r.dtype, r.op, r.bytes, r.placement
                ));
            }
        }
        Ok(())
    }
}
