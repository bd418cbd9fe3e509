//! The CUDA kernels under AddressSanitizer and UndefinedBehaviorSanitizer,
//! on the emulated device: what compute-sanitizer's memcheck is on a GPU.
//! The emulated device's memory is the host's heap (an allocation each, with
//! ASan's red zones around it; the part of a rank's buffers past the loaded
//! operation's data is made out of bounds too), and its kernels are built by
//! `$CXX`, so `CXX="c++ -fsanitize=address,undefined"` with ASan's runtime
//! preloaded stops a sweep at the first kernel access past an operation's
//! data, and at the first undefined arithmetic, shift or misaligned access,
//! naming the kernel.
//!
//! Needs a C++ compiler that builds with `-fsanitize=address,undefined` and
//! its ASan runtime (`libasan.so`, as `-print-file-name` finds it: g++);
//! without them the tests say SKIPPED, unless `COLLBENCH_REQUIRE_ASAN=1`
//! (CI) makes that a failure.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
mod emu;
use common::rows;

/// The sanitizers' options for the emulated kernels' builds.
const SANITIZE: &str =
    "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer";

/// A compiler that sanitizes, and the ASan runtime to preload.
struct Asan {
    cxx: String,
    runtime: PathBuf,
}

/// The compiler and ASan's runtime, or `None` after saying why the test is
/// skipped (a failure under `COLLBENCH_REQUIRE_ASAN=1`).
fn asan(test: &str) -> Option<Asan> {
    let skip = |why: String| {
        let msg = format!("SKIPPED {test}: {why}");
        assert!(
            std::env::var("COLLBENCH_REQUIRE_ASAN").as_deref() != Ok("1"),
            "{msg}, and COLLBENCH_REQUIRE_ASAN=1"
        );
        eprintln!("{msg}");
        None
    };
    let Some(cxx) = emu::compiler(test) else {
        return skip("no C++ compiler".into());
    };
    // $CXX may be a command line, as the emulated device reads it.
    let mut words = cxx.split_whitespace();
    let found = Command::new(words.next().unwrap_or("c++"))
        .args(words)
        .arg("-print-file-name=libasan.so")
        .output()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match found {
        Ok(p) if p.is_absolute() && p.is_file() => Some(Asan { cxx, runtime: p }),
        Ok(p) => skip(format!(
            "`{cxx} -print-file-name=libasan.so` finds no ASan runtime ({})",
            p.display()
        )),
        Err(e) => skip(format!("`{cxx}`: {e}")),
    }
}

