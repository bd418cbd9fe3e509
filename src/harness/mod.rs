//! The sweep: cases in nccl-tests' order, run by every rank, timed and
//! checked, turned into rows as they finish and handed to the report sink.

pub mod inject;
pub mod plan;
pub mod rank;
pub mod stats;
pub mod tuning;

pub use crate::engine::exec::cuda::launch::{Kind as GpuKind, Timing};
pub use crate::recorder::DEFAULT_ENTRIES as DEFAULT_FR_ENTRIES;
pub use plan::{AlgoChoice, Case, GraphAsk, Plan, RankTime, RootChoice, Setup};

use crate::engine::exec::cuda::launch::CudaOptions;
use crate::engine::exec::{mem, rank_runner, ExecError, HostWorld};
use crate::engine::transport::inproc::Fifo;
use crate::engine::types::Engine;
use crate::launch::{Peers, WorldSpec, Worlds};
use crate::recorder::model::PeerLost;
use crate::recorder::watchdog::{self, Fired, Watchdog};
use crate::recorder::{dump, RankRecorder};
use crate::report::{Partial, Row, Sink, StopReason};
use crate::units::Bytes;
use rank::{RankJob, Report};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("not enough memory: the sweep needs {need} ({} x {per_rank} of buffers, plus {extra} of connections) but {free} is available ({limit}); lower --sizes' maximum or --ranks", crate::units::count_of(*.ranks, "rank"))]
    Memory {
        need: Bytes,
        per_rank: Bytes,
        ranks: usize,
        /// Connections (host FIFOs, device connections) and other overhead.
        extra: Bytes,
        free: Bytes,
        /// Which limit refused it.
        limit: &'static str,
    },
    #[error("nothing to run: {0}")]
    Empty(String),
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error("{detail}{}", dumps_note(.dumps))]
    Hang {
        detail: String,
        dumps: Dumps,
        /// Rows the sweep did not make.
        missing_rows: usize,
    },
    #[error("rank {}'s process died ({}): the run stopped{}", .lost.rank, .lost.how, dumps_note(.dumps))]
    PeerLost {
        lost: PeerLost,
        dumps: Dumps,
        missing_rows: usize,
    },
    #[error("interrupted by {signal}; finished rows are kept ({missing_rows} not made){}", dumps_note(.dumps))]
    Interrupted {
        /// `SIGINT`, `SIGTERM`, `SIGHUP`, or `another process of the run`.
        signal: &'static str,
        dumps: Dumps,
        missing_rows: usize,
    },
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("writing results: {0}")]
    Sink(#[from] std::io::Error),
    #[error("encoding a report for rank 0: {0}")]
    Encode(serde_json::Error),
}

/// A hang that another process of the run found.
const REMOTE_HANG: &str = "hang detected by another process of the run";

/// The flight-recorder dumps a stopped run wrote, or why they could not be
/// written (in words, naming the folder).
pub type Dumps = Result<Vec<PathBuf>, String>;

fn dumps_note(dumps: &Dumps) -> String {
    let dumps = match dumps {
        Ok(d) => d,
        Err(why) => return format!("; {why}"),
    };
    match dumps.first().and_then(|p| p.parent()) {
        Some(dir) => format!(
            "; {} flight-recorder dump(s) in {} (see: collbench analyze {})",
            dumps.len(),
            dir.display(),
            dir.display()
        ),
        None => String::new(),
    }
}

/// [`dump::write_all`], its failure said in words naming `dir`.
fn write_dumps(
    dir: &std::path::Path,
    recs: &[Arc<RankRecorder>],
    info: &crate::recorder::dump::RunInfo,
    why: dump::Why,
    snapshot: Option<u32>,
) -> Dumps {
    dump::write_all(dir, recs, info, why, snapshot).map_err(|e| {
        let why = match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => "it is not a folder (replaced during the run?)".to_owned(),
            _ => e.to_string(),
        };
        format!(
            "the flight-recorder dumps could not be written to {}: {why}",
            dir.display()
        )
    })
}

impl HarnessError {
    /// A hang or timeout (exit code 3) rather than a usage or runtime
    /// error; a rank whose process died is one (its peers would wait on
    /// it to their timeout).
    pub fn is_hang(&self) -> bool {
        matches!(
            self,
            HarnessError::Hang { .. } | HarnessError::PeerLost { .. }
        )
    }

    /// The rank whose process died, when that stopped the run.
    pub fn lost_rank(&self) -> Option<usize> {
        match self {
            HarnessError::PeerLost { lost, .. } => Some(lost.rank),
            _ => None,
        }
    }

    /// A hang another process of the run found (which says it).
    pub fn is_remote_hang(&self) -> bool {
        matches!(self, HarnessError::Hang { detail, .. } if detail == REMOTE_HANG)
    }

    pub fn is_interrupt(&self) -> bool {
        matches!(self, HarnessError::Interrupted { .. })
    }

    /// What `meta.partial` says of a run that stopped with this error: a
    /// signal or a hang; `None` for every other error (the run failed).
    pub fn partial(&self) -> Option<Partial> {
        match self {
            HarnessError::Hang { missing_rows, .. }
            | HarnessError::PeerLost { missing_rows, .. } => Some(Partial {
                reason: StopReason::Hang,
                missing_rows: *missing_rows,
            }),
            HarnessError::Interrupted { missing_rows, .. } => Some(Partial {
                reason: StopReason::Signal,
                missing_rows: *missing_rows,
            }),
            _ => None,
        }
    }
}

/// Waits until the dump of each of `ranks` in run `run_id` exists in
/// `dir`, or `limit` passed, or a stop signal arrived while waiting (a
/// rank process that died never dumps: the user's next Ctrl-C ends the
/// wait). Returns those ranks' dumps there by then, every process's.
fn wait_for_dumps(
    dir: &std::path::Path,
    run_id: &str,
    ranks: &[usize],
    limit: Duration,
) -> Vec<PathBuf> {
    let start = Instant::now();
    let signals = watchdog::stop_signals();
    let there = || -> Vec<PathBuf> {
        ranks
            .iter()
            .map(|&r| dir.join(dump::file_name(run_id, r, None)))
            .filter(|p| p.exists())
            .collect()
    };
    while start.elapsed() < limit && watchdog::stop_signals() == signals {
        if there().len() == ranks.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    there()
}

/// How long a process waits for the run's other processes' dumps: they see
/// the trigger within a watchdog tick and dump once wound down (after a
/// signal, within a second; after a hang, by the watchdog's grace at the
/// latest), so a rank that never dumps (its process died) costs no more.
fn dumps_wait(signal: bool) -> Duration {
    if signal {
        SIGNAL_WIND_DOWN + Duration::from_secs(2)
    } else {
        watchdog::GRACE + Duration::from_secs(2)
    }
}

/// How long ranks get to stop after SIGINT/SIGTERM before the run ends
/// without waiting for them (a rank inside a long element loop or a check
/// of a large buffer sees the stop only when it is done): SIGTERM ends the
/// process within a second, with every finished row written.
const SIGNAL_WIND_DOWN: Duration = Duration::from_millis(300);
/// The same after a hang or a failed rank: the watchdog acts alone after
/// its [`watchdog::GRACE`]; the run's own end comes first.
const WIND_DOWN: Duration = Duration::from_secs(5);
/// How often the collector looks at the clock while it waits.
const POLL: Duration = Duration::from_millis(10);
/// How long a failed run of rank processes waits to hear whether a peer's
/// process died (its parent polls its children every 10 ms).
const LOST_NEWS: Duration = Duration::from_millis(300);

/// When a stopping run stops waiting for its ranks: a signal gives them
/// [`SIGNAL_WIND_DOWN`], an abort (hang, a failed rank) [`WIND_DOWN`].
struct WindDown<'a> {
    world: &'a HostWorld,
    dog: &'a Watchdog,
    signal_at: Option<Instant>,
    abort_at: Option<Instant>,
}

