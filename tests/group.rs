//! Grouped operations (`--group N`, `--group-mix`) end to end on the host
//! engine: every operation checked and its row written, the group's row
//! after them, faults landing in the operation they hit, bad requests
//! refused with exit 2.

use serde_json::Value;

mod common;
use common::{collbench, rows, run_json};

/// Checks that rows come as N operations then their group, and returns the groups.
fn groups(v: &Value, n: usize, what: &str) -> Vec<Value> {
    let rows = rows(v);
    assert_eq!(rows.len() % (n + 1), 0, "{what}: {} rows", rows.len());
    let mut out = Vec::new();
    for chunk in rows.chunks(n + 1) {
        let (ops, g) = chunk.split_at(n);
        let g = &g[0];
        assert_eq!(g["collective"], "group", "{what}: {g}");
        let members: Vec<&str> = g["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(members.len(), n, "{what}");
        let (mut bytes, mut busbw) = (0u64, 0.0);
        for (k, op) in ops.iter().enumerate() {
            assert_eq!(op["group_member"], k, "{what}: {op}");
            assert_eq!(op["collective"], members[k], "{what}");
            assert_eq!(op["placement"], g["placement"]);
            // One group, one time: every operation completes with it.
            assert_eq!(op["time_us"], g["time_us"], "{what}");
            bytes += op["bytes"].as_u64().unwrap();
            busbw += op["busbw_gbps"].as_f64().unwrap();
        }
        assert_eq!(g["bytes"], bytes, "{what}");
        let gb = g["busbw_gbps"].as_f64().unwrap();
        assert!(
            (gb - busbw).abs() <= 1e-9 * gb.max(1.0),
            "{what}: {gb} vs {busbw}"
        );
        out.push(g.clone());
    }
    out
}

#[test]
fn groups_are_bit_exact_on_1_2_3_5_and_8_ranks() {
    let mix = "all-reduce,all-gather,reduce-scatter,all-to-all-v,broadcast,send-recv,reduce";
    for n in ["1", "2", "3", "5", "8"] {
        // The same collective four times, every algorithm.
        let what = format!("all-reduce x4 on {n} ranks");
        let (code, v, err) = run_json(&[
            "all-reduce",
            "--group",
            "4",
            "--algo",
            "all",
            "--device",
            "host",
            "--ranks",
            n,
            "--sizes",
            "8B:256K:x16",
            "--op",
            "sum,max",
            "--dtype",
            "float,int32",
        ]);
        assert_eq!(code, 0, "{what}: {err}");
        let gs = groups(&v, 4, &what);
        assert!(gs.len() >= 3 * 2 * 2 * 2, "{what}: {}", gs.len());
        for g in &gs {
            assert_eq!(g["wrong"], 0, "{what}: {g}");
        }
        // Every kind at once, uneven members included.
        let what = format!("a mix of seven on {n} ranks");
        let (code, v, err) = run_json(&[
            "all",
            "--group-mix",
            mix,
            "--device",
            "host",
            "--ranks",
            n,
            "--sizes",
            "1K:1M:x32",
            "--split",
            "skew:3",
            "--op",
            "sum,min",
        ]);
        assert_eq!(code, 0, "{what}: {err}");
        let gs = groups(&v, 7, &what);
        assert_eq!(gs.len(), 3 * 2 * 2, "{what}");
        for g in &gs {
            assert_eq!(g["wrong"], 0, "{what}: {g}");
            assert_eq!(g["algo"], "mixed");
        }
        for r in rows(&v) {
            assert_eq!(r["wrong"], 0, "{what}: {r}");
        }
    }
}

#[test]
fn a_corrupted_operation_is_named_in_its_row_and_the_group_s() {
    let (code, v, err) = run_json(&[
        "all-gather",
        "--group-mix",
        "all-gather,all-reduce",
        "--group",
        "4",
        "--device",
        "host",
        "--ranks",
        "3",
        "--sizes",
        "4K",
        "--inject",
        "corrupt:rank=1",
        "--placement",
        "out",
    ]);
    assert_eq!(code, 1);
    let rows = rows(&v);
    assert_eq!(rows.len(), 5);
    // The corruption lands in the first operation's output.
    assert!(rows[0]["wrong"].as_i64().unwrap() > 0, "{}", rows[0]);
    for r in &rows[1..4] {
        assert_eq!(r["wrong"], 0, "{r}");
    }
    assert_eq!(rows[4]["wrong"], rows[0]["wrong"]);
    let first = rows[4]["first_error"].as_str().unwrap();
    assert!(
        first.starts_with("operation 0 (all-gather): rank 1"),
        "{first}"
    );
    // Counted as the table shows it: the group's one line, not its
    // operations' rows too.
    assert!(
        err.contains("collbench: 1 row(s) had wrong or NaN/Inf values"),
        "{err}"
    );
}

#[test]
fn a_hang_inside_a_group_is_named_by_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let out = collbench()
        .args([
            "all-reduce",
            "--group-mix",
            "all-reduce,all-gather",
            "--device",
            "host",
        ])
        .args([
            "--ranks",
            "3",
            "--sizes",
            "1K",
            "--inject",
            "hang:rank=1,seq=5",
        ])
        .args([
            "--timeout",
            "2s",
            "--dump-dir",
            dir.path().to_str().unwrap(),
            "-q",
        ])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let out = collbench()
        .args(["analyze", dir.path().to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &d["findings"][0];
    assert_eq!(f["seq"], 5, "{d}");
    assert_eq!(f["kind"], "not-joined", "{f}");
    assert_eq!(f["ranks"], serde_json::json!([1]), "{f}");
    assert!(f["detail"].as_str().unwrap().contains("(group)"), "{f}");
}

#[test]
fn bad_groups_exit_2_with_the_reason() {
    let mix_of_65 = vec!["all-reduce"; 65].join(",");
    for (args, want) in [
        (
            vec!["all-reduce", "--group-mix", mix_of_65.as_str()],
            "--group-mix names 65 collectives: a group has 2 to 64 operations",
        ),
        (vec!["all-reduce", "--group", "1"], "--group"),
        (vec!["all-reduce", "--group", "65"], "--group"),
        (
            vec!["all-reduce", "--group", "2", "--engine", "builtin,mpi"],
            "MPI has no group",
        ),
        (
            vec!["all-gather", "--group-mix", "all-reduce,broadcast"],
            "does not include all-gather",
        ),
        (vec!["all-reduce", "--group-mix", "all-reduce"], "2 or more"),
        (
            vec!["all-reduce", "--group-mix", "all-reduce,bogus"],
            "bogus",
        ),
        (
            vec![
                "all-reduce",
                "--group-mix",
                "all-reduce,all-gather",
                "--op",
                "premulsum",
            ],
            "premulsum",
        ),
        (vec!["links", "--group", "2"], "--group"),
        (
            vec!["tune", "--group", "2", "--output", "/tmp/never.json"],
            "--group",
        ),
    ] {
        let out = collbench()
            .args(&args)
            .args(["--device", "host", "--ranks", "2", "--sizes", "1K"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!std::path::Path::new("/tmp/never.json").exists());
}

/// A send-recv member of a group says `root: -1`, as a lone send-recv
/// does, whatever root the group's rooted members take.
#[test]
fn a_send_recv_member_has_no_root() {
    let (code, v, err) = run_json(&[
        "all",
        "--device",
        "host",
        "--ranks",
        "3",
        "--group-mix",
        "broadcast,send-recv",
        "--root",
        "2",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows = rows(&v);
    let root_of = |c: &str| -> Vec<i64> {
        rows.iter()
            .filter(|r| r["collective"] == c)
            .map(|r| r["root"].as_i64().unwrap())
            .collect()
    };
    assert!(root_of("send-recv").iter().all(|&r| r == -1), "{v}");
    assert!(root_of("broadcast").iter().all(|&r| r == 2), "{v}");
    assert!(!root_of("send-recv").is_empty());
}

/// A member collective that lacks the algorithm `--algo` chose runs
/// auto's pick: the rows show it, and a note says so (on stderr and in
/// the results); members that have it run it, without a note.
#[test]
fn a_member_without_the_chosen_algorithm_is_noted() {
    let (code, v, err) = run_json(&[
        "all-reduce",
        "--group",
        "3",
        "--group-mix",
        "all-reduce,all-to-all,broadcast",
        "--algo",
        "ring,tree",
        "--device",
        "host",
        "--ranks",
        "3",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 0, "{err}");
    let note = "--algo: all-to-all has no ring or tree algorithm, so the group's all-to-all operations ran auto's pick (direct)";
    assert_eq!(err.matches(note).count(), 1, "{err}");
    let notes: Vec<&str> = v["meta"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        notes.iter().filter(|n| n.contains("--algo:")).count(),
        1,
        "{notes:?}"
    );
    assert!(notes.contains(&note), "{notes:?}");
    for r in rows(&v) {
        match r["collective"].as_str().unwrap() {
            "all-to-all" => assert_eq!(r["algo"], "direct", "{r}"),
            "all-reduce" | "broadcast" => {
                assert!(r["algo"] == "ring" || r["algo"] == "tree", "{r}")
            }
            _ => {}
        }
    }
    // Every member has direct: nothing to say.
    let (code, _, err) = run_json(&[
        "all-reduce",
        "--group",
        "2",
        "--group-mix",
        "all-reduce,all-to-all",
        "--algo",
        "direct",
        "--device",
        "host",
        "--ranks",
        "3",
        "--sizes",
        "1K",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("--algo:"), "{err}");
}

/// The same mix led by a member without the algorithm: the group runs it
/// where its members have it, as when another member leads (it was
/// refused, "not an algorithm for all-to-all-v", or found nothing to run).
#[test]
fn a_mix_led_by_a_member_without_the_algorithm_still_runs_it() {
    for (sub, mix) in [
        ("all-to-all-v", "all-to-all-v,all-reduce"),
        ("all-reduce", "all-reduce,all-to-all-v"),
    ] {
        let (code, v, err) = run_json(&[
            sub,
            "--group",
            "2",
            "--group-mix",
            mix,
            "--algo",
            "tree",
            "--device",
            "host",
            "--ranks",
            "3",
            "--sizes",
            "1K",
        ]);
        assert_eq!(code, 0, "{mix}: {err}");
        assert!(
            err.contains("all-to-all-v has no tree algorithm, so the group's all-to-all-v operations ran auto's pick (direct)"),
            "{mix}: {err}"
        );
        let algo = |c: &str| -> Vec<String> {
            rows(&v)
                .iter()
                .filter(|r| r["collective"] == c)
                .map(|r| r["algo"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(algo("all-reduce"), ["tree", "tree"], "{mix}");
        assert_eq!(algo("all-to-all-v"), ["direct", "direct"], "{mix}");
    }
}

/// `all --group 2` makes a group of each collective: each is a section of
/// its own, headed by its operations, in the table, Markdown and
/// nccl-tests text (they had been one section headed by the first).
#[test]
fn each_groups_operations_head_a_section_of_their_own() {
    let colls = [
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "broadcast",
        "reduce",
        "all-to-all",
        "gather",
        "scatter",
        "send-recv",
    ];
    for (format, head) in [
        ("table", "# group of 2: {c}, {c} (builtin engine)"),
        ("markdown", "### group of 2: {c}, {c} (builtin engine)"),
    ] {
        let out = collbench()
            .args(["all", "--device", "host", "--ranks", "2", "--group", "2"])
            .args(["--sizes", "64B:512B:x8", "-n", "1", "-w", "0"])
            .args(["--format", format])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}");
        for c in colls {
            let want = head.replace("{c}", c);
            assert_eq!(text.matches(&want).count(), 1, "{format} {want}:\n{text}");
        }
    }
    let out = collbench()
        .args(["all", "--device", "host", "--ranks", "2", "--group", "2"])
        .args(["--sizes", "64B:512B:x8", "-n", "1", "-w", "0"])
        .args(["--format", "nccl-tests"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("# Collective test starting").count(),
        9,
        "{text}"
    );
}
