//! Shared helpers for the composite tests: build a function with the
//! builder, run it, and compare against reference values.
#![allow(dead_code)]

use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};

/// Builds a function over parameters typed like `xs`, runs it on `xs`, and
/// returns all outputs; build errors are returned, run errors panic.
pub fn run_multi(
    xs: &[&Tensor],
    f: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Result<Vec<Tensor>, IrError> {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = xs.iter().map(|x| b.param(x.ty())).collect();
    let ys = f(&mut b, &ps)?;
    let types: Vec<TensorType> = ys.iter().map(|&y| b.ty(y).unwrap().clone()).collect();
    let func = b.finish(&ys)?;
    let outs = Executable::new(func).unwrap().run(xs).unwrap();
    for (o, t) in outs.iter().zip(&types) {
        assert_eq!(&o.ty(), t, "kernel result type differs from the inferred type");
    }
    Ok(outs)
}

/// Single-output form of [`run_multi`].
pub fn run(
    xs: &[&Tensor],
    f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>,
) -> Result<Tensor, IrError> {
    Ok(run_multi(xs, |b, p| Ok(vec![f(b, p)?]))?.remove(0))
}

/// Runs and unwraps, for tests that expect success.
pub fn eval(xs: &[&Tensor], f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> Tensor {
    run(xs, f).unwrap()
}

/// The error message of a build that must fail.
pub fn err_msg(xs: &[&Tensor], f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> String {
    match run(xs, f) {
        Ok(t) => panic!("expected an error, got a result of shape {:?}", t.shape()),
        Err(e) => e.to_string(),
    }
}

/// An f64 tensor of the given shape and data.
pub fn t64(shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

/// An f32 tensor of the given shape and data.
pub fn t32(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

/// An i32 tensor.
pub fn ti32(shape: &[usize], data: &[i32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

/// Deterministic pseudo-random f64 data in roughly [-2, 2).
pub fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
        })
        .collect()
}

/// A deterministic pseudo-random f64 tensor.
pub fn rand64(shape: &[usize], seed: u64) -> Tensor {
    t64(shape, &data(shape.iter().product(), seed))
}

/// Asserts elementwise closeness (relative + absolute), NaN equal to NaN,
/// infinities equal by sign.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {} expected {}", got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(ok, "element {i}: got {g}, expected {w} (tol {tol})\n got: {got:?}\nwant: {want:?}");
    }
}

/// Asserts a tensor's shape and values.
pub fn assert_tensor(t: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(t.shape(), shape, "shape");
    assert_close(&t.to_f64_vec(), want, tol);
}

/// Row-major strides.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Multi-index of flat position `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        idx[k] = i % shape[k];
        i /= shape[k];
    }
    idx
}

/// Flat position of a multi-index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// Casts a tensor (for f32 variants of f64 tests).
pub fn to32(t: &Tensor) -> Tensor {
    t.cast(DType::F32)
}
