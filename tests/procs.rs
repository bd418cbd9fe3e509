//! `--procs N`: rank processes on one node without MPI (the default build).
//! The CUDA executor across processes on the emulated device (connections
//! shared as CUDA IPC would share them), the host engine, hangs dumped by
//! every process and diagnosed, and the placement rules (`--gpu-map`,
//! `--allow-shared-gpu`) with their errors.

use serde_json::Value;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::read_json as json;

fn collbench(args: &[&str], env: &[(&str, &str)]) -> Output {
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let mut cmd = Command::new("timeout");
    cmd.arg("300").arg(bin).args(args);
    cmd.env_remove("COLLBENCH_GPU_MAP");
    cmd.env_remove("COLLBENCH_FORCE_RELAY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("collbench runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Warnings on, so a rank that frees connection memory a peer still has
/// open (undefined on CUDA; an error on the emulated device) is heard.
const WARN: (&str, &str) = ("COLLBENCH_LOG", "collbench=warn");

/// `collbench analyze DIR --json`: the diagnosis of the dumps in `d`.
fn analyze_json(d: &std::path::Path) -> Value {
    let out = Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .arg("analyze")
        .arg(d)
        .arg("--json")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// No rank freed memory a peer still had open, or kept it for want of
/// the peer's word that it closed it.
fn memory_closed_in_order(o: &Output, what: &str) {
    let err = stderr(o);
    for bad in [
        "still have it open",
        "freeing shared connection memory",
        "connection memory kept",
    ] {
        assert!(!err.contains(bad), "{what}: {bad}: {err}");
    }
}

/// Every row of `v` checked, none wrong; the number of rows.
fn all_clean(v: &Value, what: &str) -> usize {
    let rows = v["rows"].as_array().unwrap();
    for r in rows {
        assert_eq!(r["wrong"], 0, "{what}: {r}");
        assert_eq!(r["nan"], 0, "{what}: {r}");
    }
    rows.len()
}

/// `collbench all --procs N --device DEVICE --algo all --sizes SIZES`: it
/// succeeds with world N on DEVICE and every row clean; its results.
fn every_collective_clean(procs: &str, device: &str, sizes: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let out = collbench(
        &[
            "all",
            "--procs",
            procs,
            "--device",
            device,
            "--algo",
            "all",
            "--sizes",
            sizes,
            "--iters",
            "3",
            "--warmup",
            "1",
            "-q",
            "--json",
            f.to_str().unwrap(),
        ],
        &[WARN],
    );
    let what = format!("--procs {procs} --device {device}");
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    memory_closed_in_order(&out, &what);
    let v = json(&f);
    assert_eq!(
        v["meta"]["world_size"],
        procs.parse::<u64>().unwrap(),
        "{what}"
    );
    assert_eq!(v["meta"]["device"], device, "{what}");
    all_clean(&v, &what);
    let colls: std::collections::BTreeSet<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["collective"].as_str())
        .collect();
    assert_eq!(colls.len(), 9, "{what}: {colls:?}");
    v
}

#[test]
fn every_collective_and_algorithm_on_four_processes_of_the_emulated_gpu() {
    let v = every_collective_clean("4", "cuda-emu", "8B:64K");
    // Nine collectives, every algorithm, 8 B to 64 KiB, out-of-place and in-place.
    let n = v["rows"].as_array().unwrap().len();
    assert!(n > 300, "{n} rows");
}

#[test]
fn the_host_engine_runs_on_processes_too() {
    let v = every_collective_clean("3", "host", "8B:1M:x8");
    assert!(v["rows"].as_array().unwrap().len() > 50);
}

#[test]
fn a_hang_in_one_process_is_dumped_by_every_process_and_diagnosed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("dumps");
    let t = Instant::now();
    let out = collbench(
        &[
            "all-reduce",
            "--procs",
            "3",
            "--device",
            "cuda-emu",
            "--sizes",
            "1K",
            "--inject",
            "hang:rank=2,seq=4",
            // Longer than the watchdog's 10 s of grace: a world closing
            // after the hang must not wait for the parked rank that long
            // (it did, and the run ended "did not stop" at twice this).
            "--timeout",
            "12s",
            "--dump-dir",
            d.to_str().unwrap(),
            "-q",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // Said once, by the first process to find it (rank 2 hangs; both its
    // peers time out), counting the run's dumps.
    let err = stderr(&out);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("hang detected"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(!err.contains("hang detected by another process"), "{err}");
    for l in &said {
        assert!(l.contains("; 3 flight-recorder dump(s) in "), "{err}");
        // The operation is named as what it is (the peers wait for rank 2
        // at a barrier, or in the collective), and a barrier across
        // processes counts no arrivals it cannot know.
        assert!(!l.contains("of 3 ranks arrived"), "{l}");
        assert!(
            l.contains("barrier 4 ran")
                || l.contains("across processes")
                || l.contains("(all-reduce) ran")
                || l.contains("from peer 2"),
            "{l}"
        );
    }
    let dumps: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for r in 0..3 {
        assert!(
            dumps.iter().any(|n| n.ends_with(&format!("-rank{r}.json"))),
            "rank {r} dumped: {dumps:?}"
        );
    }
    let v = analyze_json(&d);
    assert_eq!(v["culprits"], serde_json::json!([2]), "{v}");
    assert_eq!(v["findings"][0]["seq"], 4, "{v}");
}

/// A rank that stops between operations while its peer sets the next one
/// up: rank 1 never enters collective 4 (the last of the 8 B gather to it,
/// which rank 0 finishes alone), and the 1 MiB gather that follows asks
/// for a connection (channel 1) rank 0 has not used. Its wait for rank 1's
/// memory times out: a hang, dumped by both processes, exit 3, and
/// `analyze` names rank 1 at seq 4. It was a setup error of
/// rank 0 without dumps, the run ending only when rank 1's watchdog gave
/// up on its stall, at twice the timeout.
#[test]
fn a_peer_that_never_sends_its_connection_memory_is_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("dumps");
    let out = collbench(
        &[
            "gather",
            "--procs",
            "2",
            "--device",
            "cuda-emu",
            "--root",
            "1",
            "--sizes",
            "8B:1M:x131072",
            "--warmup",
            "0",
            "--iters",
            "1",
            "--check-iters",
            "1",
            "--inject",
            "hang:rank=1,seq=4",
            "--timeout",
            "3s",
            "--dump-dir",
            d.to_str().unwrap(),
            "-q",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("hang detected: rank 0 waited")
            && err.contains("(timeout) for rank 1's connection memory (channel 1)")
            && err.contains("; 2 flight-recorder dump(s) in "),
        "{err}"
    );
    let v = analyze_json(&d);
    assert_eq!(v["culprits"], serde_json::json!([1]), "{v}");
    assert_eq!(v["findings"][0]["seq"], 4, "{v}");
}

/// Rank 0 fails while the others run (its CSV's reader goes away: a
/// write error, exit 2): the parent tells the other ranks at once, as for
/// a rank that died, and the run ends with rank 0's error (2), not when
/// their timeout (30 s) finds a hang (3).
#[test]
fn a_rank_that_fails_mid_run_stops_the_others_at_once() {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let c = std::ffi::CString::new(csv.to_str().unwrap()).unwrap();
    // SAFETY: a path string of our own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // A reader from the start (the outputs are checked), gone at the first rows.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&csv)
        .unwrap();
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let t = Instant::now();
    let mut child = Command::new(bin)
        .args(["all-reduce", "--procs", "2", "--device", "host"])
        .args([
            "--sizes",
            "1K:64M",
            "--iters",
            "20",
            "--timeout",
            "30s",
            "-q",
        ])
        .arg("--csv")
        .arg(&csv)
        .arg("--dump-dir")
        .arg(dir.path().join("dumps"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut got = [0u8; 4096];
    while !matches!(reader.read(&mut got), Ok(n) if n > 0) {
        assert!(t.elapsed() < Duration::from_secs(60), "no row came");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(reader);
    let status = wait_within(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{:?}: {err}",
        t.elapsed()
    );
    assert!(err.contains("error: writing results:"), "{err}");
    assert!(
        err.contains("rank 0's process died (exited with code 2 after the error above)"),
        "{err}"
    );
}

#[test]
fn processes_share_a_gpu_only_when_allowed() {
    let env = [("COLLBENCH_EMU_GPUS", "2")];
    let base = [
        "all-reduce",
        "--procs",
        "3",
        "--device",
        "cuda-emu",
        "--sizes",
        "1K:4K",
        "--iters",
        "2",
        "-q",
    ];
    let t = Instant::now();
    let out = collbench(&base, &env);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("would share GPU 0") && stderr(&out).contains("--allow-shared-gpu"),
        "{}",
        stderr(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(30), "refused at once");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let mut allowed = base.to_vec();
    allowed.extend(["--allow-shared-gpu", "--json", f.to_str().unwrap()]);
    let out = collbench(&allowed, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    all_clean(&json(&f), "shared GPU");
    // A map that gives each rank its own GPU needs no permission.
    let f2 = dir.path().join("r2.json");
    let mut mapped = base.to_vec();
    mapped[2] = "2";
    mapped.extend(["--gpu-map", "1,0", "--json", f2.to_str().unwrap()]);
    let out = collbench(&mapped, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    all_clean(&json(&f2), "--gpu-map 1,0");
}

#[test]
fn ranks_on_unevenly_shared_gpus_agree_on_auto_channels() {
    // Ranks 0 and 2 share GPU 0, rank 1 has GPU 1 alone: on devices of one
    // SM (4 resident blocks) each process alone would pick 1 and 2
    // channels. The world takes the least; before, rank 1 waited for a
    // second channel no peer made and the run hung.
    let env = [
        ("COLLBENCH_EMU_GPUS", "2"),
        ("COLLBENCH_EMU_SMS", "1"),
        WARN,
    ];
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let out = collbench(
        &[
            "all",
            "--procs",
            "3",
            "--allow-shared-gpu",
            "--device",
            "cuda-emu",
            "--sizes",
            "1K:64K:x64",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--timeout",
            "30s",
            "-q",
            "--json",
            f.to_str().unwrap(),
            "--dump-dir",
            dir.path().join("dumps").to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    memory_closed_in_order(&out, "uneven sharing");
    assert!(all_clean(&json(&f), "uneven sharing") >= 18);
}

/// Arguments, environment, and what the error must say (once).
type BadCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_process_options_exit_2_with_a_reason() {
    let cases: [BadCase; 19] = [
        // Refusals every rank finds are said once, by rank 0.
        (
            &[
                "all-reduce",
                "--procs",
                "3",
                "--device",
                "cuda-emu",
                "--allow-shared-gpu",
                "--sizes",
                "1K",
                "--channels",
                "8",
            ],
            &[("COLLBENCH_EMU_GPUS", "1"), ("COLLBENCH_EMU_SMS", "2")],
            "3 rank(s) x 8 block(s) = 24 blocks must be resident at once on GPU 0",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "3",
                "--device",
                "host",
                "--sizes",
                "2B",
                "--dtype",
                "f32",
            ],
            &[],
            "collbench: error: nothing to run: every size of the sweep (2 B)",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "cuda-emu",
                "--sizes",
                "64M",
            ],
            &[("COLLBENCH_EMU_MEM", "64M")],
            "(1 rank x 128MiB of buffers, plus",
        ),
        (&["all-reduce", "--procs", "0"], &[], "--procs 0:"),
        (&["all-reduce", "--procs", "65"], &[], "--procs 65:"),
        // --ranks may repeat --procs' count, never differ from it.
        (
            &["all-reduce", "--procs", "2", "--ranks", "3"],
            &[],
            "--ranks 3: with rank processes",
        ),
        (
            &["all-reduce", "--procs", "2", "--engine", "mpi"],
            &[],
            "needs an MPI launch",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "cuda-emu",
                "--engine",
                "builtin,nccl",
            ],
            &[],
            "--engine nccl across processes",
        ),
        (
            &["all-reduce", "--procs", "2", "--sizes", "1K"],
            &[("COLLBENCH_GPU_MAP", "0,x")],
            "COLLBENCH_GPU_MAP",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "cuda-emu",
                "--sizes",
                "1K",
                "--gpu-map",
                "0,9",
            ],
            &[],
            "GPU 9",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "3",
                "--device",
                "cuda-emu",
                "--sizes",
                "1K",
                "--gpu-map",
                "0,1",
            ],
            &[],
            "--gpu-map lists 2",
        ),
        (
            &["all-reduce", "--sizes", "1K", "--gpu-map", "0,1"],
            &[],
            "ranks that are processes",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "cuda-emu",
                "--sizes",
                "1K",
                "--gpu-map",
                "1,1",
            ],
            &[],
            "ranks [0, 1] would share GPU 1",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "3",
                "--device",
                "cuda-emu",
                "--sizes",
                "1K",
            ],
            &[("COLLBENCH_EMU_GPUS", "2")],
            "ranks [0, 2] would share GPU 0",
        ),
        // LL128's lines may arrive torn through CUDA IPC or host memory.
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "cuda-emu",
                "--sizes",
                "1K",
                "--protocol",
                "ll128",
            ],
            &[],
            "--protocol ll128: ranks in processes of their own",
        ),
        (
            &[
                "all-reduce",
                "--procs",
                "2",
                "--device",
                "host",
                "--timing",
                "events",
            ],
            &[],
            "--timing events needs the CUDA engine",
        ),
        (
            &["all-reduce", "--procs", "2", "--sizes", "1K"],
            &[("COLLBENCH_FORCE_RELAY", "1")],
            "run under mpirun",
        ),
        (
            &["all-reduce", "--procs", "2", "--sizes", "1K"],
            &[("COLLBENCH_FORCE_RELAY", "yes")],
            "COLLBENCH_FORCE_RELAY=yes: expected 1",
        ),
        (
            &["all-reduce", "--sizes", "1K", "--ranks", "2"],
            &[("COLLBENCH_FORCE_RELAY", "1")],
            "thread ranks of one process never use it",
        ),
    ];
    for (args, env, want) in cases {
        let out = collbench(args, env);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        // Said once, by the launcher, not once by every rank.
        assert_eq!(
            stderr(&out).matches(want).count(),
            1,
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
}

/// The settings of ranks that are processes, given to thread ranks, are
/// said to be unused (on stderr and in the results' notes), not dropped
/// in silence.
#[test]
fn process_placement_settings_on_thread_ranks_are_noted_unused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let out = collbench(
        &[
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "2",
            "--sizes",
            "1K",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--allow-shared-gpu",
            "-q",
            "--json",
            f.to_str().unwrap(),
        ],
        &[("COLLBENCH_GPU_MAP", "0,0")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let notes = json(&f)["meta"]["notes"].to_string();
    for want in [
        "COLLBENCH_GPU_MAP: it places ranks that are processes",
        "--allow-shared-gpu: thread ranks of one process share a GPU without it",
    ] {
        assert_eq!(
            stderr(&out).matches(want).count(),
            1,
            "{want}: {}",
            stderr(&out)
        );
        assert!(notes.contains(want), "{want}: {notes}");
    }
    // Ranks that are processes on the host engine: no GPU to share.
    let out = collbench(
        &[
            "all-reduce",
            "--procs",
            "2",
            "--device",
            "host",
            "--allow-shared-gpu",
            "--sizes",
            "8B",
            "--iters",
            "1",
            "--warmup",
            "0",
            "-q",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out)
            .matches("--allow-shared-gpu: the host engine uses no GPU, so it is unused")
            .count(),
        1,
        "{}",
        stderr(&out)
    );
}

/// `qualify` and `tune` run sweeps of thread ranks too: the relay setting
/// is refused there as in a sweep, and the GPU map is said to be unused.
#[test]
fn qualify_and_tune_take_process_settings_as_sweeps_do() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("q.toml");
    std::fs::write(
        &spec,
        "[[check]]\ncollective = \"all-reduce\"\ndevice = \"host\"\nranks = 2\nsizes = \"8B\"\niters = 1\nwarmup = 0\nmax_time_us = 1e9\n",
    )
    .unwrap();
    let table = dir.path().join("t.json");
    let tune = [
        "tune",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "8B",
        "--iters",
        "1",
        "--warmup",
        "0",
        "-O",
        table.to_str().unwrap(),
    ];
    for args in [&["qualify", spec.to_str().unwrap()][..], &tune[..]] {
        let out = collbench(args, &[("COLLBENCH_FORCE_RELAY", "1")]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("thread ranks of one process never use it"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!table.exists(), "a refused tune writes nothing");
    let out = collbench(
        &["qualify", spec.to_str().unwrap()],
        &[("COLLBENCH_GPU_MAP", "1,0")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out)
            .matches("note: COLLBENCH_GPU_MAP: it places ranks that are processes")
            .count(),
        1,
        "{}",
        stderr(&out)
    );
}

/// How many processes but `except` have `needle` in their command line
/// (this test's own unique dump folder: only its parent and ranks have it).
fn running_with(needle: &str, except: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str() != Some(&except.to_string()))
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .count()
}

/// Waits (up to 60 s) until the JSONL beside `json` holds its head and a
/// row: the ranks have started and finished a case.
fn wait_for_a_row(json: &std::path::Path) {
    let jsonl = json.with_extension("jsonl");
    let t = Instant::now();
    while !std::fs::read_to_string(&jsonl).is_ok_and(|s| s.lines().count() >= 2) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no row in {} after 60 s",
            jsonl.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stop signal sent to the parent alone reaches the ranks: the run exits
/// 130 at once with the finished rows; a parent that is killed outright
/// takes its ranks with it.
#[test]
fn the_parent_passes_stop_signals_on_and_takes_its_ranks_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-signal");
    let start = |dumps: &std::path::Path, json: &std::path::Path| {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("collbench"));
        cmd.args(["all-reduce", "--procs", "2", "--device", "host"])
            .args(["--sizes", "8B:64M:x2", "--iters", "200", "-q", "--dump-dir"])
            .arg(dumps)
            .env_remove("COLLBENCH_FORCE_RELAY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .arg("--json")
            .arg(json);
        cmd.spawn().unwrap()
    };
    let mut parent = start(&dumps, &f);
    wait_for_a_row(&f);
    let t = Instant::now();
    // SAFETY: signalling our own child, not yet waited for.
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let status = parent.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let v = json(&f);
    assert!(!v["rows"].as_array().unwrap().is_empty());
    assert_eq!(v["meta"]["partial"]["reason"], "signal", "{}", v["meta"]);

    let dumps = dir.path().join("dumps-kill");
    let needle = dumps.to_string_lossy().into_owned();
    let f = dir.path().join("r-kill.json");
    let mut parent = start(&dumps, &f);
    wait_for_a_row(&f);
    assert_eq!(running_with(&needle, parent.id()), 2, "the 2 ranks run");
    parent.kill().unwrap();
    parent.wait().unwrap();
    let t = Instant::now();
    while running_with(&needle, 0) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "ranks outlived their killed parent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run by an nccl-tests name (a link `install-aliases` made), the rank
/// processes are started by that name too, so they read nccl-tests'
/// flags as the launcher did (they were started as collbench, and refused
/// `-b`).
#[test]
fn rank_processes_keep_the_nccl_tests_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = collbench(&["install-aliases", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results = dir.path().join("r.json");
    let out = Command::new("timeout")
        .arg("120")
        .arg(dir.path().join("all_reduce_perf"))
        .args([
            "--procs", "2", "-b", "8", "-e", "64", "-f", "2", "-n", "2", "-w", "0",
        ])
        .args(["--device", "host", "--json"])
        .arg(&results)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}{text}", stderr(&out));
    assert!(
        text.contains("# Collective test starting: all_reduce_perf"),
        "{text}"
    );
    let v = json(&results);
    assert_eq!(v["meta"]["world_size"], 2);
    // 8, 16, 32, 64 B, out of place and in place.
    assert_eq!(all_clean(&v, "all_reduce_perf --procs 2"), 8);
    // nccl-tests' header of a rank process: one thread of one GPU; each
    // rank's device line shows its own process, as the results do.
    assert!(
        text.contains("# nThread 1 nGpus 1 minBytes 8 maxBytes 64"),
        "{text}"
    );
    let procs = v["meta"]["processes"].as_array().expect("meta.processes");
    assert_eq!(procs.len(), 2, "{procs:?}");
    assert_ne!(procs[0]["pid"], procs[1]["pid"], "{procs:?}");
    for (r, p) in procs.iter().enumerate() {
        let line = format!(
            "#  Rank {r:>2} Group  0 Pid {:>6} on {:>10} device",
            p["pid"].as_u64().unwrap(),
            p["host"].as_str().unwrap()
        );
        assert!(text.contains(&line), "{line}\n{text}");
    }
}

/// The pid of rank `rank` of a `--procs 2` run whose command line holds
/// `needle`: its environment says `COLLBENCH_PROCS=<rank> 2 ...`.
fn rank_pid(rank: usize, needle: &str) -> i32 {
    let var = format!("COLLBENCH_PROCS={rank} 2 ");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v.starts_with(var.as_bytes()))
                    && std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
            })
        })
        .unwrap_or_else(|| panic!("rank {rank}'s process"))
}

/// Waits up to `limit` for `child`; kills it past that.
fn wait_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 2-process all-reduce on `device` whose rank 1 sits 60 s in its second
/// row (`-T timeout`: 0 for none), sent `sig` there once the first row is
/// out: the parent (its stderr in `err`), when rank 1 got it, and its pid.
fn signal_rank_1_mid_run(
    device: &str,
    timeout: &str,
    dumps: &std::path::Path,
    f: &std::path::Path,
    err: &std::path::Path,
    env: &[(&str, &str)],
    sig: i32,
) -> (std::process::Child, Instant, i32) {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("collbench"));
    cmd.args(["all-reduce", "--procs", "2", "--device", device])
        .args(["--sizes", "8B:64", "-n", "2", "-w", "0", "-T", timeout])
        .args(["--inject", "delay:rank=1,seq=5,ms=60000", "--dump-dir"])
        .arg(dumps)
        .arg("--json")
        .arg(f)
        .env_remove("COLLBENCH_FORCE_RELAY")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(err).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let parent = cmd.spawn().unwrap();
    wait_for_a_row(f);
    let needle = dumps.file_name().unwrap().to_str().unwrap();
    let rank1 = rank_pid(1, needle);
    let t = Instant::now();
    // SAFETY: signalling a process this test's run started.
    unsafe { libc::kill(rank1, sig) };
    (parent, t, rank1)
}

