//! `collbench info`: what this build has and what this machine has; with
//! `--compile-kernels`, whether every CUDA kernel variant compiles.

use super::{cpu_model, hostname, CHECK_FAILED, OK, USAGE};
use crate::cli::InfoArgs;
use crate::engine::exec::cuda::{self, kernels, Arch, Cache, Nvrtc, Report};
use crate::engine::probe;
use serde_json::{json, Value};

/// Failures shown with their whole log in the table; the rest get one line.
const FULL_LOGS: usize = 3;

pub fn info(a: &InfoArgs) -> i32 {
    let libs = probe::libraries();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = crate::engine::exec::mem::available_bytes();
    let nvrtc = Nvrtc::get();
    let cache = Cache::process();
    let cache_dir = cache.dir().map(|d| d.display().to_string());
    let gpus = cuda::device::probe();
    let mut v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": {
            "engines": if cfg!(feature = "mpi") { vec!["builtin", "nccl", "mpi"] } else { vec!["builtin", "nccl"] },
            "executors": ["host", "cuda", "cuda-emu"],
            "features": {"mpi": cfg!(feature = "mpi"), "cuda": true},
        },
        "machine": {
            "host": hostname(),
            "cpu": cpu_model(),
            "cores": cores,
            "mem_available_bytes": mem,
            "max_thread_ranks": crate::launch::max_thread_ranks(),
        },
        "libraries": libs,
        "nvrtc": match &nvrtc {
            Ok(n) => json!({"library": n.soname(), "version": version(n.version())}),
            Err(e) => json!({"library": null, "version": null, "error": e.to_string()}),
        },
        "kernel_cache": {"dir": cache_dir},
        "devices": match &gpus {
            Ok(g) => json!(g.devices),
            Err(_) => json!([]),
        },
        "gpu": match &gpus {
            Ok(g) => json!({"driver": version(g.driver), "p2p": g.p2p}),
            Err(why) => json!({"driver": null, "unusable": why}),
        },
    });

    let mut code = OK;
    let mut compiled = None;
    if a.compile_kernels {
        let nv = match &nvrtc {
            Ok(n) => *n,
            Err(e) => {
                eprintln!("collbench: error: --compile-kernels: {e}");
                return USAGE;
            }
        };
        let (arch, note) = choose_arch(a.arch, gpus.as_ref().ok());
        if nv.supports(arch.cc) == Some(false) {
            let known = nv.archs().unwrap_or_default();
            eprintln!(
                "collbench: error: --arch {arch}: NVRTC {} ({}) cannot compile for it; it supports {}",
                version(nv.version()),
                nv.soname(),
                known
                    .iter()
                    .map(|cc| format!("sm_{cc}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            return USAGE;
        }
        if let Some(n) = &note {
            eprintln!("collbench: note: {n}");
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(kernels::Variant::all().len());
        let r = kernels::compile_all(nv, cache, arch, threads);
        for w in &r.warnings {
            eprintln!("collbench: warning: {w}");
        }
        if !r.failed.is_empty() {
            code = CHECK_FAILED;
        }
        v["kernels"] = kernels_json(&r, note.as_deref());
        compiled = Some(r);
    }

    if a.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return code;
    }
    println!("collbench {}", env!("CARGO_PKG_VERSION"));
    let mpi = if cfg!(feature = "mpi") {
        "yes (engines builtin, mpi)"
    } else {
        "no"
    };
    println!("build:    executors host, cuda, cuda-emu; features: mpi {mpi}, cuda yes (libraries found at run time)");
    println!(
        "machine:  {} ({} cores, {} available memory)",
        cpu_model(),
        cores,
        mem.map_or("unknown".into(), |m| crate::units::Bytes(m).to_string())
    );
    println!(
        "ranks:    up to {} thread ranks on this host",
        crate::launch::max_thread_ranks()
    );
    for l in libs {
        let found = l.found.unwrap_or_else(|| "not found".into());
        let found = match (&nvrtc, l.name) {
            (Ok(n), "nvrtc") => format!("{found} (NVRTC {})", version(n.version())),
            _ => found,
        };
        println!("{:<9} {found}", format!("{}:", l.name));
    }
    println!(
        "kernels:  cache in {}",
        cache_dir
            .as_deref()
            .unwrap_or("memory only (no HOME, XDG_CACHE_HOME or COLLBENCH_CACHE_DIR)")
    );
    if let Some(r) = &compiled {
        print_report(r);
    }
    match &gpus {
        Ok(g) => {
            println!("driver:   CUDA {}", version(g.driver));
            for d in &g.devices {
                println!(
                    "device {}: {} ({}, {} SMs, {})",
                    d.ordinal,
                    d.name,
                    d.arch,
                    d.multiprocessors,
                    crate::units::Bytes(d.memory_bytes)
                );
            }
            if g.devices.len() > 1 {
                println!("p2p:      (row can access column)");
                for (a, row) in g.p2p.iter().enumerate() {
                    let cells: Vec<&str> = row.iter().map(|&p| if p { "Y" } else { "." }).collect();
                    println!("  {a:>3}: {}", cells.join(" "));
                }
            }
            let how = if nvrtc.is_ok() {
                "runs use the CUDA engine (--device auto or cuda)"
            } else {
                "NVRTC is missing, so runs use the host engine"
            };
            println!("          ({how})");
        }
        Err(why) => println!("devices:  none usable ({why}); runs use the host engine"),
    }
    code
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

fn print_report(r: &Report) {
    let total = r.compiled + r.failed.len();
    let cached = if r.cached > 0 {
        format!(" ({} from the cache)", r.cached)
    } else {
        String::new()
    };
    println!(
        "kernels:  {} of {total} variants compiled for {} with NVRTC {}{cached} in {:.1} s{}",
        r.compiled,
        r.arch,
        version(r.nvrtc_version),
        r.seconds,
        if r.failed.is_empty() {
            String::new()
        } else {
            format!("; {} failed:", r.failed.len())
        }
    );
    for (i, (v, e)) in r.failed.iter().enumerate() {
        if i < FULL_LOGS {
            println!("  {v}: {}", e.detail().replace('\n', "\n    "));
        } else {
            println!("  {v}: {}", e.message);
        }
    }
}
