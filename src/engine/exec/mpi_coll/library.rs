//! What the MPI library in use offers the `mpi` engine: its datatypes for
//! collbench's types, its `MPI_IN_PLACE`, its quirks, and its error text.

use super::ExecError;
use crate::engine::types::Dtype;
use mpi::collective::SystemOperation;
use mpi::ffi;
use mpi::traits::{AsRaw, Equivalence};
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// MPI's datatype for reducing `dtype`, if it has one.
pub(super) fn numeric_type(dtype: Dtype) -> Option<ffi::MPI_Datatype> {
    let dt = match dtype {
        Dtype::I8 => i8::equivalent_datatype(),
        Dtype::U8 => u8::equivalent_datatype(),
        Dtype::I32 => i32::equivalent_datatype(),
        Dtype::U32 => u32::equivalent_datatype(),
        Dtype::I64 => i64::equivalent_datatype(),
        Dtype::U64 => u64::equivalent_datatype(),
        Dtype::F32 => f32::equivalent_datatype(),
        Dtype::F64 => f64::equivalent_datatype(),
        Dtype::F16 | Dtype::Bf16 | Dtype::F8E4M3 | Dtype::F8E5M2 => return None,
    };
    Some(dt.as_raw())
}

/// A datatype that moves `dtype`'s bits unchanged: its own, else an unsigned
/// integer of its size.
pub(super) fn bits_type(dtype: Dtype) -> Option<ffi::MPI_Datatype> {
    numeric_type(dtype).or_else(|| match dtype.size() {
        1 => Some(u8::equivalent_datatype().as_raw()),
        2 => Some(u16::equivalent_datatype().as_raw()),
        _ => None,
    })
}

/// `MPI_IN_PLACE` of the library in use, when known. rsmpi does not export
/// it and implementations differ, so it comes from the library's version
/// string; `COLLBENCH_MPI_IN_PLACE=stage` pretends it is unknown
/// ([`crate::engine::exec::mpi_in_place_staged`]).
pub(super) fn in_place_sentinel() -> Option<*const c_void> {
    static SENTINEL: OnceLock<Option<usize>> = OnceLock::new();
    let value = *SENTINEL.get_or_init(|| {
        // A bad value stopped the run before it started (run::sweep).
        if crate::engine::exec::mpi_in_place_staged().unwrap_or(false) {
            tracing::debug!(
                "MPI_IN_PLACE not used (COLLBENCH_MPI_IN_PLACE=stage): in-place runs stage a copy"
            );
            return None;
        }
        let lib = mpi::environment::library_version().unwrap_or_default();
        let sentinel = if lib.contains("Open MPI") {
            Some(1) // ompi/include/mpi.h.in: ((void *) 1)
        } else if ["MPICH", "Intel(R) MPI", "MVAPICH"]
            .iter()
            .any(|name| lib.contains(name))
        {
            Some(usize::MAX) // mpich/src/include/mpi.h.in: (void *) -1
        } else {
            None
        };
        tracing::debug!(
            library = %lib.lines().next().unwrap_or(""),
            in_place = ?sentinel,
            "MPI_IN_PLACE from the library's version (None: in-place runs stage a copy)"
        );
        sentinel
    });
    value.map(std::ptr::without_provenance::<c_void>)
}

/// Whether the library's `MPI_SUM` saturates `dtype` where collbench (like
/// NCCL) wraps. Open MPI 4.1's `op/avx` component does so for 8-bit integers
/// (open-mpi/ompi#8045, closed as won't fix). Probed once with
/// `MPI_Reduce_local` on a vector long enough for SIMD code paths; false
/// while MPI is not initialised (nothing can be probed yet).
pub(super) fn saturating_sum(dtype: Dtype) -> bool {
    static PROBED: OnceLock<[bool; 2]> = OnceLock::new();
    let probed = match PROBED.get() {
        Some(p) => p,
        None if mpi::environment::is_initialized() && !mpi::environment::is_finalized() => {
            PROBED.get_or_init(|| [probe_sum(Dtype::I8), probe_sum(Dtype::U8)])
        }
        None => return false,
    };
    match dtype {
        Dtype::I8 => probed[0],
        Dtype::U8 => probed[1],
        _ => false,
    }
}

/// Adds 1 to the largest value of a 1-byte type and looks for the wrap.
fn probe_sum(dtype: Dtype) -> bool {
    const LEN: usize = 256;
    let (top, wrapped) = match dtype {
        Dtype::I8 => (0x7f_u8, 0x80_u8),
        Dtype::U8 => (0xff, 0x00),
        _ => return false,
    };
    let Some(dt) = numeric_type(dtype) else {
        return false;
    };
    let ones = [1u8; LEN];
    let mut acc = [top; LEN];
    // SAFETY: both arrays hold LEN elements of the 1-byte type `dt`; MPI is
    // initialised and not finalised (checked by the caller).
    let rc = unsafe {
        ffi::MPI_Reduce_local(
            ones.as_ptr().cast(),
            acc.as_mut_ptr().cast(),
            LEN as c_int,
            dt,
            SystemOperation::sum().as_raw(),
        )
    };
    rc == ffi::MPI_SUCCESS as c_int && acc.iter().any(|&x| x != wrapped)
}

/// `Ok` when an MPI call succeeded, else its error text.
pub(super) fn check(rc: c_int, call: &str) -> Result<(), ExecError> {
    if rc == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut text = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize];
    let mut len: c_int = 0;
    // SAFETY: `text` has room for MPI_MAX_ERROR_STRING characters, as the
    // call requires.
    let got = unsafe { ffi::MPI_Error_string(rc, text.as_mut_ptr(), &mut len) };
    let len = usize::try_from(len).unwrap_or(0).min(text.len());
    let message = if got == ffi::MPI_SUCCESS as c_int {
        text[..len].iter().map(|&c| c as u8 as char).collect()
    } else {
        format!("error code {rc}")
    };
    Err(ExecError::Mpi(format!("{call} failed: {message}")))
}
