//! vmap as a graph rewrite: for every family with a batching rule, with
//! random in_axes/out_axes and batch sizes, `vmap(f)(xs)` equals stacking
//! `f(x_i)` computed one example at a time (exact for integer ops, 1e-12
//! relative for f64); the rewritten graph's size does not depend on the
//! batch size; compositions with grad; nested vmap; error messages.

use crate::common;

use common::vmap::{assert_same as assert_close, check_vmap as check, take, Gen};
use common::{run, Rng};
use graft_core::ad::{grad, Wrt};
use graft_core::batch::{batch_size_of, vmap_for_args, vmap_func, vmap_func_signed};
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::cumulative::CumKind;
use graft_core::ops::index::IndexMode;
use graft_core::ops::reduce::ReduceKind;
use graft_core::ops::unary::Unary;
use graft_core::ops::window::WindowKind;
use graft_core::{Builder, DType, Func, IrError, Op, Tensor, TensorType, Value};
use std::sync::Arc;

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn t64(shape: &[usize]) -> TensorType {
    ty(DType::F64, shape)
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

const X: Gen = Gen::F(-2.0, 2.0);
const TRIALS: usize = 12;

#[test]
fn unary_family() {
    let f = func("unary", &[t64(&[2, 3])], |b, p| {
        let e = b.exp(p[0])?;
        let t = b.tanh(e)?;
        let s = b.sin(p[0])?;
        Ok(vec![b.neg(t)?, s])
    });
    check("unary", &f, &[X], TRIALS);
    let fi = func("unary_i32", &[ty(DType::I32, &[4])], |b, p| Ok(vec![b.abs(p[0])?]));
    check("unary_i32", &fi, &[Gen::I(-9, 9)], TRIALS);
}

#[test]
fn binary_compare_select_family() {
    let f = func("binary", &[t64(&[2, 3]), t64(&[2, 3]), t64(&[2, 3])], |b, p| {
        let s = b.add(p[0], p[1])?;
        let m = b.mul(s, p[2])?;
        let mx = b.max(m, p[1])?;
        let lt = b.lt(p[0], p[2])?;
        let sel = b.select(lt, mx, p[1])?;
        Ok(vec![sel, lt])
    });
    check("binary", &f, &[X, X, X], TRIALS);
    let fi = func("binary_i64", &[ty(DType::I64, &[3]), ty(DType::I64, &[3])], |b, p| {
        let s = b.sub(p[0], p[1])?;
        Ok(vec![b.mul(s, p[0])?])
    });
    check("binary_i64", &fi, &[Gen::I(-50, 50), Gen::I(-50, 50)], TRIALS);
}

/// Every unary, binary and comparison op, each on the first of f64, i32 and
/// bool it accepts (their batching rule is the shared elementwise one).
#[test]
fn every_elementwise_op() {
    let dtype = |accepts: &dyn Fn(DType) -> bool| {
        [DType::F64, DType::I32, DType::Bool].into_iter().find(|&d| accepts(d)).unwrap()
    };
    let gen = |d: DType| if d == DType::F64 { X } else { Gen::I(-9, 9) };
    for op in Unary::ALL {
        let d = dtype(&|d| op.accepts(d));
        let f = func(op.name(), &[ty(d, &[2, 3])], |b, p| Ok(vec![b.unary(op, p[0])?]));
        check(op.name(), &f, &[gen(d)], TRIALS);
    }
    for op in Binary::ALL {
        let d = dtype(&|d| op.accepts(d));
        let f = func(op.name(), &[ty(d, &[2, 3]), ty(d, &[3])], |b, p| {
            let y = b.broadcast_in_dim(p[1], &[2, 3], &[1])?;
            Ok(vec![b.binary(op, p[0], y)?])
        });
        check(op.name(), &f, &[gen(d), gen(d)], TRIALS);
    }
    for op in Compare::ALL {
        let f = func(op.name(), &[t64(&[2, 3]), t64(&[2, 3])], |b, p| Ok(vec![b.compare(op, p[0], p[1])?]));
        check(op.name(), &f, &[Gen::I(-2, 2), Gen::I(-2, 2)], TRIALS);
    }
}

/// The primitives whose batching rules this file checks, for the coverage
/// guard (`prim_coverage.rs`): `Family` or `Family::name`, where `Family::*`
/// is every kind of the family except those in [`EXEMPT`] (the test loops
/// over the family's `ALL`).
pub(crate) fn covered() -> Vec<String> {
    [
        "Unary::*",
        "Binary::*",
        "Compare::*",
        "Select",
        "Convert",
        "StopGradient",
        "Iota",
        "Constant",
        "BroadcastInDim",
        "Reshape",
        "Transpose",
        "Slice",
        "Pad",
        "Concatenate",
        "Reverse",
        "Reduce::*",
        "ArgReduce::argmax",
        "ArgReduce::argmin",
        "Cumulative::cumsum",
        "Cumulative::cummax",
        "Cumulative::cummin",
        "Cumulative::cumprod",
        "DotGeneral",
        "Gather",
        "ScatterAdd",
        "Argsort",
        "DynamicSlice",
        "DynamicUpdateSlice",
        "ConvGeneral",
        "ReduceWindow::*",
        "Call",
        "Checkpoint",
        "CustomJvp",
        "RandomBits",
        "RandomSplit",
        "RandomUniform",
    ]
    .map(String::from)
    .to_vec()
}

/// Primitives this file does not check, and why (for `prim_coverage.rs`).
pub(crate) const EXEMPT: &[(&str, &str)] = &[
    ("Fma", "fma.rs (batching_rule)"),
    ("RandomFoldIn", "random.rs (fold_in_under_vmap_matches_jax: JAX's values for batched data and keys)"),
    (
        "Collective",
        "collective.rs (vmap with the axis name equals the thread group; vmap over another axis keeps the batch)",
    ),
    ("DebugPrint", "no results to compare: debug_print.rs (one line per example, nested vmaps)"),
    ("Cholesky", "linalg_decomp.rs (vmap_equals_the_per_example_loop: SPD inputs needed)"),
    ("TriangularSolve", "linalg_decomp.rs (vmap_equals_the_per_example_loop, every option)"),
    ("Lu", "linalg_decomp.rs (vmap_equals_the_per_example_loop)"),
    ("Qr", "linalg_spectral.rs (vmap_equals_the_per_example_loop: sign-fixed factors)"),
    ("Eigh", "linalg_spectral.rs (vmap_equals_the_per_example_loop: sign-invariant outputs)"),
    ("Svd", "linalg_spectral.rs (vmap_equals_the_per_example_loop: sign-invariant outputs)"),
    ("Cond", "cond.rs (vmap_of_cond_with_mixed_predicates, vmap_of_grad_through_cond)"),
    ("Scan", "scan.rs (vmap_of_scan_equals_per_example_runs, vmap_of_grad_through_scan)"),
    ("While", "while_loop.rs (vmap_with_per_example_trip_counts)"),
    ("WhileVjp", "while_loop.rs (vmap of grad in vmap_with_per_example_trip_counts)"),
    ("WhileJvp", "known gap: no test batches while_jvp"),
    ("WhileHvp", "known gap: no test batches while_hvp"),
    ("CustomVjp", "known gap: no test batches custom_vjp"),
    ("CustomVjpTangent", "known gap: no test batches custom_vjp's tangent map"),
];

#[test]
fn convert_stop_gradient_iota_constant() {
    let f = func("cast", &[t64(&[2, 3])], |b, p| {
        let c = b.convert(p[0], DType::I32)?;
        let io = b.iota(DType::I32, &[2, 3], 1)?;
        let s = b.add(c, io)?;
        let k = b.constant(Tensor::from_vec(vec![2usize, 3], vec![1.0f64, 2., 3., 4., 5., 6.]).unwrap())?;
        let sg = b.stop_gradient(p[0])?;
        let y = b.mul(sg, k)?;
        Ok(vec![s, y, k])
    });
    check("cast", &f, &[Gen::F(-9.0, 9.0)], TRIALS);
}

#[test]
fn shape_family() {
    let f = func("shape", &[t64(&[2, 3]), t64(&[2, 3]), t64(&[])], |b, p| {
        let bc = b.broadcast_in_dim(p[0], &[4, 2, 3], &[1, 2])?;
        let rs = b.reshape(p[1], &[3, 2])?;
        let tr = b.transpose(bc, &[2, 0, 1])?;
        let sl = b.slice(tr, &[0, 1, 0], &[3, 4, 2], &[2, 2, 1])?;
        let pd = b.pad(p[0], p[2], &[1, -1], &[0, 2], &[1, 0])?;
        let cc = b.concatenate(&[p[0], p[1], p[0]], 1)?;
        let rv = b.reverse(cc, &[0, 1])?;
        Ok(vec![bc, rs, tr, sl, pd, rv])
    });
    check("shape", &f, &[X, X, X], TRIALS * 2);
}

#[test]
fn reduce_family() {
    let f = func("reduce", &[t64(&[2, 3, 4])], |b, p| {
        let mut outs = Vec::new();
        for k in ReduceKind::ALL {
            outs.push(b.reduce(k, p[0], &[0, 2])?);
        }
        outs.push(b.reduce_sum(p[0], &[1])?);
        outs.push(b.reduce_max(p[0], &[0, 1, 2])?);
        outs.push(b.argmax(p[0], 1, DType::I32)?);
        outs.push(b.argmin(p[0], 2, DType::I64)?);
        Ok(outs)
    });
    check("reduce", &f, &[X], TRIALS);
    let fi = func("reduce_i32", &[ty(DType::I32, &[3, 2])], |b, p| Ok(vec![b.reduce_sum(p[0], &[0])?]));
    check("reduce_i32", &fi, &[Gen::I(-9, 9)], TRIALS);
}

#[test]
fn cumulative_family() {
    let f = func("cumulative", &[t64(&[3, 4])], |b, p| {
        let mut outs = Vec::new();
        for (k, rev) in [(CumKind::Sum, false), (CumKind::Max, true), (CumKind::Min, false), (CumKind::Prod, true)] {
            outs.push(b.cumulative(k, p[0], 1, rev)?);
        }
        outs.push(b.cumsum(p[0], 0, false)?);
        Ok(outs)
    });
    check("cumulative", &f, &[X], TRIALS);
}

#[test]
fn dot_general_family() {
    let f = func("matmul", &[t64(&[2, 3]), t64(&[3, 4])], |b, p| Ok(vec![b.matmul2d(p[0], p[1])?]));
    check("matmul", &f, &[X, X], TRIALS * 2);
    let g = func("batched_dot", &[t64(&[2, 3, 4]), t64(&[5, 2, 4])], |b, p| {
        Ok(vec![b.dot_general(p[0], p[1], &[2], &[2], &[0], &[1])?])
    });
    check("batched_dot", &g, &[X, X], TRIALS * 2);
    let fi = func("matmul_i32", &[ty(DType::I32, &[2, 3]), ty(DType::I32, &[3])], |b, p| {
        Ok(vec![b.dot_general(p[0], p[1], &[1], &[0], &[], &[])?])
    });
    check("matmul_i32", &fi, &[Gen::I(-5, 5), Gen::I(-5, 5)], TRIALS);
}

#[test]
fn gather_scatter_family() {
    let f = func("gather", &[t64(&[5, 3]), ty(DType::I32, &[4, 1])], |b, p| {
        Ok(vec![b.gather(p[0], p[1], 0, &[0], IndexMode::Clip)?])
    });
    check("gather", &f, &[X, Gen::I(-1, 5)], TRIALS * 2);
    let g = func("gather_bd", &[t64(&[2, 5, 3]), ty(DType::I32, &[2, 4, 2])], |b, p| {
        Ok(vec![b.gather(p[0], p[1], 1, &[1, 2], IndexMode::Fill)?])
    });
    check("gather_bd", &g, &[X, Gen::I(-1, 5)], TRIALS * 2);
    // A batched operand with shared indices keeps its batch dim as a sliced
    // axis (no broadcast indices): every operand axis, including one between
    // the index axes, and a middle index axis.
    let mut rng = Rng(11);
    let h = func("gather_mid", &[t64(&[4, 5, 3]), ty(DType::I32, &[6, 1])], |b, p| {
        Ok(vec![b.gather(p[0], p[1], 0, &[1], IndexMode::Clip)?])
    });
    for (name, f, rank) in [("gather", &f, 2), ("gather_bd", &g, 3), ("gather_mid", &h, 3)] {
        for a in 0..=rank {
            for out in [0, -1] {
                let gens = [X, Gen::I(-1, 5)];
                common::vmap::check_vmap_axes(name, f, &gens, &[Some(a), None], &[Some(out)], 3, &mut rng);
            }
        }
    }
    let s = func("scatter", &[t64(&[5, 3]), ty(DType::I32, &[4, 1]), t64(&[4, 3])], |b, p| {
        Ok(vec![b.scatter_add(p[0], p[1], p[2], 0, &[0], IndexMode::Clip)?])
    });
    check("scatter", &s, &[X, Gen::I(0, 4), X], TRIALS * 2);
}

#[test]
fn dynamic_slice_and_update() {
    let f = func("dynamic", &[t64(&[5, 4]), t64(&[2, 2]), ty(DType::I32, &[]), ty(DType::I64, &[])], |b, p| {
        let s = b.dynamic_slice(p[0], &[p[2], p[3]], &[3, 2])?;
        let u = b.dynamic_update_slice(p[0], p[1], &[p[3], p[2]])?;
        Ok(vec![s, u])
    });
    check("dynamic", &f, &[X, X, Gen::SharedI(-1, 4), Gen::SharedI(0, 3)], TRIALS);
    // Batched starts (lowered to gather / scatter_add), starts out of range are clamped.
    check("dynamic_batched_starts", &f, &[X, X, Gen::I(-2, 5), Gen::I(-1, 4)], TRIALS * 3);
}

#[test]
fn conv_family() {
    let f = func("conv", &[t64(&[2, 4, 5]), t64(&[6, 2, 3])], |b, p| {
        let params = graft_core::ops::conv::ConvGeneral {
            strides: vec![2],
            padding: vec![(1, 0)],
            lhs_dilation: vec![1],
            rhs_dilation: vec![1],
            feature_group_count: 2,
            layout: Default::default(),
        };
        Ok(vec![b.conv_general(p[0], p[1], params)?])
    });
    check("conv_lhs", &f, &[X, Gen::Shared(-1.0, 1.0)], TRIALS);
    // Batched kernels: folded into the feature groups (both batched) or into O (rhs only).
    check("conv", &f, &[X, X], TRIALS * 3);
    let f2 = func("conv2d", &[t64(&[1, 2, 4, 3]), t64(&[4, 2, 2, 2])], |b, p| {
        let params = graft_core::ops::conv::ConvGeneral {
            strides: vec![1, 1],
            padding: vec![(0, 1), (1, 0)],
            lhs_dilation: vec![1, 1],
            rhs_dilation: vec![2, 1],
            feature_group_count: 1,
            layout: Default::default(),
        };
        Ok(vec![b.conv_general(p[0], p[1], params)?])
    });
    check("conv2d", &f2, &[X, X], TRIALS * 2);
    // Swapped layouts batch through the canonical rule.
    use graft_core::ops::conv::ConvLayout;
    for (layout, xs, ws) in [
        (ConvLayout::WEIGHT_GRAD, [3, 2, 4, 3], [3, 4, 2, 2]),
        (ConvLayout { rhs_io: true, ..Default::default() }, [2, 3, 4, 3], [3, 4, 2, 2]),
        (ConvLayout { lhs_cn: true, out_cn: true, ..Default::default() }, [3, 2, 4, 3], [4, 3, 2, 2]),
    ] {
        let f3 = func("conv2d_layout", &[t64(&xs), t64(&ws)], move |b, p| {
            let params = graft_core::ops::conv::ConvGeneral {
                padding: vec![(0, 1), (1, 0)],
                rhs_dilation: vec![2, 1],
                layout,
                ..graft_core::ops::conv::ConvGeneral::unit(2)
            };
            Ok(vec![b.conv_general(p[0], p[1], params)?])
        });
        check("conv2d_layout", &f3, &[X, X], TRIALS);
        check("conv2d_layout_lhs", &f3, &[X, Gen::Shared(-1.0, 1.0)], TRIALS);
        check("conv2d_layout_rhs", &f3, &[Gen::Shared(-1.0, 1.0), X], TRIALS);
    }
}

#[test]
fn reduce_window_family() {
    let f = func("window", &[t64(&[4, 5])], |b, p| {
        let s = b.reduce_window_simple(WindowKind::Sum, p[0], &[2, 2], &[1, 2], &[(0, 1), (1, 0)])?;
        let m = b.reduce_window(WindowKind::Max, p[0], &[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[2, 1], &[1, 2])?;
        let n = b.reduce_window_simple(WindowKind::Min, p[0], &[3, 1], &[1, 1], &[(1, 1), (0, 0)])?;
        Ok(vec![s, m, n])
    });
    check("window", &f, &[X], TRIALS);
}

#[test]
fn call_and_checkpoint() {
    let inner = Arc::new(func("inner", &[t64(&[3]), t64(&[3])], |b, p| {
        let m = b.mul(p[0], p[1])?;
        let s = b.reduce_sum(m, &[0])?;
        Ok(vec![s, b.sin(p[0])?])
    }));
    let f = func("outer", &[t64(&[3]), t64(&[3])], |b, p| {
        let c = b.call(inner.clone(), p)?;
        let k = b.checkpoint(inner.clone(), &[c[1], p[1]])?;
        Ok(vec![c[0], k[0], k[1]])
    });
    check("call", &f, &[X, X], TRIALS);
}

#[test]
fn custom_jvp_survives_vmap() {
    // f(x) = sin(x) with a deliberately wrong rule (tangent * 3) to see it survive.
    let fx = Arc::new(func("f", &[t64(&[2])], |b, p| Ok(vec![b.sin(p[0])?])));
    let rule = Arc::new(func("rule", &[t64(&[2]), t64(&[2])], |b, p| {
        let y = b.sin(p[0])?;
        let three = b.full(3.0, &t64(&[2]))?;
        Ok(vec![y, b.mul(p[1], three)?])
    }));
    let f = func("outer", &[t64(&[2])], |b, p| {
        let y = b.custom_jvp(fx.clone(), rule.clone(), p)?;
        Ok(vec![b.reduce_sum(y[0], &[0])?])
    });
    check("custom_jvp", &f, &[X], TRIALS);
    let g = grad(&f, &Wrt::All).unwrap();
    let vg = vmap_func(&g, &[Some(0)], &[Some(0)], 3).unwrap();
    let xs = Tensor::from_vec(vec![3usize, 2], vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6]).unwrap();
    let out = run(&vg, &[xs]);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![3.0; 6], "the user's rule (3x) is used under vmap");
}

