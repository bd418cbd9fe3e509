use super::validate::half_unit;
use super::*;
use std::path::PathBuf;

/// A genuine log's text, or None (and a message) when the fixtures are
/// not beside the repository, unless `COLLBENCH_REQUIRE_FIXTURES=1`.
fn fixture(name: &str) -> Option<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/nccl-tests");
    match std::fs::read_to_string(dir.join(name)) {
        Ok(t) => Some(t),
        Err(e) => {
            let required = std::env::var("COLLBENCH_REQUIRE_FIXTURES").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "fixture {name} missing: {e} (COLLBENCH_REQUIRE_FIXTURES=1)"
            );
            eprintln!("SKIPPED: fixture {name} not found in {}", dir.display());
            None
        }
    }
}

/// A log's agg iters and graph reach its meta; `iters` counts every
/// timed operation, as a sweep's meta does.
#[test]
fn agg_iters_and_graph_reach_the_meta() {
    let rows = [(1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2)];
    let t = synthetic(&rows, 2).replace(
        "agg iters: 1 validation: 1 graph: 0",
        "agg iters: 4 validation: 1 graph: 1",
    );
    let m = &read_log(&t, "all_reduce.log").unwrap()[0].meta;
    assert_eq!((m.iters, m.agg_iters, m.graph), (80, 4, true));
    let m = &read_log(&synthetic(&rows, 2), "all_reduce.log").unwrap()[0].meta;
    assert_eq!((m.iters, m.agg_iters, m.graph), (20, 1, false));
    let absurd = synthetic(&rows, 2).replace("agg iters: 1", "agg iters: 99999999999");
    assert_eq!(
        read_log(&absurd, "all_reduce.log").unwrap()[0]
            .meta
            .agg_iters,
        1
    );
}

type SynthRow<'a> = (u64, u64, &'a str, &'a str, i64, f64, f64, f64);

/// One run in nccl-tests' 13-column layout, `rows` given as
/// (size, count, type, redop, root, time, algbw, busbw).
fn synthetic(rows: &[SynthRow], ranks: usize) -> String {
    let mut t = String::from(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n",
    );
    for r in 0..ranks {
        t += &format!(
            "#  Rank {r:2} Group  0 Pid {:6} on node{r} device {r:2} [0x{r:02}] GPU X\n",
            100 + r
        );
    }
    t += "#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
    let mut sum = 0.0;
    for (b, c, ty, op, root, time, alg, bus) in rows {
        t += &format!("{b:12}  {c:12}  {ty:>8}  {op:>6}  {root:6}  {time:7.2}  {alg:6.2}  {bus:6.2}       0  {time:7.2}  {alg:6.2}  {bus:6.2}       0\n");
        sum += 2.0 * bus;
    }
    let avg = sum / (2 * rows.len().max(1)) as f64;
    t += &format!(
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {} \n#\n",
        crate::report::nccl::fmt_g(avg)
    );
    t
}

fn lines_of(text: &str, r: &LogRun) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[r.lines.clone()].join("\n")
}

#[test]
fn genuine_2_17_log_holds_five_runs_with_their_headers() {
    let Some(t) = fixture("genuine_2_17_N1_G4.log") else {
        return;
    };
    let runs = parse_log(&t);
    let binaries: Vec<&str> = runs.iter().filter_map(|r| r.binary.as_deref()).collect();
    assert_eq!(
        binaries,
        [
            "all_reduce_perf",
            "all_gather_perf",
            "reduce_scatter_perf",
            "alltoall_perf",
            "sendrecv_perf"
        ]
    );
    let avgs: Vec<f64> = runs.iter().filter_map(|r| r.avg_busbw).collect();
    assert_eq!(avgs, [343.554, 313.292, 309.526, 319.526, 294.601]);
    let first = &runs[0];
    assert_eq!(first.version.as_deref(), Some("2.17.8"));
    assert_eq!(
        first.nccl.as_deref(),
        Some("nccl-headers=22902 nccl-library=22902")
    );
    let h = first.header.clone().unwrap();
    assert_eq!(
        (
            h.nthread,
            h.ngpus,
            h.min_bytes,
            h.max_bytes,
            h.step.as_deref()
        ),
        (
            Some(1),
            Some(1),
            Some(33554432),
            Some(68719476736),
            Some("2(factor)")
        )
    );
    assert_eq!(
        (h.warmup, h.iters, h.agg_iters, h.validation, h.graph),
        (Some(5), Some(20), Some(1), Some(1), Some(0))
    );
    assert_eq!(first.ranks.len(), 4);
    assert_eq!(
        first.ranks[1],
        RankLine {
            line: "#  Rank  1 Group  0 Pid 4175037 on cnode3-002 device  1 [0000:43:00] NVIDIA H100 80GB HBM3".into(),
            rank: 1,
            group: Some(0),
            pid: 4175037,
            host: "cnode3-002".into(),
            device: 1,
            bus: "0000:43:00".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
        }
    );
    assert_eq!(first.out_of_bounds, Some((0, true)));
    for r in &runs {
        assert_eq!((r.rows.len(), r.world_size(), r.concluded), (10, 4, true));
        assert!(r.rows.iter().all(|x| x.fields == 13));
        let v = validate_one_run(&lines_of(&t, r));
        assert!(v.is_ok(), "{:?}: {v:?}", r.binary);
    }
    let row = &first.rows[0];
    assert_eq!(
        (
            row.bytes,
            row.count,
            row.dtype.as_str(),
            row.op.as_str(),
            row.root
        ),
        (33554432, 4194304, "double", "sum", -1)
    );
    assert_eq!(
        row.out,
        Cell {
            time_us: 171.88,
            algbw_gbps: 195.22,
            busbw_gbps: 292.83,
            wrong: Some(0),
            busbw_decimals: 2
        }
    );
    let last = runs[4].rows.last().unwrap();
    assert_eq!(
        (last.bytes, last.inplace.time_us, last.inplace.busbw_gbps),
        (17179869184, 46760.0, 367.40)
    );
    assert_eq!(
        (last.out.wrong, last.inplace.wrong),
        (Some(0), None),
        "N/A is unchecked"
    );
    let e = validate_one_run(&t).unwrap_err().to_string();
    assert!(
        e.starts_with("line 33: a second `# Collective test starting`"),
        "{e}"
    );
}

