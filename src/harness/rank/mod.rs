//! What every rank thread does for each case: set up buffers, warm up,
//! time iterations, check, and report its numbers. The rank's executor is
//! behind [`RankRunner`]: operations are started, then waited for, so a
//! device executor queues a whole timed loop before the first wait.

use super::inject::{self, Fault};
use super::plan::{Case, Plan, Setup};
use crate::check::device::{CbVerdict, DeviceGen};
use crate::check::{self, Rule, Verdict};
use crate::engine::algo::group::{self, Shift};
use crate::engine::algo::{generate, Layout, Program, Slice, Spec};
use crate::engine::exec::cuda::abi::as_bytes;
use crate::engine::exec::{Data, ExecError, HostWorld, OpDesc, RankRunner};
use crate::engine::types::{Engine, Placement};
use crate::launch::Peers;
use crate::recorder::model::IterKind;
use crate::recorder::{OpInfo, RankRecorder, WORLD_GROUP};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod compile;
pub(crate) use compile::program_with;

/// The most operations a device rank queues ahead of the one it runs: an
/// event, a kernel and an event each, well inside CUDA's launch queue (about
/// a thousand entries), so a launch never blocks on it.
const QUEUE_AHEAD: usize = 256;

/// What a rank thread tells the collector.
pub enum Note {
    /// The rank is past the bootstrap: every rank's load checks passed and
    /// every rank reached the first barrier, so the first case starts.
    Started,
    /// A case's measurements at one placement.
    Done(Box<Report>),
}

/// One rank's numbers for one case and placement (sent to rank 0 as JSON
/// when ranks are processes).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub case: usize,
    pub placement: Placement,
    pub rank: usize,
    /// Nanoseconds of each timed iteration.
    pub iter_ns: Vec<u64>,
    pub total_ns: u64,
    pub verdict: Option<Verdict>,
    /// When the rank entered each timed collective (wall clock, ns).
    #[serde(default)]
    pub arrive_ns: Vec<u64>,
    /// The injections (by index in the plan) that have hit this rank so far.
    #[serde(default)]
    pub fired: Vec<usize>,
    /// This rank's inputs as the checked operations found them (float types
    /// only): where a NaN/Inf in the outputs came from.
    #[serde(default)]
    pub input: Option<Verdict>,
    /// What the timed operations measured of this rank's incoming links
    /// (`--links`).
    #[serde(default)]
    pub links: Vec<crate::engine::observe::LinkSample>,
    /// A group's verdicts, one per operation in issue order (empty for a
    /// single operation: `verdict` is its).
    #[serde(default)]
    pub members: Vec<Verdict>,
}

/// Bytes each rank allocates once for the whole sweep: [buf0, buf1, scratch].
pub fn buffer_bytes(plan: &Plan, cases: &[Case]) -> [usize; 3] {
    let mut need = [0usize; 3];
    for case in cases {
        let es = case.dtype.size();
        let members = plan.members(case);
        for &pl in &plan.placements {
            let scratch =
                |m: &Case| crate::engine::algo::scratch_elems(m.coll, m.algo, pl, m.counts);
            for rank in 0..plan.ranks {
                // A group's buffers hold its members' end to end.
                let each: Vec<(Layout, usize)> = members
                    .iter()
                    .map(|m| (Layout::new(m.coll, m.counts, pl, rank), scratch(m)))
                    .collect();
                let (l, _, s) = group::layout(&each, pl);
                // Saturating: a size past the address space must read as
                // too large, never wrap to a small one.
                need[0] = need[0].max(l.buf0.saturating_mul(es));
                need[1] = need[1].max(l.buf1.saturating_mul(es));
                need[2] = need[2].max(s.saturating_mul(es));
            }
        }
    }
    need
}

pub struct RankJob<'a> {
    pub plan: &'a Plan,
    pub setup: &'a Setup,
    pub cases: &'a [Case],
    /// The barrier and the abort flag every executor shares.
    pub world: Arc<HostWorld>,
    pub runner: Box<dyn RankRunner + 'a>,
    pub rec: Arc<RankRecorder>,
    pub tx: Sender<Note>,
    /// The MPI world, for `--engine mpi` cases.
    pub mpi: Option<&'a Peers>,
    /// Times of `--engine mpi` operations not yet waited for.
    pub lib_times: Vec<u64>,
    /// Recorder entries started and not yet completed.
    pub open: Vec<u64>,
    /// Times of completed operations not yet taken by a wait.
    pub settled: Vec<u64>,
    /// Operations launched (a graph's) whose records wait for room in the
    /// recorder: made as they complete, after those in `open`.
    pub unrecorded: Option<(OpInfo, IterKind, usize)>,
    /// When this rank entered each timed collective of the case under way.
    pub arrivals: Vec<u64>,
    /// Which of the plan's injections have hit this rank.
    pub fired: Vec<bool>,
}

