"""graft.nn: modules with named parameters, optimizers against optax, the
compiled Trainer (step, eval, accumulate, checkpoints), a model trained to
a stated accuracy."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import graft
import graft.nn as nn
import graft.numpy as gnp

REPO = Path(__file__).resolve().parents[2]


# ---- optimizers against optax: 100 steps of the same loss and data ----

def _regression_data(seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal((32, 4))
    y = r.standard_normal((32, 3))
    params = {"layer": {"w": r.standard_normal((4, 3)) * 0.5}, "b": r.standard_normal(3) * 0.1}
    return params, x, y


def _loss_graft(p, batch):
    h = gnp.tanh(batch["x"] @ p["layer"]["w"] + p["b"])
    return gnp.mean((h - batch["y"]) ** 2)


def _loss_jax(p, x, y):
    h = jnp.tanh(x @ p["layer"]["w"] + p["b"])
    return jnp.mean((h - y) ** 2)


def _optax_run(tx, params, x, y, steps):
    p = jax.tree_util.tree_map(jnp.asarray, params)
    state = tx.init(p)
    losses = []
    for _ in range(steps):
        l, g = jax.value_and_grad(_loss_jax)(p, x, y)
        u, state = tx.update(g, state, p)
        p = optax.apply_updates(p, u)
        losses.append(float(l))
    return p, losses


def _graft_run(opt, params, x, y, steps):
    tr = nn.Trainer(_loss_graft, opt, params=params)
    losses = [tr.step({"x": x, "y": y}) for _ in range(steps)]
    return tr, losses


def _decay_w(p):
    return jax.tree_util.tree_map_with_path(lambda path, _: "w" in jax.tree_util.keystr(path), p)


CASES = {
    "adam": (lambda: nn.optim.adam(0.01), lambda: optax.adam(0.01)),
    "sgd_momentum": (lambda: nn.optim.sgd(0.05, momentum=0.9), lambda: optax.sgd(0.05, momentum=0.9)),
    "nesterov": (lambda: nn.optim.sgd(0.05, momentum=0.9, nesterov=True),
                 lambda: optax.sgd(0.05, momentum=0.9, nesterov=True)),
    "sgd": (lambda: nn.optim.sgd(0.1), lambda: optax.sgd(0.1)),
    "adamw_masked": (lambda: nn.optim.adamw(0.01, weight_decay=0.1, mask=lambda n: n.endswith("w")),
                     lambda: optax.adamw(0.01, weight_decay=0.1, mask=_decay_w)),
    # eps = 1e-4: with 1e-8, g / sqrt(v + eps) is nearly sign(g) for tiny
    # gradients, which turns summation-order rounding into another trajectory.
    "rmsprop": (lambda: nn.optim.rmsprop(0.002, decay=0.9, eps=1e-4), lambda: optax.rmsprop(0.002, decay=0.9, eps=1e-4)),
    "adagrad": (lambda: nn.optim.adagrad(0.1), lambda: optax.adagrad(0.1)),
    "lion": (lambda: nn.optim.lion(0.001, weight_decay=0.01), lambda: optax.lion(0.001, weight_decay=0.01)),
    "adam_warmup_cosine_clip": (
        lambda: nn.optim.adam(nn.optim.warmup_cosine_decay_schedule(0.0, 0.02, 10, 100, 0.001), clip=0.5),
        lambda: optax.chain(optax.clip_by_global_norm(0.5),
                            optax.adam(optax.warmup_cosine_decay_schedule(0.0, 0.02, 10, 100, 0.001)))),
    "sgd_piecewise": (lambda: nn.optim.sgd(nn.optim.piecewise_constant_schedule(0.1, {30: 0.5, 60: 0.1})),
                      lambda: optax.sgd(optax.piecewise_constant_schedule(0.1, {30: 0.5, 60: 0.1}))),
    "momentum_cosine": (lambda: nn.optim.momentum(nn.optim.cosine_decay_schedule(0.05, 80, 0.1), 0.8),
                        lambda: optax.sgd(optax.cosine_decay_schedule(0.05, 80, 0.1), momentum=0.8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_optax_after_100_steps(name):
    ours, theirs = CASES[name]
    params, x, y = _regression_data()
    tr, losses = _graft_run(ours(), params, x, y, 100)
    p_ref, losses_ref = _optax_run(theirs(), params, x, y, 100)
    got = tr.params
    for a, b in [(got["layer"]["w"], p_ref["layer"]["w"]), (got["b"], p_ref["b"])]:
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(losses, losses_ref, rtol=1e-6)
    assert tr.step_count == 100
    assert losses[-1] < losses[0]


def test_optimizer_descriptions_are_checked():
    with pytest.raises(ValueError, match="nesterov needs a momentum"):
        nn.optim.sgd(0.1, nesterov=True)
    with pytest.raises(ValueError, match="clipping norm must be positive"):
        nn.optim.adam(0.1, clip=-1.0)
    with pytest.raises(ValueError, match="whole number of steps"):
        nn.optim.sgd(nn.optim.cosine_decay_schedule(0.1, 2.5))
    with pytest.raises(TypeError, match="graft.nn.optim"):
        nn.Trainer(_loss_graft, "adam", params=_regression_data()[0])
    assert nn.optim.adam(0.1).n_state == 2 and nn.optim.sgd(0.1).n_state == 0


# ---- modules ----

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.relu, nn.Linear(16, 8))

    def forward(self, cx, x):
        return x + self.mlp.forward(cx, self.norm.forward(cx, x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 3, bias=False)

    def forward(self, cx, ids):
        return self.head.forward(cx, self.blocks.forward(cx, self.embed.forward(cx, ids)))


def test_named_parameters_have_dotted_paths_in_declaration_order():
    net = Net().init(seed=3)
    names = [n for n, _ in net.named_parameters()]
    block = ["norm.weight", "norm.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]
    assert names == ["embed.weight"] + [f"blocks.{i}.{n}" for i in (0, 1) for n in block] + ["head.weight"]
    shapes = dict((n, a.shape) for n, a in net.named_parameters())
    assert shapes["blocks.1.mlp.0.weight"] == (16, 8) and shapes["head.weight"] == (3, 8)
    assert all(a.dtype == np.float32 for _, a in net.named_parameters())
    # PyTorch's initialisation: U(+-1/sqrt(fan_in)) for Linear, ones/zeros for LayerNorm.
    w = net.parameters()["blocks.0.mlp.0.weight"]
    assert np.abs(w).max() <= 1 / np.sqrt(8) and np.abs(w).max() > 0.5 / np.sqrt(8)
    assert np.array_equal(net.parameters()["blocks.0.norm.weight"], np.ones(8, np.float32))
    out = net(np.array([[1, 2, 3]], np.int32))
    assert out.shape == (1, 3, 3)


def test_init_depends_on_seed_and_path_only():
    a = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).init(seed=5, dtype=np.float64)
    b = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(2, 2)).init(seed=5, dtype=np.float64)
    c = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).init(seed=6, dtype=np.float64)
    pa, pb, pc = a.parameters(), b.parameters(), c.parameters()
    for k in pa:
        assert np.array_equal(pa[k], pb[k])
        assert not np.array_equal(pa[k], pc[k])


def test_module_apply_is_a_pure_traceable_function():
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).init(seed=0, dtype=np.float64)
    p = model.parameters()
    x = np.random.default_rng(0).standard_normal((4, 3))
    w0, b0, w1, b1 = p["0.weight"], p["0.bias"], p["2.weight"], p["2.bias"]
    want = np.tanh(x @ w0.T + b0) @ w1.T + b1
    np.testing.assert_allclose(model(x), want, rtol=1e-12)
    np.testing.assert_allclose(model.apply(p, x), want, rtol=1e-12)
    g = graft.grad(lambda q: gnp.sum(model.apply(q, x)))(p)
    assert set(g) == set(p)
    np.testing.assert_allclose(g["2.bias"], [4.0])


def test_conv_pool_flatten_model_shapes():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    model.init(seed=1)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "4.weight", "4.bias"]
    assert model.parameters()["0.weight"].shape == (4, 1, 3, 3)
    assert model(np.ones((2, 1, 8, 8), np.float32)).shape == (2, 2)


def test_load_parameters_lists_every_mismatch():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)).init()
    p = model.parameters()
    bad = dict(p)
    bad["0.weight"] = np.zeros((2, 2), np.float32)
    del bad["1.bias"]
    bad["extra"] = np.zeros(1, np.float32)
    with pytest.raises(ValueError) as e:
        model.load_parameters(bad)
    msg = str(e.value)
    assert "`0.weight` is float32[2, 2]" in msg and "`1.bias` is missing" in msg and "`extra` is not a parameter" in msg


def test_dropout_is_on_in_training_and_off_in_eval():
    model = nn.Sequential(nn.Dropout(0.5))
    x = np.ones((1000,), np.float32)
    assert np.array_equal(model(x), x)
    y = model.apply({}, x, train=True, rng=graft.random.key(0))
    kept = y != 0
    assert 400 < kept.sum() < 600 and np.all(y[kept] == 2.0)
    with pytest.raises(ValueError, match="rng"):
        model.apply({}, x, train=True)


# ---- the trainer ----

def _digits():
    d = np.load(REPO / "examples" / "data" / "digits.npz")
    x, y = d["x"], d["y"]
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def test_mlp_on_digits_reaches_95_percent_test_accuracy():
    (xtr, ytr), (xte, yte) = _digits()
    model = nn.Sequential(nn.Linear(64, 64), nn.relu, nn.Dropout(0.1), nn.Linear(64, 10)).init(seed=0)
    tr = nn.Trainer(model, nn.optim.adam(3e-3), loss=lambda out, b: nn.cross_entropy(out, b["y"]))
    assert tr._t.buffer_names == ["@rng"]
    first = None
    for epoch in range(15):
        for i in range(0, 1500, 100):
            l = tr.step({"x": xtr[i:i + 100], "y": ytr[i:i + 100]})
            first = l if first is None else first
    assert tr.eval({"x": xte, "y": yte}) < 0.3 < first
    tr.update_model()
    acc = float(np.mean(np.argmax(model(xte), axis=1) == yte))
    assert acc >= 0.95, acc


def test_trainer_names_params_and_state():
    params, x, y = _regression_data()
    tr = nn.Trainer(_loss_graft, nn.optim.adam(0.01), params=params)
    assert [n for n, _ in tr.named_parameters()] == ["layer.w", "b"]
    tr.step({"x": x, "y": y})
    st = tr.opt_state
    assert list(st) == ["layer.w", "b"] and [a.shape for a in st["layer.w"]] == [(4, 3), (4, 3)]
    # The step updated the parameters and left the caller's arrays alone.
    assert not np.array_equal(tr.params["b"], params["b"])
    with pytest.raises(ValueError, match="first stepped with"):
        tr.step({"x": x})


def test_eval_does_not_update_and_accumulate_averages_micro_batches():
    params, x, y = _regression_data()
    a = nn.Trainer(_loss_graft, nn.optim.sgd(0.1), params=params)
    b = nn.Trainer(_loss_graft, nn.optim.sgd(0.1), params=params)
    e = a.eval({"x": x, "y": y})
    assert a.eval({"x": x, "y": y}) == e and a.step_count == 0
    b.accumulate(4)
    la, lb = a.step({"x": x, "y": y}), b.step({"x": x, "y": y})
    assert la == pytest.approx(e, rel=1e-15)
    # Equal micro-batches: the mean of their mean-loss gradients is the full gradient.
    np.testing.assert_allclose(lb, la, rtol=1e-12)
    np.testing.assert_allclose(b.params["layer"]["w"], a.params["layer"]["w"], rtol=1e-12)
    with pytest.raises(graft.GraftError, match="micro-batches"):
        b.step({"x": x[:3], "y": y[:3]})


def test_checkpoint_round_trip_is_bitwise_and_resumes_identically(tmp_path):
    (xtr, ytr), _ = _digits()
    batches = [{"x": xtr[i:i + 50], "y": ytr[i:i + 50]} for i in range(0, 500, 50)]

    def make():
        model = nn.Sequential(nn.Linear(64, 32), nn.relu, nn.Dropout(0.2), nn.Linear(32, 10)).init(seed=1)
        return nn.Trainer(model, nn.optim.adamw(1e-2, weight_decay=1e-3), loss=lambda o, b: nn.cross_entropy(o, b["y"]))

    a = make()
    for b in batches[:5]:
        a.step(b)
    path = tmp_path / "ck.safetensors"
    a.save(path)
    c = make()
    c.load(path)
    assert c.step_count == 5
    for (n1, p1), (n2, p2) in zip(a.named_parameters(), c.named_parameters()):
        assert n1 == n2 and p1.tobytes() == p2.tobytes()
    for n in a.opt_state:
        assert all(s.tobytes() == t.tobytes() for s, t in zip(a.opt_state[n], c.opt_state[n]))
    assert [x.tobytes() for x in a._t.buffers] == [x.tobytes() for x in c._t.buffers]
    # Resuming: the same losses and parameters, bit for bit (dropout key included).
    assert [a.step(b) for b in batches[5:]] == [c.step(b) for b in batches[5:]]
    assert all(p.tobytes() == q.tobytes() for (_, p), (_, q) in zip(a.named_parameters(), c.named_parameters()))
    # The file is plain safetensors: names as expected.
    import json
    import struct

    raw = path.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["__metadata__"] == {"step": "5"}
    assert {"0.weight", "0.weight.opt.0", "0.weight.opt.1", "3.bias", "@rng"} <= set(header)


def test_checkpoint_mismatch_lists_every_problem(tmp_path):
    params, x, y = _regression_data()
    a = nn.Trainer(_loss_graft, nn.optim.adam(0.01), params=params)
    path = tmp_path / "a.safetensors"
    a.save(path)
    other = {"layer": {"w": np.zeros((4, 2))}, "c": np.zeros(3)}
    b = nn.Trainer(lambda p, bt: gnp.sum(p["layer"]["w"]) + gnp.sum(p["c"]), nn.optim.adam(0.01), params=other)
    before = b.params
    with pytest.raises(graft.GraftError) as e:
        b.load(path)
    msg = str(e.value)
    assert "`layer.w` is F64[4, 3]" in msg and "`c` is missing" in msg and "`b` is not a tensor of this model" in msg
    assert np.array_equal(b.params["layer"]["w"], before["layer"]["w"])
    (tmp_path / "junk.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(graft.GraftError, match="not a valid checkpoint"):
        a.load(tmp_path / "junk.safetensors")


def test_trainer_rejects_bad_input():
    params, x, y = _regression_data()
    with pytest.raises(TypeError, match="needs params"):
        nn.Trainer(_loss_graft, nn.optim.sgd(0.1))
    with pytest.raises(TypeError, match="loss="):
        nn.Trainer(nn.Linear(2, 2), nn.optim.sgd(0.1))
    with pytest.raises(TypeError, match="float"):
        nn.Trainer(_loss_graft, nn.optim.sgd(0.1), params={"n": np.arange(3)})
    tr = nn.Trainer(lambda p, b: gnp.sum(p["w"] * b["x"]), nn.optim.sgd(0.1), params={"w": np.ones(3)})
    with pytest.raises(graft.GraftError):
        tr.step({"x": np.ones(4)})
    tr2 = nn.Trainer(lambda p, b: p["w"] * b["x"], nn.optim.sgd(0.1), params={"w": np.ones(3)})
    with pytest.raises(TypeError, match="float scalar"):
        tr2.step({"x": np.ones(3)})

    def boom(p, b):
        raise RuntimeError("inside the loss")

    with pytest.raises(RuntimeError, match="inside the loss"):
        nn.Trainer(boom, nn.optim.sgd(0.1), params={"w": np.ones(3)}).step({"x": np.ones(3)})


def test_digits_example_trains_to_95_percent():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_digits", REPO / "examples" / "python" / "train_digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(verbose=False) >= 0.95
