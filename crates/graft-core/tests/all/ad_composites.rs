//! Every composite in `composite/`, differentiated numerically in f64: JVP
//! against central finite differences, JVP against VJP by the dot-product
//! test, and (for the smooth ones) the same checks on the JVP function itself
//! (second order). Composites expand to primitives, so these tests check
//! that the expansions are differentiable where they should be and that the
//! primitive rules compose (stop-gradients, selects, gathers, padding, ...).
//!
//! Each case is one table row: a name, parameter types, a body, and the
//! input range. Piecewise-linear composites (relu, clamp, max/min, max
//! pooling) are checked at first order only (`.first_order()`): their second
//! derivative is zero away from the kinks and undefined at them, so the
//! second-order check adds nothing. Inputs of those are drawn away from the
//! kinks (`.away_from_zero()` or random points, where ties have probability 0).
//! Integer parameters (ids, labels, indices) get the fixed values `i % 3`;
//! bool parameters get `i % 3 != 0`.

use crate::common;

use common::{check_grads, Rng};
use graft_core::ad::{grad, jvp_func, Wrt};
use graft_core::composite::conv::{self, ConvOpts, ConvTransposeOpts, PerDim};
use graft_core::composite::pool::{self, PoolOpts};
use graft_core::composite::{attention, dropout, embed, linalg, loss, math, norm, random, reduce, shape};
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

fn f64t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

fn i32t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::I32, shape.to_vec())
}

fn boolt(shape: &[usize]) -> TensorType {
    TensorType::new(DType::Bool, shape.to_vec())
}

type Body<'a> = Box<dyn FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError> + 'a>;

/// One table row.
struct Case {
    name: String,
    f: Func,
    lo: f64,
    hi: f64,
    second_order: bool,
    /// Draw float inputs with `|x| >= 0.2` (for kinks at 0).
    away_from_zero: bool,
}

fn case<'a>(
    name: impl Into<String>,
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError> + 'a,
) -> Case {
    let name = name.into();
    let body: Body<'a> = Box::new(body);
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
    let f = b.finish(&outs).unwrap_or_else(|e| panic!("{name}: finish failed: {e}"));
    Case { name, f, lo: -1.0, hi: 1.0, second_order: true, away_from_zero: false }
}

/// One-input, one-output case.
fn case1<'a>(
    name: impl Into<String>,
    shape: &[usize],
    body: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError> + 'a,
) -> Case {
    case(name, &[f64t(shape)], move |b, p| Ok(vec![body(b, p[0])?]))
}

impl Case {
    fn range(mut self, lo: f64, hi: f64) -> Case {
        self.lo = lo;
        self.hi = hi;
        self
    }
    /// Piecewise linear: second derivative zero away from the kinks.
    fn first_order(mut self) -> Case {
        self.second_order = false;
        self
    }
    fn away_from_zero(mut self) -> Case {
        self.away_from_zero = true;
        self
    }
}

fn inputs_for(c: &Case, rng: &mut Rng) -> Vec<Tensor> {
    c.f.param_types()
        .iter()
        .map(|t| {
            if t.dtype.is_float() {
                if c.away_from_zero {
                    let x = rng.tensor(t, 0.2, 2.0).to_f64_vec();
                    let s = rng.tensor(t, -1.0, 1.0).to_f64_vec();
                    Tensor::from_fn(t, |i| if s[i] < 0.0 { -x[i] } else { x[i] })
                } else {
                    rng.tensor(t, c.lo, c.hi)
                }
            } else {
                Tensor::from_fn(t, |i| (i % 3) as f64)
            }
        })
        .collect()
}

