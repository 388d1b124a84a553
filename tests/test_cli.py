"""The CLI and run files: every registry algorithm runs from ``pflax run``, any partition can be named,
a run file round-trips bit for bit, flags override a file, and bad input is refused by name."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from pflax import cli
from pflax.algorithms import REGISTRY
from pflax.data.federations import PARTITIONS
from pflax.experiment import RunSpec

# Small and fast: 2 clients of 40 / 20 synthetic 8x8 images, an MLP with 8 hidden units (the BatchNorm
# CNN at 1/16 width on 16x16 images for FedBN and FedPick), one local epoch: the shapes and configs of
# tests/test_fedcollab.py's coalitions, whose compiled rounds these runs then share.
TINY = ["--clients", "2", "--train-per-client", "40", "--test-per-client", "20", "--rounds", "2",
        "--eval-every", "1", "--quiet", "--no-plots"]
CAPS = {"local_epochs": 1, "body_epochs": 1, "head_epochs": 1, "finetune_epochs": 1, "personal_epochs": 1,
        "inner_steps": 2}


def _model_flags(name: str) -> list[str]:
    if REGISTRY[name].backbone == "bn":
        return ["--model", "bn_cnn", "--width", "0.0625", "--image-size", "16"]
    return ["--model", "mlp", "--image-size", "8"]


def _caps(name: str) -> list[str]:
    fields = {f.name: f.default for f in dataclasses.fields(REGISTRY[name].Config)}
    return [arg for k, cap in CAPS.items() if k in fields for arg in ("--set", f"{k}={min(fields[k], cap)}")]


def _comparable(result: dict) -> dict:
    """What the computation determines: no timings (round and evaluation seconds), paths or command line."""
    keep = ("rounds_completed", "final_accuracy", "final_per_client", "personalized_history", "last_round",
            "config", "status", "seed")
    out = {k: result[k] for k in keep}
    out["history"] = [{k: v for k, v in row.items() if k not in ("seconds", "eval_seconds")} for row in result["history"]]
    return out


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_algorithm_runs_from_the_cli(tmp_path, name):
    out = tmp_path / name
    assert cli.main(["run", name, *_model_flags(name), *_caps(name), *TINY, "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["algorithm"] == name and result["status"] == "finished" and result["rounds_completed"] == 2
    assert len(result["final_per_client"]) == 2 and [e["round"] for e in result["personalized_history"]] == [1, 2]
    assert all(0.0 <= a <= 1.0 for a in result["final_per_client"])
    assert RunSpec.from_file(out / "run.toml").algorithm == name


def test_run_file_round_trips_bit_for_bit(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    flags = ["run", "fedpac", "--model", "mlp", "--image-size", "8", "--partition", "dirichlet", "--beta", "0.3",
             "--seed", "2", "--fraction", "0.5", "--set", "body_epochs=1", *TINY, "--clients", "4", "--rounds", "3"]
    assert cli.main(flags + ["--out", str(first)]) == 0
    assert cli.main(["run", "--config", str(first / "run.toml"), "--out", str(again), "--quiet", "--no-plots"]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (first, again))
    assert _comparable(a) == _comparable(b)
    assert a["last_round"]["combination_weights"]  # FedPAC's weights are part of what is compared
    assert (first / "run.toml").read_text() == (again / "run.toml").read_text()
    spec = RunSpec.from_file(again / "run.toml")
    assert spec.partition == {"name": "dirichlet", "clients": 4, "beta": 0.3, "min_size": 10}
    assert spec.seeds == (2,) and spec.fraction == 0.5 and spec.config["body_epochs"] == 1
    assert spec.config["lam"] == 1.0  # the whole Config is written out, defaults included


def test_flags_override_the_run_file(tmp_path):
    run_file = tmp_path / "run.toml"
    run_file.write_text('algorithm = "fedavg"\nrounds = 7\n[config]\nlocal_epochs = 1\nlr = 0.05\n'
                        '[partition]\nname = "dirichlet"\nclients = 5\nbeta = 0.2\n[model]\nname = "mlp"\n')
    args = cli.build_parser().parse_args(["run", "--config", str(run_file), "--rounds", "2", "--set", "lr=0.1",
                                          "--partition", "pathological", "--classes-per-client", "3"])
    spec = cli.spec_from_args(args).resolved()
    assert spec.algorithm == "fedavg" and spec.rounds == 2
    assert spec.config["lr"] == 0.1 and spec.config["local_epochs"] == 1
    # A new partition takes its own parameters; the file's Dirichlet beta does not carry over.
    assert spec.partition == {"name": "pathological", "clients": 5, "classes_per_client": 3}
    # Naming another algorithm drops the file's config, which belongs to the file's algorithm.
    other = cli.spec_from_args(cli.build_parser().parse_args(["run", "ditto", "--config", str(run_file)]))
    assert other.algorithm == "ditto" and other.config == {} and other.rounds == 7


@pytest.mark.parametrize("text, match", [
    ("rounds = ", r"not valid TOML"),
    ("bogus = 1", r"unknown run-file key\(s\) bogus"),
    ('algorithm = "fedavg"\n[config]\nmu = 0.1', r"fedavg has no config field 'mu'; its fields: .*local_epochs"),
    ('algorithm = "fedavg"\n[config]\nlocal_epochs = "five"', r"local_epochs must be a int, got 'five'"),
    ('[partition]\nname = "dirichlet"\ns = 0.5', r"partition 'dirichlet' has no parameter s \(it takes: beta, min_size\)"),
    ('[partition]\nname = "zipf"', r"unknown partition 'zipf'"),
    ('algorithm = "fedbn"\n[model]\nname = "mlp"', r"fedbn needs model bn_cnn \(BatchNorm\), not 'mlp'"),
    ('seeds = []', r"seeds must be a non-empty list of integers"),
    ('[data]\ndataset = "digits"\n[partition]\nname = "dirichlet"', r"dataset 'digits' goes with partition 'domains'"),
])
def test_bad_run_files_are_refused_by_name(tmp_path, text, match):
    run_file = tmp_path / "run.toml"
    run_file.write_text(text)
    with pytest.raises(SystemExit, match=match):
        cli.main(["run", "--config", str(run_file), "--out", str(tmp_path / "out"), "--quiet"])
    assert not (tmp_path / "out" / "results.json").exists()


def test_pflax_list_names_every_algorithm_partition_and_model(capsys):
    assert cli.main(["list"]) == 0
    text = capsys.readouterr().out
    for name, algo in REGISTRY.items():
        assert f"  {name} " in text and algo.summary in text
    for name in PARTITIONS:
        assert f"  {name} " in text
    assert "bn_cnn" in text


def test_fedavg_dirichlet_100_clients_on_fashion_mnist(fmnist_dir, tmp_path):
    out = tmp_path / "fedavg"
    assert cli.main(["run", "fedavg", "--dataset", "fashion_mnist", "--data-dir", str(Path(fmnist_dir).parent),
                     "--partition", "dirichlet", "--beta", "0.1", "--clients", "100", "--fraction", "0.1",
                     "--model", "mlp", "--rounds", "2", "--set", "local_epochs=1", "--quiet", "--no-plots",
                     "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["dataset"] == "fashion_mnist" and len(result["final_per_client"]) == 100
    assert [row["participants"] for row in result["history"]] == [10, 10]
    assert result["run"]["partition"] == {"name": "dirichlet", "clients": 100, "beta": 0.1, "min_size": 10}
    assert result["final_accuracy"]["mean"] > 10.0  # above chance after two rounds of FedAvg


def test_usps_h5_is_a_dataset_of_its_own(usps_file, tmp_path):
    """``--dataset usps`` reads the shipped ``usps.h5`` (not IDX files) at its own 16x16 greyscale."""
    from pflax.data import load_dataset
    from pflax.data.sources import read_usps

    data = load_dataset("usps", data_dir=usps_file.parent.parent)
    raw = read_usps(usps_file)
    assert data.x_train.shape == (7291, 16, 16, 1) and data.x_test.shape == (2007, 16, 16, 1)
    assert data.num_classes == 10 and sorted(set(data.y_test.tolist())) == list(range(10))
    np.testing.assert_allclose(data.x_train[..., 0], (raw["x_train"] - 0.5) / 0.5, rtol=0, atol=1e-6)
    out = tmp_path / "usps"
    assert cli.main(["run", "fedavg", "--dataset", "usps", "--data-dir", str(usps_file.parent.parent), "--clients", "3",
                     "--model", "mlp", "--rounds", "1", "--set", "local_epochs=1", "--train-per-client", "100",
                     "--test-per-client", "100", "--quiet", "--no-plots", "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["dataset"] == "usps"


def test_fedbn_runs_on_the_digit_domains(fmnist_dir, mnist_dir, tmp_path):
    out = tmp_path / "fedbn"
    data_dir = str(Path(fmnist_dir).parent)
    assert cli.main(["run", "fedbn", "--dataset", "digits", "--data-dir", data_dir, "--clients", "2",
                     "--train-per-client", "32", "--test-per-client", "32", "--width", "0.0625", "--rounds", "1",
                     "--quiet", "--no-plots", "--out", str(out)]) == 0
    spec = RunSpec.from_file(out / "run.toml")
    assert spec.partition["name"] == "domains" and spec.model == {"name": "bn_cnn", "width": 0.0625}


def _round_calls_in_loops(path: Path) -> list[int]:
    """Lines of ``<x>.round(state, batch, ...)`` calls (an algorithm's round: two or more arguments,
    unlike ``array.round(3)``; ``np.round`` aside) inside a ``for`` or ``while`` loop."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.For, ast.While)):
            for inner in ast.walk(node):
                if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                        and inner.func.attr == "round" and len(inner.args) + len(inner.keywords) >= 2
                        and not (isinstance(inner.func.value, ast.Name) and inner.func.value.id in ("np", "jnp"))):
                    found.append(inner.lineno)
    return found


