//! Flight recorder: per-rank records of every operation, dumps.

pub mod model;
