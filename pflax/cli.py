"""``pflax run``: run an algorithm end to end with progress, results files and plots.

    pflax run                       # offline demo: FedPAC on the built-in synthetic federation
    pflax run fedpac --dataset fashion_mnist --data-dir ~/datasets --clients 20 --rounds 200
    pflax run ditto --dataset fashion_mnist --data-dir ~/datasets --set prox_mu=1.0

Every algorithm in ``pflax.algorithms.REGISTRY`` that runs on the FedPAC CNN/MLP can be named; the
shared SGD setting comes from ``--lr --momentum --weight-decay --batch-size --local-epochs`` and any
other ``Config`` field from ``--set name=value`` (for example ``--set mu=0.01`` for FedProx). FedBN and
FedPick need a BatchNorm backbone and cross-domain data: run them with
``benchmarks/fedpick_domains.py``.

Writes ``results.json`` (configuration, per-round metrics, final per-client accuracies, timings),
``rounds.csv``, ``accuracy.png`` and ``weights.png`` (final combination weights, clients ordered by
group as in the FedPAC paper's figures) into ``--out``. Files are written atomically (temp + rename),
so an interrupted run never leaves a half-written results file.

Checkpoints: every ``--checkpoint-every`` rounds and at the end, the whole algorithm state (with its
PRNG keys and round counter) and the results history so far are saved to ``<out>/checkpoints/``
(orbax; see :mod:`pflax.checkpoint`). ``--resume`` continues from the latest one; the resumed run is
bit-identical to an uninterrupted one (client sampling and local shuffling are pure functions of the
state's keys and round counter, so nothing else needs saving). Resuming with settings that change
the computation (any hyper-parameter, the data, the seed, the model) is refused with the differing
fields named; ``--rounds``, ``--eval-every``, ``--checkpoint-every``, ``--execution`` and output
options may change. A fresh run (no ``--resume``) into an ``--out`` that holds checkpoints replaces them.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import shutil
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# BN-backbone algorithms are run by benchmarks/fedpick_domains.py, not by this CLI.
BN_ONLY = ("fedbn", "fedpick")


def _algorithm_names() -> tuple[str, ...]:
    from .algorithms import REGISTRY

    return tuple(n for n in REGISTRY if n not in BN_ONLY)


ALGORITHMS = _algorithm_names()
# Arguments that do not change what is computed: they may differ between a run and its resumption.
NOT_FINGERPRINTED = (
    "command", "rounds", "eval_every", "checkpoint_every", "resume", "out", "quiet", "no_plots", "execution", "data_dir",
)
MAX_CHECKPOINTS_KEPT = 3


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _remove_stale_temp_files(out: Path) -> None:
    """Drop temp files that a process killed inside :func:`_atomic_write` left behind."""
    if out.is_dir():
        for leftover in out.glob(".*.*"):
            if leftover.is_file() and leftover.name.split(".")[1] in ("results", "rounds", "accuracy", "weights"):
                leftover.unlink()


def build_parser() -> argparse.ArgumentParser:
    """The ``pflax`` command-line parser, with its one sub-command ``run`` (options in the module docstring).

    Returns:
      An ``argparse.ArgumentParser``; unset sizes stay ``None`` until :func:`main` fills in the defaults.

    >>> args = build_parser().parse_args(["run", "ditto", "--rounds", "3", "--set", "prox_mu=1.0"])
    >>> args.algorithm, args.rounds, args.set, args.clients
    ('ditto', 3, ['prox_mu=1.0'], None)
    """
    parser = argparse.ArgumentParser(prog="pflax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run an algorithm")
    run.add_argument("algorithm", nargs="?", default="fedpac", choices=ALGORITHMS)
    run.add_argument("--dataset", default="synthetic", help="synthetic (offline, built in), fashion_mnist, mnist, or a TFDS name")
    run.add_argument("--data-dir", default=None, help="folder with <dataset>/ IDX .gz files (offline); without it named datasets come from TFDS")
    run.add_argument("--clients", type=int, default=None, help="number of clients (default 20; 10 for synthetic)")
    run.add_argument("--rounds", type=int, default=None, help="communication rounds (default 200; 15 for synthetic)")
    run.add_argument("--fraction", type=float, default=1.0, help="participation fraction per round")
    run.add_argument("--s", type=float, default=0.2, help="uniform share s of FedPAC's partition")
    run.add_argument("--train-per-client", type=int, default=None, help="default 600 (200 for synthetic)")
    run.add_argument("--test-per-client", type=int, default=None, help="default 600 (200 for synthetic)")
    run.add_argument("--no-wrap", action="store_true", help="partition without re-using samples (official code wraps around)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--model", default="cnn", choices=("cnn", "mlp"),
                     help="the FedPAC CNN (default) or a 2-hidden-layer MLP (fast; for tests and smoke runs)")
    run.add_argument("--batch-size", type=int, default=50)
    run.add_argument("--body-lr", type=float, default=0.01)
    run.add_argument("--head-lr", type=float, default=0.1)
    run.add_argument("--momentum", type=float, default=0.5)
    run.add_argument("--weight-decay", type=float, default=5e-4)
    run.add_argument("--head-epochs", type=int, default=1)
    run.add_argument("--body-epochs", type=int, default=5)
    run.add_argument("--lam", type=float, default=1.0, help="feature-alignment weight lambda")
    run.add_argument("--lr", type=float, default=0.01, help="baselines: local SGD learning rate")
    run.add_argument("--local-epochs", type=int, default=5, help="baselines: local epochs per round")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="baselines: set any other field of the algorithm's Config (repeatable)")
    run.add_argument("--no-fa", action="store_true", help="ablation: no feature alignment")
    run.add_argument("--no-cc", action="store_true", help="ablation: no classifier collaboration")
    run.add_argument("--qp-mode", default="exact", choices=("exact", "official"))
    run.add_argument("--execution", default="auto", choices=("auto", "vmap", "map", "chunked", "sharded"))
    run.add_argument("--eval-every", type=int, default=10, help="evaluate every client's personalized model every k rounds (and at the end)")
    run.add_argument("--out", default=None, help="output folder (default runs/<algorithm>-<dataset>)")
    run.add_argument("--checkpoint-every", type=int, default=10,
                     help="save a checkpoint to <out>/checkpoints every k rounds (0: only at the end); always at the end")
    run.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    run.add_argument("--no-plots", action="store_true")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    small = args.dataset == "synthetic"
    if args.clients is None:
        args.clients = 10 if small else 20
    if args.rounds is None:
        args.rounds = 15 if small else 200
    if args.train_per_client is None:
        args.train_per_client = 200 if small else 600
    if args.test_per_client is None:
        args.test_per_client = 200 if small else 600
    if args.out is None:
        args.out = f"runs/{args.algorithm}-{args.dataset}"
    for name in ("clients", "rounds", "train_per_client", "test_per_client", "batch_size", "eval_every"):
        if getattr(args, name) < 1:
            raise SystemExit(f"pflax: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.checkpoint_every < 0:
        raise SystemExit(f"pflax: --checkpoint-every must be >= 0 (0: only at the end), got {args.checkpoint_every}")
    if not 0.0 < args.fraction <= 1.0:
        raise SystemExit(f"pflax: --fraction must be in (0, 1], got {args.fraction}")
    if not 0.0 <= args.s <= 1.0:
        raise SystemExit(f"pflax: --s must be in [0, 1], got {args.s}")
    return args


def _plot_accuracy(history: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [h["round"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(rounds, [h["acc_before"] for h in history], label="personalized model (before local training)")
    ax.plot(rounds, [h["acc_after"] for h in history], label="after local training", alpha=0.7)
    ax.set_xlabel("round")
    ax.set_ylabel("mean client test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic_write(path, buf.getvalue())


def plot_weights(weights: np.ndarray, client_ids: np.ndarray, num_groups: int, path: Path, title: str) -> None:
    """Heatmap of combination weights with clients ordered by group (i mod G), as the paper's Fig. 2-3.

    Args:
      weights: ``[m, m]`` combination weights, row ``i`` for target client ``i``.
      client_ids: ``[m]`` the clients' ids (group ``id mod num_groups``).
      num_groups: ``G``, the number of client groups.
      path: the PNG file to write (atomically).
      title: the figure title.

    Returns:
      None; the figure is written to ``path``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plot_weights(np.eye(2), np.array([0, 1]), 2, Path(d) / "w.png", "demo")
    ...     (Path(d) / "w.png").stat().st_size > 0
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = sorted(range(len(client_ids)), key=lambda j: (client_ids[j] % max(num_groups, 1), client_ids[j]))
    w = weights[np.ix_(order, order)]
    labels = [str(int(client_ids[j])) for j in order]
    fig, ax = plt.subplots(figsize=(6.2, 5.2))
    im = ax.imshow(w, cmap="viridis", vmin=0.0)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=90)
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("source client j (ordered by group)")
    ax.set_ylabel("target client i")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic_write(path, buf.getvalue())


