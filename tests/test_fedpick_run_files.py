"""FedPick's run files (``benchmarks/paper/fedpick/<table>/<arm>.toml``) state every setting of its
cross-domain digits runs: each committed results file is written by exactly one of them, which asks for that
very run (rounds, width, domains, sizes) with the configuration the file recorded; the benchmark refuses an
incomplete run file by name, and runs, skips and reruns (arm, seed) pairs as its run files say."""
from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
RUN_FILES = sorted((REPO / "benchmarks" / "paper" / "fedpick").glob("*/*.toml"))
RESULTS = sorted(REPO.glob("benchmarks/results/fedpick_domains*/*_seed*.json"))


def _benchmark():
    if "fedpick_domains" not in sys.modules:
        load_script("benchmarks/fedpick_domains.py")
    return sys.modules["fedpick_domains"]


@functools.lru_cache(maxsize=None)
def _parsed() -> tuple:
    """Every FedPick run file, read once for the tests that look through all of them."""
    return tuple(map(_benchmark().read_run_file, RUN_FILES))


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _fields(config_repr: str) -> dict[str, str]:
    """``Config(a=1, b=Sharing(parts=('body',), bn=True))`` -> {"a": "1", "b": "Sharing(...)"}: the top-level
    fields, split at the commas outside brackets. The encoder part was renamed ``body`` since the oldest runs."""
    inner = config_repr[config_repr.index("(") + 1:-1].replace("'encoder'", "'body'")
    fields, depth, start = {}, 0, 0
    for i, ch in enumerate(inner + ","):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            name, _, value = inner[start:i].strip().partition("=")
            fields[name] = value
            start = i + 1
    return fields


def test_there_are_fedpick_run_files_and_results():
    assert len(RUN_FILES) >= 24 and len(RESULTS) >= 61


@pytest.mark.parametrize("path", RUN_FILES, ids=_name)
def test_run_file_reads_and_cites_its_table(path):
    run = _benchmark().read_run_file(path)
    text = path.read_text()
    assert text.startswith("# FedPick ("), f"{_name(path)}: no comment header citing the paper"
    assert re.search(r"\bTable (II|IV)\b", " ".join(text.splitlines()[:3])), f"{_name(path)}: names no paper table"
    assert run.arm == path.stem
    assert run.out.is_relative_to(REPO / "benchmarks" / "results")
    assert len(set(run.seeds)) == len(run.seeds)


def test_each_results_folder_and_arm_has_one_run_file():
    writers = {}
    for path, run in zip(RUN_FILES, _parsed()):
        assert (run.out, run.arm) not in writers, f"{_name(path)} and {writers[run.out, run.arm]} write the same files"
        writers[run.out, run.arm] = _name(path)


@pytest.mark.parametrize("result", RESULTS, ids=_name)
def test_each_committed_result_is_its_run_files_run(result):
    bench = _benchmark()
    data = json.loads(result.read_text())
    runs = [r for r in _parsed() if r.out == result.parent and r.arm == data["arm"]]
    assert len(runs) == 1, f"{_name(result)}: {len(runs)} run files write it"
    run = runs[0]
    assert data["seed"] in run.seeds
    assert bench.finished(run, data["seed"]), f"{_name(result)}: {_name(run.path)} asks for another run"
    every = run.eval_every
    assert data["eval_rounds"] == sorted(set(range(every, run.rounds + 1, every)) | {run.rounds})
    recorded, ours = _fields(data["config"]), _fields(repr(run.config))
    common = sorted(set(recorded) & set(ours) - {"execution"})
    assert len(common) >= 7
    assert {k: recorded[k] for k in common} == {k: ours[k] for k in common}, _name(run.path)


def _write(path: Path, **changes) -> Path:
    """A copy of a committed run file (or of ``path`` itself when it exists) with ``key = value`` lines changed."""
    source = path if path.exists() else REPO / "benchmarks/paper/fedpick/fedpick_table2_usps/fedbn.toml"
    text = source.read_text()
    for key, value in changes.items():
        text = re.sub(rf"(?m)^{key} = .*$", "" if value is None else f"{key} = {value}", text)
    path.write_text(text)
    return path


