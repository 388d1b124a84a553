"""Run files with ``members`` (a sub-federation) and ``coalitions`` (FedCollab's collaboration structure:
each group trained as a federation of its own): the joined results equal the groups run one by one, a
coalition run resumes and repeats from its run.toml, and bad groupings are refused by name."""
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pflax.experiment import RunError, RunSpec, restrict, run, run_all
from pflax.data import toy_federation

REPO = Path(__file__).resolve().parents[1]
BASE = dict(algorithm="fedavg", rounds=2, eval_every=1, config={"local_epochs": 1},
            data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 4},
            model={"name": "mlp", "hidden": [8]})


def _run(out, **fields):
    return run(RunSpec.from_dict({**BASE, **fields}), out, progress=False, plots=False)


@pytest.fixture(scope="module")
def coalition_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("coalitions")
    return out, _run(out, coalitions=[[0, 2], [1, 3]])


def test_coalitions_join_the_runs_of_their_members(coalition_run, tmp_path):
    out, joined = coalition_run
    assert joined["status"] == "finished" and joined["rounds_completed"] == 2
    assert joined["coalitions"] == [[0, 2], [1, 3]]
    for k, members in enumerate(joined["coalitions"]):
        alone = _run(tmp_path / f"members{k}", members=members)
        assert alone["final_per_client"] == [joined["final_per_client"][c] for c in members]
        assert json.loads((out / f"coalition{k}" / "results.json").read_text())["final_per_client"] == \
            alone["final_per_client"]
    assert joined["final_accuracy"]["mean"] == pytest.approx(100 * np.mean(joined["final_per_client"]))


def test_a_coalition_run_repeats_from_its_run_file_and_resumes(coalition_run, tmp_path):
    out, joined = coalition_run
    again = run(RunSpec.from_file(out / "run.toml"), tmp_path / "again", progress=False, plots=False)
    assert again["final_per_client"] == joined["final_per_client"]
    resumed = run(RunSpec.from_file(out / "run.toml"), out, resume=True, progress=False, plots=False)
    assert resumed["final_per_client"] == joined["final_per_client"]


def test_resuming_keeps_the_coalitions_already_finished(tmp_path, monkeypatch):
    """A fresh clone has a finished coalition's results but not its checkpoints: resuming the seed keeps
    them as they are and trains only the coalitions not finished (it used to train them all again)."""
    import pflax.experiment as experiment

    out = tmp_path / "run"
    spec = RunSpec.from_dict({**BASE, "coalitions": [[0, 2], [1, 3]]})
    whole = run(spec, out, progress=False, plots=False)
    for checkpoints in list(out.rglob("checkpoints")):
        shutil.rmtree(checkpoints)
    kept = (out / "coalition0" / "results.json").read_bytes()
    unfinished = json.loads((out / "coalition1" / "results.json").read_text())
    (out / "coalition1" / "results.json").write_text(json.dumps({**unfinished, "status": "running"}))
    trained, original = [], experiment.run

    def counting_run(one, *args, **kwargs):
        trained.append(one.members)
        return original(one, *args, **kwargs)

    monkeypatch.setattr(experiment, "run", counting_run)
    resumed = original(spec, out, resume=True, progress=False, plots=False)
    assert trained == [(1, 3)]
    assert (out / "coalition0" / "results.json").read_bytes() == kept
    assert resumed["status"] == "finished" and resumed["final_per_client"] == whole["final_per_client"]


def test_restrict_renumbers_and_trims_the_padding():
    train, _ = toy_federation(num_clients=3)
    train = train.replace(mask=train.mask.at[1, 5:].set(False).at[2, 7:].set(False))
    small = restrict(train, [2, 1])
    assert small.client_ids.tolist() == [0, 1] and small.x.shape[1] == 7
    np.testing.assert_array_equal(np.asarray(small.x[0]), np.asarray(train.x[2, :7]))
    assert small.sizes.tolist() == [7, 5]


@pytest.mark.parametrize("fields, message", [
    (dict(coalitions=[[0, 1], [1, 2, 3]]), "listed twice"),
    (dict(coalitions=[[0, 1], [2]]), r"missing: \[3\]"),
    (dict(coalitions=[[0, 9], [1, 2, 3]]), "client 9 does not exist"),
    (dict(members=[0], coalitions=[[0, 1, 2, 3]]), "either members or coalitions"),
    (dict(coalitions=[]), "non-empty list"),
    (dict(members=[True]), "client indices"),
])
def test_bad_groupings_are_refused(fields, message):
    with pytest.raises(RunError, match=message):
        RunSpec.from_dict({**BASE, **fields}).check()