def run_fedpac(args: argparse.Namespace) -> dict:
    """``pflax run fedpac``: train FedPAC, evaluate every ``--eval-every`` rounds, checkpoint and write the results.

    Args:
      args: parsed ``run`` arguments with the defaults filled in (as :func:`main` does).

    Returns:
      The content of the written ``results.json``. Invalid settings or data end it with ``SystemExit``.

    >>> args = build_parser().parse_args(["run", "fedpac", "--model", "mlp", "--no-cc", "--quiet"])
    >>> args.algorithm, args.no_cc, args.qp_mode
    ('fedpac', True, 'exact')
    """
    import jax

    from . import checkpoint, fedpac
    from .core.execution import Execution
    from .data.partition import dominant_groups
    from .metrics import summarize

    t_start = time.time()
    dataset, train, test = _load_federation(args)
    model = _make_model(args, dataset)
    try:
        config = fedpac.Config(
            body_lr=args.body_lr, head_lr=args.head_lr, momentum=args.momentum, weight_decay=args.weight_decay,
            batch_size=args.batch_size, head_epochs=args.head_epochs, body_epochs=args.body_epochs, lam=args.lam,
            feature_alignment=not args.no_fa, classifier_collaboration=not args.no_cc, qp_mode=args.qp_mode,
            execution=Execution(args.execution),
        )
    except ValueError as err:
        raise SystemExit(f"pflax: {err}") from err
    state = _init_checked(fedpac, args, model, train, test, config)

    out, checkpoints, run_fingerprint = _prepare_output(args)
    history: list[dict] = []
    personalized: list[dict] = []
    last_weights, last_ids = None, None
    round_times = []
    resumed_at: list[int] = []
    summary_holder: dict = {}
    state, start, saved = _resume_or_start(args, checkpoints, state, run_fingerprint)
    if saved is not None:
        history, personalized, round_times = saved["history"], saved["personalized_history"], saved["round_times"]
        last_weights, last_ids = np.asarray(saved["last_weights"], np.float32), np.asarray(saved["last_ids"], np.int32)
        resumed_at = saved["resumed_at"] + [start]

    def save_checkpoint() -> None:
        extra = {
            "history": history,
            "personalized_history": personalized,
            "round_times": round_times,
            "last_weights": np.asarray(last_weights).tolist(),
            "last_ids": np.asarray(last_ids).tolist(),
            "resumed_at": resumed_at,
        }
        checkpoint.save(checkpoints, state, extra=extra, run=run_fingerprint, max_to_keep=MAX_CHECKPOINTS_KEPT)

    def write_results(done: bool) -> None:
        """(Re)write results.json, rounds.csv and plots; called at every evaluation, so a long run
        that is interrupted still leaves complete files for the rounds it finished."""
        final = personalized[-1]["accuracy"]
        summary = summarize(np.asarray(final), np.asarray(test.sizes))
        summary_holder["summary"] = summary
        steady = round_times[1:] if len(round_times) > 1 else round_times
        result = {
            "algorithm": "fedpac",
            "dataset": dataset.name,
            "status": "finished" if done else f"running ({len(history)}/{args.rounds} rounds)",
            "evaluated_model": "each client's personalized model (global body + its combined head) after the last "
            "completed round, on its own test split; acc_before/acc_after per round are over that round's "
            "participants (before = received personalized model, after = locally trained model)",
            **_run_record(args, config, history, personalized, resumed_at, summary, final),
            "final_combination_weights": np.asarray(last_weights).tolist(),
            "final_combination_client_ids": np.asarray(last_ids).tolist(),
            "timing": {
                "first_round_s_incl_compile": round_times[0],
                "mean_round_s_after_first": float(np.mean(steady)),
                "median_round_s_after_first": float(np.median(steady)),
                "total_s": time.time() - t_start,
            },
        }
        _atomic_write(out / "results.json", json.dumps(result, indent=1).encode())
        buf = io.StringIO()
        fields = ["round", "acc_before", "acc_after", "head_loss", "body_loss", "participants", "seconds", "personalized_all_clients"]
        writer = csv.DictWriter(buf, fieldnames=fields)
        writer.writeheader()
        for row in history:
            writer.writerow(row)
        _atomic_write(out / "rounds.csv", buf.getvalue().encode())
        if not args.no_plots:
            try:
                groups = len(dominant_groups(dataset.num_classes))
            except ValueError:
                groups = 1
            _plot_accuracy(history, out / "accuracy.png", f"FedPAC on {dataset.name}, {args.clients} clients")
            plot_weights(np.asarray(last_weights), np.asarray(last_ids), groups, out / "weights.png",
                         f"FedPAC combination weights, round {len(history)}")

    progress = None
    if not args.quiet:
        from tqdm.auto import tqdm

        progress = tqdm(total=args.rounds, initial=start, desc=f"fedpac {dataset.name}", unit="round", file=sys.stderr)
    if start == args.rounds and history:  # resumed a finished run: just rewrite its files
        write_results(done=True)
    for r in range(start, args.rounds):
        t0 = time.time()
        ids = fedpac.sample_clients(state, args.fraction)
        state, metrics = fedpac.round(state, train.take(ids), test.take(ids))
        metrics = jax.device_get(metrics)
        dt = time.time() - t0
        round_times.append(dt)
        if bool(metrics["nonfinite"]):
            raise SystemExit(f"pflax: round {r} produced NaN/Inf (diverged); the state was kept at round {r}. Lower the learning rates.")
        row = {
            "round": r + 1,
            "acc_before": float(np.mean(metrics["acc_before"]) * 100),
            "acc_after": float(np.mean(metrics["acc_after"]) * 100),
            "head_loss": float(np.mean(metrics["head_loss"])),
            "body_loss": float(np.mean(metrics["body_loss"])),
            "participants": int(len(metrics["client_ids"])),
            "seconds": dt,
        }
        if (r + 1) % args.eval_every == 0 or r + 1 == args.rounds:
            ev = jax.device_get(fedpac.evaluate(state, test))
            row["personalized_all_clients"] = float(np.mean(ev["accuracy"]) * 100)
            personalized.append({"round": r + 1, "accuracy": ev["accuracy"].tolist()})
        history.append(row)
        last_weights, last_ids = metrics["combination_weights"], metrics["client_ids"]
        if "personalized_all_clients" in row:
            write_results(done=r + 1 == args.rounds)
        if r + 1 == args.rounds or (args.checkpoint_every and (r + 1) % args.checkpoint_every == 0):
            save_checkpoint()
        if progress is not None:
            progress.set_postfix(acc=f"{row['acc_before']:.2f}", after=f"{row['acc_after']:.2f}", s=f"{dt:.1f}")
            progress.update(1)
    if progress is not None:
        progress.close()

    summary = summary_holder["summary"]
    steady = round_times[1:] if len(round_times) > 1 else round_times
    print(
        f"fedpac on {dataset.name}: mean personalized accuracy {summary['mean']:.2f}% "
        f"(worst client {summary['worst']:.2f}%), {np.mean(steady):.2f} s/round; results in {out}/"
    )
    return json.loads((out / "results.json").read_text())


