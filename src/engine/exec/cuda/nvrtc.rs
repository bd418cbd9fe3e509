//! NVRTC, loaded explicitly at run time with `libloading`.
//!
//! cudarc's own loader looks for the sonames of the CUDA major version its
//! `cuda-*` feature names, so a 12.x feature misses `libnvrtc.so.13`; here
//! the sonames of [`crate::engine::probe::CANDIDATES`] are tried in order
//! (13, 12, unversioned). Every symbol is checked when the library loads: a
//! missing library or symbol is an error value, never a panic.
//!
//! NVRTC programs are independent, so [`Nvrtc::compile`] may run on several
//! threads at once.

use crate::engine::probe;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

type NvrtcResult = c_int;
type Program = *mut c_void;
const NVRTC_SUCCESS: NvrtcResult = 0;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult;
type ErrorStringFn = unsafe extern "C" fn(NvrtcResult) -> *const c_char;
type CreateProgramFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvrtcResult;
type CompileProgramFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult;
type TextFn = unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult;
type DestroyProgramFn = unsafe extern "C" fn(*mut Program) -> NvrtcResult;
type NumArchsFn = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;
type ArchsFn = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;

/// The NVRTC entry points collbench calls.
struct Fns {
    version: VersionFn,
    error_string: ErrorStringFn,
    create_program: CreateProgramFn,
    compile_program: CompileProgramFn,
    get_program_log_size: SizeFn,
    get_program_log: TextFn,
    get_ptx_size: SizeFn,
    get_ptx: TextFn,
    /// `nvrtcGetCUBINSize`/`nvrtcGetCUBIN` (CUDA 11.1 and newer): machine
    /// code for a real architecture (`--gpu-architecture=sm_90`).
    cubin: Option<(SizeFn, TextFn)>,
    destroy_program: DestroyProgramFn,
}

/// Why NVRTC could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// None of the sonames loaded; each with the dynamic linker's reason.
    #[error(
        "NVRTC not found (tried {}){}; install it, e.g. `python3 -m pip download --no-deps \
         nvidia-cuda-nvrtc-cu12` and unzip the wheel, or `pip install nvidia-cuda-nvrtc-cu12`, \
         then put its nvidia/cuda_nvrtc/lib folder on LD_LIBRARY_PATH",
        tried.join(", "),
        first_reason(reasons)
    )]
    NotFound {
        tried: Vec<String>,
        reasons: Vec<String>,
    },
    /// The library loaded but lacks a function collbench needs.
    #[error("{soname} lacks {symbol}: not a usable NVRTC (need CUDA 11.2 or newer)")]
    MissingSymbol { soname: String, symbol: String },
    /// `nvrtcVersion` failed.
    #[error("{soname}: nvrtcVersion failed with code {code}")]
    Version { soname: String, code: i32 },
    /// Only an NVRTC of a newer CUDA than the driver's is here: the driver
    /// loads neither its PTX nor its machine code.
    #[error(
        "{soname} (NVRTC {nvrtc}) is newer than the CUDA driver ({driver}.x), which cannot \
         load what it makes: install NVRTC {driver} (`pip install nvidia-cuda-nvrtc-cu{driver}`, \
         its nvidia/cuda_nvrtc/lib folder on LD_LIBRARY_PATH), or update the driver"
    )]
    NewerThanDriver {
        soname: String,
        nvrtc: String,
        driver: u32,
    },
}

/// The CUDA major version of a versioned soname (`libnvrtc.so.12`: 12).
fn soname_major(soname: &str) -> Option<u32> {
    soname.rsplit_once(".so.")?.1.parse().ok()
}

/// `sonames` whose CUDA version the driver of CUDA major `driver` runs the
/// output of (not newer than it; the unversioned name, checked once loaded).
fn fitting<'a>(sonames: &[&'a str], driver: u32) -> Vec<&'a str> {
    sonames
        .iter()
        .copied()
        .filter(|s| soname_major(s).is_none_or(|m| m <= driver))
        .collect()
}

