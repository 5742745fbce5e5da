//! Derivative and batching rules of the decompositions (formulas in the
//! module docs of `ops/decomp`).
//!
//! Tangents only meet linear primitives: `select` against zeros (triangle
//! masks), `transpose`, `add`/`sub`, `mul` by a primal coefficient,
//! `dot_general` with a primal other side and `triangular_solve` with a
//! primal matrix, so reverse mode transposes them with existing rules.
//! The spectral rules (qr, eigh, svd) add `slice`/`concatenate` (qr with
//! more columns than rows) and `reduce_sum` (diagonals).

use super::{band, bmm, permutation_matrix, swap_last2, Cholesky, Eigh, Lu, Qr, Svd, TriangularSolve};
use crate::ad::helpers::sub_opt;
use crate::ad::{Diff, JvpCx, TransposeCx};
use crate::batch::helpers::{materialize, move_bdim};
use crate::batch::{Batch, BatchCx, Batched};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::Op;
use crate::types::TensorType;

/// The identity matrix in the type of `like` (`[..., n, n]`), broadcast.
fn eye_like(b: &mut Builder, like: Value) -> Result<Value, IrError> {
    let t = b.ty(like)?.clone();
    let r = t.rank();
    let n = t.shape[r - 1];
    let dt = crate::ops::create::index_dtype(n);
    let i = b.iota(dt, &[n, n], 0)?;
    let j = b.iota(dt, &[n, n], 1)?;
    let on = b.eq(i, j)?;
    let e = b.convert(on, t.dtype)?;
    b.broadcast_in_dim(e, &t.shape, &[r - 2, r - 1])
}

/// Murray's `Φ(x)`: the lower triangle of `x` with its diagonal halved, as
/// `x` times a constant coefficient matrix (linear in `x`).
fn phi(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let r = t.rank();
    let n = t.shape[r - 1];
    let sq = TensorType::new(t.dtype, vec![n, n]);
    let dt = crate::ops::create::index_dtype(n);
    let i = b.iota(dt, &[n, n], 0)?;
    let j = b.iota(dt, &[n, n], 1)?;
    let below = b.lt(j, i)?;
    let on = b.eq(j, i)?;
    let one = b.full(1.0, &sq)?;
    let half = b.full(0.5, &sq)?;
    let zero = b.full(0.0, &sq)?;
    let diag = b.select(on, half, zero)?;
    let c = b.select(below, one, diag)?;
    let c = b.broadcast_in_dim(c, &t.shape, &[r - 2, r - 1])?;
    b.mul(x, c)
}

/// The symmetric matrix built from `x`'s lower triangle, which is what a
/// primitive reading only that triangle (cholesky, eigh) sees move:
/// `tril(x) + tril(x, -1)^T` (linear in `x`).
fn sym_lower(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let low = band(b, x, 0, true)?;
    let strict = band(b, x, -1, true)?;
    let up = swap_last2(b, strict)?;
    b.add(low, up)
}

/// `op(x) op(y)` over the last two axes, `op` transposing where `tx`/`ty`
/// say, as one `dot_general` (no transpose is materialised).
fn mm(b: &mut Builder, x: Value, tx: bool, y: Value, ty: bool) -> Result<Value, IrError> {
    let r = b.ty(x)?.rank();
    let batch: Vec<usize> = (0..r - 2).collect();
    let cx = if tx { r - 2 } else { r - 1 };
    let cy = if ty { r - 1 } else { r - 2 };
    b.dot_general(x, y, &[cx], &[cy], &batch, &batch)
}

/// The diagonal of `[..., k, k]` as `[..., k]`: `sum_j x_ij I_ij` (linear in `x`).
fn diag_part(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let r = b.ty(x)?.rank();
    let e = eye_like(b, x)?;
    let xe = b.mul(x, e)?;
    b.reduce_sum(xe, &[r - 1])
}

/// `v` (`[..., k]`) spread over `[..., k, k]` along rows (`v_i` at `(i, j)`,
/// `rows = true`) or columns (`v_j`).
fn spread(b: &mut Builder, v: Value, rows: bool) -> Result<Value, IrError> {
    let t = b.ty(v)?.clone();
    let r = t.rank();
    let k = t.shape[r - 1];
    let mut shape = t.shape.clone();
    shape.push(k);
    let mut dims: Vec<usize> = (0..r - 1).collect();
    dims.push(if rows { r - 1 } else { r });
    b.broadcast_in_dim(v, &shape, &dims)
}

/// `1 / x`, or 0 where `x == 0`, by the double select: the reciprocal only
/// ever sees `x` with its zeros replaced by ones, so no infinity is formed
/// and the derivative where `x == 0` is 0, not `0 * inf = NaN`.
fn safe_recip(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let zero = b.full(0.0, &t)?;
    let one = b.full(1.0, &t)?;
    let is_zero = b.eq(x, zero)?;
    let safe = b.select(is_zero, one, x)?;
    let inv = b.div(one, safe)?;
    b.select(is_zero, zero, inv)
}

