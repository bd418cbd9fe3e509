//! Running programs behind one seam ([`RankRunner`]): `host` on CPU
//! threads; `cuda` in kernels compiled by NVRTC, on a GPU or the emulated
//! device; `mpi_coll` for MPI's own collectives.

pub mod cuda;
pub mod host;
pub use crate::engine::transport::mem;
#[cfg(feature = "mpi")]
pub mod mpi_coll;
pub mod runner;
pub mod world;

pub use host::{Compiled, ExecError, HostOptions, HostWorld, InProcess, Links, RankExec};
pub use mem::HostBuf;
pub use runner::{At, Data, DeviceData, HostRank, OpDesc, RankRunner};

/// Rank `r`'s executor: the CUDA world's when there is one, else the host's.
pub fn rank_runner(
    world: &std::sync::Arc<HostWorld>,
    gpu: Option<&std::sync::Arc<cuda::launch::CudaWorld>>,
    r: usize,
    observer: std::sync::Arc<dyn crate::engine::observe::Observer>,
    bytes: [usize; 3],
) -> Result<Box<dyn RankRunner>, ExecError> {
    Ok(match gpu {
        Some(g) => Box::new(g.rank(r, observer, bytes)?),
        None => {
            let exec = RankExec::new(std::sync::Arc::clone(world), r, observer);
            Box::new(HostRank::new(exec, std::sync::Arc::clone(world), bytes)?)
        }
    })
}
