"""The digits CNN of examples/digits_cnn.graft (or, with `--model mlp`, the
MLP of examples/digits_mlp.graft) trained by JAX + optax, by PyTorch
(eager, torch.optim.Adam) and by `graft train`, side by side: same
architecture, initial scales, data split (the same SplitMix64 shuffle as
graft train), batch order, optimizer (Adam with warm-up + cosine), epochs
and batch size. PyTorch starts from JAX's initial parameters. Prints wall
time per step (whole loop: batching, steps and the per-epoch test
evaluation) and the final test accuracy of each.

    pip install jax optax numpy torch
    cargo build --release -p graft-cli
    python3 bench/train_digits.py [--model cnn|mlp] [--epochs 30] [--threads 1|all]

Without torch installed the PyTorch row says so and the rest still runs.
"""
import argparse, os, re, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=30)
ap.add_argument("--threads", default="1")
ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
args = ap.parse_args()
if args.threads == "1":
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["RAYON_NUM_THREADS"] = "1"

import numpy as np
import jax, jax.numpy as jnp, optax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BS, LR, SEED = 64, 1e-2, 0
d = np.load(os.path.join(ROOT, "examples/data/digits.npz"))
x_all, y_all = d["x"], d["y"]

M = (1 << 64) - 1
class Mix:
    def __init__(self, s): self.s = s & M
    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        return z ^ (z >> 31)
    def permutation(self, n):
        p = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.next() % (i + 1)
            p[i], p[j] = p[j], p[i]
        return p

rows = len(y_all)
order = Mix(SEED ^ 0x5EED).permutation(rows)
n_test = round(rows * 0.2)
test_idx, train_idx = order[:n_test], order[n_test:]
steps = len(train_idx) // BS
total = steps * args.epochs

def init_cnn(key):
    k1, k = jax.random.split(key)
    k2, k3 = jax.random.split(k)
    n = jax.random.normal
    return (n(k1, (16, 1, 3, 3)) * np.sqrt(2 / 9), jnp.zeros(16), n(k2, (32, 16, 3, 3)) * np.sqrt(2 / 144),
            jnp.zeros(32), n(k3, (128, 10)) * np.sqrt(1 / 128), jnp.zeros(10))

def init_mlp(key):
    # examples/digits_mlp.graft: 64 -> 128 (relu) -> 10.
    k1, k2 = jax.random.split(key)
    n = jax.random.normal
    return (n(k1, (64, 128)) * np.sqrt(2 / 64), jnp.zeros(128), n(k2, (128, 10)) * np.sqrt(1 / 128), jnp.zeros(10))

init = init_cnn if args.model == "cnn" else init_mlp

def pool(h):
    return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

def logits_cnn(p, x):
    c1, b1, c2, b2, w, bw = p
    img = x.reshape(-1, 1, 8, 8)
    conv = lambda a, k: jax.lax.conv_general_dilated(a, k, (1, 1), ((1, 1), (1, 1)))
    h1 = pool(jax.nn.relu(conv(img, c1) + b1[None, :, None, None]))
    h2 = pool(jax.nn.relu(conv(h1, c2) + b2[None, :, None, None]))
    return h2.reshape(-1, 128) @ w + bw

def logits_mlp(p, x):
    w1, b1, w2, b2 = p
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2

logits = logits_cnn if args.model == "cnn" else logits_mlp

def loss(p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits(p, x), y).mean()

