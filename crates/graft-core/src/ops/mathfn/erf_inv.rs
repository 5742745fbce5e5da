//! `erf_inv`, bit for bit what JAX gives on CPU (`jax.lax.erf_inv`, and so
//! `jax.random.normal`, which is `sqrt(2) erf_inv(u)`), on x86-64 with FMA.
//!
//! Why reproduce XLA rather than compute the best result: `graft.random.normal`
//! promises JAX's samples for the same key, so it needs JAX's rounding, not
//! a more accurate inverse. What XLA 0.10.2 (jaxlib 0.10.2) runs, read off
//! its optimized LLVM IR and machine code (`XLA_FLAGS=--xla_dump_to=...`) and
//! confirmed bitwise against JAX on an AMD EPYC (AVX2, FMA; glibc 2.36):
//! every f32 in `[-1, 1]` and about 10^7 f64 inputs (edges, tails, near the
//! smallest normal, 10^6-draw `normal` samples). The tests keep checking it:
//! `tests/all/erf_inv.rs` against JAX's bits in
//! `tests/data/erf_inv_reference.json`, `python/tests/test_extras.py`
//! against JAX itself.
//!
//! - CHLO's `erf_inv` expands to `w = -log1p(-x * x)`, a polynomial `p` in
//!   `w` and the result `x p`, with `x * inf` where `|x| = 1`. f32 uses
//!   Giles' single-precision polynomials (degree 8 in `w - 2.5` for `w < 5`,
//!   in `sqrt(w) - 3` beyond); f64 Giles' double-precision ones (degree 22
//!   in `w - 3.125` for `w < 6.25`, 18 in `sqrt(w) - 3.25` for `w < 16`, 16
//!   in `sqrt(w) - 5` beyond) (M. Giles, "Approximating the erfinv function",
//!   GPU Computing Gems, 2011). The coefficients below are the bits XLA's IR
//!   holds.
//! - XLA's `log1p(x)`: for `|x| < sqrt(2) - 1` a rational approximation
//!   `x - x^2/2 + x^3 P(x) / Q(x)` (Cephes' `log1p` coefficients, degree 6
//!   over 6); beyond, `log(1 + x)`. `log` is, for f32, XLA's own inlined
//!   polynomial (Cephes' `logf`: mantissa in `[sqrt(1/2), sqrt(2))`, a
//!   degree-8 polynomial in three FMA chains, the exponent added back with
//!   `ln 2` split in two); for f64 a call to the C library's `log`.
//! - LLVM's x86 back end contracts every multiply whose only use is an add
//!   into an FMA (XLA compiles with `-ffp-contract=fast` semantics): the
//!   polynomials are Horner's rule in FMAs, and where an add takes two
//!   single-use products the one LLVM fuses was found by testing both.
//!   A CPU without FMA would give JAX different bits; graft always rounds
//!   as with FMA (`mul_add`), so it matches JAX where XLA emits FMAs
//!   (checked on x86-64 with FMA; other architectures and C libraries are
//!   untested).
//! - XLA runs its kernels with denormals flushed to zero (MXCSR FTZ/DAZ,
//!   tininess detected before rounding). Inside `erf_inv` the only place that
//!   shows is the final product `x p`: where its exact value is below the
//!   smallest normal number the result is a zero of `x`'s sign (the other
//!   places a subnormal can arise are absorbed by a later addition of a much
//!   larger number, which the exhaustive f32 check confirms).
//!
//! So the f64 version calls the platform `log` (Rust's `f64::ln`, the same
//! symbol the C prelude calls), the one exception to "no libm" in
//! `ops::mathfn`: JAX's result depends on it, and both graft backends call
//! the same function in the same process, so they agree bit for bit.
//!
//! Accuracy is therefore XLA's, not graft's usual bound (measured against
//! mpmath on 3000 points per range): relative error up to 2 eps for
//! `|x| < 0.9`, 10 eps up to 0.999 and 48 eps beyond in f32; 16, 9 and
//! 22000 eps (5e-12) in f64, where `erf_inv` is steep near `±1` and the
//! rounding of `1 - x^2` dominates. The backward error `|erf(y) - x|` stays
//! below 1 eps (f32) and 8 eps (f64) everywhere (`tests/all/erf_inv.rs`). Specials: `erf_inv(±1) = ±inf`, `|x| > 1` gives NaN, NaN in gives
//! the same NaN out, `erf_inv(±0) = ±0`, odd exactly.

