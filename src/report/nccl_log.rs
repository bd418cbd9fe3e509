//! nccl-tests logs as input: what `all_reduce_perf` and its siblings print
//! on stdout, read into runs ([`parse_log`]) and converted to collbench's
//! results ([`LogRun::to_results`]), so `report`, `compare` and `qualify`
//! take an old nccl-tests log wherever they take a collbench results file.
//!
//! A log holds one or several runs. A run starts at `# nccl-tests version`,
//! `# Collective test starting: X_perf` or `# nThread ...` (whichever comes
//! first after the previous run) and holds the header (version, the
//! `# nThread` line, the `# Using devices` lines), the table and the footer
//! (`# Out of bounds values`, `# Avg bus bandwidth`). Data rows come in the
//! three layouts nccl-tests 2.x has printed: 13 fields (size, count, type,
//! redop, root, then time, algbw, busbw, #wrong out of place and in place),
//! 12 (no root) and 11 (no root, redop left blank). `N/A` in `#wrong` (or the
//! older `error`) means the values were not checked. Other `#` lines
//! (warnings such as `# Reducing maxBytes ...`) and lines that are neither
//! (NCCL's `INFO` lines mixed into stdout) are skipped by the reader; the
//! strict [`validate_one_run`] refuses the latter.
//!
//! Rows converted keep `engine` = [`ENGINE`] and `algo` = [`ALGO`] (nccl-tests
//! does not say which algorithm NCCL chose). The collective comes from the
//! `# Collective test starting` line; without it (older logs) from the
//! rows' shape (redop, root, count against size, busbw against algbw) and,
//! where the shape leaves a choice (all-gather or all-to-all, gather or
//! scatter), from the file name (`..._alltoall.log`). When neither tells,
//! the first candidate is taken and a note in `meta.notes` says it was
//! guessed; a run with no shape at all and no name is refused.
//!
//! `meta` of a converted run: `version` `nccl-tests 2.17.8` (plain
//! `nccl-tests` when the log does not say which), `nccl` the rest of the version line
//! (`nccl-headers=... nccl-library=...`), `command` the binary
//! (`all_reduce_perf`), `host` the hosts of the device lines (comma
//! separated), `started_at` empty, `world_size` the ranks listed under
//! `# Using devices` (else nThread x nGpus), `device` `cuda`, `devices` one
//! line per rank (`NAME [BUS] (rank R, pid P on HOST, device D)`), `iters`
//! and `warmup` from the header, `timing` `wall`, and `notes`: where the
//! run came from (file, run i of n), the header line as printed, and a
//! guessed collective when it was guessed.

use super::{Meta, Results, Row, Stats};
use std::ops::Range;

/// `engine` of every row read from an nccl-tests log.
pub const ENGINE: &str = "nccl-tests-log";
/// `algo` of every row read from an nccl-tests log: NCCL chose, unsaid.
pub const ALGO: &str = "nccl";

/// Why a log cannot be read or is not exactly one nccl-tests run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// Something wrong on one line (1-based).
    #[error("line {line}: {what}")]
    At { line: usize, what: String },
    /// Something wrong with the text as a whole.
    #[error("{0}")]
    Whole(String),
}

/// The `# nThread ...` line, its fields as printed (absent in older layouts:
/// `agg iters`, `graph`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// The line as printed, without the leading `# `.
    pub line: String,
    pub nthread: Option<u64>,
    pub ngpus: Option<u64>,
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    /// `2(factor)` or `N(bytes)`, as printed.
    pub step: Option<String>,
    pub warmup: Option<u64>,
    pub iters: Option<u64>,
    pub agg_iters: Option<u64>,
    pub validation: Option<u64>,
    pub graph: Option<u64>,
}

/// How a run stopped, from what collbench's text says of it in its
/// footer (`run interrupted: hang, 2 row(s) missing`, `run failed: an
/// error stopped it, 15 row(s) missing`): the reason and the rows missing;
/// `None` for any other text.
fn stopped_partial(text: &str) -> Option<super::Partial> {
    use super::StopReason;
    let missing = |t: &str| -> Option<usize> {
        let t = t.trim().strip_suffix("row(s) missing")?;
        t.trim().rsplit([' ', ',']).next()?.parse().ok()
    };
    if let Some(rest) = text.strip_prefix("run interrupted: ") {
        let (reason, tail) = rest.split_once(',')?;
        let reason = match reason.trim() {
            "signal" => StopReason::Signal,
            "hang" => StopReason::Hang,
            _ => return None,
        };
        return Some(super::Partial {
            reason,
            missing_rows: missing(tail)?,
        });
    }
    let rest = text.strip_prefix("run failed: ")?;
    Some(super::Partial {
        reason: StopReason::Error,
        missing_rows: missing(rest)?,
    })
}

/// One `#  Rank  0 Group  0 Pid 123 on host device  0 [bus] NAME` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankLine {
    /// The line as printed (without trailing blanks).
    pub line: String,
    pub rank: u64,
    /// Absent in older layouts.
    pub group: Option<u64>,
    pub pid: u64,
    pub host: String,
    pub device: u64,
    /// What the brackets hold (`0000:1b:00`, `0x00`).
    pub bus: String,
    pub name: String,
}

/// One placement's columns of a data row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// None: `N/A` (not checked), or an older float `error` column.
    pub wrong: Option<i64>,
    /// Digits after the point of busbw as printed (its precision).
    pub busbw_decimals: u32,
}

/// One data row: a size with its out-of-place and in-place cells.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogRow {
    /// 1-based line in the log.
    pub line: usize,
    /// How many fields the row has (13, 12 or 11).
    pub fields: usize,
    pub bytes: u64,
    pub count: u64,
    /// The type as printed (`float`, `double`, ...).
    pub dtype: String,
    /// The redop as printed; empty in the 11-field layout.
    pub op: String,
    /// -1 where the layout has no root column.
    pub root: i64,
    pub out: Cell,
    pub inplace: Cell,
}

/// One nccl-tests run: header, rows, footer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogRun {
    /// 0-based line indices of the log this run spans.
    pub lines: Range<usize>,
    /// `2.17.8` from `# nccl-tests version 2.17.8 ...`.
    pub version: Option<String>,
    /// The rest of the version line (`nccl-headers=... nccl-library=...`).
    pub nccl: Option<String>,
    /// `all_reduce_perf` from `# Collective test starting: all_reduce_perf`.
    pub binary: Option<String>,
    pub header: Option<Header>,
    pub ranks: Vec<RankLine>,
    pub rows: Vec<LogRow>,
    /// `# Out of bounds values : N OK|FAILED`: N and whether OK.
    pub out_of_bounds: Option<(u64, bool)>,
    /// `# Avg bus bandwidth : X`.
    pub avg_busbw: Option<f64>,
    /// X as printed (its precision).
    pub avg_text: Option<String>,
    /// `# Collective test concluded` was seen.
    pub concluded: bool,
    /// 1-based lines laid out as data rows whose values do not read.
    pub bad_rows: Vec<usize>,
    /// Its column header is newer nccl-tests' wider one (`busbw  #wrong`).
    pub wide: bool,
    /// The first line inside the run telling that the test failed
    /// (`Test NCCL failure ...`, `Test CUDA failure ...`).
    pub failure: Option<String>,
    /// Its footer is collbench's for a run that did not finish (`0 FAILED
    /// (run interrupted: ...)`): why, as written.
    pub stopped: Option<String>,
}

