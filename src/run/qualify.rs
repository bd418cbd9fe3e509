//! `collbench qualify SPEC.toml [--junit FILE]`: runs each check of a spec
//! as a sweep, judges it against its thresholds (a failing check runs once
//! more before it fails), prints measured against expected, and writes
//! JUnit XML. Every check is validated before the first runs: a bad spec
//! runs nothing. Exit 0 when every check passed; 1 when a check failed
//! (missed a threshold, wrong values, or hung); 2 for a bad spec, or a
//! check this build or machine cannot run (such as `device = "cuda"` or an
//! engine other than builtin), which is reported as a JUnit `error`.

use super::{choose_device, fail, rfc3339_now, CHECK_FAILED, OK, USAGE};
use crate::cli::plan::{self, Sweep};
use crate::cli::{results::sweep_args, QualifyArgs};
use crate::engine::types::Collective;
use crate::harness;
use crate::report::junit::junit;
use crate::report::qualify::{evaluate, parse_spec, render, Check, CheckResult, Outcome};
use crate::report::{json::write_atomic, Fanout, Row};
use std::io::Write;
use std::time::Instant;

/// The check's sweep options as command-line flags.
fn flags(c: &Check) -> Vec<String> {
    let mut f: Vec<String> = vec![
        "--sizes".into(),
        c.sizes.clone(),
        "--ranks".into(),
        c.ranks.to_string(),
        "--device".into(),
        c.device.clone(),
    ];
    let optional = [
        ("--dtype", c.dtype.clone()),
        ("--op", c.op.clone()),
        ("--algo", c.algo.clone()),
        ("--engine", c.engine.clone()),
        ("--placement", c.placement.clone()),
        ("--iters", c.iters.map(|n| n.to_string())),
        ("--warmup", c.warmup.map(|n| n.to_string())),
    ];
    for (flag, v) in optional {
        if let Some(v) = v {
            f.push(flag.into());
            f.push(v);
        }
    }
    f
}

/// Validates a check into a sweep with the command line's own rules; the
/// check's collective gets its canonical name.
fn build(c: &mut Check) -> Result<Sweep, String> {
    let coll = match c.collective.trim() {
        "all" => None,
        name => Some(Collective::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
            format!(
                "unknown collective '{name}' (known: {}, all)",
                known.join(", ")
            )
        })?),
    };
    c.collective = coll.map_or("all", |c| c.name()).to_string();
    plan::build(coll, &sweep_args(&flags(c))?)
}

/// One run of a check's sweep: its rows, or how it went wrong.
fn measure(s: &Sweep) -> Result<Vec<Row>, Outcome> {
    let mut sink = Fanout::default();
    match harness::run(&s.plan, &mut sink, None) {
        Ok(_) => Ok(sink.rows),
        Err(e) if e.is_hang() => Err(Outcome::Failed(format!("hang detected: {e}"))),
        Err(e) => Err(Outcome::Error(e.to_string())),
    }
}

/// Runs a check, and once more if it fails.
fn run_check(c: &Check, s: &mut Sweep) -> CheckResult {
    let start = Instant::now();
    let mut result = CheckResult {
        title: c.title(),
        collective: c.collective.clone(),
        outcome: Outcome::Passed,
        measured: Vec::new(),
        retried: false,
        seconds: 0.0,
    };
    if let Err(e) = choose_device(s) {
        result.outcome = Outcome::Error(format!("cannot run here: {e}"));
        return result;
    }
    for attempt in 0..2 {
        let (outcome, measured) = match measure(s) {
            Ok(rows) => evaluate(c, &rows),
            Err(o) => (o, Vec::new()),
        };
        result.outcome = outcome;
        result.measured = measured;
        result.retried = attempt > 0;
        match &result.outcome {
            Outcome::Failed(why) if attempt == 0 => {
                eprintln!(
                    "collbench: qualify: '{}' failed ({why}); running it once more",
                    result.title
                );
            }
            _ => break,
        }
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

pub fn qualify(a: &QualifyArgs) -> i32 {
    let spec = a.spec.display();
    let text = match std::fs::read_to_string(&a.spec) {
        Ok(t) => t,
        Err(e) => return fail(format!("{spec}: {e}")),
    };
    let mut checks = match parse_spec(&text) {
        Ok(c) => c,
        Err(e) => return fail(format!("{spec}: {e}")),
    };
    let mut sweeps = Vec::new();
    for (i, c) in checks.iter_mut().enumerate() {
        match build(c) {
            Ok(s) => sweeps.push(s),
            Err(e) => return fail(format!("{spec}: check {} ({}): {e}", i + 1, c.title())),
        }
    }
    let started = rfc3339_now();
    let mut results = Vec::new();
    for (i, (c, s)) in checks.iter().zip(&mut sweeps).enumerate() {
        eprintln!(
            "collbench: qualify: check {}/{}: {}",
            i + 1,
            checks.len(),
            c.title()
        );
        results.push(run_check(c, s));
    }
    // A closed stdout (a pipe into `head`) is not an error worth dying for.
    let _ = write!(std::io::stdout().lock(), "{}", render(&results));
    if let Some(path) = &a.junit {
        let name = a
            .spec
            .file_name()
            .map_or(spec.to_string(), |n| n.to_string_lossy().into_owned());
        let xml = junit(&name, &super::hostname(), &started, &results);
        if let Err(e) = write_atomic(path, xml.as_bytes()) {
            return fail(format!("--junit {}: {e}", path.display()));
        }
    }
    if results
        .iter()
        .any(|r| matches!(r.outcome, Outcome::Error(_)))
    {
        USAGE
    } else if results.iter().any(|r| r.outcome != Outcome::Passed) {
        CHECK_FAILED
    } else {
        OK
    }
}
