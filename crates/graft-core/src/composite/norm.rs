//! Normalisation layers: `normalize` (zero mean, unit variance over axes),
//! `layer_norm` (PyTorch's `F.layer_norm`: the trailing axes covered by
//! `gamma`), `batch_norm` in training mode (batch statistics over every
//! axis but the channel axis) and `group_norm` (statistics per example over
//! groups of channels).
//!
//! Conventions (PyTorch's): the variance used for normalising is the biased
//! (population) variance, `eps` is added inside the square root
//! (`(x - mean) / sqrt(var + eps)`), and the usual default is `eps = 1e-5`
//! ([`DEFAULT_EPS`]). Statistics are computed in two passes (deviations
//! from the mean), which stays accurate for inputs with a large offset.

use super::broadcast;
use super::math::require_float;
use super::reduce::expand_back;
use super::shape::check_axes;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Binary;

/// PyTorch's default `eps` for layer and batch norm.
pub const DEFAULT_EPS: f64 = 1e-5;

fn check_eps(op: &str, eps: f64) -> Result<(), IrError> {
    if eps >= 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(IrError::invalid(op, format!("eps must be finite and >= 0, got {eps}")))
    }
}

/// Mean and biased variance over `axes` (reduced shape), and the centred
/// input `x - mean` (full shape).
fn moments(b: &mut Builder, x: Value, axes: &[usize]) -> Result<(Value, Value, Value), IrError> {
    let shape = b.ty(x)?.shape.clone();
    let n: usize = axes.iter().map(|&a| shape[a]).product();
    let nv = broadcast::scalar_like(b, n as f64, x)?;
    let s = b.reduce_sum(x, axes)?;
    let mean = broadcast::binary(b, Binary::Div, s, nv)?;
    let mb = expand_back(b, mean, &shape, axes)?;
    let d = b.sub(x, mb)?;
    let d2 = b.mul(d, d)?;
    let s2 = b.reduce_sum(d2, axes)?;
    let var = broadcast::binary(b, Binary::Div, s2, nv)?;
    Ok((mean, var, d))
}

/// `(x - d) * rsqrt(var + eps)` with `var` broadcast back over `axes`.
fn scale_centered(
    b: &mut Builder,
    d: Value,
    var: Value,
    shape: &[usize],
    axes: &[usize],
    eps: f64,
) -> Result<Value, IrError> {
    let e = broadcast::scalar_like(b, eps, var)?;
    let ve = broadcast::binary(b, Binary::Add, var, e)?;
    let inv = b.rsqrt(ve)?;
    let inv = expand_back(b, inv, shape, axes)?;
    b.mul(d, inv)
}

/// `(x - mean) / sqrt(var + eps)` with mean and biased variance over `axes`
/// (a layer norm without the affine part).
pub fn normalize(b: &mut Builder, x: Value, axes: &[usize], eps: f64) -> Result<Value, IrError> {
    require_float(b, "normalize", x)?;
    check_eps("normalize", eps)?;
    let shape = b.ty(x)?.shape.clone();
    check_axes("normalize", axes, shape.len())?;
    let mut axes = axes.to_vec();
    axes.sort_unstable();
    let (_, var, d) = moments(b, x, &axes)?;
    scale_centered(b, d, var, &shape, &axes, eps)
}

/// `F.layer_norm(x, gamma.shape, gamma, beta, eps)`: normalises over the
/// trailing `gamma.rank()` axes of `x` (whose sizes must equal `gamma`'s
/// shape), then applies `y * gamma + beta`. `beta` (if given) has
/// `gamma`'s shape. Without an affine part, use [`normalize`].
pub fn layer_norm(b: &mut Builder, x: Value, gamma: Value, beta: Option<Value>, eps: f64) -> Result<Value, IrError> {
    require_float(b, "layer_norm", x)?;
    check_eps("layer_norm", eps)?;
    let (xt, gt) = (b.ty(x)?.clone(), b.ty(gamma)?.clone());
    let k = gt.rank();
    if k == 0 || k > xt.rank() || xt.shape[xt.rank() - k..] != gt.shape[..] || gt.dtype != xt.dtype {
        return Err(IrError::invalid(
            "layer_norm",
            format!("gamma {gt} must match the trailing dims of the input {xt} (normalized_shape = gamma's shape)"),
        ));
    }
    if let Some(bv) = beta {
        let bt = b.ty(bv)?;
        if *bt != gt {
            return Err(IrError::invalid("layer_norm", format!("beta {bt} must have gamma's type {gt}")));
        }
    }
    let axes: Vec<usize> = (xt.rank() - k..xt.rank()).collect();
    let y = normalize(b, x, &axes, eps)?;
    // gamma/beta align with the trailing dims, i.e. NumPy broadcasting.
    let y = broadcast::binary(b, Binary::Mul, y, gamma)?;
    match beta {
        Some(bv) => broadcast::binary(b, Binary::Add, y, bv),
        None => Ok(y),
    }
}

