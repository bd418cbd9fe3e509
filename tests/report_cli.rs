//! Integration tests of the reports people read and CI gates: plots,
//! nccl-tests text, Markdown, `report`, `compare` and `qualify` with JUnit,
//! driving the real binary.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn collbench() -> Command {
    Command::cargo_bin("collbench").expect("binary builds")
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Out {
    let out = collbench().args(args).output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const TINY: [&str; 6] = ["--sizes", "8B:64K:x8", "--iters", "2", "--warmup", "1"];

/// A tiny all-reduce sweep (both algorithms) saved as JSON in `dir`.
fn sweep_json(dir: &Path, name: &str) -> PathBuf {
    let json = dir.join(name);
    let mut args = vec![
        "all-reduce",
        "--ranks",
        "3",
        "--algo",
        "ring,tree",
        "-q",
        "--json",
        s(&json),
    ];
    args.extend(TINY);
    let o = run(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    json
}

/// The PNG's width and height from its IHDR chunk, if it is a PNG.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") || bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    let be = |r: std::ops::Range<usize>| u32::from_be_bytes(bytes[r].try_into().unwrap());
    Some((be(16..20), be(20..24)))
}

#[test]
fn sweep_writes_a_real_png_and_nccl_tests_text() {
    let dir = tempfile::tempdir().unwrap();
    let (png, json) = (dir.path().join("a.png"), dir.path().join("a.json"));
    let mut args = vec![
        "all-reduce",
        "--ranks",
        "3",
        "--plot",
        s(&png),
        "--format",
        "nccl-tests",
        "--json",
        s(&json),
    ];
    args.extend(TINY);
    let o = run(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(png_size(&bytes), Some((1800, 820)));
    assert!(
        bytes.len() > 20_000,
        "a plot with text and lines: {} bytes",
        bytes.len()
    );
    assert!(bytes.ends_with(b"IEND\xae\x42\x60\x82"));
    for want in [
        "# nThread 1 nGpus 3 minBytes 8 maxBytes 32768",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : ",
    ] {
        assert!(o.stdout.contains(want), "missing '{want}' in:\n{}", o.stdout);
    }
    let rows: Vec<&str> = o.stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 5, "{}", o.stdout);
    assert!(
        rows.iter().all(|l| l.split_whitespace().count() == 13),
        "{}",
        o.stdout
    );
    assert!(json.exists());
}

#[test]
fn markdown_format_and_slowest_rank_with_v() {
    let mut args = vec!["all-gather", "--ranks", "2", "--format", "markdown", "-v"];
    args.extend(TINY);
    let o = run(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("### all-gather (builtin engine)"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("| slowest rank |"), "{}", o.stdout);
    assert!(
        o.stdout.contains("**Wrong or NaN/Inf values:** OK"),
        "{}",
        o.stdout
    );
    let mut args = vec!["all-reduce", "--ranks", "3", "-v"];
    args.extend(TINY);
    let o = run(&args);
    assert!(o.stdout.contains("slowest: rank "), "{}", o.stdout);
}

#[test]
fn results_keep_per_rank_times() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "a.json");
    let v: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["per_rank_us"].as_array().unwrap().len(), 3, "{r}");
        assert!(r["stats"]["outliers"].is_u64(), "{r}");
    }
}

#[test]
fn report_rerenders_and_overlays_saved_results() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    let b = sweep_json(dir.path(), "b.json");
    let svg = dir.path().join("r.svg");
    let o = run(&["report", s(&a), "--plot", s(&svg)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("# all-reduce (builtin engine)"),
        "{}",
        o.stdout
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "not an SVG");
    for want in [
        "message size (bytes, log2 scale)",
        "bus bandwidth (GB/s",
        "time per iteration",
        "all-reduce ring builtin",
        "all-reduce tree builtin",
    ] {
        assert!(text.contains(want), "missing '{want}' in the SVG");
    }
    let (png, csv) = (dir.path().join("o.png"), dir.path().join("o.csv"));
    let o = run(&[
        "report",
        s(&a),
        s(&b),
        "--plot",
        s(&png),
        "--csv",
        s(&csv),
        "--format",
        "nccl-tests",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout.matches("# Out of bounds values : 0 OK").count(),
        4,
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(&format!("# {}", a.display())),
        "{}",
        o.stdout
    );
    assert!(png_size(&std::fs::read(&png).unwrap()).is_some());
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 20, "{csv}");
    let svg2 = dir.path().join("o.svg");
    let o = run(&[
        "report",
        s(&a),
        s(&b),
        "--plot",
        s(&svg2),
        "-q",
        "--format",
        "markdown",
    ]);
    assert_eq!((o.code, o.stdout.as_str()), (0, ""), "{}", o.stderr);
    assert!(std::fs::read_to_string(&svg2)
        .unwrap()
        .contains("b: all-reduce tree builtin"));
}

