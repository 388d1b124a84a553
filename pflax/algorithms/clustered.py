"""What the clustered and multi-model methods share: IFCA, HypCluster, FeSEM, CFL and FedEM.

Each of them holds a *stack* of ``k`` models on the server (a tree whose leaves have a leading model
axis: IFCA's and HypCluster's cluster models, FeSEM's centres, CFL's cluster slots, FedEM's mixture
components) and, in every client's row of ``state.clients``, which of them the client uses (its
cluster identity ``{"cluster": int32}``) or how it mixes them (FedEM's ``{"pi": [M]}``). The server
replaces model ``j`` by a weighted mean of the participants' trained models, with a weight per client
and model, and a model nobody has weight on keeps its value. Two ways:

* the client knows its weights itself (IFCA: ``n_i`` on the cluster it picks; FedEM: its
  responsibility mass ``n_i pi_im``): it uploads :func:`pflax.core.aggregate.grouped_term` under the
  reserved ``"sum"`` key, the ``k`` means are summed as the clients finish (the trained models are never
  stacked) and :func:`average_groups` divides;
* the server assigns after seeing every upload (FeSEM's first-round centres, CFL's splits): the trained
  models are stacked and :func:`member_means` takes the means over the final assignment.

This module also holds the common ``Config`` (``num_clusters``), the per-client "a client without data
keeps its row" rule (:func:`unless_empty`), the score of an assigned model (:func:`assigned_score`) and
:func:`algorithm`, which builds a registry entry (jitted ``round`` and ``evaluate``) from a module's
pieces.

>>> import jax.numpy as jnp
>>> models = {"w": jnp.arange(3.0)[:, None] * jnp.ones((3, 2))}      # three models
>>> trained = {"w": jnp.array([[1.0, 1.0], [3.0, 3.0], [5.0, 5.0]])}  # three participants' models
>>> member_means(trained, jnp.array([0, 0, 2]), jnp.array([1.0, 3.0, 2.0]), 3, models)["w"].tolist()
[[2.5, 2.5], [1.0, 1.0], [5.0, 5.0]]
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..core import aggregate, federated
from ..core.federated import State
from . import base

Array = jax.Array
PyTree = Any

__all__ = ["Config", "algorithm", "assigned_score", "average_groups", "member_means", "unless_empty"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """``num_clusters`` models (default 3) on top of FedPAC's common SGD setting (lr 0.01, momentum 0.5,
    weight decay 5e-4, batch 50, E = 5).

    Attributes:
      num_clusters: k, the models on the server (>= 1).
      (and :class:`pflax.algorithms.base.SGDConfig`'s fields.)

    >>> Config(num_clusters=5).num_clusters
    5
    """

    num_clusters: int = 3

    def __post_init__(self):
        super().__post_init__()
        base.require(self.num_clusters >= 1, f"{type(self).__module__}: num_clusters must be >= 1, got {self.num_clusters}")


def unless_empty(row: PyTree, participant: dict) -> PyTree:
    """A participant's new persistent row, or its old one (``participant["client"]``) when it has no
    data: an empty client changes nothing of its own (its cluster identity, its mixture weights).

    Args:
      row: the new row (same tree as ``participant["client"]``).
      participant: the participant's inputs (``mask`` and ``client``).
    Returns:
      ``row`` if the participant has at least one real sample, else its old row.

    >>> import jax.numpy as jnp
    >>> p = {"mask": jnp.zeros(4, bool), "client": {"cluster": jnp.int32(2)}}
    >>> int(unless_empty({"cluster": jnp.int32(0)}, p)["cluster"])
    2
    """
    has = base.num_samples(participant) > 0
    return jax.tree.map(lambda new, old: jnp.where(has, new, old), row, participant["client"])


def average_groups(state: State, batch, uploads: dict, reduced: dict):
    """A ``server_update``: every model of the stack ``state.server`` becomes the mean of the summed
    :func:`pflax.core.aggregate.grouped_term` uploads (``reduced["sum"]``); a model without weight keeps
    its value. The participants' rows are their uploads' ``"client"``; every other upload is a metric.

    Args:
      state: the round's state (``server``: the stack of ``k`` models).
      batch: the participants' training data (unused).
      uploads: per-participant uploads (``"client"`` and the metrics).
      reduced: ``{"sum": summed grouped terms, ...}``.
    Returns:
      ``(new stack, None, metrics)``.

    >>> from types import SimpleNamespace
    >>> term = aggregate.grouped_term({"w": jnp.array([[2.0], [2.0]])}, jnp.array([4.0, 0.0]))  # all on model 0
    >>> stack, _, _ = average_groups(SimpleNamespace(server={"w": jnp.array([[0.0], [9.0]])}), None, {}, {"sum": term})
    >>> stack["w"].tolist()  # model 1 had no weight: kept
    [[2.0], [9.0]]
    """
    metrics = {k: v for k, v in uploads.items() if k != "client"}
    return aggregate.grouped_means(reduced["sum"], fallback=state.server), None, metrics


def member_means(params: PyTree, assign: Array, n: Array, k: int, fallback: PyTree) -> PyTree:
    """``k`` sample-size weighted means of stacked models over a hard assignment.

    Args:
      params: the participants' models, stacked ``[m, ...]``.
      assign: ``[m]`` the model (cluster) each participant belongs to.
      n: ``[m]`` sample sizes (a participant with 0 has no weight).
      k: the number of models.
      fallback: ``[k, ...]`` the models kept where a cluster has no weight.
    Returns:
      ``[k, ...]``: mean ``j`` of the members of ``j``, weighted by ``n``.

    >>> member_means({"w": jnp.array([1.0, 3.0])}, jnp.array([1, 1]), jnp.ones(2), 2, {"w": jnp.array([7.0, 0.0])})["w"].tolist()
    [7.0, 2.0]
    """
    return base.per_cluster_mean(params, jax.nn.one_hot(assign, k) * n[:, None], fallback)


def assigned_score(models_of: Callable[[PyTree], PyTree] = lambda server: server) -> Callable:
    """A ``score(client, server, model, config)`` for :func:`algorithm`: the accuracy of the model of
    the client's cluster (``client["client"]["cluster"]``) in the stack ``models_of(server)`` on the
    client's test split. A client that never participated is scored on model 0.

    Args:
      models_of: picks the stack of models out of the server state (default: the server itself).
    Returns:
      ``score(client, server, model, config) -> accuracy``.

    >>> from types import SimpleNamespace
    >>> score = assigned_score()
    >>> c = {"x": jnp.eye(2), "y": jnp.array([0, 1]), "mask": jnp.ones(2, bool)}
    >>> scaled = SimpleNamespace(apply=lambda p, x: p * x)  # model j scales the inputs by stack[j]
    >>> [float(score({**c, "client": {"cluster": j}}, jnp.array([1.0, -1.0]), scaled, None)) for j in (0, 1)]
    [1.0, 0.0]
    """

    def score(c: dict, server: PyTree, model, cfg) -> Array:
        return base.accuracy_of(model, base.pick(models_of(server), c["client"]["cluster"]), c)

    return score


def algorithm(name: str, Config: type, init: Callable, pieces_for: Callable, score: Callable,
              summary: str, needs_train: bool | Callable = False) -> federated.Algorithm:
    """The registry entry of a clustered method (:func:`pflax.core.federated.build`): ``round`` runs
    ``pieces_for(model, config)`` and ``evaluate`` scores every client with ``score(client, server,
    model, config)``; ``check_inputs`` is the common one.

    Args:
      name: the registry name.
      Config: the method's config class (a :class:`Config`).
      init: ``init(key, model, sample_x, num_clients, config) -> State``.
      pieces_for: ``(model, config) -> RoundPieces``.
      score: e.g. :func:`assigned_score`.
      summary: one line for ``pflax list``.
      needs_train: whether ``score`` personalises on the training split, or a function of the config.
    Returns:
      the :class:`pflax.core.federated.Algorithm`.

    >>> def init(key, model, sample_x, num_clients, config=Config()):  # a placeholder
    ...     return None
    >>> entry = algorithm("mine", Config, init, lambda model, cfg: None, assigned_score(), "a demo")
    >>> entry.name, entry.Config().num_clusters
    ('mine', 3)
    """
    return federated.build(name, Config, init, pieces_for, score, summary, base.check_inputs, needs_train)
