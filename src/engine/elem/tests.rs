//! `reduce` and `finish` against an independent scalar reference, for every
//! type and operator, with `dst` separate, unaligned and equal to an input.

use super::*;
use crate::engine::types::{Dtype, ReduceOp};

/// A little xorshift generator: tests need no crate for random bits.
struct Bits(u64);

impl Bits {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mask(dt: Dtype) -> u64 {
    match dt.size() {
        8 => u64::MAX,
        s => (1u64 << (8 * s)) - 1,
    }
}

fn signed(dt: Dtype) -> bool {
    matches!(dt, Dtype::I8 | Dtype::I32 | Dtype::I64)
}

fn int_value(dt: Dtype, bits: u64) -> i128 {
    let w = 8 * dt.size() as u32;
    let v = i128::from(bits & mask(dt));
    if signed(dt) && v >> (w - 1) == 1 {
        v - (1i128 << w)
    } else {
        v
    }
}

fn float_value(dt: Dtype, bits: u64) -> f64 {
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

/// Rounds an f64 to the type (through f32 for the narrow types: with f32's
/// 24 bits that double rounding equals a single one for + and ×).
fn float_bits(dt: Dtype, x: f64) -> u64 {
    match dt {
        Dtype::F16 => u64::from(f16::from_f32(x as f32).to_bits()),
        Dtype::Bf16 => u64::from(bf16::from_f32(x as f32).to_bits()),
        Dtype::F32 => u64::from((x as f32).to_bits()),
        Dtype::F64 => x.to_bits(),
        Dtype::F8E4M3 => u64::from(e4m3_from_f32(x as f32)),
        Dtype::F8E5M2 => u64::from(e5m2_from_f32(x as f32)),
        _ => unreachable!("not a float"),
    }
}

fn sign_bit(dt: Dtype, bits: u64) -> bool {
    bits >> (8 * dt.size() - 1) & 1 == 1
}

/// The reference `a op b` on bits.
fn reference(dt: Dtype, op: ReduceOp, a: u64, b: u64) -> u64 {
    if !dt.is_float() {
        let (x, y) = (int_value(dt, a), int_value(dt, b));
        let r = match op {
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => x + y,
            ReduceOp::Prod => x.wrapping_mul(y),
            ReduceOp::Min => x.min(y),
            ReduceOp::Max => x.max(y),
        };
        return r as u64 & mask(dt);
    }
    let (x, y) = (float_value(dt, a), float_value(dt, b));
    match op {
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => float_bits(dt, x + y),
        ReduceOp::Prod => float_bits(dt, x * y),
        ReduceOp::Min | ReduceOp::Max if x.is_nan() || y.is_nan() => float_bits(dt, f64::NAN),
        ReduceOp::Min if x == y => [b, a][usize::from(sign_bit(dt, a))],
        ReduceOp::Max if x == y => [a, b][usize::from(sign_bit(dt, a))],
        ReduceOp::Min => [b, a][usize::from(x < y)],
        ReduceOp::Max => [b, a][usize::from(x > y)],
    }
}

fn is_nan(dt: Dtype, bits: u64) -> bool {
    dt.is_float() && float_value(dt, bits).is_nan()
}

fn read(dt: Dtype, buf: &[u8], i: usize) -> u64 {
    let s = dt.size();
    let mut b = [0u8; 8];
    b[..s].copy_from_slice(&buf[i * s..(i + 1) * s]);
    u64::from_le_bytes(b)
}

/// Random element bits: for floats, half the time a small integer so that
/// sums and products stay ordinary, otherwise any pattern (NaN, Inf, ...).
fn random_elem(dt: Dtype, rng: &mut Bits) -> u64 {
    let r = rng.next();
    if dt.is_float() && r % 2 == 0 {
        return float_bits(dt, ((r >> 8) % 9) as f64 - 4.0);
    }
    (r >> 1) & mask(dt)
}

fn random_buf(dt: Dtype, len: usize, rng: &mut Bits) -> Vec<u8> {
    let mut v = Vec::with_capacity(len * dt.size() + 1);
    v.push(0); // offset 1: data starts unaligned
    for _ in 0..len {
        v.extend_from_slice(&random_elem(dt, rng).to_le_bytes()[..dt.size()]);
    }
    v
}

/// Runs `reduce` over `n` random inputs, with `dst` equal to input `alias`
/// (or separate), and compares every element with the left fold of the
/// reference.
fn check_case(dt: Dtype, op: ReduceOp, n: usize, alias: Option<usize>, rng: &mut Bits) {
    let len = 300; // two 128-byte chunks and a tail, at every element size
    let s = dt.size();
    let bufs: Vec<Vec<u8>> = (0..n).map(|_| random_buf(dt, len, rng)).collect();
    let mut out = match alias {
        Some(k) => bufs[k].clone(),
        None => vec![0u8; len * s + 1],
    };
    let d = out[1..].as_mut_ptr();
    let ptrs: Vec<*const u8> = (0..n)
        .map(|k| match alias {
            Some(a) if a == k => d as *const u8,
            _ => bufs[k][1..].as_ptr(),
        })
        .collect();
    // Premulsum: input 0 scaled by a random scalar (any bits: NaN, Inf...).
    let scalar = random_elem(dt, rng);
    // SAFETY: every pointer covers len elements; dst equals an input or is
    // separate from all of them.
    unsafe {
        if op == ReduceOp::PreMulSum {
            reduce_premul(dt, scalar, d, &ptrs, len);
        } else {
            reduce(dt, op, d, &ptrs, len);
        }
    };
    for i in 0..len {
        let mut want = read(dt, &bufs[0][1..], i);
        if op == ReduceOp::PreMulSum {
            want = reference(dt, ReduceOp::Prod, want, scalar);
        }
        for b in &bufs[1..] {
            want = reference(dt, op, want, read(dt, &b[1..], i));
        }
        let got = read(dt, &out[1..], i);
        let ok = if is_nan(dt, want) {
            is_nan(dt, got)
        } else {
            got == want
        };
        assert!(
            ok,
            "{dt} {op} n={n} alias={alias:?} i={i}: want {want:#x} got {got:#x}"
        );
    }
}

#[test]
fn reduce_matches_reference_for_every_type_and_op() {
    let mut rng = Bits(0x2545_F491_4F6C_DD1D);
    for dt in Dtype::ALL {
        for op in ReduceOp::ALL {
            for n in 1..=5 {
                check_case(dt, op, n, None, &mut rng);
                for k in 0..n {
                    check_case(dt, op, n, Some(k), &mut rng);
                }
            }
        }
    }
}

#[test]
fn reduce_with_dst_equal_to_two_inputs() {
    let mut x: Vec<u32> = (0..100).collect();
    let p = x.as_mut_ptr().cast::<u8>();
    // SAFETY: all three pointers are the same 100-element buffer.
    unsafe {
        reduce(
            Dtype::U32,
            ReduceOp::Sum,
            p,
            &[p as *const u8, p as *const u8],
            100,
        )
    };
    assert!(x.iter().enumerate().all(|(i, &v)| v == 2 * i as u32));
}

#[test]
fn reduce_with_nothing_to_do() {
    let mut x = [7u8; 4];
    // SAFETY: no inputs or no elements: nothing is touched.
    unsafe {
        reduce(Dtype::U8, ReduceOp::Sum, x.as_mut_ptr(), &[], 4);
        reduce(Dtype::U8, ReduceOp::Sum, x.as_mut_ptr(), &[x.as_ptr()], 0);
    }
    assert_eq!(x, [7; 4]);
}

#[test]
fn float_min_max_zeros_and_nan() {
    let min = |a: f32, b: f32| Elem::min(a, b);
    let max = |a: f32, b: f32| Elem::max(a, b);
    assert!(min(-0.0, 0.0).is_sign_negative() && min(0.0, -0.0).is_sign_negative());
    assert!(max(-0.0, 0.0).is_sign_positive() && max(0.0, -0.0).is_sign_positive());
    assert!(min(f32::NAN, 1.0).is_nan() && min(1.0, f32::NAN).is_nan());
    assert!(max(f32::NAN, 1.0).is_nan() && max(1.0, f32::NAN).is_nan());
    assert_eq!(min(f32::NEG_INFINITY, 3.0), f32::NEG_INFINITY);
    let h = |x: f32| f16::from_f32(x);
    assert!(Elem::max(h(f32::NAN), h(2.0)).is_nan());
    assert!(Elem::min(h(-0.0), h(0.0)).is_sign_negative());
    assert!(e4m3_to_f32(Elem::max(E4M3(0x7F), E4M3(0x38)).0).is_nan());
    assert_eq!(Elem::max(E4M3(0x80), E4M3(0x00)), E4M3(0x00));
}

fn avg_reference(dt: Dtype, bits: u64, n: usize) -> u64 {
    if dt.is_float() {
        let x = float_value(dt, bits);
        return match dt {
            Dtype::F64 => (x / n as f64).to_bits(),
            Dtype::F32 => u64::from((x as f32 / n as f32).to_bits()),
            _ => float_bits(dt, f64::from(x as f32 / n as f32)),
        };
    }
    // Rust's i128 division truncates toward zero, like C.
    (int_value(dt, bits) / n as i128) as u64 & mask(dt)
}

#[test]
fn finish_divides_for_avg_only() {
    let mut rng = Bits(0x9E37_79B9_7F4A_7C15);
    for dt in Dtype::ALL {
        for n in [1usize, 2, 3, 7, 8, 200, 1 << 40] {
            let len = 100;
            let buf = random_buf(dt, len, &mut rng);
            let mut out = buf.clone();
            // SAFETY: `out[1..]` holds `len` elements.
            unsafe { finish(dt, ReduceOp::Avg, n, out[1..].as_mut_ptr(), len) };
            for i in 0..len {
                let (x, got) = (read(dt, &buf[1..], i), read(dt, &out[1..], i));
                let want = avg_reference(dt, x, n);
                let ok = if is_nan(dt, want) {
                    is_nan(dt, got)
                } else {
                    got == want
                };
                assert!(ok, "{dt} n={n} x={x:#x}: want {want:#x} got {got:#x}");
                let one = avg_bits(dt, x, n);
                assert!(one == got || (is_nan(dt, one) && is_nan(dt, got)));
            }
            let mut same = buf.clone();
            // SAFETY: as above.
            unsafe { finish(dt, ReduceOp::Sum, n, same[1..].as_mut_ptr(), len) };
            assert_eq!(same, buf);
        }
    }
}

#[test]
fn integer_avg_truncates_toward_zero() {
    assert_eq!(
        avg_bits(Dtype::I32, (-7i32) as u32 as u64, 2),
        (-3i32) as u32 as u64
    );
    assert_eq!(avg_bits(Dtype::I8, 0x80, 128), 0xFF); // -128 / 128 = -1
    assert_eq!(avg_bits(Dtype::I8, 0x80, 129), 0);
    assert_eq!(avg_bits(Dtype::I64, i64::MIN as u64, 1), i64::MIN as u64);
    assert_eq!(avg_bits(Dtype::U64, u64::MAX, 0), u64::MAX); // 0 ranks counts as 1
}

/// `cargo test --release --lib elem::tests::throughput -- --ignored --nocapture`
#[test]
#[ignore = "a timing run, not a check"]
fn throughput() {
    for mib in [8, 64] {
        throughput_at(mib << 20);
    }
}

fn throughput_at(bytes: usize) {
    use std::hint::black_box;
    use std::time::Instant;
    let a = vec![1u8; bytes];
    let b = vec![2u8; bytes];
    let c = vec![3u8; bytes];
    let mut d = vec![0u8; bytes];
    // The best of several runs: the machine may be shared.
    let time = |f: &mut dyn FnMut()| {
        f();
        (0..30)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let copy = time(&mut || black_box(&mut d[..]).copy_from_slice(black_box(&a[..])));
    let gbs = |t: f64| bytes as f64 / t / 1e9;
    println!("{} MiB: memcpy {:.1} GB/s", bytes >> 20, gbs(copy));
    let dp = d.as_mut_ptr();
    for (dt, op) in [
        (Dtype::F32, ReduceOp::Sum),
        (Dtype::F64, ReduceOp::Sum),
        (Dtype::I32, ReduceOp::Sum),
        (Dtype::U8, ReduceOp::Sum),
        (Dtype::F32, ReduceOp::Max),
        (Dtype::F16, ReduceOp::Sum),
        (Dtype::Bf16, ReduceOp::Sum),
        (Dtype::F8E4M3, ReduceOp::Sum),
    ] {
        let len = bytes / dt.size();
        let sets: [(&str, Vec<*const u8>); 3] = [
            ("2 inputs", vec![a.as_ptr(), b.as_ptr()]),
            ("3 inputs", vec![a.as_ptr(), b.as_ptr(), c.as_ptr()]),
            ("dst=in0 ", vec![dp as *const u8, b.as_ptr()]),
        ];
        let mut line = format!("{dt:>8} {op}:");
        for (name, ins) in sets {
            // SAFETY: every buffer holds `bytes` bytes; dst is separate or in0.
            let t = time(&mut || unsafe { reduce(dt, op, black_box(dp), &ins, len) });
            line += &format!("  {name} {:5.1} GB/s ({:.2}x memcpy)", gbs(t), t / copy);
        }
        println!("{line}");
    }
}

#[test]
fn scalars_take_each_type() {
    let s = |t: &str| Scalar::parse(t).unwrap();
    assert_eq!(s("2").bits(Dtype::I32), Ok(2));
    assert_eq!(s("-1").bits(Dtype::U8), Ok(0xFF));
    assert_eq!(s("255").bits(Dtype::I8), Ok(0xFF));
    assert!(s("1000")
        .bits(Dtype::I8)
        .unwrap_err()
        .contains("does not fit int8"));
    assert!(s("-129").bits(Dtype::U8).is_err());
    assert!(s("4294967296").bits(Dtype::I32).is_err());
    assert_eq!(s("-9223372036854775808").bits(Dtype::I64), Ok(1 << 63));
    assert_eq!(s("18446744073709551615").bits(Dtype::U64), Ok(u64::MAX));
    assert!(s("0.5").bits(Dtype::I8).unwrap_err().contains("integer"));
    assert_eq!(s("0.5").bits(Dtype::F32), Ok(u64::from(0.5f32.to_bits())));
    assert_eq!(s("1e300").bits(Dtype::F64), Ok(1e300f64.to_bits()));
    assert!(s("1e300")
        .bits(Dtype::F32)
        .unwrap_err()
        .contains("not finite"));
    assert!(s("0").bits(Dtype::F16).unwrap_err().contains("zero"));
    assert!(s("1e-9").bits(Dtype::Bf16).is_ok());
    assert_eq!(s("3").bits(Dtype::F16), Ok(0x4200));
    assert_eq!(Scalar::parse("inf"), None);
    assert_eq!(Scalar::parse("x"), None);
    assert_eq!(Scalar::parse("1e30").unwrap().int, None);
}
