//! End to end: injected faults, the watchdog's dumps, and `collbench analyze`
//! naming the culprit.

use serde_json::Value;
use std::time::{Duration, Instant};

mod common;
use common::{collbench, dump_of};

/// Runs a hanging sweep, checks exit 3 soon after the timeout and one dump
/// per rank, and returns `analyze --json`'s diagnosis.
fn hang_and_analyze(ranks: usize, inject: &str) -> Value {
    hang_and_analyze_all(ranks, &[inject], 3, Duration::from_secs(3 + 10))
}

/// [`hang_and_analyze`] with several injections, a timeout of `timeout_s`
/// seconds, and exit 3 within `within`.
fn hang_and_analyze_all(ranks: usize, injects: &[&str], timeout_s: u64, within: Duration) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let mut cmd = collbench();
    cmd.args([
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        &ranks.to_string(),
        "--sizes",
        "1K",
    ]);
    for inject in injects {
        cmd.args(["--inject", inject]);
    }
    let out = cmd
        .args([
            "--timeout",
            &format!("{timeout_s}s"),
            "--dump-dir",
            dir.path().to_str().unwrap(),
            "-q",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(t.elapsed() < within, "took {:?}", t.elapsed());
    assert!(err.contains("hang detected"), "{err}");
    for r in 0..ranks {
        let d: Value =
            serde_json::from_slice(&std::fs::read(dump_of(dir.path(), r)).unwrap()).unwrap();
        assert_eq!(d["schema"], "collbench.fr/1");
        assert_eq!(d["rank"], r);
        assert_eq!(d["world_size"], ranks);
        assert_eq!(d["reason"], "timeout");
    }
    let out = collbench()
        .args(["analyze", dir.path().to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a problem was found");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_rank_stopped_outside_collectives_is_a_hang_after_twice_the_timeout() {
    // No rank waits on a peer, so no wait can time out: the watchdog sees
    // every rank stopped and fires at twice the timeout (2 s here), not never.
    let t = Instant::now();
    let d = hang_and_analyze_all(
        3,
        &[
            "hang:rank=0,seq=4",
            "hang:rank=1,seq=4",
            "hang:rank=2,seq=4",
        ],
        2,
        Duration::from_secs(4 + 10),
    );
    assert!(
        t.elapsed() >= Duration::from_secs(4),
        "not before twice the timeout"
    );
    assert_eq!(d["culprits"], serde_json::json!([0, 1, 2]));
    assert_eq!(d["findings"][0]["kind"], "not-joined");
    assert_eq!(d["findings"][0]["seq"], 4);
    let detail = d["findings"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("no rank is in a collective"), "{detail}");
}

#[test]
fn a_lone_rank_stopped_outside_collectives_is_a_hang() {
    let d = hang_and_analyze_all(1, &["hang:rank=0,seq=2"], 1, Duration::from_secs(2 + 10));
    assert_eq!(d["culprits"], serde_json::json!([0]));
    assert_eq!(d["findings"][0]["seq"], 2);
}

#[test]
fn a_hung_rank_is_named_with_its_sequence_number() {
    let d = hang_and_analyze(4, "hang:rank=2,seq=5");
    assert_eq!(d["culprits"], serde_json::json!([2]));
    assert_eq!(d["findings"][0]["seq"], 5);
    assert_eq!(d["findings"][0]["kind"], "not-joined");
}

#[test]
fn a_hung_rank_among_seven_is_named() {
    let d = hang_and_analyze(7, "hang:rank=6,seq=9");
    assert_eq!(d["culprits"], serde_json::json!([6]));
    assert_eq!(d["findings"][0]["seq"], 9);
}

#[test]
fn a_rank_delayed_past_the_timeout_is_the_culprit() {
    let d = hang_and_analyze(4, "delay:rank=1,seq=3,ms=8000");
    assert_eq!(d["culprits"], serde_json::json!([1]));
    assert_eq!(d["findings"][0]["seq"], 3);
}

#[test]
fn a_short_delay_is_not_a_hang() {
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "1K",
            "--inject",
            "delay:rank=1,seq=2,ms=300",
            "--timeout",
            "5s",
            "-q",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn injected(fault: &str) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "3",
            "--sizes",
            "1K:4K",
            "--iters",
            "2",
            "--inject",
            fault,
        ])
        .args(["--json", json.to_str().unwrap(), "-q"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn injected_nan_is_caught_by_the_checks() {
    let (code, v, err) = injected("nan:rank=1");
    assert_eq!(code, 1, "{err}");
    let rows = v["rows"].as_array().unwrap();
    assert!(
        rows.iter().all(|r| r["nan"].as_i64().unwrap() > 0),
        "every row sees the NaN"
    );
    let first = rows[0]["first_error"].as_str().unwrap();
    assert!(
        first.contains("rank") && first.contains("element"),
        "{first}"
    );
}

#[test]
fn injected_corruption_is_caught_with_rank_and_element() {
    let (code, v, err) = injected("corrupt:rank=2");
    assert_eq!(code, 1, "{err}");
    let row = &v["rows"][0];
    assert!(row["wrong"].as_i64().unwrap() >= 1);
    let first = row["first_error"].as_str().unwrap();
    assert!(first.starts_with("rank 2 element 128"), "{first}");
}

/// Starts a long sweep, waits for its first finished row, sends `sig`.
fn signal_mid_run(sig: i32, dir: &std::path::Path) -> std::process::ExitStatus {
    let json = dir.join("r.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "8B:64B",
            "--iters",
            "300000",
            "-q",
            "--no-check",
        ])
        .args([
            "--dump-dir",
            dir.join("d").to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let jsonl = dir.join("r.jsonl");
    let t = Instant::now();
    while std::fs::read_to_string(&jsonl).map_or(0, |s| s.lines().count()) < 2 {
        assert!(t.elapsed() < Duration::from_secs(120), "no row finished");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    child.wait().unwrap()
}

#[test]
fn sigusr1_dumps_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let status = signal_mid_run(libc::SIGUSR1, dir.path());
    assert!(status.success());
    let snap = std::fs::read_dir(dir.path().join("d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-rank1-request1.json"))
        .expect("rank 1's first snapshot");
    let d: Value = serde_json::from_slice(&std::fs::read(snap).unwrap()).unwrap();
    assert_eq!(d["reason"], "request");
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(
        v["rows"].as_array().unwrap().len(),
        8,
        "the run went on to the end"
    );
}

#[test]
fn sigint_keeps_finished_rows_and_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let status = signal_mid_run(libc::SIGINT, dir.path());
    assert_eq!(status.code(), Some(130));
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap().len();
    assert!((1..8).contains(&rows), "finished rows are kept: {rows}");
    let d: Value =
        serde_json::from_slice(&std::fs::read(dump_of(&dir.path().join("d"), 0)).unwrap()).unwrap();
    assert_eq!(d["reason"], "signal");
}

#[test]
fn bad_inject_specs_exit_2() {
    for spec in ["hang:rank=9,seq=1", "explode:rank=0", "hang:rank=0"] {
        let out = collbench()
            .args(["all-reduce", "--ranks", "2", "--inject", spec])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--inject"));
    }
}

#[test]
fn analyze_reads_the_pytorch_fixtures() {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pytorch-fr");
    if !root.exists() {
        assert!(
            std::env::var("COLLBENCH_REQUIRE_FIXTURES").is_err(),
            "fixtures missing at {}",
            root.display()
        );
        eprintln!("SKIPPED: fixtures not found at {}", root.display());
        return;
    }
    for (case, code, culprits) in [
        ("ok-4", 0, serde_json::json!([])),
        ("skip-4", 1, serde_json::json!([2])),
    ] {
        for form in ["json", "pickle"] {
            let out = collbench()
                .args([
                    "analyze",
                    root.join(case).join(form).to_str().unwrap(),
                    "--json",
                ])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(code), "{case}/{form}");
            let d: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(d["culprits"], culprits, "{case}/{form}");
        }
    }
}

#[test]
fn analyze_of_nothing_readable_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junk"), b"not a dump").unwrap();
    let out = collbench()
        .args(["analyze", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = collbench()
        .args(["analyze", "/definitely/not/here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Rooted collectives and send-recv: a member whose part needs no laggard
/// (a reduce's leaf, a broadcast's root, a send-recv's sender) completes
/// the collective and moves on, perhaps to the harness's barrier; the
/// culprit is still the rank that never entered it, at its seq, in the
/// collectives' group (it was a barrier's, or another seq).
#[test]
fn rooted_collectives_and_send_recv_name_the_rank_that_never_joined() {
    for (args, culprit, seq) in [
        (&["reduce", "--ranks", "4", "--root", "0"][..], 3, 3),
        (&["gather", "--ranks", "4", "--root", "0"][..], 2, 3),
        (&["broadcast", "--ranks", "4", "--root", "2"][..], 3, 3),
        (&["send-recv", "--ranks", "4"][..], 1, 4),
        (&["send-recv", "--ranks", "3"][..], 0, 2),
        // The root stops: its leaves complete the later gathers and reduces
        // without it (their data waits in the connections) and wait at
        // the barrier after the timed loop, which the root never reaches.
        (&["gather", "--ranks", "4", "--root", "2"][..], 2, 2),
        (&["reduce", "--ranks", "3", "--root", "1"][..], 1, 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = collbench()
            .args(args)
            .args([
                "--device",
                "host",
                "--sizes",
                "1K:4K",
                "--timeout",
                "2s",
                "-q",
            ])
            .arg("--inject")
            .arg(format!("hang:rank={culprit},seq={seq}"))
            .arg("--dump-dir")
            .arg(dir.path())
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let out = collbench()
            .arg("analyze")
            .arg(dir.path())
            .arg("--json")
            .output()
            .unwrap();
        let d: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(d["culprits"], serde_json::json!([culprit]), "{args:?}: {d}");
        let first = &d["findings"][0];
        assert_eq!(
            (&first["kind"], &first["pg"], &first["seq"]),
            (&"not-joined".into(), &"0".into(), &seq.into()),
            "{args:?}: {d}"
        );
    }
}

/// A `--dump-dir` replaced by a file while the run goes on: the hang is
/// still exit 3, and the message says the dumps could not be written and
/// why, rather than nothing.
#[test]
fn dumps_that_cannot_be_written_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("d");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args(["all-reduce", "--device", "host", "--ranks", "2"])
        .args(["--sizes", "1K", "--inject", "hang:rank=1,seq=3"])
        .args(["--timeout", "6s", "-q", "--dump-dir"])
        .arg(&dumps)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let _ = std::fs::remove_dir_all(&dumps);
    std::fs::write(&dumps, b"not a folder").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("the flight-recorder dumps could not be written to")
            && err.contains("it is not a folder"),
        "{err}"
    );
    assert!(!err.contains("collbench analyze"), "{err}");
    assert_eq!(std::fs::read(&dumps).unwrap(), b"not a folder");
}

/// Without `--dump-dir`, dumps go under ./collbench-dumps; where that
/// cannot be made (a file of that name), under this user's folder in the
/// temporary folder, and the hang's message says where: a hang's dumps are
/// not lost.
#[test]
fn dumps_find_a_folder_when_the_default_one_cannot_be_made() {
    let cwd = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("collbench-dumps"), "mine\n").unwrap();
    let out = collbench()
        .current_dir(cwd.path())
        .env("TMPDIR", tmp.path())
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "1K",
        ])
        .args(["-n", "2", "-w", "1", "-q", "--timeout", "1s"])
        .args(["--inject", "hang:rank=0,seq=3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // This user's own folder there.
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(tmp.path()).unwrap().uid();
    let root = tmp.path().join(format!("collbench-dumps-{uid}"));
    let runs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        std::fs::read_dir(&runs[0]).unwrap().count(),
        2,
        "a dump per rank"
    );
    assert!(err.contains(&runs[0].display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("collbench-dumps")).unwrap(),
        "mine\n"
    );
}

/// A reduce's step that receives from several peers: one peer delivers
/// late, another never comes. The rank's dump names the peer it still
/// waits on (it had kept the first one it waited on), and `analyze` names
/// the rank that never started, at the collective, not the barrier after.
#[test]
fn a_step_receiving_from_several_names_the_peer_it_still_waits_on() {
    common::a_multi_receive_hang_names_the_missing_peer(collbench, "host", 500, "2s");
}
