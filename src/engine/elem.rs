//! Element arithmetic over raw buffers: every [`ReduceOp`] on every
//! [`Dtype`], applied elementwise to whole buffers, plus the operator's
//! finishing step (Avg's division). This is the host executor's hot path.
//!
//! The semantics every executor follows (and `check` relies on):
//! - integers: sum and product wrap (two's complement); min and max as usual;
//!   Avg divides the (wrapped) sum by the rank count, truncating toward zero.
//! - floats: IEEE arithmetic, round to nearest even. f16, bf16 and fp8 are
//!   computed in f32 and rounded once; for + and × that equals the correctly
//!   rounded result, since f32 carries more than twice their precision plus
//!   two bits. Min and max return NaN when either operand is NaN (payload
//!   unspecified) and treat -0 as below +0, so both are order-independent.
//! - several inputs combine left to right: `((in0 op in1) op in2) ...`.
//!
//! Speed: one monomorphised loop per (type, operator), the `match` outside
//! it, compiled for the baseline CPU and again with AVX2; the loop reads a
//! fixed-size chunk of every input before writing the chunk of `dst`, which
//! keeps `dst == input` correct and lets LLVM vectorise without runtime
//! alias checks. The narrow floats convert without branches (`narrow`,
//! `fp8`), so their loops vectorise too.

mod fp8;
mod narrow;

pub use fp8::{e4m3_from_f32, e4m3_to_f32, e5m2_from_f32, e5m2_to_f32};

use super::types::{Dtype, ReduceOp};
use half::{bf16, f16};
use std::fmt;

/// PreMulSum's scalar, as the user wrote it (`--scalar`). Each element type
/// takes it rounded to the type (integers: wrapped), as NCCL takes a scalar
/// of the operation's type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scalar {
    /// The value (integers: exact only up to 2^53; `int` keeps them whole).
    pub value: f64,
    /// The value as an integer, when it is one.
    pub int: Option<i128>,
}

impl Default for Scalar {
    fn default() -> Self {
        Scalar {
            value: 1.0,
            int: Some(1),
        }
    }
}

impl Scalar {
    /// Parses `--scalar`: a finite number (integers exactly, up to 64 bits
    /// of either sign).
    pub fn parse(s: &str) -> Option<Scalar> {
        let t = s.trim();
        if let Ok(i) = t.parse::<i128>() {
            if i >= i128::from(i64::MIN) && i <= i128::from(u64::MAX) {
                return Some(Scalar {
                    value: i as f64,
                    int: Some(i),
                });
            }
            return None;
        }
        let value: f64 = t.parse().ok()?;
        if !value.is_finite() {
            return None;
        }
        let int = (value.fract() == 0.0 && value.abs() < 9.0e15).then_some(value as i128);
        Some(Scalar { value, int })
    }

    /// The scalar's bits in `dtype` (the low `dtype.size()` bytes), or why
    /// the type cannot take it: a fraction for an integer type, a value the
    /// float type rounds to zero or infinity.
    pub fn bits(self, dtype: Dtype) -> Result<u64, String> {
        if !dtype.is_float() {
            let Some(i) = self.int else {
                return Err(format!(
                    "premulsum on {dtype} needs an integer --scalar (got {self})"
                ));
            };
            // A value of the type, signed or unsigned (-1 is all ones on an
            // unsigned type, as in C); anything wider would be cut.
            let w = dtype.size() as u32 * 8;
            let (lo, hi) = (-(1i128 << (w - 1)), (1i128 << w) - 1);
            if !(lo..=hi).contains(&i) {
                return Err(format!(
                    "--scalar {self} does not fit {dtype} ({lo} to {hi}, as signed or unsigned {w}-bit): premulsum's scalar is a value of the type"
                ));
            }
            return Ok(i as u64 & mask_bits(dtype));
        }
        let v = self.value;
        let bits = match dtype {
            Dtype::F64 => v.to_bits(),
            Dtype::F32 => u64::from((v as f32).to_bits()),
            Dtype::F16 => u64::from(half::f16::from_f64(v).to_bits()),
            Dtype::Bf16 => u64::from(half::bf16::from_f64(v).to_bits()),
            Dtype::F8E4M3 => u64::from(e4m3_from_f32(v as f32)),
            Dtype::F8E5M2 => u64::from(e5m2_from_f32(v as f32)),
            _ => unreachable!("integer types return above"),
        };
        let back = to_f64(dtype, bits);
        if back == 0.0 || !back.is_finite() {
            return Err(format!(
                "--scalar {self} is {} in {dtype}: premulsum needs a finite, nonzero scalar for float types",
                if back == 0.0 { "zero" } else { "not finite" }
            ));
        }
        Ok(bits)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.int {
            Some(i) => write!(f, "{i}"),
            None if (1e-4..1e15).contains(&self.value.abs()) => write!(f, "{}", self.value),
            None => write!(f, "{:e}", self.value),
        }
    }
}

