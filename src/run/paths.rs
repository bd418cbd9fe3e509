//! Files a user named, checked before anything runs: no output that is
//! also an input, no two outputs on one path, no output that is a folder
//! or cannot be written, and a dump folder that can be made. Nothing is
//! created by the check (a probe file is removed at once).

use crate::units::{out_target, OutTarget};
use anyhow::bail;
use std::path::{Path, PathBuf};

/// A path as the file system will resolve it: its folder made absolute
/// (and canonical where it exists), its name kept.
fn resolved(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| p.to_path_buf(), |d| d.join(p))
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map_or_else(|_| abs.clone(), |d| d.join(name)),
        _ => abs,
    }
}

/// Whether `a` and `b` name one file: the same resolved path (themselves,
/// or where their links lead, which may not exist yet), or (through a
/// symbolic or hard link) the same file on the same device.
fn same_file(a: &Path, b: &Path) -> bool {
    use crate::units::output_end;
    use std::os::unix::fs::MetadataExt;
    if resolved(a) == resolved(b) || resolved(&output_end(a)) == resolved(&output_end(b)) {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether a file can be created in `dir` (tried with a probe file).
fn writable_dir(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".collbench-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        // The folder is there, yet a file in it is "not found": a
        // filesystem that takes no new files (/proc, /sys).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() => Err(
            std::io::Error::other("its filesystem takes no new files (as /proc and /sys)"),
        ),
        Err(e) => Err(e),
        Ok(_) => std::fs::remove_file(&probe),
    }
}

/// `--json FILE` also writes its rows, as they finish, to the JSONL beside
/// it (where its links lead): that output, flagged, and the JSON's path.
fn jsonl_of<'a>(outputs: &[(&str, &'a Path)]) -> Vec<(String, PathBuf, &'a Path)> {
    outputs
        .iter()
        .filter(|(f, p)| {
            *f == "--json" && p.as_os_str() != "-" && !crate::report::json::is_special(p)
        })
        .map(|&(_, p)| {
            let l = crate::report::json::jsonl_path(&crate::units::output_end(p));
            (format!("--json (its rows, {})", l.display()), l, p)
        })
        .collect()
}

/// What a file written beside a named output (never named itself) is,
/// told by its first bytes: such a file of an earlier run may be replaced,
/// anything else is the user's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beside {
    /// The JSONL of `--json` (its first line the schema and meta).
    Jsonl,
    /// The links heatmap of `--plot` (PNG or SVG, as the plot).
    Heatmap,
}

impl Beside {
    fn what(self) -> &'static str {
        match self {
            Beside::Jsonl => "its rows, as JSONL",
            Beside::Heatmap => "its links heatmap",
        }
    }

    /// Whether a file starting with `head` is one this output writes.
    fn holds(self, path: &Path, head: &[u8]) -> bool {
        let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
        if head.is_empty() {
            return true;
        }
        match self {
            Beside::Jsonl => head.starts_with(b"{") && has(b"\"collbench.results/"),
            Beside::Heatmap => {
                let svg = path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
                if svg {
                    has(b"<svg")
                } else {
                    head.starts_with(b"\x89PNG\r\n\x1a\n")
                }
            }
        }
    }
}

