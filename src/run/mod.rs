//! Commands, end to end: a parsed command line in, an exit code out. This
//! is the only place that decides what goes to stdout and stderr, and what
//! needs the world or the machine (the device, the MPI world's size, the
//! dump folder, the run's id) before the harness starts.

/// `eprintln!` that never panics, and shows text from files safely (see
/// [`emit`]).
macro_rules! say {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stderr(), &format!($($t)*), true)
    };
}

/// `eprint!` that never panics (see [`emit`]).
macro_rules! say_part {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stderr(), &format!($($t)*), false)
    };
}

/// `println!` that never panics (see [`emit`]).
macro_rules! out {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stdout(), &format!($($t)*), true)
    };
}

/// `print!` that never panics (see [`emit`]).
macro_rules! out_part {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stdout(), &format!($($t)*), false)
    };
}

/// Writes `text` (and a newline with `line`) made [`printable`], ignoring
/// errors. A sweep ignores SIGPIPE (a closed pipe must not end it before
/// its results are written), so a write to a closed stream (`2>&1 | head`)
/// fails, and `println!` would panic on it; the message is lost, never the
/// results.
pub(crate) fn emit(to: &mut impl Write, text: &str, line: bool) {
    let text = printable(text);
    let _ = if line {
        writeln!(to, "{text}")
    } else {
        write!(to, "{text}")
    };
}

/// Text for a terminal: hidden characters other than newline and tab
/// escaped ([`crate::units::shown`]).
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    crate::units::shown(s, true)
}

mod aliases;
mod analyze;
mod compare;
mod info;
mod links;
mod logs;
mod paths;
mod qualify;
mod report;
mod tune;

use crate::cli::plan::{self, Sweep};
use crate::cli::{Cli, Command, DeviceChoice, FormatChoice, RunArgs, TimingChoice};
use crate::engine::exec::cuda::device as cuda_device;
use crate::engine::exec::cuda::launch::Here;
use crate::engine::types::{Collective, Engine};
use crate::harness::{self, GpuKind, GraphAsk, Plan, Setup, Timing};
use crate::launch::{open_worlds, Peers};
use crate::recorder::watchdog;
use crate::report::layout::{Format, LayoutSink};
use crate::report::progress::{self, Progress, ProgressSink};
use crate::report::{csv::CsvSink, json::JsonSink, plot::PlotSink, warn};
use crate::report::{Fanout, Meta, Partial, Results, Sink, StopReason};
use crate::units::Bytes;
use anyhow::{anyhow, bail, Context};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Exit codes (documented in README and `--help`).
pub const OK: i32 = 0;
pub const CHECK_FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const HANG: i32 = 3;
/// Stopped by SIGINT/SIGTERM (128 + SIGINT, as shells expect).
pub const INTERRUPTED: i32 = 130;

/// How much a command line asked to be told (-v count; 0 with -q).
fn verbosity(c: &Command) -> u8 {
    match c {
        Command::Report(a) => a.out.verbose,
        Command::AllReduce(a)
        | Command::AllGather(a)
        | Command::ReduceScatter(a)
        | Command::Broadcast(a)
        | Command::Reduce(a)
        | Command::AllToAll(a)
        | Command::Gather(a)
        | Command::Scatter(a)
        | Command::SendRecv(a)
        | Command::AllToAllV(a)
        | Command::AllGatherV(a)
        | Command::ReduceScatterV(a)
        | Command::Links(a)
        | Command::All(a) => a.out.verbose,
        Command::Tune(a) => a.run.out.verbose,
        _ => 0,
    }
}

impl From<FormatChoice> for Format {
    fn from(f: FormatChoice) -> Format {
        match f {
            FormatChoice::Table => Format::Table,
            FormatChoice::NcclTests => Format::NcclTests,
            FormatChoice::Markdown => Format::Markdown,
        }
    }
}

/// Runs a command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    // Before anything initialises the CUDA driver.
    crate::engine::exec::cuda::dev::real::prepare_env();
    logs::init(verbosity(&cli.command));
    let (coll, args) = match cli.command {
        Command::Info(a) => return info::info(&a),
        Command::Analyze(a) => return analyze::analyze(&a),
        Command::Report(a) => return report::report(&a),
        Command::Compare(a) => return compare::compare(&a),
        Command::Qualify(a) => return qualify::qualify(&a),
        Command::InstallAliases(a) => return aliases::install_aliases(&a),
        Command::Tune(a) => return tune::tune(&a),
        Command::Model(a) => return tune::model(&a),
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
        Command::AllToAllV(a) => (Some(Collective::AllToAllV), a),
        Command::AllGatherV(a) => (Some(Collective::AllGatherV), a),
        Command::ReduceScatterV(a) => (Some(Collective::ReduceScatterV), a),
        Command::Links(a) => {
            return sweep(None, &a, true).unwrap_or_else(|e| fail(one_line(&e)));
        }
    };
    sweep(coll, &args, false).unwrap_or_else(|e| fail(one_line(&e)))
}

/// An error and its causes on one line, each cause said once (a cause
/// whose text its parent already quotes is not repeated).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if !text.contains(&c) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}

