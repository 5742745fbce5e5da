//! Small building blocks that keep derivative rules to a few lines:
//! arithmetic on optional (symbolically zero) tangents and constants shaped
//! like an existing value.

use crate::error::IrError;
use crate::ir::{Builder, Value};

/// A constant with the type of `like`, filled with `value` (`jnp.full_like`
/// argument order; one definition, in the shape composites).
pub use crate::composite::shape::full_like;

/// Zeros with the type of `like`.
pub fn zeros_like(b: &mut Builder, like: Value) -> Result<Value, IrError> {
    full_like(b, like, 0.0)
}

/// `t * c` where `t` is a tangent and `c` a primal coefficient of the same type.
pub fn scale(b: &mut Builder, t: Value, c: Value) -> Result<Value, IrError> {
    b.mul(t, c)
}

/// `t * c` for an optional tangent.
pub fn scale_opt(b: &mut Builder, t: Option<Value>, c: Value) -> Result<Option<Value>, IrError> {
    t.map(|t| b.mul(t, c)).transpose()
}

/// `x + y` where either may be a symbolic zero.
pub fn add_opt(b: &mut Builder, x: Option<Value>, y: Option<Value>) -> Result<Option<Value>, IrError> {
    Ok(match (x, y) {
        (Some(x), Some(y)) => Some(b.add(x, y)?),
        (x, None) => x,
        (None, y) => y,
    })
}

/// `-x` for an optional value.
pub fn neg_opt(b: &mut Builder, x: Option<Value>) -> Result<Option<Value>, IrError> {
    x.map(|x| b.neg(x)).transpose()
}

/// `x - y` where either may be a symbolic zero.
pub fn sub_opt(b: &mut Builder, x: Option<Value>, y: Option<Value>) -> Result<Option<Value>, IrError> {
    let ny = neg_opt(b, y)?;
    match (x, y) {
        (Some(x), Some(y)) => Ok(Some(b.sub(x, y)?)),
        (x, None) => Ok(x),
        (None, _) => Ok(ny),
    }
}

/// A tangent that must be materialised (e.g. as an operand of a multi-input
/// linear op): the value or zeros of `like`'s type.
pub fn or_zeros(b: &mut Builder, t: Option<Value>, like: Value) -> Result<Value, IrError> {
    match t {
        Some(t) => Ok(t),
        None => zeros_like(b, like),
    }
}

/// Converts a bool mask to the float dtype of `like` (1.0 / 0.0).
pub fn mask_like(b: &mut Builder, mask: Value, like: Value) -> Result<Value, IrError> {
    let dtype = b.ty(like)?.dtype;
    b.convert(mask, dtype)
}
