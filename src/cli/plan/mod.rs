//! Arguments to a validated sweep: every error a user can make is found
//! here and said in one line.

use super::values::{inject_in_world, AlgoArg, DeviceChoice, FormatChoice, TimingChoice};
use super::{NcclTestsArgs, PlacementChoice, RunArgs, SizeArgs};
use crate::engine::elem::Scalar;
use crate::engine::exec::world::Pace;
use crate::engine::exec::HostOptions;
use crate::engine::split::Split;
use crate::engine::types::{Algo, Collective, Dtype, Engine, ReduceOp};
use crate::harness::{AlgoChoice, Plan, RootChoice};
use crate::harness::{GraphAsk, RankTime};
use crate::units::{sweep, Growth};
use std::path::PathBuf;

mod sizes;
#[cfg(test)]
mod tests;
mod unused;
use sizes::*;
pub(crate) use sizes::{nccl_tests_step, sizes};
use unused::*;

/// Why a sweep's options do not fit together (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn bad<T>(msg: String) -> Result<T, PlanError> {
    Err(PlanError(msg))
}

/// A sweep request: the plan and how to present it.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub plan: Plan,
    pub device: DeviceChoice,
    /// `--timing` (None: events on the CUDA engine, wall on the host).
    pub timing: Option<TimingChoice>,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub format: FormatChoice,
    pub quiet: bool,
    pub verbose: u8,
    /// One line each about flags accepted without effect here.
    pub notes: Vec<String>,
    /// `--min-link-gbps`: links slower than this are findings too.
    pub min_link_gbps: Option<f64>,
    /// Files the sweep reads (`--tuning`, a `--split` file): no output may
    /// overwrite them.
    pub inputs: Vec<PathBuf>,
    /// Run as an nccl-tests binary: its header line as nccl-tests prints
    /// it for the flags given, and `NCCL_TESTS_MIN_BW`.
    pub nccl_tests: Option<NcclTestsRun>,
    /// Operations per timed iteration (`-m`): `plan.iters` holds them all.
    pub agg_iters: usize,
}

/// What an nccl-tests binary's run says of itself beyond the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclTestsRun {
    /// `# nThread T nGpus G minBytes ... graph: N`, from the flags.
    pub header: String,
    /// `NCCL_TESTS_MIN_BW`: the average bus bandwidth (GB/s) below 0.9 of
    /// which the run fails.
    pub min_bw: Option<f64>,
}

/// The types in nccl-tests' order (its `-d all`: bfloat16 after double)
/// when run as its binaries; as given otherwise.
fn nccl_tests_order(mut types: Vec<Dtype>, as_nccl_tests: bool) -> Vec<Dtype> {
    if as_nccl_tests {
        types.sort_by_key(|t| Dtype::NCCL_TESTS_ORDER.iter().position(|x| x == t));
    }
    types
}

/// nccl-tests' header line and bandwidth floor for a run under its
/// binaries' names (None otherwise); `world`: the world of rank processes
/// this one is a rank of, if any.
fn nccl_tests_run(a: &RunArgs, world: Option<usize>) -> Result<Option<NcclTestsRun>, PlanError> {
    let nt = &a.nccl_tests;
    if !nt.as_nccl_tests {
        return Ok(None);
    }
    let min_bw = match std::env::var("NCCL_TESTS_MIN_BW") {
        Err(_) => None,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && f >= 0.0 => Some(f),
            _ => {
                return bad(format!(
                    "NCCL_TESTS_MIN_BW={v}: expected a bus bandwidth in GB/s, such as 150"
                ))
            }
        },
    };
    // collbench's own --sizes given to the binary: what it sweeps.
    let (min, max, step) = match a.sizes.sizes.as_ref().map(|s| &s.0[..]) {
        Some(list @ [first, .., last]) => (*first, *last, crate::units::nccl_tests_step(list)),
        Some([only]) => (*only, *only, crate::units::nccl_tests_step(&[*only])),
        _ => (
            a.sizes.minbytes.unwrap_or(NCCL_TESTS_SIZE),
            a.sizes.maxbytes.unwrap_or(NCCL_TESTS_SIZE),
            nccl_tests_step(&a.sizes),
        ),
    };
    // The ranks of this process are nThread x nGpus: `--ranks N` alone
    // (one process) is nccl-tests' `-g N`.
    let ngpus = match (nt.nthreads, nt.ngpus, a.ranks, world) {
        (_, Some(g), _, _) => g,
        (None, None, Some(r), None) => r,
        _ => 1,
    };
    let header = format!(
        "# nThread {} nGpus {ngpus} minBytes {min} maxBytes {max} step: {step} warmup iters: {} iters: {} agg iters: {} validation: {} graph: {}",
        nt.nthreads.unwrap_or(1),
        a.warmup,
        a.iters,
        nt.agg_iters.unwrap_or(1),
        if a.no_check { 0 } else { a.check_iters.unwrap_or(1) },
        nt.cudagraph.unwrap_or(0),
    );
    Ok(Some(NcclTestsRun { header, min_bw }))
}

