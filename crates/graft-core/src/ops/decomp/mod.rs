//! Dense matrix decompositions: `cholesky`, `triangular_solve`, `lu`, `qr`,
//! `eigh` and `svd`.
//!
//! Every primitive here works on a batch of matrices natively: operands are
//! `[..., n, n]` (`[..., m, n]` for `qr` and `svd`; `[..., n, k]` /
//! `[..., k, n]` right-hand sides), the leading dims are batch dims, and
//! the kernel loops over them. So a batching rule only has to put the batch
//! dim among the leading dims (where it already is unless it sits in one of
//! the matrix dims), and `vmap` never emits a loop over examples.
//!
//! Semantics (f32 and f64 only):
//! - `cholesky(a)`: the lower-triangular `L` with `A = L L^T`, where `A` is
//!   the symmetric matrix whose lower triangle (diagonal included) is `a`'s:
//!   the strict upper triangle of `a` is never read (LAPACK's `potrf`; the
//!   composite `composite::decomp::cholesky` symmetrizes `(a + a^T) / 2`
//!   first, like `jnp.linalg.cholesky`). The result's strict upper triangle
//!   is zero. A matrix that is not positive definite (a pivot `<= 0` or NaN
//!   while factorizing) gives a result filled with NaN, never an error, so
//!   a batch with one bad matrix still yields the others.
//! - `triangular_solve[left, lower, transpose_a, unit_diagonal](a, b)`:
//!   `X` with `op(A) X = B` (`left`) or `X op(A) = B` (not `left`), where
//!   `A` is the `lower` (or upper) triangle of `a` (the other triangle is
//!   never read; with `unit_diagonal` the diagonal is not read either and
//!   taken as ones) and `op(A)` is `A^T` when `transpose_a`. `a` is
//!   `[..., n, n]`; `b` has the same batch dims and is `[..., n, k]` (left)
//!   or `[..., k, n]` (right). A zero on the diagonal gives the infinities
//!   and NaNs IEEE division gives (no check, no error).
//! - `lu(a)`: LU with partial pivoting of square `[..., n, n]` matrices, as
//!   `jax.lax.linalg.lu`: three results, `lu` (`L` strictly below the
//!   diagonal, its unit diagonal implicit, `U` on and above it), `pivots`
//!   (i32 `[..., n]`, LAPACK's row interchanges: row `i` was swapped with
//!   row `pivots[i]` at step `i`, 0-based) and `permutation` (i32
//!   `[..., n]`: `a[permutation[i], :] = (L U)[i, :]`). A singular matrix
//!   factorizes (a zero pivot stays in `U`); using its `U` to solve gives
//!   IEEE infinities/NaNs.
//! - `qr[full_matrices](a)`: Householder QR of `[..., m, n]` (any `m`, `n`),
//!   as `jnp.linalg.qr`: `q` (`[..., m, k]`, orthonormal columns) and `r`
//!   (`[..., k, n]`, upper triangular) with `a = q r`, `k = min(m, n)`, or
//!   with `full_matrices` `k = m` (`q` square; `r`'s rows past `n` zero).
//!   The signs are LAPACK's (`geqrf`): `r[i, i] = -sign(x_i) |x|` for the
//!   `i`-th column `x` being reflected, so the diagonal of `r` may be
//!   negative. Where a column is dependent on the earlier ones to within
//!   rounding, faer skips its reflector: `a = q r` still holds to rounding
//!   and `q` stays orthonormal, but such factors may differ from LAPACK's.
//! - `eigh(a)`: the eigendecomposition of symmetric `[..., n, n]`, as
//!   `jax.lax.linalg.eigh(lower=True)` (results in `jnp.linalg.eigh`'s
//!   order): `w` (`[..., n]`, eigenvalues ascending) and `v` (`[..., n, n]`,
//!   orthonormal eigenvectors in its columns, `a v = v diag(w)`). Only the
//!   lower triangle is read, like `cholesky` (the composite symmetrizes
//!   first, like `jnp.linalg.eigh`'s `symmetrize_input=True`). Each column
//!   of `v` is defined up to its sign (up to a rotation within a repeated
//!   eigenvalue's space).
//! - `svd[full_matrices](a)`: `u` (`[..., m, k]`), `s` (`[..., k]`, singular
//!   values descending, non-negative) and `vh` (`[..., k, n]`) with
//!   `a = u diag(s) vh`, `k = min(m, n)`; with `full_matrices` `u` is
//!   `[..., m, m]` and `vh` `[..., n, n]` (`jnp.linalg.svd`'s results).
//!   Pairs of singular vectors are defined up to a common sign.
//!
//! Bad input to the three factorizations is a value, not an error: a matrix
//! with a NaN or an infinity among the entries they read (or, for `eigh` and
//! `svd`, one whose iteration does not converge) gives results filled with
//! NaN, and the other matrices of the batch are unaffected.
//!
//! Kernels use `faer` (Cholesky, LU with partial pivoting, triangular
//! solves, Householder QR, the symmetric eigensolver and the SVD). Each
//! matrix is factorized on one thread (`Par::Seq`); a batch is spread over
//! rayon's pool one matrix per task, so results never depend on the thread
//! count.
//!
//! Derivatives (`rules.rs`), all in terms of primitives that have every rule
//! themselves (triangular_solve, dot_general, select, elementwise), so higher
//! orders work:
//! - cholesky (Murray 2016, "Differentiation of the Cholesky decomposition"):
//!   `dL = L Φ(L^{-1} dA_s L^{-T})`, `Φ` = lower triangle with the diagonal
//!   halved, `dA_s` = the symmetric matrix built from `dA`'s lower triangle
//!   (what the primitive reads).
//! - triangular_solve: linear in `b`, so its transpose is another
//!   triangular_solve with `transpose_a` flipped; in `a`,
//!   `dX = op(A)^{-1} (dB - op(dA) X)` (left) or `(dB - X op(dA)) op(A)^{-1}`
//!   (right), with `dA` restricted to the triangle the primitive reads.
//! - lu: `x = P dA`, `y = L^{-1} x U^{-1}`, `dLU = L tril(y, -1) + triu(y) U`
//!   (JAX's rule); `pivots` and `permutation` are integers (no tangent).
//! - qr (`m >= n`; JAX's `qr_jvp_rule`): `C = q^T dA r^{-1}`,
//!   `Ω = tril(C, -1) - tril(C, -1)^T`, `dq = q (Ω - C) + dA r^{-1}`,
//!   `dr = (C - Ω) r`. For `m < n`, `a = q [r1 | r2]`: the square rule on
//!   `a[:, :m] = q r1` gives `dq`, `dr1`, and `dr2 = dq^T a2 + q^T da2`.
//!   Needs `r`'s leading block invertible (full rank). `full_matrices` with
//!   `m > n` has no JVP (the extra columns of `q` are not a differentiable
//!   function of `a`): an error, as in JAX and PyTorch.
//! - eigh: `X = v^T dA_s v`, `dw = diag(X)`, `dv = v (F ∘ X)`, with
//!   `F_ij = 1 / (w_j - w_i)` for `w_i != w_j` and **0 where `w_i == w_j`**
//!   (the diagonal, and exactly repeated eigenvalues, where JAX's rule
//!   gives inf/NaN). At a repeated eigenvalue the decomposition is not
//!   differentiable (the basis of its space is arbitrary); zero drops the
//!   rotation within that space, so every derivative is finite, and
//!   derivatives of functions that treat a repeated group symmetrically
//!   (sums of its eigenvalues: `trace`, `log det`, `sum(w^2)`) are exact.
//!   Others (the eigenvectors, `v diag(f(w)) v^T` for an `f` not constant
//!   on the group, individual eigenvalues of the group) are not defined
//!   there and come out as the formula's value with that term dropped.
//!   Close but unequal eigenvalues give the large (true) derivatives.
//! - svd (JAX's `_svd_jvp_rule`): `X = u^T dA v`, `ds = diag(X)`,
//!   `du = u (F ∘ (X S + S X^T))`, `dv = v (F ∘ (S X + X^T S))`,
//!   `F_ij = 1 / (s_j^2 - s_i^2)` (0 where `s_i == s_j`, as in JAX), plus
//!   for `m > n` `(I - u u^T) dA v S^{-1}` on `du` and for `m < n`
//!   `(I - v v^T) dA^T u S^{-1}` on `dv`, with `1/s` taken as 0 where
//!   `s == 0` (JAX divides, giving inf/NaN). `full_matrices` with `m != n`
//!   has no JVP (as in JAX); the square case is the reduced one.
//!
//! F and `1/s` are computed with the "double select" (`1 / select(eq, 1, d)`
//! then `select(eq, 0, ..)`), so no infinity is ever formed and reverse
//! mode through them never multiplies a zero cotangent by an infinite slope.

