//! `--procs N`: a launcher of our own for one node. The process the user
//! started (the parent) starts N copies of itself, one rank each, and
//! serves as their hub over a Unix socket: all-gathers (and barriers, which
//! are empty all-gathers) and tagged point-to-point messages, the few
//! things the ranks need from a launcher to bootstrap; after that the ranks
//! talk through the node's shared memory (the host engine's segments, the
//! CUDA executor's IPC memory) exactly as under MPI. The parent passes
//! stop signals on and exits with the ranks' worst exit code.
//!
//! A rank that dies is noticed by the hub (its socket closes): every
//! all-gather it never joined then fails at once on the other ranks, rather
//! than at their timeout. A rank killed by a signal (or ending with an exit
//! code collbench never uses) is reported by the parent, which tells the
//! other ranks: those waiting on it inside a collective stop at once with
//! their dumps, which name the rank that died and how.

use super::MpiError;
use crate::engine::transport::node::{BarrierError, ProcessPeers, Relay};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The variable that makes a process a rank: "RANK SIZE SOCKET".
pub const ENV: &str = "COLLBENCH_PROCS";

/// The longest a record or message may be.
const MAX_FRAME: usize = 256 << 20;

/// The most rank processes a launch makes (as `--procs` allows).
const MAX_PROCS: usize = 64;

/// How long the ranks may take to start and connect.
const CONNECT: Duration = Duration::from_secs(60);

/// How long an all-gather without a timeout of its own waits.
const GATHER_WAIT: Duration = Duration::from_secs(600);

/// The variable that gives a rank the launch's table of errors said (see
/// [`say_once`]): the number of the memory file the parent made, which
/// the ranks inherit open. Nothing of it is on disk, and it goes with the
/// last of the launch's processes, however they end.
const SAID_ENV: &str = "COLLBENCH_PROCS_SAID";

/// The memory file's name (as /proc shows its descriptors).
const SAID_NAME: &str = "collbench-said";

/// Slots of the table, each the hash of an error line said (0: free).
const SAID_SLOTS: usize = 512;

mod parent;
mod rank;
#[cfg(test)]
mod tests;
mod wire;
pub use parent::{launch, Hooks};
pub use rank::{init, rank_here, say_once, LostProbe, Procs};
use wire::*;