def test_an_incomplete_or_unknown_key_is_refused_by_name(tmp_path):
    bench = _benchmark()
    with pytest.raises(SystemExit, match=r"\[config\] missing prox_mu"):
        bench.read_run_file(_write(tmp_path / "a.toml", prox_mu=None))
    with pytest.raises(SystemExit, match="missing rounds"):
        bench.read_run_file(_write(tmp_path / "b.toml", rounds=None))
    with pytest.raises(SystemExit, match=r"\[config\] unknown lam"):
        bench.read_run_file(_write(tmp_path / "c.toml", lr="0.01\nlam = 1.0"))
    with pytest.raises(SystemExit, match="test_per_domain must be"):
        bench.read_run_file(_write(tmp_path / "d.toml", test_per_domain='"some"'))
    with pytest.raises(SystemExit, match="algorithm must be fedpick or leafwise"):
        bench.read_run_file(_write(tmp_path / "e.toml", algorithm='"fedavg"'))


def test_the_benchmark_runs_skips_and_extends_as_its_run_file_says(tmp_path, mnist_dir, capsys):
    """Two clients (MNIST, inverted MNIST), 128 training images each, two rounds of FedBN: the run writes its results
    file; run again, it trains nothing; asked for a third round, it runs again."""
    bench = _benchmark()
    out = tmp_path / "results"
    path = _write(tmp_path / "fedbn.toml", rounds=2, eval_every=1, seeds="[0]",
                  out=json.dumps(str(out)), domains='["mnist", "inverse"]', train_per_domain=128,
                  test_per_domain=20, width=0.125)
    run = bench.read_run_file(path)
    assert run.out == out  # an absolute folder stays as it is
    bench.main([str(path), "--data-dir", str(mnist_dir.parent)])
    first = json.loads((out / "fedbn_seed0.json").read_text())
    assert first["rounds"] == 2 and first["eval_rounds"] == [1, 2] and len(first["best_per_domain"]) == 2
    assert first["run_file"] == str(path) or first["run_file"].endswith("fedbn.toml")
    import jax

    assert first["jax"]["backend"] == jax.default_backend() and first["jax"]["device_kind"]
    assert first["sessions"] == [{"from_round": 0, **first["jax"]}]  # one process trained it
    capsys.readouterr()
    bench.main([str(path), "--data-dir", str(mnist_dir.parent)])
    assert "data built" not in capsys.readouterr().out  # nothing left to train
    bench.main([str(_write(path, rounds=3)), "--data-dir", str(mnist_dir.parent)])
    assert bench.read_run_file(path).out == out
    third = json.loads((out / "fedbn_seed0.json").read_text())
    assert third["rounds"] == 3 and third["accuracy_curve"][:2] == first["accuracy_curve"]


def test_run_table_hands_a_fedpick_table_to_the_benchmark(monkeypatch):
    """``run_table.py fedpick/<table> [cells]`` gives the benchmark the table's run files in order.txt's order."""
    run_table = load_script("benchmarks/paper/run_table.py")
    calls = []
    fake = type(sys)("fedpick_domains")
    fake.main = calls.append
    monkeypatch.setitem(sys.modules, "fedpick_domains", fake)
    monkeypatch.setattr(run_table.subprocess, "run", lambda *a, **k: None)  # no page rebuild here
    table = REPO / "benchmarks" / "paper" / "fedpick" / "fedpick_table2_usps"
    assert run_table.main(["fedpick/fedpick_table2_usps"]) == 0
    order = (table / "order.txt").read_text().split()
    assert calls[-1] == [str(table / f"{arm}.toml") for arm in order]
    run_table.main(["fedpick/fedpick_table2_usps", "fedbn"])
    assert calls[-1] == [str(table / "fedbn.toml")]
    for flag in (["--rerun"], ["--pack"], ["--seeds", "0"]):
        with pytest.raises(SystemExit, match="--rerun, --pack and --seeds apply to pflax run files"):
            run_table.main(["fedpick/fedpick_table2_usps", *flag])
