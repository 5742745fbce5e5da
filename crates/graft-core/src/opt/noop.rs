//! Removal of equations that return their operand unchanged: a reshape or
//! convert to the operand's own type, a transpose by the identity
//! permutation, a broadcast_in_dim to the operand's own shape. Transforms
//! emit these freely (a rule cannot know every shape it will see), and the
//! executor would otherwise copy the tensor for each one.
//!
//! Invariant: only equations whose result equals the operand element for
//! element are removed (`stop_gradient` is kept: it changes derivatives).

use crate::ir::{Func, Value};
use crate::ops::Prim;

fn is_noop(f: &Func, prim: &Prim, inputs: &[Value], outputs: &[Value]) -> bool {
    let ([x], [y]) = (inputs, outputs) else {
        return false;
    };
    let (tx, ty) = (f.ty(*x), f.ty(*y));
    if tx != ty {
        return false;
    }
    match prim {
        Prim::Reshape(_) | Prim::Convert(_) => true,
        Prim::Transpose(t) => t.perm.iter().enumerate().all(|(i, &p)| i == p),
        Prim::BroadcastInDim(b) => b.dims.iter().enumerate().all(|(i, &d)| i == d),
        _ => false,
    }
}

/// Replaces every use of a no-op equation's result by its operand and drops it.
pub fn remove_noops(f: &Func) -> Func {
    let mut subst: Vec<Value> = (0..f.n_values() as u32).map(Value).collect();
    let mut keep = vec![true; f.eqns.len()];
    let mut out = f.clone();
    for (i, eqn) in out.eqns.iter_mut().enumerate() {
        for v in &mut eqn.inputs {
            *v = subst[v.index()];
        }
        if is_noop(f, &eqn.prim, &eqn.inputs, &eqn.outputs) {
            subst[eqn.outputs[0].index()] = eqn.inputs[0];
            keep[i] = false;
        }
    }
    for v in &mut out.outputs {
        *v = subst[v.index()];
    }
    super::dce::renumber(&out, &keep)
}
