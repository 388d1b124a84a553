"""Several processes, one federation: the multi-host path (``jax.distributed``) run for real on one machine.

Two processes on this machine stand in for two hosts: each initialises ``jax.distributed`` with CPU
collectives over gloo and holds only its half of the clients. The result must equal a single-process
run (``map``) to float round-off, and a checkpoint written by both processes must resume bit-identically. The single-process reference
runs on the CPU too: inside the test process, or on a GPU machine in a CPU-only subprocess.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

WORKER = Path(__file__).with_name("_multiprocess_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _load(out: Path) -> tuple[list[np.ndarray], np.ndarray, dict]:
    data = np.load(out)
    leaves = [data[f"arr_{i}"] for i in range(len(data.files) - 1)]
    return leaves, data["combination_weights"], json.loads(Path(str(out) + ".json").read_text())


def _run_in_this_process(tmp_path: Path):
    sys.path.insert(0, str(WORKER.parent))
    try:
        import _multiprocess_worker
    finally:
        sys.path.remove(str(WORKER.parent))
    out = tmp_path / "out1.npz"
    _multiprocess_worker.run(1, str(out), str(tmp_path / "ckpt1"))
    return _load(out)


def _run(num_processes: int, tmp_path: Path) -> tuple[list[np.ndarray], np.ndarray, dict]:
    out, ckpt, port = tmp_path / f"out{num_processes}.npz", tmp_path / f"ckpt{num_processes}", _free_port()
    # One CPU device per process, also on a GPU machine (two processes would share its one GPU).
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "--process-id", str(i), "--num-processes", str(num_processes),
             "--port", str(port), "--out", str(out), "--ckpt", str(ckpt)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(num_processes)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("multi-process worker timed out")
    for i, proc in enumerate(procs):
        assert proc.returncode == 0, f"process {i} of {num_processes} failed:\n{logs[i][-4000:]}"
    return _load(out)


def test_two_processes_equal_one_and_resume_bit_identically(tmp_path):
    # The one-process reference runs on the CPU like the two processes: in this process when that is
    # the default backend (shares its compilations), else in a CPU-only subprocess of its own.
    cpu = jax.default_backend() == "cpu"
    one, weights_one, info_one = _run_in_this_process(tmp_path) if cpu else _run(1, tmp_path)
    two, weights_two, info_two = _run(2, tmp_path)

    assert (info_one["devices"], info_one["strategy"]) == (1, "map")
    assert (info_two["devices"], info_two["processes"], info_two["strategy"]) == (2, 2, "sharded")
    assert info_one["round"] == info_two["round"] == 3
    # per-client heads really are split between the processes (so the checkpoint had to gather them)
    assert info_two["heads_sharded_at_save"] and not info_one["heads_sharded_at_save"]
    # the collaboration weights are non-trivial (clients really mix heads across the two processes)
    assert np.abs(weights_one - np.eye(weights_one.shape[0])).max() > 1e-3
    np.testing.assert_allclose(weights_two, weights_one, atol=1e-5)
    assert len(one) == len(two)
    for a, b in zip(one, two):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # a checkpoint written by both processes restores to the exact state
    assert info_one["resume_max_abs_diff"] == 0.0
    assert info_two["resume_max_abs_diff"] == 0.0
