//! The emulated device (`--device cuda-emu`): the `kernels/` sources built
//! by the host C++ compiler (`emu/library.rs`: one shared library per variant,
//! cached on disk, shared by every emulated device of the process) and run
//! with each block as a host thread. This module owns the emulated GPUs'
//! configuration (`COLLBENCH_EMU_*`), host memory standing in for device
//! memory, streams (one worker thread each, in order), events and captured
//! graphs.
//!
//! Faults the GPU would report late are reported at once where they can
//! be: a copy or memset outside any allocation, a launch whose parameters
//! do not match the kernel's. A failed operation inside a stream is
//! sticky: the stream's later `sync`, `done`, `upload` and `download` say so.

mod config;
mod library;
#[cfg(test)]
mod tests;

pub use config::{parse_size, EmuConfig};
pub use library::{compiler, options, Compiler};

use super::{
    DevError, DevPtr, Device, DeviceDesc, EventId, FuncId, GraphId, Mapped, ShareKind, Shared,
    StreamId,
};
use crate::engine::exec::cuda::kernels::Variant;
use crate::engine::transport::shm::Segment;
use library::{library, Library};
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

/// The alignment of every allocation.
const ALIGN: usize = 256;

/// Bytes after the body of shared memory: the pids of the other processes
/// that have it open (a slot each, 0 when free), so freeing it while one of
/// them (still alive: a process that dies closes what it had, as on CUDA)
/// does is caught, as CUDA would not.
const SHARE_TRAILER: usize = 128;

/// The opener slots in `seg`'s trailer.
fn openers(seg: &Segment) -> &[AtomicU32] {
    let at = seg.len() - SHARE_TRAILER;
    // SAFETY: every shared segment's length is its body, a multiple of
    // SHARE_TRAILER, plus the trailer (checked before opening), so the
    // slots are in bounds and 4-byte aligned (the mapping is page-aligned);
    // other processes touch them only atomically.
    unsafe {
        std::slice::from_raw_parts(seg.as_ptr().add(at) as *const AtomicU32, SHARE_TRAILER / 4)
    }
}

/// The processes, still alive, that have `seg` open.
fn live_openers(seg: &Segment) -> Vec<u32> {
    openers(seg)
        .iter()
        .map(|p| p.load(Ordering::SeqCst))
        // SAFETY: signal 0 only checks that the process exists.
        .filter(|&p| p != 0 && unsafe { libc::kill(p as i32, 0) } == 0)
        .collect()
}

/// Every emulated device of this process's configuration.
pub fn devices() -> Result<Vec<Arc<EmuDevice>>, DevError> {
    let cfg = EmuConfig::from_env()?;
    tracing::debug!(
        gpus = cfg.gpus,
        sms = cfg.multiprocessors,
        blocks_per_sm = cfg.blocks_per_sm,
        memory_bytes = cfg.memory_bytes,
        "emulated devices"
    );
    Ok((0..cfg.gpus)
        .map(|i| Arc::new(EmuDevice::new(i, cfg)))
        .collect())
}

fn lock<'a, T>(m: &'a Mutex<T>, call: &str) -> Result<MutexGuard<'a, T>, DevError> {
    m.lock()
        .map_err(|_| DevError::new(call, "the emulated device's state was poisoned by a panic"))
}

/// For workers and `Drop`, which have no caller to tell: the state behind
/// these locks stays consistent across a panic.
fn lock_any<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A kernel of a loaded variant, with its parameters' sizes.
struct Kernel {
    lib: Arc<Library>,
    id: c_int,
    name: String,
    args: Vec<usize>,
}

/// Every live allocation of every emulated device (base -> bytes): like
/// unified addressing, a copy may target any device's memory.
fn registry() -> &'static Mutex<BTreeMap<u64, u64>> {
    static R: OnceLock<Mutex<BTreeMap<u64, u64>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// AddressSanitizer's calls that mark memory out of bounds and back, when
