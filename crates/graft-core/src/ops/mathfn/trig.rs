//! `sin`, `cos`, `tan` (f64 algorithms; the f32 versions evaluate them in
//! f64 and round once).
//!
//! Range reduction (Cody–Waite, no Payne–Hanek): `n = round(x 2/pi)` (the
//! `1.5 * 2^52` trick, so `n mod 4` is in the low bits), `r = x - n pi/2`
//! with `pi/2` split into four 24-bit parts `C1..C4` (so `n * Ci` is exact
//! for `|n| < 2^29`) and a rounded fifth part `C5`; `x - n C1` is exact
//! (Sterbenz), the next two subtractions are exact TwoSums and the rest is
//! summed into a tail, giving `r = rh + rl` to about 2^-100 relative even at
//! the closest approaches of doubles to multiples of pi/2 in range. This
//! holds for `|x| <= 2^28` (`LIMIT`); beyond it the functions return NaN
//! (documented fallback; `±inf` also gives NaN, as in C).
//!
//! Kernels on `|r| <= pi/4`: `sin r = rh + (rh z P(z) + rl (1 - z/2))` and
//! `cos r = w + (((1 - w) - z/2) + (z^2 Q(z) - rh rl))`, `w = 1 - z/2`,
//! `z = rh^2`, with Taylor polynomials (`P` to `r^17`, `Q` to `r^18`: the
//! truncation is below 2^-62 relative). The quadrant picks `±sin r` or
//! `±cos r`; `tan = sin / cos` or `-cos / sin`.

#![allow(clippy::excessive_precision)]

/// `|x|` above which the reduction is no longer exact: the result is NaN.
pub const TRIG_LIMIT: f64 = 268_435_456.0; // 2^28
const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
const C1: f64 = 1.5707963705062866;
const C2: f64 = -4.371138828673793e-08;
const C3: f64 = -1.7151245100058819e-15;
const C4: f64 = 1.056299898220315e-23;
const C5: f64 = 8.4784276603689e-32;
/// 2^-27: below this `sin x` and `tan x` round to `x`.
const TINY: f64 = 7.450_580_596_923_828e-9;

#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `x = n pi/2 + rh + rl`: returns `(rh, rl, n mod 4)`.
#[inline(always)]
fn reduce(x: f64) -> (f64, f64, u64) {
    let xc = if x.abs() <= TRIG_LIMIT { x } else { 0.0 };
    let t = xc * std::f64::consts::FRAC_2_PI + MAGIC;
    let q = t.to_bits() & 3;
    let nf = t - MAGIC;
    let y1 = xc - nf * C1;
    let (y2, e2) = two_sum(y1, -(nf * C2));
    let (y3, e3) = two_sum(y2, -(nf * C3));
    let lo = (e2 + e3) - nf * C4 - nf * C5;
    let rh = y3 + lo;
    let rl = lo - (rh - y3);
    (rh, rl, q)
}

#[inline(always)]
fn sin_kernel(rh: f64, rl: f64) -> f64 {
    let z = rh * rh;
    let p = -1.0 / 6.0
        + z * (1.0 / 120.0
            + z * (-1.0 / 5_040.0
                + z * (1.0 / 362_880.0
                    + z * (-1.0 / 39_916_800.0
                        + z * (1.0 / 6_227_020_800.0
                            + z * (-1.0 / 1_307_674_368_000.0 + z * (1.0 / 355_687_428_096_000.0)))))));
    rh + (rh * z * p + rl * (1.0 - 0.5 * z))
}

#[inline(always)]
fn cos_kernel(rh: f64, rl: f64) -> f64 {
    let z = rh * rh;
    let p = 1.0 / 24.0
        + z * (-1.0 / 720.0
            + z * (1.0 / 40_320.0
                + z * (-1.0 / 3_628_800.0
                    + z * (1.0 / 479_001_600.0
                        + z * (-1.0 / 87_178_291_200.0
                            + z * (1.0 / 20_922_789_888_000.0 + z * (-1.0 / 6_402_373_705_728_000.0)))))));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    w + (((1.0 - w) - hz) + (z * z * p - rh * rl))
}

/// Sine of one f64 (NaN for `|x| > 2^28`).
#[inline(always)]
pub fn sin_f64(x: f64) -> f64 {
    let (rh, rl, q) = reduce(x);
    let s = sin_kernel(rh, rl);
    let c = cos_kernel(rh, rl);
    let r = if q & 1 == 0 { s } else { c };
    let y = f64::from_bits(r.to_bits() ^ ((q & 2) << 62));
    let y = if x.abs() < TINY { x } else { y };
    let y = if x.abs() <= TRIG_LIMIT { y } else { f64::NAN };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Cosine of one f64 (NaN for `|x| > 2^28`).
#[inline(always)]
pub fn cos_f64(x: f64) -> f64 {
    let (rh, rl, q) = reduce(x);
    let s = sin_kernel(rh, rl);
    let c = cos_kernel(rh, rl);
    let r = if q & 1 == 0 { c } else { s };
    let y = f64::from_bits(r.to_bits() ^ (((q + 1) & 2) << 62));
    let y = if x.abs() <= TRIG_LIMIT { y } else { f64::NAN };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Tangent of one f64 (NaN for `|x| > 2^28`).
#[inline(always)]
pub fn tan_f64(x: f64) -> f64 {
    let (rh, rl, q) = reduce(x);
    let s = sin_kernel(rh, rl);
    let c = cos_kernel(rh, rl);
    let y = if q & 1 == 0 { s / c } else { -c / s };
    let y = if x.abs() < TINY { x } else { y };
    let y = if x.abs() <= TRIG_LIMIT { y } else { f64::NAN };
    if x.is_nan() {
        x
    } else {
        y
    }
}
