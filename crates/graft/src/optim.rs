//! Optimizers compiled into the training step (seed 004's
//! `compileModule(model, forward, {inputs, adam})`): the update is traced
//! into the same graph as the forward and backward passes, so one call of
//! the compiled step runs forward, backward and update together.
//!
//! The update rules follow optax's definitions exactly (so a run matches
//! optax step for step; `tests/all/optim.rs` checks 100 steps of every
//! optimizer against trajectories recorded from optax in float64):
//! - `Sgd`: `p -= lr g`; `Momentum { beta, nesterov }`: `m = g + beta m`,
//!   `p -= lr m` (Nesterov: `p -= lr (g + beta m)`).
//! - `Adam`/`AdamW`: bias-corrected moments,
//!   `p -= lr (m^ / (sqrt(v^) + eps) + wd p)` (AdamW's decoupled decay,
//!   only on the parameters the mask selects).
//! - `RmsProp { decay, eps }`: `v = decay v + (1 - decay) g^2`,
//!   `p -= lr g / sqrt(v + eps)`.
//! - `Adagrad { initial, eps }`: `s += g^2`, `p -= lr g / sqrt(s + eps)`.
//! - `Lion { b1, b2 }`: `p -= lr (sign((1 - b1) g + b1 m) + wd p)`,
//!   `m = (1 - b2) g + b2 m`.
//!
//! The learning rate is a [`Schedule`] evaluated in the graph from the step
//! count (an f64 scalar input), so a schedule never recompiles anything;
//! `clip_global_norm` rescales the gradients first, as
//! `optax.clip_by_global_norm` does.

mod checkpoint;

use crate::error::Error;
use crate::function::{jit_n, Compiled, Jit};
use crate::trace::{IntoOutputs, Tr};
use graft_core::ad::Wrt;
use graft_core::ops::collective::Axis;
use graft_core::{Tensor, TensorType};
use std::sync::Arc;

/// A learning rate as a function of the step count `t` (0 for the first step).
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// The same rate at every step.
    Constant(f64),
    /// `init`, multiplied by each `scale` from its step `boundary` on
    /// (`optax.piecewise_constant_schedule`).
    Piecewise {
        /// Rate before the first boundary.
        init: f64,
        /// `(boundary, scale)` pairs.
        boundaries: Vec<(u64, f64)>,
    },
    /// `init ((1 - alpha) (1 + cos(pi min(t, steps) / steps)) / 2 + alpha)`
    /// (`optax.cosine_decay_schedule`).
    Cosine {
        /// Rate at step 0.
        init: f64,
        /// Steps to decay over.
        steps: u64,
        /// Final rate as a fraction of `init`.
        alpha: f64,
    },
    /// Linear warm-up from `init` to `peak` over `warmup` steps, then a
    /// cosine decay to `end` at step `steps` (`optax.warmup_cosine_decay_schedule`).
    WarmupCosine {
        /// Rate at step 0.
        init: f64,
        /// Rate at the end of the warm-up.
        peak: f64,
        /// Warm-up steps.
        warmup: u64,
        /// Total steps (warm-up included).
        steps: u64,
        /// Final rate.
        end: f64,
    },
}

impl Schedule {
    /// The rate at step `t` (traced: `t` is the step-count scalar).
    pub fn at(&self, t: &Tr) -> Tr {
        match self {
            Schedule::Constant(lr) => t.scalar_like(*lr),
            Schedule::Piecewise { init, boundaries } => {
                let mut lr = t.scalar_like(*init);
                for &(b, scale) in boundaries {
                    let past = t.ge(&t.scalar_like(b as f64));
                    lr = past.select(&(&lr * scale), &lr);
                }
                lr
            }
            Schedule::Cosine { init, steps, alpha } => cosine(t, *init, *steps, *alpha),
            Schedule::WarmupCosine { init, peak, warmup, steps, end } => {
                let w = (*warmup).max(1) as f64;
                let frac = t.minimum(&t.scalar_like(w)) * (1.0 / w);
                let warm = frac * (peak - init) + *init;
                let after = &(t - *warmup as f64);
                let alpha = if *peak == 0.0 { 0.0 } else { end / peak };
                let decay = cosine(after, *peak, steps.saturating_sub(*warmup), alpha);
                t.lt(&t.scalar_like(*warmup as f64)).select(&warm, &decay)
            }
        }
    }
}

fn cosine(t: &Tr, init: f64, steps: u64, alpha: f64) -> Tr {
    let s = steps.max(1) as f64;
    let c = t.minimum(&t.scalar_like(s));
    let cos = (c * (std::f64::consts::PI / s)).cos();
    ((cos + 1.0) * (0.5 * (1.0 - alpha)) + alpha) * init
}

/// The update rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// Plain gradient descent.
    Sgd,
    /// Heavy-ball momentum (`nesterov`: look-ahead form).
    Momentum {
        /// Momentum coefficient.
        beta: f64,
        /// Nesterov's variant.
        nesterov: bool,
    },
    /// Adam (Kingma and Ba); with a weight decay it is AdamW.
    Adam {
        /// First-moment decay.
        b1: f64,
        /// Second-moment decay.
        b2: f64,
        /// Denominator term.
        eps: f64,
    },
    /// RMSprop (optax's form: `eps` inside the square root).
    RmsProp {
        /// Decay of the squared-gradient average.
        decay: f64,
        /// Term inside the square root.
        eps: f64,
    },
    /// Adagrad.
    Adagrad {
        /// Initial value of the squared-gradient sum.
        initial: f64,
        /// Term inside the square root.
        eps: f64,
    },
    /// Lion (Chen et al. 2023): the sign of an interpolated momentum.
    Lion {
        /// Interpolation for the update.
        b1: f64,
        /// Momentum decay.
        b2: f64,
    },
}

