//! Links ("find the slow link"): what was measured on each directed link
//! (sender -> receiver) made into a GB/s matrix and a verdict that names the
//! links, or the ranks, that are slow outliers; the verdict as terminal text
//! and as a heatmap ([`plot_heatmap`]). Pure: measurements in, values and
//! text out (the heatmap writes its file).
//!
//! The verdict is the modified z-score on the median absolute deviation
//! (Iglewicz and Hoaglin, "How to Detect and Handle Outliers", 1993:
//! M = 0.6745 (x - median) / MAD, an outlier when |M| > 3.5), one-sided
//! (only slowness is a finding) and joined with a minimum gap to the
//! median, so that links that are all about as fast never make a finding
//! however tight their spread.

mod heatmap;

pub use heatmap::{plot_heatmap, undrawable};

use super::grid;
use crate::units::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What one directed link (sender -> receiver) did at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkPair {
    /// The sender.
    pub from: usize,
    /// The receiver.
    pub to: usize,
    /// Bytes moved over the link per operation.
    pub bytes: u64,
    /// Its bandwidth (GB = 1e9 B); 0 when not measured.
    pub gbps: f64,
    /// How long the receiver waited for data, in microseconds.
    pub wait_us: f64,
    /// How long the transfers took, in microseconds.
    pub transfer_us: f64,
}

impl LinkPair {
    /// A link the verdict counts: two ranks, a positive, finite GB/s.
    pub fn measured(&self) -> bool {
        self.from != self.to && self.gbps.is_finite() && self.gbps > 0.0
    }

    /// The share (0..=1) of the link's time its receiver spent waiting for
    /// data; `None` when neither was timed.
    pub fn wait_share(&self) -> Option<f64> {
        let total = self.wait_us + self.transfer_us;
        (total > 0.0).then(|| self.wait_us / total)
    }
}

/// A slow link, or a rank whose every outgoing link is slow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkFinding {
    /// `slow-link` or `slow-rank`.
    pub kind: String,
    /// A slow link's sender.
    pub from: Option<usize>,
    /// A slow link's receiver.
    pub to: Option<usize>,
    /// A slow rank.
    pub rank: Option<usize>,
    /// The link's GB/s, or the slowest of the rank's outgoing links.
    pub gbps: f64,
    /// The median GB/s over all measured links.
    pub median_gbps: f64,
    /// The finding as one line: `slow link A -> B: ...` or `slow rank R: ...`.
    pub detail: String,
}

/// `kind` of a slow link.
pub const SLOW_LINK: &str = "slow-link";
/// `kind` of a slow rank.
pub const SLOW_RANK: &str = "slow-rank";

impl LinkFinding {
    /// Whether the finding covers the link `from -> to`.
    pub fn covers(&self, from: usize, to: usize) -> bool {
        match self.rank {
            Some(r) => r == from,
            None => self.from == Some(from) && self.to == Some(to),
        }
    }
}

/// Every link measured at one size, sorted by (sender, receiver), and the
/// verdict on them, worst first (`links` in the results JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkReport {
    /// The size of the operation the links were measured in.
    pub bytes: u64,
    pub pairs: Vec<LinkPair>,
    pub findings: Vec<LinkFinding>,
}

/// The links one collective and algorithm used, measured beside the
/// matrix (`collbench links`: the all-reduces run with the rounds;
/// `case_links` in the results JSON). Told, not judged: a tree's steps
/// receive from several peers at once and count their time against each,
/// so its links are no verdict's evidence; the rounds' matrix is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseLinks {
    /// The collective's name (`all-reduce`).
    pub collective: String,
    /// The algorithm's name (`ring`).
    pub algo: String,
    /// The size the links were measured at (the largest).
    pub bytes: u64,
    /// Every measured link, sorted by (sender, receiver).
    pub pairs: Vec<LinkPair>,
}

