//! Elementwise math composites: `square`, `reciprocal`, `clamp`,
//! `safe_log`, and the activation functions `relu`, `gelu`, `silu`,
//! `softplus`, `sigmoid`, `log_sigmoid`.
//!
//! Conventions:
//! - Everything is elementwise, keeps the operand's shape and dtype, and
//!   emits only primitives (so later transforms differentiate and batch
//!   these for free).
//! - Numbers given as `f64` parameters become rank-0 constants of the
//!   operand's dtype (no implicit promotion).
//! - The activations follow `jax.nn` (and agree with PyTorch where the two
//!   agree); formulas are chosen to stay finite for large `|x|`.

use super::broadcast::{self, scalar_like};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};

/// Requires a floating-point operand (for ops whose formula needs one).
pub(crate) fn require_float(b: &Builder, op: &str, x: Value) -> Result<(), IrError> {
    let t = b.ty(x)?;
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(IrError::invalid(op, format!("expected a floating-point tensor (f32 or f64), got {t}")))
    }
}

/// `x * x`.
pub fn square(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    b.mul(x, x)
}

/// `1 / x` (floats only: an integer reciprocal would truncate to 0).
pub fn reciprocal(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    require_float(b, "reciprocal", x)?;
    let one = scalar_like(b, 1.0, x)?;
    broadcast::binary(b, Binary::Div, one, x)
}

/// `min(max(x, lo), hi)` with scalar bounds (NumPy's `clip`).
///
/// Requires `lo <= hi` (neither NaN). NaN elements of `x` stay NaN because
/// `max`/`min` propagate NaN.
pub fn clamp(b: &mut Builder, x: Value, lo: f64, hi: f64) -> Result<Value, IrError> {
    if lo.is_nan() || hi.is_nan() || lo > hi {
        return Err(IrError::invalid("clamp", format!("expected lo <= hi, got lo={lo}, hi={hi}")));
    }
    let lo = scalar_like(b, lo, x)?;
    let hi = scalar_like(b, hi, x)?;
    let y = broadcast::binary(b, Binary::Max, x, lo)?;
    broadcast::binary(b, Binary::Min, y, hi)
}

/// `min(max(x, lo), hi)` with tensor bounds, all three broadcast together
/// (NumPy's `clip(x, lo, hi)` with array bounds). Where `lo > hi` the result
/// is `hi`, as in NumPy.
pub fn clamp_tensor(b: &mut Builder, x: Value, lo: Value, hi: Value) -> Result<Value, IrError> {
    let y = broadcast::binary(b, Binary::Max, x, lo)?;
    broadcast::binary(b, Binary::Min, y, hi)
}

/// `log(max(x, eps))`: a logarithm that never returns `-inf` (or NaN for
/// negative inputs) on data that should be positive. `eps` must be positive
/// and finite.
pub fn safe_log(b: &mut Builder, x: Value, eps: f64) -> Result<Value, IrError> {
    if !(eps > 0.0 && eps.is_finite()) {
        return Err(IrError::invalid("safe_log", format!("eps must be positive and finite, got {eps}")));
    }
    require_float(b, "safe_log", x)?;
    let e = scalar_like(b, eps, x)?;
    let y = broadcast::binary(b, Binary::Max, x, e)?;
    b.log(y)
}

/// `max(x, 0)`, written as `where(x <= 0, 0, x)`.
///
/// The `select` form makes the derivative at 0 exactly 0 (JAX's
/// convention, `relu'(0) = 0`) once autodiff exists, whatever tie rule the
/// `max` primitive ends up with, and keeps NaN as NaN (`NaN <= 0` is false).
/// Works for every numeric dtype.
pub fn relu(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let zero = scalar_like(b, 0.0, x)?;
    let nonpos = broadcast::compare(b, Compare::Le, x, zero)?;
    broadcast::select(b, nonpos, zero, x)
}

/// The Gaussian error linear unit.
///
/// `approximate = false`: the exact `x * Φ(x) = 0.5 x (1 + erf(x / √2))`
/// (PyTorch's default). `approximate = true`: the tanh form
/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` (`jax.nn.gelu`'s default,
/// PyTorch's `approximate='tanh'`).
pub fn gelu(b: &mut Builder, x: Value, approximate: bool) -> Result<Value, IrError> {
    require_float(b, "gelu", x)?;
    let inner = if approximate {
        let c = scalar_like(b, (2.0 / std::f64::consts::PI).sqrt(), x)?;
        let k = scalar_like(b, 0.044715, x)?;
        let x2 = b.mul(x, x)?;
        let x3 = b.mul(x2, x)?;
        let kx3 = broadcast::binary(b, Binary::Mul, k, x3)?;
        let s = b.add(x, kx3)?;
        let arg = broadcast::binary(b, Binary::Mul, c, s)?;
        b.tanh(arg)?
    } else {
        let r = scalar_like(b, std::f64::consts::FRAC_1_SQRT_2, x)?;
        let arg = broadcast::binary(b, Binary::Mul, x, r)?;
        b.erf(arg)?
    };
    let one = scalar_like(b, 1.0, x)?;
    let half = scalar_like(b, 0.5, x)?;
    let t = broadcast::binary(b, Binary::Add, one, inner)?;
    let hx = broadcast::binary(b, Binary::Mul, half, x)?;
    b.mul(hx, t)
}

/// The logistic sigmoid `1 / (1 + e^-x)` (the `logistic` primitive, whose
/// kernel saturates cleanly to 0 and 1).
pub fn sigmoid(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    b.logistic(x)
}

/// `x * sigmoid(x)` (a.k.a. swish).
pub fn silu(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let s = b.logistic(x)?;
    b.mul(x, s)
}

/// `log(1 + e^x)`, computed as `max(x, 0) + log1p(exp(-|x|))`: exact for
/// large positive `x` (no overflow of `e^x`) and for large negative `x`
/// (`log1p` keeps the tiny result instead of rounding `1 + e^x` to 1).
pub fn softplus(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    require_float(b, "softplus", x)?;
    let zero = scalar_like(b, 0.0, x)?;
    let pos = broadcast::binary(b, Binary::Max, x, zero)?;
    let a = b.abs(x)?;
    let na = b.neg(a)?;
    let e = b.exp(na)?;
    let l = b.log1p(e)?;
    b.add(pos, l)
}

/// `log(sigmoid(x)) = -softplus(-x)`, finite for large negative `x`.
pub fn log_sigmoid(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let nx = b.neg(x)?;
    let sp = softplus(b, nx)?;
    b.neg(sp)
}
