//! Every collective simulated naively from `fill_input` buffers, reduced in
//! several orders with `elem::reduce`, must verify clean on every rank; and
//! corrupted results (a flipped bit, a NaN, swapped blocks, a shift, another
//! rank's data, an unwritten element) must be caught where they are.

use super::*;
use crate::engine::elem;
use crate::engine::split::Split;
use crate::engine::{Collective, Counts, Dtype, ReduceOp};
use proptest::prelude::*;

/// Elements per block in the simulated cases: not a multiple of any chunk.
const BLOCK: usize = 37;

#[derive(Clone, Copy, Debug)]
enum Order {
    Forward,
    Reverse,
    /// Pairs, then pairs of pairs, each step writing over its first input.
    Tree,
}

struct Case {
    rule: Rule,
    coll: Collective,
    counts: Counts,
    root: usize,
    inputs: Vec<Vec<u8>>,
}

impl Case {
    fn new(coll: Collective, dtype: Dtype, op: ReduceOp, n: usize, root: usize) -> Case {
        Case::split(coll, dtype, op, n, root, Split::Uniform)
    }

    fn split(
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        n: usize,
        root: usize,
        split: Split,
    ) -> Case {
        let rule = Rule {
            seed: 0xC011_BE4C,
            dtype,
            op,
            nranks: n,
            scalar: crate::engine::elem::Scalar::parse("3")
                .and_then(|s| s.bits(dtype).ok())
                .unwrap_or(1),
        };
        let bytes = (BLOCK * n * dtype.size()) as u64;
        let counts = coll.counts_split(bytes, dtype.size(), n, split);
        let inputs = (0..n)
            .map(|q| {
                let mut buf = vec![0u8; counts.send_of(q) * dtype.size()];
                fill_input(&rule, q, &mut buf);
                buf
            })
            .collect();
        Case {
            rule,
            coll,
            counts,
            root,
            inputs,
        }
    }

    fn n(&self) -> usize {
        self.rule.nranks
    }

    fn bytes(&self, elems: usize) -> usize {
        elems * self.rule.dtype.size()
    }

    /// OP over every rank's elements `from..from + len`, then `finish`.
    fn reduce(&self, from: usize, len: usize, order: Order) -> Vec<u8> {
        let (dt, op) = (self.rule.dtype, self.rule.op);
        let range = self.bytes(from)..self.bytes(from + len);
        let mut parts: Vec<Vec<u8>> = self
            .inputs
            .iter()
            .map(|b| b[range.clone()].to_vec())
            .collect();
        match order {
            Order::Forward | Order::Reverse => {
                if let Order::Reverse = order {
                    parts.reverse();
                }
                let ptrs: Vec<*const u8> = parts.iter().map(|p| p.as_ptr()).collect();
                let mut out = vec![0u8; self.bytes(len)];
                if op == ReduceOp::PreMulSum {
                    // Each input scaled once, then summed.
                    for p in &ptrs {
                        let q = p.cast_mut();
                        // SAFETY: `p` holds `len` elements; dst is the input.
                        unsafe { elem::reduce_premul(dt, self.rule.scalar, q, &[*p], len) };
                    }
                }
                // SAFETY: every buffer holds `len` elements.
                unsafe { elem::reduce(dt, op, out.as_mut_ptr(), &ptrs, len) };
                parts = vec![out];
            }
            Order::Tree => {
                if op == ReduceOp::PreMulSum {
                    for p in &mut parts {
                        let q = p.as_mut_ptr();
                        // SAFETY: `p` holds `len` elements; dst is the input.
                        unsafe {
                            elem::reduce_premul(dt, self.rule.scalar, q, &[q as *const u8], len)
                        };
                    }
                }
                while parts.len() > 1 {
                    let mut next = Vec::new();
                    let mut it = parts.into_iter();
                    while let Some(mut a) = it.next() {
                        if let Some(b) = it.next() {
                            let p = a.as_mut_ptr();
                            // SAFETY: both hold `len` elements; dst is input 0.
                            unsafe { elem::reduce(dt, op, p, &[p as *const u8, b.as_ptr()], len) };
                        }
                        next.push(a);
                    }
                    parts = next;
                }
            }
        }
        let mut out = parts.pop().unwrap_or_default();
        // SAFETY: `out` holds `len` elements.
        unsafe { elem::finish(dt, op, self.n(), out.as_mut_ptr(), len) };
        out
    }

