//! Primitives that create tensors from nothing: `iota` (index ramps) and
//! `constant` (a literal tensor embedded in the IR), plus the builder helpers
//! `scalar`, `full`, `zeros`, `ones` written over them.
//!
//! Semantics:
//! - `iota[dtype, shape, axis]`: `out[idx] = idx[axis]`, numeric dtypes only
//!   (bool is rejected). The shape rule rejects an `i32` iota whose largest
//!   index does not fit in `i32`; an `f32` iota longer than 2^24 rounds the
//!   large indices to the nearest representable `f32` (IEEE conversion).
//! - `constant[value]`: the output is a copy of `value`, whose type is the
//!   output type. The printer shows at most 8 elements inline
//!   (`value=[1,2,3]`, `value=[[1,2],[3,4]]`, scalars `value=2.5`) and only the
//!   type beyond that (`value=<f32[1000]>`), so large constants keep IR text short.
//! - `scalar(v, dtype)` converts `v` like [`Tensor::full`] does: `as` casts
//!   (saturating, NaN to 0) for integers, `v != 0` for bool.
//! - `full(v, ty)` is a rank-0 constant broadcast with `broadcast_in_dim`, so
//!   the IR never holds a materialised `ty`-sized constant.

use super::kernel::{output, worth_parallel, CHUNK};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Storage, Tensor};
use crate::types::{fmt_list, TensorType};
use crate::{dispatch_any, dispatch_num};
use rayon::prelude::*;

/// `out[idx] = idx[axis]`, converted to `dtype`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Iota {
    /// Element type of the result (numeric).
    pub dtype: DType,
    /// Shape of the result.
    pub shape: Vec<usize>,
    /// The dimension whose index is written.
    pub axis: usize,
}

/// A literal tensor. Not `Eq`/`Hash`: float payloads have no total equality.
#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    /// The value produced; its type is the output type.
    pub value: Tensor,
}

/// At most this many elements of a constant are printed inline.
const INLINE_MAX: usize = 8;

impl Op for Iota {
    fn name(&self) -> &'static str {
        "iota"
    }

    fn params(&self) -> String {
        format!("dtype={}, shape={}, axis={}", self.dtype, fmt_list(&self.shape), self.axis)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 0)?;
        if !self.dtype.is_numeric() {
            return Err(check::err(self, ins, "expected a numeric dtype (f32, f64, i32 or i64), not bool"));
        }
        let rank = self.shape.len();
        if self.axis >= rank {
            return Err(check::err(self, ins, format!("axis {} is out of range for rank {rank}", self.axis)));
        }
        if self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none() {
            return Err(check::err(self, ins, "expected a shape whose element count fits in usize"));
        }
        if self.dtype == DType::I32 && self.shape[self.axis] > (i32::MAX as usize) + 1 {
            return Err(check::err(self, ins, "expected the iota axis to be at most 2^31 long for i32 indices"));
        }
        Ok(vec![TensorType::new(self.dtype, self.shape.clone())])
    }

    fn kernel(&self, _ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let y = &mut outs[0];
        let (n, inner) = (self.shape[self.axis], self.shape[self.axis + 1..].iter().product::<usize>());
        dispatch_num!(y.dtype(), self.name(), iota_kernel(y, n, inner))
    }
}

/// Writes the first `n * inner` block (each index repeated over a contiguous
/// run of `inner`), then replicates it over the outer dimensions.
fn iota_kernel<T: Element>(y: &mut Tensor, n: usize, inner: usize) -> Result<(), ExecError> {
    let o = output::<T>(y)?;
    let block = n * inner;
    if block == 0 || o.is_empty() {
        return Ok(());
    }
    let (first, rest) = o.split_at_mut(block);
    // Runs of `inner` equal values; tasks take whole runs so index `k` is
    // known from the task number.
    let fill = |k0: usize, blk: &mut [T]| {
        for (k, run) in blk.chunks_exact_mut(inner).enumerate() {
            run.fill(T::from_f64((k0 + k) as f64));
        }
    };
    if worth_parallel(block) {
        let per = CHUNK.div_ceil(inner);
        first.par_chunks_mut(per * inner).enumerate().for_each(|(c, blk)| fill(c * per, blk));
    } else {
        fill(0, first);
    }
    let first: &[T] = first;
    if worth_parallel(rest.len()) {
        rest.par_chunks_mut(block).for_each(|b| b.copy_from_slice(first));
    } else {
        for b in rest.chunks_exact_mut(block) {
            b.copy_from_slice(first);
        }
    }
    Ok(())
}

