//! Whole-function transforms: `jvp_func`, `vjp_func`, `grad`,
//! `value_and_grad`. Each returns a new [`Func`] made only of primitives,
//! cleaned by dead-code elimination and CSE, so it can be transformed again
//! (`grad(grad(f))`) or run by the executor.

use super::{jvp_inline, linearize_transpose};
use crate::error::IrError;
use crate::ir::{copy_eqns, lookup, Builder, Func, Value};
use crate::opt;
use crate::types::TensorType;

/// Which parameters to differentiate with respect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrt {
    /// Every floating-point parameter, in order.
    All,
    /// These parameter positions, in this order (the result follows it).
    Positions(Vec<usize>),
}

impl Wrt {
    /// Resolves to positions, checking range and differentiability.
    pub fn resolve(&self, f: &Func, transform: &str) -> Result<Vec<usize>, IrError> {
        match self {
            Wrt::All => Ok((0..f.params.len()).filter(|&i| f.ty(f.params[i]).dtype.is_float()).collect()),
            Wrt::Positions(ps) => {
                for (k, &p) in ps.iter().enumerate() {
                    if p >= f.params.len() {
                        return Err(IrError::invalid(
                            transform,
                            format!(
                                "wrt names parameter {p} of `{}`, which has only {} parameters",
                                f.name,
                                f.params.len()
                            ),
                        ));
                    }
                    let ty = f.ty(f.params[p]);
                    if !ty.dtype.is_float() {
                        return Err(IrError::invalid(
                            transform,
                            format!(
                                "parameter {p} of `{}` has type {ty}, which is not differentiable (only f32/f64 are)",
                                f.name
                            ),
                        ));
                    }
                    if ps[..k].contains(&p) {
                        return Err(IrError::invalid(transform, format!("wrt lists parameter {p} twice")));
                    }
                }
                Ok(ps.clone())
            }
        }
    }
}

fn copy_params(b: &mut Builder, f: &Func) -> Vec<Value> {
    f.params.iter().map(|&p| b.param(f.ty(p).clone())).collect()
}

fn zeros_if_none(b: &mut Builder, v: Option<Value>, ty: &TensorType) -> Result<Value, IrError> {
    match v {
        Some(v) => Ok(v),
        None => b.zeros(ty),
    }
}

fn finish(b: Builder, outs: &[Value]) -> Result<Func, IrError> {
    let f = b.finish(outs)?;
    Ok(opt::simplify(&f))
}

/// Forward mode as a function: `(primals..., tangents of float params...) ->
/// (outputs..., output tangents...)`. Non-float outputs get zero tangents of
/// their own type.
pub fn jvp_func(f: &Func) -> Result<Func, IrError> {
    let mut b = Builder::new(format!("jvp_{}", f.name));
    let primals = copy_params(&mut b, f);
    let tangents: Vec<Option<Value>> = f
        .params
        .iter()
        .map(|&p| if f.ty(p).dtype.is_float() { Some(b.param(f.ty(p).clone())) } else { None })
        .collect();
    let (outs, touts) = jvp_inline(&mut b, f, &primals, &tangents)?;
    let mut all = outs.clone();
    for (t, &o) in touts.into_iter().zip(&outs) {
        let ty = b.ty(o)?.clone();
        all.push(zeros_if_none(&mut b, t, &ty)?);
    }
    finish(b, &all)
}

/// Reverse mode as a function: `(primals..., cotangents of float outputs...)
/// -> (outputs..., cotangents of the wrt params...)`.
pub fn vjp_func(f: &Func, wrt: &Wrt) -> Result<Func, IrError> {
    let pos = wrt.resolve(f, "vjp")?;
    let mut b = Builder::new(format!("vjp_{}", f.name));
    let primals = copy_params(&mut b, f);
    let cts: Vec<Option<Value>> = f
        .outputs
        .iter()
        .map(|&o| if f.ty(o).dtype.is_float() { Some(b.param(f.ty(o).clone())) } else { None })
        .collect();
    let mask: Vec<bool> = (0..f.params.len()).map(|i| pos.contains(&i)).collect();
    let (outs, grads) = linearize_transpose(&mut b, f, &primals, &mask, &cts)?;
    let mut all = outs;
    for &p in &pos {
        all.push(zeros_if_none(&mut b, grads[p], f.ty(f.params[p]))?);
    }
    finish(b, &all)
}

