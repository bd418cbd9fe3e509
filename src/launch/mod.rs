//! Who am I: how ranks come to be, and the worlds they run in
//! ([`open_worlds`]). Thread ranks of this process (up to
//! [`max_thread_ranks`]), or one rank per process under MPI. Under an MPI
//! or Slurm launcher with several tasks, a build without MPI would run N
//! independent worlds and print N misleading tables: [`foreign_launcher`]
//! notices that first.

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
#[path = "mpi_disabled.rs"]
mod mpi;

pub mod procs;
mod worlds;

pub use self::mpi::{init as init_mpi, Mpi};
pub use procs::Procs;
pub use worlds::{open_worlds, LaunchError, WorldSpec, Worlds};

use crate::engine::exec::{ExecError, HostBuf, OpDesc};
use crate::engine::transport::node::{self, Barrier, NodeLinks, PeerInfo, ProcessPeers, Shape};
use crate::engine::types::{Collective, Dtype, ReduceOp};
use std::sync::Arc;
use std::time::Duration;

/// The world of processes this one is a rank of: started by mpirun/srun
/// (feature `mpi`), or by `collbench --procs N` on one node.
pub enum Peers {
    Mpi(Mpi),
    Procs(Procs),
}

/// Why `--engine mpi` cannot run in a `--procs` world.
const MPI_ENGINE_UNDER_PROCS: &str = "--engine mpi needs an MPI launch (mpirun), not --procs";

impl Peers {
    /// Joins the world this process was started into: a `--procs` parent's,
    /// else MPI's when a launcher started it; `None` when it runs alone.
    pub fn join() -> Result<Option<Peers>, MpiError> {
        if let Some(p) = procs::init()? {
            return Ok(Some(Peers::Procs(p)));
        }
        Ok(init_mpi()?.map(Peers::Mpi))
    }

    pub fn rank(&self) -> usize {
        match self {
            Peers::Mpi(m) => m.rank(),
            Peers::Procs(p) => p.rank(),
        }
    }

    pub fn size(&self) -> usize {
        match self {
            Peers::Mpi(m) => m.size(),
            Peers::Procs(p) => p.size(),
        }
    }

    /// How many ranks run on this process's host (this one included).
    pub fn node_size(&self) -> usize {
        self.node_rank().1
    }

    /// This rank's place on its node: (node rank, ranks on the node).
    pub fn node_rank(&self) -> (usize, usize) {
        let hosts = match self {
            Peers::Mpi(m) => m.hosts(),
            Peers::Procs(p) => p.hosts(),
        };
        node::node_rank(hosts, self.rank())
    }

    /// The MPI world, when ranks run under MPI (`--engine mpi` needs it).
    pub fn mpi(&self) -> Option<&Mpi> {
        match self {
            Peers::Mpi(m) => Some(m),
            Peers::Procs(_) => None,
        }
    }

    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, MpiError> {
        match self {
            Peers::Mpi(m) => m.all_gather(mine),
            Peers::Procs(p) => p.all_gather(mine),
        }
    }

    pub fn barrier(&self, timeout: Duration, abort: &dyn Fn() -> bool) -> Result<(), MpiError> {
        match self {
            Peers::Mpi(m) => m.barrier(timeout, abort),
            Peers::Procs(p) => p.barrier(timeout, abort),
        }
    }

    pub fn send(&self, to: usize, tag: i32, bytes: &[u8]) {
        match self {
            Peers::Mpi(m) => m.send(to, tag, bytes),
            Peers::Procs(p) => p.send(to, tag, bytes),
        }
    }

    pub fn try_receive(&self, tag: i32) -> Option<(usize, Vec<u8>)> {
        match self {
            Peers::Mpi(m) => m.try_receive(tag),
            Peers::Procs(p) => p.try_receive(tag),
        }
    }

    /// Rank 0's `bytes` on every rank.
    pub fn broadcast(&self, bytes: &[u8]) -> Result<Vec<u8>, MpiError> {
        match self {
            Peers::Mpi(m) => m.broadcast(bytes),
            Peers::Procs(p) => p.broadcast(bytes),
        }
    }

