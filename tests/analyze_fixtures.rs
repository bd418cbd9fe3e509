//! The analyzer on real PyTorch flight-recorder dumps (gloo, 4 ranks), in both
//! the pickle and the JSON form: each must reach the diagnosis in the case's
//! `expected.json`.
//!
//! The fixtures live in `../shared/fixtures/pytorch-fr` beside the repository.
//! Without them these tests say so and pass, unless
//! `COLLBENCH_REQUIRE_FIXTURES=1`, which makes their absence a failure.

use std::path::{Path, PathBuf};

use collbench::analyze::{analyze_paths, load_bytes, load_paths, Format, Limits, Verdict};

fn fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pytorch-fr");
    if dir.is_dir() {
        return Some(dir);
    }
    let required = std::env::var("COLLBENCH_REQUIRE_FIXTURES").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "fixtures missing at {} (COLLBENCH_REQUIRE_FIXTURES=1)",
        dir.display()
    );
    eprintln!("SKIPPED: fixtures not found at {}", dir.display());
    None
}

/// The first finding's kind ("healthy" when none), the culprits and the seq.
fn outcome(dir: &Path) -> serde_json::Value {
    let d = analyze_paths(&[dir.to_path_buf()]).unwrap();
    let first = d.findings.first();
    serde_json::json!({
        "kind": first.map_or("healthy", |f| f.kind.name()),
        "culprits": d.culprits,
        "seq": first.and_then(|f| f.seq),
    })
}

fn check_case(case: &str) {
    let Some(root) = fixtures() else { return };
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(case).join("expected.json")).unwrap())
            .unwrap();
    for form in ["json", "pickle"] {
        let got = outcome(&root.join(case).join(form));
        assert_eq!(got, expected, "{case}/{form}");
    }
}

#[test]
fn ok_4_is_healthy() {
    check_case("ok-4");
}

#[test]
fn skip_4_blames_rank_2_for_not_joining_seq_11() {
    check_case("skip-4");
}

#[test]
fn skip_4_details() {
    let Some(root) = fixtures() else { return };
    for form in ["json", "pickle"] {
        let d = analyze_paths(&[root.join("skip-4").join(form)]).unwrap();
        assert_eq!(d.verdict, Verdict::Problem);
        assert_eq!(d.exit_code(), 1);
        assert_eq!(d.ranks_found, vec![0, 1, 2, 3]);
        assert!(d.ranks_missing.is_empty());
        assert_eq!(d.world_size, Some(4));
        assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
        assert_eq!(d.findings[0].pg.as_deref(), Some("0"));
        assert_eq!(d.findings[0].pg_desc.as_deref(), Some("default_pg"));
        let text = collbench::analyze::render_text(&d);
        assert!(
            text.starts_with(
                "PROBLEM: not-joined in group 0 (default_pg) at seq 11; culprit: rank 2"
            ),
            "{text}"
        );
    }
}

