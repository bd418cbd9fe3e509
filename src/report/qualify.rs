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
}

/// One threshold of a check, against the worst row measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// `busbw` or `time`.
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
            "busbw" => format!(">= {} GB/s", self.limit),
            _ => format!("<= {} us", self.limit),
        }
    }

    pub fn value(&self) -> String {
        match self.metric {
            "busbw" => format!("{:.3} GB/s", self.worst),
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
        let w = rows
            .iter()
            .min_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps));
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
        let w = rows.iter().max_by(|a, b| a.time_us.total_cmp(&b.time_us));
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
            },
            Check {
                title: "all-gather 1M 4 ranks".into(),
                collective: "all-gather".into(),
                min_busbw_gbps: Some(100000.0),
                max_time_us: None,
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
}
