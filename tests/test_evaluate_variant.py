"""``benchmarks/evaluate_variant.py``: a cell that trains exactly as another (FedEM-FT as FedEM) is read from
the other's finished run. Its training must be bit-identical to the base run's, and the script must
reproduce a direct run's accuracies; a variant that trains differently is refused."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import load_script
from pflax.experiment import RunSpec, run

REPO = Path(__file__).resolve().parents[1]
BASE = dict(algorithm="fedem", rounds=2, eval_every=1, checkpoint_every=1,
            config={"local_epochs": 1, "num_components": 2, "finetune_epochs": 0},
            data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 3},
            model={"name": "mlp", "hidden": [8]})


def _script():
    return load_script("benchmarks/evaluate_variant.py")


def _spec(**config) -> RunSpec:
    return RunSpec.from_dict({**BASE, "config": {**BASE["config"], **config}})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A table of two cells, FedEM and FedEM-FT, with the FedEM cell run; and a direct FedEM-FT run."""
    root = tmp_path_factory.mktemp("variant")
    table = root / "paper" / "demo" / "t"
    table.mkdir(parents=True)
    (table / "fedem.toml").write_text(_spec().to_toml())
    (table / "fedem_ft.toml").write_text(_spec(finetune_epochs=1).to_toml())
    base = run(_spec(), root / "results" / "t" / "fedem", progress=False, plots=False)
    direct = run(_spec(finetune_epochs=1), root / "direct", progress=False, plots=False)
    return root, base, direct


def test_the_variant_trains_bit_identically(runs):
    _, base, direct = runs
    assert [row["loss"] for row in base["history"]] == [row["loss"] for row in direct["history"]]
    assert base["last_round"]["pi"] == direct["last_round"]["pi"]


def test_the_script_reproduces_the_direct_run(runs):
    root, base, direct = runs
    script = _script()
    assert script.main(["demo/t", "fedem", "fedem_ft", "--paper-dir", str(root / "paper"),
                        "--results-dir", str(root / "results")]) == 0
    written = json.loads((root / "results" / "t" / "fedem_ft" / "from_fedem.json").read_text())
    (last,) = written["personalized_history"]
    assert last["round"] == 2
    np.testing.assert_allclose(last["accuracy"], direct["final_per_client"], atol=1e-6)
    # Fine-tuning is what the variant adds: its accuracies are not plain FedEM's.
    assert not np.allclose(last["accuracy"], base["final_per_client"])
    assert written["command"] == "python benchmarks/evaluate_variant.py demo/t fedem fedem_ft"


def test_a_variant_that_trains_differently_is_refused(runs, tmp_path):
    root, _, _ = runs
    table = tmp_path / "paper" / "demo" / "t"
    table.mkdir(parents=True)
    (table / "fedem.toml").write_text(_spec().to_toml())
    (table / "faster.toml").write_text(_spec(finetune_epochs=1, lr=0.05).to_toml())
    with pytest.raises(SystemExit, match="does not train as fedem: config.lr"):
        _script().main(["demo/t", "fedem", "faster", "--paper-dir", str(tmp_path / "paper"),
                        "--results-dir", str(root / "results")])


def test_an_unfinished_base_run_is_refused(runs, tmp_path):
    root, _, _ = runs
    results = tmp_path / "results" / "t" / "fedem"
    results.mkdir(parents=True)
    (results / "results.json").write_text(json.dumps({"status": "running (1/2 rounds)"}))
    with pytest.raises(SystemExit, match="not finished"):
        _script().main(["demo/t", "fedem", "fedem_ft", "--paper-dir", str(root / "paper"),
                        "--results-dir", str(tmp_path / "results")])


AVG = dict(algorithm="fedavg", rounds=2, fraction=0.5, eval_every=1, checkpoint_every=1, config={"local_epochs": 1},
           data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 4},
           model={"name": "mlp", "hidden": [8]})


@pytest.mark.parametrize("base_algorithm, variant, variant_config", [
    ("fedavg", "fedavg_ft", {"finetune_epochs": 1}),
    ("fedavg", "knnper", {}),
    ("fedbabu", "fedbabu", {"finetune_parts": ["head"]}),
    ("fedbabu", "fedbabu", {"finetune_epochs": 2}),
])
def test_evaluation_variants_are_read_from_the_base_run(tmp_path, base_algorithm, variant, variant_config):
    """FedAvg-FT and kNN-Per train as FedAvg (here with half the clients sampled per round), and FedBABU with
    other fine-tuning (its head only, or more epochs) as FedBABU: read from the base cell's run, they reproduce
    their own direct runs."""
    table = tmp_path / "paper" / "demo" / "t"
    table.mkdir(parents=True)
    base_spec = RunSpec.from_dict({**AVG, "algorithm": base_algorithm})
    own = RunSpec.from_dict({**AVG, "algorithm": variant, "config": {"local_epochs": 1, **variant_config}})
    (table / "base.toml").write_text(base_spec.to_toml())
    (table / "variant.toml").write_text(own.to_toml())
    base = run(base_spec, tmp_path / "results" / "t" / "base", progress=False, plots=False)
    direct = run(own, tmp_path / "direct", progress=False, plots=False)
    assert [row["loss"] for row in base["history"]] == [row["loss"] for row in direct["history"]]
    assert _script().main(["demo/t", "base", "variant", "--paper-dir", str(tmp_path / "paper"),
                           "--results-dir", str(tmp_path / "results")]) == 0
    written = json.loads((tmp_path / "results" / "t" / "variant" / "from_base.json").read_text())
    np.testing.assert_allclose(written["personalized_history"][-1]["accuracy"], direct["final_per_client"], atol=1e-6)
    assert not np.allclose(written["personalized_history"][-1]["accuracy"], base["final_per_client"])


