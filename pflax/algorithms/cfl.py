"""CFL (Sattler et al., 2020, "Clustered Federated Learning: Model-Agnostic Distributed Multitask
Optimization Under Privacy Constraints", IEEE TNNLS, Algorithm 1;
https://github.com/felisat/clustered-federated-learning): clustered FL by recursive bi-partitioning of
the client population.

State: ``server`` = ``{"models": max_clusters cluster models, "active": [max_clusters]}`` (static
maximum, slot 0 active at the start, every slot starting as the same initial model); ``clients`` =
every client's cluster ``{"cluster": int32}`` (all 0 at the start).

One round, for the participants: each one trains its cluster's model ``theta_c`` for
``local_epochs`` (E = 5) epochs with CE (fresh SGD, FedPAC's common setting) and uploads the update
``dtheta_i = theta_i - theta_c``. Then the server, for every cluster ``c`` that was active at the
start of the round, with ``p_i = n_i / sum_{j in c} n_j`` over its participants with data:

* ``mean_norm = ||sum_i p_i dtheta_i||`` and ``max_norm = max_i ||dtheta_i||``;
* if ``mean_norm < eps1`` (the cluster is near a stationary point of its joint objective) and
  ``max_norm > eps2`` (some clients are still far from theirs) and the cluster has more than
  ``min_cluster_size`` such participants and ``round >= start_round`` and a free slot exists, it is
  split in two by agglomerative clustering (``linkage``) of its members on the distance
  ``-cos(dtheta_i, dtheta_j)`` (cosine similarities with a guarded norm: a zero update has similarity
  0); the second group moves to the first free slot, which starts from ``theta_c``;
* finally every cluster model becomes ``theta_c + sum_i p_i dtheta_i`` over its (new) members (the
  weighted mean of their trained models, :func:`pflax.algorithms.clustered.member_means` over the
  stacked uploads: the splits are decided after every upload); a cluster without participants keeps
  its model.

Clusters are examined in slot order; a cluster created in this round is not examined again before the
next round. Evaluation: each client's cluster model on its own test split.

Defaults and sources (FL-bench, https://github.com/KarhouTam/FL-bench, ``cfl.py``, and the official
notebook): ``eps1 = 0.4``, ``eps2 = 1.6``, ``min_cluster_size = 2`` (split only clusters of at least
3), ``start_round = 20``, complete linkage (the official code's
``AgglomerativeClustering(linkage="complete")`` on ``-S``); ``linkage="single"`` gives the bipartition
that exactly minimises the maximal cross-cluster similarity (the paper's criterion). The thresholds are
absolute update norms, so they depend on lr, E and the model: with FedPAC's setting (lr 0.01, E = 5)
re-tune them (watch ``metrics["mean_norm"]`` and ``metrics["max_norm"]``). ``max_clusters = 8`` is the
static maximum that keeps ``round`` jit-able; once every slot is in use no more splits happen.

Deliberate differences from the official code/FL-bench: the norms and the cluster average are
sample-size weighted (the paper's ``|D_i| / |D_c|``; the code uses equal weights); only this round's
participants enter the similarities and norms (FL-bench also uses stale updates of earlier rounds;
the official code runs with full participation); a non-participant of a splitting cluster stays in the
slot of the first group.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..core import federated
from ..core.aggregate import EXACT, normalized_weights
from ..core.federated import State, sample_clients
from . import base, clustered
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "cosine_similarities", "bipartition"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """CFL's split criterion (module docstring; Sattler et al., 2020, Algorithm 1) on top of FedPAC's
    common SGD setting.

    Attributes:
      eps1: split only when the norm of the cluster's mean update is below this.
      eps2: split only when some member's update norm is above this.
      min_cluster_size: split only clusters with more participants (with data) than this, >= 2.
      start_round: no split before this round.
      max_clusters: the static number of cluster slots.
      linkage: ``"complete"`` (the official code) or ``"single"`` (the paper's criterion).

    >>> Config().eps1, Config().eps2, Config().linkage
    (0.4, 1.6, 'complete')
    >>> Config(linkage="average")
    Traceback (most recent call last):
    ...
    ValueError: CFL linkage must be 'complete' or 'single', got 'average'
    """

    eps1: float = 0.4
    eps2: float = 1.6
    min_cluster_size: int = 2
    start_round: int = 20
    max_clusters: int = 8
    linkage: str = "complete"

    def __post_init__(self):
        super().__post_init__()
        base.require(self.eps1 >= 0 and self.eps2 >= 0, f"CFL eps1, eps2 must be >= 0, got {self.eps1}, {self.eps2}")
        base.require(self.min_cluster_size >= 2,
                     f"CFL min_cluster_size must be >= 2 (a split needs 3 members), got {self.min_cluster_size}")
        base.require(self.start_round >= 0, "CFL start_round must be >= 0")
        base.require(self.max_clusters >= 1, f"CFL max_clusters must be >= 1, got {self.max_clusters}")
        base.require(self.linkage in ("complete", "single"), f"CFL linkage must be 'complete' or 'single', got {self.linkage!r}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """Every slot starts as the one initial model (FedAvg's for the same key), only slot 0 active;
    every client in cluster 0.

    Args:
      key: PRNG key; the model comes from the first of ``split(key, 3)``.
      model: a split model; sample_x: one client's inputs (only ``sample_x[:1]``'s shape is used).
      num_clients: ``N``; config: :class:`Config` (``max_clusters`` slots).

    Returns:
      ``State`` with ``server = {"models": [max_clusters, ...], "active": [max_clusters]}`` and
      ``clients = {"cluster": 0}`` for every client.

    >>> import jax, jax.numpy as jnp, pflax
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), jnp.zeros((1, 8, 8, 1)), 5,
    ...              Config(max_clusters=3))
    >>> state.server["active"].tolist(), state.clients["cluster"].tolist()
    ([True, False, False], [0, 0, 0, 0, 0])
    """
    params = model.init(jax.random.split(key, 3)[0], sample_x[:1])
    active = jnp.zeros((config.max_clusters,), bool).at[0].set(True)
    server = {"models": federated.broadcast_rows(params, config.max_clusters), "active": active}
    return State.create(key, server, {"cluster": jnp.zeros((), jnp.int32)}, num_clients, model, config)


def cosine_similarities(rows):
    """Pairwise cosine similarities of update vectors, with a guarded norm.

    Args:
      rows: ``[m, P]`` flattened updates ``dtheta_i``.

    Returns:
      ``[m, m]`` similarities; a zero vector has similarity 0 to everything (itself included).

    >>> import jax.numpy as jnp
    >>> cosine_similarities(jnp.array([[1.0, 0.0], [0.0, 0.0]])).tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    norms = jnp.linalg.norm(rows, axis=-1, keepdims=True)
    unit = jnp.where(norms > 0, rows / jnp.where(norms > 0, norms, 1.0), 0.0)
    return jnp.matmul(unit, unit.T, precision=EXACT)


