//! `dot_general`: batched tensor contraction with XLA semantics, and the
//! shared float GEMM helper that `conv_general` also uses.
//!
//! Semantics: `lhs_batch[i]` pairs with `rhs_batch[i]` and `lhs_contract[i]`
//! with `rhs_contract[i]` (sizes must match). Output dims are the batch dims
//! (in `lhs_batch` order), then lhs free dims (in order), then rhs free dims
//! (in order). Both operands share one numeric dtype (f32, f64, i32, i64).
//! Contracting over a zero-sized dim gives zeros. Integer products and sums
//! wrap on overflow (two's complement, like NumPy).
//!
//! Kernel strategy: every operand is viewed as `[batch, rows, cols]` with one
//! stride per group. When the dims of each group are already adjacent and in
//! order in memory (plain, transposed and most batched layouts) the operand is
//! used in place through strides; otherwise it is first transposed into a
//! contiguous scratch buffer. Floats go through the `gemm` crate (the only
//! `unsafe` in the crate, in `gemm_f`) and accumulate in their own precision
//! (f32 sums in f32, like NumPy and XLA on CPU), except products of at most
//! `SMALL_DOT_MACS` multiply-adds, which a plain row loop computes (the
//! crate's dispatch costs more than they do); integers use an i-k-j loop.
//! Parallelism: one large product lets `gemm` split it across rayon threads;
//! many small batched products are split across the batch instead. Either way
//! each output element is accumulated in the same order, so results do not
//! depend on the thread count.

use super::kernel::{input, output, Real};
use super::tiles::{put_scratch, take_scratch, transpose_into};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Tensor};
use crate::types::{fmt_list, strides_of, TensorType};
use rayon::prelude::*;
use std::borrow::Cow;

/// General dot product (XLA `DotGeneral`): contracts `lhs_contract` against
/// `rhs_contract`, batched over `lhs_batch`/`rhs_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DotGeneral {
    /// Contracting dims of the lhs.
    pub lhs_contract: Vec<usize>,
    /// Contracting dims of the rhs, paired in order with `lhs_contract`.
    pub rhs_contract: Vec<usize>,
    /// Batch dims of the lhs.
    pub lhs_batch: Vec<usize>,
    /// Batch dims of the rhs, paired in order with `lhs_batch`.
    pub rhs_batch: Vec<usize>,
}

/// The dims of one operand sorted into the three groups of a batched matmul.
struct Groups {
    batch: Vec<usize>,
    free: Vec<usize>,
    contract: Vec<usize>,
}

fn free_dims(rank: usize, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..rank).filter(|d| !batch.contains(d) && !contract.contains(d)).collect()
}

impl DotGeneral {
    fn groups(&self, lhs_rank: usize, rhs_rank: usize) -> (Groups, Groups) {
        let l = Groups {
            batch: self.lhs_batch.clone(),
            free: free_dims(lhs_rank, &self.lhs_batch, &self.lhs_contract),
            contract: self.lhs_contract.clone(),
        };
        let r = Groups {
            batch: self.rhs_batch.clone(),
            free: free_dims(rhs_rank, &self.rhs_batch, &self.rhs_contract),
            contract: self.rhs_contract.clone(),
        };
        (l, r)
    }

    /// Checks one operand's batch and contracting dims: in range, disjoint, unrepeated.
    fn check_dims(
        &self,
        ins: &[TensorType],
        side: &str,
        rank: usize,
        batch: &[usize],
        contract: &[usize],
    ) -> Result<(), TypeError> {
        let all: Vec<(usize, &str)> =
            batch.iter().map(|&d| (d, "batch")).chain(contract.iter().map(|&d| (d, "contract"))).collect();
        for (i, &(d, what)) in all.iter().enumerate() {
            if d >= rank {
                return Err(check::err(self, ins, format!("{side}_{what} dim {d} out of range for rank {rank}")));
            }
            if all[..i].iter().any(|&(e, _)| e == d) {
                return Err(check::err(
                    self,
                    ins,
                    format!("{side} dim {d} listed twice among {side}_batch and {side}_contract"),
                ));
            }
        }
        Ok(())
    }
}

