//! collbench: benchmark and diagnose collective communication.

pub mod analyze;
pub mod check;
pub mod cli;
pub mod engine;
pub mod harness;
pub mod launch;
pub mod recorder;
pub mod report;
pub mod run;
pub mod units;
