//! Reductions over axes (`reduce_sum`, `reduce_max`, `reduce_min`,
//! `reduce_prod`) and index reductions along one axis (`argmax`, `argmin`).
//!
//! The combining machinery it shares with the cumulative and window
//! families lives in `ops/monoid.rs`.
//!
//! Semantics:
//! - `axes` must be sorted ascending without repeats; the reduced axes are
//!   removed from the shape. Empty `axes` is an identity copy.
//! - Reducing over zero elements gives the identity: 0 (sum), 1 (prod),
//!   -inf / the integer minimum (max), +inf / the integer maximum (min).
//! - Dtypes: every numeric dtype. Bool is accepted by `reduce_max` (logical
//!   "any", identity `false`) and `reduce_min` (logical "all", identity
//!   `true`); `reduce_sum`/`reduce_prod` reject bool (cast first).
//! - Max/min propagate NaN: any NaN in the reduced set gives NaN. Which of
//!   `-0.0`/`+0.0` a max/min of equal zeros returns is unspecified (but
//!   deterministic).
//! - Integer sums and products wrap on overflow (two's complement), like
//!   NumPy's fixed-width integers.
//! - Float sums and products combine in a fixed pairwise tree that depends
//!   only on the shape, never on the number of threads, so results are
//!   bit-identical between runs and machines with different core counts.
//!   Reductions over several non-adjacent axis groups run as successive
//!   passes (innermost group first), each pass pairwise.
//! - `argmax`/`argmin` return the first index of the extreme value; NaN is
//!   treated as more extreme than every number (the first NaN wins, like
//!   NumPy). The index dtype is i32 or i64; an empty axis is a type error,
//!   as is an axis longer than the index dtype can count.
//!
//! `device.rs` holds both families' device forms (row kernels of the
//! kernel IR that device backends run).

mod device;
pub use device::device_kernel;

use super::kernel::{input, output, unsupported, worth_parallel, CHUNK};
use super::monoid::{split_at_axis, with_monoid, Combine, Monoid, RedElem, COLS};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Tensor};
use crate::types::{fmt_list, TensorType};
use rayon::prelude::*;

// ---------------------------------------------------------------------------
// Reduce
// ---------------------------------------------------------------------------

/// Which combiner a [`Reduce`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum (0 over nothing).
    Sum,
    /// Maximum, NaN-propagating (-inf / integer minimum / false over nothing).
    Max,
    /// Minimum, NaN-propagating (+inf / integer maximum / true over nothing).
    Min,
    /// Product (1 over nothing).
    Prod,
}

impl ReduceKind {
    /// Every kind, for tests and name tables.
    pub const ALL: [ReduceKind; 4] = [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod];

    /// The shared combiner.
    pub fn combine(self) -> Combine {
        match self {
            ReduceKind::Sum => Combine::Sum,
            ReduceKind::Max => Combine::Max,
            ReduceKind::Min => Combine::Min,
            ReduceKind::Prod => Combine::Prod,
        }
    }
}

/// Reduction of a tensor over a sorted set of axes, which are removed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reduce {
    /// The combiner.
    pub kind: ReduceKind,
    /// Axes to reduce, ascending, no repeats.
    pub axes: Vec<usize>,
}

impl Op for Reduce {
    fn name(&self) -> &'static str {
        match self.kind {
            ReduceKind::Sum => "reduce_sum",
            ReduceKind::Max => "reduce_max",
            ReduceKind::Min => "reduce_min",
            ReduceKind::Prod => "reduce_prod",
        }
    }

    fn params(&self) -> String {
        format!("axes={}", fmt_list(&self.axes))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        let comb = self.kind.combine();
        if !comb.accepts(x.dtype) {
            return Err(check::err(self, ins, comb.expected()));
        }
        check::axes(self, ins, &self.axes, x.rank())?;
        if self.axes.windows(2).any(|w| w[0] > w[1]) {
            return Err(check::err(self, ins, "expected axes sorted in ascending order"));
        }
        let shape =
            x.shape.iter().enumerate().filter(|(i, _)| !self.axes.contains(i)).map(|(_, &d)| d).collect::<Vec<_>>();
        Ok(vec![TensorType::new(x.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, y) = (ins[0], &mut outs[0]);
        let comb = self.kind.combine();
        with_monoid!(comb, x.dtype(), self.name(), reduce_kernel(x, &self.axes, y))
    }
}

/// Merges the shape into maximal groups of adjacent dims that are all
/// reduced or all kept, dropping size-1 dims (they do not move memory).
/// Requires a non-empty tensor.
fn coalesce(shape: &[usize], axes: &[usize]) -> Vec<(usize, bool)> {
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let red = axes.contains(&i);
        match groups.last_mut() {
            Some(g) if g.1 == red => g.0 *= d,
            _ => groups.push((d, red)),
        }
    }
    groups
}

