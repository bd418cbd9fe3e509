//! Algorithms as data: generators turn (collective, algorithm, ranks, rank,
//! root) into a [`Program`], and a symbolic executor proves them.

pub mod cost;
pub mod direct;
pub mod group;
pub mod program;
pub mod ring;
pub mod symbolic;
pub mod tree;

pub use program::{
    Buf, ChannelProgram, Layout, Peer, Peers, Prim, Program, Slice, Step, MAX_PEERS,
};
pub use symbolic::MIN_SLOTS;

use crate::engine::types::{Algo, Collective, Counts, Placement};

/// Everything a generator needs to know about one rank's part of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub coll: Collective,
    pub algo: Algo,
    pub nranks: usize,
    pub rank: usize,
    pub root: usize,
    pub counts: Counts,
    pub placement: Placement,
    /// Data partitions run side by side (each its own channel, or channels).
    pub channels: usize,
    /// Largest number of elements one step moves (a FIFO slot's capacity).
    pub chunk: usize,
}

/// Why no program exists for a request.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum AlgoError {
    #[error("{algo} is not an algorithm for {coll} (it has: {have})")]
    Unsupported {
        coll: Collective,
        algo: Algo,
        have: String,
    },
    #[error("root {root} is outside the {nranks} ranks")]
    BadRoot { root: usize, nranks: usize },
    #[error("invalid generator input: {0}")]
    Invalid(String),
    /// A step's slice lies outside its buffer.
    #[error("{0}")]
    OutOfBounds(String),
}

