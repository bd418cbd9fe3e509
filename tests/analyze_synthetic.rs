//! The analyzer on synthetic collbench dumps (written with the recorder's own
//! types into temporary directories), one scenario per finding kind, plus
//! ring buffers that wrapped, several groups and PyTorch point-to-point records.

use std::path::Path;

use collbench::analyze::{analyze_paths, render_text, Diagnosis, FindingKind, Verdict};
use collbench::recorder::model::{
    ChannelProgress, Clocks, Dump, Entry, Group, GroupStatus, IterKind, PeerLost, State, Wait,
    DUMP_SCHEMA,
};
use tempfile::TempDir;

const BASE_NS: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// A collective on `rank`, entered at seq × 10 ms plus a little per-rank jitter.
fn entry(rank: usize, seq: u64, state: State) -> Entry {
    let t = BASE_NS + seq * 10 * MS + (rank as u64) * 37_000 + (seq % 3) * 11_000;
    Entry {
        pg: "0".into(),
        seq,
        collective: "all-reduce".into(),
        algo: "ring".into(),
        dtype: "f32".into(),
        count: 1024,
        bytes: 4096,
        root: None,
        state,
        iteration: IterKind::Timed,
        t_scheduled_ns: t,
        t_started_ns: (state != State::Scheduled).then_some(t + 5_000),
        t_completed_ns: (state == State::Completed).then_some(t + MS),
        channels: Vec::new(),
    }
}

/// An entry of the barrier group.
fn barrier(rank: usize, seq: u64, state: State) -> Entry {
    let mut e = entry(rank, seq, state);
    e.pg = "barrier".into();
    e
}

/// A dump's status with group "0" alone, started as far as entered.
fn status_of_group_0(entered: u64, completed: u64) -> Vec<GroupStatus> {
    vec![GroupStatus {
        group: "0".into(),
        entered,
        started: entered,
        completed,
    }]
}

/// Seqs `1..=done` completed, then the given in-flight entries.
fn history(rank: usize, done: u64) -> Vec<Entry> {
    (1..=done)
        .map(|s| entry(rank, s, State::Completed))
        .collect()
}

fn dump(rank: usize, world: usize, entries: Vec<Entry>, reason: &str) -> Dump {
    Dump {
        schema: DUMP_SCHEMA.into(),
        run_id: None,
        host: "node0".into(),
        pid: 1000 + rank as u32,
        rank,
        world_size: world,
        device: "host".into(),
        command: "collbench all-reduce".into(),
        version: "0.1.0".into(),
        reason: reason.into(),
        lost: None,
        clocks: Clocks::default(),
        capacity: 64,
        groups: vec![Group {
            name: "0".into(),
            ranks: (0..world).collect(),
        }],
        status: Vec::new(),
        entries,
    }
}

/// An in-flight (started) entry whose channel 0 did `done` of 6 steps and
/// waits on `peer`, or on no one.
fn blocked(rank: usize, seq: u64, done: i64, peer: Option<i64>) -> Entry {
    let mut e = entry(rank, seq, State::Started);
    e.channels = vec![ChannelProgress {
        channel: 0,
        steps_total: 6,
        last_step_done: done,
        waiting_on: peer.map(|peer| Wait {
            peer,
            what: "recv".into(),
        }),
    }];
    e
}

fn write(dir: &Path, dumps: &[Dump]) {
    for d in dumps {
        let path = dir.join(format!("collbench-fr-rank{}.json", d.rank));
        std::fs::write(path, serde_json::to_vec_pretty(d).unwrap()).unwrap();
    }
}

fn run(dumps: &[Dump]) -> Diagnosis {
    let dir = TempDir::new().unwrap();
    write(dir.path(), dumps);
    analyze_paths(&[dir.path().to_path_buf()]).unwrap()
}

fn assert_root(d: &Diagnosis, kind: FindingKind, seq: Option<u64>, culprits: &[usize]) {
    let text = render_text(d);
    let first = d
        .findings
        .first()
        .unwrap_or_else(|| panic!("no findings:\n{text}"));
    assert_eq!((first.kind, first.seq), (kind, seq), "{text}");
    assert_eq!(d.culprits, culprits, "{text}");
    assert_eq!((d.verdict, d.exit_code()), (Verdict::Problem, 1));
    // The JSON contract round-trips.
    let json = serde_json::to_value(d).unwrap();
    assert_eq!(json["schema"], "collbench.diagnosis/1");
    assert_eq!(json["findings"][0]["kind"], kind.name());
    let back: Diagnosis = serde_json::from_value(json).unwrap();
    assert_eq!(&back, d);
}

