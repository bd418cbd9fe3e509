//! The two 8-bit float formats (OCP OFP8): E4M3 ("FN": bias 7, no
//! infinities, NaN = `0x7F`/`0xFF`, largest finite 448) and E5M2 (bias 15,
//! IEEE-like with ±Inf = `0x7C`/`0xFC` and NaNs above, largest finite 57344).
//!
//! Decoding is exact (every code is an f32) and goes through a 256-entry
//! table built at compile time. Encoding rounds to nearest, ties to even;
//! a value that rounds beyond the largest finite code becomes NaN in E4M3
//! (it has no infinity) and ±Inf in E5M2, as in OCP's non-saturating mode.
//! CUDA's `__nv_fp8_*` constructors saturate instead (`__NV_SATFINITE`);
//! the inputs `check` builds never come near either limit, so the two agree
//! on every checked result.

/// Mantissa bits and exponent bias of one format.
#[derive(Clone, Copy)]
struct Format {
    mbits: u32,
    bias: i32,
    /// E4M3's "FN" encoding: no infinities, only all-ones is NaN.
    finite_only: bool,
}

const E4M3: Format = Format {
    mbits: 3,
    bias: 7,
    finite_only: true,
};
const E5M2: Format = Format {
    mbits: 2,
    bias: 15,
    finite_only: false,
};

const F32_QNAN: u32 = 0x7FC0_0000;
const F32_INF: u32 = 0x7F80_0000;

/// The f32 bits of one code, written out case by case: the reference the
/// branch-free decoders are tested against.
#[cfg(test)]
fn decode(code: u32, f: Format) -> u32 {
    let sign = (code & 0x80) << 24;
    let ebits = 7 - f.mbits;
    let emax = (1 << ebits) - 1;
    let e = (code >> f.mbits) & emax;
    let m = code & ((1 << f.mbits) - 1);
    let mag = if f.finite_only && code & 0x7F == 0x7F {
        F32_QNAN
    } else if !f.finite_only && e == emax {
        if m == 0 {
            F32_INF
        } else {
            F32_QNAN
        }
    } else if e == 0 {
        if m == 0 {
            0
        } else {
            // Subnormal: m * 2^(1 - bias - mbits), normalised for f32.
            let top = 31 - m.leading_zeros();
            let exp = top as i32 + 1 - f.bias - f.mbits as i32;
            let frac = (m - (1 << top)) << (23 - top);
            (((exp + 127) as u32) << 23) | frac
        }
    } else {
        (((e as i32 - f.bias + 127) as u32) << 23) | (m << (23 - f.mbits))
    };
    sign | mag
}

/// The f32 bits of an E4M3 code, without branches (E5M2 codes are the top
/// byte of an f16 and widen through it).
#[inline(always)]
fn e4m3_bits(code: u8) -> u32 {
    let c = u32::from(code);
    let shifted = (c & 0x7F) << 20; // exponent and mantissa in f32 places
    let normal = shifted + ((127 - 7) << 23);
    // Zero and subnormals: 2^-6 × (1 + m/8) − 2^-6 = m × 2^-9, exactly.
    let sub = (f32::from_bits(normal + (1 << 23)) - f32::from_bits((127 - 6) << 23)).to_bits();
    let mag = if c & 0x7F == 0x7F {
        F32_QNAN
    } else if c & 0x78 == 0 {
        sub
    } else {
        normal
    };
    mag | (c & 0x80) << 24
}

/// Rounds `x` to a code, without branches so that loops vectorise.
#[inline(always)]
fn encode(x: f32, f: Format) -> u8 {
    let bits = x.to_bits();
    let sign = (bits >> 24) & 0x80;
    let abs = bits & 0x7FFF_FFFF;
    let shift = 23 - f.mbits;
    // Normal results: rebias the exponent and round to nearest even at
    // `shift`; a carry out of the mantissa lands in the exponent.
    let odd = (abs >> shift) & 1;
    let rebias = ((127 - f.bias) as u32) << 23;
    let normal = abs
        .wrapping_sub(rebias)
        .wrapping_add((1 << (shift - 1)) - 1 + odd)
        >> shift;
    // Subnormal results: adding a power of two whose ulp is the format's
    // smallest step makes the FPU round to nearest even in that unit.
    let magic = ((127 + 1 - f.bias - f.mbits as i32 + 23) as u32) << 23;
    let sub = (f32::from_bits(abs) + f32::from_bits(magic))
        .to_bits()
        .wrapping_sub(magic);
    let min_normal = ((127 + 1 - f.bias) as u32) << 23;
    let code = if abs < min_normal { sub } else { normal };
    let (max_code, overflow) = if f.finite_only {
        (0x7E, 0x7F)
    } else {
        (0x7B, 0x7C)
    };
    let code = if abs > F32_INF {
        0x7F // NaN in both formats
    } else if code > max_code {
        overflow // Inf and finite overflow: NaN in E4M3, Inf in E5M2
    } else {
        code
    };
    (sign | code) as u8
}

/// The value of an E4M3 code (exact).
#[inline(always)]
pub fn e4m3_to_f32(code: u8) -> f32 {
    f32::from_bits(e4m3_bits(code))
}

/// The E4M3 code nearest `x` (ties to even; beyond ±464 and NaN give NaN).
#[inline(always)]
pub fn e4m3_from_f32(x: f32) -> u8 {
    encode(x, E4M3)
}

