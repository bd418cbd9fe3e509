//! Deterministic inputs. Element `i` of rank `q`'s send buffer is a pure
//! function of (seed, dtype, op, nranks, q, i), built so that every order of
//! reduction gives bit-identical results and so that the reduction of all
//! ranks' element `i` has a closed form: checking an all-reduce costs O(1)
//! per element whatever the rank count.
//!
//! The construction. Each element index `i` hashes to a *family* `f` (one of
//! [`FAMILIES`]), a rotation `o`, a flip bit and, depending on the operator,
//! a scale or an offset. Rank `q` holds family `f`'s value at position
//! `(q + o) mod n`, transformed by the flip/scale/offset. Family values are
//! hashes of (f, position); their sum, product, min and max are tabulated
//! once per call, so the reduction of element `i` is a table lookup and a
//! transform. Per operator:
//!
//! - **integer sum** (`Wrap`): any 64-bit values plus a per-element offset;
//!   wrapping arithmetic is exact in any order.
//! - **float sum, float avg, integer avg** (`Units`): integers `w` with
//!   `|w| <= m`, held by `active = min(n, U)` positions (zero elsewhere),
//!   with `active * m <= U`, so every partial sum, in any order, stays within
//!   `U`. Floats: `U = 2^p` (p = mantissa bits with the implicit one: f16 11,
//!   bf16 8, f32 24, f64 53, e4m3 4, e5m2 3), and `w` is scaled by a
//!   per-element `2^e` kept inside the type's range, so every partial sum is
//!   an exactly representable multiple of `2^e`. Integers (avg): `U` is the
//!   type's maximum, so the sum never wraps before Avg divides it.
//! - **premulsum** (rank inputs times a scalar `S * 2^E`, `S` odd, before
//!   the sum): integers as integer sum (`Wrap`), the expectation times the
//!   scalar (wrapping multiplication distributes over wrapping sums); floats
//!   as `Units` with the budget `U / |S|` and the input's scale `2^(e - E)`,
//!   so every product is the exact `S * w * 2^e` and every partial sum of
//!   products stays within `U` units of `2^e`: exact in any order. A scalar
//!   with a long significand leaves few units (one, at worst: every element
//!   then has one nonzero contribution), but the check stays bit-exact.
//! - **product** (`Pow2`): factors ±1 and ±2 (unsigned: 1 and 2), with 2s
//!   only at the first `twos` positions, so every partial product is ±2^k
//!   with `k <= twos` (i8 6, u8 7, i32 30, u32 31, i64 62, u64 63, f16 15,
//!   e4m3 8, e5m2 15, wider floats 64).
//! - **min/max** (`Keys`): values anywhere in the type's finite range, drawn
//!   as order-preserving keys (for floats: sign-magnitude bits laid on one
//!   line, so spreading over all exponents), plus a per-element offset; the
//!   flip mirrors the key range, which swaps min and max. No -0 and no NaN.

mod bits;

pub use bits::format_elem;
pub(crate) use bits::{float_key, is_finite, mask, max_finite, poison_bits};

use crate::engine::elem::avg_bits;
use crate::engine::{Dtype, ReduceOp};
use bits::{int_bits, is_signed, key_bits, kmax, mirror_if, negate_if, pow2_bits, units_bits};

/// An element type known at compile time, so that the per-element helpers
/// below (each a `match` on the dtype) fold to straight-line code.
pub(crate) trait Kind {
    const DT: Dtype;
    const SIZE: usize;
}

macro_rules! kinds {
    ($($name:ident = $dt:ident, $size:expr;)*) => {$(
        pub(crate) struct $name;
        impl Kind for $name {
            const DT: Dtype = Dtype::$dt;
            const SIZE: usize = $size;
        }
    )*};
}

kinds! {
    KI8 = I8, 1; KU8 = U8, 1; KI32 = I32, 4; KU32 = U32, 4; KI64 = I64, 8; KU64 = U64, 8;
    KF16 = F16, 2; KBf16 = Bf16, 2; KF32 = F32, 4; KF64 = F64, 8; KE4M3 = F8E4M3, 1;
    KE5M2 = F8E5M2, 1;
}

