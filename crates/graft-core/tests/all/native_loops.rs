//! Loops compiled whole (`kernel::loops`): a scan whose body is all kernels
//! runs as one native function, bitwise equal to the interpreted loop.
//!
//! Every test runs the same function with compilation off and with
//! synchronous compilation (the options reach the loop bodies), compares
//! every output bit, and checks through `native_loop_runs` whether the loop
//! really ran compiled. Tests skip (saying so) under `GRAFT_SKIP_CC_TESTS=1`.

use crate::common;

use common::native::{assert_same_bits, bits, data, opts, skip};
use graft_core::ad::{grad, Wrt};
use graft_core::composite::reduce;
use graft_core::kernel::loops::{native_loop_runs, Loc};
use graft_core::kernel::CompileMode;
use graft_core::ops::binary::Compare;
use graft_core::ops::remat::Remat;
use graft_core::ops::scan::ScanOpts;
use graft_core::{Builder, DType, ExecOptions, Executable, Func, Op, Tensor, TensorType, Value};
use std::sync::Arc;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// Runs `f` interpreted and compiled (with constant sizes and
/// size-generic, `ExecOptions::shapeless`), checks the bits, and returns
/// how many loops ran compiled in the compiled run (the same in both).
fn compare(f: &Func, inputs: &[Tensor]) -> usize {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    let mut runs = Vec::new();
    for shapeless in [false, true] {
        let options = ExecOptions { shapeless, ..opts(CompileMode::Sync) };
        let exe = Executable::with_options(f.clone(), options).unwrap();
        let before = native_loop_runs();
        let got = exe.run(&refs).unwrap();
        runs.push(native_loop_runs() - before);
        let how = if shapeless { "size-generic compiled" } else { "compiled" };
        assert_same_bits(&got, &want, how);
    }
    assert_eq!(runs[0], runs[1], "size-generic loops run compiled exactly where constant-size ones do");
    runs[0]
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
    ode_remat(n, s, Remat::Off)
}

fn ode_remat(n: usize, s: usize, remat: Remat) -> Func {
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
    let out = b.fori(s, &body, &[x], &[y0], remat).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn ode_steps_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for (n, s) in [(1000, 10), (37, 3), (2, 1), (5, 2), (20, 2), (33, 2), (70, 3)] {
        let f = ode(n, s);
        // One step stays a loop too: its body shifts the state by a
        // concatenation, which the compiled loop reads in place
        // (`opt::flatten` keeps such one-step scans).
        assert_eq!(compare(&f, &inputs(&f, 7)), 1, "n = {n}, s = {s}: the loop did not run compiled");
    }
}

#[test]
fn a_size_generic_loop_compiles_once_for_every_size() {
    if skip() {
        return;
    }
    let shapeless = |compile| ExecOptions { shapeless: true, ..opts(compile) };
    // The first size compiles; the others find its library at their first
    // run, even with background compilation, and give the interpreter's
    // bits (while loops: `while_loops_run_compiled_and_bitwise` through
    // `compare`).
    let first = ode(41, 4);
    let ins = inputs(&first, 1);
    let r: Vec<&Tensor> = ins.iter().collect();
    Executable::with_options(first, shapeless(CompileMode::Sync)).unwrap().run(&r).unwrap();
    for n in [29, 63] {
        let f = ode(n, 5);
        let ins = inputs(&f, 2);
        let r: Vec<&Tensor> = ins.iter().collect();
        let want = Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run(&r).unwrap();
        let exe = Executable::with_options(f.clone(), shapeless(CompileMode::Async)).unwrap();
        let before = native_loop_runs();
        let got = exe.run(&r).unwrap();
        assert_eq!(native_loop_runs() - before, 1, "n = {n}: the loop ran compiled from its first call");
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(bits(a), bits(b), "n = {n}");
        }
    }
}

#[test]
fn gradient_through_the_loop_runs_compiled_and_bitwise() {
    if skip() {
        return;
    }
    // sum(final state) differentiated in x: a forward scan saving residuals
    // and a reverse scan over the transposed body (pads, slices, adds).
    let g = ode_gradient(64, 5, Remat::Off);
    let ins: Vec<Tensor> =
        g.params.iter().map(|&p| Tensor::from_fn(g.ty(p), |i| 0.01 * (i % 13) as f64 - 0.05)).collect();
    assert!(compare(&g, &ins) >= 2, "the forward and the reverse loop should both run compiled");
}

#[test]
fn one_step_gradient_runs_as_one_compiled_loop() {
    if skip() {
        return;
    }
    // With one step, reverse mode makes two one-step scans (the forward
    // step saving its stages, the reverse step reading them); the executor
    // runs them as one loop (`opt::merge_steps`), so the stages never leave
    // the step. Bitwise the interpreter's and the op-by-op reference's
    // (which merges nothing), at a size of one block and of many.
    for remat in [Remat::Off, Remat::Every(1)] {
        for n in [64, 3000] {
            let g = ode_gradient(n, 1, remat);
            let ins: Vec<Tensor> =
                g.params.iter().map(|&p| Tensor::from_fn(g.ty(p), |i| 0.01 * (i % 13) as f64 - 0.05)).collect();
            assert_eq!(compare(&g, &ins), 1, "{remat:?}, n = {n}: one compiled loop runs");
            let refs: Vec<&Tensor> = ins.iter().collect();
            let reference = ExecOptions { fuse: false, ..opts(CompileMode::Off) };
            let want = Executable::with_options(g.clone(), reference).unwrap().run(&refs).unwrap();
            let exe = Executable::with_options(g.clone(), opts(CompileMode::Sync)).unwrap();
            assert_same_bits(&exe.run(&refs).unwrap(), &want, "merged and compiled against op by op");
            // One scan, whose operands are the inputs: the zero initial
            // state and the one-hot seed of the reverse sweep are computed
            // in its body (once, as the loop's static values), not filled
            // by every call.
            let planned = exe.func();
            let scans: Vec<_> = planned.eqns.iter().filter(|e| e.prim.name() == "scan").collect();
            assert_eq!(scans.len(), 1, "{planned}");
            assert!(scans[0].inputs.iter().all(|v| planned.params.contains(v)), "{planned}");
        }
    }
}

/// The gradient in `x` of `sum(ode(x, y0))`.
fn ode_gradient(n: usize, s: usize, remat: Remat) -> Func {
    let f = ode_remat(n, s, remat);
    let mut b = Builder::new("loss");
    let x = b.param(t64(&[n]));
    let y0 = b.param(t64(&[n]));
    let y = b.call(Arc::new(f), &[x, y0]).unwrap()[0];
    let l = b.reduce_sum(y, &[0]).unwrap();
    let loss = b.finish(&[l]).unwrap();
    grad(&loss, &Wrt::Positions(vec![0])).unwrap()
}

