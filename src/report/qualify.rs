//! Qualification verdicts: [`evaluate`] judges a check's measured rows
//! against its thresholds; [`render`] prints the verdicts as a table (and
//! `report::junit` as JUnit XML). Pure: the spec is read by `cli::spec`,
//! and running the sweeps is `run::qualify`'s job.
//!
//! Every measured row (each size and placement) must meet every threshold,
//! and have no wrong values.

use super::grid;
use super::warn::describe;
use super::Row;
use std::fmt::Write as _;

/// What a check must reach.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Check {
    /// The check's name, or one made of what it runs.
    pub title: String,
    /// The collective's canonical name (or `all`).
    pub collective: String,
    pub min_busbw_gbps: Option<f64>,
    pub max_time_us: Option<f64>,
    /// The slowest directed link's GB/s, at least (`--links`).
    pub min_link_gbps: Option<f64>,
    /// The fastest link's GB/s over the slowest's, at most.
    pub max_link_spread: Option<f64>,
}

/// One threshold of a check, against the worst row measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// `busbw`, `time`, `link` or `spread`.
    pub metric: &'static str,
    /// The worst value over the rows (lowest busbw, highest time).
    pub worst: f64,
    pub limit: f64,
    /// The row with the worst value, described.
    pub at: String,
    pub ok: bool,
}

impl Measured {
    /// `busbw 0.12 GB/s >= 1 GB/s` and the like.
    pub fn expected(&self) -> String {
        match self.metric {
            "busbw" | "link" => format!(">= {} GB/s", self.limit),
            "spread" => format!("<= {}x", self.limit),
            _ => format!("<= {} us", self.limit),
        }
    }

    pub fn value(&self) -> String {
        match self.metric {
            "busbw" | "link" => format!("{:.3} GB/s", self.worst),
            "spread" => format!("{:.2}x", self.worst),
            _ => format!("{:.2} us", self.worst),
        }
    }

    /// One line for a failure message.
    pub fn sentence(&self) -> String {
        format!(
            "{} {} (expected {}) at {}",
            self.metric,
            self.value(),
            self.expected(),
            self.at
        )
    }
}

/// How a check went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Passed,
    /// Measured, and short of a threshold (or wrong values): why.
    Failed(String),
    /// Could not be measured: why.
    Error(String),
}

/// A check's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckResult {
    pub title: String,
    pub collective: String,
    pub outcome: Outcome,
    pub measured: Vec<Measured>,
    /// It failed once and was run again.
    pub retried: bool,
    pub seconds: f64,
}

/// Judges `rows` (one run of `check`) against its thresholds.
pub fn evaluate(check: &Check, rows: &[Row]) -> (Outcome, Vec<Measured>) {
    if rows.is_empty() {
        return (Outcome::Failed("no rows were measured".into()), Vec::new());
    }
    let mut measured = Vec::new();
    if let Some(limit) = check.min_busbw_gbps {
        // A bandwidth that is not a number is the worst of all (total_cmp
        // would put a NaN above every number, out of a minimum's way).
        let key = |r: &Row| match r.busbw_gbps {
            b if b.is_nan() => f64::NEG_INFINITY,
            b => b,
        };
        let w = rows.iter().min_by(|a, b| key(a).total_cmp(&key(b)));
        if let Some(w) = w {
            measured.push(Measured {
                metric: "busbw",
                worst: w.busbw_gbps,
                limit,
                at: describe(w),
                ok: w.busbw_gbps >= limit,
            });
        }
    }
    if let Some(limit) = check.max_time_us {
        let key = |r: &Row| match r.time_us {
            t if t.is_nan() => f64::INFINITY,
            t => t,
        };
        let w = rows.iter().max_by(|a, b| key(a).total_cmp(&key(b)));
        if let Some(w) = w {
            measured.push(Measured {
                metric: "time",
                worst: w.time_us,
                limit,
                at: describe(w),
                ok: w.time_us <= limit,
            });
        }
    }
    let mut why: Vec<String> = measured
        .iter()
        .filter(|m| !m.ok)
        .map(Measured::sentence)
        .collect();
    let bad: Vec<&Row> = rows.iter().filter(|r| r.is_bad()).collect();
    if let Some(first) = bad.first() {
        why.push(format!(
            "{} row(s) with wrong or NaN/Inf values, first {}",
            bad.len(),
            describe(first)
        ));
    }
    if why.is_empty() {
        (Outcome::Passed, measured)
    } else {
        (Outcome::Failed(why.join("; ")), measured)
    }
}

