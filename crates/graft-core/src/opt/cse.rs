//! Common-subexpression elimination: an equation with the same primitive,
//! parameters and operands as an earlier one reuses its results. This is what
//! shares the coefficients that several derivative rules recompute.
//!
//! Equations are keyed by their primitive's printed form (name and params)
//! and operands; constants larger than `MAX_CONST` elements are never merged
//! (their printed form does not show every element).

use crate::ir::{Func, Value};
use crate::ops::{display_prim, Op, Prim};
use std::collections::HashMap;

const MAX_CONST: usize = 8;

/// Merges duplicate equations.
pub fn cse(f: &Func) -> Func {
    let mut subst: Vec<Value> = (0..f.n_values() as u32).map(Value).collect();
    let mut seen: HashMap<(String, Vec<Value>), Vec<Value>> = HashMap::new();
    let mut keep = vec![true; f.eqns.len()];
    let mut out = f.clone();
    for (i, eqn) in out.eqns.iter_mut().enumerate() {
        for v in &mut eqn.inputs {
            *v = subst[v.index()];
        }
        let mergeable = match &eqn.prim {
            Prim::Constant(c) => c.value.numel() <= MAX_CONST,
            // Two prints of the same values print twice.
            Prim::DebugPrint(_) => false,
            p => p.subfuncs().is_empty(),
        };
        if !mergeable {
            continue;
        }
        // The result types disambiguate e.g. equal-looking constants of different dtypes.
        let tys: Vec<String> = eqn.outputs.iter().map(|&v| f.ty(v).to_string()).collect();
        let key = (format!("{} : {}", display_prim(&eqn.prim), tys.join(",")), eqn.inputs.clone());
        match seen.get(&key) {
            Some(prev) => {
                for (&v, &p) in eqn.outputs.iter().zip(prev) {
                    subst[v.index()] = p;
                }
                keep[i] = false;
            }
            None => {
                seen.insert(key, eqn.outputs.clone());
            }
        }
    }
    for v in &mut out.outputs {
        *v = subst[v.index()];
    }
    super::dce::renumber(&out, &keep)
}
