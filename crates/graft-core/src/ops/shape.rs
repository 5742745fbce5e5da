//! Data-movement primitives: `broadcast_in_dim`, `reshape`, `transpose`,
//! `slice`, `pad`, `concatenate`, `reverse`. All accept every dtype (bool
//! included) and move elements without changing them.
//!
//! Semantics (all row-major):
//! - `broadcast_in_dim[shape, dims]`: operand dim `i` becomes output dim
//!   `dims[i]`; `dims` is strictly increasing; an operand dim of size 1 is
//!   repeated, any other must equal the output dim. Output dims not in `dims`
//!   are new and repeat the operand.
//! - `reshape[shape]`: same elements in the same row-major order.
//! - `transpose[perm]`: output dim `i` is operand dim `perm[i]`.
//! - `slice[start, stop, stride]`: per dim, indices `start, start+stride, ..`
//!   below `stop`; `stride >= 1`, `start <= stop <= dim`; the output dim is
//!   `ceil((stop - start) / stride)`.
//! - `pad[lo, hi, interior]` (operands `x`, rank-0 `pad_value` of x's dtype):
//!   like `lax.pad`. Operand element `j` of a dim lands at `lo + j*(interior+1)`;
//!   negative `lo`/`hi` crop. The output dim is `lo + hi + d + (d-1)*interior`
//!   for `d > 0` and `lo + hi` for `d == 0`; it must be `>= 0`.
//! - `concatenate[axis]`: one or more operands of one dtype and rank, equal
//!   except along `axis`, joined in operand order.
//! - `reverse[axes]`: flips the listed dims.
//!
//! Kernels: every op except `pad`/`concatenate`/`reshape` is a strided
//! gather (output row-major, source read through per-dim strides which may
//! be 0 for broadcast or negative for reverse). The gather first collapses
//! dims (drops size-1 dims, merges dims that are contiguous in the source) so
//! the innermost loop runs over the longest possible run; the inner run is a
//! `copy_from_slice` (stride 1), a `fill` (stride 0), a reversed copy
//! (stride -1) or a strided loop. Index arithmetic happens once per run, not
//! per element. Transposes whose innermost output dim is strided in the
//! source use 32x32 tiles so both sides stay in cache. Large outputs are split
//! into contiguous output chunks over rayon; each element is written by
//! exactly one task, so results do not depend on the thread count.

use super::kernel::{input, output, worth_parallel, CHUNK};
use super::{check, Op};
use crate::dispatch_any;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Tensor};
use crate::types::{fmt_list, strides_of, TensorType};
use rayon::prelude::*;

/// Broadcasts the operand into `shape`, operand dim `i` becoming output dim `dims[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BroadcastInDim {
    /// Output shape.
    pub shape: Vec<usize>,
    /// For each operand dim, the output dim it maps to (strictly increasing).
    pub dims: Vec<usize>,
}

/// Reinterprets the row-major elements with a new shape of equal size.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reshape {
    /// Output shape.
    pub shape: Vec<usize>,
}

/// Permutes dims: output dim `i` is operand dim `perm[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transpose {
    /// A permutation of `0..rank`.
    pub perm: Vec<usize>,
}

/// A strided rectangular window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Slice {
    /// First index per dim.
    pub start: Vec<usize>,
    /// Exclusive end per dim.
    pub stop: Vec<usize>,
    /// Step per dim (`>= 1`).
    pub stride: Vec<usize>,
}

/// Edge and interior padding with a scalar operand; negative edges crop.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pad {
    /// Padding before the first element per dim (negative crops).
    pub lo: Vec<i64>,
    /// Padding after the last element per dim (negative crops).
    pub hi: Vec<i64>,
    /// Pad elements inserted between neighbouring elements per dim.
    pub interior: Vec<usize>,
}

/// Joins operands along an existing axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Concatenate {
    /// The axis along which operands are joined.
    pub axis: usize,
}

/// Flips the listed axes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reverse {
    /// Axes to flip (distinct, in range).
    pub axes: Vec<usize>,
}

/// Element count of a shape, `None` on overflow.
fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn fits(op: &impl Op, ins: &[TensorType], shape: &[usize]) -> Result<(), TypeError> {
    match numel(shape) {
        Some(_) => Ok(()),
        None => {
            Err(check::err(op, ins, format!("expected an output shape {} whose size fits in usize", fmt_list(shape))))
        }
    }
}

fn len_eq(op: &impl Op, ins: &[TensorType], what: &str, len: usize, rank: usize) -> Result<(), TypeError> {
    if len == rank {
        Ok(())
    } else {
        Err(check::err(op, ins, format!("expected {what} to have one entry per operand dim ({rank}), got {len}")))
    }
}

// ---------------------------------------------------------------------------
// Shape rules
// ---------------------------------------------------------------------------

