//! Cross-rank diagnosis: every process group is checked (consistency,
//! progress, timing), missing dumps are accounted for, and the findings are
//! ordered so the first is the root cause the evidence points to most
//! directly:
//!
//! 1. `op-mismatch`, `size-mismatch`, `dtype-mismatch` (ranks disagree on
//!    what they run: everything after follows from it);
//! 2. `not-joined` (ranks wait in a collective others never entered);
//! 3. `missing-dump` of a rank that ranks with dumps are blocked on;
//! 4. `stuck` where the channel waits or completions name a culprit;
//! 5. `late`;
//! 6. `stuck` with no culprit in sight;
//! 7. `missing-dump` of a rank nothing is seen waiting for;
//! 8. only when nothing else is found and a dump was written on a timeout:
//!    `not-joined` of the collective after the ranks' newest, every rank
//!    having stopped outside collectives.
//!
//! The top-level culprits are the ranks the first finding blames.
//!
//! Dumps written while a run was moving (collbench's `signal`, `request`,
//! `exit`; none `timeout`) show collectives in flight that are no hang: there
//! `not-joined` and `stuck` are only reported for a group where an operation
//! had been pending, when its rank was dumped, for longer than
//! [`progress::stalled`] allows (a hung run interrupted by hand); otherwise
//! the diagnosis says in its notes that the dumps are a snapshot.
//!
//! Each run ([`runs`](super::runs)) is diagnosed on its own. The world is the
//! union of the members the dumps name, every rank up to the highest, and a
//! finding's `pg_desc` is the group's description where a dump gives it.

use std::collections::{BTreeMap, BTreeSet};

use super::candidate::{priority, Candidate};
use super::diagnosis::{
    Diagnosis, Finding, FindingKind, GroupProgress, RankSummary, RunDiagnosis, Verdict, Waiting,
    DIAGNOSIS_SCHEMA,
};
use super::group::GroupView;
use super::load::Loaded;
use super::missing::missing_dumps;
use super::model::{Format, RankDump, Record, State};
use super::runs::Run;
use super::{consistency, progress};

/// Diagnoses what was loaded: each run on its own; with several runs, the
/// top level speaks of the lead run (the first with a problem, else the
/// first), named in `run`: its verdict (a problem when any run's is), ranks,
/// world and culprits, then its findings followed by the other problem runs'
/// (every finding labelled with its run); `runs` holds each one.
pub fn diagnose(loaded: &Loaded) -> Diagnosis {
    let mut d = match loaded.runs.as_slice() {
        [] => diagnose_run(&[]),
        [one] => diagnose_run(&one.dumps),
        several => gather(several),
    };
    d.unreadable = loaded.unreadable.clone();
    d.ignored = loaded.ignored.clone();
    d
}

/// The top level of several runs' diagnoses.
fn gather(runs: &[Run]) -> Diagnosis {
    let mut each: Vec<RunDiagnosis> = Vec::new();
    let mut per_rank = Vec::new();
    for run in runs {
        let label = run.label();
        let d = diagnose_run(&run.dumps);
        per_rank.extend(d.per_rank.into_iter().map(|mut r| {
            r.run = Some(label.clone());
            r
        }));
        each.push(RunDiagnosis {
            kind: run.kind.to_owned(),
            run_id: run.run_id.clone(),
            pid: run.pid,
            host: run.host.clone(),
            world_size: d.world_size,
            command: run.command.clone(),
            verdict: d.verdict,
            culprits: d.culprits,
            findings: d
                .findings
                .into_iter()
                .map(|mut f| {
                    f.run = Some(label.clone());
                    f
                })
                .collect(),
            ranks_found: d.ranks_found,
            ranks_missing: d.ranks_missing,
            notes: d.notes,
            label,
        });
    }
    // The top level speaks of one run, the lead: the first with a problem,
    // else the first; the other problem runs' findings follow the lead's.
    let lead = each
        .iter()
        .position(|r| r.verdict == Verdict::Problem)
        .unwrap_or(0);
    let findings = each[lead]
        .findings
        .iter()
        .chain(
            each.iter()
                .enumerate()
                .filter(|(i, r)| *i != lead && r.verdict == Verdict::Problem)
                .flat_map(|(_, r)| &r.findings),
        )
        .cloned()
        .collect();
    Diagnosis {
        schema: DIAGNOSIS_SCHEMA.to_owned(),
        verdict: each[lead].verdict,
        run: Some(each[lead].label.clone()),
        ranks_found: each[lead].ranks_found.clone(),
        ranks_missing: each[lead].ranks_missing.clone(),
        culprits: each[lead].culprits.clone(),
        findings,
        world_size: each[lead].world_size,
        per_rank,
        unreadable: Vec::new(),
        ignored: Vec::new(),
        notes: each
            .iter()
            .flat_map(|r| r.notes.iter().map(|n| format!("{}: {n}", r.label)))
            .collect(),
        runs: each,
    }
}