def bipartition(similarity, members, linkage: str = "complete"):
    """Agglomerative clustering of the ``members`` into two groups on the distance ``-similarity``.

    Args:
      similarity: ``[m, m]`` pairwise similarities.
      members: ``[m]`` bool, the rows to partition.
      linkage: ``"complete"`` (the distance of two groups is their largest pairwise distance) or
        ``"single"`` (the smallest); every merge joins the two closest groups until two remain.
    Returns:
      a boolean ``[m]``: True for members of the group *not* containing the first member (False for
      non-members).

    >>> import jax.numpy as jnp
    >>> s = cosine_similarities(jnp.array([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0]]))
    >>> bipartition(s, jnp.array([True, True, True])).tolist()
    [False, False, True]
    """
    m = similarity.shape[0]
    combine = jnp.maximum if linkage == "complete" else jnp.minimum
    eye = jnp.eye(m, dtype=bool)

    def merge(_, carry):
        dist, alive, label = carry
        usable = alive[:, None] & alive[None, :] & ~eye
        flat = jnp.argmin(jnp.where(usable, dist, jnp.inf))
        a, b = jnp.minimum(flat // m, flat % m), jnp.maximum(flat // m, flat % m)
        row = combine(dist[a], dist[b])
        merged = (dist.at[a, :].set(row).at[:, a].set(row), alive.at[b].set(False), jnp.where(label == b, a, label))
        go = alive.sum() > 2
        return jax.tree.map(lambda new, old: jnp.where(go, new, old), merged, carry)

    init = (-similarity, members, jnp.arange(m))
    _, alive, label = jax.lax.fori_loop(0, max(m - 2, 0), merge, init)
    first = jnp.argmax(alive)
    return members & (label != first)


def _local_update(server, participant: dict, model, cfg: Config) -> dict:
    start = base.pick(server["models"], participant["client"]["cluster"])
    params, loss = base.train(start, base.ce_loss(model), participant, cfg)
    delta = ravel_pytree(params)[0] - ravel_pytree(start)[0]
    return {"params": params, "delta": delta, "n": base.num_samples(participant), "loss": loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    cfg = state.config
    n, delta = uploads["n"], uploads["delta"]
    start_cluster = federated.take(state.clients, batch.client_ids)["cluster"]
    similarity = cosine_similarities(delta)
    norms = jnp.linalg.norm(delta, axis=-1)
    active0 = state.server["active"]

    def examine(c, carry):
        assign, active, models, stats = carry
        members = (start_cluster == c) & (n > 0) & active0[c]
        p = normalized_weights(jnp.where(members, n, 0.0))
        mean_norm = jnp.linalg.norm(jnp.matmul(p, delta, precision=EXACT))
        max_norm = jnp.max(jnp.where(members, norms, 0.0))
        free = ~active
        new_slot = jnp.argmax(free)
        split = ((mean_norm < cfg.eps1) & (max_norm > cfg.eps2) & (members.sum() > cfg.min_cluster_size)
                 & (state.round >= cfg.start_round) & jnp.any(free))
        second = bipartition(similarity, members, cfg.linkage)
        assign = jnp.where(split & second, new_slot, assign)
        active = active.at[new_slot].set(active[new_slot] | split)
        models = jax.tree.map(lambda a: a.at[new_slot].set(jnp.where(split, a[c], a[new_slot])), models)
        stats = {"mean_norm": stats["mean_norm"].at[c].set(mean_norm), "max_norm": stats["max_norm"].at[c].set(max_norm),
                 "split": stats["split"].at[c].set(split)}
        return assign, active, models, stats

    k = cfg.max_clusters
    stats0 = {"mean_norm": jnp.zeros((k,)), "max_norm": jnp.zeros((k,)), "split": jnp.zeros((k,), bool)}
    assign, active, models, stats = jax.lax.fori_loop(
        0, k, examine, (start_cluster, active0, state.server["models"], stats0))
    models = clustered.member_means(uploads["params"], assign, n, k, fallback=models)
    client_rows = base.keep_if_empty({"cluster": assign}, {"cluster": start_cluster}, n)
    metrics = {"n": n, "loss": uploads["loss"], "cluster": client_rows["cluster"], **stats}
    return {"models": models, "active": active}, client_rows, metrics


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """CFL's round: broadcast the cluster models; each participant trains its cluster's model and
    uploads it with its update; the server splits clusters and takes the per-cluster means.

    Args:
      model: the split model the cluster slots hold; cfg: :class:`Config` (the split criterion).

    Returns:
      The :class:`pflax.core.federated.RoundPieces` that :func:`pflax.core.federated.run_round` runs.

    >>> import pflax
    >>> type(pieces_for(pflax.models.mlp(10, hidden=(8,)), Config())).__name__
    'RoundPieces'
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda server, participant: _local_update(server, participant, model, cfg),
        server_update=_server_update,
    )


ALGORITHM = clustered.algorithm("cfl", Config, init, pieces_for, clustered.assigned_score(lambda s: s["models"]),
                                "CFL: recursive bi-partitioning of clients by cosine similarity of updates")
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
