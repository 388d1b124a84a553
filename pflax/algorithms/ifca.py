"""IFCA (Ghosh et al., 2020): k cluster models; each client trains the one with the lowest loss.

State: ``shared`` = ``k`` cluster models on a leading axis (default ``k = 3``); ``local`` = every
client's cluster identity ``{"cluster": int32}`` (0 until the client first participates).

One round, for the participants: each one

1. evaluates all ``k`` received cluster models on its whole training split (masked mean
   cross-entropy, the estimated local loss ``F_i(theta_j)``) and picks ``j_i = argmin_j F_i(theta_j)``
   (ties go to the lowest index);
2. trains a copy of ``theta_{j_i}`` for ``local_epochs`` (E = 5) epochs with plain cross-entropy and a
   fresh SGD (FedPAC's common setting), and uploads it with ``j_i``.

The server replaces every cluster model by the sample-size weighted mean of the models its members
uploaded (IFCA's "model averaging" option); a cluster no participant chose keeps its model.
Participants store ``j_i``; non-participants, and participants without data (whose losses are all
0), keep their previous identity.

Evaluation: each client's currently chosen cluster model ``theta_{j_i}`` (after this round's
aggregation) on its own test split.

Defaults and sources: ``k = 3`` (spec D gives no k for IFCA; FedPAC's HypCluster/FedEM rows use 3);
local training is FedPAC's common SGD setting (lr 0.01, momentum 0.5, wd 5e-4, batch 50, E = 5).

Deliberate differences from the paper: the cluster average is weighted by sample size (FedPAC's
common aggregation; IFCA's Algorithm 1 averages members with equal weights); the k models are k
independent random initialisations (model 0 equals FedAvg's for the same key), without IFCA's optional
shared-representation variant; a client that has never participated is evaluated on cluster 0 (it has
no loss estimate yet).

HypCluster (``pflax.algorithms.hypcluster``) is the same rule and reuses this module's code.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import aggregate
from ..core.execution import map_reduce_clients
from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "model_losses"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    num_clusters: int = 3

    def __post_init__(self):
        super().__post_init__()
        base.require(self.num_clusters >= 1, f"{type(self).__module__}: num_clusters must be >= 1, got {self.num_clusters}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared`` = ``num_clusters`` independently initialised models; ``local`` = ``{"cluster": 0}``."""
    state = base.init_state(key, model, sample_x, num_clients, config,
                            lambda params: ((), {"cluster": jnp.zeros((), jnp.int32)}))
    return state.replace(shared=base.stacked_models(key, model, sample_x, config.num_clusters))


def model_losses(model, models, x, y, mask):
    """``[k]``: masked mean training loss of every model of the stack on one client's data."""
    return jax.lax.map(lambda params: base.data_loss(model, params, x, y, mask), models)


def _client_update(client, models, model, cfg: Config):
    losses = model_losses(model, models, client["x"], client["y"], client["mask"])
    chosen = jnp.argmin(losses).astype(jnp.int32)
    params, loss = base.train(base.pick(models, chosen), base.ce_loss(model), client, cfg)
    n = base.num_samples(client)
    # This client's term of every cluster's sample-size weighted mean (zero except at its cluster).
    membership = jax.nn.one_hot(chosen, cfg.num_clusters) * n
    kept = {"cluster": chosen, "cluster_losses": losses, "n": n, "loss": loss}
    copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.num_clusters,) + x.shape), params)
    return kept, aggregate.grouped_term(copies, membership)


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    # Each cluster's mean is summed as the clients finish: the trained models are never stacked.
    out, summed = map_reduce_clients(lambda c, s: _client_update(c, s, model, cfg), base.client_inputs(state, batch),
                                     state.shared, cfg.execution)
    shared = aggregate.grouped_means(summed, fallback=state.shared)
    metrics = {"n": out["n"], "loss": out["loss"], "cluster": out["cluster"], "cluster_losses": out["cluster_losses"]}
    new_local = base.keep_if_empty({"cluster": out["cluster"]}, base.take(state.local, batch.client_ids), out["n"])
    new_state, metrics = base.finish_round(state, batch, shared, new_local, metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One IFCA round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics incl. the chosen cluster."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, models: base.pick(models, c["local"]["cluster"]))


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's chosen cluster model on its own test split: ``{client_ids, accuracy, n}``."
