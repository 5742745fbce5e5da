//! scan and fori: forward values against hand-unrolled graphs (including
//! length 0/1 and reverse), derivatives against finite differences and the
//! JVP/VJP dot-product test, second derivatives through scan, an LSTM and an
//! RK4 integrator, vmap of scans, checkpointed scans (same gradients, >= 10x
//! lower peak bytes) and a graph size independent of the trip count.

use crate::common;
use crate::loops_util;

use common::{check_grads, run, Rng};
use graft_core::ad::{grad, value_and_grad, Wrt};
use graft_core::batch::vmap_func;
use graft_core::composite::math::sigmoid;
use graft_core::ops::remat::Remat;
use graft_core::ops::scan::ScanOpts;
use graft_core::{Builder, DType, Executable, Func, IrError, Op, Tensor, TensorType, Value};
use loops_util::{assert_all_close, func, stack, t64, take};
use std::sync::Arc;

/// One step: h' = tanh(h*w + x), s' = s + sum(h'^2), y1 = h'*x, y2 = sum(h').
fn cell(b: &mut Builder, w: Value, h: Value, s: Value, x: Value) -> Result<Vec<Value>, IrError> {
    let hw = b.mul(h, w)?;
    let z = b.add(hw, x)?;
    let h1 = b.tanh(z)?;
    let sq = b.mul(h1, h1)?;
    let r = b.reduce_sum(sq, &[0])?;
    let s1 = b.add(s, r)?;
    let y1 = b.mul(h1, x)?;
    let y2 = b.reduce_sum(h1, &[0])?;
    Ok(vec![h1, s1, y1, y2])
}

fn cell_func() -> Arc<Func> {
    Arc::new(func("cell", &[t64(&[3]), t64(&[3]), t64(&[]), t64(&[3])], |b, p| cell(b, p[0], p[1], p[2], p[3])))
}

fn scan_types(n: usize) -> Vec<TensorType> {
    vec![t64(&[3]), t64(&[3]), t64(&[]), t64(&[n, 3])]
}

/// (w, h0, s0, xs[n,3]) -> (h, s, ys1[n,3], ys2[n]) as one scan.
fn scan_func(n: usize, reverse: bool, ck: Remat) -> Func {
    let body = cell_func();
    func("scanned", &scan_types(n), |b, p| {
        b.scan(body, &p[..1], &p[1..3], &p[3..], ScanOpts::new(n).reverse(reverse).remat(ck))
    })
}

/// The same loop unrolled into the graph.
fn unrolled_func(n: usize, reverse: bool) -> Func {
    func("unrolled", &scan_types(n), |b, p| {
        let (w, mut h, mut s, xs) = (p[0], p[1], p[2], p[3]);
        let mut y1s = vec![None; n];
        let mut y2s = vec![None; n];
        let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
        for t in order {
            let xt = b.slice(xs, &[t, 0], &[t + 1, 3], &[1, 1])?;
            let xt = b.reshape(xt, &[3])?;
            let o = cell(b, w, h, s, xt)?;
            h = o[0];
            s = o[1];
            y1s[t] = Some(b.reshape(o[2], &[1, 3])?);
            y2s[t] = Some(b.reshape(o[3], &[1])?);
        }
        let y1: Vec<Value> = y1s.into_iter().flatten().collect();
        let y2: Vec<Value> = y2s.into_iter().flatten().collect();
        let y1 = b.concatenate(&y1, 0)?;
        let y2 = b.concatenate(&y2, 0)?;
        Ok(vec![h, s, y1, y2])
    })
}

fn scan_inputs(n: usize, rng: &mut Rng) -> Vec<Tensor> {
    scan_types(n).iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect()
}

#[test]
fn forward_matches_unrolled_graph() {
    let mut rng = Rng(1);
    for n in [1, 2, 7] {
        for reverse in [false, true] {
            let ins = scan_inputs(n, &mut rng);
            let got = run(&scan_func(n, reverse, Remat::Off), &ins);
            let want = run(&unrolled_func(n, reverse), &ins);
            assert_all_close(&format!("n={n} reverse={reverse}"), &got, &want, 1e-15);
        }
    }
}

