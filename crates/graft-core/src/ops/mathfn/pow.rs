//! f32 `pow`: C `powf` evaluated in f64 with graft's own `log` and `exp`,
//! so the native backend's C prelude (`g_pow_f32`) computes the same bits
//! and groups holding `pow` compile. f64 `pow` still calls std (a correctly
//! rounded f64 `pow` needs `log` in more than double precision: the error
//! of `exp(y ln x)` grows with `|y ln x|`), so f64 groups holding it stay
//! interpreted.
//!
//! Method: `m = exp(y * ln|x|)` in f64 (`x` and `y` widen exactly; `ln|x|`
//! and `exp` are within 1 ulp of f64, and the product rounds once, so `m`
//! is within about `(|y ln|x|| + 2) 2^-53` relatively of `|x|^y`; an f32
//! result that does not overflow or underflow has `|y ln|x|| < 104`, so
//! the error is below `2^-45`), rounded once to f32: at most 1 ulp from
//! the correctly rounded result, and exact where the rounding is not
//! within `2^-45` of a tie (`pow(2, 3) = 8`, `pow(x, 1) = x`, `pow(x, 0.5)`
//! of perfect squares). Then C's special cases by selects (no branches):
//!
//! - `pow(x, ±0) = 1` for every `x`, NaN included; `pow(1, y) = 1` for
//!   every `y`, NaN included; `pow(-1, ±inf) = 1`;
//! - otherwise a NaN operand gives NaN;
//! - a finite negative `x` with a finite non-integer `y` gives NaN;
//! - a negative `x` (sign bit, so `-0` and `-inf` too) with an odd integer
//!   `y` gives the negated magnitude (`pow(-0, -3) = -inf`,
//!   `pow(-inf, 3) = -inf`, `pow(-2, 3) = -8`), any other `y` the
//!   magnitude;
//! - zeros, infinities and `|x| != 1` against `y = ±inf` fall out of
//!   `ln 0 = -inf`, `ln inf = inf` and `exp(±inf) = inf / 0`.
//!
//! `y` is an integer when `|y| >= 2^23` (every such f32 is) or it equals
//! its nearest integer (`(|y| + 2^23) - 2^23` in f32 rounds to nearest);
//! odd when below `2^24` (every f32 from there on is even), an integer,
//! and `|y| / 2` is not. These tests stay in f32: in the C prelude, masks
//! of 64-bit lanes narrowed to 32 bits were scalarised by GCC (2x slower
//! than libm's `powf` per element).

use super::{exp_f64, log_f64};

/// `2^23`: adding and subtracting it rounds an f32 below it to an integer.
const ROUND: f32 = 8_388_608.0;

/// `x^y` for one pair of f32 (the element function of [`pow_f32_slice`]).
#[inline(always)]
pub fn pow_f32(x: f32, y: f32) -> f32 {
    const SIGN: u32 = 1 << 31;
    let m = exp_f64(y as f64 * log_f64((x as f64).abs())) as f32;
    let (ax, ay) = (x.abs(), y.abs());
    // Integer and odd-integer exponents, in f32 (NaN is neither; inf is an
    // even integer): every f32 from 2^23 on is an integer and from 2^24 on
    // an even one; below, the rounding trick is exact.
    let whole = ay >= ROUND || (ay + ROUND) - ROUND == ay;
    let half = ay * 0.5;
    let is_odd = ay < 16_777_216.0 && whole && (half + ROUND) - ROUND != half;
    let neg = x.to_bits() & SIGN != 0;
    let r = if neg && is_odd { -m } else { m };
    let r = if x < 0.0 && x > f32::NEG_INFINITY && !whole { f32::NAN } else { r };
    let r = if ax == 1.0 && ay == f32::INFINITY { 1.0 } else { r };
    let r = if x == 1.0 { 1.0 } else { r };
    if y == 0.0 {
        1.0
    } else {
        r
    }
}

/// `o[i] = pow(a[i], b[i])` over the common length (vectorised).
#[inline(always)]
pub fn pow_f32_slice(a: &[f32], b: &[f32], o: &mut [f32]) {
    for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
        *o = pow_f32(x, y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C's special cases, against std's `powf` (glibc's, which follows C99 Annex F).
    #[test]
    fn special_cases_are_c_pow() {
        let vals = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -2.0,
            3.0,
            -3.0,
            2.5,
            -2.5,
            8_388_608.0,
            8_388_609.0,
            -8_388_609.0,
            16_777_216.0,
            -16_777_216.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            -f32::MAX,
        ];
        for &x in &vals {
            for &y in &vals {
                let (got, want) = (pow_f32(x, y), x.powf(y));
                if want.is_nan() {
                    assert!(got.is_nan(), "pow({x:e}, {y:e}) = {got:e}, want NaN");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "pow({x:e}, {y:e}) = {got:e}, want {want:e}");
                }
            }
        }
    }
}
