//! Inclusive scans along one axis: `cumsum`, `cumprod`, `cummax`, `cummin`.
//!
//! Semantics: same shape and dtype as the operand. Forward:
//! `y[.., i, ..] = x[.., 0, ..] ⊕ ... ⊕ x[.., i, ..]`; with `reverse`,
//! `y[.., i, ..] = x[.., i, ..] ⊕ ... ⊕ x[.., n-1, ..]`. Each line is scanned
//! sequentially in axis order, so results never depend on the thread count.
//! Combiners are those of `reduce` (see `reduce.rs`): integer sums/products
//! wrap, max/min propagate NaN (once a NaN is seen the rest of the line is
//! NaN), and bool is accepted by `cummax` (running "any") and `cummin`
//! (running "all") only. A size-0 axis gives an empty result.
//!
//! Derivatives (see the rules at the end): cumsum is linear; cummax/cummin
//! follow the element that set the running extreme (the first extreme in
//! scan order); cumprod's rule never divides by `x`, so it is exact at zeros.

use super::kernel::{input, output, worth_parallel, CHUNK};
use super::monoid::{split_at_axis, with_monoid, Combine, Monoid, RedElem, COLS};
use super::{check, Op};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;
use rayon::prelude::*;

/// Which combiner a [`Cumulative`] scans with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CumKind {
    /// Running sum.
    Sum,
    /// Running NaN-propagating maximum.
    Max,
    /// Running NaN-propagating minimum.
    Min,
    /// Running product.
    Prod,
}

impl CumKind {
    /// Every kind, for tests and name tables.
    pub const ALL: [CumKind; 4] = [CumKind::Sum, CumKind::Max, CumKind::Min, CumKind::Prod];

    /// The shared combiner.
    pub fn combine(self) -> Combine {
        match self {
            CumKind::Sum => Combine::Sum,
            CumKind::Max => Combine::Max,
            CumKind::Min => Combine::Min,
            CumKind::Prod => Combine::Prod,
        }
    }
}

/// Inclusive scan along `axis`, forwards or (with `reverse`) backwards.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cumulative {
    /// The combiner.
    pub kind: CumKind,
    /// The scanned axis.
    pub axis: usize,
    /// Scan from the last element towards the first.
    pub reverse: bool,
}

impl Op for Cumulative {
    fn name(&self) -> &'static str {
        match self.kind {
            CumKind::Sum => "cumsum",
            CumKind::Max => "cummax",
            CumKind::Min => "cummin",
            CumKind::Prod => "cumprod",
        }
    }

    fn params(&self) -> String {
        format!("axis={}, reverse={}", self.axis, self.reverse)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        let comb = self.kind.combine();
        if !comb.accepts(x.dtype) {
            return Err(check::err(self, ins, comb.expected()));
        }
        if self.axis >= x.rank() {
            return Err(check::err(self, ins, format!("axis {} is out of range for rank {}", self.axis, x.rank())));
        }
        Ok(vec![x.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, y) = (ins[0], &mut outs[0]);
        if self.axis >= x.rank() {
            return Err(ExecError::kernel(self.name(), "axis out of range"));
        }
        let dims = split_at_axis(x.shape(), self.axis);
        let rev = self.reverse;
        with_monoid!(self.kind.combine(), x.dtype(), self.name(), cum_kernel(x, dims, rev, y))
    }
}

