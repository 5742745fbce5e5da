//! Loss functions, each reduced to a rank-0 mean (PyTorch's default
//! `reduction='mean'`): `mse`, `cross_entropy` (integer class labels),
//! `binary_cross_entropy_with_logits`.
//!
//! Shapes are checked strictly (no broadcasting between prediction and
//! target: PyTorch only warns there, and a silently broadcast loss is a
//! classic bug), with errors naming both types.

use super::broadcast::{self, scalar_like};
use super::math::{require_float, softplus};
use super::reduce::{expand_back, log_softmax, mean};
use super::shape::check_axes;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};

fn same_type(b: &Builder, op: &str, x: Value, y: Value, what: &str) -> Result<(), IrError> {
    let (xt, yt) = (b.ty(x)?, b.ty(y)?);
    if xt != yt {
        return Err(IrError::invalid(op, format!("{what} must have the same type; got {xt} and {yt}")));
    }
    Ok(())
}

fn mean_all(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let rank = b.ty(x)?.rank();
    let axes: Vec<usize> = (0..rank).collect();
    mean(b, x, &axes, false)
}

/// Mean squared error `mean((pred - target)^2)` over all elements.
pub fn mse(b: &mut Builder, pred: Value, target: Value) -> Result<Value, IrError> {
    require_float(b, "mse", pred)?;
    same_type(b, "mse", pred, target, "prediction and target")?;
    let d = b.sub(pred, target)?;
    let d2 = b.mul(d, d)?;
    mean_all(b, d2)
}

/// Softmax cross-entropy with integer class labels (`F.cross_entropy` /
/// `optax.softmax_cross_entropy_with_integer_labels` then mean):
/// `mean(-log_softmax(logits, axis)[label])`.
///
/// `labels` (i32/i64) have `logits`' shape with `axis` removed. The picked
/// log-probability is selected with a one-hot mask (`iota == label`) and a
/// sum over `axis`, so gradients flow only into the picked entry. A label
/// outside `[0, C)` matches no class and contributes 0 to the sum (it is
/// still counted in the mean), like a `jax.nn.one_hot` formulation;
/// PyTorch would raise instead.
pub fn cross_entropy(b: &mut Builder, logits: Value, labels: Value, axis: usize) -> Result<Value, IrError> {
    require_float(b, "cross_entropy", logits)?;
    let (lt, yt) = (b.ty(logits)?.clone(), b.ty(labels)?.clone());
    check_axes("cross_entropy", &[axis], lt.rank())?;
    let mut want = lt.shape.clone();
    want.remove(axis);
    if !yt.dtype.is_int() || yt.shape != want {
        return Err(IrError::invalid(
            "cross_entropy",
            format!("labels must be integers of shape {want:?} (logits {lt} without axis {axis}), got {yt}"),
        ));
    }
    let logp = log_softmax(b, logits, axis)?;
    let classes = b.iota(yt.dtype, &lt.shape, axis)?;
    let lab = expand_back(b, labels, &lt.shape, &[axis])?;
    let hit = b.compare(Compare::Eq, classes, lab)?;
    let zero = scalar_like(b, 0.0, logp)?;
    let picked = broadcast::select(b, hit, logp, zero)?;
    let picked = b.reduce_sum(picked, &[axis])?;
    let nll = b.neg(picked)?;
    mean_all(b, nll)
}

/// `mean(max(x, 0) - x * t + log1p(exp(-|x|)))`: binary cross-entropy on
/// logits `x` with targets `t` in `[0, 1]` (`F.binary_cross_entropy_with_logits`),
/// in the stable form that never exponentiates a positive number.
pub fn binary_cross_entropy_with_logits(b: &mut Builder, logits: Value, targets: Value) -> Result<Value, IrError> {
    require_float(b, "binary_cross_entropy_with_logits", logits)?;
    same_type(b, "binary_cross_entropy_with_logits", logits, targets, "logits and targets")?;
    // softplus(x) - x t = max(x, 0) + log1p(exp(-|x|)) - x t.
    let sp = softplus(b, logits)?;
    let xt = broadcast::binary(b, Binary::Mul, logits, targets)?;
    let l = b.sub(sp, xt)?;
    mean_all(b, l)
}
