//! User-level shape helpers over the data-movement primitives:
//! `expand_dims`, `squeeze`, `flatten`, `stack`, `concat`, `transpose`,
//! `swapaxes`, `broadcast_to`, `reshape` with an inferred `-1`,
//! `slice_axis` (Python slicing along one axis), `take` (NumPy's
//! `take(mode='clip')`), `where_`, and the creators `zeros`, `ones`, `full`,
//! `arange`, `linspace`.
//!
//! Conventions: axes are already normalised (`usize`, in range) by the caller
//! unless a function says otherwise; the `Tr` API resolves negative axes
//! first. Arguments are validated here with messages naming the shapes
//! involved, so the language front end gets the same errors as Rust code.
//! Nothing here applies NumPy broadcasting except `broadcast_to` and
//! `where_` (which follow NumPy).

use super::broadcast;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Binary;
use crate::types::{Shape, TensorType};

/// The shape of a value.
pub(crate) fn shape_of(b: &Builder, x: Value) -> Result<Shape, IrError> {
    Ok(b.ty(x)?.shape.clone())
}

/// Validates that `axes` are distinct and each `< rank`.
pub(crate) fn check_axes(op: &str, axes: &[usize], rank: usize) -> Result<(), IrError> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(IrError::invalid(op, format!("axis {a} is out of range for rank {rank}")));
        }
        if axes[..i].contains(&a) {
            return Err(IrError::invalid(op, format!("axis {a} is repeated")));
        }
    }
    Ok(())
}

/// Reshape that is skipped when the shape already matches.
pub(crate) fn reshape_to(b: &mut Builder, x: Value, shape: &[usize]) -> Result<Value, IrError> {
    if b.ty(x)?.shape.as_slice() == shape {
        Ok(x)
    } else {
        b.reshape(x, shape)
    }
}

/// Transpose that is skipped for the identity permutation.
pub(crate) fn transpose_to(b: &mut Builder, x: Value, perm: &[usize]) -> Result<Value, IrError> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        Ok(x)
    } else {
        b.transpose(x, perm)
    }
}

/// Inserts size-1 dims so that they sit at positions `axes` of the result
/// (`jnp.expand_dims`): each axis must be `< rank + axes.len()`, distinct.
pub fn expand_dims(b: &mut Builder, x: Value, axes: &[usize]) -> Result<Value, IrError> {
    let shape = shape_of(b, x)?;
    let out_rank = shape.len() + axes.len();
    check_axes("expand_dims", axes, out_rank)?;
    let mut src = shape.iter();
    let out: Shape = (0..out_rank)
        .map(|i| if axes.contains(&i) { 1 } else { *src.next().expect("internal error: rank bookkeeping") })
        .collect();
    reshape_to(b, x, &out)
}

/// Removes the listed size-1 axes; an axis whose size is not 1 is an error.
pub fn squeeze(b: &mut Builder, x: Value, axes: &[usize]) -> Result<Value, IrError> {
    let shape = shape_of(b, x)?;
    check_axes("squeeze", axes, shape.len())?;
    for &a in axes {
        if shape[a] != 1 {
            return Err(IrError::invalid(
                "squeeze",
                format!("cannot squeeze axis {a} of shape {shape:?}: its size is {}, not 1", shape[a]),
            ));
        }
    }
    let out: Shape = shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
    reshape_to(b, x, &out)
}

/// Removes every size-1 axis (`squeeze()` with no axes).
pub fn squeeze_all(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let shape = shape_of(b, x)?;
    let axes: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] == 1).collect();
    squeeze(b, x, &axes)
}

/// Merges axes `start..=end` (inclusive, like `torch.flatten(x, start_dim,
/// end_dim)`) into one. A rank-0 operand becomes shape `[1]` (PyTorch).
pub fn flatten(b: &mut Builder, x: Value, start: usize, end: usize) -> Result<Value, IrError> {
    let shape = shape_of(b, x)?;
    if shape.is_empty() {
        return b.reshape(x, &[1]);
    }
    if start > end || end >= shape.len() {
        return Err(IrError::invalid(
            "flatten",
            format!("need start <= end < rank, got start={start}, end={end} for shape {shape:?}"),
        ));
    }
    let mut out: Shape = shape[..start].to_vec();
    out.push(shape[start..=end].iter().product());
    out.extend_from_slice(&shape[end + 1..]);
    reshape_to(b, x, &out)
}

