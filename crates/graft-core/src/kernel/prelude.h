/*
 * graft C kernel prelude: the scalar semantics of every elementwise
 * primitive, as GCC vector-extension functions, bitwise equal to the Rust
 * kernels in crates/graft-core/src/ops (unary.rs, binary.rs, cast.rs,
 * mathfn/). NaN payloads aside, g_<op>_<dtype>(x) returns, lane by lane,
 * exactly the bits the interpreter computes; tests/all/mathfn_c.rs compiles this
 * header at GL = 4, 8 and 16 and checks that on every op and dtype.
 *
 * Conventions (the native backend's renderer relies on them):
 * - The includer defines GL (lanes per vector: 4, 8 or 16). Every vector type
 *   has GL lanes, whatever its element width.
 * - Booleans in registers are vbool (= vi32) with lanes 0 or -1 (all bits
 *   set); in memory they are bytes 0/1 (vu8).
 * - f16 in registers is its bits in vi32 lanes, in memory uint16_t (vu16);
 *   only conversions and selects take it (see the f16 section).
 * - One function per (op, dtype): g_<op>_<dt>, dt in f32 f64 i32 i64 u32 bool;
 *   comparisons g_eq/ne/lt/le/gt/ge_<dt> return vbool; g_select_<dt>(p, a, b);
 *   g_fma_<dt>(a, b, c) for the float dtypes (the fma primitive);
 *   conversions g_convert_<from>_<to>. Helpers are named g__* (two
 *   underscores) and are not part of the interface.
 * - Compile with -ffp-contract=off (no FMA contraction: Rust never contracts;
 *   the fused multiply-adds the Rust code asks for with mul_add are explicit
 *   here too, g__fma32/g__fma64) and without -ffast-math; -fno-math-errno
 *   lets __builtin_sqrt inline. Only <stdint.h> (and <immintrin.h> for the
 *   FMA and AVX-512 intrinsics) is included; no libm function is called
 *   except fma/fmaf on a CPU without FMA instructions (link with -lm). Without
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
#if defined(__SSE2__) || defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

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

/* Fused multiply-add a * b + c, rounded once (Rust's mul_add). With x86
 * FMA (or AVX-512) the vector is split into the widest native registers and
 * each part is one vfmadd instruction; elsewhere each lane calls
 * __builtin_fma (a single instruction on CPUs with FMA, such as every
 * AArch64 one; an exact libm call otherwise). Both are correctly rounded,
 * so the bits are the same on every path. */
/* The body of a three-operand function of vectors a, b, c of type V that
 * applies INTR to each native register R of them (sizeof(V) a multiple of
 * sizeof(R)). */
#define G__PER_REG(V, R, INTR)                                                                   \
    union { V v; R r[sizeof(V) / sizeof(R)]; } ua = {a}, ub = {b}, uc = {c};                     \
    for (unsigned i = 0; i < sizeof(V) / sizeof(R); i++) ua.r[i] = INTR(ua.r[i], ub.r[i], uc.r[i]); \
    return ua.v;
G_INL vf32 g__fma32(vf32 a, vf32 b, vf32 c) {
#if defined(__AVX512F__)
    if (sizeof(vf32) % 64 == 0) { G__PER_REG(vf32, __m512, _mm512_fmadd_ps) }
#endif
#if defined(__FMA__)
    if (sizeof(vf32) % 32 == 0) { G__PER_REG(vf32, __m256, _mm256_fmadd_ps) }
    if (sizeof(vf32) % 16 == 0) { G__PER_REG(vf32, __m128, _mm_fmadd_ps) }
#endif
    vf32 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    return r;
}
G_INL vf64 g__fma64(vf64 a, vf64 b, vf64 c) {
#if defined(__AVX512F__)
    if (sizeof(vf64) % 64 == 0) { G__PER_REG(vf64, __m512d, _mm512_fmadd_pd) }
#endif
#if defined(__FMA__)
    if (sizeof(vf64) % 32 == 0) { G__PER_REG(vf64, __m256d, _mm256_fmadd_pd) }
#endif
    vf64 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_fma(a[i], b[i], c[i]);
    return r;
}
/* Splat-constant forms: fma(a, b, c) with b and c constants, fma(a, b, c)
 * with c a constant. */
G_INL vf32 g__fmac32(vf32 a, float b, float c) { return g__fma32(a, (vf32){} + b, (vf32){} + c); }
G_INL vf64 g__fmac64(vf64 a, double b, double c) { return g__fma64(a, (vf64){} + b, (vf64){} + c); }

/* e * 2^n for integral nf = n in the range where e * 2^(n/2) stays normal:
 * the product of two exact powers of two (n1 + n2 = n), rounded once; with
 * AVX-512, vscalef computes the same correctly rounded e * 2^n in one
 * instruction (checked equal on every f32 input of exp). */
G_INL vf32 g__scale32(vf32 e, vf32 nf, vi32 n) {
#if defined(__AVX512F__)
    if (sizeof(vf32) % 64 == 0) {
        union { vf32 v; __m512 r[sizeof(vf32) / 64]; } ue = {e}, un = {nf};
        for (unsigned i = 0; i < sizeof(vf32) / 64; i++) ue.r[i] = _mm512_scalef_ps(ue.r[i], un.r[i]);
        return ue.v;
    }
#endif
    vi32 n1 = (vi32)((vu32)(n + 256) >> 1) - 128;
    vi32 n2 = n - n1;
    vf32 s1 = (vf32)((vu32)(n1 + 127) << 23);
    vf32 s2 = (vf32)((vu32)(n2 + 127) << 23);
    return e * s1 * s2;
}
G_INL vf64 g__scale64(vf64 e, vf64 nf, vi64 n) {
#if defined(__AVX512F__)
    if (sizeof(vf64) % 64 == 0) {
        union { vf64 v; __m512d r[sizeof(vf64) / 64]; } ue = {e}, un = {nf};
        for (unsigned i = 0; i < sizeof(vf64) / 64; i++) ue.r[i] = _mm512_scalef_pd(ue.r[i], un.r[i]);
        return ue.v;
    }
#endif
    vi64 n1 = (vi64)((vu64)(n + 2048) >> 1) - 1024;
    vi64 n2 = n - n1;
    vf64 s1 = (vf64)((vu64)(n1 + 1023) << 52);
    vf64 s2 = (vf64)((vu64)(n2 + 1023) << 52);
    return e * s1 * s2;
}

G_INL vi32 g__isnan32(vf32 x) { return x != x; }
G_INL vi64 g__isnan64(vf64 x) { return x != x; }
G_INL vf32 g__abs32(vf32 x) { return (vf32)((vu32)x & 0x7fffffffu); }
G_INL vf64 g__abs64(vf64 x) { return (vf64)((vu64)x & 0x7fffffffffffffffull); }
/* x with the sign bit of s ORed in (x must be non-negative for copysign). */
G_INL vf32 g__orsign32(vf32 x, vf32 s) { return (vf32)((vu32)x | ((vu32)s & 0x80000000u)); }
G_INL vf64 g__orsign64(vf64 x, vf64 s) { return (vf64)((vu64)x | ((vu64)s & 0x8000000000000000ull)); }
/* Rust's f32::max / f32::min against a constant c that is not NaN: a NaN x gives c. */
/* a > b ? a : b and a < b ? a : b per lane: exactly x86's max/min
 * instructions (which return the second operand when either is NaN or both
 * are zero), one instruction per register instead of compare and blend. */
#define G__PER_REG2(V, R, INTR)                                                                  \
    union { V v; R r[sizeof(V) / sizeof(R)]; } ua = {a}, ub = {b};                               \
    for (unsigned i = 0; i < sizeof(V) / sizeof(R); i++) ua.r[i] = INTR(ua.r[i], ub.r[i]);       \
    return ua.v;
