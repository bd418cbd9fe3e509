//! `collbench report`: re-renders saved results (text in any `--format`,
//! CSV, plots); several files are shown one after another and overlaid on
//! one plot, each series named by its file. An nccl-tests log is read as
//! results too, each of its runs shown as one results file would be.

use super::{fail, CHECK_FAILED, OK};
use crate::cli::ReportArgs;
use crate::report::csv::CsvSink;
use crate::report::json::read_any;
use crate::report::layout::{nccl_tests_placements, render, Format};
use crate::report::plot::{self, Source};
use crate::report::{warn, Results, Sink};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Each file's label in an overlaid plot: its name without extension, with
/// as many of its folders before it as make the labels differ
/// (`a/r` and `b/r` for two `r.json`); with its extension where only that
/// tells them apart (`r.json` and `r.jsonl`).
fn labels(paths: &[&Path]) -> Vec<String> {
    // The same file named twice keeps its one label.
    let files = paths
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    labels_with(paths, false, files)
        .unwrap_or_else(|longest| labels_with(paths, true, files).unwrap_or(longest))
}

/// The shortest labels of `paths` (their last name, `extension` kept or
/// not, with folders before it) that count `files` distinct ones; Err: the
/// longest, which do not.
fn labels_with(paths: &[&Path], extension: bool, files: usize) -> Result<Vec<String>, Vec<String>> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|p| {
            let mut v: Vec<String> = p
                .parent()
                .into_iter()
                .flat_map(|d| d.components())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .filter(|c| c != "/" && c != ".")
                .collect();
            let last = if extension {
                p.file_name()
            } else {
                p.file_stem()
            };
            v.push(last.map_or_else(
                || p.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            ));
            v
        })
        .collect();
    let longest = parts.iter().map(Vec::len).max().unwrap_or(1);
    let tail = |v: &Vec<String>, k: usize| v[v.len().saturating_sub(k)..].join("/");
    let labels_at = |k: usize| parts.iter().map(|v| tail(v, k)).collect::<Vec<String>>();
    let distinct =
        |l: &[String]| l.iter().collect::<std::collections::BTreeSet<_>>().len() == files;
    (1..=longest)
        .map(labels_at)
        .find(|l| distinct(l))
        .ok_or_else(|| labels_at(longest))
}

/// One file's rows as a sweep writes them; several files' with a `source`
/// column naming each row's file.
fn write_csv(path: &Path, files: &[(String, Results)]) -> anyhow::Result<()> {
    let at = || format!("--csv {}", path.display());
    // `-`: the CSV is stdout (the text then went to stderr).
    if crate::units::is_stdout(path) {
        return csv_of(std::io::stdout().lock(), files).with_context(at);
    }
    let mut file = crate::units::create_output(path).with_context(at)?;
    csv_of(&mut file, files).with_context(at)?;
    file.commit().with_context(at)
}

/// The CSV of `files` written to `out`.
fn csv_of(out: impl Write, files: &[(String, Results)]) -> std::io::Result<()> {
    if let [(_, only)] = files {
        let mut sink = CsvSink::new(out)?;
        for r in &only.rows {
            sink.row(r)?;
        }
        return Ok(());
    }
    crate::report::csv::write_sources(
        out,
        files.iter().map(|(name, r)| (name.as_str(), &r.rows[..])),
    )
}

fn print_text(a: &ReportArgs, format: Format, files: &[(String, Results)]) -> std::io::Result<()> {
    let mut text = String::new();
    for (i, (name, r)) in files.iter().enumerate() {
        if files.len() > 1 {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&format.heading(name));
            text.push('\n');
        }
        text.push_str(&render(format, r, a.out.verbose > 0));
        // The link matrix and its verdict, as the sweep printed them
        // (`--links`, `collbench links`); nccl-tests' text has none.
        if let (Some(l), false) = (&r.links, format == Format::NcclTests) {
            text.push_str(&crate::report::links::render(l, r.meta.world_size));
            for c in &r.case_links {
                text.push_str(&crate::report::links::render_case(c));
            }
        }
    }
    // `--csv -` makes stdout the data's: the text for people goes to stderr.
    // A closed stdout (a pipe into `head`) is not an error worth dying for;
    // a full disk is.
    if a.out.csv.as_deref().is_some_and(crate::units::is_stdout) {
        super::emit_output(&mut std::io::stderr().lock(), &text)
    } else {
        super::emit_output(&mut std::io::stdout().lock(), &text)
    }
}