#[test]
fn graph_size_does_not_depend_on_batch_size() {
    let f = func("mix", &[t64(&[3, 4]), t64(&[4, 2]), t64(&[3])], |b, p| {
        let d = b.matmul2d(p[0], p[1])?;
        let t = b.tanh(d)?;
        let r = b.reduce_sum(t, &[1])?;
        let s = b.add(r, p[2])?;
        let c = b.cumsum(s, 0, false)?;
        let tr = b.transpose(p[0], &[1, 0])?;
        let rs = b.reshape(tr, &[12])?;
        Ok(vec![c, rs])
    });
    let ia = [Some(1), None, Some(0)];
    let oa = [Some(1), Some(0)];
    let n2 = vmap_func(&f, &ia, &oa, 2).unwrap().eqns.len();
    let n64 = vmap_func(&f, &ia, &oa, 64).unwrap().eqns.len();
    assert_eq!(n2, n64);
    assert!(n2 < 3 * f.eqns.len(), "a handful of moves per equation, not a loop: {n2} for {}", f.eqns.len());
}

/// A 2-layer MLP loss: sum((tanh(x W1 + b1) W2 - y)^2) for one example.
fn mlp_loss(din: usize, dh: usize, dout: usize) -> Func {
    func("mlp", &[t64(&[din, dh]), t64(&[dh]), t64(&[dh, dout]), t64(&[din]), t64(&[dout])], |b, p| {
        let h = b.dot_general(p[3], p[0], &[0], &[0], &[], &[])?;
        let h = b.add(h, p[1])?;
        let h = b.tanh(h)?;
        let o = b.dot_general(h, p[2], &[0], &[0], &[], &[])?;
        let e = b.sub(o, p[4])?;
        let sq = b.mul(e, e)?;
        Ok(vec![b.reduce_sum(sq, &[0])?])
    })
}

