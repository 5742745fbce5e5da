//! Pooling layers with PyTorch's semantics over the `reduce_window`
//! primitive: `max_pool` and `avg_pool` for any number of spatial dims
//! (with 1d/2d/3d wrappers), a smooth (log-sum-exp) max pool, and adaptive
//! average pooling.
//!
//! Layout: input `[N, C, *spatial]` or unbatched `[C, *spatial]`; windows
//! slide over the spatial dims only (window 1 on `N` and `C`). The kernel
//! and the options take one entry per spatial dim or a single entry for all
//! ([`PerDim`]).
//!
//! Geometry (PyTorch's `pooling_output_shape`), per spatial dim with input
//! `L`, kernel `k`, stride `s` (default: the kernel), padding `p`,
//! dilation `d`: `out = floor((L + 2p - d(k-1) - 1) / s) + 1`, or with
//! `ceil_mode` the ceiling instead, minus one if the last window would start
//! at or past `L + p` (every window must start inside the input or the left
//! padding). Ceil mode may need windows that overhang the right padding;
//! those positions are extra high padding here. As in PyTorch,
//! `p <= (d(k-1) + 1) / 2` is required, and the output must be non-empty.
//!
//! Padding semantics: max pooling pads with `-inf` (padding never wins);
//! average pooling sums zeros and divides by PyTorch's divisor: with
//! `count_include_pad` (the default) the number of window positions inside
//! the padded input `[-p, L + p)` (so ceil-mode overhang is never counted),
//! without it the number inside the input `[0, L)`, or `divisor_override`.

use super::broadcast::scalar_like;
use super::conv::PerDim;
use super::reduce::logsumexp;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::window::WindowKind;
use crate::types::TensorType;

/// Pooling options (PyTorch's keyword arguments).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolOpts {
    /// Window step; `None` means the kernel size (PyTorch's default).
    pub stride: Option<PerDim>,
    /// Implicit padding on both sides (at most half the dilated kernel).
    pub padding: PerDim,
    /// Window dilation (>= 1). PyTorch only offers it for max pooling;
    /// here average pooling honours it too (divisors count the dilated taps).
    pub dilation: PerDim,
    /// Ceiling instead of floor in the output size.
    pub ceil_mode: bool,
    /// Average pooling: count padding positions in the divisor (default true).
    pub count_include_pad: bool,
    /// Average pooling: divide by this instead (>= 1).
    pub divisor_override: Option<usize>,
}

