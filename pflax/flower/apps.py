"""Flower apps that run any pflax algorithm: a ``ServerApp`` and a ``ClientApp`` over
:mod:`pflax.flower.protocol`, written against Flower's Message API (``flwr>=1.41,<1.42``).

* :func:`server_app`: the ``ServerApp``. It waits for the clients, registers them (``query.register``:
  client id, data shapes and mask), restores its latest checkpoint if there is one, and then, each round,
  sends ``train`` messages to the sampled participants, runs the server update on the replies, sends
  ``train.commit`` messages, and checkpoints its state with :mod:`pflax.checkpoint`.
* :func:`client_app`: the ``ClientApp``. Each SuperNode loads its own data (a row of a
  :class:`pflax.data.ClientData`, :func:`load_client_data`) and keeps its persistent row of
  ``state.clients`` in the run's ``Context.state``, or in the directory its node config names
  (``state-dir``), where it survives a new run.
* :func:`run_in_process`: both apps in one Python process through a ``Grid`` that calls the
  ``ClientApp`` directly (Flower's own ``Message``, ``RecordDict`` and ``Context``; no Ray, no sockets):
  for tests, notebooks and debugging. :func:`simulate` runs the same apps on Flower's Simulation Engine
  (``flwr.simulation.run_simulation``, Ray).

Every message is built from ``ArrayRecord`` (one NumPy array per leaf, named by its path, see
:mod:`pflax.flower.codec`) and ``ConfigRecord``; the trees' structures come from the shared
configuration (:class:`pflax.flower.protocol.Plan`), never from the wire, and nothing is pickled.

Configuration: the run config (``[tool.flwr.app.config]`` of the app's ``pyproject.toml``, or
``flwr run --run-config``) holds the :class:`pflax.flower.protocol.AppSpec` fields with hyphens
(``algorithm``, ``model``, ``model-args``, ``config``, ``rounds``, ``fraction``, ``seed``,
``num-clients``, ``checkpoint-dir``, ``min-clients``, ``round-timeout``, ``connect-timeout``,
``data-dir``). A node config may name ``data`` (the client's ``.npz``), ``partition-id``,
``num-partitions`` and ``state-dir``.

Faults: a participant that does not reply within ``round-timeout`` (its machine is unreachable) or
replies with an error leaves the round, which completes with the others; its row stays as it was. A
SuperNode that died is answered for by the SuperLink with an error once its heartbeat lapses, so the
round does not wait out ``round-timeout`` for it. The server state changes only after a complete server
update, and is checkpointed after every round, so a restarted ``ServerApp`` resumes from its last round.

>>> from pflax.data import toy_federation
>>> from pflax.flower import AppSpec, row
>>> train, _ = toy_federation(num_clients=2)
>>> spec = AppSpec("fedavg", model_args={"num_classes": 10, "hidden": [4]}, config={"local_epochs": 1}, rounds=1)
>>> states = []
>>> run_in_process(server_app(spec, on_round=lambda state, metrics: states.append(state)),
...                client_app(spec, load_data=lambda context: row(train, context.node_config["partition-id"])),
...                num_nodes=2)
>>> int(states[-1].round)
1
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from . import codec
from .protocol import AppSpec, ClientRuntime, Coordinator, DeploymentError, DirectoryRowStore, RowStore

__all__ = ["server_app", "client_app", "load_client_data", "save_client_data", "run_in_process", "simulate",
           "to_record", "from_record", "ContextRowStore"]

LOG = logging.getLogger("flwr")
REGISTER = "query.register"
TRAIN = "train"
COMMIT = "train.commit"


# --------------------------------------------------------------------------- records


def to_record(tree) -> ArrayRecord:
    """``tree`` as a Flower ``ArrayRecord``: one ``Array`` per leaf, named by its path.

    Args:
      tree: a pytree of arrays.

    Returns:
      the ``ArrayRecord``.

    >>> import jax.numpy as jnp
    >>> sorted(to_record({"w": jnp.ones(2), "b": jnp.zeros(1)}))
    ["['b']", "['w']"]
    """
    return ArrayRecord({name: Array(np.array(a, order="C", copy=True)) for name, a in codec.to_arrays(tree).items()})


def from_record(record: ArrayRecord, like, what: str = "record"):
    """The tree shaped as ``like`` from an ``ArrayRecord`` written by :func:`to_record`.

    Args:
      record: the ``ArrayRecord``.
      like: the template (arrays or ``jax.ShapeDtypeStruct``), see :func:`pflax.flower.codec.from_arrays`.
      what: a name for error messages.

    Returns:
      the tree.

    >>> import jax, jax.numpy as jnp
    >>> like = {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}
    >>> from_record(to_record({"w": jnp.ones(2)}), like)["w"].tolist()
    [1.0, 1.0]
    """
    return codec.from_arrays({name: array.numpy() for name, array in record.items()}, like, what)


def _arrays(record: ArrayRecord) -> dict:
    return {name: array.numpy() for name, array in record.items()}


class ContextRowStore(RowStore):
    """A :class:`pflax.flower.protocol.RowStore` in a Flower ``Context.state`` (one ``ArrayRecord`` per
    version): the row lives as long as the SuperNode keeps the run's context.

    Args:
      state: the ``Context.state`` ``RecordDict``.

    >>> from flwr.app import RecordDict
    >>> store = ContextRowStore(RecordDict())
    >>> store.put(1, {"w": np.ones(2)}); store.at(3)[1]["w"].tolist()
    [1.0, 1.0]
    """

    PREFIX = "pflax.row."

    def __init__(self, state: RecordDict):
        self.state = state

    def _name(self, version: int) -> str:
        return self.PREFIX + ("pending" if version == self.PENDING else str(version))

    def versions(self) -> list[int]:
        """See :meth:`pflax.flower.protocol.RowStore.versions`.

        >>> ContextRowStore(RecordDict()).versions()
        []
        """
        out = []
        for name in self.state.keys():
            if name.startswith(self.PREFIX):
                tail = name[len(self.PREFIX):]
                out.append(self.PENDING if tail == "pending" else int(tail))
        return sorted(out)

    def load(self, version: int) -> dict:
        """See :meth:`pflax.flower.protocol.RowStore.load`.

        >>> s = ContextRowStore(RecordDict()); s.save(0, {"a": np.ones(1)}); s.load(0)["a"].tolist()
        [1.0]
        """
        return _arrays(self.state[self._name(version)])

    def save(self, version: int, arrays: dict) -> None:
        """See :meth:`pflax.flower.protocol.RowStore.save`.

        >>> s = ContextRowStore(RecordDict()); s.save(2, {}); s.versions()
        [2]
        """
        self.state[self._name(version)] = ArrayRecord({k: Array(np.array(v, order="C", copy=True)) for k, v in arrays.items()})

    def delete(self, version: int) -> None:
        """See :meth:`pflax.flower.protocol.RowStore.delete`.

        >>> s = ContextRowStore(RecordDict()); s.save(2, {}); s.delete(2); s.versions()
        []
        """
        name = self._name(version)
        if name in self.state:
            del self.state[name]


# --------------------------------------------------------------------------- client data


def save_client_data(data, directory, test=None) -> list[Path]:
    """Write each row of a :class:`pflax.data.ClientData` to ``<directory>/client_<id>.npz`` (``x``, ``y``,
    ``mask``, ``client_id``; with ``test``, also ``test_x``, ``test_y``, ``test_mask``): one file per
    client, to copy to that client's machine.

    Args:
      data: the federation's training data.
      directory: where to write.
      test: the same clients' test data, or ``None``.

    Returns:
      the written paths, in row order.

    >>> import tempfile
    >>> from pflax.data import toy_federation
    >>> paths = save_client_data(toy_federation(num_clients=2)[0], tempfile.mkdtemp())
    >>> [p.name for p in paths]
    ['client_0.npz', 'client_1.npz']
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(data.num_clients):
        cid = int(data.client_ids[r])
        arrays = {"x": np.asarray(data.x[r]), "y": np.asarray(data.y[r]), "mask": np.asarray(data.mask[r]),
                  "client_id": np.asarray(cid, np.int64)}
        if test is not None:
            arrays.update(test_x=np.asarray(test.x[r]), test_y=np.asarray(test.y[r]), test_mask=np.asarray(test.mask[r]))
        path = directory / f"client_{cid}.npz"
        np.savez(path, **arrays)
        paths.append(path)
    return paths


