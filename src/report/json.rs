//! JSON results (`collbench.results/1`), written atomically at the end, and
//! JSONL beside them, appended as rows finish: its first line holds the
//! schema and meta, each further line one row, so an interrupted sweep keeps
//! every finished row.

use super::nccl_log::{self, LogError};
use super::{model::RESULTS_SCHEMA, Meta, Results, Row, Sink};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `a.json` -> `a.jsonl`; anything else gets `.jsonl` appended.
pub fn jsonl_path(json: &Path) -> PathBuf {
    match json.extension() {
        Some(e) if e == "json" => json.with_extension("jsonl"),
        _ => {
            let mut s = json.as_os_str().to_owned();
            s.push(".jsonl");
            PathBuf::from(s)
        }
    }
}

pub use crate::units::{is_special, open_in_place, write_atomic};

/// Why a results file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a collbench results file: {source}", path.display())]
    Parse { path: PathBuf, source: ParseError },
    #[error("{}: schema '{schema}' is not {RESULTS_SCHEMA}{}", path.display(), schema_hint(schema))]
    Schema { path: PathBuf, schema: String },
    #[error("{}: not a readable nccl-tests log: {source}", path.display())]
    Log { path: PathBuf, source: LogError },
    #[error("{}: larger than the {limit}-byte limit for results and logs", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{}: not a valid collbench results file: {why}", path.display())]
    Invalid { path: PathBuf, why: String },
    #[error("{}: has no rows (an empty sweep)", path.display())]
    NoRows { path: PathBuf },
}

/// Why results text (JSON or JSONL) does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("empty file")]
    Empty,
    /// A JSONL line (1-based) that is not what it should be.
    #[error("line {line}: {}", in_line(.source))]
    Line {
        line: usize,
        source: serde_json::Error,
    },
    /// The JSONL's end line, malformed.
    #[error("line {line}: a malformed end line: {}", in_line(.source))]
    EndLine {
        line: usize,
        source: serde_json::Error,
    },
    /// A line after the JSONL's end line.
    #[error("line {line}: data after the end line (line {end}): a JSONL holds one run")]
    AfterEnd { line: usize, end: usize },
}

/// serde_json's error about one JSONL line, without its `at line 1`
/// (the line is named already): `expected value at column 149`.
fn in_line(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line 1 column ") {
        Some(i) => format!("{} at column {}", &text[..i], &text[i + 18..]),
        None => text,
    }
}

/// Reads a results file, checking its schema: the JSON, or the JSONL beside
/// it (what an interrupted sweep leaves: schema and meta on the first line,
/// one row per further line).
pub fn read_results(path: &Path) -> Result<Results, ResultsError> {
    let text = read_text(path)?;
    escaped(path, parse_results(path, &text)?)
}

/// Results read from a file, every text in them (a collective's name, the
/// host, the command, a log's device line) with its hidden characters
/// escaped ([`crate::units::shown`]): a name holding an escape sequence or
/// a newline must neither drive the terminal nor forge a line of a table,
/// nor break an SVG plot.
fn escaped(path: &Path, mut r: Results) -> Result<Results, ResultsError> {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => crate::units::show_field(s),
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            serde_json::Value::Object(m) => m.values_mut().for_each(walk),
            _ => {}
        }
    }
    // Never shown unescaped: results that do not survive the trip are
    // refused (none that passed the checks should).
    let invalid = |e: serde_json::Error| ResultsError::Invalid {
        path: path.to_path_buf(),
        why: format!("its text could not be made safe to show: {e}"),
    };
    fn safe<T: serde::Serialize + serde::de::DeserializeOwned>(
        x: &T,
    ) -> Result<T, serde_json::Error> {
        let mut v = serde_json::to_value(x)?;
        walk(&mut v);
        serde_json::from_value(v)
    }
    // A row at a time: beside the results, the JSON tree of one row, not
    // of the whole file (which took about 9 KB a row: gigabytes for a log
    // near the size limit).
    let rows = std::mem::take(&mut r.rows);
    let mut out = safe(&r).map_err(invalid)?;
    out.rows = rows
        .into_iter()
        .map(|row| safe(&row))
        .collect::<Result<_, _>>()
        .map_err(invalid)?;
    Ok(out)
}

/// The most bytes a results file or log may have (a sweep of every
/// collective, dtype and op to 8G is a few MB).
pub const MAX_RESULTS_BYTES: u64 = 256 << 20;