impl Default for PoolOpts {
    fn default() -> PoolOpts {
        PoolOpts {
            stride: None,
            padding: PerDim(vec![0]),
            dilation: PerDim(vec![1]),
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

impl PoolOpts {
    /// The defaults (stride = kernel, no padding, no dilation, floor mode,
    /// `count_include_pad`).
    pub fn new() -> PoolOpts {
        PoolOpts::default()
    }
    /// Sets the stride.
    pub fn stride(mut self, s: impl Into<PerDim>) -> PoolOpts {
        self.stride = Some(s.into());
        self
    }
    /// Sets the padding.
    pub fn padding(mut self, p: impl Into<PerDim>) -> PoolOpts {
        self.padding = p.into();
        self
    }
    /// Sets the dilation.
    pub fn dilation(mut self, d: impl Into<PerDim>) -> PoolOpts {
        self.dilation = d.into();
        self
    }
    /// Sets `ceil_mode`.
    pub fn ceil_mode(mut self, on: bool) -> PoolOpts {
        self.ceil_mode = on;
        self
    }
    /// Sets `count_include_pad` (average pooling).
    pub fn count_include_pad(mut self, on: bool) -> PoolOpts {
        self.count_include_pad = on;
        self
    }
    /// Sets `divisor_override` (average pooling).
    pub fn divisor_override(mut self, d: usize) -> PoolOpts {
        self.divisor_override = Some(d);
        self
    }
}

/// PyTorch's pooling output size for one dim, or `None` when it would be
/// below 1 (or `k`, `s`, `d` is 0).
pub fn pool_output_size(l: usize, k: usize, s: usize, p: usize, d: usize, ceil_mode: bool) -> Option<usize> {
    if k == 0 || s == 0 || d == 0 {
        return None;
    }
    let (l, k, s, p, d) = (l as i128, k as i128, s as i128, p as i128, d as i128);
    let num = l + 2 * p - d * (k - 1) - 1 + if ceil_mode { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil_mode && (out - 1) * s >= l + p {
        out -= 1;
    }
    (out >= 1).then(|| usize::try_from(out).ok()).flatten()
}

/// The resolved geometry of a pooling call over the full operand rank.
struct Geo {
    /// Input with a batch dim (`[N, C, *spatial]`).
    x: TensorType,
    unbatched: bool,
    spatial: usize,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    /// Symmetric padding per spatial dim.
    pad: Vec<usize>,
    /// High padding per spatial dim including ceil-mode overhang (>= pad).
    hi: Vec<usize>,
    /// Output spatial sizes.
    out: Vec<usize>,
}

impl Geo {
    fn new(b: &Builder, op: &str, x: Value, spatial: usize, kernel: &PerDim, o: &PoolOpts) -> Result<Geo, IrError> {
        let xt = b.ty(x)?.clone();
        let (unbatched, xt) = super::conv::with_batch_dim(op, xt, spatial, "")?;
        let kernel = kernel.resolve_pos(op, "kernel_size", spatial)?;
        let stride = match &o.stride {
            Some(s) => s.resolve_pos(op, "stride", spatial)?,
            None => kernel.clone(),
        };
        let dilation = o.dilation.resolve_pos(op, "dilation", spatial)?;
        let pad = o.padding.resolve(op, "padding", spatial)?;
        let mut out = Vec::with_capacity(spatial);
        let mut hi = Vec::with_capacity(spatial);
        for i in 0..spatial {
            let eff = dilation[i] * (kernel[i] - 1) + 1;
            if pad[i] > eff / 2 {
                return Err(IrError::invalid(
                    op,
                    format!(
                        "spatial dim {i}: padding ({}) must be at most half of the effective kernel size ({eff})",
                        pad[i]
                    ),
                ));
            }
            let l = xt.shape[2 + i];
            let Some(n) = pool_output_size(l, kernel[i], stride[i], pad[i], dilation[i], o.ceil_mode) else {
                return Err(IrError::invalid(
                    op,
                    format!(
                        "spatial dim {i}: input size {l} with padding {} is too small for a window of {eff}, \
                         the output would be empty",
                        pad[i]
                    ),
                ));
            };
            // Positions the last window reaches, relative to the padded start.
            let needed = (n - 1) * stride[i] + eff;
            hi.push((needed.saturating_sub(l + pad[i])).max(pad[i]));
            out.push(n);
        }
        Ok(Geo { x: xt, unbatched, spatial, kernel, stride, dilation, pad, hi, out })
    }

    /// Full-rank window parameters: `(window, strides, padding, dilation)`.
    fn full(&self) -> (Vec<usize>, Vec<usize>, Vec<(usize, usize)>, Vec<usize>) {
        let mut w = vec![1, 1];
        w.extend(&self.kernel);
        let mut s = vec![1, 1];
        s.extend(&self.stride);
        let mut p = vec![(0, 0), (0, 0)];
        p.extend(self.pad.iter().zip(&self.hi).map(|(&lo, &hi)| (lo, hi)));
        let mut d = vec![1, 1];
        d.extend(&self.dilation);
        (w, s, p, d)
    }

    fn batched(&self, b: &mut Builder, x: Value) -> Result<Value, IrError> {
        if self.unbatched {
            b.reshape(x, &self.x.shape)
        } else {
            Ok(x)
        }
    }

    fn unbatched(&self, b: &mut Builder, y: Value) -> Result<Value, IrError> {
        if self.unbatched {
            let s = b.ty(y)?.shape[1..].to_vec();
            b.reshape(y, &s)
        } else {
            Ok(y)
        }
    }

    fn window(&self, b: &mut Builder, kind: WindowKind, x: Value) -> Result<Value, IrError> {
        let (w, s, p, d) = self.full();
        let ones = vec![1; w.len()];
        b.reduce_window(kind, x, &w, &s, &p, &ones, &d)
    }
}

/// Max pooling over the trailing `spatial` dims (PyTorch's
/// `F.max_poolNd(x, kernel_size, stride, padding, dilation, ceil_mode)`).
/// Padding holds `-inf`; NaN propagates. Any numeric dtype.
pub fn max_pool(b: &mut Builder, x: Value, spatial: usize, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    max_pool_impl(b, "max_pool", x, spatial, kernel, opts)
}

fn max_pool_impl(
    b: &mut Builder,
    op: &str,
    x: Value,
    spatial: usize,
    kernel: &PerDim,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    let g = Geo::new(b, op, x, spatial, kernel, opts)?;
    if !g.x.dtype.is_numeric() {
        return Err(IrError::invalid(op, format!("expected a numeric input, got {}", g.x)));
    }
    let xb = g.batched(b, x)?;
    let y = g.window(b, WindowKind::Max, xb)?;
    g.unbatched(b, y)
}

/// `F.max_pool1d` on `[N, C, L]`.
pub fn max_pool1d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    max_pool_impl(b, "max_pool1d", x, 1, kernel, opts)
}
/// `F.max_pool2d` on `[N, C, H, W]`.
pub fn max_pool2d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    max_pool_impl(b, "max_pool2d", x, 2, kernel, opts)
}
/// `F.max_pool3d` on `[N, C, D, H, W]`.
pub fn max_pool3d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    max_pool_impl(b, "max_pool3d", x, 3, kernel, opts)
}

/// Average pooling over the trailing `spatial` dims (PyTorch's
/// `F.avg_poolNd(x, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override)`; float input). See the module
/// docs for the divisor.
pub fn avg_pool(b: &mut Builder, x: Value, spatial: usize, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    avg_pool_impl(b, "avg_pool", x, spatial, kernel, opts)
}

fn avg_pool_impl(
    b: &mut Builder,
    op: &str,
    x: Value,
    spatial: usize,
    kernel: &PerDim,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    let g = Geo::new(b, op, x, spatial, kernel, opts)?;
    if !g.x.dtype.is_float() {
        return Err(IrError::invalid(op, format!("expected a floating-point input (f32 or f64), got {}", g.x)));
    }
    if opts.divisor_override == Some(0) {
        return Err(IrError::invalid(op, "divisor_override must be >= 1"));
    }
    let xb = g.batched(b, x)?;
    let sum = g.window(b, WindowKind::Sum, xb)?;
    let div = avg_divisor(b, &g, opts)?;
    let y = match div {
        Divisor::Scalar(d) => {
            let d = scalar_like(b, d, sum)?;
            let shape = b.ty(sum)?.shape.clone();
            let d = b.broadcast_in_dim(d, &shape, &[])?;
            b.div(sum, d)?
        }
        Divisor::Counts(c) => {
            let shape = b.ty(sum)?.shape.clone();
            let dims: Vec<usize> = (2..2 + g.spatial).collect();
            let c = b.broadcast_in_dim(c, &shape, &dims)?;
            b.div(sum, c)?
        }
    };
    g.unbatched(b, y)
}

enum Divisor {
    /// The same divisor everywhere.
    Scalar(f64),
    /// Per output position, spatial shape only.
    Counts(Value),
}

/// PyTorch's average-pooling divisor: a constant when every window has the
/// same count, else the per-position window count from a sum `reduce_window`
/// of ones over the region that counts (the padded input with
/// `count_include_pad`, the input itself without).
fn avg_divisor(b: &mut Builder, g: &Geo, opts: &PoolOpts) -> Result<Divisor, IrError> {
    if let Some(d) = opts.divisor_override {
        return Ok(Divisor::Scalar(d as f64));
    }
    let full_windows = if opts.count_include_pad {
        g.hi == g.pad
    } else {
        g.pad.iter().all(|&p| p == 0) && g.hi.iter().all(|&h| h == 0)
    };
    if full_windows {
        return Ok(Divisor::Scalar(g.kernel.iter().product::<usize>() as f64));
    }
    // Ones over the counted region, padded (with zeros) out to the window grid.
    let (region, pads): (Vec<usize>, Vec<(usize, usize)>) = if opts.count_include_pad {
        (
            (0..g.spatial).map(|i| g.x.shape[2 + i] + 2 * g.pad[i]).collect(),
            (0..g.spatial).map(|i| (0, g.hi[i] - g.pad[i])).collect(),
        )
    } else {
        ((0..g.spatial).map(|i| g.x.shape[2 + i]).collect(), (0..g.spatial).map(|i| (g.pad[i], g.hi[i])).collect())
    };
    let ones = b.ones(&TensorType::new(g.x.dtype, region))?;
    let unit = vec![1; g.spatial];
    let c = b.reduce_window(WindowKind::Sum, ones, &g.kernel, &g.stride, &pads, &unit, &g.dilation)?;
    Ok(Divisor::Counts(c))
}

/// `F.avg_pool1d` on `[N, C, L]`.
pub fn avg_pool1d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    avg_pool_impl(b, "avg_pool1d", x, 1, kernel, opts)
}
/// `F.avg_pool2d` on `[N, C, H, W]`.
pub fn avg_pool2d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    avg_pool_impl(b, "avg_pool2d", x, 2, kernel, opts)
}
/// `F.avg_pool3d` on `[N, C, D, H, W]`.
pub fn avg_pool3d(b: &mut Builder, x: Value, kernel: &PerDim, opts: &PoolOpts) -> Result<Value, IrError> {
    avg_pool_impl(b, "avg_pool3d", x, 3, kernel, opts)
}

