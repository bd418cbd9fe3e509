//! Command-line arguments (clap lives here and nowhere else), with
//! nccl-tests' short flags as aliases. `plan` turns them into a validated
//! [`crate::harness::Plan`].

pub mod aliases;
pub mod plan;
pub mod results;
pub mod spec;
pub mod values;

pub use results::{CompareArgs, QualifyArgs, ReportArgs};
pub use values::{
    AlgoArg, Channels, DeviceChoice, FormatChoice, List, PlacementChoice, ProtocolChoice, Sizes,
    TimingChoice,
};

use crate::engine::exec::cuda::Arch;
use crate::engine::types::{Collective, Dtype, Engine, ReduceOp};
use crate::harness::inject::Inject;
use crate::harness::RootChoice;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "collbench",
    version,
    about = "Benchmark and diagnose collective communication",
    long_about = "Benchmark and diagnose collective communication: sweeps of every collective over \
collbench's own ring/tree engine, bit-exact checks, and hang diagnosis from flight-recorder dumps.\n\n\
Exit codes: 0 all good; 1 a check failed (wrong values, NaN/Inf) or a problem was diagnosed; \
2 usage or runtime error; 3 a hang or timeout was detected; 130 interrupted (SIGINT/SIGTERM/SIGHUP, or stdout closed under a sweep)."
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
    /// Sweep all-to-all with per-pair counts (--split; PyTorch's all_to_allv).
    #[command(
        name = "all-to-all-v",
        visible_alias = "alltoallv",
        alias = "all_to_allv"
    )]
    AllToAllV(RunArgs),
    /// Sweep all-gather with per-rank block sizes (--split).
    #[command(
        name = "all-gather-v",
        visible_alias = "allgatherv",
        alias = "all_gatherv"
    )]
    AllGatherV(RunArgs),
    /// Sweep reduce-scatter with per-rank block sizes (--split).
    #[command(
        name = "reduce-scatter-v",
        visible_alias = "reducescatterv",
        alias = "reduce_scatterv"
    )]
    ReduceScatterV(RunArgs),
    /// Sweep every collective (the nine of nccl-tests; the uneven -v forms
    /// run as their own subcommands).
    All(RunArgs),
    /// Probe every directed link: send-recv in n-1 rounds (round k: rank r
    /// sends to r+k and receives from r-k, every rank once a round), the
    /// link matrix of the largest size and a verdict naming a slow link or
    /// rank (exit 1); the sweep's options where they apply.
    Links(RunArgs),
    /// Diagnose a hang from flight-recorder dumps (collbench's, or PyTorch's pickle/JSON).
    Analyze(AnalyzeArgs),
    /// What this build has and what this machine has.
    Info(InfoArgs),
    /// Re-render saved results (table, nccl-tests text, Markdown, CSV, plots); several overlay.
    #[command(
        after_help = "Exit codes: 0 rendered, every run finished and every row clean; 1 rendered, and a row holds \
wrong or NaN/Inf values or a run did not finish (said on stderr); 2 a file cannot be read or an output cannot be written."
    )]
    Report(ReportArgs),
    /// Compare a candidate's results with a baseline's; exit 1 on a regression.
    Compare(CompareArgs),
    /// Run the checks of a spec against thresholds; JUnit XML for CI.
    Qualify(QualifyArgs),
    /// Make links named as nccl-tests' binaries (all_reduce_perf, ...) to
    /// this collbench in DIR: run by those names it behaves as them.
    InstallAliases(InstallArgs),
    /// Fit the cost model on this machine: sweep every algorithm of the
    /// collectives and write, per (collective, algorithm, protocol,
    /// channels), a latency per hop and a bandwidth curve (`--tuning FILE`
    /// reads it: `--algo auto` then takes the model's pick).
    Tune(TuneArgs),
    /// Predict time and busbw of every algorithm over a size sweep at any
    /// rank count, from a fitted table or a link's bandwidth and latency.
    Model(ModelArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TuneArgs {
    /// Collectives to fit, comma-separated, or all.
    #[arg(long, default_value = "all-reduce", value_name = "LIST|all", value_parser = values::collectives)]
    pub collective: List<Collective>,
    /// Where the fitted table goes (JSON, schema collbench.tuning/1).
    #[arg(long, short = 'O', value_name = "FILE")]
    pub output: PathBuf,
    /// Fit from saved results (collbench's JSON or JSONL) instead of
    /// running a sweep: the builtin engine's clean out-of-place rows (the
    /// sweep's options have nothing to do then, and are refused).
    #[arg(long, value_name = "RESULTS.json", num_args = 1..)]
    pub from: Vec<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("source").args(["tuning", "link_gbps"]).required(true)))]
