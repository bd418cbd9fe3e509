//! collbench's CUDA kernels: the embedded sources (`sources`), one
//! variant per (element type, operator) with the NVRTC options of each
//! (`variants`), the cache key (`key`), a cache of what they compile to
//! (PTX, or cubins for the GPU at hand) in memory and on disk (`cache`),
//! and compiling them all (`compile`).
//!
//! The cache key is a stable hash (FNV-1a, 64 bits) of the source, the
//! options, the architecture and the NVRTC version, so a new source, flag,
//! target or compiler never reuses an old image. Disk entries are written to a
//! temporary file and renamed into place; a file that fails its checks is
//! compiled again; a cache folder that cannot be read or written costs a
//! warning (returned, never printed here), not the compile.

mod cache;
mod compile;
mod key;
mod sources;
mod variants;

pub use cache::{cache_dir_from, default_cache_dir, writable_without_making, Cache, Origin};
pub use compile::{compile_all, compile_variants, Report};
pub use key::{cache_key, Fnv1a};
pub use sources::{required_entry_points, source, ENTRY_POINTS, SOURCES};
pub use variants::{Arch, ArchError, Code, Variant, MIN_CC, TOO_OLD};

#[cfg(test)]
mod tests;
