//! The input function: determinism, variety, and the bounds that make every
//! reduction order exact.

use super::bits::*;
use super::*;
use crate::engine::elem::{e4m3_to_f32, e5m2_to_f32};
use half::{bf16, f16};

fn rule(seed: u64, dtype: Dtype, op: ReduceOp, nranks: usize) -> Rule {
    Rule {
        seed,
        dtype,
        op,
        nranks,
        scalar: crate::engine::elem::Scalar::parse("3")
            .and_then(|s| s.bits(dtype).ok())
            .unwrap_or(1),
    }
}

fn filled(r: &Rule, rank: usize, count: usize) -> Vec<u64> {
    let s = r.dtype.size();
    let mut buf = vec![0u8; count * s];
    fill_input(r, rank, &mut buf);
    buf.chunks_exact(s)
        .map(|c| {
            let mut raw = [0u8; 8];
            raw[..s].copy_from_slice(c);
            u64::from_le_bytes(raw)
        })
        .collect()
}

/// A float element's value.
fn to_f64(dt: Dtype, bits: u64) -> f64 {
    match dt {
        Dtype::F16 => f16::from_bits(bits as u16).to_f64(),
        Dtype::Bf16 => bf16::from_bits(bits as u16).to_f64(),
        Dtype::F32 => f64::from(f32::from_bits(bits as u32)),
        Dtype::F64 => f64::from_bits(bits),
        Dtype::F8E4M3 => f64::from(e4m3_to_f32(bits as u8)),
        Dtype::F8E5M2 => f64::from(e5m2_to_f32(bits as u8)),
        _ => unreachable!("not a float"),
    }
}

