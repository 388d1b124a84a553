"""IFCA (Ghosh et al., 2020, "An Efficient Framework for Clustered Federated Learning", Algorithm 1
with the model-averaging option; https://github.com/jichan3751/ifca): k cluster models; each client
trains the one with the lowest loss.

State: ``server`` = ``k`` cluster models on a leading axis (default ``k = 3``); ``clients`` = every
client's cluster identity ``{"cluster": int32}`` (0 until the client first participates).

One round, for the participants: each one

1. evaluates all ``k`` received cluster models on its whole training split (masked mean
   cross-entropy, the estimated local loss ``F_i(theta_j)``) and picks ``j_i = argmin_j F_i(theta_j)``
   (ties go to the lowest index);
2. trains a copy of ``theta_{j_i}`` for ``local_epochs`` (E = 5) epochs with plain cross-entropy and a
   fresh SGD (FedPAC's common setting), and uploads it with ``j_i``, as its term of cluster
   ``j_i``'s weighted mean (summed as the clients finish, :mod:`pflax.algorithms.clustered`).

The server replaces every cluster model by the sample-size weighted mean of the models its members
uploaded (IFCA's "model averaging" option); a cluster no participant chose keeps its model.
Participants store ``j_i``; non-participants, and participants without data (whose losses are all
0), keep their previous identity.

Evaluation: each client's currently chosen cluster model ``theta_{j_i}`` (after this round's
aggregation) on its own test split.

Defaults and sources: ``k = 3`` (as FedPAC's clustered baselines, Xu et al., 2023, Table 4: HypCluster
k = 3 and FedEM M = 3); local training is FedPAC's common SGD setting (lr 0.01, momentum 0.5, wd 5e-4,
batch 50, E = 5).

Deliberate differences from the paper: the cluster average is weighted by sample size (FedPAC's
common aggregation; IFCA's Algorithm 1 averages members with equal weights); the k models are k
independent random initialisations (model 0 equals FedAvg's for the same key), without IFCA's optional
shared-representation variant; a client that has never participated is evaluated on cluster 0 (it has
no loss estimate yet).

HypCluster (``pflax.algorithms.hypcluster``) is the same rule and reuses this module's code.

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> state = pflax.ifca.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                         pflax.ifca.Config(local_epochs=1))
>>> state, metrics = pflax.ifca.round(state, train)
>>> state.clients["cluster"].shape, metrics["cluster_losses"].shape
((2,), (2, 3))
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import aggregate, federated
from ..core.federated import State, sample_clients
from . import base, clustered
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "model_losses"]


@dataclasses.dataclass(frozen=True)
class Config(clustered.Config):
    """IFCA's number of cluster models on top of FedPAC's common SGD setting.

    Attributes:
      num_clusters: ``k``, the cluster models (default 3, as FedPAC's clustered baselines), >= 1.

    >>> Config().num_clusters, Config().local_epochs
    (3, 5)
    """


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 IFCA state.

    Args:
      key: the run's PRNG key (:func:`base.stacked_models` draws the ``k`` models from it).
      model, sample_x: the split model and inputs giving its shapes (``sample_x[:1]``).
      num_clients: ``N``, the rows of ``clients``.
      config: :class:`Config` (``num_clusters`` is ``k``).

    Returns:
      ``State`` with ``server`` = ``num_clusters`` independently initialised models on a leading axis
      (:func:`base.stacked_models`: model 0 is FedAvg's initial model) and ``clients`` = ``{"cluster": 0}``
      for every client.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation()
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, Config(num_clusters=2))
    >>> jax.tree.map(lambda a: a.shape, state.server["head"])
    {'TorchDense_0': {'bias': (2, 10), 'kernel': (2, 8, 10)}}
    """
    models = base.stacked_models(key, model, sample_x, config.num_clusters)
    return State.create(key, models, {"cluster": jnp.zeros((), jnp.int32)}, num_clients, model, config)


def model_losses(model, models, x, y, mask):
    """The estimated local losses ``F_i(theta_j)`` of one client.

    Args:
      model: the :class:`pflax.models.SplitModel`.
      models: a stack of ``k`` parameter trees.
      x, y, mask: one client's (padded) training split.
    Returns:
      ``[k]``: the masked mean cross-entropy of every model of the stack (0 without data).

    Two all-zero models predict uniformly over 3 classes, so both losses are ``log 3``:

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> zeros = jax.tree.map(lambda a: jnp.zeros((2,) + a.shape), w)
    >>> losses = model_losses(model, zeros, jnp.ones((3, 4)), jnp.array([0, 1, 2]), jnp.array([True, True, False]))
    >>> print(f"{float(losses[0]):.3f} {float(losses[1]):.3f}")
    1.099 1.099
    """
    return jax.lax.map(lambda params: base.data_loss(model, params, x, y, mask), models)


def _local_update(models, participant: dict, model, cfg: Config) -> dict:
    losses = model_losses(model, models, participant["x"], participant["y"], participant["mask"])
    chosen = jnp.argmin(losses).astype(jnp.int32)
    params, loss = base.train(base.pick(models, chosen), base.ce_loss(model), participant, cfg)
    n = base.num_samples(participant)
    # This client's term of every cluster's sample-size weighted mean (zero except at its cluster).
    membership = jax.nn.one_hot(chosen, cfg.num_clusters) * n
    copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.num_clusters,) + x.shape), params)
    return {"sum": aggregate.grouped_term(copies, membership),
            "client": clustered.unless_empty({"cluster": chosen}, participant),
            "n": n, "loss": loss, "cluster": chosen, "cluster_losses": losses}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """IFCA's round: broadcast the ``k`` models; pick and train the best one; per-cluster means.

    Args:
      model: the cluster models' architecture; cfg: :class:`Config` (``num_clusters``).

    Returns:
      :class:`pflax.core.federated.RoundPieces` (HypCluster's too).

    >>> import pflax
    >>> type(pieces_for(pflax.models.mlp(10, hidden=(8,)), Config(num_clusters=2))).__name__
    'RoundPieces'
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda models, participant: _local_update(models, participant, model, cfg),
        server_update=clustered.average_groups,
    )


ALGORITHM = clustered.algorithm("ifca", Config, init, pieces_for, clustered.assigned_score(),
                                "IFCA: k cluster models, each client trains the one with the lowest loss")
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
