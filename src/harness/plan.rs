//! What a sweep runs: the validated plan (built by `cli`), what `run/`
//! decided from the world and the machine ([`Setup`]), and the cases in
//! nccl-tests' order. Both are immutable once the sweep starts.

use crate::engine::exec::cuda::launch::{EnvKnobs, Kind, Timing};
use crate::engine::exec::HostOptions;
use crate::engine::types::{Algo, Collective, Counts, Dtype, Engine, Placement, ReduceOp};
use std::path::PathBuf;
use std::time::Duration;

/// Which algorithms run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgoChoice {
    /// One per case, chosen by size.
    Auto,
    /// These, where the collective has them.
    List(Vec<Algo>),
    /// Exactly these (collective, algorithm) pairs (`collbench links`:
    /// send-recv's rounds, all-reduce over a ring and a tree).
    Pairs(Vec<(Collective, Algo)>),
}

/// Which roots run (rooted collectives only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootChoice {
    One(usize),
    All,
    /// Send-recv once per peer offset 1..n-1 (its root is the offset; see
    /// [`crate::engine::types::send_recv_peers`]): the rounds of
    /// `collbench links`, every directed pair once. Rooted collectives take
    /// root 0.
    PeerOffsets,
}

/// How the ranks' times of one case make the row's time (nccl-tests' `-a`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RankTime {
    /// Rank 0's time.
    Rank0,
    /// The mean over ranks (nccl-tests' default).
    Mean,
    /// The fastest rank's.
    Min,
    /// The slowest rank's (collbench's default: the collective is done
    /// when the last rank is).
    #[default]
    Max,
}

impl RankTime {
    /// The row's time from every rank's, by rank.
    pub fn combine(self, per_rank: &[f64]) -> f64 {
        match self {
            RankTime::Rank0 => per_rank.first().copied().unwrap_or(0.0),
            RankTime::Mean if per_rank.is_empty() => 0.0,
            RankTime::Mean => per_rank.iter().sum::<f64>() / per_rank.len() as f64,
            RankTime::Min => per_rank.iter().copied().fold(f64::INFINITY, f64::min),
            RankTime::Max => per_rank.iter().copied().fold(0.0, f64::max),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RankTime::Rank0 => "rank0",
            RankTime::Mean => "mean",
            RankTime::Min => "min",
            RankTime::Max => "max",
        }
    }
}

/// A validated sweep.
#[derive(Clone, Debug)]
pub struct Plan {
    pub collectives: Vec<Collective>,
    /// Engines run side by side (builtin first).
    pub engines: Vec<Engine>,
    pub sizes: Vec<u64>,
    pub ranks: usize,
    pub algos: AlgoChoice,
    pub dtypes: Vec<Dtype>,
    pub ops: Vec<ReduceOp>,
    /// premulsum's scalar (validated for every dtype of the sweep).
    pub scalar: crate::engine::elem::Scalar,
    /// How the v-collectives divide their data (validated for the ranks).
    pub split: crate::engine::split::Split,
    /// Operations issued as one group per case (`--group N`; 0: none).
    pub group: usize,
    /// The group members' collectives, cycled (`--group-mix`; empty: the
    /// case's own).
    pub group_mix: Vec<Collective>,
    pub roots: RootChoice,
    pub placements: Vec<Placement>,
    /// Timed operations per case.
    pub iters: usize,
    pub warmup: usize,
    /// How ranks' times make a row's time.
    pub rank_time: RankTime,
    /// Checked iterations per case (0: no check).
    pub check_iters: usize,
    /// Channels per rank (0: the executor's choice).
    pub channels: usize,
    pub seed: u64,
    pub host: HostOptions,
    /// `--slot-size` as given (None: each executor's own default, the
    /// host engine's in `host`, the CUDA executor's in `CudaOptions::new`).
    pub slot_bytes: Option<usize>,
    /// Flight-recorder entries per rank.
    pub fr_entries: usize,
    /// Where the user asked dumps to go (None: `run/` names a new folder).
    pub dump_dir: Option<PathBuf>,
    pub injects: Vec<super::inject::Inject>,
    /// Capture each timed loop in a CUDA graph: required (`--graph`), or
    /// where the engine has graphs (nccl-tests' `-G`).
    pub graph: GraphAsk,
    /// The CUDA engine's protocol (None: by step size).
    pub protocol: Option<crate::engine::exec::cuda::abi::Proto>,
    /// Whose links make the link matrix (`links` of the outcome): every
    /// case's (None), or one collective's, the others' each kept apart by
    /// (collective, algorithm) (`collbench links`: the send-recv rounds
    /// make the matrix; the all-reduces beside them are judged alone).
    pub links_from: Option<Collective>,
    /// The cost model (`--tuning FILE`): `auto` takes its pick, and rows
    /// carry its prediction and pick.
    pub tuning: Option<std::sync::Arc<super::tuning::Tuning>>,
    /// `--gpu-map`: each node rank's GPU when ranks are processes.
    pub gpu_map: Option<Vec<usize>>,
    /// `--allow-shared-gpu`.
    pub allow_shared_gpu: bool,
    /// The CUDA executor's knobs from the environment, checked when planned.
    pub cuda_knobs: EnvKnobs,
}

