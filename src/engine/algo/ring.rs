//! Ring generators: all-reduce (reduce-scatter then all-gather around the
//! ring), all-gather, reduce-scatter, and pipelined chains for broadcast and
//! reduce. Ring order is rank order; channel `c` uses connections tagged `c`.

use super::program::{ChannelProgram, Peers, Slice, Step};
use super::{chunks, granules, partition, push, wrap, Pieces, Spec};
use crate::engine::types::Placement;

fn neighbours(spec: &Spec, chan: usize) -> (Peers, Peers) {
    let (r, n) = (spec.rank as isize, spec.nranks);
    (
        Peers::one(wrap(r - 1, n), chan),
        Peers::one(wrap(r + 1, n), chan),
    )
}

/// One copy per chunk of `[start, start+len)`, finished when `finish`.
fn local_copy(steps: &mut Vec<Step>, spec: &Spec, start: usize, len: usize, finish: bool) {
    for (o, l) in chunks(len, spec.chunk) {
        push(
            steps,
            Step::copy(Slice::send(start + o), Slice::recv(start + o), l).with_finish(finish),
        );
    }
}

pub fn all_reduce(spec: &Spec) -> Vec<ChannelProgram> {
    (0..spec.channels)
        .map(|c| {
            let (start, len) = partition(spec.counts.send, spec.channels, c);
            let mut steps = Vec::new();
            if spec.nranks == 1 {
                local_copy(&mut steps, spec, start, len, true);
            } else {
                all_reduce_loops(&mut steps, spec, c, start, len);
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// NCCL's loop: each loop moves `n` blocks of up to `chunk` elements.
fn all_reduce_loops(steps: &mut Vec<Step>, spec: &Spec, chan: usize, start: usize, len: usize) {
    let (n, r) = (spec.nranks, spec.rank as isize);
    let (prev, next) = neighbours(spec, chan);
    let mut offset = 0;
    while offset < len {
        let rem = len - offset;
        let real = granules(rem.div_ceil(n), spec.chunk);
        let block = |j: isize| {
            let j = wrap(j, n);
            let at = j * real;
            (start + offset + at, real.min(rem.saturating_sub(at)))
        };
        let (o, l) = block(r - 1);
        push(steps, Step::send(Slice::send(o), l, next));
        for s in 1..n as isize - 1 {
            let (o, l) = block(r - 1 - s);
            push(steps, Step::recv_reduce_send(prev, Slice::send(o), l, next));
        }
        let (o, l) = block(r);
        push(
            steps,
            Step::recv_reduce_copy_send(prev, Slice::send(o), Slice::recv(o), l, next)
                .with_finish(true),
        );
        for s in 1..n as isize - 1 {
            let (o, l) = block(r - s);
            push(steps, Step::recv_copy_send(prev, Slice::recv(o), l, next));
        }
        let (o, l) = block(r + 1);
        push(steps, Step::recv(prev, Slice::recv(o), l));
        offset += n * real;
    }
}

/// Each rank's block goes around the ring; blocks may differ in size
/// (all-gather-v), each cut in its own pieces.
pub fn all_gather(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r) = (spec.nranks, spec.rank as isize);
    let blocks = spec.counts.blocks(n);
    let own = blocks[spec.rank].0;
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let p = Pieces::new(&blocks, spec, c);
            let mut steps = Vec::new();
            for i in 0..p.rounds {
                let (x, l) = p.at(spec.rank, i);
                if n > 1 {
                    push(&mut steps, Step::send(Slice::send(x - own), l, next));
                }
                if spec.placement == Placement::OutOfPlace {
                    push(
                        &mut steps,
                        Step::copy(Slice::send(x - own), Slice::recv(x), l),
                    );
                }
                for s in 1..n as isize {
                    let (x, l) = p.at(wrap(r - s, n), i);
                    let step = if s < n as isize - 1 {
                        Step::recv_copy_send(prev, Slice::recv(x), l, next)
                    } else {
                        Step::recv(prev, Slice::recv(x), l)
                    };
                    push(&mut steps, step);
                }
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// Each block is reduced around the ring and ends at its rank; blocks may
/// differ in size (reduce-scatter-v).
pub fn reduce_scatter(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r) = (spec.nranks, spec.rank as isize);
    let blocks = spec.counts.blocks(n);
    let own = blocks[spec.rank].0;
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let p = Pieces::new(&blocks, spec, c);
            let mut steps = Vec::new();
            for i in 0..p.rounds {
                let at = |q: isize| {
                    let (x, l) = p.at(wrap(q, n), i);
                    (Slice::send(x), l)
                };
                let (mine, ml) = at(r);
                let out = Slice::recv(mine.off - own);
                if n == 1 {
                    push(&mut steps, Step::copy(mine, out, ml).with_finish(true));
                    continue;
                }
                let (x, l) = at(r - 1);
                push(&mut steps, Step::send(x, l, next));
                for s in 1..n as isize - 1 {
                    let (x, l) = at(r - 1 - s);
                    push(&mut steps, Step::recv_reduce_send(prev, x, l, next));
                }
                push(
                    &mut steps,
                    Step::recv_reduce_copy(prev, mine, out, ml).with_finish(true),
                );
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// Pipelined chain root -> root+1 -> ... -> root-1.
pub fn broadcast(spec: &Spec) -> Vec<ChannelProgram> {
    let n = spec.nranks;
    let pos = wrap(spec.rank as isize - spec.root as isize, n);
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let (start, len) = partition(spec.counts.send, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(len, spec.chunk) {
                let x = start + o;
                if pos == 0 {
                    if n > 1 {
                        push(&mut steps, Step::send(Slice::send(x), l, next));
                    }
                    if spec.placement == Placement::OutOfPlace {
                        push(&mut steps, Step::copy(Slice::send(x), Slice::recv(x), l));
                    }
                } else if pos < n - 1 {
                    push(
                        &mut steps,
                        Step::recv_copy_send(prev, Slice::recv(x), l, next),
                    );
                } else {
                    push(&mut steps, Step::recv(prev, Slice::recv(x), l));
                }
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// Pipelined chain root+1 -> root+2 -> ... -> root, reducing on the way.
pub fn reduce(spec: &Spec) -> Vec<ChannelProgram> {
    let n = spec.nranks;
    let pos = wrap(spec.rank as isize - spec.root as isize - 1, n);
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let (start, len) = partition(spec.counts.send, spec.channels, c);
            let mut steps = Vec::new();
            if n == 1 {
                local_copy(&mut steps, spec, start, len, true);
                return ChannelProgram { steps };
            }
            for (o, l) in chunks(len, spec.chunk) {
                let x = start + o;
                let step = if pos == 0 {
                    Step::send(Slice::send(x), l, next)
                } else if pos < n - 1 {
                    Step::recv_reduce_send(prev, Slice::send(x), l, next)
                } else {
                    Step::recv_reduce_copy(prev, Slice::send(x), Slice::recv(x), l)
                        .with_finish(true)
                };
                push(&mut steps, step);
            }
            ChannelProgram { steps }
        })
        .collect()
}
