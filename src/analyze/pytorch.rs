//! PyTorch flight-recorder dumps (c10d, dump versions 2.x), pickle or JSON,
//! both already read into a [`Value`] tree, into the [`RankDump`] model.
//!
//! What the files hold (as written by PyTorch 2.x): `version`, `pg_config`
//! (group name -> `{name, desc, ranks}` with `ranks` a string like
//! `"[0, 1, 2, 3]"`), `pg_status`, and `entries`, each with `record_id`,
//! `process_group` (`[name, desc]`), `collective_seq_id`, `p2p_seq_id`,
//! `is_p2p`, `profiling_name` (`"nccl:all_reduce"`), `input_sizes`,
//! `input_dtypes`, `output_sizes`, `output_dtypes`, `state`,
//! `time_created_ns`, `time_discovered_started_ns`,
//! `time_discovered_completed_ns` (None in the pickle, 0 in JSON when
//! unknown) and `frames`. The dump does not say which rank wrote it: that is
//! the number the file name ends with, as in PyTorch's default
//! `nccl_trace_rank_<N>`.
//!
//! Quirk handled: gloo keys `pg_config` by an empty name while the entries
//! name the group `"0"`; a lone unmatched `pg_config` entry is taken to
//! describe the lone unmatched group name of the entries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::model::{Format, GroupSeqs, Origin, RankDump, Record, State, MAX_RANKS};
use super::value::Value;

/// Why a PyTorch dump cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    #[error("bad rank {0}")]
    BadRank(i128),
    #[error("the dump does not say its rank and the file name does not end with one (PyTorch names them like nccl_trace_rank_3; a pipe such as <(zcat ...) names none)")]
    NoRank,
    #[error("`entries` is not a list")]
    EntriesNotList,
    #[error("entry {index}: {source}")]
    Entry { index: usize, source: EntryError },
    #[error("it names ranks beyond the limit of {MAX_RANKS}")]
    TooManyRanks,
}