fn reduce_kernel<T: RedElem, M: Monoid<T>>(x: &Tensor, axes: &[usize], y: &mut Tensor) -> Result<(), ExecError> {
    reduce_slices::<T, M>(input::<T>(x)?, x.shape(), axes, output::<T>(y)?);
    Ok(())
}

impl Reduce {
    /// The float kernel on row-major slices (`x` of `shape`, `y` its
    /// reduction, checked by the caller): what [`Op::kernel`] runs, and what
    /// a compiled loop calls back for (`kernel::host`), so both give the
    /// same bits.
    pub(crate) fn float_kernel<T: RedElem + super::kernel::Real>(&self, shape: &[usize], x: &[T], y: &mut [T]) {
        use super::monoid::{MaxM, MinM, ProdM, SumM};
        match self.kind {
            ReduceKind::Sum => reduce_slices::<T, SumM>(x, shape, &self.axes, y),
            ReduceKind::Max => reduce_slices::<T, MaxM>(x, shape, &self.axes, y),
            ReduceKind::Min => reduce_slices::<T, MinM>(x, shape, &self.axes, y),
            ReduceKind::Prod => reduce_slices::<T, ProdM>(x, shape, &self.axes, y),
        }
    }
}

/// `ys` = `xs` (row-major, of `shape`) reduced over `axes` by `M`.
fn reduce_slices<T: RedElem, M: Monoid<T>>(xs: &[T], shape: &[usize], axes: &[usize], ys: &mut [T]) {
    if ys.is_empty() {
        return;
    }
    if xs.is_empty() {
        // A reduced axis has size 0: every output is a reduction of nothing.
        ys.fill(M::id());
        return;
    }
    let mut groups = coalesce(shape, axes);
    let mut buf: Option<Vec<T>> = None;
    loop {
        let Some(g) = groups.iter().rposition(|g| g.1) else {
            // Nothing (left) to reduce: same element count in and out.
            ys.copy_from_slice(buf.as_deref().unwrap_or(xs));
            return;
        };
        let outer: usize = groups[..g].iter().map(|g| g.0).product();
        let inner: usize = groups[g + 1..].iter().map(|g| g.0).product();
        let r = groups[g].0;
        let src = buf.as_deref().unwrap_or(xs);
        if !groups[..g].iter().any(|g| g.1) {
            reduce_block::<T, M>(src, outer, r, inner, ys);
            return;
        }
        let mut next = vec![M::id(); outer * inner];
        reduce_block::<T, M>(src, outer, r, inner, &mut next);
        buf = Some(next);
        groups.remove(g);
        if g < groups.len() && g > 0 && !groups[g - 1].1 {
            // The kept groups on both sides of the removed one are now adjacent.
            groups[g - 1].0 *= groups[g].0;
            groups.remove(g);
        }
    }
}

