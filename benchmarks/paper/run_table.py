"""Run, resume and summarise one paper table from its run files.

    python benchmarks/paper/run_table.py fedpac/table1_fmnist_100clients          # every cell, resumable
    python benchmarks/paper/run_table.py fedpac/table1_fmnist_100clients fedavg   # some cells only
    python benchmarks/paper/run_table.py fedpac/table3_fmnist fedpac --seeds 0    # one seed of a cell
    python benchmarks/paper/run_table.py --list                                   # the tables and cells

A table is a folder ``benchmarks/paper/<paper>/<table>/`` of run files, one per cell
(``<cell>.toml``, read by :class:`pflax.experiment.RunSpec`); ``order.txt`` beside them, when present,
gives the order in which the cells run. Cell ``<cell>`` writes to ``benchmarks/results/<table>/<cell>/``
(one ``seed<k>/`` folder per seed when a file lists several) and is resumed from its checkpoints
when it has some, so the command can be stopped and started again at will; a seed whose finished run is
already there (the same run file's fingerprint and rounds), or read from another cell's run
(``benchmarks/evaluate_variant.py``), is left alone, checkpoints or not, unless ``--rerun`` is given. A cell that
trains exactly as an earlier cell of its table (FedEM-FT as FedEM: ``evaluate_variant.variant_bases``) is read
from that cell's finished run of each seed, an evaluation instead of a second training: a seed waits while its
base run is unfinished, and trains as its own run only when the base run finished on another machine (its final
checkpoint, which is not committed, is not here). While a run is unfinished
its latest checkpoint is also kept as one file, ``checkpoint.tar.gz`` in its results folder: committed
with the results, it lets a fresh clone on another machine resume the run (checkpoint folders are not
committed). Run files name their data folder as ``data_dir = "${PFLAX_DATASETS}"``; this script sets ``PFLAX_DATASETS`` to
``../shared/datasets`` beside the repository when it is unset. After the runs it regenerates the
results pages (``benchmarks/results_pages.py``).

FedPick's tables (``benchmarks/paper/fedpick/``) hold the run files of its cross-domain digits benchmark,
``benchmarks/fedpick_domains.py``, which this script hands them to: each names its own results folder.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from pflax.experiment import (PACKED_CHECKPOINT, Diverged, RunError, RunSpec, Stopped, chosen_seeds, finished_result,
                              run_all)

REPO = Path(__file__).resolve().parents[2]
TABLES = REPO / "benchmarks" / "paper"
RESULTS = REPO / "benchmarks" / "results"
SCRIPTS = REPO / "benchmarks"  # fixed at import: tests point REPO elsewhere


def cells(table: Path) -> list[Path]:
    """The table's run files, in ``order.txt``'s order (then any others by name)."""
    files = {p.stem: p for p in table.glob("*.toml")}
    order_file = table / "order.txt"
    order = [line.strip() for line in order_file.read_text().splitlines() if line.strip()] if order_file.exists() else []
    missing = [name for name in order if name not in files]
    if missing:
        raise SystemExit(f"{order_file}: no run file for {', '.join(missing)}")
    return [files[name] for name in order] + [files[name] for name in sorted(files) if name not in order]


def has_checkpoint(out: Path) -> bool:
    """Whether a cell's folder holds something to resume from: a checkpoint, or a packed one (committed)."""
    if not out.exists():
        return False
    return (any(any(p.iterdir()) for p in out.rglob("checkpoints") if p.is_dir())
            or any(out.rglob(PACKED_CHECKPOINT)))


def pack_unfinished(out: Path) -> list[tuple[Path, int]]:
    """Pack the latest checkpoint of every unfinished run under a cell's folder (one per seed or coalition)
    into ``checkpoint.tar.gz`` beside its results, leaving out runs that diverged; ``(folder, step)`` for each
    one packed."""
    from pflax import checkpoint

    packed = []
    for checkpoints in sorted(out.rglob("checkpoints")) if out.exists() else []:
        folder = checkpoints.parent
        results = folder / "results.json"
        data = json.loads(results.read_text()) if results.exists() else {}
        ended = data.get("status") == "finished" or "diverged_at_round" in data  # resuming would diverge again
        if not ended and checkpoint.latest_step(checkpoints) is not None:
            packed.append((folder, checkpoint.pack(checkpoints, folder / PACKED_CHECKPOINT)))
    return packed


def finished_seeds(spec: RunSpec, out: Path) -> list[int]:
    """The seeds of a cell whose results are in its folder: a finished run of the run file, or one that
    diverged (``pflax.experiment.finished_result``), or the cell read from another cell's finished run
    (``from_<cell>.json`` of ``benchmarks/evaluate_variant.py``), which training it would only repeat."""
    def done(seed: int, folder: Path) -> bool:
        return (any(folder.glob("from_*.json"))
                or finished_result(dataclasses.replace(spec, seeds=(seed,)), folder, or_diverged=True) is not None)

    if len(spec.seeds) == 1:
        return list(spec.seeds) if done(spec.seeds[0], out) else []
    return [s for s in spec.seeds if done(s, out / f"seed{s}")]


