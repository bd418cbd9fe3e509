//! A collective's sweep, end to end: the plan built and checked, the
//! device chosen, the world joined (or rank processes started), the
//! harness run, the outcome turned into an exit code.

use super::*;

/// A sweep's plan and setup, run: cases, worlds, the harness.
pub(crate) fn execute(
    plan: &Plan,
    setup: &Setup,
    sink: &mut dyn Sink,
    mpi: Option<&Arc<Peers>>,
) -> Result<harness::Outcome, harness::HarnessError> {
    let prepared = harness::prepare(plan, setup, mpi.map(|m| &**m))?;
    execute_prepared(plan, setup, prepared, sink, mpi)
}

/// [`execute`] of cases already prepared (the sweep prepares them before
/// it opens its output files, so a refusal leaves those files as they were).
pub(super) fn execute_prepared(
    plan: &Plan,
    setup: &Setup,
    prepared: harness::Prepared,
    sink: &mut dyn Sink,
    mpi: Option<&Arc<Peers>>,
) -> Result<harness::Outcome, harness::HarnessError> {
    let spec = harness::world_spec(plan, setup, &prepared);
    tracing::debug!(
        ranks = spec.ranks,
        bufs = ?spec.bufs.map(|b| Bytes(b as u64).to_string()),
        cases = prepared.cases.len(),
        "opening the worlds"
    );
    let worlds = open_worlds(&spec, mpi.map(|m| &**m))?;
    harness::run(plan, setup, prepared, worlds, sink, mpi)
}

/// Runs a sweep of `coll` (None: every collective), or with `probe` the
/// links probe (`collbench links`).
pub(super) fn sweep(coll: Option<Collective>, args: &RunArgs, probe: bool) -> anyhow::Result<i32> {
    // First: a signal from now on stops the run with its results written,
    // never the default death.
    watchdog::install_signal_handlers();
    crate::launch::force_relay_setting()?;
    crate::engine::exec::mpi_in_place_staged().map_err(anyhow::Error::msg)?;
    if let Some(n) = args
        .procs
        .filter(|_| std::env::var_os(crate::launch::procs::ENV).is_none())
    {
        return launch_procs(coll, args, probe, n);
    }
    let mpi = join_world()?.map(Arc::new);
    if mpi.is_none() && args.gpu_map.is_some() {
        bail!("--gpu-map places ranks that are processes (mpirun, srun, --procs); thread ranks of one process are placed round-robin over the GPUs (choose them with CUDA_VISIBLE_DEVICES)");
    }
    let rank = mpi.as_ref().map_or(0, |m| m.rank());
    let leader = rank == 0;
    let world = mpi.as_ref().map(|m| m.size());
    let mut s = build_sweep(coll, args, probe, world)?;
    if mpi.is_none() {
        thread_rank_settings(&mut s)?;
    }
    check_thread_ranks(&s.plan, mpi.as_deref())?;
    check_paths(&s, leader, &[])?;
    if !leader {
        (s.quiet, s.json, s.csv, s.plot) = (true, None, None, None);
    }
    let chosen = choose_device(&s, mpi.as_ref().map(|m| m.node_size()))?;
    if leader {
        chosen.tell();
    }
    // Ranks that are processes share their node's GPUs with the node's
    // other ranks only, not the whole world's.
    let ranks_here = mpi.as_ref().map_or(s.plan.ranks, |m| m.node_size());
    let rank_processes = mpi.is_some();
    let (budget, capped) = fit_sizes(&mut s, &chosen, mpi.as_deref())?;
    let mut meta = meta(&s, &chosen);
    meta.notes.extend(chosen.notes.iter().cloned());
    if let Some(m) = &mpi {
        meta.processes = processes(m, &meta.host)?;
    }
    let setup = setup(&s.plan, &chosen, &meta, mpi.as_deref())?;
    let (s, plan) = (&s, &s.plan);
    // Refused before anything runs (nothing to run, too little memory): the
    // files the sweep would write are not touched.
    let prepared = match prepare(plan, &setup, budget, mpi.as_deref(), rank)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let mut sink = sinks(s, leader)?;
    sink.start(&meta).context("writing results")?;
    let mut result = execute_prepared(plan, &setup, prepared, &mut sink, mpi.as_ref());
    if result.as_ref().is_err_and(|e| {
        e.is_hang() || e.is_interrupt() || matches!(e, harness::HarnessError::Reports(_))
    }) {
        // Requests of the hung collective (or of the ranks rank 0 stopped
        // when their reports failed) are still pending: MPI_Finalize could
        // wait on them forever, so this process leaves without it.
        let _ = std::mem::ManuallyDrop::new(mpi);
    }
    meta.notes.extend(capped.iter().map(|w| w.to_string()));
    if let Ok(o) = &result {
        meta.notes.extend(o.notes.iter().cloned());
        meta.nccl = o.library.clone();
    }
    // A run stopped by a signal or a hang says so, and how much is missing.
    meta.partial = partial_of(&result, plan, sink.rows.len());
    if let Some(p) = &mut meta.partial {
        // Its text showed the case it stopped in (a section with no row
        // yet, when it was a new one's first): so does a re-rendering.
        p.in_case = sink.last_case.take().map(Box::new);
    }
    let mut results = Results::new(meta, std::mem::take(&mut sink.rows));
    if let Ok(o) = result.as_mut() {
        let crowded = || links::crowded(setup.gpu, ranks_here, links::cpus(rank_processes));
        add_links(s, o, &mut results, crowded);
    }
    conclude(s, &mut sink, &results, result, capped.as_ref(), rank)
}

