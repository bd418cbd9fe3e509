//! Arguments to a validated sweep: every error a user can make is found
//! here and said in one line.

use super::RunArgs;
use crate::engine::exec::cuda::abi::Proto;
use crate::engine::exec::HostOptions;
use crate::engine::types::{Algo, Collective, Dtype, Engine, Placement, ReduceOp};
use crate::harness::inject::Inject;
use crate::harness::{AlgoChoice, Plan, RootChoice};
use crate::launch::max_thread_ranks;
use crate::recorder::dump::RunInfo;
use crate::report::{layout::Format, plot::PlotKind};
use crate::units::{parse_bytes, parse_duration, parse_sweep, sweep, Growth};
use std::path::PathBuf;

/// Where the user asked data to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Auto,
    Host,
    Cuda,
    /// The CUDA executor on the emulated device (CPU threads).
    CudaEmu,
}

/// A sweep request: the plan and how to present it.
#[derive(Debug)]
pub struct Sweep {
    pub plan: Plan,
    /// Whether this process is one rank of an MPI world (set by the run layer).
    pub mpi_world: bool,
    pub device: DeviceChoice,
    pub engines: Vec<String>,
    pub timing: Option<String>,
    pub graph: bool,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub format: Format,
    pub quiet: bool,
    pub verbose: u8,
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{flag} '{v}' is not a non-negative whole number"))
}

/// Splits a comma list, or expands `all`.
fn list<T: Copy>(
    flag: &str,
    v: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    names: &str,
) -> Result<Vec<T>, String> {
    if v.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        out.push(parse(item).ok_or_else(|| format!("unknown {flag} '{item}' (known: {names})"))?);
    }
    if out.is_empty() {
        return Err(format!("{flag} is empty"));
    }
    Ok(out)
}

fn sizes(a: &RunArgs) -> Result<Vec<u64>, String> {
    if let Some(s) = &a.sizes {
        return parse_sweep(s).map_err(|e| format!("--sizes: {e}"));
    }
    let min = a
        .minbytes
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(|e| format!("-b: {e}"))?;
    let max = a
        .maxbytes
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(|e| format!("-e: {e}"))?;
    let (min, max) = match (min, max) {
        (None, None) => (8, 64 << 20),
        (Some(m), None) => (m, m.max(64 << 20)),
        (None, Some(m)) => (8.min(m), m),
        (Some(a), Some(b)) => (a, b),
    };
    let growth = match (&a.stepfactor, &a.stepbytes) {
        (Some(f), _) => Growth::Factor(
            f.trim()
                .parse()
                .map_err(|_| format!("-f '{f}' is not a number"))?,
        ),
        (None, Some(s)) => Growth::Step(parse_bytes(s).map_err(|e| format!("-i: {e}"))?),
        (None, None) => Growth::Factor(2.0),
    };
    sweep(min, max, growth).map_err(|e| e.to_string())
}

fn names<T>(all: &[T], name: impl Fn(&T) -> &'static str) -> String {
    all.iter().map(name).collect::<Vec<_>>().join(", ")
}

fn algos(a: &RunArgs, colls: &[Collective]) -> Result<AlgoChoice, String> {
    let v = a.algo.trim().to_ascii_lowercase();
    if v == "auto" {
        return Ok(AlgoChoice::Auto);
    }
    let chosen = list(
        "--algo",
        &v,
        &Algo::ALL,
        Algo::parse,
        "ring, tree, direct, auto, all",
    )?;
    if let [c] = colls {
        if !chosen.iter().any(|x| c.algos().contains(x)) {
            return Err(format!(
                "--algo {}: not an algorithm for {c} (it has: {})",
                a.algo,
                names(c.algos(), |x| x.name())
            ));
        }
    } else if !colls
        .iter()
        .any(|c| chosen.iter().any(|x| c.algos().contains(x)))
    {
        return Err(format!("--algo {}: no selected collective has it", a.algo));
    }
    Ok(AlgoChoice::List(chosen))
}

