//! Commands, end to end: a parsed command line in, an exit code out. This
//! is the only place that decides what goes to stdout and stderr.

mod analyze;
mod compare;
mod info;
mod qualify;
mod report;

use crate::cli::plan::{self, DeviceChoice, Sweep};
use crate::cli::{Cli, Command, RunArgs};
use crate::engine::exec::cuda::device as cuda_device;
use crate::engine::types::Collective;
use crate::harness;
use crate::launch::Mpi;
use crate::report::{csv::CsvSink, json::JsonSink, layout::LayoutSink, plot::PlotSink, warn};
use crate::report::{Fanout, Meta, Results, Sink};
use std::io::Write;

/// Exit codes (documented in README and `--help`).
pub const OK: i32 = 0;
pub const CHECK_FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const HANG: i32 = 3;
/// Stopped by SIGINT/SIGTERM (128 + SIGINT, as shells expect).
pub const INTERRUPTED: i32 = 130;

/// Runs a command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    // Before anything initialises the CUDA driver.
    crate::engine::exec::cuda::dev::real::prepare_env();
    let (coll, args) = match cli.command {
        Command::Info(a) => return info::info(&a),
        Command::Analyze(a) => return analyze::analyze(&a),
        Command::Report(a) => return report::report(&a),
        Command::Compare(a) => return compare::compare(&a),
        Command::Qualify(a) => return qualify::qualify(&a),
        Command::All(a) => (None, a),
        Command::AllReduce(a) => (Some(Collective::AllReduce), a),
        Command::AllGather(a) => (Some(Collective::AllGather), a),
        Command::ReduceScatter(a) => (Some(Collective::ReduceScatter), a),
        Command::Broadcast(a) => (Some(Collective::Broadcast), a),
        Command::Reduce(a) => (Some(Collective::Reduce), a),
        Command::AllToAll(a) => (Some(Collective::AllToAll), a),
        Command::Gather(a) => (Some(Collective::Gather), a),
        Command::Scatter(a) => (Some(Collective::Scatter), a),
        Command::SendRecv(a) => (Some(Collective::SendRecv), a),
    };
    sweep(coll, &args)
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("collbench: error: {msg}");
    USAGE
}

/// The engine's device, as `meta.device` names it, with a line for people
/// (for `auto`) and the devices used, as `meta.devices` lists them.
pub(crate) struct Chosen {
    pub device: String,
    pub note: Option<String>,
    pub devices: Vec<String>,
}