/// An optimizer: a rule, a learning-rate schedule, optional global-norm
/// clipping and decoupled weight decay on the parameters a mask selects.
#[derive(Clone)]
pub struct Optimizer {
    /// The update rule.
    pub rule: Rule,
    /// The learning rate.
    pub lr: Schedule,
    /// Rescale the gradients to this global norm when it is exceeded.
    pub clip_global_norm: Option<f64>,
    /// Decoupled weight decay (AdamW, Lion).
    pub weight_decay: f64,
    /// Which parameters (by name) are decayed; all when `None`.
    pub decay_mask: Option<Arc<dyn Fn(&str) -> bool>>,
}

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optimizer")
            .field("rule", &self.rule)
            .field("lr", &self.lr)
            .field("clip_global_norm", &self.clip_global_norm)
            .field("weight_decay", &self.weight_decay)
            .field("decay_mask", &self.decay_mask.as_ref().map(|_| "fn"))
            .finish()
    }
}

impl Optimizer {
    fn new(rule: Rule, lr: Schedule) -> Optimizer {
        Optimizer { rule, lr, clip_global_norm: None, weight_decay: 0.0, decay_mask: None }
    }

    /// Gradient descent.
    pub fn sgd(lr: Schedule) -> Optimizer {
        Optimizer::new(Rule::Sgd, lr)
    }

    /// Momentum (`nesterov`: Nesterov's look-ahead form).
    pub fn momentum(lr: Schedule, beta: f64, nesterov: bool) -> Optimizer {
        Optimizer::new(Rule::Momentum { beta, nesterov }, lr)
    }

    /// Adam with optax's defaults (`b1 = 0.9`, `b2 = 0.999`, `eps = 1e-8`).
    pub fn adam(lr: Schedule) -> Optimizer {
        Optimizer::new(Rule::Adam { b1: 0.9, b2: 0.999, eps: 1e-8 }, lr)
    }

    /// AdamW: Adam with decoupled weight decay.
    pub fn adamw(lr: Schedule, weight_decay: f64) -> Optimizer {
        Optimizer { weight_decay, ..Optimizer::adam(lr) }
    }

    /// RMSprop.
    pub fn rmsprop(lr: Schedule, decay: f64, eps: f64) -> Optimizer {
        Optimizer::new(Rule::RmsProp { decay, eps }, lr)
    }

    /// Adagrad.
    pub fn adagrad(lr: Schedule, initial: f64, eps: f64) -> Optimizer {
        Optimizer::new(Rule::Adagrad { initial, eps }, lr)
    }

    /// Lion with decoupled weight decay.
    pub fn lion(lr: Schedule, b1: f64, b2: f64, weight_decay: f64) -> Optimizer {
        Optimizer { weight_decay, ..Optimizer::new(Rule::Lion { b1, b2 }, lr) }
    }

    /// Clips the gradients to a global norm first.
    pub fn clip(mut self, max_norm: f64) -> Optimizer {
        self.clip_global_norm = Some(max_norm);
        self
    }

    /// Decays only the parameters whose name `mask` accepts.
    pub fn decay_only(mut self, mask: impl Fn(&str) -> bool + 'static) -> Optimizer {
        self.decay_mask = Some(Arc::new(mask));
        self
    }

    /// State tensors per parameter.
    pub fn n_state(&self) -> usize {
        match self.rule {
            Rule::Sgd => 0,
            Rule::Momentum { .. } | Rule::RmsProp { .. } | Rule::Adagrad { .. } | Rule::Lion { .. } => 1,
            Rule::Adam { .. } => 2,
        }
    }

    /// The initial state for these parameters: `n_state()` tensors per
    /// parameter, parameter-major.
    pub fn init(&self, params: &[Tensor]) -> Vec<Tensor> {
        let fill = match self.rule {
            Rule::Adagrad { initial, .. } => initial,
            _ => 0.0,
        };
        params.iter().flat_map(|p| (0..self.n_state()).map(move |_| Tensor::full(&p.ty(), fill))).collect()
    }

    /// The traced update: new parameters and state from the parameters,
    /// their gradients, the state and the step count `t` (0 first).
    pub fn update(&self, names: &[String], t: &Tr, params: &[Tr], grads: &[Tr], state: &[Tr]) -> (Vec<Tr>, Vec<Tr>) {
        let grads: Vec<Tr> = match self.clip_global_norm {
            None => grads.to_vec(),
            Some(max) => {
                let sq: Vec<Tr> = grads.iter().map(|g| (g * g).sum(())).collect();
                let mut total = sq[0].clone();
                for s in &sq[1..] {
                    total = &total + s;
                }
                let norm = total.sqrt();
                let under = norm.lt(&norm.scalar_like(max));
                grads.iter().map(|g| under.select(g, &(g / &norm * max))).collect()
            }
        };
        let lr = self.lr.at(t);
        let count = t + 1.0;
        let k = self.n_state();
        let mut new_p = Vec::with_capacity(params.len());
        let mut new_s = Vec::with_capacity(state.len());
        for (i, (p, g)) in params.iter().zip(&grads).enumerate() {
            let s = &state[i * k..(i + 1) * k];
            let decays = self.weight_decay != 0.0 && self.decay_mask.as_ref().is_none_or(|m| m(&names[i]));
            let decay = |u: Tr| if decays { u + p * self.weight_decay } else { u };
            let step = match &self.rule {
                Rule::Sgd => g.clone(),
                Rule::Momentum { beta, nesterov } => {
                    let m = g + &(&s[0] * *beta);
                    let u = if *nesterov { g + &(&m * *beta) } else { m.clone() };
                    new_s.push(m);
                    u
                }
                Rule::Adam { b1, b2, eps } => {
                    let m = g * (1.0 - b1) + &(&s[0] * *b1);
                    let v = g * g * (1.0 - b2) + &(&s[1] * *b2);
                    let m_hat = &m / &(1.0 - count.scalar_like(*b1).pow(&count));
                    let v_hat = &v / &(1.0 - count.scalar_like(*b2).pow(&count));
                    let u = decay(&m_hat / &(v_hat.sqrt() + *eps));
                    new_s.push(m);
                    new_s.push(v);
                    u
                }
                Rule::RmsProp { decay: d, eps } => {
                    let v = g * g * (1.0 - d) + &(&s[0] * *d);
                    let u = g * &(&v + *eps).rsqrt();
                    new_s.push(v);
                    u
                }
                Rule::Adagrad { eps, .. } => {
                    let acc = g * g + &s[0];
                    let u = g * &(&acc + *eps).rsqrt();
                    new_s.push(acc);
                    u
                }
                Rule::Lion { b1, b2 } => {
                    let u = decay((g * (1.0 - b1) + &(&s[0] * *b1)).sign());
                    new_s.push(g * (1.0 - b2) + &(&s[0] * *b2));
                    u
                }
            };
            let step = match self.rule {
                Rule::Adam { .. } | Rule::Lion { .. } => step,
                _ => decay(step),
            };
            new_p.push(p - &(step * &lr));
        }
        (new_p, new_s)
    }
}

