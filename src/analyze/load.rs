//! Finding dump files and reading each into the [`RankDump`] model, whatever
//! its format. The format comes from the content, never the file name:
//! `{...}` with `"schema": "collbench.fr/1"` is collbench's own dump, other
//! JSON with the PyTorch keys is PyTorch's JSON dump, and a leading `0x80`
//! (pickle protocol 2+) is PyTorch's pickle dump.
//!
//! A file that cannot be read (empty, truncated, too large, some other kind
//! of file) is listed with the reason, and loading goes on with the rest.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::json_tree::{self, JsonTreeError};
use super::model::{Format, GroupSeqs, Origin, RankDump, Record, MAX_RANKS};
use super::pickle::{self, Limits, PickleError};
use super::pytorch;
use super::runs::{self, Run};
use super::value::{OverBudget, TreeBudget};
use crate::recorder::model::{Dump, DUMP_SCHEMA};

/// A file left out of the analysis, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub path: String,
    pub reason: String,
}

/// What loading found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// The runs the dumps come from (see [`runs`](super::runs)), each with
    /// one dump per rank.
    pub runs: Vec<Run>,
    /// Files that could not be read as a dump.
    pub unreadable: Vec<Unreadable>,
    /// Readable dumps left out because another file of the same rank of the
    /// same run came first.
    pub ignored: Vec<Unreadable>,
}

impl Loaded {
    /// Every dump kept, run by run, by rank within a run.
    pub fn dumps(&self) -> impl Iterator<Item = &RankDump> {
        self.runs.iter().flat_map(|r| &r.dumps)
    }
}

/// Why one file is not a readable dump.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    #[error("empty file")]
    Empty,
    #[error("a named pipe that gave nothing (no process was writing to it)")]
    EmptyPipe,
    #[error("{size} bytes, over the limit of {cap} bytes")]
    TooLarge { size: u64, cap: u64 },
    #[error("{}", json_reason(.0))]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    OverBudget(OverBudget),
    #[error("invalid or truncated pickle: {0}")]
    Pickle(#[from] PickleError),
    #[error("not a flight-recorder dump: {0}")]
    Foreign(String),
    #[error("a {} dump, but {what}", format.name())]
    Invalid { format: Format, what: String },
}

/// Reads every file named by `paths`: a file, or a directory whose files
/// and whose subdirectories' files (one level down) are all read.
pub fn load_paths(paths: &[PathBuf], limits: &Limits) -> Loaded {
    load_paths_observed(paths, limits, &mut |_, _, _| {})
}

/// [`load_paths`], telling `on_file(index, total, path)` before each file
/// is read (for a progress display).
pub fn load_paths_observed(
    paths: &[PathBuf],
    limits: &Limits,
    on_file: &mut dyn FnMut(usize, usize, &Path),
) -> Loaded {
    let mut loaded = Loaded::default();
    let mut dumps = Vec::new();
    let files = expand(paths, &mut loaded.unreadable);
    let total = files.len();
    // One budget for every file's tree: a thousand small pickles that each
    // expand to the floor would fill memory as one would.
    let mut tree = limits.tree_budget();
    for (i, file) in files.into_iter().enumerate() {
        on_file(i, total, &file);
        match load_file_within(&file, limits, &mut tree) {
            Ok(mut dump) => {
                dump.escape_text();
                dumps.push(dump);
            }
            Err(e) => loaded.unreadable.push(Unreadable {
                path: file.display().to_string(),
                reason: e.to_string(),
            }),
        }
    }
    let (runs, duplicates) = runs::split(dumps);
    loaded.runs = runs;
    loaded.ignored = duplicates
        .into_iter()
        .map(|d| Unreadable {
            path: d.path,
            reason: d.reason,
        })
        .collect();
    // A file's name, and an error quoting the file, are shown as well.
    for u in loaded.unreadable.iter_mut().chain(&mut loaded.ignored) {
        crate::units::show_field(&mut u.path);
        crate::units::show_field(&mut u.reason);
    }
    loaded
}

/// The files to read, in a stable order; paths that cannot be listed go to `bad`.
fn expand(paths: &[PathBuf], bad: &mut Vec<Unreadable>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                for entry in list_dir(path, bad) {
                    match fs::metadata(&entry) {
                        Ok(meta) if meta.is_dir() => {
                            for inner in list_dir(&entry, bad) {
                                match fs::metadata(&inner) {
                                    Ok(meta) if meta.is_file() => files.push(inner),
                                    // Said, not skipped in silence: the
                                    // dumps may be right there.
                                    Ok(meta) if meta.is_dir() => bad.push(Unreadable {
                                        path: inner.display().to_string(),
                                        reason: "a folder two levels down, not read (name it, or its parent, to read its files)".into(),
                                    }),
                                    other => bad.push(not_a_file(&inner, other)),
                                }
                            }
                        }
                        Ok(meta) if meta.is_file() => files.push(entry),
                        other => bad.push(not_a_file(&entry, other)),
                    }
                }
            }
            Ok(_) => files.push(path.clone()),
            Err(e) => bad.push(Unreadable {
                path: path.display().to_string(),
                reason: format!("cannot read it: {e}"),
            }),
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    files.retain(|f| seen.insert(f.clone()));
    files
}