#[test]
fn completed_everywhere_is_healthy() {
    let d = run(&(0..4)
        .map(|r| dump(r, 4, history(r, 12), "exit"))
        .collect::<Vec<_>>());
    assert_eq!(
        (d.verdict, d.exit_code()),
        (Verdict::Healthy, 0),
        "{}",
        render_text(&d)
    );
    assert!(d.findings.is_empty() && d.culprits.is_empty());
    assert!(render_text(&d).starts_with("HEALTHY"));
}

#[test]
fn not_joined_blames_the_rank_that_never_entered() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 5);
            if r != 2 {
                e.push(blocked(r, 6, 1, Some(((r + 3) % 4) as i64)));
            }
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(6), &[2]);
    assert!(
        d.findings[0].detail.contains("rank 2 at seq 5"),
        "{}",
        d.findings[0].detail
    );
}

/// A device rank queues operations behind the one it runs: ranks 0, 2 and
/// 3 started seq 6 (waiting on rank 1) and queued seqs 7..9 behind it;
/// rank 1 called seq 6 late and never started it. The hang is at seq 6,
/// not at seq 7, which rank 1 never called but the others only queued.
#[test]
fn operations_queued_behind_a_hang_are_not_where_it_hangs() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 5);
            if r == 1 {
                e.push(entry(r, 6, State::Scheduled));
            } else {
                let peer = if r == 2 { 1 } else { (r as i64 + 3) % 4 };
                e.push(blocked(r, 6, 0, Some(peer)));
                e.extend((7..=9).map(|s| entry(r, s, State::Scheduled)));
            }
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Stuck, Some(6), &[1]);
    assert!(
        d.findings[0]
            .detail
            .contains("rank 1 called it and never started it"),
        "{}",
        d.findings[0].detail
    );
    assert!(
        d.findings.iter().all(|f| f.kind != FindingKind::NotJoined),
        "{}",
        render_text(&d)
    );
    // Had one of them started seq 7 (a rank whose part needs no peer), rank
    // 1's absence there would be a finding of its own.
    let mut started = dumps.clone();
    started[0].entries[6] = blocked(0, 7, 0, Some(1));
    started[0].entries.truncate(7);
    let d = run(&started);
    assert!(
        d.findings
            .iter()
            .any(|f| f.kind == FindingKind::NotJoined && f.seq == Some(7)),
        "{}",
        render_text(&d)
    );
}

#[test]
fn missing_dump_waited_on_is_the_culprit() {
    // Ring: rank r receives from r-1. Rank 3 wrote no dump; rank 0 waits on it.
    let dumps: Vec<Dump> = (0..3)
        .map(|r| {
            let mut e = history(r, 5);
            e.push(blocked(r, 6, 2, Some(((r + 3) % 4) as i64)));
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::MissingDump, Some(6), &[3]);
    assert_eq!(d.ranks_missing, vec![3]);
    assert!(render_text(&d).contains("(no dump)"));
}

/// Where the dumps of the ranks that lived carry their launcher's word
/// that a rank's process died (`--procs`), the finding says how it died;
/// a missing rank no dump speaks of is said missing alone.
#[test]
fn a_missing_rank_whose_process_died_is_said_to_have_died() {
    let lost = PeerLost {
        rank: 3,
        how: "killed by signal 11 (SIGSEGV)".into(),
    };
    let dumps: Vec<Dump> = (0..3)
        .map(|r| {
            let mut e = history(r, 5);
            e.push(blocked(r, 6, 2, Some(((r + 3) % 4) as i64)));
            let mut d = dump(r, 5, e, "peer-lost");
            d.lost = Some(lost.clone());
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::MissingDump, Some(6), &[3, 4]);
    assert_eq!(d.ranks_missing, vec![3, 4]);
    assert_eq!(
        d.findings[0].detail,
        "no readable dump of ranks 3, 4 (rank 3's process died, killed by signal 11 (SIGSEGV), as the launcher saw), while rank 0 waits on them in seq 6 (all-reduce) of group 0"
    );
    // A world of 4: rank 3 alone is missing.
    let dumps: Vec<Dump> = dumps
        .into_iter()
        .map(|mut d| {
            d.world_size = 4;
            d.groups[0].ranks = (0..4).collect();
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::MissingDump, Some(6), &[3]);
    assert_eq!(
        d.findings[0].detail,
        "no readable dump of rank 3 (its process died, killed by signal 11 (SIGSEGV), as the launcher saw), while rank 0 waits on it in seq 6 (all-reduce) of group 0"
    );
}

#[test]
fn missing_dump_nobody_waits_for_is_still_a_problem() {
    let dumps: Vec<Dump> = (0..3).map(|r| dump(r, 4, history(r, 8), "exit")).collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::MissingDump, None, &[3]);
    assert_eq!(d.findings.len(), 1);
}

/// Four ranks that all completed 1..=5, with `change` applied to `rank`'s seq 4.
fn with_change(rank: usize, change: impl Fn(&mut Entry)) -> Diagnosis {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 5);
            if r == rank {
                change(&mut e[3]);
            }
            dump(r, 4, e, "request")
        })
        .collect();
    run(&dumps)
}