#[test]
fn genuine_runs_become_results_with_engine_and_meta() {
    let Some(t) = fixture("genuine_2_17_N1_G4.log") else {
        return;
    };
    let all = read_log(&t, "logs/genuine_2_17_N1_G4.log").unwrap();
    let colls: Vec<&str> = all.iter().map(|r| r.rows[0].collective.as_str()).collect();
    assert_eq!(
        colls,
        [
            "all-reduce",
            "all-gather",
            "reduce-scatter",
            "all-to-all",
            "send-recv"
        ]
    );
    let r = &all[0];
    assert_eq!(r.rows.len(), 20);
    assert!(r.rows.iter().all(|x| x.engine == ENGINE && x.algo == ALGO));
    let (out, inp) = (&r.rows[0], &r.rows[1]);
    assert_eq!(
        (out.placement.as_str(), inp.placement.as_str()),
        ("out", "in")
    );
    assert_eq!(
        (out.dtype.as_str(), out.op.as_str(), out.bytes, out.count),
        ("double", "sum", 33554432, 4194304)
    );
    assert_eq!(
        (out.time_us, out.busbw_gbps, out.wrong, out.nan),
        (171.88, 292.83, 0, -1)
    );
    assert_eq!(
        (out.stats.p50_us, out.stats.min_us, out.stats.max_us),
        (171.88, 171.88, 171.88)
    );
    assert_eq!(all[4].rows[1].wrong, -1, "N/A in place");
    let m = &r.meta;
    assert_eq!(
        (m.version.as_str(), m.command.as_str(), m.host.as_str()),
        ("nccl-tests 2.17.8", "all_reduce_perf", "cnode3-002")
    );
    assert_eq!(
        (m.world_size, m.device.as_str(), m.iters, m.warmup),
        (4, "cuda", 20, 5)
    );
    assert_eq!(
        m.devices[0],
        "NVIDIA H100 80GB HBM3 [0000:1b:00] (rank 0, pid 4175036 on cnode3-002, device 0)"
    );
    assert_eq!(
        m.notes[0],
        "read from the nccl-tests log logs/genuine_2_17_N1_G4.log (run 1 of 5, line 1)"
    );
    assert!(
        m.notes[1].starts_with("nccl-tests header: nThread 1 nGpus 1 minBytes 33554432"),
        "{:?}",
        m.notes
    );
    assert_eq!(
        all[1].meta.notes[0],
        "read from the nccl-tests log logs/genuine_2_17_N1_G4.log (run 2 of 5, line 32)"
    );
}