def test_only_the_experiment_loop_loops_over_rounds():
    repo = Path(__file__).resolve().parents[1]
    offenders = {}
    for path in [*repo.glob("benchmarks/**/*.py"), *repo.glob("pflax/**/*.py")]:
        if path.name == "experiment.py":
            continue
        lines = _round_calls_in_loops(path)
        if lines:
            offenders[str(path.relative_to(repo))] = lines
    assert offenders == {}, "rounds looped outside pflax.experiment.loop"
    # The check sees a loop when there is one.
    probe = repo / "tests" / "golden_trajectories.py"
    assert _round_calls_in_loops(probe), "the AST check no longer recognises a loop over rounds"


def test_benchmarks_use_no_private_cli_helpers():
    import re

    repo = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"cli\._\w+|from pflax\.cli import _|from \.\.?cli import _")
    hits = [f"{p.relative_to(repo)}:{i}" for p in repo.glob("benchmarks/**/*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def _read_events(logdir: Path) -> list:
    """Every event in ``logdir``'s event files: TFRecord framing (length, CRC, payload, CRC) around
    tensorboardX's Event protos."""
    import struct

    from tensorboardX.proto import event_pb2

    events = []
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            payload = data[at + 12:at + 12 + length]
            at += 12 + length + 4
            event = event_pb2.Event()
            event.ParseFromString(payload)
            events.append(event)
    return events


def test_logdir_writes_tensorboard_events_that_read_back(tmp_path):
    out, logdir = tmp_path / "run", tmp_path / "tb"
    assert cli.main(["run", "fedavg", *_model_flags("fedavg"), *_caps("fedavg"), *TINY, "--rounds", "3",
                     "--eval-every", "2", "--out", str(out), "--logdir", str(logdir)]) == 0
    result = json.loads((out / "results.json").read_text())
    scalars, histograms = {}, {}
    for event in _read_events(logdir):
        for value in event.summary.value:
            if value.HasField("histo"):
                histograms[(value.tag, event.step)] = value.histo
            else:
                scalars[(value.tag, event.step)] = value.simple_value
    for row in result["history"]:
        assert scalars[("round/loss", row["round"])] == pytest.approx(row["loss"], rel=1e-6)
        assert ("round/seconds", row["round"]) in scalars
    for evaluation in result["personalized_history"]:  # rounds 2 and 3 (the last)
        accuracy = [100 * a for a in evaluation["accuracy"]]
        histo = histograms[("eval/client_accuracy", evaluation["round"])]
        assert histo.num == len(accuracy) == 2 and histo.sum == pytest.approx(sum(accuracy), rel=1e-6)
        assert scalars[("eval/accuracy", evaluation["round"])] == pytest.approx(sum(accuracy) / 2, rel=1e-6)
    assert sorted(step for tag, step in histograms) == [2, 3]


def test_host_devices_shard_the_clients_over_the_cpu(tmp_path):
    """``--host-devices 2`` splits the CPU before JAX runs anything: ``auto`` then shards the clients
    over both devices, and the results record the two devices. In this process JAX already runs on one
    device, so asking for two is a clear error."""
    import subprocess
    import sys

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "pflax.cli", "run", "fedavg", "--model", "mlp", "--clients", "4", "--rounds", "1",
           "--train-per-client", "20", "--test-per-client", "20", "--host-devices", "2", "--out", str(out),
           "--quiet", "--no-plots"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert result["status"] == "finished" and len(result["jax"]["devices"]) == 2
    import jax

    assert len(jax.devices("cpu")) == 1  # JAX runs here (and must not be split by the call below)
    with pytest.raises(SystemExit, match="host-devices: JAX already runs with 1 CPU device"):
        cli.main(["run", "fedavg", "--model", "mlp", "--clients", "2", "--rounds", "1", "--host-devices", "2",
                  "--out", str(tmp_path / "no"), "--quiet"])
    with pytest.raises(SystemExit, match="at least 1"):
        cli.main(["run", "fedavg", "--host-devices", "0", "--out", str(tmp_path / "no"), "--quiet"])