fn cum_kernel<T: RedElem, M: Monoid<T>>(
    x: &Tensor,
    (outer, r, inner): (usize, usize, usize),
    reverse: bool,
    y: &mut Tensor,
) -> Result<(), ExecError> {
    let xs = input::<T>(x)?;
    let ys = output::<T>(y)?;
    if ys.is_empty() {
        return Ok(());
    }
    let line = r * inner;
    if !worth_parallel(ys.len()) {
        for (xb, yb) in xs.chunks(line).zip(ys.chunks_mut(line)) {
            scan_block::<T, M>(xb, yb, inner, reverse);
        }
    } else if inner == 1 || outer >= 4 * rayon::current_num_threads() {
        // Enough independent blocks: one task per group of blocks.
        let min_len = (CHUNK / line).max(1);
        ys.par_chunks_mut(line)
            .with_min_len(min_len)
            .zip(xs.par_chunks(line))
            .for_each(|(yb, xb)| scan_block::<T, M>(xb, yb, inner, reverse));
    } else {
        // Few wide blocks: split each block into column strips. Each strip's
        // rows are disjoint sub-slices, gathered so tasks own them safely.
        for (xb, yb) in xs.chunks(line).zip(ys.chunks_mut(line)) {
            let strips = inner.div_ceil(COLS);
            let mut cols: Vec<Vec<&mut [T]>> = (0..strips).map(|_| Vec::with_capacity(r)).collect();
            for row in yb.chunks_mut(inner) {
                for (c, piece) in row.chunks_mut(COLS).enumerate() {
                    cols[c].push(piece);
                }
            }
            cols.into_par_iter()
                .enumerate()
                .for_each(|(c, mut rows)| scan_strip::<T, M>(&xb[c * COLS..], inner, &mut rows, reverse));
        }
    }
    Ok(())
}

/// Scans one `[r, inner]` block (`x` and `y` of length `r * inner`) along its rows.
fn scan_block<T: RedElem, M: Monoid<T>>(x: &[T], y: &mut [T], inner: usize, reverse: bool) {
    if inner == 1 {
        // Starting from the first element (not the identity) keeps e.g. the
        // sign of a leading negative zero.
        let n = x.len();
        if n == 0 {
            return;
        }
        if reverse {
            let mut acc = x[n - 1];
            y[n - 1] = acc;
            for (o, &v) in y[..n - 1].iter_mut().zip(&x[..n - 1]).rev() {
                acc = M::op(acc, v);
                *o = acc;
            }
        } else {
            let mut acc = x[0];
            y[0] = acc;
            for (o, &v) in y[1..].iter_mut().zip(&x[1..]) {
                acc = M::op(acc, v);
                *o = acc;
            }
        }
        return;
    }
    let r = x.len() / inner;
    if r == 0 {
        return;
    }
    if reverse {
        let last = (r - 1) * inner;
        y[last..].copy_from_slice(&x[last..]);
        for k in (0..r - 1).rev() {
            let (cur, next) = y.split_at_mut((k + 1) * inner);
            let cur = &mut cur[k * inner..];
            let xr = &x[k * inner..(k + 1) * inner];
            for ((c, &p), &v) in cur.iter_mut().zip(&next[..inner]).zip(xr) {
                *c = M::op(p, v);
            }
        }
    } else {
        y[..inner].copy_from_slice(&x[..inner]);
        for k in 1..r {
            let (prev, cur) = y.split_at_mut(k * inner);
            let prev = &prev[(k - 1) * inner..];
            let xr = &x[k * inner..(k + 1) * inner];
            for ((c, &p), &v) in cur[..inner].iter_mut().zip(prev).zip(xr) {
                *c = M::op(p, v);
            }
        }
    }
}

/// Scans one column strip: `rows[k]` is row `k` of the output strip and row
/// `k` of the input strip starts at `x[k * stride]`.
fn scan_strip<T: RedElem, M: Monoid<T>>(x: &[T], stride: usize, rows: &mut [&mut [T]], reverse: bool) {
    let r = rows.len();
    let w = rows.first().map_or(0, |row| row.len());
    let xrow = |k: usize| &x[k * stride..k * stride + w];
    let step = |cur: &mut [T], prev: &[T], xr: &[T]| {
        for ((c, &p), &v) in cur.iter_mut().zip(prev).zip(xr) {
            *c = M::op(p, v);
        }
    };
    if r == 0 {
        return;
    }
    if reverse {
        rows[r - 1].copy_from_slice(xrow(r - 1));
        for k in (0..r - 1).rev() {
            let (a, b) = rows.split_at_mut(k + 1);
            step(&mut a[k][..], &b[0][..], xrow(k));
        }
    } else {
        rows[0].copy_from_slice(xrow(0));
        for k in 1..r {
            let (a, b) = rows.split_at_mut(k);
            step(&mut b[0][..], &a[k - 1][..], xrow(k));
        }
    }
}

