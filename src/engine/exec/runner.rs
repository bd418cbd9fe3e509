//! The seam between the harness and the executors: one rank's side of an
//! executor ([`RankRunner`]), what an operation is ([`OpDesc`]), and how the
//! harness reaches a rank's buffers ([`Data`]: host memory it touches
//! directly, or device memory behind [`DeviceData`]). The host executor's
//! runner ([`HostRank`]) lives here; the CUDA one in `cuda::launch`.

use super::host::{Compiled, RankBufs, RankExec};
use super::mem::HostBuf;
use super::world::{ExecError, HostWorld};
use crate::engine::algo::{Layout, Program};
use crate::engine::observe::LinkSample;
use crate::engine::types::{Collective, Counts, Dtype, Engine, ReduceOp};
use std::sync::Arc;
use std::time::Instant;

/// One operation of a case, as every rank runs it.
#[derive(Clone, Copy, Debug)]
pub struct OpDesc {
    pub coll: Collective,
    pub dtype: Dtype,
    pub op: ReduceOp,
    /// premulsum's scalar as bits of `dtype` (unused by other operators).
    pub scalar: u64,
    pub counts: Counts,
    pub root: usize,
    pub nranks: usize,
    /// This rank's buffers' layout.
    pub layout: Layout,
}

/// Where bytes of a rank lie: (physical buffer 0..2, byte offset).
pub type At = (usize, usize);

/// How the harness reaches a rank's buffers.
pub enum Data<'a> {
    /// Host memory: filled, poisoned and checked in place.
    Host(&'a mut [HostBuf; 3]),
    /// Device memory: filled, poisoned and checked by kernels.
    Device(&'a mut dyn DeviceData),
}

/// What a device rank does to its buffers for the checks (`kernels/data.cu`).
/// `gen` and `expect` are the bytes of the kernels' `CbGen` and `CbExpect`.
pub trait DeviceData {
    /// Uploads an operation's input tables; returns their device address
    /// for `CbGen::words`. Each call's tables (a group's members') stay
    /// until the next operation is loaded.
    fn upload_words(&mut self, words: &[u64]) -> Result<u64, ExecError>;
    fn poison(&mut self, at: At, count: usize) -> Result<(), ExecError>;
    fn fill(&mut self, gen: &[u8], rank: u32, at: At, count: usize) -> Result<(), ExecError>;
    /// `cb_verify`'s counters (wrong, nan, first) over `count` elements, and
    /// the bits of the first wrong element when there is one.
    fn verify(
        &mut self,
        gen: &[u8],
        expect: &[u8],
        at: At,
        count: usize,
    ) -> Result<([u64; 3], Option<u64>), ExecError>;
    fn read(&mut self, at: At, bytes: usize) -> Result<Vec<u8>, ExecError>;
    fn write(&mut self, at: At, bytes: &[u8]) -> Result<(), ExecError>;
}

/// One rank's side of an executor.
pub trait RankRunner: Send {
    fn rank(&self) -> usize;
    /// Elements per pipeline chunk for `dtype` (the step size programs are cut into).
    fn chunk_elems(&self, dtype: Dtype) -> usize;
    /// How many blocks (channels of a program) a rank should use when the
    /// user did not say: what keeps the device busy without oversubscribing it.
    fn auto_blocks(&mut self, dtype: Dtype, op: ReduceOp) -> Result<usize, ExecError> {
        let _ = (dtype, op);
        Ok(1)
    }
    /// Makes `program` the operation [`RankRunner::launch`] runs.
    fn load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError>;
    /// The checks [`RankRunner::load`] makes of `program` before it changes
    /// anything (that its blocks can all be resident at once, its tables
    /// fit): run before the sweep's first launch, so a layout that cannot
    /// run is refused before any row rather than midway.
    fn check_load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        let _ = (op, program);
        Ok(())
    }
    /// Whether [`RankRunner::check_load`] checks anything (else the
    /// programs are not generated ahead for it).
    fn checks_load(&self) -> bool {
        false
    }
    /// Makes a library's collectives (`--engine nccl`) the operation
    /// [`RankRunner::launch`] runs, on the same buffers: one, or a group's
    /// (issued between the library's group start and end).
    fn load_library(&mut self, ops: &[OpDesc], engine: Engine) -> Result<(), ExecError> {
        let _ = ops;
        Err(ExecError::Setup(format!(
            "--engine {} runs on the CUDA engine only (--device cuda, or cuda-emu for its stand-in)",
            engine.name()
        )))
    }
    /// Starts one operation (the host runs it to completion here).
    fn launch(&mut self) -> Result<(), ExecError>;
    /// Whether [`RankRunner::launch`] returns only once the operation
    /// completed (then the harness records completions right away).
    fn completes_on_launch(&self) -> bool {
        false
    }
    /// Captures `n` operations as a graph for [`RankRunner::launch_graph`],
    /// before the barrier that precedes the timed loop (capturing may
    /// allocate, which must not happen while peers wait on this rank).
    fn prepare_graph(&mut self, n: usize) -> Result<(), ExecError> {
        let _ = n;
        Ok(())
    }
    /// Starts `n` operations as one captured graph (`--graph`).
    fn launch_graph(&mut self, n: usize) -> Result<(), ExecError> {
        (0..n).try_for_each(|_| self.launch())
    }
    /// Waits until every started operation completed; returns the
    /// nanoseconds of each one started since the last wait (a graph's
    /// operations share its time evenly). `done(k)` is called as the
    /// `k`-th of them is seen complete, in order, also when the wait fails.
    fn wait(&mut self, done: &mut dyn FnMut(usize)) -> Result<Vec<u64>, ExecError>;
    fn data(&mut self) -> Data<'_>;
    /// What the operations since the last call measured of this rank's
    /// incoming links (`--links`; empty where the executor does not measure).
    fn take_links(&mut self) -> Vec<LinkSample> {
        Vec::new()
    }
}