/// its runtime is in the process (kernels built with `-fsanitize=address`).
struct AsanRegions {
    poison: unsafe extern "C" fn(*const u8, usize),
    unpoison: unsafe extern "C" fn(*const u8, usize),
}

fn asan_regions() -> Option<&'static AsanRegions> {
    static A: OnceLock<Option<AsanRegions>> = OnceLock::new();
    A.get_or_init(|| {
        let find = |name: &[u8]| {
            // SAFETY: dlsym with the default handle and a NUL-terminated name.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
            (!f.is_null()).then_some(f)
        };
        let (p, u) = (
            find(b"__asan_poison_memory_region\0")?,
            find(b"__asan_unpoison_memory_region\0")?,
        );
        // SAFETY: ASan's interface defines both as void f(void const volatile *, size_t).
        unsafe {
            Some(AsanRegions {
                poison: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*const u8, usize),
                >(p),
                unpoison: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*const u8, usize),
                >(u),
            })
        }
    })
    .as_ref()
}

fn check_range(call: &str, p: DevPtr, bytes: usize) -> Result<(), DevError> {
    let r = lock(registry(), call)?;
    let inside = r.range(..=p).next_back().is_some_and(|(&base, &len)| {
        (p - base)
            .checked_add(bytes as u64)
            .is_some_and(|end| end <= len)
    });
    if inside {
        Ok(())
    } else {
        Err(DevError::new(
            call,
            format!("{bytes} bytes at {p:#x} are not inside one emulated allocation"),
        ))
    }
}

#[derive(Default)]
struct Memory {
    used: u64,
    /// base -> (layout, whether mapped).
    blocks: HashMap<u64, (Layout, bool)>,
}

#[derive(Default)]
struct Event {
    state: Mutex<EventState>,
}

#[derive(Default)]
struct EventState {
    at: Option<Instant>,
    /// Records enqueued and not yet reached.
    pending: usize,
}

#[derive(Clone)]
enum Op {
    Launch {
        kernel: Arc<Kernel>,
        grid: u32,
        /// Threads of each block.
        threads: u32,
        args: Arc<[Vec<u8>]>,
    },
    Record(Arc<Event>),
    Memset {
        dst: DevPtr,
        value: u8,
        bytes: usize,
    },
    Copy {
        dst: DevPtr,
        src: DevPtr,
        bytes: usize,
    },
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    busy: bool,
    shutdown: bool,
    capture: Option<Vec<Op>>,
    /// The first failure of an operation, sticky.
    error: Option<String>,
}

/// One stream: signalled when work arrives and when the worker goes idle.
#[derive(Default)]
struct Stream {
    q: Mutex<Queue>,
    cv: Condvar,
}

impl Stream {
    /// Waits until every queued operation has run; refused while capturing.
    fn idle(&self, call: &str) -> Result<MutexGuard<'_, Queue>, DevError> {
        let mut q = lock(&self.q, call)?;
        if q.capture.is_some() {
            return Err(DevError::new(call, "the stream is capturing a graph"));
        }
        while !q.ops.is_empty() || q.busy {
            q = self
                .cv
                .wait(q)
                .map_err(|_| DevError::new(call, "poisoned"))?;
        }
        match &q.error {
            Some(e) => Err(DevError::new(
                call,
                format!("an earlier operation failed: {e}"),
            )),
            None => Ok(q),
        }
    }
}

fn worker(st: Arc<Stream>) {
    let mut q = lock_any(&st.q);
    while !q.shutdown {
        let Some(op) = q.ops.pop_front() else {
            q = st.cv.wait(q).unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        q.busy = true;
        drop(q);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(op)));
        q = lock_any(&st.q);
        q.busy = false;
        if let Some(e) = r.unwrap_or(Err(OpError::Panicked)).err() {
            tracing::debug!(error = %e, "emulated stream operation failed");
            q.error.get_or_insert(e.to_string());
        }
        if q.ops.is_empty() {
            st.cv.notify_all();
        }
    }
    // The device is gone: queued work is dropped.
    q.ops.clear();
}

