//! collbench: benchmark and diagnose collective communication.

pub mod analyze;
pub mod check;
pub mod engine;
pub mod recorder;
pub mod report;
