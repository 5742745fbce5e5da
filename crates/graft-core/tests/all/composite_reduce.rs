//! Reduction composites against naive references: a generic reference
//! reducer over arbitrary axes (written with index arithmetic), keepdims
//! shapes, var/std with ddof, argmax/argmin ties and NaN, the softmax family
//! at large magnitudes and on -inf rows, and argument errors.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::reduce;
use graft_core::{DType, Tensor};
use proptest::prelude::*;

/// Reduces `x` (shape `s`) over `axes` with `f` on the gathered lists;
/// returns (values, reduced shape without the axes).
fn ref_reduce(x: &[f64], s: &[usize], axes: &[usize], f: &dyn Fn(&[f64]) -> f64) -> (Vec<f64>, Vec<usize>) {
    let out_shape: Vec<usize> = (0..s.len()).filter(|i| !axes.contains(i)).map(|i| s[i]).collect();
    let n_out: usize = out_shape.iter().product();
    let mut groups = vec![vec![]; n_out];
    for (i, &v) in x.iter().enumerate() {
        let idx = unravel(i, s);
        let oidx: Vec<usize> = (0..s.len()).filter(|d| !axes.contains(d)).map(|d| idx[d]).collect();
        groups[ravel(&oidx, &out_shape)].push(v);
    }
    (groups.iter().map(|g| f(g)).collect(), out_shape)
}

fn kd(s: &[usize], axes: &[usize]) -> Vec<usize> {
    s.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect()
}

fn ref_mean(g: &[f64]) -> f64 {
    g.iter().sum::<f64>() / g.len() as f64
}

fn ref_var(g: &[f64], ddof: usize) -> f64 {
    let m = ref_mean(g);
    g.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (g.len() as f64 - ddof as f64)
}

