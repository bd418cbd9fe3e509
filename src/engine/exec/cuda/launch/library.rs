//! `--engine nccl` on a CUDA world: NCCL's collectives on the ranks' own
//! buffers and streams (one rank per GPU), or, on the emulated device,
//! a stand-in that computes each collective on the host from every rank's
//! input (so the engine-pairing code runs in CI; its rows say
//! `nccl-standin`).

use super::{CudaWorld, Kind};
use crate::engine::elem;
use crate::engine::exec::cuda::nccl::{Comms, Nccl};
use crate::engine::exec::runner::{At, OpDesc};
use crate::engine::exec::world::ExecError;
use crate::engine::types::{Collective, Counts, Dtype, ReduceOp};
use std::sync::Mutex;

/// What runs a world's library operations.
pub(super) enum Library {
    Nccl(Comms),
    /// Every rank's input of the operation under way, by rank.
    StandIn(Mutex<Vec<Vec<u8>>>),
}

/// A library operation as a rank runs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct LibOp {
    pub(super) coll: Collective,
    pub(super) dtype: Dtype,
    pub(super) op: ReduceOp,
    /// premulsum's scalar as bits of `dtype`.
    pub(super) scalar: u64,
    pub(super) counts: Counts,
    pub(super) root: usize,
    pub(super) nranks: usize,
    pub(super) send: At,
    pub(super) recv: At,
}

impl LibOp {
    pub(super) fn coll(&self) -> Collective {
        self.coll
    }

    /// Whether NCCL must read this rank's input from a copy: grouped sends
    /// and receives on one buffer are not valid in NCCL (in-place
    /// all-to-all and send-recv).
    pub(super) fn needs_copy(&self) -> bool {
        self.send == self.recv
            && matches!(
                self.coll,
                Collective::AllToAll | Collective::AllToAllV | Collective::SendRecv
            )
    }

    /// Bytes of rank `rank`'s send view.
    pub(super) fn send_bytes(&self, rank: usize) -> usize {
        self.counts.send_of(rank) * self.dtype.size()
    }

    pub(super) fn new(op: &OpDesc) -> LibOp {
        let es = op.dtype.size();
        let at = |s| {
            let (b, o) = op.layout.resolve(s);
            (b, o * es)
        };
        LibOp {
            coll: op.coll,
            dtype: op.dtype,
            op: op.op,
            scalar: op.scalar,
            counts: op.counts,
            root: op.root,
            nranks: op.nranks,
            send: at(crate::engine::algo::Slice::send(0)),
            recv: at(crate::engine::algo::Slice::recv(0)),
        }
    }
}

/// The library of a world that runs `--engine nccl`: NCCL's communicators
/// (one rank per GPU) or, on the emulated device, the stand-in.
pub(super) fn open(world: &CudaWorld) -> Result<Library, ExecError> {
    let n = world.of_rank.len();
    if world.kind == Kind::Emu {
        return Ok(Library::StandIn(Mutex::new(vec![Vec::new(); n])));
    }
    let lib = Nccl::get().map_err(|e| ExecError::Setup(format!("--engine nccl: {e}")))?;
    if world.devices.len() < n {
        return Err(ExecError::Setup(format!(
            "--engine nccl needs one GPU per rank (NCCL refuses two ranks on one GPU): {n} ranks, {} GPU(s); lower --ranks to {}",
            world.devices.len(),
            world.devices.len()
        )));
    }
    let ordinals: Vec<i32> = world
        .of_rank
        .iter()
        .map(|&d| world.devices[d].desc().ordinal as i32)
        .collect();
    let comms = lib
        .comms(&ordinals)
        .map_err(|e| ExecError::Setup(format!("--engine nccl: {e}")))?;
    Ok(Library::Nccl(comms))
}

/// Bytes of staging a rank's library operations need (each that reads its
/// input from a copy, at [`stage_offsets`]).
pub(super) fn stage_bytes(libs: &[LibOp], rank: usize) -> usize {
    stage_offsets(libs, rank)
        .last()
        .map_or(0, |&(off, len)| off + len)
}