/// Batch norm in training mode: normalises with the batch statistics over
/// `axes` (default: every axis except the channel axis 1, i.e. N and the
/// spatial axes of NCHW / NCL / NCDHW) and applies the per-channel affine
/// `y * gamma + beta`. Returns `(y, batch_mean, batch_var)`; the statistics
/// have the shape of the kept axes (`[C]` by default) and `batch_var` is the
/// biased variance used for normalising (PyTorch updates its running
/// variance with the unbiased `var * n / (n - 1)`; running statistics are
/// the caller's business). `gamma`/`beta`, if given, have the statistics'
/// shape.
pub fn batch_norm(
    b: &mut Builder,
    x: Value,
    gamma: Option<Value>,
    beta: Option<Value>,
    axes: Option<&[usize]>,
    eps: f64,
) -> Result<(Value, Value, Value), IrError> {
    require_float(b, "batch_norm", x)?;
    check_eps("batch_norm", eps)?;
    let xt = b.ty(x)?.clone();
    let rank = xt.rank();
    let axes: Vec<usize> = match axes {
        Some(a) => {
            check_axes("batch_norm", a, rank)?;
            let mut a = a.to_vec();
            a.sort_unstable();
            a
        }
        None => {
            if rank < 2 {
                return Err(IrError::invalid(
                    "batch_norm",
                    format!("the default axes need an input of rank >= 2 ([N, C, ...]), got {xt}"),
                ));
            }
            (0..rank).filter(|&a| a != 1).collect()
        }
    };
    let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    let stat_shape: Vec<usize> = kept.iter().map(|&a| xt.shape[a]).collect();
    for (name, p) in [("gamma", gamma), ("beta", beta)] {
        if let Some(p) = p {
            let pt = b.ty(p)?;
            if pt.shape != stat_shape || pt.dtype != xt.dtype {
                return Err(IrError::invalid(
                    "batch_norm",
                    format!("{name} must be {}{stat_shape:?} (the kept axes {kept:?} of {xt}), got {pt}", xt.dtype),
                ));
            }
        }
    }
    let (mean, var, d) = moments(b, x, &axes)?;
    let mut y = scale_centered(b, d, var, &xt.shape, &axes, eps)?;
    if let Some(g) = gamma {
        let g = expand_back(b, g, &xt.shape, &axes)?;
        y = b.mul(y, g)?;
    }
    if let Some(bt) = beta {
        let bt = expand_back(b, bt, &xt.shape, &axes)?;
        y = b.add(y, bt)?;
    }
    Ok((y, mean, var))
}

/// `F.group_norm(x, num_groups, gamma, beta, eps)`: `x [N, C, *spatial]`
/// (the batch axis is required) is split into `num_groups` groups of
/// `C / num_groups` consecutive channels; each (example, group) is
/// normalised over its channels and spatial positions with the biased
/// variance, then the per-channel affine `y * gamma + beta` (`[C]`) is
/// applied. Written as a reshape to `[N, G, C/G * prod(spatial)]` and
/// [`normalize`] over the last axis, so its derivatives and batching come
/// from those primitives.
pub fn group_norm(
    b: &mut Builder,
    x: Value,
    num_groups: usize,
    gamma: Option<Value>,
    beta: Option<Value>,
    eps: f64,
) -> Result<Value, IrError> {
    require_float(b, "group_norm", x)?;
    check_eps("group_norm", eps)?;
    let xt = b.ty(x)?.clone();
    if xt.rank() < 2 {
        return Err(IrError::invalid("group_norm", format!("expected an input [N, C, ...] of rank >= 2, got {xt}")));
    }
    let (n, c) = (xt.shape[0], xt.shape[1]);
    if num_groups == 0 || c % num_groups != 0 {
        return Err(IrError::invalid("group_norm", format!("num_groups = {num_groups} must divide the {c} channels")));
    }
    for (name, p) in [("gamma", gamma), ("beta", beta)] {
        if let Some(p) = p {
            let pt = b.ty(p)?;
            if pt.shape != [c] || pt.dtype != xt.dtype {
                return Err(IrError::invalid("group_norm", format!("{name} must be {}[{c}], got {pt}", xt.dtype)));
            }
        }
    }
    let per_group = xt.shape[1..].iter().product::<usize>() / num_groups;
    let g = b.reshape(x, &[n, num_groups, per_group])?;
    let g = normalize(b, g, &[2], eps)?;
    let mut y = b.reshape(g, &xt.shape)?;
    let others: Vec<usize> = (0..xt.rank()).filter(|&a| a != 1).collect();
    if let Some(gm) = gamma {
        let gm = expand_back(b, gm, &xt.shape, &others)?;
        y = b.mul(y, gm)?;
    }
    if let Some(bt) = beta {
        let bt = expand_back(b, bt, &xt.shape, &others)?;
        y = b.add(y, bt)?;
    }
    Ok(y)
}
