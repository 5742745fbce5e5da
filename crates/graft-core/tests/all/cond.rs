//! cond/switch: only the taken branch's values (index clamped), derivatives
//! through every branch against finite differences and the dot-product test,
//! second derivatives, vmap with a batched (mixed) predicate or index, and
//! cond inside a scan.

use crate::common;
use crate::loops_util;

use common::{check_grads, run, Rng};
use graft_core::ad::{grad, Wrt};
use graft_core::batch::vmap_func;
use graft_core::ops::scan::ScanOpts;
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};
use loops_util::{assert_all_close, func, stack, t64, take};
use std::sync::Arc;

fn i32s() -> TensorType {
    TensorType::scalar(DType::I32)
}

/// Three branches (x[3], y[3]) -> (f64[3], f64[], i32[]).
fn branches() -> Vec<Arc<Func>> {
    let ts = [t64(&[3]), t64(&[3])];
    let tail = |b: &mut Builder, o: Value, k: f64| -> Result<Vec<Value>, IrError> {
        let s = b.reduce_sum(o, &[0])?;
        let tag = b.scalar(k, DType::I32)?;
        Ok(vec![o, s, tag])
    };
    vec![
        Arc::new(func("mul", &ts, |b, p| {
            let o = b.mul(p[0], p[1])?;
            tail(b, o, 0.0)
        })),
        Arc::new(func("sin_add", &ts, |b, p| {
            let s = b.sin(p[0])?;
            let o = b.add(s, p[1])?;
            tail(b, o, 1.0)
        })),
        Arc::new(func("exp_y", &ts, |b, p| {
            let e = b.exp(p[0])?;
            let o = b.mul(e, p[1])?;
            let o = b.mul(o, o)?;
            tail(b, o, 2.0)
        })),
    ]
}

fn switch_func() -> Func {
    let br = branches();
    func("switched", &[i32s(), t64(&[3]), t64(&[3])], |b, p| b.switch(p[0], &br, &p[1..]))
}

fn bool_cond_func() -> Func {
    let br = branches();
    func("conded", &[TensorType::scalar(DType::Bool), t64(&[3]), t64(&[3])], |b, p| {
        b.cond(p[0], br[1].clone(), br[0].clone(), &p[1..])
    })
}

#[test]
fn switch_runs_the_clamped_branch() {
    let mut rng = Rng(1);
    let x = rng.tensor(&t64(&[3]), -1.0, 1.0);
    let y = rng.tensor(&t64(&[3]), -1.0, 1.0);
    let br = branches();
    for (idx, k) in [(-3, 0), (0, 0), (1, 1), (2, 2), (9, 2)] {
        let got = run(&switch_func(), &[Tensor::scalar(idx), x.clone(), y.clone()]);
        let want = run(&br[k], &[x.clone(), y.clone()]);
        assert_eq!(got, want, "index {idx}");
        assert_eq!(got[2].to_f64_vec(), vec![k as f64]);
    }
    for (p, k) in [(true, 1), (false, 0)] {
        let got = run(&bool_cond_func(), &[Tensor::scalar(p), x.clone(), y.clone()]);
        assert_eq!(got, run(&br[k], &[x.clone(), y.clone()]), "pred {p}");
    }
}

#[test]
fn cond_type_errors() {
    let br = branches();
    let mut b = Builder::new("bad");
    let x = b.param(t64(&[3]));
    let f = b.param(t64(&[]));
    let i = b.param(i32s());
    let err = b.switch(f, &br, &[x, x]).unwrap_err();
    assert!(err.to_string().contains("i32 scalar"), "{err}");
    let err = b.switch(i, &br, &[x]).unwrap_err();
    assert!(err.to_string().contains("parameter types"), "{err}");
    let other = Arc::new(func("other", &[t64(&[3]), t64(&[3])], |b, p| Ok(vec![b.add(p[0], p[1])?])));
    let err = b.switch(i, &[br[0].clone(), other], &[x, x]).unwrap_err();
    assert!(err.to_string().contains("return different types"), "{err}");
    let err = b.cond(i, br[0].clone(), br[1].clone(), &[x, x]).unwrap_err();
    assert!(err.to_string().contains("bool scalar"), "{err}");
}

#[test]
fn cond_derivatives_through_every_branch() {
    let mut rng = Rng(2);
    for idx in [0, 1, 2, 5] {
        let ins = vec![Tensor::scalar(idx), rng.tensor(&t64(&[3]), -1.0, 1.0), rng.tensor(&t64(&[3]), -1.0, 1.0)];
        check_grads(&format!("switch index {idx}"), &switch_func(), &ins, &mut rng, 1e-6, 1e-6);
    }
    for p in [true, false] {
        let ins = vec![Tensor::scalar(p), rng.tensor(&t64(&[3]), -1.0, 1.0), rng.tensor(&t64(&[3]), -1.0, 1.0)];
        check_grads(&format!("cond pred {p}"), &bool_cond_func(), &ins, &mut rng, 1e-6, 1e-6);
    }
}

/// f(idx, x) = x^3 (branch 0) or sin(x) * x (branch 1), x scalar.
fn scalar_switch() -> Func {
    let s = [t64(&[])];
    let cube = Arc::new(func("cube", &s, |b, p| {
        let x2 = b.mul(p[0], p[0])?;
        Ok(vec![b.mul(x2, p[0])?])
    }));
    let sinx = Arc::new(func("sinx", &s, |b, p| {
        let sx = b.sin(p[0])?;
        Ok(vec![b.mul(sx, p[0])?])
    }));
    func("f", &[i32s(), t64(&[])], |b, p| b.switch(p[0], &[cube, sinx], &p[1..]))
}

