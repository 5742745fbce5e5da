//! while loops and fori with a run-time trip count: forward values, forward
//! and reverse derivatives (finite differences, JVP/VJP dot-product test,
//! closed forms), second and third order, vmap with per-example trip counts,
//! and carry checkpointing (peak bytes).

use crate::common;

use common::{check_grads, run, Rng};
use graft_core::ad::{grad, jvp_func, value_and_grad, vjp_func, Wrt};
use graft_core::ad::{Diff, TransposeCx};
use graft_core::batch::vmap_func;
use graft_core::ops::remat::Remat;
use graft_core::ops::while_loop::{Loop, WhileHvp, WhileJvp, WhileVjp};
use graft_core::{Builder, DType, Executable, Func, Prim, Tensor, TensorType, Value};
use std::sync::Arc;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

fn s64() -> TensorType {
    t64(&[])
}

fn si32() -> TensorType {
    TensorType::new(DType::I32, vec![])
}

fn f64s(x: f64) -> Tensor {
    Tensor::scalar(x)
}

fn val(t: &Tensor) -> f64 {
    t.to_scalar_f64().unwrap()
}

/// A function of `params` types built by `body(b, params) -> outputs`.
fn func(name: &str, params: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Vec<Value>) -> Func {
    let mut b = Builder::new(name);
    let ps: Vec<Value> = params.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps);
    b.finish(&outs).unwrap()
}

/// Newton's method for sqrt(a): x <- (x + a / x) / 2 from x = a + 1, while
/// |x * x - a| >= 1e-13 * a. The trip count depends on `a`.
fn newton(remat: Remat) -> Func {
    let x2 = [s64(), s64()]; // consts (a), carry (x)
    let cond = func("newton_cond", &x2, |b, p| {
        let xx = b.mul(p[1], p[1]).unwrap();
        let r = b.sub(xx, p[0]).unwrap();
        let r = b.abs(r).unwrap();
        let tol = b.scalar(1e-13, DType::F64).unwrap();
        let tol = b.mul(tol, p[0]).unwrap();
        vec![b.ge(r, tol).unwrap()]
    });
    let body = func("newton_step", &x2, |b, p| {
        let q = b.div(p[0], p[1]).unwrap();
        let s = b.add(p[1], q).unwrap();
        let h = b.scalar(0.5, DType::F64).unwrap();
        vec![b.mul(s, h).unwrap()]
    });
    func("newton", &[s64()], |b, p| {
        let one = b.scalar(1.0, DType::F64).unwrap();
        let x0 = b.add(p[0], one).unwrap();
        b.while_loop_remat(Arc::new(cond), Arc::new(body), &[p[0]], &[x0], remat).unwrap()
    })
}

/// Trips Newton's method takes for `a` (the reference for the trip-count tests).
fn newton_trips(a: f64) -> usize {
    let (mut x, mut n) = (a + 1.0, 0);
    while (x * x - a).abs() >= 1e-13 * a {
        x = (x + a / x) * 0.5;
        n += 1;
    }
    n
}

#[test]
fn counting_loop_and_zero_trips() {
    // (i, s) -> while i < limit: i += 1; s += i * step. Consts (limit, step).
    let x = [si32(), s64(), si32(), s64()];
    let cond = func("cond", &x, |b, p| vec![b.lt(p[2], p[0]).unwrap()]);
    let body = func("body", &x, |b, p| {
        let one = b.scalar(1.0, DType::I32).unwrap();
        let i = b.add(p[2], one).unwrap();
        let fi = b.convert(i, DType::F64).unwrap();
        let d = b.mul(fi, p[1]).unwrap();
        vec![i, b.add(p[3], d).unwrap()]
    });
    let (cond, body) = (Arc::new(cond), Arc::new(body));
    let f = func("count", &[si32(), s64(), si32(), s64()], |b, p| {
        b.while_loop(cond.clone(), body.clone(), &p[..2], &p[2..]).unwrap()
    });
    for (limit, start, s0) in [(10, 0, 0.0), (7, 3, 1.5), (0, 0, 2.0), (-4, 5, 2.5)] {
        let out = run(&f, &[Tensor::scalar(limit), f64s(0.5), Tensor::scalar(start), f64s(s0)]);
        let (mut i, mut s) = (start, s0);
        while i < limit {
            i += 1;
            s += i as f64 * 0.5;
        }
        assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![i], "limit {limit} start {start}");
        assert_eq!(val(&out[1]), s, "limit {limit} start {start}");
    }
    // Zero trips return the initial carry exactly.
    let out = run(&f, &[Tensor::scalar(0), f64s(0.5), Tensor::scalar(3), f64s(1.25)]);
    assert_eq!((out[0].to_vec::<i32>().unwrap()[0], val(&out[1])), (3, 1.25));
}