/// Says why a command could not run; the usage/runtime exit code.
fn fail(e: impl std::fmt::Display) -> i32 {
    // One write, so the lines of ranks that are processes never interleave.
    let line = format!("collbench: error: {e}\n");
    progress::suspend(|| {
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
    USAGE
}

/// The engine's device, as `meta.device` names it, with a line for people
/// (for `auto`) and the devices used, as `meta.devices` lists them.
pub(crate) struct Chosen {
    /// The CUDA executor's device (None: the host engine).
    pub gpu: Option<GpuKind>,
    pub timing: Timing,
    /// Whether the timed loop is captured in a CUDA graph.
    pub graph: bool,
    pub device: String,
    pub note: Option<String>,
    /// Flags accepted that change nothing on this device, one line each.
    pub notes: Vec<String>,
    pub devices: Vec<String>,
    /// The GPUs used (none on the host engine).
    pub gpus: Vec<crate::report::Gpu>,
}

impl Chosen {
    /// Says on stderr which device runs and what of the request goes unused.
    pub(crate) fn tell(&self) {
        if let Some(n) = &self.note {
            say!("collbench: {n}");
        }
        for n in &self.notes {
            say!("collbench: note: {n}");
        }
    }
}

/// Whether NVRTC loads, or why not.
fn nvrtc_usable() -> Result<(), crate::engine::exec::cuda::LoadError> {
    crate::engine::exec::cuda::Nvrtc::get().map(|_| ())
}

/// Picks the engine's device for sweep `s` and the timing that goes with
/// it. `node`: when ranks are processes (MPI, `--procs`), how many run on
/// this node (`auto` then takes the GPUs only if each rank gets its own).
pub(crate) fn choose_device(s: &Sweep, node: Option<usize>) -> anyhow::Result<Chosen> {
    let mpi_world = node.is_some();
    let ranks = s.plan.ranks;
    let ranks_n = crate::units::count_of(ranks, "rank");
    let mut gpu_list = Vec::new();
    // The GPUs the ranks use: lines for people, and name and bus id for
    // nccl-tests' device lines.
    let gpus = |d: &cuda_device::Devices, list: &mut Vec<crate::report::Gpu>| -> Vec<String> {
        let n = d.devices.len().min(ranks).max(1);
        let used = &d.devices[..n.min(d.devices.len())];
        *list = used
            .iter()
            .map(|x| crate::report::Gpu {
                name: x.name.clone(),
                bus_id: x.bus_id.clone(),
            })
            .collect();
        used.iter()
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
                anyhow!("--device cuda: no usable GPU ({why}); use --device host, auto, or cuda-emu")
            })?;
            nvrtc_usable().map_err(|why| {
                anyhow!("--device cuda needs NVRTC to compile its kernels: {why}")
            })?;
            (Some(GpuKind::Cuda), None, gpus(&d, &mut gpu_list))
        }
        DeviceChoice::CudaEmu => {
            let cfg = crate::engine::exec::cuda::dev::emu::EmuConfig::from_env()
                .map_err(|e| anyhow!("--device cuda-emu: {e}"))?;
            let n = cfg.gpus;
            gpu_list = (0..n.min(ranks).max(1))
                .map(|i| crate::report::Gpu {
                    name: "collbench emulated GPU".into(),
                    bus_id: format!("emu:{i:02x}:00"),
                })
                .collect();
            (
                Some(GpuKind::Emu),
                None,
                vec![format!("{} x collbench emulated GPU (CPU threads)", n.min(ranks).max(1))],
            )
        }
        DeviceChoice::Host => (None, None, Vec::new()),
        DeviceChoice::Auto => match cuda_device::probe() {
            Ok(_) if mpi_world && s.plan.engines.contains(&Engine::Mpi) => (
                None,
                Some(format!("--engine mpi runs on host buffers: every process runs on the host engine ({ranks_n})")),
                Vec::new(),
            ),
            Ok(d) if node.is_some_and(|n| n > d.devices.len()) && !s.plan.allow_shared_gpu => (
                None,
                Some(format!(
                    "{} ranks on this node and {} GPU(s): running on the host engine ({ranks_n}; --device cuda --allow-shared-gpu shares the GPUs)",
                    node.unwrap_or(0),
                    d.devices.len()
                )),
                Vec::new(),
            ),
            Ok(d) => match nvrtc_usable() {
                Ok(()) => {
                    let used = gpus(&d, &mut gpu_list);
                    let note = format!("running on the CUDA engine: {} ({ranks_n})", used.join(", "));
                    (Some(GpuKind::Cuda), Some(note), used)
                }
                Err(why) => (
                    None,
                    Some(format!(
                        "GPU found, but NVRTC is not usable ({why}): running on the host engine ({ranks_n})"
                    )),
                    Vec::new(),
                ),
            },
            Err(why) => (
                None,
                Some(format!("no usable GPU ({why}): running on the host engine ({ranks_n})")),
                Vec::new(),
            ),
        },
    };
    if let Some(e) = s.plan.engines.iter().find(|e| match e {
        Engine::Builtin => false,
        Engine::Mpi => !(mpi_world && gpu.is_none()),
        Engine::Nccl => gpu.is_none(),
    }) {
        bail!(match e {
            Engine::Nccl => "--engine nccl runs on the CUDA engine: add --device cuda (or cuda-emu for its stand-in)".to_string(),
            _ if gpu.is_some() => "--engine mpi runs on the host engine only: add --device host".into(),
            _ if cfg!(feature = "mpi") => "--engine mpi needs an MPI launch: mpirun -np N collbench ...".into(),
            _ => "--engine mpi needs a build with MPI (cargo build --release --features mpi) and an MPI launch".into(),
        });
    }
    let timing = match (s.timing, gpu) {
        (Some(TimingChoice::Events), None) => bail!(
            "--timing events needs the CUDA engine; the host engine times with the wall clock"
        ),
        (Some(TimingChoice::Wall), _) | (_, None) => Timing::Wall,
        _ => Timing::Events,
    };
    let mut notes = s.notes.clone();
    if !s.plan.engines.contains(&Engine::Builtin) {
        // NCCL and MPI choose their own algorithms, protocols, channels.
        let library: Vec<&str> = s.plan.engines.iter().map(|e| e.name()).collect();
        let library = library.join(",");
        let given = [
            (
                "--algo",
                matches!(s.plan.algos, harness::plan::AlgoChoice::List(_)),
            ),
            ("--protocol", s.plan.protocol.is_some()),
            ("--channels", s.plan.channels != 0),
        ];
        for (flag, _) in given.iter().filter(|(_, g)| *g) {
            notes.push(format!(
                "{flag}: the builtin engine's; --engine {library} chooses its own, so it is unused"
            ));
        }
    }
    if let (Some(p), None) = (s.plan.protocol, gpu) {
        notes.push(format!(
            "--protocol {}: the protocols are the CUDA engine's; the host engine moves whole slots, so it is unused",
            p.name()
        ));
    }
    if let (Some(_), None) = (&s.plan.gpu_map, gpu) {
        notes.push(
            "--gpu-map (or COLLBENCH_GPU_MAP): the host engine uses no GPU, so it is unused".into(),
        );
    }
    if let (true, None) = (s.plan.allow_shared_gpu, gpu) {
        notes.push("--allow-shared-gpu: the host engine uses no GPU, so it is unused".into());
    }
    let graph = match (s.plan.graph, gpu) {
        (GraphAsk::Required, None) => {
            bail!("--graph needs the CUDA engine (--device cuda or cuda-emu)")
        }
        (GraphAsk::IfCuda, None) => {
            notes.push(
                "-G: the host engine has no CUDA graphs; the timed loop runs as it is".into(),
            );
            false
        }
        (GraphAsk::No, _) => false,
        (_, Some(_)) => true,
    };
    let between_ops = |i: &&crate::harness::inject::Inject| {
        matches!(
            i.fault,
            crate::harness::inject::Fault::Hang | crate::harness::inject::Fault::Delay { .. }
        )
    };
    if let Some(i) = s.plan.injects.iter().find(between_ops).filter(|_| graph) {
        notes.push(format!(
            "--inject {i}: hangs and delays come between operations, and under --graph each case's timed operations are one graph launch: only a warm-up or check operation is hit"
        ));
    }
    let device = gpu.map_or("host", |k| k.name()).to_string();
    // A table fitted on another kind of device predicts that device.
    if let Some(t) = &s.plan.tuning {
        let fitted = t.meta.device.as_str();
        if !fitted.is_empty() && fitted != "given" && fitted != device {
            notes.push(format!(
                "--tuning: the table was fitted on {fitted}{}, and this sweep runs on {device}: its predictions and auto's picks are {fitted}'s",
                if t.meta.host.is_empty() {
                    String::new()
                } else {
                    format!(" (host {})", t.meta.host)
                }
            ));
        }
    }
    tracing::info!(device, asked = ?s.device, ?timing, ?devices, "device chosen");
    Ok(Chosen {
        gpu,
        timing,
        graph,
        device,
        note,
        notes,
        devices,
        gpus: gpu_list,
    })
}

