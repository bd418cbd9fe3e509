//! `collbench info`: what this build has and what this machine has; with
//! `--compile-kernels`, whether every CUDA kernel variant compiles.
//! [`gather`] finds the facts, [`compile`] adds the kernels' report,
//! [`to_json`] and [`to_text`] render them.

use super::{cpu_model, hostname, CHECK_FAILED, OK, USAGE};
use crate::cli::InfoArgs;
use crate::engine::exec::cuda::dev::emu::{self, Compiler, EmuConfig};
use crate::engine::exec::cuda::{self, kernels, Arch, Cache, LoadError, Nvrtc, Report};
use crate::engine::probe::{self, Library};
use crate::report::grid;
use crate::units::Bytes;
use serde_json::{json, Value};

/// Failures shown with their whole log in the table; the rest get one line.
const FULL_LOGS: usize = 3;

/// Everything `info` says about this build and this machine.
pub struct Facts {
    pub host: String,
    pub cpu: String,
    pub cores: usize,
    pub mem_available: Option<u64>,
    pub max_thread_ranks: usize,
    /// The CUDA libraries looked for, and the sonames found.
    pub libraries: Vec<Library>,
    pub nvrtc: Result<&'static Nvrtc, LoadError>,
    pub cache: &'static Cache,
    /// The kernel cache's folder (none: memory only).
    pub cache_dir: Option<String>,
    /// The GPUs, or why none is usable.
    pub gpus: Result<cuda::device::Devices, cuda::device::Unusable>,
    /// With `--compile-kernels`: how every variant compiled.
    pub kernels: Option<Compiled>,
    /// What `--device cuda-emu` would run on.
    pub emulated: Emulated,
    /// Settings in the environment a sweep would refuse, each in the words
    /// of its refusal.
    pub bad_settings: Vec<String>,
}

/// The environment's settings a sweep refuses (exit 2), each as its
/// refusal says: `info` names them rather than show a machine that looks
/// ready.
fn bad_settings() -> Vec<String> {
    let mut bad = Vec::new();
    if let Err(e) = crate::engine::cpus::Bind::from_env() {
        bad.push(e);
    }
    if let Ok(v) = std::env::var("COLLBENCH_GPU_MAP") {
        if let (false, Err(e)) = (v.trim().is_empty(), crate::cli::values::gpu_map(&v)) {
            bad.push(format!("COLLBENCH_GPU_MAP: {e}"));
        }
    }
    if let Err(e) = crate::launch::force_relay_setting() {
        bad.push(e.to_string());
    }
    if let Err(e) = crate::engine::exec::mpi_in_place_staged() {
        bad.push(e);
    }
    if let Err(e) = crate::engine::exec::cuda::launch::EnvKnobs::from_env() {
        bad.push(e);
    }
    bad
}

/// The emulated device (`--device cuda-emu`): its devices' shape from
/// `COLLBENCH_EMU_*` (or the bad variable) and the C++ compiler it builds with.
pub struct Emulated {
    pub config: Result<EmuConfig, String>,
    pub compiler: Compiler,
}

impl Emulated {
    pub fn gather() -> Emulated {
        Emulated {
            config: EmuConfig::from_env().map_err(|e| e.detail),
            compiler: emu::compiler(),
        }
    }

    fn to_json(&self) -> Value {
        let c = &self.compiler;
        json!({
            "devices": match &self.config {
                Ok(cfg) => json!({
                    "gpus": cfg.gpus,
                    "multiprocessors": cfg.multiprocessors,
                    "blocks_per_sm": cfg.blocks_per_sm,
                    "memory_bytes": cfg.memory_bytes,
                    "block_threads": cfg.threads,
                    "hardware_queues": cfg.queues,
                }),
                Err(e) => json!({"error": e}),
            },
            "compiler": {
                "command": c.command,
                "version": c.version.as_ref().ok(),
                "error": c.version.as_ref().err(),
                "limit_seconds": c.limit.as_ref().ok().map(|l| l.as_secs()),
                "limit_error": c.limit.as_ref().err(),
            },
            "cache_dir": c.cache_dir.display().to_string(),
            "cache_unusable": c.unusable.as_ref().map(|(d, why)| json!({"dir": d.display().to_string(), "why": why})),
        })
    }