// Coefficients are the exact bits of XLA's IR.
#![allow(clippy::unreadable_literal)]

/// f32 `log` of XLA's CPU backend on `v >= 0` (`v = 1 + x`, `x >= -1`):
/// `v = m 2^e` with `m` in `[sqrt(1/2), sqrt(2))`, `t = m - 1`, `ln v =
/// t - t^2/2 + t^3 P(t) + e ln2` with `ln2 = 0.693359375 - 2.12194440e-4`.
#[inline(always)]
fn xla_log_f32(v: f32) -> f32 {
    const MIN_NORMAL: f32 = f32::MIN_POSITIVE;
    let m = if v > MIN_NORMAL { v } else { MIN_NORMAL };
    let bits = m.to_bits();
    let e = (bits >> 23) as i32 - 127;
    let mant = f32::from_bits((bits & 0x807F_FFFF) | 0x3F00_0000);
    let below = mant < f32::from_bits(0x3F35_04F3);
    let t = (mant + -1.0) + if below { mant } else { 0.0 };
    let ef = (e as f32 + 1.0) - if below { 1.0 } else { 0.0 };
    let t2 = t * t;
    let t3 = t2 * t;
    let y0 = t.mul_add(f32::from_bits(0x3D90_21BB), f32::from_bits(0xBDEB_D1B8));
    let y1 = t.mul_add(f32::from_bits(0xBDFE_5D4F), f32::from_bits(0x3E11_E9BF));
    let y2 = t.mul_add(f32::from_bits(0x3E4C_CEAC), f32::from_bits(0xBE7F_FFFC));
    let y0 = y0.mul_add(t, f32::from_bits(0x3DEF_251A));
    let y1 = y1.mul_add(t, f32::from_bits(0xBE2A_AE50));
    let y2 = y2.mul_add(t, f32::from_bits(0x3EAA_AAAA));
    let y = y0.mul_add(t3, y1).mul_add(t3, y2);
    let y = y.mul_add(t3, ef * f32::from_bits(0xB95E_8083));
    let r = ef.mul_add(f32::from_bits(0x3F31_8000), (-t2).mul_add(0.5, t) + y);
    // v = 0 gives -inf; v < 0 cannot occur for |x| <= 1 (NaN is handled
    // by the caller).
    if v == 0.0 {
        f32::NEG_INFINITY
    } else {
        r
    }
}

/// XLA's small-argument `log1p` rational: `x + (x^3 P(x)/Q(x) - x^2/2)`,
/// `P` and `Q` by Horner's rule in FMAs from their leading coefficients
/// (`Q` monic; the leading step `(x 0 + 1) x + q` is XLA's, and equals
/// `x + q`).
macro_rules! log1p_small {
    ($x:expr, $t:ty, $p0:expr, $p:expr, $q:expr) => {{
        let x: $t = $x;
        let x2 = x * x;
        let z = x * 0.0;
        let mut q = z + 1.0;
        for c in $q {
            q = q.mul_add(x, <$t>::from_bits(c));
        }
        let mut p = z + <$t>::from_bits($p0);
        for c in $p {
            p = p.mul_add(x, <$t>::from_bits(c));
        }
        let r = p / q;
        x + x2.mul_add(-0.5, (x * x2) * r)
    }};
}

const LOG1P_Q_F32: [u32; 6] = [0x4171_01AD, 0x42A6_185B, 0x435D_C32D, 0x439A_8CA3, 0x4358_6D8A, 0x4270_7982];
const LOG1P_P0_F32: u32 = 0x383D_E04B; // 4.527e-5
const LOG1P_P_F32: [u32; 6] = [0x3EFF_40C5, 0x40D2_84FA, 0x41EF_4B9C, 0x4273_CC76, 0x4264_73AD, 0x41A0_5101];
const LOG1P_Q_F64: [u64; 6] = [
    0x402E_2035_9E90_3E37,
    0x4054_C30B_5221_3498,
    0x406B_B865_90FC_FB56,
    0x4073_5194_5DC9_08A5,
    0x406B_0DB1_3E48_E066,
    0x404E_0F30_4466_448E,
];
const LOG1P_P0_F64: u64 = 0x3F07_BC09_62B3_95CA;
const LOG1P_P_F64: [u64; 6] = [
    0x3FDF_E818_A0FE_1A83,
    0x401A_509F_46F4_FA53,
    0x403D_E973_8B8C_B9C9,
    0x404E_798E_B86C_3351,
    0x404C_8E75_9747_9A10,
    0x4034_0A20_2D99_830A,
];