/// The low `dtype.size()` bytes.
fn mask_bits(dtype: Dtype) -> u64 {
    match dtype.size() {
        8 => u64::MAX,
        s => (1u64 << (8 * s)) - 1,
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes of each input one step of the reduction loop holds in registers.
const CHUNK_BYTES: usize = 128;

/// Combines `inputs` (at least one pointer, each `len` elements of `dtype`)
/// elementwise with `op`, writing `dst`. Avg sums; its division is
/// [`finish`]. With one input this is a copy; with none, nothing happens.
///
/// # Safety
/// Every pointer must be valid for `len * dtype.size()` bytes (reads for the
/// inputs, writes for `dst`). No alignment is required. `dst` may be the
/// very address of one or more inputs, but must not partly overlap any.
pub unsafe fn reduce(dtype: Dtype, op: ReduceOp, dst: *mut u8, inputs: &[*const u8], len: usize) {
    let Some((&first, rest)) = inputs.split_first() else {
        return;
    };
    if len == 0 {
        return;
    }
    if rest.is_empty() {
        // SAFETY: both regions are valid for these bytes (caller); `copy`
        // allows them to be the same.
        unsafe { std::ptr::copy(first, dst, len * dtype.size()) };
        return;
    }
    // SAFETY: the caller's guarantees, forwarded unchanged.
    unsafe {
        match dtype {
            Dtype::I8 => reduce_as::<i8, CHUNK_BYTES>(op, dst, inputs, len),
            Dtype::U8 => reduce_as::<u8, CHUNK_BYTES>(op, dst, inputs, len),
            Dtype::I32 => reduce_as::<i32, { CHUNK_BYTES / 4 }>(op, dst, inputs, len),
            Dtype::U32 => reduce_as::<u32, { CHUNK_BYTES / 4 }>(op, dst, inputs, len),
            Dtype::I64 => reduce_as::<i64, { CHUNK_BYTES / 8 }>(op, dst, inputs, len),
            Dtype::U64 => reduce_as::<u64, { CHUNK_BYTES / 8 }>(op, dst, inputs, len),
            Dtype::F16 => reduce_as::<f16, { CHUNK_BYTES / 2 }>(op, dst, inputs, len),
            Dtype::Bf16 => reduce_as::<bf16, { CHUNK_BYTES / 2 }>(op, dst, inputs, len),
            Dtype::F32 => reduce_as::<f32, { CHUNK_BYTES / 4 }>(op, dst, inputs, len),
            Dtype::F64 => reduce_as::<f64, { CHUNK_BYTES / 8 }>(op, dst, inputs, len),
            Dtype::F8E4M3 => reduce_as::<E4M3, CHUNK_BYTES>(op, dst, inputs, len),
            Dtype::F8E5M2 => reduce_as::<E5M2, CHUNK_BYTES>(op, dst, inputs, len),
        }
    }
}

/// The operator's finishing step, applied once to fully reduced values: for
/// Avg, divide by `nranks` (treated as at least 1): integers truncate toward
/// zero like NCCL; f16, bf16 and fp8 divide in f32 and round to nearest even;
/// f32 in f32, f64 in f64. Other operators leave `dst` alone.
///
/// # Safety
/// `dst` must be valid for reads and writes of `len * dtype.size()` bytes.
/// No alignment is required.
pub unsafe fn finish(dtype: Dtype, op: ReduceOp, nranks: usize, dst: *mut u8, len: usize) {
    if op != ReduceOp::Avg {
        return;
    }
    let n = nranks.max(1);
    // SAFETY: the caller's guarantee, forwarded unchanged.
    unsafe {
        match dtype {
            Dtype::I8 => finish_as::<i8>(dst, len, n),
            Dtype::U8 => finish_as::<u8>(dst, len, n),
            Dtype::I32 => finish_as::<i32>(dst, len, n),
            Dtype::U32 => finish_as::<u32>(dst, len, n),
            Dtype::I64 => finish_as::<i64>(dst, len, n),
            Dtype::U64 => finish_as::<u64>(dst, len, n),
            Dtype::F16 => finish_as::<f16>(dst, len, n),
            Dtype::Bf16 => finish_as::<bf16>(dst, len, n),
            Dtype::F32 => finish_as::<f32>(dst, len, n),
            Dtype::F64 => finish_as::<f64>(dst, len, n),
            Dtype::F8E4M3 => finish_as::<E4M3>(dst, len, n),
            Dtype::F8E5M2 => finish_as::<E5M2>(dst, len, n),
        }
    }
}

/// PreMulSum's combination: `inputs[0]` multiplied by `scalar` (the
/// scalar's bits in `dtype`, rounded to the type like every product), then
/// the other inputs summed onto it, left to right. With one input this
/// scales it. `dst` may be the address of any input, as for [`reduce`].
///
/// # Safety
/// As [`reduce`].
pub unsafe fn reduce_premul(
    dtype: Dtype,
    scalar: u64,
    dst: *mut u8,
    inputs: &[*const u8],
    len: usize,
) {
    if inputs.is_empty() || len == 0 {
        return;
    }
    // SAFETY: the caller's guarantees, forwarded unchanged.
    unsafe {
        match dtype {
            Dtype::I8 => premul_as::<i8, CHUNK_BYTES>(scalar as u8 as i8, dst, inputs, len),
            Dtype::U8 => premul_as::<u8, CHUNK_BYTES>(scalar as u8, dst, inputs, len),
            Dtype::I32 => {
                premul_as::<i32, { CHUNK_BYTES / 4 }>(scalar as u32 as i32, dst, inputs, len)
            }
            Dtype::U32 => premul_as::<u32, { CHUNK_BYTES / 4 }>(scalar as u32, dst, inputs, len),
            Dtype::I64 => premul_as::<i64, { CHUNK_BYTES / 8 }>(scalar as i64, dst, inputs, len),
            Dtype::U64 => premul_as::<u64, { CHUNK_BYTES / 8 }>(scalar, dst, inputs, len),
            Dtype::F16 => premul_as::<f16, { CHUNK_BYTES / 2 }>(
                f16::from_bits(scalar as u16),
                dst,
                inputs,
                len,
            ),
            Dtype::Bf16 => premul_as::<bf16, { CHUNK_BYTES / 2 }>(
                bf16::from_bits(scalar as u16),
                dst,
                inputs,
                len,
            ),
            Dtype::F32 => premul_as::<f32, { CHUNK_BYTES / 4 }>(
                f32::from_bits(scalar as u32),
                dst,
                inputs,
                len,
            ),
            Dtype::F64 => {
                premul_as::<f64, { CHUNK_BYTES / 8 }>(f64::from_bits(scalar), dst, inputs, len)
            }
            Dtype::F8E4M3 => premul_as::<E4M3, CHUNK_BYTES>(E4M3(scalar as u8), dst, inputs, len),
            Dtype::F8E5M2 => premul_as::<E5M2, CHUNK_BYTES>(E5M2(scalar as u8), dst, inputs, len),
        }
    }
}

/// [`reduce_premul`]'s loop: every input's chunk is read before the chunk
/// of `dst` is written (so `dst` may be an input), then the tail.
///
/// # Safety
/// As [`reduce`], with at least one input and `K` elements per chunk.
unsafe fn premul_as<T: Elem, const K: usize>(s: T, dst: *mut u8, inputs: &[*const u8], len: usize) {
    let dst = dst.cast::<T>();
    let full = len - len % K;
    let mut off = 0;
    // SAFETY: every access is below `len` elements of pointers valid for
    // `len` elements (caller); reads of a chunk precede its write.
    unsafe {
        while off < full {
            let mut acc: [T; K] = load(inputs[0], off);
            for a in acc.iter_mut() {
                *a = a.prod(s);
            }
            for &p in &inputs[1..] {
                acc = combine::<T, Sum, K>(acc, load(p, off));
            }
            dst.add(off).cast::<[T; K]>().write_unaligned(acc);
            off += K;
        }
        for i in full..len {
            let mut v = inputs[0].cast::<T>().add(i).read_unaligned().prod(s);
            for &p in &inputs[1..] {
                v = v.sum(p.cast::<T>().add(i).read_unaligned());
            }
            dst.add(i).write_unaligned(v);
        }
    }
}

/// The value of `bits` (the low `dtype.size()` bytes) as an f64 (64-bit
/// integers rounded).
pub fn to_f64(dtype: Dtype, bits: u64) -> f64 {
    match dtype {
        Dtype::I8 => f64::from(bits as u8 as i8),
        Dtype::U8 => f64::from(bits as u8),
        Dtype::I32 => f64::from(bits as u32 as i32),
        Dtype::U32 => f64::from(bits as u32),
        Dtype::I64 => bits as i64 as f64,
        Dtype::U64 => bits as f64,
        Dtype::F64 => f64::from_bits(bits),
        Dtype::F32 => f64::from(f32::from_bits(bits as u32)),
        Dtype::F16 => f16::from_bits(bits as u16).to_f64(),
        Dtype::Bf16 => bf16::from_bits(bits as u16).to_f64(),
        Dtype::F8E4M3 => f64::from(e4m3_to_f32(bits as u8)),
        Dtype::F8E5M2 => f64::from(e5m2_to_f32(bits as u8)),
    }
}

/// [`finish`] for Avg on one element given as its little-endian bits (the
/// low `dtype.size()` bytes of `bits`); other bits of the result are zero.
/// With a constant `dtype` this inlines to the bare arithmetic.
#[inline(always)]
pub fn avg_bits(dtype: Dtype, bits: u64, nranks: usize) -> u64 {
    let n = nranks.max(1);
    match dtype {
        Dtype::I8 => u64::from((bits as u8 as i8).avg(n) as u8),
        Dtype::U8 => u64::from((bits as u8).avg(n)),
        Dtype::I32 => u64::from((bits as u32 as i32).avg(n) as u32),
        Dtype::U32 => u64::from((bits as u32).avg(n)),
        Dtype::I64 => (bits as i64).avg(n) as u64,
        Dtype::U64 => bits.avg(n),
        Dtype::F16 => u64::from(f16::from_bits(bits as u16).avg(n).to_bits()),
        Dtype::Bf16 => u64::from(bf16::from_bits(bits as u16).avg(n).to_bits()),
        Dtype::F32 => u64::from(f32::from_bits(bits as u32).avg(n).to_bits()),
        Dtype::F64 => f64::from_bits(bits).avg(n).to_bits(),
        Dtype::F8E4M3 => u64::from(E4M3(bits as u8).avg(n).0),
        Dtype::F8E5M2 => u64::from(E5M2(bits as u8).avg(n).0),
    }
}

/// One element type's arithmetic.
trait Elem: Copy {
    fn sum(self, other: Self) -> Self;
    fn prod(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
    /// Avg's division by `n >= 1`.
    fn avg(self, n: usize) -> Self;
}

/// A binary operator, as a type so that each loop is its own function.
trait Op {
    fn apply<T: Elem>(a: T, b: T) -> T;
}

struct Sum;
struct Prod;
struct Min;
struct Max;

impl Op for Sum {
    #[inline(always)]
    fn apply<T: Elem>(a: T, b: T) -> T {
        a.sum(b)
    }
}
impl Op for Prod {
    #[inline(always)]
    fn apply<T: Elem>(a: T, b: T) -> T {
        a.prod(b)
    }
}
impl Op for Min {
    #[inline(always)]
    fn apply<T: Elem>(a: T, b: T) -> T {
        a.min(b)
    }
}
impl Op for Max {
    #[inline(always)]
    fn apply<T: Elem>(a: T, b: T) -> T {
        a.max(b)
    }
}

/// # Safety
/// As [`reduce`], with `inputs.len() >= 2` and `K` elements of `T` per chunk.
unsafe fn reduce_as<T: Elem, const K: usize>(
    op: ReduceOp,
    dst: *mut u8,
    inputs: &[*const u8],
    len: usize,
) {
    let dst = dst.cast::<T>();
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => {
                run::<T, Sum, K>(dst, inputs, len)
            }
            ReduceOp::Prod => run::<T, Prod, K>(dst, inputs, len),
            ReduceOp::Min => run::<T, Min, K>(dst, inputs, len),
            ReduceOp::Max => run::<T, Max, K>(dst, inputs, len),
        }
    }
}

/// `K` elements at element offset `off` of `p`.
///
/// # Safety
/// `p` valid for reads of elements `off..off + K`.
#[inline(always)]
unsafe fn load<T: Copy, const K: usize>(p: *const u8, off: usize) -> [T; K] {
    // SAFETY: in bounds (caller); read_unaligned needs no alignment.
    unsafe { p.cast::<T>().add(off).cast::<[T; K]>().read_unaligned() }
}

#[inline(always)]
fn combine<T: Elem, O: Op, const K: usize>(mut acc: [T; K], other: [T; K]) -> [T; K] {
    for (a, b) in acc.iter_mut().zip(other) {
        *a = O::apply(*a, b);
    }
    acc
}

/// The reduction loop, compiled twice on x86-64: for the baseline CPU and
/// with AVX2, chosen at run time (the conversions of the narrow floats, in
/// particular, go twice as fast with eight lanes).
///
/// # Safety
/// As [`reduce`], with `inputs.len() >= 2`.
unsafe fn run<T: Elem, O: Op, const K: usize>(dst: *mut T, inputs: &[*const u8], len: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked); the rest is forwarded.
        return unsafe { run_avx2::<T, O, K>(dst, inputs, len) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { run_any::<T, O, K>(dst, inputs, len) }
}

/// # Safety
/// As [`run`], on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_avx2<T: Elem, O: Op, const K: usize>(dst: *mut T, inputs: &[*const u8], len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { run_any::<T, O, K>(dst, inputs, len) }
}