mod kernel;
mod rules;

use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// The lower Cholesky factor of a batch of symmetric positive definite
/// matrices (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cholesky;

/// Solves a triangular system (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TriangularSolve {
    /// Solve `op(A) X = B` (true) or `X op(A) = B` (false).
    pub left: bool,
    /// `A` is the lower (true) or upper (false) triangle of `a`.
    pub lower: bool,
    /// `op(A) = A^T` (true) or `A` (false).
    pub transpose_a: bool,
    /// The diagonal is taken as ones and not read.
    pub unit_diagonal: bool,
}

/// LU decomposition with partial pivoting (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lu;

/// Householder QR (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Qr {
    /// `q` square (`[..., m, m]`) and `r` `[..., m, n]`, instead of the
    /// reduced `[..., m, k]` and `[..., k, n]`, `k = min(m, n)`.
    pub full_matrices: bool,
}

/// Symmetric eigendecomposition `(w, v)`, reading the lower triangle (see
/// the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Eigh;

/// Singular value decomposition `(u, s, vh)` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Svd {
    /// Square `u` and `vh` instead of the reduced ones.
    pub full_matrices: bool,
}

/// `n` of a `[..., n, n]` float operand, or the shape rule's complaint.
fn square(op: &impl Op, ins: &[TensorType], t: &TensorType, what: &str) -> Result<usize, TypeError> {
    check::float(op, ins, t)?;
    let r = t.rank();
    if r < 2 || t.shape[r - 1] != t.shape[r - 2] {
        return Err(check::err(
            op,
            ins,
            format!("expected {what} to be a square matrix or a batch of them, [..., n, n]"),
        ));
    }
    Ok(t.shape[r - 1])
}

