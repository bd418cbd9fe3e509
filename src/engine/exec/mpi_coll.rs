//! The `mpi` engine: one operation of a collective run through the MPI
//! library's own collectives (MPI-3 non-blocking `MPI_I*` calls) on a rank's
//! host buffers, so collbench can show MPI beside its builtin engine and check
//! MPI's results with the same bit-exact verification.
//!
//! What runs, per collective (`counts` from [`Collective::counts`]):
//!
//! | collective     | MPI call                                   | in-place (NCCL's layout)                                 |
//! |----------------|--------------------------------------------|----------------------------------------------------------|
//! | all-reduce     | `MPI_Iallreduce`, `counts.recv`            | `MPI_IN_PLACE` as sendbuf                                |
//! | all-gather     | `MPI_Iallgather`, `block` per rank         | `MPI_IN_PLACE` (own block already at `rank * block`)     |
//! | reduce-scatter | `MPI_Ireduce_scatter_block`, `block`       | `MPI_IN_PLACE`; MPI leaves the block at offset 0, so it is moved to `rank * block` afterwards |
//! | broadcast      | `MPI_Ibcast` on the receive view           | one buffer: nothing to do (out-of-place, the root copies send to receive first) |
//! | reduce         | `MPI_Ireduce` to `root`                    | `MPI_IN_PLACE` as the root's sendbuf                     |
//! | all-to-all     | `MPI_Ialltoall`, `block` per peer          | `MPI_IN_PLACE` as sendbuf                                |
//! | gather         | `MPI_Igather` to `root`                    | `MPI_IN_PLACE` as the root's sendbuf                     |
//! | scatter        | `MPI_Iscatter` from `root`                 | `MPI_IN_PLACE` as the root's recvbuf                     |
//! | send-recv      | `MPI_Irecv` from rank-1, `MPI_Isend` to rank+1 | staged: the send view is copied aside first (MPI-3 has no non-blocking in-place send-recv) |
//!
//! `MPI_IN_PLACE` is not exported by rsmpi and its value differs between
//! implementations (Open MPI `(void*)1`, MPICH and its derivatives
//! `(void*)-1`), so it is chosen from the library's version string at run
//! time. With an unknown library, or with `COLLBENCH_MPI_IN_PLACE=stage`,
//! every in-place call is staged instead: the send view is copied into an
//! aligned buffer of its own and the out-of-place call runs from there.
//!
//! Types: the eight MPI has (`MPI_INT8_T` ... `MPI_UINT64_T`, `MPI_FLOAT`,
//! `MPI_DOUBLE`). Collectives that only move data carry half, bfloat16 and
//! fp8 as same-sized unsigned integers (bits are bits); reducing them is
//! refused by [`unsupported`], since MPI-3 has no such types. So are integer
//! sums the library saturates where collbench wraps (two's complement, like
//! NCCL): Open MPI 4.1's `op/avx` component saturates 8-bit sums
//! (open-mpi/ompi#8045), which would fail every int8/uint8 sum check; this
//! is probed once and the reason names the remedy (`OMPI_MCA_op=^avx`).
//!
//! Avg: MPI has no average. It runs as `MPI_SUM` followed, on the ranks that
//! hold a result, by the builtin engine's own finishing step
//! ([`elem::finish`]), the same division the builtin engine applies once to the
//! fully reduced value; `check`'s inputs keep every partial sum exact, so the
//! results verify exactly as the builtin engine's do.
//!
//! Waiting: the requests are polled with `MPI_Testall` (which also drives
//! MPI's progress), spinning a little and then yielding between polls, so the
//! wait honours `timeout` and `abort`. A non-blocking collective that never
//! completes can be neither cancelled nor freed (MPI forbids both), and MPI
//! may still write into its buffers later. So on a timeout or an abort the
//! request is leaked together with the memory it refers to: the caller's send
//! and receive buffers are swapped for fresh ones of the same size and the old
//! ones are never freed. If the peers join late, MPI completes the leaked
//! operation as it progresses other calls on the communicator.
//!
//! All MPI calls of an operation come from the calling thread; the caller
//! owns MPI's thread-safety level (single, or funneled through one thread).