    /// Its lines of the table: the devices, the compiler.
    fn rows(&self) -> [[String; 2]; 2] {
        let devices = match &self.config {
            Ok(c) => format!(
                "--device cuda-emu: {} devices x {} SMs x {} blocks per SM, {} each; blocks of up to {} thread{}",
                c.gpus,
                c.multiprocessors,
                c.blocks_per_sm,
                Bytes(c.memory_bytes),
                c.threads,
                if c.threads == 1 { "" } else { "s" }
            ),
            Err(e) => format!("--device cuda-emu refused: {e}"),
        };
        let c = &self.compiler;
        let mut compiler = match &c.version {
            Ok(v) => format!("C++ compiler `{}` ({v})", c.command),
            Err(e) => e.clone(),
        };
        match &c.limit {
            Ok(l) => compiler.push_str(&format!(", {} s a variant", l.as_secs())),
            Err(e) => compiler.push_str(&format!("; {e}")),
        }
        if c.version.is_ok() {
            compiler.push_str(&format!(
                ", cache in {}",
                on_one_line(&c.cache_dir.display().to_string())
            ));
            if let Some((d, why)) = &c.unusable {
                compiler.push_str(&on_one_line(&format!(" ({}: {why})", d.display())));
            }
        }
        [
            ["emulated:".to_string(), devices],
            [String::new(), compiler],
        ]
    }
}

/// The outcome of `--compile-kernels`.
pub struct Compiled {
    pub report: Report,
    /// Why this architecture was chosen, when nobody chose it.
    pub note: Option<String>,
}

/// Why `--compile-kernels` could not start.
#[derive(Debug, thiserror::Error)]
pub enum CompileKernelsError {
    #[error("--compile-kernels: {0}")]
    NoNvrtc(String),
    #[error(
        "--arch {arch}: NVRTC {version} ({soname}) cannot compile for it; it supports {known}"
    )]
    Unsupported {
        arch: Arch,
        version: String,
        soname: String,
        known: String,
    },
}

/// Probes the build, the machine, its CUDA libraries and GPUs.
pub fn gather() -> Facts {
    let cache = Cache::process();
    Facts {
        host: hostname(),
        cpu: cpu_model(),
        cores: crate::engine::cpus::cores(),
        mem_available: crate::engine::exec::mem::available_bytes(),
        max_thread_ranks: crate::launch::max_thread_ranks(),
        libraries: probe::libraries(),
        nvrtc: Nvrtc::get(),
        cache,
        cache_dir: cache.dir().map(|d| d.display().to_string()),
        gpus: cuda::device::probe(),
        kernels: None,
        emulated: Emulated::gather(),
        bad_settings: bad_settings(),
    }
}

/// Compiles every kernel variant for `arch` (else the GPU's, else the
/// default), saying on stderr what was chosen and what went wrong with the
/// cache.
pub fn compile(facts: &Facts, arch: Option<Arch>) -> Result<Compiled, CompileKernelsError> {
    let nv = match &facts.nvrtc {
        Ok(n) => *n,
        Err(e) => return Err(CompileKernelsError::NoNvrtc(e.to_string())),
    };
    let (arch, note) = choose_arch(arch, facts.gpus.as_ref().ok());
    if nv.supports(arch.cc) == Some(false) {
        let known = nv.archs().unwrap_or_default();
        return Err(CompileKernelsError::Unsupported {
            arch,
            version: version(nv.version()),
            soname: nv.soname().to_string(),
            known: known
                .iter()
                .map(|cc| format!("sm_{cc}"))
                .collect::<Vec<_>>()
                .join(" "),
        });
    }
    if let Some(n) = &note {
        say!("collbench: note: {n}");
    }
    let threads = facts.cores.min(kernels::Variant::all().len());
    // What the GPU at hand loads (cubins for it); PTX for an architecture
    // named without one here.
    let gpu_here = facts.gpus.as_ref().ok().and_then(cuda::gpu_arch) == Some(arch);
    let code = match gpu_here {
        true => kernels::Code::for_gpu(nv.makes_cubins()),
        false => kernels::Code::Ptx,
    };
    let report = kernels::compile_all(nv, facts.cache, arch, code, threads);
    for w in &report.warnings {
        say!("collbench: warning: {w}");
    }
    Ok(Compiled { report, note })
}

