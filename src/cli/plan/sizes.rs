//! The sizes a sweep runs: `--sizes` lists and ranges, nccl-tests' `-b -e
//! -f -i` (and their defaults), and the notes on size flags left unused.

use super::*;

/// nccl-tests' default size (its `-b` and `-e` both default to 32 MiB).
pub(super) const NCCL_TESTS_SIZE: u64 = 32 << 20;
/// nccl-tests' default step (`-i`), taken when no factor above 1 is given.
pub(super) const NCCL_TESTS_STEP: u64 = 1 << 20;

pub(crate) fn sizes(a: &SizeArgs, as_nccl_tests: bool) -> Result<Vec<u64>, PlanError> {
    if let Some(s) = &a.sizes {
        return Ok(s.0.clone());
    }
    if as_nccl_tests {
        return nccl_tests_sizes(a);
    }
    let (min, max) = match (a.minbytes, a.maxbytes) {
        (None, None) => (8, 64 << 20),
        (Some(m), None) => (m, m.max(64 << 20)),
        (None, Some(m)) => (8.min(m), m),
        (Some(a), Some(b)) => (a, b),
    };
    let growth = match (a.stepfactor, a.stepbytes) {
        // Both, as nccl-tests takes them: the factor where it grows.
        (Some(f), Some(s)) => {
            if f > 1.0 {
                Growth::Factor(f)
            } else {
                Growth::Step(s)
            }
        }
        (Some(f), None) => Growth::Factor(f),
        (None, Some(s)) => Growth::Step(s),
        (None, None) => Growth::Factor(2.0),
    };
    sweep(min, max, growth).map_err(|e| PlanError(format!("{}: {e}", size_flags(a))))
}

/// The size flags given (`-b 8 -e 64 -f 1`), to name them in an error.
pub(super) fn size_flags(a: &SizeArgs) -> String {
    let mut given = Vec::new();
    if let Some(b) = a.minbytes {
        given.push(format!("-b {b}"));
    }
    if let Some(e) = a.maxbytes {
        given.push(format!("-e {e}"));
    }
    if let Some(f) = a.stepfactor {
        given.push(format!("-f {f}"));
    }
    if let Some(i) = a.stepbytes {
        given.push(format!("-i {i}"));
    }
    if given.is_empty() {
        "sizes".into()
    } else {
        given.join(" ")
    }
}

/// The sizes as nccl-tests' binaries sweep them: `-b` and `-e` default to
/// 32 MiB each; a factor above 1 (`-f`) multiplies, else the step (`-i`,
/// default 1 MiB) adds.
pub(super) fn nccl_tests_sizes(a: &SizeArgs) -> Result<Vec<u64>, PlanError> {
    let min = a.minbytes.unwrap_or(NCCL_TESTS_SIZE);
    let max = a.maxbytes.unwrap_or(NCCL_TESTS_SIZE);
    if min > max {
        return bad(format!(
            "invalid sizes for 'minbytes' and 'maxbytes': {min} > {max} (-b and -e default to {NCCL_TESTS_SIZE})"
        ));
    }
    let growth = match a.stepfactor {
        Some(f) if f > 1.0 => Growth::Factor(f),
        Some(f) if f < 0.0 => return bad(format!("-f {f}: a factor is not negative")),
        _ => Growth::Step(a.stepbytes.unwrap_or(NCCL_TESTS_STEP)),
    };
    // min 0 (nccl-tests runs an empty case): the smallest size is a byte.
    sweep(min.max(1), max.max(1), growth).map_err(|e| PlanError(format!("{}: {e}", size_flags(a))))
}

/// `-i` beside a factor above 1 (`-f`), which grows the sweep instead, as
/// in nccl-tests.
pub(super) fn step_unused(a: &SizeArgs) -> Option<String> {
    match (a.stepfactor, a.stepbytes) {
        (Some(f), Some(i)) if f > 1.0 => Some(format!(
            "-i {i}: the sizes grow by -f {f} (a factor above 1 multiplies, as in nccl-tests), so the step is unused"
        )),
        // -f 1 with -i is how nccl-tests asks for a step: nothing to say.
        (Some(f), Some(i)) if f < 1.0 => Some(format!(
            "-f {f}: a factor below 1 does not multiply (as in nccl-tests), so the sizes step by -i {i}"
        )),
        _ => None,
    }
}

/// The `step:` of nccl-tests' header for a sweep run as its binaries run
/// it: `F(factor)` when a factor above 1 grows it, else `N(bytes)`.
pub(crate) fn nccl_tests_step(a: &SizeArgs) -> String {
    match a.stepfactor {
        Some(f) if f > 1.0 => format!("{f}(factor)"),
        _ => format!("{}(bytes)", a.stepbytes.unwrap_or(NCCL_TESTS_STEP)),
    }
}
