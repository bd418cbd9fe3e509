//! The emulated device's kernel libraries: `kernels::source()` plus
//! `kernels/emu.cpp`, built by the host C++ compiler into one shared library
//! per variant, cached on disk (written under a unique name, then renamed
//! into place, so processes may fill the cache at once) and loaded once per
//! process for every emulated device.

use super::lock;
use crate::engine::exec::cuda::dev::DevError;
use crate::engine::exec::cuda::kernels::{self, Fnv1a, Variant};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The runtime compiled after the kernels.
const RUNTIME: &str = include_str!("../../../../../../kernels/emu.cpp");

type EntryFn = unsafe extern "C" fn(*const c_char) -> c_int;
type ArgSizesFn = unsafe extern "C" fn(c_int, *mut u64, c_int) -> c_int;
type RunFn = unsafe extern "C" fn(c_int, *mut *mut c_void, u32, u32);

/// One variant's kernels, loaded; the function pointers live as long as `_lib`.
pub(super) struct Library {
    pub(super) entry: EntryFn,
    pub(super) arg_sizes: ArgSizesFn,
    pub(super) run: RunFn,
    _lib: libloading::Library,
}

/// The loaded library of `variant`, built the first time any device of the
/// process asks for it. A failed build is remembered too: every rank gets
/// the same error at once instead of compiling again in turn.
pub(super) fn library(variant: Variant) -> Result<Arc<Library>, DevError> {
    type Slot = Arc<Mutex<Option<Result<Arc<Library>, DevError>>>>;
    static LIBS: OnceLock<Mutex<HashMap<Variant, Slot>>> = OnceLock::new();
    let call = "function";
    let slot = lock(LIBS.get_or_init(Default::default), call)?
        .entry(variant)
        .or_default()
        .clone();
    let mut slot = lock(&slot, call)?;
    if let Some(done) = &*slot {
        return done.clone();
    }
    let start = std::time::Instant::now();
    let built = build(variant).map(Arc::new);
    match &built {
        Ok(_) => tracing::info!(
            %variant,
            ms = start.elapsed().as_secs_f64() * 1e3,
            "emulated kernel library ready"
        ),
        Err(e) => tracing::info!(%variant, error = %e, "emulated kernel library failed"),
    }
    *slot = Some(built.clone());
    built
}

/// The compiler's options for `variant`.
pub fn options(variant: Variant) -> Vec<String> {
    let mut o: Vec<String> = ["-std=c++17", "-O2", "-shared", "-fPIC", "-pthread"]
        .map(String::from)
        .into();
    // Bit-exact with the host engine, as NVRTC's --fmad=false: no contraction.
    o.push("-ffp-contract=off".into());
    o.push(format!("-DCB_DT={}", variant.dtype_id()));
    o.push(format!("-DCB_OP={}", variant.op_id()));
    o
}

