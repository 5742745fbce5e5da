//! Accuracy and special cases of the vectorised math functions
//! (`ops::mathfn`) against std/libm: dense sweeps over the useful range and
//! strided sweeps over every binade, max error <= 2 ulp, exact specials,
//! exact oddness of tanh, and slice == scalar bitwise.

use graft_core::ops::mathfn::*;

/// Distance in ulps between two non-NaN f32s (0 and -0 coincide).
fn ulps32(a: f32, b: f32) -> u64 {
    let ord = |x: f32| {
        let b = x.to_bits();
        if b >> 31 == 1 {
            -((b & 0x7fff_ffff) as i64)
        } else {
            b as i64
        }
    };
    (ord(a) - ord(b)).unsigned_abs()
}

/// Distance in ulps between two non-NaN f64s (0 and -0 coincide).
fn ulps64(a: f64, b: f64) -> u64 {
    let ord = |x: f64| {
        let b = x.to_bits();
        if b >> 63 == 1 {
            -((b & 0x7fff_ffff_ffff_ffff) as i128)
        } else {
            b as i128
        }
    };
    (ord(a) - ord(b)).unsigned_abs() as u64
}

/// `n` evenly spaced points on `[lo, hi]` plus every `stride`-th f32 bit
/// pattern (both signs, all binades).
fn points32(lo: f64, hi: f64, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..=n).map(|i| (lo + (hi - lo) * i as f64 / n as f64) as f32).collect();
    let mut b: u32 = 0;
    while b < 0x7f80_0000 {
        v.push(f32::from_bits(b));
        v.push(-f32::from_bits(b));
        b += 4099;
    }
    v
}

fn points64(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..=n).map(|i| lo + (hi - lo) * i as f64 / n as f64).collect();
    let mut b: u64 = 0;
    while b < 0x7ff0_0000_0000_0000 {
        v.push(f64::from_bits(b));
        v.push(-f64::from_bits(b));
        b += 0x7ff0_0000_0000_0000 / 1_000_003;
    }
    v
}

fn check32(name: &str, xs: &[f32], f: impl Fn(&[f32], &mut [f32]), reference: impl Fn(f32) -> f32) -> u64 {
    let mut out = vec![0f32; xs.len()];
    f(xs, &mut out);
    let mut worst = (0u64, 0f32);
    for (&x, &y) in xs.iter().zip(&out) {
        let r = reference(x);
        assert_eq!(y.is_nan(), r.is_nan(), "{name}({x:e}) = {y:e}, std gives {r:e}");
        if !r.is_nan() {
            let d = ulps32(y, r);
            if d > worst.0 {
                worst = (d, x);
            }
        }
    }
    eprintln!("{name}: max error {} ulp at x = {:e} ({} points)", worst.0, worst.1, xs.len());
    assert!(worst.0 <= 2, "{name}: {} ulp at x = {:e}", worst.0, worst.1);
    worst.0
}

fn check64(name: &str, xs: &[f64], f: impl Fn(&[f64], &mut [f64]), reference: impl Fn(f64) -> f64) -> u64 {
    let mut out = vec![0f64; xs.len()];
    f(xs, &mut out);
    let mut worst = (0u64, 0f64);
    for (&x, &y) in xs.iter().zip(&out) {
        let r = reference(x);
        assert_eq!(y.is_nan(), r.is_nan(), "{name}({x:e}) = {y:e}, std gives {r:e}");
        if !r.is_nan() {
            let d = ulps64(y, r);
            if d > worst.0 {
                worst = (d, x);
            }
        }
    }
    eprintln!("{name}: max error {} ulp at x = {:e} ({} points)", worst.0, worst.1, xs.len());
    assert!(worst.0 <= 2, "{name}: {} ulp at x = {:e}", worst.0, worst.1);
    worst.0
}

const EDGE32: [f32; 16] = [
    0.0,
    -0.0,
    f32::MIN_POSITIVE,
    1e-45,
    88.72283,
    88.72284,
    -87.33655,
    -103.27893,
    -103.97208,
    -104.0,
    0.625,
    0.62499994,
    9.0,
    f32::MAX,
    f32::MIN,
    1.0,
];

const EDGE64: [f64; 15] = [
    0.0,
    -0.0,
    f64::MIN_POSITIVE,
    5e-324,
    709.782712893384,
    709.7827128933841,
    -708.3964185322641,
    -744.4400719213812,
    -745.1332191019411,
    -746.0,
    0.625,
    0.6249999999999999,
    20.0,
    f64::MAX,
    f64::MIN,
];

#[test]
fn exp_f32_within_2_ulp() {
    let mut xs = points32(-110.0, 90.0, 1_000_000);
    xs.extend(points32(-1.0, 1.0, 200_000));
    xs.extend(EDGE32);
    check32("exp f32", &xs, exp_f32_slice, f32::exp);
}

#[test]
fn exp_f64_within_2_ulp() {
    let mut xs = points64(-760.0, 710.0, 1_000_000);
    xs.extend(points64(-1.0, 1.0, 200_000));
    xs.extend(EDGE64);
    check64("exp f64", &xs, exp_f64_slice, f64::exp);
}

#[test]
fn tanh_f32_within_2_ulp() {
    let mut xs = points32(-12.0, 12.0, 1_000_000);
    xs.extend(points32(-1.0, 1.0, 200_000));
    xs.extend(EDGE32);
    check32("tanh f32", &xs, tanh_f32_slice, f32::tanh);
}

