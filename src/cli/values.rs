//! Value parsers: every flag value with a closed set or a grammar is parsed
//! here, by clap, into a typed value. A bad value is clap's error, worded by
//! collbench, with the valid values listed.

use crate::engine::exec::cuda::abi::Proto;
use crate::engine::types::{Algo, Collective, Dtype, Engine, Placement, ReduceOp};
use crate::harness::inject::{Fault, Inject};
pub use crate::harness::RankTime;
use crate::harness::RootChoice;
use crate::units::{parse_bytes, parse_duration, parse_sweep};
use clap::ValueEnum;
use std::path::PathBuf;
use std::time::Duration;

/// Why a flag's value was refused (clap prints it after the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

fn bad<T>(msg: String) -> Result<T, ValueError> {
    Err(ValueError(msg))
}

/// Where the user asked data to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when a GPU and NVRTC are usable, else the host engine.
    Auto,
    /// The host engine (CPU threads or processes).
    #[value(alias = "cpu")]
    Host,
    /// The CUDA executor on this machine's GPUs.
    #[value(alias = "gpu")]
    Cuda,
    /// The CUDA executor on the emulated device (CPU threads; slow).
    CudaEmu,
}

/// `--placement`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlacementChoice {
    Both,
    #[value(alias = "out-of-place")]
    Out,
    #[value(alias = "in-place")]
    In,
}

impl PlacementChoice {
    pub fn placements(self) -> Vec<Placement> {
        match self {
            PlacementChoice::Both => vec![Placement::OutOfPlace, Placement::InPlace],
            PlacementChoice::Out => vec![Placement::OutOfPlace],
            PlacementChoice::In => vec![Placement::InPlace],
        }
    }
}

/// `--timing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TimingChoice {
    /// CUDA events around every operation on the rank's stream (with
    /// --graph: around the captured loop).
    Events,
    /// The host's monotonic clock.
    Wall,
}

/// `--protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProtocolChoice {
    Auto,
    Simple,
    #[value(alias = "low-latency")]
    Ll,
    Ll128,
}

impl ProtocolChoice {
    pub fn proto(self) -> Option<Proto> {
        match self {
            ProtocolChoice::Auto => None,
            ProtocolChoice::Simple => Some(Proto::Simple),
            ProtocolChoice::Ll => Some(Proto::LowLatency),
            ProtocolChoice::Ll128 => Some(Proto::LowLatency128),
        }
    }
}

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatChoice {
    Table,
    #[value(alias = "nccl", alias = "nccl_tests")]
    NcclTests,
    #[value(alias = "md")]
    Markdown,
}

/// `--algo`: `auto`, or a list (`all` expands to every algorithm).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgoArg {
    Auto,
    List(Vec<Algo>),
}

/// A comma list of `T`, or `all`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List<T>(pub Vec<T>);

/// The sizes of `--sizes MIN:MAX[:xF|:+STEP]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes(pub Vec<u64>);

/// `--channels N|auto` (`Auto`: the executor's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channels {
    Auto,
    N(usize),
}

impl Channels {
    /// As the plan holds it: 0 for auto.
    pub fn count(self) -> usize {
        match self {
            Channels::Auto => 0,
            Channels::N(n) => n,
        }
    }
}

fn names<T>(all: &[T], name: impl Fn(&T) -> &'static str) -> String {
    all.iter().map(name).collect::<Vec<_>>().join(", ")
}