/// Why an emulated operation failed (kept, as text, as the stream's sticky error).
#[derive(Debug, thiserror::Error)]
enum OpError {
    #[error("the operation panicked")]
    Panicked,
    #[error("{kernel}: starting block {block} of {grid}: {source}")]
    Spawn {
        kernel: String,
        block: u32,
        grid: u32,
        source: std::io::Error,
    },
    #[error("{kernel}: block {block} of {grid} could not run: {why}")]
    Block {
        kernel: String,
        block: u32,
        grid: u32,
        why: String,
    },
}

fn run(op: Op) -> Result<(), OpError> {
    match op {
        Op::Memset { dst, value, bytes } => {
            // SAFETY: the range was checked against a live allocation when enqueued.
            unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
            Ok(())
        }
        Op::Copy { dst, src, bytes } => {
            // SAFETY: both ranges were checked against live allocations when enqueued.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        }
        Op::Record(e) => {
            let mut s = lock_any(&e.state);
            s.at = Some(Instant::now());
            s.pending = s.pending.saturating_sub(1);
            Ok(())
        }
        Op::Launch {
            kernel,
            grid,
            threads,
            args,
        } => {
            let k = &kernel;
            let args = &args[..];
            std::thread::scope(|sc| {
                let mut blocks = Vec::with_capacity(grid as usize);
                for b in 0..grid {
                    let h = std::thread::Builder::new()
                        .spawn_scoped(sc, move || {
                            let mut params: Vec<*mut c_void> =
                                args.iter().map(|a| a.as_ptr() as *mut c_void).collect();
                            // SAFETY: `params` holds one pointer per parameter of
                            // the kernel, each at its size (checked at launch); the
                            // runtime only reads them, while `args` lives (it
                            // joins the block's other threads before returning).
                            unsafe { (k.lib.run)(k.id, params.as_mut_ptr(), b, grid, threads) }
                        })
                        .map_err(|source| OpError::Spawn {
                            kernel: k.name.clone(),
                            block: b,
                            grid,
                            source,
                        })?;
                    blocks.push((b, h));
                }
                let mut narrowed = 0u32;
                for (b, h) in blocks {
                    let why = match h.join().map_err(|_| OpError::Panicked)? {
                        0 => continue,
                        1 => {
                            narrowed += 1;
                            continue;
                        }
                        -2 => format!(
                            "blocks of {threads} threads are neither 1 nor whole groups of 8"
                        ),
                        _ => "the host would not start a thread for it, nor hold its state".into(),
                    };
                    return Err(OpError::Block {
                        kernel: k.name.clone(),
                        block: b,
                        grid,
                        why,
                    });
                }
                if narrowed > 0 {
                    // The kernels take any width: the results stand, what
                    // wide blocks test did not run there.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!(
                            kernel = %k.name,
                            blocks = narrowed,
                            threads,
                            "the host would not start every thread of some emulated blocks (COLLBENCH_EMU_THREADS): they ran as one thread"
                        )
                    });
                }
                Ok(())
            })
        }
    }
}

#[derive(Default)]
struct Funcs {
    list: Vec<Arc<Kernel>>,
    by_name: HashMap<(Variant, String), usize>,
}

/// One emulated GPU.
pub struct EmuDevice {
    desc: DeviceDesc,
    blocks_per_sm: u32,
    mem: Mutex<Memory>,
    /// Each stream with its worker thread.
    streams: Mutex<Vec<(Arc<Stream>, JoinHandle<()>)>>,
    events: Mutex<Vec<Arc<Event>>>,
    funcs: Mutex<Funcs>,
    graphs: Mutex<Vec<Option<Arc<[Op]>>>>,
    /// Memory shared with other processes (made here or opened), by address.
    shared: Mutex<HashMap<u64, Segment>>,
}

