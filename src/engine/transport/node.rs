//! Ranks that are processes of one node: every rank's incoming FIFOs live in
//! one shared segment it creates, and its buffers in another, which its
//! peers map; senders write slots straight into the receiver's segment, and
//! receivers read direct payloads straight from the sender's buffers (offsets
//! translate between the two mappings). The protocol is the in-process one.

use super::inproc::{DirectMap, Fifo};
use super::links::{FifoShape, LinkError, Links, WaitCtl};
use super::mem::HostBuf;
use super::shm::Segment;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The segments a rank creates and shares.
pub struct Local {
    pub fifos: Segment,
    pub bufs: Segment,
}

/// What a rank tells its peers about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub pid: u32,
    pub fifo_fd: i32,
    pub buf_fd: i32,
}

/// The shape every rank's segments share.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub nranks: usize,
    /// Connection channels per peer pair.
    pub chans: usize,
    pub slots: usize,
    pub slot_bytes: usize,
    /// Bytes of each rank buffer (buf0, buf1, scratch), 64-byte multiples.
    pub bufs: [usize; 3],
}

impl Shape {
    fn region(&self) -> usize {
        Fifo::region_bytes(self.slots, self.slot_bytes).next_multiple_of(64)
    }

    fn fifo_bytes(&self) -> usize {
        self.nranks * self.chans * self.region()
    }

    fn buf_bytes(&self) -> usize {
        self.bufs.iter().map(|b| b.next_multiple_of(64)).sum()
    }

    /// Offset of the FIFO from `from` on `chan` in the receiver's segment.
    fn fifo_at(&self, from: usize, chan: u32) -> usize {
        (from * self.chans + chan as usize) * self.region()
    }
}

/// Carries FIFO slots to and from ranks on other hosts.
pub trait Relay: Send + Sync {
    /// Serve `fifo`: this rank's end towards (`outgoing`) or from `peer` on `chan`.
    fn add(&self, fifo: Arc<Fifo>, peer: usize, chan: u32, outgoing: bool);
    /// Stops relaying; true when nothing it started (a send from this
    /// rank's buffers, a receive into its FIFO slots) can still touch this
    /// process's segments, false when some transfer could not be ended.
    fn stop(&self) -> bool;
}

/// The processes of a world as the engine sees them, one rank each: what a
/// launcher (MPI, `--procs`) gives the executors to set up connections
/// between processes. Every wait in here honours a timeout.
pub trait ProcessPeers: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// The host each rank runs on, by rank.
    fn hosts(&self) -> &[String];
    /// Whether this process maps rank `r`'s memory (r is on this node and
    /// the relay is not forced); the other ranks are reached through the relay.
    fn maps(&self, r: usize) -> bool;
    /// Every rank's `mine` (a short record), by rank.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BarrierError>;
    /// As [`all_gather`](Self::all_gather), giving up once `stop` says so
    /// or after `limit` (None: the launcher's own, minutes), where the
    /// launcher can: both of ours do.
    fn all_gather_until(
        &self,
        mine: &[u8],
        limit: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, BarrierError> {
        let _ = (limit, stop);
        self.all_gather(mine)
    }
    /// Sends a short message to rank `to` under `tag`.
    fn send(&self, to: usize, tag: i32, bytes: &[u8]) -> Result<(), BarrierError>;
    /// The next message under `tag` from any rank, if one has arrived.
    fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)>;
    /// The relay to ranks this process does not map (None: it maps all).
    fn relay(&self) -> Option<Arc<dyn Relay>>;
    /// A rank whose process the launcher saw die, if any (None where the
    /// launcher does not tell).
    fn lost(&self) -> Option<usize> {
        None
    }

    /// This process's index among the ranks of its host, and their count.
    fn node_rank(&self) -> (usize, usize) {
        node_rank(self.hosts(), self.rank())
    }
}

/// A proxy thread's loop: runs `pass` (one pass over its routes; true when
/// anything moved) until `stop`, spinning while work flows, then yielding,
/// and in a long idle (between operations) sleeping so as not to compete
/// for a core.
pub fn serve_until(stop: &std::sync::atomic::AtomicBool, mut pass: impl FnMut() -> bool) {
    let mut idle = 0u32;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        if pass() {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle > 100_000 {
                std::thread::sleep(Duration::from_micros(20));
            } else if idle > 1000 {
                std::thread::yield_now();
            }
        }
    }
}

/// Rank `me`'s index among the ranks on its host (`hosts`: each rank's
/// host, by rank), and how many there are.
pub fn node_rank(hosts: &[String], me: usize) -> (usize, usize) {
    let Some(mine) = hosts.get(me) else {
        return (0, 1);
    };
    let before = hosts[..me].iter().filter(|h| *h == mine).count();
    (before, hosts.iter().filter(|h| *h == mine).count())
}

