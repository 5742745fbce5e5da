"""Collectives over named axes (``graft.lax.psum`` and friends under
``graft.vmap(..., axis_name=)``) against ``jax.lax`` under ``jax.vmap``:
values, gradients through the vmap, gradients inside it, nesting, jit,
and the unbound-name error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graft
import graft.lax as glax
import graft.numpy as gnp

rng = np.random.default_rng(17)


def close(a, b, tol=1e-11):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# Each case is written once over a namespace (graft's or JAX's): a
# per-example function of x (shape (3,) unless the case says otherwise).
CASES = {
    "psum": lambda np_, lax_: lambda x: lax_.psum(x, "i") * x,
    "psum_tree": lambda np_, lax_: lambda x: lax_.psum({"a": x, "b": np_.sin(x)}, "i")["b"] * x,
    "psum_const": lambda np_, lax_: lambda x: lax_.psum(1, "i") * x,
    "pmean": lambda np_, lax_: lambda x: np_.sin(lax_.pmean(x, "i")) + x ** 2,
    "pmax": lambda np_, lax_: lambda x: lax_.pmax(x, "i") * x,
    "pmin": lambda np_, lax_: lambda x: lax_.pmin(x ** 2, "i") + x,
    "all_gather": lambda np_, lax_: lambda x: lax_.all_gather(x, "i") * x,
    "all_gather_axis1": lambda np_, lax_: lambda x: np_.sin(lax_.all_gather(x, "i", axis=1)),
    "all_gather_tiled": lambda np_, lax_: lambda x: lax_.all_gather(x * x, "i", tiled=True),
    "psum_scatter": lambda np_, lax_: lambda x: lax_.psum_scatter(np_.outer(np_.arange(4.0), x), "i") * x,
    "psum_scatter_tiled": lambda np_, lax_: lambda x: lax_.psum_scatter(
        np_.concatenate([x, x ** 2, np_.sin(x), x]), "i", tiled=True) * x[0],
    "ppermute": lambda np_, lax_: lambda x: lax_.ppermute(x, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]) * x,
    "axis_index": lambda np_, lax_: lambda x: x * lax_.axis_index("i"),
}
N = 4  # ranks (psum_scatter's cases assume 4)

# JAX has no derivative rules for pmax/pmin: their references are the
# same functions written over the whole batch (max over the batch axis;
# JAX's max splits the derivative equally between ties, graft's rule too).
BATCHED = {
    "pmax": lambda xs: jnp.max(xs, axis=0)[None] * xs,
    "pmin": lambda xs: jnp.min(xs ** 2, axis=0)[None] + xs,
}


def _pair(name):
    return CASES[name](gnp, glax), CASES[name](jnp, jax.lax)


@pytest.mark.parametrize("name", sorted(CASES))
def test_collective_values_match_jax(name):
    g, j = _pair(name)
    xs = rng.standard_normal((N, 3))
    close(graft.vmap(g, axis_name="i")(xs), jax.vmap(j, axis_name="i")(xs))
    # The same compiled through jit.
    close(graft.jit(graft.vmap(g, axis_name="i"))(xs), jax.vmap(j, axis_name="i")(xs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_through_a_named_vmap_matches_jax(name):
    g, j = _pair(name)
    xs = rng.standard_normal((N, 3))

    def loss_g(v):
        return gnp.sum(gnp.sin(graft.vmap(g, axis_name="i")(v)))

    def loss_j(v):
        out = BATCHED[name](v) if name in BATCHED else jax.vmap(j, axis_name="i")(v)
        return jnp.sum(jnp.sin(out))

    close(graft.grad(loss_g)(xs), jax.grad(loss_j)(xs))


@pytest.mark.parametrize("name", ["psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "psum_scatter"])
def test_grad_inside_a_named_vmap_matches_jax(name):
    # Per-rank gradients (JAX's convention: psum transposes to psum).
    g, j = _pair(name)
    xs = rng.standard_normal((N, 3))
    ours = graft.vmap(graft.grad(lambda x: gnp.sum(gnp.tanh(g(x)))), axis_name="i")(xs)
    if name in BATCHED:
        # Per-rank gradients under that convention: the gradient of the
        # sum of every rank's loss with respect to this rank's input.
        theirs = jax.grad(lambda v: jnp.sum(jnp.tanh(BATCHED[name](v))))(xs)
    else:
        theirs = jax.vmap(jax.grad(lambda x: jnp.sum(jnp.tanh(j(x)))), axis_name="i")(xs)
    close(ours, theirs)


def test_collectives_inside_a_while_loop_under_a_named_vmap_match_jax():
    # The predicate runs a collective too, so every rank takes the same
    # number of trips (JAX's and graft's vmap both batch the loop whole).
    def make(np_, lax_):
        def f(x):
            def cond(c):
                k, y = c
                return lax_.psum(np_.sum(y * y), "i") < 1e3

            def body(c):
                k, y = c
                return k + 1, 1.5 * y + lax_.pmean(y, "i") + lax_.axis_index("i")

            k, y = lax_.while_loop(cond, body, (0, x))
            return y * k

        return f

    g, j = make(gnp, glax), make(jnp, jax.lax)
    xs = rng.standard_normal((N, 3))
    close(graft.vmap(g, axis_name="i")(xs), jax.vmap(j, axis_name="i")(xs))


def test_nested_named_vmaps_and_tuple_axis_names():
    xs = rng.standard_normal((2, 3, 4))

    def body(lax_):
        def inner(x):
            return lax_.psum(x, ("i", "j")) - lax_.psum(x, "i") * lax_.axis_index("j") + lax_.pmax(x, "j")

        return inner

    ours = graft.vmap(graft.vmap(body(glax), axis_name="j"), axis_name="i")(xs)
    theirs = jax.vmap(jax.vmap(body(jax.lax), axis_name="j"), axis_name="i")(xs)
    close(ours, theirs)
    assert glax.axis_size is not None
    sizes = graft.vmap(graft.vmap(lambda x: x * glax.axis_size(("i", "j")), axis_name="j"), axis_name="i")(xs)
    close(sizes, xs * 6)


def test_in_axes_out_axes_and_unbatched_operands():
    xs = rng.standard_normal((3, N))
    w = rng.standard_normal(3)

    def f(np_, lax_):
        return lambda x, w: (lax_.psum(x * w, "i"), lax_.pmean(w, "i") * x)

    ours = graft.vmap(f(gnp, glax), in_axes=(1, None), out_axes=(0, 1), axis_name="i")(xs, w)
    theirs = jax.vmap(f(jnp, jax.lax), in_axes=(1, None), out_axes=(0, 1), axis_name="i")(xs, w)
    for a, b in zip(ours, theirs):
        close(a, b)


def test_one_jit_serves_every_batch_size():
    f = graft.jit(graft.vmap(lambda x: x / glax.psum(x, "i") + glax.axis_index("i"), axis_name="i"))
    for n in (2, 5, 3):
        xs = rng.standard_normal((n, 2)) + 3.0
        close(f(xs), xs / xs.sum(0) + np.arange(n)[:, None])


def test_vmap_inside_jit_traces_the_function_per_example():
    # The function is written for one example: a reshape it makes holds
    # at the per-example shape only.
    f = graft.jit(lambda v: graft.vmap(lambda x: glax.psum(x.reshape(2, 2), "i"), axis_name="i")(v) * 2.0)
    xs = rng.standard_normal((3, 4))
    close(f(xs), np.broadcast_to(2 * xs.sum(0).reshape(2, 2), (3, 2, 2)))


def test_unbound_axis_name_raises_name_error():
    xs = np.ones((3, 2))
    with pytest.raises(NameError, match="unbound axis name: 'j'.*bound here: 'i'"):
        graft.vmap(lambda x: glax.psum(x, "j"), axis_name="i")(xs)
    with pytest.raises(NameError, match="unbound axis name: 'i'"):
        graft.vmap(lambda x: glax.pmean(x, "i"))(xs)
    with pytest.raises(NameError, match="unbound axis name"):
        graft.jit(lambda x: glax.axis_index("i") + x)(xs)
    with pytest.raises(NameError, match="unbound axis name"):
        glax.psum(xs, "i")
    # JAX raises NameError too.
    with pytest.raises(NameError):
        jax.vmap(lambda x: jax.lax.psum(x, "j"), axis_name="i")(xs)


def test_collective_argument_errors():
    xs = np.ones((4, 3))
    with pytest.raises(ValueError, match="one entry per rank"):
        graft.vmap(lambda x: glax.psum_scatter(x, "i"), axis_name="i")(xs)
    with pytest.raises(graft.GraftError, match="each rank at most once"):
        graft.vmap(lambda x: glax.ppermute(x, "i", [(0, 1), (2, 1)]), axis_name="i")(xs)
    # axis_index_groups under vmap: JAX refuses them too.
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        graft.vmap(lambda x: glax.psum(x, "i", axis_index_groups=[[0, 1], [2, 3]]), axis_name="i")(xs)
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        jax.vmap(lambda x: jax.lax.psum(x, "i", axis_index_groups=[[0, 1], [2, 3]]), axis_name="i")(xs)
    with pytest.raises(TypeError, match="axis_name"):
        graft.vmap(lambda x: x, axis_name=3)
    with pytest.raises(graft.GraftError, match="float"):
        graft.vmap(lambda x: glax.pmean(x, "i"), axis_name="i")(np.ones((4, 3), np.int32))
