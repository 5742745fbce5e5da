//! Linear algebra beyond products, by `jax.numpy.linalg` names: the
//! checked front doors of the decomposition primitives (`cholesky`,
//! `triangular_solve`, `lu`), what is built from them (`solve`, `cho_solve`,
//! `inv`, `slogdet`, `det`), and matrix helpers (`eye`, `diag`, `diagonal`,
//! `tril`, `triu`, `trace`, `outer`, `kron`, `norm`).
//!
//! Matrices are the last two axes; leading axes are a batch and every
//! function here takes one (`[..., n, n]`), because the primitives do.
//! Composites validate their operands and name themselves in the error
//! (`solve: ...`), so a mistake is reported before a primitive's shape rule
//! would see it.
//!
//! - `solve`, `inv`, `slogdet` and `det` go through `lu` (partial pivoting),
//!   so they work for any non-singular matrix; a singular one gives IEEE
//!   infinities/NaNs (`det` is then 0 and `slogdet` `(0, -inf)`, their
//!   derivatives infinite or NaN). `cho_solve` is the symmetric positive
//!   definite case from a Cholesky factor.
//! - Derivatives come from the primitives' rules; nothing here has a rule of
//!   its own. `norm`'s gradient at zero is NaN (`sqrt`'s slope there), as in
//!   JAX. `norm`'s spectral orders of a matrix (`2`, `-2`, `"nuc"`) are
//!   `spectral::matrix_norm`'s.

use super::broadcast::{self, broadcast_shapes};
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Binary;
use crate::ops::decomp::{band, bmm, permutation_matrix, swap_last2};
use crate::types::TensorType;

/// `[..., n, n]` float check: returns `n`, or an error naming `op`.
fn square(b: &Builder, op: &str, x: Value) -> Result<usize, IrError> {
    let t = b.ty(x)?;
    let r = t.rank();
    if !t.dtype.is_float() {
        return Err(IrError::invalid(op, format!("needs a floating-point matrix (f32 or f64), got {t}")));
    }
    if r < 2 || t.shape[r - 1] != t.shape[r - 2] {
        return Err(IrError::invalid(op, format!("needs a square matrix or a batch of them, [..., n, n]; got {t}")));
    }
    Ok(t.shape[r - 1])
}

/// `rank >= 2` check for the matrix helpers.
fn matrix(b: &Builder, op: &str, x: Value) -> Result<TensorType, IrError> {
    let t = b.ty(x)?.clone();
    if t.rank() < 2 {
        return Err(IrError::invalid(op, format!("needs a matrix or a batch of them, [..., n, m]; got {t}")));
    }
    Ok(t)
}

/// `jnp.linalg.cholesky(x)`: the lower factor `L` of `x = L L^T`.
///
/// Like JAX, `x` is symmetrized first (`(x + x^T) / 2`, exact for a
/// symmetric `x`), so the gradient with respect to `x` is symmetric. A
/// matrix that is not positive definite gives NaNs (see `ops::decomp`).
pub fn cholesky(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    square(b, "cholesky", x)?;
    let xt = swap_last2(b, x)?;
    let s = b.add(x, xt)?;
    let t = b.ty(s)?.clone();
    let half = b.full(0.5, &t)?;
    let s = b.mul(s, half)?;
    b.cholesky(s)
}

