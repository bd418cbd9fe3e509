//! The binary under `mpirun` (built with `--features mpi`): one rank per
//! process, the builtin engine beside MPI's, hangs dumped by every process.
//! Without `mpirun` these tests say SKIPPED, or fail with COLLBENCH_REQUIRE_MPI=1.
#![cfg(feature = "mpi")]

use serde_json::Value;
use std::process::{Command, Output};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

mod common;
use common::{dump_of, read_json as json};

/// Whether mpirun is here; without it the test says it is skipped.
fn have_mpirun() -> bool {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("COLLBENCH_REQUIRE_MPI").is_err(),
            "mpirun is required (COLLBENCH_REQUIRE_MPI=1) but missing"
        );
        eprintln!("SKIPPED: mpirun not found");
    }
    found
}

/// This file's tests share the host's cores; the one whose verdict rests
/// on timings (`--links`) takes them alone: beside another test's mpirun a
/// slowed link of 4 processes on 2 cores once came out no finding.
static CORES: RwLock<()> = RwLock::new(());

/// mpirun, where it is here, and a share of the cores while the guard lives.
fn mpirun() -> Option<RwLockReadGuard<'static, ()>> {
    have_mpirun().then(|| CORES.read().unwrap_or_else(|e| e.into_inner()))
}

/// mpirun, where it is here, and the cores alone while the guard lives.
fn mpirun_alone() -> Option<RwLockWriteGuard<'static, ()>> {
    have_mpirun().then(|| CORES.write().unwrap_or_else(|e| e.into_inner()))
}

fn launch(np: usize, args: &[&str]) -> Output {
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let mut cmd = Command::new("timeout");
    cmd.arg("300").arg("mpirun").args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ]);
    cmd.arg(bin).args(args);
    cmd.output().expect("mpirun runs")
}

#[test]
fn every_collective_and_algorithm_on_2_3_and_4_processes() {
    let Some(_cores) = mpirun() else {
        return;
    };
    for np in [2, 3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r.json");
        let out = launch(
            np,
            &[
                "all",
                "--device",
                "host",
                "--algo",
                "all",
                "--sizes",
                "8B:1M:x8",
                "--iters",
                "3",
                "-q",
                "--json",
                f.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "np={np}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(&f);
        assert_eq!(v["meta"]["world_size"], np);
        let rows = v["rows"].as_array().unwrap();
        assert!(rows.len() > 50, "np={np}: {} rows", rows.len());
        assert!(
            rows.iter().all(|r| r["wrong"] == 0 && r["nan"] == 0),
            "np={np}"
        );
    }
}

#[test]
fn ranks_on_other_hosts_are_reached_through_the_relay() {
    let Some(_cores) = mpirun() else {
        return;
    };
    // COLLBENCH_FORCE_RELAY=1 treats every peer as remote: the relay path on one host.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let out = Command::new("timeout")
        .args([
            "300",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-x",
            "COLLBENCH_FORCE_RELAY",
            "-np",
            "3",
        ])
        .arg(bin)
        .args([
            "all",
            "--algo",
            "all",
            "--sizes",
            "8B:512K:x8",
            "--iters",
            "2",
            "-q",
            "--json",
            f.to_str().unwrap(),
        ])
        .env("COLLBENCH_FORCE_RELAY", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&f);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() > 50);
    assert!(rows.iter().all(|r| r["wrong"] == 0 && r["nan"] == 0));
}

#[test]
fn builtin_and_mpi_engines_side_by_side() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let out = launch(
        2,
        &[
            "all-reduce",
            "--engine",
            "builtin,mpi",
            "--sizes",
            "8B:1M:x32",
            "--iters",
            "3",
            "-q",
            "--json",
            f.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&f);
    let engines: std::collections::BTreeSet<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines, ["builtin", "mpi"].into_iter().collect());
    assert!(v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["wrong"] == 0));
}

