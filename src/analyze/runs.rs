//! Telling runs apart: a folder may hold the dumps of several runs (a
//! `--dump-dir` shared by concurrent runs, or reused with fewer ranks), and
//! each run is diagnosed on its own.
//!
//! A run is keyed by its kind (collbench or PyTorch), then:
//!
//! - collbench dumps with a `run_id`: that id;
//! - collbench dumps without one: the command and world size, then the
//!   process: a process that wrote the dumps of several ranks (threads as
//!   ranks) is one run; dumps written by processes of one dump each (a
//!   multi-process run) are pooled, oldest dump first, into as few runs as
//!   keep each rank once;
//! - PyTorch dumps: all one run (they name no run, process or command).
//!
//! Two dumps of the same rank in the same run (a snapshot and the final
//! dump, the same file copied, or PyTorch's pickle and JSON forms) keep the
//! later state (a final dump over a snapshot, then the newer), else the
//! first read; the other is listed as ignored.

use std::collections::BTreeMap;

use super::model::{Format, RankDump};

/// A dump left out: the run has a dump of its rank already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub path: String,
    /// Why, in words.
    pub reason: String,
}

/// The dumps of one run, by rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// `collbench` or `pytorch`.
    pub kind: &'static str,
    pub run_id: Option<String>,
    /// The process, when every dump of the run comes from one.
    pub pid: Option<u32>,
    /// The host, when every dump of the run comes from one.
    pub host: Option<String>,
    pub command: Option<String>,
    /// One per rank, by rank.
    pub dumps: Vec<RankDump>,
}

impl Run {
    fn new(kind: &'static str, first: &RankDump) -> Run {
        Run {
            kind,
            run_id: first.origin.run_id.clone(),
            pid: first.origin.pid,
            host: first.origin.host.clone(),
            command: first.origin.command.clone(),
            dumps: Vec::new(),
        }
    }

    fn has_rank(&self, rank: usize) -> Option<&RankDump> {
        self.dumps.iter().find(|d| d.rank == rank)
    }

    /// Adds `dump`, or lists one of two dumps of a rank in `ignored`: the
    /// rank's latest state wins (a dump written as the run ended or hung
    /// over a snapshot taken on request, then the newer), else the first
    /// read.
    fn add(&mut self, dump: RankDump, ignored: &mut Vec<Duplicate>) {
        if let Some(i) = self.dumps.iter().position(|d| d.rank == dump.rank) {
            let (kept, dropped, why) = if later(&dump, &self.dumps[i]) {
                let old = std::mem::replace(&mut self.dumps[i], dump);
                (self.dumps[i].path.clone(), old, "a later")
            } else {
                (self.dumps[i].path.clone(), dump, "another")
            };
            ignored.push(Duplicate {
                path: dropped.path.display().to_string(),
                reason: format!(
                    "{why} dump of rank {} of the same run was read instead, from {}",
                    dropped.rank,
                    kept.display()
                ),
            });
            return;
        }
        if self.pid != dump.origin.pid {
            self.pid = None;
        }
        if self.host != dump.origin.host {
            self.host = None;
        }
        self.dumps.push(dump);
    }

    /// How a person and the findings' `run` field name it.
    pub fn label(&self) -> String {
        if let Some(id) = &self.run_id {
            return format!("{} run {id}", self.kind);
        }
        let mut label = format!("{} run", self.kind);
        if let Some(pid) = self.pid {
            label.push_str(&format!(" pid {pid}"));
        }
        if let Some(command) = &self.command {
            label.push_str(&format!(" `{command}`"));
        }
        let world = self.dumps.iter().filter_map(|d| d.world_size).max();
        if let Some(n) = world {
            label.push_str(&format!(" (world of {n})"));
        }
        label
    }
}

/// Whether `new` shows a later state of its rank than `old`: a final dump
/// (timeout, signal, exit) over a snapshot taken on request, then the one
/// taken later; without times, not.
fn later(new: &RankDump, old: &RankDump) -> bool {
    let snapshot = |d: &RankDump| d.reason.as_deref() == Some("request");
    match (snapshot(new), snapshot(old)) {
        (false, true) => true,
        (true, false) => false,
        _ => matches!(
            (new.origin.dumped_at_ns, old.origin.dumped_at_ns),
            (Some(n), Some(o)) if n > o
        ),
    }
}