mod library;

use super::host::ExecError;
use super::mem::HostBuf;
use super::runner::OpDesc;
use crate::engine::algo::{Layout, Slice};
use crate::engine::elem;
use crate::engine::types::{Collective, Counts, Dtype, ReduceOp};
use library::{bits_type, check, in_place_sentinel, numeric_type, saturating_sum};
use mpi::collective::SystemOperation;
use mpi::ffi;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{AsRaw, Communicator};
use std::ffi::{c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

/// Tag of the point-to-point messages of send-recv.
const SENDRECV_TAG: c_int = 0x6362;

/// Polls before the wait starts yielding the core between polls.
const SPIN_POLLS: u32 = 1 << 10;

/// Polls between two looks at the clock and the abort flag.
const CHECK_EVERY: u32 = 64;

/// Why MPI cannot run a case (the harness skips it with this reason as a note).
/// Every collective, operator and placement is supported for the types MPI
/// has; collectives that only move data take every type. Once MPI is
/// initialised this also refuses sums the library saturates instead of
/// wrapping (see the module docs), so call it after initialising MPI; every
/// rank of a job must get the same answers (one library, one kind of CPU).
pub fn unsupported(coll: Collective, dtype: Dtype, op: ReduceOp) -> Option<String> {
    if coll.vkind().is_some() {
        return Some(format!(
            "the MPI engine runs the even collectives; {coll} runs on the builtin engine and --engine nccl"
        ));
    }
    if !coll.reduces() {
        return None;
    }
    if op == ReduceOp::PreMulSum {
        return Some(
            "MPI has no pre-multiplied sum (premulsum is NCCL's; the builtin engine and --engine nccl run it)"
                .to_string(),
        );
    }
    if numeric_type(dtype).is_none() {
        return Some(format!(
            "MPI cannot reduce {dtype} ({op}): MPI-3 has no half, bfloat16 or fp8 datatype"
        ));
    }
    if matches!(op, ReduceOp::Sum) && saturating_sum(dtype) {
        return Some(format!(
            "this MPI library's MPI_SUM saturates {dtype} where collbench wraps (Open MPI's \
             op/avx component, open-mpi/ompi#8045); run with OMPI_MCA_op=^avx to measure it"
        ));
    }
    None
}

/// Whether in-place operations use the library's `MPI_IN_PLACE` (true) or
/// are staged through a copy of the send view (false); see the module docs.
pub fn native_in_place() -> bool {
    in_place_sentinel().is_some()
}

/// Runs one operation of `coll` on this process's rank through MPI's
/// collectives on `comm`, over this rank's physical buffers `bufs`
/// (`[buf0, buf1, scratch]`, laid out per `layout`: the `Send` and `Recv`
/// views resolve via `layout.resolve`; scratch is not used). `counts` come
/// from [`Collective::counts`] for `comm.size()` ranks; `root` matters to
/// rooted collectives only.
///
/// The wait honours `timeout` ([`ExecError::CollectiveTimeout`], naming the
/// collective and the MPI call) and `abort` ([`ExecError::Aborted`]). After
/// either, MPI may still own the operation: `bufs[0]` and `bufs[1]` have been
/// replaced by fresh zeroed buffers of the same size and the old ones leaked,
/// so nothing MPI writes later can reach freed memory. Buffers too small for
/// the views, a root outside the communicator, counts beyond MPI's `int`
/// and unsupported types are [`ExecError::Setup`]; a failing MPI call is
/// [`ExecError::Mpi`].
pub fn run_op(
    comm: &SimpleCommunicator,
    desc: &OpDesc,
    bufs: &mut [HostBuf; 3],
    timeout: Duration,
    abort: &dyn Fn() -> bool,
) -> Result<(), ExecError> {
    let (layout, counts) = (&desc.layout, desc.counts);
    let cx = Cx::new(
        comm, desc.coll, desc.dtype, desc.op, counts, desc.root, layout,
    )?;
    let views = Views::resolve(layout, counts, cx.es, bufs)?;
    let mut pending = Pending::default();
    let result = start(&cx, &views, &mut pending)
        .and_then(|()| pending.wait(&cx, timeout, abort))
        .map(|()| complete(&cx, &views, &pending));
    if result.is_err() && pending.posted > 0 {
        pending.abandon(bufs);
    }
    result
}

/// One operation's parameters, checked and in MPI's terms.
struct Cx {
    comm: ffi::MPI_Comm,
    coll: Collective,
    dtype: Dtype,
    op: ReduceOp,
    rank: usize,
    nranks: usize,
    root: usize,
    dt: ffi::MPI_Datatype,
    mpi_op: ffi::MPI_Op,
    /// Bytes per element.
    es: usize,
    counts: Counts,
    /// `counts` as MPI counts.
    send: c_int,
    recv: c_int,
    block: c_int,
    /// Whether the send and receive views share one buffer.
    aliased: bool,
}

impl Cx {
    fn new(
        comm: &SimpleCommunicator,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        counts: Counts,
        root: usize,
        layout: &Layout,
    ) -> Result<Cx, ExecError> {
        if let Some(why) = unsupported(coll, dtype, op) {
            return Err(ExecError::Setup(why));
        }
        let dt = if coll.reduces() {
            numeric_type(dtype)
        } else {
            bits_type(dtype)
        }
        .ok_or_else(|| ExecError::Setup(format!("MPI has no datatype for {dtype}")))?;
        let rank = usize::try_from(comm.rank()).unwrap_or(0);
        let nranks = usize::try_from(comm.size()).unwrap_or(1).max(1);
        if coll.rooted() && root >= nranks {
            return Err(ExecError::Setup(format!(
                "{coll}: root {root} is not a rank of this {nranks}-rank communicator"
            )));
        }
        let mpi_op = match op {
            // PreMulSum is refused by `unsupported` before a case runs.
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => SystemOperation::sum(),
            ReduceOp::Prod => SystemOperation::product(),
            ReduceOp::Min => SystemOperation::min(),
            ReduceOp::Max => SystemOperation::max(),
        };
        Ok(Cx {
            comm: comm.as_raw(),
            coll,
            dtype,
            op,
            rank,
            nranks,
            root,
            dt,
            mpi_op: mpi_op.as_raw(),
            es: dtype.size(),
            counts,
            send: mpi_count(counts.send)?,
            recv: mpi_count(counts.recv)?,
            block: mpi_count(counts.block)?,
            aliased: layout.aliased(),
        })
    }

    fn is_root(&self) -> bool {
        self.rank == self.root
    }

    fn root_arg(&self) -> c_int {
        // `root < nranks`, which came from a c_int.
        c_int::try_from(self.root).unwrap_or(0)
    }
}

fn mpi_count(elems: usize) -> Result<c_int, ExecError> {
    c_int::try_from(elems).map_err(|_| {
        ExecError::Setup(format!(
            "{elems} elements is more than one MPI call can count ({}); use smaller sizes",
            c_int::MAX
        ))
    })
}

/// The send and receive views of this rank, as pointers into its buffers.
struct Views {
    send: *mut u8,
    recv: *mut u8,
}

impl Views {
    /// Resolves the views, checking that each fits in its buffer.
    fn resolve(
        layout: &Layout,
        counts: Counts,
        es: usize,
        bufs: &[HostBuf; 3],
    ) -> Result<Views, ExecError> {
        let at = |view: Slice, elems: usize, what: &str| -> Result<*mut u8, ExecError> {
            let (b, off) = layout.resolve(view);
            let buf = bufs
                .get(b)
                .ok_or_else(|| ExecError::Setup(format!("no physical buffer {b}")))?;
            let end = off.checked_add(elems).and_then(|e| e.checked_mul(es));
            match end {
                Some(end) if end <= buf.len() => {
                    // SAFETY: `off * es <= end <= buf.len()`: inside (or one
                    // past) the allocation.
                    Ok(unsafe { buf.as_ptr().add(off * es) })
                }
                _ => Err(ExecError::Setup(format!(
                    "the {what} view ({elems} elements at element {off}) does not fit in \
                     buffer {b} of {} bytes",
                    buf.len()
                ))),
            }
        };
        Ok(Views {
            send: at(Slice::send(0), counts.send, "send")?,
            recv: at(Slice::recv(0), counts.recv, "receive")?,
        })
    }
}

/// The requests of one operation in flight, and what they use.
struct Pending {
    reqs: [ffi::MPI_Request; 2],
    posted: usize,
    /// The MPI call the operation waits on.
    call: &'static str,
    /// A copy of the send view, for in-place calls MPI cannot express.
    staging: Option<HostBuf>,
    /// In-place reduce-scatter: the result lies at the start of the buffer
    /// and still has to move to the receive view.
    shift: bool,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            // SAFETY: reading an immutable handle the MPI library defines.
            reqs: [unsafe { ffi::RSMPI_REQUEST_NULL }; 2],
            posted: 0,
            call: "",
            staging: None,
            shift: false,
        }
    }
}