/// The compiled loop program of `f`'s first scan, whose body has `nc`
/// consts and `nk` carries (built with compilation off: only its text).
fn scan_program(f: &Func, nc: usize, nk: usize) -> graft_core::kernel::loops::LoopProgram {
    let body = match &f.eqns.iter().find(|e| e.prim.name() == "scan").expect("f has a scan").prim {
        graft_core::Prim::Scan(s) => s.body.clone(),
        _ => unreachable!("the scan equation is a scan"),
    };
    let exe = Executable::with_options(body, opts(CompileMode::Off)).unwrap();
    exe.loop_program(nc, nk, false).expect("the body has a compiled form")
}

fn scan_bodies(f: &Func) -> Vec<(Arc<Func>, usize, usize, bool)> {
    f.eqns
        .iter()
        .filter_map(|e| match &e.prim {
            graft_core::Prim::Scan(s) => Some((s.body.clone(), s.n_consts, s.n_carry, s.reverse)),
            _ => None,
        })
        .collect()
}

#[test]
fn rk4_gradient_loops_neither_load_nor_store_broadcast_constants() {
    // The step sizes and the `2` of RK4 are scalars broadcast to the
    // state's shape. The reverse sweep rebuilds them instead of taking
    // them as residual operands (`rewrite::cut`), and no kernel of either
    // loop stores one to a buffer for a later kernel to load
    // (`fuse::unshare_splats`); the residual `concat([1], y[:-1])` is one
    // kernel reading `y` in place.
    let g = ode_gradient(64, 5, Remat::Off);
    let produced_by: std::collections::HashMap<Value, &str> =
        g.eqns.iter().flat_map(|e| e.outputs.iter().map(move |&o| (o, e.prim.name()))).collect();
    for e in &g.eqns {
        if let graft_core::Prim::Scan(s) = &e.prim {
            for &v in &e.inputs[..s.n_consts] {
                assert_ne!(produced_by.get(&v).copied(), Some("broadcast_in_dim"), "a broadcast const operand in\n{g}");
            }
        }
    }
    let bodies = scan_bodies(&g);
    assert_eq!(bodies.len(), 2, "{g}");
    for (body, nc, nk, reverse) in bodies {
        let exe = Executable::with_options(body, opts(CompileMode::Off)).unwrap();
        let p = exe.loop_program(nc, nk, reverse).expect("the body has a compiled form");
        let text = p.to_string();
        for k in &p.kernels {
            for inst in &k.body {
                if let graft_core::kernel::Inst::Store { value, .. } = inst {
                    assert!(
                        !matches!(k.body[*value as usize], graft_core::kernel::Inst::Lit(_)),
                        "a kernel stores a literal:\n{text}"
                    );
                }
            }
        }
        if !reverse {
            // Per stage: the residual (one kernel) and the stage itself;
            // then the last stage's state and the counter.
            assert!(p.calls.len() <= 9, "calls per step:\n{text}");
        }
    }
}

#[test]
fn rematerialised_steps_compile_whole_and_give_the_same_gradient() {
    if skip() {
        return;
    }
    // `Remat::Every(1)`: the forward sweep saves only the carries and the
    // reverse sweep recomputes each step. Its one-step scans and
    // checkpoints are inlined before planning (`opt::flatten`), so both
    // sweeps compile whole; the arithmetic is the same, so is the gradient.
    let n = 64;
    let plain = ode_gradient(n, 5, Remat::Off);
    let remat = ode_gradient(n, 5, Remat::Every(1));
    let ins: Vec<Tensor> =
        plain.params.iter().map(|&p| Tensor::from_fn(plain.ty(p), |i| 0.01 * (i % 13) as f64 - 0.05)).collect();
    let refs: Vec<&Tensor> = ins.iter().collect();
    assert!(compare(&remat, &ins) >= 2, "the forward and the reverse loop should both run compiled");
    let a = Executable::with_options(plain, opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    let b = Executable::with_options(remat, opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    assert_eq!(bits(&a[0]), bits(&b[0]));
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
            // A one-step scan whose body pads stays a loop
            // (`opt::flatten`), so it runs compiled at every length.
            assert_eq!(compare(&f, &ins), 1, "length {length}, reverse {reverse}");
        }
    }
}

#[test]
fn a_body_without_kernel_form_runs_interpreted() {
    if skip() {
        return;
    }
    // A Cholesky factorisation in the body: neither a kernel nor a host
    // call, so the loop steps.
    let n = 3;
    let mut body = Builder::new("chol");
    let a = body.param(t64(&[n, n]));
    let l = body.cholesky(a).unwrap();
    let t = body.tanh(l).unwrap();
    let body = body.finish(&[t]).unwrap();
    let mut b = Builder::new("chol_loop");
    let a = b.param(t64(&[n, n]));
    let out = b.scan(Arc::new(body), &[], &[a], &[], ScanOpts::new(4)).unwrap();
    let f = b.finish(&out).unwrap();
    let ins = vec![Tensor::from_fn(&t64(&[n, n]), |i| if i % (n + 1) == 0 { 2.0 } else { 0.25 })];
    assert_eq!(compare(&f, &ins), 0);
}

/// A recurrent cell over a sequence: `h' = tanh(x_t W + h U + b)`, the
/// hidden states stacked, `dtype` f32 or f64.
fn rnn(dtype: DType, steps: usize, batch: usize, d: usize, hid: usize) -> Func {
    let ty = |shape: &[usize]| TensorType::new(dtype, shape.to_vec());
    let mut body = Builder::new("cell");
    let w = body.param(ty(&[d, hid]));
    let u = body.param(ty(&[hid, hid]));
    let bias = body.param(ty(&[hid]));
    let h = body.param(ty(&[batch, hid]));
    let x = body.param(ty(&[batch, d]));
    let xw = body.dot_general(x, w, &[1], &[0], &[], &[]).unwrap();
    let hu = body.dot_general(h, u, &[1], &[0], &[], &[]).unwrap();
    let z = body.add(xw, hu).unwrap();
    let bb = body.broadcast_in_dim(bias, &[batch, hid], &[1]).unwrap();
    let z = body.add(z, bb).unwrap();
    let hn = body.tanh(z).unwrap();
    let body = body.finish(&[hn, hn]).unwrap();
    let mut b = Builder::new("rnn");
    let w = b.param(ty(&[d, hid]));
    let u = b.param(ty(&[hid, hid]));
    let bias = b.param(ty(&[hid]));
    let h0 = b.param(ty(&[batch, hid]));
    let xs = b.param(ty(&[steps, batch, d]));
    let out = b.scan(Arc::new(body), &[w, u, bias], &[h0], &[xs], ScanOpts::new(steps)).unwrap();
    b.finish(&out).unwrap()
}

/// Inputs of modest size, so that `tanh` does not saturate.
fn small_inputs(f: &Func, seed: u64) -> Vec<Tensor> {
    f.params
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            Tensor::from_fn(f.ty(p), |i| (((i as u64 * 7919 + seed + k as u64 * 31) % 97) as f64 - 48.0) / 200.0)
        })
        .collect()
}

