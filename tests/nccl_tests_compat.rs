//! collbench as a drop-in for nccl-tests: its text read as one nccl-tests
//! run per collective (checked with the same code on the genuine logs in
//! ../shared/fixtures/nccl-tests), its flags, its binary names.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;

fn collbench() -> Command {
    let mut c = common::collbench();
    c.env_remove("COLLBENCH_LOG");
    c
}

/// One nccl-tests run as a log parser reads it.
#[derive(Debug)]
struct Run {
    binary: Option<String>,
    /// The 13 fields of each row.
    rows: Vec<Vec<String>>,
    avg_busbw: f64,
    /// The digits the average was printed with.
    avg_text: String,
    out_of_bounds: u64,
}

/// Parses `text` as nccl-tests logs: every run, strictly (a data line must
/// have 13 fields; header, table and footer once per run).
fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    let mut cur: Option<Run> = None;
    let mut binary = None;
    let mut headers = 0;
    for line in text.lines() {
        let t = line.trim();
        if let Some(b) = t.strip_prefix("# Collective test starting:") {
            binary = Some(b.trim().to_string());
            continue;
        }
        if t.starts_with("# nThread") {
            if cur.is_some() {
                return Err("a second header before the footer".into());
            }
            cur = Some(Run {
                binary: binary.take(),
                rows: Vec::new(),
                avg_busbw: f64::NAN,
                avg_text: String::new(),
                out_of_bounds: 0,
            });
            headers = 0;
            continue;
        }
        if t.starts_with("#") && t.contains("size") && t.contains("count") {
            headers += 1;
            if headers > 1 {
                return Err("two column headers in one run".into());
            }
            continue;
        }
        if let Some(v) = t.strip_prefix("# Out of bounds values :") {
            let r = cur.as_mut().ok_or("a footer without a header")?;
            r.out_of_bounds = v
                .split_whitespace()
                .next()
                .unwrap_or("x")
                .parse()
                .map_err(|_| "bad out-of-bounds count")?;
            continue;
        }
        if let Some(v) = t.strip_prefix("# Avg bus bandwidth    :") {
            let mut r = cur.take().ok_or("an average without a header")?;
            r.avg_text = v.trim().to_string();
            r.avg_busbw = r
                .avg_text
                .parse()
                .map_err(|_| format!("bad average '{v}'"))?;
            runs.push(r);
            continue;
        }
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let r = cur
            .as_mut()
            .ok_or_else(|| format!("a row outside a run: {line}"))?;
        let fields: Vec<String> = t.split_whitespace().map(String::from).collect();
        if fields.len() != 13 {
            return Err(format!("{} fields, not 13: {line}", fields.len()));
        }
        r.rows.push(fields);
    }
    if cur.is_some() {
        return Err("a run without its footer".into());
    }
    Ok(runs)
}

/// The checks every nccl-tests run must pass: the average is the mean
/// busbw over every row and both placements (to the printed digits).
fn check_run(r: &Run) -> Result<(), String> {
    let busbw: Vec<f64> = r
        .rows
        .iter()
        .flat_map(|f| [&f[7], &f[11]])
        .map(|v| v.parse::<f64>().map_err(|_| format!("busbw '{v}'")))
        .collect::<Result<_, _>>()?;
    let mean = busbw.iter().sum::<f64>() / busbw.len().max(1) as f64;
    // Rows print busbw with two decimals: the mean of the printed values is
    // within 0.005 of the mean of the exact ones.
    if (mean - r.avg_busbw).abs() > 0.005 + 1e-9 {
        return Err(format!(
            "average {} but the rows' mean is {mean}",
            r.avg_text
        ));
    }
    Ok(())
}

fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/nccl-tests");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("COLLBENCH_REQUIRE_FIXTURES").is_none(),
        "fixtures missing at {}",
        dir.display()
    );
    eprintln!("skipped: no fixtures at {}", dir.display());
    None
}