/// Joins tensors of one dtype along an existing axis; their shapes must be
/// equal except along `axis` (no broadcasting, like `np.concatenate`).
pub fn concat(b: &mut Builder, xs: &[Value], axis: usize) -> Result<Value, IrError> {
    let Some(&first) = xs.first() else {
        return Err(IrError::invalid("concat", "need at least one tensor"));
    };
    let t0 = b.ty(first)?.clone();
    if axis >= t0.rank() {
        return Err(IrError::invalid("concat", format!("axis {axis} is out of range for rank {}", t0.rank())));
    }
    for &x in &xs[1..] {
        let t = b.ty(x)?;
        let same_rest = t.rank() == t0.rank() && (0..t.rank()).all(|i| i == axis || t.shape[i] == t0.shape[i]);
        if t.dtype != t0.dtype || !same_rest {
            return Err(IrError::invalid(
                "concat",
                format!("tensors must have one dtype and equal shapes except along axis {axis}; got {t0} and {t}"),
            ));
        }
    }
    if xs.len() == 1 {
        return Ok(first);
    }
    b.concatenate(xs, axis)
}

/// Joins tensors of one shape and dtype along a new axis `axis`
/// (`0..=rank`), like `np.stack`.
pub fn stack(b: &mut Builder, xs: &[Value], axis: usize) -> Result<Value, IrError> {
    let Some(&first) = xs.first() else {
        return Err(IrError::invalid("stack", "need at least one tensor"));
    };
    let t0 = b.ty(first)?.clone();
    if axis > t0.rank() {
        return Err(IrError::invalid("stack", format!("axis {axis} is out of range for rank {} + 1", t0.rank())));
    }
    let mut parts = Vec::with_capacity(xs.len());
    for &x in xs {
        let t = b.ty(x)?;
        if *t != t0 {
            return Err(IrError::invalid("stack", format!("all tensors must have one type; got {t0} and {t}")));
        }
        parts.push(expand_dims(b, x, &[axis])?);
    }
    concat(b, &parts, axis)
}

/// Permutes axes: output axis `i` is input axis `perm[i]`; `None` reverses
/// the axes (NumPy's `transpose()`).
pub fn transpose(b: &mut Builder, x: Value, perm: Option<&[usize]>) -> Result<Value, IrError> {
    let rank = b.ty(x)?.rank();
    let perm: Vec<usize> = match perm {
        Some(p) => {
            if p.len() != rank {
                return Err(IrError::invalid(
                    "transpose",
                    format!("permutation {p:?} has {} entries for a rank-{rank} tensor", p.len()),
                ));
            }
            check_axes("transpose", p, rank)?;
            p.to_vec()
        }
        None => (0..rank).rev().collect(),
    };
    transpose_to(b, x, &perm)
}

/// Exchanges two axes.
pub fn swapaxes(b: &mut Builder, x: Value, a1: usize, a2: usize) -> Result<Value, IrError> {
    let rank = b.ty(x)?.rank();
    for a in [a1, a2] {
        if a >= rank {
            return Err(IrError::invalid("swapaxes", format!("axis {a} is out of range for rank {rank}")));
        }
    }
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(a1, a2);
    transpose_to(b, x, &perm)
}

/// `x` repeated `reps[k]` times along each axis (`np.tile`): a shorter
/// `reps` is padded with leading 1s, a longer one gives `x` leading axes
/// of size 1. One broadcast and two reshapes (no copies in fused code).
pub fn tile(b: &mut Builder, x: Value, reps: &[usize]) -> Result<Value, IrError> {
    let shape = b.ty(x)?.shape.clone();
    let n = shape.len().max(reps.len());
    let pad = |v: &[usize]| {
        let mut p = vec![1usize; n - v.len()];
        p.extend_from_slice(v);
        p
    };
    let (shape, reps) = (pad(&shape), pad(reps));
    let x = b.reshape(x, &shape)?;
    // [s0, s1, ...] -> [r0, s0, r1, s1, ...] -> [r0 s0, r1 s1, ...]
    let wide: Vec<usize> = shape.iter().zip(&reps).flat_map(|(&s, &r)| [r, s]).collect();
    let dims: Vec<usize> = (0..n).map(|k| 2 * k + 1).collect();
    let y = b.broadcast_in_dim(x, &wide, &dims)?;
    let out: Vec<usize> = shape.iter().zip(&reps).map(|(&s, &r)| s * r).collect();
    b.reshape(y, &out)
}

