/*
 * graft C kernel prelude: the scalar semantics of every elementwise
 * primitive, as GCC vector-extension functions, bitwise equal to the Rust
 * kernels in crates/graft-core/src/ops (unary.rs, binary.rs, cast.rs,
 * mathfn/). NaN payloads aside, g_<op>_<dtype>(x) returns, lane by lane,
 * exactly the bits the interpreter computes; tests/mathfn_c.rs compiles this
 * header at GL = 4, 8 and 16 and checks that on every op and dtype.
 *
 * Conventions (the native backend's renderer relies on them):
 * - The includer defines GL (lanes per vector: 4, 8 or 16). Every vector type
 *   has GL lanes, whatever its element width.
 * - Booleans in registers are vbool (= vi32) with lanes 0 or -1 (all bits
 *   set); in memory they are bytes 0/1 (vu8).
 * - One function per (op, dtype): g_<op>_<dt>, dt in f32 f64 i32 i64 bool;
 *   comparisons g_eq/ne/lt/le/gt/ge_<dt> return vbool; g_select_<dt>(p, a, b);
 *   conversions g_convert_<from>_<to>. Helpers are named g__* (two
 *   underscores) and are not part of the interface.
 * - Compile with -ffp-contract=off (no FMA contraction: Rust never contracts)
 *   and without -ffast-math; -fno-math-errno lets __builtin_sqrt inline.
 *   Only <stdint.h> is included and no libm function is called. Without
 *   -march flags wide vectors are legal but GCC warns about their ABI
 *   (-Wpsabi); the functions are all inlined, so -Wno-psabi is harmless.
 * - No function branches on lane data: "branches" are computed both ways and
 *   blended with masks. The only exceptions are the per-lane scalar loops of
 *   sqrt/rsqrt (__builtin_sqrt per lane: correctly rounded, like Rust's) and
 *   rem (g__fmod_f32/f64: exact fmod by integer long division, data-dependent
 *   loop per lane), documented at each.
 * - Integer arithmetic that may overflow is done in unsigned types (wrapping,
 *   no C undefined behaviour); 64-bit shifts of signed values are done as
 *   logical shifts of biased values (AVX2 has no 64-bit arithmetic shift).
 * - Float constants are written with the same decimal text as the Rust
 *   source (f suffix for f32), which both compilers round correctly to the
 *   same bits; every expression keeps the Rust evaluation order.
 */
#ifndef GRAFT_PRELUDE_H
#define GRAFT_PRELUDE_H

#include <stdint.h>

#ifndef GL
#error "define GL (lanes per vector: 4, 8 or 16) before including the graft prelude"
#endif

typedef float vf32 __attribute__((vector_size(4 * GL)));
typedef double vf64 __attribute__((vector_size(8 * GL)));
typedef int32_t vi32 __attribute__((vector_size(4 * GL)));
typedef int64_t vi64 __attribute__((vector_size(8 * GL)));
typedef uint32_t vu32 __attribute__((vector_size(4 * GL)));
typedef uint64_t vu64 __attribute__((vector_size(8 * GL)));
typedef uint8_t vu8 __attribute__((vector_size(GL)));
typedef vi32 vbool;

#define G_INL static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- helpers */

/* Lane masks (0 / -1) between widths. */
G_INL vi64 g__wide(vi32 m) { return __builtin_convertvector(m, vi64); }
G_INL vi32 g__narrow(vi64 m) { return __builtin_convertvector(m, vi32); }

/* Blends: m ? a : b per lane (m lanes are 0 or -1). */
G_INL vf32 g__self32(vi32 m, vf32 a, vf32 b) { return (vf32)(((vi32)a & m) | ((vi32)b & ~m)); }
G_INL vf64 g__self64(vi64 m, vf64 a, vf64 b) { return (vf64)(((vi64)a & m) | ((vi64)b & ~m)); }
G_INL vi32 g__seli32(vi32 m, vi32 a, vi32 b) { return (a & m) | (b & ~m); }
G_INL vi64 g__seli64(vi64 m, vi64 a, vi64 b) { return (a & m) | (b & ~m); }

