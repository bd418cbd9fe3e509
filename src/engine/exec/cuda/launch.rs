//! The CUDA launcher, written once against [`Device`]: a world of ranks
//! placed on devices (one per GPU when there are enough, virtual ranks
//! sharing a GPU otherwise), their connections, and each rank's runner:
//! buffers and tables in device memory, one persistent `cb_collective`
//! launch per operation on the rank's own stream, CUDA events around each,
//! status and per-channel progress in host-mapped memory that the waiting
//! host thread reads (for the flight recorder, the abort and the timeout
//! record the kernels leave).
//!
//! Deadlock rules kept here: every rank's blocks must be resident at once
//! (checked against the occupancy query before any launch); ranks sharing a
//! GPU never outnumber its hardware queues; device memory is freed only once
//! every rank has stopped (a free may wait for the whole device); data
//! kernels finish before a rank reaches the barrier that precedes an
//! operation.

use super::abi::{
    as_bytes, CbConn, CbProgress, CbRank, CbStatus, ConnKey, ConnShape, Proto, RankTables,
    PROTO_SYS,
};
use super::dev::{DevError, DevPtr, Device, EventId, GraphId, Mapped, StreamId};
use super::kernels::Variant;
use crate::engine::algo::{Program, MAX_PEERS};
use crate::engine::exec::runner::{At, Data, DeviceData, OpDesc, RankRunner};
use crate::engine::exec::world::{ExecError, HostWorld, MAX_CHANNELS};
use crate::engine::observe::{Observer, WaitKind};
use crate::engine::types::{Dtype, ReduceOp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which device implementation a world runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cuda,
    Emu,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cuda => "cuda",
            Kind::Emu => "cuda-emu",
        }
    }
}

/// How operations are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// CUDA events around every operation on the rank's stream.
    Events,
    /// The host clock from the first launch to the end of the wait
    /// (nccl-tests' method), shared evenly between the operations.
    Wall,
}

/// Tunables of the CUDA executor.
#[derive(Clone, Copy, Debug)]
pub struct CudaOptions {
    pub shape: ConnShape,
    pub threads: u32,
    pub timeout: Duration,
    pub timing: Timing,
    /// The protocol of every operation (None: low-latency for steps that
    /// fit its slots, simple otherwise).
    pub proto: Option<Proto>,
}

impl CudaOptions {
    /// The defaults for `kind`, with simple-protocol slots of `slot_bytes`.
    pub fn new(kind: Kind, slot_bytes: usize, timeout: Duration, timing: Timing) -> CudaOptions {
        let slot_bytes = slot_bytes.next_multiple_of(16).max(64);
        CudaOptions {
            shape: ConnShape {
                slots: 4,
                slot_bytes,
                // Half of a line is payload: the same payload as a simple slot, at most 16 KiB.
                ll_slot_bytes: (2 * slot_bytes).min(32 << 10),
            },
            threads: match kind {
                Kind::Cuda => threads_from_env().unwrap_or(512),
                Kind::Emu => 1,
            },
            timeout,
            timing,
            proto: None,
        }
    }
}

/// `COLLBENCH_CUDA_THREADS`: threads per block of the collective kernel
/// (a tuning knob: a multiple of 32 from 32 to 1024).
fn threads_from_env() -> Option<u32> {
    let t: u32 = std::env::var("COLLBENCH_CUDA_THREADS")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (32..=1024).contains(&t).then_some(t / 32 * 32)
}

/// `CbStatus::rank` when the host (not a rank) stopped the kernels.
const HOST: u64 = u64::MAX;

fn dev_err(e: DevError) -> ExecError {
    ExecError::Setup(format!("device: {e}"))
}

