//! The run's world beyond its flags: its id and dump folder, the harness's
//! setup, and what ranks that are processes agree on before the sweep (a
//! refusal, the sizes memory allows, the dump folder, who runs where).

use super::*;

/// This run's id: when it started and which process started it.
pub(super) fn run_id() -> String {
    format!("{}-{}", rfc3339_now().replace(':', ""), std::process::id())
}

/// Where a run's dumps go: the user's folder, else a new one named by the
/// run's id under ./collbench-dumps (the one policy for every command), or,
/// where that cannot be made (a file by that name, a folder that takes no
/// writes), under `collbench-dumps-UID` of the temporary folder, this
/// user's own: a hang's dumps are not lost to the default place (the
/// hang's message names where they went).
pub(super) fn dump_dir(plan: &Plan, run_id: &str) -> PathBuf {
    if let Some(d) = &plan.dump_dir {
        return d.clone();
    }
    let here = Path::new("collbench-dumps");
    if writable_here(here) {
        return here.join(run_id);
    }
    mine_in_tmp()
        .unwrap_or_else(|| here.to_path_buf())
        .join(run_id)
}

/// Whether `dir` is a folder this process writes in, or can be made in the
/// current folder (asked of the system: nothing is made).
fn writable_here(dir: &Path) -> bool {
    let at = match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => dir,
        Ok(_) => return false,
        Err(_) => Path::new("."),
    };
    let Ok(c) = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// This user's dump folder in the temporary folder, where it is free to be
/// (absent, or a folder of this user's; never a link another user planted).
fn mine_in_tmp() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let p = std::env::temp_dir().join(format!("collbench-dumps-{uid}"));
    match std::fs::symlink_metadata(&p) {
        Err(_) => Some(p),
        Ok(m) if m.is_dir() && m.uid() == uid => Some(p),
        Ok(_) => None,
    }
}

/// Where a run's dumps go, as every process of the run agrees (rank 0's).
pub(super) struct DumpPlace {
    /// The run's id: in every dump and in its file name.
    run_id: String,
    dir: PathBuf,
    /// Under MPI, the file whose appearance stops every process.
    trigger: Option<PathBuf>,
}

/// The run's id, the dump folder and, under MPI, the abort trigger every
/// rank agrees on (rank 0's).
pub(super) fn agree_dump_dir(plan: &Plan, mpi: Option<&Peers>) -> anyhow::Result<DumpPlace> {
    let id = run_id();
    let mine = dump_dir(plan, &id);
    let Some(m) = mpi else {
        return Ok(DumpPlace {
            run_id: id,
            dir: mine,
            trigger: None,
        });
    };
    // The trigger's name is unique to this run, so a stale one is never seen.
    let token = format!(
        "{id}\n{}\n.collbench-abort-{}-{}",
        mine.display(),
        crate::recorder::wall_ns(),
        std::process::id()
    );
    let chosen = String::from_utf8_lossy(&m.broadcast(token.as_bytes())?).into_owned();
    let mut parts = chosen.splitn(3, '\n');
    let (Some(id), Some(dir), Some(trigger)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("bad dump folder from rank 0");
    };
    Ok(DumpPlace {
        run_id: id.into(),
        dir: dir.into(),
        trigger: Some(Path::new(dir).join(trigger)),
    })
}

/// What the harness needs beyond the plan, decided once.
pub(super) fn setup(
    plan: &Plan,
    chosen: &Chosen,
    meta: &Meta,
    mpi: Option<&Peers>,
) -> anyhow::Result<Setup> {
    let DumpPlace {
        run_id,
        dir: dump_dir,
        trigger: abort_trigger,
    } = agree_dump_dir(plan, mpi)?;
    Ok(Setup {
        gpu: chosen.gpu,
        timing: chosen.timing,
        graph: chosen.graph,
        dump_dir,
        abort_trigger,
        run_info: crate::recorder::dump::RunInfo {
            run_id,
            host: meta.host.clone(),
            world_size: meta.world_size,
            device: meta.device.clone(),
            command: meta.command.clone(),
            version: meta.version.clone(),
        },
        on_stuck: stuck,
        on_snapshot: snapshot_written,
    })
}

