"""``graft.numpy``: the commonly used ``jax.numpy`` functions.

On traced arrays each function records graft operations (graft's
composite library: NumPy broadcasting, negative axes). On NumPy arrays or
numbers it runs eagerly: the operation is compiled by graft (cached per
function, static arguments and input types) and returns a NumPy array.
The two operands of a binary operation are promoted by JAX's rules
(:func:`result_type`; a Python number is weakly typed and takes the dtype
of the array it is combined with); other functions do not convert.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _graft as _g
from ._tracer import Tracer, lift, to_array

__all__ = [
    "abs", "absolute", "sign", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh",
    "floor", "ceil", "round", "logical_not", "isnan", "isinf", "isfinite", "square", "reciprocal",
    "negative", "add", "subtract", "multiply", "divide", "true_divide", "remainder", "mod", "power",
    "maximum", "minimum", "arctan2", "less", "less_equal", "greater", "greater_equal", "equal",
    "not_equal", "matmul", "dot", "vdot", "outer", "inner", "sum", "mean", "max", "min", "amax", "amin", "prod",
    "var", "std", "argmax", "argmin", "reshape", "transpose", "expand_dims", "squeeze",
    "broadcast_to", "concatenate", "stack", "where", "tile", "repeat", "swapaxes", "ravel", "clip",
    "einsum", "astype", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange",
    "linspace", "asarray", "array", "float32", "float64", "int32", "int64", "uint32", "bool_", "pi", "e", "inf", "nan",
    "ndim", "shape", "size", "take", "logaddexp", "sort", "argsort", "trace", "diag", "linalg",
    "cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "result_type", "select",
]

float32 = _np.float32
float64 = _np.float64
int32 = _np.int32
int64 = _np.int64
uint32 = _np.uint32
bool_ = _np.bool_
pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan

_EAGER: Dict[Hashable, Any] = {}


def _eager(key: Hashable, fn: Callable[..., Any], *arrays: Any) -> Any:
    """Runs ``fn`` (which works on tracers) on concrete arrays through a
    cached ``graft.jit``."""
    from ._api import jit

    j = _EAGER.get(key)
    if j is None:
        j = jit(fn)
        _EAGER[key] = j
    return j(*arrays)


def _eager_weak(name: str, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """:func:`_eager` where Python numbers stay weakly typed (they take
    the other operands' dtype, as inside a trace): they are part of the
    function, not arrays passed to it."""
    weak = [_np.ndim(a) == 0 and isinstance(a, (bool, int, float)) for a in args]
    consts = tuple((i, a) for i, (a, w) in enumerate(zip(args, weak)) if w)
    arrays = [to_array(a, name) for a, w in zip(args, weak) if not w]
    if not arrays:
        return _eager(("strong", name), fn, *[to_array(a, name) for a in args])
    k = len(args)

    def run(*ts: Any) -> Any:
        it = iter(ts)
        fixed = dict(consts)
        return fn(*[fixed[i] if i in fixed else next(it) for i in range(k)])

    key = ("weak", name, tuple((i, type(a).__name__, a) for i, a in consts))
    return _eager(key, run, *arrays)


def _hashable(x: Any) -> Hashable:
    if isinstance(x, list):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, tuple):
        return tuple(_hashable(v) for v in x)
    return x


def _ctx(*xs: Any) -> Optional[Tracer]:
    for x in xs:
        if isinstance(x, Tracer):
            return x
    return None


def _dtype_name(dtype: Any) -> str:
    name = _np.dtype(dtype).name
    if name not in ("float16", "float32", "float64", "int32", "int64", "uint32", "bool"):
        raise TypeError(
            f"graft has no dtype {name} (it has float16, float32, float64, int32, int64, uint32 and bool)")
    return name


# ---- elementwise ----

def _unary(op: str, x: Any) -> Any:
    if isinstance(x, Tracer):
        return Tracer(_g.unary(op, x._h))
    return _eager(("unary", op), lambda t: _unary(op, t), to_array(x, f"graft.numpy.{op}"))


def _promote_int_for_float(op: str, a: Any, b: Any) -> Tuple[Any, Any]:
    """``int array  op  non-integral Python float`` computes in float64."""
    def is_frac(v: Any) -> bool:
        return isinstance(v, float) and not float(v).is_integer()

    if isinstance(a, Tracer) and a.dtype.kind in "iu" and is_frac(b):
        a = astype(a, _np.float64)
    if isinstance(b, Tracer) and b.dtype.kind in "iu" and is_frac(a):
        b = astype(b, _np.float64)
    # JAX's promotion of an integer (or bool) array meeting a float array:
    # the integer one is converted to the float dtype.
    if isinstance(a, Tracer) and isinstance(b, Tracer):
        ka, kb = a.dtype.kind, b.dtype.kind
        if ka in "iub" and kb == "f":
            a = astype(a, b.dtype)
        elif kb in "iub" and ka == "f":
            b = astype(b, a.dtype)
    return a, b


def _binary(op: str, a: Any, b: Any) -> Any:
    ctx = _ctx(a, b)
    if ctx is None:
        return _eager(("binary", op), lambda x, y: _binary(op, x, y), to_array(a, op), to_array(b, op))
    if op != "matmul" and op != "pow":
        a, b = _promote_int_for_float(op, a, b)
    if op == "pow" and isinstance(a, Tracer) and not isinstance(b, Tracer) and _np.ndim(b) == 0:
        if a.dtype.kind in "iu" and isinstance(b, float) and not float(b).is_integer():
            a = astype(a, _np.float64)
    ta = lift(a, ctx, f"graft.numpy.{op}", like=_ctx(b) if not isinstance(a, Tracer) else None)
    tb = lift(b, ctx, f"graft.numpy.{op}", like=ta)
    ta, tb = _promote_pair(ta, tb)
    return Tracer(_g.binary(op, ta._h, tb._h))


_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}


def result_type(*dtypes: Any) -> _np.dtype:
    """The dtype two arrays of these dtypes combine to, by JAX's rules over
    graft's dtypes: ``bool < int32 < int64 < float16 < float32 < float64`` except that
    any integer with a float gives that float (``int64 + float32`` is
    ``float32``, as in JAX). ``uint32`` sits above bool; with itself it stays
    ``uint32``, with a signed integer it gives ``int64`` (JAX with x64
    enabled: ``uint32 + int32`` is ``int64``). Python numbers are weakly
    typed and take the other operand's dtype before this applies."""
    out: Optional[_np.dtype] = None
    for d in dtypes:
        d = _np.dtype(d)
        if out is None or out == d:
            out = d
            continue
        ko, kd = _KIND_RANK[out.kind], _KIND_RANK[d.kind]
        if ko != kd:
            out = out if ko > kd else d
        elif out.kind != d.kind and ko == 1:
            # Signed with unsigned: the signed type that holds both.
            out = _np.dtype(_np.int64)
        else:
            out = out if out.itemsize >= d.itemsize else d
    assert out is not None
    return out


def _promote_pair(ta: Tracer, tb: Tracer) -> Tuple[Tracer, Tracer]:
    """Both operands at their :func:`result_type` (a convert where needed)."""
    if ta.dtype == tb.dtype:
        return ta, tb
    t = result_type(ta.dtype, tb.dtype)
    return (ta if ta.dtype == t else astype(ta, t)), (tb if tb.dtype == t else astype(tb, t))


def abs(x: Any) -> Any:
    """Elementwise ``|x|``."""
    return _unary("abs", x)


absolute = abs


def sign(x: Any) -> Any:
    """Elementwise sign (-1, 0, 1)."""
    return _unary("sign", x)


def exp(x: Any) -> Any:
    """Elementwise ``e**x``."""
    return _unary("exp", x)


def expm1(x: Any) -> Any:
    """Elementwise ``e**x - 1``, accurate near 0."""
    return _unary("expm1", x)


def log(x: Any) -> Any:
    """Elementwise natural logarithm."""
    return _unary("log", x)


def log1p(x: Any) -> Any:
    """Elementwise ``log(1 + x)``, accurate near 0."""
    return _unary("log1p", x)


def sqrt(x: Any) -> Any:
    """Elementwise square root."""
    return _unary("sqrt", x)


def sin(x: Any) -> Any:
    """Elementwise sine."""
    return _unary("sin", x)


def cos(x: Any) -> Any:
    """Elementwise cosine."""
    return _unary("cos", x)


def tan(x: Any) -> Any:
    """Elementwise tangent."""
    return _unary("tan", x)


def tanh(x: Any) -> Any:
    """Elementwise hyperbolic tangent."""
    return _unary("tanh", x)


def floor(x: Any) -> Any:
    """Elementwise floor."""
    return _unary("floor", x)


def ceil(x: Any) -> Any:
    """Elementwise ceiling."""
    return _unary("ceil", x)


def round(x: Any) -> Any:
    """Elementwise rounding, half to even."""
    return _unary("round", x)


def logical_not(x: Any) -> Any:
    """Elementwise not of a bool array."""
    return _unary("logical_not", x)


def isnan(x: Any) -> Any:
    """Whether each element is NaN."""
    return _unary("isnan", x)


def isinf(x: Any) -> Any:
    """Whether each element is infinite."""
    return _unary("isinf", x)


def isfinite(x: Any) -> Any:
    """Whether each element is finite."""
    return _unary("isfinite", x)


def square(x: Any) -> Any:
    """Elementwise ``x * x``."""
    return _unary("square", x)


def reciprocal(x: Any) -> Any:
    """Elementwise ``1 / x``."""
    return _unary("reciprocal", x)


def negative(x: Any) -> Any:
    """Elementwise ``-x``."""
    return _unary("neg", x)


def add(a: Any, b: Any) -> Any:
    """``a + b`` with broadcasting."""
    return _binary("add", a, b)


def subtract(a: Any, b: Any) -> Any:
    """``a - b`` with broadcasting."""
    return _binary("sub", a, b)


def multiply(a: Any, b: Any) -> Any:
    """``a * b`` with broadcasting."""
    return _binary("mul", a, b)


def divide(a: Any, b: Any) -> Any:
    """``a / b`` with broadcasting."""
    return _binary("div", a, b)


true_divide = divide


def remainder(a: Any, b: Any) -> Any:
    """``a % b`` with broadcasting."""
    return _binary("rem", a, b)


mod = remainder


def power(a: Any, b: Any) -> Any:
    """``a ** b`` with broadcasting."""
    return _binary("pow", a, b)


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum."""
    return _binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum."""
    return _binary("minimum", a, b)


def arctan2(a: Any, b: Any) -> Any:
    """Elementwise ``atan2(a, b)``."""
    return _binary("atan2", a, b)


def less(a: Any, b: Any) -> Any:
    """``a < b``."""
    return _binary("lt", a, b)


def less_equal(a: Any, b: Any) -> Any:
    """``a <= b``."""
    return _binary("le", a, b)


def greater(a: Any, b: Any) -> Any:
    """``a > b``."""
    return _binary("gt", a, b)


def greater_equal(a: Any, b: Any) -> Any:
    """``a >= b``."""
    return _binary("ge", a, b)


def equal(a: Any, b: Any) -> Any:
    """``a == b`` elementwise."""
    return _binary("eq", a, b)


def not_equal(a: Any, b: Any) -> Any:
    """``a != b`` elementwise."""
    return _binary("ne", a, b)


def logaddexp(a: Any, b: Any) -> Any:
    """``log(exp(a) + exp(b))``, computed stably."""
    m = maximum(a, b)
    return m + log1p(exp(-abs(subtract(a, b))))


def matmul(a: Any, b: Any) -> Any:
    """``np.matmul`` (``a @ b``): 1-D operands promoted, batch axes broadcast."""
    return _binary("matmul", a, b)


def dot(a: Any, b: Any) -> Any:
    """``np.dot`` for rank <= 2 (a scalar operand multiplies)."""
    if _np.ndim(a) == 0 or _np.ndim(b) == 0:
        return multiply(a, b)
    if _np.ndim(a) > 2 or _np.ndim(b) > 2:
        raise TypeError("graft.numpy.dot takes operands of rank <= 2; use matmul or einsum for batches")
    return matmul(a, b)


def vdot(a: Any, b: Any) -> Any:
    """Sum of the elementwise product of the flattened operands."""
    return sum(multiply(ravel(a), ravel(b)))


def inner(a: Any, b: Any) -> Any:
    """Inner product over the last axis."""
    return einsum("...i,...i->...", a, b) if _np.ndim(a) == _np.ndim(b) == 1 else _binary("matmul", a, swapaxes(b, -1, -2) if _np.ndim(b) > 1 else b)


def outer(a: Any, b: Any) -> Any:
    """Outer product of the flattened operands."""
    return multiply(expand_dims(ravel(a), 1), expand_dims(ravel(b), 0))


def ndim(x: Any) -> int:
    """The rank of an array or tracer."""
    return x.ndim if isinstance(x, Tracer) else _np.ndim(x)


def shape(x: Any) -> Tuple[int, ...]:
    """The shape of an array or tracer."""
    return x.shape if isinstance(x, Tracer) else _np.shape(x)


def size(x: Any) -> int:
    """The number of elements of an array or tracer."""
    return x.size if isinstance(x, Tracer) else _np.size(x)


# ---- reductions ----

def _axes(axis: Any) -> Optional[list]:
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return [int(a) for a in axis]
    return [int(axis)]


def _reduce(op: str, x: Any, axis: Any, keepdims: bool, ddof: int = 0) -> Any:
    if isinstance(x, Tracer):
        return Tracer(_g.reduce(op, x._h, _axes(axis), keepdims, ddof))
    key = ("reduce", op, _hashable(axis), keepdims, ddof)
    return _eager(key, lambda t: _reduce(op, t, axis, keepdims, ddof), to_array(x, f"graft.numpy.{op}"))


def sum(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Sum over ``axis`` (an int, a tuple, or ``None`` for all axes)."""
    return _reduce("sum", a, axis, keepdims)


def mean(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Mean over ``axis``."""
    return _reduce("mean", a, axis, keepdims)


def max(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Maximum over ``axis``."""
    return _reduce("max", a, axis, keepdims)


def min(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Minimum over ``axis``."""
    return _reduce("min", a, axis, keepdims)


amax = max
amin = min


def prod(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """Product over ``axis``."""
    return _reduce("prod", a, axis, keepdims)


def var(a: Any, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
    """Variance over ``axis`` (``ddof=1``: the sample variance)."""
    return _reduce("var", a, axis, keepdims, ddof)


def std(a: Any, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
    """Standard deviation over ``axis``."""
    return _reduce("std", a, axis, keepdims, ddof)


def _argreduce(op: str, x: Any, axis: Optional[int], keepdims: bool) -> Any:
    if isinstance(x, Tracer):
        if axis is None:
            if keepdims:
                raise TypeError(f"graft.numpy.{op}: keepdims needs an axis")
            return Tracer(_g.argreduce(op, _g.unary("flatten", x._h), 0, False))
        return Tracer(_g.argreduce(op, x._h, int(axis), keepdims))
    return _eager(("arg", op, axis, keepdims), lambda t: _argreduce(op, t, axis, keepdims), to_array(x, op))


def argmax(a: Any, axis: Optional[int] = None, keepdims: bool = False) -> Any:
    """Index (int32) of the first maximum along ``axis`` (``None``: flattened)."""
    return _argreduce("argmax", a, axis, keepdims)


def argmin(a: Any, axis: Optional[int] = None, keepdims: bool = False) -> Any:
    """Index (int32) of the first minimum along ``axis`` (``None``: flattened)."""
    return _argreduce("argmin", a, axis, keepdims)


# ---- shapes ----

def _shape_op(name: str, x: Any, fn: Callable[[Tracer], Any], *static: Any) -> Any:
    if isinstance(x, Tracer):
        return fn(x)
    return _eager(("shape", name, _hashable(static)), fn, to_array(x, f"graft.numpy.{name}"))


def reshape(a: Any, shape: Any) -> Any:
    """Reshapes (row-major); one entry may be -1."""
    shp = [int(s) for s in ((shape,) if isinstance(shape, int) else shape)]
    return _shape_op("reshape", a, lambda t: Tracer(_g.reshape(t._h, shp)), shp)


def transpose(a: Any, axes: Optional[Sequence[int]] = None) -> Any:
    """Permutes the axes (``None``: reverses them)."""
    perm = None if axes is None else [int(p) % _np.ndim(a) if int(p) < 0 else int(p) for p in axes]
    return _shape_op("transpose", a, lambda t: Tracer(_g.transpose(t._h, perm)), perm)


def expand_dims(a: Any, axis: Union[int, Sequence[int]]) -> Any:
    """Inserts size-1 axes at ``axis`` (positions in the result)."""
    if isinstance(axis, (tuple, list)):
        nd = _np.ndim(a) + len(axis)
        out = a
        for ax in sorted(int(x) % nd for x in axis):
            out = expand_dims(out, ax)
        return out
    ax = int(axis)
    return _shape_op("expand_dims", a, lambda t: Tracer(_g.expand_dims(t._h, ax)), ax)


def squeeze(a: Any, axis: Any = None) -> Any:
    """Removes size-1 axes (``None``: all of them)."""
    axes = _axes(axis)
    return _shape_op("squeeze", a, lambda t: Tracer(_g.squeeze(t._h, axes)), axes)


def broadcast_to(a: Any, shape: Sequence[int]) -> Any:
    """Broadcasts to ``shape`` with NumPy rules."""
    shp = [int(s) for s in shape]
    return _shape_op("broadcast_to", a, lambda t: Tracer(_g.broadcast_to(t._h, shp)), shp)


def ravel(a: Any) -> Any:
    """Flattens to 1-D."""
    return _shape_op("ravel", a, lambda t: Tracer(_g.unary("flatten", t._h)))


def swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    """Exchanges two axes."""
    return _shape_op("swapaxes", a, lambda t: Tracer(_g.swapaxes(t._h, axis1, axis2)), axis1, axis2)


def tile(a: Any, reps: Union[int, Sequence[int]]) -> Any:
    """Repeats the whole array ``reps`` times along each axis (``np.tile``)."""
    r = [int(reps)] if isinstance(reps, int) else [int(x) for x in reps]
    return _shape_op("tile", a, lambda t: Tracer(_g.tile(t._h, r)), r)


def repeat(a: Any, repeats: int, axis: Optional[int] = None) -> Any:
    """Repeats each element ``repeats`` times along ``axis`` (``None``: flattened)."""
    return _shape_op("repeat", a, lambda t: Tracer(_g.repeat(t._h, int(repeats), axis)), repeats, axis)


def astype(a: Any, dtype: Any) -> Any:
    """Converts to ``dtype``."""
    name = _dtype_name(dtype)
    if isinstance(a, Tracer):
        return a if a.dtype.name == name else Tracer(_g.convert(a._h, name))
    return to_array(a, "astype").astype(name)


def _many(name: str, arrays: Sequence[Any], fn: Callable[..., Any], *static: Any, promote: bool = False) -> Any:
    if not arrays:
        raise ValueError(f"{name} needs at least one array")
    ctx = _ctx(*arrays)
    if ctx is None:
        key = ("many", name, len(arrays), _hashable(static), promote)
        return _eager(key, lambda *ts: _many(name, ts, fn, *static, promote=promote),
                      *[to_array(x, name) for x in arrays])
    ts = [lift(x, ctx, f"graft.numpy.{name}") for x in arrays]
    return fn(*(_promote_all(ts) if promote else ts))


def _promote_all(ts: Sequence[Tracer]) -> List[Tracer]:
    """Every operand at the :func:`result_type` of all (JAX's promotion)."""
    if not ts:
        return list(ts)
    t = result_type(*[x.dtype for x in ts])
    return [x if x.dtype == t else astype(x, t) for x in ts]


def concatenate(arrays: Sequence[Any], axis: int = 0) -> Any:
    """Joins arrays along an existing axis."""
    return _many("concatenate", list(arrays), lambda *ts: Tracer(_g.concat([t._h for t in ts], axis)), axis,
                 promote=True)


def stack(arrays: Sequence[Any], axis: int = 0) -> Any:
    """Joins equal-shaped arrays along a new axis."""
    return _many("stack", list(arrays), lambda *ts: Tracer(_g.stack([t._h for t in ts], axis)), axis, promote=True)


def where(condition: Any, x: Any, y: Any) -> Any:
    """``x`` where ``condition`` holds, else ``y`` (broadcasting)."""
    ctx = _ctx(condition, x, y)
    if ctx is None:
        return _eager_weak("where", lambda c, a, b: where(c, a, b), [condition, x, y])
    x, y = _promote_int_for_float("where", x, y)
    like = _ctx(x, y)
    c = lift(condition, ctx, "graft.numpy.where")
    if c.dtype != _np.bool_:
        c = c != 0
    a = lift(x, ctx, "graft.numpy.where", like=like)
    b = lift(y, ctx, "graft.numpy.where", like=a)
    a, b = _promote_pair(a, b)
    return Tracer(_g.where_(c._h, a._h, b._h))


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Any:
    """``choicelist[k]`` where ``condlist[k]`` is the first condition that
    holds, else ``default`` (``jnp.select``; the choices and the default are
    promoted together by JAX's rules)."""
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: {len(condlist)} conditions for {len(choicelist)} choices")
    if not condlist:
        raise ValueError("select: condlist must be non-empty")
    n = len(condlist)
    if _ctx(*condlist, *choicelist, default) is None:
        return _eager_weak(f"select{n}", lambda *a: select(a[:n], a[n : 2 * n], a[2 * n]),
                           condlist + choicelist + [default])
    out = default
    for c, v in reversed(list(zip(condlist, choicelist))):
        out = where(c, v, out)
    return out


def clip(a: Any, a_min: Any = None, a_max: Any = None) -> Any:
    """Limits values to ``[a_min, a_max]`` (either may be ``None``)."""
    out = a
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def take(a: Any, indices: Any, axis: Optional[int] = None) -> Any:
    """``np.take`` with out-of-range indices clamped (``mode='clip'``)."""
    if axis is None:
        a, axis = ravel(a), 0
    return _many("take", [a, indices], lambda t, i: Tracer(_g.take(t._h, i._h, axis)), axis)


def einsum(spec: str, *operands: Any) -> Any:
    """``np.einsum`` (explicit ``->`` output; see graft's einsum for the syntax)."""
    return _many("einsum", list(operands), lambda *ts: Tracer(_g.einsum(spec, [t._h for t in ts])), spec,
                 promote=True)


# ---- creation (NumPy arrays; they become constants when combined with tracers) ----

def zeros(shape: Any, dtype: Any = _np.float64) -> _np.ndarray:
    """A NumPy array of zeros."""
    return _np.zeros(shape, dtype=_dtype_name(dtype))


def ones(shape: Any, dtype: Any = _np.float64) -> _np.ndarray:
    """A NumPy array of ones."""
    return _np.ones(shape, dtype=_dtype_name(dtype))


def full(shape: Any, fill_value: Any, dtype: Any = None) -> _np.ndarray:
    """A NumPy array filled with ``fill_value``."""
    a = _np.full(shape, fill_value, dtype=None if dtype is None else _dtype_name(dtype))
    return to_array(a, "full")


def zeros_like(a: Any, dtype: Any = None) -> Any:
    """Zeros of ``a``'s shape (and dtype)."""
    return full_like(a, 0, dtype)


def ones_like(a: Any, dtype: Any = None) -> Any:
    """Ones of ``a``'s shape (and dtype)."""
    return full_like(a, 1, dtype)


def full_like(a: Any, fill_value: Any, dtype: Any = None) -> Any:
    """``fill_value`` with ``a``'s shape (and dtype)."""
    if isinstance(a, Tracer):
        dt = a.dtype.name if dtype is None else _dtype_name(dtype)
        return Tracer(_g.full(a._h, list(a.shape), float(fill_value), dt))
    return _np.full_like(to_array(a, "full_like"), fill_value, dtype=None if dtype is None else _dtype_name(dtype))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> _np.ndarray:
    """``np.arange`` (a NumPy array)."""
    return to_array(_np.arange(start, stop, step, dtype=None if dtype is None else _dtype_name(dtype)), "arange")


def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True, dtype: Any = _np.float64) -> _np.ndarray:
    """``np.linspace`` (a NumPy array)."""
    return _np.linspace(start, stop, num, endpoint=endpoint, dtype=_dtype_name(dtype))


def asarray(a: Any, dtype: Any = None) -> Any:
    """A tracer as it is, anything else as a NumPy array graft accepts."""
    if isinstance(a, Tracer):
        return a if dtype is None else astype(a, dtype)
    out = to_array(a, "asarray")
    return out if dtype is None else out.astype(_dtype_name(dtype))


array = asarray


# ---- indexing ----

def _getitem(x: Tracer, index: Any) -> Tracer:
    if not isinstance(index, tuple):
        index = (index,)
    n_real = len([i for i in index if i is not None and i is not Ellipsis])
    if any(i is Ellipsis for i in index):
        k = index.index(Ellipsis)
        fill = (slice(None),) * (x.ndim - n_real)
        index = index[:k] + fill + index[k + 1 :]
    if n_real > x.ndim:
        raise IndexError(f"too many indices ({n_real}) for a traced array of rank {x.ndim}")
    out = x
    axis = 0  # the axis of `out` the next index applies to
    squeeze_axes = []
    for i in index:
        if i is None:
            out = Tracer(_g.expand_dims(out._h, axis))
            axis += 1
        elif isinstance(i, slice):
            if i != slice(None):
                out = Tracer(_g.slice_axis(out._h, axis, i.start, i.stop, 1 if i.step is None else i.step))
            axis += 1
        elif isinstance(i, (int, _np.integer)) and not isinstance(i, bool):
            n = out.shape[axis]
            k = int(i)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            k %= n
            out = Tracer(_g.slice_axis(out._h, axis, k, k + 1, 1))
            squeeze_axes.append(axis)
            axis += 1
        elif isinstance(i, (Tracer, _np.ndarray, list)):
            if not isinstance(i, Tracer):
                i = _np.asarray(i)
                if i.dtype.kind in "iu":
                    n = out.shape[axis]
                    if ((i < -n) | (i >= n)).any():
                        raise IndexError(f"an index in {i.tolist()} is out of bounds for axis {axis} with size {n}")
                    i = _np.where(i < 0, i + n, i)  # NumPy's negative indices (graft's take clamps)
            idx = lift(i, x, "indexing")
            if idx.dtype.kind not in "iu":
                raise TypeError(f"graft indexes with integer arrays only, got {idx.dtype.name} (boolean masks have no static shape)")
            if isinstance(i, Tracer):
                # JAX's rule: a negative index counts from the end (once),
                # then the gather clamps into range.
                idx = where(idx < 0, idx + out.shape[axis], idx)
            out = Tracer(_g.take(out._h, idx._h, axis))
            axis += idx.ndim
        else:
            raise TypeError(f"graft cannot index with {type(i).__name__}")
    if squeeze_axes:
        out = Tracer(_g.squeeze(out._h, squeeze_axes))
    return out


# ---- sorting, diagonals, linear algebra ----

def _sort(op: str, a: Any, axis: Optional[int]) -> Any:
    if axis is None:
        a, axis = ravel(a), 0
    if isinstance(a, Tracer):
        return Tracer(_g.sort(op, a._h, int(axis)))
    return _eager(("sort", op, axis), lambda t: _sort(op, t, axis), to_array(a, op))


def _cumulative(op: str, a: Any, axis: Optional[int], reverse: bool = False) -> Any:
    if axis is None:
        a, axis = ravel(a), 0
    if isinstance(a, Tracer):
        return Tracer(_g.cumulative(op, a._h, int(axis), bool(reverse)))
    return _eager(("cumulative", op, axis, reverse), lambda t: _cumulative(op, t, axis, reverse), to_array(a, op))


def cumsum(a: Any, axis: Optional[int] = None, dtype: Any = None) -> Any:
    """Running sums along ``axis`` (``None``: of the flattened array), in
    ``a``'s dtype (or ``dtype``)."""
    return _cumulative("cumsum", a if dtype is None else astype(a, dtype), axis)


def cumprod(a: Any, axis: Optional[int] = None, dtype: Any = None) -> Any:
    """Running products along ``axis`` (``None``: of the flattened array)."""
    return _cumulative("cumprod", a if dtype is None else astype(a, dtype), axis)


def cumulative_sum(x: Any, axis: Optional[int] = None, dtype: Any = None, include_initial: bool = False) -> Any:
    """The array-API name of :func:`cumsum` (``axis`` may be omitted for 1-d input)."""
    if axis is None and ndim(x) != 1:
        raise ValueError("cumulative_sum needs an axis for input that is not 1-d")
    out = cumsum(x, 0 if axis is None else axis, dtype)
    return _with_initial(out, 0, axis, include_initial)


def cumulative_prod(x: Any, axis: Optional[int] = None, dtype: Any = None, include_initial: bool = False) -> Any:
    """The array-API name of :func:`cumprod`."""
    if axis is None and ndim(x) != 1:
        raise ValueError("cumulative_prod needs an axis for input that is not 1-d")
    out = cumprod(x, 0 if axis is None else axis, dtype)
    return _with_initial(out, 1, axis, include_initial)


def _with_initial(out: Any, value: float, axis: Optional[int], include: bool) -> Any:
    if not include:
        return out
    ax = 0 if axis is None else axis
    dims = list(out.shape)
    ax = ax % len(dims)
    dims[ax] = 1
    first = full(tuple(dims), value, dtype=out.dtype)
    return concatenate([first, out], axis=ax)


def sort(a: Any, axis: Optional[int] = -1) -> Any:
    """Sorted copy along ``axis`` (``None``: flattened)."""
    return _sort("sort", a, axis)


def argsort(a: Any, axis: Optional[int] = -1) -> Any:
    """Indices (int32) that sort ``a`` along ``axis``."""
    return _sort("argsort", a, axis)


def trace(a: Any) -> Any:
    """Sum of the diagonal of the last two axes."""
    from ._linalg import _one

    return _one("trace", a)


def diag(v: Any) -> Any:
    """The square matrix with vector ``v`` on its diagonal (graft builds
    diagonal matrices only; it does not extract diagonals)."""
    from ._linalg import _one

    if ndim(v) != 1:
        raise TypeError(f"graft.numpy.diag takes a vector, got rank {ndim(v)}")
    return _one("diag", v)


from . import _linalg as linalg  # noqa: E402