pub fn report(a: &ReportArgs) -> i32 {
    let format: Format = a
        .out
        .format
        .unwrap_or(crate::cli::FormatChoice::Table)
        .into();
    let outputs: Vec<(&str, &Path)> = [("--csv", &a.out.csv), ("--plot", &a.out.plot)]
        .into_iter()
        .filter_map(|(f, p)| p.as_deref().map(|p| (f, p)))
        .collect();
    if let Err(e) = super::paths::check_outputs(&outputs, &a.files) {
        return fail(e);
    }
    let (files, labels) = match read_files(&a.files) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    // One run's link matrix is drawn beside `--plot`: that file is checked
    // too, before anything is written.
    if let (Some(h), Some(p)) = (heatmap(a.out.plot.as_deref(), &files), &a.out.plot) {
        let mut all = outputs.clone();
        all.push(("--plot (its links heatmap)", &h));
        let named = format!("--plot {}", p.display());
        let checked = super::paths::check_outputs(&all, &a.files)
            .and_then(|()| super::paths::check_beside(&named, &h, super::paths::Beside::Heatmap));
        if let Err(e) = checked {
            return fail(e);
        }
    }
    if format == Format::NcclTests && !a.out.quiet {
        if let Err(e) = both_placements(&files) {
            return fail(e);
        }
    }
    if !a.out.quiet {
        if let Err(e) = print_text(a, format, &files) {
            return fail(format!("writing the text: {e}"));
        }
    }
    for (name, r) in &files {
        for w in warn::scan(&r.rows) {
            say!("collbench: warning: {name}: {w}");
        }
        // -v: what the run (or the reading of a log) noted, such as a
        // collective guessed from an older log's layout.
        if a.out.verbose > 0 {
            for n in &r.meta.notes {
                say!("collbench: note: {name}: {n}");
            }
        }
    }
    if let Err(e) = write_outputs(a, &files, &labels) {
        return fail(e);
    }
    exit_code(&files)
}

/// Every run of every file, each named (a file of several runs names the
/// run) and labelled for a plot's legend.
#[allow(clippy::type_complexity)] // the runs and their labels, in one order
fn read_files(paths: &[PathBuf]) -> Result<(Vec<(String, Results)>, Vec<String>), String> {
    let mut files = Vec::new();
    let mut labels = Vec::new();
    let file_labels = self::labels(&paths.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    for (path, file_label) in paths.iter().zip(&file_labels) {
        let runs = read_any(path).map_err(|e| e.to_string())?;
        let n = runs.len();
        for (i, r) in runs.into_iter().enumerate() {
            let name = if n > 1 {
                format!(
                    "{} (run {} of {n}: {})",
                    path.display(),
                    i + 1,
                    r.meta.command
                )
            } else {
                path.display().to_string()
            };
            files.push((name, r));
            labels.push(if n > 1 {
                format!("{file_label} (run {})", i + 1)
            } else {
                file_label.clone()
            });
        }
    }
    Ok((files, labels))
}

/// `--format nccl-tests`: every run with rows has both placements
/// (nccl-tests' text has both on every line, never a dash).
fn both_placements(files: &[(String, Results)]) -> Result<(), String> {
    if let Some((name, only)) = files.iter().find_map(|(name, r)| {
        // A run without rows (a log's run that failed before its
        // first) has no placement to lack; one stopped in its first
        // case has its dashes, as its sweep printed them.
        let p = nccl_tests_placements(r);
        (p.len() < 2 && !r.rows.is_empty()).then(|| (name, p.join(", ")))
    }) {
        return Err(format!(
            "{name}: --format nccl-tests needs out-of-place and in-place rows, and this file has only {}; use --format table",
            if only.is_empty() { "none".into() } else { only }
        ));
    }
    Ok(())
}

/// `--csv` and `--plot` (the runs overlaid, each labelled, when several).
fn write_outputs(
    a: &ReportArgs,
    files: &[(String, Results)],
    labels: &[String],
) -> Result<(), String> {
    if let Some(p) = &a.out.csv {
        if let Err(e) = write_csv(p, files) {
            // A closed stdout (`--csv - | head`) ends the CSV, as it ends
            // the text: not an error worth failing the rest for.
            let closed = crate::units::is_stdout(p)
                && e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                });
            if !closed {
                return Err(super::one_line(&e));
            }
        }
    }
    if let Some(p) = &a.out.plot {
        let overlay = files.len() > 1;
        let sources: Vec<Source<'_>> = labels
            .iter()
            .zip(files)
            .map(|(l, (_, results))| Source {
                label: overlay.then(|| l.clone()),
                results,
            })
            .collect();
        if let Err(e) = plot::write(p, &sources) {
            return Err(e.to_string());
        }
        // One run's link matrix beside its plot, as the sweep draws it.
        if let (Some(path), [(_, r)]) = (heatmap(Some(p), files), files) {
            if let Some(l) = &r.links {
                super::links::draw_heatmap(l, r.meta.world_size, &path)?;
            }
        }
    }
    Ok(())
}