/// Batch dims of `a` (`[..., n, n]`) and `rhs` broadcast together, for the
/// solvers: `rhs` is a vector `[n]` (returned as a column, `true`) or a
/// matrix `[..., n, k]` / `[..., k, n]`. Returns the operands with equal
/// batch dims.
fn solver_operands(
    b: &mut Builder,
    op: &str,
    a: Value,
    rhs: Value,
    left: bool,
) -> Result<(Value, Value, bool), IrError> {
    let n = square(b, op, a)?;
    let (at, bt) = (b.ty(a)?.clone(), b.ty(rhs)?.clone());
    if bt.dtype != at.dtype {
        return Err(IrError::invalid(op, format!("operands must have one dtype; got {at} and {bt}")));
    }
    let (rhs, vector) = match bt.rank() {
        0 => return Err(IrError::invalid(op, format!("the right-hand side must be a vector or matrix; got {bt}"))),
        1 => {
            let shape = if left { vec![bt.shape[0], 1] } else { vec![1, bt.shape[0]] };
            (b.reshape(rhs, &shape)?, true)
        }
        _ => (rhs, false),
    };
    let given = bt;
    let bt = b.ty(rhs)?.clone();
    let r = bt.rank();
    let (axis, what) = match (vector, left) {
        (true, _) => (if left { r - 2 } else { r - 1 }, "elements"),
        (false, true) => (r - 2, "rows"),
        (false, false) => (r - 1, "columns"),
    };
    if bt.shape[axis] != n {
        return Err(IrError::invalid(
            op,
            format!("the right-hand side {given} must have {n} {what} to match the matrix {at}"),
        ));
    }
    let (ab, bb) = (&at.shape[..at.rank() - 2], &bt.shape[..r - 2]);
    let batch = broadcast_shapes(op, ab, bb).map_err(|_| {
        IrError::invalid(op, format!("batch dims of the matrix {at} and the right-hand side {bt} do not broadcast"))
    })?;
    let full = |s: &[usize]| {
        let mut v = batch.clone();
        v.extend_from_slice(&s[s.len() - 2..]);
        v
    };
    let a = broadcast::broadcast_to(b, a, &full(&at.shape))?;
    let rhs = broadcast::broadcast_to(b, rhs, &full(&bt.shape))?;
    Ok((a, rhs, vector))
}

/// Back to a vector when the right-hand side was one.
fn unvector(b: &mut Builder, x: Value, vector: bool) -> Result<Value, IrError> {
    if !vector {
        return Ok(x);
    }
    let t = b.ty(x)?.clone();
    let n = t.numel();
    b.reshape(x, &[n])
}

/// `jax.scipy.linalg.solve_triangular`-style front door of the primitive:
/// solves `op(A) x = rhs` (`left`) or `x op(A) = rhs` with `A` the `lower`
/// (or upper) triangle of `a`. `rhs` may be a vector `[n]`; batch dims
/// broadcast.
pub fn triangular_solve(
    b: &mut Builder,
    a: Value,
    rhs: Value,
    left: bool,
    lower: bool,
    transpose_a: bool,
    unit_diagonal: bool,
) -> Result<Value, IrError> {
    let (a, rhs, vector) = solver_operands(b, "triangular_solve", a, rhs, left)?;
    let x = b.triangular_solve(a, rhs, left, lower, transpose_a, unit_diagonal)?;
    unvector(b, x, vector)
}

/// `jax.scipy.linalg.cho_solve((l, True), rhs)`: solves `L L^T x = rhs`
/// from the lower Cholesky factor `l`.
pub fn cho_solve(b: &mut Builder, l: Value, rhs: Value) -> Result<Value, IrError> {
    let (l, rhs, vector) = solver_operands(b, "cho_solve", l, rhs, true)?;
    let y = b.triangular_solve(l, rhs, true, true, false, false)?;
    let x = b.triangular_solve(l, y, true, true, true, false)?;
    unvector(b, x, vector)
}

/// `jax.lax.linalg.lu(x)`: `(lu, pivots, permutation)` of square matrices.
pub fn lu(b: &mut Builder, x: Value) -> Result<(Value, Value, Value), IrError> {
    square(b, "lu", x)?;
    b.lu(x)
}

