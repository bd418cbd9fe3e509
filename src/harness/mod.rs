//! The sweep: cases in nccl-tests' order, run by every rank, timed and
//! checked, turned into rows as they finish and handed to the report sink.

pub mod inject;
mod memory;
pub mod plan;
pub mod rank;
mod rows;
pub mod stats;
mod stop;
pub mod tuning;

pub use crate::engine::exec::cuda::launch::{Kind as GpuKind, Timing};
pub use crate::recorder::DEFAULT_ENTRIES as DEFAULT_FR_ENTRIES;
pub use memory::{
    cap_sizes_to_memory, check_budget, check_memory, host_fifos, peers_per_channel, Budget,
    HostFifos, SizeCap,
};
pub use plan::{AlgoChoice, Case, GraphAsk, Plan, RankTime, RootChoice, Setup};
pub use rows::LinkTable;
pub use stop::{Dumps, HarnessError};

use crate::engine::exec::cuda::launch::CudaOptions;
use crate::engine::exec::{rank_runner, ExecError, HostWorld};
use crate::engine::types::Engine;
use crate::launch::{Peers, WorldSpec, Worlds};
use crate::recorder::watchdog::{self, Fired, Watchdog};
use crate::recorder::RankRecorder;
use crate::report::Sink;
use rank::{Note, RankJob, Report};
use rows::collect;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use stop::SIGNAL_WIND_DOWN;

/// The same after a hang or a failed rank: the watchdog acts alone after
/// its [`watchdog::GRACE`]; the run's own end comes first.
const WIND_DOWN: Duration = Duration::from_secs(5);
/// How often the collector looks at the clock while it waits.
const POLL: Duration = Duration::from_millis(10);

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
    check_channels(plan, &cases)?;
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
        // Of a sweep of several collectives, those it concerns.
        let of = if skipped.collectives.len() < plan.collectives.len() {
            let names: Vec<&str> = skipped.collectives.iter().map(|c| c.name()).collect();
            format!(" of {}", names.join(", "))
        } else {
            String::new()
        };
        notes.push(format!(
            "{} of {} size(s) left out of {} case(s){of}: {}{more} (fewer than one element per rank, or the same case as the size before)",
            skipped.sizes.len(),
            plan.sizes.len(),
            skipped.pairs,
            shown.join(", ")
        ));
    }
    Ok(Prepared { cases, notes })
}

/// `--channels N` where an algorithm runs several blocks a channel (the
/// tree all-reduce: two trees, each up and down) past the most a rank's
/// program may have: refused before anything runs, naming the most that
/// fits. It failed at the first such case, the sweep half done.
fn check_channels(plan: &Plan, cases: &[Case]) -> Result<(), HarnessError> {
    use crate::engine::exec::host::MAX_CHANNELS;
    let asked = plan.channels;
    if asked == 0 {
        return Ok(());
    }
    let mut seen = Vec::new();
    for c in cases.iter().filter(|c| c.engine == Engine::Builtin) {
        if seen.contains(&(c.coll, c.algo, c.group)) {
            continue;
        }
        seen.push((c.coll, c.algo, c.group));
        let members = plan.members(c);
        let pl = crate::engine::types::Placement::OutOfPlace;
        // A program that does not generate fails where it runs, as before.
        let Ok((p, _, _)) = rank::program_with(c, &members, plan.ranks, 0, pl, asked, 1 << 16)
        else {
            continue;
        };
        let blocks = p.channels.len();
        if blocks > MAX_CHANNELS {
            let per = blocks.div_ceil(asked);
            let what = if c.group > 0 {
                "a group of the sweep".to_string()
            } else {
                format!("{} by {}", c.coll.name(), c.algo.name())
            };
            return Err(HarnessError::Refused(format!(
                "--channels {asked}: {what} runs {per} blocks a channel, {blocks} in all, past the {MAX_CHANNELS} a rank's program may have: give --channels {} or fewer, or leave {} out (--algo)",
                (MAX_CHANNELS / per).max(1),
                c.algo.name()
            )));
        }
    }
    Ok(())
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
        plan.slot_bytes,
        plan.timeout(),
        setup.timing,
        plan.cuda_knobs,
    );
    opts.proto = plan.protocol;
    opts.channels = plan.channels;
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
        gpu: setup.gpu.map(|k| {
            let mut opts = cuda_options(plan, setup, k);
            opts.peers = Some(peers_per_channel(plan, &prepared.cases));
            (k, opts)
        }),
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
    watchdog::install_signal_handlers();
    let dog = stop::spawn_watchdog(plan, setup, &worlds.host, &recs, mpi)?;
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
    let ending = stop::Ending {
        plan,
        setup,
        recs: &recs,
        mpi,
        missing_rows: expected_rows.saturating_sub(outcome.rows),
    };
    ending.conclude(result, fired, outcome)
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
    let (tx, rx) = mpsc::channel::<Note>();
    let world = &worlds.host;
    let handles = spawn_ranks(plan, setup, cases, worlds, recs, mpi, &tx);
    drop(tx);
    let mut wind = WindDown::new(world, dog);
    let collected = match mpi {
        None => {
            let mut next = || next_report(&rx, &mut wind);
            collect(plan, setup, cases, &mut next, sink, outcome)
        }
        Some(m) if m.rank() == 0 => {
            let mut peers = PeerReports {
                cases: cases.len(),
                placements: plan.placements.clone(),
                ranks: plan.ranks,
                seen: 0,
                wait: plan.timeout().max(Duration::from_secs(10)),
                quiet_since: None,
                failed: None,
            };
            let mut next = || peers.next(m, &rx, world);
            let collected = collect(plan, setup, cases, &mut next, sink, outcome);
            match peers.failed {
                Some(why) => collected.and(Err(HarnessError::Reports(why))),
                None => collected,
            }
        }
        Some(m) => forward_reports(m, &rx, &mut wind),
    };
    if collected.is_err() {
        world.abort();
    }
    let first = join_ranks(handles, &mut wind);
    collected?;
    first.map_or(Ok(()), |e| Err(HarnessError::Exec(e)))
}

