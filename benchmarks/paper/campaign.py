"""Run many paper cells at once, each in its own process, until a deadline: for a machine with a GPU and many
cores, where one cell leaves most of it idle.

    python benchmarks/paper/campaign.py jobs.txt --parallel 12 --deadline 480 --logs /tmp/campaign

``jobs.txt`` holds one job per line, ``<paper>/<table> <cell>... [run_table options]``, for instance
``fedpac/table10_fmnist fedpac --seeds 0``; blank lines and ``#`` comments are skipped. A line's cells run one
after the other in their table's order, so a variant cell (FedEM-FT) on its base cell's line is read from that
run on the machine that has its checkpoints. Jobs start in the
file's order, at most ``--parallel`` at a time, each as ``benchmarks/paper/run_table.py <line> --quiet
--no-pages`` with its output in ``<logs>/<n>_<table>_<cell>.log``. No job starts after ``--deadline`` seconds;
jobs still running then are stopped (SIGTERM, then SIGKILL after ``--grace`` seconds). On SIGTERM a pflax run
finishes its round in progress and checkpoints it (``pflax.experiment.Stopped``); one that SIGKILL ends first
keeps its latest regular checkpoint. Either way the checkpoint is packed into its results folder as
``checkpoint.tar.gz`` for pflax run files, so running the same cell again with ``run_table.py`` resumes it.
At the end the results pages are regenerated once, and one line per job says how it ended; the exit status is 1
if any job failed (stopped jobs do not count).
``--archive results.tar.gz`` also packs every file that the campaign wrote under ``benchmarks/results/`` and
``docs/results/`` into one file to carry home, leaving out checkpoint folders (a run's packed
``checkpoint.tar.gz`` is what resumes it elsewhere; the folders can be hundreds of times larger), and
``--archive-packs-mb 20`` keeps its packs, smallest first, within 20 MB, for a machine that sends back only
so much (a 100-client run's pack can be 30 MB).
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
RUN_TABLE = REPO / "benchmarks" / "paper" / "run_table.py"
PACKED = "checkpoint.tar.gz"  # a stopped run's latest checkpoint in one file (run_table.py writes it)
RESULT_ROOTS = (REPO / "benchmarks" / "results", REPO / "docs" / "results")  # what an archive carries home


@dataclass
class Job:
    """One line of the jobs file and, once started, its process."""

    number: int
    words: list[str]
    process: subprocess.Popen | None = None
    started: float | None = None
    ended: float | None = None
    outcome: str = "not started"
    log: Path | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        table = self.words[0].replace("/", "_")
        cell = self.words[1] if len(self.words) > 1 else "all"
        return f"{self.number:02d}_{table}_{cell}"


def read_jobs(path: Path) -> list[Job]:
    """The jobs of a jobs file, numbered from 1 in the file's order.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     jobs_file = Path(folder) / "jobs.txt"
        ...     _ = jobs_file.write_text("# cheap first\\nfedpac/table5_fmnist fedproto_g\\n\\nfedpac/table10_fmnist fedpac --seeds 0\\n")
        ...     [job.name for job in read_jobs(jobs_file)]
        ['01_fedpac_table5_fmnist_fedproto_g', '02_fedpac_table10_fmnist_fedpac']
    """
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [Job(number, shlex.split(line)) for number, line in enumerate((l for l in lines if l), start=1)]


def stop(jobs: list[Job], grace: float) -> None:
    """SIGTERM every running job, then SIGKILL those still running ``grace`` seconds later."""
    running = [job for job in jobs if job.process is not None and job.process.poll() is None]
    for job in running:
        job.process.send_signal(signal.SIGTERM)
    until = time.monotonic() + grace
    for job in running:
        try:
            job.process.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.process.kill()
            job.process.wait()
        job.outcome = f"stopped at the deadline (exit {job.process.returncode})"
        job.ended = time.monotonic()


def run_table_command(words: list[str]) -> list[str]:
    """The command of one job: ``run_table.py`` with the job's words, quiet, leaving the pages alone."""
    return [sys.executable, str(RUN_TABLE), *words, "--quiet", "--no-pages"]


