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

/// nccl-tests' default size (its `-b` and `-e` both default to 32 MiB).
const NCCL_TESTS_SIZE: u64 = 32 << 20;
/// nccl-tests' default step (`-i`), taken when no factor above 1 is given.
const NCCL_TESTS_STEP: u64 = 1 << 20;

pub(crate) fn sizes(a: &SizeArgs, as_nccl_tests: bool) -> Result<Vec<u64>, PlanError> {
    if let Some(s) = &a.sizes {
        return Ok(s.0.clone());
    }
    if as_nccl_tests {
        return nccl_tests_sizes(a);
    }
    let (min, max) = match (a.minbytes, a.maxbytes) {
        (None, None) => (8, 64 << 20),
        (Some(m), None) => (m, m.max(64 << 20)),
        (None, Some(m)) => (8.min(m), m),
        (Some(a), Some(b)) => (a, b),
    };
    let growth = match (a.stepfactor, a.stepbytes) {
        // Both, as nccl-tests takes them: the factor where it grows.
        (Some(f), Some(s)) => {
            if f > 1.0 {
                Growth::Factor(f)
            } else {
                Growth::Step(s)
            }
        }
        (Some(f), None) => Growth::Factor(f),
        (None, Some(s)) => Growth::Step(s),
        (None, None) => Growth::Factor(2.0),
    };
    sweep(min, max, growth).map_err(|e| PlanError(format!("{}: {e}", size_flags(a))))
}

/// The size flags given (`-b 8 -e 64 -f 1`), to name them in an error.
fn size_flags(a: &SizeArgs) -> String {
    let mut given = Vec::new();
    if let Some(b) = a.minbytes {
        given.push(format!("-b {b}"));
    }
    if let Some(e) = a.maxbytes {
        given.push(format!("-e {e}"));
    }
    if let Some(f) = a.stepfactor {
        given.push(format!("-f {f}"));
    }
    if let Some(i) = a.stepbytes {
        given.push(format!("-i {i}"));
    }
    if given.is_empty() {
        "sizes".into()
    } else {
        given.join(" ")
    }
}

/// The sizes as nccl-tests' binaries sweep them: `-b` and `-e` default to
/// 32 MiB each; a factor above 1 (`-f`) multiplies, else the step (`-i`,
/// default 1 MiB) adds.
fn nccl_tests_sizes(a: &SizeArgs) -> Result<Vec<u64>, PlanError> {
    let min = a.minbytes.unwrap_or(NCCL_TESTS_SIZE);
    let max = a.maxbytes.unwrap_or(NCCL_TESTS_SIZE);
    if min > max {
        return bad(format!(
            "invalid sizes for 'minbytes' and 'maxbytes': {min} > {max} (-b and -e default to {NCCL_TESTS_SIZE})"
        ));
    }
    let growth = match a.stepfactor {
        Some(f) if f > 1.0 => Growth::Factor(f),
        Some(f) if f < 0.0 => return bad(format!("-f {f}: a factor is not negative")),
        _ => Growth::Step(a.stepbytes.unwrap_or(NCCL_TESTS_STEP)),
    };
    // min 0 (nccl-tests runs an empty case): the smallest size is a byte.
    sweep(min.max(1), max.max(1), growth).map_err(|e| PlanError(format!("{}: {e}", size_flags(a))))
}

/// `-i` beside a factor above 1 (`-f`), which grows the sweep instead, as
/// in nccl-tests.
fn step_unused(a: &SizeArgs) -> Option<String> {
    match (a.stepfactor, a.stepbytes) {
        (Some(f), Some(i)) if f > 1.0 => Some(format!(
            "-i {i}: the sizes grow by -f {f} (a factor above 1 multiplies, as in nccl-tests), so the step is unused"
        )),
        // -f 1 with -i is how nccl-tests asks for a step: nothing to say.
        (Some(f), Some(i)) if f < 1.0 => Some(format!(
            "-f {f}: a factor below 1 does not multiply (as in nccl-tests), so the sizes step by -i {i}"
        )),
        _ => None,
    }
}

