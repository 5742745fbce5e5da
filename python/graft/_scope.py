"""Which trace a body is recording, for values captured from enclosing traces.

Every traced Python body (a ``jit``/transform function, a loop body, a
branch) runs inside a :class:`Scope` naming its trace. A tracer of another
(enclosing) trace used there is *captured*: ``lax`` bodies take captured
values as extra loop-invariant inputs (a first, throwaway trace finds them;
the real one maps them), as JAX's closure conversion does. Transformed
functions do not capture yet: they must take such values as arguments.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

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
            k = len(self.captured)
            self._index[id(h)] = k
            self.captured.append(h)
        if self.consts is not None and k < len(self.consts):
            return self.consts[k]
        # Finding captures: a stand-in of the same type in this trace.
        return _g.full(self.ctx, h.shape, 0.0, h.dtype)


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
