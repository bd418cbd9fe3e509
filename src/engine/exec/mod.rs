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

/// `COLLBENCH_MPI_IN_PLACE` (a test knob of `--engine mpi`): `stage` stages
/// every in-place operation through a copy instead of the library's
/// `MPI_IN_PLACE` (true); unset, empty or `auto` uses `MPI_IN_PLACE` where
/// the library is known (false). Any other value is refused: a typo that
/// tested nothing would read as a test that passed.
pub fn mpi_in_place_staged() -> Result<bool, String> {
    match std::env::var_os("COLLBENCH_MPI_IN_PLACE") {
        None => Ok(false),
        Some(v) => match v.to_str().map(str::trim) {
            Some("" | "auto") => Ok(false),
            Some("stage") => Ok(true),
            _ => Err(format!(
                "COLLBENCH_MPI_IN_PLACE={}: expected stage (in-place runs of --engine mpi copy instead of MPI_IN_PLACE) or auto",
                v.to_string_lossy()
            )),
        },
    }
}
