//! What the plots show, apart from how they are drawn: the series made of
//! results rows, the title, the axes' ticks and their labels.

use crate::report::text::machine_line;
use crate::report::{Results, Row};
use crate::units::Bytes;

/// One results file to draw, with the name its series carry when several
/// files are overlaid.
pub struct Source<'a> {
    pub label: Option<String>,
    pub results: &'a Results,
}

/// A line on the plots: (bytes, busbw GB/s, time us) points, smallest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(u64, f64, f64)>,
    /// Which case this is (the label without its file): the same case has
    /// the same colour in every overlaid file.
    pub case: usize,
    /// Which results file it comes from: overlaid files differ in marker.
    pub source: usize,
}

/// Whether a value varies among the rows that have one (`f` gives `None`
/// where a row has none, such as the op of a broadcast), so that series must
/// be told apart by it.
fn varies<T: PartialEq>(rows: &[&Row], f: impl Fn(&Row) -> Option<T>) -> bool {
    let mut values = rows.iter().filter_map(|r| f(r));
    values
        .next()
        .is_some_and(|first| values.any(|v| v != first))
}

/// The series of `sources`: one per collective x algorithm x engine (plus
/// dtype, op and root where those vary), out-of-place rows where there are
/// any, in-place otherwise.
pub fn series(sources: &[Source<'_>]) -> Vec<Series> {
    let all: Vec<&Row> = sources.iter().flat_map(|s| &s.results.rows).collect();
    let by_dtype = varies(&all, |r| Some(r.dtype.clone()));
    let by_op = varies(&all, |r| (r.op != "none").then(|| r.op.clone()));
    let by_root = varies(&all, |r| (r.root >= 0).then_some(r.root));
    let mut out: Vec<Series> = Vec::new();
    let mut cases: Vec<String> = Vec::new();
    for (source, s) in sources.iter().enumerate() {
        let rows = &s.results.rows;
        let place = if rows.iter().any(|r| r.placement == "out") {
            "out"
        } else {
            "in"
        };
        for r in rows.iter().filter(|r| r.placement == place) {
            let mut label = format!("{} {} {}", r.collective, r.algo, r.engine);
            if by_dtype {
                label.push_str(&format!(" {}", r.dtype));
            }
            if by_op && r.op != "none" {
                label.push_str(&format!(" {}", r.op));
            }
            if by_root && r.root >= 0 {
                label.push_str(&format!(" root {}", r.root));
            }
            let case = match cases.iter().position(|c| *c == label) {
                Some(i) => i,
                None => {
                    cases.push(label.clone());
                    cases.len() - 1
                }
            };
            if let Some(l) = &s.label {
                label = format!("{l}: {label}");
            }
            let point = (r.bytes, r.busbw_gbps, r.time_us);
            match out.iter_mut().find(|x| x.label == label) {
                Some(x) if !x.points.iter().any(|p| p.0 == r.bytes) => x.points.push(point),
                Some(_) => {}
                None => out.push(Series {
                    label,
                    points: vec![point],
                    case,
                    source,
                }),
            }
        }
    }
    for s in &mut out {
        s.points.sort_by_key(|p| p.0);
    }
    out
}

/// The title and subtitle: the machine and the run.
pub(super) fn titles(sources: &[Source<'_>]) -> (String, String) {
    match sources {
        [one] => {
            let m = &one.results.meta;
            // The command without the directory of the binary.
            let mut cmd = match m.command.split_once(' ') {
                Some((bin, rest)) => format!("{} {rest}", bin.rsplit('/').next().unwrap_or(bin)),
                None => m.command.rsplit('/').next().unwrap_or_default().to_string(),
            };
            if cmd.chars().count() > 110 {
                cmd = cmd.chars().take(107).collect::<String>() + "...";
            }
            (
                format!(
                    "collbench on {}: {} ranks, {} engine",
                    m.host, m.world_size, m.device
                ),
                format!("{} · {cmd}", machine_line(m)),
            )
        }
        many => {
            // Several runs of one nccl-tests log share a label: named once.
            let mut names: Vec<String> = Vec::new();
            let mut machines: Vec<String> = Vec::new();
            for s in many {
                let m = &s.results.meta;
                let when = if m.started_at.is_empty() {
                    String::new()
                } else {
                    format!(", {}", m.started_at)
                };
                let name = names_of(s);
                let machine = format!("{name}: {} ({} ranks{when})", m.host, m.world_size);
                if !names.contains(&name) {
                    names.push(name);
                }
                if !machines.contains(&machine) {
                    machines.push(machine);
                }
            }
            (
                format!("collbench: {}", names.join(" vs ")),
                machines.join(" · "),
            )
        }
    }
}

fn names_of(s: &Source<'_>) -> String {
    s.label
        .clone()
        .unwrap_or_else(|| s.results.meta.host.clone())
}

/// Sizes as axis labels: 8B, 1KiB, 64MiB.
pub(super) fn size_label(log2: f64) -> String {
    Bytes(2f64.powf(log2).round() as u64).to_string()
}

/// Times as axis labels, given log10 of microseconds.
pub(super) fn time_label(log10: f64) -> String {
    let us = 10f64.powf(log10);
    match us {
        u if u >= 1e6 => format!("{} s", u / 1e6),
        u if u >= 1e3 => format!("{} ms", u / 1e3),
        u if u >= 1.0 => format!("{u} µs"),
        u => format!("{} ns", (u * 1e3).round()),
    }
}

/// Whole numbers from `lo` to `hi`, thinned to multiples of a step so that
/// at most `max` remain.
pub(super) fn whole_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let (lo, hi) = (lo.ceil() as i64, hi.floor() as i64);
    let n = (hi - lo + 1).max(1) as usize;
    let step = n.div_ceil(max.max(1)).max(1) as i64;
    (lo..=hi)
        .filter(|v| v.rem_euclid(step) == 0)
        .map(|v| v as f64)
        .collect()
}

/// The x range shared by both charts: log2 of the sizes, padded.
pub(super) fn x_range(series: &[Series]) -> (f64, f64) {
    let sizes = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0.max(1) as f64));
    let (lo, hi) = sizes.fold((f64::MAX, 0f64), |(a, b), v| (a.min(v), b.max(v)));
    (lo.log2().floor() - 0.3, hi.log2().ceil() + 0.3)
}