#[test]
fn newton_sqrt_value_and_derivative() {
    let f = newton(Remat::Off);
    let g = grad(&f, &Wrt::All).unwrap();
    let vg = value_and_grad(&f, &Wrt::All).unwrap();
    let trips: Vec<usize> = [0.5, 2.0, 9.0, 1e4].iter().map(|&a| newton_trips(a)).collect();
    assert!(trips.windows(2).any(|w| w[0] != w[1]), "trip counts should differ: {trips:?}");
    for a in [0.5, 2.0, 9.0, 1e4] {
        let x = val(&run(&f, &[f64s(a)])[0]);
        assert!((x - a.sqrt()).abs() <= 1e-12 * a.sqrt(), "sqrt({a}) = {x}");
        let d = val(&run(&g, &[f64s(a)])[0]);
        let want = 1.0 / (2.0 * a.sqrt());
        assert!((d - want).abs() <= 1e-10 * want.max(1.0), "d/da sqrt({a}): {d} vs {want}");
        let both = run(&vg, &[f64s(a)]);
        assert_eq!((val(&both[0]), val(&both[1])), (x, d));
    }
}

#[test]
fn newton_second_and_third_order() {
    let f = newton(Remat::Off);
    let g = grad(&f, &Wrt::All).unwrap();
    let gg = grad(&g, &Wrt::All).unwrap();
    let ggg = grad(&gg, &Wrt::All).unwrap();
    for a in [0.7, 3.0, 50.0] {
        let d2 = val(&run(&gg, &[f64s(a)])[0]);
        let want2 = -0.25 * a.powf(-1.5);
        assert!((d2 - want2).abs() <= 1e-9 * want2.abs().max(1.0), "f''({a}) = {d2} vs {want2}");
        // Against central differences of grad(f).
        let eps = 1e-5 * a;
        let fd = (val(&run(&g, &[f64s(a + eps)])[0]) - val(&run(&g, &[f64s(a - eps)])[0])) / (2.0 * eps);
        assert!((d2 - fd).abs() <= 1e-6 * fd.abs().max(1e-3), "f''({a}) = {d2} vs fd {fd}");
        let d3 = val(&run(&ggg, &[f64s(a)])[0]);
        let want3 = 0.375 * a.powf(-2.5);
        assert!((d3 - want3).abs() <= 1e-8 * want3.abs().max(1.0), "f'''({a}) = {d3} vs {want3}");
    }
}

/// A loop with consts, several carries (one integer) and a predicate on a
/// float carry: while y < 3 and i < n: x = tanh(x * w + y); y += 0.3 + sum(x^2) / 4; i += 1.
fn mixed_loop() -> Func {
    let (cond, body) = mixed_parts();
    func("mixed", &[t64(&[3]), si32(), t64(&[3]), s64()], |b, p| {
        let zero = b.scalar(0.0, DType::I32).unwrap();
        let outs = b.while_loop(Arc::new(cond), Arc::new(body), &[p[0], p[1]], &[zero, p[2], p[3]]).unwrap();
        // Outputs: the trip count, x, and a scalar mixing x and y.
        let s = b.reduce_sum(outs[1], &[0]).unwrap();
        let m = b.mul(s, outs[2]).unwrap();
        vec![outs[0], outs[1], m]
    })
}