/// Where `--plot` draws the links heatmap of `files`: beside it, when
/// they are one run with a link matrix.
fn heatmap(plot: Option<&Path>, files: &[(String, Results)]) -> Option<PathBuf> {
    match files {
        [(_, r)] if r.links.is_some() => plot.map(super::links::heatmap_path),
        _ => None,
    }
}

/// The exit code the runs call for, each run that failed said once.
fn exit_code(files: &[(String, Results)]) -> i32 {
    // Rows with wrong values fail as the sweep that made them did (exit 1),
    // so a script rendering saved results or a log still sees them; so
    // does a run that did not finish (interrupted, hung, cut short).
    let mut code = OK;
    for (name, r) in files {
        if let Some(p) = &r.meta.partial {
            say!("collbench: {name}: the run did not finish ({p})");
            code = CHECK_FAILED;
        }
        if let Some(why) = r.log_failed() {
            say!("collbench: {name}: {why}");
            code = CHECK_FAILED;
        }
        // A slow link or rank the run found fails it, as it failed the run.
        if let Some(l) = r.links.as_ref().filter(|l| !l.findings.is_empty()) {
            say!(
                "collbench: {name}: {} slow link(s) or rank(s) found (see the link matrix)",
                l.findings.len()
            );
            code = CHECK_FAILED;
        }
        // A group's operations are in its row: counted once, as shown.
        let shown = || r.rows.iter().filter(|row| row.group_member.is_none());
        let bad: Vec<&crate::report::Row> = shown().filter(|row| row.is_bad()).collect();
        if let Some(first) = bad.first() {
            say!(
                "collbench: {name}: {} of {} rows hold wrong or NaN/Inf values (first: {})",
                bad.len(),
                shown().count(),
                warn::describe(first)
            );
            code = CHECK_FAILED;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files of one name in two folders are told apart by their folders;
    /// distinct names keep just their stems.
    #[test]
    fn overlay_labels_are_distinct() {
        let l = labels(&[Path::new("runs/a/r.json"), Path::new("runs/b/r.json")]);
        assert_eq!(l, ["a/r", "b/r"]);
        let l = labels(&[Path::new("/x/base.json"), Path::new("cand.log")]);
        assert_eq!(l, ["base", "cand"]);
        let l = labels(&[Path::new("o/r.json"), Path::new("o/r.jsonl")]);
        assert_eq!(l, ["r.json", "r.jsonl"]);
        let l = labels(&[Path::new("r.json"), Path::new("r.json")]);
        assert_eq!(l, ["r", "r"]);
    }
}