#[test]
fn per_example_gradients_of_an_mlp() {
    let (din, dh, dout, n) = (5, 7, 3, 32);
    let f = mlp_loss(din, dh, dout);
    let g = grad(&f, &Wrt::Positions(vec![0, 1, 2])).unwrap();
    let ia = [None, None, None, Some(0), Some(0)];
    let vg = vmap_func(&g, &ia, &[Some(0), Some(0), Some(0)], n).unwrap();
    let mut rng = Rng(42);
    let params: Vec<Tensor> =
        [t64(&[din, dh]), t64(&[dh]), t64(&[dh, dout])].iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    let xs = rng.tensor(&t64(&[n, din]), -1.0, 1.0);
    let ys = rng.tensor(&t64(&[n, dout]), -1.0, 1.0);
    let mut args = params.clone();
    args.push(xs.clone());
    args.push(ys.clone());
    let got = run(&vg, &args);
    for i in 0..n {
        let mut a = params.clone();
        a.push(take(&xs, 0, i));
        a.push(take(&ys, 0, i));
        let want = run(&g, &a);
        for k in 0..3 {
            assert_close(&format!("example {i} gradient {k}"), &take(&got[k], 0, i), &want[k]);
        }
    }
}

#[test]
fn grad_of_sum_of_vmap_is_sum_of_grads() {
    let (din, dh, dout, n) = (4, 3, 2, 6);
    let f = mlp_loss(din, dh, dout);
    let vf = vmap_func(&f, &[None, None, None, Some(0), Some(0)], &[Some(0)], n).unwrap();
    // total(params, xs, ys) = sum(vmap(f)(params, xs, ys))
    let total = func("total", &vf.param_types(), |b, p| {
        let per = b.call(Arc::new(vf.clone()), p)?;
        Ok(vec![b.reduce_sum(per[0], &[0])?])
    });
    let gt = grad(&total, &Wrt::Positions(vec![0, 1, 2])).unwrap();
    let g = grad(&f, &Wrt::Positions(vec![0, 1, 2])).unwrap();
    let mut rng = Rng(5);
    let args: Vec<Tensor> = vf.param_types().iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    let got = run(&gt, &args);
    let mut want: Vec<Vec<f64>> = got.iter().map(|t| vec![0.0; t.numel()]).collect();
    for i in 0..n {
        let mut a = args[..3].to_vec();
        a.push(take(&args[3], 0, i));
        a.push(take(&args[4], 0, i));
        for (w, gi) in want.iter_mut().zip(run(&g, &a)) {
            for (x, y) in w.iter_mut().zip(gi.to_f64_vec()) {
                *x += y;
            }
        }
    }
    for (k, (gk, wk)) in got.iter().zip(&want).enumerate() {
        for (a, b) in gk.to_f64_vec().iter().zip(wk) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "gradient {k}: {a} vs {b}");
        }
    }
}

