"""graft against JAX itself on a corpus of functions: values, gradients,
JVPs, VJPs, vmaps, Jacobians, Hessians, loops and random bits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graft
import graft.lax as glax
import graft.nn as gnn
import graft.numpy as gnp

RTOL = 1e-10
rng = np.random.default_rng(0)


def close(a, b, rtol=RTOL, atol=1e-12):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def tree_close(a, b, rtol=RTOL):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        close(x, y, rtol)


# Each entry: (name, function taking a `np`-like module, argument shapes).
# The same source runs with graft.numpy and jax.numpy.
CORPUS = [
    ("sin_mul_sum", lambda m, x: m.sum(m.sin(x) * x), [(5,)]),
    ("tanh_mlp", lambda m, w, x: m.sum(m.tanh(x @ w) ** 2), [(3, 4), (6, 3)]),
    ("exp_log", lambda m, x: m.mean(m.log(1.0 + m.exp(x))), [(4, 3)]),
    ("max_min", lambda m, x: m.max(x, axis=1).sum() - m.min(x, axis=0).sum(), [(4, 5)]),
    ("where", lambda m, x: m.sum(m.where(x > 0, x * x, -x)), [(7,)]),
    ("pow_sqrt", lambda m, x: m.sum(m.sqrt(x * x + 1.0) ** 1.5), [(6,)]),
    ("reshape_T", lambda m, x: m.sum((x.reshape(2, 6).T @ x.reshape(2, 6)) ** 2), [(3, 4)]),
    ("softmax", lambda m, x: m.sum(m.exp(x - m.max(x, axis=-1, keepdims=True)) / m.sum(m.exp(x - m.max(x, axis=-1, keepdims=True)), axis=-1, keepdims=True) * x), [(3, 5)]),
    ("var_std", lambda m, x: m.var(x, axis=0).sum() + m.std(x), [(5, 3)]),
    ("slicing", lambda m, x: m.sum(x[1:, ::2] * x[:-1, 1::2]) + x[0, -1], [(4, 4)]),
    ("concat_stack", lambda m, x, y: m.sum(m.concatenate([x, y], axis=0) ** 2) + m.sum(m.stack([x, y]) * 0.5), [(2, 3), (2, 3)]),
    ("maximum_clip", lambda m, x: m.sum(m.maximum(x, 0.1) * m.clip(x, -0.5, 0.5)), [(8,)]),
    ("einsum", lambda m, a, b: m.sum(m.einsum("ij,jk->ik", a, b) ** 2), [(2, 3), (3, 4)]),
    ("prod_abs", lambda m, x: m.prod(m.abs(x) + 1.0), [(5,)]),
    ("expand_broadcast", lambda m, x: m.sum(m.expand_dims(x, 0) * m.expand_dims(x, 1)), [(4,)]),
    ("arctan2_cos", lambda m, x, y: m.sum(m.arctan2(x, y + 3.0) * m.cos(y)), [(5,), (5,)]),
]


def args_for(shapes):
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("name,fn,shapes", CORPUS, ids=[c[0] for c in CORPUS])
def test_value(name, fn, shapes):
    args = args_for(shapes)
    got = graft.jit(lambda *a: fn(gnp, *a))(*args)
    want = fn(jnp, *args)
    close(got, want)


@pytest.mark.parametrize("name,fn,shapes", CORPUS, ids=[c[0] for c in CORPUS])
def test_grad_all_args(name, fn, shapes):
    args = args_for(shapes)
    argnums = tuple(range(len(args)))
    got = graft.grad(lambda *a: fn(gnp, *a), argnums=argnums)(*args)
    want = jax.grad(lambda *a: fn(jnp, *a), argnums=argnums)(*args)
    tree_close(got, want)


@pytest.mark.parametrize("name,fn,shapes", CORPUS, ids=[c[0] for c in CORPUS])
def test_jvp(name, fn, shapes):
    args = args_for(shapes)
    tans = args_for(shapes)
    y, t = graft.jvp(lambda *a: fn(gnp, *a), tuple(args), tuple(tans))
    yj, tj = jax.jvp(lambda *a: fn(jnp, *a), tuple(args), tuple(tans))
    close(y, yj)
    close(t, tj)


@pytest.mark.parametrize("name,fn,shapes", CORPUS[:8], ids=[c[0] for c in CORPUS[:8]])
def test_vmap_of_grad(name, fn, shapes):
    batch = [rng.standard_normal((3,) + s) for s in shapes]
    got = graft.vmap(graft.grad(lambda *a: fn(gnp, *a)))(*batch)
    want = jax.vmap(jax.grad(lambda *a: fn(jnp, *a)))(*batch)
    close(got, want)


@pytest.mark.parametrize("name,fn,shapes", [c for c in CORPUS if len(c[2]) == 1][:8])
def test_hessian(name, fn, shapes):
    (x,) = args_for(shapes)
    got = graft.hessian(lambda a: fn(gnp, a))(x)
    want = jax.hessian(lambda a: fn(jnp, a))(x)
    close(got, want, rtol=1e-9)


def test_grad_of_grad_scalar():
    f = lambda m, x: m.sin(x) * x ** 3
    x = np.float64(0.7)
    got = graft.grad(graft.grad(graft.grad(lambda a: f(gnp, a))))(x)
    want = jax.grad(jax.grad(jax.grad(lambda a: f(jnp, a))))(x)
    close(got, want)


def test_vjp_and_linearize():
    f = lambda m, x, y: (m.sin(x) * y, m.sum(x * y))
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    out, pb = graft.vjp(lambda a, b: f(gnp, a, b), x, y)
    outj, pbj = jax.vjp(lambda a, b: f(jnp, a, b), x, y)
    tree_close(out, outj)
    ct = (rng.standard_normal(4), np.float64(0.3))
    tree_close(pb(ct), pbj(ct))
    out, lin = graft.linearize(lambda a, b: f(gnp, a, b), x, y)
    outj, linj = jax.linearize(lambda a, b: f(jnp, a, b), x, y)
    tree_close(out, outj)
    dx, dy = rng.standard_normal(4), rng.standard_normal(4)
    tree_close(lin(dx, dy), linj(dx, dy))


def test_jacfwd_jacrev():
    f = lambda m, x: m.tanh(x[:, None] * x[None, :]).sum(axis=0) * x
    x = rng.standard_normal(5)
    want = jax.jacfwd(lambda a: f(jnp, a))(x)
    close(graft.jacfwd(lambda a: f(gnp, a))(x), want)
    close(graft.jacrev(lambda a: f(gnp, a))(x), want)
    close(graft.jacobian(lambda a: f(gnp, a))(x), want)


def test_vmap_in_out_axes():
    f = lambda m, x, w: m.tanh(w @ x)
    xs = rng.standard_normal((3, 6))  # batch on axis 1
    w = rng.standard_normal((2, 3))
    got = graft.vmap(lambda x, w: f(gnp, x, w), in_axes=(1, None), out_axes=1)(xs, w)
    want = jax.vmap(lambda x, w: f(jnp, x, w), in_axes=(1, None), out_axes=1)(xs, w)
    close(got, want)


def test_vmap_pytree_and_none_out():
    def f(m, p, x):
        return {"y": m.sum(p["a"] * x), "c": m.sum(p["b"])}

    p = {"a": rng.standard_normal(4), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((5, 4))
    got = graft.vmap(lambda p, x: f(gnp, p, x), in_axes=(None, 0), out_axes={"y": 0, "c": None})(p, xs)
    want = jax.vmap(lambda p, x: f(jnp, p, x), in_axes=(None, 0), out_axes={"y": 0, "c": None})(p, xs)
    tree_close(got, want)


def test_nested_vmap():
    f = lambda m, x, y: m.sum(x * y)
    xs, ys = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 5))
    got = graft.vmap(graft.vmap(lambda x, y: f(gnp, x, y), in_axes=(0, 0)), in_axes=(0, None))(xs, ys)
    want = jax.vmap(jax.vmap(lambda x, y: f(jnp, x, y), in_axes=(0, 0)), in_axes=(0, None))(xs, ys)
    close(got, want)


def test_pytree_grad_dict_list_tuple():
    def loss(m, params, x):
        h = m.tanh(x @ params["layers"][0]["w"] + params["layers"][0]["b"])
        out = h @ params["layers"][1][0]
        return m.mean(out ** 2) + params["scale"] * 0.1

    params = {
        "layers": [{"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}, (rng.standard_normal((4, 2)),)],
        "scale": np.float64(1.5),
    }
    x = rng.standard_normal((5, 3))
    got = graft.grad(lambda p, x: loss(gnp, p, x))(params, x)
    want = jax.grad(lambda p, x: loss(jnp, p, x))(params, x)
    tree_close(got, want)
    (v, g) = graft.value_and_grad(lambda p, x: loss(gnp, p, x))(params, x)
    close(v, loss(jnp, params, x))


def test_grad_has_aux():
    def f(m, x):
        return m.sum(x ** 2), {"mean": m.mean(x), "n": x.shape[0] * 1.0}

    x = rng.standard_normal(4)
    g, aux = graft.grad(lambda a: f(gnp, a), has_aux=True)(x)
    gj, auxj = jax.grad(lambda a: f(jnp, a), has_aux=True)(x)
    close(g, gj)
    close(aux["mean"], auxj["mean"])
    (v, aux2), g2 = graft.value_and_grad(lambda a: f(gnp, a), has_aux=True)(x)
    close(v, np.sum(x ** 2))
    close(g2, gj)


def test_scan_cumulative_and_grad():
    def f(m, lax, c0, xs):
        def body(c, x):
            c = m.tanh(c * 0.9 + x)
            return c, c * 2.0

        c, ys = lax.scan(body, c0, xs)
        return m.sum(ys) + m.sum(c)

    c0, xs = rng.standard_normal(3), rng.standard_normal((6, 3))
    close(graft.jit(lambda a, b: f(gnp, glax, a, b))(c0, xs), f(jnp, jax.lax, c0, xs))
    tree_close(
        graft.grad(lambda a, b: f(gnp, glax, a, b), argnums=(0, 1))(c0, xs),
        jax.grad(lambda a, b: f(jnp, jax.lax, a, b), argnums=(0, 1))(c0, xs),
    )


def test_scan_reverse_pytree_carry():
    def f(m, lax, xs):
        def body(c, x):
            a, b = c
            return (a + x, b * 0.5 + a), a * b

        (a, b), ys = lax.scan(body, (m.zeros_like(xs[0]), m.ones_like(xs[0])), xs, reverse=True)
        return a.sum() + b.sum() + ys.sum()

    xs = rng.standard_normal((5, 2))
    close(graft.jit(lambda x: f(gnp, glax, x))(xs), f(jnp, jax.lax, xs))
    close(graft.grad(lambda x: f(gnp, glax, x))(xs), jax.grad(lambda x: f(jnp, jax.lax, x))(xs))


def test_while_loop_value_and_grad():
    # Newton's method for sqrt(a): the gradient flows through a data-dependent loop.
    def f(m, lax, a):
        def cond(s):
            return s[1] < 20

        def body(s):
            x, i = s
            return (0.5 * (x + a / x), i + 1)

        x, _ = lax.while_loop(cond, body, (a, np.int32(0)))
        return x

    a = np.float64(2.5)
    close(graft.jit(lambda a: f(gnp, glax, a))(a), np.sqrt(a))
    close(graft.jit(lambda a: f(gnp, glax, a))(a), f(jnp, jax.lax, a))
    close(graft.grad(lambda a: f(gnp, glax, a))(a), 0.5 / np.sqrt(a))


def test_fori_loop_and_grad():
    def f(m, lax, x):
        return lax.fori_loop(1, 5, lambda i, v: v * m.sin(v) + i, x).sum()

    x = rng.standard_normal(3)
    close(graft.jit(lambda a: f(gnp, glax, a))(x), f(jnp, jax.lax, x))
    close(graft.grad(lambda a: f(gnp, glax, a))(x), jax.grad(lambda a: f(jnp, jax.lax, a))(x))


def test_cond_switch():
    def f(m, lax, x):
        y = lax.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: -v, x)
        z = lax.switch(np.int32(1), [lambda v: v, lambda v: m.sin(v), lambda v: v ** 2], y)
        return m.sum(z)

    for x in (rng.standard_normal(4) + 2.0, rng.standard_normal(4) - 2.0):
        close(graft.jit(lambda a: f(gnp, glax, a))(x), f(jnp, jax.lax, x))
        close(graft.grad(lambda a: f(gnp, glax, a))(x), jax.grad(lambda a: f(jnp, jax.lax, a))(x))


def test_vmap_of_cond_and_while():
    def f(m, lax, x):
        return lax.cond(x > 0, lambda v: v * 3.0, lambda v: v - 1.0, x)

    xs = rng.standard_normal(6)
    close(graft.vmap(lambda a: f(gnp, glax, a))(xs), jax.vmap(lambda a: f(jnp, jax.lax, a))(xs))


def test_checkpoint_same_gradient():
    def block(m, x):
        return m.sin(m.tanh(x) * 2.0) * x

    x = rng.standard_normal(5)
    got = graft.grad(lambda a: gnp.sum(graft.checkpoint(lambda b: block(gnp, b))(a)))(x)
    want = jax.grad(lambda a: jnp.sum(jax.checkpoint(lambda b: block(jnp, b))(a)))(x)
    close(got, want)


def test_stop_gradient():
    f = lambda m, sg, x: m.sum(x * sg(x ** 2))
    x = rng.standard_normal(3)
    close(graft.grad(lambda a: f(gnp, graft.stop_gradient, a))(x), jax.grad(lambda a: f(jnp, jax.lax.stop_gradient, a))(x))


def test_nn_functions():
    x = rng.standard_normal((3, 5))
    for g, j in [
        (gnn.relu, jax.nn.relu),
        (gnn.sigmoid, jax.nn.sigmoid),
        (gnn.softplus, jax.nn.softplus),
        (gnn.silu, jax.nn.silu),
        (lambda v: gnn.softmax(v, axis=-1), lambda v: jax.nn.softmax(v, axis=-1)),
        (lambda v: gnn.log_softmax(v, axis=0), lambda v: jax.nn.log_softmax(v, axis=0)),
        (lambda v: gnn.logsumexp(v, axis=1), lambda v: jax.scipy.special.logsumexp(v, axis=1)),
        (gnn.gelu, jax.nn.gelu),
    ]:
        close(graft.jit(g)(x), j(x))
        close(graft.grad(lambda v: gnp.sum(g(v)))(x), jax.grad(lambda v: jnp.sum(j(v)))(x), rtol=1e-9)


def test_custom_jvp_matches_jax():
    def make(lib, deco):
        @deco
        def f(x):
            return lib.sin(x)

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return f(x), 3.0 * t  # a deliberately "wrong" rule: it must be used

        return f

    fg, fj = make(gnp, graft.custom_jvp), make(jnp, jax.custom_jvp)
    x = rng.standard_normal(4)
    close(graft.jit(fg)(x), np.sin(x))
    close(graft.grad(lambda a: gnp.sum(fg(a)))(x), jax.grad(lambda a: jnp.sum(fj(a)))(x))
    close(graft.jvp(fg, (x,), (np.ones(4),))[1], 3.0 * np.ones(4))


def test_custom_vjp_matches_jax():
    def make(lib, deco):
        @deco
        def f(x, y):
            return lib.sin(x) * y

        def fwd(x, y):
            return f(x, y), (lib.cos(x), x, y)

        def bwd(res, g):
            c, x, y = res
            return (c * y * g * 2.0, None)  # doubled x-cotangent, no y-cotangent

        f.defvjp(fwd, bwd)
        return f

    fg, fj = make(gnp, graft.custom_vjp), make(jnp, jax.custom_vjp)
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    close(graft.jit(fg)(x, y), np.sin(x) * y)
    want = jax.grad(lambda a, b: jnp.sum(fj(a, b)), argnums=(0, 1))(x, y)
    tree_close(graft.grad(lambda a, b: gnp.sum(fg(a, b)), argnums=(0, 1))(x, y), want)


def test_random_bits_match_jax():
    for seed in (0, 42, 2**40 + 7):
        k = graft.random.key(seed)
        kj = jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(k.view(np.uint32), np.asarray(kj))
        ks = graft.random.split(k, 3)
        np.testing.assert_array_equal(ks.view(np.uint32), np.asarray(jax.random.split(kj, 3)))
        for dt in (np.float32, np.float64):
            np.testing.assert_array_equal(
                graft.random.uniform(k, (7,), dt), np.asarray(jax.random.uniform(kj, (7,), dt))
            )
        np.testing.assert_array_equal(
            graft.random.bernoulli(k, 0.3, (9,)), np.asarray(jax.random.bernoulli(kj, 0.3, (9,)))
        )


def test_random_normal_distribution():
    k = graft.random.key(3)
    z = graft.random.normal(k, (20000,), np.float64)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03


def test_random_inside_jit_same_as_eager():
    k = graft.random.key(5)
    f = graft.jit(lambda key: graft.random.uniform(graft.random.split(key)[1], (4,)))
    np.testing.assert_array_equal(f(k), graft.random.uniform(graft.random.split(k)[1], (4,)))


def test_closure_capture_in_transforms_and_loops():
    # Values of an enclosing trace used (not passed) inside a transform or
    # a loop body, and derivatives flowing through them, as in JAX.
    def f(m, grad, lax, x, a):
        inner = grad(lambda y: m.sum(x * y ** 2))(x)           # captures x
        c, _ = lax.scan(lambda c, v: (c * a + v, c), m.zeros_like(x[0]), x)  # captures a
        w = lax.while_loop(lambda s: s < a * 10.0, lambda s: s * 2.0 + a, a)   # captures a
        return m.sum(inner * c) + w

    x = rng.standard_normal(4)
    a = np.float64(0.7)
    gx = lambda *v: f(gnp, graft.grad, glax, *v)
    jx = lambda *v: f(jnp, jax.grad, jax.lax, *v)
    close(graft.jit(gx)(x, a), jx(x, a))
    # JAX has no reverse mode for while_loop; its forward-mode gradient is the reference.
    tree_close(graft.grad(gx, argnums=(0, 1))(x, a), jax.jacfwd(jx, argnums=(0, 1))(x, a))
    xs = rng.standard_normal((3, 4))
    close(graft.vmap(gx, in_axes=(0, None))(xs, a), jax.vmap(jx, in_axes=(0, None))(xs, a))


def test_grad_of_grad_through_capture():
    g = lambda x: graft.grad(lambda y: x * y ** 2)(x)
    j = lambda x: jax.grad(lambda y: x * y ** 2)(x)
    x = np.float64(1.3)
    close(graft.grad(g)(x), jax.grad(j)(x))
    close(graft.hessian(lambda v: gnp.sum(graft.vmap(lambda e: e * v[0])(v) ** 2))(np.arange(1.0, 4.0)),
          jax.hessian(lambda v: jnp.sum(jax.vmap(lambda e: e * v[0])(v) ** 2))(np.arange(1.0, 4.0)))


@pytest.mark.parametrize("name,fn,shapes", CORPUS[:6], ids=[c[0] for c in CORPUS[:6]])
def test_float32_value_and_grad(name, fn, shapes):
    args = [a.astype(np.float32) for a in args_for(shapes)]
    v, g = graft.value_and_grad(lambda *a: fn(gnp, *a))(*args)
    vj, gj = jax.value_and_grad(lambda *a: fn(jnp, *a))(*args)
    assert v.dtype == np.float32 and g.dtype == np.float32  # Python numbers do not promote
    close(v, vj, rtol=2e-5, atol=1e-6)
    close(g, gj, rtol=2e-4, atol=1e-5)


def test_vjp_has_aux_and_inside_jit():
    f = lambda m, x: (m.sin(x) * 2.0, {"n": m.sum(x), "i": x.shape[0]})
    x = rng.standard_normal(3)
    ct = rng.standard_normal(3)
    out, pb, aux = graft.vjp(lambda a: f(gnp, a), x, has_aux=True)
    outj, pbj, auxj = jax.vjp(lambda a: f(jnp, a), x, has_aux=True)
    close(out, outj)
    close(aux["n"], auxj["n"])
    tree_close(pb(ct), pbj(ct))
    # the same inside jit: the pullback is emitted into the trace
    g = graft.jit(lambda a, c: graft.vjp(lambda v: f(gnp, v), a, has_aux=True)[1](c))(x, ct)
    tree_close(g, pbj(ct))


def test_linalg_and_sort():
    a = rng.standard_normal((4, 4))
    spd = a @ a.T + 4.0 * np.eye(4)
    b = rng.standard_normal(4)
    for g, j, args in [
        (gnp.linalg.cholesky, jnp.linalg.cholesky, (spd,)),
        (gnp.linalg.inv, jnp.linalg.inv, (a,)),
        (gnp.linalg.det, jnp.linalg.det, (a,)),
        (gnp.linalg.solve, jnp.linalg.solve, (a, b)),
        (gnp.trace, jnp.trace, (a,)),
        (gnp.diag, jnp.diag, (b,)),
        (lambda v: gnp.sort(v, axis=0), lambda v: jnp.sort(v, axis=0), (a,)),
    ]:
        close(g(*args), j(*args), rtol=1e-9)
    np.testing.assert_array_equal(gnp.argsort(b), np.argsort(b))
    # derivatives through them, against JAX
    fg = lambda x, y: gnp.sum(gnp.linalg.solve(x, y)) + gnp.linalg.det(x) + gnp.sum(gnp.sort(y) * gnp.arange(4.0))
    fj = lambda x, y: jnp.sum(jnp.linalg.solve(x, y)) + jnp.linalg.det(x) + jnp.sum(jnp.sort(y) * jnp.arange(4.0))
    tree_close(graft.grad(fg, argnums=(0, 1))(a, b), jax.grad(fj, argnums=(0, 1))(a, b), rtol=1e-8)
