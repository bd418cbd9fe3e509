//! Notes on flags a sweep leaves unused: settings that change nothing
//! for what it runs, and nccl-tests flags collbench accepts but does not need.

use super::*;

/// What the sweep runs, for the notes on flags it leaves unused.
pub(super) struct Unused {
    pub(super) premul: bool,
    pub(super) v_runs: bool,
    pub(super) reduce_runs: bool,
    pub(super) rooted_runs: bool,
    /// `--format nccl-tests` made both placements run.
    pub(super) both: bool,
}

impl Unused {
    /// A line for people on each flag given that changes nothing in this
    /// sweep, or that the sweep takes otherwise than asked.
    pub(super) fn notes(
        &self,
        a: &RunArgs,
        collectives: &[Collective],
        members: &[Collective],
        tuning: Option<&crate::harness::tuning::Tuning>,
        pace: &Pace,
        ranks: usize,
    ) -> Vec<String> {
        let untuned = untuned(members, tuning);
        let algo_skipped = algo_skipped(a, collectives);
        flag_notes(a.iters, &a.nccl_tests)
            .into_iter()
            .chain(self.unused_settings(a))
            .chain((!untuned.is_empty()).then(|| {
                format!(
                    "--tuning {}: no entry for {}: no prediction in those rows, and auto picks as without a table",
                    a.tuning.as_deref().unwrap_or(std::path::Path::new("")).display(),
                    untuned.join(", ")
                )
            }))
            .chain(step_unused(&a.sizes))
            .chain(
                pace.capped(ranks)
                    .then(|| {
                        format!(
                            "--inject: the slow and slow-link rules on one link multiply past {}x: that link is slowed {}x, no more",
                            crate::engine::transport::links::MAX_PACE,
                            crate::engine::transport::links::MAX_PACE
                        )
                    }),
            )
            .chain((!algo_skipped.is_empty()).then(|| {
                format!(
                    "--algo {}: {} have no such algorithm, so they do not run",
                    match &a.algo {
                        AlgoArg::List(l) => names(l, |x| x.name()).replace(", ", ","),
                        AlgoArg::Auto => "auto".into(),
                    },
                    algo_skipped.join(", ")
                )
            }))
            .chain(self.both.then(|| {
                "--format nccl-tests shows out-of-place and in-place side by side, as nccl-tests does: both run".to_string()
            }))
            .collect()
    }

    /// The settings of collectives none of which runs: premulsum's scalar,
    /// the v-collectives' split, the reductions' operators, the rooted
    /// collectives' root.
    fn unused_settings(&self, a: &RunArgs) -> Vec<String> {
        (!self.premul && a.scalar != Scalar::default())
            .then(|| {
                format!(
                    "--scalar {} is premulsum's: no premulsum runs in this sweep, so it is unused",
                    a.scalar
                )
            })
            .into_iter()
            .chain((!self.v_runs && a.split != Split::Uniform).then(|| {
                format!(
                    "--split {} is the v-collectives': none runs in this sweep, so it is unused",
                    a.split
                )
            }))
            .chain((!self.reduce_runs && a.op.0 != [ReduceOp::Sum]).then(|| {
                // `-o all` named as typed, not as the list it stands for.
                let every = ReduceOp::NCCL_TESTS_ORDER.iter().all(|o| a.op.0.contains(o));
                format!(
                    "--op {} is the reductions' (all-reduce, reduce, reduce-scatter, reduce-scatter-v): none runs in this sweep, so it is unused",
                    if every {
                        "all".to_string()
                    } else {
                        a.op.0.iter().map(|o| o.name()).collect::<Vec<_>>().join(",")
                    }
                )
            }))
            .chain((!self.rooted_runs && a.root != RootChoice::One(0)).then(|| {
                format!(
                    "--root {} is the rooted collectives' (broadcast, reduce, gather, scatter): none runs in this sweep, so it is unused",
                    match a.root {
                        RootChoice::One(r) => r.to_string(),
                        _ => "all".to_string(),
                    }
                )
            }))
            .collect()
    }
}

/// The sweep's collectives the tuning table has no entry for.
fn untuned(
    members: &[Collective],
    tuning: Option<&crate::harness::tuning::Tuning>,
) -> Vec<&'static str> {
    let Some(t) = tuning else {
        return Vec::new();
    };
    let mut v: Vec<&str> = members
        .iter()
        .filter(|&&c| !t.entries.iter().any(|e| e.coll() == Some(c)))
        .map(|c| c.name())
        .collect();
    v.dedup();
    v
}

/// `all --algo tree`: the collectives without such an algorithm.
fn algo_skipped(a: &RunArgs, collectives: &[Collective]) -> Vec<&'static str> {
    match &a.algo {
        AlgoArg::List(l) if collectives.len() > 1 => collectives
            .iter()
            .filter(|c| !l.iter().any(|x| c.algos().contains(x)))
            .map(|c| c.name())
            .collect(),
        _ => Vec::new(),
    }
}

/// One line for each nccl-tests flag given that changes nothing here.
pub(super) fn flag_notes(iters: usize, nt: &NcclTestsArgs) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = nt.agg_iters.filter(|&m| m > 1) {
        out.push(format!(
            "-m {m}: each case times {iters} x {m} = {} operations; times are per operation",
            iters * m
        ));
    }
    if nt.blocking == Some(true) {
        out.push("-z 1: collbench's ranks already wait for every operation of the timed loop before the next case; operations inside the loop stay back to back".into());
    }
    if nt.report_cputime == Some(true) {
        out.push(
            "-C 1: times are CUDA-event or wall-clock times, not CPU time (see --timing)".into(),
        );
    }
    if nt.local_register.is_some_and(|r| r > 0) {
        out.push("-R: buffer registration is NCCL's; collbench's engine reads peers' buffers directly where it can".into());
    }
    if nt.parallel_init == Some(true) {
        out.push("-p: collbench sets its ranks up in parallel always".into());
    }
    if nt.stream_null == Some(true) {
        out.push("-y 1: every rank runs on a stream of its own".into());
    }
    if let Some(n) = nt.run_cycles.filter(|&n| n != 1) {
        out.push(format!(
            "-N {n}: collbench runs the sweep once; run it again for more cycles"
        ));
    }
    if nt.memory_report == Some(true) {
        out.push("-M 1: the memory budget is in the -v logs".into());
    }
    if nt.unalign.is_some() {
        out.push("-u: buffers are always aligned".into());
    }
    if nt.side_comp.is_some() {
        out.push("-k: no side computation runs beside the collectives".into());
    }
    if nt.report_timestamps.is_some() {
        out.push(
            "-S: rows carry no timestamps; the results' JSON (--json) has the run's start".into(),
        );
    }
    if let Some(f) = &nt.output_file {
        out.push(format!(
            "-J {f}: nccl-tests' JSON is not written; collbench's results are, with --json FILE"
        ));
    }
    for (flag, given) in [
        ("-x", &nt.cta_policy),
        ("-D", &nt.device_implementation),
        ("-V", &nt.device_cta_count),
    ] {
        if given.is_some() {
            out.push(format!(
                "{flag}: NCCL's kernels' settings; collbench's engine has its own (--channels, --protocol)"
            ));
        }
    }
    out
}