impl Builder {
    /// Inclusive scan of `x` along `axis` with `kind` (backwards if `reverse`).
    pub fn cumulative(&mut self, kind: CumKind, x: Value, axis: usize, reverse: bool) -> Result<Value, IrError> {
        self.emit1(Cumulative { kind, axis, reverse }, &[x])
    }

    /// Running sum along `axis`.
    pub fn cumsum(&mut self, x: Value, axis: usize, reverse: bool) -> Result<Value, IrError> {
        self.cumulative(CumKind::Sum, x, axis, reverse)
    }

    /// Running NaN-propagating maximum along `axis`.
    pub fn cummax(&mut self, x: Value, axis: usize, reverse: bool) -> Result<Value, IrError> {
        self.cumulative(CumKind::Max, x, axis, reverse)
    }

    /// Running NaN-propagating minimum along `axis`.
    pub fn cummin(&mut self, x: Value, axis: usize, reverse: bool) -> Result<Value, IrError> {
        self.cumulative(CumKind::Min, x, axis, reverse)
    }

    /// Running product along `axis`.
    pub fn cumprod(&mut self, x: Value, axis: usize, reverse: bool) -> Result<Value, IrError> {
        self.cumulative(CumKind::Prod, x, axis, reverse)
    }
}

// Derivative rules.
//
// - cumsum is linear; its transpose is the cumsum running the other way.
// - cummax / cummin: the derivative at `i` is the tangent of the element that
//   set the running extreme, i.e. the FIRST extreme element in scan order
//   (smallest index forwards, largest with `reverse`; so the reverse scan is
//   exactly the mirror image of the forward one). From primals: an element
//   is a record where the running value differs from its scan predecessor
//   (the first element always is); a running max/min over `select(record,
//   index, ...)` gives each position its record's index, and the tangent is
//   one `gather` of the flattened tangent there (linear; its transpose is
//   `scatter_add`). After a NaN every position is its own record (NaN != NaN),
//   so the derivative there is the element's own tangent; the value is NaN.
// - cumprod: `dy[i] = sum_{j<=i} t[j] prod_{k<=i, k!=j} x[k]`, computed
//   without dividing by `x` (exact at zeros) as the linear recurrence
//   `dy[i] = x[i] dy[i-1] + e[i] t[i]` with `e` the exclusive cumprod
//   (`e[i] = y[i-1]`, `e[0] = 1`), solved by a Hillis–Steele scan of affine
//   maps: ceil(log2 n) steps `B += A * shift(B, d)`, `A *= shift(A, d)` with
//   `d = 1, 2, 4, ...`. `A` (products of `x` over ranges) is primal; the
//   tangent `B` only meets pad and multiplication by `A`, so the rule is
//   linear, and its work is O(n log n) per line.
impl crate::ad::Diff for Cumulative {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(t) = cx.tangents[0] else { return Ok(vec![None]) };
        match self.kind {
            CumKind::Sum => Ok(vec![Some(b.cumsum(t, self.axis, self.reverse)?)]),
            CumKind::Max | CumKind::Min => self.record_tangent(b, cx.outputs[0], t),
            CumKind::Prod => self.prod_tangent(b, cx.primals[0], cx.outputs[0], t),
        }
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        match self.kind {
            CumKind::Sum => Ok(vec![cx.cts[0].map(|ct| b.cumsum(ct, self.axis, !self.reverse)).transpose()?]),
            _ => Err(crate::ad::not_linear(self.name())),
        }
    }
}

impl Cumulative {
    /// `v` moved `d` places along the scan direction, `fill` entering at the start.
    fn shift(&self, b: &mut Builder, v: Value, d: usize, fill: Value) -> Result<Value, IrError> {
        let rank = b.ty(v)?.rank();
        let (mut lo, mut hi) = (vec![0i64; rank], vec![0i64; rank]);
        let d = d as i64;
        if self.reverse {
            (lo[self.axis], hi[self.axis]) = (-d, d);
        } else {
            (lo[self.axis], hi[self.axis]) = (d, -d);
        }
        b.pad(v, fill, &lo, &hi, &vec![0; rank])
    }

