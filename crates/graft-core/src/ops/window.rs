//! Sliding-window reductions (`reduce_window_sum`, `reduce_window_max`,
//! `reduce_window_min`): pooling, and (through base dilation) the transposes
//! of strided windows that gradients need. Same contract as XLA's
//! `ReduceWindow` with one operand.
//!
//! Geometry, per dimension with input size `n`, window `w`, stride `s`,
//! padding `(lo, hi)`, base dilation `b` and window dilation `d`:
//! - the operand is first dilated (`b - 1` holes between neighbours, size
//!   `(n - 1) * b + 1`, or 0 when `n == 0`), then padded with `lo`/`hi`
//!   positions;
//! - output `o` reduces the positions `o * s + k * d` for `k < w`;
//! - output size `floor((padded - ((w - 1) * d + 1)) / s) + 1`, which must be
//!   at least 1 (a type error otherwise);
//! - padding and dilation holes hold the combiner's identity (0 for sums,
//!   -inf / integer minimum for max, +inf / integer maximum for min), so they
//!   never win a max and add nothing to a sum.
//!
//! Every parameter list has one entry per operand dimension; window, strides
//! and dilations must be >= 1. Dtypes: numeric, plus bool for max/min
//! (logical or/and). Each output combines its window positions in
//! row-major window order, so results do not depend on the thread count.
//! A rank-0 operand is returned unchanged.
//!
//! Derivatives (see the rules at the end): the sum is linear; max/min route
//! each output's derivative to the FIRST extreme element of its window in
//! row-major window order (the pooling convention; `reduce_max` instead
//! splits ties equally); an output whose window holds only padding has
//! derivative 0.

use super::kernel::{input, output, worth_parallel, CHUNK};
use super::monoid::{with_monoid, Combine, Monoid, RedElem};
use super::{check, Op};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::{fmt_list, strides_of, TensorType};
use rayon::prelude::*;

/// Which combiner a [`ReduceWindow`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowKind {
    /// Window sum (average pooling divides afterwards).
    Sum,
    /// NaN-propagating window maximum (max pooling).
    Max,
    /// NaN-propagating window minimum.
    Min,
}

impl WindowKind {
    /// Every kind, for tests and name tables.
    pub const ALL: [WindowKind; 3] = [WindowKind::Sum, WindowKind::Max, WindowKind::Min];

    /// The shared combiner.
    pub fn combine(self) -> Combine {
        match self {
            WindowKind::Sum => Combine::Sum,
            WindowKind::Max => Combine::Max,
            WindowKind::Min => Combine::Min,
        }
    }
}

/// A reduction over sliding windows of one operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReduceWindow {
    /// The combiner.
    pub kind: WindowKind,
    /// Window size per dimension (>= 1).
    pub window: Vec<usize>,
    /// Step between windows per dimension (>= 1).
    pub strides: Vec<usize>,
    /// `(low, high)` padding per dimension, applied after base dilation.
    pub padding: Vec<(usize, usize)>,
    /// Operand dilation per dimension (>= 1; 1 = none).
    pub base_dilation: Vec<usize>,
    /// Window dilation per dimension (>= 1; 1 = none).
    pub window_dilation: Vec<usize>,
}

/// The geometry of one dimension.
#[derive(Debug, Clone, Copy)]
struct Dim {
    /// Operand size.
    n: usize,
    /// Output size.
    out: usize,
    w: usize,
    s: usize,
    lo: usize,
    bd: usize,
    wd: usize,
}

/// The outputs `jlo..jhi` of a row that one window offset of the last
/// dimension reaches, output `jlo` reading operand element `start` and
/// each next one `s` further (see [`Dim::range`]).
#[derive(Debug, Clone, Copy)]
struct Range {
    jlo: usize,
    jhi: usize,
    start: usize,
}

impl Dim {
    /// A window of one element at stride 1 with no padding or dilation: the
    /// output is the operand along this dimension.
    fn is_unit(&self) -> bool {
        self.w == 1 && self.s == 1 && self.lo == 0 && self.bd == 1 && self.wd == 1 && self.out == self.n
    }