impl Plan {
    pub fn timeout(&self) -> Duration {
        self.host.timeout
    }

    /// The sweep's groups, for what its memory advice names.
    pub fn group_shape(&self) -> crate::engine::exec::world::GroupShape {
        crate::engine::exec::world::GroupShape {
            members: self.group,
            mix: self.group_mix.len(),
            ways: self.group_ways(),
        }
    }

    /// The most ways of running (collective, algorithm, root) one group of
    /// this plan holds: each takes connections of its own. A case gives
    /// each collective one algorithm and root, so it is the mix's distinct
    /// collectives, the v forms with their even ones (1 without groups).
    pub fn group_ways(&self) -> usize {
        let mut distinct: Vec<Collective> = Vec::new();
        for c in self.group_mix.iter().map(|c| c.even()) {
            if !distinct.contains(&c) {
                distinct.push(c);
            }
        }
        distinct.len().max(1)
    }

    /// The operations `case` issues: itself, or its group's members in
    /// issue order. Member k runs `--group-mix`'s k-th collective (cycled),
    /// at the case's size, dtype and operator (`sum` where it reduces
    /// nothing), with the case's algorithm where it has it (else `auto`'s)
    /// and its root where it has one.
    pub fn members(&self, case: &Case) -> Vec<Case> {
        if case.group == 0 {
            return vec![*case];
        }
        let es = case.dtype.size();
        (0..case.group)
            .map(|k| {
                let coll = match self.group_mix.as_slice() {
                    [] => case.coll,
                    mix => mix[k % mix.len()],
                };
                let counts = coll.counts_split(case.size, es, self.ranks, self.split);
                let bytes = counts.reported_bytes(coll, es);
                let algo = if coll.algos().contains(&case.algo) {
                    case.algo
                } else {
                    self.auto_algo(coll, bytes)
                };
                // A send-recv member sends to the next rank, as a lone
                // send-recv does (the group's root is its rooted members').
                let root = coll.rooted().then(|| case.root.unwrap_or(0));
                let reduces = coll.reduces();
                Case {
                    coll,
                    algo,
                    op: if reduces { case.op } else { ReduceOp::Sum },
                    scalar: if reduces { case.scalar } else { 0 },
                    root,
                    counts,
                    bytes,
                    group: 0,
                    ..*case
                }
            })
            .collect()
    }

    /// The protocol the cost model's entries should have been fitted with.
    pub fn model_protocol(&self) -> Option<&'static str> {
        self.protocol.map(|p| p.name())
    }

    /// What `auto` runs for `coll` at `bytes`: the cost model's pick where
    /// it has one, else the fixed rule of [`auto_algo`].
    pub fn auto_algo(&self, coll: Collective, bytes: u64) -> Algo {
        self.model_pick(coll, bytes)
            .map_or_else(|| auto_algo(coll, bytes, self.ranks), |p| p.algo)
    }

    /// The cost model's pick for `coll` at `bytes` (None: no model, or none
    /// of the collective's algorithms in it).
    pub fn model_pick(&self, coll: Collective, bytes: u64) -> Option<super::tuning::Pick> {
        self.tuning
            .as_ref()?
            .pick(coll, self.ranks, bytes, self.model_protocol())
    }
}

/// Whether the timed loop is captured in a CUDA graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphAsk {
    #[default]
    No,
    /// `--graph`: the CUDA engine is required.
    Required,
    /// nccl-tests' `-G N`: on the CUDA engine; elsewhere a note.
    IfCuda,
}

/// What `run/` decided once, from the world and the machine, before the
/// sweep starts.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The CUDA executor's device (None: the host engine).
    pub gpu: Option<Kind>,
    /// How operations are timed (the host engine: always the wall clock).
    pub timing: Timing,
    /// Capture each timed loop in a CUDA graph.
    pub graph: bool,
    /// Where dumps go (every process of an MPI run agrees on it).
    pub dump_dir: PathBuf,
    /// A file whose appearance means another process of the run hung (MPI).
    pub abort_trigger: Option<PathBuf>,
    /// What dumps say about the run.
    pub run_info: crate::recorder::dump::RunInfo,
    /// Called when ranks did not stop after a hang was detected (or a stop
    /// signal, the `bool`) and the dumps are written (or why they could
    /// not be): the process must end (it never returns).
    pub on_stuck: fn(&std::path::Path, bool, &super::Dumps),
    /// Told the files of every snapshot the run wrote while it went on
    /// (SIGUSR1), or why it could not write them, from the watchdog's
    /// thread: `run/` says where they are.
    pub on_snapshot: fn(&super::Dumps),
}

