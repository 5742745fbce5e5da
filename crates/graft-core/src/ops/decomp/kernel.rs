//! The decompositions' kernels, over `faer`.
//!
//! Operands are row-major `[batch, rows, cols]` slices; faer takes strided
//! views, so a row-major matrix is a view with row stride `cols` and column
//! stride 1, and a transposed operand is the same view transposed (no copy).
//! Cholesky is the exception: it copies each matrix's lower triangle into a
//! column-major scratch, faer's preferred layout for the factorization, and
//! copies the factor back (two `O(n^2)` copies around `O(n^3)` work).
//!
//! QR works on a column-major copy too (faer's Householder QR prefers it)
//! and forms `q` by applying the reflectors to the identity; the eigensolver
//! and the SVD read the row-major operand through a strided view and write
//! their vectors into column-major scratch (the SVD's `v`, column-major
//! `[n, k]`, is exactly the row-major `vh` it returns, so it is written in
//! place).
//!
//! Each matrix runs on one thread (`Par::Seq`); a batch is split across
//! rayon's pool when the total work is large enough, so a result does not
//! depend on the thread count or on the other matrices of its batch.
//!
//! Operands with a NaN or an infinity among the entries a factorization
//! reads get NaN-filled results without calling faer: its iterations need
//! finite input, and the documented answer for such a matrix is NaN anyway.
//! QR, eigh and the SVD first scale a matrix whose largest magnitude is far
//! from 1 by a power of two (exact) and scale `r`, the eigenvalues or the
//! singular values back: faer flushes subnormal norms to zero and squares
//! entries in its norms, so without it a matrix of subnormal entries would
//! factor as zero and one near the overflow threshold as infinities.

use super::super::kernel::{input, output, Real};
use super::TriangularSolve;
use crate::dtype::DType;
use crate::error::ExecError;
use crate::tensor::Tensor;
use faer::diag::DiagMut;
use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
use faer::linalg::cholesky::llt::factor as llt;
use faer::linalg::evd;
use faer::linalg::householder;
use faer::linalg::lu::partial_pivoting::factor as plu;
use faer::linalg::qr::no_pivoting::factor as qrf;
use faer::linalg::svd as fsvd;
use faer::linalg::triangular_solve as tri;
use faer::{Conj, MatMut, MatRef, Par};
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

/// Runs `f(i, job_i)` for one job per matrix, spread over threads when the
/// batch's total work (`flops_each` per matrix) is large.
fn run_jobs<J: Send>(jobs: &mut [J], flops_each: usize, f: impl Fn(usize, &mut J) + Sync) {
    let batch = jobs.len();
    if batch > 1 && rayon::current_num_threads() > 1 && batch.saturating_mul(flops_each) >= PAR_FLOPS {
        jobs.par_iter_mut().enumerate().for_each(|(i, j)| f(i, j));
    } else {
        for (i, j) in jobs.iter_mut().enumerate() {
            f(i, j);
        }
    }
}

/// `batch` chunks of `len` elements of `s` (empty ones when `len` is 0,
/// where `chunks_mut` cannot be used).
fn chunks<T>(s: &mut [T], len: usize, batch: usize) -> Vec<&mut [T]> {
    if len == 0 {
        (0..batch).map(|_| -> &mut [T] { &mut [] }).collect()
    } else {
        s.chunks_mut(len).collect()
    }
}

/// The number of matrices in a `[..., n, m]` tensor.
fn batch_of(t: &Tensor) -> usize {
    let s = t.shape();
    s[..s.len() - 2].iter().product()
}

/// Writes the first `cols` columns of the `[rows, rows]` identity into `o`
/// (row-major `[rows, cols]`).
fn identity<T: Field>(o: &mut [T], rows: usize, cols: usize) {
    o.fill(T::zero());
    for i in 0..rows.min(cols) {
        o[i * cols + i] = T::one();
    }
}

/// A power-of-two scaling bringing a matrix's largest magnitude `amax`
/// near 1, as two factors each way (`2^k` itself may not be representable
/// when `amax` is subnormal); `None` when `amax` is already in the range
/// where faer's norms neither underflow nor overflow, or is zero.
struct Scale<T> {
    by: [T; 2],
    back: [T; 2],
}

