//! Reductions with NumPy conventions over the reduce primitives: `sum`,
//! `mean`, `max`, `min`, `prod` (with `keepdims`), `var`/`std` (with
//! `ddof`), `argmax`/`argmin`, `logsumexp`, `softmax`, `log_softmax`.
//!
//! Conventions:
//! - `axes` are normalised (`usize`, in range, distinct) by the caller; any
//!   order is accepted. An empty `axes` reduces nothing (NumPy's `axis=()`).
//! - `keepdims = true` keeps each reduced axis as size 1 (a `reshape` after
//!   the reduction), so the result broadcasts against the input.
//! - Reducing zero elements gives the primitive identities (sum 0, prod 1,
//!   max -inf, min +inf); `mean`/`var` of zero elements are NaN (0/0), as in
//!   NumPy.
//! - `mean`, `var`, `std`, `logsumexp`, `softmax`, `log_softmax` need a
//!   float operand (no implicit promotion: convert integers first).
//! - The softmax family subtracts the (gradient-stopped) maximum first, and
//!   replaces a non-finite maximum by 0 (like `jax.nn.logsumexp`), so rows
//!   of huge values do not overflow and rows of `-inf` give `-inf`
//!   (logsumexp) instead of NaN.

use super::broadcast::{self, scalar_like};
use super::math::require_float;
use super::shape::{check_axes, reshape_to};
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};
use crate::ops::reduce::ReduceKind;
use crate::types::Shape;

/// `shape` with every axis in `axes` set to 1.
pub fn keepdims_shape(shape: &[usize], axes: &[usize]) -> Shape {
    shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect()
}

/// Validated, sorted copy of `axes`.
fn sorted_axes(b: &Builder, op: &str, x: Value, axes: &[usize]) -> Result<Vec<usize>, IrError> {
    let rank = b.ty(x)?.rank();
    check_axes(op, axes, rank)?;
    let mut a = axes.to_vec();
    a.sort_unstable();
    Ok(a)
}

/// Broadcasts a reduction result (input axes `axes` removed) back to `shape`.
pub fn expand_back(b: &mut Builder, r: Value, shape: &[usize], axes: &[usize]) -> Result<Value, IrError> {
    let dims: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    if dims.len() == shape.len() {
        return Ok(r);
    }
    b.broadcast_in_dim(r, shape, &dims)
}

fn finish(b: &mut Builder, r: Value, in_shape: &[usize], axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    if keepdims {
        reshape_to(b, r, &keepdims_shape(in_shape, axes))
    } else {
        Ok(r)
    }
}

fn reduce_kd(
    b: &mut Builder,
    op: &str,
    kind: ReduceKind,
    x: Value,
    axes: &[usize],
    keepdims: bool,
) -> Result<Value, IrError> {
    let axes = sorted_axes(b, op, x, axes)?;
    if axes.is_empty() {
        return Ok(x);
    }
    let shape = b.ty(x)?.shape.clone();
    let r = b.reduce(kind, x, &axes)?;
    finish(b, r, &shape, &axes, keepdims)
}

/// Sum over `axes`.
pub fn sum(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    reduce_kd(b, "sum", ReduceKind::Sum, x, axes, keepdims)
}

/// Maximum over `axes` (NaN propagates; bool is logical "any").
pub fn max(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    reduce_kd(b, "max", ReduceKind::Max, x, axes, keepdims)
}

/// Minimum over `axes` (NaN propagates; bool is logical "all").
pub fn min(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    reduce_kd(b, "min", ReduceKind::Min, x, axes, keepdims)
}

/// Product over `axes`.
pub fn prod(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    reduce_kd(b, "prod", ReduceKind::Prod, x, axes, keepdims)
}

/// Number of elements reduced over `axes`.
fn count(b: &Builder, x: Value, axes: &[usize]) -> Result<usize, IrError> {
    let shape = &b.ty(x)?.shape;
    Ok(axes.iter().map(|&a| shape[a]).product())
}

/// Arithmetic mean over `axes` (float operands).
pub fn mean(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    require_float(b, "mean", x)?;
    let axes = sorted_axes(b, "mean", x, axes)?;
    let n = count(b, x, &axes)?;
    let s = sum(b, x, &axes, keepdims)?;
    let nv = scalar_like(b, n as f64, x)?;
    broadcast::binary(b, Binary::Div, s, nv)
}

/// Variance over `axes` with `ddof` delta degrees of freedom: the mean
/// squared deviation times `n / (n - ddof)` (NumPy: `ddof = 0` is the
/// population variance, `ddof = 1` the unbiased sample variance). Computed
/// in two passes (deviations from the mean first), which is accurate when
/// the mean is large compared to the spread. `n <= ddof` divides by zero
/// (inf or NaN), as in NumPy.
pub fn var(b: &mut Builder, x: Value, axes: &[usize], ddof: usize, keepdims: bool) -> Result<Value, IrError> {
    require_float(b, "var", x)?;
    let axes = sorted_axes(b, "var", x, axes)?;
    let shape = b.ty(x)?.shape.clone();
    let n = count(b, x, &axes)?;
    let mu = mean(b, x, &axes, false)?;
    let mu = expand_back(b, mu, &shape, &axes)?;
    let d = b.sub(x, mu)?;
    let d2 = b.mul(d, d)?;
    let s = sum(b, d2, &axes, keepdims)?;
    let denom = scalar_like(b, n.saturating_sub(ddof) as f64, x)?;
    broadcast::binary(b, Binary::Div, s, denom)
}