/* Splats. */
G_INL vf32 g__f32(float c) { return (vf32){} + c; }
G_INL vf64 g__f64(double c) { return (vf64){} + c; }
G_INL vi32 g__i32(int32_t c) { return (vi32){} + c; }
G_INL vi64 g__i64(int64_t c) { return (vi64){} + c; }

G_INL vi32 g__isnan32(vf32 x) { return x != x; }
G_INL vi64 g__isnan64(vf64 x) { return x != x; }
G_INL vf32 g__abs32(vf32 x) { return (vf32)((vu32)x & 0x7fffffffu); }
G_INL vf64 g__abs64(vf64 x) { return (vf64)((vu64)x & 0x7fffffffffffffffull); }
/* x with the sign bit of s ORed in (x must be non-negative for copysign). */
G_INL vf32 g__orsign32(vf32 x, vf32 s) { return (vf32)((vu32)x | ((vu32)s & 0x80000000u)); }
G_INL vf64 g__orsign64(vf64 x, vf64 s) { return (vf64)((vu64)x | ((vu64)s & 0x8000000000000000ull)); }
/* Rust's f32::max / f32::min against a constant c that is not NaN: a NaN x gives c. */
G_INL vf32 g__maxc32(vf32 x, float c) { return g__self32(x > c, x, g__f32(c)); }
G_INL vf32 g__minc32(vf32 x, float c) { return g__self32(x < c, x, g__f32(c)); }
G_INL vf64 g__maxc64(vf64 x, double c) { return g__self64(x > c, x, g__f64(c)); }
G_INL vf64 g__minc64(vf64 x, double c) { return g__self64(x < c, x, g__f64(c)); }

/* --------------------------------------------------- float arithmetic */

#define G_FLOAT_BASIC(dt, V, M, SEL, ISNAN, ABS)                                        \
    G_INL V g_add_##dt(V a, V b) { return a + b; }                                               \
    G_INL V g_sub_##dt(V a, V b) { return a - b; }                                               \
    G_INL V g_mul_##dt(V a, V b) { return a * b; }                                               \
    G_INL V g_div_##dt(V a, V b) { return a / b; }                                               \
    G_INL V g_neg_##dt(V x) { return -x; }                                                       \
    G_INL V g_abs_##dt(V x) { return ABS(x); }                                                   \
    /* -1, 0 or 1; +0 for ±0; NaN gives x. */                                                    \
    G_INL V g_sign_##dt(V x) {                                                                   \
        V z = (V){};                                                                             \
        V r = SEL(x > 0, z + 1, SEL(x < 0, z - 1, z));                                           \
        return SEL(ISNAN(x), x, r);                                                              \
    }                                                                                            \
    /* IEEE 754-2019 maximum/minimum: NaN propagates (a + b), -0 < +0. */                        \
    G_INL V g_max_##dt(V a, V b) {                                                               \
        V r = SEL((a > b) | ((a == b) & ((M)b < 0)), a, b);                                      \
        return SEL(ISNAN(a) | ISNAN(b), a + b, r);                                               \
    }                                                                                            \
    G_INL V g_min_##dt(V a, V b) {                                                               \
        V r = SEL((a < b) | ((a == b) & ((M)b >= 0)), a, b);                                     \
        return SEL(ISNAN(a) | ISNAN(b), a + b, r);                                               \
    }                                                                                            \
    G_INL V g_select_##dt(vbool p, V a, V b) { return SEL(G_MASK_##dt(p), a, b); }

#define G_MASK_f32(p) (p)
#define G_MASK_f64(p) g__wide(p)
#define G_MASK_i32(p) (p)
#define G_MASK_i64(p) g__wide(p)

G_FLOAT_BASIC(f32, vf32, vi32, g__self32, g__isnan32, g__abs32)
G_FLOAT_BASIC(f64, vf64, vi64, g__self64, g__isnan64, g__abs64)

/* Round half to even: for |x| < 2^p adding and subtracting 2^p rounds to an
 * integer in the default rounding mode; larger |x|, inf and NaN are x. The
 * sign of x is put back, so -0.3 gives -0. floor/ceil correct it by one. */