fn run_cases(cases: Vec<Case>, seed: u64) {
    for (k, c) in cases.iter().enumerate() {
        let mut rng = Rng(seed.wrapping_add(k as u64));
        let inputs = inputs_for(c, &mut rng);
        check_grads(&c.name, &c.f, &inputs, &mut rng, 1e-6, 1e-6);
        if !c.second_order {
            continue;
        }
        let second = jvp_func(&c.f).unwrap_or_else(|e| panic!("{}: jvp failed: {e}", c.name));
        let mut ins2 = inputs.clone();
        for t in &inputs {
            if t.dtype().is_float() {
                ins2.push(rng.tensor(&t.ty(), -1.0, 1.0));
            }
        }
        check_grads(&format!("{} (2nd order)", c.name), &second, &ins2, &mut rng, 1e-5, 1e-5);
    }
}

/// Elementwise shapes: rank 0, a vector, and one with a size-1 dim.
const EW_SHAPES: [&[usize]; 3] = [&[], &[3], &[2, 1, 3]];

#[test]
fn math_composites() {
    let mut cases = Vec::new();
    for s in EW_SHAPES {
        cases.push(case1(format!("square {s:?}"), s, math::square));
        cases.push(case1(format!("reciprocal {s:?}"), s, math::reciprocal).range(0.5, 2.0));
        cases.push(case1(format!("reciprocal negative {s:?}"), s, math::reciprocal).range(-2.0, -0.5));
        // Random points inside, below and above [-0.5, 0.5] (never on a bound).
        cases.push(case1(format!("clamp {s:?}"), s, |b, x| math::clamp(b, x, -0.5, 0.5)).first_order());
        // Away from the clamp at eps: plain log there.
        cases.push(case1(format!("safe_log {s:?}"), s, |b, x| math::safe_log(b, x, 1e-3)).range(0.5, 2.0));
        cases.push(case1(format!("relu {s:?}"), s, math::relu).first_order().away_from_zero());
        cases.push(
            case1(format!("leaky_relu {s:?}"), s, |b, x| math::leaky_relu(b, x, 0.2)).first_order().away_from_zero(),
        );
        // Smooth on each side of 0 (second order there too), kink at 0.
        cases.push(case1(format!("elu {s:?}"), s, |b, x| math::elu(b, x, 0.7)).away_from_zero());
        cases.push(case1(format!("gelu exact {s:?}"), s, |b, x| math::gelu(b, x, false)).range(-3.0, 3.0));
        cases.push(case1(format!("gelu tanh {s:?}"), s, |b, x| math::gelu(b, x, true)).range(-3.0, 3.0));
        cases.push(case1(format!("sigmoid {s:?}"), s, math::sigmoid).range(-4.0, 4.0));
        cases.push(case1(format!("silu {s:?}"), s, math::silu).range(-4.0, 4.0));
        cases.push(case1(format!("softplus {s:?}"), s, math::softplus).range(-4.0, 4.0));
        cases.push(case1(format!("log_sigmoid {s:?}"), s, math::log_sigmoid).range(-4.0, 4.0));
    }
    // clamp_tensor with broadcast bounds (lo < hi by construction: lo - 1).
    cases.push(
        case("clamp_tensor broadcast", &[f64t(&[2, 3]), f64t(&[3]), f64t(&[2, 1])], |b, p| {
            let one = b.scalar(1.0, DType::F64)?;
            let hi = graft_core::composite::broadcast::binary(b, graft_core::ops::binary::Binary::Add, p[2], one)?;
            Ok(vec![math::clamp_tensor(b, p[0], p[1], hi)?])
        })
        .first_order(),
    );
    run_cases(cases, 101);
}

