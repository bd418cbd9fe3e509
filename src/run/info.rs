//! `collbench info`: what this build has and what this machine has.

use super::{cpu_model, hostname, OK};
use crate::cli::InfoArgs;
use crate::engine::probe;

pub fn info(a: &InfoArgs) -> i32 {
    let libs = probe::libraries();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = crate::engine::exec::mem::available_bytes();
    let v = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": {
            "engines": if cfg!(feature = "mpi") { vec!["builtin", "mpi"] } else { vec!["builtin"] },
            "executors": ["host"],
            "features": {"mpi": cfg!(feature = "mpi"), "cuda": false},
        },
        "machine": {
            "host": hostname(),
            "cpu": cpu_model(),
            "cores": cores,
            "mem_available_bytes": mem,
            "max_thread_ranks": crate::launch::max_thread_ranks(),
        },
        "libraries": libs,
        "devices": [],
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return OK;
    }
    println!("collbench {}", env!("CARGO_PKG_VERSION"));
    let mpi = if cfg!(feature = "mpi") {
        "yes (engines builtin, mpi)"
    } else {
        "no"
    };
    println!("build:    executors host; features: mpi {mpi}, cuda no");
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
        println!(
            "{:<9} {}",
            format!("{}:", l.name),
            l.found.unwrap_or_else(|| "not found".into())
        );
    }
    println!("devices:  none usable by this build (host engine)");
    OK
}
