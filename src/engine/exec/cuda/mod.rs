//! The CUDA executor's host side. So far: NVRTC loaded at run time
//! ([`nvrtc`]) and the kernels compiled and cached per variant
//! ([`kernels`]). Launches come with the CUDA engine.

pub mod kernels;
pub mod nvrtc;

pub use kernels::{Arch, ArchError, Cache, Report, Variant};
pub use nvrtc::{CompileError, LoadError, Nvrtc, Ptx};

/// The architecture of the GPU this process would run on, when one is
/// usable. GPU detection plugs in here when the CUDA engine lands (the
/// driver's compute capability of the chosen device); until then there is
/// no GPU code, so none is found.
pub fn detect_gpu_arch() -> Option<Arch> {
    None
}
