//! Jacobians and Hessians, composed from the two transform families: one
//! JVP (or VJP) vmapped over a basis of tangents (or cotangents). No loop:
//! the graph size does not depend on the number of columns.
//!
//! Conventions: `f` has one floating-point output `y`; the Jacobian with
//! respect to parameter `wrt` (shape `x`) has shape `y.shape ++ x.shape`,
//! like `jax.jacfwd`/`jax.jacrev`.

use crate::batch::vmap_func;
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::opt;
use crate::transform::rewrite::{self, TangentOuts};
use crate::types::TensorType;

fn check(f: &Func, wrt: usize, transform: &str) -> Result<(TensorType, TensorType), IrError> {
    let outs = f.output_types();
    let [y] = outs.as_slice() else {
        return Err(IrError::invalid(
            transform,
            format!("`{}` must have exactly one output, it has {}", f.name, outs.len()),
        ));
    };
    if !y.dtype.is_float() {
        return Err(IrError::invalid(
            transform,
            format!("the output of `{}` has type {y}, which is not differentiable", f.name),
        ));
    }
    let Some(&p) = f.params.get(wrt) else {
        return Err(IrError::invalid(transform, format!("`{}` has no parameter {wrt}", f.name)));
    };
    let x = f.ty(p).clone();
    if x.dtype != y.dtype {
        return Err(IrError::invalid(
            transform,
            format!(
                "parameter {wrt} of `{}` has type {x}; it must be a float of the output's dtype {}",
                f.name, y.dtype
            ),
        ));
    }
    Ok((x, y.clone()))
}

/// The identity basis `[n, *shape]`: row `k` is the k-th unit tensor.
fn basis(b: &mut Builder, ty: &TensorType) -> Result<Value, IrError> {
    let n = ty.numel();
    let rows = b.iota(crate::DType::I32, &[n, n], 0)?;
    let cols = b.iota(crate::DType::I32, &[n, n], 1)?;
    let eye = b.eq(rows, cols)?;
    let eye = b.convert(eye, ty.dtype)?;
    let mut shape = vec![n];
    shape.extend(&ty.shape);
    b.reshape(eye, &shape)
}

/// Wraps a per-column function `g(primals..., column) -> [rows...]` into
/// the Jacobian function: vmap over the basis, then lay the columns out.
fn assemble(
    f: &Func,
    g: Func,
    col_ty: &TensorType,
    out_shape: Vec<usize>,
    cols_last: bool,
    name: String,
) -> Result<Func, IrError> {
    let n = col_ty.numel();
    let mut in_axes = vec![None; f.params.len()];
    in_axes.push(Some(0));
    let vg = vmap_func(&g, &in_axes, &[Some(0)], n)?;
    let mut b = Builder::new(name);
    let ps: Vec<Value> = f.params.iter().map(|&p| b.param_like(f, p)).collect();
    let e = basis(&mut b, col_ty)?;
    let mut args = ps;
    args.push(e);
    // Inlined rather than called, so the cleanup below sees through it.
    let stacked = b.inline(&vg, &args)?[0];
    // stacked: [n, *row_shape]; the Jacobian wants [*y, *x].
    let row_numel: usize = b.ty(stacked)?.shape[1..].iter().product();
    let flat = b.reshape(stacked, &[n, row_numel])?;
    let laid = if cols_last { b.transpose(flat, &[1, 0])? } else { flat };
    let out = b.reshape(laid, &out_shape)?;
    Ok(opt::simplify(&b.finish(&[out])?))
}

/// Forward-mode Jacobian: one JVP per input element, vmapped.
pub fn jacfwd(f: &Func, wrt: usize) -> Result<Func, IrError> {
    let (x, y) = check(f, wrt, "jacfwd")?;
    let only: Vec<bool> = (0..f.params.len()).map(|i| i == wrt).collect();
    let g = rewrite::jvp(f, format!("{}_jvp_col", f.name), &only, false, TangentOuts::All)?;
    let mut shape = y.shape.clone();
    shape.extend(&x.shape);
    assemble(f, g, &x, shape, true, format!("jacfwd_{}", f.name))
}

/// Reverse-mode Jacobian: one VJP per output element, vmapped.
pub fn jacrev(f: &Func, wrt: usize) -> Result<Func, IrError> {
    let (x, y) = check(f, wrt, "jacrev")?;
    let only: Vec<bool> = (0..f.params.len()).map(|i| i == wrt).collect();
    let g = rewrite::vjp(f, format!("{}_vjp_row", f.name), &only, &[true], false)?;
    let mut shape = y.shape.clone();
    shape.extend(&x.shape);
    assemble(f, g, &y, shape, false, format!("jacrev_{}", f.name))
}

/// The Jacobian, choosing the mode: forward when the input has no more
/// elements than the output (fewer JVPs than VJPs), reverse otherwise.
pub fn jacobian(f: &Func, wrt: usize) -> Result<Func, IrError> {
    let (x, y) = check(f, wrt, "jacobian")?;
    if x.numel() <= y.numel() {
        jacfwd(f, wrt)
    } else {
        jacrev(f, wrt)
    }
}

/// The Hessian of a scalar function: forward over reverse, `jacfwd(jacrev(f))`.
pub fn hessian(f: &Func, wrt: usize) -> Result<Func, IrError> {
    let (_, y) = check(f, wrt, "hessian")?;
    if y.rank() != 0 {
        return Err(IrError::invalid("hessian", format!("`{}` must return a scalar, it returns {y}", f.name)));
    }
    jacfwd(&jacrev(f, wrt)?, wrt)
}
