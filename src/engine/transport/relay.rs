//! Between hosts (feature `mpi`): a relay thread per process moves FIFO
//! slots as MPI point-to-point messages. A rank sends to a remote peer into
//! a FIFO in its own memory; the relay sends each message (from the slot, or
//! straight from the rank's buffer for a direct payload) and frees the slot
//! once MPI is done with it. On the other side the relay receives into the
//! receiver's FIFO slots and posts them. One message per route is in flight,
//! so each (peer, channel) stays in order; the engine's programs do not change.

use super::inproc::Fifo;
use super::node::Relay;
use mpi::ffi;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// MPI tags of relayed slots: this plus the channel.
const TAG_BASE: c_int = 1000;

/// A communicator handle the relay thread may use.
#[derive(Clone, Copy)]
pub struct Comm(pub ffi::MPI_Comm);

// SAFETY: MPI runs with MPI_THREAD_MULTIPLE (checked at start-up), under
// which a communicator may be used from any thread.
unsafe impl Send for Comm {}

struct Route {
    fifo: Arc<Fifo>,
    peer: c_int,
    tag: c_int,
    outgoing: bool,
    req: ffi::MPI_Request,
    busy: bool,
}

// SAFETY: a route's request and FIFO end are only touched by the relay thread.
unsafe impl Send for Route {}

/// The relay of one process; stops when dropped.
pub struct MpiRelay {
    routes: Arc<Mutex<Vec<Route>>>,
    stop: Arc<AtomicBool>,
    /// The relay thread; it says whether every transfer ended.
    handle: Mutex<Option<JoinHandle<bool>>>,
}

/// How long a stopping relay waits for cancelled transfers to end.
const QUIESCE: std::time::Duration = std::time::Duration::from_secs(2);

impl MpiRelay {
    pub fn start(comm: Comm) -> std::io::Result<MpiRelay> {
        let routes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || run(comm, &r, &s))?;
        tracing::debug!("MPI relay thread started");
        Ok(MpiRelay {
            routes,
            stop,
            handle: Mutex::new(Some(handle)),
        })
    }
}

impl Relay for MpiRelay {
    fn add(&self, fifo: Arc<Fifo>, peer: usize, chan: u32, outgoing: bool) {
        let route = Route {
            fifo,
            peer: peer as c_int,
            tag: TAG_BASE + chan as c_int,
            outgoing,
            // SAFETY: reading the library's null-request constant.
            req: unsafe { ffi::RSMPI_REQUEST_NULL },
            busy: false,
        };
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(route);
    }

    fn stop(&self) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A relay that panicked may have left transfers behind.
        handle.is_none_or(|h| h.join().unwrap_or(false))
    }
}

impl Drop for MpiRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Relays until `stop`; then ends every transfer still posted (a rank that
/// stopped early leaves sends from its buffers and receives into its FIFO
/// slots behind). Returns whether all ended, so that the memory they use
/// is unmapped only then.
fn run(comm: Comm, routes: &Mutex<Vec<Route>>, stop: &AtomicBool) -> bool {
    super::node::serve_until(stop, || {
        let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.iter_mut().fold(false, |m, r| step(comm, r) | m)
    });
    let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
    let mut busy: Vec<&mut Route> = routes.iter_mut().filter(|r| r.busy).collect();
    for r in &mut busy {
        // SAFETY: a live request of this route.
        unsafe { ffi::MPI_Cancel(&mut r.req) };
    }
    let start = std::time::Instant::now();
    while !busy.is_empty() && start.elapsed() < QUIESCE {
        busy.retain_mut(|r| {
            let mut done: c_int = 0;
            // SAFETY: a live (cancelled) request of this route.
            unsafe { ffi::MPI_Test(&mut r.req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            done == 0
        });
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    if !busy.is_empty() {
        tracing::debug!(pending = busy.len(), "relay stopped with transfers pending");
    }
    busy.is_empty()
}

/// Advances one route; says whether anything moved.
fn step(comm: Comm, r: &mut Route) -> bool {
    let mut moved = false;
    if r.busy {
        let mut done: c_int = 0;
        // SAFETY: an all-zero MPI_Status is a valid value to be overwritten.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `req` is this route's live request.
        unsafe { ffi::MPI_Test(&mut r.req, &mut done, &mut status) };
        if done != 0 {
            r.busy = false;
            moved = true;
            if r.outgoing {
                r.fifo.release();
            } else {
                let mut n: c_int = 0;
                // SAFETY: status of the completed receive; a byte count.
                unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut n) };
                r.fifo.post_received(n.max(0) as usize);
            }
        }
    }
    if !r.busy {
        r.busy = if r.outgoing {
            send_next(comm, r)
        } else {
            receive_next(comm, r)
        };
        moved |= r.busy;
    }
    moved
}

fn send_next(comm: Comm, r: &mut Route) -> bool {
    let Some(m) = r.fifo.peek() else { return false };
    // SAFETY: the payload stays valid and unchanged until the slot is released,
    // which happens only after this send completes.
    let rc = unsafe {
        ffi::MPI_Isend(
            m.ptr as *const c_void,
            m.len as c_int,
            ffi::RSMPI_UINT8_T,
            r.peer,
            r.tag,
            comm.0,
            &mut r.req,
        )
    };
    rc == ffi::MPI_SUCCESS as c_int
}

fn receive_next(comm: Comm, r: &mut Route) -> bool {
    if !r.fifo.can_send() {
        return false;
    }
    let area = r.fifo.receive_area();
    // SAFETY: the slot area holds slot_bytes bytes and is ours until posted.
    let rc = unsafe {
        ffi::MPI_Irecv(
            area as *mut c_void,
            r.fifo.slot_bytes() as c_int,
            ffi::RSMPI_UINT8_T,
            r.peer,
            r.tag,
            comm.0,
            &mut r.req,
        )
    };
    rc == ffi::MPI_SUCCESS as c_int
}
