//! Moving bytes between peers. `inproc`: ranks that are threads of one
//! process share FIFOs of a few slots with head/tail flags.

pub mod inproc;
pub mod node;
#[cfg(feature = "mpi")]
pub mod relay;
pub mod shm;