#[test]
fn op_mismatch_blames_the_odd_rank_out() {
    let d = with_change(1, |e| e.collective = "all-gather".into());
    assert_root(&d, FindingKind::OpMismatch, Some(4), &[1]);
    let d = with_change(3, |e| e.algo = "tree".into());
    assert_root(&d, FindingKind::OpMismatch, Some(4), &[3]);
}

#[test]
fn size_mismatch_blames_the_odd_rank_out() {
    let d = with_change(2, |e| e.count = 512);
    assert_root(&d, FindingKind::SizeMismatch, Some(4), &[2]);
}

#[test]
fn dtype_mismatch_blames_the_odd_rank_out() {
    let d = with_change(0, |e| e.dtype = "f16".into());
    assert_root(&d, FindingKind::DtypeMismatch, Some(4), &[0]);
}

#[test]
fn stuck_names_the_rank_waited_on_that_waits_on_no_one() {
    // Rank 1 stalled at step 1; 2 waits on 1, 3 on 2, 0 on 3.
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 6);
            let waits = (r != 1).then_some(((r + 3) % 4) as i64);
            e.push(blocked(r, 7, if r == 1 { 0 } else { 2 }, waits));
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Stuck, Some(7), &[1]);
    let text = render_text(&d);
    assert!(
        text.contains(
            "rank 2 (group 0, seq 7, all-reduce): channel 0 step 3 of 6 waits to recv from rank 1"
        ),
        "{text}"
    );
}

#[test]
fn stuck_in_a_cycle_names_the_rank_that_got_least_far() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 6);
            e.push(blocked(
                r,
                7,
                if r == 2 { 0 } else { 3 },
                Some(((r + 3) % 4) as i64),
            ));
            dump(r, 4, e, "timeout")
        })
        .collect();
    assert_root(&run(&dumps), FindingKind::Stuck, Some(7), &[2]);
}

/// A ring caught moving slowly (a slow rank or link, or a timeout too
/// short): every rank waits on the one before it, a few steps apart. No
/// rank stopped, so none is named (the one a step behind was, though the
/// slow one was another).
#[test]
fn stuck_in_a_cycle_of_ranks_about_as_far_names_no_one() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 6);
            let mut b = blocked(r, 7, [80, 81, 82, 84][r], Some(((r + 3) % 4) as i64));
            b.channels[0].steps_total = 448;
            e.push(b);
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Stuck, Some(7), &[]);
    let text = render_text(&d);
    assert!(
        text.contains("the ranks got about as far (81 to 85 step(s) done): no one rank stopped"),
        "{text}"
    );
}

#[test]
fn stuck_where_others_completed_names_those_that_did_not() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 6);
            let state = if r < 2 {
                State::Completed
            } else {
                State::Started
            };
            e.push(entry(r, 7, state));
            dump(r, 4, e, "timeout")
        })
        .collect();
    assert_root(&run(&dumps), FindingKind::Stuck, Some(7), &[2, 3]);
}

#[test]
fn in_flight_everywhere_without_a_timeout_is_healthy() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 6);
            e.push(entry(r, 7, State::Started));
            dump(r, 4, e, "request")
        })
        .collect();
    assert_eq!(run(&dumps).verdict, Verdict::Healthy);
}

#[test]
fn late_blames_the_rank_that_started_seconds_after_the_others() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 10);
            if r == 3 {
                for entry in &mut e[6..] {
                    entry.t_started_ns = entry.t_started_ns.map(|t| t + 3_000 * MS);
                }
            }
            dump(r, 4, e, "exit")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Late, Some(10), &[3]);
    assert!(
        d.findings[0]
            .detail
            .contains("4 of 10 seqs compared had a late rank, the first at seq 7"),
        "{}",
        d.findings[0].detail
    );
}

/// A rank late at every seq: its lateness is not the group's usual spread
/// (the spread leaves the latest rank out), so it is found.
#[test]
fn a_rank_late_at_every_seq_is_found() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 10);
            for entry in &mut e {
                let skew = if r == 3 { 3_000 * MS } else { r as u64 * 1_000 };
                entry.t_started_ns = entry.t_started_ns.map(|t| t + skew);
            }
            dump(r, 4, e, "exit")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Late, Some(10), &[3]);
    assert!(
        d.findings[0]
            .detail
            .contains("10 of 10 seqs compared had a late rank, the first at seq 1"),
        "{}",
        d.findings[0].detail
    );
}