/// The value of an E5M2 code (exact).
#[inline(always)]
pub fn e5m2_to_f32(code: u8) -> f32 {
    super::narrow::f16_to_f32(u16::from(code) << 8)
}

/// The E5M2 code nearest `x` (ties to even; from ±61440 on gives ±Inf).
#[inline(always)]
pub fn e5m2_from_f32(x: f32) -> u8 {
    encode(x, E5M2)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Conv = (fn(u8) -> f32, fn(f32) -> u8);
    const FORMATS: [(Conv, Format); 2] = [
        ((e4m3_to_f32, e4m3_from_f32), E4M3),
        ((e5m2_to_f32, e5m2_from_f32), E5M2),
    ];

    #[test]
    fn decoders_match_the_reference() {
        for c in 0..=255u8 {
            for ((to, _), f) in FORMATS {
                let (got, want) = (to(c), f32::from_bits(decode(u32::from(c), f)));
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0xB8), -1.0);
        assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
        assert_eq!(e4m3_to_f32(0x78), 256.0); // exponent all ones is finite in E4M3
        assert_eq!(e5m2_to_f32(0x7B), 57344.0);
        assert_eq!(e5m2_to_f32(0x7C), f32::INFINITY);
        assert_eq!(e5m2_to_f32(0xFC), f32::NEG_INFINITY);
        assert!(e5m2_to_f32(0x7D).is_nan());
        assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
        assert_eq!(e5m2_to_f32(0x3C), 1.0);
        assert_eq!(e4m3_to_f32(0x80).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn every_code_round_trips() {
        for ((to, from), _) in FORMATS {
            for c in 0..=255u8 {
                let x = to(c);
                if x.is_nan() {
                    assert!(to(from(x)).is_nan(), "code {c:#04x}");
                } else {
                    assert_eq!(from(x), c, "code {c:#04x} value {x}");
                }
            }
        }
    }

    #[test]
    fn overflow_and_specials() {
        assert_eq!(e4m3_from_f32(460.0), 0x7E);
        assert_eq!(e4m3_from_f32(464.0), 0x7E); // tie: 448 is the even neighbour
        assert_eq!(e4m3_from_f32(464.01), 0x7F);
        assert_eq!(e4m3_from_f32(-1e9), 0xFF);
        assert_eq!(e4m3_from_f32(f32::INFINITY), 0x7F);
        assert_eq!(e4m3_from_f32(f32::NAN) & 0x7F, 0x7F);
        assert_eq!(e5m2_from_f32(61439.0), 0x7B);
        assert_eq!(e5m2_from_f32(61440.0), 0x7C); // tie: Inf is the even neighbour
        assert_eq!(e5m2_from_f32(f32::NEG_INFINITY), 0xFC);
        assert!(e5m2_to_f32(e5m2_from_f32(f32::NAN)).is_nan());
        assert_eq!(e4m3_from_f32(2f32.powi(-10)), 0x00); // tie with zero
        assert_eq!(e4m3_from_f32(2f32.powi(-10) * 1.01), 0x01);
        assert_eq!(e4m3_from_f32(3.0 * 2f32.powi(-10)), 0x02); // tie 1.5 -> 2
        assert_eq!(e4m3_from_f32(f32::MIN_POSITIVE / 2.0), 0x00);
    }

    /// Nearest finite code by brute force, with the format's overflow rule:
    /// the step past the largest finite value stands for "overflow".
    fn reference(x: f32, to: fn(u8) -> f32, f: Format) -> u8 {
        let (max_code, overflow) = if f.finite_only {
            (0x7Eu8, 0x7Fu8)
        } else {
            (0x7B, 0x7C)
        };
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let a = f64::from(x.abs());
        let step = f64::from(to(max_code)) - f64::from(to(max_code - 1));
        let mut best = (f64::INFINITY, 0u8);
        for c in 0..=max_code + 1 {
            let v = if c > max_code {
                f64::from(to(max_code)) + step
            } else {
                f64::from(to(c))
            };
            let d = (v - a).abs();
            if d < best.0 || (d == best.0 && c % 2 == 0) {
                best = (d, c);
            }
        }
        if best.1 > max_code {
            sign | overflow
        } else {
            sign | best.1
        }
    }

    #[test]
    fn rounding_matches_brute_force() {
        for ((to, from), f) in FORMATS {
            let mut probes: Vec<f32> = Vec::new();
            for c in 0..0x7Fu8 {
                let (lo, hi) = (to(c), to(c + 1));
                if !hi.is_finite() {
                    continue;
                }
                let mid = (lo + hi) / 2.0;
                let (up, down) = (mid.to_bits() + 1, mid.to_bits() - 1);
                let above_lo = lo.to_bits() + 1;
                probes.extend([mid, f32::from_bits(up), f32::from_bits(down)]);
                probes.push(f32::from_bits(above_lo));
            }
            let mut s = 0x9E37_79B9u32;
            for _ in 0..20_000 {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                // Magnitudes from 2^-25 to 2^17.
                probes.push(f32::from_bits(0x3300_0000 + (s >> 4) % 0x1500_0000));
            }
            for x in probes {
                for v in [x, -x] {
                    assert_eq!(from(v), reference(v, to, f), "value {v:e}");
                }
            }
        }
    }
}