impl Op for BroadcastInDim {
    fn name(&self) -> &'static str {
        "broadcast_in_dim"
    }

    fn params(&self) -> String {
        format!("shape={}, dims={}", fmt_list(&self.shape), fmt_list(&self.dims))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        len_eq(self, ins, "dims", self.dims.len(), x.rank())?;
        let out_rank = self.shape.len();
        for (i, &d) in self.dims.iter().enumerate() {
            if d >= out_rank {
                return Err(check::err(
                    self,
                    ins,
                    format!("dims[{i}] = {d} is out of range for output rank {out_rank}"),
                ));
            }
            if i > 0 && self.dims[i - 1] >= d {
                return Err(check::err(self, ins, "expected strictly increasing dims"));
            }
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if x.shape[i] != 1 && x.shape[i] != self.shape[d] {
                return Err(check::err(
                    self,
                    ins,
                    format!(
                        "operand dim {i} has size {}; expected 1 or {} (output dim {d})",
                        x.shape[i], self.shape[d]
                    ),
                ));
            }
        }
        fits(self, ins, &self.shape)?;
        Ok(vec![TensorType::new(x.dtype, self.shape.clone())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        let in_strides = strides_of(x.shape());
        let mut strides = vec![0isize; self.shape.len()];
        for (i, &d) in self.dims.iter().enumerate() {
            if x.shape()[i] != 1 {
                strides[d] = in_strides[i] as isize;
            }
        }
        let view = View { offset: 0, shape: self.shape.clone(), strides };
        dispatch_any!(x.dtype(), gather_kernel(x, &view, &mut outs[0]))
    }
}

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn params(&self) -> String {
        format!("shape={}", fmt_list(&self.shape))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        if numel(&self.shape) != Some(x.numel()) {
            return Err(check::err(
                self,
                ins,
                format!("expected a shape with {} elements like the operand, got {}", x.numel(), fmt_list(&self.shape)),
            ));
        }
        Ok(vec![TensorType::new(x.dtype, self.shape.clone())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        dispatch_any!(ins[0].dtype(), copy_kernel(ins[0], &mut outs[0]))
    }
}

impl Op for Transpose {
    fn name(&self) -> &'static str {
        "transpose"
    }

    fn params(&self) -> String {
        format!("perm={}", fmt_list(&self.perm))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        if self.perm.len() != x.rank() {
            return Err(check::err(
                self,
                ins,
                format!(
                    "expected perm to be a permutation of 0..{} (length {}), got length {}",
                    x.rank(),
                    x.rank(),
                    self.perm.len()
                ),
            ));
        }
        check::axes(self, ins, &self.perm, x.rank())?;
        let shape = self.perm.iter().map(|&p| x.shape[p]).collect::<Vec<_>>();
        Ok(vec![TensorType::new(x.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        let in_strides = strides_of(x.shape());
        let view = View {
            offset: 0,
            shape: self.perm.iter().map(|&p| x.shape()[p]).collect(),
            strides: self.perm.iter().map(|&p| in_strides[p] as isize).collect(),
        };
        dispatch_any!(x.dtype(), transpose_kernel(x, &view, &mut outs[0]))
    }
}

impl Slice {
    fn out_shape(&self) -> Vec<usize> {
        self.start.iter().zip(&self.stop).zip(&self.stride).map(|((&a, &b), &s)| (b - a).div_ceil(s)).collect()
    }
}

impl Op for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }

    fn params(&self) -> String {
        format!("start={}, stop={}, stride={}", fmt_list(&self.start), fmt_list(&self.stop), fmt_list(&self.stride))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        len_eq(self, ins, "start", self.start.len(), x.rank())?;
        len_eq(self, ins, "stop", self.stop.len(), x.rank())?;
        len_eq(self, ins, "stride", self.stride.len(), x.rank())?;
        for i in 0..x.rank() {
            let (a, b, s, d) = (self.start[i], self.stop[i], self.stride[i], x.shape[i]);
            if s == 0 {
                return Err(check::err(self, ins, format!("expected stride >= 1, got 0 in dim {i}")));
            }
            if !(a <= b && b <= d) {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected start <= stop <= dim size in dim {i}, got start {a}, stop {b}, size {d}"),
                ));
            }
        }
        Ok(vec![TensorType::new(x.dtype, self.out_shape())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        let in_strides = strides_of(x.shape());
        let offset = self.start.iter().zip(&in_strides).map(|(&a, &s)| (a * s) as isize).sum();
        let strides = in_strides.iter().zip(&self.stride).map(|(&s, &k)| (s * k) as isize).collect();
        let view = View { offset, shape: self.out_shape(), strides };
        dispatch_any!(x.dtype(), gather_kernel(x, &view, &mut outs[0]))
    }
}

/// Per-dim placement of operand elements in a padded output.
#[derive(Debug, Clone, Copy)]
struct PadDim {
    /// Output size.
    out: usize,
    /// Distance between neighbouring operand elements in the output (`interior + 1`).
    step: usize,
    /// First operand index that lands inside the output.
    j0: usize,
    /// One past the last operand index that lands inside the output.
    j1: usize,
    /// Output position of operand index `j0`.
    p0: usize,
}

impl Pad {
    /// Output dim for an operand dim, `None` on overflow.
    fn out_dim(&self, i: usize, d: usize) -> Option<i128> {
        let (lo, hi, k) = (self.lo[i] as i128, self.hi[i] as i128, self.interior[i] as i128);
        let d = d as i128;
        let edges = lo + hi;
        if d == 0 {
            return Some(edges);
        }
        (d - 1).checked_mul(k)?.checked_add(d)?.checked_add(edges)
    }

    /// Placement per dim; lengths and output sizes were validated by `infer`.
    fn layout(&self, shape: &[usize]) -> Vec<PadDim> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let out = self.out_dim(i, d).unwrap_or(0).max(0);
                let step = self.interior[i] as i128 + 1;
                let lo = self.lo[i] as i128;
                let j0 = if lo >= 0 { 0 } else { (-lo + step - 1) / step };
                let last = out - 1 - lo;
                let j1 = if last < 0 { 0 } else { (last / step + 1).min(d as i128) };
                let j1 = j1.max(j0);
                let p0 = (lo + j0 * step).max(0);
                // `interior + 1` only exceeds usize when the dim has at most one
                // element, where the step is never taken.
                let step = usize::try_from(step).unwrap_or(usize::MAX);
                PadDim { out: out as usize, step, j0: j0 as usize, j1: j1 as usize, p0: p0 as usize }
            })
            .collect()
    }
}