/// Why one entry of a PyTorch dump cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("a {0} where a dict was expected")]
    NotDict(&'static str),
    #[error("no collective_seq_id")]
    NoSeq,
    #[error("bad collective_seq_id {0} (PyTorch's are from 0 to 2^63 - 1)")]
    BadSeq(i128),
    #[error("collective_seq_id is {0}, not a whole number from 0 to 2^63")]
    SeqNotInt(&'static str),
    #[error("unknown state {0:?}")]
    UnknownState(String),
    #[error("no state")]
    NoState,
    /// A field present with a type PyTorch never writes there (a size
    /// that is a string, a name that is a number): read as data, it would
    /// make a mismatch that names the wrong rank.
    #[error("{field} is of type {found}, not {expected}")]
    FieldType {
        field: &'static str,
        found: &'static str,
        expected: &'static str,
    },
}

/// True when the tree has the keys of a PyTorch flight-recorder dump.
pub fn looks_like_dump(root: &Value) -> bool {
    root.get("entries").is_some()
        || (root.get("version").is_some() && root.get("pg_config").is_some())
}

/// Reads one dump; the error says what is wrong with it.
pub fn read_dump(root: &Value, path: &Path, format: Format) -> Result<RankDump, DumpError> {
    let rank = match root.get("rank").and_then(Value::as_int) {
        Some(r) => usize::try_from(r).map_err(|_| DumpError::BadRank(r))?,
        None => rank_from_file_name(path).ok_or(DumpError::NoRank)?,
    };
    let entries: &[Value] = match root.get("entries") {
        None | Some(Value::None) => &[],
        Some(v) => v.as_seq().ok_or(DumpError::EntriesNotList)?,
    };
    let mut records = Vec::with_capacity(entries.len());
    let mut first_record_id = None;
    for (i, entry) in entries.iter().enumerate() {
        records.push(read_entry(entry).map_err(|source| DumpError::Entry { index: i, source })?);
        if first_record_id.is_none() {
            first_record_id = entry.get("record_id").and_then(Value::as_int);
        }
    }
    let status = read_status(root, entries);
    let groups = read_groups(root, &records, &status);
    if rank >= MAX_RANKS || groups.values().flatten().any(|&r| r >= MAX_RANKS) {
        return Err(DumpError::TooManyRanks);
    }
    let world_size = world_size(&groups);
    let mut group_descs = BTreeMap::new();
    for entry in entries {
        let pg = entry.get("process_group").and_then(Value::as_seq);
        let name = pg.and_then(|pg| pg.first()).and_then(Value::as_str);
        let desc = pg.and_then(|pg| pg.get(1)).and_then(Value::as_str);
        if let (Some(name), Some(desc)) = (name, desc.filter(|d| !d.is_empty())) {
            group_descs
                .entry(name.to_owned())
                .or_insert_with(|| desc.to_owned());
        }
    }
    Ok(RankDump {
        path: path.to_path_buf(),
        format,
        rank,
        world_size,
        groups,
        records,
        wrapped: first_record_id.is_some_and(|id| id > 0),
        status,
        reason: None,
        group_descs,
        origin: Origin::default(),
    })
}

/// The number a file name ends with, ignoring an extension: `rank3.json` -> 3.
pub fn rank_from_file_name(path: &Path) -> Option<usize> {
    // A pipe's name (`<(zcat rank3.gz)` is /dev/fd/63) is a descriptor's
    // number, not a rank.
    if path.starts_with("/dev/fd") || path.starts_with("/proc/self/fd") {
        return None;
    }
    // Bytes: a name need not be UTF-8 for its ending digits to be read.
    let name = path.file_name()?.as_encoded_bytes();
    let stem = [&b".json"[..], b".pkl", b".pickle"]
        .iter()
        .find_map(|ext| name.strip_suffix(*ext))
        .unwrap_or(name);
    let digits = stem.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    std::str::from_utf8(&stem[stem.len() - digits..])
        .ok()?
        .parse()
        .ok()
}

fn read_entry(entry: &Value) -> Result<Record, EntryError> {
    if entry.as_dict().is_none() {
        return Err(EntryError::NotDict(entry.kind()));
    }
    let given = entry
        .get("collective_seq_id")
        .or_else(|| entry.get("seq_id"))
        .ok_or(EntryError::NoSeq)?;
    let seq = given
        .as_int()
        .ok_or(EntryError::SeqNotInt(match given.kind() {
            "int" => "an integer too large",
            // JSON reads an integer past 2^64 as a float: a whole one that
            // large is said as the number it was written as.
            _ if matches!(given, Value::Float(f) if f.fract() == 0.0 && f.abs() >= 9.2e18) => {
                "a number too large"
            }
            "float" => "a float",
            "str" => "a string",
            _ => "another type",
        }))?;
    // PyTorch's counters are int64: past 2^63 is no seq it wrote.
    let seq = u64::try_from(seq)
        .ok()
        .filter(|&s| s <= i64::MAX as u64)
        .ok_or(EntryError::BadSeq(seq))?;
    let state = match entry.get("state").and_then(Value::as_str) {
        Some("scheduled") => State::Scheduled,
        Some("started") => State::Started,
        Some("completed") => State::Completed,
        Some(other) => return Err(EntryError::UnknownState(other.to_owned())),
        None => return Err(EntryError::NoState),
    };
    check_fields(entry)?;
    let name = entry
        .get("profiling_name")
        .and_then(Value::as_str)
        .unwrap_or("");
    // "nccl:all_reduce" -> "all_reduce"; "nccl:send 0->1" -> "send 0->1".
    let op = name.split_once(':').map_or(name, |(_, op)| op).to_owned();
    let mut record = Record::new(&group_name(entry), seq, &op, state);
    let p2p = match entry.get("is_p2p") {
        Some(Value::Bool(b)) => *b,
        _ => op.starts_with("send") || op.starts_with("recv"),
    };
    if p2p {
        let p2p_seq = entry.get("p2p_seq_id").and_then(Value::as_int).unwrap_or(0);
        record.p2p_seq = Some(u64::try_from(p2p_seq).unwrap_or(0));
    }
    record.input_sizes = sizes(entry.get("input_sizes"));
    record.output_sizes = sizes(entry.get("output_sizes"));
    record.input_dtypes = strings(entry.get("input_dtypes"));
    record.output_dtypes = strings(entry.get("output_dtypes"));
    record.t_scheduled_ns = time_ns(entry.get("time_created_ns"));
    record.t_started_ns = time_ns(entry.get("time_discovered_started_ns"));
    record.t_completed_ns = time_ns(entry.get("time_discovered_completed_ns"));
    Ok(record)
}

/// The fields compared across ranks, where present (and not None), have
/// PyTorch's types: a name string, lists of shapes of integers, lists of
/// dtype strings.
fn check_fields(entry: &Value) -> Result<(), EntryError> {
    let present = |k: &str| entry.get(k).filter(|v| !matches!(v, Value::None));
    let wrong = |field, v: &Value, expected| EntryError::FieldType {
        field,
        found: v.kind(),
        expected,
    };
    if let Some(v) = present("profiling_name") {
        if v.as_str().is_none() {
            return Err(wrong("profiling_name", v, "a string"));
        }
    }
    for field in ["input_sizes", "output_sizes"] {
        if let Some(v) = present(field) {
            let shapes = v
                .as_seq()
                .ok_or_else(|| wrong(field, v, "a list of shapes"))?;
            for shape in shapes {
                let dims = shape
                    .as_seq()
                    .ok_or_else(|| wrong(field, shape, "a list of shapes"))?;
                if let Some(d) = dims.iter().find(|d| d.as_int().is_none()) {
                    return Err(wrong(field, d, "a list of shapes of integers"));
                }
            }
        }
    }
    for field in ["input_dtypes", "output_dtypes"] {
        if let Some(v) = present(field) {
            let names = v
                .as_seq()
                .ok_or_else(|| wrong(field, v, "a list of dtype names"))?;
            if let Some(n) = names.iter().find(|n| n.as_str().is_none()) {
                return Err(wrong(field, n, "a list of dtype names"));
            }
        }
    }
    Ok(())
}

/// `process_group[0]`, else `pg_id`.
fn group_name(entry: &Value) -> String {
    let named = entry
        .get("process_group")
        .and_then(Value::as_seq)
        .and_then(|pg| pg.first())
        .and_then(Value::as_str);
    match named {
        Some(name) => name.to_owned(),
        None => match entry.get("pg_id").and_then(Value::as_int) {
            Some(id) => id.to_string(),
            None => "0".to_owned(),
        },
    }
}

/// A nanosecond time; None, 0 and negatives mean "not recorded".
fn time_ns(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_int)
        .and_then(|t| u64::try_from(t).ok())
        .filter(|&t| t > 0)
}