fn ref_lse(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + g.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

type Red =
    fn(&mut graft_core::Builder, graft_core::Value, &[usize], bool) -> Result<graft_core::Value, graft_core::IrError>;

fn all_reductions() -> Vec<(&'static str, Red, Box<dyn Fn(&[f64]) -> f64>)> {
    vec![
        ("sum", reduce::sum, Box::new(|g: &[f64]| g.iter().sum())),
        ("mean", reduce::mean, Box::new(ref_mean)),
        ("max", reduce::max, Box::new(|g: &[f64]| g.iter().cloned().fold(f64::NEG_INFINITY, f64::max))),
        ("min", reduce::min, Box::new(|g: &[f64]| g.iter().cloned().fold(f64::INFINITY, f64::min))),
        ("prod", reduce::prod, Box::new(|g: &[f64]| g.iter().product())),
        ("logsumexp", reduce::logsumexp, Box::new(ref_lse)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn reductions_match_reference(
        shape in prop::collection::vec(1usize..4, 1..4),
        mask in prop::collection::vec(any::<bool>(), 3),
        keepdims in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let axes: Vec<usize> = (0..shape.len()).filter(|&i| mask[i]).rev().collect(); // unsorted on purpose
        let x = rand64(&shape, seed);
        for (name, f, r) in all_reductions() {
            let y = eval(&[&x], |b, p| f(b, p[0], &axes, keepdims));
            let (want, out_shape) = ref_reduce(&x.to_f64_vec(), &shape, &axes, &*r);
            let want_shape = if keepdims { kd(&shape, &axes) } else { out_shape };
            prop_assert_eq!(y.shape(), want_shape.as_slice(), "{}", name);
            let got = y.to_f64_vec();
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{}: got {:?} want {:?}", name, got, want);
            }
        }
    }

    #[test]
    fn var_std_match_reference(
        shape in prop::collection::vec(2usize..5, 1..4),
        axis_pick in 0usize..3,
        ddof in 0usize..2,
        seed in 0u64..1000,
    ) {
        let axes = vec![axis_pick % shape.len()];
        let x = rand64(&shape, seed);
        let v = eval(&[&x], |b, p| reduce::var(b, p[0], &axes, ddof, false));
        let s = eval(&[&x], |b, p| reduce::std(b, p[0], &axes, ddof, true));
        let (want, _) = ref_reduce(&x.to_f64_vec(), &shape, &axes, &|g| ref_var(g, ddof));
        assert_close(&v.to_f64_vec(), &want, 1e-12);
        let kshape = kd(&shape, &axes);
        prop_assert_eq!(s.shape(), kshape.as_slice());
        assert_close(&s.to_f64_vec(), &want.iter().map(|w| w.sqrt()).collect::<Vec<_>>(), 1e-12);
    }
}

#[test]
fn all_axes_keepdims_and_empty_axes() {
    let x = t64(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_tensor(&eval(&[&x], |b, p| reduce::sum(b, p[0], &[0, 1], false)), &[], &[21.0], 0.0);
    assert_tensor(&eval(&[&x], |b, p| reduce::sum(b, p[0], &[1, 0], true)), &[1, 1], &[21.0], 0.0);
    assert_tensor(&eval(&[&x], |b, p| reduce::mean(b, p[0], &[1], true)), &[2, 1], &[2.0, 5.0], 0.0);
    assert_tensor(&eval(&[&x], |b, p| reduce::max(b, p[0], &[], false)), &[2, 3], &x.to_f64_vec(), 0.0);
    // Integer reductions and the f32 path.
    let xi = ti32(&[2, 2], &[1, -2, 3, 4]);
    assert_eq!(eval(&[&xi], |b, p| reduce::prod(b, p[0], &[1], false)).to_vec::<i32>().unwrap(), vec![-2, 12]);
    let y = eval(&[&to32(&x)], |b, p| reduce::mean(b, p[0], &[0], false));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.5, 3.5, 4.5]);
    // Errors.
    assert!(err_msg(&[&x], |b, p| reduce::sum(b, p[0], &[2], false)).contains("axis 2 is out of range for rank 2"));
    assert!(err_msg(&[&x], |b, p| reduce::sum(b, p[0], &[0, 0], false)).contains("repeated"));
    let msg = err_msg(&[&xi], |b, p| reduce::mean(b, p[0], &[0], false));
    assert!(msg.contains("mean") && msg.contains("floating-point") && msg.contains("i32"), "{msg}");
    // var with n <= ddof divides by zero like NumPy.
    let v = eval(&[&t64(&[1], &[3.0])], |b, p| reduce::var(b, p[0], &[0], 1, false)).to_f64_vec();
    assert!(v[0].is_nan());
    // Large offset: two-pass variance stays exact.
    let big = t64(&[4], &[1e9 + 1.0, 1e9 + 2.0, 1e9 + 3.0, 1e9 + 4.0]);
    let v = eval(&[&big], |b, p| reduce::var(b, p[0], &[0], 0, false)).to_f64_vec();
    assert!((v[0] - 1.25).abs() < 1e-6, "{}", v[0]);
}

#[test]
fn argmax_argmin() {
    let x = t64(&[2, 4], &[1.0, 7.0, 7.0, -1.0, f64::NAN, 2.0, 9.0, 2.0]);
    let am = eval(&[&x], |b, p| reduce::argmax(b, p[0], 1, false, DType::I32));
    assert_eq!(am.dtype(), DType::I32);
    assert_eq!(am.to_vec::<i32>().unwrap(), vec![1, 0], "first max wins; NaN counts as max");
    let am = eval(&[&x], |b, p| reduce::argmin(b, p[0], 1, true, DType::I64));
    assert_eq!(am.shape(), &[2, 1]);
    assert_eq!(am.to_vec::<i64>().unwrap(), vec![3, 0]);
    let am = eval(&[&x], |b, p| reduce::argmax(b, p[0], 0, false, DType::I32));
    assert_eq!(am.to_vec::<i32>().unwrap(), vec![1, 0, 1, 1]);
    assert!(err_msg(&[&x], |b, p| reduce::argmax(b, p[0], 2, false, DType::I32)).contains("axis 2"));
    let e = t64(&[2, 0], &[]);
    assert!(err_msg(&[&e], |b, p| reduce::argmax(b, p[0], 1, false, DType::I32)).contains("size 0"));
}

fn ref_softmax_rows(x: &[f64], n: usize) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / z).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn softmax_family_values_and_stability() {
    let x = t64(&[3, 3], &[1.0, 2.0, 3.0, 1000.0, 1001.0, 1002.0, -1000.0, 0.0, -5.0]);
    let want = ref_softmax_rows(&x.to_f64_vec(), 3);
    let sm = eval(&[&x], |b, p| reduce::softmax(b, p[0], 1));
    assert_tensor(&sm, &[3, 3], &want, 1e-14);
    let lsm = eval(&[&x], |b, p| reduce::log_softmax(b, p[0], 1));
    let want_log: Vec<f64> = x
        .to_f64_vec()
        .chunks(3)
        .flat_map(|r| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = r.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            r.iter().map(move |v| (v - m) - l).collect::<Vec<_>>()
        })
        .collect();
    assert_tensor(&lsm, &[3, 3], &want_log, 1e-14);
    assert!(lsm.to_f64_vec()[6] < -999.0 && lsm.to_f64_vec()[6].is_finite(), "log_softmax keeps tiny probabilities");
    // softmax of [1000, 1001] must not be NaN (f32 too).
    let big = t32(&[2], &[1000.0, 1001.0]);
    let s = eval(&[&big], |b, p| reduce::softmax(b, p[0], 0)).to_f64_vec();
    let e = 1.0 / (1.0 + (-1f64).exp());
    assert_close(&s, &[1.0 - e, e], 1e-6);
    // Along axis 0, against the transposed reference.
    let sm0 = eval(&[&x], |b, p| reduce::softmax(b, p[0], 0)).to_f64_vec();
    let xt: Vec<f64> = (0..9).map(|i| x.to_f64_vec()[(i % 3) * 3 + i / 3]).collect();
    let w = ref_softmax_rows(&xt, 3);
    let w0: Vec<f64> = (0..9).map(|i| w[(i % 3) * 3 + i / 3]).collect();
    assert_close(&sm0, &w0, 1e-14);
    // -inf entries get probability 0.
    let m = t64(&[3], &[f64::NEG_INFINITY, 0.0, 0.0]);
    assert_close(&eval(&[&m], |b, p| reduce::softmax(b, p[0], 0)).to_f64_vec(), &[0.0, 0.5, 0.5], 1e-15);
    // Errors.
    assert!(err_msg(&[&x], |b, p| reduce::softmax(b, p[0], 2)).contains("axis 2"));
    assert!(err_msg(&[&ti32(&[2], &[1, 2])], |b, p| reduce::softmax(b, p[0], 0)).contains("floating-point"));
}