#[test]
fn matrix_products_in_a_body_are_host_calls_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for dtype in [DType::F32, DType::F64] {
        let f = rnn(dtype, 7, 3, 5, 8);
        let (body, nc, nk, rev) = scan_bodies(&f).remove(0);
        let exe = Executable::with_options(body, opts(CompileMode::Off)).unwrap();
        let p = exe.loop_program(nc, nk, rev).expect("the cell compiles whole, its products as host calls");
        assert_eq!(p.hosts.len(), 2, "two matrix products:\n{p}");
        assert!(p.to_string().contains("host dot_general"), "{p}");
        // `x_t` is read in place from the stacked operand.
        assert!(p.calls.iter().any(|c| c.args.contains(&Loc::Xs(0))), "{p}");
        assert_eq!(compare(&f, &small_inputs(&f, 1)), 1, "{dtype}: the loop did not run compiled");
    }
}

/// The sum of squared hidden states of a small f64 [`rnn`], and its
/// gradient in the weights, bias and initial state.
fn rnn_loss_and_gradient() -> (Func, Func) {
    let f = rnn(DType::F64, 6, 4, 3, 5);
    let mut b = Builder::new("loss");
    let ps: Vec<Value> = f.params.iter().map(|&p| b.param(f.ty(p).clone())).collect();
    let out = b.call(Arc::new(f), &ps).unwrap();
    let sq = b.mul(out[1], out[1]).unwrap();
    let l = b.reduce_sum(sq, &[0, 1, 2]).unwrap();
    let loss = b.finish(&[l]).unwrap();
    let g = grad(&loss, &Wrt::Positions(vec![0, 1, 2, 3])).unwrap();
    (loss, g)
}

#[test]
fn the_gradient_of_a_recurrent_net_runs_both_sweeps_compiled_and_bitwise() {
    if skip() {
        return;
    }
    // The reverse sweep holds the transposed products and reductions over
    // the batch (the bias gradient): both are host calls.
    let (_, g) = rnn_loss_and_gradient();
    assert!(compare(&g, &small_inputs(&g, 5)) >= 2, "the forward and the reverse loop should both run compiled");
}

#[test]
fn weight_gradient_sums_leave_the_reverse_loop_and_stay_correct() {
    // The reverse sweep accumulates `w_bar + dot(x_t, z_bar_t)`,
    // `u_bar + dot(h_t, z_bar_t)` and `b_bar + sum(z_bar_t)` in carries;
    // before planning they become products and a sum over the stacked
    // steps after the loop (`opt::hoist_accumulations`).
    let (loss, g) = rnn_loss_and_gradient();
    let reverse_carries = |f: &Func| scan_bodies(f).iter().find(|s| s.3).map(|s| s.2).expect("a reverse scan");
    let planned = Executable::with_options(g.clone(), opts(CompileMode::Off)).unwrap();
    let (before, after) =
        (reverse_carries(&graft_core::opt::flatten(&g).unwrap_or(g.clone())), reverse_carries(planned.func()));
    assert_eq!(after + 3, before, "three accumulators hoisted:\n{}", planned.func());
    // Reverse mode (hoisted) against forward mode (no accumulations) and
    // central differences.
    let ins = small_inputs(&loss, 3);
    let mut rng = common::Rng(7);
    common::check_grads("rnn loss", &loss, &ins, &mut rng, 1e-6, 1e-6);
}

#[test]
fn a_while_loop_with_a_matrix_product_runs_compiled_and_bitwise() {
    if skip() {
        return;
    }
    // `v <- tanh(M v)` until the counter reaches the limit.
    let n = 6;
    let tys = || [t64(&[n, n]), TensorType::scalar(DType::I32), t64(&[n]), TensorType::scalar(DType::I32)];
    let mut c = Builder::new("cond");
    let ps: Vec<Value> = tys().into_iter().map(|t| c.param(t)).collect();
    let more = c.compare(Compare::Lt, ps[3], ps[1]).unwrap();
    let cond = c.finish(&[more]).unwrap();
    let mut b = Builder::new("power");
    let ps: Vec<Value> = tys().into_iter().map(|t| b.param(t)).collect();
    let mv = b.dot_general(ps[0], ps[2], &[1], &[0], &[], &[]).unwrap();
    let nv = b.tanh(mv).unwrap();
    let one = b.scalar(1.0, DType::I32).unwrap();
    let ni = b.add(ps[3], one).unwrap();
    let body = b.finish(&[nv, ni]).unwrap();
    let mut f = Builder::new("powering");
    let ps: Vec<Value> = tys().into_iter().map(|t| f.param(t)).collect();
    let out = f.while_loop(Arc::new(cond), Arc::new(body), &ps[..2], &ps[2..]).unwrap();
    let f = f.finish(&out).unwrap();
    for limit in [0, 1, 9] {
        let mut ins = small_inputs(&f, 2);
        ins[1] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| limit as f64);
        ins[3] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| 0.0);
        assert_eq!(compare(&f, &ins), 1, "limit {limit}: the loop did not run compiled");
    }
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