    /// Without base dilation, output `j` reads operand `j * s + c` at window
    /// offset `k` (`c = k * wd - lo`), valid for a contiguous range of `j`:
    /// that range, or `None` when it is empty. Computed once per offset,
    /// not per output row.
    fn range(&self, k: usize) -> Option<Range> {
        let off = k * self.wd;
        let jlo = if off >= self.lo { 0 } else { (self.lo - off).div_ceil(self.s) };
        let jhi = if self.n + self.lo > off { ((self.n + self.lo - off - 1) / self.s + 1).min(self.out) } else { 0 };
        (jlo < jhi).then(|| Range { jlo, jhi, start: jlo * self.s + off - self.lo })
    }

    /// The operand index read by output `o` at window offset `k`, or `None`
    /// for padding or a dilation hole.
    #[inline]
    fn src(&self, o: usize, k: usize) -> Option<usize> {
        let q = (o * self.s + k * self.wd).checked_sub(self.lo)?;
        if q % self.bd > 0 {
            return None;
        }
        let i = q / self.bd;
        (i < self.n).then_some(i)
    }
}

impl ReduceWindow {
    /// Per-dimension geometry, or what is wrong with the parameters.
    fn dims(&self, shape: &[usize]) -> Result<Vec<Dim>, String> {
        let rank = shape.len();
        for (name, len) in [
            ("window", self.window.len()),
            ("strides", self.strides.len()),
            ("padding", self.padding.len()),
            ("base_dilation", self.base_dilation.len()),
            ("window_dilation", self.window_dilation.len()),
        ] {
            if len != rank {
                return Err(format!("expected {name} of length {rank} (the operand rank), got {len}"));
            }
        }
        let mut dims = Vec::with_capacity(rank);
        for (i, &n) in shape.iter().enumerate() {
            let (w, s, (lo, hi), bd, wd) =
                (self.window[i], self.strides[i], self.padding[i], self.base_dilation[i], self.window_dilation[i]);
            if w == 0 || s == 0 || bd == 0 || wd == 0 {
                return Err(format!("expected window, strides and dilations >= 1, got 0 in dimension {i}"));
            }
            let overflow = || format!("dimension {i}: window geometry overflows");
            let dilated =
                if n == 0 { 0 } else { (n - 1).checked_mul(bd).and_then(|v| v.checked_add(1)).ok_or_else(overflow)? };
            let padded = dilated.checked_add(lo).and_then(|v| v.checked_add(hi)).ok_or_else(overflow)?;
            let span = (w - 1).checked_mul(wd).and_then(|v| v.checked_add(1)).ok_or_else(overflow)?;
            if padded < span {
                return Err(format!(
                    "expected the dilated window ({span}) to fit in the padded dilated operand ({padded}) in dimension {i}"
                ));
            }
            let out = (padded - span) / s + 1;
            // Output positions and window offsets are later multiplied out;
            // make sure the largest such position is representable.
            (out - 1).checked_mul(s).and_then(|v| v.checked_add(span)).ok_or_else(overflow)?;
            dims.push(Dim { n, out, w, s, lo, bd, wd });
        }
        Ok(dims)
    }
}

impl Op for ReduceWindow {
    fn name(&self) -> &'static str {
        match self.kind {
            WindowKind::Sum => "reduce_window_sum",
            WindowKind::Max => "reduce_window_max",
            WindowKind::Min => "reduce_window_min",
        }
    }

    fn params(&self) -> String {
        let pads: Vec<String> = self.padding.iter().map(|(l, h)| format!("({l},{h})")).collect();
        format!(
            "window={}, strides={}, padding={}, base_dilation={}, window_dilation={}",
            fmt_list(&self.window),
            fmt_list(&self.strides),
            fmt_list(&pads),
            fmt_list(&self.base_dilation),
            fmt_list(&self.window_dilation)
        )
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        let comb = self.kind.combine();
        if !comb.accepts(x.dtype) {
            return Err(check::err(self, ins, comb.expected()));
        }
        let dims = self.dims(&x.shape).map_err(|m| check::err(self, ins, m))?;
        Ok(vec![TensorType::new(x.dtype, dims.iter().map(|d| d.out).collect::<Vec<_>>())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, y) = (ins[0], &mut outs[0]);
        let dims = self.dims(x.shape()).map_err(|m| ExecError::kernel(self.name(), m))?;
        with_monoid!(self.kind.combine(), x.dtype(), self.name(), window_kernel(x, &dims, y))
    }
}

