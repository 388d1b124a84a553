"""SIGINT or SIGTERM during a run stops it after the round in progress, with a checkpoint of that round,
and resuming gives the uninterrupted run bit for bit; a second signal acts at once."""
import json
import signal
import threading

import pytest

from pflax import checkpoint, cli, experiment
from pflax.experiment import RunSpec, Stopped, run, run_all

BASE = dict(algorithm="fedavg", rounds=4, eval_every=1, checkpoint_every=3, config={"local_epochs": 1},
            data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 4},
            model={"name": "mlp", "hidden": [8]})
REAL_LOOP = experiment.loop


def _signal_during(monkeypatch, at_round: int, *signums: int) -> None:
    """Make ``experiment.loop`` raise ``signums`` in this process as round ``at_round`` ends, before the
    run's own hooks see it (as a signal arriving while the round trains would)."""
    def loop(*args, after_round, **kwargs):
        def hook(state, record, evaluated):
            if record.rounds_done == at_round:
                for signum in signums:
                    signal.raise_signal(signum)
            after_round(state, record, evaluated)
        return REAL_LOOP(*args, after_round=hook, **kwargs)

    monkeypatch.setattr(experiment, "loop", loop)


def _handlers() -> dict:
    return {s: signal.getsignal(s) for s in experiment.STOP_SIGNALS}


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("seconds", "eval_seconds")} for row in rows]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run(RunSpec.from_dict(BASE), tmp_path_factory.mktemp("whole"), progress=False, plots=False)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_round_with_its_checkpoint_and_resumes_bit_for_bit(
        signum, uninterrupted, tmp_path, monkeypatch, capsys):
    spec, before = RunSpec.from_dict(BASE), _handlers()
    _signal_during(monkeypatch, 2, signum)  # round 2 is not a regular checkpoint (every 3)
    with pytest.raises(Stopped) as stopped:
        run(spec, tmp_path, progress=False, plots=False, pack=True)
    assert (stopped.value.round_index, stopped.value.rounds, stopped.value.signum) == (2, 4, signum)
    assert stopped.value.exit_code == 128 + signum
    assert f"{signal.Signals(signum).name}: stopping after the round in progress" in capsys.readouterr().err
    assert _handlers() == before  # put back
    assert checkpoint.latest_step(tmp_path / "checkpoints") == 2
    assert checkpoint.packed_step(tmp_path / experiment.PACKED_CHECKPOINT) == 2
    partial = json.loads((tmp_path / "results.json").read_text())
    assert partial["rounds_completed"] == 2 and partial["status"] == "running (2/4 rounds)"

    monkeypatch.setattr(experiment, "loop", REAL_LOOP)
    resumed = run(spec, tmp_path, resume=True, progress=False, plots=False, pack=True)
    assert resumed["resumed_at_rounds"] == [2] and resumed["status"] == "finished"
    assert resumed["final_per_client"] == uninterrupted["final_per_client"]
    assert _strip(resumed["history"]) == _strip(uninterrupted["history"])
    assert resumed["personalized_history"] == uninterrupted["personalized_history"]
    assert not (tmp_path / experiment.PACKED_CHECKPOINT).exists()


def test_a_second_signal_acts_at_once(tmp_path, monkeypatch):
    before = _handlers()
    _signal_during(monkeypatch, 1, signal.SIGINT, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        run(RunSpec.from_dict(BASE), tmp_path, progress=False, plots=False)
    assert _handlers() == before
    assert checkpoint.latest_step(tmp_path / "checkpoints") is None  # stopped at once, before any checkpoint


def test_a_stopped_seed_leaves_the_next_seeds_unstarted(tmp_path, monkeypatch):
    _signal_during(monkeypatch, 1, signal.SIGTERM)
    with pytest.raises(Stopped, match=r"after round 1 of 4"):
        run_all(RunSpec.from_dict({**BASE, "seeds": [0, 1]}), tmp_path, progress=False, plots=False)
    assert checkpoint.latest_step(tmp_path / "seed0" / "checkpoints") == 1
    assert not (tmp_path / "seed1").exists()


def test_the_cli_says_how_to_resume_and_exits_as_the_signal_would(tmp_path, monkeypatch, capsys):
    _signal_during(monkeypatch, 3, signal.SIGTERM)
    argv = ["run", "fedavg", "--model", "mlp", "--clients", "4", "--rounds", "4", "--train-per-client", "20",
            "--test-per-client", "20", "--set", "local_epochs=1", "--quiet", "--no-plots", "--out", str(tmp_path)]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM after round 3 of 4" in err and "add --resume to the same command" in err
    assert checkpoint.latest_step(tmp_path / "checkpoints") == 3


def test_outside_the_main_thread_signals_are_left_alone():
    before, seen = _handlers(), []

    def worker():
        with experiment.stop_requests() as received:
            seen.append((received, _handlers()))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [([], before)]


def test_a_real_sigterm_to_a_cli_run_checkpoints_the_round_it_stopped_after(tmp_path):
    """A signal from outside, arriving while the process trains, not raised from a hook."""
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "pflax.cli", "run", "fedavg", "--model", "mlp", "--clients", "4", "--rounds", "500",
            "--train-per-client", "20", "--test-per-client", "20", "--set", "local_epochs=1", "--eval-every", "1",
            "--checkpoint-every", "1000", "--quiet", "--no-plots", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))
    deadline = time.time() + 300
    while not (out / "results.json").exists():  # written after round 1, atomically
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "no round finished"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err
    stopped_at = checkpoint.latest_step(out / "checkpoints")
    assert stopped_at is not None and 1 <= stopped_at < 500, "the run finished before the signal, or saved nothing"
    assert json.loads((out / "results.json").read_text())["rounds_completed"] == stopped_at
    assert f"stopped by SIGTERM after round {stopped_at} of 500" in err


def test_an_ignored_signal_stays_ignored(monkeypatch):
    """A job a shell started with ``&`` ignores SIGINT; a run inside it must not start taking it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with experiment.stop_requests() as received:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM).__name__ == "ask_to_stop"  # SIGTERM still asks to stop
            signal.raise_signal(signal.SIGINT)
            assert received == []
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