/// A file that `named` (`--json r.json`) writes beside it, at `beside`: where
/// something is there already, it must be what that output writes (an
/// earlier run's, replaced), not a file of the user's, nor a link to
/// nothing (written, it would make a file where the link leads).
pub fn check_beside(named: &str, beside: &Path, kind: Beside) -> anyhow::Result<()> {
    use std::io::Read;
    let Ok(link) = std::fs::symlink_metadata(beside) else {
        return Ok(());
    };
    let meta = match std::fs::metadata(beside) {
        Ok(m) => m,
        Err(_) if link.file_type().is_symlink() => bail!(
            "{named} also writes {}, a link to nothing ({}): remove the link, or name another file",
            beside.display(),
            std::fs::read_link(beside).map_or_else(|_| "?".into(), |t| t.display().to_string())
        ),
        Err(e) => bail!("{named} also writes {}: {e}", beside.display()),
    };
    if !meta.is_file() {
        // A folder is refused as any output's is; a device (`/dev/null`)
        // is written in place.
        return Ok(());
    }
    // A JSONL's first line (its meta) may be long: up to 1 MiB of it is
    // read; a heatmap's kind shows in its first bytes.
    let most = match kind {
        Beside::Jsonl => 1 << 20,
        Beside::Heatmap => 4096,
    };
    let mut head = Vec::with_capacity(4096);
    let read = std::fs::File::open(beside).and_then(|f| f.take(most).read_to_end(&mut head));
    if kind == Beside::Jsonl {
        if let Some(end) = head.iter().position(|&b| b == b'\n') {
            head.truncate(end);
        }
    }
    if let Err(e) = read {
        bail!(
            "{named} also writes {}: cannot read what is there: {e}",
            beside.display()
        );
    }
    if !kind.holds(beside, &head) {
        bail!(
            "{named} also writes {} ({}), which is there and holds something else: move it, or name another file",
            beside.display(),
            kind.what()
        );
    }
    Ok(())
}

/// Checks the outputs (`(flag, path)`) against each other and against the
/// inputs; `-` (stdout) is not a path.
pub fn check_outputs(outputs: &[(&str, &Path)], inputs: &[impl AsRef<Path>]) -> anyhow::Result<()> {
    check_all(outputs, inputs, true)
}

/// [`check_outputs`] of outputs that write the one file they name (no
/// rows beside a `--json`: `model`'s predictions).
pub fn check_lone_outputs(
    outputs: &[(&str, &Path)],
    inputs: &[impl AsRef<Path>],
) -> anyhow::Result<()> {
    check_all(outputs, inputs, false)
}

fn check_all(
    outputs: &[(&str, &Path)],
    inputs: &[impl AsRef<Path>],
    rows_beside: bool,
) -> anyhow::Result<()> {
    let jsonl = if rows_beside {
        jsonl_of(outputs)
    } else {
        Vec::new()
    };
    // `-`, `/dev/stdout` (or a link to it) all write to stdout.
    let dashes: Vec<(&str, &Path)> = outputs
        .iter()
        .copied()
        .filter(|(_, p)| crate::units::is_stdout(p))
        .collect();
    if let [(a, pa), (b, pb), ..] = dashes[..] {
        bail!(
            "{a} {} and {b} {} both write to stdout: give one of them a file",
            pa.display(),
            pb.display()
        );
    }
    let files: Vec<(&str, &Path)> = outputs
        .iter()
        .copied()
        .filter(|(_, p)| p.as_os_str() != "-")
        .chain(jsonl.iter().map(|(f, p, _)| (f.as_str(), p.as_path())))
        .collect();
    for (i, &(flag, path)) in files.iter().enumerate() {
        check_output(flag, path, inputs, &files[..i])?;
    }
    for (_, rows, json) in &jsonl {
        check_beside(&format!("--json {}", json.display()), rows, Beside::Jsonl)?;
    }
    Ok(())
}