def _parse_overrides(config_cls, pairs: list[str]) -> dict:
    """``["mu=0.01", ...]`` -> typed keyword arguments for ``config_cls``; unknown names are refused."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in fields or name == "execution":
            allowed = ", ".join(sorted(n for n in fields if n != "execution"))
            raise SystemExit(f"pflax: --set {pair!r}: expected NAME=VALUE with NAME one of: {allowed}")
        current = getattr(config_cls(), name)
        try:
            if isinstance(current, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                value = text.lower() in ("true", "1")
            else:
                value = type(current)(text)
        except ValueError as err:
            raise SystemExit(f"pflax: --set {name}: cannot read {text!r} as {type(current).__name__}") from err
        out[name] = value
    return out


def _load_federation(args: argparse.Namespace):
    from .data import DataError, load_dataset
    from .suites.fedpac import federate_fedpac

    try:
        dataset = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    except (DataError, FileNotFoundError) as err:
        raise SystemExit(f"pflax: {err}") from err
    try:
        train, test = federate_fedpac(
            dataset, args.clients, args.train_per_client, args.test_per_client, args.s, wrap=not args.no_wrap
        )
    except (DataError, ValueError) as err:
        raise SystemExit(f"pflax: cannot partition {dataset.name}: {err}") from err
    return dataset, train, test


def _make_model(args: argparse.Namespace, dataset):
    from .models import fedpac_cnn, mlp

    if args.model == "mlp":
        return mlp(dataset.num_classes)
    return fedpac_cnn("cifar10" if dataset.x_train.shape[-1] == 3 else "fmnist", dataset.num_classes)


def _prepare_output(args: argparse.Namespace) -> tuple[Path, Path, dict]:
    """The run's output folder (stale temporary files removed), its checkpoint folder, and the
    fingerprint of the arguments that change what is computed (a resume refuses a different one)."""
    out = Path(args.out)
    _remove_stale_temp_files(out)
    return out, out / "checkpoints", {k: v for k, v in sorted(vars(args).items()) if k not in NOT_FINGERPRINTED}


def _resume_or_start(args: argparse.Namespace, checkpoints: Path, state, fingerprint: dict):
    """``(state, first round, saved extras)``: with ``--resume``, the latest checkpoint (refused if it
    was written by a run with other arguments, or is past ``--rounds``); else ``(state, 0, None)`` and
    an old run's checkpoints are removed, as a fresh run replaces its results."""
    from . import checkpoint

    if not args.resume:
        if checkpoints.exists():
            shutil.rmtree(checkpoints)
        return state, 0, None
    try:
        restored = checkpoint.restore(checkpoints, state, run=fingerprint)
    except checkpoint.CheckpointError as err:
        raise SystemExit(f"pflax: cannot resume: {err}") from err
    if restored.step > args.rounds:
        raise SystemExit(f"pflax: cannot resume: the checkpoint is at round {restored.step}, past --rounds {args.rounds}")
    return restored.state, restored.step, restored.extra


