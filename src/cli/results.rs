//! Arguments of the commands that read or gate on results: `report`,
//! `compare` and `qualify`; and the parsing of a qualify check's sweep
//! options through the same flags as the command line.

use super::RunArgs;
use clap::{Args, Parser};
use std::path::PathBuf;

/// `collbench report RESULTS.json... [--plot F] [--csv F] [--format ...]`.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Results files (collbench.results/1: the JSON, or the JSONL of an
    /// interrupted sweep) to render; several are overlaid.
    #[arg(required = true, value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,
    /// Draw busbw and time against size into FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Write every row of every file as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Text output format.
    #[arg(
        long,
        default_value = "table",
        value_name = "table|nccl-tests|markdown"
    )]
    pub format: String,
    /// No text on stdout (only --plot and --csv).
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// Name the slowest rank of each line.
    #[arg(long, short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// `collbench compare BASELINE.json CANDIDATE.json [--max-regression PCT]`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Rows are matched on collective, engine, algo, dtype, op, root, bytes and placement. \
Sizes of 1 MiB and up are bandwidth-bound and judged on busbw; smaller sizes are latency-bound and \
judged on time. A row regressed when that number is worse by more than PCT percent, or when the \
candidate has wrong values.\n\nExit codes: 0 no regression; 1 a matched row regressed; \
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
        allow_hyphen_values = true
    )]
    pub max_regression: String,
}

/// `collbench qualify SPEC.toml [--junit FILE]`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "SPEC.toml is a list of [[check]] tables: collective, device, ranks, sizes, optional \
name, dtype, op, algo, engine, placement, iters, warmup, and thresholds min_busbw_gbps and/or \
max_time_us that every measured row must meet. A failing check is re-run once before it fails. \
See scripts/qualify-example.toml.\n\nExit codes: 0 every check passed; 1 a check failed; \
2 the spec is bad, or a check could not run on this build or machine."
)]
pub struct QualifyArgs {
    /// The checks to run.
    #[arg(value_name = "SPEC.toml")]
    pub spec: PathBuf,
    /// Write JUnit XML: one testcase per check, failures with the numbers.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

#[derive(Parser, Debug)]
#[command(name = "check", no_binary_name = true)]
struct CheckLine {
    #[command(flatten)]
    run: RunArgs,
}

/// Sweep options given as flags (`["--sizes", "8B:1M", ...]`), parsed with
/// the command line's own definitions and defaults.
pub fn sweep_args(flags: &[String]) -> Result<RunArgs, String> {
    CheckLine::try_parse_from(flags)
        .map(|c| c.run)
        .map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid options").to_string();
            first.trim_start_matches("error: ").to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_flags_get_the_command_line_defaults() {
        let a = sweep_args(&["--sizes".into(), "1K".into(), "--ranks".into(), "3".into()]).unwrap();
        assert_eq!(
            (a.sizes.as_deref(), a.ranks.as_deref()),
            (Some("1K"), Some("3"))
        );
        assert_eq!((a.iters.as_str(), a.dtype.as_str()), ("20", "float"));
        let e = sweep_args(&["--colour".into()]).unwrap_err();
        assert!(e.contains("--colour") && !e.contains('\n'), "{e}");
    }
}
