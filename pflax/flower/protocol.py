"""The deployed round, without Flower: what the server and each client compute, and what they exchange.

A pflax round is three pure pieces (:class:`pflax.core.federated.RoundPieces`). In one process,
:func:`pflax.core.federated.run_round` composes them over stacked client data. Deployed, the same three
functions run on different machines, and this module says who runs what:

* the server (:class:`Coordinator`) holds the state less the clients' rows, samples the participants
  with :func:`pflax.core.federated.sample_clients`, runs ``broadcast`` and ``server_update``;
* each client (:class:`ClientRuntime`) holds its own data (one row of a
  :class:`pflax.data.ClientData`) and its own persistent row of ``state.clients``, and runs
  ``local_update`` on them.

A round is two exchanges (two-phase, so that no client changes its row for a round the server refused):

1. ``train``: the server sends each participant the broadcast ``message``, its row of ``personal``, its
   PRNG key (:func:`pflax.core.federated.participant_keys`) and its averaging weight; the participant
   runs ``local_update`` and replies with its upload (the ``"mean"`` tree unweighted, the ``"sum"`` tree,
   the other keys ``server_update`` reads) and whether its new row is finite; it keeps the new row aside;
2. ``commit``: the server runs ``server_update`` and the non-finite guard, then tells each participant to
   keep or drop its new row (or sends the row ``server_update`` computed for it, as FedPAC's combined
   heads).

Before the first round each client registers once: its client id and its data mask (sizes only, so the
server can compute the round's weights ``pieces.weights`` on a stand-in batch); never its data.

What the server needs is found by tracing the pieces (:class:`Plan`), for every algorithm alike:

* the ``"mean"`` upload is reduced on the server as in :func:`pflax.core.federated.run_round` (weights
  normalised over the participants that replied, each term ``w_i * x_i``);
* ``server_update`` gets a stand-in batch: the participants' ids and masks, zeros in place of ``x`` and
  ``y``; an algorithm whose ``weights`` or ``server_update`` reads ``x`` or ``y`` is refused;
* where ``server_update`` reads ``state.clients`` (FedPAC keeps the head of a participant without data,
  CFL and FeSEM read cluster assignments), the participants send their current rows with the upload
  and the server sees exactly those rows;
* where ``broadcast`` reads ``state.clients`` (FedFomo sends each participant other clients' models),
  the server must hold every client's row, as that algorithm's server does by design: the rows are
  mirrored on the server (``Plan.mirror``) and the clients upload their new rows.

Participants that do not reply (a machine down, a time-out) leave the round: it completes with the
others, as :func:`pflax.core.federated.run_round` over the participants that replied (the weights are
normalised over them). The server state changes only when ``server_update`` completes and the result is
finite, so a failure never leaves a half-updated state.

Rows are versioned by the state's round counter: a client's row at version ``t`` is its row after ``t``
rounds. A client keeps its last few versions and trains on the newest at or below the round the server
names, so a server restarted from an older checkpoint resumes consistently with rows committed after it.

Example: a two-client FedAvg round, the server and clients in one process.

>>> import jax
>>> from pflax.data import toy_federation
>>> train, _ = toy_federation(num_clients=2)
>>> spec = AppSpec("fedavg", model_args={"num_classes": 10, "hidden": [4]}, config={"local_epochs": 1})
>>> clients = {i: ClientRuntime(spec, row(train, i)) for i in range(2)}
>>> server = Coordinator.from_hellos(spec, [c.hello() for c in clients.values()])
>>> opened = server.open_round(available=clients)
>>> replies = {i: clients[i].train(opened.payloads[i]) for i in opened.client_ids}
>>> commits, metrics = server.close_round(opened, replies)
>>> for i, commit in commits.items():
...     clients[i].commit(commit)
>>> int(server.state.round), metrics["client_ids"].tolist()
(1, [0, 1])
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Var

from ..core import aggregate, federated
from ..core.federated import State
from ..data.clients import ClientData
from . import codec

__all__ = ["AppSpec", "Plan", "Coordinator", "ClientRuntime", "OpenRound", "RowStore", "MemoryRowStore",
           "DirectoryRowStore", "DeploymentError", "row", "reads"]

PyTree = Any
_RESERVED = ("client", "mean", "sum")


class DeploymentError(RuntimeError):
    """An algorithm cannot run deployed as asked, or the federation is inconsistent (clients disagree
    on shapes, no participant replied).

    >>> issubclass(DeploymentError, RuntimeError)
    True
    """


# --------------------------------------------------------------------------- the run's specification


def _tuples(value):
    """JSON lists as tuples (frozen configs and flax modules take tuples)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _as_dict(value) -> dict:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        return json.loads(value)
    return dict(value)