fn read_text(path: &Path) -> Result<String, ResultsError> {
    use std::io::Read;
    let io = |source| ResultsError::Io {
        path: path.to_path_buf(),
        source,
    };
    // `-`: standard input, as for outputs (a pipe, a file or a socket).
    let input: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(crate::units::open_input(path).map_err(io)?)
    };
    let mut bytes = Vec::new();
    // Bounded: a device or a runaway file (`/dev/zero`) stops at the limit.
    input
        .take(MAX_RESULTS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_RESULTS_BYTES {
        return Err(ResultsError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_RESULTS_BYTES,
        });
    }
    if crate::units::without_bom(&bytes).len() < bytes.len() {
        bytes.drain(..3);
    }
    String::from_utf8(bytes).map_err(|_| {
        io(io::Error::new(
            io::ErrorKind::InvalidData,
            "not text (invalid UTF-8)",
        ))
    })
}

/// Reads results of any kind collbench takes: its own JSON or JSONL (one
/// [`Results`]), or an nccl-tests log (one [`Results`] per run in the log,
/// in order; see [`nccl_log`]). A file that is not JSON and looks like
/// nccl-tests output is read as a log.
pub fn read_any(path: &Path) -> Result<Vec<Results>, ResultsError> {
    let text = read_text(path)?;
    let is_json = text.trim_start().starts_with('{');
    // collbench's own CSV holds rows without the run's meta: say so.
    let first = text.lines().next().unwrap_or("");
    if first.starts_with("collective,engine,") || first.starts_with("source,collective,engine,") {
        return Err(ResultsError::Invalid {
            path: path.to_path_buf(),
            why: "collbench's CSV, which holds rows without their run: give the run's JSON (--json) or JSONL".into(),
        });
    }
    if !is_json && nccl_log::looks_like_log(&text) {
        return nccl_log::read_log(&text, &path.display().to_string())
            .map_err(|source| ResultsError::Log {
                path: path.to_path_buf(),
                source,
            })?
            .into_iter()
            .map(|r| escaped(path, r))
            .collect();
    }
    Ok(vec![escaped(path, parse_results(path, &text)?)?])
}

/// What a file of another of collbench's schemas is, and what reads it.
fn schema_hint(schema: &str) -> &'static str {
    if schema.starts_with("collbench.tuning/") {
        " (a tuning table: `--tuning` and `collbench model` read it)"
    } else if schema.starts_with("collbench.fr/") {
        " (a flight-recorder dump: `collbench analyze` reads it)"
    } else {
        ""
    }
}

/// Whether `text` is a sweep's JSONL rather than its JSON, by what it
/// holds, not its name (`--json r.jsonl` writes JSON under that name): its
/// first line one whole JSON value (the head), and either more values
/// after it (rows, the end line, or a torn last line) or no `rows` (a
/// sweep stopped before its first row). A JSON that spans lines, whatever
/// follows it, is JSON, refused as such.
fn is_jsonl(text: &str) -> bool {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Rows {
        rows: Option<IgnoredAny>,
    }
    let Some(first) = text.lines().find(|l| !l.trim().is_empty()) else {
        return false;
    };
    if serde_json::from_str::<IgnoredAny>(first).is_err() {
        return false;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<IgnoredAny>();
    values.next();
    values.next().is_some() || serde_json::from_str::<Rows>(first).is_ok_and(|r| r.rows.is_none())
}

fn parse_results(path: &Path, text: &str) -> Result<Results, ResultsError> {
    let parsed = if text.trim().is_empty() {
        Err(ParseError::Empty)
    } else if is_jsonl(text) {
        parse_jsonl(text)
    } else {
        serde_json::from_str::<Results>(text).map_err(ParseError::from)
    };
    let r = parsed.map_err(|source| {
        // Another kind of file (a tuning table, a dump) is named by its
        // schema rather than by the first field results have and it lacks.
        #[derive(serde::Deserialize)]
        struct SchemaOnly {
            schema: String,
        }
        match serde_json::from_str::<SchemaOnly>(text) {
            Ok(o) if o.schema != RESULTS_SCHEMA => ResultsError::Schema {
                path: path.to_path_buf(),
                schema: o.schema,
            },
            _ => ResultsError::Parse {
                path: path.to_path_buf(),
                source,
            },
        }
    })?;
    if r.schema != RESULTS_SCHEMA {
        return Err(ResultsError::Schema {
            path: path.to_path_buf(),
            schema: r.schema,
        });
    }
    // A run that stopped before its first row says so in its meta: read,
    // it fails as a run that did not finish (exit 1), not as a bad file.
    if r.rows.is_empty() && r.meta.partial.is_none() {
        return Err(ResultsError::NoRows {
            path: path.to_path_buf(),
        });
    }
    check_values(&r).map_err(|why| ResultsError::Invalid {
        path: path.to_path_buf(),
        why,
    })?;
    Ok(r)
}

/// The collectives a sweep writes rows of (`group` for a group's row).
/// `engine`'s names, which this room does not see; a test holds them equal.
pub const COLLECTIVES: [&str; 13] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "broadcast",
    "reduce",
    "all-to-all",
    "gather",
    "scatter",
    "send-recv",
    "all-to-all-v",
    "all-gather-v",
    "reduce-scatter-v",
    "group",
];