/// Whether NVRTC loads, or why not.
fn nvrtc_usable() -> Result<(), String> {
    crate::engine::exec::cuda::Nvrtc::get()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Picks the engine's device and fixes the plan's timing accordingly.
pub(crate) fn choose_device(s: &mut Sweep) -> Result<Chosen, String> {
    use crate::harness::{GpuKind, Timing};
    let ranks = s.plan.ranks;
    let gpus = |d: &cuda_device::Devices| -> Vec<String> {
        let n = d.devices.len().min(ranks).max(1);
        d.devices
            .iter()
            .take(n)
            .map(|x| {
                format!(
                    "GPU {}: {} ({}, {} SMs)",
                    x.ordinal, x.name, x.arch, x.multiprocessors
                )
            })
            .collect()
    };
    let (gpu, note, devices) = match s.device {
        DeviceChoice::Cuda => {
            let d = cuda_device::probe().map_err(|why| {
                format!("--device cuda: no usable GPU ({why}); use --device host, auto, or cuda-emu")
            })?;
            nvrtc_usable().map_err(|why| {
                format!("--device cuda needs NVRTC to compile its kernels: {why}")
            })?;
            (Some(GpuKind::Cuda), None, gpus(&d))
        }
        DeviceChoice::CudaEmu => {
            let cfg = crate::engine::exec::cuda::dev::emu::EmuConfig::from_env()
                .map_err(|e| format!("--device cuda-emu: {e}"))?;
            let n = cfg.gpus;
            (
                Some(GpuKind::Emu),
                None,
                vec![format!("{} x collbench emulated GPU (CPU threads)", n.min(ranks).max(1))],
            )
        }
        DeviceChoice::Host => (None, None, Vec::new()),
        DeviceChoice::Auto => match cuda_device::probe() {
            Ok(d) if !s.mpi_world => match nvrtc_usable() {
                Ok(()) => {
                    let used = gpus(&d);
                    let note = format!("running on the CUDA engine: {} ({ranks} ranks)", used.join(", "));
                    (Some(GpuKind::Cuda), Some(note), used)
                }
                Err(why) => (
                    None,
                    Some(format!(
                        "GPU found, but NVRTC is not usable ({why}): running on the host engine ({ranks} ranks)"
                    )),
                    Vec::new(),
                ),
            },
            Ok(_) => (
                None,
                Some(format!("under MPI each process runs on the host engine ({ranks} ranks)")),
                Vec::new(),
            ),
            Err(why) => (
                None,
                Some(format!("no usable GPU ({why}): running on the host engine ({ranks} ranks)")),
                Vec::new(),
            ),
        },
    };
    if gpu.is_some() && s.mpi_world {
        return Err("--device cuda under mpirun/srun is not supported yet: run one process with --ranks N (virtual ranks share GPUs), or --device host".into());
    }
    if let Some(e) = s.engines.iter().find(|e| {
        *e != "builtin"
            && !(*e == "mpi" && s.mpi_world && gpu.is_none())
            && !(*e == "nccl" && gpu.is_some())
    }) {
        return Err(match e.as_str() {
            "nccl" => "--engine nccl runs on the CUDA engine: add --device cuda (or cuda-emu for its stand-in)".into(),
            "mpi" if gpu.is_some() => "--engine mpi runs on the host engine only: add --device host".into(),
            "mpi" if cfg!(feature = "mpi") => "--engine mpi needs an MPI launch: mpirun -np N collbench ...".into(),
            "mpi" => "--engine mpi needs a build with MPI (cargo build --release --features mpi) and an MPI launch".into(),
            _ => format!("--engine {e}: not available in this build (it has: builtin{})", if cfg!(feature = "mpi") { ", mpi" } else { "" }),
        });
    }
    s.plan.timing =
        match (s.timing.as_deref(), gpu) {
            (Some("events"), None) => return Err(
                "--timing events needs the CUDA engine; the host engine times with the wall clock"
                    .into(),
            ),
            (Some("wall"), _) | (_, None) => Timing::Wall,
            _ => Timing::Events,
        };
    if s.graph && gpu.is_none() {
        return Err("--graph needs the CUDA engine (--device cuda or cuda-emu)".into());
    }
    s.plan.gpu = gpu;
    if gpu.is_none() && s.plan.channels == 0 {
        // The host engine's ranks are threads: one channel each keeps them busy.
        s.plan.channels = 1;
    }
    Ok(Chosen {
        device: gpu.map_or("host", |k| k.name()).into(),
        note,
        devices,
    })
}

/// Under MPI the world's size is the rank count.
fn world_args(args: &RunArgs, mpi: Option<&Mpi>) -> Result<RunArgs, String> {
    let Some(m) = mpi else {
        return Ok(args.clone());
    };
    if let Some(r) = args
        .ranks
        .as_deref()
        .filter(|r| r.trim() != m.size().to_string())
    {
        return Err(format!(
            "--ranks {r}: under MPI every process is one rank, and this world has {}",
            m.size()
        ));
    }
    let mut a = args.clone();
    a.ranks = Some(m.size().to_string());
    Ok(a)
}

/// Every MPI rank dumps into the folder rank 0 names.
fn agree_dump_dir(s: &mut Sweep, m: &Mpi) -> Result<(), String> {
    let mine = s.plan.dump_dir.clone().unwrap_or_else(|| {
        std::path::PathBuf::from("collbench-dumps").join(format!(
            "{}-{}",
            rfc3339_now().replace(':', ""),
            std::process::id()
        ))
    });
    // The trigger's name is unique to this run, so a stale one is never seen.
    let token = format!(
        "{}\n.collbench-abort-{}-{}",
        mine.display(),
        crate::recorder::wall_ns(),
        std::process::id()
    );
    let chosen = String::from_utf8_lossy(&m.broadcast(token.as_bytes())?).into_owned();
    let (dir, trigger) = chosen
        .split_once('\n')
        .ok_or("bad dump folder from rank 0")?;
    s.plan.dump_dir = Some(dir.into());
    s.plan.abort_trigger = Some(std::path::Path::new(dir).join(trigger));
    Ok(())
}

fn sweep(coll: Option<Collective>, args: &RunArgs) -> i32 {
    let mpi = match join_world() {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let leader = mpi.as_ref().is_none_or(|m| m.rank() == 0);
    let (mut s, chosen) = match prepare(coll, args, mpi.as_ref(), leader) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let room = budget(&s);
    let capped = room
        .and_then(|b| harness::cap_sizes_to_memory(&mut s.plan, b))
        .map(|c| warn::Warning::SizesCapped {
            kept_max: c.kept_max,
            dropped: c.dropped,
            available: c.available,
            ranks: s.plan.ranks,
        });
    let mut meta = meta(&s, &chosen);
    s.plan.run_info = crate::recorder::dump::RunInfo {
        host: meta.host.clone(),
        world_size: meta.world_size,
        device: meta.device.clone(),
        command: meta.command.clone(),
        version: meta.version.clone(),
    };
    let mut sink = match sinks(&s).and_then(|mut f| {
        f.start(&meta)
            .map(|_| f)
            .map_err(|e| format!("writing results: {e}"))
    }) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let result = harness::run(&s.plan, &mut sink, mpi.as_ref());
    if result
        .as_ref()
        .is_err_and(|e| e.is_hang() || e.is_interrupt())
    {
        // Requests of the hung collective are still pending: MPI_Finalize
        // could wait on them forever, so this process leaves without it.
        let _ = std::mem::ManuallyDrop::new(mpi);
    }
    meta.notes.extend(capped.iter().map(|w| w.to_string()));
    if let Ok(o) = &result {
        meta.notes.extend(o.notes.iter().cloned());
        meta.nccl = o.library.clone();
    }
    let results = Results::new(meta, std::mem::take(&mut sink.rows));
    if let Err(e) = sink.finish(&results) {
        return fail(format!("writing results: {e}"));
    }
    if leader {
        for w in capped.iter().chain(&warn::scan(&results.rows)) {
            eprintln!("collbench: warning: {w}");
        }
    }
    exit_code(result, leader)
}

/// Where the sweep's buffers live and the room there: the GPUs' free
/// memory on the CUDA engine (the most crowded device), else the host's;
/// `None` when the devices cannot be opened (the run then says why).
fn budget(s: &Sweep) -> Option<harness::Budget> {
    use crate::engine::exec::cuda::launch::{memory_budget, CudaOptions};
    let Some(kind) = s.plan.gpu else {
        return Some(harness::Budget::Host);
    };
    let opts = CudaOptions::new(
        kind,
        s.plan.host.slot_bytes,
        s.plan.timeout(),
        s.plan.timing,
    );
    let (free, ranks, extra) = memory_budget(kind, s.plan.ranks, &opts)?;
    Some(harness::Budget::Device { free, ranks, extra })
}

/// Joins the MPI world when launched into one; refuses a launcher's tasks
/// in a build that cannot join.
fn join_world() -> Result<Option<Mpi>, String> {
    let mpi = crate::launch::init_mpi()?;
    if mpi.is_none() {
        if let Some((launcher, n)) = crate::launch::foreign_launcher() {
            return Err(format!(
                "started by {launcher} as one of {n} tasks, but this build has no MPI support: each task would \
                 run its own independent world and print a misleading table. Rebuild with \
                 `cargo build --release --features mpi`, or run one task with --ranks N"
            ));
        }
    }
    Ok(mpi)
}

/// The validated sweep for this process, and the device it runs on.
fn prepare(
    coll: Option<Collective>,
    args: &RunArgs,
    mpi: Option<&Mpi>,
    leader: bool,
) -> Result<(Sweep, Chosen), String> {
    let mut s = world_args(args, mpi).and_then(|a| plan::build(coll, &a))?;
    if !leader {
        (s.quiet, s.json, s.csv, s.plot) = (true, None, None, None);
    }
    s.mpi_world = mpi.is_some();
    if let Some(m) = mpi {
        agree_dump_dir(&mut s, m)?;
    }
    let chosen = choose_device(&mut s)?;
    if let Some(n) = chosen.note.as_ref().filter(|_| leader) {
        eprintln!("collbench: {n}");
    }
    Ok((s, chosen))
}

/// The process's exit code, with the closing message for people.
fn exit_code(result: Result<harness::Outcome, harness::HarnessError>, leader: bool) -> i32 {
    match result {
        Ok(o) => {
            for n in o.notes.iter().filter(|_| leader) {
                eprintln!("collbench: note: {n}");
            }
            if o.bad_rows > 0 {
                eprintln!(
                    "collbench: {} row(s) had wrong or NaN/Inf values",
                    o.bad_rows
                );
                CHECK_FAILED
            } else {
                OK
            }
        }
        Err(e) if e.is_hang() => {
            eprintln!("collbench: {e}");
            HANG
        }
        Err(e) if e.is_interrupt() => {
            eprintln!("collbench: {e}");
            INTERRUPTED
        }
        Err(e) => fail(e),
    }
}

fn sinks(s: &Sweep) -> Result<Fanout, String> {
    let mut f = Fanout::default();
    if !s.quiet {
        let out = Box::new(|line: &str| {
            let mut o = std::io::stdout().lock();
            // A closed stdout (a pipe into `head`) is not an error worth dying for.
            let _ = writeln!(o, "{line}");
        });
        let names = s
            .plan
            .placements
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let layout = s.format.layout(names, s.verbose > 0, s.plan.sizes.clone());
        f.sinks.push(Box::new(LayoutSink::new(layout, out)));
    }
    if let Some(p) = &s.csv {
        let file = std::fs::File::create(p).map_err(|e| format!("--csv {}: {e}", p.display()))?;
        f.sinks.push(Box::new(
            CsvSink::new(file).map_err(|e| format!("--csv {}: {e}", p.display()))?,
        ));
    }
    if let Some(p) = &s.json {
        f.sinks.push(Box::new(
            JsonSink::create(p).map_err(|e| format!("--json {}: {e}", p.display()))?,
        ));
    }
    if let Some(p) = &s.plot {
        f.sinks.push(Box::new(PlotSink { path: p.clone() }));
    }
    Ok(f)
}

fn meta(s: &Sweep, chosen: &Chosen) -> Meta {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let devices = if chosen.devices.is_empty() {
        vec![format!("{} ({cores} cores)", cpu_model())]
    } else {
        chosen.devices.clone()
    };
    Meta {
        version: env!("CARGO_PKG_VERSION").into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        host: hostname(),
        started_at: rfc3339_now(),
        world_size: s.plan.ranks,
        device: chosen.device.clone(),
        devices,
        iters: s.plan.iters,
        warmup: s.plan.warmup,
        seed: s.plan.seed,
        timing: match s.plan.timing {
            crate::harness::Timing::Events => "events",
            crate::harness::Timing::Wall => "wall",
        }
        .into(),
        notes: Vec::new(),
        nccl: None,
    }
}

pub use crate::launch::hostname;

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
