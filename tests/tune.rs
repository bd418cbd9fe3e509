//! The cost model end to end: `collbench tune` writes a table, `--tuning`
//! reads it (auto takes its pick; rows carry the pick and the prediction),
//! `collbench model` predicts at other rank counts. Timings are the
//! machine's: these tests check the plumbing and the arithmetic, never
//! that one algorithm beats another here (scripts/bench_auto.sh does).

use serde_json::Value;

mod common;
use common::{collbench, read_json as json};

/// A short all-reduce sweep of 2 host ranks with `args`, its results at
/// `path`.
fn host_sweep(path: &std::path::Path, args: &[&str]) -> std::path::PathBuf {
    let out = collbench()
        .args(["all-reduce", "--device", "host", "--ranks", "2"])
        .args(["--iters", "3", "--warmup", "1", "-q"])
        .args(args)
        .arg("--json")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path.to_path_buf()
}

#[test]
fn tune_writes_a_table_that_auto_and_model_read() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.json");
    let out = collbench()
        .args([
            "tune",
            "--device",
            "host",
            "--ranks",
            "3",
            "--sizes",
            "8B:256K:x8",
        ])
        .args([
            "--iters",
            "3",
            "--warmup",
            "1",
            "--output",
            table.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("latency/hop"), "{text}");
    let t = json(&table);
    assert_eq!(t["schema"], "collbench.tuning/1");
    assert_eq!(t["meta"]["device"], "host");
    let entries = t["entries"].as_array().unwrap();
    let algos: Vec<&str> = entries
        .iter()
        .map(|e| e["algo"].as_str().unwrap())
        .collect();
    assert_eq!(algos, ["direct", "ring", "tree"], "{t:#}");
    for e in entries {
        assert_eq!(e["ranks"], 3);
        assert_eq!(e["protocol"], "host");
        assert_eq!(e["points"], 6);
        assert!(e["latency_us"].as_f64().unwrap() > 0.0, "{e}");
    }

    // Every algorithm measured, each row with the model's pick at its size
    // and its own prediction; -v sets the pick beside the measurements.
    let res = dir.path().join("r.json");
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "3",
            "--algo",
            "all",
        ])
        .args([
            "--sizes",
            "1K:64K:x8",
            "--iters",
            "3",
            "--warmup",
            "1",
            "-v",
        ])
        .args([
            "--tuning",
            table.to_str().unwrap(),
            "--json",
            res.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("the cost model's pick beside each algorithm's measured p50"),
        "{text}"
    );
    assert!(text.contains("x the fastest"), "{text}");
    assert!(text.contains("model: "), "{text}");
    let rows = json(&res)["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 3 * 3 * 2);
    for r in &rows {
        let same_size: Vec<&Value> = rows.iter().filter(|x| x["bytes"] == r["bytes"]).collect();
        assert!(
            same_size.iter().all(|x| x["auto_pick"] == r["auto_pick"]),
            "{r}"
        );
        assert!(["ring", "tree", "direct"].contains(&r["auto_pick"].as_str().unwrap()));
        assert!(r["predicted_us"].as_f64().unwrap() > 0.0, "{r}");
    }

    // `auto` runs the pick.
    let res2 = dir.path().join("a.json");
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "3",
            "--sizes",
            "1K:64K:x8",
        ])
        .args([
            "--iters",
            "2",
            "--warmup",
            "1",
            "-q",
            "--tuning",
            table.to_str().unwrap(),
        ])
        .args(["--json", res2.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in json(&res2)["rows"].as_array().unwrap() {
        assert_eq!(r["algo"], r["auto_pick"], "{r}");
    }
    // A collective the table lacks: said, not silently unpredicted.
    let out = collbench()
        .args(["all", "--device", "host", "--ranks", "3", "--sizes", "1K"])
        .args(["--iters", "1", "--warmup", "0", "-q", "--tuning"])
        .arg(&table)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let note = err
        .lines()
        .find(|l| l.contains(": no entry for "))
        .unwrap_or_else(|| panic!("no note: {err}"));
    assert!(
        note.contains("all-gather")
            && !note.contains("all-reduce,")
            && !note.contains(" all-reduce"),
        "{note}"
    );

    // The model at a scale this machine does not run.
    let pred = dir.path().join("m.json");
    let out = collbench()
        .args([
            "model",
            "--tuning",
            table.to_str().unwrap(),
            "--ranks",
            "64",
        ])
        .args(["--sizes", "1K:1G:x32", "--json", pred.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("all-reduce on 64 ranks"), "{text}");
    assert!(text.contains("(fit: 3 ranks)"), "{text}");
    let m = json(&pred);
    assert_eq!(m["ranks"], 64);
    let rows = m["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5 * 3);
    // One pick per size.
    for b in [1024u64, 32 << 10, 1 << 20, 32 << 20, 1 << 30] {
        let picks = rows
            .iter()
            .filter(|r| r["bytes"] == b && r["pick"] == true)
            .count();
        assert_eq!(picks, 1, "{b}");
    }
    // An entry fitted from latency-bound sizes only has no bandwidth: the
    // model says so instead of "0.0 GB/s".
    assert!(text.contains(" x bytes at up to "), "{text}");
    let mut t = json(&table);
    for e in t["entries"].as_array_mut().unwrap() {
        e["bandwidth"] = Value::Array(vec![]);
    }
    let flat = dir.path().join("flat.json");
    std::fs::write(&flat, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = collbench()
        .args(["model", "--tuning", flat.to_str().unwrap(), "--ranks", "8"])
        .args(["--sizes", "1K:1M:x32"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "latency only (no size of the fit was bandwidth-bound; it predicts sizes up to"
        ) && !text.contains("at up to"),
        "{text}"
    );
    // Past the sizes the fit saw, no prediction and no pick.
    let past = text
        .lines()
        .find(|l| l.trim_start().starts_with("1048576"))
        .unwrap_or_default();
    assert!(past.trim_end().ends_with("-  -"), "{text}");
}

/// From a link's figures alone: rings win large messages on many ranks
/// (least traffic), trees small ones (fewest hops), and the arithmetic is
/// the model's: ring all-reduce on 8 ranks at 1 GB/s and 1 us per hop moves
/// 2 * 7/8 of the bytes and waits 14 hops.
#[test]
fn a_link_alone_predicts_by_hops_and_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let pred = dir.path().join("m.json");
    let out = collbench()
        .args([
            "model",
            "--link-gbps",
            "1",
            "--latency-us",
            "1",
            "--ranks",
            "8",
        ])
        .args([
            "--collective",
            "all-reduce,all-gather",
            "--sizes",
            "8B:1G:x8",
        ])
        .args(["--json", pred.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = json(&pred);
    let rows = m["rows"].as_array().unwrap();
    let at = |algo: &str, b: u64| {
        rows.iter()
            .find(|r| r["collective"] == "all-reduce" && r["algo"] == algo && r["bytes"] == b)
            .unwrap()
            .clone()
    };
    let ring = at("ring", 1 << 30);
    let want = 14.0 + (1u64 << 30) as f64 * 2.0 * 7.0 / 8.0 / 1e3;
    assert!(
        (ring["predicted_us"].as_f64().unwrap() / want - 1.0).abs() < 1e-9,
        "{ring}"
    );
    assert_eq!(ring["pick"], true);
    assert_eq!(at("tree", 8)["pick"], true);
    assert!(rows.iter().any(|r| r["collective"] == "all-gather"));
}

#[test]
fn bad_model_input_is_exit_2_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"schema\": 1}").unwrap();
    // A value the error quotes, with an escape sequence in it.
    let colour = dir.path().join("colour.json");
    std::fs::write(&colour, "{\"schema\": \"x\\u001b[31m\"}").unwrap();
    let missing = dir.path().join("none.json");
    let log = dir.path().join("ar.log");
    std::fs::write(
        &log,
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n\
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
           8             2     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0\n\
# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0 \n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "tune".into(),
                "--from".into(),
                log.display().to_string(),
                "--output".into(),
                dir.path().join("t.json").display().to_string(),
            ],
            "an nccl-tests log; tune fits collbench's own algorithms",
        ),
        (
            vec!["model".into(), "--ranks".into(), "4".into()],
            "<--tuning <FILE>|--link-gbps <GB/s>>",
        ),
        (
            ["model", "--link-gbps", "5", "--latency-us", "2", "--ranks", "18446744073709551615"]
                .map(String::from)
                .to_vec(),
            "--ranks 18446744073709551615: the model predicts for up to 4194304 ranks",
        ),
        (
            [
                "model",
                "--link-gbps",
                "5",
                "--latency-us",
                "1",
                "--ranks",
                "4",
                "--collective",
                "all-to-all-v",
            ]
            .map(String::from)
            .to_vec(),
            "nothing to predict: all-to-all-v: a link alone predicts only the nine even collectives",
        ),
        (
            vec!["model", "--link-gbps", "5", "--ranks", "4"]
                .into_iter()
                .map(String::from)
                .collect(),
            "--latency-us",
        ),
        (
            vec![
                "model",
                "--link-gbps",
                "-5",
                "--latency-us",
                "1",
                "--ranks",
                "4",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            "not a positive number",
        ),
        (
            vec![
                "model".into(),
                "--tuning".into(),
                junk.display().to_string(),
                "--ranks".into(),
                "4".into(),
            ],
            "not a tuning table",
        ),
        (
            vec![
                "model".into(),
                "--tuning".into(),
                colour.display().to_string(),
                "--ranks".into(),
                "4".into(),
            ],
            "schema 'x\\u001b[31m'",
        ),
        (
            vec![
                "all-reduce".into(),
                "--tuning".into(),
                missing.display().to_string(),
            ],
            "--tuning",
        ),
        (
            vec!["tune".into(), "--ranks".into(), "2".into()],
            "--output",
        ),
        (
            [
                "model",
                "--link-gbps",
                "5",
                "--latency-us",
                "1",
                "--ranks",
                "4",
                "--protocol",
                "ll",
            ]
            .map(String::from)
            .to_vec(),
            "a link alone (--link-gbps) has no protocols",
        ),
    ];
    // Under a launcher: one sweep, not one per task.
    let out = collbench()
        .args(["tune", "--ranks", "2", "--output"])
        .arg(dir.path().join("t.json"))
        .env("OMPI_COMM_WORLD_SIZE", "4")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("tune --from"), "{err}");
    for (args, why) in cases {
        let out = collbench().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: expected '{why}' in {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!err.contains('\u{1b}'), "{args:?}: {err}");
    }
}

#[test]
fn tune_refuses_what_it_cannot_fit_before_sweeping_and_is_quiet_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.json");
    let t = table.to_str().unwrap();
    let split = dir.path().join("w.txt");
    std::fs::write(&split, "1 3\n").unwrap();
    let w = split.to_str().unwrap();
    let (rj, rjl) = (dir.path().join("r.json"), dir.path().join("r.jsonl"));
    let refused: &[(&[&str], &str)] = &[
        (&["--placement", "in"], "tune fits out-of-place rows"),
        (&["--tuning", t], "drop --tuning"),
        (&["--csv", t], "--output and --csv both write"),
        (&["--dump-dir", t], "is also --output"),
        (
            &[
                "--json",
                rj.to_str().unwrap(),
                "--csv",
                rjl.to_str().unwrap(),
            ],
            "both write",
        ),
        (
            &[
                "--collective",
                "all-gather-v",
                "--ranks",
                "2",
                "--split",
                w,
                "--csv",
                w,
            ],
            "that is an input of this command",
        ),
        (
            &[
                "--collective",
                "all-to-all-v",
                "--ranks",
                "4",
                "--split",
                "hot:9",
            ],
            "rank 9 is outside the 4 ranks",
        ),
    ];
    for &(args, why) in refused {
        let out = collbench()
            .args(["tune", "--device", "host", "--output", t])
            .args(args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty() && !table.exists() && !rj.exists(),
            "{args:?}: nothing ran"
        );
        assert_eq!(std::fs::read_to_string(&split).unwrap(), "1 3\n");
    }
    for stdout in ["-", "/dev/stdout"] {
        let out = collbench()
            .current_dir(dir.path())
            .args(["tune", "--device", "host", "-O", stdout])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("--output {stdout}: the table goes to a file")),
            "{err}"
        );
    }
    assert!(!dir.path().join("-").exists());
    let out = collbench()
        .args([
            "tune", "--device", "host", "--ranks", "2", "--sizes", "8B:1K:x8",
        ])
        .args(["--iters", "2", "--warmup", "0", "-q", "--output", t])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "-q: nothing on stdout");
    assert_eq!(json(&table)["schema"], "collbench.tuning/1");
    // `--json -`: stdout is the results alone; the fit goes to stderr.
    for data in ["--json", "--csv"] {
        let out = collbench()
            .args([
                "tune", "--device", "host", "--ranks", "2", "--sizes", "8B:1K:x8",
            ])
            .args(["--iters", "2", "--warmup", "0", data, "-", "--output", t])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("# fitted on"), "{data} -: {text}");
        assert!(
            err.contains("# fitted on") && err.contains("# wrote"),
            "{err}"
        );
        if data == "--json" {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["schema"], "collbench.results/1");
        }
    }
    // A protocol the table was not fitted with is named, with what it has.
    let out = collbench()
        .args(["model", "--tuning", t, "--ranks", "4", "--protocol", "ll"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("has entries for host"), "{err}");
}

