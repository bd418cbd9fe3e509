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
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The runtime compiled after the kernels.
const RUNTIME: &str = include_str!("../../../../../../kernels/emu.cpp");

type EntryFn = unsafe extern "C" fn(*const c_char) -> c_int;
type ArgSizesFn = unsafe extern "C" fn(c_int, *mut u64, c_int) -> c_int;
type RunFn = unsafe extern "C" fn(c_int, *mut *mut c_void, u32, u32, u32) -> c_int;

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

/// How long the C++ compiler may work on one variant before it is stopped,
/// unless `COLLBENCH_EMU_CXX_SECONDS` says otherwise: a build takes seconds
/// to a minute, and a compiler that waits on something that never comes (a
/// license server, a network cache, a lock) would otherwise hold the run
/// forever, ahead of any collective the timeout could catch.
const CXX_LIMIT: Duration = Duration::from_secs(600);

/// The variable that sets the compiler's limit, in seconds.
const CXX_LIMIT_VAR: &str = "COLLBENCH_EMU_CXX_SECONDS";

/// The compiler's limit this process's environment sets.
fn cxx_limit_from_env() -> Result<Duration, String> {
    cxx_limit(std::env::var(CXX_LIMIT_VAR).ok().as_deref())
}

/// The compiler's limit from `value` of [`CXX_LIMIT_VAR`] (unset or empty:
/// [`CXX_LIMIT`]); a bad value is named with what it takes.
fn cxx_limit(value: Option<&str>) -> Result<Duration, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(CXX_LIMIT);
    };
    v.parse::<u64>()
        .ok()
        .filter(|s| (1..=86_400).contains(s))
        .map(Duration::from_secs)
        .ok_or_else(|| {
            format!("{CXX_LIMIT_VAR}={v:?}: expected whole seconds from 1 to 86400 (how long the C++ compiler may build one variant)")
        })
}

/// How long `CXX --version` may take.
const VERSION_LIMIT: Duration = Duration::from_secs(60);

/// Kills `child` and the processes it started, still its descendants:
/// the driver is stopped first, so it starts no more, then each descendant
/// as it is found, and all of them killed (reparented to init, a killed
/// driver's children would have run on).
fn kill_tree(child: &mut std::process::Child) {
    let root = i32::try_from(child.id()).unwrap_or(0);
    if root > 0 {
        // SAFETY: signals to a process this one started and has not yet
        // waited for (its id is not reused before the wait below).
        unsafe { libc::kill(root, libc::SIGSTOP) };
        let mut found = Vec::new();
        let mut frontier = vec![root];
        while let Some(p) = frontier.pop() {
            for kid in children(p) {
                if !found.contains(&kid) {
                    // SAFETY: a live process found as the child's descendant.
                    unsafe { libc::kill(kid, libc::SIGSTOP) };
                    found.push(kid);
                    frontier.push(kid);
                }
            }
        }
        for p in found {
            // SAFETY: as above.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The processes whose parent is `pid` (from `/proc`; none where it is
/// not readable).
fn children(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let p: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": the name may hold spaces and
            // parentheses, so the fields are counted after the last ')'.
            let (_, rest) = stat.rsplit_once(')')?;
            let ppid: i32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(p)
        })
        .collect()
}

/// Why a bounded command gave no output.
#[derive(Debug)]
enum NoOutput {
    /// It could not be started (or waited for).
    Io(std::io::Error),
    /// It ran past its limit and was killed.
    Overran(Duration),
}

/// `cmd`'s output (stdin empty), or [`NoOutput::Overran`] once it has run
/// for `limit`: then it is killed with every process it started (a
/// driver's cc1plus, as, ld) and its output left behind.
fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, NoOutput> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(NoOutput::Io)?;
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = Instant::now();
    // Polled often at first (`--version` ends within milliseconds, before
    // every library is loaded), then every 20 ms.
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= limit => {
                kill_tree(&mut child);
                return Err(NoOutput::Overran(limit));
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                let _ = child.kill();
                return Err(NoOutput::Io(e));
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
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
    if let Some(d) = &home {
        match std::fs::create_dir_all(d) {
            Ok(()) => {
                tracing::debug!(dir = %d.display(), "emulated kernel cache folder");
                return home;
            }
            // Said once, at -v: the builds go on in a temporary folder.
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(
                        dir = %d.display(),
                        error = %e,
                        "emulated kernel cache folder cannot be made: builds go to a temporary folder"
                    )
                });
            }
        }
    }
    let tmp = temporary_cache_dir();
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&tmp);
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let meta = std::fs::symlink_metadata(&tmp).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0;
    if private {
        tracing::debug!(dir = %tmp.display(), "emulated kernel cache folder (temporary)");
    } else {
        tracing::debug!(dir = %tmp.display(), "emulated kernel cache folder refused: not private to this user");
    }
    private.then_some(tmp)
}

