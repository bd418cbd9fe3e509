//! `collbench compare`: a candidate's results against a baseline's; exit 1
//! when a matched row regressed, 2 when a file cannot be read or nothing
//! matches (a gate that compared nothing must not pass). Either file may be
//! an nccl-tests log (all its runs' rows); rows are then matched ignoring
//! engine and algorithm, and a line says so. A candidate that did not
//! finish (it hung, or was stopped) fails whatever its rows say.

use super::{fail, CHECK_FAILED, OK};
use crate::cli::CompareArgs;
use crate::report::compare::compare_runs as judge;
use crate::report::json::read_any;
use crate::report::Results;

pub fn compare(a: &CompareArgs) -> i32 {
    let pct = a.max_regression;
    let base = match read_any(&a.baseline) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let cand = match read_any(&a.candidate) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let c = judge(&base, &cand, pct);
    let (b, k) = (a.baseline.display(), a.candidate.display());
    let matched_on = c.matched_on(&b.to_string(), &k.to_string());
    let stopped_early = cand.iter().all(|r| r.rows.is_empty());
    if let (true, Some(p)) = (
        stopped_early,
        cand.iter().find_map(|r| r.meta.partial.as_ref()),
    ) {
        say!("collbench: error: the candidate did not finish ({p}) before its first row: a run that did not finish does not pass");
        return CHECK_FAILED;
    }
    if c.pairs.is_empty() {
        return fail(format!(
            "nothing to compare: no row of {k} matches a row of {b} (rows {matched_on})"
        ));
    }
    if c.pairs.iter().all(|p| p.ratio.is_nan() && !p.regressed) {
        return fail(format!(
            "nothing to compare: each of the {} matched row(s) has a zero or a non-number in {k} or {b}",
            c.pairs.len()
        ));
    }
    // A closed stdout (a pipe into `head`) is not an error worth dying
    // for; a full disk is said at the end (see `stdout_lost`).
    if c.loose.is_some() || c.by_world {
        out!("{matched_on}");
    }
    out_part!("{}", c.render());
    let cand_fails = say_unfinished(&base, &cand);
    say_warnings(&c);
    let missing = !c.missing.is_empty() && !a.allow_missing;
    if !c.missing.is_empty() {
        let first = &c.missing[0];
        say!(
            "collbench: {}: {} baseline row(s) missing from {k}, first: {first}{}",
            if a.allow_missing { "warning" } else { "error" },
            c.missing.len(),
            if a.allow_missing {
                ""
            } else {
                " (--allow-missing lets a comparison pass without them)"
            }
        );
    }
    if c.regressions() > 0 {
        say!(
            "collbench: {} row(s) of {} regressed against {}",
            c.regressions(),
            a.candidate.display(),
            a.baseline.display()
        );
    }
    if c.regressions() > 0 || missing || cand_fails {
        CHECK_FAILED
    } else {
        OK
    }
}

/// Says which side did not finish or failed its own check (a baseline's
/// rows are compared as they are); whether the candidate fails for it.
fn say_unfinished(base: &[Results], cand: &[Results]) -> bool {
    let unfinished = |runs: &[Results]| runs.iter().find_map(|r| r.meta.partial.clone());
    if let Some(p) = unfinished(base) {
        say!("collbench: warning: the baseline did not finish ({p}): its rows are compared as they are");
    }
    let cand_unfinished = unfinished(cand);
    if let Some(p) = &cand_unfinished {
        say!("collbench: error: the candidate did not finish ({p}): a run that did not finish does not pass, whatever its rows");
    }
    let cand_failed = cand.iter().find_map(Results::log_failed);
    if let Some(why) = &cand_failed {
        say!("collbench: error: the candidate failed its own check ({why}): it does not pass, whatever its rows");
    }
    if let Some(why) = base.iter().find_map(Results::log_failed) {
        say!("collbench: warning: the baseline failed its own check ({why}): its rows are compared as they are");
    }
    let bad = |runs: &[Results]| -> Option<String> {
        let bad: Vec<&crate::report::Row> = runs
            .iter()
            .flat_map(|r| &r.rows)
            .filter(|r| r.is_bad())
            .collect();
        let first = bad.first()?;
        Some(format!(
            "wrong or NaN/Inf values in {} row(s), first: {} {} {} {} bytes {}",
            bad.len(),
            first.collective,
            first.dtype,
            first.op,
            first.bytes,
            first.placement
        ))
    };
    if let Some(what) = bad(base) {
        say!("collbench: warning: the baseline has {what}: its rows are compared as they are");
    }
    // Every row of the candidate counts, matched or not (a size the
    // baseline lacks, a second algorithm's row, a group's operation).
    let cand_bad = bad(cand);
    if let Some(what) = &cand_bad {
        say!("collbench: error: the candidate has {what}: it does not pass, whatever its times");
    }
    cand_unfinished.is_some() || cand_failed.is_some() || cand_bad.is_some()
}

/// The comparison's warnings: how the runs differ, rows sharing a key.
fn say_warnings(c: &crate::report::compare::Comparison) {
    for d in &c.differences {
        if c.by_world {
            say!("collbench: warning: the files differ in {d}");
        } else {
            say!("collbench: warning: the runs differ in {d}; rows are compared all the same");
        }
    }
    // A file of repeated runs holds thousands: the first few say enough.
    const SHOWN: usize = 5;
    for d in c.duplicates.iter().take(SHOWN) {
        say!("collbench: warning: two rows with one key, the first one used: {d}");
    }
    if c.duplicates.len() > SHOWN {
        say!(
            "collbench: warning: {} more rows share a key with an earlier row (the first one used)",
            c.duplicates.len() - SHOWN
        );
    }
}