    pub fn node_links(&self, shape: Shape) -> Result<NodeLinks, MpiError> {
        match self {
            Peers::Mpi(m) => m.node_links(shape),
            Peers::Procs(p) => p.node_links(shape),
        }
    }

    /// Asks whether a rank's process of the world died (which, and how),
    /// where the launcher tells: `--procs` does; under MPI the launcher
    /// ends the job itself.
    pub fn lost_probe(&self) -> Option<procs::LostProbe> {
        match self {
            Peers::Mpi(_) => None,
            Peers::Procs(p) => Some(p.lost_probe()),
        }
    }

    /// This world as the executors see it.
    pub fn peers(&self) -> Result<Arc<dyn ProcessPeers>, MpiError> {
        match self {
            Peers::Mpi(m) => m.peers(),
            Peers::Procs(p) => Ok(p.peers()),
        }
    }

    /// Why MPI's own collectives cannot run this case, if they cannot.
    pub fn unsupported(&self, coll: Collective, dtype: Dtype, op: ReduceOp) -> Option<String> {
        match self {
            Peers::Mpi(m) => m.unsupported(coll, dtype, op),
            Peers::Procs(_) => Some(MPI_ENGINE_UNDER_PROCS.into()),
        }
    }

    /// One operation through MPI's own collectives (`--engine mpi`).
    pub fn run_collective(
        &self,
        op: &OpDesc,
        bufs: &mut [HostBuf; 3],
        timeout: Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        match self {
            Peers::Mpi(m) => m.run_collective(op, bufs, timeout, abort),
            Peers::Procs(_) => Err(ExecError::Mpi(MPI_ENGINE_UNDER_PROCS.into())),
        }
    }
}