/// Ranks, the devices they run on, and their connections.
pub struct CudaWorld {
    kind: Kind,
    devices: Vec<Arc<dyn Device>>,
    /// Device index of each rank.
    of_rank: Vec<usize>,
    host: Arc<HostWorld>,
    status: Mapped,
    opts: CudaOptions,
    /// Connections live in host-mapped memory when ranks span devices.
    staged: bool,
    conns: Mutex<HashMap<ConnKey, DevPtr>>,
    /// Device allocations and mapped memory freed when the world goes.
    owned: Mutex<Vec<(usize, Owned)>>,
    setup_streams: Mutex<HashMap<usize, StreamId>>,
}

enum Owned {
    Dev(DevPtr),
    Mapped(Mapped),
}

impl CudaWorld {
    /// Opens the devices of `kind` and places `nranks` ranks on them; each
    /// rank will hold buffers of `bytes`. Refuses layouts that cannot run.
    pub fn open(
        kind: Kind,
        host: Arc<HostWorld>,
        opts: CudaOptions,
        bytes: [usize; 3],
    ) -> Result<Arc<CudaWorld>, ExecError> {
        let nranks = host.nranks();
        let devices: Vec<Arc<dyn Device>> = match kind {
            Kind::Cuda => super::dev::real::devices()
                .map_err(|e| {
                    ExecError::Setup(format!("--device cuda: no usable GPU ({})", e.detail))
                })?
                .into_iter()
                .map(|d| d as Arc<dyn Device>)
                .collect(),
            Kind::Emu => super::dev::emu::devices()
                .map_err(|e| ExecError::Setup(format!("--device cuda-emu: {e}")))?
                .into_iter()
                .map(|d| d as Arc<dyn Device>)
                .collect(),
        };
        if devices.is_empty() {
            return Err(ExecError::Setup(format!(
                "--device {}: no device",
                kind.name()
            )));
        }
        let of_rank: Vec<usize> = (0..nranks).map(|r| r % devices.len()).collect();
        let used = devices.len().min(nranks);
        let devices: Vec<Arc<dyn Device>> = devices.into_iter().take(used).collect();
        for (i, d) in devices.iter().enumerate() {
            let here = of_rank.iter().filter(|&&x| x == i).count();
            let desc = d.desc();
            if here as u32 > desc.connections {
                return Err(ExecError::Setup(format!(
                    "{here} ranks share GPU {} ({}), more than its {} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): their persistent kernels could wait on each other forever; use --ranks {} or fewer per GPU",
                    desc.ordinal, desc.name, desc.connections, desc.connections
                )));
            }
            let per_rank: usize = bytes.iter().sum();
            let conn = opts.shape.bytes() * 4 * MAX_PEERS;
            let need = (here * (per_rank + conn)) as u64;
            let (free, _) = d.mem_info().map_err(dev_err)?;
            if need > free / 10 * 9 {
                return Err(ExecError::Setup(format!(
                    "not enough memory on GPU {} ({}): {here} ranks x {} of buffers and connections need {}, but {} is free; lower --sizes' maximum or --ranks",
                    desc.ordinal,
                    desc.name,
                    crate::units::Bytes((per_rank + conn) as u64),
                    crate::units::Bytes(need),
                    crate::units::Bytes(free)
                )));
            }
        }
        let status = devices[0]
            .alloc_mapped(std::mem::size_of::<CbStatus>())
            .map_err(dev_err)?;
        let world = CudaWorld {
            kind,
            staged: devices.len() > 1,
            devices,
            of_rank,
            host,
            status,
            opts,
            conns: Mutex::new(HashMap::new()),
            owned: Mutex::new(Vec::new()),
            setup_streams: Mutex::new(HashMap::new()),
        };
        Ok(Arc::new(world))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn host(&self) -> &Arc<HostWorld> {
        &self.host
    }

    /// The devices ranks run on, described.
    pub fn devices(&self) -> Vec<super::dev::DeviceDesc> {
        self.devices.iter().map(|d| d.desc().clone()).collect()
    }

    pub fn options(&self) -> &CudaOptions {
        &self.opts
    }

    fn own(&self, dev: usize, o: Owned) {
        if let Ok(mut v) = self.owned.lock() {
            v.push((dev, o));
        }
    }

    fn setup_stream(&self, dev: usize) -> Result<StreamId, ExecError> {
        let mut m = self
            .setup_streams
            .lock()
            .map_err(|_| ExecError::Setup("setup streams poisoned".into()))?;
        if let Some(&s) = m.get(&dev) {
            return Ok(s);
        }
        let s = self.devices[dev].stream().map_err(dev_err)?;
        m.insert(dev, s);
        Ok(s)
    }

    /// The memory of connection `key`, zeroed, made on first use; both
    /// ends get the same. Connections persist (their counters with them)
    /// for the world's life, like the host engine's FIFOs.
    fn conn(&self, key: ConnKey) -> Result<DevPtr, ExecError> {
        let mut m = self
            .conns
            .lock()
            .map_err(|_| ExecError::Setup("connection table poisoned".into()))?;
        if let Some(&p) = m.get(&key) {
            return Ok(p);
        }
        let bytes = self.opts.shape.bytes();
        let dev = self.of_rank[key.to];
        let d = &self.devices[dev];
        let p = if self.staged {
            let mapped = d.alloc_mapped(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Mapped(mapped));
            mapped.dev
        } else {
            let p = d.alloc(bytes).map_err(dev_err)?;
            self.own(dev, Owned::Dev(p));
            let s = self.setup_stream(dev)?;
            d.memset(s, p, 0, bytes).map_err(dev_err)?;
            d.sync(s).map_err(dev_err)?;
            p
        };
        m.insert(key, p);
        Ok(p)
    }

    fn status(&self) -> CbStatus {
        // SAFETY: the mapped status outlives the world; kernels write it
        // with system-scope stores, so a volatile read sees them.
        unsafe { std::ptr::read_volatile(self.status.host as *const CbStatus) }
    }

    /// Tells every kernel of the world to stop (the host gives up).
    fn stop_kernels(&self) {
        let p = self.status.host as *mut u64;
        // SAFETY: `abort` is the first word of the mapped status; the
        // kernels compare-and-swap it from 0, so use an atomic here too.
        let abort = unsafe { &*(p as *const std::sync::atomic::AtomicU64) };
        if abort
            .compare_exchange(
                0,
                1,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            )
            .is_ok()
        {
            // SAFETY: the record's words follow `abort`; nobody else writes them now.
            unsafe { std::ptr::write_volatile(p.add(1), HOST) };
            abort.store(2, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The rank's runner: its buffers of `bytes`, its stream and progress.
    pub fn rank(
        self: &Arc<CudaWorld>,
        rank: usize,
        observer: Arc<dyn Observer>,
        bytes: [usize; 3],
    ) -> Result<CudaRank, ExecError> {
        let di = *self
            .of_rank
            .get(rank)
            .ok_or_else(|| ExecError::Setup(format!("no rank {rank}")))?;
        let dev = Arc::clone(&self.devices[di]);
        let stream = dev.stream().map_err(dev_err)?;
        let mut bufs = [0; 3];
        for (b, &n) in bufs.iter_mut().zip(&bytes) {
            *b = dev.alloc(n.max(256)).map_err(dev_err)?;
            self.own(di, Owned::Dev(*b));
        }
        let progress = dev
            .alloc_mapped(MAX_CHANNELS * std::mem::size_of::<CbProgress>())
            .map_err(dev_err)?;
        self.own(di, Owned::Mapped(progress));
        let small = dev.alloc(256).map_err(dev_err)?;
        self.own(di, Owned::Dev(small));
        Ok(CudaRank {
            world: Arc::clone(self),
            rank,
            di,
            dev,
            stream,
            bufs,
            sizes: bytes,
            progress,
            observer,
            small,
            words: (0, 0),
            tables: (0, 0),
            loaded: None,
            events: Vec::new(),
            pending: Vec::new(),
            wall_start: None,
            graph: None,
        })
    }
}

impl Drop for CudaWorld {
    fn drop(&mut self) {
        let owned = self.owned.get_mut().map(std::mem::take).unwrap_or_default();
        for (dev, o) in owned {
            let d = &self.devices[dev];
            let _ = match o {
                Owned::Dev(p) => d.free(p),
                Owned::Mapped(m) => d.free_mapped(m),
            };
        }
        let _ = self.devices[0].free_mapped(self.status);
    }
}

/// The loaded operation of a rank.
struct Loaded {
    variant: Variant,
    coll_fn: super::dev::FuncId,
    arg: CbRank,
    step_counts: Vec<usize>,
    /// Primitive names of every step, per channel (for timeout messages).
    prims: Vec<Vec<&'static str>>,
    dtype: Dtype,
}

/// What a launched operation is waiting to report.
enum Pending {
    Timed(EventId, EventId),
    Untimed,
    Graph(EventId, EventId, usize),
}

/// One rank of a CUDA world.
pub struct CudaRank {
    world: Arc<CudaWorld>,
    rank: usize,
    di: usize,
    dev: Arc<dyn Device>,
    stream: StreamId,
    bufs: [DevPtr; 3],
    sizes: [usize; 3],
    progress: Mapped,
    observer: Arc<dyn Observer>,
    /// 256 bytes for verdict counters.
    small: DevPtr,
    /// Grow-only device regions (address, capacity) for input tables and programs.
    words: (DevPtr, usize),
    tables: (DevPtr, usize),
    loaded: Option<Loaded>,
    /// Free events, reused.
    events: Vec<EventId>,
    pending: Vec<Pending>,
    wall_start: Option<Instant>,
    /// The captured graph of the loaded operation and how many operations it holds.
    graph: Option<(GraphId, usize)>,
}

impl CudaRank {
    /// A device region of at least `bytes` (grow-only; old ones are freed with the world).
    fn region(&self, r: (DevPtr, usize), bytes: usize) -> Result<(DevPtr, usize), ExecError> {
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
    fn check_residency(&self, f: super::dev::FuncId, nchannels: usize) -> Result<(), ExecError> {
        let threads = self.world.opts.threads;
        let per_sm = self.dev.occupancy(f, threads).map_err(dev_err)?;
        let desc = self.dev.desc();
        let here = self.world.of_rank.iter().filter(|&&x| x == self.di).count();
        let need = here * nchannels;
        let cap = desc.multiprocessors as usize * per_sm as usize;
        if need > cap {
            return Err(ExecError::Setup(format!(
                "{here} rank(s) x {nchannels} channel(s) = {need} blocks must be resident at once on GPU {} ({}), but it holds {} SMs x {per_sm} blocks of {threads} threads = {cap}: lower --ranks or --channels{}",
                desc.ordinal,
                desc.name,
                desc.multiprocessors,
                if self.world.kind == Kind::Emu { " (or raise COLLBENCH_EMU_SMS / COLLBENCH_EMU_BLOCKS_PER_SM)" } else { "" }
            )));
        }
        Ok(())
    }

    /// Uploads the rank's tables; returns the kernel's argument.
    fn upload_tables(&mut self, t: &RankTables, nranks: usize) -> Result<CbRank, ExecError> {
        let mut ins = Vec::with_capacity(t.ins.len());
        let mut outs = Vec::with_capacity(t.outs.len());
        for (keys, list) in [(&t.ins, &mut ins), (&t.outs, &mut outs)] {
            for &k in keys.iter() {
                let base = self.world.conn(k)?;
                list.push(conn_view(base, self.world.opts.shape, k, self.rank));
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
        self.tables = self.region(self.tables, blob.len())?;
        let base = self.tables.0;
        self.dev.upload(self.stream, base, &blob).map_err(dev_err)?;
        let proto = match self.world.opts.proto {
            Some(p) => p,
            None if t.max_step_bytes <= self.world.opts.shape.ll_max_bytes() => Proto::LowLatency,
            None => Proto::Simple,
        };
        Ok(CbRank {
            steps: base + steps,
            chan_start: base + chan,
            ins: base + ins_at,
            outs: base + outs_at,
            bufs: self.bufs,
            progress: self.progress.dev,
            status: self.world.status.dev,
            timeout_ns: self.world.opts.timeout.as_nanos().min(u64::MAX as u128) as u64,
            rank: self.rank as u32,
            nranks: nranks as u32,
            proto: proto as u32 | if self.world.staged { PROTO_SYS } else { 0 },
            nchannels: t.nchannels() as u32,
        })
    }

    /// Grid for a data kernel over `count` elements.
    fn data_grid(&self, count: usize) -> (u32, u32) {
        let threads = if self.world.kind == Kind::Emu { 1 } else { 256 };
        let max =
            (self.dev.desc().multiprocessors.max(1) * 2).min(if self.world.kind == Kind::Emu {
                4
            } else {
                u32::MAX
            });
        let blocks = count.div_ceil(threads as usize).clamp(1, max as usize) as u32;
        (blocks, threads)
    }

    fn data_fn(&self, name: &str) -> Result<(super::dev::FuncId, Dtype), ExecError> {
        let l = self.loaded()?;
        let f = self.dev.function(l.variant, name).map_err(dev_err)?;
        Ok((f, l.dtype))
    }

    fn addr(&self, at: At) -> Result<DevPtr, ExecError> {
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
        loop {
            if self.dev.done(self.stream).map_err(dev_err)? {
                return Ok(());
            }
            tick(self)?;
            if self.world.host.aborted() {
                self.world.stop_kernels();
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
        let s = self.world.status();
        if s.abort == 0 {
            return None;
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

    fn launch_one(&mut self) -> Result<(), ExecError> {
        let l = self.loaded()?;
        let (f, grid, arg) = (l.coll_fn, l.arg.nchannels, l.arg);
        self.observer.begin(&l.step_counts);
        self.dev
            .launch(
                f,
                grid,
                self.world.opts.threads,
                self.stream,
                &[as_bytes(&[arg])],
            )
            .map_err(dev_err)
    }
}

/// The kernel's view of connection `key` at `base`, seen from `me`.
fn conn_view(base: DevPtr, shape: ConnShape, key: ConnKey, me: usize) -> CbConn {
    let flag = 128u64;
    let buf = base + 2 * flag;
    CbConn {
        tail: base,
        head: base + flag,
        buf,
        ll: buf + (shape.slots * shape.slot_bytes) as u64,
        slot_bytes: shape.slot_bytes as u64,
        ll_slot_bytes: shape.ll_slot_bytes as u64,
        slots: shape.slots as u32,
        peer: if key.from == me { key.to } else { key.from } as u32,
    }
}

impl RankRunner for CudaRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn chunk_elems(&self, dtype: Dtype) -> usize {
        let shape = self.world.opts.shape;
        let bytes = match self.world.opts.proto {
            Some(Proto::LowLatency) => shape.ll_max_bytes().min(shape.slot_bytes),
            _ => shape.slot_bytes,
        };
        (bytes / dtype.size()).max(1)
    }

    fn auto_blocks(&mut self, dtype: Dtype, op: ReduceOp) -> Result<usize, ExecError> {
        if self.world.kind == Kind::Emu {
            // Every block is a thread: few, so the host's cores are not swamped.
            return Ok(2);
        }
        let here = self
            .world
            .of_rank
            .iter()
            .filter(|&&x| x == self.di)
            .count()
            .max(1);
        let f = self
            .dev
            .function(Variant { dtype, op }, "cb_collective")
            .map_err(dev_err)?;
        let per_sm = self
            .dev
            .occupancy(f, self.world.opts.threads)
            .map_err(dev_err)? as usize;
        let cap = self.dev.desc().multiprocessors as usize * per_sm.max(1);
        Ok((cap / here).clamp(1, MAX_CHANNELS))
    }

    fn load(&mut self, op: &OpDesc, program: &Program) -> Result<(), ExecError> {
        if let Some((g, _)) = self.graph.take() {
            self.dev.drop_graph(g).map_err(dev_err)?;
        }
        let t = RankTables::new(program, &op.layout, op.dtype).map_err(ExecError::Setup)?;
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
        self.check_residency(coll_fn, t.nchannels())?;
        let arg = self.upload_tables(&t, op.nranks)?;
        let step_counts: Vec<usize> = program.channels.iter().map(|c| c.steps.len()).collect();
        let prims = program
            .channels
            .iter()
            .map(|c| c.steps.iter().map(|s| s.prim.name()).collect())
            .collect();
        self.loaded = Some(Loaded {
            variant,
            coll_fn,
            arg,
            step_counts,
            prims,
            dtype: op.dtype,
        });
        Ok(())
    }

    fn launch(&mut self) -> Result<(), ExecError> {
        if self.world.opts.timing == Timing::Wall {
            self.wall_start.get_or_insert_with(Instant::now);
            self.launch_one()?;
            self.pending.push(Pending::Untimed);
            return Ok(());
        }
        let (a, b) = (self.event()?, self.event()?);
        self.dev.record(a, self.stream).map_err(dev_err)?;
        self.launch_one()?;
        self.dev.record(b, self.stream).map_err(dev_err)?;
        self.pending.push(Pending::Timed(a, b));
        Ok(())
    }

    fn launch_graph(&mut self, n: usize) -> Result<(), ExecError> {
        let graph = match self.graph {
            Some((g, m)) if m == n => g,
            _ => {
                if let Some((g, _)) = self.graph.take() {
                    self.dev.drop_graph(g).map_err(dev_err)?;
                }
                let l = self.loaded()?;
                let (f, grid, arg) = (l.coll_fn, l.arg.nchannels, l.arg);
                self.dev.begin_capture(self.stream).map_err(dev_err)?;
                let mut captured = Ok(());
                for _ in 0..n {
                    captured = self.dev.launch(
                        f,
                        grid,
                        self.world.opts.threads,
                        self.stream,
                        &[as_bytes(&[arg])],
                    );
                    if captured.is_err() {
                        break;
                    }
                }
                let g = self.dev.end_capture(self.stream);
                captured.map_err(dev_err)?;
                let g = g.map_err(dev_err)?;
                self.graph = Some((g, n));
                g
            }
        };
        let steps = self.loaded()?.step_counts.clone();
        self.observer.begin(&steps);
        let (a, b) = (self.event()?, self.event()?);
        self.wall_start.get_or_insert_with(Instant::now);
        self.dev.record(a, self.stream).map_err(dev_err)?;
        self.dev.launch_graph(graph, self.stream).map_err(dev_err)?;
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
            while let Some(p) = pending.get(next) {
                let (end, n) = match *p {
                    Pending::Timed(_, b) => (b, 1),
                    Pending::Graph(_, b, n) => (b, n),
                    Pending::Untimed => break,
                };
                if !me.dev.event_done(end).map_err(dev_err)? || me.world.status().abort != 0 {
                    break;
                }
                for _ in 0..n {
                    done(reported);
                    reported += 1;
                }
                next += 1;
            }
            Ok(())
        };
        let drained = self.drain(&mut tick);
        let wall = self.wall_start.take().map(|t| t.elapsed());
        drained?;
        if let Some(e) = self.stopped() {
            return Err(e);
        }
        tick(self)?;
        let mut out = Vec::with_capacity(pending.len());
        let untimed = pending
            .iter()
            .filter(|p| matches!(p, Pending::Untimed))
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
                Pending::Untimed => {
                    let w = wall.map_or(0, |w| w.as_nanos() as u64);
                    out.push(w / untimed.max(1) as u64);
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

impl DeviceData for CudaRank {
    fn upload_words(&mut self, words: &[u64]) -> Result<u64, ExecError> {
        self.words = self.region(self.words, words.len() * 8)?;
        self.dev
            .upload(self.stream, self.words.0, as_bytes(words))
            .map_err(dev_err)?;
        Ok(self.words.0)
    }

    fn poison(&mut self, at: At, count: usize) -> Result<(), ExecError> {
        let (f, _) = self.data_fn("cb_poison")?;
        let (grid, threads) = self.data_grid(count);
        let dst = self.addr(at)?;
        self.dev
            .launch(
                f,
                grid,
                threads,
                self.stream,
                &[&dst.to_le_bytes(), &(count as u64).to_le_bytes()],
            )
            .map_err(dev_err)
    }

    fn fill(&mut self, gen: &[u8], rank: u32, at: At, count: usize) -> Result<(), ExecError> {
        let (f, _) = self.data_fn("cb_fill")?;
        let (grid, threads) = self.data_grid(count);
        let dst = self.addr(at)?;
        let args: [&[u8]; 4] = [
            gen,
            &rank.to_le_bytes(),
            &dst.to_le_bytes(),
            &(count as u64).to_le_bytes(),
        ];
        self.dev
            .launch(f, grid, threads, self.stream, &args)
            .map_err(dev_err)?;
        // Inputs are in place before the rank reaches the next barrier.
        self.dev.sync(self.stream).map_err(dev_err)
    }

    fn verify(
        &mut self,
        gen: &[u8],
        expect: &[u8],
        at: At,
        count: usize,
    ) -> Result<([u64; 3], Option<u64>), ExecError> {
        let (f, dtype) = self.data_fn("cb_verify")?;
        let clean: [u64; 4] = [0, 0, u64::MAX, 0];
        self.dev
            .upload(self.stream, self.small, as_bytes(&clean))
            .map_err(dev_err)?;
        let (grid, threads) = self.data_grid(count);
        let recv = self.addr(at)?;
        let args: [&[u8]; 5] = [
            gen,
            expect,
            &recv.to_le_bytes(),
            &(count as u64).to_le_bytes(),
            &self.small.to_le_bytes(),
        ];
        self.dev
            .launch(f, grid, threads, self.stream, &args)
            .map_err(dev_err)?;
        let mut raw = [0u8; 32];
        self.dev
            .download(self.stream, &mut raw, self.small)
            .map_err(dev_err)?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let counters = [word(0), word(1), word(2)];
        let mut first_bits = None;
        if counters[0] > 0 && counters[2] != u64::MAX && (counters[2] as usize) < count {
            let es = dtype.size();
            let bytes = self.read((at.0, at.1 + counters[2] as usize * es), es)?;
            let mut w = [0u8; 8];
            w[..es].copy_from_slice(&bytes);
            first_bits = Some(u64::from_le_bytes(w));
        }
        Ok((counters, first_bits))
    }

    fn read(&mut self, at: At, bytes: usize) -> Result<Vec<u8>, ExecError> {
        if at.0 > 2 || at.1 + bytes > self.sizes[at.0] {
            return Err(ExecError::Setup("read outside the rank's buffers".into()));
        }
        let mut out = vec![0u8; bytes];
        self.dev
            .download(self.stream, &mut out, self.addr(at)?)
            .map_err(dev_err)?;
        Ok(out)
    }

    fn write(&mut self, at: At, bytes: &[u8]) -> Result<(), ExecError> {
        if at.0 > 2 || at.1 + bytes.len() > self.sizes[at.0] {
            return Err(ExecError::Setup("write outside the rank's buffers".into()));
        }
        self.dev
            .upload(self.stream, self.addr(at)?, bytes)
            .map_err(dev_err)
    }
}

impl Drop for CudaRank {
    fn drop(&mut self) {
        // Finish whatever is queued; memory goes with the world.
        if !self.pending.is_empty() {
            self.world.stop_kernels();
        }
        let _ = self.dev.sync(self.stream);
        if let Some((g, _)) = self.graph.take() {
            let _ = self.dev.drop_graph(g);
        }
    }
}