/// The loop itself: whole chunks (every input's chunk is read before the
/// chunk of `dst` is written), then the tail element by element.
///
/// # Safety
/// As [`run`].
#[inline(always)]
unsafe fn run_any<T: Elem, O: Op, const K: usize>(dst: *mut T, inputs: &[*const u8], len: usize) {
    let full = len - len % K;
    let mut off = 0;
    // SAFETY: every access is to elements below `len` of a pointer the
    // caller guarantees valid for `len` elements; each chunk (and each tail
    // element) is read from every input before it is written, so `dst`
    // equal to an input sees only values it has not yet overwritten.
    unsafe {
        let store = |off: usize, acc: [T; K]| dst.add(off).cast::<[T; K]>().write_unaligned(acc);
        match *inputs {
            [a, b] => {
                while off < full {
                    store(off, combine::<T, O, K>(load(a, off), load(b, off)));
                    off += K;
                }
            }
            [a, b, c] => {
                while off < full {
                    let ab = combine::<T, O, K>(load(a, off), load(b, off));
                    store(off, combine::<T, O, K>(ab, load(c, off)));
                    off += K;
                }
            }
            _ => {
                while off < full {
                    let mut acc = combine::<T, O, K>(load(inputs[0], off), load(inputs[1], off));
                    for &p in &inputs[2..] {
                        acc = combine::<T, O, K>(acc, load(p, off));
                    }
                    store(off, acc);
                    off += K;
                }
            }
        }
        for i in full..len {
            let mut v = inputs[0].cast::<T>().add(i).read_unaligned();
            for &p in &inputs[1..] {
                v = O::apply(v, p.cast::<T>().add(i).read_unaligned());
            }
            dst.add(i).write_unaligned(v);
        }
    }
}