/// Links to every other rank of `peers`: shared memory to the ranks this
/// process maps, the relay to the others. Each rank's segments are
/// announced by an all-gather ("pid fifo-fd buf-fd").
fn node_links(
    peers: &dyn ProcessPeers,
    barrier: &dyn Fn() -> Barrier,
    shape: Shape,
) -> Result<NodeLinks, MpiError> {
    let me = peers.rank();
    let local = node::create(&shape, me).map_err(|e| MpiError(format!("shared memory: {e}")))?;
    let fd = |s: &crate::engine::transport::shm::Segment| s.fd().unwrap_or(-1);
    let mine = format!(
        "{} {} {}",
        std::process::id(),
        fd(&local.fifos),
        fd(&local.bufs)
    );
    let infos = peers
        .all_gather(mine.as_bytes())
        .map_err(|e| MpiError(e.0))?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            if peers.maps(r) {
                parse_peer(b).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let links = NodeLinks::connect(me, shape, local, &infos, peers.relay(), barrier())
        .map_err(|e| MpiError(format!("mapping peers' shared memory: {e}")))?;
    // Nobody writes into a peer's memory before every peer has mapped it.
    barrier()(Duration::from_secs(60), &|| false)
        .map_err(|e| MpiError(format!("after mapping peers' memory: {e}")))?;
    Ok(links)
}

fn parse_peer(b: &[u8]) -> Result<PeerInfo, MpiError> {
    let text = String::from_utf8_lossy(b);
    let bad = || MpiError(format!("bad bootstrap record from a peer: '{text}'"));
    let v: Vec<i64> = text
        .split_whitespace()
        .map(|t| t.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    match v.as_slice() {
        [pid, f, b] if *pid > 0 => Ok(PeerInfo {
            pid: u32::try_from(*pid).map_err(|_| bad())?,
            fifo_fd: i32::try_from(*f).ok().filter(|f| *f >= 0).ok_or_else(bad)?,
            buf_fd: i32::try_from(*b).ok().filter(|b| *b >= 0).ok_or_else(bad)?,
        }),
        _ => Err(bad()),
    }
}

/// Why joining or using the MPI world failed (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MpiError(pub String);

/// `COLLBENCH_FORCE_RELAY=1`: every peer through the relay (MPI point to
/// point), even on this host, to test that path on one machine.
pub fn force_relay() -> bool {
    force_relay_setting().unwrap_or(false)
}

/// `COLLBENCH_FORCE_RELAY`: `1` on; unset, empty or `0` off; any other
/// value is refused (a `yes` or `true` that tested nothing would be read
/// as a test of the relay that passed).
pub fn force_relay_setting() -> Result<bool, MpiError> {
    match std::env::var_os("COLLBENCH_FORCE_RELAY") {
        None => Ok(false),
        Some(v) => match v.to_str().map(str::trim) {
            Some("" | "0") => Ok(false),
            Some("1") => Ok(true),
            _ => Err(MpiError(format!(
                "COLLBENCH_FORCE_RELAY={}: expected 1 (every peer through the relay) or 0",
                v.to_string_lossy()
            ))),
        },
    }
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The most thread ranks this machine runs: oversubscribing cores works
/// (waits yield), but beyond 32 ranks per core each rank gets too little
/// time to finish a sweep in reasonable time.
pub fn max_thread_ranks() -> usize {
    let cores = crate::engine::cpus::cores();
    (cores * 32).min(1024)
}

/// Environment variables launchers set, with the world size they announce.
const LAUNCHERS: [(&str, &str); 5] = [
    ("Open MPI", "OMPI_COMM_WORLD_SIZE"),
    ("PMIx", "PMIX_SIZE"),
    ("MPICH/PMI", "PMI_SIZE"),
    ("MPICH/Hydra", "MPI_LOCALNRANKS"),
    ("Slurm", "SLURM_NTASKS"),
];

/// The launcher that started this process as one of several tasks, if any
/// (`get` reads an environment variable).
pub fn foreign_launcher_in(get: impl Fn(&str) -> Option<String>) -> Option<(String, usize)> {
    LAUNCHERS.iter().find_map(|(name, var)| {
        let n: usize = get(var)?.trim().parse().ok()?;
        // srun inside an allocation sets SLURM_NTASKS even for one task per step.
        let slurm_step = *name == "Slurm" && get("SLURM_STEP_ID").is_none();
        (n > 1 && !slurm_step).then(|| (name.to_string(), n))
    })
}

/// [`foreign_launcher_in`] over this process's environment.
pub fn foreign_launcher() -> Option<(String, usize)> {
    foreign_launcher_in(|v| std::env::var(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launchers_with_several_tasks_are_noticed() {
        assert_eq!(
            foreign_launcher_in(env(&[("OMPI_COMM_WORLD_SIZE", "2")])),
            Some(("Open MPI".into(), 2))
        );
        assert_eq!(
            foreign_launcher_in(env(&[("PMI_SIZE", "4")])),
            Some(("MPICH/PMI".into(), 4))
        );
        assert_eq!(
            foreign_launcher_in(env(&[("SLURM_NTASKS", "8"), ("SLURM_STEP_ID", "0")])),
            Some(("Slurm".into(), 8))
        );
    }

    /// A peer's record is read as it was written, or refused: numbers past
    /// their types are not truncated into other ones (fd 2^32 + 3 had
    /// become fd 3).
    #[test]
    fn a_peers_bootstrap_record_is_checked_not_truncated() {
        let ok = parse_peer(b"123 4 5").unwrap();
        assert_eq!((ok.pid, ok.fifo_fd, ok.buf_fd), (123, 4, 5));
        for bad in [
            "123 4294967299 4",
            "123 4 -1",
            "-5 4 5",
            "0 4 5",
            "4294967296123 4 5",
            "123 4",
            "123 x 4 5",
            "123 4 5 6",
        ] {
            let err = parse_peer(bad.as_bytes()).err().map(|e| e.to_string());
            assert_eq!(
                err,
                Some(format!("bad bootstrap record from a peer: '{bad}'")),
                "{bad}"
            );
        }
    }

    #[test]
    fn single_tasks_and_allocations_are_fine() {
        assert_eq!(
            foreign_launcher_in(env(&[("OMPI_COMM_WORLD_SIZE", "1")])),
            None
        );
        assert_eq!(
            foreign_launcher_in(env(&[("SLURM_NTASKS", "8")])),
            None,
            "sbatch shell, not an srun step"
        );
        assert_eq!(foreign_launcher_in(env(&[])), None);
    }
}
