//! collbench's CUDA kernels: the embedded sources, one variant per
//! (element type, operator), the NVRTC options of each, and a cache of
//! their PTX in memory and on disk.
//!
//! The cache key is a stable hash (FNV-1a, 64 bits) of the source, the
//! options, the architecture and the NVRTC version, so a new source, flag,
//! target or compiler never reuses old PTX. Disk entries are written to a
//! temporary file and renamed into place; a file that fails its checks is
//! compiled again; a cache folder that cannot be read or written costs a
//! warning (returned, never printed here), not the compile.

use super::nvrtc::{CompileError, Nvrtc, Ptx};
use crate::engine::types::{Dtype, ReduceOp};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The kernel sources, in the order they are concatenated.
pub const SOURCES: [(&str, &str); 5] = [
    (
        "kernels/prelude.cuh",
        include_str!("../../../../kernels/prelude.cuh"),
    ),
    (
        "kernels/abi.cuh",
        include_str!("../../../../kernels/abi.cuh"),
    ),
    (
        "kernels/elem.cuh",
        include_str!("../../../../kernels/elem.cuh"),
    ),
    (
        "kernels/data.cu",
        include_str!("../../../../kernels/data.cu"),
    ),
    (
        "kernels/collective.cu",
        include_str!("../../../../kernels/collective.cu"),
    ),
];

/// The kernels every variant's PTX must define: a variant lacking one
/// counts as failed.
pub const ENTRY_POINTS: [&str; 5] = [
    "cb_collective",
    "cb_fill",
    "cb_fill_at",
    "cb_poison",
    "cb_verify",
];

/// The entry points the compile check requires.
pub fn required_entry_points() -> &'static [&'static str] {
    &ENTRY_POINTS
}

/// The sources as one translation unit, each file introduced by a `#line`
/// directive so NVRTC's diagnostics name the file and line.
pub fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut s = String::new();
        for (name, text) in SOURCES {
            s.push_str(&format!("#line 1 \"{name}\"\n"));
            s.push_str(text);
            if !text.ends_with('\n') {
                s.push('\n');
            }
        }
        s
    })
}

/// A GPU architecture: compute capability major*10 + minor, with the
/// architecture-specific `a` suffix (e.g. `sm_90a`) when asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arch {
    pub cc: u32,
    pub specific: bool,
}

impl Arch {
    /// What is compiled for when no GPU says otherwise.
    pub const DEFAULT: Arch = Arch {
        cc: 90,
        specific: false,
    };

    /// NVRTC's option selecting this architecture (PTX for the virtual one).
    pub fn nvrtc_option(self) -> String {
        format!("--gpu-architecture=compute_{}", self.suffix())
    }

    fn suffix(self) -> String {
        format!("{}{}", self.cc, if self.specific { "a" } else { "" })
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.suffix())
    }
}

/// Why an architecture did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a GPU architecture: expected e.g. sm_90, sm_80, 90 or compute_90 (compute capability 5.0 or newer)")]
pub struct ArchError(pub String);

impl FromStr for Arch {
    type Err = ArchError;

