"""Reference values and gradients for graft's spectral linear algebra
(crates/graft-core/src/ops/decomp, crates/graft-core/src/composite/spectral.rs),
computed with jax.numpy.linalg in float64. Regenerate with

    python3 crates/graft-core/tests/data/linalg_reference.py > crates/graft-core/tests/data/linalg_reference.json

(JAX 0.10.2 was used.) The Rust test `linalg_spectral::matches_jax` rebuilds
every case in graft and compares within 1e-9 (values) and 1e-8 (gradients),
relative to max(1, |reference|).

Each case has an `op`, its `inputs` (shape and row-major data), the `values`
it returns, and, where JAX can differentiate it, the `grads` of the scalar
loss sum_i sum(values[i] * weights[i]) with respect to each input. Outputs
that are only defined up to sign (eigenvectors, singular vectors) are
returned squared elementwise (v * v), which is sign-invariant.
"""
import json, math
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np


def mat(m, n, seed):
    return jnp.array([[math.sin(seed + 1.3 * i + 0.7 * j * (i + 1)) for j in range(n)] for i in range(m)])


def weights_like(x, seed):
    x = jnp.asarray(x)
    flat = [math.cos(seed + 0.37 * k) for k in range(x.size)]
    return jnp.array(flat).reshape(x.shape)


def spd(n, seed):
    a = mat(n, n, seed)
    return a @ a.T + n * jnp.eye(n)


def sym(n, seed):
    a = mat(n, n, seed)
    return a + a.T + jnp.diag(jnp.arange(n) * 1.5)


def ops(op):
    """op name -> function of the inputs returning a tuple of float outputs."""
    if op == "qr_reduced":
        return lambda a: tuple(jnp.linalg.qr(a, mode="reduced"))
    if op == "qr_complete":
        return lambda a: tuple(jnp.linalg.qr(a, mode="complete"))
    if op == "eigh":
        def f(a):
            w, v = jnp.linalg.eigh(a)
            return (w, v * v)
        return f
    if op == "eigvalsh":
        return lambda a: (jnp.linalg.eigvalsh(a),)
    if op == "svd":
        def f(a):
            u, s, vh = jnp.linalg.svd(a, full_matrices=False)
            return (s, u * u, vh * vh)
        return f
    if op == "svd_full":
        # The columns of u past min(m, n) are any basis of a's complement:
        # only the first min(m, n) are compared (and vh, square here).
        def f(a):
            u, s, vh = jnp.linalg.svd(a, full_matrices=True)
            k = s.shape[-1]
            return (s, u[:, :k] * u[:, :k], vh * vh)
        return f
    if op == "svdvals":
        return lambda a: (jnp.linalg.svdvals(a),)
    if op == "pinv":
        return lambda a: (jnp.linalg.pinv(a),)
    if op == "lstsq":
        # (Its s is svdvals'; not differentiated here, since a zero singular
        # value of a rank-deficient matrix is not differentiable.)
        def f(a, b):
            x, resid, rank, s = jnp.linalg.lstsq(a, b)
            return (x, resid)
        return f
    if op.startswith("matrix_norm:"):
        o = op.split(":")[1]
        o = {"fro": "fro", "nuc": "nuc", "1": 1, "-1": -1, "2": 2, "-2": -2, "inf": jnp.inf, "-inf": -jnp.inf}[o]
        return lambda a: (jnp.linalg.matrix_norm(a, ord=o),)
    if op == "cond":
        return lambda a: (jnp.linalg.cond(a),)
    raise ValueError(op)


def case(name, op, inputs, grad=True):
    f = ops(op)
    values = f(*inputs)
    weights = [weights_like(v, 0.5 + i) for i, v in enumerate(values)]
    out = {
        "name": name,
        "op": op,
        "inputs": [[list(x.shape), np.asarray(x).ravel().tolist()] for x in inputs],
        "values": [[list(v.shape), np.asarray(v).ravel().tolist()] for v in values],
        "weights": [[list(w.shape), np.asarray(w).ravel().tolist()] for w in weights],
    }
    if grad:
        def loss(*xs):
            return sum(jnp.sum(v * w) for v, w in zip(f(*xs), weights))
        gs = jax.grad(loss, argnums=tuple(range(len(inputs))))(*inputs)
        out["grads"] = [[list(g.shape), np.asarray(g).ravel().tolist()] for g in gs]
    return out


tall, wide, square = mat(5, 3, 0.1), mat(3, 5, 0.9), mat(4, 4, 2.0)
# Rank 2 (third row = first + second): pinv/lstsq/matrix_rank cut a singular value.
deficient = jnp.array([[1.0, 2.0, 3.0, 0.5], [0.5, -1.0, 2.0, 1.0], [1.5, 1.0, 5.0, 1.5]])
rhs_tall, rhs_wide = mat(5, 2, 3.0), mat(3, 2, 4.0)

cases = [
    case("qr tall", "qr_reduced", [tall]),
    case("qr square", "qr_reduced", [square]),
    # JAX has no QR derivative for m < n or complete tall factors.
    case("qr wide", "qr_reduced", [wide], grad=False),
    case("qr complete tall", "qr_complete", [tall], grad=False),
    case("eigh spd", "eigh", [spd(4, 1.0)]),
    case("eigh symmetric", "eigh", [sym(5, 0.3)]),
    case("eigh not symmetric (symmetrized)", "eigh", [square]),
    case("eigvalsh", "eigvalsh", [square]),
    case("svd tall", "svd", [tall]),
    case("svd wide", "svd", [wide]),
    case("svd square", "svd", [square]),
    case("svd full tall", "svd_full", [tall], grad=False),
    case("svdvals", "svdvals", [wide]),
    case("svdvals rank deficient", "svdvals", [deficient], grad=False),
    case("pinv tall", "pinv", [tall]),
    case("pinv wide", "pinv", [wide]),
    case("pinv rank deficient", "pinv", [deficient]),
    case("pinv orthogonal", "pinv", [jnp.linalg.qr(square)[0]]),
    case("lstsq tall", "lstsq", [tall, rhs_tall]),
    case("lstsq wide", "lstsq", [wide, rhs_wide]),
    case("lstsq rank deficient", "lstsq", [deficient, rhs_wide]),
    case("cond", "cond", [square]),
]
for o in ["fro", "nuc", "1", "-1", "2", "-2", "inf", "-inf"]:
    cases.append(case(f"matrix_norm {o}", f"matrix_norm:{o}", [tall]))

ranks = {
    "tall": int(jnp.linalg.matrix_rank(tall)),
    "deficient": int(jnp.linalg.matrix_rank(deficient)),
    "lstsq deficient": int(jnp.linalg.lstsq(deficient, rhs_wide)[2]),
}
print(json.dumps({"jax": jax.__version__, "cases": cases, "ranks": ranks}, indent=1))