/// collbench's own text names the host engine's ranks `[host]` and the
/// emulated GPUs by `emu:` bus ids: read back, the results say so, as the
/// run's own did (a run on the host compared with its log was "cuda").
#[test]
fn the_device_lines_tell_the_host_and_the_emulated_gpu() {
    let rows: [SynthRow; 1] = [(8, 2, "float", "sum", -1, 5.0, 0.0, 0.0)];
    let text = synthetic(&rows, 2);
    let device = |from: [&str; 2]| {
        let t = text
            .replace("[0x00]", &format!("[{}]", from[0]))
            .replace("[0x01]", &format!("[{}]", from[1]));
        read_log(&t, "x.log").unwrap()[0].meta.device.clone()
    };
    assert_eq!(device(["host", "host"]), "host");
    assert_eq!(device(["emu:00:00", "emu:01:00"]), "cuda-emu");
    assert_eq!(device(["0x00", "0x01"]), "cuda");
    // A mix is not collbench's own: a GPU run.
    assert_eq!(device(["host", "0x01"]), "cuda");
}

#[test]
fn pkb_log_without_a_test_name_is_an_all_reduce() {
    let Some(t) = fixture("pkb_nccl_output.txt") else {
        return;
    };
    let run = validate_one_run(&t).unwrap();
    assert_eq!(
        (run.rows.len(), run.binary.clone(), run.version.clone()),
        (11, None, None)
    );
    assert_eq!(run.avg_busbw, Some(0.565546));
    let h = run.header.clone().unwrap();
    assert_eq!(
        (h.iters, h.validation, h.graph),
        (Some(1), Some(0), Some(0))
    );
    assert_eq!(
        (
            run.ranks.len(),
            run.ranks[0].group,
            run.ranks[1].host.as_str()
        ),
        (2, None, "pkb-2b6a393d-3")
    );
    let r = read_log(&t, "pkb_nccl_output.txt").unwrap().remove(0);
    assert_eq!(r.rows.len(), 22);
    assert_eq!(
        (r.rows[0].collective.as_str(), r.rows[0].wrong),
        ("all-reduce", -1)
    );
    assert_eq!(r.meta.host, "pkb-2b6a393d-2,pkb-2b6a393d-3");
    assert_eq!(
        (r.meta.world_size, r.meta.command.as_str()),
        (2, "all_reduce_perf")
    );
    assert!(
        r.meta
            .notes
            .iter()
            .any(|n| n.contains("collective guessed") && n.contains("all-reduce or send-recv")),
        "two ranks: all-reduce's factor is send-recv's: {:?}",
        r.meta.notes
    );
    let last = r.rows.last().unwrap();
    assert_eq!(
        (
            last.bytes,
            last.count,
            last.placement.as_str(),
            last.time_us
        ),
        (1073741824, 268435456, "in", 1763386.0)
    );
}

#[test]
fn older_12_column_allreduce_reads_but_is_not_a_strict_run() {
    let Some(t) = fixture("sb_nccl_allreduce.log") else {
        return;
    };
    let runs = parse_log(&t);
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.rows.len(), 34, "the NCCL INFO line is skipped");
    assert!(run
        .rows
        .iter()
        .all(|r| r.fields == 12 && r.root == -1 && r.op == "sum"));
    assert_eq!((run.rows[0].bytes, run.rows[0].count), (0, 0));
    let last = run.rows.last().unwrap();
    assert_eq!(
        (last.bytes, last.out.busbw_gbps, last.inplace.busbw_gbps),
        (8589934592, 235.26, 235.03)
    );
    let h = run.header.clone().unwrap();
    assert_eq!(
        (h.ngpus, h.agg_iters, h.graph, h.validation),
        (Some(8), None, None, Some(0))
    );
    assert_eq!(run.world_size(), 8);
    assert!((run.mean_busbw() - 68.4048).abs() < 0.005);
    assert_eq!(
        run.collective("whatever.log").unwrap(),
        ("all-reduce".into(), None),
        "by shape alone"
    );
    let e = validate_one_run(&t).unwrap_err().to_string();
    assert!(
        e.starts_with("line 16: neither a `#` line nor a 13-field data row: hostname:3442"),
        "{e}"
    );
    let e = validate_one_run(&t.replace(
        "hostname:3442:3442 [0] NCCL INFO Launch mode Parallel\n",
        "",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("12 fields, not 13"), "{e}");
}

#[test]
fn older_11_column_alltoall_takes_its_name_from_the_file() {
    let Some(t) = fixture("sb_nccl_alltoall.log") else {
        return;
    };
    let runs = parse_log(&t);
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.rows.len(), 34);
    assert!(run
        .rows
        .iter()
        .all(|r| r.fields == 11 && r.root == -1 && r.op.is_empty()));
    assert_eq!(run.rows.iter().filter(|r| r.bytes == 0).count(), 5);
    assert_eq!(
        (
            run.rows[5].bytes,
            run.rows[5].count,
            run.rows[5].out.time_us
        ),
        (32, 1, 89.00)
    );
    assert!((run.mean_busbw() - 58.6481).abs() < 0.005);
    let r = read_log(&t, "/x/sb_nccl_alltoall.log").unwrap().remove(0);
    assert_eq!(
        (
            r.rows[0].collective.as_str(),
            r.rows[0].op.as_str(),
            r.rows[0].root
        ),
        ("all-to-all", "none", -1)
    );
    assert_eq!(r.rows.len(), 68);
    let (c, why) = run.collective("nccl.log").unwrap();
    assert_eq!(c, "all-gather");
    assert!(why.unwrap().contains("all-gather or all-to-all"));
    assert!(validate_one_run(&t)
        .unwrap_err()
        .to_string()
        .contains("11 fields, not 13"));
}