#[test]
fn wrapped_buffers_compare_only_what_every_rank_still_holds() {
    // Rank 0's buffer of 8 is full of group "1" records and seqs 6..=10 of
    // group "0"; ranks 1 and 2 still hold seqs 3..=10, where seq 3 disagrees
    // between them (f16 vs f32) but cannot be compared with rank 0's.
    let mut dumps: Vec<Dump> = (0..3)
        .map(|r| {
            let mut e: Vec<Entry> = (3..=10).map(|s| entry(r, s, State::Completed)).collect();
            if r == 2 {
                e[0].dtype = "f16".into();
            }
            let mut d = dump(r, 3, e, "exit");
            d.capacity = 8;
            d
        })
        .collect();
    let mut group1: Vec<Entry> = (1..=3).map(|s| entry(0, s, State::Completed)).collect();
    group1.iter_mut().for_each(|e| e.pg = "1".into());
    dumps[0].entries.drain(..3);
    dumps[0].entries.splice(0..0, group1);
    dumps[0].groups.push(Group {
        name: "1".into(),
        ranks: vec![0],
    });
    let d = run(&dumps);
    assert_eq!(d.verdict, Verdict::Healthy, "{}", render_text(&d));
}

/// A rank whose ring (of one entry) holds only a barrier of another group
/// is not "unknown" in group 0: its dump's status says it completed seq 5
/// there, so it never joined seq 6, where the others wait on it. Without
/// the status (a dump written before it was kept) the rank is blamed as
/// the one waited on, its whereabouts unknown.
#[test]
fn a_group_whose_records_the_ring_dropped_is_judged_by_the_dump_status() {
    let make = |with_status: bool| -> Vec<Dump> {
        (0..3)
            .map(|r| {
                let e = if r == 1 {
                    barrier(r, 5, State::Completed)
                } else {
                    blocked(r, 6, 1, Some(1))
                };
                let mut d = dump(r, 3, vec![e], "timeout");
                d.capacity = 1;
                let (entered, completed) = if r == 1 { (5, 5) } else { (6, 5) };
                if with_status {
                    d.status = status_of_group_0(entered, completed);
                }
                d
            })
            .collect()
    };
    let d = run(&make(true));
    assert_root(&d, FindingKind::NotJoined, Some(6), &[1]);
    let text = render_text(&d);
    assert!(
        text.contains("rank 1 at seq 5, completed (by its dump's status: the dump holds no record of the group, which its ring buffer drops when full; --fr-entries sets its size)"),
        "{text}"
    );
    // Without the status (a dump written before it was kept), the rank the
    // others wait on is still named, said to be unknown.
    let d = run(&make(false));
    assert_root(&d, FindingKind::Stuck, Some(6), &[1]);
    let text = render_text(&d);
    assert!(
        text.contains(
            "The dump of rank 1 holds no record of this group (its ring buffer dropped them)"
        ),
        "{text}"
    );
}

/// A scatter whose rank 2 never entered seq 7: the others completed it
/// (their sends were buffered) and wait in barrier seq 6. Rank 2's ring of
/// one holds only its seq 6 of group 0; its status says it completed
/// barrier seq 5. It is a member of the barrier the others' records show,
/// by its status, and the one that never joined it.
#[test]
fn a_rank_whose_ring_dropped_a_group_others_show_is_its_member_by_status() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let (e, group_0, barrier_seqs) = if r == 2 {
                (entry(r, 6, State::Completed), (6, 6), (5, 5))
            } else {
                (barrier(r, 6, State::Started), (7, 7), (6, 5))
            };
            let mut d = dump(r, 4, vec![e], "timeout");
            d.capacity = 1;
            d.status = status_of_group_0(group_0.0, group_0.1);
            d.status.push(GroupStatus {
                group: "barrier".into(),
                entered: barrier_seqs.0,
                started: barrier_seqs.0,
                completed: barrier_seqs.1,
            });
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(6), &[2]);
    assert_eq!(d.findings[0].pg.as_deref(), Some("barrier"));
}

