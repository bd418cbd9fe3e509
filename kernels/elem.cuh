// collbench kernels: element arithmetic, bit for bit what the host engine
// does (src/engine/elem.rs):
// - integers: sum and product wrap; min and max as usual; avg divides the
//   wrapped sum by the rank count, truncating toward zero;
// - floats: IEEE, round to nearest even; f16, bf16 and fp8 computed in f32
//   and rounded once; min/max return NaN when either operand is NaN and
//   treat -0 as below +0 (equal values merge their bits);
// - conversions are the branch-free integer forms of the host engine, so
//   the two agree on every code, NaNs included.
// The file is compiled for one element type CB_DT and one operator CB_OP.

#ifndef CB_DT
#error "define CB_DT (an element type id from abi.cuh)"
#endif
#ifndef CB_OP
#define CB_OP CB_SUM
#endif

#define CB_F32_INF 0x7F800000u
#define CB_F32_QNAN 0x7FC00000u

CB_DEVICE float cb_f16_to_f32(u16 h16) {
    u32 h = h16;
    u32 shifted = (h & 0x7FFFu) << 13;
    u32 exp = shifted & 0x0F800000u;
    u32 normal = shifted + ((127u - 15u) << 23);
    u32 special = normal + ((128u - 16u) << 23);
    u32 sub = cb_f32_bits(cb_f32(normal + (1u << 23)) - cb_f32(113u << 23));
    u32 mag = exp == 0x0F800000u ? special : (exp == 0 ? sub : normal);
    return cb_f32(mag | (h & 0x8000u) << 16);
}

CB_DEVICE u16 cb_f32_to_f16(float x) {
    const u32 limit = (127u + 16u) << 23;
    const u32 min_normal = 113u << 23;
    const u32 magic = 126u << 23;
    u32 bits = cb_f32_bits(x);
    u32 sign = (bits >> 16) & 0x8000u;
    u32 abs = bits & 0x7FFFFFFFu;
    u32 odd = (abs >> 13) & 1u;
    u32 normal = (abs - ((127u - 15u) << 23) + 0xFFFu + odd) >> 13;
    u32 sub = cb_f32_bits(cb_f32(abs) + cb_f32(magic)) - magic;
    u32 big = abs > CB_F32_INF ? 0x7E00u : 0x7C00u;
    u32 mag = abs >= limit ? big : (abs < min_normal ? sub : normal);
    return (u16)(mag | sign);
}

CB_DEVICE float cb_bf16_to_f32(u16 b) { return cb_f32((u32)b << 16); }

CB_DEVICE u16 cb_f32_to_bf16(float x) {
    u32 bits = cb_f32_bits(x);
    u32 rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    u32 nan = (bits >> 16) | 0x40u;
    return (u16)((bits & 0x7FFFFFFFu) > CB_F32_INF ? nan : rounded);
}

CB_DEVICE float cb_e4m3_to_f32(u8 code) {
    u32 c = code;
    u32 shifted = (c & 0x7Fu) << 20;
    u32 normal = shifted + ((127u - 7u) << 23);
    u32 sub = cb_f32_bits(cb_f32(normal + (1u << 23)) - cb_f32((127u - 6u) << 23));
    u32 mag = (c & 0x7Fu) == 0x7Fu ? CB_F32_QNAN : ((c & 0x78u) == 0 ? sub : normal);
    return cb_f32(mag | (c & 0x80u) << 24);
}

CB_DEVICE float cb_e5m2_to_f32(u8 code) { return cb_f16_to_f32((u16)((u16)code << 8)); }

// Round to nearest even into an fp8 format of `mbits` mantissa bits.
CB_DEVICE u8 cb_fp8_encode(float x, u32 mbits, i32 bias, bool finite_only) {
    u32 bits = cb_f32_bits(x);
    u32 sign = (bits >> 24) & 0x80u;
    u32 abs = bits & 0x7FFFFFFFu;
    u32 shift = 23u - mbits;
    u32 odd = (abs >> shift) & 1u;
    u32 rebias = (u32)(127 - bias) << 23;
    u32 normal = (abs - rebias + ((1u << (shift - 1)) - 1u + odd)) >> shift;
    u32 magic = (u32)(127 + 1 - bias - (i32)mbits + 23) << 23;
    u32 sub = cb_f32_bits(cb_f32(abs) + cb_f32(magic)) - magic;
    u32 min_normal = (u32)(127 + 1 - bias) << 23;
    u32 code = abs < min_normal ? sub : normal;
    u32 max_code = finite_only ? 0x7Eu : 0x7Bu;
    u32 overflow = finite_only ? 0x7Fu : 0x7Cu;
    code = abs > CB_F32_INF ? 0x7Fu : (code > max_code ? overflow : code);
    return (u8)(sign | code);
}

