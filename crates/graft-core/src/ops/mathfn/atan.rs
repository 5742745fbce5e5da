//! f32 `atan2`: C `atan2f` evaluated in f64 and rounded once, so the native
//! backend's C prelude (`g_atan2_f32`) computes the same bits and groups
//! holding `atan2` compile. f64 `atan2` still calls std (a bound of 1 ulp
//! in f64 would need a longer argument reduction and an error analysis
//! this series has not had), so f64 groups holding it stay interpreted.
//!
//! Method: with `a = |y|`, `b = |x|` (exact in f64), `num = min`,
//! `den = max`, so `t = num / den` is in `[0, 1]`; `atan t` is its Taylor
//! series `u - u^3/3 + ... - u^23/23` on `u = num / den` when
//! `num <= den tan(pi/8)`, else `pi/4 + atan u` on
//! `u = (num - den) / (num + den)` (that is, `(t - 1) / (t + 1)`), so
//! `|u| <= tan(pi/8)` (up to the rounding of the threshold) and the first
//! omitted term is below `tan(pi/8)^25 / 25 < 2^-36` relatively. The
//! operands are chosen before the one division: `num - den` and
//! `num + den` are exact (two f32 values within a factor of 2.5 of each
//! other), so `u` is rounded once, and a vector of lanes pays one f64
//! division, not two (the division's throughput bounds this function).
//! Then the octant: `pi/2 - atan t` when `|y| > |x|`, `pi - that` when `x`
//! has its sign bit set, and `y`'s sign. The f64 result is within about
//! `2^-34` relatively of `atan2(y, x)`, so rounding it once to f32 is at
//! most 1 ulp from the correctly rounded result
//! (`mathfn::atan2_f32_within_1_ulp`).
//!
//! C's special cases fall out of the same arithmetic with selects on the
//! division's operands: `u = 0 / 1` when both are zero (so
//! `atan2(±0, +0) = ±0` and `atan2(±0, -0) = ±pi`) and when both are
//! infinite, with the `pi/4` branch taken (`atan2(±inf, ±inf) = ±pi/4`
//! or `±3pi/4`); `atan2(±y, ±0)` for `y != 0` is `±pi/2`,
//! `atan2(±y, +inf) = ±0` and `atan2(±y, -inf) = ±pi` for finite `y`; a
//! NaN operand gives NaN (through the division).

use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, PI};

/// `tan(pi/8)`: above it, `atan t = pi/4 + atan((t - 1) / (t + 1))`.
const TAN_PI_8: f64 = 0.414_213_562_373_095_03;

/// The series' coefficients after `u`: `atan u = u + u z P(z)`, `z = u^2`,
/// `P(z) = -1/3 + z/5 - z^2/7 + ... - z^10/23`. (A loop, not one nested
/// expression: rustfmt takes tens of seconds on eleven levels of nesting.)
const SERIES: [f64; 11] = [
    -1.0 / 3.0,
    1.0 / 5.0,
    -1.0 / 7.0,
    1.0 / 9.0,
    -1.0 / 11.0,
    1.0 / 13.0,
    -1.0 / 15.0,
    1.0 / 17.0,
    -1.0 / 19.0,
    1.0 / 21.0,
    -1.0 / 23.0,
];

/// `atan u` for `|u| <= tan(pi/8)` by the series (NaN passes through).
#[inline(always)]
fn atan_series(u: f64) -> f64 {
    let z = u * u;
    // Horner's rule from the innermost coefficient: the same operations in
    // the same order as the prelude's nested expression.
    let mut p = SERIES[SERIES.len() - 1];
    for &c in SERIES[..SERIES.len() - 1].iter().rev() {
        p = c + z * p;
    }
    u + u * z * p
}

/// C `atan2f(y, x)` (the element function of [`atan2_f32_slice`]).
#[inline(always)]
pub fn atan2_f32(y: f32, x: f32) -> f32 {
    let (yd, xd) = (y as f64, x as f64);
    let (ay, ax) = (yd.abs(), xd.abs());
    let swap = ay > ax;
    let (num, den) = if swap { (ax, ay) } else { (ay, ax) };
    let both_inf = ay == f64::INFINITY && ax == f64::INFINITY;
    let special = (ay == 0.0 && ax == 0.0) || both_inf;
    let big = num > den * TAN_PI_8 || both_inf;
    let (n, d) = if big { (num - den, num + den) } else { (num, den) };
    let (n, d) = if special { (0.0, 1.0) } else { (n, d) };
    let a = atan_series(n / d);
    let a = if big { FRAC_PI_4 + a } else { a };
    let a = if swap { FRAC_PI_2 - a } else { a };
    let a = if xd.is_sign_negative() { PI - a } else { a };
    a.copysign(yd) as f32
}

/// `o[i] = atan2(a[i], b[i])` over the common length (vectorised).
#[inline(always)]
pub fn atan2_f32_slice(a: &[f32], b: &[f32], o: &mut [f32]) {
    for ((o, &y), &x) in o.iter_mut().zip(a).zip(b) {
        *o = atan2_f32(y, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C's special cases, against std's `atan2f` (glibc's, C99 Annex F).
    #[test]
    fn special_cases_are_c_atan2() {
        let vals = [0.0f32, -0.0, 1.0, -1.0, 0.5, -3.0, 1e-45, -1e-45, 3e38, -3e38, f32::INFINITY, f32::NEG_INFINITY];
        for &y in &vals {
            for &x in &vals {
                let (got, want) = (atan2_f32(y, x), y.atan2(x));
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(
                    got.is_sign_negative() == want.is_sign_negative() && ulps <= 1,
                    "atan2({y:e}, {x:e}) = {got:e}, C gives {want:e}"
                );
            }
            assert!(atan2_f32(y, f32::NAN).is_nan() && atan2_f32(f32::NAN, y).is_nan(), "NaN with {y:e}");
        }
    }
}
