//! Shared by the end-to-end tests: running the binary and reading what it
//! writes (results, dumps).

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The binary under test.
pub fn collbench() -> Command {
    Command::cargo_bin("collbench").expect("binary builds")
}

/// Runs a short sweep (2 timed iterations, 1 warm-up, quiet) with its
/// results in a temporary JSON: (exit code, results or Null, stderr).
pub fn run_json(args: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args(args)
        .args(["--json", json.to_str().unwrap(), "-q"])
        .args(["--iters", "2", "--warmup", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v: Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

/// The rows of a results document.
pub fn rows(v: &Value) -> &Vec<Value> {
    v["rows"].as_array().expect("rows array")
}

/// A JSON file the run wrote.
pub fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{} written: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} parses: {e}", path.display()))
}

/// The path of rank `rank`'s end-of-run dump in `dir`: one run per folder
/// in these tests, so the one file named `<run_id>-rank<N>.json`.
pub fn dump_of(dir: &Path, rank: usize) -> PathBuf {
    let suffix = format!("-rank{rank}.json");
    let found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(&suffix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one dump of rank {rank} in {}: {found:?}",
        dir.display()
    );
    found[0].clone()
}

/// A reduce on 8 ranks of `device` whose step on rank 1 receives from
/// ranks 3 and 4 (the tree's root is 0): rank 3 delivers `late_ms` late,
/// rank 4 never comes. Checks exit 3, that rank 1's dump waits on rank 4
/// (the peer it still waits on, not the first it waited on), and that
/// `analyze` names rank 4 at group 0 seq 1. `cmd` makes the binary's
/// command (a test binary's own, with its environment).
pub fn a_multi_receive_hang_names_the_missing_peer(
    cmd: impl Fn() -> Command,
    device: &str,
    late_ms: u64,
    timeout: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let out = cmd()
        .args([
            "reduce",
            "--device",
            device,
            "--ranks",
            "8",
            "--channels",
            "1",
        ])
        .args([
            "--sizes",
            "1K",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--placement",
            "out",
        ])
        .args(["--timeout", timeout, "-q", "--dump-dir"])
        .arg(dir.path())
        .arg("--inject")
        .arg(format!("delay:rank=3,seq=1,ms={late_ms}"))
        .args(["--inject", "delay:rank=4,seq=1,ms=60000"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{device}: {err}");
    let d = read_json(&dump_of(dir.path(), 1));
    let waits: Vec<&Value> = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pg"] == "0")
        .flat_map(|e| e["channels"].as_array().into_iter().flatten())
        .map(|c| &c["waiting_on"]["peer"])
        .collect();
    assert_eq!(waits, [&Value::from(4)], "{device}: {err}\n{d}");
    let out = cmd()
        .arg("analyze")
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["culprits"], serde_json::json!([4]), "{device}: {d}");
    let first = &d["findings"][0];
    assert_eq!(
        (&first["pg"], &first["seq"]),
        (&"0".into(), &1.into()),
        "{device}: {d}"
    );
}
