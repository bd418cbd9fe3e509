//! The device interface the CUDA launcher is written against, and its two
//! implementations: [`real`], a thin layer over the CUDA driver API
//! (cudarc, loaded at run time), and [`emu`], the same `kernels/` sources
//! built by the host C++ compiler and run with every block as a thread, so
//! the launcher is proved on machines without a GPU.
//!
//! Handles are small integers into tables the device keeps; addresses are
//! `u64` (device virtual addresses on a GPU, host addresses on the emulated
//! device). Every method binds whatever per-thread state it needs (the CUDA
//! context), so any thread may call any method.

pub mod emu;
pub mod real;

use super::kernels::Variant;

/// A device address.
pub type DevPtr = u64;

/// An in-order queue of work on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(pub usize);

/// A point in a stream's work whose completion time can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub usize);

/// A kernel of a loaded variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuncId(pub usize);

/// A captured sequence of a stream's work, replayable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphId(pub usize);

/// Memory both the host and the kernels address: the watchdog reads it
/// while kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub host: *mut u8,
    pub dev: DevPtr,
    pub bytes: usize,
}

// SAFETY: the host pointer stays valid until `free_mapped`; access to it
// goes through volatile or atomic reads by whoever holds the `Mapped`.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

/// Where memory shared with another process of this node lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareKind {
    /// Device memory, opened by the peer through CUDA IPC (the peer's GPU
    /// reaches it over NVLink or PCIe peer-to-peer, or it is the same GPU).
    Device,
    /// Pinned host memory both processes map and register with their GPU:
    /// for pairs of GPUs without peer-to-peer access.
    Host,
}

/// Memory shared between processes: made here ([`Device::share`]) or opened
/// from a peer's handle ([`Device::open_shared`]). `host` is null where the
/// host cannot address it (device memory on a GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shared {
    pub dev: DevPtr,
    pub host: *mut u8,
    pub bytes: usize,
}

// SAFETY: as for `Mapped`: the pointers stay valid until `close_shared`.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

/// What the launcher needs to know of a device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceDesc {
    pub ordinal: usize,
    pub name: String,
    /// `sm_90` and the like; the emulated device says `emu`.
    pub arch: String,
    pub multiprocessors: u32,
    pub memory_bytes: u64,
    /// How many streams the device runs concurrently without false
    /// dependencies (CUDA_DEVICE_MAX_CONNECTIONS).
    pub connections: u32,
    /// The widest block a launch may ask for: 1024 threads on a GPU;
    /// `COLLBENCH_EMU_THREADS` on the emulated device.
    pub block_threads: u32,
}

/// A failed device call: which call, and what the device said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {detail}")]
pub struct DevError {
    pub call: String,
    pub detail: String,
}

impl DevError {
    pub fn new(call: impl Into<String>, detail: impl std::fmt::Display) -> DevError {
        DevError {
            call: call.into(),
            detail: detail.to_string(),
        }
    }
}

