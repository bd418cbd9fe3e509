//! `collbench compare`: a candidate's results against a baseline's; exit 1
//! when a matched row regressed, 2 when a file cannot be read or nothing
//! matches (a gate that compared nothing must not pass).

use super::{fail, CHECK_FAILED, OK};
use crate::cli::CompareArgs;
use crate::report::compare::compare as judge;
use crate::report::json::read_results;
use std::io::Write;

pub fn compare(a: &CompareArgs) -> i32 {
    let pct = a.max_regression;
    let base = match read_results(&a.baseline) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let cand = match read_results(&a.candidate) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let c = judge(&base, &cand, pct);
    if c.pairs.is_empty() {
        return fail(format!(
            "nothing to compare: no row of {} matches a row of {} (rows match on collective, engine, algo, dtype, op, root, bytes and placement)",
            a.candidate.display(),
            a.baseline.display()
        ));
    }
    // A closed stdout (a pipe into `head`) is not an error worth dying for.
    let _ = write!(std::io::stdout().lock(), "{}", c.render());
    if c.regressions() > 0 {
        eprintln!(
            "collbench: {} row(s) of {} regressed against {}",
            c.regressions(),
            a.candidate.display(),
            a.baseline.display()
        );
        CHECK_FAILED
    } else {
        OK
    }
}
