"""``graft.random``: explicit-key random numbers (``jax.random``'s API).

Keys are ``int32[2]`` arrays holding the same 64 bits as
``jax.random.PRNGKey`` (which uses ``uint32[2]``); graft's Threefry-2x32
gives the same bits as JAX for the same key in ``key``, ``split``,
``uniform`` (any bounds: ``u * (maxval - minval) + minval`` is one fused
multiply-add, as XLA computes it), ``bernoulli``, ``randint`` with ``int32``
and ``normal`` (float32 and float64; JAX's ``sqrt(2) erf_inv(u)`` with XLA's
rounding) (tested against ``jax.random`` on CPU). On a NumPy key each function runs eagerly through
``graft.jit``; on a traced key it records the draw.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as _np

from . import _graft as _g
from ._api import jit
from ._tracer import Tracer, to_array

__all__ = ["key", "PRNGKey", "split", "uniform", "normal", "bernoulli", "randint"]

_CACHE: dict = {}


def _run(name: str, static: tuple, fn, arg: Any, is_key: bool = True) -> Any:
    """``fn`` on a traced ``arg``, or eagerly (cached per static arguments)."""
    if isinstance(arg, Tracer):
        return fn(arg)
    k = (name, static)
    j = _CACHE.get(k)
    if j is None:
        j = jit(fn)
        _CACHE[k] = j
    return j(_key_array(arg) if is_key else arg)


def _key_array(k: Any) -> Any:
    a = to_array(k, "key") if not isinstance(k, _np.ndarray) else k
    if a.dtype == _np.uint32:
        a = a.view(_np.int32)
    if a.dtype != _np.int32 or a.shape[-1:] != (2,):
        raise TypeError(f"a graft random key is an int32[2] array, got {a.dtype.name}{list(a.shape)}")
    return a


def _shape(shape: Any) -> list:
    return [int(shape)] if isinstance(shape, int) else [int(s) for s in shape]


def key(seed: Any) -> Any:
    """A key from an integer seed (``jax.random.key``/``PRNGKey``'s bits)."""
    if isinstance(seed, Tracer):
        return Tracer(_g.random_key_from(seed._h))
    return _run("key", (), lambda s: Tracer(_g.random_key_from(s._h)), _np.asarray(seed, dtype=_np.int64), is_key=False)


PRNGKey = key


def split(key: Any, num: int = 2) -> Any:
    """``num`` independent keys, as an ``int32[num, 2]`` array."""
    return _run("split", (num,), lambda k: Tracer(_g.random_split(k._h, int(num))), key)


def uniform(key: Any, shape: Sequence[int] = (), dtype: Any = _np.float32, minval: float = 0.0, maxval: float = 1.0) -> Any:
    """Floats uniform in ``[minval, maxval)``: ``jax.random.uniform``'s bits
    (the bounds rounded to ``dtype``, ``u * (maxval - minval) + minval`` as
    one fused multiply-add, then ``max(minval, .)``)."""
    s, d = _shape(shape), _np.dtype(dtype).name
    return _run("uniform", (tuple(s), d, minval, maxval), lambda k: Tracer(_g.random_uniform(k._h, s, d, float(minval), float(maxval))), key)


def normal(key: Any, shape: Sequence[int] = (), dtype: Any = _np.float32) -> Any:
    """Standard normal floats as ``jax.random.normal`` draws them
    (``sqrt(2) erf_inv(u)``, ``u`` uniform in ``(-1, 1)``), bit for bit in
    float32 and float64."""
    s, d = _shape(shape), _np.dtype(dtype).name
    return _run("normal", (tuple(s), d), lambda k: Tracer(_g.random_normal(k._h, s, d)), key)


def bernoulli(key: Any, p: float = 0.5, shape: Sequence[int] = ()) -> Any:
    """Bools, ``True`` with probability ``p``."""
    s = _shape(shape)
    return _run("bernoulli", (float(p), tuple(s)), lambda k: Tracer(_g.random_bernoulli(k._h, float(p), s)), key)


def randint(key: Any, shape: Sequence[int], minval: int, maxval: int, dtype: Any = _np.int32) -> Any:
    """Integers uniform in ``[minval, maxval)``: ``jax.random.randint``'s bits
    for ``int32`` (an ``int64`` result holds the same numbers; JAX's int64
    stream draws 64-bit words instead). Needs ``maxval - minval < 2**32``."""
    s, d = _shape(shape), _np.dtype(dtype).name
    return _run("randint", (tuple(s), int(minval), int(maxval), d), lambda k: Tracer(_g.random_randint(k._h, s, int(minval), int(maxval), d)), key)