impl LogRun {
    fn is_empty(&self) -> bool {
        self.version.is_none()
            && self.binary.is_none()
            && self.header.is_none()
            && self.rows.is_empty()
            && self.avg_busbw.is_none()
    }

    /// Whether the run printed its footer (`# Out of bounds values`, `#
    /// Avg bus bandwidth`) after its rows, and no failure before it.
    pub fn finished(&self) -> bool {
        self.failure.is_none()
            && self.stopped.is_none()
            && (self.out_of_bounds.is_some() || self.avg_busbw.is_some())
    }

    /// The number of ranks: the device lines, else nThread x nGpus.
    pub fn world_size(&self) -> usize {
        if !self.ranks.is_empty() {
            return self.ranks.len();
        }
        self.header
            .as_ref()
            .and_then(|h| Some(h.nthread? * h.ngpus?))
            .map_or(1, |n| n.max(1) as usize)
    }

    /// The mean busbw over every row and both placements, as printed.
    pub fn mean_busbw(&self) -> f64 {
        if self.rows.is_empty() {
            return 0.0;
        }
        let sum: f64 = self
            .rows
            .iter()
            .map(|r| r.out.busbw_gbps + r.inplace.busbw_gbps)
            .sum();
        sum / (2 * self.rows.len()) as f64
    }
}

/// The value after `word` among `tokens`.
fn after<'a>(tokens: &[&'a str], i: usize, word: &str) -> Option<&'a str> {
    (tokens.get(i) == Some(&word)).then(|| tokens.get(i + 1).copied())?
}

fn parse_header(body: &str) -> Header {
    let t: Vec<&str> = body.split_whitespace().collect();
    let num = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok());
    let mut h = Header {
        line: body.trim().to_string(),
        ..Header::default()
    };
    let mut i = 0;
    while i < t.len() {
        match t[i] {
            "nThread" => h.nthread = num(after(&t, i, "nThread")),
            "nGpus" => h.ngpus = num(after(&t, i, "nGpus")),
            "minBytes" => h.min_bytes = num(after(&t, i, "minBytes")),
            "maxBytes" => h.max_bytes = num(after(&t, i, "maxBytes")),
            "step:" => h.step = after(&t, i, "step:").map(String::from),
            "warmup" if t.get(i + 1) == Some(&"iters:") => {
                h.warmup = num(t.get(i + 2).copied());
                i += 2;
            }
            "agg" if t.get(i + 1) == Some(&"iters:") => {
                h.agg_iters = num(t.get(i + 2).copied());
                i += 2;
            }
            "iters:" => h.iters = num(after(&t, i, "iters:")),
            "validation:" => h.validation = num(after(&t, i, "validation:")),
            "graph:" => h.graph = num(after(&t, i, "graph:")),
            _ => {}
        }
        i += 1;
    }
    h
}

/// `Rank  0 Group  0 Pid 123 on host device  0 [bus] NAME` (after `#`).
fn parse_rank(body: &str) -> Option<RankLine> {
    let (head, rest) = body.split_once('[')?;
    let (bus, name) = rest.split_once(']')?;
    let t: Vec<&str> = head.split_whitespace().collect();
    let mut r = RankLine {
        bus: bus.trim().to_string(),
        name: name.trim().to_string(),
        ..RankLine::default()
    };
    let num = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok());
    let mut seen = (false, false);
    for i in 0..t.len() {
        match t[i] {
            "Rank" => {
                r.rank = num(after(&t, i, "Rank"))?;
                seen.0 = true;
            }
            "Group" => r.group = num(after(&t, i, "Group")),
            "Pid" => r.pid = num(after(&t, i, "Pid"))?,
            "on" => r.host = after(&t, i, "on")?.to_string(),
            "device" => {
                r.device = num(after(&t, i, "device"))?;
                seen.1 = true;
            }
            _ => {}
        }
    }
    (seen.0 && seen.1).then_some(r)
}

fn parse_cell(f: &[&str]) -> Option<Cell> {
    let [time, algbw, busbw, wrong] = f else {
        return None;
    };
    let wrong = match *wrong {
        "N/A" => None,
        w => match w.parse::<i64>() {
            Ok(n) => Some(n),
            // The older float `error` column is not a count of wrong values.
            Err(_) => {
                w.parse::<f64>().ok()?;
                None
            }
        },
    };
    // Times and bandwidths are numbers from 0 to a bound no run reaches
    // (Rust would also read `nan`, `inf`, `-5` and `1e300`, which no run
    // prints).
    let most = super::model::MAX_MEASURE;
    let value = |v: &str| v.parse::<f64>().ok().filter(|x| (0.0..=most).contains(x));
    Some(Cell {
        time_us: value(time)?,
        algbw_gbps: value(algbw)?,
        busbw_gbps: value(busbw)?,
        wrong,
        busbw_decimals: busbw.split_once('.').map_or(0, |(_, d)| d.len() as u32),
    })
}

/// A data row in any of the three layouts, or None.
fn parse_row(line: &str, at: usize) -> Option<LogRow> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let (op, root, cells) = match f.len() {
        13 => (f[3], f[4].parse::<i64>().ok()?, &f[5..]),
        12 => (f[3], -1, &f[4..]),
        11 => ("", -1, &f[3..]),
        _ => return None,
    };
    if !f[2].starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    Some(LogRow {
        line: at,
        fields: f.len(),
        bytes: f[0].parse().ok()?,
        count: f[1].parse().ok()?,
        dtype: f[2].to_string(),
        op: op.to_string(),
        root,
        out: parse_cell(&cells[..4])?,
        inplace: parse_cell(&cells[4..])?,
    })
}

/// What one line of a log is.
enum Line {
    Version(String, String),
    Starting(String),
    Concluded,
    Header(Header),
    Rank(RankLine),
    /// N, whether OK, and what follows a FAILED that collbench wrote for
    /// a run that did not finish (`(run interrupted: ...)`).
    OutOfBounds(u64, bool, Option<String>),
    Avg(f64, String),
    /// The column header (`# size count ...`): whether it is the wider one.
    Columns(bool),
    /// Any other `#` line, or an empty one.
    Comment,
    Row(LogRow),
    /// A line laid out as a data row (size, count, type and 11 to 13
    /// fields) whose values do not read.
    BadRow(usize),
    /// Neither a `#` line nor a data row.
    Other,
}

/// Whether `line` is laid out as a data row: a size and a count, a type,
/// and the field count of one of the three layouts.
fn looks_like_row(line: &str) -> bool {
    let f: Vec<&str> = line.split_whitespace().collect();
    // Whole numbers of any sign or size: a negative or overflowing size is
    // a row that does not read, not a line to pass over.
    let whole = |s: &str| {
        let d = s.strip_prefix('-').unwrap_or(s);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    };
    // Any field count: a row cut short, or with other output run into
    // its line, is a row that does not read too.
    f.len() >= 3
        && whole(f[0])
        && whole(f[1])
        && f[2].starts_with(|c: char| c.is_ascii_alphabetic())
}

