//! Shape methods on [`Tr`] (reshape, transpose, expand/squeeze, slicing,
//! take) and the multi-input shape functions of [`crate::ops`]. Axes may be
//! negative (counted from the end) and are resolved here before calling
//! `graft_core::composite::shape`.

use crate::trace::{Axes, Tr};
use graft_core::composite::shape;
use graft_core::IrError;

impl Tr {
    /// Reshapes (row-major); one entry may be `-1` and is inferred.
    pub fn reshape(&self, shape: &[isize]) -> Tr {
        self.lift(|b, x| shape::reshape(b, x, shape))
    }
    /// Permutes axes (`perm[i]` is the input axis of output axis `i`);
    /// `None` reverses them.
    pub fn transpose(&self, perm: Option<&[usize]>) -> Tr {
        self.lift(|b, x| shape::transpose(b, x, perm))
    }
    /// Reverses the axes (`x.T`; the matrix transpose for rank 2).
    pub fn t(&self) -> Tr {
        self.transpose(None)
    }
    /// Repeats the whole tensor `reps[k]` times along each axis (`np.tile`).
    pub fn tile(&self, reps: &[usize]) -> Tr {
        self.lift(|b, x| shape::tile(b, x, reps))
    }
    /// Repeats each element `repeats` times along `axis` (`np.repeat`;
    /// `None` flattens first).
    pub fn repeat(&self, repeats: usize, axis: Option<isize>) -> Tr {
        self.lift(|b, x| {
            let axis = match axis {
                Some(a) => Some(Axes::resolve_axis("repeat", a, b.ty(x)?.rank())?),
                None => None,
            };
            shape::repeat(b, x, repeats, axis)
        })
    }
    /// Exchanges two axes.
    pub fn swapaxes(&self, a1: isize, a2: isize) -> Tr {
        self.lift(|b, x| {
            let r = b.ty(x)?.rank();
            let a1 = Axes::resolve_axis("swapaxes", a1, r)?;
            let a2 = Axes::resolve_axis("swapaxes", a2, r)?;
            shape::swapaxes(b, x, a1, a2)
        })
    }
    /// Inserts a size-1 axis at `axis` of the result (`-1` appends).
    pub fn expand_dims(&self, axis: isize) -> Tr {
        self.lift(|b, x| {
            let r = b.ty(x)?.rank();
            let a = Axes::resolve_axis("expand_dims", axis, r + 1)?;
            shape::expand_dims(b, x, &[a])
        })
    }
    /// Removes size-1 axes: `()`/`None` removes all of them; listed axes
    /// must have size 1.
    pub fn squeeze(&self, axes: impl Into<Axes>) -> Tr {
        let axes = axes.into();
        self.lift(|b, x| match &axes {
            Axes::All => shape::squeeze_all(b, x),
            list => {
                let a = list.resolve("squeeze", b.ty(x)?.rank())?;
                shape::squeeze(b, x, &a)
            }
        })
    }
    /// Flattens to 1-D.
    pub fn flatten(&self) -> Tr {
        self.flatten_range(0, -1)
    }
    /// Merges axes `start..=end` into one (`torch.flatten(x, start, end)`).
    pub fn flatten_range(&self, start: isize, end: isize) -> Tr {
        self.lift(|b, x| {
            let r = b.ty(x)?.rank();
            if r == 0 {
                return shape::flatten(b, x, 0, 0);
            }
            let s = Axes::resolve_axis("flatten", start, r)?;
            let e = Axes::resolve_axis("flatten", end, r)?;
            shape::flatten(b, x, s, e)
        })
    }
    /// Broadcasts to `shape` with NumPy rules.
    pub fn broadcast_to(&self, shape: &[usize]) -> Tr {
        self.lift(|b, x| shape::broadcast_to(b, x, shape))
    }
    /// `x[..., start:stop:step, ...]` on one axis with Python semantics
    /// (`None` bounds, negative bounds from the end, clamping, negative steps).
    pub fn slice_axis(&self, axis: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> Tr {
        self.lift(|b, x| {
            let a = Axes::resolve_axis("slice_axis", axis, b.ty(x)?.rank())?;
            shape::slice_axis(b, x, a, start, stop, step)
        })
    }
    /// `np.take(x, indices, axis, mode='clip')` (indices clamp into range).
    pub fn take(&self, indices: &Tr, axis: isize) -> Tr {
        self.lift2(indices, |b, x, i| {
            let a = Axes::resolve_axis("take", axis, b.ty(x)?.rank())?;
            shape::take(b, x, i, a)
        })
    }
}

/// Resolves an axis against the rank of the first tensor (plus `extra`).
fn first_rank_axis(
    b: &graft_core::Builder,
    op: &str,
    v: graft_core::Value,
    axis: isize,
    extra: usize,
) -> Result<usize, graft_core::IrError> {
    Axes::resolve_axis(op, axis, b.ty(v)?.rank() + extra)
}

/// Joins tensors along an existing axis (`np.concatenate`, no broadcasting).
/// An empty list fails the enclosing trace (`trace` returns the error).
pub fn concat(xs: &[&Tr], axis: isize) -> Tr {
    let Some((first, rest)) = xs.split_first() else {
        return crate::trace::fail_without_operand(IrError::invalid("concat", "need at least one tensor"));
    };
    first.lift_with(rest, |b, v| {
        let a = first_rank_axis(b, "concat", v[0], axis, 0)?;
        shape::concat(b, v, a)
    })
}

/// Joins equal-shaped tensors along a new axis (`np.stack`).
/// An empty list fails the enclosing trace (`trace` returns the error).
pub fn stack(xs: &[&Tr], axis: isize) -> Tr {
    let Some((first, rest)) = xs.split_first() else {
        return crate::trace::fail_without_operand(IrError::invalid("stack", "need at least one tensor"));
    };
    first.lift_with(rest, |b, v| {
        let a = first_rank_axis(b, "stack", v[0], axis, 1)?;
        shape::stack(b, v, a)
    })
}

/// `where(cond, a, b)` with NumPy broadcasting (`cond` must be bool).
pub fn where_(cond: &Tr, on_true: &Tr, on_false: &Tr) -> Tr {
    cond.lift_with(&[on_true, on_false], |b, v| shape::where_(b, v[0], v[1], v[2]))
}
