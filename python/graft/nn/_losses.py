"""Mean losses over a batch (``graft::nn``'s), on tracers or NumPy arrays."""

from __future__ import annotations

from typing import Any

from .. import _graft as _g
from ..numpy import _ctx, _eager
from .._tracer import Tracer, lift, to_array

__all__ = ["mse", "cross_entropy", "binary_cross_entropy_with_logits"]


def _loss(op: str, a: Any, b: Any) -> Any:
    ctx = _ctx(a, b)
    if ctx is None:
        return _eager(("loss", op), lambda x, y: _loss(op, x, y), to_array(a, op), to_array(b, op))
    x, y = lift(a, ctx, op), lift(b, ctx, op)
    return Tracer(_g.loss(op, x._h, y._h))


def mse(pred: Any, target: Any) -> Any:
    """``mean((pred - target)^2)``."""
    return _loss("mse", pred, target)


def cross_entropy(logits: Any, labels: Any) -> Any:
    """Mean softmax cross-entropy of ``logits [..., classes]`` against
    integer ``labels [...]`` (``optax.softmax_cross_entropy_with_integer_labels``,
    averaged)."""
    return _loss("cross_entropy", logits, labels)


def binary_cross_entropy_with_logits(logits: Any, targets: Any) -> Any:
    """Mean sigmoid cross-entropy of ``logits`` against targets in ``[0, 1]``, stable."""
    return _loss("bce_logits", logits, targets)