/// Dumps that hold no record at all (every ring dropped them) are judged
/// by their status: ranks 0, 2 and 3 entered seq 5 and never completed
/// it, rank 1 completed seq 4 and never entered seq 5. When every rank
/// entered it, the group is stuck there, no culprit known. Never
/// "healthy".
#[test]
fn dumps_without_records_are_judged_by_their_status_alone() {
    let make = |behind: bool| -> Vec<Dump> {
        (0..4)
            .map(|r| {
                let mut d = dump(r, 4, Vec::new(), "timeout");
                d.capacity = 1;
                d.status = if r == 1 && behind {
                    status_of_group_0(4, 4)
                } else {
                    status_of_group_0(5, 4)
                };
                d
            })
            .collect()
    };
    let d = run(&make(true));
    assert_root(&d, FindingKind::NotJoined, Some(5), &[1]);
    assert!(
        render_text(&d).contains("by the dumps' status alone"),
        "{}",
        render_text(&d)
    );
    let d = run(&make(false));
    assert_root(&d, FindingKind::Stuck, Some(5), &[]);
}

/// Ranks 0 and 1 also form group "1", where rank 1 never joined seq 5
/// and rank 0 waits in it; ranks 2 and 3 wait in group 0's seq 3 for them.
/// The root cause is rank 1 in group 1; group 0's `not-joined` of ranks 0
/// and 1 comes after it, said to be held up there (rank 0 pending in group
/// 1, rank 1 the one group 1 blames).
#[test]
fn a_not_joined_of_ranks_held_up_by_another_groups_culprit_comes_after_it() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e: Vec<Entry> = Vec::new();
            if r < 2 {
                e.extend((1..=2).map(|s| entry(r, s, State::Completed)));
                let last = if r == 0 { 5 } else { 4 };
                for s in 1..=last {
                    let mut x = if r == 0 && s == 5 {
                        blocked(r, s, 0, Some(1))
                    } else {
                        entry(r, s, State::Completed)
                    };
                    x.pg = "1".into();
                    e.push(x);
                }
            } else {
                e.extend((1..=2).map(|s| entry(r, s, State::Completed)));
                e.push(blocked(r, 3, 0, Some(0)));
            }
            let mut d = dump(r, 4, e, "timeout");
            d.groups.push(Group {
                name: "1".into(),
                ranks: vec![0, 1],
            });
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(5), &[1]);
    assert_eq!(
        d.findings[0].pg.as_deref(),
        Some("1"),
        "{}",
        render_text(&d)
    );
    let text = render_text(&d);
    assert!(text.contains("rank 1 not joining group 1"), "{text}");
}

/// A member known only by its status, which completed the hung seq (a
/// broadcast's root that went on to a barrier), does not hide the hang of
/// the others: they are stuck there, not healthy.
#[test]
fn a_member_known_only_by_its_status_does_not_hide_a_hang() {
    let dumps: Vec<Dump> = (0..3)
        .map(|r| {
            let e = if r == 1 {
                barrier(r, 6, State::Completed)
            } else {
                blocked(r, 6, 1, Some(if r == 0 { 1 } else { 0 }))
            };
            let mut d = dump(r, 3, vec![e], "timeout");
            d.capacity = 1;
            let (entered, completed) = if r == 1 { (6, 6) } else { (6, 5) };
            d.status = status_of_group_0(entered, completed);
            d
        })
        .collect();
    let d = run(&dumps);
    let text = render_text(&d);
    assert_eq!(d.verdict, Verdict::Problem, "{text}");
    assert_eq!(
        (
            d.findings[0].kind,
            d.findings[0].pg.as_deref(),
            d.findings[0].seq
        ),
        (FindingKind::Stuck, Some("0"), Some(6)),
        "{text}"
    );
    assert!(!d.culprits.contains(&1), "{text}");
}

/// A status no run makes (a seq past 2^53, more completed than entered)
/// is left out: the rank is then judged as one whose ring dropped the
/// group without a status (named as the one waited on), never by a wrapped
/// or absurd number.
#[test]
fn an_implausible_status_is_left_out() {
    for (entered, completed) in [(u64::MAX, u64::MAX), (5, 9)] {
        let dumps: Vec<Dump> = (0..3)
            .map(|r| {
                let e = if r == 1 {
                    barrier(r, 5, State::Completed)
                } else {
                    blocked(r, 6, 1, Some(1))
                };
                let mut d = dump(r, 3, vec![e], "timeout");
                d.capacity = 1;
                if r == 1 {
                    d.status = status_of_group_0(entered, completed);
                }
                d
            })
            .collect();
        let d = run(&dumps);
        assert_root(&d, FindingKind::Stuck, Some(6), &[1]);
        assert!(!render_text(&d).contains("18446744073709551615"));
    }
}