/// `out[o, i] = combine over k of src[o, k, i]` for `src` of shape
/// `[outer, r, inner]`, `r >= 1`. The combination tree depends only on
/// `r` (pairwise), so the result is independent of the thread count.
pub(crate) fn reduce_block<T: RedElem, M: Monoid<T>>(src: &[T], outer: usize, r: usize, inner: usize, out: &mut [T]) {
    debug_assert_eq!(src.len(), outer * r * inner);
    debug_assert_eq!(out.len(), outer * inner);
    let par = worth_parallel(src.len());
    if inner == 1 {
        let run = |i: usize, o: &mut T| *o = tree_run::<T, M>(&src[i * r..(i + 1) * r]);
        if par {
            let per = (CHUNK / r).max(1);
            out.par_chunks_mut(per).enumerate().for_each(|(c, oc)| {
                for (j, o) in oc.iter_mut().enumerate() {
                    run(c * per + j, o);
                }
            });
        } else {
            for (i, o) in out.iter_mut().enumerate() {
                run(i, o);
            }
        }
    } else {
        let block = |o: usize, orow: &mut [T], par: bool| {
            let blk = &src[o * r * inner..(o + 1) * r * inner];
            if par {
                orow.par_chunks_mut(COLS)
                    .enumerate()
                    .for_each(|(c, oc)| tree_rows::<T, M>(&blk[c * COLS..], inner, r, oc));
            } else {
                for (c, oc) in orow.chunks_mut(COLS).enumerate() {
                    tree_rows::<T, M>(&blk[c * COLS..], inner, r, oc);
                }
            }
        };
        if par {
            let min_len = (CHUNK / (r * inner)).max(1);
            out.par_chunks_mut(inner).with_min_len(min_len).enumerate().for_each(|(o, orow)| block(o, orow, true));
        } else {
            for (o, orow) in out.chunks_mut(inner).enumerate() {
                block(o, orow, false);
            }
        }
    }
}

/// Elements per leaf of the pairwise tree over a contiguous run.
const RUN_LEAF: usize = 256;
/// Independent accumulators in a leaf (lets the loop vectorize without
/// reassociating anything).
const LANES: usize = 16;

/// Combines a contiguous run pairwise: halves recursively down to leaves of
/// at most `RUN_LEAF` elements, each folded in `LANES` interleaved lanes.
fn tree_run<T: RedElem, M: Monoid<T>>(x: &[T]) -> T {
    if x.len() <= RUN_LEAF {
        return fold_run::<T, M>(x);
    }
    let (a, b) = x.split_at(x.len() / 2);
    let (ra, rb) = if worth_parallel(x.len()) {
        rayon::join(|| tree_run::<T, M>(a), || tree_run::<T, M>(b))
    } else {
        (tree_run::<T, M>(a), tree_run::<T, M>(b))
    };
    M::op(ra, rb)
}

fn fold_run<T: RedElem, M: Monoid<T>>(x: &[T]) -> T {
    if x.len() < LANES {
        // Starting from the first element (not the identity) keeps e.g. the
        // sign of a sum of negative zeros.
        let Some((&first, rest)) = x.split_first() else { return M::id() };
        return rest.iter().fold(first, |a, &v| M::op(a, v));
    }
    let mut acc = [M::id(); LANES];
    acc.copy_from_slice(&x[..LANES]);
    let mut nan = [false; LANES];
    if M::NAN_SENSITIVE {
        for l in 0..LANES {
            nan[l] = acc[l].is_nan();
        }
    }
    let chunks = x[LANES..].chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = M::op_plain(acc[l], c[l]);
            if M::NAN_SENSITIVE {
                nan[l] |= c[l].is_nan();
            }
        }
    }
    if M::NAN_SENSITIVE && nan.iter().any(|&n| n) {
        // Rare: redo exactly with the NaN-propagating combiner.
        return x[1..].iter().fold(x[0], |a, &v| M::op(a, v));
    }
    // Lanes combine pairwise too (LANES is a power of two); no lane holds a
    // NaN here (a NaN-sensitive combiner returned above if one was seen), so
    // the plain combiner picks what the NaN-propagating one would.
    let mut half = LANES / 2;
    while half > 0 {
        for l in 0..half {
            acc[l] = M::op_plain(acc[l], acc[l + half]);
        }
        half /= 2;
    }
    rem.iter().fold(acc[0], |a, &v| M::op(a, v))
}

/// Rows per leaf of the pairwise tree over `[rows, width]` blocks.
const ROW_LEAF: usize = 32;

