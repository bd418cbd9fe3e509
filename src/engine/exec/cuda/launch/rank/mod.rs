//! One rank of a CUDA world: its operation loaded (tables uploaded, the
//! residency checked), launched on its stream between events, and waited
//! for while the recorder is fed the kernels' progress.

mod copies;
mod library;
mod load;
mod wait;

use super::{dev_err, CudaWorld, Kind, Owned, Timing};
use crate::engine::algo::Program;
use crate::engine::exec::cuda::abi::{
    as_bytes, CbLink, CbProgress, CbRank, Proto, RankTables, PROTO_SYS,
};
use crate::engine::exec::cuda::dev::{DevPtr, Device, EventId, FuncId, GraphId, Mapped, StreamId};
use crate::engine::exec::cuda::kernels::Variant;
use crate::engine::exec::runner::{At, Data, OpDesc, RankRunner};
use crate::engine::exec::world::{ExecError, MAX_CHANNELS};
use crate::engine::observe::{LinkSample, Observer, WaitKind};
use crate::engine::types::{Dtype, Engine, ReduceOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The loaded operation of a rank.
pub(super) struct Loaded {
    pub(super) variant: Variant,
    pub(super) coll_fn: FuncId,
    pub(super) arg: CbRank,
    /// Blocks launched: up to the last channel with a step (a small message
    /// leaves the channels after it empty, and their blocks would only cost
    /// launch time).
    pub(super) grid: u32,
    /// Threads per block of the launch ([`load::launch_width`]).
    pub(super) threads: u32,
    pub(super) step_counts: Vec<usize>,
    /// Primitive names of every step, per channel (for timeout messages).
    pub(super) prims: Vec<Vec<&'static str>>,
    /// A library's collectives (`--engine nccl`) instead of the kernel:
    /// one, or a group's in issue order (empty: the kernel).
    pub(super) lib: Vec<super::library::LibOp>,
    /// The device's copies instead of the kernel: the program only copies
    /// within the rank (none: in place, a lone rank has nothing to move).
    pub(super) copies: Option<Vec<copies::DevCopy>>,
}

/// Where the kernel counts what it measures of each incoming connection.
pub(super) struct LinkRecords {
    at: DevPtr,
    from: Vec<usize>,
    pace: Vec<u64>,
}

impl LinkRecords {
    /// The records as uploaded: zero counts, each connection's pace.
    fn fresh(&self) -> Vec<CbLink> {
        self.pace
            .iter()
            .map(|&pace| CbLink {
                pace,
                ..CbLink::default()
            })
            .collect()
    }
}

/// What a launched operation is waiting to report.
pub(super) enum Pending {
    Timed(EventId, EventId),
    /// Timed by the host clock (`--timing wall`); an event marks its end all
    /// the same, so the flight recorder sees each completion as it happens
    /// (a hang's dumps must not blame operations that completed).
    Untimed(EventId),
    Graph(EventId, EventId, usize),
    /// Ran to completion when started, in this many nanoseconds.
    Done(u64),
}

/// One rank of a CUDA world.
pub struct CudaRank {
    pub(super) world: Arc<CudaWorld>,
    pub(super) rank: usize,
    pub(super) di: usize,
    pub(super) dev: Arc<dyn Device>,
    pub(super) stream: StreamId,
    pub(super) bufs: [DevPtr; 3],
    pub(super) sizes: [usize; 3],
    pub(super) progress: Mapped,
    pub(super) observer: Arc<dyn Observer>,
    /// 256 bytes for verdict counters.
    pub(super) small: DevPtr,
    /// Grow-only device regions (address, capacity) for the input tables
    /// of the loaded operation's members, one each (`words_used` of them
    /// taken since it was loaded), and for programs.
    pub(super) words: Vec<(DevPtr, usize)>,
    pub(super) words_used: usize,
    /// Operations loaded with the protocol agreed on (each a round of
    /// [`super::agree`]).
    pub(super) rounds: u64,
    /// Grow-only device region for NCCL's copy of an in-place input.
    pub(super) stage: (DevPtr, usize),
    pub(super) tables: (DevPtr, usize),
    pub(super) loaded: Option<Loaded>,
    /// Free events, reused.
    pub(super) events: Vec<EventId>,
    pub(super) pending: Vec<Pending>,
    pub(super) wall_start: Option<Instant>,
    /// The captured graph of the loaded operation and how many operations it holds.
    pub(super) graph: Option<(GraphId, usize)>,
    /// `--links` (or a slowed link): where the loaded program's kernel
    /// counts what it measures of each incoming connection.
    pub(super) link_records: Option<LinkRecords>,
}

impl CudaRank {
    /// A device region of at least `bytes` (grow-only; old ones are freed with the world).
    pub(super) fn region(
        &self,
        r: (DevPtr, usize),
        bytes: usize,
    ) -> Result<(DevPtr, usize), ExecError> {
        if r.1 >= bytes && r.0 != 0 {
            return Ok(r);
        }
        let cap = bytes.next_power_of_two().max(4096);
        let p = self.dev.alloc(cap).map_err(dev_err)?;
        self.world.own(self.di, Owned::Dev(p));
        Ok((p, cap))
    }

    fn event(&mut self) -> Result<EventId, ExecError> {
        match self.events.pop() {
            Some(e) => Ok(e),
            None => self.dev.event().map_err(dev_err),
        }
    }

    fn loaded(&self) -> Result<&Loaded, ExecError> {
        self.loaded
            .as_ref()
            .ok_or_else(|| ExecError::Setup("no operation loaded".into()))
    }

    /// Grid for a data kernel over `count` elements.
    pub(super) fn data_grid(&self, count: usize) -> (u32, u32) {
        // On the emulated device, as wide as COLLBENCH_EMU_THREADS (the
        // world's width there: 1 unless set) up to 8: every launch starts
        // its blocks' threads anew, and the data kernels' width is tested
        // on its own (tests/kernels_emu_data.rs).
        let threads = match self.world.kind {
            Kind::Emu => self.world.opts.threads.clamp(1, 8),
            Kind::Cuda => 256,
        };
        // At most one block per SM: data kernels never crowd out the
        // collective's blocks.
        let max = match self.world.kind {
            Kind::Emu => 4,
            Kind::Cuda => self.dev.desc().multiprocessors.max(1),
        };
        let blocks = count.div_ceil(threads as usize).clamp(1, max as usize) as u32;
        (blocks, threads)
    }

    pub(super) fn data_fn(&self, name: &str) -> Result<(FuncId, Dtype), ExecError> {
        let l = self.loaded()?;
        let f = self.dev.function(l.variant, name).map_err(dev_err)?;
        Ok((f, l.variant.dtype))
    }

    pub(super) fn addr(&self, at: At) -> Result<DevPtr, ExecError> {
        let (b, off) = at;
        if b > 2 || off > self.sizes[b] {
            return Err(ExecError::Setup(format!(
                "buffer {b} offset {off} is outside the rank's buffers"
            )));
        }
        Ok(self.bufs[b] + off as u64)
    }

    /// Whether the loaded operation enqueues no work at all (a lone rank's
    /// in-place copy).
    fn moves_nothing(&self) -> bool {
        self.loaded
            .as_ref()
            .and_then(|l| l.copies.as_ref())
            .is_some_and(Vec::is_empty)
    }

    /// Starts the loaded operation on the stream (one kernel, or NCCL's
    /// collective), counted by the recorder.
    fn launch_one(&mut self) -> Result<(), ExecError> {
        self.observer.begin(&self.loaded()?.step_counts);
        self.enqueue_op()
    }

    /// Enqueues the loaded operation (also into a graph being captured).
    fn enqueue_op(&mut self) -> Result<(), ExecError> {
        let l = self.loaded()?;
        if !l.lib.is_empty() {
            let (world, libs) = (Arc::clone(&self.world), l.lib.clone());
            return match world.library.as_ref() {
                Some(super::library::Library::Nccl(comms)) => self.enqueue_nccl(comms, &libs),
                _ => Err(ExecError::Setup("no NCCL in this world".into())),
            };
        }
        if let Some(copies) = &l.copies {
            for c in copies {
                self.dev
                    .copy(self.stream, c.dst, c.src, c.bytes)
                    .map_err(dev_err)?;
            }
            return Ok(());
        }
        let (f, grid, threads, arg) = (l.coll_fn, l.grid, l.threads, l.arg);
        self.dev
            .launch(f, grid, threads, self.stream, &[as_bytes(&[arg])])
            .map_err(dev_err)
    }
}

impl RankRunner for CudaRank {
    fn take_links(&mut self) -> Vec<LinkSample> {
        let Some(r) = &self.link_records else {
            return Vec::new();
        };
        let mut got = vec![CbLink::default(); r.from.len()];
        let bytes = std::mem::size_of_val(got.as_slice());
        // SAFETY: CbLink is plain old data; `got` is `bytes` long.
        let raw = unsafe { std::slice::from_raw_parts_mut(got.as_mut_ptr() as *mut u8, bytes) };
        let read = self.dev.download(self.stream, raw, r.at);
        let reset = self.dev.upload(self.stream, r.at, as_bytes(&r.fresh()));
        if let Err(e) = read.and(reset) {
            tracing::warn!(rank = self.rank, error = %e, "link records not read");
            return Vec::new();
        }
        let mut out: Vec<LinkSample> = Vec::new();
        for (l, &from) in got.iter().zip(&r.from) {
            let s = LinkSample::of(&mut out, from, self.rank);
            s.bytes += l.bytes;
            s.wait_ns += l.wait_ns;
            s.transfer_ns += l.transfer_ns;
        }
        for s in &mut out {
            if s.transfer_ns > 0 {
                s.op_gbps.push(s.bytes as f64 / s.transfer_ns as f64);
            }
        }
        out.retain(|s| s.bytes > 0);
        out
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn chunk_elems(&self, dtype: Dtype) -> usize {
        let shape = self.world.opts.shape;
        let bytes = match self.world.opts.proto {
            Some(Proto::LowLatency) => shape.ll_max_bytes().min(shape.slot_bytes),
            Some(Proto::LowLatency128) => shape.ll128_max_bytes().min(shape.slot_bytes),
            _ => shape.slot_bytes,
        };
        (bytes / dtype.size()).max(1)
    }

    fn auto_blocks(&mut self, dtype: Dtype, op: ReduceOp) -> Result<usize, ExecError> {
        // Every rank must cut its program into the same channels: the
        // world decides once, for its most crowded device.
        self.world.auto_blocks(Variant { dtype, op })
    }

    fn load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        self.words_used = 0;
        self.load_kernel(op, program)
    }

    fn check_load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        self.check_kernel(op, program).map(|_| ())
    }

    fn checks_load(&self) -> bool {
        true
    }

    fn load_library(&mut self, ops: &[OpDesc], engine: Engine) -> Result<(), ExecError> {
        self.words_used = 0;
        let Some(op) = ops.first() else {
            return Err(ExecError::Setup("no library operation to load".into()));
        };
        if engine != Engine::Nccl || self.world.library.is_none() {
            return Err(ExecError::Setup(format!(
                "--engine {} is not available on this executor",
                engine.name()
            )));
        }
        if let Some((g, _)) = self.graph.take() {
            self.dev.drop_graph(g).map_err(dev_err)?;
        }
        let variant = Variant {
            dtype: op.dtype,
            op: op.op,
        };
        let libs: Vec<super::library::LibOp> = ops.iter().map(super::library::LibOp::new).collect();
        // The library's operations may use whole buffers.
        for &b in &self.bufs {
            self.dev.fence(b, usize::MAX);
        }
        let staged = super::library::stage_bytes(&libs, self.rank);
        if staged > 0 && self.world.kind == Kind::Cuda {
            // Allocated now, before the case's barriers, never mid-loop.
            self.stage = self.region(self.stage, staged)?;
        }
        // The data kernels of the variant fill and check NCCL's buffers too.
        let coll_fn = self
            .dev
            .function(variant, "cb_collective")
            .map_err(dev_err)?;
        self.link_records = None;
        self.loaded = Some(Loaded {
            variant,
            coll_fn,
            arg: CbRank::default(),
            grid: 1,
            threads: self.world.opts.threads,
            step_counts: Vec::new(),
            prims: Vec::new(),
            lib: libs,
            copies: None,
        });
        Ok(())
    }

    /// NCCL's stand-in on the emulated device computes each collective on
    /// the host as it is launched; everything else is queued on the stream.
    fn completes_on_launch(&self) -> bool {
        matches!(self.world.kind, Kind::Emu)
            && self.loaded.as_ref().is_some_and(|l| !l.lib.is_empty())
    }

    fn launch(&mut self) -> Result<(), ExecError> {
        if let (false, Kind::Emu) = (self.loaded()?.lib.is_empty(), self.world.kind) {
            let libs = self.loaded()?.lib.clone();
            return self.stand_in_op(&libs);
        }
        if self.world.opts.timing == Timing::Wall {
            self.wall_start.get_or_insert_with(Instant::now);
            self.launch_one()?;
            let end = self.event()?;
            self.dev.record(end, self.stream).map_err(dev_err)?;
            self.pending.push(Pending::Untimed(end));
            return Ok(());
        }
        let (a, b) = (self.event()?, self.event()?);
        self.dev.record(a, self.stream).map_err(dev_err)?;
        self.launch_one()?;
        self.dev.record(b, self.stream).map_err(dev_err)?;
        self.pending.push(Pending::Timed(a, b));
        Ok(())
    }

    fn prepare_graph(&mut self, n: usize) -> Result<(), ExecError> {
        if let (false, Kind::Emu) = (self.loaded()?.lib.is_empty(), self.world.kind) {
            return Ok(());
        }
        if matches!(self.graph, Some((_, m)) if m == n) || self.moves_nothing() {
            // An operation with nothing to enqueue has no graph to capture.
            return Ok(());
        }
        if let Some((g, _)) = self.graph.take() {
            self.dev.drop_graph(g).map_err(dev_err)?;
        }
        self.dev.begin_capture(self.stream).map_err(dev_err)?;
        let mut captured = Ok(());
        for _ in 0..n {
            captured = self.enqueue_op();
            if captured.is_err() {
                break;
            }
        }
        let g = self.dev.end_capture(self.stream);
        captured?;
        self.graph = Some((g.map_err(dev_err)?, n));
        Ok(())
    }

    fn launch_graph(&mut self, n: usize) -> Result<(), ExecError> {
        if let (false, Kind::Emu) = (self.loaded()?.lib.is_empty(), self.world.kind) {
            // The stand-in runs on the host: nothing to capture.
            return (0..n).try_for_each(|_| self.launch());
        }
        self.prepare_graph(n)?;
        let graph = match self.graph {
            Some((g, _)) => Some(g),
            None if self.moves_nothing() => None,
            None => return Err(ExecError::Setup("no captured graph".into())),
        };
        self.observer.begin(&self.loaded()?.step_counts);
        let (a, b) = (self.event()?, self.event()?);
        self.wall_start.get_or_insert_with(Instant::now);
        self.dev.record(a, self.stream).map_err(dev_err)?;
        if let Some(graph) = graph {
            self.dev.launch_graph(graph, self.stream).map_err(dev_err)?;
        }
        self.dev.record(b, self.stream).map_err(dev_err)?;
        self.pending.push(Pending::Graph(a, b, n));
        Ok(())
    }

    fn wait(&mut self, done: &mut dyn FnMut(usize)) -> Result<Vec<u64>, ExecError> {
        self.wait_pending(done)
    }

    fn data(&mut self) -> Data<'_> {
        Data::Device(self)
    }
}

impl Drop for CudaRank {
    fn drop(&mut self) {
        // Finish whatever is queued; memory goes with the world. Kernels
        // still running when a rank gives up would wait for it: stop them.
        if !self.pending.is_empty() || !self.dev.done(self.stream).unwrap_or(true) {
            self.world.status.stop();
        }
        let _ = self.dev.sync(self.stream);
        if let Some((g, _)) = self.graph.take() {
            let _ = self.dev.drop_graph(g);
        }
    }
}
