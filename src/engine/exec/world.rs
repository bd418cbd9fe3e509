//! A world of host ranks: its options, the errors its operations end in,
//! and its ranks, reached through [`Links`] (in this process, or across
//! processes of a node: `engine::transport`).

use crate::engine::transport::inproc::Fifo;
pub use crate::engine::transport::links::{spin_limit, InProcess, Links, Pace, PaceRule, Wait};
use crate::engine::transport::links::{FifoShape, LinkError, WaitCtl};
use crate::engine::transport::mem::{AllocError, HostBuf};
use crate::engine::types::Dtype;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most channels one program may have.
pub const MAX_CHANNELS: usize = 128;

/// The host engine's default FIFO slot (`--slot-size`).
pub const HOST_SLOT_BYTES: usize = 256 << 10;

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
    /// Measure every directed link (`--links`).
    pub link_timing: bool,
    /// Slowed links (fault injection).
    pub pace: Pace,
    /// Whether rank threads get CPUs of their own.
    pub bind: crate::engine::cpus::Bind,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            slots: 4,
            slot_bytes: HOST_SLOT_BYTES,
            direct_min_bytes: 4096,
            timeout: Duration::from_secs(300),
            link_timing: false,
            pace: Pace::default(),
            bind: crate::engine::cpus::Bind::None,
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
    #[error("rank {rank} waited {waited:?} (timeout) at a barrier {}", crate::engine::transport::links::barrier_arrivals(*.arrived, *.nranks))]
    BarrierTimeout {
        rank: usize,
        /// How many ranks had arrived, where the barrier knows.
        arrived: Option<usize>,
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
    /// A wait on other processes' ranks while setting an operation up
    /// that did not end within the timeout.
    #[error("rank {rank} waited {waited:?} (timeout) for {what}")]
    SetupTimeout {
        rank: usize,
        /// What was awaited, e.g. `rank 1's connection memory (channel 2)`.
        what: String,
        waited: Duration,
    },
    #[error("stopped because another rank failed")]
    Aborted,
    #[error("{0}")]
    Setup(String),
    /// A layout this device cannot run as asked (blocks that cannot all
    /// be resident at once, a step past a protocol's slot): the user's
    /// to change.
    #[error("{0}")]
    Unfit(String),
    /// An allocation the operation needs was refused.
    #[error("not enough memory: {0}")]
    Memory(AllocError),
    /// An MPI call failed (the `mpi` engine).
    #[error("MPI: {0}")]
    Mpi(String),
}

/// A sweep's groups, as far as its memory goes: each of `members`
/// operations holds buffers of its own, each of `ways` (distinct
/// collectives of `--group-mix`, which names `mix` collectives: `--group`
/// may not be fewer) connections of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupShape {
    pub members: usize,
    pub mix: usize,
    pub ways: usize,
}

impl GroupShape {
    /// A sweep without groups.
    pub const NONE: GroupShape = GroupShape {
        members: 0,
        mix: 0,
        ways: 1,
    };
}

/// What to change when a sweep's memory does not fit in the `usable`
/// bytes (said of the sweep): where its `connections` alone outgrow
/// them, no size fits; a sweep of groups may also shrink them.
pub fn memory_advice(connections: u64, usable: u64, group: GroupShape) -> String {
    let GroupShape { members, mix, ways } = group;
    if connections >= usable {
        let mix = if ways > 1 {
            ", or the distinct collectives of --group-mix"
        } else {
            ""
        };
        format!("its connections alone do not fit, whatever the sizes: lower --ranks or --channels{mix}")
    } else {
        let group = if members > 1 && members > mix {
            ", or --group"
        } else if members > 1 {
            ", or the collectives of --group-mix"
        } else {
            ""
        };
        format!("lower --sizes' maximum or --ranks{group}")
    }
}

impl ExecError {
    /// A wait on a peer that gave up at the timeout: the run hung (the
    /// harness dumps the flight recorders and ends with exit code 3).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            ExecError::Timeout { .. }
                | ExecError::BarrierTimeout { .. }
                | ExecError::CollectiveTimeout { .. }
                | ExecError::SetupTimeout { .. }
        )
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
        tracing::debug!(
            nranks,
            slots = opts.slots,
            slot_bytes = opts.slot_bytes,
            direct_min_bytes = opts.direct_min_bytes,
            timeout = ?opts.timeout,
            "host world"
        );
        Arc::new(HostWorld {
            nranks,
            opts,
            links,
            abort: AtomicBool::new(false),
        })
    }

    /// Waits until every rank has arrived; honours the timeout and abort.
    pub fn barrier(&self, rank: usize) -> Result<(), ExecError> {
        Ok(self.links.barrier(self, rank)?)
    }

    /// Rank `rank`'s physical buffers.
    pub fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], ExecError> {
        Ok(self.links.buffers(rank, bytes)?)
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
        let shape = FifoShape {
            slots: self.opts.slots,
            slot_bytes: self.opts.slot_bytes,
        };
        Ok(self.links.fifo(from, to, chan, shape)?)
    }

    /// Elements per step for `dtype`: what one slot holds.
    pub fn chunk_elems(&self, dtype: Dtype) -> usize {
        (self.opts.slot_bytes / dtype.size()).max(1)
    }
}

impl WaitCtl for HostWorld {
    fn nranks(&self) -> usize {
        self.nranks
    }

    fn timeout(&self) -> Duration {
        self.opts.timeout
    }

    fn aborted(&self) -> bool {
        HostWorld::aborted(self)
    }
}

impl From<LinkError> for ExecError {
    fn from(e: LinkError) -> ExecError {
        match e {
            LinkError::Aborted => ExecError::Aborted,
            LinkError::BarrierTimeout {
                rank,
                arrived,
                nranks,
                waited,
            } => ExecError::BarrierTimeout {
                rank,
                arrived,
                nranks,
                waited,
            },
            LinkError::Setup(s) => ExecError::Setup(s),
            LinkError::Memory(e) => ExecError::Memory(e),
        }
    }
}