impl Sweep {
    /// Whether `--json -` or `--csv -` (or `/dev/stdout`) makes stdout the
    /// data's, so that the table and notes for people go to stderr.
    pub fn data_on_stdout(&self) -> bool {
        let dash = |p: &Option<PathBuf>| p.as_deref().is_some_and(crate::units::is_stdout);
        dash(&self.json) || dash(&self.csv)
    }
}

/// `--gpu-map`, else COLLBENCH_GPU_MAP (a bad value of either is an error).
fn gpu_map(a: &RunArgs) -> Result<Option<Vec<usize>>, PlanError> {
    if let Some(m) = &a.gpu_map {
        return Ok(Some(m.0.clone()));
    }
    match std::env::var("COLLBENCH_GPU_MAP") {
        Ok(v) if !v.trim().is_empty() => crate::cli::values::gpu_map(&v)
            .map(|l| Some(l.0))
            .map_err(|e| PlanError(format!("COLLBENCH_GPU_MAP: {e}"))),
        _ => Ok(None),
    }
}

fn names<T>(all: &[T], name: impl Fn(&T) -> &'static str) -> String {
    all.iter().map(name).collect::<Vec<_>>().join(", ")
}

fn algos(arg: &AlgoArg, colls: &[Collective]) -> Result<AlgoChoice, PlanError> {
    let chosen = match arg {
        AlgoArg::Auto => return Ok(AlgoChoice::Auto),
        AlgoArg::List(l) => l,
    };
    let said = names(chosen, |a| a.name()).replace(", ", ",");
    if let [c] = colls {
        if !chosen.iter().any(|x| c.algos().contains(x)) {
            return bad(format!(
                "--algo {said}: not an algorithm for {c} (it has: {})",
                names(c.algos(), |x| x.name())
            ));
        }
    } else if !colls
        .iter()
        .any(|c| chosen.iter().any(|x| c.algos().contains(x)))
    {
        return bad(format!("--algo {said}: no selected collective has it"));
    }
    Ok(AlgoChoice::List(chosen.clone()))
}

/// Validates `a` for `coll` (None: every collective). `world`: the MPI
/// world's size when this process is one rank of one (the rank count is
/// then the world's).
pub fn build(
    coll: Option<Collective>,
    a: &RunArgs,
    world: Option<usize>,
) -> Result<Sweep, PlanError> {
    let collectives = coll.map_or(Collective::ALL.to_vec(), |c| vec![c]);
    build_over(coll, collectives, a, world)
}