#[test]
fn the_validator_names_what_is_wrong() {
    let rows = [
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (64, 16, "float", "sum", -1, 12.5, 0.01, 0.01),
    ];
    let good = synthetic(&rows, 2);
    let run = validate_one_run(&good).unwrap();
    assert_eq!(run.rows.len(), 2);
    let footer = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.005 \n";
    let cases: Vec<(String, &str)> = vec![
        (good.replace("0.005 ", "0.02 "), "is not the mean busbw over 2 rows"),
        (good.replace(footer, ""), "no `# Out of bounds values` line"),
        (good.replace("# Avg bus bandwidth    : 0.005 \n", ""), "no `# Avg bus bandwidth` line"),
        (good.replace("0 OK", "2 FAILED"), "out of bounds says 2"),
        (format!("{good}{good}"), "a second `# nThread` header"),
        (good.replace("#\n#       size", "#\nsome text\n#       size"), "neither a `#` line"),
        (format!("{good}          8             2     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0\n"), "a data row after the footer"),
        (good.replace("float     sum      -1", "float     sum"), "12 fields, not 13"),
        (good.lines().filter(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n"), "no data rows"),
    ];
    for (text, want) in cases {
        let e = validate_one_run(&text).unwrap_err().to_string();
        assert!(e.contains(want), "want '{want}' in: {e}\n{text}");
    }
}

#[test]
fn a_data_row_that_does_not_read_is_an_error_naming_its_line() {
    let rows = [
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (64, 16, "float", "sum", -1, 12.5, 0.01, 0.01),
    ];
    let good = synthetic(&rows, 2);
    assert_eq!(read_log(&good, "x.log").unwrap()[0].rows.len(), 4);
    let line = good
        .lines()
        .position(|l| l.contains("12.50"))
        .expect("the second row")
        + 1;
    for bad in ["x", "-5.00", "nan", "inf"] {
        // The out-of-place time of the second row.
        let text = good.replacen("12.50", bad, 1);
        let e = read_log(&text, "x.log").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("line {line}: a data row that does not read")),
            "{bad}: {e}"
        );
    }
    // A negative count of wrong values (the in-place #wrong of the second
    // row) is no count.
    let second = good.lines().nth(line - 1).expect("the second row");
    let negative = second
        .rsplit_once(' ')
        .map(|(head, _)| format!("{head} -5"))
        .expect("fields");
    let e = read_log(&good.replace(second, &negative), "x.log")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("line {line}: a data row that does not read")),
        "{e}"
    );
    // Lines that are no data row (a launcher's output) are still skipped.
    let chatty = good.replace(
        "#\n#       size",
        "#\nnode0: NCCL INFO Bootstrap\n#       size",
    );
    assert_eq!(read_log(&chatty, "x.log").unwrap()[0].rows.len(), 4);
}

/// A footer whose count does not read (negative, past u64, missing) or
/// whose word is neither OK nor FAILED may hide a failed test: refused,
/// naming its line, by the reader and the validator alike.
#[test]
fn an_out_of_bounds_footer_that_does_not_read_is_an_error_naming_its_line() {
    let rows = [(8, 2, "float", "sum", -1, 10.0, 0.0, 0.0)];
    let good = synthetic(&rows, 2);
    let line = good
        .lines()
        .position(|l| l.contains("Out of bounds"))
        .expect("the footer")
        + 1;
    for bad in [
        "-1 FAILED",
        "99999999999999999999999 FAILED",
        "FAILED",
        "0 MAYBE",
        "5 OK",
        "",
    ] {
        let text = good.replace("0 OK", bad);
        let want = format!("line {line}: an `# Out of bounds values` line that does not read");
        let e = read_log(&text, "x.log").unwrap_err().to_string();
        assert!(e.starts_with(&want), "{bad}: {e}");
        let e = validate_one_run(&text).unwrap_err().to_string();
        assert!(e.starts_with(&want), "{bad}: {e}");
    }
}

