//! The emulated devices' shape: `COLLBENCH_EMU_GPUS` (default 8),
//! `COLLBENCH_EMU_SMS` (multiprocessors, 64), `COLLBENCH_EMU_BLOCKS_PER_SM`
//! (what `occupancy` says for any kernel, 4), `COLLBENCH_EMU_MEM` (bytes
//! per device, a size as `--sizes` reads it, 16G), `COLLBENCH_EMU_QUEUES`
//! (the hardware queues a device has, as CUDA_DEVICE_MAX_CONNECTIONS says
//! on a GPU, 128) and `COLLBENCH_EMU_THREADS`
//! (the widest block, 1: each thread of a block is a host thread; 1, or a
//! multiple of 8 up to 1024, so LL128's groups of 8 and the block's barriers
//! run as on a GPU).

use crate::engine::exec::cuda::dev::DevError;
use std::ffi::OsString;

/// The emulated devices' shape, from `COLLBENCH_EMU_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmuConfig {
    pub gpus: usize,
    pub multiprocessors: u32,
    pub blocks_per_sm: u32,
    pub memory_bytes: u64,
    pub queues: u32,
    pub threads: u32,
}

impl EmuConfig {
    pub const DEFAULT: EmuConfig = EmuConfig {
        gpus: 8,
        multiprocessors: 64,
        blocks_per_sm: 4,
        memory_bytes: 16 << 30,
        queues: 128,
        threads: 1,
    };

    /// The configuration of this process's environment.
    pub fn from_env() -> Result<EmuConfig, DevError> {
        EmuConfig::from_lookup(|k| std::env::var_os(k))
    }

    /// The configuration from an environment lookup; a bad value is an
    /// error naming its variable.
    pub fn from_lookup(env: impl Fn(&str) -> Option<OsString>) -> Result<EmuConfig, DevError> {
        let get = |name: &str, default: u64, max: u64, size: bool| {
            // Unset or empty: the default, as every setting of collbench's.
            let Some(v) = env(name).filter(|v| !v.to_string_lossy().trim().is_empty()) else {
                return Ok(default);
            };
            let s = v.to_str().map(str::trim);
            // Why a size does not read (`63.2M` is no whole number of bytes).
            let why = match s.map(crate::units::parse_bytes) {
                Some(Err(e)) if size => format!(" ({e})"),
                _ => String::new(),
            };
            let n = s.and_then(|s| if size { parse_size(s) } else { s.parse().ok() });
            n.filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                let what = if size {
                    "a size in bytes such as 16G, 1.5G, 512M or 1048576".to_string()
                } else {
                    format!("a whole number from 1 to {max}")
                };
                DevError::new(
                    "emulated device",
                    format!("{name}={v:?}: expected {what}{why}"),
                )
            })
        };
        let d = EmuConfig::DEFAULT;
        Ok(EmuConfig {
            gpus: get("COLLBENCH_EMU_GPUS", d.gpus as u64, 4096, false)? as usize,
            multiprocessors: get("COLLBENCH_EMU_SMS", d.multiprocessors.into(), 65536, false)?
                as u32,
            blocks_per_sm: get(
                "COLLBENCH_EMU_BLOCKS_PER_SM",
                d.blocks_per_sm.into(),
                1024,
                false,
            )? as u32,
            memory_bytes: get("COLLBENCH_EMU_MEM", d.memory_bytes, u64::MAX, true)?,
            queues: get("COLLBENCH_EMU_QUEUES", d.queues.into(), 1024, false)? as u32,
            threads: match get("COLLBENCH_EMU_THREADS", d.threads.into(), 1024, false) {
                Ok(t) if t == 1 || t % 8 == 0 => t as u32,
                _ => {
                    let v = env("COLLBENCH_EMU_THREADS").unwrap_or_default();
                    return Err(DevError::new(
                        "emulated device",
                        format!("COLLBENCH_EMU_THREADS={v:?}: expected 1, or a multiple of 8 up to 1024 (LL128 moves lines in groups of 8 threads)"),
                    ));
                }
            },
        })
    }
}

/// A size as `--sizes` reads it (`16G`, `1.5G`, `512MiB`, `500MB`,
/// `1048576`).
pub fn parse_size(s: &str) -> Option<u64> {
    crate::units::parse_bytes(s).ok()
}
