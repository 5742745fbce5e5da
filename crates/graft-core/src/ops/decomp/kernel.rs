//! The decompositions' kernels, over `faer`.
//!
//! Operands are row-major `[batch, rows, cols]` slices; faer takes strided
//! views, so a row-major matrix is a view with row stride `cols` and column
//! stride 1, and a transposed operand is the same view transposed (no copy).
//! Cholesky is the exception: it copies each matrix's lower triangle into a
//! column-major scratch, faer's preferred layout for the factorization, and
//! copies the factor back (two `O(n^2)` copies around `O(n^3)` work).
//!
//! Each matrix runs on one thread (`Par::Seq`); a batch is split across
//! rayon's pool when the total work is large enough, so a result does not
//! depend on the thread count or on the other matrices of its batch.

use super::super::kernel::{input, output, Real};
use super::TriangularSolve;
use crate::dtype::DType;
use crate::error::ExecError;
use crate::tensor::Tensor;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor as llt;
use faer::linalg::lu::partial_pivoting::factor as plu;
use faer::linalg::triangular_solve as tri;
use faer::{MatMut, MatRef, Par};
use rayon::prelude::*;

/// Element types faer factorizes: f32 and f64.
pub(super) trait Field: Real + faer::traits::RealField {}
impl Field for f32 {}
impl Field for f64 {}

/// Below this many multiply-adds in total a batch stays on one thread.
const PAR_FLOPS: usize = 1 << 16;

/// Runs `f(i, out_i)` for each of the `batch` output chunks of `len`
/// elements, spread over threads when `batch * flops_each` is large.
fn per_matrix<T: Send>(out: &mut [T], len: usize, flops_each: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if len == 0 {
        return;
    }
    let batch = out.len() / len;
    if batch > 1 && rayon::current_num_threads() > 1 && batch.saturating_mul(flops_each) >= PAR_FLOPS {
        out.par_chunks_mut(len).enumerate().for_each(|(i, o)| f(i, o));
    } else {
        for (i, o) in out.chunks_mut(len).enumerate() {
            f(i, o);
        }
    }
}

/// The last two dims `(n, m)` of a `[..., n, m]` tensor.
fn dims(t: &Tensor) -> (usize, usize) {
    let s = t.shape();
    let r = s.len();
    (s[r - 2], s[r - 1])
}

pub(super) fn cholesky(prim: &str, a: &Tensor, o: &mut Tensor) -> Result<(), ExecError> {
    if o.ty() != a.ty() || a.rank() < 2 {
        return Err(ExecError::kernel(prim, format!("internal error: output {} for operand {}", o.ty(), a.ty())));
    }
    let (n, _) = dims(a);
    match a.dtype() {
        DType::F32 => chol_all::<f32>(input(a)?, output(o)?, n),
        DType::F64 => chol_all::<f64>(input(a)?, output(o)?, n),
        d => return Err(super::super::kernel::unsupported(prim, d)),
    }
    Ok(())
}

fn chol_all<T: Field>(a: &[T], o: &mut [T], n: usize) {
    let nn = n * n;
    per_matrix(o, nn, nn * n / 3, |i, o| chol_one(&a[i * nn..(i + 1) * nn], o, n));
}

/// One factorization: `o` (row-major) gets `L`, or NaN everywhere.
fn chol_one<T: Field>(a: &[T], o: &mut [T], n: usize) {
    // Column-major scratch holding a's lower triangle (w[i + j n] = a[i n + j], i >= j).
    let mut w = vec![T::zero(); n * n];
    for j in 0..n {
        for i in j..n {
            w[i + j * n] = a[i * n + j];
        }
    }
    let par = Par::Seq;
    let params: faer::Spec<llt::LltParams, T> = Default::default();
    let mut mem = MemBuffer::new(llt::cholesky_in_place_scratch::<T>(n, par, params));
    let stack = MemStack::new(&mut mem);
    let mat = MatMut::from_column_major_slice_mut(&mut w, n, n);
    match llt::cholesky_in_place(mat, Default::default(), par, stack, params) {
        Ok(_) => {
            for i in 0..n {
                for j in 0..n {
                    o[i * n + j] = if j <= i { w[i + j * n] } else { T::zero() };
                }
            }
        }
        Err(_) => o.fill(T::nan()),
    }
}

pub(super) fn triangular_solve(op: &TriangularSolve, a: &Tensor, b: &Tensor, o: &mut Tensor) -> Result<(), ExecError> {
    if o.ty() != b.ty() || a.rank() < 2 || b.rank() != a.rank() {
        return Err(ExecError::kernel(
            "triangular_solve",
            format!("internal error: output {} for operands {} and {}", o.ty(), a.ty(), b.ty()),
        ));
    }
    let (n, _) = dims(a);
    let (p, q) = dims(b);
    match a.dtype() {
        DType::F32 => solve_all::<f32>(op, input(a)?, input(b)?, output(o)?, n, p, q),
        DType::F64 => solve_all::<f64>(op, input(a)?, input(b)?, output(o)?, n, p, q),
        d => return Err(super::super::kernel::unsupported("triangular_solve", d)),
    }
    Ok(())
}

