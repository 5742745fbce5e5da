//! Whole-function transforms: `jvp_func`, `vjp_func`, `grad`,
//! `value_and_grad`. Each returns a new [`Func`] made only of primitives,
//! cleaned by dead-code elimination and CSE, so it can be transformed again
//! (`grad(grad(f))`) or run by the executor.

use super::linearize_transpose;
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::opt;
use crate::transform::rewrite::{self, Staged, TangentOuts};
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
    f.params.iter().map(|&p| b.param_like(f, p)).collect()
}

fn float_params(f: &Func) -> Vec<bool> {
    f.params.iter().map(|&p| f.ty(p).dtype.is_float()).collect()
}

/// Forward mode as a function: `(primals..., tangents of float params...) ->
/// (outputs..., output tangents...)`. Non-float outputs get zero tangents of
/// their own type.
pub fn jvp_func(f: &Func) -> Result<Func, IrError> {
    rewrite::jvp(f, format!("jvp_{}", f.name), &float_params(f), true, TangentOuts::All)
}

/// Reverse mode as a function: `(primals..., cotangents of float outputs...)
/// -> (outputs..., cotangents of the wrt params...)`.
pub fn vjp_func(f: &Func, wrt: &Wrt) -> Result<Func, IrError> {
    let pos = wrt.resolve(f, "vjp")?;
    let mask: Vec<bool> = (0..f.params.len()).map(|i| pos.contains(&i)).collect();
    let ct_in: Vec<bool> = f.outputs.iter().map(|&o| f.ty(o).dtype.is_float()).collect();
    let v = rewrite::vjp(f, format!("vjp_{}", f.name), &mask, &ct_in, true)?;
    Ok(in_wrt_order(v, f.outputs.len(), &pos))
}

/// `rewrite::vjp` returns cotangents in parameter order; `wrt` may list
/// parameters in any order, and the result follows it.
fn in_wrt_order(mut v: Func, n_lead: usize, pos: &[usize]) -> Func {
    let mut sorted = pos.to_vec();
    sorted.sort_unstable();
    if sorted != pos {
        let grads: Vec<Value> = v.outputs[n_lead..].to_vec();
        for (k, p) in pos.iter().enumerate() {
            let at = sorted.iter().position(|s| s == p).expect("internal error: pos is a permutation of sorted");
            v.outputs[n_lead + k] = grads[at];
        }
    }
    v
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
    let mut b = Builder::new(format!("{transform}_{}", f.name));
    let primals = copy_params(&mut b, f);
    let seed = b.scalar(1.0, out_ty.dtype)?;
    let mask: Vec<bool> = (0..f.params.len()).map(|i| pos.contains(&i)).collect();
    let (outs, grads) = linearize_transpose(&mut b, f, &primals, &mask, &[Some(seed)])?;
    let mut all = if with_value { outs } else { Vec::new() };
    for &p in &pos {
        all.push(match grads[p] {
            Some(g) => g,
            None => b.zeros(f.ty(f.params[p]))?,
        });
    }
    Ok(opt::simplify(&b.finish(&all)?))
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

/// Reverse mode split so one forward pass serves several cotangents:
/// `rest` is the pullback `(residuals..., output cotangents...) -> (cotangents of wrt params...)`.
pub fn vjp_split(f: &Func, wrt: &Wrt) -> Result<Staged, IrError> {
    rewrite::partial_eval(&vjp_func(f, wrt)?, f.params.len(), f.outputs.len())
}

/// `linearize`: the forward pass once, and the linear map from input
/// tangents to output tangents at that point:
/// `rest: (residuals..., tangents of float params...) -> (output tangents...)`.
pub fn linearize(f: &Func) -> Result<Staged, IrError> {
    rewrite::partial_eval(&jvp_func(f)?, f.params.len(), f.outputs.len())
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