def test_a_seed_already_read_is_left_alone(runs, tmp_path, capsys):
    """A seed whose from_<base>.json is there already is skipped before its base run is even looked at (its
    checkpoints may be gone): here the base run is not even finished. ``--rerun`` evaluates it again, and then
    the unfinished base run is refused."""
    root, _, _ = runs
    results = tmp_path / "results" / "t"
    (results / "fedem").mkdir(parents=True)
    (results / "fedem" / "results.json").write_text(json.dumps({"status": "running (1/2 rounds)"}))
    (results / "fedem_ft").mkdir()
    (results / "fedem_ft" / "from_fedem.json").write_text("{}")
    argv = ["demo/t", "fedem", "fedem_ft", "--paper-dir", str(root / "paper"), "--results-dir", str(tmp_path / "results")]
    assert _script().main(argv) == 0
    assert "is there already" in capsys.readouterr().out
    assert (results / "fedem_ft" / "from_fedem.json").read_text() == "{}"
    with pytest.raises(SystemExit, match="not finished"):
        _script().main(argv + ["--rerun"])


def test_seeds_outside_the_run_files_are_refused(runs):
    root, _, _ = runs
    with pytest.raises(SystemExit, match=r"--seeds \[5\]: fedem lists seeds \[0\]"):
        _script().main(["demo/t", "fedem", "fedem_ft", "--paper-dir", str(root / "paper"),
                        "--results-dir", str(root / "results"), "--seeds", "5"])


def test_run_table_reads_a_variant_cell_from_its_base_run(runs, tmp_path, monkeypatch, capsys):
    """``run_table.py`` on a table whose FedEM-FT cell trains as its FedEM cell: with the FedEM run finished on
    this machine, the FedEM-FT cell is read from it (``from_fedem.json``, the direct run's accuracies) instead
    of being trained a second time; while the FedEM run is unfinished it waits; with the finished run's
    checkpoints gone (finished on another machine), it trains as its own run."""
    root, _, direct = runs
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / "results" / "t" / "fedem_ft", ignore_errors=True)  # another test may have read it
    run_table = load_script("benchmarks/paper/run_table.py")
    monkeypatch.setattr(run_table, "REPO", copy)  # the paths it prints are relative to the repository
    monkeypatch.setattr(run_table, "TABLES", copy / "paper")
    monkeypatch.setattr(run_table, "RESULTS", copy / "results")
    variant = copy / "results" / "t" / "fedem_ft"

    assert run_table.main(["demo/t", "--no-pages", "--quiet"]) == 0
    assert not (variant / "results.json").exists()
    read = json.loads((variant / "from_fedem.json").read_text())
    np.testing.assert_allclose(read["personalized_history"][-1]["accuracy"], direct["final_per_client"], atol=1e-6)

    shutil.rmtree(variant)
    base_results = copy / "results" / "t" / "fedem" / "results.json"
    finished = base_results.read_text()
    base_results.write_text(json.dumps({"status": "running (1/2 rounds)"}))
    capsys.readouterr()
    assert run_table.main(["demo/t", "fedem_ft", "--no-pages", "--quiet"]) == 0
    assert "it is read once `run_table.py demo/t fedem` has finished that seed" in capsys.readouterr().out
    assert not variant.exists()

    base_results.write_text(finished)
    shutil.rmtree(copy / "results" / "t" / "fedem" / "checkpoints")
    assert run_table.main(["demo/t", "--no-pages", "--quiet"]) == 0
    assert "no checkpoints on this machine" in capsys.readouterr().out
    trained = json.loads((variant / "results.json").read_text())
    assert trained["status"] == "finished" and not (variant / "from_fedem.json").exists()
    np.testing.assert_allclose(trained["final_per_client"], direct["final_per_client"], atol=1e-6)


def test_variant_bases_pair_each_table_cell_with_the_first_that_trains_alike(tmp_path):
    """FedAvg-FT and kNN-Per read FedAvg; a cell with another learning rate, or other seeds, is no variant, and
    runs of several federations (FedCollab's coalitions) are left to train."""
    specs = {"fedavg": RunSpec.from_dict(AVG),
             "fedavg_ft": RunSpec.from_dict({**AVG, "algorithm": "fedavg_ft", "config": {"local_epochs": 1,
                                                                                          "finetune_epochs": 1}}),
             "knnper": RunSpec.from_dict({**AVG, "algorithm": "knnper"}),
             "faster": RunSpec.from_dict({**AVG, "config": {"local_epochs": 1, "lr": 0.1}}),
             "more_seeds": RunSpec.from_dict({**AVG, "algorithm": "fedavg_ft", "seeds": [0, 1]}),
             "coalitions": RunSpec.from_dict({**AVG, "coalitions": [[0, 1], [2, 3]]}),
             "coalitions_ft": RunSpec.from_dict({**AVG, "algorithm": "fedavg_ft", "coalitions": [[0, 1], [2, 3]]})}
    for name, spec in specs.items():
        (tmp_path / f"{name}.toml").write_text(spec.to_toml())
    assert _script().variant_bases([tmp_path / f"{name}.toml" for name in specs]) == {
        "fedavg_ft": "fedavg", "knnper": "fedavg"}


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(_script(), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 6 and result.failed == 0