#[test]
fn reverse_scan_walks_from_the_end_and_writes_in_place() {
    // Carry = running sum, y = carry after the step: a reverse cumulative sum.
    let body = Arc::new(func("acc", &[t64(&[]), t64(&[])], |b, p| {
        let s = b.add(p[0], p[1])?;
        Ok(vec![s, s])
    }));
    let f = func("rcumsum", &[t64(&[]), t64(&[4])], |b, p| {
        b.scan(body, &[], &p[..1], &p[1..], ScanOpts::new(4).reverse(true))
    });
    let out = run(&f, &[Tensor::scalar(0.0f64), Tensor::vec1(&[1.0f64, 2.0, 3.0, 4.0])]);
    assert_eq!(out[0].to_f64_vec(), vec![10.0]);
    assert_eq!(out[1].to_f64_vec(), vec![10.0, 9.0, 7.0, 4.0]);
}

#[test]
fn length_zero_passes_the_carry_through() {
    let mut rng = Rng(2);
    let ins = scan_inputs(0, &mut rng);
    let out = run(&scan_func(0, false, Remat::Off), &ins);
    assert_eq!(out[0], ins[1]);
    assert_eq!(out[1], ins[2]);
    assert_eq!(out[2].shape(), &[0, 3]);
    assert_eq!(out[3].shape(), &[0]);
    // Its gradient: identity on the carry, zero for w.
    let loss = loss_of(&scan_func(0, false, Remat::Off));
    let g = run(&grad(&loss, &Wrt::All).unwrap(), &ins);
    assert_eq!(g[0].to_f64_vec(), vec![0.0; 3]);
    assert_eq!(g[2].to_f64_vec(), vec![1.0]);
}

#[test]
fn scan_shape_errors_are_type_errors() {
    let body = cell_func();
    let mut b = Builder::new("bad");
    let w = b.param(t64(&[3]));
    let h = b.param(t64(&[3]));
    let s = b.param(t64(&[]));
    let xs = b.param(t64(&[5, 3]));
    let err = b.scan(body.clone(), &[w], &[h, s], &[xs], ScanOpts::new(4)).unwrap_err();
    assert!(err.to_string().contains("stacked 4 times"), "{err}");
    let err = b.scan(body, &[w], &[s, h], &[xs], ScanOpts::new(5)).unwrap_err();
    assert!(err.to_string().contains("expected operand 1"), "{err}");
}

#[test]
fn scan_derivatives_match_finite_differences() {
    let mut rng = Rng(3);
    for (n, reverse, ck) in [
        (6, false, Remat::Off),
        (6, true, Remat::Off),
        (7, false, Remat::Every(2)),
        (7, true, Remat::Every(3)),
        (9, false, Remat::Sqrt),
    ] {
        let ins = scan_inputs(n, &mut rng);
        check_grads(
            &format!("scan n={n} rev={reverse} ck={ck}"),
            &scan_func(n, reverse, ck),
            &ins,
            &mut rng,
            1e-6,
            1e-6,
        );
    }
}

/// sum(ys1^2) + sum(ys2) + s + sum(h): a scalar of every output.
fn loss_of(f: &Func) -> Func {
    let f = Arc::new(f.clone());
    func("loss", &f.param_types(), |b, p| {
        let o = b.call(f, p)?;
        let sq = b.mul(o[2], o[2])?;
        let a = b.reduce_sum(sq, &[0, 1])?;
        let c = b.reduce_sum(o[3], &[0])?;
        let d = b.reduce_sum(o[0], &[0])?;
        let ac = b.add(a, c)?;
        let acs = b.add(ac, o[1])?;
        Ok(vec![b.add(acs, d)?])
    })
}

