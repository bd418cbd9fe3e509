//! `collbench qualify SPEC.toml [--junit FILE]`: runs each check of a spec
//! as a sweep, judges it against its thresholds (a failing check runs once
//! more before it fails), prints measured against expected, and writes
//! JUnit XML. Every check is validated before the first runs: a bad spec
//! runs nothing. Exit 0 when every check passed; 1 when a check failed
//! (missed a threshold, wrong values, or hung); 2 for a bad spec, or a
//! check this build or machine cannot run (such as `device = "cuda"` or an
//! engine other than builtin), which is reported as a JUnit `error`.
//!
//! A check with `log = "FILE"` runs no sweep: it judges the rows of FILE (an
//! nccl-tests log, every run in it, or collbench results; relative to the
//! spec's folder) of its collective (all of them for `all`) against its
//! thresholds, once. A log that cannot be read, or holds no row of the
//! check's collective, makes the spec bad.

use super::{
    choose_device, execute, fail, rfc3339_now, setup, CHECK_FAILED, INTERRUPTED, OK, USAGE,
};
use crate::cli::plan::Sweep;
use crate::cli::spec::{parse_spec, CheckSpec};
use crate::cli::QualifyArgs;
use crate::recorder::watchdog;
use crate::report::compare;
use crate::report::json::{read_any, write_atomic};
use crate::report::junit::junit;
use crate::report::links::LinkReport;
use crate::report::progress::{self, Progress};
use crate::report::qualify::{evaluate, evaluate_links, render, Check, CheckResult, Outcome};
use crate::report::{Fanout, Results, Row};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// What a check judges: a sweep it runs, or rows (and links) read from a file.
enum Job {
    Sweep(Box<Sweep>),
    /// A log's rows and links, and why its run did not finish, if it did not.
    Log(Vec<Row>, Option<LinkReport>, Option<String>),
}

/// One run of a check's sweep: its rows and links, or how it went wrong.
/// `title`: the check's, to say its notes under (None: said already).
fn measure(s: &Sweep, title: Option<&str>) -> Result<(Vec<Row>, Option<LinkReport>), Outcome> {
    let ready = super::check_thread_ranks(&s.plan, None)
        .and_then(|()| choose_device(s, None))
        .and_then(|chosen| {
            // What of the check goes unused here, as a sweep says it.
            if let Some(title) = title {
                for n in &chosen.notes {
                    progress::suspend(|| say!("collbench: qualify: '{title}': note: {n}"));
                }
            }
            let meta = super::meta(s, &chosen);
            setup(&s.plan, &chosen, &meta, None)
        });
    let setup = match ready {
        Ok(x) => x,
        Err(e) => {
            return Err(Outcome::Error(format!(
                "cannot run here: {}",
                super::one_line(&e)
            )))
        }
    };
    let mut sink = Fanout::default();
    match execute(&s.plan, &setup, &mut sink, None) {
        Ok(o) => Ok((
            sink.rows,
            o.links.as_ref().map(|t| {
                let crowded =
                    super::links::crowded(setup.gpu, s.plan.ranks, super::links::cpus(false));
                super::links::matrix(&s.plan, t, crowded.is_some())
            }),
        )),
        Err(e) if e.is_hang() => Err(Outcome::Failed(format!("hang detected: {e}"))),
        Err(e) => Err(Outcome::Error(e.to_string())),
    }
}