/// # Safety
/// As [`finish`].
unsafe fn finish_as<T: Elem>(dst: *mut u8, len: usize, n: usize) {
    let p = dst.cast::<T>();
    for i in 0..len {
        // SAFETY: element `i < len` of a buffer valid for `len` elements.
        unsafe {
            let v = p.add(i).read_unaligned();
            p.add(i).write_unaligned(v.avg(n));
        }
    }
}

/// `|x| / n` for a magnitude that fits 32 bits (u32 division is cheaper).
#[inline(always)]
fn div_mag32(mag: u32, n: usize) -> u32 {
    u32::try_from(n).map_or(0, |n| mag / n)
}

macro_rules! int_elem {
    ($($t:ty: $avg:path),* $(,)?) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn sum(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn prod(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
            #[inline(always)]
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
            #[inline(always)]
            fn avg(self, n: usize) -> Self { $avg(self, n) }
        }
    )*};
}

int_elem!(i8: avg_i8, u8: avg_u8, i32: avg_i32, u32: div_mag32, i64: avg_i64, u64: avg_u64);

#[inline(always)]
fn avg_i8(x: i8, n: usize) -> i8 {
    let q = div_mag32(u32::from(x.unsigned_abs()), n) as i8;
    if x < 0 {
        q.wrapping_neg()
    } else {
        q
    }
}

