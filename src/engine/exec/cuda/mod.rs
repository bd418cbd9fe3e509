//! The CUDA executor's host side: NVRTC loaded at run time ([`nvrtc`]), the
//! kernels compiled and cached per variant ([`kernels`]), the structs the
//! kernels read and the translation of step programs into them ([`abi`]),
//! and the GPUs the driver sees ([`device`]). Launching comes next.

pub mod abi;
pub mod dev;
pub mod device;
pub mod kernels;
pub mod launch;
pub mod nccl;
pub mod nvrtc;

pub use kernels::{Arch, ArchError, Cache, Report, Variant};
pub use nvrtc::{CompileError, Image, LoadError, Nvrtc};

/// The architecture of the first of the probed GPUs, if any.
pub fn gpu_arch(d: &device::Devices) -> Option<Arch> {
    d.devices.first()?.arch.parse().ok()
}