/// This run's id: when it started and which process started it.
fn run_id() -> String {
    format!("{}-{}", rfc3339_now().replace(':', ""), std::process::id())
}

/// Where a run's dumps go: the user's folder, else a new one named by the
/// run's id under ./collbench-dumps (the one policy for every command).
fn dump_dir(plan: &Plan, run_id: &str) -> PathBuf {
    plan.dump_dir
        .clone()
        .unwrap_or_else(|| Path::new("collbench-dumps").join(run_id))
}

/// Where a run's dumps go, as every process of the run agrees (rank 0's).
struct DumpPlace {
    /// The run's id: in every dump and in its file name.
    run_id: String,
    dir: PathBuf,
    /// Under MPI, the file whose appearance stops every process.
    trigger: Option<PathBuf>,
}

/// The run's id, the dump folder and, under MPI, the abort trigger every
/// rank agrees on (rank 0's).
fn agree_dump_dir(plan: &Plan, mpi: Option<&Peers>) -> anyhow::Result<DumpPlace> {
    let id = run_id();
    let mine = dump_dir(plan, &id);
    let Some(m) = mpi else {
        return Ok(DumpPlace {
            run_id: id,
            dir: mine,
            trigger: None,
        });
    };
    // The trigger's name is unique to this run, so a stale one is never seen.
    let token = format!(
        "{id}\n{}\n.collbench-abort-{}-{}",
        mine.display(),
        crate::recorder::wall_ns(),
        std::process::id()
    );
    let chosen = String::from_utf8_lossy(&m.broadcast(token.as_bytes())?).into_owned();
    let mut parts = chosen.splitn(3, '\n');
    let (Some(id), Some(dir), Some(trigger)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("bad dump folder from rank 0");
    };
    Ok(DumpPlace {
        run_id: id.into(),
        dir: dir.into(),
        trigger: Some(Path::new(dir).join(trigger)),
    })
}

/// What the harness needs beyond the plan, decided once.
fn setup(plan: &Plan, chosen: &Chosen, meta: &Meta, mpi: Option<&Peers>) -> anyhow::Result<Setup> {
    let DumpPlace {
        run_id,
        dir: dump_dir,
        trigger: abort_trigger,
    } = agree_dump_dir(plan, mpi)?;
    Ok(Setup {
        gpu: chosen.gpu,
        timing: chosen.timing,
        graph: chosen.graph,
        dump_dir,
        abort_trigger,
        run_info: crate::recorder::dump::RunInfo {
            run_id,
            host: meta.host.clone(),
            world_size: meta.world_size,
            device: meta.device.clone(),
            command: meta.command.clone(),
            version: meta.version.clone(),
        },
        on_stuck: stuck,
        on_snapshot: snapshot_written,
    })
}

/// The ranks did not stop after a hang (`signal`: after SIGINT/SIGTERM):
/// the dumps are written, and the process leaves with the exit code of
/// what stopped it.
fn stuck(dir: &Path, signal: bool, written: &harness::Dumps) {
    let (what, code) = if signal {
        ("interrupted by a signal", INTERRUPTED)
    } else {
        ("hang detected", HANG)
    };
    progress::suspend(|| match written {
        Ok(_) => say!(
            "collbench: {what} and the run did not stop; dumps in {}",
            dir.display()
        ),
        Err(why) => say!("collbench: {what} and the run did not stop; {why}"),
    });
    std::process::exit(code);
}

/// A SIGUSR1 snapshot was written (the run goes on): where each file is,
/// or why there is none.
fn snapshot_written(written: &harness::Dumps) {
    progress::suspend(|| match written {
        Ok(paths) => {
            for p in paths {
                say!(
                    "collbench: flight-recorder snapshot written: {}",
                    p.display()
                );
            }
        }
        Err(why) => say!("collbench: warning: SIGUSR1 snapshot not written: {why}"),
    });
}

/// A sweep's plan and setup, run: cases, worlds, the harness.
pub(crate) fn execute(
    plan: &Plan,
    setup: &Setup,
    sink: &mut dyn Sink,
    mpi: Option<&Arc<Peers>>,
) -> Result<harness::Outcome, harness::HarnessError> {
    let prepared = harness::prepare(plan, setup, mpi.map(|m| &**m))?;
    execute_prepared(plan, setup, prepared, sink, mpi)
}

/// [`execute`] of cases already prepared (the sweep prepares them before
/// it opens its output files, so a refusal leaves those files as they were).
fn execute_prepared(
    plan: &Plan,
    setup: &Setup,
    prepared: harness::Prepared,
    sink: &mut dyn Sink,
    mpi: Option<&Arc<Peers>>,
) -> Result<harness::Outcome, harness::HarnessError> {
    let spec = harness::world_spec(plan, setup, &prepared);
    tracing::debug!(
        ranks = spec.ranks,
        bufs = ?spec.bufs.map(|b| Bytes(b as u64).to_string()),
        cases = prepared.cases.len(),
        "opening the worlds"
    );
    let worlds = open_worlds(&spec, mpi.map(|m| &**m))?;
    harness::run(plan, setup, prepared, worlds, sink, mpi)
}

