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
//! - PyTorch dumps name no run, process or command; their records do:
//!   two dumps of one rank come from different processes when they hold the
//!   same operation (group, seq) created at different times. Such dumps make
//!   different runs; each rank's process joins the run, lacking that rank,
//!   whose operations' time span is nearest its own (oldest process first).
//!
//! Two dumps of the same rank in the same run (a snapshot and the final
//! dump, the same file copied, or PyTorch's pickle and JSON forms) keep the
//! later state (a final dump over a snapshot, then the newer), else the
//! first read; the other is listed as ignored. Runs that would read alike
//! are numbered (`#2`).

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
    /// What tells it from runs that would read alike (`#2`), empty otherwise.
    suffix: String,
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
            suffix: String::new(),
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
            keep_one(&mut self.dumps[i], dump, ignored);
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
        let mut label = self.plain_label();
        label.push_str(&self.suffix);
        label
    }

    fn plain_label(&self) -> String {
        if let Some(id) = &self.run_id {
            return format!("{} run {id}", self.kind);
        }
        let mut label = format!("{} run", self.kind);
        if self.kind == "pytorch" {
            if let Some((first, _)) = span(&self.dumps) {
                let secs = i64::try_from(first / 1_000_000_000).unwrap_or(i64::MAX);
                label.push_str(&format!(" from {}", crate::units::utc_text(secs)));
            }
        }
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

/// Keeps one of two dumps of a rank of one run in `kept`, listing the other
/// in `ignored`: the later state (see [`later`]), else the first read.
fn keep_one(kept: &mut RankDump, dump: RankDump, ignored: &mut Vec<Duplicate>) {
    let (dropped, why) = if later(&dump, kept) {
        (std::mem::replace(kept, dump), "a later")
    } else {
        (dump, "another")
    };
    ignored.push(Duplicate {
        path: dropped.path.display().to_string(),
        reason: format!(
            "{why} dump of rank {} of the same run was read instead, from {}",
            dropped.rank,
            kept.path.display()
        ),
    });
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
    // Each class's place in `classes` (thousands of runs in one folder).
    let mut at: std::collections::HashMap<ClassKey, usize> = std::collections::HashMap::new();
    for dump in dumps {
        let key = class_key(&dump);
        match at.get(&key) {
            Some(&i) => classes[i].1.push(dump),
            None => {
                at.insert(key.clone(), classes.len());
                classes.push((key, vec![dump]));
            }
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
    let mut runs: Vec<Run> = runs.into_iter().map(|(_, r)| r).collect();
    number_alike(&mut runs);
    (runs, ignored)
}

/// Gives runs whose labels would be equal a `#2`, `#3`, ... (the first keeps
/// its plain label), so that every label names one run.
fn number_alike(runs: &mut [Run]) {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for run in runs.iter_mut() {
        let before = seen.entry(run.plain_label()).or_default();
        if *before > 0 {
            run.suffix = format!(" #{}", *before + 1);
        }
        *before += 1;
    }
}

/// The earliest and latest creation times of the dumps' records, where any is known.
fn span(dumps: &[RankDump]) -> Option<(u64, u64)> {
    let times = dumps
        .iter()
        .flat_map(|d| &d.records)
        .filter_map(|r| r.t_scheduled_ns);
    times.fold(None, |acc, t| match acc {
        None => Some((t, t)),
        Some((lo, hi)) => Some((lo.min(t), hi.max(t))),
    })
}

/// An operation of a dump: (group, seq, point-to-point seq).
type OpKey = (String, u64, Option<u64>);

/// When a dump's operations were created, by operation.
fn times_of(d: &RankDump) -> BTreeMap<OpKey, Vec<u64>> {
    let mut map: BTreeMap<OpKey, Vec<u64>> = BTreeMap::new();
    for r in &d.records {
        if let Some(t) = r.t_scheduled_ns {
            map.entry((r.pg.clone(), r.seq, r.p2p_seq))
                .or_default()
                .push(t);
        }
    }
    map
}

/// Whether two dumps of one rank come from different processes: they hold
/// the same operation (group, seq, point-to-point seq) created at times
/// none of which the other has. A key may hold several records in one
/// dump (a coalesced batch, point-to-point records without their own
/// seq), so the times are compared as sets. Without such evidence (no
/// shared operation: a ring buffer that wrapped between them, or no times)
/// they are taken as one process.
/// (Their operation times, [`times_of`].)
fn differ(ta: &BTreeMap<OpKey, Vec<u64>>, tb: &BTreeMap<OpKey, Vec<u64>>) -> bool {
    ta.iter().any(|(k, xs)| {
        tb.get(k)
            .is_some_and(|ys| !xs.iter().any(|x| ys.contains(x)))
    })
}

/// PyTorch dumps into runs: dumps of one process (same rank, no conflicting
/// operation) keep one; then each process, oldest first, joins the run
/// lacking its rank whose time span is nearest its own, or starts a run.
fn split_pytorch(list: Vec<RankDump>, ignored: &mut Vec<Duplicate>) -> Vec<Run> {
    // Each process's operation times, made once (not once a comparison).
    let mut processes: Vec<(RankDump, BTreeMap<OpKey, Vec<u64>>)> = Vec::new();
    for dump in list {
        let times = times_of(&dump);
        match processes
            .iter_mut()
            .find(|(p, pt)| p.rank == dump.rank && !differ(pt, &times))
        {
            Some((kept, kept_times)) => {
                keep_one(kept, dump, ignored);
                *kept_times = times_of(kept);
            }
            None => processes.push((dump, times)),
        }
    }
    let mut processes: Vec<RankDump> = processes.into_iter().map(|(p, _)| p).collect();
    // Oldest first; a dump without times after the others, in the order read.
    processes.sort_by_key(|p| span(std::slice::from_ref(p)).map_or(u64::MAX, |(lo, _)| lo));
    // Each run with its time span, kept as processes join.
    let mut runs: Vec<(Run, Option<(u64, u64)>)> = Vec::new();
    for process in processes {
        let own = span(std::slice::from_ref(&process));
        let gap = |run_span: Option<(u64, u64)>| match (own, run_span) {
            (Some((lo, hi)), Some((rlo, rhi))) => {
                lo.saturating_sub(rhi).max(rlo.saturating_sub(hi))
            }
            _ => 0,
        };
        let nearest = runs
            .iter_mut()
            .filter(|(r, _)| r.has_rank(process.rank).is_none())
            .min_by_key(|(_, s)| gap(*s));
        match nearest {
            Some((run, run_span)) => {
                // A rank the run lacks: it joins, and the run's span
                // widens by its own (not counted again over every dump:
                // that was quadratic in the ranks).
                run.add(process, ignored);
                *run_span = match (*run_span, own) {
                    (Some((lo, hi)), Some((l, h))) => Some((lo.min(l), hi.max(h))),
                    (s, o) => s.or(o),
                };
            }
            None => {
                let mut run = Run::new("pytorch", &process);
                run.add(process, ignored);
                runs.push((run, own));
            }
        }
    }
    runs.into_iter().map(|(r, _)| r).collect()
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    if *key == ClassKey::Pytorch {
        return split_pytorch(list, ignored);
    }
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
            status: BTreeMap::new(),
            reason: Some("exit".into()),
            group_descs: BTreeMap::new(),
            origin: Origin {
                run_id: None,
                pid: Some(pid),
                host: Some("h".into()),
                command: Some("collbench all-reduce".into()),
                dumped_at_ns: Some(at),
                lost: None,
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

    /// A PyTorch dump of `rank` whose seqs `seqs` were created at `t0 + seq`.
    fn torch(rank: usize, seqs: std::ops::RangeInclusive<u64>, t0: u64) -> RankDump {
        let mut d = dump(rank, 2, 0, 0);
        d.format = Format::PytorchJson;
        d.origin = Origin::default();
        d.reason = None;
        d.path = PathBuf::from(format!("t{t0}/rank{rank}"));
        d.records = seqs
            .map(|s| {
                let mut r = crate::analyze::model::Record::new(
                    "0",
                    s,
                    "all_reduce",
                    crate::analyze::model::State::Completed,
                );
                r.t_scheduled_ns = Some(t0 + s);
                r
            })
            .collect();
        d
    }

    /// A PyTorch dump of `rank` with no operations.
    fn untimed(rank: usize) -> RankDump {
        let mut d = torch(rank, 1..=1, 0);
        d.records.clear();
        d
    }

    #[test]
    fn pytorch_dumps_split_by_process_then_by_time() {
        // Two runs of 2 ranks, read interleaved; the later run's rank 1 dumped twice
        // (its buffer wrapped between the two dumps: no shared operation).
        let dumps = vec![
            torch(0, 1..=5, 9_000),
            torch(0, 1..=5, 1_000),
            torch(1, 1..=4, 1_001),
            torch(1, 1..=5, 9_001),
            torch(1, 7..=9, 9_001),
        ];
        let (runs, ignored) = split(dumps);
        assert_eq!(runs.len(), 2, "{runs:?}");
        let starts: Vec<u64> = runs.iter().map(|r| span(&r.dumps).unwrap().0).collect();
        assert_eq!(starts, vec![1_001, 9_001]);
        assert_eq!(ranks(&runs[0]), vec![0, 1]);
        assert_eq!(runs[0].dumps[1].records.len(), 4);
        assert_eq!(ignored.len(), 1, "{ignored:?}");
        assert_ne!(runs[0].label(), runs[1].label());
        // Dumps without times: one process each rank, labels numbered if alike.
        let (runs, ignored) = split(vec![untimed(0), untimed(0)]);
        assert_eq!((runs.len(), ignored.len()), (1, 1));
        assert_eq!(runs[0].label(), "pytorch run (world of 2)");
        // A coalesced batch: records sharing a key, created at different
        // times, in both forms of one process's dump: one process.
        let mut batch = torch(0, 1..=3, 500);
        let mut second = batch.records[2].clone();
        second.t_scheduled_ns = Some(777);
        batch.records.push(second);
        let copy = batch.clone();
        let (runs, ignored) = split(vec![batch, copy]);
        assert_eq!((runs.len(), ignored.len()), (1, 1));
        let d = untimed(0);
        let mut alike = vec![Run::new("pytorch", &d), Run::new("pytorch", &d)];
        number_alike(&mut alike);
        assert_eq!(
            (alike[0].label(), alike[1].label()),
            ("pytorch run".to_owned(), "pytorch run #2".to_owned())
        );
    }
}