/// Calls `$f::<Kind of $dt>($args)`.
macro_rules! with_kind {
    ($dt:expr, $f:ident, $($arg:expr),*) => {{
        use $crate::check::data as k;
        use $crate::engine::Dtype as D;
        match $dt {
            D::I8 => $f::<k::KI8>($($arg),*),
            D::U8 => $f::<k::KU8>($($arg),*),
            D::I32 => $f::<k::KI32>($($arg),*),
            D::U32 => $f::<k::KU32>($($arg),*),
            D::I64 => $f::<k::KI64>($($arg),*),
            D::U64 => $f::<k::KU64>($($arg),*),
            D::F16 => $f::<k::KF16>($($arg),*),
            D::Bf16 => $f::<k::KBf16>($($arg),*),
            D::F32 => $f::<k::KF32>($($arg),*),
            D::F64 => $f::<k::KF64>($($arg),*),
            D::F8E4M3 => $f::<k::KE4M3>($($arg),*),
            D::F8E5M2 => $f::<k::KE5M2>($($arg),*),
        }
    }};
}
pub(crate) use with_kind;

/// What inputs are made from: every rank builds the same rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub seed: u64,
    pub dtype: Dtype,
    pub op: ReduceOp,
    pub nranks: usize,
    /// PreMulSum's scalar: its bits in `dtype` (`Scalar::bits`); other
    /// operators ignore it.
    pub scalar: u64,
}

/// Writes rank `rank`'s input (its send buffer): `dst.len() / dtype.size()`
/// elements, little-endian; a partial element at the end is left alone.
/// Element `i` does not depend on the buffer's length.
pub fn fill_input(rule: &Rule, rank: usize, dst: &mut [u8]) {
    with_kind!(rule.dtype, fill_as, rule, rank, dst)
}

fn fill_as<K: Kind>(rule: &Rule, rank: usize, dst: &mut [u8]) {
    let gen = Gen::new(rule, dst.len() / K::SIZE);
    let q = gen.rank(rank);
    for (i, out) in dst.chunks_exact_mut(K::SIZE).enumerate() {
        out.copy_from_slice(&gen.input::<K>(q, i).to_le_bytes()[..K::SIZE]);
    }
}

/// Fills a receive buffer with the poison pattern before an operation, so
/// that an element the operation never writes is caught: a NaN with a
/// recognisable payload for floats, `0xA5` bytes for integers.
pub fn poison(dtype: Dtype, dst: &mut [u8]) {
    let pattern = poison_bits(dtype).to_le_bytes();
    let s = dtype.size();
    for (k, b) in dst.iter_mut().enumerate() {
        *b = pattern[k % s];
    }
}

/// Number of value families elements are spread over.
pub(crate) const FAMILIES: usize = 32;
/// Most entries of a family table (1 MiB).
const MAX_TABLE: usize = 1 << 17;
pub(crate) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a bijection that mixes every bit.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `x` mapped onto `0..range` (Lemire's multiply-shift; `range <= 2^64`).
#[inline(always)]
fn below(x: u64, range: u128) -> u128 {
    (u128::from(x) * range) >> 64
}

/// How values are drawn for one (dtype, op, nranks); see the module doc.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scheme {
    Wrap,
    Units {
        active: usize,
        /// Largest magnitude; signed values avoid 0, unsigned ones include it.
        m: u128,
        signed: bool,
        lo_exp: i32,
        exps: u64,
    },
    Pow2 {
        twos: usize,
    },
    Keys {
        kmax: u64,
    },
}

/// Per-family reductions: (sum, sum / n), (min, max) or (negatives, twos).
pub(crate) type Stats = Vec<(i128, i128)>;

/// The input function of one rule.
pub(crate) struct Gen {
    pub(crate) op: ReduceOp,
    pub(crate) n: usize,
    pub(crate) scheme: Scheme,
    /// PreMulSum's multiplier and exponent (`1, 0` for other operators):
    /// integers multiply the expected sum by `mul` (wrapping); floats scale
    /// inputs by `2^-mul_exp` and products are `mul` times the units at
    /// the element's scale.
    pub(crate) mul: i128,
    pub(crate) mul_exp: i32,
    /// Whether values may be negated (floats and signed integers; keys too).
    pub(crate) flips: bool,
    pub(crate) salt: u64,
    vsalt: u64,
    /// Every family's values, `[family * n + pos]`, as [`Gen::draw`] gives
    /// them (in 64 bits), when tabulating is cheaper than hashing per element.
    table: Option<Vec<u64>>,
}