CB_DEVICE u8 cb_f32_to_e4m3(float x) { return cb_fp8_encode(x, 3, 7, true); }
CB_DEVICE u8 cb_f32_to_e5m2(float x) { return cb_fp8_encode(x, 2, 15, false); }

// ---- the element type: its bits type, and how it widens and narrows ----

#define CB_KIND_INT 0
#define CB_KIND_NARROW 1
#define CB_KIND_F32 2
#define CB_KIND_F64 3

#if CB_DT == CB_I8
typedef u8 cb_bits;
typedef i8 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 1
#elif CB_DT == CB_U8
typedef u8 cb_bits;
typedef u8 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 0
#elif CB_DT == CB_I32
typedef u32 cb_bits;
typedef i32 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 1
#elif CB_DT == CB_U32
typedef u32 cb_bits;
typedef u32 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 0
#elif CB_DT == CB_I64
typedef u64 cb_bits;
typedef i64 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 1
#elif CB_DT == CB_U64
typedef u64 cb_bits;
typedef u64 cb_signed;
#define CB_KIND CB_KIND_INT
#define CB_SIGNED 0
#elif CB_DT == CB_F16
typedef u16 cb_bits;
#define CB_KIND CB_KIND_NARROW
#define CB_SIGN_BIT 0x8000u
CB_DEVICE float cb_widen(cb_bits b) { return cb_f16_to_f32(b); }
CB_DEVICE cb_bits cb_narrow(float x) { return cb_f32_to_f16(x); }
#elif CB_DT == CB_BF16
typedef u16 cb_bits;
#define CB_KIND CB_KIND_NARROW
#define CB_SIGN_BIT 0x8000u
CB_DEVICE float cb_widen(cb_bits b) { return cb_bf16_to_f32(b); }
CB_DEVICE cb_bits cb_narrow(float x) { return cb_f32_to_bf16(x); }
#elif CB_DT == CB_F32
typedef u32 cb_bits;
#define CB_KIND CB_KIND_F32
#define CB_SIGN_BIT 0x80000000u
#elif CB_DT == CB_F64
typedef u64 cb_bits;
#define CB_KIND CB_KIND_F64
#define CB_SIGN_BIT 0x8000000000000000ull
#elif CB_DT == CB_E4M3
typedef u8 cb_bits;
#define CB_KIND CB_KIND_NARROW
#define CB_SIGN_BIT 0x80u
CB_DEVICE float cb_widen(cb_bits b) { return cb_e4m3_to_f32(b); }
CB_DEVICE cb_bits cb_narrow(float x) { return cb_f32_to_e4m3(x); }
#elif CB_DT == CB_E5M2
typedef u8 cb_bits;
#define CB_KIND CB_KIND_NARROW
#define CB_SIGN_BIT 0x80u
CB_DEVICE float cb_widen(cb_bits b) { return cb_e5m2_to_f32(b); }
CB_DEVICE cb_bits cb_narrow(float x) { return cb_f32_to_e5m2(x); }
#else
#error "unknown CB_DT"
#endif

#define CB_SIZE ((u32)sizeof(cb_bits))

// ---- the operator ----

#if CB_KIND == CB_KIND_INT

CB_DEVICE cb_bits cb_sum(cb_bits a, cb_bits b) { return (cb_bits)(a + b); }
CB_DEVICE cb_bits cb_prod(cb_bits a, cb_bits b) { return (cb_bits)((u64)a * (u64)b); }
CB_DEVICE cb_bits cb_min(cb_bits a, cb_bits b) {
    return (cb_signed)a < (cb_signed)b ? a : b;
}
CB_DEVICE cb_bits cb_max(cb_bits a, cb_bits b) {
    return (cb_signed)a > (cb_signed)b ? a : b;
}
CB_DEVICE cb_bits cb_avg(cb_bits x, u32 n) {
#if CB_SIGNED
    bool neg = (cb_signed)x < 0;
    cb_bits mag = neg ? (cb_bits)(0 - x) : x;
    cb_bits q = (cb_bits)((u64)mag / (u64)n);
    return neg ? (cb_bits)(0 - q) : q;
#else
    return (cb_bits)((u64)x / (u64)n);
#endif
}

