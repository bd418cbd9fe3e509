//! The cost model: per (collective, algorithm, protocol, channels) a
//! latency per hop and a bandwidth per unit of traffic, fitted from a sweep
//! on this machine (`collbench tune`), read back with `--tuning FILE`. It
//! predicts a case's time as
//!
//! ```text
//! t(n, S) = hops(n) * latency + S * traffic(n) / bandwidth(S)
//! ```
//!
//! with `hops` and `traffic` the algorithm's own (`engine::algo::cost`), so a
//! fit at one rank count predicts others. The bandwidth is a curve over
//! sizes (caches, protocols and pipeline depth make it grow with the size),
//! kept at the sizes where the bandwidth term was at least a fifth of the
//! time, and read between them along a monotone cubic in log-log (Fritsch
//! and Carlson's: it follows a cache's cliff without overshooting it);
//! outside them, the nearest.
//! `--algo auto` takes the fastest prediction; `collbench model` prints
//! predictions for any rank count and size.

use crate::engine::algo::cost;
use crate::engine::types::{Algo, Collective};
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "collbench.tuning/1";

/// The protocols a table's entries are fitted with: the host engine's, the
/// CUDA executor's by step size (`auto`), or one forced by `--protocol`.
pub const PROTOCOLS: [&str; 5] = ["host", "auto", "simple", "ll", "ll128"];

/// A fitted table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    pub schema: String,
    pub meta: TuningMeta,
    pub entries: Vec<Entry>,
}

/// Where and how a table was fitted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TuningMeta {
    pub version: String,
    pub created_at: String,
    pub host: String,
    /// `host`, `cuda`, `cuda-emu`, or `given` (made from a link's figures).
    pub device: String,
    pub command: String,
    pub dtype: String,
    pub iters: usize,
}

/// One choice's fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub collective: String,
    pub algo: String,
    /// `host` (the host engine), `simple`, `ll` or `auto` (CUDA).
    pub protocol: String,
    /// Channels per rank the sweep ran with (0: the executor's choice).
    pub channels: usize,
    /// The rank count it was fitted at.
    pub ranks: usize,
    /// Latency of one hop, microseconds.
    pub latency_us: f64,
    /// Bandwidth per unit of traffic at sizes: (bytes, GB/s), by size.
    pub bandwidth: Vec<(u64, f64)>,
    /// Sizes the fit saw.
    pub points: usize,
    /// The largest size the fit saw, bytes (0: not known, a table written
    /// before it was kept). A fit without a bandwidth curve predicts no
    /// larger size: its times never grew with the size, so how they grow
    /// past it is not known.
    #[serde(default)]
    pub max_bytes: u64,
}

/// One measured size of one choice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub bytes: u64,
    pub p50_us: f64,
}

/// A choice the model ranks: its algorithm, protocol and channels.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub coll: Collective,
    pub algo: Algo,
    pub protocol: String,
    pub channels: usize,
}

impl Entry {
    /// Fits `points` (one p50 per size) of `choice` measured on `ranks` ranks.
    pub fn fit(choice: &Choice, ranks: usize, points: &[Point]) -> Option<Entry> {
        let mut pts: Vec<Point> = points
            .iter()
            .copied()
            .filter(|p| p.p50_us.is_finite() && p.p50_us > 0.0)
            .collect();
        if pts.is_empty() {
            return None;
        }
        pts.sort_by_key(|p| p.bytes);
        // A larger message never takes less time: a size slower than a
        // larger one was disturbed (these machines are shared), and takes
        // the larger one's time.
        let mut floor = f64::INFINITY;
        for p in pts.iter_mut().rev() {
            floor = floor.min(p.p50_us);
            p.p50_us = floor;
        }
        let (c, a) = (choice.coll, choice.algo);
        let (h, f) = (cost::hops(c, a, ranks), cost::traffic(c, a, ranks));
        // The smallest time is (nearly) all latency.
        let base = pts.iter().map(|p| p.p50_us).fold(f64::INFINITY, f64::min);
        let bandwidth = pts
            .iter()
            .filter_map(|p| {
                let part = p.p50_us - base;
                (part >= 0.2 * p.p50_us && p.bytes > 0)
                    .then(|| (p.bytes, p.bytes as f64 * f / (part * 1e3)))
            })
            .collect();
        Some(Entry {
            collective: c.name().into(),
            algo: a.name().into(),
            protocol: choice.protocol.clone(),
            channels: choice.channels,
            ranks,
            latency_us: base / h,
            bandwidth,
            points: pts.len(),
            max_bytes: pts.last().map_or(0, |p| p.bytes),
        })
    }

