//! The qualification spec (`collbench qualify SPEC.toml`): a list of
//! `[[check]]` tables, each a sweep and the thresholds it must meet.
//!
//! ```toml
//! [[check]]
//! name = "all-reduce latency"      # optional; default: collective, sizes, ranks
//! collective = "all-reduce"
//! device = "host"                   # auto | host | cuda | cuda-emu
//! ranks = 4
//! sizes = "8B:64K:x8"               # --sizes grammar
//! dtype = "float"                   # optional, as --dtype (also op, algo, engine,
//! max_time_us = 5000.0              #   placement, iters, warmup)
//! min_busbw_gbps = 0.001            # at least one threshold
//! min_link_gbps = 1.0               # link thresholds run the sweep with
//! max_link_spread = 2.0             #   --links: slowest link, fastest/slowest
//!
//! [[check]]                         # the links probe (`collbench links`):
//! collective = "links"              #   every directed pair, judged on
//! device = "host"                   #   the slowest link and the spread
//! ranks = 6
//! sizes = "4M"
//! min_link_gbps = 1.0
//!
//! [[check]]                         # judges a saved run instead of sweeping:
//! collective = "all-reduce"         #   its rows of this collective (or "all")
//! log = "nccl-tests/all_reduce.log" # an nccl-tests log or collbench results,
//! min_busbw_gbps = 100.0            #   relative to the spec's folder
//! ```
//!
//! A check with `log` runs nothing, so it takes none of the sweep's keys
//! (device, ranks, sizes, dtype, ...); a check without it needs device,
//! ranks and sizes.
//!
//! A check's sweep is built through the command line's own typed path: the
//! flags' defaults, each key parsed by the flag's value parser, and the
//! same validation ([`super::plan::build`]).

use super::plan::{self, Sweep};
use super::values::{self, DeviceChoice, PlacementChoice, ValueError};
use super::RunArgs;
use crate::engine::types::Collective;
use clap::{Parser, ValueEnum};
use serde::Deserialize;

/// Why a spec or one of its checks is refused (one line, without the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// One `[[check]]` table as written.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub name: Option<String>,
    pub collective: String,
    /// A results file to judge instead of running a sweep: an nccl-tests
    /// log or collbench results (relative to the spec's folder).
    pub log: Option<String>,
    pub device: Option<String>,
    pub ranks: Option<u32>,
    pub sizes: Option<String>,
    pub dtype: Option<String>,
    pub op: Option<String>,
    /// premulsum's scalar (`--scalar`).
    pub scalar: Option<f64>,
    pub algo: Option<String>,
    pub engine: Option<String>,
    pub placement: Option<String>,
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
    pub min_busbw_gbps: Option<f64>,
    pub max_time_us: Option<f64>,
    pub min_link_gbps: Option<f64>,
    pub max_link_spread: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    #[serde(default)]
    check: Vec<CheckSpec>,
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at).map_or(0, |s| s.matches('\n').count()) + 1
}

/// Parses and checks a spec's structure and thresholds.
pub fn parse_spec(text: &str) -> Result<Vec<CheckSpec>, SpecError> {
    let spec: SpecFile = toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().replace('\n', " ");
        SpecError(match e.span() {
            Some(span) => format!("line {}: {msg}", line_of(text, span.start)),
            None => msg,
        })
    })?;
    if spec.check.is_empty() {
        return Err(SpecError("no [[check]] tables: nothing to qualify".into()));
    }
    let mut titles = std::collections::BTreeSet::new();
    for (i, c) in spec.check.iter().enumerate() {
        let at = format!("check {} ({})", i + 1, c.title());
        // Each check is a test case of its own in the JUnit report: named,
        // and named once.
        if c.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(SpecError(format!(
                "check {}: an empty name; name it, or leave name out",
                i + 1
            )));
        }
        // One line of the table and of the progress line: a control
        // character (a newline) would split or forge one.
        if c.name
            .as_deref()
            .is_some_and(|n| n.chars().any(char::is_control))
        {
            return Err(SpecError(format!(
                "check {}: its name holds a control character (a newline, a tab); a name is one line of text",
                i + 1
            )));
        }
        if !titles.insert(c.title()) {
            return Err(SpecError(format!(
                "{at}: another check has the same name; give each its own (name = \"...\")"
            )));
        }
        check_thresholds(&at, c)?;
        if c.log.is_some() {
            check_log(&at, c)?;
        } else {
            check_sweep(&at, c)?;
        }
    }
    Ok(spec.check)
}

