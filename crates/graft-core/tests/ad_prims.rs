//! Every primitive's derivative rules, checked numerically in f64:
//! JVP against central finite differences, JVP against VJP by the
//! dot-product test, and the same checks on the JVP itself (second order).

mod common;

use common::{check_grads, Rng};
use graft_core::ad::jvp_func;
use graft_core::composite::broadcast;
use graft_core::ops::binary::Binary;
use graft_core::ops::index::IndexMode;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

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

#[test]
fn binary_rules_with_broadcasting() {
    let ops = [
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
        ("reshape", func(&[x23.clone()], |b, p| Ok(vec![b.reshape(p[0], &[3, 2])?]))),
        ("transpose", func(&[f64t(&[2, 3, 4])], |b, p| Ok(vec![b.transpose(p[0], &[2, 0, 1])?]))),
        ("slice", func(&[f64t(&[5, 4])], |b, p| Ok(vec![b.slice(p[0], &[1, 0], &[5, 3], &[2, 2])?]))),
        ("pad", func(&[x23.clone(), f64t(&[])], |b, p| Ok(vec![b.pad(p[0], p[1], &[1, -1], &[2, 0], &[1, 0])?]))),
        ("concatenate", func(&[x23.clone(), f64t(&[2, 1])], |b, p| Ok(vec![b.concatenate(&[p[0], p[1], p[0]], 1)?]))),
        ("reverse", func(&[x23.clone()], |b, p| Ok(vec![b.reverse(p[0], &[0, 1])?]))),
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
