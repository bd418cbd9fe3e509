use super::*;
use clap::Parser;

#[derive(Parser)]
#[command(no_binary_name = true)]
struct Line {
    #[command(flatten)]
    run: RunArgs,
}

fn parse(flags: &[&str]) -> RunArgs {
    Line::try_parse_from(flags).unwrap().run
}

#[test]
fn the_links_probe_is_send_recv_once_per_peer_offset_with_links_on() {
    let s = build_links(&parse(&["--ranks", "4", "--sizes", "1M"]), None).unwrap();
    assert!(s.plan.host.link_timing);
    assert_eq!(s.plan.links_from, Some(Collective::SendRecv));
    let (cases, _) = crate::harness::plan::cases(&s.plan);
    let got: Vec<(Collective, Algo, Option<usize>)> =
        cases.iter().map(|c| (c.coll, c.algo, c.root)).collect();
    assert_eq!(
        got,
        [
            (Collective::SendRecv, Algo::Direct, Some(1)),
            (Collective::SendRecv, Algo::Direct, Some(2)),
            (Collective::SendRecv, Algo::Direct, Some(3)),
            (Collective::AllReduce, Algo::Ring, None),
            (Collective::AllReduce, Algo::Tree, None),
        ]
    );
    // A sweep of send-recv keeps its one case, root none (offset 1).
    let s = build(
        Some(Collective::SendRecv),
        &parse(&["--ranks", "4", "--sizes", "1M"]),
        None,
    )
    .unwrap();
    let (cases, _) = crate::harness::plan::cases(&s.plan);
    assert_eq!(cases.iter().map(|c| c.root).collect::<Vec<_>>(), [None]);
    assert!(build_links(&parse(&["--ranks", "1"]), None).is_err());
}

/// A sweep of sizes that does not make sense names the flags given.
#[test]
fn bad_size_flags_are_named() {
    let coll = Some(Collective::AllReduce);
    let e = build(coll, &parse(&["-b", "8", "-e", "64", "-f", "1"]), None).unwrap_err();
    assert!(e.0.starts_with("-b 8 -e 64 -f 1: factor 1"), "{e}");
    let e = build(coll, &parse(&["-b", "0"]), None).unwrap_err();
    assert!(e.0.starts_with("-b 0: the smallest size"), "{e}");
}

/// `-i` beside `-f` above 1 is said to be unused; with `-f 1` it is
/// the step, and nothing is said.
#[test]
fn a_step_beside_a_growing_factor_is_said_to_be_unused() {
    let coll = Some(Collective::AllReduce);
    let s = build(
        coll,
        &parse(&["-b", "8", "-e", "64", "-f", "2", "-i", "8"]),
        None,
    )
    .unwrap();
    assert_eq!(s.plan.sizes, [8, 16, 32, 64]);
    let said: Vec<&String> = s.notes.iter().filter(|n| n.starts_with("-i 8:")).collect();
    assert_eq!(said.len(), 1, "{:?}", s.notes);
    assert!(said[0].contains("grow by -f 2"), "{}", said[0]);
    let s = build(
        coll,
        &parse(&["-b", "8", "-e", "32", "-f", "1", "-i", "8"]),
        None,
    )
    .unwrap();
    assert_eq!(s.plan.sizes, [8, 16, 24, 32]);
    assert!(
        !s.notes
            .iter()
            .any(|n| n.starts_with("-i") || n.starts_with("-f")),
        "{:?}",
        s.notes
    );
    // A factor below 1 beside a step: the step runs, and that is said.
    let s = build(
        coll,
        &parse(&["-b", "8", "-e", "32", "-f", "0.5", "-i", "8"]),
        None,
    )
    .unwrap();
    assert_eq!(s.plan.sizes, [8, 16, 24, 32]);
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("-f 0.5: a factor below 1")),
        "{:?}",
        s.notes
    );
}