/// A header whose nThread x nGpus is past what a run has (or past u64)
/// is refused, never wrapped to some other world.
#[test]
fn a_world_past_what_a_run_has_is_refused() {
    let rows = [(8, 2, "float", "sum", -1, 10.0, 0.0, 0.0)];
    let good = synthetic(&rows, 2);
    let header = good
        .lines()
        .find(|l| l.starts_with("# nThread"))
        .expect("the header");
    for (threads, gpus, ranks) in [
        ("4294967296", "4294967297", "18446744078004518912"),
        ("2048", "4096", "8388608"),
    ] {
        let mut h: Vec<String> = header.split(' ').map(str::to_string).collect();
        h[2] = threads.into();
        h[4] = gpus.into();
        let text: String = good
            .lines()
            .filter(|l| !l.starts_with("#  Rank"))
            .map(|l| if l == header { h.join(" ") } else { l.to_string() } + "\n")
            .collect();
        let e = read_log(&text, "x.log").unwrap_err().to_string();
        assert!(
            e.contains(&format!("the run's header says {ranks} ranks")),
            "{e}\n{text}"
        );
    }
}

#[test]
fn shape_tells_the_collective_apart() {
    // (rows, ranks, expected collective); 4 ranks of float.
    let cases = [
        ((4096, 1024, "sum", -1, 0.04, 0.06), "all-reduce"),
        ((4096, 256, "sum", -1, 0.04, 0.03), "reduce-scatter"),
        ((4096, 1024, "sum", 0, 0.04, 0.04), "reduce"),
        ((4096, 1024, "none", 0, 0.04, 0.04), "broadcast"),
        ((4096, 1024, "sum", -1, 0.04, 0.04), "send-recv"),
    ];
    for ((b, c, op, root, alg, bus), want) in cases {
        let t = synthetic(&[(b, c, "float", op, root, 100.0, alg, bus)], 4);
        let run = parse_log(&t).remove(0);
        assert_eq!(
            run.collective("x.log").unwrap(),
            (want.to_string(), None),
            "{t}"
        );
    }
    let t = synthetic(&[(4096, 256, "float", "none", -1, 100.0, 0.04, 0.03)], 4);
    let run = parse_log(&t).remove(0);
    assert_eq!(run.collective("run_allgather.txt").unwrap().0, "all-gather");
    assert_eq!(
        run.collective("run_all_to_all.txt").unwrap().0,
        "all-to-all"
    );
    let t = synthetic(&[(4096, 256, "float", "none", 2, 100.0, 0.04, 0.03)], 4);
    let run = parse_log(&t).remove(0);
    assert_eq!(run.collective("scatter_perf.log").unwrap().0, "scatter");
    assert!(run
        .collective("x.log")
        .unwrap()
        .1
        .unwrap()
        .contains("gather or scatter"));
}

#[test]
fn collbench_s_account_of_a_stopped_run_reads_back() {
    use crate::report::StopReason;
    let p = |t| stopped_partial(t).map(|p| (p.reason, p.missing_rows));
    assert_eq!(
        p("run interrupted: hang, 2 row(s) missing"),
        Some((StopReason::Hang, 2))
    );
    assert_eq!(
        p("run interrupted: signal, 0 row(s) missing"),
        Some((StopReason::Signal, 0))
    );
    assert_eq!(
        p("run failed: an error stopped it, 15 row(s) missing"),
        Some((StopReason::Error, 15))
    );
    for other in [
        "run unfinished: its JSONL has no end line",
        "run interrupted: lunch, 2 row(s) missing",
        "run interrupted: hang, many row(s) missing",
        "something else",
    ] {
        assert_eq!(p(other), None, "{other}");
    }
}

/// A run cut before its footer (killed, or the test failed: nccl-tests
/// prints no footer then) is unfinished, with the failure in its
/// notes; a finished one is not.
#[test]
fn a_run_without_its_footer_is_unfinished() {
    let rows: Vec<SynthRow> = vec![
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
    ];
    let whole = synthetic(&rows, 2);
    let r = read_log(&whole, "all_reduce.log").unwrap();
    assert_eq!(r[0].meta.partial, None);
    let cut = whole.split("# Out of bounds").next().unwrap().to_string();
    let failed = cut.clone() + "node1: Test NCCL failure common.cu:1005 'unhandled system error'\n";
    for (text, failure) in [(cut, false), (failed, true)] {
        let r = read_log(&text, "all_reduce.log").unwrap();
        let p = r[0].meta.partial.as_ref().expect("unfinished");
        assert_eq!(p.reason, crate::report::StopReason::Truncated);
        assert!(
            p.to_string().contains("ends before the run's footer"),
            "{p}"
        );
        assert_eq!(r[0].rows.len(), 4);
        let said = r[0]
            .meta
            .notes
            .iter()
            .any(|n| n.starts_with("the test failed: node1: Test NCCL failure common.cu:1005"));
        assert_eq!(said, failure, "{:?}", r[0].meta.notes);
    }
}