/// `jnp.linalg.solve(a, rhs)`: `a x = rhs` by LU with partial pivoting.
/// `rhs` is a vector `[n]` or `[..., n, k]` (batch dims broadcast).
pub fn solve(b: &mut Builder, a: Value, rhs: Value) -> Result<Value, IrError> {
    let (a, rhs, vector) = solver_operands(b, "solve", a, rhs, true)?;
    let (lu, _, perm) = b.lu(a)?;
    let dtype = b.ty(lu)?.dtype;
    let p = permutation_matrix(b, perm, dtype)?;
    let pb = bmm(b, p, rhs)?;
    let y = b.triangular_solve(lu, pb, true, true, false, true)?;
    let x = b.triangular_solve(lu, y, true, false, false, false)?;
    unvector(b, x, vector)
}

/// `jnp.linalg.inv(x)`: `solve(x, I)`.
pub fn inv(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let n = square(b, "inv", x)?;
    let dtype = b.ty(x)?.dtype;
    let i = eye(b, n, dtype)?;
    solve(b, x, i)
}

/// `jnp.linalg.slogdet(x)`: `(sign, log|det x|)` from the LU factors:
/// the product of `U`'s diagonal signs and of the permutation's sign, and
/// the sum of `log|U_ii|`.
pub fn slogdet(b: &mut Builder, x: Value) -> Result<(Value, Value), IrError> {
    square(b, "slogdet", x)?;
    let (lu, piv, _) = b.lu(x)?;
    let d = diagonal(b, lu)?;
    let r = b.ty(d)?.rank();
    let ad = b.abs(d)?;
    let logs = b.log(ad)?;
    let logabs = b.reduce_sum(logs, &[r - 1])?;
    let signs = b.sign(d)?;
    let sign_u = b.reduce_prod(signs, &[r - 1])?;
    let dtype = b.ty(d)?.dtype;
    let parity = permutation_sign(b, piv, dtype)?;
    let sign = b.mul(sign_u, parity)?;
    Ok((sign, logabs))
}

/// `jnp.linalg.det(x)`: the product of `U`'s diagonal times the
/// permutation's sign.
pub fn det(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    square(b, "det", x)?;
    let (lu, piv, _) = b.lu(x)?;
    let d = diagonal(b, lu)?;
    let r = b.ty(d)?.rank();
    let prod = b.reduce_prod(d, &[r - 1])?;
    let dtype = b.ty(d)?.dtype;
    let parity = permutation_sign(b, piv, dtype)?;
    b.mul(prod, parity)
}

/// `(-1)^(number of interchanges)` of LAPACK pivots `[..., n]`, in `dtype`.
fn permutation_sign(b: &mut Builder, piv: Value, dtype: DType) -> Result<Value, IrError> {
    let t = b.ty(piv)?.clone();
    let r = t.rank();
    let i = b.iota(t.dtype, &t.shape, r - 1)?;
    let swapped = b.ne(piv, i)?;
    let ft = TensorType::new(dtype, t.shape.clone());
    let minus = b.full(-1.0, &ft)?;
    let plus = b.full(1.0, &ft)?;
    let s = b.select(swapped, minus, plus)?;
    b.reduce_prod(s, &[r - 1])
}

/// `jnp.eye(n, dtype=dtype)`.
pub fn eye(b: &mut Builder, n: usize, dtype: DType) -> Result<Value, IrError> {
    let dt = crate::ops::create::index_dtype(n);
    let i = b.iota(dt, &[n, n], 0)?;
    let j = b.iota(dt, &[n, n], 1)?;
    let on = b.eq(i, j)?;
    b.convert(on, dtype)
}

/// `jnp.diag(v)` for vectors, batched: `[..., n] -> [..., n, n]` with `v`
/// on the diagonal. One interior `pad` (n zeros between elements) and a
/// reshape: the diagonal of a row-major `[n, n]` is every (n+1)-th element.
pub fn diag(b: &mut Builder, v: Value) -> Result<Value, IrError> {
    let t = b.ty(v)?.clone();
    let r = t.rank();
    if r == 0 {
        return Err(IrError::invalid("diag", format!("needs a vector (or a batch of them), got {t}")));
    }
    let n = t.shape[r - 1];
    let mut shape = t.shape.clone();
    shape.push(n);
    if n == 0 {
        return b.full(0.0, &TensorType::new(t.dtype, shape));
    }
    let zero = b.scalar(0.0, t.dtype)?;
    let mut interior = vec![0; r];
    interior[r - 1] = n;
    let padded = b.pad(v, zero, &vec![0; r], &vec![0; r], &interior)?;
    b.reshape(padded, &shape)
}

