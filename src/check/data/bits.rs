//! Element bits: how the generator's values become a dtype's bits (exact
//! values, order-preserving keys, powers of two), finiteness, the poison
//! pattern and the human-readable form of an element.

use crate::engine::elem::{e4m3_from_f32, e4m3_to_f32, e5m2_from_f32, e5m2_to_f32};
use crate::engine::Dtype;
use half::{bf16, f16};

/// The poison pattern of one element.
pub(crate) fn poison_bits(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::I8 | Dtype::U8 => 0xA5,
        Dtype::I32 | Dtype::U32 => 0xA5A5_A5A5,
        Dtype::I64 | Dtype::U64 => 0xA5A5_A5A5_A5A5_A5A5,
        Dtype::F16 => 0xFEA5,
        Dtype::Bf16 => 0xFFE5,
        Dtype::F32 => 0xFFE5_A5A5,
        Dtype::F64 => 0xFFFD_A5A5_A5A5_A5A5,
        Dtype::F8E4M3 => 0xFF,
        Dtype::F8E5M2 => 0xFE,
    }
}

pub(crate) fn is_signed(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::I8 | Dtype::I32 | Dtype::I64)
}

/// The bits of an element of `dtype` (all ones below its size).
#[inline(always)]
pub(crate) fn mask(dtype: Dtype) -> u64 {
    match dtype.size() {
        1 => 0xFF,
        2 => 0xFFFF,
        4 => 0xFFFF_FFFF,
        _ => u64::MAX,
    }
}

#[inline(always)]
pub(super) fn int_bits(dtype: Dtype, v: u64) -> u64 {
    v & mask(dtype)
}

/// The bits of the largest finite magnitude of a float type.
#[inline(always)]
pub(crate) fn max_finite(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::F16 => 0x7BFF,
        Dtype::Bf16 => 0x7F7F,
        Dtype::F32 => 0x7F7F_FFFF,
        Dtype::F64 => 0x7FEF_FFFF_FFFF_FFFF,
        Dtype::F8E4M3 => 0x7E,
        Dtype::F8E5M2 => 0x7B,
        _ => 0,
    }
}

/// The largest key: keys `0..=kmax` map in order onto the type's finite
/// values (floats: `-max ..= +max` without -0).
pub(super) fn kmax(dtype: Dtype) -> u64 {
    if dtype.is_float() {
        2 * max_finite(dtype)
    } else {
        mask(dtype)
    }
}

#[inline(always)]
pub(super) fn sign_bit(dtype: Dtype) -> u64 {
    1 << (8 * dtype.size() - 1)
}

#[inline(always)]
pub(super) fn key_bits(dtype: Dtype, key: u64) -> u64 {
    if dtype.is_float() {
        // Below the middle key: negative, magnitude `mid - key` (branch-free:
        // the sign is random per element).
        let mid = max_finite(dtype);
        let neg = key < mid;
        let m = 0u64.wrapping_sub(u64::from(neg));
        let d = key.wrapping_sub(mid);
        (d ^ m).wrapping_sub(m) | (u64::from(neg) * sign_bit(dtype))
    } else if is_signed(dtype) {
        key ^ sign_bit(dtype)
    } else {
        key
    }
}

/// The key of a finite float's bits (inverse of [`key_bits`]; -0 and +0
/// share a key): the distance between two keys counts ULPs.
pub(crate) fn float_key(dtype: Dtype, bits: u64) -> u64 {
    let mid = max_finite(dtype);
    let mag = bits & !sign_bit(dtype) & mask(dtype);
    if bits & sign_bit(dtype) != 0 {
        mid.saturating_sub(mag)
    } else {
        mid + mag
    }
}

