//! The thread that moves the slots of relayed connections between their
//! host-mapped memory and the relay's FIFOs.

use super::super::super::abi::{ConnKey, ConnShape, FLAG_LINE, MAX_SLOTS};
use super::super::super::dev::Mapped;
use super::{setup, RELAY_CHAN_BASE};
use crate::engine::exec::world::ExecError;
use crate::engine::transport::inproc::Fifo;
use crate::engine::transport::node::{serve_until, Relay};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One relayed connection end: its memory (host-mapped) and the FIFO the
/// relay serves.
pub(super) struct Route {
    pub(super) base: *mut u8,
    pub(super) fifo: Arc<Fifo>,
    pub(super) outgoing: bool,
    pub(super) slots: u64,
    pub(super) slot_bytes: usize,
    /// Messages moved so far.
    pub(super) moved: u64,
}

// SAFETY: the route's memory is host-mapped memory of the world, alive
// until the bridge stops (the world stops it before freeing); only the
// bridge thread touches a route.
unsafe impl Send for Route {}

impl Route {
    pub(super) fn flag(&self, at: usize) -> &AtomicU64 {
        // SAFETY: tail (0), head (FLAG_LINE) and the length words lie in the
        // connection's first two lines, 8-byte aligned; the kernel accesses
        // them atomically too.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    pub(super) fn slot(&self, seq: u64) -> *mut u8 {
        let i = (seq % self.slots) as usize;
        // SAFETY: the simple ring follows the two flag lines.
        unsafe { self.base.add(2 * FLAG_LINE + i * self.slot_bytes) }
    }

    /// Moves one message if it can; says whether it did.
    pub(super) fn step(&mut self) -> bool {
        if self.outgoing {
            // The kernel posted message `moved`? Copy it out to the relay.
            if self.flag(0).load(Ordering::Acquire) <= self.moved || !self.fifo.can_send() {
                return false;
            }
            let i = (self.moved % self.slots) as usize;
            let len = (self.flag(8 * (1 + i)).load(Ordering::Relaxed) as usize)
                .min(self.slot_bytes)
                .min(self.fifo.slot_bytes());
            let dst = self.fifo.send_buffer(len);
            // SAFETY: the slot holds `len` posted bytes the kernel no longer
            // writes until head moves; the FIFO's buffer holds slot_bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.slot(self.moved), dst, len) };
            self.fifo.post(len, None);
            self.moved += 1;
            self.flag(FLAG_LINE).store(self.moved, Ordering::Release);
        } else {
            // A message arrived and the kernel freed the slot? Fill it.
            let head = self.flag(FLAG_LINE).load(Ordering::Acquire);
            if self.moved - head >= self.slots {
                return false;
            }
            let Some(m) = self.fifo.peek() else {
                return false;
            };
            let len = m.len.min(self.slot_bytes);
            // SAFETY: the slot is free (head says so) and holds slot_bytes.
            unsafe { std::ptr::copy_nonoverlapping(m.ptr, self.slot(self.moved), len) };
            self.fifo.release();
            self.moved += 1;
            self.flag(0).store(self.moved, Ordering::Release);
        }
        true
    }
}

/// The thread that moves relayed connections' slots.
pub(super) struct Bridge {
    relay: Arc<dyn Relay>,
    routes: Arc<Mutex<Vec<Route>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Bridge {
    pub(super) fn start(relay: Arc<dyn Relay>) -> Result<Bridge, String> {
        let routes: Arc<Mutex<Vec<Route>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("cuda-bridge".into())
            .spawn(move || run(&r, &s))
            .map_err(|e| format!("starting the CUDA relay bridge: {e}"))?;
        Ok(Bridge {
            relay,
            routes,
            stop,
            handle: Some(handle),
        })
    }

    pub(super) fn add(
        &self,
        m: Mapped,
        key: ConnKey,
        me: usize,
        shape: &ConnShape,
    ) -> Result<(), ExecError> {
        if shape.slots > MAX_SLOTS {
            return Err(setup(format!(
                "{} slots per connection: the relay bridge handles at most {MAX_SLOTS}",
                shape.slots
            )));
        }
        let fifo = Arc::new(
            Fifo::new(shape.slots, shape.slot_bytes)
                .map_err(|e| setup(format!("relay FIFO: {e}")))?,
        );
        let outgoing = key.from == me;
        let peer = if outgoing { key.to } else { key.from };
        self.relay.add(
            Arc::clone(&fifo),
            peer,
            RELAY_CHAN_BASE + key.chan,
            outgoing,
        );
        tracing::debug!(
            from = key.from,
            to = key.to,
            chan = key.chan,
            "CUDA connection through the relay"
        );
        let route = Route {
            base: m.host,
            fifo,
            outgoing,
            slots: shape.slots as u64,
            slot_bytes: shape.slot_bytes,
            moved: 0,
        };
        self.routes
            .lock()
            .map_err(|_| setup("relay bridge poisoned"))?
            .push(route);
        Ok(())
    }

    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(routes: &Mutex<Vec<Route>>, stop: &AtomicBool) {
    serve_until(stop, || {
        let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.iter_mut().fold(false, |m, r| r.step() | m)
    });
}
