//! The MPI world in a build without the `mpi` feature: the same names, and
//! no way to make one (the type has no values), so callers need no `cfg`.

use super::MpiError;
use crate::engine::exec::{ExecError, HostBuf, OpDesc};
use crate::engine::transport::node::{NodeLinks, ProcessPeers, Shape};
use crate::engine::types::{Collective, Dtype, ReduceOp};
use std::sync::Arc;
use std::time::Duration;

/// No MPI in this build: this type has no values.
pub enum Mpi {}

/// Always `None`: this build runs thread ranks only.
pub fn init() -> Result<Option<Mpi>, MpiError> {
    Ok(None)
}

impl Mpi {
    pub fn all_gather(&self, _mine: &[u8]) -> Result<Vec<Vec<u8>>, MpiError> {
        match *self {}
    }
    pub fn barrier(&self, _timeout: Duration, _abort: &dyn Fn() -> bool) -> Result<(), MpiError> {
        match *self {}
    }
    pub fn send(&self, _to: usize, _tag: i32, _bytes: &[u8]) {
        match *self {}
    }
    pub fn try_receive(&self, _tag: i32) -> Option<(usize, Vec<u8>)> {
        match *self {}
    }
    pub fn broadcast(&self, _bytes: &[u8]) -> Result<Vec<u8>, MpiError> {
        match *self {}
    }
    pub fn node_links(&self, _shape: Shape) -> Result<NodeLinks, MpiError> {
        match *self {}
    }
    pub fn rank(&self) -> usize {
        match *self {}
    }
    pub fn hosts(&self) -> &[String] {
        match *self {}
    }
    pub fn unsupported(&self, _coll: Collective, _dtype: Dtype, _op: ReduceOp) -> Option<String> {
        match *self {}
    }
    pub fn run_collective(
        &self,
        _op: &OpDesc,
        _bufs: &mut [HostBuf; 3],
        _timeout: Duration,
        _abort: &dyn Fn() -> bool,
    ) -> Result<(), ExecError> {
        match *self {}
    }
    pub fn size(&self) -> usize {
        match *self {}
    }
    pub fn peers(&self) -> Result<Arc<dyn ProcessPeers>, MpiError> {
        match *self {}
    }
}
