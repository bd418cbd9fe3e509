//! Ring generators: all-reduce (reduce-scatter then all-gather around the
//! ring), all-gather, reduce-scatter, and pipelined chains for broadcast and
//! reduce. Ring order is rank order; channel `c` uses connections tagged `c`.

use super::program::{ChannelProgram, Peers, Slice, Step};
use super::{chunks, granules, partition, push, wrap, Spec};
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

pub fn all_gather(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r, b) = (spec.nranks, spec.rank as isize, spec.counts.block);
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let (start, len) = partition(b, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(len, spec.chunk) {
                let x = start + o;
                if n > 1 {
                    push(&mut steps, Step::send(Slice::send(x), l, next));
                }
                if spec.placement == Placement::OutOfPlace {
                    push(
                        &mut steps,
                        Step::copy(Slice::send(x), Slice::recv(spec.rank * b + x), l),
                    );
                }
                for s in 1..n as isize {
                    let q = wrap(r - s, n);
                    let dst = Slice::recv(q * b + x);
                    let step = if s < n as isize - 1 {
                        Step::recv_copy_send(prev, dst, l, next)
                    } else {
                        Step::recv(prev, dst, l)
                    };
                    push(&mut steps, step);
                }
            }
            ChannelProgram { steps }
        })
        .collect()
}

pub fn reduce_scatter(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r, b) = (spec.nranks, spec.rank as isize, spec.counts.block);
    (0..spec.channels)
        .map(|c| {
            let (prev, next) = neighbours(spec, c);
            let (start, len) = partition(b, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(len, spec.chunk) {
                let x = start + o;
                let at = |q: isize| Slice::send(wrap(q, n) * b + x);
                if n == 1 {
                    push(
                        &mut steps,
                        Step::copy(at(0), Slice::recv(x), l).with_finish(true),
                    );
                    continue;
                }
                push(&mut steps, Step::send(at(r - 1), l, next));
                for s in 1..n as isize - 1 {
                    push(
                        &mut steps,
                        Step::recv_reduce_send(prev, at(r - 1 - s), l, next),
                    );
                }
                push(
                    &mut steps,
                    Step::recv_reduce_copy(prev, at(r), Slice::recv(x), l).with_finish(true),
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
