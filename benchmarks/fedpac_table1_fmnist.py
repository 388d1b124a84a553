"""FedPAC Table 1 (+ Table 4) on Fashion-MNIST, 20 clients, full participation: every method, one command.

    python benchmarks/fedpac_table1_fmnist.py                 # all 19 methods, 200 rounds each, then the table
    python benchmarks/fedpac_table1_fmnist.py --methods FedAvg Ditto --rounds 50
    python benchmarks/fedpac_table1_fmnist.py --table-only    # rebuild table.md / table.json from results

Each method is one ``pflax run <algorithm>`` with FedPAC's setting (s = 20 %, 600 train / 600 test per
client, batch 50, lr 0.01, momentum 0.5, wd 5e-4, E = 5, seed 0), checkpointing every 10 rounds and
resuming an interrupted run (``--resume``). FedPAC itself is read from
``benchmarks/results/fedpac_fmnist/both`` (``benchmarks/fedpac_fmnist.sh``). The table puts the paper's
number beside ours and the gap, and states each run's status (finished, or how many rounds ran).
On a 2-core CPU one method takes 30-60 min for 200 rounds.

FedAvg-FT and kNN-Per train exactly as FedAvg and differ only in evaluation, so after FedAvg has run,
``benchmarks/fedavg_family_eval.py`` (called here automatically) evaluates them on the FedAvg run's
checkpoints; the table reports each method at the later of its direct run and that evaluation, and
says which.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "table1_fmnist"
PAPER = REPO.parent / "shared" / "reference" / "paper_results.csv"

# Table label -> (registry name, extra CLI arguments)
METHODS = {
    "Local-only": ("local_only", []),
    "FedAvg": ("fedavg", []),
    "FedAvg-FT": ("fedavg_ft", []),
    "FedPer": ("fedper", []),
    "LG-FedAvg": ("lg_fedavg", []),
    "FedRep": ("fedrep", []),
    "FedBABU": ("fedbabu", []),
    "Fed-RoD": ("fedrod", []),
    "kNN-Per": ("knnper", []),
    "APFL": ("apfl", []),
    "pFedMe": ("pfedme", []),
    "Ditto": ("ditto", []),
    "FedFomo": ("fedfomo", []),
    "pFedHN": ("pfedhn", []),
    "FedProx": ("fedprox", []),
    "SCAFFOLD": ("scaffold", []),
    "HypCluster (k=3)": ("hypcluster", ["--set", "num_clusters=3"]),
    "HypCluster (k=5)": ("hypcluster", ["--set", "num_clusters=5"]),
    "FedEM (M=3)": ("fedem", ["--set", "num_components=3"]),
}
FEDPAC_RESULTS = REPO / "benchmarks" / "results" / "fedpac_fmnist" / "both" / "results.json"


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label.lower()).strip("_")


def paper_numbers() -> dict[str, float]:
    if not PAPER.exists():
        return {}
    with PAPER.open() as f:
        return {r["method"]: float(r["value"]) for r in csv.DictReader(f)
                if r["paper"] == "FedPAC" and r["table"] in ("1", "4") and r["setting"] == "FMNIST/20clients_frac1.0"}


def run(label: str, rounds: int, data_dir: str, eval_every: int = 10) -> None:
    name, extra = METHODS[label]
    out = OUT / slug(label)
    cmd = [sys.executable, "-m", "pflax.cli", "run", name, "--dataset", "fashion_mnist", "--data-dir", data_dir,
           "--clients", "20", "--fraction", "1.0", "--s", "0.2", "--train-per-client", "600", "--test-per-client", "600",
           "--seed", "0", "--eval-every", str(eval_every), "--checkpoint-every", "10", "--rounds", str(rounds), "--out", str(out), *extra]
    if (out / "checkpoints").exists():
        cmd.append("--resume")
    print(f"== {label}: {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO)
    try:
        code = proc.wait()
    finally:  # stopping this script (Ctrl-C, kill) must not leave the run going on alone
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def results_path(label: str) -> Path:
    return FEDPAC_RESULTS if label == "FedPAC" else OUT / slug(label) / "results.json"


def mean_accuracy(entry: dict) -> float:
    """Unweighted mean over clients of one ``personalized_history`` entry, in %."""
    return 100.0 * sum(entry["accuracy"]) / len(entry["accuracy"])


def history(label: str) -> tuple[list[dict], dict, dict | None]:
    """``(personalized_history, result, derived)`` of a method: its direct run's history, extended by the
    evaluations in ``from_fedavg.json`` (FedAvg-FT, kNN-Per on FedAvg's checkpoints, returned as
    ``derived``) at rounds past the direct run."""
    result = json.loads(results_path(label).read_text())
    hist = list(result["personalized_history"])
    derived_path = OUT / slug(label) / "from_fedavg.json"
    derived = json.loads(derived_path.read_text()) if label != "FedPAC" and derived_path.exists() else None
    if derived is not None:
        last = hist[-1]["round"] if hist else 0
        hist += [e for e in derived["personalized_history"] if e["round"] > last]
    return hist, result, derived


def table() -> str:
    """table.md / table.json: each method after the rounds it ran, the paper's 200-round number, and
    FedPAC after the *same* number of rounds, so that a shortened run is still a like-for-like comparison."""
    paper = paper_numbers()
    # FedPAC's 200-round history gives FedPAC after the same number of rounds as each shortened run.
    fedpac_by_round = ({e["round"]: mean_accuracy(e) for e in json.loads(FEDPAC_RESULTS.read_text())["personalized_history"]}
                       if FEDPAC_RESULTS.exists() else {})
    rows = []
    for label in ["FedPAC", *METHODS]:
        path = results_path(label)
        if not path.exists():
            rows.append({"method": label, "pflax": None, "paper": paper.get(label), "rounds": 0, "status": "not run"})
            continue
        hist, result, derived_file = history(label)
        rounds = hist[-1]["round"]
        derived = rounds > result["rounds_completed"]
        per_client = hist[-1]["accuracy"]
        rows.append({"method": label, "pflax": mean_accuracy(hist[-1]), "worst": 100.0 * min(per_client),
                     "paper": paper.get(label), "rounds": rounds, "fedpac_same_round": fedpac_by_round.get(rounds),
                     "status": (f"direct run: {result['status']}; round {rounds}: evaluated on the FedAvg run's model "
                                "(benchmarks/fedavg_family_eval.py)") if derived else result["status"],
                     "evaluated_model": derived_file["evaluated_model"] if derived else result["evaluated_model"],
                     "derived_from_fedavg": derived})
    fmt = lambda v: "–" if v is None else f"{v:.2f}"
    lines = ["| method | pflax | paper (200 rounds) | gap to paper | rounds run | FedPAC at the same round | "
             "method − FedPAC (same round) | paper: method − FedPAC | worst client |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = None if r["pflax"] is None or r["paper"] is None else r["pflax"] - r["paper"]
        same = r.get("fedpac_same_round")
        vs = None if r["pflax"] is None or same is None or r["method"] == "FedPAC" else r["pflax"] - same
        gap_s = "–" if gap is None else f"{gap:+.2f}"
        vs_s = "–" if vs is None else f"{vs:+.2f}"
        paper_vs = None if r["paper"] is None or r["method"] == "FedPAC" else r["paper"] - paper.get("FedPAC", float("nan"))
        r["paper_minus_fedpac"], r["minus_fedpac_same_round"] = paper_vs, vs
        paper_vs_s = "–" if paper_vs is None else f"{paper_vs:+.2f}"
        name = r["method"] + (" †" if r.get("derived_from_fedavg") else "")
        lines.append(f"| {name} | {fmt(r['pflax'])} | {fmt(r['paper'])} | {gap_s} | {r['rounds']} | "
                     f"{fmt(same)} | {vs_s} | {paper_vs_s} | {fmt(r.get('worst'))} |")
    if any(r.get("derived_from_fedavg") for r in rows):
        lines.append("\n† trains exactly as FedAvg; evaluated with its own `evaluate` on the FedAvg run's global model "
                     "after that round (`benchmarks/fedavg_family_eval.py`, which reproduces the direct run's accuracies "
                     "at a round both have).")
    ft = next(r for r in rows if r["method"] == "FedAvg-FT")
    if ft["pflax"] is not None and ft.get("fedpac_same_round") is not None:
        holds = ft["fedpac_same_round"] > ft["pflax"]
        lines.append(f"\nOrdering FedPAC > FedAvg-FT after {ft['rounds']} rounds (paper: {fmt(paper.get('FedPAC'))} > "
                     f"{fmt(ft['paper'])}): "
                     f"{'holds' if holds else 'does NOT hold'} ({ft['fedpac_same_round']:.2f} vs {ft['pflax']:.2f}).")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text("\n".join(lines) + "\n")
    (OUT / "table.json").write_text(json.dumps(rows, indent=1))
    return "\n".join(lines)


def plot() -> None:
    """accuracy.png: every method's mean personalised accuracy at each evaluated round, FedPAC bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    max_round = 0
    for label in ["FedPAC", *METHODS]:
        path = results_path(label)
        if not path.exists():
            continue
        hist = history(label)[0]
        rounds = [e["round"] for e in hist]
        acc = [mean_accuracy(e) for e in hist]
        if label != "FedPAC":
            max_round = max(max_round, rounds[-1])
        ax.plot(rounds, acc, "o-" if label != "FedPAC" else "k-", lw=2.5 if label == "FedPAC" else 1,
                ms=3, label=label)
    if max_round:
        ax.set_xlim(0, max(max_round, 10) + 2)
    ax.set(xlabel="round", ylabel="mean personalised test accuracy (%)",
           title="FedPAC Table 1/4, Fashion-MNIST, 20 clients (pflax)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(OUT / "accuracy.png", dpi=110)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup in run() on `kill` too
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=list(METHODS), metavar="LABEL")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--data-dir", default=os.environ.get("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets")))
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {list(METHODS)}")
    if not args.table_only:
        for label in args.methods:
            run(label, args.rounds, args.data_dir, args.eval_every)
            if label == "FedAvg":
                subprocess.run([sys.executable, str(REPO / "benchmarks" / "fedavg_family_eval.py")], check=True, cwd=REPO)
            print(table(), flush=True)
    print(table())
    plot()


if __name__ == "__main__":
    main()
