//! The diagnosis for people: a verdict line, the findings (root cause first),
//! a per-rank table of where each rank got to, what each blocked channel
//! waits on (collbench dumps), and the files that could not be used.

use std::fmt::Write;

use comfy_table::{presets, CellAlignment, Table};

use super::diagnosis::{Diagnosis, Verdict};
use super::group::ranks_text;
use super::model::state_name;

/// Renders the diagnosis as plain text, ending with a newline. Dumps of
/// several runs: a line naming each run and its verdict, then each run's
/// diagnosis.
pub fn render_text(d: &Diagnosis) -> String {
    let mut out = String::new();
    if d.runs.is_empty() {
        verdict(&mut out, d);
        notes(&mut out, &d.notes);
        findings(&mut out, d);
        table(&mut out, d);
        waits(&mut out, d);
    } else {
        runs(&mut out, d);
    }
    files(&mut out, "unreadable files (left out)", &d.unreadable);
    files(
        &mut out,
        "ignored files (same rank read from another file)",
        &d.ignored,
    );
    // Names in a dump reach the terminal: an escape sequence in one must
    // not drive it (the fields were escaped as they were read; this is
    // the last guard).
    crate::units::shown(&out, true).into_owned()
}

/// Several runs: the overview, then each run as one run's diagnosis would be.
fn runs(out: &mut String, d: &Diagnosis) {
    let problems = d
        .runs
        .iter()
        .filter(|r| r.verdict == Verdict::Problem)
        .count();
    let overall = if problems == 0 { "HEALTHY" } else { "PROBLEM" };
    let _ = writeln!(
        out,
        "{overall}: these dumps mix {} runs, each diagnosed on its own; {problems} with a problem",
        d.runs.len()
    );
    for r in &d.runs {
        let word = match r.verdict {
            Verdict::Healthy => "healthy".to_owned(),
            Verdict::Problem => match r.findings.first() {
                Some(f) => format!("PROBLEM: {}{}", f.kind.name(), place_of(f)),
                None => "PROBLEM".to_owned(),
            },
        };
        let _ = writeln!(out, "  {}: {word}", r.label);
    }
    for r in &d.runs {
        let one = Diagnosis {
            verdict: r.verdict,
            ranks_found: r.ranks_found.clone(),
            ranks_missing: r.ranks_missing.clone(),
            culprits: r.culprits.clone(),
            findings: r.findings.clone(),
            world_size: r.world_size,
            per_rank: d
                .per_rank
                .iter()
                .filter(|p| p.run.as_deref() == Some(r.label.as_str()))
                .cloned()
                .collect(),
            unreadable: Vec::new(),
            ignored: Vec::new(),
            notes: r.notes.clone(),
            runs: Vec::new(),
            ..d.clone()
        };
        let _ = writeln!(out, "\n== {} ==", r.label);
        verdict(out, &one);
        notes(out, &one.notes);
        findings(out, &one);
        table(out, &one);
        waits(out, &one);
    }
}

fn notes(out: &mut String, notes: &[String]) {
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
}

fn place_of(f: &super::diagnosis::Finding) -> String {
    place(f.pg.as_deref(), f.pg_desc.as_deref(), f.seq)
}

fn verdict(out: &mut String, d: &Diagnosis) {
    let world = match d.world_size {
        Some(n) => format!(" of a world of {n}"),
        None => String::new(),
    };
    match (d.verdict, d.findings.first()) {
        (Verdict::Problem, Some(f)) => {
            let place = place_of(f);
            let culprits = if d.culprits.is_empty() {
                "no culprit identified".to_owned()
            } else {
                format!("culprit: {}", ranks_text(&d.culprits))
            };
            let _ = writeln!(out, "PROBLEM: {}{place}; {culprits}", f.kind.name());
        }
        _ => {
            let _ = writeln!(out, "HEALTHY: nothing pending or inconsistent");
        }
    }
    let missing = if d.ranks_missing.is_empty() {
        String::new()
    } else {
        format!("; no dump of {}", ranks_text(&d.ranks_missing))
    };
    let _ = writeln!(
        out,
        "dumps of {} ranks{world}{missing}",
        d.ranks_found.len()
    );
}

/// ` in group 2 (sub_b) at seq 5`.
fn place(pg: Option<&str>, desc: Option<&str>, seq: Option<u64>) -> String {
    let named;
    let pg = match (pg, desc) {
        (Some(pg), Some(desc)) => {
            named = format!("{pg} ({desc})");
            Some(named.as_str())
        }
        (pg, _) => pg,
    };
    match (pg, seq) {
        (Some(pg), Some(seq)) => format!(" in group {pg} at seq {seq}"),
        (Some(pg), None) => format!(" in group {pg}"),
        (None, Some(seq)) => format!(" at seq {seq}"),
        (None, None) => String::new(),
    }
}

