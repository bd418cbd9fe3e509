// collbench kernels: device-side inputs, poison and verification, bit for
// bit what src/check/data.rs and src/check/verify.rs do on the host.
//
// Everything heavy is computed on the host (src/check/device.rs): the
// salts, the scheme's parameters, every family's raw values and the
// per-family reductions. A kernel hashes the element index, looks the
// family's value up and transforms it, in 64-bit integer arithmetic (the
// host's 128-bit values all fit 64 bits once reduced modulo 2^64; see
// device.rs). The scheme is data, so these kernels depend on CB_DT only.

// These three structs have #[repr(C)] twins in src/check/device.rs.

// The input function of one rule (seed, dtype, op, nranks).
struct CbGen {
    // 2 * CB_FAMILIES words of per-family reductions (a, b), then the raw
    // values of every family, [CB_FAMILIES * nranks], [family * nranks + pos].
    const u64 *words;
    u64 salt;    // element hash salt
    u64 kmax;    // keys: the largest key
    u64 mid;     // floats: bits of the largest finite magnitude (the key of +0)
    u64 nranks;  // >= 1
    u32 scheme;  // CB_SCHEME_*
    u32 op;      // CB_SUM..CB_PREMULSUM
    u32 flips;   // whether elements may be negated or mirrored
    i32 lo_exp;  // units: smallest scale exponent
    u32 exps;    // units: number of scale exponents
    u32 ulps;    // verification tolerance in ULPs (float avg)
    u32 dtype;   // the CB_DT the header was built for
    i32 mul_exp; // premulsum: inputs are scaled by 2^-mul_exp (else 0)
    u64 mul;     // premulsum: the multiplier of expected values (else 1)
};

// What a receive buffer must hold: recv[k] is
// - CB_EXPECT_REDUCED: the reduction over all ranks of element src + k;
// - CB_EXPECT_INPUT:   element src + k of rank `rank`'s input;
// - CB_EXPECT_BLOCKS:  element src + k % block of rank k / block's input.
struct CbExpect {
    u64 kind;
    u64 rank;
    u64 src;
    u64 block;
};

// What cb_verify counts (the host zeroes it, with first = ~0, before).
struct CbVerdict {
    u64 wrong;  // elements differing from the expectation (beyond the tolerance)
    u64 nan;    // non-finite ones among them
    u64 first;  // lowest wrong index, ~0 if none
    u64 pad;
};

static_assert(sizeof(CbGen) == 80, "CbGen layout");
static_assert(sizeof(CbExpect) == 32, "CbExpect layout");
static_assert(sizeof(CbVerdict) == 32, "CbVerdict layout");

#define CB_SCHEME_WRAP 0u
#define CB_SCHEME_UNITS 1u
#define CB_SCHEME_POW2 2u
#define CB_SCHEME_KEYS 3u

#define CB_EXPECT_REDUCED 0u
#define CB_EXPECT_INPUT 1u
#define CB_EXPECT_BLOCKS 2u

#define CB_FAMILIES 32u
#define CB_GOLDEN 0x9E3779B97F4A7C15ull

// The element type's top bit, the exponent field of floats (all ones: not
// finite) and the poison pattern (src/check/data/bits.rs).
#define CB_TOP_BIT ((u64)1 << (8 * CB_SIZE - 1))
#if CB_DT == CB_I8 || CB_DT == CB_U8
#define CB_POISON 0xA5ull
#elif CB_DT == CB_I32 || CB_DT == CB_U32
#define CB_POISON 0xA5A5A5A5ull
#elif CB_DT == CB_I64 || CB_DT == CB_U64
#define CB_POISON 0xA5A5A5A5A5A5A5A5ull
#elif CB_DT == CB_F16
#define CB_POISON 0xFEA5ull
#define CB_EXP_MASK 0x7C00ull
#elif CB_DT == CB_BF16
#define CB_POISON 0xFFE5ull
#define CB_EXP_MASK 0x7F80ull
#elif CB_DT == CB_F32
#define CB_POISON 0xFFE5A5A5ull
#define CB_EXP_MASK 0x7F800000ull
#elif CB_DT == CB_F64
#define CB_POISON 0xFFFDA5A5A5A5A5A5ull
#define CB_EXP_MASK 0x7FF0000000000000ull
#elif CB_DT == CB_E4M3
#define CB_POISON 0xFFull
#define CB_EXP_MASK 0x7Full  // only all-ones is NaN; there is no infinity
#elif CB_DT == CB_E5M2
#define CB_POISON 0xFEull
#define CB_EXP_MASK 0x7Cull
#endif