/// One line on a collective's links: how many, their median and spread,
/// the slowest. `# all-reduce ring at 16MiB: 8 links, median 9.6 GB/s,
/// 2.5-11.2 GB/s, slowest 1 -> 2`.
pub fn render_case(c: &CaseLinks) -> String {
    let links = measured(&c.pairs);
    let head = format!("# {} {} at {}:", c.collective, c.algo, Bytes(c.bytes));
    let Some(slowest) = links.iter().min_by(|a, b| a.gbps.total_cmp(&b.gbps)) else {
        return format!("{head} no link measured\n");
    };
    let hi = links.iter().map(|p| p.gbps).fold(0.0, f64::max);
    format!(
        "{head} {} links, median {} GB/s, {}-{} GB/s, slowest {} -> {}\n",
        links.len(),
        gbps_text(Center::of(&links).median),
        gbps_text(slowest.gbps),
        gbps_text(hi),
        slowest.from,
        slowest.to
    )
}

/// When a link is slow enough to be a finding.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// The modified z-score (below the median) a link must pass.
    pub z: f64,
    /// How many times slower than the median a link must be, at least.
    pub min_gap: f64,
    /// How many times slower than the median makes a link a finding
    /// whatever the others' spread.
    pub strong_gap: f64,
    /// `Some(n)`: the links were measured in rounds, round k holding the
    /// links r -> r+k of `n` ranks (`collbench links`), so a link is scored
    /// against its round's median: a round slowed as a whole (the machine
    /// busy while it ran) is no finding. None: all measured at once.
    pub rounds: Option<usize>,
}

impl Default for Thresholds {
    /// z = 3.5, the score Iglewicz and Hoaglin recommend (and the one the
    /// sweep's iteration outliers use). A gap of 1.5x: the z-score alone
    /// flags a link at 0.8x the median when the others agree to 1%, which
    /// is noise to a person; healthy links stay well within 1.5x of each
    /// other (+-15% in the tests), while what a degraded link costs is
    /// larger (a PCIe link trained at half its width or a NIC at half its
    /// speed: 2x; traffic through the host instead of NVLink: several times).
    ///
    /// A gap of 3x is a finding on its own: on a loaded machine the healthy
    /// links of a ring of 8 spread from 0.8x to 1.4x of their median, which
    /// lifts the median absolute deviation enough to hide a link 10x slower
    /// from a z-score over eight values; healthy links measured as the
    /// median of their steps' rates never came near a third of the median
    /// (`results/links-host-2core.md`).
    fn default() -> Self {
        Thresholds {
            z: 3.5,
            min_gap: 1.5,
            strong_gap: 3.0,
            rounds: None,
        }
    }
}

/// The gap to the median a finding needs where the ranks that measured the
/// links share CPUs (host ranks outnumbering the cores, or the emulated
/// device's blocks): a link's time then holds its ranks' waits for a CPU.
/// Healthy runs of 6 host ranks on 2 cores put a link at up to 1.7x below
/// the median, and so did a slowed rank sleeping out its extra time, whose
/// CPU ran the other ranks' transfers unevenly (`results/links-host-2core.md`).
pub const CROWDED_MIN_GAP: f64 = 2.0;

impl Thresholds {
    /// These thresholds for links measured by ranks that share CPUs (see
    /// [`CROWDED_MIN_GAP`]).
    pub fn crowded(self) -> Thresholds {
        Thresholds {
            min_gap: self.min_gap.max(CROWDED_MIN_GAP),
            ..self
        }
    }
}

/// The fewest measured links a verdict is given on.
pub const MIN_LINKS: usize = 3;

/// The fewest measured links the z-score is trusted on: below this many the
/// median absolute deviation is too rough (3 host ranks' 6 healthy links
/// put one at 1.6x below the median and past z = 3.5), and only a link
/// `strong_gap` times slower (or slower than links that all agree) is a
/// finding.
pub const MIN_Z_LINKS: usize = 8;

/// Above this many ranks the text lists the slowest links instead of
/// drawing matrices no terminal holds.
pub const MAX_MATRIX_RANKS: usize = 32;

/// How many links the text lists when it draws no matrix.
const LISTED: usize = 10;

/// The middle of the measured links' GB/s and their spread around it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Center {
    median: f64,
    /// The median absolute deviation from `median`.
    mad: f64,
}

/// The median of `values` (sorted in place; 0 when empty).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

impl Center {
    fn of(pairs: &[&LinkPair]) -> Center {
        Center::of_values(pairs.iter().map(|p| p.gbps).collect())
    }

