//! Arguments to a validated sweep: every error a user can make is found
//! here and said in one line.

use super::values::{inject_in_world, AlgoArg, DeviceChoice, FormatChoice, TimingChoice};
use super::{RunArgs, SizeArgs};
use crate::engine::exec::HostOptions;
use crate::engine::types::Collective;
use crate::harness::{AlgoChoice, Plan, RootChoice};
use crate::units::{sweep, Growth};
use std::path::PathBuf;

/// Why a sweep's options do not fit together (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

fn bad<T>(msg: String) -> Result<T, PlanError> {
    Err(PlanError(msg))
}

/// A sweep request: the plan and how to present it.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub plan: Plan,
    pub device: DeviceChoice,
    /// `--timing` (None: events on the CUDA engine, wall on the host).
    pub timing: Option<TimingChoice>,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub format: FormatChoice,
    pub quiet: bool,
    pub verbose: u8,
}

fn sizes(a: &SizeArgs) -> Result<Vec<u64>, PlanError> {
    if let Some(s) = &a.sizes {
        return Ok(s.0.clone());
    }
    let (min, max) = match (a.minbytes, a.maxbytes) {
        (None, None) => (8, 64 << 20),
        (Some(m), None) => (m, m.max(64 << 20)),
        (None, Some(m)) => (8.min(m), m),
        (Some(a), Some(b)) => (a, b),
    };
    let growth = match (a.stepfactor, a.stepbytes) {
        (Some(f), _) => Growth::Factor(f),
        (None, Some(s)) => Growth::Step(s),
        (None, None) => Growth::Factor(2.0),
    };
    sweep(min, max, growth).map_err(|e| PlanError(e.to_string()))
}

fn names<T>(all: &[T], name: impl Fn(&T) -> &'static str) -> String {
    all.iter().map(name).collect::<Vec<_>>().join(", ")
}

fn algos(arg: &AlgoArg, colls: &[Collective]) -> Result<AlgoChoice, PlanError> {
    let chosen = match arg {
        AlgoArg::Auto => return Ok(AlgoChoice::Auto),
        AlgoArg::List(l) => l,
    };
    let said = names(chosen, |a| a.name()).replace(", ", ",");
    if let [c] = colls {
        if !chosen.iter().any(|x| c.algos().contains(x)) {
            return bad(format!(
                "--algo {said}: not an algorithm for {c} (it has: {})",
                names(c.algos(), |x| x.name())
            ));
        }
    } else if !colls
        .iter()
        .any(|c| chosen.iter().any(|x| c.algos().contains(x)))
    {
        return bad(format!("--algo {said}: no selected collective has it"));
    }
    Ok(AlgoChoice::List(chosen.clone()))
}

/// Validates `a` for `coll` (None: every collective). `world`: the MPI
/// world's size when this process is one rank of one (the rank count is
/// then the world's).
pub fn build(
    coll: Option<Collective>,
    a: &RunArgs,
    world: Option<usize>,
) -> Result<Sweep, PlanError> {
    let collectives = coll.map_or(Collective::ALL.to_vec(), |c| vec![c]);
    let ranks = match (a.ranks, world) {
        (Some(r), Some(w)) if r != w => {
            return bad(format!(
                "--ranks {r}: under MPI every process is one rank, and this world has {w}"
            ))
        }
        (_, Some(w)) => w,
        (r, None) => r.unwrap_or(2),
    };
    if let RootChoice::One(root) = a.root {
        if root >= ranks {
            return bad(format!(
                "--root {root} is outside the {ranks} ranks (0..={})",
                ranks - 1
            ));
        }
    }
    for i in &a.inject {
        inject_in_world(i, ranks).map_err(|e| PlanError(e.to_string()))?;
    }
    let plan = Plan {
        sizes: sizes(&a.sizes)?,
        ranks,
        algos: algos(&a.algo, &collectives)?,
        dtypes: a.dtype.0.clone(),
        ops: a.op.0.clone(),
        roots: a.root,
        placements: a.placement.placements(),
        iters: a.iters,
        warmup: a.warmup,
        check_iters: match (a.check_iters, a.no_check) {
            (_, true) => 0,
            (Some(c), false) => c,
            (None, false) => 1,
        },
        channels: a.channels.count(),
        seed: a.seed,
        host: HostOptions {
            slot_bytes: a.slot_size,
            timeout: a.timeout,
            ..HostOptions::default()
        },
        fr_entries: a.fr_entries,
        dump_dir: a.dump_dir.clone(),
        injects: a.inject.clone(),
        graph: a.graph,
        protocol: a.protocol.proto(),
        engines: a.engine.0.clone(),
        collectives,
    };
    Ok(Sweep {
        plan,
        device: a.device,
        timing: a.timing,
        json: a.json.clone(),
        csv: a.out.csv.clone(),
        plot: a.out.plot.clone(),
        format: a.out.format,
        quiet: a.out.quiet,
        verbose: a.out.verbose,
    })
}

#[cfg(test)]
mod tests {
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
    fn defaults_make_the_documented_sweep() {
        let s = build(Some(Collective::AllReduce), &parse(&[]), None).unwrap();
        let p = &s.plan;
        assert_eq!((p.ranks, p.iters, p.warmup, p.check_iters), (2, 20, 5, 1));
        assert_eq!((p.sizes[0], *p.sizes.last().unwrap()), (8, 64 << 20));
        assert_eq!(p.algos, AlgoChoice::Auto);
        assert_eq!(s.device, DeviceChoice::Auto);
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
}