/// A rank process that dies (SIGKILL) mid-collective never dumps, and its
/// peer waits on its shared memory, where no timeout is set (`-T 0`)
/// forever: the parent sees the death and tells the peer, which stops at
/// once with its dump naming the dead rank (exit 3); `analyze` blames the
/// dead rank and says how it died. A stop signal meanwhile still ends
/// such a run within seconds (130).
#[test]
fn a_dead_rank_process_stops_its_peers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-dead");
    let err = dir.path().join("err.txt");
    let (mut parent, t, rank1) =
        signal_rank_1_mid_run("host", "0", &dumps, &f, &err, &[], libc::SIGKILL);
    let status = wait_within(&mut parent, Duration::from_secs(20));
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(
        said.contains(&format!(
            "collbench: --procs: rank 1's process (pid {rank1}) died: killed by signal 9 (SIGKILL)"
        )),
        "{said}"
    );
    let stopped: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("rank 1's process died (killed by signal 9 (SIGKILL)): the run stopped; 1 flight-recorder dump(s) in "))
        .collect();
    assert_eq!(stopped.len(), 1, "said once, by rank 0: {said}");
    let v = json(&f);
    assert_eq!(v["meta"]["partial"]["reason"], "hang", "{}", v["meta"]);
    let files: Vec<_> = std::fs::read_dir(&dumps)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "rank 0's dump alone: {files:?}");
    let d: Value = json(&files[0].path());
    assert_eq!(d["reason"], "peer-lost", "{d}");
    assert_eq!(d["lost"]["rank"], 1, "{d}");
    assert_eq!(d["lost"]["how"], "killed by signal 9 (SIGKILL)", "{d}");
    let out = Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args(["analyze", dumps.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["culprits"], serde_json::json!([1]), "{a}");
    assert_eq!(a["findings"][0]["kind"], "missing-dump", "{a}");
    assert_eq!(a["findings"][0]["seq"], 5, "{a}");
    let detail = a["findings"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("no readable dump of rank 1 (its process died, killed by signal 9 (SIGKILL), as the launcher saw)"),
        "{detail}"
    );

    // The same run stopped by hand after the death: 130, within seconds.
    let f = dir.path().join("r2.json");
    let dumps = dir.path().join("dumps-stopped");
    let mut parent = Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .args(["all-reduce", "--procs", "2", "--device", "host"])
        .args(["--sizes", "8B:64", "-n", "2", "-w", "0", "-q", "-T", "0"])
        .args(["--inject", "delay:rank=1,seq=5,ms=60000", "--dump-dir"])
        .arg(&dumps)
        .arg("--json")
        .arg(&f)
        .env_remove("COLLBENCH_FORCE_RELAY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_a_row(&f);
    let t = Instant::now();
    // SAFETY: signalling our own child, not yet waited for.
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let status = wait_within(&mut parent, Duration::from_secs(8));
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
}

/// On the emulated GPU, a rank killed while its peer's kernel waits on it:
/// the peer stops at once, and when its world closes it frees the memory
/// the dead rank had opened without waiting for a word that cannot come
/// (the launcher saw the death); nothing is kept or freed out of order.
#[test]
fn a_dead_rank_process_on_the_emulated_gpu_leaves_no_wait_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-emu-killed");
    let err = dir.path().join("err.txt");
    let (mut parent, t, _) =
        signal_rank_1_mid_run("cuda-emu", "0", &dumps, &f, &err, &[WARN], libc::SIGKILL);
    let status = wait_within(&mut parent, Duration::from_secs(40));
    let said = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}: {said}");
    // Waiting for the dead rank's word would hold the world's close until
    // the watchdog gave up on it (10 s: "the run did not stop").
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{:?}: {said}",
        t.elapsed()
    );
    assert!(
        said.contains("rank 1's process died (killed by signal 9 (SIGKILL)): the run stopped;"),
        "{said}"
    );
    for bad in ["still have it open", "connection memory kept"] {
        assert!(!said.contains(bad), "{bad}: {said}");
    }
}