/// The last-axis columns `lo..hi` of `x`.
fn cols(b: &mut Builder, x: Value, lo: usize, hi: usize) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let r = t.rank();
    let mut start = vec![0; r];
    let mut stop = t.shape.clone();
    start[r - 1] = lo;
    stop[r - 1] = hi;
    b.slice(x, &start, &stop, &vec![1; r])
}

/// The tangents `(dq, dr)` of the QR of square-or-tall `a = q r` (`r`
/// square and invertible), JAX's `qr_jvp_rule`.
fn qr_jvp_tall(b: &mut Builder, q: Value, r: Value, da: Value) -> Result<(Value, Value), IrError> {
    let dx_rinv = b.triangular_solve(r, da, false, false, false, false)?; // dA r^{-1}
    let c = mm(b, q, true, dx_rinv, false)?; // q^T dA r^{-1}
    let low = band(b, c, -1, true)?;
    let low_t = swap_last2(b, low)?;
    let omega = b.sub(low, low_t)?; // skew-symmetric
    let oc = b.sub(omega, c)?;
    let q_oc = bmm(b, q, oc)?;
    let dq = b.add(q_oc, dx_rinv)?;
    let co = b.sub(c, omega)?;
    let dr = bmm(b, co, r)?;
    Ok((dq, dr))
}

impl Diff for Qr {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None, None]) };
        let (a, q, r) = (cx.primals[0], cx.outputs[0], cx.outputs[1]);
        let t = b.ty(a)?.clone();
        let rank = t.rank();
        let (m, n) = (t.shape[rank - 2], t.shape[rank - 1]);
        if m >= n {
            if self.full_matrices && m > n {
                return Err(IrError::NoRule {
                    prim: self.name().into(),
                    rule: "jvp",
                    msg: format!(
                        "the complete QR (full_matrices) of a tall matrix ({t}) has no derivative: its last {} \
                         columns of q are any orthonormal basis of a's complement; use the reduced QR",
                        m - n
                    ),
                });
            }
            let (dq, dr) = qr_jvp_tall(b, q, r, da)?;
            return Ok(vec![Some(dq), Some(dr)]);
        }
        // Wide: a = q [r1 | r2] with r1 square; the square rule on the
        // first m columns gives dq and dr1, and r2 = q^T a2 moves by
        // dq^T a2 + q^T da2.
        let r1 = cols(b, r, 0, m)?;
        let da1 = cols(b, da, 0, m)?;
        let (dq, dr1) = qr_jvp_tall(b, q, r1, da1)?;
        let a2 = cols(b, a, m, n)?;
        let da2 = cols(b, da, m, n)?;
        let p1 = mm(b, dq, true, a2, false)?;
        let p2 = mm(b, q, true, da2, false)?;
        let dr2 = b.add(p1, p2)?;
        let dr = b.concatenate(&[dr1, dr2], rank - 1)?;
        Ok(vec![Some(dq), Some(dr)])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

impl Diff for Eigh {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None, None]) };
        let (w, v) = (cx.outputs[0], cx.outputs[1]);
        let ds = sym_lower(b, da)?;
        let vd = mm(b, v, true, ds, false)?;
        let x = bmm(b, vd, v)?; // v^T dA_s v
        let dw = diag_part(b, x)?;
        // F_ij = 1 / (w_j - w_i), 0 where w_i == w_j (the diagonal too).
        let wi = spread(b, w, true)?;
        let wj = spread(b, w, false)?;
        let gap = b.sub(wj, wi)?;
        let f = safe_recip(b, gap)?;
        let fx = b.mul(f, x)?;
        let dv = bmm(b, v, fx)?;
        Ok(vec![Some(dw), Some(dv)])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