pub struct ModelArgs {
    /// The table `collbench tune` wrote.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["link_gbps", "latency_us"])]
    pub tuning: Option<PathBuf>,
    /// Instead of a table: the bandwidth of one link, GB/s (every
    /// algorithm moves its traffic at it).
    #[arg(long, value_name = "GB/s", requires = "latency_us", value_parser = values::link_gbps, allow_negative_numbers = true)]
    pub link_gbps: Option<f64>,
    /// With --link-gbps: the latency of one hop, microseconds.
    #[arg(long, value_name = "US", requires = "link_gbps", value_parser = values::latency_us, allow_negative_numbers = true)]
    pub latency_us: Option<f64>,
    /// Ranks to predict for.
    #[arg(long, value_name = "N", value_parser = values::ranks)]
    pub ranks: usize,
    /// Collectives, comma-separated, or all.
    #[arg(long, default_value = "all-reduce", value_name = "LIST|all", value_parser = values::collectives)]
    pub collective: List<Collective>,
    /// The protocol whose entries to use where the table has several.
    #[arg(long, value_name = "simple|ll|auto|host")]
    pub protocol: Option<String>,
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Write the predictions as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct InstallArgs {
    /// The folder for the links (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Replace files of those names that are not already links to collbench.
    #[arg(long)]
    pub force: bool,
}

/// The command line's definition, with each collective's help listing only
/// the options that apply to it (`--root` for rooted collectives, `--op`
/// for reducing ones); the others stay accepted, hidden, so nccl-tests'
/// command lines run unchanged.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    for name in ["all", "links"] {
        cmd = cmd.mut_subcommand(name, |s| s.mut_arg("split", |a| a.hide(true)));
    }
    for coll in crate::engine::types::Collective::EVERY {
        let name = coll.name();
        if coll.vkind().is_none() {
            cmd = cmd.mut_subcommand(name, |s| s.mut_arg("split", |a| a.hide(true)));
        }
        if !coll.rooted() {
            cmd = cmd.mut_subcommand(name, |s| s.mut_arg("root", |a| a.hide(true)));
        }
        if !coll.reduces() {
            cmd = cmd.mut_subcommand(name, |s| s.mut_arg("op", |a| a.hide(true)));
        }
    }
    cmd
}

