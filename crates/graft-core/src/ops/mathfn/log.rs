//! `log`, `log1p`, `expm1` and `logistic` (f64 algorithms; the f32 versions
//! of `log1p` and `expm1` evaluate them in f64 and round once, f32 `log` is
//! fdlibm's `logf` (the same reduction in f32 with a shorter polynomial) and
//! f32 `logistic` is native f32 on the f32 `exp`).
//!
//! `log`/`log1p`: `x = 2^k m` with `m` in `[sqrt(1/2), sqrt(2))` taken from
//! the exponent bits (subnormals are scaled by `2^54` first), `f = m - 1`
//! (exact), `s = f / (2 + f)`, `log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2))`
//! with `R(z) = sum_k 2 z^k / (2k + 1)` (Taylor, 10 terms: the truncation is
//! below 2^-60 relative on `|s| <= 0.1716`), and `k ln 2` added in two
//! parts (`ln2_hi` has 32 trailing zero bits, so `k ln2_hi` is exact).
//! `log1p` computes `u = 1 + x` rounded and adds the rounding error
//! `c = (1 + x) - u` (recovered exactly with Fast2Sum) as `c / u`.
//!
//! `expm1`: the reduction of `exp` (`x = n ln2 + r`), `expm1(r)` as
//! `r + r^2 (1/2 + r/6 + ...)` (Taylor to degree 13), then
//! `2^n expm1(r) + (2^n - 1)`; for `n > 56` the `- 1` is below half an ulp
//! and `exp`'s `(1 + expm1(r)) 2^n1 2^n2` form is used, which overflows
//! exactly like `exp`.
//!
//! `logistic(x)`: `e = exp(-|x|)`, then `1 / (1 + e)` or `e / (1 + e)`; in f32
//! the errors of `exp` (1 ulp), the sum and the division add up to 2 ulp.

#![allow(clippy::excessive_precision)]
#![allow(clippy::manual_clamp)]

use super::exp_f64;

/// Bits of `sqrt(1/2)`: the lower end of the reduced mantissa range.
const SQRT_HALF_BITS: u64 = 0x3fe6_a09e_667f_3bcd;
/// fdlibm's split of ln 2 (`LN2_HI` has its low 32 bits zero, so `n * LN2_HI`
/// is exact for the exponents `n` of `log` and `exp`).
pub(super) const LN2_HI: f64 = 6.931_471_803_691_238_164_9e-1;
pub(super) const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
/// `2^-54`: below this `log1p(x)` and `expm1(x)` round to `x`.
const TINY: f64 = 5.551_115_123_125_783e-17;

/// `(k, f)` with `x = 2^k (1 + f)` and `1 + f` in `[sqrt(1/2), sqrt(2))`,
/// for positive normal `x` (other inputs give garbage the callers replace).
#[inline(always)]
fn decompose(x: f64) -> (f64, f64) {
    let u = x.to_bits().wrapping_add(0x3ff0_0000_0000_0000 - SQRT_HALF_BITS);
    // 2^52 + (k + 1023) as a double (exact), minus the bias: no int -> float
    // conversion (AVX2 has none for 64-bit integers).
    let kf = f64::from_bits(0x4330_0000_0000_0000 | (u >> 52)) - 4_503_599_627_371_519.0;
    let m = f64::from_bits((u & 0x000f_ffff_ffff_ffff) + SQRT_HALF_BITS);
    (kf, m - 1.0)
}

/// `k ln2 + log(1 + f) + c` for `1 + f` in `[sqrt(1/2), sqrt(2))` and a
/// small correction `c`.
#[inline(always)]
fn log_kernel(kf: f64, f: f64, c: f64) -> f64 {
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z
        * (2.0 / 3.0
            + z * (2.0 / 5.0
                + z * (2.0 / 7.0
                    + z * (2.0 / 9.0
                        + z * (2.0 / 11.0
                            + z * (2.0 / 13.0
                                + z * (2.0 / 15.0 + z * (2.0 / 17.0 + z * (2.0 / 19.0 + z * (2.0 / 21.0))))))))));
    let hfsq = 0.5 * f * f;
    kf * LN2_HI - ((hfsq - (s * (hfsq + r) + (kf * LN2_LO + c))) - f)
}