G_INL vf32 g_round_f32(vf32 x) {
    vf32 a = g__abs32(x);
    vf32 r = g__orsign32((a + 8388608.0f) - 8388608.0f, x);
    return g__self32(a < 8388608.0f, r, x);
}
G_INL vf64 g_round_f64(vf64 x) {
    vf64 a = g__abs64(x);
    vf64 r = g__orsign64((a + 4503599627370496.0) - 4503599627370496.0, x);
    return g__self64(a < 4503599627370496.0, r, x);
}
G_INL vf32 g_floor_f32(vf32 x) {
    vf32 r = g_round_f32(x);
    return g__orsign32(g__self32(r > x, r - 1.0f, r), x);
}
G_INL vf64 g_floor_f64(vf64 x) {
    vf64 r = g_round_f64(x);
    return g__orsign64(g__self64(r > x, r - 1.0, r), x);
}
G_INL vf32 g_ceil_f32(vf32 x) {
    vf32 r = g_round_f32(x);
    return g__orsign32(g__self32(r < x, r + 1.0f, r), x);
}
G_INL vf64 g_ceil_f64(vf64 x) {
    vf64 r = g_round_f64(x);
    return g__orsign64(g__self64(r < x, r + 1.0, r), x);
}

/* Per-lane scalar loop: GCC has no vector sqrt operator. __builtin_sqrt is
 * the correctly rounded IEEE square root (inlined with -fno-math-errno). */
G_INL vf32 g_sqrt_f32(vf32 x) {
    vf32 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_sqrtf(x[i]);
    return r;
}
G_INL vf64 g_sqrt_f64(vf64 x) {
    vf64 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_sqrt(x[i]);
    return r;
}
G_INL vf32 g_rsqrt_f32(vf32 x) { return 1.0f / g_sqrt_f32(x); }
G_INL vf64 g_rsqrt_f64(vf64 x) { return 1.0 / g_sqrt_f64(x); }

/* fmod, exact (like C fmod and Rust's float %): per-lane scalar code with a
 * data-dependent loop (binary long division of the significands, one step
 * per binade between x and y). fmod(x, 0), fmod(±inf, y) and NaN operands
 * give NaN; |x| < |y| (y = ±inf included) gives x; the result has x's sign. */
#define G_FMOD_SCALAR(name, F, U, MBITS, EXPMASK, SIGN)                                      \
    static inline F name(F x, F y) {                                                         \
        union { F f; U u; } ux = {x}, uy = {y}, res;                                          \
        U sx = ux.u & SIGN, ax = ux.u & ~SIGN, ay = uy.u & ~SIGN;                             \
        const U implicit = (U)1 << MBITS;                                                    \
        if (ay == 0 || ax >= EXPMASK || ay > EXPMASK) return (x * y) / (x * y);              \
        if (ax < ay) return x;                                                                \
        int ex = (int)(ax >> MBITS), ey = (int)(ay >> MBITS);                                \
        U mx = ax & (implicit - 1), my = ay & (implicit - 1);                                \
        if (ex == 0) { ex = 1; while (!(mx & implicit)) { mx <<= 1; ex--; } } else mx |= implicit; \
        if (ey == 0) { ey = 1; while (!(my & implicit)) { my <<= 1; ey--; } } else my |= implicit; \
        for (; ex > ey; ex--) { if (mx >= my) mx -= my; mx <<= 1; }                          \
        if (mx >= my) mx -= my;                                                              \
        if (mx == 0) { res.u = sx; return res.f; }                                           \
        while (!(mx & implicit)) { mx <<= 1; ey--; }                                         \
        if (ey > 0) res.u = ((U)ey << MBITS) | (mx & (implicit - 1));                        \
        else res.u = mx >> (1 - ey);                                                         \
        res.u |= sx;                                                                         \
        return res.f;                                                                        \
    }
G_FMOD_SCALAR(g__fmod_f32, float, uint32_t, 23, 0x7f800000u, 0x80000000u)
G_FMOD_SCALAR(g__fmod_f64, double, uint64_t, 52, 0x7ff0000000000000ull, 0x8000000000000000ull)

G_INL vf32 g_rem_f32(vf32 a, vf32 b) {
    vf32 r;
    for (int i = 0; i < GL; i++) r[i] = g__fmod_f32(a[i], b[i]);
    return r;
}
G_INL vf64 g_rem_f64(vf64 a, vf64 b) {
    vf64 r;
    for (int i = 0; i < GL; i++) r[i] = g__fmod_f64(a[i], b[i]);
    return r;
}