#[test]
fn logsumexp_edge_rows() {
    let ninf = f64::NEG_INFINITY;
    let x = t64(&[4, 2], &[ninf, ninf, 1000.0, 1000.0, ninf, 3.0, f64::INFINITY, 1.0]);
    let y = eval(&[&x], |b, p| reduce::logsumexp(b, p[0], &[1], false)).to_f64_vec();
    assert_eq!(y[0], ninf, "an all -inf row gives -inf, not NaN");
    assert!((y[1] - (1000.0 + 2f64.ln())).abs() < 1e-12);
    assert!((y[2] - 3.0).abs() < 1e-15);
    assert_eq!(y[3], f64::INFINITY);
    let k = eval(&[&x], |b, p| reduce::logsumexp(b, p[0], &[0, 1], true));
    assert_eq!(k.shape(), &[1, 1]);
    assert_eq!(k.to_f64_vec()[0], f64::INFINITY);
    // Zero-size reduction gives -inf.
    let e = t64(&[2, 0], &[]);
    assert_eq!(eval(&[&e], |b, p| reduce::logsumexp(b, p[0], &[1], false)).to_f64_vec(), vec![ninf, ninf]);
    // NaN propagates.
    let n = t64(&[2], &[f64::NAN, 1.0]);
    assert!(eval(&[&n], |b, p| reduce::logsumexp(b, p[0], &[0], false)).to_f64_vec()[0].is_nan());
    let _ = Tensor::scalar(0.0f64);
}