/// Why a barrier across processes gave up: the launcher's own words (a
/// timeout, an abort, a failed call).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BarrierError(pub String);

/// A barrier across processes: gives up after the timeout or on abort.
pub type Barrier =
    Box<dyn Fn(Duration, &dyn Fn() -> bool) -> Result<(), BarrierError> + Send + Sync>;

/// Creates this rank's segments. The buffers' pages are reserved now (all
/// of them are used), so a shortage is an error here rather than a SIGBUS
/// on first touch; FIFO pages are only touched when a connection is used.
pub fn create(shape: &Shape, rank: usize) -> std::io::Result<Local> {
    Ok(Local {
        fifos: Segment::create(&format!("collbench-fifos-{rank}"), shape.fifo_bytes())?,
        bufs: Segment::create_reserved(&format!("collbench-bufs-{rank}"), shape.buf_bytes())?,
    })
}

/// The links of rank `me`: shared memory to the peers of its host, a relay
/// to the others.
pub struct NodeLinks {
    me: usize,
    shape: Shape,
    /// This rank's segments: unmapped in `drop` once the relay is stopped
    /// (never while a transfer may still read or write them).
    local: ManuallyDrop<Local>,
    /// Peers' segments, mapped here (None for this rank and remote peers).
    peers: Vec<Option<Local>>,
    relay: Option<Arc<dyn Relay>>,
    cache: Mutex<HashMap<(usize, usize, u32), Arc<Fifo>>>,
    barrier: Barrier,
}