/// Several `--from` files of one device make one table: an entry per
/// (collective, algorithm, protocol, channels, ranks), fitted on every
/// file's sizes; files of different devices are refused.
#[test]
fn tune_from_several_files_fits_each_choice_once() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = |name: &str, sizes: &str| {
        host_sweep(
            &dir.path().join(name),
            &["--algo", "ring,tree", "--sizes", sizes],
        )
    };
    let (a, b) = (sweep("a.json", "8B:4K:x8"), sweep("b.json", "4K:256K:x8"));
    let table = dir.path().join("t.json");
    let out = collbench()
        .arg("tune")
        .arg("--from")
        .arg(&a)
        .arg(&b)
        .arg("--output")
        .arg(&table)
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = json(&table);
    let entries = t["entries"].as_array().unwrap();
    let algos: Vec<&str> = entries
        .iter()
        .map(|e| e["algo"].as_str().unwrap())
        .collect();
    assert_eq!(algos, ["ring", "tree"], "{t:#}");
    // 8B 64B 512B 4K from a, 4K 32K 256K from b: 4K once.
    assert!(entries.iter().all(|e| e["points"] == 6), "{t:#}");
    let command = t["meta"]["command"].as_str().unwrap();
    assert_eq!(command.matches("all-reduce").count(), 2, "{command}");
    // Another device's results do not join the fit.
    let mut other = json(&b);
    other["meta"]["device"] = "cuda-emu".into();
    let c = dir.path().join("c.json");
    std::fs::write(&c, serde_json::to_vec(&other).unwrap()).unwrap();
    let out = collbench()
        .arg("tune")
        .arg("--from")
        .arg(&a)
        .arg(&c)
        .arg("--output")
        .arg(dir.path().join("t2.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ran on cuda-emu ("), "{err}");
    // Nor another machine's, on the same kind of device.
    let mut other = json(&b);
    other["meta"]["devices"] = serde_json::json!(["Another CPU (64 cores)"]);
    std::fs::write(&c, serde_json::to_vec(&other).unwrap()).unwrap();
    let out = collbench()
        .arg("tune")
        .arg("--from")
        .arg(&a)
        .arg(&c)
        .arg("--output")
        .arg(dir.path().join("t3.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ran on host (Another CPU (64 cores))"),
        "{err}"
    );
}