/// [`build`] over `collectives` (`coll`: the subcommand's one, if any).
fn build_over(
    coll: Option<Collective>,
    collectives: Vec<Collective>,
    a: &RunArgs,
    world: Option<usize>,
) -> Result<Sweep, PlanError> {
    let nt = &a.nccl_tests;
    let ranks = ranks(a.ranks, nt, world)?;
    // The slowed links of `--inject slow` and `slow-link`.
    let pace = Pace::new(a.inject.iter().filter_map(|i| i.pace_rule()).collect());
    let (format, both) = output_format(a);
    let placements = if both {
        PlacementChoice::Both
    } else {
        a.placement
    }
    .placements();
    let iters = iterations(a)?;
    check_together(a, ranks)?;
    let premul = a.op.0.contains(&ReduceOp::PreMulSum) && collectives.iter().any(|c| c.reduces());
    let (group, group_mix, collectives) = grouping(a, coll, collectives)?;
    let members = members_of(&collectives, &group_mix);
    check_members(a, &members, ranks, premul)?;
    let tuning = match &a.tuning {
        Some(p) => Some(std::sync::Arc::new(read_tuning(p)?)),
        None => None,
    };
    let notes = Unused {
        premul,
        v_runs: members.iter().any(|c| c.vkind().is_some()),
        reduce_runs: members.iter().any(|c| c.reduces()),
        rooted_runs: members.iter().any(|c| c.rooted()),
        both,
    }
    .notes(a, &collectives, &members, tuning.as_deref(), &pace, ranks);
    let plan = Plan {
        group,
        group_mix,
        split: a.split,
        sizes: sizes(&a.sizes, nt.as_nccl_tests)?,
        ranks,
        algos: algos(&a.algo, &members)?,
        dtypes: nccl_tests_order(a.dtype.0.clone(), nt.as_nccl_tests),
        ops: a.op.0.clone(),
        scalar: a.scalar,
        roots: a.root,
        placements,
        iters,
        warmup: a.warmup,
        rank_time: rank_time(a),
        check_iters: match (a.check_iters, a.no_check) {
            (_, true) => 0,
            (Some(c), false) => c,
            (None, false) => 1,
        },
        channels: a.channels.count(),
        seed: a.seed,
        host: host_options(a, pace)?,
        fr_entries: a.fr_entries,
        dump_dir: a.dump_dir.clone(),
        injects: a.inject.clone(),
        graph: graph_ask(a),
        protocol: a.protocol.proto(),
        links_from: None,
        tuning,
        engines: a.engine.0.clone(),
        collectives,
        gpu_map: gpu_map(a)?,
        allow_shared_gpu: a.allow_shared_gpu,
        // A bad value stops the run here, before anything runs.
        cuda_knobs: crate::engine::exec::cuda::launch::EnvKnobs::from_env().map_err(PlanError)?,
        slot_bytes: a.slot_size,
    };
    finish(a, plan, format, notes, world)
}

/// The sweep of `plan` with the run's outputs and reporting from `a`.
fn finish(
    a: &RunArgs,
    plan: Plan,
    format: FormatChoice,
    notes: Vec<String>,
    world: Option<usize>,
) -> Result<Sweep, PlanError> {
    Ok(Sweep {
        nccl_tests: nccl_tests_run(a, world)?,
        agg_iters: a.nccl_tests.agg_iters.unwrap_or(1),
        plan,
        device: a.device,
        timing: a.timing,
        json: a.json.clone(),
        csv: a.out.csv.clone(),
        plot: a.out.plot.clone(),
        format,
        quiet: a.out.quiet,
        verbose: a.out.verbose,
        min_link_gbps: a.min_link_gbps,
        inputs: inputs(a),
        notes,
    })
}

/// The output's format (nccl-tests' text when run by a binary's name), and
/// whether it forces both placements: nccl-tests' text has both on every
/// line, never a dash.
fn output_format(a: &RunArgs) -> (FormatChoice, bool) {
    let format = match a.out.format {
        Some(f) => f,
        None if a.nccl_tests.as_nccl_tests => FormatChoice::NcclTests,
        None => FormatChoice::Table,
    };
    let both = format == FormatChoice::NcclTests && a.placement != PlacementChoice::Both;
    (format, both)
}

/// The collectives that run, each once: the sweep's, then a group's mix.
fn members_of(collectives: &[Collective], group_mix: &[Collective]) -> Vec<Collective> {
    let mut members: Vec<Collective> = Vec::new();
    for &c in collectives.iter().chain(group_mix) {
        if !members.contains(&c) {
            members.push(c);
        }
    }
    members
}

/// How ranks' times make a row's: `-a` when given, else nccl-tests' mean
/// by a binary's name and the slowest rank otherwise.
fn rank_time(a: &RunArgs) -> RankTime {
    let nt = &a.nccl_tests;
    nt.average.unwrap_or(if nt.as_nccl_tests {
        RankTime::Mean
    } else {
        RankTime::Max
    })
}