    fn of_values(mut values: Vec<f64>) -> Center {
        let m = median(&mut values);
        let mut dev: Vec<f64> = values.iter().map(|g| (g - m).abs()).collect();
        Center {
            median: m,
            mad: median(&mut dev),
        }
    }

    /// Whether `gbps` is a slow outlier: at least `strong_gap` times slower
    /// than the median, or far below it by the modified z-score (where
    /// `trust_z`) and at least `min_gap` times slower. Where the links
    /// deviate by nothing (all others equal) the gap alone decides.
    fn is_slow(&self, gbps: f64, t: &Thresholds, trust_z: bool) -> bool {
        if gbps * t.strong_gap < self.median {
            return true;
        }
        let gap = gbps * t.min_gap < self.median;
        if self.mad <= self.median * 1e-12 {
            return gap;
        }
        if !trust_z {
            return false;
        }
        let z = 0.6745 * (gbps - self.median) / self.mad;
        gap && z < -t.z
    }
}

/// What each link is judged on. Where every receiver was measured from at
/// least [`MIN_LINKS`] senders (all-to-all patterns), a link's GB/s over
/// its receiver's median: receivers differ (how many senders share one of
/// their steps, their own load) more than a healthy link differs from its
/// neighbours, and a slow sender then stands out in every column. Else
/// (a ring: one sender per receiver) the GB/s itself.
fn scores(links: &[&LinkPair], t: &Thresholds) -> Vec<f64> {
    if let Some(n) = t.rounds.filter(|&n| n > 0) {
        return round_scores(links, n);
    }
    let mut by_receiver: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for p in links {
        by_receiver.entry(p.to).or_default().push(p.gbps);
    }
    if by_receiver.values().any(|v| v.len() < MIN_LINKS) {
        return links.iter().map(|p| p.gbps).collect();
    }
    let medians: BTreeMap<usize, f64> = by_receiver
        .into_iter()
        .map(|(to, mut v)| (to, median(&mut v)))
        .collect();
    links
        .iter()
        .map(|p| match medians.get(&p.to) {
            Some(&m) if m > 0.0 => p.gbps / m,
            _ => p.gbps,
        })
        .collect()
}

/// Links measured in rounds (round k: every r -> r+k of `n` ranks), each
/// scored by its GB/s over its round's median (rounds of fewer than
/// [`MIN_LINKS`] links: the GB/s itself).
fn round_scores(links: &[&LinkPair], n: usize) -> Vec<f64> {
    let round = |p: &LinkPair| (p.to + n - p.from % n) % n;
    let mut by_round: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for p in links {
        by_round.entry(round(p)).or_default().push(p.gbps);
    }
    let medians: BTreeMap<usize, f64> = by_round
        .into_iter()
        .filter(|(_, v)| v.len() >= MIN_LINKS)
        .map(|(k, mut v)| (k, median(&mut v)))
        .collect();
    links
        .iter()
        .map(|p| match medians.get(&round(p)) {
            Some(&m) if m > 0.0 => p.gbps / m,
            _ => p.gbps,
        })
        .collect()
}

/// The measured links of `pairs`.
fn measured(pairs: &[LinkPair]) -> Vec<&LinkPair> {
    pairs.iter().filter(|p| p.measured()).collect()
}

/// A number as measured, or 0 where it is not a finite, non-negative one
/// (a transfer timed at zero gives an infinite GB/s, which JSON cannot
/// hold): the results file always reads back.
fn finite(v: f64) -> f64 {
    if v.is_finite() && v >= 0.0 {
        v
    } else {
        0.0
    }
}

/// The verdict: which links or ranks are slow outliers. Pairs are sorted
/// by (sender, receiver); numbers that are not finite and non-negative are
/// kept as 0 (a GB/s of 0 is a link not measured). With fewer than
/// [`MIN_LINKS`] measured links there is no verdict (no findings).
pub fn judge(bytes: u64, pairs: Vec<LinkPair>, t: &Thresholds) -> LinkReport {
    let pairs = tidy(pairs);
    let findings = verdict(&pairs, t);
    LinkReport {
        bytes,
        pairs,
        findings,
    }
}

