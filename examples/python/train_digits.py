"""Train an MLP on the 8x8 handwritten digits with graft.nn: modules with
named parameters, AdamW with a warm-up cosine schedule, one compiled
training step per batch, a safetensors checkpoint.

    pip install ./python && python examples/python/train_digits.py

The data is examples/data/digits.npz (scikit-learn's copy of the UCI
digits); 1 500 images train, 297 test.
"""

import tempfile
import time
from pathlib import Path

import numpy as np

import graft.nn as nn

DATA = Path(__file__).resolve().parents[1] / "data" / "digits.npz"


def main(epochs: int = 20, verbose: bool = True) -> float:
    d = np.load(DATA)
    order = np.random.default_rng(0).permutation(len(d["x"]))
    x, y = d["x"][order], d["y"][order]
    (xtr, ytr), (xte, yte) = (x[:1500], y[:1500]), (x[1500:], y[1500:])

    model = nn.Sequential(nn.Linear(64, 128), nn.relu, nn.Dropout(0.1), nn.Linear(128, 10)).init(seed=0)
    steps = epochs * 15
    opt = nn.optim.adamw(nn.optim.warmup_cosine_decay_schedule(0.0, 3e-3, 20, steps), weight_decay=1e-4,
                         mask=lambda name: name.endswith("weight"))
    trainer = nn.Trainer(model, opt, loss=lambda out, batch: nn.cross_entropy(out, batch["y"]))
    if verbose:
        print("parameters:", ", ".join(f"{n} {a.shape}" for n, a in model.named_parameters()))
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    for epoch in range(epochs):
        perm = rng.permutation(1500)
        losses = [trainer.step({"x": xtr[perm[i:i + 100]], "y": ytr[perm[i:i + 100]]}) for i in range(0, 1500, 100)]
        if verbose and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1}: train loss {np.mean(losses):.4f}, "
                  f"test loss {trainer.eval({'x': xte, 'y': yte}):.4f}")
    trainer.update_model()
    acc = float(np.mean(np.argmax(model(xte), axis=1) == yte))
    with tempfile.TemporaryDirectory() as tmp:
        trainer.save(Path(tmp) / "digits.safetensors")
    if verbose:
        print(f"{trainer.step_count} steps in {time.perf_counter() - start:.2f} s; test accuracy {acc:.3f}")
    return acc


if __name__ == "__main__":
    main()