/// Natural logarithm of one f64.
#[inline(always)]
pub fn log_f64(x: f64) -> f64 {
    let sub = x < f64::MIN_POSITIVE;
    let xs = if sub { x * 18_014_398_509_481_984.0 } else { x };
    let (kf, f) = decompose(xs);
    let kf = if sub { kf - 54.0 } else { kf };
    let y = log_kernel(kf, f, 0.0);
    let y = if x == f64::INFINITY { x } else { y };
    let y = if x == 0.0 { f64::NEG_INFINITY } else { y };
    let y = if x < 0.0 { f64::NAN } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Natural logarithm of one f32, natively in f32 (fdlibm's `logf`
/// reduction and its four-term minimax `R(z)`, `|error| < 2^-34`, on
/// `s = f / (2 + f)`): 16 lanes where the f64 route has 8 and no
/// conversions, for at most 1 ulp.
#[inline(always)]
pub fn log_f32(x: f32) -> f32 {
    const SQRT_HALF_BITS32: u32 = 0x3f35_04f3;
    // ln 2 = LN2_HI32 + LN2_LO32; LN2_HI32 has 12 trailing zero bits, so
    // k * LN2_HI32 is exact for every exponent k here (|k| < 2^8).
    const LN2_HI32: f32 = 6.931_381_225_6e-1;
    const LN2_LO32: f32 = 9.058_000_614_5e-6;
    const LG1: f32 = 6.666_666_269_3e-1;
    const LG2: f32 = 4.000_097_215_2e-1;
    const LG3: f32 = 2.849_878_668_8e-1;
    const LG4: f32 = 2.427_907_884_1e-1;
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 33_554_432.0 } else { x }; // 2^25
    let u = xs.to_bits().wrapping_add(0x3f80_0000 - SQRT_HALF_BITS32);
    let k = (u >> 23) as i32 - 127 - if sub { 25 } else { 0 };
    let f = f32::from_bits((u & 0x007f_ffff) + SQRT_HALF_BITS32) - 1.0;
    let kf = k as f32;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let r = z * (LG1 + w * LG3) + w * (LG2 + w * LG4);
    let hfsq = 0.5 * f * f;
    let y = kf * LN2_HI32 - ((hfsq - (s * (hfsq + r) + kf * LN2_LO32)) - f);
    let y = if x == f32::INFINITY { x } else { y };
    let y = if x == 0.0 { f32::NEG_INFINITY } else { y };
    let y = if x < 0.0 { f32::NAN } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `ln(1 + x)` of one f64.
#[inline(always)]
pub fn log1p_f64(x: f64) -> f64 {
    let u = 1.0 + x;
    // (1 + x) - u exactly (Fast2Sum, larger operand first).
    let c = if x.abs() < 1.0 { x - (u - 1.0) } else { 1.0 - (u - x) };
    let (kf, f) = decompose(u);
    let y = log_kernel(kf, f, c / u);
    let y = if x == f64::INFINITY { x } else { y };
    let y = if x == -1.0 { f64::NEG_INFINITY } else { y };
    let y = if x < -1.0 { f64::NAN } else { y };
    let y = if x.abs() < TINY { x } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `e^x - 1` of one f64.
#[inline(always)]
pub fn expm1_f64(x: f64) -> f64 {
    let (n, r) = super::exp_reduce_f64(x.max(-40.0).min(710.0));
    let em = super::expm1_reduced_f64(r);
    let n1 = ((n + 2048) as u64 >> 1) as i64 - 1024;
    let n2 = n - n1;
    let s1 = f64::from_bits(((n1 + 1023) as u64) << 52);
    let s2 = f64::from_bits(((n2 + 1023) as u64) << 52);
    let big = (em + 1.0) * s1 * s2;
    let s = s1 * s2;
    let small = em * s + (s - 1.0);
    let y = if n > 56 { big } else { small };
    let y = if x.abs() < TINY { x } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `1 / (1 + e^-x)` of one f64: with `e = e^-|x|` (never overflows),
/// `1 / (1 + e)` for `x >= 0` and `e / (1 + e)` for `x < 0` (one division:
/// the numerator is selected first).
#[inline(always)]
pub fn logistic_f64(x: f64) -> f64 {
    let e = exp_f64(-x.abs());
    let d = 1.0 + e;
    let y = if x < 0.0 { e } else { 1.0 } / d;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `1 / (1 + e^-x)` of one f32, natively in f32 (the same formula as
/// [`logistic_f64`] on [`exp_f32`](super::exp_f32)): twice the lanes of the
/// f64 evaluation and no conversions, for at most 2 ulp (the f64 route
/// gave 1).
#[inline(always)]
pub fn logistic_f32(x: f32) -> f32 {
    let e = super::exp_f32(-x.abs());
    let d = 1.0 + e;
    let y = if x < 0.0 { e } else { 1.0 } / d;
    if x.is_nan() {
        x
    } else {
        y
    }
}
