//! `erf` (f64 algorithm; f32 evaluates it in f64 with fewer terms and rounds
//! once).
//!
//! `erf(a) = (2/sqrt(pi)) a e^(-a^2) S(2a^2)` with the everywhere-positive
//! series `S(u) = sum_n u^n / (1 3 5 ... (2n+1))` (no cancellation at any
//! `a`), evaluated in nested form `S = 1 + u c_1 (1 + u c_2 (1 + ...))`,
//! `c_k = 1 / (2k + 1)`, so rounding errors are damped rather than
//! accumulated. `e^(-a^2)` and `S` use the same rounded `a^2`, which makes
//! the product insensitive to that rounding. `|x|` is clamped to 6 (f64,
//! where `erf` rounds to 1; 100 terms reach 2^-58 there) or 4 (f32, 48
//! terms); at and beyond the clamp the result is `±1`. `erf` is exactly odd,
//! `erf(±0) = ±0`, NaN in gives the same NaN out.

use super::exp_f64;

/// Terms of the series for f64 and f32.
pub const ERF_TERMS_F64: usize = 100;
pub const ERF_TERMS_F32: usize = 48;
const CLAMP_F64: f64 = 6.0;
const CLAMP_F32: f64 = 4.0;

const fn reciprocals() -> [f64; ERF_TERMS_F64 + 1] {
    let mut t = [0.0; ERF_TERMS_F64 + 1];
    let mut k = 0;
    while k <= ERF_TERMS_F64 {
        t[k] = 1.0 / (2 * k + 1) as f64;
        k += 1;
    }
    t
}
/// `RECIP[k] = 1 / (2k + 1)`.
const RECIP: [f64; ERF_TERMS_F64 + 1] = reciprocals();

/// `(|x| clamped, a^2, 2 a^2)`.
#[inline(always)]
fn pre(x: f64, clamp: f64) -> (f64, f64, f64) {
    let a = x.abs().min(clamp);
    let a2 = a * a;
    (a, a2, a2 + a2)
}

#[inline(always)]
fn post(x: f64, a: f64, a2: f64, s: f64, clamp: f64) -> f64 {
    let y = std::f64::consts::FRAC_2_SQRT_PI * (exp_f64(-a2) * s) * a;
    let y = if a >= clamp { 1.0 } else { y };
    f64::from_bits(y.to_bits() | (x.to_bits() & (1 << 63)))
}

#[inline(always)]
fn erf_core(x: f64, clamp: f64, terms: usize) -> f64 {
    let (a, a2, u) = pre(x, clamp);
    let mut s = 1.0;
    for k in (1..=terms).rev() {
        s = 1.0 + u * s * RECIP[k];
    }
    post(x, a, a2, s, clamp)
}

/// Slice form: the series loop runs over a block of elements per term, so
/// it vectorises (the per-element loop of 100 terms would not); bitwise
/// equal to [`erf_core`] element by element.
#[inline(always)]
fn erf_block(a: &[f64], o: &mut [f64], clamp: f64, terms: usize) {
    const B: usize = 64;
    let (mut aa, mut a2, mut u, mut s) = ([0.0; B], [0.0; B], [0.0; B], [1.0; B]);
    let n = a.len().min(o.len()).min(B);
    for i in 0..n {
        (aa[i], a2[i], u[i]) = pre(a[i], clamp);
    }
    for k in (1..=terms).rev() {
        let c = RECIP[k];
        for i in 0..B {
            s[i] = 1.0 + u[i] * s[i] * c;
        }
    }
    for i in 0..n {
        o[i] = post(a[i], aa[i], a2[i], s[i], clamp);
    }
}

/// Error function of one f64.
#[inline(always)]
pub fn erf_f64(x: f64) -> f64 {
    let y = erf_core(x, CLAMP_F64, ERF_TERMS_F64);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Error function of one f32 (in f64, rounded once).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let y = erf_core(x as f64, CLAMP_F32, ERF_TERMS_F32) as f32;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `o[i] = erf(a[i])` (vectorised).
#[inline(always)]
pub fn erf_f64_slice(a: &[f64], o: &mut [f64]) {
    for (a, o) in a.chunks(64).zip(o.chunks_mut(64)) {
        erf_block(a, o, CLAMP_F64, ERF_TERMS_F64);
        for (o, &x) in o.iter_mut().zip(a) {
            if x.is_nan() {
                *o = x;
            }
        }
    }
}

/// `o[i] = erf(a[i])` (vectorised).
#[inline(always)]
pub fn erf_f32_slice(a: &[f32], o: &mut [f32]) {
    let mut buf = [0.0f64; 64];
    let mut out = [0.0f64; 64];
    for (a, o) in a.chunks(64).zip(o.chunks_mut(64)) {
        for (b, &x) in buf.iter_mut().zip(a) {
            *b = x as f64;
        }
        erf_block(&buf[..a.len()], &mut out[..a.len()], CLAMP_F32, ERF_TERMS_F32);
        for ((o, &y), &x) in o.iter_mut().zip(&out).zip(a) {
            *o = if x.is_nan() { x } else { y as f32 };
        }
    }
}