#if defined(__AVX512F__)
#define G__MM512(V, R, I) if (sizeof(V) % 64 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__MM512(V, R, I)
#endif
#if defined(__AVX__)
#define G__MM256(V, R, I) if (sizeof(V) % 32 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__MM256(V, R, I)
#endif
#if defined(__SSE2__)
#define G__MM128(V, R, I) if (sizeof(V) % 16 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__MM128(V, R, I)
#endif
G_INL vf32 g__max32(vf32 a, vf32 b) {
    G__MM512(vf32, __m512, _mm512_max_ps) G__MM256(vf32, __m256, _mm256_max_ps) G__MM128(vf32, __m128, _mm_max_ps)
    return g__self32(a > b, a, b);
}
G_INL vf32 g__min32(vf32 a, vf32 b) {
    G__MM512(vf32, __m512, _mm512_min_ps) G__MM256(vf32, __m256, _mm256_min_ps) G__MM128(vf32, __m128, _mm_min_ps)
    return g__self32(a < b, a, b);
}
G_INL vf64 g__max64(vf64 a, vf64 b) {
    G__MM512(vf64, __m512d, _mm512_max_pd) G__MM256(vf64, __m256d, _mm256_max_pd) G__MM128(vf64, __m128d, _mm_max_pd)
    return g__self64(a > b, a, b);
}
G_INL vf64 g__min64(vf64 a, vf64 b) {
    G__MM512(vf64, __m512d, _mm512_min_pd) G__MM256(vf64, __m256d, _mm256_min_pd) G__MM128(vf64, __m128d, _mm_min_pd)
    return g__self64(a < b, a, b);
}
/* IEEE 754-2019 maximum/minimum (the max and min primitives): NaN
 * propagates as a + b does, -0 < +0. AVX-512DQ's range instruction is
 * that for numbers, one instruction per register: imm8 bits 1:0 pick min
 * (00) or max (01), bits 3:2 = 01 take the sign from the comparison, in
 * which -0 < +0. For a quiet NaN it returns the other operand (754-2008's
 * maxNum), so an unordered pair is patched with a masked a + b: three
 * instructions. Elsewhere: equal operands differ only as zeros,
 * where the maximum is the AND of the bits (+0 unless both are -0) and
 * the minimum the OR; otherwise x86's max/min instruction picks
 * (g__max32(a, b) = a > b ? a : b); an unordered pair takes a + b. The
 * range form is 3 instructions against about 10: the ten-op chain over 1M
 * f32 (one max) from 522 to 420-427 us in graft (docs/PERFORMANCE.md,
 * session 28). */