#[test]
fn gradients_match_unrolled_and_checkpointed() {
    let mut rng = Rng(4);
    for reverse in [false, true] {
        let n = 11;
        let ins = scan_inputs(n, &mut rng);
        let want = run(&value_and_grad(&loss_of(&unrolled_func(n, reverse)), &Wrt::All).unwrap(), &ins);
        for ck in [Remat::Off, Remat::Every(3), Remat::Sqrt, Remat::Every(11)] {
            let got = run(&value_and_grad(&loss_of(&scan_func(n, reverse, ck)), &Wrt::All).unwrap(), &ins);
            assert_all_close(&format!("reverse={reverse} ck={ck}"), &got, &want, 1e-12);
        }
    }
}

/// (a, h0, xs) -> sum(ys^2) + sum(h_n) for h' = tanh(a*h + x), ys = h'.
fn scalar_param_loss(n: usize, unrolled: bool) -> Func {
    let step = |b: &mut Builder, a: Value, h: Value, x: Value| -> Result<Value, IrError> {
        let ab = b.broadcast_in_dim(a, &[3], &[])?;
        let ah = b.mul(ab, h)?;
        let z = b.add(ah, x)?;
        b.tanh(z)
    };
    let body = Arc::new(func("step", &[t64(&[]), t64(&[3]), t64(&[3])], |b, p| {
        let h = step(b, p[0], p[1], p[2])?;
        Ok(vec![h, h])
    }));
    func("f", &[t64(&[]), t64(&[3]), t64(&[n, 3])], |b, p| {
        let (h, ys) = if unrolled {
            let mut h = p[1];
            let mut ys = Vec::new();
            for t in 0..n {
                let xt = b.slice(p[2], &[t, 0], &[t + 1, 3], &[1, 1])?;
                let xt = b.reshape(xt, &[3])?;
                h = step(b, p[0], h, xt)?;
                ys.push(b.reshape(h, &[1, 3])?);
            }
            (h, b.concatenate(&ys, 0)?)
        } else {
            let o = b.scan(body, &p[..1], &p[1..2], &p[2..], ScanOpts::new(n))?;
            (o[0], o[1])
        };
        let sq = b.mul(ys, ys)?;
        let a = b.reduce_sum(sq, &[0, 1])?;
        let c = b.reduce_sum(h, &[0])?;
        Ok(vec![b.add(a, c)?])
    })
}

#[test]
fn second_derivative_through_scan() {
    let n = 8;
    let mut rng = Rng(5);
    let h0 = rng.tensor(&t64(&[3]), -1.0, 1.0);
    let xs = rng.tensor(&t64(&[n, 3]), -1.0, 1.0);
    let a = 0.7;
    let f = scalar_param_loss(n, false);
    let g = grad(&f, &Wrt::Positions(vec![0])).unwrap();
    let gg = grad(&g, &Wrt::Positions(vec![0])).unwrap();
    let at = |a: f64, func: &Func| run(func, &[Tensor::scalar(a), h0.clone(), xs.clone()])[0].to_f64_vec()[0];
    let eps = 1e-5;
    let fd = (at(a + eps, &g) - at(a - eps, &g)) / (2.0 * eps);
    let got = at(a, &gg);
    assert!((got - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "d2f/da2 = {got} vs fd {fd}");
    // Same as the unrolled graph's second derivative.
    let fu = scalar_param_loss(n, true);
    let ggu = grad(&grad(&fu, &Wrt::Positions(vec![0])).unwrap(), &Wrt::Positions(vec![0])).unwrap();
    let want = at(a, &ggu);
    assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "{got} vs unrolled {want}");
    // Forward-over-reverse and reverse-over-reverse of the full gradient.
    let gall = grad(&f, &Wrt::All).unwrap();
    check_grads("grad(f) through scan", &gall, &[Tensor::scalar(a), h0, xs], &mut rng, 1e-6, 1e-6);
}