impl NodeLinks {
    /// Maps the segments of every peer on this host; `peers[r]` describes
    /// rank r, None for ranks on other hosts (reached through `relay`).
    pub fn connect(
        me: usize,
        shape: Shape,
        local: Local,
        peers: &[Option<PeerInfo>],
        relay: Option<Arc<dyn Relay>>,
        barrier: Barrier,
    ) -> std::io::Result<NodeLinks> {
        let mapped = peers
            .iter()
            .enumerate()
            .map(|(r, p)| match p {
                Some(p) if r != me => Ok(Some(Local {
                    fifos: Segment::open(p.pid, p.fifo_fd, shape.fifo_bytes())?,
                    bufs: Segment::open(p.pid, p.buf_fd, shape.buf_bytes())?,
                })),
                _ => Ok(None),
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let local_peers: Vec<usize> = (0..peers.len())
            .filter(|&r| r != me && matches!(mapped.get(r), Some(Some(_))))
            .collect();
        let remote_peers: Vec<usize> = (0..peers.len())
            .filter(|&r| r != me && matches!(mapped.get(r), Some(None) | None))
            .collect();
        tracing::info!(
            rank = me,
            shared_memory = ?local_peers,
            relayed = ?remote_peers,
            relay = relay.is_some(),
            fifo_bytes = shape.fifo_bytes(),
            buf_bytes = shape.buf_bytes(),
            "node links: peers on this host through shared memory, the others through the relay"
        );
        Ok(NodeLinks {
            me,
            shape,
            local: ManuallyDrop::new(local),
            peers: mapped,
            relay,
            cache: Mutex::new(HashMap::new()),
            barrier,
        })
    }

    /// A FIFO in this process's memory that the relay serves.
    fn relayed(&self, from: usize, to: usize, chan: u32) -> Result<Arc<Fifo>, LinkError> {
        let (peer, outgoing) = if from == self.me {
            (to, true)
        } else {
            (from, false)
        };
        let relay = self.relay.as_ref().ok_or_else(|| {
            LinkError::Setup(format!("rank {} has no way to reach rank {peer}", self.me))
        })?;
        let fifo = Arc::new(Fifo::new(self.shape.slots, self.shape.slot_bytes)?);
        relay.add(Arc::clone(&fifo), peer, chan, outgoing);
        Ok(fifo)
    }

    fn is_remote(&self, r: usize) -> bool {
        r != self.me && self.peers.get(r).is_some_and(Option::is_none)
    }

    fn peer(&self, r: usize) -> Result<&Local, LinkError> {
        self.peers.get(r).and_then(Option::as_ref).ok_or_else(|| {
            LinkError::Setup(format!("rank {} has no connection to rank {r}", self.me))
        })
    }

    fn make(&self, from: usize, to: usize, chan: u32) -> Result<Fifo, LinkError> {
        if chan as usize >= self.shape.chans {
            return Err(LinkError::Setup(format!(
                "channel {chan} beyond the {} set up",
                self.shape.chans
            )));
        }
        let (segment, direct) = if to == self.me {
            let sender = self.peer(from)?;
            (
                &self.local.fifos,
                DirectMap {
                    send_base: 0,
                    recv_base: sender.bufs.as_ptr() as usize,
                },
            )
        } else if from == self.me {
            let receiver = self.peer(to)?;
            (
                &receiver.fifos,
                DirectMap {
                    send_base: self.local.bufs.as_ptr() as usize,
                    recv_base: 0,
                },
            )
        } else {
            return Err(LinkError::Setup(format!(
                "rank {} asked for the link {from} -> {to}",
                self.me
            )));
        };
        let at = self
            .shape
            .fifo_at(if to == self.me { from } else { self.me }, chan);
        let region = NonNull::new(segment.as_ptr().wrapping_add(at))
            .ok_or_else(|| LinkError::Setup("null segment".into()))?;
        // SAFETY: the region lies inside the segment (fifo_at < fifo_bytes), is
        // 64-byte aligned, zero-filled at creation, lives as long as these
        // links, and (from, to, chan) has exactly one sender and one receiver.
        Ok(unsafe { Fifo::in_region(region, self.shape.slots, self.shape.slot_bytes, direct) })
    }
}

impl Drop for NodeLinks {
    fn drop(&mut self) {
        // Peers' mappings stay valid whatever the peers do (a mapping keeps
        // its memory file alive), and ranks of this process hold the world,
        // so the only reader left is the relay: stop it first.
        let quiet = self.relay.take().is_none_or(|r| r.stop());
        if quiet {
            // SAFETY: dropped once, here; nothing uses the segments any more.
            unsafe { ManuallyDrop::drop(&mut self.local) };
        } else {
            tracing::warn!(
                rank = self.me,
                "relay transfers still pending: this rank's shared segments stay mapped until exit"
            );
        }
    }
}

impl Links for NodeLinks {
    fn fifo(
        &self,
        from: usize,
        to: usize,
        chan: u32,
        _shape: FifoShape,
    ) -> Result<Arc<Fifo>, LinkError> {
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| LinkError::Setup("connection table poisoned".into()))?;
        if let Some(f) = cache.get(&(from, to, chan)) {
            return Ok(Arc::clone(f));
        }
        let peer = if from == self.me { to } else { from };
        let remote = self.is_remote(peer);
        tracing::debug!(
            rank = self.me,
            from,
            to,
            chan,
            transport = if remote { "relay" } else { "shared memory" },
            "FIFO connected"
        );
        let fifo = if remote {
            self.relayed(from, to, chan)?
        } else {
            Arc::new(self.make(from, to, chan)?)
        };
        cache.insert((from, to, chan), Arc::clone(&fifo));
        Ok(fifo)
    }

    fn barrier(&self, ctl: &dyn WaitCtl, rank: usize) -> Result<(), LinkError> {
        let timeout = ctl.timeout();
        let start = std::time::Instant::now();
        (self.barrier)(timeout, &|| ctl.aborted()).map_err(|e| {
            tracing::debug!(rank, reason = %e, "node barrier gave up");
            if ctl.aborted() {
                LinkError::Aborted
            } else if start.elapsed() < timeout {
                // Not a wait that ran out: the launcher says the world broke
                // (a rank exited).
                LinkError::Setup(format!("rank {rank} at a barrier: {e}"))
            } else {
                LinkError::BarrierTimeout {
                    rank,
                    arrived: None,
                    nranks: ctl.nranks(),
                    waited: timeout,
                }
            }
        })
    }

    fn buffers(&self, rank: usize, bytes: [usize; 3]) -> Result<[HostBuf; 3], LinkError> {
        if rank != self.me || bytes.iter().zip(self.shape.bufs).any(|(b, s)| *b > s) {
            return Err(LinkError::Setup(format!(
                "rank {rank} asked for buffers {bytes:?} beyond the shared {:?}",
                self.shape.bufs
            )));
        }
        let base = self.local.bufs.as_ptr();
        let mut at = 0;
        let mut views = Vec::with_capacity(3);
        for (i, &len) in bytes.iter().enumerate() {
            let ptr = NonNull::new(base.wrapping_add(at))
                .ok_or_else(|| LinkError::Setup("null segment".into()))?;
            // SAFETY: inside this rank's buffer segment, which outlives the links' users.
            views.push(unsafe { HostBuf::view(ptr, len) });
            at += self.shape.bufs[i].next_multiple_of(64);
        }
        views
            .try_into()
            .map_err(|_| LinkError::Setup("three buffers".into()))
    }
}