/// `pairs` as reports keep them: sorted by (sender, receiver), numbers that
/// are not finite and non-negative as 0.
pub fn tidy(pairs: Vec<LinkPair>) -> Vec<LinkPair> {
    let mut pairs: Vec<LinkPair> = pairs
        .into_iter()
        .map(|p| LinkPair {
            gbps: finite(p.gbps),
            wait_us: finite(p.wait_us),
            transfer_us: finite(p.transfer_us),
            ..p
        })
        .collect();
    pairs.sort_by_key(|p| (p.from, p.to));
    pairs
}

/// Slow links, and ranks named instead of their links (two or more
/// outgoing links measured, every one an outlier: slow by the rules for
/// links, or at least `min_gap` slow from a sender slow as a whole);
/// worst first.
fn verdict(pairs: &[LinkPair], t: &Thresholds) -> Vec<LinkFinding> {
    let links = measured(pairs);
    if links.len() < MIN_LINKS {
        return Vec::new();
    }
    let center = Center::of(&links);
    let score = scores(&links, t);
    let judged = Center::of_values(score.clone());
    let slow: Vec<&LinkPair> = links
        .iter()
        .zip(&score)
        .filter(|(p, &s)| {
            judged.is_slow(s, t, links.len() >= MIN_Z_LINKS)
                // Slow for its round or its receiver, and slow for the
                // machine too: a round's other links may all run fast (two
                // ranks sending to each other at once, where the slowed
                // direction also holds the other back a little), and so may
                // a receiver's (a host rank descheduled while it copied one
                // sender's data put that link at 0.6x its receiver's median
                // and 0.9x the machine's). A finding says how many times
                // slower than the machine's median the link is; never less
                // than the gap a finding needs.
                && p.gbps * t.min_gap < center.median
        })
        .map(|(p, _)| *p)
        .collect();
    // Per sender: (outgoing links measured, of which slow).
    let mut out: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for p in &links {
        out.entry(p.from).or_default().0 += 1;
    }
    for p in &slow {
        out.entry(p.from).or_default().1 += 1;
    }
    // A slow sender's links are outliers when each is at least `min_gap`
    // below the median: the sender as a whole is the outlier, and every one
    // of its links is plainly slow.
    let slow_senders = slow_senders(&links, &score, t);
    let all_gapped = |r: usize| {
        links
            .iter()
            .zip(&score)
            .filter(|(p, _)| p.from == r)
            .all(|(_, &s)| s * t.min_gap < judged.median)
    };
    let slow_ranks: Vec<usize> = out
        .iter()
        .filter(|(&r, &(n, s))| n >= 2 && (s == n || (slow_senders.contains(&r) && all_gapped(r))))
        .map(|(&r, _)| r)
        .collect();
    let mut findings: Vec<LinkFinding> = slow_ranks
        .iter()
        .map(|&r| {
            let own: Vec<&LinkPair> = links.iter().copied().filter(|p| p.from == r).collect();
            rank_finding(r, &own, center.median)
        })
        .collect();
    findings.extend(
        slow.iter()
            .filter(|p| !slow_ranks.contains(&p.from))
            .map(|p| link_finding(p, center.median)),
    );
    sort_findings(&mut findings);
    findings
}

/// Senders slow as a whole: each sender with [`MIN_LINKS`] or more measured
/// links (fewer make no median a link cannot sway) scored by the median of
/// its links' scores, and those medians judged
/// against each other as links are. A slow rank slows every link it sends
/// on, but not always each one past the thresholds (the receivers' own
/// waits blur single links: an H100 all-to-all of 6 ranks with rank 5
/// slowed 3x had its five links at 3.3-3.6x below the median for three and
/// 2.6-3.1x for two); its median stands out where no single link has to.
fn slow_senders(links: &[&LinkPair], score: &[f64], t: &Thresholds) -> Vec<usize> {
    let mut by_sender: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (p, &s) in links.iter().zip(score) {
        by_sender.entry(p.from).or_default().push(s);
    }
    let medians: Vec<(usize, f64)> = by_sender
        .into_iter()
        .filter(|(_, v)| v.len() >= MIN_LINKS)
        .map(|(r, mut v)| (r, median(&mut v)))
        .collect();
    if medians.len() < MIN_LINKS {
        return Vec::new();
    }
    let center = Center::of_values(medians.iter().map(|&(_, m)| m).collect());
    medians
        .into_iter()
        .filter(|&(_, m)| center.is_slow(m, t, true))
        .map(|(r, _)| r)
        .collect()
}

