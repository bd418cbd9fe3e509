//! NCCL, loaded at run time with a loader of our own (`libnccl.so.2`, then
//! `libnccl.so`, then where the PyPI wheel `nvidia-nccl-cu12` puts it), so
//! `--engine nccl` runs NCCL's collectives on the very buffers and streams
//! the builtin engine uses. Every call's result is checked; nothing here
//! panics on NCCL's errors, and communicators are destroyed explicitly.

use crate::engine::types::{Collective, Counts, Dtype, ReduceOp};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

type Comm = *mut c_void;
type Stream = *mut c_void;
type Res = c_int;
/// `ncclRedOpCreatePreMulSum(op*, scalar*, datatype, residence, comm)`.
type PreMulCreate = unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, Comm) -> Res;
/// `ncclRedOpDestroy(op, comm)`.
type RedOpDestroy = unsafe extern "C" fn(c_int, Comm) -> Res;
/// A premulsum operator's (rank, NCCL type, scalar bits).
type PreMulKey = (usize, c_int, u64);
/// `ncclScalarHostImmediate`: the scalar is read from host memory at the call.
const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// The NCCL functions collbench calls.
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> Res,
    error_string: unsafe extern "C" fn(Res) -> *const c_char,
    comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> Res,
    comm_destroy: unsafe extern "C" fn(Comm) -> Res,
    comm_abort: unsafe extern "C" fn(Comm) -> Res,
    all_reduce:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    broadcast:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> Res,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> Res,
    reduce_scatter:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> Res,
    group_start: unsafe extern "C" fn() -> Res,
    group_end: unsafe extern "C" fn() -> Res,
    /// `ncclRedOpCreatePreMulSum` and `ncclRedOpDestroy` (NCCL 2.11 and later).
    premul: Option<(PreMulCreate, RedOpDestroy)>,
}

/// Why NCCL could not be loaded or one of its calls failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NcclError {
    /// No candidate loaded with every entry point; each `"where: why"`.
    #[error(
        "NCCL not found (looked for {}); install it (e.g. the nvidia-nccl-cu12 wheel) or put its folder on LD_LIBRARY_PATH",
        tried.join("; ")
    )]
    NotFound { tried: Vec<String> },
    /// The library lacks an entry point collbench calls.
    #[error("{symbol}: {reason}")]
    MissingSymbol { symbol: String, reason: String },
    /// `ncclGetVersion` failed.
    #[error("ncclGetVersion failed ({code})")]
    Version { code: i32 },
    /// An NCCL call returned an error: the call and NCCL's text for it.
    #[error("{call}: {what}")]
    Call { call: String, what: String },
    /// More ranks than NCCL's `int` holds.
    #[error("too many ranks for NCCL")]
    TooManyRanks,
    /// No communicator was made for this rank.
    #[error("no NCCL communicator for rank {0}")]
    NoCommunicator(usize),
}

/// A loaded NCCL.
pub struct Nccl {
    api: Api,
    /// Where it was loaded from.
    pub path: String,
    /// (major, minor, patch).
    pub version: (i32, i32, i32),
    _lib: Library,
}

// SAFETY: NCCL's entry points may be called from any thread; the library
// stays loaded for the value's life.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

