//! Command-line arguments (clap lives here and nowhere else), with
//! nccl-tests' short flags as aliases. `plan` turns them into a validated
//! [`crate::harness::Plan`].

pub mod plan;
pub mod results;

pub use results::{CompareArgs, QualifyArgs, ReportArgs};

use crate::engine::exec::cuda::Arch;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "collbench",
    version,
    about = "Benchmark and diagnose collective communication",
    long_about = "Benchmark and diagnose collective communication: sweeps of every collective over \
collbench's own ring/tree engine, bit-exact checks, and hang diagnosis from flight-recorder dumps.\n\n\
Exit codes: 0 all good; 1 a check failed (wrong values, NaN/Inf) or a problem was diagnosed; \
2 usage or runtime error; 3 a hang or timeout was detected."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sweep all-reduce.
    #[command(name = "all-reduce", visible_alias = "allreduce", alias = "all_reduce")]
    AllReduce(RunArgs),
    /// Sweep all-gather.
    #[command(name = "all-gather", visible_alias = "allgather", alias = "all_gather")]
    AllGather(RunArgs),
    /// Sweep reduce-scatter.
    #[command(
        name = "reduce-scatter",
        visible_alias = "reducescatter",
        alias = "reduce_scatter"
    )]
    ReduceScatter(RunArgs),
    /// Sweep broadcast.
    Broadcast(RunArgs),
    /// Sweep reduce.
    Reduce(RunArgs),
    /// Sweep all-to-all.
    #[command(name = "all-to-all", visible_alias = "alltoall", alias = "all_to_all")]
    AllToAll(RunArgs),
    /// Sweep gather.
    Gather(RunArgs),
    /// Sweep scatter.
    Scatter(RunArgs),
    /// Sweep send-recv (rank r sends to r+1, receives from r-1).
    #[command(name = "send-recv", visible_alias = "sendrecv", alias = "send_recv")]
    SendRecv(RunArgs),
    /// Sweep every collective.
    All(RunArgs),
    /// Diagnose a hang from flight-recorder dumps (collbench's, or PyTorch's pickle/JSON).
    Analyze(AnalyzeArgs),
    /// What this build has and what this machine has.
    Info(InfoArgs),
    /// Re-render saved results (table, nccl-tests text, Markdown, CSV, plots); several overlay.
    Report(ReportArgs),
    /// Compare a candidate's results with a baseline's; exit 1 on a regression.
    Compare(CompareArgs),
    /// Run the checks of a spec against thresholds; JUnit XML for CI.
    Qualify(QualifyArgs),
}

#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// Dump files, or folders of them (one per rank).
    #[arg(required = true, value_name = "DIR|FILE")]
    pub paths: Vec<PathBuf>,
    /// Print the diagnosis as JSON (schema collbench.diagnosis/1).
    #[arg(long)]
    pub json: bool,
}