/// What a folder's entry that is neither a file nor a folder is, said
/// rather than skipped: a pipe or socket is not opened (a pipe without a
/// writer would wait for ever), a link to nothing is named.
fn not_a_file(path: &Path, meta: std::io::Result<fs::Metadata>) -> Unreadable {
    use std::os::unix::fs::FileTypeExt;
    let reason = match meta {
        Ok(meta) => {
            let t = meta.file_type();
            let what = if t.is_fifo() {
                "a named pipe"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_block_device() || t.is_char_device() {
                "a device"
            } else {
                "not a regular file"
            };
            format!("{what}, not read in a folder (name it on the command line to read it)")
        }
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            "a link to nothing (its target is missing)".to_string()
        }
        Err(e) => format!("cannot read it: {e}"),
    };
    Unreadable {
        path: path.display().to_string(),
        reason,
    }
}

fn list_dir(dir: &Path, bad: &mut Vec<Unreadable>) -> Vec<PathBuf> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            // Hidden files (a run's abort trigger, temporary dump files) are not dumps.
            let mut out: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    !p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            out.sort();
            out
        }
        Err(e) => {
            bad.push(Unreadable {
                path: dir.display().to_string(),
                reason: format!("cannot list it: {e}"),
            });
            Vec::new()
        }
    }
}

/// Reads one dump file.
pub fn load_file(path: &Path, limits: &Limits) -> Result<RankDump, LoadError> {
    load_file_within(path, limits, &mut limits.tree_budget())
}

/// [`load_file`], its tree charged to `tree`.
fn load_file_within(
    path: &Path,
    limits: &Limits,
    tree: &mut TreeBudget,
) -> Result<RankDump, LoadError> {
    let cap = limits.max_file_bytes;
    let file = crate::units::open_input(path)?;
    let meta = file.metadata()?;
    let size = meta.len();
    if size > cap {
        return Err(LoadError::TooLarge { size, cap });
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > cap {
        return Err(LoadError::TooLarge { size: read, cap });
    }
    if bytes.is_empty() && std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
        return Err(LoadError::EmptyPipe);
    }
    load_bytes_within(&bytes, path, limits, tree)
}

/// Reads one dump from its bytes; `path` names it (PyTorch dumps take their
/// rank from the file name).
pub fn load_bytes(bytes: &[u8], path: &Path, limits: &Limits) -> Result<RankDump, LoadError> {
    load_bytes_within(bytes, path, limits, &mut limits.tree_budget())
}

/// [`load_bytes`], its tree charged to `tree` (granted the file's share here).
fn load_bytes_within(
    bytes: &[u8],
    path: &Path,
    limits: &Limits,
    tree: &mut TreeBudget,
) -> Result<RankDump, LoadError> {
    tree.grant(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
    let bytes = crate::units::without_bom(bytes);
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match (bytes.first(), first) {
        (None, _) => Err(LoadError::Empty),
        (Some(0x80), _) => {
            let root = pickle::parse_within(bytes, limits, tree).map_err(|e| match e {
                PickleError::OverBudget(over) => LoadError::OverBudget(over),
                e => LoadError::Pickle(e),
            })?;
            if !pytorch::looks_like_dump(&root) {
                return Err(LoadError::Foreign(format!(
                    "a Python pickle of a {}, without the keys of a PyTorch flight-recorder dump",
                    root.kind()
                )));
            }
            pytorch::read_dump(&root, path, Format::PytorchPickle).map_err(|e| LoadError::Invalid {
                format: Format::PytorchPickle,
                what: e.to_string(),
            })
        }
        (_, Some(b'{')) => load_json(bytes, path, limits, tree),
        _ => match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) => Err(LoadError::Foreign(format!(
                "a JSON {}, where a dump is a JSON object",
                json_kind(&v)
            ))),
            Err(_) => Err(LoadError::Foreign(describe(bytes))),
        },
    }
}