// SplitMix64's finaliser.
CB_DEVICE u64 cb_mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

CB_DEVICE u64 cb_elem_hash(const CbGen &g, u64 i) { return cb_mix(g.salt + i * CB_GOLDEN); }
CB_DEVICE bool cb_gen_flip(const CbGen &g, u64 h) { return g.flips != 0 && ((h >> 5) & 1) != 0; }
CB_DEVICE u64 cb_elem_offset(u64 h) { return cb_mix(h ^ 0xD6E8FEB86659FD93ull); }
CB_DEVICE i32 cb_exponent(const CbGen &g, u64 h) {
    return g.lo_exp + (i32)((((h >> 8) & 0xFFFFu) * (u64)g.exps) >> 16);
}
CB_DEVICE u64 cb_key_offset(const CbGen &g, u64 h) {
    return cb_mulhi(cb_elem_offset(h), g.kmax - g.kmax / 2 + 1);
}

// The bits of a value the type holds exactly.
#if CB_KIND != CB_KIND_INT
CB_DEVICE cb_bits cb_exact(double x) {
#if CB_KIND == CB_KIND_F64
    return cb_f64_bits(x);
#elif CB_KIND == CB_KIND_F32
    return cb_f32_bits((float)x);
#else
    return cb_narrow((float)x);
#endif
}
#endif

// w * 2^e (w as a signed 64-bit value; integers: w wrapped, e unused).
CB_DEVICE cb_bits cb_units_bits(u64 w, i32 e) {
#if CB_KIND == CB_KIND_INT
    (void)e;
    return (cb_bits)w;
#else
    double scale = cb_f64((u64)(e + 1023) << 52);
    return cb_exact((double)(i64)w * scale);
#endif
}

// +-2^t.
CB_DEVICE cb_bits cb_pow2_bits(bool neg, u32 t) {
#if CB_KIND == CB_KIND_INT
    u64 v = t < 64 ? (u64)1 << t : 0;
    return (cb_bits)(neg ? 0 - v : v);
#else
    cb_bits b = cb_exact(cb_f64((u64)(t + 1023) << 52));
    return (cb_bits)(neg ? b | CB_TOP_BIT : b);
#endif
}

// Keys 0..=kmax onto the type's finite values, in order.
CB_DEVICE cb_bits cb_key_bits(const CbGen &g, u64 key) {
#if CB_KIND == CB_KIND_INT
    (void)g;
#if CB_SIGNED
    return (cb_bits)(key ^ CB_TOP_BIT);
#else
    return (cb_bits)key;
#endif
#else
    bool neg = key < g.mid;
    u64 mag = neg ? g.mid - key : key - g.mid;
    return (cb_bits)(neg ? mag | CB_TOP_BIT : mag);
#endif
}

CB_DEVICE u64 cb_mirror_if(bool flip, u64 key, u64 kmax) { return flip ? kmax - key : key; }

// Element i of rank q's input (q < nranks).
CB_DEVICE cb_bits cb_gen_input(const CbGen &g, u64 q, u64 i) {
    u64 h = cb_elem_hash(g, i);
    u64 pos = q + cb_mulhi(h, g.nranks);
    if (pos >= g.nranks) pos -= g.nranks;
    const u64 *table = g.words + 2 * CB_FAMILIES;
    u64 v = table[(h & (CB_FAMILIES - 1)) * g.nranks + pos];
    bool flip = cb_gen_flip(g, h);
    switch (g.scheme) {
    case CB_SCHEME_WRAP:
        return (cb_bits)(v + cb_elem_offset(h));
    case CB_SCHEME_UNITS:
        return cb_units_bits(flip ? 0 - v : v, cb_exponent(g, h) - g.mul_exp);
    case CB_SCHEME_POW2:
        return cb_pow2_bits(((v & 1) != 0) != flip, (u32)(v >> 1));
    default: {
        u64 key = v + cb_key_offset(g, h);
        return cb_key_bits(g, cb_mirror_if(flip, key, g.kmax));
    }
    }
}

