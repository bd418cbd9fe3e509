//! `--links`: the harness's per-link measurements at the sweep's largest
//! size, turned into the link matrix and verdict of `report::links`.

use crate::engine::types::{Algo, Collective};
use crate::harness::{LinkTable, Plan};
use crate::report::links::{judge, tidy, CaseLinks, LinkPair, LinkReport, Thresholds};

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
/// [`Thresholds::rounds`]).
pub fn report(table: &LinkTable, rounds: Option<usize>) -> LinkReport {
    let t = Thresholds {
        rounds,
        ..Thresholds::default()
    };
    judge(table.bytes, pairs(table), &t)
}

/// The matrix of a run of `plan`: the probe's (`links_from` set) was
/// measured in rounds.
pub fn matrix(plan: &Plan, table: &LinkTable) -> LinkReport {
    report(table, plan.links_from.map(|_| plan.ranks))
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
        let r = report(&table, None);
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