/// Splits a comma list, or expands `all`.
fn list<T: Copy + PartialEq>(
    flag: &str,
    v: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    known: &str,
) -> Result<Vec<T>, ValueError> {
    if v.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    let items: Vec<&str> = v.split(',').map(str::trim).collect();
    if items.len() > 1 && items.iter().any(|s| s.is_empty()) {
        return bad(format!(
            "{flag} {v}: an empty item (two commas, or one at an end)"
        ));
    }
    for item in items.into_iter().filter(|s| !s.is_empty()) {
        match parse(item) {
            Some(x) if out.contains(&x) => {
                return bad(format!("{flag} {v}: '{item}' is given twice"))
            }
            Some(x) => out.push(x),
            // `all` (and `--algo auto`) are whole choices, not items.
            None if item.eq_ignore_ascii_case("all")
                || (flag == "--algo" && item.eq_ignore_ascii_case("auto")) =>
            {
                return bad(format!(
                    "{flag} {v}: '{item}' stands alone; give it alone, or list the ones wanted"
                ))
            }
            None => return bad(format!("unknown {flag} '{item}' (known: {known}, all)")),
        }
    }
    if out.is_empty() {
        return bad(format!("{flag} is empty"));
    }
    Ok(out)
}

/// `--group-mix`: collectives in issue order, each as often as named
/// (`all`: the nine of `collbench all`).
pub fn group_mix(v: &str) -> Result<List<Collective>, ValueError> {
    if v.trim().eq_ignore_ascii_case("all") {
        return Ok(List(Collective::ALL.to_vec()));
    }
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Collective::parse(item) {
            Some(c) => out.push(c),
            None if item.eq_ignore_ascii_case("all") => {
                return bad(format!(
                    "--group-mix {v}: 'all' stands alone (the nine collectives); give it alone, or list them"
                ))
            }
            None => {
                return bad(format!(
                    "unknown --group-mix collective '{item}' (known: {}, all)",
                    names(&Collective::EVERY, |c| c.name())
                ))
            }
        }
    }
    if out.is_empty() {
        return bad("--group-mix is empty".into());
    }
    Ok(List(out))
}

pub fn collectives(v: &str) -> Result<List<Collective>, ValueError> {
    let known = names(&Collective::EVERY, |c| c.name());
    list(
        "--collective",
        v,
        &Collective::ALL,
        Collective::parse,
        &known,
    )
    .map(List)
}

/// `model --link-gbps`: a link's bandwidth, from 1 MB/s to 1 PB/s (past
/// those, predictions are infinite or vanish).
pub fn link_gbps(v: &str) -> Result<f64, ValueError> {
    match positive_f64(v)? {
        x if (1e-3..=1e6).contains(&x) => Ok(x),
        _ => bad(format!(
            "'{v}': a link's bandwidth in GB/s from 0.001 to 1000000"
        )),
    }
}

/// `model --latency-us`: one hop's latency, up to a second.
pub fn latency_us(v: &str) -> Result<f64, ValueError> {
    match positive_f64(v)? {
        x if x <= 1e6 => Ok(x),
        _ => bad(format!(
            "'{v}': a hop's latency in microseconds, at most 1000000"
        )),
    }
}

pub fn positive_f64(v: &str) -> Result<f64, ValueError> {
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => bad(format!("'{v}' is not a positive number")),
    }
}

pub fn dtypes(v: &str) -> Result<List<Dtype>, ValueError> {
    let known = names(&Dtype::ALL, |d| d.name());
    list("--dtype", v, &Dtype::ALL, Dtype::parse, &known).map(List)
}

pub fn ops(v: &str) -> Result<List<ReduceOp>, ValueError> {
    let all = ReduceOp::NCCL_TESTS_ORDER;
    // premulsum is known, though `all` (nccl-tests' operators) leaves it out.
    let known = format!("{}, premulsum (or mulsum)", names(&all, |o| o.name()));
    list("--op", v, &all, ReduceOp::parse, &known).map(List)
}

pub fn scalar(v: &str) -> Result<crate::engine::elem::Scalar, ValueError> {
    crate::engine::elem::Scalar::parse(v).ok_or_else(|| {
        let t = v.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            // A whole number no type holds.
            return ValueError(format!(
                "--scalar '{v}': out of range: no type holds it (integers run from {} for int64 to {} for uint64)",
                i64::MIN,
                u64::MAX
            ));
        }
        ValueError(format!(
            "--scalar '{v}': expected a finite number (an integer for integer types)"
        ))
    })
}

