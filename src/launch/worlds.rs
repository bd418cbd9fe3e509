//! The worlds a sweep runs in: the host's (barrier, abort flag, host ranks,
//! links between them) and, on the CUDA executor, the GPUs' with their
//! connections. Thread ranks share this process; MPI ranks reach each
//! other through shared memory (or the relay) set up over MPI.

use super::{MpiError, Peers};
use crate::engine::exec::cuda::launch::{Across, CudaOptions, CudaWorld, Kind};
use crate::engine::exec::{ExecError, HostOptions, HostWorld};
use crate::engine::transport::node::Shape;
use std::sync::Arc;

/// What the worlds are made for.
#[derive(Clone, Debug)]
pub struct WorldSpec {
    pub ranks: usize,
    pub host: HostOptions,
    /// Channels per rank (0: the executor's choice; the host's links are
    /// then sized for one).
    pub channels: usize,
    /// The most ways of running one group holds (1 without groups): each
    /// takes connections of its own (`engine::algo::group`).
    pub ways: usize,
    /// Bytes of each rank's three buffers, the largest any case needs.
    pub bufs: [usize; 3],
    /// The CUDA executor's device and options (None: the host engine).
    pub gpu: Option<(Kind, CudaOptions)>,
    /// Whether NCCL runs beside the builtin engine (`--engine nccl`).
    pub nccl: bool,
    /// `--gpu-map`: each node rank's GPU, when ranks are processes.
    pub gpu_map: Option<Vec<usize>>,
    /// `--allow-shared-gpu`: processes may share a GPU.
    pub allow_shared_gpu: bool,
}

/// The worlds of one sweep.
pub struct Worlds {
    pub host: Arc<HostWorld>,
    pub gpu: Option<Arc<CudaWorld>>,
}

/// Why the worlds could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Mpi(#[from] MpiError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Makes the worlds of `spec`: this process's thread ranks, or with `mpi`
/// this process's one rank of the MPI world.
pub fn open_worlds(spec: &WorldSpec, mpi: Option<&Peers>) -> Result<Worlds, LaunchError> {
    let host = match mpi {
        None => HostWorld::new(spec.ranks, spec.host.clone()),
        Some(m) => {
            let shape = Shape {
                nranks: spec.ranks,
                chans: crate::engine::algo::group::tags_per_way(spec.channels) as usize
                    * spec.ways.max(1),
                slots: spec.host.slots,
                slot_bytes: spec.host.slot_bytes,
                bufs: spec.bufs,
            };
            let links = m.node_links(shape)?;
            tracing::info!(
                ranks = spec.ranks,
                rank = m.rank(),
                "MPI world: node links ready"
            );
            HostWorld::with_links(spec.ranks, spec.host.clone(), Box::new(links))
        }
    };
    let gpu = match &spec.gpu {
        None => None,
        Some((kind, opts)) => {
            let across = match mpi {
                None => None,
                Some(m) => Some(Across {
                    procs: m.peers()?,
                    gpu_map: spec.gpu_map.clone(),
                    allow_shared: spec.allow_shared_gpu,
                }),
            };
            let w = CudaWorld::open(
                *kind,
                Arc::clone(&host),
                *opts,
                spec.bufs,
                spec.nccl,
                across,
            )?;
            let names: Vec<String> = w
                .devices()
                .iter()
                .map(|d| format!("{} ({})", d.name, d.arch))
                .collect();
            tracing::info!(devices = ?names, "CUDA executor");
            Some(w)
        }
    };
    Ok(Worlds { host, gpu })
}
