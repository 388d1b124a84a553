"""FedPick's Table II / Table IV protocol on the offline cross-domain digits benchmark.

Five clients, one domain each (``pflax.data.domains``: mnist, mnistm, inverse, rotated, noisy), 1000
training images per client, each domain's full 10,000-image test set. Methods: FedPick, FedAvg,
FedProx (mu 0.01), FedPer, FedRep (4 head + 1 body epochs), LG-FedAvg, FedBN and single-client
training, all on the FedBN Digits CNN with FedPick's SGD setting (lr 0.01, momentum 0.5, batch 64,
1 local epoch). Reported, as in the paper: the best test accuracy reached during training, per
domain, mean (std) over seeds. Ablations (Table IV) are FedPick with one switch changed. Two diagnosis
arms, not in the paper, run FedPer and FedRep with the encoder's BatchNorm kept local
(``benchmarks/paper/fedpick/fedpick_table2_local_bn_check/``, and at the paper's 300 rounds
``fedpick_table2_local_bn_check_300/``).

Each cell's run file, ``benchmarks/paper/fedpick/<table>/<arm>.toml``, holds everything the run needs:
the arm and its algorithm, seeds, rounds, evaluation and checkpoint intervals, the results folder, the
domains and their sizes, the CNN's width and the algorithm's whole ``Config``.

    python benchmarks/fedpick_domains.py benchmarks/paper/fedpick/fedpick_table2_digits/*.toml
    python benchmarks/fedpick_domains.py benchmarks/paper/fedpick/fedpick_table2_usps/fedpick.toml --seeds 0
    python benchmarks/paper/run_table.py fedpick/fedpick_table2_usps      # the same, one table

Finished runs are stored one JSON per (arm, seed) in the run file's ``out`` folder and skipped when the
script is run again (unless the run file now asks for another run: more rounds, say), so an interrupted
benchmark resumes. With ``checkpoint_every = k`` a run also resumes midway, from its latest checkpoint
(``<out>/checkpoints/<arm>_seed<k>/``), bit for bit: for long runs such as the width-1 CNN's.
``--summary-only`` rebuilds the tables and plots from those files.

Deliberate differences from the paper in the committed run files, for a 2-core CPU: a narrower CNN
(``width = 0.125``: channels 8/8/16, k = 1024, head 256/64; ``width = 1.0`` is the paper's 8192-feature
model), 30 rounds against 300 (evaluated every 5), 3 seeds against 5, and our own offline domains instead
of Digits-Five.

Memory at ``width = 1.0`` (the paper's model): FedPick's personal part (the mask network, 8192 -> 4096 ->
8192, and two 8192-input heads) is ~100M parameters per client, so the five clients' state alone holds
726M numbers (2.9 GB). Measured on the CPU (clients one at a time, the ``map`` strategy that ``auto``
picks there): a round peaks at 15 GB resident with 256 test images per domain, and at 21 GB with the full
10,000-image test sets; the first compile takes up to 15 minutes. Run it alone on a machine with 24 GB.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MAIN_ARMS = ("fedpick", "fedavg", "fedprox", "fedper", "fedrep", "lg_fedavg", "fedbn", "single")
ABLATIONS = ("wo_lce", "wo_ent", "wo_dis", "soft_mask", "share_bn", "share_pfsm", "wo_ensemble")
# Diagnosis arms, not in the paper: FedPer's and FedRep's sharing with the encoder's BatchNorm kept local
# (FedBN's treatment), to test whether averaging BN statistics across domains under a local head is what
# holds them far below the paper in our runs.
DIAGNOSES = ("fedper_local_bn", "fedrep_local_bn")
LABELS = {
    "fedpick": "FedPick", "fedavg": "FedAvg", "fedprox": "FedProx", "fedper": "FedPer", "fedrep": "FedRep",
    "lg_fedavg": "LG-FedAvg", "fedbn": "FedBN (= w/o PFSM)", "single": "Single",
    "wo_lce": "w/o L_lce", "wo_ent": "w/o L_ent", "wo_dis": "w/o L_dis", "soft_mask": "soft mask",
    "share_bn": "share BN", "share_pfsm": "share PFSM", "wo_ensemble": "w/o ensemble",
    "fedper_local_bn": "FedPer, local BN", "fedrep_local_bn": "FedRep, local BN",
}


@dataclasses.dataclass(frozen=True)
class RunFile:
    """One cell's run, as its run file states it (:func:`read_run_file`)."""

    path: Path
    arm: str                      # the results files' prefix and the label (LABELS)
    algorithm: str                # "fedpick" or "leafwise" (pflax.algorithms)
    seeds: tuple[int, ...]
    rounds: int
    eval_every: int
    checkpoint_every: int         # 0: never
    out: Path                     # the results folder
    domains: tuple[str, ...]
    train_per_domain: int
    test_per_domain: int | None   # None: each domain's full test set
    width: float
    config: object                # the algorithm's Config

    def module(self):
        from pflax.algorithms import fedpick, leafwise

        return {"fedpick": fedpick, "leafwise": leafwise}[self.algorithm]

    def data_key(self, seed: int) -> tuple:
        """Runs with equal keys train and test on the same images."""
        return (self.domains, self.train_per_domain, self.test_per_domain, seed)


