//! The collective kernel (`kernels/collective.cu`) compiled for the host and
//! run with every block of every rank as a thread: the step programs of every
//! collective and algorithm, both protocols, both placements, checked bit for
//! bit with `check::verify`. This proves the kernel's program walk, its FIFO
//! protocols and its element arithmetic without a GPU; the GPU run checks
//! the memory ordering the emulation cannot.
//!
//! Needs a host C++ compiler (`c++`); without one the test says so and
//! passes, unless COLLBENCH_REQUIRE_CXX=1.

use collbench::check::{fill_input, poison, verify, Rule};
use collbench::engine::algo::{generate, Layout, Spec};
use collbench::engine::exec::cuda::abi::{as_bytes, ConnArena, ConnShape, Proto, RankTables};
use collbench::engine::{Algo, Collective, Dtype, Placement, ReduceOp};
use std::path::{Path, PathBuf};
use std::process::Command;

mod emu;

struct Case {
    coll: Collective,
    algo: Algo,
    n: usize,
    placement: Placement,
    dtype: Dtype,
    op: ReduceOp,
    count_bytes: u64,
    protos: Vec<Proto>,
}

const SHAPE: ConnShape = ConnShape {
    slots: 2,
    slot_bytes: 1024,
    ll_slot_bytes: 1024,
};

/// Runs one case through the emulated kernel; returns how many elements
/// were checked. Panics with the case on any wrong element.
fn run(exe: &Path, dir: &Path, c: &Case) -> Option<u64> {
    let esize = c.dtype.size();
    let counts = c.coll.counts(c.count_bytes, esize, c.n);
    let root = c.n - 1;
    let chunk = (SHAPE.ll_max_bytes().min(SHAPE.slot_bytes) / esize).max(1);
    let mut tables = Vec::new();
    let mut layouts = Vec::new();
    for rank in 0..c.n {
        let spec = Spec {
            coll: c.coll,
            algo: c.algo,
            nranks: c.n,
            rank,
            root,
            counts,
            placement: c.placement,
            channels: 2,
            chunk,
        };
        let Ok(program) = generate(&spec) else {
            return None;
        };
        let layout = Layout::new(c.coll, counts, c.placement, rank);
        tables.push(RankTables::new(&program, &layout, c.dtype).unwrap());
        layouts.push(layout);
    }
    let arena = ConnArena::new(SHAPE, &tables);
    let rule = Rule {
        seed: 7,
        dtype: c.dtype,
        op: c.op,
        nranks: c.n,
    };
    let mut req: Vec<u8> = Vec::new();
    let put32 = |req: &mut Vec<u8>, v: u32| req.extend_from_slice(&v.to_le_bytes());
    put32(&mut req, 0x4D45_4243);
    put32(&mut req, c.n as u32);
    put32(&mut req, c.protos.len() as u32);
    for p in &c.protos {
        put32(&mut req, *p as u32);
    }
    req.extend_from_slice(&(arena.bytes as u64).to_le_bytes());
    req.extend_from_slice(&(20_000_000_000u64).to_le_bytes());
    for (rank, (t, layout)) in tables.iter().zip(&layouts).enumerate() {
        let (ins, outs) = arena.conns(0, t, rank).unwrap();
        put32(&mut req, t.nchannels() as u32);
        put32(&mut req, t.steps.len() as u32);
        put32(&mut req, ins.len() as u32);
        put32(&mut req, outs.len() as u32);
        let bytes = [layout.buf0 * esize, layout.buf1 * esize, t.need[2].max(64)];
        for b in bytes {
            req.extend_from_slice(&(b as u64).to_le_bytes());
        }
        req.extend_from_slice(as_bytes(&t.steps));
        req.extend_from_slice(as_bytes(&t.chan_start));
        req.extend_from_slice(as_bytes(&ins));
        req.extend_from_slice(as_bytes(&outs));
        let mut bufs = [vec![0u8; bytes[0]], vec![0u8; bytes[1]]];
        for b in &mut bufs {
            poison(c.dtype, b);
        }
        let (sb, so) = layout.send_at;
        fill_input(
            &rule,
            rank,
            &mut bufs[sb][so * esize..(so + counts.send) * esize],
        );
        req.extend_from_slice(&bufs[0]);
        req.extend_from_slice(&bufs[1]);
    }
    let (rq, out) = (dir.join("req.bin"), dir.join("out.bin"));
    std::fs::write(&rq, &req).unwrap();
    let what = format!(
        "{} {} n={} {:?} {} {} {}B protos {:?}",
        c.coll.name(),
        c.algo.name(),
        c.n,
        c.placement,
        c.dtype.name(),
        c.op.name(),
        c.count_bytes,
        c.protos
    );
    let status = Command::new(exe).arg(&rq).arg(&out).status().unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert!(
        status.success(),
        "{what}: the emulated kernel stopped: {status} (status record {:?})",
        &bytes[..64.min(bytes.len())]
    );
    let mut at = 64;
    let mut checked = 0;
    for (rank, (t, layout)) in tables.iter().zip(&layouts).enumerate() {
        for ch in 0..t.nchannels() {
            let done = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let want = t.chan_start[ch + 1] - t.chan_start[ch];
            assert_eq!(
                done,
                u64::from(want),
                "{what}: rank {rank} channel {ch} progress"
            );
            at += 8;
        }
        let b0 = &bytes[at..at + layout.buf0 * esize];
        at += layout.buf0 * esize;
        let b1 = &bytes[at..at + layout.buf1 * esize];
        at += layout.buf1 * esize;
        let (rb, ro) = layout.recv_at;
        let buf = if rb == 0 { b0 } else { b1 };
        let recv = &buf[ro * esize..(ro + counts.recv) * esize];
        let v = verify(&rule, c.coll, counts, root, rank, recv);
        assert!(v.ok(), "{what}: rank {rank}: {v:?}");
        checked += v.checked;
    }
    Some(checked)
}

