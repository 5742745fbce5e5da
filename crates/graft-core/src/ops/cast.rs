//! Dtype conversion (`convert`) and the gradient barrier (`stop_gradient`).
//!
//! `convert[dtype=D]` takes any dtype to any dtype, keeping the shape. The
//! conversions are Rust's `as` casts, which match C/NumPy/XLA except where
//! those are undefined:
//! - float -> int truncates toward zero and **saturates** at the integer's
//!   range (`1e10 -> i32::MAX`, `-inf -> i32::MIN`); **NaN -> 0**.
//!   For `u32` the range is `[0, 2^32 - 1]`: negative floats give 0.
//! - int -> int narrowing (`i64 -> i32`, `i64 -> u32`) and `i32 <-> u32`
//!   keep the low bits (wrap, like NumPy's `astype` and XLA's `convert`);
//!   widening sign-extends a signed source and zero-extends `u32`.
//! - int -> float and `f64 -> f32` round to nearest even; `f64 -> f32` overflows
//!   to `±inf`, NaN stays NaN.
//! - `f16` (a storage type, see `opt::widen_f16`) converts like the other
//!   floats: `f64 -> f16`, `f32 -> f16` and int -> f16 round once to nearest
//!   even (`dtype::f16_from_f64`, directly, not through f32: no double
//!   rounding; i64 goes through f64, exact below 2^53, and everything above
//!   65 519 overflows anyway),
//!   overflow to `±inf`, NaN stays NaN; `f16 -> f32`/`f64` is exact;
//!   `f16 -> int` is `f16 -> f32 -> int` (exact, then saturating, NaN -> 0);
//!   `u32 -> f16` rounds once like i32.
//! - bool -> number gives 0 or 1; number -> bool is `x != 0`, so NaN -> true
//!   and `-0.0 -> false` (NumPy's `bool(x)`).
//! - Converting to the operand's own dtype is a copy.
//!
//! `stop_gradient` is the identity at run time (a copy, any dtype); the
//! autodiff pass gives it a zero derivative, which is why it is a primitive
//! and not simply elided.

use super::kernel::{check_block, for_blocks, zip1, BlockElem, BlockMut, BlockRef};
use super::{check, Op};
use crate::dispatch_any;
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// Converts elements to another dtype (see the module docs for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Convert {
    /// The result dtype.
    pub dtype: DType,
}

/// One element conversion, `S -> D`. Implemented for every pair of element
/// types so the kernel's double dispatch is exhaustive at compile time.
trait CastTo<D>: Copy {
    fn cast_to(self) -> D;
}

macro_rules! cast_from_number {
    ($($s:ty),*) => {$(
        impl CastTo<f32> for $s {
            #[inline(always)]
            fn cast_to(self) -> f32 { self as f32 }
        }
        impl CastTo<f64> for $s {
            #[inline(always)]
            fn cast_to(self) -> f64 { self as f64 }
        }
        impl CastTo<i32> for $s {
            #[inline(always)]
            fn cast_to(self) -> i32 { self as i32 }
        }
        impl CastTo<i64> for $s {
            #[inline(always)]
            fn cast_to(self) -> i64 { self as i64 }
        }
        impl CastTo<u32> for $s {
            #[inline(always)]
            fn cast_to(self) -> u32 { self as u32 }
        }
        impl CastTo<bool> for $s {
            #[inline(always)]
            fn cast_to(self) -> bool { self != (0 as $s) }
        }
    )*};
}

cast_from_number!(f32, f64, i32, i64, u32);

use half::f16;

// To f16: one rounding to nearest even of the exact value, by
// `dtype::f16_from_f64` (f32 and i32 are exact in f64; i64 rounds to f64
// only above 2^53, where f16 has overflowed to inf anyway). Not `half`'s
// conversions: its `from_f64` rounds twice on F16C CPUs (see
// `f16_from_f64`), and one routine gives the same bits on every CPU.
impl CastTo<f16> for f32 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        crate::dtype::f16_from_f64(self as f64)
    }
}
impl CastTo<f16> for f64 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        crate::dtype::f16_from_f64(self)
    }
}
impl CastTo<f16> for i32 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        crate::dtype::f16_from_f64(self as f64)
    }
}
impl CastTo<f16> for i64 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        crate::dtype::f16_from_f64(self as f64)
    }
}
impl CastTo<f16> for u32 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        crate::dtype::f16_from_f64(self as f64)
    }
}
impl CastTo<f16> for bool {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        if self {
            f16::ONE
        } else {
            f16::ZERO
        }
    }
}

// From f16: exact to f32, then as from f32.
impl CastTo<f16> for f16 {
    #[inline(always)]
    fn cast_to(self) -> f16 {
        self
    }
}
impl CastTo<f32> for f16 {
    #[inline(always)]
    fn cast_to(self) -> f32 {
        self.to_f32()
    }
}
impl CastTo<f64> for f16 {
    #[inline(always)]
    fn cast_to(self) -> f64 {
        self.to_f64()
    }
}
impl CastTo<i32> for f16 {
    #[inline(always)]
    fn cast_to(self) -> i32 {
        self.to_f32() as i32
    }
}
impl CastTo<i64> for f16 {
    #[inline(always)]
    fn cast_to(self) -> i64 {
        self.to_f32() as i64
    }
}
impl CastTo<u32> for f16 {
    #[inline(always)]
    fn cast_to(self) -> u32 {
        self.to_f32() as u32
    }
}
impl CastTo<bool> for f16 {
    #[inline(always)]
    fn cast_to(self) -> bool {
        self.to_f32() != 0.0
    }
}

