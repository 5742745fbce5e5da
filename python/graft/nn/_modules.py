"""Layers with named parameters (PyTorch's names, layouts and default
initialisation), over graft's Rust runtime.

A module declares its parameters (shape and initialiser) and its
sub-modules; the root gives every parameter a dotted path
(``encoder.0.weight``), as PyTorch's ``named_parameters`` does. Values are
drawn by ``graft::module::Vars::init`` (the Rust layers' initialisers, one
Threefry key per path, so a value depends on the seed and its path only)
and kept on the module; :meth:`Module.apply` is the pure forward pass over
a ``{path: array}`` dict, traced by ``graft.jit``, the transforms and
:class:`graft.nn.Trainer`. The layer math is ``graft::nn``'s
(``linear``, ``layer_norm``, ``conv2d``, ``embedding``, ``dropout``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _graft as _g
from .._tracer import Tracer, lift
from . import _functions as F
from .init import Initializer, kaiming_uniform, normal, ones, uniform_fan_in, xavier_uniform, zeros

__all__ = ["Module", "Linear", "Conv1d", "Conv2d", "LayerNorm", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "Embedding",
           "Dropout", "Sequential", "Flatten", "MaxPool2d", "AvgPool2d", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU",
           "Softplus", "Lambda", "MultiHeadAttention", "LSTM", "GRU"]

_FLOATS = ("float32", "float64")


class Context:
    """What a forward pass reads besides its input: the parameter values
    (tracers or arrays) by path, the buffers (state such as BatchNorm's
    running statistics) by path, the mode, and a key split per draw. New
    buffer values a training pass computes are collected in
    ``new_buffers``."""

    def __init__(self, params: Dict[str, Any], train: bool, rng: Any, ctx: Tracer,
                 buffers: Optional[Dict[str, Any]] = None):
        self.params = params
        self.ctx = ctx
        self.train = train
        self._rng = rng
        self.buffers = buffers or {}
        self.new_buffers: Dict[str, Any] = {}

    def buffer(self, module: "Module", name: str) -> Any:
        """The current value of ``module``'s buffer ``name`` (the newest one
        set in this pass, if any)."""
        path = module._path_of(name)
        if path in self.new_buffers:
            return self.new_buffers[path]
        try:
            v = self.buffers[path]
        except KeyError:
            raise KeyError(f"no buffer `{path}` in the values given (have: {', '.join(self.buffers) or 'none'})") from None
        return v if isinstance(v, Tracer) else lift(np.asarray(v), self.ctx, f"buffer `{path}`")

    def set_buffer(self, module: "Module", name: str, value: Any) -> None:
        """Sets ``module``'s buffer ``name`` for the rest of the pass and as
        the pass's result."""
        self.new_buffers[module._path_of(name)] = value

    def param(self, module: "Module", name: str) -> Any:
        path = module._path_of(name)
        try:
            v = self.params[path]
        except KeyError:
            raise KeyError(f"no parameter `{path}` in the values given (have: {', '.join(self.params) or 'none'})") from None
        return v if isinstance(v, Tracer) else lift(np.asarray(v), self.ctx, f"parameter `{path}`")

    def next_key(self) -> Any:
        """A fresh key (the context's key advances)."""
        if self._rng is None:
            raise ValueError("this model draws random numbers in training mode: pass rng=key to apply")
        from .. import random

        ks = random.split(self._rng, 2)
        self._rng = ks[0]
        return ks[1]

    @property
    def rng(self) -> Any:
        """The key after every draw so far."""
        return self._rng


