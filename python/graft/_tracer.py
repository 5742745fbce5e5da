"""The tracer: a traced array with operators and NumPy-style methods.

Inside a function that graft traces (``jit``, ``grad``, ``vmap``, ...),
every array argument is a :class:`Tracer`. Operations on it record graft
operations; nothing is computed until the traced function runs.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _graft as _g
from . import _scope

__all__ = ["Tracer", "is_tracer"]

_SUPPORTED = ("float16", "float32", "float64", "int32", "int64", "uint32", "bool")


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is a traced array."""
    return isinstance(x, Tracer)


def _first_tracer(*xs: Any) -> Optional["Tracer"]:
    for x in xs:
        if isinstance(x, Tracer):
            return x
    return None


def _weak_scalar(x: Any) -> bool:
    """Python numbers (and 0-d NumPy scalars) take the other operand's dtype."""
    return isinstance(x, (bool, int, float, np.generic)) and not isinstance(x, complex)


def to_array(x: Any, where: str) -> np.ndarray:
    """A concrete argument as a NumPy array of a dtype graft has."""
    if isinstance(x, Tracer):
        raise TypeError(f"{where}: a traced array cannot be used as a concrete value here")
    if isinstance(x, np.ndarray):
        a = x
    elif isinstance(x, (bool, int, float, np.generic, list, tuple)):
        a = np.asarray(x)
    elif hasattr(x, "__array__"):
        a = np.asarray(x)
    else:
        raise TypeError(f"{where}: graft cannot use a value of type {type(x).__name__} (expected an array or a number)")
    if a.dtype.name not in _SUPPORTED:
        raise TypeError(
            f"{where}: graft has no dtype {a.dtype.name} (it has float16, float32, float64, int32, int64, uint32 and bool)"
        )
    return a


def lift(x: Any, ctx: "Tracer", where: str, like: Optional["Tracer"] = None) -> "Tracer":
    """``x`` as a tracer in ``ctx``'s trace. A Python number takes the dtype
    of ``like`` (or ``ctx``); an array becomes a constant."""
    if isinstance(x, Tracer):
        return x
    like = like if like is not None else ctx
    if _weak_scalar(x) and np.ndim(x) == 0:
        v = x.item() if isinstance(x, np.generic) else x
        if isinstance(v, float) and like.dtype.kind in "iub" and not float(v).is_integer():
            raise TypeError(
                f"{where}: the float {v!r} is combined with a {like.dtype.name} array; "
                "convert one of them with astype first (graft never casts implicitly)"
            )
        if like.dtype.kind == "u" and not (isinstance(v, bool) or 0 <= v <= np.iinfo(like.dtype).max):
            # JAX raises too: a weakly typed number must fit the array's dtype.
            raise OverflowError(f"{where}: Python number {v!r} is out of range for {like.dtype.name}")
        return Tracer(_g.scalar_like(like._h, float(v)))
    return Tracer(_g.constant(ctx._h, to_array(x, where)))


