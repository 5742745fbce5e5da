//! Every primitive's derivative rules, checked numerically in f64:
//! JVP against central finite differences, JVP against VJP by the
//! dot-product test, and the same checks on the JVP itself (second order).

use crate::common;

use common::{check_grads, Rng};
use graft_core::ad::{grad, jvp_func, Wrt};
use graft_core::composite::broadcast;
use graft_core::ops::binary::Binary;
use graft_core::ops::conv::{ConvGeneral, ConvLayout};
use graft_core::ops::cumulative::CumKind;
use graft_core::ops::index::IndexMode;
use graft_core::ops::reduce::ReduceKind;
use graft_core::ops::unary::Unary;
use graft_core::ops::window::{ReduceWindow, WindowKind};
use graft_core::{Builder, DType, Func, IrError, Op, Tensor, TensorType, Value};

fn f64t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// Builds a function from parameter types and a body.
fn func(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>) -> Func {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

/// First- and second-order checks at a random point drawn from `[lo, hi)`.
fn check(name: &str, f: &Func, lo: f64, hi: f64, seed: u64) {
    let mut rng = Rng(seed);
    let inputs: Vec<Tensor> = f
        .param_types()
        .iter()
        .map(|t| if t.dtype.is_float() { rng.tensor(t, lo, hi) } else { Tensor::from_fn(t, |i| (i % 3) as f64) })
        .collect();
    check_grads(name, f, &inputs, &mut rng, 1e-6, 1e-6);
    let second = jvp_func(f).unwrap();
    let mut ins2 = inputs.clone();
    for t in &inputs {
        if t.dtype().is_float() {
            ins2.push(rng.tensor(&t.ty(), -1.0, 1.0));
        }
    }
    check_grads(&format!("{name} (2nd order)"), &second, &ins2, &mut rng, 1e-5, 1e-5);
}

#[test]
fn unary_rules() {
    for op in Unary::ALL {
        let (lo, hi) = match op {
            Unary::Log | Unary::Sqrt | Unary::Rsqrt => (0.5, 2.0),
            Unary::Log1p => (-0.5, 2.0),
            Unary::Tan => (-1.0, 1.0),
            Unary::ErfInv => (-0.9, 0.9),
            // Piecewise constant ops: stay away from their jumps.
            Unary::Floor | Unary::Ceil | Unary::Round | Unary::Sign => (0.1, 0.4),
            Unary::Not => continue,
            _ => (-2.0, 2.0),
        };
        let abs_safe = if op == Unary::Abs { 0.2 } else { lo };
        for shape in [vec![], vec![3], vec![2, 1, 3]] {
            let f = func(&[f64t(&shape)], |b, p| Ok(vec![b.unary(op, p[0])?]));
            check(&format!("{op:?} {shape:?}"), &f, abs_safe, hi, 7);
        }
    }
}

/// The binary ops `binary_rules_with_broadcasting` checks (`and`/`or` are
/// in [`EXEMPT`]).
const BINARY_OPS: [Binary; 9] = [
    Binary::Add,
    Binary::Sub,
    Binary::Mul,
    Binary::Div,
    Binary::Pow,
    Binary::Max,
    Binary::Min,
    Binary::Atan2,
    Binary::Rem,
];

/// The primitives whose derivative rules this file checks, for the coverage
/// guard (`prim_coverage.rs`): `Family` or `Family::name`, where `Family::*`
/// is every kind of the family except those in [`EXEMPT`] (the test loops
/// over the family's `ALL`).
pub(crate) fn covered() -> Vec<String> {
    let mut v: Vec<String> = [
        "Unary::*",
        "Compare::gt",
        "Select",
        "Convert",
        "BroadcastInDim",
        "Reshape",
        "Transpose",
        "Slice",
        "Pad",
        "Concatenate",
        "Reverse",
        "DotGeneral",
        "Gather",
        "ScatterAdd",
        "DynamicSlice",
        "DynamicUpdateSlice",
        "ConvGeneral",
        "ReduceWindow::*",
        "Cumulative::*",
        "Reduce::*",
        "ArgReduce::argmax",
        "Argsort",
    ]
    .map(String::from)
    .to_vec();
    v.extend(BINARY_OPS.iter().map(|op| format!("Binary::{}", op.name())));
    v
}

/// Primitives this file does not check, and why (for `prim_coverage.rs`).
pub(crate) const EXEMPT: &[(&str, &str)] = &[
    ("Fma", "fma.rs (derivative_rules: first and second order with broadcasting; transposes_where_linear)"),
    ("Cholesky", "linalg_decomp.rs (cholesky_derivatives_first_and_second_order: SPD inputs needed)"),
    ("TriangularSolve", "linalg_decomp.rs (triangular_solve_derivatives_for_every_option)"),
    ("Lu", "linalg_decomp.rs (lu_derivatives_first_and_second_order)"),
    ("Qr", "linalg_spectral.rs (qr_derivatives_first_and_second_order: full-rank inputs needed)"),
    ("Eigh", "linalg_spectral.rs (eigh_derivatives_first_and_second_order: separated spectra needed)"),
    ("Svd", "linalg_spectral.rs (svd_derivatives_first_and_second_order: separated spectra needed)"),
    ("Unary::not", "bool only: nothing to differentiate"),
    ("Binary::and", "integer and bool only: nothing to differentiate"),
    ("Binary::or", "integer and bool only: nothing to differentiate"),
    ("Compare::eq", "bool result, zero tangent: the shared rule is checked through `gt`"),
    ("Compare::ne", "bool result, zero tangent: the shared rule is checked through `gt`"),
    ("Compare::lt", "bool result, zero tangent: the shared rule is checked through `gt`"),
    ("Compare::le", "bool result, zero tangent: the shared rule is checked through `gt`"),
    ("Compare::ge", "bool result, zero tangent: the shared rule is checked through `gt`"),
    ("ArgReduce::argmin", "integer result, zero tangent: the shared rule is checked through `argmax`"),
    ("StopGradient", "zero derivative by definition: ad_api.rs (stop_gradient_and_unused_parameters_...)"),
    ("Iota", "no operands: zero tangent"),
    ("Constant", "no operands: zero tangent"),
    ("RandomBits", "integer key operand: zero tangent"),
    ("RandomSplit", "integer key operand: zero tangent"),
    ("RandomUniform", "integer key operand: zero tangent"),
    ("RandomFoldIn", "integer operands: zero tangent"),
    ("Collective", "collective.rs (JVP against finite differences of the whole thread group, transpose by the dot-product test summed over ranks, grad of grad)"),
    ("DebugPrint", "no results: debug_print.rs (prints under grad, jvp and vjp; results unchanged)"),
    ("Call", "checked through its callers: checkpoint.rs, cond.rs, scan.rs, custom_rules.rs"),
    ("Cond", "cond.rs (gradients through every branch, second order)"),
    ("Scan", "scan.rs"),
    ("Checkpoint", "checkpoint.rs"),
    ("CustomJvp", "custom_rules.rs (the user's rule is what AD uses)"),
    ("CustomVjp", "custom_rules.rs (the user's rule is what AD uses)"),
    ("CustomVjpTangent", "custom_rules.rs (reverse mode through custom_vjp)"),
    ("While", "while_loop.rs"),
    ("WhileJvp", "while_loop.rs (check_grads of while_jvp)"),
    ("WhileVjp", "while_loop.rs"),
    ("WhileHvp", "while_loop.rs (check_grads of while_hvp)"),
];

#[test]
fn binary_rules_with_broadcasting() {
    let ops = BINARY_OPS;
    let shapes: [(&[usize], &[usize]); 4] = [(&[3], &[3]), (&[2, 3], &[3]), (&[2, 1], &[1, 4]), (&[], &[2, 2])];
    for op in ops {
        for (sa, sb) in shapes {
            let f = func(&[f64t(sa), f64t(sb)], |b, p| Ok(vec![broadcast::binary(b, op, p[0], p[1])?]));
            // Positive operands keep pow, div and rem smooth; max/min see no ties at random points.
            check(&format!("{op:?} {sa:?} {sb:?}"), &f, 0.5, 2.0, 11);
        }
    }
}

#[test]
fn select_and_convert_rules() {
    let f = func(&[f64t(&[4]), f64t(&[4]), f64t(&[4])], |b, p| {
        let pred = b.gt(p[0], p[1])?;
        Ok(vec![b.select(pred, p[1], p[2])?])
    });
    check("select", &f, -1.0, 1.0, 3);
    let g = func(&[f64t(&[3])], |b, p| {
        let lo = b.convert(p[0], DType::F32)?;
        let back = b.convert(lo, DType::F64)?;
        let sq = b.mul(back, p[0])?;
        Ok(vec![sq])
    });
    // f32 rounding makes finite differences coarse: check with a wide step.
    let mut rng = Rng(5);
    let x = rng.tensor(&f64t(&[3]), 0.5, 1.5);
    common::check_grads_tol("convert", &g, &[x], &mut rng, 1e-2, 1e-3, 1e-6);
}

#[test]
fn shape_op_rules() {
    let x23 = f64t(&[2, 3]);
    let cases: Vec<(&str, Func)> = vec![
        ("broadcast_in_dim", func(&[f64t(&[3])], |b, p| Ok(vec![b.broadcast_in_dim(p[0], &[2, 3], &[1])?]))),
        (
            "broadcast_in_dim size-1",
            func(&[f64t(&[1, 3])], |b, p| Ok(vec![b.broadcast_in_dim(p[0], &[4, 2, 3], &[1, 2])?])),
        ),
        ("reshape", func(std::slice::from_ref(&x23), |b, p| Ok(vec![b.reshape(p[0], &[3, 2])?]))),
        ("transpose", func(&[f64t(&[2, 3, 4])], |b, p| Ok(vec![b.transpose(p[0], &[2, 0, 1])?]))),
        ("slice", func(&[f64t(&[5, 4])], |b, p| Ok(vec![b.slice(p[0], &[1, 0], &[5, 3], &[2, 2])?]))),
        ("pad", func(&[x23.clone(), f64t(&[])], |b, p| Ok(vec![b.pad(p[0], p[1], &[1, -1], &[2, 0], &[1, 0])?]))),
        ("concatenate", func(&[x23.clone(), f64t(&[2, 1])], |b, p| Ok(vec![b.concatenate(&[p[0], p[1], p[0]], 1)?]))),
        ("reverse", func(std::slice::from_ref(&x23), |b, p| Ok(vec![b.reverse(p[0], &[0, 1])?]))),
    ];
    for (name, f) in cases {
        check(name, &f, -1.0, 1.0, 17);
    }
}

#[test]
fn dot_general_rules() {
    let cases: Vec<(&str, Func)> = vec![
        (
            "matmul",
            func(&[f64t(&[2, 3]), f64t(&[3, 4])], |b, p| Ok(vec![b.dot_general(p[0], p[1], &[1], &[0], &[], &[])?])),
        ),
        (
            "transposed",
            func(&[f64t(&[3, 2]), f64t(&[4, 3])], |b, p| Ok(vec![b.dot_general(p[0], p[1], &[0], &[1], &[], &[])?])),
        ),
        (
            "batched, odd layout",
            func(&[f64t(&[3, 2, 4]), f64t(&[4, 5, 2])], |b, p| {
                Ok(vec![b.dot_general(p[0], p[1], &[2], &[0], &[1], &[2])?])
            }),
        ),
        (
            "two contractions",
            func(&[f64t(&[2, 3, 4]), f64t(&[4, 3, 2])], |b, p| {
                Ok(vec![b.dot_general(p[0], p[1], &[1, 2], &[1, 0], &[], &[])?])
            }),
        ),
    ];
    for (name, f) in cases {
        check(name, &f, -1.0, 1.0, 23);
    }
}

/// Both gradients of a plain matmul come out of their GEMM in the operand's
/// layout: the transpose rule orders the operands so that no `transpose`
/// follows (a 784x512 weight gradient would otherwise be copied once more).
#[test]
fn matmul_gradients_need_no_transpose() {
    for (x, w) in [([8, 5], [5, 3]), ([1, 7], [7, 1])] {
        let f = func(&[f64t(&x), f64t(&w)], |b, p| {
            let y = b.dot_general(p[0], p[1], &[1], &[0], &[], &[])?;
            Ok(vec![b.reduce(ReduceKind::Sum, y, &[0, 1])?])
        });
        let g = grad(&f, &Wrt::All).unwrap();
        assert_eq!(g.count_prim("dot_general"), 2, "{x:?} @ {w:?}:\n{g}");
        assert_eq!(g.count_prim("transpose"), 0, "{x:?} @ {w:?}:\n{g}");
    }
}

#[test]
fn index_op_rules() {
    let idx_ty = TensorType::new(DType::I32, vec![4, 1]);
    let cases: Vec<(&str, Func)> = vec![
        (
            "gather",
            func(&[f64t(&[3, 2]), idx_ty.clone()], |b, p| Ok(vec![b.gather(p[0], p[1], 0, &[0], IndexMode::Clip)?])),
        ),
        (
            "scatter_add",
            func(&[f64t(&[3, 2]), idx_ty.clone(), f64t(&[4, 2])], |b, p| {
                Ok(vec![b.scatter_add(p[0], p[1], p[2], 0, &[0], IndexMode::Clip)?])
            }),
        ),
        (
            "dynamic_slice",
            func(&[f64t(&[4, 3]), TensorType::scalar(DType::I32), TensorType::scalar(DType::I32)], |b, p| {
                Ok(vec![b.dynamic_slice(p[0], &[p[1], p[2]], &[2, 2])?])
            }),
        ),
        (
            "dynamic_update_slice",
            func(
                &[f64t(&[4, 3]), f64t(&[2, 2]), TensorType::scalar(DType::I32), TensorType::scalar(DType::I32)],
                |b, p| Ok(vec![b.dynamic_update_slice(p[0], p[1], &[p[2], p[3]])?]),
            ),
        ),
    ];
    for (name, f) in cases {
        check(name, &f, -1.0, 1.0, 29);
    }
}

/// A conv_general case: input shape, kernel shape and parameters.
fn conv_case(x: &[usize], w: &[usize], p: ConvGeneral) -> Func {
    func(&[f64t(x), f64t(w)], move |b, ps| Ok(vec![b.conv_general(ps[0], ps[1], p)?]))
}

#[test]
fn conv_general_rules() {
    let cases: Vec<(&str, Func)> = vec![
        ("1-D plain, batch 2", conv_case(&[2, 3, 7], &[4, 3, 3], ConvGeneral::unit(1))),
        (
            // (8 - 3) / 2 is not whole: input row 7 is never read.
            "1-D stride 2, unread tail",
            conv_case(&[2, 2, 8], &[3, 2, 3], ConvGeneral { strides: vec![2], ..ConvGeneral::unit(1) }),
        ),
        (
            "1-D stride 3, padding (1, 2)",
            conv_case(
                &[1, 2, 7],
                &[2, 2, 2],
                ConvGeneral { strides: vec![3], padding: vec![(1, 2)], ..ConvGeneral::unit(1) },
            ),
        ),
        (
            "1-D negative padding, lhs and rhs dilation",
            conv_case(
                &[2, 2, 6],
                &[3, 2, 3],
                ConvGeneral {
                    strides: vec![1],
                    padding: vec![(-1, 2)],
                    lhs_dilation: vec![2],
                    rhs_dilation: vec![2],
                    feature_group_count: 1,
                    layout: Default::default(),
                },
            ),
        ),
        (
            "1-D transposed-conv style: lhs dilation 3, stride 2",
            conv_case(
                &[1, 3, 4],
                &[2, 3, 3],
                ConvGeneral {
                    strides: vec![2],
                    padding: vec![(2, 1)],
                    lhs_dilation: vec![3],
                    rhs_dilation: vec![1],
                    feature_group_count: 1,
                    layout: Default::default(),
                },
            ),
        ),
        (
            "2-D groups 2, stride, mixed padding, rhs dilation",
            conv_case(
                &[2, 4, 5, 6],
                &[6, 2, 2, 3],
                ConvGeneral {
                    strides: vec![2, 1],
                    padding: vec![(1, 0), (0, -1)],
                    lhs_dilation: vec![1, 1],
                    rhs_dilation: vec![1, 2],
                    feature_group_count: 2,
                    layout: Default::default(),
                },
            ),
        ),
        (
            "2-D depthwise, stride (1, 2), padding 1",
            conv_case(
                &[2, 3, 6, 5],
                &[3, 1, 3, 3],
                ConvGeneral {
                    strides: vec![1, 2],
                    padding: vec![(1, 1), (1, 1)],
                    lhs_dilation: vec![1, 1],
                    rhs_dilation: vec![1, 1],
                    feature_group_count: 3,
                    layout: Default::default(),
                },
            ),
        ),
        (
            "1-D depthwise with channel multiplier 2",
            conv_case(&[3, 2, 5], &[4, 1, 2], ConvGeneral { feature_group_count: 2, ..ConvGeneral::unit(1) }),
        ),
        (
            "2-D lhs dilation, stride 2 on both, negative low padding",
            conv_case(
                &[1, 2, 4, 5],
                &[2, 2, 3, 2],
                ConvGeneral {
                    strides: vec![2, 2],
                    padding: vec![(-1, 1), (1, 0)],
                    lhs_dilation: vec![2, 1],
                    rhs_dilation: vec![1, 2],
                    feature_group_count: 1,
                    layout: Default::default(),
                },
            ),
        ),
        (
            "0-D (grouped matmul)",
            conv_case(&[3, 4], &[6, 2], ConvGeneral { feature_group_count: 2, ..ConvGeneral::unit(0) }),
        ),
        (
            // What the weight gradient of a stride-2 convolution emits: the
            // input [N, C, ...] and cotangent [N, O, ...] read in place.
            "2-D weight-gradient layout (CN, IO, CN), rhs dilation 2, padding",
            conv_case(
                &[4, 2, 6, 5],
                &[4, 3, 3, 2],
                ConvGeneral {
                    strides: vec![1, 1],
                    padding: vec![(1, 0), (1, 1)],
                    rhs_dilation: vec![2, 1],
                    layout: ConvLayout::WEIGHT_GRAD,
                    ..ConvGeneral::unit(2)
                },
            ),
        ),
        (
            "1-D input-gradient layout (NC, IO, NC), lhs dilation 2",
            conv_case(
                &[2, 3, 4],
                &[3, 2, 3],
                ConvGeneral {
                    padding: vec![(2, 2)],
                    lhs_dilation: vec![2],
                    layout: ConvLayout { rhs_io: true, ..ConvLayout::CANONICAL },
                    ..ConvGeneral::unit(1)
                },
            ),
        ),
        (
            "1-D groups 2, layout (CN, OI, CN), stride 2",
            conv_case(
                &[4, 2, 7],
                &[6, 2, 3],
                ConvGeneral {
                    strides: vec![2],
                    feature_group_count: 2,
                    layout: ConvLayout { lhs_cn: true, out_cn: true, ..ConvLayout::CANONICAL },
                    ..ConvGeneral::unit(1)
                },
            ),
        ),
    ];
    for (name, f) in cases {
        check(name, &f, -1.0, 1.0, 31);
    }
}

fn window_case(kind: WindowKind, shape: &[usize], p: &ReduceWindow) -> Func {
    let p = ReduceWindow { kind, ..p.clone() };
    func(&[f64t(shape)], move |b, ps| {
        Ok(vec![b.reduce_window(
            p.kind,
            ps[0],
            &p.window,
            &p.strides,
            &p.padding,
            &p.base_dilation,
            &p.window_dilation,
        )?])
    })
}

fn rw(window: &[usize], strides: &[usize], padding: &[(usize, usize)], bd: &[usize], wd: &[usize]) -> ReduceWindow {
    ReduceWindow {
        kind: WindowKind::Sum,
        window: window.to_vec(),
        strides: strides.to_vec(),
        padding: padding.to_vec(),
        base_dilation: bd.to_vec(),
        window_dilation: wd.to_vec(),
    }
}

#[test]
fn reduce_window_rules() {
    // Every window of these configurations holds at least one operand
    // element, so max/min outputs are finite.
    let cases: Vec<(&str, Vec<usize>, ReduceWindow)> = vec![
        ("1-D window 3 stride 2 padding (1, 2)", vec![7], rw(&[3], &[2], &[(1, 2)], &[1], &[1])),
        ("1-D stride 3, unread tail", vec![8], rw(&[2], &[3], &[(0, 0)], &[1], &[1])),
        ("1-D base dilation 2", vec![5], rw(&[3], &[1], &[(1, 1)], &[2], &[1])),
        ("1-D window dilation 2", vec![9], rw(&[3], &[2], &[(0, 1)], &[1], &[2])),
        (
            "3-D mixed: base dilation, window dilation 3, padding",
            vec![2, 5, 6],
            rw(&[1, 3, 3], &[1, 2, 1], &[(0, 0), (1, 0), (2, 1)], &[1, 2, 1], &[1, 1, 3]),
        ),
        (
            "4-D max-pool 3x3 stride 2 padding 1",
            vec![2, 3, 6, 5],
            rw(&[1, 1, 3, 3], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 1), (1, 1)], &[1, 1, 1, 1], &[1, 1, 1, 1]),
        ),
        ("2-D overlapping 2x2 stride 1", vec![4, 5], rw(&[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[1, 1], &[1, 1])),
        ("rank 0", vec![], rw(&[], &[], &[], &[], &[])),
    ];
    for kind in WindowKind::ALL {
        for (name, shape, p) in &cases {
            let f = window_case(kind, shape, p);
            check(&format!("{kind:?} {name}"), &f, -1.0, 1.0, 37);
        }
    }
    // Sum also with base and window dilation together, and all-padding windows.
    let p = rw(&[2, 2], &[2, 1], &[(3, 0), (1, 2)], &[2, 3], &[2, 2]);
    check("Sum all-padding windows", &window_case(WindowKind::Sum, &[3, 3], &p), -1.0, 1.0, 41);
}

