//! Elementwise math composites: `square`, `reciprocal`, `clamp`,
//! `safe_log`, Python's `//` and `%` (`floor_divide`, `remainder`), the
//! tests `isnan`, `isinf`, `isfinite`, and the activation functions `relu`,
//! `leaky_relu`, `elu`, `gelu`, `silu`, `softplus`, `sigmoid`, `log_sigmoid`.
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
use crate::DType;

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

/// `x` where `x >= 0`, `negative_slope * x` elsewhere (`jax.nn.leaky_relu`,
/// whose derivative at 0 is 1). Floats only.
pub fn leaky_relu(b: &mut Builder, x: Value, negative_slope: f64) -> Result<Value, IrError> {
    require_float(b, "leaky_relu", x)?;
    let zero = scalar_like(b, 0.0, x)?;
    let nonneg = broadcast::compare(b, Compare::Ge, x, zero)?;
    let s = scalar_like(b, negative_slope, x)?;
    let neg = broadcast::binary(b, Binary::Mul, x, s)?;
    broadcast::select(b, nonneg, x, neg)
}

/// `x` where `x > 0`, `alpha (e^x - 1)` elsewhere (`jax.nn.elu`; derivative
/// `alpha` at 0). The exponential only ever sees `min(x, 0)`, so a large
/// positive `x` gives no overflow and no NaN in the gradient (`0 * inf`).
pub fn elu(b: &mut Builder, x: Value, alpha: f64) -> Result<Value, IrError> {
    require_float(b, "elu", x)?;
    let zero = scalar_like(b, 0.0, x)?;
    let pos = broadcast::compare(b, Compare::Gt, x, zero)?;
    let safe = broadcast::select(b, pos, zero, x)?;
    let em = b.expm1(safe)?;
    let a = scalar_like(b, alpha, x)?;
    let neg = broadcast::binary(b, Binary::Mul, a, em)?;
    broadcast::select(b, pos, x, neg)
}

/// Whether each element is NaN (bool; all false for integers).
pub fn isnan(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    broadcast::compare(b, Compare::Ne, x, x)
}

/// Whether each element is +inf or -inf (bool; all false for integers).
pub fn isinf(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    if !b.ty(x)?.dtype.is_float() {
        return broadcast::compare(b, Compare::Ne, x, x);
    }
    let m = b.abs(x)?;
    let inf = scalar_like(b, f64::INFINITY, x)?;
    broadcast::compare(b, Compare::Eq, m, inf)
}

/// Whether each element is neither NaN nor infinite (bool; all true for
/// integers): `|x| < inf`, false for NaN since NaN compares false.
pub fn isfinite(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    if !b.ty(x)?.dtype.is_float() {
        return broadcast::compare(b, Compare::Eq, x, x);
    }
    let m = b.abs(x)?;
    let inf = scalar_like(b, f64::INFINITY, x)?;
    broadcast::compare(b, Compare::Lt, m, inf)
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

/// Where a truncated remainder `r` has the opposite sign to the divisor `y`
/// (so `r != 0`): the elements Python's floor semantics round differently.
fn sign_differs(b: &mut Builder, r: Value, y: Value) -> Result<Value, IrError> {
    let zero = scalar_like(b, 0.0, r)?;
    let r_neg = broadcast::compare(b, Compare::Lt, r, zero)?;
    let r_pos = broadcast::compare(b, Compare::Gt, r, zero)?;
    let y_neg = broadcast::compare(b, Compare::Lt, y, zero)?;
    let y_pos = broadcast::compare(b, Compare::Gt, y, zero)?;
    let a = broadcast::binary(b, Binary::And, r_neg, y_pos)?;
    let c = broadcast::binary(b, Binary::And, r_pos, y_neg)?;
    broadcast::binary(b, Binary::Or, a, c)
}

fn require_number(b: &Builder, op: &str, x: Value, y: Value) -> Result<(), IrError> {
    for v in [x, y] {
        if b.ty(v)?.dtype == DType::Bool {
            return Err(IrError::invalid(op, "expected numbers, got a bool tensor"));
        }
    }
    Ok(())
}

/// Python's `x // y` (`np.floor_divide`), with NumPy broadcasting: the
/// quotient rounded toward negative infinity. Floats: `floor(x / y)`;
/// integers exactly (the truncated quotient, less one where the remainder
/// and divisor differ in sign); an integer division by zero gives 0, as
/// graft's integer `/` does.
pub fn floor_divide(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    require_number(b, "floor_divide", x, y)?;
    let q = broadcast::binary(b, Binary::Div, x, y)?;
    if b.ty(q)?.dtype.is_float() {
        return b.floor(q);
    }
    // Unsigned: truncation is the floor.
    if b.ty(q)?.dtype.is_unsigned() {
        return Ok(q);
    }
    let r = broadcast::binary(b, Binary::Rem, x, y)?;
    let fix = sign_differs(b, r, y)?;
    let one = scalar_like(b, 1.0, q)?;
    let zero = scalar_like(b, 0.0, q)?;
    let dec = broadcast::select(b, fix, one, zero)?;
    broadcast::binary(b, Binary::Sub, q, dec)
}

/// Python's `x % y` (`np.remainder`), with NumPy broadcasting: the result
/// has the divisor's sign, and `x == floor_divide(x, y) * y + remainder(x, y)`.
/// An integer remainder by zero gives 0 (graft's `rem`). Differentiable in
/// both operands for floats (the truncated `rem` plus a piecewise-constant
/// correction).
pub fn remainder(b: &mut Builder, x: Value, y: Value) -> Result<Value, IrError> {
    require_number(b, "remainder", x, y)?;
    let r = broadcast::binary(b, Binary::Rem, x, y)?;
    // Unsigned: both operands are nonnegative, nothing to correct.
    if b.ty(r)?.dtype.is_unsigned() {
        return Ok(r);
    }
    let fix = sign_differs(b, r, y)?;
    let shifted = broadcast::binary(b, Binary::Add, r, y)?;
    broadcast::select(b, fix, shifted, r)
}

/// The inverse error function on `[-1, 1]` (`±inf` at `±1`, NaN outside):
/// the `erf_inv` primitive, which computes what `jax.lax.erf_inv` gives on
/// CPU bit for bit in f32 and f64 (XLA's algorithm and rounding; see
/// `ops/mathfn/erf_inv.rs`). Its derivative is JAX's rule,
/// `sqrt(pi)/2 e^(y^2)`.
pub fn erf_inv(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    require_float(b, "erf_inv", x)?;
    b.erf_inv(x)
}
