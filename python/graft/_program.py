"""``graft.load``: call a graft-language program's defs with NumPy arrays."""

from __future__ import annotations

import os
from typing import Any, Callable, List

from . import _graft as _g
from ._tracer import to_array

__all__ = ["Program", "load"]


class Program:
    """A parsed and type-checked graft program. Each def is an attribute:
    ``prog.loss(w, x)`` runs ``def loss`` on NumPy arrays (a tuple result is
    a tuple of arrays). Errors are ``GraftError`` with graft's diagnostic."""

    def __init__(self, path: str, source: str, shapeless: bool = False):
        self._p = _g.Program(path, source, shapeless)
        self.path = path

    def defs(self) -> List[str]:
        """The names of the program's defs, in source order."""
        return self._p.defs()

    def cache_size(self) -> int:
        """How many compilations the program holds: one per (def, argument
        types), or with ``shapeless=True`` one per (def, argument dtypes and
        ranks)."""
        return self._p.cache_size()

    def run(self, entry: str, *args: Any) -> Any:
        """Runs the def ``entry`` on the arguments."""
        arrays = [to_array(a, f"{entry}: argument {i}") for i, a in enumerate(args)]
        return self._p.run(entry, arrays)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._p.defs():
            raise AttributeError(f"{self.path} has no def `{name}` (it defines {', '.join(self._p.defs())})")
        return lambda *args: self.run(name, *args)

    def __repr__(self) -> str:
        return f"graft.Program({self.path!r}: {', '.join(self.defs())})"


def load(path: "str | os.PathLike[str]", shapeless: bool = False) -> Program:
    """Loads, parses and checks the graft program at ``path``.

    ``shapeless=True`` compiles each def once per argument dtypes and ranks
    instead of once per shape (as ``graft.jit(f, shapeless=True)``): calls
    at new sizes lower and plan the def again (fractions of a millisecond)
    and run the native code compiled for the first sizes from their first
    call. Its kernels read their sizes at run time, which can cost speed
    where they index (see docs/PERFORMANCE.md)."""
    p = os.fspath(path)
    with open(p, encoding="utf-8") as f:
        return Program(p, f.read(), shapeless)