fn classify(line: &str, at: usize) -> Line {
    let t = line.trim();
    let Some(body) = t.strip_prefix('#') else {
        if t.is_empty() {
            return Line::Comment;
        }
        return match parse_row(t, at) {
            Some(r) => Line::Row(r),
            None if looks_like_row(t) => Line::BadRow(at),
            None => Line::Other,
        };
    };
    let body = body.trim();
    if let Some(v) = body.strip_prefix("nccl-tests version") {
        let v = v.trim();
        let (ver, rest) = v.split_once(char::is_whitespace).unwrap_or((v, ""));
        return Line::Version(ver.to_string(), rest.trim().to_string());
    }
    if let Some(b) = body.strip_prefix("Collective test starting:") {
        return Line::Starting(b.trim().to_string());
    }
    if body.starts_with("Collective test concluded") {
        return Line::Concluded;
    }
    if body.starts_with("nThread ") {
        return Line::Header(parse_header(body));
    }
    if body.starts_with("Rank ") {
        return parse_rank(body).map_or(Line::Comment, |mut r| {
            r.line = line.trim().to_string();
            Line::Rank(r)
        });
    }
    if body.starts_with("size ") && body.contains("busbw") {
        return Line::Columns(body.contains("busbw  #wrong"));
    }
    if let Some(v) = body.strip_prefix("Out of bounds values") {
        let v: Vec<&str> = v
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .collect();
        if let (Some(n), Some(ok)) = (v.first().and_then(|n| n.parse().ok()), v.get(1)) {
            // collbench's text of an unfinished run: `0 FAILED (run ...)`.
            let rest = v[2..].join(" ");
            let stopped = (*ok == "FAILED" && rest.starts_with("(run ")).then(|| {
                rest.trim_start_matches('(')
                    .trim_end_matches(')')
                    .to_string()
            });
            return Line::OutOfBounds(n, *ok == "OK", stopped);
        }
    }
    if let Some(v) = body.strip_prefix("Avg bus bandwidth") {
        let v = v.trim_start_matches([' ', ':']).trim();
        if let Ok(x) = v.parse::<f64>() {
            return Line::Avg(x, v.to_string());
        }
    }
    Line::Comment
}

/// `line` without the prefix a launcher puts before each line of its
/// tasks' output: Open MPI's `--tag-output` (`[1,0]<stdout>:`) and
/// Slurm's `srun --label` (`0: `).
fn untagged(line: &str) -> &str {
    if let Some(rest) = line.strip_prefix('[') {
        if let Some((tag, after)) = rest.split_once(']') {
            let ids = tag
                .split(',')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            let after = after
                .strip_prefix("<stdout>:")
                .or_else(|| after.strip_prefix("<stderr>:"));
            if let (true, Some(after)) = (ids, after) {
                return after;
            }
        }
    }
    let t = line.trim_start();
    if let Some((id, after)) = t.split_once(": ") {
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
            return after;
        }
    }
    line
}

/// The runs of an nccl-tests log, leniently: lines that are not part of a
/// run are skipped, and runs with nothing in them are left out.
pub fn parse_log(text: &str) -> Vec<LogRun> {
    let mut runs = Vec::new();
    let mut cur = LogRun::default();
    let mut end = 0;
    for (i, l) in text.lines().enumerate() {
        let l = untagged(l);
        let line = classify(l, i + 1);
        let new_run = match &line {
            Line::Version(..) => !cur.is_empty(),
            Line::Starting(_) => {
                cur.binary.is_some() || cur.header.is_some() || !cur.rows.is_empty()
            }
            Line::Header(_) => cur.header.is_some() || !cur.rows.is_empty(),
            _ => false,
        };
        if new_run {
            cur.lines.end = end;
            runs.push(std::mem::take(&mut cur));
        }
        if cur.is_empty() && !matches!(line, Line::Comment | Line::Other) {
            cur.lines.start = i;
        }
        match line {
            Line::Version(v, rest) => {
                cur.version = Some(v);
                cur.nccl = (!rest.is_empty()).then_some(rest);
            }
            Line::Starting(b) => cur.binary = Some(b),
            Line::Concluded => cur.concluded = true,
            Line::Header(h) => cur.header = Some(h),
            Line::Rank(r) => cur.ranks.push(r),
            Line::OutOfBounds(n, ok, stopped) => {
                cur.out_of_bounds = Some((n, ok));
                cur.stopped = stopped;
            }
            Line::Avg(x, s) => {
                cur.avg_busbw = Some(x);
                cur.avg_text = Some(s);
            }
            Line::Row(r) => cur.rows.push(r),
            Line::BadRow(at) => cur.bad_rows.push(at),
            Line::Columns(wide) => cur.wide = wide,
            Line::Comment => {}
            Line::Other => {
                let failed = ["Test NCCL failure", "Test CUDA failure", "Test failure"]
                    .iter()
                    .any(|m| l.contains(m));
                if failed && !cur.is_empty() && cur.failure.is_none() {
                    cur.failure = Some(l.trim().to_string());
                }
            }
        }
        if !cur.is_empty() {
            end = i + 1;
        }
    }
    if !cur.is_empty() {
        cur.lines.end = end;
        runs.push(cur);
    }
    runs
}

/// Whether `text` looks like nccl-tests output (a header, a footer or the
/// start of a test), as opposed to some other file.
pub fn looks_like_log(text: &str) -> bool {
    text.lines().any(|l| {
        let l = untagged(l).trim_start();
        l.starts_with("# nThread ")
            || l.starts_with("# Collective test starting:")
            || l.starts_with("# Avg bus bandwidth")
    })
}

/// Half a unit of the last digit of `printed` (`343.554` -> 0.0005).
fn half_unit(printed: &str) -> f64 {
    let (mant, exp) = match printed.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (printed, 0),
    };
    let decimals = mant.split_once('.').map_or(0, |(_, d)| d.len() as i32);
    0.5 * 10f64.powi(exp - decimals)
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
    let at = |line: usize, what: String| LogError::At { line, what };
    let whole = |what: &str| LogError::Whole(what.to_string());
    let (mut header, mut oob, mut avg, mut starting) = (None, None, None, 0);
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        match classify(l, n) {
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
            Line::Other => {
                return Err(at(
                    n,
                    format!("neither a `#` line nor a 13-field data row: {}", l.trim()),
                ))
            }
            _ => {}
        }
    }
    let mut runs = parse_log(text);
    if runs.len() != 1 {
        return Err(LogError::Whole(format!("{} runs, not one", runs.len())));
    }
    let run = runs.remove(0);
    header.ok_or_else(|| whole("no `# nThread` header"))?;
    let oob_line = oob.ok_or_else(|| whole("no `# Out of bounds values` line"))?;
    let avg_line = avg.ok_or_else(|| whole("no `# Avg bus bandwidth` line"))?;
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
    let (printed, text_avg) = match (run.avg_busbw, &run.avg_text) {
        (Some(x), Some(t)) => (x, t.as_str()),
        _ => return Err(whole("no `# Avg bus bandwidth` value")),
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
        return Err(at(
            avg_line,
            format!(
                "average {text_avg} is not the mean busbw over {} rows and both placements ({mean:.6}, +/- {tolerance})",
                run.rows.len()
            ),
        ));
    }
    Ok(run)
}