/// Adds a finding for every measured link below `floor` GB/s that no
/// finding covers yet (`--min-link-gbps`: a floor the hardware must meet,
/// whatever the other links do), keeping the findings worst first.
pub fn add_floor_findings(r: &mut LinkReport, floor: f64) {
    let median = Center::of(&measured(&r.pairs)).median;
    let below: Vec<LinkFinding> = r
        .pairs
        .iter()
        .filter(|p| p.measured() && p.gbps < floor)
        .filter(|p| !r.findings.iter().any(|f| f.covers(p.from, p.to)))
        .map(|p| LinkFinding {
            detail: format!(
                "slow link {} -> {}: {} GB/s, below --min-link-gbps {} (median {} GB/s)",
                p.from,
                p.to,
                gbps_text(p.gbps),
                floor,
                gbps_text(median)
            ),
            ..link_finding(p, median)
        })
        .collect();
    r.findings.extend(below);
    sort_findings(&mut r.findings);
}

/// Worst first; ties by rank, then link.
fn sort_findings(findings: &mut [LinkFinding]) {
    findings.sort_by(|a, b| {
        a.gbps
            .total_cmp(&b.gbps)
            .then_with(|| (a.rank, a.from, a.to).cmp(&(b.rank, b.from, b.to)))
    });
}

/// GB/s as the text shows it: one decimal, two significant digits below 0.1.
fn gbps_text(v: f64) -> String {
    if v >= 0.1 || v <= 0.0 || !v.is_finite() {
        return format!("{v:.1}");
    }
    let decimals = ((-v.log10()).ceil() as usize + 1).min(9);
    format!("{v:.decimals$}")
}

fn link_finding(p: &LinkPair, median: f64) -> LinkFinding {
    LinkFinding {
        kind: SLOW_LINK.into(),
        from: Some(p.from),
        to: Some(p.to),
        rank: None,
        gbps: p.gbps,
        median_gbps: median,
        detail: format!(
            "slow link {} -> {}: {} GB/s vs median {} GB/s ({:.1}x)",
            p.from,
            p.to,
            gbps_text(p.gbps),
            gbps_text(median),
            median / p.gbps
        ),
    }
}

/// A rank named for its outgoing links (every one slow, or slow as a
/// whole). The factor is the median over its fastest link: each of them is
/// at least that slow.
fn rank_finding(rank: usize, links: &[&LinkPair], median: f64) -> LinkFinding {
    let lo = links.iter().map(|p| p.gbps).fold(f64::INFINITY, f64::min);
    let hi = links.iter().map(|p| p.gbps).fold(0.0, f64::max);
    let (lo_text, hi_text) = (gbps_text(lo), gbps_text(hi));
    let range = if lo_text == hi_text {
        lo_text
    } else {
        format!("{lo_text}-{hi_text}")
    };
    LinkFinding {
        kind: SLOW_RANK.into(),
        from: None,
        to: None,
        rank: Some(rank),
        gbps: lo,
        median_gbps: median,
        detail: format!(
            "slow rank {rank}: its {} outgoing links {range} GB/s vs median {} GB/s ({:.1}x)",
            links.len(),
            gbps_text(median),
            median / hi
        ),
    }
}

/// The ranks the matrix spans: `nranks`, or more where a pair names a
/// larger rank.
fn span(r: &LinkReport, nranks: usize) -> usize {
    r.pairs
        .iter()
        .map(|p| p.from.max(p.to).saturating_add(1))
        .fold(nranks, usize::max)
}

