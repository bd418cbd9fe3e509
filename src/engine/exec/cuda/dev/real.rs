//! The real device: each method is one or two CUDA driver calls (cudarc's
//! thin `result`/`sys` layer, loaded at run time). Kernels come from the
//! NVRTC cache as PTX for the device's architecture. The primary context is
//! bound on every call, so any thread may use the device; streams never
//! wait implicitly for others; memory is plain `cuMemAlloc` memory (no
//! pools, no managed memory); cudarc's safe layer (and its event tracking,
//! which would serialize persistent kernels across streams) is not used.

use super::{
    DevError, DevPtr, Device, DeviceDesc, EventId, FuncId, GraphId, Mapped, ShareKind, Shared,
    StreamId,
};
use crate::engine::exec::cuda::kernels::{self, Arch, Cache, Code, Variant};
use crate::engine::exec::cuda::nvrtc::{Image, Nvrtc};
use crate::engine::transport::shm::Segment;
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::Mutex;

/// Bytes of each stream's pinned staging buffer.
const STAGE: usize = 4 << 20;

/// Concurrent hardware queues asked for before the context exists: more
/// streams than queues share them, and kernels of streams that share a
/// queue can wait for each other (a deadlock for persistent kernels).
pub const CONNECTIONS: u32 = 32;

#[derive(Default)]
struct Tables {
    streams: Vec<sys::CUstream>,
    /// Pinned host memory of each stream that its copies go through: a copy
    /// from pageable memory may wait for the whole device, which would
    /// deadlock with persistent kernels waiting on this rank.
    stages: Vec<usize>,
    events: Vec<sys::CUevent>,
    funcs: Vec<sys::CUfunction>,
    modules: HashMap<Variant, sys::CUmodule>,
    by_name: HashMap<(Variant, String), usize>,
    graphs: Vec<Option<sys::CUgraphExec>>,
    /// Devices whose primary context this one retained to reach their
    /// memory (peer access), released when it goes.
    peers: Vec<sys::CUdevice>,
    /// Memory shared with other processes, by device address.
    shared: HashMap<u64, SharedMem>,
    /// The stream that zeroes memory before it is shared (made on first use).
    share_stream: Option<StreamId>,
}

/// How a piece of shared memory came to be, so it is let go the same way.
enum SharedMem {
    /// `cuMemAlloc`ed here and exported.
    Exported,
    /// Another process's device memory, opened with `cuIpcOpenMemHandle`.
    Opened,
    /// A memory file mapped here and registered with the driver.
    Host(Segment),
}

/// What CUDA IPC maps at a time: device allocations shared with another
/// process are made whole granules of it.
pub(crate) const IPC_GRANULE: usize = 2 << 20;

/// Bytes of a CUDA IPC memory handle.
const IPC_HANDLE: usize = 64;

/// One GPU, through its primary context, retained at the first call that
/// needs it: a rank process touches only its own GPU, so the others get no
/// context of it (each costs device memory, and a GPU in exclusive-process
/// mode takes one process's only).
pub struct RealDevice {
    desc: DeviceDesc,
    dev: sys::CUdevice,
    ctx: std::sync::OnceLock<Result<Context, DevError>>,
    arch: Arch,
    t: Mutex<Tables>,
}

/// A retained primary context.
#[derive(Clone, Copy)]
struct Context(sys::CUcontext);

// SAFETY: a context handle may be made current on any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

// SAFETY: the driver's handles may be used from any thread once the
// context is bound, which every method does first; the tables are behind
// a mutex.
unsafe impl Send for RealDevice {}
unsafe impl Sync for RealDevice {}

fn err(call: &str, e: result::DriverError) -> DevError {
    let name = e.error_name().map(|c| c.to_string_lossy().into_owned());
    DevError::new(call, name.unwrap_or_else(|_| format!("{e:?}")))
}

fn check(call: &str, r: sys::CUresult) -> Result<(), DevError> {
    r.result().map_err(|e| err(call, e))
}