impl EmuDevice {
    pub fn new(ordinal: usize, cfg: EmuConfig) -> EmuDevice {
        EmuDevice {
            desc: DeviceDesc {
                ordinal,
                name: "collbench emulated GPU".into(),
                arch: "emu".into(),
                multiprocessors: cfg.multiprocessors,
                memory_bytes: cfg.memory_bytes,
                connections: cfg.queues,
                block_threads: cfg.threads,
            },
            blocks_per_sm: cfg.blocks_per_sm,
            mem: Mutex::default(),
            streams: Mutex::default(),
            events: Mutex::default(),
            funcs: Mutex::default(),
            graphs: Mutex::default(),
            shared: Mutex::default(),
        }
    }

    /// Waits until no stream has work queued or running (as a free does).
    fn idle(&self, call: &str) -> Result<(), DevError> {
        let streams: Vec<_> = lock(&self.streams, call)?
            .iter()
            .map(|(s, _)| s.clone())
            .collect();
        for st in streams {
            let q = lock(&st.q, call)?;
            let _idle = st.cv.wait_while(q, |q| !q.ops.is_empty() || q.busy);
        }
        Ok(())
    }

    /// Keeps `seg` as shared memory of this device, addressable by copies
    /// (all but its trailer).
    fn keep_shared(&self, call: &str, seg: Segment) -> Result<Shared, DevError> {
        let s = Shared {
            dev: seg.as_ptr() as u64,
            host: seg.as_ptr(),
            bytes: seg.len().saturating_sub(SHARE_TRAILER),
        };
        lock_any(registry()).insert(s.dev, s.bytes as u64);
        lock(&self.shared, call)?.insert(s.dev, seg);
        Ok(s)
    }

    fn stream_of(&self, s: StreamId, call: &str) -> Result<Arc<Stream>, DevError> {
        let streams = lock(&self.streams, call)?;
        let st = streams.get(s.0).map(|(st, _)| st.clone());
        st.ok_or_else(|| DevError::new(call, format!("no stream {}", s.0)))
    }

    fn event_of(&self, e: EventId, call: &str) -> Result<Arc<Event>, DevError> {
        let st = lock(&self.events, call)?.get(e.0).cloned();
        st.ok_or_else(|| DevError::new(call, format!("no event {}", e.0)))
    }

    /// Appends `ops` to `s`'s capture, or queues them.
    fn enqueue(
        &self,
        s: StreamId,
        call: &str,
        ops: impl IntoIterator<Item = Op>,
    ) -> Result<(), DevError> {
        let st = self.stream_of(s, call)?;
        let mut q = lock(&st.q, call)?;
        if let Some(c) = q.capture.as_mut() {
            c.extend(ops);
            return Ok(());
        }
        for op in ops {
            if let Op::Record(e) = &op {
                lock(&e.state, call)?.pending += 1;
            }
            q.ops.push_back(op);
        }
        st.cv.notify_all();
        Ok(())
    }