/// Smooth max pooling: `t * log(sum(exp(x / t)))` over each window (the
/// same windows, padding and output size as [`max_pool`]; padding holds
/// `-inf`, i.e. contributes nothing). As `t -> 0` it tends to max pooling;
/// it always lies in `[max, max + t * log(k)]` for a window of `k` taps.
/// Differentiable everywhere, with gradient `softmax(window / t)`.
///
/// Stabilisation: overlapping windows mean no single shift suits every
/// window if it is applied before a windowed sum (a per-plane global max
/// underflows windows far below it; a max-pool shift differs per window
/// that shares an element). So the windows are materialised instead: the
/// `-inf`-padded input is cut into one strided slice per kernel tap,
/// stacked into `[N, C, taps, *out]`, and reduced along the taps axis with
/// the window's own maximum subtracted first ([`logsumexp`]: gradient-stopped,
/// replaced by 0 when not finite, like `jax.nn.logsumexp`). This is exact for any input
/// range: no window over- or underflows unless `x / t` itself overflows.
/// Costs `taps` times the output size in memory.
pub fn smooth_max_pool(
    b: &mut Builder,
    x: Value,
    spatial: usize,
    kernel: &PerDim,
    temperature: f64,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    smooth_max_pool_impl(b, "smooth_max_pool", x, spatial, kernel, temperature, opts)
}