/// `src` with every time doubled (and bandwidths halved), written to `dst`.
fn doubled(src: &Path, dst: &Path) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    for r in v["rows"].as_array_mut().unwrap() {
        for (k, f) in [("time_us", 2.0), ("algbw_gbps", 0.5), ("busbw_gbps", 0.5)] {
            r[k] = Value::from(r[k].as_f64().unwrap() * f);
        }
    }
    std::fs::write(dst, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn compare_passes_on_itself_and_fails_on_doubled_times() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    let o = run(&["compare", s(&a), s(&a)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("20 row(s) compared") && o.stdout.contains("0 regressed"),
        "{}",
        o.stdout
    );
    let slow = dir.path().join("slow.json");
    doubled(&a, &slow);
    let o = run(&["compare", s(&a), s(&slow), "--max-regression", "10"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("REGRESSED") && o.stdout.contains("+100.0%"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("20 regressed by more than 10%"),
        "{}",
        o.stdout
    );
    // Faster is never a regression.
    assert_eq!(run(&["compare", s(&slow), s(&a)]).code, 0);
    assert_eq!(
        run(&["compare", s(&a), s(&slow), "--max-regression", "150"]).code,
        0
    );
}

#[test]
fn unreadable_results_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    let notjson = dir.path().join("notjson.json");
    std::fs::write(&notjson, "hello").unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, r#"{"schema": "other/1", "meta": {}, "rows": []}"#).unwrap();
    let other = dir.path().join("other.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    for r in v["rows"].as_array_mut().unwrap() {
        r["dtype"] = Value::from("double");
    }
    std::fs::write(&other, serde_json::to_vec(&v).unwrap()).unwrap();
    let missing = dir.path().join("missing.json");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["compare", s(&a), s(&missing)],
            format!("{}:", missing.display()),
        ),
        (
            vec!["compare", s(&notjson), s(&a)],
            "notjson.json: not a collbench results file".into(),
        ),
        (vec!["compare", s(&a), s(&schema)], "schema.json: ".into()),
        (
            vec!["compare", s(&a), s(&other)],
            "nothing to compare".into(),
        ),
        (
            vec!["compare", s(&a), s(&a), "--max-regression", "-3"],
            "not a percentage".into(),
        ),
        (
            vec!["report", s(&a), s(&notjson)],
            "notjson.json: not a collbench results file".into(),
        ),
        (vec!["report", s(&missing)], "missing.json".into()),
        (
            vec!["report", s(&a), "--plot", "x.jpg"],
            ".png or .svg".into(),
        ),
        (
            vec!["report", s(&a), "--format", "html"],
            "invalid value 'html' for '--format <FORMAT>' [possible values: table, nccl-tests, markdown]".into(),
        ),
        (vec!["all-reduce", "--plot", "x.gif"], ".png or .svg".into()),
        (
            vec!["all-reduce", "--format", "xml"],
            "invalid value 'xml' for '--format".into(),
        ),
    ];
    for (args, why) in cases {
        let o = run(&args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains(&why),
            "{args:?}: expected '{why}' in: {}",
            o.stderr
        );
        assert_eq!(
            o.stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
    }
}

#[test]
fn sizes_that_do_not_fit_are_dropped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cap.json");
    let o = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--sizes",
        "1K:4T:x65536",
        "--iters",
        "1",
        "--warmup",
        "0",
        "-q",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("warning: 1 size(s) from 4TiB up skipped"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("stops at 64MiB"), "{}", o.stderr);
    let v: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    assert!(
        v["meta"]["notes"].to_string().contains("4TiB up skipped"),
        "{}",
        v["meta"]
    );
}

const POSSIBLE: &str = r#"
[[check]]
name = "all-reduce latency"
collective = "all-reduce"
device = "host"
ranks = 2
sizes = "8B:64K:x8"
iters = 2
warmup = 1
max_time_us = 1e9
"#;

const IMPOSSIBLE: &str = r#"
[[check]]
name = "all-gather at a petabyte per second"
collective = "all-gather"
device = "host"
ranks = 2
sizes = "1K:64K:x8"
iters = 2
warmup = 1
min_busbw_gbps = 1e6
"#;

