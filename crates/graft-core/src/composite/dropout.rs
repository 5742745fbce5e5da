//! Inverted dropout with an explicit random key (JAX/Flax style).
//!
//! In training, each element is kept with probability `keep = 1 - rate`
//! and kept values are divided by `keep`, so the expectation is unchanged
//! and inference needs no rescaling. The mask is `u < keep` with `u` drawn
//! by the `random_uniform` primitive from the given key at `x`'s shape and
//! dtype: a pure function of the key, so the same key gives the same mask
//! (and reverse mode recomputes or reuses it consistently). With `rate == 0`
//! or outside training the input is returned unchanged and no random
//! numbers are drawn.

use super::broadcast::scalar_like;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::Compare;
use crate::types::TensorType;

/// `where(u < 1 - rate, x / (1 - rate), 0)` with `u ~ U[0, 1)` from `key`
/// (an `i32[2]` key) when `training`; `x` itself otherwise. `rate` must be
/// in `[0, 1)`; `x` must be floating point.
pub fn dropout(b: &mut Builder, key: Value, x: Value, rate: f64, training: bool) -> Result<Value, IrError> {
    let op = "dropout";
    let kt = b.ty(key)?;
    if *kt != TensorType::new(DType::I32, vec![2]) {
        return Err(IrError::invalid(op, format!("expected a key of type i32[2], got {kt}")));
    }
    let xt = b.ty(x)?.clone();
    if !xt.dtype.is_float() {
        return Err(IrError::invalid(op, format!("expected a floating-point input (f32 or f64), got {xt}")));
    }
    if !(0.0..1.0).contains(&rate) {
        return Err(IrError::invalid(op, format!("rate must be in [0, 1), got {rate}")));
    }
    if !training || rate == 0.0 {
        return Ok(x);
    }
    let keep = 1.0 - rate;
    let u = b.random_uniform(key, &xt.shape, xt.dtype)?;
    let kp = scalar_like(b, keep, x)?;
    let kp = b.broadcast_in_dim(kp, &xt.shape, &[])?;
    let mask = b.compare(Compare::Lt, u, kp)?;
    let scaled = b.div(x, kp)?;
    let zero = b.zeros(&xt)?;
    b.select(mask, scaled, zero)
}
