#!/usr/bin/env python3
"""Times the workloads of `cargo bench -p graft --bench core` with NumPy and
JAX on this machine, for docs/PERFORMANCE.md. Not part of the test suite.

Usage: pip install numpy jax && python3 bench/compare.py
JAX runs with async dispatch off and its results blocked on, so timings
include the compute; the first (compiling) call is excluded.
"""
import time

import numpy as np


def best_of(fn, reps=20):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def report(name, seconds, work=None, unit=None):
    extra = ""
    if work is not None:
        extra = f"  {work / seconds / 1e9:8.1f} {unit}"
    print(f"{name:<46} {seconds * 1e3:9.3f} ms{extra}")


rng = np.random.default_rng(0)
a = rng.standard_normal((1024, 1024), dtype=np.float32)
b = rng.standard_normal((1024, 1024), dtype=np.float32)
report("numpy matmul_1024_f32", best_of(lambda: a @ b), 2 * 1024**3, "GFLOP/s")
x = rng.standard_normal(1 << 20, dtype=np.float32)
y = rng.standard_normal(1 << 20, dtype=np.float32)


def chain(xp, x, y):
    """The ten elementwise ops of the Rust benchmark, for NumPy or jax.numpy."""
    t = x * y + x
    t = xp.tanh(t) * 0.5 - y
    t = xp.abs(-xp.maximum(t, x)) + y
    return t * x


report("numpy elementwise_chain_10_1M_f32", best_of(lambda: chain(np, x, y)), 12 << 20, "GB/s")
s = rng.standard_normal((4096, 1024), dtype=np.float32)


def softmax_np(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


report("numpy softmax_4096x1024_f32", best_of(lambda: softmax_np(s)), 2 * 4 * 4096 * 1024, "GB/s")

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_cpu_enable_async_dispatch", False)
    jax.config.update("jax_enable_x64", True)
except ImportError:
    print("jax not installed: pip install jax")
    raise SystemExit(0)


def jtime(name, f, args, work=None, unit=None):
    f = jax.jit(f)
    args = [jnp.asarray(v) for v in args]
    report("jax " + name, best_of(lambda: jax.block_until_ready(f(*args))), work, unit)


jtime("matmul_1024_f32", lambda a, b: a @ b, [a, b], 2 * 1024**3, "GFLOP/s")
jtime("elementwise_chain_10_1M_f32", lambda x, y: chain(jnp, x, y), [x, y], 12 << 20, "GB/s")
cx = rng.standard_normal((32, 32, 28, 28), dtype=np.float32)
cw = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
jtime(
    "conv2d_32x32x28x28_64x3x3_f32",
    lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1))),
    [cx, cw],
    2 * 32 * 64 * 28 * 28 * 32 * 9,
    "GFLOP/s",
)
jtime("softmax_4096x1024_f32", lambda s: jax.nn.softmax(s, axis=1), [s], 2 * 4 * 4096 * 1024, "GB/s")

dims = [784, 512, 512, 10]
params = []
for k in range(3):
    params.append(rng.standard_normal((dims[k + 1], dims[k]), dtype=np.float32) * 0.05)
    params.append(np.zeros(dims[k + 1], dtype=np.float32))
xb = rng.standard_normal((128, 784), dtype=np.float32)
labels = np.arange(128, dtype=np.int32) % 10


def mlp_loss(params, x, labels):
    h = x
    for k in range(3):
        h = h @ params[2 * k].T + params[2 * k + 1]
        if k < 2:
            h = jax.nn.relu(h)
    logp = jax.nn.log_softmax(h, axis=1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


vg = jax.jit(jax.value_and_grad(mlp_loss))
jp = [jnp.asarray(p) for p in params]
jx, jl = jnp.asarray(xb), jnp.asarray(labels)
flops = 3 * 2 * 128 * (784 * 512 + 512 * 512 + 512 * 10)
report("jax mlp_784_512_512_10_b128_value_and_grad_f32", best_of(lambda: jax.block_until_ready(vg(jp, jx, jl))), flops, "GFLOP/s")

hx = rng.standard_normal((64, 256))
w1 = rng.standard_normal((256, 256))
w2 = rng.standard_normal((256, 1))


def tanh_net(w, x):
    h = jnp.tanh(x @ w[0])
    o = jnp.tanh(h @ w[1])
    return jnp.sum(o * o)


g = jax.grad(tanh_net)
hvp = jax.jit(lambda w, v, x: jax.jvp(lambda w_: g(w_, x), (w,), (v,)))
ws = (jnp.asarray(w1), jnp.asarray(w2))
vs = (jnp.asarray(rng.standard_normal((256, 256))), jnp.asarray(rng.standard_normal((256, 1))))
report("jax hvp_tanh_2layer_f64", best_of(lambda: jax.block_until_ready(hvp(ws, vs, jnp.asarray(hx)))))

# Per-example gradients: vmap(grad) of a 784-128-10 MLP over a batch of 64 (f32).
pw1 = jnp.asarray(rng.standard_normal((128, 784), dtype=np.float32) * 0.05)
pw2 = jnp.asarray(rng.standard_normal((10, 128), dtype=np.float32) * 0.05)
px = jnp.asarray(rng.standard_normal((64, 784), dtype=np.float32))
py = jnp.asarray(np.arange(64, dtype=np.int32) % 10)


def example_loss(w1, w2, x, y):
    logits = jax.nn.relu(x @ w1.T) @ w2.T
    return -jax.nn.log_softmax(logits)[y]


peg = jax.jit(jax.vmap(jax.grad(example_loss, argnums=(0, 1)), in_axes=(None, None, 0, 0)))
report("jax per_example_grads_mlp_784_128_10_b64_f32", best_of(lambda: jax.block_until_ready(peg(pw1, pw2, px, py))))

# jacrev of a 100 -> 100 tanh layer (f64).
ja = jnp.asarray(rng.standard_normal((100, 100)))
jv = jnp.asarray(rng.standard_normal(100))
jr = jax.jit(jax.jacrev(lambda a, v: jnp.tanh(a @ v), argnums=1))
report("jax jacrev_tanh_100x100_f64", best_of(lambda: jax.block_until_ready(jr(ja, jv))))
