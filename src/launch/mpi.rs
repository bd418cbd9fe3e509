//! The MPI world (feature `mpi`): one rank per process under mpirun/srun.
//! Bootstrap data (pids, shared-memory handles, host names) moves through
//! MPI; every wait here polls, so it honours the timeout and the abort flag.

use super::MpiError;
use crate::engine::exec::{mpi_coll, ExecError, HostBuf, OpDesc};
use crate::engine::transport::node::{
    self, Barrier, BarrierError, NodeLinks, ProcessPeers, Relay, Shape,
};
use crate::engine::transport::relay::{Comm as RelayComm, MpiRelay};
use crate::engine::types::{Collective, Dtype, ReduceOp};
use mpi::collective::CommunicatorCollectives;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The world communicator, shared by this process's threads.
struct Comm(SimpleCommunicator);

// SAFETY: MPI was initialised with MPI_THREAD_MULTIPLE (checked in `init`),
// under which any thread may call MPI on a communicator concurrently.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

/// This process's place in the MPI world.
pub struct Mpi {
    _universe: mpi::environment::Universe,
    world: Arc<Comm>,
    pub rank: usize,
    pub size: usize,
    /// The host each rank runs on, by rank.
    pub hosts: Vec<String>,
    /// The relay to ranks on other hosts, started by the first who needs it.
    relay: std::sync::Mutex<Option<Arc<MpiRelay>>>,
}

/// The MPI world as the engine's executors see it ([`ProcessPeers`]).
struct MpiPeers {
    world: Arc<Comm>,
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    force_relay: bool,
    relay: Option<Arc<MpiRelay>>,
}

impl ProcessPeers for MpiPeers {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&self) -> &[String] {
        &self.hosts
    }
    fn maps(&self, r: usize) -> bool {
        maps(&self.hosts, self.rank, r, self.force_relay)
    }
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BarrierError> {
        self.all_gather_until(mine, None, &|| false)
    }
    fn all_gather_until(
        &self,
        mine: &[u8],
        limit: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<u8>>, BarrierError> {
        let limit = limit.unwrap_or(GATHER_WAIT);
        all_gather(&self.world, self.size, mine, limit, stop).map_err(|e| BarrierError(e.0))
    }
    fn send(&self, to: usize, tag: i32, bytes: &[u8]) -> Result<(), BarrierError> {
        send(&self.world, to, tag, bytes);
        Ok(())
    }
    fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        try_receive(&self.world, tag)
    }
    fn relay(&self) -> Option<Arc<dyn Relay>> {
        self.relay.clone().map(|r| r as Arc<dyn Relay>)
    }
}

/// Whether rank `me` maps rank `r`'s memory: itself, and the ranks of its
/// host unless the relay is forced.
fn maps(hosts: &[String], me: usize, r: usize, force_relay: bool) -> bool {
    r == me || (!force_relay && hosts.get(r) == hosts.get(me))
}

/// Fixed size of one rank's bootstrap record.
pub const RECORD: usize = 256;

/// Joins the MPI world when a launcher started this process; `None` otherwise.
pub fn init() -> Result<Option<Mpi>, MpiError> {
    if super::foreign_launcher().is_none() && std::env::var("OMPI_COMM_WORLD_SIZE").is_err() {
        return Ok(None);
    }
    let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
        .ok_or_else(|| MpiError("MPI was already initialised".into()))?;
    if threading != Threading::Multiple {
        return Err(MpiError(format!(
            "this MPI gives thread support {threading:?}; collbench needs MPI_THREAD_MULTIPLE"
        )));
    }
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let world = Arc::new(Comm(world));
    let me = super::hostname();
    let mut m = Mpi {
        _universe: universe,
        world,
        rank,
        size,
        hosts: Vec::new(),
        relay: std::sync::Mutex::new(None),
    };
    m.hosts = m
        .all_gather(me.as_bytes())?
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect();
    Ok(Some(m))
}

impl Mpi {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    pub fn world(&self) -> &SimpleCommunicator {
        &self.world.0
    }

