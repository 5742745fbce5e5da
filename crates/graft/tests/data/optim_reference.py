"""Reference trajectories for graft's optimizers (crates/graft/src/optim.rs),
computed with optax in float64. Regenerate with

    pip install optax   # any recent version; 0.2.8 was used
    python3 crates/graft/tests/data/optim_reference.py > crates/graft/tests/data/optim_reference.json

The problem: linear regression, params w [4, 3] and b [3], loss
mean((x @ w + b - y)^2) on fixed data; 100 steps of each configuration from
the same initial point. The JSON holds the final w and b (flattened) and the
loss after the last step for every configuration, which the Rust test
`optim::matches_optax_after_100_steps` compares within 1e-6 relative.

RMSprop uses eps = 1e-4: with eps = 1e-8 its step g / sqrt(v + eps) is
nearly sign(g) for gradients near zero, which turns rounding differences
(XLA's and graft's summation orders differ) into different trajectories.
"""
import json, math
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import optax

N, D, K = 16, 4, 3
x = jnp.array([[math.sin(0.37 * i + 1.1 * j) for j in range(D)] for i in range(N)])
y = jnp.array([[math.cos(0.23 * i - 0.7 * k) for k in range(K)] for i in range(N)])
w0 = jnp.array([[0.1 * math.cos(i + 2.0 * j) for j in range(K)] for i in range(D)])
b0 = jnp.array([0.05 * (k - 1) for k in range(K)])

def loss(p):
    w, b = p
    return jnp.mean((x @ w + b - y) ** 2)

def decay_mask(p):
    # weight decay on w only (masks by parameter name in graft: "w")
    return (True, False)

CONFIGS = {
    "sgd": optax.sgd(0.1),
    "momentum": optax.sgd(0.05, momentum=0.9),
    "nesterov": optax.sgd(0.05, momentum=0.9, nesterov=True),
    "adam": optax.adam(0.01),
    "adamw": optax.adamw(0.01, weight_decay=0.1, mask=decay_mask),
    "rmsprop": optax.rmsprop(0.002, decay=0.9, eps=1e-4),
    "adagrad": optax.adagrad(0.1, initial_accumulator_value=0.1, eps=1e-7),
    "lion": optax.lion(0.001, b1=0.9, b2=0.99, weight_decay=0.01),
    "adam_cosine_clip": optax.chain(
        optax.clip_by_global_norm(0.5),
        optax.adam(optax.warmup_cosine_decay_schedule(0.0, 0.02, 10, 100, 0.001)),
    ),
    "sgd_step_schedule": optax.sgd(optax.piecewise_constant_schedule(0.1, {30: 0.5, 60: 0.2})),
    "sgd_cosine": optax.sgd(optax.cosine_decay_schedule(0.1, 100, alpha=0.1)),
}

out = {}
for name, opt in CONFIGS.items():
    p = (w0, b0)
    s = opt.init(p)
    for _ in range(100):
        g = jax.grad(loss)(p)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
    out[name] = {"w": [float(v) for v in p[0].reshape(-1)], "b": [float(v) for v in p[1]], "loss": float(loss(p))}
print(json.dumps(out, indent=1))