impl Gen {
    /// The generator of `rule`, for work on about `elems` elements.
    pub(crate) fn new(rule: &Rule, elems: usize) -> Gen {
        let n = rule.nranks.max(1);
        let (dtype, op) = (rule.dtype, rule.op);
        let tag = (dtype as u64) | (op as u64) << 8 | (n as u64) << 16;
        let salt = mix(mix(rule.seed) ^ mix(tag.wrapping_mul(GOLDEN)));
        let (mul, mul_exp) = match op {
            ReduceOp::PreMulSum => premul_parts(dtype, rule.scalar),
            _ => (1, 0),
        };
        let scheme = scheme(dtype, op, n, mul, mul_exp);
        let mut gen = Gen {
            op,
            n,
            scheme,
            mul,
            mul_exp,
            flips: matches!(scheme, Scheme::Keys { .. }) || dtype.is_float() || is_signed(dtype),
            salt,
            vsalt: mix(salt ^ 0x5851_F42D_4C95_7F2D),
            table: None,
        };
        let entries = FAMILIES.saturating_mul(n);
        if entries <= elems.min(MAX_TABLE) {
            gen.table = Some(gen.raw_table());
        }
        gen
    }

    /// Every family's raw values, `[family * n + pos]`, as [`Gen::draw`]
    /// gives them, in 64 bits (signed unit counts as two's complement).
    pub(crate) fn raw_table(&self) -> Vec<u64> {
        let n = self.n;
        (0..FAMILIES.saturating_mul(n))
            .map(|k| self.draw(k / n, k % n) as u64)
            .collect()
    }

    pub(crate) fn nranks(&self) -> usize {
        self.n
    }

    /// `rank` taken into `0..n` (callers pass valid ranks; this keeps a bad
    /// one from indexing past the rotation).
    pub(crate) fn rank(&self, rank: usize) -> usize {
        debug_assert!(rank < self.n, "rank {rank} of {}", self.n);
        rank % self.n
    }

    #[inline(always)]
    fn elem_hash(&self, i: usize) -> u64 {
        mix(self.salt.wrapping_add((i as u64).wrapping_mul(GOLDEN)))
    }

    #[inline(always)]
    fn value_hash(&self, family: usize, pos: usize) -> u64 {
        let k = (family as u64).wrapping_mul(self.n as u64) + pos as u64;
        mix(self.vsalt.wrapping_add(k.wrapping_mul(GOLDEN)))
    }

    #[inline(always)]
    fn flip(&self, h: u64) -> bool {
        self.flips && (h >> 5) & 1 == 1
    }

    /// Second hash of an element, for its offset.
    #[inline(always)]
    fn offset(h: u64) -> u64 {
        mix(h ^ 0xD6E8_FEB8_6659_FD93)
    }

    /// Family `family`'s raw value at position `pos` (before the element's
    /// transform): a u64 (Wrap), a signed unit count (Units), a key (Keys)
    /// or bit 0 = negative, bit 1 = two (Pow2).
    #[inline(always)]
    fn value(&self, family: usize, pos: usize) -> i128 {
        let Some(table) = &self.table else {
            return self.draw(family, pos);
        };
        let raw = table[family * self.n + pos];
        match self.scheme {
            Scheme::Units { signed: true, .. } => i128::from(raw as i64),
            _ => i128::from(raw),
        }
    }

    /// [`Gen::value`] from the hashes.
    #[inline(always)]
    fn draw(&self, family: usize, pos: usize) -> i128 {
        match self.scheme {
            Scheme::Wrap => i128::from(self.value_hash(family, pos)),
            Scheme::Units {
                active, m, signed, ..
            } => {
                let h = self.value_hash(family, pos);
                if pos >= active {
                    0
                } else if signed {
                    let k = below(h, 2 * m) as i128 - m as i128; // -m..m-1
                    k + i128::from(k >= 0) // skip 0: -m..-1, 1..m
                } else {
                    below(h, m + 1) as i128
                }
            }
            Scheme::Pow2 { twos } => {
                let h = self.value_hash(family, pos);
                let neg = self.flips && h & 1 == 1;
                let two = pos < twos && h & 2 == 2;
                i128::from(neg) | i128::from(two) << 1
            }
            Scheme::Keys { kmax } => {
                below(self.value_hash(family, pos), u128::from(kmax / 2) + 1) as i128
            }
        }
    }

    /// The bits of element `i` of rank `q`'s input (`q < n`).
    #[inline(always)]
    pub(crate) fn input<K: Kind>(&self, q: usize, i: usize) -> u64 {
        let h = self.elem_hash(i);
        let o = below(h, self.n as u128) as usize;
        let pos = if q + o >= self.n {
            q + o - self.n
        } else {
            q + o
        };
        let v = self.value((h & (FAMILIES as u64 - 1)) as usize, pos);
        let flip = self.flip(h);
        match self.scheme {
            Scheme::Wrap => int_bits(K::DT, (v as u64).wrapping_add(Self::offset(h))),
            Scheme::Units { lo_exp, exps, .. } => units_bits(
                K::DT,
                negate_if(flip, v),
                exponent(h, lo_exp, exps) - self.mul_exp,
            ),
            Scheme::Pow2 { .. } => pow2_bits(K::DT, (v & 1 == 1) != flip, (v >> 1) as u32),
            Scheme::Keys { kmax } => {
                let key = v as u64 + key_offset(h, kmax);
                key_bits(K::DT, mirror_if(flip, key, kmax))
            }
        }
    }