fn window_kernel<T: RedElem, M: Monoid<T>>(x: &Tensor, dims: &[Dim], y: &mut Tensor) -> Result<(), ExecError> {
    let xs = input::<T>(x)?;
    let ys = output::<T>(y)?;
    let Some((last, lead)) = dims.split_last() else {
        ys.copy_from_slice(xs);
        return Ok(());
    };
    let ranges: Vec<Option<Range>> = (0..last.w).map(|k| last.range(k)).collect();
    let wvol = dims.iter().fold(1usize, |a, d| a.saturating_mul(d.w));
    if let Some((rows, outer)) = lead.split_last() {
        if outer.iter().all(Dim::is_unit) && rows.bd == 1 {
            planes_kernel::<T, M>(xs, ys, rows, last, &ranges, wvol);
            return Ok(());
        }
    }
    let in_strides = strides_of(x.shape());
    let row_len = last.out;
    let rows_per_task = (CHUNK / row_len.saturating_mul(wvol)).max(1);
    let task = |first_row: usize, chunk: &mut [T]| {
        // Odometers over output rows (leading dims) and window offsets:
        // allocated once per task, not per element.
        let mut oidx = vec![0usize; lead.len()];
        let mut rem = first_row;
        for (d, o) in lead.iter().zip(oidx.iter_mut()).rev() {
            *o = rem % d.out;
            rem /= d.out;
        }
        let mut kidx = vec![0usize; lead.len()];
        for row in chunk.chunks_mut(row_len) {
            row.fill(M::id());
            kidx.fill(0);
            'win: loop {
                let mut off = 0;
                let mut hole = None;
                for (d, dim) in lead.iter().enumerate() {
                    match dim.src(oidx[d], kidx[d]) {
                        Some(i) => off += i * in_strides[d],
                        None => {
                            hole = Some(d);
                            break;
                        }
                    }
                }
                match hole {
                    None => accumulate_row::<T, M>(last, &ranges, &xs[off..off + last.n], row),
                    // Every window offset under this one reads padding too: skip them.
                    Some(d) => {
                        for (k, dim) in kidx[d + 1..].iter_mut().zip(&lead[d + 1..]) {
                            *k = dim.w - 1;
                        }
                    }
                }
                let mut d = lead.len();
                loop {
                    if d == 0 {
                        break 'win;
                    }
                    d -= 1;
                    kidx[d] += 1;
                    if kidx[d] < lead[d].w {
                        continue 'win;
                    }
                    kidx[d] = 0;
                }
            }
            for (o, dim) in oidx.iter_mut().zip(lead).rev() {
                *o += 1;
                if *o < dim.out {
                    break;
                }
                *o = 0;
            }
        }
    };
    if worth_parallel(ys.len().saturating_mul(wvol)) {
        ys.par_chunks_mut(row_len * rows_per_task).enumerate().for_each(|(c, chunk)| task(c * rows_per_task, chunk));
    } else {
        task(0, ys);
    }
    Ok(())
}

/// The window kernel when every dimension but the last two is a unit window
/// (pooling over the spatial dims of `[N, C, H, W]`): the operand is a stack
/// of independent planes, so there is no odometer over the leading dims and
/// each output row only looks up which operand rows its window covers. The
/// order of combination is the general kernel's (window offsets row-major,
/// one pass per offset over the output row), so the results are the same
/// bits. `rows` must have no base dilation.
fn planes_kernel<T: RedElem, M: Monoid<T>>(
    xs: &[T],
    ys: &mut [T],
    rows: &Dim,
    last: &Dim,
    ranges: &[Option<Range>],
    wvol: usize,
) {
    let (plane_in, plane_out) = (rows.n * last.n, rows.out * last.out);
    // Every window lies inside the plane (no padding, dilation or overhang):
    // each output combines its window in one go, in the same order.
    let inside = |d: &Dim| d.lo == 0 && d.bd == 1 && d.wd == 1 && (d.out - 1) * d.s + d.w <= d.n;
    let direct = inside(rows) && inside(last);
    let task = |first: usize, chunk: &mut [T]| {
        for (p, yplane) in chunk.chunks_mut(plane_out).enumerate() {
            let xplane = &xs[(first + p) * plane_in..(first + p + 1) * plane_in];
            for (i, row) in yplane.chunks_mut(last.out).enumerate() {
                if direct && window_row::<T, M>(&xplane[i * rows.s * last.n..], rows.w, last, row) {
                    continue;
                }
                row.fill(M::id());
                for k in 0..rows.w {
                    // Operand row read at window offset `k` (base dilation 1), if any.
                    let Some(q) = (i * rows.s + k * rows.wd).checked_sub(rows.lo).filter(|&q| q < rows.n) else {
                        continue;
                    };
                    accumulate_row::<T, M>(last, ranges, &xplane[q * last.n..(q + 1) * last.n], row);
                }
            }
        }
    };
    if worth_parallel(ys.len().saturating_mul(wvol)) {
        let per_task = (CHUNK / plane_out.saturating_mul(wvol)).max(1);
        ys.par_chunks_mut(plane_out * per_task).enumerate().for_each(|(c, chunk)| task(c * per_task, chunk));
    } else {
        task(0, ys);
    }
}

