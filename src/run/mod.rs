//! Commands, end to end: a parsed command line in, an exit code out. This
//! is the only place that decides what goes to stdout and stderr, and what
//! needs the world or the machine (the device, the MPI world's size, the
//! dump folder, the run's id) before the harness starts.

/// `eprintln!` that never panics, and shows text from files safely (see
/// [`emit`]).
macro_rules! say {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stderr(), &format!($($t)*), true)
    };
}

/// `eprint!` that never panics (see [`emit`]).
macro_rules! say_part {
    ($($t:tt)*) => {
        crate::run::emit(&mut std::io::stderr(), &format!($($t)*), false)
    };
}

/// `println!` that never panics (see [`emit_stdout`]).
macro_rules! out {
    ($($t:tt)*) => {
        crate::run::emit_stdout(&format!($($t)*), true)
    };
}

/// `print!` that never panics (see [`emit_stdout`]).
macro_rules! out_part {
    ($($t:tt)*) => {
        crate::run::emit_stdout(&format!($($t)*), false)
    };
}

/// Writes `text` (and a newline with `line`) made [`printable`], ignoring
/// errors. A sweep ignores SIGPIPE (a closed pipe must not end it before
/// its results are written), so a write to a closed stream (`2>&1 | head`)
/// fails, and `println!` would panic on it; the message is lost, never the
/// results.
pub(crate) fn emit(to: &mut impl Write, text: &str, line: bool) {
    let _ = write_text(to, text, line);
}

/// [`emit`] to stdout, keeping the first error other than a closed pipe
/// (see [`stdout_lost`]).
pub(crate) fn emit_stdout(text: &str, line: bool) {
    note_stdout(write_text(&mut std::io::stdout().lock(), text, line));
}

/// `text` made [`printable`], and a newline with `line`.
fn write_text(to: &mut impl Write, text: &str, line: bool) -> std::io::Result<()> {
    let text = printable(text);
    if line {
        writeln!(to, "{text}")
    } else {
        write!(to, "{text}")
    }
}

/// The first error writing text to stdout other than a closed pipe (a full
/// disk under `> table.txt`).
static STDOUT_ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Keeps `r`'s error (see [`STDOUT_ERROR`]); a closed pipe is the reader's
/// choice, not an error.
pub(crate) fn note_stdout(r: std::io::Result<()>) {
    use std::io::ErrorKind;
    if let Err(e) = r {
        // A socket's reader that went away resets it: gone, as a pipe's.
        if !matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) {
            let _ = STDOUT_ERROR.set(e.to_string());
        }
    }
}

/// A command's exit code once its stdout is flushed: text that could not
/// be written (a full disk) fails a command that would otherwise have
/// passed or only found a problem, saying so: its output is incomplete.
fn stdout_lost(code: i32) -> i32 {
    note_stdout(std::io::stdout().flush());
    match STDOUT_ERROR.get() {
        Some(e) if code == OK || code == CHECK_FAILED => fail(format!(
            "writing to stdout: {e}: what it shows is incomplete"
        )),
        _ => code,
    }
}

/// Writes a command's output (`analyze`'s diagnosis, `report`'s text) to
/// `to` and flushes it: a reader that went away (a closed pipe) is no
/// error, a write that failed (a full disk under `> diag.json`) is one.
pub(crate) fn emit_output(to: &mut impl Write, text: &str) -> std::io::Result<()> {
    match to
        .write_all(printable(text).as_bytes())
        .and_then(|()| to.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}

/// Text for a terminal: hidden characters other than newline and tab
/// escaped ([`crate::units::shown`]).
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    crate::units::shown(s, true)
}

mod aliases;
mod analyze;
mod compare;
mod device;
mod info;
mod links;
mod logs;
mod paths;
mod qualify;
mod report;
mod sinks;
mod sweep;
mod tune;
pub(crate) mod world;

// The commands' shared pieces, one room each; every room sees the others'
// through this module.
use device::*;
use sinks::*;
pub use sinks::{cpu_model, rfc3339_now};
use sweep::*;
use world::*;

use crate::cli::plan::{self, Sweep};
use crate::cli::{Cli, Command, DeviceChoice, FormatChoice, RunArgs, TimingChoice};
use crate::engine::exec::cuda::device as cuda_device;
use crate::engine::exec::cuda::launch::Here;
use crate::engine::types::{Collective, Engine};
use crate::harness::{self, GpuKind, GraphAsk, Plan, Setup, Timing};
use crate::launch::{open_worlds, Peers};
use crate::recorder::watchdog;
use crate::report::layout::{Format, LayoutSink};
use crate::report::progress::{self, Progress, ProgressSink};
use crate::report::{csv::CsvSink, json::JsonSink, plot::PlotSink, warn};
use crate::report::{Fanout, Meta, Named, Partial, Results, Sink, StopReason};
use crate::units::Bytes;
use anyhow::{anyhow, bail, Context};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Exit codes (documented in README and `--help`).
pub const OK: i32 = 0;
pub const CHECK_FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const HANG: i32 = 3;
/// Stopped by SIGINT/SIGTERM (128 + SIGINT, as shells expect).
pub const INTERRUPTED: i32 = 130;

