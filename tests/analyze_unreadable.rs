//! Files the analyzer cannot use (truncated, empty, oversized, foreign) are
//! listed with the reason while the others are analysed; pickles that would
//! run code are read as inert data.

use std::path::{Path, PathBuf};

use collbench::analyze::{
    analyze_paths, analyze_paths_with, render_text, AnalyzeError, Limits, Verdict,
};
use serde_json::json;
use tempfile::TempDir;

/// A healthy collbench dump of `rank` in a world of 2.
fn collbench_dump(rank: usize) -> Vec<u8> {
    let entries: Vec<serde_json::Value> = (1..=3u64)
        .map(|seq| {
            json!({"pg": "0", "seq": seq, "collective": "all-reduce", "dtype": "f32", "count": 8,
                   "state": "completed", "iteration": "timed", "t_scheduled_ns": 1000 * seq,
                   "t_started_ns": 1000 * seq + 1, "t_completed_ns": 1000 * seq + 2})
        })
        .collect();
    let dump = json!({
        "schema": "collbench.fr/1", "host": "h", "pid": 1, "rank": rank, "world_size": 2,
        "device": "host", "command": "collbench all-reduce", "version": "0.1.0", "reason": "exit",
        "clocks": {"wall_ns": 0, "mono_ns": 0}, "capacity": 16,
        "groups": [{"name": "0", "ranks": [0, 1]}], "entries": entries,
    });
    serde_json::to_vec_pretty(&dump).unwrap()
}

/// A PyTorch-shaped dump of `rank` in a world of 2, as a JSON tree; string
/// values starting `!reduce:` become a pickled call of `posix.system`.
fn pytorch_dump(frames: serde_json::Value) -> serde_json::Value {
    let entry = |seq: u64| {
        json!({"record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
               "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "is_p2p": false,
               "profiling_name": "nccl:all_reduce", "time_created_ns": 1_795_290_437_666_131_445u64 + seq,
               "input_sizes": [[1024]], "input_dtypes": ["Float"],
               "output_sizes": [[1024]], "output_dtypes": ["Float"], "state": "completed",
               "time_discovered_started_ns": null, "time_discovered_completed_ns": null,
               "retired": true, "timeout_ms": 600_000, "frames": frames})
    };
    json!({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
           "pg_status": {}, "entries": [entry(1), entry(2)]})
}

/// A protocol-2 pickle of a JSON tree (the opcodes PyTorch's dumps use).
fn pickle(v: &serde_json::Value) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    encode(v, &mut out);
    out.push(b'.');
    out
}

fn encode(v: &serde_json::Value, out: &mut Vec<u8>) {
    match v {
        serde_json::Value::Null => out.push(b'N'),
        serde_json::Value::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i @ 0..=255) => out.extend([b'K', u8::try_from(i).unwrap()]),
            Some(i) => {
                out.extend([0x8a, 8]);
                out.extend(i.to_le_bytes());
            }
            None => panic!("unsupported number {n}"),
        },
        serde_json::Value::String(s) => {
            if let Some(cmd) = s.strip_prefix("!reduce:") {
                out.extend(b"cposix\nsystem\n");
                encode(&json!(cmd), out);
                out.extend([0x85, b'R']); // TUPLE1, REDUCE
                return;
            }
            out.push(b'X');
            out.extend(u32::try_from(s.len()).unwrap().to_le_bytes());
            out.extend(s.as_bytes());
        }
        serde_json::Value::Array(items) => {
            out.extend([b']', b'(']);
            items.iter().for_each(|i| encode(i, out));
            out.push(b'e');
        }
        serde_json::Value::Object(map) => {
            out.extend([b'}', b'(']);
            for (k, v) in map {
                encode(&json!(k), out);
                encode(v, out);
            }
            out.push(b'u');
        }
    }
}

fn reason_of<'a>(d: &'a collbench::analyze::Diagnosis, name: &str) -> &'a str {
    let u = d
        .unreadable
        .iter()
        .find(|u| Path::new(&u.path).ends_with(name));
    &u.unwrap_or_else(|| panic!("{name} not listed: {:#?}", d.unreadable))
        .reason
}