/// One output row of [`planes_kernel`] when every window lies inside the
/// plane: output `j` combines `wh` operand rows from `x` (starting at the
/// window's first row) at columns `j * s..j * s + w`, row-major, with the
/// cheap combiner. Each output sees the same sequence of `op_plain` calls as
/// in the general passes, so the bits are the same. Returns false (and
/// leaves `row` to be recomputed by the general passes, with their NaN
/// handling) when a NaN went by.
#[inline]
fn window_row<T: RedElem, M: Monoid<T>>(x: &[T], wh: usize, last: &Dim, row: &mut [T]) -> bool {
    let (n, s, w) = (last.n, last.s, last.w);
    let mut nan = false;
    if wh == 2 && w == 2 && s == 2 {
        // 2x2 stride-2 pooling, the common case, with the window unrolled.
        let (r0, r1) = (&x[..n], &x[n..2 * n]);
        for ((y, a), b) in row.iter_mut().zip(r0.chunks_exact(2)).zip(r1.chunks_exact(2)) {
            let v = M::op_plain(M::op_plain(M::op_plain(M::op_plain(M::id(), a[0]), a[1]), b[0]), b[1]);
            if M::NAN_SENSITIVE {
                nan |= a[0].is_nan() | a[1].is_nan() | b[0].is_nan() | b[1].is_nan();
            }
            *y = v;
        }
        return !nan;
    }
    for (j, y) in row.iter_mut().enumerate() {
        let mut acc = M::id();
        for k in 0..wh {
            for &v in &x[k * n + j * s..k * n + j * s + w] {
                acc = M::op_plain(acc, v);
                if M::NAN_SENSITIVE {
                    nan |= v.is_nan();
                }
            }
        }
        *y = acc;
    }
    !nan
}

/// Combines one operand row `xrow` (the last dimension) into an output row
/// `acc` for every window offset along the last dimension. `ranges` holds
/// [`Dim::range`] per window offset (used when there is no base dilation).
fn accumulate_row<T: RedElem, M: Monoid<T>>(dim: &Dim, ranges: &[Option<Range>], xrow: &[T], acc: &mut [T]) {
    for (k, range) in ranges.iter().enumerate() {
        if dim.bd != 1 {
            for (j, a) in acc.iter_mut().enumerate() {
                if let Some(i) = dim.src(j, k) {
                    *a = M::op(*a, xrow[i]);
                }
            }
            continue;
        }
        let Some(Range { jlo, jhi, start }) = *range else { continue };
        let acc = &mut acc[jlo..jhi];
        if dim.s == 1 {
            combine_into::<T, M>(acc, xrow[start..start + (jhi - jlo)].iter());
        } else {
            combine_into::<T, M>(acc, xrow[start..].iter().step_by(dim.s));
        }
    }
}

/// `acc[j] = op(acc[j], xs[j])` using the cheap non-NaN combiner; if a NaN
/// went by, the pass is repeated with the exact one. Only max and min are
/// NaN-sensitive, and they are idempotent, so repeating elements is harmless.
#[inline(always)]
fn combine_into<'a, T: RedElem, M: Monoid<T>>(acc: &mut [T], xs: impl Iterator<Item = &'a T> + Clone) {
    let mut nan = false;
    for (a, &v) in acc.iter_mut().zip(xs.clone()) {
        *a = M::op_plain(*a, v);
        if M::NAN_SENSITIVE {
            nan |= v.is_nan();
        }
    }
    if nan {
        for (a, &v) in acc.iter_mut().zip(xs) {
            *a = M::op(*a, v);
        }
    }
}