/// Diagnoses the dumps of one run (one per rank).
fn diagnose_run(run: &[RankDump]) -> Diagnosis {
    let dumps: BTreeMap<usize, &RankDump> = run.iter().map(|d| (d.rank, d)).collect();
    let World {
        size: world_size,
        groups,
        ranks: world,
        missing,
    } = World::of(&dumps);

    let records = super::group::ByGroup::new(&dumps);
    let views: Vec<GroupView> = groups
        .iter()
        .map(|(name, members)| GroupView::new(name, members.clone(), &dumps, &records))
        .collect();
    let snapshot = snapshot_reasons(&dumps);
    let mut candidates = Vec::new();
    let mut in_flight = Vec::new();
    for view in &views {
        candidates.extend(consistency::mismatches(view));
        let pending = progress::not_joined(view)
            .into_iter()
            .chain(progress::stuck(view, &missing))
            .chain(progress::by_status_alone(view));
        match (&snapshot, progress::stalled(view)) {
            (Some(_), None) => in_flight.extend(pending.map(|c| c.finding)),
            _ => candidates.extend(pending),
        }
        candidates.extend(progress::late(view));
    }
    // Point-to-point operations a rank waits in, matched to its peer's (a
    // snapshot of a moving run has them in flight).
    if snapshot.is_none() {
        candidates.extend(super::p2p::pending(&dumps, &missing));
    }
    candidates.extend(missing_dumps(&missing, &views, &dumps, world.len()));
    if candidates.is_empty() && in_flight.is_empty() {
        // A timeout with nothing pending: the ranks stopped outside
        // collectives (the first group that shows it says where).
        // A group where some got further than others says more than one
        // no rank has entered yet.
        let uneven = |v: &&GroupView| {
            let lasts: BTreeSet<u64> = v.tracks.values().map(|t| t.last).collect();
            lasts.len() > 1
        };
        candidates.extend(
            views
                .iter()
                .filter(uneven)
                .find_map(progress::idle_at_timeout)
                .or_else(|| views.iter().find_map(progress::idle_at_timeout)),
        );
    }
    // A not-joined whose ranks stopped earlier, in another group the
    // others went on in without them: that group's seq is said first.
    let earlier: Vec<Candidate> = candidates
        .iter()
        .filter_map(|c| progress::stopped_earlier(&views, c))
        .collect();
    candidates.extend(earlier);
    demote_absent(&mut candidates, &dumps);
    demote_elsewhere(&mut candidates, &dumps);
    demote_behind_stuck(&mut candidates);
    candidates.sort_by(|a, b| {
        (a.priority, &a.finding.pg, a.finding.seq).cmp(&(b.priority, &b.finding.pg, b.finding.seq))
    });
    let descs = descriptions(&dumps);
    let findings: Vec<Finding> = candidates
        .into_iter()
        .map(|c| {
            let mut f = c.finding;
            f.pg_desc = f.pg.as_ref().and_then(|pg| descs.get(pg)).cloned();
            f
        })
        .collect();
    let notes: Vec<String> = snapshot_note(snapshot.as_deref(), &in_flight)
        .into_iter()
        .collect();
    Diagnosis {
        schema: DIAGNOSIS_SCHEMA.to_owned(),
        verdict: if findings.is_empty() {
            Verdict::Healthy
        } else {
            Verdict::Problem
        },
        run: None,
        ranks_found: dumps.keys().copied().collect(),
        ranks_missing: missing.into_iter().collect(),
        culprits: findings
            .first()
            .map(|f| f.ranks.clone())
            .unwrap_or_default(),
        findings,
        world_size,
        per_rank: dumps.values().map(|d| summarize(d, &groups)).collect(),
        unreadable: Vec::new(),
        ignored: Vec::new(),
        notes,
        runs: Vec::new(),
    }
}

