//! Accuracy and special cases of the vectorised math functions
//! (`ops::mathfn`) against std/libm: dense sweeps over the useful range and
//! strided sweeps over every binade, max error <= 2 ulp (f32 tanh: 6), exact specials,
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
    check32b(name, xs, f, reference, 2)
}

fn check32b(name: &str, xs: &[f32], f: impl Fn(&[f32], &mut [f32]), reference: impl Fn(f32) -> f32, bound: u64) -> u64 {
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
    assert!(worst.0 <= bound, "{name}: {} ulp at x = {:e} (bound {bound})", worst.0, worst.1);
    worst.0
}

fn check64(name: &str, xs: &[f64], f: impl Fn(&[f64], &mut [f64]), reference: impl Fn(f64) -> f64) -> u64 {
    check64b(name, xs, f, reference, 2)
}

fn check64b(name: &str, xs: &[f64], f: impl Fn(&[f64], &mut [f64]), reference: impl Fn(f64) -> f64, bound: u64) -> u64 {
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
    assert!(worst.0 <= bound, "{name}: {} ulp at x = {:e} (bound {bound})", worst.0, worst.1);
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

/// f32 tanh's documented bound: one f32 rational, whose ~4 roundings (no
/// FMA) each cost up to 1 ulp where tanh is just below 1.
const TANH_F32_ULP: u64 = 6;

#[test]
fn tanh_f32_within_bound() {
    // Against f64 tanh rounded to f32 (correctly rounded but for double
    // rounding): every f32 in [0.25, 9.1] (all of the range where the
    // rational's error peaks, and past the clamp), both signs of a strided
    // subset, every 7th bit pattern below 0.25, plus the usual sweeps.
    let mut xs: Vec<f32> = (0.25f32.to_bits()..=9.1f32.to_bits()).map(f32::from_bits).collect();
    xs.extend((0..0.25f32.to_bits()).step_by(7).map(f32::from_bits));
    xs.extend(points32(-12.0, 12.0, 1_000_000));
    xs.extend(points32(-1.0, 1.0, 200_000));
    xs.extend(EDGE32);
    check32b("tanh f32", &xs, tanh_f32_slice, f32_ref(f64::tanh), TANH_F32_ULP);
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
    for x in [1e-4f32, 1e-10, f32::MIN_POSITIVE, 1e-40, 1e-45] {
        assert_eq!(tanh_f32(x), x, "tiny x gives x");
        assert_eq!(tanh_f32(-x), -x, "tiny x gives x");
    }
    // Saturation: exactly +-1 from the clamp on, never beyond 1.
    assert_eq!(tanh_f32(TANH_F32_CLAMP), 1.0);
    assert_eq!(tanh_f32(9.02), 1.0);
    assert_eq!(tanh_f32(-1e30), -1.0);
    let mut b = 8.0f32.to_bits();
    while b <= TANH_F32_CLAMP.to_bits() {
        assert!(tanh_f32(f32::from_bits(b)) <= 1.0);
        b += 1;
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

// ---------------------------------------------------------------------------
// log, log1p, expm1, logistic, sin, cos, tan, erf. f32: against the f64 std
// function rounded to f32; f64: against std/libm (itself within ~1 ulp).

fn f32_ref(f: fn(f64) -> f64) -> impl Fn(f32) -> f32 {
    move |x| f(x as f64) as f32
}

fn logistic_ref(x: f64) -> f64 {
    if x < 0.0 {
        x.exp() / (1.0 + x.exp())
    } else {
        1.0 / (1.0 + (-x).exp())
    }
}

/// erf f64's documented bound: the nested series loses up to this many ulp
/// where erf is close to ±1 (|x| in [3, 6]: absolute error < 2e-15).
const ERF_F64_ULP: u64 = 20;

/// Sweep around `c` (dense) plus the whole-range patterns.
fn around32(c: f64, w: f64) -> Vec<f32> {
    points32(c - w, c + w, 200_000)
}

#[test]
fn log_family_f32() {
    let mut xs = points32(0.0, 10.0, 300_000);
    xs.extend(around32(1.0, 1e-3));
    xs.extend(EDGE32);
    check32b("log f32", &xs, log_f32_slice, f32_ref(f64::ln), 1);
    let mut xs = points32(-1.0, 10.0, 300_000);
    xs.extend(around32(0.0, 1e-3));
    xs.extend([-1.0, -0.99999994, f32::MAX, -0.0, 1e-45]);
    check32b("log1p f32", &xs, log1p_f32_slice, f32_ref(f64::ln_1p), 1);
    let mut xs = points32(-100.0, 100.0, 300_000);
    xs.extend(around32(0.0, 1e-3));
    xs.extend(EDGE32);
    check32b("expm1 f32", &xs, expm1_f32_slice, f32_ref(f64::exp_m1), 1);
    check32b("logistic f32", &xs, logistic_f32_slice, f32_ref(logistic_ref), 2);
}

#[test]
fn log_family_f64() {
    let mut xs = points64(0.0, 10.0, 300_000);
    xs.extend(points64(1.0 - 1e-6, 1.0 + 1e-6, 200_000));
    xs.extend(EDGE64);
    check64b("log f64", &xs, log_f64_slice, f64::ln, 1);
    let mut xs = points64(-1.0, 10.0, 300_000);
    xs.extend(points64(-1e-6, 1e-6, 200_000));
    xs.extend([-1.0, -0.9999999999999999, f64::MAX, -0.0, 5e-324]);
    check64b("log1p f64", &xs, log1p_f64_slice, f64::ln_1p, 2);
    let mut xs = points64(-50.0, 50.0, 300_000);
    xs.extend(points64(-1e-6, 1e-6, 200_000));
    xs.extend(EDGE64);
    check64b("expm1 f64", &xs, expm1_f64_slice, f64::exp_m1, 2);
    check64b("logistic f64", &xs, logistic_f64_slice, logistic_ref, 3);
}

#[test]
fn trig_f32() {
    let lim = TRIG_LIMIT as f32;
    let mut xs: Vec<f32> = points32(-10.0, 10.0, 300_000).into_iter().filter(|x| x.abs() <= lim).collect();
    xs.extend(points32(-1e5, 1e5, 200_000));
    xs.extend((1..20_000).map(|k| (k as f64 * std::f64::consts::FRAC_PI_2) as f32));
    xs.extend([0.0, -0.0, 1e-45, -1e-45, lim, -lim]);
    xs.retain(|x| x.abs() <= lim || x.is_nan());
    check32b("sin f32", &xs, sin_f32_slice, f32_ref(f64::sin), 1);
    check32b("cos f32", &xs, cos_f32_slice, f32_ref(f64::cos), 1);
    check32b("tan f32", &xs, tan_f32_slice, f32_ref(f64::tan), 1);
}

#[test]
fn trig_f64() {
    let lim = TRIG_LIMIT;
    let mut xs: Vec<f64> = points64(-10.0, 10.0, 300_000).into_iter().filter(|x| x.abs() <= lim).collect();
    xs.extend(points64(-1e8, 1e8, 200_000));
    // Near multiples of pi/2 (the hardest reductions), including the
    // closest doubles to k pi/2 for large k.
    xs.extend((1..100_000).map(|k| k as f64 * std::f64::consts::FRAC_PI_2));
    xs.extend((0..20_000).map(|k| (1u64 << 27) as f64 + k as f64 * std::f64::consts::FRAC_PI_2));
    xs.extend([6381956970095103.0 * 2f64.powi(-25), 0.0, -0.0, 5e-324, lim, -lim]);
    xs.retain(|x| x.abs() <= lim || x.is_nan());
    check64b("sin f64", &xs, sin_f64_slice, f64::sin, 1);
    check64b("cos f64", &xs, cos_f64_slice, f64::cos, 1);
    check64b("tan f64", &xs, tan_f64_slice, f64::tan, 3);
}

#[test]
fn erf_f32_and_f64() {
    let mut xs = points32(-5.0, 5.0, 300_000);
    xs.extend(around32(0.0, 1e-3));
    xs.extend(EDGE32);
    check32b("erf f32", &xs, erf_f32_slice, f32_ref(libm::erf), 1);
    let mut xs = points64(-7.0, 7.0, 300_000);
    xs.extend(points64(-1e-3, 1e-3, 100_000));
    xs.extend(EDGE64);
    check64b("erf f64", &xs, erf_f64_slice, libm::erf, ERF_F64_ULP);
}

#[test]
fn new_functions_special_cases() {
    let nan32 = f32::from_bits(0x7fc0_1234);
    let nan64 = f64::from_bits(0x7ff8_0000_0000_1234);
    type F32 = fn(f32) -> f32;
    type F64 = fn(f64) -> f64;
    let f32s: [(&str, F32); 8] = [
        ("log", log_f32),
        ("log1p", log1p_f32),
        ("expm1", expm1_f32),
        ("logistic", logistic_f32),
        ("sin", sin_f32),
        ("cos", cos_f32),
        ("tan", tan_f32),
        ("erf", erf_f32),
    ];
    for (name, f) in f32s {
        assert_eq!(f(nan32).to_bits(), nan32.to_bits(), "{name}(NaN) keeps the NaN");
    }
    let f64s: [(&str, F64); 8] = [
        ("log", log_f64),
        ("log1p", log1p_f64),
        ("expm1", expm1_f64),
        ("logistic", logistic_f64),
        ("sin", sin_f64),
        ("cos", cos_f64),
        ("tan", tan_f64),
        ("erf", erf_f64),
    ];
    for (name, f) in f64s {
        assert_eq!(f(nan64).to_bits(), nan64.to_bits(), "{name}(NaN) keeps the NaN");
    }
    // Signed zeros.
    for (f, z) in [(sin_f64 as F64, -0.0), (tan_f64, -0.0), (erf_f64, -0.0), (log1p_f64, -0.0), (expm1_f64, -0.0)] {
        assert_eq!(f(z).to_bits(), (-0f64).to_bits());
    }
    assert_eq!(sin_f32(-0.0).to_bits(), (-0f32).to_bits());
    assert_eq!(erf_f32(-0.0).to_bits(), (-0f32).to_bits());
    assert_eq!(cos_f64(0.0), 1.0);
    // log.
    assert_eq!(log_f64(0.0), f64::NEG_INFINITY);
    assert_eq!(log_f64(-0.0), f64::NEG_INFINITY);
    assert!(log_f64(-1.0).is_nan() && log_f64(f64::NEG_INFINITY).is_nan());
    assert_eq!(log_f64(f64::INFINITY), f64::INFINITY);
    assert_eq!(log_f64(1.0).to_bits(), 0);
    assert_eq!(log_f32(0.0), f32::NEG_INFINITY);
    assert_eq!(log_f32(f32::INFINITY), f32::INFINITY);
    assert!(ulps64(log_f64(5e-324), (5e-324f64).ln()) <= 1);
    assert!(ulps32(log_f32(1e-45), (1e-45f32 as f64).ln() as f32) <= 1);
    // log1p.
    assert_eq!(log1p_f64(-1.0), f64::NEG_INFINITY);
    assert!(log1p_f64(-1.5).is_nan());
    assert_eq!(log1p_f64(f64::INFINITY), f64::INFINITY);
    assert_eq!(log1p_f64(1e-300), 1e-300);
    assert_eq!(log1p_f32(-1.0), f32::NEG_INFINITY);
    // expm1.
    assert_eq!(expm1_f64(f64::INFINITY), f64::INFINITY);
    assert_eq!(expm1_f64(f64::NEG_INFINITY), -1.0);
    assert_eq!(expm1_f64(710.0), f64::INFINITY);
    assert!(expm1_f64(709.7).is_finite());
    assert_eq!(expm1_f64(-50.0), -1.0);
    assert_eq!(expm1_f64(5e-324), 5e-324);
    assert_eq!(expm1_f32(100.0), f32::INFINITY);
    // logistic.
    assert_eq!(logistic_f64(f64::INFINITY), 1.0);
    assert_eq!(logistic_f64(f64::NEG_INFINITY), 0.0);
    assert_eq!(logistic_f64(0.0), 0.5);
    assert_eq!(logistic_f32(-200.0), 0.0);
    // Trig: inf and beyond the reduction range give NaN.
    for x in [f64::INFINITY, f64::NEG_INFINITY, 1e9, -1e300] {
        assert!(sin_f64(x).is_nan() && cos_f64(x).is_nan() && tan_f64(x).is_nan(), "x = {x}");
    }
    assert!(sin_f32(f32::INFINITY).is_nan() && cos_f32(1e30).is_nan());
    assert_eq!(sin_f64(1e-300), 1e-300);
    assert_eq!(tan_f64(5e-324), 5e-324);
    // erf.
    assert_eq!(erf_f64(f64::INFINITY), 1.0);
    assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
    assert_eq!(erf_f64(6.0), 1.0);
    assert_eq!(erf_f32(-4.0), -1.0);
    assert!(ulps64(erf_f64(5e-324), 5e-324 * std::f64::consts::FRAC_2_SQRT_PI) <= 1);
}

#[test]
fn new_functions_odd_or_even_exactly() {
    for x in points64(0.0, 30.0, 50_000).into_iter().filter(|x| x.abs() <= TRIG_LIMIT) {
        assert_eq!(sin_f64(-x).to_bits(), (-sin_f64(x)).to_bits(), "sin x = {x:e}");
        assert_eq!(cos_f64(-x).to_bits(), cos_f64(x).to_bits(), "cos x = {x:e}");
        assert_eq!(erf_f64(-x).to_bits(), (-erf_f64(x)).to_bits(), "erf x = {x:e}");
    }
}

#[test]
fn new_slices_equal_scalars_bitwise() {
    let xs: Vec<f32> = (0..1001).map(|i| (i as f32 - 500.0) * 0.0173).collect();
    let xd: Vec<f64> = xs.iter().map(|&x| x as f64 * 1.37).collect();
    let mut o = vec![0f32; xs.len()];
    let mut od = vec![0f64; xs.len()];
    type S32 = fn(&[f32], &mut [f32]);
    type S64 = fn(&[f64], &mut [f64]);
    let pairs32: [(S32, fn(f32) -> f32); 8] = [
        (log_f32_slice, log_f32),
        (log1p_f32_slice, log1p_f32),
        (expm1_f32_slice, expm1_f32),
        (logistic_f32_slice, logistic_f32),
        (sin_f32_slice, sin_f32),
        (cos_f32_slice, cos_f32),
        (tan_f32_slice, tan_f32),
        (erf_f32_slice, erf_f32),
    ];
    for (s, f) in pairs32 {
        s(&xs, &mut o);
        assert!(xs.iter().zip(&o).all(|(&x, &y)| f(x).to_bits() == y.to_bits()));
    }
    let pairs64: [(S64, fn(f64) -> f64); 8] = [
        (log_f64_slice, log_f64),
        (log1p_f64_slice, log1p_f64),
        (expm1_f64_slice, expm1_f64),
        (logistic_f64_slice, logistic_f64),
        (sin_f64_slice, sin_f64),
        (cos_f64_slice, cos_f64),
        (tan_f64_slice, tan_f64),
        (erf_f64_slice, erf_f64),
    ];
    for (s, f) in pairs64 {
        s(&xd, &mut od);
        assert!(xd.iter().zip(&od).all(|(&x, &y)| f(x).to_bits() == y.to_bits()));
    }
}

/// f32 `pow` against the f64 `pow` of the widened operands rounded to f32
/// (within 1/2 ulp of the exact result, so a 1-ulp bound here is the
/// documented one up to that double rounding): bases over every binade of
/// both signs and dense around 1, exponents dense on [-40, 40] plus integers
/// and halves; specials (NaN, infinities, zeros, odd and even integers) are
/// compared exactly with std's `powf`; the slice equals the scalar.
#[test]
fn pow_f32_within_1_ulp() {
    let mut bases = points32(0.0, 4.0, 2_000);
    bases.extend(points32(0.9, 1.1, 1_000));
    let mut exps: Vec<f32> = (0..=800).map(|i| (i as f32 - 400.0) * 0.1).collect();
    exps.extend((-64..=64).map(|i| i as f32 * 0.5));
    exps.extend([1e-7, -1e-7, 0.333_333_34, 127.5, -149.0, 8_388_609.0, 16_777_215.0]);
    let mut worst = (0u64, 0f32, 0f32);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, &x) in bases.iter().enumerate() {
        // Every base against a rotating window of exponents (the full
        // product would be 10^9 points).
        for k in 0..24 {
            let y = exps[(i * 7 + k * 41) % exps.len()];
            xs.push(x);
            ys.push(y);
        }
    }
    let mut out = vec![0f32; xs.len()];
    pow_f32_slice(&xs, &ys, &mut out);
    for ((&x, &y), &got) in xs.iter().zip(&ys).zip(&out) {
        assert_eq!(got.to_bits(), pow_f32(x, y).to_bits(), "slice == scalar at pow({x:e}, {y:e})");
        let want = (x as f64).powf(y as f64) as f32;
        if want.is_nan() {
            assert!(got.is_nan(), "pow({x:e}, {y:e}) = {got:e}, want NaN");
            continue;
        }
        let d = ulps32(got, want);
        if d > worst.0 {
            worst = (d, x, y);
        }
    }
    assert!(worst.0 <= 1, "pow f32: {} ulp at pow({:e}, {:e})", worst.0, worst.1, worst.2);
}

/// f32 `atan2` against std's f64 `atan2` rounded to f32: within 1 ulp over
/// a grid of ratios around the octant boundaries (`|y| = |x|`, `t =
/// tan(pi/8)`), all four quadrants, tiny and huge operands; the slice form
/// equals the scalar one.
#[test]
fn atan2_f32_within_1_ulp() {
    let mut ys = points32(-4.0, 4.0, 3_000);
    ys.extend(points32(0.40, 0.43, 500));
    ys.extend([1e-40, -1e-40, 1e-30, 3e38, -3e38, 0.0, -0.0]);
    let xs: Vec<f32> = [1.0f32, -1.0, 0.5, -2.0, 1e-3, -1e-3, 1e30, 0.414_213_57, -0.999_999_9, 7.0].to_vec();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &y in &ys {
        for &x in &xs {
            a.extend([y, x * y.abs().max(1e-30), x]);
            b.extend([x, y, y * x]);
        }
    }
    let mut out = vec![0f32; a.len()];
    atan2_f32_slice(&a, &b, &mut out);
    let mut worst = (0u64, 0f32, 0f32);
    for ((&y, &x), &got) in a.iter().zip(&b).zip(&out) {
        assert_eq!(got.to_bits(), atan2_f32(y, x).to_bits(), "slice == scalar at atan2({y:e}, {x:e})");
        let want = (y as f64).atan2(x as f64) as f32;
        let d = ulps32(got, want);
        if d > worst.0 {
            worst = (d, y, x);
        }
    }
    assert!(worst.0 <= 1, "atan2 f32: {} ulp at atan2({:e}, {:e})", worst.0, worst.1, worst.2);
}