#[test]
fn reduction_composites() {
    let x = [2, 3, 4];
    let axes_list: [&[usize]; 6] = [&[0], &[1], &[2], &[0, 2], &[1, 2], &[0, 1, 2]];
    let mut cases = Vec::new();
    for axes in axes_list {
        for kd in [false, true] {
            let a = axes.to_vec();
            cases.push(case1(format!("sum {axes:?} keepdims {kd}"), &x, move |b, v| reduce::sum(b, v, &a, kd)));
            let a = axes.to_vec();
            cases.push(case1(format!("mean {axes:?} keepdims {kd}"), &x, move |b, v| reduce::mean(b, v, &a, kd)));
            let a = axes.to_vec();
            cases.push(
                case1(format!("max {axes:?} keepdims {kd}"), &x, move |b, v| reduce::max(b, v, &a, kd)).first_order(),
            );
            let a = axes.to_vec();
            cases.push(
                case1(format!("min {axes:?} keepdims {kd}"), &x, move |b, v| reduce::min(b, v, &a, kd)).first_order(),
            );
            let a = axes.to_vec();
            cases.push(
                case1(format!("prod {axes:?} keepdims {kd}"), &x, move |b, v| reduce::prod(b, v, &a, kd))
                    .range(0.5, 1.5),
            );
            let a = axes.to_vec();
            cases.push(case1(format!("var {axes:?} keepdims {kd}"), &x, move |b, v| reduce::var(b, v, &a, 0, kd)));
            let a = axes.to_vec();
            cases.push(case1(format!("var ddof 1 {axes:?} keepdims {kd}"), &x, move |b, v| {
                reduce::var(b, v, &a, 1, kd)
            }));
            let a = axes.to_vec();
            cases.push(case1(format!("std {axes:?} keepdims {kd}"), &x, move |b, v| reduce::std(b, v, &a, 0, kd)));
            let a = axes.to_vec();
            cases.push(
                case1(format!("logsumexp {axes:?} keepdims {kd}"), &x, move |b, v| reduce::logsumexp(b, v, &a, kd))
                    .range(-3.0, 3.0),
            );
        }
    }
    // Size-1 dims and rank 1.
    cases.push(case1("mean size-1 axis", &[3, 1, 2], |b, v| reduce::mean(b, v, &[1], true)));
    cases.push(case1("std size-1 kept", &[1, 5], |b, v| reduce::std(b, v, &[1], 1, true)));
    cases.push(case1("logsumexp rank 1", &[5], |b, v| reduce::logsumexp(b, v, &[0], false)));
    // Large, equal-ish values: the stopped max shift must not leak into the derivative.
    cases.push(case1("logsumexp large", &[2, 3], |b, v| reduce::logsumexp(b, v, &[1], false)).range(50.0, 51.0));
    for (shape, axis) in [(vec![5], 0), (vec![2, 3, 4], 0), (vec![2, 3, 4], 1), (vec![2, 3, 4], 2), (vec![3, 1], 1)] {
        cases.push(case1(format!("softmax {shape:?} axis {axis}"), &shape, move |b, v| reduce::softmax(b, v, axis)));
        cases.push(case1(format!("log_softmax {shape:?} axis {axis}"), &shape, move |b, v| {
            reduce::log_softmax(b, v, axis)
        }));
    }
    run_cases(cases, 202);
}

#[test]
fn norm_composites() {
    let cases = vec![
        case1("normalize last axis", &[3, 4], |b, x| norm::normalize(b, x, &[1], 1e-5)),
        case1("normalize axes (0, 2)", &[2, 3, 4], |b, x| norm::normalize(b, x, &[2, 0], 1e-5)),
        case("layer_norm with beta", &[f64t(&[2, 3, 4]), f64t(&[4]), f64t(&[4])], |b, p| {
            Ok(vec![norm::layer_norm(b, p[0], p[1], Some(p[2]), 1e-5)?])
        }),
        case("layer_norm 2-D gamma, no beta", &[f64t(&[2, 3, 4]), f64t(&[3, 4])], |b, p| {
            Ok(vec![norm::layer_norm(b, p[0], p[1], None, 1e-5)?])
        }),
        case("batch_norm NCL, all outputs", &[f64t(&[3, 2, 4]), f64t(&[2]), f64t(&[2])], |b, p| {
            let (y, m, v) = norm::batch_norm(b, p[0], Some(p[1]), Some(p[2]), None, 1e-5)?;
            Ok(vec![y, m, v])
        }),
        case("batch_norm NCHW, no affine", &[f64t(&[2, 3, 2, 2])], |b, p| {
            let (y, m, v) = norm::batch_norm(b, p[0], None, None, None, 1e-5)?;
            Ok(vec![y, m, v])
        }),
        case("batch_norm axes (0,) on [4, 3]", &[f64t(&[4, 3]), f64t(&[3])], |b, p| {
            let (y, m, v) = norm::batch_norm(b, p[0], Some(p[1]), None, Some(&[0]), 1e-5)?;
            Ok(vec![y, m, v])
        }),
        case("group_norm NCL, 2 groups", &[f64t(&[2, 4, 3]), f64t(&[4]), f64t(&[4])], |b, p| {
            Ok(vec![norm::group_norm(b, p[0], 2, Some(p[1]), Some(p[2]), 1e-5)?])
        }),
    ];
    run_cases(cases, 303);
}

