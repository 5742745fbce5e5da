//! IR-to-IR cleanup passes. Transforms do not optimise; these run after them.
//! Invariant: every pass preserves results exactly (`fold_identities`: up to
//! the sign of a zero, see its docs; `hoist_accumulations`: a sum over loop
//! steps reassociated) and leaves verifiable IR.

mod algebra;
mod cse;
mod dce;
mod flatten;
mod fold;
mod hoist;
mod ifconv;
mod noop;

pub use algebra::fold_identities;
pub use cse::cse;
pub use dce::dce;
pub use flatten::flatten;
pub use fold::{fold_constants, FOLD_MAX_BYTES, FOLD_MAX_ELEMS};
pub use hoist::{hoist_accumulations, HOIST_MAX_BYTES};
pub use ifconv::if_convert;
pub use noop::remove_noops;

use crate::ir::Func;

/// The standard cleanup pipeline: no-op removal, algebraic identities, CSE,
/// then DCE.
pub fn simplify(f: &Func) -> Func {
    dce(&cse(&fold_identities(&remove_noops(f))))
}
