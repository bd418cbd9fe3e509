//! How a world's ranks reach each other, whatever they run: the link
//! interface (FIFOs, a barrier, buffers a peer may read), the in-process
//! links of thread ranks, and the waiting discipline every wait shares
//! (spin, then yield; honour the timeout and the abort flag).

use super::inproc::Fifo;
use super::mem::{AllocError, HostBuf};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Who a barrier that timed out had: how many of `nranks` arrived, where
/// known.
pub fn barrier_arrivals(arrived: Option<usize>, nranks: usize) -> String {
    match arrived {
        Some(a) => format!("where {a} of {nranks} ranks arrived"),
        None => format!(
            "of {nranks} ranks across processes, which some never reached (the dumps say which)"
        ),
    }
}

/// Why a link could not be made, or a wait on the links ended.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    #[error("stopped because another rank failed")]
    Aborted,
    #[error("rank {rank} waited {waited:?} (timeout) at a barrier {}", barrier_arrivals(*.arrived, *.nranks))]
    BarrierTimeout {
        rank: usize,
        /// How many ranks had arrived, where the barrier knows (one across
        /// processes, the launcher's, does not).
        arrived: Option<usize>,
        nranks: usize,
        waited: Duration,
    },
    #[error("{0}")]
    Setup(String),
    #[error("not enough memory: {0}")]
    Memory(#[from] AllocError),
}

/// What every wait of a world honours: its size, its timeout, its abort flag.
pub trait WaitCtl {
    fn nranks(&self) -> usize;
    fn timeout(&self) -> Duration;
    fn aborted(&self) -> bool;
}

/// The shape of a FIFO: its depth and slot size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoShape {
    pub slots: usize,
    pub slot_bytes: usize,
}

/// How a world's ranks reach each other: the FIFOs between them, their
/// barrier, and where rank buffers live (so peers can read them directly).
///
/// Peers read a rank's buffers directly (a FIFO slot may carry a pointer
/// into them), so the links own every rank's buffers and hand out views:
/// the memory lives as long as the links, that is as long as the world, and
/// every rank that can read it holds the world. A rank that stops early
/// (abort, signal, timeout) frees nothing a peer may still be reading.
pub trait Links: Send + Sync {
    /// The FIFO from `from` to `to` on channel `chan`: the same one every call.
    fn fifo(
        &self,
        from: usize,
        to: usize,
        chan: u32,
        shape: FifoShape,
    ) -> Result<Arc<Fifo>, LinkError>;
    /// Waits until every rank of the world has arrived.
    fn barrier(&self, ctl: &dyn WaitCtl, rank: usize) -> Result<(), LinkError>;
    /// Rank `rank`'s physical buffers of `bytes` each: views of memory the
    /// links own (freed with them, never before).
    fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], LinkError>;
}

/// Ranks that are threads of this process: FIFOs made on first use.
#[derive(Default)]
pub struct InProcess {
    fifos: Mutex<HashMap<(usize, usize, u32), Arc<Fifo>>>,
    /// Every rank's buffers, owned here so that they outlive every reader.
    owned: Mutex<Vec<HostBuf>>,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Links for InProcess {
    fn fifo(
        &self,
        from: usize,
        to: usize,
        chan: u32,
        shape: FifoShape,
    ) -> Result<Arc<Fifo>, LinkError> {
        let mut map = self
            .fifos
            .lock()
            .map_err(|_| LinkError::Setup("connection table poisoned".into()))?;
        if let Some(f) = map.get(&(from, to, chan)) {
            return Ok(Arc::clone(f));
        }
        let fifo = Arc::new(Fifo::new(shape.slots, shape.slot_bytes)?);
        tracing::debug!(
            from,
            to,
            chan,
            slots = shape.slots,
            slot_bytes = shape.slot_bytes,
            transport = "in-process",
            "FIFO connected"
        );
        map.insert((from, to, chan), Arc::clone(&fifo));
        Ok(fifo)
    }

    fn barrier(&self, ctl: &dyn WaitCtl, rank: usize) -> Result<(), LinkError> {
        let nranks = ctl.nranks();
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == nranks {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation + 1, Ordering::Release);
            return Ok(());
        }
        let mut wait = Wait::new(spin_limit(nranks));
        while self.generation.load(Ordering::Acquire) == generation {
            if !wait.snooze() {
                continue;
            }
            if ctl.aborted() {
                return Err(LinkError::Aborted);
            }
            if wait.elapsed() >= ctl.timeout() {
                return Err(LinkError::BarrierTimeout {
                    rank,
                    arrived: Some(self.arrived.load(Ordering::Relaxed)),
                    nranks,
                    waited: wait.elapsed(),
                });
            }
        }
        Ok(())
    }

    fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], LinkError> {
        let mut owned = self
            .owned
            .lock()
            .map_err(|_| LinkError::Setup("buffer table poisoned".into()))?;
        owned.try_reserve(3).map_err(|_| AllocError::OutOfMemory {
            len: 3 * std::mem::size_of::<HostBuf>(),
        })?;
        let [a, b, c] = bytes.map(HostBuf::new);
        let bufs = [a?, b?, c?];
        // SAFETY: the allocations move into `owned` below and are freed only
        // when these links drop, after every rank holding the world is gone.
        let views = bufs
            .each_ref()
            .map(|b| unsafe { HostBuf::view(b.non_null(), b.len()) });
        owned.extend(bufs);
        tracing::debug!(rank, ?bytes, "rank buffers owned by the world");
        Ok(views)
    }
}

/// Spins before yielding: long when every rank has a core, short when
/// ranks outnumber cores (a spinning rank would starve the one it waits on).
pub fn spin_limit(nranks: usize) -> u32 {
    let cores = crate::engine::cpus::cores();
    if nranks > cores {
        32
    } else {
        4000
    }
}

/// Spin, then yield; says when it is time to look at the clock.
pub struct Wait {
    pub spins: u32,
    pub limit: u32,
    started: Option<Instant>,
}

impl Wait {
    pub fn new(limit: u32) -> Wait {
        Wait {
            spins: 0,
            limit,
            started: None,
        }
    }

    pub fn reset(&mut self) {
        self.spins = 0;
    }

    /// Returns true every so often, when checks are due.
    pub fn snooze(&mut self) -> bool {
        self.spins += 1;
        if self.spins < self.limit {
            std::hint::spin_loop();
            return false;
        }
        std::thread::yield_now();
        if self.spins % 64 != 0 {
            return false;
        }
        if self.spins > self.limit + 100_000 {
            std::thread::sleep(Duration::from_micros(50));
        }
        self.started.get_or_insert_with(Instant::now);
        true
    }

    pub fn elapsed(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

/// One slowed link or rank (fault injection, `--inject slow` and
/// `slow-link`): every message `from` sends (to `to`, or to anyone) takes
/// `factor` times as long to move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaceRule {
    pub from: usize,
    pub to: Option<usize>,
    pub factor: f64,
}

/// The slowed links of a world: what a transfer over each directed link
/// is stretched by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pace {
    rules: Vec<PaceRule>,
}

impl Pace {
    pub fn new(rules: Vec<PaceRule>) -> Pace {
        Pace { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many times longer a transfer from `from` to `to` takes (1: not
    /// slowed); rules that both apply multiply, up to [`MAX_PACE`] (eight
    /// rules of 1000 made a time no `Duration` holds).
    pub fn factor(&self, from: usize, to: usize) -> f64 {
        self.asked(from, to).min(MAX_PACE)
    }

    /// Whether rules multiply past [`MAX_PACE`] on some link of `ranks`
    /// (said as a note: the link is slowed that much, no more).
    pub fn capped(&self, ranks: usize) -> bool {
        (0..ranks).any(|f| (0..ranks).any(|t| self.asked(f, t) > MAX_PACE))
    }

    /// The product of the rules on the link `from` -> `to`, uncapped.
    fn asked(&self, from: usize, to: usize) -> f64 {
        self.rules
            .iter()
            .filter(|r| r.from == from && r.to.is_none_or(|t| t == to))
            .map(|r| r.factor)
            .product()
    }
}

/// The most a link is slowed, rules multiplied: what one rule may ask.
pub const MAX_PACE: f64 = 1000.0;

/// Stretches a transfer that began at `began` and has just ended to
/// `factor` times its length: waits out the difference, asleep while more
/// than a fraction of a millisecond is left (so a slowed rank does not take
/// the cores of the others, and a loaded machine wakes it on time: a
/// yielding thread may wait behind every other runnable one), spinning for
/// the rest.
pub fn stretch(began: Instant, factor: f64) {
    if factor <= 1.0 {
        return;
    }
    let took = began.elapsed();
    // Bounded: a factor past any duration waits as long as one can.
    let stretched = Duration::try_from_secs_f64(took.as_secs_f64() * factor.min(MAX_PACE))
        .unwrap_or(Duration::from_secs(3600));
    let Some(until) = began.checked_add(stretched) else {
        return;
    };
    loop {
        let now = Instant::now();
        if now >= until {
            return;
        }
        let left = until - now;
        if left > Duration::from_micros(300) {
            std::thread::sleep(left - Duration::from_micros(200));
        } else {
            std::hint::spin_loop();
        }
    }
}