fn first_reason(reasons: &[String]) -> String {
    reasons
        .first()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

/// A failed compilation: what went wrong and NVRTC's log, if any.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// One line: which call failed and why.
    pub message: String,
    /// NVRTC's program log (compiler diagnostics); may be empty.
    pub log: String,
}

impl CompileError {
    pub fn new(message: impl Into<String>) -> CompileError {
        CompileError {
            message: message.into(),
            log: String::new(),
        }
    }

    /// The message followed by the log, for people.
    pub fn detail(&self) -> String {
        let log = self.log.trim();
        if log.is_empty() {
            self.message.clone()
        } else {
            format!("{}\n{log}", self.message)
        }
    }
}

/// What NVRTC made of a program: PTX text (without the trailing NUL), which
/// the driver compiles to machine code when a module is loaded, or a cubin,
/// machine code for one real architecture, which it loads as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    Ptx(String),
    Cubin(Vec<u8>),
}

impl Image {
    /// The image's bytes, as the driver and the cache take them.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Ptx(t) => t.as_bytes(),
            Image::Cubin(b) => b,
        }
    }

    /// `ptx` or `cubin`.
    pub fn kind(&self) -> &'static str {
        match self {
            Image::Ptx(_) => "ptx",
            Image::Cubin(_) => "cubin",
        }
    }

    /// The names of the kernels (`.entry` directives) a PTX defines; none
    /// for a cubin (its symbols are checked by [`Image::missing_entry_points`]).
    pub fn entry_points(&self) -> Vec<&str> {
        let Image::Ptx(text) = self else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                words.find(|w| *w == ".entry")?;
                let name = words.next()?;
                let name = name.split('(').next().unwrap_or(name);
                (!name.is_empty()).then_some(name)
            })
            .collect()
    }

    /// Those of `names` the image does not define: for a cubin, the names
    /// missing from its strings (each NUL-terminated in an ELF string
    /// table).
    pub fn missing_entry_points<'a>(&self, names: &[&'a str]) -> Vec<&'a str> {
        match self {
            Image::Ptx(_) => {
                let have = self.entry_points();
                names
                    .iter()
                    .filter(|n| !have.contains(n))
                    .copied()
                    .collect()
            }
            // The name whole, ending in NUL: after a NUL (the symbol
            // table's own string) or a dot (a string it shares the end of,
            // such as its section's `.text.NAME`).
            Image::Cubin(bytes) => names
                .iter()
                .filter(|n| {
                    let sym = [n.as_bytes(), b"\0"].concat();
                    !bytes
                        .windows(sym.len() + 1)
                        .any(|w| matches!(w[0], 0 | b'.') && w[1..] == sym[..])
                })
                .copied()
                .collect(),
        }
    }
}

/// A loaded NVRTC library. The process-wide one comes from [`Nvrtc::get`].
pub struct Nvrtc {
    soname: String,
    version: (i32, i32),
    /// The compute capabilities NVRTC targets (`nvrtcGetSupportedArchs`,
    /// CUDA 11.2 and newer), when it says.
    archs: Option<Vec<u32>>,
    fns: Fns,
    /// The library the function pointers point into: closed when the value
    /// goes (after them; no program outlives `self`, programs borrow it).
    /// NVRTC's API is thread-safe for distinct programs (each `compile`
    /// creates its own), so `Nvrtc` is `Send` and `Sync`.
    _lib: Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("soname", &self.soname)
            .field("version", &self.version)
            .finish()
    }
}

/// The dynamic linker's own words for a failed load or lookup (libloading
/// keeps them as the error's source, behind a generic "dlopen failed").
pub(crate) fn dl_reason(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => s.to_string(),
        None => e.to_string(),
    }
}

/// The sonames tried, in order (those of the probe's "nvrtc" family).
pub fn sonames() -> &'static [&'static str] {
    probe::CANDIDATES
        .iter()
        .find(|(name, _)| *name == "nvrtc")
        .map_or(&[], |(_, s)| *s)
}

