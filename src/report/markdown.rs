//! Markdown, for tickets and pull requests: a line saying where the sweep
//! ran, one table per collective and engine (out-of-place and in-place side
//! by side), and the verdict with the average bus bandwidth.

use super::layout::{avg_busbw, bad_values, wrong_cell, Layout};
use super::table::{fmt_time, placement_title, slowest};
use super::{Meta, Results, Row};
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

/// One line saying where and how a sweep ran (also the plots' subtitle).
pub fn machine_line(meta: &Meta) -> String {
    format!(
        "{} · {} · {} ranks · {} engine · {} · collbench {}",
        meta.host,
        meta.devices.join(", "),
        meta.world_size,
        meta.device,
        meta.started_at,
        meta.version
    )
}

impl Layout for Markdown {
    fn placements(&self) -> &[String] {
        &self.placements
    }

    fn preamble(&self, meta: &Meta) -> Vec<String> {
        vec![format!("**{}**", machine_line(meta)), String::new()]
    }

    fn open(&self, row: &Row, _meta: Option<&Meta>) -> Vec<String> {
        let mut head = "| size | count | type | redop | root | algo |".to_string();
        let mut rule = "|---:|---:|---|---|---:|---|".to_string();
        for p in &self.placements {
            let t = placement_title(p);
            head.push_str(&format!(
                " {t} time (us) | {t} algbw (GB/s) | {t} busbw (GB/s) | {t} #wrong |"
            ));
            rule.push_str("---:|---:|---:|---:|");
        }
        if self.verbose {
            head.push_str(" slowest rank |");
            rule.push_str("---|");
        }
        vec![
            format!("### {} ({} engine)", row.collective, row.engine),
            String::new(),
            head,
            rule,
        ]
    }

    fn line(&self, cells: &[Option<&Row>]) -> String {
        let Some(first) = cells.iter().flatten().next() else {
            return String::new();
        };
        let mut s = format!(
            "| {} | {} | {} | {} | {} | {} |",
            Bytes(first.bytes),
            first.count,
            first.dtype,
            first.op,
            first.root,
            first.algo
        );
        for cell in cells {
            match cell {
                Some(r) => s.push_str(&format!(
                    " {} | {:.2} | {:.2} | {} |",
                    fmt_time(r.time_us),
                    r.algbw_gbps,
                    r.busbw_gbps,
                    wrong_cell(r)
                )),
                None => s.push_str(" - | - | - | - |"),
            }
        }
        if self.verbose {
            match slowest(cells) {
                Some((rank, us)) => s.push_str(&format!(" {rank} ({} us) |", fmt_time(us))),
                None => s.push_str(" - |"),
            }
        }
        s
    }

    fn close(&self, _rows: &[Row]) -> Vec<String> {
        vec![String::new()]
    }

    fn footer(&self, results: &Results) -> Vec<String> {
        let (bad, unchecked) = bad_values(&results.rows);
        let verdict = match (bad, unchecked) {
            (0, true) => "not checked".to_string(),
            (0, false) => "OK".to_string(),
            (n, _) => format!("{n} FAILED"),
        };
        let mut out = vec![format!(
            "**Wrong or NaN/Inf values:** {verdict} · **Avg bus bandwidth:** {:.3} GB/s",
            avg_busbw(&results.rows)
        )];
        for r in &results.rows {
            if let Some(e) = &r.first_error {
                out.push(format!(
                    "- first wrong value in {} {} {} {} {} ({}): {e}",
                    r.collective,
                    r.algo,
                    r.dtype,
                    r.op,
                    Bytes(r.bytes),
                    placement_title(&r.placement)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::report::layout::tests::{results, row};
    use crate::report::layout::{render, Format};

    #[test]
    fn markdown_table_is_well_formed() {
        let r = results(vec![row(1024, "out"), row(1024, "in"), row(1 << 20, "out")]);
        let text = render(Format::Markdown, &r, true);
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
}
