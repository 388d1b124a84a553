"""The experiment loop, and run files that describe an experiment completely.

Every caller trains through :func:`loop`: the CLI, the benchmark scripts, FedCollab's coalitions and the
notebooks. One round of the loop is

    sample participants -> round -> (every ``eval_every`` rounds) evaluate every client -> log -> hooks

and the hooks of :func:`run` add checkpoints, results files and plots. A run is described by a
:class:`RunSpec`, which reads from and writes to a TOML run file::

    algorithm = "fedavg"
    seeds = [0]
    rounds = 200
    fraction = 0.1
    eval_every = 10
    checkpoint_every = 10
    execution = "auto"

    [config]            # any field of the algorithm's Config; the rest keep their defaults
    lr = 0.01

    [data]
    dataset = "fashion_mnist"
    data_dir = "~/datasets"
    train_per_client = 600
    test_per_client = 600

    [partition]         # pflax.data.federations.PARTITIONS: its name, client count and parameters
    name = "dirichlet"
    clients = 100
    beta = 0.1

    [model]             # cnn (FedPAC's CNN), mlp, or bn_cnn (the FedBN digits CNN, with a width)
    name = "cnn"

Two optional top-level keys restrict or split the federation: ``members = [3, 7, 9]`` trains only those
clients of the partition (renumbered 0, 1, 2), and ``coalitions = [[0, 1], [2, 3, 4]]`` trains each group
as a federation of its own, from the same initial model (FedCollab's collaboration structure, Bao et
al., ICML 2023, Section 4.3); its results folder holds one ``coalition<k>/`` run per group and a
``results.json`` that joins their clients' accuracies. Instead of fixed coalitions, a ``[structure]``
table finds them before training: ``method = "kmeans"`` with ``clusters`` and ``local_epochs`` clusters
the clients' local models (:mod:`pflax.algorithms.fedcollab.kmeans`), and ``method =
"fedcollab_equal_distances"`` with ``distance`` (and ``c``, ``restarts``) runs FedCollab's solver, seeded
with the run's seed, with every distance between two clients equal; the groups found are recorded in
``results.json``.

Every results folder holds ``run.toml``, the *resolved* file (every default filled in, the algorithm's
whole ``Config`` written out), so ``pflax run --config <out>/run.toml`` repeats the run bit for bit.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

__all__ = ["RunSpec", "RunError", "Diverged", "Record", "loop", "run", "run_all", "chosen_seeds", "finished_result",
           "build", "Built", "make_config", "make_model", "plot_weights", "tensorboard_writer", "restrict",
           "machine_info", "MODELS"]

MODELS = {
    "cnn": "FedPAC's CNN (2 conv + 2 dense; the CIFAR variant for 3-channel images)",
    "mlp": "a 2-hidden-layer MLP (200, 200): fast, for tests and smoke runs",
    "bn_cnn": "FedBN's digits CNN with BatchNorm ('width' scales its channels); for FedBN and FedPick",
}
MAX_CHECKPOINTS_KEPT = 3
# Where run(pack=True) keeps the latest checkpoint of an unfinished run as one file.
PACKED_CHECKPOINT = "checkpoint.tar.gz"
# Spec fields that do not change what is computed: a resumed run may change them.
NOT_FINGERPRINTED = ("rounds", "eval_every", "checkpoint_every", "execution", "seeds")


class RunError(ValueError):
    """A run that cannot start: an unknown name, a bad value, data that cannot be loaded.

    >>> isinstance(RunError("unknown partition 'zipf'"), ValueError)
    True
    """


class Diverged(RuntimeError):
    """A round produced NaN/Inf; the state was kept from before that round. ``round_index`` is the number of
    rounds completed before it, so the round that diverged is ``round_index + 1``.

    >>> err = Diverged(4)
    >>> err.round_index, str(err).split(";")[0]
    (4, 'round 5 produced NaN/Inf (diverged)')
    """

    def __init__(self, round_index: int):
        super().__init__(f"round {round_index + 1} produced NaN/Inf (diverged); the state was kept at round "
                         f"{round_index}. Lower the learning rate.")
        self.round_index = round_index


class Stopped(RuntimeError):
    """A run asked to stop (SIGINT or SIGTERM while :func:`run` trained) that stopped after its round in
    progress, with a checkpoint of that round: ``run(..., resume=True)`` continues it.

    >>> err = Stopped(7, 200, signal.SIGTERM, "runs/fedavg")
    >>> err.round_index, err.exit_code
    (7, 143)
    >>> str(err)
    'stopped by SIGTERM after round 7 of 200, with a checkpoint of that round in runs/fedavg; resume to continue'
    """

    def __init__(self, round_index: int, rounds: int, signum: int, out: str | os.PathLike):
        super().__init__(f"stopped by {signal.Signals(signum).name} after round {round_index} of {rounds}, with "
                         f"a checkpoint of that round in {out}; resume to continue")
        self.round_index, self.rounds, self.signum, self.out = round_index, rounds, signum, Path(out)

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by that signal (128 + its number)."""
        return 128 + int(self.signum)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_requests():
    """While inside, SIGINT and SIGTERM ask the work to stop at its next safe point instead of ending the
    process; a second one acts as usual (KeyboardInterrupt, or the process ends); one the process ignores
    stays ignored. Yields the list of signals received so far. Outside the main thread (where Python cannot
    take signals) it only yields an empty list.

    >>> with stop_requests() as received:
    ...     signal.raise_signal(signal.SIGTERM)
    ...     received == [signal.SIGTERM]
    True
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    # A signal the process ignores stays ignored (SIGINT, for one, in a job a shell started with `&`).
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}

    def ask_to_stop(signum, frame):
        if received:  # asked twice: do what the signal did before
            signal.signal(signum, previous[signum] if previous[signum] is not None else signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        received.append(signum)
        print(f"\n{signal.Signals(signum).name}: stopping after the round in progress, with a checkpoint "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    for s in previous:
        signal.signal(s, ask_to_stop)
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


# ----------------------------------------------------------------------------------------- run spec
def _default_sizes(dataset: str) -> dict:
    if dataset == "synthetic":
        return {"clients": 10, "rounds": 15, "train_per_client": 200, "test_per_client": 200}
    if dataset == "digits":
        return {"clients": 5, "rounds": 200, "train_per_client": 1000, "test_per_client": 1000}
    return {"clients": 20, "rounds": 200, "train_per_client": 600, "test_per_client": 600}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything an experiment needs, as a run file holds it (see the module docstring).

    Attributes:
      algorithm: a name of :data:`pflax.algorithms.REGISTRY`.
      rounds: communication rounds (None: 15 on ``synthetic``, else 200).
      fraction: participation fraction per round.
      seeds: one run per seed (the model's initialisation, client sampling, and the partition's draws).
      eval_every: evaluate every client's personalized model every k rounds (and after the last).
      checkpoint_every: checkpoint every k rounds (0: only at the end).
      execution: how rounds map over clients (:class:`pflax.core.execution.Execution`).
      config: fields of the algorithm's ``Config``.
      data: ``dataset``, ``data_dir`` (``~`` and ``${VARIABLE}`` are expanded), ``train_per_client``, ``test_per_client`` (and ``image_size``, the
        side of the ``synthetic`` dataset's images).
      partition: ``name``, ``clients`` and the partition's parameters.
      model: ``name`` and its parameters (``width`` for ``bn_cnn``, ``hidden`` for ``mlp``).
      members: train only these clients of the partition, renumbered from 0 (None: all of them).
      coalitions: groups of the partition's clients, each trained as a federation of its own from the
        same initial model; every client in exactly one group (None: one federation).
      structure: find the coalitions before training instead: ``{"method": "kmeans", "clusters": k,
        "local_epochs": E}`` or ``{"method": "fedcollab_equal_distances", "distance": d, "c": C,
        "restarts": R}`` (:data:`STRUCTURES`); None: no search.

    >>> spec = RunSpec.from_toml('algorithm = "ditto"\\n[config]\\nprox_mu = 0.5\\n').resolved()
    >>> spec.rounds, spec.partition["clients"], spec.config["prox_mu"], spec.model["name"]
    (15, 10, 0.5, 'cnn')
    """

    algorithm: str = "fedpac"
    rounds: Optional[int] = None
    fraction: float = 1.0
    seeds: tuple = (0,)
    eval_every: int = 10
    checkpoint_every: int = 10
    execution: str = "auto"
    config: dict = dataclasses.field(default_factory=dict)
    data: dict = dataclasses.field(default_factory=dict)
    partition: dict = dataclasses.field(default_factory=dict)
    model: dict = dataclasses.field(default_factory=dict)
    members: Optional[tuple] = None
    coalitions: Optional[tuple] = None
    structure: Optional[dict] = None

    # -- reading and writing
    @classmethod
    def from_dict(cls, table: dict) -> "RunSpec":
        """A spec from a parsed run file; unknown top-level keys are refused.

        Args:
          table: the run file as a dict (``tomllib.loads``'s result).

        Returns:
          The :class:`RunSpec` (not yet resolved).

        >>> RunSpec.from_dict({"algorithm": "fedavg", "seed": 3}).seeds
        (3,)
        """
        table = copy.deepcopy(table)
        if "seed" in table:  # a single seed may be written as `seed = k`
            if "seeds" in table:
                raise RunError("give either seed or seeds, not both")
            table["seeds"] = [table.pop("seed")]
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(table) - names)
        if unknown:
            raise RunError(f"unknown run-file key(s) {', '.join(unknown)}; allowed: seed, {', '.join(sorted(names))}")
        for name in ("config", "data", "partition", "model", "structure"):
            if not isinstance(table.get(name, {}), dict):
                raise RunError(f"[{name}] must be a table")
        seeds = table.get("seeds", (0,))
        if isinstance(seeds, int) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            raise RunError(f"seeds must be a non-empty list of integers, got {seeds!r}")
        table["seeds"] = tuple(seeds)
        if table.get("members") is not None:
            table["members"] = _client_list(table["members"], "members")
        if table.get("coalitions") is not None:
            groups = table["coalitions"]
            if not isinstance(groups, (list, tuple)) or not groups:
                raise RunError(f"coalitions must be a non-empty list of lists of client indices, got {groups!r}")
            table["coalitions"] = tuple(_client_list(g, "each coalition") for g in groups)
        return cls(**table)

    @classmethod
    def from_toml(cls, text: str) -> "RunSpec":
        """A spec from run-file text (TOML).

        Args:
          text: the file's content.

        Returns:
          The :class:`RunSpec`; TOML syntax errors raise :class:`RunError` with the line.

        >>> RunSpec.from_toml('rounds = 3').rounds
        3
        """
        try:
            return cls.from_dict(tomllib.loads(text))
        except tomllib.TOMLDecodeError as err:
            raise RunError(f"run file is not valid TOML: {err}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "RunSpec":
        """A spec from a run file.

        Args:
          path: the ``.toml`` file.

        Returns:
          The :class:`RunSpec`.

        >>> RunSpec.from_file("/no/such/run.toml")
        Traceback (most recent call last):
          ...
        pflax.experiment.RunError: run file '/no/such/run.toml' does not exist
        """
        path = Path(path)
        if not path.is_file():
            raise RunError(f"run file {str(path)!r} does not exist")
        try:
            return cls.from_toml(path.read_text())
        except RunError as err:
            raise RunError(f"{path}: {err}") from None

    def to_dict(self) -> dict:
        """The spec as plain data (lists, not tuples; no ``None``, which TOML cannot hold).

        Returns:
          A dict that :meth:`from_dict` reads back.

        >>> RunSpec(rounds=2).to_dict()["seeds"]
        [0]
        """
        return _plain(dataclasses.asdict(self))

    def to_toml(self) -> str:
        """The run file's text.

        Returns:
          TOML that :meth:`from_toml` reads back to an equal spec.

        >>> spec = RunSpec(rounds=2, config={"lr": 0.1})
        >>> RunSpec.from_toml(spec.to_toml()) == spec
        True
        """
        import tomli_w

        return tomli_w.dumps(self.to_dict())

    # -- defaults
    def resolved(self) -> "RunSpec":
        """Every default filled in: sizes from the dataset, the model for the algorithm's backbone, and
        the algorithm's whole ``Config`` (unknown or ill-typed fields raise :class:`RunError`).

        Returns:
          A new spec; resolving it again changes nothing.

        >>> RunSpec(algorithm="fedavg").resolved().config["local_epochs"]
        5
        """
        from .algorithms import REGISTRY
        from .data.federations import PARTITIONS

        if self.algorithm not in REGISTRY:
            raise RunError(f"unknown algorithm {self.algorithm!r}; `pflax list` shows them")
        algorithm = REGISTRY[self.algorithm]
        data = {"dataset": "synthetic", **self.data}
        unknown = sorted(set(data) - {"dataset", "data_dir", "train_per_client", "test_per_client", "image_size"})
        if unknown:
            raise RunError(f"unknown [data] key(s) {', '.join(unknown)}; allowed: dataset, data_dir, "
                           "train_per_client, test_per_client, image_size (synthetic only)")
        sizes = _default_sizes(data["dataset"])
        for name in ("train_per_client", "test_per_client"):
            data.setdefault(name, sizes[name])
        partition = {"name": "domains" if data["dataset"] == "digits" else "fedpac", **self.partition}
        if partition["name"] not in PARTITIONS:
            raise RunError(f"unknown partition {partition['name']!r}; choose from {', '.join(PARTITIONS)}")
        partition.setdefault("clients", sizes["clients"])
        params = {k: v for k, v in partition.items() if k not in ("name", "clients")}
        defaults = PARTITIONS[partition["name"]].params
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise RunError(f"partition {partition['name']!r} has no parameter {', '.join(unknown)} "
                           f"(it takes: {', '.join(defaults) or 'none'})")
        partition = {"name": partition["name"], "clients": partition["clients"], **defaults, **params}
        model = {"name": "bn_cnn" if algorithm.backbone == "bn" else "cnn", **self.model}
        if model["name"] not in MODELS:
            raise RunError(f"unknown model {model['name']!r}; choose from {', '.join(MODELS)}")
        if model["name"] == "bn_cnn":
            model.setdefault("width", 1.0)
        if (model["name"] == "bn_cnn") != (algorithm.backbone == "bn"):
            need = "bn_cnn (BatchNorm)" if algorithm.backbone == "bn" else "cnn or mlp"
            raise RunError(f"{self.algorithm} needs model {need}, not {model['name']!r}")
        config = _plain(_config_fields(make_config(self.algorithm, self.config, self.execution)))
        structure = None if self.structure is None else _structure_parameters(self.structure)
        return dataclasses.replace(
            self, rounds=sizes["rounds"] if self.rounds is None else self.rounds, config=config, data=data,
            partition=partition, model=model, structure=structure)

    def check(self) -> None:
        """Refuse values no run can use (:class:`RunError`, naming the field).

        >>> RunSpec(fraction=0).check()
        Traceback (most recent call last):
          ...
        pflax.experiment.RunError: fraction must be in (0, 1], got 0
        """
        from .core.execution import Execution

        for name in ("rounds", "eval_every"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise RunError(f"{name} must be >= 1, got {value}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise RunError(f"checkpoint_every must be >= 0 (0: only at the end), got {self.checkpoint_every}")
        if not 0.0 < self.fraction <= 1.0:
            raise RunError(f"fraction must be in (0, 1], got {self.fraction}")
        try:
            Execution(self.execution)
        except ValueError as err:
            raise RunError(f"execution: {err}") from None
        clients = self.partition.get("clients")
        if clients is not None and (not isinstance(clients, int) or clients < 1):
            raise RunError(f"clients must be >= 1, got {clients}")
        for name in ("train_per_client", "test_per_client"):
            value = self.data.get(name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise RunError(f"{name} must be >= 1, got {value}")
        s = self.partition.get("s")
        if s is not None and not 0.0 <= s <= 1.0:
            raise RunError(f"s must be in [0, 1], got {s}")
        if self.members is not None and self.coalitions is not None:
            raise RunError("give either members or coalitions, not both")
        if self.structure is not None:
            if self.members is not None or self.coalitions is not None:
                raise RunError("give either [structure] or members/coalitions, not both")
            _structure_parameters(self.structure)
        groups = [self.members] if self.members is not None else list(self.coalitions or ())
        listed = [c for group in groups for c in group]
        if len(set(listed)) != len(listed):
            raise RunError("a client is listed twice in " + ("members" if self.members is not None else "coalitions"))
        if listed and clients is not None:
            if max(listed) >= clients:
                raise RunError(f"client {max(listed)} does not exist: the partition has {clients} clients")
            if self.coalitions is not None and len(listed) != clients:
                missing = sorted(set(range(clients)) - set(listed))
                raise RunError(f"coalitions must place every client; missing: {missing}")
        k = (self.structure or {}).get("clusters")
        if isinstance(k, int) and clients is not None and k > clients:
            raise RunError(f"[structure] clusters = {k} is more than the partition's {clients} clients")

    def fingerprint(self, seed: int) -> dict:
        """What a resumed run must share with the checkpoint it resumes (everything that changes the
        computation; ``rounds``, evaluation, checkpoint and execution settings may differ)."""
        out = {k: v for k, v in self.to_dict().items() if k not in NOT_FINGERPRINTED}
        out["data"] = {k: v for k, v in out["data"].items() if k != "data_dir"}
        out["seed"] = seed
        return out


# The searches a run file's [structure] table can name, with their parameters' defaults (None: the run
# file must give it). ``kmeans`` clusters the clients' local models; ``fedcollab_equal_distances`` is
# FedCollab's solver when every off-diagonal distance is ``distance`` (its Table 3 "ignore distances"
# ablation), seeded with the run's seed as the official code seeds it, so each seed breaks the ties its own way.
STRUCTURES = {"kmeans": {"clusters": 3, "local_epochs": 1},
              "fedcollab_equal_distances": {"distance": None, "c": 10.0, "restarts": 100}}
# Parameters that are real numbers >= 0; every other one is a count, an integer >= 1.
_REAL_STRUCTURE_PARAMETERS = {"distance", "c"}


def _structure_parameters(table: dict) -> dict:
    """A ``[structure]`` table checked and completed with its method's defaults."""
    method = table.get("method")
    if method not in STRUCTURES:
        raise RunError(f"[structure] method must be one of {', '.join(STRUCTURES)}, got {method!r}")
    defaults = STRUCTURES[method]
    unknown = sorted(set(table) - {"method"} - set(defaults))
    if unknown:
        raise RunError(f"[structure] {method} has no parameter {', '.join(unknown)} (it takes: {', '.join(defaults)})")
    params = {**defaults, **{k: v for k, v in table.items() if k != "method"}}
    for name, value in params.items():
        if value is None:
            raise RunError(f"[structure] {method} needs {name}")
        if name in _REAL_STRUCTURE_PARAMETERS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
                raise RunError(f"[structure] {name} must be a finite number >= 0, got {value!r}")
            params[name] = float(value)
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RunError(f"[structure] {name} must be an integer >= 1, got {value!r}")
    return {"method": method, **params}


def _client_list(value, what: str) -> tuple:
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)):
        raise RunError(f"{what} must be a non-empty list of client indices (integers >= 0), got {value!r}")
    return tuple(value)


def _plain(value):
    """Tuples to lists, dataclasses to dicts, ``None`` entries dropped: what TOML and JSON hold."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _config_fields(config) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "execution"}


def _coerce_field(name: str, default, value):
    """``value`` (from TOML or ``--set``) as the type of the field's default."""
    if dataclasses.is_dataclass(default):
        if isinstance(value, dict):
            fields = {f.name: getattr(default, f.name) for f in dataclasses.fields(default)}
            unknown = sorted(set(value) - set(fields))
            if unknown:
                raise RunError(f"{name}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(fields)}")
            return dataclasses.replace(default, **{k: _coerce_field(f"{name}.{k}", fields[k], v)
                                                   for k, v in value.items()})
        raise RunError(f"{name} must be a table of {', '.join(f.name for f in dataclasses.fields(default))}")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise RunError(f"{name} must be true or false, got {value!r}")
        return value
    if isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return tuple(_coerce_field(name, None, v) for v in value)
    if default is None or isinstance(default, (str, tuple)) and isinstance(value, str):
        return value
    if isinstance(default, tuple) and isinstance(value, tuple):
        return value
    raise RunError(f"{name} must be a {type(default).__name__}, got {value!r}")


def make_config(algorithm: str | type, fields: dict, execution: str = "auto"):
    """The algorithm's ``Config`` from run-file values: unknown fields and wrong types are refused by name.

    Args:
      algorithm: a registry name, or a ``Config`` class itself (a rule outside the registry, such as
        :class:`pflax.algorithms.leafwise.Config`).
      fields: ``Config`` field -> value (TOML types; lists become tuples, tables nested dataclasses).
      execution: the :class:`pflax.core.execution.Execution` strategy name.

    Returns:
      ``REGISTRY[algorithm].Config(...)`` (or ``algorithm(...)``).

    >>> make_config("fedprox", {"prox_mu": 0.1}).prox_mu
    0.1
    >>> make_config("fedprox", {"mu": 0.1})
    Traceback (most recent call last):
      ...
    pflax.experiment.RunError: fedprox has no config field 'mu'; its fields: alternating, averaged, ...
    >>> from pflax.algorithms import leafwise
    >>> make_config(leafwise.Config, {"sharing": {"parts": ["body"], "bn": True}}).sharing
    Sharing(parts=('body',), bn=True)
    """
    from .algorithms import REGISTRY
    from .core.execution import Execution

    if isinstance(algorithm, type):
        config_cls, algorithm = algorithm, f"{algorithm.__module__.rsplit('.', 1)[-1]}.{algorithm.__name__}"
    else:
        config_cls = REGISTRY[algorithm].Config
    defaults = config_cls()
    names = {f.name for f in dataclasses.fields(config_cls)} - {"execution"}
    values = {}
    for name, value in fields.items():
        if name not in names:
            raise RunError(f"{algorithm} has no config field {name!r}; its fields: {', '.join(sorted(names))}")
        values[name] = _coerce_field(name, getattr(defaults, name), value)
    try:
        return config_cls(**values, execution=Execution(execution))
    except (TypeError, ValueError) as err:
        raise RunError(str(err)) from None


def make_model(spec: dict, sample_shape: tuple, num_classes: int):
    """The model a run file's ``[model]`` table names.

    Args:
      spec: ``{"name": "cnn" | "mlp" | "bn_cnn", ...}`` (``width`` for ``bn_cnn``, ``hidden`` for ``mlp``).
      sample_shape: one sample's shape ``(H, W, C)``.
      num_classes: the output size.

    Returns:
      A :class:`pflax.models.SplitModel` or :class:`pflax.models.bn.BNModel`.

    >>> type(make_model({"name": "mlp", "hidden": [16]}, (8, 8, 1), 10)).__name__
    'SplitModel'
    """
    from .models import fedpac_cnn, mlp

    name = spec["name"]
    params = {k: v for k, v in spec.items() if k != "name"}
    allowed = {"cnn": set(), "mlp": {"hidden"}, "bn_cnn": {"width"}}[name]
    if set(params) - allowed:
        raise RunError(f"model {name!r} takes {', '.join(sorted(allowed)) or 'no parameters'}, "
                       f"got {', '.join(sorted(set(params) - allowed))}")
    if name == "mlp":
        return mlp(num_classes, **({"hidden": tuple(params["hidden"])} if "hidden" in params else {}))
    if name == "bn_cnn":
        from .models.bn import digits_cnn

        side = sample_shape[0]
        if side % 4:
            raise RunError(f"bn_cnn needs a side that is a multiple of 4, the images are {side} x {side}")
        return digits_cnn(num_classes, width=float(params.get("width", 1.0)), image_size=side)
    return fedpac_cnn("cifar10" if sample_shape[-1] == 3 else "fmnist", num_classes)


# ------------------------------------------------------------------------------------- the loop
@dataclasses.dataclass
class Record:
    """What a run has produced so far; plain data, so it travels in checkpoints and results files.

    Attributes:
      history: one row per round: ``round``, ``participants``, ``seconds`` (sampling and the round, not
        the evaluation, which is ``eval_seconds``), the participants' mean of
        every per-client metric, ``accuracy`` (mean personalized test accuracy over all clients, %)
        on evaluation rounds, and ``refused_nonfinite`` on a round whose NaN/Inf update was refused.
      evaluations: ``{"round", "accuracy": [per client, 0..1]}`` at every evaluation.
      resumed_at: rounds at which the run was resumed.
      sessions: ``{"from_round", "version", "backend", "devices", ...}`` for every process that trained the
        run, in order: a run resumed on another machine (a GPU's checkpoint finished on a CPU, say) names both.
      last_round: the last round's matrix-shaped metrics (e.g. FedPAC's combination weights) and its
        participants' ids.

    >>> Record().rounds_done
    0
    """

    history: list = dataclasses.field(default_factory=list)
    evaluations: list = dataclasses.field(default_factory=list)
    resumed_at: list = dataclasses.field(default_factory=list)
    last_round: dict = dataclasses.field(default_factory=dict)
    sessions: list = dataclasses.field(default_factory=list)

    @property
    def rounds_done(self) -> int:
        return len(self.history)

    @property
    def round_times(self) -> list:
        return [row["seconds"] for row in self.history]


def _row_metrics(metrics: dict) -> tuple[dict, dict]:
    """Per-round scalars (participants' means) and the matrix-shaped metrics kept for plots."""
    scalars, matrices = {}, {}
    for name, value in metrics.items():
        if name in ("client_ids", "nonfinite"):
            continue
        value = np.asarray(value)
        if not np.issubdtype(value.dtype, np.number):
            continue
        if value.ndim <= 1:
            scalars[name] = float(np.mean(value)) if value.size else float("nan")
        else:
            matrices[name] = value.tolist()
    if matrices:
        matrices["client_ids"] = np.asarray(metrics["client_ids"]).tolist()
    return scalars, matrices


def loop(algorithm, state, train, test, rounds: int, *, fraction: float = 1.0, eval_every: int = 0,
         record: Record | None = None, after_round: Callable | None = None, progress: bool | str = False,
         on_nonfinite: str = "raise"):
    """Train ``rounds`` rounds: sample, round, evaluate every ``eval_every`` rounds and after the last.

    Args:
      algorithm: a registry entry (:class:`pflax.core.federated.Algorithm`) or its module.
      state: the algorithm's state; training continues from ``record.rounds_done``.
      train, test: the federation's splits (:class:`pflax.data.ClientData`, all clients).
      rounds: the round to stop after (counting the rounds ``record`` already holds).
      fraction: participation fraction; all clients take part at 1.0.
      eval_every: evaluate every k rounds and after the last (0: only after the last).
      record: the :class:`Record` to continue (a resumed run's); a new one by default.
      after_round: ``after_round(state, record, evaluated)``, called after every round (checkpoints,
        results files).
      progress: show a progress bar (a string is its label).
      on_nonfinite: ``"raise"`` (:class:`Diverged`) or ``"continue"`` when a round produces NaN/Inf
        (the round's update is refused either way).

    Returns:
      ``(state, record)``.

    >>> import jax
    >>> from pflax import fedavg
    >>> from pflax.data import toy_federation
    >>> from pflax.models import mlp
    >>> train, test = toy_federation()
    >>> state = fedavg.init(jax.random.PRNGKey(0), mlp(10, hidden=(8,)), train.x[0], 2, fedavg.Config(local_epochs=1))
    >>> state, record = loop(fedavg, state, train, test, rounds=2, eval_every=1)
    >>> [e["round"] for e in record.evaluations], {"round", "loss", "accuracy", "seconds"} <= set(record.history[-1])
    ([1, 2], True)
    """
    import jax

    from .core.federated import sample_clients

    algorithm = getattr(algorithm, "ALGORITHM", algorithm)
    if on_nonfinite not in ("raise", "continue"):
        raise ValueError(f"on_nonfinite must be 'raise' or 'continue', got {on_nonfinite!r}")
    record = Record() if record is None else record
    bar = None
    if progress and rounds > record.rounds_done:
        from tqdm.auto import tqdm

        label = progress if isinstance(progress, str) else algorithm.name
        bar = tqdm(total=rounds, initial=record.rounds_done, desc=label, unit="round", file=sys.stderr)
    try:
        for r in range(record.rounds_done, rounds):
            t0 = time.time()
            ids = sample_clients(state, fraction)
            batch = train if len(ids) == train.num_clients else train.take(ids)
            state, metrics = algorithm.round(state, batch)
            metrics = jax.device_get(metrics)
            refused = bool(np.any(metrics.get("nonfinite", False)))
            if refused and on_nonfinite == "raise":
                raise Diverged(r)
            scalars, matrices = _row_metrics(metrics)
            row = {"round": r + 1, "participants": int(len(ids)), **scalars}
            if refused:
                row["refused_nonfinite"] = True
            row["seconds"] = time.time() - t0
            evaluated = (eval_every and (r + 1) % eval_every == 0) or r + 1 == rounds
            if evaluated:
                _evaluate_into(record, row, algorithm, state, test, train)
            record.history.append(row)
            if matrices:
                record.last_round = matrices
            if after_round is not None:
                after_round(state, record, bool(evaluated))
            if bar is not None:
                shown = {k: f"{row[k]:.3g}" for k in ("loss", "accuracy") if k in row}
                bar.set_postfix(**shown, s=f"{row['seconds']:.1f}")
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return state, record


def _evaluate_into(record: "Record", row: dict, algorithm, state, test, train) -> None:
    """Evaluate every client after round ``row["round"]``: the mean and its time go into ``row`` (a line of
    ``rounds.csv``), the per-client accuracies into ``record.evaluations``."""
    import jax

    t0 = time.time()
    accuracy = np.asarray(jax.device_get(algorithm.evaluate(state, test, train)["accuracy"]))
    row["accuracy"] = float(accuracy.mean() * 100)
    row["eval_seconds"] = time.time() - t0
    record.evaluations.append({"round": row["round"], "accuracy": accuracy.tolist()})


# ------------------------------------------------------------------------------ files and plots
def _atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file and a rename, so a killed run never leaves half a file."""
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
    if out.is_dir():
        for leftover in out.glob(".*.*"):
            if leftover.is_file() and leftover.name.split(".")[1] in ("results", "rounds", "accuracy", "weights", "run"):
                leftover.unlink()


def _png(fig) -> bytes:
    from .figures import png_bytes

    fig.tight_layout()
    return png_bytes(fig, dpi=120)


def _plot_accuracy(record: Record, title: str) -> bytes:
    """Mean personalized accuracy over rounds, beside the last evaluation's per-client histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curve, spread) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    rounds = [e["round"] for e in record.evaluations]
    curve.plot(rounds, [100 * np.mean(e["accuracy"]) for e in record.evaluations], marker=".")
    curve.set_xlabel("round")
    curve.set_ylabel("mean personalized test accuracy (%)")
    curve.set_title(title)
    curve.grid(alpha=0.3)
    last = 100 * np.asarray(record.evaluations[-1]["accuracy"])
    spread.hist(last, bins=min(20, max(5, last.size // 2)), color="tab:green", alpha=0.8)
    spread.set_xlabel(f"client accuracy at round {rounds[-1]} (%)")
    spread.set_ylabel("clients")
    spread.grid(alpha=0.3)
    return _png(fig)


def plot_weights(weights: np.ndarray, client_ids: np.ndarray, num_groups: int, title: str) -> bytes:
    """A heatmap of combination weights, clients ordered by group (``id mod num_groups``), as FedPAC's Fig. 2-3.

    Args:
      weights: ``[m, m]`` combination weights, row ``i`` for target client ``i``.
      client_ids: ``[m]`` the clients' ids.
      num_groups: the number of client groups.
      title: the figure title.

    Returns:
      The PNG file's bytes.

    >>> plot_weights(np.eye(2), np.array([0, 1]), 2, "demo")[:4]
    b'\\x89PNG'
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = sorted(range(len(client_ids)), key=lambda j: (client_ids[j] % max(num_groups, 1), client_ids[j]))
    w = np.asarray(weights)[np.ix_(order, order)]
    labels = [str(int(client_ids[j])) for j in order]
    fig, ax = plt.subplots(figsize=(6.2, 5.2))
    im = ax.imshow(w, cmap="viridis", vmin=0.0)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=90)
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("source client j (ordered by group)")
    ax.set_ylabel("target client i")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _png(fig)


# -------------------------------------------------------------------------------------- run
def _data_dir(text: str | None) -> str | None:
    """A run file's ``data_dir`` with ``~`` and ``${VARIABLE}`` expanded (an unset variable is an error)."""
    if text is None:
        return None
    expanded = os.path.expanduser(os.path.expandvars(text))
    if "$" in expanded:
        raise RunError(f"data_dir {text!r} names an environment variable that is not set")
    return expanded


def machine_info() -> dict:
    """The JAX install and the device this process computes on, as a results file records them (the ``jax``
    entry, and each of its ``sessions`` beside the round it started from).

    Returns:
      ``{"version", "backend", "devices", "device_kind", "default_matmul_precision"}``: JAX's version, its
      default backend (``cpu``, ``gpu``, ``tpu``), every device's name, the first device's kind (the chip)
      and the configured matmul precision (``None``: XLA's default).

    >>> info = machine_info()
    >>> sorted(info)
    ['backend', 'default_matmul_precision', 'device_kind', 'devices', 'version']
    >>> info["backend"] in ("cpu", "gpu", "tpu") and len(info["devices"]) >= 1
    True
    """
    import jax

    # device_kind names the chip (an H100, say), which str(device) does not; the matmul precision matters on GPUs,
    # where XLA's default lets float32 convolutions and products run in TF32.
    return {"version": jax.__version__, "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
            "device_kind": jax.devices()[0].device_kind,
            "default_matmul_precision": jax.config.jax_default_matmul_precision}


def _earlier_session(results: Path) -> list[dict]:
    """The first session of a run whose checkpoint predates ``Record.sessions``, read from the ``jax`` entry of
    its results file (``[]`` when there is none)."""
    try:
        jax_info = json.loads(results.read_text()).get("jax")
    except (OSError, ValueError):
        return []
    return [{"from_round": 0, **jax_info}] if isinstance(jax_info, dict) else []


def tensorboard_writer(logdir: str | os.PathLike):
    """An ``after_round`` hook for :func:`loop` that writes every round's metrics (``round/<name>``), the
    mean personalized accuracy (``eval/accuracy``) and the per-client accuracy histogram
    (``eval/client_accuracy``) as TensorBoard event files, with tensorboardX.

    Args:
      logdir: the folder for the event files (``tensorboard --logdir`` it).

    Returns:
      ``(hook, close)``: the hook, and a function that flushes and closes the writer.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     hook, close = tensorboard_writer(d)
    ...     hook(None, Record(history=[{"round": 1, "loss": 0.5, "seconds": 0.1}]), False)
    ...     close()
    ...     len(list(Path(d).glob("events.out.tfevents.*")))
    1
    """
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(logdir))

    def hook(state, record: Record, evaluated: bool) -> None:
        row = record.history[-1]
        step = row["round"]
        for name, value in row.items():
            if name != "round" and isinstance(value, (int, float)):
                writer.add_scalar(f"round/{name}", float(value), step)
        if evaluated and record.evaluations:
            accuracy = 100 * np.asarray(record.evaluations[-1]["accuracy"], np.float64)
            writer.add_scalar("eval/accuracy", float(accuracy.mean()), step)
            writer.add_histogram("eval/client_accuracy", accuracy, step, bins=np.linspace(0, 100, 21))

    def close() -> None:
        writer.flush()
        writer.close()

    return hook, close


def run(spec: RunSpec, out: str | os.PathLike, *, resume: bool = False, progress: bool = True, plots: bool = True,
        command: str | None = None, logdir: str | os.PathLike | None = None, pack: bool = False) -> dict:
    """Run one seed of a run file end to end: data, model, training, evaluation, checkpoints and results.

    Writes into ``out``: ``run.toml`` (the resolved spec), ``results.json``, ``rounds.csv``,
    ``accuracy.png`` (and ``weights.png`` for FedPAC's combination weights), and ``checkpoints/``
    every ``checkpoint_every`` rounds and at the end. Results files are rewritten at every
    evaluation, atomically, so an interrupted run leaves complete files for what it finished.

    Args:
      spec: the run (its ``seeds`` must hold exactly one seed; :func:`run_all` runs several).
      out: the results folder.
      resume: continue from the latest checkpoint in ``out`` (bit-identical to an uninterrupted run;
        refused when the checkpoint's run differs in anything that changes the computation).
        Without it, a fresh run replaces old checkpoints in ``out``.
      progress: show a progress bar.
      plots: write the PNG plots.
      command: the command line that started the run, recorded in ``results.json``.
      logdir: also write TensorBoard event files there (:func:`tensorboard_writer`).
      pack: while the run is unfinished, also keep its latest checkpoint as one file,
        ``out/checkpoint.tar.gz`` (:func:`pflax.checkpoint.pack`), removed when the run finishes. A copy
        of ``out`` without ``checkpoints/`` (e.g. a commit of the results) then resumes on another
        machine: with ``resume=True`` and no checkpoint in ``checkpoints/``, the packed step is unpacked.

    Returns:
      The content of ``results.json``.

    Raises:
      Stopped: SIGINT or SIGTERM arrived while it trained (:func:`stop_requests`): the run finished the
        round in progress, checkpointed it (and packed it, with ``pack``) and stopped. A second signal
        acts at once, as without this.
      Diverged: a round produced NaN/Inf. ``results.json`` then says so (``status`` ``"diverged (...)"``
        and ``diverged_at_round``, the round that diverged) beside the evaluations made before it, and the
        packed checkpoint is removed: resuming would only diverge again.

    >>> import tempfile
    >>> spec = RunSpec("fedavg", rounds=1, config={"local_epochs": 1}, data={"train_per_client": 20,
    ...                "test_per_client": 20}, partition={"clients": 2}, model={"name": "mlp", "hidden": [8]})
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = run(spec, d, progress=False, plots=False)
    >>> result["status"], result["rounds_completed"], len(result["final_per_client"])
    ('finished', 1, 2)
    """
    from . import checkpoint
    from .data import DataError
    from .data.partition import dominant_groups
    from .metrics import summarize

    spec.check()
    spec = spec.resolved()
    spec.check()
    if len(spec.seeds) != 1:
        raise RunError(f"run() takes one seed, got {list(spec.seeds)}; run_all() runs each")
    options = dict(resume=resume, progress=progress, plots=plots, command=command, logdir=logdir)
    if spec.structure is not None:
        found = find_structure(spec)
        groups = tuple(tuple(g) for g in found["coalitions"])
        return _run_coalitions(dataclasses.replace(spec, structure=None, coalitions=groups), out,
                               structure=found, written=spec, **options)
    if spec.coalitions is not None:
        return _run_coalitions(spec, out, **options)
    seed = spec.seeds[0]
    t_start = time.time()
    algorithm, dataset, num_classes, train, test, model, config, state = build(spec)
    try:
        algorithm.check_inputs(state, train, test)
    except DataError as err:
        raise RunError(str(err)) from None

    out = Path(out)
    _remove_stale_temp_files(out)
    checkpoints = out / "checkpoints"
    fingerprint = spec.fingerprint(seed)
    record = Record()
    packed = out / PACKED_CHECKPOINT
    if resume and packed.exists() and checkpoint.latest_step(checkpoints) is None:
        try:
            checkpoint.unpack(packed, checkpoints)
        except checkpoint.CheckpointError as err:
            raise RunError(f"cannot resume: {err}") from None
    if resume:
        try:
            restored = checkpoint.restore(checkpoints, state, run=fingerprint)
        except checkpoint.CheckpointError as err:
            raise RunError(f"cannot resume: {err}") from None
        if restored.step > spec.rounds:
            raise RunError(f"cannot resume: the checkpoint is at round {restored.step}, past rounds = {spec.rounds}")
        state = restored.state
        record = Record(**{k: restored.extra[k] for k in ("history", "evaluations", "resumed_at", "last_round")})
        record.resumed_at.append(restored.step)
        # Checkpoints written before sessions were recorded: the results file beside them names the machine.
        record.sessions = list(restored.extra.get("sessions") or _earlier_session(out / "results.json"))
        record.sessions.append({"from_round": restored.step, **machine_info()})
    else:
        if checkpoints.exists():
            import shutil

            shutil.rmtree(checkpoints)
        packed.unlink(missing_ok=True)  # a fresh run's history must not be resumed from an older one's
        record.sessions.append({"from_round": 0, **machine_info()})
    _atomic_write(out / "run.toml", spec.to_toml().encode())
    try:
        groups = len(dominant_groups(num_classes)) if spec.partition["name"] in ("fedpac", "concept_shift") else 1
    except ValueError:
        groups = 1

    def write_results(done: bool, diverged_at: int | None = None) -> dict:
        final = record.evaluations[-1]["accuracy"]
        times = record.round_times
        steady = times[1:] if len(times) > 1 else times
        status = ("finished" if done else f"running ({record.rounds_done}/{spec.rounds} rounds)" if diverged_at is None
                  else f"diverged (round {diverged_at} of {spec.rounds} produced NaN/Inf)")
        result = {
            "algorithm": spec.algorithm,
            "dataset": dataset,
            "status": status,
            **({} if diverged_at is None else {"diverged_at_round": diverged_at}),
            "evaluated_model": f"each client's personalized model as pflax.{spec.algorithm}.evaluate defines it"
            + (" (personalised on its training split at evaluation time)"
               if getattr(config, "needs_train", algorithm.needs_train) else "")
            + f", after round {record.evaluations[-1]['round']}, on its own test split",
            "command": command,
            "run": spec.to_dict(),
            "seed": seed,
            "config": _plain(_config_fields(config)),
            "jax": machine_info(),
            "rounds_completed": record.rounds_done,
            "resumed_at_rounds": record.resumed_at,
            "sessions": record.sessions,
            "final_accuracy": summarize(np.asarray(final), np.asarray(test.sizes)),
            "final_per_client": final,
            "test_sizes": np.asarray(test.sizes).tolist(),
            "history": record.history,
            "personalized_history": record.evaluations,
            "last_round": record.last_round,
            "timing": {"first_round_s_incl_compile": times[0], "mean_round_s_after_first": float(np.mean(steady)),
                       "median_round_s_after_first": float(np.median(steady)),
                       # Rounds and evaluations of every session, so that a resumed run reports its whole cost
                       # (the wall time of this process alone would count only the rounds since the resume).
                       "total_s": float(sum(times) + sum(row.get("eval_seconds", 0.0) for row in record.history)),
                       "this_session_s": time.time() - t_start},
        }
        _atomic_write(out / "results.json", json.dumps(result, indent=1).encode())
        buf = io.StringIO()
        fields = list(dict.fromkeys(k for row in record.history for k in row))
        writer = csv.DictWriter(buf, fieldnames=fields)
        writer.writeheader()
        writer.writerows(record.history)
        _atomic_write(out / "rounds.csv", buf.getvalue().encode())
        if plots:
            title = f"{spec.algorithm} on {dataset}, {train.num_clients} clients"
            _atomic_write(out / "accuracy.png", _plot_accuracy(record, title))
            if "combination_weights" in record.last_round:
                last = record.last_round
                _atomic_write(out / "weights.png", plot_weights(
                    np.asarray(last["combination_weights"]), np.asarray(last["client_ids"]), groups,
                    f"{spec.algorithm} combination weights, round {record.rounds_done}"))
        return result

    received: list[int] = []  # stop signals (stop_requests), while the loop trains
    stopping: list[int] = []  # the one acted on: decided once per round, so that its round is checkpointed

    def after_round(state, record: Record, evaluated: bool) -> None:
        r = record.rounds_done
        if evaluated:
            write_results(done=r == spec.rounds)
        if received and r < spec.rounds:
            stopping.append(received[0])
        if stopping or r == spec.rounds or (spec.checkpoint_every and r % spec.checkpoint_every == 0):
            checkpoint.save(checkpoints, state, run=fingerprint, max_to_keep=MAX_CHECKPOINTS_KEPT,
                            extra=dataclasses.asdict(record))
            if pack and r < spec.rounds:
                checkpoint.pack(checkpoints, packed)
        if r == spec.rounds:
            packed.unlink(missing_ok=True)

    def stop_if_asked(state, record: Record, evaluated: bool) -> None:  # the last hook: the others saw the round
        if stopping:
            raise Stopped(record.rounds_done, spec.rounds, stopping[0], out)

    latest = [state]  # the state after the last round that completed, for a run that diverges after it

    def keep_latest(state, record: Record, evaluated: bool) -> None:
        latest[0] = state

    hooks, close = [keep_latest, after_round], None
    if logdir is not None:
        tensorboard, close = tensorboard_writer(logdir)
        hooks.append(tensorboard)
    hooks.append(stop_if_asked)
    try:
        if record.rounds_done == spec.rounds and record.evaluations:  # a finished run, resumed: rewrite its files
            result = write_results(done=True)
        else:
            label = f"{spec.algorithm} {dataset}" + (f" seed {seed}" if seed else "")
            with stop_requests() as asked:
                received = asked  # the list the signal handler fills, read by after_round
                try:
                    loop(algorithm, state, train, test, spec.rounds, fraction=spec.fraction,
                         eval_every=spec.eval_every, record=record,
                         after_round=lambda *a: [hook(*a) for hook in hooks], progress=label if progress else False)
                except Diverged as err:
                    # The state kept (the last finite one) is evaluated, so the file's number is after the
                    # rounds it says were completed; the file says where the run ended.
                    if record.rounds_done and (not record.evaluations
                                               or record.evaluations[-1]["round"] < record.rounds_done):
                        _evaluate_into(record, record.history[-1], algorithm, latest[0], test, train)
                    if record.evaluations:
                        write_results(done=False, diverged_at=err.round_index + 1)
                    packed.unlink(missing_ok=True)
                    raise
            result = json.loads((out / "results.json").read_text())
    finally:
        if close is not None:
            close()
    return result


class Built(NamedTuple):
    """What a one-seed run starts from (:func:`build`).

    >>> built = build(RunSpec("fedavg", config={"local_epochs": 1}, data={"train_per_client": 20,
    ...                       "test_per_client": 20}, partition={"clients": 2}, model={"name": "mlp", "hidden": [8]}))
    >>> built.dataset, built.num_classes, built.train.num_clients
    ('synthetic', 10, 2)
    """
    algorithm: Any  # the registry module (pflax.algorithms.REGISTRY[spec.algorithm])
    dataset: str
    num_classes: int
    train: Any  # pflax.data.ClientData
    test: Any
    model: Any  # the flax module
    config: Any  # the algorithm's Config
    state: Any  # its state after init, before round 1


def build(spec: RunSpec) -> Built:
    """The algorithm, data, model, Config and initial state of a one-seed run, as :func:`run` starts it.

    A script that evaluates a run's checkpoint (``benchmarks/evaluate_variant.py``) restores it into this
    state, which has the checkpoint's structure.

    Args:
      spec: a run with one seed and no coalitions (resolved here).

    Returns:
      A :class:`Built`.

    >>> spec = RunSpec("fedavg", config={"local_epochs": 1}, data={"train_per_client": 20,
    ...                "test_per_client": 20}, partition={"clients": 3}, model={"name": "mlp", "hidden": [8]})
    >>> built = build(spec)
    >>> built.train.num_clients, built.config.local_epochs, int(built.state.round)
    (3, 1, 0)
    """
    import jax

    from .algorithms import REGISTRY

    spec = spec.resolved()
    if len(spec.seeds) != 1 or spec.coalitions is not None or spec.structure is not None:
        raise RunError("build() takes a run with one seed and no coalitions or structure")
    algorithm = REGISTRY[spec.algorithm]
    dataset, num_classes, train, test = _load_data(spec)
    if spec.members is not None:
        train, test = restrict(train, spec.members), restrict(test, spec.members)
    model = make_model(spec.model, tuple(train.x.shape[2:]), num_classes)
    config = make_config(spec.algorithm, spec.config, spec.execution)
    state = algorithm.init(jax.random.PRNGKey(spec.seeds[0]), model, train.x[0], train.num_clients, config)
    return Built(algorithm, dataset, num_classes, train, test, model, config, state)


def _load_data(spec: RunSpec) -> tuple:
    """``(dataset name, number of classes, train, test)`` of a resolved one-seed spec's partition."""
    from .data import DataError
    from .data.federations import load_federation

    data = spec.data
    partition = {k: v for k, v in spec.partition.items() if k not in ("name", "clients")}
    try:
        return load_federation(data["dataset"], spec.partition["name"], spec.partition["clients"],
                               data["train_per_client"], data["test_per_client"], spec.seeds[0],
                               _data_dir(data.get("data_dir")), data.get("image_size"), **partition)
    except (DataError, FileNotFoundError) as err:
        raise RunError(str(err)) from None


def find_structure(spec: RunSpec) -> dict:
    """The coalitions a spec's ``[structure]`` finds, before any federated training.

    Args:
      spec: a one-seed spec with ``structure`` (resolved here if it is not yet).

    Returns:
      The search's record (:func:`pflax.algorithms.fedcollab.kmeans.structure` for ``kmeans``; for
      ``fedcollab_equal_distances`` the solver's ``assignment``, its ``objective`` and the client ``sizes``
      it weighed), with ``coalitions``, the groups of the partition's clients.

    >>> spec = RunSpec("fedavg", config={"lr": 0.1}, data={"train_per_client": 20, "test_per_client": 20},
    ...                partition={"clients": 4}, model={"name": "mlp", "hidden": [8]},
    ...                structure={"method": "kmeans", "clusters": 2})
    >>> sorted(sum(find_structure(spec)["coalitions"], []))
    [0, 1, 2, 3]
    """
    import jax

    from .algorithms.fedcollab import kmeans

    spec.check()
    spec = spec.resolved()
    seed = spec.seeds[0]
    _, num_classes, train, _ = _load_data(spec)
    params = spec.structure
    if params["method"] == "fedcollab_equal_distances":
        from .algorithms.fedcollab.solver import solve

        sizes = np.asarray(train.sizes, np.float64)
        n = len(sizes)
        dist = np.where(np.eye(n, dtype=bool), 0.0, params["distance"])
        found = solve(dist, sizes, params["c"], seed=seed, restarts=params["restarts"])
        return {"method": params["method"], "assignment": found["assignment"].tolist(),
                "coalitions": found["coalitions"], "objective": found["objective"], "sizes": sizes.tolist()}
    model = make_model(spec.model, tuple(train.x.shape[2:]), num_classes)
    return kmeans.structure(jax.random.PRNGKey(seed), model, train, spec.config, params["clusters"],
                            params["local_epochs"], seed)


def restrict(data, members) -> Any:
    """The federation of ``members`` alone: their rows, renumbered 0..k-1, padded only to the largest of them.

    Args:
      data: a :class:`pflax.data.ClientData`.
      members: row positions of the clients to keep.

    Returns:
      A :class:`pflax.data.ClientData` of ``len(members)`` clients.

    >>> from pflax.data import toy_federation
    >>> train, _ = toy_federation(num_clients=3)
    >>> small = restrict(train, [2, 0])
    >>> small.client_ids.tolist(), small.sizes.tolist() == [int(train.sizes[2]), int(train.sizes[0])]
    ([0, 1], True)
    """
    import jax.numpy as jnp

    sub = data.take(list(members))
    mask = np.asarray(sub.mask)
    # Keep every slot up to the last real sample of any member (samples need not come first).
    width = max(int(np.flatnonzero(mask.any(axis=0)).max(initial=-1)) + 1, 1)
    return sub.replace(x=sub.x[:, :width], y=sub.y[:, :width], mask=sub.mask[:, :width],
                       client_ids=jnp.arange(len(members), dtype=jnp.int32))


def _resumable(resume: bool, out: Path) -> bool:
    """Whether one part of a multi-part run (a seed, a coalition) resumes: when asked to and it has
    checkpoints; a part not reached yet starts afresh."""
    return resume and ((out / "checkpoints").exists() or (out / PACKED_CHECKPOINT).exists())


def _run_coalitions(spec: RunSpec, out: str | os.PathLike, structure: Optional[dict] = None,
                    written: Optional[RunSpec] = None, **options: Any) -> dict:
    """:func:`run` of a spec with ``coalitions``: one run per coalition into ``out/coalition<k>/`` (each
    resumed from its own checkpoints; when resuming, one already finished is kept as it is), then
    ``out/results.json`` with every client's accuracy. With a ``structure`` search's record, ``written``
    (the spec with its ``[structure]``) is the run file kept."""
    from .metrics import summarize

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = written or spec
    _atomic_write(out / "run.toml", written.to_toml().encode())
    t_start = time.time()
    resume = options.pop("resume")
    parts = []
    for k, members in enumerate(spec.coalitions):
        sub_out = out / f"coalition{k}"
        sub = dataclasses.replace(spec, coalitions=None, members=tuple(members))
        # A resumed run keeps a coalition that already finished (its checkpoints may be gone, as in a
        # fresh clone): training it again would cost its rounds and could replace its committed results.
        done = finished_result(sub, sub_out) if resume else None
        parts.append(done if done is not None
                     else run(sub, sub_out, resume=_resumable(resume, sub_out), **options))
    # Every client's accuracy and test size, in the partition's client order.
    per_client, test_sizes = np.zeros(spec.partition["clients"]), np.zeros(spec.partition["clients"])
    for members, part in zip(spec.coalitions, parts):
        per_client[list(members)] = part["final_per_client"]
        test_sizes[list(members)] = part["test_sizes"]
    done = all(part["status"] == "finished" for part in parts)
    result = {
        "algorithm": spec.algorithm,
        "dataset": parts[0]["dataset"],
        "status": "finished" if done else "running (a coalition is not finished)",
        "evaluated_model": f"each client's personalized model as pflax.{spec.algorithm}.evaluate defines it, "
                           "trained inside its own coalition, after the coalition's last evaluated round, "
                           "on its own test split",
        "command": options.get("command"),
        "run": written.to_dict(),
        "seed": spec.seeds[0],
        "coalitions": [list(m) for m in spec.coalitions],
        **({"structure": structure} if structure is not None else {}),
        "rounds_completed": min(part["rounds_completed"] for part in parts),
        "final_accuracy": summarize(per_client, test_sizes),
        "final_per_client": per_client.tolist(),
        "test_sizes": test_sizes.astype(int).tolist(),
        "per_coalition": [{"members": list(m), "folder": f"coalition{k}", "status": part["status"],
                           "rounds_completed": part["rounds_completed"], "final_accuracy": part["final_accuracy"]}
                          for k, (m, part) in enumerate(zip(spec.coalitions, parts))],
        # A round of the whole federation is one round in every coalition, run one after the other.
        "timing": {"mean_round_s_after_first": sum(part["timing"]["mean_round_s_after_first"] for part in parts),
                   "total_s": sum(part["timing"]["total_s"] for part in parts),  # every session's, as a single run's
                   "this_session_s": time.time() - t_start},
    }
    _atomic_write(out / "results.json", json.dumps(result, indent=1).encode())
    return result


def finished_result(spec: RunSpec, out: str | os.PathLike, *, or_diverged: bool = False) -> Optional[dict]:
    """The results in ``out`` when they are a finished run of ``spec`` (one seed), else None.

    A run counts as this one when its ``results.json`` says finished and its recorded run has the same
    fingerprint (:meth:`RunSpec.fingerprint`: everything that changes the computation) and the same number
    of rounds. Results written before run files recorded their run are never taken for it.

    Args:
      spec: the run, with one seed.
      out: its results folder.
      or_diverged: also take a run of ``spec`` that diverged (:class:`Diverged`), which training again
        would only repeat.

    Returns:
      The content of ``out/results.json``, or None.

    >>> import tempfile
    >>> spec = RunSpec("fedavg", rounds=1, config={"local_epochs": 1}, data={"train_per_client": 20,
    ...                "test_per_client": 20}, partition={"clients": 2}, model={"name": "mlp", "hidden": [8]})
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = run(spec, d, progress=False, plots=False)
    ...     same = finished_result(spec, d) is not None
    ...     longer = finished_result(dataclasses.replace(spec, rounds=2), d) is not None
    >>> same, longer
    (True, False)
    """
    path = Path(out) / "results.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    ended = result.get("status") == "finished" or (or_diverged and "diverged_at_round" in result)
    if not ended or not isinstance(result.get("run"), dict):
        return None
    try:
        recorded = RunSpec.from_dict(result["run"]).resolved()
    except RunError:
        return None
    seed = spec.seeds[0]
    wanted = spec.resolved()
    if recorded.rounds != wanted.rounds or recorded.fingerprint(seed) != wanted.fingerprint(seed):
        return None
    return result


def chosen_seeds(spec: RunSpec, seeds: Optional[Sequence[int]] = None) -> tuple:
    """The seeds of ``spec`` to run: all of them, or those of ``seeds``, in the run file's order.

    Args:
      spec: the run.
      seeds: some of ``spec.seeds``, or None for all.

    Returns:
      A tuple of seeds.

    >>> chosen_seeds(RunSpec(seeds=(0, 1, 2)), [2, 0])
    (0, 2)
    >>> chosen_seeds(RunSpec(seeds=(0, 1, 2)), [9])
    Traceback (most recent call last):
      ...
    pflax.experiment.RunError: seeds [9] are not among the run file's seeds [0, 1, 2]
    """
    if seeds is None:
        return tuple(spec.seeds)
    unknown = sorted(set(seeds) - set(spec.seeds))
    if unknown:
        raise RunError(f"seeds {unknown} are not among the run file's seeds {list(spec.seeds)}")
    return tuple(s for s in spec.seeds if s in seeds)


def run_all(spec: RunSpec, out: str | os.PathLike, *, skip_finished: bool = False,
            seeds: Optional[Sequence[int]] = None, **options: Any) -> list[dict]:
    """Every seed of a run file: one seed into ``out``, several into ``out/seed<k>/``.

    Args:
      spec: the run.
      out: the results folder.
      skip_finished: leave a seed whose folder already holds its finished run, or its run that diverged
        (:func:`finished_result`), as it is, and return those results, instead of training it again (its
        checkpoints may be gone).
      seeds: run only these of the run file's seeds (:func:`chosen_seeds`), each into the folder it has in
        the whole run, so that seeds shared between machines land where one machine would put them.
      **options: :func:`run`'s keyword options. With ``resume=True`` and several seeds, the seeds that
        have checkpoints continue from them and the others start afresh.

    Returns:
      One ``results.json`` content per seed run.

    >>> run_all(RunSpec(seeds=(0, 1), fraction=2.0), "/tmp/never")
    Traceback (most recent call last):
      ...
    pflax.experiment.RunError: fraction must be in (0, 1], got 2.0
    """
    spec.check()
    chosen = chosen_seeds(spec, seeds)
    if len(spec.seeds) == 1:
        done = finished_result(spec, out, or_diverged=True) if skip_finished else None
        return [done if done is not None else run(spec, out, **options)]
    logdir = options.pop("logdir", None)
    resume = options.pop("resume", False)
    results = []
    for s in chosen:
        seed_out = Path(out) / f"seed{s}"
        one = dataclasses.replace(spec, seeds=(s,))
        done = finished_result(one, seed_out, or_diverged=True) if skip_finished else None
        results.append(done if done is not None else
                       run(one, seed_out, resume=_resumable(resume, seed_out),
                           logdir=None if logdir is None else Path(logdir) / f"seed{s}", **options))
    return results