impl Nvrtc {
    /// The process's NVRTC, loaded on first use from [`sonames`]: the
    /// newest the CUDA driver here can load the output of, where there is
    /// a driver.
    pub fn get() -> Result<&'static Nvrtc, LoadError> {
        static NVRTC: OnceLock<Result<Nvrtc, LoadError>> = OnceLock::new();
        NVRTC
            .get_or_init(|| Nvrtc::load_for(sonames(), super::device::driver_major()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The first of `sonames` that loads and is no newer than the CUDA
    /// driver's major version `driver` (any, without a driver: PTX made for
    /// the cache or another machine). A CUDA 13 NVRTC's cubins and PTX do
    /// not load on a 12.x driver, so where only a newer one is here, that
    /// is the error.
    pub fn load_for(sonames: &[&str], driver: Option<u32>) -> Result<Nvrtc, LoadError> {
        let Some(driver) = driver else {
            return Nvrtc::load(sonames);
        };
        let newer = |soname: &str, version: (i32, i32)| LoadError::NewerThanDriver {
            soname: soname.to_string(),
            nvrtc: format!("{}.{}", version.0, version.1),
            driver,
        };
        match Nvrtc::load(&fitting(sonames, driver)) {
            Ok(n) if u32::try_from(n.version.0).is_ok_and(|m| m > driver) => {
                Err(newer(&n.soname, n.version))
            }
            Ok(n) => Ok(n),
            Err(e) => {
                let skipped = sonames
                    .iter()
                    .filter(|s| soname_major(s).is_some_and(|m| m > driver));
                for s in skipped {
                    if let Ok(n) = Nvrtc::load(&[s]) {
                        return Err(newer(s, n.version));
                    }
                }
                Err(e)
            }
        }
    }

    /// Loads the first of `sonames` that the dynamic linker finds.
    pub fn load(sonames: &[&str]) -> Result<Nvrtc, LoadError> {
        let mut reasons = Vec::new();
        for s in sonames {
            if s.contains('\0') {
                reasons.push(format!("{s:?}: not a valid library name"));
                tracing::debug!(soname = ?s, "NVRTC candidate skipped: not a valid library name");
                continue;
            }
            // SAFETY: loading NVRTC runs its initialisers, which only set up
            // its own state. RTLD_NOW: every symbol resolves now or the load
            // fails (as collbench's loader always did).
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some(*s),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
                )
            };
            match lib {
                Ok(lib) => return Nvrtc::bind(lib.into(), s),
                Err(e) => {
                    let reason = dl_reason(&e);
                    tracing::debug!(soname = %s, reason = %reason, "NVRTC candidate did not load");
                    reasons.push(reason);
                }
            }
        }
        let e = LoadError::NotFound {
            tried: sonames.iter().map(|s| s.to_string()).collect(),
            reasons,
        };
        tracing::info!(tried = ?sonames, "NVRTC not found");
        Err(e)
    }

