//! The MPI world in a build without the `mpi` feature: the same names, and
//! no way to make one (the type has no values), so callers need no `cfg`.

use crate::engine::algo::Layout;
use crate::engine::exec::{ExecError, HostBuf};
use crate::engine::transport::node::{NodeLinks, Shape};
use crate::engine::types::{Collective, Counts, Dtype, ReduceOp};
use std::time::Duration;

/// No MPI in this build: this type has no values.
pub enum Mpi {}

/// Always `None`: this build runs thread ranks only.
pub fn init() -> Result<Option<Mpi>, String> {
    Ok(None)
}

impl Mpi {
    pub fn all_gather(&self, _mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        match *self {}
    }
    pub fn barrier(&self, _timeout: Duration, _abort: &dyn Fn() -> bool) -> Result<(), String> {
        match *self {}
    }
    pub fn send(&self, _to: usize, _tag: i32, _bytes: &[u8]) {
        match *self {}
    }
    pub fn try_receive(&self, _tag: i32) -> Option<(usize, Vec<u8>)> {
        match *self {}
    }
    pub fn broadcast(&self, _bytes: &[u8]) -> Result<Vec<u8>, String> {
        match *self {}
    }
    pub fn node_links(&self, _shape: Shape) -> Result<NodeLinks, String> {
        match *self {}
    }
    pub fn rank(&self) -> usize {
        match *self {}
    }
    pub fn unsupported(&self, _coll: Collective, _dtype: Dtype, _op: ReduceOp) -> Option<String> {
        match *self {}
    }
    #[allow(clippy::too_many_arguments)]
    pub fn run_collective(
        &self,
        _coll: Collective,
        _dtype: Dtype,
        _op: ReduceOp,
        _counts: Counts,
        _root: usize,
        _layout: &Layout,
        _bufs: &mut [HostBuf; 3],
        _timeout: Duration,
        _abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        match *self {}
    }
    pub fn size(&self) -> usize {
        match *self {}
    }
}