/// The private temporary folder builds fall back to.
fn temporary_cache_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("collbench-{uid}-emu"))
}

/// The C++ compiler the emulated device builds with: `$CXX` (a command
/// line: its first word runs, the others come first among its arguments),
/// else `c++`.
struct Cxx {
    line: String,
    prog: String,
    pre: Vec<String>,
}

impl Cxx {
    fn from_env() -> Cxx {
        let line = std::env::var("CXX")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "c++".into());
        let mut words = line.split_whitespace().map(String::from);
        let prog = words.next().unwrap_or_else(|| "c++".into());
        Cxx {
            pre: words.collect(),
            prog,
            line,
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.prog);
        c.args(&self.pre);
        c
    }

    /// Why it cannot build, for `detail`.
    fn missing(&self, why: &str) -> String {
        format!(
            "cannot run the C++ compiler `{}` ({why}): the emulated device (--device cuda-emu) needs a C++ compiler; set CXX",
            self.line
        )
    }

    fn overran(&self, what: &str, limit: Duration) -> String {
        format!(
            "the C++ compiler `{}`{what} ran for more than {} s and was stopped: is it waiting on something (a license server, a network cache, a lock)? set CXX to a compiler that runs here, or {CXX_LIMIT_VAR} to give it longer",
            self.line,
            limit.as_secs()
        )
    }

    /// The first line of `--version` output.
    fn first_line(version: &[u8]) -> String {
        String::from_utf8_lossy(version)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    /// Its `--version` output, or why it does not run.
    fn version(&self) -> Result<Vec<u8>, String> {
        let out =
            output_within(self.command().arg("--version"), VERSION_LIMIT).map_err(|e| match e {
                NoOutput::Io(e) => self.missing(&e.to_string()),
                NoOutput::Overran(l) => self.overran(" (`--version`)", l),
            })?;
        if !out.status.success() {
            return Err(self.missing(&format!("`--version` failed: {}", out.status)));
        }
        Ok(out.stdout)
    }
}

/// What the emulated device would build with, for `collbench info`.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiler {
    /// `$CXX`, else `c++`.
    pub command: String,
    /// The first line of its `--version`, or why it does not run.
    pub version: Result<String, String>,
    /// How long it may build one variant, or why the setting is refused.
    pub limit: Result<Duration, String>,
    /// Where built libraries go: `<kernels cache>/emu`, or the private
    /// temporary folder a build falls back to when there is none or it
    /// cannot be made.
    pub cache_dir: PathBuf,
    /// The kernels cache's `emu` folder that cannot be made, and why.
    pub unusable: Option<(PathBuf, String)>,
}

/// The compiler the emulated device would build with, run once for its
/// version.
pub fn compiler() -> Compiler {
    let cxx = Cxx::from_env();
    let home = kernels::default_cache_dir().map(|d| d.join("emu"));
    let unusable = home.as_ref().and_then(|d| {
        kernels::writable_without_making(d)
            .err()
            .map(|why| (d.clone(), why))
    });
    Compiler {
        version: cxx.version().map(|v| Cxx::first_line(&v)),
        command: cxx.line,
        limit: cxx_limit_from_env(),
        // Where builds would go, without making the folder (`info` changes nothing).
        cache_dir: home
            .clone()
            .filter(|_| unusable.is_none())
            .unwrap_or_else(temporary_cache_dir),
        unusable,
    }
}

/// A sanitizer the compiler line `cxx` builds with whose runtime must be
/// loaded before any library using it, and is not in this process: (its
/// name, its runtime library). UndefinedBehaviorSanitizer's comes with the
/// library; the others' end the process as the library loads.
fn runtime_missing(cxx: &str) -> Option<(&'static str, &'static str)> {
    const FIRST: [(&str, &str, &str); 4] = [
        ("address", "__asan_init", "libasan.so"),
        ("thread", "__tsan_init", "libtsan.so"),
        ("memory", "__msan_init", "libmsan.so"),
        ("hwaddress", "__hwasan_init", "libhwasan.so"),
    ];
    let loaded = |symbol: &str| {
        let Ok(c) = std::ffi::CString::new(symbol) else {
            return false;
        };
        // SAFETY: dlsym with the default handle and a NUL-terminated name.
        !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) }.is_null()
    };
    // As the compiler reads them: a later -fno-sanitize= takes one back.
    let mut on: Vec<&(&str, &str, &str)> = Vec::new();
    for w in cxx.split_whitespace() {
        let (list, add) = match (
            w.strip_prefix("-fsanitize="),
            w.strip_prefix("-fno-sanitize="),
        ) {
            (Some(l), _) => (l, true),
            (_, Some(l)) => (l, false),
            _ => continue,
        };
        for s in list.split(',') {
            on.retain(|(name, _, _)| *name != s);
            if let (true, Some(f)) = (add, FIRST.iter().find(|(name, _, _)| *name == s)) {
                on.push(f);
            }
        }
    }
    on.into_iter()
        .find(|(_, symbol, _)| !loaded(symbol))
        .map(|&(name, _, lib)| (name, lib))
}

