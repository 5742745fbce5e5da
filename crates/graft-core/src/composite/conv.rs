//! Convolution layers with PyTorch's layouts and semantics, over the
//! `conv_general` primitive: `conv1d`/`conv2d`/`conv3d` (`F.convNd`) and
//! `conv_transpose1d`/`2d`/`3d` (`F.conv_transposeNd`), both through generic
//! N-d entries ([`conv_nd`], [`conv_transpose_nd`]).
//!
//! Layouts (PyTorch's):
//! - input `[N, C_in, *spatial]`, or unbatched `[C_in, *spatial]` (the
//!   output is then unbatched too, as in PyTorch);
//! - `conv` weight `[C_out, C_in / groups, *kernel]`;
//! - `conv_transpose` weight `[C_in, C_out / groups, *kernel]`;
//! - optional bias `[C_out]`, added to every output position.
//!
//! Per-dimension options ([`PerDim`]) hold one entry per spatial dim, or a
//! single entry used for every dim (PyTorch's plain `int`).
//!
//! Output sizes (PyTorch's formulas, per spatial dim with input `L`, kernel
//! `k`, stride `s`, padding `p`, dilation `d`):
//! - conv: `floor((L + 2p - d(k-1) - 1) / s) + 1` ([`conv_output_size`]);
//! - transposed: `(L-1)s - 2p + d(k-1) + output_padding + 1`
//!   ([`conv_transpose_output_size`]).
//!
//! Both must be at least 1, otherwise the call fails with an
//! [`IrError::Invalid`] naming the dim and the sizes.

use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::conv::ConvGeneral;
use crate::types::TensorType;

/// A per-spatial-dimension option: one entry per dim, or a single entry
/// used for every dim (PyTorch's `int` form of `stride=2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PerDim(pub Vec<usize>);

impl PerDim {
    /// Expands to exactly `n` entries, or explains the length mismatch.
    pub fn resolve(&self, op: &str, what: &str, n: usize) -> Result<Vec<usize>, IrError> {
        match self.0.len() {
            1 => Ok(vec![self.0[0]; n]),
            len if len == n => Ok(self.0.clone()),
            len => Err(IrError::invalid(
                op,
                format!("expected {what} with 1 or {n} entries (one per spatial dim), got {len}: {:?}", self.0),
            )),
        }
    }

    /// Like [`PerDim::resolve`], also requiring every entry to be >= 1.
    pub fn resolve_pos(&self, op: &str, what: &str, n: usize) -> Result<Vec<usize>, IrError> {
        let v = self.resolve(op, what, n)?;
        if v.contains(&0) {
            return Err(IrError::invalid(op, format!("expected every {what} entry >= 1, got {v:?}")));
        }
        Ok(v)
    }
}

