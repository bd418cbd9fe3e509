//! Shared by the kernel emulation tests: finding the host C++ compiler, and
//! building `kernels/` (the very source NVRTC compiles) and the emulated
//! device's runtime with one of the drivers in this folder for one (dtype, op).

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use collbench::engine::exec::cuda::kernels;
use collbench::engine::{Dtype, ReduceOp};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C++ compiler (`$CXX`, else `c++`), or `None` after saying why the
/// test is skipped; with `COLLBENCH_REQUIRE_CXX=1` its absence fails instead.
pub fn compiler(test: &str) -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let found = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(cxx);
    }
    let msg = format!("SKIPPED {test}: no C++ compiler `{cxx}` found (set CXX)");
    assert!(
        std::env::var("COLLBENCH_REQUIRE_CXX").as_deref() != Ok("1"),
        "{msg}, and COLLBENCH_REQUIRE_CXX=1"
    );
    eprintln!("{msg}");
    None
}

/// Compiles the kernels, the emulated device's runtime (`kernels/emu.cpp`)
/// and `tests/emu/<driver>` for (`dtype`, `op`) into `dir`.
pub fn build(
    cxx: &str,
    dir: &Path,
    driver: &str,
    dtype: Dtype,
    op: ReduceOp,
) -> Result<PathBuf, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/emu")
        .join(driver);
    let mut text = kernels::source().to_string();
    text.push('\n');
    text += include_str!("../../kernels/emu.cpp");
    text.push('\n');
    text += &std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let stem = driver.trim_end_matches(".cpp");
    let name = format!("{stem}_{}_{}", dtype as u32, op as u32);
    let src = dir.join(format!("{name}.cpp"));
    let exe = dir.join(name);
    std::fs::write(&src, text).map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new(cxx)
        .args([
            "-std=c++17",
            "-O1",
            "-pthread",
            "-Wall",
            "-Wno-unused-function",
        ])
        .arg(format!("-DCB_DT={}", dtype as u32))
        .arg(format!("-DCB_OP={}", op as u32))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .map_err(|e| format!("{cxx}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{dtype} {op}: compiling {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}
