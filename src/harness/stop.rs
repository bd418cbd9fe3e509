//! How a sweep stops: the error it stops with, the flight-recorder dumps
//! written on the way out (and, across processes, the wait for the run's
//! other dumps), the watchdog's actions, and the verdict that weighs what
//! the ranks reported against what the watchdog saw.

use super::plan::{Plan, Setup};
use super::POLL;
use crate::engine::exec::{ExecError, HostWorld};
use crate::launch::procs::LostProbe;
use crate::launch::Peers;
use crate::recorder::model::PeerLost;
use crate::recorder::watchdog::{self, Fired, Watchdog};
use crate::recorder::{dump, RankRecorder};
use crate::report::{Partial, StopReason};
use crate::units::Bytes;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("not enough memory: the sweep needs {need} ({} x {per_rank} of buffers, plus {extra} of connections) but may use {usable} (90% of the {free} of {limit}); {}", crate::units::count_of(*.ranks, "rank"), crate::engine::exec::world::memory_advice(.extra.0, .usable.0, *.group))]
    Memory {
        need: Bytes,
        per_rank: Bytes,
        ranks: usize,
        /// Connections (host FIFOs, device connections) and other overhead.
        extra: Bytes,
        free: Bytes,
        /// What the sweep may use of it (90%, less what `limit` says).
        usable: Bytes,
        /// Which limit refused it.
        limit: &'static str,
        /// The sweep's groups (what else may be lowered).
        group: crate::engine::exec::world::GroupShape,
    },
    #[error("nothing to run: {0}")]
    Empty(String),
    /// Settings the sweep cannot run with, found before anything runs.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error("{detail}{}", dumps_note(.dumps))]
    Hang {
        detail: String,
        dumps: Dumps,
        /// Rows the sweep did not make.
        missing_rows: usize,
    },
    #[error("rank {}'s process died ({}): the run stopped{}", .lost.rank, .lost.how, dumps_note(.dumps))]
    PeerLost {
        lost: PeerLost,
        dumps: Dumps,
        missing_rows: usize,
    },
    #[error("interrupted by {signal}; finished rows are kept ({missing_rows} not made){}", dumps_note(.dumps))]
    Interrupted {
        /// `SIGINT`, `SIGTERM`, `SIGHUP`, or `another process of the run`.
        signal: &'static str,
        dumps: Dumps,
        missing_rows: usize,
    },
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("writing results: {0}")]
    Sink(#[from] std::io::Error),
    #[error("encoding a report for rank 0: {0}")]
    Encode(serde_json::Error),
    /// Rank 0 of an MPI world could not collect every rank's reports.
    #[error("collecting the ranks' rows on rank 0: {0}")]
    Reports(String),
}

/// A hang that another process of the run found.
const REMOTE_HANG: &str = "hang detected by another process of the run";

/// The flight-recorder dumps a stopped run wrote, or why they could not be
/// written (in words, naming the folder).
pub type Dumps = Result<Vec<PathBuf>, String>;

/// The operation that ran past the timeout, as a hang's message names it:
/// `collective 4 (all-reduce)` of the world, `barrier 4` of another group.
fn timed_out_op(seq: u64, op: Option<(&str, &str)>) -> String {
    match op {
        Some((crate::recorder::WORLD_GROUP, "group")) => {
            format!("collective {seq} (a group of operations)")
        }
        Some((crate::recorder::WORLD_GROUP, coll)) => format!("collective {seq} ({coll})"),
        Some((group, coll)) if group == coll => format!("{coll} {seq}"),
        Some((group, coll)) => format!("{coll} {seq} (group {group})"),
        None => format!("operation {seq}"),
    }
}

fn dumps_note(dumps: &Dumps) -> String {
    let dumps = match dumps {
        Ok(d) => d,
        Err(why) => return format!("; {why}"),
    };
    match dumps.first().and_then(|p| p.parent()) {
        Some(dir) => format!(
            "; {} flight-recorder dump(s) in {} (see: collbench analyze {})",
            dumps.len(),
            dir.display(),
            dir.display()
        ),
        None => String::new(),
    }
}

/// [`dump::write_all`], its failure said in words naming `dir`.
fn write_dumps(
    dir: &std::path::Path,
    recs: &[Arc<RankRecorder>],
    info: &crate::recorder::dump::RunInfo,
    why: dump::Why,
    snapshot: Option<u32>,
) -> Dumps {
    dump::write_all(dir, recs, info, why, snapshot).map_err(|e| {
        let why = match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => "it is not a folder (replaced during the run?)".to_owned(),
            _ => e.to_string(),
        };
        format!(
            "the flight-recorder dumps could not be written to {}: {why}",
            dir.display()
        )
    })
}

