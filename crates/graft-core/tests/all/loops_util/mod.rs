//! Helpers shared by the control-flow tests (scan, cond): building small
//! functions, slicing/stacking host tensors along the batch axis, and
//! relative comparisons.
#![allow(dead_code)]

use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

pub fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

pub fn func(
    name: &str,
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Func {
    let mut b = Builder::new(name);
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

/// Example `i` along axis 0.
pub fn take(t: &Tensor, i: usize) -> Tensor {
    let shape = t.shape().to_vec();
    let inner: usize = shape[1..].iter().product();
    let v = t.to_f64_vec();
    Tensor::from_fn(&TensorType::new(t.dtype(), shape[1..].to_vec()), |k| v[i * inner + k])
}

/// Stacks equal-typed tensors along a new axis 0.
pub fn stack(ts: &[Tensor]) -> Tensor {
    let mut shape = ts[0].shape().to_vec();
    shape.insert(0, ts.len());
    let vs: Vec<f64> = ts.iter().flat_map(Tensor::to_f64_vec).collect();
    Tensor::from_fn(&TensorType::new(ts[0].dtype(), shape), |k| vs[k])
}

/// Asserts `|a - b| <= rtol * (1 + max(|a|, |b|))` elementwise, same types.
pub fn assert_close(what: &str, a: &Tensor, b: &Tensor, rtol: f64) {
    assert_eq!(a.ty(), b.ty(), "{what}: types differ");
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        let tol = rtol * (1.0 + x.abs().max(y.abs()));
        assert!((x - y).abs() <= tol, "{what}[{i}]: {x} vs {y}");
    }
}

pub fn assert_all_close(what: &str, a: &[Tensor], b: &[Tensor], rtol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: output counts differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_close(&format!("{what} output {i}"), x, y, rtol);
    }
}