/// Where the loader looks, in order: the sonames (the dynamic linker's
/// search path), then the wheel's folder under every Python site folder.
pub fn candidates() -> Vec<String> {
    let mut out = vec!["libnccl.so.2".to_string(), "libnccl.so".to_string()];
    let mut roots: Vec<PathBuf> = Vec::new();
    for base in ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"] {
        if let Ok(rd) = std::fs::read_dir(base) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("python3") {
                    roots.push(e.path().join("site-packages"));
                    roots.push(e.path().join("dist-packages"));
                }
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        if let Ok(rd) = std::fs::read_dir(PathBuf::from(home).join(".local/lib")) {
            roots.extend(rd.flatten().map(|e| e.path().join("site-packages")));
        }
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        if let Ok(rd) = std::fs::read_dir(PathBuf::from(venv).join("lib")) {
            roots.extend(rd.flatten().map(|e| e.path().join("site-packages")));
        }
    }
    for r in roots {
        let p = r.join("nvidia/nccl/lib/libnccl.so.2");
        if p.exists() {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    out
}

impl Nccl {
    /// The process's NCCL, loaded once; the error says where it looked.
    pub fn get() -> Result<&'static Nccl, NcclError> {
        static NCCL: OnceLock<Result<Nccl, NcclError>> = OnceLock::new();
        NCCL.get_or_init(|| Nccl::load(&candidates()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the first of `names` that opens and has every entry point.
    pub fn load(names: &[String]) -> Result<Nccl, NcclError> {
        let mut tried = Vec::new();
        for name in names {
            // SAFETY: loading NCCL runs its initialisers, which only set up
            // its own state.
            let (failed, reason) = match unsafe { Library::new(name) } {
                Ok(lib) => match Nccl::bind(lib, name) {
                    Ok(n) => {
                        tracing::info!(path = %name, version = %n.version_string(), "NCCL loaded");
                        return Ok(n);
                    }
                    Err(e) => (e.to_string(), e.to_string()),
                },
                Err(e) => (e.to_string(), super::nvrtc::dl_reason(&e)),
            };
            tracing::debug!(candidate = %name, reason = %reason, "NCCL candidate failed");
            tried.push(format!("{name}: {failed}"));
        }
        tracing::info!(candidates = names.len(), "NCCL not found");
        Err(NcclError::NotFound { tried })
    }

    fn bind(lib: Library, path: &str) -> Result<Nccl, NcclError> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the C signature of nccl.h that the
                // field's type spells out.
                *unsafe { lib.get($name) }.map_err(|e| NcclError::MissingSymbol {
                    symbol: String::from_utf8_lossy($name).into_owned(),
                    reason: e.to_string(),
                })?
            };
        }
        let api = Api {
            get_version: sym!(b"ncclGetVersion"),
            error_string: sym!(b"ncclGetErrorString"),
            comm_init_all: sym!(b"ncclCommInitAll"),
            comm_destroy: sym!(b"ncclCommDestroy"),
            comm_abort: sym!(b"ncclCommAbort"),
            all_reduce: sym!(b"ncclAllReduce"),
            broadcast: sym!(b"ncclBroadcast"),
            reduce: sym!(b"ncclReduce"),
            all_gather: sym!(b"ncclAllGather"),
            reduce_scatter: sym!(b"ncclReduceScatter"),
            send: sym!(b"ncclSend"),
            recv: sym!(b"ncclRecv"),
            group_start: sym!(b"ncclGroupStart"),
            group_end: sym!(b"ncclGroupEnd"),
            // SAFETY: the C signatures of nccl.h, as the types spell them.
            premul: unsafe {
                match (
                    lib.get::<PreMulCreate>(b"ncclRedOpCreatePreMulSum"),
                    lib.get::<RedOpDestroy>(b"ncclRedOpDestroy"),
                ) {
                    (Ok(c), Ok(d)) => Some((*c, *d)),
                    _ => None,
                }
            },
        };
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer.
        let r = unsafe { (api.get_version)(&mut v) };
        if r != 0 {
            return Err(NcclError::Version { code: r });
        }
        // 2.9 and later: major * 10000 + minor * 100 + patch.
        let version = if v >= 10000 {
            (v / 10000, v % 10000 / 100, v % 100)
        } else {
            (v / 1000, v % 1000 / 100, v % 100)
        };
        Ok(Nccl {
            api,
            path: path.to_string(),
            version,
            _lib: lib,
        })
    }

    pub fn version_string(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b}.{c}")
    }

    fn check(&self, call: &str, r: Res) -> Result<(), NcclError> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static string for any result code.
        let text = unsafe { (self.api.error_string)(r) };
        let what = if text.is_null() {
            format!("error {r}")
        } else {
            // SAFETY: a NUL-terminated static string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(NcclError::Call {
            call: call.to_string(),
            what,
        })
    }

    /// One communicator per device of `devices` (CUDA ordinals, each once),
    /// rank i on `devices[i]`.
    pub fn comms(&'static self, devices: &[i32]) -> Result<Comms, NcclError> {
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        let n = c_int::try_from(devices.len()).map_err(|_| NcclError::TooManyRanks)?;
        // SAFETY: `comms` holds one slot per device.
        let r = unsafe { (self.api.comm_init_all)(comms.as_mut_ptr(), n, devices.as_ptr()) };
        self.check("ncclCommInitAll", r)?;
        tracing::debug!(devices = ?devices, "NCCL communicators made");
        Ok(Comms {
            nccl: self,
            comms: comms.into_iter().map(|c| c as usize).collect(),
            aborted: std::sync::atomic::AtomicBool::new(false),
            premul_ops: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// NCCL's data type, if this version has it.
    pub fn dtype(&self, d: Dtype) -> Option<c_int> {
        let fp8 = self.version >= (2, 24, 0);
        Some(match d {
            Dtype::I8 => 0,
            Dtype::U8 => 1,
            Dtype::I32 => 2,
            Dtype::U32 => 3,
            Dtype::I64 => 4,
            Dtype::U64 => 5,
            Dtype::F16 => 6,
            Dtype::F32 => 7,
            Dtype::F64 => 8,
            Dtype::Bf16 => 9,
            Dtype::F8E4M3 if fp8 => 10,
            Dtype::F8E5M2 if fp8 => 11,
            _ => return None,
        })
    }
}

/// NCCL's built-in operator (its Max and Min are 2 and 3); None for
/// premulsum, which each communicator creates ([`Comms::op`]).
pub fn op(o: ReduceOp) -> Option<c_int> {
    match o {
        ReduceOp::Sum => Some(0),
        ReduceOp::Prod => Some(1),
        ReduceOp::Max => Some(2),
        ReduceOp::Min => Some(3),
        ReduceOp::Avg => Some(4),
        ReduceOp::PreMulSum => None,
    }
}

/// The communicators of a world, destroyed with it.
pub struct Comms {
    nccl: &'static Nccl,
    /// Handles as addresses (one per rank).
    comms: Vec<usize>,
    /// Set once the communicators were aborted (they are then gone).
    aborted: std::sync::atomic::AtomicBool,
    /// Premulsum operators made so far: (rank, dtype, scalar bits) -> op.
    premul_ops: std::sync::Mutex<Vec<(PreMulKey, c_int)>>,
}

/// One operation for NCCL: device addresses of the rank's send and receive views.
pub struct Call {
    pub coll: Collective,
    pub dtype: c_int,
    pub op: c_int,
    pub counts: Counts,
    pub root: usize,
    pub nranks: usize,
    pub rank: usize,
    pub send: u64,
    pub recv: u64,
    /// Bytes of one element.
    pub esize: usize,
}

impl Comms {
    /// Aborts every communicator (once): their uncompleted operations end,
    /// so a rank that never joins cannot hold the others forever.
    pub fn abort(&self) {
        if self.aborted.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        for &c in &self.comms {
            if c != 0 {
                // SAFETY: a communicator from ncclCommInitAll, aborted once.
                let _ = unsafe { (self.nccl.api.comm_abort)(c as Comm) };
            }
        }
    }

    /// Rank `rank`'s NCCL operator for `o` on `dtype` (an NCCL type);
    /// premulsum's is made once per (rank, type, scalar) with the scalar's
    /// bits (little-endian, the type's width) and kept until the
    /// communicators go.
    pub fn op(
        &self,
        rank: usize,
        o: ReduceOp,
        dtype: c_int,
        scalar: u64,
    ) -> Result<c_int, NcclError> {
        if let Some(op) = op(o) {
            return Ok(op);
        }
        let Some((create, _)) = self.nccl.api.premul else {
            return Err(NcclError::Call {
                call: "ncclRedOpCreatePreMulSum".into(),
                what: format!(
                    "NCCL {} has no premulsum (2.11 or later has)",
                    self.nccl.version_string()
                ),
            });
        };
        let key = (rank, dtype, scalar);
        let mut ops = self
            .premul_ops
            .lock()
            .map_err(|_| NcclError::NoCommunicator(rank))?;
        if let Some(&(_, op)) = ops.iter().find(|(k, _)| *k == key) {
            return Ok(op);
        }
        let comm = *self
            .comms
            .get(rank)
            .ok_or(NcclError::NoCommunicator(rank))? as Comm;
        let mut bytes = scalar.to_le_bytes();
        let mut op: c_int = 0;
        // SAFETY: out-pointer and an 8-byte scalar buffer (NCCL reads the
        // type's width of it, immediately: host-immediate residence).
        let r = unsafe {
            create(
                &mut op,
                bytes.as_mut_ptr().cast(),
                dtype,
                SCALAR_HOST_IMMEDIATE,
                comm,
            )
        };
        self.nccl.check("ncclRedOpCreatePreMulSum", r)?;
        ops.push((key, op));
        Ok(op)
    }

    /// Enqueues `c` on `stream` (a `CUstream`).
    pub fn enqueue(&self, c: &Call, stream: u64) -> Result<(), NcclError> {
        let api = &self.nccl.api;
        let comm = *self
            .comms
            .get(c.rank)
            .ok_or(NcclError::NoCommunicator(c.rank))? as Comm;
        let s = stream as Stream;
        let (send, recv) = (c.send as *const c_void, c.recv as *mut c_void);
        let (dt, op, r, block) = (c.dtype, c.op, c.root as c_int, c.counts.block);
        // SAFETY (every call below): the views hold the counts the layout
        // gives this collective, on the communicator's device; NCCL reads
        // and writes nothing else.
        let called = match c.coll {
            Collective::AllReduce => unsafe {
                (api.all_reduce)(send, recv, c.counts.recv, dt, op, comm, s)
            },
            Collective::Broadcast => unsafe {
                (api.broadcast)(send, recv, c.counts.recv, dt, r, comm, s)
            },
            Collective::Reduce => unsafe {
                (api.reduce)(send, recv, c.counts.send, dt, op, r, comm, s)
            },
            Collective::AllGather => unsafe { (api.all_gather)(send, recv, block, dt, comm, s) },
            Collective::ReduceScatter => unsafe {
                (api.reduce_scatter)(send, recv, block, dt, op, comm, s)
            },
            _ => return self.enqueue_grouped(c, comm, s),
        };
        self.nccl.check(c.coll.name(), called)
    }

    /// Enqueues `c`, a collective NCCL has no call of its own for, as the
    /// point-to-point operations (or reduces) of one group.
    fn enqueue_grouped(&self, c: &Call, comm: Comm, s: Stream) -> Result<(), NcclError> {
        let api = &self.nccl.api;
        let (send, recv) = (c.send as *const c_void, c.recv as *mut c_void);
        let (n, root, block) = (c.nranks, c.root, c.counts.block);
        // Element `off` of a view, and rank `k`'s block of one.
        let el = |base: u64, off: usize| (base + (off * c.esize) as u64) as *mut c_void;
        let at = |base: u64, k: usize| el(base, k * block);
        // SAFETY (every call below): as in `enqueue`.
        let send_to = |buf: *const c_void, count: usize, peer: usize| {
            let r = unsafe { (api.send)(buf, count, c.dtype, peer as c_int, comm, s) };
            self.nccl.check("ncclSend", r)
        };
        let recv_from = |buf: *mut c_void, count: usize, peer: usize| {
            let r = unsafe { (api.recv)(buf, count, c.dtype, peer as c_int, comm, s) };
            self.nccl.check("ncclRecv", r)
        };
        match c.coll {
            Collective::SendRecv => {
                let k = c.counts.recv;
                let (to, from) = crate::engine::types::send_recv_peers(c.rank, n, root);
                self.grouped(&mut || {
                    send_to(send, k, to)?;
                    recv_from(recv, k, from)
                })
            }
            Collective::AllToAll => self.grouped(&mut || {
                (0..n).try_for_each(|q| {
                    send_to(at(c.send, q), block, q)?;
                    recv_from(at(c.recv, q), block, q)
                })
            }),
            Collective::Gather => self.grouped(&mut || {
                if c.rank == root {
                    (0..n).try_for_each(|q| recv_from(at(c.recv, q), block, q))?;
                }
                send_to(send, block, root)
            }),
            Collective::Scatter => self.grouped(&mut || {
                if c.rank == root {
                    (0..n).try_for_each(|q| send_to(at(c.send, q), block, q))?;
                }
                recv_from(recv, block, root)
            }),
            // The v forms as PyTorch builds them: point-to-point in one
            // group (all-to-all-v, all-gather-v), a reduce per block
            // (reduce-scatter-v).
            Collective::AllToAllV => {
                let (out, inn) = (c.counts.sends(c.rank, n), c.counts.recvs(c.rank, n));
                self.grouped(&mut || {
                    (0..n).try_for_each(|q| {
                        send_to(el(c.send, out[q].0), out[q].1, q)?;
                        recv_from(el(c.recv, inn[q].0), inn[q].1, q)
                    })
                })
            }
            Collective::AllGatherV => {
                let blocks = c.counts.blocks(n);
                let mine = blocks[c.rank];
                // In place, this rank's block is where it belongs already.
                let in_place = el(c.recv, mine.0) as u64 == c.send;
                self.grouped(&mut || {
                    (0..n)
                        .filter(|&q| !(in_place && q == c.rank))
                        .try_for_each(|q| {
                            send_to(send, mine.1, q)?;
                            recv_from(el(c.recv, blocks[q].0), blocks[q].1, q)
                        })
                })
            }
            Collective::ReduceScatterV => {
                let blocks = c.counts.blocks(n);
                self.grouped(&mut || {
                    blocks.iter().enumerate().try_for_each(|(q, &(off, len))| {
                        // SAFETY: as above; non-roots' receive pointer is unused.
                        let r = unsafe {
                            (api.reduce)(
                                el(c.send, off),
                                recv,
                                len,
                                c.dtype,
                                c.op,
                                q as c_int,
                                comm,
                                s,
                            )
                        };
                        self.nccl.check("ncclReduce", r)
                    })
                })
            }
            Collective::AllReduce
            | Collective::Broadcast
            | Collective::Reduce
            | Collective::AllGather
            | Collective::ReduceScatter => self.enqueue(c, s as u64),
        }
    }

    /// Enqueues `calls` on `stream`: one as it is, several as one group
    /// (NCCL allows the point-to-point groups inside).
    pub fn enqueue_all(&self, calls: &[Call], stream: u64) -> Result<(), NcclError> {
        match calls {
            [one] => self.enqueue(one, stream),
            _ => self.grouped(&mut || calls.iter().try_for_each(|c| self.enqueue(c, stream))),
        }
    }

    /// Runs `f` between ncclGroupStart and ncclGroupEnd.
    fn grouped(&self, f: &mut dyn FnMut() -> Result<(), NcclError>) -> Result<(), NcclError> {
        let api = &self.nccl.api;
        // SAFETY: no arguments; pairs with the group end below.
        self.nccl
            .check("ncclGroupStart", unsafe { (api.group_start)() })?;
        let inner = f();
        // SAFETY: ends the group started above, also after a failed call.
        let end = self
            .nccl
            .check("ncclGroupEnd", unsafe { (api.group_end)() });
        inner.and(end)
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        if *self.aborted.get_mut() {
            return;
        }
        if let (Some((_, destroy)), Ok(ops)) = (self.nccl.api.premul, self.premul_ops.get_mut()) {
            for &((rank, _, _), op) in ops.iter() {
                if let Some(&c) = self.comms.get(rank) {
                    // SAFETY: an operator made on this communicator, destroyed once.
                    let _ = unsafe { destroy(op, c as Comm) };
                }
            }
        }
        for &c in &self.comms {
            if c != 0 {
                // SAFETY: a communicator from ncclCommInitAll, no longer used.
                let _ = unsafe { (self.nccl.api.comm_destroy)(c as Comm) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_message_naming_where_it_looked() {
        let err = Nccl::load(&["/nonexistent/libnccl.so.2".to_string()])
            .err()
            .expect("no NCCL there")
            .to_string();
        assert!(err.contains("NCCL not found"), "{err}");
        assert!(err.contains("/nonexistent/libnccl.so.2"), "{err}");
    }

    #[test]
    fn the_search_starts_with_the_sonames() {
        let c = candidates();
        assert_eq!(&c[..2], &["libnccl.so.2", "libnccl.so"]);
        assert!(c[2..]
            .iter()
            .all(|p| p.ends_with("nvidia/nccl/lib/libnccl.so.2")));
    }

    #[test]
    fn operators_follow_nccl_h() {
        // nccl.h: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4.
        assert_eq!(op(ReduceOp::Max), Some(2));
        assert_eq!(op(ReduceOp::Min), Some(3));
        assert_eq!(op(ReduceOp::Avg), Some(4));
        assert_eq!(op(ReduceOp::PreMulSum), None);
    }
}