/* ------------------------------------------------------------- integers */

/* Wrapping two's complement (computed unsigned), div/rem by 0 give 0,
 * MIN / -1 == MIN, MIN % -1 == 0 (the divisor is replaced by 1 there). */
#define G_INT_OPS(dt, V, U, MIN)                                                         \
    G_INL V g_add_##dt(V a, V b) { return (V)((U)a + (U)b); }                                   \
    G_INL V g_sub_##dt(V a, V b) { return (V)((U)a - (U)b); }                                   \
    G_INL V g_mul_##dt(V a, V b) { return (V)((U)a * (U)b); }                                   \
    G_INL V g_neg_##dt(V x) { return (V)((U){} - (U)x); }                                       \
    G_INL V g_abs_##dt(V x) { return G_SELI_##dt(x < 0, g_neg_##dt(x), x); }                   \
    G_INL V g_sign_##dt(V x) { return (V)(x < 0) - (V)(x > 0); }                                \
    G_INL V g__safe_divisor_##dt(V a, V b) {                                                    \
        return G_SELI_##dt((b == 0) | ((a == MIN) & (b == -1)), (V){} + 1, b);                  \
    }                                                                                           \
    G_INL V g_div_##dt(V a, V b) { return (a / g__safe_divisor_##dt(a, b)) & ~(V)(b == 0); }   \
    G_INL V g_rem_##dt(V a, V b) { return (a % g__safe_divisor_##dt(a, b)) & ~(V)(b == 0); }   \
    G_INL V g_max_##dt(V a, V b) { return G_SELI_##dt(a >= b, a, b); }                          \
    G_INL V g_min_##dt(V a, V b) { return G_SELI_##dt(a <= b, a, b); }                          \
    G_INL V g_and_##dt(V a, V b) { return a & b; }                                              \
    G_INL V g_or_##dt(V a, V b) { return a | b; }                                               \
    G_INL V g_not_##dt(V x) { return ~x; }                                                      \
    G_INL V g_select_##dt(vbool p, V a, V b) { return G_SELI_##dt(G_MASK_##dt(p), a, b); }

#define G_SELI_i32(m, a, b) g__seli32((m), (a), (b))
#define G_SELI_i64(m, a, b) g__seli64((m), (a), (b))

G_INT_OPS(i32, vi32, vu32, INT32_MIN)
G_INT_OPS(i64, vi64, vu64, INT64_MIN)

/* ----------------------------------------------------------------- bool */

G_INL vbool g_not_bool(vbool x) { return ~x; }
G_INL vbool g_and_bool(vbool a, vbool b) { return a & b; }
G_INL vbool g_or_bool(vbool a, vbool b) { return a | b; }
G_INL vbool g_select_bool(vbool p, vbool a, vbool b) { return (a & p) | (b & ~p); }

/* ---------------------------------------------------------- comparisons */

/* Floats compare as IEEE (NaN unordered: only ne is true; -0 == +0). */
#define G_CMP(dt, V, NARROW)                                                 \
    G_INL vbool g_eq_##dt(V a, V b) { return NARROW(a == b); }               \
    G_INL vbool g_ne_##dt(V a, V b) { return NARROW(a != b); }               \
    G_INL vbool g_lt_##dt(V a, V b) { return NARROW(a < b); }                \
    G_INL vbool g_le_##dt(V a, V b) { return NARROW(a <= b); }               \
    G_INL vbool g_gt_##dt(V a, V b) { return NARROW(a > b); }                \
    G_INL vbool g_ge_##dt(V a, V b) { return NARROW(a >= b); }
#define G_ID(m) (m)
G_CMP(f32, vf32, G_ID)
G_CMP(f64, vf64, g__narrow)
G_CMP(i32, vi32, G_ID)
G_CMP(i64, vi64, g__narrow)

/* bool: false < true (true is -1 in a vbool, so compare logically). */
G_INL vbool g_eq_bool(vbool a, vbool b) { return ~(a ^ b); }
G_INL vbool g_ne_bool(vbool a, vbool b) { return a ^ b; }
G_INL vbool g_lt_bool(vbool a, vbool b) { return ~a & b; }
G_INL vbool g_le_bool(vbool a, vbool b) { return ~a | b; }
G_INL vbool g_gt_bool(vbool a, vbool b) { return a & ~b; }
G_INL vbool g_ge_bool(vbool a, vbool b) { return a | ~b; }