impl From<usize> for PerDim {
    fn from(v: usize) -> PerDim {
        PerDim(vec![v])
    }
}
impl From<Vec<usize>> for PerDim {
    fn from(v: Vec<usize>) -> PerDim {
        PerDim(v)
    }
}
impl From<&[usize]> for PerDim {
    fn from(v: &[usize]) -> PerDim {
        PerDim(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for PerDim {
    fn from(v: [usize; N]) -> PerDim {
        PerDim(v.to_vec())
    }
}

/// How a convolution pads its input (PyTorch's `padding` argument).
/// Padding is always with zeros (PyTorch's `padding_mode='zeros'`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Padding {
    /// No padding (`padding='valid'`).
    Valid,
    /// Output size equals input size (`padding='same'`; stride 1 only, like
    /// PyTorch). The total `d(k-1)` is split `low = total / 2`,
    /// `high = total - low`, so an odd total puts the extra element on the
    /// high side (PyTorch's and JAX's choice).
    Same,
    /// Symmetric padding `p` on both sides of each spatial dim.
    Explicit(PerDim),
    /// Asymmetric `(low, high)` padding per spatial dim (JAX style; PyTorch
    /// needs an `F.pad` first for this).
    Pairs(Vec<(usize, usize)>),
}

impl Default for Padding {
    fn default() -> Padding {
        Padding::Explicit(PerDim(vec![0]))
    }
}
impl From<usize> for Padding {
    fn from(p: usize) -> Padding {
        Padding::Explicit(p.into())
    }
}
impl From<Vec<usize>> for Padding {
    fn from(p: Vec<usize>) -> Padding {
        Padding::Explicit(p.into())
    }
}
impl<const N: usize> From<[usize; N]> for Padding {
    fn from(p: [usize; N]) -> Padding {
        Padding::Explicit(p.into())
    }
}
impl From<Vec<(usize, usize)>> for Padding {
    fn from(p: Vec<(usize, usize)>) -> Padding {
        Padding::Pairs(p)
    }
}

/// Options of `convNd` (PyTorch's keyword arguments; defaults: stride 1, no
/// padding, dilation 1, one group).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvOpts {
    /// Window step per spatial dim (>= 1).
    pub stride: PerDim,
    /// Zero padding of the input.
    pub padding: Padding,
    /// Kernel dilation per spatial dim (>= 1).
    pub dilation: PerDim,
    /// Channel groups (>= 1; dividing both `C_in` and `C_out`).
    pub groups: usize,
}

impl Default for ConvOpts {
    fn default() -> ConvOpts {
        ConvOpts { stride: PerDim(vec![1]), padding: Padding::default(), dilation: PerDim(vec![1]), groups: 1 }
    }
}

impl ConvOpts {
    /// The defaults (stride 1, no padding, dilation 1, one group).
    pub fn new() -> ConvOpts {
        ConvOpts::default()
    }
    /// Sets the stride.
    pub fn stride(mut self, s: impl Into<PerDim>) -> ConvOpts {
        self.stride = s.into();
        self
    }
    /// Sets the padding (`2`, `[1, 2]`, `Padding::Same`, ...).
    pub fn padding(mut self, p: impl Into<Padding>) -> ConvOpts {
        self.padding = p.into();
        self
    }
    /// Sets the kernel dilation.
    pub fn dilation(mut self, d: impl Into<PerDim>) -> ConvOpts {
        self.dilation = d.into();
        self
    }
    /// Sets the group count.
    pub fn groups(mut self, g: usize) -> ConvOpts {
        self.groups = g;
        self
    }
}

/// Options of `conv_transposeNd` (PyTorch's keyword arguments; defaults:
/// stride 1, no padding, no output padding, dilation 1, one group).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvTransposeOpts {
    /// Stride of the forward convolution this is the transpose of (>= 1).
    pub stride: PerDim,
    /// Padding `p` of that forward convolution: removes `p` from each side of
    /// the full output (PyTorch's `padding`; symmetric only, as in PyTorch).
    pub padding: PerDim,
    /// Extra size on the high side of each dim, to pick among the input
    /// sizes a strided forward convolution maps to the same output size.
    /// Must be smaller than the stride or the dilation (PyTorch's rule).
    pub output_padding: PerDim,
    /// Kernel dilation per spatial dim (>= 1).
    pub dilation: PerDim,
    /// Channel groups (>= 1; dividing both `C_in` and `C_out`).
    pub groups: usize,
}

impl Default for ConvTransposeOpts {
    fn default() -> ConvTransposeOpts {
        ConvTransposeOpts {
            stride: PerDim(vec![1]),
            padding: PerDim(vec![0]),
            output_padding: PerDim(vec![0]),
            dilation: PerDim(vec![1]),
            groups: 1,
        }
    }
}

impl ConvTransposeOpts {
    /// The defaults.
    pub fn new() -> ConvTransposeOpts {
        ConvTransposeOpts::default()
    }
    /// Sets the stride.
    pub fn stride(mut self, s: impl Into<PerDim>) -> ConvTransposeOpts {
        self.stride = s.into();
        self
    }
    /// Sets the padding.
    pub fn padding(mut self, p: impl Into<PerDim>) -> ConvTransposeOpts {
        self.padding = p.into();
        self
    }
    /// Sets the output padding.
    pub fn output_padding(mut self, p: impl Into<PerDim>) -> ConvTransposeOpts {
        self.output_padding = p.into();
        self
    }
    /// Sets the kernel dilation.
    pub fn dilation(mut self, d: impl Into<PerDim>) -> ConvTransposeOpts {
        self.dilation = d.into();
        self
    }
    /// Sets the group count.
    pub fn groups(mut self, g: usize) -> ConvTransposeOpts {
        self.groups = g;
        self
    }
}