    /// What rank `r`'s receive buffer holds afterwards, per the semantics.
    fn recv(&self, r: usize, order: Order) -> Vec<u8> {
        let (n, b, root) = (self.n(), self.counts.block, self.root);
        let mut recv = vec![0u8; self.bytes(self.counts.recv_of(r))];
        poison(self.rule.dtype, &mut recv);
        let c = self.counts;
        let whole = self.counts.recv;
        let mut put = |at: usize, q: usize, from: usize, len: usize| {
            let (src, dst) = (self.bytes(from)..self.bytes(from + len), self.bytes(at));
            recv[dst..dst + src.len()].copy_from_slice(&self.inputs[q][src]);
        };
        match self.coll {
            Collective::AllGather => (0..n).for_each(|q| put(q * b, q, 0, b)),
            Collective::Gather if r == root => (0..n).for_each(|q| put(q * b, q, 0, b)),
            Collective::AllToAll => (0..n).for_each(|q| put(q * b, q, r * b, b)),
            Collective::Broadcast => put(0, root, 0, whole),
            Collective::Scatter => put(0, root, r * b, b),
            Collective::SendRecv => put(
                0,
                crate::engine::types::send_recv_peers(r, n, root).1,
                0,
                whole,
            ),
            Collective::AllReduce => return self.reduce(0, whole, order),
            Collective::ReduceScatter => return self.reduce(r * b, b, order),
            Collective::Reduce if r == root => return self.reduce(0, whole, order),
            Collective::Reduce | Collective::Gather => {}
            // The v forms, from the split's counts written out here.
            Collective::AllGatherV => {
                let row = c.v.map(|v| v.row(0)).unwrap_or_default();
                let mut at = 0;
                for (q, &len) in row.iter().enumerate() {
                    put(at, q, 0, len);
                    at += len;
                }
            }
            Collective::AllToAllV => {
                let m = c.v.map(|v| v.matrix()).unwrap_or_default();
                let mut at = 0;
                for (q, row) in m.iter().enumerate() {
                    let from: usize = row[..r].iter().sum();
                    put(at, q, from, row[r]);
                    at += row[r];
                }
            }
            Collective::ReduceScatterV => {
                let row = c.v.map(|v| v.row(0)).unwrap_or_default();
                let from: usize = row[..r].iter().sum();
                return self.reduce(from, row[r], order);
            }
        }
        recv
    }

    fn verify(&self, rank: usize, recv: &[u8]) -> Verdict {
        verify(&self.rule, self.coll, self.counts, self.root, rank, recv)
    }

    fn checks_rank(&self, r: usize) -> bool {
        !matches!(self.coll, Collective::Reduce | Collective::Gather) || r == self.root
    }
}