/// The cache folder: `<kernels cache>/emu`, else a folder of this user's
/// own in the temporary folder (refused when another user could write it,
/// as loading a library from it runs its code).
fn cache_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let home = kernels::default_cache_dir().map(|d| d.join("emu"));
    if let Some(d) = home.filter(|d| std::fs::create_dir_all(d).is_ok()) {
        tracing::debug!(dir = %d.display(), "emulated kernel cache folder");
        return Some(d);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let tmp = std::env::temp_dir().join(format!("collbench-{uid}-emu"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&tmp);
    let meta = std::fs::symlink_metadata(&tmp).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0;
    if private {
        tracing::debug!(dir = %tmp.display(), "emulated kernel cache folder (temporary)");
    } else {
        tracing::debug!(dir = %tmp.display(), "emulated kernel cache folder refused: not private to this user");
    }
    private.then_some(tmp)
}

/// Builds (or finds in the disk cache) and loads `variant`'s library.
fn build(variant: Variant) -> Result<Library, DevError> {
    static UNIQUE: AtomicU64 = AtomicU64::new(0);
    let call = format!("building the emulated kernels ({variant})");
    let fail = |detail: String| DevError::new(&call, detail);
    let cxx = std::env::var("CXX")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "c++".into());
    let mut words = cxx.split_whitespace();
    let prog = words.next().unwrap_or("c++");
    let pre: Vec<&str> = words.collect();
    let missing = |why: String| {
        fail(format!(
            "cannot run the C++ compiler `{cxx}` ({why}): the emulated device (--device cuda-emu) needs a C++ compiler; set CXX"
        ))
    };
    let version = Command::new(prog)
        .args(&pre)
        .arg("--version")
        .output()
        .map_err(|e| missing(e.to_string()))?;
    if !version.status.success() {
        return Err(missing(format!("`--version` failed: {}", version.status)));
    }
    tracing::debug!(
        %variant,
        cxx = %cxx,
        version = %String::from_utf8_lossy(&version.stdout).lines().next().unwrap_or(""),
        "emulated kernels: C++ compiler"
    );
    let opts = options(variant);
    let src = format!(
        "{}\n#line 1 \"kernels/emu.cpp\"\n{RUNTIME}",
        kernels::source()
    );
    let mut h = Fnv1a::new();
    h.field(b"collbench-emu/1").field(cxx.as_bytes());
    h.field(std::env::consts::ARCH.as_bytes());
    for o in &opts {
        h.field(o.as_bytes());
    }
    let key = h.field(&version.stdout).field(src.as_bytes()).finish();
    let dir = cache_dir()
        .ok_or_else(|| fail("no usable cache folder (set COLLBENCH_CACHE_DIR)".into()))?;
    let path = dir.join(format!("{key:016x}.so"));
    if path.is_file() {
        // A file that does not load is built again and replaced.
        match load(&path) {
            Ok(lib) => {
                tracing::debug!(%variant, path = %path.display(), "emulated kernel cache hit");
                return Ok(lib);
            }
            Err(e) => tracing::debug!(
                %variant,
                path = %path.display(),
                error = %e,
                "emulated kernel cache entry does not load: building again"
            ),
        }
    } else {
        tracing::debug!(%variant, path = %path.display(), "emulated kernel cache miss: building");
    }
    let start = std::time::Instant::now();
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    let stem = format!("{key:016x}.{}.{n}", std::process::id());
    let (cpp, tmp) = (
        dir.join(format!("{stem}.cpp")),
        dir.join(format!("{stem}.so.tmp")),
    );
    std::fs::write(&cpp, &src).map_err(|e| fail(format!("{}: {e}", cpp.display())))?;
    let out = Command::new(prog)
        .args(&pre)
        .args(&opts)
        .arg(&cpp)
        .arg("-o")
        .arg(&tmp)
        .output();
    let _ = std::fs::remove_file(&cpp);
    let out = out.map_err(|e| missing(e.to_string()))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(format!(
            "`{cxx} {}` failed ({}):\n{}",
            opts.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    tracing::debug!(
        %variant,
        seconds = start.elapsed().as_secs_f64(),
        path = %path.display(),
        "emulated kernels built"
    );
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!("{}: {e}", path.display()))
    })?;
    load(&path).map_err(|e| fail(format!("loading {}: {e}", path.display())))
}

fn load(path: &Path) -> Result<Library, libloading::Error> {
    // SAFETY: the library is one we built from kernels/ and kernels/emu.cpp;
    // its initialisers only set up static tables.
    let lib = unsafe { libloading::Library::new(path) }?;
    // SAFETY: kernels/emu.cpp defines these symbols with these signatures;
    // the copied pointers are kept next to `lib`, which outlives them.
    let (entry, arg_sizes, run) = unsafe {
        (
            *lib.get::<EntryFn>(b"cb_emu_entry\0")?,
            *lib.get::<ArgSizesFn>(b"cb_emu_arg_sizes\0")?,
            *lib.get::<RunFn>(b"cb_emu_run\0")?,
        )
    };
    Ok(Library {
        entry,
        arg_sizes,
        run,
        _lib: lib,
    })
}
