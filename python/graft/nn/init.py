"""Parameter initialisers (``graft::module::Init``): each is a name and its
numbers, drawn in Rust by ``Module.init`` with one Threefry key per
parameter path. Fans follow PyTorch: for a weight ``[out, in, *kernel]``,
``fan_in = in * prod(kernel)`` and ``fan_out = out * prod(kernel)``."""

from __future__ import annotations

import math
from typing import Tuple

__all__ = ["Initializer", "zeros", "ones", "constant", "normal", "uniform", "kaiming_normal", "kaiming_uniform",
           "xavier_normal", "xavier_uniform", "uniform_fan_in"]


class Initializer:
    """An initialiser: its Rust name and numbers."""

    __slots__ = ("kind", "args")

    def __init__(self, kind: str, *args: float):
        self.kind = kind
        self.args: Tuple[float, ...] = tuple(float(a) for a in args)

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.args))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Initializer) and (self.kind, self.args) == (other.kind, other.args)

    def __hash__(self) -> int:
        return hash((self.kind, self.args))


def zeros() -> Initializer:
    """All zeros."""
    return Initializer("zeros")


def ones() -> Initializer:
    """All ones."""
    return Initializer("ones")


def constant(value: float) -> Initializer:
    """Every element ``value``."""
    return Initializer("constant", value)


def normal(mean: float = 0.0, std: float = 1.0) -> Initializer:
    """``mean + std * N(0, 1)``."""
    return Initializer("normal", mean, std)


def uniform(lo: float = 0.0, hi: float = 1.0) -> Initializer:
    """Uniform in ``[lo, hi)``."""
    return Initializer("uniform", lo, hi)


def kaiming_normal(gain: float = math.sqrt(2.0)) -> Initializer:
    """``N(0, (gain / sqrt(fan_in))^2)`` (He; ``gain = sqrt(2)`` for ReLU)."""
    return Initializer("kaiming_normal", gain)


def kaiming_uniform(gain: float = math.sqrt(2.0)) -> Initializer:
    """``U(-b, b)``, ``b = gain * sqrt(3 / fan_in)`` (PyTorch's Linear/Conv
    default is ``gain = 1/sqrt(3)``)."""
    return Initializer("kaiming_uniform", gain)


def xavier_normal(gain: float = 1.0) -> Initializer:
    """``N(0, gain^2 * 2 / (fan_in + fan_out))`` (Glorot)."""
    return Initializer("xavier_normal", gain)


def xavier_uniform(gain: float = 1.0) -> Initializer:
    """``U(-b, b)``, ``b = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot)."""
    return Initializer("xavier_uniform", gain)


def uniform_fan_in(fan_in: int) -> Initializer:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's bias initialiser."""
    b = 1.0 / math.sqrt(max(int(fan_in), 1))
    return Initializer("uniform", -b, b)
