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


# ---- the GIL is released while a step runs ----

def _big_trainer(seed):
    r = np.random.default_rng(seed)
    params = {"w1": r.standard_normal((256, 256)) * 0.05, "w2": r.standard_normal((256, 8)) * 0.05}

    def loss(p, b):
        h = gnp.tanh(b["x"] @ p["w1"])
        for _ in range(3):
            h = gnp.tanh(h @ p["w1"])
        return gnp.mean((h @ p["w2"] - b["y"]) ** 2)

    batch = {"x": r.standard_normal((512, 256)), "y": r.standard_normal((512, 8))}
    return nn.Trainer(loss, nn.optim.sgd(0.1), params=params), batch


def test_step_and_eval_release_the_gil_while_they_run():
    import threading
    import time

    tr, batch = _big_trainer(0)
    tr.step(batch)  # traced and compiled here
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    th = threading.Thread(target=spin)
    th.start()
    try:
        time.sleep(0.02)
        inside = {"step": 0, "eval": 0}
        tr.eval(batch)
        for _ in range(3):
            for what in inside:
                call = tr._t.step if what == "step" else tr._t.eval  # the native call alone
                t0 = time.perf_counter()
                call(tr._batch(batch))
                t1 = time.perf_counter()
                # Ticks strictly inside the native call: the other thread
                # ran Python while the call held no GIL.
                inside[what] += sum(1 for t in ticks if t0 + 0.1 * (t1 - t0) < t < t1 - 0.1 * (t1 - t0))
    finally:
        stop.set()
        th.join()
    assert inside["step"] > 0 and inside["eval"] > 0, inside