impl Op for Pad {
    fn name(&self) -> &'static str {
        "pad"
    }

    fn params(&self) -> String {
        format!("lo={}, hi={}, interior={}", fmt_list(&self.lo), fmt_list(&self.hi), fmt_list(&self.interior))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        let (x, v) = (&ins[0], &ins[1]);
        if v.rank() != 0 {
            return Err(check::err(self, ins, "expected a rank-0 pad value"));
        }
        if v.dtype != x.dtype {
            return Err(check::err(
                self,
                ins,
                format!("expected the pad value to have the operand's dtype {}", x.dtype),
            ));
        }
        len_eq(self, ins, "lo", self.lo.len(), x.rank())?;
        len_eq(self, ins, "hi", self.hi.len(), x.rank())?;
        len_eq(self, ins, "interior", self.interior.len(), x.rank())?;
        let mut shape = Vec::with_capacity(x.rank());
        for (i, &d) in x.shape.iter().enumerate() {
            let n = self
                .out_dim(i, d)
                .ok_or_else(|| check::err(self, ins, format!("expected the output size of dim {i} to fit in usize")))?;
            if n < 0 {
                return Err(check::err(self, ins, format!("expected a non-negative output size in dim {i}, got {n}")));
            }
            let n = usize::try_from(n)
                .map_err(|_| check::err(self, ins, format!("output size {n} of dim {i} does not fit in usize")))?;
            shape.push(n);
        }
        fits(self, ins, &shape)?;
        Ok(vec![TensorType::new(x.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        let layout = self.layout(x.shape());
        dispatch_any!(x.dtype(), pad_kernel(x, ins[1], &layout, &mut outs[0]))
    }
}

impl Op for Concatenate {
    fn name(&self) -> &'static str {
        "concatenate"
    }

    fn params(&self) -> String {
        format!("axis={}", self.axis)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let Some(first) = ins.first() else {
            return Err(check::err(self, ins, "expected at least one operand"));
        };
        let rank = first.rank();
        if self.axis >= rank {
            return Err(check::err(self, ins, format!("axis {} is out of range for rank {rank}", self.axis)));
        }
        let mut total = 0usize;
        for (k, t) in ins.iter().enumerate() {
            if t.dtype != first.dtype {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected every operand to be {}, operand {k} is {}", first.dtype, t.dtype),
                ));
            }
            let same = t.rank() == rank && (0..rank).all(|i| i == self.axis || t.shape[i] == first.shape[i]);
            if !same {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected operand {k} to match operand 0's shape except along axis {}", self.axis),
                ));
            }
            total = total
                .checked_add(t.shape[self.axis])
                .ok_or_else(|| check::err(self, ins, "expected the joined axis size to fit in usize"))?;
        }
        let mut shape = first.shape.clone();
        shape[self.axis] = total;
        fits(self, ins, &shape)?;
        Ok(vec![TensorType::new(first.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        dispatch_any!(outs[0].dtype(), concat_kernel(ins, self.axis, &mut outs[0]))
    }
}

impl Op for Reverse {
    fn name(&self) -> &'static str {
        "reverse"
    }

    fn params(&self) -> String {
        format!("axes={}", fmt_list(&self.axes))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        check::axes(self, ins, &self.axes, ins[0].rank())?;
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        let mut strides: Vec<isize> = strides_of(x.shape()).into_iter().map(|s| s as isize).collect();
        let mut offset = 0isize;
        for &a in &self.axes {
            let d = x.shape()[a];
            if d > 0 {
                offset += (d as isize - 1) * strides[a];
            }
            strides[a] = -strides[a];
        }
        let view = View { offset, shape: x.shape().to_vec(), strides };
        dispatch_any!(x.dtype(), gather_kernel(x, &view, &mut outs[0]))
    }
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

/// The output, row-major over `shape`, reads `src[offset + sum(idx[i] * strides[i])]`.
#[derive(Debug, Clone)]
struct View {
    offset: isize,
    shape: Vec<usize>,
    strides: Vec<isize>,
}

impl View {
    /// Drops size-1 dims and merges neighbours that are contiguous in the
    /// source, so the innermost run is as long as possible. Same elements,
    /// same row-major order.
    fn collapse(&self) -> View {
        let mut shape: Vec<usize> = Vec::with_capacity(self.shape.len());
        let mut strides: Vec<isize> = Vec::with_capacity(self.shape.len());
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            if d == 1 {
                continue;
            }
            match (shape.last_mut(), strides.last_mut()) {
                (Some(pd), Some(ps)) if *ps == s * d as isize => {
                    *pd *= d;
                    *ps = s;
                }
                _ => {
                    shape.push(d);
                    strides.push(s);
                }
            }
        }
        View { offset: self.offset, shape, strides }
    }
}