/// `tune --from` keeps what the sweep fixed: `--channels` (and, on a GPU,
/// `--protocol`), from the results' meta; files that differ in them make
/// entries of their own, never one merged entry.
#[test]
fn tune_from_keeps_the_channels_and_protocol_of_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let c2 = host_sweep(
        &dir.path().join("c2.json"),
        &["--algo", "ring", "--channels", "2", "--sizes", "8B:64K:x8"],
    );
    let c1 = host_sweep(
        &dir.path().join("c1.json"),
        &["--algo", "ring", "--channels", "1", "--sizes", "8B:64K:x8"],
    );
    assert_eq!(json(&c2)["meta"]["channels"], 2);
    let fit = |files: &[&std::path::Path], name: &str| {
        let table = dir.path().join(name);
        let mut c = collbench();
        c.args(["tune", "-q", "--output"]).arg(&table).arg("--from");
        let out = c.args(files).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{err}");
        json(&table)
    };
    let t = fit(&[&c2, &c1], "t.json");
    let channels: Vec<i64> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["channels"].as_i64().unwrap())
        .collect();
    assert_eq!(channels, [2, 1], "{t:#}");
    // A GPU sweep's protocol (the meta of one, as `--protocol ll` writes it).
    let mut ll = json(&c2);
    ll["meta"]["device"] = "cuda-emu".into();
    ll["meta"]["protocol"] = "ll".into();
    let llp = dir.path().join("ll.json");
    std::fs::write(&llp, serde_json::to_vec(&ll).unwrap()).unwrap();
    let t = fit(&[&llp], "tll.json");
    assert_eq!(t["entries"][0]["protocol"], "ll", "{t:#}");
    assert_eq!(t["entries"][0]["channels"], 2, "{t:#}");
}