/// Runs `grad(f)` at `x` (one parameter).
fn grad_at(f: &Func, x: Vec<f64>, shape: &[usize]) -> Vec<f64> {
    let g = grad(f, &Wrt::All).unwrap();
    let xt = Tensor::from_fn(&f64t(shape), |i| x[i]);
    common::run(&g, &[xt])[0].to_f64_vec()
}

#[test]
fn max_pool_tie_goes_to_first_maximal_element() {
    // 1-D, constant input: every window is a full tie; each output sends its
    // cotangent to the first element of its window.
    let f = func(&[f64t(&[5])], |b, p| {
        let y = b.reduce_window_simple(WindowKind::Max, p[0], &[2], &[1], &[(0, 0)])?;
        Ok(vec![b.reduce_sum(y, &[0])?])
    });
    assert_eq!(grad_at(&f, vec![1.0; 5], &[5]), vec![1.0, 1.0, 1.0, 1.0, 0.0]);
    // 2-D 2x2 windows, stride 2, with padding 1 on the low side: padding
    // never wins a tie, so the first real element of each window does.
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let y = b.reduce_window_simple(WindowKind::Max, p[0], &[2, 2], &[2, 2], &[(1, 0), (1, 0)])?;
        Ok(vec![b.reduce_sum(y, &[0, 1])?])
    });
    // Windows start at padded (-1,-1), (-1,1), (1,-1), (1,1): first real
    // elements (0,0), (0,1), (1,0), (1,1).
    #[rustfmt::skip]
    let expected = vec![1.0, 1.0, 0.0,
                        1.0, 1.0, 0.0,
                        0.0, 0.0, 0.0];
    assert_eq!(grad_at(&f, vec![2.0; 9], &[3, 3]), expected);
    // Min pooling with a partial tie: window [3, 1, 1] -> the first 1.
    let f = func(&[f64t(&[4])], |b, p| {
        let y = b.reduce_window_simple(WindowKind::Min, p[0], &[3], &[1], &[(0, 0)])?;
        Ok(vec![b.reduce_sum(y, &[0])?])
    });
    assert_eq!(grad_at(&f, vec![3.0, 1.0, 1.0, 5.0], &[4]), vec![0.0, 2.0, 0.0, 0.0]);
    // A window made only of padding outputs -inf and has derivative 0.
    let f = func(&[f64t(&[2])], |b, p| {
        let y = b.reduce_window_simple(WindowKind::Max, p[0], &[1], &[1], &[(1, 0)])?;
        let sl = b.slice(y, &[1], &[3], &[1])?;
        Ok(vec![b.reduce_sum(sl, &[0])?])
    });
    assert_eq!(grad_at(&f, vec![0.5, -0.5], &[2]), vec![1.0, 1.0]);
    let jf = jvp_func(&func(&[f64t(&[2])], |b, p| {
        Ok(vec![b.reduce_window_simple(WindowKind::Max, p[0], &[1], &[1], &[(1, 0)])?])
    }))
    .unwrap();
    let x = Tensor::from_fn(&f64t(&[2]), |i| [0.5, -0.5][i]);
    let t = Tensor::from_fn(&f64t(&[2]), |i| [3.0, 4.0][i]);
    let out = common::run(&jf, &[x, t]);
    assert_eq!(out[0].to_f64_vec(), vec![f64::NEG_INFINITY, 0.5, -0.5]);
    assert_eq!(out[1].to_f64_vec(), vec![0.0, 3.0, 4.0]);
}