#[test]
fn every_collective_verifies_clean_in_every_order() {
    for coll in Collective::ALL {
        for dtype in Dtype::ALL {
            for op in ReduceOp::ALL {
                for n in [1, 2, 3, 5, 8] {
                    let mut roots = vec![0, n - 1];
                    roots.dedup();
                    for root in roots {
                        let case = Case::new(coll, dtype, op, n, root);
                        for r in 0..n {
                            for order in [Order::Forward, Order::Reverse, Order::Tree] {
                                let v = case.verify(r, &case.recv(r, order));
                                let what = format!(
                                    "{coll} {dtype} {op} n={n} root={root} rank={r} {order:?}"
                                );
                                assert!(v.ok() && v.nan == 0, "{what}: {v:?}");
                                let want = if case.checks_rank(r) {
                                    case.counts.recv
                                } else {
                                    0
                                };
                                assert_eq!(v.checked, want as u64, "{what}");
                                if !coll.reduces() {
                                    break; // one order is all there is
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_v_collective_verifies_clean_and_catches_a_wrong_element() {
    for coll in Collective::V {
        for dtype in [Dtype::I32, Dtype::F16, Dtype::F64] {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                for n in [1, 2, 3, 5, 8] {
                    for split in [Split::Uniform, Split::Skew(9), Split::Hot(n - 1)] {
                        let case = Case::split(coll, dtype, op, n, 0, split);
                        for r in 0..n {
                            let what = format!("{coll} {dtype} {op} n={n} {split} rank={r}");
                            let good = case.recv(r, Order::Forward);
                            let v = case.verify(r, &good);
                            assert!(v.ok() && v.nan == 0, "{what}: {v:?}");
                            assert_eq!(v.checked, case.counts.recv_of(r) as u64, "{what}");
                            if good.is_empty() {
                                continue;
                            }
                            let mut bad = good.clone();
                            let k = case.counts.recv_of(r) - 1;
                            let bits = get(&case, &bad, k);
                            set(&case, &mut bad, k, bits ^ 1);
                            let v = case.verify(r, &bad);
                            assert_eq!(v.wrong, 1, "{what}: {v:?}");
                            assert_eq!(v.first.map(|f| f.index), Some(k), "{what}");
                        }
                    }
                }
            }
        }
    }
}

/// A correct receive buffer of the rank that checks most in `case`.
fn good(case: &Case) -> (usize, Vec<u8>) {
    let r = if case.coll.rooted() { case.root } else { 1 };
    (r, case.recv(r, Order::Forward))
}

fn set(case: &Case, buf: &mut [u8], index: usize, bits: u64) {
    let s = case.rule.dtype.size();
    buf[index * s..(index + 1) * s].copy_from_slice(&bits.to_le_bytes()[..s]);
}

fn get(case: &Case, buf: &[u8], index: usize) -> u64 {
    let s = case.rule.dtype.size();
    let mut raw = [0u8; 8];
    raw[..s].copy_from_slice(&buf[index * s..(index + 1) * s]);
    u64::from_le_bytes(raw)
}

/// The quiet NaN of a float type (not its poison pattern).
fn quiet_nan(dt: Dtype) -> u64 {
    match dt {
        Dtype::F16 => 0x7E00,
        Dtype::Bf16 => 0x7FC0,
        Dtype::F32 => 0x7FC0_0000,
        Dtype::F64 => 0x7FF8_0000_0000_0000,
        Dtype::F8E4M3 | Dtype::F8E5M2 => 0x7F,
        _ => unreachable!("not a float"),
    }
}

fn each_corruptible_case(mut f: impl FnMut(&Case, &str)) {
    for coll in Collective::ALL {
        for dtype in Dtype::ALL {
            for op in ReduceOp::ALL {
                for n in [2, 3, 5, 8] {
                    let case = Case::new(coll, dtype, op, n, 1);
                    f(&case, &format!("{coll} {dtype} {op} n={n}"));
                }
            }
        }
    }
}

#[test]
fn a_flipped_bit_is_caught_where_it_is() {
    each_corruptible_case(|case, what| {
        let (r, mut recv) = good(case);
        let at = case.counts.recv / 2 + 1;
        let bit = 8 * case.rule.dtype.size() - 2; // high: far beyond 2 ULP
        let flipped = get(case, &recv, at) ^ 1 << bit;
        set(case, &mut recv, at, flipped);
        let v = case.verify(r, &recv);
        assert_eq!(v.wrong, 1, "{what}");
        let first = v.first.expect("a bad element");
        assert_eq!((first.rank, first.index), (r, at), "{what}");
        assert_ne!(first.expected, first.got, "{what}");
    });
}

#[test]
fn a_nan_is_counted_and_located() {
    each_corruptible_case(|case, what| {
        if !case.rule.dtype.is_float() {
            return;
        }
        let (r, mut recv) = good(case);
        let at = 3;
        set(case, &mut recv, at, quiet_nan(case.rule.dtype));
        let v = case.verify(r, &recv);
        assert_eq!((v.wrong, v.nan), (1, 1), "{what}");
        assert_eq!(v.first.map(|b| b.index), Some(at), "{what}");
    });
}

#[test]
fn swapped_blocks_and_shifted_elements_are_caught() {
    each_corruptible_case(|case, what| {
        let (r, recv) = good(case);
        let b = case.bytes(case.counts.block);
        if matches!(
            case.coll,
            Collective::AllGather | Collective::AllToAll | Collective::Gather
        ) {
            let mut swapped = recv.clone();
            swapped[..b].copy_from_slice(&recv[b..2 * b]);
            swapped[b..2 * b].copy_from_slice(&recv[..b]);
            let v = case.verify(r, &swapped);
            assert!(v.wrong > 0, "swap: {what}");
            assert!(
                v.first.is_some_and(|e| e.index < 2 * case.counts.block),
                "{what}"
            );
        }
        let mut shifted = recv.clone();
        shifted.rotate_left(case.bytes(1));
        assert!(case.verify(r, &shifted).wrong > 0, "shift: {what}");
    });
}

#[test]
fn another_ranks_result_is_caught() {
    each_corruptible_case(|case, what| {
        let rank_dependent = matches!(
            case.coll,
            Collective::ReduceScatter
                | Collective::AllToAll
                | Collective::Scatter
                | Collective::SendRecv
        );
        if rank_dependent {
            let (r, recv) = good(case);
            let other = (r + 1) % case.n();
            assert!(case.verify(other, &recv).wrong > 0, "{what}");
        }
    });
}

#[test]
fn an_unwritten_element_or_a_short_buffer_is_caught() {
    each_corruptible_case(|case, what| {
        let (r, mut recv) = good(case);
        let poison_bits = {
            let mut p = vec![0u8; case.bytes(1)];
            poison(case.rule.dtype, &mut p);
            get(case, &p, 0)
        };
        let at = case.counts.recv - 1;
        if get(case, &recv, at) != poison_bits {
            set(case, &mut recv, at, poison_bits);
            let v = case.verify(r, &recv);
            let nan = u64::from(case.rule.dtype.is_float());
            assert_eq!((v.wrong, v.nan), (1, nan), "{what}");
            let first = v.first.expect("a bad element");
            assert!(first.got.contains("poison"), "{what}: {}", first.got);
        }
        let short = &recv[..recv.len() - case.bytes(2)];
        let v = case.verify(r, short);
        assert!(
            v.wrong >= 2 && v.checked == (case.counts.recv - 2) as u64,
            "{what}"
        );
    });
}

#[test]
fn a_nan_input_shows_in_the_reduction() {
    for dtype in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        for op in ReduceOp::ALL {
            let mut case = Case::new(Collective::AllReduce, dtype, op, 4, 0);
            let s = dtype.size();
            let nan = quiet_nan(dtype).to_le_bytes();
            case.inputs[2][5 * s..6 * s].copy_from_slice(&nan[..s]);
            let v = case.verify(0, &case.recv(0, Order::Tree));
            assert_eq!((v.wrong, v.nan), (1, 1), "{dtype} {op}");
            assert_eq!(v.first.map(|b| b.index), Some(5));
        }
    }
}

/// Reduces `bufs` by merging random neighbours of a random permutation:
/// any association, any order.
fn reduce_shuffled(
    dt: Dtype,
    op: ReduceOp,
    mut bufs: Vec<Vec<u8>>,
    len: usize,
    mut s: u64,
) -> Vec<u8> {
    let mut next = move |bound: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % bound as u64) as usize
    };
    for i in (1..bufs.len()).rev() {
        let j = next(i + 1);
        bufs.swap(i, j);
    }
    while bufs.len() > 1 {
        let k = next(bufs.len() - 1);
        let b = bufs.remove(k + 1);
        let p = bufs[k].as_mut_ptr();
        // SAFETY: both hold `len` elements; dst is input 0.
        unsafe { elem::reduce(dt, op, p, &[p as *const u8, b.as_ptr()], len) };
    }
    bufs.pop().unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Up to thousands of ranks, any reduction order gives the bits `verify`
    /// expects.
    #[test]
    fn any_order_of_any_rank_count_is_exact(
        seed in any::<u64>(),
        n in 1usize..2500,
        dtype in prop::sample::select(Dtype::ALL.to_vec()),
        op in prop::sample::select(ReduceOp::ALL.to_vec()),
        scalar in prop::sample::select(vec!["1", "2", "-3", "0.5", "0.1", "-0.75", "1e-3", "7", "1000"]),
        order in any::<u64>(),
    ) {
        let len = 8;
        let scalar = crate::engine::elem::Scalar::parse(scalar).unwrap();
        let Ok(scalar) = scalar.bits(dtype) else {
            // A fraction for an integer type: refused before a run.
            return Ok(());
        };
        if op == ReduceOp::PreMulSum && super::data::premul_refusal(dtype, scalar).is_some() {
            return Ok(());
        }
        let rule = Rule { seed, dtype, op, nranks: n, scalar };
        let bufs = (0..n)
            .map(|q| {
                let mut b = vec![0u8; len * dtype.size()];
                fill_input(&rule, q, &mut b);
                if op == ReduceOp::PreMulSum {
                    let p = b.as_mut_ptr();
                    // SAFETY: `b` holds `len` elements; dst is the input.
                    unsafe { elem::reduce_premul(dtype, scalar, p, &[p as *const u8], len) };
                }
                b
            })
            .collect();
        let mut out = reduce_shuffled(dtype, op, bufs, len, order | 1);
        // SAFETY: `out` holds `len` elements.
        unsafe { elem::finish(dtype, op, n, out.as_mut_ptr(), len) };
        let counts = Counts {
            send: len,
            recv: len,
            block: len,
            v: None,
        };
        let v = verify(&rule, Collective::AllReduce, counts, 0, 0, &out);
        prop_assert!(v.ok(), "{:?}", v);
    }
}

/// `cargo test --release --lib check::tests::throughput -- --ignored --nocapture`
#[test]
#[ignore = "a timing run, not a check"]
fn throughput() {
    use std::time::Instant;
    let (n, count) = (8, 4 << 20);
    let best = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e9 / count as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    for (dtype, op) in [
        (Dtype::F32, ReduceOp::Sum),
        (Dtype::F32, ReduceOp::Avg),
        (Dtype::Bf16, ReduceOp::Sum),
        (Dtype::I32, ReduceOp::Sum),
        (Dtype::F64, ReduceOp::Max),
        (Dtype::F8E4M3, ReduceOp::Prod),
    ] {
        let rule = Rule {
            seed: 1,
            dtype,
            op,
            nranks: n,
            scalar: 1,
        };
        let bytes = count * dtype.size();
        let inputs: Vec<Vec<u8>> = (0..n)
            .map(|q| {
                let mut buf = vec![0u8; bytes];
                fill_input(&rule, q, &mut buf);
                buf
            })
            .collect();
        let mut buf = inputs[0].clone();
        let fill = best(&mut || fill_input(&rule, 3, &mut buf));
        let ptrs: Vec<*const u8> = inputs.iter().map(|b| b.as_ptr()).collect();
        // SAFETY: every buffer holds `count` elements.
        unsafe {
            elem::reduce(dtype, op, buf.as_mut_ptr(), &ptrs, count);
            elem::finish(dtype, op, n, buf.as_mut_ptr(), count);
        }
        let counts = Counts {
            send: count,
            recv: count,
            block: count,
            v: None,
        };
        let all_reduce = best(&mut || {
            assert!(verify(&rule, Collective::AllReduce, counts, 0, 3, &buf).ok());
        });
        let counts = Collective::AllGather.counts(bytes as u64, dtype.size(), n);
        let b = counts.block * dtype.size();
        for (q, input) in inputs.iter().enumerate() {
            buf[q * b..(q + 1) * b].copy_from_slice(&input[..b]);
        }
        let all_gather = best(&mut || {
            assert!(verify(&rule, Collective::AllGather, counts, 0, 3, &buf).ok());
        });
        let gbs = |ns: f64| dtype.size() as f64 / ns;
        println!(
            "{dtype:>8} {op} n={n}: fill {fill:.1} ns/elem ({:.2} GB/s), verify all-reduce {all_reduce:.1} ns ({:.2} GB/s), all-gather {all_gather:.1} ns ({:.2} GB/s)",
            gbs(fill),
            gbs(all_reduce),
            gbs(all_gather)
        );
    }
}
