"""``graft.numpy.linalg``: ``jax.numpy.linalg`` functions graft has
(batched over leading axes; derivatives and batching from graft's rules)."""

from __future__ import annotations

from typing import Any

from . import _graft as _g
from ._tracer import Tracer, lift, to_array

__all__ = ["cholesky", "inv", "det", "solve"]


def _one(op: str, x: Any) -> Any:
    from .numpy import _eager

    if isinstance(x, Tracer):
        return Tracer(_g.linalg(op, x._h))
    return _eager(("linalg", op), lambda t: _one(op, t), to_array(x, f"graft.numpy.linalg.{op}"))


def cholesky(a: Any) -> Any:
    """The lower Cholesky factor of a symmetric positive-definite matrix."""
    return _one("cholesky", a)


def inv(a: Any) -> Any:
    """The inverse of a square matrix."""
    return _one("inv", a)


def det(a: Any) -> Any:
    """The determinant of a square matrix."""
    return _one("det", a)


def solve(a: Any, b: Any) -> Any:
    """``x`` with ``a @ x = b`` (``b`` a vector or a matrix of right-hand sides)."""
    from .numpy import _ctx, _eager, _promote_all

    ctx = _ctx(a, b)
    if ctx is None:
        return _eager(("linalg", "solve"), solve, to_array(a, "solve"), to_array(b, "solve"))
    ta, tb = _promote_all([lift(a, ctx, "solve"), lift(b, ctx, "solve")])
    if ta.dtype.kind != "f":  # JAX's solve promotes integers to the float dtype
        ta, tb = ta.astype("float64"), tb.astype("float64")
    return Tracer(_g.solve(ta._h, tb._h))
