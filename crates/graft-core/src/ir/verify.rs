//! The IR verifier. Checked invariants:
//! 1. `types` has an entry for every value and nothing else is referenced;
//! 2. every value is defined exactly once (as a parameter or an equation output);
//! 3. every operand is defined before the equation that reads it;
//! 4. re-running each primitive's shape rule on the operand types gives the
//!    recorded output types (so hand-edited or transformed IR stays typed);
//! 5. every output refers to a defined value;
//! 6. called sub-functions verify too, and are called with matching types.

use super::Func;
use crate::error::IrError;
use crate::ops::Op;

/// Checks every IR invariant listed in the module docs.
pub fn verify(func: &Func) -> Result<(), IrError> {
    let n = func.types.len();
    let err = |eqn: usize, msg: String| IrError::Verify { func: func.name.clone(), eqn, msg };
    let mut defined = vec![false; n];
    for &p in &func.params {
        if p.index() >= n {
            return Err(err(usize::MAX, format!("parameter {p} has no type")));
        }
        if defined[p.index()] {
            return Err(err(usize::MAX, format!("parameter {p} defined twice")));
        }
        defined[p.index()] = true;
    }
    for (i, eqn) in func.eqns.iter().enumerate() {
        for &v in &eqn.inputs {
            if v.index() >= n || !defined[v.index()] {
                return Err(err(i, format!("{} reads {v} before it is defined", eqn.prim.name())));
            }
        }
        let in_types: Vec<_> = eqn.inputs.iter().map(|&v| func.ty(v).clone()).collect();
        let inferred = eqn.prim.infer(&in_types).map_err(|e| err(i, e.to_string()))?;
        if inferred.len() != eqn.outputs.len() {
            return Err(err(
                i,
                format!("{} has {} outputs, its rule infers {}", eqn.prim.name(), eqn.outputs.len(), inferred.len()),
            ));
        }
        for (&v, t) in eqn.outputs.iter().zip(&inferred) {
            if v.index() >= n {
                return Err(err(i, format!("output {v} has no type")));
            }
            if defined[v.index()] {
                return Err(err(i, format!("{v} is defined twice")));
            }
            defined[v.index()] = true;
            if func.ty(v) != t {
                return Err(err(i, format!("{v} is recorded as {} but {} infers {t}", func.ty(v), eqn.prim.name())));
            }
        }
        for sub in eqn.prim.subfuncs() {
            verify(&sub)?;
        }
    }
    for &v in &func.outputs {
        if v.index() >= n || !defined[v.index()] {
            return Err(err(usize::MAX, format!("output {v} is not defined")));
        }
    }
    Ok(())
}
