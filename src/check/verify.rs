//! Expected outputs and verdicts: what each rank's receive buffer must hold
//! after a collective, compared bit for bit (float Avg within 2 ULP, since a
//! GPU may divide differently), with non-finite results counted apart.
//!
//! Every element's expectation costs O(1) whatever the rank count (see
//! `data`), and the loops are monomorphised per element type: the common
//! case, a match, is one hash, a few integer operations and a compare.

use super::data::{
    float_key, format_elem, is_finite, mask, poison_bits, with_kind, Gen, Kind, Rule,
};
use crate::engine::{Collective, Counts, Dtype, ReduceOp};

/// The first wrong element a rank found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BadElem {
    pub rank: usize,
    /// Element index in the receive buffer.
    pub index: usize,
    /// Value and bits, e.g. `3.0 (0x4200)`.
    pub expected: String,
    pub got: String,
}

/// What checking one receive buffer found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// Elements compared.
    pub checked: u64,
    /// Elements that differ from the expectation (non-finite ones included).
    pub wrong: u64,
    /// Non-finite (NaN or ±Inf) elements of float types, never-written ones
    /// (still holding the NaN poison pattern) included: E4M3 has only two
    /// NaN codes, so the pattern cannot tell them apart. `first` says which
    /// it looks like.
    pub nan: u64,
    pub first: Option<BadElem>,
}

impl Verdict {
    /// No wrong element.
    pub fn ok(&self) -> bool {
        self.wrong == 0
    }

    /// Adds another rank's verdict; the first bad element stays the one
    /// merged first.
    pub fn merge(&mut self, other: Verdict) {
        self.checked += other.checked;
        self.wrong += other.wrong;
        self.nan += other.nan;
        if self.first.is_none() {
            self.first = other.first;
        }
    }
}

/// Float Avg may differ from the expectation by this many ULPs.
const AVG_ULPS: u64 = 2;

/// How many ULPs an element checked under `rule` may be off by.
pub(crate) fn tolerance(rule: &Rule) -> u64 {
    if rule.op == ReduceOp::Avg && rule.dtype.is_float() {
        AVG_ULPS
    } else {
        0
    }
}

/// A wrong element as people read it: its value and bits, and a word on
/// the poison pattern.
pub(crate) fn describe_got(dtype: Dtype, got: u64) -> String {
    let text = format_elem(dtype, got);
    if got & mask(dtype) == poison_bits(dtype) {
        text + ", the poison pattern: never written?"
    } else {
        text
    }
}

/// The first bad element of rank `rank`.
pub(crate) fn bad_elem(
    dtype: Dtype,
    rank: usize,
    index: usize,
    expected: u64,
    got: String,
) -> BadElem {
    BadElem {
        rank,
        index,
        expected: format_elem(dtype, expected & mask(dtype)),
        got,
    }
}

/// Checks rank `rank`'s receive buffer after `coll` with `counts` (from
/// [`Collective::counts`]) and `root`, against the inputs [`super::fill_input`]
/// wrote under `rule`. Ranks whose receive buffer is undefined afterwards
/// (non-roots of reduce and gather) check nothing. A buffer shorter than
/// `counts.recv` elements has its missing elements counted as wrong.
pub fn verify(
    rule: &Rule,
    coll: Collective,
    counts: Counts,
    root: usize,
    rank: usize,
    recv: &[u8],
) -> Verdict {
    with_kind!(rule.dtype, verify_as, rule, coll, counts, root, rank, recv)
}