/// The host executor's rank: a thread that runs each operation as it starts.
pub struct HostRank {
    exec: RankExec,
    world: Arc<HostWorld>,
    /// Views of memory the world owns: peers read it directly, so it is
    /// freed with the world (once every rank has stopped), not with this rank.
    bufs: [HostBuf; 3],
    compiled: Option<Compiled>,
    times: Vec<u64>,
}

impl HostRank {
    pub fn new(
        exec: RankExec,
        world: Arc<HostWorld>,
        bytes: [usize; 3],
    ) -> Result<HostRank, ExecError> {
        let bufs = world.buffers(exec.rank(), bytes)?;
        Ok(HostRank {
            exec,
            world,
            bufs,
            compiled: None,
            times: Vec::new(),
        })
    }
}

impl RankRunner for HostRank {
    fn rank(&self) -> usize {
        self.exec.rank()
    }

    fn chunk_elems(&self, dtype: Dtype) -> usize {
        self.world.chunk_elems(dtype)
    }

    fn load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        self.compiled = Some(Compiled::new(
            &self.world,
            program,
            op.layout,
            op.dtype,
            op.op,
            op.scalar,
        )?);
        Ok(())
    }

    fn launch(&mut self) -> Result<(), ExecError> {
        let c = self
            .compiled
            .as_ref()
            .ok_or_else(|| ExecError::Setup("no operation loaded".into()))?;
        let t = Instant::now();
        let rb = RankBufs {
            bufs: [&self.bufs[0], &self.bufs[1], &self.bufs[2]],
        };
        self.exec.run(c, &rb)?;
        self.times.push(t.elapsed().as_nanos() as u64);
        Ok(())
    }

    fn completes_on_launch(&self) -> bool {
        true
    }

    fn wait(&mut self, done: &mut dyn FnMut(usize)) -> Result<Vec<u64>, ExecError> {
        let times = std::mem::take(&mut self.times);
        (0..times.len()).for_each(&mut *done);
        Ok(times)
    }

    fn data(&mut self) -> Data<'_> {
        Data::Host(&mut self.bufs)
    }

    fn take_links(&mut self) -> Vec<LinkSample> {
        self.exec.take_links()
    }
}
