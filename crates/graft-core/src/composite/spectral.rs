//! The orthogonal and spectral decompositions by `jax.numpy.linalg` names
//! (`qr`, `eigh`, `eigvalsh`, `svd`, `svdvals`) and what is built on the SVD
//! (`pinv`, `lstsq`, `matrix_norm`, `matrix_rank`, `cond`).
//!
//! Matrices are the last two axes and leading axes are a batch, as in
//! [`super::decomp`]; every function here validates its operands and names
//! itself in its errors.
//!
//! - `eigh` symmetrizes its operand first (`(x + x^T) / 2`), like
//!   `jnp.linalg.eigh`'s default `symmetrize_input=True`, so its gradient is
//!   symmetric; with `symmetrize_input = false` it reads the lower triangle
//!   only (`UPLO="L"`).
//! - `pinv` and `lstsq` are computed from the SVD, because only the SVD gives
//!   the minimum-norm solution of a rank-deficient or underdetermined system
//!   (QR without column pivoting cannot tell which columns are dependent),
//!   with the same singular-value cutoffs as JAX. Their derivatives are *not*
//!   the SVD's: at exactly repeated singular values (an orthogonal matrix, a
//!   multiple of the identity) the SVD's rule drops terms that these smooth
//!   functions need, so `pinv` carries the Golub–Pereyra rule
//!   `dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P` (the
//!   derivative at constant rank, which is JAX's `pinv` rule) as a
//!   `custom_jvp`, and `lstsq`'s solution is `pinv(a) b`. The rule's own `P`
//!   is again the custom function (to [`PINV_RULE_DEPTH`] levels), so second
//!   and third derivatives use the rule too.
//! - `matrix_norm`'s orders `2`, `-2` and `"nuc"` and `cond` (default) read
//!   the singular values; the others are sums and extremes of `|x|`.

use std::sync::Arc;

use super::broadcast::{broadcast_shapes, broadcast_to};
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::ops::decomp::{bmm, swap_last2};
use crate::types::TensorType;

/// How many nested levels of the custom rule `pinv` carries: derivatives
/// up to order `PINV_RULE_DEPTH + 1` use the Golub–Pereyra rule, higher
/// ones differentiate through the SVD.
pub const PINV_RULE_DEPTH: usize = 2;

/// `[..., m, n]` float check: returns `(m, n)`, or an error naming `op`.
fn float_matrix(b: &Builder, op: &str, x: Value) -> Result<(usize, usize), IrError> {
    let t = b.ty(x)?;
    let r = t.rank();
    if !t.dtype.is_float() {
        return Err(IrError::invalid(op, format!("needs a floating-point matrix (f32 or f64), got {t}")));
    }
    if r < 2 {
        return Err(IrError::invalid(op, format!("needs a matrix or a batch of them, [..., m, n]; got {t}")));
    }
    Ok((t.shape[r - 2], t.shape[r - 1]))
}

/// `[..., n, n]` float check: returns `n`.
fn float_square(b: &Builder, op: &str, x: Value) -> Result<usize, IrError> {
    let (m, n) = float_matrix(b, op, x)?;
    if m != n {
        let t = b.ty(x)?;
        return Err(IrError::invalid(op, format!("needs a square matrix or a batch of them, [..., n, n]; got {t}")));
    }
    Ok(n)
}

/// The machine epsilon of a float dtype.
fn eps(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        f64::from(f32::EPSILON)
    } else {
        f64::EPSILON
    }
}

/// `jnp.linalg.qr(x, mode="reduced" | "complete")`: `(q, r)` with `x = q r`,
/// by Householder reflections (see `ops::decomp` for the shapes and signs).
pub fn qr(b: &mut Builder, x: Value, full_matrices: bool) -> Result<(Value, Value), IrError> {
    float_matrix(b, "qr", x)?;
    b.qr(x, full_matrices)
}

/// `jnp.linalg.eigh(x, symmetrize_input=...)`: `(w, v)`, eigenvalues
/// ascending and eigenvectors in the columns of `v`. With `symmetrize_input`
/// the decomposed matrix is `(x + x^T) / 2`; without, the symmetric matrix
/// whose lower triangle is `x`'s (`UPLO="L"`).
pub fn eigh(b: &mut Builder, x: Value, symmetrize_input: bool) -> Result<(Value, Value), IrError> {
    float_square(b, "eigh", x)?;
    let x = if symmetrize_input { symmetrize(b, x)? } else { x };
    b.eigh(x)
}