/// Refuses more thread ranks than this machine runs (not under MPI, where
/// each process is one rank).
fn check_thread_ranks(plan: &Plan, mpi: Option<&Peers>) -> anyhow::Result<()> {
    let max = crate::launch::max_thread_ranks();
    if mpi.is_none() && plan.ranks > max {
        bail!(
            "{} ranks (--ranks, or -t x -g): this host runs at most {max} thread ranks (32 per core); use more nodes with MPI",
            plan.ranks
        );
    }
    Ok(())
}

/// Runs a sweep of `coll` (None: every collective), or with `probe` the
/// links probe (`collbench links`).
fn sweep(coll: Option<Collective>, args: &RunArgs, probe: bool) -> anyhow::Result<i32> {
    // First: a signal from now on stops the run with its results written,
    // never the default death.
    watchdog::install_signal_handlers();
    crate::launch::force_relay_setting()?;
    crate::engine::exec::mpi_in_place_staged().map_err(anyhow::Error::msg)?;
    if let Some(n) = args
        .procs
        .filter(|_| std::env::var_os(crate::launch::procs::ENV).is_none())
    {
        return launch_procs(coll, args, probe, n);
    }
    let mpi = join_world()?.map(Arc::new);
    if mpi.is_none() && args.gpu_map.is_some() {
        bail!("--gpu-map places ranks that are processes (mpirun, srun, --procs); thread ranks of one process are placed round-robin over the GPUs (choose them with CUDA_VISIBLE_DEVICES)");
    }
    let rank = mpi.as_ref().map_or(0, |m| m.rank());
    let leader = rank == 0;
    let world = mpi.as_ref().map(|m| m.size());
    let mut s = build_sweep(coll, args, probe, world)?;
    if mpi.is_none() {
        thread_rank_settings(&mut s)?;
    }
    check_thread_ranks(&s.plan, mpi.as_deref())?;
    check_paths(&s, leader, &[])?;
    if !leader {
        (s.quiet, s.json, s.csv, s.plot) = (true, None, None, None);
    }
    let chosen = choose_device(&s, mpi.as_ref().map(|m| m.node_size()))?;
    if leader {
        chosen.tell();
    }
    // Ranks that are processes share their node's GPUs with the node's
    // other ranks only, not the whole world's.
    let ranks_here = mpi.as_ref().map_or(s.plan.ranks, |m| m.node_size());
    let rank_processes = mpi.is_some();
    let here = match &mpi {
        None => Here::Threads(s.plan.ranks),
        Some(m) => {
            let (node_rank, node_size) = m.node_rank();
            Here::Process {
                node_rank,
                node_size,
                gpu_map: s.plan.gpu_map.as_deref(),
            }
        }
    };
    let budget = budget(&s.plan, &chosen, here);
    let asked = s.plan.sizes.clone();
    let mut cap = budget.and_then(|b| harness::cap_sizes_to_memory(&mut s.plan, b));
    if let Some(m) = &mpi {
        // Every rank sweeps the same sizes: as many as the rank with the
        // least memory keeps (each measured its own node, at its moment).
        let kept = fewest_sizes(m, s.plan.sizes.len())?;
        if kept < s.plan.sizes.len() {
            s.plan.sizes.truncate(kept);
            cap = Some(harness::SizeCap {
                kept_max: s.plan.sizes.last().copied().unwrap_or(0),
                dropped: asked.get(kept..).unwrap_or_default().to_vec(),
                available: cap
                    .as_ref()
                    .map(|c| c.available)
                    .or_else(|| budget.and_then(|b| b.available()))
                    .unwrap_or(0),
            });
        }
    }
    let capped = cap.map(|c| warn::Warning::SizesCapped {
        kept_max: c.kept_max,
        dropped: c.dropped,
        available: c.available,
        ranks: s.plan.ranks,
    });
    let mut meta = meta(&s, &chosen);
    meta.notes.extend(chosen.notes.iter().cloned());
    if let Some(m) = &mpi {
        meta.processes = processes(m, &meta.host)?;
    }
    let setup = setup(&s.plan, &chosen, &meta, mpi.as_deref())?;
    let (s, plan) = (&s, &s.plan);
    // Refused before anything runs (nothing to run, too little memory): the
    // files the sweep would write are not touched.
    // Device memory too small even for the smallest size is refused here,
    // alike on every rank (the host engine's is, in `prepare`).
    let prepared = harness::prepare(plan, &setup, mpi.as_deref()).and_then(|p| match budget {
        Some(b @ harness::Budget::Device { .. }) => {
            harness::check_budget(plan, &p.cases, b).map(|()| p)
        }
        _ => Ok(p),
    });
    let prepared = match (prepared, mpi.as_deref()) {
        (Ok(p), None) => p,
        (Err(e), None) => return Ok(exit_code(Err(e), rank)),
        (p, Some(m)) => match agree_prepared(m, p)? {
            Ok(p) => p,
            Err(said) => {
                if leader {
                    fail(said);
                }
                return Ok(USAGE);
            }
        },
    };
    let mut sink = sinks(s, leader)?;
    sink.start(&meta).context("writing results")?;
    let mut result = execute_prepared(plan, &setup, prepared, &mut sink, mpi.as_ref());
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
    // A run stopped by a signal or a hang says so, and how much is missing.
    meta.partial = partial_of(&result, plan, sink.rows.len());
    let mut results = Results::new(meta, std::mem::take(&mut sink.rows));
    if let Ok(o) = result.as_mut() {
        if let Some(t) = &o.links {
            let crowded = links::crowded(setup.gpu, ranks_here, links::cpus(rank_processes));
            let mut r = links::matrix(plan, t, crowded.is_some());
            if let Some(why) = crowded {
                // In the results' notes, and said as the run ends.
                let note = links::crowded_note(&why);
                results.meta.notes.push(note.clone());
                o.notes.push(note);
            }
            if let Some(floor) = s.min_link_gbps {
                crate::report::links::add_floor_findings(&mut r, floor);
            }
            o.link_findings = r.findings.len();
            results.links = Some(r);
        }
        results.case_links = o
            .case_links
            .iter()
            .map(|(coll, algo, t)| links::told(*coll, *algo, t))
            .collect();
    }
    if result.as_ref().is_err_and(|e| e.partial().is_none()) {
        // Refused or failed: no verdict on values that were never made.
        sink.abandon(&results).context("writing results")?;
    } else {
        sink.finish(&results).context("writing results")?;
    }
    if let (true, Some(l)) = (leader, &results.links) {
        if !s.quiet {
            let mut text = crate::report::links::render(l, plan.ranks);
            for c in &results.case_links {
                text.push_str(&crate::report::links::render_case(c));
            }
            if s.data_on_stdout() {
                say_part!("{text}");
            } else {
                out_part!("{text}");
            }
        }
        if let Some(p) = &s.plot {
            let path = links::heatmap_path(p);
            crate::report::links::plot_heatmap(l, plan.ranks, &path)
                .with_context(|| format!("--plot {}", path.display()))?;
        }
    }
    if leader {
        for w in capped.iter().chain(&warn::scan(&results.rows)) {
            say!("collbench: warning: {w}");
        }
    }
    let code = exit_code(result, rank);
    // nccl-tests' bandwidth floor fails a run that is otherwise clean.
    if code == OK && leader && below_min_bw(&results, plan) {
        return Ok(CHECK_FAILED);
    }
    Ok(code)
}

