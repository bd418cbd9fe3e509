//! Integration tests of the reports people read and CI gates: plots,
//! nccl-tests text, Markdown, `report`, `compare` and `qualify` with JUnit,
//! driving the real binary.

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;
use common::collbench;

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
    // `--csv -`: the CSV is stdout, the text goes to stderr.
    let o = run(&["report", s(&a), "--csv", "-"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("collective,engine,"), "{}", o.stdout);
    assert_eq!(o.stdout.lines().count(), 1 + 20, "{}", o.stdout);
    assert!(
        o.stderr.contains("# Wrong or NaN/Inf values"),
        "{}",
        o.stderr
    );
    // Two files in one CSV: each row says which it came from.
    assert!(csv.starts_with("source,collective,"), "{csv}");
    for f in [&a, &b] {
        let lead = format!("{},", f.display());
        assert_eq!(
            csv.lines().filter(|l| l.starts_with(&lead)).count(),
            20,
            "{csv}"
        );
    }
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
    // A zero has no ratio: not comparable, neither better nor ok.
    let zero = dir.path().join("zero.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    for k in ["time_us", "algbw_gbps", "busbw_gbps"] {
        v["rows"][0][k] = Value::from(0.0);
    }
    std::fs::write(&zero, serde_json::to_vec(&v).unwrap()).unwrap();
    for (base, cand) in [(&zero, &a), (&a, &zero)] {
        let o = run(&["compare", s(base), s(cand)]);
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains("not comparable (a zero)"), "{}", o.stdout);
        assert!(!o.stdout.contains("better"), "{}", o.stdout);
    }
    // Zeros in every row: nothing was compared, and a gate that compared
    // nothing must not pass.
    let zeros = dir.path().join("zeros.json");
    for r in v["rows"].as_array_mut().unwrap() {
        r["time_us"] = Value::from(0.0);
    }
    std::fs::write(&zeros, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["compare", s(&zeros), s(&a)]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("nothing to compare: each of the 20 matched row(s) has a zero"),
        "{}",
        o.stderr
    );
    // Its stdout's reader gone before it writes (`| head` that has had
    // enough), compare still says regressed by its exit code, not
    // SIGPIPE's 141; report still writes its files.
    let piped = |cmd: String| {
        let out = std::process::Command::new("bash")
            .args([
                "-c",
                &format!("(sleep 0.3; {cmd}) | true; echo ${{PIPESTATUS[0]}}"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let code = piped(format!(
        "'{}' compare '{}' '{}' --max-regression 10",
        bin.display(),
        s(&a),
        s(&slow)
    ));
    assert_eq!(code, "1");
    let csv = dir.path().join("both.csv");
    let code = piped(format!(
        "'{}' report '{}' '{}' --csv '{}' 2>/dev/null",
        bin.display(),
        s(&a),
        s(&slow),
        s(&csv)
    ));
    assert_eq!(code, "0");
    assert!(csv.exists(), "report's --csv not written");
    // Faster is never a regression.
    assert_eq!(run(&["compare", s(&slow), s(&a)]).code, 0);
    assert_eq!(
        run(&["compare", s(&a), s(&slow), "--max-regression", "150"]).code,
        0
    );
}

/// A JSONL without its end line (the sweep was killed before it wrote the
/// JSON) is never reported as a run that passed.
#[test]
fn report_of_a_killed_sweeps_jsonl_gives_no_passing_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "r.json");
    let jsonl = json.with_extension("jsonl");
    let o = run(&["report", s(&jsonl)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("# Wrong or NaN/Inf values : OK"),
        "{}",
        o.stdout
    );
    // As a SIGKILL leaves it: every row, no end line.
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let cut = dir.path().join("killed.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&cut, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let o = run(&["report", s(&cut)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("killed.jsonl: the run did not finish (run unfinished"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains(": OK"), "{}", o.stdout);
    assert!(o.stdout.contains("FAILED (run unfinished"), "{}", o.stdout);
    // nccl-tests' text: a run per algorithm; ring's ended before tree's
    // began, the last is the one left unfinished.
    let o = run(&["report", s(&cut), "--format", "nccl-tests"]);
    let last = o
        .stdout
        .lines()
        .rfind(|l| l.starts_with("# Out of bounds values"))
        .unwrap_or_default();
    assert!(
        last.starts_with("# Out of bounds values : 0 FAILED (run unfinished"),
        "{}",
        o.stdout
    );
    assert_eq!(o.stdout.matches("concluded").count(), 1, "{}", o.stdout);
    // compare fails it, whatever its rows (every one is there); qualify
    // never passes such rows.
    let o = run(&["compare", s(&json), s(&cut)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("the candidate did not finish (run unfinished"),
        "{}",
        o.stderr
    );
    assert_qualify_fails_unfinished(
        dir.path(),
        "all-reduce",
        "killed.jsonl",
        "max_time_us = 1e9",
    );
}

/// JSON and JSONL are told apart by what they hold, not their names: a
/// sweep's `--json r.jsonl` (JSON under that name) and its JSONL renamed
/// `.json` both read, and `-` reads standard input.
#[test]
fn results_read_by_what_they_hold_whatever_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "r.jsonl");
    let rows = dir.path().join("r.jsonl.jsonl");
    assert!(rows.exists(), "the sweep's JSONL beside it");
    let renamed = dir.path().join("rows.json");
    std::fs::copy(&rows, &renamed).unwrap();
    let want = run(&["report", s(&json)]);
    assert_eq!(want.code, 0, "{}", want.stderr);
    assert!(
        want.stdout.contains("# Wrong or NaN/Inf values : OK"),
        "{}",
        want.stdout
    );
    let o = run(&["report", s(&renamed)]);
    assert_eq!((o.code, &o.stdout), (0, &want.stdout), "{}", o.stderr);
    let piped = collbench()
        .args(["report", "-"])
        .pipe_stdin(&rows)
        .unwrap()
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&piped.stdout), want.stdout);
    let o = run(&["compare", s(&json), s(&renamed)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // A JSONL of its head alone (a sweep stopped before its first row),
    // under any name: an unfinished run, never a pass.
    let head = std::fs::read_to_string(&rows).unwrap();
    let head = head.lines().next().unwrap();
    let head_json = dir.path().join("head.json");
    std::fs::write(&head_json, format!("{head}\n")).unwrap();
    let o = run(&["report", s(&head_json)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("the run did not finish"), "{}", o.stderr);
    // A JSON with more after it is a JSON with trailing text, not a JSONL.
    let twice = dir.path().join("twice.json");
    let whole = std::fs::read_to_string(&json).unwrap();
    std::fs::write(&twice, format!("{whole}{whole}")).unwrap();
    let o = run(&["report", s(&twice)]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("trailing characters"), "{}", o.stderr);
}

/// A `qualify` check of `collective` in `log` (in `dir`) with `threshold`
/// fails, saying the results did not finish.
fn assert_qualify_fails_unfinished(dir: &Path, collective: &str, log: &str, threshold: &str) {
    let spec = dir.join("q.toml");
    std::fs::write(
        &spec,
        format!("[[check]]\ncollective = \"{collective}\"\nlog = \"{log}\"\n{threshold}\n"),
    )
    .unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("the results did not finish"),
        "{}",
        o.stdout
    );
}

/// Rows sharing a key: the first is compared, and a few warnings say so
/// (a file of repeated runs holds thousands, not a warning each).
#[test]
fn compare_tells_of_duplicate_rows_in_a_few_lines() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap().clone();
    let n = rows.len();
    v["rows"] = Value::from([rows.clone(), rows.clone(), rows].concat());
    let thrice = dir.path().join("thrice.json");
    std::fs::write(&thrice, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["compare", s(&a), s(&thrice)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let each = o
        .stderr
        .lines()
        .filter(|l| l.contains("two rows with one key"))
        .count();
    assert_eq!(each, 5, "{}", o.stderr);
    let more = format!("{} more rows share a key", 2 * n - 5);
    assert!(o.stderr.contains(&more), "{}", o.stderr);
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
    let edited = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
        edit(&mut v);
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        p
    };
    // A world no run has: the nccl-tests header would list every rank.
    let huge = edited("huge.json", &|v| {
        v["meta"]["world_size"] = Value::from(u64::MAX);
    });
    let negative = edited("negative.json", &|v| {
        v["rows"][1]["time_us"] = Value::from(-5.0)
    });
    let nobody = edited("nobody.json", &|v| v["meta"]["world_size"] = Value::from(0));
    let absurd = edited("absurd.json", &|v| {
        v["rows"][0]["time_us"] = Value::from(1e308)
    });
    let late = edited("late.json", &|v| {
        v["rows"][0]["last_arrival"] = serde_json::json!({"rank": 99, "late_us": 1.0})
    });
    let root = edited("root.json", &|v| v["rows"][0]["root"] = Value::from(-5));
    let wrong = edited("wrong.json", &|v| v["rows"][0]["wrong"] = Value::from(-7));
    let frob = edited("frob.json", &|v| {
        v["rows"][0]["collective"] = Value::from("frobnicate")
    });
    let f128 = edited("f128.json", &|v| {
        v["rows"][0]["dtype"] = Value::from("float128")
    });
    let noalgo = edited("noalgo.json", &|v| v["rows"][0]["algo"] = Value::from(""));
    let nan = edited("nan.json", &|v| {
        v["rows"][0]["wrong"] = Value::from(0);
        v["rows"][0]["nan"] = Value::from(3);
    });
    let missing = dir.path().join("missing.json");
    let svg = dir.path().join("absurd.svg");
    let csv = dir.path().join("a.csv");
    assert_eq!(run(&["report", s(&a), "-q", "--csv", s(&csv)]).code, 0);
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 8\n#\n        8   2  float  sum  -1  9.1  0.00  0.00  0  9.1  0.00  0.00  0\n# Avg bus bandwidth : 0\n",
    )
    .unwrap();
    let table = dir.path().join("table.json");
    let o = run(&["tune", "--from", s(&a), "--output", s(&table)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["report", s(&table)],
            "table.json: schema 'collbench.tuning/1' is not collbench.results/1 (a tuning table: `--tuning` and `collbench model` read it)".into(),
        ),
        (
            vec!["all-reduce", "--ranks", "2", "--tuning", s(&a)],
            "a.json: collbench results (schema 'collbench.results/1'), not a tuning table: fit one from them with `collbench tune --from RESULTS.json --output TABLE.json`".into(),
        ),
        (
            vec!["qualify", s(&a)],
            "a.json: JSON, where a spec is TOML ([[check]] tables); to judge saved results, write a spec whose check has log = \"a.json\"".into(),
        ),
        (
            vec!["report", s(&csv)],
            "a.csv: not a valid collbench results file: collbench's CSV, which holds rows without their run".into(),
        ),
        (
            vec!["qualify", s(&log)],
            "run.log: an nccl-tests log, where a spec is TOML ([[check]] tables); to judge saved results, write a spec whose check has log = \"run.log\"".into(),
        ),
        (
            vec!["report", s(&nobody)],
            "nobody.json: not a valid collbench results file: meta.world_size 0: a run has from 1"
                .into(),
        ),
        (
            vec!["report", s(&absurd), "--plot", s(&svg)],
            "row 1 (all-reduce 8 bytes): time_us is 1e308, not a time or bandwidth (0 to 1e12)"
                .into(),
        ),
        (
            vec!["compare", s(&a), s(&late)],
            "late.json: not a valid collbench results file: row 1 (all-reduce 8 bytes): last_arrival.rank 99 is not a rank of the 3".into(),
        ),
        (
            vec!["report", s(&root)],
            "row 1 (all-reduce 8 bytes): root -5 is not a rank of the 3 (nor -1, no root)".into(),
        ),
        (
            vec!["report", s(&frob), "--format", "nccl-tests"],
            "row 1 (frobnicate 8 bytes): collective 'frobnicate' is not one collbench writes".into(),
        ),
        (
            vec!["compare", s(&f128), s(&a)],
            "row 1 (all-reduce 8 bytes): dtype 'float128' is not one collbench writes".into(),
        ),
        (
            vec!["report", s(&noalgo)],
            "row 1 (all-reduce 8 bytes): algo is empty".into(),
        ),
        (
            vec!["compare", s(&wrong), s(&a)],
            "row 1 (all-reduce 8 bytes): wrong is -7, not a count".into(),
        ),
        (
            vec!["report", s(&nan)],
            "row 1 (all-reduce 8 bytes): nan is 3 but wrong 0 (NaN/Inf elements are counted among the wrong ones)".into(),
        ),
        (
            vec!["report", s(&huge), "--format", "nccl-tests"],
            "huge.json: not a valid collbench results file: meta.world_size 18446744073709551615".into(),
        ),
        (
            vec!["compare", s(&a), s(&negative)],
            "negative.json: not a valid collbench results file: row 2 (all-reduce".into(),
        ),
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
            vec!["compare", s(&a), s(&a), "--max-regression", "10%%"],
            "--max-regression '10%%' is not a percentage".into(),
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
    // A refused file draws nothing.
    assert!(!svg.exists());
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
    // `--junit -`: the XML alone on stdout, the table on stderr; no file `-`.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_collbench"))
        .current_dir(dir.path())
        .args(["qualify", "spec.toml", "--junit", "-"])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.starts_with("<?xml") && out.trim_end().ends_with("</testsuites>"),
        "{out}"
    );
    assert!(
        err.contains("all-reduce latency") && err.contains("PASS"),
        "{err}"
    );
    assert!(!dir.path().join("-").exists());
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
    // Link thresholds over saved results without links: nothing to judge.
    sweep_json(dir.path(), "saved.json");
    let links = "[[check]]\nname = \"saved\"\ncollective = \"all-reduce\"\nlog = \"saved.json\"\nmin_link_gbps = 1.0\n";
    std::fs::write(&spec, links).unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("check 1 (saved): saved.json holds no links"),
        "{}",
        o.stderr
    );
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

// ---- nccl-tests logs as input ----------------------------------------

use collbench::report::nccl_log::{parse_log, validate_one_run, LogRun};

const LOGS: [&str; 4] = [
    "genuine_2_17_N1_G4.log",
    "pkb_nccl_output.txt",
    "sb_nccl_allreduce.log",
    "sb_nccl_alltoall.log",
];

/// The genuine nccl-tests logs' folder, or None (and a message) when the
/// fixtures are not beside the repository, unless
/// `COLLBENCH_REQUIRE_FIXTURES=1`, which makes their absence a failure.
fn nccl_fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/nccl-tests");
    if dir.is_dir() {
        return Some(dir);
    }
    let required = std::env::var("COLLBENCH_REQUIRE_FIXTURES").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "fixtures missing at {} (COLLBENCH_REQUIRE_FIXTURES=1)",
        dir.display()
    );
    eprintln!("SKIPPED: fixtures not found at {}", dir.display());
    None
}