#[test]
fn cumulative_rules() {
    for kind in CumKind::ALL {
        for (shape, axis) in [(vec![6], 0), (vec![4, 5], 0), (vec![3, 9], 1), (vec![2, 3, 4], 1)] {
            for reverse in [false, true] {
                let f = func(&[f64t(&shape)], |b, p| Ok(vec![b.cumulative(kind, p[0], axis, reverse)?]));
                let name = format!("{kind:?} {shape:?} axis {axis} reverse {reverse}");
                // Products of values in [0.5, 1.5) stay well scaled.
                let (lo, hi) = if kind == CumKind::Prod { (0.5, 1.5) } else { (-1.0, 1.0) };
                check(&name, &f, lo, hi, 43);
            }
        }
    }
}

/// The Jacobian of a one-input, one-output `f` at `x`, column by column from
/// the JVP: `jac[i][j] = d out[i] / d x[j]`.
fn jacobian(f: &Func, x: &[f64]) -> Vec<Vec<f64>> {
    let jf = jvp_func(f).unwrap();
    let ty = f.param_types()[0].clone();
    let n = x.len();
    let xt = Tensor::from_fn(&ty, |i| x[i]);
    let cols: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            let e = Tensor::from_fn(&ty, |i| if i == j { 1.0 } else { 0.0 });
            common::run(&jf, &[xt.clone(), e])[1].to_f64_vec()
        })
        .collect();
    let m = cols[0].len();
    (0..m).map(|i| (0..n).map(|j| cols[j][i]).collect()).collect()
}