/// A rank that cannot take the stop signal (stopped here; a rank stuck in
/// a driver call alike) is killed by the parent once its grace has passed
/// (20 s): the run still ends, 130, and the death is said.
#[test]
fn a_rank_that_cannot_stop_is_killed_after_the_signals_grace() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-frozen");
    let err = dir.path().join("err.txt");
    let (mut parent, _, rank1) =
        signal_rank_1_mid_run("host", "0", &dumps, &f, &err, &[], libc::SIGSTOP);
    let t = Instant::now();
    // SAFETY: signalling our own child, not yet waited for.
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let status = wait_within(&mut parent, Duration::from_secs(60));
    let said = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}: {said}");
    let took = t.elapsed();
    assert!(
        took > Duration::from_secs(15) && took < Duration::from_secs(40),
        "{took:?}: {said}"
    );
    assert!(
        said.contains(&format!(
            "rank 1's process (pid {rank1}) died: killed by signal 9 (SIGKILL), by collbench: still running 20"
        )) && said.contains("after the stop signal"),
        "{said}"
    );
}

/// A rank stopped (SIGSTOP) mid-run: its peer times out on it, dumps and
/// exits 3; the stopped rank cannot, and the parent waited on it for ever.
/// It is killed once the run has been ending 30 s, and its death is said.
#[test]
fn a_stopped_rank_is_killed_once_its_peer_found_the_hang() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-stopped");
    let err = dir.path().join("err.txt");
    let (mut parent, t, rank1) =
        signal_rank_1_mid_run("host", "2s", &dumps, &f, &err, &[], libc::SIGSTOP);
    // Rank 0: 2 s to time out, up to 12 s for the stopped rank's dump,
    // then the parent's 30 s.
    let status = wait_within(&mut parent, Duration::from_secs(120));
    let said = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}: {said}");
    let took = t.elapsed();
    assert!(
        took > Duration::from_secs(30) && took < Duration::from_secs(80),
        "{took:?}: {said}"
    );
    assert!(said.contains("hang detected"), "{said}");
    assert!(
        said.contains(&format!(
            "rank 1's process (pid {rank1}) died: killed by signal 9 (SIGKILL), by collbench: still running 30"
        )) && said.contains("after another rank ended the run"),
        "{said}"
    );
}