/// The bits of `x` in a float type, for an `x` the type holds exactly.
#[inline(always)]
pub(super) fn exact_float_bits(dtype: Dtype, x: f64) -> u64 {
    match dtype {
        Dtype::F64 => x.to_bits(),
        Dtype::F32 => u64::from((x as f32).to_bits()),
        Dtype::F16 => u64::from(f16::from_f32(x as f32).to_bits()),
        Dtype::Bf16 => u64::from(bf16::from_f32(x as f32).to_bits()),
        Dtype::F8E4M3 => u64::from(e4m3_from_f32(x as f32)),
        Dtype::F8E5M2 => u64::from(e5m2_from_f32(x as f32)),
        _ => 0,
    }
}

/// `w × 2^e` (integers: `w`, wrapped), exact by construction of the scheme.
#[inline(always)]
pub(super) fn units_bits(dtype: Dtype, w: i128, e: i32) -> u64 {
    if !dtype.is_float() {
        return int_bits(dtype, w as u64);
    }
    let scale = f64::from_bits(((e + 1023) as u64) << 52);
    // |w| <= 2^53 for floats: through i64, the conversion is one instruction.
    exact_float_bits(dtype, w as i64 as f64 * scale)
}

/// `±2^t` (integers wrapped).
#[inline(always)]
pub(super) fn pow2_bits(dtype: Dtype, neg: bool, t: u32) -> u64 {
    if dtype.is_float() {
        let x = f64::from_bits(u64::from(t + 1023) << 52);
        return exact_float_bits(dtype, x) | (u64::from(neg) * sign_bit(dtype));
    }
    int_bits(dtype, negate_if(neg, 1i128 << t) as u64)
}

// The flips below are random per element: written without branches, since
// a mispredicted branch costs more than the rest of the element.

/// `-v` if `flip`, else `v`.
#[inline(always)]
pub(super) fn negate_if(flip: bool, v: i128) -> i128 {
    let m = -i128::from(flip);
    (v ^ m) - m
}

/// `kmax - key` if `flip`, else `key`.
#[inline(always)]
pub(super) fn mirror_if(flip: bool, key: u64, kmax: u64) -> u64 {
    let m = 0u64.wrapping_sub(u64::from(flip));
    key ^ ((key ^ (kmax - key)) & m)
}

/// Whether float bits hold a finite value (integers always do).
pub(crate) fn is_finite(dtype: Dtype, bits: u64) -> bool {
    let exp_mask = match dtype {
        Dtype::F16 => 0x7C00,
        Dtype::Bf16 => 0x7F80,
        Dtype::F32 => 0x7F80_0000,
        Dtype::F64 => 0x7FF0_0000_0000_0000,
        Dtype::F8E4M3 => 0x7F, // only all-ones is NaN; there is no infinity
        Dtype::F8E5M2 => 0x7C,
        _ => return true,
    };
    bits & exp_mask != exp_mask
}

/// An element for people: its value and its bits, e.g. `1.5 (0x3e00)`.
pub fn format_elem(dtype: Dtype, bits: u64) -> String {
    let hex = format!("0x{:0w$x}", bits & mask(dtype), w = 2 * dtype.size());
    let b = bits & mask(dtype);
    let value = match dtype {
        Dtype::I8 => (b as u8 as i8).to_string(),
        Dtype::I32 => (b as u32 as i32).to_string(),
        Dtype::I64 => (b as i64).to_string(),
        Dtype::U8 | Dtype::U32 | Dtype::U64 => b.to_string(),
        Dtype::F16 => format!("{:?}", f16::from_bits(b as u16).to_f32()),
        Dtype::Bf16 => format!("{:?}", bf16::from_bits(b as u16).to_f32()),
        Dtype::F32 => format!("{:?}", f32::from_bits(b as u32)),
        Dtype::F64 => format!("{:?}", f64::from_bits(b)),
        Dtype::F8E4M3 => format!("{:?}", e4m3_to_f32(b as u8)),
        Dtype::F8E5M2 => format!("{:?}", e5m2_to_f32(b as u8)),
    };
    format!("{value} ({hex})")
}
