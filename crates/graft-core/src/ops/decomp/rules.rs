//! Derivative and batching rules of the decompositions (formulas in the
//! module docs of `ops/decomp`).
//!
//! Tangents only meet linear primitives: `select` against zeros (triangle
//! masks), `transpose`, `add`/`sub`, `mul` by a primal coefficient,
//! `dot_general` with a primal other side and `triangular_solve` with a
//! primal matrix, so reverse mode transposes them with existing rules.

use super::{band, bmm, permutation_matrix, swap_last2, Cholesky, Lu, TriangularSolve};
use crate::ad::helpers::sub_opt;
use crate::ad::{Diff, JvpCx, TransposeCx};
use crate::batch::helpers::{materialize, move_bdim};
use crate::batch::{Batch, BatchCx, Batched};
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::Op;
use crate::types::TensorType;

/// The identity matrix in the type of `like` (`[..., n, n]`), broadcast.
fn eye_like(b: &mut Builder, like: Value) -> Result<Value, IrError> {
    let t = b.ty(like)?.clone();
    let r = t.rank();
    let n = t.shape[r - 1];
    let i = b.iota(DType::I64, &[n, n], 0)?;
    let j = b.iota(DType::I64, &[n, n], 1)?;
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
    let i = b.iota(DType::I64, &[n, n], 0)?;
    let j = b.iota(DType::I64, &[n, n], 1)?;
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

impl Diff for Cholesky {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(da) = cx.tangents[0] else { return Ok(vec![None]) };
        let l = cx.outputs[0];
        // The primitive reads the lower triangle only, so the matrix it
        // factorizes moves by the symmetric matrix built from dA's lower
        // triangle (equal to dA when dA is symmetric).
        let low = band(b, da, 0, true)?;
        let strict = band(b, da, -1, true)?;
        let up = swap_last2(b, strict)?;
        let ds = b.add(low, up)?;
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