/// A training step compiled once per input types: forward, backward and
/// the optimizer update in one graph, `(params..., state..., buffers...,
/// t, batch...) -> (loss, params'..., state'..., buffers'...)`.
///
/// *Buffers* are tensors the step carries but does not differentiate or
/// optimise (BatchNorm's running statistics, a dropout key): the loss
/// function returns their new values after the loss, and the step hands
/// them back. A trainer made by [`Trainer::new`] has none.
pub struct Trainer {
    names: Vec<String>,
    buffer_names: Vec<String>,
    /// Names of the metrics the loss returns after it (see
    /// [`Trainer::with_metrics`]).
    metric_names: Vec<String>,
    /// The last step's metrics, in `metric_names` order.
    metrics: Vec<f64>,
    /// Micro-batches per step (see [`Trainer::accumulate`]); read when the
    /// step is traced.
    micro_batches: Arc<std::sync::atomic::AtomicUsize>,
    /// The data-parallel axis (see [`Trainer::data_parallel`]); read when
    /// the step is traced.
    parallel: Arc<std::sync::Mutex<Option<Axis>>>,
    /// Names of the batch inputs, for [`Trainer::step_named`].
    input_names: Vec<String>,
    step: Jit<Box<dyn Fn(&[Tr]) -> Vec<Tr>>>,
    /// The loss alone, for evaluation (`eval`): `(params..., buffers..., batch...)`.
    loss: Jit<Box<dyn Fn(&[Tr]) -> Vec<Tr>>>,
    optimizer: Optimizer,
    /// Parameters, in `names` order.
    pub params: Vec<Tensor>,
    /// Optimizer state (see [`Optimizer::init`]).
    pub state: Vec<Tensor>,
    /// Buffers, in `buffer_names` order (empty for [`Trainer::new`]).
    pub buffers: Vec<Tensor>,
    /// Steps taken.
    pub count: u64,
    compiled: Option<(Vec<TensorType>, Compiled)>,
    /// Why the parameters are gone: a [`Trainer::step`] that failed after
    /// they were donated to it.
    lost: Option<String>,
}

type StepFn = Box<dyn Fn(&[Tr]) -> Vec<Tr>>;

/// One micro-batch's part of a step: `(params, buffers, batch) -> (loss,
/// metrics..., buffers'..., grads...)`.
type MicroFn = Arc<dyn Fn(&[Tr], &[Tr], &[Tr]) -> Vec<Tr>>;

/// The sizes of a step's parts: `n` parameters, `m` buffers, `k` metrics.
#[derive(Clone, Copy)]
struct Parts {
    n: usize,
    m: usize,
    k: usize,
}

/// The step graph `(params..., state..., buffers..., t, batch...) ->
/// (loss, metrics..., params'..., state'..., buffers'...)`: the gradients
/// of `micro_batches` micro-batches (the batch split along its leading
/// axis, run in order by a `scan`, the buffers carried from one to the
/// next) averaged, the loss and metrics too, then the optimizer update.
/// One micro-batch is the plain step.
fn step_body(
    micro: MicroFn,
    micro_batches: Arc<std::sync::atomic::AtomicUsize>,
    parallel: Arc<std::sync::Mutex<Option<Axis>>>,
    optimizer: &Optimizer,
    names: &[String],
    sizes: Parts,
) -> StepFn {
    let Parts { n, m, k: nm } = sizes;
    let opt = optimizer.clone();
    let names = names.to_vec();
    let k = optimizer.n_state();
    Box::new(move |xs: &[Tr]| {
        let (ps, rest) = xs.split_at(n);
        let (st, rest) = rest.split_at(n * k);
        let (bufs, rest) = rest.split_at(m);
        let (t, batch) = rest.split_at(1);
        let parts = micro_batches.load(std::sync::atomic::Ordering::Relaxed).max(1);
        let mut outs =
            if parts == 1 { micro(ps, bufs, batch) } else { accumulated(&micro, parts, 1 + nm, ps, bufs, batch) };
        if outs.len() != 1 + nm + m + n {
            return outs; // a failed trace: its poisoned handles carry the error
        }
        let axis = parallel.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(axis) = axis {
            outs = averaged(outs, &axis);
        }
        let (head, grads) = outs.split_at(1 + nm + m);
        let (new_p, new_s) = opt.update(&names, &t[0], ps, grads, st);
        let mut out = head[..1 + nm].to_vec();
        out.extend(new_p);
        out.extend(new_s);
        out.extend_from_slice(&head[1 + nm..]);
        out
    })
}