def run(jobs: list[Job], parallel: int, deadline: float, grace: float, logs: Path,
        command: Callable[[list[str]], list[str]] = run_table_command) -> list[Job]:
    """Run the jobs, at most ``parallel`` at once, none starting after ``deadline`` seconds; returns them with
    their outcomes. ``command`` turns a job's words into the process to start."""
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    waiting = list(jobs)
    while True:
        now = time.monotonic()
        for job in jobs:
            if job.process is not None and job.ended is None and job.process.poll() is not None:
                job.ended = now
                job.outcome = "finished" if job.process.returncode == 0 else f"failed (exit {job.process.returncode})"
                print(f"[{now - start:6.0f} s] {job.name}: {job.outcome} after {job.ended - job.started:.0f} s",
                      flush=True)
        running = [job for job in jobs if job.process is not None and job.ended is None]
        if now - start >= deadline:
            stop(running, grace)
            break
        while waiting and len(running) < parallel:
            job = waiting.pop(0)
            job.log = logs / f"{job.name}.log"
            with open(job.log, "w") as log:
                job.process = subprocess.Popen(command(job.words), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
            job.started = time.monotonic()
            running.append(job)
            print(f"[{job.started - start:6.0f} s] {job.name}: started", flush=True)
        if not running and not waiting:
            break
        time.sleep(1.0)
    return jobs


def results_files(since: float, roots: tuple[Path, ...], max_pack_bytes: float = float("inf")
                  ) -> tuple[list[Path], list[Path]]:
    """The files under ``roots`` modified after ``since`` that :func:`archive_results` packs, and the packed
    checkpoints it leaves out to stay within ``max_pack_bytes`` (see there)."""
    files = [path for root in roots for path in root.rglob("*")
             if path.is_file() and "checkpoints" not in path.relative_to(root).parts
             and not (path.name.startswith(".") and path.name.endswith(".tmp")) and path.stat().st_mtime > since]
    packs = sorted((path for path in files if path.name == PACKED), key=lambda path: path.stat().st_size)
    kept, left_out, total = [], [], 0
    for pack in packs:
        if total + pack.stat().st_size <= max_pack_bytes:
            kept.append(pack)
            total += pack.stat().st_size
        else:
            left_out.append(pack)
    return sorted([path for path in files if path.name != PACKED] + kept), left_out


def archive_results(since: float, archive: Path, roots: tuple[Path, ...] | None = None,
                    max_pack_bytes: float = float("inf")) -> list[Path]:
    """Pack the files under ``roots`` (default: ``benchmarks/results`` and ``docs/results``) modified after
    ``since`` (a ``time.time()``) into the tar.gz ``archive``, paths relative to the repository, checkpoint
    folders left out; returns the files packed. Packed checkpoints (``checkpoint.tar.gz``) join, smallest
    first, while their sizes together stay within ``max_pack_bytes``, so that the archive fits what a
    machine can send back (a dozen 100-client runs' packs came to 190 MB); the half-written pack of a run
    stopped while packing (``.checkpoint.tar.gz.*.tmp``) is left out.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     root = Path(folder) / "benchmarks" / "results" / "cell"
        ...     (root / "checkpoints" / "10").mkdir(parents=True)
        ...     for name in ("results.json", "checkpoint.tar.gz", "checkpoints/10/state"):
        ...         _ = (root / name).write_text("x")
        ...     packed = archive_results(0.0, Path(folder) / "out.tar.gz", (root,))
        ...     sorted(p.name for p in packed)
        ['checkpoint.tar.gz', 'results.json']
    """
    roots = roots or RESULT_ROOTS
    files, _ = results_files(since, roots, max_pack_bytes)
    write_archive(files, archive, roots)
    return files


def write_archive(files: list[Path], archive: Path, roots: tuple[Path, ...]) -> None:
    """Write ``files`` into the tar.gz ``archive``, each named relative to the repository (or, outside it, to
    the one of ``roots`` that holds it)."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in files:
            home = REPO if path.is_relative_to(REPO) else next(root for root in roots if path.is_relative_to(root))
            tar.add(path, arcname=path.relative_to(home).as_posix())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jobs", type=Path, help="the jobs file: one '<paper>/<table> <cell> [options]' per line")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1, help="jobs at once (default: cores)")
    parser.add_argument("--deadline", type=float, default=float("inf"),
                        help="seconds after which no job starts and running jobs are stopped")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--logs", type=Path, default=REPO / "campaign_logs", help="folder of the jobs' logs")
    parser.add_argument("--archive", type=Path,
                        help="also pack the results files the campaign wrote (no checkpoint folders) into this tar.gz")
    parser.add_argument("--archive-packs-mb", type=float, default=float("inf"),
                        help="at most this many MB of stopped runs' packed checkpoints in the archive, smallest "
                             "first (the others stay on the machine; default: all)")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    started = time.time()
    jobs = run(read_jobs(args.jobs), args.parallel, args.deadline, args.grace, args.logs)
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "results_pages.py")], check=False, cwd=REPO)
    if args.archive is not None:
        packed, left_out = results_files(started, RESULT_ROOTS, args.archive_packs_mb * 1e6)
        write_archive(packed, args.archive, RESULT_ROOTS)
        print(f"{args.archive}: {len(packed)} files, {args.archive.stat().st_size / 2**20:.1f} MiB")
        for path in left_out:
            print(f"  left out (over --archive-packs-mb): {path.relative_to(REPO)}, "
                  f"{path.stat().st_size / 1e6:.1f} MB")
    for job in jobs:
        took = f" after {job.ended - job.started:.0f} s" if job.started is not None and job.ended is not None else ""
        print(f"{job.name}: {job.outcome}{took}")
    return 1 if any(job.outcome.startswith("failed") for job in jobs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