def test_fedcollab_run_files_use_the_solved_structure():
    solved = json.loads((REPO / "benchmarks/results/fedcollab_fmnist/results.json").read_text())["methods"]
    structure = solved["FedAvg + FedCollab"]["coalitions"]
    files = sorted((REPO / "benchmarks/paper/fedcollab/fedcollab_table1_fmnist").glob("*__fedcollab.toml"))
    assert len(files) == 7
    for path in files:
        spec = RunSpec.from_file(path)
        base = RunSpec.from_file(path.with_name(path.name.replace("__fedcollab", "")))
        assert [list(g) for g in spec.coalitions] == structure, path.name
        # The same run as the base's cell, only split into the coalitions.
        assert {**spec.to_dict(), "seeds": None, "coalitions": None} == {**base.to_dict(), "seeds": None, "coalitions": None}, \
            path.name
    # FedAvg's other structures: every client alone, and the ignore-quantities ablation's solution.
    paper = REPO / "benchmarks/paper/fedcollab"
    fedavg = RunSpec.from_file(paper / "fedcollab_table1_fmnist/fedavg.toml")
    for cell, key in (("fedcollab_table1_fmnist/local", "Local"),
                      ("fedcollab_table3_fmnist/fedavg__ignore_quantities", "FedCollab, ignore quantities")):
        spec = RunSpec.from_file(paper / f"{cell}.toml")
        assert [list(g) for g in spec.coalitions] == solved[key]["coalitions"], cell
        assert {**spec.to_dict(), "coalitions": None} == {**fedavg.to_dict(), "coalitions": None}, cell