/// Layout in two dimensions, read in place by the elementwise work after
/// it: a slice and a concatenation along the last axis, a crop-and-pad,
/// a transpose read back through a reshape, in f32 and f64.
fn layout_scan(dtype: DType, length: usize) -> Func {
    let (r, c) = (4, 6);
    let ty = TensorType::new(dtype, vec![r, c]);
    let mut body = Builder::new("layout");
    let x = body.param(ty.clone());
    let one = body.scalar(1.0, dtype).unwrap();
    let ones = body.broadcast_in_dim(one, &[r, 1], &[]).unwrap();
    let tail = body.slice(x, &[0, 1], &[r, c], &[1, 1]).unwrap();
    let shifted = body.concatenate(&[tail, ones], 1).unwrap();
    let half = body.scalar(0.5, dtype).unwrap();
    let cropped = body.pad(x, half, &[-1, 1], &[1, -1], &[0, 0]).unwrap();
    let t = body.transpose(x, &[1, 0]).unwrap();
    let t = body.reshape(t, &[r, c]).unwrap();
    let a = body.mul(shifted, cropped).unwrap();
    let a = body.add(a, t).unwrap();
    let a = body.tanh(a).unwrap();
    let body = body.finish(&[a, shifted]).unwrap();
    let mut b = Builder::new("layout_loop");
    let x = b.param(ty);
    let out = b.scan(Arc::new(body), &[], &[x], &[], ScanOpts::new(length)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn layout_in_two_dimensions_is_read_in_place() {
    if skip() {
        return;
    }
    for dtype in [DType::F32, DType::F64] {
        let f = layout_scan(dtype, 5);
        assert_eq!(compare(&f, &inputs(&f, 5)), 1, "{dtype}");
        // The slice, concatenation, pad and transpose are read in place by
        // the elementwise kernel, which reads only the carry (and static
        // values); the concatenation is also a `y`, written by one kernel
        // that reads its pieces in place.
        let p = scan_program(&f, 0, 1);
        let text = p.to_string();
        assert!(text.contains("if inside"), "no window load in\n{text}");
        assert_eq!(p.calls.len(), 2, "calls per step:\n{text}");
        let main = p.calls.last().unwrap();
        assert!(
            main.args.iter().all(|l| matches!(l, Loc::CarryIn(0) | Loc::CarryOut(0) | Loc::Static(_))),
            "the elementwise kernel reads a materialised layout value:\n{text}"
        );
    }
}

#[test]
fn the_verifier_rejects_bad_strided_stores_and_windows() {
    use graft_core::kernel::{verify, Access, Arg, Index, Inst, Kernel, Window};
    let arg = |access, len| Arg { dtype: DType::F32, len, access };
    let kernel = |body, args| Kernel { name: "k".into(), args, extent: 4, body };
    // Two points store one element (stride 0).
    let twice = kernel(
        vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Store {
                arg: 1,
                value: 0,
                index: Index::Strided { dims: vec![2, 2], strides: vec![0, 1], offset: 0 },
            },
        ],
        vec![arg(Access::Read, 4), arg(Access::Write, 4)],
    );
    assert!(verify(&twice).unwrap_err().msg.contains("twice"));
    // A strided store past the end.
    let past = kernel(
        vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Store { arg: 1, value: 0, index: Index::Strided { dims: vec![4], strides: vec![2], offset: 0 } },
        ],
        vec![arg(Access::Read, 4), arg(Access::Write, 6)],
    );
    assert!(verify(&past).is_err());
    // A window whose inside reaches past its buffer.
    let window =
        |lo: isize, size: usize| Window { dims: vec![4], lo: vec![lo], size: vec![size], strides: vec![1], offset: 0 };
    let reads = |w: Window| {
        kernel(
            vec![
                Inst::Lit(graft_core::kernel::Lit { dtype: DType::F32, bits: 0 }),
                Inst::Window { arg: 0, window: w, fill: 0 },
                Inst::Store { arg: 1, value: 1, index: Index::Point },
            ],
            vec![arg(Access::Read, 3), arg(Access::Write, 4)],
        )
    };
    assert!(verify(&reads(window(1, 3))).is_ok());
    assert!(verify(&reads(window(-2, 3))).is_ok(), "only the part of the box with points is read");
    assert!(verify(&reads(window(0, 4))).unwrap_err().msg.contains("window reaches"));
}

/// A while loop over `(consts: a f64[n], limit i32[]; carry: x f64[n],
/// y f64[n], i i32[])`: `while i < limit && !(x[0] > 1e3)` the body swaps
/// and mixes the vector carries (`x, y <- y * a + x, tanh(x)`), counts,
/// and the predicate reads a carry element and a const.
fn mixing_while(n: usize) -> Func {
    let tys = || [t64(&[n]), TensorType::scalar(DType::I32), t64(&[n]), t64(&[n]), TensorType::scalar(DType::I32)];
    let mut c = Builder::new("cond");
    let ps: Vec<Value> = tys().into_iter().map(|t| c.param(t)).collect();
    let more = c.compare(Compare::Lt, ps[4], ps[1]).unwrap();
    let x0 = c.slice(ps[2], &[0], &[1], &[1]).unwrap();
    let x0 = c.reshape(x0, &[]).unwrap();
    let big = c.scalar(1e3, DType::F64).unwrap();
    let small = c.compare(Compare::Le, x0, big).unwrap();
    let go = c.and(more, small).unwrap();
    let cond = c.finish(&[go]).unwrap();

    let mut b = Builder::new("mix");
    let ps: Vec<Value> = tys().into_iter().map(|t| b.param(t)).collect();
    let ya = b.mul(ps[3], ps[0]).unwrap();
    let nx = b.add(ya, ps[2]).unwrap();
    let ny = b.tanh(ps[2]).unwrap();
    let one = b.scalar(1.0, DType::I32).unwrap();
    let ni = b.add(ps[4], one).unwrap();
    let body = b.finish(&[nx, ny, ni]).unwrap();

    let mut f = Builder::new("mixing");
    let ps: Vec<Value> = tys().into_iter().map(|t| f.param(t)).collect();
    let out = f.while_loop(Arc::new(cond), Arc::new(body), &ps[..2], &ps[2..]).unwrap();
    f.finish(&out).unwrap()
}

#[test]
fn while_loops_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for (n, limit) in [(5, 0), (5, 1), (40, 7), (3, 1000)] {
        let f = mixing_while(n);
        let mut ins = inputs(&f, 5);
        ins[0] = Tensor::from_fn(&t64(&[n]), |i| 0.5 + i as f64 * 0.25);
        ins[1] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| limit as f64);
        ins[2] = Tensor::from_fn(&t64(&[n]), |i| 0.1 * i as f64);
        ins[4] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| 0.0);
        assert_eq!(compare(&f, &ins), 1, "n = {n}, limit = {limit}: the loop did not run compiled");
    }
}

#[test]
fn forward_mode_through_a_while_loop_runs_compiled() {
    if skip() {
        return;
    }
    // while_jvp runs the augmented loop (carry and tangent) through the
    // same compiled path.
    let f = mixing_while(6);
    let jf = graft_core::ad::jvp_func(&f).unwrap();
    let mut ins = inputs(&jf, 9);
    for (k, &p) in jf.params.iter().enumerate() {
        if jf.ty(p).dtype == DType::I32 {
            ins[k] = Tensor::from_fn(jf.ty(p), |_| if k == 1 { 9.0 } else { 0.0 });
        } else if k < 5 {
            ins[k] = Tensor::from_fn(jf.ty(p), |i| 0.25 + 0.125 * i as f64);
        }
    }
    assert!(compare(&jf, &ins) >= 1, "no loop ran compiled:\n{jf}");
}

#[test]
fn a_while_loop_is_listed_as_a_program() {
    let f = mixing_while(4);
    let progs = graft_core::kernel::while_programs(&f, opts(CompileMode::Off));
    assert_eq!(progs.len(), 1);
    let text = progs[0].1.to_string();
    assert!(text.starts_with("while gw:"), "{text}");
    assert!(text.contains("# cond") && text.contains("# body") && text.contains("ys0[t]"), "{text}");
}