#[test]
fn nested_vmap_equals_double_loop() {
    let f = func("f", &[t64(&[3]), t64(&[3, 2])], |b, p| {
        let d = b.dot_general(p[0], p[1], &[0], &[0], &[], &[])?;
        let e = b.exp(d)?;
        Ok(vec![b.reduce_sum(e, &[0])?])
    });
    let inner = vmap_func(&f, &[Some(0), None], &[Some(0)], 4).unwrap(); // x: [4,3], w: [3,2] -> [4]
    let outer = vmap_func(&inner, &[Some(1), Some(2)], &[Some(1)], 5).unwrap(); // x: [4,5,3], w: [3,2,5] -> [4,5]
    let mut rng = Rng(9);
    let xs = rng.tensor(&t64(&[4, 5, 3]), -1.0, 1.0);
    let ws = rng.tensor(&t64(&[3, 2, 5]), -1.0, 1.0);
    let got = run(&outer, &[xs.clone(), ws.clone()]);
    for i in 0..4 {
        for j in 0..5 {
            let want = run(&f, &[take(&take(&xs, 0, i), 0, j), take(&ws, 2, j)]);
            let g = take(&take(&got[0], 0, i), 0, j);
            assert_close(&format!("({i},{j})"), &g, &want[0]);
        }
    }
}