/// Bytes of gradients all-reduced together (one collective per bucket,
/// PyTorch DDP's idea: fewer, larger messages).
pub const BUCKET_BYTES: usize = 4 << 20;

/// The step's `(loss, metrics..., buffers..., grads...)` averaged over the
/// data-parallel `axis`: every float value goes through `pmean`, the
/// gradients in buckets of at most [`BUCKET_BYTES`] (flattened, joined,
/// averaged, split again; a larger gradient is a bucket of its own), filled
/// in reverse order. With
/// equal shards, the mean of the ranks' mean gradients is the gradient of
/// the whole batch's mean loss, and every rank applies the same update.
fn averaged(outs: Vec<Tr>, axis: &Axis) -> Vec<Tr> {
    let float = |x: &Tr| x.ty().is_some_and(|t| t.dtype.is_float());
    // Buckets fill from the last gradient back (PyTorch DDP's order): the
    // backward pass makes the last layers' gradients first, so the first
    // bucket is complete early and its all-reduce, moved up to where its
    // operands are ready (`opt::hoist_collectives`), overlaps with the rest
    // of the backward pass.
    let mut buckets: Vec<(graft_core::DType, usize, Vec<usize>)> = Vec::new();
    for (i, x) in outs.iter().enumerate().rev() {
        let Some(t) = x.ty().filter(|t| t.dtype.is_float() && t.rank() > 0) else { continue };
        let bytes = t.numel() * t.dtype.size_bytes();
        match buckets.iter_mut().rev().find(|(d, b, _)| *d == t.dtype && b + bytes <= BUCKET_BYTES) {
            Some((_, b, members)) => {
                *b += bytes;
                members.push(i);
            }
            None => buckets.push((t.dtype, bytes, vec![i])),
        }
    }
    let mut out: Vec<Tr> = outs
        .iter()
        .map(|x| if float(x) && x.shape().is_empty() { crate::ops::pmean(x, axis) } else { x.clone() })
        .collect();
    for (_, _, members) in buckets {
        if let [i] = members[..] {
            out[i] = crate::ops::pmean(&outs[i], axis);
            continue;
        }
        let flat: Vec<Tr> = members.iter().map(|&i| outs[i].reshape(&[-1])).collect();
        let refs: Vec<&Tr> = flat.iter().collect();
        let mean = crate::ops::pmean(&crate::ops::concat(&refs, 0), axis);
        let mut at = 0usize;
        for &i in &members {
            let shape = outs[i].shape();
            let len: usize = shape.iter().product();
            let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
            out[i] = mean.slice_axis(0, Some(at as isize), Some((at + len) as isize), 1).reshape(&dims);
            at += len;
        }
    }
    out
}

/// `micro` over `parts` micro-batches in a `scan`: every batch input
/// `[parts * b, ...]` viewed as `[parts, b, ...]`, the `s` scalars (loss
/// and metrics) and the gradients summed in the carry and divided by
/// `parts`, the buffers carried.
fn accumulated(micro: &MicroFn, parts: usize, s: usize, ps: &[Tr], bufs: &[Tr], batch: &[Tr]) -> Vec<Tr> {
    let Some(first) = ps.first() else { return Vec::new() };
    let split: Vec<Tr> = batch
        .iter()
        .map(|x| {
            let shape = x.shape();
            let mut s: Vec<isize> = vec![parts as isize, -1];
            s.extend(shape.iter().skip(1).map(|&d| d as isize));
            x.reshape(&s)
        })
        .collect();
    let dtype = first.ty().map_or(graft_core::DType::F32, |t| t.dtype);
    let mut init: Vec<Tr> = (0..s).map(|_| first.scalar(0.0, dtype)).collect();
    init.extend(bufs.iter().cloned());
    init.extend(ps.iter().map(Tr::zeros_like));
    let m = bufs.len();
    let (carry, _) = crate::ops::scan(ps, &init, &split, crate::ops::ScanOpts::new(parts), |ps, c, x| {
        let outs = micro(ps, &c[s..s + m], x);
        if outs.len() != c.len() {
            return (outs, Vec::new());
        }
        let mut next: Vec<Tr> = c[..s].iter().zip(&outs[..s]).map(|(a, l)| a + l).collect();
        next.extend(outs[s..s + m].iter().cloned());
        next.extend(c[s + m..].iter().zip(&outs[s + m..]).map(|(a, g)| a + g));
        (next, Vec::new())
    });
    let scale = |v: &Tr| v / &v.scalar(parts as f64, v.ty().map_or(dtype, |t| t.dtype));
    let mut out: Vec<Tr> = carry[..s].iter().map(scale).collect();
    out.extend(carry[s..s + m].iter().cloned());
    out.extend(carry[s + m..].iter().map(scale));
    out
}

/// A loss's outputs `(loss, extra...)` with the extras (buffers, metrics)
/// cut from differentiation by `stop_gradient`; when `ok` is false (they
/// are not what the trainer expects), one handle poisoned with the
/// message `msg(number of outputs)`, so the trace fails with it.
fn loss_then_cut(outs: Vec<Tr>, xs: &[Tr], ok: bool, msg: impl FnOnce(usize) -> String) -> Vec<Tr> {
    if !ok {
        let msg = msg(outs.len());
        let first = outs.first().or(xs.first()).cloned();
        return first
            .map(|f| vec![f.lift(|_, _| Err(graft_core::IrError::invalid("trainer", msg)))])
            .unwrap_or_default();
    }
    let mut it = outs.into_iter();
    let mut out: Vec<Tr> = it.next().into_iter().collect();
    out.extend(it.map(|x| x.stop_gradient()));
    out
}

fn invalid(msg: String) -> Error {
    graft_core::IrError::invalid("trainer", msg).into()
}

