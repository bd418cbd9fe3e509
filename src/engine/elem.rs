//! TEMPORARY stub (replaced by the check branch's implementation).
use crate::engine::types::{Dtype, ReduceOp};

/// # Safety
/// Pointers valid for `len` elements.
pub unsafe fn reduce(dtype: Dtype, op: ReduceOp, dst: *mut u8, inputs: &[*const u8], len: usize) {
    assert!(dtype == Dtype::F32);
    let d = dst as *mut f32;
    let a = inputs[0] as *const f32;
    if inputs.len() == 1 {
        if !std::ptr::eq(a, d) {
            std::ptr::copy_nonoverlapping(a, d, len);
        }
        return;
    }
    let b = inputs[1] as *const f32;
    for i in 0..len {
        let (x, y) = (*a.add(i), *b.add(i));
        *d.add(i) = match op {
            ReduceOp::Sum | ReduceOp::Avg => x + y,
            ReduceOp::Prod => x * y,
            ReduceOp::Min => x.min(y),
            ReduceOp::Max => x.max(y),
        };
    }
    for extra in &inputs[2..] {
        let c = *extra as *const f32;
        for i in 0..len {
            *d.add(i) += *c.add(i);
        }
    }
}

/// # Safety
/// Pointers valid for `len` elements.
pub unsafe fn finish(dtype: Dtype, op: ReduceOp, nranks: usize, dst: *mut u8, len: usize) {
    if op == ReduceOp::Avg && dtype == Dtype::F32 {
        let d = dst as *mut f32;
        for i in 0..len {
            *d.add(i) /= nranks as f32;
        }
    }
}