/// How much a command line asked to be told (-v count; 0 with -q).
fn verbosity(c: &Command) -> u8 {
    match c {
        Command::Report(a) => a.out.verbose,
        Command::AllReduce(a)
        | Command::AllGather(a)
        | Command::ReduceScatter(a)
        | Command::Broadcast(a)
        | Command::Reduce(a)
        | Command::AllToAll(a)
        | Command::Gather(a)
        | Command::Scatter(a)
        | Command::SendRecv(a)
        | Command::AllToAllV(a)
        | Command::AllGatherV(a)
        | Command::ReduceScatterV(a)
        | Command::Links(a)
        | Command::All(a) => a.out.verbose,
        Command::Tune(a) => a.run.out.verbose,
        _ => 0,
    }
}

impl From<FormatChoice> for Format {
    fn from(f: FormatChoice) -> Format {
        match f {
            FormatChoice::Table => Format::Table,
            FormatChoice::NcclTests => Format::NcclTests,
            FormatChoice::Markdown => Format::Markdown,
        }
    }
}

/// Runs a command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    // Before anything initialises the CUDA driver.
    crate::engine::exec::cuda::dev::real::prepare_env();
    logs::init(verbosity(&cli.command));
    stdout_lost(command(cli))
}

/// [`run`]'s command.
fn command(cli: Cli) -> i32 {
    let (coll, args) = match cli.command {
        Command::Info(a) => return info::info(&a),
        Command::Analyze(a) => return analyze::analyze(&a),
        Command::Report(a) => return report::report(&a),
        Command::Compare(a) => return compare::compare(&a),
        Command::Qualify(a) => return qualify::qualify(&a),
        Command::InstallAliases(a) => return aliases::install_aliases(&a),
        Command::Tune(a) => return tune::tune(&a),
        Command::Model(a) => return tune::model(&a),
        Command::All(a) => (None, a),
        Command::AllReduce(a) => (Some(Collective::AllReduce), a),
        Command::AllGather(a) => (Some(Collective::AllGather), a),
        Command::ReduceScatter(a) => (Some(Collective::ReduceScatter), a),
        Command::Broadcast(a) => (Some(Collective::Broadcast), a),
        Command::Reduce(a) => (Some(Collective::Reduce), a),
        Command::AllToAll(a) => (Some(Collective::AllToAll), a),
        Command::Gather(a) => (Some(Collective::Gather), a),
        Command::Scatter(a) => (Some(Collective::Scatter), a),
        Command::SendRecv(a) => (Some(Collective::SendRecv), a),
        Command::AllToAllV(a) => (Some(Collective::AllToAllV), a),
        Command::AllGatherV(a) => (Some(Collective::AllGatherV), a),
        Command::ReduceScatterV(a) => (Some(Collective::ReduceScatterV), a),
        Command::Links(a) => {
            return sweep(None, &a, true).unwrap_or_else(|e| fail(one_line(&e)));
        }
    };
    sweep(coll, &args, false).unwrap_or_else(|e| fail(one_line(&e)))
}

/// An error and its causes on one line, each cause said once (a cause
/// whose text its parent already quotes is not repeated).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if !text.contains(&c) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}

/// Says why a command could not run; the usage/runtime exit code.
fn fail(e: impl std::fmt::Display) -> i32 {
    // One write, so the lines of ranks that are processes never interleave;
    // text from a file it names cannot drive the terminal.
    let line = format!("collbench: error: {}\n", printable(&e.to_string()));
    // Rank processes of `--procs` that meet the same error say it once.
    if !crate::launch::procs::say_once(&line) {
        return USAGE;
    }
    progress::suspend(|| {
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
    USAGE
}

pub use crate::launch::hostname;

#[cfg(test)]
mod tests {
    #[test]
    fn text_from_files_cannot_drive_the_terminal() {
        assert!(matches!(
            super::printable("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            super::printable("a\u{1b}[2Jb\0c\u{202E}d"),
            "a\\u001b[2Jb\\u0000c\\u202ed"
        );
        // JSON stays JSON: a hidden character inside a string becomes
        // JSON's own escape.
        let json = serde_json::json!({"pg": "q\u{7f}\u{85}\u{202e}"}).to_string();
        let shown = super::printable(&json);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["pg"], "q\u{7f}\u{85}\u{202e}");
    }
}
