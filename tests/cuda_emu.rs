//! The CUDA executor end to end on the emulated device (`--device
//! cuda-emu`): the real launcher, the real kernels (built by the host C++
//! compiler, every block a thread), the real harness and reports. What CI
//! proves here is what the GPU runs, except the memory ordering and the
//! timings, which `scripts/gpu-acceptance.sh` checks on a GPU.
//!
//! Needs a host C++ compiler (`c++` or `$CXX`); without one each test says
//! it is skipped, unless COLLBENCH_REQUIRE_CXX=1 makes that a failure.

use assert_cmd::Command;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

mod common;
mod emu;
use common::{dump_of, rows};

/// One kernel-library cache for every test of this binary, so each variant
/// is compiled once.
fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-emu-cache")
}

fn collbench() -> Command {
    let mut c = common::collbench();
    c.env("COLLBENCH_CACHE_DIR", cache_dir());
    c
}

/// Sweeps share the host's cores with each other; those whose verdict
/// rests on timings (the link probes) run alone.
static CORES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs a sweep on the emulated device; (exit code, results, stderr).
fn run(args: &[&str]) -> (i32, Value, String) {
    let _shared = CORES.read().unwrap_or_else(|e| e.into_inner());
    run_unlocked(args)
}

/// [`run`] with no other sweep of these tests beside it.
fn run_alone(args: &[&str]) -> (i32, Value, String) {
    let _alone = CORES.write().unwrap_or_else(|e| e.into_inner());
    run_unlocked(args)
}

fn run_unlocked(args: &[&str]) -> (i32, Value, String) {
    run_with(args, &[])
}

/// [`run`] with environment variables set.
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let _shared = CORES.read().unwrap_or_else(|e| e.into_inner());
    run_with(args, env)
}