/// A data row with other output run into its line, or cut short, is a
/// row that does not read (refused, naming the line), not one left out.
#[test]
fn rows_with_too_many_or_too_few_fields_are_refused() {
    let rows: Vec<SynthRow> = vec![
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
    ];
    let whole = synthetic(&rows, 2);
    let at = whole
        .lines()
        .position(|l| l.trim_start().starts_with("16 "))
        .unwrap();
    for edit in [
        |l: &str| format!("{l} NCCL INFO comm 0x1 rank 0 nranks 2"),
        |l: &str| l.split_whitespace().take(8).collect::<Vec<_>>().join(" "),
    ] {
        let text: Vec<String> = whole
            .lines()
            .enumerate()
            .map(|(i, l)| if i == at { edit(l) } else { l.to_string() })
            .collect();
        let e = read_log(&text.join("\n"), "all_reduce.log").unwrap_err();
        assert!(
            matches!(e, LogError::At { line, .. } if line == at + 1),
            "{e}"
        );
    }
}

/// Lines tagged by the launcher (`mpirun --tag-output`, `srun
/// --label`) read as the lines themselves.
#[test]
fn launcher_tags_are_read_past() {
    let rows: Vec<SynthRow> = vec![
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (16, 4, "float", "sum", -1, 11.0, 0.0, 0.0),
    ];
    let plain = synthetic(&rows, 2);
    let want = read_log(&plain, "all_reduce.log").unwrap();
    for tag in ["[1,0]<stdout>:", "0: "] {
        let tagged: String = plain.lines().map(|l| format!("{tag}{l}\n")).collect();
        assert!(looks_like_log(&tagged), "{tag}");
        let got = read_log(&tagged, "all_reduce.log").unwrap();
        assert_eq!(got[0].rows, want[0].rows, "{tag}");
        assert_eq!(got[0].meta.world_size, 2, "{tag}");
    }
    assert_eq!(untagged("[1,x]<stdout>:# a"), "[1,x]<stdout>:# a");
}

#[test]
fn names_map_to_collbench_names() {
    assert_eq!(collective_of_binary("alltoall_perf"), "all-to-all");
    assert_eq!(
        collective_of_binary("./build/reduce_scatter_perf"),
        "reduce-scatter"
    );
    assert_eq!(collective_of_binary("sendrecv_perf"), "send-recv");
    assert_eq!(
        collective_of_name("nccl_reduce_scatter_8.log"),
        Some("reduce-scatter")
    );
    assert_eq!(collective_of_name("output.txt"), None);
    assert_eq!(dtype_name("int"), "int32");
    assert_eq!(dtype_name("bfloat16"), "bfloat16");
    assert_eq!(half_unit("343.554"), 0.0005);
    assert_eq!(half_unit("1.5e+06"), 50000.0);
    assert!(!looks_like_log("{\"schema\": 1}") && !looks_like_log("hello"));
    assert!(read_log("# Avg bus bandwidth : 3\n", "x").is_err());
}

/// Device lines naming a rank twice, or past the others, make no world of
/// their count: the distinct ranks are the world, and a note says what the
/// lines named.
#[test]
fn device_lines_that_repeat_a_rank_are_counted_once_and_noted() {
    let rows: &[SynthRow] = &[(8, 2, "float", "sum", -1, 10.0, 0.0, 0.0)];
    let clean = parse_log(&synthetic(rows, 2)).remove(0);
    assert_eq!(clean.world_size(), 2);
    assert_eq!(clean.rank_lines_note(), None);
    let text = synthetic(rows, 2).replace(
        "#  Rank  1 ",
        "#  Rank  7 Group  0 Pid 1 on x device 7 [0x07] GPU X\n#  Rank  1 ",
    );
    let odd = parse_log(&text).remove(0);
    assert_eq!(odd.world_size(), 3);
    let note = odd.rank_lines_note().unwrap();
    assert!(note.contains("ranks 0, 7, 1 in that order"), "{note}");
    let doubled = text.replace(
        "#  Rank  7 Group  0 Pid 1 on x device 7 [0x07] GPU X\n",
        "#  Rank  1 Group  0 Pid 1 on x device 1 [0x01] GPU X\n",
    );
    let doubled = parse_log(&doubled).remove(0);
    assert_eq!(doubled.world_size(), 2);
    assert!(doubled.rank_lines_note().unwrap().contains("ranks 0, 1, 1"));
}

