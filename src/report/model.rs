//! Result types: what a sweep produces and every output format renders.
//! The JSON form is the `collbench.results/1` contract of DESIGN.md.

use serde::{Deserialize, Serialize};

pub const RESULTS_SCHEMA: &str = "collbench.results/1";

/// Distribution of per-iteration times (max over ranks of each iteration).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub p50_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Iterations whose time is an outlier by the modified z-score on the
    /// median absolute deviation (|M| > 3.5; 0 in files written before it).
    #[serde(default)]
    pub outliers: u64,
}

/// One measured case: a collective at one size, dtype, op, root, algorithm,
/// engine and placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub collective: String,
    pub engine: String,
    pub algo: String,
    pub dtype: String,
    pub op: String,
    /// The root rank, or -1 where the collective has none.
    pub root: i64,
    pub bytes: u64,
    pub count: u64,
    /// `out` or `in`.
    pub placement: String,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Elements that differed from the expected value (-1: not checked).
    pub wrong: i64,
    /// NaN or Inf elements found in the outputs (-1: not checked).
    pub nan: i64,
    pub stats: Stats,
    /// Mean time per iteration on each rank, rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_rank_us: Vec<f64>,
    /// The first wrong element, described (rank, index, expected, got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl Row {
    pub fn is_bad(&self) -> bool {
        self.wrong > 0 || self.nan > 0
    }

    /// The rank with the largest mean time, if per-rank times were kept.
    pub fn slowest_rank(&self) -> Option<(usize, f64)> {
        self.per_rank_us
            .iter()
            .copied()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// Where and how a sweep ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub version: String,
    pub command: String,
    pub host: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub world_size: usize,
    /// `host`, `cuda` or `cuda-emu`.
    pub device: String,
    /// One line per device used (CPU model for the host engine).
    pub devices: Vec<String>,
    #[serde(default)]
    pub iters: usize,
    #[serde(default)]
    pub warmup: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub timing: String,
    /// The process id of rank 0's process (nccl-tests' `Pid`).
    #[serde(default)]
    pub pid: u32,
    /// Anything the run wants a reader to know (engine choice, caps);
    /// written even when empty, as every documented key.
    #[serde(default)]
    pub notes: Vec<String>,
    /// What ran `--engine nccl`: NCCL's version and library, or the stand-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    /// Set only when the run did not finish: why, and how many rows it
    /// did not make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
}

/// Why a run stopped before its last row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// SIGINT or SIGTERM.
    Signal,
    /// A hang or timeout was detected.
    Hang,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::Hang => "hang",
        }
    }
}

/// `meta.partial`: a run that did not finish.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    pub reason: StopReason,
    /// Rows the sweep would have made (cases x placements) that it did not.
    pub missing_rows: usize,
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run interrupted: {}, {} row(s) missing",
            self.reason.name(),
            self.missing_rows
        )
    }
}

/// A whole results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: String,
    pub meta: Meta,
    pub rows: Vec<Row>,
}

impl Results {
    pub fn new(meta: Meta, rows: Vec<Row>) -> Results {
        Results {
            schema: RESULTS_SCHEMA.to_string(),
            meta,
            rows,
        }
    }
}