impl<'a> WindDown<'a> {
    fn new(world: &'a HostWorld, dog: &'a Watchdog) -> WindDown<'a> {
        WindDown {
            world,
            dog,
            signal_at: None,
            abort_at: None,
        }
    }

    /// Whether the run is stopping and its ranks had their time.
    fn over(&mut self) -> bool {
        let now = Instant::now();
        if self.signal_at.is_none()
            && (watchdog::signalled() || self.dog.fired() == Some(Fired::Stop))
        {
            // The watchdog aborts the world on its next tick; do not wait for it.
            self.world.abort();
            self.signal_at = Some(now);
        }
        if self.abort_at.is_none() && self.world.aborted() {
            self.abort_at = Some(now);
        }
        self.signal_at.is_some_and(|t| now >= t + SIGNAL_WIND_DOWN)
            || self.abort_at.is_some_and(|t| now >= t + WIND_DOWN)
    }
}

/// What a finished sweep says beyond its rows.
#[derive(Debug, Default)]
pub struct Outcome {
    pub rows: usize,
    /// Rows with wrong or NaN/Inf elements.
    pub bad_rows: usize,
    pub notes: Vec<String>,
    /// What ran `--engine nccl` (NCCL's version and library, or the stand-in).
    pub library: Option<String>,
    /// Injections (`--inject`) that never hit: past the sweep's end, or a
    /// NaN for integers only.
    pub unfired: Vec<crate::harness::inject::Inject>,
    /// `--links`: every directed link as measured at the sweep's largest
    /// size (all its cases merged), receivers' samples by (from, to).
    pub links: Option<LinkTable>,
    /// With [`Plan::links_from`]: the other cases' links, each collective
    /// and algorithm at its largest size, in sweep order.
    pub case_links: Vec<(
        crate::engine::types::Collective,
        crate::engine::types::Algo,
        LinkTable,
    )>,
    /// Slow links or ranks the verdict on `links` named (set by the caller).
    pub link_findings: usize,
}

/// Links measured over the timed operations of the cases of one size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkTable {
    pub bytes: u64,
    pub samples: Vec<crate::engine::observe::LinkSample>,
}

impl LinkTable {
    fn add(&mut self, samples: &[crate::engine::observe::LinkSample]) {
        crate::engine::observe::LinkSample::merge_all(&mut self.samples, samples);
    }

    /// Keeps the links of one case of `bytes`: a larger size starts the
    /// table over, the same size adds to it, a smaller one is dropped.
    fn keep(&mut self, bytes: u64, reports: &[Report]) {
        if bytes > self.bytes {
            *self = LinkTable {
                bytes,
                samples: Vec::new(),
            };
        }
        if bytes == self.bytes {
            for r in reports {
                self.add(&r.links);
            }
            self.samples.sort_by_key(|s| (s.from, s.to));
        }
    }
}

/// Where the NaN/Inf values of a row's outputs came from, as the input
/// scans before its checked operations saw it: "; NaN/Inf in rank 1's input
/// (first at element 128) before the operation", or "; every rank's input
/// was finite: the operation produced it". Empty without scans.
fn nan_source(reports: &[Report]) -> String {
    let scans: Vec<(usize, &crate::check::Verdict)> = reports
        .iter()
        .filter_map(|r| Some((r.rank, r.input.as_ref()?)))
        .collect();
    if scans.is_empty() {
        return String::new();
    }
    let bad: Vec<String> = scans
        .iter()
        .filter(|(_, v)| v.nan > 0)
        .map(|(rank, v)| match &v.first {
            Some(b) => format!("rank {rank}'s input (first at element {})", b.index),
            None => format!("rank {rank}'s input"),
        })
        .collect();
    match bad.len() {
        0 => "; every rank's input was finite: the operation produced it".to_string(),
        _ => format!("; NaN/Inf in {} before the operation", bad.join(", ")),
    }
}

/// Checks that the sweep's buffers fit in memory before anything is allocated.
pub fn check_memory(plan: &Plan, cases: &[Case]) -> Result<(), HarnessError> {
    check_budget(plan, cases, Budget::Host)
}

/// Where a sweep's buffers live, and the room there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// Host memory, for every rank: the tightest of `MemAvailable`, the
    /// memory cgroup's room and the address space left (`mem::MemLimits`).
    Host,
    /// The most crowded device: `free` bytes shared by `ranks` ranks, each
    /// also holding `extra` bytes of connections and tables.
    Device { free: u64, ranks: usize, extra: u64 },
}

impl Budget {
    pub fn available(self) -> Option<u64> {
        match self {
            Budget::Host => mem::available_bytes(),
            Budget::Device { free, .. } => Some(free),
        }
    }
}

/// What the host world allocates for a sweep's connections: one FIFO per
/// (sender, receiver, channel) any of its cases uses, each of
/// `Fifo::region_bytes(slots, slot_bytes)`, all kept until the world goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFifos {
    pub links: usize,
    pub bytes_each: u64,
}

impl HostFifos {
    pub fn total(&self) -> u64 {
        self.links as u64 * self.bytes_each
    }
}