/// The most bytes a `--split` file of weights may have (a weight per rank,
/// or per pair of ranks, of a large world is a few MB).
const MAX_SPLIT_BYTES: u64 = 64 << 20;

/// `--split`: a named split, or a file of weights (read here, once).
pub fn split(v: &str) -> Result<crate::engine::split::Split, ValueError> {
    use crate::engine::split::Split;
    if let Some(s) = Split::parse_named(v).map_err(|e| ValueError(format!("--split {e}")))? {
        return Ok(s);
    }
    let text = crate::units::read_input_text(std::path::Path::new(v), MAX_SPLIT_BYTES).map_err(|e| {
        ValueError(format!(
            "--split '{v}': not uniform, skew[:SEED] or hot[:RANK], and not a readable file of weights ({e})"
        ))
    })?;
    Split::from_text(v, &text).map_err(|e| ValueError(format!("--split {e}")))
}

pub fn engines(v: &str) -> Result<List<Engine>, ValueError> {
    const ALL: [Engine; 3] = [Engine::Builtin, Engine::Nccl, Engine::Mpi];
    let parse = |s: &str| ALL.into_iter().find(|e| e.name().eq_ignore_ascii_case(s));
    list("--engine", v, &ALL, parse, &names(&ALL, |e| e.name())).map(List)
}

pub fn algos(v: &str) -> Result<AlgoArg, ValueError> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(AlgoArg::Auto);
    }
    let known = format!("{}, auto", names(&Algo::ALL, |a| a.name()));
    list("--algo", v, &Algo::ALL, Algo::parse, &known).map(AlgoArg::List)
}

/// A whole number, at least 0.
fn whole<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, ValueError> {
    let t = v.trim();
    t.parse().or_else(|_| {
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            bad(format!("{flag} '{v}' is too large"))
        } else {
            bad(format!("{flag} '{v}' is not a non-negative whole number"))
        }
    })
}

/// A whole number, at least 1.
fn positive(flag: &str, v: &str) -> Result<usize, ValueError> {
    match whole(flag, v)? {
        0 => bad(format!("{flag} must be at least 1")),
        n => Ok(n),
    }
}

/// `--gpu-map 0,1,2,3`: a GPU ordinal per rank of a node.
pub fn gpu_map(v: &str) -> Result<List<usize>, ValueError> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim) {
        match item.parse::<usize>() {
            Ok(n) if n < 4096 => out.push(n),
            _ => {
                return bad(format!(
                    "--gpu-map '{v}': expected GPU ordinals separated by commas, such as 0,1,2,3 (bad item '{item}')"
                ))
            }
        }
    }
    Ok(List(out))
}

/// `--procs N`: rank processes on this node (1 to 64).
pub fn procs(v: &str) -> Result<usize, ValueError> {
    match whole("--procs", v)? {
        n @ 1..=64 => Ok(n),
        n => bad(format!("--procs {n}: from 1 to 64 processes")),
    }
}

pub fn ranks(v: &str) -> Result<usize, ValueError> {
    positive("--ranks", v)
}

/// A count of at least 1 for a flag clap names in its message (nccl-tests'
/// `-t`, `-g`, `-m`).
pub fn at_least_one(v: &str) -> Result<usize, ValueError> {
    positive("the value", v)
}

pub fn iters(v: &str) -> Result<usize, ValueError> {
    positive("--iters", v)
}

pub fn warmup(v: &str) -> Result<usize, ValueError> {
    whole("--warmup", v)
}

pub fn check_iters(v: &str) -> Result<usize, ValueError> {
    whole("--check-iters", v)
}

/// The most flight-recorder entries a rank keeps: each is held in memory
/// (a few hundred bytes), a million per rank at most.
pub const MAX_FR_ENTRIES: usize = 1_000_000;