/// `(x + x^T) / 2`.
fn symmetrize(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let xt = swap_last2(b, x)?;
    let s = b.add(x, xt)?;
    let t = b.ty(s)?.clone();
    let half = b.full(0.5, &t)?;
    b.mul(s, half)
}

/// `jnp.linalg.eigvalsh(x)`: the eigenvalues of `(x + x^T) / 2`, ascending.
pub fn eigvalsh(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    float_square(b, "eigvalsh", x)?;
    let s = symmetrize(b, x)?;
    Ok(b.eigh(s)?.0)
}

/// `jnp.linalg.svd(x, full_matrices)`: `(u, s, vh)` with `x = u diag(s) vh`,
/// `s` descending.
pub fn svd(b: &mut Builder, x: Value, full_matrices: bool) -> Result<(Value, Value, Value), IrError> {
    float_matrix(b, "svd", x)?;
    b.svd(x, full_matrices)
}

/// `jnp.linalg.svdvals(x)`: the singular values, descending. (The
/// primitive computes the singular vectors too: its derivative needs them.)
pub fn svdvals(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    float_matrix(b, "svdvals", x)?;
    Ok(b.svd(x, false)?.1)
}

/// The first (`last = false`) or last element along the last axis of `s`
/// (`[..., k]`, `k >= 1`), as `[...]`.
fn end_of(b: &mut Builder, s: Value, last: bool) -> Result<Value, IrError> {
    let t = b.ty(s)?.clone();
    let r = t.rank();
    let k = t.shape[r - 1];
    let mut start = vec![0; r];
    let mut stop = t.shape.clone();
    start[r - 1] = if last { k - 1 } else { 0 };
    stop[r - 1] = start[r - 1] + 1;
    let one = b.slice(s, &start, &stop, &vec![1; r])?;
    b.reshape(one, &t.shape[..r - 1])
}

/// `v` (`[..., k]`) broadcast over a new second-to-last axis of size `rows`
/// (`[..., rows, k]`): multiplying by it scales column `j` by `v_j`.
fn columns(b: &mut Builder, v: Value, rows: usize) -> Result<Value, IrError> {
    let t = b.ty(v)?.clone();
    let r = t.rank();
    let mut shape = t.shape[..r - 1].to_vec();
    shape.extend([rows, t.shape[r - 1]]);
    let mut dims: Vec<usize> = (0..r - 1).collect();
    dims.push(r);
    b.broadcast_in_dim(v, &shape, &dims)
}

/// Which singular values a pseudo-inverse keeps: those `> rel * s_max`
/// (`pinv`'s rule) or `>= rel * s_max` (`lstsq`'s).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cutoff {
    rel: f64,
    inclusive: bool,
}

/// The mask of kept singular values of `s` (`[..., k]`, `k >= 1`).
fn kept(b: &mut Builder, s: Value, cut: Cutoff) -> Result<Value, IrError> {
    let t = b.ty(s)?.clone();
    let r = t.rank();
    let smax = end_of(b, s, false)?;
    let dims: Vec<usize> = (0..r - 1).collect();
    let smax = b.broadcast_in_dim(smax, &t.shape, &dims)?;
    let rel = b.full(cut.rel, &t)?;
    let limit = b.mul(smax, rel)?;
    if cut.inclusive {
        // A zero singular value is never kept, even when the limit is zero
        // (a zero matrix): its solution is zero, not `0 * inf`.
        let tiny = if t.dtype == DType::F32 { f64::from(f32::MIN_POSITIVE) } else { f64::MIN_POSITIVE };
        let tiny = b.full(tiny, &t)?;
        let limit = b.max(limit, tiny)?;
        b.ge(s, limit)
    } else {
        b.gt(s, limit)
    }
}

