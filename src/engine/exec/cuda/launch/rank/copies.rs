//! A program that only copies within the rank (one rank's all-reduce,
//! all-gather or broadcast, a send-recv to itself) runs as the device's own
//! copies instead of the collective kernel, as NCCL does for one rank: no
//! kernel moves bytes faster than the driver's device-to-device copy, and
//! none starts sooner.

use crate::engine::algo::{Layout, Prim, Program};
use crate::engine::exec::cuda::dev::DevPtr;
use crate::engine::types::{Dtype, ReduceOp};

/// One device-to-device copy, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevCopy {
    pub dst: DevPtr,
    pub src: DevPtr,
    pub bytes: usize,
}

/// More steps than this are left to the kernel (the hazard check below
/// compares every pair).
const MAX_STEPS: usize = 1024;

/// More copies than this (after merging) are left to the kernel: one
/// launch beats many small copies.
const MAX_COPIES: usize = 8;

/// The copies that do what `program` does, or `None` when it does more
/// than copy (a peer, a reduction, a scaling, a finishing step), when its
/// copies depend on each other (one writes what another reads or writes),
/// or when it would take more than a few copies. `bufs` are the rank's
/// physical buffers (send, receive, scratch).
pub(crate) fn plan(
    program: &Program,
    layout: &Layout,
    dtype: Dtype,
    op: ReduceOp,
    bufs: &[DevPtr; 3],
) -> Option<Vec<DevCopy>> {
    // Premulsum scales even a lone rank's input, and avg divides what it
    // finishes: arithmetic, the kernel's. Every other operator's finishing
    // step leaves the value as it is.
    if matches!(op, ReduceOp::PreMulSum | ReduceOp::Avg) {
        return None;
    }
    let steps: Vec<_> = program.channels.iter().flat_map(|c| &c.steps).collect();
    if steps.len() > MAX_STEPS {
        return None;
    }
    let size = dtype.size() as u64;
    let mut copies = Vec::with_capacity(steps.len());
    for s in steps {
        let plain = s.prim == Prim::Copy && s.recv.is_empty() && s.send.is_empty();
        let (Some(src), Some(dst), true) = (s.src, s.dst, plain) else {
            return None;
        };
        let at = |slice| {
            let (b, off) = layout.resolve(slice);
            bufs[b] + off as u64 * size
        };
        let c = DevCopy {
            dst: at(dst),
            src: at(src),
            bytes: s.len * dtype.size(),
        };
        if c.src != c.dst {
            copies.push(c);
        }
    }
    // The kernel runs channels at once and a channel's steps in order; the
    // copies below run in any order, which is the same only if none of
    // them touches what another writes (or overlaps itself).
    let span = |p: DevPtr, n: usize| (p, p + n as u64);
    let meet = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
    for (i, a) in copies.iter().enumerate() {
        let written = span(a.dst, a.bytes);
        if meet(written, span(a.src, a.bytes)) {
            return None;
        }
        for b in &copies[i + 1..] {
            let other = span(b.dst, b.bytes);
            if meet(written, other)
                || meet(written, span(b.src, b.bytes))
                || meet(other, span(a.src, a.bytes))
            {
                return None;
            }
        }
    }
    // Channels' parts of one block lie end to end: one copy each.
    copies.sort_by_key(|c| (c.src, c.dst));
    let mut merged: Vec<DevCopy> = Vec::with_capacity(copies.len());
    for c in copies {
        match merged.last_mut() {
            Some(m) if m.src + m.bytes as u64 == c.src && m.dst + m.bytes as u64 == c.dst => {
                m.bytes += c.bytes;
            }
            _ => merged.push(c),
        }
    }
    (merged.len() <= MAX_COPIES).then_some(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::algo::{self, Spec};
    use crate::engine::algo::{ChannelProgram, Slice, Step};
    use crate::engine::types::{Algo, Collective, Placement};

    const BUFS: [DevPtr; 3] = [1 << 20, 2 << 20, 3 << 20];

    fn program(
        coll: Collective,
        algo: Algo,
        nranks: usize,
        channels: usize,
        placement: Placement,
    ) -> (Program, Layout) {
        let counts = coll.counts(4000, 4, nranks);
        let spec = Spec {
            coll,
            algo,
            nranks,
            rank: 0,
            root: 0,
            counts,
            placement,
            channels,
            chunk: 64,
        };
        let p = algo::generate(&spec).expect("generates");
        (p, Layout::new(coll, counts, placement, 0))
    }

    #[test]
    fn a_lone_ranks_copy_is_one_device_copy_whatever_its_channels() {
        for algo in [Algo::Ring, Algo::Tree] {
            let (p, layout) = program(Collective::AllReduce, algo, 1, 4, Placement::OutOfPlace);
            let got = plan(&p, &layout, Dtype::F32, ReduceOp::Max, &BUFS).expect("copies only");
            assert_eq!(
                got,
                vec![DevCopy {
                    dst: BUFS[1],
                    src: BUFS[0],
                    bytes: 4000
                }],
                "{algo:?}"
            );
            // Scaled (premulsum) or divided (avg): arithmetic, the kernel's.
            for op in [ReduceOp::PreMulSum, ReduceOp::Avg] {
                assert_eq!(plan(&p, &layout, Dtype::F32, op, &BUFS), None);
            }
        }
    }

    #[test]
    fn in_place_a_lone_rank_has_nothing_to_copy() {
        let (p, layout) = program(Collective::AllReduce, Algo::Ring, 1, 2, Placement::InPlace);
        assert_eq!(
            plan(&p, &layout, Dtype::F32, ReduceOp::Sum, &BUFS),
            Some(Vec::new())
        );
    }

    #[test]
    fn a_program_with_peers_is_the_kernels() {
        for coll in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::Broadcast,
        ] {
            let (p, layout) = program(coll, Algo::Ring, 2, 2, Placement::OutOfPlace);
            assert_eq!(
                plan(&p, &layout, Dtype::F32, ReduceOp::Sum, &BUFS),
                None,
                "{coll:?}"
            );
        }
    }

    fn by_hand(channels: Vec<Vec<Step>>) -> (Program, Layout) {
        let p = Program {
            rank: 0,
            nranks: 1,
            channels: channels
                .into_iter()
                .map(|steps| ChannelProgram { steps })
                .collect(),
            scratch: 100,
        };
        let counts = Collective::AllReduce.counts(400, 4, 1);
        (
            p,
            Layout::new(Collective::AllReduce, counts, Placement::OutOfPlace, 0),
        )
    }

    #[test]
    fn copies_that_depend_on_each_other_are_the_kernels() {
        let (send, recv, scratch) = (Slice::send, Slice::recv, Slice::scratch);
        // Through scratch and on: the second reads what the first writes.
        let (p, l) = by_hand(vec![vec![
            Step::copy(send(0), scratch(0), 10),
            Step::copy(scratch(0), recv(0), 10),
        ]]);
        assert_eq!(plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS), None);
        // Two channels writing the same elements.
        let (p, l) = by_hand(vec![
            vec![Step::copy(send(0), recv(0), 10)],
            vec![Step::copy(send(20), recv(5), 10)],
        ]);
        assert_eq!(plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS), None);
        // A copy onto itself shifted: it overlaps itself.
        let (p, l) = by_hand(vec![vec![Step::copy(scratch(0), scratch(4), 10)]]);
        assert_eq!(plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS), None);
        // Apart, and out of order: two copies, each merged where it continues.
        let (p, l) = by_hand(vec![
            vec![Step::copy(send(50), recv(0), 10)],
            vec![Step::copy(send(0), recv(50), 10)],
            vec![Step::copy(send(60), recv(10), 5)],
        ]);
        let got = plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS).expect("independent");
        assert_eq!(
            got,
            vec![
                DevCopy {
                    dst: BUFS[1] + 200,
                    src: BUFS[0],
                    bytes: 40
                },
                DevCopy {
                    dst: BUFS[1],
                    src: BUFS[0] + 200,
                    bytes: 60
                },
            ]
        );
        // A reduction, even local, is arithmetic.
        let (p, l) = by_hand(vec![vec![Step::local_reduce(send(0), recv(0), 10)]]);
        assert_eq!(plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS), None);
    }

    #[test]
    fn many_scattered_copies_are_one_kernel_launch() {
        let steps = (0..MAX_COPIES + 1)
            .map(|i| Step::copy(Slice::send(i * 10), Slice::recv(i * 10), 5))
            .collect();
        let (p, l) = by_hand(vec![steps]);
        assert_eq!(plan(&p, &l, Dtype::F32, ReduceOp::Sum, &BUFS), None);
    }
}
