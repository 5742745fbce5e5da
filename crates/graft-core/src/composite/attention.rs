//! Attention: scaled dot-product attention and multi-head attention.
//!
//! Conventions:
//! - Layout `[..., seq, features]`: queries `[..., Lq, d]`, keys
//!   `[..., Lk, d]`, values `[..., Lk, dv]`, output `[..., Lq, dv]`; the
//!   leading dims are batch dims and must be equal in q, k and v.
//! - Scores are `q k^T * scale` with `scale = 1/sqrt(d)` by default,
//!   softmax over the keys (last axis).
//! - Masks (like `F.scaled_dot_product_attention`): a bool mask is "true =
//!   may attend"; a float mask is added to the scores. Either broadcasts to
//!   `[..., Lq, Lk]` with NumPy rules.
//! - `causal`: query `i` may attend key `j` iff `j <= i` (the top-left
//!   aligned lower triangle, as in PyTorch's `is_causal` and
//!   `jax.nn.dot_product_attention`), built from two iotas and a compare.
//! - Masked scores are set to the dtype's most negative finite value rather
//!   than `-inf` (JAX's choice): partly masked rows are exactly the same
//!   (`exp` underflows to 0), and a fully masked row averages the values
//!   uniformly instead of producing NaN.
//! - [`multi_head_attention`] takes PyTorch-style projection weights
//!   `[out, in] = [d_model, d_model]` applied as `x @ W^T` (the layout of
//!   `nn.Linear`, and of the row blocks of `nn.MultiheadAttention`'s
//!   `in_proj_weight` and its `out_proj.weight`), without biases.

use super::broadcast;
use super::linalg::linear;
use super::reduce::softmax;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};

/// The most negative finite value of a float dtype.
fn lowest(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        f32::MIN as f64
    } else {
        f64::MIN
    }
}

/// `softmax(q k^T * scale + mask) v`; see the module docs for shapes and
/// mask conventions. `scale = None` uses `1/sqrt(d)`.
pub fn scaled_dot_product_attention(
    b: &mut Builder,
    q: Value,
    k: Value,
    v: Value,
    causal: bool,
    mask: Option<Value>,
    scale: Option<f64>,
) -> Result<Value, IrError> {
    let op = "scaled_dot_product_attention";
    let (qt, kt, vt) = (b.ty(q)?.clone(), b.ty(k)?.clone(), b.ty(v)?.clone());
    let r = qt.rank();
    let ok = r >= 2
        && kt.rank() == r
        && vt.rank() == r
        && qt.dtype.is_float()
        && kt.dtype == qt.dtype
        && vt.dtype == qt.dtype
        && qt.shape[..r - 2] == kt.shape[..r - 2]
        && kt.shape[..r - 2] == vt.shape[..r - 2]
        && qt.shape[r - 1] == kt.shape[r - 1]
        && kt.shape[r - 2] == vt.shape[r - 2];
    if !ok {
        return Err(IrError::invalid(
            op,
            format!("expected float q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv] with equal batch dims; got q {qt}, k {kt}, v {vt}"),
        ));
    }
    let (lq, lk, d) = (qt.shape[r - 2], kt.shape[r - 2], qt.shape[r - 1]);
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    if !scale.is_finite() {
        return Err(IrError::invalid(op, format!("scale must be finite, got {scale}")));
    }
    let batch: Vec<usize> = (0..r - 2).collect();
    // scores [..., Lq, Lk]
    let s = b.dot_general(q, k, &[r - 1], &[r - 1], &batch, &batch)?;
    let sc = b.scalar(scale, qt.dtype)?;
    let mut s = broadcast::binary(b, Binary::Mul, s, sc)?;
    let score_shape = b.ty(s)?.shape.clone();
    let low = b.scalar(lowest(qt.dtype), qt.dtype)?;
    if let Some(m) = mask {
        let mt = b.ty(m)?.clone();
        let fits =
            broadcast::broadcast_shapes(op, &mt.shape, &score_shape).map(|sh| sh == score_shape).unwrap_or(false);
        if !fits || !(mt.dtype == DType::Bool || mt.dtype == qt.dtype) {
            return Err(IrError::invalid(
                op,
                format!(
                    "mask must be bool or {} and broadcast to the scores' shape {score_shape:?}; got {mt}",
                    qt.dtype
                ),
            ));
        }
        s = if mt.dtype == DType::Bool {
            broadcast::select(b, m, s, low)?
        } else {
            broadcast::binary(b, Binary::Add, s, m)?
        };
    }
    if causal {
        let rows = b.iota(DType::I64, &[lq, lk], 0)?;
        let cols = b.iota(DType::I64, &[lq, lk], 1)?;
        let allowed = b.compare(Compare::Le, cols, rows)?;
        s = broadcast::select(b, allowed, s, low)?;
    }
    let p = softmax(b, s, r - 1)?;
    // out [..., Lq, dv]
    b.dot_general(p, v, &[r - 1], &[r - 2], &batch, &batch)
}

