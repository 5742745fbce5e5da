"""``graft.nn``: neural-network functions (``jax.nn``'s names), layers with
named parameters (PyTorch's names and layouts), optimizers
(``graft.nn.optim``, optax's names) and a :class:`Trainer` whose ``step``
runs forward, backward and the optimizer update as one compiled graft
function. Layers, initialisers, optimizers, the trainer and its
checkpoints are graft's Rust training runtime (``graft::module``,
``graft::optim``); this package describes and drives them.

```python
import graft.nn as nn
model = nn.Sequential(nn.Linear(64, 128), nn.relu, nn.Linear(128, 10)).init(seed=0)
tr = nn.Trainer(model, nn.optim.adam(1e-3), loss=lambda out, b: nn.cross_entropy(out, b["y"]))
for x, y in batches:
    loss = tr.step({"x": x, "y": y})
tr.save("checkpoint.safetensors")
```
"""

from __future__ import annotations

from . import init, optim
from ._functions import (elu, gelu, leaky_relu, log_sigmoid, log_softmax, logsumexp, relu, sigmoid, silu, softmax,
                         softplus, swish)
from ._losses import binary_cross_entropy_with_logits, cross_entropy, mse
from ._modules import (GRU, LSTM, AvgPool2d, BatchNorm, BatchNorm1d, BatchNorm2d, Context, Conv1d, Conv2d, Dropout,
                       Embedding, Flatten, GELU, Lambda, LayerNorm, Linear, MaxPool2d, Module, MultiHeadAttention, ReLU,
                       Sequential, Sigmoid, SiLU, Softplus, Tanh)
from ._trainer import Trainer, flatten_params, unflatten_params

__all__ = ["relu", "sigmoid", "silu", "swish", "gelu", "softplus", "log_sigmoid", "leaky_relu", "elu",
           "softmax", "log_softmax", "logsumexp",
           "mse", "cross_entropy", "binary_cross_entropy_with_logits",
           "Module", "Context", "Linear", "Conv1d", "Conv2d", "LayerNorm", "BatchNorm", "BatchNorm1d", "BatchNorm2d",
           "MultiHeadAttention", "LSTM", "GRU", "Embedding", "Dropout", "Sequential", "Flatten",
           "MaxPool2d", "AvgPool2d", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Softplus", "Lambda",
           "Trainer", "flatten_params", "unflatten_params", "init", "optim"]