/// One case's program and buffers, ready to run operations.
struct Ready<'b> {
    case: &'b Case,
    /// Whether the rank's runner runs it (the builtin engine, NCCL), else
    /// the harness calls a host library (MPI).
    on_runner: bool,
    /// The buffers' layout (a group's: its members' buffers end to end).
    layout: Layout,
    /// The operation as executors take it.
    desc: OpDesc,
    info: OpInfo,
    /// The operations it issues: the case itself, or its group's members.
    parts: Vec<Part>,
}

/// One operation of a case: its data rule and where its views lie.
struct Part {
    case: Case,
    shift: Shift,
    rule: Rule,
    /// The device's input tables and their header's bytes (device ranks).
    gen: Option<(DeviceGen, Vec<u8>)>,
}

impl Part {
    /// Physical (buffer, element offset) of a slice of this operation's views.
    fn at(&self, layout: &Layout, s: Slice) -> (usize, usize) {
        layout.resolve(self.shift.apply(s))
    }
}

/// Member `k`'s data seed: members of one group hold different inputs, so
/// an output written to another member's buffer is caught.
fn member_seed(seed: u64, k: usize) -> u64 {
    seed.wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl RankJob<'_> {
    pub fn run(mut self) -> Result<(), ExecError> {
        let boot = OpInfo {
            group: "bootstrap",
            collective: "bootstrap",
            ..OpInfo::default()
        };
        let seq = self.rec.enter(&boot, IterKind::Bootstrap);
        self.preflight()?;
        self.world.barrier(self.rank())?;
        self.rec.complete("bootstrap", seq);
        // The collector opens the first case's section now: a layout the
        // load checks refuse prints no table header before its error.
        if self.tx.send(Note::Started).is_err() {
            return Err(ExecError::Aborted);
        }
        for (i, case) in self.cases.iter().enumerate() {
            let _case = tracing::debug_span!(
                "case",
                n = i,
                coll = case.coll.name(),
                engine = case.engine.name(),
                algo = case.algo.name(),
                dtype = case.dtype.name(),
                bytes = case.bytes
            )
            .entered();
            for &pl in &self.plan.placements {
                let report = self.run_case(i, case, pl)?;
                tracing::debug!(
                    placement = pl.name(),
                    total_us = report.total_ns / 1000,
                    "case done"
                );
                // The collector outlives the ranks unless it failed itself.
                if self.tx.send(Note::Done(Box::new(report))).is_err() {
                    return Err(ExecError::Aborted);
                }
            }
        }
        // A rank's operation completes once its own part is done: its last
        // messages to a peer may still be on their way (in the relay, in
        // the CUDA bridge). Once every rank is here, all have arrived, and
        // tearing the transports down loses none.
        self.barrier()
    }

    fn rank(&self) -> usize {
        self.runner.rank()
    }

    fn run_case(&mut self, idx: usize, case: &Case, pl: Placement) -> Result<Report, ExecError> {
        let plan = self.plan;
        self.arrivals.clear();
        let ready = self.compile(case, pl)?;
        self.quiesce()?;
        self.prepare(&ready)?;
        self.barrier()?;
        for _ in 0..plan.warmup {
            self.op(&ready, IterKind::Warmup)?;
        }
        let warm = self.wait()?;
        // Links are measured over the timed operations only.
        self.runner.take_links();
        if self.setup.graph && ready.on_runner {
            self.runner.prepare_graph(plan.iters)?;
        }
        self.barrier()?;
        let start = Instant::now();
        let iter_ns = if self.setup.graph && ready.on_runner {
            // One launch runs every iteration; records for as many as the
            // queue holds (the first started, the rest scheduled), the
            // others as they complete, so the running one is never pushed
            // out of the recorder by those behind it.
            let window = self.queue_depth().min(plan.iters);
            for _ in 0..window {
                let seq = self.record(&ready.info, IterKind::Timed, true);
                self.open.push(seq);
            }
            self.unrecorded = Some((ready.info, IterKind::Timed, plan.iters - window));
            // The graph's completions are seen when it ends: its first
            // operation is in flight while the others run, each allowed
            // twice a warmup operation's median time (none without a
            // warmup: then the timeout must cover the whole graph).
            let mut warm = warm;
            warm.sort_unstable();
            if let Some(&median) = warm.get(warm.len() / 2) {
                let behind = plan.iters.saturating_sub(1) as u64;
                self.rec
                    .defer(median.saturating_mul(2).saturating_mul(behind));
            }
            self.runner.launch_graph(plan.iters)?;
            self.wait()?
        } else {
            for _ in 0..plan.iters {
                self.op(&ready, IterKind::Timed)?;
            }
            self.wait()?
        };
        let links = self.runner.take_links();
        let total_ns = match self.setup.timing {
            super::Timing::Wall => start.elapsed().as_nanos() as u64,
            super::Timing::Events => iter_ns.iter().sum(),
        };
        let mut verdict: Option<Verdict> = None;
        let mut members: Vec<Verdict> = Vec::new();
        let mut input: Option<Verdict> = None;
        for _ in 0..plan.check_iters {
            self.quiesce()?;
            self.prepare(&ready)?;
            // Before the barrier: on a device, no data kernel may queue
            // behind another rank's persistent kernel.
            if let Some(v) = self.scan_input(&ready)? {
                match input.as_mut() {
                    Some(acc) => acc.merge(v),
                    None => input = Some(v),
                }
            }
            self.barrier()?;
            self.op(&ready, IterKind::Check)?;
            self.wait()?;
            let each = self.verify(&ready)?;
            if case.group > 0 {
                members.resize_with(each.len(), Verdict::default);
                for (acc, v) in members.iter_mut().zip(&each) {
                    acc.merge(v.clone());
                }
            }
            let v = each.into_iter().fold(Verdict::default(), |mut all, v| {
                all.merge(v);
                all
            });
            match verdict.as_mut() {
                Some(acc) => acc.merge(v),
                None => verdict = Some(v),
            }
        }
        Ok(Report {
            case: idx,
            placement: pl,
            rank: self.rank(),
            iter_ns,
            total_ns,
            verdict,
            arrive_ns: std::mem::take(&mut self.arrivals),
            fired: (0..self.fired.len()).filter(|&i| self.fired[i]).collect(),
            input,
            links,
            members,
        })
    }

    /// Poisons each operation's receive view, then writes this rank's
    /// input into its send view.
    fn prepare(&mut self, r: &Ready<'_>) -> Result<(), ExecError> {
        let rank = self.rank();
        let es = r.case.dtype.size();
        for part in &r.parts {
            let (rb, ro) = part.at(&r.layout, Slice::recv(0));
            let (sb, so) = part.at(&r.layout, Slice::send(0));
            let c = part.case.counts;
            let (send, recv) = (c.send_of(rank), c.recv_of(rank));
            match (self.runner.data(), &part.gen) {
                (Data::Host(bufs), _) => {
                    check::poison(
                        part.case.dtype,
                        &mut bufs[rb].as_mut_slice()[ro * es..(ro + recv) * es],
                    );
                    check::fill_input(
                        &part.rule,
                        rank,
                        &mut bufs[sb].as_mut_slice()[so * es..(so + send) * es],
                    );
                }
                (Data::Device(d), Some((_, header))) => {
                    d.poison((rb, ro * es), recv)?;
                    d.fill(header, rank as u32, (sb, so * es), send)?;
                }
                (Data::Device(_), None) => {
                    return Err(ExecError::Setup("device inputs not built".into()))
                }
            }
        }
        Ok(())
    }

    /// The first operation's send view and its length: where injected NaNs go.
    fn first_send(&self, r: &Ready<'_>) -> ((usize, usize), usize) {
        let part = &r.parts[0];
        let count = part.case.counts.send_of(self.rank());
        (part.at(&r.layout, Slice::send(0)), count)
    }

    /// Before a checked operation of a float type: puts in the NaN an
    /// injection owes it (so the scan sees what the operation will), then
    /// checks this rank's send views against their fill.
    fn scan_input(&mut self, r: &Ready<'_>) -> Result<Option<Verdict>, ExecError> {
        if !r.case.dtype.is_float() {
            return Ok(None);
        }
        let (rank, next) = (self.rank(), self.rec.next_seq(WORLD_GROUP));
        let (at, count) = self.first_send(r);
        // An empty view (an uneven block of none) has nothing to poison.
        if self.nan_hits(next) && count > 0 {
            self.poke(r, at, count / 2, inject::poke_nan)?;
        }
        let es = r.case.dtype.size();
        let mut all = Verdict::default();
        for part in &r.parts {
            let (b, o) = part.at(&r.layout, Slice::send(0));
            let count = part.case.counts.send_of(rank);
            let v = match (self.runner.data(), &part.gen) {
                (Data::Host(bufs), _) => {
                    let send = &bufs[b].as_slice()[o * es..(o + count) * es];
                    check::verify_input(&part.rule, rank, send)
                }
                (Data::Device(d), Some((g, header))) => {
                    device_verdict(d, g, header, &g.own_input(rank), (b, o * es), count, rank)?
                }
                (Data::Device(_), None) => {
                    return Err(ExecError::Setup("device inputs not built".into()))
                }
            };
            all.merge(v);
        }
        Ok(Some(all))
    }

    /// Marks the `slow`/`slow-link` injections this rank's program feels: it
    /// receives over a slowed link.
    fn mark_slowed(&mut self, program: &crate::engine::algo::Program) {
        let me = self.rank();
        for (i, f) in self.plan.injects.iter().enumerate() {
            let Fault::Slow { to, .. } = f.fault else {
                continue;
            };
            if to.is_some_and(|t| t != me) {
                continue;
            }
            let feels = program
                .channels
                .iter()
                .flat_map(|c| &c.steps)
                .any(|s| s.recv.iter().any(|p| p.rank as usize == f.rank));
            if feels {
                self.fired[i] = true;
            }
        }
    }

    /// Whether a NaN injection hits this rank's operation `seq`.
    fn nan_hits(&self, seq: u64) -> bool {
        let rank = self.rank();
        self.plan
            .injects
            .iter()
            .any(|f| f.fault == Fault::Nan && f.hits(rank, seq))
    }

    /// Checks this rank's receive views: one verdict per operation.
    fn verify(&mut self, r: &Ready<'_>) -> Result<Vec<Verdict>, ExecError> {
        let rank = self.rank();
        let es = r.case.dtype.size();
        let mut out = Vec::with_capacity(r.parts.len());
        for part in &r.parts {
            let case = &part.case;
            let (b, o) = part.at(&r.layout, Slice::recv(0));
            let root = case.root.unwrap_or(0);
            let v = match (self.runner.data(), &part.gen) {
                (Data::Host(bufs), _) => {
                    let count = case.counts.recv_of(rank);
                    let recv = &bufs[b].as_slice()[o * es..(o + count) * es];
                    check::verify(&part.rule, case.coll, case.counts, root, rank, recv)
                }
                (Data::Device(d), Some((g, header))) => {
                    let mut all = Verdict::default();
                    for reg in g.regions(case.coll, case.counts, root, rank) {
                        let at = (b, (o + reg.at) * es);
                        let mut v = device_verdict(d, g, header, &reg.e, at, reg.count, rank)?;
                        if let Some(f) = v.first.as_mut() {
                            f.index += reg.at;
                        }
                        all.merge(v);
                    }
                    all
                }
                (Data::Device(_), None) => {
                    return Err(ExecError::Setup("device inputs not built".into()))
                }
            };
            out.push(v);
        }
        Ok(out)
    }

    /// On a device, waits until every rank has finished its operations, so
    /// no data kernel is queued while another rank's persistent kernel still
    /// holds the device (its blocks could wait behind ours for a slot).
    fn quiesce(&mut self) -> Result<(), ExecError> {
        match self.runner.data() {
            Data::Device(_) => self.barrier(),
            Data::Host(_) => Ok(()),
        }
    }

    fn barrier(&self) -> Result<(), ExecError> {
        let info = OpInfo {
            group: "barrier",
            collective: "barrier",
            ..OpInfo::default()
        };
        let seq = self.rec.enter(&info, IterKind::Barrier);
        self.world.barrier(self.rank())?;
        self.rec.complete("barrier", seq);
        Ok(())
    }

    /// Starts one recorded collective, with any injected fault.
    fn op(&mut self, r: &Ready<'_>, kind: IterKind) -> Result<(), ExecError> {
        let rank = self.rank();
        let queued = r.on_runner && !self.runner.completes_on_launch();
        if queued && self.open.len() >= self.queue_depth() {
            // Queue no further ahead of the device than half the flight
            // recorder holds (the operation it runs must stay recorded),
            // nor so far that a launch blocks on a full launch queue (its
            // records would go stale while it waits).
            self.settle()?;
        }
        let seq = if self.plan.injects.is_empty() {
            self.record(&r.info, kind, queued)
        } else {
            self.faulty_begin(r, kind, queued)?
        };
        if kind == IterKind::Timed {
            self.arrivals.push(crate::recorder::wall_ns());
        }
        self.open.push(seq);
        self.start(r)?;
        if !r.on_runner || self.runner.completes_on_launch() {
            // Done already: record it as the host engine always has.
            self.settle()?;
        }
        if let Some(i) = self
            .plan
            .injects
            .iter()
            .position(|f| f.fault == Fault::Corrupt && f.hits(rank, seq))
        {
            // Fired where a check can see it (the output is the result),
            // and where there is an output: an uneven block may hold none.
            let part = &r.parts[0];
            let count = part.case.counts.recv_of(rank);
            let unseen = self.plan.injects[i].unseen(r.case.coll, rank, r.case.root);
            self.fired[i] |= !unseen && count > 0;
            if count > 0 {
                let at = part.at(&r.layout, Slice::recv(0));
                self.poke(r, at, count / 2, inject::flip_bit)?;
            }
        }
        Ok(())
    }

    /// The most operations recorded ahead of the one running: half the
    /// recorder, so those queued never push the running one out.
    fn queue_depth(&self) -> usize {
        (self.rec.capacity() / 2).clamp(1, QUEUE_AHEAD)
    }

    /// Records an operation about to be started: started at once, unless it
    /// is `queued` (enqueued on a device stream) behind operations still
    /// open, which it follows: then it is scheduled, and started when the
    /// one before it completes (see [`Self::settle`]). So only the
    /// operation the device is running carries the channel progress.
    fn record(&self, info: &OpInfo, kind: IterKind, queued: bool) -> u64 {
        if queued && !self.open.is_empty() {
            self.rec.schedule(info, kind)
        } else {
            self.rec.enter(info, kind)
        }
    }

    /// Waits for every started operation and completes their records;
    /// returns the times of every operation since the last call.
    fn wait(&mut self) -> Result<Vec<u64>, ExecError> {
        self.settle()?;
        Ok(std::mem::take(&mut self.settled))
    }

    /// Waits for the started operations, completes their records and keeps
    /// their times for [`Self::wait`].
    fn settle(&mut self) -> Result<(), ExecError> {
        let (rec, open) = (&self.rec, &self.open);
        let mut unrecorded = self.unrecorded.take();
        let mut completed = 0;
        let result = self.runner.wait(&mut |k| {
            if let Some(&seq) = open.get(k) {
                rec.complete(WORLD_GROUP, seq);
                // The device goes on with the next one queued behind it.
                if let Some(&next) = open.get(k + 1) {
                    rec.start(WORLD_GROUP, next);
                }
                completed = completed.max(k + 1);
            } else if let Some((info, kind, left)) = unrecorded.as_mut().filter(|u| u.2 > 0) {
                let seq = rec.enter(info, *kind);
                rec.complete(WORLD_GROUP, seq);
                *left -= 1;
            }
        });
        // Library operations ran to completion when they were started.
        if !self.lib_times.is_empty() {
            for &seq in &self.open[completed.min(self.open.len())..] {
                self.rec.complete(WORLD_GROUP, seq);
            }
        }
        self.open.clear();
        self.settled.extend(result?);
        self.settled.append(&mut self.lib_times);
        Ok(())
    }

    /// Starts the operation on the case's engine.
    fn start(&mut self, r: &Ready<'_>) -> Result<(), ExecError> {
        if r.on_runner {
            return self.runner.launch();
        }
        let m = self
            .mpi
            .ok_or_else(|| ExecError::Setup("--engine mpi needs an MPI launch".into()))?;
        let world = Arc::clone(&self.world);
        let abort = move || world.aborted();
        let timeout = self.plan.timeout();
        let Data::Host(bufs) = self.runner.data() else {
            return Err(ExecError::Setup(
                "--engine mpi runs on host buffers only".into(),
            ));
        };
        let t = Instant::now();
        m.run_collective(&r.desc, bufs, timeout, &abort)?;
        self.lib_times.push(t.elapsed().as_nanos() as u64);
        Ok(())
    }

    /// Applies `f` to element `index` of the view at `at` (host or device).
    fn poke(
        &mut self,
        r: &Ready<'_>,
        at: (usize, usize),
        index: usize,
        f: fn(crate::engine::Dtype, &mut [u8], usize),
    ) -> Result<(), ExecError> {
        let dtype = r.case.dtype;
        let es = dtype.size();
        let (b, o) = at;
        match self.runner.data() {
            Data::Host(bufs) => {
                f(dtype, &mut bufs[b].as_mut_slice()[o * es..], index);
                Ok(())
            }
            Data::Device(d) => {
                let place = (b, (o + index) * es);
                let mut elem = d.read(place, es)?;
                f(dtype, &mut elem, 0);
                d.write(place, &elem)
            }
        }
    }

    /// Begins a collective the injected faults may hang, delay or poison.
    fn faulty_begin(
        &mut self,
        r: &Ready<'_>,
        kind: IterKind,
        queued: bool,
    ) -> Result<u64, ExecError> {
        let rank = self.rank();
        let next = self.rec.next_seq(WORLD_GROUP);
        let injects = &self.plan.injects;
        // A NaN goes into the send view: none in an empty one (an uneven
        // block of none).
        let float = r.case.dtype.is_float() && self.first_send(r).1 > 0;
        let mut fired = Vec::new();
        let mut hit = |want: fn(&Fault) -> bool| {
            let i = injects
                .iter()
                .position(|f| want(&f.fault) && f.hits(rank, next))?;
            // A NaN has no bits in an integer, nor room in an empty view:
            // it does not fire there; nor where no check can see it.
            let unseen = injects[i].unseen(r.case.coll, rank, r.case.root);
            if (injects[i].fault != Fault::Nan || float) && !unseen {
                fired.push(i);
            }
            Some(injects[i])
        };
        let hang = hit(|f| *f == Fault::Hang).is_some();
        let delay = hit(|f| matches!(f, Fault::Delay { .. })).map(|f| f.fault);
        let nan = hit(|f| *f == Fault::Nan).is_some() && float;
        for i in fired {
            self.fired[i] = true;
        }
        if hang {
            // Never enter: wait, as a hung process would, until the run
            // stops. What it started before still completes on the device.
            self.wait()?;
            self.rec.park(next);
            let stopped = self.sleep_until(None);
            self.rec.unpark();
            stopped?;
        }
        let seq = match delay {
            Some(Fault::Delay { ms }) => {
                // What it started before completes first (its records too),
                // as a rank that is slow to call the next collective.
                self.settle()?;
                let seq = self.rec.schedule(&r.info, kind);
                self.sleep_until(Some(Duration::from_millis(ms)))?;
                self.rec.start(WORLD_GROUP, seq);
                seq
            }
            _ => self.record(&r.info, kind, queued),
        };
        // A checked operation's NaN went in before its input scan.
        if nan && kind != IterKind::Check {
            let (at, count) = self.first_send(r);
            self.poke(r, at, count / 2, inject::poke_nan)?;
        }
        Ok(seq)
    }

    /// Sleeps `d` (None: forever), ending early with `Aborted` if the run stops.
    fn sleep_until(&self, d: Option<Duration>) -> Result<(), ExecError> {
        let end = d.map(|d| Instant::now() + d);
        while end.is_none_or(|e| Instant::now() < e) {
            if self.world.aborted() {
                return Err(ExecError::Aborted);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// `cb_verify` over `count` elements at `at` of rank `rank`'s device
/// memory against `e`, as a [`Verdict`].
fn device_verdict(
    d: &mut dyn crate::engine::exec::DeviceData,
    g: &DeviceGen,
    header: &[u8],
    e: &crate::check::device::CbExpect,
    at: crate::engine::exec::At,
    count: usize,
    rank: usize,
) -> Result<Verdict, ExecError> {
    let (c, first_bits) = d.verify(header, as_bytes(std::slice::from_ref(e)), at, count)?;
    let counters = CbVerdict {
        wrong: c[0],
        nan: c[1],
        first: c[2],
        pad: 0,
    };
    Ok(g.verdict_from(e, count as u64, rank, &counters, first_bits))
}
