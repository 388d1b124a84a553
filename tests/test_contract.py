"""The algorithm contract, for every registry entry: the signatures, identical outputs for identical
inputs, no retrace after the first round, a finite state after two rounds on a federation with an
empty client and a class that no client has, and the golden trajectories: three rounds reproduce,
bit for bit on the CPU (``map`` strategy), the state leaves, round metrics and evaluation recorded
before the contract redesign (``golden_trajectories.py``).

The runs behind these checks (``contract_runs.py``) happen in one subprocess, under this process's
``XLA_FLAGS`` where a recording of this kind of CPU was made with them (the suite's fast-compile flags
halve the replay's time), else at XLA's default code generation, where every kind of CPU has its
recording; the contract runs share the golden runs' shapes and configs, so that process compiles each
algorithm's round once for both."""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

import contract_runs
import golden_trajectories as golden
from conftest import compiles_fast, default_xla_environ
from pflax.algorithms import REGISTRY
from pflax.core import federated

NAMES = list(REGISTRY)
RECORDINGS = golden.recordings()


def _run_all(environ: dict, directory: Path) -> dict:
    out = directory / "runs.json"
    here = Path(contract_runs.__file__).parent
    proc = subprocess.run([sys.executable, str(Path(contract_runs.__file__)), str(out)], env=environ,
                          capture_output=True, text=True, timeout=1200, cwd=here)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(out.read_text()), "xla_flags": sorted(environ.get("XLA_FLAGS", "").split())}


def _matches_a_recording(runs: dict) -> bool:
    return all(any(not _differences(runs["golden"][name], r["algorithms"][name]) for r in RECORDINGS) for name in NAMES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every algorithm's golden replay and contract runs (``contract_runs.run_all``), in a subprocess that
    compiles as one of this CPU's recordings did: with this process's ``XLA_FLAGS`` if such a recording
    exists, else without the suite's fast-compile flags (``conftest.FAST_COMPILE_FLAGS``, which change
    round-off), as every kind of CPU was recorded. A CPU that shares a recording's key but rounds
    otherwise under the fast flags gets the default replay too, so only a replay that matches no
    recording at XLA's default can fail the tests."""
    directory = tmp_path_factory.mktemp("contract")
    if not compiles_fast():
        return _run_all(dict(os.environ), directory)
    if golden.has_recording_here():
        runs = _run_all(dict(os.environ), directory)
        if _matches_a_recording(runs):
            return runs
    return _run_all(default_xla_environ(), directory)


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
def test_identical_inputs_give_identical_outputs(name, runs):
    summary = runs["contract"][name]
    assert summary["leaves"] > 0
    assert summary["differing_leaves"] == [], f"state leaves {summary['differing_leaves']} differ between two identical runs"


@pytest.mark.parametrize("name", NAMES)
def test_no_retrace_after_the_first_round(name, runs):
    cache_sizes = runs["contract"][name]["cache_sizes"]
    assert len(cache_sizes) == 2 and cache_sizes[1] == cache_sizes[0], f"round recompiled for round 2: cache {cache_sizes}"


@pytest.mark.parametrize("name", NAMES)
def test_finite_with_an_empty_client_and_a_class_missing_everywhere(name, runs):
    summary = runs["contract"][name]
    assert summary["round"] == 2
    assert summary["state_finite"]
    assert summary["nonfinite_flags"] == [False, False]
    assert summary["round_accuracy_finite"] == [True, True]
    assert summary["evaluate_accuracy_shape"] == [len(contract_runs.TEST_SIZES)]
    assert summary["evaluate_accuracy_finite"]
    assert summary["evaluate_n"] == list(contract_runs.TEST_SIZES)


# ------------------------------------------------------------------------------ golden trajectories
def _mismatch(what: str, expected, actual) -> str:
    return f"{what}: expected {expected}, got {actual}"