#[test]
fn qualify_writes_junit_with_a_case_per_check() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, junit) = (dir.path().join("spec.toml"), dir.path().join("j.xml"));
    std::fs::write(&spec, format!("{POSSIBLE}{IMPOSSIBLE}")).unwrap();
    let o = run(&["qualify", s(&spec), "--junit", s(&junit)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("all-reduce latency") && o.stdout.contains("PASS"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("FAIL") && o.stdout.contains(">= 1000000 GB/s"),
        "{}",
        o.stdout
    );
    assert!(
        o.stderr.contains("running it once more"),
        "a failing check is re-run: {}",
        o.stderr
    );
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.starts_with("<?xml"), "{x}");
    assert_eq!(x.matches("<testcase ").count(), 2, "{x}");
    assert_eq!(x.matches("<failure ").count(), 1, "{x}");
    assert!(x.contains("tests=\"2\" failures=\"1\" errors=\"0\""), "{x}");
    assert!(x.contains("expected &gt;= 1000000 GB/s"), "{x}");
    std::fs::write(&spec, POSSIBLE).unwrap();
    assert_eq!(run(&["qualify", s(&spec)]).code, 0);
}

#[test]
fn bad_specs_exit_2_with_one_line_and_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    let cases = [
        ("[[check]\n", "spec.toml: line 1"),
        (
            &*POSSIBLE.replace("ranks = 2", "ranks = 2\ncolour = \"red\""),
            "unknown field `colour`",
        ),
        (
            &*POSSIBLE.replace("max_time_us = 1e9", "max_time_us = -5.0"),
            "max_time_us must be a positive number",
        ),
        (
            &*POSSIBLE.replace("max_time_us = 1e9", ""),
            "has no threshold",
        ),
        (
            &*POSSIBLE.replace("\"all-reduce\"", "\"all-reducer\""),
            "unknown collective 'all-reducer'",
        ),
        (
            &*POSSIBLE.replace("8B:64K:x8", "64K:8B"),
            "check 1 (all-reduce latency): --sizes",
        ),
        (
            &*POSSIBLE.replace("iters = 2", "iters = 2\ndtype = \"float7\""),
            "unknown --dtype 'float7'",
        ),
    ];
    for (text, why) in cases {
        std::fs::write(&spec, format!("{text}{IMPOSSIBLE}")).unwrap();
        let o = run(&["qualify", s(&spec)]);
        assert_eq!(o.code, 2, "{text}: {}", o.stderr);
        assert!(o.stderr.contains(why), "expected '{why}' in: {}", o.stderr);
        assert_eq!(
            o.stderr.trim().lines().count(),
            1,
            "one line, nothing run: {}",
            o.stderr
        );
    }
    let o = run(&["qualify", s(&dir.path().join("missing.toml"))]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("missing.toml"), "{}", o.stderr);
}

#[test]
fn checks_this_build_cannot_run_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, junit) = (dir.path().join("spec.toml"), dir.path().join("j.xml"));
    let gpu = POSSIBLE
        .replace("\"host\"", "\"cuda\"")
        .replace("all-reduce latency", "gpu");
    std::fs::write(&spec, format!("{POSSIBLE}{gpu}")).unwrap();
    let o = run(&["qualify", s(&spec), "--junit", s(&junit)]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("ERROR") && o.stdout.contains("--device cuda"),
        "{}",
        o.stdout
    );
    let x = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(x.matches("<testcase ").count(), 2, "{x}");
    assert!(
        x.contains("errors=\"1\"") && x.contains("<error message=\"cannot run here: --device cuda"),
        "{x}"
    );
}

#[test]
fn example_spec_in_scripts_parses() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/qualify-example.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains("[[check]]"));
    // Run a copy with every sweep made tiny: the thresholds may or may not
    // hold on this machine, but the spec must be valid and runnable.
    let dir = tempfile::tempdir().unwrap();
    let tiny = dir.path().join("tiny.toml");
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("sizes") {
                "sizes = \"8B:1K:x8\""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&tiny, text).unwrap();
    let o = run(&["qualify", s(&tiny)]);
    assert_ne!(o.code, 2, "the example must be a valid spec: {}", o.stderr);
}

#[test]
fn readme_spec_example_is_valid() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("```toml\n")
        .expect("a toml block in the README")
        + 8;
    let len = readme[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("readme.toml");
    std::fs::write(&spec, &readme[start..start + len]).unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_ne!(o.code, 2, "{}", o.stderr);
    assert!(o.stdout.contains("2 check(s)"), "{}", o.stdout);
}
