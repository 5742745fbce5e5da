//! Sorting along one axis: `sort` and `argsort` (stable, NaNs last, as
//! NumPy), on top of the [`crate::ops::sort::Argsort`] primitive.
//!
//! `sort` gathers `x` at its own sorting permutation, so its derivative is
//! the gather's: each element's tangent travels with the element, and the
//! cotangent of the sorted values is scattered back to where they came from.

use super::shape::transpose_to;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::index::IndexMode;

use crate::ops::create::index_dtype;

/// The stable ascending sorting permutation of `x` along `axis` (i32, or
/// i64 for an axis longer than `i32::MAX`), like `np.argsort(x, axis, kind="stable")`.
pub fn argsort(b: &mut Builder, x: Value, axis: usize) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let n = t.shape.get(axis).copied().unwrap_or(0);
    b.argsort(x, axis, index_dtype(n))
}

/// `x` sorted ascending along `axis` (stable; NaNs last), like `np.sort`.
pub fn sort(b: &mut Builder, x: Value, axis: usize) -> Result<Value, IrError> {
    let rank = b.ty(x)?.rank();
    if axis >= rank {
        return Err(IrError::invalid("sort", format!("axis {axis} is out of range for rank {rank}")));
    }
    // Sort the last axis: move `axis` there and back.
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != axis).collect();
    perm.push(axis);
    let xt = transpose_to(b, x, &perm)?;
    let shape = b.ty(xt)?.shape.clone();
    let p = argsort(b, xt, rank - 1)?;
    let mut idx_shape = shape.clone();
    idx_shape.push(1);
    let idx = b.reshape(p, &idx_shape)?;
    let sorted = b.gather(xt, idx, rank - 1, &[rank - 1], IndexMode::Clip)?;
    let mut inv = vec![0; rank];
    for (i, &d) in perm.iter().enumerate() {
        inv[d] = i;
    }
    transpose_to(b, sorted, &inv)
}
