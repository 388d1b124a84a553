"""The algorithm contract, for every registry entry: the signatures, identical outputs for identical
inputs, no retrace after the first round, a finite state after two rounds on a federation with an
empty client and a class that no client has, and the golden trajectories: three rounds reproduce,
bit for bit on the CPU (``map`` strategy), the state leaves, round metrics and evaluation recorded
before the contract redesign (``golden_trajectories.py``).

The two share shapes and configs, and live in one file so that one process compiles each
algorithm's round once for both."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import golden_trajectories as golden
from pflax.algorithms import REGISTRY
from pflax.core import federated
from pflax.data import from_partition, synthetic

NAMES = list(REGISTRY)
MISSING_CLASS = 9
# The golden trajectories' shapes (5 clients, n_max 60 / 20, 4 participants per round) and configs,
# so that the compiled rounds are shared with tests/test_golden.py through the compilation cache.
TRAIN_SIZES = (60, 0, 46, 60, 53)  # client 1 has no training data
TEST_SIZES = (20, 20, 14, 20, 9)
PARTICIPANTS = np.array([0, 1, 2, 4])


@functools.lru_cache(maxsize=2)
def _federation(bn: bool):
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


def _leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree.leaves(tree)]


@functools.lru_cache(maxsize=None)
def _two_runs(name: str):
    """Two identical two-round runs of ``name`` (round with test, then evaluate with train), plus the
    round function's compilation-cache size after each round of the first run."""
    algo = REGISTRY[name]
    bn = name in golden.BN_ALGORITHMS
    train, test = _federation(bn)
    runs, cache_sizes = [], []
    for _ in range(2):
        state = algo.init(jax.random.PRNGKey(3), golden.model_for(name), train.x[0], train.num_clients,
                          golden.config_for(name, algo))
        history = []
        for _ in range(2):
            state, metrics = algo.round(state, train.take(PARTICIPANTS), test.take(PARTICIPANTS))
            history.append(jax.device_get(metrics))
            if len(runs) == 0:
                cache_sizes.append(algo.round._cache_size())
        evaluation = jax.device_get(algo.evaluate(state, test, train))
        runs.append((state, history, evaluation))
    return runs, cache_sizes


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry_keeps_the_contract(name):
    algo = REGISTRY[name]
    assert isinstance(algo, federated.Algorithm) and algo.name == name
    assert dataclasses.is_dataclass(algo.Config) and algo.Config.__dataclass_params__.frozen
    algo.Config()  # the paper's setting constructs
    expected = {"init": ["key", "model", "sample_x", "num_clients", "config"], "round": ["state", "batch", "test"],
                "evaluate": ["state", "test", "train"]}
    for verb, params in expected.items():
        signature = inspect.signature(getattr(algo, verb))
        assert list(signature.parameters) == params, verb
    assert inspect.signature(algo.round).parameters["test"].default is None
    assert inspect.signature(algo.evaluate).parameters["train"].default is None
    pieces = algo.pieces(golden.model_for(name), algo.Config())
    assert isinstance(pieces, federated.RoundPieces)
    assert algo.summary


@pytest.mark.parametrize("name", NAMES)
def test_identical_inputs_give_identical_outputs(name):
    (first, second), _ = _two_runs(name)
    for a, b in zip(_leaves(first), _leaves(second)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_no_retrace_after_the_first_round(name):
    _, cache_sizes = _two_runs(name)
    assert cache_sizes[1] == cache_sizes[0], f"round recompiled for round 2: cache {cache_sizes}"


@pytest.mark.parametrize("name", NAMES)
def test_finite_with_an_empty_client_and_a_class_missing_everywhere(name):
    (run, _), _ = _two_runs(name)
    state, history, evaluation = run
    assert int(state.round) == 2
    for x in _leaves(state):
        if np.issubdtype(x.dtype, np.floating):
            assert np.all(np.isfinite(x))
    for metrics in history:
        assert not bool(metrics["nonfinite"])
        assert np.all(np.isfinite(np.asarray(metrics["accuracy"], np.float64)))
    assert np.asarray(evaluation["accuracy"]).shape == (len(TEST_SIZES),)
    assert np.all(np.isfinite(np.asarray(evaluation["accuracy"], np.float64)))
    np.testing.assert_array_equal(np.asarray(evaluation["n"]), TEST_SIZES)


# ------------------------------------------------------------------------------ golden trajectories
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"  # faster compiles, other round-off
RECORDED = json.loads(golden.GOLDEN.read_text())["algorithms"]


def _mismatch(what: str, expected, actual) -> str:
    return f"{what}: expected {expected}, got {actual}"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """Today's trajectories, computed with XLA's default CPU code generation, as they were recorded.
    When this process compiles at a lower LLVM optimisation level (XLA_FLAGS with
    --xla_backend_optimization_level=0, which changes round-off), the replay runs in a subprocess
    with the default flags."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FAST_COMPILE_FLAG not in flags:
        return None  # this process already compiles as the recording did: replay in-process
    env = dict(os.environ, XLA_FLAGS=flags.replace(FAST_COMPILE_FLAG, "").strip())
    out = tmp_path_factory.mktemp("golden") / "replayed.json"
    proc = subprocess.run([sys.executable, str(Path(golden.__file__)), "--replay", str(out)], env=env,
                          capture_output=True, text=True, timeout=1200, cwd=Path(golden.__file__).parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the trajectories were recorded with XLA:CPU's arithmetic")
@pytest.mark.parametrize("name", list(REGISTRY))
def test_trajectory_is_bit_identical(name, replayed):
    actual = replayed[name] if replayed is not None else golden.replay([name])[name]
    expected = RECORDED[name]
    assert len(actual) == len(expected)
    for t, (got, want) in enumerate(zip(actual, expected)):
        assert want["metrics"].keys() <= got["metrics"].keys(), f"round {t + 1}: a recorded metric is missing"
        for kind in ("metrics", "evaluate"):
            for key in want[kind]:
                assert got[kind][key] == want[kind][key], _mismatch(f"round {t + 1} {kind}[{key!r}]", want[kind][key], got[kind][key])
        missing = [d for d in want["state"] if d not in got["state"]]
        extra = [d for d in got["state"] if d not in want["state"]]
        assert not missing and not extra, f"round {t + 1} state leaves differ:\n expected {missing}\n got {extra}"
