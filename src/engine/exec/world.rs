//! A world of host ranks: its options, the errors its operations end in,
//! how its ranks reach each other ([`Links`]: in this process, or across
//! processes of a node), its barrier, and the waiting discipline every wait
//! shares (spin, then yield; honour the timeout and the abort flag).

use super::mem::HostBuf;
use crate::engine::transport::inproc::Fifo;
use crate::engine::types::Dtype;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most channels one program may have.
pub const MAX_CHANNELS: usize = 128;

/// Tunables of the host engine.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// FIFO depth (at least `algo::symbolic::MIN_SLOTS`).
    pub slots: usize,
    /// Bytes per FIFO slot: the largest step.
    pub slot_bytes: usize,
    /// Messages at least this large are read from the sender's memory when
    /// it stays unchanged until consumed.
    pub direct_min_bytes: usize,
    /// How long any wait may last.
    pub timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            slots: 4,
            slot_bytes: 256 << 10,
            direct_min_bytes: 4096,
            timeout: Duration::from_secs(300),
        }
    }
}

/// Why an operation did not complete.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ExecError {
    #[error("rank {rank} waited {waited:?} (timeout) on channel {channel} step {step} ({prim}) to {what} peer {peer}")]
    Timeout {
        rank: usize,
        channel: usize,
        step: usize,
        prim: &'static str,
        what: &'static str,
        peer: usize,
        waited: Duration,
    },
    #[error("rank {rank} waited {waited:?} (timeout) at a barrier where {arrived} of {nranks} ranks arrived")]
    BarrierTimeout {
        rank: usize,
        arrived: usize,
        nranks: usize,
        waited: Duration,
    },
    #[error("rank {rank} waited {waited:?} (timeout) for {call} ({collective}) to complete")]
    CollectiveTimeout {
        rank: usize,
        collective: &'static str,
        /// The library call waited on, e.g. `MPI_Iallreduce`.
        call: &'static str,
        waited: Duration,
    },
    #[error("stopped because another rank failed")]
    Aborted,
    #[error("{0}")]
    Setup(String),
    /// An MPI call failed (the `mpi` engine).
    #[error("MPI: {0}")]
    Mpi(String),
}

/// How a world's ranks reach each other: the FIFOs between them, their
/// barrier, and where rank buffers live (so peers can read them directly).
pub trait Links: Send + Sync {
    /// The FIFO from `from` to `to` on channel `chan`: the same one every call.
    fn fifo(
        &self,
        from: usize,
        to: usize,
        chan: u32,
        opts: &HostOptions,
    ) -> Result<Arc<Fifo>, ExecError>;
    /// Waits until every rank of the world has arrived.
    fn barrier(&self, world: &HostWorld, rank: usize) -> Result<(), ExecError>;
    /// Rank `rank`'s physical buffers of `bytes` each.
    fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], ExecError> {
        let _ = rank;
        let alloc = |n| HostBuf::new(n).map_err(ExecError::Setup);
        Ok([alloc(bytes[0])?, alloc(bytes[1])?, alloc(bytes[2])?])
    }
}

/// Ranks that are threads of this process: FIFOs made on first use.
#[derive(Default)]
pub struct InProcess {
    fifos: Mutex<HashMap<(usize, usize, u32), Arc<Fifo>>>,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Links for InProcess {
    fn fifo(
        &self,
        from: usize,
        to: usize,
        chan: u32,
        opts: &HostOptions,
    ) -> Result<Arc<Fifo>, ExecError> {
        let mut map = self
            .fifos
            .lock()
            .map_err(|_| ExecError::Setup("connection table poisoned".into()))?;
        if let Some(f) = map.get(&(from, to, chan)) {
            return Ok(Arc::clone(f));
        }
        let fifo = Fifo::new(opts.slots, opts.slot_bytes)
            .map_err(|e| ExecError::Setup(format!("FIFO allocation: {e}")))?;
        let fifo = Arc::new(fifo);
        map.insert((from, to, chan), Arc::clone(&fifo));
        Ok(fifo)
    }

    fn barrier(&self, world: &HostWorld, rank: usize) -> Result<(), ExecError> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == world.nranks {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation + 1, Ordering::Release);
            return Ok(());
        }
        let mut wait = Wait::new(spin_limit(world.nranks));
        while self.generation.load(Ordering::Acquire) == generation {
            if !wait.snooze() {
                continue;
            }
            if world.aborted() {
                return Err(ExecError::Aborted);
            }
            if wait.elapsed() >= world.opts.timeout {
                return Err(ExecError::BarrierTimeout {
                    rank,
                    arrived: self.arrived.load(Ordering::Relaxed),
                    nranks: world.nranks,
                    waited: wait.elapsed(),
                });
            }
        }
        Ok(())
    }
}

/// The ranks of one run and how they reach each other.
pub struct HostWorld {
    nranks: usize,
    opts: HostOptions,
    links: Box<dyn Links>,
    abort: AtomicBool,
}

impl HostWorld {
    /// A world of `nranks` thread ranks in this process.
    pub fn new(nranks: usize, opts: HostOptions) -> Arc<HostWorld> {
        HostWorld::with_links(nranks, opts, Box::new(InProcess::default()))
    }

    /// A world whose ranks are reached through `links`.
    pub fn with_links(nranks: usize, opts: HostOptions, links: Box<dyn Links>) -> Arc<HostWorld> {
        Arc::new(HostWorld {
            nranks,
            opts,
            links,
            abort: AtomicBool::new(false),
        })
    }

    /// Waits until every rank has arrived; honours the timeout and abort.
    pub fn barrier(&self, rank: usize) -> Result<(), ExecError> {
        self.links.barrier(self, rank)
    }

    /// Rank `rank`'s physical buffers.
    pub fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], ExecError> {
        self.links.buffers(rank, bytes)
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn options(&self) -> &HostOptions {
        &self.opts
    }

    /// Stops every rank's waits (a rank failed).
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Release);
    }

    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }

    pub(crate) fn fifo(&self, from: usize, to: usize, chan: u32) -> Result<Arc<Fifo>, ExecError> {
        self.links.fifo(from, to, chan, &self.opts)
    }

    /// Elements per step for `dtype`: what one slot holds.
    pub fn chunk_elems(&self, dtype: Dtype) -> usize {
        (self.opts.slot_bytes / dtype.size()).max(1)
    }
}

/// Spins before yielding: long when every rank has a core, short when
/// ranks outnumber cores (a spinning rank would starve the one it waits on).
pub(crate) fn spin_limit(nranks: usize) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if nranks > cores {
        32
    } else {
        4000
    }
}

/// Spin, then yield; says when it is time to look at the clock.
pub(crate) struct Wait {
    pub(crate) spins: u32,
    pub(crate) limit: u32,
    started: Option<Instant>,
}

impl Wait {
    pub(crate) fn new(limit: u32) -> Wait {
        Wait {
            spins: 0,
            limit,
            started: None,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.spins = 0;
    }

    /// Returns true every so often, when checks are due.
    pub(crate) fn snooze(&mut self) -> bool {
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

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |t| t.elapsed())
    }
}
