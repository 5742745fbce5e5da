//! Neural-network functions over traced tensors: layers (`linear`,
//! `layer_norm`, `batch_norm`, `group_norm`), activations, losses and attention. All
//! forward to `graft_core::composite`; see there for the exact conventions
//! (PyTorch weight layouts, `eps` placement, mask semantics).
//! Convolution, pooling, embedding, one-hot and dropout live in
//! [`crate::layers`] and are re-exported here.

use crate::trace::{Axes, Tr};
use graft_core::composite::{attention, linalg, loss, norm};

pub use crate::nn_layers::*;
pub use graft_core::composite::norm::DEFAULT_EPS;

/// `F.linear(x, w, bias)`: `x [..., in]`, `w [out, in]`, `y = x @ w.T + bias`.
pub fn linear(x: &Tr, w: &Tr, bias: Option<&Tr>) -> Tr {
    match bias {
        Some(bv) => x.lift_with(&[w, bv], |b, v| linalg::linear(b, v[0], v[1], Some(v[2]))),
        None => x.lift2(w, |b, x, w| linalg::linear(b, x, w, None)),
    }
}

/// `F.layer_norm(x, gamma.shape, gamma, beta, eps)`: normalises over the
/// trailing `gamma.rank()` axes, then `* gamma + beta`.
pub fn layer_norm(x: &Tr, gamma: &Tr, beta: Option<&Tr>, eps: f64) -> Tr {
    match beta {
        Some(bt) => x.lift_with(&[gamma, bt], |b, v| norm::layer_norm(b, v[0], v[1], Some(v[2]), eps)),
        None => x.lift2(gamma, |b, x, g| norm::layer_norm(b, x, g, None, eps)),
    }
}

/// `(x - mean) / sqrt(var + eps)` over `axes` (no affine part).
pub fn normalize(x: &Tr, axes: impl Into<Axes>, eps: f64) -> Tr {
    let axes = axes.into();
    x.lift(|b, v| {
        let a = axes.resolve("normalize", b.ty(v)?.rank())?;
        norm::normalize(b, v, &a, eps)
    })
}

/// Batch norm in training mode over every axis but axis 1 (`[N, C, ...]`),
/// or over `axes` if given. Returns `(y, batch_mean, batch_var)` (biased
/// variance), statistics shaped like the kept axes.
pub fn batch_norm(x: &Tr, gamma: Option<&Tr>, beta: Option<&Tr>, axes: Option<Axes>, eps: f64) -> (Tr, Tr, Tr) {
    let mut others = vec![];
    others.extend(gamma);
    others.extend(beta);
    let (has_g, has_b) = (gamma.is_some(), beta.is_some());
    let mut out = x.lift_many(&others, 3, |b, v| {
        let axes = match &axes {
            Some(a) => Some(a.resolve("batch_norm", b.ty(v[0])?.rank())?),
            None => None,
        };
        let g = has_g.then(|| v[1]);
        let bt = has_b.then(|| v[1 + usize::from(has_g)]);
        let (y, m, var) = norm::batch_norm(b, v[0], g, bt, axes.as_deref(), eps)?;
        Ok(vec![y, m, var])
    });
    let var = out.pop().expect("internal error: lift_many returns n_out handles");
    let mean = out.pop().expect("internal error: lift_many returns n_out handles");
    let y = out.pop().expect("internal error: lift_many returns n_out handles");
    (y, mean, var)
}

/// `F.group_norm(x, num_groups, gamma, beta, eps)` on `[N, C, ...]`:
/// statistics per example over groups of `C / num_groups` consecutive
/// channels (and every spatial position), then a per-channel affine
/// (`gamma`, `beta`: `[C]`).
pub fn group_norm(x: &Tr, num_groups: usize, gamma: Option<&Tr>, beta: Option<&Tr>, eps: f64) -> Tr {
    let mut others = vec![];
    others.extend(gamma);
    others.extend(beta);
    let (has_g, has_b) = (gamma.is_some(), beta.is_some());
    x.lift_with(&others, |b, v| {
        let g = has_g.then(|| v[1]);
        let bt = has_b.then(|| v[1 + usize::from(has_g)]);
        norm::group_norm(b, v[0], num_groups, g, bt, eps)
    })
}

/// `max(x, 0)`.
pub fn relu(x: &Tr) -> Tr {
    x.relu()
}
/// Exact GELU.
pub fn gelu(x: &Tr) -> Tr {
    x.gelu()
}
/// `x * sigmoid(x)`.
pub fn silu(x: &Tr) -> Tr {
    x.silu()
}
/// Stable `log(1 + e^x)`.
pub fn softplus(x: &Tr) -> Tr {
    x.softplus()
}
/// Logistic sigmoid.
pub fn sigmoid(x: &Tr) -> Tr {
    x.sigmoid()
}
/// Stable softmax along `axis`.
pub fn softmax(x: &Tr, axis: isize) -> Tr {
    x.softmax(axis)
}
/// Stable log-softmax along `axis`.
pub fn log_softmax(x: &Tr, axis: isize) -> Tr {
    x.log_softmax(axis)
}

/// Mean squared error over all elements (shapes must match).
pub fn mse(pred: &Tr, target: &Tr) -> Tr {
    pred.lift2(target, loss::mse)
}

/// Mean softmax cross-entropy of `logits` against integer class `labels`
/// (logits' shape without `axis`); `axis = -1` for `[batch, classes]`.
pub fn cross_entropy(logits: &Tr, labels: &Tr, axis: isize) -> Tr {
    logits.lift2(labels, |b, l, y| {
        let a = Axes::resolve_axis("cross_entropy", axis, b.ty(l)?.rank())?;
        loss::cross_entropy(b, l, y, a)
    })
}

/// Mean binary cross-entropy on logits (stable form).
pub fn binary_cross_entropy_with_logits(logits: &Tr, targets: &Tr) -> Tr {
    logits.lift2(targets, loss::binary_cross_entropy_with_logits)
}

/// `softmax(q k^T * scale + mask) v` over `[..., L, d]` tensors; a bool
/// mask means "may attend", a float mask is added; `scale` defaults to
/// `1/sqrt(d)`.
pub fn scaled_dot_product_attention(q: &Tr, k: &Tr, v: &Tr, causal: bool, mask: Option<&Tr>, scale: Option<f64>) -> Tr {
    let mut others = vec![k, v];
    others.extend(mask);
    q.lift_with(&others, |b, x| {
        attention::scaled_dot_product_attention(b, x[0], x[1], x[2], causal, x.get(3).copied(), scale)
    })
}

/// Multi-head attention over `[batch, seq, d_model]` inputs with PyTorch
/// layout weights `[d_model, d_model]` applied as `x @ W.T` (no biases).
pub fn multi_head_attention(
    q_in: &Tr,
    k_in: &Tr,
    v_in: &Tr,
    wq: &Tr,
    wk: &Tr,
    wv: &Tr,
    wo: &Tr,
    n_heads: usize,
    causal: bool,
    mask: Option<&Tr>,
) -> Tr {
    let mut others = vec![k_in, v_in, wq, wk, wv, wo];
    others.extend(mask);
    q_in.lift_with(&others, |b, x| {
        attention::multi_head_attention(b, x[0], x[1], x[2], x[3], x[4], x[5], x[6], n_heads, causal, x.get(7).copied())
    })
}
