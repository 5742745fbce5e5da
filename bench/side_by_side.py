#!/usr/bin/env python3
"""graft and JAX side by side on the same workloads, in one run.

Usage:
    cargo build --release -p graft-cli
    pip install jax numpy
    python3 bench/side_by_side.py [--threads 1|all] [--runs 20] [--warmup 3]
                                  [--graft PATH] [--only NAME ...] [--check]

graft side: `graft bench bench/programs/<name>.graft --json` (compile excluded
from the run times; every run's outputs are recycled into the plan's buffer
pool, as in a training loop). JAX side: the same computation under `jax.jit`,
lowered and compiled before timing (compile excluded), async dispatch off,
`block_until_ready` inside the timed region. Both sides get the same inputs:
this script generates them with NumPy and writes them as .npy files. Min and
median are over the same number of runs after the same number of warm-up runs.

Each side runs as a subprocess so that the thread settings apply:
`--threads 1` runs both under `taskset -c 0`, graft with RAYON_NUM_THREADS=1
and JAX with XLA_FLAGS="--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1"; `--threads all` leaves both unrestricted.

`--check` also runs each graft program once with `graft run --out` and
compares its results with JAX's (relative tolerance 1e-3 on f32, 1e-9 on f64,
1e-4 where JAX runs an f64 workload in f32), to show the two columns compute
the same thing.

Besides the kernel workloads, GradBench evals (lse, llsq, ode, kmeans, gmm,
det, lstm; names `lse_gradient_10000`, ...) run at sizes from their default
workloads: graft runs the eval's own program in gradbench/, JAX a jit of the
same function written in this script, in the formulation of GradBench's JAX
tool where it has one (like that tool, it runs `ode` in f32; `det` and
`lstm`, which that tool lacks, are written here to match gradbench/*.graft).
The real GradBench drivers time through the protocol instead
(docs/gradbench.md).

Not part of the test suite; no timing is asserted anywhere.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "bench" / "programs"
DEFAULT_GRAFT = ROOT / "target" / "release" / "graft"


# ---------------------------------------------------------------------------
# Workloads: name, description, program, inputs (name -> generator), JAX
# function (defined in jax_functions below under the same name).
# ---------------------------------------------------------------------------


def _normal(shape, dtype, scale=1.0):
    return lambda rng: (rng.standard_normal(shape) * scale).astype(dtype)


def _zeros(shape, dtype):
    import numpy as np

    return lambda rng: np.zeros(shape, dtype=dtype)


def _labels(n, classes):
    import numpy as np

    return lambda rng: (np.arange(n) % classes).astype(np.int32)


def _scalar(value, dtype):
    import numpy as np

    return lambda rng: np.array(value, dtype=dtype)


def _ones(shape, dtype):
    import numpy as np

    return lambda rng: np.ones(shape, dtype=dtype)


F32, F64 = "float32", "float64"

WORKLOADS = [
    {
        "name": "chain",
        "what": "elementwise chain, 10 ops, 1M f32",
        "program": "chain.graft",
        "inputs": [("x", _normal((1 << 20,), F32)), ("y", _normal((1 << 20,), F32))],
    },
    {
        "name": "softmax",
        "what": "softmax [4096, 1024] f32, last axis",
        "program": "softmax.graft",
        "inputs": [("x", _normal((4096, 1024), F32))],
    },
    {
        "name": "layer_norm",
        "what": "layer norm [4096, 1024] f32",
        "program": "layer_norm.graft",
        "inputs": [
            ("x", _normal((4096, 1024), F32)),
            ("gamma", _normal((1024,), F32)),
            ("beta", _normal((1024,), F32)),
        ],
    },
    {
        "name": "logsumexp",
        "what": "logsumexp of rows, [4096, 1024] f32",
        "program": "logsumexp.graft",
        "inputs": [("x", _normal((4096, 1024), F32))],
    },
    {
        "name": "hvp",
        "what": "HVP (jvp of grad), tanh net 256-256-1, batch 64, f64",
        "program": "hvp.graft",
        "inputs": [
            ("w1", _normal((256, 256), F64, 0.1)),
            ("w2", _normal((256, 1), F64, 0.1)),
            ("v1", _normal((256, 256), F64)),
            ("v2", _normal((256, 1), F64)),
            ("x", _normal((64, 256), F64)),
        ],
    },
    {
        "name": "per_example",
        "what": "per-example grads, vmap(grad), MLP 784-128-10, batch 64, f32",
        "program": "per_example.graft",
        "inputs": [
            ("w1", _normal((784, 128), F32, 0.05)),
            ("w2", _normal((128, 10), F32, 0.05)),
            ("xs", _normal((64, 784), F32)),
            ("ys", _labels(64, 10)),
        ],
    },
    {
        "name": "mlp_value_and_grad",
        "what": "value_and_grad, MLP 784-512-512-10, batch 128, f32",
        "program": "mlp_value_and_grad.graft",
        "inputs": [
            ("w1", _normal((784, 512), F32, 0.05)),
            ("b1", _zeros((512,), F32)),
            ("w2", _normal((512, 512), F32, 0.05)),
            ("b2", _zeros((512,), F32)),
            ("w3", _normal((512, 10), F32, 0.05)),
            ("b3", _zeros((10,), F32)),
            ("x", _normal((128, 784), F32)),
            ("y", _labels(128, 10)),
        ],
    },
    {
        "name": "jacrev",
        "what": "jacrev of a 100x100 tanh layer, f64",
        "program": "jacrev.graft",
        "inputs": [("a", _normal((100, 100), F64)), ("v", _normal((100,), F64))],
    },
    {
        "name": "matmul",
        "what": "matmul 1024x1024x1024 f32",
        "program": "matmul.graft",
        "inputs": [("a", _normal((1024, 1024), F32)), ("b", _normal((1024, 1024), F32))],
    },
    {
        "name": "conv2d",
        "what": "conv2d b32, 32->64 ch, 28x28, 3x3, pad 1, f32",
        "program": "conv2d.graft",
        "inputs": [("x", _normal((32, 32, 28, 28), F32)), ("w", _normal((64, 32, 3, 3), F32, 0.1))],
    },
    {
        "name": "adam_step",
        "what": "MLP 784-512-10 training step with Adam, batch 128, f32",
        "program": "adam_step.graft",
        "inputs": [
            ("w1", _normal((784, 512), F32, 0.05)),
            ("b1", _zeros((512,), F32)),
            ("w2", _normal((512, 10), F32, 0.05)),
            ("b2", _zeros((10,), F32)),
            ("mw1", _zeros((784, 512), F32)),
            ("mb1", _zeros((512,), F32)),
            ("mw2", _zeros((512, 10), F32)),
            ("mb2", _zeros((10,), F32)),
            ("vw1", _zeros((784, 512), F32)),
            ("vb1", _zeros((512,), F32)),
            ("vw2", _zeros((512, 10), F32)),
            ("vb2", _zeros((10,), F32)),
            ("t", _scalar(1.0, F32)),
            ("x", _normal((128, 784), F32)),
            ("y", _labels(128, 10)),
        ],
    },
    {
        "name": "lstm",
        "what": "LSTM scan gradient, hidden 128, 50 steps, batch 16, f32",
        "program": "lstm.graft",
        "inputs": [
            ("wx", _normal((4, 128, 128), F32, 0.1)),
            ("wh", _normal((4, 128, 128), F32, 0.1)),
            ("b", _zeros((4, 128), F32)),
            ("h0", _zeros((16, 128), F32)),
            ("xs", _normal((50, 16, 128), F32)),
        ],
    },
    {
        "name": "cnn_step",
        "what": "CNN SGD step, conv 1->16, conv 16->32 stride 2, average pool, dense 32->10, batch 32, 28x28, f32",
        "program": "cnn_step.graft",
        "inputs": [
            ("w1", _normal((16, 1, 3, 3), F32, 0.3)),
            ("b1", _zeros((16,), F32)),
            ("w2", _normal((32, 16, 3, 3), F32, 0.08)),
            ("b2", _zeros((32,), F32)),
            ("w3", _normal((32, 10), F32, 0.2)),
            ("b3", _zeros((10,), F32)),
            ("x", _normal((32, 1, 28, 28), F32)),
            ("y", _labels(32, 10)),
        ],
    },
    {
        "name": "transformer_block",
        "what": "pre-LN transformer block value_and_grad, [8, 128, 256], 4 heads, causal, MLP 1024 gelu, f32",
        "program": "transformer_block.graft",
        "inputs": [
            ("ln1_g", _ones((256,), F32)),
            ("ln1_b", _zeros((256,), F32)),
            ("wq", _normal((256, 256), F32, 0.0625)),
            ("wk", _normal((256, 256), F32, 0.0625)),
            ("wv", _normal((256, 256), F32, 0.0625)),
            ("wo", _normal((256, 256), F32, 0.0625)),
            ("ln2_g", _ones((256,), F32)),
            ("ln2_b", _zeros((256,), F32)),
            ("w1", _normal((256, 1024), F32, 0.0625)),
            ("b1", _zeros((1024,), F32)),
            ("w2", _normal((1024, 256), F32, 0.03125)),
            ("b2", _zeros((256,), F32)),
            ("x", _normal((8, 128, 256), F32)),
        ],
    },
]


# GradBench workloads (docs/gradbench.md has the evals and their default
# sizes): graft runs the eval's program in gradbench/ at the given entry, JAX
# a plain jit of the same function written here. As GradBench's own JAX
# tool does, `ode` runs in f32 on the JAX side (`jax_f32`), everything else
# in f64 on both sides. `grid`/`steps` carry the structural sizes (`n`,
# `s`) as array lengths; their values are ignored. Inputs use graft's
# layouts (gmm's q and l apart, det's A as [ell, ell], lstm's parameters
# grouped by layer; see each program's header).


def _uniform(shape, dtype=None):
    return lambda rng: rng.random(shape)


def _uniform32(shape):
    return lambda rng: rng.random(shape).astype("float32")


def _kmeans_points(n, d):
    return lambda rng: rng.random((n, d))


def _kmeans_centroids(n, k, d):
    # GradBench: the centroids are the last k points (the generator is
    # reseeded per workload, so this draws the same points again).
    return lambda rng: _reseeded(rng).random((n, d))[n - k :]


def _reseeded(rng):
    import numpy as np

    return np.random.default_rng(rng.bit_generator.seed_seq)


def _gmm(d, k, n):
    # As GradBench's generator draws them: alpha, q, l and x standard
    # normal, mu uniform in [0, 1); gamma = 1, m = 0.
    return [
        ("alpha", _normal((k,), F64)),
        ("mu", _uniform((k, d))),
        ("q", _normal((k, d), F64)),
        ("l", _normal((k, d * (d - 1) // 2), F64)),
        ("x", _normal((n, d), F64)),
        ("gamma", _scalar(1.0, F64)),
        ("m", _scalar(0.0, F64)),
    ]


def _char_bits(c, b):
    # lstm's sequence: c characters as rows of their b bits (GradBench reads
    # an English text; random printable ASCII here).
    import numpy as np

    def gen(rng):
        codes = rng.integers(32, 127, c)
        return ((codes[:, None] >> np.arange(b)) & 1).astype(np.float64)

    return gen


def _lstm(l, c, b=7):
    # The layout of gradbench/lstm.graft: main_params [l, 2, 4, b], state
    # [l, 2, b] (GradBench's rows regrouped by layer).
    return [
        ("main_params", _normal((l, 2, 4, b), F64)),
        ("extra_params", _normal((3, b), F64)),
        ("state", _normal((l, 2, b), F64)),
        ("sequence", _char_bits(c, b)),
    ]


def _gradbench(name, what, entry, inputs, jax_f32=False, path=None):
    return {
        "name": name,
        "what": what,
        "path": path or ROOT / "gradbench" / f"{name.split('_')[0]}.graft",
        "entry": entry,
        "inputs": inputs,
        "jax_f32": jax_f32,
    }


ODE_F32 = ROOT / "bench" / "programs" / "ode_f32.graft"

GRADBENCH = [
    _gradbench("lse_gradient_10000", "GradBench lse gradient, n = 10000", "gradient", [("x", _uniform((10000,)))]),
    _gradbench("lse_gradient_1280000", "GradBench lse gradient, n = 1280000", "gradient", [("x", _uniform((1280000,)))]),
    _gradbench(
        "llsq_gradient_32", "GradBench llsq gradient, m = 128, n = 32", "gradient",
        [("x", _uniform((128,))), ("grid", _zeros((32,), F64))],
    ),
    _gradbench(
        "llsq_gradient_1024", "GradBench llsq gradient, m = 128, n = 1024", "gradient",
        [("x", _uniform((128,))), ("grid", _zeros((1024,), F64))],
    ),
    _gradbench(
        "llsq_gradient_16392", "GradBench llsq gradient, m = 128, n = 16392", "gradient",
        [("x", _uniform((128,))), ("grid", _zeros((16392,), F64))],
    ),
    _gradbench(
        "ode_primal_1000_10", "GradBench ode primal, n = 1000, s = 10 (JAX in f32)", "primal",
        [("x", _uniform((1000,))), ("steps", _zeros((10,), F64))], jax_f32=True,
    ),
    _gradbench(
        "ode_gradient_1000_10", "GradBench ode gradient, n = 1000, s = 10 (JAX in f32)", "gradient",
        [("x", _uniform((1000,))), ("steps", _zeros((10,), F64))], jax_f32=True,
    ),
    _gradbench(
        "ode_primal_10000_100", "GradBench ode primal, n = 10000, s = 100 (JAX in f32)", "primal",
        [("x", _uniform((10000,))), ("steps", _zeros((100,), F64))], jax_f32=True,
    ),
    _gradbench(
        "ode_gradient_10000_100", "GradBench ode gradient, n = 10000, s = 100 (JAX in f32)", "gradient",
        [("x", _uniform((10000,))), ("steps", _zeros((100,), F64))], jax_f32=True,
    ),
    # The same ode rows with graft in f32 too (bench/programs/ode_f32.graft):
    # the engines compared on the same arithmetic.
    _gradbench(
        "ode_primal_1000_10_f32", "ode primal, n = 1000, s = 10, both in f32", "primal",
        [("x", _uniform32((1000,))), ("steps", _zeros((10,), F32))], jax_f32=True, path=ODE_F32,
    ),
    _gradbench(
        "ode_gradient_1000_10_f32", "ode gradient, n = 1000, s = 10, both in f32", "gradient",
        [("x", _uniform32((1000,))), ("steps", _zeros((10,), F32))], jax_f32=True, path=ODE_F32,
    ),
    _gradbench(
        "ode_primal_10000_100_f32", "ode primal, n = 10000, s = 100, both in f32", "primal",
        [("x", _uniform32((10000,))), ("steps", _zeros((100,), F32))], jax_f32=True, path=ODE_F32,
    ),
    _gradbench(
        "ode_gradient_10000_100_f32", "ode gradient, n = 10000, s = 100, both in f32", "gradient",
        [("x", _uniform32((10000,))), ("steps", _zeros((100,), F32))], jax_f32=True, path=ODE_F32,
    ),
    _gradbench(
        "kmeans_cost_10_1000_8", "GradBench kmeans cost, k = 10, n = 1000, d = 8", "cost",
        [("points", _kmeans_points(1000, 8)), ("centroids", _kmeans_centroids(1000, 10, 8))],
    ),
    _gradbench(
        "kmeans_dir_10_1000_8", "GradBench kmeans dir, k = 10, n = 1000, d = 8", "dir",
        [("points", _kmeans_points(1000, 8)), ("centroids", _kmeans_centroids(1000, 10, 8))],
    ),
    _gradbench(
        "kmeans_dir_100_10000_16", "GradBench kmeans dir, k = 100, n = 10000, d = 16", "dir",
        [("points", _kmeans_points(10000, 16)), ("centroids", _kmeans_centroids(10000, 100, 16))],
    ),
    _gradbench("gmm_jacobian_2_5_1000", "GradBench gmm jacobian, d = 2, k = 5, n = 1000", "jacobian", _gmm(2, 5, 1000)),
    _gradbench(
        "gmm_jacobian_64_100_1000", "GradBench gmm jacobian, d = 64, k = 100, n = 1000", "jacobian",
        _gmm(64, 100, 1000),
    ),
    _gradbench("det_gradient_7", "GradBench det gradient, ell = 7", "gradient", [("a", _uniform((7, 7)))]),
    _gradbench("det_gradient_9", "GradBench det gradient, ell = 9", "gradient", [("a", _uniform((9, 9)))]),
    _gradbench("lstm_jacobian_2_1024", "GradBench lstm jacobian, l = 2, c = 1024, b = 7", "jacobian", _lstm(2, 1024)),
    _gradbench("lstm_jacobian_6_8192", "GradBench lstm jacobian, l = 6, c = 8192, b = 7", "jacobian", _lstm(6, 8192)),
]
WORKLOADS += GRADBENCH

# Workloads the graft language cannot express yet: name -> reason. The JAX
# side still runs; the graft column says why it is empty.
NOT_IN_GRAFT = {}


def jax_functions(jax, jnp):
    """The JAX version of every workload, taking the inputs in order."""
    import numpy as np

    lax = jax.lax

    def chain(x, y):
        t = x * y + x
        t = jnp.tanh(t) * 0.5 - y
        t = jnp.abs(-jnp.maximum(t, x)) + y
        return t * x

    def layer_norm(x, gamma, beta):
        m = jnp.mean(x, axis=1, keepdims=True)
        v = jnp.mean((x - m) ** 2, axis=1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * gamma + beta

    def net(w1, w2, x):
        o = jnp.tanh(jnp.tanh(x @ w1) @ w2)
        return jnp.sum(o * o)

    def hvp(w1, w2, v1, v2, x):
        g = jax.grad(net, argnums=(0, 1))
        return jax.jvp(lambda a, c: g(a, c, x), (w1, w2), (v1, v2))[1]

    def example_loss(w1, w2, x, y):
        return -jax.nn.log_softmax(jax.nn.relu(x @ w1) @ w2)[y]

    per_example = jax.vmap(jax.grad(example_loss, argnums=(0, 1)), in_axes=(None, None, 0, 0))

    def cross_entropy(logits, y):
        logp = jax.nn.log_softmax(logits, axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def mlp_loss(w1, b1, w2, b2, w3, b3, x, y):
        a1 = jax.nn.relu(x @ w1 + b1)
        a2 = jax.nn.relu(a1 @ w2 + b2)
        return cross_entropy(a2 @ w3 + b3, y)

    mlp_value_and_grad = jax.value_and_grad(mlp_loss, argnums=(0, 1, 2, 3, 4, 5))

    def adam(p, g, m, v, t):
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * g * g
        mhat = m2 / (1.0 - 0.9**t)
        vhat = v2 / (1.0 - 0.999**t)
        return (p - 0.001 * mhat / (jnp.sqrt(vhat) + 1e-8), m2, v2)

    def adam_loss(w1, b1, w2, b2, x, y):
        return cross_entropy(jax.nn.relu(x @ w1 + b1) @ w2 + b2, y)

    def adam_step(w1, b1, w2, b2, mw1, mb1, mw2, mb2, vw1, vb1, vw2, vb2, t, x, y):
        g1, gb1, g2, gb2 = jax.grad(adam_loss, argnums=(0, 1, 2, 3))(w1, b1, w2, b2, x, y)
        return (
            adam(w1, g1, mw1, vw1, t),
            adam(b1, gb1, mb1, vb1, t),
            adam(w2, g2, mw2, vw2, t),
            adam(b2, gb2, mb2, vb2, t),
        )

    def lstm_loss(wx, wh, b, h0, xs):
        def cell(carry, x):
            hp, cp = carry
            z = jnp.einsum("bi,gij->gbj", x, wx) + jnp.einsum("bi,gij->gbj", hp, wh) + b[:, None, :]
            ig = jax.nn.sigmoid(z[0])
            fg = jax.nn.sigmoid(z[1])
            cand = jnp.tanh(z[2])
            og = jax.nn.sigmoid(z[3])
            cn = fg * cp + ig * cand
            hn = og * jnp.tanh(cn)
            return (hn, cn), hn

        _, hs = lax.scan(cell, (h0, h0), xs)
        return jnp.mean(hs**2)

    def conv_relu(x, w, b, stride):
        y = lax.conv_general_dilated(x, w, (stride, stride), ((1, 1), (1, 1)))
        return jax.nn.relu(y + b[None, :, None, None])

    def cnn_loss(w1, b1, w2, b2, w3, b3, x, y):
        a2 = conv_relu(conv_relu(x, w1, b1, 1), w2, b2, 2)
        return cross_entropy(jnp.mean(a2, axis=(2, 3)) @ w3 + b3, y)

    def cnn_step(w1, b1, w2, b2, w3, b3, x, y):
        params = (w1, b1, w2, b2, w3, b3)
        loss, grads = jax.value_and_grad(cnn_loss, argnums=(0, 1, 2, 3, 4, 5))(*params, x, y)
        return tuple(p - 0.01 * g for p, g in zip(params, grads)) + (loss,)

    def layer_norm_last(x, gamma, beta):
        m = jnp.mean(x, axis=-1, keepdims=True)
        v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * gamma + beta

    def attention(h, wq, wk, wv, wo):
        b, t, d = h.shape
        nh, dh = 4, d // 4
        q = (h @ wq).reshape(b, t, nh, dh)
        k = (h @ wk).reshape(b, t, nh, dh)
        v = (h @ wv).reshape(b, t, nh, dh)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / jnp.sqrt(jnp.float32(dh))
        causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
        p = jax.nn.softmax(jnp.where(causal, s, -1e9), axis=3)
        return jnp.einsum("bhqk,bkhe->bqhe", p, v).reshape(b, t, d) @ wo

    def block_loss(ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, b1, w2, b2, x):
        h = x + attention(layer_norm_last(x, ln1_g, ln1_b), wq, wk, wv, wo)
        u = jax.nn.gelu(layer_norm_last(h, ln2_g, ln2_b) @ w1 + b1, approximate=True)
        out = h + u @ w2 + b2
        return jnp.mean(out * out)

    transformer_block = jax.value_and_grad(block_loss, argnums=tuple(range(12)))

    def lse(x):
        m = jnp.max(x)
        return m + jnp.log(jnp.sum(jnp.exp(x - m)))

    # llsq and kmeans in the formulation GradBench's JAX tool uses (powers
    # of t_i by a cumulative product per point; distances through a matrix
    # product), so that the JAX column is what GradBench measures.
    def llsq(x, grid):
        n, m = grid.shape[0], x.shape[0]

        def residual(i):
            ti = -1.0 + 2.0 * i / (n - 1.0)
            powers = jnp.cumprod(jnp.full(m, ti, x.dtype).at[0].set(1.0))
            return (jnp.sign(ti) - jnp.sum(x * powers)) ** 2

        return jnp.sum(jax.vmap(residual)(jnp.arange(n, dtype=x.dtype))) / 2.0

    def ode_primal(x, steps):
        s = steps.shape[0]
        h = 2.0 / s

        def rhs(y):
            return x * jnp.concatenate([jnp.ones((1,), x.dtype), y[:-1]])

        def step(_, y):
            k1 = rhs(y)
            k2 = rhs(y + 0.5 * h * k1)
            k3 = rhs(y + 0.5 * h * k2)
            k4 = rhs(y + h * k3)
            return y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

        return lax.fori_loop(0, s, step, jnp.zeros_like(x))

    def kmeans_cost(centroids, points):
        pp = jnp.sum(points**2, axis=1)[:, None]
        cc = jnp.sum(centroids**2, axis=1)[None, :]
        d2 = pp + cc - 2.0 * (points @ centroids.T)
        return jnp.sum(jnp.min(d2, axis=1))

    def kmeans_dir(points, centroids):
        g = jax.grad(kmeans_cost)
        j, h = jax.jvp(lambda c: g(c, points), (centroids,), (jnp.ones_like(centroids),))
        return j / h

    # gmm as GradBench's JAX tool writes it (Q's strict lower part scattered
    # column by column from l, Q (x_i - mu_k) as exp(q) * xc + L xc,
    # multigammaln for the Wishart normaliser), in graft's argument order.
    def gmm_objective(alpha, mu, q, l, x, gamma, m):
        logsumexp = jax.scipy.special.logsumexp
        n, d = x.shape
        k = alpha.shape[0]
        qdiags = jnp.exp(q)
        sum_qs = jnp.sum(q, axis=1)
        rows, cols = np.tril_indices(d, -1)
        order = np.argsort(cols * d + rows)
        ls = jax.vmap(lambda lk: jnp.zeros((d, d), l.dtype).at[rows[order], cols[order]].set(lk))(l)
        xc = x[:, None, :] - mu[None, ...]
        lxc = qdiags * xc + jnp.einsum("ijk,mik->mij", ls, xc)
        inner = alpha + sum_qs - 0.5 * jnp.sum(lxc**2, axis=2)
        slse = jnp.sum(logsumexp(inner, axis=1))
        const = -n * d * 0.5 * np.log(2 * np.pi)
        npr = d + m + 1
        out = jnp.sum(0.5 * gamma * gamma * (jnp.sum(qdiags**2, axis=1) + jnp.sum(l**2, axis=1)) - m * sum_qs)
        c = npr * d * jnp.log(gamma / np.sqrt(2.0))
        prior = -out + k * (c - jax.scipy.special.multigammaln(0.5 * npr, d))
        return const + slse - n * logsumexp(alpha) + prior

    # det: the expansion by minors multiplied out, sum over all ell!
    # permutations of sign * prod_i A[i, pi(i)] (the same terms
    # gradbench/det.graft forms), from a table of the permutations built
    # with NumPy while tracing.
    def det_primal(a):
        import itertools

        ell = a.shape[0]
        perms = np.array(list(itertools.permutations(range(ell))), dtype=np.int32)
        inversions = sum((perms[:, i] > perms[:, j]).astype(np.int64) for i in range(ell) for j in range(i + 1, ell))
        signs = np.where(inversions % 2 == 0, 1.0, -1.0)
        return jnp.sum(jnp.asarray(signs, a.dtype) * jnp.prod(a[np.arange(ell), perms], axis=1))

    # lstm: ADBench's diagonal LSTM, a scan over the time steps with the
    # layers unrolled inside (gradbench/lstm.graft's layout: main_params
    # [l, 2 (weight, bias), 4 (forget, ingate, outgate, change), b]).
    def lstm_objective(main_params, extra_params, state, sequence):
        nl = main_params.shape[0]
        c, b = sequence.shape

        def step(carry, x):
            h, cell = carry
            inp = x * extra_params[0]
            hs, cs = [], []
            for i in range(nl):
                w, bias = main_params[i, 0], main_params[i, 1]
                forget = jax.nn.sigmoid(inp * w[0] + bias[0])
                ingate = jax.nn.sigmoid(h[i] * w[1] + bias[1])
                outgate = jax.nn.sigmoid(inp * w[2] + bias[2])
                change = jnp.tanh(h[i] * w[3] + bias[3])
                ci = cell[i] * forget + ingate * change
                inp = outgate * jnp.tanh(ci)
                hs.append(inp)
                cs.append(ci)
            return (jnp.stack(hs), jnp.stack(cs)), inp

        _, last = lax.scan(step, (state[:, 0], state[:, 1]), sequence[:-1])
        pred = last * extra_params[1] + extra_params[2]
        lse = jnp.log(jnp.sum(jnp.exp(pred), axis=1, keepdims=True) + 2.0)
        return -jnp.sum(sequence[1:] * (pred - lse)) / ((c - 1) * b)

    def lstm_jacobian(main_params, extra_params, state, sequence):
        gm, ge = jax.grad(lstm_objective, argnums=(0, 1))(main_params, extra_params, state, sequence)
        return jnp.concatenate([gm.ravel(), ge.ravel()])

    gradbench = {}
    for w in GRADBENCH:
        kind = w["name"].split("_")[0] + "_" + w["entry"]
        gradbench[w["name"]] = {
            "lse_gradient": jax.grad(lse),
            "llsq_gradient": jax.grad(llsq),
            "ode_primal": ode_primal,
            "ode_gradient": jax.grad(lambda x, steps: ode_primal(x, steps)[-1]),
            "kmeans_cost": lambda points, centroids: kmeans_cost(centroids, points),
            "kmeans_dir": kmeans_dir,
            "gmm_jacobian": jax.grad(gmm_objective, argnums=(0, 1, 2, 3)),
            "det_gradient": lambda a: jax.grad(det_primal)(a).ravel(),
            "lstm_jacobian": lstm_jacobian,
        }[kind]

    return gradbench | {
        "chain": chain,
        "softmax": lambda x: jax.nn.softmax(x, axis=1),
        "layer_norm": layer_norm,
        "logsumexp": lambda x: jax.nn.logsumexp(x, axis=1),
        "hvp": hvp,
        "per_example": per_example,
        "mlp_value_and_grad": mlp_value_and_grad,
        "jacrev": jax.jacrev(lambda a, v: jnp.tanh(a @ v), argnums=1),
        "matmul": lambda a, b: a @ b,
        "conv2d": lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1))),
        "adam_step": adam_step,
        "lstm": jax.grad(lstm_loss, argnums=(0, 1, 2)),
        "cnn_step": cnn_step,
        "transformer_block": transformer_block,
    }


# ---------------------------------------------------------------------------
# The JAX worker (this script run with --jax-worker in a subprocess).
# ---------------------------------------------------------------------------


def jax_worker(args):
    import time

    import numpy as np

    import jax
    import jax.numpy as jnp

    try:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    except Exception:  # older or newer JAX without the flag: block_until_ready still waits
        pass
    jax.config.update("jax_enable_x64", True)
    w = next(w for w in WORKLOADS if w["name"] == args.jax_worker)
    data = Path(args.data)
    arrays = [np.load(data / f"{name}.npy") for name, _ in w["inputs"]]
    if w.get("jax_f32"):
        arrays = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]
    arrays = [jnp.asarray(a) for a in arrays]
    fn = jax_functions(jax, jnp)[w["name"]]
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*arrays).compile()
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        jax.block_until_ready(compiled(*arrays))
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        out = compiled(*arrays)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t)
    if args.save_outputs:
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(compiled(*arrays))]
        np.savez(args.save_outputs, *leaves)
    times.sort()
    print(
        json.dumps(
            {
                "compile_ms": compile_s * 1e3,
                "min_ms": times[0] * 1e3,
                "median_ms": median(times) * 1e3,
                "max_ms": times[-1] * 1e3,
                "runs": len(times),
            }
        )
    )


def median(sorted_xs):
    n = len(sorted_xs)
    return sorted_xs[n // 2] if n % 2 else (sorted_xs[n // 2 - 1] + sorted_xs[n // 2]) / 2


# ---------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------


def side_env(threads, side):
    env = dict(os.environ)
    prefix = []
    if threads == "1":
        if side == "graft":
            env["RAYON_NUM_THREADS"] = "1"
        else:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
        if shutil.which("taskset"):
            prefix = ["taskset", "-c", "0"]
    return env, prefix


def first_error_line(text):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    for l in lines:
        if l.lower().startswith("error"):
            return l
    return lines[0] if lines else "failed without a message"


def graft_input_args(w, data):
    import numpy as np

    out = []
    for name, _ in w["inputs"]:
        arr = np.load(data / f"{name}.npy")
        if arr.ndim == 0:
            out += ["--input", f"{name}={arr.item()!r}"]
        else:
            out += ["--input", f"{name}={data / (name + '.npy')}"]
    return out


def program_of(w):
    return w["path"] if "path" in w else PROGRAMS / w["program"]


def entry_args(w):
    return ["--entry", w["entry"]] if "entry" in w else []


def run_graft(args, w, data):
    env, prefix = side_env(args.threads, "graft")
    cmd = prefix + [str(args.graft), "bench", str(program_of(w)), "--json"] + entry_args(w)
    cmd += ["--runs", str(args.runs), "--warmup", str(args.warmup)] + graft_input_args(w, data)
    if args.device:
        cmd += ["--device", args.device]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": first_error_line(p.stderr)}
    return json.loads(p.stdout)


def run_jax(args, w, data, save_outputs=None):
    env, prefix = side_env(args.threads, "jax")
    cmd = prefix + [sys.executable, str(Path(__file__).resolve()), "--jax-worker", w["name"], "--data", str(data)]
    cmd += ["--runs", str(args.runs), "--warmup", str(args.warmup)]
    if save_outputs:
        cmd += ["--save-outputs", str(save_outputs)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": first_error_line(p.stderr.splitlines()[-1] if p.stderr.strip() else "")}
    return json.loads(p.stdout.strip().splitlines()[-1])


def check_outputs(args, w, data, jax_npz):
    """Runs the graft program once with --out and compares with JAX's leaves."""
    import numpy as np

    out = data / "graft_out.npz"
    cmd = [str(args.graft), "run", str(program_of(w)), "--out", str(out)] + entry_args(w) + graft_input_args(w, data)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return "graft run failed: " + first_error_line(p.stderr)
    g = np.load(out)
    j = np.load(jax_npz)
    gl = [g[k] for k in g.files]  # labels, in result order
    jl = [j[f"arr_{i}"] for i in range(len(j.files))]
    if len(gl) != len(jl):
        return f"MISMATCH: graft gave {len(gl)} results, JAX {len(jl)}"
    worst = 0.0
    for a, b in zip(gl, jl):
        if a.shape != b.shape:
            return f"MISMATCH: shapes {a.shape} vs {b.shape}"
        scale = max(float(np.max(np.abs(b))), 1e-30)
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale)
    tol = 1e-9 if all(b.dtype == np.float64 for b in jl) else 1e-3
    if w.get("jax_f32"):
        tol = 1e-4
    return ("ok" if worst <= tol else "MISMATCH") + f" (max err {worst:.1e}, relative to the largest entry)"