/* ---------------------------------------------------------- conversions */

/* Rust `as` semantics (ops/cast.rs): float -> int truncates and saturates,
 * NaN -> 0; int -> int wraps / sign-extends; int -> float and f64 -> f32
 * round to nearest even; number -> bool is x != 0 (NaN -> true); bool ->
 * number is 0 or 1. Out-of-range lanes are replaced before converting, so no
 * conversion is undefined. */
G_INL vf32 g_convert_f32_f32(vf32 x) { return x; }
G_INL vf64 g_convert_f32_f64(vf32 x) { return __builtin_convertvector(x, vf64); }
G_INL vi32 g_convert_f32_i32(vf32 x) {
    vf32 z = (vf32){};
    vf32 c = g__self32(g__isnan32(x), z, x);
    c = g__self32(c < -2147483648.0f, z - 2147483648.0f, c);
    vi32 big = c >= 2147483648.0f;
    c = g__self32(big, z, c);
    return g__seli32(big, g__i32(INT32_MAX), __builtin_convertvector(c, vi32));
}
G_INL vi64 g_convert_f32_i64(vf32 x) {
    vf32 z = (vf32){};
    vf32 c = g__self32(g__isnan32(x), z, x);
    c = g__self32(c < -9223372036854775808.0f, z - 9223372036854775808.0f, c);
    vi32 big = c >= 9223372036854775808.0f;
    c = g__self32(big, z, c);
    return g__seli64(g__wide(big), g__i64(INT64_MAX), __builtin_convertvector(c, vi64));
}
G_INL vbool g_convert_f32_bool(vf32 x) { return x != 0.0f; }

G_INL vf32 g_convert_f64_f32(vf64 x) { return __builtin_convertvector(x, vf32); }
G_INL vf64 g_convert_f64_f64(vf64 x) { return x; }
G_INL vi32 g_convert_f64_i32(vf64 x) {
    vf64 z = (vf64){};
    vf64 c = g__self64(g__isnan64(x), z, x);
    c = g__self64(c < -2147483648.0, z - 2147483648.0, c);
    c = g__self64(c > 2147483647.0, z + 2147483647.0, c);
    return __builtin_convertvector(c, vi32);
}
G_INL vi64 g_convert_f64_i64(vf64 x) {
    vf64 z = (vf64){};
    vf64 c = g__self64(g__isnan64(x), z, x);
    c = g__self64(c < -9223372036854775808.0, z - 9223372036854775808.0, c);
    vi64 big = c >= 9223372036854775808.0;
    c = g__self64(big, z, c);
    return g__seli64(big, g__i64(INT64_MAX), __builtin_convertvector(c, vi64));
}
G_INL vbool g_convert_f64_bool(vf64 x) { return g__narrow(x != 0.0); }

G_INL vf32 g_convert_i32_f32(vi32 x) { return __builtin_convertvector(x, vf32); }
G_INL vf64 g_convert_i32_f64(vi32 x) { return __builtin_convertvector(x, vf64); }
G_INL vi32 g_convert_i32_i32(vi32 x) { return x; }
G_INL vi64 g_convert_i32_i64(vi32 x) { return __builtin_convertvector(x, vi64); }
G_INL vbool g_convert_i32_bool(vi32 x) { return x != 0; }

G_INL vf32 g_convert_i64_f32(vi64 x) { return __builtin_convertvector(x, vf32); }
G_INL vf64 g_convert_i64_f64(vi64 x) { return __builtin_convertvector(x, vf64); }
G_INL vi32 g_convert_i64_i32(vi64 x) { return __builtin_convertvector(x, vi32); }
G_INL vi64 g_convert_i64_i64(vi64 x) { return x; }
G_INL vbool g_convert_i64_bool(vi64 x) { return g__narrow(x != 0); }

G_INL vf32 g_convert_bool_f32(vbool x) { return __builtin_convertvector(x & 1, vf32); }
G_INL vf64 g_convert_bool_f64(vbool x) { return __builtin_convertvector(x & 1, vf64); }
G_INL vi32 g_convert_bool_i32(vbool x) { return x & 1; }
G_INL vi64 g_convert_bool_i64(vbool x) { return __builtin_convertvector(x & 1, vi64); }
G_INL vbool g_convert_bool_bool(vbool x) { return x; }

