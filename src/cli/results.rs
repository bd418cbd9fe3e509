//! Arguments of the commands that read or gate on results: `report`,
//! `compare` and `qualify`.

use super::OutputArgs;
use clap::Args;
use std::path::PathBuf;

/// `collbench report RESULTS.json... [--plot F] [--csv F] [--format ...]`.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Results files to render (collbench.results/1: the JSON, or the
    /// JSONL of an interrupted sweep; or an nccl-tests log, each run in
    /// it); several are overlaid.
    #[arg(required = true, value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `collbench compare BASELINE.json CANDIDATE.json [--max-regression PCT]`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Rows are matched on collective, engine, algo, dtype, op, root, bytes and placement. \
Sizes of 1 MiB and up are bandwidth-bound and judged on busbw; smaller sizes are latency-bound and \
judged on time. A row regressed when that number is worse by more than PCT percent, or when the \
candidate has wrong values. Baseline rows the candidate lacks fail the comparison unless \
--allow-missing; runs of different world size or device, and rows sharing a key, are warned \
about.\n\nExit codes: 0 no regression; 1 a matched row regressed, or baseline rows are missing; \
2 a file could not be read, or no row matched."
)]
pub struct CompareArgs {
    /// The reference results.
    #[arg(value_name = "BASELINE.json")]
    pub baseline: PathBuf,
    /// The results to judge against the baseline.
    #[arg(value_name = "CANDIDATE.json")]
    pub candidate: PathBuf,
    /// The largest allowed loss, in percent: busbw at 1 MiB and up, time below.
    #[arg(
        long,
        default_value = "5",
        value_name = "PCT",
        allow_hyphen_values = true,
        value_parser = percentage
    )]
    pub max_regression: f64,
    /// Pass even when baseline rows are missing from the candidate (they
    /// are still listed); without it a missing row fails the comparison.
    #[arg(long)]
    pub allow_missing: bool,
}

/// `collbench qualify SPEC.toml [--junit FILE]`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "SPEC.toml is a list of [[check]] tables: collective, device, ranks, sizes, optional \
name, dtype, op, scalar, algo, engine, placement, iters, warmup, and thresholds that every \
measured row must meet: min_busbw_gbps, max_time_us, and the links' min_link_gbps (slowest \
link) and max_link_spread (fastest over slowest; both run the sweep with --links). \
collective = \"links\" runs the links probe. A check with log = FILE (an nccl-tests log or \
collbench results, relative to the spec) judges that file's rows and runs nothing (its sizes = \
\"MIN:MAX\" picks the rows from MIN to MAX). A failing \
check is re-run once before it fails. See scripts/qualify-example.toml.\n\nExit codes: 0 every \
check passed; 1 a check failed; 2 the spec is bad, or a check could not run on this build or \
machine."
)]
pub struct QualifyArgs {
    /// The checks to run.
    #[arg(value_name = "SPEC.toml")]
    pub spec: PathBuf,
    /// Write JUnit XML: one testcase per check, failures with the numbers
    /// (`-`: stdout, the table then going to stderr).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `--max-regression`: a number >= 0, with an optional `%`.
fn percentage(v: &str) -> Result<f64, super::values::ValueError> {
    let t = v.trim();
    match t.strip_suffix('%').unwrap_or(t).parse::<f64>() {
        Ok(p) if p >= 0.0 && p.is_finite() => Ok(p),
        _ => Err(super::values::ValueError(format!(
            "--max-regression '{v}' is not a percentage (a number >= 0, like 5)"
        ))),
    }
}