/// The runs of a log that have rows.
fn runs_of(text: &str) -> Vec<LogRun> {
    parse_log(text)
        .into_iter()
        .filter(|r| !r.rows.is_empty())
        .collect()
}

/// Equal to the digits collbench prints times with (nccl-tests' widths).
fn near_time(ours: f64, log: f64) -> bool {
    (ours - log).abs() <= 0.05 + 5e-4 * log.abs()
}

#[test]
fn report_on_nccl_tests_logs_reproduces_their_rows_and_averages() {
    let Some(dir) = nccl_fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for name in LOGS {
        let path = dir.join(name);
        let log = runs_of(&std::fs::read_to_string(&path).unwrap());
        let csv = tmp.path().join(format!("{name}.csv"));
        let o = run(&[
            "report",
            s(&path),
            "--format",
            "nccl-tests",
            "--csv",
            s(&csv),
        ]);
        assert_eq!(o.code, 0, "{name}: {}", o.stderr);
        let ours = runs_of(&o.stdout);
        assert_eq!(ours.len(), log.len(), "{name}: runs\n{}", o.stdout);
        assert_eq!(
            o.stdout.matches("# Avg bus bandwidth").count(),
            log.len(),
            "{name}"
        );
        for (a, b) in ours.iter().zip(&log) {
            assert_eq!(a.rows.len(), b.rows.len(), "{name}");
            for (x, y) in a.rows.iter().zip(&b.rows) {
                let op = if y.op.is_empty() { "none" } else { &y.op };
                assert_eq!(
                    (x.bytes, x.count, x.dtype.as_str(), x.op.as_str(), x.root),
                    (y.bytes, y.count, y.dtype.as_str(), op, y.root),
                    "{name} line {}",
                    y.line
                );
                assert_eq!(x.fields, 13, "collbench prints the 13-column layout");
                for (c, d) in [(&x.out, &y.out), (&x.inplace, &y.inplace)] {
                    assert!(
                        near_time(c.time_us, d.time_us),
                        "{name} line {}: {c:?} {d:?}",
                        y.line
                    );
                    assert_eq!(
                        (c.algbw_gbps, c.busbw_gbps, c.wrong),
                        (d.algbw_gbps, d.busbw_gbps, d.wrong),
                        "{name} line {}",
                        y.line
                    );
                }
            }
            // The log's own average line, as it printed it.
            assert_eq!(a.avg_text, b.avg_text, "{name}: the Avg bus bandwidth line");
            assert_eq!(a.world_size(), b.world_size(), "{name}");
        }
        let text = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let rows: usize = log.iter().map(|r| 2 * r.rows.len()).sum();
        assert_eq!(
            lines.len(),
            1 + rows,
            "{name}: a CSV row per size and placement"
        );
        // A log of several runs: a first column names each row's run.
        let (head, lead) = if log.len() > 1 {
            ("source,collective,", 1)
        } else {
            ("collective,", 0)
        };
        assert!(
            lines[0].starts_with(&format!(
                "{head}engine,algo,dtype,op,root,bytes,count,placement"
            )),
            "{name}: {}",
            lines[0]
        );
        let first = &log[0].rows[0];
        let f: Vec<&str> = lines[1].split(',').skip(lead).collect();
        assert_eq!(
            (f[1], f[2], f[6], f[7], f[8]),
            (
                "nccl-tests-log",
                "nccl",
                &*first.bytes.to_string(),
                &*first.count.to_string(),
                "out"
            ),
            "{name}: {}",
            lines[1]
        );
        assert_eq!(
            f[11].parse::<f64>().unwrap(),
            first.out.busbw_gbps,
            "{name}"
        );
        for format in ["table", "markdown"] {
            let o = run(&["report", s(&path), "--format", format]);
            assert_eq!(o.code, 0, "{name} {format}: {}", o.stderr);
            assert!(
                o.stdout.contains("nccl-tests-log"),
                "{name} {format}: {}",
                o.stdout
            );
        }
    }
}