#[test]
fn unbatched_outputs_are_broadcast_or_kept() {
    let f = func("f", &[t64(&[2]), t64(&[2])], |b, p| Ok(vec![b.exp(p[1])?, b.neg(p[1])?, b.neg(p[0])?]));
    let vf = vmap_func(&f, &[Some(0), None], &[Some(1), None, Some(0)], 3).unwrap();
    assert_eq!(vf.output_types(), vec![t64(&[2, 3]), t64(&[2]), t64(&[3, 2])]);
    let xs = Tensor::from_vec(vec![3usize, 2], vec![1.0f64, 2., 3., 4., 5., 6.]).unwrap();
    let out = run(&vf, &[xs, Tensor::vec1(&[0.0f64, 1.0])]);
    // graft's vectorised exp (within 1 ulp of std), so the check can stay exact.
    let e1 = graft_core::ops::mathfn::exp_f64(1.0);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![1.0, 1.0, 1.0, e1, e1, e1], "broadcast along axis 1");
    assert_eq!(out[1].to_vec::<f64>().unwrap(), vec![-0.0, -1.0]);
    assert_eq!(out[2].to_vec::<f64>().unwrap(), vec![-1.0, -2., -3., -4., -5., -6.]);
    let e = vmap_func(&f, &[None, Some(0)], &[None, Some(0), Some(0)], 3).unwrap_err();
    assert!(e.to_string().contains("out_axes[0] is None"), "{e}");
    // Equations on unbatched values are copied unchanged.
    assert_eq!(vf.eqns.iter().filter(|q| q.prim.name() == "exp").count(), 1);
}