/// Ends a sweep that ran (or stopped): its files finished (or, refused or
/// failed, abandoned), the link matrix and warnings said, its exit code.
fn conclude(
    s: &Sweep,
    sink: &mut Fanout,
    results: &Results,
    result: Result<harness::Outcome, harness::HarnessError>,
    capped: Option<&warn::Warning>,
    rank: usize,
) -> anyhow::Result<i32> {
    let leader = rank == 0;
    if result.as_ref().is_err_and(|e| e.partial().is_none()) {
        // Refused or failed: no verdict on values that were never made.
        sink.abandon(results).context("writing results")?;
    } else {
        sink.finish(results).context("writing results")?;
    }
    if leader {
        show_links(s, results)?;
        for w in capped.into_iter().chain(&warn::scan(&results.rows)) {
            say!("collbench: warning: {w}");
        }
    }
    // An output that failed mid-sweep (a full disk) stopped the sweep: what
    // the others kept is said after the error.
    let write_failed = matches!(result, Err(harness::HarnessError::Sink(_)));
    let code = exit_code(result, rank);
    if write_failed && leader {
        let missing = results.meta.partial.as_ref().map_or(0, |p| p.missing_rows);
        let n = results.rows.len();
        // The outputs there were: the JSON, the CSV, the text.
        let outputs = [s.json.is_some(), s.csv.is_some(), !s.quiet];
        if outputs.into_iter().filter(|&o| o).count() > 1 {
            say!("collbench: the sweep stopped at that write; its other outputs keep the {n} finished row(s) ({missing} not made)");
        } else {
            say!("collbench: the sweep stopped at that write, after {n} finished row(s) ({missing} not made), which no other output kept");
        }
    }
    // nccl-tests' bandwidth floor fails a run that is otherwise clean.
    if code == OK && leader && below_min_bw(results, &s.plan) {
        return Ok(CHECK_FAILED);
    }
    Ok(code)
}