/// Parses `argv` (its first item is the program) with [`command`]; run as
/// an nccl-tests binary (see [`aliases::command_line`]), with nccl-tests'
/// getopt habits: a flag given twice takes its last value, and the usage
/// names the binary alone.
pub fn parse_from(argv: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cmd = command();
    // The subcommand as clap names it (a user may type the hidden flag
    // after an alias, or after no subcommand at all).
    let sub = argv
        .get(1)
        .filter(|_| argv.get(2).is_some_and(|a| a == "--as-nccl-tests"))
        .and_then(|s| cmd.find_subcommand(s.to_string_lossy().as_ref()))
        .map(|s| s.get_name().to_string());
    if let Some(sub) = sub {
        let program = argv[0].to_string_lossy();
        let binary = std::path::Path::new(&*program)
            .file_name()
            .map_or_else(|| program.to_string(), |n| n.to_string_lossy().into_owned());
        cmd = cmd.args_override_self(true).mut_subcommand(sub, |s| {
            s.override_usage(format!(
                "{binary} [-t N] [-g N] [-b SIZE] [-e SIZE] [-f F | -i SIZE] [-n N] [-w N] [-m N] [-c N] [-o OP] [-d TYPE] [-r ROOT] [-T SEC] [-G N] [-a 0-3] [collbench options]"
            ))
            .after_help(format!(
                "Run as {binary}, collbench behaves as nccl-tests' binary: its defaults hold (-b and -e 32M, a step of 1M unless -f is above 1, one rank, -a 1, nccl-tests' text on stdout), sizes read as nccl-tests reads them (1K = 1KB = 1024), a flag given twice takes its last value, and NCCL_TESTS_MIN_BW fails a run whose average bus bandwidth is below 0.9 of it. collbench's options (--json, --device, --algo, ...) apply too; their defaults above are collbench's own."
            ))
        });
    }
    let matches = cmd.clone().try_get_matches_from(argv)?;
    if let Some(("tune", m)) = matches.subcommand() {
        refuse_sweep_flags_with_from(&mut cmd, m)?;
    }
    Cli::from_arg_matches(&matches)
}