/// What the driver's compiler says of `image`, which failed to load: the
/// load again with an error log (the plain one gives only the error's
/// name, e.g. CUDA_ERROR_INVALID_PTX), as ": JIT log: ...", or nothing.
/// Only on that failure: loads that work take the plain call.
fn jit_log(image: &[u8]) -> String {
    let mut log = vec![0u8; 16 << 10];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // An integer option's value is the pointer's bits (cuda.h).
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the image is the one just given to cuModuleLoadData (NUL-
    // terminated PTX or a whole cubin); the log buffer outlives the call
    // and its size is what it holds; the context is bound.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS {
        // It loaded this time: nothing to say, and nothing kept.
        // SAFETY: loaded just now, handed to nobody.
        let _ = unsafe { sys::cuModuleUnload(module) };
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    match text.trim() {
        "" => String::new(),
        t => format!(": JIT log: {}", crate::units::shown(t, true)),
    }
}

/// Asks the driver for [`CONNECTIONS`] hardware queues unless the user set
/// `CUDA_DEVICE_MAX_CONNECTIONS`. The driver reads it when it initialises,
/// so this runs first thing in the process, before any thread exists.
pub fn prepare_env() {
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", CONNECTIONS.to_string());
        tracing::debug!(
            connections = CONNECTIONS,
            "CUDA_DEVICE_MAX_CONNECTIONS set for the driver"
        );
    }
}