#[test]
fn mismatched_batch_sizes_name_the_arguments() {
    let f = func("f", &[t64(&[2]), t64(&[2]), t64(&[])], |b, p| Ok(vec![b.add(p[0], p[1])?]));
    let e =
        vmap_for_args(&f, &[Some(0), Some(1), None], &[Some(0)], &[t64(&[3, 2]), t64(&[2, 5]), t64(&[])], None, None)
            .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, IrError::Invalid { .. }), "{e:?}");
    assert!(msg.contains("argument 0 has size 3") && msg.contains("argument 1 has size 5"), "{msg}");
    let ok = batch_size_of(&f, &[Some(0), Some(1), None], &[t64(&[4, 2]), t64(&[2, 4]), t64(&[])]).unwrap();
    assert_eq!(ok, Some(4));
    let e = vmap_for_args(&f, &[None, None, None], &[Some(0)], &f.param_types(), None, None).unwrap_err();
    assert!(e.to_string().contains("batch size must be given"), "{e}");
}

#[test]
fn out_of_range_in_axes_are_errors() {
    let f = func("f", &[t64(&[2, 3])], |b, p| Ok(vec![b.exp(p[0])?]));
    let e = vmap_func(&f, &[Some(3)], &[Some(0)], 4).unwrap_err();
    assert!(e.to_string().contains("in_axes[0] = 3 is out of range for argument 0 of rank 2"), "{e}");
    let e = vmap_func(&f, &[Some(0)], &[Some(4)], 4).unwrap_err();
    assert!(e.to_string().contains("out_axes[0] = 4"), "{e}");
    let e = vmap_func_signed(&f, &[Some(-4)], &[Some(0)], 4).unwrap_err();
    assert!(e.to_string().contains("in_axes[0] = -4 is out of range"), "{e}");
    // -1 is the last of the rank + 1 insertion positions.
    let vf = vmap_func_signed(&f, &[Some(-1)], &[Some(-2)], 4).unwrap();
    assert_eq!(vf.param_types(), vec![t64(&[2, 3, 4])]);
    assert_eq!(vf.output_types(), vec![t64(&[2, 4, 3])]);
}