@dataclasses.dataclass(frozen=True)
class AppSpec:
    """Everything the server and the clients must agree on, as plain values (a Flower run config).

    Attributes:
      algorithm: a :data:`pflax.REGISTRY` name.
      model: ``"module:function"`` building the model; ``model_args`` its keyword arguments (lists
        become tuples).
      config: fields of the algorithm's ``Config`` that differ from the default (lists become tuples;
        ``execution`` as a dict of :class:`pflax.Execution` fields).
      rounds: total rounds of the run (a resumed run continues up to it).
      fraction: the participation fraction of :func:`pflax.core.federated.sample_clients`.
      seed: the run's PRNG seed (``jax.random.PRNGKey(seed)`` is ``init``'s key).
      num_clients: the federation's size ``N``; 0: as the clients report it (``num-partitions``), else
        the number of clients that registered.
      checkpoint_dir: where the server checkpoints its state every round (empty: no checkpoints).
      min_clients: clients that must have registered before the first round (0: ``num_clients``).
      round_timeout: seconds the server waits for the replies of one exchange.
      connect_timeout: seconds the server waits for ``min_clients`` clients to connect.
      data_dir: where a client finds ``client_<id>.npz`` when its node config names no ``data`` file.

    >>> spec = AppSpec("fedpac", config={"body_epochs": 1}, rounds=3)
    >>> AppSpec.from_run_config(spec.run_config()) == spec
    True
    """

    algorithm: str = "fedavg"
    model: str = "pflax.models:mlp"
    model_args: Mapping = dataclasses.field(default_factory=lambda: {"num_classes": 10})
    config: Mapping = dataclasses.field(default_factory=dict)
    rounds: int = 3
    fraction: float = 1.0
    seed: int = 0
    num_clients: int = 0
    checkpoint_dir: str = ""
    min_clients: int = 0
    round_timeout: float = 600.0
    connect_timeout: float = 120.0
    data_dir: str = ""

    def __post_init__(self):
        object.__setattr__(self, "model_args", _as_dict(self.model_args))
        object.__setattr__(self, "config", _as_dict(self.config))

    def __hash__(self):
        return hash(json.dumps(self.run_config(), sort_keys=True))

    def run_config(self) -> dict:
        """The spec as a Flower run config: hyphenated keys, scalar values (dicts as JSON strings).

        Returns:
          ``{key: str | int | float}``.

        >>> AppSpec(rounds=2).run_config()["rounds"]
        2
        """
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name.replace("_", "-")] = json.dumps(value, sort_keys=True) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_run_config(cls, run_config: Mapping, base: "AppSpec | None" = None) -> "AppSpec":
        """The spec from a Flower run config; keys it does not name keep ``base``'s values.

        Args:
          run_config: ``{key: value}`` with hyphenated (or underscored) keys; unknown keys are ignored.
          base: the defaults (``AppSpec()`` when ``None``).

        Returns:
          the :class:`AppSpec`.

        >>> AppSpec.from_run_config({"algorithm": "ditto", "rounds": 5}).rounds
        5
        """
        base = cls() if base is None else base
        values = {}
        for f in dataclasses.fields(cls):
            for key in (f.name.replace("_", "-"), f.name):
                if key in run_config:
                    value = run_config[key]
                    default = getattr(base, f.name)
                    if isinstance(default, Mapping):
                        value = _as_dict(value)
                    elif isinstance(default, bool):
                        value = bool(value)
                    elif isinstance(default, (int, float)) and not isinstance(default, bool):
                        value = type(default)(value)
                    values[f.name] = value
                    break
        return dataclasses.replace(base, **values)

    def entry(self) -> federated.Algorithm:
        """The registry entry of :attr:`algorithm`.

        >>> AppSpec("fedpac").entry().name
        'fedpac'
        """
        from .. import REGISTRY

        if self.algorithm not in REGISTRY:
            raise DeploymentError(f"unknown algorithm {self.algorithm!r}; known: {', '.join(sorted(REGISTRY))}")
        return REGISTRY[self.algorithm]

    def build_model(self):
        """The model: ``model`` imported and called with ``model_args``.

        >>> AppSpec(model_args={"num_classes": 10, "hidden": [4]}).build_model().name
        'mlp'
        """
        module, _, attr = self.model.partition(":")
        fn = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
        return fn(**_tuples(dict(self.model_args)))

    def build_config(self):
        """The algorithm's ``Config`` with :attr:`config`'s fields.

        >>> AppSpec("fedpac", config={"body_epochs": 2}).build_config().body_epochs
        2
        """
        from ..core.execution import Execution

        fields = _tuples(dict(self.config))
        if isinstance(fields.get("execution"), Mapping):
            fields["execution"] = Execution(**fields["execution"])
        return self.entry().Config(**fields)


def row(data: ClientData, i: int) -> dict:
    """Row ``i`` of a :class:`pflax.data.ClientData` as one client holds it: ``x``, ``y``, ``mask`` (padded
    to the federation's ``n_max``) and its ``client_id``.

    Args:
      data: the federation's data (client axis first).
      i: the row.

    Returns:
      ``{"x", "y", "mask": NumPy arrays, "client_id": int}``.

    >>> from pflax.data import toy_federation
    >>> r = row(toy_federation(num_clients=3)[0], 2)
    >>> r["x"].shape, r["client_id"]
    ((40, 8, 8, 1), 2)
    """
    return {"x": np.asarray(data.x[i]), "y": np.asarray(data.y[i]), "mask": np.asarray(data.mask[i]),
            "client_id": int(data.client_ids[i])}


# --------------------------------------------------------------------------- what the pieces read


def reads(fn: Callable, *args) -> list[list[bool]]:
    """Which leaves of each argument ``fn`` uses, found by tracing it (``jax.make_jaxpr``).

    A leaf counts as used when any operation of the traced program takes it as an input or returns it
    (conservative: a value read and then discarded counts).

    Args:
      fn: a traceable function.
      *args: its arguments (arrays or ``jax.ShapeDtypeStruct``).

    Returns:
      one list of booleans per argument, over its leaves in tree order.

    >>> import jax.numpy as jnp
    >>> reads(lambda a, b: a["x"] * 2, {"x": jnp.ones(2), "y": jnp.ones(2)}, jnp.ones(3))
    [[True, False], [False]]
    """
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    used = set()
    for eqn in jaxpr.eqns:
        used.update(v for v in eqn.invars if isinstance(v, Var))
    used.update(v for v in jaxpr.outvars if isinstance(v, Var))
    flags = [v in used for v in jaxpr.invars]
    out, start = [], 0
    for a in args:
        n = len(jax.tree.leaves(a))
        out.append(flags[start:start + n])
        start += n
    return out


