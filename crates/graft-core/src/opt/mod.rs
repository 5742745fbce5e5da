//! IR-to-IR cleanup passes. Transforms do not optimise; these run after them.
//! Invariant: every pass preserves results exactly (`fold_identities`: up to
//! the sign of a zero, see its docs; `hoist_accumulations`: a sum over loop
//! steps reassociated) and leaves verifiable IR.

mod algebra;
mod cse;
mod dce;
mod diag;
mod dotfold;
mod flatten;
mod fold;
mod hoist;
mod ifconv;
mod merge_jvp;
mod noop;
mod schedule;
mod steps;
mod widen;

pub use algebra::{fold_identities, splat_reads};
pub use cse::cse;
pub use dce::dce;
pub use diag::diagonal_products;
pub use dotfold::fold_transposed_operands;
pub use flatten::{flatten, flatten_all};
pub use fold::{fold_constants, FOLD_MAX_BYTES, FOLD_MAX_ELEMS};
pub use hoist::{hoist_accumulations, HOIST_MAX_BYTES};
pub use ifconv::if_convert;
pub use merge_jvp::merge_while_jvp;
pub use noop::remove_noops;
pub use schedule::hoist_collectives;
pub use steps::merge_steps;
pub use widen::widen_f16;

use crate::error::IrError;
use crate::ir::{lookup, Builder, Eqn, Func, Value};

/// The standard cleanup pipeline: no-op removal, reads of splats, algebraic
/// identities, products with diagonal matrices, transposed product
/// operands read in place, CSE, then DCE.
pub fn simplify(f: &Func) -> Func {
    let g = fold_identities(&splat_reads(&remove_noops(f)));
    // A failed rebuild (a bug, never the program's) keeps the product.
    let g = diagonal_products(&g).ok().flatten().unwrap_or(g);
    let g = fold_transposed_operands(&g).ok().flatten().unwrap_or(g);
    dce(&cse(&g))
}

/// `f` rebuilt equation by equation, `emit` giving each equation's new
/// outputs from its inputs' new values (parameters, names and source
/// locations carried over): the skeleton of passes that replace some
/// equations by others (`flatten`, `hoist_accumulations`).
pub(crate) fn rebuild(
    f: &Func,
    mut emit: impl FnMut(&mut Builder, &Eqn, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Result<Func, IrError> {
    rebuild_mapped(f, |b, e, ins, _| emit(b, e, ins))
}

/// [`rebuild`], `emit` also given the new value of every value of `f`
/// defined so far (indexed by the old value; `None` for later ones): for
/// passes that replace an equation by one reading values further back
/// (`diagonal_products`, `fold_transposed_operands`).
pub(crate) fn rebuild_mapped(
    f: &Func,
    mut emit: impl FnMut(&mut Builder, &Eqn, &[Value], &[Option<Value>]) -> Result<Vec<Value>, IrError>,
) -> Result<Func, IrError> {
    let mut b = Builder::new(f.name.clone());
    let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
    for &p in &f.params {
        map[p.index()] = Some(b.param_like(f, p));
    }
    for e in &f.eqns {
        let ins: Vec<Value> = e.inputs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
        b.set_loc(e.loc.clone());
        let outs = emit(&mut b, e, &ins, &map)?;
        for (&o, n) in e.outputs.iter().zip(outs) {
            map[o.index()] = Some(n);
            if let Some(name) = f.names.get(o) {
                b.name_if_unnamed(n, name.clone());
            }
        }
    }
    b.set_loc(None);
    let outs: Vec<Value> = f.outputs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    b.finish(&outs)
}