fn smooth_max_pool_impl(
    b: &mut Builder,
    op: &str,
    x: Value,
    spatial: usize,
    kernel: &PerDim,
    t: f64,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    let g = Geo::new(b, op, x, spatial, kernel, opts)?;
    if !g.x.dtype.is_float() {
        return Err(IrError::invalid(op, format!("expected a floating-point input (f32 or f64), got {}", g.x)));
    }
    if !(t > 0.0 && t.is_finite()) {
        return Err(IrError::invalid(op, format!("temperature must be positive and finite, got {t}")));
    }
    let xb = g.batched(b, x)?;
    let (n, c) = (g.x.shape[0], g.x.shape[1]);
    // Scale first: t * lse(x / t).
    let inv = scalar_like(b, 1.0 / t, xb)?;
    let inv = b.broadcast_in_dim(inv, &g.x.shape, &[])?;
    let xs = b.mul(xb, inv)?;
    // Pad with -inf.
    let neg_inf = scalar_like(b, f64::NEG_INFINITY, xs)?;
    let mut lo = vec![0i64, 0];
    lo.extend(g.pad.iter().map(|&p| p as i64));
    let mut hi = vec![0i64, 0];
    hi.extend(g.hi.iter().map(|&h| h as i64));
    let xp = b.pad(xs, neg_inf, &lo, &hi, &vec![0; spatial + 2])?;
    // One strided slice per kernel tap, each [N, C, 1, *out].
    let taps: usize = g.kernel.iter().product();
    let mut out_shape1 = vec![n, c, 1];
    out_shape1.extend(&g.out);
    let mut pieces = Vec::with_capacity(taps);
    for flat in 0..taps {
        let mut rem = flat;
        let mut idx = vec![0; spatial];
        for i in (0..spatial).rev() {
            idx[i] = rem % g.kernel[i];
            rem /= g.kernel[i];
        }
        let mut start = vec![0, 0];
        let mut stop = vec![n, c];
        let mut step = vec![1, 1];
        for i in 0..spatial {
            let s0 = idx[i] * g.dilation[i];
            start.push(s0);
            stop.push(s0 + (g.out[i] - 1) * g.stride[i] + 1);
            step.push(g.stride[i]);
        }
        let sl = b.slice(xp, &start, &stop, &step)?;
        pieces.push(b.reshape(sl, &out_shape1)?);
    }
    let stacked = if pieces.len() == 1 { pieces[0] } else { b.concatenate(&pieces, 2)? };
    let lse = logsumexp(b, stacked, &[2], false)?;
    let tv = scalar_like(b, t, lse)?;
    let shape = b.ty(lse)?.shape.clone();
    let tv = b.broadcast_in_dim(tv, &shape, &[])?;
    let y = b.mul(lse, tv)?;
    g.unbatched(b, y)
}

