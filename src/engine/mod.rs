//! The engine: algorithms as step programs, and the executors that run them.

pub mod elem;
pub mod types;

pub use types::{Algo, Collective, Counts, Dtype, Placement, ReduceOp};