def test_the_ignore_distances_run_file_solves_with_the_mean_distance():
    """The ignore-distances ablation finds its structure per seed ([structure]) from the off-diagonal mean of
    the estimated distances; with seed 0 it is the structure the solver script found."""
    from pflax.algorithms.fedcollab.solver import ablate

    solver_run = json.loads((REPO / "benchmarks/results/fedcollab_fmnist/results.json").read_text())
    dist = np.asarray(solver_run["distances"]["D"])
    sizes = [2100] * 10 + [14] * 10
    flat, _ = ablate(dist, sizes, "ignore_distances")
    spec = RunSpec.from_file(REPO / "benchmarks/paper/fedcollab/fedcollab_table3_fmnist/fedavg__ignore_distances.toml")
    assert spec.structure == {"method": "fedcollab_equal_distances", "distance": flat[0, 1], "c": solver_run["C"],
                              "restarts": solver_run["restarts"]}
    fedavg = RunSpec.from_file(REPO / "benchmarks/paper/fedcollab/fedcollab_table1_fmnist/fedavg.toml")
    assert {**spec.to_dict(), "structure": None} == {**fedavg.to_dict(), "structure": None}
    seed0 = json.loads((REPO / "benchmarks/results/fedcollab_table3_fmnist/fedavg__ignore_distances/seed0/"
                                "results.json").read_text())
    assert seed0["structure"]["sizes"] == sizes
    assert seed0["coalitions"] == solver_run["methods"]["FedCollab, ignore distances"]["coalitions"]
    # What the Table 3 page says of every seed: one large client of each large label group joins the small ones.
    for path in sorted((REPO / "benchmarks/results/fedcollab_table3_fmnist/fedavg__ignore_distances").glob("seed*/results.json")):
        result = json.loads(path.read_text())
        (with_small,) = [g for g in result["coalitions"] if 10 in g]
        assert sorted(with_small)[2:] == list(range(10, 20)), path
        assert sorted(c // 5 for c in with_small[:2]) == [0, 1], path
        # And of IPR there: the clients left alone train exactly as in the Local run of the same seed.
        local = json.loads((REPO / "benchmarks/results/fedcollab_table1_fmnist/local" / path.parent.name /
                            "results.json").read_text())
        alone = [g[0] for g in result["coalitions"] if len(g) == 1]
        assert len(alone) == 8 and all(result["final_per_client"][c] == local["final_per_client"][c] for c in alone)


def test_an_equal_distance_structure_is_the_solvers_for_the_runs_seed(tmp_path):
    """``fedcollab_equal_distances`` runs FedCollab's solver on the partition's client sizes, seeded with
    the run's seed, and the run trains the coalitions it finds."""
    from pflax.algorithms.fedcollab.solver import solve
    from pflax.experiment import find_structure

    table = {"method": "fedcollab_equal_distances", "distance": 0.3, "c": 2.0, "restarts": 3}
    spec = RunSpec.from_dict({**BASE, "seeds": [1], "structure": table})
    found = find_structure(spec)
    sizes = found["sizes"]
    assert sizes == [20.0] * 4
    expected = solve(0.3 * (1 - np.eye(4)), sizes, 2.0, seed=1, restarts=3)
    assert found["coalitions"] == expected["coalitions"] and found["objective"] == expected["objective"]
    result = run(spec, tmp_path, progress=False, plots=False)
    assert result["coalitions"] == found["coalitions"] and result["structure"] == found


@pytest.mark.parametrize("table, message", [
    ({"method": "fedcollab_equal_distances"}, "needs distance"),
    ({"method": "fedcollab_equal_distances", "distance": -0.1}, "distance must be a finite number >= 0"),
    ({"method": "fedcollab_equal_distances", "distance": 0.5, "c": True}, "c must be a finite number >= 0"),
    ({"method": "fedcollab_equal_distances", "distance": "far"}, "distance must be a finite number >= 0"),
    ({"method": "fedcollab_equal_distances", "distance": 0.5, "restarts": 0}, "restarts must be an integer >= 1"),
    ({"method": "fedcollab_equal_distances", "distance": 0.5, "clusters": 2}, "has no parameter clusters"),
])
def test_bad_equal_distance_structures_are_refused(table, message):
    with pytest.raises(RunError, match=message):
        RunSpec.from_dict({**BASE, "structure": table}).check()


def test_a_coalition_run_file_trains_as_fedcollabs_train_coalitions(coalition_run):
    """The run file's coalitions and :func:`pflax.algorithms.fedcollab.train_coalitions` (the solver
    script's trainer) give every client the same accuracy, bit for bit."""
    import jax

    from pflax.algorithms import fedavg
    from pflax.algorithms.fedcollab import train_coalitions
    from pflax.experiment import build

    out, joined = coalition_run
    whole = RunSpec.from_file(out / "run.toml")
    built = build(dataclasses.replace(whole, coalitions=None))  # the whole federation's data, model and Config
    acc = train_coalitions(fedavg, np.array([0, 1, 0, 1]), built.model, built.train, built.test,
                           jax.random.key(0), built.config, 2)
    assert acc.tolist() == joined["final_per_client"]


def test_resuming_several_seeds_starts_the_seeds_not_reached_yet(tmp_path):
    """An interrupted multi-seed run has checkpoints for its first seeds only: resuming continues those and
    starts the others (it used to stop at the first seed without checkpoints)."""
    spec = RunSpec.from_dict({**BASE, "seeds": [0, 1], "members": [0, 1]})
    first = run(RunSpec.from_dict({**BASE, "members": [0, 1]}), tmp_path / "seed0", progress=False, plots=False)
    both = run_all(spec, tmp_path, resume=True, progress=False, plots=False)
    assert [r["seed"] for r in both] == [0, 1] and all(r["status"] == "finished" for r in both)
    assert both[0]["resumed_at_rounds"] == [2] and both[1]["resumed_at_rounds"] == []
    assert both[0]["final_per_client"] == first["final_per_client"]


def test_a_resumed_run_reports_the_time_of_every_session(tmp_path):
    """``timing.total_s`` of a run continued from its checkpoints counts the rounds of the sessions before the
    resume too (it used to be the wall time of the last process only: a finished run resumed showed ~0 s)."""
    two = run(RunSpec.from_dict({**BASE, "members": [0, 1]}), tmp_path, progress=False, plots=False)
    three = run(RunSpec.from_dict({**BASE, "members": [0, 1], "rounds": 3}), tmp_path, resume=True, progress=False,
                plots=False)
    assert three["resumed_at_rounds"] == [2] and three["history"][:2] == two["history"]
    spent = sum(row["seconds"] + row.get("eval_seconds", 0.0) for row in three["history"])
    assert three["timing"]["total_s"] == pytest.approx(spent)
    assert three["timing"]["total_s"] > two["timing"]["total_s"] > 0
    assert three["timing"]["this_session_s"] > 0  # the last process's wall time, start-up included, kept apart
    again = run(RunSpec.from_dict({**BASE, "members": [0, 1], "rounds": 3}), tmp_path, resume=True, progress=False,
                plots=False)  # finished: the files are rewritten, the time is not lost
    assert again["timing"]["total_s"] == pytest.approx(spent)


def test_a_packed_checkpoint_resumes_the_run_on_a_machine_without_the_checkpoints(tmp_path, monkeypatch):
    """``run(pack=True)`` keeps an unfinished run's latest checkpoint as one file beside its results; a copy of
    the results folder without ``checkpoints/`` (what a commit holds) resumes from it bit for bit, and the file
    goes once the run is finished."""
    import shutil

    from pflax import checkpoint, experiment

    spec = RunSpec.from_dict({**BASE, "rounds": 4, "checkpoint_every": 2, "members": [0, 1]})
    whole = run(spec, tmp_path / "whole", progress=False, plots=False)
    real_loop = experiment.loop
    monkeypatch.setattr(experiment, "loop", lambda *a, **k: real_loop(*a[:4], 2, **k))  # stopped after round 2
    run(spec, tmp_path / "here", progress=False, plots=False, pack=True)
    monkeypatch.setattr(experiment, "loop", real_loop)
    packed = tmp_path / "here" / experiment.PACKED_CHECKPOINT
    assert checkpoint.packed_step(packed) == 2
    shutil.copytree(tmp_path / "here", tmp_path / "elsewhere", ignore=shutil.ignore_patterns("checkpoints"))
    [resumed] = run_all(spec, tmp_path / "elsewhere", resume=True, progress=False, plots=False, pack=True)
    assert resumed["resumed_at_rounds"] == [2] and resumed["status"] == "finished"
    assert resumed["final_per_client"] == whole["final_per_client"]
    assert resumed["history"][-1]["loss"] == whole["history"][-1]["loss"]
    assert not (tmp_path / "elsewhere" / experiment.PACKED_CHECKPOINT).exists()
    # A fresh run in the first folder drops the packed step of the run it replaces.
    run(spec, tmp_path / "here", progress=False, plots=False)
    assert not packed.exists()
