//! Running programs: `host` on CPU threads; `cuda` (kernels compiled by
//! NVRTC, so far).

pub mod cuda;
pub mod host;
pub mod mem;
#[cfg(feature = "mpi")]
pub mod mpi_coll;
pub mod runner;
pub mod world;

pub use host::{Compiled, ExecError, HostOptions, HostWorld, InProcess, Links, RankExec};
pub use mem::HostBuf;
pub use runner::{At, Data, DeviceData, HostRank, OpDesc, RankRunner};
