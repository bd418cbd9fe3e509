//! The cache key: a stable hash (FNV-1a, 64 bits) of the source, the
//! options, the architecture and the NVRTC version.

use super::Arch;

/// 64-bit FNV-1a.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Fnv1a {
    pub fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) -> &mut Fnv1a {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Writes a field so that field boundaries count (length first).
    pub fn field(&mut self, bytes: &[u8]) -> &mut Fnv1a {
        self.write(&(bytes.len() as u64).to_le_bytes()).write(bytes)
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

/// Bumped when the cache file format changes.
pub(super) const CACHE_FORMAT: &str = "collbench-image/2";

/// The cache key of the image compiled from `source` with `options` for `arch` by
/// NVRTC `version`.
pub fn cache_key(source: &str, options: &[String], arch: Arch, version: (i32, i32)) -> u64 {
    let mut h = Fnv1a::new();
    h.field(CACHE_FORMAT.as_bytes())
        .field(format!("{}.{}", version.0, version.1).as_bytes())
        .field(arch.to_string().as_bytes())
        .write(&(options.len() as u64).to_le_bytes());
    for o in options {
        h.field(o.as_bytes());
    }
    h.field(source.as_bytes()).finish()
}
