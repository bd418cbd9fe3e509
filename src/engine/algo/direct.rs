//! Direct generators: every transfer goes straight from its source rank to
//! its destination. All-to-all is a pairwise exchange (at step k rank r sends
//! to r+k and receives from r-k); gather and scatter talk to the root;
//! send-recv moves each rank's buffer to the next rank.

use super::program::{ChannelProgram, Peers, Slice, Step};
use super::{chunks, partition, push, wrap, Pieces, Spec};
use crate::engine::types::Placement;

/// Runs `body(chan, x, l)` for every chunk of each channel's part of a block.
fn per_chunk(
    spec: &Spec,
    len: usize,
    mut body: impl FnMut(usize, &mut Vec<Step>, usize, usize),
) -> Vec<ChannelProgram> {
    (0..spec.channels)
        .map(|c| {
            let (start, part) = partition(len, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(part, spec.chunk) {
                body(c, &mut steps, start + o, l);
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// Pairwise exchange; what each pair moves may differ (all-to-all-v),
/// each pair's block cut in its own pieces.
pub fn all_to_all(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r) = (spec.nranks, spec.rank);
    let in_place = spec.placement == Placement::InPlace;
    if in_place && spec.channels > 1 && !spans_agree(spec) {
        // A rank's channels would write received blocks over data its
        // other channels have still to send: every rank runs one channel.
        let one = Spec {
            channels: 1,
            ..*spec
        };
        let mut programs = all_to_all(&one);
        programs.resize_with(spec.channels, || ChannelProgram { steps: Vec::new() });
        return programs;
    }
    let (sends, recvs) = (spec.counts.sends(r, n), spec.counts.recvs(r, n));
    // In place, this rank's block to itself stays put where it sends and
    // receives it at the same offset (always, when counts are even); else
    // it waits in scratch with the received blocks.
    let own_moves = in_place && sends[r].0 != recvs[r].0;
    (0..spec.channels)
        .map(|c| {
            let (out, inn) = (Pieces::new(&sends, spec, c), Pieces::new(&recvs, spec, c));
            let rounds = out.rounds.max(inn.rounds);
            let mut steps = Vec::new();
            for i in 0..rounds {
                let ((x, l), (y, _)) = (out.at(r, i), inn.at(r, i));
                if !in_place {
                    push(&mut steps, Step::copy(Slice::send(x), Slice::recv(y), l));
                } else if own_moves {
                    push(&mut steps, Step::copy(Slice::send(x), Slice::scratch(y), l));
                }
                for k in 1..n as isize {
                    let to = wrap(r as isize + k, n);
                    let from = wrap(r as isize - k, n);
                    let (x, l) = out.at(to, i);
                    push(&mut steps, Step::send(Slice::send(x), l, Peers::one(to, c)));
                    let (y, l) = inn.at(from, i);
                    let dst = if in_place {
                        Slice::scratch(y)
                    } else {
                        Slice::recv(y)
                    };
                    push(&mut steps, Step::recv(Peers::one(from, c), dst, l));
                }
            }
            if in_place {
                // Received blocks land in scratch until every block has been sent.
                for i in 0..inn.rounds {
                    for q in (0..n).filter(|&q| q != r || own_moves) {
                        let (y, l) = inn.at(q, i);
                        push(&mut steps, Step::copy(Slice::scratch(y), Slice::recv(y), l));
                    }
                }
            }
            ChannelProgram { steps }
        })
        .collect()
}

/// Whether, on every rank, each block lies at the same offset in the send
/// view as in the receive view (all-to-all; all-to-all-v may differ).
fn spans_agree(spec: &Spec) -> bool {
    let Some(v) = spec.counts.v else {
        return true;
    };
    let m = v.matrix();
    let n = m.len();
    (0..n).all(|r| {
        let (mut sent, mut got) = (0, 0);
        (0..n).all(|q| {
            let same = sent == got;
            sent += m[r][q];
            got += m[q][r];
            same
        })
    })
}

/// All-reduce where every rank reads every peer's input and reduces them
/// itself, in rank order ((in0 + in1) + in2) + ... on every rank, so all
/// ranks hold the same bits even for operators that are not associative.
/// Each rank moves n times the data, but never waits on a peer's partial
/// result: the choice for few ranks.
pub fn all_reduce(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r) = (spec.nranks, spec.rank);
    // In place, the output overwrites this rank's input, which the order
    // may still need: partial results wait in scratch.
    let in_place = spec.placement == Placement::InPlace;
    per_chunk(spec, spec.counts.send, |c, steps, x, l| {
        let (own, out) = (Slice::send(x), Slice::recv(x));
        if n == 1 {
            push(steps, Step::copy(own, out, l).with_finish(true));
            return;
        }
        let peers: Vec<usize> = (0..n).filter(|&q| q != r).collect();
        for group in peers.chunks(super::MAX_PEERS) {
            push(
                steps,
                Step::send(own, l, Peers::of(group.iter().map(|&q| (q, c)))),
            );
        }
        let acc = if in_place { Slice::scratch(x) } else { out };
        let dst = |q: usize| if q == n - 1 { out } else { acc };
        // acc = in0 (+) in1, then (+) in2, ... in rank order.
        let first = match r {
            0 | 1 => Step::recv_reduce_copy(Peers::one(1 - r, c), own, dst(1), l),
            _ => Step {
                src: None,
                ..Step::recv_reduce_copy(Peers::of([(0, c), (1, c)]), own, dst(1), l)
            },
        };
        push(steps, first.with_finish(n == 2));
        for q in 2..n {
            if q == r && in_place && q == n - 1 {
                // The output still holds this rank's input: fold it into
                // the rest, read as the input (premulsum scales it there;
                // a sum commutes bit for bit), then write the output.
                push(steps, Step::local_reduce(own, acc, l));
                push(steps, Step::copy(acc, out, l).with_finish(true));
                continue;
            }
            let step = if q == r {
                Step::local_reduce(own, acc, l)
            } else {
                Step::recv_reduce_copy(Peers::one(q, c), acc, dst(q), l)
            };
            push(steps, step.with_finish(q == n - 1));
        }
    })
}

pub fn gather(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r, b, root) = (spec.nranks, spec.rank, spec.counts.block, spec.root);
    per_chunk(spec, b, |c, steps, x, l| {
        if r != root {
            push(steps, Step::send(Slice::send(x), l, Peers::one(root, c)));
            return;
        }
        if spec.placement == Placement::OutOfPlace {
            push(steps, Step::copy(Slice::send(x), Slice::recv(r * b + x), l));
        }
        for k in 1..n {
            let q = (root + k) % n;
            push(
                steps,
                Step::recv(Peers::one(q, c), Slice::recv(q * b + x), l),
            );
        }
    })
}

pub fn scatter(spec: &Spec) -> Vec<ChannelProgram> {
    let (n, r, b, root) = (spec.nranks, spec.rank, spec.counts.block, spec.root);
    per_chunk(spec, b, |c, steps, x, l| {
        if r != root {
            push(steps, Step::recv(Peers::one(root, c), Slice::recv(x), l));
            return;
        }
        for k in 1..n {
            let q = (root + k) % n;
            push(
                steps,
                Step::send(Slice::send(q * b + x), l, Peers::one(q, c)),
            );
        }
        if spec.placement == Placement::OutOfPlace {
            push(steps, Step::copy(Slice::send(r * b + x), Slice::recv(x), l));
        }
    })
}

pub fn send_recv(spec: &Spec) -> Vec<ChannelProgram> {
    let n = spec.nranks;
    let (to, from) = crate::engine::types::send_recv_peers(spec.rank, n, spec.root);
    per_chunk(spec, spec.counts.send, |c, steps, x, l| {
        if n == 1 {
            if spec.placement == Placement::OutOfPlace {
                push(steps, Step::copy(Slice::send(x), Slice::recv(x), l));
            }
            return;
        }
        push(steps, Step::send(Slice::send(x), l, Peers::one(to, c)));
        push(steps, Step::recv(Peers::one(from, c), Slice::recv(x), l));
    })
}