/// `tune --from` fits one operation's time: of results swept over two
/// operators only the first's rows, and of a grouped sweep nothing (a
/// group's row times several operations).
#[test]
fn tune_from_fits_single_operations_of_one_operator() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = |name: &str, extra: &[&str]| {
        let args = [&["--algo", "ring", "--sizes", "8B:4K:x8"][..], extra].concat();
        host_sweep(&dir.path().join(name), &args)
    };
    let tune = |from: &std::path::Path, to: &str| {
        collbench()
            .arg("tune")
            .arg("--from")
            .arg(from)
            .arg("--output")
            .arg(dir.path().join(to))
            .arg("-q")
            .output()
            .unwrap()
    };
    let ops = sweep("ops.json", &["--op", "sum,max"]);
    let out = tune(&ops, "t.json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = json(&dir.path().join("t.json"));
    // 8B 64B 512B 4K, once each: sum's.
    assert_eq!(t["entries"][0]["points"], 4, "{t:#}");
    let grouped = sweep("group.json", &["--group", "4"]);
    let out = tune(&grouped, "g.json");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no clean out-of-place row"), "{err}");
    assert!(!dir.path().join("g.json").exists());
}

/// A table fitted on another kind of device is used, with a note saying
/// whose predictions they are; one of this device says nothing.
#[test]
fn a_table_of_another_device_is_noted() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.json");
    let out = collbench()
        .args([
            "tune", "--device", "host", "--ranks", "2", "--sizes", "8B:4K",
        ])
        .args(["--iters", "2", "--warmup", "1", "-q", "--output"])
        .arg(&table)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut other = json(&table);
    other["meta"]["device"] = "cuda".into();
    let cuda = dir.path().join("cuda.json");
    std::fs::write(&cuda, serde_json::to_vec(&other).unwrap()).unwrap();
    for (t, noted) in [(&table, false), (&cuda, true)] {
        let out = collbench()
            .args([
                "all-reduce",
                "--device",
                "host",
                "--ranks",
                "2",
                "--sizes",
                "8B:64B",
                "-q",
            ])
            .arg("--tuning")
            .arg(t)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_eq!(
            err.contains("note: --tuning: the table was fitted on cuda"),
            noted,
            "{err}"
        );
    }
}