class Module:
    """Base class: sub-modules and parameters are registered by assigning
    them as attributes (sub-modules) or through :meth:`param` in
    ``__init__``; :meth:`forward` computes the output from a
    :class:`Context`. Paths are fixed by the root (``self.fc.weight`` is
    ``fc.weight``)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_buffer_values", None)
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_prefix", "")
        object.__setattr__(self, "_values", None)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_children" not in self.__dict__:
            raise TypeError(f"{type(self).__name__}.__init__ must call super().__init__() before setting attributes")
        if isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    # ---- declaration ----
    def param(self, name: str, shape: Sequence[int], init: Initializer) -> None:
        """Declares a trainable parameter ``name`` of ``shape``."""
        if not name or "." in name:
            raise ValueError(f"a parameter name is one non-empty part without dots, got `{name}`")
        if name in self._params or name in self._children or name in self._buffers:
            raise ValueError(f"`{name}` is declared twice in {type(self).__name__}")
        if not isinstance(init, Initializer):
            raise TypeError(f"parameter `{name}`: the initialiser must come from graft.nn.init, got {init!r}")
        self._params[name] = (tuple(int(s) for s in shape), init)

    def buffer(self, name: str, shape: Sequence[int], init: Initializer) -> None:
        """Declares a buffer ``name`` of ``shape``: state a training pass
        updates (BatchNorm's running statistics), never differentiated nor
        seen by the optimizer (the Rust layers' ``Vars::state``)."""
        if not name or "." in name:
            raise ValueError(f"a buffer name is one non-empty part without dots, got `{name}`")
        if name in self._params or name in self._children or name in self._buffers:
            raise ValueError(f"`{name}` is declared twice in {type(self).__name__}")
        if not isinstance(init, Initializer):
            raise TypeError(f"buffer `{name}`: the initialiser must come from graft.nn.init, got {init!r}")
        self._buffers[name] = (tuple(int(s) for s in shape), init)

    def forward(self, cx: Context, x: Any) -> Any:
        """The output for input ``x`` (override)."""
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    @property
    def uses_rng(self) -> bool:
        """Whether training-mode forward passes draw random numbers."""
        return any(m._draws for _, m in self.named_modules())

    _draws = False

    # ---- paths ----
    def _path_of(self, name: str) -> str:
        return f"{self._prefix}.{name}" if self._prefix else name

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        """``(path, module)`` for this module and every sub-module, depth first
        (fixes the paths the parameters get)."""
        object.__setattr__(self, "_prefix", prefix)
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def specs(self) -> List[Tuple[str, Tuple[int, ...], Initializer]]:
        """``(path, shape, initialiser)`` of every parameter, in declaration order."""
        out = []
        for path, m in self.named_modules():
            for name, (shape, init) in m._params.items():
                out.append((f"{path}.{name}" if path else name, shape, init))
        return out

    def buffer_specs(self) -> List[Tuple[str, Tuple[int, ...], Initializer]]:
        """``(path, shape, initialiser)`` of every buffer, in declaration order."""
        out = []
        for path, m in self.named_modules():
            for name, (shape, init) in m._buffers.items():
                out.append((f"{path}.{name}" if path else name, shape, init))
        return out

    # ---- values ----
    def init(self, seed: int = 0, dtype: Any = np.float32) -> "Module":
        """Draws every parameter and buffer from ``seed`` (graft's Rust
        initialisers: a value depends on the seed and its path only);
        returns ``self``."""
        d = np.dtype(dtype).name
        if d not in _FLOATS:
            raise TypeError(f"parameters are float32 or float64, got {d}")
        specs = self.specs()
        bspecs = self.buffer_specs()
        both = specs + bspecs
        arrays = _g.init_params([(p, list(s), i.kind, list(i.args)) for p, s, i in both], d, int(seed))
        object.__setattr__(self, "_values", {p: a for (p, _, _), a in zip(specs, arrays)})
        object.__setattr__(self, "_buffer_values", {p: a for (p, _, _), a in zip(bspecs, arrays[len(specs):])})
        return self

    def buffers(self) -> Dict[str, np.ndarray]:
        """The buffers as a ``{dotted path: array}`` dict (drawn with seed 0
        if :meth:`init` was not called)."""
        self._require()
        return dict(self._buffer_values or {})

    def load_buffers(self, buffers: Dict[str, Any]) -> "Module":
        """Sets the buffers from a ``{path: array}`` dict with exactly this
        module's buffer paths and shapes; every mismatch is listed."""
        have = self.buffers()
        problems = [f"`{p}` is missing" for p in have if p not in buffers]
        problems += [f"`{p}` is not a buffer of this model" for p in buffers if p not in have]
        values = {}
        for p, a in buffers.items():
            if p in have:
                a = np.asarray(a)
                if a.shape != have[p].shape or a.dtype != have[p].dtype:
                    problems.append(f"`{p}` is {a.dtype.name}{list(a.shape)}, the model has "
                                    f"{have[p].dtype.name}{list(have[p].shape)}")
                values[p] = a
        if problems:
            raise ValueError("the buffers do not match the model:\n  " + "\n  ".join(problems))
        object.__setattr__(self, "_buffer_values", values)
        return self

    def _require(self) -> Dict[str, np.ndarray]:
        if self._values is None:
            self.init()
        assert self._values is not None
        return self._values

    def named_parameters(self) -> List[Tuple[str, np.ndarray]]:
        """``(dotted path, array)`` for every parameter, in declaration
        order (drawn with seed 0 if :meth:`init` was not called)."""
        return list(self._require().items())

    def parameters(self) -> Dict[str, np.ndarray]:
        """The parameters as a ``{dotted path: array}`` dict (a copy of the
        dict, the arrays shared)."""
        return dict(self._require())

    state_dict = parameters

    def load_parameters(self, params: Dict[str, Any]) -> "Module":
        """Sets the parameters from a ``{path: array}`` dict with exactly
        this module's paths and shapes; every mismatch is listed."""
        specs = self.specs()
        have = self._values
        problems = []
        values = {}
        for p, shape, _ in specs:
            if p not in params:
                problems.append(f"`{p}` is missing")
                continue
            a = np.asarray(params[p])
            if a.shape != shape or a.dtype.name not in _FLOATS:
                problems.append(f"`{p}` is {a.dtype.name}{list(a.shape)}, the model has {list(shape)}")
            elif have is not None and a.dtype != have[p].dtype:
                problems.append(f"`{p}` is {a.dtype.name}, the model has {have[p].dtype.name}")
            values[p] = a
        known = {p for p, _, _ in specs}
        problems += [f"`{p}` is not a parameter of this model" for p in params if p not in known]
        if problems:
            raise ValueError("the parameters do not match the model:\n  " + "\n  ".join(problems))
        object.__setattr__(self, "_values", values)
        return self

    load_state_dict = load_parameters

    # ---- running ----
    def apply(self, params: Dict[str, Any], x: Any, *, train: bool = False, rng: Any = None,
              buffers: Optional[Dict[str, Any]] = None) -> Any:
        """The forward pass at ``params`` (``{path: array or tracer}``);
        ``train`` switches dropout on, drawing from ``rng``, and BatchNorm
        to batch statistics. ``buffers`` (default: the module's own) are
        read; updates a training pass makes to them are dropped (see
        :meth:`apply_with_buffers`). Pure, so it can be traced,
        differentiated and vmapped."""
        if not isinstance(x, Tracer):
            return self._eager(params, x, train, rng, buffers)
        list(self.named_modules())  # fix the paths
        bufs = self.buffers() if buffers is None else buffers
        return self.forward(Context(params, train, rng, x, bufs), x)

    def apply_with_buffers(self, params: Dict[str, Any], buffers: Dict[str, Any], x: Any, *,
                           train: bool = False, rng: Any = None) -> Tuple[Any, Dict[str, Any]]:
        """``(output, buffers after the pass)``: the forward pass at
        ``params`` and ``buffers`` (``{path: array or tracer}``), returning
        the buffers a training pass updated (BatchNorm's running
        statistics) with the others unchanged. Pure and traceable."""
        from .._api import jit

        if not isinstance(x, Tracer):
            j = self.__dict__.setdefault("_eager_buffers", {}).get((bool(train), rng is None))
            if j is None:
                if rng is None:
                    j = jit(lambda p, b, v: self.apply_with_buffers(p, b, v, train=train))
                else:
                    j = jit(lambda p, b, v, k: self.apply_with_buffers(p, b, v, train=train, rng=k))
                self.__dict__["_eager_buffers"][(bool(train), rng is None)] = j
            return j(dict(params), dict(buffers), x) if rng is None else j(dict(params), dict(buffers), x, rng)
        list(self.named_modules())
        cx = Context(params, train, rng, x, buffers)
        y = self.forward(cx, x)
        return y, {p: cx.new_buffers.get(p, v) for p, v in buffers.items()}

    def _eager(self, params: Dict[str, Any], x: Any, train: bool, rng: Any, buffers: Optional[Dict[str, Any]]) -> Any:
        from .._api import jit

        cache = self.__dict__.setdefault("_eager_cache", {})
        key = (bool(train), rng is None)
        j = cache.get(key)
        if j is None:
            if rng is None:
                j = jit(lambda p, b, v: self.apply(p, v, train=train, buffers=b))
            else:
                j = jit(lambda p, b, v, k: self.apply(p, v, train=train, rng=k, buffers=b))
            cache[key] = j
        bufs = dict(self.buffers() if buffers is None else buffers)
        return j(dict(params), bufs, x) if rng is None else j(dict(params), bufs, x, rng)

    def __call__(self, x: Any) -> Any:
        """The forward pass in evaluation mode at the module's own
        parameters (compiled once per input type); inside a trace, on a
        tracer, it records the pass with the parameters as constants."""
        return self.apply(self._require(), x)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._children.items())
        return f"{type(self).__name__}({self._extra()}{', ' if inner and self._extra() else ''}{inner})"

    def _extra(self) -> str:
        return ""


class Linear(Module):
    """``y = x @ weight.T + bias`` (``torch.nn.Linear``): ``weight [out,
    in]`` and ``bias [out]``, both ``U(-1/sqrt(in), 1/sqrt(in))``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 weight_init: Optional[Initializer] = None, bias_init: Optional[Initializer] = None):
        super().__init__()
        self.in_features, self.out_features, self.has_bias = int(in_features), int(out_features), bool(bias)
        self.param("weight", (out_features, in_features), weight_init or kaiming_uniform(1 / np.sqrt(3.0)))
        if bias:
            self.param("bias", (out_features,), bias_init or uniform_fan_in(in_features))

    def forward(self, cx: Context, x: Any) -> Any:
        b = cx.param(self, "bias") if self.has_bias else None
        return Tracer(_g.linear(x._h, cx.param(self, "weight")._h, None if b is None else b._h))

    def _extra(self) -> str:
        return f"{self.in_features}, {self.out_features}"


def _pair(v: Union[int, Sequence[int]]) -> List[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(a) for a in v]


class Conv2d(Module):
    """``torch.nn.Conv2d`` on ``[N, C, H, W]``: ``weight [out, in/groups,
    kh, kw]``, ``bias [out]``, PyTorch's initialisation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, Sequence[int]],
                 stride: Union[int, Sequence[int]] = 1, padding: Union[int, Sequence[int]] = 0,
                 dilation: Union[int, Sequence[int]] = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: {in_channels} input and {out_channels} output channels do not divide into {groups} groups")
        k = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = _pair(stride), _pair(padding), _pair(dilation), int(groups)
        self.has_bias = bool(bias)
        self.param("weight", (out_channels, in_channels // groups, *k), kaiming_uniform(1 / np.sqrt(3.0)))
        if bias:
            self.param("bias", (out_channels,), uniform_fan_in(in_channels // groups * k[0] * k[1]))
        self._desc = f"{in_channels}, {out_channels}, kernel_size={tuple(k)}"

    def forward(self, cx: Context, x: Any) -> Any:
        b = cx.param(self, "bias") if self.has_bias else None
        return Tracer(_g.conv2d(x._h, cx.param(self, "weight")._h, None if b is None else b._h,
                                self.stride, self.padding, self.dilation, self.groups))

    def _extra(self) -> str:
        return self._desc


class LayerNorm(Module):
    """``torch.nn.LayerNorm`` over the trailing ``normalized_shape``:
    ``weight`` ones, ``bias`` zeros."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__()
        shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
        self.shape, self.eps, self.affine = shape, float(eps), bool(elementwise_affine)
        if self.affine:
            self.param("weight", shape, ones())
            self.param("bias", shape, zeros())

    def forward(self, cx: Context, x: Any) -> Any:
        if self.affine:
            return Tracer(_g.layer_norm(x._h, cx.param(self, "weight")._h, cx.param(self, "bias")._h, self.eps))
        return Tracer(_g.layer_norm(x._h, _g.full(x._h, list(self.shape), 1.0, x._raw.dtype), None, self.eps))

    def _extra(self) -> str:
        return f"{self.shape}"


class Embedding(Module):
    """``torch.nn.Embedding``: ``weight [num, dim]``, ``N(0, 1)``; the input
    is integer ids."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.num, self.dim = int(num_embeddings), int(embedding_dim)
        self.param("weight", (self.num, self.dim), normal(0.0, 1.0))

    def forward(self, cx: Context, ids: Any) -> Any:
        return Tracer(_g.embedding(cx.param(self, "weight")._h, ids._h))

    def _extra(self) -> str:
        return f"{self.num}, {self.dim}"


class Dropout(Module):
    """Inverted dropout: in training each element is zeroed with
    probability ``rate`` and the rest scaled by ``1 / (1 - rate)``, with a
    key from the context; the identity in evaluation."""

    _draws = True

    def __init__(self, rate: float = 0.5):
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"a dropout rate is in [0, 1), got {rate}")
        self.rate = float(rate)

    def forward(self, cx: Context, x: Any) -> Any:
        if not cx.train or self.rate == 0.0:
            return x
        return Tracer(_g.dropout(cx.next_key()._h, x._h, self.rate, True))

    def _extra(self) -> str:
        return f"{self.rate}"


class Sequential(Module):
    """Sub-modules (or plain functions such as ``graft.nn.relu``) applied
    in order; the modules are named ``0``, ``1``, ... by position."""

    def __init__(self, *layers: Union[Module, Callable[[Any], Any]]):
        super().__init__()
        self.layers = list(layers)
        for i, l in enumerate(layers):
            if isinstance(l, Module):
                self._children[str(i)] = l
            elif not callable(l):
                raise TypeError(f"Sequential: layer {i} is a {type(l).__name__}, not a module or function")

    def forward(self, cx: Context, x: Any) -> Any:
        for l in self.layers:
            x = l.forward(cx, x) if isinstance(l, Module) else l(x)
        return x

    def __getitem__(self, i: int) -> Any:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        return "Sequential(" + ", ".join(repr(l) if isinstance(l, Module) else getattr(l, "__name__", repr(l)) for l in self.layers) + ")"


class Lambda(Module):
    """A parameter-free module from a function of the input."""

    def __init__(self, fn: Callable[[Any], Any], name: Optional[str] = None):
        super().__init__()
        self.fn = fn
        self._name = name or getattr(fn, "__name__", "fn")

    def forward(self, cx: Context, x: Any) -> Any:
        return self.fn(x)

    def _extra(self) -> str:
        return self._name


def _act(name: str, fn: Callable[[Any], Any], doc: str) -> type:
    def __init__(self: Lambda) -> None:
        Lambda.__init__(self, fn, name)

    def _extra(self: Lambda) -> str:
        return ""

    return type(name, (Lambda,), {"__init__": __init__, "__doc__": doc, "_extra": _extra})


ReLU = _act("ReLU", F.relu, "``max(x, 0)``.")
def _tanh(x: Any) -> Any:
    from .. import numpy as gnp

    return gnp.tanh(x)


Tanh = _act("Tanh", _tanh, "``tanh(x)``.")
Sigmoid = _act("Sigmoid", F.sigmoid, "The logistic function.")
GELU = _act("GELU", lambda x: F.gelu(x, approximate=False), "Exact (erf) GELU, PyTorch's default.")
SiLU = _act("SiLU", F.silu, "``x * sigmoid(x)``.")
Softplus = _act("Softplus", F.softplus, "``log(1 + exp(x))``.")


class Flatten(Module):
    """Flattens every axis after the first (``torch.nn.Flatten``)."""

    def forward(self, cx: Context, x: Any) -> Any:
        return x.reshape((x.shape[0], -1))


class _Pool2d(Module):
    _op = "max"

    def __init__(self, kernel_size: Union[int, Sequence[int]], stride: Optional[Union[int, Sequence[int]]] = None,
                 padding: Union[int, Sequence[int]] = 0):
        super().__init__()
        self.kernel = _pair(kernel_size)
        self.stride = self.kernel if stride is None else _pair(stride)
        self.padding = _pair(padding)

    def forward(self, cx: Context, x: Any) -> Any:
        return Tracer(_g.pool2d(self._op, x._h, self.kernel, self.stride, self.padding))

    def _extra(self) -> str:
        return f"{tuple(self.kernel)}"


class MaxPool2d(_Pool2d):
    """``torch.nn.MaxPool2d`` on ``[N, C, H, W]`` (stride defaults to the kernel)."""

    _op = "max"


class AvgPool2d(_Pool2d):
    """``torch.nn.AvgPool2d`` on ``[N, C, H, W]`` (stride defaults to the kernel)."""

    _op = "avg"


class Conv1d(Module):
    """``torch.nn.Conv1d`` on ``[N, C, L]``: ``weight [out, in/groups, k]``,
    ``bias [out]``, PyTorch's initialisation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: {in_channels} input and {out_channels} output channels do not divide into {groups} groups")
        k = int(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = int(stride), int(padding), int(dilation), int(groups)
        self.has_bias = bool(bias)
        self.param("weight", (out_channels, in_channels // groups, k), kaiming_uniform(1 / np.sqrt(3.0)))
        if bias:
            self.param("bias", (out_channels,), uniform_fan_in(in_channels // groups * k))
        self._desc = f"{in_channels}, {out_channels}, kernel_size={k}"

    def forward(self, cx: Context, x: Any) -> Any:
        b = cx.param(self, "bias") if self.has_bias else None
        return Tracer(_g.conv1d(x._h, cx.param(self, "weight")._h, None if b is None else b._h,
                                self.stride, self.padding, self.dilation, self.groups))

    def _extra(self) -> str:
        return self._desc


class BatchNorm(Module):
    """``torch.nn.BatchNorm1d/2d/3d`` on ``[N, C, ...]`` (graft's
    ``module::BatchNorm``): ``weight`` ones and ``bias`` zeros ``[C]``,
    buffers ``running_mean`` (zeros) and ``running_var`` (ones). Training
    normalises with the batch statistics and updates the running ones
    (PyTorch's momentum rule, unbiased batch variance, through
    ``stop_gradient``); evaluation normalises with the running ones."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNorm: momentum must be in [0, 1], got {momentum}")
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), float(momentum)
        self.param("weight", (self.num_features,), ones())
        self.param("bias", (self.num_features,), zeros())
        self.buffer("running_mean", (self.num_features,), zeros())
        self.buffer("running_var", (self.num_features,), ones())

    def forward(self, cx: Context, x: Any) -> Any:
        from .._api import stop_gradient

        w, b = cx.param(self, "weight"), cx.param(self, "bias")
        rm, rv = cx.buffer(self, "running_mean"), cx.buffer(self, "running_var")
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm: expected an input [N, {self.num_features}, ...], got {list(x.shape)}")
        per = (-1,) + (1,) * (x.ndim - 2)
        if not cx.train:
            inv = Tracer(_g.unary("rsqrt", (rv.reshape(per) + self.eps)._h))
            return (x - rm.reshape(per)) * inv * w.reshape(per) + b.reshape(per)
        n = x.size // x.shape[1]
        if n < 2:
            raise ValueError(f"BatchNorm: training needs more than one value per channel, got an input {list(x.shape)}")
        y, mean, var = (Tracer(h) for h in _g.batch_norm(x._h, w._h, b._h, self.eps))
        m = self.momentum
        unbiased = stop_gradient(var) * (n / (n - 1))
        cx.set_buffer(self, "running_mean", rm * (1.0 - m) + stop_gradient(mean) * m)
        cx.set_buffer(self, "running_var", rv * (1.0 - m) + unbiased * m)
        return y

    def _extra(self) -> str:
        return f"{self.num_features}"


BatchNorm1d = BatchNorm
BatchNorm2d = BatchNorm


class MultiHeadAttention(Module):
    """Multi-head attention over ``[batch, seq, embed_dim]`` (graft's
    ``module::MultiHeadAttention``): projections ``wq, wk, wv, wo``
    (``[embed_dim, embed_dim]`` applied as ``x @ W.T``, Xavier uniform) and
    optional biases ``bq, bk, bv, bo`` (zeros); ``num_heads`` heads of
    scaled dot-product attention (``causal``: position ``i`` attends to
    ``j <= i``). ``forward`` is self-attention; :meth:`attend` takes
    queries, keys, values and a mask (bool: may attend; float: added)."""

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, causal: bool = False):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiHeadAttention: num_heads = {num_heads} must divide embed_dim = {embed_dim}")
        self.embed_dim, self.num_heads, self.has_bias, self.causal = int(embed_dim), int(num_heads), bool(bias), bool(causal)
        for n in ("wq", "wk", "wv", "wo"):
            self.param(n, (embed_dim, embed_dim), xavier_uniform())
        if bias:
            for n in ("bq", "bk", "bv", "bo"):
                self.param(n, (embed_dim,), zeros())

    def attend(self, cx: Context, q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        """Attention of ``q [B, Lq, D]`` over ``k``, ``v`` (``[B, Lk, D]``)."""
        d, h = self.embed_dim, self.num_heads
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.ndim != 3 or t.shape[2] != d:
                raise ValueError(f"MultiHeadAttention: {name} must be [batch, seq, {d}], got {list(t.shape)}")

        def bias(n: str) -> Any:
            return cx.param(self, n)._h if self.has_bias else None

        def heads(x: Any, w: str, b: str) -> Any:
            p = Tracer(_g.linear(x._h, cx.param(self, w)._h, bias(b)))
            return p.reshape((x.shape[0], x.shape[1], h, d // h)).transpose((0, 2, 1, 3))

        m = None if mask is None else lift(mask, q, "attention mask")._h
        o = Tracer(_g.attention(heads(q, "wq", "bq")._h, heads(k, "wk", "bk")._h, heads(v, "wv", "bv")._h,
                                self.causal, m, None))
        o = o.transpose((0, 2, 1, 3)).reshape((q.shape[0], q.shape[1], d))
        return Tracer(_g.linear(o._h, cx.param(self, "wo")._h, bias("bo")))

    def forward(self, cx: Context, x: Any) -> Any:
        return self.attend(cx, x, x, x)

    def _extra(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}"


class _Recurrent(Module):
    _gates = 4

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        g, hs = self._gates * self.hidden_size, self.hidden_size
        init = uniform_fan_in(hs)
        self.param("weight_ih", (g, self.input_size), init)
        self.param("weight_hh", (g, hs), init)
        self.param("bias_ih", (g,), init)
        self.param("bias_hh", (g,), init)

    def _weights(self, cx: Context) -> List[Any]:
        return [cx.param(self, n)._h for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]

    def _extra(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"


class LSTM(_Recurrent):
    """``torch.nn.LSTM(input_size, hidden_size, batch_first=True)``, one
    layer (graft's ``module::Lstm``, a ``scan`` with the input projection
    hoisted out of it): ``weight_ih [4H, I]``, ``weight_hh [4H, H]``,
    ``bias_ih``, ``bias_hh`` (``[4H]``), all ``U(±1/sqrt(H))``; gates
    ``i, f, g, o``. ``forward`` returns the outputs ``[B, T, H]`` from zero
    states; :meth:`run` also takes ``(h0, c0)`` and returns ``(out, (h, c))``."""

    _gates = 4

    def run(self, cx: Context, x: Any, state: Any = None) -> Any:
        """``(outputs [B, T, H], (h_T, c_T))`` from ``state = (h0, c0)`` (zeros when ``None``)."""
        h0, c0 = (None, None) if state is None else (lift(state[0], x, "h0")._h, lift(state[1], x, "c0")._h)
        y, h, c = _g.lstm(x._h, self._weights(cx), h0, c0)
        return Tracer(y), (Tracer(h), Tracer(c))

    def forward(self, cx: Context, x: Any) -> Any:
        return self.run(cx, x)[0]


class GRU(_Recurrent):
    """``torch.nn.GRU(input_size, hidden_size, batch_first=True)``, one
    layer (graft's ``module::Gru``): ``weight_ih [3H, I]``, ``weight_hh
    [3H, H]``, ``bias_ih``, ``bias_hh`` (``[3H]``), all ``U(±1/sqrt(H))``;
    gates ``r, z, n``. ``forward`` returns the outputs ``[B, T, H]`` from a
    zero state; :meth:`run` also takes ``h0`` and returns ``(out, h_T)``."""

    _gates = 3

    def run(self, cx: Context, x: Any, h0: Any = None) -> Any:
        """``(outputs [B, T, H], h_T)`` from ``h0`` (zeros when ``None``)."""
        y, h = _g.gru(x._h, self._weights(cx), None if h0 is None else lift(h0, x, "h0")._h)
        return Tracer(y), Tracer(h)

    def forward(self, cx: Context, x: Any) -> Any:
        return self.run(cx, x)[0]