#else // floats

// Minimum on a float's bits compared through fa, fb (NaN-propagating,
// order-independent: equal values merge their bits).
#define CB_MIN_BITS(fa, fb, a, b) ((fa) < (fb) ? (a) : ((fb) < (fa) ? (b) : (cb_bits)((a) | (b))))

#if CB_KIND == CB_KIND_NARROW
CB_DEVICE cb_bits cb_sum(cb_bits a, cb_bits b) { return cb_narrow(cb_widen(a) + cb_widen(b)); }
CB_DEVICE cb_bits cb_prod(cb_bits a, cb_bits b) { return cb_narrow(cb_widen(a) * cb_widen(b)); }
CB_DEVICE cb_bits cb_min(cb_bits a, cb_bits b) {
    float fa = cb_widen(a), fb = cb_widen(b);
    return CB_MIN_BITS(fa, fb, a, b);
}
CB_DEVICE cb_bits cb_avg(cb_bits x, u32 n) { return cb_narrow(cb_widen(x) / (float)n); }
#elif CB_KIND == CB_KIND_F32
CB_DEVICE cb_bits cb_sum(cb_bits a, cb_bits b) { return cb_f32_bits(cb_f32(a) + cb_f32(b)); }
CB_DEVICE cb_bits cb_prod(cb_bits a, cb_bits b) { return cb_f32_bits(cb_f32(a) * cb_f32(b)); }
CB_DEVICE cb_bits cb_min(cb_bits a, cb_bits b) {
    float fa = cb_f32(a), fb = cb_f32(b);
    return CB_MIN_BITS(fa, fb, a, b);
}
CB_DEVICE cb_bits cb_avg(cb_bits x, u32 n) { return cb_f32_bits(cb_f32(x) / (float)n); }
#else
CB_DEVICE cb_bits cb_sum(cb_bits a, cb_bits b) { return cb_f64_bits(cb_f64(a) + cb_f64(b)); }
CB_DEVICE cb_bits cb_prod(cb_bits a, cb_bits b) { return cb_f64_bits(cb_f64(a) * cb_f64(b)); }
CB_DEVICE cb_bits cb_min(cb_bits a, cb_bits b) {
    double fa = cb_f64(a), fb = cb_f64(b);
    return CB_MIN_BITS(fa, fb, a, b);
}
CB_DEVICE cb_bits cb_avg(cb_bits x, u32 n) { return cb_f64_bits(cb_f64(x) / (double)n); }
#endif

// max(a, b) = -min(-a, -b): negation flips the sign bit only.
CB_DEVICE cb_bits cb_max(cb_bits a, cb_bits b) {
    return (cb_bits)(cb_min((cb_bits)(a ^ CB_SIGN_BIT), (cb_bits)(b ^ CB_SIGN_BIT)) ^ CB_SIGN_BIT);
}

#endif

// The operator this file is compiled for (avg sums, its division is
// cb_finish; premulsum sums, its scaling of the input is the kernels' cb_pre).
CB_DEVICE cb_bits cb_apply(cb_bits a, cb_bits b) {
#if CB_OP == CB_SUM || CB_OP == CB_AVG || CB_OP == CB_PREMULSUM
    return cb_sum(a, b);
#elif CB_OP == CB_PROD
    return cb_prod(a, b);
#elif CB_OP == CB_MIN
    return cb_min(a, b);
#elif CB_OP == CB_MAX
    return cb_max(a, b);
#else
#error "unknown CB_OP"
#endif
}

CB_DEVICE cb_bits cb_finish(cb_bits x, u32 nranks) {
#if CB_OP == CB_AVG
    return cb_avg(x, nranks < 1 ? 1 : nranks);
#else
    (void)nranks;
    return x;
#endif
}