impl Op for Cholesky {
    fn name(&self) -> &'static str {
        "cholesky"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        square(self, ins, &ins[0], "the operand")?;
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::cholesky(self.name(), ins[0], &mut outs[0])
    }
}

impl Op for TriangularSolve {
    fn name(&self) -> &'static str {
        "triangular_solve"
    }

    fn params(&self) -> String {
        format!(
            "left={}, lower={}, transpose_a={}, unit_diagonal={}",
            self.left, self.lower, self.transpose_a, self.unit_diagonal
        )
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        let (a, b) = (&ins[0], &ins[1]);
        let n = square(self, ins, a, "a")?;
        if b.dtype != a.dtype {
            return Err(check::err(self, ins, "expected a and b to have the same dtype"));
        }
        let r = a.rank();
        if b.rank() != r || b.shape[..r - 2] != a.shape[..r - 2] {
            return Err(check::err(self, ins, "expected b to have a's rank and batch dims (broadcasting is explicit)"));
        }
        let (axis, side) = if self.left { (r - 2, "rows") } else { (r - 1, "columns") };
        if b.shape[axis] != n {
            return Err(check::err(self, ins, format!("expected b to have n = {n} {side} (left={})", self.left)));
        }
        Ok(vec![b.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::triangular_solve(self, ins[0], ins[1], &mut outs[0])
    }
}

impl Op for Lu {
    fn name(&self) -> &'static str {
        "lu"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let a = &ins[0];
        square(self, ins, a, "the operand")?;
        let idx = TensorType::new(DType::I32, a.shape[..a.rank() - 1].to_vec());
        if a.shape[a.rank() - 1] > i32::MAX as usize {
            return Err(check::err(self, ins, "expected at most i32::MAX rows (pivots are i32)"));
        }
        Ok(vec![a.clone(), idx.clone(), idx])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::lu(self.name(), ins[0], outs)
    }
}