#[test]
fn bad_files_are_listed_and_the_rest_analysed() {
    let dir = TempDir::new().unwrap();
    let p = |name: &str| dir.path().join(name);
    std::fs::write(p("rank0.json"), collbench_dump(0)).unwrap();
    std::fs::write(p("rank1.json"), collbench_dump(1)).unwrap();
    let full = collbench_dump(1);
    std::fs::write(p("truncated.json"), &full[..full.len() / 2]).unwrap();
    let pk = pickle(&pytorch_dump(json!([])));
    std::fs::write(p("nccl_trace_rank_1"), &pk[..pk.len() * 2 / 3]).unwrap();
    std::fs::write(p("empty"), b"").unwrap();
    std::fs::write(p("plot.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    std::fs::write(p("notes.txt"), b"rank 2 looked slow yesterday").unwrap();
    std::fs::write(p("huge.json"), vec![b' '; 70_000]).unwrap();
    std::fs::write(p("list.json"), b" [1, 2]\n").unwrap();
    let limits = Limits {
        max_file_bytes: 64 * 1024,
        ..Limits::default()
    };
    let d = analyze_paths_with(&[dir.path().to_path_buf()], &limits).unwrap();
    assert_eq!(d.verdict, Verdict::Healthy, "{}", render_text(&d));
    assert_eq!(d.ranks_found, vec![0, 1]);
    assert_eq!(d.unreadable.len(), 7, "{:#?}", d.unreadable);
    assert!(reason_of(&d, "truncated.json").contains("truncated JSON"));
    assert!(reason_of(&d, "nccl_trace_rank_1").contains("truncated"));
    assert_eq!(reason_of(&d, "empty"), "empty file");
    assert!(reason_of(&d, "plot.png").contains("PNG"));
    assert!(reason_of(&d, "notes.txt").contains("neither JSON nor a pickle"));
    assert!(reason_of(&d, "huge.json").contains("over the limit of 65536 bytes"));
    assert!(reason_of(&d, "list.json").contains("a JSON array, where a dump is a JSON object"));
    assert!(render_text(&d).contains("unreadable files"));
}

#[test]
fn nothing_readable_is_an_error_with_every_reason() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    std::fs::write(dir.path().join("junk"), [0x13, 0x37, 0xff, 0x00]).unwrap();
    let missing = dir.path().join("no-such-file");
    let err = analyze_paths(&[dir.path().to_path_buf(), missing]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let AnalyzeError::NothingReadable(list) = &err else {
        panic!("{err}")
    };
    assert_eq!(list.len(), 3, "{list:#?}");
    let text = err.to_string();
    assert!(
        text.contains("empty file") && text.contains("binary data starting 13 37 ff 00"),
        "{text}"
    );
    assert!(text.contains("no-such-file"), "{text}");

    let empty = TempDir::new().unwrap();
    let err = analyze_paths(&[empty.path().to_path_buf()]).unwrap_err();
    assert!(matches!(err, AnalyzeError::NoFiles(_)), "{err}");
    assert!(matches!(analyze_paths(&[]), Err(AnalyzeError::NoPaths)));
}

#[test]
fn pytorch_pickles_with_code_in_them_are_read_as_data() {
    let dir = TempDir::new().unwrap();
    let canary: PathBuf = dir.path().join("pwned");
    let cmd = format!("!reduce:touch {}", canary.display());
    let tree = pytorch_dump(json!([{"name": cmd.clone(), "line": 1}]));
    for rank in 0..2 {
        std::fs::write(
            dir.path().join(format!("nccl_trace_rank_{rank}")),
            pickle(&tree),
        )
        .unwrap();
    }
    // A pickle that is nothing but the call.
    std::fs::write(dir.path().join("exploit.pkl"), pickle(&json!(cmd))).unwrap();
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    assert!(!canary.exists());
    assert_eq!(d.verdict, Verdict::Healthy, "{}", render_text(&d));
    assert_eq!(d.ranks_found, vec![0, 1]);
    let reason = reason_of(&d, "exploit.pkl");
    assert!(reason.contains("not a flight-recorder dump"), "{reason}");
}

#[test]
fn pickle_bombs_are_refused() {
    let dir = TempDir::new().unwrap();
    // 100 000 nested lists: ] ] ] ... a a a .
    let mut deep = vec![0x80, 2];
    deep.extend(vec![b']'; 100_000]);
    deep.extend(vec![b'a'; 99_999]);
    deep.push(b'.');
    std::fs::write(dir.path().join("deep_rank0"), deep).unwrap();
    std::fs::write(dir.path().join("rank1.json"), collbench_dump(1)).unwrap();
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    assert!(reason_of(&d, "deep_rank0").contains("nests deeper than"));
    // Rank 0 of the world of 2 has no readable dump.
    assert_eq!(d.ranks_missing, vec![0]);
    assert_eq!(d.findings[0].kind.name(), "missing-dump");
}

/// A named pipe no process writes to is said to be one, not an "empty
/// file", and the analysis does not wait for a writer.
#[test]
fn a_pipe_without_a_writer_is_named() {
    let dir = TempDir::new().unwrap();
    let fifo = dir.path().join("nccl_trace_rank_1");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: mkfifo is not available here");
        return;
    }
    let rank0 = dir.path().join("rank0.json");
    std::fs::write(&rank0, collbench_dump(0)).unwrap();
    let d = analyze_paths(&[rank0, fifo]).unwrap();
    assert_eq!(
        reason_of(&d, "nccl_trace_rank_1"),
        "a named pipe that gave nothing (no process was writing to it)"
    );
}

/// In a folder, entries that are not files (a pipe, a socket, a link to
/// nothing) are named, not opened (a pipe would wait for a writer) and not
/// skipped in silence; a folder's subfolder's too.
#[test]
fn a_folders_pipes_sockets_and_dead_links_are_named() {
    let dir = TempDir::new().unwrap();
    let sub = dir.path().join("job");
    std::fs::create_dir(&sub).unwrap();
    let fifo = sub.join("nccl_trace_rank_1");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: mkfifo is not available here");
        return;
    }
    let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone.json"), dir.path().join("rank1.json"))
        .unwrap();
    std::fs::write(dir.path().join("rank0.json"), collbench_dump(0)).unwrap();
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(d.ranks_found, vec![0]);
    assert_eq!(d.unreadable.len(), 3, "{:#?}", d.unreadable);
    assert_eq!(
        reason_of(&d, "job/nccl_trace_rank_1"),
        "a named pipe, not read in a folder (name it on the command line to read it)"
    );
    assert!(reason_of(&d, "agent.sock").starts_with("a socket, not read"));
    assert_eq!(
        reason_of(&d, "rank1.json"),
        "a link to nothing (its target is missing)"
    );
}