/// The hardware queues a context gets: the variable's value (the driver's
/// default 8 when unset or unreadable), at most the hardware's 32.
fn connections() -> u32 {
    std::env::var("CUDA_DEVICE_MAX_CONNECTIONS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(8)
        .clamp(1, 32)
}

/// Every GPU the driver sees, opened once per process (a primary context
/// is costly to create, and the memory check and the world both need the
/// devices); `Err` says why there are none.
pub fn devices() -> Result<Vec<std::sync::Arc<RealDevice>>, DevError> {
    static OPENED: std::sync::OnceLock<Result<Vec<std::sync::Arc<RealDevice>>, DevError>> =
        std::sync::OnceLock::new();
    OPENED.get_or_init(open_all).clone()
}

fn open_all() -> Result<Vec<std::sync::Arc<RealDevice>>, DevError> {
    let probed = super::super::device::probe().map_err(|why| DevError::new("probe", why))?;
    let connections = connections();
    tracing::debug!(
        connections,
        "hardware queues per context (CUDA_DEVICE_MAX_CONNECTIONS)"
    );
    let mut out = Vec::new();
    for d in probed.devices {
        let dev = result::device::get(d.ordinal as i32).map_err(|e| err("cuDeviceGet", e))?;
        let arch: Arch = d.arch.parse().map_err(|e: kernels::ArchError| {
            DevError::new("architecture", format!("{}: {}", d.arch, e.0))
        })?;
        tracing::info!(
            ordinal = d.ordinal,
            name = %d.name,
            %arch,
            sms = d.multiprocessors,
            memory_bytes = d.memory_bytes,
            connections,
            "GPU opened"
        );
        out.push(std::sync::Arc::new(RealDevice {
            desc: DeviceDesc {
                ordinal: d.ordinal,
                name: d.name,
                arch: d.arch,
                multiprocessors: d.multiprocessors,
                memory_bytes: d.memory_bytes,
                connections,
                block_threads: 1024,
            },
            dev,
            ctx: std::sync::OnceLock::new(),
            arch,
            t: Mutex::new(Tables::default()),
        }));
    }
    Ok(out)
}

impl RealDevice {
    fn bind(&self) -> Result<(), DevError> {
        let ctx = self
            .ctx
            .get_or_init(|| {
                // SAFETY: `dev` came from cuDeviceGet.
                let ctx = unsafe { result::primary_ctx::retain(self.dev) }
                    .map_err(|e| err("cuDevicePrimaryCtxRetain", e))?;
                tracing::debug!(ordinal = self.desc.ordinal, "GPU context retained");
                Ok(Context(ctx))
            })
            .clone()?;
        // SAFETY: the context was retained above and is released only on drop.
        unsafe { result::ctx::set_current(ctx.0) }.map_err(|e| err("cuCtxSetCurrent", e))
    }

    fn tables(&self) -> Result<std::sync::MutexGuard<'_, Tables>, DevError> {
        self.t
            .lock()
            .map_err(|_| DevError::new("device tables", "poisoned by a panic"))
    }

    fn stream_of(&self, s: StreamId) -> Result<sys::CUstream, DevError> {
        self.tables()?
            .streams
            .get(s.0)
            .copied()
            .ok_or_else(|| DevError::new("stream", format!("no stream {}", s.0)))
    }

    /// A stream and its pinned staging buffer.
    fn staged(&self, s: StreamId) -> Result<(sys::CUstream, *mut u8), DevError> {
        let t = self.tables()?;
        match (t.streams.get(s.0), t.stages.get(s.0)) {
            (Some(&st), Some(&stage)) => Ok((st, stage as *mut u8)),
            _ => Err(DevError::new("stream", format!("no stream {}", s.0))),
        }
    }

    fn event_of(&self, e: EventId) -> Result<sys::CUevent, DevError> {
        self.tables()?
            .events
            .get(e.0)
            .copied()
            .ok_or_else(|| DevError::new("event", format!("no event {}", e.0)))
    }

    fn module(&self, variant: Variant) -> Result<sys::CUmodule, DevError> {
        if let Some(&m) = self.tables()?.modules.get(&variant) {
            return Ok(m);
        }
        let nvrtc = Nvrtc::get().map_err(|e| DevError::new("NVRTC", e))?;
        // Machine code for this GPU where NVRTC makes it (the driver then
        // compiles nothing at load); PTX where it does not, or where the
        // driver refuses the cubin (one newer than the driver knows).
        let code = Code::for_gpu(nvrtc.makes_cubins());
        let m = match self.load_module(nvrtc, variant, code) {
            Err(e) if code == Code::Cubin => {
                tracing::info!(%variant, error = %e, "the cubin did not load: loading PTX instead");
                self.load_module(nvrtc, variant, Code::Ptx)?
            }
            loaded => loaded?,
        };
        let mut t = self.tables()?;
        match t.modules.get(&variant) {
            // Another rank's thread loaded it meanwhile: theirs is kept,
            // ours unloaded (it would hold device memory for the run).
            Some(&kept) => {
                drop(t);
                // SAFETY: loaded above on this bound context, never handed out.
                let _ = unsafe { sys::cuModuleUnload(m) };
                Ok(kept)
            }
            None => {
                t.modules.insert(variant, m);
                Ok(m)
            }
        }
    }

    /// Compiles (or takes from the cache) `variant` as `code` and loads it.
    fn load_module(
        &self,
        nvrtc: &Nvrtc,
        variant: Variant,
        code: Code,
    ) -> Result<sys::CUmodule, DevError> {
        let (image, origin) = Cache::process()
            .get_or_compile(
                nvrtc,
                kernels::source(),
                &variant.program_name(),
                &variant.options(self.arch, code),
                self.arch,
            )
            .map_err(|e| DevError::new(format!("compiling {variant}"), e.detail()))?;
        // PTX is text the driver reads to its NUL; a cubin's ELF header
        // says its size.
        let bytes: std::borrow::Cow<[u8]> = match &image {
            Image::Ptx(text) => CString::new(text.as_str())
                .map_err(|_| DevError::new("cuModuleLoadData", "PTX holds a NUL byte"))?
                .into_bytes_with_nul()
                .into(),
            Image::Cubin(b) => b.as_slice().into(),
        };
        self.bind()?;
        // SAFETY: a NUL-terminated PTX image or a whole cubin, alive for
        // the call; the context is bound.
        let m = unsafe { result::module::load_data(bytes.as_ptr().cast()) }.map_err(|e| {
            let mut e = err("cuModuleLoadData", e);
            e.detail.push_str(&jit_log(&bytes));
            e
        })?;
        tracing::debug!(
            ordinal = self.desc.ordinal,
            %variant,
            arch = %self.arch,
            kind = image.kind(),
            origin = ?origin,
            "kernel module loaded"
        );
        Ok(m)
    }
}

