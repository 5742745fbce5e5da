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

use super::kernel::{input, output, worth_parallel, CHUNK};
use super::reduce::{with_monoid, Combine, Monoid, RedElem};
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

impl Dim {
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
    let in_strides = strides_of(x.shape());
    let row_len = last.out;
    let wvol = dims.iter().fold(1usize, |a, d| a.saturating_mul(d.w));
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
                    None => accumulate_row::<T, M>(last, &xs[off..off + last.n], row),
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

/// Combines one operand row `xrow` (the last dimension) into an output row
/// `acc` for every window offset along the last dimension.
fn accumulate_row<T: RedElem, M: Monoid<T>>(dim: &Dim, xrow: &[T], acc: &mut [T]) {
    for k in 0..dim.w {
        if dim.bd != 1 {
            for (j, a) in acc.iter_mut().enumerate() {
                if let Some(i) = dim.src(j, k) {
                    *a = M::op(*a, xrow[i]);
                }
            }
            continue;
        }
        // No base dilation: output j reads xrow[j * s + c] with c = k * wd - lo,
        // valid for a contiguous range of j.
        let off = k * dim.wd;
        let jlo = if off >= dim.lo { 0 } else { (dim.lo - off).div_ceil(dim.s) };
        let jhi = if dim.n + dim.lo > off { ((dim.n + dim.lo - off - 1) / dim.s + 1).min(dim.out) } else { 0 };
        if jlo >= jhi {
            continue;
        }
        let start = jlo * dim.s + off - dim.lo;
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

impl crate::ad::Diff for ReduceWindow {
    fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(IrError::NoRule { prim: self.name().into(), rule: "jvp", msg: "rule in progress".into() })
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(IrError::NoRule { prim: self.name().into(), rule: "transpose", msg: "rule in progress".into() })
    }
}