fn differing(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[test]
fn same_rule_same_bytes_whatever_the_length() {
    for dt in Dtype::ALL {
        for op in ReduceOp::ALL {
            let r = rule(7, dt, op, 5);
            let long = filled(&r, 3, 300);
            assert_eq!(long, filled(&r, 3, 300));
            assert_eq!(&long[..17], &filled(&r, 3, 17)[..]);
        }
    }
}

#[test]
fn inputs_vary_with_rank_index_seed_op_and_rank_count() {
    let count = 256;
    let enough = count * 3 / 10; // the narrowest types hold few values
    for dt in Dtype::ALL {
        for op in ReduceOp::ALL {
            for n in [2, 8] {
                let r = rule(11, dt, op, n);
                let (a, b) = (filled(&r, 0, count + 1), filled(&r, 1, count + 1));
                let what = format!("{dt} {op} n={n}");
                assert!(
                    differing(&a[..count], &b[..count]) >= enough,
                    "ranks: {what}"
                );
                assert!(differing(&a[..count], &a[1..]) >= enough, "indices: {what}");
                let other_seed = filled(&rule(12, dt, op, n), 0, count);
                assert!(
                    differing(&a[..count], &other_seed) >= enough,
                    "seeds: {what}"
                );
                let other_n = filled(&rule(11, dt, op, n + 1), 0, count);
                assert!(
                    differing(&a[..count], &other_n) >= enough,
                    "rank counts: {what}"
                );
            }
            let (sum, prod) = (
                filled(&rule(11, dt, ReduceOp::Sum, 4), 0, count),
                filled(&rule(11, dt, ReduceOp::Prod, 4), 0, count),
            );
            assert!(differing(&sum, &prod) >= enough / 2, "ops: {dt}");
        }
    }
}

/// Units: every family's absolute values add up to at most the budget, for
/// rank counts up to thousands, and the budget at the largest scale, like
/// one unit at the smallest, is exactly representable.
#[test]
fn unit_budgets_keep_every_partial_sum_exact() {
    for dt in Dtype::ALL {
        let (budget, lo, hi) = units_budget(dt);
        for n in [1, 2, 3, 5, 8, 100, 3000] {
            for op in [ReduceOp::Sum, ReduceOp::Avg] {
                let gen = Gen::new(&rule(3, dt, op, n), 0);
                if !matches!(gen.scheme, Scheme::Units { .. }) {
                    continue;
                }
                for f in 0..FAMILIES {
                    let total: u128 = (0..n).map(|pos| gen.value(f, pos).unsigned_abs()).sum();
                    assert!(
                        total <= budget,
                        "{dt} {op} n={n} family {f}: {total} > {budget}"
                    );
                    let nonzero = (0..n).filter(|&pos| gen.value(f, pos) != 0).count();
                    let signed = dt.is_float() || is_signed(dt);
                    let active = n.min(usize::try_from(budget).unwrap_or(usize::MAX));
                    assert!(nonzero == active || !signed, "{dt} {op} n={n}: zeros");
                }
            }
        }
        if dt.is_float() {
            let big = budget as f64 * 2f64.powi(hi);
            assert_eq!(to_f64(dt, units_bits(dt, budget as i128, hi)), big, "{dt}");
            assert_eq!(
                to_f64(dt, units_bits(dt, -(budget as i128) + 1, hi)),
                -big + 2f64.powi(hi)
            );
            assert_eq!(to_f64(dt, units_bits(dt, 1, lo)), 2f64.powi(lo), "{dt}");
        }
    }
}

#[test]
fn largest_products_are_representable() {
    for dt in Dtype::ALL {
        let t = max_twos(dt);
        for neg in [false, true] {
            let bits = pow2_bits(dt, neg && (dt.is_float() || is_signed(dt)), t as u32);
            if dt.is_float() {
                assert_eq!(to_f64(dt, bits).abs(), 2f64.powi(t as i32), "{dt}");
            } else if is_signed(dt) {
                let shift = 64 - 8 * dt.size() as u32;
                let v = ((bits << shift) as i64) >> shift; // sign-extended
                assert_eq!(v.unsigned_abs(), 1u64 << t, "{dt}");
                assert!(t < 8 * dt.size() - 1, "{dt}: 2^{t} does not fit");
            } else {
                assert_eq!(bits, 1u64 << t, "{dt}");
            }
        }
    }
}

#[test]
fn keys_map_in_order_onto_finite_values() {
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        let top = kmax(dt);
        assert_eq!(to_f64(dt, key_bits(dt, 0)), -to_f64(dt, max_finite(dt)));
        assert_eq!(to_f64(dt, key_bits(dt, top)), to_f64(dt, max_finite(dt)));
        assert_eq!(key_bits(dt, top / 2), 0, "{dt}: the middle key is +0");
        let mut s = 0x1234_5678_9ABC_DEF1u64;
        let mut prev = (0, to_f64(dt, key_bits(dt, 0)));
        let mut keys: Vec<u64> = (0..2000)
            .map(|_| {
                s = mix(s);
                below(s, u128::from(top) + 1) as u64
            })
            .collect();
        keys.sort_unstable();
        for k in keys {
            let bits = key_bits(dt, k);
            let v = to_f64(dt, bits);
            assert!(v.is_finite() && is_finite(dt, bits), "{dt} key {k}");
            assert!(v > prev.1 || k == prev.0, "{dt}: key {k} out of order");
            assert_eq!(float_key(dt, bits), k, "{dt}");
            prev = (k, v);
        }
    }
    assert_eq!(key_bits(Dtype::I8, 0), 0x80);
    assert_eq!(key_bits(Dtype::I8, 255), 0x7F);
    assert_eq!(key_bits(Dtype::U32, 5), 5);
}

#[test]
fn poison_is_a_nan_for_floats_and_never_an_input() {
    for dt in Dtype::ALL {
        let mut buf = vec![0u8; 3 * dt.size() + 1];
        poison(dt, &mut buf);
        let p = poison_bits(dt).to_le_bytes();
        assert_eq!(&buf[..dt.size()], &p[..dt.size()]);
        assert_eq!(buf[3 * dt.size()], p[0]);
        if dt.is_float() {
            assert!(to_f64(dt, poison_bits(dt)).is_nan(), "{dt}");
            for op in ReduceOp::ALL {
                let values = filled(&rule(5, dt, op, 3), 1, 1000);
                assert!(values.iter().all(|&v| is_finite(dt, v)), "{dt} {op}");
            }
        }
    }
}

#[test]
fn elements_print_value_and_bits() {
    assert_eq!(format_elem(Dtype::F32, 0x3FC0_0000), "1.5 (0x3fc00000)");
    assert_eq!(format_elem(Dtype::I8, 0xA5), "-91 (0xa5)");
    assert_eq!(format_elem(Dtype::U64, 7), "7 (0x0000000000000007)");
    assert_eq!(format_elem(Dtype::F16, 0x3E00), "1.5 (0x3e00)");
    assert_eq!(format_elem(Dtype::F8E4M3, 0x7F), "NaN (0x7f)");
    assert_eq!(format_elem(Dtype::F8E5M2, 0xFC), "-inf (0xfc)");
}
