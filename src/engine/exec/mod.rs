//! Running programs: `host` on CPU threads.

pub mod host;
pub mod mem;

pub use host::{Compiled, ExecError, HostOptions, HostWorld, InProcess, Links, RankExec};
pub use mem::HostBuf;
