"""Every registry algorithm reproduces its recorded three-round trajectory bit for bit on the CPU
(``map`` strategy): state leaves, round metrics and evaluation. See ``golden_trajectories.py``."""
from __future__ import annotations

import json

import jax
import pytest

import golden_trajectories as golden
from pflax.algorithms import REGISTRY

RECORDED = json.loads(golden.GOLDEN.read_text())["algorithms"]


def _mismatch(what: str, expected, actual) -> str:
    return f"{what}: expected {expected}, got {actual}"


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the trajectories were recorded with XLA:CPU's arithmetic")
@pytest.mark.parametrize("name", list(REGISTRY))
def test_trajectory_is_bit_identical(name):
    module = REGISTRY[name]

    def run_round(state, batch, test):
        return module.round(state, batch, test)

    def run_evaluate(state, test, train):
        return module.evaluate(state, test, train)

    actual = golden.trajectory(name, module, run_round, run_evaluate, module.sample_clients)
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