/// Whether the sweep runs several algorithms per case, so that nccl-tests'
/// text prints one run per algorithm.
fn split_algos(plan: &Plan) -> bool {
    match &plan.algos {
        harness::AlgoChoice::List(l) => l.len() > 1,
        harness::AlgoChoice::Pairs(_) => true,
        harness::AlgoChoice::Auto => false,
    }
}

/// `NCCL_TESTS_MIN_BW` of a run as an nccl-tests binary: each run of its
/// text whose average bus bandwidth is below 0.9 of it fails (exit 1), as
/// in nccl-tests; says which.
fn below_min_bw(results: &Results, plan: &Plan) -> bool {
    let Some(min) = results.meta.nccl_tests_min_bw else {
        return false;
    };
    let low = crate::report::nccl::runs_below_min_bw(&results.rows, min, split_algos(plan));
    for (run, avg) in &low {
        say!(
            "collbench: {run}: average bus bandwidth {} GB/s is below 0.9 x NCCL_TESTS_MIN_BW={min} GB/s",
            crate::report::nccl::fmt_g(*avg)
        );
    }
    !low.is_empty()
}

/// Where the sweep's buffers live and the room there: the GPUs' free
/// memory on the CUDA engine (the most crowded device), else the host's;
/// `None` when the devices cannot be opened (the run then says why).
fn budget(plan: &Plan, chosen: &Chosen, here: Here) -> Option<harness::Budget> {
    use crate::engine::exec::cuda::launch::{memory_budget, CudaOptions};
    let Some(kind) = chosen.gpu else {
        let b = harness::Budget::Host;
        let available = b
            .available()
            .map_or("unknown".into(), |a| Bytes(a).to_string());
        tracing::info!(available, "memory budget: host");
        return Some(b);
    };
    let opts = CudaOptions::new(
        kind,
        plan.host.slot_bytes,
        plan.timeout(),
        chosen.timing,
        plan.cuda_knobs,
    );
    let (free, ranks, extra) = memory_budget(kind, here, &opts)?;
    // A group's ways of running each hold connections of their own.
    let extra = extra * plan.group_ways() as u64;
    tracing::info!(
        free = %Bytes(free),
        ranks_on_busiest = ranks,
        per_rank_extra = %Bytes(extra),
        "memory budget: device"
    );
    Some(harness::Budget::Device { free, ranks, extra })
}

/// `--procs N`: checks the sweep as the ranks will see it (bad input is
/// said once, here), then starts the N rank processes and serves them.
fn launch_procs(
    coll: Option<Collective>,
    args: &RunArgs,
    probe: bool,
    n: usize,
) -> anyhow::Result<i32> {
    if let Some((launcher, tasks)) = crate::launch::foreign_launcher() {
        bail!("--procs {n}: this process is one of {tasks} tasks started by {launcher}: use the launcher's ranks or --procs, not both");
    }
    if args.engine.0.contains(&Engine::Mpi) {
        bail!("--engine mpi runs MPI's own collectives: it needs an MPI launch (mpirun -np {n} collbench ...), not --procs");
    }
    if args.engine.0.contains(&Engine::Nccl) {
        bail!("--engine nccl across processes is not supported yet: run one process with --ranks {n} for NCCL's rows");
    }
    if crate::launch::force_relay() {
        bail!("COLLBENCH_FORCE_RELAY=1 tests the relay between nodes, which is MPI point-to-point: run under mpirun, not --procs");
    }
    let s = build_sweep(coll, args, probe, Some(n))?;
    check_paths(&s, true, &[])?;
    // The device and the ranks' GPUs, judged once here: every rank would
    // refuse them alike.
    let chosen = choose_device(&s, Some(n))?;
    if let Some(kind) = chosen.gpu {
        check_node_placement(kind, &s.plan, n)?;
        if s.plan.protocol == Some(crate::engine::exec::cuda::abi::Proto::LowLatency128) {
            bail!(crate::engine::exec::cuda::launch::ll128_refused(true, n));
        }
    }
    Ok(crate::launch::procs::launch(
        n,
        &watchdog::stop_signal_number,
        &|rank, pid, how| say!("collbench: --procs: rank {rank}'s process (pid {pid}) died: {how}"),
    )?)
}

/// `--procs N` on the CUDA engine: the GPU of each of the N ranks (from
/// `--gpu-map` or round-robin) exists and, unless `--allow-shared-gpu`,
/// is no other rank's.
fn check_node_placement(kind: GpuKind, plan: &Plan, n: usize) -> anyhow::Result<()> {
    use crate::engine::exec::cuda::launch::{first_shared, node_placement, shared_gpu_refusal};
    let ndevices = match kind {
        GpuKind::Cuda => match cuda_device::probe() {
            Ok(d) => d.devices.len(),
            // The ranks say why.
            Err(_) => return Ok(()),
        },
        GpuKind::Emu => {
            crate::engine::exec::cuda::dev::emu::EmuConfig::from_env()
                .map_err(|e| anyhow!("--device cuda-emu: {e}"))?
                .gpus
        }
    };
    let placement = node_placement(plan.gpu_map.as_deref(), n, ndevices).map_err(|e| anyhow!(e))?;
    if let (Some((gpu, with)), false) = (first_shared(&placement), plan.allow_shared_gpu) {
        bail!(shared_gpu_refusal(
            &with,
            format_args!("{gpu} of this node")
        ));
    }
    Ok(())
}