impl Trainer {
    /// A trainer for `loss(params..., batch...)` (one float scalar) over
    /// named parameters starting at `params`.
    pub fn new<O, F>(
        loss: Jit<F>,
        names: Vec<String>,
        params: Vec<Tensor>,
        optimizer: Optimizer,
    ) -> Result<Trainer, Error>
    where
        O: IntoOutputs + 'static,
        F: Fn(&[Tr]) -> O + 'static,
    {
        if names.len() != params.len() {
            return Err(invalid(format!("{} parameter names for {} parameters", names.len(), params.len())));
        }
        let n = params.len();
        let grad = loss.value_and_grad(Wrt::Positions((0..n).collect()));
        let plain: StepFn = Box::new(move |xs: &[Tr]| loss.apply(xs));
        // One micro-batch: the loss and the gradients (no buffers).
        let micro: MicroFn = Arc::new(move |ps: &[Tr], _bufs: &[Tr], batch: &[Tr]| {
            let args: Vec<Tr> = ps.iter().chain(batch).cloned().collect();
            let mut vg = grad.apply(&args);
            if vg.len() != 1 + n {
                return vg; // a failed trace: its poisoned handles carry the error
            }
            let grads = vg.split_off(1);
            vg.extend(grads);
            vg
        });
        Ok(Trainer::assemble(micro, plain, names, params, (Vec::new(), Vec::new()), Vec::new(), optimizer))
    }

    /// A trainer whose loss also reports metrics: `loss(params...,
    /// batch...)` returns the loss, then one float scalar per name in
    /// `metric_names` (accuracy, say). The gradient is the loss's alone (the
    /// metrics go through `stop_gradient`); each step computes the metrics
    /// in the same graph, from the same forward pass, and
    /// [`Trainer::metrics`] reads the last step's (averaged over
    /// micro-batches, like the loss).
    pub fn with_metrics<O, F>(
        loss: Jit<F>,
        names: Vec<String>,
        params: Vec<Tensor>,
        metric_names: Vec<String>,
        optimizer: Optimizer,
    ) -> Result<Trainer, Error>
    where
        O: IntoOutputs + 'static,
        F: Fn(&[Tr]) -> O + 'static,
    {
        if names.len() != params.len() {
            return Err(invalid(format!("{} parameter names for {} parameters", names.len(), params.len())));
        }
        let (n, k) = (params.len(), metric_names.len());
        let loss = Arc::new(loss);
        let checked = loss.clone();
        // The loss with its metrics cut off from differentiation, checked
        // to return float scalars.
        let cut = jit_n("loss_and_metrics", move |xs: &[Tr]| -> Vec<Tr> {
            let outs = checked.apply(xs);
            let scalar = |t: &Tr| t.ty().is_some_and(|t| t.rank() == 0 && t.dtype.is_float());
            let ok = outs.len() == 1 + k && outs.iter().all(scalar);
            loss_then_cut(outs, xs, ok, |got| {
                format!("the loss must return the loss and then {k} float scalar metrics; it returns {got} values")
            })
        });
        let plain: StepFn = Box::new(move |xs: &[Tr]| loss.apply(xs));
        let micro: MicroFn = Arc::new(move |ps: &[Tr], _bufs: &[Tr], batch: &[Tr]| {
            let args: Vec<Tr> = ps.iter().chain(batch).cloned().collect();
            let Some(first) = ps.first().or(batch.first()) else { return Vec::new() };
            let dtype = first.ty().map_or(graft_core::DType::F32, |t| t.dtype);
            let mut cots = vec![first.scalar(1.0, dtype)];
            cots.extend((0..k).map(|_| first.scalar(0.0, dtype)));
            cut.apply_vjp(&args, &cots, Wrt::Positions((0..n).collect()))
        });
        Ok(Trainer::assemble(micro, plain, names, params, (Vec::new(), Vec::new()), metric_names, optimizer))
    }

    /// A trainer whose step also carries buffers: `train_loss(params...,
    /// buffers..., batch...)` returns `(loss, buffers'...)` (each new buffer
    /// of its old type), differentiated with respect to the parameters only
    /// (the new buffers go through `stop_gradient`, so nothing flows back
    /// through them); `eval_loss` has the same inputs and returns the loss
    /// first (for [`Trainer::eval`]; BatchNorm in evaluation mode, say).
    pub fn with_buffers<O, F, P, G>(
        train_loss: Jit<F>,
        eval_loss: Jit<G>,
        names: Vec<String>,
        params: Vec<Tensor>,
        buffer_names: Vec<String>,
        buffers: Vec<Tensor>,
        optimizer: Optimizer,
    ) -> Result<Trainer, Error>
    where
        O: IntoOutputs + 'static,
        F: Fn(&[Tr]) -> O + 'static,
        P: IntoOutputs + 'static,
        G: Fn(&[Tr]) -> P + 'static,
    {
        if names.len() != params.len() || buffer_names.len() != buffers.len() {
            return Err(invalid(format!(
                "{} parameter names for {} parameters, {} buffer names for {} buffers",
                names.len(),
                params.len(),
                buffer_names.len(),
                buffers.len()
            )));
        }
        let (n, m) = (params.len(), buffers.len());
        let buffer_types: Vec<TensorType> = buffers.iter().map(Tensor::ty).collect();
        // The loss with its buffers cut off from differentiation, checked to
        // return one float scalar and the buffers at their own types.
        let cut = jit_n("loss_and_buffers", move |xs: &[Tr]| -> Vec<Tr> {
            let outs = train_loss.apply(xs);
            let types: Vec<Option<TensorType>> = outs.iter().skip(1).map(Tr::ty).collect();
            let want: Vec<Option<TensorType>> = buffer_types.iter().cloned().map(Some).collect();
            let ok = outs.len() == 1 + m && types == want;
            loss_then_cut(outs, xs, ok, |got| {
                format!(
                    "the loss must return the loss and then the {m} buffers at their types ({}); it returns {got} values",
                    buffer_types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
                )
            })
        });
        let plain: StepFn = Box::new(move |xs: &[Tr]| eval_loss.apply(xs));
        // One micro-batch: the loss, the new buffers and the gradients.
        let micro: MicroFn = Arc::new(move |ps: &[Tr], bufs: &[Tr], batch: &[Tr]| {
            let args: Vec<Tr> = ps.iter().chain(bufs).chain(batch).cloned().collect();
            let Some(first) = ps.first().or(batch.first()) else { return Vec::new() };
            let dtype = first.ty().map_or(graft_core::DType::F32, |t| t.dtype);
            let mut cots = vec![first.scalar(1.0, dtype)];
            cots.extend(bufs.iter().filter(|b| b.ty().is_some_and(|t| t.dtype.is_float())).map(Tr::zeros_like));
            cut.apply_vjp(&args, &cots, Wrt::Positions((0..n).collect()))
        });
        Ok(Trainer::assemble(micro, plain, names, params, (buffer_names, buffers), Vec::new(), optimizer))
    }