def _drop_axis(tree) -> PyTree:
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), tree)


def _add_axis(tree, m: int) -> PyTree:
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct((m,) + tuple(s.shape), s.dtype), tree)


def _zeros(spec) -> PyTree:
    def one(s):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(jnp.zeros(s.shape + (2,), jnp.uint32), impl=getattr(s.dtype, "_impl", None))
        return jnp.zeros(s.shape, s.dtype)

    return jax.tree.map(one, spec)


def _any(flags: Iterable[bool]) -> bool:
    return any(flags)


class Plan:
    """What one algorithm's deployed round exchanges, derived on both sides from the same inputs: the
    :class:`AppSpec`, the federation size and one client's data shapes. Nothing about a tree's structure
    travels: both sides build the same templates here.

    Attributes:
      spec, entry, model, config, pieces, num_clients: the run.
      data: ``{"x", "y", "mask"}`` shapes and dtypes of one client's (padded) row.
      state: the abstract initial state (``jax.eval_shape`` of ``init``).
      row: one client's row of ``state.clients`` (abstract).
      message, personal, key: the broadcast message, one participant's row of ``personal`` and of the
        keys (abstract).
      upload: one participant's upload (abstract).
      sent: the upload keys a participant sends (``"mean"``, ``"sum"`` and the keys ``server_update``
        reads; ``"client"`` only where the server reads it or mirrors rows).
      rows_read: ``server_update`` reads ``state.clients``: participants send their current rows.
      mirror: ``broadcast`` reads ``state.clients``: the server keeps every client's row.
      server_rows: ``server_update`` returns the participants' new rows (else they are the uploads'
        ``"client"`` rows, kept by the clients).
      weight_read: ``local_update`` reads its averaging weight.

    >>> plan = Plan(AppSpec("fedpac", config={"body_epochs": 1}), 3, {"x": ((40, 8, 8, 1), "float32"),
    ...             "y": ((40,), "int32"), "mask": ((40,), "bool")})
    >>> plan.rows_read, plan.mirror, plan.server_rows, "mean" in plan.sent
    (True, False, True, True)
    """

    def __init__(self, spec: AppSpec, num_clients: int, data: Mapping):
        self.spec = spec
        self.entry = spec.entry()
        self.model = spec.build_model()
        self.config = spec.build_config()
        self.pieces = self.entry.pieces(self.model, self.config)
        self.num_clients = int(num_clients)
        self.data = {k: jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype)) for k, (shape, dtype) in data.items()}
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        self.state = jax.eval_shape(self._init, key)
        self.row = _drop_axis(self.state.clients)
        m = 2  # any participant count: the traces below are per participant or shape-polymorphic in m
        ids = jax.ShapeDtypeStruct((m,), jnp.int32)
        message, personal = jax.eval_shape(self.pieces.broadcast, self.state, ids)
        self.message, self.personal = message, _drop_axis(personal)
        self.key = _drop_axis(jax.eval_shape(federated.participant_keys, self.state, ids))
        self.upload = jax.eval_shape(self.pieces.local_update, self.message, self.participant_spec())
        self.weight_read = _any(reads(self.pieces.local_update, self.message, self.participant_spec())[1][
            self._participant_leaf_index("weight")])

        batch = self._batch_spec(m)
        if _any(reads(self.pieces.broadcast, self.state, ids)[0][self._clients_slice()]):
            self.mirror = True
        else:
            self.mirror = False
        weights_read = reads(self.pieces.weights, self.state, batch)
        uploads = _add_axis({k: v for k, v in self.upload.items() if k not in ("mean", "sum")}, m)
        reduced = {"weights": jax.ShapeDtypeStruct((m,), jnp.float32)}
        for name in ("mean", "sum"):
            if name in self.upload:
                reduced[name] = self.upload[name]
        server_read = reads(self.pieces.server_update, self.state, batch, uploads, reduced)
        data_read = [a or b for a, b in zip(weights_read[1], server_read[1])]
        names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(batch)[0]]
        touched = [n for n, r in zip(names, data_read) if r and ("x" in n or "y" in n) and "mask" not in n]
        if touched:
            raise DeploymentError(f"{self.entry.name}: the server's pieces read the clients' data ({touched}); "
                                  "it cannot run deployed")
        self.rows_read = not self.mirror and _any(
            server_read[0][self._clients_slice()] + weights_read[0][self._clients_slice()])
        sent = [k for k in ("mean", "sum") if k in self.upload]
        flat = jax.tree_util.tree_flatten_with_path(uploads)[0]
        for key_name in uploads:
            flags = [r for (path, _), r in zip(flat, server_read[2]) if path[0].key == key_name]
            if _any(flags) or (key_name == "client" and self.mirror):
                sent.append(key_name)
        self.sent = tuple(sent)
        out = jax.eval_shape(self.pieces.server_update, self.state, batch, uploads, reduced)
        self.server_rows = out[1] is not None
        self.test_in_client = False

    # -- templates

    def _init(self, key):
        sample = jnp.zeros(self.data["x"].shape, self.data["x"].dtype)
        return self.entry.init(key, self.model, sample, self.num_clients, self.config)

    def init(self, seed: int) -> State:
        """The initial state, as ``entry.init(PRNGKey(seed), model, zeros like one client's x, N, config)``.

        Args:
          seed: the run's seed.

        Returns:
          the full round-0 :class:`pflax.core.federated.State` (clients' rows included).

        >>> plan = Plan(AppSpec(), 2, {"x": ((4, 8, 8, 1), "float32"), "y": ((4,), "int32"), "mask": ((4,), "bool")})
        >>> int(plan.init(0).round)
        0
        """
        return self._init(jax.random.PRNGKey(seed))

    def participant_spec(self) -> dict:
        """The abstract ``participant`` argument of ``local_update`` (one client, as a client builds it).

        >>> plan = Plan(AppSpec(), 2, {"x": ((4, 8, 8, 1), "float32"), "y": ((4,), "int32"), "mask": ((4,), "bool")})
        >>> sorted(plan.participant_spec())
        ['client', 'key', 'mask', 'personal', 'weight', 'x', 'y']
        """
        return {**self.data, "client": self.row, "key": self.key, "weight": jax.ShapeDtypeStruct((), jnp.float32),
                "personal": self.personal}

    def _participant_leaf_index(self, name: str) -> slice:
        spec = self.participant_spec()
        flat = jax.tree_util.tree_flatten_with_path(spec)[0]
        idx = [i for i, (path, _) in enumerate(flat) if path[0].key == name]
        return slice(idx[0], idx[-1] + 1) if idx else slice(0, 0)

    def _clients_slice(self) -> slice:
        flat = jax.tree_util.tree_flatten_with_path(self.state)[0]
        idx = [i for i, (path, _) in enumerate(flat) if getattr(path[0], "name", None) == "clients"]
        return slice(idx[0], idx[-1] + 1) if idx else slice(0, 0)

    def _batch_spec(self, m: int) -> ClientData:
        d = self.data
        return ClientData(x=jax.ShapeDtypeStruct((m,) + d["x"].shape, d["x"].dtype),
                          y=jax.ShapeDtypeStruct((m,) + d["y"].shape, d["y"].dtype),
                          mask=jax.ShapeDtypeStruct((m,) + d["mask"].shape, d["mask"].dtype),
                          client_ids=jax.ShapeDtypeStruct((m,), jnp.int32))

    def stand_in_batch(self, ids, masks) -> ClientData:
        """The batch the server's pieces see: the participants' ids and masks, zeros for ``x`` and ``y``
        (they never read them: :class:`Plan` refuses an algorithm whose server reads them).

        Args:
          ids: ``[m]`` the participants; masks: ``[m, n_max]`` their masks.

        Returns:
          a :class:`pflax.data.ClientData`.

        >>> plan = Plan(AppSpec(), 2, {"x": ((4, 8, 8, 1), "float32"), "y": ((4,), "int32"), "mask": ((4,), "bool")})
        >>> plan.stand_in_batch(jnp.array([1]), jnp.ones((1, 4), bool)).x.shape
        (1, 4, 8, 8, 1)
        """
        m = ids.shape[0]
        d = self.data
        return ClientData(x=jnp.zeros((m,) + d["x"].shape, d["x"].dtype), y=jnp.zeros((m,) + d["y"].shape, d["y"].dtype),
                          mask=masks.astype(d["mask"].dtype), client_ids=ids.astype(jnp.int32))