/// Each element of `x` repeated `repeats` times along `axis` (`np.repeat`
/// with an integer count; `axis = None` flattens first).
pub fn repeat(b: &mut Builder, x: Value, repeats: usize, axis: Option<usize>) -> Result<Value, IrError> {
    let x = match axis {
        Some(_) => x,
        None => {
            let n = b.ty(x)?.numel();
            b.reshape(x, &[n])?
        }
    };
    let axis = axis.unwrap_or(0);
    let shape = b.ty(x)?.shape.clone();
    if axis >= shape.len() {
        return Err(IrError::invalid("repeat", format!("axis {axis} is out of range for rank {}", shape.len())));
    }
    // [..., s, ...] -> [..., s, r, ...] -> [..., s r, ...]
    let mut wide = shape.clone();
    wide.insert(axis + 1, repeats);
    let dims: Vec<usize> = (0..shape.len()).map(|k| if k <= axis { k } else { k + 1 }).collect();
    let y = b.broadcast_in_dim(x, &wide, &dims)?;
    let mut out = shape;
    out[axis] *= repeats;
    b.reshape(y, &out)
}

/// Broadcasts to `shape` with NumPy rules (see [`broadcast::broadcast_to`]).
pub fn broadcast_to(b: &mut Builder, x: Value, shape: &[usize]) -> Result<Value, IrError> {
    broadcast::broadcast_to(b, x, shape)
}

/// Resolves a target shape where at most one entry is `-1` (inferred so
/// the element count is preserved, like NumPy).
pub fn infer_shape(op: &str, numel: usize, shape: &[isize]) -> Result<Shape, IrError> {
    let mut infer = None;
    let mut known: usize = 1;
    for (i, &d) in shape.iter().enumerate() {
        if d == -1 {
            if infer.is_some() {
                return Err(IrError::invalid(op, format!("only one dimension can be -1, got {shape:?}")));
            }
            infer = Some(i);
        } else if d < 0 {
            return Err(IrError::invalid(op, format!("invalid dimension {d} in {shape:?}")));
        } else {
            known = known.saturating_mul(d as usize);
        }
    }
    let mut out: Shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    match infer {
        Some(i) => {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(IrError::invalid(
                    op,
                    format!("cannot reshape {numel} elements into {shape:?}: the -1 dimension is not determined"),
                ));
            }
            out[i] = numel / known;
        }
        None if known != numel => {
            return Err(IrError::invalid(op, format!("cannot reshape {numel} elements into shape {shape:?}")));
        }
        None => {}
    }
    Ok(out)
}

/// Reshapes (row-major), with at most one `-1` entry inferred.
pub fn reshape(b: &mut Builder, x: Value, shape: &[isize]) -> Result<Value, IrError> {
    let numel = b.ty(x)?.numel();
    let out = infer_shape("reshape", numel, shape)?;
    reshape_to(b, x, &out)
}

/// The positions `(start, len)` selected by Python's `slice(start, stop,
/// step)` on an axis of size `n` (what `slice.indices(n)` and `range` give):
/// negative bounds count from the end, out-of-range bounds are clamped.
/// `step` must be non-zero. For a negative step the positions run downwards
/// from `start`.
pub fn python_slice(
    n: usize,
    start: Option<isize>,
    stop: Option<isize>,
    step: isize,
) -> Result<(isize, usize), IrError> {
    if step == 0 {
        return Err(IrError::invalid("slice_axis", "step must not be zero"));
    }
    let n = n as isize;
    let norm = |v: isize, lo: isize, hi: isize| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let (start, stop) = if step > 0 {
        (start.map_or(0, |s| norm(s, 0, n)), stop.map_or(n, |s| norm(s, 0, n)))
    } else {
        (start.map_or(n - 1, |s| norm(s, -1, n - 1)), stop.map_or(-1, |s| norm(s, -1, n - 1)))
    };
    let len = if step > 0 {
        if stop > start {
            (stop - start + step - 1) / step
        } else {
            0
        }
    } else if start > stop {
        (start - stop + (-step) - 1) / (-step)
    } else {
        0
    };
    Ok((start, len as usize))
}

