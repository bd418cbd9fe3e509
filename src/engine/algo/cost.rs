//! What an algorithm costs, in the terms of a latency-bandwidth model: how
//! many steps a message waits through one after another (hops) and how many
//! bytes the busiest rank moves per byte of the case's size (traffic). The
//! cost model (`harness::tuning`) fits a latency per hop and a bandwidth per
//! unit of traffic on this machine, and these two functions carry the fit
//! to other rank counts.

use crate::engine::types::{Algo, Collective};

/// `ceil(log2 n)`, at least 1.
fn depth(n: usize) -> f64 {
    (usize::BITS - (n.max(2) - 1).leading_zeros()) as f64
}

/// Steps one after another from the first byte sent to the last received.
/// A single rank copies once.
pub fn hops(coll: Collective, algo: Algo, n: usize) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    let nf = n as f64;
    match (coll, algo) {
        // Reduce-scatter, then all-gather, around the ring.
        (Collective::AllReduce, Algo::Ring) => 2.0 * (nf - 1.0),
        // Up the tree and down again.
        (Collective::AllReduce, Algo::Tree) => 2.0 * depth(n),
        // Every peer's message, reduced in rank order.
        (Collective::AllReduce, Algo::Direct) => nf - 1.0,
        (Collective::Broadcast | Collective::Reduce, Algo::Tree) => depth(n),
        (Collective::SendRecv, _) => 1.0,
        // Chains, rings, pairwise exchanges and a root's n-1 messages.
        _ => nf - 1.0,
    }
}

/// Bytes the busiest rank sends (or receives) per byte of the case's size
/// (the size nccl-tests prints): nccl-tests' bus-bandwidth factor where the
/// algorithm is link-optimal, more where it is not. A single rank copies
/// its bytes once.
pub fn traffic(coll: Collective, algo: Algo, n: usize) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    let nf = n as f64;
    match (coll, algo) {
        // Two trees, each over half the data: a rank is inner in one (its
        // half from two children and the parent, to the parent and two
        // children: 1.5x the data each way) and a leaf in the other (half
        // up, half down): twice the data each way, as a ring's ~2(n-1)/n.
        // Two ranks exchange their data once.
        (Collective::AllReduce, Algo::Tree) => {
            if n == 2 {
                1.0
            } else {
                2.0
            }
        }
        // Every rank sends its whole input to every peer.
        (Collective::AllReduce, Algo::Direct) => nf - 1.0,
        (Collective::Broadcast | Collective::Reduce, Algo::Tree) if n > 2 => 2.0,
        _ => coll.busbw_factor(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_cost_what_nccl_tests_factors_say() {
        for n in 2..17 {
            let nf = n as f64;
            let ar = (Collective::AllReduce, Algo::Ring);
            assert_eq!(hops(ar.0, ar.1, n), 2.0 * (nf - 1.0));
            assert_eq!(traffic(ar.0, ar.1, n), 2.0 * (nf - 1.0) / nf);
            assert_eq!(
                traffic(Collective::AllGather, Algo::Ring, n),
                (nf - 1.0) / nf
            );
            assert_eq!(traffic(Collective::Broadcast, Algo::Ring, n), 1.0);
        }
        assert_eq!(hops(Collective::AllReduce, Algo::Tree, 8), 6.0);
        assert_eq!(hops(Collective::AllReduce, Algo::Tree, 9), 8.0);
        assert_eq!(hops(Collective::Broadcast, Algo::Tree, 2), 1.0);
        assert_eq!(traffic(Collective::AllReduce, Algo::Direct, 4), 3.0);
        assert_eq!(traffic(Collective::AllReduce, Algo::Tree, 2), 1.0);
        assert_eq!(traffic(Collective::AllReduce, Algo::Tree, 8), 2.0);
        assert_eq!(traffic(Collective::Broadcast, Algo::Tree, 8), 2.0);
        for c in Collective::ALL {
            for &a in c.algos() {
                assert_eq!((hops(c, a, 1), traffic(c, a, 1)), (1.0, 1.0));
                for n in 2..40 {
                    assert!(
                        hops(c, a, n) >= 1.0 && traffic(c, a, n) > 0.0,
                        "{c} {a} {n}"
                    );
                }
            }
        }
    }
}