impl Op for DotGeneral {
    fn name(&self) -> &'static str {
        "dot_general"
    }

    fn params(&self) -> String {
        format!(
            "lhs_contract={}, rhs_contract={}, lhs_batch={}, rhs_batch={}",
            fmt_list(&self.lhs_contract),
            fmt_list(&self.rhs_contract),
            fmt_list(&self.lhs_batch),
            fmt_list(&self.rhs_batch)
        )
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        let (l, r) = (&ins[0], &ins[1]);
        if l.dtype != r.dtype {
            return Err(check::err(self, ins, "expected both operands to have the same dtype"));
        }
        if !l.dtype.is_numeric() {
            return Err(check::err(self, ins, "expected numeric operands (f32, f64, i32 or i64)"));
        }
        if self.lhs_contract.len() != self.rhs_contract.len() {
            return Err(check::err(self, ins, "expected lhs_contract and rhs_contract of equal length"));
        }
        if self.lhs_batch.len() != self.rhs_batch.len() {
            return Err(check::err(self, ins, "expected lhs_batch and rhs_batch of equal length"));
        }
        self.check_dims(ins, "lhs", l.rank(), &self.lhs_batch, &self.lhs_contract)?;
        self.check_dims(ins, "rhs", r.rank(), &self.rhs_batch, &self.rhs_contract)?;
        for (&a, &b) in self.lhs_batch.iter().zip(&self.rhs_batch) {
            if l.shape[a] != r.shape[b] {
                return Err(check::err(
                    self,
                    ins,
                    format!(
                        "expected batch dims of equal size: lhs dim {a} is {}, rhs dim {b} is {}",
                        l.shape[a], r.shape[b]
                    ),
                ));
            }
        }
        for (&a, &b) in self.lhs_contract.iter().zip(&self.rhs_contract) {
            if l.shape[a] != r.shape[b] {
                return Err(check::err(
                    self,
                    ins,
                    format!(
                        "expected contracting dims of equal size: lhs dim {a} is {}, rhs dim {b} is {}",
                        l.shape[a], r.shape[b]
                    ),
                ));
            }
        }
        let (lg, rg) = self.groups(l.rank(), r.rank());
        let shape: Vec<usize> = lg
            .batch
            .iter()
            .map(|&d| l.shape[d])
            .chain(lg.free.iter().map(|&d| l.shape[d]))
            .chain(rg.free.iter().map(|&d| r.shape[d]))
            .collect();
        Ok(vec![TensorType::new(l.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (a, b) = (ins[0], ins[1]);
        // Re-derive the output type: the strided views below index by these
        // shapes, so they must agree with the shape rule.
        let ty = self.infer(&[a.ty(), b.ty()]).map_err(IrError::from)?.remove(0);
        let o = &mut outs[0];
        if o.ty() != ty {
            return Err(ExecError::kernel(self.name(), format!("internal error: output is {}, expected {ty}", o.ty())));
        }
        let (sa, sb) = (a.shape(), b.shape());
        match a.dtype() {
            DType::F32 => self.plan(sa, sb).run::<f32>(input(a)?, input(b)?, output(o)?),
            DType::F64 => self.plan(sa, sb).run::<f64>(input(a)?, input(b)?, output(o)?),
            DType::I32 => {
                let (dims, lp, rp) = self.operands(sa, sb);
                int_dot::<i32>(dims, &lp, input(a)?, &rp, input(b)?, output(o)?)
            }
            DType::I64 => {
                let (dims, lp, rp) = self.operands(sa, sb);
                int_dot::<i64>(dims, &lp, input(a)?, &rp, input(b)?, output(o)?)
            }
            DType::U32 => {
                let (dims, lp, rp) = self.operands(sa, sb);
                int_dot::<u32>(dims, &lp, input(a)?, &rp, input(b)?, output(o)?)
            }
            d => return Err(super::kernel::unsupported(self.name(), d)),
        }
        Ok(())
    }
}

impl DotGeneral {
    /// The canonical sizes and the two operands' `[batch, rows, cols]` views.
    fn operands(&self, a_shape: &[usize], b_shape: &[usize]) -> (Dims, Operand, Operand) {
        let (lg, rg) = self.groups(a_shape.len(), b_shape.len());
        let lp = Operand::new(a_shape, &lg.batch, &lg.free, &lg.contract);
        let rp = Operand::new(b_shape, &rg.batch, &rg.contract, &rg.free);
        (Dims { batch: lp.b, m: lp.r, k: lp.c, n: rp.c }, lp, rp)
    }

    /// This product on operands shaped `a_shape` and `b_shape` (checked
    /// against the shape rule by the caller), set up once for many calls.
    pub(crate) fn plan(&self, a_shape: &[usize], b_shape: &[usize]) -> DotPlan {
        let (dims, lp, rp) = self.operands(a_shape, b_shape);
        DotPlan { dims, lp, rp }
    }
}

/// A `dot_general` on fixed operand shapes, ready to run on slices: what
/// [`Op::kernel`] runs for floats, and what a compiled loop calls back for
/// (`kernel::host`, planned once per loop), so both give the same bits.
#[derive(Debug, Clone)]
pub(crate) struct DotPlan {
    dims: Dims,
    lp: Operand,
    rp: Operand,
}

impl DotPlan {
    /// `o = a . b` on row-major slices of the planned shapes.
    pub(crate) fn run<T: Real>(&self, a: &[T], b: &[T], o: &mut [T]) {
        float_dot::<T>(self.dims, &self.lp, a, &self.rp, b, o);
    }
}

/// Sizes of the canonical batched product `[batch, m, k] x [batch, k, n]`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
}

/// One operand seen as `[b, r, c]`: the three dim groups, their sizes and,
/// when the groups are contiguous-in-order in memory, their strides.
#[derive(Debug, Clone)]
struct Operand {
    shape: Vec<usize>,
    /// `batch ++ rows ++ cols`: the dim order of the scratch copy.
    order: Vec<usize>,
    b: usize,
    r: usize,
    c: usize,
    /// `(batch, row, col)` strides of the in-place view, if one exists.
    view: Option<(usize, usize, usize)>,
}

/// The single stride that walks `axes` (outer to inner) as one flattened
/// dim, if one exists. Size-1 dims never move, so they are ignored.
fn merged_stride(shape: &[usize], strides: &[usize], axes: &[usize]) -> Option<usize> {
    let live: Vec<usize> = axes.iter().copied().filter(|&a| shape[a] != 1).collect();
    for w in live.windows(2) {
        if strides[w[0]] != strides[w[1]] * shape[w[1]] {
            return None;
        }
    }
    // A group of only size-1 dims is never stepped; any stride is valid.
    Some(live.last().map_or(1, |&a| strides[a]))
}

impl Operand {
    fn new(shape: &[usize], batch: &[usize], rows: &[usize], cols: &[usize]) -> Operand {
        let size = |axes: &[usize]| axes.iter().map(|&a| shape[a]).product::<usize>();
        let strides = strides_of(shape);
        let view = match (
            merged_stride(shape, &strides, batch),
            merged_stride(shape, &strides, rows),
            merged_stride(shape, &strides, cols),
        ) {
            (Some(b), Some(r), Some(c)) => Some((b, r, c)),
            _ => None,
        };
        Operand {
            shape: shape.to_vec(),
            order: batch.iter().chain(rows).chain(cols).copied().collect(),
            b: size(batch),
            r: size(rows),
            c: size(cols),
            view,
        }
    }

    /// The operand's data as `[b, r, c]` with strides: in place when the
    /// view exists (and, if `need_unit_col`, has unit column stride),
    /// otherwise a contiguous transposed copy.
    fn materialize<'a, T: Copy + Send + Sync>(&self, data: &'a [T], need_unit_col: bool) -> (Cow<'a, [T]>, Strides) {
        match self.view {
            Some((b, r, c)) if !need_unit_col || c == 1 || self.c <= 1 => (Cow::Borrowed(data), Strides { b, r, c }),
            _ => (
                Cow::Owned(transpose_copy(data, &self.shape, &self.order)),
                Strides { b: self.r * self.c, r: self.c, c: 1 },
            ),
        }
    }
}