/// `out[c] = combine over k < rows of x[k * stride + c]`, pairwise over
/// rows (leaves of `ROW_LEAF` rows folded in order), `rows >= 1`.
fn tree_rows<T: RedElem, M: Monoid<T>>(x: &[T], stride: usize, rows: usize, out: &mut [T]) {
    let w = out.len();
    if rows <= ROW_LEAF {
        out.copy_from_slice(&x[..w]);
        let mut nan = M::NAN_SENSITIVE && out.iter().any(|v| v.is_nan());
        for k in 1..rows {
            let row = &x[k * stride..k * stride + w];
            for (o, &v) in out.iter_mut().zip(row) {
                *o = M::op_plain(*o, v);
                if M::NAN_SENSITIVE {
                    nan |= v.is_nan();
                }
            }
        }
        if nan {
            // Rare: redo exactly with the NaN-propagating combiner.
            out.copy_from_slice(&x[..w]);
            for k in 1..rows {
                let row = &x[k * stride..k * stride + w];
                for (o, &v) in out.iter_mut().zip(row) {
                    *o = M::op(*o, v);
                }
            }
        }
        return;
    }
    let h = rows / 2;
    let (a, b) = x.split_at(h * stride);
    let mut tmp = vec![M::id(); w];
    if worth_parallel(rows * w) {
        rayon::join(|| tree_rows::<T, M>(a, stride, h, out), || tree_rows::<T, M>(b, stride, rows - h, &mut tmp));
    } else {
        tree_rows::<T, M>(a, stride, h, out);
        tree_rows::<T, M>(b, stride, rows - h, &mut tmp);
    }
    for (o, &t) in out.iter_mut().zip(&tmp) {
        *o = M::op(*o, t);
    }
}

// ---------------------------------------------------------------------------
// ArgReduce
// ---------------------------------------------------------------------------

/// Which extreme an [`ArgReduce`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// Index of the (first) maximum.
    ArgMax,
    /// Index of the (first) minimum.
    ArgMin,
}

/// Index of the extreme element along one axis, which is removed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArgReduce {
    /// Max or min.
    pub kind: ArgKind,
    /// The axis searched.
    pub axis: usize,
    /// Output dtype: i32 or i64.
    pub index_dtype: DType,
}

