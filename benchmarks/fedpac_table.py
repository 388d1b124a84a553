"""Collect the FedPAC Fashion-MNIST results (Table 1 and the Table 2 ablation) beside the paper's numbers.

    python benchmarks/fedpac_table.py            # after benchmarks/fedpac_fmnist.sh

Reads benchmarks/results/fedpac_fmnist/{both,none,fa_only,cc_only}/results.json and writes
table.md and table.json next to them. The arms may have run for different numbers of rounds; the ablation
compares all of them at the latest round every arm has evaluated (same seed, same data, and the
"both" arm's trajectory up to that round is exactly what a shorter run would give).
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "results" / "fedpac_fmnist"
# FedPAC paper, Table 1 (FMNIST, 20 clients) and Table 2 (Fashion-MNIST ablation); also in
# ../shared/reference/paper_results.csv.
PAPER = {"both": 91.83, "none": 87.93, "fa_only": 89.74, "cc_only": 89.92}
LABEL = {"none": "None (neither)", "fa_only": "w/ FA", "cc_only": "w/ CC", "both": "Both (FedPAC)"}


def personalized_at(result: dict, round_: int) -> float | None:
    for entry in result["personalized_history"]:
        if entry["round"] == round_:
            return 100.0 * sum(entry["accuracy"]) / len(entry["accuracy"])
    return None


def main() -> None:
    results = {}
    for arm in ("none", "fa_only", "cc_only", "both"):
        path = ROOT / arm / "results.json"
        if path.exists():
            results[arm] = json.loads(path.read_text())
    if not results:
        raise SystemExit(f"no results under {ROOT}; run benchmarks/fedpac_fmnist.sh first")
    lines = ["| arm | rounds run | ours: mean personalized acc. (%) | paper (%) | s/round (median) |", "|---|---|---|---|---|"]
    table = {}
    for arm, res in results.items():
        acc = res["final_accuracy"]["mean"]
        rounds = res["rounds_completed"]
        table[arm] = {"rounds": rounds, "accuracy": acc, "paper": PAPER[arm], "status": res["status"],
                      "median_round_s": res["timing"]["median_round_s_after_first"]}
        lines.append(f"| {LABEL[arm]} | {rounds} | {acc:.2f} | {PAPER[arm]:.2f} | {res['timing']['median_round_s_after_first']:.1f} |")
    # Compare the arms at the latest round that every arm has evaluated (all share seed and trajectory).
    common = None
    for res in results.values():
        rounds = {e["round"] for e in res["personalized_history"]}
        common = rounds if common is None else common & rounds
    if "both" in results and len(results) > 1 and common:
        at = max(common)
        both_at = personalized_at(results["both"], at)
        lines += ["", f"Ablation at round {at} (all arms, same seed):", "", "| arm | acc. (%) | paper, 200 rounds (%) |", "|---|---|---|"]
        ablation = {}
        for arm in ("none", "fa_only", "cc_only"):
            if arm in results:
                value = personalized_at(results[arm], at)
                ablation[arm] = value
                lines.append(f"| {LABEL[arm]} | {value:.2f} | {PAPER[arm]:.2f} |")
        if both_at is not None:
            ablation["both"] = both_at
            lines.append(f"| {LABEL['both']} | {both_at:.2f} | {PAPER['both']:.2f} |")
        table["ablation_round"] = at
        table["ablation"] = ablation
        if all(k in ablation and ablation[k] is not None for k in ("none", "fa_only", "cc_only", "both")):
            order = ablation["none"] < min(ablation["fa_only"], ablation["cc_only"]) and max(ablation["fa_only"], ablation["cc_only"]) < ablation["both"]
            table["paper_order_holds"] = bool(order)
            lines.append(f"\nPaper's order none < FA, CC < both holds: {order}")
    (ROOT / "table.md").write_text("\n".join(lines) + "\n")
    (ROOT / "table.json").write_text(json.dumps(table, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
