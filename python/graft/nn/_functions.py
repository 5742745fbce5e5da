"""``graft.nn``: activation and normalisation functions with ``jax.nn``'s
names (graft's composite definitions, so every transform applies).
Modules, optimizers and the trainer follow the training-runtime issue."""

from __future__ import annotations

from typing import Any

from .. import _graft as _g
from ..numpy import _eager, _unary
from .._tracer import Tracer, to_array

__all__ = ["relu", "sigmoid", "silu", "swish", "gelu", "softplus", "log_sigmoid", "leaky_relu", "elu",
           "softmax", "log_softmax", "logsumexp"]


def relu(x: Any) -> Any:
    """``max(x, 0)`` with derivative 0 at 0."""
    return _unary("relu", x)


def sigmoid(x: Any) -> Any:
    """The logistic function."""
    return _unary("sigmoid", x)


def silu(x: Any) -> Any:
    """``x * sigmoid(x)``."""
    return _unary("silu", x)


swish = silu


def gelu(x: Any, approximate: bool = True) -> Any:
    """GELU; ``approximate=True`` (JAX's default) is the tanh form."""
    return _unary("gelu_approx" if approximate else "gelu", x)


def softplus(x: Any) -> Any:
    """``log(1 + exp(x))``, stable."""
    return _unary("softplus", x)


def log_sigmoid(x: Any) -> Any:
    """``log(sigmoid(x))``, stable."""
    return _unary("log_sigmoid", x)


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Any:
    """``x`` where positive, ``negative_slope * x`` elsewhere."""
    if isinstance(x, Tracer):
        return Tracer(_g.leaky_relu(x._h, float(negative_slope)))
    return _eager(("leaky_relu", float(negative_slope)), lambda t: leaky_relu(t, negative_slope), to_array(x, "leaky_relu"))


def elu(x: Any, alpha: float = 1.0) -> Any:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    if isinstance(x, Tracer):
        return Tracer(_g.elu(x._h, float(alpha)))
    return _eager(("elu", float(alpha)), lambda t: elu(t, alpha), to_array(x, "elu"))


def _soft(op: str, x: Any, axis: int) -> Any:
    if isinstance(x, Tracer):
        return Tracer(_g.softmax(op, x._h, int(axis)))
    return _eager((op, int(axis)), lambda t: _soft(op, t, axis), to_array(x, op))


def softmax(x: Any, axis: int = -1) -> Any:
    """Softmax along ``axis``, stable."""
    return _soft("softmax", x, axis)


def log_softmax(x: Any, axis: int = -1) -> Any:
    """Log-softmax along ``axis``, stable."""
    return _soft("log_softmax", x, axis)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, stable."""
    from ..numpy import _reduce

    return _reduce("logsumexp", x, axis, keepdims)
