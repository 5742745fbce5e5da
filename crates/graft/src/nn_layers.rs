//! Layers over traced tensors with PyTorch's functional names and layouts:
//! convolution (`conv1d`/`2d`/`3d`), transposed convolution
//! (`conv_transpose1d`/`2d`/`3d`), pooling (`max_pool*`, `avg_pool*`,
//! `smooth_max_pool*`, `adaptive_avg_pool*`), `embedding`, `one_hot` and
//! `dropout`. All forward to `graft_core::composite::{conv, pool, embed,
//! dropout}`; see there for the exact semantics (output-size formulas,
//! padding rules, out-of-range ids). Available as `graft::layers::*` and
//! through `graft::nn`.
//!
//! Inputs are `[N, C, *spatial]` (or unbatched `[C, *spatial]`). Kernel
//! sizes and per-dim options accept one number for every spatial dim or
//! one per dim (`2`, `[2, 3]`), like PyTorch's `int`/tuple arguments.
//!
//! ```
//! use graft::{jit_n, layers::{self, ConvOpts, PoolOpts}, Tensor};
//! let f = jit_n("cnn", |v| {
//!     let y = layers::conv2d(&v[0], &v[1], None, &ConvOpts::new().padding(1));
//!     layers::max_pool2d(&y.relu(), 2, &PoolOpts::new())
//! });
//! let x = Tensor::full(&graft::TensorType::new(graft::DType::F64, vec![1, 1, 4, 4]), 1.0);
//! let w = Tensor::full(&graft::TensorType::new(graft::DType::F64, vec![2, 1, 3, 3]), 1.0);
//! let y = f.call(&[&x, &w]).unwrap();
//! // 'same' padding: interior outputs see 9 ones; every 2x2 window holds one.
//! assert_eq!(y[0].shape(), &[1, 2, 2, 2]);
//! assert_eq!(y[0].to_f64_vec(), vec![9.0; 8]);
//! ```

use crate::trace::{Axes, Tr};
use graft_core::composite::{conv, dropout as dropout_c, embed, pool};
use graft_core::DType;

pub use graft_core::composite::conv::{ConvOpts, ConvTransposeOpts, Padding, PerDim};
pub use graft_core::composite::pool::PoolOpts;

type ConvFn = fn(
    &mut graft_core::Builder,
    graft_core::Value,
    graft_core::Value,
    Option<graft_core::Value>,
    &ConvOpts,
) -> Result<graft_core::Value, graft_core::IrError>;

type ConvTFn = fn(
    &mut graft_core::Builder,
    graft_core::Value,
    graft_core::Value,
    Option<graft_core::Value>,
    &ConvTransposeOpts,
) -> Result<graft_core::Value, graft_core::IrError>;

fn conv_with(f: ConvFn, x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvOpts) -> Tr {
    match bias {
        Some(bv) => x.lift_with(&[w, bv], |b, v| f(b, v[0], v[1], Some(v[2]), opts)),
        None => x.lift2(w, |b, x, w| f(b, x, w, None, opts)),
    }
}

fn conv_t_with(f: ConvTFn, x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvTransposeOpts) -> Tr {
    match bias {
        Some(bv) => x.lift_with(&[w, bv], |b, v| f(b, v[0], v[1], Some(v[2]), opts)),
        None => x.lift2(w, |b, x, w| f(b, x, w, None, opts)),
    }
}

/// `F.conv1d(x, w, bias, ...)`: `x [N, C_in, L]`, `w [C_out, C_in/groups, k]`.
pub fn conv1d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvOpts) -> Tr {
    conv_with(conv::conv1d, x, w, bias, opts)
}
/// `F.conv2d(x, w, bias, ...)`: `x [N, C_in, H, W]`, `w [C_out, C_in/groups, kh, kw]`.
pub fn conv2d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvOpts) -> Tr {
    conv_with(conv::conv2d, x, w, bias, opts)
}
/// `F.conv3d(x, w, bias, ...)`: `x [N, C_in, D, H, W]`, `w [C_out, C_in/groups, kd, kh, kw]`.
pub fn conv3d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvOpts) -> Tr {
    conv_with(conv::conv3d, x, w, bias, opts)
}
/// N-d convolution; the number of spatial dims is the weight's rank - 2.
pub fn conv_nd(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvOpts) -> Tr {
    conv_with(conv::conv_nd, x, w, bias, opts)
}

/// `F.conv_transpose1d`: `x [N, C_in, L]`, `w [C_in, C_out/groups, k]`.
pub fn conv_transpose1d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvTransposeOpts) -> Tr {
    conv_t_with(conv::conv_transpose1d, x, w, bias, opts)
}
/// `F.conv_transpose2d`: `x [N, C_in, H, W]`, `w [C_in, C_out/groups, kh, kw]`.
pub fn conv_transpose2d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvTransposeOpts) -> Tr {
    conv_t_with(conv::conv_transpose2d, x, w, bias, opts)
}
/// `F.conv_transpose3d`: `x [N, C_in, D, H, W]`, `w [C_in, C_out/groups, kd, kh, kw]`.
pub fn conv_transpose3d(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvTransposeOpts) -> Tr {
    conv_t_with(conv::conv_transpose3d, x, w, bias, opts)
}
/// N-d transposed convolution; spatial dims from the weight's rank - 2.
pub fn conv_transpose_nd(x: &Tr, w: &Tr, bias: Option<&Tr>, opts: &ConvTransposeOpts) -> Tr {
    conv_t_with(conv::conv_transpose_nd, x, w, bias, opts)
}