/// Text for the terminal: the GB/s and wait-share matrices (sender rows,
/// receiver columns; `*` marks a slow link) and the verdict's lines. Above
/// [`MAX_MATRIX_RANKS`] ranks, the slowest links as a list instead.
pub fn render(r: &LinkReport, nranks: usize) -> String {
    let n = span(r, nranks);
    let size = Bytes(r.bytes);
    let mut out = String::new();
    if n > MAX_MATRIX_RANKS {
        let _ = writeln!(
            out,
            "# links at {size} (GB/s per directed link; {n} ranks: the slowest {LISTED} listed, the matrix is in the JSON and the heatmap)"
        );
        out.push_str(&slowest(r));
    } else {
        let _ = writeln!(
            out,
            "# links at {size} (GB/s per directed link, sender rows, receiver columns; wait share in the second matrix)"
        );
        out.push_str(&matrix(r, n, |p| gbps_text(p.gbps)));
        out.push_str("# wait share: % of each link's time its receiver waited for data\n");
        out.push_str(&matrix(r, n, |p| match p.wait_share() {
            Some(s) => format!("{:.0}%", s * 100.0),
            None => ".".into(),
        }));
    }
    out.push_str(&verdict_text(r));
    out
}

/// One n x n matrix: `-` on the diagonal, `.` where nothing was measured,
/// `cell` elsewhere. Where the verdict found slow links every cell gets a
/// mark after it, `*` on those links and a space elsewhere, so that the
/// columns stay aligned.
fn matrix(r: &LinkReport, n: usize, cell: impl Fn(&LinkPair) -> String) -> String {
    let mut cells = vec![vec![".".to_string(); n]; n];
    for (i, row) in cells.iter_mut().enumerate() {
        row[i] = "-".into();
    }
    let mut slow = vec![vec![false; n]; n];
    for p in r.pairs.iter().filter(|p| p.measured()) {
        cells[p.from][p.to] = cell(p);
        slow[p.from][p.to] = r.findings.iter().any(|f| f.covers(p.from, p.to));
    }
    let mark = |text: String, slow: bool| match (r.findings.is_empty(), slow) {
        (true, _) => text,
        (false, true) => format!("{text}*"),
        (false, false) => format!("{text} "),
    };
    let mut table = grid::plain();
    let head = (0..n).map(|i| mark(i.to_string(), false));
    table.set_header(std::iter::once("from\\to".to_string()).chain(head));
    for (i, (row, slow)) in cells.into_iter().zip(slow).enumerate() {
        let row = row.into_iter().zip(slow).map(|(c, s)| mark(c, s));
        table.add_row(std::iter::once(i.to_string()).chain(row));
    }
    let right: Vec<usize> = (0..=n).collect();
    grid::render(table, &right, 2)
}

/// The slowest measured links, one a line (for worlds too wide for a matrix).
fn slowest(r: &LinkReport) -> String {
    let mut links = measured(&r.pairs);
    links.sort_by(|a, b| a.gbps.total_cmp(&b.gbps));
    let mut out = String::new();
    for p in links.into_iter().take(LISTED) {
        let wait = match p.wait_share() {
            Some(s) => format!(", receiver waited {:.0}%", s * 100.0),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {} -> {}: {} GB/s{wait}",
            p.from,
            p.to,
            gbps_text(p.gbps)
        );
    }
    out
}

/// The findings' lines, or why there are none.
fn verdict_text(r: &LinkReport) -> String {
    let links = measured(&r.pairs);
    // Findings are the relative verdict's (which needs MIN_LINKS links) or
    // a floor's (`--min-link-gbps`, which needs none): said either way.
    if !r.findings.is_empty() {
        return r
            .findings
            .iter()
            .map(|f| format!("{}\n", f.detail))
            .collect();
    }
    if links.len() < MIN_LINKS {
        return format!(
            "no verdict: {} link(s) measured, {MIN_LINKS} or more are needed\n",
            links.len()
        );
    }
    let center = Center::of(&links);
    let lo = links.iter().map(|p| p.gbps).fold(f64::INFINITY, f64::min);
    let hi = links.iter().map(|p| p.gbps).fold(0.0, f64::max);
    format!(
        "no slow link or rank ({} links, median {} GB/s, spread {}-{} GB/s)\n",
        links.len(),
        gbps_text(center.median),
        gbps_text(lo),
        gbps_text(hi)
    )
}

#[cfg(test)]
mod tests;
