//! Moving bytes between peers: the link interface every executor's host
//! side uses (`links`), and its transports. `inproc`: ranks that are threads
//! of one process share FIFOs of a few slots with head/tail flags; `node`:
//! processes of a host share memory segments; `relay`: other hosts through
//! MPI. `mem`: the host buffers peers may read.

pub mod inproc;
pub mod links;
pub mod mem;
pub mod node;
#[cfg(feature = "mpi")]
pub mod relay;
pub mod shm;