/// The ranks did not stop after a hang (`signal`: after SIGINT/SIGTERM):
/// the dumps are written, and the process leaves with the exit code of
/// what stopped it.
pub(super) fn stuck(dir: &Path, signal: bool, written: &harness::Dumps) {
    let (what, code) = if signal {
        ("interrupted by a signal", INTERRUPTED)
    } else {
        ("hang detected", HANG)
    };
    progress::suspend(|| match written {
        Ok(_) => say!(
            "collbench: {what} and the run did not stop; dumps in {}",
            dir.display()
        ),
        Err(why) => say!("collbench: {what} and the run did not stop; {why}"),
    });
    // Not `exit`: the libraries' exit handlers (the CUDA runtime's inside
    // NCCL, MPI's) may wait on the very kernel or request that hung. Rows
    // already printed went out whole (stdout is flushed at each line), and
    // the CSV's finished rows take its name.
    crate::units::commit_pending();
    // SAFETY: ends the process at once; nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// A SIGUSR1 snapshot was written (the run goes on): where each file is,
/// or why there is none.
pub(super) fn snapshot_written(written: &harness::Dumps) {
    progress::suspend(|| match written {
        Ok(paths) => {
            for p in paths {
                say!(
                    "collbench: flight-recorder snapshot written: {}",
                    p.display()
                );
            }
        }
        Err(why) => say!("collbench: warning: SIGUSR1 snapshot not written: {why}"),
    });
}

/// Refuses more thread ranks than this machine runs (not under MPI, where
/// each process is one rank).
pub(super) fn check_thread_ranks(plan: &Plan, mpi: Option<&Peers>) -> anyhow::Result<()> {
    let max = crate::launch::max_thread_ranks();
    if mpi.is_none() && plan.ranks > max {
        bail!(
            "{} ranks (--ranks, or -t x -g): this host runs at most {max} thread ranks (32 per core); use more nodes with MPI",
            plan.ranks
        );
    }
    Ok(())
}

/// Joins the MPI world when launched into one; refuses a launcher's tasks
/// in a build that cannot join.
/// Settings for ranks that are processes, given to thread ranks of one
/// process: COLLBENCH_FORCE_RELAY=1 is refused (it would test nothing), and
/// COLLBENCH_GPU_MAP (the flag is refused before) and --allow-shared-gpu
/// are noted as unused rather than silently dropped.
pub(crate) fn thread_rank_settings(s: &mut Sweep) -> anyhow::Result<()> {
    if crate::launch::force_relay_setting()? {
        bail!("COLLBENCH_FORCE_RELAY=1 tests the relay between nodes, which is MPI point-to-point: run under mpirun (thread ranks of one process never use it)");
    }
    if s.plan.gpu_map.take().is_some() {
        s.notes.push("COLLBENCH_GPU_MAP: it places ranks that are processes (mpirun, srun, --procs); thread ranks of one process go round-robin over the GPUs, so it is unused".into());
    }
    if std::mem::take(&mut s.plan.allow_shared_gpu) {
        s.notes.push("--allow-shared-gpu: thread ranks of one process share a GPU without it (as virtual ranks); it is for ranks that are processes, so it is unused".into());
    }
    Ok(())
}

pub(super) fn join_world() -> anyhow::Result<Option<Peers>> {
    let mpi = Peers::join()?;
    if mpi.is_none() {
        if let Some((launcher, n)) = crate::launch::foreign_launcher() {
            bail!(
                "started by {launcher} as one of {n} tasks, but this build has no MPI support: each task would \
                 run its own independent world and print a misleading table. Rebuild with \
                 `cargo build --release --features mpi`, or run one task with --ranks N"
            );
        }
    }
    Ok(mpi)
}

/// The process's exit code, with the closing message for people.
/// Every rank of a world of processes learns whether every rank can run
/// the sweep (its cases, their memory on its node), so that all go on or
/// all refuse together: one rank refusing alone would leave the others
/// waiting on it. A refusal is said once, by rank 0 (`Err`: the words),
/// however many ranks found it; the ranks that refused are named when not
/// all did (a node short of memory among others).
pub(super) fn agree_prepared(
    m: &Peers,
    plan: &Plan,
    mine: Result<harness::Prepared, harness::HarnessError>,
) -> anyhow::Result<Result<harness::Prepared, String>> {
    use harness::HarnessError;
    // "kind\nwords" of a refusal; for a rank that can run, its sweep's
    // fingerprint (one line).
    let said = match &mine {
        Ok(p) => sweep_print(plan, &p.cases),
        Err(e) => {
            let kind = match e {
                HarnessError::Memory { .. } => "memory",
                HarnessError::Empty(_) => "empty",
                _ => "other",
            };
            format!("{kind}\n{e}")
        }
    };
    let all = m
        .all_gather(said.as_bytes())
        .context("agreeing on the sweep with the other ranks")?;
    Ok(match refusals(&all).or_else(|| unlike_sweeps(&all)) {
        None => mine.map_err(|e| e.to_string()),
        Some(words) => Err(words),
    })
}

/// What every rank must run alike, as one line: the number of cases, and a
/// hash of them with what decides which operations the ranks issue, how
/// they move the data, and the data they check: placements, iterations,
/// the group's mix, channels, protocol, graph, link timing, the host
/// engine's slots, `--slot-size` as given (a GPU's default slot is not the
/// host's), and the seed. (The world's size is the same on every rank by
/// then.)
pub(crate) fn sweep_print(plan: &Plan, cases: &[harness::plan::Case]) -> String {
    let h = &plan.host;
    let what = format!(
        "{cases:?}|{:?}|{} {} {}|{:?}|{} {:?} {:?}|{} {:?}|{} {} {:?} {}|{}",
        plan.placements,
        plan.iters,
        plan.warmup,
        plan.check_iters,
        plan.group_mix,
        plan.channels,
        plan.protocol,
        plan.graph,
        h.link_timing,
        plan.links_from,
        h.slots,
        h.slot_bytes,
        plan.slot_bytes,
        h.direct_min_bytes,
        plan.seed,
    );
    let hash = crate::engine::exec::cuda::kernels::Fnv1a::new()
        .write(what.as_bytes())
        .finish();
    format!("{} {hash:016x}", cases.len())
}

/// Where ranks that can all run planned different sweeps (started with
/// other arguments, or another collbench): what they planned, said once.
/// Run anyway, they would wait on collectives the others never call, or
/// check data by another seed. `None` when every rank planned the same.
pub(super) fn unlike_sweeps(all: &[Vec<u8>]) -> Option<String> {
    let prints: Vec<String> = all
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let first = prints.first()?;
    let unlike: Vec<usize> = (0..prints.len()).filter(|&r| prints[r] != *first).collect();
    if unlike.is_empty() {
        return None;
    }
    let cases = |p: &str| p.split(' ').next().unwrap_or("?").to_string();
    let theirs = if unlike.iter().all(|&r| cases(&prints[r]) == cases(first)) {
        format!("as many cases ({}), but not the same", cases(first))
    } else {
        // Ranks by their count of cases, in a few words however many.
        let mut counts: Vec<(String, Vec<usize>)> = Vec::new();
        for &r in &unlike {
            let n = cases(&prints[r]);
            match counts.iter_mut().find(|(c, _)| *c == n) {
                Some((_, ranks)) => ranks.push(r),
                None => counts.push((n, vec![r])),
            }
        }
        let counts: Vec<String> = counts
            .iter()
            .map(|(n, ranks)| format!("{n} on {}", crate::units::ranks_text(ranks)))
            .collect();
        format!("{} case(s) on rank 0; {}", cases(first), counts.join("; "))
    };
    Some(format!(
        "{} of {} planned another sweep than rank 0 ({theirs}): start every rank with the same arguments and the same collbench build",
        crate::units::ranks_text(&unlike),
        all.len()
    ))
}

/// What every rank said of the sweep ("kind\nwords" of a refusal; a rank
/// that can run gives its sweep's fingerprint, one line), as one message: each kind of refusal once, in
/// the words of the lowest rank that made it, naming the ranks that made
/// it when not all did; `None` when every rank can run.
pub(super) fn refusals(all: &[Vec<u8>]) -> Option<String> {
    let mut kinds: Vec<(String, String, Vec<usize>)> = Vec::new();
    for (r, b) in all.iter().enumerate() {
        let text = String::from_utf8_lossy(b);
        let Some((kind, words)) = text.split_once('\n') else {
            continue;
        };
        match kinds.iter_mut().find(|(k, _, _)| k == kind) {
            Some((_, _, ranks)) => ranks.push(r),
            None => kinds.push((kind.to_string(), words.to_string(), vec![r])),
        }
    }
    if kinds.is_empty() {
        return None;
    }
    let lines: Vec<String> = kinds
        .into_iter()
        .map(|(_, words, ranks)| {
            if ranks.len() == all.len() {
                words
            } else {
                format!(
                    "{} of {}: {words}",
                    crate::units::ranks_text(&ranks),
                    all.len()
                )
            }
        })
        .collect();
    Some(lines.join("\ncollbench: error: "))
}

/// The fewest sizes any rank of the world keeps (`mine`: this rank's), a
/// collective every rank calls.
pub(super) fn fewest_sizes(m: &Peers, mine: usize) -> anyhow::Result<usize> {
    let all = m
        .all_gather(mine.to_string().as_bytes())
        .context("agreeing on the sizes with the other ranks")?;
    Ok(all
        .iter()
        .filter_map(|b| String::from_utf8_lossy(b).parse::<usize>().ok())
        .fold(mine, usize::min))
}

/// Every rank's process id and host, by rank (a collective: every rank
/// calls it).
pub(super) fn processes(m: &Peers, host: &str) -> anyhow::Result<Vec<crate::report::Process>> {
    let mine = format!("{} {host}", std::process::id());
    let all = m
        .all_gather(mine.as_bytes())
        .context("gathering the ranks' process ids")?;
    Ok(all
        .iter()
        .map(|b| {
            let text = String::from_utf8_lossy(b);
            let (pid, host) = text.split_once(' ').unwrap_or(("0", "unknown"));
            crate::report::Process {
                pid: pid.parse().unwrap_or(0),
                host: host.to_string(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranks_that_planned_another_sweep_are_named() {
        let p = |s: &str| s.as_bytes().to_vec();
        let same = [p("4 00aa"), p("4 00aa"), p("4 00aa")];
        assert_eq!(super::unlike_sweeps(&same), None);
        let more = [
            p("4 00aa"),
            p("8 00bb"),
            p("8 00bb"),
            p("4 00aa"),
            p("2 00cc"),
        ];
        assert_eq!(
            super::unlike_sweeps(&more).as_deref(),
            Some(
                "ranks 1, 2, 4 of 5 planned another sweep than rank 0 (4 case(s) on rank 0; \
                 8 on ranks 1, 2; 2 on rank 4): start every rank with the same arguments and \
                 the same collbench build"
            )
        );
        let other = [p("4 00aa"), p("4 00ab")];
        let said = super::unlike_sweeps(&other).unwrap_or_default();
        assert!(
            said.starts_with("rank 1 of 2 planned another sweep than rank 0 (as many cases (4), but not the same)"),
            "{said}"
        );
    }

    #[test]
    fn a_refusal_is_said_once_naming_the_ranks_when_not_all() {
        let ok = Vec::new;
        let mem = |gib: u32| format!("memory\nnot enough memory: {gib} GiB free").into_bytes();
        assert_eq!(super::refusals(&[ok(), ok(), ok()]), None);
        // Every rank refused alike: the lowest rank's words, once.
        assert_eq!(
            super::refusals(&[mem(23), mem(22), mem(23)]).as_deref(),
            Some("not enough memory: 23 GiB free")
        );
        // A node short of memory among others, and another kind of refusal.
        assert_eq!(
            super::refusals(&[ok(), ok(), mem(3), mem(4), b"empty\nnothing to run".to_vec()]).as_deref(),
            Some(
                "ranks 2, 3 of 5: not enough memory: 3 GiB free\ncollbench: error: rank 4 of 5: nothing to run"
            )
        );
    }
}
