//! Elementwise math composites against naive reference formulas written
//! here, in f64 and f32, including large magnitudes (stability) and errors.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::math;
use graft_core::{DType, Tensor};

const XS: [f64; 11] = [-800.0, -40.0, -3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0, 40.0, 800.0];

fn xs() -> Tensor {
    t64(&[XS.len()], &XS)
}

fn ref_softplus(x: f64) -> f64 {
    // log(1 + e^x) evaluated piecewise so the reference itself is exact.
    if x > 30.0 {
        x + (-x).exp()
    } else if x < -30.0 {
        x.exp()
    } else {
        (1.0 + x.exp()).ln()
    }
}

fn ref_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn ref_erf(x: f64) -> f64 {
    // Abramowitz–Stegun-free reference: series for small |x|, continued
    // fraction complement for large |x|, accurate to ~1e-13 here.
    if x.abs() < 3.0 {
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc via Lentz continued fraction.
        let z = x.abs();
        let mut f = z;
        let mut c = z;
        let mut d = 0.0;
        for k in 1..200 {
            let a = k as f64 / 2.0;
            d = z + a * d;
            d = 1.0 / d;
            c = z + a / c;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        let erfc = (-z * z).exp() / (f * std::f64::consts::PI.sqrt());
        (1.0 - erfc).copysign(x)
    }
}

fn check_unary(
    f: impl Fn(&mut graft_core::Builder, graft_core::Value) -> Result<graft_core::Value, graft_core::IrError> + Copy,
    r: impl Fn(f64) -> f64,
    tol64: f64,
    tol32: f64,
) {
    let want: Vec<f64> = XS.iter().map(|&x| r(x)).collect();
    let out = eval(&[&xs()], |b, p| f(b, p[0]));
    assert_eq!(out.dtype(), DType::F64);
    assert_close(&out.to_f64_vec(), &want, tol64);
    let out = eval(&[&to32(&xs())], |b, p| f(b, p[0]));
    assert_eq!(out.dtype(), DType::F32);
    let want32: Vec<f64> = want.iter().map(|&w| w as f32 as f64).collect();
    assert_close(&out.to_f64_vec(), &want32, tol32);
}

#[test]
fn square_and_reciprocal() {
    check_unary(math::square, |x| x * x, 0.0, 1e-7);
    check_unary(math::reciprocal, |x| 1.0 / x, 0.0, 1e-7);
    let msg = err_msg(&[&ti32(&[2], &[1, 2])], |b, p| math::reciprocal(b, p[0]));
    assert!(msg.contains("reciprocal") && msg.contains("floating-point"), "{msg}");
    // Integer square works (no float requirement).
    let out = eval(&[&ti32(&[3], &[-3, 0, 4])], |b, p| math::square(b, p[0]));
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![9, 0, 16]);
}

#[test]
fn relu_values_nan_and_ints() {
    check_unary(math::relu, |x| if x > 0.0 { x } else { 0.0 }, 0.0, 0.0);
    let out = eval(&[&t64(&[3], &[f64::NAN, -0.0, 2.0])], |b, p| math::relu(b, p[0]));
    let v = out.to_f64_vec();
    assert!(v[0].is_nan(), "relu(NaN) must stay NaN");
    assert_eq!(&v[1..], &[0.0, 2.0]);
    let out = eval(&[&ti32(&[3], &[-5, 0, 7])], |b, p| math::relu(b, p[0]));
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![0, 0, 7]);
}

#[test]
fn gelu_exact_and_tanh() {
    let exact = |x: f64| 0.5 * x * (1.0 + ref_erf(x / 2f64.sqrt()));
    check_unary(|b, x| math::gelu(b, x, false), exact, 1e-12, 1e-6);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let approx = |x: f64| 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh());
    check_unary(|b, x| math::gelu(b, x, true), approx, 1e-12, 1e-6);
    // Known value: gelu(1) = 0.8413447460685429 (exact), 0.8411919906082768 (tanh).
    let one = t64(&[1], &[1.0]);
    let e = eval(&[&one], |b, p| math::gelu(b, p[0], false)).to_f64_vec()[0];
    let a = eval(&[&one], |b, p| math::gelu(b, p[0], true)).to_f64_vec()[0];
    assert!((e - 0.8413447460685429).abs() < 1e-14, "{e}");
    assert!((a - 0.8411919906082768).abs() < 1e-14, "{a}");
    let msg = err_msg(&[&ti32(&[1], &[1])], |b, p| math::gelu(b, p[0], true));
    assert!(msg.contains("gelu"), "{msg}");
}

