//! The CUDA kernels under AddressSanitizer and UndefinedBehaviorSanitizer,
//! on the emulated device: what compute-sanitizer's memcheck is on a GPU.
//! The emulated device's memory is the host's heap (an allocation each, with
//! ASan's red zones around it), and its kernels are built by `$CXX`, so
//! `CXX="c++ -fsanitize=address,undefined"` with ASan's runtime preloaded
//! stops a sweep at the first kernel access outside a buffer, and at the
//! first undefined arithmetic, shift or misaligned access, naming the kernel.
//!
//! Needs a C++ compiler that builds with `-fsanitize=address,undefined` and
//! its ASan runtime (`libasan.so`, as `-print-file-name` finds it); without
//! them the tests say SKIPPED, unless `COLLBENCH_REQUIRE_ASAN=1` (CI) makes
//! that a failure.

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
    let found = Command::new(&cxx)
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

/// One kernel-library cache for the sanitized builds (their key holds the
/// compiler line, so they never mix with the plain ones).
fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-emu-asan-cache")
}

/// A sweep on the emulated device with sanitized kernels; its results,
/// after checking it ran clean: exit 0, no sanitizer report, every row
/// checked and right.
fn sweep(a: &Asan, args: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = common::collbench()
        .env("COLLBENCH_CACHE_DIR", cache_dir())
        .env("CXX", format!("{} {SANITIZE}", a.cxx))
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("AddressSanitizer") && !err.contains("runtime error:"),
        "{args:?}: a sanitizer report:\n{err}"
    );
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
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

/// Whether every kernel library in `dir` carries both sanitizers' checks
/// (their runtime entry points among its symbols).
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
    let all = ["all", "--ranks", "3", "--algo", "all", "--sizes", "8B:64K"];
    let v = sweep(&a, &all, &[]);
    assert_eq!(v["meta"]["device"], "cuda-emu");
    let one_gpu = [("COLLBENCH_EMU_GPUS", "1")];
    for proto in ["simple", "ll"] {
        sweep(&a, &[&all[..], &["--protocol", proto]].concat(), &one_gpu);
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
        sweep(&a, &args, &wide);
    }
    let v = sweep(
        &a,
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
            &[
                coll, "--ranks", "4", "--split", split, "--algo", "all", "--sizes", "8B:64K",
            ],
            &one_gpu,
        );
    }
    sweep(
        &a,
        &["all", "--ranks", "3", "--group", "3", "--sizes", "1K:16K"],
        &one_gpu,
    );
    let libs = instrumented(&cache_dir().join("emu"));
    assert!(libs >= 12, "{libs} kernel libraries");
}

/// The positive control: a kernel told to write one element past its
/// buffer, run through the emulated device's runtime with the same
/// sanitizers, is stopped and named.
#[test]
fn a_kernel_writing_past_its_buffer_is_caught() {
    let Some(a) = asan("a_kernel_writing_past_its_buffer_is_caught") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flags: Vec<&str> = SANITIZE.split(' ').collect();
    let exe = emu::build(
        &a.cxx,
        &flags,
        dir.path(),
        "oob_driver.cpp",
        collbench::engine::Dtype::F32,
        collbench::engine::ReduceOp::Sum,
    )
    .unwrap();
    let out = Command::new(&exe)
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "{}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("heap-buffer-overflow"), "{err}");
    assert!(err.contains("cb_poison"), "{err}");
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
    assert!(err.contains("-print-file-name=libasan.so)"), "{err}");
}