/// The cond and body of [`mixed_loop`] over consts (w, n), carry (i, x, y).
fn mixed_parts() -> (Func, Func) {
    let x = [t64(&[3]), si32(), si32(), t64(&[3]), s64()];
    let cond = func("mixed_cond", &x, |b, p| {
        let three = b.scalar(3.0, DType::F64).unwrap();
        let a = b.lt(p[4], three).unwrap();
        let c = b.lt(p[2], p[1]).unwrap();
        vec![b.and(a, c).unwrap()]
    });
    let body = func("mixed_body", &x, |b, p| {
        let one = b.scalar(1.0, DType::I32).unwrap();
        let i = b.add(p[2], one).unwrap();
        let xw = b.mul(p[3], p[0]).unwrap();
        let yb = b.broadcast_in_dim(p[4], &[3], &[]).unwrap();
        let z = b.add(xw, yb).unwrap();
        let nx = b.tanh(z).unwrap();
        let sq = b.mul(nx, nx).unwrap();
        let s = b.reduce_sum(sq, &[0]).unwrap();
        let q = b.scalar(0.25, DType::F64).unwrap();
        let s = b.mul(s, q).unwrap();
        let c = b.scalar(0.3, DType::F64).unwrap();
        let s = b.add(s, c).unwrap();
        vec![i, nx, b.add(p[4], s).unwrap()]
    });
    (cond, body)
}

fn mixed_lp() -> Loop {
    let (cond, body) = mixed_parts();
    Loop::new(Arc::new(cond), Arc::new(body), 2, Remat::Off).unwrap()
}

/// Operands for the mixed loop's primitives: x = (w, n, i0, x0, y0), then
/// random tensors for the extra slots of the given types.
fn mixed_operands(rng: &mut Rng, n: i32, extra: &[TensorType]) -> Vec<Tensor> {
    let mut v = vec![
        rng.tensor(&t64(&[3]), 0.5, 1.5),
        Tensor::scalar(n),
        Tensor::scalar(0i32),
        rng.tensor(&t64(&[3]), -1.0, 1.0),
        f64s(0.1),
    ];
    v.extend(extra.iter().map(|t| rng.tensor(t, -1.0, 1.0)));
    v
}

/// A function applying one primitive to fresh parameters.
fn single(op: impl Into<Prim>, ins: &[Tensor]) -> Func {
    let tys: Vec<TensorType> = ins.iter().map(Tensor::ty).collect();
    func("single", &tys, |b, p| b.emit(op, p).unwrap())
}

#[test]
fn derivative_primitives_check_grads() {
    // Each primitive on its own: forward mode against finite differences
    // (its JVP rule) and the dot-product test (its transpose rules).
    let lp = mixed_lp();
    let fx = [t64(&[3]), t64(&[3]), s64()]; // float entries of x: w, x, y
    let fc = [t64(&[3]), s64()]; // float carries: x, y
    let mut rng = Rng(21);
    for n in [2, 100] {
        let ins = mixed_operands(&mut rng, n, &fx);
        check_grads("while_jvp", &single(WhileJvp::new(lp.clone()).unwrap(), &ins), &ins, &mut rng, 1e-6, 1e-6);
        let ins = mixed_operands(&mut rng, n, &fc);
        check_grads("while_vjp", &single(WhileVjp::new(lp.clone()).unwrap(), &ins), &ins, &mut rng, 1e-6, 1e-6);
        let ins = mixed_operands(&mut rng, n, &[fc.to_vec(), fx.to_vec()].concat());
        check_grads("while_hvp", &single(WhileHvp::new(lp.clone()).unwrap(), &ins), &ins, &mut rng, 1e-6, 1e-6);
    }
}