#[test]
fn linalg_composites() {
    let mm = |a: &[usize], c: &[usize]| {
        case(format!("matmul {a:?} @ {c:?}"), &[f64t(a), f64t(c)], |b, p| Ok(vec![linalg::matmul(b, p[0], p[1])?]))
    };
    let es = |spec: &'static str, shapes: &[&[usize]]| {
        let types: Vec<TensorType> = shapes.iter().map(|s| f64t(s)).collect();
        case(format!("einsum {spec}"), &types, move |b, p| Ok(vec![linalg::einsum(b, spec, p)?]))
    };
    let cases = vec![
        mm(&[3], &[3]),
        mm(&[3], &[3, 2]),
        mm(&[2, 3], &[3]),
        mm(&[2, 3], &[3, 4]),
        mm(&[2, 2, 3], &[3, 4]),
        mm(&[2, 1, 2, 3], &[3, 3, 2]),
        mm(&[4], &[2, 4, 3]),
        case("linear with bias", &[f64t(&[2, 3, 4]), f64t(&[5, 4]), f64t(&[5])], |b, p| {
            Ok(vec![linalg::linear(b, p[0], p[1], Some(p[2]))?])
        }),
        case("linear without bias, 1-D input", &[f64t(&[4]), f64t(&[2, 4])], |b, p| {
            Ok(vec![linalg::linear(b, p[0], p[1], None)?])
        }),
        es("ij,jk->ik", &[&[2, 3], &[3, 4]]),
        es("ij,jk", &[&[2, 3], &[3, 4]]),
        es("ii->i", &[&[3, 3]]),
        es("ii", &[&[3, 3]]),
        es("iij,jk->ik", &[&[2, 2, 3], &[3, 2]]),
        es("...ij,...jk->...ik", &[&[2, 1, 2, 3], &[3, 3, 2]]),
        es("b...i,i->b...", &[&[2, 3, 4], &[4]]),
        es("bij,bkj->bik", &[&[2, 3, 4], &[2, 5, 4]]),
        es("i,j->ij", &[&[3], &[2]]),
        es("ijk->kji", &[&[2, 3, 4]]),
        es("ij,jk,kl->il", &[&[2, 3], &[3, 2], &[2, 4]]),
        es("ij->", &[&[2, 3]]),
    ];
    run_cases(cases, 404);
}