impl Constant {
    /// The value as printed: inline elements when small, the type otherwise.
    fn fmt_value(&self) -> String {
        let v = &self.value;
        if v.numel() > INLINE_MAX {
            return format!("<{}>", v.ty());
        }
        let elems: Vec<String> = match v.storage() {
            Storage::F16(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::F32(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::F64(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::I32(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::I64(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::U32(d) => d.iter().map(|x| x.to_string()).collect(),
            Storage::Bool(d) => d.iter().map(|x| x.to_string()).collect(),
        };
        if v.rank() == 0 {
            return elems.concat();
        }
        nested(v.shape(), &elems)
    }
}

/// `[a,b]` for rank 1, `[[a,b],[c,d]]` for rank 2, and so on.
fn nested(shape: &[usize], elems: &[String]) -> String {
    match shape {
        [] => elems.concat(),
        [_] => format!("[{}]", elems.join(",")),
        [d, rest @ ..] => {
            let step: usize = rest.iter().product();
            let parts: Vec<String> = (0..*d).map(|i| nested(rest, &elems[i * step..(i + 1) * step])).collect();
            format!("[{}]", parts.join(","))
        }
    }
}

impl Op for Constant {
    fn name(&self) -> &'static str {
        "constant"
    }

    fn params(&self) -> String {
        format!("value={}", self.fmt_value())
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 0)?;
        Ok(vec![self.value.ty()])
    }

    fn kernel(&self, _ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let y = &mut outs[0];
        dispatch_any!(self.value.dtype(), copy_constant(&self.value, y))
    }
}

fn copy_constant<T: Element>(src: &Tensor, y: &mut Tensor) -> Result<(), ExecError> {
    let (s, o) = (src.as_slice::<T>()?, output::<T>(y)?);
    if o.len() != s.len() {
        return Err(ExecError::kernel("constant", "internal error: output buffer size differs from the constant"));
    }
    if worth_parallel(o.len()) {
        o.par_chunks_mut(CHUNK).zip(s.par_chunks(CHUNK)).for_each(|(o, s)| o.copy_from_slice(s));
    } else {
        o.copy_from_slice(s);
    }
    Ok(())
}

/// The dtype of an index ramp over an axis of `n`: i32 unless `n` does not
/// fit one (i32 indices are what a GPU runs and half the bytes of i64).
pub fn index_dtype(n: usize) -> DType {
    if n > i32::MAX as usize {
        DType::I64
    } else {
        DType::I32
    }
}

impl Builder {
    /// `out[idx] = idx[axis]` of the given dtype and shape.
    pub fn iota(&mut self, dtype: DType, shape: &[usize], axis: usize) -> Result<Value, IrError> {
        self.emit1(Iota { dtype, shape: shape.to_vec(), axis }, &[])
    }

    /// Embeds a literal tensor.
    pub fn constant(&mut self, t: Tensor) -> Result<Value, IrError> {
        self.emit1(Constant { value: t }, &[])
    }

    /// A rank-0 constant of `dtype` (converted like [`Tensor::full`]).
    pub fn scalar(&mut self, value: f64, dtype: DType) -> Result<Value, IrError> {
        self.constant(Tensor::full(&TensorType::scalar(dtype), value))
    }

    /// `value` everywhere in `ty`: a rank-0 constant broadcast to the shape.
    pub fn full(&mut self, value: f64, ty: &TensorType) -> Result<Value, IrError> {
        let s = self.scalar(value, ty.dtype)?;
        if ty.rank() == 0 {
            return Ok(s);
        }
        self.broadcast_in_dim(s, &ty.shape, &[])
    }

    /// Zeros of `ty` (`false` for bool).
    pub fn zeros(&mut self, ty: &TensorType) -> Result<Value, IrError> {
        self.full(0.0, ty)
    }

    /// Ones of `ty` (`true` for bool).
    pub fn ones(&mut self, ty: &TensorType) -> Result<Value, IrError> {
        self.full(1.0, ty)
    }
}

// Creation ops have no operands: nothing to differentiate or transpose.
impl crate::ad::Diff for Iota {
    fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(vec![None])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(Vec::new())
    }
}

impl crate::ad::Diff for Constant {
    fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(vec![None])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(Vec::new())
    }
}

// Batching rules: no operands, so nothing is ever batched; the results are
// shared by every example (the driver copies such equations itself).
impl crate::batch::Batch for Iota {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        Ok(b.emit(self.clone(), cx.args)?.into_iter().map(|o| (o, None)).collect())
    }
}

impl crate::batch::Batch for Constant {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        Ok(b.emit(self.clone(), cx.args)?.into_iter().map(|o| (o, None)).collect())
    }
}