#if defined(__AVX512DQ__)
G_INL __m512 g__rmax512(__m512 a, __m512 b) { return _mm512_mask_add_ps(_mm512_range_ps(a, b, 0x05), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m512 g__rmin512(__m512 a, __m512 b) { return _mm512_mask_add_ps(_mm512_range_ps(a, b, 0x04), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m512d g__rmax512d(__m512d a, __m512d b) { return _mm512_mask_add_pd(_mm512_range_pd(a, b, 0x05), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m512d g__rmin512d(__m512d a, __m512d b) { return _mm512_mask_add_pd(_mm512_range_pd(a, b, 0x04), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
#define G__DQ512(V, R, I) if (sizeof(V) % 64 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__DQ512(V, R, I)
#endif
#if defined(__AVX512DQ__) && defined(__AVX512VL__)
G_INL __m256 g__rmax256(__m256 a, __m256 b) { return _mm256_mask_add_ps(_mm256_range_ps(a, b, 0x05), _mm256_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m256 g__rmin256(__m256 a, __m256 b) { return _mm256_mask_add_ps(_mm256_range_ps(a, b, 0x04), _mm256_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m256d g__rmax256d(__m256d a, __m256d b) { return _mm256_mask_add_pd(_mm256_range_pd(a, b, 0x05), _mm256_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m256d g__rmin256d(__m256d a, __m256d b) { return _mm256_mask_add_pd(_mm256_range_pd(a, b, 0x04), _mm256_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m128 g__rmax128(__m128 a, __m128 b) { return _mm_mask_add_ps(_mm_range_ps(a, b, 0x05), _mm_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m128 g__rmin128(__m128 a, __m128 b) { return _mm_mask_add_ps(_mm_range_ps(a, b, 0x04), _mm_cmp_ps_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m128d g__rmax128d(__m128d a, __m128d b) { return _mm_mask_add_pd(_mm_range_pd(a, b, 0x05), _mm_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
G_INL __m128d g__rmin128d(__m128d a, __m128d b) { return _mm_mask_add_pd(_mm_range_pd(a, b, 0x04), _mm_cmp_pd_mask(a, b, _CMP_UNORD_Q), a, b); }
#define G__DQ256(V, R, I) if (sizeof(V) % 32 == 0) { G__PER_REG2(V, R, I) }
#define G__DQ128(V, R, I) if (sizeof(V) % 16 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__DQ256(V, R, I)
#define G__DQ128(V, R, I)
#endif
/* NAME(a, b): the range form per register (T512/T256/T128 the register
 * types, R512/R256/R128 the functions) where the target has it, else the
 * portable one; EQ combines equal operands' bits (& for max, | for min),
 * X86 is the x86-style max/min. */
#define G__IEEE_MINMAX(NAME, V, M, SEL, ISNAN, X86, EQ, T512, R512, T256, R256, T128, R128)     \
    G_INL V NAME(V a, V b) {                                                                   \
        G__DQ512(V, T512, R512) G__DQ256(V, T256, R256) G__DQ128(V, T128, R128)                  \
        V r = SEL(a == b, (V)((M)a EQ (M)b), X86(a, b));                                        \
        return SEL(ISNAN(a) | ISNAN(b), a + b, r);                                              \
    }
G__IEEE_MINMAX(g__imax32, vf32, vi32, g__self32, g__isnan32, g__max32, &,
               __m512, g__rmax512, __m256, g__rmax256, __m128, g__rmax128)
G__IEEE_MINMAX(g__imin32, vf32, vi32, g__self32, g__isnan32, g__min32, |,
               __m512, g__rmin512, __m256, g__rmin256, __m128, g__rmin128)
G__IEEE_MINMAX(g__imax64, vf64, vi64, g__self64, g__isnan64, g__max64, &,
               __m512d, g__rmax512d, __m256d, g__rmax256d, __m128d, g__rmax128d)
G__IEEE_MINMAX(g__imin64, vf64, vi64, g__self64, g__isnan64, g__min64, |,
               __m512d, g__rmin512d, __m256d, g__rmin256d, __m128d, g__rmin128d)
/* isnan(x) ? x : y, the last step of every math function (a NaN argument
 * is returned as given). AVX-512's fixup instruction does it in one
 * instruction per register instead of a compare and a blend: it classifies
 * x and, by the table 0x21 (a quiet NaN gives x, a signalling one x
 * quieted, every other class 0: keep y), patches y. */
#if defined(__AVX512F__)
G_INL __m512 g__fxnan512(__m512 y, __m512 x) { return _mm512_fixupimm_ps(y, x, _mm512_set1_epi32(0x21), 0); }
G_INL __m512d g__fxnan512d(__m512d y, __m512d x) { return _mm512_fixupimm_pd(y, x, _mm512_set1_epi64(0x21), 0); }
#define G__F512(V, R, I) if (sizeof(V) % 64 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__F512(V, R, I)
#endif
#if defined(__AVX512F__) && defined(__AVX512VL__)
G_INL __m256 g__fxnan256(__m256 y, __m256 x) { return _mm256_fixupimm_ps(y, x, _mm256_set1_epi32(0x21), 0); }
G_INL __m256d g__fxnan256d(__m256d y, __m256d x) { return _mm256_fixupimm_pd(y, x, _mm256_set1_epi64x(0x21), 0); }
G_INL __m128 g__fxnan128(__m128 y, __m128 x) { return _mm_fixupimm_ps(y, x, _mm_set1_epi32(0x21), 0); }
G_INL __m128d g__fxnan128d(__m128d y, __m128d x) { return _mm_fixupimm_pd(y, x, _mm_set1_epi64x(0x21), 0); }
#define G__VL256(V, R, I) if (sizeof(V) % 32 == 0) { G__PER_REG2(V, R, I) }
#define G__VL128(V, R, I) if (sizeof(V) % 16 == 0) { G__PER_REG2(V, R, I) }
#else
#define G__VL256(V, R, I)
#define G__VL128(V, R, I)
#endif
G_INL vf32 g__nanor32(vf32 x, vf32 y) {
    vf32 a = y, b = x;
    (void)a, (void)b;
    G__F512(vf32, __m512, g__fxnan512) G__VL256(vf32, __m256, g__fxnan256) G__VL128(vf32, __m128, g__fxnan128)
    return g__self32(g__isnan32(x), x, y);
}
G_INL vf64 g__nanor64(vf64 x, vf64 y) {
    vf64 a = y, b = x;
    (void)a, (void)b;
    G__F512(vf64, __m512d, g__fxnan512d) G__VL256(vf64, __m256d, g__fxnan256d) G__VL128(vf64, __m128d, g__fxnan128d)
    return g__self64(g__isnan64(x), x, y);
}
G_INL vf32 g__maxc32(vf32 x, float c) { return g__max32(x, g__f32(c)); }
G_INL vf32 g__minc32(vf32 x, float c) { return g__min32(x, g__f32(c)); }
G_INL vf64 g__maxc64(vf64 x, double c) { return g__max64(x, g__f64(c)); }
G_INL vf64 g__minc64(vf64 x, double c) { return g__min64(x, g__f64(c)); }

/* --------------------------------------------------- float arithmetic */

#define G_FLOAT_BASIC(dt, V, M, SEL, ISNAN, ABS, MAX2, MIN2)                            \
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
    /* IEEE 754-2019 maximum/minimum: NaN propagates (a + b), -0 < +0. */                     \
    G_INL V g_max_##dt(V a, V b) { return MAX2(a, b); }                                          \
    G_INL V g_min_##dt(V a, V b) { return MIN2(a, b); }                                          \
    G_INL V g_select_##dt(vbool p, V a, V b) { return SEL(G_MASK_##dt(p), a, b); }

#define G_MASK_f32(p) (p)
#define G_MASK_f64(p) g__wide(p)
#define G_MASK_i32(p) (p)
#define G_MASK_i64(p) g__wide(p)

G_FLOAT_BASIC(f32, vf32, vi32, g__self32, g__isnan32, g__abs32, g__imax32, g__imin32)
G_FLOAT_BASIC(f64, vf64, vi64, g__self64, g__isnan64, g__abs64, g__imax64, g__imin64)

/* The fma primitive: a * b + c rounded once (Rust's mul_add). */
G_INL vf32 g_fma_f32(vf32 a, vf32 b, vf32 c) { return g__fma32(a, b, c); }
G_INL vf64 g_fma_f64(vf64 a, vf64 b, vf64 c) { return g__fma64(a, b, c); }

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

/* The correctly rounded IEEE square root (as Rust's sqrt): the vector
 * instruction per native register where the target has one, else per lane
 * with __builtin_sqrt (inlined with -fno-math-errno). Not a per-lane loop
 * where avoidable: GCC vectorises one in pieces that meet in a stack slot,
 * and reading a vector back from smaller stores cannot be forwarded, so
 * the load waits until every older store has left the store buffer; in a
 * row kernel streaming its output (layer norm's rsqrt per row) that wait
 * cost up to 30 % depending on where the output buffer lay. */
#define G__PER_REG1(V, R, INTR)                                                                  \
    union { V v; R r[sizeof(V) / sizeof(R)]; } ua = {a};                                         \
    for (unsigned i = 0; i < sizeof(V) / sizeof(R); i++) ua.r[i] = INTR(ua.r[i]);                \
    return ua.v;
G_INL vf32 g_sqrt_f32(vf32 a) {
#if defined(__AVX512F__)
    if (sizeof(vf32) % 64 == 0) { G__PER_REG1(vf32, __m512, _mm512_sqrt_ps) }
#endif
#if defined(__AVX__)
    if (sizeof(vf32) % 32 == 0) { G__PER_REG1(vf32, __m256, _mm256_sqrt_ps) }
#endif
#if defined(__SSE2__)
    if (sizeof(vf32) % 16 == 0) { G__PER_REG1(vf32, __m128, _mm_sqrt_ps) }
#endif
    vf32 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_sqrtf(a[i]);
    return r;
}
G_INL vf64 g_sqrt_f64(vf64 a) {
#if defined(__AVX512F__)
    if (sizeof(vf64) % 64 == 0) { G__PER_REG1(vf64, __m512d, _mm512_sqrt_pd) }
#endif
#if defined(__AVX__)
    if (sizeof(vf64) % 32 == 0) { G__PER_REG1(vf64, __m256d, _mm256_sqrt_pd) }
#endif
#if defined(__SSE2__)
    if (sizeof(vf64) % 16 == 0) { G__PER_REG1(vf64, __m128d, _mm_sqrt_pd) }
#endif
    vf64 r;
    for (int i = 0; i < GL; i++) r[i] = __builtin_sqrt(a[i]);
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

/* u32 (ops/binary.rs, ops/unary.rs on u32): wrapping modulo 2^32, unsigned
 * division and order, div/rem by 0 give 0 (as for the signed integers);
 * neg wraps, abs is the identity, sign is 0 or 1. Comparing two vu32 gives a
 * vi32 mask (lanes 0 / -1), which is a vbool. */
G_INL vu32 g__selu32(vi32 m, vu32 a, vu32 b) { return (a & (vu32)m) | (b & ~(vu32)m); }
G_INL vu32 g_add_u32(vu32 a, vu32 b) { return a + b; }
G_INL vu32 g_sub_u32(vu32 a, vu32 b) { return a - b; }
G_INL vu32 g_mul_u32(vu32 a, vu32 b) { return a * b; }
G_INL vu32 g_neg_u32(vu32 x) { return (vu32){} - x; }
G_INL vu32 g_abs_u32(vu32 x) { return x; }
G_INL vu32 g_sign_u32(vu32 x) { return (vu32)(x != 0) & 1u; }
G_INL vu32 g_div_u32(vu32 a, vu32 b) {
    vu32 z = (vu32)(b == 0);
    return (a / (b | (z & 1u))) & ~z;
}
G_INL vu32 g_rem_u32(vu32 a, vu32 b) {
    vu32 z = (vu32)(b == 0);
    return (a % (b | (z & 1u))) & ~z;
}
G_INL vu32 g_max_u32(vu32 a, vu32 b) { return g__selu32(a >= b, a, b); }
G_INL vu32 g_min_u32(vu32 a, vu32 b) { return g__selu32(a <= b, a, b); }
G_INL vu32 g_and_u32(vu32 a, vu32 b) { return a & b; }
G_INL vu32 g_or_u32(vu32 a, vu32 b) { return a | b; }
G_INL vu32 g_not_u32(vu32 x) { return ~x; }
G_INL vu32 g_select_u32(vbool p, vu32 a, vu32 b) { return g__selu32(p, a, b); }

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
G_CMP(u32, vu32, G_ID)

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
    /* Through i64 (exact: c is an integer-valued double in i32 range once
       truncated): GCC 12 has an internal compiler error in RTL expansion
       when a direct double -> int conversion of this width follows a
       float -> double one in the same kernel (found by the random-DAG
       proptest, tests/proptest-regressions/fusion.txt). */
    return __builtin_convertvector(__builtin_convertvector(c, vi64), vi32);
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

/* u32: to floats through f64 (exact) so f32 rounds once; to i32 and from
 * i32/i64 keep the low bits; to i64 zero-extends. Floats to u32 truncate and
 * saturate at [0, 2^32 - 1], NaN -> 0 (Rust `as u32`). */
G_INL vf64 g_convert_u32_f64(vu32 x) { return __builtin_convertvector(__builtin_convertvector(x, vi64), vf64); }
G_INL vf32 g_convert_u32_f32(vu32 x) { return __builtin_convertvector(g_convert_u32_f64(x), vf32); }
G_INL vi32 g_convert_u32_i32(vu32 x) { return (vi32)x; }
G_INL vi64 g_convert_u32_i64(vu32 x) { return __builtin_convertvector(x, vi64); }
G_INL vu32 g_convert_u32_u32(vu32 x) { return x; }
G_INL vbool g_convert_u32_bool(vu32 x) { return x != 0; }
G_INL vu32 g_convert_i32_u32(vi32 x) { return (vu32)x; }
G_INL vu32 g_convert_i64_u32(vi64 x) { return __builtin_convertvector((vu64)x, vu32); }
G_INL vu32 g_convert_bool_u32(vbool x) { return (vu32)(x & 1); }
G_INL vu32 g_convert_f64_u32(vf64 x) {
    vf64 z = (vf64){};
    vf64 c = g__self64(g__isnan64(x) | (x < 0.0), z, x);
    c = g__self64(c > 4294967295.0, z + 4294967295.0, c);
    /* Through i64, like f64 -> i32 (see there): exact, c is in range. */
    return __builtin_convertvector((vu64)__builtin_convertvector(c, vi64), vu32);
}
G_INL vu32 g_convert_f32_u32(vf32 x) { return g_convert_f64_u32(__builtin_convertvector(x, vf64)); }

G_INL vf32 g_convert_bool_f32(vbool x) { return __builtin_convertvector(x & 1, vf32); }
G_INL vf64 g_convert_bool_f64(vbool x) { return __builtin_convertvector(x & 1, vf64); }
G_INL vi32 g_convert_bool_i32(vbool x) { return x & 1; }
G_INL vi64 g_convert_bool_i64(vbool x) { return __builtin_convertvector(x & 1, vi64); }
G_INL vbool g_convert_bool_bool(vbool x) { return x; }

/* ------------------------------------------------------------------ f16 */

/* f16 is a storage type (opt::widen_f16): in a register it is its 16 bits
 * in the low half of an i32 lane (like vbool, the lane count never
 * changes); kernels only load, store, select and convert it. Conversions
 * mirror ops/cast.rs: to f16, one rounding to nearest even of the exact
 * value (from f64 directly: through f32 would round twice), overflow to
 * inf, NaN quiet with its top payload bits; from f16, exact. In integer
 * arithmetic only, so every target gives the same bits. */
typedef uint16_t vu16 __attribute__((vector_size(2 * GL)));

/* Where the target converts between f16 and f32 in hardware (AVX-512F at
 * 16 lanes, F16C at 8 and 4), one instruction does it: the same bits as the
 * integer code below (exact decoding; rounding to nearest even by an
 * explicit mode, whatever MXCSR says), but for NaN payloads. */
#if defined(__AVX512F__) && GL == 16
#define G_F16_HW 1
G_INL vf32 g__f16_to_f32_hw(vi32 h) { __m256i p = _mm512_cvtepi32_epi16((__m512i)h); return (vf32)_mm512_cvtph_ps(p); }
G_INL vi32 g__f32_to_f16_hw(vf32 x) {
    __m256i p = _mm512_cvtps_ph((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (vi32)_mm512_cvtepu16_epi32(p);
}
#elif defined(__F16C__) && defined(__AVX2__) && GL == 8
#define G_F16_HW 1
G_INL vf32 g__f16_to_f32_hw(vi32 h) { vu16 p = __builtin_convertvector(h, vu16); __m128i q; __builtin_memcpy(&q, &p, 16); return (vf32)_mm256_cvtph_ps(q); }
G_INL vi32 g__f32_to_f16_hw(vf32 x) {
    __m128i p = _mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (vi32)_mm256_cvtepu16_epi32(p);
}
#elif defined(__F16C__) && GL == 4
#define G_F16_HW 1
G_INL vf32 g__f16_to_f32_hw(vi32 h) { vu16 p = __builtin_convertvector(h, vu16); __m128i q = _mm_setzero_si128(); __builtin_memcpy(&q, &p, 8); return (vf32)_mm_cvtph_ps(q); }
G_INL vi32 g__f32_to_f16_hw(vf32 x) {
    __m128i p = _mm_cvtps_ph((__m128)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vu16 q; __builtin_memcpy(&q, &p, 8); return __builtin_convertvector(q, vi32);
}
#endif

G_INL vf32 g_convert_f16_f32(vi32 h) {
#ifdef G_F16_HW
    return g__f16_to_f32_hw(h);
#endif
    vu32 u = (vu32)h;
    vu32 sign = (u & 0x8000u) << 16;
    vu32 e = (u >> 10) & 0x1fu;
    vu32 m = u & 0x3ffu;
    vu32 normal = ((e + 112u) << 23) | (m << 13);
    vu32 special = 0x7f800000u | (m << 13);
    /* Zero and subnormals: m * 2^-24, exact in f32. */
    vf32 small = __builtin_convertvector((vi32)m, vf32) * 5.9604644775390625e-8f;
    vi32 bits = g__seli32(e == 0u, (vi32)small, g__seli32(e == 31u, (vi32)special, (vi32)normal));
    return (vf32)(bits | (vi32)sign);
}
G_INL vf64 g_convert_f16_f64(vi32 h) { return __builtin_convertvector(g_convert_f16_f32(h), vf64); }
G_INL vi32 g_convert_f16_i32(vi32 h) { return g_convert_f32_i32(g_convert_f16_f32(h)); }
G_INL vi64 g_convert_f16_i64(vi32 h) { return g_convert_f32_i64(g_convert_f16_f32(h)); }
G_INL vbool g_convert_f16_bool(vi32 h) { return g_convert_f32_bool(g_convert_f16_f32(h)); }
G_INL vi32 g_convert_f16_f16(vi32 h) { return h; }
G_INL vi32 g_select_f16(vbool p, vi32 a, vi32 b) { return g__seli32(p, a, b); }

/* f32 bits -> f16 bits. a = |x|'s bits: NaN above inf's; from 65520 (the
 * midpoint between f16's largest finite value and 2^16) up, inf; normals
 * from 2^-14: the exponent rebiased and 13 bits rounded off; below, the
 * significand (implicit bit set) shifted right by 126 - e with its
 * remainder rounded (the shift clamped to 1..31, so no lane shifts by its
 * width: every lane under 2^-25 gives 0, and lanes from 2^-14 up take
 * another result). */
G_INL vi32 g_convert_f32_f16(vf32 x) {
#ifdef G_F16_HW
    return g__f32_to_f16_hw(x);
#endif
    vu32 u = (vu32)x;
    vu32 sign = (u >> 16) & 0x8000u;
    vu32 a = u & 0x7fffffffu;
    vu32 nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    vu32 r = a - 0x38000000u;
    vu32 normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    vu32 e = a >> 23;
    vi32 si = 126 - (vi32)e;
    si = g__seli32(si < 1, g__i32(1), g__seli32(si > 31, g__i32(31), si));
    vu32 s = (vu32)si;
    vu32 m = (a & 0x7fffffu) | 0x800000u;
    vu32 q = m >> s;
    vu32 rem = m & ((1u << s) - 1u);
    vu32 half = 1u << (s - 1u);
    vu32 sub = q + (vu32)(-((rem > half) | ((rem == half) & ((q & 1u) == 1u))));
    vi32 out = g__seli32(a >= 0x38800000u, (vi32)normal, (vi32)sub);
    out = g__seli32(a >= 0x477ff000u, g__i32(0x7c00), out);
    out = g__seli32(a > 0x7f800000u, (vi32)nan, out);
    return out | (vi32)sign;
}

/* f64 bits -> f16 bits, the same steps at f64's widths (rebias by
 * (1023 - 15) << 52, 42 bits rounded off, subnormal shift 1051 - e). */
G_INL vi32 g_convert_f64_f16(vf64 x) {
    vu64 u = (vu64)x;
    vu64 sign = (u >> 48) & 0x8000u;
    vu64 a = u & 0x7fffffffffffffffull;
    vu64 nan = 0x7e00u | ((a >> 42) & 0x3ffu);
    vu64 r = a - 0x3f00000000000000ull;
    vu64 normal = (r + 0x1ffffffffffull + ((r >> 42) & 1u)) >> 42;
    vu64 e = a >> 52;
    vi64 si = 1051 - (vi64)e;
    si = g__seli64(si < 1, g__i64(1), g__seli64(si > 63, g__i64(63), si));
    vu64 s = (vu64)si;
    vu64 m = (a & 0xfffffffffffffull) | 0x10000000000000ull;
    vu64 q = m >> s;
    vu64 rem = m & ((1ull << s) - 1u);
    vu64 half = 1ull << (s - 1u);
    vu64 sub = q + (vu64)(-((rem > half) | ((rem == half) & ((q & 1u) == 1u))));
    vi64 out = g__seli64(a >= 0x3f10000000000000ull, (vi64)normal, (vi64)sub);
    out = g__seli64(a >= 0x40effe0000000000ull, g__i64(0x7c00), out);
    out = g__seli64(a > 0x7ff0000000000000ull, (vi64)nan, out);
    return __builtin_convertvector(out | (vi64)sign, vi32);
}
/* Integers through f32: exact up to 2^24, and every value past 65519
 * rounds to inf either way (ops/cast.rs rounds the exact value once);
 * f16 -> u32 through f32 like ops/cast.rs (saturating, NaN -> 0). */
G_INL vi32 g_convert_i32_f16(vi32 x) { return g_convert_f32_f16(g_convert_i32_f32(x)); }
G_INL vi32 g_convert_i64_f16(vi64 x) { return g_convert_f32_f16(g_convert_i64_f32(x)); }
G_INL vi32 g_convert_bool_f16(vbool x) { return (x & 1) * 0x3c00; }
G_INL vi32 g_convert_u32_f16(vu32 x) { return g_convert_f32_f16(g_convert_u32_f32(x)); }
G_INL vu32 g_convert_f16_u32(vi32 h) { return g_convert_f32_u32(g_convert_f16_f32(h)); }

/* ------------------------------------------------------ exp, tanh (mathfn) */

/* Mirrors ops/mathfn exp_f32: Cody-Waite reduction and degree-7 polynomial
 * in FMAs, 2^n by g__scale32 (see the Rust docs for the error bound). */
G_INL vf32 g_exp_f32(vf32 x) {
    vf32 xc = g__minc32(g__maxc32(x, -110.0f), 90.0f);
    vf32 t = g__fmac32(xc, 1.44269504088896340735992468100189214f, 12582912.0f);
    vi32 n = (vi32)((vu32)t - 0x4b400000u);
    vf32 nf = t - 12582912.0f;
    vf32 r = g__fma32(nf, g__f32(2.1219444e-4f), g__fma32(nf, g__f32(-0.693359375f), xc));
    vf32 z = r * r;
    vf32 p = g__fmac32(r, 1.9875692e-4f, 1.3981999e-3f);
    p = g__fma32(p, r, g__f32(8.333452e-3f));
    p = g__fma32(p, r, g__f32(4.1665796e-2f));
    p = g__fma32(p, r, g__f32(1.6666665e-1f));
    p = g__fma32(p, r, g__f32(5.0000001e-1f));
    vf32 e = g__fma32(p, z, r) + 1.0f;
    vf32 y = g__scale32(e, nf, n);
    return g__nanor32(x, y);
}

/* Mirrors ops/mathfn exp_reduce_f64: xc = n ln2 + r (xc already clamped). */
G_INL vf64 g__exp_reduce_f64(vf64 xc, vi64* n, vf64* nf) {
    vf64 t = g__fmac64(xc, 1.44269504088896340735992468100189214, 6755399441055744.0);
    *n = (vi64)((vu64)t - 0x4338000000000000ull);
    *nf = t - 6755399441055744.0;
    return g__fma64(*nf, g__f64(-1.90821492927058770002e-10), g__fma64(*nf, g__f64(-6.93147180369123816490e-1), xc));
}

/* Mirrors ops/mathfn expm1_reduced_f64: r + r^2 P(r), Horner in FMAs. */
G_INL vf64 g__expm1_reduced_f64(vf64 r) {
    vf64 p = g__fmac64(r, 1.0 / 6227020800.0, 1.0 / 479001600.0);
    p = g__fma64(p, r, g__f64(1.0 / 39916800.0));
    p = g__fma64(p, r, g__f64(1.0 / 3628800.0));
    p = g__fma64(p, r, g__f64(1.0 / 362880.0));
    p = g__fma64(p, r, g__f64(1.0 / 40320.0));
    p = g__fma64(p, r, g__f64(1.0 / 5040.0));
    p = g__fma64(p, r, g__f64(1.0 / 720.0));
    p = g__fma64(p, r, g__f64(1.0 / 120.0));
    p = g__fma64(p, r, g__f64(1.0 / 24.0));
    p = g__fma64(p, r, g__f64(1.0 / 6.0));
    p = g__fma64(p, r, g__f64(0.5));
    return g__fma64(p, r * r, r);
}

G_INL vf64 g_exp_f64(vf64 x) {
    vi64 n;
    vf64 nf;
    vf64 r = g__exp_reduce_f64(g__minc64(g__maxc64(x, -760.0), 710.0), &n, &nf);
    vf64 e = 1.0 + g__expm1_reduced_f64(r);
    vf64 y = g__scale64(e, nf, n);
    return g__nanor64(x, y);
}

/* Mirrors ops/mathfn tanh_f32: one rational a P(a^2) / Q(a^2) on
 * a = min(|x|, 9.01), capped at 1, sign copied from x. */
G_INL vf32 g_tanh_f32(vf32 x) {
    vf32 a = g__minc32(g__abs32(x), 9.01f);
    vf32 z = a * a;
    vf32 p = g__fmac32(z, -1.22344825e-11f, 3.06358423e-8f);
    p = g__fma32(p, z, g__f32(2.80316071e-5f));
    p = g__fma32(p, z, g__f32(3.86961224e-3f));
    p = g__fma32(p, z, g__f32(1.36809632e-1f));
    p = g__fma32(p, z, g__f32(1.0f));
    vf32 q = g__fmac32(z, 1.28895772e-6f, 3.94083327e-4f);
    q = g__fma32(q, z, g__f32(2.7250614e-2f));
    q = g__fma32(q, z, g__f32(4.70142961e-1f));
    q = g__fma32(q, z, g__f32(1.0f));
    vf32 y = g__orsign32(g__minc32(a * p / q, 1.0f), x);
    return g__nanor32(x, y);
}

G_INL vf64 g_tanh_f64(vf64 x) {
    vf64 a = g__abs64(x);
    vf64 z = a * a;
    vf64 p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3;
    vf64 q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
    vf64 small = a + a * z * (p / q);
    vf64 large = 1.0 - 2.0 / (g_exp_f64(2.0 * a) + 1.0);
    vf64 y = g__orsign64(g__self64(a < 0.625, small, large), x);
    return g__nanor64(x, y);
}

/* ------------------------------------ log, log1p, expm1, logistic (mathfn/log.rs) */

/* x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)); k as an exact double. */
G_INL void g__decompose(vf64 x, vf64* kf, vf64* f) {
    vu64 u = (vu64)x + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull);
    *kf = (vf64)(0x4330000000000000ull | (u >> 52)) - 4503599627371519.0;
    *f = (vf64)((u & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull) - 1.0;
}

G_INL vf64 g__log_kernel(vf64 kf, vf64 f, vf64 c) {
    vf64 s = f / (2.0 + f);
    vf64 z = s * s;
    vf64 r = z * (2.0 / 3.0 + z * (2.0 / 5.0 + z * (2.0 / 7.0 + z * (2.0 / 9.0 + z * (2.0 / 11.0
             + z * (2.0 / 13.0 + z * (2.0 / 15.0 + z * (2.0 / 17.0 + z * (2.0 / 19.0 + z * (2.0 / 21.0))))))))));
    vf64 hfsq = 0.5 * f * f;
    return kf * 6.9314718036912381649e-1 - ((hfsq - (s * (hfsq + r) + (kf * 1.90821492927058770002e-10 + c))) - f);
}

G_INL vf64 g_log_f64(vf64 x) {
    vi64 sub = x < 2.2250738585072014e-308;
    vf64 xs = g__self64(sub, x * 18014398509481984.0, x);
    vf64 kf, f;
    g__decompose(xs, &kf, &f);
    kf = g__self64(sub, kf - 54.0, kf);
    vf64 y = g__log_kernel(kf, f, g__f64(0.0));
    y = g__self64(x == __builtin_inf(), x, y);
    y = g__self64(x == 0.0, g__f64(-__builtin_inf()), y);
    y = g__self64(x < 0.0, g__f64(__builtin_nan("")), y);
    return g__nanor64(x, y);
}

/* Mirrors ops/mathfn log_f32: fdlibm's logf, natively in f32. */
G_INL vf32 g_log_f32(vf32 x) {
    vi32 sub = x < 1.17549435e-38f;
    vf32 xs = g__self32(sub, x * 33554432.0f, x);
    vu32 u = (vu32)xs + (0x3f800000u - 0x3f3504f3u);
    vi32 k = (vi32)(u >> 23) - 127 - (sub & 25);
    vf32 f = (vf32)((u & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    vf32 kf = __builtin_convertvector(k, vf32);
    vf32 s = f / (2.0f + f);
    vf32 z = s * s;
    vf32 w = z * z;
    vf32 r = z * (6.6666662693e-1f + w * 2.8498786688e-1f) + w * (4.0000972152e-1f + w * 2.4279078841e-1f);
    vf32 hfsq = 0.5f * f * f;
    vf32 y = kf * 6.9313812256e-1f - ((hfsq - (s * (hfsq + r) + kf * 9.0580006145e-6f)) - f);
    y = g__self32(x == __builtin_inff(), x, y);
    y = g__self32(x == 0.0f, g__f32(-__builtin_inff()), y);
    y = g__self32(x < 0.0f, g__f32(__builtin_nanf("")), y);
    return g__nanor32(x, y);
}

/* Mirrors ops/mathfn/pow.rs pow_f32: exp(y ln|x|) in f64, rounded once to
 * f32, then C powf's special cases by selects. */
G_INL vf32 g_pow_f32(vf32 x, vf32 y) {
    const float round = 8388608.0f; /* 2^23 */
    vf64 xd = __builtin_convertvector(x, vf64), yd = __builtin_convertvector(y, vf64);
    vf32 m = __builtin_convertvector(g_exp_f64(yd * g_log_f64(g__abs64(xd))), vf32);
    vf32 ax = g__abs32(x), ay = g__abs32(y);
    vi32 whole = (ay >= round) | ((ay + round) - round == ay);
    vf32 half = ay * 0.5f;
    vi32 is_odd = (ay < 16777216.0f) & whole & ((half + round) - round != half);
    vi32 neg = (vi32)x < 0;
    vf32 r = g__self32(neg & is_odd, -m, m);
    r = g__self32((x < 0.0f) & (x > -__builtin_inff()) & ~whole, g__f32(__builtin_nanf("")), r);
    r = g__self32((ax == 1.0f) & (ay == __builtin_inff()), g__f32(1.0f), r);
    r = g__self32(x == 1.0f, g__f32(1.0f), r);
    return g__self32(y == 0.0f, g__f32(1.0f), r);
}

/* Mirrors ops/mathfn/atan.rs atan_series: atan u for |u| <= tan(pi/8). */
G_INL vf64 g__atan_series64(vf64 u) {
    vf64 z = u * u;
    vf64 p = -1.0 / 3.0 + z * (1.0 / 5.0 + z * (-1.0 / 7.0 + z * (1.0 / 9.0 + z * (-1.0 / 11.0 + z * (1.0 / 13.0
             + z * (-1.0 / 15.0 + z * (1.0 / 17.0 + z * (-1.0 / 19.0 + z * (1.0 / 21.0 + z * (-1.0 / 23.0))))))))));
    return u + u * z * p;
}

/* Mirrors ops/mathfn/atan.rs atan2_f32: the octant's atan in f64 with one
 * division (its operands selected first: selecting its quotient instead
 * made GCC compute the division twice), rounded once to f32; C's special
 * cases by the same selects. */
G_INL vf32 g_atan2_f32(vf32 y, vf32 x) {
    vf64 yd = __builtin_convertvector(y, vf64), xd = __builtin_convertvector(x, vf64);
    vf64 ay = g__abs64(yd), ax = g__abs64(xd);
    vi64 swap = ay > ax;
    vf64 num = g__self64(swap, ax, ay), den = g__self64(swap, ay, ax);
    vi64 both_inf = (ay == __builtin_inf()) & (ax == __builtin_inf());
    vi64 special = ((ay == 0.0) & (ax == 0.0)) | both_inf;
    vi64 big = (num > den * 0.41421356237309503) | both_inf;
    vf64 n = g__self64(special, g__f64(0.0), g__self64(big, num - den, num));
    vf64 d = g__self64(special, g__f64(1.0), g__self64(big, num + den, den));
    vf64 a = g__atan_series64(n / d);
    a = g__self64(big, 0.78539816339744828 + a, a);
    a = g__self64(swap, 1.5707963267948966 - a, a);
    a = g__self64((vi64)xd < 0, 3.141592653589793 - a, a);
    a = (vf64)(((vu64)a & 0x7fffffffffffffffull) | ((vu64)yd & 0x8000000000000000ull));
    return __builtin_convertvector(a, vf32);
}

G_INL vf64 g_log1p_f64(vf64 x) {
    vf64 u = 1.0 + x;
    vf64 c = g__self64(g__abs64(x) < 1.0, x - (u - 1.0), 1.0 - (u - x));
    vf64 kf, f;
    g__decompose(u, &kf, &f);
    vf64 y = g__log_kernel(kf, f, c / u);
    y = g__self64(x == __builtin_inf(), x, y);
    y = g__self64(x == -1.0, g__f64(-__builtin_inf()), y);
    y = g__self64(x < -1.0, g__f64(__builtin_nan("")), y);
    y = g__self64(g__abs64(x) < 5.551115123125783e-17, x, y);
    return g__nanor64(x, y);
}

G_INL vf64 g_expm1_f64(vf64 x) {
    vi64 n;
    vf64 nf;
    vf64 r = g__exp_reduce_f64(g__minc64(g__maxc64(x, -40.0), 710.0), &n, &nf);
    vf64 em = g__expm1_reduced_f64(r);
    vi64 n1 = (vi64)((vu64)(n + 2048) >> 1) - 1024;
    vi64 n2 = n - n1;
    vf64 s1 = (vf64)((vu64)(n1 + 1023) << 52);
    vf64 s2 = (vf64)((vu64)(n2 + 1023) << 52);
    vf64 big = (em + 1.0) * s1 * s2;
    vf64 s = s1 * s2;
    vf64 small = em * s + (s - 1.0);
    vf64 y = g__self64(n > 56, big, small);
    y = g__self64(g__abs64(x) < 5.551115123125783e-17, x, y);
    return g__nanor64(x, y);
}

G_INL vf64 g_logistic_f64(vf64 x) {
    vf64 e = g_exp_f64(-g__abs64(x));
    vf64 d = 1.0 + e;
    vf64 y = g__self64(x < 0.0, e, g__f64(1.0)) / d;
    return g__nanor64(x, y);
}

/* Mirrors ops/mathfn logistic_f32: natively in f32, on g_exp_f32. */
G_INL vf32 g_logistic_f32(vf32 x) {
    vf32 e = g_exp_f32(-g__abs32(x));
    vf32 d = 1.0f + e;
    vf32 y = g__self32(x < 0.0f, e, g__f32(1.0f)) / d;
    return g__nanor32(x, y);
}

/* ------------------------------------------------ sin, cos, tan (mathfn/trig.rs) */

G_INL void g__two_sum(vf64 a, vf64 b, vf64* s, vf64* e) {
    *s = a + b;
    vf64 bb = *s - a;
    *e = (a - (*s - bb)) + (b - bb);
}

/* x = n pi/2 + rh + rl (|x| <= 2^28; larger lanes reduce 0), q = n mod 4. */
G_INL void g__trig_reduce(vf64 x, vf64* rh, vf64* rl, vu64* q) {
    vf64 xc = g__self64(g__abs64(x) <= 268435456.0, x, g__f64(0.0));
    vf64 t = xc * 0.636619772367581343075535053490057448 + 6755399441055744.0;
    *q = (vu64)t & 3;
    vf64 nf = t - 6755399441055744.0;
    vf64 y1 = xc - nf * 1.5707963705062866;
    vf64 y2, e2, y3, e3;
    g__two_sum(y1, -(nf * -4.371138828673793e-08), &y2, &e2);
    g__two_sum(y2, -(nf * -1.7151245100058819e-15), &y3, &e3);
    vf64 lo = (e2 + e3) - nf * 1.056299898220315e-23 - nf * 8.4784276603689e-32;
    *rh = y3 + lo;
    *rl = lo - (*rh - y3);
}

G_INL vf64 g__sin_kernel(vf64 rh, vf64 rl) {
    vf64 z = rh * rh;
    vf64 p = -1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362880.0 + z * (-1.0 / 39916800.0
             + z * (1.0 / 6227020800.0 + z * (-1.0 / 1307674368000.0 + z * (1.0 / 355687428096000.0)))))));
    return rh + (rh * z * p + rl * (1.0 - 0.5 * z));
}

G_INL vf64 g__cos_kernel(vf64 rh, vf64 rl) {
    vf64 z = rh * rh;
    vf64 p = 1.0 / 24.0 + z * (-1.0 / 720.0 + z * (1.0 / 40320.0 + z * (-1.0 / 3628800.0 + z * (1.0 / 479001600.0
             + z * (-1.0 / 87178291200.0 + z * (1.0 / 20922789888000.0 + z * (-1.0 / 6402373705728000.0)))))));
    vf64 hz = 0.5 * z;
    vf64 w = 1.0 - hz;
    return w + (((1.0 - w) - hz) + (z * z * p - rh * rl));
}

G_INL vf64 g__trig_finish(vf64 x, vf64 y) {
    y = g__self64(g__abs64(x) <= 268435456.0, y, g__f64(__builtin_nan("")));
    return g__nanor64(x, y);
}

G_INL vf64 g_sin_f64(vf64 x) {
    vf64 rh, rl;
    vu64 q;
    g__trig_reduce(x, &rh, &rl, &q);
    vf64 s = g__sin_kernel(rh, rl), c = g__cos_kernel(rh, rl);
    vf64 r = g__self64((vi64)((q & 1) == 0), s, c);
    vf64 y = (vf64)((vu64)r ^ ((q & 2) << 62));
    y = g__self64(g__abs64(x) < 7.450580596923828e-9, x, y);
    return g__trig_finish(x, y);
}

G_INL vf64 g_cos_f64(vf64 x) {
    vf64 rh, rl;
    vu64 q;
    g__trig_reduce(x, &rh, &rl, &q);
    vf64 s = g__sin_kernel(rh, rl), c = g__cos_kernel(rh, rl);
    vf64 r = g__self64((vi64)((q & 1) == 0), c, s);
    vf64 y = (vf64)((vu64)r ^ (((q + 1) & 2) << 62));
    return g__trig_finish(x, y);
}

G_INL vf64 g_tan_f64(vf64 x) {
    vf64 rh, rl;
    vu64 q;
    g__trig_reduce(x, &rh, &rl, &q);
    vf64 s = g__sin_kernel(rh, rl), c = g__cos_kernel(rh, rl);
    vf64 y = g__self64((vi64)((q & 1) == 0), s / c, -c / s);
    y = g__self64(g__abs64(x) < 7.450580596923828e-9, x, y);
    return g__trig_finish(x, y);
}

/* ------------------------------------------------------------- erf (mathfn/erf.rs) */

static const double g__erf_recip[101] = {
    1.0 / 1.0, 1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0, 1.0 / 13.0, 1.0 / 15.0, 1.0 /
    17.0, 1.0 / 19.0, 1.0 / 21.0, 1.0 / 23.0, 1.0 / 25.0, 1.0 / 27.0, 1.0 / 29.0, 1.0 / 31.0, 1.0 /
    33.0, 1.0 / 35.0, 1.0 / 37.0, 1.0 / 39.0, 1.0 / 41.0, 1.0 / 43.0, 1.0 / 45.0, 1.0 / 47.0, 1.0 /
    49.0, 1.0 / 51.0, 1.0 / 53.0, 1.0 / 55.0, 1.0 / 57.0, 1.0 / 59.0, 1.0 / 61.0, 1.0 / 63.0, 1.0 /
    65.0, 1.0 / 67.0, 1.0 / 69.0, 1.0 / 71.0, 1.0 / 73.0, 1.0 / 75.0, 1.0 / 77.0, 1.0 / 79.0, 1.0 /
    81.0, 1.0 / 83.0, 1.0 / 85.0, 1.0 / 87.0, 1.0 / 89.0, 1.0 / 91.0, 1.0 / 93.0, 1.0 / 95.0, 1.0 /
    97.0, 1.0 / 99.0, 1.0 / 101.0, 1.0 / 103.0, 1.0 / 105.0, 1.0 / 107.0, 1.0 / 109.0, 1.0 / 111.0, 1.0
    / 113.0, 1.0 / 115.0, 1.0 / 117.0, 1.0 / 119.0, 1.0 / 121.0, 1.0 / 123.0, 1.0 / 125.0, 1.0 / 127.0,
    1.0 / 129.0, 1.0 / 131.0, 1.0 / 133.0, 1.0 / 135.0, 1.0 / 137.0, 1.0 / 139.0, 1.0 / 141.0, 1.0 /
    143.0, 1.0 / 145.0, 1.0 / 147.0, 1.0 / 149.0, 1.0 / 151.0, 1.0 / 153.0, 1.0 / 155.0, 1.0 / 157.0,
    1.0 / 159.0, 1.0 / 161.0, 1.0 / 163.0, 1.0 / 165.0, 1.0 / 167.0, 1.0 / 169.0, 1.0 / 171.0, 1.0 /
    173.0, 1.0 / 175.0, 1.0 / 177.0, 1.0 / 179.0, 1.0 / 181.0, 1.0 / 183.0, 1.0 / 185.0, 1.0 / 187.0,
    1.0 / 189.0, 1.0 / 191.0, 1.0 / 193.0, 1.0 / 195.0, 1.0 / 197.0, 1.0 / 199.0, 1.0 / 201.0
};

G_INL vf64 g__erf_core(vf64 x, double clamp, int terms) {
    vf64 a = g__minc64(g__abs64(x), clamp);
    vf64 a2 = a * a;
    vf64 u = a2 + a2;
    vf64 s = g__f64(1.0);
    for (int k = terms; k >= 1; k--) s = 1.0 + u * s * g__erf_recip[k];
    vf64 y = 1.12837916709551257389615890312154517 * (g_exp_f64(-a2) * s) * a;
    y = g__self64(a >= clamp, g__f64(1.0), y);
    return g__orsign64(y, x);
}

G_INL vf64 g_erf_f64(vf64 x) { return g__nanor64(x, g__erf_core(x, 6.0, 100)); }
G_INL vf32 g_erf_f32(vf32 x) {
    vf32 y = __builtin_convertvector(g__erf_core(__builtin_convertvector(x, vf64), 4.0, 48), vf32);
    return g__nanor32(x, y);
}

/* -------------------------------------------------- erf_inv (mathfn/erf_inv.rs) */
/* XLA's CPU erf_inv, bit for bit (see erf_inv.rs for where each step comes
 * from). Constants by their bits, as the Rust source writes them. The f64
 * version calls the C library's log per lane (Rust's f64::ln calls the same
 * function), the one libm call besides fma. */

G_INL float g__fb32(uint32_t u) { union { uint32_t u; float f; } c = {u}; return c.f; }
G_INL double g__fb64(uint64_t u) { union { uint64_t u; double f; } c = {u}; return c.f; }

G_INL vf32 g__xla_log_f32(vf32 v) {
    const float min_normal = g__fb32(0x00800000u);
    vf32 m = g__self32(v > min_normal, v, g__f32(min_normal));
    vu32 bits = (vu32)m;
    vi32 e = (vi32)(bits >> 23) - 127;
    vf32 mant = (vf32)((bits & 0x807FFFFFu) | 0x3F000000u);
    vi32 below = mant < g__fb32(0x3F3504F3u);
    vf32 t = (mant + -1.0f) + g__self32(below, mant, g__f32(0.0f));
    vf32 ef = (__builtin_convertvector(e, vf32) + 1.0f) - g__self32(below, g__f32(1.0f), g__f32(0.0f));
    vf32 t2 = t * t;
    vf32 t3 = t2 * t;
    vf32 y0 = g__fmac32(t, g__fb32(0x3D9021BBu), g__fb32(0xBDEBD1B8u));
    vf32 y1 = g__fmac32(t, g__fb32(0xBDFE5D4Fu), g__fb32(0x3E11E9BFu));
    vf32 y2 = g__fmac32(t, g__fb32(0x3E4CCEACu), g__fb32(0xBE7FFFFCu));
    y0 = g__fma32(y0, t, g__f32(g__fb32(0x3DEF251Au)));
    y1 = g__fma32(y1, t, g__f32(g__fb32(0xBE2AAE50u)));
    y2 = g__fma32(y2, t, g__f32(g__fb32(0x3EAAAAAAu)));
    vf32 y = g__fma32(g__fma32(y0, t3, y1), t3, y2);
    y = g__fma32(y, t3, ef * g__fb32(0xB95E8083u));
    vf32 r = g__fma32(ef, g__f32(g__fb32(0x3F318000u)), g__fma32(-t2, g__f32(0.5f), t) + y);
    return g__self32(v == 0.0f, g__f32(-__builtin_inff()), r);
}

static const uint32_t g__log1p_q_f32[6] = {0x417101ADu, 0x42A6185Bu, 0x435DC32Du, 0x439A8CA3u, 0x43586D8Au, 0x42707982u};
static const uint32_t g__log1p_p_f32[6] = {0x3EFF40C5u, 0x40D284FAu, 0x41EF4B9Cu, 0x4273CC76u, 0x426473ADu, 0x41A05101u};
static const uint64_t g__log1p_q_f64[6] = {0x402E20359E903E37ull, 0x4054C30B52213498ull, 0x406BB86590FCFB56ull,
                                           0x407351945DC908A5ull, 0x406B0DB13E48E066ull, 0x404E0F304466448Eull};
static const uint64_t g__log1p_p_f64[6] = {0x3FDFE818A0FE1A83ull, 0x401A509F46F4FA53ull, 0x403DE9738B8CB9C9ull,
                                           0x404E798EB86C3351ull, 0x404C8E7597479A10ull, 0x40340A202D99830Aull};

G_INL vf32 g__xla_log1p_f32(vf32 x) {
    vf32 big = g__xla_log_f32(x + 1.0f);
    vf32 x2 = x * x;
    vf32 z = x * 0.0f;
    vf32 q = z + 1.0f;
    for (int i = 0; i < 6; i++) q = g__fma32(q, x, g__f32(g__fb32(g__log1p_q_f32[i])));
    vf32 p = z + g__fb32(0x383DE04Bu);
    for (int i = 0; i < 6; i++) p = g__fma32(p, x, g__f32(g__fb32(g__log1p_p_f32[i])));
    vf32 r = p / q;
    vf32 small = x + g__fma32(x2, g__f32(-0.5f), (x * x2) * r);
    return g__self32(g__abs32(x) < g__fb32(0x3ED413CDu), small, big);
}

G_INL vf64 g__xla_log1p_f64(vf64 x) {
    vf64 v = x + 1.0, big;
    for (int i = 0; i < GL; i++) big[i] = __builtin_log(v[i]);
    vf64 x2 = x * x;
    vf64 z = x * 0.0;
    vf64 q = z + 1.0;
    for (int i = 0; i < 6; i++) q = g__fma64(q, x, g__f64(g__fb64(g__log1p_q_f64[i])));
    vf64 p = z + g__fb64(0x3F07BC0962B395CAull);
    for (int i = 0; i < 6; i++) p = g__fma64(p, x, g__f64(g__fb64(g__log1p_p_f64[i])));
    vf64 r = p / q;
    vf64 small = x + g__fma64(x2, g__f64(-0.5), (x * x2) * r);
    return g__self64(g__abs64(x) < g__fb64(0x3FDA827999FCEF32ull), small, big);
}

static const uint32_t g__erf_inv_central_f32[9] = {0x32F16588u, 0x34B84B36u, 0xB66C7357u, 0xB6935AC1u, 0x396532DBu,
                                                   0xBAA45408u, 0xBB88E4EFu, 0x3E7C8F63u, 0x3FC02E2Fu};
static const uint32_t g__erf_inv_tail_f32[9] = {0xB951F09Bu, 0x38D3B56Bu, 0x3AB0DC72u, 0xBB70BDE7u, 0x3BBC127Bu,
                                                0xBBF9C5D7u, 0x3C1AA57Eu, 0x3F8036DBu, 0x40354F7Eu};

G_INL vf32 g_erf_inv_f32(vf32 x) {
    vf32 w = -g__xla_log1p_f32(x * -x);
    vi32 central = w < 5.0f;
    vf32 s = g_sqrt_f32(w) + -3.0f;
    vf32 wp = g__self32(central, w + -2.5f, s);
    vf32 p = g__self32(central, g__f32(g__fb32(g__erf_inv_central_f32[0])), g__f32(g__fb32(g__erf_inv_tail_f32[0])));
    for (int i = 1; i < 9; i++)
        p = g__fma32(p, wp, g__self32(central, g__f32(g__fb32(g__erf_inv_central_f32[i])),
                                      g__f32(g__fb32(g__erf_inv_tail_f32[i]))));
    vf32 y = p * x;
    /* Flush to zero where the exact product is below the smallest normal. */
    vf64 exact = __builtin_convertvector(p, vf64) * __builtin_convertvector(x, vf64);
    vi32 tiny = g__narrow(g__abs64(exact) < 0x1p-126);
    y = g__self32(tiny, y * 0.0f, y);
    vf32 a = g__abs32(x);
    y = g__self32(a == 1.0f, x * __builtin_inff(), y);
    y = g__self32(a > 1.0f, g__f32(__builtin_nanf("")), y);
    return g__nanor32(x, y);
}

static const uint64_t g__erf_inv_central_f64[23] = {
    0xBBB135D2E746E627ull, 0xBC08DDF93324D327ull, 0x3C37B83EEF0B7C9Full, 0x3C69BA72CD589B91ull, 0xBCA33689090A6B96ull,
    0x3C782E11898132E0ull, 0x3CFDE4ACFD9E26BAull, 0xBD26D33EED66C487ull, 0xBD36F2167040D8E2ull, 0x3D872A22C2D77E20ull,
    0xBDAC8859C4E5C0AFull, 0xBDCDC583D118A561ull, 0x3E120F47CCF46B3Cull, 0xBE31A9E38DC84D60ull, 0xBE5F36CD6D3D46A9ull,
    0x3E9C6B4F5D03B787ull, 0xBEB6E8A5434AE8A2ull, 0xBEED1D1F7B8736F6ull, 0x3F2879C2A212F024ull, 0xBF4845769484FCA8ull,
    0xBF78B6C33114F909ull, 0x3FCEBD80D9B13E28ull, 0x3FFA755E7C99AE86ull};
static const uint64_t g__erf_inv_middle_f64[19] = {
    0x3E23040F87DBD932ull, 0x3E785CBE52878635ull, 0xBE92777453DD3955ull, 0x3E5395ABCD554C6Cull, 0x3EB936388A3790ADull,
    0xBED0D5DB812B5083ull, 0x3EC8860CD5D652F6ull, 0x3EEA29A0CACDFB23ull, 0xBF08CEF1F80281F2ull, 0x3F11E684D0B9188Aull,
    0x3EF932CD54C8A222ull, 0xBF37448A89EF8AA3ull, 0x3F4F3CC55AD40C25ull, 0xBF5BA924132F38B1ull, 0x3F6468EECA533CF8ull,
    0xBF6EBADABB891BBDull, 0x3F75FFCFE5B76AFCull, 0x3FF0158A6D641D39ull, 0x4008ABCC380D5A48ull};
static const uint64_t g__erf_inv_tail_f64[17] = {
    0xBDBDCEC3A7785389ull, 0xBDF18FEEC0E38727ull, 0x3E19E6BF2DDA45E3ull, 0xBE30468FB24E2F5Full, 0x3E405AC6A8FBA182ull,
    0xBE50102E495FB9C0ull, 0x3E5F4C20E1334AF8ull, 0xBE722D220FDF9C3Eull, 0x3E8EBC8BB824CB54ull, 0xBEB0A8D40EA372CCull,
    0x3ED2FBD29D093D2Bull, 0xBEF4A3497E1E0FACull, 0x3F13EBF4EB00938Full, 0xBF2C2F36A8FC5D53ull, 0xBF222EA5DF04047Cull,
    0x3FF02A30D1FBA0DCull, 0x4013664DDD1AD7FBull};

G_INL vf64 g__horner_f64(const uint64_t *c, int n, vf64 w) {
    vf64 p = g__f64(g__fb64(c[0]));
    for (int i = 1; i < n; i++) p = g__fma64(p, w, g__f64(g__fb64(c[i])));
    return p;
}

G_INL vf64 g_erf_inv_f64(vf64 x) {
    vf64 w = -g__xla_log1p_f64(x * -x);
    vf64 s = g_sqrt_f64(w);
    vf64 p = g__self64(w < 6.25, g__horner_f64(g__erf_inv_central_f64, 23, w + -3.125),
                       g__self64(w < 16.0, g__horner_f64(g__erf_inv_middle_f64, 19, s - 3.25),
                                 g__horner_f64(g__erf_inv_tail_f64, 17, s - 5.0)));
    vf64 y = p * x;
    /* Flush to zero where the exact |p x| is below the smallest normal
     * (scaled by 2^64, where the product's rounding error is exact). */
    vf64 ps = g__abs64(p) * 18446744073709551616.0, a = g__abs64(x);
    vf64 r = ps * a;
    vf64 err = g__fma64(ps, a, -r);
    const double limit = 0x1p-1022 * 18446744073709551616.0;
    vi64 tiny = (r < limit) | ((r == limit) & (err < 0.0));
    y = g__self64(tiny, y * 0.0, y);
    y = g__self64(a == 1.0, x * __builtin_inf(), y);
    y = g__self64(a > 1.0, g__f64(__builtin_nan("")), y);
    return g__nanor64(x, y);
}

/* f32 versions: evaluated in f64, rounded once; NaN in gives the same NaN out. */
#define G_VIA_F64(op)                                                              \
    G_INL vf32 g_##op##_f32(vf32 x) {                                              \
        vf32 y = __builtin_convertvector(g_##op##_f64(__builtin_convertvector(x, vf64)), vf32); \
        return g__nanor32(x, y);                                     \
    }
G_VIA_F64(log1p)
G_VIA_F64(expm1)
G_VIA_F64(sin)
G_VIA_F64(cos)
G_VIA_F64(tan)

#endif /* GRAFT_PRELUDE_H */