/// Runs a check, and once more if it fails (a log's rows are judged once).
fn run_check(c: &Check, job: &Job) -> CheckResult {
    let start = Instant::now();
    let mut result = CheckResult {
        title: c.title.clone(),
        collective: c.collective.clone(),
        outcome: Outcome::Passed,
        measured: Vec::new(),
        retried: false,
        seconds: 0.0,
    };
    let s = match job {
        Job::Sweep(s) => s,
        Job::Log(rows, links, unfinished) => {
            let (o, m) = evaluate(c, rows);
            (result.outcome, result.measured) = evaluate_links(c, links.as_ref(), o, m);
            // Rows of a run that never finished qualify nothing.
            if let Some(why) = unfinished {
                result.outcome = Outcome::Failed(why.clone());
            }
            result.seconds = start.elapsed().as_secs_f64();
            return result;
        }
    };
    for attempt in 0..2 {
        let (outcome, measured) = match measure(s, (attempt == 0).then_some(c.title.as_str())) {
            Ok((rows, links)) => {
                let (o, m) = evaluate(c, &rows);
                evaluate_links(c, links.as_ref(), o, m)
            }
            Err(o) => (o, Vec::new()),
        };
        result.outcome = outcome;
        result.measured = measured;
        result.retried = attempt > 0;
        match &result.outcome {
            Outcome::Failed(why) if attempt == 0 => progress::suspend(|| {
                say!(
                    "collbench: qualify: '{}' failed ({why}); running it once more",
                    result.title
                )
            }),
            _ => break,
        }
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

/// The rows of `log` (relative to `dir`) that `collective` (or `all`)
/// judges: those of its runs at `ranks` ranks (all runs when not given)
/// and of sizes `within`.
fn log_rows(
    dir: &Path,
    log: &str,
    collective: &str,
    within: Option<(u64, u64)>,
    ranks: Option<u32>,
) -> anyhow::Result<(Vec<Row>, Option<LinkReport>, Option<String>)> {
    let runs = read_any(&dir.join(log))?;
    let picked: Vec<&Results> = runs
        .iter()
        .filter(|r| ranks.is_none_or(|n| r.meta.world_size == n as usize))
        .collect();
    if let (Some(n), true) = (ranks, picked.is_empty()) {
        anyhow::bail!(
            "{log} has no run at {n} rank(s) (it holds runs at {})",
            compare::list(&compare::worlds(&runs))
        );
    }
    let links = picked.iter().find_map(|r| r.links.clone());
    // A run that did not finish, or whose log failed it, passes nothing.
    let unfinished = picked
        .iter()
        .filter(|r| may_hold(r, collective))
        .find_map(|r| {
            r.meta
                .partial
                .as_ref()
                .map(|p| format!("the results did not finish ({p})"))
                .or_else(|| {
                    r.log_failed()
                        .map(|why| format!("the log failed its own check: {why}"))
                })
        });
    let mut held: Vec<&str> = Vec::new();
    for r in picked.iter().flat_map(|r| &r.rows) {
        if !held.contains(&r.collective.as_str()) {
            held.push(&r.collective);
        }
    }
    let chosen: Vec<&Row> = picked
        .iter()
        .flat_map(|r| &r.rows)
        .filter(|r| collective == "all" || r.collective == collective)
        .filter(|r| within.is_none_or(|(lo, hi)| (lo..=hi).contains(&r.bytes)))
        .collect();
    // A group's operation shares the group's time (its busbw is its bytes
    // over the whole group's): the group's row is judged, as `compare` and
    // `report` do; an operation with wrong values still fails the check.
    let members = chosen.iter().filter(|r| r.group_member.is_some()).count();
    if members > 0 && members == chosen.len() {
        anyhow::bail!(
            "{log}'s {collective} rows are all operations of groups, timed as their group: collective = \"all\" judges the groups' rows"
        );
    }
    let bad_members: Vec<&&Row> = chosen
        .iter()
        .filter(|r| r.group_member.is_some() && r.is_bad())
        .collect();
    let unfinished = unfinished.or_else(|| {
        let first = bad_members.first()?;
        Some(format!(
            "{} operation(s) of groups with wrong or NaN/Inf values, first {}",
            bad_members.len(),
            crate::report::warn::describe(first)
        ))
    });
    let rows: Vec<Row> = chosen
        .into_iter()
        .filter(|r| r.group_member.is_none())
        .cloned()
        .collect();
    // Picked runs that did not finish (one failed before its first row)
    // fail the check, rows or not.
    if rows.is_empty() && unfinished.is_none() {
        let sized = within.map_or(String::new(), |(lo, hi)| format!(" from {lo} to {hi} B"));
        anyhow::bail!(
            "{log} has no {collective} rows{sized} (it holds: {})",
            if held.is_empty() {
                "nothing".into()
            } else {
                held.join(", ")
            }
        );
    }
    Ok((rows, links, unfinished))
}

/// Whether run `r` measured (or was to measure) `collective`: it has rows
/// of it, or its command names it (an nccl-tests binary, or collbench's
/// subcommand). A run whose collective cannot be told (rowless, its
/// command unknown) may hold anything, as may a check of every collective
/// or of the links; so an unfinished run of another collective in the same
/// log leaves a check alone, and one that might be its own fails it.
fn may_hold(r: &Results, collective: &str) -> bool {
    if matches!(collective, "all" | "links")
        || r.rows.iter().any(|row| row.collective == collective)
    {
        return true;
    }
    let mut words = r.meta.command.split_whitespace();
    let program = words.next().unwrap_or("");
    let base = program.rsplit('/').next().unwrap_or(program);
    let named = if base.ends_with("_perf") {
        crate::report::nccl_log::collective_of_binary(base)
    } else {
        words.next().unwrap_or("").to_string()
    };
    match crate::engine::Collective::parse(&named) {
        Some(c) => c.name() == collective,
        None => true,
    }
}

/// Every check of the spec, validated: its verdict's terms and its sweep
/// (or its log's rows). `dir`: the spec's folder, where logs are found.
fn checks(specs: &[CheckSpec], dir: &Path) -> anyhow::Result<Vec<(Check, Job)>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = || format!("check {} ({})", i + 1, c.title());
            let name = c
                .collective_name()
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
            let check = Check {
                title: c.title(),
                collective: name.to_string(),
                min_busbw_gbps: c.min_busbw_gbps,
                max_time_us: c.max_time_us,
                min_link_gbps: c.min_link_gbps,
                max_link_spread: c.max_link_spread,
            };
            let job = match &c.log {
                Some(log) => {
                    let within = c.log_sizes().map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
                    let (rows, links, unfinished) = log_rows(dir, log, name, within, c.ranks)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
                    let judges_links = c.min_link_gbps.is_some() || c.max_link_spread.is_some();
                    if judges_links && links.as_ref().is_none_or(|l| l.pairs.is_empty()) {
                        anyhow::bail!(
                            "{}: {log} holds no links (results of a sweep run with --links, or of `collbench links`, do): min_link_gbps and max_link_spread have nothing to judge",
                            at()
                        );
                    }
                    Job::Log(rows, links, unfinished)
                }
                None => {
                    let mut sweep = c.sweep().map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
                    super::thread_rank_settings(&mut sweep)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
                    Job::Sweep(Box::new(sweep))
                }
            };
            Ok((check, job))
        })
        .collect()
}

