//! Markdown, for tickets and pull requests: a line saying where the sweep
//! ran, one table per collective and engine (out-of-place and in-place side
//! by side), and the verdict with the average bus bandwidth.

use super::text::{
    avg_busbw_shown, fmt_gbps, fmt_time, machine_line, placement_title, run_verdict, slowest,
    wrong_cell, Layout, Line, TimeDigits,
};
use super::{Meta, Partial, Results, Row};
use crate::units::Bytes;

/// The Markdown layout.
pub struct Markdown {
    placements: Vec<String>,
    verbose: bool,
}

impl Markdown {
    pub fn new(placements: Vec<String>, verbose: bool) -> Markdown {
        Markdown {
            placements,
            verbose,
        }
    }
}

/// A table row: `| a | b |`.
fn row() -> Line {
    Line::new("| ", " | ")
}

/// `s` as literal Markdown text: its punctuation escaped (a `|` would
/// split a table cell, a `<b>` open HTML), a line break a space.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '|' | '*' | '_' | '`' | '[' | ']' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Times as the table prints them: two decimals, fewer when large.
fn time(us: f64) -> String {
    fmt_time(us, TimeDigits::TABLE)
}

impl Layout for Markdown {
    fn placements(&self) -> &[String] {
        &self.placements
    }

    fn preamble(&self, meta: &Meta) -> Vec<String> {
        vec![format!("**{}**", text(&machine_line(meta))), String::new()]
    }

    fn open(&self, row: &Row, _meta: Option<&Meta>) -> Vec<String> {
        let mut head =
            self::row().rights(&[0; 6], ["size", "count", "type", "redop", "root", "algo"]);
        let mut rule =
            Line::new("|", "|").rights(&[0; 6], ["---:", "---:", "---", "---", "---:", "---"]);
        for p in &self.placements {
            let t = placement_title(p);
            head = head.rights(
                &[0; 4],
                [
                    format!("{t} time (us)"),
                    format!("{t} algbw (GB/s)"),
                    format!("{t} busbw (GB/s)"),
                    format!("{t} #wrong"),
                ],
            );
            rule = rule.rights(&[0; 4], ["---:"; 4]);
        }
        if self.verbose {
            head = head.right(0, "slowest rank");
            rule = rule.right(0, "---");
        }
        vec![
            match (row.members.as_slice(), row.split.as_deref()) {
                ([], None) => format!(
                    "### {} ({} engine)",
                    text(&row.collective),
                    text(&row.engine)
                ),
                ([], Some(split)) => format!(
                    "### {} ({} engine, split {})",
                    text(&row.collective),
                    text(&row.engine),
                    text(split)
                ),
                (members, split) => format!(
                    "### group of {}: {} ({} engine{})",
                    members.len(),
                    text(&members.join(", ")),
                    text(&row.engine),
                    split
                        .map(|s| format!(", split {}", text(s)))
                        .unwrap_or_default()
                ),
            },
            String::new(),
            head.end(" |"),
            rule.end("|"),
        ]
    }

    fn line(&self, cells: &[Option<&Row>]) -> String {
        let Some(first) = cells.iter().flatten().next() else {
            return String::new();
        };
        let mut line = row().rights(
            &[0; 6],
            [
                Bytes(first.bytes).to_string(),
                first.count.to_string(),
                text(&first.dtype),
                text(&first.op),
                first.root.to_string(),
                text(&first.algo),
            ],
        );
        for cell in cells {
            line = match cell {
                Some(r) => line.rights(
                    &[0; 4],
                    [
                        time(r.time_us),
                        fmt_gbps(r.algbw_gbps),
                        fmt_gbps(r.busbw_gbps),
                        wrong_cell(r),
                    ],
                ),
                None => line.rights(&[0; 4], ["-"; 4]),
            };
        }
        if self.verbose {
            line = match slowest(cells) {
                Some(s) => line.right(0, text(s.describe(time).trim_start_matches("rank "))),
                None => line.right(0, "-"),
            };
        }
        line.end(" |")
    }

    fn close(
        &self,
        _rows: &[Row],
        _meta: Option<&Meta>,
        _stopped: Option<&Partial>,
    ) -> Vec<String> {
        vec![String::new()]
    }

    fn footer(&self, results: &Results, _opened: bool) -> Vec<String> {
        let mut out = vec![format!(
            "**Wrong or NaN/Inf values:** {} · **Avg bus bandwidth:** {}",
            run_verdict(results),
            avg_busbw_shown(&results.rows)
        )];
        for r in &results.rows {
            if let Some(e) = &r.first_error {
                out.push(format!(
                    "- first wrong value in {} {} {} {} {} ({}): {}",
                    text(&r.collective),
                    text(&r.algo),
                    text(&r.dtype),
                    text(&r.op),
                    Bytes(r.bytes),
                    placement_title(&r.placement),
                    text(e)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Markdown;
    use crate::report::fixtures::{results, row};
    use crate::report::text::{placements_of, render_with};

    #[test]
    fn markdown_table_is_well_formed() {
        let r = results(vec![row(1024, "out"), row(1024, "in"), row(1 << 20, "out")]);
        let text = render_with(Box::new(Markdown::new(placements_of(&r.rows), true)), &r);
        assert!(
            text.starts_with("**node1 · Test CPU (2 cores) · 4 ranks"),
            "{text}"
        );
        assert!(text.contains("### all-reduce (builtin engine)"), "{text}");
        let table: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 4, "{text}");
        let cols = table[0].matches('|').count();
        assert!(
            table.iter().all(|l| l.matches('|').count() == cols),
            "{text}"
        );
        assert!(
            table[2].starts_with("| 1KiB | 256 | float | sum | -1 | ring | 10.00 |"),
            "{text}"
        );
        assert!(table[3].contains(" - | - | - | - |"), "{text}");
        assert!(text.contains("**Wrong or NaN/Inf values:** OK"), "{text}");
    }

    /// Values from a results file are literal text: a `|` does not split
    /// a cell, a `<b>` opens no HTML, a line break does not end the row.
    #[test]
    fn markdown_escapes_what_a_results_file_holds() {
        let mut odd = row(1024, "out");
        odd.algo = "ring|tree".into();
        odd.engine = "<b>x</b>".into();
        odd.dtype = "float\n| 1 |".into();
        let r = results(vec![odd]);
        let text = render_with(Box::new(Markdown::new(placements_of(&r.rows), false)), &r);
        assert!(
            text.contains("### all-reduce (&lt;b&gt;x&lt;/b&gt; engine)"),
            "{text}"
        );
        let table: Vec<&str> = text.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 3, "{text}");
        let cells = |l: &str| l.replace("\\|", "").matches('|').count();
        assert!(table.iter().all(|l| cells(l) == cells(table[0])), "{text}");
        assert!(
            table[2].contains("| float \\| 1 \\| | sum | -1 | ring\\|tree |"),
            "{text}"
        );
    }
}