/// collbench's name of an nccl-tests type (`char` -> `int8`, `int` ->
/// `int32`, `uint` -> `uint32`; the rest are the same names).
pub fn dtype_name(nccl: &str) -> String {
    match nccl {
        "char" => "int8".into(),
        "int" => "int32".into(),
        "uint" => "uint32".into(),
        "fp16" => "half".into(),
        "bf16" => "bfloat16".into(),
        other => other.to_string(),
    }
}

fn elem_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "int8" | "uint8" | "f8e4m3" | "f8e5m2" => 1,
        "half" | "bfloat16" => 2,
        "int32" | "uint32" | "float" => 4,
        "int64" | "uint64" | "double" => 8,
        _ => return None,
    })
}

/// collbench's name of an nccl-tests binary (`alltoall_perf` -> `all-to-all`).
pub fn collective_of_binary(binary: &str) -> String {
    let stem = binary.rsplit('/').next().unwrap_or(binary);
    let stem = stem.strip_suffix("_perf").unwrap_or(stem);
    match stem {
        "alltoall" => "all-to-all".into(),
        "alltoallv" => "all-to-all-v".into(),
        "sendrecv" => "send-recv".into(),
        s => s.replace('_', "-"),
    }
}

/// The collective a file name names (`sb_nccl_alltoall.log` -> `all-to-all`).
pub fn collective_of_name(name: &str) -> Option<&'static str> {
    let squashed: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    // Longer names first: `allreduce` holds `reduce`, `allgather` `gather`.
    [
        ("allreduce", "all-reduce"),
        ("allgather", "all-gather"),
        ("reducescatter", "reduce-scatter"),
        ("alltoallv", "all-to-all-v"),
        ("alltoall", "all-to-all"),
        ("sendrecv", "send-recv"),
        ("broadcast", "broadcast"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("reduce", "reduce"),
    ]
    .into_iter()
    .find(|(k, _)| squashed.contains(k))
    .map(|(_, v)| v)
}

const REDUCTIONS: [&str; 7] = ["sum", "prod", "min", "max", "avg", "mulsum", "premulsum"];

/// The collectives the rows' shape allows, most likely first: the redop and
/// root, the count against the size (the whole buffer per rank, or a
/// 1/ranks share) and busbw against algbw (nccl-tests' factors).
fn shape_candidates(run: &LogRun, ranks: u64) -> Vec<&'static str> {
    let Some(first) = run.rows.first() else {
        return Vec::new();
    };
    let reduction = REDUCTIONS.contains(&first.op.as_str());
    let n = ranks.max(1);
    let sample = run.rows.iter().find_map(|r| {
        let es = elem_size(&dtype_name(&r.dtype))?;
        (r.bytes > 0 && r.count > 0).then_some((r.bytes, r.count * es))
    });
    let (whole, split) = match sample {
        Some((bytes, per_rank)) => (per_rank == bytes, per_rank * n == bytes),
        None => (true, true),
    };
    let factor = run
        .rows
        .iter()
        .map(|r| &r.out)
        .filter(|c| c.algbw_gbps > 0.0)
        .max_by(|a, b| a.algbw_gbps.total_cmp(&b.algbw_gbps))
        .map(|c| c.busbw_gbps / c.algbw_gbps);
    let nf = n as f64;
    let fits = |f: f64| factor.is_none_or(|x| (x - f).abs() <= 0.05 * f.max(0.1));
    let (all, share, one) = (
        fits(2.0 * (nf - 1.0) / nf),
        fits((nf - 1.0) / nf),
        fits(1.0),
    );
    let mut out = Vec::new();
    let mut add = |ok: bool, names: &[&'static str]| {
        if ok {
            for c in names {
                if !out.contains(c) {
                    out.push(*c);
                }
            }
        }
    };
    match (first.root >= 0, reduction) {
        (true, true) => add(one, &["reduce"]),
        (true, false) => {
            add(whole && one, &["broadcast"]);
            add(split && share, &["gather", "scatter"]);
        }
        (false, true) => {
            add(whole && all, &["all-reduce"]);
            add(split && share, &["reduce-scatter"]);
            add(whole && one, &["send-recv"]);
        }
        (false, false) => {
            add(split && share, &["all-gather", "all-to-all"]);
            add(whole && one, &["send-recv"]);
        }
    }
    out
}

impl LogRun {
    /// The run's collective (collbench's name) and, when it was guessed,
    /// why. `name`: the log's file name, a hint.
    pub fn collective(&self, name: &str) -> Result<(String, Option<String>), LogError> {
        if let Some(b) = &self.binary {
            return Ok((collective_of_binary(b), None));
        }
        let hint = collective_of_name(name);
        let shape = shape_candidates(self, self.world_size() as u64);
        if let Some(h) = hint.filter(|h| shape.is_empty() || shape.contains(h)) {
            return Ok((h.to_string(), None));
        }
        match shape.as_slice() {
            [one] => Ok((one.to_string(), None)),
            [first, ..] => Ok((
                first.to_string(),
                Some(format!(
                    "collective guessed: the log does not name it and its rows fit {}",
                    shape.join(" or ")
                )),
            )),
            [] => Err(LogError::Whole(format!(
                "cannot tell which collective the run at line {} measured (no `# Collective test starting` line, and neither its rows nor the file name say)",
                self.lines.start + 1
            ))),
        }
    }

