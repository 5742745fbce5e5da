//! grad / value_and_grad / vjp / jvp at the function level: seed examples,
//! higher order, conventions, error messages, symbolic zeros, and that the
//! reverse pass does not redo forward work.

use crate::common;

use common::{run, Rng};
use graft_core::ad::{grad, jvp_func, value_and_grad, vjp_func, Wrt};
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

fn func(
    name: &str,
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Func {
    let mut b = Builder::new(name);
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

/// Seed 001: loss(w, x, y) = (sum(w * x) - y)^2.
fn seed_loss() -> Func {
    func("loss", &[t64(&[3]), t64(&[3]), t64(&[])], |b, p| {
        let wx = b.mul(p[0], p[1])?;
        let pred = b.reduce_sum(wx, &[0])?;
        let err = b.sub(pred, p[2])?;
        Ok(vec![b.mul(err, err)?])
    })
}

#[test]
fn seed_001_loss_gradient_is_2_err_x() {
    let f = seed_loss();
    let g = grad(&f, &Wrt::Positions(vec![0])).unwrap();
    assert_eq!(g.output_types(), vec![t64(&[3])], "the gradient has exactly w's type");
    let (w, x, y) = ([0.5, -1.0, 2.0], [1.5, 2.0, -0.5], 0.25);
    let out = run(&g, &[Tensor::vec1(&w), Tensor::vec1(&x), Tensor::scalar(y)]);
    let err: f64 = w.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>() - y;
    let expected: Vec<f64> = x.iter().map(|xi| 2.0 * err * xi).collect();
    assert_eq!(out[0].to_vec::<f64>().unwrap(), expected);
}

#[test]
fn wrt_order_is_respected_and_value_and_grad_matches() {
    // loss(w, b) = sum((w * x + b)^2) with x fixed inside.
    let f = func("loss", &[t64(&[2]), t64(&[])], |b, p| {
        let x = b.constant(Tensor::vec1(&[1.0f64, -2.0]))?;
        let wx = b.mul(p[0], x)?;
        let bb = b.broadcast_in_dim(p[1], &[2], &[])?;
        let pred = b.add(wx, bb)?;
        let sq = b.mul(pred, pred)?;
        Ok(vec![b.reduce_sum(sq, &[0])?])
    });
    let (w, bias) = (Tensor::vec1(&[0.5f64, 0.25]), Tensor::scalar(0.1f64));
    let wb = run(&grad(&f, &Wrt::Positions(vec![0, 1])).unwrap(), &[w.clone(), bias.clone()]);
    let bw = run(&grad(&f, &Wrt::Positions(vec![1, 0])).unwrap(), &[w.clone(), bias.clone()]);
    assert_eq!(wb[0], bw[1]);
    assert_eq!(wb[1], bw[0]);
    // dL/dw_i = 2 (w_i x_i + b) x_i, dL/db = sum 2 (w_i x_i + b).
    let p = [0.5 * 1.0 + 0.1, 0.25 * -2.0 + 0.1];
    assert_eq!(wb[0].to_vec::<f64>().unwrap(), vec![2.0 * p[0] * 1.0, 2.0 * p[1] * -2.0]);
    assert!((wb[1].to_scalar_f64().unwrap() - 2.0 * (p[0] + p[1])).abs() < 1e-15);
    let vg = run(&value_and_grad(&f, &Wrt::All).unwrap(), &[w, bias]);
    assert!((vg[0].to_scalar_f64().unwrap() - (p[0] * p[0] + p[1] * p[1])).abs() < 1e-15);
    assert_eq!(vg[1], wb[0]);
    assert_eq!(vg[2], wb[1]);
}

#[test]
fn value_and_grad_evaluates_the_forward_part_once() {
    // f(x) = sum(exp(sin(x)) * x): exactly one sin and one exp may appear.
    let f = func("f", &[t64(&[4])], |b, p| {
        let s = b.sin(p[0])?;
        let e = b.exp(s)?;
        let m = b.mul(e, p[0])?;
        Ok(vec![b.reduce_sum(m, &[0])?])
    });
    let vg = value_and_grad(&f, &Wrt::All).unwrap();
    assert_eq!(vg.count_prim("sin"), 1, "{vg}");
    assert_eq!(vg.count_prim("exp"), 1, "{vg}");
    assert_eq!(vg.count_prim("cos"), 1, "{vg}");
}

#[test]
fn second_derivatives_by_grad_of_grad() {
    // f(x) = x^3 sin(x); f'' = 6x sin x + 6x^2 cos x - x^3 sin x.
    let f = func("f", &[t64(&[])], |b, p| {
        let x2 = b.mul(p[0], p[0])?;
        let x3 = b.mul(x2, p[0])?;
        let s = b.sin(p[0])?;
        Ok(vec![b.mul(x3, s)?])
    });
    let g2 = grad(&grad(&f, &Wrt::All).unwrap(), &Wrt::All).unwrap();
    for x in [0.3f64, -1.2, 2.0] {
        let got = run(&g2, &[Tensor::scalar(x)])[0].to_scalar_f64().unwrap();
        let want = 6.0 * x * x.sin() + 6.0 * x * x * x.cos() - x.powi(3) * x.sin();
        assert!((got - want).abs() < 1e-12 * want.abs().max(1.0), "f''({x}) = {got}, want {want}");
    }
    // Third order works too: compare with finite differences of f''.
    let g3 = grad(&g2, &Wrt::All).unwrap();
    let x = 0.7;
    let h = 1e-5;
    let fd = (run(&g2, &[Tensor::scalar(x + h)])[0].to_scalar_f64().unwrap()
        - run(&g2, &[Tensor::scalar(x - h)])[0].to_scalar_f64().unwrap())
        / (2.0 * h);
    let got = run(&g3, &[Tensor::scalar(x)])[0].to_scalar_f64().unwrap();
    assert!((got - fd).abs() < 1e-6 * fd.abs().max(1.0), "f''' = {got}, fd {fd}");
}

#[test]
fn hessian_vector_product_by_jvp_of_grad() {
    // f(x) = sum(x^2 * y) with y fixed; H = diag(2y); Hv = 2 y v.
    let f = func("f", &[t64(&[3])], |b, p| {
        let y = b.constant(Tensor::vec1(&[1.0f64, 2.0, -3.0]))?;
        let x2 = b.mul(p[0], p[0])?;
        let m = b.mul(x2, y)?;
        Ok(vec![b.reduce_sum(m, &[0])?])
    });
    let hvp = jvp_func(&grad(&f, &Wrt::All).unwrap()).unwrap();
    let out = run(&hvp, &[Tensor::vec1(&[0.1f64, 0.2, 0.3]), Tensor::vec1(&[1.0f64, -1.0, 0.5])]);
    assert_eq!(out[1].to_vec::<f64>().unwrap(), vec![2.0, -4.0, -3.0]);
}

#[test]
fn stop_gradient_and_unused_parameters_give_zero_gradients_without_nodes() {
    let f = func("f", &[t64(&[2]), t64(&[2, 2])], |b, p| {
        let s = b.stop_gradient(p[0])?;
        let m = b.mul(s, p[0])?;
        Ok(vec![b.reduce_sum(m, &[0])?])
    });
    let g = grad(&f, &Wrt::All).unwrap();
    let out = run(&g, &[Tensor::vec1(&[3.0f64, 4.0]), Tensor::zeros(&t64(&[2, 2]))]);
    // d/dx [sg(x) * x] = sg(x) = x.
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![3.0, 4.0]);
    assert_eq!(out[1], Tensor::zeros(&t64(&[2, 2])));
    // The unused parameter is never read: its gradient is a zeros constant.
    let unused = g.params[1];
    assert!(g.eqns.iter().all(|e| !e.inputs.contains(&unused)), "{g}");
    // The reverse pass multiplies the seed cotangent 1 by sg(x), which
    // `opt::fold_identities` removes: the gradient is sg(x) itself, and the
    // forward product is dead.
    assert_eq!(g.count_prim("mul"), 0, "{g}");
}

#[test]
fn conventions_at_non_smooth_points() {
    let at = |f: &Func, x: f64| run(&grad(f, &Wrt::All).unwrap(), &[Tensor::scalar(x)])[0].to_scalar_f64().unwrap();
    let abs = func("abs", &[t64(&[])], |b, p| Ok(vec![b.abs(p[0])?]));
    assert_eq!(at(&abs, 0.0), 0.0);
    assert_eq!(at(&abs, -2.0), -1.0);
    for op in ["floor", "ceil", "round", "sign"] {
        let f = func(op, &[t64(&[])], |b, p| {
            let v = match op {
                "floor" => b.floor(p[0])?,
                "ceil" => b.ceil(p[0])?,
                "round" => b.round(p[0])?,
                _ => b.sign(p[0])?,
            };
            Ok(vec![v])
        });
        assert_eq!(at(&f, 1.3), 0.0, "{op}");
    }
    // max/min ties split the gradient equally.
    let mx = func("max", &[t64(&[]), t64(&[])], |b, p| Ok(vec![b.max(p[0], p[1])?]));
    let g = run(&grad(&mx, &Wrt::All).unwrap(), &[Tensor::scalar(1.0f64), Tensor::scalar(1.0f64)]);
    assert_eq!((g[0].to_scalar_f64().unwrap(), g[1].to_scalar_f64().unwrap()), (0.5, 0.5));
    // Comparisons have zero derivative; select routes the cotangent.
    let sel = func("relu", &[t64(&[])], |b, p| {
        let zero = b.scalar(0.0, DType::F64)?;
        let pos = b.gt(p[0], zero)?;
        Ok(vec![b.select(pos, p[0], zero)?])
    });
    assert_eq!(at(&sel, 0.0), 0.0, "relu'(0) = 0");
    assert_eq!(at(&sel, 2.0), 1.0);
}

#[test]
fn errors_name_the_problem() {
    let vec_out = func("pred", &[t64(&[3])], |b, p| Ok(vec![b.sin(p[0])?]));
    let e = grad(&vec_out, &Wrt::All).unwrap_err().to_string();
    assert!(e.contains("`pred` must return one floating-point scalar, but it returns (f64[3])"), "{e}");
    assert!(e.contains("reduce it to a scalar first"), "{e}");
    let f = func("f", &[t64(&[]), TensorType::scalar(DType::I32)], |b, p| Ok(vec![b.sin(p[0])?]));
    let e = grad(&f, &Wrt::Positions(vec![5])).unwrap_err().to_string();
    assert!(e.contains("wrt names parameter 5 of `f`, which has only 2 parameters"), "{e}");
    let e = grad(&f, &Wrt::Positions(vec![1])).unwrap_err().to_string();
    assert!(e.contains("parameter 1 of `f` has type i32[], which is not differentiable"), "{e}");
    // Wrt::All skips integer parameters.
    let g = grad(&f, &Wrt::All).unwrap();
    assert_eq!(g.outputs.len(), 1);
}

#[test]
fn vjp_with_several_outputs_and_cotangents() {
    let f = func("f", &[t64(&[2]), t64(&[2])], |b, p| Ok(vec![b.mul(p[0], p[1])?, b.add(p[0], p[1])?]));
    let v = vjp_func(&f, &Wrt::All).unwrap();
    let mut rng = Rng(1);
    let (x, y) = (rng.tensor(&t64(&[2]), -1.0, 1.0), rng.tensor(&t64(&[2]), -1.0, 1.0));
    let (u1, u2) = (Tensor::vec1(&[1.0f64, 2.0]), Tensor::vec1(&[-1.0f64, 0.5]));
    let out = run(&v, &[x.clone(), y.clone(), u1.clone(), u2.clone()]);
    let (xv, yv) = (x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
    let gx: Vec<f64> = (0..2).map(|i| [1.0, 2.0][i] * yv[i] + [-1.0, 0.5][i]).collect();
    let gy: Vec<f64> = (0..2).map(|i| [1.0, 2.0][i] * xv[i] + [-1.0, 0.5][i]).collect();
    assert_eq!(out[2].to_vec::<f64>().unwrap(), gx);
    assert_eq!(out[3].to_vec::<f64>().unwrap(), gy);
}

#[test]
fn pullback_serves_several_cotangents_from_one_forward_pass() {
    use graft_core::ad::vjp_split;
    let f = func("f", &[t64(&[3])], |b, p| {
        let s = b.sin(p[0])?;
        Ok(vec![b.mul(s, p[0])?])
    });
    let split = vjp_split(&f, &Wrt::All).unwrap();
    assert_eq!(split.rest.count_prim("sin") + split.rest.count_prim("cos"), 0, "{}", split.rest);
    let x = Tensor::vec1(&[0.1f64, 0.7, -1.3]);
    let fwd = run(&split.forward, std::slice::from_ref(&x));
    let residuals = &fwd[split.n_outputs..];
    let full = vjp_func(&f, &Wrt::All).unwrap();
    for u in [[1.0f64, 0.0, 0.0], [0.5, -2.0, 3.0]] {
        let mut ins: Vec<Tensor> = residuals.to_vec();
        ins.push(Tensor::vec1(&u));
        let g = run(&split.rest, &ins);
        let reference = run(&full, &[x.clone(), Tensor::vec1(&u)]);
        assert_eq!(g[0], reference[1]);
        assert_eq!(fwd[0], reference[0]);
    }
}

#[test]
fn hvp_and_linearize() {
    use graft_core::ad::{hvp_func, linearize};
    // f(x) = sum(sin(x) * x^2): H is diagonal, H_ii = (2 - x^2) sin x + 4 x cos x.
    let f = func("f", &[t64(&[3])], |b, p| {
        let s = b.sin(p[0])?;
        let x2 = b.mul(p[0], p[0])?;
        let m = b.mul(s, x2)?;
        Ok(vec![b.reduce_sum(m, &[0])?])
    });
    let xs = [0.4f64, -1.3, 2.2];
    let vs = [1.0f64, 0.5, -2.0];
    let hv = run(&hvp_func(&f).unwrap(), &[Tensor::vec1(&xs), Tensor::vec1(&vs)]);
    for i in 0..3 {
        let x = xs[i];
        let want = ((2.0 - x * x) * x.sin() + 4.0 * x * x.cos()) * vs[i];
        let got = hv[0].to_vec::<f64>().unwrap()[i];
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    // linearize: one forward pass, then the linear map for several tangents.
    let g = func("g", &[t64(&[3])], |b, p| Ok(vec![b.exp(p[0])?]));
    let split = linearize(&g).unwrap();
    assert_eq!(split.rest.count_prim("exp"), 0, "the linear map reuses the residuals:\n{}", split.rest);
    let fwd = run(&split.forward, &[Tensor::vec1(&xs)]);
    for t in [[1.0f64, 0.0, 0.0], [0.5, 2.0, -1.0]] {
        let mut ins = fwd[split.n_outputs..].to_vec();
        ins.push(Tensor::vec1(&t));
        let out = run(&split.rest, &ins);
        let want: Vec<f64> = xs.iter().zip(&t).map(|(x, t)| x.exp() * t).collect();
        assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    }
}

/// A rule's error raised while rewriting a located equation carries that
/// location (innermost wins), so front ends can point at the user's line.
#[test]
fn rule_errors_carry_the_equation_location() {
    use graft_core::ir::SrcLoc;
    use std::sync::Arc;
    let inner = Arc::new(SrcLoc { file: "m.graft".into(), line: 3, col: 7 });
    let outer = Arc::new(SrcLoc { file: "m.graft".into(), line: 9, col: 1 });
    let e = graft_core::IrError::invalid("op", "bad").at(Some(&inner)).at(Some(&outer));
    let (bare, loc) = e.located();
    assert_eq!(bare, &graft_core::IrError::invalid("op", "bad"));
    assert_eq!(loc.map(|l| (l.line, l.col)), Some((3, 7)));
    assert_eq!(e.to_string(), "op: bad (at m.graft:3:7)");
    assert_eq!(graft_core::IrError::invalid("op", "bad").at(None), graft_core::IrError::invalid("op", "bad"));
}