/// Options of a sweep. Sizes: `--sizes MIN:MAX[:xF|:+STEP]` (B, K/KiB, M/MiB,
/// G/GiB are powers of 1024; KB/MB/GB powers of 1000).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Sizes to sweep: MIN:MAX[:xF|:+STEP], e.g. 8B:64M, 1K:1G:x4, 1M:8M:+1M.
    #[arg(long, value_name = "MIN:MAX[:xF|:+STEP]")]
    pub sizes: Option<String>,
    /// Smallest size (nccl-tests -b).
    #[arg(
        short = 'b',
        long = "minbytes",
        value_name = "SIZE",
        conflicts_with = "sizes"
    )]
    pub minbytes: Option<String>,
    /// Largest size (nccl-tests -e).
    #[arg(
        short = 'e',
        long = "maxbytes",
        value_name = "SIZE",
        conflicts_with = "sizes"
    )]
    pub maxbytes: Option<String>,
    /// Growth factor between sizes (nccl-tests -f).
    #[arg(short = 'f', long = "stepfactor", value_name = "F", conflicts_with_all = ["sizes", "stepbytes"])]
    pub stepfactor: Option<String>,
    /// Growth step between sizes (nccl-tests -i).
    #[arg(
        short = 'i',
        long = "stepbytes",
        value_name = "SIZE",
        conflicts_with = "sizes"
    )]
    pub stepbytes: Option<String>,
    /// Number of ranks (host engine: threads of this process).
    #[arg(long, short = 'g', value_name = "N")]
    pub ranks: Option<String>,
    /// Where data moves: auto (CUDA when usable, else host), host, cuda, or
    /// cuda-emu (the CUDA executor on an emulated device: CPU threads, slow;
    /// for testing and developing algorithms without a GPU).
    #[arg(long, default_value = "auto", value_name = "auto|host|cuda|cuda-emu")]
    pub device: String,
    /// Engines to run side by side: builtin[,nccl,mpi].
    #[arg(long, default_value = "builtin", value_name = "LIST")]
    pub engine: String,
    /// Algorithm: ring, tree, direct, auto (by size) or all.
    #[arg(long, default_value = "auto", value_name = "ring|tree|direct|auto|all")]
    pub algo: String,
    /// Element types, comma-separated, or all (nccl-tests -d).
    #[arg(long, short = 'd', default_value = "float", value_name = "LIST|all")]
    pub dtype: String,
    /// Reduction operators, comma-separated, or all (nccl-tests -o).
    #[arg(long, short = 'o', default_value = "sum", value_name = "LIST|all")]
    pub op: String,
    /// Root rank of rooted collectives, or all (nccl-tests -r).
    #[arg(long, short = 'r', default_value = "0", value_name = "N|all")]
    pub root: String,
    /// Timed iterations per case (nccl-tests -n).
    #[arg(long, short = 'n', default_value = "20", value_name = "N")]
    pub iters: String,
    /// Warm-up iterations per case (nccl-tests -w).
    #[arg(long, short = 'w', default_value = "5", value_name = "N")]
    pub warmup: String,
    /// Check results (the default).
    #[arg(long, overrides_with = "no_check")]
    pub check: bool,
    /// Do not check results.
    #[arg(long, overrides_with = "check")]
    pub no_check: bool,
    /// Checked iterations per case; 0 disables checks (nccl-tests -c).
    #[arg(long, short = 'c', value_name = "N")]
    pub check_iters: Option<String>,
    /// Buffer placement: both, out (out-of-place) or in (in-place).
    #[arg(long, default_value = "both", value_name = "both|in|out")]
    pub placement: String,
    /// Timing method: events (CUDA events) or wall (host clock).
    #[arg(long, value_name = "events|wall")]
    pub timing: Option<String>,
    /// Capture the iteration loop in a CUDA graph.
    #[arg(long)]
    pub graph: bool,
    /// CUDA engine protocol: auto (low-latency for small steps, simple for
    /// large), simple, or ll (steps then fit a low-latency slot).
    #[arg(long, default_value = "auto", value_name = "auto|simple|ll")]
    pub protocol: String,
    /// Longest any wait may last before it counts as a hang (exit 3).
    #[arg(long, default_value = "5m", value_name = "DUR")]
    pub timeout: String,
    /// Where flight-recorder dumps go on a hang, a signal or SIGUSR1
    /// (default: a new folder under ./collbench-dumps).
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Inject a fault: hang:rank=R,seq=S | delay:rank=R,seq=S,ms=M | nan:rank=R[,seq=S] | corrupt:rank=R[,seq=S] (repeatable).
    #[arg(long, value_name = "SPEC")]
    pub inject: Vec<String>,
    /// Flight-recorder ring-buffer entries per rank.
    #[arg(long, default_value_t = crate::recorder::DEFAULT_ENTRIES, value_name = "N")]
    pub fr_entries: usize,
    /// Channels (data partitions run side by side): 1 to 64, or auto (host
    /// engine: 1; CUDA: as many as keep the GPU's SMs busy).
    #[arg(long, default_value = "auto", value_name = "N|auto")]
    pub channels: String,
    /// Seed of the deterministic input data.
    #[arg(long, default_value = "1", value_name = "N")]
    pub seed: String,
    /// Host engine FIFO slot size (the largest step).
    #[arg(long, default_value = "256K", value_name = "SIZE", hide = true)]
    pub slot_size: String,
    /// Write results as JSON (schema collbench.results/1), with JSONL rows beside it.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write results as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw busbw and time against size into FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Terminal output format: collbench's table, nccl-tests' text, or Markdown.
    #[arg(
        long,
        default_value = "table",
        value_name = "table|nccl-tests|markdown"
    )]
    pub format: String,
    /// No table on stdout.
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail (the slowest rank of each row; -vv: debug logs).
    #[arg(long, short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Args, Debug, Clone)]
pub struct InfoArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Compile every CUDA kernel variant (element type x operator) with NVRTC,
    /// through the kernel cache; exit 1 if any fails, 2 if NVRTC cannot be loaded.
    #[arg(long)]
    pub compile_kernels: bool,
    /// GPU architecture to compile for: sm_90, sm_80, 90, compute_90 ...
    /// (default: the GPU's, else sm_90).
    #[arg(long, value_name = "sm_XX", requires = "compile_kernels", value_parser = parse_arch)]
    pub arch: Option<Arch>,
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    s.parse()
        .map_err(|e: crate::engine::exec::cuda::ArchError| e.to_string())
}