/// Cuts the sweep's largest sizes to the memory its buffers have (across
/// processes, to the fewest sizes any rank keeps): the budget measured, and
/// the warning that says what was dropped.
fn fit_sizes(
    s: &mut Sweep,
    chosen: &Chosen,
    mpi: Option<&Peers>,
) -> anyhow::Result<(Option<harness::Budget>, Option<warn::Warning>)> {
    let here = match mpi {
        None => Here::Threads(s.plan.ranks),
        Some(m) => {
            let (node_rank, node_size) = m.node_rank();
            Here::Process {
                node_rank,
                node_size,
                gpu_map: s.plan.gpu_map.as_deref(),
            }
        }
    };
    let budget = budget(&s.plan, chosen, here);
    let asked = s.plan.sizes.clone();
    let mut cap = budget.and_then(|b| harness::cap_sizes_to_memory(&mut s.plan, b));
    if let Some(m) = mpi {
        // Every rank sweeps the same sizes: as many as the rank with the
        // least memory keeps (each measured its own node, at its moment).
        let kept = fewest_sizes(m, s.plan.sizes.len())?;
        if kept < s.plan.sizes.len() {
            s.plan.sizes.truncate(kept);
            cap = Some(harness::SizeCap {
                kept_max: s.plan.sizes.last().copied().unwrap_or(0),
                dropped: asked.get(kept..).unwrap_or_default().to_vec(),
                available: cap
                    .as_ref()
                    .map(|c| c.available)
                    .or_else(|| budget.and_then(|b| b.available()))
                    .unwrap_or(0),
            });
        }
    }
    let capped = cap.map(|c| warn::Warning::SizesCapped {
        kept_max: c.kept_max,
        dropped: c.dropped,
        available: c.available,
        ranks: s.plan.ranks,
    });
    Ok((budget, capped))
}

/// The sweep's cases, or the exit code of a refusal (said once, by rank
/// 0, when ranks are processes: they agree on it first). Device memory too
/// small even for the smallest size is refused here, alike on every rank
/// (the host engine's is, in `prepare`).
fn prepare(
    plan: &Plan,
    setup: &Setup,
    budget: Option<harness::Budget>,
    mpi: Option<&Peers>,
    rank: usize,
) -> anyhow::Result<Result<harness::Prepared, i32>> {
    let prepared = harness::prepare(plan, setup, mpi).and_then(|p| match budget {
        Some(b @ harness::Budget::Device { .. }) => {
            harness::check_budget(plan, &p.cases, b).map(|()| p)
        }
        _ => Ok(p),
    });
    Ok(match (prepared, mpi) {
        (Ok(p), None) => Ok(p),
        (Err(e), None) => Err(exit_code(Err(e), rank)),
        (p, Some(m)) => match agree_prepared(m, plan, p)? {
            Ok(p) => Ok(p),
            Err(said) => {
                if rank == 0 {
                    fail(said);
                }
                Err(USAGE)
            }
        },
    })
}

/// `--links`: the link matrix of the sweep's largest size (with its
/// verdict, and a note where the ranks crowd the machine's CPUs) and each
/// other case's links, into the results.
fn add_links(
    s: &Sweep,
    o: &mut harness::Outcome,
    results: &mut Results,
    crowded: impl FnOnce() -> Option<String>,
) {
    if let Some(t) = &o.links {
        let crowded = crowded();
        let mut r = links::matrix(&s.plan, t, crowded.is_some());
        if let Some(why) = crowded {
            // In the results' notes, and said as the run ends.
            let note = links::crowded_note(&why);
            results.meta.notes.push(note.clone());
            o.notes.push(note);
        }
        if let Some(floor) = s.min_link_gbps {
            crate::report::links::add_floor_findings(&mut r, floor);
        }
        o.link_findings = r.findings.len();
        results.links = Some(r);
    }
    results.case_links = o
        .case_links
        .iter()
        .map(|(coll, algo, t)| links::told(*coll, *algo, t))
        .collect();
}

/// Prints the link matrix after the table (on stderr when stdout carries
/// data) and draws its heatmap beside `--plot`.
fn show_links(s: &Sweep, results: &Results) -> anyhow::Result<()> {
    let Some(l) = &results.links else {
        return Ok(());
    };
    if !s.quiet {
        let mut text = crate::report::links::render(l, s.plan.ranks);
        for c in &results.case_links {
            text.push_str(&crate::report::links::render_case(c));
        }
        if s.data_on_stdout() {
            say_part!("{text}");
        } else {
            out_part!("{text}");
        }
    }
    if let Some(p) = &s.plot {
        let path = links::heatmap_path(p);
        links::draw_heatmap(l, s.plan.ranks, &path).map_err(|e| anyhow!(e))?;
    }
    Ok(())
}

/// Whether the sweep runs several algorithms per case, so that nccl-tests'
/// text prints one run per algorithm.
pub(super) fn split_algos(plan: &Plan) -> bool {
    match &plan.algos {
        harness::AlgoChoice::List(l) => l.len() > 1,
        harness::AlgoChoice::Pairs(_) => true,
        harness::AlgoChoice::Auto => false,
    }
}

