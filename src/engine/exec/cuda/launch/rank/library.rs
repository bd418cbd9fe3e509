//! The rank's side of `--engine nccl`: NCCL's collective enqueued on the
//! rank's stream, or the emulated device's stand-in computed on the host.

use super::super::dev_err;
use super::super::library::{output, stage_offsets, LibOp, Library};
use super::{CudaRank, Pending};
use crate::engine::exec::cuda::nccl::{Call, Comms, Nccl};
use crate::engine::exec::runner::DeviceData;
use crate::engine::exec::world::ExecError;
use std::sync::Mutex;
use std::time::Instant;

impl CudaRank {
    /// Runs one stand-in operation (or a group's, one after another) to
    /// completion, timed by the host clock.
    pub(in crate::engine::exec::cuda::launch) fn stand_in_op(
        &mut self,
        libs: &[LibOp],
    ) -> Result<(), ExecError> {
        let world = std::sync::Arc::clone(&self.world);
        let Some(Library::StandIn(inputs)) = world.library.as_ref() else {
            return Err(ExecError::Setup("no NCCL stand-in in this world".into()));
        };
        let t = Instant::now();
        for &lib in libs {
            self.stand_in(inputs, lib)?;
        }
        self.pending
            .push(Pending::Done(t.elapsed().as_nanos() as u64));
        Ok(())
    }

    /// Enqueues NCCL's collectives on the rank's stream (also into a graph
    /// being captured): one, or a group's between ncclGroupStart and
    /// ncclGroupEnd (inputs that need a copy are copied first).
    pub(in crate::engine::exec::cuda::launch) fn enqueue_nccl(
        &mut self,
        comms: &Comms,
        libs: &[LibOp],
    ) -> Result<(), ExecError> {
        let nccl = Nccl::get().map_err(|e| ExecError::Setup(e.to_string()))?;
        let stream = self
            .dev
            .raw_stream(self.stream)
            .ok_or_else(|| ExecError::Setup("NCCL needs a real CUDA stream".into()))?;
        let offsets = stage_offsets(libs, self.rank);
        let mut calls = Vec::with_capacity(libs.len());
        for (&lib, &(at, len)) in libs.iter().zip(&offsets) {
            let dtype = nccl.dtype(lib.dtype).ok_or_else(|| {
                ExecError::Setup(format!(
                    "NCCL {} has no {} (fp8 needs NCCL 2.24 or later)",
                    nccl.version_string(),
                    lib.dtype.name()
                ))
            })?;
            let mut send = self.addr(lib.send)?;
            if len > 0 {
                // In stream order, inside the timed operation: the copy is
                // part of what an in-place exchange costs NCCL.
                let stage = self.stage.0 + at as u64;
                self.dev
                    .copy(self.stream, stage, send, len)
                    .map_err(dev_err)?;
                send = stage;
            }
            calls.push(Call {
                coll: lib.coll,
                dtype,
                op: comms
                    .op(self.rank, lib.op, dtype, lib.scalar)
                    .map_err(|e| ExecError::Setup(format!("NCCL: {e}")))?,
                counts: lib.counts,
                root: lib.root,
                nranks: lib.nranks,
                rank: self.rank,
                send,
                recv: self.addr(lib.recv)?,
                esize: lib.dtype.size(),
            });
        }
        comms
            .enqueue_all(&calls, stream)
            .map_err(|e| ExecError::Setup(format!("NCCL: {e}")))
    }

    /// The stand-in: every rank deposits its input, then writes its output
    /// computed on the host, between two barriers of the world.
    fn stand_in(&mut self, inputs: &Mutex<Vec<Vec<u8>>>, lib: LibOp) -> Result<(), ExecError> {
        self.dev.sync(self.stream).map_err(dev_err)?;
        let mine = self.read(lib.send, lib.send_bytes(self.rank))?;
        let poisoned = || ExecError::Setup("stand-in inputs poisoned".into());
        inputs.lock().map_err(|_| poisoned())?[self.rank] = mine;
        self.world.host.barrier(self.rank)?;
        let out = {
            let all = inputs.lock().map_err(|_| poisoned())?;
            output(&lib, self.rank, &all)
        };
        if let Some(out) = out {
            self.write(lib.recv, &out)?;
        }
        // Nobody deposits the next operation's input before all have read.
        self.world.host.barrier(self.rank)
    }
}