#[test]
fn shape_composites() {
    let cases = vec![
        case("concat axis 1", &[f64t(&[2, 3]), f64t(&[2, 1]), f64t(&[2, 2])], |b, p| {
            Ok(vec![shape::concat(b, &[p[0], p[1], p[2], p[0]], 1)?])
        }),
        case("concat axis 0 rank 1", &[f64t(&[3]), f64t(&[1])], |b, p| Ok(vec![shape::concat(b, &[p[0], p[1]], 0)?])),
        case("stack axis 0", &[f64t(&[2, 3]), f64t(&[2, 3])], |b, p| Ok(vec![shape::stack(b, &[p[0], p[1]], 0)?])),
        case("stack axis 2", &[f64t(&[2, 3]), f64t(&[2, 3])], |b, p| {
            Ok(vec![shape::stack(b, &[p[0], p[1], p[0]], 2)?])
        }),
        case1("transpose default", &[2, 3, 4], |b, x| shape::transpose(b, x, None)),
        case1("transpose perm", &[2, 3, 4], |b, x| shape::transpose(b, x, Some(&[1, 2, 0]))),
        case1("swapaxes", &[2, 3, 4], |b, x| shape::swapaxes(b, x, 0, 2)),
        case1("expand_dims", &[2, 3], |b, x| shape::expand_dims(b, x, &[0, 3])),
        case1("squeeze", &[2, 1, 3, 1], |b, x| shape::squeeze(b, x, &[1, 3])),
        case1("squeeze_all", &[1, 3, 1], shape::squeeze_all),
        case1("flatten", &[2, 3, 4, 1], |b, x| shape::flatten(b, x, 1, 2)),
        case1("reshape with -1", &[2, 3, 4], |b, x| shape::reshape(b, x, &[4, -1])),
        case1("broadcast_to", &[3, 1], |b, x| shape::broadcast_to(b, x, &[2, 3, 4])),
        case1("broadcast_to rank 0", &[], |b, x| shape::broadcast_to(b, x, &[2, 2])),
        case1("slice_axis 1:5:2", &[3, 7], |b, x| shape::slice_axis(b, x, 1, Some(1), Some(5), 2)),
        case1("slice_axis ::-1", &[3, 4], |b, x| shape::slice_axis(b, x, 0, None, None, -1)),
        case1("slice_axis -2:0:-2", &[2, 7], |b, x| shape::slice_axis(b, x, 1, Some(-2), Some(0), -2)),
        case1("slice_axis 5::-3", &[8], |b, x| shape::slice_axis(b, x, 0, Some(5), None, -3)),
        case("take axis 0", &[f64t(&[3, 2]), i32t(&[4])], |b, p| Ok(vec![shape::take(b, p[0], p[1], 0)?])),
        case("take axis 1, 2-D indices", &[f64t(&[2, 4, 3]), i32t(&[2, 2])], |b, p| {
            Ok(vec![shape::take(b, p[0], p[1], 1)?])
        }),
        case("where_ broadcast", &[boolt(&[2, 3]), f64t(&[3]), f64t(&[2, 1])], |b, p| {
            Ok(vec![shape::where_(b, p[0], p[1], p[2])?])
        }),
    ];
    run_cases(cases, 505);
}

fn conv_case(name: &str, x: &[usize], w: &[usize], bias: Option<usize>, nd: usize, opts: ConvOpts) -> Case {
    let mut types = vec![f64t(x), f64t(w)];
    if let Some(c) = bias {
        types.push(f64t(&[c]));
    }
    case(name, &types, move |b, p| {
        let bias = p.get(2).copied();
        Ok(vec![match nd {
            1 => conv::conv1d(b, p[0], p[1], bias, &opts)?,
            2 => conv::conv2d(b, p[0], p[1], bias, &opts)?,
            _ => conv::conv3d(b, p[0], p[1], bias, &opts)?,
        }])
    })
}

fn convt_case(name: &str, x: &[usize], w: &[usize], bias: Option<usize>, nd: usize, opts: ConvTransposeOpts) -> Case {
    let mut types = vec![f64t(x), f64t(w)];
    if let Some(c) = bias {
        types.push(f64t(&[c]));
    }
    case(name, &types, move |b, p| {
        let bias = p.get(2).copied();
        Ok(vec![match nd {
            1 => conv::conv_transpose1d(b, p[0], p[1], bias, &opts)?,
            _ => conv::conv_transpose2d(b, p[0], p[1], bias, &opts)?,
        }])
    })
}