/// `x[..., start:stop:step, ...]` on one axis with Python/NumPy semantics:
/// `None` bounds take the defaults, negative bounds count from the end,
/// out-of-range bounds are clamped, and a negative `step` walks backwards
/// (emitted as `reverse` then a strided `slice`).
pub fn slice_axis(
    b: &mut Builder,
    x: Value,
    axis: usize,
    start: Option<isize>,
    stop: Option<isize>,
    step: isize,
) -> Result<Value, IrError> {
    let shape = shape_of(b, x)?;
    if axis >= shape.len() {
        return Err(IrError::invalid("slice_axis", format!("axis {axis} is out of range for rank {}", shape.len())));
    }
    let n = shape[axis];
    let (first, len) = python_slice(n, start, stop, step)?;
    let rank = shape.len();
    let mut lo = vec![0; rank];
    let mut hi = shape.clone();
    let mut stride = vec![1; rank];
    let stride_abs = step.unsigned_abs();
    let src = if step > 0 || len == 0 {
        x
    } else {
        // Position `first - k|step|` of x is position `n-1-first + k|step|` of reverse(x).
        b.reverse(x, &[axis])?
    };
    let begin = if len == 0 {
        0
    } else if step > 0 {
        first as usize
    } else {
        n - 1 - first as usize
    };
    lo[axis] = begin;
    hi[axis] = if len == 0 { 0 } else { begin + (len - 1) * stride_abs + 1 };
    stride[axis] = if len == 0 { 1 } else { stride_abs };
    if lo.iter().all(|&v| v == 0) && hi == shape && stride.iter().all(|&s| s == 1) {
        return Ok(src);
    }
    b.slice(src, &lo, &hi, &stride)
}

/// `np.take(x, indices, axis, mode='clip')`: picks entries of `x` along
/// `axis` at integer `indices` of any shape; the result shape is
/// `x.shape[..axis] + indices.shape + x.shape[axis+1..]`. Out-of-range
/// indices are clamped into `[0, n-1]`, so (as in NumPy's clip mode)
/// negative indices do not wrap around: they clamp to 0. Emitted as one
/// `gather` (clip mode) plus a transpose when `axis > 0`.
pub fn take(b: &mut Builder, x: Value, indices: Value, axis: usize) -> Result<Value, IrError> {
    take_with_mode(b, x, indices, axis, crate::ops::index::IndexMode::Clip)
}

/// [`take`] with the out-of-range rule `mode`: `Clip` clamps each index
/// into the axis, `Fill` reads 0 (`false`) at an out-of-range index.
pub fn take_with_mode(
    b: &mut Builder,
    x: Value,
    indices: Value,
    axis: usize,
    mode: crate::ops::index::IndexMode,
) -> Result<Value, IrError> {
    let xs = shape_of(b, x)?;
    let it = b.ty(indices)?.clone();
    if axis >= xs.len() {
        return Err(IrError::invalid("take", format!("axis {axis} is out of range for rank {}", xs.len())));
    }
    if !it.dtype.is_int() {
        return Err(IrError::invalid("take", format!("indices must be i32 or i64, got {it}")));
    }
    let ni = it.rank();
    let mut idx_shape = it.shape.clone();
    idx_shape.push(1);
    let idx = b.reshape(indices, &idx_shape)?;
    let g = b.gather(x, idx, 0, &[axis], mode)?;
    // g is [I..., x dims before axis..., x dims after axis...].
    let mut perm: Vec<usize> = (ni..ni + axis).collect();
    perm.extend(0..ni);
    perm.extend(ni + axis..ni + xs.len() - 1);
    transpose_to(b, g, &perm)
}

/// `where(cond, a, b)` with NumPy broadcasting of all three; `cond` must be bool.
pub fn where_(b: &mut Builder, cond: Value, on_true: Value, on_false: Value) -> Result<Value, IrError> {
    let ct = b.ty(cond)?;
    if ct.dtype != DType::Bool {
        return Err(IrError::invalid("where", format!("the condition must be bool, got {ct}")));
    }
    broadcast::select(b, cond, on_true, on_false)
}

/// `value` everywhere in a tensor of `shape` and `dtype`.
pub fn full(b: &mut Builder, shape: &[usize], value: f64, dtype: DType) -> Result<Value, IrError> {
    b.full(value, &TensorType::new(dtype, shape.to_vec()))
}

/// Zeros (`false` for bool).
pub fn zeros(b: &mut Builder, shape: &[usize], dtype: DType) -> Result<Value, IrError> {
    full(b, shape, 0.0, dtype)
}