/// The sweep of `coll` (None: every collective), or the links probe's.
fn build_sweep(
    coll: Option<Collective>,
    args: &RunArgs,
    probe: bool,
    world: Option<usize>,
) -> anyhow::Result<Sweep> {
    Ok(if probe {
        plan::build_links(args, world)?
    } else {
        plan::build(coll, args, world)?
    })
}

/// Refuses output files (the leader's, `extra` among them) and a dump
/// folder that cannot be written, or that is one of the outputs.
fn check_paths(s: &Sweep, leader: bool, extra: &[(&str, &Path)]) -> anyhow::Result<()> {
    let mut outputs: Vec<(&str, &Path)> = extra.to_vec();
    // With --links, --plot FILE also draws the heatmap beside it.
    let heatmap = s
        .plot
        .as_deref()
        .filter(|_| s.plan.host.link_timing)
        .map(links::heatmap_path);
    if leader {
        outputs.extend(
            [
                ("--json", &s.json),
                ("--csv", &s.csv),
                ("--plot", &s.plot),
                ("--plot (its links heatmap)", &heatmap),
            ]
            .into_iter()
            .filter_map(|(f, p)| p.as_deref().map(|p| (f, p))),
        );
        paths::check_outputs(&outputs, &s.inputs)?;
    }
    if let Some(d) = &s.plan.dump_dir {
        paths::check_dump_dir(d, &outputs)?;
    }
    Ok(())
}

/// `meta.partial` of a sweep of `plan` that ended with `result` after
/// making `made` rows: stopped by a signal or a hang, or failed, and how
/// much is missing. (A signal as the sweep ended: nothing is missing, but
/// the run was interrupted all the same, as its exit code says.)
fn partial_of(
    result: &Result<harness::Outcome, harness::HarnessError>,
    plan: &Plan,
    made: usize,
) -> Option<Partial> {
    match result {
        Err(e) => e.partial().or_else(|| {
            let expected = harness::expected_rows(plan, &harness::plan::cases(plan).0);
            Some(Partial {
                reason: StopReason::Error,
                missing_rows: expected.saturating_sub(made),
            })
        }),
        Ok(_) => watchdog::signalled().then_some(Partial {
            reason: StopReason::Signal,
            missing_rows: 0,
        }),
    }
}

/// Joins the MPI world when launched into one; refuses a launcher's tasks
/// in a build that cannot join.
/// Settings for ranks that are processes, given to thread ranks of one
/// process: COLLBENCH_FORCE_RELAY=1 is refused (it would test nothing), and
/// COLLBENCH_GPU_MAP (the flag is refused before) and --allow-shared-gpu
/// are noted as unused rather than silently dropped.
pub(crate) fn thread_rank_settings(s: &mut Sweep) -> anyhow::Result<()> {
    if crate::launch::force_relay_setting()? {
        bail!("COLLBENCH_FORCE_RELAY=1 tests the relay between nodes, which is MPI point-to-point: run under mpirun (thread ranks of one process never use it)");
    }
    if s.plan.gpu_map.take().is_some() {
        s.notes.push("COLLBENCH_GPU_MAP: it places ranks that are processes (mpirun, srun, --procs); thread ranks of one process go round-robin over the GPUs, so it is unused".into());
    }
    if std::mem::take(&mut s.plan.allow_shared_gpu) {
        s.notes.push("--allow-shared-gpu: thread ranks of one process share a GPU without it (as virtual ranks); it is for ranks that are processes, so it is unused".into());
    }
    Ok(())
}

fn join_world() -> anyhow::Result<Option<Peers>> {
    let mpi = Peers::join()?;
    if mpi.is_none() {
        if let Some((launcher, n)) = crate::launch::foreign_launcher() {
            bail!(
                "started by {launcher} as one of {n} tasks, but this build has no MPI support: each task would \
                 run its own independent world and print a misleading table. Rebuild with \
                 `cargo build --release --features mpi`, or run one task with --ranks N"
            );
        }
    }
    Ok(mpi)
}

/// The process's exit code, with the closing message for people.
/// Every rank of a world of processes learns whether every rank can run
/// the sweep (its cases, their memory on its node), so that all go on or
/// all refuse together: one rank refusing alone would leave the others
/// waiting on it. A refusal is said once, by rank 0 (`Err`: the words),
/// however many ranks found it; the ranks that refused are named when not
/// all did (a node short of memory among others).
fn agree_prepared(
    m: &Peers,
    mine: Result<harness::Prepared, harness::HarnessError>,
) -> anyhow::Result<Result<harness::Prepared, String>> {
    use harness::HarnessError;
    // "kind\nwords" of a refusal; empty for a rank that can run.
    let said = match &mine {
        Ok(_) => String::new(),
        Err(e) => {
            let kind = match e {
                HarnessError::Memory { .. } => "memory",
                HarnessError::Empty(_) => "empty",
                _ => "other",
            };
            format!("{kind}\n{e}")
        }
    };
    let all = m
        .all_gather(said.as_bytes())
        .context("agreeing on the sweep with the other ranks")?;
    Ok(match refusals(&all) {
        None => mine.map_err(|e| e.to_string()),
        Some(words) => Err(words),
    })
}

/// What every rank said of the sweep ("kind\nwords" of a refusal, empty
/// for a rank that can run), as one message: each kind of refusal once, in
/// the words of the lowest rank that made it, naming the ranks that made
/// it when not all did; `None` when every rank can run.
fn refusals(all: &[Vec<u8>]) -> Option<String> {
    let mut kinds: Vec<(String, String, Vec<usize>)> = Vec::new();
    for (r, b) in all.iter().enumerate() {
        let text = String::from_utf8_lossy(b);
        let Some((kind, words)) = text.split_once('\n') else {
            continue;
        };
        match kinds.iter_mut().find(|(k, _, _)| k == kind) {
            Some((_, _, ranks)) => ranks.push(r),
            None => kinds.push((kind.to_string(), words.to_string(), vec![r])),
        }
    }
    if kinds.is_empty() {
        return None;
    }
    let lines: Vec<String> = kinds
        .into_iter()
        .map(|(_, words, ranks)| {
            if ranks.len() == all.len() {
                words
            } else {
                format!(
                    "{} of {}: {words}",
                    crate::units::ranks_text(&ranks),
                    all.len()
                )
            }
        })
        .collect();
    Some(lines.join("\ncollbench: error: "))
}

