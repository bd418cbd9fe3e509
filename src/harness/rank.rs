//! What every rank thread does for each case: set up buffers, warm up,
//! time iterations, check, and report its numbers.

use super::plan::{Case, Plan};
use crate::check::{self, Rule, Verdict};
use crate::engine::algo::{generate, Layout, Slice, Spec};
use crate::engine::exec::host::RankBufs;
use crate::engine::exec::{Compiled, ExecError, HostBuf, HostWorld, RankExec};
use crate::engine::types::Placement;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

/// One rank's numbers for one case and placement.
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
            if pl == Placement::InPlace && case.coll == crate::engine::types::Collective::AllToAll {
                need[2] = need[2].max(case.counts.recv * es);
            }
        }
    }
    need
}

pub struct RankJob<'a> {
    pub plan: &'a Plan,
    pub cases: &'a [Case],
    pub world: Arc<HostWorld>,
    pub exec: RankExec,
    pub tx: Sender<Report>,
}

impl RankJob<'_> {
    pub fn run(self) -> Result<(), ExecError> {
        let sizes = buffer_bytes(self.plan, self.cases);
        let alloc = |n| HostBuf::new(n).map_err(ExecError::Setup);
        let mut bufs = [alloc(sizes[0])?, alloc(sizes[1])?, alloc(sizes[2])?];
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
        let spec = Spec {
            coll: case.coll,
            algo: case.algo,
            nranks: plan.ranks,
            rank,
            root: case.root.unwrap_or(0),
            counts: case.counts,
            placement: pl,
            channels: plan.channels,
            chunk: self.world.chunk_elems(case.dtype),
        };
        let program = generate(&spec).map_err(|e| ExecError::Setup(e.to_string()))?;
        let layout = Layout::new(case.coll, case.counts, pl, rank);
        let compiled = Compiled::new(&self.world, &program, layout, case.dtype, case.op)?;
        let rule = Rule {
            seed: plan.seed,
            dtype: case.dtype,
            op: case.op,
            nranks: plan.ranks,
        };
        prepare(&rule, case, &layout, rank, bufs);
        let run = |bufs: &[HostBuf; 3]| {
            let rb = RankBufs {
                bufs: [&bufs[0], &bufs[1], &bufs[2]],
            };
            self.exec.run(&compiled, &rb)
        };
        self.world.barrier(rank)?;
        for _ in 0..plan.warmup {
            run(bufs)?;
        }
        self.world.barrier(rank)?;
        let mut iter_ns = Vec::with_capacity(plan.iters);
        let start = Instant::now();
        for _ in 0..plan.iters {
            let t = Instant::now();
            run(bufs)?;
            iter_ns.push(t.elapsed().as_nanos() as u64);
        }
        let total_ns = start.elapsed().as_nanos() as u64;
        let mut verdict: Option<Verdict> = None;
        for _ in 0..plan.check_iters {
            prepare(&rule, case, &layout, rank, bufs);
            self.world.barrier(rank)?;
            run(bufs)?;
            let recv = view(
                bufs,
                &layout,
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
            verdict = Some(merge(verdict, v));
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

fn merge(acc: Option<Verdict>, v: Verdict) -> Verdict {
    match acc {
        None => v,
        Some(mut a) => {
            a.checked += v.checked;
            a.wrong += v.wrong;
            a.nan += v.nan;
            if a.first.is_none() {
                a.first = v.first;
            }
            a
        }
    }
}
