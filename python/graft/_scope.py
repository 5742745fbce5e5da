"""Which trace a body is recording, for values captured from enclosing traces.

Every traced Python body (a ``jit``/transform function, a loop body, a
branch) runs inside a :class:`Scope` naming its trace. A tracer of another
(enclosing) trace used there is *captured*: ``lax`` bodies take captured
values as extra loop-invariant inputs, and transformed functions as extra
trailing inputs that no transform differentiates or batches (a first,
throwaway trace finds them; the real one maps them), as JAX's closure
conversion does. Custom-rule functions do not capture.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _graft as _g

_local = threading.local()


class Scope:
    """The trace a body records, and the outer values it captured."""

    def __init__(self, ctx: _g.Handle, what: str, consts: Optional[List[_g.Handle]] = None, capture: bool = True):
        self.trace_id = ctx.trace_id
        self.ctx = ctx
        self.what = what
        self.can_capture = capture
        self.captured: List[_g.Handle] = []
        self._index: Dict[int, int] = {}
        self.consts = consts

    def capture(self, h: _g.Handle) -> _g.Handle:
        if not self.can_capture:
            raise TypeError(
                f"{self.what} uses a traced value of an enclosing function ({h!r}) that is not one of its "
                "arguments; graft's transforms cannot capture traced values yet: pass it as an argument"
            )
        k = self._index.get(id(h))
        if k is None:
            if self.consts is not None:
                raise TypeError(
                    f"{self.what} uses a traced value ({h!r}) of a trace that is not an enclosing one "
                    "(a tracer kept from an earlier trace?)"
                )
            k = len(self.captured)
            self._index[id(h)] = k
            self.captured.append(h)
        if self.consts is not None:
            return self.consts[k]
        # Finding captures: a stand-in of the same type in this trace.
        return _g.full(self.ctx, h.shape, 0.0, h.dtype)


def mapping(ctx: _g.Handle, what: str, captured: List[_g.Handle], consts: List[_g.Handle]) -> Scope:
    """A scope that maps each of ``captured`` (by identity) to the input of
    the same position in ``consts``."""
    sc = Scope(ctx, what, consts=list(consts))
    sc.captured = list(captured)
    sc._index = {id(h): i for i, h in enumerate(captured)}
    return sc


def active() -> bool:
    """Whether a body is being traced on this thread."""
    return bool(getattr(_local, "stack", None))


def _stack() -> List[Scope]:
    st = getattr(_local, "stack", None)
    if st is None:
        st = []
        _local.stack = st
    return st


def resolve(h: _g.Handle) -> _g.Handle:
    """``h`` as seen from the innermost body being traced."""
    st = getattr(_local, "stack", None)
    if st:
        sc = st[-1]
        if h.trace_id != sc.trace_id:
            return sc.capture(h)
    return h


def run_in(scope: Optional[Scope], f: Callable[[], Any]) -> Any:
    """Runs ``f`` with ``scope`` innermost (no scope: as it is)."""
    if scope is None:
        return f()
    st = _stack()
    st.append(scope)
    try:
        return f()
    finally:
        st.pop()


# ---- named axes (``vmap(..., axis_name=)``) ----


def _axes() -> List[Tuple[str, int]]:
    st = getattr(_local, "axes", None)
    if st is None:
        st = []
        _local.axes = st
    return st


@contextlib.contextmanager
def bind_axis(name: Optional[str], size: Optional[int]) -> Iterator[None]:
    """Binds the axis ``name`` of ``size`` ranks while a named vmap traces
    its function (no name or no size: binds nothing). Collectives over the
    name read the size here; the innermost binding of a name wins."""
    if name is None or size is None:
        yield
        return
    st = _axes()
    st.append((name, int(size)))
    try:
        yield
    finally:
        st.pop()


def axis_size(name: Any, what: str) -> int:
    """The size of the innermost bound axis ``name``; ``NameError`` (JAX's
    exception for an unbound axis name) when no enclosing vmap binds it."""
    st = _axes()
    for n, size in reversed(st):
        if n == name:
            return size
    bound = ", ".join(sorted({repr(n) for n, _ in st})) or "none"
    raise NameError(
        f"{what}: unbound axis name: {name!r} (graft binds axis names with graft.vmap(f, axis_name=...), "
        f"and the collectives in f's trace see them; bound here: {bound})"
    )


def current_ctx(what: str) -> _g.Handle:
    """A handle of the trace being recorded (the innermost body)."""
    st = getattr(_local, "stack", None)
    if not st:
        raise TypeError(f"{what} is only available inside a traced function (under graft.vmap with an axis_name)")
    return st[-1].ctx