/// Runs a sweep on the emulated device with kernels built by
/// `$CXX {SANITIZE} {extra}` into the cache `cache`; (exit code, results,
/// stderr).
fn run(
    a: &Asan,
    cache: &Path,
    extra: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = common::collbench()
        .env("COLLBENCH_CACHE_DIR", cache)
        .env("CXX", format!("{} {SANITIZE} {extra}", a.cxx))
        .env("LD_PRELOAD", &a.runtime)
        // The Rust side is not instrumented: its allocations are not leaks
        // ASan could judge (the process exits with some alive by design).
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .env("UBSAN_OPTIONS", "print_stacktrace=1")
        .envs(env.iter().copied())
        .args(args)
        .args(["--device", "cuda-emu", "-q", "-n", "2", "-w", "1"])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let v =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
    (
        out.status.code(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A sweep with sanitized kernels that must run clean: exit 0, no
/// sanitizer report, every row checked and right; its results.
fn sweep(a: &Asan, cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let (code, v, err) = run(a, cache, "", args, env);
    assert!(
        !err.contains("AddressSanitizer") && !err.contains("runtime error:"),
        "{args:?}: a sanitizer report:\n{err}"
    );
    assert_eq!(code, Some(0), "{args:?}: {err}");
    assert!(!rows(&v).is_empty(), "{args:?}: no rows");
    for r in rows(&v) {
        assert_eq!(
            (r["wrong"].as_u64(), r["nan"].as_u64()),
            (Some(0), Some(0)),
            "{args:?}: {r}"
        );
    }
    v
}

/// How many kernel libraries `dir` holds, each checked to carry both
/// sanitizers' checks (their runtime entry points among its symbols).
fn instrumented(dir: &Path) -> usize {
    let libs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
    for lib in &libs {
        let bytes = std::fs::read(lib).unwrap();
        for mark in ["__asan_report", "__ubsan_handle"] {
            assert!(
                bytes.windows(mark.len()).any(|w| w == mark.as_bytes()),
                "{}: built without {mark}*",
                lib.display()
            );
        }
    }
    libs.len()
}

/// Every collective and algorithm on 3 ranks, across GPUs (host-mapped
/// connections) and on one GPU with each protocol, in blocks of 1 thread
/// and of 8 (LL128's group; wider blocks run many times slower under the
/// sanitizers and index as 8 do); every type, and every operator on two
/// types (the finishing steps of avg and premulsum); the v-collectives'
/// uneven blocks; a group of operations in one launch.
#[test]
fn kernels_touch_only_their_buffers_and_do_nothing_undefined() {
    let Some(a) = asan("kernels_touch_only_their_buffers_and_do_nothing_undefined") else {
        return;
    };
    // A cache of this run's own: every library checked below was built now.
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    let all = ["all", "--ranks", "3", "--algo", "all", "--sizes", "8B:64K"];
    let v = sweep(&a, cache, &all, &[]);
    assert_eq!(v["meta"]["device"], "cuda-emu");
    let one_gpu = [("COLLBENCH_EMU_GPUS", "1")];
    for proto in ["simple", "ll"] {
        sweep(
            &a,
            cache,
            &[&all[..], &["--protocol", proto]].concat(),
            &one_gpu,
        );
    }
    let wide = [("COLLBENCH_EMU_GPUS", "1"), ("COLLBENCH_EMU_THREADS", "8")];
    for proto in ["simple", "ll128"] {
        let args = [
            "all",
            "--ranks",
            "3",
            "--algo",
            "all",
            "--sizes",
            "8B:64K:x8",
            "--protocol",
            proto,
        ];
        sweep(&a, cache, &args, &wide);
    }
    let v = sweep(
        &a,
        cache,
        &[
            "all-reduce",
            "--ranks",
            "3",
            "--dtype",
            "all",
            "--op",
            "sum",
            "--sizes",
            "8B:4K",
        ],
        &one_gpu,
    );
    assert_eq!(rows(&v).len(), 12 * 10 * 2, "every type");
    for dtype in ["half", "int32"] {
        sweep(
            &a,
            cache,
            &[
                "reduce-scatter",
                "--ranks",
                "3",
                "--dtype",
                dtype,
                "--op",
                "all",
                "--sizes",
                "1K:16K",
            ],
            &one_gpu,
        );
    }
    for (coll, split) in [
        ("all-to-all-v", "skew:3"),
        ("reduce-scatter-v", "hot:1"),
        ("all-gather-v", "skew"),
    ] {
        sweep(
            &a,
            cache,
            &[
                coll, "--ranks", "4", "--split", split, "--algo", "all", "--sizes", "8B:64K",
            ],
            &one_gpu,
        );
    }
    sweep(
        &a,
        cache,
        &["all", "--ranks", "3", "--group", "3", "--sizes", "1K:16K"],
        &one_gpu,
    );
    let libs = instrumented(&cache.join("emu"));
    assert!(libs >= 12, "{libs} kernel libraries");
}

/// The check of the check, through collbench itself: the kernels built
/// with a fault planted (`CB_TEST_OVERREAD`: one element read past a
/// range, which changes no value, so every row is right) stop the sweep
/// with ASan's report naming the collective kernel. The sweep's first
/// size is caught inside buffers sized for its second (the part past the
/// operation's data made out of bounds); the second, a multiple of 16
/// elements, never takes the planted path.
#[test]
fn a_kernel_reading_past_its_data_is_caught() {
    let Some(a) = asan("a_kernel_reading_past_its_data_is_caught") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "all",
        "--ranks",
        "3",
        "--algo",
        "all",
        "--sizes",
        "1000B:64K:+64536",
    ];
    let (code, _, err) = run(&a, cache.path(), "", &args, &[]);
    assert_eq!(code, Some(0), "without the fault: {err}");
    let (code, _, err) = run(&a, cache.path(), "-DCB_TEST_OVERREAD", &args, &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("AddressSanitizer"), "{err}");
    assert!(err.contains("cb_collective"), "{err}");
}

/// Kernels built with ASan but its runtime not preloaded would end the
/// process as their library loads (exit 1, as a failed check): refused
/// first, exit 2, with the variable to set.
#[test]
fn a_sanitizer_without_its_runtime_is_refused_with_the_fix() {
    let Some(cxx) = emu::compiler("a_sanitizer_without_its_runtime_is_refused_with_the_fix") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = common::collbench()
        .env("COLLBENCH_CACHE_DIR", dir.path())
        .env("CXX", format!("{cxx} -fsanitize=address"))
        .env_remove("LD_PRELOAD")
        .args([
            "all-reduce",
            "--device",
            "cuda-emu",
            "--ranks",
            "2",
            "--sizes",
            "8B",
            "-q",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("with the address sanitizer"), "{err}");
    assert!(
        err.contains("LD_PRELOAD=$(g++ -print-file-name=libasan.so)"),
        "{err}"
    );
}