pub fn info(a: &InfoArgs) -> i32 {
    let mut facts = gather();
    if a.compile_kernels {
        match compile(&facts, a.arch) {
            Ok(k) => facts.kernels = Some(k),
            Err(e) => {
                say!("collbench: error: {e}");
                return USAGE;
            }
        }
    }
    if a.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&to_json(&facts)).unwrap_or_default()
        );
    } else {
        out_part!("{}", to_text(&facts));
    }
    match &facts.kernels {
        Some(k) if !k.report.failed.is_empty() => CHECK_FAILED,
        _ => OK,
    }
}

/// The facts as `info --json` prints them.
pub fn to_json(f: &Facts) -> Value {
    let mut v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": {
            "engines": if cfg!(feature = "mpi") { vec!["builtin", "nccl", "mpi"] } else { vec!["builtin", "nccl"] },
            "executors": ["host", "cuda", "cuda-emu"],
            "features": {"mpi": cfg!(feature = "mpi"), "cuda": true},
        },
        "machine": {
            "host": f.host,
            "cpu": f.cpu,
            "cores": f.cores,
            "mem_available_bytes": f.mem_available,
            "max_thread_ranks": f.max_thread_ranks,
        },
        "libraries": f.libraries,
        "nvrtc": match &f.nvrtc {
            Ok(n) => json!({"library": n.soname(), "version": version(n.version())}),
            Err(e) => json!({"library": null, "version": null, "error": e.to_string()}),
        },
        "kernel_cache": {
            "dir": f.cache_dir,
            "unusable": f.cache_dir.as_deref().and_then(|d| kernels::writable_without_making(std::path::Path::new(d)).err()),
        },
        "devices": match &f.gpus {
            Ok(g) => json!(g.devices),
            Err(_) => json!([]),
        },
        "gpu": match &f.gpus {
            Ok(g) => json!({"driver": version(g.driver), "p2p": g.p2p}),
            Err(why) => json!({"driver": null, "unusable": why}),
        },
    });
    v["emulated"] = f.emulated.to_json();
    v["bad_settings"] = json!(f.bad_settings);
    if let Some(k) = &f.kernels {
        v["kernels"] = kernels_json(&k.report, k.note.as_deref());
    }
    v
}

/// The GPUs' rows of the facts for people: the driver, each device, their
/// P2P matrix and which engine runs use; or why none is usable.
fn gpu_rows(t: &mut grid::Table, f: &Facts) {
    match &f.gpus {
        Ok(g) => {
            t.add_row(["driver:".to_string(), format!("CUDA {}", version(g.driver))]);
            for d in &g.devices {
                t.add_row([
                    format!("device {}:", d.ordinal),
                    format!(
                        "{} ({}, {} SMs, {})",
                        d.name,
                        d.arch,
                        d.multiprocessors,
                        Bytes(d.memory_bytes)
                    ),
                ]);
            }
            if g.devices.len() > 1 {
                t.add_row(["p2p:", "(row can access column)"]);
                for (a, row) in g.p2p.iter().enumerate() {
                    let cells: Vec<&str> = row.iter().map(|&p| if p { "Y" } else { "." }).collect();
                    t.add_row([String::new(), format!("{a:>3}: {}", cells.join(" "))]);
                }
            }
            let how = if f.nvrtc.is_ok() {
                "runs use the CUDA engine (--device auto or cuda)"
            } else {
                "NVRTC is missing, so runs use the host engine"
            };
            t.add_row([String::new(), format!("({how})")]);
        }
        Err(why) => {
            t.add_row([
                "devices:".to_string(),
                format!("none usable ({why}); runs use the host engine"),
            ]);
        }
    }
}