impl Op for ArgReduce {
    fn name(&self) -> &'static str {
        match self.kind {
            ArgKind::ArgMax => "argmax",
            ArgKind::ArgMin => "argmin",
        }
    }

    fn params(&self) -> String {
        format!("axis={}, index_dtype={}", self.axis, self.index_dtype)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        if !x.dtype.is_numeric() {
            return Err(check::err(self, ins, "expected a numeric operand (not bool)"));
        }
        if !self.index_dtype.is_int() {
            return Err(check::err(self, ins, "expected index_dtype i32 or i64"));
        }
        if self.axis >= x.rank() {
            return Err(check::err(self, ins, format!("axis {} is out of range for rank {}", self.axis, x.rank())));
        }
        let n = x.shape[self.axis];
        if n == 0 {
            return Err(check::err(
                self,
                ins,
                format!("expected a non-empty axis {} (no extreme of nothing)", self.axis),
            ));
        }
        if self.index_dtype == DType::I32 && n - 1 > i32::MAX as usize {
            return Err(check::err(self, ins, format!("axis {} is too long for i32 indices; use i64", self.axis)));
        }
        let mut shape = x.shape.clone();
        shape.remove(self.axis);
        Ok(vec![TensorType::new(self.index_dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, y) = (ins[0], &mut outs[0]);
        let (outer, r, inner) = if self.axis < x.rank() {
            split_at_axis(x.shape(), self.axis)
        } else {
            return Err(ExecError::kernel(self.name(), "axis out of range"));
        };
        let dims = (outer, r, inner);
        macro_rules! go {
            ($t:ty) => {
                match (self.kind, self.index_dtype) {
                    (ArgKind::ArgMax, DType::I32) => arg_kernel::<$t, i32, true>(x, dims, y),
                    (ArgKind::ArgMax, DType::I64) => arg_kernel::<$t, i64, true>(x, dims, y),
                    (ArgKind::ArgMin, DType::I32) => arg_kernel::<$t, i32, false>(x, dims, y),
                    (ArgKind::ArgMin, DType::I64) => arg_kernel::<$t, i64, false>(x, dims, y),
                    (_, d) => Err(unsupported(self.name(), d)),
                }
            };
        }
        match x.dtype() {
            DType::F32 => go!(f32),
            DType::F64 => go!(f64),
            DType::I32 => go!(i32),
            DType::I64 => go!(i64),
            DType::U32 => go!(u32),
            d => Err(unsupported(self.name(), d)),
        }
    }
}

/// Integer dtypes that can hold an index (the shape rule checked the range).
trait IndexElem: Element {
    fn from_index(i: usize) -> Self;
}
impl IndexElem for i32 {
    #[inline(always)]
    fn from_index(i: usize) -> Self {
        i as i32
    }
}
impl IndexElem for i64 {
    #[inline(always)]
    fn from_index(i: usize) -> Self {
        i as i64
    }
}

/// Whether `v` replaces the current best `b`: strictly more extreme, or the
/// first NaN (nothing replaces a NaN, so the first one wins).
#[inline(always)]
fn better<T: RedElem, const MAX: bool>(v: T, b: T) -> bool {
    (if MAX { v > b } else { v < b }) | (v.is_nan() & !b.is_nan())
}

fn arg_kernel<T: RedElem, I: IndexElem, const MAX: bool>(
    x: &Tensor,
    (_, r, inner): (usize, usize, usize),
    y: &mut Tensor,
) -> Result<(), ExecError> {
    let xs = input::<T>(x)?;
    let ys = output::<I>(y)?;
    if ys.is_empty() {
        return Ok(());
    }
    if r == 0 {
        return Err(ExecError::kernel(if MAX { "argmax" } else { "argmin" }, "empty axis"));
    }
    let par = worth_parallel(xs.len());
    if inner == 1 && r < LANES {
        // Short rows (k-means' nearest of 10 centroids): several rows at a
        // time, one per lane, rather than a block search per row.
        if par {
            let per = (CHUNK / r).max(ARG_ROWS);
            ys.par_chunks_mut(per)
                .enumerate()
                .for_each(|(c, oc)| arg_short_rows::<T, I, MAX>(&xs[c * per * r..], r, oc));
        } else {
            arg_short_rows::<T, I, MAX>(xs, r, ys);
        }
    } else if inner == 1 {
        let run = |i: usize, o: &mut I| *o = I::from_index(arg_run::<T, MAX>(&xs[i * r..(i + 1) * r], 0).1);
        if par {
            let per = (CHUNK / r).max(1);
            ys.par_chunks_mut(per).enumerate().for_each(|(c, oc)| {
                for (j, o) in oc.iter_mut().enumerate() {
                    run(c * per + j, o);
                }
            });
        } else {
            for (i, o) in ys.iter_mut().enumerate() {
                run(i, o);
            }
        }
    } else {
        let cols = |blk: &[T], oc: &mut [I]| {
            let w = oc.len();
            let mut best = blk[..w].to_vec();
            oc.fill(I::from_index(0));
            for k in 1..r {
                let row = &blk[k * inner..k * inner + w];
                let kk = I::from_index(k);
                for ((b, o), &v) in best.iter_mut().zip(oc.iter_mut()).zip(row) {
                    if better::<T, MAX>(v, *b) {
                        *b = v;
                        *o = kk;
                    }
                }
            }
        };
        let block = |o: usize, orow: &mut [I], par: bool| {
            let blk = &xs[o * r * inner..(o + 1) * r * inner];
            if par {
                orow.par_chunks_mut(COLS).enumerate().for_each(|(c, oc)| cols(&blk[c * COLS..], oc));
            } else {
                for (c, oc) in orow.chunks_mut(COLS).enumerate() {
                    cols(&blk[c * COLS..], oc);
                }
            }
        };
        if par {
            let min_len = (CHUNK / (r * inner)).max(1);
            ys.par_chunks_mut(inner).with_min_len(min_len).enumerate().for_each(|(o, orow)| block(o, orow, true));
        } else {
            for (o, orow) in ys.chunks_mut(inner).enumerate() {
                block(o, orow, false);
            }
        }
    }
    Ok(())
}

/// Rows per step of [`arg_short_rows`].
const ARG_ROWS: usize = 8;

/// The arg-extreme of each of `out.len()` rows of `r` (`1 <= r`) elements
/// at the start of `x`: `ARG_ROWS` rows at a time, each row scanned in
/// order with [`better`], whose strict comparison keeps the first of equal
/// extremes and lets the first NaN win and stay, as [`arg_leaf`] does; the
/// rows are independent chains the loop interleaves (and the compiler may
/// vectorise across them).
fn arg_short_rows<T: RedElem, I: IndexElem, const MAX: bool>(x: &[T], r: usize, out: &mut [I]) {
    let scan = |row: &[T]| {
        let (mut best, mut bi) = (row[0], 0);
        for (k, &v) in row.iter().enumerate().skip(1) {
            if better::<T, MAX>(v, best) {
                (best, bi) = (v, k);
            }
        }
        bi
    };
    let done = out.len() / ARG_ROWS * ARG_ROWS;
    let mut blocks = out.chunks_exact_mut(ARG_ROWS);
    let mut t = [[T::ZERO; ARG_ROWS]; LANES];
    for (b, o) in (&mut blocks).enumerate() {
        let x = &x[b * ARG_ROWS * r..(b + 1) * ARG_ROWS * r];
        // Transposed, so the lanes' loop reads contiguous values; NaN-free
        // comparisons (a block holding a NaN is rescanned row by row).
        let mut nan = false;
        for (l, row) in x.chunks_exact(r).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                t[k][l] = v;
                nan |= v.is_nan();
            }
        }
        if nan {
            for (l, o) in o.iter_mut().enumerate() {
                *o = I::from_index(scan(&x[l * r..(l + 1) * r]));
            }
            continue;
        }
        let mut best = t[0];
        let mut bi = [0u64; ARG_ROWS];
        for (k, tk) in t.iter().enumerate().take(r).skip(1) {
            for l in 0..ARG_ROWS {
                let v = tk[l];
                let take = if MAX { v > best[l] } else { v < best[l] };
                best[l] = if take { v } else { best[l] };
                bi[l] = if take { k as u64 } else { bi[l] };
            }
        }
        for (o, &i) in o.iter_mut().zip(&bi) {
            *o = I::from_index(i as usize);
        }
    }
    for (j, o) in blocks.into_remainder().iter_mut().enumerate() {
        let i = done + j;
        *o = I::from_index(scan(&x[i * r..(i + 1) * r]));
    }
}