/// A run stopped in its first case (its only row commented out, its footer
/// saying why) reads as the run that did not finish it is: no rows, and a
/// `partial` in its meta, not an unreadable log.
#[test]
fn a_run_stopped_before_its_first_row_reads_as_unfinished() {
    let text = "# Collective test starting: all_reduce_perf\n\
        # nThread 1 nGpus 2 minBytes 64 maxBytes 256 step: 2(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0\n\
        #\n\
        #         64            16     float     sum      -1     1.63    0.04    0.04      0        -       -       -      -\n\
        # Out of bounds values : 0 FAILED (run interrupted: hang, 5 row(s) missing)\n\
        # Avg bus bandwidth    : 0.0392698 \n#\n";
    let runs = read_log(text, "h.txt").unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].rows.is_empty());
    assert!(runs[0].meta.partial.is_some(), "{:?}", runs[0].meta);
    // Without the footer's word, a log of no rows is still no log.
    let bare = text.replace(" FAILED (run interrupted: hang, 5 row(s) missing)", " OK");
    assert!(read_log(&bare, "h.txt").is_err());
}

/// Older broadcast_perf printed 12 fields with a root and no redop; its
/// column header says so, and the rows read as broadcast at their root.
#[test]
fn an_older_broadcast_s_root_column_is_read_by_its_header() {
    let rows = [(1024, 256, "float", "none", 0, 10.0, 0.1, 0.1)];
    let t = synthetic(&rows, 2)
        .replace("   redop    root     time", "    root     time")
        .replace("    none       0  ", "       0  ");
    let run = &parse_log(&t)[0];
    assert_eq!(run.columns.keys, ["size", "count", "type", "root"]);
    let r = &run.rows[0];
    assert_eq!((r.fields, r.op.as_str(), r.root), (12, "", 0), "{t}");
    let res = &read_log(&t, "x.log").unwrap()[0];
    assert_eq!(res.rows[0].collective, "broadcast");
    assert_eq!((res.rows[0].root, res.rows[0].op.as_str()), (0, "none"));
    // The same 12 fields under an all-reduce's header: a redop, no root.
    let reduce = synthetic(&[(1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2)], 2)
        .replace("   redop    root     time", "   redop     time")
        .replace("     sum      -1  ", "     sum  ");
    let r = &parse_log(&reduce)[0].rows[0];
    assert_eq!(
        (r.fields, r.op.as_str(), r.root),
        (12, "sum", -1),
        "{reduce}"
    );
}

/// A data row run into other output on its line is refused, naming the
/// line, never passed over (its size would be missing from every check).
#[test]
fn a_row_run_into_other_output_is_refused() {
    let rows = [
        (8, 2, "float", "sum", -1, 10.0, 0.0, 0.0),
        (64, 16, "float", "sum", -1, 12.5, 0.01, 0.01),
    ];
    let good = synthetic(&rows, 2);
    let line = good.lines().position(|l| l.contains("12.50")).unwrap() + 1;
    let second = good.lines().nth(line - 1).unwrap().to_string();
    for glue in [
        "node0:12:12 [0] NCCL INFO Channel 00/02 ",
        "node0:12:12 [0] NCCL INFO connected",
    ] {
        let text = good.replace(&second, &format!("{glue}{}", second.trim_start()));
        let e = read_log(&text, "x.log").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("line {line}: a data row that does not read")),
            "{glue}: {e}"
        );
    }
    // An INFO line of its own, numbers and all, is still passed over.
    let chatty = good.replace(
        "#\n#       size",
        "#\nnode0:12:12 [0] NCCL INFO 8 coll channels, 8 nvls channels, 16 p2p channels, 2 p2p channels per peer\n#       size",
    );
    assert_eq!(read_log(&chatty, "x.log").unwrap()[0].rows.len(), 4);
}

/// nccl-tests 2.17 prints `#wrong` with `%g`: a million wrong values and
/// up reads `1.23457e+06`, a count; the older float `error` column is not.
#[test]
fn a_wrong_count_printed_as_a_float_is_a_count() {
    let rows = [(1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2)];
    let good = synthetic(&rows, 2);
    let row = good
        .lines()
        .find(|l| l.contains("10.00"))
        .unwrap()
        .to_string();
    let (head, _) = row.rsplit_once(' ').unwrap();
    let text = good
        .replace(&row, &format!("{head} 1.23457e+06"))
        .replace("0 OK", "1234570 FAILED");
    let r = &parse_log(&text)[0].rows[0];
    assert_eq!((r.out.wrong, r.inplace.wrong), (Some(0), Some(1_234_570)));
    let res = &read_log(&text, "all_reduce.log").unwrap()[0];
    assert_eq!(res.rows[1].wrong, 1_234_570);
    validate_one_run(&text).unwrap();
    // Under an older header's `error`, a float is an error's size.
    let older = text.replace("#wrong", " error");
    assert_eq!(parse_log(&older)[0].rows[0].inplace.wrong, None);
}

