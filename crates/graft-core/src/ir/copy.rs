//! Copying equations from one function into a builder under a value map:
//! the one mechanism behind inlining, the forward/linear split of reverse
//! mode, and partial evaluation.

use super::{Builder, Eqn, Func, Value};
use crate::error::IrError;

/// `map[v]`, or an internal error if `v` has not been mapped yet.
pub fn lookup(map: &[Option<Value>], v: Value) -> Result<Value, IrError> {
    map[v.index()].ok_or_else(|| IrError::invalid("copy", format!("internal error: {v} is read before it is mapped")))
}

/// Re-emits `eqns` of `src` (in order, keeping their source locations and
/// the names of their results) into `b`, reading operands through `map` and
/// recording each result in it.
pub fn copy_eqns<'a>(
    b: &mut Builder,
    src: &Func,
    eqns: impl IntoIterator<Item = &'a Eqn>,
    map: &mut [Option<Value>],
) -> Result<(), IrError> {
    for eqn in eqns {
        let ins: Vec<Value> = eqn.inputs.iter().map(|&v| lookup(map, v)).collect::<Result<_, _>>()?;
        b.set_loc(eqn.loc.clone());
        for (&o, n) in eqn.outputs.iter().zip(b.emit(eqn.prim.clone(), &ins)?) {
            map[o.index()] = Some(n);
            if let Some(name) = src.names.get(o) {
                b.name_if_unnamed(n, name.clone());
            }
        }
    }
    b.set_loc(None);
    Ok(())
}

impl Builder {
    /// A new parameter with the type and the name (if any) of `f`'s value `p`.
    pub fn param_like(&mut self, f: &Func, p: Value) -> Value {
        let v = self.param(f.ty(p).clone());
        if let Some(name) = f.names.get(p) {
            self.set_name(v, name.clone());
        }
        v
    }

    /// Copies `f`'s equations into this function with `args` as its
    /// parameters; returns the values of `f`'s outputs. Names travel with
    /// the equations, and an unnamed argument takes its parameter's name.
    pub fn inline(&mut self, f: &Func, args: &[Value]) -> Result<Vec<Value>, IrError> {
        let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
        for (&p, &a) in f.params.iter().zip(args) {
            map[p.index()] = Some(a);
            // An unnamed argument prints as the parameter it is passed as.
            if let Some(name) = f.names.get(p) {
                self.name_if_unnamed(a, name.clone());
            }
        }
        copy_eqns(self, f, &f.eqns, &mut map)?;
        f.outputs.iter().map(|&v| lookup(&map, v)).collect()
    }
}