/// Splits `dumps` (in the order read) into runs; returns them, ordered by
/// their first dump read, and the duplicates left out.
pub fn split(dumps: Vec<RankDump>) -> (Vec<Run>, Vec<Duplicate>) {
    let mut ignored = Vec::new();
    // Class: what must be equal for two dumps to be of one run, whatever their process.
    let mut classes: Vec<(ClassKey, Vec<RankDump>)> = Vec::new();
    for dump in dumps {
        let key = class_key(&dump);
        match classes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(dump),
            None => classes.push((key, vec![dump])),
        }
    }
    let mut runs: Vec<(usize, Run)> = Vec::new();
    let mut order = 0usize;
    for (key, list) in classes {
        for run in split_class(&key, list, &mut ignored) {
            runs.push((order, run));
            order += 1;
        }
    }
    for (_, run) in &mut runs {
        run.dumps.sort_by_key(|d| d.rank);
    }
    runs.sort_by_key(|(i, _)| *i);
    (runs.into_iter().map(|(_, r)| r).collect(), ignored)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ClassKey {
    Pytorch,
    /// Collbench, with an id.
    Id(String),
    /// Collbench without an id: command and world size.
    Shape(Option<String>, Option<usize>),
}

fn class_key(d: &RankDump) -> ClassKey {
    match (d.format, &d.origin.run_id) {
        (Format::PytorchJson | Format::PytorchPickle, _) => ClassKey::Pytorch,
        (Format::Collbench, Some(id)) => ClassKey::Id(id.clone()),
        (Format::Collbench, None) => ClassKey::Shape(d.origin.command.clone(), d.world_size),
    }
}

/// A process: its host and id.
type Process = (Option<String>, Option<u32>);

