//! Tree generators. All-reduce runs NCCL's double binary tree: two trees
//! over the same ranks, one the mirror of the other so that most ranks are
//! a leaf in one of them; each carries half the data, reducing up and
//! broadcasting down at once (up and down are separate channels, so the
//! pipeline never stalls on itself). Broadcast and reduce use one binary
//! tree rooted at the root.

use super::program::{ChannelProgram, Peers, Slice, Step};
use super::{chunks, partition, push, wrap, Spec};
use crate::engine::types::Placement;

/// A node of a heap-shaped binary tree over positions `0..n` (root at 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub parent: Option<usize>,
    pub children: [Option<usize>; 2],
}

impl Node {
    /// The node at `pos`, with neighbours given as positions.
    pub fn at(pos: usize, n: usize) -> Node {
        let kid = |k: usize| Some(2 * pos + k).filter(|&c| c < n);
        Node {
            parent: (pos > 0).then(|| (pos - 1) / 2),
            children: [kid(1), kid(2)],
        }
    }

    fn has_children(&self) -> bool {
        self.children[0].is_some()
    }
}

/// Rank <-> position maps of the trees.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Position = (rank - root) mod n.
    Rooted(usize),
    /// The mirror tree of the double binary tree: position = n - 1 - rank.
    Mirror,
}

impl Shape {
    fn pos(self, rank: usize, n: usize) -> usize {
        match self {
            Shape::Rooted(root) => wrap(rank as isize - root as isize, n),
            Shape::Mirror => n - 1 - rank,
        }
    }

    fn rank(self, pos: usize, n: usize) -> usize {
        match self {
            Shape::Rooted(root) => (pos + root) % n,
            Shape::Mirror => n - 1 - pos,
        }
    }
}

/// The rank's node with neighbours translated to ranks.
fn node(shape: Shape, rank: usize, n: usize) -> Node {
    let at = Node::at(shape.pos(rank, n), n);
    let to_rank = |p: Option<usize>| p.map(|p| shape.rank(p, n));
    Node {
        parent: to_rank(at.parent),
        children: [to_rank(at.children[0]), to_rank(at.children[1])],
    }
}

fn kids(node: &Node, chan: usize) -> Peers {
    Peers::of(node.children.iter().flatten().map(|&k| (k, chan)))
}

fn up(node: &Node, chan: usize) -> Peers {
    Peers::of(node.parent.map(|p| (p, chan)))
}

pub fn all_reduce(spec: &Spec) -> Vec<ChannelProgram> {
    let n = spec.nranks;
    let parts = 2 * spec.channels;
    let mut programs = Vec::with_capacity(2 * parts);
    for part in 0..parts {
        let shape = if part % 2 == 0 {
            Shape::Rooted(0)
        } else {
            Shape::Mirror
        };
        let me = node(shape, spec.rank, n);
        let (cu, cd) = (2 * part, 2 * part + 1);
        let (start, len) = partition(spec.counts.send, parts, part);
        let (mut ups, mut downs) = (Vec::new(), Vec::new());
        for (o, l) in chunks(len, spec.chunk) {
            let x = start + o;
            let (src, dst) = (Slice::send(x), Slice::recv(x));
            let step = match (me.parent.is_some(), me.has_children()) {
                (false, false) => Step::copy(src, dst, l).with_finish(true),
                (false, true) => {
                    Step::recv_reduce_copy_send(kids(&me, cu), src, dst, l, kids(&me, cd))
                        .with_finish(true)
                }
                (true, false) => Step::send(src, l, up(&me, cu)),
                (true, true) => Step::recv_reduce_send(kids(&me, cu), src, l, up(&me, cu)),
            };
            push(&mut ups, step);
            if me.parent.is_some() {
                let step = if me.has_children() {
                    Step::recv_copy_send(up(&me, cd), dst, l, kids(&me, cd))
                } else {
                    Step::recv(up(&me, cd), dst, l)
                };
                push(&mut downs, step);
            }
        }
        programs.push(ChannelProgram { steps: ups });
        programs.push(ChannelProgram { steps: downs });
    }
    programs
}

pub fn broadcast(spec: &Spec) -> Vec<ChannelProgram> {
    let me = node(Shape::Rooted(spec.root), spec.rank, spec.nranks);
    (0..spec.channels)
        .map(|c| {
            let (start, len) = partition(spec.counts.send, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(len, spec.chunk) {
                let x = start + o;
                match (me.parent.is_some(), me.has_children()) {
                    (false, has_kids) => {
                        if has_kids {
                            push(&mut steps, Step::send(Slice::send(x), l, kids(&me, c)));
                        }
                        if spec.placement == Placement::OutOfPlace {
                            push(&mut steps, Step::copy(Slice::send(x), Slice::recv(x), l));
                        }
                    }
                    (true, true) => push(
                        &mut steps,
                        Step::recv_copy_send(up(&me, c), Slice::recv(x), l, kids(&me, c)),
                    ),
                    (true, false) => push(&mut steps, Step::recv(up(&me, c), Slice::recv(x), l)),
                }
            }
            ChannelProgram { steps }
        })
        .collect()
}

pub fn reduce(spec: &Spec) -> Vec<ChannelProgram> {
    let me = node(Shape::Rooted(spec.root), spec.rank, spec.nranks);
    (0..spec.channels)
        .map(|c| {
            let (start, len) = partition(spec.counts.send, spec.channels, c);
            let mut steps = Vec::new();
            for (o, l) in chunks(len, spec.chunk) {
                let (src, dst) = (Slice::send(start + o), Slice::recv(start + o));
                let step = match (me.parent.is_some(), me.has_children()) {
                    (false, false) => Step::copy(src, dst, l).with_finish(true),
                    (false, true) => {
                        Step::recv_reduce_copy(kids(&me, c), src, dst, l).with_finish(true)
                    }
                    (true, false) => Step::send(src, l, up(&me, c)),
                    (true, true) => Step::recv_reduce_send(kids(&me, c), src, l, up(&me, c)),
                };
                push(&mut steps, step);
            }
            ChannelProgram { steps }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_tree_makes_most_ranks_a_leaf_once() {
        for n in 2..=16 {
            let both_interior = (0..n)
                .filter(|&r| {
                    node(Shape::Rooted(0), r, n).has_children()
                        && node(Shape::Mirror, r, n).has_children()
                })
                .count();
            assert!(
                both_interior <= 1,
                "n={n}: {both_interior} ranks interior twice"
            );
        }
    }

    #[test]
    fn heap_tree_links_are_consistent() {
        for n in 1..=16 {
            for p in 0..n {
                let me = Node::at(p, n);
                for c in me.children.iter().flatten() {
                    assert_eq!(Node::at(*c, n).parent, Some(p));
                }
            }
        }
    }
}
