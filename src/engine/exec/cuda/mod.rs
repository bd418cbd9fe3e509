//! The CUDA executor: step programs run by the kernels of `kernels/`.

pub mod abi;
pub mod device;