#[test]
fn every_collective_and_algorithm_runs_bit_exact_in_the_emulated_kernel() {
    let Some(cxx) = emu::compiler("kernels_emu_coll") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = emu::build(
        &cxx,
        dir.path(),
        "coll_driver.cpp",
        Dtype::F32,
        ReduceOp::Sum,
    )
    .unwrap();
    let mut ran = 0;
    let mut checked = 0;
    for coll in Collective::ALL {
        for algo in Algo::ALL {
            for n in [1, 2, 3, 5] {
                for placement in [Placement::OutOfPlace, Placement::InPlace] {
                    // 4000 B: 16-byte vectors; 3996 B: the scalar path.
                    for (count_bytes, protos) in [
                        (4000, vec![Proto::Simple, Proto::LowLatency]),
                        (3996, vec![Proto::LowLatency, Proto::Simple]),
                    ] {
                        let case = Case {
                            coll,
                            algo,
                            n,
                            placement,
                            dtype: Dtype::F32,
                            op: ReduceOp::Sum,
                            count_bytes,
                            protos,
                        };
                        if let Some(k) = run(&exe, dir.path(), &case) {
                            ran += 1;
                            checked += k;
                        }
                    }
                }
            }
        }
    }
    // 13 (collective, algorithm) pairs x 4 rank counts x 2 placements x 2 shapes.
    assert_eq!(ran, 13 * 4 * 2 * 2);
    assert!(checked > 100_000, "{checked}");
}

#[test]
fn every_dtype_and_operator_reduces_bit_exact_in_the_emulated_kernel() {
    let Some(cxx) = emu::compiler("kernels_emu_coll") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut variants: Vec<(Dtype, ReduceOp)> = Dtype::ALL
        .iter()
        .enumerate()
        .map(|(i, &d)| (d, ReduceOp::ALL[i % 5]))
        .collect();
    variants.extend(ReduceOp::ALL.iter().map(|&op| (Dtype::Bf16, op)));
    variants.extend(ReduceOp::ALL.iter().map(|&op| (Dtype::F8E4M3, op)));
    let exes: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = variants
            .iter()
            .map(|&(d, op)| {
                let (cxx, dir) = (&cxx, dir.path());
                s.spawn(move || emu::build(cxx, dir, "coll_driver.cpp", d, op).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (exe, &(dtype, op)) in exes.iter().zip(&variants) {
        for (coll, algo) in [
            (Collective::AllReduce, Algo::Ring),
            (Collective::AllReduce, Algo::Tree),
            (Collective::AllReduce, Algo::Direct),
            (Collective::ReduceScatter, Algo::Ring),
            (Collective::Reduce, Algo::Tree),
        ] {
            for n in [3, 4] {
                let case = Case {
                    coll,
                    algo,
                    n,
                    placement: Placement::OutOfPlace,
                    dtype,
                    op,
                    count_bytes: 6144,
                    protos: vec![Proto::LowLatency, Proto::Simple],
                };
                assert!(run(exe, dir.path(), &case).is_some());
            }
        }
    }
}