/// Validates `a` for `coll` (None: every collective).
pub fn build(coll: Option<Collective>, a: &RunArgs) -> Result<Sweep, String> {
    let collectives = coll.map_or(Collective::ALL.to_vec(), |c| vec![c]);
    let ranks = ranks(a)?;
    let engines = list(
        "--engine",
        &a.engine,
        &ENGINES,
        |s| ENGINES.into_iter().find(|e| e.eq_ignore_ascii_case(s)),
        "builtin, nccl, mpi",
    )?;
    let timing = a.timing.as_ref().map(|t| t.trim().to_ascii_lowercase());
    if let Some(t) = timing
        .as_deref()
        .filter(|t| !["events", "wall"].contains(t))
    {
        return Err(format!("unknown --timing '{t}' (known: events, wall)"));
    }
    let format = Format::parse(&a.format).map_err(|e| e.to_string())?;
    if let Some(p) = &a.plot {
        PlotKind::of(p).map_err(|e| e.to_string())?;
    }
    let plan = Plan {
        sizes: sizes(a)?,
        ranks,
        algos: algos(a, &collectives)?,
        dtypes: list(
            "--dtype",
            &a.dtype,
            &Dtype::ALL,
            Dtype::parse,
            &names(&Dtype::ALL, |d| d.name()),
        )?,
        ops: list(
            "--op",
            &a.op,
            &ReduceOp::ALL,
            ReduceOp::parse,
            &names(&ReduceOp::ALL, |o| o.name()),
        )?,
        roots: roots(a, ranks)?,
        placements: placements(a)?,
        iters: at_least_one("--iters", &a.iters)?,
        warmup: num("--warmup", &a.warmup)?,
        check_iters: match (&a.check_iters, a.no_check) {
            (_, true) => 0,
            (Some(c), false) => num("--check-iters", c)?,
            (None, false) => 1,
        },
        channels: channels(a)?,
        seed: num("--seed", &a.seed)?,
        host: host_options(a)?,
        fr_entries: at_least_one("--fr-entries", &a.fr_entries.to_string())?,
        dump_dir: a.dump_dir.clone(),
        injects: a
            .inject
            .iter()
            .map(|i| Inject::parse(i, ranks))
            .collect::<Result<_, _>>()?,
        run_info: RunInfo::default(),
        gpu: None,
        timing: crate::harness::Timing::Wall,
        graph: a.graph,
        protocol: protocol(a)?,
        abort_trigger: None,
        engines: engines
            .iter()
            .filter_map(|e| match *e {
                "builtin" => Some(Engine::Builtin),
                "mpi" => Some(Engine::Mpi),
                "nccl" => Some(Engine::Nccl),
                _ => None,
            })
            .collect(),
        collectives,
    };
    Ok(Sweep {
        plan,
        mpi_world: false,
        device: device(a)?,
        engines: engines.into_iter().map(String::from).collect(),
        timing,
        graph: a.graph,
        json: a.json.clone(),
        csv: a.csv.clone(),
        plot: a.plot.clone(),
        format,
        quiet: a.quiet,
        verbose: a.verbose,
    })
}

const ENGINES: [&str; 3] = ["builtin", "nccl", "mpi"];

fn at_least_one(flag: &str, v: &str) -> Result<usize, String> {
    match num(flag, v)? {
        0 => Err(format!("{flag} must be at least 1")),
        n => Ok(n),
    }
}

fn ranks(a: &RunArgs) -> Result<usize, String> {
    let ranks = match &a.ranks {
        Some(r) => at_least_one("--ranks", r)?,
        None => 2,
    };
    let max = max_thread_ranks();
    if ranks > max {
        return Err(format!("--ranks {ranks}: this host runs at most {max} thread ranks (32 per core); use more nodes with MPI"));
    }
    Ok(ranks)
}

fn roots(a: &RunArgs, ranks: usize) -> Result<RootChoice, String> {
    let r = a.root.trim();
    if r.eq_ignore_ascii_case("all") {
        return Ok(RootChoice::All);
    }
    let root: usize = num("--root", r)?;
    if root >= ranks {
        return Err(format!(
            "--root {root} is outside the {ranks} ranks (0..={})",
            ranks - 1
        ));
    }
    Ok(RootChoice::One(root))
}

fn device(a: &RunArgs) -> Result<DeviceChoice, String> {
    match a.device.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(DeviceChoice::Auto),
        "host" | "cpu" => Ok(DeviceChoice::Host),
        "cuda" | "gpu" => Ok(DeviceChoice::Cuda),
        "cuda-emu" => Ok(DeviceChoice::CudaEmu),
        other => Err(format!(
            "unknown --device '{other}' (known: auto, host, cuda, cuda-emu)"
        )),
    }
}

fn protocol(a: &RunArgs) -> Result<Option<Proto>, String> {
    match a.protocol.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "simple" => Ok(Some(Proto::Simple)),
        "ll" | "low-latency" => Ok(Some(Proto::LowLatency)),
        other => Err(format!(
            "unknown --protocol '{other}' (known: auto, simple, ll)"
        )),
    }
}

fn placements(a: &RunArgs) -> Result<Vec<Placement>, String> {
    match a.placement.trim().to_ascii_lowercase().as_str() {
        "both" => Ok(vec![Placement::OutOfPlace, Placement::InPlace]),
        "out" | "out-of-place" => Ok(vec![Placement::OutOfPlace]),
        "in" | "in-place" => Ok(vec![Placement::InPlace]),
        other => Err(format!(
            "unknown --placement '{other}' (known: both, in, out)"
        )),
    }
}

/// `--channels`: 1 to 64, or `auto` (0: one on the host engine, what keeps
/// the GPU busy on the CUDA engine).
fn channels(a: &RunArgs) -> Result<usize, String> {
    if a.channels.trim().eq_ignore_ascii_case("auto") {
        return Ok(0);
    }
    let channels: usize = num("--channels", &a.channels)?;
    if !(1..=crate::engine::exec::world::MAX_CHANNELS).contains(&channels) {
        return Err(format!(
            "--channels {channels}: must be 1 to {}, or auto",
            crate::engine::exec::world::MAX_CHANNELS
        ));
    }
    Ok(channels)
}

fn host_options(a: &RunArgs) -> Result<HostOptions, String> {
    let slot_bytes = parse_bytes(&a.slot_size).map_err(|e| format!("--slot-size: {e}"))?;
    if !(64..=64 << 20).contains(&slot_bytes) {
        return Err("--slot-size must be 64B to 64MiB".into());
    }
    Ok(HostOptions {
        slot_bytes: slot_bytes as usize,
        timeout: parse_duration(&a.timeout).map_err(|e| format!("--timeout: {e}"))?,
        ..HostOptions::default()
    })
}