/// Counts the FIFOs the host world makes for `cases`: the connections of
/// every rank's program (generated with one step per block, which changes
/// no connection), per collective, algorithm and root at its largest counts.
pub fn host_fifos(plan: &Plan, cases: &[Case]) -> HostFifos {
    use crate::engine::algo::{generate, Spec};
    let mut largest: Vec<&Case> = Vec::new();
    for c in cases.iter().filter(|c| c.engine == Engine::Builtin) {
        let size = |c: &Case| c.counts.send.max(c.counts.recv);
        match largest
            .iter_mut()
            .find(|l| (l.coll, l.algo, l.root, l.group) == (c.coll, c.algo, c.root, c.group))
        {
            Some(l) if size(l) < size(c) => *l = c,
            Some(_) => {}
            None => largest.push(c),
        }
    }
    let n = plan.ranks;
    let channels = plan.channels.max(1);
    let mut links = std::collections::HashSet::new();
    for c in largest {
        let members = plan.members(c);
        let chunk = members
            .iter()
            .map(|m| m.counts.send.max(m.counts.recv))
            .max()
            .unwrap_or(1)
            .max(1);
        for &placement in &plan.placements {
            for rank in 0..n {
                let specs: Vec<Spec> = members
                    .iter()
                    .map(|m| m.spec(n, rank, placement, channels, chunk))
                    .collect();
                let program = match specs.as_slice() {
                    [one] => generate(one),
                    group => crate::engine::algo::group::generate_group(group).map(|g| g.0),
                };
                match program {
                    Ok(p) => {
                        let sends = p.channels.iter().flat_map(|ch| &ch.steps);
                        for peer in sends.flat_map(|s| s.send.iter()) {
                            links.insert((rank, peer.rank as usize, peer.chan as usize));
                        }
                    }
                    // The run will say why; budget for every pair meanwhile.
                    Err(_) => links.extend(
                        (0..n)
                            .filter(|&to| to != rank)
                            .flat_map(|to| (0..channels).map(move |ch| (rank, to, ch))),
                    ),
                }
            }
        }
    }
    HostFifos {
        links: links.len(),
        bytes_each: Fifo::region_bytes(plan.host.slots, plan.host.slot_bytes) as u64,
    }
}

/// Checks that the sweep's buffers fit `budget`.
pub fn check_budget(plan: &Plan, cases: &[Case], budget: Budget) -> Result<(), HarnessError> {
    let per_rank = rank::buffer_bytes(plan, cases)
        .iter()
        .fold(0usize, |a, &b| a.saturating_add(b));
    match budget {
        Budget::Host => check_host(plan, cases, per_rank as u64),
        Budget::Device { free, ranks, extra } => {
            let need = (per_rank as u64)
                .saturating_add(extra)
                .saturating_mul(ranks as u64);
            tracing::debug!(
                need = %Bytes(need),
                per_rank = %Bytes(per_rank as u64),
                extra = %Bytes(extra),
                ranks,
                available = %Bytes(free),
                "memory check (device)"
            );
            if need > free / 10 * 9 {
                return Err(HarnessError::Memory {
                    need: Bytes(need),
                    per_rank: Bytes(per_rank as u64),
                    ranks,
                    extra: Bytes(extra.saturating_mul(ranks as u64)),
                    free: Bytes(free),
                    limit: "free device memory",
                });
            }
            Ok(())
        }
    }
}

/// Host memory: every rank's buffers and every FIFO must fit in 90% of the
/// resident limit, and with the rank threads' reservations, in the address
/// space left.
fn check_host(plan: &Plan, cases: &[Case], per_rank: u64) -> Result<(), HarnessError> {
    let ranks = plan.ranks;
    let fifos = host_fifos(plan, cases);
    let need = per_rank
        .saturating_mul(ranks as u64)
        .saturating_add(fifos.total());
    let threads = mem::thread_reservation(ranks);
    let limits = mem::MemLimits::read();
    tracing::debug!(
        need = %Bytes(need),
        per_rank = %Bytes(per_rank),
        ranks,
        fifos = fifos.links,
        fifo_bytes = %Bytes(fifos.bytes_each),
        threads_reserve = %Bytes(threads),
        mem_available = ?limits.mem_available,
        cgroup_room = ?limits.cgroup,
        address_space_room = ?limits.address_space,
        "memory check (host)"
    );
    let refuse = |free: u64, limit: &'static str| HarnessError::Memory {
        need: Bytes(need),
        per_rank: Bytes(per_rank),
        ranks,
        extra: Bytes(fifos.total()),
        free: Bytes(free),
        limit,
    };
    if let Some(free) = limits.resident() {
        if need > free / 10 * 9 {
            let limit = if limits.cgroup == Some(free) {
                "room left in the memory cgroup"
            } else {
                "MemAvailable"
            };
            return Err(refuse(free, limit));
        }
    }
    if let Some(room) = limits.address_space {
        if need.saturating_add(threads) > room / 10 * 9 {
            return Err(refuse(
                room.saturating_sub(threads),
                "address space left under RLIMIT_AS (ulimit -v), less the rank threads' stacks and arenas",
            ));
        }
    }
    Ok(())
}

/// The largest sizes a sweep dropped so that its buffers fit in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCap {
    /// The largest size kept.
    pub kept_max: u64,
    /// The sizes dropped, smallest first.
    pub dropped: Vec<u64>,
    /// Memory available when the sweep was planned.
    pub available: u64,
}

/// Drops the largest sizes of `plan` until its buffers fit in memory.
/// Returns what was dropped; `None` when everything fits, or when not even
/// the smallest size fits (then [`run`] refuses with the reason).
pub fn cap_sizes_to_memory(plan: &mut Plan, budget: Budget) -> Option<SizeCap> {
    let fits = |p: &Plan| check_budget(p, &plan::cases(p).0, budget).is_ok();
    if fits(plan) {
        return None;
    }
    let mut trial = plan.clone();
    let mut dropped = Vec::new();
    while trial.sizes.len() > 1 {
        dropped.extend(trial.sizes.pop());
        if fits(&trial) {
            dropped.reverse();
            let cap = SizeCap {
                kept_max: trial.sizes.iter().copied().max().unwrap_or(0),
                dropped,
                available: budget.available().unwrap_or(0),
            };
            plan.sizes = trial.sizes;
            return Some(cap);
        }
    }
    None
}

/// The cases a sweep runs, checked against memory, and what was left out.
#[derive(Debug)]
pub struct Prepared {
    pub cases: Vec<Case>,
    /// Lines for people about cases left out.
    pub notes: Vec<String>,
}

