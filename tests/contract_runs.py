"""The runs behind ``tests/test_contract.py``, for every registry algorithm, reduced to what the tests
check so that they can run in another process:

* the golden replay (``golden_trajectories.replay``);
* two identical two-round runs on a federation with an empty client and a class that no client has:
  whether their outputs are identical, the round function's compilation-cache size after each round,
  and whether the state, the round metrics and the evaluation stay finite.

The suite compiles at a lower LLVM optimisation level (``tests/conftest.py``), while the golden digests
were recorded at XLA's default. ``python contract_runs.py OUT.json`` computes both kinds of run in one
process at the default level: the contract runs use the golden runs' shapes and configs, so they reuse
the programs the replay compiled instead of compiling every algorithm a second time.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import jax
import numpy as np

import golden_trajectories as golden

MISSING_CLASS = 9
# The golden trajectories' shapes (5 clients, n_max 60 / 20, 4 participants per round) and configs.
TRAIN_SIZES = (60, 0, 46, 60, 53)  # client 1 has no training data
TEST_SIZES = (20, 20, 14, 20, 9)
PARTICIPANTS = np.array([0, 1, 2, 4])


@functools.lru_cache(maxsize=2)
def federation(bn: bool):
    """Five clients, one of them without training data, and no client holding class ``MISSING_CLASS``."""
    from pflax.data import from_partition, synthetic

    size = 16 if bn else 8
    ds = synthetic(num_classes=10, train_per_class=40, test_per_class=15, image_size=size, seed=5, noise=0.3)
    x_tr, x_te = ds.x_train, ds.x_test
    if bn:
        x_tr, x_te = (np.repeat(np.asarray(a)[..., :1], 3, axis=-1) for a in (x_tr, x_te))

    def split(labels, sizes):
        usable = np.flatnonzero(np.asarray(labels) != MISSING_CLASS)
        out, start = [], 0
        for n in sizes:
            out.append(usable[start:start + n])
            start += n
        return out

    train = from_partition(x_tr, ds.y_train, split(ds.y_train, TRAIN_SIZES), n_max=60)
    test = from_partition(x_te, ds.y_test, split(ds.y_test, TEST_SIZES), n_max=20)
    return train, test


def _all_finite(values) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(v, np.float64)))) for v in values)


def contract_summary(name: str) -> dict:
    """Two identical two-round runs of ``name`` (``round`` with test, then ``evaluate`` with train),
    summarised as plain values: leaf indices where the runs differ, the round function's cache size
    after each round of the first run, and the first run's final round, finiteness and evaluation."""
    from pflax.algorithms import REGISTRY

    algo = REGISTRY[name]
    train, test = federation(name in golden.BN_ALGORITHMS)
    runs, cache_sizes = [], []
    for _ in range(2):
        state = algo.init(jax.random.PRNGKey(3), golden.model_for(name), train.x[0], train.num_clients,
                          golden.config_for(name, algo))
        history = []
        for _ in range(2):
            state, metrics = algo.round(state, train.take(PARTICIPANTS), test.take(PARTICIPANTS))
            history.append(jax.device_get(metrics))
            if not runs:
                cache_sizes.append(int(algo.round._cache_size()))
        runs.append((state, history, jax.device_get(algo.evaluate(state, test, train))))
    first, second = (golden.leaves(run) for run in runs)
    state, history, evaluation = runs[0]
    floats = [x for x in golden.leaves(state) if np.issubdtype(x.dtype, np.floating)]
    return {
        "leaves": len(first),
        "differing_leaves": [i for i, (a, b) in enumerate(zip(first, second)) if not np.array_equal(a, b)]
        + ([-1] if len(first) != len(second) else []),
        "cache_sizes": cache_sizes,
        "round": int(state.round),
        "state_finite": _all_finite(floats),
        "nonfinite_flags": [bool(m["nonfinite"]) for m in history],
        "round_accuracy_finite": [_all_finite([m["accuracy"]]) for m in history],
        "evaluate_accuracy_shape": list(np.shape(evaluation["accuracy"])),
        "evaluate_accuracy_finite": _all_finite([evaluation["accuracy"]]),
        "evaluate_n": np.asarray(evaluation["n"]).tolist(),
    }


def run_all(names=None) -> dict:
    """``{"golden": {name: trajectory}, "contract": {name: summary}}`` for ``names`` (default: all)."""
    from pflax.algorithms import REGISTRY

    out = {"golden": {}, "contract": {}}
    for name in names or list(REGISTRY):
        out["golden"].update(golden.replay([name]))
        out["contract"][name] = contract_summary(name)  # same shapes: the replay's programs, already compiled
    return out


if __name__ == "__main__":  # python contract_runs.py OUT.json
    Path(sys.argv[1]).write_text(json.dumps(run_all()))
