//! `--links`: the harness's per-link measurements at the sweep's largest
//! size, turned into the link matrix and verdict of `report::links`.

use crate::engine::types::{Algo, Collective};
use crate::harness::{GpuKind, LinkTable, Plan};
use crate::report::links::{
    judge, tidy, CaseLinks, LinkPair, LinkReport, Thresholds, CROWDED_MIN_GAP,
};

/// The median of the finite values of `v` (0 when none).
fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    crate::report::links::median(&mut v)
}

/// Every measured directed link as a pair of the report (GB/s: the median
/// over operations of bytes over transfer time).
fn pairs(table: &LinkTable) -> Vec<LinkPair> {
    table
        .samples
        .iter()
        .filter(|s| s.bytes > 0)
        .map(|s| LinkPair {
            from: s.from,
            to: s.to,
            bytes: s.bytes,
            gbps: median(&s.op_gbps),
            wait_us: s.wait_ns as f64 / 1e3,
            transfer_us: s.transfer_ns as f64 / 1e3,
        })
        .collect()
}

/// The links of `table` and the verdict on them; `rounds`: they were
/// measured in the probe's rounds of that many ranks (see
/// [`Thresholds::rounds`]); `crowded`: by ranks that share CPUs (see
/// [`Thresholds::crowded`]).
pub fn report(table: &LinkTable, rounds: Option<usize>, crowded: bool) -> LinkReport {
    let t = Thresholds {
        rounds,
        ..Thresholds::default()
    };
    let t = if crowded { t.crowded() } else { t };
    judge(table.bytes, pairs(table), &t)
}

/// The matrix of a run of `plan`: the probe's (`links_from` set) was
/// measured in rounds.
pub fn matrix(plan: &Plan, table: &LinkTable, crowded: bool) -> LinkReport {
    report(table, plan.links_from.map(|_| plan.ranks), crowded)
}

/// Why the ranks that time the links share CPUs, where they do: host
/// ranks (`gpu` None) outnumbering the `cores` of their node, where
/// `ranks_here` of them run; every emulated block is a CPU thread. GPU
/// kernels time their own steps.
pub fn crowded(gpu: Option<GpuKind>, ranks_here: usize, cores: usize) -> Option<String> {
    match gpu {
        Some(GpuKind::Cuda) => None,
        Some(GpuKind::Emu) => Some("the emulated device runs every block as a CPU thread".into()),
        None if ranks_here > cores => Some(format!(
            "{ranks_here} ranks share this node's {cores} CPU{}",
            if cores == 1 { "" } else { "s" }
        )),
        None => None,
    }
}

/// The CPUs a run's ranks share: rank threads, this process's; rank
/// processes (`mpirun`, `--procs`), their node's.
pub fn cpus(rank_processes: bool) -> usize {
    if rank_processes {
        crate::engine::cpus::online()
    } else {
        crate::engine::cpus::cores()
    }
}

/// The note a crowded verdict adds, `why` from [`crowded`].
pub fn crowded_note(why: &str) -> String {
    format!(
        "links: {why}, so a link's time holds waits for a CPU: a link is named slow only at {}x below the median (not {}x)",
        CROWDED_MIN_GAP,
        Thresholds::default().min_gap
    )
}

/// A collective's links measured beside the matrix, told without a verdict.
pub fn told(coll: Collective, algo: Algo, table: &LinkTable) -> CaseLinks {
    CaseLinks {
        collective: coll.name().to_string(),
        algo: algo.name().to_string(),
        bytes: table.bytes,
        pairs: tidy(pairs(table)),
    }
}

/// The heatmap at `path` drawn, or why not, naming `--plot PATH` once. A
/// matrix no heatmap can show (no link measured, past the ranks one
/// shows) is a warning, not a failure after the plot beside it was
/// written.
pub fn draw_heatmap(l: &LinkReport, nranks: usize, path: &std::path::Path) -> Result<(), String> {
    if let Some(why) = crate::report::links::undrawable(l, nranks) {
        say!(
            "collbench: warning: no links heatmap at {}: {why}",
            path.display()
        );
        return Ok(());
    }
    crate::report::links::plot_heatmap(l, nranks, path).map_err(|e| {
        let e = e.to_string();
        if e.starts_with("--plot ") {
            e
        } else {
            format!("--plot {}: {e}", path.display())
        }
    })
}

/// Where the heatmap goes beside `--plot FILE`: `FILE-links.EXT`.
pub fn heatmap_path(plot: &std::path::Path) -> std::path::PathBuf {
    let stem = plot
        .file_stem()
        .map_or_else(Default::default, |s| s.to_os_string());
    let mut name = stem;
    name.push("-links");
    if let Some(e) = plot.extension() {
        name.push(".");
        name.push(e);
    }
    plot.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::observe::LinkSample;

    #[test]
    fn ranks_share_cpus_on_a_crowded_host_and_on_the_emulated_device() {
        assert_eq!(crowded(Some(GpuKind::Cuda), 8, 2), None);
        assert_eq!(crowded(None, 2, 2), None);
        assert_eq!(
            crowded(None, 6, 2).as_deref(),
            Some("6 ranks share this node's 2 CPUs")
        );
        assert_eq!(
            crowded(None, 2, 1).as_deref(),
            Some("2 ranks share this node's 1 CPU")
        );
        let emu = crowded(Some(GpuKind::Emu), 1, 64).unwrap();
        assert!(emu.contains("every block as a CPU thread"), "{emu}");
        let note = crowded_note(&emu);
        assert!(
            note.contains("only at 2x below the median (not 1.5x)"),
            "{note}"
        );
    }

    #[test]
    fn a_link_is_the_median_of_its_operations() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let table = LinkTable {
            bytes: 1 << 20,
            samples: vec![
                LinkSample {
                    from: 0,
                    to: 1,
                    bytes: 3 << 20,
                    wait_ns: 2_000,
                    transfer_ns: 9_000,
                    op_gbps: vec![5.0, 50.0, 4.0],
                },
                LinkSample {
                    from: 1,
                    to: 0,
                    ..LinkSample::default()
                },
            ],
        };
        let r = report(&table, None, false);
        assert_eq!(r.bytes, 1 << 20);
        // The unmeasured link is left out; one descheduled operation does
        // not move the median.
        assert_eq!(r.pairs.len(), 1);
        assert_eq!(
            (r.pairs[0].from, r.pairs[0].to, r.pairs[0].gbps),
            (0, 1, 5.0)
        );
        assert_eq!((r.pairs[0].wait_us, r.pairs[0].transfer_us), (2.0, 9.0));
        assert_eq!(
            heatmap_path(std::path::Path::new("out/bw.png")),
            std::path::PathBuf::from("out/bw-links.png")
        );
    }
}
