//! Small-matrix helpers the linear-algebra tests share: building a
//! function from a body closure, tensors from slices, and reference
//! products and transposes in plain f64 loops.

use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

pub fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

pub fn f64t(shape: &[usize]) -> TensorType {
    ty(DType::F64, shape)
}

/// A function of parameters `types` whose outputs `body` builds.
pub fn func(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>) -> Func {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

pub fn tensor(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_fn(&ty(dtype, shape), |i| v[i])
}

/// Row-major `[n, m] x [m, k]`.
pub fn mm(a: &[f64], b: &[f64], n: usize, m: usize, k: usize) -> Vec<f64> {
    let mut o = vec![0.0; n * k];
    for i in 0..n {
        for p in 0..m {
            for j in 0..k {
                o[i * k + j] += a[i * m + p] * b[p * k + j];
            }
        }
    }
    o
}

/// The transpose of a row-major `[n, m]` matrix.
pub fn tr(a: &[f64], n: usize, m: usize) -> Vec<f64> {
    (0..m * n).map(|idx| a[(idx % n) * m + idx / n]).collect()
}
