//! If-conversion: a `cond` becomes all of its branches, inlined, and a
//! `select` of their results by the (clamped) index.
//!
//! Used where branches cannot run: a compiled loop (`kernel::loops`) has
//! no form for `cond`, so a loop body that branches (GradBench's `saddle`
//! solver tests its gradient norm and step size every trip) would step
//! through the executor. Converted, the body is straight-line elementwise
//! work and compiles whole. Every branch is evaluated on every trip, which
//! is cheaper than the executor's per-equation cost for the small scalar
//! bodies this serves.
//!
//! Sound because primitives are total and pure: a branch not taken may
//! compute a NaN or an infinity, but never traps, loops or has an effect
//! (integer division by zero is 0, gathers clamp), and `select` returns the
//! taken branch's values bit for bit. A branch holding a `debug_print`
//! (the one effect) is never converted. Branches that hold loops or other
//! sub-functions (other than convertible `cond`s) are left alone.

use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Eqn, Func, Value};
use crate::ops::binary::Compare;
use crate::ops::{Op, Prim};

/// `f` with every convertible `cond` converted, or `None` if it has none.
pub fn if_convert(f: &Func) -> Option<Func> {
    if !f.eqns.iter().any(convertible) {
        return None;
    }
    convert(f).ok()
}

/// A `cond` whose branches hold no sub-functions but convertible `cond`s.
fn convertible(eqn: &Eqn) -> bool {
    let Prim::Cond(c) = &eqn.prim else { return false };
    // A branch that prints must run only when taken.
    c.branches.iter().all(|b| !b.has_effects() && b.eqns.iter().all(|e| e.prim.subfuncs().is_empty() || convertible(e)))
}

fn convert(f: &Func) -> Result<Func, IrError> {
    let mut b = Builder::new(&f.name);
    let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
    for &p in &f.params {
        map[p.index()] = Some(b.param_like(f, p));
    }
    let get = |map: &[Option<Value>], v: Value| {
        map[v.index()].ok_or_else(|| IrError::invalid("if_convert", "operand defined later"))
    };
    for eqn in &f.eqns {
        b.set_loc(eqn.loc.clone());
        let ins: Vec<Value> = eqn.inputs.iter().map(|&v| get(&map, v)).collect::<Result<_, _>>()?;
        let outs = match &eqn.prim {
            Prim::Cond(c) if convertible(eqn) => {
                let mut results = Vec::with_capacity(c.branches.len());
                for br in &c.branches {
                    let g = convert(br)?;
                    results.push(b.inline(&g, &ins[1..])?);
                }
                // The interpreter's choice: branches[clamp(index, 0, n - 1)].
                let n = c.branches.len();
                let lo = b.scalar(0.0, DType::I32)?;
                let hi = b.scalar((n - 1) as f64, DType::I32)?;
                let idx = b.max(ins[0], lo)?;
                let idx = b.min(idx, hi)?;
                let mut out = results.pop().unwrap_or_default();
                for (k, taken) in results.into_iter().enumerate().rev() {
                    let kv = b.scalar(k as f64, DType::I32)?;
                    let pick = b.compare(Compare::Eq, idx, kv)?;
                    out = out
                        .into_iter()
                        .zip(taken)
                        .map(|(other, mine)| {
                            let shape = b.ty(other)?.shape.clone();
                            let p = if shape.is_empty() { pick } else { b.broadcast_in_dim(pick, &shape, &[])? };
                            b.select(p, mine, other)
                        })
                        .collect::<Result<_, _>>()?;
                }
                out
            }
            _ => b.emit(eqn.prim.clone(), &ins)?,
        };
        for (&o, v) in eqn.outputs.iter().zip(outs) {
            map[o.index()] = Some(v);
        }
    }
    b.set_loc(None);
    let outs: Vec<Value> = f.outputs.iter().map(|&v| get(&map, v)).collect::<Result<_, _>>()?;
    Ok(super::simplify(&b.finish(&outs)?))
}