/// The pseudo-inverse straight from the SVD: `V diag(1/s) U^T` over the
/// kept singular values (the others count as infinite). Its derivative is
/// the SVD's; [`pinv_custom`] wraps it with the right one.
fn pinv_plain(b: &mut Builder, x: Value, cut: Cutoff) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let r = t.rank();
    let (m, n) = (t.shape[r - 2], t.shape[r - 1]);
    if m.min(n) == 0 {
        let mut shape = t.shape[..r - 2].to_vec();
        shape.extend([n, m]);
        return b.full(0.0, &TensorType::new(t.dtype, shape));
    }
    let (u, s, vh) = b.svd(x, false)?;
    let keep = kept(b, s, cut)?;
    let st = b.ty(s)?.clone();
    let zero = b.full(0.0, &st)?;
    let one = b.full(1.0, &st)?;
    let safe = b.select(keep, s, one)?;
    let inv = b.div(one, safe)?;
    let s_inv = b.select(keep, inv, zero)?;
    let v = swap_last2(b, vh)?; // [..., n, k]
    let scale = columns(b, s_inv, n)?;
    let vs = b.mul(v, scale)?;
    let ut = swap_last2(b, u)?; // [..., k, m]
    bmm(b, vs, ut)
}

/// The Golub–Pereyra tangent of `p = pinv(a)`:
/// `-p da p + s - s a p + t - p a t`, `s = p p^T da^T`, `t = da^T p^T p`.
fn pinv_tangent(b: &mut Builder, a: Value, p: Value, da: Value) -> Result<Value, IrError> {
    let pt = swap_last2(b, p)?;
    let dat = swap_last2(b, da)?;
    let pda = bmm(b, p, da)?;
    let pdap = bmm(b, pda, p)?;
    let ppt = bmm(b, p, pt)?;
    let s = bmm(b, ppt, dat)?;
    let sa = bmm(b, s, a)?;
    let sap = bmm(b, sa, p)?;
    let ptp = bmm(b, pt, p)?;
    let t = bmm(b, dat, ptp)?;
    let pa = bmm(b, p, a)?;
    let pat = bmm(b, pa, t)?;
    let x = b.sub(s, pdap)?;
    let x = b.sub(x, sap)?;
    let x = b.add(x, t)?;
    b.sub(x, pat)
}

/// `pinv` as a `custom_jvp` function: the value from the SVD, the
/// derivative by [`pinv_tangent`], whose `p` is the custom function one
/// level down (the innermost level uses the plain SVD value).
fn pinv_custom(b: &mut Builder, x: Value, cut: Cutoff) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let func = {
        let mut fb = Builder::new("pinv");
        let a = fb.param(t.clone());
        let p = pinv_plain(&mut fb, a, cut)?;
        Arc::new(fb.finish(&[p])?)
    };
    let mut inner: Option<Arc<Func>> = None;
    for _ in 0..PINV_RULE_DEPTH {
        let mut rb = Builder::new("pinv_jvp");
        let a = rb.param(t.clone());
        let da = rb.param(t.clone());
        let p = match &inner {
            None => pinv_plain(&mut rb, a, cut)?,
            Some(rule) => rb.custom_jvp(func.clone(), rule.clone(), &[a])?[0],
        };
        let dp = pinv_tangent(&mut rb, a, p, da)?;
        inner = Some(Arc::new(rb.finish(&[p, dp])?));
    }
    match inner {
        Some(rule) => Ok(b.custom_jvp(func, rule, &[x])?[0]),
        None => pinv_plain(b, x, cut),
    }
}

/// `jnp.linalg.pinv(x, rtol)`: the Moore–Penrose pseudo-inverse
/// (`[..., m, n] -> [..., n, m]`) from the SVD, treating singular values
/// `<= rtol * s_max` as zero; `rtol` defaults to `10 max(m, n) eps`.
pub fn pinv(b: &mut Builder, x: Value, rtol: Option<f64>) -> Result<Value, IrError> {
    let (m, n) = float_matrix(b, "pinv", x)?;
    let dtype = b.ty(x)?.dtype;
    let rel = rtol.unwrap_or(10.0 * m.max(n) as f64 * eps(dtype));
    pinv_custom(b, x, Cutoff { rel, inclusive: false })
}