/// Judges the links a run measured (`--links`) against the check's link
/// thresholds, adding to `outcome` and `measured` what [`evaluate`] found.
pub fn evaluate_links(
    check: &Check,
    links: Option<&super::links::LinkReport>,
    outcome: Outcome,
    mut measured: Vec<Measured>,
) -> (Outcome, Vec<Measured>) {
    if check.min_link_gbps.is_none() && check.max_link_spread.is_none() {
        return (outcome, measured);
    }
    let pairs: Vec<&super::links::LinkPair> = links
        .map(|l| l.pairs.iter().filter(|p| p.measured()).collect())
        .unwrap_or_default();
    let (Some(slow), Some(fast)) = (
        pairs.iter().min_by(|a, b| a.gbps.total_cmp(&b.gbps)),
        pairs.iter().max_by(|a, b| a.gbps.total_cmp(&b.gbps)),
    ) else {
        // Not a link short of its threshold: nothing to judge, so the
        // check could not be made (exit 2), whatever its rows said.
        let why = "no link was measured (link thresholds need a sweep's --links or results holding `links`)";
        return match outcome {
            Outcome::Failed(w) => (Outcome::Error(format!("{w}; {why}")), measured),
            Outcome::Passed => (Outcome::Error(why.into()), measured),
            e => (e, measured),
        };
    };
    let size = links.map_or(0, |l| l.bytes);
    let at = |p: &super::links::LinkPair| {
        format!(
            "link {} -> {} at {}",
            p.from,
            p.to,
            crate::units::Bytes(size)
        )
    };
    let mut added = Vec::new();
    if let Some(limit) = check.min_link_gbps {
        added.push(Measured {
            metric: "link",
            worst: slow.gbps,
            limit,
            at: at(slow),
            ok: slow.gbps >= limit,
        });
    }
    if let Some(limit) = check.max_link_spread {
        let spread = fast.gbps / slow.gbps;
        added.push(Measured {
            metric: "spread",
            worst: spread,
            limit,
            at: format!("{} against {}", at(fast), at(slow)),
            ok: spread <= limit,
        });
    }
    let why: Vec<String> = added
        .iter()
        .filter(|m| !m.ok)
        .map(Measured::sentence)
        .collect();
    measured.extend(added);
    let outcome = match (outcome, why.is_empty()) {
        (o, true) => o,
        (Outcome::Failed(w), false) => Outcome::Failed(format!("{w}; {}", why.join("; "))),
        (Outcome::Passed, false) => Outcome::Failed(why.join("; ")),
        (e, false) => e,
    };
    (outcome, measured)
}

/// The table lines of one check: one per threshold, or one with the reason.
fn table_rows(r: &CheckResult) -> Vec<Vec<String>> {
    let verdict = match (&r.outcome, r.retried) {
        (Outcome::Passed, false) => "PASS",
        (Outcome::Passed, true) => "PASS (re-run)",
        (Outcome::Failed(_), _) => "FAIL",
        (Outcome::Error(_), _) => "ERROR",
    };
    let reason = |why: &str| {
        vec![
            r.title.clone(),
            verdict.into(),
            "-".into(),
            "-".into(),
            "-".into(),
            why.into(),
        ]
    };
    let mut rows = Vec::new();
    if let Outcome::Error(why) = &r.outcome {
        return vec![reason(why)];
    }
    for (i, m) in r.measured.iter().enumerate() {
        let (title, verdict) = if i == 0 {
            (r.title.clone(), verdict)
        } else {
            (String::new(), "")
        };
        let flag = if m.ok { "" } else { "  <-" };
        rows.push(vec![
            title,
            verdict.into(),
            m.metric.into(),
            format!("{}{flag}", m.value()),
            m.expected(),
            m.at.clone(),
        ]);
    }
    // Failed with every threshold met: wrong values, a hang, or no rows.
    if let (Outcome::Failed(why), true) = (&r.outcome, r.measured.iter().all(|m| m.ok)) {
        rows.push(reason(why));
    }
    rows
}