/// One measured configuration (both placements share it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub engine: Engine,
    pub coll: Collective,
    pub algo: Algo,
    pub dtype: Dtype,
    pub op: ReduceOp,
    /// premulsum's scalar as bits of `dtype` (0 for other operators).
    pub scalar: u64,
    /// The root, where the collective has one.
    pub root: Option<usize>,
    pub counts: Counts,
    /// Bytes nccl-tests would print for this case.
    pub bytes: u64,
    /// The sweep's size the case was made from.
    pub size: u64,
    /// Members of its group (0: a single operation; see [`Plan::members`]).
    pub group: usize,
}

impl Case {
    /// Rank `rank`'s generator input for this case.
    pub fn spec(
        &self,
        nranks: usize,
        rank: usize,
        placement: Placement,
        channels: usize,
        chunk: usize,
    ) -> crate::engine::algo::Spec {
        crate::engine::algo::Spec {
            coll: self.coll,
            algo: self.algo,
            nranks,
            rank,
            root: self.root.unwrap_or(0),
            counts: self.counts,
            placement,
            channels,
            chunk,
        }
    }
}

/// Whether premulsum on `dtype` can run, and be checked, with `scalar`:
/// the type holds it, and products of checked inputs stay in its range.
pub fn premul_fits(dtype: Dtype, scalar: crate::engine::elem::Scalar) -> Result<(), String> {
    let bits = scalar.bits(dtype)?;
    match crate::check::premul_refusal(dtype, bits) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The algorithm `auto` picks. Latency-bound sizes (up to 64 KiB) take the
/// fewest hops: all-reduce on up to 4 ranks reads every peer's input
/// directly (one hop), larger worlds go over trees (log n hops); bandwidth-bound
/// sizes go over rings, which move the least data per rank.
pub fn auto_algo(coll: Collective, bytes: u64, nranks: usize) -> Algo {
    let algos = coll.algos();
    let small = bytes <= 64 << 10;
    if small && coll == Collective::AllReduce && nranks <= 4 {
        Algo::Direct
    } else if small && nranks > 2 && algos.contains(&Algo::Tree) {
        Algo::Tree
    } else {
        algos[0]
    }
}

/// Why [`auto_algo`] picks what it picks, for the logs.
pub fn auto_reason(coll: Collective, bytes: u64, nranks: usize) -> &'static str {
    let small = bytes <= 64 << 10;
    match auto_algo(coll, bytes, nranks) {
        Algo::Direct if coll == Collective::AllReduce => {
            "latency-bound (<= 64 KiB) on <= 4 ranks: one hop, every peer read directly"
        }
        Algo::Tree if small => "latency-bound (<= 64 KiB) on > 2 ranks: log n hops over a tree",
        _ if small => "latency-bound, and the collective's only or first algorithm",
        _ => "bandwidth-bound (> 64 KiB): the collective's first algorithm, which moves the least data per rank",
    }
}

/// Sizes of a sweep left out of some of its cases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// The sizes (as asked) left out of at least one case, ascending.
    pub sizes: std::collections::BTreeSet<u64>,
    /// How many (case, size) pairs were left out.
    pub pairs: usize,
    /// The collectives some size was left out of.
    pub collectives: std::collections::BTreeSet<Collective>,
}

/// Cases in sweep order: collective, engine, algorithm, dtype, op, root, size.
/// Sizes too small to give every rank an element are skipped, and so are
/// sizes that round to the same case as the previous one; which were is
/// returned.
/// The builtin engine's largest case (by `size`) of each `key`, in the
/// order the keys first come: what sizes a sweep's connections, or checks
/// what each of its programs needs.
pub fn largest_builtin<K: PartialEq>(
    cases: &[Case],
    key: impl Fn(&Case) -> K,
    size: impl Fn(&Case) -> u64,
) -> Vec<&Case> {
    let mut largest: Vec<&Case> = Vec::new();
    for c in cases.iter().filter(|c| c.engine == Engine::Builtin) {
        match largest.iter_mut().find(|l| key(l) == key(c)) {
            Some(l) if size(l) < size(c) => *l = c,
            Some(_) => {}
            None => largest.push(c),
        }
    }
    largest
}

