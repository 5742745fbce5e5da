//! Dead-code elimination: drops equations none of whose results reach an
//! output, except those with an effect (`debug_print`, or a loop or call
//! holding one: `Prim::has_effect`), which stay whatever reads them. Every
//! other primitive is pure (random numbers are counter-based), so this never
//! changes results. Values are renumbered densely.

use crate::ir::{Eqn, Func, Value};

/// Removes equations whose results are unused and that have no effect.
pub fn dce(f: &Func) -> Func {
    let mut live = vec![false; f.n_values()];
    for &v in &f.outputs {
        live[v.index()] = true;
    }
    let mut keep = vec![false; f.eqns.len()];
    for (i, eqn) in f.eqns.iter().enumerate().rev() {
        if eqn.outputs.iter().any(|v| live[v.index()]) || eqn.prim.has_effect() {
            keep[i] = true;
            for v in &eqn.inputs {
                live[v.index()] = true;
            }
        }
    }
    renumber(f, &keep)
}

/// Rebuilds `f` keeping the marked equations, numbering values densely
/// (params first, then equation results in order).
pub(crate) fn renumber(f: &Func, keep: &[bool]) -> Func {
    let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
    let mut types = Vec::new();
    let fresh = |v: Value, types: &mut Vec<_>, map: &mut Vec<Option<Value>>| {
        let nv = Value(types.len() as u32);
        types.push(f.ty(v).clone());
        map[v.index()] = Some(nv);
        nv
    };
    let params: Vec<Value> = f.params.iter().map(|&p| fresh(p, &mut types, &mut map)).collect();
    let mut eqns = Vec::new();
    for (eqn, _) in f.eqns.iter().zip(keep).filter(|(_, k)| **k) {
        let inputs = eqn
            .inputs
            .iter()
            .map(|v| map[v.index()].expect("internal error: kept equation reads a dropped value"))
            .collect();
        let outputs = eqn.outputs.iter().map(|&v| fresh(v, &mut types, &mut map)).collect();
        eqns.push(Eqn { prim: eqn.prim.clone(), inputs, outputs, loc: eqn.loc.clone() });
    }
    let outputs = f
        .outputs
        .iter()
        .map(|v| map[v.index()].expect("internal error: an output is defined by a dropped equation"))
        .collect();
    let mut names = crate::ir::Names::default();
    for (v, nv) in map.iter().enumerate() {
        if let (Some(nv), Some(name)) = (nv, f.names.get(Value(v as u32))) {
            names.set(*nv, name.clone());
        }
    }
    Func { name: f.name.clone(), types, params, eqns, outputs, names }
}
