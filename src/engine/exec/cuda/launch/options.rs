//! What a CUDA world is asked to be: the device kind, how operations are
//! timed, the connections' shape, and the executor's knobs from the
//! environment (validated once, named when bad).

use super::super::abi::{ConnShape, Proto};
use std::time::Duration;

/// Which device implementation a world runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cuda,
    Emu,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cuda => "cuda",
            Kind::Emu => "cuda-emu",
        }
    }
}

/// How operations are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// CUDA events around every operation on the rank's stream.
    Events,
    /// The host clock from the first launch to the end of the wait
    /// (nccl-tests' method), shared evenly between the operations.
    Wall,
}

/// Tunables of the CUDA executor.
#[derive(Clone, Copy, Debug)]
pub struct CudaOptions {
    pub shape: ConnShape,
    /// Threads per block of the collective kernel (the most: see `narrow`).
    pub threads: u32,
    /// Operations of the line protocols with few lines launch narrower
    /// blocks (not when `COLLBENCH_CUDA_THREADS` fixes the width).
    pub narrow: bool,
    pub timeout: Duration,
    pub timing: Timing,
    /// The protocol of every operation (None: low-latency for steps that
    /// fit its slots, simple otherwise).
    pub proto: Option<Proto>,
    /// Programs that only copy within a rank run in the kernel too
    /// (`COLLBENCH_CUDA_COPIES=kernel`), not as the device's copies.
    pub kernel_copies: bool,
    /// Connections between GPUs go through pinned host memory even where
    /// the GPUs reach each other peer-to-peer (`COLLBENCH_CUDA_P2P=off`).
    pub no_p2p: bool,
    /// Channels per rank the sweep asks for (`--channels`; 0: auto), for
    /// the connection memory a rank may hold.
    pub channels: usize,
    /// The most ranks one rank hears from on a channel over the sweep's
    /// programs (None: unknown, taken as every other rank).
    pub peers: Option<usize>,
    /// The message count connections of one process start from
    /// (`COLLBENCH_CUDA_SEQ_START`; 0 but in tests).
    pub seq_start: u64,
}

/// A GPU's default connection slot (`--slot-size`): the largest step.
/// Four slots make a 4 MiB connection, as NCCL's default buffer; at 1 GiB
/// on 8 virtual ranks of an H200 the ring all-reduce ran 1.17x faster
/// than with 256 KiB slots (fewer hand-offs per byte).
pub const GPU_SLOT_BYTES: usize = 1 << 20;

/// The emulated device's default slot, the host engine's: its memory is
/// the host's, and its tests and sweeps are small.
pub const EMU_SLOT_BYTES: usize = crate::engine::exec::world::HOST_SLOT_BYTES;

/// The most payload an LL128 slot carries, whatever the simple slot.
pub const LL128_MAX_PAYLOAD: usize = 256 << 10;

impl CudaOptions {
    /// The defaults for `kind`, with simple-protocol slots of `slot_bytes`
    /// (None: `GPU_SLOT_BYTES` on a GPU, `EMU_SLOT_BYTES` on the emulated
    /// device) and the environment's `knobs`.
    pub fn new(
        kind: Kind,
        slot_bytes: Option<usize>,
        timeout: Duration,
        timing: Timing,
        knobs: EnvKnobs,
    ) -> CudaOptions {
        let slot_bytes = slot_bytes.unwrap_or(match kind {
            Kind::Cuda => GPU_SLOT_BYTES,
            Kind::Emu => EMU_SLOT_BYTES,
        });
        let slot_bytes = slot_bytes.next_multiple_of(16).max(64);
        let fixed = match kind {
            Kind::Cuda => knobs.threads,
            Kind::Emu => None,
        };
        tracing::debug!(?knobs, "CUDA executor knobs from the environment");
        CudaOptions {
            shape: ConnShape {
                slots: 4,
                slot_bytes,
                // Half of a line is payload: the same payload as a simple slot, at most 16 KiB.
                ll_slot_bytes: (2 * slot_bytes).min(32 << 10),
                // The same payload as a simple slot, at most LL128_MAX_PAYLOAD:
                // auto runs LL128 only for operations of up to 1 MiB.
                ll128_slot_bytes: ConnShape::ll128_for(slot_bytes.min(LL128_MAX_PAYLOAD)),
            },
            threads: match (kind, fixed) {
                (Kind::Cuda, Some(t)) => t,
                (Kind::Cuda, None) => 512,
                (Kind::Emu, _) => 1,
            },
            narrow: fixed.is_none(),
            timeout,
            timing,
            proto: None,
            kernel_copies: knobs.kernel_copies,
            no_p2p: knobs.no_p2p,
            channels: 0,
            peers: None,
            seq_start: knobs.seq_start,
        }
    }
}

/// The CUDA executor's tuning knobs in the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvKnobs {
    /// `COLLBENCH_CUDA_THREADS`: threads per block of the collective
    /// kernel, fixed for every operation (a multiple of 32 from 32 to 1024).
    pub threads: Option<u32>,
    /// `COLLBENCH_CUDA_COPIES=kernel`: a program that only copies within
    /// the rank runs in the collective kernel like any other (to measure the
    /// kernel's copy); `driver` (the default): as the device's copies.
    pub kernel_copies: bool,
    /// `COLLBENCH_CUDA_P2P=off`: connections between GPUs of one process
    /// through pinned host memory, as where peer access is impossible;
    /// `auto` (the default): peer-to-peer where the GPUs allow it.
    pub no_p2p: bool,
    /// `COLLBENCH_CUDA_SEQ_START`: the message count every connection
    /// within a process starts from, below 2^63 (a test: near 2^32, the
    /// low-latency protocol's 32-bit flags wrap within a few messages).
    pub seq_start: u64,
}