#[test]
fn random_shared_and_batched_keys() {
    // An unbatched key is shared: the equation is copied, every example sees the same stream.
    let shared = func("shared", &[ty(DType::I32, &[2]), t64(&[3])], |b, p| {
        let u = b.random_uniform(p[0], &[3], DType::F64)?;
        Ok(vec![b.add(u, p[1])?])
    });
    check("random_shared_key", &shared, &[Gen::SharedI(0, 1000), X], 4);
    // A batched key: independent per-example streams, each equal to what that key draws alone.
    let all = func("rng_all", &[ty(DType::I32, &[2])], |b, p| {
        let u = b.random_uniform(p[0], &[3], DType::F64)?;
        let bits = b.random_bits(p[0], &[2, 2])?;
        let ks = b.random_split(p[0], 3)?;
        Ok(vec![u, bits, ks])
    });
    check("random_batched_key", &all, &[Gen::Key], TRIALS);
}

/// A small nonlinear function exercising several families.
fn mixed() -> Func {
    func("mixed", &[t64(&[3]), t64(&[3, 2])], |b, p| {
        let d = b.dot_general(p[0], p[1], &[0], &[0], &[], &[])?;
        let t = b.tanh(d)?;
        let s = b.sin(p[0])?;
        let c = b.cumsum(s, 0, false)?;
        let r = b.reduce_sum(c, &[0])?;
        let rb = b.broadcast_in_dim(r, &[2], &[])?;
        Ok(vec![b.mul(t, rb)?])
    })
}