impl<T: Field> Scale<T> {
    fn of(amax: T) -> Option<Scale<T>> {
        let a = num_traits::ToPrimitive::to_f64(&amax)?;
        if a == 0.0 || !a.is_finite() {
            return None;
        }
        let e = a.log2().round() as i32;
        let safe = if std::mem::size_of::<T>() == 4 { 40 } else { 300 };
        if e.abs() <= safe {
            return None;
        }
        let (k1, k2) = (-e / 2, -e - (-e / 2));
        let pow = |k: i32| -> Option<T> { num_traits::NumCast::from(2f64.powi(k)) };
        Some(Scale { by: [pow(k1)?, pow(k2)?], back: [pow(-k1)?, pow(-k2)?] })
    }

    fn apply(&self, x: T) -> T {
        x * self.by[0] * self.by[1]
    }

    fn undo(&self, xs: &mut [T]) {
        for x in xs {
            *x = *x * self.back[0] * self.back[1];
        }
    }
}

/// The largest magnitude among `xs`.
fn amax<'a, T: Field>(xs: impl Iterator<Item = &'a T>) -> T {
    xs.fold(T::zero(), |m, &x| {
        let x = num_traits::Float::abs(x);
        if x > m {
            x
        } else {
            m
        }
    })
}

/// The last two dims `(n, m)` of a `[..., n, m]` tensor.
/// Copies the column-major `rows x cols` matrix `src` (faer's factor
/// layout) into the row-major `dst` (graft's).
fn to_row_major<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize) {
    for i in 0..rows {
        for j in 0..cols {
            dst[i * cols + j] = src[i + j * rows];
        }
    }
}

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
    run_jobs(&mut jobs, nn * n * 2 / 3, run);
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

/// Checks a multi-result kernel's operand: rank >= 2 and results of its dtype.
fn check_outs(prim: &str, a: &Tensor, outs: &[Tensor]) -> Result<(), ExecError> {
    if a.rank() < 2 || outs.iter().any(|o| o.dtype() != a.dtype()) {
        return Err(ExecError::kernel(prim, format!("internal error: results of {prim} for operand {}", a.ty())));
    }
    Ok(())
}

pub(super) fn qr(prim: &str, a: &Tensor, outs: &mut [Tensor]) -> Result<(), ExecError> {
    check_outs(prim, a, outs)?;
    let [q, r] = outs else {
        return Err(ExecError::kernel(prim, "internal error: qr has two results"));
    };
    let (m, n) = dims(a);
    let qc = dims(q).1;
    let batch = batch_of(a);
    match a.dtype() {
        DType::F32 => qr_all::<f32>(input(a)?, output(q)?, output(r)?, batch, m, n, qc),
        DType::F64 => qr_all::<f64>(input(a)?, output(q)?, output(r)?, batch, m, n, qc),
        d => return Err(super::super::kernel::unsupported(prim, d)),
    }
    Ok(())
}

/// `q` is `[batch, m, qc]` and `r` `[batch, qc, n]` (`qc` is `min(m, n)`,
/// or `m` for complete factors).
fn qr_all<T: Field>(a: &[T], q: &mut [T], r: &mut [T], batch: usize, m: usize, n: usize, qc: usize) {
    let mut jobs: Vec<(&mut [T], &mut [T])> =
        chunks(q, m * qc, batch).into_iter().zip(chunks(r, qc * n, batch)).collect();
    let k = m.min(n);
    run_jobs(&mut jobs, 2 * m * n * k, |i, (q, r)| qr_one(&a[i * m * n..(i + 1) * m * n], q, r, m, n, qc));
}

