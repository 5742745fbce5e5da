//! Loops compiled whole (`kernel::loops`): a scan whose body is all kernels
//! runs as one native function, bitwise equal to the interpreted loop.
//!
//! Every test runs the same function with compilation off and with
//! synchronous compilation (the options reach the loop bodies), compares
//! every output bit, and checks through `native_loop_runs` whether the loop
//! really ran compiled. Tests skip (saying so) under `GRAFT_SKIP_CC_TESTS=1`.

mod common;

use common::native::{bits, data, opts, skip};
use graft_core::ad::{grad, Wrt};
use graft_core::composite::reduce;
use graft_core::kernel::loops::native_loop_runs;
use graft_core::kernel::CompileMode;
use graft_core::ops::binary::Compare;
use graft_core::ops::scan::{Checkpointing, ScanOpts};
use graft_core::{Builder, DType, Executable, Func, Tensor, TensorType, Value};
use std::sync::Arc;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// Runs `f` interpreted and compiled, checks the bits, and returns how
/// many loops ran compiled in the compiled run.
fn compare(f: &Func, inputs: &[Tensor]) -> usize {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    let exe = Executable::with_options(f.clone(), opts(CompileMode::Sync)).unwrap();
    let before = native_loop_runs();
    let got = exe.run(&refs).unwrap();
    let ran = native_loop_runs() - before;
    assert_eq!(got.len(), want.len());
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.ty(), b.ty(), "output {k}");
        let (x, y) = (bits(a), bits(b));
        if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
            panic!(
                "output {k} differs at {i}: compiled {:?} vs interpreted {:?}",
                a.storage().get_f64(i),
                b.storage().get_f64(i)
            );
        }
    }
    ran
}

fn inputs(f: &Func, seed: u64) -> Vec<Tensor> {
    f.params.iter().enumerate().map(|(k, &p)| data(f.ty(p), seed + k as u64)).collect()
}

/// `rhs(x, y) = x * concat([1], y[0 : n - 1])`, as GradBench's ODE.
fn rhs(b: &mut Builder, x: Value, y: Value, n: usize) -> Value {
    let one = b.scalar(1.0, DType::F64).unwrap();
    let one = b.broadcast_in_dim(one, &[1], &[]).unwrap();
    let head = b.slice(y, &[0], &[n - 1], &[1]).unwrap();
    let shifted = b.concatenate(&[one, head], 0).unwrap();
    b.mul(x, shifted).unwrap()
}

/// `s` RK4 steps of the GradBench ODE (a `fori` over slices, concatenations
/// and elementwise work), returning the final state.
fn ode(n: usize, s: usize) -> Func {
    let mut body = Builder::new("step");
    let x = body.param(t64(&[n]));
    let _i = body.param(TensorType::scalar(DType::I32));
    let y = body.param(t64(&[n]));
    let h = 2.0 / s as f64;
    let k1 = rhs(&mut body, x, y, n);
    let stage = |b: &mut Builder, k: Value, c: f64| {
        let c = b.scalar(c, DType::F64).unwrap();
        let c = b.broadcast_in_dim(c, &[n], &[]).unwrap();
        let d = b.mul(c, k).unwrap();
        let yy = b.add(y, d).unwrap();
        rhs(b, x, yy, n)
    };
    let k2 = stage(&mut body, k1, 0.5 * h);
    let k3 = stage(&mut body, k2, 0.5 * h);
    let k4 = stage(&mut body, k3, h);
    let two = body.scalar(2.0, DType::F64).unwrap();
    let two = body.broadcast_in_dim(two, &[n], &[]).unwrap();
    let a = body.mul(two, k2).unwrap();
    let a = body.add(k1, a).unwrap();
    let c = body.mul(two, k3).unwrap();
    let a = body.add(a, c).unwrap();
    let a = body.add(a, k4).unwrap();
    let w = body.scalar(h / 6.0, DType::F64).unwrap();
    let w = body.broadcast_in_dim(w, &[n], &[]).unwrap();
    let a = body.mul(w, a).unwrap();
    let next = body.add(y, a).unwrap();
    let body = body.finish(&[next]).unwrap();

    let mut b = Builder::new("ode");
    let x = b.param(t64(&[n]));
    let y0 = b.param(t64(&[n]));
    let out = b.fori(s, &body, &[x], &[y0], Checkpointing::None).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn ode_steps_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for (n, s) in [(1000, 10), (37, 3), (2, 1)] {
        let f = ode(n, s);
        assert_eq!(compare(&f, &inputs(&f, 7)), 1, "n = {n}, s = {s}: the loop did not run compiled");
    }
}