class Tracer:
    """A traced array: shape and dtype are known, values are not."""

    __slots__ = ("_raw",)
    __array_priority__ = 1000
    __array_ufunc__ = None  # `ndarray op tracer` defers to our reflected operators

    def __init__(self, handle: _g.Handle):
        self._raw = handle

    @property
    def _h(self) -> _g.Handle:
        """The handle as seen from the body being traced (a value of an
        enclosing trace is captured, see ``graft._scope``)."""
        return _scope.resolve(self._raw)

    # ---- metadata ----
    @property
    def shape(self) -> Tuple[int, ...]:
        """The static shape."""
        return tuple(self._raw.shape)

    @property
    def dtype(self) -> np.dtype:
        """The dtype, as a NumPy dtype."""
        return np.dtype(self._raw.dtype)

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self._raw.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def T(self) -> "Tracer":
        """The axes reversed."""
        return Tracer(_g.transpose(self._h, None))

    def __repr__(self) -> str:
        return f"Tracer({self.dtype.name}{list(self.shape)})"

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a rank-0 traced array")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- values are not known while tracing ----
    def _concrete(self, what: str):
        raise TypeError(
            f"{what} of a traced array {self!r}: its value is not known while graft traces the function. "
            "Use graft.lax.cond / graft.numpy.where for data-dependent choices."
        )

    def __bool__(self) -> bool:
        self._concrete("bool()")

    def __float__(self) -> float:
        self._concrete("float()")

    def __int__(self) -> int:
        self._concrete("int()")

    def __index__(self) -> int:
        self._concrete("int()")

    def __array__(self, *args: Any, **kwargs: Any):
        self._concrete("conversion to a NumPy array")

    __hash__ = None  # type: ignore[assignment]

    # ---- operators ----
    def _bin(self, op: str, other: Any, reflected: bool = False) -> "Tracer":
        from . import numpy as gnp

        return gnp._binary(op, other, self) if reflected else gnp._binary(op, self, other)

    def __add__(self, o: Any) -> "Tracer":
        return self._bin("add", o)

    def __radd__(self, o: Any) -> "Tracer":
        return self._bin("add", o, True)

    def __sub__(self, o: Any) -> "Tracer":
        return self._bin("sub", o)

    def __rsub__(self, o: Any) -> "Tracer":
        return self._bin("sub", o, True)

    def __mul__(self, o: Any) -> "Tracer":
        return self._bin("mul", o)

    def __rmul__(self, o: Any) -> "Tracer":
        return self._bin("mul", o, True)

    def __truediv__(self, o: Any) -> "Tracer":
        return self._bin("div", o)

    def __rtruediv__(self, o: Any) -> "Tracer":
        return self._bin("div", o, True)

    def __mod__(self, o: Any) -> "Tracer":
        return self._bin("rem", o)

    def __rmod__(self, o: Any) -> "Tracer":
        return self._bin("rem", o, True)

    def __pow__(self, o: Any) -> "Tracer":
        return self._bin("pow", o)

    def __rpow__(self, o: Any) -> "Tracer":
        return self._bin("pow", o, True)

    def __matmul__(self, o: Any) -> "Tracer":
        return self._bin("matmul", o)

    def __rmatmul__(self, o: Any) -> "Tracer":
        return self._bin("matmul", o, True)

    def __lt__(self, o: Any) -> "Tracer":
        return self._bin("lt", o)

    def __le__(self, o: Any) -> "Tracer":
        return self._bin("le", o)

    def __gt__(self, o: Any) -> "Tracer":
        return self._bin("gt", o)

    def __ge__(self, o: Any) -> "Tracer":
        return self._bin("ge", o)

    def __eq__(self, o: Any) -> "Tracer":  # type: ignore[override]
        return self._bin("eq", o)

    def __ne__(self, o: Any) -> "Tracer":  # type: ignore[override]
        return self._bin("ne", o)

    def __neg__(self) -> "Tracer":
        return Tracer(_g.unary("neg", self._h))

    def __pos__(self) -> "Tracer":
        return self

    def __abs__(self) -> "Tracer":
        return Tracer(_g.unary("abs", self._h))

    def __invert__(self) -> "Tracer":
        if self.dtype != np.bool_:
            raise TypeError(f"~ of a {self.dtype.name} traced array: graft has logical not for bool only")
        return Tracer(_g.unary("logical_not", self._h))

    @property
    def at(self) -> Any:
        """JAX's functional index updates: ``x.at[i].set(v)``, ``.add``,
        ``.mul``, ``.min``, ``.max``, ``.get`` (see ``graft._at``)."""
        from ._at import At

        return At(self)

    def __getitem__(self, index: Any) -> "Tracer":
        from . import numpy as gnp

        return gnp._getitem(self, index)

    # ---- NumPy-style methods (see graft.numpy for the semantics) ----
    def sum(self, axis: Any = None, keepdims: bool = False) -> "Tracer":
        """Sum over ``axis`` (``None``: all axes)."""
        from . import numpy as gnp

        return gnp.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> "Tracer":
        """Mean over ``axis``."""
        from . import numpy as gnp

        return gnp.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> "Tracer":
        """Maximum over ``axis``."""
        from . import numpy as gnp

        return gnp.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> "Tracer":
        """Minimum over ``axis``."""
        from . import numpy as gnp

        return gnp.min(self, axis=axis, keepdims=keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False) -> "Tracer":
        """Product over ``axis``."""
        from . import numpy as gnp

        return gnp.prod(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> "Tracer":
        """Variance over ``axis``."""
        from . import numpy as gnp

        return gnp.var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> "Tracer":
        """Standard deviation over ``axis``."""
        from . import numpy as gnp

        return gnp.std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def argmax(self, axis: Optional[int] = None, keepdims: bool = False) -> "Tracer":
        """Index of the first maximum."""
        from . import numpy as gnp

        return gnp.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: Optional[int] = None, keepdims: bool = False) -> "Tracer":
        """Index of the first minimum."""
        from . import numpy as gnp

        return gnp.argmin(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any) -> "Tracer":
        """Reshapes (row-major); one entry may be -1."""
        from . import numpy as gnp

        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return gnp.reshape(self, shape)

    def transpose(self, *axes: Any) -> "Tracer":
        """Permutes the axes (none given: reverses them)."""
        from . import numpy as gnp

        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return gnp.transpose(self, axes if axes else None)

    def astype(self, dtype: Any) -> "Tracer":
        """Converts to ``dtype``."""
        from . import numpy as gnp

        return gnp.astype(self, dtype)

    def squeeze(self, axis: Any = None) -> "Tracer":
        """Removes size-1 axes."""
        from . import numpy as gnp

        return gnp.squeeze(self, axis)

    def flatten(self) -> "Tracer":
        """A 1-D copy."""
        return Tracer(_g.unary("flatten", self._h))

    ravel = flatten

    def dot(self, other: Any) -> "Tracer":
        """``np.dot``."""
        from . import numpy as gnp

        return gnp.dot(self, other)

    def clip(self, min: Any = None, max: Any = None) -> "Tracer":
        """``np.clip``."""
        from . import numpy as gnp

        return gnp.clip(self, min, max)

    def swapaxes(self, a1: int, a2: int) -> "Tracer":
        """Exchanges two axes."""
        return Tracer(_g.swapaxes(self._h, a1, a2))

    def repeat(self, repeats: int, axis: Optional[int] = None) -> "Tracer":
        """``np.repeat``."""
        return Tracer(_g.repeat(self._h, repeats, axis))

    def round(self) -> "Tracer":
        """Rounds half to even."""
        return Tracer(_g.unary("round", self._h))