macro_rules! pools {
    ($($name:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(x: &Tr, kernel: impl Into<PerDim>, opts: &PoolOpts) -> Tr {
            let k = kernel.into();
            x.lift(|b, v| pool::$name(b, v, &k, opts))
        }
    )*};
}

pools! {
    max_pool1d, "`F.max_pool1d(x, kernel, ...)` on `[N, C, L]`; stride defaults to the kernel.";
    max_pool2d, "`F.max_pool2d(x, kernel, ...)` on `[N, C, H, W]`; stride defaults to the kernel.";
    max_pool3d, "`F.max_pool3d(x, kernel, ...)` on `[N, C, D, H, W]`; stride defaults to the kernel.";
    avg_pool1d, "`F.avg_pool1d(x, kernel, ...)` on `[N, C, L]` (`count_include_pad` by default).";
    avg_pool2d, "`F.avg_pool2d(x, kernel, ...)` on `[N, C, H, W]` (`count_include_pad` by default).";
    avg_pool3d, "`F.avg_pool3d(x, kernel, ...)` on `[N, C, D, H, W]` (`count_include_pad` by default).";
}

macro_rules! smooth_pools {
    ($($name:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(x: &Tr, kernel: impl Into<PerDim>, temperature: f64, opts: &PoolOpts) -> Tr {
            let k = kernel.into();
            x.lift(|b, v| pool::$name(b, v, &k, temperature, opts))
        }
    )*};
}

smooth_pools! {
    smooth_max_pool1d, "`temperature * logsumexp(window / temperature)` over `[N, C, L]` windows (tends to max pooling as the temperature goes to 0).";
    smooth_max_pool2d, "`temperature * logsumexp(window / temperature)` over `[N, C, H, W]` windows (tends to max pooling as the temperature goes to 0).";
    smooth_max_pool3d, "`temperature * logsumexp(window / temperature)` over `[N, C, D, H, W]` windows (tends to max pooling as the temperature goes to 0).";
}

fn adaptive(x: &Tr, n: usize, output_size: PerDim) -> Tr {
    x.lift(|b, v| {
        let op = format!("adaptive_avg_pool{n}d");
        let rank = b.ty(v)?.rank();
        if rank != n + 1 && rank != n + 2 {
            return Err(graft_core::IrError::invalid(
                op,
                format!("expected an input of rank {} or {} (unbatched), got rank {rank}", n + 2, n + 1),
            ));
        }
        let out = output_size.resolve(&op, "output_size", n)?;
        pool::adaptive_avg_pool(b, v, &out)
    })
}

/// `F.adaptive_avg_pool1d(x, output_size)` on `[N, C, L]`.
pub fn adaptive_avg_pool1d(x: &Tr, output_size: impl Into<PerDim>) -> Tr {
    adaptive(x, 1, output_size.into())
}
/// `F.adaptive_avg_pool2d(x, output_size)` on `[N, C, H, W]`.
pub fn adaptive_avg_pool2d(x: &Tr, output_size: impl Into<PerDim>) -> Tr {
    adaptive(x, 2, output_size.into())
}
/// `F.adaptive_avg_pool3d(x, output_size)` on `[N, C, D, H, W]`.
pub fn adaptive_avg_pool3d(x: &Tr, output_size: impl Into<PerDim>) -> Tr {
    adaptive(x, 3, output_size.into())
}

/// `table[ids]`: `table [V, D]`, integer `ids [...]` -> `[..., D]`
/// (`F.embedding(ids, table)`). Out-of-range ids are clamped into `[0, V)`.
pub fn embedding(table: &Tr, ids: &Tr) -> Tr {
    table.lift2(ids, |b, t, i| embed::embedding(b, t, i, None))
}

/// [`embedding`] with PyTorch's `padding_idx`: rows looked up at that id get
/// no gradient.
pub fn embedding_with_padding_idx(table: &Tr, ids: &Tr, padding_idx: usize) -> Tr {
    table.lift2(ids, |b, t, i| embed::embedding(b, t, i, Some(padding_idx)))
}

/// `jax.nn.one_hot(ids, n, dtype)`: a trailing class axis; ids outside
/// `[0, n)` give all-zero rows.
pub fn one_hot(ids: &Tr, n: usize, dtype: DType) -> Tr {
    ids.lift(|b, v| {
        let axis = b.ty(v)?.rank();
        embed::one_hot(b, v, n, dtype, axis)
    })
}

/// [`one_hot`] with the class axis at `axis` of the output (negative counts
/// from the end of the output, so `-1` is the trailing axis).
pub fn one_hot_axis(ids: &Tr, n: usize, dtype: DType, axis: isize) -> Tr {
    ids.lift(|b, v| {
        let out_rank = b.ty(v)?.rank() + 1;
        let axis = Axes::resolve_axis("one_hot", axis, out_rank)?;
        embed::one_hot(b, v, n, dtype, axis)
    })
}

/// Inverted dropout with an explicit `i32[2]` key (see
/// [`graft::random::key`](crate::random::key)): zeroes each element with
/// probability `rate` and divides the rest by `1 - rate` when `training`;
/// the identity otherwise or when `rate == 0`.
pub fn dropout(key: &Tr, x: &Tr, rate: f64, training: bool) -> Tr {
    x.lift2(key, |b, x, k| dropout_c::dropout(b, k, x, rate, training))
}