/// The facts for people: a title line, then a plain table of what and how.
pub fn to_text(f: &Facts) -> String {
    let mut t = grid::plain();
    let mpi = if cfg!(feature = "mpi") {
        "yes (engines builtin, mpi)"
    } else {
        "no"
    };
    t.add_row(["build:".to_string(), format!("executors host, cuda, cuda-emu; features: mpi {mpi}, cuda yes (libraries found at run time)")]);
    t.add_row([
        "machine:".to_string(),
        format!(
            "{} ({} cores, {} available memory)",
            f.cpu,
            f.cores,
            f.mem_available
                .map_or("unknown".into(), |m| Bytes(m).to_string())
        ),
    ]);
    t.add_row([
        "ranks:".to_string(),
        format!("up to {} thread ranks on this host", f.max_thread_ranks),
    ]);
    for l in &f.libraries {
        let found = l.found.clone().unwrap_or_else(|| "not found".into());
        let found = match (&f.nvrtc, l.name) {
            (Ok(n), "nvrtc") => format!("{found} (NVRTC {})", version(n.version())),
            _ => found,
        };
        t.add_row([format!("{}:", l.name), found]);
    }
    let kernels = match &f.cache_dir {
        None => "cache in memory only (no HOME, XDG_CACHE_HOME or COLLBENCH_CACHE_DIR)".into(),
        Some(d) => match kernels::writable_without_making(std::path::Path::new(d)) {
            Ok(()) => format!("cache in {}", on_one_line(d)),
            Err(why) => on_one_line(&format!("cache in memory only ({d}: {why})")),
        },
    };
    t.add_row(["kernels:".to_string(), kernels]);
    if let Some(k) = &f.kernels {
        t.add_rows(report_rows(&k.report));
    }
    gpu_rows(&mut t, f);
    t.add_rows(f.emulated.rows());
    for (i, bad) in f.bad_settings.iter().enumerate() {
        let label = if i == 0 { "settings:" } else { "" };
        t.add_row([
            label.to_string(),
            on_one_line(&format!("{bad} (a sweep refuses it)")),
        ]);
    }
    format!(
        "collbench {}\n{}",
        env!("CARGO_PKG_VERSION"),
        grid::render(t, &[], 1)
    )
}

/// The architecture to compile for: `--arch`, else the GPU's, else the
/// default with a note saying so.
fn choose_arch(
    asked: Option<Arch>,
    gpus: Option<&cuda::device::Devices>,
) -> (Arch, Option<String>) {
    if let Some(a) = asked {
        return (a, None);
    }
    match gpus.and_then(cuda::gpu_arch) {
        Some(a) => (a, None),
        None => (
            Arch::DEFAULT,
            Some(format!(
                "no usable GPU: compiling for {} (choose with --arch)",
                Arch::DEFAULT
            )),
        ),
    }
}

fn version((major, minor): (i32, i32)) -> String {
    format!("{major}.{minor}")
}

fn kernels_json(r: &Report, note: Option<&str>) -> Value {
    let failed: Vec<Value> = r
        .failed
        .iter()
        .map(|(v, e)| json!({"variant": v.to_string(), "error": e.detail()}))
        .collect();
    let mut k = json!({
        "compiled": r.compiled,
        "failed": failed,
        "arch": r.arch.to_string(),
        "code": r.code.name(),
        "nvrtc": version(r.nvrtc_version),
        "cached": r.cached,
        "seconds": (r.seconds * 1000.0).round() / 1000.0,
        "warnings": r.warnings,
    });
    if let Some(n) = note {
        k["note"] = json!(n);
    }
    k
}

/// The kernels' table rows: a summary, then each failure (the first few
/// with their whole log).
fn report_rows(r: &Report) -> Vec<[String; 2]> {
    let total = r.compiled + r.failed.len();
    let cached = if r.cached > 0 {
        format!(" ({} from the cache)", r.cached)
    } else {
        String::new()
    };
    let mut rows = vec![[
        "kernels:".to_string(),
        format!(
            "{} of {total} variants compiled for {} ({}) with NVRTC {}{cached} in {:.1} s{}",
            r.compiled,
            r.arch,
            r.code.name(),
            version(r.nvrtc_version),
            r.seconds,
            if r.failed.is_empty() {
                String::new()
            } else {
                format!("; {} failed:", r.failed.len())
            }
        ),
    ]];
    for (i, (v, e)) in r.failed.iter().enumerate() {
        let why = if i < FULL_LOGS {
            e.detail()
        } else {
            e.message.clone()
        };
        rows.push([String::new(), format!("{v}: {why}")]);
    }
    rows
}

/// A path (or a message naming one) kept on its table line: a newline or
/// carriage return in it is shown escaped.
fn on_one_line(text: &str) -> String {
    text.replace('\n', "\\n").replace('\r', "\\r")
}
