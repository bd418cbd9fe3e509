//! f16 and bf16 conversions to and from f32 written without branches, so
//! that the reduction loops around them vectorise (`half`'s own scalar
//! conversions test for F16C on every call). Results equal `half`'s (round
//! to nearest even) bit for bit, except that a NaN comes out as the quiet
//! NaN `0x7E00` (f16) or keeps its top payload bits (bf16).
//!
//! The f16 pair follows Fabian Giesen's public-domain `float_to_half_fast3_rtne`
//! and `half_to_float_fast5`.

const F32_INF: u32 = 0x7F80_0000;

/// The f32 value of f16 bits (exact).
#[inline(always)]
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let shifted = (h & 0x7FFF) << 13; // exponent and mantissa in f32 places
    let exp = shifted & 0x0F80_0000;
    let normal = shifted + ((127 - 15) << 23);
    let special = normal + ((128 - 16) << 23); // Inf/NaN: exponent to all ones
                                               // Zero and subnormals: 2^-14 × (1 + m/1024) − 2^-14 = m × 2^-24, exactly.
    let sub = (f32::from_bits(normal + (1 << 23)) - f32::from_bits(113 << 23)).to_bits();
    let mag = if exp == 0x0F80_0000 {
        special
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(mag | (h & 0x8000) << 16)
}

/// The f16 bits nearest `x` (ties to even; overflow gives ±Inf).
#[inline(always)]
pub(super) fn f32_to_f16(x: f32) -> u16 {
    const F16_LIMIT: u32 = (127 + 16) << 23; // 2^16: everything above is Inf
    const MIN_NORMAL: u32 = 113 << 23; // 2^-14
    const MAGIC: u32 = 126 << 23; // 0.5: its ulp is f16's smallest step, 2^-24
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let abs = bits & 0x7FFF_FFFF;
    let odd = (abs >> 13) & 1;
    let normal = abs.wrapping_sub((127 - 15) << 23).wrapping_add(0xFFF + odd) >> 13;
    let sub = (f32::from_bits(abs) + f32::from_bits(MAGIC))
        .to_bits()
        .wrapping_sub(MAGIC);
    let big = if abs > F32_INF { 0x7E00 } else { 0x7C00 };
    let mag = if abs >= F16_LIMIT {
        big
    } else if abs < MIN_NORMAL {
        sub
    } else {
        normal
    };
    (mag | sign) as u16
}

/// The f32 value of bf16 bits (exact).
#[inline(always)]
pub(super) fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// The bf16 bits nearest `x` (ties to even; overflow gives ±Inf).
#[inline(always)]
pub(super) fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
    let nan = (bits >> 16) | 0x40;
    (if bits & 0x7FFF_FFFF > F32_INF {
        nan
    } else {
        rounded
    }) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn every_f16_and_bf16_widens_like_half() {
        for h in 0..=u16::MAX {
            let (ours, theirs) = (f16_to_f32(h), f16::from_bits(h).to_f32());
            assert!(ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()));
            let (ours, theirs) = (bf16_to_f32(h), bf16::from_bits(h).to_f32());
            assert!(ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()));
        }
    }

    #[test]
    fn narrowing_matches_half() {
        // A stride through every f32 pattern, plus every f16/bf16 midpoint
        // and its neighbours.
        let mut probes: Vec<u32> = (0..=u32::MAX).step_by(997).collect();
        for h in 0..0x7BFFu16 {
            let mid = (f16::from_bits(h).to_f32() + f16::from_bits(h + 1).to_f32()) / 2.0;
            probes.extend([mid.to_bits() - 1, mid.to_bits(), mid.to_bits() + 1]);
        }
        for h in 0..0x7F80u32 {
            let mid = (h << 16) | 0x8000;
            probes.extend([mid - 1, mid, mid + 1]);
        }
        for p in probes {
            for bits in [p, p ^ 0x8000_0000] {
                let x = f32::from_bits(bits);
                let (ours, theirs) = (f32_to_f16(x), f16::from_f32(x).to_bits());
                let nan = |b: u16| f16::from_bits(b).is_nan();
                assert!(ours == theirs || (nan(ours) && nan(theirs)), "f16 {x:e}");
                let (ours, theirs) = (f32_to_bf16(x), bf16::from_f32(x).to_bits());
                let nan = |b: u16| bf16::from_bits(b).is_nan();
                assert!(ours == theirs || (nan(ours) && nan(theirs)), "bf16 {x:e}");
            }
        }
    }
}
