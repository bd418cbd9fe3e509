//! `collbench info --compile-kernels`: every kernel variant through NVRTC,
//! as CI runs it. Without NVRTC the compile tests say what is missing and
//! skip, unless `COLLBENCH_REQUIRE_NVRTC=1` (CI), where they fail.

use serde_json::Value;
use std::path::Path;

mod common;
use common::collbench;

/// Runs collbench with a kernel cache in `cache`; (exit code, stdout, stderr).
fn run(cache: &Path, args: &[&str]) -> (i32, String, String) {
    let out = collbench()
        .env("COLLBENCH_CACHE_DIR", cache)
        .args(args)
        .output()
        .expect("collbench runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// NVRTC's version when collbench can load it; otherwise `None` after
/// saying why (or a failure under `COLLBENCH_REQUIRE_NVRTC=1`).
fn nvrtc_version() -> Option<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, out, err) = run(dir.path(), &["info", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    if let Some(ver) = v["nvrtc"]["version"].as_str() {
        return Some(ver.to_string());
    }
    let why = v["nvrtc"]["error"].as_str().unwrap_or("NVRTC not found");
    if std::env::var("COLLBENCH_REQUIRE_NVRTC").is_ok_and(|r| r == "1") {
        panic!("COLLBENCH_REQUIRE_NVRTC=1, but {why}");
    }
    eprintln!(
        "skipped: NVRTC (libnvrtc.so.13/.12/.so) is not loadable here: {why}\n\
         (set LD_LIBRARY_PATH to an NVRTC lib folder, as scripts/ci.sh does)"
    );
    None
}

fn assert_all_compiled(v: &Value, arch: &str, nvrtc: &str) {
    let k = &v["kernels"];
    assert_eq!(k["failed"], Value::Array(vec![]), "{k:#}");
    assert_eq!(k["compiled"], 72, "{k:#}");
    assert_eq!(k["arch"], arch, "{k:#}");
    assert_eq!(k["nvrtc"], nvrtc, "{k:#}");
    assert!(k["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{k:#}");
    // The rest of `info --json` is still there.
    assert!(v["machine"]["cores"].as_u64().is_some(), "{v:#}");
    assert_eq!(v["nvrtc"]["version"], nvrtc);
}

#[test]
fn every_variant_compiles_for_sm_90_and_sm_80_and_is_cached() {
    let Some(ver) = nvrtc_version() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("kernels");

    let (code, out, err) = run(
        &cache,
        &["info", "--compile-kernels", "--arch", "sm_90", "--json"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let v = json(&out);
    assert_all_compiled(&v, "sm_90", &ver);
    assert_eq!(v["kernels"]["cached"], 0);
    assert_eq!(v["kernel_cache"]["dir"], cache.display().to_string());
    assert_eq!(
        std::fs::read_dir(&cache).expect("cache written").count(),
        72
    );

    // No --arch and no GPU: sm_90 with a note, all from the cache.
    let (code, out, err) = run(&cache, &["info", "--compile-kernels", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_all_compiled(&v, "sm_90", &ver);
    assert_eq!(v["kernels"]["cached"], 72);
    assert!(
        v["kernels"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("sm_90")),
        "{v:#}"
    );
    assert!(err.contains("note: no usable GPU"), "{err}");

    let (code, out, err) = run(
        &cache,
        &["info", "--compile-kernels", "--arch", "sm_80", "--json"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let v = json(&out);
    assert_all_compiled(&v, "sm_80", &ver);
    assert_eq!(v["kernels"]["cached"], 0);

    // The table says the same in words.
    let (code, out, err) = run(&cache, &["info", "--compile-kernels", "--arch", "80"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "72 of 72 variants compiled for sm_80 (ptx) with NVRTC {ver} (72 from the cache)"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("cache in {}", cache.display())),
        "{out}"
    );
}

#[test]
fn plain_info_shows_nvrtc_and_the_kernel_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, out, err) = run(dir.path(), &["info"]);
    assert_eq!(code, 0, "{err}");
    let cache_line = format!("cache in {}", dir.path().display());
    assert!(
        out.lines()
            .any(|l| l.starts_with("kernels:") && l.ends_with(&cache_line)),
        "{out}"
    );
    if let Some(ver) = nvrtc_version() {
        assert!(out.contains(&format!("(NVRTC {ver})")), "{out}");
    }
    let (code, out, _) = run(dir.path(), &["info", "--json"]);
    assert_eq!(code, 0);
    assert!(
        json(&out).get("kernels").is_none(),
        "no compile without --compile-kernels"
    );
}

#[test]
fn a_bad_arch_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    for bad in ["junk", "sm_9", "sm_30", ""] {
        let (code, out, err) = run(dir.path(), &["info", "--compile-kernels", "--arch", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(out.is_empty(), "{out}");
        assert!(
            err.contains("--arch") && err.contains("sm_90"),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // Architectures the kernels cannot compile for (they need Volta's
    // __nanosleep and __grid_constant__) are refused up front, not
    // compiled into 72 failures (exit 1).
    for old in ["sm_50", "sm_60", "6.1"] {
        let (code, out, err) = run(dir.path(), &["info", "--compile-kernels", "--arch", old]);
        assert_eq!(code, 2, "{old}: {err}");
        assert!(out.is_empty(), "{out}");
        assert!(
            err.contains("need compute capability 7.0 (sm_70, Volta) or newer"),
            "{old}: {err}"
        );
    }
}

#[test]
fn an_arch_nvrtc_cannot_target_is_a_usage_error() {
    if nvrtc_version().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, out, err) = run(
        dir.path(),
        &["info", "--compile-kernels", "--arch", "sm_990"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("sm_990") && err.contains("supports") && err.contains("sm_90"),
        "{err}"
    );
}

#[test]
fn arch_needs_compile_kernels() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, _, err) = run(dir.path(), &["info", "--arch", "sm_90"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--compile-kernels"), "{err}");
}

#[test]
fn without_nvrtc_compile_kernels_exits_2_and_says_what_to_install() {
    let dir = tempfile::tempdir().expect("temp dir");
    let no_path = |args: &[&str]| {
        let out = collbench()
            .env("COLLBENCH_CACHE_DIR", dir.path())
            .env("LD_LIBRARY_PATH", "")
            .args(args)
            .output()
            .expect("collbench runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = no_path(&["info", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    if v["nvrtc"]["version"].is_string() {
        eprintln!("skipped: NVRTC is in the system library paths, so it cannot be made missing");
        return;
    }
    assert!(
        v["nvrtc"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("libnvrtc.so.12")),
        "{v:#}"
    );
    for args in [
        &["info", "--compile-kernels"][..],
        &["info", "--compile-kernels", "--arch", "sm_80", "--json"][..],
    ] {
        let (code, out, err) = no_path(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        for want in [
            "libnvrtc.so.13",
            "libnvrtc.so.12",
            "libnvrtc.so",
            "LD_LIBRARY_PATH",
            "nvidia-cuda-nvrtc-cu12",
        ] {
            assert!(err.contains(want), "{args:?}: no {want:?} in {err}");
        }
    }
}
