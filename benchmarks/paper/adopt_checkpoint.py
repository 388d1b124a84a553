"""Let a run started by the earlier ``pflax run`` flags (before run files) continue under its run file.

    python benchmarks/paper/adopt_checkpoint.py benchmarks/results/<table>/<cell> \\
        benchmarks/paper/<paper>/<table>/<cell>.toml

The earlier CLI fingerprinted its checkpoints with its flags and kept FedPAC's per-round history in
other keys. This script checks that the old run computed exactly what the run file describes (the
algorithm, data, partition, seed, participation, model and every ``Config`` field), then rewrites the
latest checkpoint with the run file's fingerprint and the experiment loop's record, so that
``run_table.py`` resumes it. The state itself (parameters, keys, round counter) is copied unchanged.
The old checkpoints are kept in ``checkpoints.before_run_files/`` for reference until deleted.

A finished old run whose checkpoints are gone (they are not committed) is adopted by its results alone:
after the same checks, its ``results.json`` gains the run file's ``run`` and ``seed``, as the experiment
loop writes them, so that ``run_table.py`` counts it as that run file's finished run
(``pflax.experiment.finished_result``) instead of training it again. Nothing else in the file changes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _same(name: str, old, new, problems: list[str]) -> None:
    if isinstance(old, (list, tuple)) or isinstance(new, (list, tuple)):
        old, new = list(old), list(new)
    if old != new:
        problems.append(f"{name}: old run {old!r}, run file {new!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the old run's output folder")
    parser.add_argument("run_file", type=Path)
    parser.add_argument("--seed", type=int, default=None,
                        help="which of the run file's seeds the old run is, when it lists several")
    args = parser.parse_args(argv)
    os.environ.setdefault("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets"))

    import jax

    from pflax import checkpoint
    from pflax.algorithms import REGISTRY
    from pflax.data.federations import load_federation
    from pflax.experiment import Record, RunSpec, _config_fields, _data_dir, make_config, make_model

    spec = RunSpec.from_file(args.run_file).resolved()
    if args.seed is not None:
        if args.seed not in spec.seeds:
            raise SystemExit(f"{args.run_file} lists seeds {list(spec.seeds)}, not {args.seed}")
        spec = dataclasses.replace(spec, seeds=(args.seed,))
    elif len(spec.seeds) != 1:
        raise SystemExit(f"{args.run_file} lists seeds {list(spec.seeds)}: --seed names the one the old run is "
                         "(its folder is then the cell's seed<k>/)")
    old = json.loads((args.out / "results.json").read_text())
    if "args" not in old:
        raise SystemExit(f"{args.out}/results.json was not written by the earlier pflax run flags")
    flags = old["args"]
    problems: list[str] = []
    for name, new in (("algorithm", spec.algorithm), ("dataset", spec.data["dataset"]),
                      ("clients", spec.partition["clients"]), ("fraction", spec.fraction), ("seed", spec.seeds[0]),
                      ("train_per_client", spec.data["train_per_client"]),
                      ("test_per_client", spec.data["test_per_client"]), ("model", spec.model["name"])):
        _same(name, flags[name], new, problems)
    _same("partition", "fedpac", spec.partition["name"], problems)
    _same("s", flags["s"], spec.partition["s"], problems)
    _same("wrap", not flags["no_wrap"], spec.partition["wrap"], problems)
    config = make_config(spec.algorithm, spec.config, spec.execution)
    recorded = {k: v for k, v in old["config"].items() if k != "execution"}
    for name, value in _config_fields(config).items():
        if name in recorded:
            _same(f"config.{name}", recorded[name], value if not isinstance(value, tuple) else list(value), problems)
    if problems:
        raise SystemExit("the old run differs from the run file:\n  " + "\n  ".join(problems))

    checkpoints = args.out / "checkpoints"
    if not checkpoints.exists():
        if old.get("status") != "finished" or old.get("rounds_completed") != spec.rounds:
            raise SystemExit(f"{args.out}: no checkpoints, and the old run did not finish the run file's "
                             f"{spec.rounds} rounds ({old.get('status')}, {old.get('rounds_completed')} rounds)")
        old.update(run=spec.to_dict(), seed=spec.seeds[0])
        (args.out / "results.json").write_text(json.dumps(old, indent=1))
        print(f"{args.out}: its finished run adopted by {args.run_file} (results.json now records the run)")
        return 0
    name, k, train, test = load_federation(spec.data["dataset"], spec.partition["name"], spec.partition["clients"],
                                           spec.data["train_per_client"], spec.data["test_per_client"],
                                           spec.seeds[0], _data_dir(spec.data.get("data_dir")), s=spec.partition["s"],
                                           wrap=spec.partition["wrap"])
    algorithm = REGISTRY[spec.algorithm]
    template = algorithm.init(jax.random.PRNGKey(spec.seeds[0]), make_model(spec.model, tuple(train.x.shape[2:]), k),
                              train.x[0], train.num_clients, config)
    _, meta = checkpoint.read(checkpoints)
    # Everything but the old flags is compared (model, config, array shapes and types); the flags were
    # compared with the run file above.
    restored = checkpoint.restore(checkpoints, template, run=meta["fingerprint"]["run"])
    extra = restored.extra
    history = []
    for row in extra["history"]:
        row = dict(row)
        if "personalized_all_clients" in row:
            row["accuracy"] = row.pop("personalized_all_clients")
        history.append(row)
    last_round = {}
    if extra.get("last_weights") is not None:
        last_round = {"combination_weights": np.asarray(extra["last_weights"]).tolist(),
                      "client_ids": np.asarray(extra["last_ids"]).tolist()}
    record = Record(history=history, evaluations=extra["personalized_history"], resumed_at=list(extra["resumed_at"]),
                    last_round=last_round)
    assert record.rounds_done == restored.step, (record.rounds_done, restored.step)
    kept = args.out / "checkpoints.before_run_files"
    if kept.exists():
        shutil.rmtree(kept)
    shutil.move(str(checkpoints), str(kept))
    checkpoint.save(checkpoints, restored.state, run=spec.fingerprint(spec.seeds[0]), extra=dataclasses.asdict(record))
    print(f"{args.out}: round {restored.step} adopted by {args.run_file}; old checkpoints in {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