/// Tensor-level gather: typed slices, then [`gather`].
fn gather_kernel<T: Element>(x: &Tensor, view: &View, y: &mut Tensor) -> Result<(), ExecError> {
    gather(input::<T>(x)?, &view.collapse(), output::<T>(y)?);
    Ok(())
}

/// `out = view(src)`, split into contiguous output chunks when large.
fn gather<T: Copy + Send + Sync>(src: &[T], v: &View, out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    if v.shape.is_empty() {
        out[0] = src[v.offset as usize];
        return;
    }
    if worth_parallel(out.len()) {
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| gather_from(src, v, c * CHUNK, chunk));
    } else {
        gather_from(src, v, 0, out);
    }
}

/// Fills `out`, which holds the view's elements from flat index `start` on.
/// `start` may fall mid-row; the odometer over the outer dims is set up once
/// and then advanced per row.
fn gather_from<T: Copy>(src: &[T], v: &View, start: usize, out: &mut [T]) {
    let k = v.shape.len();
    let (n, s) = (v.shape[k - 1], v.strides[k - 1]);
    let outer = &v.shape[..k - 1];
    let ostr = &v.strides[..k - 1];
    let mut idx = vec![0usize; k - 1];
    let (mut row, mut col) = (start / n, start % n);
    let mut base = v.offset;
    for i in (0..k - 1).rev() {
        idx[i] = row % outer[i];
        row /= outer[i];
        base += idx[i] as isize * ostr[i];
    }
    let mut pos = 0;
    while pos < out.len() {
        let take = (n - col).min(out.len() - pos);
        copy_run(src, base + col as isize * s, s, &mut out[pos..pos + take]);
        pos += take;
        col = 0;
        for i in (0..k - 1).rev() {
            idx[i] += 1;
            base += ostr[i];
            if idx[i] < outer[i] {
                break;
            }
            base -= ostr[i] * outer[i] as isize;
            idx[i] = 0;
        }
    }
}

/// `out[t] = src[base + t*s]` with the common strides specialised.
#[inline]
fn copy_run<T: Copy>(src: &[T], base: isize, s: isize, out: &mut [T]) {
    let b = base as usize;
    let len = out.len();
    match s {
        1 => out.copy_from_slice(&src[b..b + len]),
        0 => out.fill(src[b]),
        -1 => {
            for (o, &x) in out.iter_mut().zip(src[b + 1 - len..=b].iter().rev()) {
                *o = x;
            }
        }
        s if s > 0 => {
            for (o, &x) in out.iter_mut().zip(src[b..].iter().step_by(s as usize)) {
                *o = x;
            }
        }
        s => {
            for (t, o) in out.iter_mut().enumerate() {
                *o = src[(base + t as isize * s) as usize];
            }
        }
    }
}

/// Tile edge for blocked transposes: a 32x32 tile of 8-byte elements is 8 KiB
/// per side, comfortably inside L1 with both source and destination.
const TILE: usize = 32;