impl Pending {
    /// Starts one request with `f`, which gets where to store its handle.
    fn post(
        &mut self,
        call: &'static str,
        f: impl FnOnce(*mut ffi::MPI_Request) -> c_int,
    ) -> Result<(), ExecError> {
        let slot = self
            .reqs
            .get_mut(self.posted)
            .ok_or_else(|| ExecError::Setup(format!("{call}: too many requests")))?;
        check(f(slot), call)?;
        self.posted += 1;
        self.call = if self.posted > 1 {
            "MPI_Irecv/MPI_Isend"
        } else {
            call
        };
        Ok(())
    }

    /// Copies `elems` elements at `src` into a buffer of their own and
    /// returns where the copy lies.
    fn stage(&mut self, cx: &Cx, src: *const u8, elems: usize) -> Result<*const c_void, ExecError> {
        let bytes = elems * cx.es;
        let mut copy = HostBuf::new(bytes).map_err(ExecError::Memory)?;
        // SAFETY: `src` is a view checked to hold `elems` elements; `copy` is
        // a fresh allocation of `bytes` bytes, so the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(src, copy.as_mut_slice().as_mut_ptr(), bytes) };
        let at = copy.as_ptr() as *const c_void;
        self.staging = Some(copy);
        Ok(at)
    }