def _script(name: str):
    """The script ``benchmarks/<name>.py`` as a module, loaded once (scripts are not package modules). It is
    registered in ``sys.modules`` before it runs, as the dataclasses a script defines look their module up
    there, and taken out again if it fails to load."""
    import importlib.util

    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def read_from_base(table: str, base_cell: str, cell: str, seeds: list[int]) -> tuple[list[int], list[int]]:
    """Read the seeds of a variant cell from its base cell's runs (``evaluate_variant.evaluate_seed``).

    Args:
      table: ``<paper>/<table>``.
      base_cell, cell: the base cell and the variant cell.
      seeds: the variant's seeds still to do.

    Returns:
      The seeds read, and those that wait for their base run to finish (training them would repeat it). The
      others, whose base run finished on another machine (its checkpoints are not committed), are left to
      train as their own runs.
    """
    variant = _script("evaluate_variant")
    read, waiting = [], []
    for seed in seeds:
        try:
            variant.evaluate_seed(table, base_cell, cell, seed, paper_dir=TABLES, results_dir=RESULTS)
            read.append(seed)
        except variant.BaseRunNotReady as why:
            if why.unfinished:
                waiting.append(seed)
                then = f"it is read once `run_table.py {table} {base_cell}` has finished that seed"
            else:
                then = "it trains as its own run"
            print(f"  {cell} (seed {seed}) is not read from {base_cell}: {why}; {then}", flush=True)
    return read, waiting


def run_fedpick_table(table: Path, args: argparse.Namespace) -> int:
    """A FedPick table: its run files go to ``benchmarks/fedpick_domains.py``, which runs the unfinished
    (arm, seed) pairs, resumes checkpointed ones and summarises each results folder."""
    if args.rerun or args.pack or args.seeds:
        raise SystemExit("--rerun, --pack and --seeds apply to pflax run files; FedPick's runs are redone by "
                         "removing their <arm>_seed<k>.json")
    module = _script("fedpick_domains")
    run_files = [str(p) for p in cells(table) if not args.only or p.stem in args.only]
    module.main(run_files)
    if not args.no_pages:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "results_pages.py")], check=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", nargs="?", help="<paper>/<table>, a folder under benchmarks/paper/")
    parser.add_argument("only", nargs="*", help="run only these cells")
    parser.add_argument("--list", action="store_true", help="list the tables and their cells")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--rerun", action="store_true",
                        help="train again the seeds whose finished runs are already there (by default they are "
                             "left as they are, even without checkpoints)")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                        help="run only these of each cell's seeds (each must be in its run file), for instance to "
                             "share a cell's seeds between machines; results go where the whole cell puts them")
    parser.add_argument("--pack", action="store_true",
                        help="only pack the latest checkpoint of each unfinished run into its checkpoint.tar.gz "
                             "(for runs started without packing), then stop")
    parser.add_argument("--no-pages", action="store_true",
                        help="do not regenerate the results pages afterwards (for several runs at once)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets"))
    if args.list or not args.table:
        for table in sorted({p.parent for p in TABLES.glob("*/*/*.toml")}):
            print(f"{table.relative_to(TABLES)}: {' '.join(c.stem for c in cells(table))}")
        return 0
    table = TABLES / args.table
    if not table.is_dir():
        raise SystemExit(f"no table {args.table!r} under {TABLES}")
    if table.parent.name == "fedpick":  # FedPick's run files are its cross-domain benchmark's own
        return run_fedpick_table(table, args)

    bases = _script("evaluate_variant").variant_bases(cells(table))
    for run_file in cells(table):
        if args.only and run_file.stem not in args.only:
            continue
        out = RESULTS / table.name / run_file.stem
        if args.pack:
            for folder, step in pack_unfinished(out):
                print(f"{folder.relative_to(REPO)}: packed round {step}", flush=True)
            continue
        try:
            spec = RunSpec.from_file(run_file)
            wanted = chosen_seeds(spec, args.seeds)
            done = [] if args.rerun else [s for s in finished_seeds(spec, out) if s in wanted]
        except RunError as err:
            print(f"{run_file.relative_to(REPO)}: {err}", flush=True)
            continue
        resume = has_checkpoint(out)
        state = (" (finished; --rerun trains it again)" if len(done) == len(wanted)
                 else f" (seeds {', '.join(map(str, done))} finished)" if done else " (resuming)" if resume else "")
        print(f"{run_file.relative_to(REPO)} -> {out.relative_to(REPO)}{state}", flush=True)
        waiting = []
        if run_file.stem in bases and not args.rerun and not resume and len(done) < len(wanted):
            read, waiting = read_from_base(args.table, bases[run_file.stem], run_file.stem,
                                           [s for s in wanted if s not in done])
            done += read
        if len(done) + len(waiting) == len(wanted):
            continue
        try:
            run_all(spec, out, seeds=[s for s in wanted if s not in done + waiting], skip_finished=not args.rerun,
                    resume=resume, progress=not args.quiet, pack=True,
                    command=f"python benchmarks/paper/run_table.py {args.table} {run_file.stem}")
        except (RunError, Diverged) as err:  # one cell's failure does not stop the table's other cells
            print(f"  {run_file.stem} stopped: {err}", flush=True)
        except Stopped as stopped:  # asked to stop (SIGINT/SIGTERM): the table's other cells wait too
            print(f"  {run_file.stem}: {stopped}; the same command resumes it", flush=True)
            return stopped.exit_code
    if not args.pack and not args.no_pages:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "results_pages.py")], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