fn load_json(
    bytes: &[u8],
    path: &Path,
    limits: &Limits,
    tree: &mut TreeBudget,
) -> Result<RankDump, LoadError> {
    match schema_of(bytes)? {
        Some(serde_json::Value::String(s)) if s == DUMP_SCHEMA => {
            let dump: Dump = serde_json::from_slice(bytes).map_err(|e| LoadError::Invalid {
                format: Format::Collbench,
                what: e.to_string(),
            })?;
            // Dumps from before runs had ids have none.
            let run_id = dump.run_id.clone().filter(|id| !id.is_empty());
            from_collbench(dump, run_id, path)
        }
        Some(other) => Err(LoadError::Foreign(format!("JSON with schema {other}"))),
        None => {
            let root = json_tree::read(bytes, tree, limits.skip_keys).map_err(|e| match e {
                JsonTreeError::Syntax(e) => LoadError::Json(e),
                JsonTreeError::OverBudget(over) => LoadError::OverBudget(over),
            })?;
            if !pytorch::looks_like_dump(&root) {
                return Err(LoadError::Foreign(
                    "JSON without a collbench schema or the keys of a PyTorch flight-recorder dump"
                        .into(),
                ));
            }
            pytorch::read_dump(&root, path, Format::PytorchJson).map_err(|e| LoadError::Invalid {
                format: Format::PytorchJson,
                what: e.to_string(),
            })
        }
    }
}

/// What is wrong with a JSON file, as a reader of dumps would say it.
fn json_reason(e: &serde_json::Error) -> String {
    if e.to_string().starts_with("recursion limit exceeded") {
        // serde_json stops at 128 levels; no dump nests past a handful.
        return format!("JSON nested deeper than 128 levels, as no flight-recorder dump is ({e})");
    }
    format!("invalid or truncated JSON: {e}")
}