fn run_with(args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .envs(env.iter().copied())
        .args(args)
        .args([
            "--device", "cuda-emu", "-q", "--iters", "2", "--warmup", "1",
        ])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

/// Every row checked and clean.
fn assert_clean(v: &Value, what: &str) {
    for r in rows(v) {
        assert_eq!(r["wrong"], 0, "{what}: {r}");
        assert_eq!(r["nan"], 0, "{what}: {r}");
    }
}

fn pairs(v: &Value) -> BTreeSet<(String, String)> {
    rows(v)
        .iter()
        .map(|r| {
            (
                r["collective"].as_str().unwrap().to_string(),
                r["algo"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn have_compiler(test: &str) -> bool {
    emu::compiler(test).is_some()
}

#[test]
fn every_collective_and_algorithm_is_bit_exact_on_1_2_3_and_5_ranks() {
    if !have_compiler("every_collective_and_algorithm_is_bit_exact_on_1_2_3_and_5_ranks") {
        return;
    }
    for n in ["1", "2", "3", "5"] {
        let (code, v, err) = run(&["all", "--ranks", n, "--algo", "all", "--sizes", "8B:64K"]);
        assert_eq!(code, 0, "{n} ranks: {err}");
        assert_eq!(v["meta"]["device"], "cuda-emu");
        assert_eq!(v["meta"]["timing"], "events");
        assert_clean(&v, &format!("{n} ranks"));
        // 13 (collective, algorithm) pairs, each at both placements.
        assert_eq!(pairs(&v).len(), 13, "{n} ranks: {:?}", pairs(&v));
        let placements: BTreeSet<&str> = rows(&v)
            .iter()
            .map(|r| r["placement"].as_str().unwrap())
            .collect();
        assert_eq!(placements.len(), 2);
    }
}

/// Small slots make many steps; both protocols; a size whose bytes are a
/// multiple of 16 (the kernel's vector path) and one that is not (its
/// element path).
#[test]
fn every_protocol_moves_many_steps_through_small_slots() {
    if !have_compiler("every_protocol_moves_many_steps_through_small_slots") {
        return;
    }
    for proto in ["simple", "ll", "ll128"] {
        // LL128 runs between ranks of one GPU only; the others here
        // between GPUs too (host-mapped connections).
        let gpus = if proto == "ll128" { "1" } else { "8" };
        for n in ["2", "3", "5"] {
            let (code, v, err) = run_env(
                &[
                    "all",
                    "--ranks",
                    n,
                    "--algo",
                    "all",
                    "--sizes",
                    "3996B:4000B:+4",
                    "--slot-size",
                    "1K",
                    "--channels",
                    "2",
                    "--protocol",
                    proto,
                ],
                &[("COLLBENCH_EMU_GPUS", gpus)],
            );
            let what = format!("--protocol {proto} on {n} ranks");
            assert_eq!(code, 0, "{what}: {err}");
            assert_clean(&v, &what);
            assert_eq!(pairs(&v).len(), 13, "{what}");
        }
    }
}

/// Blocks of 16 threads (`COLLBENCH_EMU_THREADS`, each a host thread): the
/// kernels' work split between threads, their block barriers and LL128's
/// groups of 8 (two a block, each moving its own lines) run as on a GPU,
/// which blocks of one thread never show. Every collective and algorithm of
/// every protocol is bit-exact; a rank that hangs under LL128 is found, the
/// waiting groups giving up together.
#[test]
fn blocks_of_many_threads_run_every_protocol_bit_exact() {
    if !have_compiler("blocks_of_many_threads_run_every_protocol_bit_exact") {
        return;
    }
    let wide = [("COLLBENCH_EMU_THREADS", "16"), ("COLLBENCH_EMU_GPUS", "1")];
    for proto in ["simple", "ll", "ll128"] {
        let (code, v, err) = run_env(
            &[
                "all",
                "--ranks",
                "3",
                "--algo",
                "all",
                "--sizes",
                "12B:48K:x4",
                "--protocol",
                proto,
            ],
            &wide,
        );
        let what = format!("--protocol {proto} in blocks of 16 threads");
        assert_eq!(code, 0, "{what}: {err}");
        assert_clean(&v, &what);
        assert_eq!(pairs(&v).len(), 13, "{what}");
    }
    let d = hang_and_analyze_env(
        &[
            "all-reduce",
            "--ranks",
            "4",
            "--sizes",
            "1K",
            "--protocol",
            "ll128",
            "--inject",
            "hang:rank=2,seq=5",
            "--timeout",
            "3s",
        ],
        &wide,
    );
    assert_eq!(d["culprits"], serde_json::json!([2]), "{d}");
    assert_eq!(d["findings"][0]["seq"], 5, "{d}");
}

/// The low-latency protocol's 32-bit flags wrap past 2^32 messages of a
/// connection (a long sweep's cases share connections): with counts that
/// start just below it, the message whose count is 2^32 - 1 takes no line
/// nobody wrote (zero) for its own, on one GPU and between GPUs (host-mapped
/// connections).
#[test]
fn the_low_latency_flags_wrap_without_taking_old_lines() {
    if !have_compiler("the_low_latency_flags_wrap_without_taking_old_lines") {
        return;
    }
    for (gpus, p2p, start) in [("1", "auto", "4294967295"), ("3", "off", "4294967294")] {
        let (code, v, err) = run_env(
            &[
                "all-reduce",
                "--ranks",
                "3",
                "--algo",
                "ring",
                "--protocol",
                "ll",
                "--sizes",
                "8B:4K:x8",
                "--timeout",
                "20s",
            ],
            &[
                ("COLLBENCH_EMU_GPUS", gpus),
                ("COLLBENCH_CUDA_P2P", p2p),
                ("COLLBENCH_CUDA_SEQ_START", start),
            ],
        );
        let what = format!("counts from {start} on {gpus} GPU(s), peer-to-peer {p2p}");
        assert_eq!(code, 0, "{what}: {err}");
        assert_clean(&v, &what);
        assert_eq!(v["rows"].as_array().map(Vec::len), Some(8), "{what}");
    }
}

/// A group's connections are counted once: nine collectives in a group on
/// 3 ranks hold 9 connections a rank (about 21 MiB with 256 KiB slots), so
/// 200 MiB of device memory runs them; they had been counted once more per
/// way of the group (560 MiB), and the sweep refused.
#[test]
fn a_groups_connections_are_counted_once_in_the_memory_check() {
    if !have_compiler("a_groups_connections_are_counted_once_in_the_memory_check") {
        return;
    }
    let (code, v, err) = run_env(
        &[
            "all-reduce",
            "--ranks",
            "3",
            "--sizes",
            "4K",
            "--algo",
            "ring",
            "--channels",
            "1",
            "--group",
            "9",
            "--group-mix",
            "all-reduce,reduce-scatter,all-gather,reduce,broadcast,all-to-all,gather,scatter,send-recv",
        ],
        &[("COLLBENCH_EMU_GPUS", "1"), ("COLLBENCH_EMU_MEM", "200M")],
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v, "a group of nine in 200 MiB");
    // Both placements: a row per operation and one of the group's.
    assert_eq!(rows(&v).len(), 2 * 10, "{v}");
    assert!(!err.contains("skipped"), "{err}");
}

/// One rank's copies are one step per channel, larger than a slot: they
/// pass the slot check (which is for messages) and move right on both
/// protocols, on the emulated device and on the host engine.
#[test]
fn a_single_ranks_copies_may_outgrow_the_slot() {
    if !have_compiler("a_single_ranks_copies_may_outgrow_the_slot") {
        return;
    }
    let args = [
        "all",
        "--ranks",
        "1",
        "--algo",
        "all",
        "--sizes",
        "3996B:4000B:+4",
        "--slot-size",
        "1K",
        "--channels",
        "2",
    ];
    // The kernel's copies: by default the device's copy runs them.
    let kernel = [("COLLBENCH_CUDA_COPIES", "kernel")];
    for proto in ["simple", "ll", "ll128"] {
        let (code, v, err) = run_env(&[&args[..], &["--protocol", proto]].concat(), &kernel);
        let what = format!("--protocol {proto}");
        assert_eq!(code, 0, "{what}: {err}");
        assert_clean(&v, &what);
        assert_eq!(pairs(&v).len(), 13, "{what}");
    }
    let out = collbench()
        .args(args)
        .args(["--device", "host", "--iters", "1", "--warmup", "0", "-q"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A lone rank's program only copies: it runs as the device's copies (as
/// NCCL's does), in the kernel when asked, bit-exact either way; premulsum
/// and avg are arithmetic even alone, and stay the kernel's.
#[test]
fn a_lone_ranks_copies_run_as_device_copies_unless_the_kernel_is_asked_for() {
    if !have_compiler("a_lone_ranks_copies_run_as_device_copies_unless_the_kernel_is_asked_for") {
        return;
    }
    let said = "device copies instead of the kernel";
    let sweep = |copies: &str, extra: &[&str]| {
        let args = ["all-reduce", "--ranks", "1", "--sizes", "8B:1M"];
        let env = [
            ("COLLBENCH_CUDA_COPIES", copies),
            ("COLLBENCH_LOG", "collbench::engine=debug"),
        ];
        let (code, v, err) = run_env(&[&args[..], extra].concat(), &env);
        assert_eq!(code, 0, "{copies} {extra:?}: {err}");
        assert_clean(&v, copies);
        let loads = err.lines().filter(|l| l.contains(said)).count();
        (rows(&v).len(), loads)
    };
    // Every case loaded once (a copy of its bytes; in place, none),
    // whatever the timing.
    for extra in [&[][..], &["--graph"], &["--timing", "wall"]] {
        let (rows, loads) = sweep("driver", extra);
        assert!(rows >= 30, "{extra:?}: {rows} rows");
        assert_eq!(loads, rows, "{extra:?}");
    }
    assert_eq!(sweep("kernel", &[]).1, 0);
    assert_eq!(sweep("driver", &["--op", "avg,premulsum"]).1, 0);
}

#[test]
fn every_dtype_and_operator_reduces_bit_exact() {
    if !have_compiler("every_dtype_and_operator_reduces_bit_exact") {
        return;
    }
    for coll in ["all-reduce", "reduce-scatter", "reduce"] {
        let (code, v, err) = run(&[
            coll,
            "--ranks",
            "3",
            "--dtype",
            "all",
            "--op",
            "all",
            "--algo",
            "all",
            "--sizes",
            "8B:64K:x64",
        ]);
        assert_eq!(code, 0, "{coll}: {err}");
        assert_clean(&v, coll);
        let variants: BTreeSet<(&str, &str)> = rows(&v)
            .iter()
            .map(|r| (r["dtype"].as_str().unwrap(), r["op"].as_str().unwrap()))
            .collect();
        assert_eq!(variants.len(), 60, "{coll}: 12 types x 5 operators");
    }
}

/// LL128 (120 payload bytes a 128-byte line) at sizes that end mid-line,
/// fill whole lines and span many, with every type's element size, and
/// `auto` choosing it between the low-latency slot and 1 MiB, between
/// ranks of one GPU: across GPUs (host-mapped connections, where a line
/// can arrive torn) auto never takes it and asking for it is refused.
#[test]
fn ll128_lines_carry_every_size_and_auto_takes_them_in_the_middle() {
    if !have_compiler("ll128_lines_carry_every_size_and_auto_takes_them_in_the_middle") {
        return;
    }
    let one_gpu = [("COLLBENCH_EMU_GPUS", "1")];
    for n in ["3", "8"] {
        let (code, v, err) = run_env(
            &[
                "all",
                "--ranks",
                n,
                "--algo",
                "all",
                "--protocol",
                "ll128",
                "--dtype",
                "int8,half,double",
                "--sizes",
                "120B:1080B:+240",
                "--slot-size",
                "4K",
            ],
            &one_gpu,
        );
        let what = format!("ll128 on {n} ranks");
        assert_eq!(code, 0, "{what}: {err}");
        assert_clean(&v, &what);
    }
    let auto = |gpus: &str| {
        let dir = tempfile::tempdir().unwrap();
        let out = collbench()
            .args([
                "all-reduce",
                "--device",
                "cuda-emu",
                "--ranks",
                "2",
                "--sizes",
                "1K:1M:x32",
            ])
            .args(["--iters", "1", "--warmup", "0", "-q", "--json"])
            .arg(dir.path().join("r.json"))
            .env("COLLBENCH_LOG", "collbench::engine=debug")
            .env("COLLBENCH_EMU_GPUS", gpus)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        err
    };
    let err = auto("1");
    for proto in ["proto=LowLatency ", "proto=LowLatency128 "] {
        assert!(err.lines().any(|l| l.contains(proto)), "{proto}: {err}");
    }
    let err = auto("2");
    assert!(err.lines().any(|l| l.contains("proto=Simple ")), "{err}");
    assert!(!err.contains("proto=LowLatency128 "), "{err}");
    let (code, _, err) = run_env(
        &[
            "all-reduce",
            "--ranks",
            "2",
            "--protocol",
            "ll128",
            "--sizes",
            "1K",
        ],
        &[("COLLBENCH_EMU_GPUS", "2")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--protocol ll128: ranks on 2 GPUs") && err.contains("torn"),
        "{err}"
    );
}

/// Ranks on several GPUs of one process: a connection is the receiver's
/// device memory where the sender's GPU reaches it (the same GPU, or a peer
/// with peer access enabled), else pinned host memory
/// (`COLLBENCH_CUDA_P2P=off`, or GPUs without peer access); bit-exact
/// either way, with two ranks on each GPU so that both kinds meet.
#[test]
fn connections_between_gpus_go_peer_to_peer_or_through_host_memory() {
    if !have_compiler("connections_between_gpus_go_peer_to_peer_or_through_host_memory") {
        return;
    }
    for (p2p, said) in [
        ("auto", "peer_to_peer=2 of=2"),
        ("off", "through host memory (COLLBENCH_CUDA_P2P=off)"),
    ] {
        let env = [
            ("COLLBENCH_EMU_GPUS", "2"),
            ("COLLBENCH_CUDA_P2P", p2p),
            ("COLLBENCH_LOG", "collbench::engine=info"),
        ];
        let args = [
            "all",
            "--ranks",
            "4",
            "--algo",
            "all",
            "--sizes",
            "1K:64K:x64",
        ];
        let (code, v, err) = run_env(&args, &env);
        assert_eq!(code, 0, "COLLBENCH_CUDA_P2P={p2p}: {err}");
        assert_clean(&v, p2p);
        assert_eq!(pairs(&v).len(), 13, "{p2p}");
        assert!(err.contains(said), "COLLBENCH_CUDA_P2P={p2p}: {err}");
    }
    let (code, _, err) = run_env(
        &["all-reduce", "--ranks", "2", "--sizes", "1K"],
        &[("COLLBENCH_CUDA_P2P", "on")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("COLLBENCH_CUDA_P2P=\"on\""), "{err}");
}

/// premulsum in the kernels: the source of a step that reads the rank's
/// input is scaled on every path (vectors, elements, low-latency lines),
/// on 1, 2, 3, 5 and 8 ranks, beside NCCL's stand-in.
#[test]
fn premulsum_scales_each_input_once_in_the_kernels() {
    if !have_compiler("premulsum_scales_each_input_once_in_the_kernels") {
        return;
    }
    for (n, scalar, dtypes) in [
        ("1", "3", "float,int32"),
        ("2", "-0.5", "half,float"),
        ("3", "0.1", "float,bfloat16"),
        ("5", "-3", "int8,float"),
        ("8", "1.5", "f8e4m3,double"),
    ] {
        for proto in ["simple", "ll"] {
            let (code, v, err) = run(&[
                "all",
                "--ranks",
                n,
                "--op",
                "premulsum",
                "--scalar",
                scalar,
                "--dtype",
                dtypes,
                "--algo",
                "all",
                "--protocol",
                proto,
                "--sizes",
                "8B:64K:x8",
                "--engine",
                "builtin,nccl",
            ]);
            let what = format!("{n} ranks x{scalar} {proto}");
            assert_eq!(code, 0, "{what}: {err}");
            assert_clean(&v, &what);
            let scaled: BTreeSet<&str> = rows(&v)
                .iter()
                .filter(|r| r["op"] == "premulsum")
                .map(|r| r["collective"].as_str().unwrap())
                .collect();
            let want: BTreeSet<&str> = ["all-reduce", "reduce-scatter", "reduce"].into();
            assert_eq!(scaled, want, "{what}");
        }
    }
}

#[test]
fn timing_methods_and_graphs_give_checked_rows() {
    if !have_compiler("timing_methods_and_graphs_give_checked_rows") {
        return;
    }
    for (args, timing) in [
        (vec!["--timing", "events"], "events"),
        (vec!["--timing", "wall"], "wall"),
        (vec!["--graph"], "events"),
        (vec!["--graph", "--timing", "wall"], "wall"),
    ] {
        let mut a = vec![
            "all-reduce",
            "--ranks",
            "3",
            "--algo",
            "all",
            "--sizes",
            "64B:256K:x8",
        ];
        a.extend(&args);
        let (code, v, err) = run(&a);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(v["meta"]["timing"], timing, "{args:?}");
        assert_clean(&v, &format!("{args:?}"));
        // 5 sizes x 3 algorithms x 2 placements.
        assert_eq!(rows(&v).len(), 5 * 3 * 2, "{args:?}");
        for r in rows(&v) {
            assert!(r["time_us"].as_f64().unwrap() > 0.0, "{args:?}: {r}");
        }
    }
}

#[test]
fn an_injected_hang_exits_3_with_dumps_and_analyze_names_the_rank() {
    if !have_compiler("an_injected_hang_exits_3_with_dumps_and_analyze_names_the_rank") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "4",
            "--sizes",
            "1K",
        ])
        .args(["--inject", "hang:rank=2,seq=5", "--timeout", "3s", "-q"])
        .arg("--dump-dir")
        .arg(&dumps)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("hang detected"), "{err}");
    // The kernels' progress reached the dumps: the waiting ranks' channels
    // say on whom they wait.
    let rank0: Value = serde_json::from_slice(&std::fs::read(dump_of(&dumps, 0)).unwrap()).unwrap();
    let stuck: Vec<&Value> = rank0["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] != "completed" && e["pg"] == "0")
        .collect();
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_eq!(stuck[0]["seq"], 5);
    let chans = stuck[0]["channels"].as_array().expect("channel progress");
    assert!(
        chans.iter().any(|c| c["waiting_on"]["peer"] == 2),
        "{chans:?}"
    );
    let out = collbench()
        .arg("analyze")
        .arg(&dumps)
        .arg("--json")
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["culprits"], serde_json::json!([2]), "{d}");
    assert_eq!(d["findings"][0]["seq"], 5, "{d}");
}

#[test]
fn nan_and_corrupt_injections_fail_the_check_naming_rank_and_element() {
    if !have_compiler("nan_and_corrupt_injections_fail_the_check_naming_rank_and_element") {
        return;
    }
    for (spec, got) in [("nan:rank=1", "NaN"), ("corrupt:rank=1", "got")] {
        let out = collbench()
            .args([
                "all-reduce",
                "--device",
                "cuda-emu",
                "--ranks",
                "3",
                "--sizes",
                "1K",
            ])
            .args(["--inject", spec, "--iters", "2", "--warmup", "1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{spec}: {text}");
        let line = text
            .lines()
            .find(|l| l.contains("first wrong value"))
            .unwrap_or_else(|| panic!("{spec}: no first wrong value in\n{text}"));
        assert!(
            line.contains("rank ") && line.contains("element "),
            "{line}"
        );
        assert!(line.contains(got), "{spec}: {line}");
    }
}

/// A NaN brought in by one rank is one bad element of an all-reduce (every
/// rank's output holds it once), and the finding names the rank whose
/// input held it as well as where it was seen; outputs that differ per
/// rank (reduce-scatter) add up.
#[test]
fn a_nan_is_counted_once_and_traced_to_the_rank_that_brought_it() {
    if !have_compiler("a_nan_is_counted_once_and_traced_to_the_rank_that_brought_it") {
        return;
    }
    for device in ["cuda-emu", "host"] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let out = collbench()
            .args([
                "all-reduce",
                "--device",
                device,
                "--ranks",
                "3",
                "--sizes",
                "1K",
            ])
            .args([
                "--inject",
                "nan:rank=1",
                "--iters",
                "2",
                "--warmup",
                "1",
                "-q",
            ])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{device}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(rows(&v).len(), 2, "{device}");
        for r in rows(&v) {
            assert_eq!(
                (r["wrong"].as_i64(), r["nan"].as_i64()),
                (Some(1), Some(1)),
                "{device}: {r}"
            );
            let first = r["first_error"].as_str().unwrap();
            // 1 KiB of floats: the NaN goes to element 256 / 2.
            assert!(first.contains("element 128: expected"), "{device}: {first}");
            assert!(first.contains("got NaN"), "{device}: {first}");
            assert!(
                first.contains(
                    "NaN/Inf in rank 1's input (first at element 128) before the operation"
                ),
                "{device}: {first}"
            );
        }
        // Two ranks' outputs corrupted, each its own element: two wrong.
        let out = collbench()
            .args([
                "reduce-scatter",
                "--device",
                device,
                "--ranks",
                "3",
                "--sizes",
                "3K",
            ])
            .args(["--inject", "corrupt:rank=0", "--inject", "corrupt:rank=2"])
            .args(["--iters", "2", "--warmup", "1", "--placement", "out", "-q"])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{device}");
        let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(rows(&v)[0]["wrong"], 2, "{device}: {}", rows(&v)[0]);
    }
}

/// `--links` on the CUDA executor: its kernels time every step that
/// receives (thread 0 of the block: the wait for the data, then the move),
/// the same matrix comes out, and a slowed link is the slowest.
#[test]
fn the_kernels_fill_the_link_matrix() {
    if !have_compiler("the_kernels_fill_the_link_matrix") {
        return;
    }
    let ring = [
        "all-reduce",
        "--ranks",
        "5",
        "--algo",
        "ring",
        "--sizes",
        "1M",
    ];
    let (code, v, err) = run_alone(&[&ring[..], &["--links", "--placement", "out"]].concat());
    assert!(code == 0 || code == 1, "{err}");
    let pairs = v["links"]["pairs"].as_array().expect("links.pairs");
    assert_eq!(pairs.len(), 5, "{pairs:?}");
    for p in pairs {
        let (from, to) = (p["from"].as_u64().unwrap(), p["to"].as_u64().unwrap());
        assert_eq!((from + 1) % 5, to, "{p}");
        assert!(p["bytes"].as_u64().unwrap() > 0, "{p}");
        assert!(
            p["gbps"].as_f64().unwrap() > 0.0 && p["transfer_us"].as_f64().unwrap() > 0.0,
            "{p}"
        );
    }
    let slowed = [&ring[..], &["--links", "--placement", "out"]].concat();
    let slowed = [&slowed[..], &["--inject", "slow-link:from=2,to=3,factor=8"]].concat();
    let (_, v, err) = run_alone(&slowed);
    let pairs = v["links"]["pairs"].as_array().expect("links.pairs");
    let slowest = pairs
        .iter()
        .min_by(|a, b| {
            a["gbps"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["gbps"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(
        (slowest["from"].as_u64(), slowest["to"].as_u64()),
        (Some(2), Some(3)),
        "{err} {pairs:?}"
    );
}

/// `collbench links` on the CUDA executor: the send-recv rounds fill every
/// directed pair of the matrix from the kernels' records.
#[test]
fn the_links_probe_fills_every_pair_on_the_emulated_device() {
    if !have_compiler("the_links_probe_fills_every_pair_on_the_emulated_device") {
        return;
    }
    let probe = [
        "links",
        "--ranks",
        "4",
        "--sizes",
        "256K",
        "--placement",
        "out",
        "--inject",
        "slow-link:from=2,to=0,factor=8",
        // The protocol the probe's default sizes end on (LL128, which auto
        // takes at 256 KiB, times a message from its first line: rougher
        // on emulated blocks that share the host's two cores).
        "--protocol",
        "simple",
    ];
    let (code, v, err) = run_alone(&probe);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["meta"]["device"], "cuda-emu");
    let pairs = v["links"]["pairs"].as_array().expect("links.pairs");
    assert_eq!(pairs.len(), 12, "{pairs:?}");
    assert!(pairs.iter().all(|p| p["gbps"].as_f64().unwrap() > 0.0));
    let named: Vec<&str> = v["links"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["detail"].as_str().unwrap().split(':').next().unwrap())
        .collect();
    // The emulated device's timings are rough (blocks are threads on the
    // host's cores): the slowed link is the worst finding.
    assert_eq!(named.first(), Some(&"slow link 2 -> 0"), "{err}");
    assert!(rows(&v).iter().all(|r| r["wrong"] == 0));
}

/// Under the low-latency protocol a receiver's wait for its sender ends
/// at the message's first line, apart from the move: an 8x slower link
/// stands out. (Its wait was counted as transfer before, so every link
/// read alike and the slowed one was missed.)
#[test]
fn the_low_latency_protocol_times_a_links_wait_apart() {
    if !have_compiler("the_low_latency_protocol_times_a_links_wait_apart") {
        return;
    }
    let probe = [
        "links",
        "--ranks",
        "3",
        "--sizes",
        "4K",
        "--placement",
        "out",
        "--protocol",
        "ll",
        "--inject",
        "slow-link:from=2,to=0,factor=8",
    ];
    // Alone on the cores, and more iterations than the other tests take:
    // link times are averages the emulated blocks' scheduling spreads.
    let _alone = CORES.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args(probe)
        .args([
            "--device", "cuda-emu", "-q", "--iters", "6", "--warmup", "1",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let pairs = v["links"]["pairs"].as_array().expect("links.pairs");
    assert_eq!(pairs.len(), 6, "{pairs:?}");
    let gbps = |p: &serde_json::Value| p["gbps"].as_f64().unwrap();
    let slowest = pairs
        .iter()
        .min_by(|a, b| gbps(a).total_cmp(&gbps(b)))
        .unwrap();
    assert_eq!(
        (slowest["from"].as_u64(), slowest["to"].as_u64()),
        (Some(2), Some(0)),
        "{err} {pairs:?}"
    );
    // Well apart from the rest (8x slowed; the others read alike).
    let mut others: Vec<f64> = pairs
        .iter()
        .filter(|p| !(p["from"] == 2 && p["to"] == 0))
        .map(gbps)
        .collect();
    others.sort_by(f64::total_cmp);
    let median = others[others.len() / 2];
    assert!(gbps(slowest) * 3.0 < median, "{pairs:?}");
    // ... and alike among themselves (a wait counted as transfer spread
    // them over three orders of magnitude).
    assert!(others[others.len() - 1] < 5.0 * others[0], "{pairs:?}");
    // The slowed link's own move is the longest: the others' time is
    // their wait for a sender held up behind it, not transfer.
    let transfer = |p: &serde_json::Value| p["transfer_us"].as_f64().unwrap();
    let longest = pairs
        .iter()
        .max_by(|a, b| transfer(a).total_cmp(&transfer(b)))
        .unwrap();
    assert_eq!(
        (longest["from"].as_u64(), longest["to"].as_u64()),
        (Some(2), Some(0)),
        "{pairs:?}"
    );
}

#[test]
fn a_device_too_small_for_the_layout_is_refused_before_launch() {
    if !have_compiler("a_device_too_small_for_the_layout_is_refused_before_launch") {
        return;
    }
    // The files the sweep would write, from an earlier run: a refusal
    // leaves them as they were.
    let dir = tempfile::tempdir().unwrap();
    let keep = |name: &str| dir.path().join(name);
    let kept = |name: &str| match name {
        "keep.jsonl" => "{\"schema\":\"collbench.results/1\",\"meta\":{}}\n".to_string(),
        _ => name.to_string(),
    };
    for name in ["keep.json", "keep.jsonl", "keep.csv", "keep.svg"] {
        std::fs::write(keep(name), kept(name)).unwrap();
    }
    let out = collbench()
        .env("COLLBENCH_EMU_GPUS", "1")
        .env("COLLBENCH_EMU_SMS", "1")
        .env("COLLBENCH_EMU_BLOCKS_PER_SM", "3")
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "4",
            "--channels",
            "2",
        ])
        .args(["--algo", "ring", "--sizes", "1K", "-q", "--json"])
        .arg(keep("keep.json"))
        .arg("--csv")
        .arg(keep("keep.csv"))
        .arg("--plot")
        .arg(keep("keep.svg"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for name in ["keep.json", "keep.jsonl", "keep.csv", "keep.svg"] {
        assert_eq!(std::fs::read_to_string(keep(name)).unwrap(), kept(name));
    }
    assert!(
        err.contains("4 rank(s) x 2 block(s) = 8 blocks must be resident at once")
            && err.contains("1 SMs x 3 blocks")
            && err.contains("lower --ranks or --channels"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // `--channels auto` on a device of 4 SMs x 1 block: one channel per
    // rank, which fits (auto took 2 on the emulated device, which did not).
    let out = collbench()
        .env("COLLBENCH_EMU_GPUS", "1")
        .env("COLLBENCH_EMU_SMS", "4")
        .env("COLLBENCH_EMU_BLOCKS_PER_SM", "1")
        .args(["all-reduce", "--device", "cuda-emu", "--ranks", "4"])
        .args(["--sizes", "1K:64K:x64", "-n", "2", "-w", "1", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "auto channels over-filled: {err}"
    );
}

/// Ranks sharing a GPU take a hardware queue each (their persistent
/// kernels would otherwise wait on each other): 4 queues run 4 ranks and
/// refuse 5 before anything runs; 1 queue runs a lone rank.
#[test]
fn ranks_sharing_a_gpu_take_a_hardware_queue_each() {
    if !have_compiler("ranks_sharing_a_gpu_take_a_hardware_queue_each") {
        return;
    }
    fn queues(n: &str) -> [(&str, &str); 2] {
        [("COLLBENCH_EMU_GPUS", "1"), ("COLLBENCH_EMU_QUEUES", n)]
    }
    let (code, v, err) = run_env(
        &["all-reduce", "--ranks", "4", "--sizes", "1K"],
        &queues("4"),
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v, "4 ranks on 4 queues");
    assert_eq!(rows(&v).len(), 2, "4 ranks on 4 queues");
    let (code, _, err) = run_env(
        &["all-reduce", "--ranks", "5", "--sizes", "1K"],
        &queues("4"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("5 ranks share GPU 0") && err.contains("use --ranks 4 or fewer per GPU"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let (code, v, err) = run_env(
        &["all-reduce", "--ranks", "1", "--sizes", "1K"],
        &queues("1"),
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v, "1 rank on 1 queue");
    assert_eq!(rows(&v).len(), 2, "1 rank on 1 queue");
}

#[test]
fn the_emulated_device_without_a_compiler_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("collbench")
        .unwrap()
        .env("COLLBENCH_CACHE_DIR", dir.path())
        .env("CXX", "/nonexistent/c++")
        .args(["all-reduce", "--device", "cuda-emu", "--sizes", "1K", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/c++") && err.contains("set CXX"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `info` says what `--device cuda-emu` would run on: the devices' shape
/// from `COLLBENCH_EMU_*`, the C++ compiler, its limit; and names a bad
/// setting or a missing compiler instead.
#[test]
fn info_tells_the_emulated_device_and_its_compiler() {
    let Some(cxx) = emu::compiler("info_tells_the_emulated_device_and_its_compiler") else {
        return;
    };
    let fresh = tempfile::tempdir().unwrap();
    let cache = fresh.path().join("cache");
    let info = |env: &[(&str, &str)]| {
        let mut c = Command::cargo_bin("collbench").unwrap();
        c.env("CXX", &cxx)
            .env("COLLBENCH_CACHE_DIR", &cache)
            .args(["info", "--json"]);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["emulated"].clone()
    };
    let e = info(&[("COLLBENCH_EMU_GPUS", "3"), ("COLLBENCH_EMU_MEM", "2G")]);
    assert_eq!(e["devices"]["gpus"], 3, "{e}");
    assert_eq!(e["devices"]["block_threads"], 1, "{e}");
    assert_eq!(e["devices"]["hardware_queues"], 128, "{e}");
    let wide = info(&[("COLLBENCH_EMU_THREADS", "16")]);
    assert_eq!(wide["devices"]["block_threads"], 16, "{wide}");
    assert_eq!(e["devices"]["memory_bytes"], 2u64 << 30, "{e}");
    assert_eq!(e["devices"]["multiprocessors"], 64, "{e}");
    assert_eq!(e["compiler"]["command"], cxx.as_str(), "{e}");
    assert!(
        e["compiler"]["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{e}"
    );
    assert_eq!(e["compiler"]["limit_seconds"], 600, "{e}");
    // Where builds would go, named without being made: `info` changes nothing.
    assert_eq!(
        e["cache_dir"],
        cache.join("emu").display().to_string(),
        "{e}"
    );
    assert!(!cache.exists(), "info made {}", cache.display());
    assert_eq!(e["cache_unusable"], Value::Null, "{e}");
    // A cache folder that cannot be made: the temporary folder builds fall
    // back to is named, and why.
    let file = fresh.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let e = info(&[("COLLBENCH_CACHE_DIR", file.to_str().unwrap())]);
    assert!(
        e["cache_dir"]
            .as_str()
            .is_some_and(|d| d.ends_with("-emu") && d.contains("collbench-")),
        "{e}"
    );
    assert_eq!(
        e["cache_unusable"]["dir"],
        file.join("emu").display().to_string(),
        "{e}"
    );
    assert!(
        e["cache_unusable"]["why"]
            .as_str()
            .is_some_and(|w| w.ends_with("file is not a folder")),
        "{e}"
    );
    // The NVRTC kernels' cache says the same in its own key.
    let out = Command::cargo_bin("collbench")
        .unwrap()
        .env("COLLBENCH_CACHE_DIR", &file)
        .args(["info", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["kernel_cache"]["unusable"]
            .as_str()
            .is_some_and(|w| w.ends_with("file is not a folder")),
        "{}",
        v["kernel_cache"]
    );
    let e = info(&[
        ("COLLBENCH_EMU_GPUS", "none"),
        ("CXX", "/nonexistent/c++"),
        ("COLLBENCH_EMU_CXX_SECONDS", "45"),
    ]);
    assert!(
        e["devices"]["error"]
            .as_str()
            .is_some_and(|m| m.contains("COLLBENCH_EMU_GPUS=\"none\"")),
        "{e}"
    );
    assert_eq!(e["compiler"]["version"], Value::Null, "{e}");
    assert!(
        e["compiler"]["error"]
            .as_str()
            .is_some_and(|m| m.contains("/nonexistent/c++")),
        "{e}"
    );
    assert_eq!(e["compiler"]["limit_seconds"], 45, "{e}");
    let out = Command::cargo_bin("collbench")
        .unwrap()
        .env("COLLBENCH_EMU_SMS", "16")
        .env("CXX", &cxx)
        .arg("info")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--device cuda-emu: 8 devices x 16 SMs x 4 blocks per SM, 16GiB each")
            && text.contains(&format!("C++ compiler `{cxx}` (")),
        "{text}"
    );
}

/// A compiler that never finishes (one waiting on a license server, say)
/// is stopped at `COLLBENCH_EMU_CXX_SECONDS`: exit 2 naming it, not a run
/// held forever ahead of any collective the timeout could catch; what it
/// started (a driver's cc1plus) is stopped with it.
#[test]
fn a_compiler_that_never_finishes_is_stopped() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cxx = dir.path().join("stuck-c++");
    std::fs::write(
        &cxx,
        format!(
            "#!/bin/sh\ncase \"$*\" in *--version*) echo 'stuck 1.0'; exit 0;; esac\nsleep 300 &\necho $! > {}\nwait\n",
            dir.path().join("started").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cxx, std::fs::Permissions::from_mode(0o755)).unwrap();
    // (exit code, stderr) of a sweep with the compiler limited to `limit`.
    let run = |limit: &str| {
        let out = Command::cargo_bin("collbench")
            .unwrap()
            .env("COLLBENCH_CACHE_DIR", dir.path().join("cache"))
            .env("CXX", &cxx)
            .env("COLLBENCH_EMU_CXX_SECONDS", limit)
            .args(["all-reduce", "--device", "cuda-emu", "--sizes", "1K", "-q"])
            .timeout(std::time::Duration::from_secs(120))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    let start = std::time::Instant::now();
    let (code, err) = run("1");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("stuck-c++")
            && err.contains("ran for more than 1 s")
            && err.contains("set CXX"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    // The compiler's own process is gone (or a zombie init has yet to reap).
    let started = std::fs::read_to_string(dir.path().join("started")).unwrap();
    let stat = std::path::Path::new("/proc")
        .join(started.trim())
        .join("stat");
    let gone = || std::fs::read_to_string(&stat).map_or(true, |s| s.contains(") Z "));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gone(), "the compiler's child {} still runs", started.trim());
    // A bad limit is named before anything is built.
    let (code, err) = run("soon");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("COLLBENCH_EMU_CXX_SECONDS=\"soon\""), "{err}");
}

#[test]
fn cuda_without_a_gpu_is_exit_2_naming_what_is_missing() {
    if collbench::engine::exec::cuda::device::probe().is_ok() {
        eprintln!(
            "SKIPPED cuda_without_a_gpu_is_exit_2_naming_what_is_missing: this machine has a GPU"
        );
        return;
    }
    let out = collbench()
        .args(["all-reduce", "--device", "cuda", "--sizes", "1K", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--device cuda: no usable GPU ("), "{err}");
    // auto never picks the emulated device: it runs on the host and says so.
    let out = collbench()
        .args(["all-reduce", "--sizes", "1K", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("running on the host engine"), "{err}");
}

#[test]
fn nccl_side_by_side_on_the_emulated_device_comes_from_the_stand_in() {
    if !have_compiler("nccl_side_by_side_on_the_emulated_device_comes_from_the_stand_in") {
        return;
    }
    for n in ["1", "3"] {
        let (code, v, err) = run(&[
            "all",
            "--ranks",
            n,
            "--engine",
            "builtin,nccl",
            "--sizes",
            "8B:64K:x8",
        ]);
        assert_eq!(code, 0, "{n} ranks: {err}");
        assert_clean(&v, &format!("{n} ranks"));
        let engines: BTreeSet<&str> = rows(&v)
            .iter()
            .map(|r| r["engine"].as_str().unwrap())
            .collect();
        assert_eq!(
            engines,
            BTreeSet::from(["builtin", "nccl-standin"]),
            "{n} ranks"
        );
        assert!(
            v["meta"]["nccl"]
                .as_str()
                .unwrap_or("")
                .starts_with("nccl-standin"),
            "{}",
            v["meta"]
        );
        // Every collective has rows of both engines.
        let colls = |e: &str| -> BTreeSet<String> {
            rows(&v)
                .iter()
                .filter(|r| r["engine"] == e)
                .map(|r| r["collective"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(colls("builtin"), colls("nccl-standin"));
        assert_eq!(colls("builtin").len(), 9);
    }
    // NCCL runs on the CUDA engine only.
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--engine",
            "builtin,nccl",
            "-q",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--engine nccl runs on the CUDA engine"),
        "{err}"
    );
}

#[test]
fn a_sweep_too_large_for_the_device_is_capped_with_a_warning() {
    if !have_compiler("a_sweep_too_large_for_the_device_is_capped_with_a_warning") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .env("COLLBENCH_EMU_MEM", "64M")
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "2",
            "--sizes",
            "1M:64M",
        ])
        .args([
            "--placement",
            "out",
            "--iters",
            "1",
            "--warmup",
            "0",
            "-q",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("2 size(s) from 32MiB up skipped")
            && err.contains("64MiB of memory available"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sizes: Vec<u64> = rows(&v)
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    // Each rank alone on its emulated GPU: 32 MiB of buffers at 16 MiB,
    // plus one peer's connections on the emulated device's two channels.
    assert_eq!(sizes, vec![1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]);
    assert_clean(&v, "capped sweep");
}

/// Runs `collbench ARGS --dump-dir D -q` on the emulated device, which must
/// stop on a hang (exit 3), then `collbench analyze D --json`: its diagnosis.
fn hang_and_analyze(args: &[&str]) -> Value {
    hang_and_analyze_env(args, &[])
}

/// [`hang_and_analyze`] with environment variables set.
fn hang_and_analyze_env(args: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let out = collbench()
        .envs(env.iter().copied())
        .args(args)
        .args(["--device", "cuda-emu", "-q", "--dump-dir"])
        .arg(&dumps)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
    let out = collbench()
        .arg("analyze")
        .arg(&dumps)
        .arg("--json")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Device ranks queue a whole timed loop: a rank that hangs inside it is
/// named at the first collective it never entered, not at the newest one
/// the others queued.
#[test]
fn a_hang_inside_a_queued_timed_loop_is_named_where_the_rank_stopped() {
    if !have_compiler("a_hang_inside_a_queued_timed_loop_is_named_where_the_rank_stopped") {
        return;
    }
    for timing in ["events", "wall"] {
        let d = hang_and_analyze(&[
            "all-reduce",
            "--ranks",
            "4",
            "--sizes",
            "1K",
            "--iters",
            "20",
            "--warmup",
            "2",
            "--timing",
            timing,
            "--inject",
            "hang:rank=1,seq=10",
            "--timeout",
            "3s",
        ]);
        assert_eq!(d["culprits"], serde_json::json!([1]), "{timing}: {d}");
        assert_eq!(d["findings"][0]["kind"], "not-joined", "{timing}: {d}");
        assert_eq!(d["findings"][0]["seq"], 10, "{timing}: {d}");
    }
}

/// A rank that calls a queued collective late (a delay past the timeout):
/// the others started it and wait on that rank, whose operation is only
/// called; `analyze` names it at that seq, not at the next one the others
/// queued behind.
#[test]
fn a_delayed_rank_is_named_where_the_others_wait_for_it() {
    if !have_compiler("a_delayed_rank_is_named_where_the_others_wait_for_it") {
        return;
    }
    let d = hang_and_analyze(&[
        "all-reduce",
        "--ranks",
        "4",
        "--sizes",
        "1K",
        "--iters",
        "20",
        "--warmup",
        "2",
        "--inject",
        "delay:rank=1,seq=10,ms=20000",
        // Far below the delay, and above what a loaded machine's setup
        // between the case's barriers may take (2 s timed out there once,
        // at the first barrier, with another sweep on both cores).
        "--timeout",
        "5s",
    ]);
    assert_eq!(d["culprits"], serde_json::json!([1]), "{d}");
    assert_eq!(d["findings"][0]["kind"], "stuck", "{d}");
    assert_eq!(d["findings"][0]["seq"], 10, "{d}");
    let detail = d["findings"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("never started it"), "{detail}");
}

/// NCCL's stand-in computes each collective as it is launched: its
/// records complete at once, so a rank that never joins is named at the
/// seq it never entered, not a rank whose records were left behind.
#[test]
fn a_hang_beside_the_nccl_stand_in_names_the_rank_that_never_joined() {
    if !have_compiler("a_hang_beside_the_nccl_stand_in_names_the_rank_that_never_joined") {
        return;
    }
    let d = hang_and_analyze(&[
        "all-reduce",
        "--engine",
        "nccl",
        "--ranks",
        "3",
        "--sizes",
        "1K",
        "--iters",
        "10",
        "--warmup",
        "1",
        "--inject",
        "hang:rank=1,seq=5",
        "--timeout",
        "2s",
    ]);
    assert_eq!(d["culprits"], serde_json::json!([1]), "{d}");
    assert_eq!(d["findings"][0]["kind"], "not-joined", "{d}");
    assert_eq!(d["findings"][0]["seq"], 5, "{d}");
}

/// Starts `collbench ARGS --ranks RANKS --dump-dir DUMPS` on the emulated
/// device and asks it for SIGUSR1 snapshots every half second until
/// `wanted` holds for one (each rank's dump and its entries), killing it
/// then; fails after `limit`. Returns the request number and the dumps.
fn snapshot_until(
    args: &[&str],
    ranks: usize,
    dumps: &std::path::Path,
    limit: std::time::Duration,
    wanted: impl Fn(&[(Value, Vec<Value>)]) -> bool,
) -> (usize, Vec<(Value, Vec<Value>)>) {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .env("COLLBENCH_CACHE_DIR", cache_dir())
        .args(args)
        .args(["--device", "cuda-emu", "--ranks", &ranks.to_string(), "-q"])
        .arg("--dump-dir")
        .arg(dumps)
        .spawn()
        .unwrap();
    let entries = |n: usize, rank: usize| -> Option<(Value, Vec<Value>)> {
        let file = std::fs::read_dir(dumps).ok()?.find_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_string_lossy().into_owned();
            name.ends_with(&format!("-rank{rank}-request{n}.json"))
                .then_some(p)
        })?;
        let d: Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        let list = d["entries"].as_array()?.clone();
        Some((d, list))
    };
    let t = std::time::Instant::now();
    let mut caught = Err(format!("no snapshot as wanted in {limit:?}"));
    for n in 1.. {
        if t.elapsed() >= limit {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
        let wait = std::time::Instant::now();
        let mut got = None;
        while got.is_none() && wait.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            got = (0..ranks)
                .map(|r| entries(n, r))
                .collect::<Option<Vec<_>>>();
        }
        match got {
            None => {
                caught = Err(format!("request {n}: no snapshot of every rank"));
                break;
            }
            Some(got) if wanted(&got) => {
                caught = Ok((n, got));
                break;
            }
            Some(_) => {}
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    caught.unwrap_or_else(|e| panic!("{e}"))
}

/// A SIGUSR1 snapshot of a healthy run on the emulated device, taken
/// seconds after the timed loop was queued: only the operation each rank
/// runs is started and carries channel progress (those queued behind it
/// are scheduled), and `analyze` reads it as a run that was moving.
#[test]
fn a_snapshot_of_a_queued_timed_loop_is_no_hang() {
    if !have_compiler("a_snapshot_of_a_queued_timed_loop_is_no_hang") {
        return;
    }
    let _alone = CORES.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    // Snapshots until one was taken over 3 s after the first timed
    // operation was queued (the threshold past which a pending operation
    // reads as a stall is 2 s).
    let (n, got) = snapshot_until(
        &[
            "all-reduce",
            "--sizes",
            "1M",
            "--iters",
            "6000",
            "--warmup",
            "1",
            "--no-check",
        ],
        4,
        &dumps,
        std::time::Duration::from_secs(240),
        |got| {
            let (d0, list0) = &got[0];
            let at = d0["clocks"]["wall_ns"].as_u64().unwrap_or(0);
            let first_timed = list0
                .iter()
                .filter(|e| e["iteration"] == "timed")
                .filter_map(|e| e["t_scheduled_ns"].as_u64())
                .min();
            // Still queued on every rank: a loaded machine can take the
            // 3 s to a snapshot while the loop drains.
            let queued = got
                .iter()
                .all(|(_, list)| list.iter().any(|e| e["state"] == "scheduled"));
            queued && first_timed.is_some_and(|f| at.saturating_sub(f) > 3_000_000_000)
        },
    );
    let only = dir.path().join("snapshot");
    std::fs::create_dir(&only).unwrap();
    for (rank, (d, list)) in got.iter().enumerate() {
        let carrying = list
            .iter()
            .filter(|e| e["channels"].as_array().is_some_and(|c| !c.is_empty()))
            .count();
        let started = list.iter().filter(|e| e["state"] == "started").count();
        assert!(
            carrying <= 1 && started <= 1,
            "rank {rank}: {carrying} {started}"
        );
        assert!(
            list.iter().any(|e| e["state"] == "scheduled"),
            "rank {rank}: nothing queued"
        );
        std::fs::write(
            only.join(format!("rank{rank}-request{n}.json")),
            serde_json::to_vec(d).unwrap(),
        )
        .unwrap();
    }
    let out = collbench().arg("analyze").arg(&only).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Healthy: a note says the dumps are a snapshot of a run that was
    // moving when some channel was caught waiting, else nothing is pending.
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.starts_with("HEALTHY"), "{text}");
}

/// The v-collectives through the kernels on 1, 2, 3, 5 and 8 ranks, under
/// an even, a skewed and a hot split: every block where its counts put it,
/// checked on the device region by region (and NCCL's stand-in beside);
/// a corrupted element in a skewed all-to-all-v is found.
#[test]
fn v_collectives_are_bit_exact_on_the_emulated_device() {
    if !have_compiler("v_collectives_are_bit_exact_on_the_emulated_device") {
        return;
    }
    for n in ["1", "2", "3", "5", "8"] {
        for split in ["uniform", "skew:11", "hot:1"] {
            if split == "hot:1" && n == "1" {
                continue;
            }
            for coll in ["all-to-all-v", "all-gather-v", "reduce-scatter-v"] {
                let what = format!("{coll} {n} ranks {split}");
                let (code, v, err) = run(&[
                    coll,
                    "--ranks",
                    n,
                    "--sizes",
                    "8B:96K:x7",
                    "--split",
                    split,
                    "--slot-size",
                    "4K",
                ]);
                assert_eq!(code, 0, "{what}: {err}");
                assert_clean(&v, &what);
                assert!(rows(&v).len() >= 4, "{what}: {}", rows(&v).len());
                for r in rows(&v) {
                    assert_eq!(r["split"], split, "{what}: {r}");
                    assert_eq!(r["collective"], coll, "{what}");
                }
            }
        }
    }
    let out = collbench()
        .args(["all-to-all-v", "--device", "cuda-emu", "--ranks", "3"])
        .args([
            "--sizes",
            "4K",
            "--split",
            "skew:2",
            "--inject",
            "corrupt:rank=2",
        ])
        .args(["--iters", "2", "--warmup", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("first wrong value") && text.contains("rank 2"),
        "{text}"
    );
}

/// A group through the kernels: every member's program merged into one per
/// rank (one launch per rank per group), on 1, 2, 3, 5 and 8 ranks, each
/// member's output checked on the device.
#[test]
fn groups_are_bit_exact_on_the_emulated_device() {
    if !have_compiler("groups_are_bit_exact_on_the_emulated_device") {
        return;
    }
    let mix = "all-reduce,all-gather,reduce-scatter-v,all-to-all,broadcast,all-reduce";
    for n in ["1", "2", "3", "5", "8"] {
        let what = format!("{mix} on {n} ranks");
        let (code, v, err) = run(&[
            "all",
            "--group-mix",
            mix,
            "--ranks",
            n,
            "--sizes",
            "8K:512K:x64",
            "--split",
            "hot:0",
            "--slot-size",
            "8K",
        ]);
        assert_eq!(code, 0, "{what}: {err}");
        assert_clean(&v, &what);
        let groups: Vec<&Value> = rows(&v)
            .iter()
            .filter(|r| r["collective"] == "group")
            .collect();
        assert_eq!(groups.len(), 2 * 2, "{what}");
        assert_eq!(rows(&v).len(), 7 * groups.len(), "{what}");
        for g in groups {
            assert_eq!(g["members"].as_array().unwrap().len(), 6, "{what}");
        }
    }
    // NCCL's group calls, by the stand-in: the same members, each checked.
    let (code, v, err) = run(&[
        "all",
        "--group-mix",
        mix,
        "--ranks",
        "3",
        "--sizes",
        "8K",
        "--split",
        "hot:0",
        "--engine",
        "builtin,nccl",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v, "nccl group");
    let groups: Vec<&Value> = rows(&v)
        .iter()
        .filter(|r| r["collective"] == "group")
        .collect();
    assert_eq!(groups.len(), 2 * 2);
    assert!(groups
        .iter()
        .any(|g| g["engine"] == "nccl-standin" && g["algo"] == "nccl"));
}

/// Uneven splits give each rank messages of its own sizes: one rank's all
/// fit the low-latency slot while a peer's do not. `--protocol auto` now
/// takes one protocol for every rank (the one that carries the most any
/// rank needs); each rank chose its own, and a rank sending low-latency
/// lines to a peer that waited for simple slots hung (all-to-all-v in
/// place, 3 ranks, skewed, from 17 KiB).
#[test]
fn ranks_with_uneven_messages_run_one_protocol() {
    if !have_compiler("ranks_with_uneven_messages_run_one_protocol") {
        return;
    }
    for coll in ["all-to-all-v", "all-gather-v", "reduce-scatter-v"] {
        let (code, v, err) = run(&[
            coll,
            "--ranks",
            "3",
            "--sizes",
            "16K:48K:+8K",
            "--split",
            "skew",
            "--timeout",
            "20s",
        ]);
        assert_eq!(code, 0, "{coll}: {err}");
        assert_clean(&v, coll);
        assert_eq!(rows(&v).len(), 2 * 5, "{coll}");
    }
}

/// A group whose last member does not reduce (its inputs come from a sum's
/// tables) after members that reduce with max, min or prod: each member's
/// inputs come from its own operator's tables. One device region held the
/// tables of every member, so the last one's filled them all and the
/// reductions were wrong (the host engine was right).
#[test]
fn each_group_member_fills_from_its_own_operators_tables() {
    if !have_compiler("each_group_member_fills_from_its_own_operators_tables") {
        return;
    }
    for (mix, members) in [
        ("all-reduce,send-recv", 2),
        ("all-reduce,reduce,all-gather", 3),
    ] {
        for engine in ["builtin", "nccl"] {
            let what = format!("{mix} ({engine})");
            let (code, v, err) = run(&[
                "all-reduce",
                "--group",
                &members.to_string(),
                "--group-mix",
                mix,
                "--ranks",
                "2",
                "--sizes",
                "8B:1K:x128",
                "--op",
                "max,min,prod",
                "--dtype",
                "float,int32",
                "--engine",
                engine,
            ]);
            assert_eq!(code, 0, "{what}: {err}");
            assert_clean(&v, &what);
            assert_eq!(rows(&v).len(), 2 * 3 * 2 * 2 * (members + 1), "{what}");
        }
    }
}

/// A graph of more iterations than the flight recorder holds: a snapshot
/// taken while it runs shows the operation running as started and at most
/// half the recorder queued behind it (the records of the rest are made as
/// they complete), rather than a recorder full of scheduled operations
/// that pushed the running one out.
#[test]
fn a_graph_longer_than_the_recorder_keeps_its_running_operation() {
    if !have_compiler("a_graph_longer_than_the_recorder_keeps_its_running_operation") {
        return;
    }
    let _alone = CORES.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    // A snapshot while both ranks run the graph's timed operations.
    let flags = [
        "all-reduce",
        "--graph",
        "--sizes",
        "1M",
        "--iters",
        "4000",
        "--warmup",
        "1",
    ];
    let (_, caught) = snapshot_until(
        &[
            &flags[..],
            &["--placement", "out", "--fr-entries", "16", "--no-check"],
        ]
        .concat(),
        2,
        &dumps,
        std::time::Duration::from_secs(120),
        |got| {
            got.iter().all(|(_, l)| {
                l.iter()
                    .any(|e| e["iteration"] == "timed" && e["state"] != "completed")
            })
        },
    );
    for (rank, (_, list)) in caught.iter().enumerate() {
        let state = |s: &str| list.iter().filter(|e| e["state"] == s).count();
        assert!(list.len() <= 16, "rank {rank}: {} entries", list.len());
        assert_eq!(state("started"), 1, "rank {rank}: {list:?}");
        assert!(
            (1..=7).contains(&state("scheduled")),
            "rank {rank}: {list:?}"
        );
        let started = list.iter().find(|e| e["state"] == "started").unwrap();
        assert_eq!(started["iteration"], "timed", "rank {rank}: {started}");
    }
}

/// A hang aimed inside a graph's timed loop cannot fire there: a note says
/// so before the run, and the warning after says it never fired.
#[test]
fn a_hang_aimed_inside_a_graph_is_said_to_miss() {
    if !have_compiler("a_hang_aimed_inside_a_graph_is_said_to_miss") {
        return;
    }
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--graph",
            "--ranks",
            "2",
        ])
        .args(["--sizes", "1K", "--iters", "40", "--warmup", "1", "-q"])
        .args(["--inject", "hang:rank=1,seq=30", "--timeout", "3s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("note: --inject hang:rank=1,seq=30: hangs and delays come between operations"),
        "{err}"
    );
    assert!(err.contains("never fired"), "{err}");
}

/// The builtin engine's knobs given to a library engine alone (NCCL's
/// stand-in here; MPI alike) are said to be unused: NCCL chooses its own.
#[test]
fn builtin_knobs_with_a_library_engine_alone_are_said_unused() {
    if !have_compiler("builtin_knobs_with_a_library_engine_alone_are_said_unused") {
        return;
    }
    let (code, v, err) = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--sizes",
        "64",
        "--engine",
        "nccl",
        "--algo",
        "tree",
        "--protocol",
        "ll",
        "--channels",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v, "nccl alone");
    for flag in ["--algo", "--protocol", "--channels"] {
        assert!(
            err.contains(&format!(
                "note: {flag}: the builtin engine's; --engine nccl chooses its own"
            )),
            "{flag}: {err}"
        );
    }
    // Beside builtin they are builtin's, and nothing is said.
    let (code, _, err) = run(&[
        "all-reduce",
        "--ranks",
        "2",
        "--sizes",
        "64",
        "--engine",
        "builtin,nccl",
        "--algo",
        "tree",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("chooses its own"), "{err}");
}

/// A NaN or a flipped bit aimed at a rank whose uneven block is empty has
/// nowhere to go: the run goes on (no "read outside the rank's buffers"),
/// checked and clean, and the warning says the injection never fired. On
/// the host engine alike (it had written outside the view).
#[test]
fn an_injection_into_an_empty_block_never_fires() {
    if !have_compiler("an_injection_into_an_empty_block_never_fires") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let none_last = dir.path().join("w.txt");
    std::fs::write(&none_last, "1 1 0\n").unwrap();
    let split = none_last.to_str().unwrap();
    let cases = [
        ("all-gather-v", "nan:rank=2"),
        ("reduce-scatter-v", "corrupt:rank=2"),
    ];
    for device in ["cuda-emu", "host"] {
        for (coll, inject) in cases {
            for placement in ["in", "out"] {
                let json = dir.path().join(format!("{device}-{coll}-{placement}.json"));
                let out = collbench()
                    .args([coll, "--device", device, "--ranks", "3", "--split", split])
                    .args(["--sizes", "3K", "--iters", "1", "--warmup", "0", "-q"])
                    .args(["--placement", placement, "--inject", inject, "--json"])
                    .arg(&json)
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                let what = format!("{device} {coll} {placement}: {err}");
                assert_eq!(out.status.code(), Some(1), "{what}");
                assert!(err.contains("never fired"), "{what}");
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
                let rows = v["rows"].as_array().unwrap();
                assert_eq!(rows.len(), 1, "{what}");
                assert_eq!(
                    (&rows[0]["wrong"], &rows[0]["nan"]),
                    (&0.into(), &0.into()),
                    "{what}"
                );
            }
        }
    }
}

/// Every emulated GPU's memory is the host's: 4 ranks on 4 emulated GPUs
/// of 1 GiB of buffers each must fit the host's room together, not each
/// on its own (each GPU had claimed all of it, and the allocations failed,
/// or an out-of-memory killer came). Refused before anything is allocated.
#[test]
fn emulated_gpus_share_the_hosts_memory() {
    if !have_compiler("emulated_gpus_share_the_hosts_memory") {
        return;
    }
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let script = format!(
        "ulimit -v 3000000; exec '{}' all-reduce --device cuda-emu --ranks 4 --sizes 512M:512M --placement out -n 1 -w 0",
        bin.display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("COLLBENCH_CACHE_DIR", cache_dir())
        .env("COLLBENCH_EMU_GPUS", "4")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the sweep needs") && err.contains("4 ranks x 1GiB of buffers"),
        "{err}"
    );
    assert!(
        err.contains("of host memory (every emulated GPU's)"),
        "{err}"
    );
    assert!(!err.contains("refused"), "nothing allocated first: {err}");
}

/// A layout one of the sweep's algorithms cannot run (the tree all-reduce's
/// 4 blocks a channel on a GPU of 3 SMs x 1 block for 3 ranks) is refused
/// before the first launch, naming the algorithm: no rows of the others
/// first, no table header. Where `--algo auto` picked it, the error says so.
#[test]
fn an_algorithm_that_cannot_be_resident_is_refused_before_any_row() {
    if !have_compiler("an_algorithm_that_cannot_be_resident_is_refused_before_any_row") {
        return;
    }
    // On 5 ranks auto takes trees up to 64 KiB (direct on up to 4).
    let cases: [(&[&str], &str, &str); 2] = [
        (
            &["--ranks", "3", "--algo", "all", "--sizes", "4K:64K:x16"],
            "3",
            "all-reduce over tree cannot run here: 3 rank(s) x 4 block(s) = 12 blocks must be resident at once",
        ),
        (
            &["--ranks", "5", "--sizes", "4K:1M:x16"],
            "5",
            "--algo auto picks tree for all-reduce at 64KiB, which cannot run here: 5 rank(s) x 4 block(s)",
        ),
    ];
    for (args, sms, why) in cases {
        let out = collbench()
            .env("COLLBENCH_EMU_GPUS", "1")
            .env("COLLBENCH_EMU_SMS", sms)
            .env("COLLBENCH_EMU_BLOCKS_PER_SM", "1")
            .args(["all-reduce", "--device", "cuda-emu", "-n", "1", "-w", "0"])
            .args(args)
            .output()
            .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: want '{why}' in {err}");
        // Nor a table header: the refusal comes before the first case.
        assert!(text.trim().is_empty(), "{args:?}: printed first:\n{text}");
    }
}

/// A captured timed loop that runs longer than `--timeout` is no hang:
/// its operations complete (for the recorder) only when the graph ends,
/// and the one in flight is allowed the time of those behind it, from the
/// warmup's operations. (It had stopped as "collective 2 ran 1.0s, past the
/// timeout".)
#[test]
fn a_graph_longer_than_the_timeout_is_no_hang() {
    if !have_compiler("a_graph_longer_than_the_timeout_is_no_hang") {
        return;
    }
    let _alone = CORES.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let start = std::time::Instant::now();
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "3",
            "--graph",
        ])
        .args(["--sizes", "64K", "--iters", "3000", "--warmup", "3", "-q"])
        .args(["--timeout", "1s", "--dump-dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_clean(&v, "graph");
    // Long enough that one operation's timeout would have fired.
    assert!(start.elapsed() > std::time::Duration::from_secs(1), "{err}");
}

/// A reduce's step that receives from several peers (rank 1 from ranks 3
/// and 4): rank 3 delivers late, rank 4 never comes. The kernel's
/// progress record moves on to the peer it still waits on (it had kept
/// the first it waited on), and `analyze` names rank 4 at the collective.
#[test]
fn a_step_receiving_from_several_records_the_peer_it_still_waits_on() {
    if !have_compiler("a_step_receiving_from_several_records_the_peer_it_still_waits_on") {
        return;
    }
    common::a_multi_receive_hang_names_the_missing_peer(collbench, "cuda-emu", 1500, "5s");
}