/// nccl-tests -S ends each row in a timestamp, and -C times on the CPU
/// (`cputime`): both read, the CPU time said as such.
#[test]
fn timestamped_rows_and_cpu_times_read() {
    let rows = [
        (1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2),
        (2048, 512, "float", "sum", -1, 11.0, 0.2, 0.3),
    ];
    let good = synthetic(&rows, 2);
    let mut text = String::new();
    for l in good.lines() {
        let l = if l.starts_with("#       size") {
            format!("{}            timestamp", l.replace(" time ", " cputime "))
        } else if l.starts_with(' ') {
            format!("{l}  2026-01-28 14:50:17")
        } else {
            l.to_string()
        };
        text += &l;
        text.push('\n');
    }
    let run = &parse_log(&text)[0];
    assert!(run.columns.timestamps && run.columns.cputime, "{text}");
    assert_eq!(run.rows.len(), 2, "{text}");
    assert_eq!(run.rows[1].inplace.time_us, 11.0);
    validate_one_run(&text).unwrap();
    let res = &read_log(&text, "all_reduce.log").unwrap()[0];
    assert_eq!(res.meta.timing, "cpu");
    assert!(
        res.meta.notes.iter().any(|n| n.contains("CPU time")),
        "{:?}",
        res.meta.notes
    );
    assert_eq!(
        read_log(&good, "all_reduce.log").unwrap()[0].meta.timing,
        "wall"
    );
    // A timestamp under a header that announced none is no row.
    let unannounced = text.replace("            timestamp", "");
    assert!(read_log(&unannounced, "all_reduce.log").is_err());
}

/// `# Avg bus bandwidth : X FAILED` (below 0.9 x NCCL_TESTS_MIN_BW) fails
/// the run as its log says; `OK` passes; a torn average is left out.
#[test]
fn the_average_s_own_check_and_a_torn_average() {
    let rows = [(1024, 256, "float", "sum", -1, 10.0, 0.1, 0.2)];
    let good = synthetic(&rows, 2);
    let avg = good
        .lines()
        .find(|l| l.contains("Avg bus"))
        .unwrap()
        .to_string();
    let failed = good.replace(&avg, &format!("{}FAILED", avg));
    let r = &read_log(&failed, "all_reduce.log").unwrap()[0];
    assert_eq!(r.meta.log_avg_ok, Some(false));
    assert_eq!(r.meta.log_avg_busbw.as_deref(), Some("0.2"));
    assert!(
        r.log_failed()
            .unwrap()
            .contains("average bus bandwidth 0.2"),
        "{:?}",
        r.log_failed()
    );
    let ok = &read_log(&good.replace(&avg, &format!("{}OK", avg)), "all_reduce.log").unwrap()[0];
    assert_eq!((ok.meta.log_avg_ok, ok.log_failed()), (Some(true), None));
    assert_eq!(
        read_log(&good, "all_reduce.log").unwrap()[0]
            .meta
            .log_avg_ok,
        None
    );
    // Cut inside the average's number, no newline at its end.
    let at = good.find("Avg bus bandwidth").unwrap();
    let torn = &good[..at + "Avg bus bandwidth    : 0".len()];
    let r = &read_log(torn, "all_reduce.log").unwrap()[0];
    assert_eq!(r.meta.log_avg_busbw, None);
    assert!(
        r.meta
            .notes
            .iter()
            .any(|n| n.contains("the average bus bandwidth, is cut short")),
        "{:?}",
        r.meta.notes
    );
    // The whole average line, its newline missing: kept, ending in a blank
    // (as nccl-tests prints it) or its check's word.
    let end = at + good[at..].find('\n').unwrap();
    let spaced = &good[..end];
    assert!(spaced.ends_with(' '), "{spaced:?}");
    let r = &read_log(spaced, "all_reduce.log").unwrap()[0];
    assert_eq!(r.meta.log_avg_busbw.as_deref(), Some("0.2"), "{spaced}");
    let whole = format!("{spaced}FAILED");
    let r = &read_log(&whole, "all_reduce.log").unwrap()[0];
    assert_eq!(r.meta.log_avg_ok, Some(false), "{whole}");
    // Cut inside its check's word: left out too, not read as a comment.
    let cut = format!("{spaced}FAIL");
    let r = &read_log(&cut, "all_reduce.log").unwrap()[0];
    assert_eq!(
        (r.meta.log_avg_busbw.as_deref(), r.meta.log_avg_ok),
        (None, None),
        "{cut}"
    );
    assert!(
        r.meta.notes.iter().any(|n| n.contains("is cut short")),
        "{:?}",
        r.meta.notes
    );
}