def fmt_ms(ms):
    if ms is None:
        return "–"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.0f} µs"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graft", type=Path, default=DEFAULT_GRAFT, help=f"the graft binary (default {DEFAULT_GRAFT})")
    ap.add_argument("--threads", choices=["1", "all"], default="1")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="workload names to run (default: all)")
    ap.add_argument(
        "--device",
        choices=["cpu", "gpu", "auto"],
        help="graft's device (graft bench --device); a GPU run also lists each workload's adapter, host steps and transfers",
    )
    ap.add_argument("--check", action="store_true", help="also compare graft's results with JAX's")
    ap.add_argument("--seed", type=int, default=0, help="seed of the NumPy generator for the inputs")
    ap.add_argument("--jax-worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--save-outputs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.runs < 1 or args.warmup < 0:
        ap.error("--runs must be at least 1 and --warmup at least 0")
    if args.jax_worker:
        jax_worker(args)
        return

    try:
        import numpy as np
    except ImportError:
        print("NumPy is needed to generate the inputs: pip install numpy")
        sys.exit(1)
    import importlib.util

    have_jax = importlib.util.find_spec("jax") is not None
    have_graft = args.graft.is_file() and os.access(args.graft, os.X_OK)
    notes = []
    if not have_graft:
        notes.append(
            f"graft binary not found at {args.graft} (build it with `cargo build --release -p graft-cli`, or pass --graft PATH)"
        )
    if not have_jax:
        notes.append("JAX not installed (pip install jax)")
    if not have_graft and not have_jax:
        print("\n".join(notes))
        sys.exit(1)
    selected = [w for w in WORKLOADS if not args.only or w["name"] in args.only]
    unknown = set(args.only or []) - {w["name"] for w in WORKLOADS}
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; known: {[w['name'] for w in WORKLOADS]}")

    threads = "1 thread (taskset -c 0)" if args.threads == "1" else "all threads"
    print(f"# graft vs JAX, {threads}, {args.runs} runs after {args.warmup} warm-up, compile excluded")
    for n in notes:
        print(f"# {n}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="graft-side-by-side-") as tmp:
        for w in selected:
            data = Path(tmp) / w["name"]
            data.mkdir()
            rng = np.random.default_rng(args.seed)
            for name, gen in w["inputs"]:
                np.save(data / f"{name}.npy", gen(rng))
            g = j = None
            if have_graft:
                if w["name"] in NOT_IN_GRAFT:
                    g = {"error": "not expressible in graft yet: " + NOT_IN_GRAFT[w["name"]]}
                else:
                    g = run_graft(args, w, data)
            jax_npz = data / "jax_out.npz" if args.check else None
            if have_jax:
                j = run_jax(args, w, data, jax_npz)
            check = None
            if args.check and have_graft and have_jax and "error" not in g and "error" not in j:
                check = check_outputs(args, w, data, jax_npz)
            rows.append((w, g, j, check))
            print(f"# done: {w['name']}", file=sys.stderr, flush=True)

    header = ["workload"]
    if have_graft:
        header += ["graft median", "graft min"]
    if have_jax:
        header += ["JAX median", "JAX min"]
    if have_graft and have_jax:
        header += ["graft/JAX (median)", "graft/JAX (min)"]
    if args.check:
        header += ["results agree"]
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    errors = []
    for w, g, j, check in rows:
        cells = [w["what"]]
        for side, r in (("graft", g), ("JAX", j)):
            if r is None:
                continue
            if "error" in r:
                cells += ["error", "error"]
                errors.append(f"{w['name']} ({side}): {r['error']}")
            else:
                cells += [fmt_ms(r["median_ms"]), fmt_ms(r["min_ms"])]
        if g is not None and j is not None:
            ok = "error" not in g and "error" not in j
            cells.append(f"{g['median_ms'] / j['median_ms']:.2f}" if ok else "–")
            cells.append(f"{g['min_ms'] / j['min_ms']:.2f}" if ok else "–")
        if args.check:
            cells.append(check or "–")
        print("| " + " | ".join(cells) + " |")
    if have_graft or have_jax:
        print()
        compile_cells = []
        for w, g, j, _ in rows:
            parts = []
            if g is not None and "error" not in g:
                parts.append(f"graft {fmt_ms(g['compile_ms'])}")
            if j is not None and "error" not in j:
                parts.append(f"JAX {fmt_ms(j['compile_ms'])}")
            if parts:
                compile_cells.append(f"{w['name']}: " + ", ".join(parts))
        print("Compile (excluded above): " + "; ".join(compile_cells))
        for w, g, _, _ in rows:
            if g is not None and "device" in g:
                print(
                    f"- {w['name']} on {g['adapter']}: per run {g['launches']} kernel launches, "
                    f"{g['host_steps']} host steps, {g['uploads']} uploads ({g['bytes_up']} bytes), "
                    f"{g['downloads']} downloads ({g['bytes_down']} bytes), {g['syncs']} waits"
                )
    for e in errors:
        print(f"- {e}")
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