#[test]
fn conv_composites() {
    let cases = vec![
        conv_case("conv1d plain with bias", &[2, 3, 7], &[4, 3, 3], Some(4), 1, ConvOpts::new()),
        conv_case(
            "conv1d stride 2 padding 1 dilation 2",
            &[1, 2, 9],
            &[3, 2, 3],
            None,
            1,
            ConvOpts::new().stride(2).padding(1).dilation(2),
        ),
        conv_case("conv1d unbatched groups 2", &[4, 6], &[2, 2, 3], Some(2), 1, ConvOpts::new().groups(2)),
        conv_case(
            "conv1d same padding, even kernel",
            &[1, 2, 5],
            &[2, 2, 4],
            None,
            1,
            ConvOpts::new().padding(conv::Padding::Same),
        ),
        conv_case(
            "conv2d stride (2, 1) padding (1, 0) groups 2",
            &[2, 4, 5, 4],
            &[6, 2, 3, 2],
            Some(6),
            2,
            ConvOpts::new().stride([2, 1]).padding([1, 0]).groups(2),
        ),
        conv_case(
            "conv2d depthwise dilation 2 asymmetric padding",
            &[1, 3, 6, 5],
            &[3, 1, 2, 2],
            None,
            2,
            ConvOpts::new().dilation(2).groups(3).padding(vec![(1, 0), (0, 2)]),
        ),
        conv_case(
            "conv3d stride 2 padding 1",
            &[1, 2, 4, 3, 4],
            &[2, 2, 2, 2, 3],
            Some(2),
            3,
            ConvOpts::new().stride(2).padding(1),
        ),
        conv_case(
            "conv3d groups 2 dilation",
            &[1, 2, 3, 4, 3],
            &[2, 1, 1, 2, 2],
            None,
            3,
            ConvOpts::new().groups(2).dilation([1, 2, 1]),
        ),
        convt_case("conv_transpose1d plain with bias", &[2, 3, 4], &[3, 2, 3], Some(2), 1, ConvTransposeOpts::new()),
        convt_case(
            "conv_transpose1d stride 2 padding 1 output_padding 1 dilation 2",
            &[1, 2, 4],
            &[2, 3, 3],
            None,
            1,
            ConvTransposeOpts::new().stride(2).padding(1).output_padding(1).dilation(2),
        ),
        convt_case(
            "conv_transpose2d stride (2, 3) groups 2",
            &[1, 4, 3, 2],
            &[4, 1, 2, 3],
            Some(2),
            2,
            ConvTransposeOpts::new().stride([2, 3]).groups(2).padding([1, 0]),
        ),
        convt_case(
            "conv_transpose2d unbatched",
            &[2, 3, 3],
            &[2, 2, 2, 2],
            None,
            2,
            ConvTransposeOpts::new().stride(2),
        ),
    ];
    run_cases(cases, 606);
}