/// One QR: Householder reflectors on a column-major copy, `r` from its
/// upper triangle, `q` the reflectors applied to the identity's first `qc`
/// columns.
fn qr_one<T: Field>(a: &[T], q: &mut [T], r: &mut [T], m: usize, n: usize, qc: usize) {
    if !a.iter().all(|x| x.is_finite()) {
        q.fill(T::nan());
        r.fill(T::nan());
        return;
    }
    identity(q, m, qc);
    r.fill(T::zero());
    let k = m.min(n);
    if k == 0 {
        return;
    }
    let scale = Scale::of(amax(a.iter()));
    let mut w = vec![T::zero(); m * n];
    for i in 0..m {
        for j in 0..n {
            let x = a[i * n + j];
            w[i + j * m] = scale.as_ref().map_or(x, |s| s.apply(x));
        }
    }
    let par = Par::Seq;
    let params: faer::Spec<qrf::QrParams, T> = Default::default();
    let bs = qrf::recommended_block_size::<T>(m, n);
    let mut coeff = vec![T::zero(); bs * k];
    let mut mem = MemBuffer::new(StackReq::any_of(&[
        qrf::qr_in_place_scratch::<T>(m, n, bs, par, params),
        householder::apply_block_householder_sequence_on_the_left_in_place_scratch::<T>(m, bs, qc),
    ]));
    let stack = MemStack::new(&mut mem);
    let wm = MatMut::from_column_major_slice_mut(&mut w, m, n);
    let cm = MatMut::from_column_major_slice_mut(&mut coeff, bs, k);
    qrf::qr_in_place(wm, cm, par, &mut *stack, params);
    for i in 0..k {
        for j in i..n {
            r[i * n + j] = w[i + j * m];
        }
    }
    if let Some(s) = &scale {
        s.undo(r);
    }
    let basis = MatRef::from_column_major_slice(&w, m, n).subcols(0, k);
    let qm = MatMut::from_row_major_slice_mut(q, m, qc);
    householder::apply_block_householder_sequence_on_the_left_in_place_with_conj(
        basis,
        MatRef::from_column_major_slice(&coeff, bs, k),
        Conj::No,
        qm,
        par,
        stack,
    );
}

pub(super) fn eigh(prim: &str, a: &Tensor, outs: &mut [Tensor]) -> Result<(), ExecError> {
    check_outs(prim, a, outs)?;
    let [w, v] = outs else {
        return Err(ExecError::kernel(prim, "internal error: eigh has two results"));
    };
    let (n, _) = dims(a);
    let batch = batch_of(a);
    match a.dtype() {
        DType::F32 => eigh_all::<f32>(input(a)?, output(w)?, output(v)?, batch, n),
        DType::F64 => eigh_all::<f64>(input(a)?, output(w)?, output(v)?, batch, n),
        d => return Err(super::super::kernel::unsupported(prim, d)),
    }
    Ok(())
}

fn eigh_all<T: Field>(a: &[T], w: &mut [T], v: &mut [T], batch: usize, n: usize) {
    let nn = n * n;
    let mut jobs: Vec<(&mut [T], &mut [T])> = chunks(w, n, batch).into_iter().zip(chunks(v, nn, batch)).collect();
    run_jobs(&mut jobs, 9 * nn * n, |i, (w, v)| eigh_one(&a[i * nn..(i + 1) * nn], w, v, n));
}

/// One symmetric eigendecomposition of the lower triangle of `a`.
fn eigh_one<T: Field>(a: &[T], w: &mut [T], v: &mut [T], n: usize) {
    if n == 0 {
        return;
    }
    let finite = (0..n).all(|i| a[i * n..i * n + i + 1].iter().all(|x| x.is_finite()));
    if !finite {
        w.fill(T::nan());
        v.fill(T::nan());
        return;
    }
    let scale = Scale::of(amax((0..n).flat_map(|i| &a[i * n..i * n + i + 1])));
    let scaled: Vec<T>;
    let a = match &scale {
        Some(s) => {
            scaled = a.iter().map(|&x| s.apply(x)).collect();
            &scaled[..]
        }
        None => a,
    };
    let par = Par::Seq;
    let params: faer::Spec<evd::SelfAdjointEvdParams, T> = Default::default();
    let mut mem = MemBuffer::new(evd::self_adjoint_evd_scratch::<T>(n, evd::ComputeEigenvectors::Yes, par, params));
    let stack = MemStack::new(&mut mem);
    let mut u = vec![T::zero(); n * n];
    let am = MatRef::from_row_major_slice(a, n, n);
    let um = MatMut::from_column_major_slice_mut(&mut u, n, n);
    match evd::self_adjoint_evd(am, DiagMut::from_slice_mut(w), Some(um), par, stack, params) {
        Ok(()) => {
            to_row_major(&u, v, n, n);
            if let Some(s) = &scale {
                s.undo(w);
            }
        }
        Err(_) => {
            w.fill(T::nan());
            v.fill(T::nan());
        }
    }
}