def load_client_data(context: Context, spec: AppSpec | None = None) -> dict:
    """A SuperNode's own data: the ``.npz`` its node config names (``data``), else
    ``<data-dir>/client_<partition-id>.npz`` (``data-dir`` from the node config, else the run's).

    Args:
      context: the ClientApp's ``Context``.
      spec: the run's spec (its ``data_dir``).

    Returns:
      ``{"x", "y", "mask", "client_id"}`` (see :func:`pflax.flower.protocol.row`).

    >>> import tempfile
    >>> from flwr.app import RecordDict
    >>> from pflax.data import toy_federation
    >>> d = tempfile.mkdtemp(); _ = save_client_data(toy_federation(num_clients=2)[0], d)
    >>> ctx = Context(run_id=0, node_id=1, node_config={"partition-id": 1, "data-dir": d}, state=RecordDict(), run_config={})
    >>> load_client_data(ctx)["client_id"]
    1
    """
    config = context.node_config
    if "data" in config:
        path = Path(str(config["data"]))
    else:
        directory = config.get("data-dir") or (spec.data_dir if spec is not None else "")
        if not directory or "partition-id" not in config:
            raise DeploymentError("the node config names no `data` file (nor `data-dir` and `partition-id`)")
        path = Path(str(directory)) / f"client_{int(config['partition-id'])}.npz"
    with np.load(path.expanduser(), allow_pickle=False) as f:
        return {"x": f["x"], "y": f["y"], "mask": f["mask"], "client_id": int(f["client_id"])}