fn transpose_kernel<T: Element>(x: &Tensor, view: &View, y: &mut Tensor) -> Result<(), ExecError> {
    let (src, out) = (input::<T>(x)?, output::<T>(y)?);
    let v = view.collapse();
    let k = v.shape.len();
    // Contiguous innermost runs (the permutation keeps the last dims in
    // place) are a plain gather of runs.
    let unit = v.strides.iter().position(|&s| s == 1);
    let a = match unit {
        Some(a) if k >= 2 && a != k - 1 => a,
        _ => {
            gather(src, &v, out);
            return Ok(());
        }
    };
    if out.is_empty() {
        return Ok(());
    }
    let out_strides = strides_of(&v.shape);
    let row0 = out_strides[0];
    if worth_parallel(out.len()) && v.shape[0] > 1 {
        // Split along output dim 0; keep tile alignment when dim 0 is the
        // source-contiguous one.
        let mut per = CHUNK.div_ceil(row0).max(1);
        if a == 0 {
            per = per.div_ceil(TILE) * TILE;
        }
        out.par_chunks_mut(per * row0).enumerate().for_each(|(c, chunk)| {
            let mut sub = v.clone();
            sub.shape[0] = chunk.len() / row0;
            sub.offset += (c * per) as isize * v.strides[0];
            transpose_tiled(src, &sub, a, &out_strides, chunk);
        });
    } else {
        transpose_tiled(src, &v, a, &out_strides, out);
    }
    Ok(())
}

/// Batched 2-D tiled transpose: dim `a` is contiguous in the source, the last
/// output dim `l` is contiguous in the output; every other dim is a batch dim.
fn transpose_tiled<T: Copy>(src: &[T], v: &View, a: usize, os: &[usize], out: &mut [T]) {
    let k = v.shape.len();
    let l = k - 1;
    let (na, nl, sl, osa) = (v.shape[a], v.shape[l], v.strides[l], os[a]);
    let batch: Vec<usize> = (0..k).filter(|&i| i != a && i != l).collect();
    let nbatch: usize = batch.iter().map(|&i| v.shape[i]).product();
    let mut idx = vec![0usize; batch.len()];
    let (mut ib, mut ob) = (v.offset, 0usize);
    for _ in 0..nbatch {
        for ta in (0..na).step_by(TILE) {
            let ea = (ta + TILE).min(na);
            for tl in (0..nl).step_by(TILE) {
                let el = (tl + TILE).min(nl);
                for i in ta..ea {
                    let orow = ob + i * osa;
                    let irow = ib + i as isize;
                    for (j, o) in out[orow + tl..orow + el].iter_mut().enumerate() {
                        *o = src[(irow + (tl + j) as isize * sl) as usize];
                    }
                }
            }
        }
        for (bi, &d) in batch.iter().enumerate().rev() {
            idx[bi] += 1;
            ib += v.strides[d];
            ob += os[d];
            if idx[bi] < v.shape[d] {
                break;
            }
            ib -= v.strides[d] * v.shape[d] as isize;
            ob -= os[d] * v.shape[d];
            idx[bi] = 0;
        }
    }
}

/// A plain copy (reshape), parallel when large.
fn copy_kernel<T: Element>(x: &Tensor, y: &mut Tensor) -> Result<(), ExecError> {
    par_copy(output::<T>(y)?, input::<T>(x)?);
    Ok(())
}

fn par_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    if worth_parallel(dst.len()) {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
    } else {
        dst.copy_from_slice(src);
    }
}

/// Runs `f(first_row, rows)` over groups of whole rows of `out`, in parallel
/// when large. `row_len` must be positive and divide `out.len()`.
fn for_rows<T: Send>(out: &mut [T], row_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if worth_parallel(out.len()) && out.len() > row_len {
        let per = CHUNK.div_ceil(row_len).max(1);
        out.par_chunks_mut(per * row_len).enumerate().for_each(|(c, chunk)| f(c * per, chunk));
    } else {
        f(0, out);
    }
}

fn pad_kernel<T: Element>(x: &Tensor, pv: &Tensor, layout: &[PadDim], y: &mut Tensor) -> Result<(), ExecError> {
    let (src, pad, out) = (input::<T>(x)?, input::<T>(pv)?, output::<T>(y)?);
    let pad = *pad.first().ok_or_else(|| ExecError::kernel("pad", "internal error: empty pad value"))?;
    if out.is_empty() {
        return Ok(());
    }
    let k = layout.len();
    if k == 0 {
        out[0] = src[0];
        return Ok(());
    }
    if layout.iter().any(|d| d.j0 >= d.j1) {
        // No operand element lands in the output.
        if worth_parallel(out.len()) {
            out.par_chunks_mut(CHUNK).for_each(|c| c.fill(pad));
        } else {
            out.fill(pad);
        }
        return Ok(());
    }
    let in_strides = strides_of(x.shape());
    // Per outer dim and output position: the operand index there, or None.
    let maps: Vec<Vec<Option<usize>>> = layout[..k - 1]
        .iter()
        .map(|d| {
            let mut m = vec![None; d.out];
            for j in d.j0..d.j1 {
                m[d.p0 + (j - d.j0) * d.step] = Some(j);
            }
            m
        })
        .collect();
    let last = layout[k - 1];
    let cnt = last.j1 - last.j0;
    let fill_row = |row: &mut [T], base: Option<usize>| match base {
        None => row.fill(pad),
        Some(b) => {
            let run = &src[b + last.j0..b + last.j1];
            if last.step == 1 {
                row[..last.p0].fill(pad);
                row[last.p0..last.p0 + cnt].copy_from_slice(run);
                row[last.p0 + cnt..].fill(pad);
            } else {
                row.fill(pad);
                for (o, &v) in row[last.p0..].iter_mut().step_by(last.step).zip(run) {
                    *o = v;
                }
            }
        }
    };
    let outer: Vec<usize> = layout[..k - 1].iter().map(|d| d.out).collect();
    for_rows(out, last.out, |first, rows| {
        let mut idx = vec![0usize; k - 1];
        let mut r = first;
        for i in (0..k - 1).rev() {
            idx[i] = r % outer[i];
            r /= outer[i];
        }
        for row in rows.chunks_exact_mut(last.out) {
            let mut base = Some(0usize);
            for i in 0..k - 1 {
                base = match (base, maps[i][idx[i]]) {
                    (Some(b), Some(j)) => Some(b + j * in_strides[i]),
                    _ => None,
                };
            }
            fill_row(row, base);
            for i in (0..k - 1).rev() {
                idx[i] += 1;
                if idx[i] < outer[i] {
                    break;
                }
                idx[i] = 0;
            }
        }
    });
    Ok(())
}