#[test]
fn gradient_through_the_loop_runs_compiled_and_bitwise() {
    if skip() {
        return;
    }
    // sum(final state) differentiated in x: a forward scan saving residuals
    // and a reverse scan over the transposed body (pads, slices, adds).
    let n = 64;
    let f = ode(n, 5);
    let mut b = Builder::new("loss");
    let x = b.param(t64(&[n]));
    let y0 = b.param(t64(&[n]));
    let y = b.call(Arc::new(f), &[x, y0]).unwrap()[0];
    let l = b.reduce_sum(y, &[0]).unwrap();
    let loss = b.finish(&[l]).unwrap();
    let g = grad(&loss, &Wrt::Positions(vec![0])).unwrap();
    let ins: Vec<Tensor> =
        g.params.iter().map(|&p| Tensor::from_fn(g.ty(p), |i| 0.01 * (i % 13) as f64 - 0.05)).collect();
    assert!(compare(&g, &ins) >= 2, "the forward and the reverse loop should both run compiled");
}

/// A scan with two consts, three carries (one swapped with another, one
/// passed through), an `xs` operand read as is and one returned as a `y`,
/// a row softmax, a pad with interior padding, a reversal, and i32/bool work.
fn busy_scan(length: usize, reverse: bool) -> Func {
    let (r, c) = (3, 8);
    let mut body = Builder::new("busy");
    let w = body.param(t64(&[r, c]));
    let k = body.param(TensorType::scalar(DType::I32));
    let a = body.param(t64(&[r, c]));
    let bb = body.param(t64(&[r, c]));
    let cnt = body.param(TensorType::scalar(DType::I32));
    let x = body.param(t64(&[r, c]));
    let s = body.add(a, x).unwrap();
    let s = body.mul(s, w).unwrap();
    let sm = reduce::softmax(&mut body, s, 1).unwrap();
    let rev = body.reverse(sm, &[1]).unwrap();
    let zero = body.scalar(0.0, DType::F64).unwrap();
    let part = body.slice(rev, &[0, 0], &[r, c / 2], &[1, 1]).unwrap();
    let padded = body.pad(part, zero, &[0, 0], &[0, 1], &[0, 1]).unwrap();
    let cmp = body.compare(Compare::Gt, padded, bb).unwrap();
    let sel = body.select(cmp, padded, bb).unwrap();
    let next_cnt = body.add(cnt, k).unwrap();
    let body = body.finish(&[bb, sel, next_cnt, x, padded]).unwrap();

    let mut b = Builder::new("busy_loop");
    let w = b.param(t64(&[r, c]));
    let k = b.param(TensorType::scalar(DType::I32));
    let a = b.param(t64(&[r, c]));
    let bb = b.param(t64(&[r, c]));
    let cnt = b.param(TensorType::scalar(DType::I32));
    let xs = b.param(t64(&[length, r, c]));
    let out = b.scan(Arc::new(body), &[w, k], &[a, bb, cnt], &[xs], ScanOpts::new(length).reverse(reverse)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn carries_consts_xs_and_ys_in_every_place() {
    if skip() {
        return;
    }
    for reverse in [false, true] {
        for length in [0, 1, 6] {
            let f = busy_scan(length, reverse);
            let mut ins = inputs(&f, 11);
            ins[1] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| 3.0);
            ins[4] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| -2.0);
            assert_eq!(compare(&f, &ins), 1, "length {length}, reverse {reverse}");
        }
    }
}

#[test]
fn a_body_without_kernel_form_runs_interpreted() {
    if skip() {
        return;
    }
    // A matrix product in the body: not a kernel (yet), so the loop steps.
    let n = 4;
    let mut body = Builder::new("mm");
    let m = body.param(t64(&[n, n]));
    let v = body.param(t64(&[n]));
    let p = body.dot_general(m, v, &[1], &[0], &[], &[]).unwrap();
    let t = body.tanh(p).unwrap();
    let body = body.finish(&[t]).unwrap();
    let mut b = Builder::new("mm_loop");
    let m = b.param(t64(&[n, n]));
    let v = b.param(t64(&[n]));
    let out = b.scan(Arc::new(body), &[m], &[v], &[], ScanOpts::new(5)).unwrap();
    let f = b.finish(&out).unwrap();
    assert_eq!(compare(&f, &inputs(&f, 3)), 0);
}

#[test]
fn compile_off_never_runs_compiled() {
    let f = ode(16, 2);
    let ins = inputs(&f, 1);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let exe = Executable::with_options(f, opts(CompileMode::Off)).unwrap();
    let before = native_loop_runs();
    exe.run(&refs).unwrap();
    assert_eq!(native_loop_runs(), before);
}