/// `tune --from` fits saved results and runs no sweep: a sweep's option
/// given with it would do nothing, so it is refused, named as typed.
fn refuse_sweep_flags_with_from(
    cmd: &mut clap::Command,
    m: &clap::ArgMatches,
) -> Result<(), clap::Error> {
    use clap::parser::ValueSource;
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
    if !given("from") {
        return Ok(());
    }
    // What a fit of saved results still takes.
    let kept = ["from", "output", "collective", "quiet", "verbose"];
    // Built, the subcommand's usage names the program too.
    cmd.build();
    let Some(tune) = cmd.find_subcommand_mut("tune") else {
        return Ok(());
    };
    let idle: Vec<String> = tune
        .get_arguments()
        .filter(|a| !kept.contains(&a.get_id().as_str()) && given(a.get_id().as_str()))
        .map(|a| match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("-{s}/--{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => a.get_id().to_string(),
        })
        .collect();
    if idle.is_empty() {
        return Ok(());
    }
    // The error of `tune`, with its usage.
    Err(tune.error(
        clap::error::ErrorKind::ArgumentConflict,
        format!(
            "--from fits saved results and runs no sweep: {} {} nothing to do; drop {}",
            idle.join(", "),
            if idle.len() == 1 { "has" } else { "have" },
            if idle.len() == 1 { "it" } else { "them" }
        ),
    ))
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

/// Sizes of a sweep: `--sizes`, or nccl-tests' `-b -e -f -i`.
#[derive(Args, Debug, Clone, Default)]
pub struct SizeArgs {
    /// Sizes to sweep: MIN:MAX[:xF|:+STEP], e.g. 8B:64M, 1K:1G:x4, 1M:8M:+1M
    /// (B, K/KiB, M/MiB, G/GiB are powers of 1024; KB/MB/GB powers of 1000)
    /// [default: 8B:64M].
    #[arg(long, value_name = "MIN:MAX[:xF|:+STEP]", value_parser = values::sizes, allow_negative_numbers = true)]
    pub sizes: Option<Sizes>,
    /// Smallest size (nccl-tests -b).
    #[arg(short = 'b', long = "minbytes", value_name = "SIZE", conflicts_with = "sizes", value_parser = values::bytes, allow_negative_numbers = true)]
    pub minbytes: Option<u64>,
    /// Largest size (nccl-tests -e).
    #[arg(short = 'e', long = "maxbytes", value_name = "SIZE", conflicts_with = "sizes", value_parser = values::bytes, allow_negative_numbers = true)]
    pub maxbytes: Option<u64>,
    /// Growth factor between sizes (nccl-tests -f) [default: 2; run by an
    /// nccl-tests binary's name, as nccl-tests: sizes step by -i, 1 MiB,
    /// unless -f is above 1].
    #[arg(short = 'f', long = "stepfactor", value_name = "F", conflicts_with = "sizes", value_parser = values::factor, allow_negative_numbers = true)]
    pub stepfactor: Option<f64>,
    /// Growth step between sizes (nccl-tests -i).
    #[arg(short = 'i', long = "stepbytes", value_name = "SIZE", conflicts_with = "sizes", value_parser = values::bytes, allow_negative_numbers = true)]
    pub stepbytes: Option<u64>,
}

/// Where results go and how the terminal shows them (sweeps and `report`).
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Write results as CSV (one line per row; `-`: stdout, the table then
    /// going to stderr).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw busbw and time against size into FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE", value_parser = values::plot_path)]
    pub plot: Option<PathBuf>,
    /// Terminal output format: collbench's table, nccl-tests' text, or
    /// Markdown [default: table; nccl-tests under nccl-tests' binary names].
    #[arg(long, value_enum, ignore_case = true)]
    pub format: Option<FormatChoice>,
    /// Nothing on stdout (only the files asked for).
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail: the slowest rank of each row, and info logs on stderr
    /// (-vv: debug logs; COLLBENCH_LOG takes tracing's filter syntax).
    #[arg(long, short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Options of a sweep.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Number of ranks (host engine: threads of this process; under MPI:
    /// the world's size) [default: 2; nccl-tests' -t x -g].
    #[arg(long, value_name = "N", value_parser = values::ranks, allow_negative_numbers = true)]
    pub ranks: Option<usize>,
    /// Where data moves: auto (CUDA when usable, else host), host, cuda, or
    /// cuda-emu (the CUDA executor on an emulated device: CPU threads, slow;
    /// for testing and developing algorithms without a GPU; its shape from
    /// COLLBENCH_EMU_*, e.g. COLLBENCH_EMU_THREADS=16 for blocks of 16
    /// threads, as `collbench info` shows).
    #[arg(long, default_value = "auto", value_enum, ignore_case = true)]
    pub device: DeviceChoice,
    /// Start N rank processes on this node, one rank each, connected
    /// through the node's shared memory (CUDA IPC between their GPUs): what
    /// mpirun does, for one node without MPI. Across nodes use mpirun or srun.
    #[arg(long, value_name = "N", value_parser = values::procs)]
    pub procs: Option<usize>,
    /// When ranks are processes (mpirun, srun, --procs): the GPU of each
    /// rank of a node, by its rank on the node (default: that rank, round
    /// robin over the GPUs; or COLLBENCH_GPU_MAP).
    #[arg(long, value_name = "LIST", value_parser = values::gpu_map)]
    pub gpu_map: Option<List<usize>>,
    /// Let rank processes share a GPU. Processes on one GPU time-slice, so
    /// their persistent kernels make slow progress: for testing on a GPU
    /// or two, not for measuring.
    #[arg(long)]
    pub allow_shared_gpu: bool,
    /// Engines to run side by side: builtin[,nccl,mpi].
    #[arg(long, default_value = "builtin", value_name = "LIST", value_parser = values::engines)]
    pub engine: List<Engine>,
    /// Algorithm: ring, tree, direct (a list), auto (by size) or all.
    #[arg(long, default_value = "auto", value_name = "ring|tree|direct|auto|all", value_parser = values::algos)]
    pub algo: AlgoArg,
    /// Element types, comma-separated, or all (nccl-tests -d).
    #[arg(long, short = 'd', alias = "datatype", default_value = "float", value_name = "LIST|all", value_parser = values::dtypes)]
    pub dtype: List<Dtype>,
    /// Reduction operators, comma-separated, or all (nccl-tests -o).
    #[arg(long, short = 'o', default_value = "sum", value_name = "LIST|all", value_parser = values::ops)]
    pub op: List<ReduceOp>,
    /// premulsum's scalar: every input is multiplied by it (rounded to the
    /// type) before the sum; an integer for integer types.
    #[arg(long, default_value = "1", value_name = "X", value_parser = values::scalar, allow_hyphen_values = true)]
    pub scalar: crate::engine::elem::Scalar,
    /// How the v-collectives (all-to-all-v, all-gather-v, reduce-scatter-v)
    /// divide their data: uniform, skew[:SEED] (seeded random weights 1 to
    /// 16, per pair for all-to-all-v), hot[:RANK] (that rank holds, or
    /// receives, three quarters), or a FILE of weights (one per rank, on one
    /// line or one a line; for all-to-all-v also a matrix, a row per
    /// sending rank).
    #[arg(long, default_value = "uniform", value_name = "uniform|skew[:SEED]|hot[:RANK]|FILE", value_parser = values::split)]
    pub split: crate::engine::split::Split,
    /// Issue N operations as one group (NCCL's group calls), timed as one:
    /// a row per operation and one for the group. On the builtin engine a
    /// group is one program per rank (one launch on a GPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(2..=64), allow_negative_numbers = true)]
    pub group: Option<u16>,
    /// The group's collectives, cycled over its N operations (default: the
    /// subcommand's); without --group, one operation each.
    #[arg(long, value_name = "LIST", value_parser = values::group_mix)]
    pub group_mix: Option<List<Collective>>,
    /// The cost model `collbench tune` wrote: `--algo auto` takes its pick,
    /// and rows carry its prediction (`predicted_us`) and pick (`auto_pick`).
    #[arg(long, value_name = "FILE")]
    pub tuning: Option<std::path::PathBuf>,
    /// Root rank of rooted collectives, or all (-1 too, as nccl-tests -r).
    #[arg(long, short = 'r', default_value = "0", value_name = "N|all", value_parser = values::root, allow_negative_numbers = true)]
    pub root: RootChoice,
    /// Timed iterations per case (nccl-tests -n).
    #[arg(long, short = 'n', default_value = "20", value_name = "N", value_parser = values::iters, allow_negative_numbers = true)]
    pub iters: usize,
    /// Warm-up iterations per case (nccl-tests -w).
    #[arg(long, short = 'w', alias = "warmup_iters", default_value = "5", value_name = "N", value_parser = values::warmup, allow_negative_numbers = true)]
    pub warmup: usize,
    /// Check results (the default; of --check and --no-check the last
    /// given wins, so a script's flags can be overridden after them).
    #[arg(long, overrides_with = "no_check")]
    pub check: bool,
    /// Do not check results.
    #[arg(long, overrides_with = "check", conflicts_with = "check_iters")]
    pub no_check: bool,
    /// Checked iterations per case; 0 disables checks (nccl-tests -c) [default: 1].
    #[arg(long, short = 'c', value_name = "N", value_parser = values::check_iters, allow_negative_numbers = true)]
    pub check_iters: Option<usize>,
    /// Buffer placement: both, out (out-of-place) or in (in-place).
    #[arg(long, default_value = "both", value_enum, ignore_case = true)]
    pub placement: PlacementChoice,
    /// Timing method: events (CUDA events) or wall (host clock) [default:
    /// events on the CUDA engine, wall on the host engine].
    #[arg(long, value_enum, ignore_case = true)]
    pub timing: Option<TimingChoice>,
    /// Capture the iteration loop in a CUDA graph.
    #[arg(long)]
    pub graph: bool,
    /// CUDA engine protocol: auto (for operations up to 1 MiB low-latency
    /// where steps fit 16 KiB, else LL128 where they fit 256 KiB; simple
    /// otherwise),
    /// simple, ll (steps then fit a low-latency slot) or ll128.
    #[arg(long, default_value = "auto", value_enum, ignore_case = true)]
    pub protocol: ProtocolChoice,
    /// Longest any wait may last before it counts as a hang (exit 3); a bare
    /// number is seconds, 0 never times out (nccl-tests -T).
    #[arg(long, short = 'T', default_value = "5m", value_name = "DUR", value_parser = values::timeout, allow_negative_numbers = true)]
    pub timeout: Duration,
    /// Where flight-recorder dumps go on a hang, a signal or SIGUSR1
    /// [default: a new folder under ./collbench-dumps].
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Inject a fault: hang:rank=R,seq=S | delay:rank=R,seq=S,ms=M | nan:rank=R[,seq=S] | corrupt:rank=R[,seq=S] | slow:rank=R,factor=F | slow-link:from=A,to=B,factor=F (repeatable).
    #[arg(long, value_name = "SPEC", value_parser = values::inject)]
    pub inject: Vec<Inject>,
    /// Measure every directed link (bytes, wait, transfer time) and print,
    /// after the table, the link matrix of the largest size with a verdict
    /// naming a slow link or rank; the JSON gets `links`.
    #[arg(long)]
    pub links: bool,
    /// With --links (or `collbench links`): a link slower than this many
    /// GB/s is a finding too (exit 1), whatever the others do.
    #[arg(long, value_name = "GBPS", value_parser = values::gbps, allow_negative_numbers = true)]
    pub min_link_gbps: Option<f64>,
    /// Flight-recorder ring-buffer entries per rank.
    #[arg(long, default_value_t = crate::harness::DEFAULT_FR_ENTRIES, value_name = "N", value_parser = values::fr_entries, allow_negative_numbers = true)]
    pub fr_entries: usize,
    /// Channels (data partitions run side by side): 1 to 128, or auto (host
    /// engine: 1; CUDA: as many as keep the GPU's SMs busy).
    #[arg(long, default_value = "auto", value_name = "N|auto", value_parser = values::channels, allow_negative_numbers = true)]
    pub channels: Channels,
    /// Seed of the deterministic input data.
    #[arg(long, default_value = "1", value_name = "N", value_parser = values::seed, allow_negative_numbers = true)]
    pub seed: u64,
    /// Connection slot size (the largest step): by default 256 KiB on the
    /// host engine and the emulated device, 1 MiB on a GPU.
    #[arg(long, value_name = "SIZE", hide = true, value_parser = values::slot_size)]
    pub slot_size: Option<usize>,
    /// Write results as JSON (schema collbench.results/1), with JSONL rows
    /// beside it; `-` writes the JSON to stdout (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(flatten)]
    pub nccl_tests: NcclTestsArgs,
}

/// nccl-tests' own flags, so that its command lines run unchanged: each
/// does what it does in nccl-tests, or, where it cannot apply here, is
/// accepted with a one-line note.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "nccl-tests flags")]
pub struct NcclTestsArgs {
    /// Threads per process (nccl-tests -t); ranks = threads x GPUs per thread.
    #[arg(short = 't', long = "nthreads", value_name = "N", value_parser = values::at_least_one, allow_negative_numbers = true)]
    pub nthreads: Option<usize>,
    /// GPUs per thread (nccl-tests -g); ranks = threads x GPUs per thread.
    #[arg(short = 'g', long = "ngpus", value_name = "N", value_parser = values::at_least_one, allow_negative_numbers = true)]
    pub ngpus: Option<usize>,
    /// CUDA graph launches (nccl-tests -G): above 0, the timed loop is
    /// captured in a CUDA graph (CUDA engine; a note elsewhere).
    #[arg(short = 'G', long = "cudagraph", value_name = "N", value_parser = values::count, allow_negative_numbers = true)]
    pub cudagraph: Option<usize>,
    /// How ranks' times make a row's time (nccl-tests -a): 0 rank 0's, 1 the
    /// mean, 2 the least, 3 the most [default: 3; 1 under nccl-tests' names].
    #[arg(short = 'a', long = "average", value_name = "0-3", value_parser = values::average, allow_negative_numbers = true)]
    pub average: Option<values::RankTime>,
    /// Operations per timed iteration (nccl-tests -m); times stay per operation.
    #[arg(short = 'm', long = "agg_iters", value_name = "N", value_parser = values::at_least_one, allow_negative_numbers = true)]
    pub agg_iters: Option<usize>,
    /// nccl-tests -z: wait for each operation before the next (0 or 1).
    #[arg(short = 'z', long = "blocking", hide = true, value_name = "0|1", value_parser = values::flag01, allow_negative_numbers = true)]
    pub blocking: Option<bool>,
    /// nccl-tests -C: report CPU time (0 or 1).
    #[arg(short = 'C', long = "report_cputime", hide = true, value_name = "0|1", value_parser = values::flag01, allow_negative_numbers = true)]
    pub report_cputime: Option<bool>,
    /// nccl-tests -R: register buffers with NCCL (0, 1 or 2).
    #[arg(short = 'R', long = "local_register", hide = true, value_name = "0-2", value_parser = values::register, allow_negative_numbers = true)]
    pub local_register: Option<usize>,
    /// nccl-tests -p: initialise NCCL from threads in parallel (0 or 1).
    #[arg(short = 'p', long = "parallel_init", hide = true, value_name = "0|1", value_parser = values::flag01, allow_negative_numbers = true)]
    pub parallel_init: Option<bool>,
    /// nccl-tests -y: run on the default (NULL) stream (0 or 1).
    #[arg(short = 'y', long = "stream_null", hide = true, value_name = "0|1", value_parser = values::flag01, allow_negative_numbers = true)]
    pub stream_null: Option<bool>,
    /// nccl-tests -N: run the sweep this many times (0: forever).
    #[arg(short = 'N', long = "run_cycles", hide = true, value_name = "N", value_parser = values::count, allow_negative_numbers = true)]
    pub run_cycles: Option<usize>,
    /// nccl-tests -M: report memory use (0 or 1).
    #[arg(short = 'M', long = "memory_report", hide = true, alias = "memory", value_name = "0|1", value_parser = values::flag01, allow_negative_numbers = true)]
    pub memory_report: Option<bool>,
    /// nccl-tests -u: unaligned buffers (RCCL: a CU mask).
    #[arg(
        short = 'u',
        long = "unalign",
        hide = true,
        alias = "cumask",
        value_name = "N"
    )]
    pub unalign: Option<String>,
    /// nccl-tests -k: side computation (NCCL forks).
    #[arg(short = 'k', long = "side_comp", hide = true, value_name = "N")]
    pub side_comp: Option<String>,
    /// nccl-tests -S (2.17): timestamps on the rows (0 or 1).
    #[arg(
        short = 'S',
        long = "report_timestamps",
        hide = true,
        value_name = "0|1"
    )]
    pub report_timestamps: Option<String>,
    /// nccl-tests -J (2.17): its JSON results to FILE.
    #[arg(short = 'J', long = "output_file", hide = true, value_name = "FILE")]
    pub output_file: Option<String>,
    /// nccl-tests -x (2.17): NCCL's CTA policy.
    #[arg(short = 'x', long = "cta_policy", hide = true, value_name = "N")]
    pub cta_policy: Option<String>,
    /// nccl-tests -D (2.17): the device-side implementation.
    #[arg(
        short = 'D',
        long = "device_implementation",
        hide = true,
        value_name = "N"
    )]
    pub device_implementation: Option<String>,
    /// nccl-tests -V (2.17): CTAs of the device-side implementation.
    #[arg(short = 'V', long = "device_cta_count", hide = true, value_name = "N")]
    pub device_cta_count: Option<String>,
    /// Behave as nccl-tests' binary of the same collective (set when
    /// collbench is run as `all_reduce_perf`, ...).
    #[arg(long = "as-nccl-tests", hide = true)]
    pub as_nccl_tests: bool,
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
    /// GPU architecture to compile for: sm_90, sm_80, 90, compute_90 ...,
    /// sm_70 or newer (default: the GPU's, else sm_90).
    #[arg(long, value_name = "sm_XX", requires = "compile_kernels", value_parser = parse_arch)]
    pub arch: Option<Arch>,
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    let arch: Arch = s
        .parse()
        .map_err(|e: crate::engine::exec::cuda::ArchError| e.to_string())?;
    if !arch.supported() {
        return Err(format!(
            "{arch}: {}",
            crate::engine::exec::cuda::kernels::TOO_OLD
        ));
    }
    Ok(arch)
}