/// The links probe's all-reduces take the sweep's operator: it is
/// used (no note says otherwise), and premulsum's scalar is checked
/// against the types as a sweep's is.
#[test]
fn the_links_probe_reduces_with_the_operator_given() {
    let s = build_links(
        &parse(&["--ranks", "2", "--op", "max", "--scalar", "3"]),
        None,
    )
    .unwrap();
    assert_eq!(s.plan.ops, [ReduceOp::Max]);
    assert!(
        !s.notes.iter().any(|n| n.starts_with("--op")),
        "{:?}",
        s.notes
    );
    // The scalar is premulsum's, and no premulsum runs.
    assert!(
        s.notes.iter().any(|n| n.starts_with("--scalar 3")),
        "{:?}",
        s.notes
    );
    let flags = [
        "--ranks",
        "2",
        "--op",
        "premulsum",
        "--scalar",
        "1e40",
        "--dtype",
        "half",
    ];
    let e = build_links(&parse(&flags), None).unwrap_err();
    assert!(e.0.contains("--scalar 1e40 is not finite in half"), "{e}");
}

/// `-r 5` to a sweep with no rooted collective is unused, whatever the
/// rank count: a note, not a refusal (nccl-tests' binaries take it).
#[test]
fn a_root_no_collective_uses_is_noted_not_refused() {
    let s = build(
        Some(Collective::AllReduce),
        &parse(&["--ranks", "2", "--root", "5"]),
        None,
    )
    .unwrap();
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("--root 5 is the rooted")),
        "{:?}",
        s.notes
    );
    let e = build(
        Some(Collective::Broadcast),
        &parse(&["--ranks", "2", "--root", "5"]),
        None,
    )
    .unwrap_err();
    assert!(e.0.contains("--root 5 is outside the 2 ranks"), "{e}");
}

/// Links are timed on the builtin engine only: without it, refused.
#[test]
fn links_without_the_builtin_engine_are_refused() {
    for flags in [&["--engine", "nccl"][..], &["--engine", "mpi"]] {
        let e = build_links(&parse(flags), None).unwrap_err();
        assert!(e.0.contains("add builtin to --engine"), "{e}");
        let with = [flags, &["--links"]].concat();
        let e = build(Some(Collective::AllReduce), &parse(&with), None).unwrap_err();
        assert!(e.0.contains("add builtin to --engine"), "{e}");
    }
    assert!(build_links(&parse(&["--engine", "builtin,nccl"]), None).is_ok());
}

