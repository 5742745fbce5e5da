//! LayerNorm, GroupNorm and BatchNorm (with running statistics as state).

use crate::error::Error;
use crate::module::ctx::{Ctx, Module};
use crate::module::init::Init;
use crate::module::vars::{Param, Vars};
use crate::nn;
use crate::trace::Tr;
use graft_core::IrError;

/// `nn.LayerNorm(shape)`: normalises over the trailing `shape` axes, then
/// `* weight + bias` (ones and zeros initially).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// Scale, `shape`.
    pub weight: Param,
    /// Shift, `shape`.
    pub bias: Param,
    eps: f64,
}

impl LayerNorm {
    /// Over the trailing axes of sizes `shape` (`&[d_model]` usually).
    pub fn new(vars: &Vars, shape: &[usize], eps: f64) -> Result<LayerNorm, Error> {
        if shape.is_empty() {
            return Err(IrError::invalid("layer_norm", "the normalised shape must have at least one axis").into());
        }
        Ok(LayerNorm {
            weight: vars.param("weight", shape, Init::Ones)?,
            bias: vars.param("bias", shape, Init::Zeros)?,
            eps,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        nn::layer_norm(x, &cx.get(&self.weight), Some(&cx.get(&self.bias)), self.eps)
    }
}

/// `nn.GroupNorm(groups, channels)` on `[N, C, ...]`.
#[derive(Debug, Clone)]
pub struct GroupNorm {
    /// Per-channel scale `[C]`.
    pub weight: Param,
    /// Per-channel shift `[C]`.
    pub bias: Param,
    groups: usize,
    eps: f64,
}

impl GroupNorm {
    /// `groups` must divide `channels`.
    pub fn new(vars: &Vars, groups: usize, channels: usize, eps: f64) -> Result<GroupNorm, Error> {
        if groups == 0 || !channels.is_multiple_of(groups) {
            return Err(
                IrError::invalid("group_norm", format!("{groups} groups must divide {channels} channels")).into()
            );
        }
        Ok(GroupNorm {
            weight: vars.param("weight", &[channels], Init::Ones)?,
            bias: vars.param("bias", &[channels], Init::Zeros)?,
            groups,
            eps,
        })
    }
}

impl Module for GroupNorm {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        nn::group_norm(x, self.groups, Some(&cx.get(&self.weight)), Some(&cx.get(&self.bias)), self.eps)
    }
}

/// `nn.BatchNorm1d/2d/3d(C)` on `[N, C, ...]`: in training, normalises
/// with the batch statistics (biased variance) and updates the running
/// statistics PyTorch's way, `running = (1 - momentum) running +
/// momentum stat` with the *unbiased* batch variance; in evaluation,
/// normalises with the running statistics. The running statistics are
/// state tensors (`running_mean`, `running_var`): returned by the training
/// step, never differentiated (the update reads the batch statistics
/// through `stop_gradient`) and never seen by the optimizer.
#[derive(Debug, Clone)]
pub struct BatchNorm {
    /// Per-channel scale `[C]`.
    pub weight: Param,
    /// Per-channel shift `[C]`.
    pub bias: Param,
    /// Running mean `[C]` (state, zeros initially).
    pub running_mean: Param,
    /// Running variance `[C]` (state, ones initially).
    pub running_var: Param,
    eps: f64,
    momentum: f64,
}

impl BatchNorm {
    /// PyTorch's defaults: `eps = 1e-5`, `momentum = 0.1`.
    pub fn new(vars: &Vars, channels: usize) -> Result<BatchNorm, Error> {
        BatchNorm::with_options(vars, channels, nn::DEFAULT_EPS, 0.1)
    }

    /// Explicit `eps` and `momentum` (in `[0, 1]`).
    pub fn with_options(vars: &Vars, channels: usize, eps: f64, momentum: f64) -> Result<BatchNorm, Error> {
        if !(0.0..=1.0).contains(&momentum) {
            return Err(IrError::invalid("batch_norm", format!("momentum must be in [0, 1], got {momentum}")).into());
        }
        Ok(BatchNorm {
            weight: vars.param("weight", &[channels], Init::Ones)?,
            bias: vars.param("bias", &[channels], Init::Zeros)?,
            running_mean: vars.state("running_mean", &[channels], Init::Zeros)?,
            running_var: vars.state("running_var", &[channels], Init::Ones)?,
            eps,
            momentum,
        })
    }
}

/// A `[C]` vector shaped `[C, 1, ...]` so it broadcasts along axis 1 of a
/// rank-`rank` input.
fn per_channel(v: &Tr, rank: usize) -> Tr {
    let mut shape = vec![-1isize];
    shape.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
    v.reshape(&shape)
}

impl Module for BatchNorm {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        let (w, b) = (cx.get(&self.weight), cx.get(&self.bias));
        let (rm, rv) = (cx.get(&self.running_mean), cx.get(&self.running_var));
        let shape = x.shape();
        if shape.len() < 2 || Some(shape[1]) != rm.shape().first().copied() {
            let msg = format!("expected an input [N, {:?}, ...], got {shape:?}", rm.shape());
            return x.lift(|_, _| Err(IrError::invalid("batch_norm", msg)));
        }
        if !cx.training() {
            let rank = shape.len();
            let inv = (per_channel(&rv, rank) + self.eps).rsqrt();
            return (x - &per_channel(&rm, rank)) * inv * per_channel(&w, rank) + per_channel(&b, rank);
        }
        let n = shape.iter().product::<usize>() / shape[1];
        if n < 2 {
            let msg = format!("training needs more than one value per channel, got an input {shape:?}");
            return x.lift(|_, _| Err(IrError::invalid("batch_norm", msg)));
        }
        let (y, mean, var) = nn::batch_norm(x, Some(&w), Some(&b), None, self.eps);
        let m = self.momentum;
        let unbiased = var.stop_gradient() * (n as f64 / (n - 1) as f64);
        cx.set_state(&self.running_mean, rm * (1.0 - m) + mean.stop_gradient() * m);
        cx.set_state(&self.running_var, rv * (1.0 - m) + unbiased * m);
        y
    }
}