impl Device for RealDevice {
    fn desc(&self) -> &DeviceDesc {
        &self.desc
    }

    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn mem_info(&self) -> Result<(u64, u64), DevError> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(|e| err("cuMemGetInfo", e))?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr, DevError> {
        self.bind()?;
        // SAFETY: the context is bound; the memory is initialised before use.
        unsafe { result::malloc_sync(bytes.max(256)) }.map_err(|e| err("cuMemAlloc", e))
    }

    fn free(&self, p: DevPtr) -> Result<(), DevError> {
        self.bind()?;
        // SAFETY: `p` came from `alloc`; the launcher frees only idle memory.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(p) })
    }

    fn alloc_mapped(&self, bytes: usize) -> Result<Mapped, DevError> {
        self.bind()?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: the context is bound.
        let host = unsafe { result::malloc_host(bytes.max(64), flags) }
            .map_err(|e| err("cuMemHostAlloc", e))?;
        // SAFETY: `host` holds `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes.max(64)) };
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` came from cuMemHostAlloc with DEVICEMAP.
        if let Err(e) = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0)
        }) {
            // SAFETY: allocated above and handed to nobody.
            let _ = unsafe { sys::cuMemFreeHost(host) };
            return Err(e);
        }
        Ok(Mapped {
            host: host.cast(),
            dev,
            bytes,
        })
    }

    fn free_mapped(&self, m: Mapped) -> Result<(), DevError> {
        self.bind()?;
        // SAFETY: `m.host` came from cuMemHostAlloc.
        check("cuMemFreeHost", unsafe {
            sys::cuMemFreeHost(m.host.cast())
        })
    }

    fn stream(&self) -> Result<StreamId, DevError> {
        self.bind()?;
        let s = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| err("cuStreamCreate", e))?;
        // SAFETY: the context is bound.
        let stage = match unsafe { result::malloc_host(STAGE, 0) } {
            Ok(stage) => stage,
            Err(e) => {
                // SAFETY: created above, used by nothing yet.
                let _ = unsafe { sys::cuStreamDestroy_v2(s) };
                return Err(err("cuMemHostAlloc", e));
            }
        };
        let mut t = self.tables()?;
        t.streams.push(s);
        t.stages.push(stage as usize);
        Ok(StreamId(t.streams.len() - 1))
    }

    fn raw_stream(&self, s: StreamId) -> Option<u64> {
        self.stream_of(s).ok().map(|st| st as u64)
    }

    fn upload(&self, s: StreamId, dst: DevPtr, src: &[u8]) -> Result<(), DevError> {
        let (st, stage) = self.staged(s)?;
        for (i, part) in src.chunks(STAGE).enumerate() {
            // SAFETY: the stage holds STAGE bytes and the stream is idle
            // (synchronised after every chunk), so nothing reads it now.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), stage, part.len()) };
            self.bind()?;
            // SAFETY: pinned source of `part.len()` bytes, device destination inside `dst`.
            check("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst + (i * STAGE) as u64, stage.cast(), part.len(), st)
            })?;
            self.sync(s)?;
        }
        Ok(())
    }

    fn download(&self, s: StreamId, dst: &mut [u8], src: DevPtr) -> Result<(), DevError> {
        let (st, stage) = self.staged(s)?;
        for (i, part) in dst.chunks_mut(STAGE).enumerate() {
            self.bind()?;
            // SAFETY: pinned destination of `part.len()` bytes.
            check("cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2(stage.cast(), src + (i * STAGE) as u64, part.len(), st)
            })?;
            self.sync(s)?;
            // SAFETY: the copy into the stage completed.
            unsafe { std::ptr::copy_nonoverlapping(stage, part.as_mut_ptr(), part.len()) };
        }
        Ok(())
    }

    fn memset(&self, s: StreamId, dst: DevPtr, value: u8, bytes: usize) -> Result<(), DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // SAFETY: `dst` holds `bytes` bytes of device memory.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst, value, bytes, st)
        })
    }

    fn copy(&self, s: StreamId, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // SAFETY: both ranges are device memory of at least `bytes`.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, st)
        })
    }

    fn function(&self, variant: Variant, name: &str) -> Result<FuncId, DevError> {
        if let Some(&i) = self.tables()?.by_name.get(&(variant, name.to_string())) {
            return Ok(FuncId(i));
        }
        let m = self.module(variant)?;
        let cname = CString::new(name).map_err(|_| DevError::new("kernel name", name))?;
        self.bind()?;
        // SAFETY: a module of this context and a NUL-terminated name.
        let f = unsafe { result::module::get_function(m, cname) }
            .map_err(|e| err(&format!("cuModuleGetFunction({name})"), e))?;
        let mut t = self.tables()?;
        t.funcs.push(f);
        let i = t.funcs.len() - 1;
        t.by_name.insert((variant, name.to_string()), i);
        Ok(FuncId(i))
    }

    fn occupancy(&self, f: FuncId, threads: u32) -> Result<u32, DevError> {
        let func = self.tables()?.funcs.get(f.0).copied();
        let func = func.ok_or_else(|| DevError::new("occupancy", "unknown function"))?;
        self.bind()?;
        // SAFETY: a function of this context.
        let n = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(func, threads as i32, 0)
        }
        .map_err(|e| err("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
        Ok(n.max(0) as u32)
    }

    fn launch(
        &self,
        f: FuncId,
        grid: u32,
        threads: u32,
        s: StreamId,
        args: &[&[u8]],
    ) -> Result<(), DevError> {
        let (func, st) = {
            let t = self.tables()?;
            let func = t.funcs.get(f.0).copied();
            let st = t.streams.get(s.0).copied();
            (func, st)
        };
        let (Some(func), Some(st)) = (func, st) else {
            return Err(DevError::new(
                "cuLaunchKernel",
                "unknown function or stream",
            ));
        };
        self.bind()?;
        // The driver copies the parameters before cuLaunchKernel returns.
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.as_ptr() as *mut c_void).collect();
        // SAFETY: each parameter points at bytes of the kernel's argument
        // type (the launcher builds them from the ABI twins).
        unsafe { result::launch_kernel(func, (grid, 1, 1), (threads, 1, 1), 0, st, &mut params) }
            .map_err(|e| err("cuLaunchKernel", e))
    }

    fn event(&self) -> Result<EventId, DevError> {
        self.bind()?;
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| err("cuEventCreate", e))?;
        let mut t = self.tables()?;
        t.events.push(e);
        Ok(EventId(t.events.len() - 1))
    }

    fn record(&self, e: EventId, s: StreamId) -> Result<(), DevError> {
        let (ev, st) = (self.event_of(e)?, self.stream_of(s)?);
        self.bind()?;
        // SAFETY: handles of this context.
        unsafe { result::event::record(ev, st) }.map_err(|e| err("cuEventRecord", e))
    }

    fn event_done(&self, e: EventId) -> Result<bool, DevError> {
        let ev = self.event_of(e)?;
        self.bind()?;
        // SAFETY: an event of this context.
        match unsafe { sys::cuEventQuery(ev) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check("cuEventQuery", other).map(|_| false),
        }
    }

    fn elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32, DevError> {
        let (a, b) = (self.event_of(start)?, self.event_of(end)?);
        self.bind()?;
        // SAFETY: handles of this context.
        unsafe { result::event::elapsed(a, b) }.map_err(|e| err("cuEventElapsedTime", e))
    }

    fn done(&self, s: StreamId) -> Result<bool, DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // SAFETY: a stream of this context.
        match unsafe { sys::cuStreamQuery(st) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check("cuStreamQuery", other).map(|_| false),
        }
    }

    fn sync(&self, s: StreamId) -> Result<(), DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // SAFETY: a stream of this context.
        unsafe { result::stream::synchronize(st) }.map_err(|e| err("cuStreamSynchronize", e))
    }

    fn begin_capture(&self, s: StreamId) -> Result<(), DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // Relaxed: other ranks' threads may allocate while this one captures.
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a stream of this context.
        unsafe { result::stream::begin_capture(st, mode) }
            .map_err(|e| err("cuStreamBeginCapture", e))
    }

    fn end_capture(&self, s: StreamId) -> Result<GraphId, DevError> {
        let st = self.stream_of(s)?;
        self.bind()?;
        // SAFETY: a stream of this context that is capturing.
        let g =
            unsafe { result::stream::end_capture(st) }.map_err(|e| err("cuStreamEndCapture", e))?;
        // SAFETY: `g` is the graph just captured.
        let exec = unsafe { result::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)) };
        // SAFETY: the instantiated graph no longer needs its template.
        let _ = unsafe { result::graph::destroy(g) };
        let exec = exec.map_err(|e| err("cuGraphInstantiate", e))?;
        // Uploaded now, in stream order before any timing event: else the
        // first launch uploads it, inside the first timed iterations.
        // SAFETY: the graph just instantiated and the stream it was captured on.
        if let Err(e) = unsafe { result::graph::upload(exec, st) } {
            // SAFETY: the graph is ours and was never launched.
            let _ = unsafe { result::graph::exec_destroy(exec) };
            return Err(err("cuGraphUpload", e));
        }
        let mut t = self.tables()?;
        t.graphs.push(Some(exec));
        Ok(GraphId(t.graphs.len() - 1))
    }

    fn launch_graph(&self, g: GraphId, s: StreamId) -> Result<(), DevError> {
        let st = self.stream_of(s)?;
        let exec = self.tables()?.graphs.get(g.0).copied().flatten();
        let exec = exec.ok_or_else(|| DevError::new("cuGraphLaunch", "unknown graph"))?;
        self.bind()?;
        // SAFETY: handles of this context.
        unsafe { result::graph::launch(exec, st) }.map_err(|e| err("cuGraphLaunch", e))
    }

    fn drop_graph(&self, g: GraphId) -> Result<(), DevError> {
        let exec = self.tables()?.graphs.get_mut(g.0).and_then(Option::take);
        if let Some(exec) = exec {
            self.bind()?;
            // SAFETY: an instantiated graph of this context, no longer launched.
            unsafe { result::graph::exec_destroy(exec) }
                .map_err(|e| err("cuGraphExecDestroy", e))?;
        }
        Ok(())
    }

    fn share(&self, bytes: usize, kind: ShareKind) -> Result<(Shared, Vec<u8>), DevError> {
        if kind == ShareKind::Host {
            // Whole pages: host memory is registered with the driver page by page.
            let bytes = bytes.max(256).next_multiple_of(4096);
            let seg = Segment::create("collbench-cuda-ipc", bytes).map_err(|e| {
                DevError::new("share", format!("{bytes} bytes of host memory: {e}"))
            })?;
            let handle = format!(
                "cudahost {} {} {}",
                std::process::id(),
                seg.fd().unwrap_or(-1),
                seg.len()
            );
            return Ok((self.register_host("share", seg)?, handle.into_bytes()));
        }
        // A whole IPC granule: a peer that opens the handle maps the
        // granule the allocation lies in, and must not reach this
        // process's other allocations through it.
        let bytes = bytes.max(256).next_multiple_of(IPC_GRANULE);
        let p = self.alloc(bytes)?;
        let zeroed = (|| {
            let made = self.tables()?.share_stream;
            let s = match made {
                Some(s) => s,
                None => {
                    let s = self.stream()?;
                    self.tables()?.share_stream = Some(s);
                    s
                }
            };
            self.memset(s, p, 0, bytes)?;
            self.sync(s)
        })();
        // SAFETY: an all-zero handle is a valid value to be overwritten.
        let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        let exported = zeroed.and_then(|()| {
            self.bind()?;
            // SAFETY: `p` is a live cuMemAlloc allocation of this context.
            check("cuIpcGetMemHandle", unsafe {
                sys::cuIpcGetMemHandle(&mut h, p)
            })
        });
        if let Err(e) = exported {
            let _ = self.free(p);
            return Err(e);
        }
        let raw: [u8; IPC_HANDLE] = h.reserved.map(|c| c as u8);
        self.tables()?.shared.insert(p, SharedMem::Exported);
        let handle = format!("cudadev {bytes} {}", hex(&raw));
        Ok((
            Shared {
                dev: p,
                host: std::ptr::null_mut(),
                bytes,
            },
            handle.into_bytes(),
        ))
    }

    fn open_shared(&self, handle: &[u8]) -> Result<Shared, DevError> {
        let text = String::from_utf8_lossy(handle);
        let bad = || DevError::new("open_shared", format!("bad IPC handle '{text}'"));
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["cudahost", pid, fd, len] => {
                let (pid, fd, len) = (
                    pid.parse::<u32>().map_err(|_| bad())?,
                    fd.parse::<i32>().map_err(|_| bad())?,
                    len.parse::<usize>().map_err(|_| bad())?,
                );
                let seg =
                    Segment::open(pid, fd, len).map_err(|e| DevError::new("open_shared", e))?;
                self.register_host("open_shared", seg)
            }
            ["cudadev", len, raw] => {
                let bytes = len.parse::<usize>().map_err(|_| bad())?;
                let raw: [u8; IPC_HANDLE] =
                    unhex(raw).and_then(|v| v.try_into().ok()).ok_or_else(bad)?;
                // SAFETY: an all-zero handle is a valid value to be overwritten.
                let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
                h.reserved = raw.map(|b| b as std::ffi::c_char);
                self.bind()?;
                let mut p: sys::CUdeviceptr = 0;
                let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
                // SAFETY: a handle another process exported; the context is bound.
                check("cuIpcOpenMemHandle", unsafe {
                    sys::cuIpcOpenMemHandle_v2(&mut p, h, flags)
                })?;
                self.tables()?.shared.insert(p, SharedMem::Opened);
                Ok(Shared {
                    dev: p,
                    host: std::ptr::null_mut(),
                    bytes,
                })
            }
            _ => Err(bad()),
        }
    }

    fn close_shared(&self, s: Shared) -> Result<(), DevError> {
        let how = self.tables()?.shared.remove(&s.dev);
        self.bind()?;
        match how {
            // SAFETY: our own allocation; the launcher frees only idle memory.
            Some(SharedMem::Exported) => check("cuMemFree", unsafe { sys::cuMemFree_v2(s.dev) }),
            // SAFETY: opened by cuIpcOpenMemHandle in this context.
            Some(SharedMem::Opened) => check("cuIpcCloseMemHandle", unsafe {
                sys::cuIpcCloseMemHandle(s.dev)
            }),
            Some(SharedMem::Host(seg)) => {
                // SAFETY: registered in register_host; unmapped only after this.
                let r = check("cuMemHostUnregister", unsafe {
                    sys::cuMemHostUnregister(seg.as_ptr().cast())
                });
                drop(seg);
                r
            }
            None => Err(DevError::new(
                "close_shared",
                format!("{:#x} is not shared memory of this device", s.dev),
            )),
        }
    }

    fn can_access_peer(&self, peer: usize) -> bool {
        if peer == self.desc.ordinal {
            return true;
        }
        let Ok(other) = result::device::get(peer as i32) else {
            return false;
        };
        let mut can: std::ffi::c_int = 0;
        // SAFETY: two device handles from cuDeviceGet.
        let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.dev, other) };
        r == sys::CUresult::CUDA_SUCCESS && can != 0
    }

    fn enable_peer(&self, peer: usize) -> Result<(), DevError> {
        if peer == self.desc.ordinal {
            return Ok(());
        }
        let other = result::device::get(peer as i32).map_err(|e| err("cuDeviceGet", e))?;
        if self.tables()?.peers.contains(&other) {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `other` came from cuDeviceGet; the retain is released on drop.
        let peer_ctx = unsafe { result::primary_ctx::retain(other) }
            .map_err(|e| err("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: this device's context is current; `peer_ctx` is live.
        let r = unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, 0) };
        if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            if let Err(e) = check("cuCtxEnablePeerAccess", r) {
                // Not remembered: a later world asks again, and gets the
                // same answer rather than a pair it cannot use.
                // SAFETY: retained just above.
                let _ = unsafe { result::primary_ctx::release(other) };
                return Err(e);
            }
        }
        self.tables()?.peers.push(other);
        tracing::debug!(ordinal = self.desc.ordinal, peer, "peer access enabled");
        Ok(())
    }

    fn bus_id(&self) -> String {
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer holds 32 bytes, as passed.
        let r = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, self.dev) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return format!("ordinal:{}", self.desc.ordinal);
        }
        // SAFETY: the driver wrote a NUL-terminated string into the buffer.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .to_lowercase()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl RealDevice {
    /// Registers a mapped memory file with the driver (pinned, mapped into
    /// the device's address space) and keeps it.
    fn register_host(&self, call: &str, seg: Segment) -> Result<Shared, DevError> {
        self.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the mapping is `seg.len()` bytes and outlives the registration
        // (unregistered in close_shared before the segment is dropped).
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(seg.as_ptr().cast(), seg.len(), flags)
        })?;
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: registered just now with DEVICEMAP.
        if let Err(e) = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, seg.as_ptr().cast(), 0)
        }) {
            // Unregistered before the mapping goes (with `seg`): a later
            // registration at its address would find it taken.
            // SAFETY: registered above, used by nothing.
            let _ = unsafe { sys::cuMemHostUnregister(seg.as_ptr().cast()) };
            return Err(e);
        }
        let s = Shared {
            dev,
            host: seg.as_ptr(),
            bytes: seg.len(),
        };
        tracing::debug!(
            call,
            bytes = s.bytes,
            "pinned host memory shared with peers"
        );
        self.tables()?.shared.insert(dev, SharedMem::Host(seg));
        Ok(s)
    }
}

impl Drop for RealDevice {
    fn drop(&mut self) {
        // A device never bound has no context, and nothing of it to free.
        if !matches!(self.ctx.get(), Some(Ok(_))) || self.bind().is_err() {
            return;
        }
        if let Ok(t) = self.t.get_mut() {
            // SAFETY: every handle belongs to this context and nothing runs any more.
            unsafe {
                for &s in &t.streams {
                    let _ = sys::cuStreamSynchronize(s);
                    let _ = sys::cuStreamDestroy_v2(s);
                }
                for &p in &t.stages {
                    let _ = sys::cuMemFreeHost(p as *mut c_void);
                }
                for &e in &t.events {
                    let _ = sys::cuEventDestroy_v2(e);
                }
                for g in t.graphs.iter().flatten() {
                    let _ = sys::cuGraphExecDestroy(*g);
                }
                for &m in t.modules.values() {
                    let _ = sys::cuModuleUnload(m);
                }
                for &d in &t.peers {
                    let _ = result::primary_ctx::release(d);
                }
            }
        }
        // SAFETY: retained once, in `bind`.
        let _ = unsafe { result::primary_ctx::release(self.dev) };
    }
}