/// Whether iterations run as a captured graph: `--graph` requires one,
/// nccl-tests' `-G N` asks for one where the device has graphs.
fn graph_ask(a: &RunArgs) -> GraphAsk {
    match (a.graph, a.nccl_tests.cudagraph) {
        (true, _) => GraphAsk::Required,
        (false, Some(n)) if n > 0 => GraphAsk::IfCuda,
        _ => GraphAsk::No,
    }
}

/// What the sweep's collectives (`members`, grouped ones included) ask
/// of the settings: a premulsum scalar every type can hold, a root among
/// the ranks where a rooted collective runs (elsewhere it is only noted
/// unused: nccl-tests' binaries take `-r` whatever they run), and an
/// uneven split that fits the v collectives.
fn check_members(
    a: &RunArgs,
    members: &[Collective],
    ranks: usize,
    premul: bool,
) -> Result<(), PlanError> {
    if premul {
        for &d in &a.dtype.0 {
            crate::harness::plan::premul_fits(d, a.scalar).map_err(PlanError)?;
        }
    }
    if let (RootChoice::One(root), true) = (a.root, members.iter().any(|c| c.rooted())) {
        if root >= ranks {
            return bad(format!(
                "--root {root} is outside the {ranks} ranks (0..={})",
                ranks - 1
            ));
        }
    }
    for kind in members.iter().filter_map(|c| c.vkind()) {
        a.split.check(kind, ranks).map_err(PlanError)?;
    }
    Ok(())
}

/// The host engine's options from the flags, with the links `pace` slows.
fn host_options(a: &RunArgs, pace: Pace) -> Result<HostOptions, PlanError> {
    Ok(HostOptions {
        slot_bytes: a.slot_size.unwrap_or(HostOptions::default().slot_bytes),
        timeout: a.timeout,
        link_timing: a.links,
        pace,
        // A bad value stops the run here, before anything runs.
        bind: crate::engine::cpus::Bind::from_env().map_err(PlanError)?,
        ..HostOptions::default()
    })
}

/// The files the sweep reads (a tuning table, a weights file).
fn inputs(a: &RunArgs) -> Vec<PathBuf> {
    a.tuning
        .iter()
        .cloned()
        .chain(match a.split {
            Split::Weights { name, .. } => Some(PathBuf::from(name)),
            _ => None,
        })
        .collect()
}

/// Timed operations a case: `--iters`, times nccl-tests' `-m`; the warm-up
/// and checked ones bounded alike.
fn iterations(a: &RunArgs) -> Result<usize, PlanError> {
    let agg = a.nccl_tests.agg_iters.unwrap_or(1);
    let iters = a
        .iters
        .checked_mul(agg)
        .filter(|&n| n <= MAX_ITERS)
        .ok_or_else(|| {
            let asked = if agg > 1 {
                format!("-n {} x -m {agg}", a.iters)
            } else {
                format!("--iters {}", a.iters)
            };
            PlanError(format!(
                "{asked}: too many iterations: at most {MAX_ITERS} timed operations a case (each one's time is kept)"
            ))
        })?;
    for (flag, n) in [
        ("--warmup", a.warmup),
        ("--check-iters", a.check_iters.unwrap_or(0)),
    ] {
        if n > MAX_ITERS {
            return bad(format!("{flag} {n}: at most {MAX_ITERS}"));
        }
    }
    Ok(iters)
}

