"""``jit`` and the transforms, with JAX's names and semantics.

Every transform here is a core ``graft::Transform`` value: a Python
function is wrapped once per input structure as a ``_graft.Function``
(a ``graft::Jit`` over the flat leaves), and ``Function.transform`` stacks
the transform on it, the path the Rust API and the graft language take.
Called on NumPy arrays, a transformed function is compiled once per input
types and run; called on tracers (inside another transform), it is emitted
as one call into the enclosing trace, so transforms compose to any depth.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _graft as _g
from ._tracer import Tracer, lift, to_array
from ._tree import TreeDef, tree_flatten, tree_unflatten
from . import _scope
from ._scope import Scope, mapping, run_in

__all__ = [
    "jit",
    "grad",
    "value_and_grad",
    "jvp",
    "vjp",
    "linearize",
    "vmap",
    "jacfwd",
    "jacrev",
    "jacobian",
    "hessian",
    "checkpoint",
    "remat",
    "checkpoint_policies",
    "custom_jvp",
    "custom_vjp",
    "stop_gradient",
    "ShapeDtypeStruct",
]

ArgNums = Union[int, Sequence[int]]


class ShapeDtypeStruct:
    """A shape and dtype standing for an array (for ``jit(f).lower``)."""

    def __init__(self, shape: Sequence[int], dtype: Any):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"


class checkpoint_policies:
    """Saving policies for :func:`checkpoint` (JAX's names)."""

    nothing_saveable = "nothing"
    dots_saveable = "dots"


def _name(f: Callable) -> str:
    return getattr(f, "__name__", None) or type(f).__name__


def _type_of(x: Any, where: str) -> Tuple[List[int], str]:
    if isinstance(x, (Tracer, ShapeDtypeStruct)):
        return list(x.shape), x.dtype.name
    a = to_array(x, where)
    return list(a.shape), a.dtype.name


def _where(tree: TreeDef, i: int) -> str:
    return f"argument leaf {i} of {tree!r}"


def _to_handle(x: Any, ctx: Optional[Tracer], where: str) -> _g.Handle:
    if isinstance(x, Tracer):
        return x._h
    if ctx is None:
        raise TypeError(f"{where}: a traced function of no array arguments must return traced values")
    return lift(x, ctx, where)._h


class _Traced:
    """A Python function specialised to one input structure: a
    ``_graft.Function`` over the flat leaves, remembering the output
    structure of the last trace.

    Values the function captures from enclosing traces become trailing
    inputs: :meth:`probe` traces it once to find them, and while
    ``order`` lists them (during :func:`_run`) the body maps each to the
    input after the leaves at its position."""

    def __init__(self, f: Callable, in_tree: TreeDef, name: str, capture: bool = True, shapeless: bool = False):
        self.in_tree = in_tree
        self.out_tree: Optional[TreeDef] = None
        self.out_float: List[bool] = []
        self.transformed: Dict[Hashable, _g.Function] = {}
        self.capture = capture
        # Per thread: two threads may trace this function at once.
        self._tls = threading.local()
        n = in_tree.num_leaves
        what = f"the function {name}"
        # The body is held by the native Function, which the garbage
        # collector cannot see through: a strong reference back to this
        # object would make a cycle it never frees (keeping alive whatever
        # `f` closes over, tracers of an enclosing trace included).
        me = weakref.ref(self)

        def body(handles: List[_g.Handle]) -> List[_g.Handle]:
            self = me()
            if not handles or self is None:
                return inner(handles)
            if not self.capture:
                scope = Scope(handles[0], f"{what} (a custom-rule function)", capture=False)
            elif self.probing:
                scope = Scope(handles[0], what)
            else:
                k = len(self.order)
                scope = mapping(handles[0], what, self.order, list(handles[n : n + k]))
            try:
                return run_in(scope, lambda: inner(handles))
            finally:
                if self.probing:
                    self.found = list(scope.captured)

        def inner(handles: List[_g.Handle]) -> List[_g.Handle]:
            # A vjp layer first traces at primals + cotangents to count the
            # outputs (graft's convention: extra inputs are ignored).
            tracers = [Tracer(h) for h in handles[:n]]
            args, kwargs = tree_unflatten(in_tree, tracers)
            out = f(*args, **kwargs)
            leaves, out_tree = tree_flatten(out)
            ctx = tracers[0] if tracers else None
            hs = [_to_handle(x, ctx, f"output {i} of {name}") for i, x in enumerate(leaves)]
            self = me()
            if self is not None:
                self.out_tree = out_tree
                self.out_float = [np.dtype(h.dtype).kind == "f" for h in hs]
            return hs

        self.fn = _g.Function(name, body, shapeless)

    @property
    def probing(self) -> bool:
        return getattr(self._tls, "probing", False)

    @probing.setter
    def probing(self, v: bool) -> None:
        self._tls.probing = v

    @property
    def found(self) -> List[_g.Handle]:
        return getattr(self._tls, "found", [])

    @found.setter
    def found(self, v: List[_g.Handle]) -> None:
        self._tls.found = v

    @property
    def order(self) -> List[_g.Handle]:
        return getattr(self._tls, "order", [])

    @order.setter
    def order(self, v: List[_g.Handle]) -> None:
        self._tls.order = v

    def get(self, key: Hashable, make: Callable[[], _g.Function]) -> _g.Function:
        fn = self.transformed.get(key)
        if fn is None:
            fn = make()
            self.transformed[key] = fn
        return fn

    def probe(self, types: List[Tuple[List[int], str]]) -> Tuple[List[_g.Handle], List[Tuple[List[int], str]]]:
        """Traces the function at ``types``: the values it captures from
        enclosing traces, and its output types (``out_tree`` is set)."""
        saved = (self.probing, self.found)
        self.probing, self.found = True, []
        try:
            otypes = self.fn.output_types(types)
            return list(self.found), otypes
        finally:
            self.probing, self.found = saved


def _leaf_types(leaves: Sequence[Any], tree: Optional[TreeDef]) -> List[Tuple[List[int], str]]:
    return [_type_of(x, _where(tree, i) if tree is not None else f"argument {i}") for i, x in enumerate(leaves)]


def _run(
    t: _Traced,
    key: Hashable,
    make: Callable[[int], _g.Function],
    leaves: Sequence[Any],
    tree: Optional[TreeDef],
    tail: Sequence[Any] = (),
    probe_types: Optional[List[Tuple[List[int], str]]] = None,
) -> List[Any]:
    """Runs ``make(k)`` (the transformed function taking ``k`` captured
    values after the leaves) on ``leaves + captured + tail``: compiled and
    run on NumPy arrays at top level, emitted into the enclosing trace when
    a leaf is a tracer or the function captures traced values.
    ``probe_types``: the types the untransformed function is traced at to
    find its captures (default: the leaves' own; a vmap gives the
    per-example types)."""
    leaves, tail = list(leaves), list(tail)
    ctx = next((x for x in leaves + tail if isinstance(x, Tracer)), None)
    captured: List[_g.Handle] = []
    if t.capture and _scope.active():
        captured, _ = t.probe(probe_types if probe_types is not None else _leaf_types(leaves, tree))
    if ctx is None and not captured:
        fn = t.get((key, 0), lambda: make(0))
        where = [_where(tree, i) if tree is not None else f"argument {i}" for i in range(len(leaves))]
        arrays = [to_array(x, w) for x, w in zip(leaves, where)] + [to_array(x, "argument") for x in tail]
        t.order = []
        return fn.call(arrays)
    k = len(captured)
    c = ctx if ctx is not None else Tracer(captured[0])
    hs = (
        [lift(x, c, f"argument {i}")._h for i, x in enumerate(leaves)]
        + [_scope.resolve(h) for h in captured]
        + [lift(x, c, "argument")._h for x in tail]
    )
    fn = t.get((key, k), lambda: make(k))
    saved = t.order
    t.order = captured
    try:
        return [Tracer(h) for h in fn.apply(hs)]
    finally:
        t.order = saved


class _Wrapped:
    """Shared machinery: a Python function and its per-structure traces."""

    _capture = True

    def __init__(self, f: Callable, shapeless: bool = False):
        self._f = f
        self._shapeless = shapeless
        self._by_tree: Dict[TreeDef, _Traced] = {}
        functools.update_wrapper(self, f, updated=())

    def _traced(self, tree: TreeDef) -> _Traced:
        t = self._by_tree.get(tree)
        if t is None:
            t = _Traced(self._f, tree, _name(self._f), capture=self._capture, shapeless=self._shapeless)
            self._by_tree[tree] = t
        return t

    def _flat(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[List[Any], TreeDef, _Traced]:
        leaves, tree = tree_flatten((tuple(args), dict(kwargs)))
        return leaves, tree, self._traced(tree)


class Lowered:
    """A traced function at concrete input types (``jit(f).lower(...)``)."""

    def __init__(self, text: str):
        self._text = text

    def as_text(self) -> str:
        """graft's IR of the function, as text."""
        return self._text

    def __str__(self) -> str:
        return self._text


class Jitted(_Wrapped):
    """A function compiled by graft once per input structure, shapes and
    dtypes (and values of the static arguments)."""

    def __init__(
        self,
        f: Callable,
        static_argnums: Sequence[int] = (),
        static_argnames: Sequence[str] = (),
        shapeless: bool = False,
    ):
        super().__init__(f, shapeless)
        self._static_argnums = tuple(static_argnums)
        self._static_argnames = tuple(static_argnames)
        self._by_static: Dict[Hashable, "Jitted"] = {}

    def _split_static(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional["Jitted"]:
        """The function of the dynamic arguments for these static values."""
        if not self._static_argnums and not self._static_argnames:
            return None
        nums = {n % len(args) for n in self._static_argnums if -len(args) <= n < len(args)}
        static = tuple((i, args[i]) for i in sorted(nums)) + tuple(
            sorted((k, v) for k, v in kwargs.items() if k in self._static_argnames)
        )
        try:
            hash(static)
            key = static
        except TypeError as e:
            raise TypeError(f"jit: static arguments must be hashable: {e}") from None
        j = self._by_static.get(key)
        if j is None:
            f = self._f
            fixed = dict(static[: len(nums)])
            fixed_kw = dict(static[len(nums) :])

            def dynamic(*dyn: Any, **kw: Any) -> Any:
                it = iter(dyn)
                full = [fixed[i] if i in fixed else next(it) for i in range(len(dyn) + len(fixed))]
                return f(*full, **kw, **fixed_kw)

            dynamic.__name__ = _name(f)
            j = Jitted(dynamic, shapeless=self._shapeless)
            self._by_static[key] = j
        return j

    def _dynamic(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple["Jitted", Tuple[Any, ...], Dict[str, Any]]:
        j = self._split_static(args, kwargs)
        if j is None:
            return self, args, kwargs
        nums = {n % len(args) for n in self._static_argnums if -len(args) <= n < len(args)}
        dyn = tuple(a for i, a in enumerate(args) if i not in nums)
        kw = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        return j, dyn, kw

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        j, args, kwargs = self._dynamic(args, kwargs)
        leaves, tree, t = j._flat(args, kwargs)
        outs = _run(t, "jit", lambda k: t.fn, leaves, tree)
        return tree_unflatten(t.out_tree, outs)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """Traces at the types of the arguments (arrays, tracers or
        :class:`ShapeDtypeStruct`) without running; ``.as_text()`` is the IR."""
        j, args, kwargs = self._dynamic(args, kwargs)
        leaves, tree = tree_flatten((tuple(args), dict(kwargs)), is_leaf=lambda x: isinstance(x, ShapeDtypeStruct))
        t = j._traced(tree)
        return Lowered(t.fn.lower_text([_type_of(x, _where(tree, i)) for i, x in enumerate(leaves)]))

    def _cache_size(self) -> int:
        """How many compilations are cached (JAX's ``_cache_size``)."""
        own = sum(fn.cache_size() for t in self._by_tree.values() for fn in t.transformed.values())
        return own + sum(j._cache_size() for j in self._by_static.values())


def jit(
    f: Optional[Callable] = None,
    *,
    static_argnums: Union[int, Sequence[int]] = (),
    static_argnames: Union[str, Sequence[str]] = (),
    shapeless: bool = False,
) -> Any:
    """Compiles ``f`` with graft: traced once per input structure, shapes
    and dtypes, then run from the cache. Results are NumPy arrays.
    ``static_argnums``/``static_argnames`` name arguments passed as Python
    values (hashable; one compilation per value) instead of arrays.
    ``shapeless=True`` compiles once per input dtypes and ranks (MLX's
    ``compile(f, shapeless=True)``): a call at new sizes traces again, which
    is cheap, and reuses the native code compiled for the first sizes; its
    kernels read sizes at run time, which makes strided reads slower.
    Usable as ``@jit`` or ``@jit(static_argnums=...)``."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if f is None:
        return lambda g: jit(g, static_argnums=nums, static_argnames=names, shapeless=shapeless)
    if isinstance(f, Jitted) and not nums and not names and f._shapeless == shapeless:
        return f
    return Jitted(f, nums, names, shapeless)


def _argnums_positions(args: Tuple[Any, ...], argnums: ArgNums, fname: str) -> Tuple[List[int], List[TreeDef]]:
    """Flat leaf positions (in the ``(args, kwargs)`` flattening) of the
    arguments ``argnums`` and their structures."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    offsets = []
    off = 0
    trees = []
    for a in args:
        _, t = tree_flatten(a)
        offsets.append(off)
        trees.append(t)
        off += t.num_leaves
    positions: List[int] = []
    sel: List[TreeDef] = []
    for n in nums:
        if not -len(args) <= n < len(args):
            raise ValueError(f"{fname}: argnums {n} is out of range for {len(args)} positional arguments")
        n = n % len(args)
        positions.extend(range(offsets[n], offsets[n] + trees[n].num_leaves))
        sel.append(trees[n])
    return positions, sel


def _regroup(argnums: ArgNums, trees: List[TreeDef], leaves: Sequence[Any]) -> Any:
    out = []
    i = 0
    for t in trees:
        out.append(tree_unflatten(t, leaves[i : i + t.num_leaves]))
        i += t.num_leaves
    return out[0] if isinstance(argnums, int) else tuple(out)


def _vjp_with_aux(t: _Traced, leaves: List[Any], tree: TreeDef, positions: List[int], fname: str):
    """Reverse mode of ``f -> (value, aux)``: the ``vjp`` transform with
    cotangent 1 for the value and 0 for every float leaf of ``aux``."""
    _, otypes = t.probe(_leaf_types(leaves, tree))
    out_tree = t.out_tree
    if out_tree is None or out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
        raise TypeError(f"{fname} with has_aux=True: the function must return a pair (value, aux), got {out_tree!r}")
    if out_tree.children[0].kind != "leaf" or otypes[0][0] != [] or not otypes[0][1].startswith("float"):
        raise TypeError(
            f"{fname}: the function must return a floating-point scalar as its value, got "
            f"{otypes[0][1]}{otypes[0][0]}"
        )
    cts = [
        np.full(shape, 1.0 if k == 0 else 0.0, dtype=dt)
        for k, (shape, dt) in enumerate(otypes)
        if dt.startswith("float")
    ]
    outs = _run(t, ("vjp", tuple(positions)), lambda k: t.fn.transform("vjp", wrt=positions), leaves, tree, cts)
    n = len(otypes)
    aux = tree_unflatten(out_tree.children[1], outs[1:n])
    return outs[0], aux, outs[n:]


class _Grad(_Wrapped):
    def __init__(self, f: Callable, argnums: ArgNums, has_aux: bool, with_value: bool):
        super().__init__(f)
        self._argnums = argnums
        self._has_aux = has_aux
        self._with_value = with_value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fname = "value_and_grad" if self._with_value else "grad"
        leaves, tree, t = self._flat(args, kwargs)
        positions, trees = _argnums_positions(args, self._argnums, fname)
        if self._has_aux:
            value, aux, grads = _vjp_with_aux(t, leaves, tree, positions, fname)
            g = _regroup(self._argnums, trees, grads)
            return ((value, aux), g) if self._with_value else (g, aux)
        kind = "value_and_grad" if self._with_value else "grad"
        outs = _run(t, (kind, tuple(positions)), lambda k: t.fn.transform(kind, wrt=positions), leaves, tree)
        if self._with_value:
            return outs[0], _regroup(self._argnums, trees, outs[1:])
        return _regroup(self._argnums, trees, outs)


def grad(f: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
    """The gradient of a scalar function with respect to the arguments
    ``argnums`` (an int or a tuple of ints; each argument may be a pytree).
    With ``has_aux``, ``f`` returns ``(value, aux)`` and the result is
    ``(gradient, aux)``."""
    return _Grad(f, argnums, has_aux, with_value=False)


def value_and_grad(f: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
    """``(value, gradient)`` from one forward pass (``((value, aux), gradient)``
    with ``has_aux``)."""
    return _Grad(f, argnums, has_aux, with_value=True)


def _float_leaves(leaves: Sequence[Any]) -> List[bool]:
    return [np.dtype(_type_of(x, "argument")[1]).kind == "f" for x in leaves]


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> Tuple[Any, Any]:
    """Forward mode: ``(f(*primals), tangent of the output)`` for tangents
    of the same structure as ``primals`` (tangents of integer leaves are
    ignored)."""
    p_leaves, p_tree = tree_flatten((tuple(primals), {}))
    t_leaves, t_tree = tree_flatten((tuple(tangents), {}))
    if p_tree != t_tree:
        raise ValueError(f"jvp: primals {p_tree!r} and tangents {t_tree!r} have different structures")
    w = _wrapped(f)
    t = w._traced(p_tree)
    fl = _float_leaves(p_leaves)
    for i, (p, d, isf) in enumerate(zip(p_leaves, t_leaves, fl)):
        if isf and _type_of(p, "primal") != _type_of(d, "tangent"):
            raise TypeError(
                f"jvp: tangent {i} has type {_type_of(d, 'tangent')}, its primal {_type_of(p, 'primal')}"
            )
    fpos = [i for i, isf in enumerate(fl) if isf]
    tans = [d for d, isf in zip(t_leaves, fl) if isf]
    outs = _run(t, ("jvp",), lambda k: t.fn.transform("jvp", wrt=fpos), p_leaves, p_tree, tans)
    n = len(outs) // 2
    return tree_unflatten(t.out_tree, outs[:n]), tree_unflatten(t.out_tree, outs[n:])


def _wrapped(f: Callable) -> _Wrapped:
    return f if isinstance(f, _Wrapped) and type(f) is Jitted else Jitted(f)


def _cotangent_leaves(fname: str, out_tree: TreeDef, out_float: List[bool], ct: Any) -> List[Any]:
    c_leaves, c_tree = tree_flatten(ct)
    if c_tree != out_tree:
        raise ValueError(f"{fname}: the cotangent has structure {c_tree!r}, the output {out_tree!r}")
    return [c for c, isf in zip(c_leaves, out_float) if isf]


def _expand_inputs(p_leaves: List[Any], fl: List[bool], vals: List[Any]) -> List[Any]:
    """One value per primal leaf: ``vals`` for the float leaves, zeros for the others."""
    it = iter(vals)
    out = []
    for p, isf in zip(p_leaves, fl):
        if isf:
            out.append(next(it))
        else:
            shape, dt = _type_of(p, "primal")
            out.append(np.zeros(shape, dtype=dt))
    return out


def vjp(f: Callable, *primals: Any, has_aux: bool = False) -> Any:
    """Reverse mode: ``(f(*primals), vjp_fn)`` where ``vjp_fn(cotangent)``
    returns one cotangent per primal (zeros for integer leaves). With
    ``has_aux``, ``f`` returns ``(out, aux)`` and the result is
    ``(out, vjp_fn, aux)``. On NumPy inputs the forward pass runs once and
    ``vjp_fn`` reuses its residuals."""
    p_leaves, p_tree = tree_flatten((tuple(primals), {}))
    w = _wrapped(f)
    t = w._traced(p_tree)
    fl = _float_leaves(p_leaves)
    traced = any(isinstance(x, Tracer) for x in p_leaves) or _scope.active()
    if not traced:
        arrays = [to_array(x, _where(p_tree, i)) for i, x in enumerate(p_leaves)]
        outs, lm = t.fn.pullback(arrays)
    else:
        outs = _run(t, "jit", lambda k: t.fn, p_leaves, p_tree)
    out_tree, out_float = t.out_tree, list(t.out_float)
    main_tree, n_main = out_tree, len(outs)
    if has_aux:
        if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
            raise TypeError(f"vjp with has_aux=True: the function must return a pair (out, aux), got {out_tree!r}")
        main_tree = out_tree.children[0]
        n_main = main_tree.num_leaves
    # Cotangents of the aux outputs' float leaves are zero.
    aux_zeros = [np.zeros(_type_of(o, "aux")[0], dtype=_type_of(o, "aux")[1]) for o, isf in zip(outs[n_main:], out_float[n_main:]) if isf]
    fpos = [i for i, isf in enumerate(fl) if isf]

    def vjp_fn(ct: Any) -> Tuple[Any, ...]:
        cts = _cotangent_leaves("vjp", main_tree, out_float[:n_main], ct) + aux_zeros
        if not traced:
            grads = lm.call([to_array(c, "cotangent") for c in cts])
        else:
            make = lambda k: t.fn.transform("vjp", wrt=fpos)  # noqa: E731
            grads = _run(t, ("vjp", tuple(fpos)), make, p_leaves, p_tree, cts)[len(outs) :]
        return tree_unflatten(p_tree, _expand_inputs(p_leaves, fl, grads))[0]

    out = tree_unflatten(out_tree, outs)
    if has_aux:
        return out[0], vjp_fn, out[1]
    return out, vjp_fn


def linearize(f: Callable, *primals: Any) -> Tuple[Any, Callable]:
    """``(f(*primals), f_jvp)`` where ``f_jvp(*tangents)`` is the JVP at
    ``primals``. On NumPy inputs the forward pass runs once."""
    p_leaves, p_tree = tree_flatten((tuple(primals), {}))
    w = _wrapped(f)
    t = w._traced(p_tree)
    fl = _float_leaves(p_leaves)

    def float_tangents(tangents: Tuple[Any, ...]) -> List[Any]:
        d_leaves, d_tree = tree_flatten((tuple(tangents), {}))
        if d_tree != p_tree:
            raise ValueError(f"linearize: tangents {d_tree!r} do not match primals {p_tree!r}")
        return [d for d, isf in zip(d_leaves, fl) if isf]

    if not any(isinstance(x, Tracer) for x in p_leaves) and not _scope.active():
        arrays = [to_array(x, _where(p_tree, i)) for i, x in enumerate(p_leaves)]
        outs, lm = t.fn.linearize(arrays)
        out_tree = t.out_tree

        def f_jvp(*tangents: Any) -> Any:
            res = lm.call([to_array(d, "tangent") for d in float_tangents(tangents)])
            return tree_unflatten(out_tree, res)

        return tree_unflatten(out_tree, outs), f_jvp
    outs = _run(t, "jit", lambda k: t.fn, p_leaves, p_tree)
    out_tree = t.out_tree
    fpos = [i for i, isf in enumerate(fl) if isf]

    def f_jvp_traced(*tangents: Any) -> Any:
        res = _run(t, ("jvp",), lambda k: t.fn.transform("jvp", wrt=fpos), p_leaves, p_tree, float_tangents(tangents))
        return tree_unflatten(out_tree, res[len(outs) :])

    return tree_unflatten(out_tree, outs), f_jvp_traced


def _prefix_axes(prefix: Any, tree_value: Any, what: str) -> List[Optional[int]]:
    """Expands an ``in_axes``/``out_axes`` prefix over a value's leaves."""
    if prefix is None or isinstance(prefix, int):
        return [prefix] * tree_flatten(tree_value)[1].num_leaves
    if isinstance(prefix, (tuple, list)) and isinstance(tree_value, (tuple, list)):
        if len(prefix) != len(tree_value):
            raise ValueError(f"vmap: {what} has {len(prefix)} entries for {len(tree_value)} values")
        out: List[Optional[int]] = []
        for p, v in zip(prefix, tree_value):
            out.extend(_prefix_axes(p, v, what))
        return out
    if isinstance(prefix, dict) and isinstance(tree_value, dict):
        out = []
        for k in sorted(tree_value.keys()):
            out.extend(_prefix_axes(prefix.get(k, None), tree_value[k], what))
        return out
    raise ValueError(f"vmap: {what} {prefix!r} does not match the structure of {type(tree_value).__name__}")


class _Vmap(_Wrapped):
    def __init__(self, f: Callable, in_axes: Any, out_axes: Any, axis_name: Optional[str]):
        super().__init__(f)
        self._in_axes = in_axes
        self._out_axes = out_axes
        self._axis_name = axis_name

    def __call__(self, *args: Any) -> Any:
        leaves, tree, t = self._flat(args, {})
        in_axes = self._in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        axes = _prefix_axes(in_axes, tuple(args), "in_axes")
        # The per-example types (batch axes removed) and the batch size.
        per: List[Tuple[List[int], str]] = []
        size: Optional[int] = None
        for i, (x, a) in enumerate(zip(leaves, axes)):
            shape, dt = _type_of(x, _where(tree, i))
            if a is not None:
                if not -len(shape) <= a < len(shape):
                    raise ValueError(f"vmap: in_axes {a} is out of range for argument leaf {i} of shape {tuple(shape)}")
                if size is None:
                    size = shape[a % len(shape)]
                shape = shape[: a % len(shape)] + shape[a % len(shape) + 1 :]
            per.append((shape, dt))
        name = self._axis_name
        with _scope.bind_axis(name, size):
            out_axes = self._out_axes
            if isinstance(out_axes, int):
                key: Hashable = ("vmap", tuple(axes), out_axes, name)
                make = lambda k: t.fn.transform(  # noqa: E731
                    "vmap", in_axes=axes + [None] * k, out_axis=out_axes, axis_name=name
                )
            else:
                # The output structure is needed to expand a prefix: trace
                # the function once per example.
                t.probe(per)
                outs_placeholder = tree_unflatten(t.out_tree, [0] * t.out_tree.num_leaves)
                oaxes = _prefix_axes(out_axes, outs_placeholder, "out_axes")
                key = ("vmap", tuple(axes), tuple(oaxes), name)
                make = lambda k: t.fn.transform(  # noqa: E731
                    "vmap", in_axes=axes + [None] * k, out_axes=oaxes, axis_name=name
                )
            outs = _run(t, key, make, leaves, tree, probe_types=per)
        return tree_unflatten(t.out_tree, outs)


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name: Optional[str] = None) -> Callable:
    """Vectorises ``f`` over a batch axis (``jax.vmap``): ``in_axes`` is an
    int, ``None`` (not batched) or a per-argument prefix tree of them;
    ``out_axes`` likewise for the outputs. The batch is a graph rewrite
    (no loop over examples). ``axis_name`` names the batch axis for the
    collectives of ``graft.lax`` (``psum``, ``pmean``, ``all_gather``,
    ``axis_index``, ...) inside ``f``: each example is one rank, and a
    collective over the name becomes an operation over the batch."""
    if axis_name is not None and not isinstance(axis_name, str):
        raise TypeError(f"vmap: axis_name is a string, got {axis_name!r}")
    return _Vmap(f, in_axes, out_axes, axis_name)


class _Jac(_Wrapped):
    def __init__(self, f: Callable, argnums: int, kind: str):
        super().__init__(f)
        if not isinstance(argnums, int):
            raise TypeError(f"{kind}: graft takes one argument index (an int), got {argnums!r}")
        self._argnums = argnums
        self._kind = kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree, t = self._flat(args, kwargs)
        positions, _ = _argnums_positions(args, self._argnums, self._kind)
        if len(positions) != 1:
            raise TypeError(
                f"{self._kind}: argument {self._argnums} must be a single array (it has {len(positions)} leaves)"
            )
        pos = positions[0]
        return _run(t, (self._kind, pos), lambda k: t.fn.transform(self._kind, index=pos), leaves, tree)[0]


def _jac_many(f: Callable, argnums: Any, kind: str) -> Callable:
    """One Jacobian per entry of a tuple ``argnums`` (JAX's tuple result);
    an int gives the single Jacobian."""
    if isinstance(argnums, int):
        return _Jac(f, argnums, kind)
    if not isinstance(argnums, (tuple, list)) or not argnums or not all(isinstance(i, int) for i in argnums):
        raise TypeError(f"{kind}: argnums is an int or a non-empty tuple of ints, got {argnums!r}")
    parts = [_Jac(f, i, kind) for i in argnums]

    @functools.wraps(f)
    def many(*args: Any, **kwargs: Any) -> Any:
        return tuple(p(*args, **kwargs) for p in parts)

    return many


def jacfwd(f: Callable, argnums: Any = 0) -> Callable:
    """Forward-mode Jacobian of ``f``'s one array output with respect to
    argument ``argnums`` (an array): shape ``out.shape + arg.shape``; a
    tuple ``argnums`` gives a tuple of Jacobians, one per argument."""
    return _jac_many(f, argnums, "jacfwd")


def jacrev(f: Callable, argnums: Any = 0) -> Callable:
    """Reverse-mode Jacobian (same result as :func:`jacfwd`)."""
    return _jac_many(f, argnums, "jacrev")


def jacobian(f: Callable, argnums: Any = 0) -> Callable:
    """The Jacobian in whichever mode needs fewer passes."""
    return _jac_many(f, argnums, "jacobian")


def hessian(f: Callable, argnums: Any = 0) -> Callable:
    """The Hessian of a scalar function with respect to argument ``argnums``;
    with a tuple ``argnums``, JAX's nested tuple: entry ``[i][j]`` is
    ``d/dx_j (df/dx_i)`` of shape ``x_i.shape + x_j.shape``."""
    if isinstance(argnums, int):
        return _Jac(f, argnums, "hessian")
    if not isinstance(argnums, (tuple, list)) or not argnums or not all(isinstance(i, int) for i in argnums):
        raise TypeError(f"hessian: argnums is an int or a non-empty tuple of ints, got {argnums!r}")
    idx = tuple(argnums)

    def block(i: int, j: int) -> Callable:
        if i == j:
            return _Jac(f, i, "hessian")
        gi = grad(f, argnums=i)
        return _Jac(lambda *a, **k: gi(*a, **k), j, "jacfwd")

    blocks = [[block(i, j) for j in idx] for i in idx]

    @functools.wraps(f)
    def many(*args: Any, **kwargs: Any) -> Any:
        return tuple(tuple(b(*args, **kwargs) for b in row) for row in blocks)

    return many


class _Checkpoint(_Wrapped):
    def __init__(self, f: Callable, policy: Optional[str]):
        super().__init__(f)
        self._policy = policy or "nothing"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree, t = self._flat(args, kwargs)
        make = lambda k: t.fn.transform("checkpoint", policy=self._policy)  # noqa: E731
        outs = _run(t, ("checkpoint", self._policy), make, leaves, tree)
        return tree_unflatten(t.out_tree, outs)


def checkpoint(f: Callable, policy: Optional[str] = None) -> Callable:
    """The same function, rematerialised in reverse mode: the backward pass
    recomputes its intermediates (``policy=checkpoint_policies.dots_saveable``
    keeps matrix products)."""
    return _Checkpoint(f, policy)


remat = checkpoint


def _handles_or_none(xs: Sequence[Any], ctx: Tracer, where: str) -> List[_g.Handle]:
    return [lift(x, ctx, where)._h for x in xs]


def _nondiff(argnums: Sequence[int], what: str) -> Tuple[int, ...]:
    if isinstance(argnums, int):
        argnums = (argnums,)
    if not all(isinstance(i, int) and i >= 0 for i in argnums):
        raise TypeError(f"{what}: nondiff_argnums are non-negative ints, got {argnums!r}")
    return tuple(sorted(set(argnums)))


def _split_static(args: Sequence[Any], nondiff: Tuple[int, ...], what: str) -> Tuple[Tuple[Tuple[int, Any], ...], List[Any]]:
    """The ``nondiff_argnums`` arguments (static: hashable, not traced) as
    ``((index, value), ...)`` and the other arguments in order."""
    if nondiff and nondiff[-1] >= len(args):
        raise TypeError(f"{what}: nondiff_argnums {nondiff} but the call has {len(args)} arguments")
    static = []
    for i in nondiff:
        v = args[i]
        if any(isinstance(l, Tracer) for l in tree_flatten(v)[0]) or isinstance(v, np.ndarray):
            raise TypeError(f"{what}: argument {i} is in nondiff_argnums, so it must be a static (hashable, non-array) value")
        try:
            hash(v)
        except TypeError:
            raise TypeError(f"{what}: argument {i} is in nondiff_argnums, so it must be hashable, got {type(v).__name__}") from None
        static.append((i, v))
    return tuple(static), [a for i, a in enumerate(args) if i not in nondiff]


def _merge(static: Tuple[Tuple[int, Any], ...], dyn: Sequence[Any], n: int) -> List[Any]:
    """The full argument list from the static and the other arguments."""
    it = iter(dyn)
    where = dict(static)
    return [where[i] if i in where else next(it) for i in range(n)]


def _named(g: Callable, like: Callable) -> Callable:
    g.__name__ = getattr(like, "__name__", "f")
    g.__qualname__ = getattr(like, "__qualname__", g.__name__)
    return g


class custom_jvp(_Wrapped):
    """A function with a custom JVP rule (``jax.custom_jvp``)::

        @graft.custom_jvp
        def f(x): ...

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (x_dot,) = primals, tangents
            return f(x), 2 * x_dot

    Every derivative of ``f`` (forward, reverse, any order) uses the rule.
    """

    _capture = False

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        super().__init__(fun)
        self._jvp: Optional[Callable] = None
        self._depth = 0
        self._nondiff = _nondiff(nondiff_argnums, "custom_jvp")
        self._static: Dict[Hashable, Any] = {}

    def _plain(self, f: Callable[[], Any]) -> Any:
        """Runs ``f`` with calls of this function evaluating it plainly (a
        rule calling the function must not trace the rule again)."""
        self._depth += 1
        try:
            return f()
        finally:
            self._depth -= 1

    def defjvp(self, jvp: Callable) -> Callable:
        """Sets the rule ``jvp(primals, tangents) -> (out, tangent_out)``."""
        self._jvp = jvp
        self._by_tree.clear()
        self._static.clear()
        return jvp

    def __call__(self, *args: Any) -> Any:
        if self._jvp is None:
            raise TypeError(f"custom_jvp function {_name(self._f)} has no rule: decorate one with @{_name(self._f)}.defjvp")
        if self._nondiff:
            static, dyn = _split_static(args, self._nondiff, "custom_jvp")
            inner = self._static.get(static)
            if inner is None:
                f, rule, n = self._f, self._jvp, len(args)
                vals = [v for _, v in static]
                inner = custom_jvp(_named(lambda *d: f(*_merge(static, d, n)), f))
                inner.defjvp(lambda primals, tangents: rule(*vals, primals, tangents))
                self._static[static] = inner
            return inner(*dyn)
        if self._depth:
            return self._f(*args)
        leaves, tree, t = self._flat(args, {})
        rule = self._jvp

        def rule_body(handles: List[_g.Handle]) -> List[_g.Handle]:
            return run_in(Scope(handles[0], f"the custom_jvp rule of {_name(self._f)}", capture=False), lambda: self._plain(lambda: rule_inner(handles)))

        def rule_inner(handles: List[_g.Handle]) -> List[_g.Handle]:
            n = tree.num_leaves
            prim = [Tracer(h) for h in handles[:n]]
            tans_f = iter(Tracer(h) for h in handles[n:])
            tans = [next(tans_f) if p.dtype.kind == "f" else Tracer(_g.unary("zeros_like", p._h)) for p in prim]
            p_args, _ = tree_unflatten(tree, prim)
            t_args, _ = tree_unflatten(tree, tans)
            out, tan_out = rule(tuple(p_args), tuple(t_args))
            o_leaves, o_tree = tree_flatten(out)
            d_leaves, d_tree = tree_flatten(tan_out)
            if o_tree != d_tree:
                raise TypeError(f"custom_jvp rule: output {o_tree!r} and tangent {d_tree!r} differ in structure")
            ctx = prim[0]
            oh = _handles_or_none(o_leaves, ctx, "custom_jvp rule output")
            dh = [
                lift(d, ctx, "custom_jvp rule tangent", like=Tracer(o))._h
                for d, o in zip(d_leaves, oh)
                if np.dtype(o.dtype).kind == "f"
            ]
            return oh + dh

        outs = _run(t, ("custom_jvp", id(rule)), lambda k: t.fn.custom_jvp(rule_body), leaves, tree)
        return tree_unflatten(t.out_tree, outs)


class custom_vjp(_Wrapped):
    """A function with custom reverse mode (``jax.custom_vjp``)::

        @graft.custom_vjp
        def f(x): ...
        def f_fwd(x): return f(x), residuals
        def f_bwd(residuals, g): return (cotangent_of_x,)
        f.defvjp(f_fwd, f_bwd)

    ``bwd`` returns one cotangent per positional argument (``None``: zero).
    """

    _capture = False

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        super().__init__(fun)
        self._fwd: Optional[Callable] = None
        self._bwd: Optional[Callable] = None
        self._depth = 0
        self._nondiff = _nondiff(nondiff_argnums, "custom_vjp")
        self._static: Dict[Hashable, Any] = {}

    _plain = custom_jvp._plain

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Sets ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, g) -> cotangents``."""
        self._fwd, self._bwd = fwd, bwd
        self._by_tree.clear()
        self._static.clear()

    def __call__(self, *args: Any) -> Any:
        if self._fwd is None or self._bwd is None:
            raise TypeError(f"custom_vjp function {_name(self._f)} has no rule: call {_name(self._f)}.defvjp(fwd, bwd)")
        if self._nondiff:
            static, dyn = _split_static(args, self._nondiff, "custom_vjp")
            inner = self._static.get(static)
            if inner is None:
                f, fwd, bwd, n = self._f, self._fwd, self._bwd, len(args)
                vals = [v for _, v in static]
                inner = custom_vjp(_named(lambda *d: f(*_merge(static, d, n)), f))
                inner.defvjp(lambda *d: fwd(*_merge(static, d, n)), lambda res, g: bwd(*vals, res, g))
                self._static[static] = inner
            return inner(*dyn)
        if self._depth:
            return self._f(*args)
        leaves, tree, t = self._flat(args, {})
        fwd, bwd = self._fwd, self._bwd
        state: Dict[str, Any] = {}
        # Only the structure of the arguments: the bodies outlive this call
        # (they are cached) and must not keep its tracers alive.
        arg_trees = [tree_flatten(a)[1] for a in args]
        del args

        def fwd_body(handles: List[_g.Handle]) -> List[_g.Handle]:
            sc = Scope(handles[0], f"the custom_vjp fwd of {_name(self._f)}", capture=False)
            return run_in(sc, lambda: self._plain(lambda: fwd_inner(handles)))

        def bwd_body(handles: List[_g.Handle]) -> List[_g.Handle]:
            sc = Scope(handles[0], f"the custom_vjp bwd of {_name(self._f)}", capture=False)
            return run_in(sc, lambda: self._plain(lambda: bwd_inner(handles)))

        def fwd_inner(handles: List[_g.Handle]) -> List[_g.Handle]:
            prim = [Tracer(h) for h in handles]
            p_args, _ = tree_unflatten(tree, prim)
            res = fwd(*p_args)
            if not isinstance(res, tuple) or len(res) != 2:
                raise TypeError("custom_vjp fwd must return a pair (output, residuals)")
            out, resid = res
            o_leaves, o_tree = tree_flatten(out)
            r_leaves, r_tree = tree_flatten(resid)
            ctx = prim[0]
            oh = _handles_or_none(o_leaves, ctx, "custom_vjp fwd output")
            rh = _handles_or_none(r_leaves, ctx, "custom_vjp fwd residual")
            state["out_tree"], state["res_tree"] = o_tree, r_tree
            state["out_float"] = [np.dtype(h.dtype).kind == "f" for h in oh]
            state["primals"] = [(list(p.shape), p.dtype.name) for p in prim]
            return oh + rh

        def bwd_inner(handles: List[_g.Handle]) -> List[_g.Handle]:
            r_tree: TreeDef = state["res_tree"]
            n = r_tree.num_leaves
            res = tree_unflatten(r_tree, [Tracer(h) for h in handles[:n]])
            cts_f = iter(Tracer(h) for h in handles[n:])
            ctx = Tracer(handles[0])
            ct_leaves = [next(cts_f) if isf else None for isf in state["out_float"]]
            ct = tree_unflatten(state["out_tree"], ct_leaves)
            got = bwd(res, ct)
            if not isinstance(got, (tuple, list)) or len(got) != len(arg_trees):
                raise TypeError(f"custom_vjp bwd must return a tuple of {len(arg_trees)} cotangents (one per argument)")
            out: List[_g.Handle] = []
            k = 0
            for a_tree, g in zip(arg_trees, got):
                g_leaves = [None] * a_tree.num_leaves if g is None else tree_flatten(g)[0]
                if len(g_leaves) != a_tree.num_leaves:
                    raise TypeError(f"custom_vjp bwd: a cotangent has {len(g_leaves)} leaves, its argument {a_tree.num_leaves}")
                for gl in g_leaves:
                    shape, dt = state["primals"][k]
                    k += 1
                    if np.dtype(dt).kind != "f":
                        continue
                    if gl is None:
                        out.append(_g.full(ctx._h, shape, 0.0, dt))
                    else:
                        out.append(lift(gl, ctx, "custom_vjp bwd cotangent")._h)
            return out

        outs = _run(t, ("custom_vjp", id(fwd), id(bwd)), lambda k: t.fn.custom_vjp(fwd_body, bwd_body), leaves, tree)
        return tree_unflatten(t.out_tree, outs)


def stop_gradient(x: Any) -> Any:
    """The same values with zero derivative (leaf by leaf over a pytree)."""
    leaves, tree = tree_flatten(x)
    return tree_unflatten(
        tree, [Tracer(_g.unary("stop_gradient", l._h)) if isinstance(l, Tracer) else l for l in leaves]
    )
