"""How fast can one training step of the FMNIST CNN be on this CPU? A floor for the acceptance ratio.

A FedPAC round is ~1,400 minibatch steps of the same CNN in pflax and in PyTorch, so the round-time
ratio is set by the time of one step. This script measures, in one process:

* ``pflax_step_ms``: one SGD step (forward, backward, update; batch 50) as the round runs it: pflax's
  ``local_train`` with ``pytorch_sgd`` (lr 0.01, momentum 0.5, weight decay 5e-4) and the masked
  cross-entropy, 5 epochs of 600 samples in one jit (median run, divided by its 60 steps);
* ``torch_step_ms``: the same step in PyTorch (``torch_reference`` model, ``torch.optim.SGD``, same
  hyper-parameters);
* ``gemm_ms``: the 11 matrix products such a step cannot avoid (forward, weight and input gradients of
  the two convolutions as im2col products and of the two dense layers; no input gradient for the first
  layer), each timed alone by XLA at the step's shapes, and their FLOP rate; ``peak_gflops`` is XLA's
  rate on a large 2048^3 product, the practical peak of the machine.

``floor_ratio = gemm_ms / torch_step_ms`` is the pflax/PyTorch ratio a step would reach if everything but
those products (patch extraction and its transpose, activations, pooling, loss, optimizer) cost nothing.

Also recorded: the step with XLA's own convolution (``conv_impl="native"``) inside the scan, and the
pflax step under the XLA:CPU library back-ends this jaxlib offers (XNNPACK, oneDNN, YNNPACK fusions;
each in a fresh process, since ``XLA_FLAGS`` is read at start-up).

    python benchmarks/speed/step_floor.py        # -> benchmarks/results/speed/step_floor.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "speed" / "step_floor.json"
BATCH = 50
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.5, 5e-4  # the papers' common local SGD

# (name, M, K, N) of C[M, N] = A[M, K] @ B[K, N] for one step of the FMNIST CNN at batch 50.
FMNIST_GEMMS = [
    ("conv1 forward", BATCH * 24 * 24, 25, 16),
    ("conv1 weight grad", 25, BATCH * 24 * 24, 16),
    ("conv2 forward", BATCH * 10 * 10, 400, 32),
    ("conv2 weight grad", 400, BATCH * 10 * 10, 32),
    ("conv2 input grad", BATCH * 10 * 10, 32, 400),
    ("fc1 forward", BATCH, 800, 128),
    ("fc1 weight grad", 800, BATCH, 128),
    ("fc1 input grad", BATCH, 128, 800),
    ("fc2 forward", BATCH, 128, 10),
    ("fc2 weight grad", 128, BATCH, 10),
    ("fc2 input grad", BATCH, 10, 128),
]


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def gemm_times(reps: int) -> tuple[list[dict], float]:
    import jax

    key = jax.random.PRNGKey(0)
    rows = []
    for name, m, k, n in FMNIST_GEMMS:
        a, b = jax.random.normal(key, (m, k)), jax.random.normal(key, (k, n))
        f = jax.jit(lambda a, b: a @ b)
        jax.block_until_ready(f(a, b))
        ms = median_ms(lambda: jax.block_until_ready(f(a, b)), reps)
        rows.append({"name": name, "m": m, "k": k, "n": n, "ms": ms, "gflops": 2 * m * k * n / ms / 1e6})
    big = jax.random.normal(key, (2048, 2048))
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(big))
    peak = 2 * 2048**3 / median_ms(lambda: jax.block_until_ready(f(big)), 10) / 1e6
    return rows, peak


XLA_FLAG_VARIANTS = [
    "--xla_cpu_use_xnnpack=true",
    "--xla_cpu_experimental_xnn_fusion_type=dot,eltwise,individual_convolution",
    "--xla_cpu_use_onednn=true",
    "--xla_cpu_experimental_ynn_fusion_type=individual_dot,individual_convolution",
]


def pflax_step_ms(epochs: int = 5, samples: int = 600, conv_impl: str = "auto") -> float:
    """Per-step time of pflax's own client training (``local_train`` with ``pytorch_sgd``, masked
    cross-entropy), exactly the loop FedAvg's and FedPAC's clients run."""
    import jax

    from pflax.core.losses import cross_entropy, masked_mean
    from pflax.core.optim import pytorch_sgd
    from pflax.core.train import local_train, steps_per_epoch
    from pflax.models import fedpac_fmnist_cnn

    model = fedpac_fmnist_cnn(conv_impl=conv_impl)
    key = jax.random.PRNGKey(0)
    data = {"x": jax.random.normal(key, (samples, 28, 28, 1)), "y": jax.random.randint(key, (samples,), 0, 10)}
    mask = jax.numpy.ones((samples,), bool)
    params = model.init(key, data["x"][:1])

    def loss(p, batch, w):
        return masked_mean(cross_entropy(model.apply(p, batch["x"]), batch["y"]), w)

    train = jax.jit(lambda p: local_train(p, loss, data, mask, key, epochs=epochs, batch_size=BATCH,
                                          optimizer=pytorch_sgd(LR, MOMENTUM, WEIGHT_DECAY)))
    jax.block_until_ready(train(params))
    steps = epochs * steps_per_epoch(samples, BATCH)
    return median_ms(lambda: jax.block_until_ready(train(params)), 5) / steps


def torch_step_ms(reps: int) -> float:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).parent))
    import torch_reference as tr

    torch.manual_seed(0)
    model = tr.make_model("fmnist")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    x, y = torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x)[1], y).backward()
        opt.step()

    for _ in range(20):
        step()
    return median_ms(step, reps)


def flag_variants() -> list[dict]:
    rows = []
    for flags in XLA_FLAG_VARIANTS:
        env = {**os.environ, "XLA_FLAGS": flags}
        proc = subprocess.run([sys.executable, __file__, "--pflax-step-only"], env=env, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("STEP_MS ")]
        rows.append({"xla_flags": flags, "pflax_step_ms": float(lines[-1].split()[1]) if lines else None,
                     "error": None if lines else proc.stderr[-500:]})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    if "--pflax-step-only" in sys.argv:
        print(f"STEP_MS {pflax_step_ms()}", flush=True)
        return
    import torch

    reps = 200
    rows, peak = gemm_times(reps)
    gemm_ms = sum(r["ms"] for r in rows)
    flops = sum(2 * r["m"] * r["k"] * r["n"] for r in rows)
    pf, th = pflax_step_ms(), torch_step_ms(reps)
    native = pflax_step_ms(epochs=1, samples=BATCH * 6, conv_impl="native")
    result = {
        "model": "fedpac_fmnist_cnn", "batch": BATCH, "step_gflop": flops / 1e9,
        "pflax_step_ms": pf, "torch_step_ms": th, "step_ratio": pf / th,
        "gemm_ms": gemm_ms, "gemm_gflops": flops / gemm_ms / 1e6, "peak_gflops": peak,
        "floor_ratio": gemm_ms / th, "peak_floor_ratio": flops / peak / 1e6 / th,
        "pflax_step_ms_native_conv": native, "xla_flag_variants": flag_variants(),
        "gemms": rows, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    for r in rows:
        print(f"{r['name']:18s} {r['m']:6d}x{r['k']:5d}x{r['n']:4d}  {r['ms']:.3f} ms  {r['gflops']:.0f} GFLOP/s")
    print(json.dumps({k: v for k, v in result.items() if k != "gemms"}, indent=1))


if __name__ == "__main__":
    main()