    /// Each family's reduction over all `n` positions (O(FAMILIES × n)).
    pub(crate) fn stats(&self) -> Stats {
        (0..FAMILIES)
            .map(|f| {
                let values = (0..self.n).map(|pos| self.value(f, pos));
                match self.scheme {
                    Scheme::Wrap => (
                        i128::from(values.fold(0u64, |a, v| a.wrapping_add(v as u64))),
                        0,
                    ),
                    Scheme::Units { .. } => {
                        // Integer Avg: the quotient too (truncation is odd,
                        // so a flip negates it), sparing a 128-bit division
                        // per element.
                        let sum: i128 = values.sum();
                        (sum, sum / self.n as i128)
                    }
                    Scheme::Pow2 { .. } => {
                        values.fold((0, 0), |(negs, twos), v| (negs + (v & 1), twos + (v >> 1)))
                    }
                    Scheme::Keys { .. } => {
                        values.fold((i128::MAX, i128::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
                    }
                }
            })
            .collect()
    }

    /// The bits of OP over all ranks' element `i`, `finish` included.
    #[inline(always)]
    pub(crate) fn reduced<K: Kind>(&self, stats: &Stats, i: usize) -> u64 {
        let h = self.elem_hash(i);
        let (a, b) = stats[(h & (FAMILIES as u64 - 1)) as usize];
        let flip = self.flip(h);
        let n = self.n;
        match self.scheme {
            Scheme::Wrap => int_bits(
                K::DT,
                (a as u64)
                    .wrapping_add((n as u64).wrapping_mul(Self::offset(h)))
                    .wrapping_mul(self.mul as u64),
            ),
            Scheme::Units { lo_exp, exps, .. } => {
                let sum = negate_if(flip, a);
                let e = exponent(h, lo_exp, exps);
                match (self.op, K::DT.is_float()) {
                    (ReduceOp::Avg, true) => avg_bits(K::DT, units_bits(K::DT, sum, e), n),
                    (ReduceOp::Avg, false) => units_bits(K::DT, negate_if(flip, b), 0),
                    _ => units_bits(K::DT, sum * self.mul, e),
                }
            }
            Scheme::Pow2 { .. } => {
                let negs = a + i128::from(flip) * n as i128;
                pow2_bits(K::DT, negs & 1 == 1, b as u32)
            }
            Scheme::Keys { kmax } => {
                let c = key_offset(h, kmax);
                let (lo, hi) = (a as u64 + c, b as u64 + c);
                // A flip mirrors the keys, turning the lowest into the highest.
                let max = self.op == ReduceOp::Max;
                let key = mirror_if(flip, if max != flip { hi } else { lo }, kmax);
                key_bits(K::DT, key)
            }
        }
    }
}

/// The per-element scale exponent of the Units scheme.
#[inline(always)]
fn exponent(h: u64, lo: i32, exps: u64) -> i32 {
    lo + ((((h >> 8) & 0xFFFF) * exps) >> 16) as i32
}

/// The per-element offset of the Keys scheme: keys stay within `0..=kmax`.
#[inline(always)]
fn key_offset(h: u64, kmax: u64) -> u64 {
    below(Gen::offset(h), u128::from(kmax - kmax / 2) + 1) as u64
}

fn scheme(dtype: Dtype, op: ReduceOp, n: usize, mul: i128, mul_exp: i32) -> Scheme {
    match op {
        ReduceOp::Sum | ReduceOp::PreMulSum if !dtype.is_float() => Scheme::Wrap,
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => {
            let (mut budget, mut lo_exp, mut hi_exp) = units_budget(dtype);
            if op == ReduceOp::PreMulSum {
                budget = (budget / mul.unsigned_abs()).max(1);
                // A scalar outside [`premul_exps`]'s range is refused
                // before a run; keep at least one exponent regardless.
                (lo_exp, hi_exp) = premul_exps(dtype, mul_exp).unwrap_or((lo_exp, lo_exp));
            }
            let active = n.min(usize::try_from(budget).unwrap_or(usize::MAX));
            let m = budget / active as u128;
            let signed = dtype.is_float() || is_signed(dtype);
            Scheme::Units {
                active,
                m,
                signed,
                lo_exp,
                exps: (hi_exp - lo_exp + 1) as u64,
            }
        }
        ReduceOp::Prod => Scheme::Pow2 {
            twos: max_twos(dtype).min(n),
        },
        ReduceOp::Min | ReduceOp::Max => Scheme::Keys { kmax: kmax(dtype) },
    }
}

/// PreMulSum's scalar (`bits` of a `dtype` value) as `(mul, exp)`: floats
/// `S * 2^E` with `S` odd (signed), integers the scalar itself and 0.
pub(crate) fn premul_parts(dtype: Dtype, bits: u64) -> (i128, i32) {
    if !dtype.is_float() {
        return (i128::from(bits & mask(dtype)), 0);
    }
    let v = crate::engine::elem::to_f64(dtype, bits & mask(dtype));
    if v == 0.0 || !v.is_finite() {
        return (1, 0);
    }
    let b = v.to_bits();
    let (raw_exp, frac) = ((b >> 52) & 0x7FF, b & ((1 << 52) - 1));
    let (mant, exp) = if raw_exp == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, raw_exp as i32 - 1075)
    };
    let tz = mant.trailing_zeros();
    let s = i128::from(mant >> tz);
    (if v < 0.0 { -s } else { s }, exp + tz as i32)
}