# --------------------------------------------------------------------------- server


class OpenRound(NamedTuple):
    """A round the server opened: the participants it asked, their masks and raw weights, and each
    one's ``train`` payload.

    >>> OpenRound(jnp.arange(2), None, None, {}, 0).round
    0
    """

    client_ids: Any
    masks: Any
    raw_weights: Any
    payloads: dict
    round: int


def _server_state(state: State, mirror: bool) -> State:
    return state if mirror else state.replace(clients={})


class Coordinator:
    """The server's side of the deployed round: it holds the state less the clients' rows (all of them
    where :attr:`Plan.mirror`), and each registered client's id and mask.

    Args:
      spec: the run's :class:`AppSpec`.
      num_clients: the federation's size.
      data: one client's data shapes (see :class:`Plan`).
      masks: ``{client_id: mask [n_max]}`` of the registered clients.
      state: a server state to start from (else round 0 from :meth:`Plan.init`).

    >>> from pflax.data import toy_federation
    >>> train, _ = toy_federation(num_clients=2)
    >>> c = Coordinator.from_hellos(AppSpec(), [ClientRuntime(AppSpec(), row(train, i)).hello() for i in range(2)])
    >>> sorted(c.masks), c.state.clients
    ([0, 1], {})
    """

    def __init__(self, spec: AppSpec, num_clients: int, data: Mapping, masks: Mapping[int, np.ndarray],
                 state: State | None = None):
        self.spec = spec
        self.plan = _plan(spec, num_clients, _freeze(data))
        self.masks = {int(k): np.asarray(v) for k, v in masks.items()}
        self.state = _server_state(self.plan.init(spec.seed) if state is None else state, self.plan.mirror)
        self._open = jax.jit(self._open_fn)
        self._close = jax.jit(self._close_fn)

    @classmethod
    def from_hellos(cls, spec: AppSpec, hellos: Iterable[Mapping], state: State | None = None) -> "Coordinator":
        """A coordinator from the clients' registrations (:meth:`ClientRuntime.hello`).

        Args:
          spec: the run's spec; hellos: the registrations; state: as in the constructor.

        Returns:
          the :class:`Coordinator`.

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> Coordinator.from_hellos(AppSpec(), [ClientRuntime(AppSpec(), row(train, 0)).hello()]).plan.num_clients
        1
        """
        hellos = list(hellos)
        if not hellos:
            raise DeploymentError("no client registered")
        data = _freeze(hellos[0]["data"])
        for h in hellos:
            if _freeze(h["data"]) != data:
                raise DeploymentError(f"client {h['client_id']} holds data of shapes {h['data']}, "
                                      f"client {hellos[0]['client_id']} {dict(data)}: every client must pad alike")
        n = spec.num_clients or max([int(h.get("num_clients") or 0) for h in hellos] + [0]) or len(hellos)
        masks = {int(h["client_id"]): np.asarray(h["mask"]) for h in hellos}
        if max(masks) >= n:
            raise DeploymentError(f"client id {max(masks)} outside the federation of {n} clients")
        return cls(spec, n, data, masks, state)

    def register(self, hello: Mapping) -> None:
        """Add (or update) a client that connected later.

        Args:
          hello: its :meth:`ClientRuntime.hello`.

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> c = Coordinator.from_hellos(AppSpec(num_clients=2), [ClientRuntime(AppSpec(), row(train, 0)).hello()])
        >>> c.register(ClientRuntime(AppSpec(), row(train, 1)).hello()); sorted(c.masks)
        [0, 1]
        """
        if _freeze(hello["data"]) != _freeze({k: (s.shape, s.dtype.name) for k, s in self.plan.data.items()}):
            raise DeploymentError(f"client {hello['client_id']} holds data of shapes {hello['data']}")
        if not 0 <= int(hello["client_id"]) < self.plan.num_clients:
            raise DeploymentError(f"client id {hello['client_id']} outside [0, {self.plan.num_clients})")
        self.masks[int(hello["client_id"])] = np.asarray(hello["mask"])

    # -- the jitted server pieces

    def _full_state(self, state: State, ids, rows) -> State:
        if self.plan.mirror:
            return state
        clients = _zeros(_add_axis(self.plan.row, self.plan.num_clients))
        if rows is not None:
            clients = federated.write_rows(clients, ids, rows)
        return state.replace(clients=clients)

    def _open_fn(self, state, ids, masks):
        full = self._full_state(state, ids, None)
        message, personal = self.plan.pieces.broadcast(full, ids)
        weights = self.plan.pieces.weights(full, self.plan.stand_in_batch(ids, masks))
        return message, personal, federated.participant_keys(full, ids), aggregate.normalized_weights(weights), weights

    def _close_fn(self, state, ids, masks, uploads, old_rows, finite_rows):
        plan = self.plan
        full = self._full_state(state, ids, old_rows)
        batch = plan.stand_in_batch(ids, masks)
        weights = aggregate.normalized_weights(plan.pieces.weights(full, batch))
        reduced = {"weights": weights}
        if "mean" in uploads:
            terms = jax.vmap(aggregate.weighted_term)(uploads["mean"], weights)
            reduced["mean"] = jax.tree.map(lambda t: t.sum(0), terms)
        if "sum" in uploads:
            reduced["sum"] = jax.tree.map(lambda t: t.sum(0), uploads["sum"])
        m = ids.shape[0]
        per_client = {k: v for k, v in plan.upload.items() if k not in ("mean", "sum")}
        stacked = {k: uploads[k] if k in uploads else _zeros(_add_axis(v, m)) for k, v in per_client.items()}
        server, rows, metrics = plan.pieces.server_update(full, batch, stacked, reduced)
        new = state.replace(server=server, round=state.round + 1)
        ok = federated.all_finite(new) & jnp.all(finite_rows)
        if rows is not None:
            ok = ok & federated.all_finite(rows)
        if plan.mirror:
            written = rows if rows is not None else stacked.get("client")
            if written is not None:
                new = new.replace(clients=federated.write_rows(state.clients, ids, written))
        kept = jax.lax.cond(ok, lambda: new, lambda: state)
        return kept, rows, {"client_ids": ids, **metrics, "nonfinite": ~ok}

    # -- the exchanges

    def sample(self) -> np.ndarray:
        """This round's sampled client ids (:func:`pflax.core.federated.sample_clients` on the state).

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> Coordinator.from_hellos(AppSpec(), [ClientRuntime(AppSpec(), row(train, i)).hello() for i in range(2)]).sample()
        array([0, 1], dtype=int32)
        """
        return np.asarray(federated.sample_clients(self.state, self.spec.fraction))

    def open_round(self, available: Iterable[int] | None = None) -> OpenRound:
        """Sample the round's participants and build each one's ``train`` payload.

        Args:
          available: the client ids the server can reach now (default: every registered client);
            sampled clients outside it sit the round out.

        Returns:
          an :class:`OpenRound`; ``payloads[i]`` holds ``round``, ``message``, ``personal``, ``key`` and
          ``weight`` for participant ``i``.

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> c = Coordinator.from_hellos(AppSpec(), [ClientRuntime(AppSpec(), row(train, i)).hello() for i in range(2)])
        >>> opened = c.open_round(available=[1])
        >>> opened.client_ids.tolist(), sorted(opened.payloads[1])
        ([1], ['key', 'message', 'num_clients', 'personal', 'round', 'weight'])
        """
        reachable = set(self.masks) if available is None else set(int(i) for i in available) & set(self.masks)
        ids = np.array([i for i in self.sample() if int(i) in reachable], np.int32)
        if ids.size == 0:
            raise DeploymentError(f"round {int(self.state.round)}: none of the sampled clients "
                                  f"{self.sample().tolist()} is connected")
        masks = np.stack([self.masks[int(i)] for i in ids])
        message, personal, keys, weights, raw = self._open(self.state, jnp.asarray(ids), jnp.asarray(masks))
        payloads = {}
        for j, i in enumerate(ids.tolist()):
            payloads[i] = {"round": int(self.state.round), "num_clients": self.plan.num_clients, "message": message,
                           "personal": jax.tree.map(lambda a: a[j], personal), "key": keys[j], "weight": weights[j]}
        return OpenRound(ids, masks, raw, payloads, int(self.state.round))

    def close_round(self, opened: OpenRound, replies: Mapping[int, Mapping]) -> tuple[dict, dict]:
        """Run ``server_update`` on the replies that came, apply the non-finite guard, and say what each
        participant keeps.

        Args:
          opened: the round from :meth:`open_round`.
          replies: ``{client_id: reply}`` from :meth:`ClientRuntime.train`; participants missing here
            (down, timed out) leave the round, whose weights are normalised over the others.

        Returns:
          ``(commits, metrics)``: ``commits[i]`` for each participant that replied (``{"round",
          "accept"}`` and, where the server computes rows, ``"row"``), and the round's metrics as
          :func:`pflax.core.federated.run_round` reports them.

        Raises:
          DeploymentError: no participant replied (the state is unchanged).

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> clients = [ClientRuntime(AppSpec(), row(train, i)) for i in range(2)]
        >>> c = Coordinator.from_hellos(AppSpec(), [k.hello() for k in clients])
        >>> opened = c.open_round()
        >>> commits, metrics = c.close_round(opened, {0: clients[0].train(opened.payloads[0])})  # client 1 is down
        >>> sorted(commits), metrics["client_ids"].tolist(), int(c.state.round)
        ([0], [0], 1)
        """
        got = [j for j, i in enumerate(opened.client_ids.tolist()) if i in replies]
        if not got:
            raise DeploymentError(f"round {opened.round}: no participant replied; the state is unchanged")
        ids = opened.client_ids[got]
        for i in ids.tolist():
            if replies[i]["round"] != opened.round:
                raise DeploymentError(f"client {i} replied for round {replies[i]['round']}, not {opened.round}")
        uploads = {k: _stack([replies[i]["upload"][k] for i in ids.tolist()]) for k in self.plan.sent}
        old_rows = _stack([replies[i]["row"] for i in ids.tolist()]) if self.plan.rows_read else None
        finite = jnp.asarray([bool(replies[i]["finite"]) for i in ids.tolist()])
        new, rows, metrics = self._close(self.state, jnp.asarray(ids), jnp.asarray(opened.masks[got]), uploads,
                                         old_rows, finite)
        accept = not bool(metrics["nonfinite"])
        self.state = new
        commits = {}
        for j, i in enumerate(ids.tolist()):
            commits[i] = {"round": opened.round, "accept": accept}
            if rows is not None and accept:
                commits[i]["row"] = jax.tree.map(lambda a: a[j], rows)
        return commits, metrics