/// Element strides of a `[batch, rows, cols]` view.
#[derive(Clone, Copy, Debug)]
struct Strides {
    b: usize,
    r: usize,
    c: usize,
}

/// Copies row-major `src` of `shape` into a new row-major buffer whose dims
/// are `shape[order[0]], shape[order[1]], ...` (a transpose).
pub(crate) fn transpose_copy<T: Copy + Send + Sync>(src: &[T], shape: &[usize], order: &[usize]) -> Vec<T> {
    let n = src.len();
    if n == 0 {
        return Vec::new();
    }
    let src_strides = strides_of(shape);
    let dims: Vec<usize> = order.iter().map(|&a| shape[a]).collect();
    let strides: Vec<usize> = order.iter().map(|&a| src_strides[a]).collect();
    let Some((&inner, outer_dims)) = dims.split_last() else {
        return src.to_vec(); // rank 0: one element
    };
    let inner_stride = strides[strides.len() - 1];
    let outer_strides = &strides[..strides.len() - 1];
    let mut out = vec![src[0]; n];
    // Fills rows `row0..` of the output (each `inner` long) into `chunk`.
    let fill = |row0: usize, chunk: &mut [T]| {
        let mut idx = vec![0usize; outer_dims.len()];
        let mut rem = row0;
        for d in (0..outer_dims.len()).rev() {
            idx[d] = rem % outer_dims[d];
            rem /= outer_dims[d];
        }
        let mut base: usize = idx.iter().zip(outer_strides).map(|(i, s)| i * s).sum();
        for row in chunk.chunks_mut(inner) {
            if inner_stride == 1 {
                row.copy_from_slice(&src[base..base + inner]);
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = src[base + j * inner_stride];
                }
            }
            // Odometer step over the outer dims.
            for d in (0..outer_dims.len()).rev() {
                idx[d] += 1;
                base += outer_strides[d];
                if idx[d] < outer_dims[d] {
                    break;
                }
                base -= outer_strides[d] * outer_dims[d];
                idx[d] = 0;
            }
        }
    };
    if super::kernel::worth_parallel(n) {
        let rows_per_task = (super::kernel::CHUNK / inner).max(1);
        out.par_chunks_mut(rows_per_task * inner).enumerate().for_each(|(t, c)| fill(t * rows_per_task, c));
    } else {
        fill(0, &mut out);
    }
    out
}

