//! Conv1d, Conv2d and ConvTranspose2d with PyTorch's layouts and
//! initialisation (`U(±1/sqrt(fan_in))` for weight and bias).

use super::basic::fan_in;
use crate::error::Error;
use crate::module::ctx::{Ctx, Module};
use crate::module::init::Init;
use crate::module::vars::{Param, Vars};
use crate::nn::{self, ConvOpts, ConvTransposeOpts, PerDim};
use crate::trace::Tr;
use graft_core::IrError;

fn check_groups(op: &str, in_ch: usize, out_ch: usize, groups: usize) -> Result<(), Error> {
    if groups == 0 || !in_ch.is_multiple_of(groups) || !out_ch.is_multiple_of(groups) {
        return Err(IrError::invalid(
            op,
            format!("groups = {groups} must divide both in_channels = {in_ch} and out_channels = {out_ch}"),
        )
        .into());
    }
    Ok(())
}

/// A convolution over `n` spatial dims: `weight [out, in/groups, *kernel]`,
/// `bias [out]`; `opts` carries stride, padding, dilation and groups.
#[derive(Debug, Clone)]
pub struct Conv {
    /// `[out_channels, in_channels / groups, *kernel]`.
    pub weight: Param,
    /// `[out_channels]`, if the layer has a bias.
    pub bias: Option<Param>,
    opts: ConvOpts,
}

/// `nn.Conv1d`: inputs `[N, C_in, L]`.
pub type Conv1d = Conv;
/// `nn.Conv2d`: inputs `[N, C_in, H, W]`.
pub type Conv2d = Conv;

impl Conv {
    /// A convolution with `kernel.len()` (or one, repeated `dims` times)
    /// spatial dims; `dims` is 1 for `Conv1d`, 2 for `Conv2d`.
    pub fn new(
        vars: &Vars,
        dims: usize,
        in_channels: usize,
        out_channels: usize,
        kernel: impl Into<PerDim>,
        opts: ConvOpts,
        bias: bool,
    ) -> Result<Conv, Error> {
        let op = format!("conv{dims}d");
        let kernel = kernel.into().resolve_pos(&op, "kernel", dims)?;
        check_groups(&op, in_channels, out_channels, opts.groups)?;
        let mut shape = vec![out_channels, in_channels / opts.groups];
        shape.extend(kernel);
        let weight = vars.param("weight", &shape, Init::torch_default())?;
        let bias =
            bias.then(|| vars.param("bias", &[out_channels], Init::uniform_fan_in(fan_in(&shape)))).transpose()?;
        Ok(Conv { weight, bias, opts })
    }

    /// `nn.Conv1d(in, out, kernel, ...)`.
    pub fn conv1d(vars: &Vars, in_ch: usize, out_ch: usize, kernel: usize, opts: ConvOpts) -> Result<Conv, Error> {
        Conv::new(vars, 1, in_ch, out_ch, kernel, opts, true)
    }

    /// `nn.Conv2d(in, out, kernel, ...)`.
    pub fn conv2d(
        vars: &Vars,
        in_ch: usize,
        out_ch: usize,
        kernel: impl Into<PerDim>,
        opts: ConvOpts,
    ) -> Result<Conv, Error> {
        Conv::new(vars, 2, in_ch, out_ch, kernel, opts, true)
    }
}

impl Module for Conv {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        let b = self.bias.as_ref().map(|b| cx.get(b));
        nn::conv_nd(x, &cx.get(&self.weight), b.as_ref(), &self.opts)
    }
}

/// `nn.ConvTranspose2d`: `weight [in, out/groups, kh, kw]`, `bias [out]`,
/// inputs `[N, C_in, H, W]`.
#[derive(Debug, Clone)]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kh, kw]`.
    pub weight: Param,
    /// `[out_channels]`, if the layer has a bias.
    pub bias: Option<Param>,
    opts: ConvTransposeOpts,
}

impl ConvTranspose2d {
    /// Registers `weight` (and `bias`); PyTorch computes the fan-in from
    /// the weight's second axis, so `fan_in = out/groups * kh * kw`.
    pub fn new(
        vars: &Vars,
        in_channels: usize,
        out_channels: usize,
        kernel: impl Into<PerDim>,
        opts: ConvTransposeOpts,
        bias: bool,
    ) -> Result<ConvTranspose2d, Error> {
        let kernel = kernel.into().resolve_pos("conv_transpose2d", "kernel", 2)?;
        check_groups("conv_transpose2d", in_channels, out_channels, opts.groups)?;
        let mut shape = vec![in_channels, out_channels / opts.groups];
        shape.extend(kernel);
        let weight = vars.param("weight", &shape, Init::torch_default())?;
        let bias =
            bias.then(|| vars.param("bias", &[out_channels], Init::uniform_fan_in(fan_in(&shape)))).transpose()?;
        Ok(ConvTranspose2d { weight, bias, opts })
    }
}

impl Module for ConvTranspose2d {
    fn forward(&self, cx: &Ctx, x: &Tr) -> Tr {
        let b = self.bias.as_ref().map(|b| cx.get(b));
        nn::conv_transpose2d(x, &cx.get(&self.weight), b.as_ref(), &self.opts)
    }
}