/// `jnp.linalg.lstsq(a, rhs, rcond)`: `(x, resid, rank, s)`, the
/// minimum-norm least-squares solution of `a x = rhs` through the SVD,
/// keeping singular values `>= rcond * s_max` (`rcond` defaults to
/// `max(m, n) eps`; a negative one means `eps`, as in JAX).
///
/// `a` is `[..., m, n]`; `rhs` is `[m]` (then `x` is `[..., n]`) or
/// `[..., m, k]` (`x` `[..., n, k]`), batch dims broadcasting. `resid` is
/// `|rhs - a x|^2` per column, always (`[...]` for a vector `rhs`,
/// `[..., k]` otherwise; JAX's is `[1]` for a vector and not batched),
/// `rank` the number of kept singular values (i32 `[...]`) and `s` the
/// singular values `[..., min(m, n)]`.
pub fn lstsq(
    b: &mut Builder,
    a: Value,
    rhs: Value,
    rcond: Option<f64>,
) -> Result<(Value, Value, Value, Value), IrError> {
    let (m, n) = float_matrix(b, "lstsq", a)?;
    let (at, bt) = (b.ty(a)?.clone(), b.ty(rhs)?.clone());
    if bt.dtype != at.dtype {
        return Err(IrError::invalid("lstsq", format!("operands must have one dtype; got {at} and {bt}")));
    }
    let (rhs, vector) = match bt.rank() {
        0 => {
            return Err(IrError::invalid("lstsq", format!("the right-hand side must be a vector or matrix; got {bt}")))
        }
        1 => (b.reshape(rhs, &[bt.shape[0], 1])?, true),
        _ => (rhs, false),
    };
    let ct = b.ty(rhs)?.clone();
    let r = ct.rank();
    if ct.shape[r - 2] != m {
        let what = if vector { "elements" } else { "rows" };
        return Err(IrError::invalid(
            "lstsq",
            format!("the right-hand side {bt} must have {m} {what} to match the matrix {at}"),
        ));
    }
    let batch = broadcast_shapes("lstsq", &at.shape[..at.rank() - 2], &ct.shape[..r - 2]).map_err(|_| {
        IrError::invalid(
            "lstsq",
            format!("batch dims of the matrix {at} and the right-hand side {bt} do not broadcast"),
        )
    })?;
    let full = |rows: usize, cols: usize| {
        let mut v = batch.clone();
        v.extend([rows, cols]);
        v
    };
    let k_cols = ct.shape[r - 1];
    let a = broadcast_to(b, a, &full(m, n))?;
    let rhs = broadcast_to(b, rhs, &full(m, k_cols))?;
    let rel = match rcond {
        None => m.max(n) as f64 * eps(at.dtype),
        Some(c) if c < 0.0 => eps(at.dtype),
        Some(c) => c,
    };
    let cut = Cutoff { rel, inclusive: true };
    let p = pinv_custom(b, a, cut)?;
    let x = bmm(b, p, rhs)?; // [..., n, k]
    let fit = bmm(b, a, x)?;
    let err = b.sub(rhs, fit)?;
    let sq = b.mul(err, err)?;
    let rr = batch.len() + 2;
    let resid = b.reduce_sum(sq, &[rr - 2])?; // [..., k]
    let mut sshape = batch.clone();
    sshape.push(m.min(n));
    let (s, rank) = if m.min(n) == 0 {
        let s = b.full(0.0, &TensorType::new(at.dtype, sshape))?;
        (s, b.full(0.0, &TensorType::new(DType::I32, batch.clone()))?)
    } else {
        let s = b.svd(a, false)?.1;
        let keep = kept(b, s, cut)?;
        let ones = b.convert(keep, DType::I32)?;
        (s, b.reduce_sum(ones, &[batch.len()])?)
    };
    if vector {
        let mut xs = batch.clone();
        xs.push(n);
        let x = b.reshape(x, &xs)?;
        let resid = b.reshape(resid, &batch)?;
        return Ok((x, resid, rank, s));
    }
    Ok((x, resid, rank, s))
}

/// The `ord` of [`matrix_norm`] (`jnp.linalg.matrix_norm`, or
/// `jnp.linalg.norm` of a matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixOrd {
    /// `"fro"`: the square root of the sum of squares.
    Fro,
    /// `"nuc"`: the sum of the singular values.
    Nuc,
    /// `1`: the largest column sum of `|x|`.
    One,
    /// `-1`: the smallest column sum of `|x|`.
    NegOne,
    /// `2`: the largest singular value (the spectral norm).
    Two,
    /// `-2`: the smallest singular value.
    NegTwo,
    /// `inf`: the largest row sum of `|x|`.
    Inf,
    /// `-inf`: the smallest row sum of `|x|`.
    NegInf,
}