#[test]
fn the_checker_reads_the_genuine_logs() {
    let Some(dir) = fixtures() else { return };
    let five = std::fs::read_to_string(dir.join("genuine_2_17_N1_G4.log")).unwrap();
    let runs = parse_runs(&five).unwrap();
    assert_eq!(runs.len(), 5);
    assert_eq!(runs[0].binary.as_deref(), Some("all_reduce_perf"));
    for r in &runs {
        check_run(r).unwrap();
    }
    let pkb = std::fs::read_to_string(dir.join("pkb_nccl_output.txt")).unwrap();
    let runs = parse_runs(&pkb).unwrap();
    assert_eq!((runs.len(), runs[0].rows.len()), (1, 11));
    collbench::report::nccl_log::validate_one_run(&pkb).unwrap();
    check_run(&runs[0]).unwrap();
    // The older layouts have 11 or 12 fields: not today's 13.
    let old = std::fs::read_to_string(dir.join("sb_nccl_alltoall.log")).unwrap();
    assert!(parse_runs(&old).unwrap_err().contains("not 13"));
}

/// Runs collbench with `args` plus `--format nccl-tests --json`, returns
/// (exit code, stdout, rows of the JSON).
fn run_nccl(args: &[&str]) -> (i32, String, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args(args)
        .args(["--format", "nccl-tests", "--iters", "2", "--warmup", "1"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap().clone();
    (out.status.code().unwrap_or(-1), stdout, rows)
}

/// The text is one nccl-tests run whose rows are the JSON's.
fn assert_one_run_matching(args: &[&str], binary: &str) -> Run {
    let (code, text, rows) = run_nccl(args);
    assert!(code == 0 || code == 1, "{args:?}: exit {code}\n{text}");
    for line in text.lines() {
        assert!(
            line.starts_with('#') || line.split_whitespace().count() == 13,
            "{args:?}: a line a parser would choke on: {line}"
        );
    }
    let runs = parse_runs(&text).unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"));
    assert_eq!(runs.len(), 1, "{args:?}: one run\n{text}");
    // The library's validator, the one `report` trusts for genuine logs, agrees.
    collbench::report::nccl_log::validate_one_run(&text)
        .unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"));
    let run = runs.into_iter().next().unwrap();
    assert_eq!(run.binary.as_deref(), Some(binary));
    check_run(&run).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(
        run.rows.len() * 2,
        rows.len(),
        "{args:?}: every JSON row printed"
    );
    for f in &run.rows {
        let bytes: u64 = f[0].parse().unwrap();
        for (placement, at) in [("out", 5), ("in", 9)] {
            let j = rows
                .iter()
                .find(|r| r["bytes"] == bytes && r["placement"] == placement)
                .unwrap_or_else(|| panic!("{args:?}: no JSON row for {bytes} {placement}"));
            assert_eq!(f[1], j["count"].to_string(), "{args:?}: count");
            assert_eq!(f[2], j["dtype"].as_str().unwrap());
            let wrong = j["wrong"].as_i64().unwrap();
            let printed = if wrong < 0 {
                "N/A".to_string()
            } else {
                wrong.to_string()
            };
            assert_eq!(f[at + 3], printed, "{args:?}: #wrong");
            let busbw: f64 = f[at + 2].parse().unwrap();
            assert!((busbw - j["busbw_gbps"].as_f64().unwrap()).abs() <= 0.005 + 1e-9);
        }
    }
    let bad: i64 = rows
        .iter()
        .map(|r| r["wrong"].as_i64().unwrap().max(0))
        .sum();
    assert_eq!(
        run.out_of_bounds, bad as u64,
        "{args:?}: out-of-bounds count"
    );
    run
}

#[test]
fn every_sweep_prints_one_nccl_tests_run_per_collective() {
    // all-reduce's default algorithm changes with the size: still one run.
    let run = assert_one_run_matching(
        &[
            "all-reduce",
            "--ranks",
            "2",
            "--sizes",
            "8B:64M",
            "--device",
            "host",
        ],
        "all_reduce_perf",
    );
    assert_eq!(run.rows.len(), 24);
    assert_one_run_matching(
        &[
            "broadcast",
            "--ranks",
            "4",
            "--sizes",
            "1K:1M",
            "--device",
            "host",
        ],
        "broadcast_perf",
    );
    let run = assert_one_run_matching(
        &[
            "all-gather",
            "--ranks",
            "4",
            "--sizes",
            "1M:1M",
            "--device",
            "host",
        ],
        "all_gather_perf",
    );
    // nccl-tests' count: per rank (1 MiB of floats on 4 ranks).
    assert_eq!(run.rows[0][1], "65536");
    let run = assert_one_run_matching(
        &[
            "all-reduce",
            "--ranks",
            "2",
            "--sizes",
            "1K:4K",
            "--device",
            "host",
            "--inject",
            "corrupt:rank=1,seq=1",
        ],
        "all_reduce_perf",
    );
    assert!(run.out_of_bounds > 0);
    // One placement asked for: nccl-tests' text still shows both.
    assert_one_run_matching(
        &[
            "reduce-scatter",
            "--ranks",
            "3",
            "--sizes",
            "1K:8K",
            "--device",
            "host",
            "--placement",
            "out",
        ],
        "reduce_scatter_perf",
    );
}

#[test]
fn several_algorithms_per_case_print_one_run_each() {
    let (code, text, _) = run_nccl(&[
        "all-reduce",
        "--ranks",
        "3",
        "--sizes",
        "1K:4K",
        "--algo",
        "all",
        "--device",
        "host",
    ]);
    assert_eq!(code, 0, "{text}");
    let runs = parse_runs(&text).unwrap();
    assert_eq!(runs.len(), 3, "ring, tree, direct");
    assert!(
        text.contains("# Algorithm by size: tree 1024..4096 B"),
        "{text}"
    );
}

#[test]
fn an_nccl_tests_command_line_runs_unchanged() {
    let out = collbench()
        .args([
            "all-reduce",
            "-b",
            "8",
            "-e",
            "128M",
            "-f",
            "2",
            "-g",
            "2",
            "-c",
            "1",
            "-n",
            "20",
            "-w",
            "5",
            "-G",
            "0",
            "-z",
            "0",
            "-a",
            "3",
            "-T",
            "60",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("134217728"), "{text}");
    // Flags that change nothing here are accepted with a note.
    let out = collbench()
        .args([
            "all-reduce",
            "-b",
            "1K",
            "-e",
            "1K",
            "-t",
            "2",
            "-g",
            "2",
            "-p",
            "1",
            "-y",
            "1",
            "-C",
            "1",
            "-N",
            "2",
            "-q",
        ])
        .args(["--json", "/dev/null", "--device", "host", "-n", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for flag in ["-p:", "-y 1:", "-C 1:", "-N 2:"] {
        assert!(
            err.contains(&format!("note: {flag}")),
            "no note for {flag}: {err}"
        );
    }
    let out = collbench()
        .args(["all-reduce", "--ranks", "3", "-g", "2", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("disagree"));
}

#[test]
fn ranks_times_combine_as_nccl_tests_average_mode_says() {
    let times = |mode: &str| -> Vec<f64> {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("a.json");
        collbench()
            .args([
                "all-reduce",
                "--ranks",
                "3",
                "--sizes",
                "1K:1K",
                "-n",
                "3",
                "-q",
                "--device",
                "host",
                "-a",
                mode,
            ])
            .arg("--json")
            .arg(&json)
            .assert()
            .success();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                let per: Vec<f64> = r["per_rank_us"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect();
                let t = r["time_us"].as_f64().unwrap();
                let want = match mode {
                    "0" => per[0],
                    "1" => per.iter().sum::<f64>() / per.len() as f64,
                    "2" => per.iter().copied().fold(f64::INFINITY, f64::min),
                    _ => per.iter().copied().fold(0.0, f64::max),
                };
                [t - want]
            })
            .collect()
    };
    for mode in ["0", "1", "2", "3"] {
        assert!(times(mode).iter().all(|d| d.abs() < 1e-6), "-a {mode}");
    }
}

#[test]
fn nccl_tests_binary_names_behave_as_those_binaries() {
    let dir = tempfile::tempdir().unwrap();
    let out = collbench()
        .arg("install-aliases")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 10, "{names:?}");
    assert!(names.iter().any(|n| n == "alltoallv_perf"), "{names:?}");
    // Again: nothing to do. A foreign file is not replaced without --force.
    collbench()
        .arg("install-aliases")
        .arg(dir.path())
        .assert()
        .success();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("all_reduce_perf"), "mine").unwrap();
    let out = collbench()
        .arg("install-aliases")
        .arg(other.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read_to_string(other.path().join("all_reduce_perf")).unwrap(),
        "mine"
    );
    // A folder in the way, even with --force, or a file named as the
    // folder: refused with the reason, before any link is made.
    let blocked = tempfile::tempdir().unwrap();
    std::fs::create_dir(blocked.path().join("all_gather_perf")).unwrap();
    let file = blocked.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for (dir, why) in [
        (blocked.path(), "all_gather_perf is a folder"),
        (file.as_path(), "is a file, not a folder"),
    ] {
        let out = collbench()
            .arg("install-aliases")
            .arg(dir)
            .arg("--force")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(why), "{err}");
    }
    assert_eq!(
        std::fs::read_dir(blocked.path()).unwrap().count(),
        2,
        "no link made"
    );
    // A link that leads to this collbench by another way (a relative
    // path) is in place already; a folder that is a link to nothing is
    // named as such.
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_collbench"))
        .canonicalize()
        .unwrap();
    let rel = tempfile::tempdir().unwrap();
    let up = rel.path().join("sub");
    std::fs::create_dir(&up).unwrap();
    std::os::unix::fs::symlink(exe.parent().unwrap(), rel.path().join("bin")).unwrap();
    let name = exe.file_name().unwrap();
    std::os::unix::fs::symlink(
        std::path::Path::new("../bin").join(name),
        up.join("all_reduce_perf"),
    )
    .unwrap();
    let out = collbench()
        .arg("install-aliases")
        .arg(&up)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dangling = rel.path().join("gone");
    std::os::unix::fs::symlink(rel.path().join("nowhere"), &dangling).unwrap();
    let out = collbench()
        .arg("install-aliases")
        .arg(&dangling)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a link to nothing"), "{err}");
    // The alias prints nccl-tests' text by default and reads its long options.
    let out = std::process::Command::new(dir.path().join("all_reduce_perf"))
        .args([
            "-b",
            "8",
            "-e",
            "1K",
            "-f",
            "2",
            "-g",
            "2",
            "--check",
            "1",
            "--warmup_iters",
            "1",
            "-n",
            "2",
        ])
        .env_remove("COLLBENCH_LOG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = parse_runs(&text).unwrap();
    assert_eq!((runs.len(), runs[0].rows.len()), (1, 8), "{text}");
    check_run(&runs[0]).unwrap();
    // Its default size is nccl-tests' 32 MiB.
    let out = std::process::Command::new(dir.path().join("sendrecv_perf"))
        .args(["-g", "2", "-n", "1", "-w", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let runs = parse_runs(&text).unwrap();
    assert_eq!(runs[0].rows.len(), 1);
    assert_eq!(runs[0].rows[0][0], (32u64 << 20).to_string());
    assert_eq!(runs[0].rows[0][3], "sum", "sendrecv_perf prints sum");
    // nccl-tests' all-to-all-v by its binary name: the even split, checked.
    let out = std::process::Command::new(dir.path().join("alltoallv_perf"))
        .args([
            "-b", "1K", "-e", "4K", "-f", "2", "-g", "3", "-n", "1", "-w", "0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("alltoallv_perf"), "{text}");
    let runs = parse_runs(&text).unwrap();
    assert_eq!(runs[0].rows.len(), 3, "{text}");
    check_run(&runs[0]).unwrap();
}

/// Runs nccl-tests binary `name` (a link to collbench in `dir`) with
/// `args` and `env`: (exit code, stdout, stderr).
fn run_alias(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = std::process::Command::new(dir.join(name))
        .args(args)
        .env_remove("COLLBENCH_LOG")
        .env_remove("NCCL_TESTS_MIN_BW")
        .envs(env.iter().copied())
        .env("COLLBENCH_DUMP_DIR", dir.join("dumps"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The header line of nccl-tests' text.
fn header_of(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("# nThread"))
        .unwrap_or_else(|| panic!("no header in: {text}"))
}

/// Under collbench's own names, `-m` and `-G` reach nccl-tests' header:
/// in the sweep's text and when `report` prints the saved results again
/// (`iters` is nccl-tests' `-n`; the JSON's `meta.iters` counts every
/// operation, `meta.agg_iters` and `meta.graph` say the rest).
#[test]
fn agg_iters_and_graphs_reach_the_header_under_collbench_names() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "2",
            "--sizes",
            "8:64",
        ])
        .args(["--iters", "3", "--warmup", "1", "-m", "2", "-G", "1"])
        .args(["--format", "nccl-tests", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = "# nThread 1 nGpus 2 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 1 iters: 3 agg iters: 2 validation: 1 graph: 1";
    assert_eq!(header_of(&text), want);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (
            &v["meta"]["iters"],
            &v["meta"]["agg_iters"],
            &v["meta"]["graph"]
        ),
        (&Value::from(6), &Value::from(2), &Value::from(true))
    );
    let out = collbench()
        .args(["report", "--format", "nccl-tests"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(header_of(&String::from_utf8_lossy(&out.stdout)), want);
    // Without them the JSON keeps its old shape: no agg_iters, no graph.
    let out = collbench()
        .args([
            "all-reduce",
            "--ranks",
            "2",
            "--sizes",
            "8",
            "--iters",
            "1",
            "-q",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        v["meta"].get("agg_iters").is_none() && v["meta"].get("graph").is_none(),
        "{}",
        v["meta"]
    );
}

/// Under nccl-tests' names its flags mean what they mean there: sizes and
/// their defaults, the step, the header's fields as given, a flag given
/// twice, `-r -1`, `-d all`'s order, NCCL_TESTS_MIN_BW and `-h`.
#[test]
fn nccl_tests_binaries_read_flags_as_nccl_tests_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    collbench().arg("install-aliases").arg(d).assert().success();
    let fast = ["-n", "1", "-w", "0"];
    // Without -f the sizes step by 1 MiB; one rank by default.
    let mut args = vec!["-b", "1M", "-e", "3M"];
    args.extend(fast);
    let (code, text, err) = run_alias(d, "all_reduce_perf", &args, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        header_of(&text).starts_with("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 3145728 step: 1048576(bytes) warmup iters: 0 iters: 1 agg iters: 1 validation: 1 graph: 0"),
        "{text}"
    );
    let runs = parse_runs(&text).unwrap();
    let sizes: Vec<&str> = runs[0].rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["1048576", "2097152", "3145728"], "{text}");
    assert!(
        text.ends_with("# Collective test concluded: all_reduce_perf\n#\n"),
        "{text}"
    );
    // collbench's own --sizes: the header says what it sweeps.
    let (code, text, err) = run_alias(
        d,
        "all_reduce_perf",
        &["--sizes", "1K:4K:x2", "-n", "1", "-w", "0"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        header_of(&text).contains("minBytes 1024 maxBytes 4096 step: 2(factor)"),
        "{text}"
    );
    // collbench's own --ranks in one process: nccl-tests' -g, in the header too.
    let (code, text, err) = run_alias(
        d,
        "all_reduce_perf",
        &["--ranks", "3", "-b", "8", "-e", "8", "-n", "1", "-w", "0"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        header_of(&text).starts_with("# nThread 1 nGpus 3 minBytes 8 maxBytes 8"),
        "{text}"
    );
    assert_eq!(text.matches("#  Rank ").count(), 3, "{text}");
    // -e alone is below -b's default of 32 MiB: refused as nccl-tests does.
    let (code, _, err) = run_alias(d, "all_reduce_perf", &["-e", "1K"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid sizes for 'minbytes' and 'maxbytes': 33554432 > 1024"),
        "{err}"
    );
    // K is 1024 whatever follows it; the header shows the flags as given;
    // the last of a repeated flag holds.
    let (code, text, err) = run_alias(
        d,
        "all_gather_perf",
        &[
            "-b", "1KB", "-e", "64K", "-e", "2k", "-f", "2", "-t", "2", "-g", "1", "-n", "3", "-m",
            "2", "-c", "2", "-G", "1", "-w", "0",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        header_of(&text).starts_with("# nThread 2 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 0 iters: 3 agg iters: 2 validation: 2 graph: 1"),
        "{text}"
    );
    assert_eq!(parse_runs(&text).unwrap()[0].rows.len(), 2, "{text}");
    // -r -1: every root in turn.
    let (code, text, err) = run_alias(
        d,
        "broadcast_perf",
        &[
            "-b", "8", "-e", "8", "-t", "3", "-r", "-1", "-n", "1", "-w", "0",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let roots: Vec<String> = parse_runs(&text)
        .unwrap()
        .iter()
        .flat_map(|r| r.rows.iter().map(|x| x[4].clone()))
        .collect();
    assert_eq!(roots, ["0", "1", "2"], "{text}");
    // -d all in nccl-tests' order: bfloat16 after double.
    let (code, text, err) = run_alias(
        d,
        "all_reduce_perf",
        &["-b", "64", "-e", "64", "-d", "all", "-n", "1", "-w", "0"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let types: Vec<String> = parse_runs(&text)
        .unwrap()
        .iter()
        .flat_map(|r| r.rows.iter().map(|x| x[2].clone()))
        .collect();
    let at = |t: &str| {
        types
            .iter()
            .position(|x| x == t)
            .unwrap_or_else(|| panic!("{t}: {types:?}"))
    };
    assert!(
        at("int8") < at("half") && at("half") < at("float") && at("double") < at("bfloat16"),
        "{types:?}"
    );
    // NCCL_TESTS_MIN_BW: below 0.9 of it the run fails, as nccl-tests'.
    let small = ["-b", "64", "-e", "64", "-t", "2", "-n", "1", "-w", "0"];
    let (code, text, err) = run_alias(
        d,
        "all_reduce_perf",
        &small,
        &[("NCCL_TESTS_MIN_BW", "1000000")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("# Avg bus bandwidth") && l.ends_with(" FAILED")),
        "{text}"
    );
    assert!(
        err.contains("below 0.9 x NCCL_TESTS_MIN_BW=1000000"),
        "{err}"
    );
    let (code, text, err) = run_alias(d, "all_reduce_perf", &small, &[("NCCL_TESTS_MIN_BW", "0")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("# Avg bus bandwidth") && l.ends_with(" OK")),
        "{text}"
    );
    let (code, _, err) = run_alias(
        d,
        "all_reduce_perf",
        &small,
        &[("NCCL_TESTS_MIN_BW", "fast")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("NCCL_TESTS_MIN_BW=fast"), "{err}");
    // -h: the binary's own usage.
    let (code, text, _) = run_alias(d, "all_reduce_perf", &["-h"], &[]);
    assert_eq!(code, 0);
    assert!(text.contains("Usage: all_reduce_perf [-t N]"), "{text}");
    assert!(text.contains("Run as all_reduce_perf"), "{text}");
}

/// As nccl-tests does, the header (sizes, devices, columns) is printed
/// before the first case is measured: a run that hangs in it still shows
/// what it ran on, and no data line.
#[test]
fn the_header_comes_out_before_a_hang_in_the_first_case() {
    for format in ["nccl-tests", "table"] {
        let out = collbench()
            .args(["all-reduce", "--device", "host", "--ranks", "2"])
            .args(["--sizes", "1K:4K", "--format", format])
            .args(["--inject", "hang:rank=1,seq=1", "--timeout", "2s"])
            .args(["--dump-dir"])
            .arg(tempfile::tempdir().unwrap().path().join("d"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{format}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l.contains("size") && l.contains("busbw")),
            "{format}: no column header in:\n{text}"
        );
        assert!(
            text.lines().all(|l| l.starts_with('#')),
            "{format}:\n{text}"
        );
        if format == "nccl-tests" {
            assert!(
                text.contains("# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096")
                    && text.contains("validation: 1")
                    && text.contains("#  Rank  1 Group  0 Pid"),
                "{text}"
            );
            // No verdict a log parser could read as a pass.
            assert!(
                text.contains("# Out of bounds values : 0 FAILED (run interrupted: hang"),
                "{text}"
            );
        }
    }
    // Unchecked: the header says so before the first row, as after it.
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "1K",
        ])
        .args([
            "--format",
            "nccl-tests",
            "--no-check",
            "--iters",
            "2",
            "--warmup",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("validation: 0 graph: 0"), "{text}");
}

/// nccl-tests 2.17's flags (-S, -J, -x, -D, -V) are taken, each said to be
/// unused, and `-f` is read as its `strtol` reads it: `2.5` steps by 2.
#[test]
fn nccl_tests_2_17_flags_are_taken_and_step_factors_are_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    collbench().arg("install-aliases").arg(d).assert().success();
    let args = [
        "-b", "64", "-e", "256", "-f", "2.5", "-n", "1", "-w", "0", "-J", "x.json", "-S", "1",
        "-x", "2", "-D", "1", "-V", "4",
    ];
    let (code, text, err) = run_alias(d, "all_reduce_perf", &args, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(header_of(&text).contains("step: 2(factor)"), "{text}");
    let runs = parse_runs(&text).unwrap();
    let sizes: Vec<&str> = runs[0].rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["64", "128", "256"], "{text}");
    for flag in ["-S:", "-J x.json:", "-x:", "-D:", "-V:"] {
        assert!(err.contains(&format!("note: {flag}")), "{flag}: {err}");
    }
}