#[test]
fn pickle_and_json_forms_hold_the_same_operations() {
    let Some(root) = fixtures() else { return };
    for case in ["ok-4", "skip-4"] {
        let json = load_paths(&[root.join(case).join("json")], &Limits::default());
        let pickle = load_paths(&[root.join(case).join("pickle")], &Limits::default());
        assert!(json.unreadable.is_empty() && pickle.unreadable.is_empty());
        assert_eq!(json.dumps().count(), 4);
        for (j, p) in json.dumps().zip(pickle.dumps()) {
            assert_eq!(
                (j.format, p.format),
                (Format::PytorchJson, Format::PytorchPickle)
            );
            assert_eq!((j.rank, &j.groups), (p.rank, &p.groups));
            let ops = |d: &collbench::analyze::RankDump| {
                d.records
                    .iter()
                    .map(|r| {
                        (
                            r.pg.clone(),
                            r.seq,
                            r.op.clone(),
                            r.input_sizes.clone(),
                            r.output_dtypes.clone(),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            // The pickle of skip-4 was written while the last collective was in
            // flight, the JSON a moment later: compare the common prefix.
            let (oj, op) = (ops(j), ops(p));
            let n = oj.len().min(op.len());
            assert!(n >= 10);
            assert_eq!(oj[..n], op[..n], "{case} rank {}", j.rank);
        }
    }
}

#[test]
fn a_case_directory_reads_both_forms_once_each_rank() {
    let Some(root) = fixtures() else { return };
    let d = analyze_paths(&[root.join("skip-4")]).unwrap();
    assert_eq!(d.culprits, vec![2]);
    // expected.json is JSON but not a dump; the second form of each rank is ignored.
    assert_eq!(d.unreadable.len(), 1, "{:#?}", d.unreadable);
    assert!(d.unreadable[0].path.ends_with("expected.json"));
    assert_eq!(d.ignored.len(), 4);
}

#[test]
fn damaged_fixture_pickles_are_errors_never_panics() {
    let Some(root) = fixtures() else { return };
    let path = root.join("skip-4/pickle/rank2");
    let bytes = std::fs::read(&path).unwrap();
    let limits = Limits::default();
    assert!(load_bytes(&bytes, &path, &limits).is_ok());
    for len in 0..bytes.len() {
        let err = load_bytes(&bytes[..len], &path, &limits);
        assert!(err.is_err(), "a prefix of {len} bytes was accepted");
    }
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3000 {
        let mut damaged = bytes.clone();
        for _ in 0..4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = usize::try_from(state % damaged.len() as u64).unwrap();
            damaged[at] = (state >> 32) as u8;
        }
        let _ = load_bytes(&damaged, &path, &limits);
    }
}

/// Both real runs copied into one folder, each in both forms: two runs,
/// told apart by their operations' creation times; the hang of skip-4 is
/// not masked by the healthy ok-4, and the top level speaks of skip-4.
#[test]
fn two_pytorch_runs_in_one_folder_are_diagnosed_apart() {
    let Some(root) = fixtures() else { return };
    let dir = tempfile::TempDir::new().unwrap();
    for case in ["ok-4", "skip-4"] {
        for form in ["json", "pickle"] {
            for rank in 0..4 {
                std::fs::copy(
                    root.join(case).join(form).join(format!("rank{rank}")),
                    dir.path().join(format!("{case}-{form}-rank{rank}")),
                )
                .unwrap();
            }
        }
    }
    let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
    let text = collbench::analyze::render_text(&d);
    assert_eq!(d.runs.len(), 2, "{text}");
    // skip-4 ran first (its operations are older): it comes first, a problem.
    let (skip, ok) = (&d.runs[0], &d.runs[1]);
    assert_eq!(
        (
            skip.verdict,
            skip.culprits.clone(),
            skip.ranks_found.clone()
        ),
        (Verdict::Problem, vec![2], vec![0, 1, 2, 3]),
        "{text}"
    );
    assert_eq!(skip.findings[0].seq, Some(11), "{text}");
    assert_eq!((ok.verdict, ok.ranks_found.len()), (Verdict::Healthy, 4));
    assert_ne!(skip.label, ok.label);
    assert!(skip.label.starts_with("pytorch run from 2026-"), "{text}");
    // Every kept dump is from its own case; the other form of each rank is ignored.
    let case_of = |label: &str| {
        d.per_rank
            .iter()
            .filter(|r| r.run.as_deref() == Some(label))
            .map(|r| r.path.contains("skip-4"))
            .collect::<Vec<_>>()
    };
    assert_eq!(case_of(&skip.label), vec![true; 4], "{text}");
    assert_eq!(case_of(&ok.label), vec![false; 4], "{text}");
    assert_eq!(d.ignored.len(), 8, "{:?}", d.ignored);
    // The top level is skip-4's.
    assert_eq!(d.run.as_deref(), Some(skip.label.as_str()));
    assert_eq!((d.verdict, d.exit_code()), (Verdict::Problem, 1));
    assert_eq!(d.culprits, vec![2]);
    assert_eq!(d.findings[0].run.as_deref(), Some(skip.label.as_str()));
    assert!(text.contains("mix 2 runs"), "{text}");
}

/// Point-to-point operations on the genuine dumps: a send rank 0 waits in
/// whose recv rank 1 never posted names rank 1; a recv rank 1 posted of
/// another size names both; a recv rank 1 completed is no finding.
#[test]
fn point_to_point_waits_are_matched_to_the_peer() {
    let Some(root) = fixtures() else { return };
    let src = root.join("ok-4/json");
    let load = |r: usize| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(src.join(format!("rank{r}"))).unwrap()).unwrap()
    };
    let p2p = |name: &str, shape: serde_json::Value, state: &str| {
        let mut e = load(0)["entries"][0].clone();
        e["profiling_name"] = format!("gloo:{name}").into();
        e["is_p2p"] = true.into();
        e["p2p_seq_id"] = 1.into();
        e["collective_seq_id"] = 0.into();
        e["input_sizes"] = serde_json::json!([shape]);
        e["output_sizes"] = serde_json::json!([shape]);
        e["state"] = state.into();
        e
    };
    let case = |rank0: serde_json::Value, rank1: Option<serde_json::Value>| {
        let dir = tempfile::tempdir().unwrap();
        for r in 0..4 {
            let mut d = load(r);
            for e in d["entries"].as_array_mut().unwrap() {
                e["state"] = "completed".into();
            }
            let extra = match r {
                0 => Some(rank0.clone()),
                1 => rank1.clone(),
                _ => None,
            };
            if let Some(e) = extra {
                d["entries"].as_array_mut().unwrap().push(e);
            }
            std::fs::write(dir.path().join(format!("rank{r}")), d.to_string()).unwrap();
        }
        let d = analyze_paths(&[dir.path().to_path_buf()]).unwrap();
        let first = d
            .findings
            .first()
            .map(|f| (f.kind.name(), f.detail.clone()));
        (d.culprits.clone(), first)
    };
    let send = p2p("send 0->1", serde_json::json!([1024]), "started");
    let (culprits, first) = case(send.clone(), None);
    assert_eq!(culprits, [1]);
    let (kind, detail) = first.unwrap();
    assert_eq!(kind, "not-joined");
    assert!(
        detail.contains("rank 0 waits in a send to rank 1") && detail.contains("never posted"),
        "{detail}"
    );
    let recv = |shape: serde_json::Value, state| p2p("recv 1<-0", shape, state);
    let (culprits, first) = case(
        send.clone(),
        Some(recv(serde_json::json!([2048]), "started")),
    );
    assert_eq!(culprits, [0, 1]);
    assert_eq!(first.unwrap().0, "size-mismatch");
    let (culprits, first) = case(send, Some(recv(serde_json::json!([1024]), "completed")));
    assert!(culprits.is_empty(), "{first:?}");
    // Shapes whose products pass 64 bits are counted, not wrapped (2^64
    // elements had read as 0, the same as an empty recv).
    let big = p2p(
        "send 0->1",
        serde_json::json!([1u64 << 32, 1u64 << 32]),
        "started",
    );
    let (culprits, first) = case(big, Some(recv(serde_json::json!([0]), "started")));
    assert_eq!(culprits, [0, 1]);
    let (kind, detail) = first.unwrap();
    assert_eq!(kind, "size-mismatch");
    assert!(
        detail.contains("18446744073709551616 element(s)"),
        "{detail}"
    );
}

/// A dump naming a rank far past the others (a file misnamed `rank1048575`)
/// makes a world of a million ranks: the text lists the ranks without a
/// dump as spans, in a few lines, not a million.
#[test]
fn a_huge_world_from_one_file_name_is_told_in_spans() {
    let Some(root) = fixtures() else { return };
    let dir = tempfile::tempdir().unwrap();
    let from = root.join("skip-4/pickle");
    for r in [0, 1, 3] {
        std::fs::copy(
            from.join(format!("rank{r}")),
            dir.path().join(format!("rank{r}")),
        )
        .unwrap();
    }
    std::fs::copy(from.join("rank2"), dir.path().join("rank1048575")).unwrap();
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("collbench"))
        .arg("analyze")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.len() < 4096, "{} bytes", text.len());
    assert!(text.contains("no dump of ranks 2, 4-1048574"), "{text}");
}

/// A rank whose dump holds no entry (its buffer kept none) is judged by its
/// `pg_status`: ok-4 stays healthy (gloo's entries stay `scheduled`, so a
/// status's completions must not make the others look stuck), and in
/// skip-4 rank 2, whose status says it enqueued only up to 10, is still
/// the one that never joined 11.
#[test]
fn a_rank_known_by_its_pg_status_alone() {
    let Some(root) = fixtures() else { return };
    for (case, want) in [
        (
            "ok-4",
            serde_json::json!({"kind": "healthy", "culprits": [], "seq": null}),
        ),
        (
            "skip-4",
            serde_json::json!({"kind": "not-joined", "culprits": [2], "seq": 11}),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for r in 0..4 {
            let from = root.join(case).join("json").join(format!("rank{r}"));
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&from).unwrap()).unwrap();
            if r == 2 {
                v["entries"] = serde_json::json!([]);
                assert!(v["pg_status"]["0"].is_object(), "{case}: {v}");
            }
            std::fs::write(dir.path().join(format!("rank{r}")), v.to_string()).unwrap();
        }
        assert_eq!(outcome(dir.path()), want, "{case}");
    }
}