pub fn fr_entries(v: &str) -> Result<usize, ValueError> {
    match positive("--fr-entries", v)? {
        n if n > MAX_FR_ENTRIES => bad(format!(
            "--fr-entries {n}: at most {MAX_FR_ENTRIES} (every rank holds its entries in memory)"
        )),
        n => Ok(n),
    }
}

pub fn seed(v: &str) -> Result<u64, ValueError> {
    whole("--seed", v)
}

pub fn root(v: &str) -> Result<RootChoice, ValueError> {
    // -1: nccl-tests' `-r -1`, every root in turn.
    if v.trim().eq_ignore_ascii_case("all") || v.trim() == "-1" {
        return Ok(RootChoice::All);
    }
    whole("--root", v).map(RootChoice::One).map_err(|_| {
        ValueError(format!(
            "--root '{v}': expected a rank (0, 1, ...), or all (also -1): every root in turn"
        ))
    })
}

pub fn channels(v: &str) -> Result<Channels, ValueError> {
    use crate::engine::exec::world::MAX_CHANNELS;
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(Channels::Auto);
    }
    let n: usize = whole("--channels", v)?;
    if !(1..=MAX_CHANNELS).contains(&n) {
        return bad(format!(
            "--channels {n}: must be 1 to {MAX_CHANNELS}, or auto"
        ));
    }
    Ok(Channels::N(n))
}

pub fn sizes(v: &str) -> Result<Sizes, ValueError> {
    parse_sweep(v)
        .map(Sizes)
        .map_err(|e| ValueError(format!("--sizes: {e}")))
}

pub fn bytes(v: &str) -> Result<u64, ValueError> {
    parse_bytes(v).map_err(|e| ValueError(e.to_string()))
}

pub fn factor(v: &str) -> Result<f64, ValueError> {
    match v.trim().parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => bad(format!("-f '{v}' is not a number")),
    }
}

/// A bandwidth floor in GB/s (`--min-link-gbps`): a positive number, up
/// to a million (no link is faster; 1e308 printed 309 digits in its
/// verdict).
pub fn gbps(v: &str) -> Result<f64, ValueError> {
    match v.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 && g <= 1e6 => Ok(g),
        _ => bad(format!(
            "'{v}' is not a number of GB/s above 0 and up to 1000000"
        )),
    }
}

pub fn slot_size(v: &str) -> Result<usize, ValueError> {
    let b = bytes(v).map_err(|e| ValueError(format!("--slot-size: {e}")))?;
    if !(64..=64 << 20).contains(&b) {
        return bad("--slot-size must be 64B to 64MiB".into());
    }
    Ok(b as usize)
}

pub fn duration(v: &str) -> Result<Duration, ValueError> {
    parse_duration(v).map_err(|e| ValueError(e.to_string()))
}

/// How long "never" lasts for `--timeout 0` (nccl-tests' `-T 0`): a year.
pub const NO_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// `--timeout`: a duration, or 0 (in any unit: `0`, `0s`, `0h0m`) for none.
pub fn timeout(v: &str) -> Result<Duration, ValueError> {
    match crate::units::parse_duration_or_zero(v) {
        Ok(d) if d.is_zero() => Ok(NO_TIMEOUT),
        Ok(d) => Ok(d),
        Err(e) => Err(ValueError(e.to_string())),
    }
}

/// A whole number, 0 included.
pub fn count(v: &str) -> Result<usize, ValueError> {
    whole("the value", v)
}

/// nccl-tests' `-R`: 0 no registration, 1 local, 2 symmetric.
pub fn register(v: &str) -> Result<usize, ValueError> {
    match v.trim() {
        "0" => Ok(0),
        "1" => Ok(1),
        "2" => Ok(2),
        other => bad(format!(
            "'{other}' is not 0 (no registration), 1 (local) or 2 (symmetric)"
        )),
    }
}

/// nccl-tests' 0/1 switches.
pub fn flag01(v: &str) -> Result<bool, ValueError> {
    match v.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => bad(format!("'{other}' is not 0 or 1")),
    }
}

