//! The strict reading: a text that must be exactly one nccl-tests run,
//! every line accounted for and its footer agreeing with its rows.

use super::*;

/// Half a unit of the last digit of `printed` (`343.554` -> 0.0005).
pub(super) fn half_unit(printed: &str) -> f64 {
    let (mant, exp) = match printed.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (printed, 0),
    };
    let decimals = mant.split_once('.').map_or(0, |(_, d)| d.len() as i32);
    0.5 * 10f64.powi(exp - decimals)
}

/// Where a run's marker lines are (1-based line numbers).
struct Marks {
    header: Option<usize>,
    oob: Option<usize>,
    avg: Option<usize>,
}

/// Accounts for every line of `text`: at most one of each marker line, and
/// data rows of 13 fields between the header and the footer.
fn scan_lines(text: &str) -> Result<Marks, LogError> {
    let at = |line: usize, what: String| LogError::At { line, what };
    let (mut header, mut oob, mut avg, mut starting) = (None, None, None, 0);
    let mut cols = Columns::default();
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        match classify(l, n, &cols) {
            Line::Columns(c) => cols = c,
            Line::Header(_) if header.is_some() => {
                return Err(at(n, "a second `# nThread` header".into()))
            }
            Line::Header(_) => header = Some(n),
            Line::Starting(_) => {
                starting += 1;
                if starting > 1 {
                    return Err(at(n, "a second `# Collective test starting`".into()));
                }
            }
            Line::OutOfBounds(..) if oob.is_some() => {
                return Err(at(n, "a second `# Out of bounds values`".into()))
            }
            Line::OutOfBounds(..) => oob = Some(n),
            Line::Avg(..) if avg.is_some() => {
                return Err(at(n, "a second `# Avg bus bandwidth`".into()))
            }
            Line::Avg(..) => avg = Some(n),
            Line::Row(r) => {
                if r.fields != 13 {
                    return Err(at(n, format!("{} fields, not 13: {}", r.fields, l.trim())));
                }
                if header.is_none_or(|h| h > n) {
                    return Err(at(n, "a data row before the `# nThread` header".into()));
                }
                if oob.is_some() || avg.is_some() {
                    return Err(at(n, "a data row after the footer".into()));
                }
            }
            Line::BadFooter(_) => return Err(at(n, BAD_FOOTER.into())),
            Line::Other => {
                return Err(at(
                    n,
                    format!("neither a `#` line nor a 13-field data row: {}", l.trim()),
                ))
            }
            _ => {}
        }
    }
    Ok(Marks { header, oob, avg })
}

/// Checks that `text` is exactly one nccl-tests run as nccl-tests prints
/// it: one `# nThread` header before the table, one table of at least one
/// row, one footer (`# Out of bounds values`, then `# Avg bus bandwidth`)
/// after it, at most one `# Collective test starting` line; every line is
/// either a `#` line, empty, or a data row of 13 fields that parse; the
/// `#wrong` counts add up to the out-of-bounds count; and the average
/// equals the mean busbw over every row and both placements, to the
/// printed precision (each busbw's rounding plus the average's own).
/// Returns the run.
pub fn validate_one_run(text: &str) -> Result<LogRun, LogError> {
    let marks = scan_lines(text)?;
    let at = |line: usize, what: String| LogError::At { line, what };
    let whole = |what: &str| LogError::Whole(what.to_string());
    let mut runs = parse_log(text);
    if runs.len() != 1 {
        return Err(LogError::Whole(format!("{} runs, not one", runs.len())));
    }
    let run = runs.remove(0);
    marks.header.ok_or_else(|| whole("no `# nThread` header"))?;
    let oob_line = marks
        .oob
        .ok_or_else(|| whole("no `# Out of bounds values` line"))?;
    let avg_line = marks
        .avg
        .ok_or_else(|| whole("no `# Avg bus bandwidth` line"))?;
    if avg_line < oob_line {
        return Err(at(
            avg_line,
            "`# Avg bus bandwidth` before `# Out of bounds values`".into(),
        ));
    }
    if run.rows.is_empty() {
        return Err(whole("no data rows"));
    }
    let wrong: i64 = run
        .rows
        .iter()
        .flat_map(|r| [&r.out, &r.inplace])
        .map(|c| c.wrong.unwrap_or(0))
        .sum();
    if let Some((n, ok)) = run.out_of_bounds {
        if n as i64 != wrong || ok != (n == 0) {
            return Err(at(
                oob_line,
                format!("out of bounds says {n}, the rows' #wrong add up to {wrong}"),
            ));
        }
    }
    check_average(&run, avg_line)?;
    Ok(run)
}

/// The footer's average against the mean busbw over every row and both
/// placements, to the printed precision.
fn check_average(run: &LogRun, avg_line: usize) -> Result<(), LogError> {
    let (printed, text_avg) = match (run.avg_busbw, &run.avg_text) {
        (Some(x), Some(t)) => (x, t.as_str()),
        _ => return Err(LogError::Whole("no `# Avg bus bandwidth` value".into())),
    };
    let rounding = run
        .rows
        .iter()
        .flat_map(|r| [&r.out, &r.inplace])
        .map(|c| 0.5 * 10f64.powi(-(c.busbw_decimals as i32)))
        .fold(0.0, f64::max);
    let mean = run.mean_busbw();
    let tolerance = rounding + half_unit(text_avg) + 1e-9;
    if (mean - printed).abs() > tolerance {
        return Err(LogError::At {
            line: avg_line,
            what: format!(
                "average {text_avg} is not the mean busbw over {} rows and both placements ({mean:.6}, +/- {tolerance})",
                run.rows.len()
            ),
        });
    }
    Ok(())
}
