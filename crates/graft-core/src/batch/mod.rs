//! Vectorization (vmap) as a graph rewrite, JAX's batching interpreter
//! turned into an IR -> IR transform.
//!
//! Every primitive gives a **batching rule** ([`Batch`]) in its op family
//! file, next to its shape rule and derivative rules: given its operands,
//! where each operand's batch dimension (bdim) sits (`None` = the operand is
//! the same for every example), and the batch size, it emits primitives that
//! compute all examples at once and says where each result's bdim is.
//!
//! Invariants:
//! - the rewrite never loops over the batch: the number of equations emitted
//!   does not depend on the batch size;
//! - an equation whose operands are all unbatched is copied unchanged by the
//!   driver (rules are only called when some operand is batched);
//! - a rule's result with bdim `Some(d)` has the per-example type with the
//!   batch size inserted at `d`; the driver checks this after every rule;
//! - rules emit only primitives that have batching rules themselves, so
//!   `vmap(vmap(f))` works to any depth, and ordinary primitives, so
//!   `grad(vmap(f))` and `vmap(grad(f))` compose.
//!
//! Axis-taking primitives keep their per-example meaning: an axis `a` of
//! the per-example view is axis `a + (a >= bdim)` of the batched value
//! ([`helpers::phys_axis`]), so the batch dimension passes through untouched.

pub mod helpers;
mod vmap;

pub use vmap::{
    batch_size_of, binds_axis, place_out_axes, resolve_axes, vmap_for_args, vmap_func, vmap_func_named,
    vmap_func_signed,
};

use crate::error::IrError;
use crate::ir::{Builder, Value};

/// What a batching rule sees. `args` are values in the builder the rule
/// emits into; `bdims[i]` is where operand `i`'s batch dimension is
/// (`None`: operand `i` is shared by every example).
#[derive(Debug)]
pub struct BatchCx<'a> {
    /// Operands of the equation (batched values carry the extra dim).
    pub args: &'a [Value],
    /// Batch dim of each operand (`None` = unbatched).
    pub bdims: &'a [Option<usize>],
    /// The batch size.
    pub size: usize,
    /// The name the vmap being applied gives its axis (`axis_name`), if
    /// any: collectives over that name become operations over the batch
    /// dimension (`ops/collective.rs`).
    pub axis: Option<&'a str>,
}

/// A rule's answer: each result with its batch dim (`None` = unbatched).
pub type Batched = Vec<(Value, Option<usize>)>;

/// The batching rule of a primitive. No default: every family states its
/// rule, so a missing one fails the build.
pub trait Batch {
    /// Emits the batched computation; called only when some operand is batched.
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError>;
}

/// The error of a primitive whose batching rule cannot (yet) apply.
pub fn no_rule(prim: &str, msg: impl Into<String>) -> IrError {
    IrError::NoRule { prim: prim.to_string(), rule: "batch", msg: msg.into() }
}
