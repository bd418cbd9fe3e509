//! What is compiled: GPU architectures and the (element type, operator)
//! variants of the kernels, with the NVRTC options of each.

use crate::engine::types::{Dtype, ReduceOp};
use std::fmt;
use std::str::FromStr;

/// A GPU architecture: compute capability major*10 + minor, with the
/// architecture-specific `a` suffix (e.g. `sm_90a`) when asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arch {
    pub cc: u32,
    pub specific: bool,
}

/// The oldest compute capability the kernels compile for (Volta): they
/// sleep in waits (`__nanosleep`) and read their rank table in place
/// (`__grid_constant__`), both 7.0 and newer.
pub const MIN_CC: u32 = 70;

/// What is said of a GPU or `--arch` older than [`MIN_CC`].
pub const TOO_OLD: &str = "collbench's kernels need compute capability 7.0 (sm_70, Volta) or newer";

impl Arch {
    /// Whether the kernels compile for it (see [`MIN_CC`]).
    pub fn supported(self) -> bool {
        self.cc >= MIN_CC
    }

    /// What is compiled for when no GPU says otherwise.
    pub const DEFAULT: Arch = Arch {
        cc: 90,
        specific: false,
    };

    /// NVRTC's option selecting this architecture: its virtual one (PTX),
    /// or the real one (a cubin of machine code).
    pub fn nvrtc_option(self, code: Code) -> String {
        match code {
            Code::Ptx => format!("--gpu-architecture=compute_{}", self.suffix()),
            Code::Cubin => format!("--gpu-architecture=sm_{}", self.suffix()),
        }
    }

    fn suffix(self) -> String {
        format!("{}{}", self.cc, if self.specific { "a" } else { "" })
    }
}

/// What a kernel is compiled to: PTX, which any newer GPU's driver
/// compiles when the module loads (seconds a variant, the first time on a
/// machine), or a cubin of machine code for the GPU at hand, which it loads
/// as it is (NVRTC makes it on all cores, up front, into the cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Ptx,
    Cubin,
}

impl Code {
    /// What a GPU at hand loads: a cubin where NVRTC makes them, unless
    /// `COLLBENCH_CUDA_CODE=ptx` asks for PTX.
    pub fn for_gpu(nvrtc_makes_cubins: bool) -> Code {
        let ptx = std::env::var("COLLBENCH_CUDA_CODE").is_ok_and(|v| v.eq_ignore_ascii_case("ptx"));
        if nvrtc_makes_cubins && !ptx {
            Code::Cubin
        } else {
            Code::Ptx
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Code::Ptx => "ptx",
            Code::Cubin => "cubin",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.suffix())
    }
}

/// Why an architecture did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a GPU architecture: expected e.g. sm_90, sm_80, 90 or compute_90 (compute capability 7.0 or newer)")]
pub struct ArchError(pub String);

impl FromStr for Arch {
    type Err = ArchError;

    /// `sm_90`, `SM_90`, `compute_90`, `sm90`, `90`, `sm_90a`; also `9.0`.
    fn from_str(s: &str) -> Result<Arch, ArchError> {
        let err = || ArchError(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        let t = ["compute_", "compute", "sm_", "sm"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(&t);
        let (digits, specific) = match t.strip_suffix('a') {
            Some(d) => (d, true),
            None => (t, false),
        };
        let digits = match digits.split_once('.') {
            Some((major, minor)) if minor.len() == 1 && !specific => format!("{major}{minor}"),
            Some(_) => return Err(err()),
            None => digits.to_string(),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let cc: u32 = digits.parse().map_err(|_| err())?;
        if cc < 50 {
            return Err(err());
        }
        Ok(Arch { cc, specific })
    }
}

/// One compiled unit: the kernels for one element type and one operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub dtype: Dtype,
    pub op: ReduceOp,
}

impl Variant {
    /// Every variant: 12 types x 6 operators.
    pub fn all() -> Vec<Variant> {
        Dtype::ALL
            .into_iter()
            .flat_map(|dtype| {
                ReduceOp::ALL
                    .into_iter()
                    .map(move |op| Variant { dtype, op })
            })
            .collect()
    }

    /// The type's id in kernels/abi.cuh (its position in [`Dtype::ALL`]).
    pub fn dtype_id(self) -> usize {
        Dtype::ALL
            .iter()
            .position(|d| *d == self.dtype)
            .unwrap_or(0)
    }

    /// The operator's id in kernels/abi.cuh (its position in [`ReduceOp::ALL`]).
    pub fn op_id(self) -> usize {
        ReduceOp::ALL
            .iter()
            .position(|o| *o == self.op)
            .unwrap_or(0)
    }

    /// NVRTC's options for this variant on `arch`, compiled to `code`.
    pub fn options(self, arch: Arch, code: Code) -> Vec<String> {
        vec![
            arch.nvrtc_option(code),
            format!("-DCB_DT={}", self.dtype_id()),
            format!("-DCB_OP={}", self.op_id()),
            // Bit-exact with the host engine: no fused multiply-add.
            "--fmad=false".into(),
            "--std=c++17".into(),
        ]
    }

    /// The program name NVRTC's diagnostics use.
    pub fn program_name(self) -> String {
        format!("collbench_{}_{}.cu", self.dtype.name(), self.op.name())
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.dtype, self.op)
    }
}