/// `NCCL_TESTS_MIN_BW` of a run as an nccl-tests binary: each run of its
/// text whose average bus bandwidth is below 0.9 of it fails (exit 1), as
/// in nccl-tests; says which.
pub(super) fn below_min_bw(results: &Results, plan: &Plan) -> bool {
    let Some(min) = results.meta.nccl_tests_min_bw else {
        return false;
    };
    let low = crate::report::nccl::runs_below_min_bw(&results.rows, min, split_algos(plan));
    for (run, avg) in &low {
        say!(
            "collbench: {run}: average bus bandwidth {} GB/s is below 0.9 x NCCL_TESTS_MIN_BW={min} GB/s",
            crate::report::nccl::fmt_g(*avg)
        );
    }
    !low.is_empty()
}

/// `--procs N`: checks the sweep as the ranks will see it (bad input is
/// said once, here), then starts the N rank processes and serves them.
pub(super) fn launch_procs(
    coll: Option<Collective>,
    args: &RunArgs,
    probe: bool,
    n: usize,
) -> anyhow::Result<i32> {
    if let Some((launcher, tasks)) = crate::launch::foreign_launcher() {
        bail!("--procs {n}: this process is one of {tasks} tasks started by {launcher}: use the launcher's ranks or --procs, not both");
    }
    if args.engine.0.contains(&Engine::Mpi) {
        bail!("--engine mpi runs MPI's own collectives: it needs an MPI launch (mpirun -np {n} collbench ...), not --procs");
    }
    if args.engine.0.contains(&Engine::Nccl) {
        bail!("--engine nccl across processes is not supported yet: run one process with --ranks {n} for NCCL's rows");
    }
    if crate::launch::force_relay() {
        bail!("COLLBENCH_FORCE_RELAY=1 tests the relay between nodes, which is MPI point-to-point: run under mpirun, not --procs");
    }
    let s = build_sweep(coll, args, probe, Some(n))?;
    check_paths(&s, true, &[])?;
    // Rank 0 checks and writes the outputs itself: a FIFO the check opened
    // here is not this process's to hold.
    crate::units::release_held();
    // The device and the ranks' GPUs, judged once here: every rank would
    // refuse them alike.
    let chosen = choose_device(&s, Some(n))?;
    if let Some(kind) = chosen.gpu {
        check_node_placement(kind, &s.plan, n)?;
        if s.plan.protocol == Some(crate::engine::exec::cuda::abi::Proto::LowLatency128) {
            bail!(crate::engine::exec::cuda::launch::ll128_refused(true, n));
        }
    }
    let hooks = crate::launch::procs::Hooks {
        signalled: &watchdog::stop_signal_number,
        snapshot: &watchdog::take_snapshot_request,
        on_death: &|rank, pid, how| {
            say!("collbench: --procs: rank {rank}'s process (pid {pid}) died: {how}")
        },
    };
    Ok(crate::launch::procs::launch(n, &hooks)?)
}

/// The sweep of `coll` (None: every collective), or the links probe's.
pub(super) fn build_sweep(
    coll: Option<Collective>,
    args: &RunArgs,
    probe: bool,
    world: Option<usize>,
) -> anyhow::Result<Sweep> {
    Ok(if probe {
        plan::build_links(args, world)?
    } else {
        plan::build(coll, args, world)?
    })
}

/// Refuses output files (the leader's, `extra` among them) and a dump
/// folder that cannot be written, or that is one of the outputs.
pub(super) fn check_paths(s: &Sweep, leader: bool, extra: &[(&str, &Path)]) -> anyhow::Result<()> {
    let mut outputs: Vec<(&str, &Path)> = extra.to_vec();
    // With --links, --plot FILE also draws the heatmap beside it.
    let heatmap = s
        .plot
        .as_deref()
        .filter(|_| s.plan.host.link_timing)
        .map(links::heatmap_path);
    if leader {
        outputs.extend(
            [
                ("--json", &s.json),
                ("--csv", &s.csv),
                ("--plot", &s.plot),
                ("--plot (its links heatmap)", &heatmap),
            ]
            .into_iter()
            .filter_map(|(f, p)| p.as_deref().map(|p| (f, p))),
        );
        paths::check_outputs(&outputs, &s.inputs)?;
        if let (Some(h), Some(p)) = (&heatmap, &s.plot) {
            let named = format!("--plot {}", p.display());
            paths::check_beside(&named, h, paths::Beside::Heatmap)?;
        }
    }
    if let Some(d) = &s.plan.dump_dir {
        paths::check_dump_dir(d, &outputs)?;
    }
    Ok(())
}