fn findings(out: &mut String, d: &Diagnosis) {
    if d.findings.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nfindings (most likely root cause first):");
    for (i, f) in d.findings.iter().enumerate() {
        let blames = if f.ranks.is_empty() {
            String::new()
        } else {
            format!(": {}", ranks_text(&f.ranks))
        };
        let _ = writeln!(out, "  {}. {}{}{blames}", i + 1, f.kind.name(), place_of(f));
        let _ = writeln!(out, "     {}", f.detail);
    }
}

/// Where each rank got to in each group: a plain comfy-table (no borders,
/// rules or colour), columns two spaces apart, numbers aligned right.
fn table(out: &mut String, d: &Diagnosis) {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING).force_no_tty();
    t.set_header([
        "rank",
        "group",
        "entered",
        "started",
        "completed",
        "state",
        "last op",
    ]);
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    for r in &d.per_rank {
        for g in &r.groups {
            t.add_row([
                r.rank.to_string(),
                g.pg.clone(),
                opt(g.last_entered),
                opt(g.last_started),
                opt(g.last_completed),
                g.state.map_or("-", state_name).to_owned(),
                g.op.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    // Consecutive ranks without a dump share a row: `4-99999`.
    for span in crate::units::rank_spans(&d.ranks_missing) {
        t.add_row([span, "(no dump)".into()]);
    }
    for (i, column) in t.column_iter_mut().enumerate() {
        column.set_padding((0, 2));
        if ![1, 5, 6].contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out);
    for line in t.lines() {
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// Blocked channels shown per rank, and in all; `--json` lists every one.
const WAITS_PER_RANK: usize = 4;
const WAITS_SHOWN: usize = 32;

fn waits(out: &mut String, d: &Diagnosis) {
    let mut lines: Vec<String> = Vec::new();
    let mut hidden = 0usize;
    for r in &d.per_rank {
        for (i, w) in r.waits.iter().enumerate() {
            if i >= WAITS_PER_RANK || lines.len() >= WAITS_SHOWN {
                hidden += 1;
                continue;
            }
            lines.push(format!(
                "  rank {} (group {}, seq {}, {}): channel {} step {} of {} waits to {} {} rank {}",
                r.rank,
                w.pg,
                w.seq,
                w.op,
                w.channel,
                w.step,
                w.steps_total,
                w.what,
                if w.what == "send" { "to" } else { "from" },
                w.peer
            ));
        }
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\nblocked channels:");
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        if hidden > 0 {
            let _ = writeln!(
                out,
                "  ... and {hidden} more (at most {WAITS_PER_RANK} a rank shown; --json lists every one)"
            );
        }
    }
}

fn files(out: &mut String, title: &str, list: &[super::load::Unreadable]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}:");
    for u in list {
        let _ = writeln!(out, "  {}: {}", u.path, u.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::diagnosis::{RankSummary, Waiting, DIAGNOSIS_SCHEMA};
    use crate::analyze::model::Format;

    /// 8 ranks of 16 blocked channels each: 4 a rank are shown, 32 in all,
    /// and the rest counted.
    #[test]
    fn blocked_channels_are_capped_and_counted() {
        let per_rank = (0..8)
            .map(|rank| RankSummary {
                rank,
                run: None,
                path: format!("rank{rank}.json"),
                format: Format::Collbench,
                groups: Vec::new(),
                waits: (0..16)
                    .map(|channel| Waiting {
                        pg: "0".into(),
                        seq: 3,
                        op: "all-reduce".into(),
                        channel,
                        step: 1,
                        steps_total: 7,
                        peer: ((rank + 7) % 8) as i64,
                        what: "recv".into(),
                    })
                    .collect(),
            })
            .collect();
        let d = Diagnosis {
            schema: DIAGNOSIS_SCHEMA.into(),
            verdict: Verdict::Problem,
            run: None,
            ranks_found: (0..8).collect(),
            ranks_missing: Vec::new(),
            culprits: Vec::new(),
            findings: Vec::new(),
            world_size: Some(8),
            per_rank,
            unreadable: Vec::new(),
            ignored: Vec::new(),
            notes: Vec::new(),
            runs: Vec::new(),
        };
        let text = render_text(&d);
        let shown = text.lines().filter(|l| l.contains(" waits to ")).count();
        assert_eq!(shown, 32, "{text}");
        assert!(text.contains("rank 7 (group 0, seq 3, all-reduce): channel 3 "));
        assert!(!text.contains("channel 4 step"), "{text}");
        assert!(text.contains("... and 96 more"), "{text}");
    }
}