/// Below this many multiply-adds (per product) `gemm` runs single-threaded.
const GEMM_PAR_FLOPS: usize = 1 << 18;
/// Below this many multiply-adds in total a batched product stays serial.
const BATCH_PAR_FLOPS: usize = 1 << 16;
/// Products at least this large are parallelised inside `gemm` rather than
/// across a batch that does not split evenly over the threads.
const BIG_PRODUCT_FLOPS: usize = 1 << 24;

/// How to run `batch` independent products of `per` multiply-adds each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parallelism {
    /// One thread for everything.
    Serial,
    /// Batch items in parallel, each product single-threaded; `items` per task.
    Batch { items: usize },
    /// Batch items in order, each product split by `gemm` across threads.
    Inner,
}

/// Chooses between batch-level and `gemm`-level parallelism.
pub(crate) fn parallelism(batch: usize, per: usize) -> Parallelism {
    let threads = rayon::current_num_threads();
    let total = batch.saturating_mul(per);
    if threads <= 1 || total < BATCH_PAR_FLOPS {
        return Parallelism::Serial;
    }
    let even = batch >= 4 * threads || batch / threads * threads == batch;
    if batch > 1 && (per < BIG_PRODUCT_FLOPS || even) {
        // Enough items per task that each carries real work, yet enough tasks to balance.
        let items = (BATCH_PAR_FLOPS / per.max(1)).clamp(1, batch.div_ceil(threads));
        Parallelism::Batch { items }
    } else if per >= GEMM_PAR_FLOPS {
        Parallelism::Inner
    } else {
        Parallelism::Serial
    }
}

/// A read-only strided matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatRef<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

/// `dst = a @ b` for `a: [m, k]`, `b: [k, n]` and `dst` row-major `[m, n]`
/// (`dst` is fully overwritten; `k == 0` gives zeros). `parallel` lets `gemm`
/// split the product across the rayon pool.
pub(crate) fn gemm_into<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    a: MatRef<T>,
    b: MatRef<T>,
    parallel: bool,
) {
    assert_eq!(dst.len(), m * n, "internal error: gemm destination must be m*n");
    if k == 0 {
        dst.fill(T::zero());
    } else if m > 0 && n > 0 {
        gemm_f((m, n, k), dst, a, b, parallel, false);
    }
}

/// `dst += a @ b`, otherwise as [`gemm_into`] (`k == 0` leaves `dst` as it is).
pub(crate) fn gemm_acc_into<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    a: MatRef<T>,
    b: MatRef<T>,
    parallel: bool,
) {
    assert_eq!(dst.len(), m * n, "internal error: gemm destination must be m*n");
    if k > 0 && m > 0 && n > 0 {
        gemm_f((m, n, k), dst, a, b, parallel, true);
    }
}

/// Fewest multiply-adds for which [`gemm_f`] takes the transposed route
/// (below it the transpose's fixed costs are not repaid).
const TRANSPOSED_DST_MIN: usize = 1 << 20;

/// Shortest contraction for which [`gemm_f`] takes the transposed route:
/// the transpose costs `m * n` moves, the slow form about `m * n * k / 3`
/// multiply-adds' worth.
const TRANSPOSED_DST_MIN_K: usize = 128;

/// `dst = a @ b` (or `dst += a @ b`), choosing how `gemm` sees the product.
///
/// `gemm` computes a row-major destination as the transposed product
/// `dst^T = b^T a^T`, and that form is slow when `b` is column-major
/// (`b.rs == 1`: `x @ w^T`, what reverse mode emits for a layer's input
/// gradient, or `x^T @ w^T`). There the product goes to a column-major
/// scratch and is transposed into `dst`. Measured with `gemm` 0.19 on
/// AVX-512, one thread, row-major against column-major destination: f32
/// `[128, 512] x [512, 512]^T` 498-506 against 359 us (plus about 40 us to
/// transpose the result; `graft bench` of `einsum("mk,nk->mn")` at these
/// sizes: 477 -> 375 us, the MLP value_and_grad of `bench/` 2.50 -> 2.35-2.41
/// ms), the same with a column-major `a` 502-556 against 315-323 us, f64
/// `[64, 256] x [256, 256]^T` 105 against 85 us; with a
/// short contraction (f64, `k = 64`) the two are level and the transpose
/// would not pay, hence [`TRANSPOSED_DST_MIN_K`]. The route depends only on
/// the operands' layouts and sizes, never on the thread count, so a
/// product's bits are the same on every run and in every plan.
fn gemm_f<T: Real>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    a: MatRef<T>,
    b: MatRef<T>,
    parallel: bool,
    accumulate: bool,
) {
    assert!(dst.len() == m * n, "internal error: gemm destination must be m*n");
    let transposed =
        !accumulate && b.rs == 1 && m > 1 && n > 1 && k >= TRANSPOSED_DST_MIN_K && m * n * k >= TRANSPOSED_DST_MIN;
    if transposed {
        // Column-major `[m, n]`: element (i, j) at `j * m + i`, in this
        // thread's scratch (overwritten whole; a fresh zeroed buffer per
        // call showed in a transformer step's profile as page faults and a
        // memset, about 4 %, though the step's time did not measurably
        // change without them).
        let mut col = take_scratch::<T>(m * n);
        gemm_raw(m, n, k, &mut col[..m * n], (1, m), a, b, parallel, false);
        transpose_into(&col[..m * n], n, m, n, dst);
        put_scratch(col);
    } else {
        gemm_raw(m, n, k, dst, (n, 1), a, b, parallel, accumulate);
    }
}