/// Where each operation's staged input goes in the staging region (offset,
/// bytes; 0 bytes: not staged), 256-byte aligned.
pub(super) fn stage_offsets(libs: &[LibOp], rank: usize) -> Vec<(usize, usize)> {
    let mut at = 0;
    libs.iter()
        .map(|l| {
            let len = if l.needs_copy() {
                l.send_bytes(rank)
            } else {
                0
            };
            let here = at;
            at = (at + len).div_ceil(256) * 256;
            (here, len)
        })
        .collect()
}

/// Rank `rank`'s output of `lib` from every rank's input (None: it gets none).
pub(super) fn output(lib: &LibOp, rank: usize, inputs: &[Vec<u8>]) -> Option<Vec<u8>> {
    let (es, b, n, root) = (lib.dtype.size(), lib.counts.block, lib.nranks, lib.root);
    let part = |q: usize, from: usize, len: usize| -> &[u8] {
        inputs[q].get(from * es..(from + len) * es).unwrap_or(&[])
    };
    let reduce = |from: usize, len: usize| {
        let mut out = vec![0u8; len * es];
        let parts: Vec<&[u8]> = (0..n).map(|q| part(q, from, len)).collect();
        if parts.iter().any(|p| p.len() != len * es) {
            return out;
        }
        let ptrs: Vec<*const u8> = parts.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: every input holds `len` elements (checked above) and `out`
        // is a separate buffer of the same size.
        unsafe {
            if let (ReduceOp::PreMulSum, Some((first, rest))) = (lib.op, ptrs.split_first()) {
                // Every input scaled, then summed: the first one scaled
                // into `out`, each next one scaled and added.
                elem::reduce_premul(lib.dtype, lib.scalar, out.as_mut_ptr(), &[*first], len);
                let mut scaled = vec![0u8; len * es];
                for &p in rest {
                    elem::reduce_premul(lib.dtype, lib.scalar, scaled.as_mut_ptr(), &[p], len);
                    let o = out.as_mut_ptr();
                    elem::reduce(lib.dtype, ReduceOp::Sum, o, &[o, scaled.as_ptr()], len);
                }
            } else {
                elem::reduce(lib.dtype, lib.op, out.as_mut_ptr(), &ptrs, len);
            }
            elem::finish(lib.dtype, lib.op, n, out.as_mut_ptr(), len);
        }
        out
    };
    let gather = |from: usize| (0..n).flat_map(|q| part(q, from, b).to_vec()).collect();
    match lib.coll {
        Collective::AllReduce => Some(reduce(0, lib.counts.recv)),
        Collective::ReduceScatter => Some(reduce(rank * b, b)),
        Collective::Reduce => (rank == root).then(|| reduce(0, lib.counts.recv)),
        Collective::AllGather => Some(gather(0)),
        Collective::Gather => (rank == root).then(|| gather(0)),
        Collective::AllToAll => Some(gather(rank * b)),
        Collective::Broadcast => Some(part(root, 0, lib.counts.recv).to_vec()),
        Collective::Scatter => Some(part(root, rank * b, b).to_vec()),
        Collective::SendRecv => {
            let from = crate::engine::types::send_recv_peers(rank, n, root).1;
            Some(part(from, 0, lib.counts.recv).to_vec())
        }
        Collective::AllGatherV => Some(
            lib.counts
                .blocks(n)
                .into_iter()
                .enumerate()
                .flat_map(|(q, (_, len))| part(q, 0, len).to_vec())
                .collect(),
        ),
        Collective::ReduceScatterV => {
            let (off, len) = lib.counts.blocks(n)[rank];
            Some(reduce(off, len))
        }
        Collective::AllToAllV => Some(
            lib.counts
                .recvs(rank, n)
                .into_iter()
                .enumerate()
                .flat_map(|(q, (_, len))| part(q, lib.counts.sends(q, n)[rank].0, len).to_vec())
                .collect(),
        ),
    }
}