impl Builder {
    /// Reduces sliding windows of `x`; every list has one entry per dimension.
    pub fn reduce_window(
        &mut self,
        kind: WindowKind,
        x: Value,
        window: &[usize],
        strides: &[usize],
        padding: &[(usize, usize)],
        base_dilation: &[usize],
        window_dilation: &[usize],
    ) -> Result<Value, IrError> {
        let op = ReduceWindow {
            kind,
            window: window.to_vec(),
            strides: strides.to_vec(),
            padding: padding.to_vec(),
            base_dilation: base_dilation.to_vec(),
            window_dilation: window_dilation.to_vec(),
        };
        self.emit1(op, &[x])
    }

    /// [`Builder::reduce_window`] without dilation (the pooling case).
    pub fn reduce_window_simple(
        &mut self,
        kind: WindowKind,
        x: Value,
        window: &[usize],
        strides: &[usize],
        padding: &[(usize, usize)],
    ) -> Result<Value, IrError> {
        let ones = vec![1; window.len()];
        self.reduce_window(kind, x, window, strides, padding, &ones, &ones)
    }
}

// Derivative rules.
//
// `reduce_window_sum` is linear. Its transpose sends each output cotangent
// back to every operand element of its window: with `span = (w - 1) d + 1`
// and `dil(n, s) = (n - 1) s + 1`, pad `ct` with `s - 1` interior zeros and
// edges `before = span - 1 - lo`, `after = dil(n, b) + span - 1 - dil(out, s)
// - before` (negative edges crop), then sum windows of `w` taps dilated by
// `d` with stride `b` (the base dilation). Operand element `i` then sums the
// cotangents of exactly the outputs `o` with `o s + k d - lo = i b` for some
// tap `k` (the window is all ones, so its flip is itself), and the padded
// length `dil(n, b) + span - 1` gives exactly `n` outputs. Both emitted ops
// (pad, reduce_window_sum) are linear with rules of their own.
//
// `reduce_window_max` / `min` (pooling convention): the derivative of each
// output is the tangent of the FIRST element of its window, in row-major
// window order, that equals the output. This differs from `reduce_max`,
// which splits ties equally. It is computed from primals only: the operand
// and an index tensor (flat operand positions) get the window's padding and
// base dilation, with NaN in the holes so they never match; one strided
// slice per window offset, visited last to first, overwrites the chosen
// position wherever that offset's element equals the output. The tangent is
// then one `gather` of the flattened tangent at the chosen positions (its
// transpose is one `scatter_add`). A window with no matching element (only
// padding, or a NaN result) keeps the out-of-range position `numel`, which
// the `Fill` gather reads as 0. The forward part emits O(window volume)
// equations of output size each.
impl crate::ad::Diff for ReduceWindow {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(t) = cx.tangents[0] else { return Ok(vec![None]) };
        match self.kind {
            WindowKind::Sum => Ok(vec![Some(b.emit1(self.clone(), &[t])?)]),
            WindowKind::Max | WindowKind::Min => self.chosen_tangent(b, cx.primals[0], cx.outputs[0], t),
        }
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        if self.kind != WindowKind::Sum {
            return Err(crate::ad::not_linear(self.name()));
        }
        let Some(ct) = cx.cts[0] else { return Ok(vec![None]) };
        let (in_ty, out_shape) = (&cx.in_types[0], &cx.out_types[0].shape);
        if in_ty.rank() == 0 {
            return Ok(vec![Some(ct)]);
        }
        if in_ty.numel() == 0 {
            return Ok(vec![Some(b.zeros(in_ty)?)]);
        }
        let dil = |n: usize, s: usize| if n == 0 { 0 } else { ((n - 1) * s + 1) as i64 };
        let (mut lo, mut hi, mut interior) = (Vec::new(), Vec::new(), Vec::new());
        for (d, &n) in in_ty.shape.iter().enumerate() {
            let span = ((self.window[d] - 1) * self.window_dilation[d] + 1) as i64;
            let before = span - 1 - self.padding[d].0 as i64;
            lo.push(before);
            hi.push(dil(n, self.base_dilation[d]) + span - 1 - dil(out_shape[d], self.strides[d]) - before);
            interior.push(self.strides[d] - 1);
        }
        let zero = b.scalar(0.0, in_ty.dtype)?;
        let padded = b.pad(ct, zero, &lo, &hi, &interior)?;
        let rank = in_ty.rank();
        let x_bar = b.reduce_window(
            WindowKind::Sum,
            padded,
            &self.window,
            &self.base_dilation,
            &vec![(0, 0); rank],
            &vec![1; rank],
            &self.window_dilation,
        )?;
        Ok(vec![Some(x_bar)])
    }
}

