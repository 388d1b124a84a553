"""Round time when client sizes differ: does a client padded to the largest one pay for its padding?

    python benchmarks/speed/padded_clients.py [--rounds 2] [--strategy auto]

Clients are padded to the largest one, and every client walks the largest client's minibatch plan;
the steps whose minibatch holds no real sample are skipped (``pflax.core.train.step_if``).
This times FedAvg rounds (the FMNIST CNN, batch 50, 5 local epochs, random data: speed does not depend
on the values) for two layouts of 30 clients:

* **equal**: 600 images each;
* **dirichlet**: the sizes of 30 clients of FedPAC Table 8's partition (Dir(1.0) over 100 clients of
  Fashion-MNIST's 60,000 training labels, seed 0), every client padded to the largest of them.

It reports seconds per round (the median of ``--rounds`` timed rounds after a first, compiling one),
with the real and the padded minibatch steps of each layout. When padding is free, the time follows
the real steps; when it is not, the padded ones. Writes ``benchmarks/results/speed/padded_clients.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "speed" / "padded_clients.json"
BATCH, EPOCHS, PARTICIPANTS = 50, 5, 30


def table8_sizes(participants: int = PARTICIPANTS) -> list[int]:
    """Training sizes of the first ``participants`` clients of Table 8's Dirichlet partition (seed 0)."""
    from pflax.data.partition import dirichlet_matched

    labels = np.repeat(np.arange(10), 6000)  # Fashion-MNIST's training labels: 6000 per class
    clients = dirichlet_matched(labels, np.repeat(np.arange(10), 1000), 100, 1.0, seed=0)[0]
    return [len(c) for c in clients[:participants]]


def steps(sizes: list[int]) -> tuple[int, int]:
    """(real, padded) minibatch steps of one round: each client's own against the largest client's."""
    per_epoch = lambda n: -(-n // BATCH)
    return EPOCHS * sum(map(per_epoch, sizes)), EPOCHS * len(sizes) * per_epoch(max(sizes))


def time_rounds(sizes: list[int], rounds: int, strategy: str) -> list[float]:
    """Seconds of each of ``rounds`` FedAvg rounds after a first (compiling) one."""
    import jax
    import jax.numpy as jnp

    from pflax.algorithms import fedavg
    from pflax.core.execution import Execution
    from pflax.data import ClientData
    from pflax.experiment import loop
    from pflax.models import fedpac_cnn

    rng = np.random.default_rng(0)
    m, n_max = len(sizes), max(sizes)
    mask = np.arange(n_max)[None, :] < np.asarray(sizes)[:, None]
    x = rng.standard_normal((m, n_max, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=(m, n_max)).astype(np.int32)
    batch = ClientData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), jnp.arange(m, dtype=jnp.int32))
    cfg = fedavg.Config(execution=Execution(strategy), local_epochs=EPOCHS, batch_size=BATCH)
    state = fedavg.init(jax.random.PRNGKey(0), fedpac_cnn("fmnist"), batch.x[0], m, cfg)
    # pflax's one experiment loop times each round (its `seconds`, evaluation apart); its test set is the
    # training data, evaluated once after the last round
    _, record = loop(fedavg, state, batch, batch, rounds=rounds + 1)
    return [entry["seconds"] for entry in record.history[1:]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per layout, after a compiling one")
    parser.add_argument("--strategy", default="auto", help="the execution strategy (pflax.core.execution)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    import jax

    layouts = {"equal": [600] * PARTICIPANTS, "dirichlet": table8_sizes()}
    rows = {}
    for name, sizes in layouts.items():
        real, padded = steps(sizes)
        seconds = time_rounds(sizes, args.rounds, args.strategy)
        rows[name] = {"sizes": sizes, "real_steps": real, "padded_steps": padded,
                      "seconds_per_round": statistics.median(seconds), "rounds_timed": seconds}
        print(f"{name:9s}: {sum(sizes)} images, largest {max(sizes)}; steps real {real}, padded {padded}; "
              f"{statistics.median(seconds):.1f} s per round")
    ratio = rows["dirichlet"]["seconds_per_round"] / rows["equal"]["seconds_per_round"]
    real_ratio = rows["dirichlet"]["real_steps"] / rows["equal"]["real_steps"]
    padded_ratio = rows["dirichlet"]["padded_steps"] / rows["equal"]["padded_steps"]
    print(f"dirichlet / equal: time {ratio:.2f}; real steps {real_ratio:.2f}; padded steps {padded_ratio:.2f}")
    result = {"command": "python benchmarks/speed/padded_clients.py "
                         f"--rounds {args.rounds} --strategy {args.strategy}",
              "strategy": args.strategy, "backend": jax.default_backend(), "machine": platform.processor() or
              platform.machine(), "layouts": rows, "time_ratio": ratio, "real_step_ratio": real_ratio,
              "padded_step_ratio": padded_ratio}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
