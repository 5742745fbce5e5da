//! IR-to-IR cleanup passes. Transforms do not optimise; these run after them.
//! Invariant: every pass preserves results exactly and leaves verifiable IR.

mod cse;
mod dce;
mod noop;

pub use cse::cse;
pub use dce::dce;
pub use noop::remove_noops;

use crate::ir::Func;

/// The standard cleanup pipeline: no-op removal, CSE, then DCE.
pub fn simplify(f: &Func) -> Func {
    dce(&cse(&remove_noops(f)))
}
