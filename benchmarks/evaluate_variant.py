"""A paper cell whose method trains exactly as another cell's, read from that cell's finished run.

    python benchmarks/evaluate_variant.py fedpac/table1_fmnist fedem__m_3 fedem_ft__m_3

Some methods differ from another only in how a client is evaluated. FedEM-FT is FedEM whose clients
fine-tune the mixture on their training split before they are scored; FedAvg-FT and kNN-Per are FedAvg
with a fine-tuned or kNN-interpolated evaluation; FedBABU fine-tunes at evaluation, so its other
fine-tuning choices (parts, epochs) are such variants too. What the evaluation builds is thrown away, so
the runs train identically: those Config fields are read only by ``evaluate``, and
``tests/test_evaluate_variant.py`` checks that the training is bit-identical and that this script
reproduces a direct run's accuracies. The variant's number after round t is therefore its own
``evaluate`` applied to the base run's state after round t, and a second 200-round training is not needed.

The script reads both run files (``benchmarks/paper/<table>/<cell>.toml``). It refuses them unless their
algorithms are of one family (``FAMILIES``) and they differ only in fields that ``EVALUATION_ONLY`` lists
for it, or in how often they evaluate and checkpoint. It restores the base run's final checkpoint
(``benchmarks/results/<table>/<base>/checkpoints``, fingerprinted by the base run file) and swaps in the
variant's Config. Then it evaluates
every client and writes ``benchmarks/results/<table>/<variant>/from_<base>.json``, one per seed
(``seed<k>/`` folders when the file lists several), skipping the seeds that have theirs already (whose base
runs' checkpoints may be gone; ``--rerun`` evaluates them again). ``benchmarks/results_pages.py`` reads
that file. ``benchmarks/paper/run_table.py`` does the same by itself for a table's variant cells
(:func:`variant_bases`) whenever the base run of a seed has finished on the same machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PAPER = REPO / "benchmarks" / "paper"
RESULTS = REPO / "benchmarks" / "results"

# Algorithms that train alike, by family, and the Config fields that only their evaluation reads: two run
# files of one family that differ only in these train identically. FedAvg-FT and kNN-Per are presets of
# FedAvg's sharing rule that change only its evaluation; FedBABU's fine-tuning at evaluation is read the same
# way, so its run answers how other fine-tuning choices would have scored it.
_SHARING_EVALUATION = frozenset({"finetune_epochs", "finetune_parts", "finetune_steps", "knn_lam", "knn_k",
                                 "knn_scale"})
FAMILIES = {"fedem": "fedem", "fedavg": "fedavg", "fedavg_ft": "fedavg", "knnper": "fedavg", "fedbabu": "fedbabu"}
EVALUATION_ONLY = {"fedem": frozenset({"finetune_epochs"}), "fedavg": _SHARING_EVALUATION,
                   "fedbabu": _SHARING_EVALUATION}
# Run-file fields that change neither the training nor the final evaluation.
SCHEDULE_ONLY = ("eval_every", "checkpoint_every", "execution")


def training_identical(base, variant) -> list[str]:
    """What makes two resolved run files train differently; empty when only evaluation differs.

    Args:
      base, variant: :class:`pflax.experiment.RunSpec` (resolved).

    Returns:
      One line per difference that changes the training.

    >>> from pflax.experiment import RunSpec
    >>> a = RunSpec("fedem", rounds=5, config={"finetune_epochs": 0}).resolved()
    >>> training_identical(a, RunSpec("fedem", rounds=5, config={"finetune_epochs": 5}).resolved())
    []
    >>> training_identical(a, RunSpec("fedem", rounds=5, config={"lr": 0.1}).resolved())
    ['config.lr: 0.01 != 0.1']
    >>> training_identical(RunSpec("fedavg").resolved(), RunSpec("knnper").resolved())
    []
    >>> training_identical(a, RunSpec("fedavg", rounds=5).resolved())
    ['algorithm: fedem and fedavg do not train alike']
    >>> babu = RunSpec("fedbabu", rounds=5).resolved()
    >>> training_identical(babu, RunSpec("fedbabu", rounds=5, config={"finetune_parts": ["head"]}).resolved())
    []
    """
    family = FAMILIES.get(base.algorithm, base.algorithm)
    if family != FAMILIES.get(variant.algorithm, variant.algorithm):
        return [f"algorithm: {base.algorithm} and {variant.algorithm} do not train alike"]
    ignored = EVALUATION_ONLY.get(family, frozenset())
    a, b = base.to_dict(), variant.to_dict()
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in SCHEDULE_ONLY or key == "algorithm":
            continue
        if key == "config":
            for field in sorted(set(a[key]) | set(b[key])):
                if field not in ignored and a[key].get(field) != b[key].get(field):
                    diffs.append(f"config.{field}: {a[key].get(field)} != {b[key].get(field)}")
        elif a.get(key) != b.get(key):
            diffs.append(f"{key}: {a.get(key)} != {b.get(key)}")
    return diffs


def evaluate_from(base, variant, checkpoints: Path, seed: int) -> dict:
    """The variant's per-client accuracy with the base run's state at its latest checkpoint.

    Args:
      base, variant: resolved run files that train identically (:func:`training_identical`).
      checkpoints: the base run's checkpoint folder for ``seed``.
      seed: the seed.

    Returns:
      ``{"round": the checkpoint's round, "accuracy": [per client]}``.
    """
    import jax
    import numpy as np

    from pflax import checkpoint
    from pflax.algorithms import REGISTRY
    from pflax.experiment import build, make_config

    one = dataclasses.replace(base, seeds=(seed,))
    start = build(one)
    restored = checkpoint.restore(checkpoints, start.state, run=one.fingerprint(seed))
    state = restored.state.replace(config=make_config(variant.algorithm, variant.config, variant.execution))
    accuracy = REGISTRY[variant.algorithm].evaluate(state, start.test, start.train)["accuracy"]
    return {"round": int(restored.step), "accuracy": np.asarray(jax.device_get(accuracy), np.float64).tolist()}


def _relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (as committed files name it)."""
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


class BaseRunNotReady(RuntimeError):
    """The base run cannot be read for a seed: not finished (``unfinished``), or finished without its final
    checkpoint on this machine."""

    def __init__(self, message: str, unfinished: bool = False):
        super().__init__(message)
        self.unfinished = unfinished


def variant_bases(run_files: list[Path]) -> dict[str, str]:
    """Which cells of a table are read from another cell's run: each cell that trains exactly as an earlier
    one (:func:`training_identical`, seeds included), mapped to the first such cell.

    Args:
      run_files: the table's run files in the order its cells run (a base comes before its variants).

    Returns:
      ``{variant cell: base cell}`` by file stem. Left out: a file that does not parse (running it says why),
      and runs of several federations (``coalitions``, ``members``, ``[structure]``), whose checkpoints this
      script does not read.

    >>> import tempfile
    >>> from pflax.experiment import RunSpec
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name, epochs in (("fedem", 0), ("fedem_ft", 5)):
    ...     _ = (folder / f"{name}.toml").write_text(
    ...         RunSpec("fedem", rounds=5, config={"finetune_epochs": epochs}).to_toml())
    >>> variant_bases([folder / "fedem.toml", folder / "fedem_ft.toml"])
    {'fedem_ft': 'fedem'}
    """
    from pflax.experiment import RunError, RunSpec

    specs = {}
    for path in run_files:
        try:
            spec = RunSpec.from_file(path).resolved()
        except RunError:
            continue
        if spec.coalitions is None and spec.members is None and spec.structure is None:
            specs[path.stem] = spec
    bases = {}
    names = list(specs)
    for i, name in enumerate(names):
        for earlier in names[:i]:
            if earlier not in bases and not training_identical(specs[earlier], specs[name]):
                bases[name] = earlier
                break
    return bases


def load_pair(folder: Path, base_cell: str, variant_cell: str):
    """The two run files of a base cell and its variant, resolved, once they are shown to train alike.

    Args:
      folder: the table's folder of run files.
      base_cell, variant_cell: the two cells' names (their run files' stems).

    Returns:
      ``(base, variant)``, resolved :class:`pflax.experiment.RunSpec`.

    Raises:
      SystemExit: they do not train alike (:func:`training_identical`), or list other seeds.
    """
    from pflax.experiment import RunSpec

    base, variant = (RunSpec.from_file(folder / f"{cell}.toml").resolved() for cell in (base_cell, variant_cell))
    diffs = training_identical(base, variant)
    if diffs:
        sys.exit(f"{variant_cell} does not train as {base_cell}: " + "; ".join(diffs))
    if base.seeds != variant.seeds:
        sys.exit(f"{variant_cell} lists seeds {list(variant.seeds)}, {base_cell} {list(base.seeds)}")
    return base, variant


def _seed_folder(results_dir: Path, table: str, cell: str, seed: int, seeds: tuple) -> Path:
    """A cell's results folder for ``seed``: ``seed<k>/`` inside it when its run file lists several seeds."""
    return results_dir / table.split("/")[-1] / cell / (f"seed{seed}" if len(seeds) > 1 else "")


def evaluate_seed(table: str, base_cell: str, variant_cell: str, seed: int, *, paper_dir: Path = PAPER,
                  results_dir: Path = RESULTS) -> Path:
    """Read one seed of a variant cell from its base cell's finished run and write its ``from_<base>.json``.

    Args:
      table: ``<paper>/<table>``, a folder under ``paper_dir``.
      base_cell, variant_cell: the two cells' names (their run files' stems).
      seed: one of the run files' seeds.
      paper_dir, results_dir: where run files and results live.

    Returns:
      The path written.

    Raises:
      SystemExit: the two run files do not train alike, or list other seeds.
      BaseRunNotReady: the base run of ``seed`` has not finished, or its final checkpoint is not here.
    """
    folder = paper_dir / table
    base, variant = load_pair(folder, base_cell, variant_cell)
    source = _seed_folder(results_dir, table, base_cell, seed, base.seeds)
    done = json.loads((source / "results.json").read_text()) if (source / "results.json").exists() else {}
    if done.get("status") != "finished":
        raise BaseRunNotReady(f"{_relative(source)}: the base run is not finished ({done.get('status', 'no results')})",
                              unfinished=True)
    if not (source / "checkpoints").is_dir():
        raise BaseRunNotReady(f"{_relative(source)}/checkpoints: no checkpoints on this machine (they are not "
                              "committed; the base run's machine has them)")
    measured = evaluate_from(base, variant, source / "checkpoints", seed)
    if measured["round"] != base.rounds:
        raise BaseRunNotReady(f"{_relative(source)}/checkpoints: latest round {measured['round']}, not the run's "
                              f"last ({base.rounds})")
    path = _seed_folder(results_dir, table, variant_cell, seed, base.seeds) / f"from_{base_cell}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "method": variant_cell,
        "seed": seed,
        "evaluated_model": f"pflax.algorithms.{variant.algorithm}.evaluate with the Config of "
                           f"{_relative(folder / (variant_cell + '.toml'))}, applied to the state after the last "
                           f"round of the run of {_relative(folder / (base_cell + '.toml'))}, on each client's "
                           "own test split",
        "source_run": _relative(source / "results.json"),
        "command": f"python benchmarks/evaluate_variant.py {table} {base_cell} {variant_cell}",
        "personalized_history": [measured],
    }
    path.write_text(json.dumps(result, indent=1))
    mean = 100 * sum(measured["accuracy"]) / len(measured["accuracy"])
    print(f"{variant_cell} (seed {seed}) from {base_cell}'s round {measured['round']}: {mean:.2f} % "
          f"-> {_relative(path)}", flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", help="<paper>/<table>, a folder under benchmarks/paper/")
    parser.add_argument("base", help="the cell whose finished run is evaluated")
    parser.add_argument("variant", help="the cell that trains as the base and is evaluated its own way")
    parser.add_argument("--paper-dir", type=Path, default=PAPER)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="only these of the run files' seeds (default: all; a seed whose base run has not "
                             "finished stops the script)")
    parser.add_argument("--rerun", action="store_true",
                        help="evaluate again the seeds whose from_<base>.json is there already (by default they are "
                             "left as they are)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets"))
    base, _ = load_pair(args.paper_dir / args.table, args.base, args.variant)
    unknown = sorted(set(args.seeds or ()) - set(base.seeds))
    if unknown:
        sys.exit(f"--seeds {unknown}: {args.base} lists seeds {list(base.seeds)}")
    for seed in base.seeds:
        if args.seeds and seed not in args.seeds:
            continue
        path = _seed_folder(args.results_dir, args.table, args.variant, seed, base.seeds) / f"from_{args.base}.json"
        if path.exists() and not args.rerun:  # its base run's checkpoints may be gone by now
            print(f"{args.variant} (seed {seed}): {_relative(path)} is there already (--rerun evaluates it again)")
            continue
        try:
            evaluate_seed(args.table, args.base, args.variant, seed, paper_dir=args.paper_dir,
                          results_dir=args.results_dir)
        except BaseRunNotReady as err:
            sys.exit(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