/// A tune sweep that does not finish clean exits as a sweep would (3 for a
/// hang, 1 for wrong values), its results saying how it ended, and writes
/// no table; `--from` such results warns that they did not finish, and
/// refuses a sweep's options it would ignore.
#[test]
fn a_tune_that_does_not_finish_exits_as_its_sweep_and_writes_no_table() {
    let dir = tempfile::tempdir().unwrap();
    let (table, results) = (dir.path().join("t.json"), dir.path().join("r.json"));
    let sweep = |inject: &str| {
        collbench()
            .args([
                "tune", "--device", "host", "--ranks", "2", "--sizes", "8B:4K",
            ])
            .args(["--iters", "2", "--warmup", "0", "-q", "--timeout", "1"])
            .args(["--dump-dir", dir.path().join("dumps").to_str().unwrap()])
            .args(["--inject", inject, "--output"])
            .arg(&table)
            .arg("--json")
            .arg(&results)
            .output()
            .unwrap()
    };
    for (inject, code, partial) in [
        ("hang:rank=0,seq=20", 3, Some("hang")),
        ("corrupt:rank=1,seq=3", 1, None),
    ] {
        let out = sweep(inject);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{inject}: {err}");
        assert!(
            err.contains("tune: the sweep did not finish clean: no table written"),
            "{err}"
        );
        assert!(!table.exists(), "{inject}: no table");
        let v = json(&results);
        assert_eq!(
            v["meta"]["partial"]["reason"].as_str(),
            partial,
            "{inject}: {v}"
        );
    }
    // The hung run's results: its finished rows are fitted, with a warning.
    let out = sweep("hang:rank=0,seq=20");
    assert_eq!(out.status.code(), Some(3));
    let out = collbench()
        .args(["tune", "-q", "--output"])
        .arg(&table)
        .arg("--from")
        .arg(&results)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the run did not finish (") && err.contains("fitting its"),
        "{err}"
    );
    let out = collbench()
        .args(["tune", "--csv", "x.csv", "--output"])
        .arg(dir.path().join("u.json"))
        .arg("--from")
        .arg(&results)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--csv has nothing to do"), "{err}");
    // Every option of the sweep, named as it is spelled.
    let out = collbench()
        .args(["tune", "--ranks", "8", "-b", "8", "--output"])
        .arg(dir.path().join("u.json"))
        .arg("--from")
        .arg(&results)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("runs no sweep: ")
            && err.contains("--ranks")
            && err.contains("-b/--minbytes")
            && err.contains("have nothing to do"),
        "{err}"
    );
    assert!(!dir.path().join("u.json").exists());
}