// The operator over all ranks' element i, finishing step included.
CB_DEVICE cb_bits cb_gen_reduced(const CbGen &g, u64 i) {
    u64 h = cb_elem_hash(g, i);
    const u64 *stats = g.words + 2 * (h & (CB_FAMILIES - 1));
    u64 a = stats[0], b = stats[1];
    bool flip = cb_gen_flip(g, h);
    switch (g.scheme) {
    case CB_SCHEME_WRAP:
        return (cb_bits)((a + g.nranks * cb_elem_offset(h)) * g.mul);
    case CB_SCHEME_UNITS: {
        u64 sum = flip ? 0 - a : a;
        if (g.op == CB_AVG) {
#if CB_KIND == CB_KIND_INT
            return cb_units_bits(flip ? 0 - b : b, 0);
#else
            return cb_avg(cb_units_bits(sum, cb_exponent(g, h)), (u32)g.nranks);
#endif
        }
        return cb_units_bits(sum * g.mul, cb_exponent(g, h));
    }
    case CB_SCHEME_POW2: {
        u64 negs = a + (flip ? g.nranks : 0);
        return cb_pow2_bits((negs & 1) != 0, (u32)b);
    }
    default: {
        u64 c = cb_key_offset(g, h);
        bool max = g.op == CB_MAX;
        u64 key = cb_mirror_if(flip, (max != flip ? b : a) + c, g.kmax);
        return cb_key_bits(g, key);
    }
    }
}

CB_DEVICE cb_bits cb_expected(const CbGen &g, const CbExpect &e, u64 k) {
    switch (e.kind) {
    case CB_EXPECT_REDUCED:
        return cb_gen_reduced(g, e.src + k);
    case CB_EXPECT_INPUT:
        return cb_gen_input(g, e.rank, e.src + k);
    default: {
        u64 block = e.block == 0 ? 1 : e.block;
        return cb_gen_input(g, k / block, e.src + k % block);
    }
    }
}

CB_DEVICE bool cb_is_finite(cb_bits b) {
#if CB_KIND == CB_KIND_INT
    (void)b;
    return true;
#else
    return ((u64)b & CB_EXP_MASK) != CB_EXP_MASK;
#endif
}

// The order-preserving key of finite float bits: key distance counts ULPs.
CB_DEVICE u64 cb_float_key(const CbGen &g, cb_bits b) {
    u64 mag = (u64)b & (CB_TOP_BIT - 1);
    if (((u64)b & CB_TOP_BIT) != 0) return mag < g.mid ? g.mid - mag : 0;
    return g.mid + mag;
}

// ---- kernels ----

// dst[k] = element first + k of rank `rank`'s input, k < count.
CB_KERNEL void cb_fill_at(CbGen g, u32 rank, u8 *dst, u64 first, u64 count) {
    cb_bits *out = (cb_bits *)dst;
    if (g.dtype != CB_DT || rank >= g.nranks) return;
    for (u64 k = cb_global_tid(); k < count; k += cb_global_threads()) {
        out[k] = cb_gen_input(g, rank, first + k);
    }
}

// Rank `rank`'s input (its send buffer): `count` elements, as check::fill_input.
CB_KERNEL void cb_fill(CbGen g, u32 rank, u8 *dst, u64 count) {
    cb_bits *out = (cb_bits *)dst;
    if (g.dtype != CB_DT || rank >= g.nranks) return;
    for (u64 k = cb_global_tid(); k < count; k += cb_global_threads()) {
        out[k] = cb_gen_input(g, rank, k);
    }
}

// The poison pattern, as check::poison.
CB_KERNEL void cb_poison(u8 *dst, u64 count) {
    cb_bits *out = (cb_bits *)dst;
    for (u64 k = cb_global_tid(); k < count; k += cb_global_threads()) {
        out[k] = (cb_bits)CB_POISON;
    }
}

// Compares recv[0..count) with the expectation, adding to *out. A header
// built for another element type counts every element wrong.
CB_KERNEL void cb_verify(CbGen g, CbExpect e, const u8 *recv, u64 count, CbVerdict *out) {
    const cb_bits *in = (const cb_bits *)recv;
    if (g.dtype != CB_DT) {
        if (cb_global_tid() == 0 && count > 0) {
            cb_atomic_add(&out->wrong, count);
            cb_atomic_min(&out->first, 0);
        }
        return;
    }
    u64 wrong = 0, nan = 0, first = ~(u64)0;
    for (u64 k = cb_global_tid(); k < count; k += cb_global_threads()) {
        cb_bits got = in[k];
        cb_bits want = cb_expected(g, e, k);
        if (got == want) continue;
        bool finite = cb_is_finite(got);
        if (finite && g.ulps > 0) {
            u64 kg = cb_float_key(g, got), kw = cb_float_key(g, want);
            if ((kg > kw ? kg - kw : kw - kg) <= g.ulps) continue;
        }
        wrong += 1;
        nan += finite ? 0 : 1;
        if (k < first) first = k;
    }
    if (wrong > 0) {
        cb_atomic_add(&out->wrong, wrong);
        if (nan > 0) cb_atomic_add(&out->nan, nan);
        cb_atomic_min(&out->first, first);
    }
}
