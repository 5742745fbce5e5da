"""``graft.lax``: structured control flow (``scan``, ``cond``, ``switch``,
``fori_loop``, ``while_loop``) and collectives over named axes (``psum``,
``pmean``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter``,
``ppermute``, ``axis_index``, ``axis_size``) with ``jax.lax``'s signatures.

Bodies and branches are traced into sub-functions of graft's loop and
branch primitives, so every transform (grad, jvp, vmap, reverse mode of
``while_loop`` included) applies to them. Bodies may use tracers of the
enclosing function (closure capture): each body is traced once to find
them, and they become loop-invariant inputs, as in JAX.
Called on NumPy arrays, each runs eagerly through ``graft.jit``.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as _np

from . import _graft as _g
from ._api import jit
from ._tracer import Tracer, lift, to_array
from ._tree import TreeDef, tree_flatten, tree_unflatten
from ._scope import Scope, axis_size as _axis_size, current_ctx, mapping, resolve, run_in

__all__ = ["scan", "cond", "switch", "fori_loop", "while_loop", "stop_gradient", "erf_inv", "psum", "pmean", "pmax",
           "pmin", "all_gather", "psum_scatter", "ppermute", "axis_index", "axis_size"]

from ._api import stop_gradient  # noqa: E402


def _ctx(leaves: Sequence[Any]) -> Optional[Tracer]:
    return next((x for x in leaves if isinstance(x, Tracer)), None)


def _handles(leaves: Sequence[Any], ctx: Tracer, where: str) -> List[_g.Handle]:
    """Loop carries and operands: tracers as they are, anything else as a
    constant of its own NumPy dtype (a Python float is float64)."""
    return [x._h if isinstance(x, Tracer) else lift(to_array(x, where), ctx, where)._h for x in leaves]


def _check_tree(where: str, want: TreeDef, got: TreeDef) -> None:
    if want != got:
        raise TypeError(f"{where}: the body must return the carry's structure {want!r}, got {got!r}")


def _types(hs: Sequence[_g.Handle]) -> List[Tuple[List[int], str]]:
    return [(list(h.shape), h.dtype) for h in hs]


def _convert(bodies: Sequence[Callable[[List[_g.Handle]], List[_g.Handle]]], types: List[list], what: str):
    """Closure conversion: traces each body once in a throwaway function to
    find the values it captures from enclosing traces; returns those values
    (as handles of the current trace) and the bodies taking them first."""
    found: List[_g.Handle] = []
    index: dict = {}

    def probing(body: Callable, k: int) -> Callable:
        def run(hs: List[_g.Handle]) -> List[_g.Handle]:
            sc = Scope(hs[0], what)
            out = run_in(sc, lambda: body(hs))
            for h in sc.captured:
                if id(h) not in index:
                    index[id(h)] = len(found)
                    found.append(h)
            return out

        return run

    for k, (body, tys) in enumerate(zip(bodies, types)):
        _g.Function(f"{what}_probe", probing(body, k)).output_types(tys)
    n = len(found)

    def taking(body: Callable) -> Callable:
        def run(hs: List[_g.Handle]) -> List[_g.Handle]:
            consts, rest = hs[:n], hs[n:]
            # map every capture (by identity) to its const input
            sc = mapping(rest[0] if rest else hs[0], what, found, consts)
            return run_in(sc, lambda: body(rest))

        return run

    consts = [resolve(h) for h in found]
    return consts, [taking(b) for b in bodies]


def scan(f: Callable, init: Any, xs: Any = None, length: Optional[int] = None, reverse: bool = False) -> Tuple[Any, Any]:
    """``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``;
    returns ``(final carry, stacked ys)`` (``jax.lax.scan``)."""
    c_leaves, c_tree = tree_flatten(init)
    x_leaves, x_tree = tree_flatten(xs)
    ctx = _ctx(c_leaves + x_leaves)
    if ctx is None:
        return jit(lambda i, x: scan(f, i, x, length, reverse))(init, xs)
    if length is None:
        if not x_leaves:
            raise ValueError("scan: give xs or length")
        length = _np.shape(x_leaves[0])[0] if not isinstance(x_leaves[0], Tracer) else x_leaves[0].shape[0]
    nk = len(c_leaves)
    state = {}

    def body(hs: List[_g.Handle]) -> List[_g.Handle]:
        ts = [Tracer(h) for h in hs]
        carry = tree_unflatten(c_tree, ts[:nk])
        x = tree_unflatten(x_tree, ts[nk:])
        out = f(carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError("scan: the body must return a pair (carry, y)")
        new_c, y = out
        nc_leaves, nc_tree = tree_flatten(new_c)
        _check_tree("scan", c_tree, nc_tree)
        y_leaves, state["y_tree"] = tree_flatten(y)
        bctx = ts[0] if ts else None
        new_h = [lift(v, bctx, "scan carry", like=ts[k])._h for k, v in enumerate(nc_leaves)]
        return new_h + [lift(v, bctx, "scan output")._h for v in y_leaves]

    init_h, xs_h = _handles(c_leaves, ctx, "scan init"), _handles(x_leaves, ctx, "scan xs")
    x_types = [(list(h.shape)[1:], h.dtype) for h in xs_h]
    consts, (body,) = _convert([body], [_types(init_h) + x_types], "scan")
    carry, ys = _g.scan(consts, init_h, xs_h, int(length), bool(reverse), body)
    return tree_unflatten(c_tree, [Tracer(h) for h in carry]), tree_unflatten(state["y_tree"], [Tracer(h) for h in ys])


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)`` (``i``: int32).
    Static bounds make a counted loop (a scan); traced bounds a while loop."""
    if isinstance(lower, Tracer) or isinstance(upper, Tracer):
        def c(s):
            return s[0] < s[1]

        def b(s):
            i, u, v = s
            return (i + 1, u, body_fun(i, v))

        lo = lower if isinstance(lower, Tracer) else _np.int32(lower)
        hi = upper if isinstance(upper, Tracer) else _np.int32(upper)
        return while_loop(c, b, (lo, hi, init_val))[2]
    lower, upper = int(lower), int(upper)
    v_leaves, v_tree = tree_flatten(init_val)
    ctx = _ctx(v_leaves)
    if ctx is None:
        return jit(lambda v: fori_loop(lower, upper, body_fun, v))(init_val)

    def body(hs: List[_g.Handle]) -> List[_g.Handle]:
        i = Tracer(hs[0])
        ts = [Tracer(h) for h in hs[1:]]
        v = tree_unflatten(v_tree, ts)
        out = body_fun(i + lower if lower else i, v)
        o_leaves, o_tree = tree_flatten(out)
        _check_tree("fori_loop", v_tree, o_tree)
        return [lift(x, i, "fori_loop carry", like=ts[k])._h for k, x in enumerate(o_leaves)]

    init_h = _handles(v_leaves, ctx, "fori_loop init")
    consts, (body,) = _convert([body], [[([], "int32")] + _types(init_h)], "fori_loop")
    out = _g.fori(max(upper - lower, 0), consts, init_h, body)
    return tree_unflatten(v_tree, [Tracer(h) for h in out])


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``while cond_fun(val): val = body_fun(val)`` (``jax.lax.while_loop``).
    graft differentiates it in both modes."""
    v_leaves, v_tree = tree_flatten(init_val)
    ctx = _ctx(v_leaves)
    if ctx is None:
        return jit(lambda v: while_loop(cond_fun, body_fun, v))(init_val)

    def cbody(hs: List[_g.Handle]) -> List[_g.Handle]:
        ts = [Tracer(h) for h in hs]
        p = cond_fun(tree_unflatten(v_tree, ts))
        p = lift(p, ts[0], "while_loop cond")
        if p.dtype != _np.bool_ or p.shape != ():
            raise TypeError(f"while_loop: cond_fun must return a bool scalar, got {p!r}")
        return [p._h]

    def bbody(hs: List[_g.Handle]) -> List[_g.Handle]:
        ts = [Tracer(h) for h in hs]
        out = body_fun(tree_unflatten(v_tree, ts))
        o_leaves, o_tree = tree_flatten(out)
        _check_tree("while_loop", v_tree, o_tree)
        return [lift(x, ts[0], "while_loop carry", like=ts[k])._h for k, x in enumerate(o_leaves)]

    init_h = _handles(v_leaves, ctx, "while_loop init")
    consts, (cbody, bbody) = _convert([cbody, bbody], [_types(init_h)] * 2, "while_loop")
    out = _g.while_loop(consts, init_h, cbody, bbody)
    return tree_unflatten(v_tree, [Tracer(h) for h in out])


def _branches(fns: Sequence[Callable], o_tree: TreeDef, state: dict, where: str) -> List[Callable]:
    """Branch bodies over ``[selector] + operand leaves`` (the selector
    travels along so a branch of no operands still has a trace to emit into)."""

    def make(fn: Callable) -> Callable:
        def body(hs: List[_g.Handle]) -> List[_g.Handle]:
            ts = [Tracer(h) for h in hs]
            out = fn(*tree_unflatten(o_tree, ts[1:]))
            leaves, tree = tree_flatten(out)
            if "tree" in state and state["tree"] != tree:
                raise TypeError(f"{where}: branches return different structures: {state['tree']!r} and {tree!r}")
            state["tree"] = tree
            return [lift(x, ts[0], f"{where} branch output")._h for x in leaves]

        return body

    return [make(f) for f in fns]


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``;
    both branches are traced and must return the same structure and types."""
    o_leaves, o_tree = tree_flatten(tuple(operands))
    if not isinstance(pred, Tracer):
        if _ctx(o_leaves) is None:
            return jit(lambda p, *ops: cond(p, true_fun, false_fun, *ops))(pred, *operands)
        return true_fun(*operands) if bool(_np.asarray(pred)) else false_fun(*operands)
    if pred.dtype != _np.bool_:
        pred = pred != 0
    if pred.shape != ():
        raise TypeError(f"cond: the predicate must be a scalar, got {pred!r}")
    state: dict = {}
    t, f = _branches([true_fun, false_fun], o_tree, state, "cond")
    hs = [pred._h] + _handles(o_leaves, pred, "cond operand")
    consts, (t, f) = _convert([t, f], [_types(hs)] * 2, "cond")
    out = _g.cond(pred._h, consts + hs, t, f)
    return tree_unflatten(state["tree"], [Tracer(h) for h in out])


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[clamp(index, 0, len - 1)](*operands)`` (``jax.lax.switch``)."""
    o_leaves, o_tree = tree_flatten(tuple(operands))
    if not isinstance(index, Tracer):
        if _ctx(o_leaves) is None:
            return jit(lambda i, *ops: switch(i, branches, *ops))(_np.int32(index), *operands)
        k = min(max(int(index), 0), len(branches) - 1)
        return branches[k](*operands)
    if index.shape != ():
        raise TypeError(f"switch: the index must be a scalar, got {index!r}")
    if index.dtype != _np.int32:
        index = index.astype(_np.int32)
    state: dict = {}
    bodies = _branches(list(branches), o_tree, state, "switch")
    hs = [index._h] + _handles(o_leaves, index, "switch operand")
    consts, bodies = _convert(bodies, [_types(hs)] * len(bodies), "switch")
    out = _g.switch(index._h, consts + hs, bodies)
    return tree_unflatten(state["tree"], [Tracer(h) for h in out])


def erf_inv(x: Any) -> Any:
    """The inverse error function (``jax.lax.erf_inv``), bit for bit what
    JAX computes on CPU in float32 and float64 (XLA's algorithm and
    rounding); ``±inf`` at ``±1``, NaN beyond. Its derivative is JAX's,
    ``sqrt(pi)/2 exp(y^2)``."""
    from .numpy import _unary

    return _unary("erf_inv", x)


# ---- collectives over named axes ----
#
# A function using them is written for one rank of a named axis; under
# ``graft.vmap(f, axis_name=name)`` every example is a rank, and graft's
# batching rule turns each collective into operations over the batch axis
# (``psum`` into a sum over it, ``all_gather`` into the batch itself, ...).
# Derivatives follow JAX's convention (the ranks' program is one function
# of every rank's inputs): ``psum``'s transpose is ``psum``.


def _names(axis_name: Any, what: str, many: bool) -> Tuple[str, ...]:
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{what}: axis_name is a string (or a tuple of strings), got {axis_name!r}")
    if len(names) > 1 and not many:
        raise NotImplementedError(f"{what}: graft takes one axis name here, got {axis_name!r}")
    return names


def _single_axis(axis_name: Any, what: str) -> Tuple[str, int]:
    """The one axis name a collective takes, with its number of ranks."""
    (name,) = _names(axis_name, what, False)
    return name, _axis_size(name, what)


def _no_groups(groups: Any, what: str) -> None:
    # Collectives run under a named vmap, where JAX (0.10.2) refuses
    # axis_index_groups too (NotImplementedError); it has them only in pmap.
    if groups is not None:
        raise NotImplementedError(f"{what}: axis_index_groups is not supported under vmap (as in JAX)")


def _leaf_tracer(x: Any, what: str) -> Tracer:
    """A collective's operand as a tracer of the trace being recorded (a
    concrete value becomes a constant there, the same on every rank)."""
    if isinstance(x, Tracer):
        return x
    return lift(to_array(x, what), Tracer(current_ctx(what)), what)


def _map_leaves(x: Any, what: str, f: Callable[[Tracer], Tracer]) -> Any:
    """``f`` applied to every leaf of the pytree ``x`` (each as a tracer)."""
    leaves, tree = tree_flatten(x)
    return tree_unflatten(tree, [f(_leaf_tracer(leaf, what)) for leaf in leaves])


def _reduction(op: str, x: Any, axis_name: Any) -> Any:
    """``psum``/``pmean``/``pmax``/``pmin`` leaf by leaf; over a tuple of
    names, one after the other (the result is the same in any order)."""
    what = f"graft.lax.{op}"
    names = _names(axis_name, what, True)
    sizes = [_axis_size(n, what) for n in names]

    def one(t: Tracer) -> Tracer:
        for n, size in zip(names, sizes):
            t = Tracer(_g.collective(op, t._h, n, size))
        return t

    return _map_leaves(x, what, one)


def psum(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """The sum of ``x`` (a pytree) over the ranks of ``axis_name`` (a name
    or a tuple of names bound by ``graft.vmap(..., axis_name=)``); every
    rank gets it. ``psum(1, name)`` is the axis size."""
    _no_groups(axis_index_groups, "psum")
    return _reduction("psum", x, axis_name)


def pmean(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """The mean of ``x`` (float leaves) over the ranks of ``axis_name``."""
    _no_groups(axis_index_groups, "pmean")
    return _reduction("pmean", x, axis_name)


def pmax(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """The elementwise maximum of ``x`` over the ranks of ``axis_name``
    (its derivative goes to the ranks holding the maximum, shared equally
    between ties)."""
    _no_groups(axis_index_groups, "pmax")
    return _reduction("pmax", x, axis_name)


def pmin(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """The elementwise minimum of ``x`` over the ranks of ``axis_name``."""
    _no_groups(axis_index_groups, "pmin")
    return _reduction("pmin", x, axis_name)


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def all_gather(x: Any, axis_name: Any, *, axis_index_groups: Any = None, axis: int = 0, tiled: bool = False) -> Any:
    """Every rank's ``x`` (a pytree), in rank order: stacked along a new
    axis ``axis`` (``tiled=True``: concatenated along the existing axis
    ``axis``)."""
    what = "graft.lax.all_gather"
    _no_groups(axis_index_groups, "all_gather")
    name, n = _single_axis(axis_name, what)

    def one(t: Tracer) -> Tracer:
        shape = t.shape
        if tiled:
            d = _axis(axis, len(shape), what)
            g = Tracer(_g.collective("all_gather", t._h, name, n, d))
            return g.reshape(shape[:d] + (n * shape[d],) + shape[d + 1 :])
        d = _axis(axis, len(shape) + 1, what)
        return Tracer(_g.collective("all_gather", t._h, name, n, d))

    return _map_leaves(x, what, one)


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, axis_index_groups: Any = None,
                 tiled: bool = False) -> Any:
    """The sum of ``x`` over the ranks of ``axis_name``, scattered: axis
    ``scatter_dimension`` has one entry per rank and rank ``r`` keeps entry
    ``r`` (the axis removed); ``tiled=True``: the axis has ``n * k`` entries
    and rank ``r`` keeps the ``r``-th block of ``k``."""
    what = "graft.lax.psum_scatter"
    _no_groups(axis_index_groups, "psum_scatter")
    name, n = _single_axis(axis_name, what)

    def one(t: Tracer) -> Tracer:
        shape = t.shape
        d = _axis(scatter_dimension, len(shape), what)
        if tiled:
            if shape[d] % n:
                raise ValueError(f"{what}: axis {d} of {shape} does not divide into {n} ranks")
            t = t.reshape(shape[:d] + (n, shape[d] // n) + shape[d + 1 :])
        elif shape[d] != n:
            raise ValueError(f"{what}: axis {d} of {shape} must have one entry per rank ({n})")
        return Tracer(_g.collective("psum_scatter", t._h, name, n, d))

    return _map_leaves(x, what, one)


def ppermute(x: Any, axis_name: Any, perm: Sequence[Tuple[int, int]]) -> Any:
    """Rank ``dst`` receives rank ``src``'s ``x`` for each ``(src, dst)`` in
    ``perm`` (each rank at most once per side); the other ranks get zeros."""
    what = "graft.lax.ppermute"
    name, n = _single_axis(axis_name, what)
    try:
        pairs = [(int(s), int(d)) for s, d in perm]
    except (TypeError, ValueError):
        raise TypeError(f"{what}: perm is a sequence of (source, destination) pairs, got {perm!r}") from None
    if any(s < 0 or d < 0 for s, d in pairs):
        raise ValueError(f"{what}: ranks in perm are non-negative, got {pairs}")
    return _map_leaves(x, what, lambda t: Tracer(_g.collective("ppermute", t._h, name, n, 0, pairs)))


def axis_index(axis_name: Any) -> Any:
    """This rank's index on ``axis_name`` (an int32 scalar)."""
    what = "graft.lax.axis_index"
    name, n = _single_axis(axis_name, what)
    return Tracer(_g.axis_index(current_ctx(what), name, n))


def axis_size(axis_name: Any) -> int:
    """The number of ranks of ``axis_name`` (a Python int, known when tracing)."""
    what = "graft.lax.axis_size"
    names = _names(axis_name, what, True)
    out = 1
    for n in names:
        out *= _axis_size(n, what)
    return out