/// The program rank `spec.rank` runs.
pub fn generate(spec: &Spec) -> Result<Program, AlgoError> {
    validate(spec)?;
    // The v-collectives run their even forms' generators, which cut blocks
    // where the counts say.
    let channels = match (spec.coll.even(), spec.algo) {
        (Collective::AllReduce, Algo::Ring) => ring::all_reduce(spec),
        (Collective::AllGather, Algo::Ring) => ring::all_gather(spec),
        (Collective::ReduceScatter, Algo::Ring) => ring::reduce_scatter(spec),
        (Collective::Broadcast, Algo::Ring) => ring::broadcast(spec),
        (Collective::Reduce, Algo::Ring) => ring::reduce(spec),
        (Collective::AllReduce, Algo::Tree) => tree::all_reduce(spec),
        (Collective::Broadcast, Algo::Tree) => tree::broadcast(spec),
        (Collective::Reduce, Algo::Tree) => tree::reduce(spec),
        (Collective::AllReduce, Algo::Direct) => direct::all_reduce(spec),
        (Collective::AllToAll, Algo::Direct) => direct::all_to_all(spec),
        (Collective::Gather, Algo::Direct) => direct::gather(spec),
        (Collective::Scatter, Algo::Direct) => direct::scatter(spec),
        (Collective::SendRecv, Algo::Direct) => direct::send_recv(spec),
        (coll, algo) => {
            return Err(AlgoError::Unsupported {
                coll,
                algo,
                have: coll
                    .algos()
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    let scratch = scratch_elems(spec.coll, spec.algo, spec.placement, spec.counts);
    Ok(Program {
        rank: spec.rank,
        nranks: spec.nranks,
        channels,
        scratch,
    })
}

/// Elements of scratch space a program needs: in-place all-to-all and
/// direct all-reduce park data there until their output may be written.
pub fn scratch_elems(
    coll: Collective,
    algo: Algo,
    placement: Placement,
    counts: crate::engine::types::Counts,
) -> usize {
    match (coll, algo, placement) {
        (Collective::AllToAll | Collective::AllToAllV, _, Placement::InPlace) => counts.recv,
        (Collective::AllReduce, Algo::Direct, Placement::InPlace) => counts.recv,
        _ => 0,
    }
}

fn validate(spec: &Spec) -> Result<(), AlgoError> {
    if spec.nranks == 0 || spec.rank >= spec.nranks {
        return Err(AlgoError::Invalid(format!(
            "rank {} of {} ranks",
            spec.rank, spec.nranks
        )));
    }
    if spec.root >= spec.nranks {
        return Err(AlgoError::BadRoot {
            root: spec.root,
            nranks: spec.nranks,
        });
    }
    if spec.chunk == 0 || spec.channels == 0 {
        return Err(AlgoError::Invalid("chunk and channels must be >= 1".into()));
    }
    Ok(())
}

/// Elements every partition boundary is a multiple of: 16 elements are at
/// least 16 bytes of any type, so each part of an aligned buffer starts on a
/// 16-byte boundary and the CUDA kernel moves it in vectors (a part starting
/// anywhere else is moved element by element, at a fraction of the speed).
pub const GRANULE: usize = 16;

/// Channel `c`'s part `(start, len)` of `len` elements split `parts` ways:
/// whole granules as evenly as they go, and what is left past the last whole
/// granule to the part after it (the last part, or the first one without a
/// granule when there are fewer granules than parts: small messages stay in
/// the first channels).
pub(crate) fn partition(len: usize, parts: usize, c: usize) -> (usize, usize) {
    let units = len / GRANULE;
    let (base, extra) = (units / parts, units % parts);
    let tail = units.min(parts - 1);
    if c > tail {
        return (len, 0);
    }
    let start = (c * base + c.min(extra)) * GRANULE;
    let mut part = (base + usize::from(c < extra)) * GRANULE;
    if c == tail {
        part += len % GRANULE;
    }
    (start, part)
}

/// Channel `c`'s part of each of several blocks, cut in chunk-sized pieces:
/// round `i` moves piece `i` of every block (a block with fewer pieces
/// moves nothing then). Ranks that agree on the blocks agree on every
/// piece, so a sender's piece is its receiver's.
pub(crate) struct Pieces {
    parts: Vec<(usize, usize)>,
    chunk: usize,
    pub rounds: usize,
}

impl Pieces {
    pub(crate) fn new(blocks: &[(usize, usize)], spec: &Spec, c: usize) -> Pieces {
        let parts: Vec<(usize, usize)> = blocks
            .iter()
            .map(|&(off, len)| {
                let (s, l) = partition(len, spec.channels, c);
                (off + s, l)
            })
            .collect();
        let rounds = parts
            .iter()
            .map(|p| p.1.div_ceil(spec.chunk))
            .max()
            .unwrap_or(0);
        Pieces {
            parts,
            chunk: spec.chunk,
            rounds,
        }
    }

    /// `(offset, len)` of block `q`'s piece in round `i` (len 0: none).
    pub(crate) fn at(&self, q: usize, i: usize) -> (usize, usize) {
        let (at, len) = self.parts[q];
        let o = (i * self.chunk).min(len);
        (at + o, self.chunk.min(len - o))
    }
}

/// `n` rounded up to whole granules, but never past `cap` (a slot's worth).
pub(crate) fn granules(n: usize, cap: usize) -> usize {
    n.div_ceil(GRANULE).saturating_mul(GRANULE).min(cap)
}

/// `(offset, len)` chunks of at most `chunk` elements covering `len`.
pub(crate) fn chunks(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(chunk)).map(move |i| {
        let off = i * chunk;
        (off, chunk.min(len - off))
    })
}

/// Pushes `step` unless it moves nothing.
///
/// A local copy that continues the step before it (the same buffers, both
/// slices at the same offset, no peer) extends that step instead: a copy
/// has nothing to pipeline, and every step costs an executor a barrier
/// (the CUDA kernel's blocks drain their loads at each one).
pub(crate) fn push(steps: &mut Vec<Step>, step: Step) {
    if step.len == 0 {
        return;
    }
    if let Some(last) = steps.last_mut() {
        if continues_copy(last, &step) {
            last.len += step.len;
            return;
        }
    }
    steps.push(step);
}

/// Whether `next` is the same-offset local copy that carries on where `last` ends.
fn continues_copy(last: &Step, next: &Step) -> bool {
    let local = |s: &Step| s.prim == Prim::Copy && s.recv.is_empty() && s.send.is_empty();
    let same_offset = |s: &Step| matches!((s.src, s.dst), (Some(a), Some(b)) if a.off == b.off);
    let (Some(a), Some(b)) = (last.src, next.src) else {
        return false;
    };
    local(last)
        && local(next)
        && same_offset(last)
        && same_offset(next)
        && last.finish == next.finish
        && a.buf == b.buf
        && last.dst.map(|d| d.buf) == next.dst.map(|d| d.buf)
        && a.off + last.len == b.off
}

/// `(a + b) mod n` on ranks.
pub(crate) fn wrap(a: isize, n: usize) -> usize {
    a.rem_euclid(n as isize) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_everything_once() {
        for len in (0..200).chain([4096, 4099, 1 << 20, (1 << 20) + 7]) {
            for parts in 1..9 {
                let mut next = 0;
                for c in 0..parts {
                    let (s, l) = partition(len, parts, c);
                    assert_eq!(s, next);
                    next += l;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn partition_starts_on_granules_and_balances_them() {
        // 16 MiB of f32 over 264 channels: every part starts on a granule,
        // and parts differ by at most one granule.
        let (len, parts) = (4 << 20, 264);
        let mut sizes = Vec::new();
        for c in 0..parts {
            let (s, l) = partition(len, parts, c);
            assert_eq!(s % GRANULE, 0, "part {c} starts at {s}");
            sizes.push(l);
        }
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(hi - lo <= GRANULE, "{lo}..{hi}");
        // Fewer elements than one granule a part: the first parts take them.
        assert_eq!(partition(2, 8, 0), (0, 2));
        assert_eq!(partition(2, 8, 7), (2, 0));
        assert_eq!(partition(40, 8, 0), (0, 16));
        assert_eq!(partition(40, 8, 1), (16, 16));
        assert_eq!(partition(40, 8, 2), (32, 8));
        assert_eq!(partition(40, 8, 7), (40, 0));
        assert_eq!(granules(5, 1000), 16);
        assert_eq!(granules(17, 1000), 32);
        assert_eq!(granules(17, 20), 20);
    }

    #[test]
    fn chunks_cover_everything_once() {
        let v: Vec<_> = chunks(10, 4).collect();
        assert_eq!(v, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(chunks(0, 4).count(), 0);
    }

    #[test]
    fn consecutive_local_copies_merge_into_one_step() {
        let mut steps = Vec::new();
        for (o, l) in chunks(10, 4) {
            push(&mut steps, Step::copy(Slice::send(o), Slice::recv(o), l));
        }
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert_eq!(
            (steps[0].len, steps[0].src, steps[0].dst),
            (10, Some(Slice::send(0)), Some(Slice::recv(0)))
        );
        // Every generator's single-rank copy is one step per channel.
        for coll in [
            Collective::AllReduce,
            Collective::Broadcast,
            Collective::Reduce,
        ] {
            for algo in Algo::ALL {
                let spec = Spec {
                    coll,
                    algo,
                    nranks: 1,
                    rank: 0,
                    root: 0,
                    counts: coll.counts(1000, 4, 1),
                    placement: Placement::OutOfPlace,
                    channels: 2,
                    chunk: 16,
                };
                let Ok(p) = generate(&spec) else { continue };
                let mut total = 0;
                for ch in &p.channels {
                    assert!(ch.steps.len() <= 1, "{coll:?} {algo:?}: {:?}", ch.steps);
                    total += ch.steps.iter().map(|s| s.len).sum::<usize>();
                }
                assert_eq!(total, spec.counts.send, "{coll:?} {algo:?}");
            }
        }
    }

    #[test]
    fn copies_that_do_not_continue_each_other_stay_apart() {
        let next = Peers::one(1, 0);
        let cases: [(Step, Step); 5] = [
            // A gap.
            (
                Step::copy(Slice::send(0), Slice::recv(0), 4),
                Step::copy(Slice::send(5), Slice::recv(5), 4),
            ),
            // Source and destination at different offsets.
            (
                Step::copy(Slice::send(0), Slice::recv(8), 4),
                Step::copy(Slice::send(4), Slice::recv(12), 4),
            ),
            // Another buffer.
            (
                Step::copy(Slice::send(0), Slice::recv(0), 4),
                Step::copy(Slice::send(4), Slice::scratch(4), 4),
            ),
            // One finishes, the other does not.
            (
                Step::copy(Slice::send(0), Slice::recv(0), 4).with_finish(true),
                Step::copy(Slice::send(4), Slice::recv(4), 4),
            ),
            // A message, not a local copy.
            (
                Step::copy(Slice::send(0), Slice::recv(0), 4),
                Step::send(Slice::send(4), 4, next),
            ),
        ];
        for (a, b) in cases {
            let mut steps = Vec::new();
            push(&mut steps, a);
            push(&mut steps, b);
            assert_eq!(steps, vec![a, b]);
        }
    }

    #[test]
    fn unsupported_pairs_are_errors() {
        let spec = Spec {
            coll: Collective::AllGather,
            algo: Algo::Tree,
            nranks: 2,
            rank: 0,
            root: 0,
            counts: Collective::AllGather.counts(64, 4, 2),
            placement: Placement::OutOfPlace,
            channels: 1,
            chunk: 4,
        };
        assert!(matches!(
            generate(&spec),
            Err(AlgoError::Unsupported { .. })
        ));
        let bad_root = Spec {
            coll: Collective::Broadcast,
            algo: Algo::Ring,
            root: 2,
            ..spec
        };
        assert_eq!(
            generate(&bad_root),
            Err(AlgoError::BadRoot { root: 2, nranks: 2 })
        );
    }
}