#[test]
fn hvp_transposes_in_u_and_in_w() {
    // <ct, H_u(x) w> == <transpose_u(ct), u> == <transpose_w(ct), w>, with
    // the transpose rules called directly (reverse mode only reaches the w one).
    let lp = mixed_lp();
    let op = WhileHvp::new(lp.clone()).unwrap();
    let fx = [t64(&[3]), t64(&[3]), s64()];
    let fc = [t64(&[3]), s64()];
    let mut rng = Rng(33);
    let ins = mixed_operands(&mut rng, 100, &[fc.to_vec(), fx.to_vec()].concat());
    let ct: Vec<Tensor> = fx.iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    let hw = run(&single(op.clone(), &ins), &ins);
    let lhs: f64 = ct.iter().zip(&hw).map(|(a, b)| common::dot(a, b)).sum();
    assert!(lhs.abs() > 1e-3, "a degenerate test: <ct, H_u w> = {lhs}");
    let in_types: Vec<TensorType> = ins.iter().map(Tensor::ty).collect();
    for (linear, name) in [(5..7, "u"), (7..10, "w")] {
        let mut b = Builder::new("transpose");
        let ps: Vec<Value> = ins.iter().map(|t| b.param(t.ty())).collect();
        let cs: Vec<Option<Value>> = ct.iter().map(|t| Some(b.param(t.ty()))).collect();
        let inputs: Vec<Option<Value>> =
            ps.iter().enumerate().map(|(i, &p)| if linear.contains(&i) { None } else { Some(p) }).collect();
        let cx = TransposeCx { inputs: &inputs, in_types: &in_types, out_types: &fx, cts: &cs };
        let res = op.transpose(&mut b, &cx).unwrap();
        let outs: Vec<Value> = linear.clone().map(|i| res[i].unwrap()).collect();
        let f = b.finish(&outs).unwrap();
        let mut args = ins.clone();
        args.extend(ct.iter().cloned());
        let got = run(&f, &args);
        let rhs: f64 = got.iter().zip(&ins[linear.clone()]).map(|(a, b)| common::dot(a, b)).sum();
        assert!((lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()), "transpose in {name}: {lhs} vs {rhs}");
    }
}

fn mixed_inputs(rng: &mut Rng, n: i32) -> Vec<Tensor> {
    vec![rng.tensor(&t64(&[3]), 0.5, 1.5), Tensor::scalar(n), rng.tensor(&t64(&[3]), -1.0, 1.0), f64s(0.1)]
}

#[test]
fn mixed_loop_check_grads() {
    let f = mixed_loop();
    let mut rng = Rng(7);
    for n in [0, 1, 4, 100] {
        let ins = mixed_inputs(&mut rng, n);
        let trips = run(&f, &ins)[0].to_vec::<i32>().unwrap()[0];
        assert!(trips <= n.max(0), "trips {trips} for n {n}");
        check_grads(&format!("mixed n={n}"), &f, &ins, &mut rng, 1e-6, 1e-6);
    }
    // The y < 3 exit is taken before n = 100 trips.
    let ins = mixed_inputs(&mut rng, 100);
    let trips = run(&f, &ins)[0].to_vec::<i32>().unwrap()[0];
    assert!((2..100).contains(&trips), "trips {trips}");
}

#[test]
fn mixed_loop_second_order_check_grads() {
    // grad of a scalar of the loop, then check_grads of that gradient
    // function: its JVP runs while_hvp, its VJP transposes it.
    let f = mixed_loop();
    let scalar = func("mixed_scalar", &f.param_types(), |b, p| vec![b.inline(&f, p).unwrap()[2]]);
    let g = grad(&scalar, &Wrt::All).unwrap();
    let mut rng = Rng(11);
    for n in [3, 100] {
        let ins = mixed_inputs(&mut rng, n);
        check_grads(&format!("grad mixed n={n}"), &g, &ins, &mut rng, 1e-6, 1e-6);
    }
    // Forward over forward too.
    let j = jvp_func(&scalar).unwrap();
    let ins = mixed_inputs(&mut rng, 5);
    let mut jin = ins.clone();
    jin.push(rng.tensor(&t64(&[3]), -1.0, 1.0));
    jin.push(rng.tensor(&t64(&[3]), -1.0, 1.0));
    jin.push(f64s(0.3));
    check_grads("jvp mixed", &j, &jin, &mut rng, 1e-6, 1e-6);
}

/// `fori_dynamic` body: x <- x * c + sin(x) * i (i converted to f64).
fn fori_body() -> Func {
    func("fori_body", &[t64(&[2]), si32(), t64(&[2])], |b, p| {
        let xc = b.mul(p[2], p[0]).unwrap();
        let s = b.sin(p[2]).unwrap();
        let fi = b.convert(p[1], DType::F64).unwrap();
        let fi = b.broadcast_in_dim(fi, &[2], &[]).unwrap();
        let t = b.mul(s, fi).unwrap();
        vec![b.add(xc, t).unwrap()]
    })
}

fn fori_loss(remat: Remat) -> Func {
    let body = fori_body();
    func("fori", &[t64(&[2]), si32(), t64(&[2])], |b, p| {
        let x = b.fori_dynamic(p[1], &body, &[p[0]], &[p[2]], remat).unwrap()[0];
        let sq = b.mul(x, x).unwrap();
        vec![b.reduce_sum(sq, &[0]).unwrap()]
    })
}