    /// Every rank's `mine` (at most 64 KiB), by rank.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, MpiError> {
        all_gather(&self.world, self.size, mine, GATHER_WAIT, &|| false)
    }

    /// The relay to the ranks of other hosts, if there are any (all ranks
    /// but this one with COLLBENCH_FORCE_RELAY=1); started on first use.
    fn relay(&self) -> Result<Option<Arc<MpiRelay>>, MpiError> {
        let force = super::force_relay();
        if (0..self.size).all(|r| maps(&self.hosts, self.rank, r, force)) {
            return Ok(None);
        }
        let mut slot = self.relay.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = slot.as_ref() {
            return Ok(Some(Arc::clone(r)));
        }
        let raw = self.world.0.as_raw();
        let r = Arc::new(
            MpiRelay::start(RelayComm(raw)).map_err(|e| MpiError(format!("relay thread: {e}")))?,
        );
        *slot = Some(Arc::clone(&r));
        Ok(Some(r))
    }

    /// This world as the executors see it.
    pub fn peers(&self) -> Result<Arc<dyn ProcessPeers>, MpiError> {
        Ok(Arc::new(MpiPeers {
            world: Arc::clone(&self.world),
            rank: self.rank,
            size: self.size,
            hosts: self.hosts.clone(),
            force_relay: super::force_relay(),
            relay: self.relay()?,
        }))
    }

    /// A barrier that gives up after `timeout` or when `abort()` says so.
    pub fn barrier(&self, timeout: Duration, abort: &dyn Fn() -> bool) -> Result<(), MpiError> {
        barrier(&self.world, timeout, abort)
    }

    /// The barrier as a value other threads can call.
    pub fn barrier_fn(&self) -> Barrier {
        let world = Arc::clone(&self.world);
        Box::new(move |timeout, abort| {
            barrier(&world, timeout, abort).map_err(|e| node::BarrierError(e.to_string()))
        })
    }

    /// Links to every other rank: shared memory to the ranks of this host,
    /// a relay over MPI to the others (all of them with COLLBENCH_FORCE_RELAY=1,
    /// which tests the relay on one host).
    pub fn node_links(&self, shape: Shape) -> Result<NodeLinks, MpiError> {
        super::node_links(&*self.peers()?, &|| self.barrier_fn(), shape)
    }
}

impl Mpi {
    /// Why MPI's own collectives cannot run this case, if they cannot.
    pub fn unsupported(&self, coll: Collective, dtype: Dtype, op: ReduceOp) -> Option<String> {
        mpi_coll::unsupported(coll, dtype, op)
    }

    /// One operation through MPI's own collectives (`--engine mpi`).
    pub fn run_collective(
        &self,
        op: &OpDesc,
        bufs: &mut [HostBuf; 3],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        mpi_coll::run_op(&self.world.0, op, bufs, timeout, abort)
    }
}

fn barrier(world: &Comm, timeout: Duration, abort: &dyn Fn() -> bool) -> Result<(), MpiError> {
    {
        let mut req = world.0.immediate_barrier();
        let start = Instant::now();
        loop {
            match req.test() {
                Ok(_) => return Ok(()),
                Err(r) => req = r,
            }
            if abort() {
                // The request cannot be cancelled; the process is ending.
                std::mem::forget(req);
                return Err(MpiError("aborted".into()));
            }
            if start.elapsed() > timeout {
                std::mem::forget(req);
                return Err(MpiError(format!(
                    "MPI barrier waited {:?}",
                    start.elapsed()
                )));
            }
            std::thread::yield_now();
        }
    }
}

impl Mpi {
    /// Sends `bytes` to rank `to` with `tag`.
    pub fn send(&self, to: usize, tag: i32, bytes: &[u8]) {
        send(&self.world, to, tag, bytes)
    }

    /// The next message with `tag` from any rank, if one has arrived.
    pub fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        try_receive(&self.world, tag)
    }

    /// Rank 0's `bytes` on every rank (at most 64 KiB).
    pub fn broadcast(&self, bytes: &[u8]) -> Result<Vec<u8>, MpiError> {
        let all = self.all_gather(if self.rank == 0 { bytes } else { &[] })?;
        Ok(all.into_iter().next().unwrap_or_default())
    }
}

/// How long an all-gather waits for every rank (a setup step: the ranks
/// arrive within seconds, or one of them is gone).
const GATHER_WAIT: Duration = Duration::from_secs(600);

/// The longest record a rank may give an all-gather.
const LONGEST: usize = 64 << 10;