fn verify_as<K: Kind>(
    rule: &Rule,
    coll: Collective,
    counts: Counts,
    root: usize,
    rank: usize,
    recv: &[u8],
) -> Verdict {
    let gen = Gen::new(rule, counts.recv);
    let (n, r) = (gen.nranks(), gen.rank(rank));
    let root = root % n; // unused by unrooted collectives, which may pass anything
    let mut t = Tally::new(rule, rank, recv);
    let b = counts.block;
    let mine = counts.recv_of(r);
    match coll {
        Collective::AllReduce => {
            let stats = gen.stats();
            t.run::<K>(0, counts.recv, |i| gen.reduced::<K>(&stats, i));
        }
        Collective::ReduceScatter | Collective::ReduceScatterV => {
            let stats = gen.stats();
            let from = counts.blocks(n)[r].0;
            t.run::<K>(0, mine, |i| gen.reduced::<K>(&stats, from + i));
        }
        Collective::Reduce if r == root => {
            let stats = gen.stats();
            t.run::<K>(0, counts.recv, |i| gen.reduced::<K>(&stats, i));
        }
        Collective::AllGather | Collective::AllGatherV => {
            for (q, (at, len)) in counts.blocks(n).into_iter().enumerate() {
                t.run::<K>(at, len, |i| gen.input::<K>(q, i));
            }
        }
        Collective::Gather if r == root => blocks::<K>(&mut t, &gen, n, b, 0),
        Collective::Reduce | Collective::Gather => {}
        Collective::AllToAll | Collective::AllToAllV => {
            for (q, (at, len)) in counts.recvs(r, n).into_iter().enumerate() {
                let from = counts.sends(q, n)[r].0;
                t.run::<K>(at, len, |i| gen.input::<K>(q, from + i));
            }
        }
        Collective::Broadcast => t.run::<K>(0, counts.recv, |i| gen.input::<K>(root, i)),
        Collective::Scatter => t.run::<K>(0, counts.recv, |i| gen.input::<K>(root, r * b + i)),
        Collective::SendRecv => {
            let from = crate::engine::types::send_recv_peers(r, n, root).1;
            t.run::<K>(0, counts.recv, |i| gen.input::<K>(from, i));
        }
    }
    t.verdict
}

/// Checks rank `rank`'s input (its send view, `send`) against what it was
/// filled with, before an operation: where a NaN/Inf came from, when one
/// turns up in the outputs (a rank's input, or the operation itself).
pub fn verify_input(rule: &Rule, rank: usize, send: &[u8]) -> Verdict {
    with_kind!(rule.dtype, verify_input_as, rule, rank, send)
}

fn verify_input_as<K: Kind>(rule: &Rule, rank: usize, send: &[u8]) -> Verdict {
    let count = send.len() / K::SIZE;
    let gen = Gen::new(rule, count);
    let q = gen.rank(rank);
    let mut t = Tally::new(rule, rank, send);
    t.run::<K>(0, count, |i| gen.input::<K>(q, i));
    t.verdict
}

/// `recv[q*b + i] = input(q, from + i)` for every rank `q`.
fn blocks<K: Kind>(t: &mut Tally, gen: &Gen, n: usize, b: usize, from: usize) {
    for q in 0..n {
        t.run::<K>(q * b, b, |i| gen.input::<K>(q, from + i));
    }
}

/// Counts as it compares; the slow path only for mismatches.
struct Tally<'a> {
    rank: usize,
    dtype: Dtype,
    recv: &'a [u8],
    ulps: u64,
    verdict: Verdict,
}

impl<'a> Tally<'a> {
    fn new(rule: &Rule, rank: usize, recv: &'a [u8]) -> Self {
        Tally {
            rank,
            dtype: rule.dtype,
            recv,
            ulps: tolerance(rule),
            verdict: Verdict::default(),
        }
    }

    /// Compares elements `start..start + len` of the receive buffer with
    /// `want(0..len)`.
    #[inline(always)]
    fn run<K: Kind>(&mut self, start: usize, len: usize, want: impl Fn(usize) -> u64) {
        let s = K::SIZE;
        let have = (self.recv.len() / s).saturating_sub(start).min(len);
        let bytes = self.recv.get(start * s..(start + have) * s).unwrap_or(&[]);
        for (i, elem) in bytes.chunks_exact(s).enumerate() {
            let mut raw = [0u8; 8];
            raw[..s].copy_from_slice(elem);
            let got = u64::from_le_bytes(raw);
            let expected = want(i);
            if got != expected {
                self.mismatch(start + i, expected, got);
            }
        }
        self.verdict.checked += have as u64;
        if have < len {
            self.verdict.wrong += (len - have) as u64;
            let end = self.recv.len() / s;
            let got = || format!("nothing: the buffer ends at element {end}");
            self.record(start + have, want(have), got);
        }
    }

    #[cold]
    #[inline(never)]
    fn mismatch(&mut self, index: usize, expected: u64, got: u64) {
        let dt = self.dtype;
        let finite = is_finite(dt, got);
        if finite
            && self.ulps > 0
            && float_key(dt, got).abs_diff(float_key(dt, expected)) <= self.ulps
        {
            return;
        }
        self.verdict.wrong += 1;
        if !finite {
            self.verdict.nan += 1;
        }
        self.record(index, expected, || describe_got(dt, got));
    }

    /// Keeps the first bad element (formatting only that one).
    fn record(&mut self, index: usize, expected: u64, got: impl FnOnce() -> String) {
        if self.verdict.first.is_none() {
            self.verdict.first = Some(bad_elem(self.dtype, self.rank, index, expected, got()));
        }
    }
}