/// One output of [`check_outputs`]: none of `inputs`, none of the
/// `earlier` outputs, a file (or a descriptor, device or FIFO written in
/// place) in a folder that exists and takes writes.
fn check_output(
    flag: &str,
    path: &Path,
    inputs: &[impl AsRef<Path>],
    earlier: &[(&str, &Path)],
) -> anyhow::Result<()> {
    let r = resolved(path);
    check_distinct(flag, path, inputs, earlier)?;
    if path.is_dir() {
        bail!("{flag} {}: is a folder; name a file", path.display());
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        bail!(
            "{flag} {}: a name ending in / is a folder's; name a file",
            path.display()
        );
    }
    if let Some(n) = path
        .file_name()
        .filter(|n| n.len() > crate::units::NAME_MAX)
    {
        bail!(
            "{flag} {}: its name has {} bytes, past the {} a file name may have",
            path.display(),
            n.len(),
            crate::units::NAME_MAX
        );
    }
    let target = match out_target(path) {
        OutTarget::Fd(fd) => {
            // A descriptor (`/dev/stdout`): written through, in place.
            if let Some(Err(e)) = crate::units::open_in_place(path) {
                bail!(
                    "{flag} {}: cannot write descriptor {fd}: {e}",
                    path.display()
                );
            }
            return Ok(());
        }
        OutTarget::Special(p) => p,
        OutTarget::File(target) => target,
    };
    if target.as_path() != path && target.is_dir() {
        bail!(
            "{flag} {}: links to the folder {}; name a file",
            path.display(),
            target.display()
        );
    }
    if crate::report::json::is_special(&target) {
        return special_writable(flag, path, &target);
    }
    // Where the file will be: at the end of its links.
    let r = if target.as_path() == path {
        r
    } else {
        resolved(&target)
    };
    let dir = r
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    check_folder(flag, path, &dir)?;
    if path.exists() {
        if let Err(e) = std::fs::OpenOptions::new().append(true).open(path) {
            bail!("{flag} {}: cannot write it: {e}", path.display());
        }
    }
    Ok(())
}

/// An output that is none of `inputs` and none of the `earlier` outputs.
fn check_distinct(
    flag: &str,
    path: &Path,
    inputs: &[impl AsRef<Path>],
    earlier: &[(&str, &Path)],
) -> anyhow::Result<()> {
    if let Some(input) = inputs
        .iter()
        .map(AsRef::as_ref)
        .find(|i| same_file(i, path))
    {
        bail!(
            "{flag} {}: that is an input of this command ({}); write the output elsewhere",
            path.display(),
            input.display()
        );
    }
    // A results file's rows beside it (`r.jsonl` of `r.json`) are its
    // twin: what a reader of the results falls back on.
    if let Some(input) = inputs.iter().map(AsRef::as_ref).find(|i| {
        i.extension().is_some_and(|e| e == "json")
            && same_file(&crate::report::json::jsonl_path(i), path)
    }) {
        bail!(
            "{flag} {}: that is the rows (JSONL) of an input of this command ({}); write the output elsewhere",
            path.display(),
            input.display()
        );
    }
    if let Some((other, _)) = earlier.iter().find(|(_, q)| same_file(q, path)) {
        bail!(
            "{other} and {flag} both write {}: give each its own file",
            path.display()
        );
    }
    Ok(())
}

