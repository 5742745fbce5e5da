//! The `fma` primitive (`a * b + c` rounded once): its semantics against
//! exact arithmetic, its shape rule, its derivative rules (finite
//! differences, the dot-product test, second order and its own transpose),
//! its batching rule, and the native backend bitwise (elementwise groups,
//! row kernels and a compiled loop body).

use crate::common;

use common::native::{assert_same_bits, check_native, data, opts, skip};
use common::vmap::{check_vmap, Gen};
use common::{check_grads, run, Rng};
use graft_core::ad::jvp_func;
use graft_core::composite::{broadcast, reduce};
use graft_core::kernel::loops::native_loop_runs;
use graft_core::kernel::CompileMode;
use graft_core::ops::fma::Fma;
use graft_core::ops::remat::Remat;
use graft_core::{Builder, DType, Executable, Func, IrError, Op, Tensor, TensorType, Value};

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn func(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>) -> Func {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

fn fma3(dtype: DType, shape: &[usize]) -> Func {
    let t = ty(dtype, shape);
    func(&[t.clone(), t.clone(), t], |b, p| Ok(vec![b.fma(p[0], p[1], p[2])?]))
}

/// The exact `a * b + c` of three f32s rounded to f32 once. The product is
/// exact in f64, and TwoSum gives the sum as `s + err` exactly, with `s` the
/// f64 nearest it. Every point halfway between two f32s is an f64, so unless
/// `s` is one, the f32 nearest `s` is the f32 nearest the exact value; where
/// `s` is one, the sign of `err` picks the side.
fn fma_f32_exact(a: f32, b: f32, c: f32) -> f32 {
    let p = f64::from(a) * f64::from(b);
    let c = f64::from(c);
    let s = p + c;
    let bb = s - p;
    let err = (p - (s - bb)) + (c - bb);
    let r = s as f32;
    if err == 0.0 || r == 0.0 || !s.is_finite() || !r.is_finite() || f64::from(r) == s {
        return r;
    }
    // The f32 on the other side of s from r.
    let away = |x: f32, up: bool| {
        let bits = x.to_bits();
        f32::from_bits(if (x > 0.0) == up { bits + 1 } else { bits - 1 })
    };
    let other = away(r, f64::from(r) < s);
    if (f64::from(other) - s).abs() != (f64::from(r) - s).abs() {
        return r;
    }
    if (err > 0.0) == (other > r) {
        other
    } else {
        r
    }
}

#[test]
fn rounds_once() {
    // 0.1f32 * 10 is 1 + 2^-24 + ..., which a separate multiply rounds to 1.
    let f = fma3(DType::F32, &[]);
    let out = run(&f, &[Tensor::scalar(0.1f32), Tensor::scalar(10.0f32), Tensor::scalar(-1.0f32)]);
    let got = out[0].to_vec::<f32>().unwrap()[0];
    assert_eq!(got, 0.1f32.mul_add(10.0, -1.0));
    assert!(got > 1e-8 && got < 2e-8, "{got}");
    assert_ne!(got, 0.1f32 * 10.0 - 1.0);
    // Against exact arithmetic on many f32 triples, and mul_add in f64.
    let n = 20_000;
    let t = ty(DType::F32, &[n]);
    let ins = [data(&t, 11), data(&t, 12), data(&t, 13)];
    let f = fma3(DType::F32, &[n]);
    let got = run(&f, &ins)[0].to_vec::<f32>().unwrap();
    let v: Vec<Vec<f32>> = ins.iter().map(|x| x.to_vec::<f32>().unwrap()).collect();
    let mut fused_differs = 0;
    for i in 0..n {
        let (a, b, c) = (v[0][i], v[1][i], v[2][i]);
        let want = fma_f32_exact(a, b, c);
        assert!(got[i] == want || (got[i].is_nan() && want.is_nan()), "fma({a}, {b}, {c}) = {} not {want}", got[i]);
        fused_differs += usize::from(got[i] != a * b + c && !got[i].is_nan());
    }
    assert!(fused_differs > 0, "no input where rounding once matters: the test data is too tame");
    let t64 = ty(DType::F64, &[n]);
    let ins = [data(&t64, 21), data(&t64, 22), data(&t64, 23)];
    let got = run(&fma3(DType::F64, &[n]), &ins)[0].to_f64_vec();
    let v: Vec<Vec<f64>> = ins.iter().map(Tensor::to_f64_vec).collect();
    for i in 0..n {
        let want = v[0][i].mul_add(v[1][i], v[2][i]);
        assert!(got[i].to_bits() == want.to_bits() || (got[i].is_nan() && want.is_nan()));
    }
}

#[test]
fn shape_rule() {
    let f = ty(DType::F32, &[3]);
    assert_eq!(Fma.infer(&[f.clone(), f.clone(), f.clone()]).unwrap(), vec![f.clone()]);
    let e = Fma.infer(&[f.clone(), f.clone()]).unwrap_err().to_string();
    assert!(e.contains("expected 3 operands"), "{e}");
    let e = Fma.infer(&[f.clone(), f.clone(), ty(DType::F32, &[4])]).unwrap_err().to_string();
    assert!(e.contains("identical shapes and dtypes"), "{e}");
    let e = Fma.infer(&[f.clone(), f.clone(), ty(DType::F64, &[3])]).unwrap_err().to_string();
    assert!(e.contains("identical shapes and dtypes"), "{e}");
    let i = ty(DType::I32, &[3]);
    let e = Fma.infer(&[i.clone(), i.clone(), i]).unwrap_err().to_string();
    assert!(e.contains("floating-point"), "{e}");
    // The broadcasting composite: all three broadcast together.
    let g = func(&[ty(DType::F64, &[2, 1]), ty(DType::F64, &[3]), ty(DType::F64, &[])], |b, p| {
        Ok(vec![broadcast::fma(b, p[0], p[1], p[2])?])
    });
    assert_eq!(g.output_types()[0], ty(DType::F64, &[2, 3]));
    let out = run(
        &g,
        &[Tensor::from_vec([2, 1], vec![1.0, 2.0]).unwrap(), Tensor::vec1(&[1.0, 2.0, 3.0]), Tensor::scalar(0.5)],
    );
    assert_eq!(out[0].to_f64_vec(), vec![1.5, 2.5, 3.5, 2.5, 4.5, 6.5]);
}

#[test]
fn derivative_rules() {
    // First and second order, every operand, with broadcasting.
    let mut rng = Rng(5);
    for shapes in [[vec![4], vec![4], vec![4]], [vec![2, 3], vec![3], vec![]]] {
        let types: Vec<TensorType> = shapes.iter().map(|s| ty(DType::F64, s)).collect();
        let f = func(&types, |b, p| {
            let y = broadcast::fma(b, p[0], p[1], p[2])?;
            // A non-linear use, so the second order sees a curvature.
            let s = b.sin(y)?;
            Ok(vec![y, s])
        });
        let inputs: Vec<Tensor> = types.iter().map(|t| rng.tensor(t, -1.5, 1.5)).collect();
        check_grads(&format!("fma {shapes:?}"), &f, &inputs, &mut rng, 1e-6, 1e-6);
        let second = jvp_func(&f).unwrap();
        let mut ins2 = inputs.clone();
        ins2.extend(types.iter().map(|t| rng.tensor(t, -1.0, 1.0)));
        check_grads(&format!("fma {shapes:?} (2nd order)"), &second, &ins2, &mut rng, 1e-5, 1e-5);
    }
}

#[test]
fn transposes_where_linear() {
    // The rule itself (the JVP emits `mul`/`add`, so reverse mode never
    // transposes an `fma`): linear in (a, c) with b a primal, and in (b, c)
    // with a a primal, by the dot-product test
    // <ct, fma(a, b, c)> = <ct_a, a> + <ct_c, c>.
    use graft_core::ad::{Diff, TransposeCx};
    let t = ty(DType::F64, &[5]);
    let types = [t.clone(), t.clone(), t.clone()];
    let f = fma3(DType::F64, &[5]);
    let mut rng = Rng(9);
    let dot = |x: &Tensor, y: &Tensor| x.to_f64_vec().iter().zip(y.to_f64_vec()).map(|(a, b)| a * b).sum::<f64>();
    for lin in [0usize, 1] {
        let mut b = Builder::new("t");
        let primal = b.param(t.clone());
        let ct = b.param(t.clone());
        let mut inputs = [None, None, None];
        inputs[1 - lin] = Some(primal);
        let cx = TransposeCx { inputs: &inputs, in_types: &types, out_types: &[t.clone()], cts: &[Some(ct)] };
        let cts = Fma.transpose(&mut b, &cx).unwrap();
        assert!(cts[1 - lin].is_none(), "no cotangent for the primal operand");
        let g = b.finish(&[cts[lin].unwrap(), cts[2].unwrap()]).unwrap();
        let xs: Vec<Tensor> = (0..3).map(|_| rng.tensor(&t, -2.0, 2.0)).collect();
        let ctv = rng.tensor(&t, -2.0, 2.0);
        let got = run(&g, &[xs[1 - lin].clone(), ctv.clone()]);
        let lhs = dot(&ctv, &run(&f, &xs)[0]);
        let rhs = dot(&got[0], &xs[lin]) + dot(&got[1], &xs[2]);
        assert!((lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0), "operand {lin} linear: {lhs} vs {rhs}");
    }
    // A product of two linear operands is not linear.
    let mut b = Builder::new("t");
    let ct = b.param(t.clone());
    let none = [None, None, None];
    let cx = TransposeCx { inputs: &none, in_types: &types, out_types: &[t.clone()], cts: &[Some(ct)] };
    let e = Fma.transpose(&mut b, &cx).unwrap_err().to_string();
    assert!(e.contains("fma"), "{e}");
}

#[test]
fn batching_rule() {
    let x = Gen::F(-2.0, 2.0);
    let t = ty(DType::F64, &[2, 3]);
    let f = func(&[t.clone(), t.clone(), t], |b, p| {
        let y = b.fma(p[0], p[1], p[2])?;
        Ok(vec![b.fma(y, y, p[0])?])
    });
    check_vmap("fma", &f, &[x, x, x], 12);
    let f32s = ty(DType::F32, &[4]);
    let g = func(&[f32s.clone(), f32s.clone(), f32s], |b, p| Ok(vec![b.fma(p[0], p[1], p[2])?]));
    check_vmap("fma_f32", &g, &[x, x, x], 12);
}

#[test]
fn native_kernels_are_bitwise() {
    if skip() {
        return;
    }
    // Elementwise groups in both dtypes, with a splat constant, at lengths
    // around the vector width.
    for dtype in [DType::F32, DType::F64] {
        for n in [1, 7, 16, 17, 1003] {
            let t = ty(dtype, &[n]);
            let f = func(&[t.clone(), t.clone(), t.clone()], |b, p| {
                let h = b.scalar(0.1, dtype)?;
                let h = b.broadcast_in_dim(h, &[n], &[])?;
                let y = b.fma(p[0], p[1], p[2])?;
                let z = b.fma(y, h, p[0])?;
                Ok(vec![b.tanh(z)?, y])
            });
            check_native(&f, &[data(&t, 1), data(&t, 2), data(&t, 3)]);
        }
    }
    // A row kernel: the fused product-sum inside a row reduction and after it.
    let t = ty(DType::F32, &[64, 300]);
    let f = func(&[t.clone(), t.clone(), t], |b, p| {
        let y = b.fma(p[0], p[1], p[2])?;
        let m = reduce::max(b, y, &[1], true)?;
        let m = b.broadcast_in_dim(m, &[64, 300], &[0, 1])?;
        Ok(vec![b.fma(y, m, p[0])?])
    });
    let t = ty(DType::F32, &[64, 300]);
    check_native(&f, &[data(&t, 4), data(&t, 5), data(&t, 6)]);
}

#[test]
fn loop_bodies_compile_with_it() {
    if skip() {
        return;
    }
    // y <- fma(x, y, y[reversed]) for 9 steps, as one compiled loop.
    let n = 257;
    let t = ty(DType::F64, &[n]);
    let mut body = Builder::new("step");
    let x = body.param(t.clone());
    let _i = body.param(TensorType::scalar(DType::I32));
    let y = body.param(t.clone());
    let r = body.reverse(y, &[0]).unwrap();
    let next = body.fma(x, y, r).unwrap();
    let body = body.finish(&[next]).unwrap();
    let mut b = Builder::new("loop");
    let xp = b.param(t.clone());
    let y0 = b.param(t.clone());
    let out = b.fori(9, &body, &[xp], &[y0], Remat::Off).unwrap();
    let f = b.finish(&out).unwrap();
    let xs = Tensor::from_fn(&t, |i| 0.5 + (i % 7) as f64 * 0.01);
    let ys = Tensor::from_fn(&t, |i| (i as f64 * 0.37).sin());
    let refs = [&xs, &ys];
    let want = Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    let exe = Executable::with_options(f, opts(CompileMode::Sync)).unwrap();
    let before = native_loop_runs();
    let got = exe.run(&refs).unwrap();
    assert_eq!(native_loop_runs() - before, 1, "the loop did not run compiled");
    assert_same_bits(&got, &want, "compiled loop");
}