#[test]
fn cumprod_and_reduce_prod_exact_at_zeros() {
    for x in [vec![2.0, 0.0, 3.0, 0.5, 4.0], vec![0.0, 2.0, 0.0, 3.0, -1.5], vec![1.5, -2.0, 0.0, 0.0, 0.0]] {
        let n = x.len();
        for reverse in [false, true] {
            let f = func(&[f64t(&[n])], |b, p| Ok(vec![b.cumprod(p[0], 0, reverse)?]));
            let jac = jacobian(&f, &x);
            for i in 0..n {
                for j in 0..n {
                    // Elements in the prefix (suffix when reversed) ending at i.
                    let in_scan = |k: usize| if reverse { k >= i } else { k <= i };
                    let want =
                        if in_scan(j) { (0..n).filter(|&k| in_scan(k) && k != j).map(|k| x[k]).product() } else { 0.0 };
                    assert_eq!(jac[i][j], want, "cumprod {x:?} reverse {reverse}: d y[{i}] / d x[{j}]");
                }
            }
            // The VJP agrees exactly on a sum of outputs.
            let g = func(&[f64t(&[n])], |b, p| {
                let y = b.cumprod(p[0], 0, reverse)?;
                Ok(vec![b.reduce_sum(y, &[0])?])
            });
            let want: Vec<f64> = (0..n).map(|j| (0..n).map(|i| jac[i][j]).sum()).collect();
            assert_eq!(grad_at(&g, x.clone(), &[n]), want, "grad of sum(cumprod) at {x:?}");
        }
        let f = func(&[f64t(&[n])], |b, p| Ok(vec![b.reduce_prod(p[0], &[0])?]));
        let want: Vec<f64> = (0..n).map(|j| (0..n).filter(|&k| k != j).map(|k| x[k]).product()).collect();
        assert_eq!(grad_at(&f, x.clone(), &[n]), want, "grad of reduce_prod at {x:?}");
    }
    // reduce_prod over two axes of a [2, 3] input with one zero.
    let x = vec![1.5, 0.0, 2.0, -1.0, 3.0, 0.5];
    let f = func(&[f64t(&[2, 3])], |b, p| Ok(vec![b.reduce_prod(p[0], &[0, 1])?]));
    let want: Vec<f64> = (0..6).map(|j| (0..6).filter(|&k| k != j).map(|k| x[k]).product()).collect();
    assert_eq!(grad_at(&f, x, &[2, 3]), want);
}