impl HarnessError {
    /// A hang or timeout (exit code 3) rather than a usage or runtime
    /// error; a rank whose process died is one (its peers would wait on
    /// it to their timeout).
    pub fn is_hang(&self) -> bool {
        matches!(
            self,
            HarnessError::Hang { .. } | HarnessError::PeerLost { .. }
        )
    }

    /// The rank whose process died, when that stopped the run.
    pub fn lost_rank(&self) -> Option<usize> {
        match self {
            HarnessError::PeerLost { lost, .. } => Some(lost.rank),
            _ => None,
        }
    }

    /// A hang another process of the run found (which says it).
    pub fn is_remote_hang(&self) -> bool {
        matches!(self, HarnessError::Hang { detail, .. } if detail == REMOTE_HANG)
    }

    pub fn is_interrupt(&self) -> bool {
        matches!(self, HarnessError::Interrupted { .. })
    }

    /// What `meta.partial` says of a run that stopped with this error: a
    /// signal or a hang; `None` for every other error (the run failed).
    pub fn partial(&self) -> Option<Partial> {
        match self {
            HarnessError::Hang { missing_rows, .. }
            | HarnessError::PeerLost { missing_rows, .. } => Some(Partial {
                reason: StopReason::Hang,
                missing_rows: *missing_rows,
                in_case: None,
            }),
            HarnessError::Interrupted { missing_rows, .. } => Some(Partial {
                reason: StopReason::Signal,
                missing_rows: *missing_rows,
                in_case: None,
            }),
            _ => None,
        }
    }
}

/// Waits until the dump of each of `ranks` in run `run_id` exists in
/// `dir`, or `limit` passed, or a stop signal arrived while waiting (a
/// rank process that died never dumps: the user's next Ctrl-C ends the
/// wait). Returns those ranks' dumps there by then, every process's.
fn wait_for_dumps(
    dir: &std::path::Path,
    run_id: &str,
    ranks: &[usize],
    limit: Duration,
) -> Vec<PathBuf> {
    let start = Instant::now();
    let signals = watchdog::stop_signals();
    let there = || -> Vec<PathBuf> {
        ranks
            .iter()
            .map(|&r| dir.join(dump::file_name(run_id, r, None)))
            .filter(|p| p.exists())
            .collect()
    };
    while start.elapsed() < limit && watchdog::stop_signals() == signals {
        if there().len() == ranks.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    there()
}

/// How long a process waits for the run's other processes' dumps: they see
/// the trigger within a watchdog tick and dump once wound down (after a
/// signal, within a second; after a hang, by the watchdog's grace at the
/// latest), so a rank that never dumps (its process died) costs no more.
fn dumps_wait(signal: bool) -> Duration {
    if signal {
        SIGNAL_WIND_DOWN + Duration::from_secs(2)
    } else {
        watchdog::GRACE + Duration::from_secs(2)
    }
}

/// How long ranks get to stop after SIGINT/SIGTERM before the run ends
/// without waiting for them (a rank inside a long element loop or a check
/// of a large buffer sees the stop only when it is done): SIGTERM ends the
/// process within a second, with every finished row written.
pub(super) const SIGNAL_WIND_DOWN: Duration = Duration::from_millis(300);
/// How long a failed run of rank processes waits to hear whether a peer's
/// process died (its parent polls its children every 10 ms).
const LOST_NEWS: Duration = Duration::from_millis(300);

/// What a sweep's end is weighed with: the sweep, this process's
/// recorders, and the rows it did not make.
pub(super) struct Ending<'a> {
    pub plan: &'a Plan,
    pub setup: &'a Setup,
    pub recs: &'a [Arc<RankRecorder>],
    pub mpi: Option<&'a Arc<Peers>>,
    pub missing_rows: usize,
}