/// A broadcast whose root and another rank went on (to seq 7, then into
/// the barrier) while rank 0 waits in seq 6 for rank 2, which scheduled it
/// and never started: small rings dropped seq 6 from the ranks that went
/// on, and ranks 0 and 2 never reached the barrier. The hang is rank 2 in
/// seq 6, not ranks 0 and 2 missing the barrier (they are held up in
/// group 0).
#[test]
fn a_hang_below_what_every_ring_holds_is_found_where_it_is() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let entries = match r {
                0 => vec![barrier(r, 5, State::Completed), blocked(r, 6, 0, Some(2))],
                2 => vec![
                    barrier(r, 5, State::Completed),
                    entry(r, 6, State::Scheduled),
                ],
                _ => vec![entry(r, 7, State::Completed), barrier(r, 6, State::Started)],
            };
            let mut d = dump(r, 4, entries, "timeout");
            d.capacity = 2;
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Stuck, Some(6), &[2]);
    assert_eq!(
        d.findings[0].pg.as_deref(),
        Some("0"),
        "{}",
        render_text(&d)
    );
    let text = render_text(&d);
    assert!(
        text.contains("rank 2 called it and never started it"),
        "{text}"
    );
    // The barrier's not-joined comes after it, said to be held up there.
    assert!(text.contains("they are pending elsewhere"), "{text}");
}

/// A send-recv ring whose rank 2 scheduled seq 6 and never started it:
/// rank 3 waits on it in seq 6; ranks 0 and 1 went on to seq 7, where
/// rank 0 waits on rank 3. The hang is rank 2 at seq 6, not ranks 2 and 3
/// missing seq 7: with rings that hold seq 6 everywhere (the not-joined at
/// 7 comes after the stuck at 6) and with rings of one (seq 6 judged from
/// what the ranks entered after it, and rank 1's status).
#[test]
fn ranks_held_up_at_an_earlier_seq_are_not_blamed_for_a_later_one() {
    let send_recv = |r: usize, seq: u64, state: State| {
        let mut e = entry(r, seq, state);
        e.collective = "send-recv".into();
        e
    };
    let waits = |r: usize, seq: u64, peer: i64| {
        let mut e = blocked(r, seq, 0, Some(peer));
        e.collective = "send-recv".into();
        e
    };
    for ring in [3, 1] {
        let dumps: Vec<Dump> = (0..4)
            .map(|r| {
                let mut entries = match r {
                    0 => vec![send_recv(r, 6, State::Completed), waits(r, 7, 3)],
                    1 => vec![
                        send_recv(r, 6, State::Completed),
                        send_recv(r, 7, State::Completed),
                        barrier(r, 6, State::Started),
                    ],
                    2 => vec![send_recv(r, 6, State::Scheduled)],
                    _ => vec![waits(r, 6, 2)],
                };
                let keep = entries.len().saturating_sub(ring);
                entries.drain(..keep);
                let mut d = dump(r, 4, entries, "timeout");
                d.capacity = ring;
                let (entered, completed) = match r {
                    0 => (7, 6),
                    1 => (7, 7),
                    _ => (6, 5),
                };
                d.status = status_of_group_0(entered, completed);
                d
            })
            .collect();
        let d = run(&dumps);
        let text = render_text(&d);
        assert_root(&d, FindingKind::Stuck, Some(6), &[2]);
        assert_eq!(
            d.findings[0].pg.as_deref(),
            Some("0"),
            "ring {ring}: {text}"
        );
    }
}

#[test]
fn a_hang_in_a_subgroup_is_placed_in_that_group() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut d = dump(r, 4, history(r, 4), "timeout");
            d.groups.push(Group {
                name: "1".into(),
                ranks: vec![2, 3],
            });
            if r >= 2 {
                let mut sub: Vec<Entry> = (1..=3).map(|s| entry(r, s, State::Completed)).collect();
                if r == 2 {
                    sub.push(blocked(r, 4, 0, Some(3)));
                }
                sub.iter_mut().for_each(|e| e.pg = "1".into());
                d.entries.extend(sub);
            }
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(4), &[3]);
    assert_eq!(d.findings[0].pg.as_deref(), Some("1"));
}

#[test]
fn pytorch_p2p_records_do_not_disturb_collective_matching() {
    // p2p records carry the collective seq of the collective before them.
    let dir = TempDir::new().unwrap();
    for rank in 0..2 {
        let mut entries = Vec::new();
        for seq in 1..=3 {
            entries.push(pt_entry(seq, None, "nccl:all_reduce", "completed"));
            let p2p = if rank == 0 {
                "nccl:send 0->1"
            } else {
                "nccl:recv 1<-0"
            };
            entries.push(pt_entry(seq, Some(seq), p2p, "completed"));
        }
        let root = serde_json::json!({
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {},
            "entries": entries,
        });
        std::fs::write(
            dir.path().join(format!("nccl_trace_rank_{rank}")),
            root.to_string(),
        )
        .unwrap();
    }
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(d.verdict, Verdict::Healthy, "{}", render_text(&d));
    assert_eq!(d.world_size, Some(2));
}

