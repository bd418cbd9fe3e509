//! The one shape every supported dump format is read into: per rank, its
//! process groups and its records (one per operation the flight recorder
//! kept). Diagnosis only ever sees this model.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::recorder::model::{ChannelProgress, State, Wait};

/// The most ranks a dump may name: a world or group larger than this (or a
/// rank beyond it) makes the dump invalid rather than the analysis huge.
pub const MAX_RANKS: usize = 1 << 22;

/// Which kind of file a dump was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// collbench's own `collbench.fr/1` JSON.
    Collbench,
    /// PyTorch's flight recorder, JSON form (`_dump_fr_trace_json`).
    PytorchJson,
    /// PyTorch's flight recorder, pickle form (`_dump_fr_trace`).
    PytorchPickle,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Collbench => "collbench",
            Format::PytorchJson => "pytorch-json",
            Format::PytorchPickle => "pytorch-pickle",
        }
    }
}

/// A rank's newest sequence numbers in one group (see [`RankDump::status`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupSeqs {
    /// 0: none entered.
    pub entered: u64,
    pub started: Option<u64>,
    pub completed: Option<u64>,
}

/// Sequence numbers past this are no real run's (2^53: a collective a
/// nanosecond would take 104 days to reach it): a status claiming one is
/// left out.
pub const MAX_SEQ: u64 = 1 << 53;

impl GroupSeqs {
    /// Whether a run could have made it: seqs in range, and no more
    /// started or completed than entered.
    pub fn plausible(&self) -> bool {
        self.entered <= MAX_SEQ
            && self.started.is_none_or(|s| s <= self.entered)
            && self.completed.is_none_or(|c| c <= self.entered)
    }
}

/// One rank's dump, normalised.
#[derive(Clone, Debug, PartialEq)]
pub struct RankDump {
    pub path: PathBuf,
    pub format: Format,
    pub rank: usize,
    /// Size of the world, where the dump says it.
    pub world_size: Option<usize>,
    /// Process groups this dump knows the members of: name -> global ranks.
    pub groups: BTreeMap<String, Vec<usize>>,
    /// Oldest first.
    pub records: Vec<Record>,
    /// True when the ring buffer may have dropped older records.
    pub wrapped: bool,
    /// Each group's newest sequence numbers, where the dump keeps them
    /// apart from its ring (collbench's `status`, PyTorch's `pg_status`):
    /// what is known of a group whose records the ring dropped.
    pub status: BTreeMap<String, GroupSeqs>,
    /// Why the dump was written (collbench: `timeout`, `signal`, `request`,
    /// `exit`, `peer-lost`).
    pub reason: Option<String>,
    /// Group descriptions where the dump gives them (PyTorch's `pg_desc`,
    /// e.g. `default_pg`, `sub_b`): name -> description.
    pub group_descs: BTreeMap<String, String>,
    /// Which run wrote it, as far as the dump says.
    pub origin: Origin,
}

impl RankDump {
    /// Every name the file gave, with its hidden characters escaped
    /// ([`crate::units::shown`]): a group or collective named with an
    /// escape sequence or a newline must neither drive the terminal nor
    /// forge a line of the diagnosis.
    pub fn escape_text(&mut self) {
        use crate::units::show_field as esc;
        let rename = |m: &mut BTreeMap<String, Vec<usize>>| {
            *m = std::mem::take(m)
                .into_iter()
                .map(|(mut k, v)| {
                    esc(&mut k);
                    (k, v)
                })
                .collect();
        };
        rename(&mut self.groups);
        self.status = std::mem::take(&mut self.status)
            .into_iter()
            .map(|(mut k, v)| {
                esc(&mut k);
                (k, v)
            })
            .collect();
        self.group_descs = std::mem::take(&mut self.group_descs)
            .into_iter()
            .map(|(mut k, mut v)| {
                esc(&mut k);
                esc(&mut v);
                (k, v)
            })
            .collect();
        for r in &mut self.records {
            esc(&mut r.pg);
            esc(&mut r.op);
            esc(&mut r.algo);
            r.input_dtypes.iter_mut().for_each(esc);
            r.output_dtypes.iter_mut().for_each(esc);
            for c in &mut r.channels {
                if let Some(w) = &mut c.waiting_on {
                    esc(&mut w.what);
                }
            }
        }
        if let Some(reason) = &mut self.reason {
            esc(reason);
        }
        let o = &mut self.origin;
        for f in [&mut o.run_id, &mut o.host, &mut o.command]
            .into_iter()
            .flatten()
        {
            esc(f);
        }
        if let Some(l) = &mut o.lost {
            esc(&mut l.how);
        }
    }
}