#[test]
fn sigmoid_silu_softplus_log_sigmoid() {
    check_unary(math::sigmoid, ref_sigmoid, 1e-14, 1e-6);
    check_unary(math::silu, |x| x * ref_sigmoid(x), 1e-14, 1e-6);
    check_unary(math::softplus, ref_softplus, 1e-14, 1e-6);
    check_unary(math::log_sigmoid, |x| -ref_softplus(-x), 1e-14, 1e-6);
    // Stability: softplus(800) = 800 exactly, softplus(-800) = e^-800 (denormal-free 0 in f64 is fine).
    let out = eval(&[&t64(&[3], &[800.0, -800.0, -40.0])], |b, p| math::softplus(b, p[0])).to_f64_vec();
    assert_eq!(out[0], 800.0);
    assert!(out[1] >= 0.0 && out[1] < 1e-300);
    assert!((out[2] - (-40f64).exp()).abs() < 1e-30, "{}", out[2]);
    let msg = err_msg(&[&ti32(&[1], &[1])], |b, p| math::softplus(b, p[0]));
    assert!(msg.contains("softplus") && msg.contains("i32"), "{msg}");
}

#[test]
fn clamp_scalar_and_tensor_bounds() {
    check_unary(|b, x| math::clamp(b, x, -1.0, 2.0), |x| x.clamp(-1.0, 2.0), 0.0, 0.0);
    let out = eval(&[&t64(&[2], &[f64::NAN, 5.0])], |b, p| math::clamp(b, p[0], 0.0, 1.0)).to_f64_vec();
    assert!(out[0].is_nan());
    assert_eq!(out[1], 1.0);
    let msg = err_msg(&[&xs()], |b, p| math::clamp(b, p[0], 2.0, 1.0));
    assert!(msg.contains("clamp") && msg.contains("lo=2") && msg.contains("hi=1"), "{msg}");
    assert!(err_msg(&[&xs()], |b, p| math::clamp(b, p[0], f64::NAN, 1.0)).contains("clamp"));
    // Integer clamp.
    let out = eval(&[&ti32(&[4], &[-9, 0, 3, 9])], |b, p| math::clamp(b, p[0], -2.0, 4.0));
    assert_eq!(out.to_vec::<i32>().unwrap(), vec![-2, 0, 3, 4]);

    // Tensor bounds with broadcasting: x [2,3], lo [3], hi [2,1].
    let x = t64(&[2, 3], &[-5.0, 0.5, 5.0, -5.0, 0.5, 5.0]);
    let lo = t64(&[3], &[-1.0, 1.0, 0.0]);
    let hi = t64(&[2, 1], &[2.0, 0.25]);
    let out = eval(&[&x, &lo, &hi], |b, p| math::clamp_tensor(b, p[0], p[1], p[2]));
    let mut want = vec![];
    for i in 0..2 {
        for j in 0..3 {
            let v: f64 = x.to_f64_vec()[i * 3 + j];
            want.push(v.max(lo.to_f64_vec()[j]).min(hi.to_f64_vec()[i]));
        }
    }
    assert_tensor(&out, &[2, 3], &want, 0.0);
    let bad = t64(&[4], &[0.0; 4]);
    let msg = err_msg(&[&x, &bad, &hi], |b, p| math::clamp_tensor(b, p[0], p[1], p[2]));
    assert!(msg.contains("[2, 3]") && msg.contains("[4]"), "{msg}");
}

#[test]
fn safe_log_floors_at_eps() {
    let x = t64(&[5], &[0.0, -1.0, 1e-30, 1.0, 10.0]);
    let out = eval(&[&x], |b, p| math::safe_log(b, p[0], 1e-12)).to_f64_vec();
    let want: Vec<f64> = [0.0f64, -1.0, 1e-30, 1.0, 10.0].iter().map(|v| v.max(1e-12).ln()).collect();
    assert_close(&out, &want, 1e-15);
    for eps in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        let msg = err_msg(&[&x], |b, p| math::safe_log(b, p[0], eps));
        assert!(msg.contains("safe_log") && msg.contains("eps"), "{msg}");
    }
    let out = eval(&[&to32(&x)], |b, p| math::safe_log(b, p[0], 1e-6)).to_f64_vec();
    assert!(out.iter().all(|v| v.is_finite()));
    assert!((out[0] - (1e-6f32 as f64).ln()).abs() < 1e-5);
}