    /// `sm_90`, `SM_90`, `compute_90`, `sm90`, `90`, `sm_90a`; also `9.0`.
    fn from_str(s: &str) -> Result<Arch, ArchError> {
        let err = || ArchError(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        let t = ["compute_", "compute", "sm_", "sm"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(&t);
        let (digits, specific) = match t.strip_suffix('a') {
            Some(d) => (d, true),
            None => (t, false),
        };
        let digits = match digits.split_once('.') {
            Some((major, minor)) if minor.len() == 1 && !specific => format!("{major}{minor}"),
            Some(_) => return Err(err()),
            None => digits.to_string(),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let cc: u32 = digits.parse().map_err(|_| err())?;
        if cc < 50 {
            return Err(err());
        }
        Ok(Arch { cc, specific })
    }
}

/// One compiled unit: the kernels for one element type and one operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub dtype: Dtype,
    pub op: ReduceOp,
}

impl Variant {
    /// Every variant: 12 types x 5 operators.
    pub fn all() -> Vec<Variant> {
        Dtype::ALL
            .into_iter()
            .flat_map(|dtype| {
                ReduceOp::ALL
                    .into_iter()
                    .map(move |op| Variant { dtype, op })
            })
            .collect()
    }

    /// The type's id in kernels/abi.cuh (its position in [`Dtype::ALL`]).
    pub fn dtype_id(self) -> usize {
        Dtype::ALL
            .iter()
            .position(|d| *d == self.dtype)
            .unwrap_or(0)
    }

    /// The operator's id in kernels/abi.cuh (its position in [`ReduceOp::ALL`]).
    pub fn op_id(self) -> usize {
        ReduceOp::ALL
            .iter()
            .position(|o| *o == self.op)
            .unwrap_or(0)
    }

    /// NVRTC's options for this variant on `arch`.
    pub fn options(self, arch: Arch) -> Vec<String> {
        vec![
            arch.nvrtc_option(),
            format!("-DCB_DT={}", self.dtype_id()),
            format!("-DCB_OP={}", self.op_id()),
            // Bit-exact with the host engine: no fused multiply-add.
            "--fmad=false".into(),
            "--std=c++17".into(),
        ]
    }

    /// The program name NVRTC's diagnostics use.
    pub fn program_name(self) -> String {
        format!("collbench_{}_{}.cu", self.dtype.name(), self.op.name())
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.dtype, self.op)
    }
}

/// 64-bit FNV-1a.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Fnv1a {
    pub fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) -> &mut Fnv1a {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Writes a field so that field boundaries count (length first).
    pub fn field(&mut self, bytes: &[u8]) -> &mut Fnv1a {
        self.write(&(bytes.len() as u64).to_le_bytes()).write(bytes)
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

/// Bumped when the cache file format changes.
const CACHE_FORMAT: &str = "collbench-ptx/1";

/// The cache key of PTX compiled from `source` with `options` for `arch` by
/// NVRTC `version`.
pub fn cache_key(source: &str, options: &[String], arch: Arch, version: (i32, i32)) -> u64 {
    let mut h = Fnv1a::new();
    h.field(CACHE_FORMAT.as_bytes())
        .field(format!("{}.{}", version.0, version.1).as_bytes())
        .field(arch.to_string().as_bytes())
        .write(&(options.len() as u64).to_le_bytes());
    for o in options {
        h.field(o.as_bytes());
    }
    h.field(source.as_bytes()).finish()
}

/// The default kernel cache folder from an environment lookup:
/// `$COLLBENCH_CACHE_DIR`, else `$XDG_CACHE_HOME/collbench/kernels`, else
/// `$HOME/.cache/collbench/kernels`; `None` when none of them is set.
pub fn cache_dir_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set("COLLBENCH_CACHE_DIR") {
        return Some(d);
    }
    if let Some(d) = set("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return Some(d.join("collbench").join("kernels"));
    }
    set("HOME").map(|h| h.join(".cache").join("collbench").join("kernels"))
}

/// The kernel cache folder of this process's environment.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(|k| std::env::var_os(k))
}

/// Where a PTX came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Compiled,
    Memory,
    Disk,
}

/// PTX kept in memory for the process and, when a folder is given, on disk.
#[derive(Debug)]
pub struct Cache {
    dir: Option<PathBuf>,
    mem: Mutex<HashMap<u64, Ptx>>,
    warnings: Mutex<Vec<String>>,
    /// Set once the folder proved unusable: no more disk attempts.
    disk_off: std::sync::atomic::AtomicBool,
}

impl Cache {
    /// A cache in `dir` (created when first written), or in memory only.
    pub fn new(dir: Option<PathBuf>) -> Cache {
        Cache {
            dir,
            mem: Mutex::new(HashMap::new()),
            warnings: Mutex::new(Vec::new()),
            disk_off: false.into(),
        }
    }

