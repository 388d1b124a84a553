"""FedCollab's IPR and RSD of finished runs, against the Local run of the same setting.

IPR is the share of clients whose accuracy is strictly above their Local accuracy, RSD the population
standard deviation of their gains (FedCollab eqs. (11)-(12), :func:`pflax.metrics.ipr_rsd`), both in %. Each
cell is a run-file results folder under ``benchmarks/results/``; its numbers go to ``against_local.json``
beside its ``results.json``, with the command that wrote them, and the results pages read them from there.
A cell of several seeds (``seed<k>/`` folders) is compared seed by seed with the Local run of the same seed.

    python benchmarks/fedcollab_against_local.py fedcollab_table1_fmnist/fedavg \\
        fedcollab_table1_fmnist/fedavg__fedcollab --local fedcollab_table1_fmnist/local
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_LOCAL = "fedcollab_table1_fmnist/local"


def seed_folders(cell: str) -> dict[int, str]:
    """The finished-or-not runs of a results folder by seed: the folder itself when it holds one
    ``results.json``, else its ``seed<k>/`` folders (relative to ``benchmarks/results/``)."""
    folder = RESULTS / cell
    if (folder / "results.json").exists():
        return {json.loads((folder / "results.json").read_text())["seed"]: cell}
    found = {int(p.parent.name[4:]): f"{cell}/{p.parent.name}" for p in folder.glob("seed*/results.json")
             if p.parent.name[4:].isdigit()}
    if not found:
        raise SystemExit(f"benchmarks/results/{cell} holds no results.json: run the cell first")
    return dict(sorted(found.items()))


def _run(folder: str) -> dict:
    return json.loads((RESULTS / folder / "results.json").read_text())


def against_local(cell: dict, local: dict) -> dict:
    """IPR and RSD of ``cell``'s final per-client accuracies against ``local``'s.

    Args:
      cell, local: ``results.json`` of two runs of one partition (same clients, same seed).

    Returns:
      ``{"IPR", "RSD", "seed", "rounds_completed", "rounds_planned"}``; the rounds are the fewer of the two runs'.

    >>> run = lambda acc: {"final_per_client": acc, "seed": 0, "rounds_completed": 2, "run": {"rounds": 2}}
    >>> against_local(run([0.5, 1.0]), run([0.5, 0.5]))["IPR"]
    50.0
    """
    from pflax.metrics import ipr_rsd

    if cell["seed"] != local["seed"] or len(cell["final_per_client"]) != len(local["final_per_client"]):
        raise ValueError("the cell and the Local run must share the seed and the clients")
    ipr, rsd = ipr_rsd(np.asarray(cell["final_per_client"]), np.asarray(local["final_per_client"]))
    return {"IPR": ipr, "RSD": rsd, "seed": cell["seed"],
            "rounds_completed": min(cell["rounds_completed"], local["rounds_completed"]),
            "rounds_planned": max(cell["run"]["rounds"], local["run"]["rounds"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+", help="<table>/<cell> folders under benchmarks/results/")
    parser.add_argument("--local", default=DEFAULT_LOCAL, help=f"the Local run's folder (default {DEFAULT_LOCAL})")
    args = parser.parse_args(argv)
    locals_by_seed = seed_folders(args.local)
    for cell in args.cells:
        for seed, folder in seed_folders(cell).items():
            if seed not in locals_by_seed:  # its Local run has not started yet: compared on a later call
                print(f"{folder}: skipped, {args.local} has no seed {seed} yet")
                continue
            local = locals_by_seed[seed]
            result = {
                "metric": "FedCollab's IPR and RSD (%) of the cell's final per-client accuracies against the Local run's",
                "cell": f"benchmarks/results/{folder}/results.json",
                "local": f"benchmarks/results/{local}/results.json",
                **against_local(_run(folder), _run(local)),
                "command": f"python benchmarks/fedcollab_against_local.py {cell} --local {args.local}",
            }
            (RESULTS / folder / "against_local.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{folder}: IPR {result['IPR']:.2f}  RSD {result['RSD']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
