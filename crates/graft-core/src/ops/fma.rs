//! `fma(a, b, c)`: the fused multiply-add `a * b + c`, rounded once.
//!
//! Floats only (f32, f64), three operands of identical shape and dtype
//! (broadcasting is explicit). The result is the exact `a * b + c` rounded
//! to the dtype once (IEEE 754 `fusedMultiplyAdd`, Rust's `mul_add`, C's
//! `fma`), so it can differ from `add(mul(a, b), c)` in the last bit, and
//! every backend gives the same bits: the interpreter calls `mul_add`, the
//! native backend a `vfmadd` instruction or `__builtin_fma`, WGSL `fma`.
//!
//! Why a primitive rather than a composite: graft never contracts `a * b + c`
//! on its own (bitwise agreement between backends forbids it), so a program
//! that must match a computation that does contract, such as XLA's
//! `jax.random.uniform` on `[lo, hi)` (`u (hi - lo) + lo` is one FMA on
//! CPU), says so with this primitive.
//!
//! Derivatives: `d fma = a_dot b + a b_dot + c_dot`, built from `mul` and
//! `add`, so tangents never contain `fma` and the linear part transposes by
//! their rules. `fma` itself transposes where it is linear: in `c`, and in
//! one of `a`, `b` when the other is a primal.

use super::kernel::{check_block, for_blocks, simd, zip3, BlockMut, BlockRef, Real};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// `out[i] = a[i] * b[i] + c[i]`, rounded once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fma;

impl Fma {
    /// The operation on one f64 triple, as the kernel computes it: what
    /// front ends fold constants with.
    pub fn eval_f64(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }

    /// Evaluates `fma` on one block (the kernel and fused groups both call
    /// it). Dispatches on the dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 3, &out)?;
        simd(FmaBlock { a: ins[0], b: ins[1], c: ins[2], out })
    }
}

/// One `fma` block, run by [`simd`] at the CPU's best level (where the
/// level has an FMA instruction, `mul_add` compiles to it).
struct FmaBlock<'a> {
    a: BlockRef<'a>,
    b: BlockRef<'a>,
    c: BlockRef<'a>,
    out: BlockMut<'a>,
}

#[inline(always)]
fn fma_block<T: Real>(a: BlockRef<'_>, b: BlockRef<'_>, c: BlockRef<'_>, z: BlockMut<'_>) -> Result<(), ExecError> {
    let name = "fma";
    let (a, b, c, o) = (a.typed::<T>(name)?, b.typed::<T>(name)?, c.typed::<T>(name)?, z.typed::<T>(name)?);
    zip3(a, b, c, o, |a, b, c| a.mul_add(b, c));
    Ok(())
}

impl pulp::WithSimd for FmaBlock<'_> {
    type Output = Result<(), ExecError>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let FmaBlock { a, b, c, out } = self;
        match a.dtype() {
            DType::F32 => fma_block::<f32>(a, b, c, out),
            DType::F64 => fma_block::<f64>(a, b, c, out),
            d => Err(super::kernel::unsupported("fma", d)),
        }
    }
}

impl Op for Fma {
    fn name(&self) -> &'static str {
        "fma"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 3)?;
        check::same_types(self, ins)?;
        check::float(self, ins, &ins[0])?;
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

impl Builder {
    /// `a * b + c` rounded once (operands of identical float type).
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Result<Value, IrError> {
        self.emit1(Fma, &[a, b, c])
    }
}

impl crate::ad::Diff for Fma {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        use crate::ad::helpers::{add_opt, scale_opt};
        let (x, y) = (cx.primals[0], cx.primals[1]);
        let ab = scale_opt(b, cx.tangents[0], y)?;
        let ba = scale_opt(b, cx.tangents[1], x)?;
        let t = add_opt(b, ab, ba)?;
        Ok(vec![add_opt(b, t, cx.tangents[2])?])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (la, lb, lc) = (cx.is_linear(0), cx.is_linear(1), cx.is_linear(2));
        if la && lb {
            return Err(crate::ad::not_linear("fma"));
        }
        let Some(ct) = cx.cts[0] else { return Ok(vec![None, None, None]) };
        let a = if la { Some(b.mul(ct, cx.primal("fma", 1)?)?) } else { None };
        let bb = if lb { Some(b.mul(cx.primal("fma", 0)?, ct)?) } else { None };
        Ok(vec![a, bb, if lc { Some(ct) } else { None }])
    }
}

impl crate::batch::Batch for Fma {
    // Elementwise over identical operand shapes: batched operands are
    // aligned and unbatched ones broadcast.
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        crate::batch::helpers::elementwise(b, *self, cx)
    }
}