/// `all --algo tree` says which collectives it leaves out.
#[test]
fn collectives_without_the_algorithm_asked_for_are_noted() {
    let s = build(None, &parse(&["--algo", "tree"]), None).unwrap();
    let said: Vec<&String> = s
        .notes
        .iter()
        .filter(|n| n.starts_with("--algo tree:"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", s.notes);
    assert!(
        said[0].contains("all-gather") && !said[0].contains("all-reduce,"),
        "{}",
        said[0]
    );
    let s = build(None, &parse(&["--algo", "all"]), None).unwrap();
    assert!(
        !s.notes.iter().any(|n| n.starts_with("--algo")),
        "{:?}",
        s.notes
    );
}

/// A mix longer than its groups would leave collectives unrun.
#[test]
fn a_group_mix_longer_than_the_group_is_refused() {
    let flags = [
        "--group-mix",
        "all-reduce,all-gather,broadcast",
        "--group",
        "2",
    ];
    let e = build(Some(Collective::Broadcast), &parse(&flags), None).unwrap_err();
    assert!(e.0.contains("the last 1 would never run"), "{e}");
    let flags = ["--group-mix", "all-reduce,broadcast", "--group", "3"];
    assert!(build(Some(Collective::Broadcast), &parse(&flags), None).is_ok());
}

#[test]
fn defaults_make_the_documented_sweep() {
    let s = build(Some(Collective::AllReduce), &parse(&[]), None).unwrap();
    let p = &s.plan;
    assert_eq!((p.ranks, p.iters, p.warmup, p.check_iters), (2, 20, 5, 1));
    assert_eq!((p.sizes[0], *p.sizes.last().unwrap()), (8, 64 << 20));
    assert_eq!(p.algos, AlgoChoice::Auto);
    assert_eq!(s.device, DeviceChoice::Auto);
}

#[test]
fn nccl_tests_threads_and_gpus_make_the_ranks() {
    let s = build(None, &parse(&["-t", "2", "-g", "3"]), None).unwrap();
    assert_eq!(s.plan.ranks, 6);
    // Under MPI each process is one rank: -t x -g must be 1.
    assert_eq!(
        build(None, &parse(&["-g", "1"]), Some(8))
            .unwrap()
            .plan
            .ranks,
        8
    );
    let e = build(None, &parse(&["-g", "2"]), Some(8)).unwrap_err();
    assert!(e.0.contains("every process is one rank"), "{e}");
    let e = build(None, &parse(&["--ranks", "4", "-g", "2"]), None).unwrap_err();
    assert!(e.0.contains("disagree"), "{e}");
}

#[test]
fn the_world_sets_the_rank_count() {
    let s = build(None, &parse(&[]), Some(4)).unwrap();
    assert_eq!(s.plan.ranks, 4);
    let e = build(None, &parse(&["--ranks", "3"]), Some(4)).unwrap_err();
    assert!(e.0.contains("this world has 4"), "{e}");
}

#[test]
fn options_are_checked_against_each_other() {
    let coll = Some(Collective::Broadcast);
    let e = build(coll, &parse(&["--ranks", "4", "--root", "4"]), None).unwrap_err();
    assert!(e.0.contains("outside the 4 ranks"), "{e}");
    let e = build(
        coll,
        &parse(&["--ranks", "2", "--inject", "hang:rank=2,seq=1"]),
        None,
    )
    .unwrap_err();
    assert!(e.0.contains("outside the 2 ranks"), "{e}");
    let e = build(
        Some(Collective::AllGather),
        &parse(&["--algo", "tree"]),
        None,
    )
    .unwrap_err();
    assert!(e.0.contains("not an algorithm for all-gather"), "{e}");
    let s = build(None, &parse(&["-b", "1K", "-e", "4K", "-c", "0"]), None).unwrap();
    assert_eq!(s.plan.sizes, vec![1024, 2048, 4096]);
    assert_eq!(s.plan.check_iters, 0);
}

/// What a CUDA rank's connections grow by per channel follows the sweep's
/// algorithms: a ring hears from one rank a channel, all-to-all and a
/// direct all-reduce from every other rank.
#[test]
fn peers_per_channel_follow_the_sweeps_algorithms() {
    let peers = |coll, flags: &[&str]| {
        let s = build(Some(coll), &parse(flags), None).unwrap();
        let (cases, _) = crate::harness::plan::cases(&s.plan);
        crate::harness::peers_per_channel(&s.plan, &cases)
    };
    let ring = ["--ranks", "8", "--sizes", "1M", "--algo", "ring"];
    assert_eq!(peers(Collective::AllReduce, &ring), 1);
    let direct = ["--ranks", "8", "--sizes", "1M", "--algo", "direct"];
    assert_eq!(peers(Collective::AllReduce, &direct), 7);
    assert_eq!(
        peers(Collective::AllToAll, &["--ranks", "8", "--sizes", "1M"]),
        7
    );
    assert_eq!(
        peers(Collective::AllReduce, &["--ranks", "1", "--sizes", "1M"]),
        0
    );
}

/// Ranks compare a print of their sweeps before they run: `--slot-size`
/// given or not is part of it, since a GPU's default slot (1 MiB) is not
/// the host's (256 KiB) that the host options hold either way.
#[test]
fn the_sweeps_print_tells_a_slot_size_given_from_the_default() {
    let print = |flags: &[&str]| {
        let mut all = vec!["--ranks", "2", "--sizes", "1K"];
        all.extend_from_slice(flags);
        let s = build(Some(Collective::AllReduce), &parse(&all), None).unwrap();
        let (cases, _) = crate::harness::plan::cases(&s.plan);
        crate::run::world::sweep_print(&s.plan, &cases)
    };
    let default = print(&[]);
    assert_eq!(default, print(&[]));
    let quarter = print(&["--slot-size", "256K"]);
    assert_ne!(default, quarter);
    assert_ne!(default, print(&["--slot-size", "1M"]));
    assert_ne!(quarter, print(&["--slot-size", "1M"]));
    assert_eq!(quarter, print(&["--slot-size", "256K"]));
}