impl CastTo<f32> for bool {
    #[inline(always)]
    fn cast_to(self) -> f32 {
        u8::from(self) as f32
    }
}
impl CastTo<f64> for bool {
    #[inline(always)]
    fn cast_to(self) -> f64 {
        u8::from(self) as f64
    }
}
impl CastTo<i32> for bool {
    #[inline(always)]
    fn cast_to(self) -> i32 {
        i32::from(self)
    }
}
impl CastTo<i64> for bool {
    #[inline(always)]
    fn cast_to(self) -> i64 {
        i64::from(self)
    }
}
impl CastTo<u32> for bool {
    #[inline(always)]
    fn cast_to(self) -> u32 {
        u32::from(self)
    }
}
impl CastTo<bool> for bool {
    #[inline(always)]
    fn cast_to(self) -> bool {
        self
    }
}

/// An element type convertible to every element type.
trait CastAll:
    BlockElem + CastTo<f16> + CastTo<f32> + CastTo<f64> + CastTo<i32> + CastTo<i64> + CastTo<u32> + CastTo<bool>
{
}
impl<
        T: BlockElem + CastTo<f16> + CastTo<f32> + CastTo<f64> + CastTo<i32> + CastTo<i64> + CastTo<u32> + CastTo<bool>,
    > CastAll for T
{
}

/// Converts a block whose source type is known, dispatching on the target
/// type once per block.
fn convert_from<S: CastAll>(x: BlockRef<'_>, y: BlockMut<'_>) -> Result<(), ExecError> {
    let a = x.typed::<S>("convert")?;
    match y {
        BlockMut::F16(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::F32(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::F64(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::I32(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::I64(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::U32(o) => zip1(a, o, |v| v.cast_to()),
        BlockMut::Bool(o) => zip1(a, o, |v| v.cast_to()),
    }
    Ok(())
}

impl Convert {
    /// Converts one block (the kernel and the executor's fused groups both
    /// call it); the dtype dispatch happens once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 1, &out)?;
        if out.dtype() != self.dtype {
            return Err(ExecError::kernel(
                self.name(),
                format!("expected a {} result, got {}", self.dtype, out.dtype()),
            ));
        }
        let x = ins[0];
        dispatch_any!(x.dtype(), convert_from(x, out))
    }
}

impl Op for Convert {
    fn name(&self) -> &'static str {
        "convert"
    }

    fn params(&self) -> String {
        format!("dtype={}", self.dtype)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        Ok(vec![ins[0].with_dtype(self.dtype)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

/// Identity at run time; blocks gradients in autodiff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StopGradient;

fn copy_block<T: BlockElem>(x: BlockRef<'_>, y: BlockMut<'_>) -> Result<(), ExecError> {
    y.typed::<T>("stop_gradient")?.copy_from_slice(x.typed::<T>("stop_gradient")?);
    Ok(())
}

impl StopGradient {
    /// Copies one block (the kernel and the executor's fused groups both call it).
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 1, &out)?;
        let x = ins[0];
        dispatch_any!(x.dtype(), copy_block(x, out))
    }
}

impl Op for StopGradient {
    fn name(&self) -> &'static str {
        "stop_gradient"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

impl Builder {
    /// Converts `x` to `dtype` (see [`Convert`] for the rounding and saturation rules).
    pub fn convert(&mut self, x: Value, dtype: DType) -> Result<Value, IrError> {
        self.emit1(Convert { dtype }, &[x])
    }

    /// The identity, with a zero derivative under autodiff.
    pub fn stop_gradient(&mut self, x: Value) -> Result<Value, IrError> {
        self.emit1(StopGradient, &[x])
    }
}

impl crate::ad::Diff for Convert {
    // Float-to-float conversion is linear; conversions to int/bool are
    // piecewise constant (no tangent).
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        if !self.dtype.is_float() {
            return Ok(vec![None]);
        }
        Ok(vec![cx.tangents[0].map(|t| b.convert(t, self.dtype)).transpose()?])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let back = cx.in_types[0].dtype;
        Ok(vec![cx.cts[0].map(|ct| b.convert(ct, back)).transpose()?])
    }
}

impl crate::ad::Diff for StopGradient {
    // Zero derivative in every mode.
    fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(vec![None])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Ok(vec![None])
    }
}

// Batching rules: elementwise.
impl crate::batch::Batch for Convert {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        crate::batch::helpers::elementwise(b, *self, cx)
    }
}

impl crate::batch::Batch for StopGradient {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        crate::batch::helpers::elementwise(b, *self, cx)
    }
}