    /// Polls the posted requests until they complete, the timeout passes or
    /// `abort` says to stop.
    fn wait(
        &mut self,
        cx: &Cx,
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        let started = Instant::now();
        let count = c_int::try_from(self.posted).unwrap_or(0);
        let mut polls: u32 = 0;
        loop {
            let mut done: c_int = 0;
            // SAFETY: the first `posted` handles are live requests started by
            // `post`; MPI sets completed ones to MPI_REQUEST_NULL. Statuses
            // are ignored through the library's sentinel.
            let rc = unsafe {
                ffi::MPI_Testall(
                    count,
                    self.reqs.as_mut_ptr(),
                    &mut done,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            check(rc, "MPI_Testall")?;
            if done != 0 {
                self.posted = 0;
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            if polls % CHECK_EVERY == 0 {
                if abort() {
                    return Err(ExecError::Aborted);
                }
                let waited = started.elapsed();
                if waited >= timeout {
                    return Err(ExecError::CollectiveTimeout {
                        rank: cx.rank,
                        collective: cx.coll.name(),
                        call: self.call,
                        waited,
                    });
                }
            }
            if polls >= SPIN_POLLS {
                std::thread::yield_now();
            }
        }
    }

    /// Leaves an unfinished operation to MPI: its requests and every byte it
    /// may still read or write are leaked, and the caller gets fresh send and
    /// receive buffers in place of the old ones.
    fn abandon(&mut self, bufs: &mut [HostBuf; 3]) {
        if let Some(copy) = self.staging.take() {
            std::mem::forget(copy);
        }
        for buf in bufs.iter_mut().take(2) {
            let fresh = HostBuf::new(buf.len()).or_else(|_| HostBuf::new(0));
            match fresh {
                Ok(fresh) => std::mem::forget(std::mem::replace(buf, fresh)),
                // Without memory for 64 bytes there is nothing safe to hand
                // back, and freeing MPI's buffers is not an option.
                Err(_) => std::process::abort(),
            }
        }
        self.posted = 0;
    }
}

/// Starts the operation: the MPI calls of the table in the module docs.
fn start(cx: &Cx, v: &Views, p: &mut Pending) -> Result<(), ExecError> {
    let in_place = if cx.aliased {
        in_place_sentinel()
    } else {
        None
    };
    let (send, recv) = (v.send as *const c_void, v.recv as *mut c_void);
    // The send argument of a call where this rank's views alias: MPI_IN_PLACE
    // or a staged copy; `send` itself when they do not.
    let source = |p: &mut Pending, aliases: bool| -> Result<*const c_void, ExecError> {
        match (cx.aliased && aliases, in_place) {
            (false, _) => Ok(send),
            (true, Some(sentinel)) => Ok(sentinel),
            (true, None) => p.stage(cx, v.send, cx.counts.send),
        }
    };
    let (comm, dt, op, root) = (cx.comm, cx.dt, cx.mpi_op, cx.root_arg());
    let null = ptr::null_mut::<c_void>();
    // SAFETY (every call below): the view pointers were checked to hold the
    // counts passed with them, a staged copy holds `counts.send` elements,
    // MPI_IN_PLACE is the library's own sentinel, and buffers not significant
    // on this rank are null. The memory stays valid until the requests
    // complete: `run_op` returns only then, or after leaking it (`abandon`).
    match cx.coll {
        Collective::AllReduce => {
            let s = source(p, true)?;
            p.post("MPI_Iallreduce", |r| unsafe {
                ffi::MPI_Iallreduce(s, recv, cx.recv, dt, op, comm, r)
            })
        }
        Collective::ReduceScatter => {
            let (s, r_buf) = match in_place {
                // MPI reads the whole send view and leaves the block at its start.
                Some(sentinel) => (sentinel, v.send as *mut c_void),
                None => (source(p, true)?, recv),
            };
            p.shift = in_place.is_some();
            p.post("MPI_Ireduce_scatter_block", |r| unsafe {
                ffi::MPI_Ireduce_scatter_block(s, r_buf, cx.block, dt, op, comm, r)
            })
        }
        Collective::Reduce => {
            let s = source(p, cx.is_root())?;
            let r_buf = if cx.is_root() { recv } else { null };
            p.post("MPI_Ireduce", |r| unsafe {
                ffi::MPI_Ireduce(s, r_buf, cx.recv, dt, op, root, comm, r)
            })
        }
        Collective::AllGather => {
            let s = source(p, true)?;
            p.post("MPI_Iallgather", |r| unsafe {
                ffi::MPI_Iallgather(s, cx.block, dt, recv, cx.block, dt, comm, r)
            })
        }
        Collective::Gather => {
            let s = source(p, cx.is_root())?;
            let r_buf = if cx.is_root() { recv } else { null };
            p.post("MPI_Igather", |r| unsafe {
                ffi::MPI_Igather(s, cx.block, dt, r_buf, cx.block, dt, root, comm, r)
            })
        }
        Collective::AllToAll => {
            let s = source(p, true)?;
            p.post("MPI_Ialltoall", |r| unsafe {
                ffi::MPI_Ialltoall(s, cx.block, dt, recv, cx.block, dt, comm, r)
            })
        }
        Collective::Broadcast => {
            if cx.is_root() && !cx.aliased {
                // SAFETY: both views hold `counts.recv` (= `counts.send`)
                // elements; `ptr::copy` allows any overlap.
                unsafe { ptr::copy(v.send, v.recv, cx.counts.recv * cx.es) };
            }
            p.post("MPI_Ibcast", |r| unsafe {
                ffi::MPI_Ibcast(recv, cx.recv, dt, root, comm, r)
            })
        }
        Collective::Scatter => scatter(cx, v, p, in_place),
        Collective::AllToAllV | Collective::AllGatherV | Collective::ReduceScatterV => {
            // Refused by `unsupported` before a case runs.
            Err(ExecError::Setup(format!("MPI: {} is not run", cx.coll)))
        }
        Collective::SendRecv => {
            let s = if cx.aliased {
                p.stage(cx, v.send, cx.counts.send)?
            } else {
                send
            };
            let (to, from) = crate::engine::types::send_recv_peers(cx.rank, cx.nranks, cx.root);
            // Ranks below `nranks`, which came from a c_int.
            let from = c_int::try_from(from).unwrap_or(0);
            let to = c_int::try_from(to).unwrap_or(0);
            p.post("MPI_Irecv", |r| unsafe {
                ffi::MPI_Irecv(recv, cx.recv, dt, from, SENDRECV_TAG, comm, r)
            })?;
            p.post("MPI_Isend", |r| unsafe {
                ffi::MPI_Isend(s, cx.send, dt, to, SENDRECV_TAG, comm, r)
            })
        }
    }
}

/// Scatter: in place, the root keeps its block where it is (`MPI_IN_PLACE`
/// as its recvbuf) or scatters from a staged copy.
fn scatter(
    cx: &Cx,
    v: &Views,
    p: &mut Pending,
    in_place: Option<*const c_void>,
) -> Result<(), ExecError> {
    let (mut s, mut r_buf) = (v.send as *const c_void, v.recv as *mut c_void);
    if !cx.is_root() {
        s = ptr::null();
    } else if cx.aliased {
        match in_place {
            Some(sentinel) => r_buf = sentinel.cast_mut(),
            None => s = p.stage(cx, v.send, cx.counts.send)?,
        }
    }
    let (dt, root) = (cx.dt, cx.root_arg());
    // SAFETY: as in `start`: the root's send view holds `nranks * block`
    // elements (or its staged copy does), every receive view `block`.
    p.post("MPI_Iscatter", |r| unsafe {
        ffi::MPI_Iscatter(s, cx.block, dt, r_buf, cx.block, dt, root, cx.comm, r)
    })
}

/// What follows a completed operation: the in-place reduce-scatter's move,
/// and Avg's division on the ranks holding a reduced result.
fn complete(cx: &Cx, v: &Views, p: &Pending) {
    let es = cx.es;
    if p.shift {
        // SAFETY: both views lie in the one buffer, checked to hold
        // `block` elements at each; `ptr::copy` allows overlap.
        unsafe { ptr::copy(v.send, v.recv, cx.counts.block * es) };
    }
    let reduced = match cx.coll {
        Collective::AllReduce => cx.counts.recv,
        Collective::ReduceScatter => cx.counts.block,
        Collective::Reduce if cx.is_root() => cx.counts.recv,
        _ => 0,
    };
    if reduced > 0 {
        // SAFETY: the receive view holds `reduced` elements (checked).
        unsafe { elem::finish(cx.dtype, cx.op, cx.nranks, v.recv, reduced) };
    }
}