/// What a dump says about the run that wrote it (collbench dumps; PyTorch's
/// say none of it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// The run's id (`run_id`), where the dump has one.
    pub run_id: Option<String>,
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub command: Option<String>,
    /// When the dump was taken (wall clock, Unix epoch ns), where known.
    pub dumped_at_ns: Option<u64>,
    /// The rank whose process died, where that stopped the run and the
    /// launcher said so (collbench's `lost`).
    pub lost: Option<crate::recorder::model::PeerLost>,
}

/// One operation on one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Process group name.
    pub pg: String,
    /// The group's collective sequence number (PyTorch `collective_seq_id`).
    pub seq: u64,
    /// Point-to-point sequence number; `Some` marks a point-to-point operation,
    /// which is not matched by `seq` across ranks.
    pub p2p_seq: Option<u64>,
    /// Operation name without backend prefix (`all_reduce`, `all-gather`).
    pub op: String,
    /// Root of a rooted collective, where known.
    pub root: Option<i64>,
    /// Algorithm (collbench), empty where unknown.
    pub algo: String,
    pub input_sizes: Vec<Vec<i64>>,
    pub output_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_dtypes: Vec<String>,
    pub state: State,
    /// When the rank called it (PyTorch `time_created_ns`), Unix epoch ns.
    pub t_scheduled_ns: Option<u64>,
    pub t_started_ns: Option<u64>,
    pub t_completed_ns: Option<u64>,
    /// Per-channel progress (collbench).
    pub channels: Vec<ChannelProgress>,
}

impl Record {
    /// A record with only the identifying fields set.
    pub fn new(pg: &str, seq: u64, op: &str, state: State) -> Self {
        Record {
            pg: pg.to_owned(),
            seq,
            p2p_seq: None,
            op: op.to_owned(),
            root: None,
            algo: String::new(),
            input_sizes: Vec::new(),
            output_sizes: Vec::new(),
            input_dtypes: Vec::new(),
            output_dtypes: Vec::new(),
            state,
            t_scheduled_ns: None,
            t_started_ns: None,
            t_completed_ns: None,
            channels: Vec::new(),
        }
    }

    pub fn is_p2p(&self) -> bool {
        self.p2p_seq.is_some()
    }

    /// What every rank must agree on to run this collective together: the
    /// operation, its root and its algorithm where those are known.
    pub fn signature(&self) -> String {
        let mut sig = self.op.clone();
        if let Some(root) = self.root {
            sig.push_str(&format!(" root={root}"));
        }
        if !self.algo.is_empty() {
            sig.push_str(&format!(" algo={}", self.algo));
        }
        sig
    }

    /// Channels blocked on a peer when the dump was taken.
    pub fn waits(&self) -> impl Iterator<Item = (&ChannelProgress, &Wait)> {
        self.channels
            .iter()
            .filter_map(|c| c.waiting_on.as_ref().map(|w| (c, w)))
    }

    /// Steps done over all channels: how far the rank got in this operation.
    pub fn progress(&self) -> i64 {
        self.channels.iter().fold(0i64, |sum, c| {
            sum.saturating_add(c.last_step_done.saturating_add(1))
        })
    }
}

/// `scheduled`, `started`, `completed`.
pub fn state_name(state: State) -> &'static str {
    match state {
        State::Scheduled => "scheduled",
        State::Started => "started",
        State::Completed => "completed",
    }
}