/// The one `unsafe` call among the kernels: `gemm::gemm` on checked slices,
/// overwriting `dst` or (`accumulate`) adding to it, `dst`'s element `(i,
/// j)` at `i * drs + j * dcs` for `(drs, dcs) = dst_strides`; `parallel`
/// lets `gemm` split a large enough product across the rayon pool.
#[allow(unsafe_code)]
#[allow(clippy::too_many_arguments)]
fn gemm_raw<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_strides: (usize, usize),
    a: MatRef<T>,
    b: MatRef<T>,
    parallel: bool,
    accumulate: bool,
) {
    assert!(T::DTYPE == DType::F32 || T::DTYPE == DType::F64, "internal error: gemm is only called for f32 and f64");
    assert!(m > 0 && n > 0 && k > 0, "internal error: gemm_raw needs non-empty dims");
    let (drs, dcs) = dst_strides;
    // The farthest element each view reaches must lie inside its slice.
    assert!((m - 1) * drs + (n - 1) * dcs < dst.len(), "internal error: gemm destination view out of bounds");
    assert!(
        dst.len() == m * n && ((drs, dcs) == (n, 1) || (drs, dcs) == (1, m)),
        "internal error: gemm destination must be m*n, row- or column-major"
    );
    assert!((m - 1) * a.rs + (k - 1) * a.cs < a.data.len(), "internal error: gemm lhs view out of bounds");
    assert!((k - 1) * b.rs + (n - 1) * b.cs < b.data.len(), "internal error: gemm rhs view out of bounds");
    let threads = rayon::current_num_threads();
    let par = if parallel && threads > 1 && m * n * k >= GEMM_PAR_FLOPS {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // Slice lengths are at most isize::MAX elements; the asserts above bound
    // every stride that is ever multiplied by a non-zero index by the slice
    // length, and strides of size-1 dims are never stepped, so clamping them
    // keeps the conversions lossless without changing which elements are read.
    let st = |s: usize, dim: usize| if dim <= 1 { 0 } else { s as isize };
    // The destination's unit stride is passed as it is (what tells `gemm`
    // its layout), the other one clamped like the operands'.
    let unit_or = |s: usize, dim: usize| if s == 1 { 1 } else { st(s, dim) };
    // SAFETY:
    // - `T` is f32 or f64 (asserted), the types `gemm` supports; it never panics on them.
    // - dst: `m*n` valid, exclusively borrowed elements; element (i, j) is at
    //   `i*drs + j*dcs <= (m-1)*drs + (n-1)*dcs < dst.len()` (asserted), and
    //   the two layouts allowed map distinct (i, j) to distinct elements; with
    //   `read_dst = false` (and alpha 0) it is only written, with
    //   `accumulate` (alpha 1) read and written.
    // - lhs: element (i, p) at `i*a.rs + p*a.cs <= (m-1)*a.rs + (k-1)*a.cs < a.data.len()`.
    // - rhs: element (p, j) at `p*b.rs + j*b.cs <= (k-1)*b.rs + (n-1)*b.cs < b.data.len()`.
    // - dst is a `&mut` borrow, so it cannot alias the shared lhs/rhs borrows.
    // - `gemm` only reads/writes within these index ranges and returns before
    //   the borrows end (its rayon tasks are joined inside the call).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            unit_or(dcs, n),
            unit_or(drs, m),
            accumulate,
            a.data.as_ptr(),
            st(a.cs, k),
            st(a.rs, m),
            b.data.as_ptr(),
            st(b.cs, n),
            st(b.rs, k),
            if accumulate { T::one() } else { T::zero() },
            T::one(),
            false,
            false,
            false,
            par,
        );
    }
}