fn concat_kernel<T: Element>(ins: &[&Tensor], axis: usize, y: &mut Tensor) -> Result<(), ExecError> {
    let srcs = ins.iter().map(|t| input::<T>(t)).collect::<Result<Vec<_>, _>>()?;
    let inner: usize = y.shape()[axis + 1..].iter().product();
    let blocks: Vec<usize> = ins.iter().map(|t| t.shape()[axis] * inner).collect();
    let out = output::<T>(y)?;
    let row_len: usize = blocks.iter().sum();
    if out.is_empty() {
        return Ok(());
    }
    let rows = out.len() / row_len;
    if rows == 1 {
        // One big row (axis 0 or all leading dims 1): copy operands whole.
        let mut rest = out;
        for (s, &b) in srcs.iter().zip(&blocks) {
            let (head, tail) = rest.split_at_mut(b);
            par_copy(head, s);
            rest = tail;
        }
        return Ok(());
    }
    for_rows(out, row_len, |first, chunk| {
        for (r, row) in chunk.chunks_exact_mut(row_len).enumerate() {
            let r = first + r;
            let mut at = 0;
            for (s, &b) in srcs.iter().zip(&blocks) {
                row[at..at + b].copy_from_slice(&s[r * b..(r + 1) * b]);
                at += b;
            }
        }
    });
    Ok(())
}

// ---------------------------------------------------------------------------
// Builder entry points
// ---------------------------------------------------------------------------

impl Builder {
    /// Broadcasts `x` to `shape`; operand dim `i` becomes output dim `dims[i]`.
    pub fn broadcast_in_dim(&mut self, x: Value, shape: &[usize], dims: &[usize]) -> Result<Value, IrError> {
        self.emit1(BroadcastInDim { shape: shape.to_vec(), dims: dims.to_vec() }, &[x])
    }

    /// Same elements in row-major order, new shape.
    pub fn reshape(&mut self, x: Value, shape: &[usize]) -> Result<Value, IrError> {
        self.emit1(Reshape { shape: shape.to_vec() }, &[x])
    }

    /// Permutes dims: output dim `i` is operand dim `perm[i]`.
    pub fn transpose(&mut self, x: Value, perm: &[usize]) -> Result<Value, IrError> {
        self.emit1(Transpose { perm: perm.to_vec() }, &[x])
    }

    /// The strided window `start..stop` step `stride` of every dim.
    pub fn slice(&mut self, x: Value, start: &[usize], stop: &[usize], stride: &[usize]) -> Result<Value, IrError> {
        self.emit1(Slice { start: start.to_vec(), stop: stop.to_vec(), stride: stride.to_vec() }, &[x])
    }

    /// Pads (or, with negative `lo`/`hi`, crops) `x` with the rank-0 `pad_value`.
    pub fn pad(
        &mut self,
        x: Value,
        pad_value: Value,
        lo: &[i64],
        hi: &[i64],
        interior: &[usize],
    ) -> Result<Value, IrError> {
        self.emit1(Pad { lo: lo.to_vec(), hi: hi.to_vec(), interior: interior.to_vec() }, &[x, pad_value])
    }

    /// Joins `xs` along `axis`.
    pub fn concatenate(&mut self, xs: &[Value], axis: usize) -> Result<Value, IrError> {
        self.emit1(Concatenate { axis }, xs)
    }

    /// Flips the listed axes.
    pub fn reverse(&mut self, x: Value, axes: &[usize]) -> Result<Value, IrError> {
        self.emit1(Reverse { axes: axes.to_vec() }, &[x])
    }
}