def _stack(trees: list) -> PyTree:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _freeze(data: Mapping) -> tuple:
    return tuple(sorted((k, (tuple(int(d) for d in shape), str(np.dtype(dtype)))) for k, (shape, dtype) in dict(data).items()))


@functools.lru_cache(maxsize=16)
def _plan(spec: AppSpec, num_clients: int, data: tuple) -> Plan:
    return Plan(spec, num_clients, dict(data))


# --------------------------------------------------------------------------- client


class RowStore:
    """Where a client keeps its persistent row between rounds, by version (the state's round counter
    after which the row holds), and the row a ``train`` left aside until its ``commit``.

    Subclasses implement :meth:`versions`, :meth:`load`, :meth:`save`, :meth:`delete` over
    ``{leaf path: NumPy array}`` dicts; this class keeps the newest ``keep`` versions.

    >>> store = MemoryRowStore()
    >>> store.put(0, {"w": np.zeros(2)}); store.put(3, {"w": np.ones(2)})
    >>> store.at(2)[0], store.at(5)[0], store.at(5)[1]["w"].tolist()
    (0, 3, [1.0, 1.0])
    """

    keep = 3
    PENDING = -1

    def versions(self) -> list[int]:  # pragma: no cover - interface
        """The stored versions (``PENDING`` included when present).

        >>> MemoryRowStore().versions()
        []
        """
        raise NotImplementedError

    def load(self, version: int) -> dict:  # pragma: no cover - interface
        """The arrays of ``version``.

        >>> s = MemoryRowStore(); s.save(1, {"a": np.ones(1)}); s.load(1)["a"].tolist()
        [1.0]
        """
        raise NotImplementedError

    def save(self, version: int, arrays: dict) -> None:  # pragma: no cover - interface
        """Store ``arrays`` as ``version``.

        >>> s = MemoryRowStore(); s.save(1, {"a": np.ones(1)}); s.versions()
        [1]
        """
        raise NotImplementedError

    def delete(self, version: int) -> None:  # pragma: no cover - interface
        """Forget ``version``.

        >>> s = MemoryRowStore(); s.save(1, {}); s.delete(1); s.versions()
        []
        """
        raise NotImplementedError

    def at(self, version: int) -> tuple[int, dict] | None:
        """The newest stored row at or below ``version``: ``(its version, arrays)``, or ``None``.

        >>> MemoryRowStore().at(4) is None
        True
        """
        older = [v for v in self.versions() if 0 <= v <= version]
        return (max(older), self.load(max(older))) if older else None

    def put(self, version: int, arrays: dict) -> None:
        """Store a committed row and forget all but the newest :attr:`keep` versions.

        >>> s = MemoryRowStore()
        >>> for v in range(5): s.put(v, {})
        >>> s.versions()
        [2, 3, 4]
        """
        self.save(version, arrays)
        for v in sorted(v for v in self.versions() if v >= 0)[:-self.keep]:
            self.delete(v)

    def set_pending(self, version: int, arrays: dict | None) -> None:
        """Keep (or, with ``None``, clear) the row a ``train`` produced for version ``version``.

        >>> s = MemoryRowStore(); s.set_pending(1, {"a": np.ones(1)}); s.pending()[0]
        1
        """
        if self.PENDING in self.versions():
            self.delete(self.PENDING)
        if arrays is not None:
            self.save(self.PENDING, {"__version__": np.asarray(version, np.int64), **arrays})

    def pending(self) -> tuple[int, dict] | None:
        """The pending row: ``(version, arrays)`` or ``None``.

        >>> MemoryRowStore().pending() is None
        True
        """
        if self.PENDING not in self.versions():
            return None
        arrays = dict(self.load(self.PENDING))
        return int(arrays.pop("__version__")), arrays