/// `meta.partial` of a sweep of `plan` that ended with `result` after
/// making `made` rows: stopped by a signal or a hang, or failed, and how
/// much is missing. (A signal as the sweep ended: nothing is missing, but
/// the run was interrupted all the same, as its exit code says.)
pub(super) fn partial_of(
    result: &Result<harness::Outcome, harness::HarnessError>,
    plan: &Plan,
    made: usize,
) -> Option<Partial> {
    match result {
        Err(e) => e.partial().or_else(|| {
            let expected = harness::expected_rows(plan, &harness::plan::cases(plan).0);
            Some(Partial {
                reason: StopReason::Error,
                missing_rows: expected.saturating_sub(made),
                in_case: None,
            })
        }),
        Ok(_) => watchdog::signalled().then_some(Partial {
            reason: StopReason::Signal,
            missing_rows: 0,
            in_case: None,
        }),
    }
}

/// `rank`: this process's rank of the world (0 when it runs every rank):
/// rank 0 says what concerns the whole run.
pub(super) fn exit_code(
    result: Result<harness::Outcome, harness::HarnessError>,
    rank: usize,
) -> i32 {
    let leader = rank == 0;
    match result {
        // A signal after the sweep's end: every row is in; still 130.
        Ok(_) if watchdog::stopped_for_closed_stdout() => {
            // Its reader took what it wanted; the files keep every row.
            say!("collbench: stdout was closed by its reader as the sweep ended: what was written to it before is all it got (--json and --csv files keep every row)");
            INTERRUPTED
        }
        Ok(_) if watchdog::signalled() => {
            say!("collbench: interrupted by a signal as the sweep ended; every row is kept");
            INTERRUPTED
        }
        Ok(o) => {
            for n in o.notes.iter().filter(|_| leader) {
                say!("collbench: note: {n}");
            }
            for i in o.unfired.iter().filter(|_| leader) {
                if i.pace_rule().is_some() {
                    say!(
                        "collbench: warning: --inject {i} never slowed anything: no operation of the sweep moved data over that link"
                    );
                    continue;
                }
                say!(
                    "collbench: warning: --inject {i} never fired: the sweep ended before collective {} on rank {}, or no case had a type it applies to, elements where it goes (an uneven block may have none) and a check that sees it (not a non-root rank's input of broadcast or scatter, or output of reduce or gather)",
                    i.seq, i.rank
                );
            }
            if o.link_findings > 0 && leader {
                say!(
                    "collbench: {} slow link(s) or rank(s) found (see the link matrix)",
                    o.link_findings
                );
            }
            if o.bad_rows > 0 || !o.unfired.is_empty() || o.link_findings > 0 {
                if o.bad_rows > 0 {
                    say!(
                        "collbench: {} row(s) had wrong or NaN/Inf values",
                        o.bad_rows
                    );
                }
                CHECK_FAILED
            } else {
                OK
            }
        }
        Err(e) if e.is_hang() => {
            // The process that found it first says so; under MPI rank 0
            // too (mpirun may end the finder, once another process exits,
            // before it could); `--procs`' parent waits for every rank. A
            // rank's death is said by the first rank that lived.
            let procs_rank = crate::launch::procs::rank_here().is_some();
            let speaks = match e.lost_rank() {
                Some(lost) => rank == usize::from(lost == 0),
                None => !e.is_remote_hang() || (leader && !procs_rank),
            };
            if speaks {
                say!("collbench: {e}");
            }
            HANG
        }
        Err(e) if e.is_interrupt() => {
            // Rank processes share the run's dump folder: rank 0 says it.
            if leader {
                say!("collbench: {e}");
            }
            INTERRUPTED
        }
        Err(e) => fail(e),
    }
}