/// PyTorch's convolution output size `floor((L + lo + hi - d(k-1) - 1) / s) + 1`,
/// or `None` when the padded input is shorter than the dilated kernel (no
/// output position) or `k`, `s` or `d` is 0.
pub fn conv_output_size(l: usize, k: usize, s: usize, lo: usize, hi: usize, d: usize) -> Option<usize> {
    if k == 0 || s == 0 || d == 0 {
        return None;
    }
    let padded = l.checked_add(lo)?.checked_add(hi)?;
    let window = (k - 1).checked_mul(d)? + 1;
    (padded >= window).then(|| (padded - window) / s + 1)
}

/// PyTorch's transposed-convolution output size
/// `(L-1)s - 2p + d(k-1) + output_padding + 1`, or `None` when it is below 1
/// or any of `L`, `k`, `s`, `d` is 0.
pub fn conv_transpose_output_size(l: usize, k: usize, s: usize, p: usize, op: usize, d: usize) -> Option<usize> {
    if l == 0 || k == 0 || s == 0 || d == 0 {
        return None;
    }
    let full = (l as i128 - 1) * s as i128 + d as i128 * (k as i128 - 1) + op as i128 + 1;
    let out = full - 2 * p as i128;
    (out >= 1).then(|| usize::try_from(out).ok()).flatten()
}

/// Operand types of a convolution-like call, checked for dtype agreement.
struct Operands {
    x: TensorType,
    w: TensorType,
    /// Number of spatial dims (weight rank - 2).
    spatial: usize,
    /// Whether the input lacks the batch dim.
    unbatched: bool,
}

fn operands(b: &Builder, op: &str, x: Value, w: Value, want_spatial: Option<usize>) -> Result<Operands, IrError> {
    let (xt, wt) = (b.ty(x)?.clone(), b.ty(w)?.clone());
    if !xt.dtype.is_float() {
        return Err(IrError::invalid(op, format!("expected a floating-point input (f32 or f64), got {xt}")));
    }
    if xt.dtype != wt.dtype {
        return Err(IrError::invalid(op, format!("input {xt} and weight {wt} have different dtypes")));
    }
    if wt.rank() < 3 {
        return Err(IrError::invalid(
            op,
            format!("expected a weight of rank >= 3 ([out, in, *kernel] with at least one spatial dim), got {wt}"),
        ));
    }
    let spatial = wt.rank() - 2;
    if let Some(s) = want_spatial {
        if s != spatial {
            return Err(IrError::invalid(
                op,
                format!("expected a weight of rank {} ({s} spatial dims), got {wt}", s + 2),
            ));
        }
    }
    let (unbatched, x) = with_batch_dim(op, xt, spatial, &format!(" for a weight {wt}"))?;
    Ok(Operands { x, w: wt, spatial, unbatched })
}

/// Reshapes an unbatched input to a batch of one.
fn add_batch(b: &mut Builder, x: Value, ops: &Operands) -> Result<Value, IrError> {
    if ops.unbatched {
        b.reshape(x, &ops.x.shape)
    } else {
        Ok(x)
    }
}

/// Adds `bias [C_out]` along dim 1, then drops the batch dim of an unbatched call.
fn finish(b: &mut Builder, op: &str, y: Value, bias: Option<Value>, ops: &Operands) -> Result<Value, IrError> {
    let yt = b.ty(y)?.clone();
    let y = match bias {
        None => y,
        Some(bv) => {
            let bt = b.ty(bv)?.clone();
            if bt.dtype != yt.dtype || bt.shape != [yt.shape[1]] {
                return Err(IrError::invalid(
                    op,
                    format!("expected a bias of type {}[{}] (one per output channel), got {bt}", yt.dtype, yt.shape[1]),
                ));
            }
            let bb = b.broadcast_in_dim(bv, &yt.shape, &[1])?;
            b.add(y, bb)?
        }
    };
    if ops.unbatched {
        b.reshape(y, &yt.shape[1..])
    } else {
        Ok(y)
    }
}