opt = optax.adam(optax.warmup_cosine_decay_schedule(0.0, LR, total // 10, total, LR * 0.1))

@jax.jit
def step(p, s, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s, l

@jax.jit
def accuracy(p, x, y):
    return (jnp.argmax(logits(p, x), 1) == y).mean()

p = init(jax.random.PRNGKey(SEED))
s = opt.init(p)
xt, yt = x_all[test_idx], y_all[test_idx]
step(p, s, x_all[train_idx[:BS]], y_all[train_idx[:BS]])[2].block_until_ready()  # compile
accuracy(p, xt, yt).block_until_ready()
t0 = time.perf_counter()
for epoch in range(args.epochs):
    perm = Mix(((SEED ^ 0x5EED) + 0x1000 * (epoch + 1)) & M).permutation(len(train_idx))
    for i in range(steps):
        idx = [train_idx[j] for j in perm[i * BS:(i + 1) * BS]]
        p, s, l = step(p, s, x_all[idx], y_all[idx])
    acc = float(accuracy(p, xt, yt))
jax_s = time.perf_counter() - t0

def sched(c):
    # optax.warmup_cosine_decay_schedule(0, LR, total // 10, total, LR * 0.1)
    w = total // 10
    if c < w:
        return LR * c / w
    frac = min(c - w, total - w) / max(total - w, 1)
    return LR * 0.1 + (LR - LR * 0.1) * 0.5 * (1 + np.cos(np.pi * frac))

def torch_run(p0):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if args.threads == "1":
        torch.set_num_threads(1)
    tp = [torch.tensor(np.asarray(a), dtype=torch.float32).requires_grad_() for a in p0]
    def t_logits(x):
        if args.model == "mlp":
            w1, b1, w2, b2 = tp
            return F.relu(x @ w1 + b1) @ w2 + b2
        c1, b1, c2, b2, w, bw = tp
        img = x.reshape(-1, 1, 8, 8)
        h1 = F.max_pool2d(F.relu(F.conv2d(img, c1, b1, padding=1)), 2)
        h2 = F.max_pool2d(F.relu(F.conv2d(h1, c2, b2, padding=1)), 2)
        return h2.reshape(-1, 128) @ w + bw
    topt = torch.optim.Adam(tp, lr=LR)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda c: sched(c) / LR)
    tx = torch.tensor(x_all, dtype=torch.float32)
    ty = torch.tensor(y_all, dtype=torch.int64)
    txt, tyt = tx[test_idx], ty[test_idx]
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        perm = Mix(((SEED ^ 0x5EED) + 0x1000 * (epoch + 1)) & M).permutation(len(train_idx))
        for i in range(steps):
            idx = torch.tensor([train_idx[j] for j in perm[i * BS:(i + 1) * BS]])
            topt.zero_grad(set_to_none=True)
            l = F.cross_entropy(t_logits(tx[idx]), ty[idx])
            l.backward()
            topt.step()
            tsched.step()
        with torch.no_grad():
            acc = float((t_logits(txt).argmax(1) == tyt).float().mean())
    return time.perf_counter() - t0, acc

torch_res = torch_run(init(jax.random.PRNGKey(SEED)))

exe = os.path.join(ROOT, "target/release/graft")
out = subprocess.run([exe, "train", os.path.join(ROOT, f"examples/digits_{args.model}.graft"), "--data",
                      os.path.join(ROOT, "examples/data/digits.npz"), "--epochs", str(args.epochs), "--lr", str(LR),
                      "--schedule", "warmup-cosine", "--batch-size", str(BS), "--out-dir", "/tmp/graft_digits_bench"],
                     capture_output=True, text=True, check=True).stdout
m = re.search(r"\((\d+) steps, ([\d.]+) s\).*test accuracy ([\d.]+)%", out)
g_steps, g_s, g_acc = int(m.group(1)), float(m.group(2)), float(m.group(3))
print(f"{args.model:8} {'ms/step':>8} {'test accuracy':>14}")
print(f"{'JAX':8} {1e3 * jax_s / total:8.3f} {100 * acc:13.2f}%")
if torch_res is None:
    print(f"{'PyTorch':8} (not installed: pip install torch)")
else:
    print(f"{'PyTorch':8} {1e3 * torch_res[0] / total:8.3f} {100 * torch_res[1]:13.2f}%")
print(f"{'graft':8} {1e3 * g_s / g_steps:8.3f} {g_acc:13.2f}%")
print(f"graft / JAX time per step: {g_s / g_steps / (jax_s / total):.2f} (threads: {args.threads}, {total} steps)")
if torch_res is not None:
    fastest = min(jax_s, torch_res[0]) / total
    print(f"graft / PyTorch: {g_s / g_steps / (torch_res[0] / total):.2f}; graft / the faster of the two: "
          f"{g_s / g_steps / fastest:.2f}")