impl Ending<'_> {
    /// The sweep's result from what its ranks returned (`result`) and what
    /// the watchdog saw (`fired`): a signal wins, then a peer's death, then
    /// a hang; the error's dumps are written here.
    pub fn conclude(
        &self,
        result: Result<(), HarnessError>,
        fired: Option<Fired>,
        outcome: super::Outcome,
    ) -> Result<super::Outcome, HarnessError> {
        let probe = self.mpi.and_then(|m| m.lost_probe());
        let fired = heard_lost(&result, fired, probe.as_ref());
        let missing_rows = self.missing_rows;
        // A signal wins over whatever the interrupted ranks reported (an
        // aborted wait, a timeout while they wound down, a hang found since).
        let signal = watchdog::stop_signal().or_else(|| {
            (fired == Some(Fired::Stop)).then_some("a signal to another process of the run")
        });
        if let Some(signal) = signal {
            // A closed stdout in a run of one process leaves nothing to
            // diagnose: no dumps (the run's other processes would still look
            // for them, so a spread run writes them).
            let quiet = watchdog::stopped_for_closed_stdout() && self.setup.abort_trigger.is_none();
            return Err(HarnessError::Interrupted {
                signal,
                dumps: if quiet {
                    Ok(Vec::new())
                } else {
                    self.dump(dump::Why::new(watchdog::TRIGGER_SIGNAL), probe.as_ref())
                },
                missing_rows,
            });
        }
        // Across processes, several may time out on the one hang: the first
        // to say so says it, the others' is another's find.
        let hang = |detail: String| HarnessError::Hang {
            detail: if self.first_to_find() {
                detail
            } else {
                REMOTE_HANG.into()
            },
            dumps: self.dump(dump::Why::new("timeout"), probe.as_ref()),
            missing_rows,
        };
        let peer_lost = |lost: PeerLost| HarnessError::PeerLost {
            dumps: self.dump(dump::Why::lost(&lost), probe.as_ref()),
            lost,
            missing_rows,
        };
        match (result, fired) {
            // The ranks stopped because a peer died (their waits were
            // aborted, or timed out on it as the news came).
            (Err(_), Some(Fired::Lost(lost))) => Err(peer_lost(lost)),
            // Rows missing with no error seen (rank 0 stops collecting reports
            // when the world is aborted): the death stopped the run all the same.
            (Ok(()), Some(Fired::Lost(lost))) if missing_rows > 0 => Err(peer_lost(lost)),
            (Err(HarnessError::Exec(e)), _) if e.is_timeout() => {
                Err(hang(format!("hang detected: {e}")))
            }
            (_, Some(Fired::Timeout { rank, seq, waited, op })) => Err(hang(format!(
                "hang detected: rank {rank}'s {} ran {waited:?}, past the timeout",
                timed_out_op(seq, op)
            ))),
            (_, Some(Fired::Stalled { seq, waited })) => Err(hang(format!(
                "hang detected: every rank stopped outside collectives, before entering collective {seq}, for {waited:?} (no rank waits on a peer, so none timed out; stopped this long, twice the timeout, it is a hang)"
            ))),
            (_, Some(Fired::Remote)) => Err(hang(REMOTE_HANG.into())),
            (Ok(()), _) => Ok(outcome),
            (Err(e), _) => Err(e),
        }
    }

    /// Whether this process is the run's first to find a hang: alone, it
    /// is; across processes, the one that makes the marker beside the
    /// trigger (made before the trigger, so a process stopped by the
    /// trigger finds the marker there).
    fn first_to_find(&self) -> bool {
        let Some(t) = &self.setup.abort_trigger else {
            return true;
        };
        let _ = std::fs::create_dir_all(&self.setup.dump_dir);
        let marker = t.with_extension("found");
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
        {
            Ok(_) => true,
            Err(e) => e.kind() != std::io::ErrorKind::AlreadyExists,
        }
    }

    /// Writes this process's dumps. Across processes it first tells the
    /// run's other processes to stop and dump too (whole, so that none
    /// reads a signal as a hang), then waits for their dumps: a launcher
    /// ends the whole job when one process exits with an error.
    fn dump(&self, why: dump::Why, probe: Option<&LostProbe>) -> Dumps {
        let (setup, dir) = (self.setup, &self.setup.dump_dir);
        if let Some(t) = &setup.abort_trigger {
            let tmp = t.with_extension(format!("tmp{}", std::process::id()));
            let told = std::fs::create_dir_all(dir)
                .and_then(|_| std::fs::write(&tmp, why.reason))
                .and_then(|_| std::fs::rename(&tmp, t));
            if told.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        let written = write_dumps(dir, self.recs, &setup.run_info, why, None);
        if setup.abort_trigger.is_none() {
            return written;
        }
        // Leave only once every rank has dumped (or a while passed), and
        // count the run's dumps, not this process's. A rank whose process
        // died never dumps: the others' are all there is to wait for.
        let dead = why
            .lost
            .map(|l| l.rank)
            .or_else(|| probe.and_then(|p| p()).map(|(r, _)| r));
        let ranks: Vec<usize> = (0..self.plan.ranks).filter(|&r| dead != Some(r)).collect();
        let all = wait_for_dumps(
            dir,
            &setup.run_info.run_id,
            &ranks,
            dumps_wait(why.reason == watchdog::TRIGGER_SIGNAL),
        );
        written.map(|_| all)
    }
}

