//! Comparing a candidate results file against a baseline: rows are matched
//! on (collective, engine, algo, dtype, op, root, bytes, placement, group
//! members, split), or, when either side was read from an nccl-tests log
//! (engine `nccl-tests-log`), on the same without engine and algorithm:
//! engine and algorithm ignored, and the op of a collective that does not
//! reduce ignored too (nccl-tests' `sendrecv_perf` prints `sum`). When a
//! file holds runs at several world sizes (a log of `-g 1`, `-g 2`, ...
//! runs), rows are matched on world size as well. Where several
//! candidate rows share a key, the first is taken. Each
//! pair is judged on the number that matters at its size. Sizes of
//! [`LARGE_BYTES`] and up are bandwidth-bound, so their bus bandwidth is
//! compared; smaller sizes are latency-bound (their busbw is tiny and noisy),
//! so their time is compared. A pair regressed when that number got worse by
//! more than the allowed percentage, or when the candidate has wrong values.

use super::grid;
use super::nccl_log::ENGINE as LOG_ENGINE;
use super::warn::describe;
use super::{Meta, Results, Row};
use std::collections::HashMap;

/// The smallest size compared by bus bandwidth (1 MiB); smaller ones by time.
pub const LARGE_BYTES: u64 = 1 << 20;

/// The default `--max-regression`, in percent.
pub const DEFAULT_MAX_REGRESSION_PCT: f64 = 5.0;

/// The number a pair is judged on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Bus bandwidth, GB/s: higher is better.
    Busbw,
    /// Time per iteration, us: lower is better.
    Time,
}

impl Metric {
    /// The metric for rows of `bytes`.
    pub fn for_size(bytes: u64) -> Metric {
        if bytes >= LARGE_BYTES {
            Metric::Busbw
        } else {
            Metric::Time
        }
    }

    fn value(self, r: &Row) -> f64 {
        match self {
            Metric::Busbw => r.busbw_gbps,
            Metric::Time => r.time_us,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Busbw => "busbw GB/s",
            Metric::Time => "time us",
        }
    }
}

/// A baseline row and the candidate row that matches it.
#[derive(Clone, Debug)]
pub struct Pair {
    pub base: Row,
    pub cand: Row,
    pub metric: Metric,
    /// Candidate over baseline, of the metric.
    pub ratio: f64,
    /// How much worse the candidate is, in percent (negative: better).
    pub worse_pct: f64,
    pub regressed: bool,
    /// The world size both rows ran at, where rows were matched on it.
    pub world: Option<usize>,
}

impl Pair {
    fn new(base: &Row, cand: &Row, world: Option<usize>, max_regression_pct: f64) -> Pair {
        // A size whose busbw is zero by definition (one rank moves nothing
        // between ranks) is judged on its time, as a small one is.
        let metric = match Metric::for_size(base.bytes) {
            Metric::Busbw if base.busbw_gbps == 0.0 && cand.busbw_gbps == 0.0 => Metric::Time,
            m => m,
        };
        let (b, c) = (metric.value(base), metric.value(cand));
        // A zero time or bandwidth on either side (a lone rank's in-place
        // operation moves nothing) has no ratio.
        let ratio = if b > 0.0 && c > 0.0 { c / b } else { f64::NAN };
        // A baseline's bandwidth gone (zero, or not a number, in the
        // candidate) is the worst regression there is, not "no ratio".
        let lost = metric == Metric::Busbw && b > 0.0 && (c.is_nan() || c <= 0.0);
        let worse_pct = match metric {
            _ if lost => 100.0,
            Metric::Busbw => (1.0 - ratio) * 100.0,
            Metric::Time => (ratio - 1.0) * 100.0,
        };
        // Another NaN ratio cannot be judged: only wrong values count.
        // "More than PCT": a change of exactly PCT (105 us against 100, in
        // binary floating point 5.000000000000004%) is not one.
        let regressed = worse_pct > max_regression_pct + SLACK_PCT || cand.is_bad();
        Pair {
            base: base.clone(),
            cand: cand.clone(),
            metric,
            ratio,
            worse_pct,
            regressed,
            world,
        }
    }

