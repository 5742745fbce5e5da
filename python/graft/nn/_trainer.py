"""``graft.nn.Trainer``: one compiled training step over
``graft::optim::Trainer`` (forward, backward and the optimizer update in
one graph; parameters and optimizer state donated to the step and updated
in place in Rust)."""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .. import _graft as _g
from .._api import _to_handle
from .._scope import Scope, run_in
from .._tracer import Tracer
from ._modules import Module
from .optim import Optimizer

__all__ = ["Trainer", "flatten_params", "unflatten_params"]

RNG = "@rng"


def flatten_params(tree: Mapping[str, Any], prefix: str = "") -> List[Tuple[str, Any]]:
    """``(dotted name, leaf)`` pairs of a (nested) dict of arrays, in the
    dict's order (``{"enc": {"w": a}}`` gives ``enc.w``; a flat dict with
    dotted keys, such as ``Module.parameters()``, keeps its keys)."""
    out: List[Tuple[str, Any]] = []
    for k, v in tree.items():
        if not isinstance(k, str) or not k or any(not part for part in k.split(".")):
            raise ValueError(f"a parameter key is a non-empty string with non-empty dotted parts, got {k!r}")
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping):
            out.extend(flatten_params(v, name))
        else:
            out.append((name, v))
    if not prefix:
        names = [n for n, _ in out]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"the parameter names {dup} occur twice")
    return out


def unflatten_params(flat: List[Tuple[str, Any]], like: Mapping[str, Any]) -> Dict[str, Any]:
    """The inverse of :func:`flatten_params` for a tree shaped like ``like``."""
    # No recursive closure: its cycle would keep the leaves (tracers, whose
    # trace must end with no handle alive) until the collector runs.
    return _build(iter(flat), like)


def _build(it: Any, like: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: _build(it, v) if isinstance(v, Mapping) else next(it)[1] for k, v in like.items()}