/// The element types a sweep writes rows of (`engine`'s names).
pub const DTYPES: [&str; 12] = [
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "bfloat16", "float", "double",
    "f8e4m3", "f8e5m2",
];

/// The operators a sweep writes rows of (`none` where nothing reduces).
pub const OPS: [&str; 7] = ["sum", "prod", "min", "max", "avg", "premulsum", "none"];

/// A row's names as a sweep writes them ([`COLLECTIVES`], [`DTYPES`],
/// [`OPS`]), and an engine and algorithm named.
fn check_names(row: &Row) -> Result<(), String> {
    for (what, v, known) in [
        ("collective", &row.collective, &COLLECTIVES[..]),
        ("dtype", &row.dtype, &DTYPES[..]),
        ("op", &row.op, &OPS[..]),
    ] {
        if !known.contains(&v.as_str()) {
            return Err(format!(
                "{what} '{}' is not one collbench writes",
                v.escape_debug()
            ));
        }
    }
    for (what, v) in [("engine", &row.engine), ("algo", &row.algo)] {
        if v.trim().is_empty() {
            return Err(format!("{what} is empty"));
        }
    }
    Ok(())
}

/// The most ranks a results file may say it ran on (as `analyze` reads).
pub const MAX_WORLD_SIZE: usize = 1 << 22;

pub use super::model::MAX_MEASURE;

/// Values no sweep writes: a world of no rank or past [`MAX_WORLD_SIZE`],
/// a negative, infinite or absurd (over [`MAX_MEASURE`]) time, bandwidth,
/// time statistic, lateness or prediction, a placement other than `out`
/// and `in`, a root, late rank or per-rank time outside the world, a
/// count of wrong or NaN elements under -1 (not checked).
fn check_values(r: &Results) -> Result<(), String> {
    let world = r.meta.world_size;
    if world == 0 || world > MAX_WORLD_SIZE {
        return Err(format!(
            "meta.world_size {world}: a run has from 1 to {MAX_WORLD_SIZE} ranks"
        ));
    }
    for (i, row) in r.rows.iter().enumerate() {
        let at = || {
            let c = crate::units::shown(&row.collective, false);
            format!("row {} ({c} {} bytes)", i + 1, row.bytes)
        };
        if row.placement != "out" && row.placement != "in" {
            return Err(format!(
                "{}: placement is '{}', not out or in",
                at(),
                row.placement.escape_debug()
            ));
        }
        check_names(row)
            .and_then(|()| check_measures(row))
            .and_then(|()| check_ranks(row, world as u64))
            .and_then(|()| check_counts(row))
            .map_err(|why| format!("{}: {why}", at()))?;
    }
    check_links(r, world)
}

/// The links of `links` and `case_links`: ranks inside the world, and
/// bandwidths and times numbers from 0 to [`MAX_MEASURE`] (a heatmap and
/// a verdict index by rank).
fn check_links(r: &Results, world: usize) -> Result<(), String> {
    let pairs = r
        .links
        .iter()
        .flat_map(|l| l.pairs.iter().map(|p| ("links", p)))
        .chain(
            r.case_links
                .iter()
                .flat_map(|c| c.pairs.iter().map(|p| ("case_links", p))),
        );
    let rank = |what: &str, n: usize| {
        if n < world {
            Ok(())
        } else {
            Err(format!(
                "{what} names rank {n} of a {world}-rank run (meta.world_size)"
            ))
        }
    };
    for (i, (list, p)) in pairs.enumerate() {
        let at = format!("{list}: the link {} -> {}", p.from, p.to);
        rank(&at, p.from.max(p.to))?;
        for (name, v) in [
            ("gbps", p.gbps),
            ("wait_us", p.wait_us),
            ("transfer_us", p.transfer_us),
        ] {
            if !v.is_finite() || !(0.0..=MAX_MEASURE).contains(&v) {
                return Err(format!(
                    "{at} (pair {}): {name} is {v}, not a number from 0 to {MAX_MEASURE:e}",
                    i + 1
                ));
            }
        }
    }
    for f in r.links.iter().flat_map(|l| &l.findings) {
        for n in [f.from, f.to, f.rank].into_iter().flatten() {
            rank(&format!("links: the finding '{}'", f.detail), n)?;
        }
    }
    Ok(())
}