    fn verdict(&self, max_regression_pct: f64) -> &'static str {
        if self.cand.is_bad() {
            "WRONG VALUES"
        } else if self.regressed {
            "REGRESSED"
        } else if self.ratio.is_nan() {
            "not comparable (a zero)"
        } else if -self.worse_pct > max_regression_pct + SLACK_PCT {
            "better"
        } else {
            "ok"
        }
    }
}

/// The outcome of comparing two results files.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub pairs: Vec<Pair>,
    /// Baseline rows no candidate row matched.
    pub only_base: usize,
    /// Candidate rows no baseline row matched.
    pub only_cand: usize,
    pub max_regression_pct: f64,
    /// Rows were matched ignoring engine and algorithm: which side (or
    /// both) came from an nccl-tests log.
    pub loose: Option<Loose>,
    /// Baseline rows the candidate lacks, described.
    pub missing: Vec<String>,
    /// Keys that more than one row of a file has (`baseline: ...`).
    pub duplicates: Vec<String>,
    /// How the two runs differ in kind (world size, device), one line each.
    pub differences: Vec<String>,
    /// Rows were matched on world size too: a side holds runs at several.
    pub by_world: bool,
}

/// Which side of a comparison is an nccl-tests log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loose {
    Baseline,
    Candidate,
    Both,
}

/// The collectives whose op means nothing.
const NO_OP: [&str; 6] = [
    "all-gather",
    "broadcast",
    "all-to-all",
    "gather",
    "scatter",
    "send-recv",
];

/// Rounding allowed around the regression threshold, in percent.
const SLACK_PCT: f64 = 1e-9;

/// What a row measured: its case, and what makes two cases of the same
/// size different work (a group's operations, a v-collective's split).
type Key<'a> = (
    usize,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    i64,
    u64,
    &'a str,
    &'a [String],
    &'a str,
);

/// `world`: the row's run's world size, or 0 where rows are not matched on it.
fn key(r: &Row, world: usize, loose: bool) -> Key<'_> {
    let split = r.split.as_deref().unwrap_or("");
    if loose {
        let op = if NO_OP.contains(&r.collective.as_str()) {
            "none"
        } else {
            &r.op
        };
        return (
            world,
            &r.collective,
            "",
            "",
            &r.dtype,
            op,
            r.root,
            r.bytes,
            &r.placement,
            &r.members,
            split,
        );
    }
    (
        world,
        &r.collective,
        &r.engine,
        &r.algo,
        &r.dtype,
        &r.op,
        r.root,
        r.bytes,
        &r.placement,
        &r.members,
        split,
    )
}

fn is_log(runs: &[Results]) -> bool {
    runs.iter()
        .flat_map(|r| &r.rows)
        .any(|x| x.engine == LOG_ENGINE)
}

/// The world sizes `runs` were measured at, ascending, each once.
pub fn worlds(runs: &[Results]) -> Vec<usize> {
    let mut w: Vec<usize> = runs.iter().map(|r| r.meta.world_size).collect();
    w.sort_unstable();
    w.dedup();
    w
}

/// The rows that stand for themselves, each with its run's world size: a
/// group's operations are left to its row (they share its time).
fn ungrouped(runs: &[Results]) -> Vec<(usize, &Row)> {
    runs.iter()
        .flat_map(|r| r.rows.iter().map(|x| (r.meta.world_size, x)))
        .filter(|(_, r)| r.group_member.is_none())
        .collect()
}

/// A row described, with its world size where rows are matched on it.
fn case(r: &Row, world: Option<usize>) -> String {
    match world {
        Some(w) => format!("{} at {w} rank(s)", describe(r)),
        None => describe(r),
    }
}

/// World sizes as a list: `2, 4, 8`.
pub fn list(worlds: &[usize]) -> String {
    let w: Vec<String> = worlds.iter().map(|w| w.to_string()).collect();
    w.join(", ")
}

/// Matches `cand`'s rows to `base`'s and judges each pair.
pub fn compare(base: &Results, cand: &Results, max_regression_pct: f64) -> Comparison {
    compare_runs(
        std::slice::from_ref(base),
        std::slice::from_ref(cand),
        max_regression_pct,
    )
}