/// Refuses flags that contradict each other or the world of `ranks`:
/// wrong values injected where no check looks, `--check` with no checked
/// iterations, `--links` without the builtin engine or a second rank,
/// injections outside the world, a NaN for integer types only.
fn check_together(a: &RunArgs, ranks: usize) -> Result<(), PlanError> {
    let checks_off = a.no_check || a.check_iters == Some(0);
    if let Some(i) = a.inject.iter().find(|i| {
        matches!(
            i.fault,
            crate::harness::inject::Fault::Nan | crate::harness::inject::Fault::Corrupt
        )
    }) {
        if checks_off {
            return bad(format!(
                "--inject {i} makes wrong values for the checks to find, and checks are off (--no-check or --check-iters 0): nothing would find them"
            ));
        }
    }
    if a.check && a.check_iters == Some(0) {
        return bad(
            "--check asks for checks and --check-iters 0 turns them off: give one of them".into(),
        );
    }
    if a.links && !a.engine.0.contains(&Engine::Builtin) {
        return bad(
            "--links (and `collbench links`) time the builtin engine's transfers: add builtin to --engine (NCCL's and MPI's are not seen)".into(),
        );
    }
    if a.min_link_gbps.is_some() && !a.links {
        return bad(
            "--min-link-gbps judges links: give --links too (or run `collbench links`)".into(),
        );
    }
    if a.links && ranks < 2 {
        // A verdict of no finding would read as links that passed. The
        // advice names the flag that made the one rank.
        let nt = &a.nccl_tests;
        let more = if a.procs.is_some() {
            "give --procs 2 or more"
        } else if a.ranks.is_none() && (nt.ngpus.is_some() || nt.nthreads.is_some()) {
            "give -g 2 or more"
        } else if a.ranks.is_none() && nt.as_nccl_tests {
            "nccl-tests' binaries run one rank unless told: give -g 2 or more"
        } else {
            "give --ranks 2 or more"
        };
        return bad(format!(
            "--links (and `collbench links`) time the links between ranks: {ranks} rank has none ({more})"
        ));
    }
    for i in &a.inject {
        inject_in_world(i, ranks).map_err(|e| PlanError(e.to_string()))?;
        if i.fault == crate::harness::inject::Fault::Nan && !a.dtype.0.iter().any(|d| d.is_float())
        {
            return bad(format!(
                "--inject {i}: a NaN needs a floating-point --dtype, and this sweep has only integers"
            ));
        }
    }
    Ok(())
}

/// `--group` and `--group-mix`: the group's size, its members' collectives
/// (empty: the case's own) and the collectives the sweep's cases lead with.
fn grouping(
    a: &RunArgs,
    coll: Option<Collective>,
    collectives: Vec<Collective>,
) -> Result<(usize, Vec<Collective>, Vec<Collective>), PlanError> {
    let mix = a
        .group_mix
        .as_ref()
        .map(|m| m.0.clone())
        .unwrap_or_default();
    let n = match (a.group, mix.len()) {
        (Some(n), _) => n as usize,
        (None, 0) => return Ok((0, mix, collectives)),
        (None, 1) => {
            return bad(format!(
                "--group-mix {}: a group has 2 or more operations (name more, or give --group N)",
                mix[0]
            ))
        }
        // As many operations as `--group` takes, at most.
        (None, len) if len > 64 => {
            return bad(format!(
                "--group-mix names {len} collectives: a group has 2 to 64 operations"
            ))
        }
        (None, len) => len,
    };
    if mix.len() > n {
        return bad(format!(
            "--group-mix names {} collectives and --group {n} makes groups of {n}: the last {} would never run (give --group {} or more, or drop --group)",
            mix.len(),
            mix.len() - n,
            mix.len()
        ));
    }
    if a.engine.0.contains(&Engine::Mpi) {
        return bad(
            "--group runs on the builtin engine and --engine nccl (NCCL's group calls); MPI has no group of collectives".into(),
        );
    }
    if a.op.0.contains(&ReduceOp::PreMulSum)
        && mix.iter().any(|c| !c.reduces())
        && mix.iter().any(|c| c.reduces())
    {
        return bad(
            "--op premulsum in a group that mixes reducing and non-reducing collectives: premulsum scales every input a group reads, so run the reducing ones as their own group".into(),
        );
    }
    let Some(&lead) = mix.first() else {
        return Ok((n, mix, collectives));
    };
    match coll {
        Some(c) if !mix.contains(&c) => bad(format!(
            "--group-mix {}: it does not include {c}, the subcommand's collective (run `collbench all --group-mix ...`, or name {c} in it)",
            mix.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
        )),
        // The mix makes one group per case, led by its first collective.
        _ => Ok((n, mix, vec![lead])),
    }
}