/// A JSON object's `schema` (the last, where a key repeats, as every
/// reader here takes), the rest read past: what reads the file.
fn schema_of(bytes: &[u8]) -> Result<Option<serde_json::Value>, serde_json::Error> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Schema;
    impl<'de> Visitor<'de> for Schema {
        type Value = Option<serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut schema = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "schema" {
                    schema = Some(map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(schema)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let schema = de.deserialize_map(Schema)?;
    de.end()?;
    Ok(schema)
}

/// `array`, `null`, ...: what a JSON value is.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Says what a file that is neither JSON nor a pickle looks like.
fn describe(bytes: &[u8]) -> String {
    const MAGICS: [(&[u8], &str); 4] = [
        (b"\x89PNG", "a PNG image"),
        (b"\x1f\x8b", "gzip-compressed data (decompress it first)"),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x7fELF", "an executable"),
    ];
    if let Some((_, what)) = MAGICS.iter().find(|(magic, _)| bytes.starts_with(magic)) {
        return (*what).to_owned();
    }
    let head = &bytes[..bytes.len().min(16)];
    match std::str::from_utf8(head) {
        Ok(text) if text.trim().is_empty() => "only blank space".into(),
        Ok(text) => format!(
            "text starting {:?}, neither JSON nor a pickle (of protocol 2 or newer, as PyTorch writes)",
            text
        ),
        Err(_) => {
            let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
            format!(
                "binary data starting {}, neither JSON nor a pickle",
                hex.join(" ")
            )
        }
    }
}

/// collbench's own dump into the model.
fn from_collbench(dump: Dump, run_id: Option<String>, path: &Path) -> Result<RankDump, LoadError> {
    check_collbench(&dump).map_err(|what| LoadError::Invalid {
        format: Format::Collbench,
        what,
    })?;
    let mut groups: BTreeMap<String, Vec<usize>> = dump
        .groups
        .iter()
        .map(|g| (g.name.clone(), g.ranks.clone()))
        .collect();
    if groups.is_empty() {
        groups.insert("0".into(), (0..dump.world_size).collect());
    }
    let wrapped = dump.capacity > 0 && dump.entries.len() >= dump.capacity;
    let status = dump
        .status
        .iter()
        .map(|s| {
            let seqs = GroupSeqs {
                entered: s.entered,
                started: Some(s.started).filter(|&n| n > 0),
                completed: Some(s.completed).filter(|&n| n > 0),
            };
            (s.group.clone(), seqs)
        })
        .filter(|(_, seqs)| seqs.plausible())
        .collect();
    let records = dump
        .entries
        .into_iter()
        .map(|e| {
            let mut r = Record::new(&e.pg, e.seq, &e.collective, e.state);
            r.root = e.root.filter(|_| is_rooted(&e.collective));
            r.algo = e.algo;
            r.input_sizes = vec![vec![i64::try_from(e.count).unwrap_or(i64::MAX)]];
            if !e.dtype.is_empty() {
                r.input_dtypes = vec![e.dtype];
            }
            r.t_scheduled_ns = Some(e.t_scheduled_ns);
            r.t_started_ns = e.t_started_ns;
            r.t_completed_ns = e.t_completed_ns;
            r.channels = e.channels;
            r
        })
        .collect();
    Ok(RankDump {
        path: path.to_path_buf(),
        format: Format::Collbench,
        rank: dump.rank,
        world_size: Some(dump.world_size),
        groups,
        records,
        wrapped,
        status,
        reason: Some(dump.reason),
        group_descs: BTreeMap::new(),
        origin: Origin {
            run_id,
            pid: Some(dump.pid),
            host: Some(dump.host),
            command: Some(dump.command),
            dumped_at_ns: Some(dump.clocks.wall_ns).filter(|&t| t > 0),
            lost: dump.lost,
        },
    })
}

/// What makes collbench's dump `dump` unusable, if anything: ranks beyond
/// the limit or outside its world (its own, a peer waited on, a dead one),
/// a channel's progress outside its steps.
fn check_collbench(dump: &Dump) -> Result<(), String> {
    let too_many = |r: &usize| *r > MAX_RANKS;
    if too_many(&dump.world_size) || dump.groups.iter().flat_map(|g| &g.ranks).any(too_many) {
        return Err(format!("it names ranks beyond the limit of {MAX_RANKS}"));
    }
    if dump.rank >= dump.world_size {
        return Err(format!(
            "rank {} is outside its world of {}",
            dump.rank, dump.world_size
        ));
    }
    // A peer outside the world would be named as what a rank waited for.
    let waits = dump.entries.iter().flat_map(|e| {
        e.channels
            .iter()
            .filter_map(|c| c.waiting_on.as_ref().map(|w| (e.seq, w.peer)))
    });
    for (seq, peer) in waits {
        if usize::try_from(peer).is_ok_and(|p| p < dump.world_size) {
            continue;
        }
        return Err(format!(
            "seq {seq} waits on peer {peer}, outside its world of {}",
            dump.world_size
        ));
    }
    // A channel's progress within its steps: -1 before the first, the
    // last step's index when done ("step 10 of 3" is no progress).
    for e in &dump.entries {
        for c in &e.channels {
            let total = i64::try_from(c.steps_total).unwrap_or(i64::MAX);
            if (-1..total.max(0)).contains(&c.last_step_done)
                || (total == 0 && c.last_step_done == -1)
            {
                continue;
            }
            return Err(format!(
                "seq {} channel {}: step {} done of {} (expected -1 to {})",
                e.seq,
                c.channel,
                c.last_step_done,
                c.steps_total,
                total - 1
            ));
        }
    }
    if let Some(l) = dump.lost.as_ref().filter(|l| l.rank >= dump.world_size) {
        return Err(format!(
            "it says rank {} died, outside its world of {}",
            l.rank, dump.world_size
        ));
    }
    Ok(())
}

/// Collectives whose root every rank must agree on (for the others, collbench's
/// `root` is the point-to-point peer, which differs by rank).
fn is_rooted(collective: &str) -> bool {
    matches!(collective, "broadcast" | "reduce" | "gather" | "scatter")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(bytes: &[u8]) -> Result<RankDump, LoadError> {
        load_bytes(bytes, Path::new("rank0"), &Limits::default())
    }

    #[test]
    fn foreign_files_say_what_they_are() {
        let png = load(b"\x89PNG\r\n\x1a\n....").unwrap_err().to_string();
        assert!(png.contains("PNG"), "{png}");
        let text = load(b"hello world").unwrap_err().to_string();
        assert!(text.contains("neither JSON nor a pickle"), "{text}");
        let other = load(br#"{"schema": "collbench.results/1"}"#)
            .unwrap_err()
            .to_string();
        assert!(other.contains("collbench.results/1"), "{other}");
        let deep = format!("{{\"entries\": {}{}}}", "[".repeat(200), "]".repeat(200));
        let deep = load(deep.as_bytes()).unwrap_err().to_string();
        assert!(
            deep.starts_with("JSON nested deeper than 128 levels"),
            "{deep}"
        );
        // The last `schema` counts, as the last of any key does.
        let twice = load(br#"{"schema": "collbench.fr/1", "schema": "other/2"}"#)
            .unwrap_err()
            .to_string();
        assert!(twice.ends_with("JSON with schema \"other/2\""), "{twice}");
        assert!(matches!(load(b""), Err(LoadError::Empty)));
        assert!(matches!(
            load(b"{\"entries\": [").unwrap_err(),
            LoadError::Json(_)
        ));
    }

    #[test]
    fn collbench_rank_outside_world_is_invalid() {
        let json = serde_json::json!({
            "schema": DUMP_SCHEMA, "host": "h", "pid": 1, "rank": 4, "world_size": 4,
            "device": "host", "command": "c", "version": "v", "reason": "timeout",
            "clocks": {"wall_ns": 0, "mono_ns": 0}, "capacity": 8, "groups": [], "entries": []
        });
        let err = load(json.to_string().as_bytes()).unwrap_err().to_string();
        assert!(err.contains("outside its world"), "{err}");
    }
}