/// SIGUSR1 to the `--procs` parent reaches every rank: each writes a
/// snapshot of its flight recorder, and the run goes on (it did nothing).
#[test]
fn a_snapshot_asked_of_the_parent_is_written_by_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    let dumps = dir.path().join("dumps-usr1");
    let err = dir.path().join("err.txt");
    // Signal 0 reaches no one: rank 1 just sits in its delay.
    let (mut parent, _, _) = signal_rank_1_mid_run("host", "0", &dumps, &f, &err, &[], 0);
    // SAFETY: signalling our own child, not yet waited for.
    unsafe { libc::kill(parent.id() as i32, libc::SIGUSR1) };
    let t = Instant::now();
    let snapshots = || {
        std::fs::read_dir(&dumps).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.ends_with("-request1.json") && !n.starts_with('.')
                })
                .count()
        })
    };
    while snapshots() < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = parent.try_wait().unwrap().is_none();
    // SAFETY: as above.
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let status = wait_within(&mut parent, Duration::from_secs(60));
    let said = std::fs::read_to_string(&err).unwrap();
    assert_eq!(snapshots(), 2, "{said}");
    assert!(running, "the run went on after the snapshot: {said}");
    assert_eq!(status.code(), Some(130), "{said}");
}

/// A rank that enters a collective just past its peers' timeout finishes
/// it (their data is there) and waits in the next for peers that gave up:
/// `analyze` blames the late rank, not the ranks that never entered that
/// next collective (they were still waiting on it). It blamed ranks 0 and 2.
#[test]
fn a_rank_late_past_the_timeout_is_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("dumps");
    let out = collbench(
        &[
            "all-reduce",
            "--procs",
            "3",
            "--device",
            "host",
            "--sizes",
            "1K:4K",
            "--inject",
            "delay:rank=1,seq=8,ms=1300",
            "--timeout",
            "1s",
            "--dump-dir",
            d.to_str().unwrap(),
            "-q",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let v = analyze_json(&d);
    assert_eq!(v["culprits"], serde_json::json!([1]), "{v}");
}

/// Under a TMPDIR too long for a socket's path (107 bytes), the ranks meet
/// at a socket in /tmp ("path must be shorter than SUN_LEN" had refused
/// the run).
#[test]
fn a_long_tmpdir_does_not_stop_procs() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("d".repeat(120));
    std::fs::create_dir_all(&long).unwrap();
    let out = collbench(
        &[
            "all-reduce",
            "--procs",
            "2",
            "--sizes",
            "8B:64B",
            "-n",
            "1",
            "-w",
            "0",
            "-q",
        ],
        &[("TMPDIR", long.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `-v` under `--procs`: each rank process's log records start with its
/// rank and a wall-clock time, so that the processes' interleaved records
/// can be told apart and read in one order.
#[test]
fn rank_processes_logs_name_their_rank() {
    let out = collbench(
        &[
            "all-reduce",
            "--procs",
            "2",
            "--sizes",
            "8B",
            "-n",
            "1",
            "-w",
            "0",
            "-v",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for rank in 0..2 {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("[rank {rank}] ")) && l.contains("joined the world"))
            .unwrap_or_else(|| panic!("rank {rank}'s record: {err}"));
        // `[rank 0] 2026-11-27T16:43:50.500545Z  INFO ...`
        let time = line.split_whitespace().nth(2).unwrap_or_default();
        assert!(time.ends_with('Z') && time.contains('T'), "{line}");
    }
}
