//! What every rank thread does for each case: set up buffers, warm up,
//! time iterations, check, and report its numbers.

use super::inject::{self, Fault};
use super::plan::{Case, Plan};
use crate::check::{self, Rule, Verdict};
use crate::engine::algo::{generate, Layout, Slice, Spec};
use crate::engine::exec::host::RankBufs;
use crate::engine::exec::{Compiled, ExecError, HostBuf, HostWorld, RankExec};
use crate::engine::types::Engine;
use crate::engine::types::Placement;
use crate::launch::Mpi;
use crate::recorder::model::IterKind;
use crate::recorder::{OpInfo, RankRecorder, WORLD_GROUP};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
}

/// Bytes each rank allocates once for the whole sweep: [buf0, buf1, scratch].
pub fn buffer_bytes(plan: &Plan, cases: &[Case]) -> [usize; 3] {
    let mut need = [0usize; 3];
    for case in cases {
        let es = case.dtype.size();
        for &pl in &plan.placements {
            for rank in 0..plan.ranks {
                let l = Layout::new(case.coll, case.counts, pl, rank);
                need[0] = need[0].max(l.buf0 * es);
                need[1] = need[1].max(l.buf1 * es);
            }
            let scratch = crate::engine::algo::scratch_elems(case.coll, case.algo, pl, case.counts);
            need[2] = need[2].max(scratch * es);
        }
    }
    need
}

pub struct RankJob<'a> {
    pub plan: &'a Plan,
    pub cases: &'a [Case],
    pub world: Arc<HostWorld>,
    pub exec: RankExec,
    pub rec: Arc<RankRecorder>,
    pub tx: Sender<Report>,
    /// The MPI world, for `--engine mpi` cases.
    pub mpi: Option<&'a Mpi>,
}

/// One case's program and buffers, ready to run operations.
struct Ready<'b> {
    case: &'b Case,
    /// The builtin engine's program; None for a library engine.
    compiled: Option<Compiled>,
    layout: Layout,
    info: OpInfo,
}

