"""The Python API itself: errors, caching, pytrees, finite differences,
IR text, graft-language programs, threads."""

import collections
import threading
import traceback
from pathlib import Path

import numpy as np
import pytest

import graft
import graft.lax as glax
import graft.numpy as gnp

REPO = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(1)


def central_diff(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_grad_matches_finite_differences():
    def f(x):
        return gnp.sum(gnp.sin(x) * gnp.exp(-x * x) + gnp.log1p(x * x))

    x = rng.standard_normal((3, 2))
    g = graft.grad(f)(x)
    fd = central_diff(lambda v: float(graft.jit(f)(v)), x)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_results_are_numpy_with_graft_dtypes():
    out = graft.jit(lambda x, i: (x * 2, i + 1, x > 0))(np.ones(3, np.float32), np.arange(3, dtype=np.int32))
    assert isinstance(out, tuple) and all(isinstance(o, np.ndarray) for o in out)
    assert [o.dtype for o in out] == [np.float32, np.int32, np.bool_]
    np.testing.assert_array_equal(out[1], [1, 2, 3])


def test_jit_shapeless_compiles_once_per_dtype_and_rank():
    calls = []

    def f(x, w):
        calls.append(x.shape)
        return (graft.nn.softmax(x, axis=-1) * w + x * 0.5).sum(axis=-1)

    def reference(x, w):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True) * w + x * 0.5).sum(axis=-1)

    j = graft.jit(f, shapeless=True)
    rng = np.random.default_rng(0)
    for r, c in [(4, 7), (5, 9), (16, 33)]:
        x, w = rng.normal(size=(r, c)).astype(np.float32), rng.normal(size=c).astype(np.float32)
        np.testing.assert_allclose(j(x, w), reference(x, w), rtol=1e-5, atol=1e-5)
    assert len(calls) == 3, "traced again at each new size (cheap)"
    assert j._cache_size() == 1, "compiled once for the dtypes and ranks"
    j(np.ones((2, 3)), np.ones(3))
    assert j._cache_size() == 2, "another dtype compiles again"
    with pytest.raises(graft.GraftError, match="7 vs 8"):
        j(np.ones((4, 7), np.float32), np.ones(8, np.float32))


def test_jit_caches_per_shape_and_dtype():
    calls = []

    def f(x):
        calls.append(x.shape)
        return x * 2.0

    j = graft.jit(f)
    j(np.ones(3))
    j(np.ones(3) * 5)
    assert len(calls) == 1 and j._cache_size() == 1
    j(np.ones(4))
    j(np.ones(3, np.float32))
    assert len(calls) == 3 and j._cache_size() == 3


def test_namedtuple_and_none_pytrees():
    P = collections.namedtuple("P", ["w", "b"])

    def f(p, unused, x):
        assert unused is None
        return gnp.sum((x * p.w + p.b) ** 2)

    p = P(np.float64(2.0), np.float64(0.5))
    g = graft.grad(f)(p, None, np.arange(3.0))
    assert isinstance(g, P)
    x = np.arange(3.0)
    np.testing.assert_allclose(g.w, np.sum(2 * (x * 2 + 0.5) * x))
    np.testing.assert_allclose(g.b, np.sum(2 * (x * 2 + 0.5)))


def test_kwargs_and_dict_outputs():
    out = graft.jit(lambda x, *, scale: {"y": x * scale, "s": gnp.sum(x)})(np.ones(2), scale=np.float64(3.0))
    np.testing.assert_allclose(out["y"], [3.0, 3.0])
    np.testing.assert_allclose(out["s"], 2.0)


def test_python_exception_propagates_with_traceback():
    def inner(x):
        raise KeyError("boom from user code")

    def f(x):
        return inner(x) + 1

    with pytest.raises(KeyError, match="boom") as ei:
        graft.jit(f)(np.ones(2))
    frames = [fr.name for fr in traceback.extract_tb(ei.value.__traceback__)]
    assert "inner" in frames and "f" in frames
    # inside a transform, inside a loop body
    with pytest.raises(KeyError):
        graft.grad(lambda x: gnp.sum(glax.scan(lambda c, v: inner(c), x, None, length=2)[0]))(np.ones(2))


def test_graft_error_carries_graft_text():
    with pytest.raises(graft.GraftError, match="broadcast|shape|incompatible") as ei:
        graft.jit(lambda x, y: x + y)(np.ones(3), np.ones(4))
    assert isinstance(ei.value, ValueError)
    # raised at the Python line that failed, not later
    tb = traceback.extract_tb(ei.value.__traceback__)
    assert any("lambda" in fr.name for fr in tb)