#[test]
fn pool_composites() {
    let k = |v: &[usize]| PerDim(v.to_vec());
    let mp = |name: &str, x: &[usize], kern: &[usize], opts: PoolOpts| {
        let kern = k(kern);
        let sp = kern.0.len();
        case1(format!("max_pool {name}"), x, move |b, v| pool::max_pool(b, v, sp, &kern, &opts)).first_order()
    };
    let ap = |name: &str, x: &[usize], kern: &[usize], opts: PoolOpts| {
        let kern = k(kern);
        let sp = kern.0.len();
        case1(format!("avg_pool {name}"), x, move |b, v| pool::avg_pool(b, v, sp, &kern, &opts))
    };
    let cases = vec![
        mp("1d", &[2, 2, 7], &[3], PoolOpts::new()),
        mp("1d stride 2 padding 1", &[1, 2, 7], &[3], PoolOpts::new().stride(2).padding(1)),
        mp("1d ceil_mode", &[1, 1, 8], &[3], PoolOpts::new().stride(2).ceil_mode(true)),
        mp("1d dilation 2", &[1, 2, 9], &[3], PoolOpts::new().dilation(2).stride(1)),
        mp("2d padding 1 stride 2", &[2, 1, 5, 4], &[3, 2], PoolOpts::new().stride(2).padding([1, 1])),
        mp("2d unbatched ceil_mode", &[2, 5, 5], &[2, 2], PoolOpts::new().ceil_mode(true)),
        ap("1d", &[2, 2, 6], &[2], PoolOpts::new()),
        ap("1d padding count_include_pad", &[1, 2, 7], &[3], PoolOpts::new().stride(2).padding(1)),
        ap(
            "1d padding, count_include_pad false",
            &[1, 2, 7],
            &[3],
            PoolOpts::new().stride(2).padding(1).count_include_pad(false),
        ),
        ap("1d ceil_mode", &[1, 1, 8], &[3], PoolOpts::new().stride(2).ceil_mode(true).count_include_pad(false)),
        ap("2d stride 1 padding 1", &[1, 2, 4, 3], &[3, 3], PoolOpts::new().stride(1).padding(1)),
        ap(
            "2d ceil, padding, no pad count",
            &[2, 1, 5, 5],
            &[2, 3],
            PoolOpts::new().stride(2).padding([1, 1]).ceil_mode(true).count_include_pad(false),
        ),
        ap("2d divisor_override", &[1, 1, 4, 4], &[2, 2], PoolOpts::new().divisor_override(3)),
        case1("smooth_max_pool1d", &[2, 2, 7], |b, v| {
            pool::smooth_max_pool1d(b, v, &PerDim::from(3), 0.5, &PoolOpts::new().stride(2).padding(1))
        }),
        case1("smooth_max_pool2d ceil", &[1, 2, 5, 4], |b, v| {
            pool::smooth_max_pool2d(b, v, &PerDim::from(2), 1.0, &PoolOpts::new().ceil_mode(true))
        }),
        case1("adaptive_avg_pool divisible", &[1, 2, 6], |b, v| pool::adaptive_avg_pool(b, v, &[3])),
        case1("adaptive_avg_pool uneven 2d", &[2, 1, 5, 7], |b, v| pool::adaptive_avg_pool(b, v, &[3, 2])),
        case1("adaptive_avg_pool larger output", &[1, 3, 4], |b, v| pool::adaptive_avg_pool(b, v, &[3, 5])),
    ];
    run_cases(cases, 707);
}

#[test]
fn embedding_dropout_attention_loss_composites() {
    let cases = vec![
        case("embedding", &[f64t(&[4, 3]), i32t(&[2, 3])], |b, p| Ok(vec![embed::embedding(b, p[0], p[1], None)?])),
        // padding_idx stops the gradient on purpose (PyTorch), so finite
        // differences disagree by design: see `embedding_padding_idx_gets_no_gradient`.
        case1("dropout rate 0.3", &[3, 4], |b, x| {
            let k = random::key(b, 7)?;
            dropout::dropout(b, k, x, 0.3, true)
        }),
        case1("dropout eval", &[3, 4], |b, x| {
            let k = random::key(b, 7)?;
            dropout::dropout(b, k, x, 0.3, false)
        }),
        case("sdpa", &[f64t(&[2, 3, 4]), f64t(&[2, 5, 4]), f64t(&[2, 5, 2])], |b, p| {
            Ok(vec![attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, None, None)?])
        }),
        case("sdpa causal", &[f64t(&[2, 4, 3]), f64t(&[2, 4, 3]), f64t(&[2, 4, 3])], |b, p| {
            Ok(vec![attention::scaled_dot_product_attention(b, p[0], p[1], p[2], true, None, Some(0.7))?])
        }),
        case(
            "sdpa bool mask broadcast",
            &[f64t(&[2, 3, 2]), f64t(&[2, 3, 2]), f64t(&[2, 3, 2]), boolt(&[3, 3])],
            |b, p| Ok(vec![attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), None)?]),
        ),
        case(
            "sdpa additive float mask",
            &[f64t(&[1, 3, 2]), f64t(&[1, 4, 2]), f64t(&[1, 4, 3]), f64t(&[3, 4])],
            |b, p| Ok(vec![attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), None)?]),
        ),
        mha_case("mha", 3, 2, false),
        mha_case("mha causal", 3, 3, true),
        case("mse", &[f64t(&[2, 3]), f64t(&[2, 3])], |b, p| Ok(vec![loss::mse(b, p[0], p[1])?])),
        case("cross_entropy axis 1", &[f64t(&[4, 3]), i32t(&[4])], |b, p| {
            Ok(vec![loss::cross_entropy(b, p[0], p[1], 1)?])
        })
        .range(-3.0, 3.0),
        case("cross_entropy axis 0, rank 3", &[f64t(&[3, 2, 2]), i32t(&[2, 2])], |b, p| {
            Ok(vec![loss::cross_entropy(b, p[0], p[1], 0)?])
        })
        .range(-3.0, 3.0),
        case("binary_cross_entropy_with_logits", &[f64t(&[2, 3]), f64t(&[2, 3])], |b, p| {
            Ok(vec![loss::binary_cross_entropy_with_logits(b, p[0], p[1])?])
        })
        .range(-3.0, 3.0),
    ];
    run_cases(cases, 808);
}