    /// Binds every symbol of a freshly opened library (closed again, by
    /// dropping it, on failure).
    fn bind(lib: Library, soname: &str) -> Result<Nvrtc, LoadError> {
        macro_rules! bind {
            ($name:literal, $ty:ty) => {
                // SAFETY: the symbol is NVRTC's function of this name, whose
                // C signature `$ty` transcribes (nvrtc.h); the copied
                // pointer is kept next to `lib`, which outlives it.
                match unsafe { lib.get::<$ty>(concat!($name, "\0").as_bytes()) } {
                    Ok(f) => *f,
                    Err(e) => {
                        tracing::debug!(
                            soname,
                            symbol = $name,
                            reason = %dl_reason(&e),
                            "NVRTC symbol missing"
                        );
                        return Err(LoadError::MissingSymbol {
                            soname: soname.to_string(),
                            symbol: $name.to_string(),
                        });
                    }
                }
            };
        }
        let fns = Fns {
            version: bind!("nvrtcVersion", VersionFn),
            error_string: bind!("nvrtcGetErrorString", ErrorStringFn),
            create_program: bind!("nvrtcCreateProgram", CreateProgramFn),
            compile_program: bind!("nvrtcCompileProgram", CompileProgramFn),
            get_program_log_size: bind!("nvrtcGetProgramLogSize", SizeFn),
            get_program_log: bind!("nvrtcGetProgramLog", TextFn),
            get_ptx_size: bind!("nvrtcGetPTXSize", SizeFn),
            get_ptx: bind!("nvrtcGetPTX", TextFn),
            cubin: Nvrtc::cubin_fns(&lib),
            destroy_program: bind!("nvrtcDestroyProgram", DestroyProgramFn),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let code = unsafe { (fns.version)(&mut major, &mut minor) };
        if code != NVRTC_SUCCESS {
            tracing::debug!(soname, code, "nvrtcVersion failed");
            return Err(LoadError::Version {
                soname: soname.to_string(),
                code,
            });
        }
        let archs = Nvrtc::supported_archs(&lib);
        tracing::info!(
            soname,
            version = %format_args!("{major}.{minor}"),
            archs = ?archs,
            "NVRTC loaded"
        );
        Ok(Nvrtc {
            soname: soname.to_string(),
            version: (major, minor),
            archs,
            fns,
            _lib: lib,
        })
    }

    /// NVRTC's cubin getters, when it has them.
    fn cubin_fns(lib: &Library) -> Option<(SizeFn, TextFn)> {
        // SAFETY: NVRTC's functions of these names, with these signatures
        // (nvrtc.h); kept next to `lib`, which outlives them.
        unsafe {
            Some((
                *lib.get::<SizeFn>(b"nvrtcGetCUBINSize\0").ok()?,
                *lib.get::<TextFn>(b"nvrtcGetCUBIN\0").ok()?,
            ))
        }
    }

    /// Whether NVRTC makes cubins (machine code for a real architecture).
    pub fn makes_cubins(&self) -> bool {
        self.fns.cubin.is_some()
    }

    /// Asks NVRTC which architectures it targets; `None` when it cannot say.
    fn supported_archs(lib: &Library) -> Option<Vec<u32>> {
        // SAFETY: NVRTC's functions of these names, with these signatures
        // (nvrtc.h); used only while `lib` is loaded.
        let (num, list) = unsafe {
            (
                *lib.get::<NumArchsFn>(b"nvrtcGetNumSupportedArchs\0").ok()?,
                *lib.get::<ArchsFn>(b"nvrtcGetSupportedArchs\0").ok()?,
            )
        };
        let mut n: c_int = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { num(&mut n) } != NVRTC_SUCCESS || !(1..=1024).contains(&n) {
            return None;
        }
        let mut archs = vec![0 as c_int; usize::try_from(n).ok()?];
        // SAFETY: the buffer holds the `n` entries NVRTC reported.
        if unsafe { list(archs.as_mut_ptr()) } != NVRTC_SUCCESS {
            return None;
        }
        archs.into_iter().map(|a| u32::try_from(a).ok()).collect()
    }

    /// Whether NVRTC can target compute capability `cc` (e.g. 90); `None`
    /// when it does not say.
    pub fn supports(&self, cc: u32) -> Option<bool> {
        self.archs.as_ref().map(|a| a.contains(&cc))
    }

    /// The compute capabilities NVRTC targets, oldest first, when it says.
    pub fn archs(&self) -> Option<&[u32]> {
        self.archs.as_deref()
    }

    /// The soname that loaded, e.g. `libnvrtc.so.12`.
    pub fn soname(&self) -> &str {
        &self.soname
    }

    /// NVRTC's (major, minor) version, e.g. (12, 9).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// NVRTC's text for a result code.
    fn error_string(&self, code: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string (or null).
        let p = unsafe { (self.fns.error_string)(code) };
        if p.is_null() {
            format!("NVRTC error {code}")
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    fn check(&self, call: &str, code: NvrtcResult) -> Result<(), CompileError> {
        if code == NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(CompileError::new(format!(
                "{call}: {}",
                self.error_string(code)
            )))
        }
    }

    /// Reads one of a program's texts (log or PTX) through its size and
    /// getter functions.
    fn text(
        &self,
        prog: Program,
        what: (&str, SizeFn),
        get: (&str, TextFn),
    ) -> Result<String, CompileError> {
        let mut buf = self.bytes(prog, what, get)?;
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Reads one of a program's outputs, whole, through its size and getter
    /// functions.
    fn bytes(
        &self,
        prog: Program,
        what: (&str, SizeFn),
        get: (&str, TextFn),
    ) -> Result<Vec<u8>, CompileError> {
        let mut size = 0usize;
        // SAFETY: a live program and a valid out-pointer.
        self.check(what.0, unsafe { (what.1)(prog, &mut size) })?;
        if size == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, the size NVRTC asked for.
        self.check(get.0, unsafe { (get.1)(prog, buf.as_mut_ptr().cast()) })?;
        Ok(buf)
    }

    /// Compiles CUDA C++ `source` (named `name` in diagnostics) with NVRTC
    /// `options`: to a cubin when they name a real architecture
    /// (`--gpu-architecture=sm_90`), else to PTX.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[String],
    ) -> Result<Image, CompileError> {
        let real = options
            .iter()
            .any(|o| o.starts_with("--gpu-architecture=sm_"));
        let cubin = match (real, self.fns.cubin) {
            (false, _) => None,
            (true, Some(fns)) => Some(fns),
            (true, None) => {
                return Err(CompileError::new(format!(
                    "{} {}.{} makes no cubins (nvrtcGetCUBIN): compile to PTX",
                    self.soname, self.version.0, self.version.1
                )))
            }
        };
        let nul = |what: &str| CompileError::new(format!("{what} contains a NUL byte"));
        let src = CString::new(source).map_err(|_| nul("the source"))?;
        let cname = CString::new(name).map_err(|_| nul("the program name"))?;
        let copts = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| nul(&format!("option {o:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let opt_ptrs: Vec<*const c_char> = copts.iter().map(|o| o.as_ptr()).collect();
        let nopts = c_int::try_from(opt_ptrs.len())
            .map_err(|_| CompileError::new("too many NVRTC options"))?;

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid out-pointer and C strings; no headers.
        let code = unsafe {
            (self.fns.create_program)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", code)?;
        let guard = ProgramGuard { nvrtc: self, prog };

        // SAFETY: a live program; `opt_ptrs` points into `copts`, alive here.
        let code = unsafe { (self.fns.compile_program)(guard.prog, nopts, opt_ptrs.as_ptr()) };
        let log = self.text(
            guard.prog,
            ("nvrtcGetProgramLogSize", self.fns.get_program_log_size),
            ("nvrtcGetProgramLog", self.fns.get_program_log),
        );
        if code != NVRTC_SUCCESS {
            return Err(CompileError {
                message: format!("nvrtcCompileProgram: {}", self.error_string(code)),
                log: log.unwrap_or_default(),
            });
        }
        let image = match cubin {
            Some((size, get)) => Image::Cubin(self.bytes(
                guard.prog,
                ("nvrtcGetCUBINSize", size),
                ("nvrtcGetCUBIN", get),
            )?),
            None => Image::Ptx(self.text(
                guard.prog,
                ("nvrtcGetPTXSize", self.fns.get_ptx_size),
                ("nvrtcGetPTX", self.fns.get_ptx),
            )?),
        };
        if image.bytes().iter().all(u8::is_ascii_whitespace) {
            return Err(CompileError {
                message: format!("NVRTC returned an empty {}", image.kind()),
                log: log.unwrap_or_default(),
            });
        }
        Ok(image)
    }
}

/// Destroys an NVRTC program however `compile` returns.
struct ProgramGuard<'a> {
    nvrtc: &'a Nvrtc,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the program came from nvrtcCreateProgram and is destroyed once.
        unsafe { (self.nvrtc.fns.destroy_program)(&mut self.prog) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sonames_are_the_probe_candidates_newest_first() {
        assert_eq!(
            sonames(),
            &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
        );
    }

    /// Under a driver, NVRTC of a newer CUDA is passed over: what it makes
    /// does not load there. Without one, any does.
    #[test]
    fn nvrtc_no_newer_than_the_driver_is_chosen() {
        let all = sonames();
        assert_eq!(fitting(all, 13), all);
        assert_eq!(fitting(all, 12), ["libnvrtc.so.12", "libnvrtc.so"]);
        assert_eq!(fitting(all, 11), ["libnvrtc.so"]);
        if !probe::loadable("libnvrtc.so.12") {
            assert!(
                std::env::var("COLLBENCH_REQUIRE_NVRTC").is_err(),
                "libnvrtc.so.12 is required (COLLBENCH_REQUIRE_NVRTC) but does not load"
            );
            eprintln!("SKIPPED the loading half: libnvrtc.so.12 not loadable (LD_LIBRARY_PATH)");
            return;
        }
        let only12 = ["libnvrtc.so.12"];
        let n = Nvrtc::load_for(&only12, Some(12)).unwrap();
        assert_eq!(n.version().0, 12);
        assert!(Nvrtc::load_for(&only12, None).is_ok());
        // Only a newer one here: named, with what to install.
        let e = Nvrtc::load_for(&only12, Some(11))
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.starts_with("libnvrtc.so.12 (NVRTC 12.")
                && e.contains("newer than the CUDA driver (11.x)")
                && e.contains("nvidia-cuda-nvrtc-cu11"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_library_is_an_error_naming_what_was_tried() {
        let e = Nvrtc::load(&["libnvrtc-not-here.so.99", "bad\0name"]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("libnvrtc-not-here.so.99"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
        assert!(text.contains("nvidia-cuda-nvrtc-cu12"), "{text}");
        // The dynamic linker's reason, not libloading's generic words.
        assert!(
            text.contains("libnvrtc-not-here.so.99: cannot open"),
            "{text}"
        );
    }

    #[test]
    fn a_library_without_nvrtc_symbols_is_an_error() {
        let e = Nvrtc::load(&["libc.so.6"]).unwrap_err();
        assert_eq!(
            e,
            LoadError::MissingSymbol {
                soname: "libc.so.6".into(),
                symbol: "nvrtcVersion".into()
            }
        );
    }

    #[test]
    fn entry_points_are_read_from_ptx() {
        let ptx = Image::Ptx(
            "//\n.version 8.8\n.visible .entry cb_fill(\n\t.param .u64 a\n)\n\
                        .visible .entry cb_verify()\n.func helper()\n"
                .into(),
        );
        assert_eq!(ptx.entry_points(), vec!["cb_fill", "cb_verify"]);
        assert_eq!(
            ptx.missing_entry_points(&["cb_fill", "cb_poison", "cb_verify"]),
            vec!["cb_poison"]
        );
    }

    /// Compiles when NVRTC is present; says why not otherwise.
    #[test]
    fn compiles_a_kernel_and_reports_errors_with_the_log() {
        let nvrtc = match Nvrtc::get() {
            Ok(n) => n,
            Err(e) if std::env::var("COLLBENCH_REQUIRE_NVRTC").is_ok_and(|v| v == "1") => {
                panic!("COLLBENCH_REQUIRE_NVRTC=1 but {e}")
            }
            Err(e) => {
                eprintln!("skipped (no NVRTC): {e}");
                return;
            }
        };
        assert!(nvrtc.version().0 >= 11);
        assert_eq!(nvrtc.supports(80), Some(true));
        assert_eq!(nvrtc.supports(200), Some(false));
        let opts = vec!["--gpu-architecture=compute_80".to_string()];
        let ptx = nvrtc
            .compile(
                "extern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 1; }",
                "k.cu",
                &opts,
            )
            .unwrap();
        assert_eq!(ptx.entry_points(), vec!["k"]);
        // A real architecture: a cubin holding the kernel's symbol.
        let sass = vec!["--gpu-architecture=sm_80".to_string()];
        let cubin = nvrtc
            .compile(
                "extern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 1; }",
                "k.cu",
                &sass,
            )
            .unwrap();
        assert_eq!(cubin.kind(), "cubin");
        assert!(cubin.bytes().starts_with(b"\x7fELF"), "not an ELF image");
        assert_eq!(cubin.missing_entry_points(&["k", "absent"]), vec!["absent"]);
        let e = nvrtc
            .compile("this is not C++", "bad.cu", &opts)
            .unwrap_err();
        assert!(e.message.contains("nvrtcCompileProgram"), "{e:?}");
        assert!(e.log.contains("bad.cu"), "{e:?}");
        let e = nvrtc.compile("a\0b", "nul.cu", &opts).unwrap_err();
        assert!(e.message.contains("NUL"), "{e:?}");
    }
}
