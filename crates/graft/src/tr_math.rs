//! Elementwise math, activations, dtype helpers and constant creation on
//! [`Tr`]. Everything forwards to `graft_core::composite`, so the same
//! definitions serve the graft language.
//!
//! Constants inside a trace are created from any traced tensor of that
//! trace: `x.constant(t)`, `x.full(&[2, 3], 1.0, DType::F32)`,
//! `x.zeros_like()`, `x.arange(0.0, 5.0, 1.0, DType::I32)`. The handle only
//! names the trace; its value is not used.

use crate::trace::Tr;
use graft_core::composite::{math, shape};
use graft_core::{DType, Tensor};

impl Tr {
    /// `max(x, 0)` with `relu'(0) = 0` (JAX's convention).
    pub fn relu(&self) -> Tr {
        self.lift(math::relu)
    }
    /// `x` where `x >= 0`, `negative_slope * x` elsewhere (`jax.nn.leaky_relu`).
    pub fn leaky_relu(&self, negative_slope: f64) -> Tr {
        self.lift(|b, x| math::leaky_relu(b, x, negative_slope))
    }
    /// `x` where `x > 0`, `alpha (e^x - 1)` elsewhere (`jax.nn.elu`); the
    /// gradient stays finite for large `x`.
    pub fn elu(&self, alpha: f64) -> Tr {
        self.lift(|b, x| math::elu(b, x, alpha))
    }
    /// Whether each element is NaN (bool).
    pub fn isnan(&self) -> Tr {
        self.lift(math::isnan)
    }
    /// Whether each element is infinite (bool).
    pub fn isinf(&self) -> Tr {
        self.lift(math::isinf)
    }
    /// Whether each element is finite (bool).
    pub fn isfinite(&self) -> Tr {
        self.lift(math::isfinite)
    }
    /// Exact GELU `x Φ(x)` (PyTorch's default; `jax.nn.gelu(approximate=False)`).
    pub fn gelu(&self) -> Tr {
        self.lift(|b, x| math::gelu(b, x, false))
    }
    /// Tanh-approximated GELU (`jax.nn.gelu`'s default, PyTorch's `approximate='tanh'`).
    pub fn gelu_approx(&self) -> Tr {
        self.lift(|b, x| math::gelu(b, x, true))
    }
    /// `x * sigmoid(x)`.
    pub fn silu(&self) -> Tr {
        self.lift(math::silu)
    }
    /// `log(1 + e^x)`, stable for large `|x|`.
    pub fn softplus(&self) -> Tr {
        self.lift(math::softplus)
    }
    /// `log(sigmoid(x))`, stable for large `|x|`.
    pub fn log_sigmoid(&self) -> Tr {
        self.lift(math::log_sigmoid)
    }
    /// `x * x`.
    pub fn square(&self) -> Tr {
        self.lift(math::square)
    }
    /// `1 / x` (floats).
    pub fn reciprocal(&self) -> Tr {
        self.lift(math::reciprocal)
    }
    /// `min(max(x, lo), hi)` with number bounds (`lo <= hi`).
    pub fn clamp(&self, lo: f64, hi: f64) -> Tr {
        self.lift(|b, x| math::clamp(b, x, lo, hi))
    }
    /// `min(max(x, lo), hi)` with tensor bounds, broadcasting all three (`np.clip`).
    pub fn clip(&self, lo: &Tr, hi: &Tr) -> Tr {
        self.lift_with(&[lo, hi], |b, v| math::clamp_tensor(b, v[0], v[1], v[2]))
    }
    /// `log(max(x, eps))` (`eps > 0`).
    pub fn safe_log(&self, eps: f64) -> Tr {
        self.lift(|b, x| math::safe_log(b, x, eps))
    }
    /// Converts to another dtype (see `graft_core::ops::cast` for the rules).
    pub fn convert(&self, dtype: DType) -> Tr {
        self.lift(|b, x| b.convert(x, dtype))
    }
    /// Identity whose derivative is zero.
    pub fn stop_gradient(&self) -> Tr {
        self.lift(|b, x| b.stop_gradient(x))
    }

    /// A literal tensor in this trace.
    pub fn constant(&self, t: Tensor) -> Tr {
        self.lift(move |b, _| b.constant(t))
    }
    /// A rank-0 constant of the given dtype in this trace.
    pub fn scalar(&self, value: f64, dtype: DType) -> Tr {
        self.lift(|b, _| b.scalar(value, dtype))
    }
    /// `value` everywhere, of the given shape and dtype, in this trace.
    pub fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Tr {
        self.lift(|b, _| shape::full(b, shape, value, dtype))
    }
    /// Zeros of the given shape and dtype in this trace.
    pub fn zeros(&self, shape: &[usize], dtype: DType) -> Tr {
        self.full(shape, 0.0, dtype)
    }
    /// Ones of the given shape and dtype in this trace.
    pub fn ones(&self, shape: &[usize], dtype: DType) -> Tr {
        self.full(shape, 1.0, dtype)
    }
    /// `value` everywhere with this tensor's shape and dtype.
    pub fn full_like(&self, value: f64) -> Tr {
        self.lift(|b, x| shape::full_like(b, x, value))
    }
    /// Zeros with this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Tr {
        self.full_like(0.0)
    }
    /// Ones with this tensor's shape and dtype.
    pub fn ones_like(&self) -> Tr {
        self.full_like(1.0)
    }
    /// `np.arange(start, stop, step)` of `dtype`, in this trace.
    pub fn arange(&self, start: f64, stop: f64, step: f64, dtype: DType) -> Tr {
        self.lift(|b, _| shape::arange(b, start, stop, step, dtype))
    }
    /// `np.linspace(start, stop, num, endpoint)` of a float `dtype`, in this trace.
    pub fn linspace(&self, start: f64, stop: f64, num: usize, endpoint: bool, dtype: DType) -> Tr {
        self.lift(|b, _| shape::linspace(b, start, stop, num, endpoint, dtype))
    }
}