/// A run's ranks: the world is every member the dumps name, not what one
/// of them says its size is (gloo's pg_config holds whichever group came
/// last).
struct World {
    size: Option<usize>,
    /// Every group and its members.
    groups: BTreeMap<String, Vec<usize>>,
    ranks: BTreeSet<usize>,
    /// Ranks of the world without a dump.
    missing: BTreeSet<usize>,
}

impl World {
    fn of(dumps: &BTreeMap<usize, &RankDump>) -> World {
        let mut seen: BTreeSet<usize> = dumps.keys().copied().collect();
        for dump in dumps.values() {
            seen.extend(dump.groups.values().flatten());
            seen.extend(0..dump.world_size.unwrap_or(0));
        }
        let size = seen.last().map(|&r| r + 1);
        let groups = memberships(dumps, size);
        let mut ranks: BTreeSet<usize> = (0..size.unwrap_or(0)).collect();
        ranks.extend(groups.values().flatten());
        ranks.extend(dumps.keys());
        let missing = ranks
            .iter()
            .copied()
            .filter(|r| !dumps.contains_key(r))
            .collect();
        World {
            size,
            groups,
            ranks,
            missing,
        }
    }
}

/// Puts `not-joined` findings of ranks still waiting on a late rank
/// ([`absent_while_waiting`]) after the `late` finding: the late rank is
/// the root cause.
fn demote_absent(candidates: &mut [Candidate], dumps: &BTreeMap<usize, &RankDump>) {
    let lates: Vec<Finding> = candidates
        .iter()
        .filter(|c| c.finding.kind == FindingKind::Late)
        .map(|c| c.finding.clone())
        .collect();
    if lates.is_empty() {
        return;
    }
    for c in candidates.iter_mut() {
        if let Some(m) = absent_while_waiting(c, dumps, &lates) {
            // The ranks it names were still waiting for it when they
            // timed out.
            c.priority = priority::LATE + 1;
            c.finding.detail.push_str(&format!(
                "; they were still in seq {m}, waiting on the ranks that entered it: those came late"
            ));
        }
    }
}

