"""The quickstart notebook executes, and the CLI's offline default produces its files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import optimising_xla_environ

REPO = Path(__file__).resolve().parents[1]


def test_quickstart_notebook_executes():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(REPO / "notebooks" / "quickstart.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}).execute(env=optimising_xla_environ())
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "round 4: mean personalized accuracy" in outputs


def test_cli_offline_run_writes_results(tmp_path):
    out = tmp_path / "run"
    # The quickstart notebook's federation and config (10 clients x 150/100 samples, 2 body epochs):
    # the same round and evaluate programs, so this run reuses the notebook's compilations through
    # the test run's shared compilation cache (both with the same XLA flags).
    cmd = [sys.executable, "-m", "pflax.cli", "run", "fedpac", "--clients", "10", "--rounds", "2",
           "--train-per-client", "150", "--test-per-client", "100", "--set", "body_epochs=2", "--eval-every", "1",
           "--out", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=optimising_xla_environ())
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert result["status"] == "finished" and result["rounds_completed"] == 2
    assert len(result["final_per_client"]) == 10
    assert 0.0 <= result["final_accuracy"]["mean"] <= 100.0
    for name in ("run.toml", "rounds.csv", "accuracy.png", "weights.png"):
        assert (out / name).stat().st_size > 0
    for name in ("accuracy.png", "weights.png"):  # palette PNGs, a third of RGBA's size (results are committed)
        assert (out / name).read_bytes()[25] == 3, f"{name} is not a palette PNG"
    assert not list(out.glob(".*"))  # no temp files left behind


def test_cli_missing_data_dir_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pflax.cli", "run", "--dataset", "fashion_mnist", "--data-dir",
                           str(tmp_path / "nope"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "does not exist" in proc.stderr


def test_cli_runs_baselines_and_resumes(tmp_path):
    # In-process, so the resumed run reuses the first one's compilation.
    from pflax import cli

    out = tmp_path / "perfedavg"
    base = ["run", "perfedavg", "--model", "mlp", "--clients", "3", "--train-per-client", "40",
            "--test-per-client", "40", "--set", "local_epochs=1", "--eval-every", "1", "--checkpoint-every", "1",
            "--out", str(out), "--quiet", "--set", "alpha=0.02"]
    assert cli.main(base + ["--rounds", "1"]) == 0
    assert cli.main(base + ["--rounds", "2", "--resume"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["status"] == "finished" and result["rounds_completed"] == 2 and result["resumed_at_rounds"] == [1]
    assert result["algorithm"] == "perfedavg" and len(result["final_per_client"]) == 3
    assert result["config"]["alpha"] == 0.02
    assert "evaluated_model" in result and (out / "accuracy.png").stat().st_size > 0


def test_cli_rejects_unknown_config_field(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pflax.cli", "run", "fedprox", "--set", "bogus=1", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0 and "mu" in proc.stderr and "bogus" in proc.stderr