/// Solves every matrix of the batch; `b` and `o` are `[batch, p, q]`.
fn solve_all<T: Field>(op: &TriangularSolve, a: &[T], b: &[T], o: &mut [T], n: usize, p: usize, q: usize) {
    let (nn, pq) = (n * n, p * q);
    per_matrix(o, pq, n * pq, |i, o| {
        o.copy_from_slice(&b[i * pq..(i + 1) * pq]);
        solve_one(op, &a[i * nn..(i + 1) * nn], o, n, p, q);
    });
}

/// Solves in place: `x` (row-major `[p, q]`) holds `B` on entry and `X` on exit.
///
/// faer solves `T X = B` from the left only. `X op(A) = B` is
/// `op(A)^T X^T = B^T`, so the right-side case solves with `op(A)^T` on the
/// transposed view of `x`. Whether the matrix faer sees is lower triangular
/// flips with each transpose.
fn solve_one<T: Field>(op: &TriangularSolve, a: &[T], x: &mut [T], n: usize, p: usize, q: usize) {
    let a = MatRef::from_row_major_slice(a, n, n);
    let x = MatMut::from_row_major_slice_mut(x, p, q);
    let (t, x, lower) = if op.left {
        let t = if op.transpose_a { a.transpose() } else { a };
        (t, x, op.lower != op.transpose_a)
    } else {
        let t = if op.transpose_a { a } else { a.transpose() };
        (t, x.transpose_mut(), op.lower == op.transpose_a)
    };
    let par = Par::Seq;
    match (lower, op.unit_diagonal) {
        (true, false) => tri::solve_lower_triangular_in_place(t, x, par),
        (true, true) => tri::solve_unit_lower_triangular_in_place(t, x, par),
        (false, false) => tri::solve_upper_triangular_in_place(t, x, par),
        (false, true) => tri::solve_unit_upper_triangular_in_place(t, x, par),
    }
}

pub(super) fn lu(prim: &str, a: &Tensor, outs: &mut [Tensor]) -> Result<(), ExecError> {
    let [lu, piv, perm] = outs else {
        return Err(ExecError::kernel(prim, "internal error: lu has three results"));
    };
    if lu.ty() != a.ty() || a.rank() < 2 {
        return Err(ExecError::kernel(prim, format!("internal error: output {} for operand {}", lu.ty(), a.ty())));
    }
    let (n, _) = dims(a);
    let (piv, perm) = (output::<i32>(piv)?, output::<i32>(perm)?);
    match a.dtype() {
        DType::F32 => lu_all::<f32>(input(a)?, output(lu)?, piv, perm, n),
        DType::F64 => lu_all::<f64>(input(a)?, output(lu)?, piv, perm, n),
        d => return Err(super::super::kernel::unsupported(prim, d)),
    }
    Ok(())
}

fn lu_all<T: Field>(a: &[T], lu: &mut [T], piv: &mut [i32], perm: &mut [i32], n: usize) {
    let nn = n * n;
    if nn == 0 {
        return;
    }
    // One task owns a matrix's `lu`, `pivots` and `permutation` chunks.
    let mut jobs: Vec<(&mut [T], &mut [i32], &mut [i32])> =
        lu.chunks_mut(nn).zip(piv.chunks_mut(n)).zip(perm.chunks_mut(n)).map(|((l, v), p)| (l, v, p)).collect();
    let run = |i: usize, (l, v, p): &mut (&mut [T], &mut [i32], &mut [i32])| {
        l.copy_from_slice(&a[i * nn..(i + 1) * nn]);
        lu_one(l, v, p, n);
    };
    let batch = jobs.len();
    if batch > 1 && rayon::current_num_threads() > 1 && batch.saturating_mul(nn * n * 2 / 3) >= PAR_FLOPS {
        jobs.par_iter_mut().enumerate().for_each(|(i, j)| run(i, j));
    } else {
        for (i, j) in jobs.iter_mut().enumerate() {
            run(i, j);
        }
    }
}

/// Factorizes `m` (row-major `[n, n]`) in place; writes the LAPACK-style
/// interchanges and the row permutation.
fn lu_one<T: Field>(m: &mut [T], piv: &mut [i32], perm: &mut [i32], n: usize) {
    let par = Par::Seq;
    let params: faer::Spec<plu::PartialPivLuParams, T> = Default::default();
    let mut row = vec![0usize; n];
    let mut row_inv = vec![0usize; n];
    let mut mem = MemBuffer::new(plu::lu_in_place_scratch::<usize, T>(n, n, par, params));
    let stack = MemStack::new(&mut mem);
    let mat = MatMut::from_row_major_slice_mut(m, n, n);
    plu::lu_in_place(mat, &mut row, &mut row_inv, par, stack, params);
    // faer reports the permutation only; the interchanges that produce it
    // are unique (step i brings row `row[i]` to position i, and later steps
    // never touch position i), so replay them.
    let mut at: Vec<usize> = (0..n).collect(); // at[pos] = original row there
    let mut pos: Vec<usize> = (0..n).collect(); // pos[row] = its position
    for i in 0..n {
        let j = pos[row[i]];
        piv[i] = j as i32;
        perm[i] = row[i] as i32;
        at.swap(i, j);
        pos[at[i]] = i;
        pos[at[j]] = j;
    }
}