#[test]
fn the_strict_validator_passes_collbench_output_and_genuine_runs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ag.json");
    let o = run(&[
        "all-gather",
        "--ranks",
        "4",
        "--sizes",
        "1K:64K",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--format",
        "nccl-tests",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let parsed = validate_one_run(&o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", o.stdout));
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(parsed.rows.len() * 2, rows.len());
    assert_eq!(parsed.world_size(), 4);
    for r in rows {
        let line = parsed
            .rows
            .iter()
            .find(|x| x.bytes == r["bytes"].as_u64().unwrap())
            .expect("a line per size");
        let cell = if r["placement"] == "out" {
            &line.out
        } else {
            &line.inplace
        };
        assert_eq!(line.count, r["count"].as_u64().unwrap());
        assert_eq!(
            (line.dtype.as_str(), line.op.as_str()),
            (r["dtype"].as_str().unwrap(), r["op"].as_str().unwrap())
        );
        assert_eq!(line.root, r["root"].as_i64().unwrap());
        assert_eq!(cell.wrong, Some(r["wrong"].as_i64().unwrap()));
        assert!((cell.busbw_gbps - r["busbw_gbps"].as_f64().unwrap()).abs() <= 0.005 + 1e-9);
    }
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let pkb = std::fs::read_to_string(fixtures.join("pkb_nccl_output.txt")).unwrap();
    assert_eq!(validate_one_run(&pkb).unwrap().rows.len(), 11);
    let genuine = std::fs::read_to_string(fixtures.join("genuine_2_17_N1_G4.log")).unwrap();
    let lines: Vec<&str> = genuine.lines().collect();
    let runs = parse_log(&genuine);
    assert_eq!(runs.len(), 5);
    for r in &runs {
        let one = lines[r.lines.clone()].join("\n");
        assert!(validate_one_run(&one).is_ok(), "{:?}", r.binary);
    }
    assert!(validate_one_run(&genuine).is_err(), "five runs are not one");
}

#[test]
fn compare_matches_a_log_against_collbench_results_ignoring_engine() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    let o = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--sizes",
        "1M:4M",
        "--dtype",
        "float",
        "--iters",
        "2",
        "--warmup",
        "1",
        "-q",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let pkb = fixtures.join("pkb_nccl_output.txt");
    // The log has sizes this run has not: missing rows fail the comparison...
    let o = run(&["compare", s(&pkb), s(&json), "--max-regression", "100"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("16 baseline row(s) missing"),
        "{}",
        o.stderr
    );
    // ... unless they are allowed.
    let o = run(&[
        "compare",
        s(&pkb),
        s(&json),
        "--max-regression",
        "100",
        "--allow-missing",
    ]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let first = o.stdout.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "matched on collective, dtype, op, root, bytes, placement, group members, split (engine and algorithm ignored: {} is an nccl-tests log)",
            pkb.display()
        )
    );
    assert!(
        o.stdout.contains("6 row(s) compared (6 by busbw")
            && o.stdout.contains("16 only in the baseline"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("all-reduce nccl float sum 1MiB out-of-place"),
        "{}",
        o.stdout
    );
    let o = run(&["compare", s(&json), s(&pkb), "--max-regression", "100"]);
    assert!(o.code == 0 || o.code == 1, "{}", o.stderr);
    assert!(
        o.stdout
            .lines()
            .next()
            .unwrap()
            .ends_with("pkb_nccl_output.txt is an nccl-tests log)"),
        "{}",
        o.stdout
    );
    // collbench results on both sides still match on every field.
    let o = run(&["compare", s(&json), s(&json)]);
    assert_eq!(o.code, 0);
    assert!(!o.stdout.contains("matched on"), "{}", o.stdout);
    // Nothing in common: exit 2, saying what rows were matched on.
    let alltoall = fixtures.join("sb_nccl_alltoall.log");
    let o = run(&["compare", s(&alltoall), s(&json)]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("nothing to compare")
            && o.stderr.contains("engine and algorithm ignored"),
        "{}",
        o.stderr
    );
}

#[test]
fn qualify_judges_a_log_check_without_a_sweep() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    std::fs::copy(
        fixtures.join("genuine_2_17_N1_G4.log"),
        dir.path().join("logs/h100.log"),
    )
    .unwrap();
    let (spec, junit) = (dir.path().join("spec.toml"), dir.path().join("j.xml"));
    let pass = "[[check]]\nname = \"h100 all-reduce\"\ncollective = \"all-reduce\"\nlog = \"logs/h100.log\"\nmin_busbw_gbps = 250.0\nmax_time_us = 1e6\n";
    let fail = "[[check]]\ncollective = \"all\"\nlog = \"logs/h100.log\"\nmin_busbw_gbps = 300.0\n";
    std::fs::write(&spec, pass).unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("h100 all-reduce") && o.stdout.contains("PASS"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("290.460 GB/s"),
        "the worst all-reduce row: {}",
        o.stdout
    );
    std::fs::write(&spec, format!("{pass}{fail}")).unwrap();
    let o = run(&["qualify", s(&spec), "--junit", s(&junit)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("all from logs/h100.log") && o.stdout.contains("148.540 GB/s"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("send-recv"),
        "the worst row over every run: {}",
        o.stdout
    );
    assert!(
        !o.stderr.contains("once more"),
        "a log is judged once: {}",
        o.stderr
    );
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.contains("tests=\"2\" failures=\"1\" errors=\"0\""), "{x}");
    // `sizes` picks the rows judged: from 1 GiB the all-reduce's worst
    // busbw is over 350 GB/s, which its 32 MiB rows are not.
    let floor = pass.replace("250.0", "350.0");
    let picked = floor.replace("max_time_us", "sizes = \"1G:16G\"\nmax_time_us");
    for (text, code, worst) in [(&floor, 1, "290.460 GB/s"), (&picked, 0, "353.650 GB/s")] {
        std::fs::write(&spec, text).unwrap();
        let o = run(&["qualify", s(&spec)]);
        assert_eq!(o.code, code, "{text}: {}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains(worst), "{worst}: {}", o.stdout);
    }
    for (text, why) in [
        (pass.replace("all-reduce\"\nlog", "gather\"\nlog"), "has no gather rows (it holds: all-reduce, all-gather, reduce-scatter, all-to-all, send-recv)"),
        (pass.replace("h100.log", "missing.log"), "missing.log"),
        (pass.replace("max_time_us", "dtype = \"float\"\nmax_time_us"), "`dtype` does not apply to a check with `log`"),
        (pass.replace("max_time_us", "ranks = 8\nmax_time_us"), "has no run at 8 rank(s) (it holds runs at 4)"),
        (pass.replace("max_time_us", "ranks = 0\nmax_time_us"), "ranks must be at least 1"),
        (pass.replace("max_time_us", "scalar = 3.0\nmax_time_us"), "`scalar` does not apply to a check with `log`"),
        (pass.replace("logs/h100.log", ""), "`log` is empty: name the file to judge"),
        (pass.replace("max_time_us", "sizes = \"1X\"\nmax_time_us"), "check 1 (h100 all-reduce): sizes:"),
        (pass.replace("max_time_us", "sizes = \"8:2M:x3\"\nmax_time_us"), "a step picks no rows from a log"),
        (pass.replace("max_time_us", "sizes = \"2M:1M\"\nmax_time_us"), "sizes '2M:1M': 2097152 B is above 1048576 B"),
        (pass.replace("max_time_us", "sizes = \"1K:64K\"\nmax_time_us"), "has no all-reduce rows from 1024 to 65536 B"),
    ] {
        std::fs::write(&spec, format!("{text}{fail}")).unwrap();
        let o = run(&["qualify", s(&spec)]);
        assert_eq!(o.code, 2, "{text}: {}", o.stderr);
        assert!(o.stderr.contains(why), "expected '{why}' in: {}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "one line, nothing judged: {}", o.stderr);
    }
}

/// The genuine log's all-reduce run, and beside it the same run as if on
/// 2 ranks (its first two device lines) with times scaled by `slower`.
fn two_world_log(slower: f64) -> Option<String> {
    let text = std::fs::read_to_string(nccl_fixtures()?.join("genuine_2_17_N1_G4.log")).unwrap();
    let end = text
        .find("# Collective test concluded: all_reduce_perf")
        .unwrap();
    let four = format!(
        "{}# Collective test concluded: all_reduce_perf\n#\n",
        &text[..end]
    );
    let mut two = String::new();
    for line in four.lines() {
        if line.starts_with("#  Rank  2") || line.starts_with("#  Rank  3") {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with('#') || f.len() != 13 {
            two.push_str(line);
        } else {
            // Rows: size count type redop root, then time algbw busbw wrong
            // twice; on 2 ranks an all-reduce's busbw is its algbw.
            two.push_str(&format!(
                "{:>12} {:>13} {:>9} {:>7} {:>7}",
                f[0], f[1], f[2], f[3], f[4]
            ));
            for side in [5, 9] {
                let t: f64 = f[side].parse::<f64>().unwrap() * slower;
                let bw = f[0].parse::<f64>().unwrap() / t / 1e3;
                two.push_str(&format!(" {t:>8.1} {bw:>7.2} {bw:>7.2} {:>7}", f[side + 3]));
            }
        }
        two.push('\n');
    }
    Some(format!("{two}\n{four}"))
}

#[test]
fn compare_and_qualify_tell_runs_of_a_log_apart_by_world_size() {
    let (Some(base), Some(slow)) = (two_world_log(1.0), two_world_log(2.0)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (b, c) = (dir.path().join("base.log"), dir.path().join("cand.log"));
    std::fs::write(&b, &base).unwrap();
    std::fs::write(&c, &slow).unwrap();
    // Each run matched with its own world size: the 2-rank run regressed
    // (every row twice as slow), the 4-rank run did not.
    let o = run(&["compare", s(&b), s(&c)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.starts_with(
            "matched on collective, dtype, op, root, bytes, placement, group members, split, world size (engine"
        ),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("40 row(s) compared (40 by busbw, at 1MiB and up; 0 by time); 20 regressed"),
        "{}",
        o.stdout
    );
    let regressed: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.contains("REGRESSED"))
        .collect();
    assert_eq!(regressed.len(), 20, "{}", o.stdout);
    assert!(
        regressed.iter().all(|l| l.contains("at 2 rank(s)")),
        "{}",
        o.stdout
    );
    assert!(
        !o.stderr.contains("share a key"),
        "no duplicates: {}",
        o.stderr
    );
    let o = run(&["compare", s(&b), s(&b)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // A single 4-rank run against the two: its rows meet their own world
    // size; the 2-rank rows are the candidate's only.
    let four = dir.path().join("four.log");
    let second = base.rfind("# nccl-tests version").unwrap();
    std::fs::write(&four, &base[second..]).unwrap();
    let o = run(&["compare", s(&four), s(&c)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("20 row(s) compared") && o.stdout.contains("20 only in the candidate"),
        "{}",
        o.stdout
    );
    assert!(
        o.stderr.contains(
            "world sizes: baseline 4 ranks, candidate 2, 4 (rows are matched at equal world size)"
        ),
        "{}",
        o.stderr
    );
    // qualify's `ranks` picks a log's runs: the 2-rank all-reduce's busbw
    // (its algbw, 193 GB/s and up) is not the 4-rank run's (290 and up).
    let spec = dir.path().join("q.toml");
    for (ranks, code, worst) in [
        ("", 1, "193.640 GB/s"),
        ("ranks = 2\n", 1, "193.640 GB/s"),
        ("ranks = 4\n", 0, "290.460 GB/s"),
    ] {
        std::fs::write(
            &spec,
            format!("[[check]]\ncollective = \"all-reduce\"\nlog = \"base.log\"\n{ranks}min_busbw_gbps = 250.0\n"),
        )
        .unwrap();
        let o = run(&["qualify", s(&spec)]);
        assert_eq!(o.code, code, "{ranks}: {}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains(worst), "{ranks}{worst}: {}", o.stdout);
    }
    std::fs::write(
        &spec,
        "[[check]]\ncollective = \"all-reduce\"\nlog = \"base.log\"\nranks = 3\nmin_busbw_gbps = 250.0\n",
    )
    .unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("base.log has no run at 3 rank(s) (it holds runs at 2, 4)"),
        "{}",
        o.stderr
    );
}

/// A log whose second run failed before its first row (NCCL's init
/// failure): the run is kept, rowless and unfinished, and no gate passes.
#[test]
fn a_log_run_that_failed_before_its_rows_passes_no_gate() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let text = std::fs::read_to_string(fixtures.join("genuine_2_17_N1_G4.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let dir = tempfile::tempdir().unwrap();
    let (b, c) = (dir.path().join("b.log"), dir.path().join("c.log"));
    // Run 1 whole (lines 1-30); run 2's header up to its column lines.
    std::fs::write(&b, lines[..30].join("\n") + "\n").unwrap();
    let failed = format!(
        "{}\n{}\ncnode3-002: Test NCCL failure common.cu:1005 'unhandled system error'\n",
        lines[..30].join("\n"),
        lines[31..46].join("\n")
    );
    std::fs::write(&c, &failed).unwrap();
    let o = run(&["compare", s(&b), s(&c)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("the candidate did not finish"),
        "{}",
        o.stderr
    );
    let o = run(&["report", s(&c)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    // A run without rows has no average bandwidth (0.000 would be a measure).
    assert!(
        o.stdout
            .trim_end()
            .ends_with("# Avg bus bandwidth    : - (no rows)"),
        "{}",
        o.stdout
    );
    let o = run(&["report", s(&c), "--format", "markdown"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("**Avg bus bandwidth:** - (no rows)"),
        "{}",
        o.stdout
    );
    // The log's machine line: no empty part for the start time it lacks,
    // and the version is nccl-tests', not collbench's.
    let machine = o
        .stdout
        .lines()
        .find(|l| l.starts_with("**cnode3-002"))
        .unwrap_or_default();
    assert!(
        machine.ends_with(" · 4 ranks · cuda engine · nccl-tests 2.17.8**"),
        "{}",
        o.stdout
    );
    let o = run(&["report", s(&c), "--format", "nccl-tests", "-v"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let tail: Vec<&str> = o.stdout.lines().rev().take(5).collect();
    assert!(
        tail[2].starts_with("# Out of bounds values : 0 FAILED (run unfinished")
            && tail[3].starts_with("# nThread 1 nGpus 1")
            && tail[4] == "# Collective test starting: all_gather_perf",
        "{}",
        o.stdout
    );
    assert!(
        o.stderr
            .contains("the test failed: cnode3-002: Test NCCL failure"),
        "{}",
        o.stderr
    );
    assert_qualify_fails_unfinished(dir.path(), "all-gather", "c.log", "min_busbw_gbps = 1.0");
    assert_qualify_fails_unfinished(dir.path(), "all", "c.log", "min_busbw_gbps = 1.0");
    // The all-reduce run before it finished: a check of all-reduce judges
    // its rows alone (the failed run was all-gather's, its binary says).
    let spec = dir.path().join("q.toml");
    std::fs::write(
        &spec,
        "[[check]]\ncollective = \"all-reduce\"\nlog = \"c.log\"\nmin_busbw_gbps = 1.0\n",
    )
    .unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // Without its `# Collective test starting` line the failed run could
    // have been anyone's: it fails every check.
    let anon = failed.replace("# Collective test starting: all_gather_perf\n", "");
    assert_ne!(anon, failed);
    std::fs::write(&c, &anon).unwrap();
    assert_qualify_fails_unfinished(dir.path(), "all-reduce", "c.log", "min_busbw_gbps = 1.0");
    std::fs::write(&c, &failed).unwrap();
    // A log of nothing but a failed run is no results at all.
    let lone = dir.path().join("lone.log");
    std::fs::write(
        &lone,
        failed.lines().skip(30).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let o = run(&["report", s(&lone)]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("without data rows; it failed: cnode3-002: Test NCCL failure"),
        "{}",
        o.stderr
    );
}

/// A log cut in the middle of a row (no newline at its end) is an
/// unfinished run without its torn row, not an unreadable file; a bad row
/// elsewhere is still refused.
#[test]
fn a_log_cut_mid_row_is_unfinished_not_unreadable() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let text = std::fs::read_to_string(fixtures.join("genuine_2_17_N1_G4.log")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.log");
    // Into the fourth data row's out-of-place time.
    let at = text.find("   268435456").unwrap() + 50;
    std::fs::write(&cut, &text[..at]).unwrap();
    let o = run(&["report", s(&cut), "-v"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("the log's last line, a row, is cut short"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("the run did not finish"), "{}", o.stderr);
    let rows = o
        .stdout
        .lines()
        .filter(|l| l.contains("double") && l.contains("sum"))
        .count();
    assert_eq!(rows, 3, "the whole rows only: {}", o.stdout);
    // The same torn row followed by more lines is a bad row, refused.
    let torn_inside = format!(
        "{}\n{}",
        &text[..at],
        &text[at..].split_once('\n').unwrap().1
    );
    std::fs::write(&cut, torn_inside).unwrap();
    let o = run(&["report", s(&cut)]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("a data row that does not read"),
        "{}",
        o.stderr
    );
}

#[test]
fn unreadable_logs_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(
        &empty,
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 64\n# Avg bus bandwidth : 0\n",
    )
    .unwrap();
    let noise = dir.path().join("noise.log");
    std::fs::write(&noise, "NCCL INFO hello\n").unwrap();
    let absurd = dir.path().join("absurd.log");
    std::fs::write(
        &absurd,
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 8\n#\n        8   2  float  sum  -1  1e300  0.00  0.00  0  9.1  0.00  0.00  0\n# Avg bus bandwidth : 0\n",
    )
    .unwrap();
    for (file, why) in [
        (
            &absurd,
            "absurd.log: not a readable nccl-tests log: line 3: a data row that does not read (a size, count and type, then times, bandwidths and #wrong: each time and bandwidth a number from 0 to 1e12, #wrong a count from 0 or N/A)",
        ),
        (
            &empty,
            "empty.log: not a readable nccl-tests log: an nccl-tests log without data rows",
        ),
        (&noise, "noise.log: not a collbench results file"),
    ] {
        for cmd in ["report", "compare"] {
            let o = run(&[cmd, s(file), s(file)]);
            assert_eq!(o.code, 2, "{cmd}: {}", o.stderr);
            assert!(o.stderr.contains(why), "expected '{why}' in: {}", o.stderr);
            assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
            assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        }
    }
}

#[test]
fn compare_fails_on_missing_rows_and_says_how_runs_differ() {
    // Timing is not what this compares: 3 ranks on a 2-core machine can be
    // thousands of times slower than 2 ranks with a core each, so no
    // threshold short of enormous keeps a regression out.
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = (dir.path().join("b.json"), dir.path().join("c.json"));
    for (path, sizes, ranks) in [(&base, "1K:4K", "2"), (&cand, "1K:2K", "3")] {
        collbench()
            .args([
                "all-reduce",
                "--sizes",
                sizes,
                "--ranks",
                ranks,
                "-n",
                "2",
                "-q",
                "--device",
                "host",
                "--json",
            ])
            .arg(path)
            .assert()
            .success();
    }
    let out = collbench()
        .arg("compare")
        .arg(&base)
        .arg(&cand)
        .args(["--max-regression", "1000000000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2 baseline row(s) missing") && err.contains("4KiB"),
        "{err}"
    );
    assert!(
        err.contains("world size: baseline 2 ranks, candidate 3"),
        "{err}"
    );
    let out = collbench()
        .arg("compare")
        .arg(&base)
        .arg(&cand)
        .args(["--max-regression", "1000000000", "--allow-missing"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A duplicate in a list is refused where it is typed.
    let out = collbench()
        .args(["all-reduce", "--dtype", "float,float"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'float' is given twice"));
}

#[test]
fn readers_are_bounded_and_refuse_empty_results() {
    let out = collbench().args(["report", "/dev/zero"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("limit") || err.contains("not text"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("e.json");
    std::fs::write(
        &empty,
        r#"{"schema":"collbench.results/1","meta":{"version":"0","command":"x","host":"h","started_at":"","world_size":2,"device":"host","devices":[]},"rows":[]}"#,
    )
    .unwrap();
    for cmd in [vec!["report"], vec!["compare", empty.to_str().unwrap()]] {
        let out = collbench().args(&cmd).arg(&empty).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(err.contains("has no rows"), "{cmd:?}: {err}");
    }
}

/// A sweep that hung before its first row writes results with no rows and
/// `meta.partial`: `report` and `compare` fail it as a run that did not
/// finish (exit 1), as they do one that stopped later, not as a file they
/// cannot read (2: a CI gate would blame the tool for the hang).
#[test]
fn a_run_that_hung_before_its_first_row_fails_as_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let hung = dir.path().join("h.json");
    let out = collbench()
        .args(["all-reduce", "--ranks", "2", "--sizes", "8B:64B"])
        .args(["--inject", "hang:rank=1,seq=1", "--timeout", "1s", "-q"])
        .arg("--dump-dir")
        .arg(dir.path().join("dumps"))
        .arg("--json")
        .arg(&hung)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = sweep_json(dir.path(), "a.json");
    let report = collbench().arg("report").arg(&hung).output().unwrap();
    let err = String::from_utf8_lossy(&report.stderr);
    assert_eq!(report.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the run did not finish (run interrupted: hang"),
        "{err}"
    );
    let compare = collbench()
        .arg("compare")
        .arg(&base)
        .arg(&hung)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&compare.stderr);
    assert_eq!(compare.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the candidate did not finish (run interrupted: hang")
            && err.contains("before its first row"),
        "{err}"
    );
    // As a baseline it leaves nothing to compare: exit 2.
    let compare = collbench()
        .arg("compare")
        .arg(&hung)
        .arg(&base)
        .output()
        .unwrap();
    assert_eq!(compare.status.code(), Some(2));
}

#[test]
fn no_output_overwrites_an_input_and_nothing_runs_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    let a = sweep_json(dir.path(), "a.json");
    let t = d("t.json");
    let o = run(&["tune", "--from", s(&a), "-O", s(&t)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let split = d("w.txt");
    std::fs::write(&split, "1\n2\n3\n").unwrap();
    let spec = d("spec.toml");
    std::fs::write(&spec, POSSIBLE).unwrap();
    let (no_dir, xj) = (d("no/such/j.xml"), d("x.json"));
    let xl = d("x.jsonl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "all-reduce",
                "--ranks",
                "2",
                "--tuning",
                s(&t),
                "--json",
                s(&t),
            ],
            "is an input",
        ),
        (
            vec![
                "all-gather-v",
                "--ranks",
                "3",
                "--split",
                s(&split),
                "--csv",
                s(&split),
            ],
            "is an input",
        ),
        // The JSONL beside the JSON is an output too.
        (
            vec![
                "all-reduce",
                "--ranks",
                "2",
                "--json",
                s(&xj),
                "--csv",
                s(&xl),
            ],
            "both write",
        ),
        (vec!["tune", "--from", s(&a), "-O", s(&a)], "is an input"),
        (
            vec!["model", "--tuning", s(&t), "--ranks", "8", "--json", s(&t)],
            "is an input",
        ),
        (
            vec!["qualify", s(&spec), "--junit", s(&spec)],
            "is an input",
        ),
        // Refused before any check runs.
        (
            vec!["qualify", s(&spec), "--junit", s(&no_dir)],
            "does not exist",
        ),
    ];
    let before: Vec<Vec<u8>> = [&a, &t, &split, &spec]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    for (args, why) in cases {
        let o = run(&args);
        assert_eq!(o.code, 2, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(why), "{args:?}: {}", o.stderr);
        assert_eq!(o.stdout, "", "{args:?}: nothing ran");
    }
    let after: Vec<Vec<u8>> = [&a, &t, &split, &spec]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(before == after, "an input was changed");
    assert!(!xj.exists() && !xl.exists());
}

/// `report --format nccl-tests` of a genuine nccl-tests 2.17 log prints
/// every line that is not a collbench comment as the log did: its header,
/// each rank's own device line (process and host), the wider column header
/// and its times' digits, the data rows and the footer.
#[test]
fn a_2_17_log_is_printed_again_as_it_was() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let log = fixtures.join("genuine_2_17_N1_G4.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let o = run(&["report", s(&log), "--format", "nccl-tests"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // The log's own lines, less those collbench does not print (the
    // version line, an nccl-tests note, blank lines between runs).
    let theirs: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("# nccl-tests version")
                && !l.contains("Reducing maxBytes")
        })
        .collect();
    let ours: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| {
            !l.starts_with("# collbench ")
                && !l.starts_with("# Algorithm by size")
                && !l.contains("genuine_2_17_N1_G4.log (run ")
                && !l.is_empty()
        })
        .collect();
    let (theirs, ours): (Vec<String>, Vec<String>) = (
        theirs.iter().map(|l| l.to_string()).collect(),
        ours.iter().map(|l| l.to_string()).collect(),
    );
    let data = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|l| {
                !l.starts_with('#')
                    || l.starts_with("#  Rank")
                    || l.starts_with("# nThread")
                    || l.contains("#wrong")
                    || l.contains("(GB/s)")
                    || l.starts_with("# Out of")
                    || l.starts_with("# Avg")
            })
            .cloned()
            .collect()
    };
    assert_eq!(data(&ours), data(&theirs));
    assert!(ours
        .iter()
        .any(|l| l.ends_with("17673.1  243.02  364.53       0  17680.1  242.93  364.39       0")));
    assert!(ours
        .iter()
        .any(|l| l.contains("Pid 4175039 on cnode3-002 device  3")));
}

/// A collbench sweep's JSON keeps the sizes it asked for: nccl-tests'
/// header in `report` says `minBytes 8`, as the sweep printed it, not the
/// first row's size rounded for 3 ranks (12).
#[test]
fn report_prints_the_sizes_the_sweep_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ag.json");
    let o = run(&[
        "all-gather",
        "--ranks",
        "3",
        "--sizes",
        "8:1K",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--format",
        "nccl-tests",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let header = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("# nThread"))
            .map(str::to_owned)
    };
    let live = header(&o.stdout).unwrap();
    assert!(
        live.contains("minBytes 8 maxBytes 1024 step: 2(factor)"),
        "{live}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["meta"]["sizes"][0], 8);
    assert_eq!(v["rows"][0]["bytes"], 12);
    let o = run(&["report", s(&json), "--format", "nccl-tests"]);
    assert_eq!(header(&o.stdout), Some(live));
}

/// A data row of an nccl-tests log whose size or count is negative or
/// overflows is an error naming its line, not a row passed over (which
/// would move the average and what `qualify` judges).
#[test]
fn a_log_row_with_a_negative_or_huge_size_is_an_error() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let text = std::fs::read_to_string(fixtures.join("pkb_nccl_output.txt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for bad in ["    -1048576", "99999999999999999999999"] {
        let edited = text.replacen("     1048576", bad, 1);
        assert_ne!(edited, text);
        let log = dir.path().join("edited.log");
        std::fs::write(&log, edited).unwrap();
        let o = run(&["report", s(&log)]);
        assert_eq!(o.code, 2, "{bad}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains("line 10: a data row that does not read"),
            "{}",
            o.stderr
        );
    }
}

/// Values no sweep writes are refused with the row named: a placement
/// other than out and in, a negative time statistic.
#[test]
fn results_with_values_no_sweep_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let o = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--sizes",
        "1K",
        "--iters",
        "2",
        "--warmup",
        "1",
        "-q",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for (path, value, said) in [
        (
            "placement",
            serde_json::json!("sideways"),
            "placement is 'sideways'",
        ),
        ("p99", serde_json::json!(-1.0), "stats.p99_us is -1"),
    ] {
        let mut bad = v.clone();
        if path == "placement" {
            bad["rows"][0]["placement"] = value;
        } else {
            bad["rows"][0]["stats"]["p99_us"] = value;
        }
        let edited = dir.path().join(format!("{path}.json"));
        std::fs::write(&edited, serde_json::to_vec(&bad).unwrap()).unwrap();
        let o = run(&["report", s(&edited)]);
        assert_eq!(o.code, 2, "{path}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains(said) && o.stderr.contains("row 1"),
            "{}",
            o.stderr
        );
    }
    // And the model's link figures stay where predictions are numbers.
    for (flag, value) in [("--link-gbps", "1e-308"), ("--latency-us", "1e300")] {
        let mut args = vec![
            "model",
            "--ranks",
            "4",
            "--link-gbps",
            "100",
            "--latency-us",
            "2",
        ];
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
        let o = run(&args);
        assert_eq!(o.code, 2, "{flag} {value}: {}", o.stdout);
    }
}

/// A copy of `src` at `dst` with a UTF-8 byte-order mark in front, as
/// editors on Windows save files.
fn with_bom(src: &Path, dst: &Path) {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(std::fs::read(src).unwrap());
    std::fs::write(dst, bytes).unwrap();
}

/// Every file a user hands over reads the same with a byte-order mark:
/// results, a tuning table, a spec, an nccl-tests log and dumps.
#[test]
fn a_byte_order_mark_is_read_past() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = sweep_json(d, "a.json");
    with_bom(&a, &d.join("bom.json"));
    let o = run(&["compare", s(&a), s(&d.join("bom.json"))]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let (plain, marked) = (
        run(&["report", s(&a)]),
        run(&["report", s(&d.join("bom.json"))]),
    );
    assert_eq!(
        (marked.code, &marked.stdout),
        (0, &plain.stdout),
        "{}",
        marked.stderr
    );

    let table = d.join("table.json");
    let o = run(&["tune", "--from", s(&a), "--output", s(&table)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    with_bom(&table, &d.join("bom-table.json"));
    let model = |t: &Path| run(&["model", "--tuning", s(t), "--ranks", "4"]);
    let (plain, marked) = (model(&table), model(&d.join("bom-table.json")));
    assert_eq!(marked.code, 0, "{}", marked.stderr);
    // The table's name is in the heading; the predictions are the same.
    let body = |t: &str| t.lines().skip(2).map(String::from).collect::<Vec<_>>();
    assert_eq!(body(&marked.stdout), body(&plain.stdout));

    let spec = d.join("spec.toml");
    std::fs::write(
        &spec,
        "\u{FEFF}[[check]]\nname = \"saved\"\ncollective = \"all-reduce\"\nlog = \"bom.json\"\nmax_time_us = 1e9\n",
    )
    .unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("saved") && o.stdout.contains("PASS"),
        "{}",
        o.stdout
    );

    if let Some(fixtures) = nccl_fixtures() {
        let log = fixtures.join("genuine_2_17_N1_G4.log");
        let bom = d.join("bom.log");
        with_bom(&log, &bom);
        let (plain, marked) = (run(&["report", s(&log)]), run(&["report", s(&bom)]));
        assert_eq!(marked.code, 0, "{}", marked.stderr);
        // The same runs and rows, under the file's own name.
        assert!(marked.stdout.contains("(run 5 of 5: sendrecv_perf)"));
        assert_eq!(
            marked.stdout.replace(s(&bom), "LOG"),
            plain.stdout.replace(s(&log), "LOG")
        );
    }

    let dumps =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pytorch-fr/skip-4/json");
    if dumps.is_dir() {
        let marked = d.join("dumps");
        std::fs::create_dir(&marked).unwrap();
        for e in std::fs::read_dir(&dumps).unwrap() {
            let e = e.unwrap();
            with_bom(&e.path(), &marked.join(e.file_name()));
        }
        let verdict = |p: &Path| {
            let o = run(&["analyze", s(p), "--json"]);
            let v: Value = serde_json::from_str(&o.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}{}", o.stdout, o.stderr));
            (
                o.code,
                v["verdict"].clone(),
                v["culprits"].clone(),
                v["ranks_found"].clone(),
            )
        };
        let (plain, got) = (verdict(&dumps), verdict(&marked));
        assert_eq!(got, plain);
        assert_eq!(got.2, serde_json::json!([2]), "{got:?}");
    }
}

/// `report` of rows holding wrong values fails as their sweep did (exit
/// 1), naming the first; clean rows exit 0.
#[test]
fn report_of_wrong_rows_exits_1_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    let o = run(&["report", s(&a), "-q"]);
    assert_eq!(
        (o.code, o.stderr.contains("wrong")),
        (0, false),
        "{}",
        o.stderr
    );
    let mut v: Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    let n = v["rows"].as_array().unwrap().len();
    v["rows"][3]["wrong"] = Value::from(5);
    // A NaN is a wrong value too (`nan` counts the wrong ones not finite).
    v["rows"][5]["nan"] = Value::from(1);
    v["rows"][5]["wrong"] = Value::from(1);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&v).unwrap()).unwrap();
    let csv = dir.path().join("bad.csv");
    let o = run(&["report", s(&bad), "--csv", s(&csv)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let row = &v["rows"][3];
    let first = format!(
        "bad.json: 2 of {n} rows hold wrong or NaN/Inf values (first: all-reduce {} float sum {}",
        row["algo"].as_str().unwrap(),
        row["bytes"]
    );
    assert!(o.stderr.contains(&first), "{first} in: {}", o.stderr);
    // Everything asked for is still written.
    assert!(o.stdout.contains("FAILED") && csv.exists(), "{}", o.stdout);
}

/// `report --csv - | head -1`: a closed stdout ends the CSV as it ends the
/// text; the exit code is report's own (it was 2 and the reason empty).
#[test]
fn report_to_a_closed_stdout_keeps_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let a = sweep_json(dir.path(), "a.json");
    // Past the pipe's buffer, so the writes after `head` left fail.
    let files = vec![format!("'{}'", a.display()); 60].join(" ");
    let script = format!(
        "'{}' report {files} --csv - -q | head -1 > /dev/null; echo ${{PIPESTATUS[0]}}",
        assert_cmd::cargo::cargo_bin("collbench").display(),
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{said}");
    assert!(!said.contains("error"), "{said}");
}

/// A log whose footer says its test FAILED fails whatever its rows say
/// (older nccl-tests print an error's size, not a count, in #wrong):
/// `report` exits 1 with the log's count, its nccl-tests text keeps
/// FAILED, `compare` fails it as a candidate, and `qualify` passes nothing
/// of it.
#[test]
fn a_log_whose_footer_failed_its_test_passes_nothing() {
    let Some(fixtures) = nccl_fixtures() else {
        return;
    };
    let good = fixtures.join("sb_nccl_allreduce.log");
    let text = std::fs::read_to_string(&good).unwrap();
    let failed = text.replace(
        "# Out of bounds values : 0 OK",
        "# Out of bounds values : 3 FAILED",
    );
    assert_ne!(failed, text);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.log");
    std::fs::write(&bad, &failed).unwrap();
    let o = run(&["report", s(&bad)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("# Wrong or NaN/Inf values : 3 FAILED (as the log's footer says)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stderr
            .contains("its nccl-tests footer says 3 value(s) out of bounds: FAILED"),
        "{}",
        o.stderr
    );
    let o = run(&["report", s(&bad), "--format", "nccl-tests"]);
    assert!(
        o.stdout.contains("# Out of bounds values : 3 FAILED\n"),
        "{}",
        o.stdout
    );
    let o = run(&["report", s(&good)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o = run(&["compare", s(&good), s(&bad)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("the candidate failed its own check"),
        "{}",
        o.stderr
    );
    let o = run(&["compare", s(&bad), s(&good)]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("the baseline failed its own check"),
        "{}",
        o.stderr
    );
    let spec = dir.path().join("q.toml");
    std::fs::write(
        &spec,
        "[[check]]\ncollective = \"all-reduce\"\nlog = \"bad.log\"\nsizes = \"1M:16G\"\nmin_busbw_gbps = 0.001\n",
    )
    .unwrap();
    let o = run(&["qualify", s(&spec)]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("the log failed its own check"),
        "{}",
        o.stdout
    );
}

/// Results of a sweep stopped before a case's in-place row (its first
/// case, even: only out-of-place rows) render as nccl-tests' text as the
/// sweep printed it: the unfinished case a comment with dashes, the
/// footer FAILED, exit 1, rather than refused for lacking a placement.
#[test]
fn unfinished_results_render_as_nccl_tests_text_with_dashes() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "a.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let first = v["rows"][0].clone();
    assert_eq!(first["placement"], "out");
    v["rows"] = Value::from(vec![first]);
    v["meta"]["partial"] = serde_json::json!({"reason": "signal", "missing_rows": 7});
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["report", s(&cut), "--format", "nccl-tests"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let row = o
        .stdout
        .lines()
        .find(|l| l.contains(" sum ") && l.contains(" -1 "))
        .unwrap_or_default();
    assert!(
        row.starts_with('#') && row.trim_end().ends_with('-'),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(
            "# Out of bounds values : 0 FAILED (run interrupted: signal, 7 row(s) missing)"
        ),
        "{}",
        o.stdout
    );
    // Stopped after a whole case: the text read back is a run that did not
    // finish (its footer's `0 FAILED (run ...)`), not one that failed its
    // check.
    let mut w: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = w["rows"].as_array().unwrap()[..3].to_vec();
    w["rows"] = Value::from(rows);
    w["meta"]["partial"] = serde_json::json!({"reason": "signal", "missing_rows": 5});
    let three = dir.path().join("three.json");
    std::fs::write(&three, serde_json::to_vec(&w).unwrap()).unwrap();
    let o = run(&["report", s(&three), "--format", "nccl-tests"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let text = dir.path().join("three.log");
    std::fs::write(&text, &o.stdout).unwrap();
    let o = run(&["report", s(&text), "-v"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    // How it stopped is read back from the text: a signal, 5 rows short
    // (not "the log ends before its footer").
    assert!(
        o.stderr
            .contains("the run did not finish (run interrupted: signal, 5 row(s) missing)"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("the run did not finish: run interrupted: signal, 5 row(s) missing"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("footer says"), "{}", o.stderr);
    // Out-of-place rows of several cases are a sweep of one placement that
    // stopped, not a case cut short: refused, as when it finished.
    let outs: Vec<Value> = w_rows(&json)
        .into_iter()
        .filter(|r| r["placement"] == "out")
        .take(2)
        .collect();
    assert_ne!(outs[0]["bytes"], outs[1]["bytes"]);
    w["rows"] = Value::from(outs);
    std::fs::write(&three, serde_json::to_vec(&w).unwrap()).unwrap();
    let o = run(&["report", s(&three), "--format", "nccl-tests"]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("needs out-of-place and in-place rows"),
        "{}",
        o.stderr
    );
    // A finished run of one placement has no dashes to show: refused.
    v["meta"]["partial"] = Value::Null;
    std::fs::write(&cut, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["report", s(&cut), "--format", "nccl-tests"]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("needs out-of-place and in-place rows"),
        "{}",
        o.stderr
    );
}

/// The rows of a results file.
fn w_rows(path: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["rows"].as_array().cloned().unwrap_or_default()
}

/// Text in a results file (an algorithm's name, the host) holding an
/// escape sequence, a newline or a line separator reaches no terminal raw
/// and forges no line, in every text format, and the SVG plot stays XML.
#[test]
fn text_from_results_files_is_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "r.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for r in v["rows"].as_array_mut().unwrap() {
        r["algo"] = "x\u{1b}[31m\nFAKE LINE\u{2028}".into();
    }
    v["meta"]["host"] = "h\u{1b}]0;TITLE\u{7}\u{1b}[2J".into();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&v).unwrap()).unwrap();
    for format in ["table", "nccl-tests", "markdown"] {
        let o = run(&["report", "--format", format, s(&bad)]);
        assert_eq!(o.code, 0, "{format}: {}", o.stderr);
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(
            !all.chars()
                .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{2028}'),
            "{format}: {all:?}"
        );
        assert!(
            !all.lines().any(|l| l.starts_with("FAKE LINE")),
            "{format}: {all}"
        );
        assert!(
            all.contains("x\\u001b[31m\\u000aFAKE LINE\\u2028"),
            "{format}: {all}"
        );
    }
    let svg = dir.path().join("p.svg");
    let o = run(&["report", "-q", s(&bad), "--plot", s(&svg)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(!text.contains('\u{1b}'), "a control character in the SVG");
}

/// Text that cannot be written (stdout on a full disk: `/dev/full`) is an
/// error, exit 2, for `report` and `analyze`; a reader that went away (a
/// closed pipe) is not.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "r.json");
    let dumps = dir.path().join("dumps");
    let o = run(&[
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "1K",
        "-q",
        "--timeout",
        "1s",
        "--inject",
        "hang:rank=1,seq=3",
        "--dump-dir",
        s(&dumps),
    ]);
    assert_eq!(o.code, 3, "{}", o.stderr);
    for (args, says) in [
        (
            vec!["report", s(&json)],
            "writing the text: No space left on device",
        ),
        (
            vec!["analyze", s(&dumps)],
            "writing the diagnosis to stdout: No space left on device",
        ),
        (
            vec!["analyze", s(&dumps), "--json"],
            "writing the diagnosis to stdout: No space left on device",
        ),
    ] {
        let (code, err) = onto_full_disk(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        // A closed pipe: the command's own exit.
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let want = if args[0] == "report" { 0 } else { 1 };
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A baseline with wrong values is compared as it is, and said to have
/// them: a gate's reference that failed its own check is no silent pass.
#[test]
fn a_baseline_with_wrong_values_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let json = sweep_json(dir.path(), "r.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    v["rows"][1]["wrong"] = Value::from(3);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["compare", s(&bad), s(&json), "--max-regression", "1000"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("the baseline has wrong or NaN/Inf values in 1 row(s), first: all-reduce"),
        "{}",
        o.stderr
    );
    let o = run(&["compare", s(&json), s(&json), "--max-regression", "1000"]);
    assert!(!o.stderr.contains("values in"), "{}", o.stderr);
    // A candidate's wrong values fail it even in rows the baseline lacks:
    // the baseline here keeps only the first row.
    let mut small = v.clone();
    small["rows"] = Value::Array(vec![v["rows"][0].clone()]);
    let small_path = dir.path().join("small.json");
    std::fs::write(&small_path, serde_json::to_vec(&small).unwrap()).unwrap();
    let o = run(&[
        "compare",
        s(&small_path),
        s(&bad),
        "--max-regression",
        "1000",
    ]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("the candidate has wrong or NaN/Inf values in 1 row(s), first: all-reduce"),
        "{}",
        o.stderr
    );
}

/// The names results files are checked against (the report room's own
/// lists, as it does not see the engine) are the engine's.
#[test]
fn the_names_results_are_checked_against_are_the_engines() {
    use collbench::engine::{Collective, Dtype, ReduceOp};
    use collbench::report::json::{COLLECTIVES, DTYPES, OPS};
    let colls: Vec<&str> = Collective::EVERY
        .iter()
        .map(|c| c.name())
        .chain(["group"])
        .collect();
    assert_eq!(colls, COLLECTIVES);
    let dtypes: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
    assert_eq!(dtypes, DTYPES);
    let ops: Vec<&str> = ReduceOp::ALL
        .iter()
        .map(|o| o.name())
        .chain(["none"])
        .collect();
    assert_eq!(ops, OPS);
}

/// A log of a run stopped mid-sweep prints again with the average it
/// printed (which counted the case it stopped in), and one stopped in its
/// first case reads as a run that did not finish (exit 1).
#[test]
fn a_stopped_log_prints_its_own_average_again() {
    let dir = tempfile::tempdir().unwrap();
    let head = "# Collective test starting: all_reduce_perf\n\
        # nThread 1 nGpus 2 minBytes 64 maxBytes 256 step: 2(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0\n\
        #\n";
    let rows = "          64            16     float     sum      -1     2.67    0.02    0.02      0     0.76    0.08    0.08      0\n\
        #        128            32     float     sum      -1     0.62    0.21    0.21      0        -       -       -      -\n\
        # Out of bounds values : 0 FAILED (run interrupted: hang, 3 row(s) missing)\n\
        # Avg bus bandwidth    : 0.105199 \n#\n";
    let mid = dir.path().join("mid.txt");
    std::fs::write(&mid, format!("{head}{rows}")).unwrap();
    let o = run(&["report", s(&mid), "--format", "nccl-tests"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("# Avg bus bandwidth    : 0.105199 \n"),
        "{}",
        o.stdout
    );
    let first = dir.path().join("first.txt");
    std::fs::write(
        &first,
        format!("{head}#         64            16     float     sum      -1     1.63    0.04    0.04      0        -       -       -      -\n# Out of bounds values : 0 FAILED (run interrupted: hang, 5 row(s) missing)\n# Avg bus bandwidth    : 0.0392698 \n#\n"),
    )
    .unwrap();
    let o = run(&["report", s(&first), "--format", "nccl-tests"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("# Avg bus bandwidth    : 0.0392698 \n"),
        "{}",
        o.stdout
    );
    assert!(o.stderr.contains("did not finish"), "{}", o.stderr);
}

#[test]
fn a_sweep_or_info_whose_stdout_fills_the_disk_fails() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    for args in [
        vec![
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "64B:1K",
            "-n",
            "2",
            "-w",
            "1",
            "--json",
            s(&json),
        ],
        vec![
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "64B",
            "-n",
            "1",
            "-w",
            "0",
            "--format",
            "nccl-tests",
        ],
        vec!["info"],
        // `compare`'s table too (of the results the first sweep wrote).
        vec!["compare", s(&json), s(&json)],
    ] {
        let (code, err) = onto_full_disk(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("writing to stdout: No space left on device"),
            "{args:?}: {err}"
        );
    }
    // The file the sweep named is whole.
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.matches("\"collective\"").count(), 10, "{text}");
}

/// Runs collbench with `args` and its stdout on a full disk (`/dev/full`):
/// its exit code and stderr.
fn onto_full_disk(args: &[&str]) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args(args)
        .stdout(full)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `report` of a run with a link matrix shows it and its verdict, as the
/// run printed them, and a slow link or rank it found fails the report as
/// it failed the run (it had re-rendered as clean, exit 0); `--plot` draws
/// its heatmap beside the plot.
#[test]
fn report_shows_the_link_matrix_and_fails_on_its_findings() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("links.json");
    let o = run(&[
        "links",
        "--device",
        "host",
        "--ranks",
        "3",
        "--sizes",
        "64K",
        "-n",
        "2",
        "-w",
        "1",
        "-q",
        "--json",
        s(&json),
    ]);
    assert!(o.code == 0 || o.code == 1, "{}", o.stderr);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    v["links"]["findings"] = serde_json::json!([]);
    let clean = dir.path().join("clean.json");
    std::fs::write(&clean, v.to_string()).unwrap();
    let plot = dir.path().join("p.svg");
    let o = run(&["report", s(&clean), "--plot", s(&plot)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("from\\to"), "{}", o.stdout);
    assert!(o.stdout.contains("no slow link or rank"), "{}", o.stdout);
    assert!(dir.path().join("p-links.svg").exists());
    v["links"]["findings"] = serde_json::json!([{
        "kind": "slow-link", "from": 1, "to": 2, "rank": null,
        "gbps": 1.0, "median_gbps": 30.0,
        "detail": "slow link 1 -> 2: 1.0 GB/s vs median 30.0 GB/s (30.0x)"
    }]);
    let slow = dir.path().join("slow.json");
    std::fs::write(&slow, v.to_string()).unwrap();
    let o = run(&["report", s(&slow)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stdout.contains("slow link 1 -> 2"), "{}", o.stdout);
    assert!(
        o.stderr.contains("1 slow link(s) or rank(s) found"),
        "{}",
        o.stderr
    );
}

/// Files an output writes beside itself (the JSONL of `--json`, the links
/// heatmap of `--plot`), never named by the user, replace only what such
/// an output of an earlier run wrote; names near the 255-byte limit work;
/// a replaced file keeps its permissions; a write that fails mid-sweep
/// names its output and says what the others kept.
#[test]
fn files_written_beside_an_output_never_replace_a_users() {
    let d = tempfile::tempdir().unwrap();
    let at = |n: &str| d.path().join(n);
    let sweep = |extra: &[&str]| {
        let mut args = vec!["all-reduce", "--ranks", "2", "-q"];
        args.extend(TINY);
        args.extend(extra);
        run(&args)
    };
    // A link at the JSONL's name leads to a file of the user's: refused,
    // and the file untouched.
    std::fs::write(at("precious.txt"), "PRECIOUS\n").unwrap();
    std::os::unix::fs::symlink(at("precious.txt"), at("r.jsonl")).unwrap();
    let o = sweep(&["--json", s(&at("r.json"))]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("also writes") && o.stderr.contains("holds something else"),
        "{}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(at("precious.txt")).unwrap(),
        "PRECIOUS\n"
    );
    assert!(!at("r.json").exists());
    // An earlier run's JSONL is replaced, as the JSON is; so is one whose
    // first line (its meta) is long.
    let o = sweep(&["--json", s(&at("ok.json"))]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = sweep(&["--json", s(&at("ok.json"))]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let long_head = format!(
        "{{\"meta\":{{\"notes\":[\"{}\"]}},\"schema\":\"collbench.results/1\"}}\n",
        "n".repeat(10_000)
    );
    std::fs::write(at("big.jsonl"), long_head).unwrap();
    let o = sweep(&["--json", s(&at("big.json"))]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // `model --json` writes no rows beside it: a JSONL there is not its.
    std::fs::write(at("pred.jsonl"), "{\"mine\":1}\n").unwrap();
    let o = run(&[
        "model",
        "--link-gbps",
        "100",
        "--latency-us",
        "2",
        "--ranks",
        "8",
        "--json",
        s(&at("pred.json")),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(at("pred.jsonl")).unwrap(),
        "{\"mine\":1}\n"
    );
    // A name of 251 bytes is written (its temporary name is cut to fit);
    // one of 256 is refused before the sweep.
    let long = at(&format!("{}.json", "z".repeat(246)));
    let o = sweep(&["--json", s(&long)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(long.exists() && at(&format!("{}.jsonl", "z".repeat(246))).exists());
    let o = sweep(&["--json", s(&at(&format!("{}.json", "y".repeat(251))))]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("its name has 256 bytes"), "{}", o.stderr);
    // A private file stays private.
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(at("priv.csv"), "x\n").unwrap();
    std::fs::set_permissions(at("priv.csv"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = sweep(&["--csv", s(&at("priv.csv"))]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mode = std::fs::metadata(at("priv.csv"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A full disk under the CSV: named, and what the JSON kept said.
    let o = sweep(&["--csv", "/dev/full", "--json", s(&at("k.json"))]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--csv /dev/full: No space left"),
        "{}",
        o.stderr
    );
    let kept = common::read_json(&at("k.json"));
    let n = kept["rows"].as_array().unwrap().len();
    assert!(
        o.stderr
            .contains(&format!("its other outputs keep the {n} finished row(s)")),
        "{}",
        o.stderr
    );
    let o = sweep(&["--csv", "/dev/full"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("which no other output kept"),
        "{}",
        o.stderr
    );
    // The heatmap beside `--plot`: a file of the user's there is refused,
    // by the sweep and by `report`; an earlier heatmap is replaced.
    std::fs::write(at("p-links.png"), "my notes\n").unwrap();
    let mut links = vec!["links", "--sizes", "4K", "-n", "1", "-w", "0", "-q"];
    let (p, l) = (at("p.png"), at("l.json"));
    links.extend(["--plot", s(&p), "--json", s(&l)]);
    let o = run(&links);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("p-links.png (its links heatmap)"),
        "{}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(at("p-links.png")).unwrap(),
        "my notes\n"
    );
    std::fs::remove_file(at("p-links.png")).unwrap();
    let o = run(&links);
    assert!(o.code == 0 || o.code == 1, "{}", o.stderr);
    let o = run(&links);
    assert!(o.code == 0 || o.code == 1, "{}", o.stderr);
    let o = run(&[
        "report",
        s(&l),
        "--plot",
        s(&at("q.png")),
        "--csv",
        s(&at("q-links.png")),
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("both write"), "{}", o.stderr);
    assert!(!at("q.png").exists() && !at("q-links.png").exists());
    // ... nor is an input, nor an input's JSONL.
    std::fs::copy(&l, at("res-links.svg")).unwrap();
    let o = run(&[
        "report",
        s(&at("res-links.svg")),
        "--plot",
        s(&at("res.svg")),
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("that is an input"), "{}", o.stderr);
    assert_eq!(
        std::fs::read(at("res-links.svg")).unwrap(),
        std::fs::read(&l).unwrap()
    );
    let o = run(&["report", s(&l), "--csv", s(&at("l.jsonl"))]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("the rows (JSONL) of an input"),
        "{}",
        o.stderr
    );
}

/// A sweep that stops in the first case of a collective has printed that
/// collective's section (headers, no row yet) and its verdict under it:
/// `report` of its JSON prints the same text, in every format.
#[test]
fn report_shows_the_section_a_stopped_sweep_was_in() {
    let d = tempfile::tempdir().unwrap();
    for format in ["table", "nccl-tests", "markdown"] {
        let json = d.path().join(format!("{format}.json"));
        let dumps = d.path().join(format!("dumps-{format}"));
        // Collective 9 of rank 0 is all-gather's first (all-reduce's one
        // case takes 8: a warmup, 2 timed and a checked one, twice).
        let o = run(&[
            "all",
            "--ranks",
            "2",
            "--sizes",
            "1K:1K",
            "-n",
            "2",
            "-w",
            "1",
            "--inject",
            "hang:rank=0,seq=9",
            "--timeout",
            "1s",
            "--format",
            format,
            "--json",
            s(&json),
            "--dump-dir",
            s(&dumps),
        ]);
        assert_eq!(o.code, 3, "{}", o.stderr);
        let sections =
            o.stdout.matches("all-gather").count() + o.stdout.matches("all_gather").count();
        assert!(
            sections > 0,
            "{format}: the sweep stopped in all-gather: {}",
            o.stdout
        );
        let r = run(&["report", "--format", format, s(&json)]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert_eq!(r.stdout, o.stdout, "{format}");
    }
}

/// `qualify` judges a group by its row: its operations share the group's
/// time, so a check of one of them alone is refused with what to judge;
/// a check of `all` judges the groups' rows and passes, and a wrong value
/// in an operation fails it.
#[test]
fn qualify_judges_groups_by_their_row() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("g.json");
    let o = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--group",
        "3",
        "--sizes",
        "1K:4K",
        "--iters",
        "2",
        "--warmup",
        "1",
        "-q",
        "--json",
        s(&json),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let spec = dir.path().join("q.toml");
    let check = |collective: &str| {
        std::fs::write(
            &spec,
            format!("[[check]]\ncollective = \"{collective}\"\nlog = \"g.json\"\nmin_busbw_gbps = 0.000001\n"),
        )
        .unwrap();
        run(&["qualify", s(&spec)])
    };
    let o = check("all-reduce");
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("are all operations of groups, timed as their group: collective = \"all\" judges the groups' rows"),
        "{}",
        o.stderr
    );
    let o = check("all");
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let member = v["rows"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| !r["group_member"].is_null())
        .expect("a group's operation");
    member["wrong"] = Value::from(2);
    std::fs::write(&json, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = check("all");
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("wrong or NaN/Inf"), "{}", o.stdout);
}
