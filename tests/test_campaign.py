"""``benchmarks/paper/campaign.py``: jobs start in order, at most ``--parallel`` at once, and are stopped at the
deadline; the archive carries results and packed checkpoints but no checkpoint folders."""
from __future__ import annotations

import sys
import tarfile
import time
from pathlib import Path

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def _campaign():
    return load_script("benchmarks/paper/campaign.py")


def _python(words: list[str]) -> list[str]:
    """A job ``sleep <s>`` or ``exit <code>`` as a small Python process."""
    verb, value = words
    code = f"import time; time.sleep({float(value)})" if verb == "sleep" else f"raise SystemExit({int(value)})"
    return [sys.executable, "-c", code]


def test_jobs_run_in_order_at_most_parallel_and_stop_at_the_deadline(tmp_path):
    campaign = _campaign()
    jobs_file = tmp_path / "jobs.txt"
    jobs_file.write_text("# two quick jobs, one failing, then two that outlast the deadline\n"
                         "exit 0\nexit 3\nsleep 60\nsleep 60  # a comment\nexit 0\n")
    jobs = campaign.read_jobs(jobs_file)
    assert [job.words for job in jobs] == [["exit", "0"], ["exit", "3"], ["sleep", "60"], ["sleep", "60"],
                                           ["exit", "0"]]
    start = time.monotonic()
    campaign.run(jobs, parallel=2, deadline=8, grace=5, logs=tmp_path / "logs", command=_python)
    assert time.monotonic() - start < 30
    outcomes = [job.outcome for job in jobs]
    assert outcomes[:2] == ["finished", "failed (exit 3)"]
    assert all(o.startswith("stopped at the deadline") for o in outcomes[2:4])
    assert outcomes[4] == "not started"  # the two sleepers held both places until the deadline
    assert all(job.process.poll() is not None for job in jobs[:4])  # nothing left running
    assert jobs[0].started <= jobs[2].started and jobs[2].started >= jobs[0].ended  # order, two at a time
    assert (tmp_path / "logs" / f"{jobs[0].name}.log").exists()


def test_the_archive_leaves_checkpoint_folders_and_older_files_out(tmp_path):
    campaign = _campaign()
    root = tmp_path / "results"
    old = root / "old" / "results.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    since = time.time()
    time.sleep(0.05)
    cell = root / "cell" / "seed0"
    (cell / "checkpoints" / "10" / "state").mkdir(parents=True)
    for name in ("results.json", "checkpoint.tar.gz", "checkpoints/10/state/data"):
        (cell / name).write_text("x")
    archive = tmp_path / "out.tar.gz"
    packed = campaign.archive_results(since, archive, (root,))
    assert sorted(p.relative_to(root).as_posix() for p in packed) == ["cell/seed0/checkpoint.tar.gz",
                                                                      "cell/seed0/results.json"]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["cell/seed0/checkpoint.tar.gz", "cell/seed0/results.json"]


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(_campaign(), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2 and result.failed == 0


def test_the_archive_keeps_the_smallest_packs_within_the_limit_and_no_half_written_pack(tmp_path):
    campaign = _campaign()
    root = tmp_path / "results"
    since = time.time() - 1
    for cell, size in (("big", 3000), ("small", 1000), ("middle", 2000)):
        (root / cell).mkdir(parents=True)
        (root / cell / "results.json").write_text("{}")
        (root / cell / "checkpoint.tar.gz").write_bytes(b"x" * size)
    (root / "big" / ".checkpoint.tar.gz.abc123.tmp").write_bytes(b"x" * 10)  # a pack cut off while written
    archive = tmp_path / "out.tar.gz"
    packed = campaign.archive_results(since, archive, (root,), max_pack_bytes=3500)
    names = sorted(p.relative_to(root).as_posix() for p in packed)
    assert names == ["big/results.json", "middle/checkpoint.tar.gz", "middle/results.json",
                     "small/checkpoint.tar.gz", "small/results.json"]
    kept, left_out = campaign.results_files(since, (root,), max_pack_bytes=3500)
    assert kept == packed and [p.relative_to(root).as_posix() for p in left_out] == ["big/checkpoint.tar.gz"]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == names


def test_the_committed_campaign_names_only_work_still_to_do():
    """Every cell of every job of ``campaign_h100.txt`` (``<table> <cell>... [--seeds k]``) has a seed without a
    finished run, so a lent GPU's minutes go to missing results only (a finished seed would be skipped, but its
    line would misstate what is left)."""
    import tomllib

    from pflax.experiment import RunSpec

    run_table = load_script("benchmarks/paper/run_table.py")
    jobs = _campaign().read_jobs(REPO / "benchmarks" / "paper" / "campaign_h100.txt")
    checked = 0
    for job in jobs:
        table, *rest = job.words
        cells = rest[:rest.index("--seeds")] if "--seeds" in rest else rest
        assert cells, f"line {job.number}: no cell"
        for cell in cells:
            run_file = REPO / "benchmarks" / "paper" / table / f"{cell}.toml"
            if table.startswith("fedpick/"):  # a FedPick run file names its results folder: <out>/<arm>_seed<k>.json
                fedpick = tomllib.loads(run_file.read_text())
                seeds = list(fedpick["seeds"])
                done = [k for k in seeds if (REPO / fedpick["out"] / f"{fedpick['arm']}_seed{k}.json").exists()]
            else:
                run_spec = RunSpec.from_file(run_file)
                seeds = list(run_spec.seeds)
                done = run_table.finished_seeds(run_spec, REPO / "benchmarks" / "results" / table.split("/")[-1] / cell)
            wanted = [int(rest[rest.index("--seeds") + 1])] if "--seeds" in rest else seeds
            assert set(wanted) - set(done), f"line {job.number}, {cell}: every seed has finished"
        checked += 1
    # every job line of the file was read and checked, however many are left
    lines = (REPO / "benchmarks" / "paper" / "campaign_h100.txt").read_text().splitlines()
    assert checked == len(jobs) == sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))


