"""A run whose round produces NaN/Inf (:class:`pflax.experiment.Diverged`) says so in its results file,
scores the last finite state it kept, and is left alone afterwards: training it again would only diverge
again, so neither ``run_all`` nor ``run_table.py`` retrains it and no packed checkpoint is kept for it."""
import json

import pytest

from conftest import load_script
from pflax import experiment
from pflax.experiment import Diverged, RunSpec, finished_result, run, run_all

BASE = dict(algorithm="fedavg", rounds=6, eval_every=2, checkpoint_every=2, config={"local_epochs": 1},
            data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 3},
            model={"name": "mlp", "hidden": [8]})
REAL_LOOP = experiment.loop


def _diverge_after(monkeypatch, completed: int) -> None:
    """``experiment.loop`` trains ``completed`` rounds, then the next one diverges, as a NaN would make it."""
    def loop(algorithm, state, train, test, rounds, **options):
        REAL_LOOP(algorithm, state, train, test, completed, **options)
        raise Diverged(completed)

    monkeypatch.setattr(experiment, "loop", loop)


@pytest.fixture(scope="module")
def three_rounds(tmp_path_factory):
    """The same run, stopped cleanly after 3 rounds: what the diverged run kept."""
    return run(RunSpec.from_dict({**BASE, "rounds": 3}), tmp_path_factory.mktemp("three"), progress=False,
               plots=False)


def test_the_message_names_the_round_that_diverged_and_the_round_kept():
    assert str(Diverged(3)).startswith("round 4 produced NaN/Inf (diverged); the state was kept at round 3.")


def test_a_diverged_run_records_where_it_ended_and_scores_the_state_it_kept(tmp_path, monkeypatch, three_rounds):
    _diverge_after(monkeypatch, 3)
    with pytest.raises(Diverged):
        run(RunSpec.from_dict(BASE), tmp_path, progress=False, plots=False, pack=True)
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["status"] == "diverged (round 4 of 6 produced NaN/Inf)"
    assert result["diverged_at_round"] == 4 and result["rounds_completed"] == 3
    # round 2 was a regular evaluation; round 3's is of the state kept, the same as a clean 3-round run's
    assert [e["round"] for e in result["personalized_history"]] == [2, 3]
    assert result["final_per_client"] == three_rounds["final_per_client"]
    assert result["history"][-1]["accuracy"] == pytest.approx(three_rounds["history"][-1]["accuracy"])
    assert not (tmp_path / experiment.PACKED_CHECKPOINT).exists()  # resuming would diverge again


def test_a_diverged_run_is_not_trained_again(tmp_path, monkeypatch):
    spec = RunSpec.from_dict(BASE)
    _diverge_after(monkeypatch, 3)
    with pytest.raises(Diverged):
        run(spec, tmp_path, progress=False, plots=False)
    assert finished_result(spec, tmp_path) is None  # not finished ...
    assert finished_result(spec, tmp_path, or_diverged=True)["diverged_at_round"] == 4  # ... but ended

    def never(*args, **kwargs):
        raise AssertionError("a diverged run was trained again")

    monkeypatch.setattr(experiment, "run", never)
    (kept,) = run_all(spec, tmp_path, skip_finished=True)
    assert kept["diverged_at_round"] == 4
    run_table = load_script("benchmarks/paper/run_table.py")
    assert run_table.finished_seeds(spec, tmp_path) == [0]
    assert (tmp_path / "checkpoints").exists() and run_table.pack_unfinished(tmp_path) == []
    # another run file (a lower learning rate, as the message advises) is a different run: it trains
    lower = RunSpec.from_dict({**BASE, "config": {"local_epochs": 1, "lr": 0.001}})
    assert finished_result(lower, tmp_path, or_diverged=True) is None