fn float_dot<T: Real>(d: Dims, lp: &Operand, a: &[T], rp: &Operand, b: &[T], o: &mut [T]) {
    if o.is_empty() {
        return;
    }
    if d.k == 0 {
        o.fill(T::zero());
        return;
    }
    let (a, sa) = lp.materialize(a, false);
    let (b, sb) = rp.materialize(b, false);
    let (a, b) = (&*a, &*b);
    if d.k == 1 {
        outer(d, a, sa, b, sb, o);
        return;
    }
    if d.m * d.n * d.k <= SMALL_DOT_MACS {
        small_dot(d, a, sa, b, sb, o);
        return;
    }
    let mn = d.m * d.n;
    let one = |bi: usize, ob: &mut [T], parallel: bool| {
        let am = MatRef { data: &a[bi * sa.b..], rs: sa.r, cs: sa.c };
        let bm = MatRef { data: &b[bi * sb.b..], rs: sb.r, cs: sb.c };
        gemm_into(d.m, d.n, d.k, ob, am, bm, parallel);
    };
    match parallelism(d.batch, d.m * d.n * d.k) {
        Parallelism::Batch { items } => o.par_chunks_mut(items * mn).enumerate().for_each(|(t, chunk)| {
            for (i, ob) in chunk.chunks_mut(mn).enumerate() {
                one(t * items + i, ob, false);
            }
        }),
        s => {
            for (bi, ob) in o.chunks_mut(mn).enumerate() {
                one(bi, ob, s == Parallelism::Inner);
            }
        }
    }
}

/// Products of at most this many multiply-adds skip `gemm` (its dispatch
/// and packing cost more than the product: a 1x4 by 4x4 step of a small
/// recurrent cell took 0.25 µs through it).
const SMALL_DOT_MACS: usize = 4096;

/// A small product directly: `o[b, i, :] = sum over p of a[b, i, p] * b[b, p, :]`,
/// accumulated in order of `p` from the first term, row by row (the
/// inner loop runs along `j`, so it vectorises for unit column strides).
fn small_dot<T: Real>(d: Dims, a: &[T], sa: Strides, b: &[T], sb: Strides, o: &mut [T]) {
    let n = d.n;
    for (r, row) in o.chunks_mut(n).enumerate() {
        let (bi, i) = (r / d.m, r % d.m);
        let arow = bi * sa.b + i * sa.r;
        let base = bi * sb.b;
        for p in 0..d.k {
            let x = a[arow + p * sa.c];
            let brow = base + p * sb.r;
            if sb.c == 1 {
                let bs = &b[brow..brow + n];
                if p == 0 {
                    row.iter_mut().zip(bs).for_each(|(o, &y)| *o = x * y);
                } else {
                    row.iter_mut().zip(bs).for_each(|(o, &y)| *o = *o + x * y);
                }
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    let t = x * b[brow + j * sb.c];
                    *o = if p == 0 { t } else { *o + t };
                }
            }
        }
    }
}

/// `k == 1`: every product is an outer product, `o[b, i, j] = a[b, i] * b[b, j]`.
/// `gemm` pays its packing and dispatch per product, which dominates when
/// there is one multiply per output element (vmap of a per-example weight
/// gradient `x^T dy` is exactly this shape, and writes a large output), so
/// rows are written directly: the same single product per element as `gemm`
/// computes (bitwise identical), split over rows across threads.
fn outer<T: Real>(d: Dims, a: &[T], sa: Strides, b: &[T], sb: Strides, o: &mut [T]) {
    let n = d.n;
    let fill = |row0: usize, chunk: &mut [T]| {
        for (r, row) in chunk.chunks_mut(n).enumerate() {
            let (bi, i) = ((row0 + r) / d.m, (row0 + r) % d.m);
            let x = a[bi * sa.b + i * sa.r];
            let base = bi * sb.b;
            if sb.c == 1 || n == 1 {
                for (o, &y) in row.iter_mut().zip(&b[base..base + n]) {
                    *o = x * y;
                }
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = x * b[base + j * sb.c];
                }
            }
        }
    };
    if super::kernel::worth_parallel(o.len()) {
        let rows_per_task = (super::kernel::CHUNK / n).max(1);
        o.par_chunks_mut(rows_per_task * n).enumerate().for_each(|(t, c)| fill(t * rows_per_task, c));
    } else {
        fill(0, o);
    }
}

/// Integer element types: wrapping arithmetic, like NumPy's integer matmul.
trait IntElem: Element + num_traits::PrimInt + num_traits::WrappingAdd + num_traits::WrappingMul {}
impl IntElem for i32 {}
impl IntElem for i64 {}
impl IntElem for u32 {}