/// Reverse mode through a scan runs the loop forward once: `grad` (whose
/// primal outputs are dropped) holds one forward scan (the residual scan,
/// which also computes the carries) and one reverse scan, and gives the
/// unrolled graph's gradient.
#[test]
fn gradient_graph_runs_the_primal_loop_once() {
    let n = 6;
    let g = grad(&scalar_param_loss(n, false), &Wrt::All).unwrap();
    let scans: Vec<String> = g.eqns.iter().filter(|q| q.prim.name() == "scan").map(|q| q.prim.params()).collect();
    assert_eq!(scans.len(), 2, "{scans:?}");
    assert_eq!(scans.iter().filter(|p| p.contains("reverse=false")).count(), 1, "{scans:?}");
    let mut rng = Rng(9);
    let ins = vec![Tensor::scalar(0.3), rng.tensor(&t64(&[3]), -1.0, 1.0), rng.tensor(&t64(&[n, 3]), -1.0, 1.0)];
    let want = run(&grad(&scalar_param_loss(n, true), &Wrt::All).unwrap(), &ins);
    assert_all_close("grad", &run(&g, &ins), &want, 1e-12);
}

// ---- LSTM -------------------------------------------------------------

const H: usize = 4;
const I: usize = 3;
const T: usize = 50;

/// One LSTM step on vectors: returns (h', c').
fn lstm_step(b: &mut Builder, p: &[Value], h: Value, c: Value, x: Value) -> Result<(Value, Value), IrError> {
    let (wx, wh, bias) = (p[0], p[1], p[2]);
    let gx = b.dot_general(x, wx, &[0], &[0], &[], &[])?;
    let gh = b.dot_general(h, wh, &[0], &[0], &[], &[])?;
    let g0 = b.add(gx, gh)?;
    let g = b.add(g0, bias)?;
    let mut part = |k: usize| b.slice(g, &[k * H], &[(k + 1) * H], &[1]);
    let (gi, gf, gg, go) = (part(0)?, part(1)?, part(2)?, part(3)?);
    let i = sigmoid(b, gi)?;
    let f = sigmoid(b, gf)?;
    let gt = b.tanh(gg)?;
    let o = sigmoid(b, go)?;
    let fc = b.mul(f, c)?;
    let ig = b.mul(i, gt)?;
    let c1 = b.add(fc, ig)?;
    let tc = b.tanh(c1)?;
    Ok((b.mul(o, tc)?, c1))
}

fn lstm_types() -> Vec<TensorType> {
    vec![t64(&[I, 4 * H]), t64(&[H, 4 * H]), t64(&[4 * H]), t64(&[H]), t64(&[H]), t64(&[T, I])]
}

/// (wx, wh, bias, h0, c0, xs) -> (h_T, c_T, ys[T,H], loss).
fn lstm(unrolled: bool) -> Func {
    let body = Arc::new(func(
        "lstm_cell",
        &[t64(&[I, 4 * H]), t64(&[H, 4 * H]), t64(&[4 * H]), t64(&[H]), t64(&[H]), t64(&[I])],
        |b, p| {
            let (h, c) = lstm_step(b, &p[..3], p[3], p[4], p[5])?;
            Ok(vec![h, c, h])
        },
    ));
    func("lstm", &lstm_types(), |b, p| {
        let (h, c, ys) = if unrolled {
            let (mut h, mut c) = (p[3], p[4]);
            let mut ys = Vec::new();
            for t in 0..T {
                let xt = b.slice(p[5], &[t, 0], &[t + 1, I], &[1, 1])?;
                let xt = b.reshape(xt, &[I])?;
                (h, c) = lstm_step(b, &p[..3], h, c, xt)?;
                ys.push(b.reshape(h, &[1, H])?);
            }
            (h, c, b.concatenate(&ys, 0)?)
        } else {
            let o = b.scan(body, &p[..3], &p[3..5], &p[5..], ScanOpts::new(T))?;
            (o[0], o[1], o[2])
        };
        let sq = b.mul(ys, ys)?;
        let l1 = b.reduce_sum(sq, &[0, 1])?;
        let l2 = b.reduce_sum(c, &[0])?;
        let loss = b.add(l1, l2)?;
        Ok(vec![h, c, ys, loss])
    })
}

fn only_loss(f: &Func) -> Func {
    let mut g = f.clone();
    g.outputs = vec![*g.outputs.last().unwrap()];
    g
}