/// The fewest sizes any rank of the world keeps (`mine`: this rank's), a
/// collective every rank calls.
fn fewest_sizes(m: &Peers, mine: usize) -> anyhow::Result<usize> {
    let all = m
        .all_gather(mine.to_string().as_bytes())
        .context("agreeing on the sizes with the other ranks")?;
    Ok(all
        .iter()
        .filter_map(|b| String::from_utf8_lossy(b).parse::<usize>().ok())
        .fold(mine, usize::min))
}

/// Every rank's process id and host, by rank (a collective: every rank
/// calls it).
fn processes(m: &Peers, host: &str) -> anyhow::Result<Vec<crate::report::Process>> {
    let mine = format!("{} {host}", std::process::id());
    let all = m
        .all_gather(mine.as_bytes())
        .context("gathering the ranks' process ids")?;
    Ok(all
        .iter()
        .map(|b| {
            let text = String::from_utf8_lossy(b);
            let (pid, host) = text.split_once(' ').unwrap_or(("0", "unknown"));
            crate::report::Process {
                pid: pid.parse().unwrap_or(0),
                host: host.to_string(),
            }
        })
        .collect())
}

/// `rank`: this process's rank of the world (0 when it runs every rank):
/// rank 0 says what concerns the whole run.
fn exit_code(result: Result<harness::Outcome, harness::HarnessError>, rank: usize) -> i32 {
    let leader = rank == 0;
    match result {
        // A signal after the sweep's end: every row is in; still 130.
        Ok(_) if watchdog::signalled() => {
            say!("collbench: interrupted by a signal as the sweep ended; every row is kept");
            INTERRUPTED
        }
        Ok(o) => {
            for n in o.notes.iter().filter(|_| leader) {
                say!("collbench: note: {n}");
            }
            for i in o.unfired.iter().filter(|_| leader) {
                if i.pace_rule().is_some() {
                    say!(
                        "collbench: warning: --inject {i} never slowed anything: no operation of the sweep moved data over that link"
                    );
                    continue;
                }
                say!(
                    "collbench: warning: --inject {i} never fired: the sweep ended before collective {} on rank {}, or no case had a type it applies to and a check that sees it (not a non-root rank's input of broadcast or scatter, or output of reduce or gather)",
                    i.seq, i.rank
                );
            }
            if o.link_findings > 0 && leader {
                say!(
                    "collbench: {} slow link(s) or rank(s) found (see the link matrix)",
                    o.link_findings
                );
            }
            if o.bad_rows > 0 || !o.unfired.is_empty() || o.link_findings > 0 {
                if o.bad_rows > 0 {
                    say!(
                        "collbench: {} row(s) had wrong or NaN/Inf values",
                        o.bad_rows
                    );
                }
                CHECK_FAILED
            } else {
                OK
            }
        }
        Err(e) if e.is_hang() => {
            // The process that found it says so; of the others, rank 0. A
            // rank's death is said by the first rank that lived.
            let speaks = match e.lost_rank() {
                Some(lost) => rank == usize::from(lost == 0),
                None => leader || !e.is_remote_hang(),
            };
            if speaks {
                say!("collbench: {e}");
            }
            HANG
        }
        Err(e) if e.is_interrupt() => {
            // Rank processes share the run's dump folder: rank 0 says it.
            if leader {
                say!("collbench: {e}");
            }
            INTERRUPTED
        }
        Err(e) => fail(e),
    }
}

/// What a case is, for the progress bar.
fn case_label(c: &harness::Case) -> String {
    let mut l = format!(
        "{} {} {} {}",
        c.coll.name(),
        c.engine.name(),
        c.dtype.name(),
        Bytes(c.bytes)
    );
    if c.engine == Engine::Builtin {
        l = format!("{l} {}", c.algo.name());
    }
    l
}

/// Makes a file's sink (creating its files).
type MakeSink = Box<dyn FnOnce() -> anyhow::Result<Box<dyn Sink>>>;

/// A file's sink, made at the run's first row (or at its end, when it
/// stopped by a hang or a signal before one): a run refused before its
/// first row (no compiler, a layout that cannot be resident, too little
/// device memory) leaves the files it would have written as they were.
struct Deferred {
    make: Option<MakeSink>,
    meta: Option<Meta>,
    made: Option<Box<dyn Sink>>,
}

impl Deferred {
    fn boxed(make: impl FnOnce() -> anyhow::Result<Box<dyn Sink>> + 'static) -> Box<dyn Sink> {
        Box::new(Deferred {
            make: Some(Box::new(make)),
            meta: None,
            made: None,
        })
    }

    fn made(&mut self) -> std::io::Result<&mut Box<dyn Sink>> {
        if self.made.is_none() {
            let make = self
                .make
                .take()
                .ok_or_else(|| std::io::Error::other("an output that could not be made before"))?;
            let mut sink = make().map_err(|e| std::io::Error::other(one_line(&e)))?;
            if let Some(m) = &self.meta {
                sink.start(m)?;
            }
            self.made = Some(sink);
        }
        self.made
            .as_mut()
            .ok_or_else(|| std::io::Error::other("an output that could not be made"))
    }
}

impl Sink for Deferred {
    fn start(&mut self, meta: &Meta) -> std::io::Result<()> {
        self.meta = Some(meta.clone());
        Ok(())
    }
    fn case(&mut self, proto: &crate::report::Row) -> std::io::Result<()> {
        match &mut self.made {
            Some(s) => s.case(proto),
            None => Ok(()),
        }
    }
    fn row(&mut self, row: &crate::report::Row) -> std::io::Result<()> {
        self.made()?.row(row)
    }
    fn finish(&mut self, results: &Results) -> std::io::Result<()> {
        self.made()?.finish(results)
    }
    fn abandon(&mut self, results: &Results) -> std::io::Result<()> {
        match &mut self.made {
            Some(s) => s.abandon(results),
            // Refused before its first row: nothing to keep, and nothing
            // of the user's is replaced.
            None => Ok(()),
        }
    }
}