    fn allocate(&self, call: &str, bytes: usize, mapped: bool) -> Result<DevPtr, DevError> {
        let mut m = lock(&self.mem, call)?;
        let size = self.desc.memory_bytes;
        if !mapped && m.used.saturating_add(bytes.max(1) as u64) > size {
            return Err(DevError::new(
                call,
                format!(
                    "out of emulated device memory: {bytes} bytes asked, {} of {size} free",
                    size - m.used
                ),
            ));
        }
        let layout = Layout::from_size_align(bytes.max(1), ALIGN)
            .map_err(|e| DevError::new(call, format!("{bytes} bytes: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let p = unsafe {
            if mapped {
                std::alloc::alloc_zeroed(layout)
            } else {
                std::alloc::alloc(layout)
            }
        };
        if p.is_null() {
            return Err(DevError::new(
                call,
                format!("the host refused {bytes} bytes"),
            ));
        }
        if !mapped {
            m.used += layout.size() as u64;
        }
        m.blocks.insert(p as u64, (layout, mapped));
        lock_any(registry()).insert(p as u64, bytes as u64);
        Ok(p as u64)
    }

    fn release(&self, call: &str, p: DevPtr, mapped: bool) -> Result<(), DevError> {
        // As cuMemFree: earlier work that may still use the memory finishes first.
        self.idle(call)?;
        let mut m = lock(&self.mem, call)?;
        match m.blocks.get(&p) {
            Some(&(layout, was)) if was == mapped => {
                m.blocks.remove(&p);
                if !mapped {
                    m.used -= layout.size() as u64;
                }
                lock_any(registry()).remove(&p);
                // SAFETY: `p` came from `alloc` with this layout and is freed once.
                unsafe { std::alloc::dealloc(p as *mut u8, layout) };
                Ok(())
            }
            _ => Err(DevError::new(
                call,
                format!("{p:#x} is not a live allocation of this kind"),
            )),
        }
    }
}

fn host_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

impl Device for EmuDevice {
    fn desc(&self) -> &DeviceDesc {
        &self.desc
    }

    fn kind(&self) -> &'static str {
        "cuda-emu"
    }

    fn mem_info(&self) -> Result<(u64, u64), DevError> {
        let total = self.desc.memory_bytes;
        let free = total - lock(&self.mem, "mem_info")?.used.min(total);
        Ok((host_available().map_or(free, |h| h.min(free)), total))
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr, DevError> {
        self.allocate("alloc", bytes, false)
    }

    fn free(&self, p: DevPtr) -> Result<(), DevError> {
        self.release("free", p, false)
    }

    fn fence(&self, p: DevPtr, used: usize) {
        let Some(asan) = asan_regions() else {
            return;
        };
        let Ok(r) = lock(registry(), "fence") else {
            return;
        };
        // Only the allocation that starts at `p`, while the registry holds
        // it (a free waits for the lock).
        let Some(&len) = r.get(&p) else {
            return;
        };
        let used = (used as u64).min(len);
        // SAFETY: both ranges lie inside the live allocation [p, p + len),
        // which cannot be freed while the registry is locked.
        unsafe {
            (asan.unpoison)(p as *const u8, used as usize);
            (asan.poison)((p + used) as *const u8, (len - used) as usize);
        }
    }

    fn alloc_mapped(&self, bytes: usize) -> Result<Mapped, DevError> {
        let p = self.allocate("alloc_mapped", bytes, true)?;
        Ok(Mapped {
            host: p as *mut u8,
            dev: p,
            bytes,
        })
    }

    fn free_mapped(&self, m: Mapped) -> Result<(), DevError> {
        self.release("free_mapped", m.dev, true)
    }

    fn stream(&self) -> Result<StreamId, DevError> {
        let mut streams = lock(&self.streams, "stream")?;
        let st = Arc::new(Stream::default());
        let w = st.clone();
        let h = std::thread::Builder::new()
            .name(format!("cuda-emu{}-s{}", self.desc.ordinal, streams.len()))
            .spawn(move || worker(w))
            .map_err(|e| DevError::new("stream", format!("starting the stream's thread: {e}")))?;
        streams.push((st, h));
        Ok(StreamId(streams.len() - 1))
    }

    fn upload(&self, s: StreamId, dst: DevPtr, src: &[u8]) -> Result<(), DevError> {
        check_range("upload", dst, src.len())?;
        let st = self.stream_of(s, "upload")?;
        let _idle = st.idle("upload")?;
        // SAFETY: the destination range lies inside a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn download(&self, s: StreamId, dst: &mut [u8], src: DevPtr) -> Result<(), DevError> {
        check_range("download", src, dst.len())?;
        let st = self.stream_of(s, "download")?;
        let _idle = st.idle("download")?;
        // SAFETY: the source range lies inside a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn memset(&self, s: StreamId, dst: DevPtr, value: u8, bytes: usize) -> Result<(), DevError> {
        check_range("memset", dst, bytes)?;
        self.enqueue(s, "memset", [Op::Memset { dst, value, bytes }])
    }

    fn copy(&self, s: StreamId, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DevError> {
        check_range("copy", dst, bytes)?;
        check_range("copy", src, bytes)?;
        self.enqueue(s, "copy", [Op::Copy { dst, src, bytes }])
    }

    fn function(&self, variant: Variant, name: &str) -> Result<FuncId, DevError> {
        let call = "function";
        let key = (variant, name.to_string());
        if let Some(&i) = lock(&self.funcs, call)?.by_name.get(&key) {
            return Ok(FuncId(i));
        }
        let lib = library(variant)?;
        let cname = CString::new(name).map_err(|e| DevError::new(call, e))?;
        // SAFETY: cb_emu_entry reads one NUL-terminated string.
        let id = unsafe { (lib.entry)(cname.as_ptr()) };
        if id < 0 {
            return Err(DevError::new(
                call,
                format!("no kernel {name:?} in {variant}"),
            ));
        }
        let mut sizes = [0u64; 16];
        // SAFETY: cb_emu_arg_sizes writes at most `cap` (16) sizes.
        let n = unsafe { (lib.arg_sizes)(id, sizes.as_mut_ptr(), 16) };
        let args = sizes[..n.clamp(0, 16) as usize]
            .iter()
            .map(|&s| s as usize)
            .collect();
        let mut funcs = lock(&self.funcs, call)?;
        if let Some(&i) = funcs.by_name.get(&key) {
            return Ok(FuncId(i));
        }
        let name = name.to_string();
        funcs.list.push(Arc::new(Kernel {
            lib,
            id,
            name,
            args,
        }));
        let i = funcs.list.len() - 1;
        funcs.by_name.insert(key, i);
        Ok(FuncId(i))
    }

    fn occupancy(&self, f: FuncId, _threads: u32) -> Result<u32, DevError> {
        match lock(&self.funcs, "occupancy")?.list.get(f.0) {
            Some(_) => Ok(self.blocks_per_sm),
            None => Err(DevError::new("occupancy", format!("no function {}", f.0))),
        }
    }

    fn launch(
        &self,
        f: FuncId,
        grid: u32,
        threads: u32,
        s: StreamId,
        args: &[&[u8]],
    ) -> Result<(), DevError> {
        let call = "launch";
        let kernel = lock(&self.funcs, call)?.list.get(f.0).cloned();
        let kernel = kernel.ok_or_else(|| DevError::new(call, format!("no function {}", f.0)))?;
        if grid == 0 || threads == 0 {
            return Err(DevError::new(
                call,
                format!("{grid} blocks of {threads} threads"),
            ));
        }
        // A block runs as wide as asked up to COLLBENCH_EMU_THREADS (host
        // threads are dear), and at most 1024 wide, as on a GPU; of one
        // thread or of whole groups of 8 (LL128's lines).
        let width = threads.min(self.desc.block_threads);
        if threads > 1024 || (width > 1 && width % 8 != 0) {
            return Err(DevError::new(
                call,
                format!(
                    "{} with blocks of {threads} threads: the emulated device runs blocks of 1 thread or of whole groups of 8, at most 1024 (and at most COLLBENCH_EMU_THREADS={} at once)",
                    kernel.name, self.desc.block_threads
                ),
            ));
        }
        let got: Vec<usize> = args.iter().map(|a| a.len()).collect();
        if got != kernel.args {
            return Err(DevError::new(
                call,
                format!(
                    "{} takes parameters of {:?} bytes, got {got:?}",
                    kernel.name, kernel.args
                ),
            ));
        }
        let args: Arc<[Vec<u8>]> = args.iter().map(|a| a.to_vec()).collect();
        self.enqueue(
            s,
            call,
            [Op::Launch {
                kernel,
                grid,
                threads: width,
                args,
            }],
        )
    }

    fn event(&self) -> Result<EventId, DevError> {
        let mut events = lock(&self.events, "event")?;
        events.push(Arc::default());
        Ok(EventId(events.len() - 1))
    }

    fn record(&self, e: EventId, s: StreamId) -> Result<(), DevError> {
        let ev = self.event_of(e, "record")?;
        self.enqueue(s, "record", [Op::Record(ev)])
    }

    fn event_done(&self, e: EventId) -> Result<bool, DevError> {
        let ev = self.event_of(e, "event_done")?;
        let st = lock(&ev.state, "event_done")?;
        Ok(st.pending == 0)
    }

    fn elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32, DevError> {
        let call = "elapsed_ms";
        let at = |e: EventId| -> Result<Instant, DevError> {
            let ev = self.event_of(e, call)?;
            let st = lock(&ev.state, call)?;
            match (st.pending, st.at) {
                (0, Some(t)) => Ok(t),
                (0, None) => Err(DevError::new(
                    call,
                    format!("event {} was never recorded", e.0),
                )),
                _ => Err(DevError::new(
                    call,
                    format!("event {} has not completed", e.0),
                )),
            }
        };
        let (a, b) = (at(start)?, at(end)?);
        let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e3) as f32;
        Ok(if b >= a { ms(b - a) } else { -ms(a - b) })
    }

    fn done(&self, s: StreamId) -> Result<bool, DevError> {
        let st = self.stream_of(s, "done")?;
        let q = lock(&st.q, "done")?;
        if q.capture.is_some() {
            return Err(DevError::new("done", "the stream is capturing a graph"));
        }
        if let Some(e) = &q.error {
            return Err(DevError::new(
                "done",
                format!("an earlier operation failed: {e}"),
            ));
        }
        Ok(q.ops.is_empty() && !q.busy)
    }

    fn sync(&self, s: StreamId) -> Result<(), DevError> {
        self.stream_of(s, "sync")?.idle("sync").map(drop)
    }

    fn begin_capture(&self, s: StreamId) -> Result<(), DevError> {
        let st = self.stream_of(s, "begin_capture")?;
        let mut q = lock(&st.q, "begin_capture")?;
        if q.capture.is_some() {
            return Err(DevError::new(
                "begin_capture",
                "the stream is already capturing",
            ));
        }
        q.capture = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self, s: StreamId) -> Result<GraphId, DevError> {
        let st = self.stream_of(s, "end_capture")?;
        let ops = lock(&st.q, "end_capture")?.capture.take();
        let ops = ops.ok_or_else(|| DevError::new("end_capture", "the stream is not capturing"))?;
        let mut graphs = lock(&self.graphs, "end_capture")?;
        graphs.push(Some(ops.into()));
        Ok(GraphId(graphs.len() - 1))
    }

    fn launch_graph(&self, g: GraphId, s: StreamId) -> Result<(), DevError> {
        let graph = lock(&self.graphs, "launch_graph")?
            .get(g.0)
            .cloned()
            .flatten();
        let graph =
            graph.ok_or_else(|| DevError::new("launch_graph", format!("no graph {}", g.0)))?;
        self.enqueue(s, "launch_graph", graph.iter().cloned())
    }

    fn drop_graph(&self, g: GraphId) -> Result<(), DevError> {
        match lock(&self.graphs, "drop_graph")?
            .get_mut(g.0)
            .and_then(Option::take)
        {
            Some(_) => Ok(()),
            None => Err(DevError::new("drop_graph", format!("no graph {}", g.0))),
        }
    }

    /// A memory file (both kinds: the emulated GPU's memory is the host's),
    /// opened by peers through `/proc/<pid>/fd/<fd>` as CUDA IPC would.
    fn share(&self, bytes: usize, kind: ShareKind) -> Result<(Shared, Vec<u8>), DevError> {
        let name = format!("collbench-emu{}-ipc", self.desc.ordinal);
        let body = bytes.max(64).next_multiple_of(SHARE_TRAILER);
        let seg = Segment::create(&name, body + SHARE_TRAILER)
            .map_err(|e| DevError::new("share", format!("{bytes} bytes of shared memory: {e}")))?;
        let fd = seg.fd().unwrap_or(-1);
        let handle = format!("emu {} {fd} {}", std::process::id(), seg.len());
        tracing::trace!(?kind, bytes, handle, "emulated IPC memory made");
        Ok((self.keep_shared("share", seg)?, handle.into_bytes()))
    }

    fn open_shared(&self, handle: &[u8]) -> Result<Shared, DevError> {
        let text = String::from_utf8_lossy(handle);
        let bad = || DevError::new("open_shared", format!("bad IPC handle '{text}'"));
        let mut words = text.split_whitespace();
        if words.next() != Some("emu") {
            return Err(bad());
        }
        let mut num = || {
            words
                .next()
                .and_then(|w| w.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let (pid, fd, len) = (num()?, num()?, num()?);
        // Numbers past their types are refused, never truncated.
        let (Ok(pid), Ok(fd), Ok(len)) =
            (u32::try_from(pid), i32::try_from(fd), usize::try_from(len))
        else {
            return Err(bad());
        };
        if len < 2 * SHARE_TRAILER || len % SHARE_TRAILER != 0 || words.next().is_some() {
            return Err(bad());
        }
        let seg = Segment::open(pid, fd, len).map_err(|e| DevError::new("open_shared", e))?;
        let me = std::process::id();
        if !openers(&seg).iter().any(|p| {
            p.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        }) {
            return Err(DevError::new(
                "open_shared",
                format!("more than {} processes open {text}", SHARE_TRAILER / 4),
            ));
        }
        self.keep_shared("open_shared", seg)
    }

    fn close_shared(&self, s: Shared) -> Result<(), DevError> {
        self.idle("close_shared")?;
        let mut shared = lock(&self.shared, "close_shared")?;
        // Made here: the processes that still have it open, if any.
        let holders = shared
            .get(&s.dev)
            .filter(|seg| seg.fd().is_some())
            .map(live_openers)
            .unwrap_or_default();
        match shared.remove(&s.dev) {
            // CUDA leaves freeing exported memory before every importer
            // closed it undefined: here it is an error, and the memory stays.
            Some(seg) if !holders.is_empty() => {
                shared.insert(s.dev, seg);
                Err(DevError::new(
                    "close_shared",
                    format!("{:#x} freed while process(es) {holders:?} still have it open (undefined on CUDA: cuMemFree before the importer's cuIpcCloseMemHandle)", s.dev),
                ))
            }
            Some(seg) => {
                if seg.fd().is_none() {
                    let me = std::process::id();
                    if let Some(p) = openers(&seg)
                        .iter()
                        .find(|p| p.load(Ordering::SeqCst) == me)
                    {
                        p.store(0, Ordering::SeqCst);
                    }
                }
                lock_any(registry()).remove(&s.dev);
                drop(seg);
                Ok(())
            }
            None => Err(DevError::new(
                "close_shared",
                format!("{:#x} is not shared memory of this device", s.dev),
            )),
        }
    }

    fn can_access_peer(&self, _peer: usize) -> bool {
        true
    }

    /// Every emulated device's memory is this process's: nothing to enable.
    fn enable_peer(&self, _peer: usize) -> Result<(), DevError> {
        Ok(())
    }

    fn bus_id(&self) -> String {
        format!("emu:{}", self.desc.ordinal)
    }
}

impl Drop for EmuDevice {
    /// Stops every stream (the operation in progress finishes; queued ones
    /// are dropped) and frees what is still allocated, as destroying a
    /// context does.
    fn drop(&mut self) {
        let streams = std::mem::take(
            self.streams
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (st, _) in &streams {
            lock_any(&st.q).shutdown = true;
            st.cv.notify_all();
        }
        for (_, h) in streams {
            let _ = h.join();
        }
        let mem = self.mem.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut reg = lock_any(registry());
        for (p, (layout, _)) in mem.blocks.drain() {
            reg.remove(&p);
            // SAFETY: every stream has stopped; `p` was allocated with `layout`.
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        }
    }
}