_TOP_KEYS = ("arm", "algorithm", "seeds", "rounds", "eval_every", "checkpoint_every", "out")
_TABLES = {"data": ("domains", "train_per_domain", "test_per_domain"), "model": ("width",)}


def _require_exactly(keys, got: dict, where: str, fail) -> None:
    """``fail`` naming the keys of ``keys`` missing from ``got`` and those of ``got`` not in ``keys``."""
    missing, unknown = [k for k in keys if k not in got], sorted(set(got) - set(keys))
    if missing or unknown:
        fail(where + "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                               + ([f"unknown {', '.join(unknown)}"] if unknown else [])))


def read_run_file(path: str | os.PathLike) -> RunFile:
    """A FedPick-benchmark run file, every key required (the file alone says how the cell ran).

    Args:
      path: ``benchmarks/paper/fedpick/<table>/<arm>.toml``.

    Returns:
      The :class:`RunFile`; a missing, unknown or ill-typed key exits with its name.
    """
    import tomllib

    from pflax.algorithms import fedpick, leafwise
    from pflax.experiment import RunError, make_config

    path = Path(path)

    def fail(msg: str):
        raise SystemExit(f"{path}: {msg}")

    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        fail(str(err))
    for where, keys, got in [("", _TOP_KEYS + tuple(_TABLES) + ("config",), table)] + [
            (f"[{name}] ", keys, table.get(name, {})) for name, keys in _TABLES.items()]:
        _require_exactly(keys, got, where, fail)
    algorithm = table["algorithm"]
    config_cls = {"fedpick": fedpick.Config, "leafwise": leafwise.Config}.get(algorithm)
    if config_cls is None:
        fail(f"algorithm must be fedpick or leafwise, got {algorithm!r}")
    # Every field is written out (the file alone says how the cell ran); the values are read, and their
    # types checked, as a pflax run file's [config] is.
    _require_exactly([f.name for f in dataclasses.fields(config_cls) if f.name != "execution"], table["config"],
                     "[config] ", fail)
    sharing = table["config"].get("sharing")
    if sharing is not None and (not isinstance(sharing, dict) or set(sharing) != {"parts", "bn"}):
        fail("[config] sharing must be {parts = [...], bn = true|false}")
    try:
        config = make_config(config_cls, table["config"])
    except RunError as err:
        fail(f"[config] {err}")
    data, test = table["data"], table["data"]["test_per_domain"]
    if test != "all" and not (isinstance(test, int) and test > 0):
        fail(f'[data] test_per_domain must be a positive number or "all", got {test!r}')
    for key in ("rounds", "eval_every"):
        if not isinstance(table[key], int) or table[key] < 1:
            fail(f"{key} must be >= 1, got {table[key]!r}")
    seeds = table["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(k, int) for k in seeds):
        fail(f"seeds must be a non-empty list of integers, got {seeds!r}")
    return RunFile(path=path, arm=table["arm"], algorithm=algorithm, seeds=tuple(seeds), rounds=table["rounds"],
                   eval_every=table["eval_every"], checkpoint_every=table["checkpoint_every"],
                   out=REPO / table["out"], domains=tuple(data["domains"]),
                   train_per_domain=data["train_per_domain"], test_per_domain=None if test == "all" else test,
                   width=float(table["model"]["width"]), config=config)


def finished(run: RunFile, seed: int) -> bool:
    """Whether ``run``'s results file for ``seed`` holds this very run (a run file asking for more rounds,
    or other domains, sizes or width, runs again)."""
    path = run.out / f"{run.arm}_seed{seed}.json"
    if not path.exists():
        return False
    done = json.loads(path.read_text())
    return (done["rounds"] == run.rounds and done["width"] == run.width and list(done["domains"]) == list(run.domains)
            and done.get("train_per_domain", 1000) == run.train_per_domain
            and done.get("test_per_domain") == run.test_per_domain)


def run_one(run: RunFile, seed: int, data) -> dict:
    import jax

    from pflax import checkpoint
    from pflax.experiment import Record, loop, machine_info
    from pflax.models.bn import digits_cnn

    train, test, names = data
    arm, module, config = run.arm, run.module(), run.config
    model = digits_cnn(10, width=run.width)
    state = module.init(jax.random.PRNGKey(seed), model, train.x[0], train.num_clients, config)
    t0 = time.time()
    # A run unfinished when the script stopped continues from its last checkpoint (long runs, such as
    # the width-1 CNN's, span sessions); everything that changes the computation must match.
    checkpoints = run.out / "checkpoints" / f"{arm}_seed{seed}"
    fingerprint = {"arm": arm, "seed": seed, "width": run.width, "domains": list(names),
                   "train_per_domain": run.train_per_domain, "test_per_domain": run.test_per_domain,
                   "eval_every": run.eval_every}
    record = Record(sessions=[{"from_round": 0, **machine_info()}])
    if checkpoint.latest_step(checkpoints):
        restored = checkpoint.restore(checkpoints, state, run=fingerprint)
        state, record = restored.state, Record(**restored.extra)
        record.resumed_at.append(restored.step)
        record.sessions.append({"from_round": restored.step, **machine_info()})
        print(f"  [{arm} seed {seed}] resumed at round {restored.step}", flush=True)

    def report(state, record, evaluated: bool) -> None:
        row = record.history[-1]
        if run.checkpoint_every and row["round"] % run.checkpoint_every == 0 and row["round"] < run.rounds:
            checkpoint.save(checkpoints, state, run=fingerprint, max_to_keep=2, extra=dataclasses.asdict(record))
        if row.get("refused_nonfinite"):
            print(f"  [{arm} seed {seed}] round {row['round']}: non-finite update refused", flush=True)
        if evaluated:
            acc = 100 * np.asarray(record.evaluations[-1]["accuracy"])
            print(f"  [{arm} seed {seed}] round {row['round']:3d}  mean {acc.mean():6.2f}  "
                  + " ".join(f"{n} {a:5.2f}" for n, a in zip(names, acc))
                  + f"  ({time.time() - t0:.0f} s)", flush=True)

    # The experiment loop: every client every round, evaluated every --eval-every rounds and at the end;
    # a non-finite round is refused (the state kept) and training goes on, as before.
    state, record = loop(module, state, train, test, run.rounds, eval_every=run.eval_every, record=record,
                         after_round=report, on_nonfinite="continue")
    curve = [[100 * a for a in e["accuracy"]] for e in record.evaluations]
    rounds_evaluated = [e["round"] for e in record.evaluations]
    curve = np.asarray(curve)
    result = {
        "arm": arm, "seed": seed, "domains": names, "rounds": run.rounds, "width": run.width,
        "train_per_domain": run.train_per_domain, "test_per_domain": run.test_per_domain,
        "run_file": _shown(run.path),
        "eval_rounds": rounds_evaluated, "accuracy_curve": curve.tolist(),
        "best_per_domain": curve.max(0).tolist(), "final_per_domain": curve[-1].tolist(),
        "seconds": time.time() - t0, "config": repr(config),
        "jax": machine_info(), "sessions": record.sessions,  # the machine (an H100, a CPU) of each process
        **({"resumed_at_rounds": record.resumed_at} if record.resumed_at else {}),
    }
    if arm == "fedpick" and seed == run.seeds[0]:
        from pflax.algorithms import fedpick

        freq = np.asarray(fedpick.mask_frequency(state, test))
        np.save(run.out / f"mask_frequency_seed{seed}.npy", freq)
        fedpick.plot_mask_selection(freq, names, str(run.out / "mask_selection.png"))
        result["mask_overlap"] = fedpick.mask_overlap(freq).tolist()
        result["selected_fraction"] = (freq > 0.5).mean(1).tolist()
    return result


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it lies in it (as results files and pages name files)."""
    path = path.resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def _longest_runs(out: Path, arm: str) -> list[dict]:
    """The arm's results files of the most rounds (seeds of a table being extended are not mixed)."""
    runs = [json.loads(p.read_text()) for p in sorted(out.glob(f"{arm}_seed*.json"))]
    most = max((r["rounds"] for r in runs), default=0)
    return [r for r in runs if r["rounds"] == most]


def summarize(out: Path, arms: list[str]) -> str:
    rows, domains = [], None
    for arm in arms:
        runs = _longest_runs(out, arm)
        if not runs:
            continue
        domains = runs[0]["domains"]
        stats = {}
        for metric in ("best", "final"):
            acc = np.asarray([r[f"{metric}_per_domain"] for r in runs])  # [seeds, domains]
            stats[metric] = (acc.mean(0), acc.std(0), acc.mean(1).mean(), acc.mean(1).std())
        rows.append((arm, stats, len(runs), runs[0]["rounds"]))
    if not rows:
        return "no results yet"
    lines = []
    # The paper reports the best accuracy over the evaluations; the last round's is the less flattering
    # reading, and the distance between the two differs between methods.
    for metric, title in (("best", "Best test accuracy over the evaluations (the paper's metric)"),
                          ("final", "Test accuracy after the last round")):
        if lines:
            lines.append("")
        lines += [f"{title}, per domain, mean (std) over seeds:", "",
                  "| method | " + " | ".join(domains) + " | mean | seeds | rounds |",
                  "|---" * (len(domains) + 4) + "|"]
        for arm, stats, n, r in rows:
            m, s, am, asd = stats[metric]
            cells = " | ".join(f"{a:.2f} ({b:.2f})" for a, b in zip(m, s))
            lines.append(f"| {LABELS.get(arm, arm)} | {cells} | **{am:.2f}** ({asd:.2f}) | {n} | {r} |")
    # Ablations against FedPick on the same seeds (paired: same data, same initialisation).
    pick = {r["seed"]: r for r in _longest_runs(out, "fedpick")}
    paired = []
    for arm in arms:
        if arm not in ABLATIONS:
            continue
        runs = [r for r in _longest_runs(out, arm) if r["seed"] in pick and r["rounds"] == pick[r["seed"]]["rounds"]]
        if runs:
            ours = np.mean([np.mean(r["best_per_domain"]) for r in runs])
            base = np.mean([np.mean(pick[r["seed"]]["best_per_domain"]) for r in runs])
            paired.append((arm, sorted(r["seed"] for r in runs), ours, base))
    if paired:
        lines += ["", "Ablations, paired with FedPick on the same seeds (mean over domains of the best accuracy):", "",
                  "| ablation | seeds | ablation | FedPick | difference |", "|---|---|---|---|---|"]
        for arm, seeds, ours, base in paired:
            lines.append(f"| {LABELS.get(arm, arm)} | {', '.join(map(str, seeds))} | {ours:.2f} | {base:.2f} | {ours - base:+.2f} |")
    table = "\n".join(lines)
    summary = {}
    for arm, stats, n, r in rows:
        (m, s, am, asd), (fm, fs, fam, fasd) = stats["best"], stats["final"]
        summary[arm] = {"mean_best": am, "std_best": asd, "per_domain_mean": m.tolist(), "per_domain_std": s.tolist(),
                        "seeds": n, "rounds": r, "mean_final": fam, "std_final": fasd,
                        "per_domain_final_mean": fm.tolist(), "per_domain_final_std": fs.tolist()}
    (out / "table.md").write_text(table + "\n")
    evaluated = ("each client's personalized model: the server's shared leaves + its own local leaves (BN, PFSM, "
                 "unshared parts), in evaluation mode (running BN statistics; FedPick: noise-free hard mask, "
                 "prediction y^g + y^p), on its domain's full test set, every --eval-every rounds and after the last; "
                 "reported: the best accuracy over those evaluations, per domain, then mean (std) over seeds")
    (out / "table.json").write_text(json.dumps({"domains": domains, "evaluated_model": evaluated, "methods": summary},
                                               indent=1))
    _plot_curves(out, arms)
    return table


def _plot_curves(out: Path, arms: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pflax.figures import save_png

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        runs = _longest_runs(out, arm)
        if not runs:
            continue
        curves = np.asarray([np.asarray(r["accuracy_curve"]).mean(1) for r in runs])
        ax.plot(runs[0]["eval_rounds"], curves.mean(0), label=LABELS.get(arm, arm),
                lw=2.2 if arm == "fedpick" else 1.2, ls="-" if arm in MAIN_ARMS else "--")
    ax.set_xlabel("round")
    ax.set_ylabel("mean test accuracy over domains (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_png(fig, out / "accuracy.png", dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_files", nargs="+", help="benchmarks/paper/fedpick/<table>/<arm>.toml, one per cell")
    p.add_argument("--data-dir", default=os.environ.get("PFLAX_DATASETS", str(REPO.parent / "shared" / "datasets")))
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="run only these of the run files' seeds")
    p.add_argument("--summary-only", action="store_true", help="rebuild the tables and plots; train nothing")
    args = p.parse_args(argv)
    runs = [read_run_file(path) for path in args.run_files]
    for run in runs:
        run.out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        from pflax.data.domains import digit_domains

        # The runs on the same images share one build of the domains (it takes a while).
        todo: dict[tuple, list[RunFile]] = {}
        for run in runs:
            for seed in run.seeds:
                if (args.seeds is None or seed in args.seeds) and not finished(run, seed):
                    todo.setdefault(run.data_key(seed), []).append(run)
        for (domains, train_per_domain, test_per_domain, seed), group in todo.items():
            t = time.time()
            data = digit_domains(args.data_dir, domains, train_per_domain=train_per_domain,
                                 test_per_domain=test_per_domain, seed=seed)
            print(f"seed {seed}: data built in {time.time() - t:.0f} s; arms {[r.arm for r in group]}", flush=True)
            for run in group:
                result = run_one(run, seed, data)
                tmp = run.out / f"{run.arm}_seed{seed}.json.tmp"
                tmp.write_text(json.dumps(result, indent=1))
                tmp.replace(run.out / f"{run.arm}_seed{seed}.json")
                print(f"{run.arm} seed {seed}: best mean {np.mean(result['best_per_domain']):.2f} "
                      f"in {result['seconds']:.0f} s", flush=True)
                summarize(run.out, list(MAIN_ARMS + ABLATIONS + DIAGNOSES))
    for out in sorted({run.out for run in runs}):
        print(f"{_shown(out)}:")
        print(summarize(out, list(MAIN_ARMS + ABLATIONS + DIAGNOSES)))


if __name__ == "__main__":
    main()