/// (best value, its index + `base`) of a non-empty contiguous run; splits
/// in halves across threads when long, keeping the left winner on ties.
fn arg_run<T: RedElem, const MAX: bool>(x: &[T], base: usize) -> (T, usize) {
    if x.len() >= 2 * CHUNK && worth_parallel(x.len()) {
        let h = x.len() / 2;
        let (a, b) = x.split_at(h);
        let (l, r) = rayon::join(|| arg_run::<T, MAX>(a, base), || arg_run::<T, MAX>(b, base + h));
        return if better::<T, MAX>(r.0, l.0) { r } else { l };
    }
    let (best, bi) = arg_leaf::<T, MAX>(x);
    (best, base + bi)
}

/// Elements per block of [`arg_leaf`]: small enough that the second look at
/// a block hits L1.
const ARG_BLOCK: usize = 2048;

/// Sequential arg-search of a non-empty run, block by block: a vectorized
/// pass finds the block's extreme (and whether it holds a NaN), and only a
/// block that beats the best so far is searched again for the first index of
/// its extreme. Blocks are visited in order and must be strictly better, so
/// the first occurrence wins; the first NaN ends the search.
fn arg_leaf<T: RedElem, const MAX: bool>(x: &[T]) -> (T, usize) {
    let mut best = x[0];
    let mut bi = 0;
    for (b, blk) in x.chunks(ARG_BLOCK).enumerate() {
        let (m, has_nan) = block_extreme::<T, MAX>(blk);
        if has_nan {
            if let Some(p) = blk.iter().position(|v| v.is_nan()) {
                return (blk[p], b * ARG_BLOCK + p);
            }
        }
        if b == 0 || better::<T, MAX>(m, best) {
            // `m` is one of the block's (non-NaN) elements, so it is found.
            if let Some(p) = blk.iter().position(|&v| v == m) {
                best = m;
                bi = b * ARG_BLOCK + p;
            }
        }
    }
    (best, bi)
}

/// The extreme of a non-empty block ignoring NaN, and whether it holds a NaN.
fn block_extreme<T: RedElem, const MAX: bool>(x: &[T]) -> (T, bool) {
    let pick = |a: T, v: T| if MAX { a.max_plain(v) } else { a.min_plain(v) };
    if x.len() < LANES {
        let m = x[1..].iter().fold(x[0], |a, &v| pick(a, v));
        return (m, x.iter().any(|v| v.is_nan()));
    }
    let mut acc = [x[0]; LANES];
    acc.copy_from_slice(&x[..LANES]);
    let mut nan: [bool; LANES] = std::array::from_fn(|l| acc[l].is_nan());
    let chunks = x[LANES..].chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = pick(acc[l], c[l]);
            nan[l] |= c[l].is_nan();
        }
    }
    let m = acc[1..].iter().chain(rem).fold(acc[0], |a, &v| pick(a, v));
    (m, nan.iter().any(|&n| n) || rem.iter().any(|v| v.is_nan()))
}