/// Checks `groups` against the channel counts: `c_in` and `c_out` both
/// divisible by it.
fn check_groups(op: &str, groups: usize, c_in: usize, c_out: usize) -> Result<(), IrError> {
    if groups == 0 {
        return Err(IrError::invalid(op, "expected groups >= 1"));
    }
    if !c_in.is_multiple_of(groups) {
        return Err(IrError::invalid(op, format!("input channels ({c_in}) must be divisible by groups ({groups})")));
    }
    if !c_out.is_multiple_of(groups) {
        return Err(IrError::invalid(op, format!("output channels ({c_out}) must be divisible by groups ({groups})")));
    }
    Ok(())
}

/// N-d convolution (cross-correlation, like every deep-learning framework),
/// PyTorch's `F.convNd(x, w, bias, stride, padding, dilation, groups)` for
/// any number of spatial dims (taken from the weight's rank).
pub fn conv_nd(b: &mut Builder, x: Value, w: Value, bias: Option<Value>, opts: &ConvOpts) -> Result<Value, IrError> {
    conv_impl(b, "conv", None, x, w, bias, opts)
}

/// `F.conv1d`: input `[N, C_in, L]`, weight `[C_out, C_in/groups, k]`.
pub fn conv1d(b: &mut Builder, x: Value, w: Value, bias: Option<Value>, opts: &ConvOpts) -> Result<Value, IrError> {
    conv_impl(b, "conv1d", Some(1), x, w, bias, opts)
}

/// `F.conv2d`: input `[N, C_in, H, W]`, weight `[C_out, C_in/groups, kh, kw]`.
pub fn conv2d(b: &mut Builder, x: Value, w: Value, bias: Option<Value>, opts: &ConvOpts) -> Result<Value, IrError> {
    conv_impl(b, "conv2d", Some(2), x, w, bias, opts)
}

/// `F.conv3d`: input `[N, C_in, D, H, W]`, weight `[C_out, C_in/groups, kd, kh, kw]`.
pub fn conv3d(b: &mut Builder, x: Value, w: Value, bias: Option<Value>, opts: &ConvOpts) -> Result<Value, IrError> {
    conv_impl(b, "conv3d", Some(3), x, w, bias, opts)
}