    pub fn coll(&self) -> Option<Collective> {
        Collective::parse(&self.collective)
    }

    pub fn algo(&self) -> Option<Algo> {
        Algo::parse(&self.algo)
    }

    /// Bandwidth per unit of traffic at `bytes`, GB/s (None: the fit saw
    /// only latency).
    pub fn bandwidth_at(&self, bytes: u64) -> Option<f64> {
        let b = &self.bandwidth;
        let (first, last) = (b.first()?, b.last()?);
        if bytes <= first.0 {
            return Some(first.1);
        }
        if bytes >= last.0 {
            return Some(last.1);
        }
        let x: Vec<f64> = b.iter().map(|p| (p.0 as f64).ln()).collect();
        let y: Vec<f64> = b.iter().map(|p| p.1.ln()).collect();
        let i = b.partition_point(|p| p.0 <= bytes);
        Some(monotone_cubic(&x, &y, i - 1, (bytes as f64).ln()).exp())
    }

    /// Predicted time of `bytes` on `n` ranks, microseconds; None past
    /// the sizes a fit of latency alone saw.
    pub fn predict(&self, n: usize, bytes: u64) -> Option<f64> {
        let (c, a) = (self.coll()?, self.algo()?);
        if self.bandwidth.is_empty() && bytes > self.max_bytes {
            return None;
        }
        let lat = cost::hops(c, a, n) * self.latency_us;
        let bw = match self.bandwidth_at(bytes) {
            Some(gbps) if gbps > 0.0 => bytes as f64 * cost::traffic(c, a, n) / (gbps * 1e3),
            _ => 0.0,
        };
        Some(lat + bw)
    }

    /// The largest bandwidth the fit saw, GB/s.
    pub fn peak_gbps(&self) -> f64 {
        self.bandwidth.iter().map(|p| p.1).fold(0.0, f64::max)
    }
}

/// The monotone cubic through (`x`, `y`) (x increasing) at `at`, which
/// lies in `[x[k], x[k + 1]]`: Hermite segments with Fritsch and Carlson's
/// slopes (zero at a turn, else a weighted harmonic mean of the secants
/// beside), so the curve never leaves the range of its two points.
fn monotone_cubic(x: &[f64], y: &[f64], k: usize, at: f64) -> f64 {
    let n = x.len();
    let h = |i: usize| x[i + 1] - x[i];
    let secant = |i: usize| (y[i + 1] - y[i]) / h(i);
    let slope = |i: usize| -> f64 {
        if i == 0 {
            return secant(0);
        }
        if i == n - 1 {
            return secant(n - 2);
        }
        let (a, b) = (secant(i - 1), secant(i));
        if a * b <= 0.0 {
            return 0.0;
        }
        let (w1, w2) = (2.0 * h(i) + h(i - 1), h(i) + 2.0 * h(i - 1));
        (w1 + w2) / (w1 / a + w2 / b)
    };
    let hk = h(k);
    let t = (at - x[k]) / hk;
    let (t2, t3) = (t * t, t * t * t);
    (2.0 * t3 - 3.0 * t2 + 1.0) * y[k]
        + (t3 - 2.0 * t2 + t) * hk * slope(k)
        + (-2.0 * t3 + 3.0 * t2) * y[k + 1]
        + (t3 - t2) * hk * slope(k + 1)
}

/// The model's pick for one case.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    pub algo: Algo,
    pub predicted_us: f64,
}

impl Tuning {
    /// A table from rows of a sweep: `rows` are (choice, ranks, points).
    pub fn fit(meta: TuningMeta, rows: &[(Choice, usize, Vec<Point>)]) -> Tuning {
        Tuning {
            schema: SCHEMA.into(),
            meta,
            entries: rows
                .iter()
                .filter_map(|(c, n, p)| Entry::fit(c, *n, p))
                .collect(),
        }
    }