/// A check's thresholds: at least one, each one a measurement can reach.
fn check_thresholds(at: &str, c: &CheckSpec) -> Result<(), SpecError> {
    if [
        c.min_busbw_gbps,
        c.max_time_us,
        c.min_link_gbps,
        c.max_link_spread,
    ]
    .iter()
    .all(Option::is_none)
    {
        return Err(SpecError(format!(
            "{at}: has no threshold; give min_busbw_gbps, max_time_us, min_link_gbps and/or max_link_spread"
        )));
    }
    if let Some(v) = c.max_link_spread.filter(|v| !(v.is_finite() && *v >= 1.0)) {
        return Err(SpecError(format!(
            "{at}: max_link_spread is the fastest link over the slowest: at least 1, got {v}"
        )));
    }
    // Past these no measurement reaches (results hold times and
    // bandwidths up to 1e12; no link passes a million GB/s).
    for (field, v, most) in [
        ("min_busbw_gbps", c.min_busbw_gbps, 1e12),
        ("max_time_us", c.max_time_us, 1e12),
        ("min_link_gbps", c.min_link_gbps, 1e6),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0 && *v <= most)) {
            return Err(SpecError(format!(
                "{at}: {field} must be a positive number up to {most:e}, got {}",
                crate::units::fmt_number(v)
            )));
        }
    }
    Ok(())
}

/// A check that judges a log: a file named, and of the sweep's fields only
/// `sizes` and `ranks` (which pick rows).
fn check_log(at: &str, c: &CheckSpec) -> Result<(), SpecError> {
    if c.is_probe() {
        return Err(SpecError(format!(
            "{at}: `collective = \"links\"` runs the links probe: it takes no `log`"
        )));
    }
    if c.log.as_deref().is_some_and(|l| l.trim().is_empty()) {
        return Err(SpecError(format!(
            "{at}: `log` is empty: name the file to judge (relative to the spec's folder)"
        )));
    }
    if let Some(key) = c
        .sweep_keys()
        .into_iter()
        .find(|&k| k != "sizes" && k != "ranks")
    {
        return Err(SpecError(format!(
            "{at}: `{key}` does not apply to a check with `log` (it judges the log's rows and runs nothing; `sizes` and `ranks` pick which)"
        )));
    }
    if c.ranks == Some(0) {
        return Err(SpecError(format!("{at}: ranks must be at least 1")));
    }
    c.log_sizes().map_err(|e| SpecError(format!("{at}: {e}")))?;
    Ok(())
}

/// A check that runs a sweep: its device, ranks and sizes given.
fn check_sweep(at: &str, c: &CheckSpec) -> Result<(), SpecError> {
    for (field, missing) in [
        ("device", c.device.is_none()),
        ("ranks", c.ranks.is_none()),
        ("sizes", c.sizes.is_none()),
    ] {
        if missing {
            return Err(SpecError(format!(
                "{at}: missing field `{field}` (a check without `log` runs a sweep: give device, ranks and sizes)"
            )));
        }
    }
    if c.ranks == Some(0) {
        return Err(SpecError(format!("{at}: ranks must be at least 1")));
    }
    Ok(())
}

/// The sweep flags' defaults, as clap declares them.
#[derive(Parser)]
#[command(name = "check", no_binary_name = true)]
struct Defaults {
    #[command(flatten)]
    run: RunArgs,
}