impl ReduceWindow {
    /// The max/min JVP: the tangent at each window's first extreme element
    /// (see the derivative notes above).
    fn chosen_tangent(&self, b: &mut Builder, x: Value, y: Value, t: Value) -> Result<Vec<Option<Value>>, IrError> {
        let x_ty = b.ty(x)?.clone();
        let out_shape = b.ty(y)?.shape.clone();
        let rank = x_ty.rank();
        if rank == 0 {
            return Ok(vec![Some(t)]);
        }
        let numel = x_ty.numel();
        if numel == 0 {
            // Every window is padding only: the output is the identity, constant.
            return Ok(vec![None]);
        }
        let idx_dtype = if numel < i32::MAX as usize { crate::dtype::DType::I32 } else { crate::dtype::DType::I64 };
        let lo: Vec<i64> = self.padding.iter().map(|p| p.0 as i64).collect();
        let hi: Vec<i64> = self.padding.iter().map(|p| p.1 as i64).collect();
        let interior: Vec<usize> = self.base_dilation.iter().map(|d| d - 1).collect();
        let trivial = lo.iter().chain(&hi).all(|&v| v == 0) && interior.iter().all(|&v| v == 0);
        let flat_pos = b.iota(idx_dtype, &[numel], 0)?;
        let pos_in = b.reshape(flat_pos, &x_ty.shape)?;
        let (xp, ip) = if trivial {
            (x, pos_in)
        } else {
            let nan = b.scalar(f64::NAN, x_ty.dtype)?;
            let none = b.scalar(numel as f64, idx_dtype)?;
            (b.pad(x, nan, &lo, &hi, &interior)?, b.pad(pos_in, none, &lo, &hi, &interior)?)
        };
        let mut chosen = b.full(numel as f64, &TensorType::new(idx_dtype, out_shape.clone()))?;
        let wvol: usize = self.window.iter().product();
        let mut offset = vec![0usize; rank];
        for flat in (0..wvol).rev() {
            let mut rem = flat;
            for d in (0..rank).rev() {
                offset[d] = rem % self.window[d];
                rem /= self.window[d];
            }
            let start: Vec<usize> = (0..rank).map(|d| offset[d] * self.window_dilation[d]).collect();
            let stop: Vec<usize> = (0..rank).map(|d| start[d] + (out_shape[d] - 1) * self.strides[d] + 1).collect();
            let xs = b.slice(xp, &start, &stop, &self.strides)?;
            let is = b.slice(ip, &start, &stop, &self.strides)?;
            let hit = b.eq(xs, y)?;
            chosen = b.select(hit, is, chosen)?;
        }
        let t_flat = b.reshape(t, &[numel])?;
        let mut idx_shape = out_shape;
        idx_shape.push(1);
        let idx = b.reshape(chosen, &idx_shape)?;
        Ok(vec![Some(b.gather(t_flat, idx, 0, &[0], crate::ops::index::IndexMode::Fill)?)])
    }
}

// Batching rule: a unit window (size 1, stride 1, no padding or dilation)
// along the batch dim, which therefore stays put.
impl crate::batch::Batch for ReduceWindow {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
        let mut op = self.clone();
        op.window.insert(d, 1);
        op.strides.insert(d, 1);
        op.padding.insert(d, (0, 0));
        op.base_dilation.insert(d, 1);
        op.window_dilation.insert(d, 1);
        Ok(vec![(b.emit1(op, &[cx.args[0]])?, Some(d))])
    }
}

/// Most window taps [`device_kernel`] unrolls; larger windows run on the
/// host (one load per tap per output; a global pool is a `reduce` instead).
pub const DEVICE_TAPS_MAX: usize = 256;

