//! Integration tests: drive the real binary as users and CI scripts do.

use serde_json::Value;
use std::collections::BTreeSet;

mod common;
use common::{collbench, rows, run_json};

#[test]
fn all_collectives_and_algorithms_are_correct_on_5_ranks() {
    let (code, v, err) = run_json(&[
        "all",
        "--device",
        "host",
        "--ranks",
        "5",
        "--algo",
        "all",
        "--sizes",
        "8B:64K:x8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["schema"], "collbench.results/1");
    assert_eq!(v["meta"]["world_size"], 5);
    assert_eq!(v["meta"]["device"], "host");
    let pairs: BTreeSet<(String, String)> = rows(&v)
        .iter()
        .map(|r| {
            (
                r["collective"].as_str().unwrap().to_string(),
                r["algo"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("all-reduce", "ring"),
        ("all-reduce", "tree"),
        ("broadcast", "ring"),
        ("broadcast", "tree"),
        ("reduce", "ring"),
        ("reduce", "tree"),
        ("all-gather", "ring"),
        ("reduce-scatter", "ring"),
        ("all-to-all", "direct"),
        ("gather", "direct"),
        ("scatter", "direct"),
        ("send-recv", "direct"),
    ];
    for (c, a) in want {
        assert!(
            pairs.contains(&(c.to_string(), a.to_string())),
            "missing {c}/{a}"
        );
    }
    for r in rows(&v) {
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["nan"], 0, "{r}");
        for key in [
            "bytes",
            "count",
            "time_us",
            "algbw_gbps",
            "busbw_gbps",
            "placement",
            "dtype",
            "op",
            "root",
            "engine",
        ] {
            assert!(!r[key].is_null(), "row lacks {key}: {r}");
        }
        for key in ["p50_us", "p99_us", "min_us", "max_us"] {
            assert!(r["stats"][key].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[test]
fn busbw_uses_nccl_tests_factors() {
    let (code, v, err) = run_json(&["all", "--device", "host", "--ranks", "4", "--sizes", "64K"]);
    assert_eq!(code, 0, "{err}");
    for r in rows(&v) {
        let factor = match r["collective"].as_str().unwrap() {
            "all-reduce" => 2.0 * 3.0 / 4.0,
            "all-gather" | "reduce-scatter" | "all-to-all" | "gather" | "scatter" => 3.0 / 4.0,
            _ => 1.0,
        };
        let (alg, bus) = (
            r["algbw_gbps"].as_f64().unwrap(),
            r["busbw_gbps"].as_f64().unwrap(),
        );
        assert!((bus - alg * factor).abs() <= 1e-9 * alg.max(1.0), "{r}");
        let bytes = r["bytes"].as_f64().unwrap();
        let t = r["time_us"].as_f64().unwrap();
        assert!(
            (alg - bytes / t / 1e3).abs() <= 1e-6 * alg.max(1e-3),
            "algbw = bytes/time: {r}"
        );
    }
}

#[test]
fn every_dtype_and_op_is_correct_on_3_ranks() {
    let (code, v, err) = run_json(&[
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "3",
        "--dtype",
        "all",
        "--op",
        "all",
        "--sizes",
        "8B:4K:x8",
    ]);
    assert_eq!(code, 0, "{err}");
    let combos: BTreeSet<(String, String)> = rows(&v)
        .iter()
        .map(|r| {
            (
                r["dtype"].as_str().unwrap().to_string(),
                r["op"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(combos.len(), 12 * 5, "every dtype x op: {combos:?}");
    assert!(rows(&v).iter().all(|r| r["wrong"] == 0 && r["nan"] == 0));
}

/// premulsum on every reducing collective, algorithm and type, at the
/// rank counts the issue names, with scalars whose significands are short
/// and long, both signs; its rows carry the scalar, and nccl-tests' text
/// calls it `mulsum`.
#[test]
fn premulsum_is_bit_exact_on_1_2_3_5_and_8_ranks() {
    for (n, scalar, dtypes) in [
        ("1", "3", "all"),
        ("2", "-2", "all"),
        ("3", "0.1", "float,half,bfloat16,double,f8e4m3,f8e5m2"),
        ("5", "7", "all"),
        ("8", "-0.75", "float,half,bfloat16,double,f8e4m3,f8e5m2"),
    ] {
        for coll in ["all-reduce", "reduce-scatter", "reduce"] {
            let (code, v, err) = run_json(&[
                coll,
                "--device",
                "host",
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
                "--sizes",
                "8B:64K:x8",
            ]);
            assert_eq!(code, 0, "{coll} {n} ranks x{scalar}: {err}");
            assert!(!rows(&v).is_empty());
            for r in rows(&v) {
                assert_eq!((&r["wrong"], &r["nan"]), (&0.into(), &0.into()), "{r}");
                assert_eq!(r["op"], "premulsum");
                let want: f64 = scalar.parse().unwrap();
                let got = r["scalar"].as_f64().unwrap();
                // As the type holds it (0.1 rounds; unsigned types wrap).
                let unsigned = r["dtype"].as_str().unwrap().starts_with("uint");
                assert!(unsigned || (got - want).abs() <= want.abs() * 0.07, "{r}");
            }
        }
    }
    // One out-of-place in-place pair under nccl-tests' name.
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--op",
            "mulsum",
        ])
        .args([
            "--sizes",
            "1K",
            "--format",
            "nccl-tests",
            "--iters",
            "1",
            "--warmup",
            "0",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("float  mulsum"), "{text}");
}

/// A scalar is premulsum's alone: given without it, a note says so.
#[test]
fn a_scalar_without_premulsum_is_a_note() {
    let (code, _, err) = run_json(&[
        "all-reduce",
        "--device",
        "host",
        "--scalar",
        "2",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--scalar 2 is premulsum's"), "{err}");
}

/// A root is the rooted collectives' alone, an op the reductions': given to
/// a sweep without one, a note says so; with one, no note.
#[test]
fn a_root_or_op_without_a_collective_that_takes_it_is_a_note() {
    for (coll, op, noted) in [
        ("all-gather", "prod", true),
        ("send-recv", "max,min", true),
        ("reduce-scatter", "prod", false),
        ("all-gather", "sum", false),
        // `all` named as typed, not as the six operators.
        ("all-gather", "all", true),
    ] {
        let (code, _, err) = run_json(&[
            coll, "--device", "host", "--ranks", "2", "-o", op, "--sizes", "1K",
        ]);
        assert_eq!(code, 0, "{err}");
        let note = format!("--op {op} is the reductions'");
        assert_eq!(err.contains(&note), noted, "{coll} -o {op}: {err}");
    }
    for (coll, root, noted) in [
        ("all-reduce", "1", true),
        ("all-gather", "all", true),
        ("reduce", "1", false),
        ("all-reduce", "0", false),
    ] {
        let (code, _, err) = run_json(&[
            coll, "--device", "host", "--ranks", "2", "--root", root, "--sizes", "1K",
        ]);
        assert_eq!(code, 0, "{err}");
        let note = format!("--root {root} is the rooted collectives'");
        assert_eq!(err.contains(&note), noted, "{coll} --root {root}: {err}");
    }
}

/// Sizes too small for some cases are named once each, with how many
/// cases left them out (not a count of every dtype and size pair).
#[test]
fn sizes_left_out_are_named_once_each() {
    let (code, v, err) = run_json(&[
        "all-gather",
        "--device",
        "host",
        "--ranks",
        "4",
        "--sizes",
        "4:64",
        "--dtype",
        "float,double",
    ]);
    assert_eq!(code, 0, "{err}");
    // all-gather's size is the whole output: 4 floats a rank need 16 B,
    // 4 doubles 32 B. Floats lose 4 B and 8 B, doubles 4, 8 and 16 B.
    let want = "3 of 5 size(s) left out of 5 case(s): 4B, 8B, 16B (fewer than one element per rank";
    assert!(err.contains(want), "{err}");
    assert!(
        v["meta"]["notes"].to_string().contains(want),
        "{}",
        v["meta"]["notes"]
    );
    // Of several collectives, it names those the sizes were left out of
    // (all-reduce, broadcast, reduce and send-recv ran 8 B).
    let (code, _, err) = run_json(&[
        "all", "--device", "host", "--ranks", "3", "--sizes", "8B:64",
    ]);
    assert_eq!(code, 0, "{err}");
    let want = "1 of 4 size(s) left out of 5 case(s) of all-gather, reduce-scatter, all-to-all, gather, scatter: 8B";
    assert!(err.contains(want), "{err}");
}

/// `--check` with `--check-iters 0` says two things: exit 2, not a run
/// without checks.
#[test]
fn check_with_zero_checked_iterations_is_refused() {
    let (code, v, err) = run_json(&[
        "all-reduce",
        "--device",
        "host",
        "--check",
        "--check-iters",
        "0",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--check-iters 0 turns them off"), "{err}");
    assert!(v.is_null(), "nothing ran: {v}");
    // Wrong values injected where no check would find them.
    for (inject, off) in [("nan:rank=1", "--no-check"), ("corrupt:rank=1", "-c0")] {
        let (code, v, err) = run_json(&[
            "all-reduce",
            "--device",
            "host",
            "--inject",
            inject,
            off,
            "--sizes",
            "1K",
        ]);
        assert_eq!(code, 2, "{inject} {off}: {err}");
        assert!(err.contains("checks are off"), "{err}");
        assert!(v.is_null(), "nothing ran: {v}");
    }
}

#[test]
fn root_all_covers_every_root() {
    let (code, v, err) = run_json(&[
        "broadcast",
        "--device",
        "host",
        "--ranks",
        "4",
        "--root",
        "all",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 0, "{err}");
    let roots: BTreeSet<i64> = rows(&v)
        .iter()
        .map(|r| r["root"].as_i64().unwrap())
        .collect();
    assert_eq!(roots, (0..4).collect());
}

#[test]
fn table_csv_and_jsonl_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("a.json"), dir.path().join("a.csv"));
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "8B:1K:x4",
            "--iters",
            "2",
        ])
        .args([
            "--json",
            json.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    for col in [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "algo",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "out-of-place",
        "in-place",
    ] {
        assert!(table.contains(col), "table lacks {col}:\n{table}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("collective,engine,algo,dtype,op,root,bytes,count,placement,time_us"));
    assert_eq!(lines.count(), 2 * 4, "4 sizes x 2 placements");
    let jsonl = std::fs::read_to_string(dir.path().join("a.jsonl")).unwrap();
    let first: Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    assert_eq!(first["schema"], "collbench.results/1");
    // The head, a line per row, and the end line of a finished sweep.
    assert_eq!(jsonl.lines().count(), 1 + 8 + 1);
    let end: Value = serde_json::from_str(jsonl.lines().last().unwrap()).unwrap();
    assert_eq!(end, serde_json::json!({"end": {"partial": null}}));
}

#[test]
fn bad_input_exits_2_with_a_reason_and_no_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["all-reduce", "--sizes", "64M:8B"], "must not exceed"),
        (&["all-reduce", "--sizes", "8Q:1M"], "unknown unit"),
        (&["all-reduce", "--sizes", "abc"], "not a size"),
        (&["all-reduce", "--ranks", "0"], "at least 1"),
        (&["all-reduce", "--ranks", "100000"], "at most"),
        (&["all-reduce", "--dtype", "float7"], "unknown --dtype"),
        (&["all-reduce", "--op", "xor"], "unknown --op"),
        (&["all-everything"], "unrecognized subcommand"),
        (
            &["all-reduce", "--device", "tpu"],
            "[possible values: auto, host, cuda, cuda-emu]",
        ),
        (
            &["broadcast", "--ranks", "4", "--root", "4"],
            "outside the 4 ranks",
        ),
        (&["all-reduce", "--iters", "-3"], ""),
        (&["all-reduce", "--warmup", "x"], "not a non-negative"),
        (&["all-reduce", "--timeout", "soon"], "not a duration"),
        (
            &["all-reduce", "--fr-entries", "18446744073709551615"],
            "at most 1000000",
        ),
        (&["all-reduce", "--group", "-2"], "-2 is not in 2..=64"),
        (
            &["all-reduce", "--csv", "/proc/version"],
            "cannot write in /proc: its filesystem takes no new files",
        ),
        (
            &["all-reduce", "-R", "5"],
            "'5' is not 0 (no registration), 1",
        ),
        (
            &["all-gather", "--algo", "tree"],
            "not an algorithm for all-gather",
        ),
        (
            &["all-reduce", "--ranks", "8", "--sizes", "1000G"],
            "not enough memory",
        ),
        (
            &[
                "all-reduce",
                "--op",
                "premulsum",
                "--scalar",
                "0.5",
                "-d",
                "int32",
            ],
            "premulsum on int32 needs an integer --scalar (got 0.5)",
        ),
        (
            &[
                "all-reduce",
                "--op",
                "mulsum",
                "--scalar",
                "0",
                "-d",
                "float",
            ],
            "--scalar 0 is zero in float",
        ),
        (
            &[
                "all-reduce",
                "--op",
                "premulsum",
                "--scalar",
                "1e6",
                "-d",
                "half",
            ],
            "not finite in half",
        ),
        (
            &[
                "all-reduce",
                "--op",
                "premulsum",
                "--scalar",
                "8192",
                "-d",
                "half",
            ],
            "too large for premulsum on half",
        ),
        (
            &["all-reduce", "--scalar", "nan"],
            "expected a finite number",
        ),
        (
            &["all-reduce", "--scalar", "2x"],
            "expected a finite number",
        ),
    ];
    for (args, why) in cases {
        let out = collbench().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: expected '{why}' in: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The CUDA executor's knobs in the environment are input too: a bad one
/// stops any sweep before it runs, whatever the device.
#[test]
fn a_bad_cuda_knob_in_the_environment_exits_2_naming_it() {
    let cases = [
        (
            "COLLBENCH_CUDA_THREADS",
            "100",
            "a multiple of 32 from 32 to 1024",
        ),
        (
            "COLLBENCH_CUDA_THREADS",
            "all",
            "a multiple of 32 from 32 to 1024",
        ),
        ("COLLBENCH_CUDA_COPIES", "gpu", "expected kernel or driver"),
        ("COLLBENCH_BIND", "cores", "expected auto"),
        ("COLLBENCH_MPI_IN_PLACE", "Stage", "expected stage"),
    ];
    for (var, value, why) in cases {
        for device in ["host", "cuda-emu"] {
            let out = collbench()
                .args(["all-reduce", "--ranks", "2", "--sizes", "1K", "-q"])
                .args(["--device", device])
                .env(var, value)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let what = format!("{var}={value} --device {device}");
            assert_eq!(out.status.code(), Some(2), "{what}: {err}");
            assert!(err.contains(var) && err.contains(why), "{what}: {err}");
            assert!(!err.contains("panicked"), "{what}: {err}");
        }
    }
    let out = collbench()
        .args(["all-reduce", "--ranks", "2", "--sizes", "1K", "-q"])
        .env("COLLBENCH_CUDA_THREADS", "256")
        .env("COLLBENCH_CUDA_COPIES", "driver")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_gpu_means_host_engine_said_plainly() {
    let out = collbench()
        .args(["all-reduce", "--sizes", "1K", "--iters", "1", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host engine"), "{err}");
}

#[test]
fn info_json_lists_build_and_machine() {
    let out = collbench().args(["info", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    assert_eq!(v["libraries"].as_array().unwrap().len(), 3);
}

/// Settings a sweep refuses are named by `info` (text and JSON) in the
/// words of the refusal, not hidden behind a machine that looks ready.
#[test]
fn info_names_the_settings_a_sweep_would_refuse() {
    let bad = [
        (
            "COLLBENCH_BIND",
            "garbage",
            "COLLBENCH_BIND=\"garbage\": expected auto",
        ),
        (
            "COLLBENCH_GPU_MAP",
            "0,x",
            "COLLBENCH_GPU_MAP: --gpu-map '0,x'",
        ),
        (
            "COLLBENCH_FORCE_RELAY",
            "maybe",
            "COLLBENCH_FORCE_RELAY=maybe: expected 1",
        ),
        (
            "COLLBENCH_MPI_IN_PLACE",
            "maybe",
            "COLLBENCH_MPI_IN_PLACE=maybe: expected stage",
        ),
        (
            "COLLBENCH_CUDA_THREADS",
            "abc",
            "COLLBENCH_CUDA_THREADS=\"abc\": expected",
        ),
    ];
    let env = |cmd: &mut assert_cmd::Command| {
        for (k, v, _) in bad {
            cmd.env(k, v);
        }
    };
    let mut cmd = collbench();
    env(&mut cmd);
    let out = cmd.args(["info", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let said: Vec<&str> = v["bad_settings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(said.len(), bad.len(), "{said:?}");
    for (_, _, want) in bad {
        assert!(said.iter().any(|s| s.starts_with(want)), "{want}: {said:?}");
    }
    let mut cmd = collbench();
    env(&mut cmd);
    let out = cmd.arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("settings:"), "{text}");
    assert_eq!(
        text.matches("(a sweep refuses it)").count(),
        bad.len(),
        "{text}"
    );
    // And a sweep does refuse each.
    for (k, v, want) in bad {
        let out = collbench()
            .env(k, v)
            .args([
                "all-reduce",
                "--ranks",
                "2",
                "--sizes",
                "1K",
                "-n",
                "1",
                "-w",
                "0",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{k}={v}: {err}");
        assert!(err.contains(want), "{k}={v}: {err}");
    }
    // A clean environment: nothing to say.
    let out = collbench()
        .env_remove("COLLBENCH_BIND")
        .env_remove("COLLBENCH_GPU_MAP")
        .env_remove("COLLBENCH_FORCE_RELAY")
        .env_remove("COLLBENCH_MPI_IN_PLACE")
        .env_remove("COLLBENCH_CUDA_THREADS")
        .env_remove("COLLBENCH_CUDA_COPIES")
        .args(["info", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bad_settings"], serde_json::json!([]));
}

#[test]
fn eight_ranks_on_few_cores_finish() {
    let (code, v, err) = run_json(&[
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "8",
        "--algo",
        "all",
        "--sizes",
        "8B:1M:x16",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(rows(&v).iter().all(|r| r["wrong"] == 0));
}

#[test]
#[cfg(not(feature = "mpi"))]
fn a_build_without_mpi_refuses_to_run_under_a_launcher() {
    // Every device: the CUDA executor would run independent worlds as much as the host's.
    for device in ["host", "cuda", "cuda-emu", "auto"] {
        let out = collbench()
            .args(["all-reduce", "--sizes", "1K", "--device", device])
            .env("OMPI_COMM_WORLD_SIZE", "2")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--device {device}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("independent world"),
            "--device {device}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // --procs under a launcher's tasks: one or the other.
    let out = collbench()
        .args(["all-reduce", "--sizes", "1K", "--procs", "2"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
}

/// Under a real `mpirun`, the build without MPI refuses to run N worlds.
#[test]
#[cfg(not(feature = "mpi"))]
fn a_build_without_mpi_refuses_a_real_mpirun() {
    let found = std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("COLLBENCH_REQUIRE_MPI").is_err(),
            "mpirun is required but missing"
        );
        eprintln!("SKIPPED: mpirun not found");
        return;
    }
    let out = std::process::Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(assert_cmd::cargo::cargo_bin("collbench"))
        .args(["all-reduce", "--sizes", "1K", "--device", "cuda-emu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--features mpi"));
}

fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = collbench();
    c.env_remove("COLLBENCH_LOG").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn logs_say_the_decisions_only_when_asked() {
    let base = ["all-reduce", "--sizes", "8B:1K", "--iters", "1"];
    let vv = stderr_of(&[&base[..], &["-vv"]].concat(), &[]);
    for want in [
        "device chosen",
        "libcuda",
        "auto algorithm",
        "bytes=1024",
        "memory budget",
    ] {
        assert!(vv.contains(want), "-vv lacks '{want}':\n{vv}");
    }
    let v = stderr_of(&[&base[..], &["-v"]].concat(), &[]);
    assert!(v.contains("device chosen") && !v.contains("DEBUG"), "{v}");
    let quiet = stderr_of(&base, &[]);
    for never in ["INFO", "DEBUG", "device chosen", "auto algorithm"] {
        assert!(!quiet.contains(never), "no logs without -v:\n{quiet}");
    }
    let env = stderr_of(&base, &[("COLLBENCH_LOG", "collbench=debug")]);
    assert!(env.contains("auto algorithm"), "COLLBENCH_LOG: {env}");
}

/// Host rank threads get CPUs of their own where there is one for each,
/// distinct; not with `COLLBENCH_BIND=none`, nor with more ranks than CPUs.
#[test]
fn host_rank_threads_get_cpus_of_their_own() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = |ranks: usize, env: &[(&str, &str)]| {
        let r = ranks.to_string();
        let args = ["all-reduce", "--device", "host", "--ranks", &r];
        stderr_of(
            &[&args[..], &["--sizes", "1K", "--iters", "1", "-v"]].concat(),
            env,
        )
    };
    let bound = |log: &str| {
        log.lines()
            .find(|l| l.contains("rank threads bound to CPUs"))
            .map(|l| {
                let list = l.split("cpus=[").nth(1).and_then(|r| r.split(']').next());
                list.unwrap_or("")
                    .split(',')
                    .map(|c| c.trim().parse::<usize>().expect("a CPU number"))
                    .collect::<Vec<_>>()
            })
    };
    let two = run(2, &[]);
    if cpus >= 2 {
        let chosen = bound(&two).unwrap_or_else(|| panic!("not bound: {two}"));
        assert_eq!(chosen.len(), 2, "{two}");
        assert_ne!(chosen[0], chosen[1], "{two}");
    } else {
        eprintln!("SKIPPED the binding half of host_rank_threads_get_cpus_of_their_own: one CPU");
        assert!(bound(&two).is_none(), "{two}");
    }
    let none = run(2, &[("COLLBENCH_BIND", "none")]);
    assert!(bound(&none).is_none(), "{none}");
    let crowded = run(cpus + 1, &[]);
    assert!(bound(&crowded).is_none(), "{crowded}");
    assert!(
        crowded.contains("rank threads not bound: fewer CPUs than ranks"),
        "{crowded}"
    );
}

/// What a terminal shows at the end of `transcript`: ANSI sequences gone,
/// and of each line what the last carriage return left.
fn screen(transcript: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut chars = transcript.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        plain.push(c);
    }
    plain
        .split('\n')
        .map(|l| {
            let l = l.strip_suffix('\r').unwrap_or(l);
            l.rsplit('\r').next().unwrap_or("").trim_end().to_string()
        })
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn a_terminal_shows_progress_that_clears_and_a_pipe_never_does() {
    let bin = assert_cmd::cargo::cargo_bin("collbench");
    let run = format!(
        "{} all-reduce --device host --sizes 8B:1M --iters 20",
        bin.display()
    );
    let script = std::process::Command::new("script")
        .args(["-qefc", &run, "/dev/null"])
        .env_remove("COLLBENCH_LOG")
        .output();
    let Some(out) = script.ok().filter(|o| o.status.success()) else {
        if std::env::var_os("COLLBENCH_REQUIRE_PTY").is_some() {
            panic!("`script` (util-linux) is needed for the pty test");
        }
        eprintln!("skipped: no `script` (util-linux) to run collbench on a pty");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(" cases ") && text.contains("ETA"),
        "no bar on a terminal:\n{text}"
    );
    let shown = screen(&text);
    assert!(
        shown.iter().all(|l| !l.contains("ETA")),
        "the bar stays on screen:\n{shown:#?}"
    );
    let table: Vec<&String> = shown
        .iter()
        .filter(|l| !l.starts_with("collbench:"))
        .collect();
    assert!(
        table
            .last()
            .is_some_and(|l| l.starts_with("# Avg bus bandwidth")),
        "the table ends the screen whole:\n{shown:#?}"
    );
    assert!(
        shown.iter().any(|l| l.trim_start().starts_with("1048576 ")),
        "every row is whole:\n{shown:#?}"
    );
    // Piped, neither stream has the bar.
    let out = collbench()
        .env_remove("COLLBENCH_LOG")
        .args([
            "all-reduce",
            "--device",
            "host",
            "--sizes",
            "8B:64K",
            "--iters",
            "2",
        ])
        .output()
        .unwrap();
    let both = [out.stdout, out.stderr].concat();
    let both = String::from_utf8_lossy(&both);
    assert!(!both.contains("ETA") && !both.contains('\u{1b}'), "{both}");
}

#[test]
fn mistakes_get_collbench_words_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let same = d.join("x.out");
    let folder = d.to_str().unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--ranks".into(), "-1".into()],
            "'-1' is not a non-negative whole number",
        ),
        (
            vec!["--root".into(), "-2".into()],
            "--root '-2': expected a rank",
        ),
        (vec!["--timeout".into(), "99999999999s".into()], "too long"),
        (
            vec!["--no-check".into(), "-c".into(), "3".into()],
            "cannot be used with",
        ),
        (
            vec!["--inject".into(), "hang:rank=0,seq=1,seq=2".into()],
            "seq is given twice",
        ),
        (
            vec![
                "-d".into(),
                "int32".into(),
                "--inject".into(),
                "nan:rank=0".into(),
            ],
            "needs a floating-point",
        ),
        (
            vec!["--plot".into(), "/nonexistent/p.png".into()],
            "does not exist",
        ),
        (vec!["--json".into(), folder.into()], "is a folder"),
        (
            vec![
                "--json".into(),
                same.to_str().unwrap().into(),
                "--csv".into(),
                same.to_str().unwrap().into(),
            ],
            "both write",
        ),
    ];
    for (args, why) in cases {
        let out = collbench()
            .args(["all-reduce", "--sizes", "1K", "-n", "1", "--device", "host"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: expected '{why}' in: {err}");
        assert_eq!(
            err.trim().lines().filter(|l| l.contains("error")).count(),
            1,
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("host engine ("),
            "ran anyway: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(d).unwrap().count(),
        0,
        "nothing left behind"
    );
    // An output that is also an input.
    let r = d.join("r.json");
    collbench()
        .args([
            "all-reduce",
            "--sizes",
            "1K",
            "-n",
            "1",
            "-q",
            "--device",
            "host",
            "--json",
        ])
        .arg(&r)
        .assert()
        .success();
    let out = collbench()
        .arg("report")
        .arg(&r)
        .arg("--csv")
        .arg(&r)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is an input"));
    assert!(
        std::fs::read_to_string(&r)
            .unwrap()
            .contains("collbench.results/1"),
        "input kept"
    );
}

#[test]
fn an_injection_that_never_fires_is_a_warning_and_exit_1() {
    let out = collbench()
        .args([
            "all-reduce",
            "--sizes",
            "1K",
            "-n",
            "2",
            "-q",
            "--device",
            "host",
        ])
        .args(["--json", "/dev/null", "--inject", "hang:rank=1,seq=9999"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--inject hang:rank=1,seq=9999 never fired")
    );
}

#[test]
fn verbose_names_the_rank_that_arrived_last() {
    let out = collbench()
        .args([
            "all-reduce",
            "--ranks",
            "3",
            "--sizes",
            "1K:1K",
            "-n",
            "20",
            "-v",
            "--device",
            "host",
        ])
        .args([
            "--placement",
            "out",
            "--inject",
            "delay:rank=1,seq=10,ms=1500",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.contains("slowest:")).unwrap();
    assert!(row.contains("slowest: rank 1 (arrived "), "{row}");
}

#[test]
fn each_collective_s_help_shows_its_options_with_defaults() {
    let help = |c: &str| {
        String::from_utf8_lossy(&collbench().args([c, "--help"]).output().unwrap().stdout)
            .into_owned()
    };
    let ag = help("all-gather");
    assert!(!ag.contains("--root") && !ag.contains("--op <"), "{ag}");
    let b = help("broadcast");
    assert!(b.contains("--root") && !b.contains("--op <"));
    let r = help("reduce");
    assert!(r.contains("--root") && r.contains("--op <"));
    for default in [
        "[default: 8B:64M]",
        "[default: 2",
        "[default: 20]",
        "[default: 5]",
        "[default: 5m]",
        "[default: float]",
    ] {
        assert!(ag.contains(default), "no {default} in:\n{ag}");
    }
    // Hidden, still accepted (nccl-tests command lines pass them).
    collbench()
        .args([
            "all-gather",
            "-o",
            "sum",
            "-r",
            "0",
            "--sizes",
            "1K",
            "-n",
            "1",
            "-q",
            "--json",
            "/dev/null",
            "--device",
            "host",
        ])
        .assert()
        .success();
}

#[test]
fn json_dash_is_stdout_and_the_table_moves_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = collbench()
        .current_dir(dir.path())
        .args([
            "all-reduce",
            "--sizes",
            "1K:2K",
            "-n",
            "2",
            "--device",
            "host",
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON alone");
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    assert!(String::from_utf8_lossy(&out.stderr).contains("# Avg bus bandwidth"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file named '-'"
    );
}

#[test]
fn csv_dash_is_stdout_and_only_one_output_may_be() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        collbench()
            .current_dir(dir.path())
            .args([
                "all-reduce",
                "--sizes",
                "1K:2K",
                "-n",
                "2",
                "--device",
                "host",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--csv", "-"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("collective,engine,algo,"), "{text}");
    assert_eq!(lines.len(), 5, "a header and 4 rows, nothing else: {text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("# Avg bus bandwidth"));
    let out = run(&["--csv", "-", "--json", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("both write to stdout"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file named '-'"
    );
}

#[test]
fn json_to_dev_null_leaves_the_device_alone() {
    use std::os::unix::fs::FileTypeExt;
    collbench()
        .args([
            "all-reduce",
            "--sizes",
            "1K",
            "-n",
            "1",
            "-q",
            "--device",
            "host",
            "--json",
            "/dev/null",
        ])
        .assert()
        .success();
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(
        m.file_type().is_char_device(),
        "/dev/null was replaced by a file"
    );
    assert!(
        !std::path::Path::new("/dev/null.jsonl").exists(),
        "no JSONL beside a device"
    );
}

/// Outputs are written where their links lead: a link to a file replaces
/// the file and stays a link; `/dev/stdout` (or a link to it) is written
/// through the descriptor, after what a shell's `>>` file held, as `-`
/// is. A name ending in `/` and a dump folder that is an output are
/// refused before anything runs; a file name that is not UTF-8 is fine.
#[test]
fn outputs_go_where_their_links_lead() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sweep = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_collbench"));
        c.current_dir(d).args([
            "all-reduce",
            "--sizes",
            "1K",
            "-n",
            "1",
            "-w",
            "0",
            "--device",
            "host",
            "-q",
        ]);
        c
    };
    std::fs::create_dir(d.join("plots")).unwrap();
    std::os::unix::fs::symlink("plots/real.json", d.join("cur.json")).unwrap();
    // The link leads nowhere yet: still the CSV's path.
    let out = sweep()
        .args(["--json", "cur.json", "--csv", "plots/real.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("both write"), "{err}");
    let out = sweep().args(["--json", "cur.json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = std::fs::symlink_metadata(d.join("cur.json")).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "the link was replaced by a file"
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(d.join("plots/real.json")).unwrap()).unwrap();
    assert_eq!(v["schema"], "collbench.results/1");
    // Its rows beside it, where the link leads.
    assert!(d.join("plots/real.jsonl").is_file() && !d.join("cur.jsonl").exists());
    // A link to this process's stdout, which appends to a file.
    std::os::unix::fs::symlink("/proc/self/fd/1", d.join("out")).unwrap();
    let log = d.join("log.txt");
    std::fs::write(&log, "before\n").unwrap();
    let append = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let out = sweep()
        .args(["--json", "out"])
        .stdout(append)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::symlink_metadata(d.join("out"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        !d.join("out.jsonl").exists(),
        "no JSONL beside a descriptor"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let json = text
        .strip_prefix("before\n")
        .unwrap_or_else(|| panic!("{text}"));
    let v: Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["schema"], "collbench.results/1");
    // Without -q the table goes to stderr, as for `--json -`.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_collbench"))
        .args(["all-reduce", "--sizes", "1K", "-n", "1", "--device", "host"])
        .args(["--json", "/dev/stdout"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "collbench.results/1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("# Avg bus bandwidth"));
    let out = sweep()
        .args(["--json", "/dev/stdout", "--csv", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--json /dev/stdout and --csv - both write to stdout"),
        "{err}"
    );
    // Refused before the sweep.
    std::fs::write(d.join("in.json"), "{}").unwrap();
    let refused: [(&[&str], &str); 2] = [
        (&["--json", "in.json/"], "a name ending in / is a folder's"),
        (
            &["--json", "new.json", "--dump-dir", "new.json"],
            "is also --json",
        ),
    ];
    for (args, why) in refused {
        let out = sweep().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(!d.join("new.json").exists() && !d.join("in.jsonl").exists());
    }
    assert_eq!(std::fs::read_to_string(d.join("in.json")).unwrap(), "{}");
    // A file name that is not UTF-8 (was a panic).
    let name = std::ffi::OsStr::from_bytes(b"r\xff.json");
    let out = sweep().arg("--json").arg(name).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(d.join(name)).unwrap()).unwrap();
    assert!(
        v["meta"]["command"]
            .as_str()
            .unwrap()
            .contains("r\u{fffd}.json"),
        "{v}"
    );
}

/// The v-collectives on the host engine: zero wrong on 1, 2, 3, 5 and 8
/// ranks under every kind of split (a file's matrix included); sizes and
/// busbw as nccl-tests' alltoallv_perf defines them; `all` keeps nine.
#[test]
fn v_collectives_are_bit_exact_on_1_2_3_5_and_8_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = dir.path().join("m.txt");
    std::fs::write(&matrix, "# 3 ranks\n1 2 3\n0 0 1\n5, 1, 0.5\n").unwrap();
    let vector = dir.path().join("w.txt");
    std::fs::write(&vector, "4 1 0\n").unwrap();
    for n in ["1", "2", "3", "5", "8"] {
        let mut splits = vec![
            "uniform".to_string(),
            "skew:7".into(),
            format!("hot:{}", n.parse::<usize>().unwrap() - 1),
        ];
        if n == "3" {
            splits.push(vector.to_str().unwrap().into());
        }
        for split in &splits {
            for coll in ["all-to-all-v", "all-gather-v", "reduce-scatter-v"] {
                let what = format!("{coll} {n} ranks {split}");
                let (code, v, err) = run_json(&[
                    coll,
                    "--device",
                    "host",
                    "--ranks",
                    n,
                    "--sizes",
                    "8B:128K:x8",
                    "--split",
                    split,
                    "--dtype",
                    "float,int8",
                    "--op",
                    "sum,max",
                ]);
                assert_eq!(code, 0, "{what}: {err}");
                assert!(rows(&v).len() >= 8, "{what}");
                for r in rows(&v) {
                    assert_eq!(r["wrong"], 0, "{what}: {r}");
                    assert_eq!(r["collective"], coll);
                    assert_eq!(r["split"].as_str(), Some(split.as_str()), "{what}");
                }
            }
        }
    }
    let m = matrix.to_str().unwrap();
    let (code, v, err) = run_json(&[
        "all-to-all-v",
        "--device",
        "host",
        "--ranks",
        "3",
        "--sizes",
        "1M",
        "--split",
        m,
    ]);
    assert_eq!(code, 0, "{err}");
    for r in rows(&v) {
        assert_eq!(r["wrong"], 0, "{r}");
        // Each rank's send buffer is the size; busbw is (n-1)/n of algbw.
        assert_eq!(r["bytes"], 1 << 20);
        assert_eq!(r["count"], (1 << 20) / 4 / 3);
        let (alg, bus) = (
            r["algbw_gbps"].as_f64().unwrap(),
            r["busbw_gbps"].as_f64().unwrap(),
        );
        assert!((bus - alg * 2.0 / 3.0).abs() <= 1e-9 * alg.max(1.0), "{r}");
    }
    // `all` runs the nine even collectives only.
    let (code, v, err) = run_json(&["all", "--device", "host", "--ranks", "2", "--sizes", "1K"]);
    assert_eq!(code, 0, "{err}");
    let colls: BTreeSet<&str> = rows(&v)
        .iter()
        .map(|r| r["collective"].as_str().unwrap())
        .collect();
    assert_eq!(colls.len(), 9, "{colls:?}");
    assert!(!colls.iter().any(|c| c.ends_with("-v")));
}

#[test]
fn a_bad_split_exits_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "1 2 3\n").unwrap();
    let matrix = dir.path().join("m.txt");
    std::fs::write(&matrix, "1 2\n3 4\n").unwrap();
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "1 two\n").unwrap();
    for (args, want) in [
        (
            vec!["all-to-all-v", "--ranks", "4", "--split", "hot:4"],
            "outside the 4 ranks",
        ),
        (
            vec!["all-gather-v", "--ranks", "4", "--split", "skew:x"],
            "whole number",
        ),
        (
            vec!["all-gather-v", "--ranks", "4", "--split", "no-such-file"],
            "not a readable file",
        ),
        (
            vec![
                "all-gather-v",
                "--ranks",
                "4",
                "--split",
                short.to_str().unwrap(),
            ],
            "3 weights per row for 4 ranks",
        ),
        (
            vec![
                "reduce-scatter-v",
                "--ranks",
                "2",
                "--split",
                matrix.to_str().unwrap(),
            ],
            "matrix",
        ),
        (
            vec![
                "all-to-all-v",
                "--ranks",
                "2",
                "--split",
                junk.to_str().unwrap(),
            ],
            "not a number",
        ),
    ] {
        let out = collbench()
            .args(&args)
            .args(["--device", "host"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A split where no v-collective runs is a note, not an error.
    let out = collbench()
        .args([
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "1K",
            "--split",
            "skew",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--split skew:1 is the v-collectives'"));
}

/// The hidden flag nccl-tests' names add, typed by hand after an alias of
/// a subcommand, another word or nothing: a run or a usage error, never a
/// panic.
#[test]
fn the_nccl_tests_flag_typed_by_hand_is_no_panic() {
    for args in [
        &[
            "allreduce",
            "--as-nccl-tests",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "1",
            "-w",
            "0",
        ][..],
        &["help", "--as-nccl-tests"][..],
        &["no-such-command", "--as-nccl-tests"][..],
        &["--as-nccl-tests"][..],
    ] {
        let out = collbench().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 2)),
            "{args:?}: {:?}: {err}",
            out.status
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Input that would exhaust memory or block is refused (exit 2) before
/// anything runs: iteration counts whose times could not be kept, a
/// `--split` file that never ends, a FIFO nobody writes to; and a sweep
/// refused before it runs leaves the files it would write as they were.
#[test]
fn runaway_input_is_refused_and_a_refused_sweep_keeps_the_users_files() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = ["all-reduce", "--device", "host", "--ranks", "2", "-q"];
    for extra in [
        &["--sizes", "1K", "--iters", "99999999999"][..],
        &["--sizes", "1K", "--warmup", "99999999999"],
        &["--sizes", "1K", "-n", "4000000", "-m", "4"],
    ] {
        let (code, err) = code_and_err(&[&sweep[..], extra].concat());
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains("at most 10000000"), "{extra:?}: {err}");
    }
    let (code, err) = code_and_err(&[
        "all-gather-v",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "1K",
        "-q",
        "--split",
        "/dev/zero",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("over the limit of"), "{err}");
    // A FIFO named directly, with no writer: an empty file, at once.
    let fifo = dir.path().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for cmd in ["analyze", "report"] {
        let t = std::time::Instant::now();
        let (code, err) = code_and_err(&[cmd, fifo.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "{cmd} blocked"
        );
    }
    // Nothing to run: refused, and the user's files are untouched (the
    // JSONL an earlier run's, which a sweep may replace; another file
    // there is refused before anything else).
    let keep = |name: &str| dir.path().join(name);
    let kept = |name: &str| match name {
        "keep.jsonl" => "{\"schema\":\"collbench.results/1\",\"meta\":{}}\n",
        _ => "KEEP",
    };
    for name in ["keep.json", "keep.jsonl", "keep.csv"] {
        std::fs::write(keep(name), kept(name)).unwrap();
    }
    let (code, err) = code_and_err(
        &[
            &sweep[..],
            &[
                "--sizes",
                "1b",
                "--json",
                keep("keep.json").to_str().unwrap(),
            ],
            &["--csv", keep("keep.csv").to_str().unwrap()],
            &["--plot", keep("keep.png").to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("nothing to run: every size of the sweep (1 B) is smaller"),
        "{err}"
    );
    for name in ["keep.json", "keep.jsonl", "keep.csv"] {
        assert_eq!(
            std::fs::read_to_string(keep(name)).unwrap(),
            kept(name),
            "{name}"
        );
    }
    assert!(!keep("keep.png").exists());
}

/// Of `--check` and `--no-check` the last given wins: a script's flags can
/// be overridden by flags after them.
#[test]
fn the_last_of_check_and_no_check_wins() {
    for (flags, checked) in [
        (["--check", "--no-check"], false),
        (["--no-check", "--check"], true),
    ] {
        let mut args = vec!["all-reduce", "--ranks", "2", "--sizes", "64"];
        args.extend(flags);
        let (code, v, err) = run_json(&args);
        assert_eq!(code, 0, "{flags:?}: {err}");
        for r in rows(&v) {
            let want = if checked { 0 } else { -1 };
            assert_eq!(r["wrong"], want, "{flags:?}: {r}");
        }
    }
}

/// `info` keeps each fact on its line: a cache folder named with a newline
/// is shown escaped, and nothing is made.
#[test]
fn info_shows_a_path_with_a_newline_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let odd = format!("{}/x\ny", dir.path().display());
    let out = collbench()
        .arg("info")
        .env("COLLBENCH_CACHE_DIR", &odd)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let kernels = text
        .lines()
        .find(|l| l.starts_with("kernels:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(kernels.ends_with("/x\\ny"), "{kernels}");
    assert!(!text.lines().any(|l| l.starts_with('y')), "{text}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "info made nothing"
    );
}

/// Slow rules that stack on one link multiply up to 1000x, no more (eight
/// of 1000x made a wait no `Duration` holds: a rank thread panicked), and
/// the cap is said.
#[test]
fn stacked_slow_injections_are_capped_not_a_panic() {
    let mut c = collbench();
    c.args([
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "64",
    ])
    .args([
        "-n",
        "1",
        "-w",
        "0",
        "--placement",
        "out",
        "-q",
        "-T",
        "20s",
    ]);
    for _ in 0..8 {
        c.args(["--inject", "slow:rank=0,factor=1000"]);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("multiply past 1000x: that link is slowed 1000x, no more"),
        "{err}"
    );
}

/// A NaN or corruption where no check can see it (a non-root rank's input
/// of broadcast and scatter, its output of reduce and gather) does not
/// count as fired: the run says so and exits 1 rather than passing; on
/// the root it is found.
#[test]
fn injections_no_check_can_see_are_said_not_passed() {
    for (coll, inject, unseen) in [
        ("reduce", "corrupt:rank=1", true),
        ("gather", "corrupt:rank=1", true),
        ("broadcast", "nan:rank=1", true),
        ("scatter", "nan:rank=1", true),
        ("reduce", "corrupt:rank=0", false),
        ("broadcast", "nan:rank=0", false),
    ] {
        let out = collbench()
            .args([coll, "--device", "host", "--ranks", "2", "--sizes", "64"])
            .args(["-n", "2", "-w", "0", "--placement", "out", "-q"])
            .args(["--inject", inject])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{coll} {inject}: {err}");
        assert_eq!(
            err.contains("never fired") && err.contains("a check that sees it"),
            unseen,
            "{coll} {inject}: {err}"
        );
        assert_eq!(
            err.contains("had wrong or NaN/Inf values"),
            !unseen,
            "{coll} {inject}: {err}"
        );
    }
}

/// An output that cannot be written (a full disk under the CSV) fails the
/// run (exit 2) without costing the other outputs their rows: the JSON
/// holds what was measured and says the run failed, and `report` says so.
#[test]
fn a_failed_output_keeps_the_others_and_says_the_run_failed() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("full.csv");
    std::os::unix::fs::symlink("/dev/full", &csv).unwrap();
    let json = dir.path().join("good.json");
    let out = collbench()
        .args(["all-reduce", "--ranks", "2", "--sizes", "8B:1K", "-n", "2"])
        .args(["-w", "0", "-q", "--device", "host", "--csv"])
        .arg(&csv)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let v = common::read_json(&json);
    let made = rows(&v).len();
    assert!(made >= 1, "{v}");
    assert_eq!(v["meta"]["partial"]["reason"], "error", "{}", v["meta"]);
    // 8 B to 1 KiB: 8 sizes, out of place and in place.
    assert_eq!(
        v["meta"]["partial"]["missing_rows"],
        16 - made,
        "{}",
        v["meta"]
    );
    let out = collbench().arg("report").arg(&json).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(run failed: an error stopped it, "),
        "{text}"
    );
    // A JSON that cannot be written is named, as the CSV is.
    let full_json = dir.path().join("full.json");
    std::os::unix::fs::symlink("/dev/full", &full_json).unwrap();
    let out = collbench()
        .args(["all-reduce", "--ranks", "2", "--sizes", "8B", "-n", "1"])
        .args(["-w", "0", "-q", "--device", "host", "--json"])
        .arg(&full_json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "--json {}: No space left on device",
            full_json.display()
        )),
        "{err}"
    );
    // A plot that cannot be written says why in words, PNG or SVG.
    for ext in ["png", "svg"] {
        let plot = dir.path().join(format!("full.{ext}"));
        std::os::unix::fs::symlink("/dev/full", &plot).unwrap();
        let out = collbench()
            .args(["report", "-q"])
            .arg(&json)
            .arg("--plot")
            .arg(&plot)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "--plot {}: No space left on device",
                plot.display()
            )),
            "{err}"
        );
    }
}

/// `--channels` past what an algorithm can run (the tree all-reduce runs
/// four blocks a channel, 128 at most) is refused before anything runs,
/// naming the most that fits, with no results file made; it failed at the
/// first tree case, half the sweep done ("132 channels; at most 128").
#[test]
fn channels_past_an_algorithms_blocks_are_refused_before_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = collbench()
        .args(["all", "--ranks", "2", "--sizes", "8B:1K", "--algo", "all"])
        .args(["--channels", "33", "-q", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--channels 33: all-reduce by tree runs 4 blocks a channel, 132 in all, past the 128 a rank's program may have: give --channels 32 or fewer"
        ),
        "{err}"
    );
    assert!(!json.exists());
    let out = collbench()
        .args(["all", "--ranks", "2", "--sizes", "8B:1K", "--algo", "all"])
        .args(["--channels", "32", "-q"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// collbench's exit code and stderr for `args`.
fn code_and_err(args: &[&str]) -> (Option<i32>, String) {
    let out = collbench().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A FIFO output whose reader waits before the run gets the whole output:
/// the check that it is read keeps its descriptor for the write (closing
/// it would end the reader's data before any came).
#[test]
fn a_fifo_with_its_reader_waiting_gets_the_whole_output() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("r.json");
    let (code, err) = code_and_err(&[
        "all-reduce",
        "--device",
        "host",
        "--ranks",
        "2",
        "--sizes",
        "8B:1K:x8",
        "--iters",
        "2",
        "--warmup",
        "0",
        "-q",
        "--json",
        results.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    for (i, args) in [
        vec!["report", results.to_str().unwrap(), "-q", "--csv"],
        vec![
            "all-reduce",
            "--device",
            "host",
            "--ranks",
            "2",
            "--sizes",
            "8B:1K:x8",
            "-q",
            "--json",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let fifo = dir.path().join(format!("pipe{i}"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // The reader opens first (its open waits for a writer), as `cat
        // pipe > got &` before the run.
        let f2 = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read_to_string(f2).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (code, err) = code_and_err(&[&args[..], &[fifo.to_str().unwrap()]].concat());
        assert_eq!(code, Some(0), "{args:?}: {err}");
        let got = reader.join().unwrap();
        let whole = if i == 0 {
            got.lines().count() == 1 + 2 * 3 && got.starts_with("collective,")
        } else {
            serde_json::from_str::<serde_json::Value>(&got)
                .is_ok_and(|v| v["rows"].as_array().is_some_and(|r| r.len() == 6))
        };
        assert!(whole, "{args:?}: {got}");
    }
}
