"""The 8-forced-host-device half of ``tests/test_execution.py``: every strategy equals ``map`` on 8 devices.

``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before jax is imported, so this runs
``test_execution.py`` as a script in a subprocess and checks the differences it prints.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("test_execution.py")
TOL = 1e-5  # as in test_execution.py: float32 round-off after two rounds; a real difference is orders larger


def test_strategies_agree_on_eight_forced_host_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["device_count"] == 8
    assert report["auto_resolves_to"] == "sharded"
    for algorithm, per_strategy in report["diffs"].items():
        for label, d in per_strategy.items():
            assert d < TOL, f"{algorithm} with {label} on 8 devices: max difference {d:.3g} to 'map'"