#[test]
fn second_derivative_through_cond() {
    let f = scalar_switch();
    let gg = grad(&grad(&f, &Wrt::Positions(vec![1])).unwrap(), &Wrt::Positions(vec![1])).unwrap();
    let x = 0.8f64;
    let at = |idx: i32| run(&gg, &[Tensor::scalar(idx), Tensor::scalar(x)])[0].to_f64_vec()[0];
    let want0 = 6.0 * x;
    let want1 = 2.0 * x.cos() - x * x.sin();
    assert!((at(0) - want0).abs() < 1e-12, "{} vs {want0}", at(0));
    assert!((at(1) - want1).abs() < 1e-12, "{} vs {want1}", at(1));
}

fn check_vmap(name: &str, f: &Func, in_axes: &[Option<usize>], ins: &[Tensor], size: usize) {
    let vf = vmap_func(f, in_axes, &vec![Some(0); f.outputs.len()], size).unwrap();
    let got = run(&vf, ins);
    for i in 0..size {
        let ex: Vec<Tensor> =
            ins.iter().zip(in_axes).map(|(t, a)| if a.is_some() { take(t, i) } else { t.clone() }).collect();
        let want = run(f, &ex);
        let got_i: Vec<Tensor> = got.iter().map(|t| take(t, i)).collect();
        assert_all_close(&format!("{name} example {i}"), &got_i, &want, 0.0);
    }
}

fn rand_stack(rng: &mut Rng, ty: &TensorType, size: usize) -> Tensor {
    stack(&(0..size).map(|_| rng.tensor(ty, -1.0, 1.0)).collect::<Vec<_>>())
}

#[test]
fn vmap_of_cond_with_mixed_predicates() {
    let mut rng = Rng(3);
    let preds = stack(&[true, false, false, true].map(Tensor::scalar));
    let x = rand_stack(&mut rng, &t64(&[3]), 4);
    let y = rng.tensor(&t64(&[3]), -1.0, 1.0);
    check_vmap("bool cond", &bool_cond_func(), &[Some(0), Some(0), None], &[preds.clone(), x.clone(), y.clone()], 4);
    check_vmap("bool cond, only pred batched", &bool_cond_func(), &[Some(0), None, None], &[preds, take(&x, 0), y], 4);
    let idx = stack(&[-1, 0, 1, 2, 7].map(Tensor::scalar));
    let x = rand_stack(&mut rng, &t64(&[3]), 5);
    let y = rand_stack(&mut rng, &t64(&[3]), 5);
    check_vmap("switch", &switch_func(), &[Some(0), Some(0), Some(0)], &[idx, x.clone(), y.clone()], 5);
    check_vmap("switch, index unbatched", &switch_func(), &[None, Some(0), Some(0)], &[Tensor::scalar(2), x, y], 5);
}

#[test]
fn vmap_of_grad_through_cond() {
    let mut rng = Rng(4);
    let f = func("l", &[i32s(), t64(&[3]), t64(&[3])], |b, p| {
        let o = b.call(Arc::new(switch_func()), p)?;
        let s = b.reduce_sum(o[0], &[0])?;
        Ok(vec![b.add(s, o[1])?])
    });
    let g = grad(&f, &Wrt::Positions(vec![1, 2])).unwrap();
    let idx = stack(&[2, 0, 1, 1].map(Tensor::scalar));
    let x = rand_stack(&mut rng, &t64(&[3]), 4);
    let y = rand_stack(&mut rng, &t64(&[3]), 4);
    check_vmap("vmap(grad(switch))", &g, &[Some(0), Some(0), Some(0)], &[idx, x, y], 4);
}

#[test]
fn cond_inside_scan() {
    // h' = h * x if h > 0 else sin(h) + x; y = h'. Both branches are taken.
    let s = [t64(&[]), t64(&[])];
    let pos = Arc::new(func("pos", &s, |b, p| Ok(vec![b.mul(p[0], p[1])?])));
    let neg = Arc::new(func("neg", &s, |b, p| {
        let sh = b.sin(p[0])?;
        Ok(vec![b.add(sh, p[1])?])
    }));
    let body = Arc::new(func("step", &s, |b, p| {
        let zero = b.scalar(0.0, DType::F64)?;
        let gt = b.gt(p[0], zero)?;
        let h = b.cond(gt, pos, neg, p)?[0];
        Ok(vec![h, h])
    }));
    let n = 6;
    let f = func("loop", &[t64(&[]), t64(&[n])], |b, p| b.scan(body, &[], &p[..1], &p[1..], ScanOpts::new(n)));
    let ins = vec![Tensor::scalar(0.3f64), Tensor::vec1(&[1.5f64, -2.0, 0.7, -0.4, 1.1, 0.9])];
    let ys = run(&f, &ins)[1].to_f64_vec();
    assert!(ys.iter().any(|&v| v > 0.0) && ys.iter().any(|&v| v < 0.0), "both branches are taken: {ys:?}");
    let mut rng = Rng(5);
    check_grads("cond in scan", &f, &ins, &mut rng, 1e-6, 1e-6);
    let g = grad(
        &func("l", &[t64(&[]), t64(&[n])], |b, p| {
            let o = b.call(Arc::new(f.clone()), p)?;
            Ok(vec![b.reduce_sum(o[1], &[0])?])
        }),
        &Wrt::All,
    )
    .unwrap();
    check_grads("grad of cond in scan", &g, &ins, &mut rng, 1e-6, 1e-6);
}