#[test]
fn lstm_scan_matches_unrolled_outputs_and_gradients() {
    let mut rng = Rng(6);
    let ins: Vec<Tensor> = lstm_types().iter().map(|t| rng.tensor(t, -0.8, 0.8)).collect();
    let (s, u) = (lstm(false), lstm(true));
    assert_all_close("lstm outputs", &run(&s, &ins), &run(&u, &ins), 1e-12);
    let gs = run(&value_and_grad(&only_loss(&s), &Wrt::All).unwrap(), &ins);
    let gu = run(&value_and_grad(&only_loss(&u), &Wrt::All).unwrap(), &ins);
    assert_eq!(gs.len(), 7);
    assert_all_close("lstm value_and_grad", &gs, &gu, 1e-12);
    assert!(gs[1].to_f64_vec().iter().any(|&v| v.abs() > 1e-3), "gradients are not trivially zero");
}

// ---- RK4 with fori ----------------------------------------------------

const DT: f64 = 0.01;
const STEPS: usize = 100;

/// Lotka-Volterra with forcing: x' = a x - b x z + 0.1 sin(t), z' = d x z - g z.
fn lv(b: &mut Builder, p: &[Value], t: Value, x: Value, z: Value) -> Result<(Value, Value), IrError> {
    let (a, bb, d, g) = (p[0], p[1], p[2], p[3]);
    let xz = b.mul(x, z)?;
    let ax = b.mul(a, x)?;
    let bxz = b.mul(bb, xz)?;
    let st = b.sin(t)?;
    let c = b.scalar(0.1, DType::F64)?;
    let f = b.mul(c, st)?;
    let dx0 = b.sub(ax, bxz)?;
    let dx = b.add(dx0, f)?;
    let dxz = b.mul(d, xz)?;
    let gz = b.mul(g, z)?;
    Ok((dx, b.sub(dxz, gz)?))
}

/// y + s * k for scalars.
fn axpy(b: &mut Builder, y: Value, s: f64, k: Value) -> Result<Value, IrError> {
    let c = b.scalar(s, DType::F64)?;
    let sk = b.mul(c, k)?;
    b.add(y, sk)
}

fn rk4_body() -> Func {
    let s = t64(&[]);
    let i32s = TensorType::scalar(DType::I32);
    func("rk4", &[s.clone(), s.clone(), s.clone(), s.clone(), i32s, s.clone(), s], |b, p| {
        let (c, i, x, z) = (&p[..4], p[4], p[5], p[6]);
        let fi = b.convert(i, DType::F64)?;
        let dt = b.scalar(DT, DType::F64)?;
        let t = b.mul(fi, dt)?;
        let th = axpy(b, t, 0.5, dt)?;
        let t1 = b.add(t, dt)?;
        let (k1x, k1z) = lv(b, c, t, x, z)?;
        let (x2, z2) = (axpy(b, x, DT / 2.0, k1x)?, axpy(b, z, DT / 2.0, k1z)?);
        let (k2x, k2z) = lv(b, c, th, x2, z2)?;
        let (x3, z3) = (axpy(b, x, DT / 2.0, k2x)?, axpy(b, z, DT / 2.0, k2z)?);
        let (k3x, k3z) = lv(b, c, th, x3, z3)?;
        let (x4, z4) = (axpy(b, x, DT, k3x)?, axpy(b, z, DT, k3z)?);
        let (k4x, k4z) = lv(b, c, t1, x4, z4)?;
        let mut comb = |y: Value, k1: Value, k2: Value, k3: Value, k4: Value| -> Result<Value, IrError> {
            let s = axpy(b, k1, 2.0, k2)?;
            let s = axpy(b, s, 2.0, k3)?;
            let s = b.add(s, k4)?;
            axpy(b, y, DT / 6.0, s)
        };
        let xn = comb(x, k1x, k2x, k3x, k4x)?;
        let zn = comb(z, k1z, k2z, k3z, k4z)?;
        Ok(vec![xn, zn])
    })
}

/// (x0, z0, a, b, d, g) -> (x_N, z_N).
fn rk4(ck: Remat) -> Func {
    let body = rk4_body();
    func("integrate", &vec![t64(&[]); 6], |b, p| b.fori(STEPS, &body, &p[2..], &p[..2], ck))
}