class Trainer:
    """A compiled training step.

    ``Trainer(loss_fn, optimizer, params=params)`` trains ``params`` (a dict
    of arrays, nested dicts allowed, named by dotted paths) to minimise
    ``loss_fn(params, batch) -> scalar``, a Python function traced once per
    batch types. ``Trainer(model, optimizer, loss=loss)`` trains a
    :class:`graft.nn.Module`: ``loss(model_output, batch) -> scalar`` with
    the output ``model.apply(params, batch[input], train=True, rng=...)``;
    a model with dropout carries a key (from ``seed``) that the step advances.

    :meth:`step` takes the batch as a dict of arrays and runs one compiled
    step, returning the loss before the update. ``eval`` computes the loss
    (evaluation mode) without updating, ``accumulate(k)`` averages the
    gradients of ``k`` micro-batches per step, ``save``/``load`` write and
    read a safetensors checkpoint (parameters, optimizer state as
    ``NAME.opt.K``, buffers, step count; the format ``graft train`` uses).
    """

    def __init__(self, fn: Union[Callable[..., Any], Module], optimizer: Optimizer, *,
                 params: Optional[Mapping[str, Any]] = None, loss: Optional[Callable[[Any, Any], Any]] = None,
                 input: str = "x", seed: int = 0, dtype: Any = None):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"the optimizer must come from graft.nn.optim, got {type(optimizer).__name__}")
        self._model: Optional[Module] = None
        self._batch_keys: Optional[List[str]] = None
        if isinstance(fn, Module):
            if loss is None:
                raise TypeError("training a module needs loss=fn(output, batch)")
            model = fn
            if params is None:
                if model._values is None:
                    model.init(seed, np.float32 if dtype is None else dtype)
                params = model.parameters()
            self._model = model
            self._tree: Mapping[str, Any] = dict(params)
            keyed = model.uses_rng
            module_buffers = model.buffers()

            def forward(p: Dict[str, Any], batch: Dict[str, Any], train: bool, rng: Any,
                        bufs: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
                if input not in batch:
                    raise KeyError(f"the batch has no input `{input}` (it has {', '.join(batch)})")
                from ._modules import Context

                list(model.named_modules())
                cx = Context(p, train, rng, batch[input], bufs)
                out = loss(model.forward(cx, batch[input]), batch)
                return out, cx.rng, {k: cx.new_buffers.get(k, v) for k, v in bufs.items()}

            self._forward = forward
        else:
            if params is None:
                raise TypeError("Trainer(loss_fn, optimizer) needs params=")
            if loss is not None:
                raise TypeError("loss= is for training a module; a loss function is the first argument")
            keyed = False
            module_buffers = {}
            self._tree = params
            self._forward = lambda p, batch, train, rng, bufs: (fn(p, batch), rng, bufs)
        flat = flatten_params(self._tree)
        self._names = [n for n, _ in flat]
        arrays = [np.asarray(a) for _, a in flat]
        buffer_names, buffers = [], []
        if keyed:
            from .. import random

            buffer_names, buffers = [RNG], [np.asarray(random.key(seed))]
        # Module buffers (BatchNorm's running statistics) after the key.
        self._module_buffers = list(module_buffers)
        buffer_names += self._module_buffers
        buffers += [np.asarray(module_buffers[k]) for k in self._module_buffers]
        self._keyed = keyed
        n, m = len(arrays), len(buffers)
        kb = 1 if keyed else 0
        # The native trainer holds the bodies, and the collector cannot see
        # through it: a strong reference back would be a cycle never freed.
        me_ref = weakref.ref(self)

        def body(train: bool) -> Callable[[List[_g.Handle]], List[_g.Handle]]:
            def run(handles: List[_g.Handle]) -> List[_g.Handle]:
                me = me_ref()
                if me is None:
                    raise RuntimeError("the Trainer was deleted")

                def inner() -> List[_g.Handle]:
                    ts = [Tracer(h) for h in handles]
                    p = unflatten_params(list(zip(me._names, ts[:n])), me._tree)
                    rng = ts[n] if kb else None
                    bufs = dict(zip(me._module_buffers, ts[n + kb:n + m]))
                    keys = me._batch_keys or []
                    batch = dict(zip(keys, ts[n + m:]))
                    l, rng2, bufs2 = me._forward(p, batch, train, rng, bufs)
                    if not isinstance(l, Tracer) or l.shape != () or l.dtype.kind != "f":
                        got = f"{l.dtype.name}{list(l.shape)}" if isinstance(l, Tracer) else type(l).__name__
                        raise TypeError(f"the loss must be a float scalar computed from the parameters, got {got}")
                    out = [_to_handle(l, ts[0], "the loss")]
                    if train and kb:
                        out.append(_to_handle(rng2, ts[0], "the key"))
                    if train:
                        for k in me._module_buffers:
                            b = bufs2[k]
                            out.append(_to_handle(b.astype(bufs[k].dtype) if b.dtype != bufs[k].dtype else b,
                                                  ts[0], f"buffer `{k}`"))
                    return out

                return run_in(Scope(handles[0], "the training loss", capture=False), inner)

            return run

        self._t = _g.Trainer(body(True), body(False), self._names, arrays, buffer_names, buffers,
                             optimizer._native(self._names))
        self.optimizer = optimizer

    # ---- batches ----
    def _batch(self, batch: Mapping[str, Any]) -> List[Any]:
        if not isinstance(batch, Mapping):
            raise TypeError(f"a batch is a dict of arrays by name, got {type(batch).__name__}")
        keys = sorted(batch)
        if self._batch_keys is None:
            self._batch_keys = keys
        elif keys != self._batch_keys:
            raise ValueError(f"the batch has inputs {keys}; this trainer was first stepped with {self._batch_keys}")
        return [batch[k] for k in keys]

    def step(self, batch: Mapping[str, Any]) -> float:
        """One compiled step (forward, backward, update) on ``batch``;
        returns the loss before the update."""
        return self._t.step(self._batch(batch))

    def eval(self, batch: Mapping[str, Any]) -> float:
        """The loss at the current parameters, in evaluation mode (dropout
        off), without an update."""
        return self._t.eval(self._batch(batch))

    def accumulate(self, parts: int) -> None:
        """Splits every batch into ``parts`` micro-batches along its leading
        axis and averages their gradients before one update (one compiled
        ``scan``, one micro-batch's activations alive at a time)."""
        self._t.accumulate(int(parts))

    # ---- state ----
    @property
    def step_count(self) -> int:
        """Steps taken."""
        return self._t.count

    def named_parameters(self) -> List[Tuple[str, np.ndarray]]:
        """``(dotted name, array)`` of the current parameters (copies)."""
        return list(zip(self._names, self._t.params))

    @property
    def params(self) -> Any:
        """The current parameters in the structure they were given (copies);
        a module's as a ``{path: array}`` dict."""
        return unflatten_params(self.named_parameters(), self._tree)

    @params.setter
    def params(self, value: Mapping[str, Any]) -> None:
        flat = flatten_params(value)
        if [n for n, _ in flat] != self._names:
            raise ValueError(f"the parameters are named {[n for n, _ in flat]}, the trainer has {self._names}")
        self._t.set_params([np.asarray(a) for _, a in flat])

    @property
    def opt_state(self) -> Dict[str, List[np.ndarray]]:
        """The optimizer state by parameter name (copies)."""
        k = self.optimizer.n_state
        s = self._t.state
        return {n: s[i * k:(i + 1) * k] for i, n in enumerate(self._names)}

    @property
    def buffers(self) -> Dict[str, np.ndarray]:
        """The buffers by name (copies): the dropout key (``@rng``) and a
        module's buffers (BatchNorm's running statistics) by path."""
        return dict(zip(self._t.buffer_names, self._t.buffers))

    def update_model(self) -> Module:
        """Writes the trained parameters (and buffers) back into the module trained."""
        if self._model is None:
            raise TypeError("this trainer trains a loss function, not a module")
        self._model.load_parameters(dict(self.named_parameters()))
        if self._module_buffers:
            b = self.buffers
            self._model.load_buffers({k: b[k] for k in self._module_buffers})
        return self._model

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes a safetensors checkpoint (temporary file, then rename)."""
        self._t.save(os.fspath(path))

    def load(self, path: Union[str, os.PathLike]) -> None:
        """Restores a checkpoint of the same parameters and optimizer; every
        mismatch is listed and nothing changes on error."""
        self._t.load(os.fspath(path))