    /// cummax / cummin JVP: the tangent at each position's record.
    fn record_tangent(&self, b: &mut Builder, y: Value, t: Value) -> Result<Vec<Option<Value>>, IrError> {
        let ty = b.ty(y)?.clone();
        let (numel, n) = (ty.numel(), ty.shape[self.axis]);
        if numel == 0 {
            return Ok(vec![None]);
        }
        if n == 1 {
            return Ok(vec![Some(t)]);
        }
        let idx_dtype = if numel < i32::MAX as usize { crate::dtype::DType::I32 } else { crate::dtype::DType::I64 };
        let nan = b.scalar(f64::NAN, ty.dtype)?;
        let prev = self.shift(b, y, 1, nan)?;
        let record = b.ne(y, prev)?;
        let along = b.iota(idx_dtype, &ty.shape, self.axis)?;
        let idx_ty = TensorType::new(idx_dtype, ty.shape.clone());
        // Forwards the latest record at or before i; backwards the earliest at
        // or after i. The scan's first element is always a record, so the
        // fill value is never the answer.
        let fill = b.full(if self.reverse { (n - 1) as f64 } else { 0.0 }, &idx_ty)?;
        let cand = b.select(record, along, fill)?;
        let src = if self.reverse { b.cummin(cand, self.axis, true)? } else { b.cummax(cand, self.axis, false)? };
        // Flat position: own flat index moved by (src - i) steps along the axis.
        let inner: usize = ty.shape[self.axis + 1..].iter().product();
        let flat = b.iota(idx_dtype, &[numel], 0)?;
        let flat = b.reshape(flat, &ty.shape)?;
        let steps = b.sub(src, along)?;
        let moved = if inner == 1 {
            steps
        } else {
            let stride = b.full(inner as f64, &idx_ty)?;
            b.mul(steps, stride)?
        };
        let pos = b.add(flat, moved)?;
        let mut idx_shape = ty.shape.clone();
        idx_shape.push(1);
        let idx = b.reshape(pos, &idx_shape)?;
        let t_flat = b.reshape(t, &[numel])?;
        Ok(vec![Some(b.gather(t_flat, idx, 0, &[0], crate::ops::index::IndexMode::Clip)?)])
    }

    /// cumprod JVP by a log-step scan of affine maps (no division).
    fn prod_tangent(&self, b: &mut Builder, x: Value, y: Value, t: Value) -> Result<Vec<Option<Value>>, IrError> {
        let ty = b.ty(x)?.clone();
        let n = ty.shape[self.axis];
        if ty.numel() == 0 {
            return Ok(vec![None]);
        }
        let one = b.scalar(1.0, ty.dtype)?;
        let zero = b.scalar(0.0, ty.dtype)?;
        let exclusive = self.shift(b, y, 1, one)?;
        let mut acc = b.mul(t, exclusive)?;
        let mut coef = x;
        let mut d = 1;
        while d < n {
            let prev = self.shift(b, acc, d, zero)?;
            let scaled = b.mul(prev, coef)?;
            acc = b.add(acc, scaled)?;
            if 2 * d < n {
                let prev_coef = self.shift(b, coef, d, one)?;
                coef = b.mul(coef, prev_coef)?;
            }
            d *= 2;
        }
        Ok(vec![Some(acc)])
    }
}

// Batching rule: scan along the shifted axis; the batch dim stays put.
impl crate::batch::Batch for Cumulative {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let axis = crate::batch::helpers::phys_axis(self.axis, d);
        Ok(vec![(b.cumulative(self.kind, cx.args[0], axis, self.reverse)?, Some(d))])
    }
}

// ---------------------------------------------------------------------------
// The device form
// ---------------------------------------------------------------------------

/// The device form of a `cum*` equation and the values its arguments bind
/// to (operand, result), or `None` (the equation then runs on the host):
/// see [`cumulative_kernel`].
pub fn device_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    let super::Prim::Cumulative(c) = &eqn.prim else { return None };
    let (&x, &out) = (eqn.inputs.first()?, eqn.outputs.first()?);
    if eqn.inputs.len() != 1 || eqn.outputs.len() != 1 {
        return None;
    }
    Some((cumulative_kernel(func, c, x, out, name)?, vec![x, out]))
}