/// reduce_prod's gradient scans adjacent reduced axes where they are (no
/// transposes; GradBench `det`'s product over a leading axis), and moves
/// non-adjacent ones last first: both forms multiply the same factors in
/// the same order, so a product over axes (0, 2) of `x` and over axes
/// (1, 2) of `x` with its first two axes swapped have the same gradient
/// bits (swapped back).
#[test]
fn reduce_prod_gradient_scans_adjacent_axes_in_place() {
    for (shape, axes) in [(vec![7, 1, 50], vec![0]), (vec![3, 4, 5], vec![1, 2]), (vec![4, 6], vec![1])] {
        let f = func(&[f64t(&shape)], |b, p| {
            let y = b.reduce_prod(p[0], &axes)?;
            Ok(vec![b.reduce_sum(y, &(0..shape.len() - axes.len()).collect::<Vec<_>>())?])
        });
        let g = grad(&f, &Wrt::All).unwrap();
        assert_eq!(g.count_prim("transpose"), 0, "{shape:?} over {axes:?}:\n{g}");
        assert_eq!(g.count_prim("cumprod"), 2, "{shape:?} over {axes:?}:\n{g}");
    }
    let mut rng = Rng(11);
    let x = rng.tensor(&f64t(&[3, 4, 5]), -1.5, 1.5);
    let apart = func(&[f64t(&[3, 4, 5])], |b, p| {
        let y = b.reduce_prod(p[0], &[0, 2])?;
        Ok(vec![b.reduce_sum(y, &[0])?])
    });
    let g = grad(&apart, &Wrt::All).unwrap();
    assert_eq!(g.count_prim("transpose"), 2, "{g}");
    let ga = common::run(&g, &[x.clone()])[0].to_f64_vec();
    let adjacent = func(&[f64t(&[4, 3, 5])], |b, p| {
        let y = b.reduce_prod(p[0], &[1, 2])?;
        Ok(vec![b.reduce_sum(y, &[0])?])
    });
    let g = grad(&adjacent, &Wrt::All).unwrap();
    let xs = x.to_f64_vec();
    let swapped = Tensor::from_fn(&f64t(&[4, 3, 5]), |i| xs[((i / 5) % 3) * 20 + (i / 15) * 5 + i % 5]);
    let gb = common::run(&g, &[swapped])[0].to_f64_vec();
    let back: Vec<f64> = (0..60).map(|i| gb[((i / 5) % 4) * 15 + (i / 20) * 5 + i % 5]).collect();
    assert_eq!(
        ga.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        back.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn reduce_rules() {
    for kind in ReduceKind::ALL {
        for axes in [vec![0], vec![1], vec![0, 2], vec![1, 2], vec![0, 1, 2], vec![]] {
            let f = func(&[f64t(&[2, 3, 4])], |b, p| Ok(vec![b.reduce(kind, p[0], &axes)?]));
            let (lo, hi) = if kind == ReduceKind::Prod { (0.5, 1.5) } else { (-1.0, 1.0) };
            check(&format!("{kind:?} axes {axes:?}"), &f, lo, hi, 47);
        }
    }
}

#[test]
fn reduce_max_ties_split_equally_and_argmax_has_no_tangent() {
    let f = func(&[f64t(&[5])], |b, p| Ok(vec![b.reduce_max(p[0], &[0])?]));
    assert_eq!(grad_at(&f, vec![1.0, 3.0, -2.0, 3.0, 3.0], &[5]), vec![0.0, 1.0 / 3.0, 0.0, 1.0 / 3.0, 1.0 / 3.0]);
    let f = func(&[f64t(&[2, 2])], |b, p| {
        let m = b.reduce_min(p[0], &[1])?;
        Ok(vec![b.reduce_sum(m, &[0])?])
    });
    assert_eq!(grad_at(&f, vec![2.0, 2.0, 1.0, 4.0], &[2, 2]), vec![0.5, 0.5, 1.0, 0.0]);
    // argmax: an integer result; its JVP output is zero and a function that
    // uses it as a constant differentiates through the other path only.
    let f = func(&[f64t(&[2, 3])], |b, p| {
        let i = b.argmax(p[0], 1, DType::I32)?;
        let fi = b.convert(i, DType::F64)?;
        let s = b.reduce_sum(p[0], &[1])?;
        let y = b.mul(fi, s)?;
        Ok(vec![i, y])
    });
    check("argmax", &f, -1.0, 1.0, 53);
    let jf = jvp_func(&f).unwrap();
    let x = Tensor::from_fn(&f64t(&[2, 3]), |i| [0.1, 0.7, 0.3, 0.9, -0.2, 0.4][i]);
    let t = Tensor::from_fn(&f64t(&[2, 3]), |i| i as f64 + 1.0);
    let out = common::run(&jf, &[x, t]);
    assert_eq!(out[0].to_f64_vec(), vec![1.0, 0.0]);
    assert_eq!(out[2].to_f64_vec(), vec![0.0, 0.0], "argmax tangent");
    assert_eq!(out[3].to_f64_vec(), vec![1.0 * 6.0, 0.0 * 15.0]);
}

#[test]
fn cummax_cummin_ties_go_to_the_first_extreme_in_scan_order() {
    let sum_of = |kind: CumKind, reverse: bool| {
        func(&[f64t(&[5])], move |b, p| {
            let y = b.cumulative(kind, p[0], 0, reverse)?;
            Ok(vec![b.reduce_sum(y, &[0])?])
        })
    };
    let x = vec![1.0, 3.0, 2.0, 3.0, 0.0];
    // Forwards: y = [1, 3, 3, 3, 3]; the running max 3 was set by x[1].
    assert_eq!(grad_at(&sum_of(CumKind::Max, false), x.clone(), &[5]), vec![1.0, 4.0, 0.0, 0.0, 0.0]);
    // Backwards: y = [3, 3, 3, 3, 0]; scanning from the end, x[3] set it.
    assert_eq!(grad_at(&sum_of(CumKind::Max, true), x.clone(), &[5]), vec![0.0, 0.0, 0.0, 4.0, 1.0]);
    let x = vec![2.0, 1.0, 1.0, 4.0, 1.0];
    // Forwards: y = [2, 1, 1, 1, 1], set by x[1].
    assert_eq!(grad_at(&sum_of(CumKind::Min, false), x.clone(), &[5]), vec![1.0, 4.0, 0.0, 0.0, 0.0]);
    // Backwards: y = [1, 1, 1, 1, 1], set by x[4].
    assert_eq!(grad_at(&sum_of(CumKind::Min, true), x, &[5]), vec![0.0, 0.0, 0.0, 0.0, 5.0]);
    // Along axis 0 of a [3, 2] input (flat positions move by the row stride).
    let f = func(&[f64t(&[3, 2])], |b, p| {
        let y = b.cummax(p[0], 0, false)?;
        Ok(vec![b.reduce_sum(y, &[0, 1])?])
    });
    assert_eq!(grad_at(&f, vec![1.0, 5.0, 2.0, 5.0, 2.0, 6.0], &[3, 2]), vec![1.0, 2.0, 2.0, 0.0, 0.0, 1.0]);
}

/// `sort` is a gather at `argsort`'s permutation: the values' derivatives
/// follow the gather (each tangent moves with its element) and `argsort`
/// contributes no tangent. Random points have no ties.
#[test]
fn sort_rule() {
    for axis in [0, 1] {
        let f = func(&[f64t(&[3, 4])], |b, p| Ok(vec![graft_core::composite::sort::sort(b, p[0], axis)?]));
        check(&format!("sort axis {axis}"), &f, -2.0, 2.0, 5 + axis as u64);
    }
}