// Derivative rules. Every shape op is linear: the JVP applies the op to the
// tangent, and the transpose maps cotangents back (broadcast <-> reduce_sum,
// slice <-> pad, concatenate <-> slices; reshape/transpose/reverse invert).
mod diff {
    use super::*;
    use crate::ad::helpers::or_zeros;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    fn lin1(
        b: &mut Builder,
        t: Option<Value>,
        f: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>,
    ) -> Result<Vec<Option<Value>>, IrError> {
        Ok(vec![t.map(|t| f(b, t)).transpose()?])
    }

    impl Diff for BroadcastInDim {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.tangents[0], |b, t| b.broadcast_in_dim(t, &self.shape, &self.dims))
        }
        // Sum over the axes the broadcast created or stretched, then restore the operand shape.
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let in_shape = cx.in_types[0].shape.clone();
            lin1(b, cx.cts[0], |b, ct| {
                let mut axes: Vec<usize> = (0..self.shape.len()).filter(|a| !self.dims.contains(a)).collect();
                for (i, &d) in self.dims.iter().enumerate() {
                    if in_shape[i] == 1 && self.shape[d] != 1 {
                        axes.push(d);
                    }
                }
                axes.sort_unstable();
                let summed = if axes.is_empty() { ct } else { b.reduce_sum(ct, &axes)? };
                if b.ty(summed)?.shape == in_shape {
                    Ok(summed)
                } else {
                    b.reshape(summed, &in_shape)
                }
            })
        }
    }

    impl Diff for Reshape {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.tangents[0], |b, t| b.reshape(t, &self.shape))
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let in_shape = cx.in_types[0].shape.clone();
            lin1(b, cx.cts[0], |b, ct| b.reshape(ct, &in_shape))
        }
    }

    impl Diff for Transpose {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.tangents[0], |b, t| b.transpose(t, &self.perm))
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let mut inv = vec![0; self.perm.len()];
            for (i, &p) in self.perm.iter().enumerate() {
                inv[p] = i;
            }
            lin1(b, cx.cts[0], |b, ct| b.transpose(ct, &inv))
        }
    }

    impl Diff for Slice {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.tangents[0], |b, t| b.slice(t, &self.start, &self.stop, &self.stride))
        }
        // Scatter the cotangent back into zeros: a pad with the slice's start
        // before, stride-1 between, and the remainder after.
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let in_ty = cx.in_types[0].clone();
            let out_shape = cx.out_types[0].shape.clone();
            lin1(b, cx.cts[0], |b, ct| {
                let (mut lo, mut hi, mut interior) = (Vec::new(), Vec::new(), Vec::new());
                for d in 0..in_ty.rank() {
                    let n = in_ty.shape[d] as i64;
                    if out_shape[d] == 0 {
                        lo.push(n);
                        hi.push(0);
                        interior.push(0);
                    } else {
                        let start = self.start[d] as i64;
                        let last = start + (out_shape[d] as i64 - 1) * self.stride[d] as i64;
                        lo.push(start);
                        hi.push(n - last - 1);
                        interior.push(self.stride[d] - 1);
                    }
                }
                let zero = b.scalar(0.0, in_ty.dtype)?;
                b.pad(ct, zero, &lo, &hi, &interior)
            })
        }
    }

    impl Diff for Pad {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let (x_dot, v_dot) = (cx.tangents[0], cx.tangents[1]);
            if x_dot.is_none() && v_dot.is_none() {
                return Ok(vec![None]);
            }
            let x_dot = or_zeros(b, x_dot, cx.primals[0])?;
            let v_dot = or_zeros(b, v_dot, cx.primals[1])?;
            Ok(vec![Some(b.pad(x_dot, v_dot, &self.lo, &self.hi, &self.interior)?)])
        }
        // Undo the edge padding (negated lo/hi), then take every
        // (interior+1)-th element; the pad value gets everything else.
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
            let dtype = cx.in_types[0].dtype;
            let zero = b.scalar(0.0, dtype)?;
            let neg_lo: Vec<i64> = self.lo.iter().map(|v| -v).collect();
            let neg_hi: Vec<i64> = self.hi.iter().map(|v| -v).collect();
            let unpadded = b.pad(ct, zero, &neg_lo, &neg_hi, &vec![0; self.lo.len()])?;
            let shape = b.ty(unpadded)?.shape.clone();
            let strides: Vec<usize> = self.interior.iter().map(|i| i + 1).collect();
            let x_bar = b.slice(unpadded, &vec![0; shape.len()], &shape, &strides)?;
            let v_bar = if cx.is_linear(1) {
                let all: Vec<usize> = (0..shape.len()).collect();
                let total = b.reduce_sum(ct, &all)?;
                let inner = b.reduce_sum(x_bar, &all)?;
                Some(b.sub(total, inner)?)
            } else {
                None
            };
            Ok(vec![if cx.is_linear(0) { Some(x_bar) } else { None }, v_bar])
        }
    }

    impl Diff for Concatenate {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            if cx.tangents.iter().all(Option::is_none) {
                return Ok(vec![None]);
            }
            let mut ts = Vec::with_capacity(cx.tangents.len());
            for (&t, &p) in cx.tangents.iter().zip(cx.primals) {
                ts.push(or_zeros(b, t, p)?);
            }
            Ok(vec![Some(b.concatenate(&ts, self.axis)?)])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None; cx.inputs.len()]) };
            let out_shape = cx.out_types[0].shape.clone();
            let mut offset = 0;
            let mut res = Vec::with_capacity(cx.inputs.len());
            for (i, ty) in cx.in_types.iter().enumerate() {
                let len = ty.shape[self.axis];
                if cx.is_linear(i) {
                    let mut start = vec![0; out_shape.len()];
                    let mut stop = out_shape.clone();
                    start[self.axis] = offset;
                    stop[self.axis] = offset + len;
                    res.push(Some(b.slice(ct, &start, &stop, &vec![1; out_shape.len()])?));
                } else {
                    res.push(None);
                }
                offset += len;
            }
            Ok(res)
        }
    }

    impl Diff for Reverse {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.tangents[0], |b, t| b.reverse(t, &self.axes))
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            lin1(b, cx.cts[0], |b, ct| b.reverse(ct, &self.axes))
        }
    }
}