/// `jnp.linalg.diagonal(x)`: `[..., n, m] -> [..., min(n, m)]`, a strided
/// slice of the flattened matrix (elements `i (m + 1)`).
pub fn diagonal(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let t = matrix(b, "diagonal", x)?;
    let r = t.rank();
    let (n, m) = (t.shape[r - 2], t.shape[r - 1]);
    let k = n.min(m);
    let mut flat = t.shape[..r - 2].to_vec();
    flat.push(n * m);
    let mut out = t.shape[..r - 2].to_vec();
    out.push(k);
    if k == 0 {
        return b.full(0.0, &TensorType::new(t.dtype, out));
    }
    let f = b.reshape(x, &flat)?;
    let mut start = vec![0; r - 1];
    let mut stop = flat.clone();
    let mut stride = vec![1; r - 1];
    start[r - 2] = 0;
    stop[r - 2] = (k - 1) * (m + 1) + 1;
    stride[r - 2] = m + 1;
    b.slice(f, &start, &stop, &stride)
}

/// `jnp.tril(x, k)`: zeros above diagonal `k` of the last two axes.
pub fn tril(b: &mut Builder, x: Value, k: i64) -> Result<Value, IrError> {
    matrix(b, "tril", x)?;
    band(b, x, k, true)
}

/// `jnp.triu(x, k)`: zeros below diagonal `k` of the last two axes.
pub fn triu(b: &mut Builder, x: Value, k: i64) -> Result<Value, IrError> {
    matrix(b, "triu", x)?;
    band(b, x, k, false)
}

/// `jnp.linalg.trace(x)`: the sum of the diagonal of the last two axes.
pub fn trace(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    matrix(b, "trace", x)?;
    let d = diagonal(b, x)?;
    let r = b.ty(d)?.rank();
    b.reduce_sum(d, &[r - 1])
}

/// `jnp.outer(x, y)`: `[x.size, y.size]` products of the flattened operands.
pub fn outer(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    let (xt, yt) = (b.ty(x)?.clone(), b.ty(y)?.clone());
    if xt.dtype != yt.dtype || !xt.dtype.is_numeric() {
        return Err(IrError::invalid("outer", format!("operands must share one numeric dtype; got {xt} and {yt}")));
    }
    let xf = b.reshape(x, &[xt.numel()])?;
    let yf = b.reshape(y, &[yt.numel()])?;
    b.dot_general(xf, yf, &[], &[], &[], &[])
}