fn pt_entry(seq: u64, p2p: Option<u64>, name: &str, state: &str) -> serde_json::Value {
    serde_json::json!({
        "record_id": seq * 2 - u64::from(p2p.is_none()) - 1,
        "pg_id": 0, "process_group": ["0", "default_pg"],
        "collective_seq_id": seq, "p2p_seq_id": p2p.unwrap_or(0), "is_p2p": p2p.is_some(),
        "profiling_name": name, "time_created_ns": BASE_NS + seq * 10 * MS,
        "input_sizes": [[8]], "input_dtypes": ["Float"], "output_sizes": [[8]], "output_dtypes": ["Float"],
        "state": state, "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0,
        "timeout_ms": 600000, "frames": [],
    })
}

#[test]
fn a_timeout_with_nothing_pending_blames_the_ranks_that_got_least_far() {
    // Dumped on a timeout, every collective completed: the ranks stopped
    // outside communication. The ranks behind the others are named, at the
    // collective they never entered.
    let dumps: Vec<Dump> = (0..4)
        .map(|r| dump(r, 4, history(r, if r == 2 { 6 } else { 7 }), "timeout"))
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(7), &[2]);
    assert!(d.findings[0].detail.contains("no rank is in a collective"));
    // The same dumps taken on request or at exit: a run between
    // collectives, healthy.
    let dumps: Vec<Dump> = (0..4)
        .map(|r| dump(r, 4, history(r, 7), "request"))
        .collect();
    assert_eq!(run(&dumps).verdict, Verdict::Healthy);
}

#[test]
fn control_characters_in_a_dump_never_reach_the_terminal() {
    let dumps: Vec<Dump> = (0..2)
        .map(|r| {
            let mut e = history(r, 3);
            e[2].collective = "all-reduce\u{1b}[2J\u{7}".into();
            if r == 1 {
                e[2].count = 512;
            }
            dump(r, 2, e, "timeout")
        })
        .collect();
    let text = render_text(&run(&dumps));
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(text.contains("all-reduce\\u001b[2J\\u0007"), "{text}");
    // A newline, a line separator or a zero-width space in a name forges
    // no line and hides nothing.
    let dumps: Vec<Dump> = (0..2)
        .map(|r| {
            let mut e = history(r, 3);
            e.push(blocked(r, 4, 1, Some(1 - r as i64)));
            e[3].pg = "0\nHEALTHY: nothing to see\u{2028}\u{200B}".into();
            let mut d = dump(r, 2, e, "timeout");
            d.groups[0].name = "0\nHEALTHY: nothing to see\u{2028}\u{200B}".into();
            d
        })
        .collect();
    let text = render_text(&run(&dumps));
    assert!(!text.lines().any(|l| l.starts_with("HEALTHY")), "{text}");
    assert!(
        !text.contains('\u{2028}') && !text.contains('\u{200B}'),
        "{text:?}"
    );
    assert!(
        text.contains("0\\u000aHEALTHY: nothing to see\\u2028\\u200b"),
        "{text}"
    );
}

/// Rank 1 entered seq 8 1.3 s late, past its peers' timeout: it finished
/// seq 8 (their data was there) and waits in seq 9, where ranks 0 and 2
/// never came, since they still wait on it in seq 8. The late rank is the
/// root cause, not the ranks missing from seq 9; without the lateness the
/// missing ranks stay first.
#[test]
fn ranks_missing_from_a_collective_while_waiting_on_a_late_rank_are_not_blamed() {
    let dumps = |late: bool| -> Vec<Dump> {
        (0..3)
            .map(|r| {
                let mut e = history(r, 7);
                if r == 1 {
                    let mut s8 = entry(r, 8, State::Completed);
                    if late {
                        s8.t_started_ns = s8.t_started_ns.map(|t| t + 1_300 * MS);
                    }
                    e.push(s8);
                    e.push(blocked(r, 9, 1, Some(0)));
                } else {
                    e.push(blocked(r, 8, 1, Some(1)));
                }
                dump(r, 3, e, "timeout")
            })
            .collect()
    };
    let d = run(&dumps(true));
    assert_root(&d, FindingKind::Late, Some(8), &[1]);
    let then = d
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::NotJoined)
        .unwrap();
    assert!(
        then.detail.ends_with(
            "they were still in seq 8, waiting on the ranks that entered it: those came late"
        ),
        "{}",
        then.detail
    );
    let d = run(&dumps(false));
    assert_root(&d, FindingKind::NotJoined, Some(9), &[0, 2]);
}