#[test]
fn rk4_fori_gradients_match_finite_differences() {
    let ins: Vec<Tensor> = [1.2, 0.8, 1.1, 0.4, 0.3, 0.9].iter().map(|&v| Tensor::scalar(v)).collect();
    let mut rng = Rng(7);
    let f = rk4(Remat::Off);
    assert_eq!(f.eqns.len(), 2, "fori is one scan (plus its counter's init)");
    check_grads("rk4", &f, &ins, &mut rng, 1e-6, 1e-7);
    // Gradient of x_N + 2 z_N against central differences, per input.
    let loss = |f: &Func| {
        let f = Arc::new(f.clone());
        func("l", &vec![t64(&[]); 6], |b, p| {
            let o = b.call(f, p)?;
            Ok(vec![axpy(b, o[0], 2.0, o[1])?])
        })
    };
    let l = loss(&f);
    let g = run(&grad(&l, &Wrt::All).unwrap(), &ins);
    let gck = run(&grad(&loss(&rk4(Remat::Sqrt)), &Wrt::All).unwrap(), &ins);
    assert_all_close("rk4 checkpointed grads", &gck, &g, 1e-12);
    let eps = 1e-6;
    for k in 0..6 {
        let shift = |s: f64| {
            let mut v = ins.clone();
            v[k] = Tensor::scalar(ins[k].to_f64_vec()[0] + s);
            run(&l, &v)[0].to_f64_vec()[0]
        };
        let fd = (shift(eps) - shift(-eps)) / (2.0 * eps);
        let gk = g[k].to_f64_vec()[0];
        assert!((gk - fd).abs() <= 1e-7 * (1.0 + fd.abs()), "d/d input {k}: {gk} vs fd {fd}");
        assert!(gk.abs() > 1e-4, "input {k} has a nontrivial gradient");
    }
}

// ---- vmap -------------------------------------------------------------

fn check_vmap(name: &str, f: &Func, in_axes: &[Option<usize>], ins_batched: &[Tensor], size: usize) {
    let vf = vmap_func(f, in_axes, &vec![Some(0); f.outputs.len()], size).unwrap();
    let got = run(&vf, ins_batched);
    for i in 0..size {
        let ex: Vec<Tensor> =
            ins_batched.iter().zip(in_axes).map(|(t, a)| if a.is_some() { take(t, i) } else { t.clone() }).collect();
        let want = run(f, &ex);
        let got_i: Vec<Tensor> = got.iter().map(|t| take(t, i)).collect();
        assert_all_close(&format!("{name} example {i}"), &got_i, &want, 1e-14);
    }
}

fn batched(types: &[TensorType], in_axes: &[Option<usize>], size: usize, rng: &mut Rng) -> Vec<Tensor> {
    types
        .iter()
        .zip(in_axes)
        .map(|(t, a)| {
            if a.is_some() {
                stack(&(0..size).map(|_| rng.tensor(t, -1.0, 1.0)).collect::<Vec<_>>())
            } else {
                rng.tensor(t, -1.0, 1.0)
            }
        })
        .collect()
}

#[test]
fn vmap_of_scan_equals_per_example_runs() {
    let n = 5;
    let size = 3;
    let mut rng = Rng(8);
    for rev in [false, true] {
        let f = scan_func(n, rev, Remat::Off);
        for (what, axes) in [
            ("xs only", [None, None, None, Some(0)]),
            ("init only", [None, Some(0), None, None]),
            ("carry scalar only", [None, None, Some(0), None]),
            ("consts only", [Some(0), None, None, None]),
            ("all", [Some(0), Some(0), Some(0), Some(0)]),
        ] {
            let ins = batched(&scan_types(n), &axes, size, &mut rng);
            check_vmap(&format!("{what} rev={rev}"), &f, &axes, &ins, size);
        }
    }
}