#[test]
fn loops_of_a_plan_are_those_of_its_function() {
    // `loop_programs_of` walks the plan once; `loop_programs` and
    // `while_programs` plan the function themselves: the same programs,
    // in the same order.
    let shown = |ps: Vec<(String, String)>| ps.into_iter().map(|(n, p)| format!("{n}\n{p}")).collect::<Vec<_>>();
    for f in [
        graft_core::ad::vjp_func(&mixing_while(5), &Wrt::All).unwrap(),
        mixing_while(3),
        ode_gradient(4, 6, Remat::Off),
    ] {
        let o = opts(CompileMode::Off);
        let exe = Executable::with_options(f.clone(), o).unwrap();
        let both = graft_core::kernel::loop_programs_of(&exe, o);
        let scans = graft_core::kernel::loop_programs(&f, o);
        let whiles = graft_core::kernel::while_programs(&f, o);
        assert!(!scans.is_empty() || !whiles.is_empty(), "no loops in\n{f}");
        assert_eq!(
            shown(both.scans.into_iter().map(|(n, p)| (n, p.to_string())).collect()),
            shown(scans.into_iter().map(|(n, p)| (n, p.to_string())).collect())
        );
        assert_eq!(
            shown(both.whiles.into_iter().map(|(n, p)| (n, p.to_string())).collect()),
            shown(whiles.into_iter().map(|(n, p)| (n, p.to_string())).collect())
        );
    }
}

#[test]
fn reverse_mode_through_a_while_loop_runs_both_sweeps_compiled() {
    if skip() {
        return;
    }
    // while_vjp: the compiled while counts the trips, a compiled scan
    // records the carries, a compiled reverse scan runs the backward step.
    // The first run queues the three loops (async), the second must use
    // them; both must match the interpreter bit for bit.
    for (n, limit) in [(6, 9), (3, 0), (2, 1)] {
        let f = mixing_while(n);
        let vf = graft_core::ad::vjp_func(&f, &Wrt::All).unwrap();
        let mut ins = inputs(&vf, 13);
        ins[0] = Tensor::from_fn(&t64(&[n]), |i| 0.5 + i as f64 * 0.25);
        ins[1] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| limit as f64);
        ins[2] = Tensor::from_fn(&t64(&[n]), |i| 0.1 * i as f64);
        ins[4] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| 0.0);
        for k in 5..ins.len() {
            ins[k] = Tensor::from_fn(vf.ty(vf.params[k]), |i| 1.0 - 0.25 * i as f64);
        }
        let ran = compare(&vf, &ins);
        assert!(
            ran >= 4,
            "n = {n}, limit = {limit}: {ran} loops ran compiled (want the primal while and three sweeps)"
        );
    }
}

/// A loop body with full reductions of its vector carry (`sum` and `max`
/// of all elements, broadcast back): a one-row row kernel inside the
/// compiled loop, combining in the interpreter's pairwise order (lengths
/// around the 16-lane and 256-element leaf boundaries, NaN, infinities and
/// signed zeros in the data).
fn reducing_scan(n: usize) -> Func {
    let mut body = Builder::new("reducing");
    let y = body.param(t64(&[n]));
    let x = body.param(t64(&[n]));
    let p = body.mul(y, x).unwrap();
    let s = body.reduce_sum(p, &[0]).unwrap();
    let m = body.reduce_max(x, &[0]).unwrap();
    let sm = body.sub(s, m).unwrap();
    let sb = body.broadcast_in_dim(sm, &[n], &[]).unwrap();
    let half = body.scalar(0.5, DType::F64).unwrap();
    let half = body.broadcast_in_dim(half, &[n], &[]).unwrap();
    let yh = body.mul(y, half).unwrap();
    let next = body.add(yh, sb).unwrap();
    let body = body.finish(&[next, s]).unwrap();
    let mut b = Builder::new("reducing_loop");
    let y0 = b.param(t64(&[n]));
    let xs = b.param(t64(&[4, n]));
    let out = b.scan(Arc::new(body), &[], &[y0], &[xs], ScanOpts::new(4)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn full_reductions_in_a_loop_body_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for n in [2, 15, 16, 17, 300, 1000] {
        let f = reducing_scan(n);
        for seed in [1, 2] {
            let mut ins = inputs(&f, seed);
            if seed == 2 {
                // Finite data: the sums stay finite and the order shows.
                ins = ins
                    .iter()
                    .map(|t| Tensor::from_fn(&t.ty(), |i| ((i * 7919) % 1000) as f64 / 37.0 - 13.0))
                    .collect();
            }
            assert_eq!(compare(&f, &ins), 1, "n = {n}, seed {seed}: the loop did not run compiled");
        }
    }
}

/// A while body that branches: a three-way `switch` on the trip counter
/// (clamped below 0 and above 2, as the interpreter clamps) and a two-way
/// `cond` on data (`x[0] > 0`). If-converted for the compiled loop
/// (`opt::if_convert`): every branch runs, `select` keeps the taken one.
fn branching_while(n: usize) -> Func {
    let tys = || [TensorType::scalar(DType::I32), t64(&[n]), TensorType::scalar(DType::I32)];
    let branch = |name: &str, op: &dyn Fn(&mut Builder, Value) -> Value| {
        let mut b = Builder::new(name);
        let x = b.param(t64(&[n]));
        let y = op(&mut b, x);
        Arc::new(b.finish(&[y]).unwrap())
    };
    let double = branch("double", &|b, x| b.add(x, x).unwrap());
    let dec = branch("dec", &|b, x| {
        let one = b.scalar(1.0, DType::F64).unwrap();
        let one = b.broadcast_in_dim(one, &[n], &[]).unwrap();
        b.sub(x, one).unwrap()
    });
    let squash = branch("squash", &|b, x| b.tanh(x).unwrap());
    let neg = branch("neg", &|b, x| b.neg(x).unwrap());

    let mut c = Builder::new("cond");
    let ps: Vec<Value> = tys().into_iter().map(|t| c.param(t)).collect();
    let go = c.compare(Compare::Lt, ps[2], ps[0]).unwrap();
    let cond = c.finish(&[go]).unwrap();

    let mut b = Builder::new("branching");
    let ps: Vec<Value> = tys().into_iter().map(|t| b.param(t)).collect();
    let one = b.scalar(1.0, DType::I32).unwrap();
    let idx = b.sub(ps[2], one).unwrap();
    let y = b.switch(idx, &[double, dec, squash], &[ps[1]]).unwrap()[0];
    let y0 = b.slice(y, &[0], &[1], &[1]).unwrap();
    let y0 = b.reshape(y0, &[]).unwrap();
    let zero = b.scalar(0.0, DType::F64).unwrap();
    let pos = b.compare(Compare::Gt, y0, zero).unwrap();
    let pos = b.convert(pos, DType::I32).unwrap();
    let ident = branch("ident", &|_, x| x);
    let y = b.switch(pos, &[neg, ident], &[y]).unwrap()[0];
    let ni = b.add(ps[2], one).unwrap();
    let body = b.finish(&[y, ni]).unwrap();

    let mut f = Builder::new("branching_loop");
    let ps: Vec<Value> = tys().into_iter().map(|t| f.param(t)).collect();
    let out = f.while_loop(Arc::new(cond), Arc::new(body), &ps[..1], &ps[1..]).unwrap();
    f.finish(&out).unwrap()
}

#[test]
fn branching_while_bodies_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    for (n, limit) in [(4, 6), (17, 2), (3, -1)] {
        let f = branching_while(n);
        let mut ins = inputs(&f, 21);
        ins[0] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| limit as f64);
        ins[2] = Tensor::from_fn(&TensorType::scalar(DType::I32), |_| -1.0);
        assert_eq!(compare(&f, &ins), 1, "n = {n}, limit = {limit}: the loop did not run compiled");
        assert!(graft_core::opt::if_convert(&f).is_none(), "the top level has no cond");
    }
}

