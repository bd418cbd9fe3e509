//! Result types: what a sweep produces and every output format renders.
//! The JSON form is the `collbench.results/1` contract of DESIGN.md.

use serde::{Deserialize, Serialize};

pub const RESULTS_SCHEMA: &str = "collbench.results/1";

/// The largest time (microseconds, about 11.6 days) or bandwidth (GB/s) a
/// results file or log may hold: past it a value is no measurement, and
/// tables and plots would print it hundreds of digits wide.
pub const MAX_MEASURE: f64 = 1e12;

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
    /// premulsum's scalar, as the type holds it (other operators: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar: Option<f64>,
    /// A group's row: its operations' collectives, in issue order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// An operation of a group: its place in the group (the group's row
    /// follows its operations').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_member: Option<usize>,
    /// How a v-collective divided its data (`--split`; others: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
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
    /// The rank that arrived last at a timed collective, by the most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival: Option<Arrival>,
    /// The cost model's (`--tuning`) prediction of this row's time, us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_us: Option<f64>,
    /// The algorithm the cost model picks at this row's size (the same on
    /// every row of the size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pick: Option<String>,
}

/// A rank that entered a collective after the others had.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub rank: usize,
    /// How long after the first rank it entered, in microseconds.
    pub late_us: f64,
}

/// The slowest rank of a row, as `-v` names it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowest {
    pub rank: usize,
    pub us: f64,
    /// `us` is how late the rank arrived (else its mean time: results
    /// written before arrivals were kept).
    pub late: bool,
}

impl Slowest {
    /// `rank R (arrived X us late)`, or `rank R (X us)` for older files.
    pub fn describe(&self, time: impl Fn(f64) -> String) -> String {
        if self.late {
            format!("rank {} (arrived {} us late)", self.rank, time(self.us))
        } else {
            format!("rank {} ({} us)", self.rank, time(self.us))
        }
    }
}

impl Row {
    pub fn is_bad(&self) -> bool {
        self.wrong > 0 || self.nan > 0
    }

    /// The rank that arrived last (by the most) at a timed collective; for
    /// results without arrivals, the rank with the largest mean time.
    pub fn slowest_rank(&self) -> Option<Slowest> {
        if let Some(a) = self.last_arrival {
            return Some(Slowest {
                rank: a.rank,
                us: a.late_us,
                late: true,
            });
        }
        self.per_rank_us
            .iter()
            .copied()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(rank, us)| Slowest {
                rank,
                us,
                late: false,
            })
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
    /// Timed operations per case (nccl-tests' iters times its agg iters).
    #[serde(default)]
    pub iters: usize,
    #[serde(default)]
    pub warmup: usize,
    /// Operations per timed iteration (nccl-tests' `-m`; 1 when not given):
    /// `iters` over it is nccl-tests' `-n`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub agg_iters: usize,
    /// The timed loop ran as a CUDA graph (nccl-tests' `-G`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub graph: bool,
    /// The CUDA engine's protocol as `--protocol` fixed it (`simple`, `ll`,
    /// `ll128`); absent where the engine picked per size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Channels (blocks per rank) as `--channels` fixed them; absent where
    /// the engine picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub timing: String,
    /// The process id of rank 0's process (nccl-tests' `Pid`).
    #[serde(default)]
    pub pid: u32,
    /// The `# Avg bus bandwidth` an nccl-tests log printed for this run, as
    /// printed (its rows keep two decimals of busbw, too few to recompute it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_avg_busbw: Option<String>,
    /// Run as an nccl-tests binary (`all_reduce_perf`): nccl-tests' header
    /// line for the flags given, printed as is in its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_tests_header: Option<String>,
    /// The sizes the sweep asked for, smallest first (rows hold each
    /// collective's rounded size): nccl-tests' `minBytes`, `maxBytes`, `step`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<u64>,
    /// Read from an nccl-tests log: its `#  Rank ...` device lines as
    /// printed, shown again as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nccl_tests_devices: Vec<String>,
    /// Read from an nccl-tests log in the wider layout of newer nccl-tests
    /// (2.17: `#wrong` six wide, times with two decimals below 10000 us):
    /// its text is printed in that layout again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nccl_tests_wide: bool,
    /// `NCCL_TESTS_MIN_BW` of such a run: its text's average bus bandwidth
    /// says OK or FAILED against 0.9 of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_tests_min_bw: Option<f64>,
    /// The GPUs used, as CUDA names them (rank r runs on `gpus[r % len]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Gpu>,
    /// Where ranks are processes (mpirun, srun, `--procs`): each rank's
    /// process and host, by rank (nccl-tests' device lines show them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<Process>,
    /// Anything the run wants a reader to know (engine choice, caps);
    /// written even when empty, as every documented key.
    #[serde(default)]
    pub notes: Vec<String>,
    /// What ran `--engine nccl`: NCCL's version and library, or the stand-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    /// Read from an nccl-tests log whose footer said `# Out of bounds
    /// values : N FAILED`: N. Its rows need not say which values (older
    /// nccl-tests print an error's size, not a count): the run fails as
    /// its log says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_out_of_bounds: Option<u64>,
    /// Read from an nccl-tests log whose `# Avg bus bandwidth` line judged
    /// the average against NCCL_TESTS_MIN_BW: whether it said OK. A run
    /// whose average FAILED fails as its log says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_avg_ok: Option<bool>,
    /// Set only when the run did not finish: why, and how many rows it
    /// did not make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// Why a run stopped before its last row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// SIGINT, SIGTERM or SIGHUP (or a sweep's stdout closed).
    Signal,
    /// A hang or timeout was detected.
    Hang,
    /// Read from a JSONL that has no end line: the sweep was killed (or
    /// is still running); never written by a sweep.
    Unfinished,
    /// Read from an nccl-tests log whose run ends before its footer (`#
    /// Out of bounds values`, `# Avg bus bandwidth`): the test failed or
    /// the log was cut; never written by a sweep.
    Truncated,
    /// The run failed after it started (a runtime error, an output that
    /// could not be written; exit 2): its rows are the ones made before.
    Error,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::Hang => "hang",
            StopReason::Unfinished => "unfinished",
            StopReason::Truncated => "truncated",
            StopReason::Error => "error",
        }
    }
}