/// Reads and parses the spec; a JSON file or an nccl-tests log where the
/// spec goes is refused with how to judge it.
fn load_spec(a: &QualifyArgs) -> Result<Vec<CheckSpec>, String> {
    let spec = a.spec.display();
    let text =
        crate::units::read_input_text(&a.spec, 16 << 20).map_err(|e| format!("{spec}: {e}"))?;
    // Results or a log named where the spec goes: say how to judge them.
    let log = crate::report::nccl_log::looks_like_log(&text);
    if text.trim_start().starts_with('{') || log {
        let name = a
            .spec
            .file_name()
            .map_or(spec.to_string(), |n| n.to_string_lossy().into());
        return Err(format!(
            "{spec}: {}, where a spec is TOML ([[check]] tables); to judge saved results, write a spec whose check has log = \"{}\"",
            if log { "an nccl-tests log" } else { "JSON" },
            name.escape_debug()
        ));
    }
    parse_spec(&text)
        .map_err(|e| super::one_line(&anyhow::Error::from(e).context(spec.to_string())))
}

/// Runs every check in order, with a progress bar and a line each.
fn run_checks(checks: &[(Check, Job)]) -> Vec<CheckResult> {
    let mut results = Vec::new();
    let bar = Progress::new(checks.len() as u64, "checks", true);
    for (i, (c, s)) in checks.iter().enumerate() {
        bar.current(c.title.clone());
        progress::suspend(|| {
            say!(
                "collbench: qualify: check {}/{}: {}",
                i + 1,
                checks.len(),
                c.title
            )
        });
        results.push(run_check(c, s));
        bar.done_one();
        // A stop signal ends the run: the checks after it are not begun.
        if watchdog::signalled() {
            break;
        }
    }
    bar.finish();
    results
}

/// Writes the JUnit XML to `path` (`-`: stdout).
fn write_junit(
    a: &QualifyArgs,
    path: &Path,
    started: &str,
    results: &[CheckResult],
) -> anyhow::Result<()> {
    let name = a
        .spec
        .file_name()
        .map_or(a.spec.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        });
    let xml = junit(&name, &super::hostname(), started, results);
    let written = if path.as_os_str() == "-" {
        std::io::stdout().lock().write_all(xml.as_bytes())
    } else {
        write_atomic(path, xml.as_bytes())
    };
    written.map_err(|e| anyhow::anyhow!("--junit {}: {e}", path.display()))
}

pub fn qualify(a: &QualifyArgs) -> i32 {
    let spec = a.spec.display();
    let dir = a.spec.parent().unwrap_or(Path::new(""));
    let specs = match load_spec(a) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    // Before any check runs: the JUnit file must be writable, and neither
    // the spec nor a log it reads.
    if let Some(path) = &a.junit {
        let inputs: Vec<std::path::PathBuf> = std::iter::once(a.spec.clone())
            .chain(
                specs
                    .iter()
                    .filter_map(|c| c.log.as_deref().map(|l| dir.join(l))),
            )
            .collect();
        if let Err(e) = super::paths::check_outputs(&[("--junit", path.as_path())], &inputs) {
            return fail(e);
        }
    }
    let checks = match checks(&specs, dir) {
        Ok(c) => c,
        Err(e) => return fail(super::one_line(&e.context(spec.to_string()))),
    };
    let started = rfc3339_now();
    // A signal from now on stops the run with what it judged written (not
    // before: reading the spec from a pipe must still end at Ctrl-C).
    watchdog::install_signal_handlers();
    let results = run_checks(&checks);
    // `--junit -` (or /dev/stdout): the XML is stdout's, the table stderr's.
    let xml_on_stdout = a.junit.as_deref().is_some_and(crate::units::is_stdout);
    // A closed stdout (a pipe into `head`) is not an error worth dying for.
    if xml_on_stdout {
        let _ = write!(std::io::stderr().lock(), "{}", render(&results));
    } else {
        out_part!("{}", render(&results));
    }
    if let Some(path) = &a.junit {
        if let Err(e) = write_junit(a, path, &started, &results) {
            return fail(e);
        }
    }
    if let Some(sig) = watchdog::stop_signal() {
        let at = results.len();
        progress::suspend(|| {
            say!(
                "collbench: qualify: interrupted by {sig} in check {at} of {}; the checks after it were not run",
                checks.len()
            )
        });
        INTERRUPTED
    } else if results
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