/// Puts `not-joined` findings whose ranks are each pending (entered, not
/// completed) in a collective of another group after the findings of
/// where they hang: a rank held up in group 0 never reaches the barrier,
/// and is not the reason the barrier waits.
fn demote_elsewhere(candidates: &mut [Candidate], dumps: &BTreeMap<usize, &RankDump>) {
    // The ranks each group's `not-joined` blames.
    let blamed: Vec<(Option<String>, Vec<usize>)> = candidates
        .iter()
        .filter(|c| c.priority == priority::NOT_JOINED)
        .map(|c| (c.finding.pg.clone(), c.finding.ranks.clone()))
        .collect();
    // Each rank's newest pending collective, and its newest pending in
    // another group than that one's: the newest pending outside any group
    // is one of the two. Found once a rank, not once a finding (a rank of
    // thousands of groups is blamed thousands of times).
    let mut newest: BTreeMap<usize, [Option<&Record>; 2]> = BTreeMap::new();
    let mut pending_of = |rank: usize| -> [Option<&Record>; 2] {
        *newest.entry(rank).or_insert_with(|| {
            let mut open = dumps.get(&rank).into_iter().flat_map(|d| {
                d.records
                    .iter()
                    .rev()
                    .filter(|r| !r.is_p2p() && r.state != State::Completed)
            });
            let first = open.next();
            let second = first.and_then(|f| open.find(|r| r.pg != f.pg));
            [first, second]
        })
    };
    for c in candidates.iter_mut() {
        if c.priority != priority::NOT_JOINED || c.finding.ranks.is_empty() {
            continue;
        }
        let Some(pg) = c.finding.pg.clone() else {
            continue;
        };
        let pending: Vec<Option<String>> = c
            .finding
            .ranks
            .iter()
            .map(|&rank| {
                pending_of(rank)
                    .into_iter()
                    .flatten()
                    .find(|r| r.pg != pg)
                    .map(|r| format!("rank {rank} in group {} seq {}", r.pg, r.seq))
            })
            .collect();
        // Each rank is pending in another group's collective, or is the
        // one another group's `not-joined` blames (held up by its own
        // hang there); at least one pending.
        let blamed_in = |rank: &usize| {
            blamed
                .iter()
                .find(|(other, ranks)| {
                    other.as_deref() != Some(pg.as_str()) && ranks.contains(rank)
                })
                .and_then(|(other, _)| other.as_ref())
                .map(|other| format!("rank {rank} not joining group {other}"))
        };
        let places: Option<Vec<String>> = c
            .finding
            .ranks
            .iter()
            .zip(&pending)
            .map(|(r, p)| p.clone().or_else(|| blamed_in(r)))
            .collect();
        let any_pending = pending.iter().any(Option::is_some);
        if let (Some(places), true) = (places, any_pending) {
            c.priority = priority::NOT_JOINED_ELSEWHERE;
            c.finding.detail.push_str(&format!(
                "; they are pending elsewhere ({}): held up there, not idle",
                places.join(", ")
            ));
        }
    }
}

/// Puts a `not-joined` at seq S after a `stuck` of the same group at an
/// earlier seq that blames some of its ranks: they never reached S
/// because they hang there (a ring's ranks downstream of the stopped one
/// wait at the earlier seq; those upstream went on and wait at S).
fn demote_behind_stuck(candidates: &mut [Candidate]) {
    let stuck: Vec<(Option<String>, u64, Vec<usize>)> = candidates
        .iter()
        .filter(|c| c.finding.kind == FindingKind::Stuck && !c.finding.ranks.is_empty())
        .filter_map(|c| {
            Some((
                c.finding.pg.clone(),
                c.finding.seq?,
                c.finding.ranks.clone(),
            ))
        })
        .collect();
    for c in candidates.iter_mut() {
        if c.priority != priority::NOT_JOINED {
            continue;
        }
        let Some(seq) = c.finding.seq else { continue };
        let below = stuck.iter().find(|(pg, s, ranks)| {
            *pg == c.finding.pg && *s < seq && ranks.iter().all(|r| c.finding.ranks.contains(r))
        });
        if let Some((_, s, _)) = below {
            c.priority = priority::NOT_JOINED_ELSEWHERE;
            c.finding.detail.push_str(&format!(
                "; the group hangs earlier, at seq {s}, which holds them up"
            ));
        }
    }
}

/// The note of dumps written while the run was moving (`reasons`) with
/// collectives in flight: a snapshot, not a hang.
fn snapshot_note(reasons: Option<&str>, in_flight: &[Finding]) -> Option<String> {
    let reasons = reasons.filter(|_| !in_flight.is_empty())?;
    let places: Vec<String> = in_flight
        .iter()
        .map(|f| {
            format!(
                "group {} seq {}",
                f.pg.as_deref().unwrap_or("?"),
                f.seq.unwrap_or(0)
            )
        })
        .collect();
    Some(format!(
        "dumps written {reasons} while collectives were in flight ({}), none for long: a snapshot of a run that was moving, not a hang",
        places.join(", ")
    ))
}

