//! IR-to-IR cleanup passes. Transforms do not optimise; these run after them.
//! Invariant: every pass preserves results exactly and leaves verifiable IR.

mod cse;
mod dce;

pub use cse::cse;
pub use dce::dce;

use crate::ir::Func;

/// The standard cleanup pipeline: CSE then DCE.
pub fn simplify(f: &Func) -> Func {
    dce(&cse(f))
}
