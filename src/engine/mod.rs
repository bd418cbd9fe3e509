//! The engine: algorithms as step programs, and the executors that run them.

pub mod types;

pub use types::{Algo, Collective, Counts, Dtype, Placement, ReduceOp};
pub mod algo;
pub mod elem;
pub mod exec;
pub mod observe;
pub mod probe;
pub mod transport;