/* ------------------------------------------------------ exp, tanh (mathfn) */

/* Mirrors ops/mathfn exp_f32: Cody-Waite reduction, degree-7 polynomial,
 * 2^n in two halves (see the Rust docs for the error bound). */
G_INL vf32 g_exp_f32(vf32 x) {
    vf32 xc = g__minc32(g__maxc32(x, -110.0f), 90.0f);
    vf32 t = xc * 1.44269504088896340735992468100189214f + 12582912.0f;
    vi32 n = (vi32)((vu32)t - 0x4b400000u);
    vf32 nf = t - 12582912.0f;
    vf32 r = xc - nf * 0.693359375f - nf * -2.1219444e-4f;
    vf32 z = r * r;
    vf32 p = ((((1.9875692e-4f * r + 1.3981999e-3f) * r + 8.333452e-3f) * r + 4.1665796e-2f) * r + 1.6666665e-1f) * r
             + 5.0000001e-1f;
    vf32 e = p * z + r + 1.0f;
    vi32 n1 = (vi32)((vu32)(n + 256) >> 1) - 128;
    vi32 n2 = n - n1;
    vf32 s1 = (vf32)((vu32)(n1 + 127) << 23);
    vf32 s2 = (vf32)((vu32)(n2 + 127) << 23);
    vf32 y = e * s1 * s2;
    return g__self32(g__isnan32(x), x, y);
}

G_INL vf64 g_exp_f64(vf64 x) {
    vf64 xc = g__minc64(g__maxc64(x, -760.0), 710.0);
    vf64 t = xc * 1.44269504088896340735992468100189214 + 6755399441055744.0;
    vi64 n = (vi64)((vu64)t - 0x4338000000000000ull);
    vf64 nf = t - 6755399441055744.0;
    vf64 hi = xc - nf * 6.93147180369123816490e-1;
    vf64 r = hi - nf * 1.90821492927058770002e-10;
    vf64 q = ((((((((((((1.0 / 6227020800.0) * r + 1.0 / 479001600.0) * r + 1.0 / 39916800.0) * r
                     + 1.0 / 3628800.0) * r + 1.0 / 362880.0) * r + 1.0 / 40320.0) * r + 1.0 / 5040.0) * r
                 + 1.0 / 720.0) * r + 1.0 / 120.0) * r + 1.0 / 24.0) * r + 1.0 / 6.0) * r + 0.5)
             * (r * r);
    vf64 e = 1.0 + (r + q);
    vi64 n1 = (vi64)((vu64)(n + 2048) >> 1) - 1024;
    vi64 n2 = n - n1;
    vf64 s1 = (vf64)((vu64)(n1 + 1023) << 52);
    vf64 s2 = (vf64)((vu64)(n2 + 1023) << 52);
    vf64 y = e * s1 * s2;
    return g__self64(g__isnan64(x), x, y);
}

G_INL vf32 g_tanh_f32(vf32 x) {
    vf32 a = g__abs32(x);
    vf32 z = a * a;
    vf32 small = ((((-5.7049887e-3f * z + 2.0639089e-2f) * z - 5.3739716e-2f) * z + 1.3331442e-1f) * z - 3.3333282e-1f)
                 * z * a + a;
    vf32 large = 1.0f - 2.0f / (g_exp_f32(2.0f * a) + 1.0f);
    vf32 y = g__orsign32(g__self32(a < 0.625f, small, large), x);
    return g__self32(g__isnan32(x), x, y);
}

G_INL vf64 g_tanh_f64(vf64 x) {
    vf64 a = g__abs64(x);
    vf64 z = a * a;
    vf64 p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3;
    vf64 q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
    vf64 small = a + a * z * (p / q);
    vf64 large = 1.0 - 2.0 / (g_exp_f64(2.0 * a) + 1.0);
    vf64 y = g__orsign64(g__self64(a < 0.625, small, large), x);
    return g__self64(g__isnan64(x), x, y);
}

#endif /* GRAFT_PRELUDE_H */