/// Builds (or finds in the disk cache) and loads `variant`'s library.
fn build(variant: Variant) -> Result<Library, DevError> {
    static UNIQUE: AtomicU64 = AtomicU64::new(0);
    let call = format!("building the emulated kernels ({variant})");
    let fail = |detail: String| DevError::new(&call, detail);
    let compiler = Cxx::from_env();
    let cxx = &compiler.line;
    let version = compiler.version().map_err(fail)?;
    tracing::debug!(
        %variant,
        cxx = %cxx,
        version = %Cxx::first_line(&version),
        "emulated kernels: C++ compiler"
    );
    if let Some((name, lib)) = runtime_missing(cxx) {
        // clang names its runtimes libclang_rt.asan and so on.
        let clang = lib.trim_start_matches("lib").trim_end_matches(".so");
        return Err(fail(format!(
            "`{cxx}` builds the emulated kernels with the {name} sanitizer, whose runtime must be in the process before them (a library built so ends the process as it loads): preload it, with g++ LD_PRELOAD=$(g++ -print-file-name={lib}), with clang its libclang_rt.{clang} library"
        )));
    }
    let limit = cxx_limit_from_env().map_err(fail)?;
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
    let key = h.field(&version).field(src.as_bytes()).finish();
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
    let out = output_within(
        compiler.command().args(&opts).arg(&cpp).arg("-o").arg(&tmp),
        limit,
    );
    let _ = std::fs::remove_file(&cpp);
    let out = out.map_err(|e| match e {
        NoOutput::Io(e) => fail(compiler.missing(&e.to_string())),
        NoOutput::Overran(l) => {
            let _ = std::fs::remove_file(&tmp);
            fail(compiler.overran("", l))
        }
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizers_whose_runtime_must_come_first_are_named() {
        // The test process has no sanitizer runtime.
        for (line, want) in [
            ("c++ -O2", None),
            ("c++ -fsanitize=undefined", None),
            (
                "c++ -fsanitize=undefined,address -g",
                Some(("address", "libasan.so")),
            ),
            ("clang++ -fsanitize=thread", Some(("thread", "libtsan.so"))),
            ("c++ -fsanitize=memory", Some(("memory", "libmsan.so"))),
            ("c++ -fsanitize-recover=address", None),
            (
                "c++ -fsanitize=address,undefined -fno-sanitize=address",
                None,
            ),
            (
                "c++ -fno-sanitize=address -fsanitize=address",
                Some(("address", "libasan.so")),
            ),
        ] {
            assert_eq!(runtime_missing(line), want, "{line}");
        }
    }

    #[test]
    fn a_command_past_its_limit_is_stopped_and_one_within_gives_its_output() {
        let start = Instant::now();
        let r = output_within(
            Command::new("sh").args(["-c", "echo started; exec sleep 30"]),
            Duration::from_millis(300),
        );
        assert!(
            matches!(r, Err(NoOutput::Overran(l)) if l == Duration::from_millis(300)),
            "{r:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );

        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(30),
        )
        .expect("sh runs");
        assert_eq!(
            (out.status.code(), &out.stdout[..], &out.stderr[..]),
            (Some(3), &b"out\n"[..], &b"err\n"[..])
        );
        assert!(matches!(
            output_within(
                &mut Command::new("/nonexistent/cxx"),
                Duration::from_secs(1)
            ),
            Err(NoOutput::Io(_))
        ));
    }

    #[test]
    fn the_compilers_limit_comes_from_the_environment() {
        assert_eq!(cxx_limit(None), Ok(CXX_LIMIT));
        assert_eq!(cxx_limit(Some(" ")), Ok(CXX_LIMIT));
        assert_eq!(cxx_limit(Some(" 90 ")), Ok(Duration::from_secs(90)));
        for bad in ["0", "-5", "1.5", "ten", "86401"] {
            let e = cxx_limit(Some(bad)).unwrap_err();
            assert!(e.contains(CXX_LIMIT_VAR) && e.contains(bad), "{bad}: {e}");
        }
    }
}