/// Standard deviation: `sqrt(var(x, axes, ddof))`.
pub fn std(b: &mut Builder, x: Value, axes: &[usize], ddof: usize, keepdims: bool) -> Result<Value, IrError> {
    let v = var(b, x, axes, ddof, keepdims)?;
    b.sqrt(v)
}

fn arg(
    b: &mut Builder,
    max: bool,
    x: Value,
    axis: usize,
    keepdims: bool,
    index_dtype: DType,
) -> Result<Value, IrError> {
    let op = if max { "argmax" } else { "argmin" };
    let shape = b.ty(x)?.shape.clone();
    check_axes(op, &[axis], shape.len())?;
    if shape[axis] == 0 {
        return Err(IrError::invalid(op, format!("cannot take {op} over axis {axis} of size 0 (shape {shape:?})")));
    }
    let r = if max { b.argmax(x, axis, index_dtype)? } else { b.argmin(x, axis, index_dtype)? };
    finish(b, r, &shape, &[axis], keepdims)
}

/// Index of the first maximum along `axis` (NaN counts as the maximum, like
/// NumPy), as `index_dtype` (i32 or i64).
pub fn argmax(b: &mut Builder, x: Value, axis: usize, keepdims: bool, index_dtype: DType) -> Result<Value, IrError> {
    arg(b, true, x, axis, keepdims, index_dtype)
}

/// Index of the first minimum along `axis` (NaN counts as the minimum).
pub fn argmin(b: &mut Builder, x: Value, axis: usize, keepdims: bool, index_dtype: DType) -> Result<Value, IrError> {
    arg(b, false, x, axis, keepdims, index_dtype)
}

/// The maximum over `axes` with non-finite values replaced by 0 and the
/// gradient stopped, broadcast back to `x`'s shape: the shift of the
/// softmax family. Returns (shift at full shape, shift reduced).
fn stable_shift(b: &mut Builder, x: Value, axes: &[usize]) -> Result<(Value, Value), IrError> {
    let shape = b.ty(x)?.shape.clone();
    let m = b.reduce_max(x, axes)?;
    let a = b.abs(m)?;
    let inf = scalar_like(b, f64::INFINITY, m)?;
    let finite = broadcast::compare(b, Compare::Lt, a, inf)?;
    let zero = scalar_like(b, 0.0, m)?;
    let m = broadcast::select(b, finite, m, zero)?;
    let m = b.stop_gradient(m)?;
    Ok((expand_back(b, m, &shape, axes)?, m))
}

/// `log(sum(exp(x)))` over `axes`, stable: `m + log(sum(exp(x - m)))` with
/// `m` the maximum (0 where it is not finite). Rows of `-inf` give `-inf`;
/// a `+inf` entry gives `+inf`; NaN propagates.
pub fn logsumexp(b: &mut Builder, x: Value, axes: &[usize], keepdims: bool) -> Result<Value, IrError> {
    require_float(b, "logsumexp", x)?;
    let axes = sorted_axes(b, "logsumexp", x, axes)?;
    let shape = b.ty(x)?.shape.clone();
    let (mb, m) = stable_shift(b, x, &axes)?;
    let d = b.sub(x, mb)?;
    let e = b.exp(d)?;
    let s = b.reduce_sum(e, &axes)?;
    let l = b.log(s)?;
    let r = b.add(l, m)?;
    finish(b, r, &shape, &axes, keepdims)
}

fn check_axis(b: &Builder, op: &str, x: Value, axis: usize) -> Result<Vec<usize>, IrError> {
    require_float(b, op, x)?;
    check_axes(op, &[axis], b.ty(x)?.rank())?;
    Ok(vec![axis])
}

/// `exp(x) / sum(exp(x))` along `axis`, computed as `e = exp(x - m)`,
/// `e * (1 / sum(e))` with `m` the (stopped) maximum. Entries of `-inf`
/// get probability 0; a row of only `-inf` is NaN (`0 * inf`), as in JAX.
///
/// One reciprocal per row and a product per element, not a division per
/// element: XLA rewrites JAX's `e / sum(e)` the same way (its results are
/// the product's bits), and a vector division costs several times a
/// product (about 40% of a compiled softmax's time on this project's
/// development machine). The product is within 1.5 ulp of the quotient.
pub fn softmax(b: &mut Builder, x: Value, axis: usize) -> Result<Value, IrError> {
    let axes = check_axis(b, "softmax", x, axis)?;
    let shape = b.ty(x)?.shape.clone();
    let (mb, _) = stable_shift(b, x, &axes)?;
    let d = b.sub(x, mb)?;
    let e = b.exp(d)?;
    let s = b.reduce_sum(e, &axes)?;
    let r = super::math::reciprocal(b, s)?;
    let r = expand_back(b, r, &shape, &axes)?;
    b.mul(e, r)
}

/// `x - logsumexp(x)` along `axis`, computed as `(x - m) - log(sum(exp(x - m)))`
/// so large values neither overflow nor lose the small differences.
pub fn log_softmax(b: &mut Builder, x: Value, axis: usize) -> Result<Value, IrError> {
    let axes = check_axis(b, "log_softmax", x, axis)?;
    let shape = b.ty(x)?.shape.clone();
    let (mb, _) = stable_shift(b, x, &axes)?;
    let d = b.sub(x, mb)?;
    let e = b.exp(d)?;
    let s = b.reduce_sum(e, &axes)?;
    let l = b.log(s)?;
    let l = expand_back(b, l, &shape, &axes)?;
    b.sub(d, l)
}
