//! Issue 13's verdicts for `analyze`: a folder mixing runs is split into
//! runs, each diagnosed on its own; dumps written by a signal or on request
//! while a healthy run was moving are no hang; the world is the union of the
//! members seen (gloo's `pg_config` is not trusted), and a finding names its
//! group as dumped with the group's description beside it.

use std::path::Path;

use assert_cmd::Command;
use collbench::analyze::{analyze_paths, render_text, Diagnosis, FindingKind, Verdict};
use serde_json::{json, Value};
use tempfile::TempDir;

const BASE_NS: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// A collbench all-reduce entry: seq entered at seq × 10 ms, 1 ms long when completed.
fn entry(seq: u64, state: &str) -> Value {
    let t = BASE_NS + seq * 10 * MS;
    let mut e = json!({"pg": "0", "seq": seq, "collective": "all-reduce", "algo": "ring",
        "dtype": "f32", "count": 1024, "bytes": 4096, "state": state, "iteration": "timed",
        "t_scheduled_ns": t});
    if state != "scheduled" {
        e["t_started_ns"] = json!(t + 5_000);
    }
    if state == "completed" {
        e["t_completed_ns"] = json!(t + MS);
    }
    e
}

/// Seqs 1..=done completed, then `extra`.
fn entries(done: u64, extra: &[Value]) -> Vec<Value> {
    let mut v: Vec<Value> = (1..=done).map(|s| entry(s, "completed")).collect();
    v.extend_from_slice(extra);
    v
}

/// A started entry whose channel 0 waits to receive from `peer`.
fn waiting(seq: u64, peer: i64) -> Value {
    let mut e = entry(seq, "started");
    e["channels"] = json!([{"channel": 0, "steps_total": 6, "last_step_done": 1,
        "waiting_on": {"peer": peer, "what": "recv"}}]);
    e
}

struct Run<'a> {
    id: Option<&'a str>,
    pid: u32,
    world: usize,
    command: &'a str,
    reason: &'a str,
    /// When the dumps were taken.
    at_ns: u64,
}

fn dump(run: &Run, rank: usize, entries: Vec<Value>) -> Value {
    let mut d = json!({
        "schema": "collbench.fr/1", "host": "node0", "pid": run.pid, "rank": rank,
        "world_size": run.world, "device": "host", "command": run.command, "version": "0.1.0",
        "reason": run.reason, "clocks": {"wall_ns": run.at_ns, "mono_ns": 1}, "capacity": 64,
        "groups": [{"name": "0", "ranks": (0..run.world).collect::<Vec<_>>()}],
        "entries": entries,
    });
    if let Some(id) = run.id {
        d["run_id"] = json!(id);
    }
    d
}

