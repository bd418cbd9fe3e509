//! The flight-recorder dump format, schema `collbench.fr/1`: one JSON file
//! per rank, self-describing, written atomically. `analyze` reads it back.

use serde::{Deserialize, Serialize};

pub const DUMP_SCHEMA: &str = "collbench.fr/1";

/// Where an operation is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Scheduled,
    Started,
    Completed,
}

/// Why the operation ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IterKind {
    Bootstrap,
    Barrier,
    Warmup,
    Timed,
    Check,
}

/// What a channel of an operation was blocked on when the dump was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// The peer rank.
    pub peer: i64,
    /// `recv` (waiting for the peer's data) or `send` (waiting for a free slot).
    pub what: String,
}

/// Progress of one channel of one operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelProgress {
    pub channel: u32,
    pub steps_total: u64,
    /// Index of the last step completed, -1 before the first.
    pub last_step_done: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<Wait>,
}

/// One operation on one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Process group (communicator) name; collbench's world is "0".
    pub pg: String,
    /// Per-group collective sequence number, from 1.
    pub seq: u64,
    pub collective: String,
    #[serde(default)]
    pub algo: String,
    #[serde(default)]
    pub dtype: String,
    #[serde(default)]
    pub count: u64,
    #[serde(default)]
    pub bytes: u64,
    /// Root rank of rooted collectives, peer of point-to-point ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<i64>,
    pub state: State,
    pub iteration: IterKind,
    /// Wall-clock (Unix epoch) nanoseconds.
    pub t_scheduled_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_started_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_completed_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<ChannelProgress>,
}

/// A process group's membership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub ranks: Vec<usize>,
}

/// How far a rank got in a process group: the newest sequence number it
/// entered, started and completed (0: none). Kept apart from the ring, so
/// it survives the ring dropping the group's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub group: String,
    pub entered: u64,
    pub started: u64,
    pub completed: u64,
}

/// Clocks at dump time, for aligning hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// Wall clock, Unix epoch nanoseconds.
    pub wall_ns: u64,
    /// Monotonic clock nanoseconds (CLOCK_MONOTONIC) at the same instant.
    pub mono_ns: u64,
}

/// A rank of the run whose process died (killed by a signal, or an exit
/// collbench never makes), as the launcher saw it: the ranks that wait on
/// it stop at once, rather than at their timeout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLost {
    pub rank: usize,
    /// How it ended, in words: `killed by signal 9 (SIGKILL)`.
    pub how: String,
}

/// One rank's dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dump {
    pub schema: String,
    /// The run's id, shared by every dump of the run (absent in dumps
    /// written before run ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub host: String,
    pub pid: u32,
    pub rank: usize,
    pub world_size: usize,
    pub device: String,
    pub command: String,
    pub version: String,
    /// Why the dump was written: `timeout`, `signal`, `request`, `exit`,
    /// `peer-lost` (another rank's process died: `lost` says which).
    pub reason: String,
    /// The rank whose process died, where that stopped the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<PeerLost>,
    pub clocks: Clocks,
    /// Capacity of the ring buffer; `entries` holds at most this many, oldest first.
    pub capacity: usize,
    pub groups: Vec<Group>,
    /// Each group's progress (absent in dumps written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<GroupStatus>,
    pub entries: Vec<Entry>,
}