/// Recompute-fusion (`kernel/loops/inline.rs`): the four RK4 stages, each
/// reading the previous one shifted by an element, collapse into one
/// kernel per step that recomputes the earlier stages at the shifted
/// points (no stage passes through memory), still bitwise.
#[test]
fn shifted_stages_are_inlined_into_one_kernel() {
    let n = 50;
    let f = ode(n, 4);
    let p = scan_program(&f, 1, 2);
    let text = p.to_string();
    assert_eq!(p.calls.len(), 2, "the step kernel and the counter:\n{text}");
    assert!(p.scratch.is_empty(), "a stage still passes through memory:\n{text}");
    assert!(text.contains("= inside i[50] in [1] + [49]"), "no inside test for the shifted read:\n{text}");
    if !skip() {
        assert_eq!(compare(&f, &inputs(&f, 3)), 1);
    }
}

#[test]
fn large_steps_run_in_cache_sized_blocks_and_stay_bitwise() {
    // 10 000 f64 per stage do not fit the L1 cache: the forward step's
    // stage kernels and the whole reverse step (recomputed stages, then
    // cotangents read one point ahead) run block by block. 4 099 leaves a
    // partial last block.
    for n in [10_000, 4_099] {
        let g = ode_gradient(n, 3, Remat::Off);
        for (body, nc, nk, reverse) in scan_bodies(&g) {
            let exe = Executable::with_options(body, opts(CompileMode::Off)).unwrap();
            let p = exe.loop_program(nc, nk, reverse).expect("the body has a compiled form");
            let runs = graft_core::kernel::loops::blocks::runs(&p);
            let text = p.to_string();
            assert!(runs.iter().any(|r| r.calls.len() >= 2), "n = {n}: no blocked run:\n{text}");
            for r in &runs {
                assert!(r.block >= 64 && r.block % 64 == 0 && 8 * r.block <= r.extent, "{r:?}");
                assert!(text.contains(&format!("calls {}..{} in blocks of {}", r.calls.start, r.calls.end, r.block)));
            }
            if reverse {
                assert!(runs.iter().any(|r| r.leads.iter().any(|&l| l > 0)), "reads ahead need leads:\n{text}");
            }
        }
        if !skip() {
            let ins: Vec<Tensor> =
                g.params.iter().map(|&p| Tensor::from_fn(g.ty(p), |i| 0.01 * (i % 13) as f64 - 0.05)).collect();
            assert!(compare(&g, &ins) >= 2, "n = {n}: both loops should run compiled");
        }
    }
}

/// A step of three elementwise kernels over `n` f64 points: `s0 = c0 + 1`,
/// `s1 = s0[i + ahead] * 2` (0 past the end), `carry' = s1 + carry`; with
/// `reuse`, the third writes `s0` again (as a planner reusing the buffer
/// would) instead of the carry.
fn three_kernel_step(n: usize, ahead: isize, reuse: bool) -> graft_core::kernel::loops::LoopProgram {
    use graft_core::kernel::loops::{Call, Callee, LoopProgram};
    use graft_core::kernel::{Access, Arg, Index, Inst, Kernel, Lit, Window};
    use graft_core::ops::binary::Binary;
    let arg = |access| Arg { dtype: DType::F64, len: n, access };
    let lit = |x: f64| Inst::Lit(Lit { dtype: DType::F64, bits: x.to_bits() });
    let k0 = Kernel {
        name: "k0".into(),
        args: vec![arg(Access::Read), arg(Access::Write)],
        extent: n,
        body: vec![
            Inst::Load { arg: 0, index: Index::Point },
            lit(1.0),
            Inst::Binary(Binary::Add, 0, 1),
            Inst::Store { arg: 1, value: 2, index: Index::Point },
        ],
    };
    // Point c reads s0[c + ahead] where that exists.
    let size = n - ahead.unsigned_abs();
    let (lo, offset) = if ahead >= 0 { (0, ahead) } else { (-ahead, 0) };
    let window = Window { dims: vec![n], lo: vec![lo], size: vec![size], strides: vec![1], offset };
    let k1 = Kernel {
        name: "k1".into(),
        args: vec![arg(Access::Read), arg(Access::Write)],
        extent: n,
        body: vec![
            lit(0.0),
            Inst::Window { arg: 0, window, fill: 0 },
            lit(2.0),
            Inst::Binary(Binary::Mul, 1, 2),
            Inst::Store { arg: 1, value: 3, index: Index::Point },
        ],
    };
    let k2 = Kernel {
        name: "k2".into(),
        args: vec![arg(Access::Read), arg(Access::Read), arg(Access::Write)],
        extent: n,
        body: vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Load { arg: 1, index: Index::Point },
            Inst::Binary(Binary::Add, 0, 1),
            Inst::Store { arg: 2, value: 2, index: Index::Point },
        ],
    };
    let out = if reuse { Loc::Scratch(0) } else { Loc::CarryOut(0) };
    let calls = vec![
        Call { callee: Callee::Kernel(0), args: vec![Loc::Const(0), Loc::Scratch(0)] },
        Call { callee: Callee::Kernel(1), args: vec![Loc::Scratch(0), Loc::Scratch(1)] },
        Call { callee: Callee::Kernel(2), args: vec![Loc::Scratch(1), Loc::CarryIn(0), out] },
    ];
    for k in [&k0, &k1, &k2] {
        graft_core::kernel::verify(k).unwrap();
    }
    LoopProgram {
        name: "step".into(),
        kernels: vec![k0, k1, k2],
        hosts: vec![],
        calls,
        n_consts: 1,
        n_carry: 1,
        carry_outs: 1,
        n_xs: 0,
        n_ys: 0,
        reverse: false,
        params: vec![(DType::F64, n); 2],
        outputs: vec![(DType::F64, n)],
        out_loc: vec![out],
        scratch: vec![(DType::F64, n); 2],
        statics: vec![],
    }
}

#[test]
fn blocked_runs_lead_by_the_farthest_read_and_stop_at_reused_buffers() {
    use graft_core::kernel::loops::blocks::runs;
    let n = 10_000;
    // Read 5 ahead: the producer runs 5 points ahead of its reader.
    let r = runs(&three_kernel_step(n, 5, false));
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].calls.clone(), r[0].leads.clone(), r[0].extent), (0..3, vec![5, 0, 0], n));
    // Read 3 behind: no lead needed.
    let r = runs(&three_kernel_step(n, -3, false));
    assert_eq!(r[0].leads, vec![0, 0, 0]);
    // The last call overwrites a buffer the first wrote and the second
    // read: blocks of it would clobber values not yet read.
    let r = runs(&three_kernel_step(n, 5, true));
    assert!(r.iter().all(|r| r.calls.end <= 2), "{r:?}");
    // Too few points for eight blocks: the blocks cost more than they save.
    assert!(runs(&three_kernel_step(1000, 5, false)).is_empty());
}