impl EnvKnobs {
    /// The knobs of this process's environment; a bad value is an error
    /// naming its variable and what it takes (an empty one is unset).
    pub fn from_env() -> Result<EnvKnobs, String> {
        EnvKnobs::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(env: impl Fn(&str) -> Option<String>) -> Result<EnvKnobs, String> {
        let get = |k: &str| {
            env(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let threads = match get("COLLBENCH_CUDA_THREADS") {
            None => None,
            Some(v) => Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|t| (32..=1024).contains(t) && t % 32 == 0)
                    .ok_or_else(|| {
                        format!("COLLBENCH_CUDA_THREADS={v:?}: expected threads per block, a multiple of 32 from 32 to 1024")
                    })?,
            ),
        };
        let kernel_copies = match get("COLLBENCH_CUDA_COPIES") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("kernel") => true,
            Some(v) if v.eq_ignore_ascii_case("driver") => false,
            Some(v) => {
                return Err(format!(
                    "COLLBENCH_CUDA_COPIES={v:?}: expected kernel or driver (who runs a program that only copies within its rank)"
                ))
            }
        };
        let no_p2p = match get("COLLBENCH_CUDA_P2P") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("auto") => false,
            Some(v) if v.eq_ignore_ascii_case("off") => true,
            Some(v) => {
                return Err(format!(
                    "COLLBENCH_CUDA_P2P={v:?}: expected auto or off (whether connections between GPUs go peer-to-peer where the GPUs allow it)"
                ))
            }
        };
        let seq_start = match get("COLLBENCH_CUDA_SEQ_START") {
            None => 0,
            Some(v) => v.parse::<u64>().ok().filter(|&n| n < 1 << 63).ok_or_else(|| {
                format!("COLLBENCH_CUDA_SEQ_START={v:?}: expected a message count below 2^63 (where every connection's count starts)")
            })?,
        };
        Ok(EnvKnobs {
            threads,
            kernel_copies,
            no_p2p,
            seq_start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_default_by_device_and_ll128_keeps_its_payload() {
        let opts = |kind, slot| {
            CudaOptions::new(
                kind,
                slot,
                Duration::from_secs(1),
                Timing::Events,
                EnvKnobs::default(),
            )
            .shape
        };
        let gpu = opts(Kind::Cuda, None);
        assert_eq!(gpu.slot_bytes, 1 << 20);
        // LL128 carries at most 256 KiB a slot, as with 256 KiB slots.
        assert_eq!(
            gpu.ll128_max_bytes(),
            opts(Kind::Cuda, Some(256 << 10)).ll128_max_bytes()
        );
        assert!(gpu.ll128_max_bytes() >= 256 << 10 && gpu.ll128_max_bytes() < 1 << 20);
        assert_eq!(opts(Kind::Emu, None).slot_bytes, 256 << 10);
        // Asked for, a slot is what was asked (rounded to 16 bytes), and
        // a small one's LL128 payload is the same.
        let small = opts(Kind::Cuda, Some(1000));
        assert_eq!(small.slot_bytes, 1008);
        assert!(small.ll128_max_bytes() >= 1008 && small.ll128_max_bytes() < 1008 + 120);
        assert_eq!(opts(Kind::Emu, Some(4 << 20)).slot_bytes, 4 << 20);
    }

    fn knobs(vars: &[(&str, &str)]) -> Result<EnvKnobs, String> {
        EnvKnobs::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_environments_knobs_are_read_and_a_bad_one_is_named() {
        assert_eq!(knobs(&[]), Ok(EnvKnobs::default()));
        let k = knobs(&[
            ("COLLBENCH_CUDA_THREADS", " 256 "),
            ("COLLBENCH_CUDA_COPIES", "Kernel"),
        ]);
        assert_eq!(
            k,
            Ok(EnvKnobs {
                threads: Some(256),
                kernel_copies: true,
                no_p2p: false,
                seq_start: 0,
            })
        );
        let empty = [
            ("COLLBENCH_CUDA_THREADS", ""),
            ("COLLBENCH_CUDA_COPIES", " "),
        ];
        assert_eq!(knobs(&empty), Ok(EnvKnobs::default()));
        assert_eq!(
            knobs(&[
                ("COLLBENCH_CUDA_COPIES", "driver"),
                ("COLLBENCH_CUDA_P2P", "Auto")
            ]),
            Ok(EnvKnobs::default())
        );
        assert_eq!(
            knobs(&[("COLLBENCH_CUDA_P2P", "off")]).map(|k| k.no_p2p),
            Ok(true)
        );
        assert_eq!(
            knobs(&[("COLLBENCH_CUDA_SEQ_START", "4294967290")]).map(|k| k.seq_start),
            Ok(4294967290)
        );
        for (var, bad) in [
            ("COLLBENCH_CUDA_THREADS", "100"),
            ("COLLBENCH_CUDA_THREADS", "2048"),
            ("COLLBENCH_CUDA_THREADS", "0"),
            ("COLLBENCH_CUDA_THREADS", "lots"),
            ("COLLBENCH_CUDA_COPIES", "gpu"),
            ("COLLBENCH_CUDA_P2P", "on"),
            ("COLLBENCH_CUDA_SEQ_START", "-1"),
            ("COLLBENCH_CUDA_SEQ_START", "9223372036854775808"),
        ] {
            let e = knobs(&[(var, bad)]).unwrap_err();
            assert!(e.contains(var) && e.contains(bad), "{var}={bad}: {e}");
        }
    }
}