# The diagnosis run files of Table 4 and of Fed-RoD (benchmarks/paper/fedpac/table4_*_check/, *_fedrod_check/),
# each beside the cell it diagnoses and the one setting it changes: the check must otherwise be the cell's run, or
# its page compares unlike runs.
ONE_SETTING_CHECKS = {
    "table4_fedem_check/fedem__m_3__client_size_20clients": ("table1_fmnist/fedem__m_3", "component_weights"),
    "table4_fedem_check/fedem__m_3__client_size_100clients": ("table1_fmnist_100clients/fedem__m_3",
                                                              "component_weights"),
    "table4_fedem_check/fedem_ft__m_3__client_size_100clients": ("table1_fmnist_100clients/fedem_ft__m_3",
                                                                 "component_weights"),
    "table4_fedem_check/fedem__m_5__client_size_20clients": ("table1_fmnist/fedem__m_5", "component_weights"),
    "table4_fedem_check/fedem_ft__m_5__client_size_20clients": ("table1_fmnist/fedem_ft__m_5", "component_weights"),
    "table4_scaffold_check/scaffold__momentum_corrected_20clients": ("table1_fmnist/scaffold",
                                                                     "momentum_corrected_controls"),
    "table4_scaffold_check/scaffold__momentum_corrected_100clients": ("table1_fmnist_100clients/scaffold",
                                                                      "momentum_corrected_controls"),
    "table3_fedrod_check/fedrod__personal_loss_trains_body": ("table3_fmnist/fedrod", "personal_loss_trains_body"),
    "table1_fedrod_check/fedrod__personal_loss_trains_body_20clients": ("table1_fmnist/fed_rod",
                                                                        "personal_loss_trains_body"),
    "table1_fedrod_check/fedrod__personal_loss_trains_body_100clients": ("table1_fmnist_100clients/fedrod",
                                                                         "personal_loss_trains_body"),
    "table6_fedrod_check/fedrod__personal_loss_trains_body": ("table6_fmnist/fedrod", "personal_loss_trains_body"),
    "table10_fedrod_check/fedrod__personal_loss_trains_body": ("table10_fmnist/fedrod", "personal_loss_trains_body"),
}


def test_each_one_setting_check_is_its_cells_run_but_for_the_diagnosed_setting():
    """Every run file of Table 4's and Fed-RoD's diagnosis folders is listed here, runs seed 0 of its cell, and
    differs from the cell's run file in the diagnosed ``[config]`` key alone (the key the cell leaves at its
    default may be absent from the cell's file)."""
    import tomllib

    paper = REPO / "benchmarks" / "paper" / "fedpac"
    on_disk = {f"{p.parent.name}/{p.stem}" for pattern in ("table4_*_check/*.toml", "*_fedrod_check/*.toml")
               for p in paper.glob(pattern)}
    assert on_disk == set(ONE_SETTING_CHECKS)
    for check_name, (cell_name, key) in ONE_SETTING_CHECKS.items():
        check = tomllib.loads((paper / f"{check_name}.toml").read_text())
        cell = tomllib.loads((paper / f"{cell_name}.toml").read_text())
        assert check.pop("seeds") == [0] and 0 in cell.pop("seeds"), check_name
        changed = check["config"].pop(key)
        assert cell["config"].pop(key, None) != changed, check_name
        assert check == cell, check_name