class MemoryRowStore(RowStore):
    """A :class:`RowStore` in a dict (one process; tests and in-process runs).

    >>> MemoryRowStore().versions()
    []
    """

    def __init__(self):
        self._rows: dict[int, dict] = {}

    def versions(self) -> list[int]:
        """See :meth:`RowStore.versions`.

        >>> MemoryRowStore().versions()
        []
        """
        return sorted(self._rows)

    def load(self, version: int) -> dict:
        """See :meth:`RowStore.load`.

        >>> s = MemoryRowStore(); s.save(0, {"a": np.zeros(1)}); s.load(0)["a"].tolist()
        [0.0]
        """
        return dict(self._rows[version])

    def save(self, version: int, arrays: dict) -> None:
        """See :meth:`RowStore.save`.

        >>> s = MemoryRowStore(); s.save(0, {}); s.versions()
        [0]
        """
        self._rows[version] = {k: np.asarray(v) for k, v in arrays.items()}

    def delete(self, version: int) -> None:
        """See :meth:`RowStore.delete`.

        >>> s = MemoryRowStore(); s.save(0, {}); s.delete(0); s.versions()
        []
        """
        self._rows.pop(version, None)


class DirectoryRowStore(RowStore):
    """A :class:`RowStore` in a directory, one ``.npz`` per version (written to a temporary name and
    renamed, read with ``allow_pickle=False``): a client's row survives a restart of its machine or a new
    run of the server.

    Args:
      directory: the client's own directory.

    >>> import tempfile
    >>> s = DirectoryRowStore(tempfile.mkdtemp())
    >>> s.put(2, {"w": np.ones(3)}); s.at(9)[1]["w"].tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, version: int) -> Path:
        return self.directory / ("pending.npz" if version == self.PENDING else f"row-{version:08d}.npz")

    def versions(self) -> list[int]:
        """See :meth:`RowStore.versions`.

        >>> import tempfile; DirectoryRowStore(tempfile.mkdtemp()).versions()
        []
        """
        out = [int(p.stem.split("-")[1]) for p in self.directory.glob("row-*.npz")]
        if self._path(self.PENDING).exists():
            out.append(self.PENDING)
        return sorted(out)

    def load(self, version: int) -> dict:
        """See :meth:`RowStore.load`.

        >>> import tempfile; s = DirectoryRowStore(tempfile.mkdtemp()); s.save(0, {"a": np.ones(1)})
        >>> s.load(0)["a"].tolist()
        [1.0]
        """
        with np.load(self._path(version), allow_pickle=False) as f:
            return {k: f[k] for k in f.files}

    def save(self, version: int, arrays: dict) -> None:
        """See :meth:`RowStore.save`.

        >>> import tempfile; s = DirectoryRowStore(tempfile.mkdtemp()); s.save(4, {}); s.versions()
        [4]
        """
        path = self._path(version)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, path)

    def delete(self, version: int) -> None:
        """See :meth:`RowStore.delete`.

        >>> import tempfile; s = DirectoryRowStore(tempfile.mkdtemp()); s.save(4, {}); s.delete(4); s.versions()
        []
        """
        self._path(version).unlink(missing_ok=True)


class ClientRuntime:
    """One client's side of the deployed round: its data (one row of a :class:`pflax.data.ClientData`) and
    its persistent row of ``state.clients`` (in a :class:`RowStore`, never sent unless the algorithm's
    server reads it).

    Args:
      spec: the run's :class:`AppSpec`.
      data: ``{"x", "y", "mask", "client_id"}`` (see :func:`row`), padded to the federation's ``n_max``.
      store: where the row lives (default: in memory).
      num_clients: the federation's size, when the client knows it (Flower's ``num-partitions``);
        otherwise the server's count is used.

    >>> from pflax.data import toy_federation
    >>> c = ClientRuntime(AppSpec(), row(toy_federation(num_clients=2)[0], 1))
    >>> h = c.hello(); h["client_id"], int(h["mask"].sum())
    (1, 40)
    """

    def __init__(self, spec: AppSpec, data: Mapping, store: RowStore | None = None, num_clients: int = 0):
        self.spec = spec
        self.client_id = int(data["client_id"])
        self.arrays = {k: np.asarray(data[k]) for k in ("x", "y", "mask")}
        self.store = MemoryRowStore() if store is None else store
        self.num_clients = int(num_clients)

    def hello(self) -> dict:
        """The registration: client id, data shapes and mask (sizes only, never the data).

        Returns:
          ``{"client_id", "num_clients", "data": {name: (shape, dtype)}, "mask"}``.

        >>> from pflax.data import toy_federation
        >>> sorted(ClientRuntime(AppSpec(), row(toy_federation()[0], 0)).hello()["data"])
        ['mask', 'x', 'y']
        """
        return {"client_id": self.client_id, "num_clients": self.num_clients, "mask": self.arrays["mask"],
                "data": {k: (tuple(v.shape), v.dtype.name) for k, v in self.arrays.items()}}

    def plan(self, num_clients: int) -> Plan:
        """The run's :class:`Plan` from this client's side.

        >>> from pflax.data import toy_federation
        >>> ClientRuntime(AppSpec(), row(toy_federation()[0], 0)).plan(2).num_clients
        2
        """
        return _plan(self.spec, int(num_clients), _freeze(self.hello()["data"]))

    def _row(self, plan: Plan, version: int) -> PyTree:
        stored = self.store.at(version)
        if stored is None:
            # The initial row: this client's row of init's state (every side initialises alike).
            initial = _initial_row(self.spec, plan.num_clients, _freeze(self.hello()["data"]), self.client_id)
            self.store.put(0, codec.to_arrays(initial))
            return initial
        return codec.from_arrays(stored[1], plan.row, f"client {self.client_id}'s row")

    def train(self, payload: Mapping, num_clients: int | None = None) -> dict:
        """Run ``local_update`` on this client's data and row for a ``train`` payload.

        Args:
          payload: from :meth:`Coordinator.open_round` (``round``, ``message``, ``personal``, ``key``,
            ``weight``; ``num_clients`` when the client does not know it).
          num_clients: the federation's size (default: the payload's, then this client's).

        Returns:
          the reply: ``{"client_id", "round", "upload", "finite"}`` and, where the server reads rows,
          ``"row"``. The new row is kept aside (pending) until :meth:`commit`.

        >>> from pflax.data import toy_federation
        >>> train, _ = toy_federation(num_clients=2)
        >>> clients = [ClientRuntime(AppSpec(), row(train, i)) for i in range(2)]
        >>> opened = Coordinator.from_hellos(AppSpec(), [k.hello() for k in clients]).open_round()
        >>> sorted(clients[0].train(opened.payloads[0])["upload"])
        ['loss', 'mean', 'n']
        """
        n = num_clients or payload.get("num_clients") or self.num_clients
        plan = self.plan(n)
        version = int(payload["round"])
        row_now = self._row(plan, version)
        participant = {**{k: jnp.asarray(v) for k, v in self.arrays.items()}, "client": row_now,
                       "key": payload["key"], "weight": jnp.asarray(payload["weight"], jnp.float32),
                       "personal": payload["personal"]}
        upload = _local_update(plan)(payload["message"], participant)
        new_row = upload.get("client")
        finite = True if new_row is None else bool(federated.all_finite(new_row))
        self.store.set_pending(version + 1, None if new_row is None else codec.to_arrays(new_row))
        reply = {"client_id": self.client_id, "round": version, "finite": finite,
                 "upload": {k: upload[k] for k in plan.sent}}
        if plan.rows_read:
            reply["row"] = row_now
        return reply

    def commit(self, commit: Mapping) -> None:
        """Keep or drop the row of a round: the server's ``row`` if it sent one, else the pending row.

        Args:
          commit: ``{"round", "accept"}`` and maybe ``"row"`` (from :meth:`Coordinator.close_round`), or
            ``"row_arrays"``, the same row as :func:`pflax.flower.codec.to_arrays` names it.

        >>> c = ClientRuntime(AppSpec(), {"x": np.zeros((1, 2)), "y": np.zeros(1, int), "mask": np.ones(1, bool),
        ...                               "client_id": 0})
        >>> c.commit({"round": 0, "accept": False}); c.store.versions()
        []
        """
        version = int(commit["round"]) + 1
        pending = self.store.pending()
        if commit["accept"]:
            if "row_arrays" in commit:
                self.store.put(version, dict(commit["row_arrays"]))
            elif "row" in commit:
                self.store.put(version, codec.to_arrays(commit["row"]))
            elif pending is not None and pending[0] == version:
                self.store.put(version, pending[1])
        self.store.set_pending(version, None)


@functools.lru_cache(maxsize=16)
def _local_update(plan: Plan) -> Callable:
    return jax.jit(plan.pieces.local_update)


@functools.lru_cache(maxsize=64)
def _initial_row(spec: AppSpec, num_clients: int, data: tuple, client_id: int) -> PyTree:
    state = _plan(spec, num_clients, data).init(spec.seed)
    return jax.tree.map(lambda a: a[client_id], state.clients)
