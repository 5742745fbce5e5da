"""Writes erf_inv_reference.json: JAX's bits for `jax.lax.erf_inv` and
`jax.random.normal` on CPU, read by tests/all/erf_inv.rs.

Run from this directory with the JAX version graft matches (0.10.2, on
x86-64 with FMA): `python3 erf_inv_reference.py`. Values are stored as bit
patterns (hex), since the test compares bits.
"""

import json

import jax
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)


def hexbits(a):
    a = np.ascontiguousarray(a)
    width = a.dtype.itemsize * 2
    u = a.view(np.uint32 if a.dtype == np.float32 else np.uint64)
    return [format(int(v), f"0{width}x") for v in u.ravel()]


def inputs(dt, rng):
    """Edges, branch boundaries and random points in [-1, 1]."""
    f = np.finfo(dt)
    one = np.array(1.0, dt)
    below_one = [np.nextafter(one, 0, dtype=dt)]
    for _ in range(63):
        below_one.append(np.nextafter(below_one[-1], 0, dtype=dt))
    # w = -log(1 - x^2) at the polynomial switches, and x^2 at the switch
    # of log1p's rational (sqrt(2) - 1).
    ws = [5.0] if dt == np.float32 else [6.25, 16.0]
    cuts = [np.sqrt(-np.expm1(-w)) for w in ws] + [np.sqrt(np.sqrt(2.0) - 1.0)]
    near = []
    for c in cuts:
        c = np.array(c, dt)
        lo = hi = c
        for _ in range(32):
            lo = np.nextafter(lo, 0, dtype=dt)
            hi = np.nextafter(hi, 1, dtype=dt)
            near += [lo, hi]
        near.append(c)
    tiny = [0.0, f.tiny, f.tiny * 1.125, f.tiny * 1.13, f.tiny * 1.2, f.smallest_subnormal, f.tiny / 2, 1e-30, 1e-10]
    xs = np.array(below_one + near + tiny + [1.0, 0.5, 0.25, 0.9, 0.99, 0.999], dt)
    xs = np.concatenate([xs, rng.uniform(-1, 1, 500).astype(dt), (1 - 10.0 ** rng.uniform(-16, -1, 150)).astype(dt)])
    return np.concatenate([xs, -xs])


def main():
    rng = np.random.default_rng(20261206)
    erf_inv = jax.jit(lax.erf_inv)
    out = {"jax": jax.__version__, "erf_inv": {}, "normal": []}
    for name, dt in [("f32", np.float32), ("f64", np.float64)]:
        x = inputs(dt, rng)
        y = np.asarray(erf_inv(x))
        out["erf_inv"][name] = {"x": hexbits(x), "y": hexbits(y)}
    for seed in [0, 1, 42]:
        for name, dt in [("f32", np.float32), ("f64", np.float64)]:
            z = np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (400,), dt))
            out["normal"].append({"seed": seed, "dtype": name, "shape": [400], "bits": hexbits(z)})
    with open("erf_inv_reference.json", "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