// ---------------------------------------------------------------------------
// Builder entry points
// ---------------------------------------------------------------------------

impl Builder {
    /// Reduces `x` over `axes` (ascending, no repeats) with `kind`.
    pub fn reduce(&mut self, kind: ReduceKind, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.emit1(Reduce { kind, axes: axes.to_vec() }, &[x])
    }

    /// Sum over `axes`.
    pub fn reduce_sum(&mut self, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.reduce(ReduceKind::Sum, x, axes)
    }

    /// NaN-propagating maximum over `axes` (logical "any" for bool).
    pub fn reduce_max(&mut self, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.reduce(ReduceKind::Max, x, axes)
    }

    /// NaN-propagating minimum over `axes` (logical "all" for bool).
    pub fn reduce_min(&mut self, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.reduce(ReduceKind::Min, x, axes)
    }

    /// Product over `axes`.
    pub fn reduce_prod(&mut self, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.reduce(ReduceKind::Prod, x, axes)
    }

    /// Index (i32 or i64) of the first maximum along `axis`; NaN counts as the maximum.
    pub fn argmax(&mut self, x: Value, axis: usize, index_dtype: DType) -> Result<Value, IrError> {
        self.emit1(ArgReduce { kind: ArgKind::ArgMax, axis, index_dtype }, &[x])
    }

    /// Index (i32 or i64) of the first minimum along `axis`; NaN counts as the minimum.
    pub fn argmin(&mut self, x: Value, axis: usize, index_dtype: DType) -> Result<Value, IrError> {
        self.emit1(ArgReduce { kind: ArgKind::ArgMin, axis, index_dtype }, &[x])
    }
}

// Derivative rules. reduce_sum is linear (transpose: broadcast back).
// reduce_max/min send the tangent to the positions that attain the extreme,
// split equally between ties (seed 003's convention, matching binary max/min).
mod diff {
    use super::*;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    /// Broadcasts a reduced value back over the reduced axes of `in_shape`.
    pub(super) fn unreduce(b: &mut Builder, v: Value, in_shape: &[usize], axes: &[usize]) -> Result<Value, IrError> {
        let kept: Vec<usize> = (0..in_shape.len()).filter(|d| !axes.contains(d)).collect();
        b.broadcast_in_dim(v, in_shape, &kept)
    }