/// The launcher's view of one device.
pub trait Device: Send + Sync {
    fn desc(&self) -> &DeviceDesc;
    /// `"cuda"` or `"cuda-emu"`.
    fn kind(&self) -> &'static str;
    /// (free, total) bytes of device memory.
    fn mem_info(&self) -> Result<(u64, u64), DevError>;
    /// `bytes` of device memory (plain allocation, never managed memory),
    /// aligned to at least 256 bytes; contents undefined.
    fn alloc(&self, bytes: usize) -> Result<DevPtr, DevError>;
    fn free(&self, p: DevPtr) -> Result<(), DevError>;
    /// A hint that the loaded operation uses only the first `used` bytes
    /// of the allocation at `p`: the emulated device under AddressSanitizer
    /// makes the rest out of bounds for kernels until the next fence, so
    /// an access past an operation's data is caught at every size, not only
    /// past the sweep's largest. Nothing on a GPU.
    fn fence(&self, p: DevPtr, used: usize) {
        let _ = (p, used);
    }
    /// Zeroed host memory the kernels address too.
    fn alloc_mapped(&self, bytes: usize) -> Result<Mapped, DevError>;
    fn free_mapped(&self, m: Mapped) -> Result<(), DevError>;
    /// A stream that never waits implicitly for other streams.
    fn stream(&self) -> Result<StreamId, DevError>;
    /// The driver's handle of `s` (a `CUstream`), for libraries that take
    /// one (NCCL); `None` on the emulated device.
    fn raw_stream(&self, s: StreamId) -> Option<u64> {
        let _ = s;
        None
    }
    /// Copies `src` to `dst` after the stream's earlier work; returns once done.
    fn upload(&self, s: StreamId, dst: DevPtr, src: &[u8]) -> Result<(), DevError>;
    /// Copies `dst.len()` bytes from `src` after the stream's earlier work; returns once done.
    fn download(&self, s: StreamId, dst: &mut [u8], src: DevPtr) -> Result<(), DevError>;
    /// Sets `bytes` bytes at `dst` to `value`, in stream order (asynchronous).
    fn memset(&self, s: StreamId, dst: DevPtr, value: u8, bytes: usize) -> Result<(), DevError>;
    /// Copies `bytes` from `src` to `dst` on the device, in stream order
    /// (asynchronous): the reference a one-rank all-reduce is measured against.
    fn copy(&self, s: StreamId, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DevError>;
    /// The kernel `name` of `variant`, loaded (and built) on first use.
    fn function(&self, variant: Variant, name: &str) -> Result<FuncId, DevError>;
    /// How many blocks of `threads` threads of `f` one multiprocessor holds at once.
    fn occupancy(&self, f: FuncId, threads: u32) -> Result<u32, DevError>;
    /// Enqueues `f` on `grid` blocks of `threads` threads; `args` are the
    /// kernel's parameters, each as its bytes.
    fn launch(
        &self,
        f: FuncId,
        grid: u32,
        threads: u32,
        s: StreamId,
        args: &[&[u8]],
    ) -> Result<(), DevError>;
    fn event(&self) -> Result<EventId, DevError>;
    /// Records `e` at the current end of `s`'s work.
    fn record(&self, e: EventId, s: StreamId) -> Result<(), DevError>;
    /// Whether the work before `e`'s latest record has completed (never blocks).
    fn event_done(&self, e: EventId) -> Result<bool, DevError>;
    /// Milliseconds between two completed events.
    fn elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32, DevError>;
    /// Whether all of `s`'s work has completed (never blocks).
    fn done(&self, s: StreamId) -> Result<bool, DevError>;
    /// Blocks until all of `s`'s work has completed.
    fn sync(&self, s: StreamId) -> Result<(), DevError>;
    /// Starts recording `s`'s launches into a graph instead of running them.
    fn begin_capture(&self, s: StreamId) -> Result<(), DevError>;
    /// Ends the recording and makes the graph ready to launch.
    fn end_capture(&self, s: StreamId) -> Result<GraphId, DevError>;
    /// Enqueues every operation of `g` on `s`.
    fn launch_graph(&self, g: GraphId, s: StreamId) -> Result<(), DevError>;
    fn drop_graph(&self, g: GraphId) -> Result<(), DevError>;
    /// `bytes` of zeroed memory of `kind` that other processes of this node
    /// can open, and the handle (a few bytes) they open it with.
    fn share(&self, bytes: usize, kind: ShareKind) -> Result<(Shared, Vec<u8>), DevError>;
    /// Opens a peer process's memory from its handle.
    fn open_shared(&self, handle: &[u8]) -> Result<Shared, DevError>;
    /// Frees memory made by `share` or closes memory opened by `open_shared`.
    fn close_shared(&self, s: Shared) -> Result<(), DevError>;
    /// Whether kernels on this device reach `peer`'s memory directly
    /// (peer-to-peer), `peer` being a device ordinal as this process numbers them.
    fn can_access_peer(&self, peer: usize) -> bool;
    /// Lets kernels on this device read and write `peer`'s memory
    /// (peer-to-peer over NVLink or PCIe), `peer` a device ordinal as this
    /// process numbers them; already enabled is no error.
    fn enable_peer(&self, peer: usize) -> Result<(), DevError>;
    /// A name of the physical device that every process of the node reads
    /// the same, whatever its CUDA_VISIBLE_DEVICES (the PCI bus id).
    fn bus_id(&self) -> String;
}
