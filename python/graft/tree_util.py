"""``graft.tree_util``: pytree helpers (``jax.tree_util``'s names)."""

from ._tree import TreeDef, tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten

__all__ = ["TreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_map", "tree_structure"]