    impl Diff for Reduce {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(t) = cx.tangents[0] else { return Ok(vec![None]) };
            let (x, y) = (cx.primals[0], cx.outputs[0]);
            match self.kind {
                ReduceKind::Sum => Ok(vec![Some(b.reduce_sum(t, &self.axes)?)]),
                ReduceKind::Max | ReduceKind::Min => {
                    let shape = b.ty(x)?.shape.clone();
                    let y_full = unreduce(b, y, &shape, &self.axes)?;
                    let hit = b.eq(x, y_full)?;
                    let ind = crate::ad::helpers::mask_like(b, hit, x)?;
                    let count = b.reduce_sum(ind, &self.axes)?;
                    let count_full = unreduce(b, count, &shape, &self.axes)?;
                    let weight = b.div(ind, count_full)?;
                    let wt = b.mul(t, weight)?;
                    Ok(vec![Some(b.reduce_sum(wt, &self.axes)?)])
                }
                // d prod = sum_i t_i prod_{j != i} x_j, without dividing by x
                // (exact at zeros): exclusive products from both sides.
                ReduceKind::Prod => {
                    let others = prod_of_others(b, x, &self.axes)?;
                    let wt = b.mul(t, others)?;
                    Ok(vec![Some(b.reduce_sum(wt, &self.axes)?)])
                }
            }
        }

        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            match self.kind {
                ReduceKind::Sum => {
                    let shape = cx.in_types[0].shape.clone();
                    Ok(vec![cx.cts[0].map(|ct| unreduce(b, ct, &shape, &self.axes)).transpose()?])
                }
                _ => Err(crate::ad::not_linear(self.name())),
            }
        }
    }

    /// For each element, the product of the other elements of its reduction
    /// group: an exclusive cumulative product from the left times one from
    /// the right along the group's elements in row-major order.
    ///
    /// Reduced axes that are adjacent (one axis, or a block such as the
    /// trailing ones) are merged in place by a reshape and scanned where they
    /// are. Other layouts move the reduced axes last and flatten them first
    /// (two transposes). Both forms multiply the same factors in the same
    /// order, so they give the same bits; the in-place form skips the
    /// transposes, and a reduced leading axis (`prod(x, axis=0)`, GradBench
    /// `det`'s product over each permutation's factors) scans and shifts
    /// whole contiguous rows instead of many short lines.
    fn prod_of_others(b: &mut Builder, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        let shape = b.ty(x)?.shape.clone();
        let dtype = b.ty(x)?.dtype;
        if let (Some(&first), Some(&last)) = (axes.first(), axes.last()) {
            if last + 1 - first == axes.len() {
                let n: usize = shape[first..=last].iter().product();
                let mut flat_shape = shape[..first].to_vec();
                flat_shape.push(n);
                flat_shape.extend_from_slice(&shape[last + 1..]);
                let flat = b.reshape(x, &flat_shape)?;
                let others = exclusive_products(b, flat, first, dtype)?;
                return b.reshape(others, &shape);
            }
        }
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
        let mut perm = kept.clone();
        perm.extend_from_slice(axes);
        let moved = b.transpose(x, &perm)?;
        let outer: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
        let n: usize = axes.iter().map(|&d| shape[d]).product();
        let mut flat_shape = outer.clone();
        flat_shape.push(n);
        let flat = b.reshape(moved, &flat_shape)?;
        let others = exclusive_products(b, flat, flat_shape.len() - 1, dtype)?;
        let mut moved_shape = outer;
        moved_shape.extend(axes.iter().map(|&d| shape[d]));
        let unflat = b.reshape(others, &moved_shape)?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        b.transpose(unflat, &inv)
    }

    /// The product of every other element along `axis`: the exclusive
    /// cumulative product from the left times the one from the right (each
    /// an inclusive `cumprod` shifted by one place, 1 entering).
    fn exclusive_products(b: &mut Builder, flat: Value, axis: usize, dtype: DType) -> Result<Value, IrError> {
        let rank = b.ty(flat)?.rank();
        let one = b.scalar(1.0, dtype)?;
        let exclusive = |b: &mut Builder, reverse: bool| -> Result<Value, IrError> {
            let inc = b.cumprod(flat, axis, reverse)?;
            let (mut lo, mut hi) = (vec![0i64; rank], vec![0i64; rank]);
            if reverse {
                (lo[axis], hi[axis]) = (-1, 1);
            } else {
                (lo[axis], hi[axis]) = (1, -1);
            }
            b.pad(inc, one, &lo, &hi, &vec![0; rank])
        };
        let left = exclusive(b, false)?;
        let right = exclusive(b, true)?;
        b.mul(left, right)
    }

    impl Diff for ArgReduce {
        // An index result carries no tangent.
        fn jvp(&self, _b: &mut Builder, _cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Ok(vec![None])
        }
        fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Err(crate::ad::not_linear(self.name()))
        }
    }
}

// Batching rules: the reduced axes are shifted past the batch dim, which
// passes through untouched (seed 000: reductions keep their per-example meaning).
mod batching {
    use super::*;
    use crate::batch::helpers::{bdim_after_removing, phys_axes, phys_axis};
    use crate::batch::{Batch, BatchCx, Batched};

    impl Batch for Reduce {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
            let out = b.reduce(self.kind, cx.args[0], &phys_axes(&self.axes, d))?;
            Ok(vec![(out, Some(bdim_after_removing(&self.axes, d)))])
        }
    }

    impl Batch for ArgReduce {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
            let op = ArgReduce { axis: phys_axis(self.axis, d), ..self.clone() };
            Ok(vec![(b.emit1(op, &[cx.args[0]])?, Some(bdim_after_removing(&[self.axis], d)))])
        }
    }
}