// Batching rules. Per-example axes map to physical axes around the batch dim
// (`phys_axis`); ops that change the layout (broadcast, reshape, concatenate)
// work with the batch dim at the front.
mod batching {
    use super::*;
    use crate::batch::helpers::{all_to_front, bdim_to_front, move_bdim, phys_axes, phys_axis};
    use crate::batch::{Batch, BatchCx, Batched};
    use crate::dtype::DType;

    fn bdim0(cx: &BatchCx<'_>) -> usize {
        cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand")
    }

    impl Batch for BroadcastInDim {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let x = move_bdim(b, cx.args[0], bdim0(cx), 0)?;
            let mut shape = vec![cx.size];
            shape.extend_from_slice(&self.shape);
            let mut dims = vec![0];
            dims.extend(self.dims.iter().map(|d| d + 1));
            Ok(vec![(b.broadcast_in_dim(x, &shape, &dims)?, Some(0))])
        }
    }

    impl Batch for Reshape {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let x = move_bdim(b, cx.args[0], bdim0(cx), 0)?;
            let mut shape = vec![cx.size];
            shape.extend_from_slice(&self.shape);
            Ok(vec![(b.reshape(x, &shape)?, Some(0))])
        }
    }

    // One transpose: the batch dim goes first, the rest permuted as asked.
    impl Batch for Transpose {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = bdim0(cx);
            let mut perm = vec![d];
            perm.extend(self.perm.iter().map(|&p| phys_axis(p, d)));
            Ok(vec![(b.transpose(cx.args[0], &perm)?, Some(0))])
        }
    }

    impl Batch for Slice {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = bdim0(cx);
            let (mut start, mut stop, mut stride) = (self.start.clone(), self.stop.clone(), self.stride.clone());
            start.insert(d, 0);
            stop.insert(d, cx.size);
            stride.insert(d, 1);
            Ok(vec![(b.slice(cx.args[0], &start, &stop, &stride)?, Some(d))])
        }
    }

    // A batched pad value: pad with zeros, then choose the per-example value
    // wherever a padded mask (true on the operand's elements) is false.
    impl Batch for Pad {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let x = bdim_to_front(b, cx.args[0], cx.bdims[0], cx.size)?;
            let (mut lo, mut hi, mut interior) = (self.lo.clone(), self.hi.clone(), self.interior.clone());
            lo.insert(0, 0);
            hi.insert(0, 0);
            interior.insert(0, 0);
            match cx.bdims[1] {
                None => Ok(vec![(b.pad(x, cx.args[1], &lo, &hi, &interior)?, Some(0))]),
                Some(vd) => {
                    let xt = b.ty(x)?.clone();
                    let zero = b.scalar(0.0, xt.dtype)?;
                    let padded = b.pad(x, zero, &lo, &hi, &interior)?;
                    let t = b.full(1.0, &TensorType::new(DType::Bool, xt.shape.clone()))?;
                    let f = b.scalar(0.0, DType::Bool)?;
                    let mask = b.pad(t, f, &lo, &hi, &interior)?;
                    let out_shape = b.ty(padded)?.shape.clone();
                    let v = move_bdim(b, cx.args[1], vd, 0)?;
                    let vb = b.broadcast_in_dim(v, &out_shape, &[0])?;
                    Ok(vec![(b.select(mask, padded, vb)?, Some(0))])
                }
            }
        }
    }

    impl Batch for Concatenate {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let xs = all_to_front(b, cx)?;
            Ok(vec![(b.concatenate(&xs, self.axis + 1)?, Some(0))])
        }
    }

    impl Batch for Reverse {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = bdim0(cx);
            Ok(vec![(b.reverse(cx.args[0], &phys_axes(&self.axes, d))?, Some(d))])
        }
    }
}
