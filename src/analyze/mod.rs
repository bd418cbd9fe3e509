//! Loading flight-recorder dumps (collbench's, PyTorch's) and diagnosing hangs.
//!
//! Needs no CUDA, MPI, engine or CLI: only the files. Formats are told apart
//! by content: collbench's `collbench.fr/1` JSON, PyTorch's flight-recorder
//! JSON (`_dump_fr_trace_json`) and pickle (`_dump_fr_trace`, read by a
//! data-only pickle reader that never executes anything).
//!
//! # Using it
//!
//! ```no_run
//! use std::path::PathBuf;
//! use collbench::analyze::{analyze_paths, render_text};
//!
//! let paths = vec![PathBuf::from("dumps/")]; // files or directories
//! match analyze_paths(&paths) {
//!     Ok(diagnosis) => {
//!         // `--json`: the `collbench.diagnosis/1` document
//!         println!("{}", serde_json::to_string_pretty(&diagnosis).unwrap());
//!         // otherwise, for people
//!         print!("{}", render_text(&diagnosis));
//!         std::process::exit(diagnosis.exit_code()); // 0 healthy, 1 problem
//!     }
//!     Err(e) => {
//!         eprintln!("collbench analyze: {e}"); // lists every file and why
//!         std::process::exit(e.exit_code()); // 2: nothing readable at all
//!     }
//! }
//! ```
//!
//! A directory is read with its subdirectories one level down, every regular
//! file considered. Files that are not readable dumps (empty, truncated, over
//! [`Limits::max_file_bytes`], another kind of file) are listed in
//! [`Diagnosis::unreadable`] and the analysis goes on with the others. A
//! PyTorch dump takes its rank from the number its file name ends with
//! (`nccl_trace_rank_3`, `rank3.json`). For finer control: [`load_paths`]
//! then [`diagnose`], and [`analyze_paths_with`] for other [`Limits`].
//!
//! What each finding kind means, and how they are ordered, is documented in
//! [`diagnose`](diagnose/index.html), [`progress`](progress/index.html) and
//! [`consistency`](consistency/index.html).

use std::path::PathBuf;

pub mod candidate;
pub mod consistency;
pub mod diagnose;
pub mod diagnosis;
pub mod group;
pub mod json_tree;
pub mod load;
mod missing;
pub mod model;
pub mod p2p;
pub mod pickle;
mod pickle_codes;
pub mod progress;
pub mod pytorch;
pub mod render;
pub mod runs;
pub mod value;

pub use diagnose::diagnose;
pub use diagnosis::{
    Diagnosis, Finding, FindingKind, GroupProgress, RankSummary, RunDiagnosis, Verdict, Waiting,
    DIAGNOSIS_SCHEMA,
};
pub use load::{
    load_bytes, load_file, load_paths, load_paths_observed, LoadError, Loaded, Unreadable,
};
pub use model::{Format, Origin, RankDump, Record};
pub use pickle::{Limits, PickleError};
pub use render::render_text;
pub use runs::Run;
pub use value::Value;

/// Why there is no diagnosis at all.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("no paths given: name dump files or directories holding them")]
    NoPaths,
    #[error("no dump files found in {}", paths_text(.0))]
    NoFiles(Vec<PathBuf>),
    #[error("none of the files is a readable flight-recorder dump:{}", unreadable_text(.0))]
    NothingReadable(Vec<Unreadable>),
}

impl AnalyzeError {
    /// The exit code `collbench analyze` uses for it.
    pub fn exit_code(&self) -> i32 {
        2
    }
}

fn paths_text(paths: &[PathBuf]) -> String {
    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    list.join(", ")
}

fn unreadable_text(list: &[Unreadable]) -> String {
    list.iter()
        .map(|u| format!("\n  {}: {}", u.path, u.reason))
        .collect()
}

/// Loads every dump under `paths` and diagnoses them, with default [`Limits`].
pub fn analyze_paths(paths: &[PathBuf]) -> Result<Diagnosis, AnalyzeError> {
    analyze_paths_with(paths, &Limits::default())
}

/// [`analyze_paths`] with explicit caps on file size, nesting and element count.
pub fn analyze_paths_with(paths: &[PathBuf], limits: &Limits) -> Result<Diagnosis, AnalyzeError> {
    analyze_paths_observed(paths, limits, &mut |_, _, _| {})
}

/// [`analyze_paths_with`], telling `on_file(index, total, path)` before
/// each file is read.
pub fn analyze_paths_observed(
    paths: &[PathBuf],
    limits: &Limits,
    on_file: &mut dyn FnMut(usize, usize, &std::path::Path),
) -> Result<Diagnosis, AnalyzeError> {
    if paths.is_empty() {
        return Err(AnalyzeError::NoPaths);
    }
    let loaded = load_paths_observed(paths, limits, on_file);
    if loaded.runs.is_empty() {
        if loaded.unreadable.is_empty() {
            return Err(AnalyzeError::NoFiles(paths.to_vec()));
        }
        return Err(AnalyzeError::NothingReadable(loaded.unreadable));
    }
    Ok(diagnose(&loaded))
}
