//! `f16` as a storage type: every primitive that computes on f16 computes in
//! f32 and rounds each result to f16.
//!
//! [`widen_f16`] re-emits every equation with an f16 operand or result
//! (other than `convert` itself, and the equations that hold bodies) at f32
//! types: its f16 operands converted to f32, the primitive applied at f32
//! (rebuilt through the builder, so the shape and dtype rules run again; a
//! dtype-naming parameter, `iota`'s, `random_uniform`'s or a constant's
//! value, switched to f32), and each f16 result converted back to f16. This
//! is what NumPy's float16 ufuncs and XLA's CPU backend do. For `+ - * /`
//! and `sqrt` the result is then the correctly rounded f16 result (f32 has
//! more than 2 * 11 + 2 significand bits); reductions and dot products
//! accumulate in f32 and round once, at the end.
//!
//! Equations with bodies (`scan`, `while`, `cond`, custom rules, ...) are
//! kept as they are, with their f16 operands and results: the executor plans
//! every body as its own `Executable`, and `Executable::plan_verified` runs
//! this pass on every function it plans, so a body keeps its f16 signature
//! and widens inside.
//!
//! Invariant: afterwards no equation but `convert` and the body-holding
//! ones has an f16 operand or result, so no primitive kernel but `convert`
//! (and the executor's own copies) sees f16 storage. Each f16 value is
//! widened once (its f32 twin is shared by all readers); an f16 constant
//! becomes an f32 constant holding the same (exactly representable) values.

use super::rebuild;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Eqn, Func, Value};
use crate::ops::create::{Constant, Iota};
use crate::ops::random::RandomUniform;
use crate::ops::{display_prim, Op, Prim};
use std::collections::HashMap;

/// Whether `e` computes on f16 and must be widened: an f16 operand or
/// result, not a `convert`, no body.
fn computes_on_f16(f: &Func, e: &Eqn) -> bool {
    !matches!(e.prim, Prim::Convert(_))
        && e.inputs.iter().chain(&e.outputs).any(|&v| f.ty(v).dtype == DType::F16)
        && e.prim.subfuncs().is_empty()
}

/// The primitive at f32 where it names f16 as a parameter.
fn at_f32(p: &Prim) -> Prim {
    match p {
        Prim::Iota(i) if i.dtype == DType::F16 => Prim::Iota(Iota { dtype: DType::F32, ..i.clone() }),
        Prim::RandomUniform(r) if r.dtype == DType::F16 => {
            Prim::RandomUniform(RandomUniform { dtype: DType::F32, ..r.clone() })
        }
        // f16 -> f32 is exact: the f32 constant holds the same values.
        Prim::Constant(c) if c.value.dtype() == DType::F16 => {
            Prim::Constant(Constant { value: c.value.cast(DType::F32) })
        }
        p => p.clone(),
    }
}

/// `f` with every equation that computes on f16 computing in f32 and
/// rounding its f16 results (see the module docs), or `None` when it has
/// none.
pub fn widen_f16(f: &Func) -> Result<Option<Func>, IrError> {
    if !f.eqns.iter().any(|e| computes_on_f16(f, e)) {
        return Ok(None);
    }
    // New f16 values -> their f32 twins (exactly their values).
    let mut wide: HashMap<Value, Value> = HashMap::new();
    let g = rebuild(f, |b, e, ins| {
        if !computes_on_f16(f, e) {
            let outs = b.emit(e.prim.clone(), ins)?;
            // A widening `convert` the program wrote itself is shared too.
            if let (Prim::Convert(c), [x], [y]) = (&e.prim, ins, outs.as_slice()) {
                if c.dtype == DType::F32 && b.ty(*x)?.dtype == DType::F16 {
                    wide.entry(*x).or_insert(*y);
                }
            }
            return Ok(outs);
        }
        let mut wide_ins = Vec::with_capacity(ins.len());
        for &x in ins {
            if b.ty(x)?.dtype != DType::F16 {
                wide_ins.push(x);
            } else if let Some(&w) = wide.get(&x) {
                wide_ins.push(w);
            } else {
                let w = b.convert(x, DType::F32)?;
                wide.insert(x, w);
                wide_ins.push(w);
            }
        }
        let prim = at_f32(&e.prim);
        let mut outs = b.emit(prim.clone(), &wide_ins)?;
        if let (Prim::RandomUniform(_), [u]) = (&e.prim, outs.as_mut_slice()) {
            *u = f16_grid(b, *u)?;
        }
        let mut narrow = Vec::with_capacity(outs.len());
        for (&o, &y) in e.outputs.iter().zip(&outs) {
            let want = f.ty(o);
            let got = b.ty(y)?.clone();
            if want.dtype != DType::F16 {
                if &got != want {
                    return Err(mismatch(&prim, want, &got));
                }
                narrow.push(y);
                continue;
            }
            if got != want.with_dtype(DType::F32) {
                return Err(mismatch(&prim, want, &got));
            }
            let n = b.convert(y, DType::F16)?;
            if matches!(prim, Prim::Constant(_)) {
                wide.insert(n, y);
            }
            narrow.push(n);
        }
        Ok(narrow)
    })?;
    // An f16 constant read only through its f32 twin leaves its rounding
    // `convert` unread: dropped, so no backend runs (or launches) it.
    Ok(Some(super::dce(&g)))
}

/// An f32 uniform `u` in `[0, 1)` (multiples of 2^-23) truncated to a
/// multiple of 2^-10: `floor(u * 1024) / 1024`, every step exact. Rounding
/// `u` to the nearest f16 instead would give 1.0 for `u >= 1 - 2^-12`,
/// outside `[0, 1)`; this keeps the top 10 bits, so an f16 uniform takes
/// the 1 024 values `k / 1024` with equal probability (JAX's f16 uniform
/// has the same resolution), each exact in f16.
fn f16_grid(b: &mut crate::ir::Builder, u: Value) -> Result<Value, IrError> {
    let ty = b.ty(u)?.clone();
    let scale = b.full(1024.0, &ty)?;
    let inv = b.full(1.0 / 1024.0, &ty)?;
    let k = b.mul(u, scale)?;
    let k = b.floor(k)?;
    b.mul(k, inv)
}

fn mismatch(prim: &Prim, want: &crate::types::TensorType, got: &crate::types::TensorType) -> IrError {
    IrError::invalid(
        "widen_f16",
        format!("{} at f32 gives {got} where {want} (widened) was expected", display_prim(prim)),
    )
}