/// Ones (`true` for bool).
pub fn ones(b: &mut Builder, shape: &[usize], dtype: DType) -> Result<Value, IrError> {
    full(b, shape, 1.0, dtype)
}

/// Zeros, ones or `value` with the type of `like`.
pub fn full_like(b: &mut Builder, like: Value, value: f64) -> Result<Value, IrError> {
    let t = b.ty(like)?.clone();
    b.full(value, &t)
}

/// `start, start + step, ...` below `stop` (above it for a negative step),
/// like `np.arange`: the length is `ceil((stop - start) / step)` (0 if
/// negative) and element `i` is `start + i * step`, computed in `dtype`.
/// For integer dtypes `start` and `step` must be integers.
pub fn arange(b: &mut Builder, start: f64, stop: f64, step: f64, dtype: DType) -> Result<Value, IrError> {
    if !(start.is_finite() && stop.is_finite() && step.is_finite()) || step == 0.0 {
        return Err(IrError::invalid(
            "arange",
            format!("need finite start/stop and a finite non-zero step, got start={start}, stop={stop}, step={step}"),
        ));
    }
    if !dtype.is_numeric() {
        return Err(IrError::invalid("arange", format!("expected a numeric dtype, got {dtype}")));
    }
    if dtype.is_integer() && (start.fract() != 0.0 || step.fract() != 0.0) {
        return Err(IrError::invalid(
            "arange",
            format!("integer dtype {dtype} needs integer start and step, got start={start}, step={step}"),
        ));
    }
    let len = ((stop - start) / step).ceil().max(0.0);
    if len > (usize::MAX / 16) as f64 {
        return Err(IrError::invalid("arange", format!("length {len} is too large")));
    }
    let len = len as usize;
    if dtype.is_unsigned() && len > 0 {
        // Every element must be a u32 (no silent wrap); a negative step
        // counts down from `start`.
        let last = start + (len - 1) as f64 * step;
        let range = 0.0..=u32::MAX as f64;
        if !range.contains(&start) || !range.contains(&last) {
            return Err(IrError::invalid(
                "arange",
                format!("{dtype} holds 0 to {}, but the range runs from {start} to {last}", u32::MAX),
            ));
        }
    }
    let down = step < 0.0 && dtype.is_unsigned();
    let i = b.iota(dtype, &[len], 0)?;
    let st = b.scalar(if down { -step } else { step }, dtype)?;
    let s0 = b.scalar(start, dtype)?;
    let y = broadcast::binary(b, Binary::Mul, i, st)?;
    if down {
        return broadcast::binary(b, Binary::Sub, s0, y);
    }
    broadcast::binary(b, Binary::Add, y, s0)
}

/// `num` evenly spaced floats from `start` to `stop` (`np.linspace`): with
/// `endpoint` the last element is exactly `stop` and the spacing is
/// `(stop - start) / (num - 1)`; without it the spacing is
/// `(stop - start) / num`. Element `i` is `start + i * spacing`.
pub fn linspace(
    b: &mut Builder,
    start: f64,
    stop: f64,
    num: usize,
    endpoint: bool,
    dtype: DType,
) -> Result<Value, IrError> {
    if !dtype.is_float() {
        return Err(IrError::invalid("linspace", format!("expected a floating-point dtype, got {dtype}")));
    }
    if !(start.is_finite() && stop.is_finite()) {
        return Err(IrError::invalid("linspace", format!("need finite bounds, got start={start}, stop={stop}")));
    }
    let div = if endpoint { num.saturating_sub(1) } else { num };
    let spacing = if div == 0 { 0.0 } else { (stop - start) / div as f64 };
    let i = b.iota(dtype, &[num], 0)?;
    let sp = b.scalar(spacing, dtype)?;
    let s0 = b.scalar(start, dtype)?;
    let y = broadcast::binary(b, Binary::Mul, i, sp)?;
    let y = broadcast::binary(b, Binary::Add, y, s0)?;
    if endpoint && num > 1 {
        // Pin the last element to `stop` exactly (rounding could miss it).
        let idx = b.iota(DType::I64, &[num], 0)?;
        let last = b.scalar((num - 1) as f64, DType::I64)?;
        let is_last = broadcast::compare(b, crate::ops::binary::Compare::Eq, idx, last)?;
        let stop_v = b.scalar(stop, dtype)?;
        broadcast::select(b, is_last, stop_v, y)
    } else {
        Ok(y)
    }
}
