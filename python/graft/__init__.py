"""graft from Python: a differentiable-programming compiler with a JAX-shaped API.

Python functions are traced (their array arguments become
:class:`Tracer` objects), compiled by graft per input shapes and dtypes,
and run on NumPy arrays with the GIL released::

    import numpy as np
    import graft
    import graft.numpy as gnp

    def loss(w, x):
        return gnp.sum(gnp.tanh(x @ w) ** 2)

    g = graft.jit(graft.grad(loss))(np.ones((3, 2)), np.ones((4, 3)))

Transforms (``grad``, ``value_and_grad``, ``jvp``, ``vjp``, ``linearize``,
``vmap``, ``jacfwd``, ``jacrev``, ``hessian``, ``checkpoint``,
``custom_jvp``, ``custom_vjp``) are graft's own graph rewrites and compose
to any depth; ``graft.numpy``, ``graft.lax``, ``graft.random`` and
``graft.nn`` follow ``jax``'s names.
"""

from . import _graft
from ._graft import GraftError
from ._api import (
    ShapeDtypeStruct,
    checkpoint,
    checkpoint_policies,
    custom_jvp,
    custom_vjp,
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jit,
    jvp,
    linearize,
    remat,
    stop_gradient,
    value_and_grad,
    vjp,
    vmap,
)
from ._program import Program, load
from ._tracer import Tracer, is_tracer
from . import tree_util
from . import numpy
from . import lax
from . import random
from . import nn

__all__ = [
    "GraftError",
    "Program",
    "ShapeDtypeStruct",
    "Tracer",
    "checkpoint",
    "checkpoint_policies",
    "custom_jvp",
    "custom_vjp",
    "grad",
    "hessian",
    "is_tracer",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "lax",
    "linearize",
    "load",
    "nn",
    "numpy",
    "random",
    "remat",
    "stop_gradient",
    "tree_util",
    "value_and_grad",
    "vjp",
    "vmap",
]
