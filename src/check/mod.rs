//! TEMPORARY stub (replaced by the check branch's implementation).
use crate::engine::types::{Collective, Counts, Dtype, ReduceOp};

pub struct Rule {
    pub seed: u64,
    pub dtype: Dtype,
    pub op: ReduceOp,
    pub nranks: usize,
}

pub fn fill_input(rule: &Rule, rank: usize, dst: &mut [u8]) {
    for (i, c) in dst.chunks_exact_mut(4).enumerate() {
        let v = ((rank * 7 + i + rule.seed as usize) % 13) as f32;
        c.copy_from_slice(&v.to_ne_bytes());
    }
}

pub fn poison(_dtype: Dtype, dst: &mut [u8]) {
    dst.fill(0xCD);
}

#[derive(Clone, Debug)]
pub struct BadElem {
    pub rank: usize,
    pub index: usize,
    pub expected: String,
    pub got: String,
}

#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub checked: u64,
    pub wrong: u64,
    pub nan: u64,
    pub first: Option<BadElem>,
}

pub fn verify(
    _rule: &Rule,
    _coll: Collective,
    counts: Counts,
    _root: usize,
    _rank: usize,
    _recv: &[u8],
) -> Verdict {
    Verdict {
        checked: counts.recv as u64,
        ..Verdict::default()
    }
}