/// Stdout for data (`--csv -`, `--json -`): when its reader goes away
/// (`| head`), the run stops as for a signal, with every finished row in
/// its files, and what is left to write is dropped rather than failing.
struct DataStdout;

impl DataStdout {
    fn closed<T>(r: std::io::Result<T>, instead: T) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                watchdog::stop_for_closed_stdout();
                Ok(instead)
            }
            r => r,
        }
    }
}

impl Write for DataStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if watchdog::stopped_for_closed_stdout() {
            return Ok(buf.len());
        }
        Self::closed(std::io::stdout().write(buf), buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if watchdog::stopped_for_closed_stdout() {
            return Ok(());
        }
        Self::closed(std::io::stdout().flush(), ())
    }
}

fn sinks(s: &Sweep, leader: bool) -> anyhow::Result<Fanout> {
    let mut f = Fanout::default();
    // `--json -` or `--csv -`: the data is stdout, so the table goes to stderr.
    let json_on_stdout = s.json.as_deref().is_some_and(crate::units::is_stdout);
    let data_on_stdout = s.data_on_stdout();
    if !s.quiet {
        let out = Box::new(move |line: &str| {
            progress::suspend(|| {
                if data_on_stdout {
                    let _ = writeln!(std::io::stderr().lock(), "{line}");
                } else if writeln!(std::io::stdout().lock(), "{line}")
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
                {
                    // Its reader went away (`| head`): the run stops as
                    // for a signal, with every finished row in its files.
                    watchdog::stop_for_closed_stdout();
                }
            })
        });
        let names = s
            .plan
            .placements
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let format: Format = s.format.into();
        let layout = format.layout(
            names,
            s.verbose > 0,
            s.plan.sizes.clone(),
            split_algos(&s.plan),
        );
        f.sinks.push(Box::new(LayoutSink::new(layout, out)));
    }
    if s.csv.as_deref().is_some_and(crate::units::is_stdout) {
        f.sinks.push(Box::new(
            CsvSink::new(DataStdout).context("--csv - (stdout)")?,
        ));
    } else if let Some(p) = s.csv.clone() {
        f.sinks.push(Deferred::boxed(move || {
            let at = || format!("--csv {}", p.display());
            let file = crate::units::create_output(&p).with_context(at)?;
            Ok(Box::new(CsvSink::new(file).with_context(at)?))
        }));
    }
    if json_on_stdout {
        f.sinks
            .push(Box::new(JsonSink::stream(Box::new(DataStdout))));
    } else if let Some(p) = s.json.clone() {
        f.sinks.push(Deferred::boxed(move || {
            let sink = JsonSink::create(&p).with_context(|| format!("--json {}", p.display()))?;
            Ok(Box::new(sink))
        }));
    }
    if let Some(p) = s.plot.clone() {
        f.sinks
            .push(Deferred::boxed(move || Ok(Box::new(PlotSink { path: p }))));
    }
    let wanted = leader && !s.quiet && s.format != FormatChoice::NcclTests;
    let cases = harness::plan::cases(&s.plan).0;
    let progress = Progress::new(cases.len() as u64, "cases", wanted);
    if progress.visible() {
        let labels = cases.iter().map(case_label).collect();
        f.sinks.push(Box::new(ProgressSink::new(
            progress,
            labels,
            s.plan.placements.len(),
        )));
    }
    Ok(f)
}

fn meta(s: &Sweep, chosen: &Chosen) -> Meta {
    let cores = crate::engine::cpus::cores();
    let devices = if chosen.devices.is_empty() {
        vec![format!("{} ({cores} cores)", cpu_model())]
    } else {
        chosen.devices.clone()
    };
    Meta {
        version: env!("CARGO_PKG_VERSION").into(),
        command: crate::units::command_line(),
        host: hostname(),
        started_at: rfc3339_now(),
        world_size: s.plan.ranks,
        device: chosen.device.clone(),
        devices,
        iters: s.plan.iters,
        warmup: s.plan.warmup,
        seed: s.plan.seed,
        timing: match chosen.timing {
            Timing::Events => "events",
            Timing::Wall => "wall",
        }
        .into(),
        notes: Vec::new(),
        nccl: None,
        partial: None,
        pid: std::process::id(),
        gpus: chosen.gpus.clone(),
        processes: Vec::new(),
        log_avg_busbw: None,
        log_out_of_bounds: None,
        nccl_tests_header: s.nccl_tests.as_ref().map(|n| n.header.clone()),
        nccl_tests_min_bw: s.nccl_tests.as_ref().and_then(|n| n.min_bw),
        sizes: s.plan.sizes.clone(),
        nccl_tests_devices: Vec::new(),
        nccl_tests_wide: false,
        agg_iters: s.agg_iters,
        graph: chosen.graph,
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
    crate::units::utc_text(secs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_is_said_once_naming_the_ranks_when_not_all() {
        let ok = Vec::new;
        let mem = |gib: u32| format!("memory\nnot enough memory: {gib} GiB free").into_bytes();
        assert_eq!(super::refusals(&[ok(), ok(), ok()]), None);
        // Every rank refused alike: the lowest rank's words, once.
        assert_eq!(
            super::refusals(&[mem(23), mem(22), mem(23)]).as_deref(),
            Some("not enough memory: 23 GiB free")
        );
        // A node short of memory among others, and another kind of refusal.
        assert_eq!(
            super::refusals(&[ok(), ok(), mem(3), mem(4), b"empty\nnothing to run".to_vec()]).as_deref(),
            Some(
                "ranks 2, 3 of 5: not enough memory: 3 GiB free\ncollbench: error: rank 4 of 5: nothing to run"
            )
        );
    }

    #[test]
    fn text_from_files_cannot_drive_the_terminal() {
        assert!(matches!(
            super::printable("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            super::printable("a\u{1b}[2Jb\0c\u{202E}d"),
            "a\\u001b[2Jb\\u0000c\\u202ed"
        );
        // JSON stays JSON: a hidden character inside a string becomes
        // JSON's own escape.
        let json = serde_json::json!({"pg": "q\u{7f}\u{85}\u{202e}"}).to_string();
        let shown = super::printable(&json);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["pg"], "q\u{7f}\u{85}\u{202e}");
    }
}
