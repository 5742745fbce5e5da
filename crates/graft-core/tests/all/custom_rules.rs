//! custom_jvp / custom_vjp: the user's rule is what every transform uses.

use crate::common;

use common::run;
use graft_core::ad::{grad, jvp_func, Wrt};
use graft_core::{Builder, DType, Func, Tensor, TensorType};
use std::sync::Arc;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// f(x) = sin(x), with a deliberately "wrong" rule f'(x) = 2 cos(x), so the
/// test can tell whose derivative was used.
fn custom_sin() -> Func {
    let mut fb = Builder::new("sin_f");
    let x = fb.param(t64(&[2]));
    let y = fb.sin(x).unwrap();
    let f = Arc::new(fb.finish(&[y]).unwrap());
    let mut rb = Builder::new("sin_rule");
    let x = rb.param(t64(&[2]));
    let t = rb.param(t64(&[2]));
    let y = rb.sin(x).unwrap();
    let c = rb.cos(x).unwrap();
    let two = rb.full(2.0, &t64(&[2])).unwrap();
    let c2 = rb.mul(c, two).unwrap();
    let ty = rb.mul(t, c2).unwrap();
    let rule = Arc::new(rb.finish(&[y, ty]).unwrap());
    let mut b = Builder::new("g");
    let x = b.param(t64(&[2]));
    let y = b.custom_jvp(f, rule, &[x]).unwrap()[0];
    let s = b.reduce_sum(y, &[0]).unwrap();
    b.finish(&[s]).unwrap()
}

#[test]
fn custom_jvp_rule_drives_forward_reverse_and_second_order() {
    let g = custom_sin();
    let xs = [0.3f64, -1.1];
    let x = Tensor::vec1(&xs);
    assert_eq!(run(&g, std::slice::from_ref(&x))[0].to_scalar_f64().unwrap(), xs[0].sin() + xs[1].sin());
    let d = run(&grad(&g, &Wrt::All).unwrap(), std::slice::from_ref(&x));
    assert_eq!(d[0].to_vec::<f64>().unwrap(), vec![2.0 * xs[0].cos(), 2.0 * xs[1].cos()]);
    let j = run(&jvp_func(&g).unwrap(), &[x.clone(), Tensor::vec1(&[1.0f64, 0.0])]);
    assert_eq!(j[1].to_scalar_f64().unwrap(), 2.0 * xs[0].cos());
    // Second order differentiates the rule: d/dx 2cos(x) = -2 sin(x).
    let mut sb = Builder::new("sum_grad");
    let p = sb.param(t64(&[2]));
    let gg = sb.call(Arc::new(grad(&g, &Wrt::All).unwrap()), &[p]).unwrap()[0];
    let s = sb.reduce_sum(gg, &[0]).unwrap();
    let h = run(&grad(&sb.finish(&[s]).unwrap(), &Wrt::All).unwrap(), &[x]);
    let want: Vec<f64> = xs.iter().map(|x| -2.0 * x.sin()).collect();
    let got = h[0].to_vec::<f64>().unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-14, "{got:?} vs {want:?}");
    }
}

/// f(x) = x^3 with a backward function that clips the cotangent-weighted
/// gradient 3x^2 ct to [-1, 1] (a typical use: gradient clipping).
fn clipped_cube() -> Func {
    let ty = t64(&[3]);
    let mut fb = Builder::new("cube");
    let x = fb.param(ty.clone());
    let x2 = fb.mul(x, x).unwrap();
    let y = fb.mul(x2, x).unwrap();
    let f = Arc::new(fb.finish(&[y]).unwrap());
    let mut wb = Builder::new("cube_fwd");
    let x = wb.param(ty.clone());
    let x2 = wb.mul(x, x).unwrap();
    let y = wb.mul(x2, x).unwrap();
    let fwd = Arc::new(wb.finish(&[y, x2]).unwrap());
    let mut bb = Builder::new("cube_bwd");
    let x2 = bb.param(ty.clone());
    let ct = bb.param(ty.clone());
    let three = bb.full(3.0, &ty).unwrap();
    let d = bb.mul(three, x2).unwrap();
    let g = bb.mul(d, ct).unwrap();
    let lo = bb.full(-1.0, &ty).unwrap();
    let hi = bb.full(1.0, &ty).unwrap();
    let g = bb.max(g, lo).unwrap();
    let g = bb.min(g, hi).unwrap();
    let bwd = Arc::new(bb.finish(&[g]).unwrap());
    let mut b = Builder::new("h");
    let x = b.param(ty);
    let y = b.custom_vjp(f, fwd, bwd, &[x]).unwrap()[0];
    let s = b.reduce_sum(y, &[0]).unwrap();
    b.finish(&[s]).unwrap()
}

#[test]
fn custom_vjp_bwd_drives_reverse_mode_and_forward_mode_uses_the_function() {
    let h = clipped_cube();
    let xs = [0.2f64, 0.9, -2.0];
    let x = Tensor::vec1(&xs);
    let g = run(&grad(&h, &Wrt::All).unwrap(), std::slice::from_ref(&x));
    let want: Vec<f64> = xs.iter().map(|x| (3.0 * x * x).clamp(-1.0, 1.0)).collect();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), want);
    // Forward mode: the true derivative 3x^2 (the function's own rule).
    let j = run(&jvp_func(&h).unwrap(), &[x, Tensor::vec1(&[0.0f64, 0.0, 1.0])]);
    assert!((j[1].to_scalar_f64().unwrap() - 12.0).abs() < 1e-12);
}

#[test]
fn custom_rule_signatures_are_checked() {
    let mut fb = Builder::new("f");
    let x = fb.param(t64(&[2]));
    let f = Arc::new(fb.finish(&[x]).unwrap());
    let mut rb = Builder::new("bad_rule");
    let x = rb.param(t64(&[2]));
    let _t = rb.param(t64(&[2]));
    let rule = Arc::new(rb.finish(&[x]).unwrap());
    let mut b = Builder::new("g");
    let p = b.param(t64(&[2]));
    let e = b.custom_jvp(f, rule, &[p]).unwrap_err().to_string();
    assert!(e.contains("expected the rule @bad_rule to return the outputs and their tangents"), "{e}");
}