type RankThread = std::io::Result<std::thread::JoinHandle<Result<(), ExecError>>>;

/// Starts a thread for each of this process's ranks (`recs`), each
/// sending its reports on `tx`; a rank that fails aborts the world.
fn spawn_ranks(
    plan: &Plan,
    setup: &Setup,
    cases: &Arc<[Case]>,
    worlds: &Worlds,
    recs: &[Arc<RankRecorder>],
    mpi: Option<&Arc<Peers>>,
    tx: &mpsc::Sender<Note>,
) -> Vec<RankThread> {
    let world = &worlds.host;
    let bytes = rank::buffer_bytes(plan, cases);
    // Rank threads own what they use: a stopping run may leave without
    // them (see `WindDown`), and what they still read must outlive it.
    let (plan_a, setup_a) = (Arc::new(plan.clone()), Arc::new(setup.clone()));
    let cpus = rank_cpus(plan, setup, recs.len());
    recs.iter()
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
        .collect()
}

/// Waits for the rank threads, but once the run is stopping no longer
/// than its wind-down (a rank still running then is left behind); the
/// error that stopped the run: the first that is not an abort, if any.
fn join_ranks(handles: Vec<RankThread>, wind: &mut WindDown) -> Option<ExecError> {
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
    first
}

/// The next rank report of a one-process run; `None` when every rank has
/// finished, or the run is stopping and its wind-down is over.
fn next_report(rx: &mpsc::Receiver<Note>, wind: &mut WindDown) -> Option<Note> {
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

/// What rank 0 of an MPI world has collected of the ranks' reports.
struct PeerReports {
    /// The sweep's cases, placements and ranks as this rank planned them
    /// (a report each of every rank): a peer's report of another (a rank
    /// started with other arguments) is refused, never looked up.
    cases: usize,
    placements: Vec<crate::engine::types::Placement>,
    ranks: usize,
    seen: usize,
    /// How long rank 0 waits for the next report once its own rank has
    /// finished: every rank passed the sweep's last barrier, so theirs are
    /// on their way (the run's timeout, 10 s at least: that sizes waits in
    /// collectives, not rows on their way while rank 0 prints).
    wait: Duration,
    /// When rank 0's own rank had finished and a report last came since.
    quiet_since: Option<Instant>,
    /// Why collecting stopped short of the sweep (the world is aborted).
    failed: Option<String>,
}

impl PeerReports {
    /// The next report, this process's rank's or a peer's; None when all
    /// have come, the run stopped, or collecting failed (`failed` says why).
    fn next(&mut self, m: &Peers, rx: &mpsc::Receiver<Note>, world: &HostWorld) -> Option<Note> {
        let total = self.cases * self.placements.len() * self.ranks;
        while self.seen < total {
            let got = match rx.try_recv() {
                // This process's rank passed the bootstrap barrier, so
                // every rank did.
                Ok(Note::Started) => return Some(Note::Started),
                Ok(Note::Done(r)) => Some(*r),
                Err(e) => {
                    if e == mpsc::TryRecvError::Disconnected {
                        self.quiet_since.get_or_insert_with(Instant::now);
                    }
                    match m.try_receive(REPORT_TAG) {
                        Some((from, bytes)) => match serde_json::from_slice::<Report>(&bytes) {
                            Ok(r) => match self.foreign(from, &r) {
                                Some(why) => return self.fail(world, why),
                                None => Some(r),
                            },
                            Err(e) => {
                                return self.fail(
                                    world,
                                    format!("rank {from}'s report could not be read: {e}"),
                                )
                            }
                        },
                        None => None,
                    }
                }
            };
            if let Some(r) = got {
                self.seen += 1;
                if let Some(t) = self.quiet_since.as_mut() {
                    *t = Instant::now();
                }
                return Some(Note::Done(Box::new(r)));
            }
            if world.aborted() {
                return None;
            }
            if self.quiet_since.is_some_and(|t| t.elapsed() > self.wait) {
                let why = format!(
                    "{} of {} rank reports came; no other came for {:?} after every rank had finished",
                    self.seen, total, self.wait
                );
                return self.fail(world, why);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        None
    }

    /// Why rank `from`'s report `r` is none of this sweep's (a rank
    /// started with other arguments, another collbench), if it is not:
    /// it is refused, never looked up.
    fn foreign(&self, from: usize, r: &Report) -> Option<String> {
        let ranks = self.ranks;
        let link = r.links.iter().find(|l| l.from >= ranks || l.to >= ranks);
        let what = if r.rank != from {
            format!("sent as rank {}", r.rank)
        } else if r.case >= self.cases {
            format!("of case {} of {}", r.case, self.cases)
        } else if !self.placements.contains(&r.placement) {
            format!("at placement {}", r.placement.name())
        } else if let Some(l) = link {
            format!("of a link {} -> {} of {ranks} ranks", l.from, l.to)
        } else {
            return None;
        };
        Some(format!(
            "rank {from}'s report {what} is none of this sweep's: were the ranks started with the same arguments and the same collbench?"
        ))
    }

    fn fail(&mut self, world: &HostWorld, why: String) -> Option<Note> {
        self.failed = Some(why);
        world.abort();
        None
    }
}

/// Ranks other than 0 of an MPI world send their reports to rank 0.
fn forward_reports(
    m: &Peers,
    rx: &mpsc::Receiver<Note>,
    wind: &mut WindDown,
) -> Result<(), HarnessError> {
    while let Some(note) = next_report(rx, wind) {
        let Note::Done(report) = note else {
            continue;
        };
        let bytes = serde_json::to_vec(&report).map_err(HarnessError::Encode)?;
        m.send(0, REPORT_TAG, &bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::Placement;

    /// A peer's report is checked against this rank's sweep before it is
    /// used: another rank's, another case's or placement's, or a link past
    /// the world is refused, naming what.
    #[test]
    fn a_peers_report_of_another_sweep_is_refused() {
        let peers = PeerReports {
            cases: 2,
            placements: vec![Placement::OutOfPlace],
            ranks: 6,
            seen: 0,
            wait: Duration::from_secs(1),
            quiet_since: None,
            failed: None,
        };
        let report = |rank, case, placement, link: Option<(usize, usize)>| Report {
            case,
            placement,
            rank,
            iter_ns: vec![1],
            total_ns: 1,
            verdict: None,
            arrive_ns: Vec::new(),
            fired: Vec::new(),
            input: None,
            links: link
                .map(|(from, to)| crate::engine::observe::LinkSample {
                    from,
                    to,
                    bytes: 8,
                    wait_ns: 1,
                    transfer_ns: 1,
                    op_gbps: Vec::new(),
                })
                .into_iter()
                .collect(),
            members: Vec::new(),
        };
        let out = Placement::OutOfPlace;
        assert_eq!(peers.foreign(1, &report(1, 1, out, Some((1, 5)))), None);
        for (r, what) in [
            (report(2, 0, out, None), "sent as rank 2"),
            (report(1, 2, out, None), "of case 2 of 2"),
            (report(1, 0, Placement::InPlace, None), "at placement in"),
            (
                report(1, 0, out, Some((1, 6))),
                "of a link 1 -> 6 of 6 ranks",
            ),
        ] {
            let why = peers.foreign(1, &r).unwrap_or_default();
            assert!(
                why.starts_with(&format!("rank 1's report {what} is none of this sweep's")),
                "{why}"
            );
        }
    }
}
