"""FedAvg-FT and kNN-Per at the late rounds of the FedAvg run, without training them a second time.

    python benchmarks/fedavg_family_eval.py                       # every checkpoint the FedAvg run kept
    python benchmarks/fedavg_family_eval.py --verify-checkpoints DIR   # also check against the direct runs

FedAvg-FT and kNN-Per *train* exactly as FedAvg: the same initial model, the same PRNG streams, the
same local SGD and the same weighted mean (``tests/test_baselines.py`` checks both against
``fedavg.round``; the 20-round direct runs of Table 1 have bit-identical training losses). They differ
only in how a client's personalised model is *evaluated*: FedAvg-FT fine-tunes the global model on the
client's training split, kNN-Per interpolates it with a kNN over the client's training features. So
their accuracy after round t is their ``evaluate`` applied to FedAvg's global model after round t.

This script restores the FedAvg run's checkpoints (``table1_fmnist/fedavg/checkpoints``, the last three
steps kept by ``pflax run``), puts each global model into a FedAvg-FT and a kNN-Per state with the
configuration of their own direct runs, and evaluates them on the same federation. It writes
``table1_fmnist/<method>/from_fedavg.json``: the per-client accuracies at each step, how they were
obtained, and, with ``--verify-checkpoints``, the comparison with the direct run at a round both have
(the direct run's accuracies must be reproduced to float round-off, else the script fails).
``benchmarks/results_pages.py`` then reports a method at the later of its direct run and this
evaluation, saying which.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import jax
import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "table1_fmnist"
# method label -> (results folder, registry name)
DERIVED = {"FedAvg-FT": ("fedavg_ft", "fedavg_ft"), "kNN-Per": ("knn_per", "knnper")}
TOLERANCE = 1e-6  # accuracies are multiples of 1/600; anything beyond round-off is a real mismatch


def run_args(folder: str, data_dir: str) -> argparse.Namespace:
    """The ``pflax run`` arguments recorded in ``<folder>/results.json``, reading data from ``data_dir``
    (the recorded data_dir may be another machine's)."""
    recorded = json.loads((OUT / folder / "results.json").read_text())["args"]
    return argparse.Namespace(**{**recorded, "data_dir": data_dir})


OLD_CLI_NOT_FINGERPRINTED = (
    "command", "rounds", "eval_every", "checkpoint_every", "resume", "out", "quiet", "no_plots", "execution", "data_dir",
)


def recorded_config(name: str, args: argparse.Namespace):
    """The ``Config`` the earlier CLI built from its flags: the shared SGD flags the Config has, then ``--set``."""
    import dataclasses

    from pflax.algorithms import REGISTRY
    from pflax.cli import parse_set
    from pflax.experiment import make_config

    fields = {f.name for f in dataclasses.fields(REGISTRY[name].Config)}
    common = {k: getattr(args, k) for k in ("lr", "momentum", "weight_decay", "batch_size", "local_epochs") if k in fields}
    return make_config(name, {**common, **parse_set(args.set)}, args.execution)


def load_setting(data_dir: str) -> dict:
    """Everything the evaluations share: the FedAvg run's federation, a template to restore its
    checkpoints into with its fingerprint, and for each method its module, a state built from its own
    direct run's arguments (Config included) and that run's evaluated rounds."""
    from pflax.algorithms import REGISTRY
    from pflax.data.federations import load_federation
    from pflax.experiment import make_model

    avg_args = run_args("fedavg", data_dir)
    _, k, train, test = load_federation(avg_args.dataset, "fedpac", avg_args.clients, avg_args.train_per_client,
                                        avg_args.test_per_client, avg_args.seed, avg_args.data_dir, s=avg_args.s,
                                        wrap=not avg_args.no_wrap)
    model = make_model({"name": avg_args.model}, tuple(train.x.shape[2:]), k)
    key = jax.random.PRNGKey(avg_args.seed)
    fedavg = REGISTRY["fedavg"]
    template = fedavg.init(key, model, train.x[0], avg_args.clients, recorded_config("fedavg", avg_args))
    methods = {}
    for label, (folder, name) in DERIVED.items():
        mod = REGISTRY[name]
        own = run_args(folder, data_dir)
        state = mod.init(key, model, train.x[0], avg_args.clients, recorded_config(name, own))
        if jax.tree.structure(state.server) != jax.tree.structure(template.server):
            raise SystemExit(f"{name}: its shared tree is not FedAvg's model tree; cannot evaluate it on FedAvg's run")
        direct = {e["round"]: e["accuracy"] for e in
                  json.loads((OUT / folder / "results.json").read_text())["personalized_history"]}
        methods[label] = {"module": mod, "state": state, "direct": direct}
    # The runs were made by the CLI's earlier flags, which fingerprinted their checkpoints with every flag
    # but these.
    fingerprint = {k: v for k, v in sorted(vars(avg_args).items()) if k not in OLD_CLI_NOT_FINGERPRINTED}
    return {"train": train, "test": test, "template": template, "fingerprint": fingerprint, "methods": methods}


def evaluate_at(directory: Path, step: int, setting: dict) -> dict[str, list[float]]:
    """Each method's per-client accuracy with FedAvg's global model, round counter and PRNG keys of
    checkpoint ``step``."""
    from pflax import checkpoint

    avg = checkpoint.restore(directory, setting["template"], step=step, run=setting["fingerprint"]).state
    out = {}
    for label, m in setting["methods"].items():
        state = m["state"].replace(server=avg.server, round=avg.round, key=avg.key, sampling_key=avg.sampling_key)
        acc = m["module"].evaluate(state, setting["test"], setting["train"])["accuracy"]
        out[label] = np.asarray(jax.device_get(acc), np.float64).tolist()
    return out


def verify(directory: Path, setting: dict) -> list[dict]:
    """At every step of ``directory`` that a direct run also evaluated, the two must agree."""
    from pflax import checkpoint

    evaluated = set().union(*(m["direct"] for m in setting["methods"].values()))
    report = []
    for step in (s for s in checkpoint.all_steps(directory) if s in evaluated):
        derived = evaluate_at(directory, step, setting)
        for label, m in setting["methods"].items():
            if step not in m["direct"]:
                continue
            direct = m["direct"][step]
            diff = float(np.max(np.abs(np.asarray(direct) - np.asarray(derived[label]))))
            report.append({"method": label, "round": step, "max_abs_difference": diff,
                           "direct_mean": 100 * float(np.mean(direct)),
                           "derived_mean": 100 * float(np.mean(derived[label]))})
            print(f"verify {label} round {step}: direct {report[-1]['direct_mean']:.2f} %, "
                  f"from FedAvg {report[-1]['derived_mean']:.2f} %, max |difference| {diff:.2e}", flush=True)
            if diff > TOLERANCE:
                raise SystemExit(f"{label} at round {step}: evaluating FedAvg's model does not reproduce the direct run")
    if not report:
        raise SystemExit(f"no step in {directory} was also evaluated by a direct FedAvg-FT / kNN-Per run")
    return report


def main() -> None:
    from pflax import checkpoint

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=Path, default=OUT / "fedavg" / "checkpoints",
                        help="the FedAvg run's checkpoint folder")
    parser.add_argument("--verify-checkpoints", type=Path, default=None,
                        help="a FedAvg checkpoint folder holding a round the direct runs also evaluated")
    parser.add_argument("--data-dir", default=os.environ.get("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets")))
    args = parser.parse_args()
    setting = load_setting(args.data_dir)
    verification = verify(args.verify_checkpoints, setting) if args.verify_checkpoints else []
    steps = checkpoint.all_steps(args.checkpoints)
    if not steps:
        sys.exit(f"no FedAvg checkpoints in {args.checkpoints}: run `python benchmarks/paper/run_table.py fedpac/table1_fmnist fedavg` first")
    history: dict[str, list[dict]] = {label: [] for label in DERIVED}
    for step in steps:
        for label, acc in evaluate_at(args.checkpoints, step, setting).items():
            history[label].append({"round": step, "accuracy": acc})
            print(f"{label} from FedAvg's round {step}: {100 * np.mean(acc):.2f} %", flush=True)
    for label, (folder, name) in DERIVED.items():
        result = {
            "method": label,
            "evaluated_model": f"pflax.algorithms.{name}.evaluate applied to the FedAvg run's global model after each "
                               "listed round (the method trains exactly as FedAvg), on each client's own test split",
            "source_checkpoints": str(args.checkpoints.relative_to(REPO)) if args.checkpoints.is_relative_to(REPO)
            else str(args.checkpoints),
            "command": "python benchmarks/fedavg_family_eval.py"
                       + (f" --verify-checkpoints {args.verify_checkpoints}" if args.verify_checkpoints else ""),
            "verification_against_direct_run": [v for v in verification if v["method"] == label],
            "personalized_history": history[label],
        }
        (OUT / folder / "from_fedavg.json").write_text(json.dumps(result, indent=1))
        print(f"wrote {OUT / folder / 'from_fedavg.json'}")


if __name__ == "__main__":
    main()