/// A row's times and bandwidths: each a finite number from 0 to
/// [`MAX_MEASURE`].
fn check_measures(row: &Row) -> Result<(), String> {
    let mut values = vec![
        ("time_us", row.time_us),
        ("algbw_gbps", row.algbw_gbps),
        ("busbw_gbps", row.busbw_gbps),
        ("stats.p50_us", row.stats.p50_us),
        ("stats.p99_us", row.stats.p99_us),
        ("stats.min_us", row.stats.min_us),
        ("stats.max_us", row.stats.max_us),
    ];
    values.extend(
        row.last_arrival
            .map(|a| ("last_arrival.late_us", a.late_us)),
    );
    values.extend(row.predicted_us.map(|p| ("predicted_us", p)));
    values.extend(row.per_rank_us.iter().map(|&t| ("per_rank_us", t)));
    for (name, v) in values {
        if !v.is_finite() || !(0.0..=MAX_MEASURE).contains(&v) {
            let v = if v.abs() < MAX_MEASURE {
                v.to_string()
            } else {
                format!("{v:e}")
            };
            return Err(format!(
                "{name} is {v}, not a time or bandwidth (0 to {MAX_MEASURE:e})"
            ));
        }
    }
    Ok(())
}

/// A row's ranks (root, late rank, per-rank times) within the world of
/// `ranks`.
fn check_ranks(row: &Row, ranks: u64) -> Result<(), String> {
    if row.root < -1 || row.root >= ranks as i64 {
        return Err(format!(
            "root {} is not a rank of the {ranks} (nor -1, no root)",
            row.root
        ));
    }
    if let Some(a) = row.last_arrival.filter(|a| a.rank as u64 >= ranks) {
        return Err(format!(
            "last_arrival.rank {} is not a rank of the {ranks}",
            a.rank
        ));
    }
    if row.per_rank_us.len() as u64 > ranks {
        return Err(format!(
            "per_rank_us has {} times for {ranks} ranks",
            row.per_rank_us.len()
        ));
    }
    Ok(())
}

