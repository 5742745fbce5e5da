//! Building blocks that keep batching rules to a few lines (JAX's
//! vocabulary): moving the batch dim, materializing an unbatched value,
//! the generic elementwise rule, and axis adjustment for axis-taking ops.

use super::{BatchCx, Batched};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::Prim;

/// Moves axis `from` of `x` to position `to` (a transpose; nothing when equal).
pub fn move_bdim(b: &mut Builder, x: Value, from: usize, to: usize) -> Result<Value, IrError> {
    if from == to {
        return Ok(x);
    }
    let rank = b.ty(x)?.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != from).collect();
    perm.insert(to, from);
    b.transpose(x, &perm)
}

/// Broadcasts an unbatched `x` to carry a batch dim of `size` at `bdim`.
pub fn materialize(b: &mut Builder, x: Value, bdim: usize, size: usize) -> Result<Value, IrError> {
    let shape = b.ty(x)?.shape.clone();
    let mut out = shape.clone();
    out.insert(bdim, size);
    let dims: Vec<usize> = (0..shape.len()).map(|d| d + usize::from(d >= bdim)).collect();
    b.broadcast_in_dim(x, &out, &dims)
}

/// `x` with its batch dim at the front, materializing it if unbatched.
pub fn bdim_to_front(b: &mut Builder, x: Value, bdim: Option<usize>, size: usize) -> Result<Value, IrError> {
    match bdim {
        Some(d) => move_bdim(b, x, d, 0),
        None => materialize(b, x, 0, size),
    }
}

/// `x` with its batch dim at `to`, materializing it if unbatched.
pub fn bdim_to(b: &mut Builder, x: Value, bdim: Option<usize>, to: usize, size: usize) -> Result<Value, IrError> {
    match bdim {
        Some(d) => move_bdim(b, x, d, to),
        None => materialize(b, x, to, size),
    }
}

/// Every operand with its batch dim at the front (unbatched ones broadcast).
pub fn all_to_front(b: &mut Builder, cx: &BatchCx<'_>) -> Result<Vec<Value>, IrError> {
    cx.args.iter().zip(cx.bdims).map(|(&x, &d)| bdim_to_front(b, x, d, cx.size)).collect()
}

/// The rule of an elementwise primitive (identical operand shapes): when all
/// batched operands agree on the bdim, apply there, broadcasting unbatched
/// operands to that layout (so a `[V, B, ..]` value stays as it is instead
/// of being transposed); otherwise bring every operand's bdim to the front.
/// Results share the bdim.
pub fn elementwise(b: &mut Builder, prim: impl Into<Prim>, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
    let prim = prim.into();
    let first = cx.bdims.iter().flatten().next().copied();
    let (args, bdim) = match first {
        Some(d) if cx.bdims.iter().all(|&e| e.is_none() || e == Some(d)) => {
            let args = cx
                .args
                .iter()
                .zip(cx.bdims)
                .map(|(&x, &e)| if e.is_some() { Ok(x) } else { materialize(b, x, d, cx.size) })
                .collect::<Result<Vec<_>, _>>()?;
            (args, d)
        }
        _ => (all_to_front(b, cx)?, 0),
    };
    let outs = b.emit(prim, &args)?;
    Ok(outs.into_iter().map(|o| (o, Some(bdim))).collect())
}

/// Applies a primitive to operands whose batch dims are known to be at `bdim`
/// (or unbatched where the primitive allows it), all results batched at `bdim`.
pub fn emit_at(b: &mut Builder, prim: impl Into<Prim>, args: &[Value], bdim: usize) -> Result<Batched, IrError> {
    Ok(b.emit(prim, args)?.into_iter().map(|o| (o, Some(bdim))).collect())
}

/// The physical axis of per-example axis `a` in a value batched at `bdim`.
pub fn phys_axis(a: usize, bdim: usize) -> usize {
    a + usize::from(a >= bdim)
}

/// Physical axes of per-example `axes` in a value batched at `bdim`.
pub fn phys_axes(axes: &[usize], bdim: usize) -> Vec<usize> {
    axes.iter().map(|&a| phys_axis(a, bdim)).collect()
}

/// Where the batch dim lands after the per-example `removed` axes of a value
/// batched at `bdim` are dropped (a reduction keeps the other dims in order).
pub fn bdim_after_removing(removed: &[usize], bdim: usize) -> usize {
    bdim - removed.iter().filter(|&&a| phys_axis(a, bdim) < bdim).count()
}

/// A shape with the batch size inserted at `bdim`.
pub fn batched_shape(shape: &[usize], bdim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.insert(bdim, size);
    s
}