/// XLA's f32 `log1p` for `x` in `[-1, 0]`.
#[inline(always)]
fn xla_log1p_f32(x: f32) -> f32 {
    let big = xla_log_f32(x + 1.0);
    let small = log1p_small!(x, f32, LOG1P_P0_F32, LOG1P_P_F32, LOG1P_Q_F32);
    if x.abs() < f32::from_bits(0x3ED4_13CD) {
        small
    } else {
        big
    }
}

/// XLA's f64 `log1p` for `x` in `[-1, 0]` (the platform `log` beyond the
/// rational's range).
#[inline(always)]
fn xla_log1p_f64(x: f64) -> f64 {
    let big = (x + 1.0).ln();
    let small = log1p_small!(x, f64, LOG1P_P0_F64, LOG1P_P_F64, LOG1P_Q_F64);
    if x.abs() < f64::from_bits(0x3FDA_8279_99FC_EF32) {
        small
    } else {
        big
    }
}

/// Giles' f32 coefficients, highest degree first: `w < 5`, then beyond.
const CENTRAL_F32: [u32; 9] = [
    0x32F1_6588,
    0x34B8_4B36,
    0xB66C_7357,
    0xB693_5AC1,
    0x3965_32DB,
    0xBAA4_5408,
    0xBB88_E4EF,
    0x3E7C_8F63,
    0x3FC0_2E2F,
];
const TAIL_F32: [u32; 9] = [
    0xB951_F09B,
    0x38D3_B56B,
    0x3AB0_DC72,
    0xBB70_BDE7,
    0x3BBC_127B,
    0xBBF9_C5D7,
    0x3C1A_A57E,
    0x3F80_36DB,
    0x4035_4F7E,
];

/// Giles' f64 coefficients, highest degree first: `w < 6.25`, `w < 16`,
/// beyond.
const CENTRAL_F64: [u64; 23] = [
    0xBBB1_35D2_E746_E627,
    0xBC08_DDF9_3324_D327,
    0x3C37_B83E_EF0B_7C9F,
    0x3C69_BA72_CD58_9B91,
    0xBCA3_3689_090A_6B96,
    0x3C78_2E11_8981_32E0,
    0x3CFD_E4AC_FD9E_26BA,
    0xBD26_D33E_ED66_C487,
    0xBD36_F216_7040_D8E2,
    0x3D87_2A22_C2D7_7E20,
    0xBDAC_8859_C4E5_C0AF,
    0xBDCD_C583_D118_A561,
    0x3E12_0F47_CCF4_6B3C,
    0xBE31_A9E3_8DC8_4D60,
    0xBE5F_36CD_6D3D_46A9,
    0x3E9C_6B4F_5D03_B787,
    0xBEB6_E8A5_434A_E8A2,
    0xBEED_1D1F_7B87_36F6,
    0x3F28_79C2_A212_F024,
    0xBF48_4576_9484_FCA8,
    0xBF78_B6C3_3114_F909,
    0x3FCE_BD80_D9B1_3E28,
    0x3FFA_755E_7C99_AE86,
];
const MIDDLE_F64: [u64; 19] = [
    0x3E23_040F_87DB_D932,
    0x3E78_5CBE_5287_8635,
    0xBE92_7774_53DD_3955,
    0x3E53_95AB_CD55_4C6C,
    0x3EB9_3638_8A37_90AD,
    0xBED0_D5DB_812B_5083,
    0x3EC8_860C_D5D6_52F6,
    0x3EEA_29A0_CACD_FB23,
    0xBF08_CEF1_F802_81F2,
    0x3F11_E684_D0B9_188A,
    0x3EF9_32CD_54C8_A222,
    0xBF37_448A_89EF_8AA3,
    0x3F4F_3CC5_5AD4_0C25,
    0xBF5B_A924_132F_38B1,
    0x3F64_68EE_CA53_3CF8,
    0xBF6E_BADA_BB89_1BBD,
    0x3F75_FFCF_E5B7_6AFC,
    0x3FF0_158A_6D64_1D39,
    0x4008_ABCC_380D_5A48,
];
const TAIL_F64: [u64; 17] = [
    0xBDBD_CEC3_A778_5389,
    0xBDF1_8FEE_C0E3_8727,
    0x3E19_E6BF_2DDA_45E3,
    0xBE30_468F_B24E_2F5F,
    0x3E40_5AC6_A8FB_A182,
    0xBE50_102E_495F_B9C0,
    0x3E5F_4C20_E133_4AF8,
    0xBE72_2D22_0FDF_9C3E,
    0x3E8E_BC8B_B824_CB54,
    0xBEB0_A8D4_0EA3_72CC,
    0x3ED2_FBD2_9D09_3D2B,
    0xBEF4_A349_7E1E_0FAC,
    0x3F13_EBF4_EB00_938F,
    0xBF2C_2F36_A8FC_5D53,
    0xBF22_2EA5_DF04_047C,
    0x3FF0_2A30_D1FB_A0DC,
    0x4013_664D_DD1A_D7FB,
];