/// `cumsum`/`cumprod`/`cummax`/`cummin` as a row kernel with one row per
/// output element, reducing its line of the operand with every element past
/// it (before it, in reverse) replaced by the combiner's identity. Work is
/// `elements x axis length` (bounded by [`LINE_WORK_MAX`](crate::kernel::lines::LINE_WORK_MAX)), which buys
/// determinism and no new kernel-IR construct: each element is one
/// reduction in the row kernel's fixed order. Max and min (NaN from the
/// first NaN on, as on the host), i32 sums and products (wrapping) and
/// bool's running any/all (`cummax`/`cummin`, as 0/1 in f32) are the
/// host's bits; f32 sums and products are summed as a tree instead of in
/// line order (within the stated tolerance). `None` for other dtypes, empty
/// results and lines, and work beyond the bound.
fn cumulative_kernel(
    f: &crate::ir::Func,
    c: &Cumulative,
    x: Value,
    out: Value,
    name: &str,
) -> Option<crate::kernel::Kernel> {
    use crate::dtype::DType;
    use crate::kernel::lines::{LineIndex, LINE_WORK_MAX};
    use crate::kernel::{Access, Arg, Index, Inner, Inst, Kernel, Lit, Reduction};
    use crate::ops::binary::Compare;
    use crate::ops::reduce::ReduceKind;
    let xt = f.ty(x);
    let kind = match c.kind {
        CumKind::Sum => ReduceKind::Sum,
        CumKind::Prod => ReduceKind::Prod,
        CumKind::Max => ReduceKind::Max,
        CumKind::Min => ReduceKind::Min,
    };
    let as_bool = xt.dtype == DType::Bool && matches!(kind, ReduceKind::Max | ReduceKind::Min);
    if !matches!(xt.dtype, DType::F32 | DType::I32 | DType::U32) && !as_bool {
        return None;
    }
    let (n, len) = (xt.numel(), *xt.shape.get(c.axis)?);
    if n == 0 || len == 0 || n.checked_mul(len)? > LINE_WORK_MAX {
        return None;
    }
    let at = LineIndex::new(&xt.shape, c.axis, len);
    let acc = if as_bool { DType::F32 } else { xt.dtype };
    let identity = match (acc, kind) {
        (DType::F32, ReduceKind::Sum) => 0f32.to_bits() as u64,
        (DType::F32, ReduceKind::Prod) => 1f32.to_bits() as u64,
        (DType::F32, ReduceKind::Max) => f32::NEG_INFINITY.to_bits() as u64,
        (DType::F32, ReduceKind::Min) => f32::INFINITY.to_bits() as u64,
        (DType::U32, ReduceKind::Max) => 0,
        (DType::U32, ReduceKind::Min) => u32::MAX as u64,
        (_, ReduceKind::Sum) => 0,
        (_, ReduceKind::Prod) => 1,
        (_, ReduceKind::Max) => i32::MIN as i64 as u64,
        (_, ReduceKind::Min) => i32::MAX as u64,
    };
    let mut inner = vec![Inst::Load { arg: 0, index: at.line.clone() }];
    if as_bool {
        inner.push(Inst::Convert(DType::F32, 0));
    }
    let v = inner.len() as u32 - 1;
    inner.extend([Inst::Position(at.j.clone()), Inst::Position(at.own.clone())]);
    let (j, k) = (v + 1, v + 2);
    let cmp = if c.reverse { Compare::Ge } else { Compare::Le };
    inner.extend([
        Inst::Compare(cmp, j, k),
        Inst::Lit(Lit { dtype: acc, bits: identity }),
        Inst::Select(v + 3, v, v + 4),
    ]);
    let value = v + 5;
    let mut body = vec![Inst::Reduce(Box::new(Reduction { kind, inner: Inner { len, body: inner }, value }))];
    if as_bool {
        body.push(Inst::Convert(DType::Bool, 0));
    }
    let stored = body.len() as u32 - 1;
    body.push(Inst::Store { arg: 1, value: stored, index: Index::Point });
    let k = Kernel {
        name: name.to_string(),
        args: vec![
            Arg { dtype: xt.dtype, len: n, access: Access::Read },
            Arg { dtype: xt.dtype, len: f.ty(out).numel(), access: Access::Write },
        ],
        extent: n,
        body,
    };
    crate::kernel::verify(&k).ok()?;
    Some(k)
}

