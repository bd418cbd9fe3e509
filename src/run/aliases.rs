//! `collbench install-aliases DIR`: links named as nccl-tests' binaries to
//! this collbench, so a pipeline switches by changing one path.

use super::{fail, OK};
use crate::cli::aliases::BINARIES;
use crate::cli::InstallArgs;
use anyhow::{bail, Context};
use std::path::Path;

/// Whether `link` is already a link to `exe` (`exe` canonical): where it
/// leads, however its text spells the way (`../bin/collbench`, a link to
/// a link).
fn links_to(link: &Path, exe: &Path) -> bool {
    std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink())
        && link.canonicalize().is_ok_and(|t| t == exe)
}

fn install(a: &InstallArgs) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot tell where this collbench is")?;
    if a.dir.exists() && !a.dir.is_dir() {
        bail!("{}: is a file, not a folder", a.dir.display());
    }
    if !a.dir.exists() {
        if let Ok(to) = std::fs::read_link(&a.dir) {
            bail!(
                "{}: a link to nothing ({}); make that folder, or name another",
                a.dir.display(),
                to.display()
            );
        }
    }
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("{}: cannot make the folder", a.dir.display()))?;
    // Refuse before changing anything: no half-made set of links.
    for (name, _) in BINARIES {
        let link = a.dir.join(name);
        let meta = std::fs::symlink_metadata(&link);
        if meta.as_ref().is_ok_and(|m| m.is_dir()) {
            bail!(
                "{} is a folder; move it (--force replaces files and links, never folders)",
                link.display()
            );
        }
        let taken = meta.is_ok() && !links_to(&link, &exe);
        if taken && !a.force {
            bail!(
                "{} exists and is not a link to this collbench; move it, or replace it with --force",
                link.display()
            );
        }
    }
    let mut made = Vec::new();
    for (name, coll) in BINARIES {
        let link = a.dir.join(name);
        if links_to(&link, &exe) {
            continue;
        }
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link)
                .with_context(|| format!("{}: cannot replace it", link.display()))?;
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("{}: cannot make the link", link.display()))?;
        made.push(format!("{} -> {} ({coll})", link.display(), exe.display()));
    }
    Ok(made)
}

pub fn install_aliases(a: &InstallArgs) -> i32 {
    match install(a) {
        Ok(made) => {
            for m in &made {
                out!("{m}");
            }
            if made.is_empty() {
                out!("{}: every link is already in place", a.dir.display());
            }
            OK
        }
        Err(e) => fail(super::one_line(&e)),
    }
}