def test_binary_ops_promote_other_mismatches_are_errors():
    assert graft.jit(lambda x, y: x * y)(np.ones(3, np.float32), np.ones(3, np.float64)).dtype == np.float64
    # So do the operands of concatenate, stack, where, select and einsum.
    assert graft.jit(lambda x, y: gnp.concatenate([x, y]))(np.ones(3, np.float32), np.ones(3, np.float64)).dtype == np.float64
    with pytest.raises(graft.GraftError, match="indices must be"):
        graft.jit(lambda x, y: gnp.take(x, y))(np.ones(3), np.ones(2))


def test_unsupported_argument_types():
    with pytest.raises(TypeError, match="uint8"):
        graft.jit(lambda x: x)(np.ones(2, np.uint8))
    with pytest.raises(TypeError, match="str"):
        graft.jit(lambda x: x)("hello")
    with pytest.raises(TypeError, match="not known while graft traces"):
        graft.jit(lambda x: x if x > 0 else -x)(np.float64(1.0))
    with pytest.raises(TypeError, match="object"):
        graft.jit(lambda x: x + object())(np.ones(2))


def test_float16_computes_in_float32_and_rounds_each_op_like_numpy():
    # NumPy's float16 ufuncs compute in float32 and round each result to
    # float16, which is what graft does (f16 is a storage type): for + - * /
    # (correctly rounded in float32, then rounded once more) the bits agree.
    x = np.linspace(-3, 3, 257).astype(np.float16)
    y = (np.arange(257) * 0.037).astype(np.float16)
    out = graft.jit(lambda a, b: a * b - a / (b + 1) + 0.1)(x, y)
    assert out.dtype == np.float16
    want = x * y - x / (y + np.float16(1)) + np.float16(0.1)
    assert out.view(np.uint16).tolist() == want.view(np.uint16).tolist()
    # tanh is graft's own float32 function: within one float16 ulp.
    t = graft.jit(gnp.tanh)(x)
    assert t.dtype == np.float16
    assert np.all(np.abs(t.astype(np.float32) - np.tanh(x).astype(np.float32)) <= np.spacing(np.abs(np.tanh(x))).astype(np.float32))
    # Gradients keep the dtype; float16 with float32 promotes to float32.
    g = graft.grad(lambda a: gnp.sum(a * a))(x)
    assert g.dtype == np.float16 and g.tolist() == (2 * x).tolist()
    assert graft.jit(lambda a, b: a + b)(x, y.astype(np.float32)).dtype == np.float32
    assert graft.jit(lambda a: a.astype(np.float16))(np.array([1e5, 0.1], np.float32)).tolist() == [np.inf, np.float16(0.1)]