/// As above, in a ring: rank 2 waits in seq 8 on rank 0, which waits on the
/// late rank 1. Rank 2 is blocked behind it too, so the late rank is still
/// the root cause (the end-to-end run met this: ranks 0 and 2 blamed).
#[test]
fn ranks_waiting_in_a_ring_behind_a_late_rank_are_not_blamed() {
    let dumps: Vec<Dump> = (0..3)
        .map(|r| {
            let mut e = history(r, 7);
            match r {
                1 => {
                    let mut s8 = entry(r, 8, State::Completed);
                    s8.t_started_ns = s8.t_started_ns.map(|t| t + 1_300 * MS);
                    e.push(s8);
                    e.push(blocked(r, 9, 1, Some(0)));
                }
                0 => e.push(blocked(r, 8, 1, Some(1))),
                _ => e.push(blocked(r, 8, 1, Some(0))),
            }
            dump(r, 3, e, "timeout")
        })
        .collect();
    assert_root(&run(&dumps), FindingKind::Late, Some(8), &[1]);
}

/// Every rank stopped before its first collective of group 0 (after the
/// barrier group's seq 1): group 0 at seq 1 is named, not the barrier's
/// next seq. A member with no record of the group entered nothing: it is
/// not pending there.
#[test]
fn a_timeout_before_the_first_collective_names_seq_1() {
    let dumps: Vec<Dump> = (0..2)
        .map(|r| {
            let mut d = dump(r, 2, vec![barrier(r, 1, State::Completed)], "timeout");
            d.groups.push(Group {
                name: "barrier".into(),
                ranks: vec![0, 1],
            });
            d.status = vec![GroupStatus {
                group: "barrier".into(),
                entered: 1,
                started: 1,
                completed: 1,
            }];
            d
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::NotJoined, Some(1), &[0, 1]);
    assert_eq!(
        d.findings[0].pg.as_deref(),
        Some("0"),
        "{}",
        render_text(&d)
    );
    assert!(
        d.findings[0]
            .detail
            .contains("entered none of its collectives and never entered seq 1"),
        "{}",
        d.findings[0].detail
    );
}

/// A wait recorded on a peer that completed the collective (a step that
/// receives from several showed the first): no cycle, and the member that
/// called it and never started it is named.
#[test]
fn a_wait_on_a_rank_that_completed_points_past_it_to_the_unstarted_one() {
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut e = history(r, 2);
            e.push(match r {
                0 => blocked(r, 3, 0, Some(1)),
                1 => blocked(r, 3, 0, Some(2)),
                2 => entry(r, 3, State::Completed),
                _ => entry(r, 3, State::Scheduled),
            });
            dump(r, 4, e, "timeout")
        })
        .collect();
    let d = run(&dumps);
    assert_root(&d, FindingKind::Stuck, Some(3), &[3]);
    assert!(
        d.findings[0]
            .detail
            .contains("rank 3 called it and never started it"),
        "{}",
        d.findings[0].detail
    );
}

/// Ranks 2 and 3 went on in group h (seq 2, rooted at 2) and wait in group
/// 0; rank 0 waits on rank 1 in group z, which rank 1 never entered. Rank 0
/// is held up, not stopped: rank 1 alone is named, wherever else it lags.
#[test]
fn a_rank_waiting_elsewhere_is_not_named_where_it_lags() {
    let at = |e: &mut Entry, pg: &str, ms: u64| {
        e.pg = pg.into();
        e.t_scheduled_ns = BASE_NS + ms * MS;
        e.t_started_ns = e.t_started_ns.map(|_| BASE_NS + ms * MS);
        e.t_completed_ns = e.t_completed_ns.map(|_| BASE_NS + ms * MS + MS / 2);
    };
    let dumps: Vec<Dump> = (0..4)
        .map(|r| {
            let mut h1 = entry(r, 1, State::Completed);
            at(&mut h1, "h", 1);
            let mut e = vec![h1];
            if r >= 2 {
                let mut h2 = entry(r, 2, State::Completed);
                at(&mut h2, "h", 2);
                let mut w = blocked(r, 1, 0, Some(0));
                at(&mut w, "0", 10);
                e.extend([h2, w]);
            }
            if r == 0 {
                let mut z = blocked(r, 1, 0, Some(1));
                at(&mut z, "z", 10);
                e.push(z);
            }
            let mut d = dump(r, 4, e, "timeout");
            d.groups.push(Group {
                name: "h".into(),
                ranks: vec![0, 1, 2, 3],
            });
            d.groups.push(Group {
                name: "z".into(),
                ranks: vec![0, 1],
            });
            d
        })
        .collect();
    let d = run(&dumps);
    assert_eq!(d.culprits, [1], "{}", render_text(&d));
}