/// `collbench tune`: the sweep of every algorithm (or those `--algo`
/// names) of the collectives to fit; its own `--tuning` is not read.
pub fn build_tune(t: &super::TuneArgs) -> Result<Sweep, PlanError> {
    let mut a = t.run.clone();
    a.tuning = None;
    if a.group.is_some() || a.group_mix.is_some() {
        return bad("tune fits single operations: drop --group and --group-mix".into());
    }
    if a.algo == AlgoArg::Auto {
        a.algo = AlgoArg::List(Algo::ALL.to_vec());
    }
    if a.placement == PlacementChoice::In {
        return bad(
            "tune fits out-of-place rows (in place, some algorithms move less): drop --placement in"
                .into(),
        );
    }
    build_over(None, t.collective.0.clone(), &a, None)
}

/// The most timed operations (and warm-up or check iterations) one case
/// may ask for: each timed one's time is kept, per rank.
pub const MAX_ITERS: usize = 10_000_000;

/// Reads a cost-model table (`--tuning FILE`).
pub fn read_tuning(p: &std::path::Path) -> Result<crate::harness::tuning::Tuning, PlanError> {
    let text = crate::units::read_input_text(p, 64 << 20)
        .map_err(|e| PlanError(format!("--tuning {}: {e}", p.display())))?;
    crate::harness::tuning::Tuning::parse(&text)
        .map_err(|e| PlanError(format!("--tuning {}: {e}", p.display())))
}

/// `collbench links`: send-recv once per peer offset 1..n-1 with every link
/// timed. `--root` and `--links` mean nothing here (the offsets are the
/// roots; links are always on).
pub fn build_links(a: &RunArgs, world: Option<usize>) -> Result<Sweep, PlanError> {
    let mut a = a.clone();
    a.links = true;
    if a.group.is_some() || a.group_mix.is_some() {
        return bad("collbench links times single send-recvs: drop --group and --group-mix".into());
    }
    if a.algo != AlgoArg::Auto {
        return bad("collbench links runs its own algorithms (send-recv rounds, then all-reduce ring and tree): drop --algo".into());
    }
    // Beside the rounds, the all-reduces whose links a sweep would time,
    // each judged on its own (their operator, scalar and tuning are
    // checked and used as a sweep's).
    let both = vec![Collective::SendRecv, Collective::AllReduce];
    // (One rank, which has no link, is refused there.)
    let mut s = build_over(Some(Collective::SendRecv), both, &a, world)?;
    s.plan.roots = RootChoice::PeerOffsets;
    s.plan.algos = AlgoChoice::Pairs(vec![
        (Collective::SendRecv, Algo::Direct),
        (Collective::AllReduce, Algo::Ring),
        (Collective::AllReduce, Algo::Tree),
    ]);
    s.plan.links_from = Some(Collective::SendRecv);
    Ok(s)
}

/// The rank count: `--ranks`, or nccl-tests' threads x GPUs per thread;
/// under MPI (`world`) the world's size, one rank per process.
fn ranks(
    asked: Option<usize>,
    nt: &NcclTestsArgs,
    world: Option<usize>,
) -> Result<usize, PlanError> {
    let per_process =
        match (nt.nthreads, nt.ngpus) {
            (None, None) => None,
            (t, g) => {
                let (t, g) = (t.unwrap_or(1), g.unwrap_or(1));
                Some(t.checked_mul(g).ok_or_else(|| {
                    PlanError(format!("-t {t} x -g {g}: past any number of ranks"))
                })?)
            }
        };
    match (asked, per_process, world) {
        (_, Some(n), Some(w)) if n != 1 => bad(format!(
            "-t x -g = {n}: with rank processes (MPI, srun, --procs) every process is one rank (this world has {w}); \
             run with -t 1 -g 1 and one process per GPU"
        )),
        (Some(r), _, Some(w)) if r != w => bad(format!(
            "--ranks {r}: with rank processes (MPI, srun, --procs) every process is one rank, and this world has {w}"
        )),
        (_, _, Some(w)) => Ok(w),
        (Some(r), Some(n), None) if r != n => bad(format!(
            "--ranks {r} and -t x -g = {n} disagree: give one of them"
        )),
        (Some(r), _, None) => Ok(r),
        (None, Some(n), None) => Ok(n),
        // nccl-tests' binaries: one thread of one GPU.
        (None, None, None) if nt.as_nccl_tests => Ok(1),
        (None, None, None) => Ok(2),
    }
}
