//! Embedding lookup and one-hot encoding.
//!
//! - [`embedding`]: rows of a table at integer ids, over `gather`. Ids out
//!   of range are clamped (`IndexMode::Clip`: negative ids read row 0, ids
//!   `>= V` read row `V - 1`), like `jnp.take(..., mode="clip")`. PyTorch
//!   raises on out-of-range ids at run time; a compiled graph cannot raise,
//!   and clamping (unlike filling with zeros) keeps the result a real row.
//!   Validate ids beforehand when out-of-range ids are a bug.
//! - [`one_hot`]: `iota == ids` converted to the requested dtype, like
//!   `jax.nn.one_hot`: ids outside `[0, n)` (including negatives) give an
//!   all-zero row.

use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Compare;
use crate::ops::index::IndexMode;

fn require_int_ids(b: &Builder, op: &str, ids: Value) -> Result<(), IrError> {
    let t = b.ty(ids)?;
    if !t.dtype.is_int() {
        return Err(IrError::invalid(op, format!("expected integer ids (i32 or i64), got {t}")));
    }
    Ok(())
}

/// `table[ids]`: `table [V, D]`, integer `ids [...]` -> `[..., D]`
/// (PyTorch's `F.embedding(ids, table)`, argument order as in the layer
/// call `embedding(table, ids)`). Out-of-range ids are clamped (see the
/// module docs). The gradient with respect to the table scatter-adds into
/// the looked-up rows (duplicates accumulate).
///
/// `padding_idx`: as in PyTorch, the row at that id is still returned, but
/// no gradient flows to it from the positions that looked it up.
pub fn embedding(b: &mut Builder, table: Value, ids: Value, padding_idx: Option<usize>) -> Result<Value, IrError> {
    let op = "embedding";
    let tt = b.ty(table)?.clone();
    if tt.rank() != 2 {
        return Err(IrError::invalid(op, format!("expected a table of rank 2 ([num_embeddings, dim]), got {tt}")));
    }
    require_int_ids(b, op, ids)?;
    if let Some(p) = padding_idx {
        if p >= tt.shape[0] {
            return Err(IrError::invalid(
                op,
                format!("padding_idx {p} is out of range for a table of {} rows", tt.shape[0]),
            ));
        }
    }
    let it = b.ty(ids)?.clone();
    let mut ishape = it.shape.clone();
    ishape.push(1);
    let idx = b.reshape(ids, &ishape)?;
    let rows = b.gather(table, idx, 0, &[0], IndexMode::Clip)?;
    let Some(p) = padding_idx else {
        return Ok(rows);
    };
    // Stop the gradient at positions whose id is padding_idx.
    let out_shape = b.ty(rows)?.shape.clone();
    let pv = b.scalar(p as f64, it.dtype)?;
    let pv = b.broadcast_in_dim(pv, &it.shape, &[])?;
    let is_pad = b.compare(Compare::Eq, ids, pv)?;
    let dims: Vec<usize> = (0..it.rank()).collect();
    let is_pad = b.broadcast_in_dim(is_pad, &out_shape, &dims)?;
    let stopped = b.stop_gradient(rows)?;
    b.select(is_pad, stopped, rows)
}

/// One-hot encoding of integer `ids [...]` into `n` classes of `dtype`,
/// the new axis inserted at `axis` (`0..=ids.rank()`; `ids.rank()` is the
/// usual trailing axis). `out[..., c, ...] = 1` where `ids[...] == c`, else
/// 0; ids outside `[0, n)` give all zeros (like `jax.nn.one_hot`). A bool
/// `dtype` gives `true`/`false`.
pub fn one_hot(b: &mut Builder, ids: Value, n: usize, dtype: DType, axis: usize) -> Result<Value, IrError> {
    let op = "one_hot";
    require_int_ids(b, op, ids)?;
    let it = b.ty(ids)?.clone();
    if axis > it.rank() {
        return Err(IrError::invalid(
            op,
            format!("axis {axis} is out of range for inserting into ids of rank {} (0..={})", it.rank(), it.rank()),
        ));
    }
    let mut shape = it.shape.clone();
    shape.insert(axis, n);
    let classes = b.iota(it.dtype, &shape, axis)?;
    let dims: Vec<usize> = (0..shape.len()).filter(|&d| d != axis).collect();
    let idb = b.broadcast_in_dim(ids, &shape, &dims)?;
    let hit = b.compare(Compare::Eq, classes, idb)?;
    if dtype == DType::Bool {
        Ok(hit)
    } else {
        b.convert(hit, dtype)
    }
}