/// Multi-head attention without biases (see the module docs for the
/// weight layout): inputs `[batch, seq, d_model]` (query length may differ
/// from key/value length), `n_heads` dividing `d_model`, head size
/// `d_model / n_heads`, scaled dot-product attention per head (`causal`
/// and `mask` as in [`scaled_dot_product_attention`]; the mask broadcasts
/// to `[batch, n_heads, Lq, Lk]`), heads concatenated and projected with
/// `wo`.
pub fn multi_head_attention(
    b: &mut Builder,
    q_in: Value,
    k_in: Value,
    v_in: Value,
    wq: Value,
    wk: Value,
    wv: Value,
    wo: Value,
    n_heads: usize,
    causal: bool,
    mask: Option<Value>,
) -> Result<Value, IrError> {
    let op = "multi_head_attention";
    let (qt, kt, vt) = (b.ty(q_in)?.clone(), b.ty(k_in)?.clone(), b.ty(v_in)?.clone());
    let ok = qt.rank() == 3
        && kt.rank() == 3
        && vt.rank() == 3
        && kt.shape == vt.shape
        && qt.shape[0] == kt.shape[0]
        && qt.shape[2] == kt.shape[2];
    if !ok {
        return Err(IrError::invalid(
            op,
            format!("expected q [batch, Lq, d_model] and k, v [batch, Lk, d_model]; got q {qt}, k {kt}, v {vt}"),
        ));
    }
    let (batch, lq, dm) = (qt.shape[0], qt.shape[1], qt.shape[2]);
    let lk = kt.shape[1];
    if n_heads == 0 || dm % n_heads != 0 {
        return Err(IrError::invalid(op, format!("n_heads = {n_heads} must divide d_model = {dm}")));
    }
    for (name, w) in [("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)] {
        let wt = b.ty(w)?;
        if wt.shape != [dm, dm] {
            return Err(IrError::invalid(op, format!("{name} must be [d_model, d_model] = [{dm}, {dm}], got {wt}")));
        }
    }
    let dh = dm / n_heads;
    // [B, L, D] -> [B, L, H, dh] -> [B, H, L, dh]
    let heads = |b: &mut Builder, x: Value, w: Value, l: usize| -> Result<Value, IrError> {
        let p = linear(b, x, w, None)?;
        let p = b.reshape(p, &[batch, l, n_heads, dh])?;
        b.transpose(p, &[0, 2, 1, 3])
    };
    let q = heads(b, q_in, wq, lq)?;
    let k = heads(b, k_in, wk, lk)?;
    let v = heads(b, v_in, wv, lk)?;
    let o = scaled_dot_product_attention(b, q, k, v, causal, mask, None)?;
    // [B, H, Lq, dh] -> [B, Lq, H, dh] -> [B, Lq, D]
    let o = b.transpose(o, &[0, 2, 1, 3])?;
    let o = b.reshape(o, &[batch, lq, dm])?;
    linear(b, o, wo, None)
}