fn int_dot<T: IntElem>(d: Dims, lp: &Operand, a: &[T], rp: &Operand, b: &[T], o: &mut [T]) {
    if o.is_empty() {
        return;
    }
    o.fill(T::zero());
    if d.k == 0 {
        return;
    }
    let (a, sa) = lp.materialize(a, false);
    // The i-k-j loop walks rhs rows contiguously.
    let (b, sb) = rp.materialize(b, true);
    let (a, b) = (&*a, &*b);
    let n = d.n;
    // Output row `row` (= batch * m + i) accumulates a[i, p] * b[p, :].
    let fill = |row: usize, orow: &mut [T]| {
        let (bi, i) = (row / d.m, row % d.m);
        let arow = &a[bi * sa.b + i * sa.r..];
        let bmat = &b[bi * sb.b..];
        for p in 0..d.k {
            let x = arow[p * sa.c];
            if x == T::zero() {
                continue;
            }
            let brow = &bmat[p * sb.r..p * sb.r + n];
            for (y, &w) in orow.iter_mut().zip(brow) {
                *y = y.wrapping_add(&x.wrapping_mul(&w));
            }
        }
    };
    let rows = d.batch * d.m;
    if super::kernel::worth_parallel(rows * d.k * n) {
        let rows_per_task = (super::kernel::CHUNK / (d.k * n).max(1)).max(1);
        o.par_chunks_mut(rows_per_task * n).enumerate().for_each(|(t, chunk)| {
            for (i, orow) in chunk.chunks_mut(n).enumerate() {
                fill(t * rows_per_task + i, orow);
            }
        });
    } else {
        for (row, orow) in o.chunks_mut(n).enumerate() {
            fill(row, orow);
        }
    }
}

impl Builder {
    /// General dot product: contracts `lhs_contract` with `rhs_contract`,
    /// batched over `lhs_batch`/`rhs_batch` (see [`DotGeneral`]).
    pub fn dot_general(
        &mut self,
        lhs: Value,
        rhs: Value,
        lhs_contract: &[usize],
        rhs_contract: &[usize],
        lhs_batch: &[usize],
        rhs_batch: &[usize],
    ) -> Result<Value, IrError> {
        let op = DotGeneral {
            lhs_contract: lhs_contract.to_vec(),
            rhs_contract: rhs_contract.to_vec(),
            lhs_batch: lhs_batch.to_vec(),
            rhs_batch: rhs_batch.to_vec(),
        };
        self.emit1(op, &[lhs, rhs])
    }

    /// Matrix product of two rank-2 operands, `[m, k] x [k, n] -> [m, n]`.
    pub fn matmul2d(&mut self, a: Value, b: Value) -> Result<Value, IrError> {
        let op = DotGeneral { lhs_contract: vec![1], rhs_contract: vec![0], lhs_batch: vec![], rhs_batch: vec![] };
        let tys = [self.ty(a)?.clone(), self.ty(b)?.clone()];
        if tys.iter().any(|t| t.rank() != 2) {
            return Err(check::err(&op, &tys, "matmul2d expects two rank-2 operands").into());
        }
        self.emit1(op, &[a, b])
    }
}

