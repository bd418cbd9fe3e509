//! The diagnosis: the `collbench.diagnosis/1` JSON contract of DESIGN.md,
//! plus per-rank summaries and the files that could not be used.

use serde::{Deserialize, Serialize};

use super::load::Unreadable;
use super::model::{Format, State};

pub const DIAGNOSIS_SCHEMA: &str = "collbench.diagnosis/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Healthy,
    Problem,
}

/// What a finding says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Some ranks entered a collective and wait in it; others never entered it.
    NotJoined,
    /// A rank of the world has no readable dump.
    MissingDump,
    /// Ranks ran different operations (or roots, algorithms) at the same seq.
    OpMismatch,
    /// Ranks ran the same seq with different sizes.
    SizeMismatch,
    /// Ranks ran the same seq with different data types.
    DtypeMismatch,
    /// Every rank entered a collective; some never completed it.
    Stuck,
    /// A rank entered a collective far later than its peers.
    Late,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::NotJoined => "not-joined",
            FindingKind::MissingDump => "missing-dump",
            FindingKind::OpMismatch => "op-mismatch",
            FindingKind::SizeMismatch => "size-mismatch",
            FindingKind::DtypeMismatch => "dtype-mismatch",
            FindingKind::Stuck => "stuck",
            FindingKind::Late => "late",
        }
    }
}

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The process group, where the finding is about one: its name as dumped
    /// (`"0"`, `"2"`).
    pub pg: Option<String>,
    /// The group's description where the dumps give one (`default_pg`, `sub_b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg_desc: Option<String>,
    /// The group's collective sequence number, where the finding is about one.
    pub seq: Option<u64>,
    /// The ranks this finding blames (may be empty when the dumps cannot tell).
    pub ranks: Vec<usize>,
    /// What was seen, in words.
    pub detail: String,
    /// The run it is about, when the dumps hold several ([`RunDiagnosis::label`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub schema: String,
    pub verdict: Verdict,
    /// When the dumps hold several runs: the run the top level describes
    /// (its ranks, world and culprits), the first with a problem, else the
    /// first ([`RunDiagnosis::label`]). Absent for one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub ranks_found: Vec<usize>,
    pub ranks_missing: Vec<usize>,
    /// The ranks the root cause (the first finding) blames.
    pub culprits: Vec<usize>,
    /// Most likely root cause first.
    pub findings: Vec<Finding>,
    /// The union of the members the dumps name (every rank up to the highest).
    pub world_size: Option<usize>,
    pub per_rank: Vec<RankSummary>,
    /// Files that could not be read, and why.
    pub unreadable: Vec<Unreadable>,
    /// Readable files left out (another dump of the same rank came first).
    #[serde(default)]
    pub ignored: Vec<Unreadable>,
    /// What the verdict took into account that is worth saying (dumps taken
    /// while the run was moving).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// One entry per run when the dumps come from more than one run (absent
    /// otherwise); each run is diagnosed on its own, and the top-level
    /// verdict is a problem when any run's is (see `run`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunDiagnosis>,
}

/// One run's diagnosis, when the dumps hold several runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunDiagnosis {
    /// How the text and the findings' `run` name it: its id, else its kind,
    /// process and command.
    pub label: String,
    /// `collbench` or `pytorch`.
    pub kind: String,
    pub run_id: Option<String>,
    /// The process, when all its dumps come from one.
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub world_size: Option<usize>,
    pub command: Option<String>,
    pub verdict: Verdict,
    pub culprits: Vec<usize>,
    pub findings: Vec<Finding>,
    pub ranks_found: Vec<usize>,
    pub ranks_missing: Vec<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Diagnosis {
    /// The exit code `collbench analyze` uses: 0 healthy, 1 problem.
    /// (Nothing readable at all is an [`super::AnalyzeError`], exit code 2.)
    pub fn exit_code(&self) -> i32 {
        match self.verdict {
            Verdict::Healthy => 0,
            Verdict::Problem => 1,
        }
    }

    /// The root cause, if any.
    pub fn root_cause(&self) -> Option<&Finding> {
        self.findings.first()
    }
}

/// Where one rank stood when it was dumped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: usize,
    /// The run it belongs to, when the dumps hold several ([`RunDiagnosis::label`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub path: String,
    pub format: Format,
    pub groups: Vec<GroupProgress>,
    /// Channels blocked on a peer, in operations not completed.
    pub waits: Vec<Waiting>,
}

/// One rank's progress in one process group (collectives only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupProgress {
    pub pg: String,
    pub last_entered: Option<u64>,
    pub last_started: Option<u64>,
    pub last_completed: Option<u64>,
    /// Operation and state of the last entered collective.
    pub op: Option<String>,
    pub state: Option<State>,
}

/// A channel of an operation blocked on a peer (collbench dumps).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    pub pg: String,
    pub seq: u64,
    pub op: String,
    pub channel: u32,
    /// The step it is blocked in (0-based): one past the last step done.
    pub step: i64,
    pub steps_total: u64,
    pub peer: i64,
    /// `recv` or `send`.
    pub what: String,
}