    /// The run as collbench results: one row per size and placement (out of
    /// place first), engine [`ENGINE`], algo [`ALGO`]. `source`: the log's
    /// path as shown; `index`, `of`: which run of the file this is.
    pub fn to_results(&self, source: &str, index: usize, of: usize) -> Result<Results, LogError> {
        let name = source.rsplit(['/', '\\']).next().unwrap_or(source);
        // A run that failed before its first row has no row to name.
        let (collective, guessed) = match (self.rows.is_empty(), self.collective(name)) {
            (true, Err(_)) => (String::new(), None),
            (_, known) => known?,
        };
        let mut rows = Vec::with_capacity(self.rows.len() * 2);
        for r in &self.rows {
            for (placement, c) in [("out", &r.out), ("in", &r.inplace)] {
                rows.push(Row {
                    collective: collective.clone(),
                    engine: ENGINE.into(),
                    algo: ALGO.into(),
                    dtype: dtype_name(&r.dtype),
                    // sendrecv_perf prints an unused `sum`: send-recv reduces nothing.
                    op: if r.op.is_empty() || collective == "send-recv" {
                        "none".into()
                    } else {
                        // nccl-tests' `mulsum` is collbench's premulsum.
                        match r.op.as_str() {
                            "mulsum" => "premulsum".into(),
                            op => op.to_string(),
                        }
                    },
                    root: r.root,
                    bytes: r.bytes,
                    count: r.count,
                    placement: placement.into(),
                    time_us: c.time_us,
                    algbw_gbps: c.algbw_gbps,
                    busbw_gbps: c.busbw_gbps,
                    wrong: c.wrong.unwrap_or(-1),
                    nan: -1,
                    stats: Stats {
                        p50_us: c.time_us,
                        p99_us: c.time_us,
                        min_us: c.time_us,
                        max_us: c.time_us,
                        outliers: 0,
                    },
                    per_rank_us: Vec::new(),
                    first_error: None,
                    last_arrival: None,
                    scalar: None,
                    predicted_us: None,
                    auto_pick: None,
                    split: None,
                    members: Vec::new(),
                    group_member: None,
                });
            }
        }
        let mut hosts: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !hosts.contains(&r.host.as_str()) {
                hosts.push(&r.host);
            }
        }
        let mut notes = vec![format!(
            "read from the nccl-tests log {source} (run {} of {of}, line {})",
            index + 1,
            self.lines.start + 1
        )];
        if let Some(h) = &self.header {
            notes.push(format!("nccl-tests header: {}", h.line));
        }
        notes.extend(guessed);
        notes.extend(self.failure.iter().map(|f| format!("the test failed: {f}")));
        notes.extend(
            self.stopped
                .iter()
                .map(|s| format!("the run did not finish: {s}")),
        );
        let header = self.header.as_ref();
        let agg = header
            .and_then(|h| h.agg_iters)
            .filter(|&m| (1..=1 << 20).contains(&m))
            .unwrap_or(1);
        let meta = Meta {
            version: self
                .version
                .as_ref()
                .map_or_else(|| "nccl-tests".into(), |v| format!("nccl-tests {v}")),
            command: self
                .binary
                .clone()
                .unwrap_or_else(|| super::nccl::perf_binary(&collective)),
            host: hosts.join(","),
            started_at: String::new(),
            world_size: self.world_size(),
            device: "cuda".into(),
            devices: self
                .ranks
                .iter()
                .map(|r| {
                    format!(
                        "{} [{}] (rank {}, pid {} on {}, device {})",
                        r.name, r.bus, r.rank, r.pid, r.host, r.device
                    )
                })
                .collect(),
            // Every timed operation, as a sweep's meta counts them.
            iters: header
                .and_then(|h| h.iters)
                .unwrap_or(0)
                .saturating_mul(agg) as usize,
            warmup: header.and_then(|h| h.warmup).unwrap_or(0) as usize,
            seed: 0,
            timing: "wall".into(),
            notes,
            nccl: self.nccl.clone(),
            pid: self.ranks.first().map_or(0, |r| r.pid as u32),
            log_avg_busbw: self.avg_text.clone(),
            // A footer that failed the test; not one that says the run
            // stopped (that is `partial`).
            log_out_of_bounds: self
                .out_of_bounds
                .filter(|(_, ok)| !ok && self.stopped.is_none())
                .map(|(n, _)| n),
            // Its own header line, printed again as it was.
            nccl_tests_header: header.map(|h| format!("# {}", h.line)),
            nccl_tests_min_bw: None,
            sizes: Vec::new(),
            nccl_tests_devices: self.ranks.iter().map(|r| r.line.clone()).collect(),
            nccl_tests_wide: self.wide,
            agg_iters: agg as usize,
            graph: header.and_then(|h| h.graph).is_some_and(|g| g > 0),
            // Every version prints its footer after the last row; a
            // collbench text of a run that stopped says how.
            partial: (!self.finished()).then(|| {
                self.stopped
                    .as_deref()
                    .and_then(stopped_partial)
                    .unwrap_or(super::Partial {
                        reason: super::StopReason::Truncated,
                        missing_rows: 0,
                    })
            }),
            gpus: self
                .ranks
                .iter()
                .map(|r| super::Gpu {
                    name: r.name.clone(),
                    bus_id: r.bus.clone(),
                })
                .collect(),
            // Its device lines, kept as printed, show each rank's process.
            processes: Vec::new(),
        };
        Ok(Results::new(meta, rows))
    }
}