/// [`compare`] of files of several runs each (an nccl-tests log's runs):
/// every run's rows, matched on world size too when a side holds runs at
/// more than one.
pub fn compare_runs<'a>(
    base: &'a [Results],
    cand: &'a [Results],
    max_regression_pct: f64,
) -> Comparison {
    let loose = match (is_log(base), is_log(cand)) {
        (true, true) => Some(Loose::Both),
        (true, false) => Some(Loose::Baseline),
        (false, true) => Some(Loose::Candidate),
        (false, false) => None,
    };
    let (base_worlds, cand_worlds) = (worlds(base), worlds(cand));
    let by_world = base_worlds.len() > 1 || cand_worlds.len() > 1;
    let world_of = |w: usize| by_world.then_some(w);
    let is_loose = loose.is_some();
    let key_of = |(w, r): (usize, &'a Row)| key(r, if by_world { w } else { 0 }, is_loose);
    // A group is compared by its row; its operations share its time.
    let (base_rows, cand_rows) = (ungrouped(base), ungrouped(cand));
    let mut duplicates = Vec::new();
    let mut by_key: HashMap<Key<'_>, &Row> = HashMap::new();
    for &(w, r) in &cand_rows {
        match by_key.entry(key_of((w, r))) {
            std::collections::hash_map::Entry::Occupied(_) => {
                duplicates.push(format!("candidate: {}", case(r, world_of(w))));
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(r);
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for &(w, r) in &base_rows {
        if !seen.insert(key_of((w, r))) {
            duplicates.push(format!("baseline: {}", case(r, world_of(w))));
        }
    }
    let mut pairs = Vec::new();
    let mut missing = Vec::new();
    // A key's first row on each side stands for it (the others are the
    // duplicates warned of): a repeat is neither missing nor unmatched.
    let mut judged = std::collections::HashSet::new();
    for &(w, b) in &base_rows {
        if !judged.insert(key_of((w, b))) {
            continue;
        }
        match by_key.remove(&key_of((w, b))) {
            Some(c) => pairs.push(Pair::new(b, c, world_of(w), max_regression_pct)),
            None => missing.push(case(b, world_of(w))),
        }
    }
    let only_cand = by_key.len();
    let differences = differences(base, cand, &base_worlds, &cand_worlds, by_world);
    Comparison {
        pairs,
        only_base: missing.len(),
        only_cand,
        max_regression_pct,
        loose,
        missing,
        duplicates,
        differences,
        by_world,
    }
}

/// A setting of a run's meta, as text, where it says one.
type Setting = fn(&Meta) -> Option<String>;

/// How the two sides' runs differ beyond their rows: world sizes
/// (`by_world`: rows are matched at equal world size) and device.
fn differences(
    base: &[Results],
    cand: &[Results],
    base_worlds: &[usize],
    cand_worlds: &[usize],
    by_world: bool,
) -> Vec<String> {
    let mut differences = Vec::new();
    if base_worlds != cand_worlds {
        differences.push(if by_world {
            format!(
                "world sizes: baseline {} ranks, candidate {} (rows are matched at equal world size)",
                list(base_worlds),
                list(cand_worlds)
            )
        } else {
            format!(
                "world size: baseline {} ranks, candidate {}",
                list(base_worlds),
                list(cand_worlds)
            )
        });
    }
    let device = |runs: &[Results]| {
        runs.first()
            .map(|r| r.meta.device.clone())
            .unwrap_or_default()
    };
    let (base_device, cand_device) = (device(base), device(cand));
    if base_device != cand_device {
        differences.push(format!(
            "device: baseline {base_device}, candidate {cand_device}"
        ));
    }
    // How the engine ran, where both sides say: a protocol or channel
    // count is a setting, not the hardware.
    let said = |runs: &[Results], f: Setting| runs.first().and_then(|r| f(&r.meta));
    let settings: [(&str, Setting); 3] = [
        ("protocol", |m| m.protocol.clone()),
        ("channels", |m| m.channels.map(|c| c.to_string())),
        // A CPU time (nccl-tests -C) is no GPU time, whichever the other.
        ("timing", |m| {
            Some(m.timing.clone()).filter(|t| !t.is_empty())
        }),
    ];
    for (name, f) in settings {
        if let (Some(b), Some(c)) = (said(base, f), said(cand, f)) {
            if b != c && (name != "timing" || b == "cpu" || c == "cpu") {
                differences.push(format!("{name}: baseline {b}, candidate {c}"));
            }
        }
    }
    differences
}

impl Comparison {
    /// What rows were matched on, one line; `base` and `cand` name the files.
    pub fn matched_on(&self, base: &str, cand: &str) -> String {
        let world = if self.by_world { ", world size" } else { "" };
        let Some(loose) = self.loose else {
            return format!(
                "matched on collective, engine, algo, dtype, op, root, bytes, placement, group members, split{world}"
            );
        };
        let why = match loose {
            Loose::Baseline => format!("{base} is an nccl-tests log"),
            Loose::Candidate => format!("{cand} is an nccl-tests log"),
            Loose::Both => "both are nccl-tests logs".into(),
        };
        format!("matched on collective, dtype, op, root, bytes, placement, group members, split{world} (engine and algorithm ignored: {why})")
    }

    pub fn regressions(&self) -> usize {
        self.pairs.iter().filter(|p| p.regressed).count()
    }

    /// The comparison as a text table with a summary line at the end.
    pub fn render(&self) -> String {
        let head = [
            "case",
            "metric",
            "baseline",
            "candidate",
            "ratio",
            "change",
            "verdict",
        ];
        let mut table = grid::plain();
        table.set_header(head);
        for p in &self.pairs {
            let (b, c) = (p.metric.value(&p.base), p.metric.value(&p.cand));
            let change = match p.metric {
                Metric::Busbw => (p.ratio - 1.0) * 100.0,
                Metric::Time => p.worse_pct,
            };
            table.add_row([
                case(&p.base, p.world),
                p.metric.name().to_string(),
                format!("{b:.2}"),
                format!("{c:.2}"),
                if p.ratio.is_nan() {
                    "-".into()
                } else {
                    format!("{:.3}", p.ratio)
                },
                if change.is_nan() {
                    "-".into()
                } else {
                    format!("{change:+.1}%")
                },
                p.verdict(self.max_regression_pct).to_string(),
            ]);
        }
        let mut out = grid::render(table, &[2, 3, 4, 5], 2);
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    /// One line: what was compared and what regressed.
    pub fn summary(&self) -> String {
        // A pair with a zero on one side and nothing wrong was not judged.
        let unjudged = |p: &&Pair| p.ratio.is_nan() && !p.regressed;
        let judged = self.pairs.len() - self.pairs.iter().filter(unjudged).count();
        let by_bw = self
            .pairs
            .iter()
            .filter(|p| p.metric == Metric::Busbw && !unjudged(p))
            .count();
        // Wrong values fail a row whatever its numbers: said apart.
        let wrong = self.pairs.iter().filter(|p| p.cand.is_bad()).count();
        let slower = self
            .pairs
            .iter()
            .filter(|p| p.regressed && !p.cand.is_bad())
            .count();
        let mut s = format!(
            "{judged} row(s) compared ({by_bw} by busbw, at 1MiB and up; {} by time); {slower} regressed by more than {}%",
            judged - by_bw,
            crate::units::fmt_number(self.max_regression_pct)
        );
        let zeros = self.pairs.len() - judged;
        if zeros > 0 {
            s.push_str(&format!("; {zeros} not comparable (a zero on one side)"));
        }
        if wrong > 0 {
            s.push_str(&format!("; {wrong} with wrong or NaN/Inf values"));
        }
        if self.only_base + self.only_cand > 0 {
            s.push_str(&format!(
                "; unmatched: {} only in the baseline, {} only in the candidate",
                self.only_base, self.only_cand
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{results, row};

    fn scaled(rows: &[Row], time: f64) -> Vec<Row> {
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                r.time_us *= time;
                r.algbw_gbps /= time;
                r.busbw_gbps /= time;
                r
            })
            .collect()
    }

    /// Settings both sides state and that differ are said; a setting one
    /// side does not state (a log's protocol) is not; wall against events
    /// timing is the usual log-against-run pairing, CPU time is not.
    #[test]
    fn differing_settings_are_said() {
        let rows = vec![row(8, "out")];
        let (mut a, mut b) = (results(rows.clone()), results(rows));
        assert!(compare(&a, &b, 5.0).differences.is_empty());
        a.meta.protocol = Some("ll".into());
        b.meta.protocol = Some("simple".into());
        a.meta.channels = Some(2);
        b.meta.channels = Some(4);
        a.meta.timing = "events".into();
        b.meta.timing = "wall".into();
        assert_eq!(
            compare(&a, &b, 5.0).differences,
            [
                "protocol: baseline ll, candidate simple",
                "channels: baseline 2, candidate 4"
            ]
        );
        b.meta.protocol = None;
        b.meta.channels = Some(2);
        b.meta.timing = "cpu".into();
        assert_eq!(
            compare(&a, &b, 5.0).differences,
            ["timing: baseline events, candidate cpu"]
        );
    }

    #[test]
    fn identical_results_do_not_regress() {
        let rows = vec![row(8, "out"), row(8, "in"), row(4 << 20, "out")];
        let c = compare(&results(rows.clone()), &results(rows), 5.0);
        assert_eq!(
            (c.pairs.len(), c.regressions(), c.only_base, c.only_cand),
            (3, 0, 0, 0)
        );
        assert!(
            c.render()
                .contains("3 row(s) compared (1 by busbw, at 1MiB and up; 2 by time)"),
            "{}",
            c.render()
        );
    }

    #[test]
    fn small_sizes_are_judged_on_time_and_large_on_busbw() {
        let base = vec![row(8, "out"), row(1 << 20, "out")];
        let c = compare(&results(base.clone()), &results(scaled(&base, 2.0)), 10.0);
        assert_eq!(c.regressions(), 2);
        assert_eq!(c.pairs[0].metric, Metric::Time);
        assert!((c.pairs[0].worse_pct - 100.0).abs() < 1e-9);
        assert_eq!(c.pairs[1].metric, Metric::Busbw);
        assert!((c.pairs[1].worse_pct - 50.0).abs() < 1e-9);
        let text = c.render();
        assert!(
            text.contains("+100.0%") && text.contains("-50.0%"),
            "{text}"
        );
        assert!(text.contains("REGRESSED"), "{text}");
    }

    #[test]
    fn within_the_threshold_is_fine_and_faster_is_better() {
        let base = vec![row(8, "out")];
        let c = compare(&results(base.clone()), &results(scaled(&base, 1.04)), 5.0);
        assert_eq!(c.regressions(), 0);
        let c = compare(&results(base.clone()), &results(scaled(&base, 0.5)), 5.0);
        assert_eq!(c.pairs[0].verdict(5.0), "better");
    }

    #[test]
    fn a_bandwidth_lost_in_the_candidate_regresses_and_zeros_on_both_sides_do_not() {
        let big = row(4 << 20, "out");
        for lost in [0.0, f64::NAN, -1.0] {
            let mut cand = big.clone();
            cand.busbw_gbps = lost;
            let c = compare(&results(vec![big.clone()]), &results(vec![cand]), 5.0);
            assert_eq!(c.regressions(), 1, "busbw {lost}");
            assert_eq!(c.pairs[0].verdict(5.0), "REGRESSED");
        }
        // A busbw of zero on both sides (a lone rank: nothing between
        // ranks) is judged on time: twice as slow regresses.
        let mut zero = big.clone();
        zero.busbw_gbps = 0.0;
        let mut slow = zero.clone();
        slow.time_us *= 2.0;
        let c = compare(&results(vec![zero.clone()]), &results(vec![slow]), 5.0);
        assert_eq!((c.pairs[0].metric, c.regressions()), (Metric::Time, 1));
        let c = compare(
            &results(vec![zero.clone()]),
            &results(vec![zero.clone()]),
            5.0,
        );
        assert_eq!((c.pairs[0].metric, c.regressions()), (Metric::Time, 0));
        // A zero baseline bandwidth against a real one: nothing to judge,
        // and not counted as compared.
        let c = compare(&results(vec![zero]), &results(vec![big]), 5.0);
        assert_eq!(c.regressions(), 0);
        assert!(c.pairs[0].ratio.is_nan());
        assert_eq!(c.pairs[0].verdict(5.0), "not comparable (a zero)");
        assert!(
            c.summary()
                .starts_with("0 row(s) compared (0 by busbw, at 1MiB and up; 0 by time)")
                && c.summary()
                    .ends_with("; 1 not comparable (a zero on one side)"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn unmatched_rows_are_counted_and_wrong_values_regress() {
        let mut other_dtype = row(8, "out");
        other_dtype.dtype = "half".into();
        let mut wrong = row(16, "out");
        wrong.wrong = 2;
        let c = compare(
            &results(vec![row(8, "out"), row(16, "out")]),
            &results(vec![other_dtype, wrong]),
            5.0,
        );
        assert_eq!((c.pairs.len(), c.only_base, c.only_cand), (1, 1, 1));
        assert_eq!(c.regressions(), 1);
        assert!(c.render().contains("WRONG VALUES"));
        // Wrong values are said as such, not as a slowdown.
        let said = c.summary();
        assert!(
            said.contains("0 regressed by more than 5%; 1 with wrong or NaN/Inf values"),
            "{said}"
        );
        assert!(said.contains("1 only in the baseline, 1 only in the candidate"));
    }

    /// A file against itself passes though rows share keys; a change of
    /// exactly the threshold is no regression; a different group or split
    /// is different work, never matched.
    #[test]
    fn repeats_thresholds_and_workloads() {
        let r = results(vec![row(8, "out"), row(8, "out"), row(16, "out")]);
        let c = compare(&r, &r, 5.0);
        assert_eq!((c.pairs.len(), c.only_base, c.only_cand), (2, 0, 0));
        assert_eq!(c.regressions(), 0);
        let slower = results(
            r.rows
                .iter()
                .map(|x| Row {
                    time_us: x.time_us * 1.05,
                    ..x.clone()
                })
                .collect(),
        );
        assert_eq!(compare(&r, &slower, 5.0).regressions(), 0);
        assert_eq!(compare(&r, &slower, 4.9).regressions(), 2);
        let mut skew = row(8, "out");
        skew.split = Some("skew:1".into());
        let c = compare(&results(vec![row(8, "out")]), &results(vec![skew]), 5.0);
        assert_eq!((c.pairs.len(), c.only_base, c.only_cand), (0, 1, 1));
    }

    #[test]
    fn a_log_side_matches_ignoring_engine_and_algorithm() {
        let log = |r: Row| Row {
            engine: LOG_ENGINE.into(),
            algo: "nccl".into(),
            ..r
        };
        let mut send = row(64, "out");
        send.collective = "send-recv".into();
        send.op = "none".into();
        let mut log_send = log(send.clone());
        log_send.op = "sum".into();
        let base = results(vec![log(row(8, "out")), log(row(8, "in")), log_send]);
        let mut tree = row(8, "out");
        tree.algo = "tree".into();
        let cand = results(vec![row(8, "out"), tree, send]);
        let c = compare(&base, &cand, 5.0);
        // tree repeats ring's key: a duplicate warned of, not unmatched.
        assert_eq!((c.pairs.len(), c.only_base, c.only_cand), (2, 1, 0));
        assert_eq!(c.duplicates.len(), 1, "{:?}", c.duplicates);
        assert_eq!(
            c.pairs[0].cand.algo, "ring",
            "the first candidate row of a key"
        );
        assert_eq!(
            c.pairs[1].cand.collective, "send-recv",
            "send-recv's op is ignored"
        );
        assert_eq!(c.loose, Some(Loose::Baseline));
        assert_eq!(
            c.matched_on("a.log", "b.json"),
            "matched on collective, dtype, op, root, bytes, placement, group members, split (engine and algorithm ignored: a.log is an nccl-tests log)"
        );
        let c = compare(&cand, &base, 5.0);
        assert!(c
            .matched_on("b.json", "a.log")
            .ends_with("a.log is an nccl-tests log)"));
        let c = compare(&cand, &cand, 5.0);
        assert_eq!(
            (c.loose, c.pairs.len()),
            (None, 3),
            "builtin rows still match on all fields"
        );
    }
}
