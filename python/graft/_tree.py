"""Pytrees: nested tuples, lists, dicts, NamedTuples and None, as in JAX.

A pytree is flattened to its leaves (depth first; dict keys in sorted
order, as ``jax.tree_util`` does) and a hashable :class:`TreeDef` that
rebuilds the same structure from new leaves.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, List, Sequence, Tuple

__all__ = ["TreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_map", "tree_structure"]


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


class TreeDef:
    """The structure of a pytree: node kind, node data and children."""

    __slots__ = ("kind", "data", "children", "num_leaves", "_hash")

    def __init__(self, kind: str, data: Hashable, children: Tuple["TreeDef", ...]):
        self.kind = kind
        self.data = data
        self.children = children
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in children)
        self._hash = hash((kind, data, children))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeDef)
            and self.kind == other.kind
            and self.data == other.data
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.data, self.children))
            return "{" + inner + "}"
        if self.kind == "list":
            return "[" + inner + "]"
        if self.kind == "namedtuple":
            return f"{self.data.__name__}({inner})"
        return "(" + inner + ("," if len(self.children) == 1 else "") + ")"


LEAF = TreeDef("leaf", None, ())


def _flatten(x: Any, leaves: List[Any], is_leaf: Callable[[Any], bool] | None) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return LEAF
    if x is None:
        return TreeDef("none", None, ())
    if _is_namedtuple(x):
        return TreeDef("namedtuple", type(x), tuple(_flatten(c, leaves, is_leaf) for c in x))
    if isinstance(x, tuple):
        return TreeDef("tuple", None, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if isinstance(x, list):
        return TreeDef("list", None, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if isinstance(x, dict):
        keys = tuple(sorted(x.keys()))
        return TreeDef("dict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    leaves.append(x)
    return LEAF


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Tuple[List[Any], TreeDef]:
    """The leaves of ``tree`` (depth first) and its structure."""
    leaves: List[Any] = []
    treedef = _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def _build(t: TreeDef, it: Any) -> Any:
    if t.kind == "leaf":
        return next(it)
    if t.kind == "none":
        return None
    children = [_build(c, it) for c in t.children]
    if t.kind == "tuple":
        return tuple(children)
    if t.kind == "list":
        return children
    if t.kind == "namedtuple":
        return t.data(*children)
    return dict(zip(t.data, children))


def tree_unflatten(treedef: TreeDef, leaves: Sequence[Any]) -> Any:
    """Rebuilds a pytree of structure ``treedef`` from ``leaves``."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree_unflatten: the structure {treedef!r} has {treedef.num_leaves} leaves, got {len(leaves)}")
    return _build(treedef, iter(leaves))


def tree_leaves(tree: Any) -> List[Any]:
    """The leaves of ``tree``, depth first."""
    return tree_flatten(tree)[0]


def tree_structure(tree: Any) -> TreeDef:
    """The structure of ``tree``."""
    return tree_flatten(tree)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Applies ``f`` leaf by leaf to ``tree`` (and to trees of the same structure)."""
    leaves, treedef = tree_flatten(tree)
    others = []
    for r in rest:
        l2, t2 = tree_flatten(r)
        if t2 != treedef:
            raise ValueError(f"tree_map: structures differ: {treedef!r} and {t2!r}")
        others.append(l2)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])