def test_uint32_wraps_and_divides_unsigned_like_numpy():
    # NumPy's uint32: + - * wrap modulo 2**32, division, remainder, order and
    # max are unsigned; the results come back as uint32 arrays.
    x = np.array([0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1, 123456789], np.uint32)
    y = np.array([3, 2**32 - 1, 7, 2, 2**31 + 1, 5, 10], np.uint32)
    f = graft.jit(lambda a, b: (a * b + a - b, a % b, a < b, gnp.maximum(a, b), gnp.max(a), -a, a + 1))
    got = f(x, y)
    with np.errstate(over="ignore"):
        want = (x * y + x - y, x % y, x < y, np.maximum(x, y), np.max(x), (0 - x).astype(np.uint32), x + np.uint32(1))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert np.array_equal(g, w), (g, w)
    assert graft.jit(lambda a, b: a / b)(x, y).tolist() == (x // y).tolist()
    # Division by zero gives 0, as graft's int32 does.
    assert graft.jit(lambda a, b: a / b)(x[:2], np.zeros(2, np.uint32)).tolist() == [0, 0]
    # Conversions: floats saturate (NaN -> 0), int32 wraps, uint32 -> float32 rounds.
    fl = np.array([-1.5, 0.5, 3e9, 5e9, np.nan], np.float32)
    assert graft.jit(lambda a: a.astype(np.uint32))(fl).tolist() == [0, 0, 3000000000, 2**32 - 1, 0]
    assert graft.jit(lambda a: a.astype(np.uint32))(np.array([-1, 5], np.int32)).tolist() == [2**32 - 1, 5]
    assert graft.jit(lambda a: a.astype(np.float32))(x).tolist() == x.astype(np.float32).tolist()
    # Promotion as JAX with x64: uint32 with int32 is int64, with a float the float.
    i = np.array([-1, 2], np.int32)
    assert gnp.result_type(np.uint32, np.uint32) == np.uint32
    assert gnp.result_type(np.uint32, np.int32) == np.int64
    assert gnp.result_type(np.int64, np.uint32) == np.int64
    assert gnp.result_type(np.uint32, np.float32) == np.float32
    assert gnp.result_type(np.bool_, np.uint32) == np.uint32
    s = graft.jit(lambda a, b: a + b)(x[:2], i)
    assert s.dtype == np.int64 and s.tolist() == [-1, 3]
    assert graft.jit(lambda a, b: a * b)(x[:2], np.ones(2, np.float32)).dtype == np.float32
    # A Python number must fit uint32.
    with pytest.raises(OverflowError, match="out of range for uint32"):
        graft.jit(lambda a: a + -1)(x)
    # Not differentiable: integer leaves get no gradient (like int32).
    g = graft.grad(lambda w, a: gnp.sum(w * a.astype(np.float32)), argnums=0)(np.ones(2, np.float32), x[:2])
    assert g.tolist() == [0.0, 1.0]
    # uint16 stays refused.
    with pytest.raises(TypeError, match="uint16"):
        graft.jit(lambda a: a)(np.ones(2, np.uint16))


def test_grad_of_non_scalar_is_graft_error():
    with pytest.raises(graft.GraftError, match="scalar"):
        graft.grad(lambda x: x * 2.0)(np.ones(3))


def test_vmap_batch_size_mismatch():
    with pytest.raises(graft.GraftError):
        graft.vmap(lambda x, y: x * y)(np.ones((3, 2)), np.ones((4, 2)))


def test_lower_as_text():
    text = graft.jit(lambda x: gnp.sum(gnp.sin(x))).lower(graft.ShapeDtypeStruct((3,), np.float32)).as_text()
    assert "sin" in text and "f32[3]" in text
    text2 = graft.jit(graft.grad(lambda x: gnp.sum(gnp.sin(x)))).lower(np.ones(3)).as_text()
    assert "cos" in text2


def test_load_graft_program():
    prog = graft.load(REPO / "examples" / "quickstart.graft")
    assert "loss" in prog.defs()
    w1 = rng.standard_normal((2, 4)).astype(np.float32)
    b1 = np.zeros(4, np.float32)
    w2 = rng.standard_normal((4, 3)).astype(np.float32)
    b2 = np.zeros(3, np.float32)
    x = rng.standard_normal((5, 2)).astype(np.float32)
    y = np.array([0, 1, 2, 1, 0], np.int32)
    got = prog.loss(w1, b1, w2, b2, x, y)
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    want = np.mean(lse - logits[np.arange(5), y])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(graft.GraftError, match="must be tensor"):
        prog.loss(w1, b1, w2, b2, x, y.astype(np.float32))


SHAPELESS_PROGRAM = """
def norm(x: tensor[b, n, f32]) -> tensor[b, n, f32] {
  let m = mean(x, axis=1, keepdims=true)
  let c = x - m
  c / sqrt(mean(c * c, axis=1, keepdims=true) + 1e-5)
}

def iterate(x: tensor[n, f32]) -> tensor[n, f32] =
  fori(4, fn (i, y) -> tanh(y) * 0.5 + x, x)
"""


def test_load_shapeless_compiles_once_per_dtypes_and_ranks(tmp_path):
    p = tmp_path / "generic.graft"
    p.write_text(SHAPELESS_PROGRAM)
    generic, plain = graft.load(p, shapeless=True), graft.load(p)
    for b, n in [(3, 5), (7, 33), (2, 128)]:
        x = rng.standard_normal((b, n)).astype(np.float32)
        want = plain.norm(x)
        np.testing.assert_array_equal(generic.norm(x), want)
        c = x - x.mean(1, keepdims=True)
        np.testing.assert_allclose(want, c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5)
        v = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_array_equal(generic.iterate(v), plain.iterate(v))
    # One compilation per (def, dtypes and ranks); per shape without it.
    assert generic.cache_size() == 2
    assert plain.cache_size() == 6
    generic.iterate(np.ones(4, np.float32))  # a fourth size, the same signature
    assert generic.cache_size() == 2


def test_load_reports_diagnostics(tmp_path):
    p = tmp_path / "bad.graft"
    p.write_text("def f(x: tensor[n, f32]) -> tensor[n, f32] = x + undefined_name\n")
    with pytest.raises(graft.GraftError, match="undefined_name"):
        graft.load(p)


def test_gil_released_while_running():
    # Two threads run a compiled function at once; both must finish and agree.
    f = graft.jit(lambda x: gnp.sum(gnp.tanh(x @ x.T)))
    x = rng.standard_normal((200, 200))
    f(x)
    results = [None, None]

    def work(i):
        results[i] = f(x)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    np.testing.assert_allclose(results[0], results[1])


def test_eager_numpy_functions():
    x = rng.standard_normal((2, 3))
    np.testing.assert_allclose(gnp.sin(x), np.sin(x), rtol=1e-14)
    np.testing.assert_allclose(gnp.sum(x, axis=1), x.sum(1), rtol=1e-14)
    np.testing.assert_allclose(gnp.matmul(x, x.T), x @ x.T, rtol=1e-13)
    np.testing.assert_array_equal(gnp.argmax(x, axis=1), x.argmax(1))
    np.testing.assert_allclose(gnp.concatenate([x, x], axis=1), np.concatenate([x, x], 1))


def test_tracer_indexing_and_methods():
    x = rng.standard_normal((4, 5))
    f = graft.jit(lambda a: (a[1], a[:, 2], a[None, 1:3, ::2], a[..., -1], a[np.array([0, -1])], a.T.reshape(-1), a.astype(np.float32)))
    outs = f(x)
    wants = (x[1], x[:, 2], x[None, 1:3, ::2], x[..., -1], x[[0, -1]], x.T.reshape(-1), x.astype(np.float32))
    for o, w in zip(outs, wants):
        np.testing.assert_allclose(o, w, rtol=1e-6)


def test_training_example_learns():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_mlp", REPO / "examples" / "python" / "train_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    loss, acc = mod.main()
    assert loss < 0.1 and acc > 0.95


def test_jit_static_argnums():
    calls = []

    def f(x, n, *, mode):
        calls.append((n, mode))
        y = x
        for _ in range(n):
            y = gnp.sin(y) if mode == "sin" else gnp.cos(y)
        return y

    j = graft.jit(f, static_argnums=1, static_argnames="mode")
    x = rng.standard_normal(3)
    np.testing.assert_allclose(j(x, 2, mode="sin"), np.sin(np.sin(x)), rtol=1e-14)
    np.testing.assert_allclose(j(x, 1, mode="cos"), np.cos(x), rtol=1e-14)
    j(x * 2, 2, mode="sin")
    assert calls == [(2, "sin"), (1, "cos")]
    with pytest.raises(TypeError, match="hashable"):
        j(x, [1], mode="sin")


def test_bad_inputs_raise_never_crash():
    x = np.ones((2, 3))
    cases = [
        lambda: graft.jit(lambda a: a.reshape(-5))(x),
        lambda: graft.jit(lambda a: a.reshape(7))(x),
        lambda: graft.jit(lambda a: a[::0])(x),
        lambda: graft.jit(lambda a: a[5])(x),
        lambda: graft.jit(lambda a: gnp.sum(a, axis=4))(x),
        lambda: graft.jit(lambda a: gnp.transpose(a, (0, 0)))(x),
        lambda: graft.jit(lambda a: gnp.concatenate([]))(x),
        lambda: graft.jit(lambda a: gnp.einsum("ij,jk->ik", a, a))(x),
        lambda: graft.jit(lambda a: a @ a)(x),
        lambda: graft.vmap(lambda a: a, in_axes=3)(x),
        lambda: graft.jacfwd(lambda a, b: a, argnums=(0, 5))(x, x),
        lambda: graft.grad(lambda a: gnp.sum(a), argnums=5)(x),
        lambda: graft.random.uniform(np.zeros(3, np.int32), (2,)),
        lambda: graft.lax.scan(lambda c, v: (c, v), np.float64(0.0), None),
        lambda: graft.lax.cond(np.ones(2) > 0, lambda: 1.0, lambda: 2.0) if False else graft.jit(
            lambda a: graft.lax.cond(a > 0, lambda v: v, lambda v: v * 2, a))(x),
        lambda: graft.jit(lambda a: graft.lax.scan(lambda c, v: (c + v, None), a[0], a[:, :2]))(x),
        lambda: graft.load("/nonexistent/prog.graft"),
    ]
    for i, case in enumerate(cases):
        with pytest.raises((ValueError, TypeError, IndexError, OSError)):
            case()
            print("case", i, "did not raise")


def test_every_public_function_is_documented():
    import inspect

    import graft.nn
    import graft.random
    import graft.tree_util

    missing = []
    for mod in (graft, graft.numpy, graft.lax, graft.random, graft.nn, graft.tree_util):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and not (obj.__doc__ or "").strip():
                missing.append(f"{mod.__name__}.{name}")
    assert missing == []


def test_threads_trace_one_function_with_captures():
    # Several threads trace (not only run) the same transformed function,
    # whose inner function captures a traced value, at different shapes.
    g = graft.jit(lambda x, a: graft.grad(lambda y: gnp.sum(a * y ** 2))(x))
    errors, results = [], {}

    def work(n):
        try:
            x = np.arange(1.0, n + 1.0)
            results[n] = (g(x, np.float64(1.5)), 3.0 * x)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(n,)) for n in range(2, 8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert errors == []
    for got, want in results.values():
        np.testing.assert_allclose(got, want, rtol=1e-14)