# --------------------------------------------------------------------------- the ClientApp


def client_app(spec: AppSpec | None = None, load_data: Callable[[Context], Mapping] | None = None) -> ClientApp:
    """The ``ClientApp``: registers, trains and commits (see :mod:`pflax.flower.protocol`).

    Args:
      spec: defaults of the run's spec; the run config overrides them.
      load_data: ``context -> {"x", "y", "mask", "client_id"}`` (default :func:`load_client_data`).

    Returns:
      the ``flwr.clientapp.ClientApp``.

    >>> type(client_app()).__name__
    'ClientApp'
    """
    base = AppSpec() if spec is None else spec
    load = (lambda context: load_client_data(context, AppSpec.from_run_config(context.run_config, base))) \
        if load_data is None else load_data
    app = ClientApp()

    def runtime(context: Context) -> ClientRuntime:
        run_spec = AppSpec.from_run_config(context.run_config, base)
        state_dir = context.node_config.get("state-dir")
        store = DirectoryRowStore(Path(str(state_dir)).expanduser()) if state_dir else ContextRowStore(context.state)
        n = int(context.node_config.get("num-partitions", 0) or 0)
        return ClientRuntime(run_spec, load(context), store, num_clients=n)

    @app.query("register")
    def register(msg: Message, context: Context) -> Message:
        hello = runtime(context).hello()
        meta = ConfigRecord({"client-id": hello["client_id"], "num-clients": hello["num_clients"],
                             "data": json.dumps({k: [list(s), d] for k, (s, d) in hello["data"].items()})})
        return Message(RecordDict({"meta": meta, "mask": ArrayRecord({"mask": Array(hello["mask"])})}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        client = runtime(context)
        meta = msg.content["meta"]
        plan = client.plan(int(meta["num-clients"]))
        participant = from_record(msg.content["participant"], {"key": plan.key, "weight": _f32()}, "participant")
        payload = {"round": int(meta["round"]), "num_clients": int(meta["num-clients"]),
                   "message": from_record(msg.content["message"], plan.message, "message"),
                   "personal": from_record(msg.content["personal"], plan.personal, "personal"), **participant}
        reply = client.train(payload)
        content = RecordDict({"meta": ConfigRecord({"client-id": reply["client_id"], "round": reply["round"],
                                                    "finite": bool(reply["finite"])}),
                              "upload": to_record(reply["upload"])})
        if "row" in reply:
            content["row"] = to_record(reply["row"])
        return Message(content, reply_to=msg)

    @app.train("commit")
    def commit(msg: Message, context: Context) -> Message:
        client = runtime(context)
        meta = msg.content["meta"]
        decision = {"round": int(meta["round"]), "accept": bool(meta["accept"])}
        if "row" in msg.content:  # stored as it came; checked against the row's template when next used
            decision["row_arrays"] = _arrays(msg.content["row"])
        client.commit(decision)
        return Message(RecordDict({"meta": ConfigRecord({"client-id": client.client_id, "round": decision["round"]})}),
                       reply_to=msg)

    return app


def _f32():
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct((), jnp.float32)


# --------------------------------------------------------------------------- the ServerApp


def _ask(grid: Grid, messages: list[Message], timeout: float) -> tuple[dict[int, Message], dict[int, str]]:
    """Push ``messages`` and pull their replies until all came or ``timeout`` seconds passed (polling
    every 0.2 s; ``Grid.send_and_receive`` polls every 3 s). Returns ``({node: reply}, {node: why it
    failed})``."""
    if not messages:
        return {}, {}
    ids = list(grid.push_messages(messages))  # in the messages' order, None where a push failed
    node_of = {i: msg.metadata.dst_node_id for i, msg in zip(ids, messages) if i is not None}
    waiting, replies = set(node_of), []
    deadline = time.monotonic() + timeout
    while waiting:
        got = list(grid.pull_messages(list(waiting)))
        replies += got
        waiting -= {r.metadata.reply_to_message_id for r in got}
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    got, failed = {}, {}
    for reply in replies:
        # By the message it answers: the SuperLink itself answers for a node it found gone.
        node = node_of.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
        if reply.has_error():
            failed[node] = f"error {reply.error.code}: {reply.error.reason}"
        else:
            got[node] = reply
    for msg in messages:
        node = msg.metadata.dst_node_id
        if node not in got and node not in failed:
            failed[node] = f"no reply within {timeout:g} s"
    return got, failed


def _hello(reply: Message) -> dict:
    meta = reply.content["meta"]
    return {"client_id": int(meta["client-id"]), "num_clients": int(meta["num-clients"]),
            "data": {k: (tuple(s), d) for k, (s, d) in json.loads(str(meta["data"])).items()},
            "mask": reply.content["mask"]["mask"].numpy()}


def _fingerprint(spec: AppSpec) -> dict:
    # What defines the computation (a resumed run may change how long it runs and where it writes).
    keep = ("algorithm", "model", "model-args", "config", "fraction", "seed", "num-clients")
    return {k: v for k, v in spec.run_config().items() if k in keep}


def server_app(spec: AppSpec | None = None, on_round: Callable[[Any, dict], None] | None = None) -> ServerApp:
    """The ``ServerApp``: registration, rounds, commits and checkpoints (see the module docstring).

    Args:
      spec: defaults of the run's spec; the run config overrides them.
      on_round: called as ``on_round(state, metrics)`` after every round (in-process use: the server
        state, less the clients' rows, and the round's metrics).

    Returns:
      the ``flwr.serverapp.ServerApp``.

    >>> type(server_app()).__name__
    'ServerApp'
    """
    base = AppSpec() if spec is None else spec
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_spec = AppSpec.from_run_config(context.run_config, base)
        Serving(grid, run_spec, on_round).run()

    return app


class Serving:
    """One run of the ``ServerApp`` (what :func:`server_app`'s ``main`` does), over a ``Grid``.

    Args:
      grid: the Flower ``Grid``.
      spec: the run's spec.
      on_round: see :func:`server_app`.

    >>> Serving(None, AppSpec(), None).spec.algorithm
    'fedavg'
    """

    def __init__(self, grid: Grid, spec: AppSpec, on_round=None):
        self.grid, self.spec, self.on_round = grid, spec, on_round
        self.node_of: dict[int, int] = {}  # client id -> node id
        self.coordinator: Coordinator | None = None

    def _message(self, content: RecordDict, node: int, kind: str, round_: int) -> Message:
        return Message(content, dst_node_id=node, message_type=kind, group_id=str(round_))

    def _wait_for_nodes(self) -> list[int]:
        need = self.spec.min_clients or self.spec.num_clients or 1
        deadline = time.monotonic() + self.spec.connect_timeout
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= need:
                return nodes
            if time.monotonic() > deadline:
                raise DeploymentError(f"{len(nodes)} of {need} clients connected within {self.spec.connect_timeout:g} s")
            time.sleep(0.2)

    def _register(self, nodes: Iterable[int]) -> list[dict]:
        new = [n for n in nodes if n not in self.node_of.values()]
        msgs = [self._message(RecordDict({"meta": ConfigRecord({})}), n, REGISTER, -1) for n in new]
        got, failed = _ask(self.grid, msgs, self.spec.round_timeout)
        for node, why in failed.items():
            LOG.warning("pflax: node %s did not register (%s)", node, why)
        hellos = []
        for node, reply in got.items():
            hello = _hello(reply)
            stale = self.node_of.get(hello["client_id"])
            if stale is not None and stale != node:
                LOG.info("pflax: client %d now on node %s (was %s)", hello["client_id"], node, stale)
            self.node_of[hello["client_id"]] = node
            hellos.append(hello)
        return hellos

    def _start(self) -> None:
        hellos = self._register(self._wait_for_nodes())
        self.coordinator = Coordinator.from_hellos(self.spec, hellos)
        if self.spec.checkpoint_dir:
            from .. import checkpoint

            if checkpoint.latest_step(self.spec.checkpoint_dir) is not None:
                restored = checkpoint.restore(self.spec.checkpoint_dir, self.coordinator.state,
                                              run=_fingerprint(self.spec))
                self.coordinator.state = restored.state
                LOG.info("pflax: resumed from %s at round %d", self.spec.checkpoint_dir, restored.step)

    def _refresh(self) -> set[int]:
        """Register nodes that connected since, forget nodes that left; the reachable client ids."""
        nodes = set(self.grid.get_node_ids())
        for hello in self._register(sorted(nodes)):
            if hello["client_id"] not in self.coordinator.masks:
                self.coordinator.register(hello)
        return {cid for cid, node in self.node_of.items() if node in nodes}

    def round(self) -> dict:
        """Run one round; returns its metrics (the state is kept unchanged when no participant replied).

        >>> callable(Serving.round)
        True
        """
        c = self.coordinator
        plan = c.plan
        opened = c.open_round(available=self._refresh())
        msgs, client_of = [], {}
        for cid, payload in opened.payloads.items():
            node = self.node_of[cid]
            client_of[node] = cid
            content = RecordDict({
                "meta": ConfigRecord({"round": payload["round"], "num-clients": plan.num_clients, "client-id": cid}),
                "message": to_record(payload["message"]), "personal": to_record(payload["personal"]),
                "participant": to_record({"key": payload["key"], "weight": payload["weight"]})})
            msgs.append(self._message(content, node, TRAIN, opened.round))
        got, failed = _ask(self.grid, msgs, self.spec.round_timeout)
        for node, why in failed.items():
            LOG.warning("pflax: round %d: client %d (node %s) leaves the round: %s", opened.round,
                        client_of[node], node, why)
        upload_like = {k: plan.upload[k] for k in plan.sent}
        replies = {}
        for node, reply in got.items():
            cid = client_of[node]
            meta = reply.content["meta"]
            replies[cid] = {"client_id": cid, "round": int(meta["round"]), "finite": bool(meta["finite"]),
                            "upload": from_record(reply.content["upload"], upload_like, f"client {cid}'s upload")}
            if plan.rows_read:
                replies[cid]["row"] = from_record(reply.content["row"], plan.row, f"client {cid}'s row")
        commits, metrics = c.close_round(opened, replies)
        msgs = []
        for cid, commit in commits.items():
            content = RecordDict({"meta": ConfigRecord({"round": commit["round"], "accept": commit["accept"],
                                                        "num-clients": plan.num_clients})})
            if "row" in commit:
                content["row"] = to_record(commit["row"])
            msgs.append(self._message(content, self.node_of[cid], COMMIT, opened.round))
        _, failed = _ask(self.grid, msgs, self.spec.round_timeout)
        for node, why in failed.items():
            LOG.warning("pflax: round %d: node %s did not confirm its commit (%s)", opened.round, node, why)
        return metrics

    def run(self) -> None:
        """Register the clients, resume or initialise, then run rounds up to ``spec.rounds``.

        >>> callable(Serving.run)
        True
        """
        from .. import checkpoint

        self._start()
        c = self.coordinator
        failures = 0
        while int(c.state.round) < self.spec.rounds:
            try:
                metrics = self.round()
            except DeploymentError as err:
                failures += 1
                LOG.warning("pflax: %s (attempt %d)", err, failures)
                if failures >= 3:
                    raise
                time.sleep(1.0)
                continue
            failures = 0
            if bool(metrics["nonfinite"]):
                raise DeploymentError(f"round {int(c.state.round)}: the update was not finite; the state is "
                                      "unchanged (the same round would repeat it), stopping")
            LOG.info("pflax: round %d done, %d participants", int(c.state.round), len(metrics["client_ids"]))
            if self.spec.checkpoint_dir:
                checkpoint.save(self.spec.checkpoint_dir, c.state, run=_fingerprint(self.spec),
                                extra={"participants": np.asarray(metrics["client_ids"]).tolist()})
            if self.on_round is not None:
                self.on_round(c.state, metrics)


# --------------------------------------------------------------------------- engines


class _LocalGrid(Grid):
    """A ``Grid`` that hands each message to a ``ClientApp`` in this process (one ``Context`` per node)."""

    def __init__(self, app: ClientApp, node_configs: list[dict], run_config: dict, lose: Callable | None):
        self.app, self.lose = app, lose
        self.run_id = int(uuid.uuid4().int % (1 << 63))
        self.contexts = {}
        for i, node_config in enumerate(node_configs):
            node_id = 1000 + i
            self.contexts[node_id] = Context(run_id=self.run_id, node_id=node_id, node_config=dict(node_config),
                                             state=RecordDict(), run_config=dict(run_config))
        self.down: set[int] = set()
        self.replies: dict[str, Message] = {}
        self._run = None

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return [n for n in self.contexts if n not in self.down]

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            msg_id = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = msg_id  # as Flower's own in-memory grid does
            node = msg.metadata.dst_node_id
            ids.append(msg_id)
            if node not in self.down and self.lose is not None and self.lose(node, msg):
                self.down.add(node)  # the node dies with this message and stays down
            if node in self.down:
                # What the SuperLink answers once it finds a node gone (no heartbeat).
                reply = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="node unavailable"), reply_to=msg)
                self.replies[msg_id] = reply
                continue
            try:
                reply = self.app(msg, self.contexts[node])
            except Exception as err:  # a ClientApp exception becomes an error reply, as in Flower
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(err).__name__}: {err}"),
                                reply_to=msg)
            self.replies[msg_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(list(messages)))