impl Diff for Svd {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None, None, None]) };
        let (a, u, s, vh) = (cx.primals[0], cx.outputs[0], cx.outputs[1], cx.outputs[2]);
        let t = b.ty(a)?.clone();
        let rank = t.rank();
        let (m, n) = (t.shape[rank - 2], t.shape[rank - 1]);
        if self.full_matrices && m != n {
            return Err(IrError::NoRule {
                prim: self.name().into(),
                rule: "jvp",
                msg: format!(
                    "the full SVD (full_matrices) of a non-square matrix ({t}) has no derivative: the extra \
                     singular vectors are any orthonormal basis of a complement; use full_matrices=false"
                ),
            });
        }
        let x = {
            let ud = mm(b, u, true, da, false)?;
            mm(b, ud, false, vh, true)? // u^T dA v
        };
        let ds = diag_part(b, x)?;
        let si = spread(b, s, true)?;
        let sj = spread(b, s, false)?;
        let plus = b.add(sj, si)?;
        let minus = b.sub(sj, si)?;
        let gap = b.mul(plus, minus)?; // s_j^2 - s_i^2
        let f = safe_recip(b, gap)?;
        let xs = b.mul(x, sj)?; // X S
        let xs_t = swap_last2(b, xs)?;
        let sym_u = b.add(xs, xs_t)?;
        let fu = b.mul(f, sym_u)?;
        let mut du = bmm(b, u, fu)?;
        let sx = b.mul(si, x)?; // S X
        let sx_t = swap_last2(b, sx)?;
        let sym_v = b.add(sx, sx_t)?;
        let fv = b.mul(f, sym_v)?;
        let mut dv = mm(b, vh, true, fv, false)?; // v (F ∘ (S X + X^T S))
        let s_inv = safe_recip(b, s)?;
        if m > n {
            // (I - u u^T) dA v S^{-1}
            let dav = mm(b, da, false, vh, true)?;
            let utd = mm(b, u, true, dav, false)?;
            let proj = bmm(b, u, utd)?;
            let rest = b.sub(dav, proj)?;
            let sc = column_scale(b, s_inv, m)?;
            let corr = b.mul(rest, sc)?;
            du = b.add(du, corr)?;
        }
        if n > m {
            // (I - v v^T) dA^T u S^{-1}
            let dau = mm(b, da, true, u, false)?;
            let vtd = bmm(b, vh, dau)?;
            let proj = mm(b, vh, true, vtd, false)?;
            let rest = b.sub(dau, proj)?;
            let sc = column_scale(b, s_inv, n)?;
            let corr = b.mul(rest, sc)?;
            dv = b.add(dv, corr)?;
        }
        let dvh = swap_last2(b, dv)?;
        Ok(vec![Some(du), Some(ds), Some(dvh)])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

/// `c` (`[..., k]`) broadcast to `[..., rows, k]`: multiplying by it
/// scales column `j` by `c_j`.
fn column_scale(b: &mut Builder, c: Value, rows: usize) -> Result<Value, IrError> {
    let t = b.ty(c)?.clone();
    let r = t.rank();
    let mut shape = t.shape[..r - 1].to_vec();
    shape.extend([rows, t.shape[r - 1]]);
    let mut dims: Vec<usize> = (0..r - 1).collect();
    dims.push(r);
    b.broadcast_in_dim(c, &shape, &dims)
}

impl Diff for Cholesky {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None]) };
        let l = cx.outputs[0];
        // The primitive reads the lower triangle only, so the matrix it
        // factorizes moves by the symmetric matrix built from dA's lower
        // triangle (equal to dA when dA is symmetric).
        let ds = sym_lower(b, da)?;
        let t = b.triangular_solve(l, ds, true, true, false, false)?; // L^{-1} dA_s
        let x = b.triangular_solve(l, t, false, true, true, false)?; // (L^{-1} dA_s) L^{-T}
        let p = phi(b, x)?;
        Ok(vec![Some(bmm(b, l, p)?)])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

impl Diff for TriangularSolve {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (a, x) = (cx.primals[0], cx.outputs[0]);
        let mut rhs = cx.tangents[1];
        if let Some(da) = cx.tangents[0] {
            // Only the triangle the primitive reads moves the solution.
            let k = match (self.unit_diagonal, self.lower) {
                (false, _) => 0,
                (true, true) => -1,
                (true, false) => 1,
            };
            let m = band(b, da, k, self.lower)?;
            let r = b.ty(x)?.rank();
            let batch: Vec<usize> = (0..r - 2).collect();
            let prod = if self.left {
                // op(dA) X
                let c = if self.transpose_a { r - 2 } else { r - 1 };
                b.dot_general(m, x, &[c], &[r - 2], &batch, &batch)?
            } else {
                // X op(dA)
                let c = if self.transpose_a { r - 1 } else { r - 2 };
                b.dot_general(x, m, &[r - 1], &[c], &batch, &batch)?
            };
            rhs = sub_opt(b, rhs, Some(prod))?;
        }
        let Some(rhs) = rhs else { return Ok(vec![None]) };
        Ok(vec![Some(b.triangular_solve(a, rhs, self.left, self.lower, self.transpose_a, self.unit_diagonal)?)])
    }

    /// Linear in `b`: `X = op(A)^{-1} B` transposes to `op(A)^{-T} X_bar`
    /// (the right-side case likewise), a solve with `transpose_a` flipped.
    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let a = cx.primal(self.name(), 0)?;
        let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
        let bar = b.triangular_solve(a, ct, self.left, self.lower, !self.transpose_a, self.unit_diagonal)?;
        Ok(vec![None, Some(bar)])
    }
}