/// The folder an output goes in: there, a folder, and taking writes.
fn check_folder(flag: &str, path: &Path, dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        // The nearest part of the path that is there, when it is not a folder.
        let file = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir());
        if let Some(f) = file {
            bail!(
                "{flag} {}: {} is a file, not a folder",
                path.display(),
                f.display()
            );
        }
        bail!(
            "{flag} {}: the folder {} does not exist",
            path.display(),
            dir.display()
        );
    }
    if let Err(e) = writable_dir(dir) {
        bail!(
            "{flag} {}: cannot write in {}: {e}",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// A device or FIFO output (`/dev/null`), written in place: it opens for
/// writing without waiting (a FIFO nobody reads would block the open past
/// every signal), and what it opened is kept for the write (closed, a
/// FIFO's reader would see the end of its data).
fn special_writable(flag: &str, path: &Path, target: &Path) -> anyhow::Result<()> {
    match crate::units::check_special(target) {
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => bail!(
            "{flag} {}: a FIFO no process reads: start its reader first",
            path.display()
        ),
        Err(e) => bail!("{flag} {}: cannot write it: {e}", path.display()),
        Ok(()) => Ok(()),
    }
}

/// Checks that the dump folder exists and is writable, or that its nearest
/// existing ancestor is (it is made when a dump is written), and that it
/// is none of the `outputs` (a hang would make the folder where the
/// results were to go).
pub fn check_dump_dir(dir: &Path, outputs: &[(&str, &Path)]) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("--dump-dir {}: is a file, not a folder", dir.display());
    }
    // The JSONL beside `--json` is an output too; and a folder inside an
    // output's path would make that output a folder.
    let jsonl = jsonl_of(outputs);
    let all = outputs
        .iter()
        .copied()
        .chain(jsonl.iter().map(|(f, p, _)| (f.as_str(), p.as_path())));
    let at = resolved(dir);
    for (flag, p) in all.filter(|(_, p)| !crate::units::is_stdout(p)) {
        if same_file(p, dir) {
            bail!(
                "--dump-dir {} is also {flag}: give the dumps their own folder",
                dir.display()
            );
        }
        let end = resolved(&crate::units::output_end(p));
        if at.starts_with(&end) || at.starts_with(resolved(p)) {
            bail!(
                "--dump-dir {} is inside {flag} {}, a file: give the dumps their own folder",
                dir.display(),
                p.display()
            );
        }
    }
    let mut at = resolved(dir);
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p.to_path_buf(),
            None => break,
        }
    }
    if let Err(e) = writable_dir(&at) {
        bail!(
            "--dump-dir {}: cannot write in {}: {e}",
            dir.display(),
            at.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_collide_or_cannot_be_written_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.json");
        std::fs::write(&a, "{}").unwrap();
        let csv = d.path().join("a.csv");
        let e = check_outputs(&[("--csv", &a)], &[&a])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an input"), "{e}");
        let e = check_outputs(&[("--json", &csv), ("--csv", &csv)], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both write"), "{e}");
        let e = check_outputs(&[("--json", d.path())], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a folder"), "{e}");
        let missing = d.path().join("no/such/x.json");
        let e = check_outputs(&[("--json", &missing)], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        // A file where a folder of the path should be is named as such.
        let under_a_file = a.join("x.json");
        let e = check_outputs(&[("--json", &under_a_file)], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(&format!("{} is a file, not a folder", a.display())),
            "{e}"
        );
        assert!(check_outputs(&[("--json", &csv), ("--json", Path::new("-"))], &[&a]).is_ok());
        // The check leaves nothing behind.
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
        assert!(check_dump_dir(&d.path().join("new/dumps"), &[]).is_ok());
        assert!(check_dump_dir(&a, &[]).is_err());
        let e = check_dump_dir(&csv, &[("--csv", &csv)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is also --csv"), "{e}");
    }

    /// An output reached through a symbolic or a hard link to an input is
    /// that input, and refused; so are two outputs that are one file.
    #[test]
    fn outputs_through_links_to_inputs_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("results/run1.json");
        std::fs::create_dir(d.path().join("results")).unwrap();
        std::fs::write(&a, "{}").unwrap();
        let soft = d.path().join("latest.json");
        std::os::unix::fs::symlink(&a, &soft).unwrap();
        let hard = d.path().join("hard.csv");
        std::fs::hard_link(&a, &hard).unwrap();
        // The input by its link, the output by its own name; and the other
        // way round.
        for (output, input) in [(&a, &soft), (&hard, &a), (&soft, &a)] {
            let e = check_outputs(&[("--csv", output.as_path())], &[input])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is an input of this command"), "{e}");
        }
        let e = check_outputs(&[("--csv", &hard), ("--plot", &soft)], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both write"), "{e}");
        let other = d.path().join("other.csv");
        assert!(check_outputs(&[("--csv", &other)], &[&soft]).is_ok());
    }

    /// A FIFO nobody reads is refused at once (its open would block past
    /// every signal); one with a reader is written.
    #[test]
    fn a_fifo_without_a_reader_is_refused_without_waiting() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("f.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = check_outputs(&[("--json", &fifo)], &[] as &[&Path])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a FIFO no process reads"), "{e}");
        use std::os::unix::fs::OpenOptionsExt;
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        assert!(check_outputs(&[("--json", &fifo)], &[] as &[&Path]).is_ok());
    }
}