    /// A table from a link's figures: every algorithm of every collective
    /// with `latency_us` per hop and `link_gbps` per unit of traffic.
    pub fn from_link(meta: TuningMeta, link_gbps: f64, latency_us: f64) -> Tuning {
        let entries = Collective::ALL
            .into_iter()
            .flat_map(|c| c.algos().iter().map(move |&a| (c, a)))
            .map(|(c, a)| Entry {
                collective: c.name().into(),
                algo: a.name().into(),
                protocol: "given".into(),
                channels: 0,
                ranks: 0,
                latency_us,
                bandwidth: vec![(1, link_gbps)],
                points: 0,
                max_bytes: 0,
            })
            .collect();
        Tuning {
            schema: SCHEMA.into(),
            meta,
            entries,
        }
    }

    /// Reads a table, with what is wrong with it in words.
    pub fn parse(text: &str) -> Result<Tuning, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not a tuning table: {e}"))?;
        // Another of collbench's files (results, a dump) is named as such.
        match v.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(s) if s.starts_with("collbench.results/") => {
                return Err(format!(
                    "collbench results (schema '{s}'), not a tuning table: fit one from them with `collbench tune --from RESULTS.json --output TABLE.json`"
                ))
            }
            Some(s) => return Err(format!("schema '{s}', expected '{SCHEMA}'")),
            None => return Err(format!("not a tuning table: no \"schema\": \"{SCHEMA}\"")),
        }
        let t: Tuning =
            serde_json::from_value(v).map_err(|e| format!("not a tuning table: {e}"))?;
        let mut seen = std::collections::BTreeSet::new();
        for e in &t.entries {
            let (Some(c), Some(a)) = (e.coll(), e.algo()) else {
                return Err(format!(
                    "entry {} {}: unknown collective or algorithm",
                    e.collective, e.algo
                ));
            };
            if !c.algos().contains(&a) {
                return Err(format!("entry {c} {a}: {a} is not an algorithm for {c}"));
            }
            // A fit's latency is its smallest time over the hops, never 0
            // (a table of zero latencies and no bandwidth ranks nothing).
            // Past a second a hop, or 1e9 GB/s, predictions are no longer
            // times (a table of 1e308 printed 300 digits and `inf`).
            if !(e.latency_us > 0.0 && e.latency_us <= 1e6) {
                return Err(format!(
                    "entry {c} {a}: latency/hop {} us, not a positive number up to 1e6",
                    crate::units::fmt_number(e.latency_us)
                ));
            }
            // Below 1 B/s a prediction is no longer a number (a slow
            // emulated device's fit is well above it).
            if e.bandwidth.iter().any(|p| !(p.1 >= 1e-9 && p.1 <= 1e9)) {
                return Err(format!(
                    "entry {c} {a}: a bandwidth under 1e-9 GB/s or over 1e9 GB/s"
                ));
            }
            if !PROTOCOLS.contains(&e.protocol.as_str()) {
                return Err(format!(
                    "entry {c} {a}: protocol '{}', expected one of {}",
                    e.protocol,
                    PROTOCOLS.join(", ")
                ));
            }
            if e.ranks == 0 {
                return Err(format!("entry {c} {a}: fitted at 0 ranks"));
            }
            if !seen.insert((&e.collective, &e.algo, &e.protocol, e.channels, e.ranks)) {
                return Err(format!(
                    "entry {c} {a} (protocol {}, {} channels, {} ranks) is in the table twice",
                    e.protocol, e.channels, e.ranks
                ));
            }
            if e.bandwidth.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!(
                    "entry {c} {a}: bandwidth sizes not in increasing order"
                ));
            }
        }
        Ok(t)
    }

    /// For each algorithm of `coll`, the entry to predict `n` ranks with:
    /// the protocol asked for where the table has it, then the nearest rank
    /// count.
    pub fn candidates(&self, coll: Collective, n: usize, protocol: Option<&str>) -> Vec<&Entry> {
        let mine: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.coll() == Some(coll) && e.algo().is_some())
            .collect();
        let proto_ok = |e: &Entry| protocol.is_none_or(|p| e.protocol == p);
        let pool: Vec<&Entry> = if mine.iter().any(|e| proto_ok(e)) {
            mine.into_iter().filter(|e| proto_ok(e)).collect()
        } else {
            mine
        };
        let dist = |e: &Entry| ((e.ranks.max(1) as f64).ln() - (n.max(1) as f64).ln()).abs();
        let mut best: Vec<&Entry> = Vec::new();
        for e in pool {
            match best.iter_mut().find(|b| b.algo == e.algo) {
                Some(b) => {
                    if dist(e) < dist(b) {
                        *b = e;
                    }
                }
                None => best.push(e),
            }
        }
        best
    }

    /// The prediction for `algo` of `coll` at `bytes` on `n` ranks.
    pub fn predict(
        &self,
        coll: Collective,
        algo: Algo,
        n: usize,
        bytes: u64,
        protocol: Option<&str>,
    ) -> Option<f64> {
        self.candidates(coll, n, protocol)
            .into_iter()
            .find(|e| e.algo() == Some(algo))?
            .predict(n, bytes)
    }

    /// The fastest prediction among `coll`'s algorithms the table has.
    pub fn pick(
        &self,
        coll: Collective,
        n: usize,
        bytes: u64,
        protocol: Option<&str>,
    ) -> Option<Pick> {
        self.candidates(coll, n, protocol)
            .into_iter()
            .filter_map(|e| {
                Some(Pick {
                    algo: e.algo()?,
                    predicted_us: e.predict(n, bytes)?,
                })
            })
            .min_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(coll: Collective, algo: Algo) -> Choice {
        Choice {
            coll,
            algo,
            protocol: "host".into(),
            channels: 1,
        }
    }

    /// Times of an ideal link: `lat` per hop, `gbps` per unit of traffic.
    fn ideal(c: &Choice, n: usize, lat: f64, gbps: f64, sizes: &[u64]) -> Vec<Point> {
        sizes
            .iter()
            .map(|&b| Point {
                bytes: b,
                p50_us: cost::hops(c.coll, c.algo, n) * lat
                    + b as f64 * cost::traffic(c.coll, c.algo, n) / (gbps * 1e3),
            })
            .collect()
    }

    #[test]
    fn a_fit_of_an_ideal_link_predicts_it_at_other_sizes_and_rank_counts() {
        let sizes: Vec<u64> = (3..28).map(|k| 1u64 << k).collect();
        let c = choice(Collective::AllReduce, Algo::Ring);
        let e = Entry::fit(&c, 4, &ideal(&c, 4, 2.0, 10.0, &sizes)).unwrap();
        assert_eq!(e.points, sizes.len());
        for n in [2, 4, 16] {
            for b in [1000u64, 3 << 20, 1 << 30] {
                let want = ideal(&c, n, 2.0, 10.0, &[b])[0].p50_us;
                let got = e.predict(n, b).unwrap();
                // The smallest size's bandwidth part counts as latency: a
                // few percent at most.
                assert!(
                    (got / want - 1.0).abs() < 0.05,
                    "n={n} b={b}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn the_pick_is_the_fastest_prediction() {
        let sizes: Vec<u64> = (3..24).map(|k| 1u64 << k).collect();
        let ring = choice(Collective::AllReduce, Algo::Ring);
        let direct = choice(Collective::AllReduce, Algo::Direct);
        // Direct: low latency, poor bandwidth; ring the other way round.
        let rows = vec![
            (ring.clone(), 4, ideal(&ring, 4, 5.0, 20.0, &sizes)),
            (direct.clone(), 4, ideal(&direct, 4, 1.0, 20.0, &sizes)),
        ];
        let t = Tuning::fit(TuningMeta::default(), &rows);
        assert_eq!(
            t.pick(Collective::AllReduce, 4, 8, None).unwrap().algo,
            Algo::Direct
        );
        assert_eq!(
            t.pick(Collective::AllReduce, 4, 64 << 20, None)
                .unwrap()
                .algo,
            Algo::Ring
        );
        assert!(t.pick(Collective::AllGather, 4, 8, None).is_none());
        // Round trip through JSON (floats to within their last digit).
        let text = serde_json::to_string(&t).unwrap();
        let back = Tuning::parse(&text).unwrap();
        assert_eq!(back.entries.len(), t.entries.len());
        for (a, b) in back.entries.iter().zip(&t.entries) {
            assert_eq!((&a.algo, a.bandwidth.len()), (&b.algo, b.bandwidth.len()));
            let p = |e: &Entry| e.predict(4, 1 << 20).unwrap();
            assert!((p(a) / p(b) - 1.0).abs() < 1e-12);
        }
    }

    /// Tables no tune writes are refused, naming the entry: fitted at 0
    /// ranks, a bandwidth under 1 MB/s, an entry twice.
    #[test]
    fn tables_no_tune_writes_are_refused() {
        let sizes: Vec<u64> = (3..20).map(|k| 1u64 << k).collect();
        let ring = choice(Collective::AllReduce, Algo::Ring);
        let rows = vec![(ring.clone(), 4, ideal(&ring, 4, 5.0, 20.0, &sizes))];
        let t = Tuning::fit(TuningMeta::default(), &rows);
        let good = serde_json::to_value(&t).unwrap();
        assert!(Tuning::parse(&good.to_string()).is_ok());
        let mut zero = good.clone();
        zero["entries"][0]["ranks"] = 0.into();
        let mut slow = good.clone();
        slow["entries"][0]["bandwidth"][0][1] = 1e-308.into();
        let mut proto = good.clone();
        proto["entries"][0]["protocol"] = "warp".into();
        let mut twice = good.clone();
        let e = twice["entries"][0].clone();
        twice["entries"].as_array_mut().unwrap().push(e);
        for (v, said) in [
            (zero, "0 ranks"),
            (slow, "under 1e-9 GB/s"),
            (twice, "twice"),
            (
                proto,
                "protocol 'warp', expected one of host, auto, simple, ll, ll128",
            ),
        ] {
            let err = Tuning::parse(&v.to_string()).unwrap_err();
            assert!(
                err.contains("all-reduce ring") && err.contains(said),
                "{err}"
            );
        }
    }

    #[test]
    fn a_disturbed_small_size_does_not_bend_the_fit() {
        let c = choice(Collective::AllReduce, Algo::Ring);
        let sizes: Vec<u64> = (3..24).map(|k| 1u64 << k).collect();
        let mut pts = ideal(&c, 2, 1.0, 10.0, &sizes);
        let clean = Entry::fit(&c, 2, &pts).unwrap();
        pts[6].p50_us *= 5.0; // 512 B, slowed by something else
        let e = Entry::fit(&c, 2, &pts).unwrap();
        for b in [512u64, 4096, 1 << 20] {
            let (got, want) = (e.predict(2, b).unwrap(), clean.predict(2, b).unwrap());
            assert!((got / want - 1.0).abs() < 0.05, "{b}: {got} vs {want}");
        }
    }

    /// A fit whose times never grew with the size (every size within
    /// latency) predicts the sizes it saw and none past them: a pick
    /// never takes its "no bandwidth term" for an infinite bandwidth.
    #[test]
    fn a_fit_of_latency_alone_predicts_only_the_sizes_it_saw() {
        let c = choice(Collective::AllReduce, Algo::Direct);
        let flat: Vec<Point> = [8u64, 64, 1024]
            .iter()
            .map(|&bytes| Point { bytes, p50_us: 5.0 })
            .collect();
        let e = Entry::fit(&c, 2, &flat).unwrap();
        assert!(e.bandwidth.is_empty());
        assert_eq!(e.max_bytes, 1024);
        assert_eq!(e.predict(2, 1024), Some(5.0));
        assert_eq!(e.predict(2, 1025), None);
        assert_eq!(e.predict(8, 1 << 30), None);
        // A table from before the largest size was kept: none.
        let old = Entry { max_bytes: 0, ..e };
        assert_eq!(old.predict(2, 8), None);
        // Beside a fit with a bandwidth, the pick past 1 KiB is that one.
        let ring = Entry::fit(
            &choice(Collective::AllReduce, Algo::Ring),
            2,
            &ideal(
                &choice(Collective::AllReduce, Algo::Ring),
                2,
                1.0,
                10.0,
                &[8, 1 << 20],
            ),
        )
        .unwrap();
        let table = Tuning {
            schema: SCHEMA.into(),
            meta: TuningMeta::default(),
            entries: vec![
                Entry {
                    max_bytes: 1024,
                    ..old
                },
                ring,
            ],
        };
        let pick = table.pick(Collective::AllReduce, 8, 1 << 30, None).unwrap();
        assert_eq!(pick.algo, Algo::Ring);
    }

    #[test]
    fn bandwidth_reads_between_and_beyond_its_points() {
        let e = Entry {
            collective: "all-reduce".into(),
            algo: "ring".into(),
            protocol: "host".into(),
            channels: 1,
            ranks: 2,
            latency_us: 1.0,
            bandwidth: vec![(1 << 10, 1.0), (1 << 20, 4.0)],
            points: 2,
            max_bytes: 1 << 20,
        };
        assert_eq!(e.bandwidth_at(1), Some(1.0));
        assert_eq!(e.bandwidth_at(1 << 30), Some(4.0));
        let mid = e.bandwidth_at(1 << 15).unwrap();
        assert!((mid - 2.0).abs() < 1e-9, "{mid}");
        assert_eq!(e.peak_gbps(), 4.0);
    }

    #[test]
    fn between_points_the_curve_stays_within_them() {
        // A cache's cliff: flat, a drop, flat again.
        let e = Entry {
            bandwidth: vec![
                (1 << 20, 40.0),
                (2 << 20, 40.0),
                (4 << 20, 39.0),
                (8 << 20, 10.0),
                (16 << 20, 9.0),
                (32 << 20, 9.0),
            ],
            ..Tuning::from_link(TuningMeta::default(), 1.0, 1.0).entries[0].clone()
        };
        let mut last = f64::INFINITY;
        for k in 0..=400 {
            let b = (1u64 << 20) + k * ((31u64 << 20) / 400);
            let bw = e.bandwidth_at(b).unwrap();
            let i = e
                .bandwidth
                .partition_point(|p| p.0 <= b)
                .clamp(1, e.bandwidth.len() - 1);
            let (lo, hi) = (e.bandwidth[i - 1].1, e.bandwidth[i].1);
            assert!(
                bw <= lo.max(hi) + 1e-9 && bw >= lo.min(hi) - 1e-9,
                "{b}: {bw}"
            );
            assert!(bw <= last + 1e-9, "{b}: {bw} after {last}: not monotone");
            last = bw;
        }
        // On the points themselves, the points.
        for &(b, g) in &e.bandwidth {
            assert!((e.bandwidth_at(b).unwrap() - g).abs() < 1e-9);
        }
    }

    #[test]
    fn bad_tables_say_what_is_wrong() {
        assert!(Tuning::parse("{")
            .unwrap_err()
            .contains("not a tuning table"));
        let mut t = Tuning::from_link(TuningMeta::default(), 10.0, 1.0);
        t.entries[0].latency_us = -1.0;
        let text = serde_json::to_string(&t).unwrap();
        assert!(Tuning::parse(&text)
            .unwrap_err()
            .contains("not a positive number"));
        // A huge latency is said in a few digits, not 309.
        for (lat, said) in [(0.0, "0"), (1e308, "1e308")] {
            t.entries[0].latency_us = lat;
            let text = serde_json::to_string(&t).unwrap();
            let e = Tuning::parse(&text).unwrap_err();
            assert!(
                e.contains(&format!("latency/hop {said} us, not a positive number")),
                "{e}"
            );
        }
        t.entries[0].latency_us = 1.0;
        t.entries[0].algo = "tree".into();
        t.entries[0].collective = "all-gather".into();
        let text = serde_json::to_string(&t).unwrap();
        assert!(Tuning::parse(&text)
            .unwrap_err()
            .contains("not an algorithm"));
        let text = serde_json::to_string(&Tuning {
            schema: "x".into(),
            ..Tuning::from_link(TuningMeta::default(), 1.0, 1.0)
        })
        .unwrap();
        assert!(Tuning::parse(&text).unwrap_err().contains("schema"));
    }
}