/// What the watchdog saw, with a peer's death heard late: a rank process
/// that died closes its connection before its parent sees it die, so a
/// wait in the launcher's barrier fails on the first a moment before the
/// watchdog hears of the second. A run that failed while a peer was dying
/// stopped because it died.
fn heard_lost(
    result: &Result<(), HarnessError>,
    fired: Option<Fired>,
    probe: Option<&LostProbe>,
) -> Option<Fired> {
    let Some(probe) = probe else {
        return fired;
    };
    match (result, fired) {
        (Err(_), f @ (None | Some(Fired::Remote | Fired::Timeout { .. }))) => {
            let until = Instant::now() + LOST_NEWS;
            let mut lost = probe();
            while lost.is_none() && Instant::now() < until {
                std::thread::sleep(POLL);
                lost = probe();
            }
            lost.map(|(rank, how)| Fired::Lost(PeerLost { rank, how }))
                .or(f)
        }
        (_, f) => f,
    }
}

/// Starts the watchdog over this process's ranks, with what it does when
/// it fires: abort the world, dump on request or when ranks are stuck.
pub(super) fn spawn_watchdog(
    plan: &Plan,
    setup: &Setup,
    world: &Arc<HostWorld>,
    recs: &[Arc<RankRecorder>],
    mpi: Option<&Arc<Peers>>,
) -> Result<Watchdog, HarnessError> {
    let (w, r, d, info, stuck, told) = (
        Arc::clone(world),
        recs.to_vec(),
        setup.dump_dir.clone(),
        setup.run_info.clone(),
        setup.on_stuck,
        setup.on_snapshot,
    );
    // SIGUSR1 snapshots are numbered: each goes to new files.
    let snapshots = AtomicU32::new(0);
    // The rank whose death stopped the run, for the dumps of a wind-down
    // that never ends.
    let lost = std::sync::Mutex::new(None::<PeerLost>);
    let act = move |f: &Fired| match f {
        Fired::Timeout { .. } | Fired::Stalled { .. } | Fired::Stop | Fired::Remote => w.abort(),
        Fired::Lost(l) => {
            if let Ok(mut g) = lost.lock() {
                *g = Some(l.clone());
            }
            w.abort();
        }
        Fired::Request => {
            let k = snapshots.fetch_add(1, Ordering::Relaxed) + 1;
            told(&write_dumps(
                &d,
                &r,
                &info,
                dump::Why::new("request"),
                Some(k),
            ));
        }
        Fired::Stuck { signal } => {
            // The ranks did not stop after the timeout, signal or lost
            // peer: dump and leave.
            let l = lost.lock().ok().and_then(|g| g.clone());
            let why = match (&l, *signal) {
                (_, true) => dump::Why::new(watchdog::TRIGGER_SIGNAL),
                (Some(l), false) => dump::Why::lost(l),
                (None, false) => dump::Why::new("timeout"),
            };
            stuck(&d, *signal, &write_dumps(&d, &r, &info, why, None));
        }
    };
    let remote = watchdog::Remote {
        trigger: setup.abort_trigger.clone(),
        lost: mpi.and_then(|m| m.lost_probe()).map(|probe| {
            Box::new(move || probe().map(|(rank, how)| PeerLost { rank, how }))
                as watchdog::LostProbe
        }),
    };
    Ok(Watchdog::spawn(
        recs.to_vec(),
        plan.timeout(),
        remote,
        Box::new(act),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hangs_operation_is_named_by_its_group() {
        let world = Some((crate::recorder::WORLD_GROUP, "all-reduce"));
        assert_eq!(timed_out_op(4, world), "collective 4 (all-reduce)");
        assert_eq!(timed_out_op(4, Some(("barrier", "barrier"))), "barrier 4");
        let group = Some((crate::recorder::WORLD_GROUP, "group"));
        assert_eq!(
            timed_out_op(5, group),
            "collective 5 (a group of operations)"
        );
        assert_eq!(
            timed_out_op(2, Some(("7", "broadcast"))),
            "broadcast 2 (group 7)"
        );
        assert_eq!(timed_out_op(9, None), "operation 9");
    }

    #[test]
    fn a_barrier_across_processes_does_not_count_who_arrived() {
        let e = crate::engine::exec::ExecError::BarrierTimeout {
            rank: 0,
            arrived: None,
            nranks: 3,
            waited: Duration::from_secs(3),
        };
        let said = e.to_string();
        assert!(!said.contains("0 of 3"), "{said}");
        assert!(said.contains("of 3 ranks across processes"), "{said}");
        let e = crate::engine::exec::ExecError::BarrierTimeout {
            rank: 0,
            arrived: Some(2),
            nranks: 3,
            waited: Duration::from_secs(3),
        };
        assert!(e.to_string().contains("where 2 of 3 ranks arrived"), "{e}");
    }
}