pub fn cases(plan: &Plan) -> (Vec<Case>, Skipped) {
    let mut out = Vec::new();
    let mut skipped = Skipped::default();
    for &coll in &plan.collectives {
        // A group's members decide what varies: operators where one
        // reduces, roots where one has a root.
        let kinds: Vec<Collective> = match (plan.group, plan.group_mix.as_slice()) {
            (0, _) | (_, []) => vec![coll],
            (_, mix) => mix.to_vec(),
        };
        let ops = if kinds.iter().any(|c| c.reduces()) {
            plan.ops.clone()
        } else {
            vec![ReduceOp::Sum]
        };
        let rooted = kinds.iter().any(|c| c.rooted());
        let roots: Vec<Option<usize>> = match (rooted, plan.roots) {
            (false, RootChoice::PeerOffsets) if coll == Collective::SendRecv => {
                (1..plan.ranks.max(2)).map(Some).collect()
            }
            (false, _) => vec![None],
            (true, RootChoice::One(r)) => vec![Some(r)],
            (true, RootChoice::All) => (0..plan.ranks).map(Some).collect(),
            (true, RootChoice::PeerOffsets) => vec![Some(0)],
        };
        for &engine in &plan.engines {
            for algo in algos_of(plan, coll, engine) {
                for &dtype in &plan.dtypes {
                    for &op in &ops {
                        for &root in &roots {
                            let proto = Case {
                                engine,
                                coll,
                                algo: Algo::Ring,
                                dtype,
                                op,
                                scalar: match op {
                                    ReduceOp::PreMulSum => plan.scalar.bits(dtype).unwrap_or(1),
                                    _ => 0,
                                },
                                root,
                                counts: Counts::default(),
                                bytes: 0,
                                size: 0,
                                group: plan.group,
                            };
                            sizes(plan, proto, algo, &mut out, &mut skipped);
                        }
                    }
                }
            }
        }
    }
    (out, skipped)
}

/// The algorithms a collective runs with on `engine` (None: chosen by size).
fn algos_of(plan: &Plan, coll: Collective, engine: Engine) -> Vec<Option<Algo>> {
    match (&plan.algos, engine) {
        // A library's collectives have no algorithm of ours to choose.
        (_, Engine::Mpi | Engine::Nccl) | (AlgoChoice::Auto, _) => vec![None],
        (AlgoChoice::Pairs(l), Engine::Builtin) => l
            .iter()
            .filter(|(c, _)| *c == coll)
            .map(|&(_, a)| Some(a))
            .collect(),
        // A group of a mix runs an algorithm one of its collectives has (the
        // others take auto's pick, with a note), whichever leads the mix.
        (AlgoChoice::List(l), Engine::Builtin) => l
            .iter()
            .filter(|a| match plan.group_mix.as_slice() {
                mix if plan.group > 0 && !mix.is_empty() => {
                    mix.iter().any(|m| m.algos().contains(a))
                }
                _ => coll.algos().contains(a),
            })
            .map(|&a| Some(a))
            .collect(),
    }
}

/// Pushes `proto` at every distinct size; the sizes it leaves out go to
/// `skipped`.
fn sizes(plan: &Plan, proto: Case, algo: Option<Algo>, out: &mut Vec<Case>, skipped: &mut Skipped) {
    let (coll, es) = (proto.coll, proto.dtype.size());
    let mut last = None;
    let mut skip = |size| {
        skipped.sizes.insert(size);
        skipped.pairs += 1;
        skipped.collectives.insert(coll);
    };
    for &size in &plan.sizes {
        let counts = coll.counts_split(size, es, plan.ranks, plan.split);
        let bytes = counts.reported_bytes(coll, es);
        if counts.block == 0 || last == Some(bytes) {
            skip(size);
            continue;
        }
        last = Some(bytes);
        let algo = algo.unwrap_or_else(|| plan.auto_algo(coll, bytes));
        let case = Case {
            algo,
            counts,
            bytes,
            size,
            ..proto
        };
        // Every member of a group gives every rank an element.
        if case.group > 0 && plan.members(&case).iter().any(|m| m.counts.block == 0) {
            skip(size);
            continue;
        }
        out.push(case);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_few_hops_when_small_and_rings_when_large() {
        assert_eq!(auto_algo(Collective::AllReduce, 8, 2), Algo::Direct);
        assert_eq!(auto_algo(Collective::AllReduce, 8, 8), Algo::Tree);
        assert_eq!(auto_algo(Collective::AllReduce, 64 << 20, 2), Algo::Ring);
        assert_eq!(auto_algo(Collective::Broadcast, 8, 8), Algo::Tree);
        assert_eq!(auto_algo(Collective::Broadcast, 8, 2), Algo::Ring);
        assert_eq!(auto_algo(Collective::AllToAll, 8, 8), Algo::Direct);
    }
}