/// `(m, n)` of a `[..., m, n]` float operand, or the shape rule's complaint.
fn matrix(op: &impl Op, ins: &[TensorType], t: &TensorType) -> Result<(usize, usize), TypeError> {
    check::float(op, ins, t)?;
    let r = t.rank();
    if r < 2 {
        return Err(check::err(op, ins, "expected a matrix or a batch of them, [..., m, n]"));
    }
    Ok((t.shape[r - 2], t.shape[r - 1]))
}

/// `t`'s type with its last two dims replaced by `rows, cols`.
fn with_matrix(t: &TensorType, rows: usize, cols: usize) -> TensorType {
    let r = t.rank();
    let mut shape = t.shape[..r - 2].to_vec();
    shape.extend([rows, cols]);
    TensorType::new(t.dtype, shape)
}

impl Op for Qr {
    fn name(&self) -> &'static str {
        "qr"
    }

    fn params(&self) -> String {
        format!("full_matrices={}", self.full_matrices)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let a = &ins[0];
        let (m, n) = matrix(self, ins, a)?;
        let k = if self.full_matrices { m } else { m.min(n) };
        Ok(vec![with_matrix(a, m, k), with_matrix(a, k, n)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::qr(self.name(), ins[0], outs)
    }
}

impl Op for Eigh {
    fn name(&self) -> &'static str {
        "eigh"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let a = &ins[0];
        square(self, ins, a, "the operand")?;
        let w = TensorType::new(a.dtype, a.shape[..a.rank() - 1].to_vec());
        Ok(vec![w, a.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::eigh(self.name(), ins[0], outs)
    }
}

impl Op for Svd {
    fn name(&self) -> &'static str {
        "svd"
    }

    fn params(&self) -> String {
        format!("full_matrices={}", self.full_matrices)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let a = &ins[0];
        let (m, n) = matrix(self, ins, a)?;
        let k = m.min(n);
        let (uc, vr) = if self.full_matrices { (m, n) } else { (k, k) };
        let mut s = a.shape[..a.rank() - 2].to_vec();
        s.push(k);
        Ok(vec![with_matrix(a, m, uc), TensorType::new(a.dtype, s), with_matrix(a, vr, n)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        kernel::svd(self.name(), ins[0], outs)
    }
}

impl Builder {
    /// The lower Cholesky factor of `[..., n, n]` (reads the lower triangle
    /// only; NaN-filled where a matrix is not positive definite).
    pub fn cholesky(&mut self, a: Value) -> Result<Value, IrError> {
        self.emit1(Cholesky, &[a])
    }

    /// Solves `op(A) X = B` (`left`) or `X op(A) = B` for the triangle of `a`
    /// named by `lower`; see [`TriangularSolve`].
    pub fn triangular_solve(
        &mut self,
        a: Value,
        b: Value,
        left: bool,
        lower: bool,
        transpose_a: bool,
        unit_diagonal: bool,
    ) -> Result<Value, IrError> {
        self.emit1(TriangularSolve { left, lower, transpose_a, unit_diagonal }, &[a, b])
    }

    /// LU with partial pivoting: `(lu, pivots, permutation)`; see [`Lu`].
    pub fn lu(&mut self, a: Value) -> Result<(Value, Value, Value), IrError> {
        let outs = self.emit(Lu, &[a])?;
        match outs[..] {
            [lu, piv, perm] => Ok((lu, piv, perm)),
            _ => unreachable!("internal error: the lu shape rule gives three results"),
        }
    }

    /// Householder QR of `[..., m, n]`: `(q, r)`; see [`Qr`].
    pub fn qr(&mut self, a: Value, full_matrices: bool) -> Result<(Value, Value), IrError> {
        let outs = self.emit(Qr { full_matrices }, &[a])?;
        match outs[..] {
            [q, r] => Ok((q, r)),
            _ => unreachable!("internal error: the qr shape rule gives two results"),
        }
    }

    /// Eigenvalues (ascending) and eigenvectors of the symmetric matrices
    /// whose lower triangles are `a`'s: `(w, v)`; see [`Eigh`].
    pub fn eigh(&mut self, a: Value) -> Result<(Value, Value), IrError> {
        let outs = self.emit(Eigh, &[a])?;
        match outs[..] {
            [w, v] => Ok((w, v)),
            _ => unreachable!("internal error: the eigh shape rule gives two results"),
        }
    }

    /// Singular value decomposition: `(u, s, vh)`; see [`Svd`].
    pub fn svd(&mut self, a: Value, full_matrices: bool) -> Result<(Value, Value, Value), IrError> {
        let outs = self.emit(Svd { full_matrices }, &[a])?;
        match outs[..] {
            [u, s, vh] => Ok((u, s, vh)),
            _ => unreachable!("internal error: the svd shape rule gives three results"),
        }
    }
}

// Matrix helpers over the last two axes, shared by the rules here and the
// composites in `composite::decomp`. They emit only iota, compare, select,
// transpose and dot_general, which have every rule.

/// A bool `[n, m]` mask of the band `j - i <= k` (`lower`) or `j - i >= k`.
pub fn band_mask(b: &mut Builder, n: usize, m: usize, k: i64, lower: bool) -> Result<Value, IrError> {
    // i32 (what a GPU runs) when both sides fit; `j - i` then lies in
    // `(-n, m)`, so clamping `k` into `[-n, m]` keeps the mask.
    let dt = crate::ops::create::index_dtype(n.max(m));
    let i = b.iota(dt, &[n, m], 0)?;
    let j = b.iota(dt, &[n, m], 1)?;
    let d = b.sub(j, i)?;
    let k = if dt == DType::I32 { k.clamp(-(n as i64), m as i64) } else { k };
    let kk = b.full(k as f64, &TensorType::new(dt, vec![n, m]))?;
    if lower {
        b.le(d, kk)
    } else {
        b.ge(d, kk)
    }
}

/// The rank of `x`, or an error naming `op` when it is below 2 (the
/// helpers below work on the last two axes).
fn matrix_rank(b: &Builder, op: &str, x: Value) -> Result<usize, IrError> {
    let t = b.ty(x)?;
    if t.rank() < 2 {
        return Err(IrError::invalid(op, format!("needs a matrix or a batch of them, [..., n, m]; got {t}")));
    }
    Ok(t.rank())
}

/// `x` (`[..., n, m]`) with the elements outside the band of [`band_mask`] zeroed.
pub fn band(b: &mut Builder, x: Value, k: i64, lower: bool) -> Result<Value, IrError> {
    let r = matrix_rank(b, if lower { "tril" } else { "triu" }, x)?;
    let t = b.ty(x)?.clone();
    let mask = band_mask(b, t.shape[r - 2], t.shape[r - 1], k, lower)?;
    let mask = b.broadcast_in_dim(mask, &t.shape, &[r - 2, r - 1])?;
    let zero = b.full(0.0, &t)?;
    b.select(mask, x, zero)
}

/// `x` with its last two axes swapped.
pub fn swap_last2(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let r = matrix_rank(b, "swap_last2", x)?;
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    b.transpose(x, &perm)
}

/// Batched matrix product `[..., n, m] x [..., m, k]` (equal batch dims).
pub fn bmm(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    let r = matrix_rank(b, "bmm", x)?;
    let batch: Vec<usize> = (0..r - 2).collect();
    b.dot_general(x, y, &[r - 1], &[r - 2], &batch, &batch)
}

/// The `[..., n, n]` permutation matrix `P[..., i, j] = (perm[..., i] == j)`
/// of an integer `perm` (`[..., n]`), in `dtype`; `P x` gathers the rows
/// `x[perm[i]]`.
pub fn permutation_matrix(b: &mut Builder, perm: Value, dtype: DType) -> Result<Value, IrError> {
    let t = b.ty(perm)?.clone();
    let r = t.rank();
    if r == 0 || !t.dtype.is_int() {
        return Err(IrError::invalid("permutation_matrix", format!("needs integer vectors [..., n]; got {t}")));
    }
    let n = t.shape[r - 1];
    let mut shape = t.shape.clone();
    shape.push(n);
    let dims: Vec<usize> = (0..r).collect();
    let rows = b.broadcast_in_dim(perm, &shape, &dims)?;
    let cols = b.iota(t.dtype, &shape, r)?;
    let hit = b.eq(rows, cols)?;
    b.convert(hit, dtype)
}