/// A row's counts of wrong and NaN elements: -1 (not checked) or more,
/// NaN/Inf among the wrong.
fn check_counts(row: &Row) -> Result<(), String> {
    for (name, v) in [("wrong", row.wrong), ("nan", row.nan)] {
        if v < -1 {
            return Err(format!("{name} is {v}, not a count (nor -1, not checked)"));
        }
    }
    // NaN/Inf elements are among the wrong ones: a row with more would
    // print `#wrong 0` and pass while it holds NaN.
    if row.wrong >= 0 && row.nan > row.wrong {
        return Err(format!(
            "nan is {} but wrong {} (NaN/Inf elements are counted among the wrong ones)",
            row.nan, row.wrong
        ));
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct Head {
    schema: String,
    meta: Meta,
}

/// The JSONL's last line, written when the sweep ends (finished, or
/// stopped by a signal or a hang): `{"end": {"partial": ...}}`.
#[derive(serde::Serialize, serde::Deserialize)]
struct EndLine {
    end: End,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct End {
    partial: Option<super::Partial>,
}

/// Results from JSONL text; a torn last line (the sweep was killed while
/// writing it) is left out. Without its end line the run is unfinished
/// (`meta.partial`, reason `unfinished`): killed, or still running.
fn parse_jsonl(text: &str) -> Result<Results, ParseError> {
    // Line numbers as an editor shows them; blank lines are no lines.
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let (first, head) = lines.next().ok_or(ParseError::Empty)?;
    let head: Head = serde_json::from_str(head).map_err(|source| ParseError::Line {
        line: first,
        source,
    })?;
    let lines: Vec<(usize, &str)> = lines.collect();
    let mut rows = Vec::new();
    let mut end: Option<(usize, End)> = None;
    for (k, &(line, l)) in lines.iter().enumerate() {
        if let Some((at, _)) = end {
            // A JSONL holds one run, ended once: what follows is another
            // file appended, or an edit.
            return Err(ParseError::AfterEnd { line, end: at });
        }
        // `{"end": ...}` is the end line, whole or malformed.
        let is_end = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(l)
            .is_ok_and(|m| m.len() == 1 && m.contains_key("end"));
        if is_end {
            let e: EndLine =
                serde_json::from_str(l).map_err(|source| ParseError::EndLine { line, source })?;
            end = Some((line, e.end));
            continue;
        }
        match serde_json::from_str::<Row>(l) {
            Ok(r) => rows.push(r),
            // A torn last line: the sweep was killed while writing it.
            Err(_) if k + 1 == lines.len() => {}
            Err(source) => return Err(ParseError::Line { line, source }),
        }
    }
    let end = end.map(|(_, e)| e);
    let mut meta = head.meta;
    meta.partial = match end {
        Some(e) => e.partial,
        None => Some(super::Partial {
            reason: super::StopReason::Unfinished,
            missing_rows: 0,
            in_case: None,
        }),
    };
    Ok(Results {
        schema: head.schema,
        meta,
        rows,
        links: None,
        case_links: Vec::new(),
    })
}

/// The JSON file at the end, JSONL as rows finish.
pub struct JsonSink {
    to: JsonTo,
    /// What its write errors are said of (`--json PATH`); none for stdout.
    name: Option<String>,
}

/// Where a [`JsonSink`] writes.
enum JsonTo {
    /// A file, written when the sweep ends, with the JSONL beside it
    /// growing row by row.
    File {
        path: PathBuf,
        jsonl: BufWriter<File>,
    },
    /// A stream (stdout for `--json -`): the JSON once, when the sweep ends.
    Stream(Box<dyn Write + Send>),
}

impl JsonSink {
    pub fn create(path: &Path) -> io::Result<JsonSink> {
        if let Some(f) = open_in_place(path) {
            // A device, FIFO or descriptor: the JSON goes there once; no
            // JSONL beside it.
            let mut sink = JsonSink::stream(Box::new(f?));
            sink.name = Some(format!("--json {}", path.display()));
            return Ok(sink);
        }
        // Beside the JSON where its links lead.
        let jsonl = BufWriter::new(File::create(jsonl_path(&crate::units::output_end(path)))?);
        Ok(JsonSink {
            to: JsonTo::File {
                path: path.to_path_buf(),
                jsonl,
            },
            name: Some(format!("--json {}", path.display())),
        })
    }

    /// Writes the JSON to `out` when the sweep ends (no JSONL).
    pub fn stream(out: Box<dyn Write + Send>) -> JsonSink {
        JsonSink {
            to: JsonTo::Stream(out),
            name: None,
        }
    }
}

impl Sink for JsonSink {
    fn start(&mut self, meta: &Meta) -> io::Result<()> {
        let JsonTo::File { jsonl, .. } = &mut self.to else {
            return Ok(());
        };
        let head = serde_json::json!({"schema": RESULTS_SCHEMA, "meta": meta});
        let written = writeln!(jsonl, "{head}").and_then(|()| jsonl.flush());
        self.named(written)
    }

    fn row(&mut self, row: &Row) -> io::Result<()> {
        let JsonTo::File { jsonl, .. } = &mut self.to else {
            return Ok(());
        };
        let written = serde_json::to_writer(&mut *jsonl, row)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(jsonl))
            .and_then(|()| jsonl.flush());
        self.named(written)
    }

    fn finish(&mut self, results: &Results) -> io::Result<()> {
        let written = self.write(results, true);
        self.named(written)
    }

    /// A run that failed: its JSON as it stands, and no end line, so that
    /// its JSONL never reads as a run that ended.
    fn abandon(&mut self, results: &Results) -> io::Result<()> {
        let written = self.write(results, false);
        self.named(written)
    }
}

impl JsonSink {
    /// A write's error naming the file (`--json PATH`, its JSONL beside
    /// it included), as the other outputs' errors do.
    fn named(&self, written: io::Result<()>) -> io::Result<()> {
        match (&self.name, written) {
            (Some(name), Err(e)) => Err(io::Error::new(e.kind(), format!("{name}: {e}"))),
            (_, written) => written,
        }
    }

    /// The JSON; with `ended`, first the JSONL's end line (a reader of the
    /// JSONL alone then knows the sweep ended, and how).
    fn write(&mut self, results: &Results, ended: bool) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(results)?;
        match &mut self.to {
            JsonTo::File { path, jsonl } => {
                // The JSON first: it never depends on the JSONL's writes.
                write_atomic(path, &text)?;
                if !ended {
                    return Ok(());
                }
                let end = EndLine {
                    end: End {
                        partial: results.meta.partial.clone(),
                    },
                };
                serde_json::to_writer(&mut *jsonl, &end)?;
                writeln!(jsonl)?;
                jsonl.flush()
            }
            JsonTo::Stream(out) => {
                out.write_all(&text)?;
                writeln!(out)?;
                out.flush()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{results, row};

    /// A sweep that ended writes the JSONL's end line; one that failed
    /// does not, so its JSONL never reads as a run that ended.
    #[test]
    fn only_an_ended_sweep_ends_its_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let r = results(vec![row(8, "out")]);
        for ended in [true, false] {
            let json = dir.path().join(format!("r{ended}.json"));
            let mut sink = JsonSink::create(&json).unwrap();
            sink.start(&r.meta).unwrap();
            sink.row(&r.rows[0]).unwrap();
            if ended {
                sink.finish(&r).unwrap();
            } else {
                sink.abandon(&r).unwrap();
            }
            drop(sink);
            let text = std::fs::read_to_string(jsonl_path(&json)).unwrap();
            let back = parse_jsonl(&text).unwrap();
            assert_eq!(back.meta.partial.is_none(), ended, "{text}");
            assert!(json.exists());
        }
    }

    #[test]
    fn jsonl_of_an_interrupted_sweep_reads_back() {
        let r = results(vec![row(8, "out"), row(8, "in")]);
        let head = serde_json::json!({"schema": RESULTS_SCHEMA, "meta": r.meta});
        let rows: Vec<String> = r
            .rows
            .iter()
            .map(|x| serde_json::to_string(x).unwrap())
            .collect();
        let text = format!("{head}\n{}\n{}\n{{\"collect", rows[0], rows[1]);
        let back = parse_jsonl(&text).unwrap();
        assert_eq!(back.rows.len(), 2);
        assert_eq!(back.rows[1].placement, "in");
        // No end line: the sweep never ended, whatever its head says.
        let unfinished = back.meta.partial.clone().unwrap();
        assert_eq!(unfinished.reason, crate::report::StopReason::Unfinished);
        assert!(
            unfinished.to_string().contains("no end line"),
            "{unfinished}"
        );
        assert_eq!(
            Meta {
                partial: None,
                ..back.meta
            },
            r.meta
        );
        // Its end line says how it ended: finished, or stopped.
        let ended = format!("{head}\n{}\n{{\"end\":{{\"partial\":null}}}}\n", rows[0]);
        assert_eq!(parse_jsonl(&ended).unwrap().meta.partial, None);
        let stopped = format!(
            "{head}\n{}\n{{\"end\":{{\"partial\":{{\"reason\":\"signal\",\"missing_rows\":3}}}}}}\n",
            rows[0]
        );
        let p = parse_jsonl(&stopped).unwrap().meta.partial.unwrap();
        assert_eq!(
            (p.reason, p.missing_rows),
            (crate::report::StopReason::Signal, 3)
        );
        let bad = format!("{head}\n{{}}\n{}\n", rows[0]);
        assert!(parse_jsonl(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("line 2:"));
        assert!(parse_jsonl("").is_err());
        // Line numbers count blank lines; serde's own `line 1` is dropped.
        let bad = format!("{head}\n\n{}\n{{\"bytes\": x}}\n{}\n", rows[0], rows[1]);
        assert_eq!(
            parse_jsonl(&bad).unwrap_err().to_string(),
            "line 4: expected value at column 11"
        );
        // Rows after the end line (a second run appended) are refused, not
        // read as this run's.
        let appended = format!("{ended}{}\n", rows[1]);
        assert_eq!(
            parse_jsonl(&appended).unwrap_err().to_string(),
            "line 4: data after the end line (line 3): a JSONL holds one run"
        );
        // A malformed end line is said to be one, not missing.
        let bad_end = format!(
            "{head}\n{}\n{{\"end\":{{\"partial\":\"hang\"}}}}\n",
            rows[0]
        );
        let e = parse_jsonl(&bad_end).unwrap_err().to_string();
        assert!(e.starts_with("line 3: a malformed end line: "), "{e}");
    }
}