/// A key's value, parsed by its flag's parser (whose message names the flag).
fn key<T>(v: Result<T, ValueError>) -> Result<T, SpecError> {
    v.map_err(|e| SpecError(e.0))
}

impl CheckSpec {
    /// The check's name, or one made of what it runs (or reads).
    pub fn title(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        if let Some(log) = &self.log {
            // What picks its rows is part of its name: two checks of one
            // log at other sizes or world sizes are two checks.
            let mut t = format!("{} from {log}", self.collective);
            if let Some(sizes) = &self.sizes {
                t.push_str(&format!(" {sizes}"));
            }
            if let Some(n) = self.ranks {
                t.push_str(&format!(" {n} ranks"));
            }
            return t;
        }
        format!(
            "{} {} {} ranks",
            self.collective,
            self.sizes.as_deref().unwrap_or("?"),
            self.ranks.map_or_else(|| "?".into(), |n| n.to_string())
        )
    }

    /// The sweep's keys this check gives, by name.
    fn sweep_keys(&self) -> Vec<&'static str> {
        [
            ("device", self.device.is_some()),
            ("ranks", self.ranks.is_some()),
            ("sizes", self.sizes.is_some()),
            ("dtype", self.dtype.is_some()),
            ("op", self.op.is_some()),
            ("scalar", self.scalar.is_some()),
            ("algo", self.algo.is_some()),
            ("engine", self.engine.is_some()),
            ("placement", self.placement.is_some()),
            ("iters", self.iters.is_some()),
            ("warmup", self.warmup.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, given)| given.then_some(k))
        .collect()
    }

    /// A `log` check's `sizes`: the smallest and largest size of the rows
    /// it judges (the sweep's syntax, its ends taken; None: every row).
    pub fn log_sizes(&self) -> Result<Option<(u64, u64)>, String> {
        let Some(text) = &self.sizes else {
            return Ok(None);
        };
        // A range of the log's rows, as written: a step would pick rows
        // by sizes no sweep of the log's made.
        let bytes = |v: &str| crate::units::parse_bytes(v).map_err(|e| format!("sizes: {e}"));
        let (lo, hi) = match text.split(':').collect::<Vec<_>>()[..] {
            [one] => (bytes(one)?, bytes(one)?),
            [lo, hi] => (bytes(lo)?, bytes(hi)?),
            _ => {
                return Err(format!(
                    "sizes '{text}': a check with `log` takes a range MIN:MAX (the rows from MIN to MAX) or one size; a step picks no rows from a log"
                ))
            }
        };
        if lo > hi {
            return Err(format!("sizes '{text}': {lo} B is above {hi} B"));
        }
        Ok(Some((lo, hi)))
    }

    /// Whether the check runs the links probe (`collective = "links"`).
    fn is_probe(&self) -> bool {
        self.collective.trim() == "links"
    }

    /// The collective it sweeps (None: all; the probe's rounds are
    /// send-recv).
    fn coll(&self) -> Result<Option<Collective>, SpecError> {
        match self.collective.trim() {
            "all" => Ok(None),
            "links" => Ok(Some(Collective::SendRecv)),
            name => Collective::parse(name).map(Some).ok_or_else(|| {
                let known: Vec<&str> = Collective::EVERY.iter().map(|c| c.name()).collect();
                SpecError(format!(
                    "unknown collective '{name}' (known: {}, all, links)",
                    known.join(", ")
                ))
            }),
        }
    }

    /// The collective's canonical name (or `all`).
    pub fn collective_name(&self) -> Result<&'static str, SpecError> {
        if self.is_probe() {
            return Ok("links");
        }
        Ok(self.coll()?.map_or("all", |c| c.name()))
    }

    /// The check's sweep, validated as the command line's would be (a
    /// check with `log` has none).
    pub fn sweep(&self) -> Result<Sweep, SpecError> {
        let coll = self.coll()?;
        let need = |field: &str| {
            SpecError(format!(
                "missing field `{field}` (a check without `log` runs a sweep: give device, ranks and sizes)"
            ))
        };
        let sizes = self.sizes.as_deref().ok_or_else(|| need("sizes"))?;
        let ranks = self.ranks.ok_or_else(|| need("ranks"))?;
        let device = self.device.as_deref().ok_or_else(|| need("device"))?;
        let mut a = Defaults::try_parse_from::<[&str; 0], &str>([])
            .map_err(|e| SpecError(e.to_string()))?
            .run;
        a.sizes.sizes = Some(key(values::sizes(sizes))?);
        a.ranks = Some(ranks as usize);
        a.device = DeviceChoice::from_str(device.trim(), true).map_err(|_| {
            SpecError(format!(
                "unknown --device '{device}' (known: auto, host, cuda, cuda-emu)"
            ))
        })?;
        if let Some(v) = &self.dtype {
            a.dtype = key(values::dtypes(v))?;
        }
        if let Some(v) = &self.op {
            a.op = key(values::ops(v))?;
        }
        if let Some(x) = self.scalar {
            a.scalar = key(values::scalar(&x.to_string()))?;
        }
        if let Some(v) = &self.algo {
            a.algo = key(values::algos(v))?;
        }
        if let Some(v) = &self.engine {
            a.engine = key(values::engines(v))?;
        }
        if let Some(v) = &self.placement {
            a.placement = PlacementChoice::from_str(v.trim(), true).map_err(|_| {
                SpecError(format!("unknown --placement '{v}' (known: both, in, out)"))
            })?;
        }
        if let Some(n) = self.iters {
            a.iters = key(values::iters(&n.to_string()))?;
        }
        a.links = self.min_link_gbps.is_some() || self.max_link_spread.is_some();
        if let Some(n) = self.warmup {
            a.warmup = n as usize;
        }
        if self.is_probe() {
            return plan::build_links(&a, None).map_err(|e| SpecError(e.to_string()));
        }
        plan::build(coll, &a, None).map_err(|e| SpecError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
[[check]]
name = "small"
collective = "all-reduce"
device = "host"
ranks = 2
sizes = "8B:1K"
max_time_us = 1e6

[[check]]
collective = "all-gather"
device = "host"
ranks = 4
sizes = "1M"
dtype = "half"
min_busbw_gbps = 100000.0
"#;

    #[test]
    fn a_good_spec_parses_into_typed_sweeps() {
        let checks = parse_spec(SPEC).unwrap();
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].title(), "small");
        assert_eq!(checks[1].title(), "all-gather 1M 4 ranks");
        let s = checks[1].sweep().unwrap();
        assert_eq!(s.plan.dtypes, vec![crate::engine::types::Dtype::F16]);
        assert_eq!((s.plan.ranks, s.plan.sizes.clone()), (4, vec![1 << 20]));
        assert_eq!(s.plan.iters, 20, "the flag's default");
        assert_eq!(checks[1].collective_name(), Ok("all-gather"));
    }

    #[test]
    fn bad_specs_say_what_and_where() {
        let base = "[[check]]\ncollective = \"all-reduce\"\ndevice = \"host\"\nranks = 2\nsizes = \"1K\"\n";
        let cases = [
            ("", "no [[check]] tables"),
            ("[[check]\n", "line 1"),
            (
                &format!("{base}max_time_us = 5\ncolour = \"red\"\n"),
                "line 7: unknown field `colour`",
            ),
            (
                &format!("{base}min_busbw_gbps = -1.0\n"),
                "min_busbw_gbps must be a positive number up to 1e12, got -1",
            ),
            (
                &format!("{base}max_time_us = 0\n"),
                "max_time_us must be a positive number up to 1e12, got 0",
            ),
            (
                &format!("{base}min_link_gbps = 1e308\n"),
                "min_link_gbps must be a positive number up to 1e6, got 1e308",
            ),
            (
                &format!("{base}max_time_us = 0.0\n"),
                "max_time_us must be a positive number",
            ),
            (base, "check 1 (all-reduce 1K 2 ranks): has no threshold"),
            (
                "[[check]]\ncollective = \"all-reduce\"\nmax_time_us = 5.0\n",
                "missing field `device` (a check without `log` runs a sweep",
            ),
            (
                "[[check]]\ncollective = \"all-reduce\"\ndevice = \"host\"\nranks = 2\nmax_time_us = 5.0\n",
                "missing field `sizes`",
            ),
            (
                "[[check]]\ncollective = \"all-reduce\"\nlog = \"a.log\"\nalgo = \"ring\"\nmax_time_us = 5.0\n",
                "check 1 (all-reduce from a.log): `algo` does not apply to a check with `log`",
            ),
            (
                "[[check]]\ncollective = \"all-reduce\"\nlog = \"a.log\"\nranks = 0\nmax_time_us = 5.0\n",
                "check 1 (all-reduce from a.log 0 ranks): ranks must be at least 1",
            ),
            (
                "[[check]]\ncollective = \"all-reduce\"\nlog = \"a.log\"\n",
                "check 1 (all-reduce from a.log): has no threshold",
            ),
            (&base.replace("ranks = 2", "ranks = -2"), "line 4"),
            (
                &format!("{base}max_time_us = 5.0\n").replace("ranks = 2", "ranks = 0"),
                "ranks must be at least 1",
            ),
            (
                &format!("{base}max_time_us = 5.0\nname = \" \"\n"),
                "check 1: an empty name",
            ),
            (
                &format!("{base}max_time_us = 5.0\nname = \"a\\nPASS b\"\n"),
                "check 1: its name holds a control character",
            ),
            (
                &format!("{base}max_time_us = 5.0\n{base}min_busbw_gbps = 1.0\n"),
                "check 2 (all-reduce 1K 2 ranks): another check has the same name",
            ),
        ];
        for (text, want) in cases {
            let e = parse_spec(text).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: want '{want}' in: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn a_log_check_needs_no_sweep() {
        let c = parse_spec(
            "[[check]]\ncollective = \"all\"\nlog = \"runs/nccl.log\"\nmin_busbw_gbps = 1.0\n",
        )
        .unwrap()
        .remove(0);
        assert_eq!(c.log.as_deref(), Some("runs/nccl.log"));
        assert_eq!(c.title(), "all from runs/nccl.log");
        // What picks the rows is in the name: two checks of one log at
        // other world sizes are two checks, not a repeated name.
        let two = "[[check]]\ncollective = \"all\"\nlog = \"a.log\"\nranks = 4\nmin_busbw_gbps = 1.0\n[[check]]\ncollective = \"all\"\nlog = \"a.log\"\nranks = 8\nsizes = \"1M:1G\"\nmin_busbw_gbps = 1.0\n";
        let titles: Vec<String> = parse_spec(two)
            .unwrap()
            .iter()
            .map(CheckSpec::title)
            .collect();
        assert_eq!(
            titles,
            ["all from a.log 4 ranks", "all from a.log 1M:1G 8 ranks"]
        );
        assert_eq!(c.collective_name(), Ok("all"));
        assert!(c.sweep().unwrap_err().0.contains("missing field `sizes`"));
    }

    #[test]
    fn bad_keys_are_the_flags_errors() {
        let mut c = parse_spec(SPEC).unwrap().remove(0);
        c.dtype = Some("float7".into());
        assert!(c
            .sweep()
            .unwrap_err()
            .0
            .contains("unknown --dtype 'float7'"));
        c.dtype = None;
        c.collective = "all-everything".into();
        assert!(c.sweep().unwrap_err().0.contains("unknown collective"));
        c.collective = "gather".into();
        c.algo = Some("tree".into());
        assert!(c
            .sweep()
            .unwrap_err()
            .0
            .contains("not an algorithm for gather"));
    }
}