/// Lists the sweep's cases (with `mpi`, without those MPI's own
/// collectives cannot run) and checks that the host engine's buffers fit.
pub fn prepare(plan: &Plan, setup: &Setup, mpi: Option<&Peers>) -> Result<Prepared, HarnessError> {
    let (mut cases, skipped) = plan::cases(plan);
    let mut unsupported = Vec::new();
    if let Some(m) = mpi {
        cases.retain(|c| match (c.engine, m.unsupported(c.coll, c.dtype, c.op)) {
            (Engine::Mpi, Some(why)) => {
                if !unsupported.contains(&why) {
                    unsupported.push(why);
                }
                false
            }
            _ => true,
        });
    }
    if cases.is_empty() {
        if !unsupported.is_empty() {
            return Err(HarnessError::Empty(format!(
                "engine mpi runs none of the sweep's cases: {}",
                unsupported.join("; ")
            )));
        }
        let shown: Vec<String> = plan
            .sizes
            .iter()
            .take(4)
            .map(|b| format!("{b} B"))
            .collect();
        let more = if plan.sizes.len() > 4 { ", ..." } else { "" };
        return Err(HarnessError::Empty(format!(
            "every size of the sweep ({}{more}) is smaller than one element per rank; raise the sizes (--sizes, or -b, -e, -f and -i)",
            shown.join(", ")
        )));
    }
    if setup.gpu.is_none() {
        check_memory(plan, &cases)?;
    }
    if plan.algos == AlgoChoice::Auto {
        for c in cases.iter().filter(|c| c.engine == Engine::Builtin) {
            let model = plan.model_pick(c.coll, c.bytes).map(|p| {
                format!(
                    "the cost model's fastest prediction ({:.2} us)",
                    p.predicted_us
                )
            });
            tracing::debug!(
                coll = c.coll.name(),
                bytes = c.bytes,
                ranks = plan.ranks,
                algo = c.algo.name(),
                why = model
                    .as_deref()
                    .unwrap_or_else(|| plan::auto_reason(c.coll, c.bytes, plan.ranks)),
                "auto algorithm"
            );
        }
    }
    let mut notes: Vec<String> = unsupported
        .into_iter()
        .map(|w| format!("engine mpi skipped cases: {w}"))
        .collect();
    notes.extend(members_without_the_algo(plan, &cases));
    if skipped.pairs > 0 {
        let shown: Vec<String> = skipped
            .sizes
            .iter()
            .take(6)
            .map(|&b| crate::units::Bytes(b).to_string())
            .collect();
        let more = skipped.sizes.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        notes.push(format!(
            "{} of {} size(s) left out of {} case(s): {}{more} (fewer than one element per rank, or the same case as the size before)",
            skipped.sizes.len(),
            plan.sizes.len(),
            skipped.pairs,
            shown.join(", ")
        ));
    }
    Ok(Prepared { cases, notes })
}

/// A note for each collective of a group (`--group-mix`) that lacks an
/// algorithm `--algo` chose: its operations run `auto`'s pick instead
/// (all-to-all has no ring), which the rows show but nothing said.
fn members_without_the_algo(plan: &Plan, cases: &[Case]) -> Vec<String> {
    use crate::engine::types::{Algo, Collective};
    if plan.group == 0 || plan.algos == AlgoChoice::Auto {
        return Vec::new();
    }
    // Per member collective: the algorithms asked that it lacks, and
    // auto's picks instead, in order.
    let mut fell: Vec<(Collective, Vec<Algo>, Vec<Algo>)> = Vec::new();
    for c in cases.iter().filter(|c| c.engine == Engine::Builtin) {
        for m in plan.members(c).iter().filter(|m| m.algo != c.algo) {
            let i = match fell.iter().position(|(coll, _, _)| *coll == m.coll) {
                Some(i) => i,
                None => {
                    fell.push((m.coll, Vec::new(), Vec::new()));
                    fell.len() - 1
                }
            };
            let (_, asked, picks) = &mut fell[i];
            if !asked.contains(&c.algo) {
                asked.push(c.algo);
            }
            if !picks.contains(&m.algo) {
                picks.push(m.algo);
            }
        }
    }
    let names = |l: &[Algo], sep: &str| -> String {
        l.iter().map(|a| a.name()).collect::<Vec<_>>().join(sep)
    };
    fell.into_iter()
        .map(|(coll, asked, picks)| {
            format!(
                "--algo: {} has no {} algorithm, so the group's {} operations ran auto's pick ({})",
                coll.name(),
                names(&asked, " or "),
                coll.name(),
                names(&picks, ", ")
            )
        })
        .collect()
}

/// The CUDA executor's options for a sweep on `kind`.
pub fn cuda_options(plan: &Plan, setup: &Setup, kind: GpuKind) -> CudaOptions {
    let mut opts = CudaOptions::new(
        kind,
        plan.host.slot_bytes,
        plan.timeout(),
        setup.timing,
        plan.cuda_knobs,
    );
    opts.proto = plan.protocol;
    opts
}

/// What `launch` needs to make the sweep's worlds.
pub fn world_spec(plan: &Plan, setup: &Setup, prepared: &Prepared) -> WorldSpec {
    WorldSpec {
        ranks: plan.ranks,
        host: plan.host.clone(),
        channels: plan.channels,
        ways: plan.group_ways(),
        bufs: rank::buffer_bytes(plan, &prepared.cases),
        gpu: setup.gpu.map(|k| (k, cuda_options(plan, setup, k))),
        nccl: plan.engines.contains(&Engine::Nccl),
        gpu_map: plan.gpu_map.clone(),
        allow_shared_gpu: plan.allow_shared_gpu,
    }
}

/// The rows a sweep of `cases` makes: a row per case and placement, and
/// for a group a row per operation and one of its own.
pub fn expected_rows(plan: &Plan, cases: &[Case]) -> usize {
    let per_case: usize = cases
        .iter()
        .map(|c| if c.group > 0 { c.group + 1 } else { 1 })
        .sum();
    per_case * plan.placements.len()
}