/// The device form of a float `reduce_window_*` equation and the values its
/// arguments bind to (operand, result), for device backends
/// (`Executable::device_plan`): an elementwise kernel with one point per
/// output element that reads each window tap through an [`Inst::Window`]
/// load (the box of outputs whose tap lies inside the operand; padding
/// reads the combiner's identity) and combines the taps in row-major
/// window order from the identity, as [`window_kernel`] does. So it is the
/// interpreter's computation, NaN propagation included (`Binary::Max`/`Min`
/// propagate NaN like the `Monoid`s), and a tap that reads only padding
/// is skipped (combining the identity changes nothing: a sum started at
/// `+0` is never `-0`).
///
/// `None` (the equation then runs on the host): a non-float dtype, base
/// dilation (taps would land on holes, which no box describes), more than
/// [`DEVICE_TAPS_MAX`] taps, or a rank-0 operand.
///
/// [`Inst::Window`]: crate::kernel::Inst::Window
pub fn device_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::{Access, Arg, Index, Inst, Kernel, Lit, Window};
    use crate::ops::binary::Binary;
    let crate::ops::Prim::ReduceWindow(rw) = &eqn.prim else { return None };
    let (x, y) = (*eqn.inputs.first()?, *eqn.outputs.first()?);
    let (xt, yt) = (func.ty(x), func.ty(y));
    let rank = xt.rank();
    if !xt.dtype.is_float() || rank == 0 || xt.numel() == 0 || yt.numel() == 0 {
        return None;
    }
    if rw.base_dilation.iter().any(|&b| b != 1) {
        return None;
    }
    let taps = rw.window.iter().try_fold(1usize, |a, &w| a.checked_mul(w))?;
    if taps > DEVICE_TAPS_MAX {
        return None;
    }
    let dims = rw.dims(&xt.shape).ok()?;
    let in_strides = strides_of(&xt.shape);
    let (op, id) = match rw.kind {
        WindowKind::Sum => (Binary::Add, 0.0),
        WindowKind::Max => (Binary::Max, f64::NEG_INFINITY),
        WindowKind::Min => (Binary::Min, f64::INFINITY),
    };
    let bits = match xt.dtype {
        crate::dtype::DType::F32 => (id as f32).to_bits() as u64,
        _ => id.to_bits(),
    };
    let mut body = vec![Inst::Lit(Lit { dtype: xt.dtype, bits })];
    let mut acc = 0u32;
    let mut tap = vec![0usize; rank];
    'taps: for flat in 0..taps {
        let mut rem = flat;
        for d in (0..rank).rev() {
            tap[d] = rem % rw.window[d];
            rem /= rw.window[d];
        }
        // Per dimension, the outputs whose tap reads operand `o * s + off`
        // inside `0..n`: `lo <= o <= hi`.
        let (mut lo, mut size, mut strides, mut offset) = (vec![], vec![], vec![], 0isize);
        for (d, dim) in dims.iter().enumerate() {
            let off = isize::try_from(tap[d] * dim.wd).ok()? - isize::try_from(dim.lo).ok()?;
            let s = isize::try_from(dim.s).ok()?;
            let first = (-off).div_euclid(s) + isize::from((-off).rem_euclid(s) != 0);
            let first = first.max(0);
            let last = (isize::try_from(dim.n).ok()? - 1 - off).div_euclid(s).min(dim.out as isize - 1);
            if last < first {
                continue 'taps; // only padding: combining the identity changes nothing
            }
            lo.push(first);
            size.push((last - first + 1) as usize);
            strides.push(s * in_strides[d] as isize);
            offset += (first * s + off) * in_strides[d] as isize;
        }
        let window = Window { dims: yt.shape.clone(), lo, size, strides, offset };
        body.push(Inst::Window { arg: 0, window, fill: 0 });
        body.push(Inst::Binary(op, acc, (body.len() - 1) as u32));
        acc = (body.len() - 1) as u32;
    }
    body.push(Inst::Store { arg: 1, value: acc, index: Index::Point });
    let args = vec![
        Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read },
        Arg { dtype: xt.dtype, len: yt.numel(), access: Access::Write },
    ];
    let k = Kernel { name: name.to_string(), args, extent: yt.numel(), body };
    crate::kernel::verify(&k).ok()?;
    Some((k, vec![x, y]))
}