fn write(dir: &Path, name: &str, v: &Value) {
    std::fs::write(dir.join(name), serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

fn analyze(dir: &Path) -> Diagnosis {
    analyze_paths(&[dir.to_path_buf()]).unwrap()
}

/// `collbench analyze DIR [--json]`: exit code and stdout.
fn cli(dir: &Path, json: bool) -> (i32, String) {
    let mut cmd = Command::cargo_bin("collbench").unwrap();
    cmd.arg("analyze").arg(dir);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const HEALTHY_AT: u64 = BASE_NS + 200 * MS;

/// Two single-process runs of different world sizes share a folder: a
/// healthy one (pid 7, 2 ranks) and one where rank 2 never joined seq 6
/// (pid 9, 4 ranks).
fn two_runs(dir: &Path) {
    let a = Run {
        id: None,
        pid: 7,
        world: 2,
        command: "collbench all-reduce --ranks 2",
        reason: "exit",
        at_ns: HEALTHY_AT,
    };
    for r in 0..2 {
        write(
            dir,
            &format!("a-rank{r}.json"),
            &dump(&a, r, entries(8, &[])),
        );
    }
    let b = Run {
        id: None,
        pid: 9,
        world: 4,
        command: "collbench all-reduce --ranks 4",
        reason: "timeout",
        at_ns: BASE_NS + 60_000 * MS,
    };
    for r in 0..4 {
        let extra = if r == 2 {
            vec![]
        } else {
            vec![waiting(6, ((r + 3) % 4) as i64)]
        };
        write(
            dir,
            &format!("b-rank{r}.json"),
            &dump(&b, r, entries(5, &extra)),
        );
    }
}

#[test]
fn a_folder_mixing_runs_diagnoses_each_run_on_its_own() {
    let dir = TempDir::new().unwrap();
    two_runs(dir.path());
    let d = analyze(dir.path());
    let text = render_text(&d);
    assert_eq!(d.runs.len(), 2, "{text}");
    let (a, b) = (&d.runs[0], &d.runs[1]);
    assert_eq!(
        (a.pid, a.world_size, a.verdict, a.ranks_found.clone()),
        (Some(7), Some(2), Verdict::Healthy, vec![0, 1]),
        "{text}"
    );
    assert_eq!(
        (b.pid, b.world_size, b.verdict, b.culprits.clone()),
        (Some(9), Some(4), Verdict::Problem, vec![2]),
        "{text}"
    );
    assert_eq!(b.findings[0].kind, FindingKind::NotJoined);
    // Neither run blames the other's ranks as missing.
    assert!(
        a.ranks_missing.is_empty() && b.ranks_missing.is_empty(),
        "{text}"
    );
    // The top level: the problem run's verdict, culprits, ranks and world,
    // findings labelled.
    assert_eq!((d.verdict, d.culprits.clone()), (Verdict::Problem, vec![2]));
    assert_eq!(d.run.as_deref(), Some(b.label.as_str()));
    assert_eq!(
        (d.ranks_found.clone(), d.world_size),
        (vec![0, 1, 2, 3], Some(4))
    );
    assert_eq!(d.findings[0].run.as_deref(), Some(b.label.as_str()));
    assert!(d.ignored.is_empty(), "{:?}", d.ignored);
    // The text names each run and its verdict.
    assert!(text.contains("mix 2 runs"), "{text}");
    assert!(
        text.contains(&format!("{}: healthy", a.label)) && a.label.contains("pid 7"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}: PROBLEM: not-joined", b.label)),
        "{text}"
    );

    // The command line: exit 1 (a run has a problem), `runs` in the JSON.
    let (code, out) = cli(dir.path(), true);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for key in [
        "run_id",
        "pid",
        "world_size",
        "command",
        "verdict",
        "culprits",
        "findings",
    ] {
        assert!(runs[1].get(key).is_some(), "{key} missing: {}", runs[1]);
    }
    assert_eq!(runs[1]["command"], "collbench all-reduce --ranks 4");
    assert_eq!(runs[1]["verdict"], "problem");
    assert_eq!(runs[0]["verdict"], "healthy");
}

#[test]
fn runs_are_told_apart_by_id_and_one_run_keeps_todays_document() {
    let dir = TempDir::new().unwrap();
    // Two multi-process runs (one process per rank) of the same command, with ids.
    for (id, pid0) in [("r-1", 100), ("r-2", 200)] {
        for r in 0..2 {
            let run = Run {
                id: Some(id),
                pid: pid0 + r as u32,
                world: 2,
                command: "collbench all-reduce",
                reason: "exit",
                at_ns: HEALTHY_AT,
            };
            write(
                dir.path(),
                &format!("{id}-rank{r}.json"),
                &dump(&run, r, entries(4, &[])),
            );
        }
    }
    let d = analyze(dir.path());
    let ids: Vec<Option<&str>> = d.runs.iter().map(|r| r.run_id.as_deref()).collect();
    assert_eq!(ids, vec![Some("r-1"), Some("r-2")], "{}", render_text(&d));
    assert!(d
        .runs
        .iter()
        .all(|r| r.pid.is_none() && r.ranks_found == [0, 1]));
    assert_eq!(d.verdict, Verdict::Healthy);
    let (code, _) = cli(dir.path(), false);
    assert_eq!(code, 0);

    // One run: no `runs` key, as before.
    let one = TempDir::new().unwrap();
    for r in 0..2 {
        let run = Run {
            id: Some("solo"),
            pid: 5,
            world: 2,
            command: "collbench all-reduce",
            reason: "exit",
            at_ns: HEALTHY_AT,
        };
        write(
            one.path(),
            &format!("rank{r}.json"),
            &dump(&run, r, entries(4, &[])),
        );
    }
    let (code, out) = cli(one.path(), true);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(v.get("runs").is_none(), "{out}");
    assert_eq!(
        (v["verdict"].clone(), v["world_size"].clone()),
        (json!("healthy"), json!(2))
    );
}

#[test]
fn a_folder_reused_with_fewer_ranks_is_two_runs_not_missing_ranks() {
    let dir = TempDir::new().unwrap();
    // An old 4-rank run's rank2/rank3 survive; a new 2-rank run wrote rank0/rank1.
    let old = Run {
        id: None,
        pid: 40,
        world: 4,
        command: "collbench all-reduce --ranks 4",
        reason: "exit",
        at_ns: HEALTHY_AT,
    };
    let new = Run {
        pid: 41,
        world: 2,
        command: "collbench all-reduce --ranks 2",
        ..old
    };
    for r in 0..2 {
        write(
            dir.path(),
            &format!("rank{r}.json"),
            &dump(&new, r, entries(3, &[])),
        );
    }
    for r in 2..4 {
        write(
            dir.path(),
            &format!("rank{r}.json"),
            &dump(&old, r, entries(3, &[])),
        );
    }
    let d = analyze(dir.path());
    let text = render_text(&d);
    assert_eq!(d.runs.len(), 2, "{text}");
    let new_run = d.runs.iter().find(|r| r.pid == Some(41)).unwrap();
    let old_run = d.runs.iter().find(|r| r.pid == Some(40)).unwrap();
    assert_eq!(
        (new_run.verdict, new_run.world_size),
        (Verdict::Healthy, Some(2))
    );
    // The old run really is incomplete: its ranks 0 and 1 were overwritten.
    assert_eq!(old_run.ranks_missing, vec![0, 1], "{text}");
    // The top level speaks of one run, the lead (the old run, its problem):
    // no rank is both found and missing there.
    assert_eq!(d.run.as_deref(), Some(old_run.label.as_str()), "{text}");
    assert_eq!(
        (d.ranks_found.clone(), d.ranks_missing.clone()),
        (vec![2, 3], vec![0, 1]),
        "{text}"
    );
    assert_eq!(d.world_size, Some(4));
}

/// A healthy 4-rank run dumped while moving: rank 0 is already in seq 7 and
/// waits on rank 3, the others are still in seq 6, some of them waiting.
fn moving(reason: &str, at_ns: u64) -> TempDir {
    let dir = TempDir::new().unwrap();
    let run = Run {
        id: None,
        pid: 77,
        world: 4,
        command: "collbench all-reduce",
        reason,
        at_ns,
    };
    for r in 0..4usize {
        let extra = match r {
            0 => vec![waiting(7, 3)],
            1 => vec![entry(6, "completed"), entry(7, "scheduled")],
            _ => vec![waiting(6, (r - 1) as i64)],
        };
        write(
            dir.path(),
            &format!("rank{r}.json"),
            &dump(&run, r, entries(5, &extra)),
        );
    }
    dir
}

#[test]
fn a_healthy_run_dumped_by_a_signal_or_on_request_is_healthy() {
    // Dumped 2 ms after seq 7 began: work in flight.
    let at = BASE_NS + 72 * MS;
    for reason in ["signal", "request"] {
        let dir = moving(reason, at);
        let d = analyze(dir.path());
        let text = render_text(&d);
        assert_eq!(d.verdict, Verdict::Healthy, "{reason}: {text}");
        assert!(d.findings.is_empty(), "{text}");
        assert!(
            d.notes.iter().any(|n| n.contains("not a hang")),
            "{reason}: {:?}",
            d.notes
        );
        assert!(
            text.starts_with("HEALTHY") && text.contains("note: "),
            "{text}"
        );
        let (code, _) = cli(dir.path(), false);
        assert_eq!(code, 0, "{reason}");
    }
}

#[test]
fn a_hung_run_interrupted_by_hand_is_still_a_hang() {
    // The same picture, but dumped by a signal a minute after seq 7 began.
    let dir = moving("signal", BASE_NS + 60_000 * MS);
    let d = analyze(dir.path());
    assert_eq!(d.verdict, Verdict::Problem, "{}", render_text(&d));
    assert!(d.notes.is_empty());
    // The same dumps written by the watchdog's timeout: a problem whatever the time.
    let dir = moving("timeout", BASE_NS + 72 * MS);
    assert_eq!(analyze(dir.path()).verdict, Verdict::Problem);
}

/// A PyTorch JSON entry of group `pg` (`desc`) at `seq`.
fn pt_entry(pg: &str, desc: &str, seq: u64, state: &str) -> Value {
    json!({
        "record_id": seq, "pg_id": pg.parse::<u64>().unwrap(), "process_group": [pg, desc],
        "collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": false,
        "profiling_name": "gloo:all_reduce", "time_created_ns": BASE_NS + seq * 10 * MS,
        "input_sizes": [[8]], "input_dtypes": ["Float"], "output_sizes": [[8]], "output_dtypes": ["Float"],
        "state": state, "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0,
        "timeout_ms": 6000, "frames": [],
    })
}

#[test]
fn pytorch_subgroups_world_is_the_union_of_members_and_groups_keep_their_names() {
    // 6 ranks; sub_a = group "1" = ranks 0-2, sub_b = group "2" = ranks 3-5.
    // Like real gloo dumps, pg_config has one entry keyed "" holding one
    // group's ranks (here 0-2: read as the world, that made "a world of 3").
    // Rank 4 never joins sub_b's seq 3.
    let dir = TempDir::new().unwrap();
    for rank in 0..6usize {
        let (sub, desc) = if rank < 3 {
            ("1", "sub_a")
        } else {
            ("2", "sub_b")
        };
        let mut list: Vec<Value> = (1..=2)
            .map(|s| pt_entry("0", "default_pg", s, "completed"))
            .collect();
        list.extend((1..=2).map(|s| pt_entry(sub, desc, s, "completed")));
        if sub == "2" && rank != 4 {
            list.push(pt_entry(sub, desc, 3, "started"));
        }
        let d = json!({
            "version": "2.10",
            "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1, 2]"}},
            "pg_status": {"0": {}, sub: {}},
            "entries": list,
        });
        write(dir.path(), &format!("rank{rank}"), &d);
    }
    let d = analyze(dir.path());
    let text = render_text(&d);
    assert_eq!(d.world_size, Some(6), "{text}");
    assert_eq!(d.ranks_found, (0..6).collect::<Vec<_>>(), "{text}");
    assert!(d.ranks_missing.is_empty(), "{text}");
    assert!(d.runs.is_empty(), "one PyTorch run: {text}");
    let f = &d.findings[0];
    assert_eq!(
        (f.kind, f.pg.as_deref(), f.pg_desc.as_deref(), f.seq),
        (FindingKind::NotJoined, Some("2"), Some("sub_b"), Some(3)),
        "{text}"
    );
    assert_eq!(d.culprits, vec![4], "{text}");
    assert!(text.contains("dumps of 6 ranks of a world of 6"), "{text}");
    assert!(text.contains("group 2 (sub_b)"), "{text}");
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(
        (
            v["findings"][0]["pg"].clone(),
            v["findings"][0]["pg_desc"].clone()
        ),
        (json!("2"), json!("sub_b"))
    );
}

/// A dump whose channel waits on a peer outside its world is refused,
/// not shown as waiting on a rank that does not exist.
#[test]
fn a_wait_on_a_peer_outside_the_world_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = Run {
        id: Some("r1"),
        pid: 7,
        world: 2,
        command: "collbench all-reduce --ranks 2",
        reason: "timeout",
        at_ns: HEALTHY_AT,
    };
    write(
        dir.path(),
        "rank0.json",
        &dump(&run, 0, entries(3, &[waiting(4, 99_999)])),
    );
    write(
        dir.path(),
        "rank1.json",
        &dump(&run, 1, entries(3, &[waiting(4, -1)])),
    );
    let d = analyze_paths(&[dir.path().to_path_buf()]);
    let err = d
        .map(|d| format!("{:?}", d.unreadable))
        .unwrap_or_else(|e| e.to_string());
    assert!(
        err.contains("seq 4 waits on peer 99999, outside its world of 2"),
        "{err}"
    );
    assert!(
        err.contains("seq 4 waits on peer -1, outside its world of 2"),
        "{err}"
    );
    // Progress past a channel's steps, and a dead rank outside the world,
    // are refused alike.
    let mut past = waiting(4, 1);
    past["channels"][0]["last_step_done"] = json!(9);
    let mut none = waiting(4, 1);
    none["channels"][0]["steps_total"] = json!(0);
    none["channels"][0]["last_step_done"] = json!(0);
    let mut lost = dump(&run, 1, entries(3, &[]));
    lost["lost"] = json!({"rank": 5, "how": "killed by signal 9 (SIGKILL)"});
    write(
        dir.path(),
        "rank0.json",
        &dump(&run, 0, entries(3, &[past])),
    );
    write(dir.path(), "rank1.json", &lost);
    write(
        dir.path(),
        "other.json",
        &dump(&run, 1, entries(3, &[none])),
    );
    let err = analyze_paths(&[dir.path().to_path_buf()])
        .map(|d| format!("{:?}", d.unreadable))
        .unwrap_or_else(|e| e.to_string());
    for want in [
        "seq 4 channel 0: step 9 done of 6 (expected -1 to 5)",
        "seq 4 channel 0: step 0 done of 0 (expected -1 to -1)",
        "it says rank 5 died, outside its world of 2",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
}