#[test]
fn vmap_of_jvp_and_vjp() {
    let f = mixed();
    let jf = graft_core::ad::jvp_func(&f).unwrap();
    check("vmap_jvp", &jf, &[X, X, X, X], TRIALS);
    let vf = graft_core::ad::vjp_func(&f, &Wrt::All).unwrap();
    check("vmap_vjp", &vf, &[X, X, X], TRIALS);
}

#[test]
fn jvp_of_vmap_equals_vmap_of_jvp() {
    let f = mixed();
    let n = 4;
    let jv = graft_core::ad::jvp_func(&vmap_func(&f, &[Some(0), None], &[Some(0)], n).unwrap()).unwrap();
    let vj = vmap_func(&graft_core::ad::jvp_func(&f).unwrap(), &[Some(0), None, Some(0), None], &[Some(0), Some(0)], n)
        .unwrap();
    let mut rng = Rng(3);
    let args: Vec<Tensor> = jv.param_types().iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    let (a, b) = (run(&jv, &args), run(&vj, &args));
    for k in 0..2 {
        assert_close(&format!("output {k}"), &a[k], &b[k]);
    }
}

#[test]
fn vmap_of_second_derivative() {
    // f(x) = sin(x) x^2; f'' = (2 - x^2) sin x + 4 x cos x.
    let f = func("f", &[t64(&[])], |b, p| {
        let s = b.sin(p[0])?;
        let x2 = b.mul(p[0], p[0])?;
        Ok(vec![b.mul(s, x2)?])
    });
    let g2 = grad(&grad(&f, &Wrt::All).unwrap(), &Wrt::All).unwrap();
    check("vmap_grad_grad", &g2, &[X], TRIALS);
    let vg = vmap_func(&g2, &[Some(0)], &[Some(0)], 5).unwrap();
    let xs: [f64; 5] = [-1.5, -0.3, 0.0, 0.7, 2.0];
    let out = run(&vg, &[Tensor::vec1(&xs)]).remove(0).to_vec::<f64>().unwrap();
    for (x, y) in xs.iter().zip(out) {
        let want = (2.0 - x * x) * x.sin() + 4.0 * x * x.cos();
        assert!((y - want).abs() <= 1e-12 * want.abs().max(1.0), "f''({x}) = {y}, expected {want}");
    }
}

#[test]
fn argsort_and_sort() {
    let f = func("sort", &[t64(&[3, 4])], |b, p| {
        let a1 = b.argsort(p[0], 1, DType::I32)?;
        let a0 = b.argsort(p[0], 0, DType::I64)?;
        let s0 = graft_core::composite::sort::sort(b, p[0], 0)?;
        let s1 = graft_core::composite::sort::sort(b, p[0], 1)?;
        Ok(vec![a1, a0, s0, s1])
    });
    check("sort", &f, &[X], TRIALS);
}