/// The seq where each rank a `not-joined` finding blames is still, when
/// every one of them is in an earlier collective of the group, waiting
/// (its channels) on ranks that entered the finding's, or on ranks so
/// waiting themselves (a ring: rank 2 waits on rank 0, which waits on the
/// rank that went ahead), and one rank waited on is found late (`lates`)
/// in the group by then: they did not join because they were waiting on
/// it (a rank that entered a collective just past the others' timeout
/// finishes it, its peers' data being there, and waits in the next for
/// peers that gave up).
fn absent_while_waiting(
    c: &Candidate,
    dumps: &BTreeMap<usize, &RankDump>,
    lates: &[Finding],
) -> Option<u64> {
    let f = &c.finding;
    let (pg, seq) = (f.pg.as_ref()?, f.seq?);
    if f.kind != FindingKind::NotJoined || f.ranks.is_empty() {
        return None;
    }
    let mut behind: BTreeSet<usize> = dumps
        .values()
        .filter(|d| d.records.iter().any(|r| &r.pg == pg && r.seq == seq))
        .map(|d| d.rank)
        .collect();
    let mut at = None;
    // Each blamed rank's peers it waits on, in an earlier collective.
    let mut waits: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for a in &f.ranks {
        let newest = dumps
            .get(a)?
            .records
            .iter()
            .filter(|r| &r.pg == pg)
            .max_by_key(|r| r.seq)?;
        let peers: Option<BTreeSet<usize>> = newest
            .channels
            .iter()
            .filter_map(|ch| ch.waiting_on.as_ref().map(|w| usize::try_from(w.peer).ok()))
            .collect();
        let peers = peers?;
        if newest.seq >= seq || newest.state == State::Completed || peers.is_empty() {
            return None;
        }
        waits.insert(*a, peers);
        at = at.max(Some(newest.seq));
    }
    // Ranks blocked behind those that entered: until none is added.
    loop {
        let more: Vec<usize> = waits
            .iter()
            .filter(|(a, peers)| !behind.contains(a) && peers.is_subset(&behind))
            .map(|(a, _)| *a)
            .collect();
        if more.is_empty() {
            break;
        }
        behind.extend(more);
    }
    if !waits.keys().all(|a| behind.contains(a)) {
        return None;
    }
    let waited: BTreeSet<usize> = waits.values().flatten().copied().collect();
    let m = at?;
    lates
        .iter()
        .any(|l| {
            l.pg.as_ref() == Some(pg)
                && l.seq.is_some_and(|s| s <= m)
                && l.ranks.iter().any(|r| waited.contains(r))
        })
        .then_some(m)
}

/// When every dump of the run was written while it was moving (collbench's
/// `signal`, `request` or `exit`, none `timeout`), those reasons in words.
fn snapshot_reasons(dumps: &BTreeMap<usize, &RankDump>) -> Option<String> {
    let mut reasons: BTreeSet<&str> = BTreeSet::new();
    for dump in dumps.values() {
        match dump.reason.as_deref() {
            Some(r @ ("signal" | "request" | "exit")) => reasons.insert(r),
            _ => return None,
        };
    }
    let words: Vec<&str> = reasons
        .iter()
        .map(|r| match *r {
            "signal" => "on a signal",
            "request" => "on request (SIGUSR1)",
            _ => "at exit",
        })
        .collect();
    (!words.is_empty()).then(|| words.join(" and "))
}

/// Group descriptions the dumps give, by group name.
fn descriptions(dumps: &BTreeMap<usize, &RankDump>) -> BTreeMap<String, String> {
    let mut descs = BTreeMap::new();
    for dump in dumps.values() {
        for (name, desc) in &dump.group_descs {
            descs.entry(name.clone()).or_insert_with(|| desc.clone());
        }
    }
    descs
}