#[test]
fn tanh_f64_within_2_ulp() {
    let mut xs = points64(-25.0, 25.0, 1_000_000);
    xs.extend(points64(-1.0, 1.0, 200_000));
    xs.extend(EDGE64);
    check64("tanh f64", &xs, tanh_f64_slice, f64::tanh);
}

#[test]
fn exp_special_cases() {
    assert!(exp_f32(f32::NAN).is_nan() && exp_f64(f64::NAN).is_nan());
    assert!(exp_f32(-f32::NAN).is_nan() && exp_f64(-f64::NAN).is_nan());
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp_f64(f64::INFINITY), f64::INFINITY);
    assert_eq!(exp_f32(f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(exp_f64(f64::NEG_INFINITY).to_bits(), 0);
    assert_eq!(exp_f32(89.0), f32::INFINITY);
    assert_eq!(exp_f64(710.0), f64::INFINITY);
    assert_eq!(exp_f32(1e30), f32::INFINITY);
    assert_eq!(exp_f64(1e300), f64::INFINITY);
    assert_eq!(exp_f32(-200.0).to_bits(), 0);
    assert_eq!(exp_f64(-800.0).to_bits(), 0);
    assert_eq!(exp_f32(0.0), 1.0);
    assert_eq!(exp_f32(-0.0), 1.0);
    assert_eq!(exp_f64(0.0), 1.0);
    assert_eq!(exp_f64(-0.0), 1.0);
    assert!(ulps64(exp_f64(1.0), std::f64::consts::E) <= 1);
    // Subnormal results, as std gives them (within tolerance).
    let y = exp_f32(-100.0);
    assert!(y > 0.0 && y < f32::MIN_POSITIVE && ulps32(y, (-100f32).exp()) <= 2);
    let y = exp_f64(-740.0);
    assert!(y > 0.0 && y < f64::MIN_POSITIVE && ulps64(y, (-740f64).exp()) <= 2);
}

#[test]
fn tanh_special_cases() {
    assert!(tanh_f32(f32::NAN).is_nan() && tanh_f64(f64::NAN).is_nan());
    assert_eq!(tanh_f32(f32::INFINITY), 1.0);
    assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
    assert_eq!(tanh_f64(f64::INFINITY), 1.0);
    assert_eq!(tanh_f64(f64::NEG_INFINITY), -1.0);
    assert_eq!(tanh_f32(0.0).to_bits(), 0f32.to_bits());
    assert_eq!(tanh_f32(-0.0).to_bits(), (-0f32).to_bits());
    assert_eq!(tanh_f64(0.0).to_bits(), 0f64.to_bits());
    assert_eq!(tanh_f64(-0.0).to_bits(), (-0f64).to_bits());
    for x in [1e-3f32, 1e-10, 1e-30, f32::MIN_POSITIVE, 1e-40, 1e-45] {
        assert!(ulps32(tanh_f32(x), x.tanh()) <= 1, "tanh({x:e})");
        assert!(ulps32(tanh_f32(-x), (-x).tanh()) <= 1, "tanh(-{x:e})");
    }
    for x in [1e-8f64, 1e-100, f64::MIN_POSITIVE, 1e-310, 5e-324] {
        assert!(ulps64(tanh_f64(x), x.tanh()) <= 1, "tanh({x:e})");
        assert_eq!(tanh_f64(x), x, "tiny x gives x");
    }
    assert_eq!(tanh_f32(100.0), 1.0);
    assert_eq!(tanh_f64(100.0), 1.0);
    assert_eq!(tanh_f64(-1e300), -1.0);
}

#[test]
fn tanh_exactly_odd() {
    for x in points32(0.0, 30.0, 100_000) {
        assert_eq!(tanh_f32(-x).to_bits(), (-tanh_f32(x)).to_bits(), "x = {x:e}");
    }
    for x in points64(0.0, 30.0, 100_000) {
        assert_eq!(tanh_f64(-x).to_bits(), (-tanh_f64(x)).to_bits(), "x = {x:e}");
    }
}

#[test]
fn slices_equal_scalars_bitwise() {
    // Odd length: exercises the vector body and the scalar remainder.
    let xs: Vec<f32> = (0..1001).map(|i| (i as f32 - 500.0) * 0.173).collect();
    let mut o = vec![0f32; xs.len()];
    exp_f32_slice(&xs, &mut o);
    assert!(xs.iter().zip(&o).all(|(&x, &y)| exp_f32(x).to_bits() == y.to_bits()));
    tanh_f32_slice(&xs, &mut o);
    assert!(xs.iter().zip(&o).all(|(&x, &y)| tanh_f32(x).to_bits() == y.to_bits()));
    let xs: Vec<f64> = xs.iter().map(|&x| x as f64 * 1.37).collect();
    let mut o = vec![0f64; xs.len()];
    exp_f64_slice(&xs, &mut o);
    assert!(xs.iter().zip(&o).all(|(&x, &y)| exp_f64(x).to_bits() == y.to_bits()));
    tanh_f64_slice(&xs, &mut o);
    assert!(xs.iter().zip(&o).all(|(&x, &y)| tanh_f64(x).to_bits() == y.to_bits()));
}