    /// The process's cache, in [`default_cache_dir`].
    pub fn process() -> &'static Cache {
        static CACHE: OnceLock<Cache> = OnceLock::new();
        CACHE.get_or_init(|| Cache::new(default_cache_dir()))
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The warnings so far (each once), leaving none behind.
    pub fn take_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }

    fn warn(&self, w: String) {
        if let Ok(mut ws) = self.warnings.lock() {
            if !ws.contains(&w) {
                ws.push(w);
            }
        }
    }

    /// The PTX of `source` with `options` for `arch`: from memory, from
    /// disk, or compiled now (and then stored in both).
    pub fn get_or_compile(
        &self,
        nvrtc: &Nvrtc,
        source: &str,
        name: &str,
        options: &[String],
        arch: Arch,
    ) -> Result<(Ptx, Origin), CompileError> {
        let key = cache_key(source, options, arch, nvrtc.version());
        self.get_or_insert_with(key, || nvrtc.compile(source, name, options))
    }

    /// The PTX under `key`: from memory, from disk, or from `compile` (and
    /// then stored in both).
    pub fn get_or_insert_with(
        &self,
        key: u64,
        compile: impl FnOnce() -> Result<Ptx, CompileError>,
    ) -> Result<(Ptx, Origin), CompileError> {
        if let Some(p) = self.mem.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok((p, Origin::Memory));
        }
        if let Some(p) = self.read(key) {
            self.remember(key, &p);
            return Ok((p, Origin::Disk));
        }
        let ptx = compile()?;
        self.remember(key, &ptx);
        self.write(key, &ptx);
        Ok((ptx, Origin::Compiled))
    }

    /// The disk file of `key`, if the cache has a usable folder.
    pub fn file(&self, key: u64) -> Option<PathBuf> {
        if self.disk_off.load(Ordering::Relaxed) {
            return None;
        }
        self.dir.as_ref().map(|d| d.join(format!("{key:016x}.ptx")))
    }

    fn remember(&self, key: u64, ptx: &Ptx) {
        if let Ok(mut m) = self.mem.lock() {
            m.insert(key, ptx.clone());
        }
    }

    /// A cache file's header: the key, the body's length and its hash.
    fn header(key: u64, body: &str) -> String {
        let sum = Fnv1a::new().write(body.as_bytes()).finish();
        format!(
            "// {CACHE_FORMAT} key={key:016x} len={} fnv={sum:016x}\n",
            body.len()
        )
    }

    fn read(&self, key: u64) -> Option<Ptx> {
        let path = self.file(key)?;
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            // Not there yet (a missing folder too): a miss, not a problem.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return None
            }
            Err(e) => {
                self.warn(format!(
                    "kernel cache: cannot read {}: {e}; compiling instead",
                    path.display()
                ));
                return None;
            }
        };
        let parsed = String::from_utf8(text).ok().and_then(|t| {
            let (head, body) = t.split_once('\n')?;
            (format!("{head}\n") == Cache::header(key, body)).then(|| body.to_string())
        });
        match parsed {
            Some(body) => Some(Ptx(body)),
            None => {
                self.warn(format!(
                    "kernel cache: {} is corrupt; compiled again",
                    path.display()
                ));
                None
            }
        }
    }

    fn write(&self, key: u64, ptx: &Ptx) {
        let Some(path) = self.file(key) else {
            return;
        };
        if let Err(e) = Cache::write_atomic(&path, &Cache::header(key, ptx.as_str()), ptx.as_str())
        {
            self.disk_off.store(true, Ordering::Relaxed);
            self.warn(format!(
                "kernel cache: cannot write {}: {e}; kernels are compiled again next time \
                 (set COLLBENCH_CACHE_DIR to a writable folder)",
                path.display()
            ));
        }
    }

    fn write_atomic(path: &Path, header: &str, body: &str) -> std::io::Result<()> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".tmp-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            path.file_name().and_then(|n| n.to_str()).unwrap_or("ptx")
        ));
        let result = (|| {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(header.as_bytes())?;
            f.write_all(body.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// What compiling every variant gave.
#[derive(Debug)]
pub struct Report {
    pub arch: Arch,
    pub nvrtc_version: (i32, i32),
    /// Variants with PTX (compiled now or found in the cache).
    pub compiled: usize,
    /// Variants that failed, in variant order, with why.
    pub failed: Vec<(Variant, CompileError)>,
    /// Of `compiled`, how many came from the cache.
    pub cached: usize,
    pub seconds: f64,
    /// Cache problems (never fatal).
    pub warnings: Vec<String>,
}

/// Compiles every variant of the embedded kernels for `arch` on `threads`
/// threads, through `cache`.
pub fn compile_all(nvrtc: &Nvrtc, cache: &Cache, arch: Arch, threads: usize) -> Report {
    compile_variants(
        nvrtc,
        cache,
        source(),
        &Variant::all(),
        arch,
        threads,
        required_entry_points(),
    )
}

/// Compiles `variants` of `source`, requiring the `entries` kernels in each.
pub fn compile_variants(
    nvrtc: &Nvrtc,
    cache: &Cache,
    source: &str,
    variants: &[Variant],
    arch: Arch,
    threads: usize,
    entries: &[&str],
) -> Report {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let one = |v: Variant| -> Result<Origin, CompileError> {
        let (ptx, origin) =
            cache.get_or_compile(nvrtc, source, &v.program_name(), &v.options(arch), arch)?;
        let missing = ptx.missing_entry_points(entries);
        if missing.is_empty() {
            Ok(origin)
        } else {
            Err(CompileError::new(format!(
                "the PTX lacks the kernel{} {}",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            )))
        }
    };
    let mut results: Vec<(usize, Result<Origin, CompileError>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.clamp(1, variants.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(v) = variants.get(i) else {
                            return done;
                        };
                        done.push((i, one(*v)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join().unwrap_or_else(|_| {
                    vec![(
                        usize::MAX,
                        Err(CompileError::new("a compile thread panicked")),
                    )]
                })
            })
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut report = Report {
        arch,
        nvrtc_version: nvrtc.version(),
        compiled: 0,
        failed: Vec::new(),
        cached: 0,
        seconds: 0.0,
        warnings: Vec::new(),
    };
    for (i, r) in results {
        match r {
            Ok(origin) => {
                report.compiled += 1;
                report.cached += usize::from(origin != Origin::Compiled);
            }
            Err(e) => match variants.get(i) {
                Some(v) => report.failed.push((*v, e)),
                None => report.warnings.push(e.message),
            },
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.warnings.extend(cache.take_warnings());
    report
}

#[cfg(test)]
mod tests;
