//! The forward-mode driver: inlines a function into a builder, emitting each
//! primal equation followed by its JVP rule's tangent equations.
//!
//! Zero handling lives here, once: an equation whose operand tangents are
//! all zero gets no tangent equations; integer and bool results never carry
//! a tangent (they are piecewise constant).

use super::{Diff, JvpCx};
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::ops::Op;

/// Emits `f(primals)` and its tangents into `b`. Returns the primal outputs
/// and their tangents (`None` = zero). `tangents[i]` must have the type of
/// `primals[i]` when present.
pub fn jvp_inline(
    b: &mut Builder,
    f: &Func,
    primals: &[Value],
    tangents: &[Option<Value>],
) -> Result<(Vec<Value>, Vec<Option<Value>>), IrError> {
    jvp_inline_given(b, f, primals, tangents, &[])
}

/// [`jvp_inline`] where some primal values are already known: an equation
/// all of whose results have a value in `given` (indexed by `f`'s values;
/// shorter than `f` means unknown) is not re-emitted, its tangent rule sees
/// the given values as its results. A checkpoint that saved the results of
/// its matrix products uses this, so its tangent map does not recompute them.
pub fn jvp_inline_given(
    b: &mut Builder,
    f: &Func,
    primals: &[Value],
    tangents: &[Option<Value>],
    given: &[Option<Value>],
) -> Result<(Vec<Value>, Vec<Option<Value>>), IrError> {
    if primals.len() != f.params.len() || tangents.len() != f.params.len() {
        return Err(IrError::invalid(
            "jvp",
            format!(
                "`{}` takes {} arguments, got {} primals and {} tangents",
                f.name,
                f.params.len(),
                primals.len(),
                tangents.len()
            ),
        ));
    }
    let n = f.n_values();
    let mut env: Vec<Option<Value>> = vec![None; n];
    let mut tan: Vec<Option<Value>> = vec![None; n];
    for (i, &p) in f.params.iter().enumerate() {
        env[p.index()] = Some(primals[i]);
        if f.ty(p).dtype.is_float() {
            if let Some(t) = tangents[i] {
                if b.ty(t)? != f.ty(p) {
                    return Err(IrError::invalid(
                        "jvp",
                        format!("tangent {i} of `{}` must have type {}, got {}", f.name, f.ty(p), b.ty(t)?),
                    ));
                }
                tan[p.index()] = Some(t);
            }
        }
    }
    let get = |env: &[Option<Value>], v: Value| {
        env[v.index()].ok_or_else(|| {
            IrError::invalid("jvp", format!("internal error: {v} used before definition in `{}`", f.name))
        })
    };
    for eqn in &f.eqns {
        let ins: Vec<Value> = eqn.inputs.iter().map(|&v| get(&env, v)).collect::<Result<_, _>>()?;
        b.set_loc(eqn.loc.clone());
        let known: Option<Vec<Value>> = eqn.outputs.iter().map(|v| given.get(v.index()).copied().flatten()).collect();
        let emitted = !matches!(&known, Some(outs) if !outs.is_empty());
        let mut outs = match known {
            Some(outs) if !outs.is_empty() => outs,
            _ => b.emit(eqn.prim.clone(), &ins).map_err(|e| e.at(eqn.loc.as_ref()))?,
        };
        let tins: Vec<Option<Value>> = eqn.inputs.iter().map(|&v| tan[v.index()]).collect();
        if tins.iter().any(Option::is_some) {
            let replaced = std::cell::RefCell::new(None);
            let touts = eqn
                .prim
                .jvp(b, &JvpCx { primals: &ins, tangents: &tins, outputs: &outs, replaced: &replaced })
                .map_err(|e| e.at(eqn.loc.as_ref()))?;
            if let Some(new) = replaced.into_inner() {
                let same = new.len() == outs.len()
                    && new.iter().zip(&outs).all(|(&n, &o)| matches!((b.ty(n), b.ty(o)), (Ok(a), Ok(c)) if a == c));
                if !same {
                    return Err(IrError::NoRule {
                        prim: eqn.prim.name().into(),
                        rule: "jvp",
                        msg: "internal error: replacement results differ from the equation's in number or type".into(),
                    });
                }
                // The driver's copy is dead: drop it now, because DCE keeps
                // an equation with an effect (a loop body that prints).
                if emitted && eqn.prim.has_effect() {
                    b.retract(&outs);
                }
                outs = new;
            }
            if touts.len() != outs.len() {
                return Err(IrError::NoRule {
                    prim: eqn.prim.name().into(),
                    rule: "jvp",
                    msg: format!("internal error: rule returned {} tangents for {} results", touts.len(), outs.len()),
                });
            }
            for ((&v, &o), t) in eqn.outputs.iter().zip(&outs).zip(touts) {
                if b.ty(o)?.dtype.is_float() {
                    tan[v.index()] = t;
                    if let (Some(t), Some(name)) = (t, f.name_of(v)) {
                        b.name_if_unnamed(t, format!("{name}_dot"));
                    }
                }
            }
        }
        for (&v, &o) in eqn.outputs.iter().zip(&outs) {
            env[v.index()] = Some(o);
            if let Some(name) = f.names.get(v) {
                b.name_if_unnamed(o, name.clone());
            }
        }
    }
    b.set_loc(None);
    let outs: Vec<Value> = f.outputs.iter().map(|&v| get(&env, v)).collect::<Result<_, _>>()?;
    let touts = f.outputs.iter().map(|&v| tan[v.index()]).collect();
    Ok((outs, touts))
}
