//! LSTM and GRU over `scan` (one layer, batch first: inputs `[B, T, I]`,
//! outputs `[B, T, H]`), with PyTorch's parameter names, layouts, gate
//! orders and initialisation (`U(±1/sqrt(H))` for every tensor).
//!
//! The input projection of every step is one matrix product before the
//! loop (`x @ W_ih.T + b_ih` over all `T` steps at once); only the
//! recurrent product runs inside the scan body. The IR size does not
//! depend on `T`, and reverse mode goes through the scan's own rules.

use crate::error::Error;
use crate::module::ctx::{Ctx, Module};
use crate::module::init::Init;
use crate::module::vars::{Param, Vars};
use crate::nn;
use crate::ops::{scan, ScanOpts};
use crate::trace::Tr;
use graft_core::IrError;

/// The four PyTorch tensors of a recurrent layer with `gates` gates.
#[derive(Debug, Clone)]
struct Weights {
    weight_ih: Param,
    weight_hh: Param,
    bias_ih: Param,
    bias_hh: Param,
}

impl Weights {
    fn new(vars: &Vars, gates: usize, input: usize, hidden: usize) -> Result<Weights, Error> {
        let init = Init::uniform_fan_in(hidden);
        Ok(Weights {
            weight_ih: vars.param("weight_ih", &[gates * hidden, input], init.clone())?,
            weight_hh: vars.param("weight_hh", &[gates * hidden, hidden], init.clone())?,
            bias_ih: vars.param("bias_ih", &[gates * hidden], init.clone())?,
            bias_hh: vars.param("bias_hh", &[gates * hidden], init)?,
        })
    }

    /// The traced tensors of this layer in `cx`.
    fn get(&self, cx: &Ctx) -> RecurrentWeights {
        RecurrentWeights {
            weight_ih: cx.get(&self.weight_ih),
            weight_hh: cx.get(&self.weight_hh),
            bias_ih: cx.get(&self.bias_ih),
            bias_hh: cx.get(&self.bias_hh),
        }
    }
}

/// The four tensors of a recurrent layer with `G` gates (PyTorch's
/// layouts): `weight_ih [G*H, I]`, `weight_hh [G*H, H]`, `bias_ih`,
/// `bias_hh` (`[G*H]`).
#[derive(Debug, Clone)]
pub struct RecurrentWeights {
    /// Input-to-hidden weights `[G*H, I]`.
    pub weight_ih: Tr,
    /// Hidden-to-hidden weights `[G*H, H]`.
    pub weight_hh: Tr,
    /// Input-to-hidden bias `[G*H]`.
    pub bias_ih: Tr,
    /// Hidden-to-hidden bias `[G*H]`.
    pub bias_hh: Tr,
}

impl RecurrentWeights {
    /// Checks the weights (for `gates` gates), `x [B, T, I]` and the
    /// initial states `[B, H]`; returns `(B, T, H)`, or the poisoned output.
    fn check(&self, op: &str, gates: usize, x: &Tr, states: &[&Tr]) -> Result<(usize, usize, usize), Tr> {
        let s = x.shape();
        let bad = |msg: String| Err(x.lift(|_, _| Err(IrError::invalid(op, msg))));
        let (ih, hh) = (self.weight_ih.shape(), self.weight_hh.shape());
        if hh.len() != 2 || hh[0] != gates * hh[1] {
            return bad(format!("expected weight_hh [{gates} * hidden, hidden], got {hh:?}"));
        }
        let hidden = hh[1];
        if ih.len() != 2 || ih[0] != gates * hidden {
            return bad(format!("expected weight_ih [{}, input], got {ih:?}", gates * hidden));
        }
        for (name, b) in [("bias_ih", &self.bias_ih), ("bias_hh", &self.bias_hh)] {
            if b.shape() != [gates * hidden] {
                return bad(format!("expected {name} [{}], got {:?}", gates * hidden, b.shape()));
            }
        }
        if s.len() != 3 || s[2] != ih[1] {
            return bad(format!("expected an input [batch, time, {}], got {s:?}", ih[1]));
        }
        for st in states {
            if st.shape() != [s[0], hidden] {
                return bad(format!("expected initial states [{}, {hidden}], got {:?}", s[0], st.shape()));
            }
        }
        Ok((s[0], s[1], hidden))
    }

    /// `x @ W_ih.T + b_ih` for every step, time-major: `[T, B, gates*H]`.
    fn project(&self, x: &Tr) -> Tr {
        nn::linear(x, &self.weight_ih, Some(&self.bias_ih)).transpose(Some(&[1, 0, 2]))
    }
}

fn zeros(x: &Tr, batch: usize, hidden: usize) -> Tr {
    let dtype = x.ty().map_or(graft_core::DType::F32, |t| t.dtype);
    x.zeros(&[batch, hidden], dtype)
}