fn scalar_output(f: &Func, transform: &str) -> Result<TensorType, IrError> {
    let types = f.output_types();
    match types.as_slice() {
        [t] if t.dtype.is_float() && t.rank() == 0 => Ok(t.clone()),
        _ => Err(IrError::invalid(
            transform,
            format!(
                "`{}` must return one floating-point scalar, but it returns ({}); reduce it to a scalar first (e.g. with sum or mean)",
                f.name,
                types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

fn grad_impl(f: &Func, wrt: &Wrt, with_value: bool) -> Result<Func, IrError> {
    let transform = if with_value { "value_and_grad" } else { "grad" };
    let out_ty = scalar_output(f, transform)?;
    let pos = wrt.resolve(f, transform)?;
    let prefix = if with_value { "value_and_grad" } else { "grad" };
    let mut b = Builder::new(format!("{prefix}_{}", f.name));
    let primals = copy_params(&mut b, f);
    let seed = b.scalar(1.0, out_ty.dtype)?;
    let mask: Vec<bool> = (0..f.params.len()).map(|i| pos.contains(&i)).collect();
    let (outs, grads) = linearize_transpose(&mut b, f, &primals, &mask, &[Some(seed)])?;
    let mut all = if with_value { outs } else { Vec::new() };
    for &p in &pos {
        all.push(zeros_if_none(&mut b, grads[p], f.ty(f.params[p]))?);
    }
    finish(b, &all)
}

/// The gradient function: same parameters as `f`, one output per `wrt`
/// parameter (in `wrt` order) with exactly that parameter's type.
/// `f` must return one floating-point scalar.
pub fn grad(f: &Func, wrt: &Wrt) -> Result<Func, IrError> {
    grad_impl(f, wrt, false)
}

/// Like [`grad`], with `f`'s value as the first output; the forward part is
/// evaluated once.
pub fn value_and_grad(f: &Func, wrt: &Wrt) -> Result<Func, IrError> {
    grad_impl(f, wrt, true)
}

/// A transform split into the part that needs only the primals and the part
/// that also needs the extra (tangent or cotangent) inputs:
/// - `forward: (primals...) -> (outputs..., residuals...)`
/// - `rest: (residuals..., extra inputs...) -> (the remaining outputs...)`
#[derive(Debug, Clone)]
pub struct Split {
    /// Primals to outputs and residuals.
    pub forward: Func,
    /// Residuals and the extra inputs to the remaining outputs.
    pub rest: Func,
    /// Number of primal outputs at the front of `forward`'s outputs.
    pub n_outputs: usize,
}

/// Reverse mode split so one forward pass serves several cotangents:
/// `rest` is the pullback `(residuals..., output cotangents...) -> (cotangents of wrt params...)`.
pub fn vjp_split(f: &Func, wrt: &Wrt) -> Result<Split, IrError> {
    partial_eval(&vjp_func(f, wrt)?, f.params.len(), f.outputs.len())
}

/// `linearize`: the forward pass once, and the linear map from input
/// tangents to output tangents at that point:
/// `rest: (residuals..., tangents of float params...) -> (output tangents...)`.
pub fn linearize(f: &Func) -> Result<Split, IrError> {
    partial_eval(&jvp_func(f)?, f.params.len(), f.outputs.len())
}

/// Hessian-vector products of a scalar function: `(primals..., v for each
/// float param...) -> (H v for each float param...)`, as forward mode over
/// reverse mode (jvp of grad), never forming H.
pub fn hvp_func(f: &Func) -> Result<Func, IrError> {
    let g = grad(f, &Wrt::All)?;
    let mut j = jvp_func(&g)?;
    let n = g.outputs.len();
    j.outputs.drain(..n);
    j.name = format!("hvp_{}", f.name);
    Ok(opt::simplify(&j))
}

/// Partial evaluation of `v`, whose first `n_known` params are known now and
/// whose first `n_out` outputs depend only on them: equations that do not
/// depend on the later params form `forward`, the rest form `rest`, and the
/// forward values `rest` reads become residuals.
fn partial_eval(v: &Func, n_known: usize, n_out: usize) -> Result<Split, IrError> {
    let n_primals = n_known;
    // Values that depend on a cotangent parameter belong to the pullback.
    let mut late = vec![false; v.n_values()];
    for &p in &v.params[n_primals..] {
        late[p.index()] = true;
    }
    for eqn in &v.eqns {
        if eqn.inputs.iter().any(|x| late[x.index()]) {
            for o in &eqn.outputs {
                late[o.index()] = true;
            }
        }
    }
    // Residuals: early values read by late equations, or returned as gradients.
    let mut residuals: Vec<Value> = Vec::new();
    let mut is_res = vec![false; v.n_values()];
    let mut add_res = |x: Value, residuals: &mut Vec<Value>| {
        if !late[x.index()] && !is_res[x.index()] {
            is_res[x.index()] = true;
            residuals.push(x);
        }
    };
    for eqn in v.eqns.iter().filter(|e| e.outputs.iter().any(|o| late[o.index()])) {
        for &x in &eqn.inputs {
            add_res(x, &mut residuals);
        }
    }
    for &g in &v.outputs[n_out..] {
        add_res(g, &mut residuals);
    }
    // Forward: primal params, early equations; outputs = primal outs ++ residuals.
    let mut fb = Builder::new(format!("fwd_{}", v.name));
    let mut map: Vec<Option<Value>> = vec![None; v.n_values()];
    for &p in &v.params[..n_primals] {
        map[p.index()] = Some(fb.param(v.ty(p).clone()));
    }
    copy_eqns(&mut fb, v.eqns.iter().filter(|e| !e.outputs.iter().any(|o| late[o.index()])), &mut map)?;
    let mut fwd_outs: Vec<Value> = v.outputs[..n_out].iter().map(|&x| lookup(&map, x)).collect::<Result<_, _>>()?;
    for &r in &residuals {
        fwd_outs.push(lookup(&map, r)?);
    }
    let forward = opt::simplify(&fb.finish(&fwd_outs)?);
    // Pullback: residual and cotangent params, late equations.
    let mut pb = Builder::new(format!("rest_{}", v.name));
    let mut pmap: Vec<Option<Value>> = vec![None; v.n_values()];
    for &r in &residuals {
        pmap[r.index()] = Some(pb.param(v.ty(r).clone()));
    }
    for &c in &v.params[n_primals..] {
        pmap[c.index()] = Some(pb.param(v.ty(c).clone()));
    }
    copy_eqns(&mut pb, v.eqns.iter().filter(|e| e.outputs.iter().any(|o| late[o.index()])), &mut pmap)?;
    let grads: Vec<Value> = v.outputs[n_out..].iter().map(|&x| lookup(&pmap, x)).collect::<Result<_, _>>()?;
    let pullback = pb.finish(&grads)?;
    Ok(Split { forward, rest: pullback, n_outputs: n_out })
}
