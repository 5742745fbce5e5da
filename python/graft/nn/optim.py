"""``graft.nn.optim``: optimizers and learning-rate schedules with optax's
names and update rules. Each is a description handed to
``graft::optim::Optimizer`` (the one implementation, shared with Rust and
``graft train``), whose update is traced into the training step; see
:class:`graft.nn.Trainer`.

A learning rate is a number or a schedule; ``clip`` rescales the gradients
to that global norm first (``optax.clip_by_global_norm``); ``mask`` (a
function of the dotted parameter name, or a collection of names) selects
the parameters that get decoupled weight decay (all when ``None``).
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple, Union

from .. import _graft as _g

__all__ = ["Schedule", "Optimizer", "constant_schedule", "piecewise_constant_schedule", "cosine_decay_schedule",
           "warmup_cosine_decay_schedule", "sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad", "lion"]


class Schedule:
    """A learning rate as a function of the step count (evaluated inside
    the compiled step, so changing steps never recompiles)."""

    __slots__ = ("kind", "args", "boundaries")

    def __init__(self, kind: str, args: Sequence[float], boundaries: Sequence[Tuple[int, float]] = ()):
        self.kind = kind
        self.args = [float(a) for a in args]
        self.boundaries = [(int(b), float(s)) for b, s in boundaries]

    def __repr__(self) -> str:
        return f"Schedule({self.kind}, {self.args}{', ' + repr(self.boundaries) if self.boundaries else ''})"


def constant_schedule(value: float) -> Schedule:
    """The same rate at every step."""
    return Schedule("constant", [value])


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: Optional[Dict[int, float]] = None) -> Schedule:
    """``init_value`` multiplied by each scale from its step on (optax's)."""
    items = sorted((boundaries_and_scales or {}).items())
    if any(b < 0 for b, _ in items):
        raise ValueError("schedule boundaries are step counts (>= 0)")
    return Schedule("piecewise", [init_value], items)


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """``init ((1 - alpha) (1 + cos(pi min(t, steps) / steps)) / 2 + alpha)``."""
    return Schedule("cosine", [init_value, decay_steps, alpha])


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int, decay_steps: int,
                                 end_value: float = 0.0) -> Schedule:
    """Linear warm-up to ``peak_value``, then cosine decay to ``end_value``
    at step ``decay_steps`` (warm-up included), as optax's."""
    return Schedule("warmup_cosine", [init_value, peak_value, warmup_steps, decay_steps, end_value])


LR = Union[float, Schedule]
Mask = Union[None, Callable[[str], bool], Collection[str]]


class Optimizer:
    """An optimizer description: an update rule with its hyperparameters,
    a schedule, clipping and weight decay. Build one with :func:`adam` and
    friends; :class:`graft.nn.Trainer` compiles it into the step."""

    def __init__(self, rule: str, lr: LR, hyper: Sequence[float] = (), clip: Optional[float] = None,
                 weight_decay: float = 0.0, mask: Mask = None):
        self.rule = rule
        self.schedule = lr if isinstance(lr, Schedule) else constant_schedule(float(lr))
        self.hyper = [float(h) for h in hyper]
        self.clip = None if clip is None else float(clip)
        self.weight_decay = float(weight_decay)
        self.mask = mask
        self._native(None)  # reports a bad description now

    def _native(self, names: Optional[List[str]]) -> Any:
        """The ``graft::optim::Optimizer`` for parameters ``names``."""
        decay = None
        if self.mask is not None and names is not None:
            m = self.mask
            decay = [n for n in names if (m(n) if callable(m) else n in m)]
        s = self.schedule
        return _g.Optimizer(self.rule, self.hyper, s.kind, s.args, s.boundaries, self.clip, self.weight_decay, decay)

    @property
    def n_state(self) -> int:
        """Optimizer-state arrays per parameter."""
        return self._native(None).n_state

    def __repr__(self) -> str:
        return (f"Optimizer({self.rule}, lr={self.schedule!r}, hyper={self.hyper}, clip={self.clip}, "
                f"weight_decay={self.weight_decay})")


def sgd(learning_rate: LR, momentum: Optional[float] = None, nesterov: bool = False, *, clip: Optional[float] = None) -> Optimizer:
    """Gradient descent (``optax.sgd``): with ``momentum``, ``m = g + beta m``,
    ``p -= lr m`` (``nesterov``: ``p -= lr (g + beta m)``)."""
    if momentum is None:
        if nesterov:
            raise ValueError("nesterov needs a momentum")
        return Optimizer("sgd", learning_rate, clip=clip)
    return Optimizer("nesterov" if nesterov else "momentum", learning_rate, [momentum], clip=clip)


def momentum(learning_rate: LR, beta: float = 0.9, nesterov: bool = False, *, clip: Optional[float] = None) -> Optimizer:
    """Heavy-ball momentum: ``sgd(learning_rate, momentum=beta, nesterov=nesterov)``."""
    return sgd(learning_rate, beta, nesterov, clip=clip)


def adam(learning_rate: LR, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, *, clip: Optional[float] = None) -> Optimizer:
    """Adam with bias correction (``optax.adam``)."""
    return Optimizer("adam", learning_rate, [b1, b2, eps], clip=clip)


def adamw(learning_rate: LR, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4,
          mask: Mask = None, *, clip: Optional[float] = None) -> Optimizer:
    """Adam with decoupled weight decay ``p -= lr wd p`` on the parameters
    ``mask`` selects (``optax.adamw``; its default decay is 1e-4)."""
    return Optimizer("adam", learning_rate, [b1, b2, eps], clip=clip, weight_decay=weight_decay, mask=mask)


def rmsprop(learning_rate: LR, decay: float = 0.9, eps: float = 1e-8, *, clip: Optional[float] = None) -> Optimizer:
    """RMSprop in optax's form: ``v = decay v + (1 - decay) g^2``,
    ``p -= lr g / sqrt(v + eps)``."""
    return Optimizer("rmsprop", learning_rate, [decay, eps], clip=clip)


def adagrad(learning_rate: LR, initial_accumulator_value: float = 0.1, eps: float = 1e-7, *,
            clip: Optional[float] = None) -> Optimizer:
    """Adagrad (``optax.adagrad``): ``s += g^2``, ``p -= lr g / sqrt(s + eps)``."""
    return Optimizer("adagrad", learning_rate, [initial_accumulator_value, eps], clip=clip)


def lion(learning_rate: LR, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 1e-3, mask: Mask = None, *,
         clip: Optional[float] = None) -> Optimizer:
    """Lion (``optax.lion``): ``p -= lr (sign((1 - b1) g + b1 m) + wd p)``,
    ``m = (1 - b2) g + b2 m``."""
    return Optimizer("lion", learning_rate, [b1, b2], clip=clip, weight_decay=weight_decay, mask=mask)