/// nccl-tests' `-a`: 0 rank 0, 1 mean, 2 min, 3 max.
pub fn average(v: &str) -> Result<RankTime, ValueError> {
    match v.trim() {
        "0" => Ok(RankTime::Rank0),
        "1" => Ok(RankTime::Mean),
        "2" => Ok(RankTime::Min),
        "3" => Ok(RankTime::Max),
        other => bad(format!(
            "'{other}' is not an averaging mode (0 rank 0, 1 mean, 2 min, 3 max)"
        )),
    }
}

/// `--plot FILE.png|FILE.svg`.
pub fn plot_path(v: &str) -> Result<PathBuf, ValueError> {
    let p = PathBuf::from(v);
    let ext = p
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("png" | "svg") => Ok(p),
        _ => bad(format!(
            "--plot {v}: the file name must end in .png or .svg"
        )),
    }
}

/// The forms of `--inject`, for messages.
const INJECT_FORMS: &str = "forms: hang:rank=R,seq=S  delay:rank=R,seq=S,ms=M  nan:rank=R[,seq=S]  corrupt:rank=R[,seq=S]  slow:rank=R,factor=F  slow-link:from=A,to=B,factor=F";

/// The faults `--inject` knows, each a form of [`INJECT_FORMS`].
const INJECT_KINDS: [&str; 6] = ["hang", "delay", "nan", "corrupt", "slow", "slow-link"];

/// One `--inject SPEC`: its grammar (the rank's bound is checked against
/// `--ranks` when the plan is built).
pub fn inject(spec: &str) -> Result<Inject, ValueError> {
    let fail = |why: &str| ValueError(format!("--inject '{spec}': {why} ({INJECT_FORMS})"));
    let (kind, rest) = spec.split_once(':').ok_or_else(|| fail("missing ':'"))?;
    // What the fault is comes before what it is given or lacks.
    let kind = kind.trim();
    if !INJECT_KINDS.contains(&kind) {
        return Err(fail(&format!("unknown fault '{kind}'")));
    }
    let (mut rank, mut seq, mut ms, mut from, mut to) = (None, None, None, None, None);
    let mut factor: Option<f64> = None;
    for kv in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| fail(&format!("'{kv}' is not key=value")))?;
        if k.trim() == "factor" {
            let f: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|f: &f64| f.is_finite() && *f >= 1.0 && *f <= 1000.0)
                .ok_or_else(|| fail(&format!("factor={v} is not a number from 1 to 1000")))?;
            if factor.replace(f).is_some() {
                return Err(fail("factor is given twice"));
            }
            continue;
        }
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| fail(&format!("{k}={v} is not a whole number")))?;
        let slot = match k.trim() {
            "rank" => &mut rank,
            "seq" => &mut seq,
            "ms" => &mut ms,
            "from" => &mut from,
            "to" => &mut to,
            other => return Err(fail(&format!("unknown key '{other}'"))),
        };
        if slot.replace(v).is_some() {
            return Err(fail(&format!("{} is given twice", k.trim())));
        }
    }
    if kind == "slow" || kind == "slow-link" {
        return slow(kind, rank, from, to, factor, seq.or(ms), &fail);
    }
    if from.is_some() || to.is_some() || factor.is_some() {
        return Err(fail(
            "from=, to= and factor= only go with slow and slow-link",
        ));
    }
    let rank = rank.ok_or_else(|| fail("rank= is required"))? as usize;
    let fault = match kind {
        "hang" => Fault::Hang,
        "delay" => Fault::Delay {
            ms: ms.ok_or_else(|| fail("ms= is required"))?,
        },
        "nan" => Fault::Nan,
        "corrupt" => Fault::Corrupt,
        other => return Err(fail(&format!("unknown fault '{other}'"))),
    };
    if matches!(fault, Fault::Hang | Fault::Delay { .. }) && seq.is_none() {
        return Err(fail("seq= is required"));
    }
    if ms.is_some() && !matches!(fault, Fault::Delay { .. }) {
        return Err(fail("ms= only goes with delay"));
    }
    let seq = seq.unwrap_or(1);
    if seq == 0 {
        return Err(fail("sequence numbers start at 1"));
    }
    Ok(Inject { fault, rank, seq })
}

