//! Reverse mode by linearize-then-transpose.
//!
//! 1. Run the JVP of `f` into a scratch builder whose extra parameters are
//!    placeholder tangents for the differentiated inputs.
//! 2. Mark every scratch value that depends on a placeholder as *linear*.
//!    Because JVP rules keep tangents linear, the equations producing linear
//!    values form a linear map from input tangents to output tangents; the
//!    rest is the forward computation (primal values and the coefficients the
//!    linear part needs, i.e. the residuals).
//! 3. Copy the forward equations into the output builder, once.
//! 4. Walk the linear equations in reverse, calling each primitive's
//!    transpose rule and accumulating cotangents (symbolic zeros stay `None`).
//!
//! Note [Cotangent accumulation order]: cotangents of a value are summed in
//! the order its readers are visited (reverse program order), which is
//! deterministic, so gradients are bitwise reproducible.

use super::{jvp_inline, Diff, TransposeCx};
use crate::error::IrError;
use crate::ir::{copy_eqns, lookup, Builder, Func, Value};
use crate::ops::Op;

/// Emits into `b` the primal outputs of `f(primals)` and the cotangents of
/// the inputs marked in `wrt`, given output cotangents `cts` (values in `b`,
/// `None` = zero). Inputs not in `wrt` (or not floating) get `None`.
pub fn linearize_transpose(
    b: &mut Builder,
    f: &Func,
    primals: &[Value],
    wrt: &[bool],
    cts: &[Option<Value>],
) -> Result<(Vec<Value>, Vec<Option<Value>>), IrError> {
    if primals.len() != f.params.len() || wrt.len() != f.params.len() || cts.len() != f.outputs.len() {
        return Err(IrError::invalid("vjp", format!("internal error: argument counts do not match `{}`", f.name)));
    }
    // 1. Scratch JVP with placeholder tangents.
    let mut j = Builder::new(format!("{}_jvp", f.name));
    let j_primals: Vec<Value> = f.params.iter().map(|&p| j.param(f.ty(p).clone())).collect();
    let mut j_tangents = Vec::with_capacity(f.params.len());
    for (i, &p) in f.params.iter().enumerate() {
        let ty = f.ty(p);
        let t = (wrt[i] && ty.dtype.is_float()).then(|| j.param(ty.clone()));
        if let (Some(t), Some(name)) = (t, f.name_of(p)) {
            j.set_name(j_primals[i], name);
            j.set_name(t, format!("{name}_dot"));
        }
        j_tangents.push(t);
    }
    let (j_outs, j_touts) = jvp_inline(&mut j, f, &j_primals, &j_tangents)?;
    let jf = j.func();

    // 2. Linearity: depends on a placeholder tangent.
    let mut linear = vec![false; jf.n_values()];
    for t in j_tangents.iter().flatten() {
        linear[t.index()] = true;
    }
    for eqn in &jf.eqns {
        if eqn.inputs.iter().any(|v| linear[v.index()]) {
            for v in &eqn.outputs {
                linear[v.index()] = true;
            }
        }
    }

    // 3. Forward part, copied once.
    let mut map: Vec<Option<Value>> = vec![None; jf.n_values()];
    for (&jp, &bp) in j_primals.iter().zip(primals) {
        map[jp.index()] = Some(bp);
    }
    copy_eqns(b, jf, jf.eqns.iter().filter(|e| !e.outputs.iter().any(|v| linear[v.index()])), &mut map)?;

    // 4. Transpose the linear part.
    let mut ct: Vec<Option<Value>> = vec![None; jf.n_values()];
    for (t, c) in j_touts.iter().zip(cts) {
        if let (Some(t), Some(c)) = (t, c) {
            if linear[t.index()] {
                accumulate(b, jf, &mut ct, *t, *c)?;
            }
        }
    }
    for eqn in jf.eqns.iter().rev().filter(|e| e.outputs.iter().any(|v| linear[v.index()])) {
        let out_cts: Vec<Option<Value>> = eqn.outputs.iter().map(|v| ct[v.index()]).collect();
        if out_cts.iter().all(Option::is_none) {
            continue;
        }
        let inputs: Vec<Option<Value>> = eqn
            .inputs
            .iter()
            .map(|&v| if linear[v.index()] { Ok(None) } else { lookup(&map, v).map(Some) })
            .collect::<Result<_, _>>()?;
        let in_types: Vec<_> = eqn.inputs.iter().map(|&v| jf.ty(v).clone()).collect();
        let out_types: Vec<_> = eqn.outputs.iter().map(|&v| jf.ty(v).clone()).collect();
        b.set_loc(eqn.loc.clone());
        let in_cts = eqn
            .prim
            .transpose(b, &TransposeCx { inputs: &inputs, in_types: &in_types, out_types: &out_types, cts: &out_cts })
            .map_err(|e| e.at(eqn.loc.as_ref()))?;
        if in_cts.len() != eqn.inputs.len() {
            return Err(IrError::NoRule {
                prim: eqn.prim.name().into(),
                rule: "transpose",
                msg: format!(
                    "internal error: rule returned {} cotangents for {} operands",
                    in_cts.len(),
                    eqn.inputs.len()
                ),
            });
        }
        for (&v, c) in eqn.inputs.iter().zip(in_cts) {
            if let (true, Some(c)) = (linear[v.index()], c) {
                accumulate(b, jf, &mut ct, v, c)?;
            }
        }
    }
    b.set_loc(None);
    let outs: Vec<Value> = j_outs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    let grads = j_tangents.iter().map(|t| t.and_then(|t| ct[t.index()])).collect();
    Ok((outs, grads))
}

/// Adds `c` to the cotangent of the scratch value `v`. The running sum is
/// named after `v`'s role: the cotangent of `x_dot` (the tangent of `x`) is
/// `x_bar`.
fn accumulate(b: &mut Builder, jf: &Func, ct: &mut [Option<Value>], v: Value, c: Value) -> Result<(), IrError> {
    let sum = match ct[v.index()] {
        None => c,
        Some(prev) => b.add(prev, c)?,
    };
    if let Some(name) = jf.name_of(v) {
        b.name_if_unnamed(sum, format!("{}_bar", name.strip_suffix("_dot").unwrap_or(name)));
    }
    ct[v.index()] = Some(sum);
    Ok(())
}
