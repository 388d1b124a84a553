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
``fedpac_table1_fmnist.py --table-only`` then reports a method at the later of its direct run and
this evaluation, saying which.
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


def load_setting(data_dir: str):
    """The FedAvg run's arguments, federation, model and a template state to restore into."""
    from pflax import cli
    from pflax.algorithms import REGISTRY
    from pflax.core.execution import Execution
    from pflax.data import federate_fedpac, load_dataset

    run_args = json.loads((OUT / "fedavg" / "results.json").read_text())["args"]
    ns = argparse.Namespace(**run_args)
    dataset = load_dataset(ns.dataset, data_dir, seed=ns.seed)  # the run's own data_dir may be another machine's
    train, test = federate_fedpac(dataset, ns.clients, ns.train_per_client, ns.test_per_client, ns.s, wrap=not ns.no_wrap)
    model = cli._make_model(ns, dataset)
    common = dict(lr=ns.lr, momentum=ns.momentum, weight_decay=ns.weight_decay, batch_size=ns.batch_size,
                  local_epochs=ns.local_epochs, execution=Execution(ns.execution))
    template = REGISTRY["fedavg"].init(jax.random.PRNGKey(ns.seed), model, train.x[0], ns.clients,
                                       REGISTRY["fedavg"].Config(**common))
    fingerprint = {k: v for k, v in sorted(run_args.items()) if k not in cli.NOT_FINGERPRINTED}
    return ns, train, test, model, common, template, fingerprint


def derived_state(name: str, folder: str, fedavg_state, ns, train, model, common):
    """A ``name`` state holding FedAvg's global model, round counter and PRNG keys, with the Config of
    the method's own direct run (its non-common fields read from that run's results.json)."""
    from pflax.algorithms import REGISTRY

    mod = REGISTRY[name]
    own = json.loads((OUT / folder / "results.json").read_text())["config"]
    extra = {k: v for k, v in own.items() if k not in common and k != "execution"}
    state = mod.init(jax.random.PRNGKey(ns.seed), model, train.x[0], ns.clients, mod.Config(**common, **extra))
    if jax.tree.structure(state.shared) != jax.tree.structure(fedavg_state.params):
        raise SystemExit(f"{name}: its shared tree is not FedAvg's model tree; cannot evaluate it on FedAvg's run")
    return mod, state.replace(shared=fedavg_state.params, round=fedavg_state.round, key=fedavg_state.key,
                              sampling_key=fedavg_state.sampling_key)


def evaluate_at(directory: Path, step: int, setting) -> dict[str, list[float]]:
    from pflax import checkpoint

    ns, train, test, model, common, template, fingerprint = setting
    restored = checkpoint.restore(directory, template, step=step, run=fingerprint)
    out = {}
    for label, (folder, name) in DERIVED.items():
        mod, state = derived_state(name, folder, restored.state, ns, train, model, common)
        out[label] = np.asarray(jax.device_get(mod.evaluate(state, test, train)["accuracy"]), np.float64).tolist()
    return out


def verify(directory: Path, setting) -> list[dict]:
    """At every step of ``directory`` that a direct run also evaluated, the two must agree."""
    from pflax import checkpoint

    report = []
    for step in checkpoint.all_steps(directory):
        derived = evaluate_at(directory, step, setting)
        for label, (folder, _) in DERIVED.items():
            direct = {e["round"]: e["accuracy"] for e in
                      json.loads((OUT / folder / "results.json").read_text())["personalized_history"]}
            if step not in direct:
                continue
            diff = float(np.max(np.abs(np.asarray(direct[step]) - np.asarray(derived[label]))))
            report.append({"method": label, "round": step, "max_abs_difference": diff,
                           "direct_mean": 100 * float(np.mean(direct[step])),
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
        sys.exit(f"no FedAvg checkpoints in {args.checkpoints}: run fedpac_table1_fmnist.py --methods FedAvg first")
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