def _run_record(args: argparse.Namespace, config, history: list, personalized: list, resumed_at: list,
                summary: dict, final: list) -> dict:
    """The part of ``results.json`` every run writes: its arguments and config, the JAX it ran on, and
    the per-round and final results."""
    import jax

    return {
        "args": vars(args),
        "config": {k: (str(v) if k == "execution" else v) for k, v in dataclasses.asdict(config).items()},
        "jax": {"version": jax.__version__, "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()]},
        "rounds_completed": len(history),
        "resumed_at_rounds": resumed_at,
        "final_accuracy": summary,
        "final_per_client": final,
        "history": history,
        "personalized_history": personalized,
    }


def _init_checked(mod, args: argparse.Namespace, model, train, test, config):
    """``mod.init`` from ``--seed``, then its eager input checks; bad data ends the CLI with the reason."""
    import jax

    from .data import DataError

    state = mod.init(jax.random.PRNGKey(args.seed), model, train.x[0], args.clients, config)
    try:
        mod.check_inputs(state, train, test)
    except DataError as err:
        raise SystemExit(f"pflax: {err}") from err
    return state


def baseline_config(mod, args: argparse.Namespace):
    """``mod.Config`` of a ``pflax run <baseline>``: the common SGD options it has, then ``--set`` overrides.

    Args:
      mod: the algorithm's registry entry (:data:`pflax.algorithms.REGISTRY`).
      args: the parsed ``run`` arguments.

    Returns:
      A ``mod.Config``; an unknown or unreadable ``--set`` ends with ``SystemExit``.

    >>> from pflax.algorithms import REGISTRY
    >>> args = build_parser().parse_args(["run", "ditto", "--lr", "0.05", "--set", "prox_mu=0.5"])
    >>> cfg = baseline_config(REGISTRY["ditto"], args)
    >>> cfg.lr, cfg.prox_mu
    (0.05, 0.5)
    """
    from .core.execution import Execution

    common = dict(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, batch_size=args.batch_size,
                  local_epochs=args.local_epochs, execution=Execution(args.execution))
    names = {f.name for f in dataclasses.fields(mod.Config)}
    try:
        return mod.Config(**{k: v for k, v in common.items() if k in names}, **_parse_overrides(mod.Config, args.set))
    except (TypeError, ValueError) as err:
        raise SystemExit(f"pflax: {err}") from err


def run_baseline(args: argparse.Namespace) -> dict:
    """Any registry algorithm but FedPAC: same data, outputs, checkpoints and resume as FedPAC's run.
    Evaluated every ``--eval-every`` rounds: each client's personalized model (as the module's
    ``evaluate`` defines it) on its own test split.

    Args:
      args: parsed ``run`` arguments with the defaults filled in (as :func:`main` does).

    Returns:
      The content of the written ``results.json``.

    >>> build_parser().parse_args(["run", "fedprox", "--local-epochs", "1", "--checkpoint-every", "0"]).checkpoint_every
    0
    """
    import jax

    from . import checkpoint
    from .algorithms import REGISTRY
    from .metrics import summarize

    mod = REGISTRY[args.algorithm]
    t_start = time.time()
    dataset, train, test = _load_federation(args)
    model = _make_model(args, dataset)
    config = baseline_config(mod, args)
    state = _init_checked(mod, args, model, train, test, config)
    needs_train = mod.needs_train

    def evaluate(st):
        return mod.evaluate(st, test, train)

    out, checkpoints, run_fingerprint = _prepare_output(args)
    history: list[dict] = []
    personalized: list[dict] = []
    round_times: list[float] = []
    resumed_at: list[int] = []
    state, start, saved = _resume_or_start(args, checkpoints, state, run_fingerprint)
    if saved is not None:
        history, personalized, round_times = saved["history"], saved["personalized_history"], saved["round_times"]
        resumed_at = saved["resumed_at"] + [start]

    def write_results(done: bool) -> dict:
        final = personalized[-1]["accuracy"]
        summary = summarize(np.asarray(final), np.asarray(test.sizes))
        steady = round_times[1:] if len(round_times) > 1 else round_times
        result = {
            "algorithm": args.algorithm,
            "dataset": dataset.name,
            "status": "finished" if done else f"running ({len(history)}/{args.rounds} rounds)",
            "evaluated_model": f"each client's personalized model as pflax.{mod.name}.evaluate defines it"
            + (" (personalised on its training split at evaluation time)" if needs_train else "")
            + f", after round {personalized[-1]['round']}, on its own test split",
            **_run_record(args, config, history, personalized, resumed_at, summary, final),
            "timing": {"first_round_s_incl_compile": round_times[0], "mean_round_s_after_first": float(np.mean(steady)),
                       "total_s": time.time() - t_start},
        }
        _atomic_write(out / "results.json", json.dumps(result, indent=1).encode())
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=["round", "loss", "participants", "seconds", "personalized_all_clients"])
        writer.writeheader()
        for row in history:
            writer.writerow(row)
        _atomic_write(out / "rounds.csv", buf.getvalue().encode())
        if not args.no_plots:
            _plot_personalized(personalized, out / "accuracy.png", f"{args.algorithm} on {dataset.name}, {args.clients} clients")
        return summary

    progress = None
    if not args.quiet:
        from tqdm.auto import tqdm

        progress = tqdm(total=args.rounds, initial=start, desc=f"{args.algorithm} {dataset.name}", unit="round", file=sys.stderr)
    summary = None
    for r in range(start, args.rounds):
        t0 = time.time()
        ids = mod.sample_clients(state, args.fraction)
        state, metrics = mod.round(state, train.take(ids))
        metrics = jax.device_get(metrics)
        dt = time.time() - t0
        round_times.append(dt)
        if bool(np.any(metrics["nonfinite"])):
            raise SystemExit(f"pflax: round {r} produced NaN/Inf (diverged); the state was kept at round {r}. Lower the learning rate.")
        row = {"round": r + 1, "loss": float(np.mean(metrics["loss"])) if "loss" in metrics else float("nan"),
               "participants": int(len(metrics["client_ids"])), "seconds": dt}
        if (r + 1) % args.eval_every == 0 or r + 1 == args.rounds:
            acc = np.asarray(jax.device_get(evaluate(state)["accuracy"]))
            row["personalized_all_clients"] = float(acc.mean() * 100)
            personalized.append({"round": r + 1, "accuracy": acc.tolist()})
        history.append(row)
        if "personalized_all_clients" in row:
            summary = write_results(done=r + 1 == args.rounds)
        if r + 1 == args.rounds or (args.checkpoint_every and (r + 1) % args.checkpoint_every == 0):
            checkpoint.save(checkpoints, state, run=run_fingerprint, max_to_keep=MAX_CHECKPOINTS_KEPT,
                            extra={"history": history, "personalized_history": personalized,
                                   "round_times": round_times, "resumed_at": resumed_at})
        if progress is not None:
            progress.set_postfix(loss=f"{row['loss']:.3f}", s=f"{dt:.1f}")
            progress.update(1)
    if progress is not None:
        progress.close()
    if summary is None and personalized:
        summary = write_results(done=True)
    steady = round_times[1:] if len(round_times) > 1 else round_times
    print(f"{args.algorithm} on {dataset.name}: mean personalized accuracy {summary['mean']:.2f}% "
          f"(worst client {summary['worst']:.2f}%), {np.mean(steady):.2f} s/round; results in {out}/")
    return json.loads((out / "results.json").read_text())


def _plot_personalized(personalized: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["round"] for p in personalized], [100 * np.mean(p["accuracy"]) for p in personalized], marker=".")
    ax.set_xlabel("round")
    ax.set_ylabel("mean personalized test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic_write(path, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    """The ``pflax`` entry point: parse ``argv``, fill in the defaults, run the algorithm.

    Args:
      argv: the arguments; ``None`` reads ``sys.argv[1:]``, and ``[]`` means ``["run"]`` (the offline
        FedPAC demo on the synthetic federation).

    Returns:
      The exit status: 0 after a run, 2 (with the help printed) without a sub-command.

    >>> build_parser().parse_args(["run"]).algorithm  # what main([]) runs
    'fedpac'
    """
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["run"]
    args = build_parser().parse_args(argv)
    if args.command != "run":
        build_parser().print_help()
        return 2
    args = _defaults(args)
    if args.algorithm == "fedpac":
        run_fedpac(args)
    else:
        run_baseline(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