#[test]
fn vmap_of_grad_through_scan() {
    let n = 6;
    let size = 4;
    let mut rng = Rng(9);
    let g = grad(&loss_of(&scan_func(n, false, Remat::Off)), &Wrt::All).unwrap();
    let axes = [None, Some(0), None, Some(0)];
    let ins = batched(&scan_types(n), &axes, size, &mut rng);
    check_vmap("vmap(grad)", &g, &axes, &ins, size);
    // And grad of a vmapped scan (summed), against per-example gradients.
    let gck = grad(&loss_of(&scan_func(n, false, Remat::Every(2))), &Wrt::All).unwrap();
    check_vmap("vmap(grad checkpointed)", &gck, &axes, &ins, size);
}

// ---- checkpointing memory and graph size -------------------------------

const W: usize = 16;

/// (wm[W,W], h0[W]) -> sum(h_n) for h' = tanh(wm h + h/2), n steps.
fn long_loop(n: usize, ck: Remat) -> Func {
    let body = Arc::new(func("long_step", &[t64(&[W, W]), t64(&[W])], |b, p| {
        let wh = b.dot_general(p[0], p[1], &[1], &[0], &[], &[])?;
        let half = b.full(0.5, &t64(&[W]))?;
        let hh = b.mul(p[1], half)?;
        let z = b.add(wh, hh)?;
        Ok(vec![b.tanh(z)?])
    }));
    func("long", &[t64(&[W, W]), t64(&[W])], |b, p| {
        let o = b.scan(body, &p[..1], &p[1..], &[], ScanOpts::new(n).remat(ck))?;
        Ok(vec![b.reduce_sum(o[0], &[0])?])
    })
}

#[test]
fn checkpointed_10000_step_scan_uses_10x_less_memory_with_same_gradients() {
    let n = 10_000;
    let mut rng = Rng(10);
    let s = 1.0 / (W as f64).sqrt();
    let ins = [rng.tensor(&t64(&[W, W]), -s, s), rng.tensor(&t64(&[W]), -1.0, 1.0)];
    let refs: Vec<&Tensor> = ins.iter().collect();
    let plain = Executable::new(value_and_grad(&long_loop(n, Remat::Off), &Wrt::All).unwrap()).unwrap();
    let remat = Executable::new(value_and_grad(&long_loop(n, Remat::Sqrt), &Wrt::All).unwrap()).unwrap();
    let (gp, sp) = plain.run_with_stats(&refs).unwrap();
    let (gr, sr) = remat.run_with_stats(&refs).unwrap();
    assert_all_close("checkpointed vs plain", &gr, &gp, 1e-12);
    assert!(gp[1].to_f64_vec().iter().any(|&v| v.abs() > 1e-3));
    // Residuals of every step: at least 2 * W f64 per step.
    assert!(sp.peak_bytes >= n * 2 * W * 8, "plain peak {} is suspiciously small", sp.peak_bytes);
    assert!(
        sr.peak_bytes * 10 <= sp.peak_bytes,
        "checkpointed peak {} bytes is not 10x below plain {} bytes",
        sr.peak_bytes,
        sp.peak_bytes
    );
}

#[test]
fn graph_size_does_not_depend_on_the_trip_count() {
    let sizes = |n: usize| {
        let f = long_loop(n, Remat::Off);
        let g = value_and_grad(&f, &Wrt::All).unwrap();
        let eqns = |f: &Func| -> usize {
            f.eqns.iter().map(|e| 1 + e.prim.subfuncs().iter().map(|s| s.eqns.len()).sum::<usize>()).sum()
        };
        (f.eqns.len(), eqns(&g))
    };
    assert_eq!(sizes(10), sizes(10_000));
    let f = scan_func(10, false, Remat::Off);
    let g = scan_func(10_000, false, Remat::Off);
    assert_eq!(f.eqns.len(), g.eqns.len());
    assert_eq!(f.eqns.len(), 1);
}

#[test]
fn scan_prints_its_body_once() {
    let text = scan_func(4, true, Remat::Every(2)).to_string();
    assert!(text.contains("func @cell("), "{text}");
    assert!(text.contains("scan[body=@cell, consts=1, carry=2, length=4, reverse=true, remat=every(2)]"), "{text}");
}