/// The scale exponents of PreMulSum's products for a scalar of exponent
/// `mul_exp`: the sum's range shifted by the scalar's, within what the type
/// holds exactly (`2^e` at or above its smallest subnormal, `U * 2^e`
/// finite); None when nothing is left (the scalar is too large or too
/// small for checked values of the type).
pub(crate) fn premul_exps(dtype: Dtype, mul_exp: i32) -> Option<(i32, i32)> {
    let (_, lo, hi) = units_budget(dtype);
    let (tlo, thi) = match dtype {
        Dtype::F16 => (-24, 4),
        Dtype::Bf16 => (-133, 119),
        Dtype::F32 => (-149, 103),
        Dtype::F64 => (-1022, 970),
        Dtype::F8E4M3 => (-9, 4),
        Dtype::F8E5M2 => (-16, 12),
        _ => return Some((0, 0)),
    };
    let (a, b) = ((lo + mul_exp).max(tlo), (hi + mul_exp).min(thi));
    (a <= b).then_some((a, b))
}

/// Why premulsum cannot be checked with `scalar` (bits of a `dtype`
/// value), if it cannot.
pub fn premul_refusal(dtype: Dtype, scalar: u64) -> Option<String> {
    let (_, e) = premul_parts(dtype, scalar);
    premul_exps(dtype, e).is_none().then(|| {
        format!(
            "--scalar {} is too {} for premulsum on {dtype}: its products of the checked inputs leave the type's range",
            crate::check::format_elem(dtype, scalar & mask(dtype)),
            if e > 0 { "large" } else { "small" }
        )
    })
}

/// Units scheme: the budget `U` of units per element, and the range of the
/// per-element scale exponent (floats: `U * 2^hi` stays below the largest
/// finite value and `2^lo` at or above the smallest subnormal).
fn units_budget(dtype: Dtype) -> (u128, i32, i32) {
    match dtype {
        Dtype::I8 => (127, 0, 0),
        Dtype::U8 => (255, 0, 0),
        Dtype::I32 => (i32::MAX as u128, 0, 0),
        Dtype::U32 => (u32::MAX as u128, 0, 0),
        Dtype::I64 => (i64::MAX as u128, 0, 0),
        Dtype::U64 => (u64::MAX as u128, 0, 0),
        Dtype::F16 => (1 << 11, -8, 4),
        Dtype::Bf16 => (1 << 8, -8, 8),
        Dtype::F32 => (1 << 24, -8, 8),
        Dtype::F64 => (1 << 53, -8, 8),
        Dtype::F8E4M3 => (1 << 4, -8, 4),
        Dtype::F8E5M2 => (1 << 3, -8, 8),
    }
}

/// Pow2 scheme: the most factors of 2 an element's product may hold.
fn max_twos(dtype: Dtype) -> usize {
    match dtype {
        Dtype::I8 => 6,
        Dtype::U8 => 7,
        Dtype::I32 => 30,
        Dtype::U32 => 31,
        Dtype::I64 => 62,
        Dtype::U64 => 63,
        Dtype::F16 | Dtype::F8E5M2 => 15,
        Dtype::F8E4M3 => 8,
        Dtype::Bf16 | Dtype::F32 | Dtype::F64 => 64,
    }
}

#[cfg(test)]
mod tests;
