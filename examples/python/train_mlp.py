"""Train a small MLP classifier on three Gaussian blobs with graft from Python.

    pip install ./python && python examples/python/train_mlp.py

One compiled step (forward, backward and the SGD update) is called per
iteration; the parameters are a dict pytree.
"""

import numpy as np

import graft
import graft.nn as nn
import graft.numpy as gnp


def init(seed):
    rng = np.random.default_rng(seed)
    return {
        "w1": (0.5 * rng.standard_normal((2, 16))).astype(np.float32),
        "b1": np.zeros(16, np.float32),
        "w2": (0.5 * rng.standard_normal((16, 3))).astype(np.float32),
        "b2": np.zeros(3, np.float32),
    }


def forward(p, x):
    return nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def loss(p, x, onehot):
    return -gnp.mean(gnp.sum(nn.log_softmax(forward(p, x), axis=-1) * onehot, axis=-1))


@graft.jit
def step(p, x, onehot):
    l, g = graft.value_and_grad(loss)(p, x, onehot)
    return l, {k: p[k] - 0.5 * g[k] for k in p}


def data(seed, n=100):
    rng = np.random.default_rng(seed)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    x = (rng.standard_normal((3, n, 2)) * 0.7 + centres[:, None]).reshape(-1, 2).astype(np.float32)
    y = np.repeat(np.arange(3), n)
    return x, np.eye(3, dtype=np.float32)[y], y


def main():
    x, onehot, y = data(0)
    p = init(1)
    for i in range(200):
        l, p = step(p, x, onehot)
        if i % 50 == 0:
            print(f"step {i:3d}  loss {float(l):.4f}")
    acc = float(np.mean(np.argmax(graft.jit(forward)(p, x), axis=1) == y))
    print(f"final loss {float(l):.4f}, training accuracy {acc:.3f}")
    return float(l), acc


if __name__ == "__main__":
    main()