def _differences(actual: list, expected: list) -> list[str]:
    """Where a replay differs from a recording: metrics and evaluations by name, state leaves as a multiset
    (moving a tree inside the state is allowed, changing a value is not)."""
    if len(actual) != len(expected):
        return [f"{len(actual)} rounds replayed, {len(expected)} recorded"]
    out = []
    for t, (got, want) in enumerate(zip(actual, expected)):
        if not want["metrics"].keys() <= got["metrics"].keys():
            out.append(f"round {t + 1}: a recorded metric is missing")
        for kind in ("metrics", "evaluate"):
            for key in want[kind]:
                if got[kind].get(key) != want[kind][key]:
                    out.append(_mismatch(f"round {t + 1} {kind}[{key!r}]", want[kind][key], got[kind].get(key)))
        missing = [d for d in want["state"] if d not in got["state"]]
        extra = [d for d in got["state"] if d not in want["state"]]
        if missing or extra:
            out.append(f"round {t + 1} state leaves differ:\n expected {missing}\n got {extra}")
    return out


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the trajectories were recorded with XLA:CPU's arithmetic")
@pytest.mark.parametrize("name", list(REGISTRY))
def test_trajectory_is_bit_identical(name, runs):
    """The replay equals one recording bit for bit: one per kind of CPU, all from the same code
    (``golden_trajectories``). A failure is reported against this machine's recording, else the last one."""
    actual = runs["golden"][name]
    if any(not _differences(actual, recording["algorithms"][name]) for recording in RECORDINGS):
        return
    this = golden.recordings_of(golden.machine(), runs["xla_flags"])
    same_flags = [r for r in RECORDINGS if r["xla_flags"] == runs["xla_flags"]] or RECORDINGS
    where = ("this machine's recording" if this else
             f"the last recording with XLA_FLAGS {runs['xla_flags']} (none is of this CPU: {golden.machine()})")
    problems = _differences(actual, (this or same_flags)[-1]["algorithms"][name])
    hint = "" if this else (
        ". This CPU has no recording; where other CPUs replay this code bit for bit, record this one from the "
        "code of an earlier commit (how: tests/golden_trajectories.py's docstring)")
    assert not problems, f"against {where}: " + problems[0] + hint


@pytest.mark.parametrize("argv", [[], ["--help"], ["--add-machine", "--record"], ["--recrod"]])
def test_the_golden_script_never_records_by_accident(argv, monkeypatch):
    """Only ``--record`` or ``--add-machine`` rewrite the recordings: no argument, ``--help``, two actions or
    a misspelt one stop before anything is replayed."""
    monkeypatch.setattr(golden, "record", lambda add_machine=False: pytest.fail("recorded"))
    monkeypatch.setattr(golden, "replay", lambda names=None: pytest.fail("replayed"))
    with pytest.raises(SystemExit) as stopped:
        golden.main(argv)
    assert stopped.value.code == (0 if argv == ["--help"] else 2)


def test_a_replay_compiles_as_a_recording_of_this_cpu_did(monkeypatch):
    """The replay runs under this process's ``XLA_FLAGS`` only where a recording of this kind of CPU was made
    with those flags; other flags, or another CPU, replay at the default code generation."""
    for recording in RECORDINGS:
        monkeypatch.setattr(golden, "machine", lambda r=recording: r["machine"])
        monkeypatch.setattr(golden, "xla_flags", lambda r=recording: r["xla_flags"])
        assert golden.has_recording_here()
        other = sorted([*recording["xla_flags"], "--xla_cpu_enable_fast_math=true"])
        monkeypatch.setattr(golden, "xla_flags", lambda other=other: other)
        assert not golden.has_recording_here()
    monkeypatch.setattr(golden, "machine", lambda: {"numpy_simd": [], "avx512": ["a CPU never recorded"]})
    monkeypatch.setattr(golden, "xla_flags", lambda: [])
    assert not golden.has_recording_here()