fn conv_impl(
    b: &mut Builder,
    op: &str,
    want: Option<usize>,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvOpts,
) -> Result<Value, IrError> {
    let ops = operands(b, op, x, w, want)?;
    let n = ops.spatial;
    let (c_in, c_out) = (ops.x.shape[1], ops.w.shape[0]);
    check_groups(op, opts.groups, c_in, c_out)?;
    if ops.w.shape[1] * opts.groups != c_in {
        return Err(IrError::invalid(
            op,
            format!(
                "weight {} expects {} input channels per group, but the input has {c_in} channels in {} group(s)",
                ops.w, ops.w.shape[1], opts.groups
            ),
        ));
    }
    let stride = opts.stride.resolve_pos(op, "stride", n)?;
    let dilation = opts.dilation.resolve_pos(op, "dilation", n)?;
    let kernel = &ops.w.shape[2..];
    if kernel.contains(&0) {
        return Err(IrError::invalid(op, format!("expected a non-empty kernel, got weight {}", ops.w)));
    }
    let pads: Vec<(usize, usize)> = match &opts.padding {
        Padding::Valid => vec![(0, 0); n],
        Padding::Same => {
            if stride.iter().any(|&s| s != 1) {
                return Err(IrError::invalid(
                    op,
                    format!("padding='same' is only supported with stride 1 (like PyTorch), got stride {stride:?}"),
                ));
            }
            (0..n)
                .map(|i| {
                    let total = dilation[i] * (kernel[i] - 1);
                    (total / 2, total - total / 2)
                })
                .collect()
        }
        Padding::Explicit(p) => p.resolve(op, "padding", n)?.into_iter().map(|p| (p, p)).collect(),
        Padding::Pairs(p) => {
            if p.len() != n {
                return Err(IrError::invalid(
                    op,
                    format!("expected padding pairs with {n} entries (one per spatial dim), got {}", p.len()),
                ));
            }
            p.clone()
        }
    };
    for i in 0..n {
        let l = ops.x.shape[2 + i];
        if conv_output_size(l, kernel[i], stride[i], pads[i].0, pads[i].1, dilation[i]).is_none() {
            return Err(IrError::invalid(
                op,
                format!(
                    "spatial dim {i}: the padded input ({l} + {} + {}) is smaller than the dilated kernel \
                     ({}), so the output would be empty",
                    pads[i].0,
                    pads[i].1,
                    dilation[i] * (kernel[i] - 1) + 1
                ),
            ));
        }
    }
    let params = ConvGeneral {
        strides: stride,
        padding: pads.iter().map(|&(lo, hi)| (lo as i64, hi as i64)).collect(),
        lhs_dilation: vec![1; n],
        rhs_dilation: dilation,
        feature_group_count: opts.groups,
        layout: crate::ops::conv::ConvLayout::CANONICAL,
    };
    let xb = add_batch(b, x, &ops)?;
    let y = b.conv_general(xb, w, params)?;
    finish(b, op, y, bias, &ops)
}

/// N-d transposed convolution, PyTorch's
/// `F.conv_transposeNd(x, w, bias, stride, padding, output_padding, groups, dilation)`:
/// the gradient of `convNd` with respect to its input (each input element
/// scatters `x * w` into the output at `i * stride + tap * dilation - padding`).
///
/// Lowered as one `conv_general`: the input is dilated by the stride
/// (`lhs_dilation`), the weight has its in/out channels swapped within each
/// group (`[C_in, C_out/g, *k]` -> `[C_out, C_in/g, *k]`) and its spatial
/// dims flipped, and each side is padded by `d(k-1) - p` (plus
/// `output_padding` on the high side; negative amounts crop).
pub fn conv_transpose_nd(
    b: &mut Builder,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvTransposeOpts,
) -> Result<Value, IrError> {
    conv_transpose_impl(b, "conv_transpose", None, x, w, bias, opts)
}

/// `F.conv_transpose1d`: input `[N, C_in, L]`, weight `[C_in, C_out/groups, k]`.
pub fn conv_transpose1d(
    b: &mut Builder,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvTransposeOpts,
) -> Result<Value, IrError> {
    conv_transpose_impl(b, "conv_transpose1d", Some(1), x, w, bias, opts)
}

/// `F.conv_transpose2d`: input `[N, C_in, H, W]`, weight `[C_in, C_out/groups, kh, kw]`.
pub fn conv_transpose2d(
    b: &mut Builder,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvTransposeOpts,
) -> Result<Value, IrError> {
    conv_transpose_impl(b, "conv_transpose2d", Some(2), x, w, bias, opts)
}

/// `F.conv_transpose3d`: input `[N, C_in, D, H, W]`, weight `[C_in, C_out/groups, kd, kh, kw]`.
pub fn conv_transpose3d(
    b: &mut Builder,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvTransposeOpts,
) -> Result<Value, IrError> {
    conv_transpose_impl(b, "conv_transpose3d", Some(3), x, w, bias, opts)
}