/// Runs the sweep in `worlds`; rows go to `sink` as they finish. With
/// `mpi`, this process runs its one rank and rank 0 makes the rows.
pub fn run(
    plan: &Plan,
    setup: &Setup,
    prepared: Prepared,
    worlds: Worlds,
    sink: &mut dyn Sink,
    mpi: Option<&Arc<Peers>>,
) -> Result<Outcome, HarnessError> {
    let cases: Arc<[Case]> = prepared.cases.into();
    let expected_rows = expected_rows(plan, &cases);
    let local: Vec<usize> = mpi.map_or_else(|| (0..plan.ranks).collect(), |m| vec![m.rank()]);
    let recs: Vec<Arc<RankRecorder>> = local
        .iter()
        .map(|&r| Arc::new(RankRecorder::new(r, plan.fr_entries)))
        .collect();
    let dir = setup.dump_dir.clone();
    watchdog::install_signal_handlers();
    let dog = spawn_watchdog(plan, setup, &worlds.host, &recs, mpi)?;
    let mut outcome = Outcome {
        library: worlds.gpu.as_ref().and_then(|g| g.library_name()),
        notes: prepared.notes,
        ..Outcome::default()
    };
    let result = run_ranks(
        plan,
        setup,
        &cases,
        &worlds,
        &recs,
        mpi,
        &dog,
        sink,
        &mut outcome,
    );
    // The CUDA world frees device memory once every rank has stopped (ranks
    // still winding down after a signal hold it until they have).
    drop(worlds);
    let fired = dog.stop();
    // A rank process that died closes its connection before its parent
    // sees it die: a wait in the launcher's barrier fails on the first, a
    // moment before the watchdog hears of the second. A run that failed
    // while a peer was dying stopped because it died.
    let lost_now = || mpi.and_then(|m| m.lost_probe()).and_then(|probe| probe());
    let fired = match (&result, fired) {
        (Err(_), f @ (None | Some(Fired::Remote | Fired::Timeout { .. }))) => {
            let until = Instant::now() + LOST_NEWS;
            let mut lost = lost_now();
            let told = mpi.is_some_and(|m| m.lost_probe().is_some());
            while lost.is_none() && told && Instant::now() < until {
                std::thread::sleep(POLL);
                lost = lost_now();
            }
            lost.map(|(rank, how)| Fired::Lost(PeerLost { rank, how }))
                .or(f)
        }
        (_, f) => f,
    };
    let dump = |why: dump::Why| {
        if let Some(t) = &setup.abort_trigger {
            // Tell the run's other processes to stop and dump too; whole,
            // so that none reads a signal as a hang.
            let tmp = t.with_extension(format!("tmp{}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir)
                .and_then(|_| std::fs::write(&tmp, why.reason))
                .and_then(|_| std::fs::rename(&tmp, t));
        }
        let written = write_dumps(&dir, &recs, &setup.run_info, why, None);
        if setup.abort_trigger.is_none() {
            return written;
        }
        // A launcher ends the whole job when one process exits with an
        // error: leave only once every rank has dumped (or a while passed),
        // and count the run's dumps, not this process's.
        // A rank whose process died never dumps: the others' are all
        // there is to wait for.
        let dead = why
            .lost
            .map(|l| l.rank)
            .or_else(|| lost_now().map(|(r, _)| r));
        let ranks: Vec<usize> = (0..plan.ranks).filter(|&r| dead != Some(r)).collect();
        let all = wait_for_dumps(
            &dir,
            &setup.run_info.run_id,
            &ranks,
            dumps_wait(why.reason == watchdog::TRIGGER_SIGNAL),
        );
        written.map(|_| all)
    };
    let missing_rows = expected_rows.saturating_sub(outcome.rows);
    // A signal wins over whatever the interrupted ranks reported (an
    // aborted wait, a timeout while they wound down, a hang found since).
    let signal = watchdog::stop_signal().or_else(|| {
        (fired == Some(Fired::Stop)).then_some("a signal to another process of the run")
    });
    if let Some(signal) = signal {
        // A closed stdout in a run of one process leaves nothing to
        // diagnose: no dumps (the run's other processes would still look
        // for them, so a spread run writes them).
        let quiet = watchdog::stopped_for_closed_stdout() && setup.abort_trigger.is_none();
        return Err(HarnessError::Interrupted {
            signal,
            dumps: if quiet {
                Ok(Vec::new())
            } else {
                dump(dump::Why::new(watchdog::TRIGGER_SIGNAL))
            },
            missing_rows,
        });
    }
    let hang = |detail: String| HarnessError::Hang {
        detail,
        dumps: dump(dump::Why::new("timeout")),
        missing_rows,
    };
    let peer_lost = |lost: PeerLost| HarnessError::PeerLost {
        dumps: dump(dump::Why::lost(&lost)),
        lost,
        missing_rows,
    };
    match (result, fired) {
        // The ranks stopped because a peer died (their waits were
        // aborted, or timed out on it as the news came).
        (Err(_), Some(Fired::Lost(lost))) => Err(peer_lost(lost)),
        // Rows missing with no error seen (rank 0 stops collecting reports
        // when the world is aborted): the death stopped the run all the same.
        (Ok(()), Some(Fired::Lost(lost))) if missing_rows > 0 => Err(peer_lost(lost)),
        (
            Err(HarnessError::Exec(
                e @ (ExecError::Timeout { .. }
                | ExecError::BarrierTimeout { .. }
                | ExecError::CollectiveTimeout { .. }),
            )),
            _,
        ) => Err(hang(format!("hang detected: {e}"))),
        (_, Some(Fired::Timeout { rank, seq, waited })) => Err(hang(format!(
            "hang detected: rank {rank}'s collective {seq} ran {waited:?}, past the timeout"
        ))),
        (_, Some(Fired::Stalled { seq, waited })) => Err(hang(format!(
            "hang detected: every rank stopped outside collectives, before entering collective {seq}, for {waited:?} (no rank waits on a peer, so none timed out; stopped this long, twice the timeout, it is a hang)"
        ))),
        (_, Some(Fired::Remote)) => Err(hang(REMOTE_HANG.into())),
        (Ok(()), _) => Ok(outcome),
        (Err(e), _) => Err(e),
    }
}

fn spawn_watchdog(
    plan: &Plan,
    setup: &Setup,
    world: &Arc<HostWorld>,
    recs: &[Arc<RankRecorder>],
    mpi: Option<&Arc<Peers>>,
) -> Result<Watchdog, HarnessError> {
    let (w, r, d, info, stuck, told) = (
        Arc::clone(world),
        recs.to_vec(),
        setup.dump_dir.clone(),
        setup.run_info.clone(),
        setup.on_stuck,
        setup.on_snapshot,
    );
    // SIGUSR1 snapshots are numbered: each goes to new files.
    let snapshots = AtomicU32::new(0);
    // The rank whose death stopped the run, for the dumps of a wind-down
    // that never ends.
    let lost = std::sync::Mutex::new(None::<PeerLost>);
    let act = move |f: &Fired| match f {
        Fired::Timeout { .. } | Fired::Stalled { .. } | Fired::Stop | Fired::Remote => w.abort(),
        Fired::Lost(l) => {
            if let Ok(mut g) = lost.lock() {
                *g = Some(l.clone());
            }
            w.abort();
        }
        Fired::Request => {
            let k = snapshots.fetch_add(1, Ordering::Relaxed) + 1;
            told(&write_dumps(
                &d,
                &r,
                &info,
                dump::Why::new("request"),
                Some(k),
            ));
        }
        Fired::Stuck { signal } => {
            // The ranks did not stop after the timeout, signal or lost
            // peer: dump and leave.
            let l = lost.lock().ok().and_then(|g| g.clone());
            let why = match (&l, *signal) {
                (_, true) => dump::Why::new(watchdog::TRIGGER_SIGNAL),
                (Some(l), false) => dump::Why::lost(l),
                (None, false) => dump::Why::new("timeout"),
            };
            stuck(&d, *signal, &write_dumps(&d, &r, &info, why, None));
        }
    };
    let remote = watchdog::Remote {
        trigger: setup.abort_trigger.clone(),
        lost: mpi.and_then(|m| m.lost_probe()).map(|probe| {
            Box::new(move || probe().map(|(rank, how)| PeerLost { rank, how }))
                as watchdog::LostProbe
        }),
    };
    Ok(Watchdog::spawn(
        recs.to_vec(),
        plan.timeout(),
        remote,
        Box::new(act),
    )?)
}

/// The CPU of each of this process's `local` rank threads, where they
/// get CPUs of their own: on the host engine (a CUDA rank's thread mostly
/// waits on its GPU), with several ranks here, `COLLBENCH_BIND` not
/// `none`, and a CPU for each. Left to the scheduler, two spinning ranks
/// of a 2-core machine shared one core for whole sweeps in half the runs,
/// each handing over after a full spin: 250 us for a 1 KiB all-reduce that
/// takes 0.3 us on two cores (`results/host-binding-2core.md`).
fn rank_cpus(plan: &Plan, setup: &Setup, local: usize) -> Option<Vec<usize>> {
    use crate::engine::cpus::{self, Bind};
    if setup.gpu.is_some() || local < 2 || plan.host.bind == Bind::None {
        return None;
    }
    let allowed = cpus::allowed();
    // Ranks beyond the CPU quota would share CPUs whatever the mask says.
    let usable = allowed.len().min(cpus::cores());
    if local > usable {
        tracing::info!(
            ranks = local,
            cpus = usable,
            "rank threads not bound: fewer CPUs than ranks"
        );
        return None;
    }
    let chosen = cpus::spread(&allowed, cpus::core_of, local, std::process::id() as usize)?;
    tracing::info!(cpus = ?chosen, "rank threads bound to CPUs of their own (COLLBENCH_BIND=none: not)");
    Some(chosen)
}

/// MPI tag of rank reports sent to rank 0.
const REPORT_TAG: i32 = 7;

#[allow(clippy::too_many_arguments)] // the sweep's pieces, as `run` holds them
fn run_ranks(
    plan: &Plan,
    setup: &Setup,
    cases: &Arc<[Case]>,
    worlds: &Worlds,
    recs: &[Arc<RankRecorder>],
    mpi: Option<&Arc<Peers>>,
    dog: &Watchdog,
    sink: &mut dyn Sink,
    outcome: &mut Outcome,
) -> Result<(), HarnessError> {
    let (tx, rx) = mpsc::channel::<Report>();
    let bytes = rank::buffer_bytes(plan, cases);
    let world = &worlds.host;
    // Rank threads own what they use: a stopping run may leave without
    // them (see `WindDown`), and what they still read must outlive it.
    let (plan_a, setup_a) = (Arc::new(plan.clone()), Arc::new(setup.clone()));
    let cpus = rank_cpus(plan, setup, recs.len());
    let handles: Vec<_> = recs
        .iter()
        .enumerate()
        .map(|(i, rec)| {
            let r = rec.rank;
            let cpu = cpus.as_ref().map(|c| c[i]);
            let (rec, tx, w) = (Arc::clone(rec), tx.clone(), Arc::clone(world));
            let (plan, setup, cases) =
                (Arc::clone(&plan_a), Arc::clone(&setup_a), Arc::clone(cases));
            let (gpu, mpi) = (worlds.gpu.clone(), mpi.cloned());
            std::thread::Builder::new()
                .name(format!("rank{r}"))
                .spawn(move || {
                    let _rank = tracing::info_span!("rank", rank = r).entered();
                    if let Some(cpu) = cpu {
                        if let Err(e) = crate::engine::cpus::bind_current(cpu) {
                            tracing::info!(cpu, error = %e, "rank thread not bound");
                        }
                    }
                    let observer = Arc::clone(&rec) as _;
                    let res =
                        rank_runner(&w, gpu.as_ref(), r, observer, bytes).and_then(|runner| {
                            RankJob {
                                plan: &plan,
                                setup: &setup,
                                cases: &cases,
                                world: Arc::clone(&w),
                                runner,
                                rec,
                                tx,
                                mpi: mpi.as_deref(),
                                lib_times: Vec::new(),
                                open: Vec::new(),
                                settled: Vec::new(),
                                unrecorded: None,
                                arrivals: Vec::new(),
                                fired: vec![false; plan.injects.len()],
                            }
                            .run()
                        });
                    if res.is_err() {
                        w.abort();
                    }
                    res
                })
        })
        .collect();
    drop(tx);
    let mut wind = WindDown::new(world, dog);
    let collected = match mpi {
        None => {
            let mut next = || next_report(&rx, &mut wind);
            collect(plan, setup, cases, &mut next, sink, outcome)
        }
        Some(m) if m.rank() == 0 => {
            let total = cases.len() * plan.placements.len() * plan.ranks;
            let mut seen = 0;
            let mut next = || poll_reports(m, &rx, world, total, &mut seen);
            collect(plan, setup, cases, &mut next, sink, outcome)
        }
        Some(m) => forward_reports(m, &rx, &mut wind),
    };
    if collected.is_err() {
        world.abort();
    }
    let mut first: Option<ExecError> = None;
    for h in handles {
        let res = match h {
            Ok(h) => {
                // Waits for the rank, but once the run is stopping no
                // longer than its wind-down: then the rank is left behind.
                while !h.is_finished() && !wind.over() {
                    std::thread::sleep(POLL);
                }
                if h.is_finished() {
                    h.join()
                        .unwrap_or_else(|_| Err(ExecError::Setup("a rank thread panicked".into())))
                } else {
                    tracing::debug!("a rank did not stop within the wind-down; leaving without it");
                    Err(ExecError::Aborted)
                }
            }
            Err(e) => Err(ExecError::Setup(format!("cannot start a rank thread: {e}"))),
        };
        if let Err(e) = res {
            if first.is_none() || matches!(first, Some(ExecError::Aborted)) {
                first = Some(e);
            }
        }
    }
    collected?;
    first.map_or(Ok(()), |e| Err(HarnessError::Exec(e)))
}

/// The next rank report of a one-process run; `None` when every rank has
/// finished, or the run is stopping and its wind-down is over.
fn next_report(rx: &mpsc::Receiver<Report>, wind: &mut WindDown) -> Option<Report> {
    loop {
        if wind.over() {
            // Reports already sent are rows that finished: they are kept.
            return rx.try_recv().ok();
        }
        match rx.recv_timeout(POLL) {
            Ok(r) => return Some(r),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Rank 0 of an MPI world: the next report, its own or a peer's; None
/// when all have come or the run stopped.
fn poll_reports(
    m: &Peers,
    rx: &mpsc::Receiver<Report>,
    world: &HostWorld,
    total: usize,
    seen: &mut usize,
) -> Option<Report> {
    while *seen < total {
        let got = match rx.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Disconnected) if world.aborted() => return None,
            Err(_) => m
                .try_receive(REPORT_TAG)
                .and_then(|(_, bytes)| serde_json::from_slice(&bytes).ok()),
        };
        if let Some(r) = got {
            *seen += 1;
            return Some(r);
        }
        if world.aborted() {
            return None;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    None
}

/// Ranks other than 0 of an MPI world send their reports to rank 0.
fn forward_reports(
    m: &Peers,
    rx: &mpsc::Receiver<Report>,
    wind: &mut WindDown,
) -> Result<(), HarnessError> {
    while let Some(report) = next_report(rx, wind) {
        let bytes = serde_json::to_vec(&report).map_err(HarnessError::Encode)?;
        m.send(0, REPORT_TAG, &bytes);
    }
    Ok(())
}

/// Gathers rank reports into rows, in order, as each case completes.
fn collect(
    plan: &Plan,
    setup: &Setup,
    cases: &[Case],
    next: &mut dyn FnMut() -> Option<Report>,
    sink: &mut dyn Sink,
    outcome: &mut Outcome,
) -> Result<(), HarnessError> {
    let mut pending: HashMap<(usize, crate::engine::types::Placement), Vec<Report>> =
        HashMap::new();
    let mut fired = vec![false; plan.injects.len()];
    // Each case is told to the sink before it is measured (its header
    // first), the next once every placement of the one before made rows.
    let announce = |k: usize, sink: &mut dyn Sink| -> Result<(), HarnessError> {
        if let (Some(case), Some(&pl)) = (cases.get(k), plan.placements.first()) {
            let mut proto = make_rows(plan, setup, case, pl, &[])
                .pop()
                .ok_or_else(|| HarnessError::Empty("a case without rows".into()))?;
            (proto.wrong, proto.nan) = if plan.check_iters > 0 {
                (0, 0)
            } else {
                (-1, -1)
            };
            sink.case(&proto)?;
        }
        Ok(())
    };
    announce(0, sink)?;
    let mut placements_done: HashMap<usize, usize> = HashMap::new();
    while let Some(report) = next() {
        for &i in &report.fired {
            if let Some(f) = fired.get_mut(i) {
                *f = true;
            }
        }
        let key = (report.case, report.placement);
        let entry = pending.entry(key).or_default();
        entry.push(report);
        if entry.len() < plan.ranks {
            continue;
        }
        let Some(mut reports) = pending.remove(&key) else {
            continue;
        };
        reports.sort_by_key(|r| r.rank);
        let bytes = cases[key.0].bytes;
        if reports.iter().any(|r| !r.links.is_empty()) {
            let case = &cases[key.0];
            let table = if plan.links_from.is_none_or(|c| c == case.coll) {
                outcome.links.get_or_insert_with(LinkTable::default)
            } else {
                let at = outcome
                    .case_links
                    .iter()
                    .position(|(c, a, _)| (*c, *a) == (case.coll, case.algo));
                let at = at.unwrap_or_else(|| {
                    let fresh = (case.coll, case.algo, LinkTable::default());
                    outcome.case_links.push(fresh);
                    outcome.case_links.len() - 1
                });
                &mut outcome.case_links[at].2
            };
            table.keep(bytes, &reports);
        }
        for row in make_rows(plan, setup, &cases[key.0], key.1, &reports) {
            outcome.rows += 1;
            outcome.bad_rows += usize::from(row.is_bad());
            sink.row(&row)?;
        }
        let done = placements_done.entry(key.0).or_default();
        *done += 1;
        if *done == plan.placements.len() {
            announce(key.0 + 1, sink)?;
        }
    }
    outcome.unfired = plan
        .injects
        .iter()
        .zip(&fired)
        .filter(|(_, &f)| !f)
        .map(|(i, _)| *i)
        .collect();
    Ok(())
}

/// The rank that entered a timed collective the longest after the first
/// rank did (None with one rank, or when no rank was late).
fn last_arrival(reports: &[Report]) -> Option<crate::report::Arrival> {
    let iters = reports.iter().map(|r| r.arrive_ns.len()).min()?;
    let mut worst: Option<(usize, u64)> = None;
    for i in 0..iters {
        let first = reports.iter().map(|r| r.arrive_ns[i]).min()?;
        for r in reports {
            let late = r.arrive_ns[i] - first;
            if late > 0 && worst.is_none_or(|(_, w)| late > w) {
                worst = Some((r.rank, late));
            }
        }
    }
    worst.map(|(rank, late)| crate::report::Arrival {
        rank,
        late_us: late as f64 / 1e3,
    })
}

/// A case's rows: its own, or a group's: one per operation (the group's
/// time, the operation's size and checks, `group_member` its place in the
/// group), then the group's (`collective: "group"`, its members listed,
/// sizes and bus bytes summed, every operation's wrong values).
fn make_rows(
    plan: &Plan,
    setup: &Setup,
    case: &Case,
    placement: crate::engine::types::Placement,
    reports: &[Report],
) -> Vec<Row> {
    if case.group == 0 {
        return vec![make_row(plan, setup, case, placement, reports, &|r| {
            r.verdict.as_ref()
        })];
    }
    let members = plan.members(case);
    let mut rows: Vec<Row> = members
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let mut row = make_row(plan, setup, m, placement, reports, &|r| {
                r.verdict.as_ref().and(r.members.get(k))
            });
            row.group_member = Some(k);
            row.predicted_us = None;
            row.auto_pick = None;
            row
        })
        .collect();
    let mut g = make_row(plan, setup, case, placement, reports, &|r| {
        r.verdict.as_ref()
    });
    let time_s = g.time_us * 1e-6;
    let per_s = |b: f64| if time_s > 0.0 { b / time_s / 1e9 } else { 0.0 };
    let bytes: u64 = members.iter().map(|m| m.bytes).sum();
    let bus: f64 = members
        .iter()
        .map(|m| m.bytes as f64 * m.coll.busbw_factor(plan.ranks))
        .sum();
    let mut algos: Vec<&str> = Vec::new();
    for m in &members {
        if !algos.contains(&m.algo.name()) {
            algos.push(m.algo.name());
        }
    }
    let checked = rows.iter().all(|r| r.wrong >= 0);
    g.collective = "group".into();
    // Each operation's row names its algorithm; the group's, one or "mixed".
    if case.engine == Engine::Builtin {
        g.algo = match algos.as_slice() {
            [one] => one.to_string(),
            _ => "mixed".into(),
        };
    }
    g.op = match members.iter().any(|m| m.coll.reduces()) {
        true => case.op.name().into(),
        false => "none".into(),
    };
    g.root = match members.iter().any(|m| m.coll.rooted()) {
        true => case.root.map_or(-1, |r| r as i64),
        false => -1,
    };
    g.split = members
        .iter()
        .find_map(|m| m.counts.v)
        .map(|v| v.split.to_string());
    g.bytes = bytes;
    g.count = members
        .iter()
        .map(|m| m.counts.reported_count(m.coll))
        .sum();
    g.algbw_gbps = per_s(bytes as f64);
    g.busbw_gbps = per_s(bus);
    g.wrong = if checked {
        rows.iter().map(|r| r.wrong).sum()
    } else {
        -1
    };
    g.nan = if checked {
        rows.iter().map(|r| r.nan).sum()
    } else {
        -1
    };
    g.first_error = rows.iter().enumerate().find_map(|(k, r)| {
        let e = r.first_error.as_ref()?;
        Some(format!("operation {k} ({}): {e}", r.collective))
    });
    g.members = members.iter().map(|m| m.coll.name().to_string()).collect();
    g.predicted_us = None;
    g.auto_pick = None;
    rows.push(g);
    rows
}

/// Time: the ranks' mean iterations combined as `plan.rank_time` says; stats over the per-iteration
/// max across ranks. `verdict` picks a report's verdict for this row.
fn make_row(
    plan: &Plan,
    setup: &Setup,
    case: &Case,
    placement: crate::engine::types::Placement,
    reports: &[Report],
    verdict: &dyn Fn(&Report) -> Option<&crate::check::Verdict>,
) -> Row {
    let iters = plan.iters.max(1) as f64;
    let per_rank_us: Vec<f64> = reports
        .iter()
        .map(|r| r.total_ns as f64 / iters / 1e3)
        .collect();
    let time_us = plan.rank_time.combine(&per_rank_us);
    let samples: Vec<f64> = (0..plan.iters)
        .map(|i| {
            reports
                .iter()
                .filter_map(|r| r.iter_ns.get(i))
                .copied()
                .max()
                .unwrap_or(0) as f64
                / 1e3
        })
        .collect();
    let algbw = if time_us > 0.0 {
        case.bytes as f64 / (time_us * 1e-6) / 1e9
    } else {
        0.0
    };
    let checked = reports.iter().all(|r| verdict(r).is_some());
    // Where every rank holds the same output, one bad element reaching
    // every rank is one bad element: the most any rank saw, not the sum.
    let replicated = case.coll.output_replicated();
    let sum = |f: fn(&crate::check::Verdict) -> u64| -> i64 {
        if !checked {
            return -1;
        }
        let each = reports.iter().filter_map(verdict).map(f);
        if replicated {
            each.max().unwrap_or(0) as i64
        } else {
            each.sum::<u64>() as i64
        }
    };
    let first_error = reports
        .iter()
        .filter_map(|r| verdict(r)?.first.as_ref())
        .next()
        .map(|b| {
            let mut text = format!(
                "rank {} element {}: expected {}, got {}",
                b.rank, b.index, b.expected, b.got
            );
            if reports
                .iter()
                .any(|r| verdict(r).is_some_and(|v| v.nan > 0))
            {
                text.push_str(&nan_source(reports));
            }
            text
        });
    let builtin = case.engine == Engine::Builtin;
    Row {
        // A prediction past what results hold (11 days: a table of a slow
        // link's bandwidth at a large size) is no time: left out, so the
        // results stay readable.
        predicted_us: plan
            .tuning
            .as_ref()
            .filter(|_| builtin)
            .and_then(|t| {
                t.predict(
                    case.coll,
                    case.algo,
                    plan.ranks,
                    case.bytes,
                    plan.model_protocol(),
                )
            })
            .filter(|us| us.is_finite() && *us <= crate::report::model::MAX_MEASURE),
        auto_pick: plan
            .model_pick(case.coll, case.bytes)
            .map(|p| p.algo.name().to_string()),
        last_arrival: last_arrival(reports),
        collective: case.coll.name().into(),
        engine: match (case.engine, setup.gpu) {
            // On the emulated device NCCL's rows come from a host stand-in.
            (Engine::Nccl, Some(crate::engine::exec::cuda::launch::Kind::Emu)) => {
                "nccl-standin".into()
            }
            (e, _) => e.name().into(),
        },
        algo: match case.engine {
            Engine::Builtin => case.algo.name().into(),
            other => other.name().into(),
        },
        dtype: case.dtype.name().into(),
        op: if case.coll.reduces() {
            case.op.name().into()
        } else {
            "none".into()
        },
        scalar: (case.coll.reduces() && case.op == crate::engine::ReduceOp::PreMulSum)
            .then(|| crate::engine::elem::to_f64(case.dtype, case.scalar)),
        split: case.counts.v.map(|v| v.split.to_string()),
        members: Vec::new(),
        group_member: None,
        root: case.root.map_or(-1, |r| r as i64),
        bytes: case.bytes,
        count: case.counts.reported_count(case.coll),
        placement: placement.name().into(),
        time_us,
        algbw_gbps: algbw,
        busbw_gbps: algbw * case.coll.busbw_factor(plan.ranks),
        wrong: sum(|v| v.wrong),
        nan: sum(|v| v.nan),
        stats: stats::summarize(&samples),
        per_rank_us,
        first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{BadElem, Verdict};

    fn report(rank: usize, input_nan: Option<(u64, usize)>) -> Report {
        let input = input_nan.map(|(nan, index)| Verdict {
            checked: 256,
            wrong: nan,
            nan,
            first: (nan > 0).then(|| BadElem {
                rank,
                index,
                expected: "1.0 (0x3f800000)".into(),
                got: "NaN (0x7fc00000)".into(),
            }),
        });
        Report {
            case: 0,
            placement: crate::engine::Placement::OutOfPlace,
            rank,
            iter_ns: vec![],
            total_ns: 0,
            verdict: None,
            arrive_ns: vec![],
            fired: vec![],
            input,
            links: vec![],
            members: vec![],
        }
    }

    #[test]
    fn the_nan_source_names_the_ranks_whose_input_held_one() {
        let reports = [
            report(0, Some((0, 0))),
            report(1, Some((2, 7))),
            report(2, Some((1, 3))),
        ];
        assert_eq!(
            nan_source(&reports),
            "; NaN/Inf in rank 1's input (first at element 7), rank 2's input (first at element 3) before the operation"
        );
    }

    #[test]
    fn a_nan_no_input_held_was_produced_by_the_operation() {
        let reports = [report(0, Some((0, 0))), report(1, Some((0, 0)))];
        assert_eq!(
            nan_source(&reports),
            "; every rank's input was finite: the operation produced it"
        );
        // Integer types are not scanned: nothing to say.
        assert_eq!(nan_source(&[report(0, None)]), "");
    }
}