impl Diff for Lu {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None, None, None]) };
        let (lu, perm) = (cx.outputs[0], cx.outputs[2]);
        let dtype = b.ty(lu)?.dtype;
        let p = permutation_matrix(b, perm, dtype)?;
        let x = bmm(b, p, da)?; // P dA
                                // The solves read L (unit lower) and U straight out of `lu`.
        let la = b.triangular_solve(lu, x, true, true, false, true)?; // L^{-1} P dA
        let y = b.triangular_solve(lu, la, false, false, false, false)?; // ... U^{-1}
        let strict = band(b, lu, -1, true)?;
        let eye = eye_like(b, lu)?;
        let l = b.add(strict, eye)?;
        let u = band(b, lu, 0, false)?;
        let y_low = band(b, y, -1, true)?;
        let y_up = band(b, y, 0, false)?;
        let l_dot = bmm(b, l, y_low)?;
        let u_dot = bmm(b, y_up, u)?;
        Ok(vec![Some(b.add(l_dot, u_dot)?), None, None])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

// Batching: the primitives take any leading batch dims, so a batch dim
// among them stays where it is; one inside the matrix dims moves to the
// front. No rule loops over the batch.

/// Where a one-operand decomposition runs: in place when the batch dim
/// `d` of `x` is a leading dim, else with the batch dim moved to the front.
fn leading(b: &mut Builder, x: Value, d: usize) -> Result<(Value, usize), IrError> {
    let r = b.ty(x)?.rank();
    if d + 2 < r {
        Ok((x, d))
    } else {
        Ok((move_bdim(b, x, d, 0)?, 0))
    }
}

impl Batch for Cholesky {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let (x, d) = leading(b, cx.args[0], d)?;
        Ok(vec![(b.cholesky(x)?, Some(d))])
    }
}

impl Batch for Lu {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let (x, d) = leading(b, cx.args[0], d)?;
        let (lu, piv, perm) = b.lu(x)?;
        Ok(vec![(lu, Some(d)), (piv, Some(d)), (perm, Some(d))])
    }
}

impl Batch for TriangularSolve {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let (a, rhs) = (cx.args[0], cx.args[1]);
        let solve = |b: &mut Builder, a: Value, rhs: Value| {
            b.triangular_solve(a, rhs, self.left, self.lower, self.transpose_a, self.unit_diagonal)
        };
        match (cx.bdims[0], cx.bdims[1]) {
            (Some(da), Some(db)) => {
                let r = b.ty(a)?.rank();
                if da == db && da + 2 < r {
                    return Ok(vec![(solve(b, a, rhs)?, Some(da))]);
                }
                let a = move_bdim(b, a, da, 0)?;
                let rhs = move_bdim(b, rhs, db, 0)?;
                Ok(vec![(solve(b, a, rhs)?, Some(0))])
            }
            (Some(da), None) => {
                let (a, d) = leading(b, a, da)?;
                let rhs = materialize(b, rhs, d, cx.size)?;
                Ok(vec![(solve(b, a, rhs)?, Some(d))])
            }
            (None, Some(db)) => {
                // One matrix for every example: the examples' right-hand
                // sides become more columns (left) or rows (right) of one
                // solve, [.., n, B, k] -> [.., n, B*k].
                let t = b.ty(rhs)?.clone();
                let r = t.rank() - 1; // per-example rank
                let at = if self.left { r - 1 } else { r - 2 };
                let moved = move_bdim(b, rhs, db, at)?;
                let shape = b.ty(moved)?.shape.clone();
                let mut merged = shape[..at].to_vec();
                merged.push(shape[at] * shape[at + 1]);
                merged.extend_from_slice(&shape[at + 2..]);
                let flat = b.reshape(moved, &merged)?;
                let x = solve(b, a, flat)?;
                Ok(vec![(b.reshape(x, &shape)?, Some(at))])
            }
            (None, None) => Err(crate::batch::no_rule(self.name(), "internal error: called with no batched operand")),
        }
    }
}

impl Batch for Qr {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let (x, d) = leading(b, cx.args[0], d)?;
        let (q, r) = b.qr(x, self.full_matrices)?;
        Ok(vec![(q, Some(d)), (r, Some(d))])
    }
}

impl Batch for Eigh {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let (x, d) = leading(b, cx.args[0], d)?;
        let (w, v) = b.eigh(x)?;
        Ok(vec![(w, Some(d)), (v, Some(d))])
    }
}

impl Batch for Svd {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let (x, d) = leading(b, cx.args[0], d)?;
        let (u, s, vh) = b.svd(x, self.full_matrices)?;
        Ok(vec![(u, Some(d)), (s, Some(d)), (vh, Some(d))])
    }
}