def test_steps_on_two_threads_match_sequential_steps():
    import threading

    def run(seed, out):
        tr, batch = _big_trainer(seed)
        out[seed] = [tr.step(batch) for _ in range(3)] + [tr.params["w2"]]

    seq = {}
    for s in (1, 2):
        run(s, seq)
    par = {}
    threads = [threading.Thread(target=run, args=(s, par)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in (1, 2):
        assert par[s][:3] == seq[s][:3]
        np.testing.assert_array_equal(par[s][3], seq[s][3])


# ---- Conv1d, BatchNorm, MultiHeadAttention, LSTM, GRU ----

def _np_conv1d(x, w, b, stride, padding, dilation):
    n, c, L = x.shape
    o, _, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    out_len = (L + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    y = np.zeros((n, o, out_len))
    for t in range(out_len):
        win = xp[:, :, t * stride: t * stride + dilation * (k - 1) + 1: dilation]  # [n, c, k]
        y[:, :, t] = np.einsum("nck,ock->no", win, w)
    return y + b[None, :, None]


def _fit(model, batch, loss, steps=20, lr=1e-2):
    tr = nn.Trainer(model, nn.optim.adam(lr), loss=loss)
    losses = [tr.step(batch) for _ in range(steps)]
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < 0.7 * losses[0], losses
    return tr


def test_conv1d_matches_numpy_and_trains():
    r = np.random.default_rng(3)
    m = nn.Conv1d(3, 5, 3, stride=2, padding=1, dilation=2).init(seed=1, dtype=np.float64)
    p = m.parameters()
    assert [k for k, _ in m.named_parameters()] == ["weight", "bias"] and p["weight"].shape == (5, 3, 3)
    x = r.standard_normal((2, 3, 11))
    np.testing.assert_allclose(m(x), _np_conv1d(x, p["weight"], p["bias"], 2, 1, 2), rtol=1e-12, atol=1e-12)
    model = nn.Sequential(nn.Conv1d(3, 4, 3, padding=1), nn.relu, nn.Flatten(), nn.Linear(44, 2))
    _fit(model, {"x": x.astype(np.float32), "y": r.standard_normal((2, 2)).astype(np.float32)},
         lambda out, b: nn.mse(out, b["y"]))


def test_batchnorm_train_eval_running_stats_and_training(tmp_path):
    r = np.random.default_rng(4)
    x = r.standard_normal((8, 3, 5)) * 2.0 + 1.0
    m = nn.BatchNorm1d(3, momentum=0.25).init(dtype=np.float64)
    assert sorted(m.parameters()) == ["bias", "weight"] and sorted(m.buffers()) == ["running_mean", "running_var"]
    p = {"weight": r.standard_normal(3), "bias": r.standard_normal(3)}
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    want = (x - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5) * p["weight"][None, :, None] + p["bias"][None, :, None]
    y, bufs = m.apply_with_buffers(p, m.buffers(), x, train=True)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(bufs["running_mean"], 0.25 * mean, rtol=1e-12)
    np.testing.assert_allclose(bufs["running_var"], 0.75 + 0.25 * var * 40 / 39, rtol=1e-12)
    # Evaluation normalises with the running statistics given.
    y_eval = m.apply(p, x, buffers=bufs)
    want_eval = (x - bufs["running_mean"][None, :, None]) / np.sqrt(bufs["running_var"][None, :, None] + 1e-5) \
        * p["weight"][None, :, None] + p["bias"][None, :, None]
    np.testing.assert_allclose(y_eval, want_eval, rtol=1e-10, atol=1e-10)
    # Training: the running statistics are buffers of the step.
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(3), nn.relu, nn.Flatten(), nn.Linear(12, 1))
    batch = {"x": x.astype(np.float32), "y": r.standard_normal((8, 1)).astype(np.float32)}
    tr = _fit(model, batch, lambda out, b: nn.mse(out, b["y"]), steps=30)
    assert sorted(tr.buffers) == ["1.running_mean", "1.running_var"]
    assert np.abs(tr.buffers["1.running_mean"]).max() > 0
    tr.update_model()
    np.testing.assert_array_equal(model.buffers()["1.running_var"], tr.buffers["1.running_var"])
    assert np.isfinite(tr.eval(batch))
    # Checkpoints carry the buffers: a resumed trainer steps identically.
    tr.save(tmp_path / "bn.safetensors")
    tr2 = nn.Trainer(model, nn.optim.adam(1e-2), loss=lambda out, b: nn.mse(out, b["y"]))
    tr2.load(tmp_path / "bn.safetensors")
    for k, v in tr.buffers.items():
        np.testing.assert_array_equal(tr2.buffers[k], v)
    assert tr2.step(batch) == tr.step(batch)
    for k, v in tr.buffers.items():
        np.testing.assert_array_equal(tr2.buffers[k], v)


def _np_mha(p, x, heads, causal):
    b, L, d = x.shape
    dh = d // heads

    def proj(w, bias):
        return (x @ p[w].T + p[bias]).reshape(b, L, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = proj("wq", "bq"), proj("wk", "bk"), proj("wv", "bv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
    if causal:
        s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    a = s / s.sum(-1, keepdims=True)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(b, L, d)
    return o @ p["wo"].T + p["bo"]


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_matches_numpy_and_trains(causal):
    r = np.random.default_rng(5)
    m = nn.MultiHeadAttention(8, 2, causal=causal).init(seed=2, dtype=np.float64)
    p = {k: v + 0.1 * r.standard_normal(v.shape) for k, v in m.parameters().items()}  # non-zero biases
    x = r.standard_normal((3, 4, 8))
    np.testing.assert_allclose(m.apply(p, x), _np_mha(p, x, 2, causal), rtol=1e-10, atol=1e-10)
    model = nn.Sequential(nn.MultiHeadAttention(8, 2, causal=causal), nn.Flatten(), nn.Linear(32, 1))
    _fit(model, {"x": x.astype(np.float32), "y": r.standard_normal((3, 1)).astype(np.float32)},
         lambda out, b: nn.mse(out, b["y"]))


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _np_lstm(p, x, h, c):
    H = h.shape[1]
    outs = []
    for t in range(x.shape[1]):
        g = x[:, t] @ p["weight_ih"].T + p["bias_ih"] + h @ p["weight_hh"].T + p["bias_hh"]
        i, f, gg, o = _sig(g[:, :H]), _sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), _sig(g[:, 3 * H:])
        c = f * c + i * gg
        h = o * np.tanh(c)
        outs.append(h)
    return np.stack(outs, 1), h, c


def _np_gru(p, x, h):
    H = h.shape[1]
    outs = []
    for t in range(x.shape[1]):
        gi = x[:, t] @ p["weight_ih"].T + p["bias_ih"]
        gh = h @ p["weight_hh"].T + p["bias_hh"]
        rr, z = _sig(gi[:, :H] + gh[:, :H]), _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = np.tanh(gi[:, 2 * H:] + rr * gh[:, 2 * H:])
        h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs, 1), h


def test_lstm_and_gru_match_numpy_and_train():
    r = np.random.default_rng(6)
    x = r.standard_normal((2, 5, 3))
    h0, c0 = r.standard_normal((2, 4)), r.standard_normal((2, 4))
    lstm = nn.LSTM(3, 4).init(seed=3, dtype=np.float64)
    p = lstm.parameters()
    assert p["weight_ih"].shape == (16, 3) and np.abs(p["weight_hh"]).max() <= 0.5
    np.testing.assert_allclose(lstm(x), _np_lstm(p, x, np.zeros((2, 4)), np.zeros((2, 4)))[0], rtol=1e-10, atol=1e-12)

    @graft.jit
    def run_lstm(p, x, h, c):
        from graft.nn import Context

        cx = Context(p, False, None, x)
        list(lstm.named_modules())
        y, (h2, c2) = lstm.run(cx, x, (h, c))
        return y, h2, c2

    for a, b in zip(run_lstm(p, x, h0, c0), _np_lstm(p, x, h0, c0)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    gru = nn.GRU(3, 4).init(seed=4, dtype=np.float64)
    q = gru.parameters()
    np.testing.assert_allclose(gru(x), _np_gru(q, x, np.zeros((2, 4)))[0], rtol=1e-10, atol=1e-12)
    for layer in (nn.LSTM(3, 6), nn.GRU(3, 6)):
        model = nn.Sequential(layer, nn.Flatten(), nn.Linear(30, 1))
        _fit(model, {"x": x.astype(np.float32), "y": r.standard_normal((2, 1)).astype(np.float32)},
             lambda out, b: nn.mse(out, b["y"]))
    with pytest.raises(graft.GraftError, match="expected an input"):
        nn.LSTM(4, 4)(x)


def test_eval_matches_the_loss_of_the_next_step():
    tr, batch = _big_trainer(5)
    first = tr.eval(batch)
    np.testing.assert_allclose(first, tr.step(batch), rtol=1e-12)  # the loss before the update
    assert tr.eval(batch) < first