fn split_class(key: &ClassKey, list: Vec<RankDump>, ignored: &mut Vec<Duplicate>) -> Vec<Run> {
    let kind = match key {
        ClassKey::Pytorch => "pytorch",
        _ => "collbench",
    };
    if !matches!(key, ClassKey::Shape(..)) {
        let mut run: Option<Run> = None;
        for dump in list {
            run.get_or_insert_with(|| Run::new(kind, &dump))
                .add(dump, ignored);
        }
        return run.into_iter().collect();
    }
    // Without an id: a process that wrote several ranks is a run of its own.
    let process = |d: &RankDump| -> Process { (d.origin.host.clone(), d.origin.pid) };
    let mut per_process: BTreeMap<Process, usize> = BTreeMap::new();
    for d in &list {
        *per_process.entry(process(d)).or_default() += 1;
    }
    let mut by_process: Vec<(Process, Run)> = Vec::new();
    let mut pooled: Vec<RankDump> = Vec::new();
    let mut runs_order: Vec<Run> = Vec::new();
    for dump in list {
        let p = process(&dump);
        if per_process.get(&p).copied().unwrap_or(0) > 1 {
            match by_process.iter_mut().find(|(k, _)| *k == p) {
                Some((_, run)) => run.add(dump, ignored),
                None => {
                    let mut run = Run::new(kind, &dump);
                    run.add(dump, ignored);
                    by_process.push((p, run));
                }
            }
        } else {
            pooled.push(dump);
        }
    }
    runs_order.extend(by_process.into_iter().map(|(_, r)| r));
    // One dump per process: a multi-process run, or several; oldest first,
    // each dump joins the first run that lacks its rank.
    pooled.sort_by_key(|d| d.origin.dumped_at_ns.unwrap_or(0));
    let mut pool_runs: Vec<Run> = Vec::new();
    for dump in pooled {
        match pool_runs
            .iter_mut()
            .find(|r| r.has_rank(dump.rank).is_none())
        {
            Some(run) => run.add(dump, ignored),
            None => {
                let mut run = Run::new(kind, &dump);
                run.add(dump, ignored);
                pool_runs.push(run);
            }
        }
    }
    runs_order.extend(pool_runs);
    runs_order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::model::Origin;
    use std::path::PathBuf;

    fn dump(rank: usize, world: usize, pid: u32, at: u64) -> RankDump {
        RankDump {
            path: PathBuf::from(format!("d{pid}/rank{rank}.json")),
            format: Format::Collbench,
            rank,
            world_size: Some(world),
            groups: BTreeMap::new(),
            records: Vec::new(),
            wrapped: false,
            reason: Some("exit".into()),
            group_descs: BTreeMap::new(),
            origin: Origin {
                run_id: None,
                pid: Some(pid),
                host: Some("h".into()),
                command: Some("collbench all-reduce".into()),
                dumped_at_ns: Some(at),
            },
        }
    }

    fn ranks(run: &Run) -> Vec<usize> {
        run.dumps.iter().map(|d| d.rank).collect()
    }

    #[test]
    fn one_process_per_run_when_processes_hold_several_ranks() {
        let dumps = vec![
            dump(0, 2, 7, 1),
            dump(1, 2, 7, 1),
            dump(0, 2, 9, 2),
            dump(1, 2, 9, 2),
        ];
        let (runs, ignored) = split(dumps);
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].pid, ranks(&runs[0])), (Some(7), vec![0, 1]));
        assert_eq!((runs[1].pid, ranks(&runs[1])), (Some(9), vec![0, 1]));
        assert!(ignored.is_empty());
    }

    #[test]
    fn a_multi_process_run_stays_one_run() {
        let dumps = (0..4).map(|r| dump(r, 4, 100 + r as u32, 5)).collect();
        let (runs, _) = split(dumps);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].pid, ranks(&runs[0])), (None, vec![0, 1, 2, 3]));
        // Two of them in one pool: each rank once per run.
        let mut two: Vec<RankDump> = (0..2).map(|r| dump(r, 2, 10 + r as u32, 1)).collect();
        two.extend((0..2).map(|r| dump(r, 2, 20 + r as u32, 9)));
        let (runs, _) = split(two);
        assert_eq!(runs.len(), 2);
        assert!(runs[0].dumps.iter().all(|d| d.origin.pid < Some(20)));
    }

    #[test]
    fn ids_world_sizes_and_duplicates() {
        let mut a = dump(0, 2, 7, 1);
        a.origin.run_id = Some("A".into());
        let mut b = dump(1, 2, 8, 1);
        b.origin.run_id = Some("A".into());
        let old = dump(3, 4, 5, 0);
        let copy = dump(3, 4, 5, 0);
        let (runs, ignored) = split(vec![a, b, old, copy]);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            (runs[0].run_id.as_deref(), ranks(&runs[0])),
            (Some("A"), vec![0, 1])
        );
        assert_eq!(runs[0].label(), "collbench run A");
        assert_eq!(ranks(&runs[1]), vec![3]);
        assert_eq!(ignored.len(), 1, "{ignored:?}");
    }

    /// A SIGUSR1 snapshot and the timeout dump of one rank of one run: the
    /// final dump is diagnosed, whichever was read first.
    #[test]
    fn a_rank_s_latest_state_wins_over_a_snapshot() {
        for snapshot_first in [true, false] {
            let mut snap = dump(1, 2, 7, 5);
            snap.reason = Some("request".into());
            snap.path = PathBuf::from("d7/rank1-request1.json");
            let mut last = dump(1, 2, 7, 1);
            last.reason = Some("timeout".into());
            let both = if snapshot_first {
                vec![dump(0, 2, 7, 1), snap, last]
            } else {
                vec![dump(0, 2, 7, 1), last, snap]
            };
            let (runs, ignored) = split(both);
            assert_eq!(runs.len(), 1);
            let kept = runs[0].dumps.iter().find(|d| d.rank == 1).unwrap();
            assert_eq!(kept.reason.as_deref(), Some("timeout"));
            assert_eq!(ignored.len(), 1);
            assert!(ignored[0].path.ends_with("request1.json"), "{ignored:?}");
        }
        // Two final dumps: the newer.
        let (older, newer) = (dump(0, 1, 7, 1), dump(0, 1, 7, 2));
        let (runs, _) = split(vec![newer.clone(), older]);
        assert_eq!(runs[0].dumps[0].origin.dumped_at_ns, Some(2));
    }
}