/// Every rank's `mine` (at most [`LONGEST`] bytes), by rank, within
/// `limit` unless `stop` says so: one round of each rank's length and the
/// first of its bytes (a record of up to [`RECORD`] - 10 bytes, in one
/// round as before), then as many rounds of [`RECORD`] - 2 byte pieces as
/// the longest rest needs (a refusal's words, a dump folder's path). A
/// record too long fails the gather on every rank alike, never one rank
/// alone while the others wait for it.
fn all_gather(
    world: &Comm,
    size: usize,
    mine: &[u8],
    limit: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Vec<u8>>, MpiError> {
    const LEN: usize = 8;
    let start = Instant::now();
    let round = |bytes: &[u8]| {
        let left = limit.saturating_sub(start.elapsed());
        gather_records(world, size, bytes, left, stop)
    };
    let head = mine.len().min(RECORD - 2 - LEN);
    let mut first = (mine.len() as u64).to_le_bytes().to_vec();
    first.extend_from_slice(&mine[..head]);
    let mut lens = Vec::with_capacity(size);
    let mut all = Vec::with_capacity(size);
    for (r, rec) in round(&first)?.into_iter().enumerate() {
        let n = rec.get(..LEN).and_then(|b| <[u8; LEN]>::try_from(b).ok());
        let n = n.map_or(usize::MAX, |n| {
            usize::try_from(u64::from_le_bytes(n)).unwrap_or(usize::MAX)
        });
        if n > LONGEST {
            return Err(MpiError(format!(
                "rank {r}'s record of {n} bytes is too long for an all-gather (at most {LONGEST})"
            )));
        }
        lens.push(n);
        all.push(rec[LEN..].to_vec());
    }
    let piece = RECORD - 2;
    let rest = |n: usize| n.saturating_sub(RECORD - 2 - LEN);
    let rounds = lens
        .iter()
        .map(|&n| rest(n))
        .max()
        .unwrap_or(0)
        .div_ceil(piece);
    for k in 0..rounds {
        let at = (head + k * piece).min(mine.len());
        let part = &mine[at..(at + piece).min(mine.len())];
        for (whole, part) in all.iter_mut().zip(round(part)?) {
            whole.extend(part);
        }
    }
    match all.iter().zip(&lens).position(|(b, &n)| b.len() != n) {
        Some(r) => Err(MpiError(format!(
            "rank {r}'s record came with {} of its {} bytes",
            all[r].len(),
            lens[r]
        ))),
        None => Ok(all),
    }
}

/// Every rank's `mine` (at most [`RECORD`] - 2 bytes), by rank: a
/// non-blocking all-gather tested until it completes, `stop` says so or
/// `limit` passes (then the request is left to the ending process, with
/// its buffers).
fn gather_records(
    world: &Comm,
    size: usize,
    mine: &[u8],
    limit: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Vec<u8>>, MpiError> {
    if mine.len() > RECORD - 2 {
        return Err(MpiError(format!(
            "bootstrap record of {} bytes is too long",
            mine.len()
        )));
    }
    let mut send = vec![0u8; RECORD];
    send[..2].copy_from_slice(&(mine.len() as u16).to_le_bytes());
    send[2..2 + mine.len()].copy_from_slice(mine);
    // A request that may be left running needs buffers that outlive it.
    let send: &'static [u8] = Box::leak(send.into_boxed_slice());
    let all: &'static mut [u8] = Box::leak(vec![0u8; RECORD * size].into_boxed_slice());
    let mut req = world
        .0
        .immediate_all_gather_into(mpi::request::StaticScope, send, all);
    let start = Instant::now();
    let all: &'static [u8] = loop {
        match req.test_with_data() {
            Ok((_, all)) => break all,
            Err(r) => req = r,
        }
        let why = if stop() {
            "aborted".to_string()
        } else if start.elapsed() > limit {
            format!("MPI all-gather waited {:?}", start.elapsed())
        } else {
            std::thread::yield_now();
            continue;
        };
        // The request cannot be cancelled; the process is ending.
        std::mem::forget(req);
        return Err(MpiError(why));
    };
    let records = all
        .chunks(RECORD)
        .map(|c| {
            let n = u16::from_le_bytes([c[0], c[1]]) as usize;
            c[2..2 + n.min(RECORD - 2)].to_vec()
        })
        .collect();
    // SAFETY: both came from Box::leak above, and the completed request
    // (consumed by `test_with_data`) no longer uses them; `all` is not
    // read again.
    unsafe {
        drop(Box::from_raw(send as *const [u8] as *mut [u8]));
        drop(Box::from_raw(all as *const [u8] as *mut [u8]));
    }
    Ok(records)
}

fn send(world: &Comm, to: usize, tag: i32, bytes: &[u8]) {
    world.0.process_at_rank(to as i32).send_with_tag(bytes, tag);
}

fn try_receive(world: &Comm, tag: i32) -> Option<(usize, Vec<u8>)> {
    let probed = world
        .0
        .any_process()
        .immediate_matched_probe_with_tag(tag)?;
    let (bytes, status) = probed.matched_receive_vec::<u8>();
    Some((status.source_rank() as usize, bytes))
}