fn mha_case(name: &str, lq: usize, lk: usize, causal: bool) -> Case {
    let dm = 4;
    let types = vec![
        f64t(&[2, lq, dm]),
        f64t(&[2, lk, dm]),
        f64t(&[2, lk, dm]),
        f64t(&[dm, dm]),
        f64t(&[dm, dm]),
        f64t(&[dm, dm]),
        f64t(&[dm, dm]),
    ];
    case(name, &types, move |b, p| {
        Ok(vec![attention::multi_head_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], p[6], 2, causal, None)?])
    })
}

/// Dropout with a fixed key: the derivative is exactly `mask / (1 - rate)`,
/// with the mask the forward pass used (read back from the output).
#[test]
fn dropout_derivative_is_mask_over_keep() {
    let rate = 0.25;
    let shape = [5, 8];
    let build = |with_sum: bool| {
        let mut b = Builder::new("f");
        let x = b.param(f64t(&shape));
        let k = random::key(&mut b, 42).unwrap();
        let y = dropout::dropout(&mut b, k, x, rate, true).unwrap();
        let out = if with_sum { reduce::sum(&mut b, y, &[0, 1], false).unwrap() } else { y };
        b.finish(&[out]).unwrap()
    };
    let x = Tensor::from_fn(&f64t(&shape), |i| 1.0 + i as f64);
    let y = common::run(&build(false), std::slice::from_ref(&x))[0].to_f64_vec();
    let g = common::run(&grad(&build(true), &Wrt::All).unwrap(), &[x])[0].to_f64_vec();
    let kept = y.iter().filter(|v| **v != 0.0).count();
    assert!(kept > 0 && kept < y.len(), "the mask should keep some and drop some, kept {kept}");
    for i in 0..y.len() {
        let want = if y[i] != 0.0 { 1.0 / (1.0 - rate) } else { 0.0 };
        assert_eq!(g[i], want, "d sum(dropout(x)) / d x[{i}]");
        if y[i] != 0.0 {
            assert_eq!(y[i], (1.0 + i as f64) / (1.0 - rate));
        }
    }
}

/// `padding_idx` rows are returned but get no gradient; other rows
/// accumulate one per lookup.
#[test]
fn embedding_padding_idx_gets_no_gradient() {
    let mut b = Builder::new("f");
    let table = b.param(f64t(&[4, 2]));
    let ids = b.param(i32t(&[5]));
    let y = embed::embedding(&mut b, table, ids, Some(1)).unwrap();
    let s = reduce::sum(&mut b, y, &[0, 1], false).unwrap();
    let f = b.finish(&[s]).unwrap();
    let t = Tensor::from_fn(&f64t(&[4, 2]), |i| i as f64);
    let ids = Tensor::from_fn(&i32t(&[5]), |i| [1.0, 0.0, 1.0, 3.0, 0.0][i]);
    let out = common::run(&f, &[t.clone(), ids.clone()])[0].to_f64_vec();
    // Rows 1, 0, 1, 3, 0 summed: (2+3) * 2 + (0+1) * 2 + (6+7).
    assert_eq!(out, vec![10.0 + 2.0 + 13.0]);
    let g = common::run(&grad(&f, &Wrt::Positions(vec![0])).unwrap(), &[t, ids])[0].to_f64_vec();
    assert_eq!(g, vec![2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
}