/// `slow:rank=R,factor=F` or `slow-link:from=A,to=B,factor=F`.
fn slow(
    kind: &str,
    rank: Option<u64>,
    from: Option<u64>,
    to: Option<u64>,
    factor: Option<f64>,
    timed: Option<u64>,
    fail: &dyn Fn(&str) -> ValueError,
) -> Result<Inject, ValueError> {
    if timed.is_some() {
        return Err(fail(&format!(
            "{kind} slows every transfer: no seq= or ms="
        )));
    }
    let factor = factor.ok_or_else(|| fail("factor= is required"))?;
    let (rank, to) = match (kind, rank, from, to) {
        ("slow", Some(r), None, None) => (r, None),
        ("slow", ..) => return Err(fail("slow takes rank= and factor=")),
        ("slow-link", None, Some(a), Some(b)) if a == b => {
            return Err(fail("from= and to= must be two ranks"))
        }
        (_, None, Some(a), Some(b)) => (a, Some(b as usize)),
        _ => return Err(fail("slow-link takes from=, to= and factor=")),
    };
    Ok(Inject {
        fault: Fault::Slow { to, factor },
        rank: rank as usize,
        seq: 1,
    })
}

/// An injection's ranks against the world's size.
pub fn inject_in_world(i: &Inject, nranks: usize) -> Result<(), ValueError> {
    let to = match i.fault {
        Fault::Slow { to, .. } => to,
        _ => None,
    };
    for r in std::iter::once(i.rank).chain(to) {
        if r >= nranks {
            return bad(format!(
                "--inject {i}: rank {r} is outside the {nranks} ranks ({INJECT_FORMS})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injections_parse_in_every_form() {
        assert_eq!(
            inject("hang:rank=2,seq=5"),
            Ok(Inject {
                fault: Fault::Hang,
                rank: 2,
                seq: 5
            })
        );
        assert_eq!(
            inject("delay:rank=1,seq=3,ms=8000"),
            Ok(Inject {
                fault: Fault::Delay { ms: 8000 },
                rank: 1,
                seq: 3
            })
        );
        assert_eq!(
            inject("nan:rank=0"),
            Ok(Inject {
                fault: Fault::Nan,
                rank: 0,
                seq: 1
            })
        );
        assert_eq!(
            inject("corrupt:rank=1,seq=9"),
            Ok(Inject {
                fault: Fault::Corrupt,
                rank: 1,
                seq: 9
            })
        );
    }

    #[test]
    fn bad_injections_say_why() {
        for (spec, why) in [
            ("hang:rank=2", "seq= is required"),
            ("delay:rank=0,seq=1", "ms= is required"),
            ("boom:rank=0", "unknown fault"),
            (":", "unknown fault ''"),
            ("boom:seq=1", "unknown fault 'boom'"),
            ("boom:factor=2", "unknown fault 'boom'"),
            ("boom:x=1", "unknown fault 'boom'"),
            ("nan:rank=0,when=3", "unknown key"),
            ("nan", "missing ':'"),
            ("nan:rank=x", "not a whole number"),
            ("nan:rank=0,ms=4", "only goes with delay"),
            ("hang:rank=0,seq=0", "start at 1"),
            ("hang:rank=0,seq=1,rank=1", "rank is given twice"),
        ] {
            let e = inject(spec).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("forms:"), "{spec}: {e}");
        }
        let far = inject("hang:rank=9,seq=1").unwrap();
        let e = inject_in_world(&far, 4).unwrap_err().to_string();
        assert!(e.contains("outside the 4 ranks"), "{e}");
        assert!(inject_in_world(&far, 10).is_ok());
    }

    #[test]
    fn lists_expand_all_and_name_the_known_values() {
        assert_eq!(dtypes("all").unwrap().0, Dtype::ALL.to_vec());
        assert_eq!(
            ops("sum, max").unwrap().0,
            vec![ReduceOp::Sum, ReduceOp::Max]
        );
        let e = dtypes("float7").unwrap_err().to_string();
        assert!(
            e.contains("unknown --dtype 'float7'") && e.contains("bfloat16"),
            "{e}"
        );
        assert_eq!(dtypes("").unwrap_err().to_string(), "--dtype is empty");
        assert!(dtypes(",")
            .unwrap_err()
            .to_string()
            .contains("an empty item"));
        assert!(dtypes("float,,int32")
            .unwrap_err()
            .to_string()
            .contains("an empty item"));
        assert!(ops("x").unwrap_err().to_string().contains("premulsum"));
        assert_eq!(algos("auto"), Ok(AlgoArg::Auto));
        assert_eq!(algos("all"), Ok(AlgoArg::List(Algo::ALL.to_vec())));
        // `all` and `auto` are whole choices: in a list, said as such.
        for (e, item) in [
            (algos("ring,all").unwrap_err().0, "'all'"),
            (algos("ring,auto").unwrap_err().0, "'auto'"),
            (dtypes("all,float").unwrap_err().0, "'all'"),
            (ops("sum, ALL").unwrap_err().0, "'ALL'"),
        ] {
            assert!(e.contains(&format!("{item} stands alone")), "{e}");
            assert!(!e.contains("unknown"), "{e}");
        }
        let e = scalar("18446744073709551616").unwrap_err().0;
        assert!(
            e.contains("out of range") && e.contains("18446744073709551615"),
            "{e}"
        );
        assert!(scalar("18446744073709551615").is_ok());
        let e = scalar("-9223372036854775809").unwrap_err().0;
        assert!(e.contains("out of range"), "{e}");
        assert!(scalar("1e400").unwrap_err().0.contains("finite number"));
        assert_eq!(
            engines("builtin,nccl").unwrap().0,
            vec![Engine::Builtin, Engine::Nccl]
        );
    }

    #[test]
    fn numbers_have_their_bounds() {
        assert_eq!(
            ranks("0").unwrap_err().to_string(),
            "--ranks must be at least 1"
        );
        assert!(warmup("x")
            .unwrap_err()
            .to_string()
            .contains("not a non-negative"));
        assert_eq!(root("all"), Ok(RootChoice::All));
        assert_eq!(root("-1"), Ok(RootChoice::All));
        assert_eq!(root("3"), Ok(RootChoice::One(3)));
        assert_eq!(channels("auto"), Ok(Channels::Auto));
        assert!(channels("0").is_err() && channels("129").is_err());
        assert!(slot_size("32").is_err() && slot_size("256K") == Ok(256 << 10));
        assert!(plot_path("x.pdf").is_err() && plot_path("x.svg").is_ok());
    }

    #[test]
    fn registration_is_0_1_or_2() {
        assert_eq!(register("0"), Ok(0));
        assert_eq!(register(" 2 "), Ok(2));
        for v in ["3", "5", "-1", "x", ""] {
            assert!(register(v).is_err(), "{v}");
        }
    }

    #[test]
    fn a_zero_timeout_in_any_unit_is_none() {
        for v in ["0", "0.0", "0s", "0ms", " 0m "] {
            assert_eq!(timeout(v), Ok(NO_TIMEOUT), "{v}");
        }
        assert_eq!(timeout("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(timeout("0h0m"), Ok(NO_TIMEOUT));
        assert_eq!(timeout("0m 0s"), Ok(NO_TIMEOUT));
        // Positive but below a nanosecond: not taken for "none".
        assert!(timeout("0.0000000001s")
            .unwrap_err()
            .0
            .contains("shorter than a nanosecond"));
        assert!(timeout("0parsecs").is_err());
        assert!(timeout("-1s").is_err());
        assert!(timeout("abc").is_err());
    }
}