/// Tables and results stay readable by collbench's own readers: a sweep
/// with a valid table of a slow link leaves out predictions past what
/// results hold, and `tune --from` results of absurd times refuses to
/// write a table `model` would refuse.
#[test]
fn what_tune_and_tuning_write_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.json");
    std::fs::write(
        &slow,
        r#"{"schema":"collbench.tuning/1","meta":{"version":"0.1.0","created_at":"","host":"vm","device":"host","command":"","dtype":"float","iters":20},"entries":[{"collective":"all-reduce","algo":"direct","protocol":"host","channels":0,"ranks":2,"latency_us":1.0,"bandwidth":[[1,1e-9]],"points":1}]}"#,
    )
    .unwrap();
    let results = host_sweep(
        &dir.path().join("p.json"),
        &[
            "--sizes",
            "8:2M:x512",
            "--algo",
            "auto",
            "--tuning",
            slow.to_str().unwrap(),
        ],
    );
    let v = json(&results);
    let predicted: Vec<Option<f64>> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["predicted_us"].as_f64())
        .collect();
    // 8 B: 8e3 s; 2 MiB: 2e12 us, past the 1e12 results hold.
    assert!(
        predicted.first().is_some_and(|p| p.is_some()),
        "{predicted:?}"
    );
    assert!(
        predicted.last().is_some_and(|p| p.is_none()),
        "{predicted:?}"
    );
    let out = collbench().arg("report").arg(&results).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let good = host_sweep(&dir.path().join("g.json"), &["--sizes", "8B:4K"]);
    let mut v = json(&good);
    for r in v["rows"].as_array_mut().unwrap() {
        let bytes = r["bytes"].as_f64().unwrap();
        r["stats"]["p50_us"] = serde_json::json!(5e6 * (1.0 + bytes / 4096.0));
        r["time_us"] = r["stats"]["p50_us"].clone();
    }
    let absurd = dir.path().join("absurd.json");
    std::fs::write(&absurd, serde_json::to_vec(&v).unwrap()).unwrap();
    let table = dir.path().join("t.json");
    let out = collbench()
        .args(["tune", "--output"])
        .arg(&table)
        .arg("--from")
        .arg(&absurd)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the fit is no table collbench reads (") && err.contains("latency/hop"),
        "{err}"
    );
    assert!(!table.exists());
}

/// `--root all` measures a point a root at each size: the fit takes their
/// median (it refused its own fit, after the whole sweep, before). Sizes
/// all within latency fit no bandwidth, said as such, not as 0 GB/s.
#[test]
fn tune_over_every_root_fits_one_point_a_size() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.json");
    let out = collbench()
        .args(["tune", "--device", "host", "--ranks", "3"])
        .args(["--collective", "broadcast", "--root", "all"])
        .args(["--sizes", "1K:64K:x8", "--iters", "2", "--warmup", "1"])
        .arg("--output")
        .arg(&table)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let t = json(&table);
    let entries = t["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{t}");
    assert!(
        entries
            .iter()
            .all(|e| e["collective"] == "broadcast" && e["points"] == 3),
        "{t}"
    );

    let out = collbench()
        .args(["tune", "--device", "host", "--ranks", "2", "--sizes", "1K"])
        .args(["--iters", "2", "--warmup", "1", "--output"])
        .arg(&table)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("latency only") && !text.contains(" 0.00 "),
        "{text}"
    );
}

/// `tune --from` results of other collectives than `--collective` names
/// (all-reduce by default): the message says which they hold.
#[test]
fn tune_from_results_of_another_collective_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("b.json");
    let out = collbench()
        .args([
            "broadcast",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "1K:4K",
        ])
        .args(["--iters", "2", "--warmup", "1", "-q", "--json"])
        .arg(&results)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = dir.path().join("t.json");
    let out = collbench()
        .arg("tune")
        .arg("--from")
        .arg(&results)
        .arg("--output")
        .arg(&table)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no rows of all-reduce") && err.contains("which hold broadcast"),
        "{err}"
    );
    assert!(!table.exists());
}
