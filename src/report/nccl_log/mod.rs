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

mod convert;
#[cfg(test)]
mod tests;
mod validate;

pub use convert::{collective_of_binary, collective_of_name, dtype_name, read_log};
pub use validate::validate_one_run;

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
            in_case: None,
        });
    }
    let rest = text.strip_prefix("run failed: ")?;
    Some(super::Partial {
        reason: StopReason::Error,
        missing_rows: missing(rest)?,
        in_case: None,
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

/// A run's column header (`# size count type redop root time algbw busbw
/// #wrong ...`): what its data rows' fields are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// The fields before the first time, as named: `size count type redop
    /// root`, or an older layout's (`size count type root`: broadcast
    /// without a redop).
    pub keys: Vec<String>,
    /// The newer, wider header (`busbw  #wrong`).
    pub wide: bool,
    /// The check column is a count of wrong values (`#wrong`, printed with
    /// `%g` by nccl-tests 2.17: `1.23457e+06`), not the older float `error`.
    pub counts_wrong: bool,
    /// Times are the host's CPU times (`cputime`, nccl-tests -C), not the
    /// GPU's.
    pub cputime: bool,
    /// Each row ends in the time it was printed (`timestamp`, nccl-tests
    /// -S: `2026-01-28 14:50:17`).
    pub timestamps: bool,
}

impl Columns {
    /// The header's fields after `# ` (`size count type ...`).
    fn parse(body: &str) -> Columns {
        let t: Vec<&str> = body.split_whitespace().collect();
        let time = |w: &&str| *w == "time" || *w == "cputime";
        Columns {
            keys: t
                .iter()
                .take_while(|w| !time(w))
                .map(|w| w.to_string())
                .collect(),
            wide: body.contains("busbw  #wrong"),
            counts_wrong: t.contains(&"#wrong"),
            cputime: t.contains(&"cputime"),
            timestamps: t.last() == Some(&"timestamp"),
        }
    }

    /// Its 12-field rows carry a root and no redop (older broadcast_perf).
    fn root_without_redop(&self) -> bool {
        self.keys.len() == 4 && self.keys[3] == "root"
    }
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
    /// 1-based lines laid out as data rows, or as the out-of-bounds
    /// footer, whose values do not read, and what each should be.
    pub bad_lines: Vec<(usize, &'static str)>,
    /// Its column header is newer nccl-tests' wider one (`busbw  #wrong`).
    pub wide: bool,
    /// Its column header (the default where it has none).
    pub columns: Columns,
    /// What the average's own check said (`# Avg bus bandwidth : X OK`,
    /// `FAILED` below 0.9 x NCCL_TESTS_MIN_BW), where it printed one.
    pub avg_ok: Option<bool>,
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

    /// The number of ranks: the distinct ranks of the device lines, else
    /// nThread x nGpus.
    pub fn world_size(&self) -> usize {
        if !self.ranks.is_empty() {
            let distinct: std::collections::BTreeSet<u64> =
                self.ranks.iter().map(|r| r.rank).collect();
            return distinct.len();
        }
        self.header
            .as_ref()
            .and_then(|h| Some(h.nthread?.saturating_mul(h.ngpus?)))
            .map_or(1, |n| usize::try_from(n.max(1)).unwrap_or(usize::MAX))
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

/// `counts_wrong`: the column is `#wrong`, a count even where printed
/// as a float.
fn parse_cell(f: &[&str], counts_wrong: bool) -> Option<Cell> {
    let [time, algbw, busbw, wrong] = f else {
        return None;
    };
    let wrong = match *wrong {
        "N/A" => None,
        w => match w.parse::<i64>() {
            Ok(n) if n >= 0 => Some(n),
            // A count of wrong values below zero is no count.
            Ok(_) => return None,
            Err(_) => {
                let x = w.parse::<f64>().ok()?;
                if counts_wrong {
                    // nccl-tests 2.17 prints #wrong with `%g`: a million
                    // and up reads `1.23457e+06`, a count all the same.
                    if !(0.0..=9.0e18).contains(&x) {
                        return None;
                    }
                    Some(x.round() as i64)
                } else {
                    // The older float `error` column is not a count of
                    // wrong values.
                    None
                }
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

/// Whether `date` and `clock` are a timestamp as nccl-tests -S prints it
/// (`2026-01-28 14:50:17`).
fn is_stamp(date: &str, clock: &str) -> bool {
    let shaped = |s: &str, sep: u8, parts: usize| {
        s.split(sep as char).count() == parts
            && s.bytes().all(|b| b.is_ascii_digit() || b == sep)
            && !s.split(sep as char).any(str::is_empty)
    };
    shaped(date, b'-', 3) && shaped(clock, b':', 3)
}

/// A data row in any of the three layouts, or None; `cols`: the run's
/// column header, which tells a 12-field row's fourth field (a redop, or
/// an older broadcast's root) and whether rows end in a timestamp.
fn parse_row(line: &str, at: usize, cols: &Columns) -> Option<LogRow> {
    let mut f: Vec<&str> = line.split_whitespace().collect();
    if let [.., date, clock] = f[..] {
        if cols.timestamps && is_stamp(date, clock) {
            f.truncate(f.len() - 2);
        }
    }
    let (op, root, cells) = match f.len() {
        13 => (f[3], f[4].parse::<i64>().ok()?, &f[5..]),
        12 if cols.root_without_redop() => ("", f[3].parse::<i64>().ok()?, &f[4..]),
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
        out: parse_cell(&cells[..4], cols.counts_wrong)?,
        inplace: parse_cell(&cells[4..], cols.counts_wrong)?,
    })
}

/// What a data row that does not read should be.
pub(super) const BAD_ROW: &str = "a data row that does not read (a size, count and type, then times, bandwidths and #wrong: each time and bandwidth a number from 0 to 1e12, #wrong a count from 0 or N/A)";

/// What an out-of-bounds footer that does not read should be.
pub(super) const BAD_FOOTER: &str =
    "an `# Out of bounds values` line that does not read (0 OK, or a count from 0 then FAILED)";

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
    /// The average as a number, as printed, and its own check (`OK`,
    /// `FAILED`) where printed.
    Avg(f64, String, Option<bool>),
    /// The column header (`# size count ...`).
    Columns(Columns),
    /// Any other `#` line, or an empty one.
    Comment,
    Row(LogRow),
    /// A line laid out as a data row (size, count, type and 11 to 13
    /// fields) whose values do not read.
    BadRow(usize),
    /// An `# Out of bounds values` line without a count and OK or FAILED:
    /// a footer that may say the test failed is never passed over.
    BadFooter(usize),
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

/// Whether `line` ends in a data row run into other output (`... NCCL
/// INFO ...   33554432  4194304  double ...`): the last 11 to 15 fields
/// read as a row, the first of them from the digits ending its field.
fn ends_in_row(line: &str, at: usize, cols: &Columns) -> bool {
    let f: Vec<&str> = line.split_whitespace().collect();
    (11..=15).filter(|&k| f.len() > k).any(|k| {
        let first = f[f.len() - k];
        // Where the digits ending the field start (a size run into text).
        let start = first.len() - first.bytes().rev().take_while(u8::is_ascii_digit).count();
        if start == first.len() {
            return false;
        }
        let row = format!("{} {}", &first[start..], f[f.len() - k + 1..].join(" "));
        parse_row(&row, at, cols).is_some()
    })
}

/// What `line` (1-based `at`) is, in a run whose column header is `cols`.
fn classify(line: &str, at: usize, cols: &Columns) -> Line {
    let t = line.trim();
    let Some(body) = t.strip_prefix('#') else {
        if t.is_empty() {
            return Line::Comment;
        }
        return match parse_row(t, at, cols) {
            Some(r) => Line::Row(r),
            // A row run into other output is a row that does not read,
            // never a line passed over: its size would be missing.
            None if looks_like_row(t) || ends_in_row(t, at, cols) => Line::BadRow(at),
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
        return Line::Columns(Columns::parse(body));
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
            // nccl-tests says OK of none alone: `5 OK` is no footer it wrote.
            if *ok == "FAILED" || (*ok == "OK" && n == 0) {
                return Line::OutOfBounds(n, *ok == "OK", stopped);
            }
        }
        return Line::BadFooter(at);
    }
    if let Some(v) = body.strip_prefix("Avg bus bandwidth") {
        let v: Vec<&str> = v
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .collect();
        // `X`, or `X OK|FAILED` where NCCL_TESTS_MIN_BW set a floor.
        let check = match v.get(1..) {
            Some([]) => Some(None),
            Some(["OK"]) => Some(Some(true)),
            Some(["FAILED"]) => Some(Some(false)),
            _ => None,
        };
        if let (Some(x), Some(check)) = (v.first().and_then(|x| x.parse::<f64>().ok()), check) {
            return Line::Avg(x, v[0].to_string(), check);
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
        let line = classify(l, i + 1, &cur.columns);
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
            Line::Avg(x, s, check) => {
                cur.avg_busbw = Some(x);
                cur.avg_text = Some(s);
                cur.avg_ok = check;
            }
            Line::Row(r) => cur.rows.push(r),
            Line::BadRow(at) => cur.bad_lines.push((at, BAD_ROW)),
            Line::BadFooter(at) => cur.bad_lines.push((at, BAD_FOOTER)),
            Line::Columns(cols) => {
                cur.wide = cols.wide;
                cur.columns = cols;
            }
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
