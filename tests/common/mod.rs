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
