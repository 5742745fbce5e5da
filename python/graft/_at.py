"""``x.at[index].set/add/mul/min/max/get``: JAX's functional index updates
on tracers.

The index must be static (ints, slices, ``None``, ``...``, NumPy integer or
boolean arrays): the positions it selects are computed with NumPy at trace
time, so the update is a gather of the new values and an elementwise
``where`` (no scatter), and every transform applies. Repeated positions:
``set`` keeps the last value written (NumPy's rule; JAX leaves it
unspecified), ``add``/``mul``/``min``/``max`` combine every value, in index
order. Out-of-range indices raise ``IndexError`` (JAX drops such updates).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import numpy as np

_OPS: Dict[str, Callable[[Any, Any], Any]] = {}


def _ops() -> Dict[str, Callable[[Any, Any], Any]]:
    if not _OPS:
        from . import numpy as gnp

        _OPS.update({"set": lambda old, new: new, "add": gnp.add, "mul": gnp.multiply, "min": gnp.minimum,
                     "max": gnp.maximum, "divide": gnp.divide, "power": gnp.power})
    return _OPS


def _static_index(index: Any) -> Any:
    from ._tracer import Tracer

    parts = index if isinstance(index, tuple) else (index,)
    for p in parts:
        if isinstance(p, Tracer):
            raise TypeError("x.at[...] takes a static index (ints, slices, NumPy arrays); a traced index is not supported")
    return index


def _update(x: Any, index: Any, values: Any, op: str) -> Any:
    from . import numpy as gnp
    from ._tracer import Tracer, lift

    index = _static_index(index)
    n = int(np.prod(x.shape, dtype=np.int64))
    pos = np.arange(n, dtype=np.int64).reshape(x.shape)[index]
    v = lift(values, x, f"x.at[...].{op}", like=x)
    if v.dtype != x.dtype:
        v = v.astype(x.dtype)
    if v.shape != pos.shape:
        v = gnp.broadcast_to(v, pos.shape)
    pos = np.asarray(pos).reshape(-1)
    flat_v = v.reshape(-1)
    flat = x.reshape(-1)
    if pos.size == 0:
        return x
    # Rounds of distinct positions: the k-th write to a position is in round k.
    rounds: List[List[int]] = []
    seen: Dict[int, int] = {}
    order = range(len(pos))
    if op == "set":
        last = {int(p): i for i, p in enumerate(pos)}
        order = sorted(last.values())
    for i in order:
        p = int(pos[i])
        k = seen.get(p, 0)
        seen[p] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(i)
    combine = _ops()[op]
    for r in rounds:
        src = np.zeros(n, np.int32)
        mask = np.zeros(n, bool)
        src[pos[r]] = np.asarray(r, np.int32)
        mask[pos[r]] = True
        new = gnp.take(flat_v, src)
        flat = gnp.where(mask, combine(flat, new), flat)
    assert isinstance(flat, Tracer)
    return flat.reshape(x.shape)


class _Ref:
    """``x.at[index]``: the update methods."""

    __slots__ = ("_x", "_index")

    def __init__(self, x: Any, index: Any):
        self._x = x
        self._index = index

    def get(self) -> Any:
        """``x[index]``."""
        return self._x[self._index]

    def set(self, values: Any) -> Any:
        """``x`` with ``x[index] = values``."""
        return _update(self._x, self._index, values, "set")

    def add(self, values: Any) -> Any:
        """``x`` with ``x[index] += values`` (repeated positions accumulate)."""
        return _update(self._x, self._index, values, "add")

    def multiply(self, values: Any) -> Any:
        """``x`` with ``x[index] *= values``."""
        return _update(self._x, self._index, values, "mul")

    mul = multiply

    def divide(self, values: Any) -> Any:
        """``x`` with ``x[index] /= values``."""
        return _update(self._x, self._index, values, "divide")

    def power(self, values: Any) -> Any:
        """``x`` with ``x[index] **= values``."""
        return _update(self._x, self._index, values, "power")

    def min(self, values: Any) -> Any:
        """``x`` with ``x[index] = minimum(x[index], values)``."""
        return _update(self._x, self._index, values, "min")

    def max(self, values: Any) -> Any:
        """``x`` with ``x[index] = maximum(x[index], values)``."""
        return _update(self._x, self._index, values, "max")


class At:
    """The ``x.at`` helper: ``x.at[index]`` gives the update methods."""

    __slots__ = ("_x",)

    def __init__(self, x: Any):
        self._x = x

    def __getitem__(self, index: Any) -> _Ref:
        return _Ref(self._x, index)