/// A `cum*` equation over long lines as Hillis and Steele's scan: pass `t`
/// (`d = 2^t < len`) combines every element with the one `d` before it
/// along the axis (after it, in reverse; the combiner's identity where
/// there is none), so after the passes each element holds its whole
/// prefix. `log2(len)` launches of one point per element (`n log2(len)`
/// work), against the row form's `n len` ([`device_kernel`], bounded by
/// [`LINE_WORK_MAX`](crate::kernel::lines::LINE_WORK_MAX)). Each pass reads
/// its operand and writes a buffer of the result's type: the device chains
/// them through temporaries, the first reading the operand and the last
/// writing the result. Max and min (NaN-propagating and commutative on
/// signed zeros, as the host's `max`/`min`), i32 sums and products
/// (wrapping) are the host's bits; f32 sums and products are summed in
/// another order (within the stated tolerance). `None` for other dtypes
/// (bool runs on the row form or the host), lines of one element, empty
/// results, and operands past `i32` addresses.
pub fn device_pass_kernels(
    f: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<Vec<crate::kernel::Kernel>> {
    use crate::dtype::DType;
    use crate::kernel::lines::row_major;
    use crate::kernel::{Access, Arg, Index, Inst, Kernel, Lit, Window};
    use crate::ops::binary::Binary;
    let super::Prim::Cumulative(c) = &eqn.prim else { return None };
    let (&x, &out) = (eqn.inputs.first()?, eqn.outputs.first()?);
    let xt = f.ty(x);
    let (n, len) = (xt.numel(), *xt.shape.get(c.axis)?);
    if !matches!(xt.dtype, DType::F32 | DType::I32 | DType::U32) || n == 0 || len < 2 || n > i32::MAX as usize {
        return None;
    }
    if eqn.inputs.len() != 1 || f.ty(out) != xt {
        return None;
    }
    let (op, identity) = match (c.kind, xt.dtype) {
        (CumKind::Sum, DType::F32) => (Binary::Add, u64::from(0f32.to_bits())),
        (CumKind::Prod, DType::F32) => (Binary::Mul, u64::from(1f32.to_bits())),
        (CumKind::Max, DType::F32) => (Binary::Max, u64::from(f32::NEG_INFINITY.to_bits())),
        (CumKind::Min, DType::F32) => (Binary::Min, u64::from(f32::INFINITY.to_bits())),
        (CumKind::Max, DType::U32) => (Binary::Max, 0),
        (CumKind::Min, DType::U32) => (Binary::Min, u64::from(u32::MAX)),
        (CumKind::Sum, _) => (Binary::Add, 0),
        (CumKind::Prod, _) => (Binary::Mul, 1),
        (CumKind::Max, _) => (Binary::Max, i32::MIN as i64 as u64),
        (CumKind::Min, _) => (Binary::Min, i32::MAX as u64),
    };
    let strides = row_major(&xt.shape);
    let arg = |access| Arg { dtype: xt.dtype, len: n, access };
    let mut kernels = Vec::new();
    let mut d = 1;
    while d < len {
        // The element d before (after) each point along the axis, where
        // there is one.
        let mut lo = vec![0isize; xt.rank()];
        let mut size = xt.shape.clone();
        size[c.axis] = len - d;
        let offset = if c.reverse { d as isize * strides[c.axis] } else { 0 };
        if !c.reverse {
            lo[c.axis] = d as isize;
        }
        let window = Window { dims: xt.shape.clone(), lo, size, strides: strides.clone(), offset };
        let k = Kernel {
            name: format!("{name}_{}", kernels.len()),
            args: vec![arg(Access::Read), arg(Access::Write)],
            extent: n,
            body: vec![
                Inst::Lit(Lit { dtype: xt.dtype, bits: identity }),
                Inst::Window { arg: 0, window, fill: 0 },
                Inst::Load { arg: 0, index: Index::Point },
                Inst::Binary(op, 1, 2),
                Inst::Store { arg: 1, value: 3, index: Index::Point },
            ],
        };
        crate::kernel::verify(&k).ok()?;
        kernels.push(k);
        d *= 2;
    }
    Some(kernels)
}