/// A scan drawing random numbers at every step: the key is split (one
/// child carried on, two more as a key-batched pair drawing bits), folded
/// with the step counter and drawn as f32 uniforms, so `random_split`,
/// `random_bits` (with two keys), `random_fold_in` and `random_uniform`
/// all run inside the compiled loop as Threefry in kernel-IR word
/// operations.
fn random_scan(n: usize, length: usize) -> Func {
    let i32t = |shape: &[usize]| TensorType::new(DType::I32, shape.to_vec());
    let f32t = |shape: &[usize]| TensorType::new(DType::F32, shape.to_vec());
    let mut body = Builder::new("draws");
    let key = body.param(i32t(&[2]));
    let step = body.param(TensorType::scalar(DType::I32));
    let acc = body.param(f32t(&[n]));
    let kids = body.random_split(key, 3).unwrap();
    let next = body.slice(kids, &[0, 0], &[1, 2], &[1, 1]).unwrap();
    let next = body.reshape(next, &[2]).unwrap();
    let pair = body.slice(kids, &[1, 0], &[3, 2], &[1, 1]).unwrap();
    let drawn = body.random_bits(pair, &[n]).unwrap();
    let folded = body.random_fold_in(key, step).unwrap();
    let u = body.random_uniform(folded, &[n], DType::F32).unwrap();
    let acc2 = body.add(acc, u).unwrap();
    let one = body.scalar(1.0, DType::I32).unwrap();
    let step2 = body.add(step, one).unwrap();
    let body = body.finish(&[next, step2, acc2, drawn]).unwrap();

    let mut b = Builder::new("draw_loop");
    let key = b.param(i32t(&[2]));
    let step = b.param(TensorType::scalar(DType::I32));
    let acc = b.param(f32t(&[n]));
    let out = b.scan(Arc::new(body), &[], &[key, step, acc], &[], ScanOpts::new(length)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn random_draws_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    // Keys with high bits set in both words (sign bits of the i32 patterns),
    // and sizes below, at and past a vector, not multiples of it.
    for (n, key) in [(1, [0, 42]), (37, [-1, 7]), (256, [0x1234_5678, -0x0f0f_0f10]), (1003, [-2, -3])] {
        let f = random_scan(n, 5);
        let ins = vec![
            Tensor::from_vec(vec![2], key.to_vec()).unwrap(),
            Tensor::from_vec(vec![], vec![-4i32]).unwrap(),
            Tensor::from_fn(&TensorType::new(DType::F32, vec![n]), |i| i as f64 * 0.25),
        ];
        assert_eq!(compare(&f, &ins), 1, "n = {n}: the loop ran compiled");
    }
}

/// A scan looking rows of a table up at every step (an embedding lookup):
/// two gathers (clipped and zero-filled, with indices out of range on both
/// sides) feed elementwise work on the carry, and the filled rows are
/// stacked as `ys`.
fn lookup_scan(length: usize) -> Func {
    use graft_core::ops::index::IndexMode;
    let (v, d) = (10, 6);
    let f32t = |shape: &[usize]| TensorType::new(DType::F32, shape.to_vec());
    let i32t = |shape: &[usize]| TensorType::new(DType::I32, shape.to_vec());
    let mut body = Builder::new("lookup");
    let table = body.param(f32t(&[v, d]));
    let h = body.param(f32t(&[d]));
    let idx = body.param(i32t(&[2, 1]));
    let clipped = body.gather(table, idx, 0, &[0], IndexMode::Clip).unwrap();
    let filled = body.gather(table, idx, 0, &[0], IndexMode::Fill).unwrap();
    let a = body.slice(clipped, &[0, 0], &[1, d], &[1, 1]).unwrap();
    let a = body.reshape(a, &[d]).unwrap();
    let b = body.slice(filled, &[1, 0], &[2, d], &[1, 1]).unwrap();
    let b = body.reshape(b, &[d]).unwrap();
    let ab = body.mul(a, b).unwrap();
    let s = body.add(h, ab).unwrap();
    let h2 = body.tanh(s).unwrap();
    let body = body.finish(&[h2, filled]).unwrap();

    let mut b = Builder::new("lookup_loop");
    let table = b.param(f32t(&[v, d]));
    let h = b.param(f32t(&[d]));
    let idx = b.param(i32t(&[length, 2, 1]));
    let out = b.scan(Arc::new(body), &[table], &[h], &[idx], ScanOpts::new(length)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn gathers_in_a_body_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    let length = 7;
    let f = lookup_scan(length);
    let mut ins = inputs(&f, 5);
    let idx: Vec<i32> = (0..2 * length as i32).map(|k| (k * 5) % 14 - 2).collect();
    assert!(idx.iter().any(|&k| k < 0) && idx.iter().any(|&k| k >= 10), "indices out of range on both sides");
    ins[2] = Tensor::from_vec(vec![length, 2, 1], idx).unwrap();
    assert_eq!(compare(&f, &ins), 1, "the loop ran compiled");
}

/// A scan reading a row of a table at a start carried from step to step
/// and writing a row of its carry at another (`dynamic_slice` and
/// `dynamic_update_slice` with i32 starts): the starts run off both ends
/// (clamped into the operand, as the interpreter does), and the loop runs
/// compiled.
fn dynamic_rows_scan(length: usize) -> Func {
    let (v, d) = (9, 5);
    let f32t = |shape: &[usize]| TensorType::new(DType::F32, shape.to_vec());
    let i32t = TensorType::new(DType::I32, vec![]);
    let mut body = Builder::new("rows");
    let table = body.param(f32t(&[v, d]));
    let i = body.param(i32t.clone());
    let h = body.param(f32t(&[d]));
    let acc = body.param(f32t(&[v, d]));
    let zero = body.scalar(0.0, DType::I32).unwrap();
    let row = body.dynamic_slice(table, &[i, zero], &[1, d]).unwrap();
    let row = body.reshape(row, &[d]).unwrap();
    let s = body.add(h, row).unwrap();
    let h2 = body.tanh(s).unwrap();
    let two = body.scalar(2.0, DType::I32).unwrap();
    let at = body.sub(two, i).unwrap();
    let put = body.reshape(h2, &[1, d]).unwrap();
    let acc2 = body.dynamic_update_slice(acc, put, &[at, zero]).unwrap();
    let three = body.scalar(3.0, DType::I32).unwrap();
    let i2 = body.add(i, three).unwrap();
    let body = body.finish(&[i2, h2, acc2]).unwrap();

    let mut b = Builder::new("rows_loop");
    let table = b.param(f32t(&[v, d]));
    let i = b.param(i32t);
    let h = b.param(f32t(&[d]));
    let acc = b.param(f32t(&[v, d]));
    let out = b.scan(Arc::new(body), &[table], &[i, h, acc], &[], ScanOpts::new(length)).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn dynamic_slices_in_a_body_run_compiled_and_bitwise() {
    if skip() {
        return;
    }
    let f = dynamic_rows_scan(6);
    let mut ins = inputs(&f, 9);
    // Starts -4, -1, ..., 11 for the slice and 6 down to -9 for the update.
    ins[1] = Tensor::from_vec(vec![], vec![-4i32]).unwrap();
    assert_eq!(compare(&f, &ins), 1, "the loop ran compiled");
}

/// The RK4 step is one kernel whose windows are shifts of one point: its
/// interior segment runs without tests (Note [Interior steps]) and each
/// stage read at a shifted point is taken from the previous step's vector
/// of the same stage instead of computed again (Note [Shifted reuse]),
/// with the interpreter's bits at lengths around the vector size.
#[test]
fn rk4_steps_reuse_shifted_stages() {
    use graft_core::kernel::interior::{reuse_plan, segment, Reuse};
    let n = 1000;
    let f = ode(n, 4);
    let p = scan_program(&f, 1, 2);
    let step = p.kernels.iter().max_by_key(|k| k.body.len()).expect("the step has kernels");
    let seg = segment(step, 16).expect("the step has an interior segment");
    // Stages are read up to 4 points back; the constant 1 fills point 0.
    assert!(seg.lo <= 4 && seg.hi == n, "segment {}..{}", seg.lo, seg.hi);
    let plan = reuse_plan(step, &seg, 16).expect("shifted stages are reused");
    let shifts = plan.how.iter().filter(|h| matches!(h, Reuse::Shift { .. })).count();
    // k1 is read at 3 shifted points, k2 at 2, k3 at 1 (and the partial
    // states between them likewise).
    assert!(shifts >= 6, "only {shifts} shifted registers reused:\n{step}");
    for (r, h) in plan.how.iter().enumerate() {
        if let Reuse::Shift { from, delta } = *h {
            assert!(plan.carried.contains(&from) && (1..=16).contains(&delta), "register {r}: {h:?}");
            let at = |x: u32| plan.order.iter().position(|&o| o == x as usize).unwrap();
            assert!(at(from) < at(r as u32), "register {r} comes before its source {from}");
        }
    }
    let text = graft_core::kernel::render_c::render_loop(&p, 16);
    assert!(text.contains("GK_LAG(") && text.contains("ihi = end >"), "{text}");
    // The loop's kernels are internal to its unit (called directly, free to
    // inline); only the loop function is exported.
    for k in &p.kernels {
        assert!(text.contains(&format!("\nstatic void {}(int64_t start", k.name)), "{} is exported:\n{text}", k.name);
    }
    assert!(text.contains(&format!("\nvoid {}(int64_t start", p.name)), "{text}");
    if skip() {
        return;
    }
    for n in [17, 31, 32, 33, 48, 64, 65, 1000] {
        let f = ode(n, 3);
        assert_eq!(compare(&f, &inputs(&f, n as u64)), 1, "n = {n}: the loop did not run compiled");
        let g = ode_gradient(n, 3, Remat::Off);
        compare(&g, &inputs(&g, 2 * n as u64));
    }
}

/// A loop step of one-dimensional shifts as stencils make them: a
/// concatenation behind a constant, pads cropping either end, a pad of a
/// reversal (a window of stride -1), a pad of a stride-2 slice, and a
/// select on a producer read one point back (an inlined inside test); the
/// next carry is the select.
fn shifts_loop(dtype: DType, n: usize, steps: usize) -> Func {
    let ty = TensorType::new(dtype, vec![n]);
    let mut b = Builder::new("shifts");
    let x = b.param(ty.clone());
    let _i = b.param(TensorType::scalar(DType::I32));
    let y = b.param(ty.clone());
    let zero = b.scalar(0.0, dtype).unwrap();
    let one = b.scalar(1.0, dtype).unwrap();
    let one1 = b.broadcast_in_dim(one, &[1], &[]).unwrap();
    let head = b.slice(x, &[0], &[n - 1], &[1]).unwrap();
    let right1 = b.concatenate(&[one1, head], 0).unwrap();
    let right3 = b.pad(y, zero, &[3], &[-3], &[0]).unwrap();
    let left2 = b.pad(x, one, &[-2], &[2], &[0]).unwrap();
    let rev = b.reverse(y, &[0]).unwrap();
    let rev = b.pad(rev, zero, &[1], &[-1], &[0]).unwrap();
    let half = b.slice(x, &[0], &[n], &[2]).unwrap();
    let half = b.pad(half, one, &[0], &[(n / 2) as i64], &[0]).unwrap();
    let s = b.mul(y, right1).unwrap();
    let s = b.add(s, right3).unwrap();
    let s = b.sub(s, left2).unwrap();
    let s = b.add(s, rev).unwrap();
    let s = b.add(s, half).unwrap();
    let s = b.tanh(s).unwrap();
    let shifted = b.pad(s, zero, &[1], &[-1], &[0]).unwrap();
    let shifted = b.mul(shifted, right1).unwrap();
    let gt = b.compare(Compare::Gt, shifted, x).unwrap();
    let next = b.select(gt, shifted, s).unwrap();
    let body = b.finish(&[next]).unwrap();

    let mut b = Builder::new("shifts_loop");
    let x = b.param(ty.clone());
    let y0 = b.param(ty);
    let out = b.fori(steps, &body, &[x], &[y0], Remat::Off).unwrap();
    b.finish(&out).unwrap()
}

/// Loop kernels whose windows are all one-dimensional run whole vector
/// steps of their interior segment without tests (Note [Interior steps])
/// and take values read at shifted points from the previous step (Note
/// [Shifted reuse]): at every length from a single vector to several,
/// f32 and f64, they give the interpreter's bits (constant sizes and
/// size-generic, which does not split).
#[test]
fn one_dimensional_windows_take_interior_steps_bitwise_equal() {
    // Around one, two, three and four vectors of 8 and 16 lanes.
    let lengths = [4, 7, 9, 16, 17, 20, 31, 33, 48, 64, 65, 1000, 1003];
    for dtype in [DType::F32, DType::F64] {
        for n in lengths {
            let f = shifts_loop(dtype, n, 3);
            if n == 1000 {
                let p = scan_program(&f, 1, 2);
                let text = graft_core::kernel::render_c::render_loop(&p, 16);
                assert!(text.contains("ihi = end >"), "{dtype:?}: no interior steps in\n{p}");
                // `tanh(s)` read one point back is the previous lane of `tanh(s)`.
                assert!(text.contains("GK_LAG("), "{dtype:?}: nothing reused in\n{p}");
            }
            if !skip() {
                assert_eq!(compare(&f, &inputs(&f, n as u64)), 1, "{dtype:?} n = {n}: the loop did not run compiled");
            }
        }
    }
}