/// The same computation unrolled for a fixed `n`.
fn fori_unrolled(n: i32) -> Func {
    func("unrolled", &[t64(&[2]), t64(&[2])], |b, p| {
        let mut x = p[1];
        for i in 0..n {
            let xc = b.mul(x, p[0]).unwrap();
            let s = b.sin(x).unwrap();
            let fi = b.full(i as f64, &t64(&[2])).unwrap();
            let t = b.mul(s, fi).unwrap();
            x = b.add(xc, t).unwrap();
        }
        let sq = b.mul(x, x).unwrap();
        vec![b.reduce_sum(sq, &[0]).unwrap()]
    })
}

#[test]
fn fori_dynamic_matches_unrolled() {
    let f = value_and_grad(&fori_loss(Remat::Off), &Wrt::Positions(vec![0, 2])).unwrap();
    let c = Tensor::from_vec(vec![2], vec![0.9, 1.1]).unwrap();
    let x = Tensor::from_vec(vec![2], vec![0.3, -0.7]).unwrap();
    for n in [0, 1, 5, 12] {
        let got = run(&f, &[c.clone(), Tensor::scalar(n), x.clone()]);
        let want = run(&value_and_grad(&fori_unrolled(n), &Wrt::All).unwrap(), &[c.clone(), x.clone()]);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
                assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "n {n} output {k}: {a} vs {b}");
            }
        }
    }
    // A negative trip count runs no trip.
    let got = run(&f, &[c.clone(), Tensor::scalar(-3), x.clone()]);
    assert_eq!(val(&got[0]), 0.3 * 0.3 + 0.7 * 0.7);
}

#[test]
fn vmap_with_per_example_trip_counts() {
    let f = newton(Remat::Off);
    let a = [0.5, 2.0, 9.0, 1e4, 1e-3];
    let trips: Vec<usize> = a.iter().map(|&a| newton_trips(a)).collect();
    eprintln!("per-example trips {trips:?}");
    let vf = vmap_func(&f, &[Some(0)], &[Some(0)], a.len()).unwrap();
    let out = run(&vf, &[Tensor::from_vec(vec![a.len()], a.to_vec()).unwrap()])[0].to_f64_vec();
    for (i, &ai) in a.iter().enumerate() {
        assert_eq!(out[i], val(&run(&f, &[f64s(ai)])[0]), "example {i}");
    }
    // vmap(grad(f)) and grad(sum(vmap(f))) equal per-example gradients.
    let g = grad(&f, &Wrt::All).unwrap();
    let vg = vmap_func(&g, &[Some(0)], &[Some(0)], a.len()).unwrap();
    let got = run(&vg, &[Tensor::from_vec(vec![a.len()], a.to_vec()).unwrap()])[0].to_f64_vec();
    let sum_vf = func("sum_vf", &[t64(&[a.len()])], |b, p| {
        let y = b.inline(&vf, p).unwrap()[0];
        vec![b.reduce_sum(y, &[0]).unwrap()]
    });
    let gv = grad(&sum_vf, &Wrt::All).unwrap();
    let got2 = run(&gv, &[Tensor::from_vec(vec![a.len()], a.to_vec()).unwrap()])[0].to_f64_vec();
    for (i, &ai) in a.iter().enumerate() {
        let want = val(&run(&g, &[f64s(ai)])[0]);
        assert_eq!(got[i], want, "vmap(grad) example {i}");
        assert!((got2[i] - want).abs() <= 1e-14 * want.abs(), "grad(vmap) example {i}: {} vs {want}", got2[i]);
    }
    // vmap(grad(grad(f))).
    let gg = grad(&g, &Wrt::All).unwrap();
    let vgg = vmap_func(&gg, &[Some(0)], &[Some(0)], a.len()).unwrap();
    let got = run(&vgg, &[Tensor::from_vec(vec![a.len()], a.to_vec()).unwrap()])[0].to_f64_vec();
    for (i, &ai) in a.iter().enumerate() {
        let want = val(&run(&gg, &[f64s(ai)])[0]);
        assert!((got[i] - want).abs() <= 1e-12 * want.abs().max(1.0), "vmap(grad(grad)) example {i}");
    }
}