/// The `step:` of nccl-tests' header for a sweep run as its binaries run
/// it: `F(factor)` when a factor above 1 grows it, else `N(bytes)`.
pub(crate) fn nccl_tests_step(a: &SizeArgs) -> String {
    match a.stepfactor {
        Some(f) if f > 1.0 => format!("{f}(factor)"),
        _ => format!("{}(bytes)", a.stepbytes.unwrap_or(NCCL_TESTS_STEP)),
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
    let format = match a.out.format {
        Some(f) => f,
        None if nt.as_nccl_tests => FormatChoice::NcclTests,
        None => FormatChoice::Table,
    };
    // nccl-tests' text has both placements on every line, never a dash.
    let both = format == FormatChoice::NcclTests && a.placement != PlacementChoice::Both;
    let placements = if both {
        PlacementChoice::Both
    } else {
        a.placement
    }
    .placements();
    let iters = iterations(a)?;
    check_together(a, ranks)?;
    let premul = a.op.0.contains(&ReduceOp::PreMulSum) && collectives.iter().any(|c| c.reduces());
    if premul {
        for &d in &a.dtype.0 {
            crate::harness::plan::premul_fits(d, a.scalar).map_err(PlanError)?;
        }
    }
    let (group, group_mix, collectives) = grouping(a, coll, collectives)?;
    let members: Vec<Collective> = collectives.iter().chain(&group_mix).copied().collect();
    let rooted_runs = members.iter().any(|c| c.rooted());
    // A root no rooted collective uses is only noted as unused (nccl-tests'
    // binaries take `-r` whatever they run).
    if let (RootChoice::One(root), true) = (a.root, rooted_runs) {
        if root >= ranks {
            return bad(format!(
                "--root {root} is outside the {ranks} ranks (0..={})",
                ranks - 1
            ));
        }
    }
    let tuning = match &a.tuning {
        Some(p) => Some(std::sync::Arc::new(read_tuning(p)?)),
        None => None,
    };
    for kind in members.iter().filter_map(|c| c.vkind()) {
        a.split.check(kind, ranks).map_err(PlanError)?;
    }
    let notes = Unused {
        premul,
        v_runs: members.iter().any(|c| c.vkind().is_some()),
        reduce_runs: members.iter().any(|c| c.reduces()),
        rooted_runs,
        both,
    }
    .notes(a, &collectives, &members, tuning.as_deref(), &pace, ranks);
    let plan = Plan {
        group,
        group_mix,
        split: a.split,
        sizes: sizes(&a.sizes, nt.as_nccl_tests)?,
        ranks,
        algos: algos(&a.algo, &collectives)?,
        dtypes: nccl_tests_order(a.dtype.0.clone(), nt.as_nccl_tests),
        ops: a.op.0.clone(),
        scalar: a.scalar,
        roots: a.root,
        placements,
        iters,
        warmup: a.warmup,
        rank_time: nt.average.unwrap_or(if nt.as_nccl_tests {
            RankTime::Mean
        } else {
            RankTime::Max
        }),
        check_iters: match (a.check_iters, a.no_check) {
            (_, true) => 0,
            (Some(c), false) => c,
            (None, false) => 1,
        },
        channels: a.channels.count(),
        seed: a.seed,
        host: HostOptions {
            slot_bytes: a.slot_size,
            timeout: a.timeout,
            link_timing: a.links,
            pace: pace.clone(),
            // A bad value stops the run here, before anything runs.
            bind: crate::engine::cpus::Bind::from_env().map_err(PlanError)?,
            ..HostOptions::default()
        },
        fr_entries: a.fr_entries,
        dump_dir: a.dump_dir.clone(),
        injects: a.inject.clone(),
        graph: match (a.graph, nt.cudagraph) {
            (true, _) => GraphAsk::Required,
            (false, Some(n)) if n > 0 => GraphAsk::IfCuda,
            _ => GraphAsk::No,
        },
        protocol: a.protocol.proto(),
        links_from: None,
        tuning: tuning.clone(),
        engines: a.engine.0.clone(),
        collectives,
        gpu_map: gpu_map(a)?,
        allow_shared_gpu: a.allow_shared_gpu,
        // A bad value stops the run here, before anything runs.
        cuda_knobs: crate::engine::exec::cuda::launch::EnvKnobs::from_env().map_err(PlanError)?,
    };
    Ok(Sweep {
        nccl_tests: nccl_tests_run(a, world)?,
        agg_iters: nt.agg_iters.unwrap_or(1),
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
        inputs: a
            .tuning
            .iter()
            .cloned()
            .chain(match a.split {
                Split::Weights { name, .. } => Some(PathBuf::from(name)),
                _ => None,
            })
            .collect(),
        notes,
    })
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
        // A verdict of no finding would read as links that passed.
        return bad(format!(
            "--links (and `collbench links`) time the links between ranks: {ranks} rank has none (give --ranks 2 or more)"
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

/// What the sweep runs, for the notes on flags it leaves unused.
struct Unused {
    premul: bool,
    v_runs: bool,
    reduce_runs: bool,
    rooted_runs: bool,
    /// `--format nccl-tests` made both placements run.
    both: bool,
}

impl Unused {
    /// A line for people on each flag given that changes nothing in this
    /// sweep, or that the sweep takes otherwise than asked.
    fn notes(
        &self,
        a: &RunArgs,
        collectives: &[Collective],
        members: &[Collective],
        tuning: Option<&crate::harness::tuning::Tuning>,
        pace: &Pace,
        ranks: usize,
    ) -> Vec<String> {
        // The sweep's collectives the table has no entry for.
        let untuned: Vec<&str> = match tuning {
            Some(t) => {
                let mut v: Vec<&str> = members
                    .iter()
                    .filter(|&&c| !t.entries.iter().any(|e| e.coll() == Some(c)))
                    .map(|c| c.name())
                    .collect();
                v.dedup();
                v
            }
            None => Vec::new(),
        };
        // `all --algo tree`: the collectives without such an algorithm.
        let algo_skipped: Vec<&str> = match &a.algo {
            AlgoArg::List(l) if collectives.len() > 1 => collectives
                .iter()
                .filter(|c| !l.iter().any(|x| c.algos().contains(x)))
                .map(|c| c.name())
                .collect(),
            _ => Vec::new(),
        };
        let nt = &a.nccl_tests;
        flag_notes(a.iters, nt)
            .into_iter()
            .chain((!self.premul && a.scalar != Scalar::default()).then(|| {
                format!(
                    "--scalar {} is premulsum's: no premulsum runs in this sweep, so it is unused",
                    a.scalar
                )
            }))
            .chain((!self.v_runs && a.split != Split::Uniform).then(|| {
                format!(
                    "--split {} is the v-collectives': none runs in this sweep, so it is unused",
                    a.split
                )
            }))
            .chain((!self.reduce_runs && a.op.0 != [ReduceOp::Sum]).then(|| {
                format!(
                    "--op {} is the reductions' (all-reduce, reduce, reduce-scatter): none runs in this sweep, so it is unused",
                    a.op.0.iter().map(|o| o.name()).collect::<Vec<_>>().join(",")
                )
            }))
            .chain((!untuned.is_empty()).then(|| {
                format!(
                    "--tuning {}: no entry for {}: no prediction in those rows, and auto picks as without a table",
                    a.tuning.as_deref().unwrap_or(std::path::Path::new("")).display(),
                    untuned.join(", ")
                )
            }))
            .chain((!self.rooted_runs && a.root != RootChoice::One(0)).then(|| {
                format!(
                    "--root {} is the rooted collectives' (broadcast, reduce, gather, scatter): none runs in this sweep, so it is unused",
                    match a.root {
                        RootChoice::One(r) => r.to_string(),
                        _ => "all".to_string(),
                    }
                )
            }))
            .chain(step_unused(&a.sizes))
            .chain(
                pace.capped(ranks)
                    .then(|| {
                        format!(
                            "--inject: the slow and slow-link rules on one link multiply past {}x: that link is slowed {}x, no more",
                            crate::engine::transport::links::MAX_PACE,
                            crate::engine::transport::links::MAX_PACE
                        )
                    }),
            )
            .chain((!algo_skipped.is_empty()).then(|| {
                format!(
                    "--algo {}: {} have no such algorithm, so they do not run",
                    match &a.algo {
                        AlgoArg::List(l) => names(l, |x| x.name()).replace(", ", ","),
                        AlgoArg::Auto => "auto".into(),
                    },
                    algo_skipped.join(", ")
                )
            }))
            .chain(self.both.then(|| {
                "--format nccl-tests shows out-of-place and in-place side by side, as nccl-tests does: both run".to_string()
            }))
            .collect()
    }
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

/// One line for each nccl-tests flag given that changes nothing here.
fn flag_notes(iters: usize, nt: &NcclTestsArgs) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = nt.agg_iters.filter(|&m| m > 1) {
        out.push(format!(
            "-m {m}: each case times {iters} x {m} = {} operations; times are per operation",
            iters * m
        ));
    }
    if nt.blocking == Some(true) {
        out.push("-z 1: collbench's ranks already wait for every operation of the timed loop before the next case; operations inside the loop stay back to back".into());
    }
    if nt.report_cputime == Some(true) {
        out.push(
            "-C 1: times are CUDA-event or wall-clock times, not CPU time (see --timing)".into(),
        );
    }
    if nt.local_register.is_some_and(|r| r > 0) {
        out.push("-R: buffer registration is NCCL's; collbench's engine reads peers' buffers directly where it can".into());
    }
    if nt.parallel_init == Some(true) {
        out.push("-p: collbench sets its ranks up in parallel always".into());
    }
    if nt.stream_null == Some(true) {
        out.push("-y 1: every rank runs on a stream of its own".into());
    }
    if let Some(n) = nt.run_cycles.filter(|&n| n != 1) {
        out.push(format!(
            "-N {n}: collbench runs the sweep once; run it again for more cycles"
        ));
    }
    if nt.memory_report == Some(true) {
        out.push("-M 1: the memory budget is in the -v logs".into());
    }
    if nt.unalign.is_some() {
        out.push("-u: buffers are always aligned".into());
    }
    if nt.side_comp.is_some() {
        out.push("-k: no side computation runs beside the collectives".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct Line {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(flags: &[&str]) -> RunArgs {
        Line::try_parse_from(flags).unwrap().run
    }

    #[test]
    fn the_links_probe_is_send_recv_once_per_peer_offset_with_links_on() {
        let s = build_links(&parse(&["--ranks", "4", "--sizes", "1M"]), None).unwrap();
        assert!(s.plan.host.link_timing);
        assert_eq!(s.plan.links_from, Some(Collective::SendRecv));
        let (cases, _) = crate::harness::plan::cases(&s.plan);
        let got: Vec<(Collective, Algo, Option<usize>)> =
            cases.iter().map(|c| (c.coll, c.algo, c.root)).collect();
        assert_eq!(
            got,
            [
                (Collective::SendRecv, Algo::Direct, Some(1)),
                (Collective::SendRecv, Algo::Direct, Some(2)),
                (Collective::SendRecv, Algo::Direct, Some(3)),
                (Collective::AllReduce, Algo::Ring, None),
                (Collective::AllReduce, Algo::Tree, None),
            ]
        );
        // A sweep of send-recv keeps its one case, root none (offset 1).
        let s = build(
            Some(Collective::SendRecv),
            &parse(&["--ranks", "4", "--sizes", "1M"]),
            None,
        )
        .unwrap();
        let (cases, _) = crate::harness::plan::cases(&s.plan);
        assert_eq!(cases.iter().map(|c| c.root).collect::<Vec<_>>(), [None]);
        assert!(build_links(&parse(&["--ranks", "1"]), None).is_err());
    }

    /// A sweep of sizes that does not make sense names the flags given.
    #[test]
    fn bad_size_flags_are_named() {
        let coll = Some(Collective::AllReduce);
        let e = build(coll, &parse(&["-b", "8", "-e", "64", "-f", "1"]), None).unwrap_err();
        assert!(e.0.starts_with("-b 8 -e 64 -f 1: factor 1"), "{e}");
        let e = build(coll, &parse(&["-b", "0"]), None).unwrap_err();
        assert!(e.0.starts_with("-b 0: the smallest size"), "{e}");
    }

    /// `-i` beside `-f` above 1 is said to be unused; with `-f 1` it is
    /// the step, and nothing is said.
    #[test]
    fn a_step_beside_a_growing_factor_is_said_to_be_unused() {
        let coll = Some(Collective::AllReduce);
        let s = build(
            coll,
            &parse(&["-b", "8", "-e", "64", "-f", "2", "-i", "8"]),
            None,
        )
        .unwrap();
        assert_eq!(s.plan.sizes, [8, 16, 32, 64]);
        let said: Vec<&String> = s.notes.iter().filter(|n| n.starts_with("-i 8:")).collect();
        assert_eq!(said.len(), 1, "{:?}", s.notes);
        assert!(said[0].contains("grow by -f 2"), "{}", said[0]);
        let s = build(
            coll,
            &parse(&["-b", "8", "-e", "32", "-f", "1", "-i", "8"]),
            None,
        )
        .unwrap();
        assert_eq!(s.plan.sizes, [8, 16, 24, 32]);
        assert!(
            !s.notes
                .iter()
                .any(|n| n.starts_with("-i") || n.starts_with("-f")),
            "{:?}",
            s.notes
        );
        // A factor below 1 beside a step: the step runs, and that is said.
        let s = build(
            coll,
            &parse(&["-b", "8", "-e", "32", "-f", "0.5", "-i", "8"]),
            None,
        )
        .unwrap();
        assert_eq!(s.plan.sizes, [8, 16, 24, 32]);
        assert!(
            s.notes
                .iter()
                .any(|n| n.starts_with("-f 0.5: a factor below 1")),
            "{:?}",
            s.notes
        );
    }

    /// The links probe's all-reduces take the sweep's operator: it is
    /// used (no note says otherwise), and premulsum's scalar is checked
    /// against the types as a sweep's is.
    #[test]
    fn the_links_probe_reduces_with_the_operator_given() {
        let s = build_links(
            &parse(&["--ranks", "2", "--op", "max", "--scalar", "3"]),
            None,
        )
        .unwrap();
        assert_eq!(s.plan.ops, [ReduceOp::Max]);
        assert!(
            !s.notes.iter().any(|n| n.starts_with("--op")),
            "{:?}",
            s.notes
        );
        // The scalar is premulsum's, and no premulsum runs.
        assert!(
            s.notes.iter().any(|n| n.starts_with("--scalar 3")),
            "{:?}",
            s.notes
        );
        let flags = [
            "--ranks",
            "2",
            "--op",
            "premulsum",
            "--scalar",
            "1e40",
            "--dtype",
            "half",
        ];
        let e = build_links(&parse(&flags), None).unwrap_err();
        assert!(e.0.contains("--scalar 1e40 is not finite in half"), "{e}");
    }

    /// `-r 5` to a sweep with no rooted collective is unused, whatever the
    /// rank count: a note, not a refusal (nccl-tests' binaries take it).
    #[test]
    fn a_root_no_collective_uses_is_noted_not_refused() {
        let s = build(
            Some(Collective::AllReduce),
            &parse(&["--ranks", "2", "--root", "5"]),
            None,
        )
        .unwrap();
        assert!(
            s.notes
                .iter()
                .any(|n| n.starts_with("--root 5 is the rooted")),
            "{:?}",
            s.notes
        );
        let e = build(
            Some(Collective::Broadcast),
            &parse(&["--ranks", "2", "--root", "5"]),
            None,
        )
        .unwrap_err();
        assert!(e.0.contains("--root 5 is outside the 2 ranks"), "{e}");
    }

    /// Links are timed on the builtin engine only: without it, refused.
    #[test]
    fn links_without_the_builtin_engine_are_refused() {
        for flags in [&["--engine", "nccl"][..], &["--engine", "mpi"]] {
            let e = build_links(&parse(flags), None).unwrap_err();
            assert!(e.0.contains("add builtin to --engine"), "{e}");
            let with = [flags, &["--links"]].concat();
            let e = build(Some(Collective::AllReduce), &parse(&with), None).unwrap_err();
            assert!(e.0.contains("add builtin to --engine"), "{e}");
        }
        assert!(build_links(&parse(&["--engine", "builtin,nccl"]), None).is_ok());
    }

    /// `all --algo tree` says which collectives it leaves out.
    #[test]
    fn collectives_without_the_algorithm_asked_for_are_noted() {
        let s = build(None, &parse(&["--algo", "tree"]), None).unwrap();
        let said: Vec<&String> = s
            .notes
            .iter()
            .filter(|n| n.starts_with("--algo tree:"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", s.notes);
        assert!(
            said[0].contains("all-gather") && !said[0].contains("all-reduce,"),
            "{}",
            said[0]
        );
        let s = build(None, &parse(&["--algo", "all"]), None).unwrap();
        assert!(
            !s.notes.iter().any(|n| n.starts_with("--algo")),
            "{:?}",
            s.notes
        );
    }

    /// A mix longer than its groups would leave collectives unrun.
    #[test]
    fn a_group_mix_longer_than_the_group_is_refused() {
        let flags = [
            "--group-mix",
            "all-reduce,all-gather,broadcast",
            "--group",
            "2",
        ];
        let e = build(Some(Collective::Broadcast), &parse(&flags), None).unwrap_err();
        assert!(e.0.contains("the last 1 would never run"), "{e}");
        let flags = ["--group-mix", "all-reduce,broadcast", "--group", "3"];
        assert!(build(Some(Collective::Broadcast), &parse(&flags), None).is_ok());
    }

    #[test]
    fn defaults_make_the_documented_sweep() {
        let s = build(Some(Collective::AllReduce), &parse(&[]), None).unwrap();
        let p = &s.plan;
        assert_eq!((p.ranks, p.iters, p.warmup, p.check_iters), (2, 20, 5, 1));
        assert_eq!((p.sizes[0], *p.sizes.last().unwrap()), (8, 64 << 20));
        assert_eq!(p.algos, AlgoChoice::Auto);
        assert_eq!(s.device, DeviceChoice::Auto);
    }

    #[test]
    fn nccl_tests_threads_and_gpus_make_the_ranks() {
        let s = build(None, &parse(&["-t", "2", "-g", "3"]), None).unwrap();
        assert_eq!(s.plan.ranks, 6);
        // Under MPI each process is one rank: -t x -g must be 1.
        assert_eq!(
            build(None, &parse(&["-g", "1"]), Some(8))
                .unwrap()
                .plan
                .ranks,
            8
        );
        let e = build(None, &parse(&["-g", "2"]), Some(8)).unwrap_err();
        assert!(e.0.contains("every process is one rank"), "{e}");
        let e = build(None, &parse(&["--ranks", "4", "-g", "2"]), None).unwrap_err();
        assert!(e.0.contains("disagree"), "{e}");
    }

    #[test]
    fn the_world_sets_the_rank_count() {
        let s = build(None, &parse(&[]), Some(4)).unwrap();
        assert_eq!(s.plan.ranks, 4);
        let e = build(None, &parse(&["--ranks", "3"]), Some(4)).unwrap_err();
        assert!(e.0.contains("this world has 4"), "{e}");
    }

    #[test]
    fn options_are_checked_against_each_other() {
        let coll = Some(Collective::Broadcast);
        let e = build(coll, &parse(&["--ranks", "4", "--root", "4"]), None).unwrap_err();
        assert!(e.0.contains("outside the 4 ranks"), "{e}");
        let e = build(
            coll,
            &parse(&["--ranks", "2", "--inject", "hang:rank=2,seq=1"]),
            None,
        )
        .unwrap_err();
        assert!(e.0.contains("outside the 2 ranks"), "{e}");
        let e = build(
            Some(Collective::AllGather),
            &parse(&["--algo", "tree"]),
            None,
        )
        .unwrap_err();
        assert!(e.0.contains("not an algorithm for all-gather"), "{e}");
        let s = build(None, &parse(&["-b", "1K", "-e", "4K", "-c", "0"]), None).unwrap();
        assert_eq!(s.plan.sizes, vec![1024, 2048, 4096]);
        assert_eq!(s.plan.check_iters, 0);
    }
}