/// log10 of 2..9 times each decade in `lo..hi` (log10 units).
pub(super) fn decade_minors(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for d in (lo.floor() as i64)..=(hi.ceil() as i64) {
        for m in 2..=9 {
            let v = d as f64 + f64::from(m).log10();
            if v > lo && v < hi {
                out.push(v);
            }
        }
    }
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::fixtures::{results, row};

    pub fn sweep(algo: &str) -> Vec<Row> {
        [8u64, 64, 512, 4096, 1 << 20]
            .iter()
            .flat_map(|&b| {
                ["out", "in"].map(|p| {
                    let mut r = row(b, p);
                    r.algo = algo.into();
                    r.time_us = 5.0 + b as f64 / 1e3;
                    r
                })
            })
            .collect()
    }

    #[test]
    fn one_series_per_collective_algo_engine_from_out_of_place_rows() {
        let mut rows = sweep("ring");
        rows.extend(sweep("tree"));
        let r = results(rows);
        let s = series(&[Source {
            label: None,
            results: &r,
        }]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label, "all-reduce ring builtin");
        assert_eq!(s[0].points.len(), 5);
        let two = series(&[
            Source {
                label: Some("a".into()),
                results: &r,
            },
            Source {
                label: Some("b".into()),
                results: &r,
            },
        ]);
        assert_eq!(two.len(), 4);
        assert_eq!(two[3].label, "b: all-reduce tree builtin");
        assert_eq!(
            (two[3].case, two[3].source),
            (1, 1),
            "colour of the case, marker of the file"
        );
    }

    #[test]
    fn only_what_varies_among_rows_that_have_it_names_a_series() {
        let mut bcast = row(8, "out");
        (bcast.collective, bcast.op, bcast.root) = ("broadcast".into(), "none".into(), 0);
        let mut prod = row(8, "out");
        prod.op = "prod".into();
        let r = results(vec![row(8, "out"), bcast.clone()]);
        let labels: Vec<String> = series(&[Source {
            label: None,
            results: &r,
        }])
        .into_iter()
        .map(|s| s.label)
        .collect();
        assert_eq!(
            labels,
            ["all-reduce ring builtin", "broadcast ring builtin"]
        );
        let r = results(vec![row(8, "out"), prod, bcast]);
        let labels: Vec<String> = series(&[Source {
            label: None,
            results: &r,
        }])
        .into_iter()
        .map(|s| s.label)
        .collect();
        assert_eq!(
            labels,
            [
                "all-reduce ring builtin sum",
                "all-reduce ring builtin prod",
                "broadcast ring builtin"
            ]
        );
    }

    #[test]
    fn axis_labels_read_as_units() {
        assert_eq!(size_label(10.0), "1KiB");
        assert_eq!(size_label(3.0), "8B");
        assert_eq!(time_label(0.0), "1 µs");
        assert_eq!(time_label(3.0), "1 ms");
        assert_eq!(time_label(-1.0), "100 ns");
        assert_eq!(
            whole_ticks(2.7, 20.3, 12),
            vec![4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
        );
    }
}
