"""The algorithm contract: one state layout, a round made of three pure pieces, and the one driver.

Every pflax algorithm is an :class:`Algorithm`: ``Config``, ``init(key, model, sample_x, num_clients,
config)``, ``round(state, batch, test=None) -> (state, metrics)`` and ``evaluate(state, test,
train=None) -> {"client_ids", "accuracy", "n", ...}``. Its round is three pure functions
(:class:`RoundPieces`):

1. ``broadcast(state, client_ids) -> (message, personal)``: what the server sends. ``message`` is the
   same for every participant; ``personal`` has a leading participant axis (FedFomo's downloaded
   models) or is ``()``.
2. ``local_update(message, participant) -> upload``: what one participant computes from the message,
   its data and its own persistent row of ``state.clients``. Reserved keys of the upload:
   ``"client"`` (its new persistent row), ``"mean"`` (a tree the server averages with the round's
   weights) and ``"sum"`` (a tree the server adds up); every other key is returned per participant.
3. ``server_update(state, batch, uploads, reduced) -> (server, client_rows, metrics)``: what the
   server does with the uploads; ``reduced`` holds the weighted ``"mean"`` sum, the ``"sum"`` and the
   normalised ``"weights"``. ``client_rows`` (or ``None``: the uploads' ``"client"`` rows) are written
   back for the participants only.

:func:`run_round` composes them; the participants run through
:func:`pflax.core.execution.map_reduce_clients`, so averaged and summed uploads are added up as each
client finishes and never stacked. A deployment runs the same three functions on separate machines.

Example: FedAvg's round is three lines of pieces.

>>> import jax, jax.numpy as jnp
>>> from pflax.core import federated
>>> from pflax.data import from_partition, synthetic
>>> from pflax.models import mlp
>>> ds = synthetic(train_per_class=8, test_per_class=2, image_size=8)
>>> batch = from_partition(ds.x_train, ds.y_train, [range(0, 40), range(40, 80)])
>>> pieces = federated.RoundPieces(
...     broadcast=lambda state, ids: (state.server, ()),
...     local_update=lambda params, p: {"mean": params, "n": p["mask"].sum()},
...     server_update=lambda state, batch, up, red: (
...         federated.mean_or(red, state.server), None, {"n": up["n"]}))
>>> model = mlp(10, hidden=(4,))
>>> params = model.init(jax.random.PRNGKey(0), batch.x[0, :1])
>>> state = federated.State.create(jax.random.PRNGKey(1), params, {}, 2, model, None)
>>> new_state, metrics = federated.run_round(pieces, state, batch)
>>> int(new_state.round), metrics["n"].tolist()
(1, [40, 40])
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from . import aggregate
from .execution import Execution, map_clients, map_reduce_clients

Array = jax.Array
PyTree = Any

# Separate PRNG stream for evaluation-time personalisation (fine-tuning), so evaluating never changes
# training randomness.
EVALUATION_STREAM = 0x5EED


@struct.dataclass
class State:
    """The state of every algorithm.

    Attributes:
      server: what the server holds (a global model, cluster models, centroids, control variates).
      clients: what each client keeps for itself, a tree with a leading axis over all ``num_clients``
        clients (FedPer's heads, Ditto's personal models, SCAFFOLD's control variates); ``{}`` when
        clients keep nothing. A round changes the participants' rows only.
      round: the number of rounds run so far (int32).
      key: PRNG key of local training; round ``t``, client ``i`` uses ``fold_in(fold_in(key, t), i)``.
      sampling_key: a separate stream for client sampling.
      num_clients, model, config: static.

    >>> import jax, jax.numpy as jnp
    >>> s = State.create(jax.random.PRNGKey(0), {"w": jnp.ones(2)}, {"h": jnp.zeros(3)}, 4, None, None)
    >>> s.clients["h"].shape, int(s.round)
    ((4, 3), 0)
    """

    server: PyTree
    clients: PyTree
    round: Array
    key: Array
    sampling_key: Array
    num_clients: int = struct.field(pytree_node=False)
    model: Any = struct.field(pytree_node=False)
    config: Any = struct.field(pytree_node=False)

    @classmethod
    def create(cls, key: Array, server: PyTree, client_row: PyTree, num_clients: int, model, config) -> "State":
        """A round-0 state: every client starts from ``client_row``. ``key`` is split in three
        (model, training, sampling) and the last two are kept, so equal seeds give equal streams."""
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        _, k_train, k_sample = jax.random.split(key, 3)
        return cls(server=server, clients=broadcast_rows(client_row, num_clients), round=jnp.zeros((), jnp.int32),
                   key=k_train, sampling_key=k_sample, num_clients=num_clients, model=model, config=config)

    @classmethod
    def from_model(cls, key: Array, model, sample_x: Array, num_clients: int, config,
                   layout: Callable[[PyTree], tuple[PyTree, PyTree]] = lambda params: (params, {})) -> "State":
        """A round-0 state from one random model: ``model.init`` with the first of ``split(key, 3)``
        (as every algorithm, so equal seeds give equal models), then ``layout(params) -> (server,
        client_row)``; the default sends the whole model to the server and keeps nothing on clients.

        Args:
          key: the run's PRNG key; model: a model with ``init(key, sample_x)``; sample_x: inputs of
            one client (their shape); num_clients: N; config: the algorithm's config.
          layout: how the model is split between the server and every client's row.

        Returns:
          the state at round 0.

        >>> from pflax.models import mlp
        >>> s = State.from_model(jax.random.PRNGKey(0), mlp(10, hidden=(4,)), jnp.zeros((1, 8, 8, 1)), 3, None,
        ...                      lambda p: ({"body": p["body"]}, {"head": p["head"]}))
        >>> sorted(s.server), s.clients["head"]["TorchDense_0"]["kernel"].shape
        (['body'], (3, 4, 10))
        """
        server, client_row = layout(model.init(jax.random.split(key, 3)[0], sample_x[:1]))
        return cls.create(key, server, client_row, num_clients, model, config)


@functools.partial(jax.jit, static_argnums=1)
def broadcast_rows(row: PyTree, num_clients: int) -> PyTree:
    """``num_clients`` identical copies of ``row`` on a leading client axis (one compiled program,
    not one per leaf shape).

    >>> broadcast_rows({"a": jnp.arange(2.0)}, 3)["a"].shape
    (3, 2)
    """
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (num_clients,) + a.shape), row)


def take(tree: PyTree, ids: Array) -> PyTree:
    """Rows ``ids`` of every leaf (a participant subset of a client-axis tree).

    >>> take({"a": jnp.arange(4)}, jnp.array([3, 1]))["a"].tolist()
    [3, 1]
    """
    return jax.tree.map(lambda a: a[ids], tree)


def write_rows(tree: PyTree, ids: Array, rows: PyTree) -> PyTree:
    """``tree`` with rows ``ids`` replaced by ``rows`` (the participants' new persistent state).

    >>> write_rows({"a": jnp.zeros(3)}, jnp.array([2]), {"a": jnp.ones(1)})["a"].tolist()
    [0.0, 0.0, 1.0]
    """
    return jax.tree.map(lambda full, part: full.at[ids].set(part), tree, rows)


def sample_sizes(state: State, batch) -> Array:
    """The default weights of a round's average: each participant's number of real samples.

    Args:
      state: the algorithm state (unused; part of the ``RoundPieces.weights`` signature).
      batch: the round's participants' data, with ``mask [m, n_max]``.

    Returns:
      ``[m]`` integer sample counts.

    >>> from types import SimpleNamespace
    >>> sample_sizes(None, SimpleNamespace(mask=jnp.array([[True, False], [True, True]]))).tolist()
    [1, 2]
    """
    return batch.mask.sum(1)


def mean_or(reduced: dict, fallback: PyTree) -> PyTree:
    """The weighted mean of the uploads' ``"mean"`` trees, or ``fallback`` when no participant had any
    weight (a round where nobody has data keeps the old model).

    >>> red = {"mean": jnp.ones(2), "weights": jnp.zeros(3)}
    >>> mean_or(red, jnp.full(2, 7.0)).tolist()
    [7.0, 7.0]
    """
    return aggregate.unless_no_weight(reduced["mean"], reduced["weights"], fallback)


def no_broadcast(state: State, client_ids: Array) -> tuple[PyTree, PyTree]:
    """A ``broadcast`` that sends the server's whole tree to every participant.

    Args:
      state: the algorithm state.
      client_ids: ``[m]`` the participants (unused).

    Returns:
      ``(state.server, ())``: the message, and no per-participant part.

    >>> no_broadcast(State.create(jax.random.PRNGKey(0), {"w": 1.0}, {}, 2, None, None), jnp.arange(2))
    ({'w': 1.0}, ())
    """
    return state.server, ()


@dataclasses.dataclass(frozen=True)
class RoundPieces:
    """The three pure pieces of a round (see the module docstring), and the round's averaging weights.

    Attributes:
      broadcast: ``(state, client_ids) -> (message, personal)``.
      local_update: ``(message, participant) -> upload``. ``participant`` holds ``x``, ``y``, ``mask``
        (its training data), ``client`` (its row of ``state.clients``), ``key``, ``weight`` (its
        normalised averaging weight), ``personal`` (its row of ``personal``) and, when a round is
        given test data and ``test_in_client`` is set, ``test_x``, ``test_y``, ``test_mask``.
      server_update: ``(state, batch, uploads, reduced) -> (server, client_rows or None, metrics)``.
      weights: ``(state, batch) -> [m]`` weights of the ``"mean"`` upload, known before the clients run.
      test_in_client: give the participants their test split (FedPAC scores before and after training).
      evaluate_after: add ``accuracy`` (``evaluate`` of the new state) to the metrics when a round is
        given test data.

    >>> pieces = RoundPieces(no_broadcast, lambda msg, p: {"mean": msg}, lambda st, b, up, red: (red["mean"], None, {}))
    >>> pieces.weights is sample_sizes, pieces.test_in_client
    (True, False)
    """

    broadcast: Callable[[State, Array], tuple[PyTree, PyTree]]
    local_update: Callable[[PyTree, dict], dict]
    server_update: Callable[..., tuple[PyTree, Optional[PyTree], dict]]
    weights: Callable[[State, Any], Array] = sample_sizes
    test_in_client: bool = False
    evaluate_after: bool = True


# Leaves are checked in groups of at most this many elements: one reduction per group instead of per
# leaf (on XLA:CPU every reduction is two kernels to compile, ~10 ms each), while the concatenated
# copy a group needs stays small next to the state (16 MiB of float32).
_FINITE_CHECK_GROUP = 1 << 22


def all_finite(tree: PyTree) -> Array:
    """True iff every floating leaf of ``tree`` is free of NaN and Inf.

    >>> bool(all_finite({"a": jnp.ones(2), "b": jnp.array([0.0, jnp.nan])}))
    False
    """
    by_dtype: dict = {}
    for x in jax.tree.leaves(tree):
        if jnp.issubdtype(x.dtype, jnp.floating):
            by_dtype.setdefault(jnp.dtype(x.dtype), []).append(x)
    groups = []
    for leaves in by_dtype.values():
        groups.append([])
        size = 0
        for x in leaves:
            if groups[-1] and size + x.size > _FINITE_CHECK_GROUP:
                groups.append([])
                size = 0
            groups[-1].append(x)
            size += x.size
    checks = [jnp.all(jnp.isfinite(g[0] if len(g) == 1 else jnp.concatenate([x.ravel() for x in g]))) for g in groups]
    return jnp.all(jnp.stack(checks)) if checks else jnp.array(True)


def guard_finite(old_state, new_state) -> tuple[Any, Array]:
    """Keep ``old_state`` if anything in ``new_state`` is NaN/Inf: NaN never enters the state.

    >>> kept, ok = guard_finite({"a": jnp.ones(1)}, {"a": jnp.array([jnp.inf])})
    >>> kept["a"].tolist(), bool(ok)
    ([1.0], False)
    """
    ok = all_finite(new_state)
    # One conditional, not a select per leaf: with selects, XLA folded the per-leaf checks into a
    # chain of ``and``s and copied it into every leaf's select (FedPick: 10,000 extra ops, ~3 s of compile).
    return jax.lax.cond(ok, lambda: new_state, lambda: old_state), ok


def execution_of(state: State) -> Execution:
    """The execution strategy of ``state``'s algorithm: ``state.config.execution``, else the default.

    Args:
      state: an algorithm state.

    Returns:
      An :class:`pflax.core.execution.Execution`.

    >>> execution_of(State.create(jax.random.PRNGKey(0), {}, {}, 1, None, None))
    Execution(strategy='auto', chunk_size=4, inner='auto')
    """
    return getattr(state.config, "execution", Execution())


def participant_keys(state: State, client_ids: Array, stream: int | None = None) -> Array:
    """Per-participant PRNG keys of this round: ``fold_in(fold_in(key, round), id)``; with ``stream``,
    the same from ``fold_in(key, stream)`` (evaluation-time randomness).

    Args:
      state: the algorithm state (its ``key`` and ``round``).
      client_ids: ``[m]`` the participants.
      stream: an optional integer naming a separate stream (e.g. :data:`EVALUATION_STREAM`).

    Returns:
      ``[m, ...]`` one key per participant.

    >>> s, ids = State.create(jax.random.PRNGKey(0), {}, {}, 4, None, None), jnp.array([0, 2])
    >>> participant_keys(s, ids).shape, bool((participant_keys(s, ids) != participant_keys(s, ids, 1)).any())
    ((2, 2), True)
    """
    key = state.key if stream is None else jax.random.fold_in(state.key, stream)
    round_key = jax.random.fold_in(key, state.round)
    return jax.vmap(lambda i: jax.random.fold_in(round_key, i))(client_ids)


def _require_participants(batch, what: str = "batch") -> None:
    # Shapes are static, so this runs at trace time: a round over zero clients has no meaning.
    if batch.x.shape[0] == 0:
        from ..data.sources import DataError

        raise DataError(f"{what}: no clients in the batch (zero clients sampled)")


def run_round(pieces: RoundPieces, state: State, batch, test=None,
              evaluate: Callable | None = None) -> tuple[State, dict]:
    """One round composed from ``pieces``: broadcast, every participant's local update (through the
    state's execution strategy), the server update, the participants' rows written back, the round
    counter advanced and non-finite updates refused (``metrics["nonfinite"]``). With ``test``
    (participants' test splits, same rows as ``batch``) and ``evaluate``, ``metrics["accuracy"]`` is
    ``evaluate(new_state, test, batch)["accuracy"]``. Pure; jit it.

    Args:
      pieces: the round's :class:`RoundPieces`.
      state: the state before the round.
      batch: the participants' training data (``x``, ``y``, ``mask``, ``client_ids``).
      test: the same participants' test data, or ``None``.
      evaluate: ``(state, test, train) -> {"accuracy", ...}``, used with ``test``.

    Returns:
      ``(new_state, metrics)``; ``metrics`` holds ``client_ids``, the server's metrics and ``nonfinite``.

    >>> from pflax.data import toy_federation
    >>> pieces = RoundPieces(no_broadcast, lambda w, p: {"mean": w + p["mask"].sum()},
    ...                      lambda st, b, up, red: (mean_or(red, st.server), None, {}))
    >>> s, m = run_round(pieces, State.create(jax.random.PRNGKey(0), jnp.zeros(()), {}, 2, None, None),
    ...                  toy_federation()[0])
    >>> int(s.round), float(s.server), bool(m["nonfinite"])
    (1, 40.0, False)
    """
    _require_participants(batch)
    ids = batch.client_ids
    message, personal = pieces.broadcast(state, ids)
    weights = aggregate.normalized_weights(pieces.weights(state, batch))
    participants = {"x": batch.x, "y": batch.y, "mask": batch.mask, "client": take(state.clients, ids),
                    "key": participant_keys(state, ids), "weight": weights, "personal": personal}
    if test is not None and pieces.test_in_client:
        participants.update(test_x=test.x, test_y=test.y, test_mask=test.mask)

    def one(participant, msg):
        upload = dict(pieces.local_update(msg, participant))
        summed = {}
        if "mean" in upload:
            summed["mean"] = aggregate.weighted_term(upload.pop("mean"), participant["weight"])
        if "sum" in upload:
            summed["sum"] = upload.pop("sum")
        return upload, summed

    uploads, summed = map_reduce_clients(one, participants, message, execution_of(state))
    server, rows, metrics = pieces.server_update(state, batch, uploads, {**summed, "weights": weights})
    if rows is None:
        rows = uploads.get("client")
    clients = state.clients if rows is None else write_rows(state.clients, ids, rows)
    new_state, finite = guard_finite(state, state.replace(server=server, clients=clients, round=state.round + 1))
    metrics = {"client_ids": ids, **metrics, "nonfinite": ~finite}
    if test is not None and evaluate is not None and pieces.evaluate_after:
        metrics["accuracy"] = evaluate(new_state, test, batch)["accuracy"]
    return new_state, metrics


def evaluate_clients(state: State, test, train, score: Callable[[dict, PyTree], Array], needs_train: bool = False,
                     what: str = "this algorithm") -> dict:
    """``{"client_ids", "accuracy", "n"}``: ``score(client, server)`` for every client of ``test``.

    ``client`` holds ``x``, ``y``, ``mask`` (its test split), ``client`` (its row of ``state.clients``),
    ``key`` (an evaluation key of its own, per round and client) and, when ``train`` is given,
    ``train_x``, ``train_y``, ``train_mask`` (the same clients' training splits, same rows).

    Args:
      state: the algorithm state.
      test: the clients' test data (``x``, ``y``, ``mask``, ``client_ids``).
      train: the same clients' training data, or ``None``.
      score: ``score(client, server) -> scalar`` accuracy of one client.
      needs_train: refuse ``train=None`` (evaluation personalises on training data).
      what: the algorithm's name, for the error message.

    Returns:
      ``{"client_ids", "accuracy", "n"}``, one entry per client of ``test``.

    >>> from pflax.data import toy_federation
    >>> out = evaluate_clients(State.create(jax.random.PRNGKey(0), {}, {}, 2, None, None), toy_federation()[1], None,
    ...                        lambda c, server: c["mask"].mean())
    >>> out["accuracy"].tolist(), out["n"].tolist()
    ([1.0, 1.0], [20, 20])
    """
    _require_participants(test, "test")
    if needs_train and train is None:
        raise ValueError(f"{what} personalises on each client's training split at evaluation: "
                         "call evaluate(state, test, train) with the same clients' training data")
    ids = test.client_ids
    clients = {"x": test.x, "y": test.y, "mask": test.mask, "client": take(state.clients, ids),
               "key": participant_keys(state, ids, EVALUATION_STREAM)}
    if train is not None:
        clients.update(train_x=train.x, train_y=train.y, train_mask=train.mask)
    accuracy = map_clients(score, clients, state.server, execution_of(state))
    return {"client_ids": ids, "accuracy": accuracy, "n": test.mask.sum(1)}


def num_sampled(num_clients: int, fraction: float) -> int:
    """``max(floor(fraction * N), 1)``, the official rule.

    >>> num_sampled(100, 0.1), num_sampled(5, 0.01)
    (10, 1)
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"participation fraction must be in (0, 1], got {fraction}")
    return max(int(np.floor(fraction * num_clients)), 1)


def sample_clients(state: State, fraction: float = 1.0) -> Array:
    """Sorted ids of this round's participants, drawn without replacement from the state's own
    sampling stream (``fold_in(sampling_key, round)``), so sampling never consumes model randomness.

    >>> s = State.create(jax.random.PRNGKey(0), {}, {}, 10, None, None)
    >>> sample_clients(s, 0.3).shape
    (3,)
    """
    n = state.num_clients
    m = num_sampled(n, fraction)
    if m == n:
        return jnp.arange(n, dtype=jnp.int32)
    key = jax.random.fold_in(state.sampling_key, state.round)
    return jnp.sort(jax.random.permutation(key, n)[:m]).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One federated algorithm, as the registry holds it (compare optax's ``GradientTransformation``
    and FedJAX's ``FederatedAlgorithm``).

    Attributes:
      name: the registry name.
      Config: a frozen dataclass of hyper-parameters; ``Config()`` is the paper's setting.
      init: ``(key, model, sample_x, num_clients, config) -> State``.
      round: ``(state, batch, test=None) -> (state, metrics)``, jitted.
      evaluate: ``(state, test, train=None) -> {"client_ids", "accuracy", "n", ...}``, jitted.
      pieces: ``(model, config) -> RoundPieces``, the round's three pure pieces.
      check_inputs: eager validation ``(state, batch, test=None)`` with readable errors.
      needs_train: ``evaluate`` personalises on training data (``train`` is required).
      summary: one line for ``pflax list``.
      backbone: the model family ``init`` expects: ``"split"`` (a :class:`pflax.models.SplitModel`, body
        and head) or ``"bn"`` (a :class:`pflax.models.bn.BNModel` with BatchNorm layers).

    The functions' parameter names are checked on construction (``TypeError`` otherwise); :func:`build`
    makes the usual entry.

    >>> algo = Algorithm("demo", dict, lambda key, model, sample_x, num_clients, config: None,
    ...                  lambda state, batch, test=None: None, lambda state, test, train=None: None, None, print)
    >>> algo.name, algo.needs_train
    ('demo', False)
    """

    name: str
    Config: type
    init: Callable
    round: Callable
    evaluate: Callable
    pieces: Callable[[Any, Any], RoundPieces]
    check_inputs: Callable
    needs_train: bool = False
    summary: str = ""
    backbone: str = "split"

    sample_clients = staticmethod(sample_clients)

    def __post_init__(self):
        for verb, params in (("init", ["key", "model", "sample_x", "num_clients", "config"]),
                             ("round", ["state", "batch", "test"]), ("evaluate", ["state", "test", "train"])):
            names = list(inspect.signature(getattr(self, verb)).parameters)
            if names != params:
                raise TypeError(f"{self.name}.{verb} must take {params}, takes {names}")


def build(name: str, Config: type, init: Callable, pieces: Callable[[Any, Any], RoundPieces],
          score: Callable[[dict, PyTree, Any, Any], Array], summary: str, check_inputs: Callable,
          needs_train: bool | Callable[[Any], bool] = False) -> Algorithm:
    """An :class:`Algorithm` whose ``round`` and ``evaluate`` are the generic ones, jitted: ``round`` is
    :func:`run_round` over ``pieces(model, config)`` and ``evaluate`` is :func:`evaluate_clients` with
    ``score(client, server, model, config)``.

    Args:
      name, Config, init, pieces, summary, check_inputs: as :class:`Algorithm`'s fields.
      score: one client's accuracy from its evaluation inputs (see :func:`evaluate_clients`).
      needs_train: whether evaluation personalises on training data, or a function of the config.

    Returns:
      the registry entry.

    >>> import jax.numpy as jnp
    >>> algo = build("demo", dict, lambda key, model, sample_x, num_clients, config: None, None,
    ...              lambda c, server, model, cfg: jnp.float32(1.0), "a demo", check_inputs=print)
    >>> algo.name, list(inspect.signature(algo.round).parameters)
    ('demo', ['state', 'batch', 'test'])
    """
    def requires_train(cfg) -> bool:
        return needs_train(cfg) if callable(needs_train) else needs_train

    def evaluate(state: State, test, train=None) -> dict:
        model, cfg = state.model, state.config
        return evaluate_clients(state, test, train, lambda c, server: score(c, server, model, cfg),
                                needs_train=requires_train(cfg), what=name)

    def round(state: State, batch, test=None):  # noqa: A001 - the library's verb is `round`
        return run_round(pieces(state.model, state.config), state, batch, test, evaluate=evaluate)

    evaluate.__doc__ = (f"{name}: ``evaluate(state, test, train=None) -> {{client_ids, accuracy, n}}``, each client's "
                        "personalized model on its own test split. Jit-compiled.")
    round.__doc__ = (f"{name}: ``round(state, batch, test=None) -> (state, metrics)`` for the participants in "
                     "``batch``; with ``test`` (same clients), ``metrics['accuracy']`` is ``evaluate`` of the new "
                     "state. Jit-compiled.")
    return Algorithm(name=name, Config=Config, init=init, round=jax.jit(round), evaluate=jax.jit(evaluate),
                     pieces=pieces, check_inputs=check_inputs, needs_train=requires_train(Config()), summary=summary)