/// A hang injected on `rank` at `seq` of `np` processes on `device`: every
/// process exits 3 with its dump, and `analyze` names the rank and operation.
fn hang_is_dumped_and_diagnosed(np: usize, device: &str, rank: usize, seq: usize) {
    let dir = tempfile::tempdir().unwrap();
    // A path longer than one bootstrap record (254 bytes), as cluster file
    // systems have them: rank 0 had failed to send it, and the others
    // waited 600 s for it.
    let deep = "d".repeat(100);
    let d = dir.path().join("dumps").join(&deep).join(&deep).join(&deep);
    assert!(d.as_os_str().len() > 300);
    let t = std::time::Instant::now();
    let inject = format!("hang:rank={rank},seq={seq}");
    let out = launch(
        np,
        &[
            "all-reduce",
            "--device",
            device,
            "--sizes",
            "1K",
            "--inject",
            &inject,
            "--timeout",
            "3s",
            "--dump-dir",
            d.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{device}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(60));
    for r in 0..np {
        assert!(dump_of(&d, r).exists(), "{device}: rank {r} dumped");
    }
    let out = Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args(["analyze", d.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["culprits"], serde_json::json!([rank]), "{device}: {v}");
    assert_eq!(v["findings"][0]["seq"], seq, "{device}");
    assert!(
        v["unreadable"].as_array().is_none_or(|u| u.is_empty()),
        "{device}: {v}"
    );
}

#[test]
fn an_injected_hang_is_dumped_by_every_process_and_diagnosed() {
    let Some(_cores) = mpirun() else {
        return;
    };
    hang_is_dumped_and_diagnosed(4, "host", 2, 5);
}

#[test]
fn ranks_must_match_the_world() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let out = launch(2, &["all-reduce", "--ranks", "4", "--sizes", "1K"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("every process is one rank"));
}

/// Processes started with other sweeps (an MPMD launch, another
/// collbench) are refused before anything runs, naming them, where they
/// had waited on collectives the others never called until the timeout,
/// or checked data by another seed.
#[test]
fn ranks_started_with_other_sweeps_are_refused() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let base = ["all-reduce", "--device", "host", "--sizes", "8:64", "-q"];
    let mpmd = |other: &[&str]| {
        let mut cmd = Command::new("timeout");
        cmd.args(["60", "mpirun", "--allow-run-as-root", "--oversubscribe"]);
        cmd.args(["-np", "1"]).arg(&bin).args(base);
        cmd.args([":", "-np", "2"]).arg(&bin).args(base).args(other);
        cmd.output().expect("mpirun runs")
    };
    let out = mpmd(&["--dtype", "float,double"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ranks 1, 2 of 3 planned another sweep than rank 0 (4 case(s) on rank 0; 8 on ranks 1, 2)"),
        "{err}"
    );
    assert_eq!(err.matches("planned another sweep").count(), 1, "{err}");
    let out = mpmd(&["--seed", "7"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("(as many cases (4), but not the same)"),
        "{err}"
    );
    // Channels are no case's, and change how every rank moves the data.
    let out = mpmd(&["--channels", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("(as many cases (4), but not the same)"),
        "{err}"
    );
    // The same sweep however written runs.
    let out = mpmd(&["--dtype", "float", "--seed", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// A sweep of which MPI's engine runs nothing says why (exit 2), not that
/// the sizes are too small.
#[test]
fn a_sweep_mpi_runs_none_of_says_why() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let flags = [
        "all-reduce",
        "--engine",
        "mpi",
        "--op",
        "premulsum",
        "--sizes",
        "64",
    ];
    let out = launch(2, &flags);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing to run: engine mpi runs none of the sweep's cases: MPI has no pre-multiplied sum"),
        "{err}"
    );
    assert!(!err.contains("smaller than one element"), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
}

/// `--links` and `collbench links` across processes, directly and through
/// the relay: every process times its incoming links, rank 0 gathers them,
/// and a slowed link or rank is named.
#[test]
fn links_are_timed_across_processes_and_a_slowed_one_is_named() {
    let Some(_alone) = mpirun_alone() else {
        return;
    };
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    for relay in ["0", "1"] {
        for (coll, inject, want) in [
            (
                "all-reduce",
                "slow-link:from=1,to=2,factor=8",
                "slow link 1 -> 2",
            ),
            ("all-to-all", "slow:rank=3,factor=8", "slow rank 3"),
            // The probe: send-recv in 3 rounds covers the 12 directed pairs.
            (
                "links",
                "slow-link:from=3,to=1,factor=8",
                "slow link 3 -> 1",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("r.json");
            let out = Command::new("timeout")
                .args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe"])
                .args(["-x", "COLLBENCH_FORCE_RELAY", "-np", "4"])
                .arg(&bin)
                .args(coll.split(' '))
                .args(["--sizes", "4M", "--placement", "out", "--iters", "6"])
                .args(["--links", "--inject", inject, "-q", "--json"])
                .arg(&f)
                .env("COLLBENCH_FORCE_RELAY", relay)
                .output()
                .unwrap();
            let what = format!("{coll} {inject}, relay {relay}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            let v = json(&f);
            let pairs = v["links"]["pairs"].as_array().expect("links.pairs");
            let expect_pairs = if coll == "all-to-all" || coll == "links" {
                12
            } else {
                4
            };
            assert_eq!(pairs.len(), expect_pairs, "{what}: {pairs:?}");
            let named: Vec<&str> = v["links"]["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["detail"].as_str().unwrap().split(':').next().unwrap())
                .collect();
            assert_eq!(named, [want], "{what}");
        }
    }
}

/// The CUDA executor with one rank per process (the emulated device, whose
/// IPC is memory files): every collective and algorithm on 4 processes,
/// connections shared directly and, with COLLBENCH_FORCE_RELAY=1, all of
/// them bridged through the relay as between nodes.
#[test]
fn the_cuda_executor_runs_one_rank_per_process_directly_and_through_the_relay() {
    let Some(_cores) = mpirun() else {
        return;
    };
    for relay in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r.json");
        let bin = assert_cmd::cargo::cargo_bin("collbench");
        let mut cmd = Command::new("timeout");
        cmd.args(["300", "mpirun", "--allow-run-as-root", "--oversubscribe"]);
        // Warnings on: a rank freeing connection memory a peer still has
        // open (an error on the emulated device) is heard.
        cmd.args(["-x", "COLLBENCH_LOG"])
            .env("COLLBENCH_LOG", "collbench=warn");
        if relay {
            cmd.args(["-x", "COLLBENCH_FORCE_RELAY"])
                .env("COLLBENCH_FORCE_RELAY", "1");
        } else {
            cmd.env_remove("COLLBENCH_FORCE_RELAY");
        }
        let out = cmd
            .args(["-np", "4"])
            .arg(bin)
            .args([
                "all",
                "--device",
                "cuda-emu",
                "--algo",
                "all",
                "--sizes",
                "8B:64K",
                "--iters",
                "3",
                "--warmup",
                "1",
                "-q",
                "--json",
                f.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "relay {relay}: {err}");
        for bad in ["still have it open", "connection memory kept"] {
            assert!(!err.contains(bad), "relay {relay}: {bad}: {err}");
        }
        let v = json(&f);
        assert_eq!(v["meta"]["world_size"], 4, "relay {relay}");
        assert_eq!(v["meta"]["device"], "cuda-emu", "relay {relay}");
        let rows = v["rows"].as_array().unwrap();
        assert!(rows.len() > 300, "relay {relay}: {} rows", rows.len());
        assert!(
            rows.iter().all(|r| r["wrong"] == 0 && r["nan"] == 0),
            "relay {relay}"
        );
    }
}

/// A hung kernel in one process of a CUDA world: every process exits 3 with
/// its dump, and `analyze` names the rank.
#[test]
fn a_hang_on_the_cuda_executor_is_dumped_by_every_process_and_diagnosed() {
    let Some(_cores) = mpirun() else {
        return;
    };
    hang_is_dumped_and_diagnosed(3, "cuda-emu", 1, 5);
}

/// Over the relay the kernels run the simple protocol (its slots carry
/// their length for the bridge); asking for another is refused on every
/// process with exit 2.
#[test]
fn the_relay_refuses_the_low_latency_protocols() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let out = Command::new("timeout")
        .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe"])
        .args(["-x", "COLLBENCH_FORCE_RELAY", "-np", "2"])
        .env("COLLBENCH_FORCE_RELAY", "1")
        .arg(bin)
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--sizes",
            "1K",
            "--protocol",
            "ll",
            "-q",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("simple protocol only"), "{err}");
}

/// A rank's operation completes once its own part is done, while its last
/// messages may still be in the relay or the CUDA bridge: a broadcast's root
/// only sends, and reaches the end of the run first. No rank tears its
/// transports down before every rank has finished (the run's closing
/// barrier); without it the receiver lost the root's last slots in about
/// one run in three here, and timed out.
#[test]
fn a_rank_that_finishes_first_still_delivers_its_last_messages() {
    let Some(_cores) = mpirun() else {
        return;
    };
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    for run in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe"])
            .args(["-x", "COLLBENCH_FORCE_RELAY", "-np", "2"])
            .env("COLLBENCH_FORCE_RELAY", "1")
            .arg(&bin)
            .args(["broadcast", "--device", "cuda-emu", "--algo", "ring"])
            .args([
                "--root", "1", "--sizes", "8M", "--iters", "1", "--warmup", "0",
            ])
            .args(["--timeout", "20s", "-q", "--dump-dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "run {run}: {err}");
    }
}
