"""Run, resume and summarise one paper table from its run files.

    python benchmarks/paper/run_table.py fedpac/table1_fmnist_100clients          # every cell, resumable
    python benchmarks/paper/run_table.py fedpac/table1_fmnist_100clients fedavg   # some cells only
    python benchmarks/paper/run_table.py --list                                   # the tables and cells

A table is a folder ``benchmarks/paper/<paper>/<table>/`` of run files, one per cell
(``<cell>.toml``, read by :class:`pflax.experiment.RunSpec`); ``order.txt`` beside them, when present,
gives the order in which the cells run. Cell ``<cell>`` writes to ``benchmarks/results/<table>/<cell>/``
(one ``seed<k>/`` folder per seed when a file lists several) and is resumed from its checkpoints
when it has some, so the command can be stopped and started again at will. Run files name their data
folder as ``data_dir = "${PFLAX_DATASETS}"``; this script sets ``PFLAX_DATASETS`` to
``../shared/datasets`` beside the repository when it is unset. After the runs it regenerates the
results pages (``benchmarks/results_pages.py``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TABLES = REPO / "benchmarks" / "paper"
RESULTS = REPO / "benchmarks" / "results"


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
    return any(p.name == "checkpoints" and any(p.iterdir()) for p in out.rglob("checkpoints")) if out.exists() else False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", nargs="?", help="<paper>/<table>, a folder under benchmarks/paper/")
    parser.add_argument("only", nargs="*", help="run only these cells")
    parser.add_argument("--list", action="store_true", help="list the tables and their cells")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets"))
    if args.list or not args.table:
        for table in sorted({p.parent for p in TABLES.glob("*/*/*.toml")}):
            print(f"{table.relative_to(TABLES)}: {' '.join(c.stem for c in cells(table))}")
        return 0
    table = TABLES / args.table
    if not table.is_dir():
        raise SystemExit(f"no table {args.table!r} under {TABLES}")
    from pflax.experiment import RunError, RunSpec, run_all

    for run_file in cells(table):
        if args.only and run_file.stem not in args.only:
            continue
        out = RESULTS / table.name / run_file.stem
        resume = has_checkpoint(out)
        print(f"{run_file.relative_to(REPO)} -> {out.relative_to(REPO)}" + (" (resuming)" if resume else ""), flush=True)
        try:
            run_all(RunSpec.from_file(run_file), out, resume=resume, progress=not args.quiet,
                    command=f"python benchmarks/paper/run_table.py {args.table} {run_file.stem}")
        except RunError as err:
            print(f"  {run_file.stem} stopped: {err}", flush=True)
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "results_pages.py")], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