/// The verdicts as a table for a person, with a summary line.
pub fn render(results: &[CheckResult]) -> String {
    let head = [
        "check",
        "result",
        "metric",
        "measured",
        "expected",
        "worst case",
    ];
    let mut table = grid::plain();
    table.set_header(head);
    table.add_rows(results.iter().flat_map(table_rows));
    let mut out = grid::render(table, &[], 2);
    let failed = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
        .count();
    let errors = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Error(_)))
        .count();
    let _ = writeln!(
        out,
        "{} check(s): {} passed, {failed} failed, {errors} could not run",
        results.len(),
        results.len() - failed - errors
    );
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::fixtures::row;

    fn checks() -> Vec<Check> {
        vec![
            Check {
                title: "small".into(),
                collective: "all-reduce".into(),
                min_busbw_gbps: None,
                max_time_us: Some(1e9),
                ..Check::default()
            },
            Check {
                title: "all-gather 1M 4 ranks".into(),
                collective: "all-gather".into(),
                min_busbw_gbps: Some(100000.0),
                max_time_us: None,
                ..Check::default()
            },
        ]
    }

    #[test]
    fn every_row_must_meet_every_threshold() {
        let mut check = checks().remove(0);
        let rows = [row(8, "out"), row(1 << 20, "out")];
        assert_eq!(evaluate(&check, &rows).0, Outcome::Passed);
        check.min_busbw_gbps = Some(1.0);
        let (outcome, measured) = evaluate(&check, &rows);
        let Outcome::Failed(why) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(
            why.starts_with(
                "busbw 0.001 GB/s (expected >= 1 GB/s) at all-reduce ring float sum 8B"
            ),
            "{why}"
        );
        assert_eq!(measured.len(), 2);
        assert!(!measured[0].ok && measured[1].ok);
        let mut wrong = row(8, "out");
        wrong.wrong = 1;
        check.min_busbw_gbps = None;
        assert!(matches!(evaluate(&check, &[wrong]).0, Outcome::Failed(w) if w.contains("wrong")));
        assert!(matches!(evaluate(&check, &[]).0, Outcome::Failed(_)));
        // A value that is not a number never meets a threshold.
        let mut nan = row(1 << 20, "out");
        nan.busbw_gbps = f64::NAN;
        nan.time_us = f64::NAN;
        check.min_busbw_gbps = Some(1.0);
        check.max_time_us = Some(1e9);
        let (outcome, measured) = evaluate(&check, &[row(1 << 20, "out"), nan]);
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        assert!(
            measured.iter().all(|m| !m.ok && m.worst.is_nan()),
            "{measured:?}"
        );
    }

    pub fn results() -> Vec<CheckResult> {
        let checks = checks();
        let (o0, m0) = evaluate(&checks[0], &[row(8, "out")]);
        let (o1, m1) = evaluate(&checks[1], &[row(1 << 20, "out")]);
        vec![
            CheckResult {
                title: checks[0].title.clone(),
                collective: "all-reduce".into(),
                outcome: o0,
                measured: m0,
                retried: false,
                seconds: 0.5,
            },
            CheckResult {
                title: "a <b> & \"c\"".into(),
                collective: "all-gather".into(),
                outcome: o1,
                measured: m1,
                retried: true,
                seconds: 1.25,
            },
            CheckResult {
                title: "gpu".into(),
                collective: "all-reduce".into(),
                outcome: Outcome::Error("--device cuda: no CUDA engine".into()),
                measured: vec![],
                retried: false,
                seconds: 0.0,
            },
        ]
    }

    #[test]
    fn table_shows_measured_against_expected() {
        let t = render(&results());
        assert!(t.lines().next().unwrap().starts_with("check"), "{t}");
        assert!(
            t.contains("PASS") && t.contains("FAIL") && t.contains("ERROR"),
            "{t}"
        );
        assert!(
            t.contains("157.286 GB/s  <-") && t.contains(">= 100000 GB/s"),
            "{t}"
        );
        assert!(
            t.contains("3 check(s): 1 passed, 1 failed, 1 could not run"),
            "{t}"
        );
    }

    #[test]
    fn link_thresholds_judge_the_slowest_link_and_the_spread() {
        use crate::report::links::{judge, LinkPair, Thresholds};
        let pair = |from, to, gbps| LinkPair {
            from,
            to,
            bytes: 1 << 20,
            gbps,
            wait_us: 1.0,
            transfer_us: 2.0,
        };
        let links = judge(
            1 << 20,
            vec![pair(0, 1, 10.0), pair(1, 2, 2.0), pair(2, 0, 9.0)],
            &Thresholds::default(),
        );
        let check = Check {
            title: "links".into(),
            collective: "all-reduce".into(),
            min_link_gbps: Some(5.0),
            max_link_spread: Some(6.0),
            ..Check::default()
        };
        let (o, m) = evaluate_links(&check, Some(&links), Outcome::Passed, Vec::new());
        let Outcome::Failed(why) = o else {
            panic!("{o:?}")
        };
        assert!(
            why.contains("link 2.000 GB/s (expected >= 5 GB/s) at link 1 -> 2 at 1MiB"),
            "{why}"
        );
        assert_eq!((m[0].metric, m[0].ok), ("link", false));
        // 10 / 2 = 5x: within 6x.
        assert_eq!((m[1].metric, m[1].worst, m[1].ok), ("spread", 5.0, true));
        let lenient = Check {
            min_link_gbps: Some(1.0),
            ..check.clone()
        };
        assert_eq!(
            evaluate_links(&lenient, Some(&links), Outcome::Passed, Vec::new()).0,
            Outcome::Passed
        );
        // Thresholds on links that were never measured cannot be judged:
        // the check is an error (exit 2), not a failure of the hardware.
        let (o, _) = evaluate_links(&lenient, None, Outcome::Passed, Vec::new());
        assert!(matches!(o, Outcome::Error(w) if w.contains("no link was measured")));
        let failed = Outcome::Failed("busbw short".into());
        let (o, _) = evaluate_links(&lenient, None, failed, Vec::new());
        assert!(matches!(o, Outcome::Error(w) if w.starts_with("busbw short; no link")));
        // Without link thresholds nothing changes.
        let plain = Check::default();
        assert_eq!(
            evaluate_links(&plain, None, Outcome::Passed, Vec::new()).0,
            Outcome::Passed
        );
    }
}