/// Every group and its members: what the dumps say, merged; a group no dump
/// describes is the world if it is the default group "0", else the ranks
/// that have records in it.
fn memberships(
    dumps: &BTreeMap<usize, &RankDump>,
    world_size: Option<usize>,
) -> BTreeMap<String, Vec<usize>> {
    let mut groups: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for dump in dumps.values() {
        for (name, ranks) in &dump.groups {
            groups.entry(name.clone()).or_default().extend(ranks);
        }
    }
    let mut described: BTreeSet<String> = groups.keys().cloned().collect();
    for dump in dumps.values() {
        // The groups its records are in. (Not those only a status names: a
        // group no record shows, made of every rank whose status names it,
        // would blame ranks that hang elsewhere for never joining it.)
        for pg in dump.records.iter().map(|r| &r.pg) {
            if described.contains(pg) {
                continue;
            }
            let members = groups.entry(pg.clone()).or_default();
            match world_size {
                Some(n) if pg == "0" => {
                    members.extend(0..n);
                    described.insert(pg.clone());
                }
                _ => {
                    members.insert(dump.rank);
                }
            }
        }
    }
    // A rank whose ring dropped every record of such a group is a member
    // still where its status names the group: it may be the one the others
    // wait for. (collbench's status names groups as its records do;
    // PyTorch's `pg_status` is keyed by each process's own count of the
    // groups it made, which a rank outside some group counts otherwise.)
    for dump in dumps.values().filter(|d| d.format == Format::Collbench) {
        for name in dump.status.keys() {
            if let (false, Some(members)) = (described.contains(name), groups.get_mut(name)) {
                members.insert(dump.rank);
            }
        }
    }
    groups
        .into_iter()
        .map(|(name, ranks)| (name, ranks.into_iter().collect()))
        .collect()
}

/// One rank's standing in each of its groups, and its blocked channels.
fn summarize(dump: &RankDump, groups: &BTreeMap<String, Vec<usize>>) -> RankSummary {
    // Each group's collective records, sorted out once (a rank in
    // thousands of groups reads each record once).
    let mut by_pg: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in &dump.records {
        let records = by_pg.entry(r.pg.as_str()).or_default();
        if !r.is_p2p() {
            records.push(r);
        }
    }
    for (name, members) in groups {
        if members.contains(&dump.rank) {
            by_pg.entry(name.as_str()).or_default();
        }
    }
    let progress = by_pg
        .into_iter()
        .map(|(pg, records)| {
            let last = records.iter().max_by_key(|r| r.seq);
            let max_seq = |keep: &dyn Fn(State) -> bool| {
                records
                    .iter()
                    .filter(|r| keep(r.state))
                    .map(|r| r.seq)
                    .max()
            };
            if let (None, Some(s)) = (last, dump.status.get(pg)) {
                // No record of the group (its ring dropped them); the dump
                // kept how far the rank got.
                return GroupProgress {
                    pg: pg.to_owned(),
                    last_entered: Some(s.entered).filter(|&n| n > 0),
                    last_started: s.started,
                    last_completed: s.completed,
                    op: None,
                    state: None,
                };
            }
            GroupProgress {
                pg: pg.to_owned(),
                last_entered: last.map(|r| r.seq),
                last_started: max_seq(&|s| s != State::Scheduled),
                last_completed: max_seq(&|s| s == State::Completed),
                op: last.map(|r| r.op.clone()),
                state: last.map(|r| r.state),
            }
        })
        .collect();
    RankSummary {
        rank: dump.rank,
        run: None,
        path: dump.path.display().to_string(),
        format: dump.format,
        groups: progress,
        waits: waits_of(dump),
    }
}

/// The channels of `dump`'s operations not completed that wait on a peer.
fn waits_of(dump: &RankDump) -> Vec<Waiting> {
    dump.records
        .iter()
        .filter(|r| r.state != State::Completed)
        .flat_map(|r| {
            r.waits().map(move |(ch, w)| Waiting {
                pg: r.pg.clone(),
                seq: r.seq,
                op: r.op.clone(),
                channel: ch.channel,
                step: ch.last_step_done.saturating_add(1),
                steps_total: ch.steps_total,
                peer: w.peer,
                what: w.what.clone(),
            })
        })
        .collect()
}