pub(super) fn svd(prim: &str, a: &Tensor, outs: &mut [Tensor]) -> Result<(), ExecError> {
    check_outs(prim, a, outs)?;
    let [u, s, vh] = outs else {
        return Err(ExecError::kernel(prim, "internal error: svd has three results"));
    };
    let (m, n) = dims(a);
    let (uc, vr) = (dims(u).1, dims(vh).0);
    let batch = batch_of(a);
    match a.dtype() {
        DType::F32 => svd_all::<f32>(input(a)?, output(u)?, output(s)?, output(vh)?, batch, (m, n), (uc, vr)),
        DType::F64 => svd_all::<f64>(input(a)?, output(u)?, output(s)?, output(vh)?, batch, (m, n), (uc, vr)),
        d => return Err(super::super::kernel::unsupported(prim, d)),
    }
    Ok(())
}

/// `u` is `[batch, m, uc]`, `s` `[batch, min(m, n)]`, `vh` `[batch, vr, n]`.
fn svd_all<T: Field>(
    a: &[T],
    u: &mut [T],
    s: &mut [T],
    vh: &mut [T],
    batch: usize,
    (m, n): (usize, usize),
    (uc, vr): (usize, usize),
) {
    let k = m.min(n);
    let mut jobs: Vec<(&mut [T], &mut [T], &mut [T])> = chunks(u, m * uc, batch)
        .into_iter()
        .zip(chunks(s, k, batch))
        .zip(chunks(vh, vr * n, batch))
        .map(|((u, s), v)| (u, s, v))
        .collect();
    run_jobs(&mut jobs, 12 * m * n * k, |i, (u, s, vh)| {
        svd_one(&a[i * m * n..(i + 1) * m * n], u, s, vh, (m, n), (uc, vr));
    });
}

/// One SVD; `vh` (row-major `[vr, n]`) is faer's `v` (column-major `[n, vr]`).
fn svd_one<T: Field>(
    a: &[T],
    u: &mut [T],
    s: &mut [T],
    vh: &mut [T],
    (m, n): (usize, usize),
    (uc, vr): (usize, usize),
) {
    if !a.iter().all(|x| x.is_finite()) {
        u.fill(T::nan());
        s.fill(T::nan());
        vh.fill(T::nan());
        return;
    }
    if m.min(n) == 0 {
        identity(u, m, uc);
        identity(vh, vr, n);
        return;
    }
    let mode = if uc == m && vr == n && uc.max(vr) > m.min(n) {
        fsvd::ComputeSvdVectors::Full
    } else {
        fsvd::ComputeSvdVectors::Thin
    };
    let scale = Scale::of(amax(a.iter()));
    let scaled: Vec<T>;
    let a = match &scale {
        Some(s) => {
            scaled = a.iter().map(|&x| s.apply(x)).collect();
            &scaled[..]
        }
        None => a,
    };
    let par = Par::Seq;
    let params: faer::Spec<fsvd::SvdParams, T> = Default::default();
    let mut mem = MemBuffer::new(fsvd::svd_scratch::<T>(m, n, mode, mode, par, params));
    let stack = MemStack::new(&mut mem);
    let mut uw = vec![T::zero(); m * uc];
    let am = MatRef::from_row_major_slice(a, m, n);
    let um = MatMut::from_column_major_slice_mut(&mut uw, m, uc);
    let vm = MatMut::from_column_major_slice_mut(vh, n, vr);
    match fsvd::svd(am, DiagMut::from_slice_mut(s), Some(um), Some(vm), par, stack, params) {
        Ok(()) => {
            to_row_major(&uw, u, m, uc);
            if let Some(sc) = &scale {
                sc.undo(s);
            }
        }
        Err(_) => {
            u.fill(T::nan());
            s.fill(T::nan());
            vh.fill(T::nan());
        }
    }
}