    fn assemble(
        micro: MicroFn,
        plain: StepFn,
        names: Vec<String>,
        params: Vec<Tensor>,
        (buffer_names, buffers): (Vec<String>, Vec<Tensor>),
        metric_names: Vec<String>,
        optimizer: Optimizer,
    ) -> Trainer {
        let state = optimizer.init(&params);
        let micro_batches = Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let parallel = Arc::new(std::sync::Mutex::new(None));
        let sizes = Parts { n: params.len(), m: buffers.len(), k: metric_names.len() };
        let body = step_body(micro, micro_batches.clone(), parallel.clone(), &optimizer, &names, sizes);
        Trainer {
            names,
            buffer_names,
            metric_names,
            metrics: Vec::new(),
            micro_batches,
            parallel,
            input_names: Vec::new(),
            step: jit_n("train_step", body),
            loss: jit_n("eval_step", plain),
            optimizer,
            params,
            state,
            buffers,
            count: 0,
            compiled: None,
            lost: None,
        }
    }

    /// The loss at the current parameters (and buffers) on a batch, without
    /// a step (compiled once per batch types, like the step).
    pub fn eval(&self, batch: &[&Tensor]) -> Result<f64, Error> {
        let mut ins: Vec<&Tensor> = self.params.iter().chain(&self.buffers).collect();
        ins.extend_from_slice(batch);
        let out = self.loss.call(&ins)?;
        Ok(out.first().map(|l| l.to_scalar_f64()).transpose()?.unwrap_or(f64::NAN))
    }

    /// The compiled evaluation loss for `batch`'s types (traced on first
    /// use): inputs `params..., buffers..., batch...`, the loss first among
    /// its outputs. [`Trainer::eval`] runs it; a front end may run it
    /// itself (Python's `Trainer.eval`, with the GIL released).
    pub fn eval_compiled(&self, batch: &[&Tensor]) -> Result<Compiled, Error> {
        let types: Vec<TensorType> =
            self.params.iter().chain(&self.buffers).map(Tensor::ty).chain(batch.iter().map(|x| x.ty())).collect();
        self.loss.compiled(&types)
    }

    /// The loss and metrics (by name, see [`Trainer::with_metrics`]) at the
    /// current parameters on a batch, without a step.
    pub fn eval_metrics(&self, batch: &[&Tensor]) -> Result<(f64, Vec<(String, f64)>), Error> {
        let mut ins: Vec<&Tensor> = self.params.iter().chain(&self.buffers).collect();
        ins.extend_from_slice(batch);
        let out = self.loss.call(&ins)?;
        let values: Vec<f64> = out.iter().map(Tensor::to_scalar_f64).collect::<Result<_, _>>()?;
        let loss = values.first().copied().unwrap_or(f64::NAN);
        let named = self.metric_names.iter().cloned().zip(values.into_iter().skip(1)).collect();
        Ok((loss, named))
    }

    /// The last step's metrics by name (see [`Trainer::with_metrics`]),
    /// averaged over its micro-batches; empty before the first step.
    pub fn metrics(&self) -> Vec<(String, f64)> {
        self.metric_names.iter().cloned().zip(self.metrics.iter().copied()).collect()
    }

    /// Splits every batch into `parts` micro-batches along its leading
    /// axis (which must divide by `parts`) and averages their gradients
    /// before the update, in one compiled step: a `scan` over the
    /// micro-batches, so only one micro-batch's activations are alive at a
    /// time. The loss reported is the mean of the micro-batch losses; the
    /// buffers pass from one micro-batch to the next. `parts = 1` is the
    /// plain step. The step compiles again for the new setting.
    pub fn accumulate(&mut self, parts: usize) -> Result<(), Error> {
        if parts == 0 {
            return Err(invalid("gradient accumulation needs at least one micro-batch".to_string()));
        }
        self.micro_batches.store(parts, std::sync::atomic::Ordering::Relaxed);
        self.compiled = None;
        self.step.clear_cache();
        Ok(())
    }

    /// Makes each step data-parallel over `axis` (a name bound to a
    /// communicator, e.g. the MPI world by `graft-mpi`, with `axis.size`
    /// ranks): every rank steps on its own shard of the batch, and the
    /// gradients (in buckets of [`BUCKET_BYTES`]), the loss, the metrics and
    /// the float buffers are averaged over the ranks inside the compiled
    /// step before the update, so the parameters stay identical on every
    /// rank. `None` makes it a one-process step again. The step compiles
    /// again for the new setting.
    pub fn data_parallel(&mut self, axis: Option<Axis>) {
        *self.parallel.lock().unwrap_or_else(|e| e.into_inner()) = axis;
        self.compiled = None;
        self.step.clear_cache();
    }