#[inline(always)]
fn avg_u8(x: u8, n: usize) -> u8 {
    div_mag32(u32::from(x), n) as u8
}

#[inline(always)]
fn avg_i32(x: i32, n: usize) -> i32 {
    let q = div_mag32(x.unsigned_abs(), n) as i32;
    if x < 0 {
        q.wrapping_neg()
    } else {
        q
    }
}

#[inline(always)]
fn avg_i64(x: i64, n: usize) -> i64 {
    let q = (x.unsigned_abs() / n as u64) as i64;
    if x < 0 {
        q.wrapping_neg()
    } else {
        q
    }
}

#[inline(always)]
fn avg_u64(x: u64, n: usize) -> u64 {
    x / n as u64
}

/// NaN-propagating minimum on a float's bits, compared through `fa`, `fb`:
/// equal values merge their bits, so min(-0, +0) = -0 in any order, and a
/// NaN operand leaves a NaN (all-ones exponent, nonzero mantissa) behind.
macro_rules! min_bits {
    ($fa:expr, $fb:expr, $a:expr, $b:expr) => {
        if $fa < $fb {
            $a
        } else if $fb < $fa {
            $b
        } else {
            $a | $b
        }
    };
}

macro_rules! native_float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn sum(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn prod(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                <$t>::from_bits(min_bits!(self, o, self.to_bits(), o.to_bits()))
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                // max(a, b) = -min(-a, -b); negation only flips the sign bit.
                -Elem::min(-self, -o)
            }
            #[inline(always)]
            fn avg(self, n: usize) -> Self { self / n as $t }
        }
    )*};
}

