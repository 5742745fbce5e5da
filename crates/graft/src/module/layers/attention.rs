//! Multi-head attention and a pre-norm transformer block.

use super::basic::{Activation, Dropout, Linear};
use super::norm::LayerNorm;
use crate::error::Error;
use crate::module::ctx::{Ctx, Module};
use crate::module::init::Init;
use crate::module::vars::{Param, Vars};
use crate::nn;
use crate::trace::Tr;
use graft_core::IrError;

/// Multi-head attention over `[batch, seq, d_model]`: projections
/// `wq, wk, wv, wo` (`[d_model, d_model]`, applied as `x @ W.T`, Xavier
/// uniform like PyTorch's `in_proj_weight`) with optional biases `bq, bk,
/// bv, bo` (zeros), `n_heads` heads of size `d_model / n_heads`, scaled
/// dot-product attention per head (`causal`: position `i` attends to
/// `j <= i`).
#[derive(Debug, Clone)]
pub struct MultiHeadAttention {
    /// Query projection.
    pub wq: Param,
    /// Key projection.
    pub wk: Param,
    /// Value projection.
    pub wv: Param,
    /// Output projection.
    pub wo: Param,
    /// Biases `[bq, bk, bv, bo]`, if any.
    pub biases: Option<[Param; 4]>,
    n_heads: usize,
    d_model: usize,
    causal: bool,
}

impl MultiHeadAttention {
    /// Registers the projections (and biases) under `vars`.
    pub fn new(
        vars: &Vars,
        d_model: usize,
        n_heads: usize,
        bias: bool,
        causal: bool,
    ) -> Result<MultiHeadAttention, Error> {
        if n_heads == 0 || !d_model.is_multiple_of(n_heads) {
            let msg = format!("n_heads = {n_heads} must divide d_model = {d_model}");
            return Err(IrError::invalid("multi_head_attention", msg).into());
        }
        let w = |n: &str| vars.param(n, &[d_model, d_model], Init::xavier());
        let (wq, wk, wv, wo) = (w("wq")?, w("wk")?, w("wv")?, w("wo")?);
        let biases = if bias {
            let b = |n: &str| vars.param(n, &[d_model], Init::Zeros);
            Some([b("bq")?, b("bk")?, b("bv")?, b("bo")?])
        } else {
            None
        };
        Ok(MultiHeadAttention { wq, wk, wv, wo, biases, n_heads, d_model, causal })
    }

    /// Attention of queries `q [B, Lq, D]` over keys `k` and values `v`
    /// (`[B, Lk, D]`); `mask` (bool: may attend, float: added to the
    /// scores) broadcasts to `[B, heads, Lq, Lk]`.
    pub fn attend(&self, cx: &Ctx, q: &Tr, k: &Tr, v: &Tr, mask: Option<&Tr>) -> Tr {
        let d = self.d_model;
        for (name, t) in [("q", q), ("k", k), ("v", v)] {
            let s = t.shape();
            if s.len() != 3 || s[2] != d {
                let msg = format!("{name} must be [batch, seq, {d}], got {s:?}");
                return q.lift(|_, _| Err(IrError::invalid("multi_head_attention", msg)));
            }
        }
        let bias = |i: usize| self.biases.as_ref().map(|b| cx.get(&b[i]));
        let (h, dh) = (self.n_heads as isize, (d / self.n_heads) as isize);
        let heads = |x: &Tr, w: &Param, i: usize| {
            let b = bias(i);
            let p = nn::linear(x, &cx.get(w), b.as_ref());
            let s = x.shape();
            p.reshape(&[s[0] as isize, s[1] as isize, h, dh]).transpose(Some(&[0, 2, 1, 3]))
        };
        let o = nn::scaled_dot_product_attention(
            &heads(q, &self.wq, 0),
            &heads(k, &self.wk, 1),
            &heads(v, &self.wv, 2),
            self.causal,
            mask,
            None,
        );
        let s = q.shape();
        let o = o.transpose(Some(&[0, 2, 1, 3])).reshape(&[s[0] as isize, s[1] as isize, d as isize]);
        let bo = bias(3);
        nn::linear(&o, &cx.get(&self.wo), bo.as_ref())
    }
}

impl Module for MultiHeadAttention {
    /// Self-attention: `attend(x, x, x)`.
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        self.attend(cx, x, x, x, None)
    }
}

/// A pre-norm transformer block (GPT-2 style):
/// `x + drop(attn(ln1(x)))`, then `h + drop(fc2(gelu(fc1(ln2(h)))))`.
/// Paths: `ln1`, `attn`, `ln2`, `mlp.fc1`, `mlp.fc2`.
#[derive(Debug, Clone)]
pub struct TransformerBlock {
    /// Norm before attention.
    pub ln1: LayerNorm,
    /// Self-attention.
    pub attn: MultiHeadAttention,
    /// Norm before the MLP.
    pub ln2: LayerNorm,
    /// MLP input layer `[d_ff, d_model]`.
    pub fc1: Linear,
    /// MLP output layer `[d_model, d_ff]`.
    pub fc2: Linear,
    drop: Dropout,
}

impl TransformerBlock {
    /// `d_ff` hidden units in the MLP (4 `d_model` usually); `dropout` on
    /// both residual branches (0 for none).
    pub fn new(
        vars: &Vars,
        d_model: usize,
        n_heads: usize,
        d_ff: usize,
        causal: bool,
        dropout: f64,
    ) -> Result<TransformerBlock, Error> {
        let mlp = vars.pp("mlp");
        Ok(TransformerBlock {
            ln1: LayerNorm::new(&vars.pp("ln1"), &[d_model], nn::DEFAULT_EPS)?,
            attn: MultiHeadAttention::new(&vars.pp("attn"), d_model, n_heads, true, causal)?,
            ln2: LayerNorm::new(&vars.pp("ln2"), &[d_model], nn::DEFAULT_EPS)?,
            fc1: Linear::new(&mlp.pp("fc1"), d_model, d_ff, true)?,
            fc2: Linear::new(&mlp.pp("fc2"), d_ff, d_model, true)?,
            drop: Dropout::new(vars, dropout)?,
        })
    }
}

impl Module for TransformerBlock {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        let a = self.attn.forward(cx, &self.ln1.forward(cx, x));
        let h = x + &self.drop.forward(cx, &a);
        let m = self.fc2.forward(cx, &Activation::Gelu.apply(&self.fc1.forward(cx, &self.ln2.forward(cx, &h))));
        &h + &self.drop.forward(cx, &m)
    }
}