/// Smooth max pooling over `[N, C, L]`.
pub fn smooth_max_pool1d(
    b: &mut Builder,
    x: Value,
    kernel: &PerDim,
    t: f64,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    smooth_max_pool_impl(b, "smooth_max_pool1d", x, 1, kernel, t, opts)
}
/// Smooth max pooling over `[N, C, H, W]`.
pub fn smooth_max_pool2d(
    b: &mut Builder,
    x: Value,
    kernel: &PerDim,
    t: f64,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    smooth_max_pool_impl(b, "smooth_max_pool2d", x, 2, kernel, t, opts)
}
/// Smooth max pooling over `[N, C, D, H, W]`.
pub fn smooth_max_pool3d(
    b: &mut Builder,
    x: Value,
    kernel: &PerDim,
    t: f64,
    opts: &PoolOpts,
) -> Result<Value, IrError> {
    smooth_max_pool_impl(b, "smooth_max_pool3d", x, 3, kernel, t, opts)
}

/// Adaptive average pooling (PyTorch's `F.adaptive_avg_poolNd`) over the
/// trailing `output_size.len()` dims: output bin `i` of a dim of size `L`
/// averages input positions `floor(i L / out) .. ceil((i+1) L / out)`.
/// When `out` divides `L` every bin has `L / out` elements and this is one
/// `reduce_window`; otherwise each dim is reduced bin by bin (one slice and
/// sum per output position, then a concatenate), so it suits small outputs.
pub fn adaptive_avg_pool(b: &mut Builder, x: Value, output_size: &[usize]) -> Result<Value, IrError> {
    let op = "adaptive_avg_pool";
    let xt = b.ty(x)?.clone();
    let sp = output_size.len();
    if sp == 0 || xt.rank() < sp + 1 {
        return Err(IrError::invalid(
            op,
            format!("expected an input of rank >= {} for output size {output_size:?}, got {xt}", sp + 1),
        ));
    }
    if !xt.dtype.is_float() {
        return Err(IrError::invalid(op, format!("expected a floating-point input (f32 or f64), got {xt}")));
    }
    let first = xt.rank() - sp;
    for (i, &o) in output_size.iter().enumerate() {
        if o == 0 || xt.shape[first + i] == 0 {
            return Err(IrError::invalid(
                op,
                format!("output size {output_size:?} and the input spatial dims of {xt} must be non-zero"),
            ));
        }
    }
    let mut y = x;
    if output_size.iter().enumerate().all(|(i, &o)| xt.shape[first + i] % o == 0) {
        let mut w = vec![1; first];
        w.extend((0..sp).map(|i| xt.shape[first + i] / output_size[i]));
        let ones = vec![1; xt.rank()];
        let s = b.reduce_window(WindowKind::Sum, y, &w, &w, &vec![(0, 0); xt.rank()], &ones, &ones)?;
        let d = scalar_like(b, w.iter().product::<usize>() as f64, s)?;
        let shape = b.ty(s)?.shape.clone();
        let d = b.broadcast_in_dim(d, &shape, &[])?;
        return b.div(s, d);
    }
    for (i, &o) in output_size.iter().enumerate() {
        let axis = first + i;
        let mut shape = b.ty(y)?.shape.clone();
        let l = shape[axis];
        let mut bins = Vec::with_capacity(o);
        for j in 0..o {
            let (s0, e0) = (j * l / o, ((j + 1) * l).div_ceil(o));
            let mut start = vec![0; shape.len()];
            let mut stop = shape.clone();
            start[axis] = s0;
            stop[axis] = e0;
            let sl = b.slice(y, &start, &stop, &vec![1; shape.len()])?;
            let sum = b.reduce_sum(sl, &[axis])?;
            let mut one = shape.clone();
            one[axis] = 1;
            let sum = b.reshape(sum, &one)?;
            let cnt = scalar_like(b, (e0 - s0) as f64, sum)?;
            let cnt = b.broadcast_in_dim(cnt, &one, &[])?;
            bins.push(b.div(sum, cnt)?);
        }
        y = if bins.len() == 1 { bins[0] } else { b.concatenate(&bins, axis)? };
        shape[axis] = o;
        debug_assert_eq!(b.ty(y)?.shape, shape);
    }
    Ok(y)
}