def run_in_process(server: ServerApp, client: ClientApp, num_nodes: int | None = None,
                   node_configs: list[dict] | None = None, run_config: dict | None = None,
                   lose: Callable[[int, Message], bool] | None = None) -> None:
    """Run a ``ServerApp`` and ``num_nodes`` ``ClientApp`` nodes in this process.

    Messages go through Flower's ``Message``/``RecordDict`` objects (arrays as ``numpy.save`` bytes) to
    the ``ClientApp`` called directly, one node after the other; each node keeps its ``Context``.

    Args:
      server, client: the apps (:func:`server_app`, :func:`client_app`).
      num_nodes: how many nodes; node ``i`` gets ``partition-id=i``, ``num-partitions=num_nodes``.
      node_configs: instead, each node's config.
      run_config: the run config both apps see.
      lose: ``lose(node_id, message) -> bool``: True kills that node on that message: it is answered
        with Flower's "node unavailable" error, as the SuperLink does for a node gone, and stays down.

    >>> from pflax.data import toy_federation
    >>> from pflax.flower import row
    >>> train, _ = toy_federation(num_clients=2)
    >>> spec = AppSpec(model_args={"num_classes": 10, "hidden": [4]}, config={"local_epochs": 1}, rounds=2)
    >>> seen = []
    >>> run_in_process(server_app(spec, on_round=lambda s, m: seen.append(m["client_ids"].tolist())),
    ...                client_app(spec, load_data=lambda ctx: row(train, ctx.node_config["partition-id"])),
    ...                num_nodes=2, lose=lambda node, msg: node == 1001 and msg.metadata.group_id == "1")
    >>> seen  # the second node died in round 1: that round completed with the first
    [[0, 1], [0]]
    """
    if node_configs is None:
        node_configs = [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
    from flwr.supercore.task_identity import TaskIdentity

    grid = _LocalGrid(client, node_configs, run_config or {}, lose)
    context = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config or {}))
    # The identity Flower's runtimes give the process running a ServerApp (messages are stamped with it).
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run_id, 0
    try:
        server(grid, context)
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def simulate(spec: AppSpec, num_nodes: int, load_data: Callable[[Context], Mapping] | None = None,
             on_round: Callable | None = None, backend_config: dict | None = None) -> None:
    """Run the apps on Flower's Simulation Engine (``flwr.simulation.run_simulation``, Ray): the
    ``ClientApp`` runs in Ray workers, each node with ``partition-id`` and ``num-partitions`` set.

    Args:
      spec: the run's spec.
      num_nodes: how many simulated SuperNodes.
      load_data: the ClientApp's data loader (default :func:`load_client_data` with ``spec.data_dir``);
        it travels to the Ray workers, so it must be picklable by Ray (cloudpickle).
      on_round: see :func:`server_app` (runs in this process).
      backend_config: Flower's backend config (default: one CPU per client).

    >>> callable(simulate)
    True
    """
    from flwr.simulation import run_simulation

    config = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}} if backend_config is None else backend_config
    run_simulation(server_app(spec, on_round), client_app(spec, load_data), num_supernodes=num_nodes,
                   backend_config=config)