    /// The data-parallel axis set by [`Trainer::data_parallel`].
    pub fn parallel_axis(&self) -> Option<Axis> {
        self.parallel.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Names the batch inputs (in the loss's order after the parameters
    /// and buffers), so that [`Trainer::step_named`] and
    /// [`Trainer::eval_named`] can take them by name.
    pub fn set_input_names(&mut self, names: Vec<String>) -> Result<(), Error> {
        if let Some(d) = names.iter().enumerate().find_map(|(i, n)| names[..i].contains(n).then_some(n)) {
            return Err(invalid(format!("the batch input name `{d}` is given twice")));
        }
        self.input_names = names;
        Ok(())
    }

    /// The batch input names (empty unless set).
    pub fn input_names(&self) -> &[String] {
        &self.input_names
    }

    /// The named batch in input order; every name must be known and given
    /// once, and every input given.
    fn by_name<'a>(&self, named: &[(&str, &'a Tensor)]) -> Result<Vec<&'a Tensor>, Error> {
        if self.input_names.is_empty() {
            return Err(invalid("the batch inputs have no names (see Trainer::set_input_names)".to_string()));
        }
        let mut out: Vec<Option<&Tensor>> = vec![None; self.input_names.len()];
        for (name, t) in named {
            let Some(i) = self.input_names.iter().position(|n| n == name) else {
                return Err(invalid(format!(
                    "no batch input is named `{name}` (the inputs are {})",
                    self.input_names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                )));
            };
            if out[i].replace(t).is_some() {
                return Err(invalid(format!("the batch input `{name}` is given twice")));
            }
        }
        let missing: Vec<String> =
            self.input_names.iter().zip(&out).filter(|(_, t)| t.is_none()).map(|(n, _)| format!("`{n}`")).collect();
        if !missing.is_empty() {
            return Err(invalid(format!("the batch lacks {}", missing.join(", "))));
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// [`Trainer::step`] on a batch given by input name, in any order.
    pub fn step_named(&mut self, named: &[(&str, &Tensor)]) -> Result<f64, Error> {
        let batch = self.by_name(named)?;
        self.step(&batch)
    }

    /// [`Trainer::eval`] on a batch given by input name, in any order.
    pub fn eval_named(&self, named: &[(&str, &Tensor)]) -> Result<f64, Error> {
        let batch = self.by_name(named)?;
        self.eval(&batch)
    }

    /// Micro-batches per step (1 unless [`Trainer::accumulate`] set more).
    pub fn micro_batches(&self) -> usize {
        self.micro_batches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The parameter names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The buffer names.
    pub fn buffer_names(&self) -> &[String] {
        &self.buffer_names
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// One step on a batch: returns the loss before the update. The
    /// parameters, optimizer state and buffers are donated to the step
    /// (`Executable::run_donating`): each is updated in its own buffer where
    /// the update is one elementwise kernel (an optimizer's), and otherwise
    /// its buffer is reused by the step once dead, so a step allocates
    /// nothing and never holds two copies of the model.
    ///
    /// A step that fails while running (out of memory, say) has consumed
    /// them: the error says so, and later steps refuse to run (load a
    /// checkpoint into a new trainer). Use [`Trainer::step_undoable`] to
    /// keep the old values instead.
    pub fn step(&mut self, batch: &[&Tensor]) -> Result<f64, Error> {
        Ok(self.run_step(batch, false)?.0)
    }

    /// [`Trainer::step`] that keeps what it replaced: the loss and an
    /// [`Undo`] holding the parameters, state and buffers the step started
    /// from, for [`Trainer::undo`] (a step whose loss is not finite, say)
    /// or [`Trainer::commit`]. Nothing is copied: the old tensors are
    /// moved into the `Undo`.
    pub fn step_undoable(&mut self, batch: &[&Tensor]) -> Result<(f64, Undo), Error> {
        let (loss, undo) = self.run_step(batch, true)?;
        let undo = undo.ok_or_else(|| invalid("internal error: a kept step returned nothing to undo".into()))?;
        Ok((loss, undo))
    }

    /// One step; with `keep`, the tensors it replaced come back as an
    /// [`Undo`], otherwise they are donated to the step.
    fn run_step(&mut self, batch: &[&Tensor], keep: bool) -> Result<(f64, Option<Undo>), Error> {
        if !keep {
            let job = self.begin_step(batch)?;
            let done = job.run(batch);
            return Ok((self.finish_step(done)?, None));
        }
        let (compiled, t) = self.prepare_step(batch)?;
        let mut ins: Vec<&Tensor> = self.params.iter().chain(&self.state).chain(&self.buffers).collect();
        ins.push(&t);
        ins.extend_from_slice(batch);
        let outs = compiled.call(&ins)?;
        let (n_params, n_state) = (self.params.len(), self.state.len());
        let (loss, undo) = self.take_outputs(outs, n_params, n_state)?;
        Ok((loss, Some(undo)))
    }

    /// Checks a batch and returns the compiled step for its types (traced
    /// and compiled on first use) and the step-count input.
    fn prepare_step(&mut self, batch: &[&Tensor]) -> Result<(Compiled, Tensor), Error> {
        if let Some(why) = &self.lost {
            return Err(invalid(format!("this trainer has no parameters: {why}")));
        }
        let parts = self.micro_batches();
        if let Some(x) = batch.iter().find(|x| x.shape().first().is_none_or(|&rows| rows % parts != 0)) {
            return Err(invalid(format!(
                "a batch input of shape {:?} cannot be split into {parts} micro-batches along its leading axis",
                x.shape()
            )));
        }
        let dtype = self.params.first().map_or(graft_core::DType::F32, Tensor::dtype);
        let t = Tensor::full(&TensorType::scalar(dtype), self.count as f64);
        let owned = self.params.iter().chain(&self.state).chain(&self.buffers);
        let types: Vec<TensorType> =
            owned.map(Tensor::ty).chain([t.ty()]).chain(batch.iter().map(|x| x.ty())).collect();
        let compiled = match &self.compiled {
            Some((ty, c)) if *ty == types => c.clone(),
            _ => {
                let c = self.step.compiled(&types)?;
                self.compiled = Some((types, c.clone()));
                c
            }
        };
        Ok((compiled, t))
    }

    /// The first part of [`Trainer::step`], split so that the running part
    /// can go elsewhere (Python's `Trainer.step` runs it with the GIL
    /// released): checks the batch, traces and compiles the step on first
    /// use, and takes the parameters, optimizer state and buffers out of
    /// the trainer into the returned [`StepJob`] (donated to the step).
    /// Until [`Trainer::finish_step`] takes the job's result back, the
    /// trainer has no parameters and refuses to step.
    pub fn begin_step(&mut self, batch: &[&Tensor]) -> Result<StepJob, Error> {
        let (compiled, t) = self.prepare_step(batch)?;
        let [params, state, buffers] = [&mut self.params, &mut self.state, &mut self.buffers].map(std::mem::take);
        self.lost = Some(format!("step {} was begun and not finished", self.count));
        Ok(StepJob { compiled, params, state, buffers, t })
    }

    /// The last part of [`Trainer::step`]: takes the outputs of a
    /// [`StepJob::run`] back into the trainer and returns the loss. A step
    /// that failed has consumed the parameters: the error says so, and
    /// later steps refuse to run.
    pub fn finish_step(&mut self, done: StepDone) -> Result<f64, Error> {
        let StepDone { outs, n_params, n_state } = done;
        let outs = match outs {
            Ok(outs) => outs,
            Err(e) => {
                self.lost = Some(format!("step {} failed after they were donated to it ({e})", self.count));
                return Err(e);
            }
        };
        self.lost = None;
        // What the outputs replace is empty: the old tensors were donated.
        let (loss, _) = self.take_outputs(outs, n_params, n_state)?;
        Ok(loss)
    }

    /// Installs a step's outputs (`loss, metrics..., params'..., state'...,
    /// buffers'...`) and returns the loss and what they replaced.
    fn take_outputs(&mut self, outs: Vec<Tensor>, n_params: usize, n_state: usize) -> Result<(f64, Undo), Error> {
        let mut outs = outs.into_iter();
        let loss = outs.next().map(|l| l.to_scalar_f64()).transpose()?.unwrap_or(f64::NAN);
        let metrics: Vec<Tensor> = outs.by_ref().take(self.metric_names.len()).collect();
        self.metrics = metrics.iter().map(Tensor::to_scalar_f64).collect::<Result<_, _>>()?;
        let new_p: Vec<Tensor> = outs.by_ref().take(n_params).collect();
        let new_s: Vec<Tensor> = outs.by_ref().take(n_state).collect();
        let new_b: Vec<Tensor> = outs.collect();
        let undo = Undo {
            params: std::mem::replace(&mut self.params, new_p),
            state: std::mem::replace(&mut self.state, new_s),
            buffers: std::mem::replace(&mut self.buffers, new_b),
            count: self.count,
        };
        self.count += 1;
        Ok((loss, undo))
    }

    /// Takes back the step `undo` came from: parameters, state, buffers and
    /// step count as they were before it (the step's results go to the
    /// buffer pool).
    pub fn undo(&mut self, undo: Undo) {
        let Undo { params, state, buffers, count } = undo;
        let new_p = std::mem::replace(&mut self.params, params);
        let new_s = std::mem::replace(&mut self.state, state);
        let new_b = std::mem::replace(&mut self.buffers, buffers);
        self.count = count;
        if let Some((_, c)) = &self.compiled {
            c.recycle(new_p.into_iter().chain(new_s).chain(new_b));
        }
    }

    /// Keeps the step `undo` came from: the tensors it replaced go back to
    /// the step's buffer pool, so the next step writes into them.
    pub fn commit(&self, undo: Undo) {
        if let Some((_, c)) = &self.compiled {
            c.recycle(undo.params.into_iter().chain(undo.state).chain(undo.buffers));
        }
    }
}

/// A step taken out of its [`Trainer`] by [`Trainer::begin_step`]: the
/// compiled step and the tensors donated to it. It is `Send` and needs
/// nothing of the trainer, so it can run on another thread or with a lock
/// released; [`Trainer::finish_step`] takes its result back.
pub struct StepJob {
    compiled: Compiled,
    params: Vec<Tensor>,
    state: Vec<Tensor>,
    buffers: Vec<Tensor>,
    /// The step count, as the step's input.
    t: Tensor,
}

/// The outputs of a [`StepJob::run`], for [`Trainer::finish_step`].
pub struct StepDone {
    outs: Result<Vec<Tensor>, Error>,
    n_params: usize,
    n_state: usize,
}

impl StepJob {
    /// Runs the step on `batch` (the batch [`Trainer::begin_step`] saw).
    pub fn run(self, batch: &[&Tensor]) -> StepDone {
        let StepJob { compiled, params, state, buffers, t } = self;
        let (n_params, n_state) = (params.len(), state.len());
        let mut ins: Vec<graft_core::Input<'_>> =
            params.into_iter().chain(state).chain(buffers).map(graft_core::Input::Donated).collect();
        ins.push(graft_core::Input::Borrowed(&t));
        ins.extend(batch.iter().map(|&x| graft_core::Input::Borrowed(x)));
        StepDone { outs: compiled.call_donating(ins), n_params, n_state }
    }
}

/// What one step replaced (see [`Trainer::step_undoable`]).
#[derive(Debug)]
pub struct Undo {
    /// The parameters before the step.
    pub params: Vec<Tensor>,
    /// The optimizer state before the step.
    pub state: Vec<Tensor>,
    /// The buffers before the step.
    pub buffers: Vec<Tensor>,
    /// The step count before the step.
    pub count: u64,
}
