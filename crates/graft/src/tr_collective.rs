//! Collectives over a named axis on traced values (JAX's `lax.psum` and
//! friends); the primitives and their rules live in
//! `graft_core::ops::collective`.
//!
//! A function using them is written for one rank of the axis. It runs
//! either under [`crate::Jit::vmap_named`] with the same name (the ranks
//! are the batch) or with a communicator bound to the name
//! ([`graft_core::comm`]: a thread group, or the MPI world of `graft-mpi`).

use crate::trace::Tr;
use graft_core::ops::collective::{Axis, Kind};

fn emit(x: &Tr, kind: Kind, axis: &Axis) -> Tr {
    x.lift(|b, v| b.collective(kind, axis, Some(v)))
}

/// The sum of `x` over the ranks of `axis`.
pub fn psum(x: &Tr, axis: &Axis) -> Tr {
    emit(x, Kind::Psum, axis)
}

/// The mean of `x` over the ranks of `axis` (floats).
pub fn pmean(x: &Tr, axis: &Axis) -> Tr {
    emit(x, Kind::Pmean, axis)
}

/// The elementwise maximum of `x` over the ranks of `axis`.
pub fn pmax(x: &Tr, axis: &Axis) -> Tr {
    emit(x, Kind::Pmax, axis)
}

/// The elementwise minimum of `x` over the ranks of `axis`.
pub fn pmin(x: &Tr, axis: &Axis) -> Tr {
    emit(x, Kind::Pmin, axis)
}

/// Every rank's `x` stacked along a new axis at `dim`, in rank order.
pub fn all_gather(x: &Tr, axis: &Axis, dim: usize) -> Tr {
    emit(x, Kind::AllGather { dim }, axis)
}

/// The sum over the ranks of `x`, whose axis `dim` has one entry per rank;
/// rank `r` keeps entry `r` (JAX's `psum_scatter`, untiled).
pub fn reduce_scatter(x: &Tr, axis: &Axis, dim: usize) -> Tr {
    emit(x, Kind::ReduceScatter { dim }, axis)
}

/// Rank `dst` receives rank `src`'s `x` for each `(src, dst)`; the other
/// ranks receive zeros.
pub fn ppermute(x: &Tr, axis: &Axis, perm: &[(usize, usize)]) -> Tr {
    emit(x, Kind::Ppermute { perm: perm.to_vec() }, axis)
}

/// This rank's index on `axis` (an i32 scalar); `like` is any value of the
/// trace to emit it into.
pub fn axis_index(like: &Tr, axis: &Axis) -> Tr {
    like.lift(|b, _| b.axis_index(axis))
}