fn conv_transpose_impl(
    b: &mut Builder,
    op: &str,
    want: Option<usize>,
    x: Value,
    w: Value,
    bias: Option<Value>,
    opts: &ConvTransposeOpts,
) -> Result<Value, IrError> {
    let ops = operands(b, op, x, w, want)?;
    let n = ops.spatial;
    let g = opts.groups;
    let c_in = ops.x.shape[1];
    if ops.w.shape[0] != c_in {
        return Err(IrError::invalid(
            op,
            format!("weight {} expects {} input channels (its dim 0), but the input has {c_in}", ops.w, ops.w.shape[0]),
        ));
    }
    let c_out = ops.w.shape[1] * g;
    check_groups(op, g, c_in, c_out)?;
    let stride = opts.stride.resolve_pos(op, "stride", n)?;
    let dilation = opts.dilation.resolve_pos(op, "dilation", n)?;
    let padding = opts.padding.resolve(op, "padding", n)?;
    let out_pad = opts.output_padding.resolve(op, "output_padding", n)?;
    let kernel = ops.w.shape[2..].to_vec();
    if kernel.contains(&0) {
        return Err(IrError::invalid(op, format!("expected a non-empty kernel, got weight {}", ops.w)));
    }
    for i in 0..n {
        if out_pad[i] >= stride[i].max(dilation[i]) {
            return Err(IrError::invalid(
                op,
                format!(
                    "spatial dim {i}: output_padding ({}) must be smaller than either stride ({}) or dilation ({})",
                    out_pad[i], stride[i], dilation[i]
                ),
            ));
        }
        let l = ops.x.shape[2 + i];
        if conv_transpose_output_size(l, kernel[i], stride[i], padding[i], out_pad[i], dilation[i]).is_none() {
            return Err(IrError::invalid(
                op,
                format!(
                    "spatial dim {i}: output size ({l}-1)*{} - 2*{} + {}*({}-1) + {} + 1 is below 1",
                    stride[i], padding[i], dilation[i], kernel[i], out_pad[i]
                ),
            ));
        }
    }
    // Weight [C_in, C_out/g, *k] -> [C_out, C_in/g, *k], spatially flipped.
    let spatial_axes: Vec<usize> = (2..n + 2).collect();
    let wt = if g == 1 {
        let mut perm = vec![1, 0];
        perm.extend(&spatial_axes);
        b.transpose(w, &perm)?
    } else {
        let mut grouped = vec![g, c_in / g, c_out / g];
        grouped.extend(&kernel);
        let wg = b.reshape(w, &grouped)?;
        let mut perm = vec![0, 2, 1];
        perm.extend((3..n + 3).collect::<Vec<_>>());
        let wg = b.transpose(wg, &perm)?;
        let mut shape = vec![c_out, c_in / g];
        shape.extend(&kernel);
        b.reshape(wg, &shape)?
    };
    let wt = b.reverse(wt, &spatial_axes)?;
    let pads: Vec<(i64, i64)> = (0..n)
        .map(|i| {
            let full = (dilation[i] * (kernel[i] - 1)) as i64 - padding[i] as i64;
            (full, full + out_pad[i] as i64)
        })
        .collect();
    let params = ConvGeneral {
        strides: vec![1; n],
        padding: pads,
        lhs_dilation: stride,
        rhs_dilation: dilation,
        feature_group_count: g,
        layout: crate::ops::conv::ConvLayout::CANONICAL,
    };
    let xb = add_batch(b, x, &ops)?;
    let y = b.conv_general(xb, wt, params)?;
    finish(b, op, y, bias, &ops)
}

/// Accepts `[N, C, *spatial]` or unbatched `[C, *spatial]` input types (the
/// PyTorch convention shared by convolution and pooling) and returns whether
/// the input was unbatched together with its type viewed as batched.
pub(crate) fn with_batch_dim(
    op: &str,
    xt: TensorType,
    spatial: usize,
    context: &str,
) -> Result<(bool, TensorType), IrError> {
    if xt.rank() == spatial + 2 {
        return Ok((false, xt));
    }
    if xt.rank() != spatial + 1 {
        return Err(IrError::invalid(
            op,
            format!(
                "expected an input of rank {} ([N, C, *spatial]) or {} (unbatched [C, *spatial]){context}, got {xt}",
                spatial + 2,
                spatial + 1
            ),
        ));
    }
    let mut shape = vec![1];
    shape.extend_from_slice(&xt.shape);
    Ok((true, TensorType::new(xt.dtype, shape)))
}
