//! The engine: algorithms as step programs (`algo`), the executors that run
//! them (`exec`), the connections they move bytes over (`transport`), element
//! arithmetic (`elem`), and how executors report progress (`observe`).

pub mod algo;
pub mod cpus;
pub mod elem;
pub mod exec;
pub mod observe;
pub mod probe;
pub mod split;
pub mod transport;
pub mod types;

pub use types::{Algo, Collective, Counts, Dtype, Engine, Placement, ReduceOp};