/// `jnp.kron(x, y)`: the Kronecker product; the operand of lower rank gets
/// leading 1s, and result axis `i` has size `x_i * y_i`. Interleaves the
/// axes (`x` as `[x0, 1, x1, 1, ..]`, `y` as `[1, y0, 1, y1, ..]`), multiplies
/// with broadcasting and merges each pair.
pub fn kron(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    let (xt, yt) = (b.ty(x)?.clone(), b.ty(y)?.clone());
    if xt.dtype != yt.dtype || !xt.dtype.is_numeric() {
        return Err(IrError::invalid("kron", format!("operands must share one numeric dtype; got {xt} and {yt}")));
    }
    let r = xt.rank().max(yt.rank());
    let pad = |s: &[usize]| {
        let mut v = vec![1; r - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (xs, ys) = (pad(&xt.shape), pad(&yt.shape));
    let xi: Vec<usize> = xs.iter().flat_map(|&d| [d, 1]).collect();
    let yi: Vec<usize> = ys.iter().flat_map(|&d| [1, d]).collect();
    let xr = b.reshape(x, &xi)?;
    let yr = b.reshape(y, &yi)?;
    let p = broadcast::binary(b, Binary::Mul, xr, yr)?;
    let out: Vec<usize> = xs.iter().zip(&ys).map(|(a, c)| a * c).collect();
    b.reshape(p, &out)
}

/// The `ord` of [`norm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormOrd {
    /// No `ord`: the 2-norm of the flattened operand (any rank).
    Default,
    /// `"fro"`: the Frobenius norm of a matrix.
    Fro,
    /// `"nuc"`: the nuclear norm of a matrix (sum of singular values).
    Nuc,
    /// `1`: sum of magnitudes (vector); largest column sum (matrix).
    One,
    /// `-1`: harmonic sum `1 / sum(1/|x|)` (vector); smallest column sum (matrix).
    NegOne,
    /// `2`: the Euclidean norm (vector); the largest singular value (matrix).
    Two,
    /// `-2`: `sum(|x|^-2)^(-1/2)` (vector); the smallest singular value (matrix).
    NegTwo,
    /// `inf`: largest magnitude (vector); largest row sum (matrix).
    Inf,
    /// `-inf`: smallest magnitude (vector); smallest row sum (matrix).
    NegInf,
}

/// `jnp.linalg.norm(x, ord)` for vectors and matrices (no `axis`; a batch
/// of matrices is [`super::spectral::matrix_norm`]).
pub fn norm(b: &mut Builder, x: Value, ord: NormOrd) -> Result<Value, IrError> {
    use super::spectral::{matrix_norm, MatrixOrd};
    let t = b.ty(x)?.clone();
    if !t.dtype.is_float() {
        return Err(IrError::invalid("norm", format!("needs a floating-point operand, got {t}")));
    }
    let r = t.rank();
    let all: Vec<usize> = (0..r).collect();
    let two_norm = |b: &mut Builder| -> Result<Value, IrError> {
        let sq = b.mul(x, x)?;
        let s = b.reduce_sum(sq, &all)?;
        b.sqrt(s)
    };
    let ax = b.abs(x)?;
    match (ord, r) {
        (NormOrd::Default, _) | (NormOrd::Two, 1) => two_norm(b),
        (NormOrd::One, 1) => b.reduce_sum(ax, &[0]),
        (NormOrd::Inf, 1) => b.reduce_max(ax, &[0]),
        (NormOrd::NegInf, 1) => b.reduce_min(ax, &[0]),
        (NormOrd::NegOne | NormOrd::NegTwo, 1) => {
            // sum(|x|^p)^(1/p), p = -1 or -2.
            let p = if ord == NormOrd::NegOne { -1.0 } else { -2.0 };
            let pt = b.full(p, &t)?;
            let powed = b.pow(ax, pt)?;
            let s = b.reduce_sum(powed, &[0])?;
            let st = b.ty(s)?.clone();
            let inv = b.full(1.0 / p, &st)?;
            b.pow(s, inv)
        }
        (_, 2) => {
            let m = match ord {
                NormOrd::Default | NormOrd::Fro => MatrixOrd::Fro,
                NormOrd::Nuc => MatrixOrd::Nuc,
                NormOrd::One => MatrixOrd::One,
                NormOrd::NegOne => MatrixOrd::NegOne,
                NormOrd::Two => MatrixOrd::Two,
                NormOrd::NegTwo => MatrixOrd::NegTwo,
                NormOrd::Inf => MatrixOrd::Inf,
                NormOrd::NegInf => MatrixOrd::NegInf,
            };
            matrix_norm(b, x, m).map_err(|e| match e {
                IrError::Invalid { msg, .. } => IrError::invalid("norm", msg),
                e => e,
            })
        }
        (NormOrd::Fro | NormOrd::Nuc, _) => {
            Err(IrError::invalid("norm", format!("ord={ord:?} needs a matrix (rank 2), got {t}")))
        }
        _ => Err(IrError::invalid("norm", format!("ord={ord:?} needs a vector or a matrix (rank 1 or 2), got {t}"))),
    }
}