native_float_elem!(f32, f64);

/// A float narrower than f32, computed in f32 and rounded once.
trait Narrow: Copy {
    type Bits: Copy + std::ops::BitOr<Output = Self::Bits> + std::ops::BitXor<Output = Self::Bits>;
    const SIGN: Self::Bits;
    fn widen(self) -> f32;
    fn narrow(x: f32) -> Self;
    fn bits(self) -> Self::Bits;
    fn from_bits(b: Self::Bits) -> Self;
}

macro_rules! narrow_float {
    ($($t:ty: $bits:ty, $sign:expr, $widen:expr, $narrow:expr, $get:expr, $make:expr;)*) => {$(
        impl Narrow for $t {
            type Bits = $bits;
            const SIGN: $bits = $sign;
            #[inline(always)]
            fn widen(self) -> f32 { $widen(self) }
            #[inline(always)]
            fn narrow(x: f32) -> Self { $narrow(x) }
            #[inline(always)]
            fn bits(self) -> $bits { $get(self) }
            #[inline(always)]
            fn from_bits(b: $bits) -> Self { $make(b) }
        }

        impl Elem for $t {
            #[inline(always)]
            fn sum(self, o: Self) -> Self { Narrow::narrow(self.widen() + o.widen()) }
            #[inline(always)]
            fn prod(self, o: Self) -> Self { Narrow::narrow(self.widen() * o.widen()) }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                Narrow::from_bits(min_bits!(self.widen(), o.widen(), self.bits(), o.bits()))
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                let neg = |x: $t| <$t as Narrow>::from_bits(x.bits() ^ <$t>::SIGN);
                neg(Elem::min(neg(self), neg(o)))
            }
            #[inline(always)]
            fn avg(self, n: usize) -> Self { Narrow::narrow(self.widen() / n as f32) }
        }
    )*};
}

/// An E4M3 code (see [`fp8`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(transparent)]
struct E4M3(u8);

/// An E5M2 code (see [`fp8`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(transparent)]
struct E5M2(u8);

narrow_float! {
    f16: u16, 0x8000, |x: f16| narrow::f16_to_f32(x.to_bits()),
        |x| f16::from_bits(narrow::f32_to_f16(x)), f16::to_bits, f16::from_bits;
    bf16: u16, 0x8000, |x: bf16| narrow::bf16_to_f32(x.to_bits()),
        |x| bf16::from_bits(narrow::f32_to_bf16(x)), bf16::to_bits, bf16::from_bits;
    E4M3: u8, 0x80, |x: E4M3| e4m3_to_f32(x.0), |x| E4M3(e4m3_from_f32(x)), |x: E4M3| x.0, E4M3;
    E5M2: u8, 0x80, |x: E5M2| e5m2_to_f32(x.0), |x| E5M2(e5m2_from_f32(x)), |x: E5M2| x.0, E5M2;
}

#[cfg(test)]
mod tests;