/// `erf_inv(x)` for one f32 (the element function of [`erf_inv_f32_slice`]).
#[inline(always)]
pub fn erf_inv_f32(x: f32) -> f32 {
    let w = -xla_log1p_f32(x * -x);
    let central = w < 5.0;
    // Both arguments are computed and one is selected (XLA evaluates
    // `sqrt(w)` everywhere too).
    let s = w.sqrt() + -3.0;
    let wp = if central { w + -2.5 } else { s };
    let mut p = f32::from_bits(if central { CENTRAL_F32[0] } else { TAIL_F32[0] });
    for i in 1..CENTRAL_F32.len() {
        p = p.mul_add(wp, f32::from_bits(if central { CENTRAL_F32[i] } else { TAIL_F32[i] }));
    }
    let y = p * x;
    // Flush to zero where the exact product is below the smallest normal
    // (exact in f64: two 24-bit significands).
    let tiny = ((p as f64) * (x as f64)).abs() < f32::MIN_POSITIVE as f64;
    let y = if tiny { y * 0.0 } else { y };
    let a = x.abs();
    let y = if a == 1.0 { x * f32::INFINITY } else { y };
    let y = if a > 1.0 { f32::NAN } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Horner's rule in FMAs over `c` (highest degree first).
#[inline(always)]
fn horner_f64(c: &[u64], w: f64) -> f64 {
    let mut p = f64::from_bits(c[0]);
    for &k in &c[1..] {
        p = p.mul_add(w, f64::from_bits(k));
    }
    p
}

/// `erf_inv(x)` for one f64 (the element function of [`erf_inv_f64_slice`]).
#[inline(always)]
pub fn erf_inv_f64(x: f64) -> f64 {
    let w = -xla_log1p_f64(x * -x);
    let s = w.sqrt();
    let p = if w < 6.25 {
        horner_f64(&CENTRAL_F64, w + -3.125)
    } else if w < 16.0 {
        horner_f64(&MIDDLE_F64, s - 3.25)
    } else {
        horner_f64(&TAIL_F64, s - 5.0)
    };
    let y = p * x;
    // Flush to zero where the exact |p x| is below the smallest normal:
    // scaled by 2^64 the product and its rounding error are normal, and a
    // product that rounds to the threshold is below it exactly when the
    // error is negative.
    const SCALE: f64 = 18_446_744_073_709_551_616.0; // 2^64
    let (ps, a) = (p.abs() * SCALE, x.abs());
    let r = ps * a;
    let err = ps.mul_add(a, -r);
    let limit = f64::MIN_POSITIVE * SCALE;
    let tiny = r < limit || (r == limit && err < 0.0);
    let y = if tiny { y * 0.0 } else { y };
    let y = if a == 1.0 { x * f64::INFINITY } else { y };
    let y = if a > 1.0 { f64::NAN } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `o[i] = erf_inv(a[i])` over `min(a.len(), o.len())` elements.
#[inline(always)]
pub fn erf_inv_f32_slice(a: &[f32], o: &mut [f32]) {
    for (o, &x) in o.iter_mut().zip(a) {
        *o = erf_inv_f32(x);
    }
}

/// `o[i] = erf_inv(a[i])` over `min(a.len(), o.len())` elements (a scalar
/// loop: `log` is a library call).
#[inline(always)]
pub fn erf_inv_f64_slice(a: &[f64], o: &mut [f64]) {
    for (o, &x) in o.iter_mut().zip(a) {
        *o = erf_inv_f64(x);
    }
}