/// A list of shapes; anything that is not an integer reads as -1.
fn sizes(v: Option<&Value>) -> Vec<Vec<i64>> {
    let Some(shapes) = v.and_then(Value::as_seq) else {
        return Vec::new();
    };
    shapes
        .iter()
        .map(|shape| {
            shape
                .as_seq()
                .unwrap_or(&[])
                .iter()
                .map(|d| d.as_int().and_then(|d| i64::try_from(d).ok()).unwrap_or(-1))
                .collect()
        })
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_seq)
        .unwrap_or(&[])
        .iter()
        .map(|s| s.as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Group memberships from `pg_config`, renamed to the names the entries use.
///
/// gloo keys `pg_config` by an empty name and overwrites that one entry with
/// each group it creates: it holds the last group's ranks, whichever group
/// that was. It is taken for the entries' group only when the dump knows of
/// no other group; otherwise it is left out, and the members come from the
/// other dumps.
fn read_groups(
    root: &Value,
    records: &[Record],
    status: &BTreeMap<String, GroupSeqs>,
) -> BTreeMap<String, Vec<usize>> {
    let mut config: BTreeMap<String, Option<Vec<usize>>> = BTreeMap::new();
    for (key, value) in root
        .get("pg_config")
        .and_then(Value::as_dict)
        .unwrap_or(&[])
    {
        let Some(name) = key.as_str() else { continue };
        config.insert(name.to_owned(), value.get("ranks").and_then(parse_ranks));
    }
    let mut used: BTreeSet<String> = records.iter().map(|r| r.pg.clone()).collect();
    used.extend(status.keys().cloned());
    // Every group `pg_status` knows of, named or not, even one without a
    // collective yet: a dump that knows of several has `""` hold whichever
    // came last, never taken for the entries' group.
    if let Some(raw) = root.get("pg_status").and_then(Value::as_dict) {
        let others = raw.iter().filter(|(k, _)| k.as_str() != Some("0"));
        used.extend(others.filter_map(|(k, _)| k.as_str().map(|id| format!("pg_id {id}"))));
    }
    let unmatched_config: Vec<&String> = config.keys().filter(|k| !used.contains(*k)).collect();
    let unmatched_used: Vec<&String> = used.iter().filter(|u| !config.contains_key(*u)).collect();
    let alias = match (unmatched_config.as_slice(), unmatched_used.as_slice()) {
        ([from], [to]) => Some(((*from).clone(), (*to).clone())),
        _ => None,
    };
    let mut groups = BTreeMap::new();
    for (name, ranks) in config {
        let Some(ranks) = ranks else { continue };
        let name = match &alias {
            Some((from, to)) if *from == name => to.clone(),
            _ if name.is_empty() => continue,
            _ => name,
        };
        groups.insert(name, ranks);
    }
    groups
}

/// `pg_status`: each group's last enqueued, started and completed
/// collective (PyTorch writes them as numbers or as text, -1 for none), by
/// group name. PyTorch keys it by `pg_id`, the process's own count of the
/// groups it made (a rank outside a group counts the later ones otherwise
/// than its members): a key is named by the dump's entries of that
/// `pg_id`; without one, `0` is the default group and any other is left
/// out (whose it is, is not known).
fn read_status(root: &Value, entries: &[Value]) -> BTreeMap<String, GroupSeqs> {
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for entry in entries {
        if let Some(id) = entry.get("pg_id").and_then(Value::as_int) {
            names
                .entry(id.to_string())
                .or_insert_with(|| group_name(entry));
        }
    }
    let seq = |v: &Value, key: &str| -> Option<u64> {
        let v = v.get(key)?;
        let n = match v.as_str() {
            Some(text) => text.trim().parse::<i128>().ok()?,
            None => v.as_int()?,
        };
        u64::try_from(n).ok().filter(|&n| n > 0)
    };
    let mut out = BTreeMap::new();
    for (key, value) in root
        .get("pg_status")
        .and_then(Value::as_dict)
        .unwrap_or(&[])
    {
        let Some(id) = key.as_str() else { continue };
        let name = match names.get(id) {
            Some(name) => name.as_str(),
            None if id == "0" => "0",
            None => continue,
        };
        let Some(entered) = seq(value, "last_enqueued_collective") else {
            continue;
        };
        let seqs = GroupSeqs {
            entered,
            started: seq(value, "last_started_collective"),
            completed: seq(value, "last_completed_collective"),
        };
        if seqs.plausible() {
            out.insert(name.to_owned(), seqs);
        }
    }
    out
}

/// `"[0, 1, 2, 3]"` (how PyTorch writes them) or a list of integers.
fn parse_ranks(v: &Value) -> Option<Vec<usize>> {
    let mut ranks: Vec<usize> = match v {
        Value::Str(text) => {
            let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
            if inner.trim().is_empty() {
                return None;
            }
            inner
                .split(',')
                .map(|r| r.trim().parse().ok())
                .collect::<Option<_>>()?
        }
        _ => v
            .as_seq()?
            .iter()
            .map(|r| r.as_int().and_then(|r| usize::try_from(r).ok()))
            .collect::<Option<_>>()?,
    };
    ranks.sort_unstable();
    ranks.dedup();
    Some(ranks)
}

/// The default group's size where it is known, else one more than the
/// highest rank any group names.
fn world_size(groups: &BTreeMap<String, Vec<usize>>) -> Option<usize> {
    if let Some(world) = groups.get("0") {
        if world.iter().copied().eq(0..world.len()) {
            return Some(world.len());
        }
    }
    groups.values().flatten().max().map(|&r| r + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    fn dict(pairs: Vec<(&str, Value)>) -> Value {
        Value::Dict(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
    }

    fn entry(pg: &str, seq: i64, name: &str) -> Value {
        dict(vec![
            ("record_id", Value::Int(seq - 1)),
            ("process_group", Value::Tuple(vec![s(pg), s("default_pg")])),
            ("collective_seq_id", Value::Int(seq)),
            ("profiling_name", s(name)),
            ("state", s("scheduled")),
            (
                "input_sizes",
                Value::List(vec![Value::List(vec![Value::Int(1024)])]),
            ),
            ("input_dtypes", Value::List(vec![s("Float")])),
            ("time_created_ns", Value::Int(5)),
            ("time_discovered_started_ns", Value::None),
            ("time_discovered_completed_ns", Value::Int(0)),
        ])
    }

    #[test]
    fn gloo_empty_pg_config_name_maps_to_the_entries_group() {
        let config = dict(vec![("", dict(vec![("ranks", s("[0, 1, 2, 3]"))]))]);
        let root = dict(vec![
            ("version", s("2.10")),
            ("pg_config", config),
            (
                "entries",
                Value::List(vec![entry("0", 1, "gloo:all_reduce")]),
            ),
        ]);
        let dump = read_dump(&root, Path::new("dir/rank2"), Format::PytorchPickle).unwrap();
        assert_eq!(dump.rank, 2);
        assert_eq!(dump.world_size, Some(4));
        assert_eq!(dump.groups.get("0"), Some(&vec![0, 1, 2, 3]));
        let r = &dump.records[0];
        assert_eq!(
            (r.op.as_str(), r.seq, r.state),
            ("all_reduce", 1, State::Scheduled)
        );
        assert_eq!(r.input_sizes, vec![vec![1024]]);
        assert_eq!(
            (r.t_scheduled_ns, r.t_started_ns, r.t_completed_ns),
            (Some(5), None, None)
        );
        assert!(!dump.wrapped);
    }

    #[test]
    fn p2p_entries_and_wrapped_buffers() {
        let mut send = entry("0", 3, "nccl:send 0->1");
        if let Value::Dict(pairs) = &mut send {
            pairs.push((s("record_id"), Value::Int(40)));
            pairs.push((s("p2p_seq_id"), Value::Int(7)));
        }
        let root = dict(vec![("entries", Value::List(vec![send]))]);
        let dump = read_dump(&root, Path::new("nccl_trace_rank_12"), Format::PytorchJson).unwrap();
        assert_eq!(dump.rank, 12);
        assert_eq!(dump.records[0].p2p_seq, Some(7));
        assert!(dump.wrapped);
        assert_eq!(dump.world_size, None);
    }

    /// `pg_status` as PyTorch writes it: keyed by `pg_id`, numbers as text
    /// (JSON) or integers (pickle), -1 for none; a group without any
    /// enqueued collective is left out. Keys are named by the entries of
    /// their `pg_id` (`1` here is the group named `5`: this rank made
    /// fewer groups than others); `0` without one is the default group;
    /// another without one is not known, and left out.
    #[test]
    fn pg_status_gives_each_groups_newest_seqs() {
        let with_id = |pg: &str, id: i64, seq: i64| {
            let Value::Dict(mut fields) = entry(pg, seq, "nccl:all_reduce") else {
                unreachable!("an entry is a dict")
            };
            fields.push((s("pg_id"), Value::Int(id)));
            Value::Dict(fields)
        };
        let status = |enq: Value, start: Value, done: Value| {
            dict(vec![
                ("last_enqueued_collective", enq),
                ("last_started_collective", start),
                ("last_completed_collective", done),
            ])
        };
        let root = dict(vec![
            ("rank", Value::Int(1)),
            (
                "entries",
                Value::List(vec![entry("0", 9, "nccl:all_reduce"), with_id("5", 1, 2)]),
            ),
            (
                "pg_status",
                Value::Dict(vec![
                    (s("0"), status(s("12"), s("-1"), s("11"))),
                    (s("1"), status(Value::Int(4), Value::Int(4), Value::Int(3))),
                    (s("2"), status(s("-1"), s("-1"), s("-1"))),
                    (s("3"), status(s("7"), s("7"), s("7"))),
                ]),
            ),
        ]);
        let dump = read_dump(&root, Path::new("rank1"), Format::PytorchJson).unwrap();
        let seqs = |e, st, c| GroupSeqs {
            entered: e,
            started: st,
            completed: c,
        };
        assert_eq!(dump.status.get("0"), Some(&seqs(12, None, Some(11))));
        assert_eq!(dump.status.get("5"), Some(&seqs(4, Some(4), Some(3))));
        assert_eq!(dump.status.len(), 2, "{:?}", dump.status);
    }

    #[test]
    fn rank_comes_from_the_file_name() {
        assert_eq!(rank_from_file_name(Path::new("a/rank3.json")), Some(3));
        assert_eq!(
            rank_from_file_name(Path::new("nccl_trace_rank_10")),
            Some(10)
        );
        assert_eq!(rank_from_file_name(Path::new("dump.pkl")), None);
        // A name that is not UTF-8 still ends with its rank.
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"nccl_trace_\xe9_rank_3");
        assert_eq!(rank_from_file_name(Path::new(odd)), Some(3));
        // A pipe's descriptor number is no rank.
        assert_eq!(rank_from_file_name(Path::new("/dev/fd/63")), None);
        assert_eq!(rank_from_file_name(Path::new("/proc/self/fd/12")), None);
        let root = dict(vec![("entries", Value::List(vec![]))]);
        assert!(read_dump(&root, Path::new("trace"), Format::PytorchJson).is_err());
    }

    #[test]
    fn bad_entries_are_errors() {
        let mut bad = entry("0", 1, "nccl:all_reduce");
        if let Value::Dict(pairs) = &mut bad {
            pairs.push((s("state"), s("exploded")));
        }
        let root = dict(vec![("entries", Value::List(vec![bad]))]);
        let err = read_dump(&root, Path::new("rank0"), Format::PytorchJson)
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry 0") && err.contains("exploded"), "{err}");
    }

    #[test]
    fn fields_of_a_type_pytorch_never_writes_are_errors_not_data() {
        let with = |k: &str, v: Value| {
            let Value::Dict(mut pairs) = entry("0", 1, "nccl:all_reduce") else {
                unreachable!()
            };
            pairs.retain(|(key, _)| key.as_str() != Some(k));
            pairs.push((s(k), v));
            read_entry(&Value::Dict(pairs)).map_err(|e| e.to_string())
        };
        let list = |v: Vec<Value>| Value::List(v);
        for (k, v, want) in [
            (
                "input_sizes",
                s("x"),
                "input_sizes is of type str, not a list of shapes",
            ),
            (
                "output_sizes",
                list(vec![s("x")]),
                "output_sizes is of type str, not a list of shapes",
            ),
            (
                "input_sizes",
                list(vec![list(vec![Value::Float(1.5)])]),
                "not a list of shapes of integers",
            ),
            (
                "profiling_name",
                Value::Int(5),
                "profiling_name is of type int, not a string",
            ),
            (
                "input_dtypes",
                list(vec![Value::None]),
                "input_dtypes is of type None",
            ),
        ] {
            let e = with(k, v).unwrap_err();
            assert!(e.contains(want), "{k}: {e}");
        }
        // None where a field may be missing, and the types PyTorch writes.
        assert!(with("input_sizes", Value::None).is_ok());
        assert!(with("output_dtypes", list(vec![s("Float")])).is_ok());
    }

    #[test]
    fn a_sequence_number_that_is_not_a_whole_number_says_what_it_is() {
        let with = |v: Value| {
            let Value::Dict(mut pairs) = entry("0", 1, "nccl:all_reduce") else {
                unreachable!()
            };
            pairs.retain(|(k, _)| k.as_str() != Some("collective_seq_id"));
            pairs.push((s("collective_seq_id"), v));
            read_entry(&Value::Dict(pairs)).unwrap_err().to_string()
        };
        assert!(with(Value::Float(1.5)).contains("is a float"));
        assert!(with(Value::Float(1.2e44)).contains("is a number too large"));
        assert!(with(Value::Float(-1e19)).contains("is a number too large"));
        assert!(with(Value::Float(1e18)).contains("is a float"));
        assert!(with(Value::HugeInt("1".repeat(40))).contains("an integer too large"));
        assert!(with(s("seven")).contains("is a string"));
        assert!(with(Value::Int(-1)).starts_with("bad collective_seq_id -1 "));
        assert_eq!(
            with(Value::BigInt(i128::from(u64::MAX))),
            "bad collective_seq_id 18446744073709551615 (PyTorch's are from 0 to 2^63 - 1)"
        );
        let Value::Dict(mut pairs) = entry("0", 1, "nccl:all_reduce") else {
            unreachable!()
        };
        pairs.retain(|(k, _)| k.as_str() != Some("collective_seq_id"));
        pairs.push((s("collective_seq_id"), Value::Int(i64::MAX)));
        assert_eq!(
            read_entry(&Value::Dict(pairs)).unwrap().seq,
            i64::MAX as u64
        );
        let Value::Dict(mut pairs) = entry("0", 1, "x") else {
            unreachable!()
        };
        pairs.retain(|(k, _)| k.as_str() != Some("collective_seq_id"));
        assert_eq!(
            read_entry(&Value::Dict(pairs)).unwrap_err(),
            EntryError::NoSeq
        );
    }
}