// dot_general is bilinear: the JVP is the sum of the two one-sided products
// and the transpose in one operand is another dot_general with the
// cotangent (with the operands in the order that yields the operand's
// layout directly where one does, else followed by a transpose back).
impl crate::ad::Diff for DotGeneral {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (x, y) = (cx.primals[0], cx.primals[1]);
        let emit = |b: &mut Builder, l: Value, r: Value| {
            b.dot_general(l, r, &self.lhs_contract, &self.rhs_contract, &self.lhs_batch, &self.rhs_batch)
        };
        let a = cx.tangents[0].map(|t| emit(b, t, y)).transpose()?;
        let c = cx.tangents[1].map(|t| emit(b, x, t)).transpose()?;
        Ok(vec![crate::ad::helpers::add_opt(b, a, c)?])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
        let (lx, ly) = (cx.is_linear(0), cx.is_linear(1));
        if lx && ly {
            return Err(crate::ad::not_linear("dot_general"));
        }
        let nb = self.lhs_batch.len();
        let (rx, ry) = (cx.in_types[0].rank(), cx.in_types[1].rank());
        let free = |rank: usize, batch: &[usize], contract: &[usize]| -> Vec<usize> {
            (0..rank).filter(|d| !batch.contains(d) && !contract.contains(d)).collect()
        };
        let lf = free(rx, &self.lhs_batch, &self.lhs_contract);
        let rf = free(ry, &self.rhs_batch, &self.rhs_contract);
        let batch_ct: Vec<usize> = (0..nb).collect();
        let lf_ct: Vec<usize> = (nb..nb + lf.len()).collect();
        let rf_ct: Vec<usize> = (nb + lf.len()..nb + lf.len() + rf.len()).collect();
        // `src[j]` is the operand axis that result axis j stands for; the
        // transpose puts each operand axis back in place.
        let back = |b: &mut Builder, res: Value, src: Vec<usize>| -> Result<Value, IrError> {
            let mut perm = vec![0; src.len()];
            for (j, &a) in src.iter().enumerate() {
                perm[a] = j;
            }
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                Ok(res)
            } else {
                b.transpose(res, &perm)
            }
        };
        // The contracted axes of the other operand come out in ascending order.
        let paired = |own: &[usize], other: &[usize]| -> Vec<usize> {
            let mut idx: Vec<usize> = (0..own.len()).collect();
            idx.sort_by_key(|&k| other[k]);
            idx.into_iter().map(|k| own[k]).collect()
        };
        let is_identity = |src: &[usize]| src.iter().enumerate().all(|(i, &a)| i == a);
        // Two ways to form each cotangent: `ct . other` (the cotangent's free
        // axes first) or `other . ct` (the other operand's first). They hold
        // the same products; the one whose result is already in the
        // operand's layout is taken, so that the common cases (both
        // gradients of a matmul) need no transpose after the GEMM.
        if lx {
            let y = cx.primal("dot_general", 1)?;
            let mut ct_first = self.lhs_batch.clone();
            ct_first.extend(&lf);
            ct_first.extend(paired(&self.lhs_contract, &self.rhs_contract));
            let mut y_first = self.lhs_batch.clone();
            y_first.extend(paired(&self.lhs_contract, &self.rhs_contract));
            y_first.extend(&lf);
            if !is_identity(&ct_first) && is_identity(&y_first) {
                let res = b.dot_general(y, ct, &rf, &rf_ct, &self.rhs_batch, &batch_ct)?;
                return Ok(vec![Some(res), None]);
            }
            let res = b.dot_general(ct, y, &rf_ct, &rf, &batch_ct, &self.rhs_batch)?;
            Ok(vec![Some(back(b, res, ct_first)?), None])
        } else {
            let x = cx.primal("dot_general", 0)?;
            let mut ct_first = self.rhs_batch.clone();
            ct_first.extend(&rf);
            ct_first.extend(paired(&self.rhs_contract, &self.lhs_contract));
            let mut x_first = self.rhs_batch.clone();
            x_first.extend(paired(&self.rhs_contract, &self.lhs_contract));
            x_first.extend(&rf);
            if !is_identity(&ct_first) && is_identity(&x_first) {
                let res = b.dot_general(x, ct, &lf, &lf_ct, &self.lhs_batch, &batch_ct)?;
                return Ok(vec![None, Some(res)]);
            }
            let res = b.dot_general(ct, x, &lf_ct, &lf, &batch_ct, &self.lhs_batch)?;
            Ok(vec![None, Some(back(b, res, ct_first)?)])
        }
    }
}

// Batching rule, never a loop. Both sides batched: the batch dims become a
// new leading batch-dimension pair, so the result's batch dim is 0. One side
// batched: its batch dim is an extra free dim of that side; the result lists
// batch dims, then lhs free dims, then rhs free dims (each in operand order),
// which fixes where the batch dim lands.
impl crate::batch::Batch for DotGeneral {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        use crate::batch::helpers::{move_bdim, phys_axes};
        let (lhs, rhs) = (cx.args[0], cx.args[1]);
        let (lr, rr) = (b.ty(lhs)?.rank(), b.ty(rhs)?.rank());
        match (cx.bdims[0], cx.bdims[1]) {
            (Some(ld), Some(rd)) => {
                let l = move_bdim(b, lhs, ld, 0)?;
                let r = move_bdim(b, rhs, rd, 0)?;
                let inc = |v: &[usize]| v.iter().map(|d| d + 1).collect::<Vec<_>>();
                let mut lb = vec![0];
                lb.extend(inc(&self.lhs_batch));
                let mut rb = vec![0];
                rb.extend(inc(&self.rhs_batch));
                let out = b.dot_general(l, r, &inc(&self.lhs_contract), &inc(&self.rhs_contract), &lb, &rb)?;
                Ok(vec![(out, Some(0))])
            }
            (Some(ld), None) => {
                let (lc, lb) = (phys_axes(&self.lhs_contract, ld), phys_axes(&self.lhs_batch, ld));
                let free = free_dims(lr, &lb, &lc);
                let pos = lb.len() + free.iter().filter(|&&f| f < ld).count();
                let out = b.dot_general(lhs, rhs, &lc, &self.rhs_contract, &lb, &self.rhs_batch)?;
                Ok(vec![(out, Some(pos))])
            }
            (None, Some(rd)) => {
                let (rc, rb) = (phys_axes(&self.rhs_contract, rd), phys_axes(&self.rhs_batch, rd));
                let lfree = free_dims(lr, &self.lhs_batch, &self.lhs_contract).len();
                let free = free_dims(rr, &rb, &rc);
                let pos = rb.len() + lfree + free.iter().filter(|&&f| f < rd).count();
                let out = b.dot_general(lhs, rhs, &self.lhs_contract, &rc, &self.lhs_batch, &rb)?;
                Ok(vec![(out, Some(pos))])
            }
            (None, None) => Err(crate::batch::no_rule(self.name(), "internal error: called with no batched operand")),
        }
    }
}
