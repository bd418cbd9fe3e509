//! One rank of a CUDA world: its operation loaded (tables uploaded, the
//! residency checked), launched on its stream between events, and waited
//! for while the recorder is fed the kernels' progress.

mod copies;
mod library;

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
    /// Threads per block of the launch ([`launch_width`]).
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

/// Reports every pending operation before index `until` not reported yet
/// (a graph counts as its operations).
fn report_through(
    pending: &[Pending],
    next: &mut usize,
    reported: &mut usize,
    until: usize,
    done: &mut dyn FnMut(usize),
) {
    while *next < until.min(pending.len()) {
        let n = match pending[*next] {
            Pending::Graph(_, _, n) => n,
            _ => 1,
        };
        for _ in 0..n {
            done(*reported);
            *reported += 1;
        }
        *next += 1;
    }
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
    /// Grow-only device regions (address, capacity) for input tables and programs.
    pub(super) words: (DevPtr, usize),
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

/// `--protocol auto` runs LL128 for operations of at most this many bytes
/// per rank (the larger of its buffers) whose steps outgrow the
/// low-latency slot, simple above: NCCL's order of protocols by size. The
/// crossover is a GPU's to measure (`scripts/gpu-acceptance.sh`).
const LL128_AUTO_MAX: usize = 4 << 20;

/// Threads per block for an operation under `proto` whose largest message
/// step moves `message_bytes` and largest local step (no peer)
/// `local_bytes`. The line protocols give each thread its own lines (LL: 8
/// payload bytes a thread; LL128: a 16-byte part of a 120-byte line), and
/// a local step moves 16-byte vectors, one a thread at a time: a small
/// operation keeps a few warps busy and leaves the rest of a full block
/// only to wait at every step's barriers, which cost more the more warps
/// they hold (on an H100, 8 ranks at 8 B took 16.1 us with 512 threads,
/// 15.3 with 256). Such an operation launches as many threads as its
/// largest step has lines or vectors, in whole warps; the simple
/// protocol's copies want every thread. `COLLBENCH_CUDA_THREADS` fixes the
/// width.
fn launch_width(
    opts: &super::CudaOptions,
    proto: Proto,
    message_bytes: usize,
    local_bytes: usize,
) -> u32 {
    let lines = match proto {
        _ if !opts.narrow => return opts.threads,
        Proto::Simple => return opts.threads,
        Proto::LowLatency => message_bytes.div_ceil(8),
        Proto::LowLatency128 => message_bytes.div_ceil(120) * 8,
    };
    let threads = lines.max(local_bytes.div_ceil(16));
    let warps = threads.div_ceil(32).max(1);
    u32::try_from(warps * 32).map_or(opts.threads, |w| w.min(opts.threads))
}

/// The larger of an operation's buffers, in bytes.
fn op_bytes(op: &OpDesc) -> usize {
    op.counts.send.max(op.counts.recv) * op.dtype.size()
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

    /// Refuses a layout whose blocks cannot all be resident at once.
    fn check_residency(&self, f: FuncId, nchannels: usize) -> Result<(), ExecError> {
        let threads = self.world.opts.threads;
        let per_sm = self.dev.occupancy(f, threads).map_err(dev_err)?;
        let desc = self.dev.desc();
        let here = self.world.load[self.di];
        let need = here * nchannels;
        let cap = desc.multiprocessors as usize * per_sm as usize;
        tracing::debug!(
            rank = self.rank,
            ordinal = desc.ordinal,
            ranks_on_device = here,
            channels = nchannels,
            need_blocks = need,
            sms = desc.multiprocessors,
            blocks_per_sm = per_sm,
            threads,
            cap_blocks = cap,
            fits = need <= cap,
            "residency check"
        );
        if need > cap {
            let emu = self.world.kind == Kind::Emu;
            return Err(ExecError::Setup(format!(
                "{here} rank(s) x {nchannels} channel(s) = {need} blocks must be resident at once on GPU {} ({}), but it holds {} SMs x {per_sm} blocks{} = {cap}: lower --ranks or --channels{}",
                desc.ordinal,
                desc.name,
                desc.multiprocessors,
                if emu { String::new() } else { format!(" of {threads} threads") },
                if emu { " (or raise COLLBENCH_EMU_SMS / COLLBENCH_EMU_BLOCKS_PER_SM)" } else { "" }
            )));
        }
        Ok(())
    }

    /// Uploads the rank's tables; returns the kernel's argument.
    fn upload_tables(
        &mut self,
        t: &RankTables,
        nranks: usize,
        op_bytes: usize,
    ) -> Result<(CbRank, Proto), ExecError> {
        let mut ins = Vec::with_capacity(t.ins.len());
        let mut outs = Vec::with_capacity(t.outs.len());
        for (keys, list) in [(&t.ins, &mut ins), (&t.outs, &mut outs)] {
            for &k in keys.iter() {
                let base = self.world.conn(k)?;
                list.push(self.world.opts.shape.conn(base, k, self.rank));
            }
        }
        let mut blob: Vec<u8> = Vec::new();
        let mut put = |bytes: &[u8]| {
            let at = blob.len();
            blob.extend_from_slice(bytes);
            blob.resize(blob.len().next_multiple_of(16), 0);
            at as u64
        };
        let steps = put(as_bytes(&t.steps));
        let chan = put(as_bytes(&t.chan_start));
        let ins_at = put(as_bytes(&ins));
        let outs_at = put(as_bytes(&outs));
        let host = self.world.host.options();
        let pace: Vec<u64> = t
            .ins
            .iter()
            .map(|k| (host.pace.factor(k.from, k.to) * 1000.0).round() as u64)
            .collect();
        let mut records =
            (host.link_timing || pace.iter().any(|&p| p > 1000)).then(|| LinkRecords {
                at: 0,
                from: t.ins.iter().map(|k| k.from).collect(),
                pace,
            });
        let links_at = records.as_ref().map(|r| put(as_bytes(&r.fresh())));
        self.tables = self.region(self.tables, blob.len())?;
        let base = self.tables.0;
        self.dev.upload(self.stream, base, &blob).map_err(dev_err)?;
        if let (Some(r), Some(at)) = (records.as_mut(), links_at) {
            r.at = base + at;
        }
        self.link_records = records;
        let ll_max = self.world.opts.shape.ll_max_bytes();
        let ll128_max = self.world.opts.shape.ll128_max_bytes();
        let (proto, why) = match self.world.opts.proto {
            Some(p) => (p, "asked for"),
            None if t.max_step_bytes <= ll_max => {
                (Proto::LowLatency, "every step fits the low-latency slot")
            }
            // LL128 only where connections are the GPU's own memory (see
            // `CudaWorld::open`).
            None if !self.world.staged
                && op_bytes <= LL128_AUTO_MAX
                && t.max_step_bytes <= ll128_max =>
            {
                (
                    Proto::LowLatency128,
                    "a step exceeds the low-latency slot; the operation is at most 4 MiB (LL128)",
                )
            }
            None if self.world.staged => (
                Proto::Simple,
                "a step exceeds the low-latency slot; connections between GPUs or processes take no LL128",
            ),
            None => (
                Proto::Simple,
                "a step exceeds the low-latency slot; the operation exceeds 4 MiB",
            ),
        };
        tracing::debug!(
            rank = self.rank,
            proto = ?proto,
            max_step_bytes = t.max_step_bytes,
            ll_max_bytes = ll_max,
            system_scope = self.world.staged,
            why,
            "protocol"
        );
        let arg = CbRank {
            steps: base + steps,
            chan_start: base + chan,
            ins: base + ins_at,
            outs: base + outs_at,
            bufs: self.bufs,
            progress: self.progress.dev,
            status: self.world.status.dev(self.di),
            links: self.link_records.as_ref().map_or(0, |r| r.at),
            timeout_ns: self.world.opts.timeout.as_nanos().min(u64::MAX as u128) as u64,
            rank: self.rank as u32,
            nranks: nranks as u32,
            proto: proto as u32 | if self.world.staged { PROTO_SYS } else { 0 },
            nchannels: t.nchannels() as u32,
            scalar: 0,
        };
        Ok((arg, proto))
    }

    /// Grid for a data kernel over `count` elements.
    pub(super) fn data_grid(&self, count: usize) -> (u32, u32) {
        let threads = if self.world.kind == Kind::Emu { 1 } else { 256 };
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

    /// Polls the stream until done: feeds the recorder the kernels'
    /// progress, and stops the kernels when the world aborts.
    fn drain(&self, tick: &mut dyn FnMut(&Self) -> Result<(), ExecError>) -> Result<(), ExecError> {
        let start = Instant::now();
        let mut last_look = Instant::now();
        let mut seen = [u64::MAX; MAX_CHANNELS];
        let nch = self
            .loaded
            .as_ref()
            .map_or(0, |l| l.step_counts.len())
            .min(MAX_CHANNELS);
        // NCCL's kernels do not read our status record: past the timeout,
        // or when the run stops, its communicators are aborted instead.
        let nccl = match (
            self.loaded.as_ref().and_then(|l| l.lib.first().copied()),
            &self.world.library,
        ) {
            (Some(lib), Some(super::library::Library::Nccl(comms))) => Some((lib, comms)),
            _ => None,
        };
        let mut failed: Option<(ExecError, Instant)> = None;
        loop {
            if self.dev.done(self.stream).map_err(dev_err)? {
                return failed.map_or(Ok(()), |(e, _)| Err(e));
            }
            tick(self)?;
            // A rank of another GPU of this process gave up: only the
            // host carries that to this GPU's kernels.
            if self.world.host.aborted() || self.world.status.gave_up() {
                self.world.status.stop();
            }
            if let (Some((lib, comms)), None) = (nccl, &failed) {
                let waited = start.elapsed();
                if self.world.host.aborted() || waited >= self.world.opts.timeout {
                    comms.abort();
                    let e = if self.world.host.aborted() {
                        ExecError::Aborted
                    } else {
                        ExecError::CollectiveTimeout {
                            rank: self.rank,
                            collective: if self.loaded.as_ref().is_some_and(|l| l.lib.len() > 1) {
                                "group"
                            } else {
                                lib.coll().name()
                            },
                            call: "NCCL",
                            waited,
                        }
                    };
                    failed = Some((e, Instant::now()));
                }
            }
            if let Some((_, since)) = &failed {
                if since.elapsed() > Duration::from_secs(10) {
                    // The aborted operations did not drain: give up waiting.
                    return failed.map_or(Ok(()), |(e, _)| Err(e));
                }
            }
            if last_look.elapsed() >= Duration::from_millis(5) {
                last_look = Instant::now();
                self.observe(&mut seen[..nch]);
            }
            if start.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn observe(&self, seen: &mut [u64]) {
        let p = self.progress.host as *const CbProgress;
        for (ch, last) in seen.iter_mut().enumerate() {
            // SAFETY: `progress` holds MAX_CHANNELS records; kernels store
            // them with volatile system-scope stores.
            let rec = unsafe { std::ptr::read_volatile(p.add(ch)) };
            if rec.step != *last && rec.step > 0 {
                *last = rec.step;
                self.observer.step_done(ch, rec.step as usize - 1);
            }
            if rec.wait_on != 0 {
                let peer = ((rec.wait_on - 1) & 0xFFFF_FFFF) as usize;
                let kind = if rec.wait_on >> 32 != 0 {
                    WaitKind::Send
                } else {
                    WaitKind::Recv
                };
                self.observer.waiting(ch, peer, kind);
            }
        }
    }

    /// The error the kernels' status record stands for, if they stopped.
    fn stopped(&self) -> Option<ExecError> {
        let mut s = self.world.status.read(self.di);
        if s.abort == 0 {
            return self.world.status.stopping().then_some(ExecError::Aborted);
        }
        // 1: the rank that gave up is still writing its record.
        let t = Instant::now();
        while s.abort == 1 && t.elapsed() < Duration::from_millis(200) {
            std::thread::yield_now();
            s = self.world.status.read(self.di);
        }
        if s.abort != 2 {
            return Some(ExecError::Aborted);
        }
        if s.rank != self.rank as u64 {
            return Some(ExecError::Aborted);
        }
        let (channel, step) = (s.channel as usize, s.step as usize);
        let prim = self
            .loaded
            .as_ref()
            .and_then(|l| l.prims.get(channel)?.get(step).copied())
            .unwrap_or("step");
        Some(ExecError::Timeout {
            rank: self.rank,
            channel,
            step,
            prim,
            what: if s.kind == 2 {
                "send to"
            } else {
                "receive from"
            },
            peer: s.peer as usize,
            waited: Duration::from_nanos(s.waited_ns),
        })
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
        if let Some((g, _)) = self.graph.take() {
            self.dev.drop_graph(g).map_err(dev_err)?;
        }
        let premul = op.op == crate::engine::types::ReduceOp::PreMulSum;
        let t = RankTables::new(program, &op.layout, op.dtype, premul)
            .map_err(|e| ExecError::Setup(e.to_string()))?;
        if let Some(i) = (0..3).find(|&i| self.sizes[i] < t.need[i]) {
            return Err(ExecError::Setup(format!(
                "buffer {i} holds {} bytes; the program needs {}",
                self.sizes[i], t.need[i]
            )));
        }
        if t.max_step_bytes > self.world.opts.shape.slot_bytes {
            return Err(ExecError::Setup(format!(
                "a step of {} bytes exceeds the {}-byte connection slot",
                t.max_step_bytes, self.world.opts.shape.slot_bytes
            )));
        }
        if self.world.opts.proto == Some(Proto::LowLatency128)
            && t.max_step_bytes > self.world.opts.shape.ll128_max_bytes()
        {
            return Err(ExecError::Setup(format!(
                "--protocol ll128: a step of {} bytes exceeds the {}-byte LL128 slot payload",
                t.max_step_bytes,
                self.world.opts.shape.ll128_max_bytes()
            )));
        }
        if self.world.opts.proto == Some(Proto::LowLatency)
            && t.max_step_bytes > self.world.opts.shape.ll_max_bytes()
        {
            return Err(ExecError::Setup(format!(
                "--protocol ll: a step of {} bytes exceeds the {}-byte low-latency slot payload",
                t.max_step_bytes,
                self.world.opts.shape.ll_max_bytes()
            )));
        }
        if t.nchannels() > MAX_CHANNELS {
            return Err(ExecError::Setup(format!(
                "{} channels; at most {MAX_CHANNELS}",
                t.nchannels()
            )));
        }
        let variant = Variant {
            dtype: op.dtype,
            op: op.op,
        };
        let coll_fn = self
            .dev
            .function(variant, "cb_collective")
            .map_err(dev_err)?;
        tracing::debug!(
            rank = self.rank,
            %variant,
            channels = t.nchannels(),
            steps = t.steps.len(),
            ins = t.ins.len(),
            outs = t.outs.len(),
            "program loaded for the kernel"
        );
        self.check_residency(coll_fn, t.nchannels())?;
        let (arg, proto) = self.upload_tables(&t, op.nranks, op_bytes(op))?;
        let arg = CbRank {
            scalar: op.scalar,
            ..arg
        };
        let threads = launch_width(&self.world.opts, proto, t.max_step_bytes, t.max_local_bytes);
        tracing::debug!(
            rank = self.rank,
            threads,
            most = self.world.opts.threads,
            max_step_bytes = t.max_step_bytes,
            max_local_bytes = t.max_local_bytes,
            "threads per block"
        );
        let step_counts: Vec<usize> = program.channels.iter().map(|c| c.steps.len()).collect();
        let grid = step_counts
            .iter()
            .rposition(|&n| n > 0)
            .map_or(1, |c| c + 1) as u32;
        let prims = program
            .channels
            .iter()
            .map(|c| c.steps.iter().map(|s| s.prim.name()).collect())
            .collect();
        let copies = if self.world.opts.kernel_copies {
            None
        } else {
            copies::plan(program, &op.layout, op.dtype, op.op, &self.bufs)
        };
        // The recorder follows the kernel's channels; device copies have none.
        let step_counts = if copies.is_some() {
            Vec::new()
        } else {
            step_counts
        };
        if let Some(c) = &copies {
            tracing::debug!(
                rank = self.rank,
                copies = c.len(),
                bytes = c.iter().map(|c| c.bytes).sum::<usize>(),
                "the program only copies within the rank: device copies instead of the kernel"
            );
        }
        self.loaded = Some(Loaded {
            variant,
            coll_fn,
            arg,
            grid,
            threads,
            step_counts,
            prims,
            lib: Vec::new(),
            copies,
        });
        Ok(())
    }

    fn load_library(&mut self, ops: &[OpDesc], engine: Engine) -> Result<(), ExecError> {
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
        let pending = std::mem::take(&mut self.pending);
        let (mut next, mut reported) = (0, 0);
        // Reports operations whose end event completed while no rank had
        // given up (event first, status second: then the operation ended
        // before any abort, so it really completed).
        let mut tick = |me: &Self| -> Result<(), ExecError> {
            let mut k = next;
            while let Some(p) = pending.get(k) {
                let end = match *p {
                    Pending::Timed(_, b) | Pending::Graph(_, b, _) | Pending::Untimed(b) => b,
                    Pending::Done(_) => {
                        // Completed when started.
                        k += 1;
                        report_through(&pending, &mut next, &mut reported, k, done);
                        continue;
                    }
                };
                if !me.dev.event_done(end).map_err(dev_err)? || me.world.status.stopping() {
                    break;
                }
                k += 1;
                report_through(&pending, &mut next, &mut reported, k, done);
            }
            Ok(())
        };
        let drained = self.drain(&mut tick);
        let wall = self.wall_start.take().map(|t| t.elapsed());
        drained?;
        if let Some(e) = self.stopped() {
            return Err(e);
        }
        // Everything completed: the next operations start from clean records.
        // SAFETY: the mapped progress holds MAX_CHANNELS records and no
        // kernel of this rank runs now.
        unsafe { std::ptr::write_bytes(self.progress.host, 0, self.progress.bytes) };
        tick(self)?;
        let mut out = Vec::with_capacity(pending.len());
        let untimed = pending
            .iter()
            .filter(|p| matches!(p, Pending::Untimed(_)))
            .count();
        for p in pending {
            match p {
                Pending::Timed(a, b) => {
                    let ms = self.dev.elapsed_ms(a, b).map_err(dev_err)?;
                    out.push((f64::from(ms) * 1e6) as u64);
                    self.events.extend([a, b]);
                }
                Pending::Graph(a, b, n) => {
                    let total = match (self.world.opts.timing, wall) {
                        (Timing::Wall, Some(w)) => w.as_nanos() as f64,
                        _ => f64::from(self.dev.elapsed_ms(a, b).map_err(dev_err)?) * 1e6,
                    };
                    out.extend(std::iter::repeat_n((total / n.max(1) as f64) as u64, n));
                    self.events.extend([a, b]);
                }
                Pending::Done(ns) => out.push(ns),
                Pending::Untimed(end) => {
                    let w = wall.map_or(0, |w| w.as_nanos() as u64);
                    out.push(w / untimed.max(1) as u64);
                    self.events.push(end);
                }
            }
        }
        while reported < out.len() {
            done(reported);
            reported += 1;
        }
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::exec::cuda::launch::{CudaOptions, EnvKnobs, Kind, Timing};

    #[test]
    fn small_line_protocol_operations_launch_narrow_blocks() {
        let mut o = CudaOptions::new(
            Kind::Cuda,
            64 << 10,
            Duration::from_secs(1),
            Timing::Events,
            EnvKnobs::default(),
        );
        (o.threads, o.narrow) = (512, true);
        // One line each: a warp; a line a thread up to the whole block.
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 256, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 264, 0), 64);
        assert_eq!(launch_width(&o, Proto::LowLatency, 4096, 0), 512);
        assert_eq!(launch_width(&o, Proto::LowLatency, 1 << 20, 0), 512);
        // LL128: eight threads a 120-byte line.
        assert_eq!(launch_width(&o, Proto::LowLatency128, 8, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 480, 0), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 481, 0), 64);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 64 << 10, 0), 512);
        // A local step moves 16-byte vectors, a thread each: a lone rank's
        // large copy (no message) takes the whole block.
        assert_eq!(launch_width(&o, Proto::LowLatency, 0, 8), 32);
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 2048), 128);
        assert_eq!(launch_width(&o, Proto::LowLatency, 0, 1 << 20), 512);
        assert_eq!(launch_width(&o, Proto::LowLatency128, 8, 1 << 20), 512);
        // The simple protocol's copies want every thread; a fixed width is kept.
        assert_eq!(launch_width(&o, Proto::Simple, 8, 0), 512);
        o.narrow = false;
        assert_eq!(launch_width(&o, Proto::LowLatency, 8, 0), 512);
        // The emulated device runs one thread a block.
        let e = CudaOptions::new(
            Kind::Emu,
            64 << 10,
            Duration::from_secs(1),
            Timing::Events,
            EnvKnobs::default(),
        );
        assert_eq!(launch_width(&e, Proto::LowLatency, 8, 0), 1);
    }
}