/// `nn.LSTM(batch_first=True)`'s one layer over explicit weights (gates
/// `i, f, g, o`): runs over `x [B, T, I]` from `(h0, c0)` (zeros when
/// `None`) and returns `(outputs [B, T, H], h_T, c_T)`.
pub fn lstm(x: &Tr, w: &RecurrentWeights, state: Option<(&Tr, &Tr)>) -> (Tr, Tr, Tr) {
    let given: Vec<&Tr> = state.map(|(h, c)| vec![h, c]).unwrap_or_default();
    let (b, t, hs) = match w.check("lstm", 4, x, &given) {
        Ok(bth) => bth,
        Err(p) => return (p.clone(), p.clone(), p),
    };
    let (h0, c0) = match state {
        Some((h, c)) => (h.clone(), c.clone()),
        None => (zeros(x, b, hs), zeros(x, b, hs)),
    };
    let consts = [w.weight_hh.clone(), w.bias_hh.clone()];
    let (carry, ys) = scan(&consts, &[h0, c0], &[w.project(x)], ScanOpts::new(t), |k, c, xs| {
        let g = &xs[0] + &nn::linear(&c[0], &k[0], Some(&k[1]));
        let (i, f) = (gate(&g, 0, hs).sigmoid(), gate(&g, 1, hs).sigmoid());
        let (gg, o) = (gate(&g, 2, hs).tanh(), gate(&g, 3, hs).sigmoid());
        let c2 = f * &c[1] + i * gg;
        let h2 = o * c2.tanh();
        (vec![h2.clone(), c2], vec![h2])
    });
    let out = ys.first().map_or_else(|| x.clone(), |y| y.transpose(Some(&[1, 0, 2])));
    let mut carry = carry.into_iter();
    let h = carry.next().unwrap_or_else(|| out.clone());
    let c = carry.next().unwrap_or_else(|| out.clone());
    (out, h, c)
}

/// `nn.GRU(batch_first=True)`'s one layer over explicit weights (gates
/// `r, z, n`: `n = tanh(W_in x + b_in + r (W_hn h + b_hn))`,
/// `h' = (1 - z) n + z h`): runs over `x [B, T, I]` from `h0` (zeros when
/// `None`) and returns `(outputs [B, T, H], h_T)`.
pub fn gru(x: &Tr, w: &RecurrentWeights, h0: Option<&Tr>) -> (Tr, Tr) {
    let given: Vec<&Tr> = h0.into_iter().collect();
    let (b, t, hs) = match w.check("gru", 3, x, &given) {
        Ok(bth) => bth,
        Err(p) => return (p.clone(), p),
    };
    let h0 = h0.cloned().unwrap_or_else(|| zeros(x, b, hs));
    let consts = [w.weight_hh.clone(), w.bias_hh.clone()];
    let (carry, ys) = scan(&consts, &[h0], &[w.project(x)], ScanOpts::new(t), |k, c, xs| {
        let hh = nn::linear(&c[0], &k[0], Some(&k[1]));
        let r = (gate(&xs[0], 0, hs) + gate(&hh, 0, hs)).sigmoid();
        let z = (gate(&xs[0], 1, hs) + gate(&hh, 1, hs)).sigmoid();
        let n = (gate(&xs[0], 2, hs) + r * gate(&hh, 2, hs)).tanh();
        let h2 = &n + &(z * (&c[0] - &n));
        (vec![h2.clone()], vec![h2])
    });
    let out = ys.first().map_or_else(|| x.clone(), |y| y.transpose(Some(&[1, 0, 2])));
    let h = carry.into_iter().next().unwrap_or_else(|| out.clone());
    (out, h)
}

/// Gate `k` of a `[.., gates*H]` pre-activation.
fn gate(g: &Tr, k: usize, h: usize) -> Tr {
    g.slice_axis(-1, Some((k * h) as isize), Some(((k + 1) * h) as isize), 1)
}

/// `nn.LSTM(input, hidden, batch_first=True)`, one layer; gates `i, f, g, o`.
#[derive(Debug, Clone)]
pub struct Lstm {
    w: Weights,
}

impl Lstm {
    /// Registers `weight_ih [4H, I]`, `weight_hh [4H, H]`, `bias_ih`, `bias_hh` (`[4H]`).
    pub fn new(vars: &Vars, input: usize, hidden: usize) -> Result<Lstm, Error> {
        Ok(Lstm { w: Weights::new(vars, 4, input, hidden)? })
    }

    /// Runs over `x [B, T, I]` from `(h0, c0)` (zeros when `None`):
    /// `(outputs [B, T, H], h_T, c_T)`.
    pub fn run(&self, cx: &Ctx, x: &Tr, state: Option<(&Tr, &Tr)>) -> (Tr, Tr, Tr) {
        lstm(x, &self.w.get(cx), state)
    }
}

impl Module for Lstm {
    /// The outputs `[B, T, H]` from zero initial states.
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        self.run(cx, x, None).0
    }
}

/// `nn.GRU(input, hidden, batch_first=True)`, one layer; gates `r, z, n`:
/// `n = tanh(W_in x + b_in + r (W_hn h + b_hn))`, `h' = (1 - z) n + z h`.
#[derive(Debug, Clone)]
pub struct Gru {
    w: Weights,
}

impl Gru {
    /// Registers `weight_ih [3H, I]`, `weight_hh [3H, H]`, `bias_ih`, `bias_hh` (`[3H]`).
    pub fn new(vars: &Vars, input: usize, hidden: usize) -> Result<Gru, Error> {
        Ok(Gru { w: Weights::new(vars, 3, input, hidden)? })
    }

    /// Runs over `x [B, T, I]` from `h0` (zeros when `None`): `(outputs [B, T, H], h_T)`.
    pub fn run(&self, cx: &Ctx, x: &Tr, h0: Option<&Tr>) -> (Tr, Tr) {
        gru(x, &self.w.get(cx), h0)
    }
}

impl Module for Gru {
    /// The outputs `[B, T, H]` from a zero initial state.
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        self.run(cx, x, None).0
    }
}