#[test]
fn vmap_mixed_loop_batched_and_shared_operands() {
    // w shared, n batched (per-example trip caps), x batched at axis 1, y shared.
    let f = mixed_loop();
    let mut rng = Rng(3);
    let ns = [0, 2, 5, 100];
    let w = rng.tensor(&t64(&[3]), 0.5, 1.5);
    let xs = rng.tensor(&t64(&[3, ns.len()]), -1.0, 1.0);
    let y = f64s(0.2);
    let nt = Tensor::from_vec(vec![ns.len()], ns.to_vec()).unwrap();
    let vf = vmap_func(&f, &[None, Some(0), Some(1), None], &[Some(0), Some(0), Some(0)], ns.len()).unwrap();
    let out = run(&vf, &[w.clone(), nt.clone(), xs.clone(), y.clone()]);
    let sc = func("mixed_scalar", &f.param_types(), |b, p| vec![b.inline(&f, p).unwrap()[2]]);
    let g = grad(&sc, &Wrt::Positions(vec![0, 2, 3])).unwrap();
    let vg = vmap_func(&g, &[None, Some(0), Some(1), None], &[Some(0), Some(0), Some(0)], ns.len()).unwrap();
    let gout = run(&vg, &[w.clone(), nt, xs.clone(), y.clone()]);
    let xv = xs.to_f64_vec();
    for (e, &n) in ns.iter().enumerate() {
        let xe = Tensor::from_fn(&t64(&[3]), |i| xv[i * ns.len() + e]);
        let ins = [w.clone(), Tensor::scalar(n), xe, y.clone()];
        let one = run(&f, &ins);
        assert_eq!(out[0].to_vec::<i32>().unwrap()[e], one[0].to_vec::<i32>().unwrap()[0], "trips of example {e}");
        assert_eq!(&out[1].to_f64_vec()[3 * e..3 * e + 3], &one[1].to_f64_vec()[..], "x of example {e}");
        assert_eq!(out[2].to_f64_vec()[e], val(&one[2]), "m of example {e}");
        let ge = run(&g, &ins);
        for (k, gk) in ge.iter().enumerate() {
            let n = gk.numel();
            let got = &gout[k].to_f64_vec()[n * e..n * e + n];
            for (a, b) in got.iter().zip(gk.to_f64_vec()) {
                assert!((a - b).abs() <= 1e-13 * (1.0 + b.abs()), "grad {k} of example {e}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn remat_checkpointing_lowers_peak_bytes_with_identical_gradients() {
    // 10,000 trips of a 512-element carry: storing every carry holds ~40 MB.
    const N: i32 = 10_000;
    let ty = t64(&[512]);
    let body = func("decay", &[ty.clone(), si32(), ty.clone()], |b, p| {
        let x = b.mul(p[2], p[0]).unwrap();
        vec![b.sin(x).unwrap()]
    });
    let loss = |remat| {
        func("long", &[ty.clone(), si32(), ty.clone()], |b, p| {
            let x = b.fori_dynamic(p[1], &body, &[p[0]], &[p[2]], remat).unwrap()[0];
            vec![b.reduce_sum(x, &[0]).unwrap()]
        })
    };
    let mut rng = Rng(5);
    let c = rng.tensor(&ty, 0.9, 1.0);
    let x = rng.tensor(&ty, 0.1, 1.0);
    let n = Tensor::scalar(N);
    let refs = [&c, &n, &x];
    let mut results = Vec::new();
    for remat in [Remat::Off, Remat::Sqrt, Remat::Every(100)] {
        let exe = Executable::new(value_and_grad(&loss(remat), &Wrt::Positions(vec![0, 2])).unwrap()).unwrap();
        let (outs, stats) = exe.run_with_stats(&refs).unwrap();
        eprintln!("{remat:?}: peak {} bytes", stats.peak_bytes);
        results.push((outs, stats.peak_bytes));
    }
    let (plain, plain_peak) = &results[0];
    assert!(*plain_peak >= N as usize * 512 * 8, "the stack must count: {plain_peak}");
    for (outs, peak) in &results[1..] {
        assert_eq!(outs, plain, "checkpointed gradients must be identical");
        assert!(peak * 10 <= *plain_peak, "peak {peak} vs {plain_peak}");
    }
}

#[test]
fn graph_size_does_not_depend_on_trip_count() {
    let f = fori_loss(Remat::Off);
    let g = grad(&f, &Wrt::Positions(vec![0, 2])).unwrap();
    let gg = vjp_func(&g, &Wrt::Positions(vec![0, 2])).unwrap();
    assert_eq!(g.count_prim("while"), 1, "{g}");
    assert_eq!(g.count_prim("while_vjp"), 1, "{g}");
    assert!(gg.count_prim("while_hvp") >= 1, "{gg}");
    let c = Tensor::from_vec(vec![2], vec![0.5, 0.4]).unwrap();
    let x = Tensor::from_vec(vec![2], vec![0.3, -0.7]).unwrap();
    // The same graph serves every trip count.
    let exe = Executable::new(g).unwrap();
    for n in [1, 4, 9] {
        let out = exe.run(&[&c, &Tensor::scalar(n), &x]).unwrap();
        let want = run(&grad(&fori_unrolled(n), &Wrt::All).unwrap(), &[c.clone(), x.clone()]);
        for (k, (a, b)) in out.iter().zip(&want).enumerate() {
            for (a, b) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "n {n} grad {k}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn nested_while_loops_differentiate() {
    // Outer loop (3 trips) whose body runs Newton's method for sqrt(x + a)
    // and sets x <- sqrt(x + a) * 0.9: checks the rules on loops inside bodies.
    let inner = newton(Remat::Off);
    let x2 = [s64(), si32(), s64()]; // consts (a), carry (i, x)
    let cond = func("outer_cond", &x2, |b, p| {
        let three = b.scalar(3.0, DType::I32).unwrap();
        vec![b.lt(p[1], three).unwrap()]
    });
    let body = func("outer_body", &x2, |b, p| {
        let one = b.scalar(1.0, DType::I32).unwrap();
        let i = b.add(p[1], one).unwrap();
        let s = b.add(p[2], p[0]).unwrap();
        let r = b.inline(&inner, &[s]).unwrap()[0];
        let k = b.scalar(0.9, DType::F64).unwrap();
        vec![i, b.mul(r, k).unwrap()]
    });
    let f = func("nested", &[s64(), s64()], |b, p| {
        let zero = b.scalar(0.0, DType::I32).unwrap();
        vec![b.while_loop(Arc::new(cond), Arc::new(body), &[p[0]], &[zero, p[1]]).unwrap()[1]]
    });
    let (a, x) = (2.0f64, 1.5f64);
    let mut r = x;
    for _ in 0..3 {
        r = (r + a).sqrt() * 0.9;
    }
    let got = val(&run(&f, &[f64s(a), f64s(x)])[0]);
    assert!((got - r).abs() <= 1e-12, "{got} vs {r}");
    let mut rng = Rng(9);
    check_grads("nested", &f, &[f64s(a), f64s(x)], &mut rng, 1e-6, 1e-7);
    let g = grad(&f, &Wrt::All).unwrap();
    check_grads("grad nested", &g, &[f64s(a), f64s(x)], &mut rng, 1e-5, 1e-6);
}

#[test]
fn malformed_loops_are_errors() {
    let x2 = [s64(), s64()];
    let body = Arc::new(func("b", &x2, |b, p| vec![b.add(p[0], p[1]).unwrap()]));
    let bad_cond = Arc::new(func("c", &x2, |_, p| vec![p[1]]));
    let mut b = Builder::new("f");
    let a = b.param(s64());
    let err = b.while_loop(bad_cond, body.clone(), &[a], &[a]).unwrap_err().to_string();
    assert!(err.contains("bool scalar"), "{err}");
    let cond = Arc::new(func("c", &x2, |b, p| vec![b.lt(p[0], p[1]).unwrap()]));
    let i = b.param(si32());
    let err = b.while_loop(cond.clone(), body.clone(), &[a], &[i]).unwrap_err().to_string();
    assert!(err.contains("expected operands"), "{err}");
    let err = b.fori_dynamic(a, &body, &[], &[a], Remat::Off).unwrap_err().to_string();
    assert!(err.contains("i32[]"), "{err}");
    let err = b.while_loop_remat(cond, body, &[a], &[a], Remat::Every(0)).unwrap_err().to_string();
    assert!(err.contains("k >= 1"), "{err}");
}

#[test]
fn vmap_of_vmap_and_f32_loops() {
    // Nested vmap over a 2 x 3 grid of `a` (six different trip counts).
    let f = newton(Remat::Off);
    let a = [0.5, 2.0, 9.0, 1e4, 1e-3, 7.0];
    let v1 = vmap_func(&f, &[Some(0)], &[Some(0)], 3).unwrap();
    let v2 = vmap_func(&v1, &[Some(1)], &[Some(0)], 2).unwrap();
    let grid = Tensor::from_fn(&t64(&[3, 2]), |i| a[(i % 2) * 3 + i / 2]);
    let out = run(&v2, &[grid])[0].to_f64_vec();
    for (i, &ai) in a.iter().enumerate() {
        assert_eq!(out[i], val(&run(&f, &[f64s(ai)])[0]), "example {i}");
    }
    // The same loop in f32: halving until below 1, counting trips.
    let t32 = TensorType::new(DType::F32, vec![]);
    let x = [t32.clone(), si32()];
    let cond = func("c32", &x, |b, p| {
        let one = b.scalar(1.0, DType::F32).unwrap();
        vec![b.ge(p[0], one).unwrap()]
    });
    let body = func("b32", &x, |b, p| {
        let h = b.scalar(0.5, DType::F32).unwrap();
        let one = b.scalar(1.0, DType::I32).unwrap();
        vec![b.mul(p[0], h).unwrap(), b.add(p[1], one).unwrap()]
    });
    let f = func("halve", &[t32.clone()], |b, p| {
        let zero = b.scalar(0.0, DType::I32).unwrap();
        b.while_loop(Arc::new(cond), Arc::new(body), &[], &[p[0], zero]).unwrap()
    });
    let g = grad(&func("halve_x", &[t32], |b, p| vec![b.inline(&f, p).unwrap()[0]]), &Wrt::All).unwrap();
    for (x0, trips) in [(0.5f32, 0), (1.0, 1), (100.0, 7)] {
        let out = run(&f, &[Tensor::scalar(x0)]);
        assert_eq!(out[1].to_vec::<i32>().unwrap()[0], trips, "x0 {x0}");
        assert_eq!(out[0].to_vec::<f32>().unwrap()[0], x0 / 2f32.powi(trips));
        assert_eq!(run(&g, &[Tensor::scalar(x0)])[0].to_vec::<f32>().unwrap()[0], 0.5f32.powi(trips));
    }
}

/// Forward mode through a loop makes a `while` for the primal results and a
/// `while_jvp` for the tangents; the executor runs them as one loop (the
/// augmented loop computes the primal carries anyway), with the same bits.
#[test]
fn forward_mode_runs_the_primal_loop_once() {
    use graft_core::ops::Op;
    let count = |g: &Func, name: &str| g.eqns.iter().filter(|e| e.prim.name() == name).count();
    let f = newton(Remat::Off);
    let j = jvp_func(&f).unwrap();
    assert_eq!((count(&j, "while"), count(&j, "while_jvp")), (1, 1), "{j}");
    let exe = Executable::new(j.clone()).unwrap();
    let planned = exe.func();
    assert_eq!((count(planned, "while"), count(planned, "while_jvp")), (0, 1), "{planned}");
    assert!(planned.to_string().contains("with_primal"), "{planned}");
    for a in [0.5, 2.0, 9.0, 1e4] {
        let out = exe.run(&[&f64s(a), &f64s(1.0)]).unwrap();
        assert_eq!(val(&out[0]).to_bits(), val(&run(&f, &[f64s(a)])[0]).to_bits(), "sqrt({a})");
        let want = 1.0 / (2.0 * a.sqrt());
        assert!((val(&out[1]) - want).abs() <= 1e-10 * want.max(1.0), "d/da sqrt({a}): {}", val(&out[1]));
    }
    // The merged form is the executor's own: no transform takes it.
    let merged = planned.eqns.iter().find(|e| e.prim.name() == "while_jvp").unwrap();
    let Prim::WhileJvp(wj) = &merged.prim else { unreachable!("found by name") };
    assert!(wj.primal);
}
