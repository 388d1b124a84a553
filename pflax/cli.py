"""``pflax``: run any algorithm on any partition from the command line, or from a run file.

    pflax run                                   # offline demo: FedPAC on the built-in synthetic data
    pflax run fedavg --dataset fashion_mnist --data-dir ~/datasets \\
        --partition dirichlet --beta 0.1 --clients 100 --fraction 0.1
    pflax run ditto --set prox_mu=1.0 --set lr=0.05
    pflax run --config run.toml --rounds 50     # a run file; flags override its fields
    pflax run --config runs/fedavg/run.toml     # repeat a finished run bit for bit
    pflax list                                  # algorithms, partitions and models

``--set NAME=VALUE`` sets any field of the algorithm's ``Config``; VALUE is read as a TOML value
(``0.1``, ``true``, ``["body"]``), and a bare word is a string. Each partition's parameters have
their own flags (``--beta``, ``--s``, ...; ``pflax list`` shows which partition takes which).

Results go to ``--out`` (default ``runs/<algorithm>-<dataset>``): ``run.toml`` (the resolved run
file), ``results.json``, ``rounds.csv``, ``accuracy.png``, and ``checkpoints/``. ``--resume``
continues from the latest checkpoint, bit-identical to an uninterrupted run; it refuses a run that
differs in anything but ``--rounds``, ``--eval-every``, ``--checkpoint-every`` and ``--execution``.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tomllib
from pathlib import Path

# Partition parameters that have a flag of their own: flag name -> (partition parameter, type, help).
PARTITION_FLAGS = {
    "s": ("s", float, "uniform share s of FedPAC's partition (fedpac, quantity_skew, concept_shift, rotation)"),
    "beta": ("beta", float, "Dirichlet concentration (dirichlet)"),
    "min_size": ("min_size", int, "fewest training samples per client (dirichlet)"),
    "classes_per_client": ("classes_per_client", int, "classes each client sees (pathological)"),
    "large": ("large", int, "samples of a large client (quantity_skew)"),
    "small": ("small", int, "samples of a small client (quantity_skew)"),
    "angles": ("angles", str, "comma-separated degrees, one per client group (rotation)"),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``pflax`` parser: sub-commands ``run`` and ``list``. Unset options stay ``None``, so that a
    run file's values stand unless a flag is given.

    Returns:
      An ``argparse.ArgumentParser``.

    >>> args = build_parser().parse_args(["run", "ditto", "--rounds", "3", "--set", "prox_mu=1.0"])
    >>> args.algorithm, args.rounds, args.set, args.clients
    ('ditto', 3, ['prox_mu=1.0'], None)
    """
    from .algorithms import REGISTRY
    from .data.federations import PARTITIONS
    from .experiment import MODELS

    parser = argparse.ArgumentParser(prog="pflax", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="list the algorithms, partitions and models")
    run = sub.add_parser("run", help="run an algorithm (or a run file)")
    run.add_argument("algorithm", nargs="?", default=None, choices=list(REGISTRY),
                     help="a registry algorithm (default: the run file's, else fedpac)")
    run.add_argument("--config", default=None, metavar="FILE", help="a TOML run file; the flags below override it")
    run.add_argument("--dataset", help="synthetic (offline, built in), fashion_mnist, mnist, usps, digits, or a TFDS name")
    run.add_argument("--data-dir", help="folder with <dataset>/ IDX .gz files (offline); without it named datasets come from TFDS")
    run.add_argument("--image-size", type=int, help="side of the synthetic dataset's images (default 28)")
    run.add_argument("--partition", choices=list(PARTITIONS), help="how the data is split over clients (default fedpac)")
    for flag, (_, kind, text) in PARTITION_FLAGS.items():
        run.add_argument(f"--{flag.replace('_', '-')}", dest=f"partition_{flag}", type=kind, help=text)
    run.add_argument("--no-wrap", action="store_true", default=None,
                     help="fedpac partition without re-using samples (the official code wraps around)")
    run.add_argument("--clients", type=int, help="number of clients (default 20; 10 for synthetic)")
    run.add_argument("--train-per-client", type=int, help="training samples per client (default 600; 200 for synthetic)")
    run.add_argument("--test-per-client", type=int, help="test samples per client (default 600; 200 for synthetic)")
    run.add_argument("--rounds", type=int, help="communication rounds (default 200; 15 for synthetic)")
    run.add_argument("--fraction", type=float, help="participation fraction per round (default 1.0)")
    run.add_argument("--seed", type=int, help="one seed (default 0)")
    run.add_argument("--seeds", help="comma-separated seeds, one run each, into <out>/seed<k>/")
    run.add_argument("--model", choices=list(MODELS), help="cnn (default), mlp (fast), bn_cnn (FedBN, FedPick)")
    run.add_argument("--width", type=float, help="bn_cnn channel scale (1.0: FedBN's digits CNN)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="set a field of the algorithm's Config (repeatable)")
    run.add_argument("--execution", choices=("auto", "vmap", "map", "chunked", "sharded"))
    run.add_argument("--host-devices", type=int, metavar="N",
                     help="split the CPU into N devices (one per core) so that auto/sharded execution spreads the "
                          "clients over the cores; pays for many small clients on an idle CPU, equal results to round-off")
    run.add_argument("--eval-every", type=int, help="evaluate every client every k rounds and at the end (default 10)")
    run.add_argument("--checkpoint-every", type=int, help="checkpoint every k rounds (0: only at the end; default 10)")
    run.add_argument("--out", default=None, help="output folder (default runs/<algorithm>-<dataset>)")
    run.add_argument("--logdir", default=None, help="also write TensorBoard event files (metrics, client accuracy histogram) here")
    run.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    run.add_argument("--no-plots", action="store_true")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _fail(message: str):
    raise SystemExit(f"pflax: {message}")


def parse_set(pairs: list[str]) -> dict:
    """``["lr=0.05", "shared=[\\"body\\"]", "mode=soft"]`` -> ``{"lr": 0.05, "shared": ["body"], "mode": "soft"}``.

    Each VALUE is read as a TOML value; a value that is not TOML (a bare word) is kept as a string.

    Args:
      pairs: ``NAME=VALUE`` strings.

    Returns:
      The config fields they set (checked against the algorithm's ``Config`` later).

    >>> parse_set(["prox_mu=0.5", "feature_alignment=false", "mask=soft"])
    {'prox_mu': 0.5, 'feature_alignment': False, 'mask': 'soft'}
    """
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            _fail(f"--set {pair!r}: expected NAME=VALUE")
        try:
            out[name] = tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError:
            out[name] = text
    return out


def spec_from_args(args: argparse.Namespace):
    """The run these arguments describe: the run file (if any), then every given flag on top.

    Args:
      args: parsed ``run`` arguments.

    Returns:
      A :class:`pflax.experiment.RunSpec` (unresolved).

    >>> spec = spec_from_args(build_parser().parse_args(["run", "fedavg", "--partition", "dirichlet", "--beta", "0.1"]))
    >>> spec.algorithm, spec.partition
    ('fedavg', {'name': 'dirichlet', 'beta': 0.1})
    """
    from .experiment import RunError, RunSpec

    try:
        spec = RunSpec.from_file(args.config) if args.config else RunSpec()
    except RunError as err:
        _fail(str(err))
    top, data, partition, model = {}, dict(spec.data), dict(spec.partition), dict(spec.model)
    config = dict(spec.config)
    if args.algorithm is not None and args.algorithm != spec.algorithm:
        top["algorithm"] = args.algorithm
        config = {}  # the file's config belongs to its own algorithm
    for name in ("rounds", "fraction", "eval_every", "checkpoint_every", "execution"):
        if getattr(args, name) is not None:
            top[name] = getattr(args, name)
    if args.seed is not None and args.seeds is not None:
        _fail("give --seed or --seeds, not both")
    if args.seed is not None:
        top["seeds"] = (args.seed,)
    if args.seeds is not None:
        try:
            top["seeds"] = tuple(int(s) for s in args.seeds.split(","))
        except ValueError:
            _fail(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    for name in ("dataset", "data_dir", "train_per_client", "test_per_client", "image_size"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
    switched_digits = (args.dataset == "digits") != (spec.data.get("dataset") == "digits")
    if args.dataset is not None and switched_digits and args.partition is None:
        # The digits federation has its own partition (one client per domain); leaving it resets to the default.
        partition = {"name": "domains"} if args.dataset == "digits" else {}
    if args.partition is not None and args.partition != partition.get("name"):
        partition = {"name": args.partition, **({"clients": partition["clients"]} if "clients" in partition else {})}
    if args.clients is not None:
        partition["clients"] = args.clients
    for flag, (param, _, _) in PARTITION_FLAGS.items():
        value = getattr(args, f"partition_{flag}")
        if value is not None:
            if param == "angles":
                try:
                    value = [float(a) for a in value.split(",")]
                except ValueError:
                    _fail(f"--angles must be comma-separated degrees, got {value!r}")
            partition[param] = value
    if args.no_wrap:
        partition["wrap"] = False
    if args.model is not None and args.model != model.get("name"):
        model = {"name": args.model}
    if args.width is not None:
        model["width"] = args.width
    config.update(parse_set(args.set))
    return dataclasses.replace(spec, **top, config=config, data=data, partition=partition, model=model)


def list_everything() -> str:
    """What ``pflax list`` prints: every algorithm, partition and model with one line each.

    Returns:
      The text.

    >>> text = list_everything()
    >>> "fedpick" in text and "dirichlet" in text and "bn_cnn" in text
    True
    """
    from .algorithms import REGISTRY
    from .data.federations import PARTITIONS
    from .experiment import MODELS

    lines = ["algorithms (pflax run NAME; --set FIELD=VALUE for any Config field):"]
    lines += [f"  {name:<12} {algo.summary}" for name, algo in REGISTRY.items()]
    lines += ["", "partitions (--partition NAME, its parameters with defaults):"]
    for name, part in PARTITIONS.items():
        params = ", ".join(f"{k}={v}" for k, v in part.params.items())
        lines.append(f"  {name:<14} {part.summary}" + (f"  [{params}]" if params else ""))
    lines += ["", "models (--model NAME):"]
    lines += [f"  {name:<8} {text}" for name, text in MODELS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The ``pflax`` entry point.

    Args:
      argv: the arguments; ``None`` reads ``sys.argv[1:]``, and ``[]`` means ``["run"]`` (the offline
        FedPAC demo on the synthetic federation).

    Returns:
      The exit status: 0 after a run or a list, 2 (with the help printed) without a sub-command.
      Bad input ends with ``SystemExit("pflax: <reason>")``.

    >>> build_parser().parse_args(["run"]).algorithm is None  # the run file's algorithm, else fedpac
    True
    """
    from .experiment import Diverged, RunError, Stopped, run_all

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["run"]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        print(list_everything())
        return 0
    if args.command != "run":
        parser.print_help()
        return 2
    for name in ("clients", "rounds", "train_per_client", "test_per_client", "eval_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            _fail(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.checkpoint_every is not None and args.checkpoint_every < 0:
        _fail(f"--checkpoint-every must be >= 0 (0: only at the end), got {args.checkpoint_every}")
    if args.fraction is not None and not 0.0 < args.fraction <= 1.0:
        _fail(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.partition_s is not None and not 0.0 <= args.partition_s <= 1.0:
        _fail(f"--s must be in [0, 1], got {args.partition_s}")
    if args.host_devices is not None:
        from .core.execution import use_host_devices

        try:
            use_host_devices(args.host_devices)
        except (ValueError, RuntimeError) as err:
            _fail(f"--host-devices: {err}")
    spec = spec_from_args(args)
    out = args.out or f"runs/{spec.algorithm}-{spec.data.get('dataset', 'synthetic')}"
    if args.out is None and args.config and Path(args.config).name == "run.toml" and args.resume:
        out = str(Path(args.config).parent)
    try:
        results = run_all(spec, out, resume=args.resume, progress=not args.quiet, plots=not args.no_plots,
                          command="pflax " + shlex.join(argv), logdir=args.logdir)
    except (RunError, Diverged) as err:
        _fail(str(err))
    except Stopped as stopped:  # SIGINT/SIGTERM: the round in progress finished and was checkpointed
        print(f"pflax: {stopped} (add --resume to the same command)", file=sys.stderr)
        return stopped.exit_code
    for result in results:
        summary, timing = result["final_accuracy"], result["timing"]
        print(f"{result['algorithm']} on {result['dataset']} (seed {result['seed']}): mean personalized accuracy "
              f"{summary['mean']:.2f}% (worst client {summary['worst']:.2f}%), "
              f"{timing['mean_round_s_after_first']:.2f} s/round")
    print(f"results in {out}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