/// An nccl-tests log's text as collbench results, one per run that has
/// rows or that did not finish (a run that failed before its first row,
/// an NCCL init failure, is a run without rows whose meta says it did not
/// finish: never left out). `source`: the path as shown (its file name
/// hints the collective).
pub fn read_log(text: &str, source: &str) -> Result<Vec<Results>, LogError> {
    // A log that ends mid-line (a job killed as it printed, a live log
    // copied) ends in a torn row, whose numbers are not what nccl-tests
    // printed: left out, and its run, which has no footer, is unfinished.
    let torn = !text.ends_with('\n')
        && text
            .lines()
            .next_back()
            .is_some_and(|l| matches!(classify(untagged(l), 0), Line::Row(_) | Line::BadRow(_)));
    let text = if torn {
        &text[..text.rfind('\n').map_or(0, |i| i + 1)]
    } else {
        text
    };
    let runs: Vec<LogRun> = parse_log(text)
        .into_iter()
        .filter(|r| {
            !r.rows.is_empty()
                || !r.bad_rows.is_empty()
                || (!r.finished() && (r.header.is_some() || r.binary.is_some()))
        })
        .collect();
    // A row left out would be a size missing from a report, or a check
    // that never saw it: refused, naming the line.
    if let Some(&line) = runs.iter().flat_map(|r| &r.bad_rows).next() {
        return Err(LogError::At {
            line,
            what: "a data row that does not read (a size, count and type, then times, bandwidths and #wrong: each time and bandwidth a number from 0 to 1e12)".into(),
        });
    }
    if runs.iter().all(|r| r.rows.is_empty()) {
        let failure = runs.iter().find_map(|r| r.failure.as_deref());
        return Err(LogError::Whole(match failure {
            Some(f) => format!("an nccl-tests log without data rows; it failed: {f}"),
            None => "an nccl-tests log without data rows".into(),
        }));
    }
    let of = runs.len();
    let mut all: Vec<Results> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| r.to_results(source, i, of))
        .collect::<Result<_, _>>()?;
    if let (true, Some(last)) = (torn, all.last_mut()) {
        last.meta.notes.push(
            "the log's last line is a row cut short (no newline at its end): left out".into(),
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A genuine log's text, or None (and a message) when the fixtures are
    /// not beside the repository, unless `COLLBENCH_REQUIRE_FIXTURES=1`.
    fn fixture(name: &str) -> Option<String> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/nccl-tests");
        match std::fs::read_to_string(dir.join(name)) {
            Ok(t) => Some(t),
            Err(e) => {
                let required = std::env::var("COLLBENCH_REQUIRE_FIXTURES").is_ok_and(|v| v == "1");
                assert!(
                    !required,
                    "fixture {name} missing: {e} (COLLBENCH_REQUIRE_FIXTURES=1)"
                );
                eprintln!("SKIPPED: fixture {name} not found in {}", dir.display());
                None
            }
        }
    }

    /// A log's agg iters and graph reach its meta; `iters` counts every
    /// timed operation, as a sweep's meta does.
    #[test]
    fn agg_iters_and_graph_reach_the_meta() {
        let rows = [(1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2)];
        let t = synthetic(&rows, 2).replace(
            "agg iters: 1 validation: 1 graph: 0",
            "agg iters: 4 validation: 1 graph: 1",
        );
        let m = &read_log(&t, "all_reduce.log").unwrap()[0].meta;
        assert_eq!((m.iters, m.agg_iters, m.graph), (80, 4, true));
        let m = &read_log(&synthetic(&rows, 2), "all_reduce.log").unwrap()[0].meta;
        assert_eq!((m.iters, m.agg_iters, m.graph), (20, 1, false));
        let absurd = synthetic(&rows, 2).replace("agg iters: 1", "agg iters: 99999999999");
        assert_eq!(
            read_log(&absurd, "all_reduce.log").unwrap()[0]
                .meta
                .agg_iters,
            1
        );
    }

    type SynthRow<'a> = (u64, u64, &'a str, &'a str, i64, f64, f64, f64);

    /// One run in nccl-tests' 13-column layout, `rows` given as
    /// (size, count, type, redop, root, time, algbw, busbw).
    fn synthetic(rows: &[SynthRow], ranks: usize) -> String {
        let mut t = String::from(
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n",
        );
        for r in 0..ranks {
            t += &format!(
                "#  Rank {r:2} Group  0 Pid {:6} on node{r} device {r:2} [0x{r:02}] GPU X\n",
                100 + r
            );
        }
        t += "#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
        let mut sum = 0.0;
        for (b, c, ty, op, root, time, alg, bus) in rows {
            t += &format!("{b:12}  {c:12}  {ty:>8}  {op:>6}  {root:6}  {time:7.2}  {alg:6.2}  {bus:6.2}       0  {time:7.2}  {alg:6.2}  {bus:6.2}       0\n");
            sum += 2.0 * bus;
        }
        let avg = sum / (2 * rows.len().max(1)) as f64;
        t += &format!(
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {} \n#\n",
            crate::report::nccl::fmt_g(avg)
        );
        t
    }

    fn lines_of(text: &str, r: &LogRun) -> String {
        let all: Vec<&str> = text.lines().collect();
        all[r.lines.clone()].join("\n")
    }

    #[test]
    fn genuine_2_17_log_holds_five_runs_with_their_headers() {
        let Some(t) = fixture("genuine_2_17_N1_G4.log") else {
            return;
        };
        let runs = parse_log(&t);
        let binaries: Vec<&str> = runs.iter().filter_map(|r| r.binary.as_deref()).collect();
        assert_eq!(
            binaries,
            [
                "all_reduce_perf",
                "all_gather_perf",
                "reduce_scatter_perf",
                "alltoall_perf",
                "sendrecv_perf"
            ]
        );
        let avgs: Vec<f64> = runs.iter().filter_map(|r| r.avg_busbw).collect();
        assert_eq!(avgs, [343.554, 313.292, 309.526, 319.526, 294.601]);
        let first = &runs[0];
        assert_eq!(first.version.as_deref(), Some("2.17.8"));
        assert_eq!(
            first.nccl.as_deref(),
            Some("nccl-headers=22902 nccl-library=22902")
        );
        let h = first.header.clone().unwrap();
        assert_eq!(
            (
                h.nthread,
                h.ngpus,
                h.min_bytes,
                h.max_bytes,
                h.step.as_deref()
            ),
            (
                Some(1),
                Some(1),
                Some(33554432),
                Some(68719476736),
                Some("2(factor)")
            )
        );
        assert_eq!(
            (h.warmup, h.iters, h.agg_iters, h.validation, h.graph),
            (Some(5), Some(20), Some(1), Some(1), Some(0))
        );
        assert_eq!(first.ranks.len(), 4);
        assert_eq!(
            first.ranks[1],
            RankLine {
                line: "#  Rank  1 Group  0 Pid 4175037 on cnode3-002 device  1 [0000:43:00] NVIDIA H100 80GB HBM3".into(),
                rank: 1,
                group: Some(0),
                pid: 4175037,
                host: "cnode3-002".into(),
                device: 1,
                bus: "0000:43:00".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
            }
        );
        assert_eq!(first.out_of_bounds, Some((0, true)));
        for r in &runs {
            assert_eq!((r.rows.len(), r.world_size(), r.concluded), (10, 4, true));
            assert!(r.rows.iter().all(|x| x.fields == 13));
            let v = validate_one_run(&lines_of(&t, r));
            assert!(v.is_ok(), "{:?}: {v:?}", r.binary);
        }
        let row = &first.rows[0];
        assert_eq!(
            (
                row.bytes,
                row.count,
                row.dtype.as_str(),
                row.op.as_str(),
                row.root
            ),
            (33554432, 4194304, "double", "sum", -1)
        );
        assert_eq!(
            row.out,
            Cell {
                time_us: 171.88,
                algbw_gbps: 195.22,
                busbw_gbps: 292.83,
                wrong: Some(0),
                busbw_decimals: 2
            }
        );
        let last = runs[4].rows.last().unwrap();
        assert_eq!(
            (last.bytes, last.inplace.time_us, last.inplace.busbw_gbps),
            (17179869184, 46760.0, 367.40)
        );
        assert_eq!(
            (last.out.wrong, last.inplace.wrong),
            (Some(0), None),
            "N/A is unchecked"
        );
        let e = validate_one_run(&t).unwrap_err().to_string();
        assert!(
            e.starts_with("line 33: a second `# Collective test starting`"),
            "{e}"
        );
    }

    #[test]
    fn genuine_runs_become_results_with_engine_and_meta() {
        let Some(t) = fixture("genuine_2_17_N1_G4.log") else {
            return;
        };
        let all = read_log(&t, "logs/genuine_2_17_N1_G4.log").unwrap();
        let colls: Vec<&str> = all.iter().map(|r| r.rows[0].collective.as_str()).collect();
        assert_eq!(
            colls,
            [
                "all-reduce",
                "all-gather",
                "reduce-scatter",
                "all-to-all",
                "send-recv"
            ]
        );
        let r = &all[0];
        assert_eq!(r.rows.len(), 20);
        assert!(r.rows.iter().all(|x| x.engine == ENGINE && x.algo == ALGO));
        let (out, inp) = (&r.rows[0], &r.rows[1]);
        assert_eq!(
            (out.placement.as_str(), inp.placement.as_str()),
            ("out", "in")
        );
        assert_eq!(
            (out.dtype.as_str(), out.op.as_str(), out.bytes, out.count),
            ("double", "sum", 33554432, 4194304)
        );
        assert_eq!(
            (out.time_us, out.busbw_gbps, out.wrong, out.nan),
            (171.88, 292.83, 0, -1)
        );
        assert_eq!(
            (out.stats.p50_us, out.stats.min_us, out.stats.max_us),
            (171.88, 171.88, 171.88)
        );
        assert_eq!(all[4].rows[1].wrong, -1, "N/A in place");
        let m = &r.meta;
        assert_eq!(
            (m.version.as_str(), m.command.as_str(), m.host.as_str()),
            ("nccl-tests 2.17.8", "all_reduce_perf", "cnode3-002")
        );
        assert_eq!(
            (m.world_size, m.device.as_str(), m.iters, m.warmup),
            (4, "cuda", 20, 5)
        );
        assert_eq!(
            m.devices[0],
            "NVIDIA H100 80GB HBM3 [0000:1b:00] (rank 0, pid 4175036 on cnode3-002, device 0)"
        );
        assert_eq!(
            m.notes[0],
            "read from the nccl-tests log logs/genuine_2_17_N1_G4.log (run 1 of 5, line 1)"
        );
        assert!(
            m.notes[1].starts_with("nccl-tests header: nThread 1 nGpus 1 minBytes 33554432"),
            "{:?}",
            m.notes
        );
        assert_eq!(
            all[1].meta.notes[0],
            "read from the nccl-tests log logs/genuine_2_17_N1_G4.log (run 2 of 5, line 32)"
        );
    }

    #[test]
    fn pkb_log_without_a_test_name_is_an_all_reduce() {
        let Some(t) = fixture("pkb_nccl_output.txt") else {
            return;
        };
        let run = validate_one_run(&t).unwrap();
        assert_eq!(
            (run.rows.len(), run.binary.clone(), run.version.clone()),
            (11, None, None)
        );
        assert_eq!(run.avg_busbw, Some(0.565546));
        let h = run.header.clone().unwrap();
        assert_eq!(
            (h.iters, h.validation, h.graph),
            (Some(1), Some(0), Some(0))
        );
        assert_eq!(
            (
                run.ranks.len(),
                run.ranks[0].group,
                run.ranks[1].host.as_str()
            ),
            (2, None, "pkb-2b6a393d-3")
        );
        let r = read_log(&t, "pkb_nccl_output.txt").unwrap().remove(0);
        assert_eq!(r.rows.len(), 22);
        assert_eq!(
            (r.rows[0].collective.as_str(), r.rows[0].wrong),
            ("all-reduce", -1)
        );
        assert_eq!(r.meta.host, "pkb-2b6a393d-2,pkb-2b6a393d-3");
        assert_eq!(
            (r.meta.world_size, r.meta.command.as_str()),
            (2, "all_reduce_perf")
        );
        assert!(
            r.meta
                .notes
                .iter()
                .any(|n| n.contains("collective guessed") && n.contains("all-reduce or send-recv")),
            "two ranks: all-reduce's factor is send-recv's: {:?}",
            r.meta.notes
        );
        let last = r.rows.last().unwrap();
        assert_eq!(
            (
                last.bytes,
                last.count,
                last.placement.as_str(),
                last.time_us
            ),
            (1073741824, 268435456, "in", 1763386.0)
        );
    }

    #[test]
    fn older_12_column_allreduce_reads_but_is_not_a_strict_run() {
        let Some(t) = fixture("sb_nccl_allreduce.log") else {
            return;
        };
        let runs = parse_log(&t);
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.rows.len(), 34, "the NCCL INFO line is skipped");
        assert!(run
            .rows
            .iter()
            .all(|r| r.fields == 12 && r.root == -1 && r.op == "sum"));
        assert_eq!((run.rows[0].bytes, run.rows[0].count), (0, 0));
        let last = run.rows.last().unwrap();
        assert_eq!(
            (last.bytes, last.out.busbw_gbps, last.inplace.busbw_gbps),
            (8589934592, 235.26, 235.03)
        );
        let h = run.header.clone().unwrap();
        assert_eq!(
            (h.ngpus, h.agg_iters, h.graph, h.validation),
            (Some(8), None, None, Some(0))
        );
        assert_eq!(run.world_size(), 8);
        assert!((run.mean_busbw() - 68.4048).abs() < 0.005);
        assert_eq!(
            run.collective("whatever.log").unwrap(),
            ("all-reduce".into(), None),
            "by shape alone"
        );
        let e = validate_one_run(&t).unwrap_err().to_string();
        assert!(
            e.starts_with("line 16: neither a `#` line nor a 13-field data row: hostname:3442"),
            "{e}"
        );
        let e = validate_one_run(&t.replace(
            "hostname:3442:3442 [0] NCCL INFO Launch mode Parallel\n",
            "",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("12 fields, not 13"), "{e}");
    }

    #[test]
    fn older_11_column_alltoall_takes_its_name_from_the_file() {
        let Some(t) = fixture("sb_nccl_alltoall.log") else {
            return;
        };
        let runs = parse_log(&t);
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.rows.len(), 34);
        assert!(run
            .rows
            .iter()
            .all(|r| r.fields == 11 && r.root == -1 && r.op.is_empty()));
        assert_eq!(run.rows.iter().filter(|r| r.bytes == 0).count(), 5);
        assert_eq!(
            (
                run.rows[5].bytes,
                run.rows[5].count,
                run.rows[5].out.time_us
            ),
            (32, 1, 89.00)
        );
        assert!((run.mean_busbw() - 58.6481).abs() < 0.005);
        let r = read_log(&t, "/x/sb_nccl_alltoall.log").unwrap().remove(0);
        assert_eq!(
            (
                r.rows[0].collective.as_str(),
                r.rows[0].op.as_str(),
                r.rows[0].root
            ),
            ("all-to-all", "none", -1)
        );
        assert_eq!(r.rows.len(), 68);
        let (c, why) = run.collective("nccl.log").unwrap();
        assert_eq!(c, "all-gather");
        assert!(why.unwrap().contains("all-gather or all-to-all"));
        assert!(validate_one_run(&t)
            .unwrap_err()
            .to_string()
            .contains("11 fields, not 13"));
    }

    #[test]
    fn the_validator_names_what_is_wrong() {
        let rows = [
            (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
            (64, 16, "float", "sum", -1, 12.5, 0.01, 0.01),
        ];
        let good = synthetic(&rows, 2);
        let run = validate_one_run(&good).unwrap();
        assert_eq!(run.rows.len(), 2);
        let footer = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.005 \n";
        let cases: Vec<(String, &str)> = vec![
            (good.replace("0.005 ", "0.02 "), "is not the mean busbw over 2 rows"),
            (good.replace(footer, ""), "no `# Out of bounds values` line"),
            (good.replace("# Avg bus bandwidth    : 0.005 \n", ""), "no `# Avg bus bandwidth` line"),
            (good.replace("0 OK", "2 FAILED"), "out of bounds says 2"),
            (format!("{good}{good}"), "a second `# nThread` header"),
            (good.replace("#\n#       size", "#\nsome text\n#       size"), "neither a `#` line"),
            (format!("{good}          8             2     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0\n"), "a data row after the footer"),
            (good.replace("float     sum      -1", "float     sum"), "12 fields, not 13"),
            (good.lines().filter(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n"), "no data rows"),
        ];
        for (text, want) in cases {
            let e = validate_one_run(&text).unwrap_err().to_string();
            assert!(e.contains(want), "want '{want}' in: {e}\n{text}");
        }
    }

    #[test]
    fn a_data_row_that_does_not_read_is_an_error_naming_its_line() {
        let rows = [
            (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
            (64, 16, "float", "sum", -1, 12.5, 0.01, 0.01),
        ];
        let good = synthetic(&rows, 2);
        assert_eq!(read_log(&good, "x.log").unwrap()[0].rows.len(), 4);
        let line = good
            .lines()
            .position(|l| l.contains("12.50"))
            .expect("the second row")
            + 1;
        for bad in ["x", "-5.00", "nan", "inf"] {
            // The out-of-place time of the second row.
            let text = good.replacen("12.50", bad, 1);
            let e = read_log(&text, "x.log").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("line {line}: a data row that does not read")),
                "{bad}: {e}"
            );
        }
        // Lines that are no data row (a launcher's output) are still skipped.
        let chatty = good.replace(
            "#\n#       size",
            "#\nnode0: NCCL INFO Bootstrap\n#       size",
        );
        assert_eq!(read_log(&chatty, "x.log").unwrap()[0].rows.len(), 4);
    }

    #[test]
    fn shape_tells_the_collective_apart() {
        // (rows, ranks, expected collective); 4 ranks of float.
        let cases = [
            ((4096, 1024, "sum", -1, 0.04, 0.06), "all-reduce"),
            ((4096, 256, "sum", -1, 0.04, 0.03), "reduce-scatter"),
            ((4096, 1024, "sum", 0, 0.04, 0.04), "reduce"),
            ((4096, 1024, "none", 0, 0.04, 0.04), "broadcast"),
            ((4096, 1024, "sum", -1, 0.04, 0.04), "send-recv"),
        ];
        for ((b, c, op, root, alg, bus), want) in cases {
            let t = synthetic(&[(b, c, "float", op, root, 100.0, alg, bus)], 4);
            let run = parse_log(&t).remove(0);
            assert_eq!(
                run.collective("x.log").unwrap(),
                (want.to_string(), None),
                "{t}"
            );
        }
        let t = synthetic(&[(4096, 256, "float", "none", -1, 100.0, 0.04, 0.03)], 4);
        let run = parse_log(&t).remove(0);
        assert_eq!(run.collective("run_allgather.txt").unwrap().0, "all-gather");
        assert_eq!(
            run.collective("run_all_to_all.txt").unwrap().0,
            "all-to-all"
        );
        let t = synthetic(&[(4096, 256, "float", "none", 2, 100.0, 0.04, 0.03)], 4);
        let run = parse_log(&t).remove(0);
        assert_eq!(run.collective("scatter_perf.log").unwrap().0, "scatter");
        assert!(run
            .collective("x.log")
            .unwrap()
            .1
            .unwrap()
            .contains("gather or scatter"));
    }

    #[test]
    fn collbench_s_account_of_a_stopped_run_reads_back() {
        use crate::report::StopReason;
        let p = |t| stopped_partial(t).map(|p| (p.reason, p.missing_rows));
        assert_eq!(
            p("run interrupted: hang, 2 row(s) missing"),
            Some((StopReason::Hang, 2))
        );
        assert_eq!(
            p("run interrupted: signal, 0 row(s) missing"),
            Some((StopReason::Signal, 0))
        );
        assert_eq!(
            p("run failed: an error stopped it, 15 row(s) missing"),
            Some((StopReason::Error, 15))
        );
        for other in [
            "run unfinished: its JSONL has no end line",
            "run interrupted: lunch, 2 row(s) missing",
            "run interrupted: hang, many row(s) missing",
            "something else",
        ] {
            assert_eq!(p(other), None, "{other}");
        }
    }

    /// A run cut before its footer (killed, or the test failed: nccl-tests
    /// prints no footer then) is unfinished, with the failure in its
    /// notes; a finished one is not.
    #[test]
    fn a_run_without_its_footer_is_unfinished() {
        let rows: Vec<SynthRow> = vec![
            (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
            (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
        ];
        let whole = synthetic(&rows, 2);
        let r = read_log(&whole, "all_reduce.log").unwrap();
        assert_eq!(r[0].meta.partial, None);
        let cut = whole.split("# Out of bounds").next().unwrap().to_string();
        let failed =
            cut.clone() + "node1: Test NCCL failure common.cu:1005 'unhandled system error'\n";
        for (text, failure) in [(cut, false), (failed, true)] {
            let r = read_log(&text, "all_reduce.log").unwrap();
            let p = r[0].meta.partial.as_ref().expect("unfinished");
            assert_eq!(p.reason, crate::report::StopReason::Truncated);
            assert!(
                p.to_string().contains("ends before the run's footer"),
                "{p}"
            );
            assert_eq!(r[0].rows.len(), 4);
            let said =
                r[0].meta.notes.iter().any(|n| {
                    n.starts_with("the test failed: node1: Test NCCL failure common.cu:1005")
                });
            assert_eq!(said, failure, "{:?}", r[0].meta.notes);
        }
    }

    /// A data row with other output run into its line, or cut short, is a
    /// row that does not read (refused, naming the line), not one left out.
    #[test]
    fn rows_with_too_many_or_too_few_fields_are_refused() {
        let rows: Vec<SynthRow> = vec![
            (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
            (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
        ];
        let whole = synthetic(&rows, 2);
        let at = whole
            .lines()
            .position(|l| l.trim_start().starts_with("16 "))
            .unwrap();
        for edit in [
            |l: &str| format!("{l} NCCL INFO comm 0x1 rank 0 nranks 2"),
            |l: &str| l.split_whitespace().take(8).collect::<Vec<_>>().join(" "),
        ] {
            let text: Vec<String> = whole
                .lines()
                .enumerate()
                .map(|(i, l)| if i == at { edit(l) } else { l.to_string() })
                .collect();
            let e = read_log(&text.join("\n"), "all_reduce.log").unwrap_err();
            assert!(
                matches!(e, LogError::At { line, .. } if line == at + 1),
                "{e}"
            );
        }
    }

    /// Lines tagged by the launcher (`mpirun --tag-output`, `srun
    /// --label`) read as the lines themselves.
    #[test]
    fn launcher_tags_are_read_past() {
        let rows: Vec<SynthRow> = vec![
            (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
            (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
        ];
        let plain = synthetic(&rows, 2);
        let want = read_log(&plain, "all_reduce.log").unwrap();
        for tag in ["[1,0]<stdout>:", "0: "] {
            let tagged: String = plain.lines().map(|l| format!("{tag}{l}\n")).collect();
            assert!(looks_like_log(&tagged), "{tag}");
            let got = read_log(&tagged, "all_reduce.log").unwrap();
            assert_eq!(got[0].rows, want[0].rows, "{tag}");
            assert_eq!(got[0].meta.world_size, 2, "{tag}");
        }
        assert_eq!(untagged("[1,x]<stdout>:# a"), "[1,x]<stdout>:# a");
    }

    #[test]
    fn names_map_to_collbench_names() {
        assert_eq!(collective_of_binary("alltoall_perf"), "all-to-all");
        assert_eq!(
            collective_of_binary("./build/reduce_scatter_perf"),
            "reduce-scatter"
        );
        assert_eq!(collective_of_binary("sendrecv_perf"), "send-recv");
        assert_eq!(
            collective_of_name("nccl_reduce_scatter_8.log"),
            Some("reduce-scatter")
        );
        assert_eq!(collective_of_name("output.txt"), None);
        assert_eq!(dtype_name("int"), "int32");
        assert_eq!(dtype_name("bfloat16"), "bfloat16");
        assert_eq!(half_unit("343.554"), 0.0005);
        assert_eq!(half_unit("1.5e+06"), 50000.0);
        assert!(!looks_like_log("{\"schema\": 1}") && !looks_like_log("hello"));
        assert!(read_log("# Avg bus bandwidth : 3\n", "x").is_err());
    }
}
