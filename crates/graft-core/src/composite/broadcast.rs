//! NumPy broadcasting, made explicit: primitives require identical operand
//! shapes, so every user-facing binary op goes through here and gets
//! `broadcast_in_dim` equations inserted. Rules (NumPy's): shapes are
//! right-aligned; each pair of dims must be equal or one of them 1.
//! Dtypes must match (no implicit promotion); scalars written as numbers in
//! the API adopt the other operand's dtype via [`scalar_like`].

use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};
use crate::types::Shape;

/// The broadcast shape of two shapes, or an error naming both.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Shape, IrError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(IrError::invalid(
                    op,
                    format!("shapes {a:?} and {b:?} cannot be broadcast together (dimension {i}: {da} vs {db})"),
                ))
            }
        };
    }
    Ok(out)
}

/// Broadcasts `x` to `shape` with NumPy rules (a no-op when already equal).
pub fn broadcast_to(b: &mut Builder, x: Value, shape: &[usize]) -> Result<Value, IrError> {
    let xs = b.ty(x)?.shape.clone();
    if xs.as_slice() == shape {
        return Ok(x);
    }
    let target = broadcast_shapes("broadcast_to", &xs, shape)?;
    if target.as_slice() != shape {
        return Err(IrError::invalid("broadcast_to", format!("cannot broadcast shape {xs:?} to {shape:?}")));
    }
    let offset = shape.len() - xs.len();
    let dims: Vec<usize> = (offset..shape.len()).collect();
    b.broadcast_in_dim(x, shape, &dims)
}

/// Broadcasts two operands to their common shape.
pub fn broadcast_pair(b: &mut Builder, op: &str, x: Value, y: Value) -> Result<(Value, Value), IrError> {
    let (xs, ys) = (b.ty(x)?.shape.clone(), b.ty(y)?.shape.clone());
    if xs == ys {
        return Ok((x, y));
    }
    let shape = broadcast_shapes(op, &xs, &ys)?;
    Ok((broadcast_to(b, x, &shape)?, broadcast_to(b, y, &shape)?))
}

/// A rank-0 constant with the dtype of `like`.
pub fn scalar_like(b: &mut Builder, value: f64, like: Value) -> Result<Value, IrError> {
    let dtype: DType = b.ty(like)?.dtype;
    b.scalar(value, dtype)
}

/// `x op y` with NumPy broadcasting.
pub fn binary(b: &mut Builder, op: Binary, x: Value, y: Value) -> Result<Value, IrError> {
    let name = crate::ops::Op::name(&op);
    let (x, y) = broadcast_pair(b, name, x, y)?;
    b.binary(op, x, y)
}

/// `x cmp y` with NumPy broadcasting (bool result).
pub fn compare(b: &mut Builder, op: Compare, x: Value, y: Value) -> Result<Value, IrError> {
    let name = crate::ops::Op::name(&op);
    let (x, y) = broadcast_pair(b, name, x, y)?;
    b.compare(op, x, y)
}

/// `where(pred, a, b)` with all three operands broadcast together.
pub fn select(b: &mut Builder, pred: Value, on_true: Value, on_false: Value) -> Result<Value, IrError> {
    let (ps, ts, fs) = (b.ty(pred)?.shape.clone(), b.ty(on_true)?.shape.clone(), b.ty(on_false)?.shape.clone());
    let shape = broadcast_shapes("where", &broadcast_shapes("where", &ps, &ts)?, &fs)?;
    let pred = broadcast_to(b, pred, &shape)?;
    let on_true = broadcast_to(b, on_true, &shape)?;
    let on_false = broadcast_to(b, on_false, &shape)?;
    b.select(pred, on_true, on_false)
}

/// `fma(x, y, z)` (`x y + z` rounded once) with all three operands
/// broadcast together. They must share a float dtype.
pub fn fma(b: &mut Builder, x: Value, y: Value, z: Value) -> Result<Value, IrError> {
    let (xs, ys, zs) = (b.ty(x)?.shape.clone(), b.ty(y)?.shape.clone(), b.ty(z)?.shape.clone());
    let shape = broadcast_shapes("fma", &broadcast_shapes("fma", &xs, &ys)?, &zs)?;
    let x = broadcast_to(b, x, &shape)?;
    let y = broadcast_to(b, y, &shape)?;
    let z = broadcast_to(b, z, &shape)?;
    b.fma(x, y, z)
}