/// `meta.partial`: a run that did not finish.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    pub reason: StopReason,
    /// Rows the sweep would have made (cases x placements) that it did not.
    pub missing_rows: usize,
    /// The case the sweep was in when it stopped, before any row of it
    /// (its row as the case began, unmeasured): its text had printed that
    /// case's section, so a re-rendering prints it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_case: Option<Box<Row>>,
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.reason == StopReason::Unfinished {
            return write!(
                f,
                "run unfinished: its JSONL has no end line (the sweep was killed, or is still running)"
            );
        }
        if self.reason == StopReason::Truncated {
            return write!(
                f,
                "run unfinished: the log ends before the run's footer (the test failed, or the log was cut)"
            );
        }
        if self.reason == StopReason::Error {
            return write!(
                f,
                "run failed: an error stopped it, {} row(s) missing",
                self.missing_rows
            );
        }
        write!(
            f,
            "run interrupted: {}, {} row(s) missing",
            self.reason.name(),
            self.missing_rows
        )
    }
}

/// A rank's process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub host: String,
}

/// One GPU of a run, as nccl-tests' device lines show it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// The name CUDA reports (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// PCI domain:bus:device (`0000:1b:00`).
    pub bus_id: String,
}

/// A whole results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: String,
    pub meta: Meta,
    pub rows: Vec<Row>,
    /// The per-link matrix and its verdict, when links were measured
    /// (`collbench links`; absent in files written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<crate::report::links::LinkReport>,
    /// `collbench links`: the collectives run beside the rounds, each
    /// one's links judged alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub case_links: Vec<crate::report::links::CaseLinks>,
}

impl Results {
    pub fn new(meta: Meta, rows: Vec<Row>) -> Results {
        Results {
            schema: RESULTS_SCHEMA.to_string(),
            meta,
            rows,
            links: None,
            case_links: Vec::new(),
        }
    }

    /// Why an nccl-tests log's run failed by its own footer (`# Out of
    /// bounds values : N FAILED`, `# Avg bus bandwidth : X FAILED`),
    /// whatever its rows say.
    pub fn log_failed(&self) -> Option<String> {
        let oob = self
            .meta
            .log_out_of_bounds
            .map(|n| format!("its nccl-tests footer says {n} value(s) out of bounds: FAILED"));
        oob.or_else(|| {
            (self.meta.log_avg_ok == Some(false)).then(|| {
                format!(
                    "its nccl-tests footer says the average bus bandwidth {} is below 0.9 x NCCL_TESTS_MIN_BW: FAILED",
                    self.meta.log_avg_busbw.as_deref().unwrap_or("?")
                )
            })
        })
    }
}
