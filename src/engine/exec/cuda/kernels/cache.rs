//! Compiled kernels (PTX or cubins) kept in memory and on disk: entries are written to a temporary file
//! and renamed into place; a file that fails its checks is compiled again;
//! a cache folder that cannot be read or written costs a warning (returned,
//! never printed), not the compile.

use super::key::{cache_key, Fnv1a, CACHE_FORMAT};
use super::Arch;
use crate::engine::exec::cuda::nvrtc::{CompileError, Image, Nvrtc};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

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

/// Whether `dir` is, or could be made, a folder this process writes in,
/// leaving nothing behind (`collbench info` changes nothing): a folder is
/// made in it, else in its nearest existing ancestor, and removed at once.
/// (Permission bits alone do not tell: root passes them on /proc.)
pub fn writable_without_making(dir: &Path) -> Result<(), String> {
    static PROBE: AtomicU64 = AtomicU64::new(0);
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if !m.is_dir() => return Err(format!("{} is not a folder", at.display())),
            Ok(_) => {
                let probe = at.join(format!(
                    ".collbench-probe-{}-{}",
                    std::process::id(),
                    PROBE.fetch_add(1, Ordering::Relaxed)
                ));
                return match std::fs::create_dir(&probe) {
                    Ok(()) => {
                        let _ = std::fs::remove_dir(&probe);
                        Ok(())
                    }
                    Err(e) if at == dir => Err(format!("{} is not writable ({e})", at.display())),
                    Err(e) => Err(format!(
                        "it cannot be made: {} is not writable ({e})",
                        at.display()
                    )),
                };
            }
            Err(_) => match at.parent() {
                Some(up) if !up.as_os_str().is_empty() => at = up,
                // A relative path is made in the current folder.
                Some(_) => at = Path::new("."),
                None => return Err(format!("{} cannot be made", dir.display())),
            },
        }
    }
}

/// Why a cache file was not written: the folder takes no file (none can
/// be), or this entry's name is taken (a folder there: only it is lost).
enum Failed {
    Folder(std::io::Error),
    Entry(std::io::Error),
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
    mem: Mutex<HashMap<u64, Image>>,
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
        tracing::debug!(warning = %w, "kernel cache problem");
        if let Ok(mut ws) = self.warnings.lock() {
            if !ws.contains(&w) {
                ws.push(w);
            }
        }
    }

    /// The image of `source` with `options` for `arch`: from memory, from
    /// disk, or compiled now (and then stored in both).
    pub fn get_or_compile(
        &self,
        nvrtc: &Nvrtc,
        source: &str,
        name: &str,
        options: &[String],
        arch: Arch,
    ) -> Result<(Image, Origin), CompileError> {
        let key = cache_key(source, options, arch, nvrtc.version());
        tracing::debug!(program = name, %arch, key = %format_args!("{key:016x}"), "kernel cache lookup");
        self.get_or_insert_with(key, || nvrtc.compile(source, name, options))
    }

    /// The image under `key`: from memory, from disk, or from `compile`
    /// (and then stored in both).
    pub fn get_or_insert_with(
        &self,
        key: u64,
        compile: impl FnOnce() -> Result<Image, CompileError>,
    ) -> Result<(Image, Origin), CompileError> {
        let key_hex = format_args!("{key:016x}");
        if let Some(p) = self.mem.lock().ok().and_then(|m| m.get(&key).cloned()) {
            tracing::debug!(key = %key_hex, "kernel cache hit (memory)");
            return Ok((p, Origin::Memory));
        }
        if let Some(p) = self.read(key) {
            tracing::debug!(key = %key_hex, file = ?self.file(key), "kernel cache hit (disk)");
            self.remember(key, &p);
            return Ok((p, Origin::Disk));
        }
        tracing::debug!(key = %key_hex, dir = ?self.dir, "kernel cache miss: compiling");
        let start = std::time::Instant::now();
        let ptx = compile().inspect_err(|e| {
            tracing::debug!(key = %key_hex, error = %e.message, "kernel compile failed");
        })?;
        tracing::debug!(
            key = %key_hex,
            ms = start.elapsed().as_secs_f64() * 1e3,
            kind = ptx.kind(),
            bytes = ptx.bytes().len(),
            "kernel compiled"
        );
        self.remember(key, &ptx);
        self.write(key, &ptx);
        Ok((ptx, Origin::Compiled))
    }

    /// The disk file of `key`, if the cache has a usable folder.
    pub fn file(&self, key: u64) -> Option<PathBuf> {
        if self.disk_off.load(Ordering::Relaxed) {
            return None;
        }
        self.dir.as_ref().map(|d| d.join(format!("{key:016x}.img")))
    }

    fn remember(&self, key: u64, ptx: &Image) {
        if let Ok(mut m) = self.mem.lock() {
            m.insert(key, ptx.clone());
        }
    }

    /// A cache file's header: the key, the image's kind, the body's length
    /// and its hash.
    fn header(key: u64, kind: &str, body: &[u8]) -> String {
        let sum = Fnv1a::new().write(body).finish();
        format!(
            "// {CACHE_FORMAT} key={key:016x} kind={kind} len={} fnv={sum:016x}\n",
            body.len()
        )
    }

    fn read(&self, key: u64) -> Option<Image> {
        let path = self.file(key)?;
        let bytes = match std::fs::read(&path) {
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
        let parsed = bytes.iter().position(|&b| b == b'\n').and_then(|n| {
            let (head, body) = (&bytes[..=n], &bytes[n + 1..]);
            if head == Cache::header(key, "ptx", body).as_bytes() {
                String::from_utf8(body.to_vec()).ok().map(Image::Ptx)
            } else if head == Cache::header(key, "cubin", body).as_bytes() {
                Some(Image::Cubin(body.to_vec()))
            } else {
                None
            }
        });
        match parsed {
            Some(image) => Some(image),
            None => {
                self.warn(format!(
                    "kernel cache: {} is corrupt; compiled again",
                    path.display()
                ));
                None
            }
        }
    }

    fn write(&self, key: u64, image: &Image) {
        let Some(path) = self.file(key) else {
            return;
        };
        let header = Cache::header(key, image.kind(), image.bytes());
        match Cache::write_atomic(&path, &header, image.bytes()) {
            Ok(()) => {}
            // The entry's own name is taken (a folder there): that entry
            // is compiled each time; the others are still cached.
            Err(Failed::Entry(e)) => self.warn(format!(
                "kernel cache: cannot put {} in place: {e}; remove what is there",
                path.display()
            )),
            // The folder takes no file: the cache is off for this run.
            Err(Failed::Folder(e)) => {
                self.disk_off.store(true, Ordering::Relaxed);
                self.warn(format!(
                    "kernel cache: cannot write {}: {e}; kernels are compiled again next time \
                     (set COLLBENCH_CACHE_DIR to a writable folder)",
                    path.display()
                ));
            }
        }
    }

    fn write_atomic(path: &Path, header: &str, body: &[u8]) -> Result<(), Failed> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(Failed::Folder)?;
        let tmp = dir.join(format!(
            ".tmp-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            path.file_name().and_then(|n| n.to_str()).unwrap_or("img")
        ));
        let result = (|| {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(header.as_bytes())?;
            f.write_all(body)?;
            f.sync_all()
        })()
        .map_err(Failed::Folder)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(Failed::Entry));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}