/// `jnp.linalg.matrix_norm(x, ord)` over the last two axes of `[..., m, n]`
/// (`[...]` results).
pub fn matrix_norm(b: &mut Builder, x: Value, ord: MatrixOrd) -> Result<Value, IrError> {
    let (m, n) = float_matrix(b, "matrix_norm", x)?;
    let t = b.ty(x)?.clone();
    let r = t.rank();
    let spectral = matches!(ord, MatrixOrd::Nuc | MatrixOrd::Two | MatrixOrd::NegTwo);
    if spectral && m.min(n) == 0 {
        return Err(IrError::invalid("matrix_norm", format!("ord={ord:?} needs a non-empty matrix, got {t}")));
    }
    match ord {
        MatrixOrd::Fro => {
            let sq = b.mul(x, x)?;
            let s = b.reduce_sum(sq, &[r - 2, r - 1])?;
            b.sqrt(s)
        }
        MatrixOrd::Nuc => {
            let s = b.svd(x, false)?.1;
            b.reduce_sum(s, &[r - 2])
        }
        MatrixOrd::Two | MatrixOrd::NegTwo => {
            let s = b.svd(x, false)?.1;
            end_of(b, s, ord == MatrixOrd::NegTwo)
        }
        MatrixOrd::One | MatrixOrd::NegOne | MatrixOrd::Inf | MatrixOrd::NegInf => {
            let ax = b.abs(x)?;
            let cols = matches!(ord, MatrixOrd::One | MatrixOrd::NegOne);
            let sums = b.reduce_sum(ax, &[if cols { r - 2 } else { r - 1 }])?;
            if matches!(ord, MatrixOrd::One | MatrixOrd::Inf) {
                b.reduce_max(sums, &[r - 2])
            } else {
                b.reduce_min(sums, &[r - 2])
            }
        }
    }
}

/// `jnp.linalg.matrix_rank(x, rtol)`: the number of singular values
/// `> rtol * s_max` (i32 `[...]`); `rtol` defaults to `max(m, n) eps`.
pub fn matrix_rank(b: &mut Builder, x: Value, rtol: Option<f64>) -> Result<Value, IrError> {
    let (m, n) = float_matrix(b, "matrix_rank", x)?;
    let t = b.ty(x)?.clone();
    let batch = t.shape[..t.rank() - 2].to_vec();
    if m.min(n) == 0 {
        return b.full(0.0, &TensorType::new(DType::I32, batch));
    }
    let rel = rtol.unwrap_or(m.max(n) as f64 * eps(t.dtype));
    let s = b.svd(x, false)?.1;
    let keep = kept(b, s, Cutoff { rel, inclusive: false })?;
    let ones = b.convert(keep, DType::I32)?;
    b.reduce_sum(ones, &[batch.len()])
}

/// `jnp.linalg.cond(x, p)`: the condition number of `[..., n, n]` (or, for
/// `p` of `None`, `2` or `-2`, of any `[..., m, n]`): `s_max / s_min` for
/// `None`/`2`, `s_min / s_max` for `-2`, else
/// `matrix_norm(x, p) * matrix_norm(inv(x), p)`. A singular matrix gives
/// `inf` (or `nan` for the norm-based orders, from the inverse's `inf`s).
pub fn cond(b: &mut Builder, x: Value, p: Option<MatrixOrd>) -> Result<Value, IrError> {
    let (m, n) = float_matrix(b, "cond", x)?;
    match p {
        None | Some(MatrixOrd::Two | MatrixOrd::NegTwo) => {
            if m.min(n) == 0 {
                let t = b.ty(x)?;
                return Err(IrError::invalid("cond", format!("needs a non-empty matrix, got {t}")));
            }
            let s = b.svd(x, false)?.1;
            let hi = end_of(b, s, false)?;
            let lo = end_of(b, s, true)?;
            if p == Some(MatrixOrd::NegTwo) {
                b.div(lo, hi)
            } else {
                b.div(hi, lo)
            }
        }
        Some(ord) => {
            float_square(b, "cond", x)?;
            let inv = super::decomp::inv(b, x)?;
            let a = matrix_norm(b, x, ord)?;
            let c = matrix_norm(b, inv, ord)?;
            b.mul(a, c)
        }
    }
}