/// A folder is read with its subfolders' files; folders deeper down are
/// named as not read, not skipped in silence.
#[test]
fn folders_deeper_than_one_level_are_named() {
    let dir = TempDir::new().unwrap();
    let deep = dir.path().join("job/json");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(dir.path().join("job/rank0.json"), collbench_dump(0)).unwrap();
    std::fs::write(deep.join("rank1.json"), collbench_dump(1)).unwrap();
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(d.ranks_found, vec![0]);
    assert!(
        reason_of(&d, "job/json").starts_with("a folder two levels down, not read"),
        "{:#?}",
        d.unreadable
    );
    // Named itself, it is read.
    let d = analyze_paths(&[dir.path().join("job"), deep]).unwrap();
    assert_eq!(d.ranks_found, vec![0, 1]);
    assert!(d.unreadable.is_empty(), "{:#?}", d.unreadable);
}

/// The trees copied out of the files share one budget: the floor is the
/// analysis's, not each file's, and each file grants bytes by its size.
#[test]
fn the_files_of_an_analysis_share_one_tree_budget() {
    let dir = TempDir::new().unwrap();
    let tree = pytorch_dump(json!([]));
    for (rank, form) in [(0, "json"), (1, "pickle")] {
        let bytes = match form {
            "json" => serde_json::to_vec(&tree).unwrap(),
            _ => pickle(&tree),
        };
        std::fs::write(dir.path().join(format!("nccl_trace_rank_{rank}")), bytes).unwrap();
    }
    let files = |ranks: &[usize]| -> Vec<PathBuf> {
        ranks
            .iter()
            .map(|r| dir.path().join(format!("nccl_trace_rank_{r}")))
            .collect()
    };
    let limits = |floor: u64, per_byte: u64| Limits {
        tree_floor_bytes: floor,
        tree_bytes_per_byte: per_byte,
        ..Limits::default()
    };
    let readable = |ranks: &[usize], l: &Limits| {
        analyze_paths_with(&files(ranks), l).map_or(Vec::new(), |d| d.ranks_found)
    };
    // A tree takes more than a byte for each byte of its file (a value's
    // slot is 32 bytes): a byte a byte reads nothing; 64 read both.
    assert_eq!(readable(&[0, 1], &limits(0, 1)), Vec::<usize>::new());
    assert_eq!(readable(&[0, 1], &limits(0, 64)), vec![0, 1]);
    // The least floor that reads the larger tree alone does not read both.
    let least = |rank: usize| {
        let (mut lo, mut hi) = (0u64, 1 << 20);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if readable(&[rank], &limits(mid, 0)) == vec![rank] {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    };
    let (json_tree, pickle_tree) = (least(0), least(1));
    assert!(
        json_tree > 1_000 && pickle_tree > 1_000,
        "{json_tree} {pickle_tree}"
    );
    let floor = json_tree.max(pickle_tree);
    let d = analyze_paths_with(&files(&[0, 1]), &limits(floor, 0)).unwrap();
    assert_eq!(d.ranks_found.len(), 1, "{}", render_text(&d));
    assert_eq!(d.unreadable.len(), 1, "{:#?}", d.unreadable);
    let why = &d.unreadable[0].reason;
    assert!(
        why.starts_with("its values take more than") && why.contains("an analysis allows"),
        "{why}"
    );
    assert_eq!(
        readable(&[0, 1], &limits(json_tree + pickle_tree, 0)),
        vec![0, 1]
    );
}

/// Text from a dump (a field, a reason) reaches the terminal escaped: an
/// escape sequence or a bidirectional override in a file cannot clear the
/// screen or reorder the verdict.
#[test]
fn text_from_dumps_is_shown_escaped() {
    let dir = TempDir::new().unwrap();
    for rank in 0..2 {
        let mut d: serde_json::Value = serde_json::from_slice(&collbench_dump(rank)).unwrap();
        d["entries"][2]["collective"] = json!(format!("all-\u{1b}[2Jreduce{rank}\u{202E}"));
        std::fs::write(
            dir.path().join(format!("r-rank{rank}.json")),
            serde_json::to_vec(&d).unwrap(),
        )
        .unwrap();
    }
    let out = assert_cmd::Command::cargo_bin("collbench")
        .unwrap()
        .arg("analyze")
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let all = format!("{stdout}{stderr}");
    assert!(
        !all.contains('\u{1b}') && !all.contains('\u{202E}'),
        "{all:?}"
    );
    assert!(all.contains("all-\\u001b[2Jreduce"), "{all}");
    // --json: escaped too, and still JSON (a DEL, a C1 control and an
    // override are not escaped by JSON itself).
    for rank in 0..2 {
        let path = dir.path().join(format!("r-rank{rank}.json"));
        let mut d: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        d["entries"][2]["collective"] = json!(format!("all-\u{7f}\u{85}reduce{rank}\u{202E}"));
        std::fs::write(&path, serde_json::to_vec(&d).unwrap()).unwrap();
    }
    let out = assert_cmd::Command::cargo_bin("collbench")
        .unwrap()
        .arg("analyze")
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\u{7f}') && !text.contains('\u{202E}'),
        "{text:?}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["findings"].is_array(), "{v}");
}

#[test]
fn an_integer_past_two_to_the_64_is_said_too_large_not_a_float() {
    let dir = TempDir::new().unwrap();
    let text = serde_json::to_string(&pytorch_dump(json!([]))).unwrap();
    let huge = "123456789012345678901234567890123456789012345";
    let edited = text.replacen(
        "\"collective_seq_id\":1,",
        &format!("\"collective_seq_id\":{huge},"),
        1,
    );
    assert_ne!(edited, text, "the seq was not found in {text}");
    std::fs::write(dir.path().join("nccl_trace_rank_0.json"), edited).unwrap();
    std::fs::write(dir.path().join("nccl_trace_rank_1.json"), &text).unwrap();
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    let why = reason_of(&d, "nccl_trace_rank_0.json");
    assert!(
        why.contains("collective_seq_id is a number too large"),
        "{why}"
    );
    assert_eq!(d.ranks_found, vec![1]);
}