impl RankJob<'_> {
    pub fn run(self) -> Result<(), ExecError> {
        let sizes = buffer_bytes(self.plan, self.cases);
        let mut bufs = self.world.buffers(self.exec.rank(), sizes)?;
        let boot = OpInfo {
            group: "bootstrap",
            collective: "bootstrap",
            ..OpInfo::default()
        };
        let seq = self.rec.enter(&boot, IterKind::Bootstrap);
        self.world.barrier(self.exec.rank())?;
        self.rec.complete("bootstrap", seq);
        for (i, case) in self.cases.iter().enumerate() {
            for &pl in &self.plan.placements {
                let report = self.run_case(i, case, pl, &mut bufs)?;
                // The collector outlives the ranks unless it failed itself.
                if self.tx.send(report).is_err() {
                    return Err(ExecError::Aborted);
                }
            }
        }
        Ok(())
    }

    fn run_case(
        &self,
        idx: usize,
        case: &Case,
        pl: Placement,
        bufs: &mut [HostBuf; 3],
    ) -> Result<Report, ExecError> {
        let plan = self.plan;
        let rank = self.exec.rank();
        let ready = self.compile(case, pl)?;
        let rule = Rule {
            seed: plan.seed,
            dtype: case.dtype,
            op: case.op,
            nranks: plan.ranks,
        };
        prepare(&rule, case, &ready.layout, rank, bufs);
        self.barrier()?;
        for _ in 0..plan.warmup {
            self.op(&ready, IterKind::Warmup, bufs)?;
        }
        self.barrier()?;
        let mut iter_ns = Vec::with_capacity(plan.iters);
        let start = Instant::now();
        for _ in 0..plan.iters {
            let t = Instant::now();
            self.op(&ready, IterKind::Timed, bufs)?;
            iter_ns.push(t.elapsed().as_nanos() as u64);
        }
        let total_ns = start.elapsed().as_nanos() as u64;
        let mut verdict: Option<Verdict> = None;
        for _ in 0..plan.check_iters {
            prepare(&rule, case, &ready.layout, rank, bufs);
            self.barrier()?;
            self.op(&ready, IterKind::Check, bufs)?;
            let recv = view(
                bufs,
                &ready.layout,
                Slice::recv(0),
                case.dtype.size(),
                case.counts.recv,
            );
            let v = check::verify(
                &rule,
                case.coll,
                case.counts,
                case.root.unwrap_or(0),
                rank,
                recv,
            );
            match verdict.as_mut() {
                Some(acc) => acc.merge(v),
                None => verdict = Some(v),
            }
        }
        Ok(Report {
            case: idx,
            placement: pl,
            rank,
            iter_ns,
            total_ns,
            verdict,
        })
    }

    fn compile<'b>(&self, case: &'b Case, pl: Placement) -> Result<Ready<'b>, ExecError> {
        let rank = self.exec.rank();
        let spec = Spec {
            coll: case.coll,
            algo: case.algo,
            nranks: self.plan.ranks,
            rank,
            root: case.root.unwrap_or(0),
            counts: case.counts,
            placement: pl,
            channels: self.plan.channels,
            chunk: self.world.chunk_elems(case.dtype),
        };
        let layout = Layout::new(case.coll, case.counts, pl, rank);
        let compiled = match case.engine {
            Engine::Builtin => {
                let program = generate(&spec).map_err(|e| ExecError::Setup(e.to_string()))?;
                Some(Compiled::new(
                    &self.world,
                    &program,
                    layout,
                    case.dtype,
                    case.op,
                )?)
            }
            Engine::Mpi => None,
        };
        let info = OpInfo {
            group: WORLD_GROUP,
            collective: case.coll.name(),
            algo: if case.engine == Engine::Builtin {
                case.algo.name()
            } else {
                case.engine.name()
            },
            dtype: case.dtype.name(),
            count: case.bytes / case.dtype.size() as u64,
            bytes: case.bytes,
            root: case.root.map(|r| r as i64),
        };
        Ok(Ready {
            case,
            compiled,
            layout,
            info,
        })
    }

    fn barrier(&self) -> Result<(), ExecError> {
        let info = OpInfo {
            group: "barrier",
            collective: "barrier",
            ..OpInfo::default()
        };
        let seq = self.rec.enter(&info, IterKind::Barrier);
        self.world.barrier(self.exec.rank())?;
        self.rec.complete("barrier", seq);
        Ok(())
    }

    /// One recorded collective, with any injected fault.
    fn op(&self, r: &Ready<'_>, kind: IterKind, bufs: &mut [HostBuf; 3]) -> Result<(), ExecError> {
        let rank = self.exec.rank();
        let seq = if self.plan.injects.is_empty() {
            self.rec.enter(&r.info, kind)
        } else {
            self.faulty_begin(r, kind, bufs)?
        };
        self.run_engine(r, bufs)?;
        if self
            .plan
            .injects
            .iter()
            .any(|f| f.fault == Fault::Corrupt && f.hits(rank, seq))
        {
            let (b, o) = r.layout.resolve(Slice::recv(0));
            let es = r.case.dtype.size();
            inject::flip_bit(
                r.case.dtype,
                &mut bufs[b].as_mut_slice()[o * es..],
                r.case.counts.recv / 2,
            );
        }
        self.rec.complete(WORLD_GROUP, seq);
        Ok(())
    }

    /// Runs the operation on the case's engine.
    fn run_engine(&self, r: &Ready<'_>, bufs: &mut [HostBuf; 3]) -> Result<(), ExecError> {
        if let Some(compiled) = &r.compiled {
            let rb = RankBufs {
                bufs: [&bufs[0], &bufs[1], &bufs[2]],
            };
            return self.exec.run(compiled, &rb);
        }
        let m = self
            .mpi
            .ok_or_else(|| ExecError::Setup("--engine mpi needs an MPI launch".into()))?;
        let c = r.case;
        let abort = || self.world.aborted();
        m.run_collective(
            c.coll,
            c.dtype,
            c.op,
            c.counts,
            c.root.unwrap_or(0),
            &r.layout,
            bufs,
            self.plan.timeout(),
            &abort,
        )
    }

    /// Begins a collective the injected faults may hang, delay or poison.
    fn faulty_begin(
        &self,
        r: &Ready<'_>,
        kind: IterKind,
        bufs: &mut [HostBuf; 3],
    ) -> Result<u64, ExecError> {
        let rank = self.exec.rank();
        let next = self.rec.next_seq(WORLD_GROUP);
        let hit = |want: fn(&Fault) -> bool| {
            self.plan
                .injects
                .iter()
                .find(|f| want(&f.fault) && f.hits(rank, next))
        };
        if hit(|f| *f == Fault::Hang).is_some() {
            // Never enter: wait, as a hung process would, until the run stops.
            self.sleep_until(None)?;
        }
        let seq = match hit(|f| matches!(f, Fault::Delay { .. })).map(|f| f.fault) {
            Some(Fault::Delay { ms }) => {
                let seq = self.rec.schedule(&r.info, kind);
                self.sleep_until(Some(Duration::from_millis(ms)))?;
                self.rec.start(WORLD_GROUP, seq);
                seq
            }
            _ => self.rec.enter(&r.info, kind),
        };
        if hit(|f| *f == Fault::Nan).is_some() {
            let (b, o) = r.layout.resolve(Slice::send(0));
            let es = r.case.dtype.size();
            inject::poke_nan(
                r.case.dtype,
                &mut bufs[b].as_mut_slice()[o * es..],
                r.case.counts.send / 2,
            );
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

/// Poisons the receive view, then writes this rank's input into the send view.
fn prepare(rule: &Rule, case: &Case, layout: &Layout, rank: usize, bufs: &mut [HostBuf; 3]) {
    let es = case.dtype.size();
    let (rb, ro) = layout.resolve(Slice::recv(0));
    check::poison(
        case.dtype,
        &mut bufs[rb].as_mut_slice()[ro * es..(ro + case.counts.recv) * es],
    );
    let (sb, so) = layout.resolve(Slice::send(0));
    check::fill_input(
        rule,
        rank,
        &mut bufs[sb].as_mut_slice()[so * es..(so + case.counts.send) * es],
    );
}

/// The bytes of `count` elements of a view slice.
fn view<'a>(
    bufs: &'a [HostBuf; 3],
    layout: &Layout,
    s: Slice,
    es: usize,
    count: usize,
) -> &'a [u8] {
    let (b, o) = layout.resolve(s);
    &bufs[b].as_slice()[o * es..(o + count) * es]
}
