"""FeSEM (Xie et al., 2021, "Multi-center federated learning"): k-means over client models.

State: ``shared`` = ``{"centers": K models, "ready": bool}``; ``local`` = every client's own model
``W_i`` (from its latest local update) and its cluster ``{"cluster": int32}``.

The objective is ``sum_i ||W_i - W~_{r_i}||^2`` (plus the local losses), minimised alternately. One
round, for the participants:

1. **E-step** (distance-based assignment): ``r_i = argmin_k ||W_i - W~_k||^2`` over all flattened
   parameters, with the client's stored model ``W_i`` (ties to the lowest index);
2. **local update**: ``W_i <- W~_{r_i}``, then ``local_epochs`` (E = 5) epochs of CE training (fresh
   SGD, FedPAC's common setting); upload ``W_i``;
3. **M-step** (server): ``W~_k`` = the sample-size weighted mean of the uploaded models assigned to
   ``k``; a centre without members keeps its model.

Centre initialisation (the first round with any participant holding data): the participants train
their stored model (the shared initial model) locally; the server then picks ``K`` of the trained
models as centres by deterministic farthest-point (maximin) selection -- the first participant with
data, then repeatedly the model farthest from the centres chosen so far -- assigns every participant
to its nearest centre and takes the M-step. From then on rounds are as above.

Evaluation: the centre of each client's cluster, on the client's own test split.

Defaults and sources: ``K = 3`` (the number of centres; FeSEM's experiments use small K, FedPAC's
clustered baselines use 3); L2 distance over all parameters (the paper's choice); FedPAC's common SGD
setting. Deliberate differences from the paper: the M-step averages the models uploaded in *this*
round (after the local update from the assigned centre), so a round needs one communication and the
centres never lag a round behind (the paper's listing takes the M-step on the stored models and then
sends the centres down); the mean is weighted by sample size (the paper: plain mean); the
farthest-point initialisation above replaces a random one, which with one shared initial model would
put every client in the same cluster. A client that never participated is evaluated on centre 0.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "sq_distances", "farthest_point"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    num_clusters: int = 3

    def __post_init__(self):
        super().__post_init__()
        base.require(self.num_clusters >= 1, f"FeSEM num_clusters must be >= 1, got {self.num_clusters}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """Centres are placeholders (copies of the initial model) until the first round initialises them."""
    state = base.init_state(key, model, sample_x, num_clients, config,
                            lambda params: ((), {"params": params, "cluster": jnp.zeros((), jnp.int32)}))
    centers = base.init_heads(base.pick(state.local["params"], 0), config.num_clusters)
    return state.replace(shared={"centers": centers, "ready": jnp.zeros((), bool)})


def sq_distances(rows, centers_flat):
    """``[m, K]`` squared Euclidean distances between flattened models and flattened centres."""
    return jnp.sum(jnp.square(rows[:, None, :] - centers_flat[None, :, :]), axis=-1)


def farthest_point(rows, valid, k: int):
    """Indices ``[k]`` of a maximin selection among the valid rows, starting at the first valid one."""
    first = jnp.argmax(valid)

    def body(j, chosen):
        d = jnp.min(jnp.where(jnp.arange(k)[None, :] < j, sq_distances(rows, rows[chosen]), jnp.inf), axis=1)
        return chosen.at[j].set(jnp.argmax(jnp.where(valid, d, -1.0)))

    return jax.lax.fori_loop(1, k, body, jnp.full((k,), first))


def _client_update(client, shared, model, cfg: Config):
    own = client["local"]["params"]
    centers_flat = base.flat_rows(shared["centers"])
    d = sq_distances(ravel_pytree(own)[0][None, :], centers_flat)[0]
    chosen = jnp.argmin(d).astype(jnp.int32)
    start = jax.tree.map(lambda c, w: jnp.where(shared["ready"], c, w), base.pick(shared["centers"], chosen), own)
    params, loss = base.train(start, base.ce_loss(model), client, cfg)
    return {"params": params, "cluster": chosen, "n": base.num_samples(client), "loss": loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out = base.run_clients(state, base.client_inputs(state, batch), lambda c, s: _client_update(c, s, model, cfg))
    n, ready = out["n"], state.shared["ready"]
    # First round: centres from the trained models (maximin), then the E-step against them.
    rows = base.flat_rows(out["params"])
    seeds = farthest_point(rows, n > 0, cfg.num_clusters)
    seeded = base.take(out["params"], seeds)
    seeded_assign = jnp.argmin(sq_distances(rows, rows[seeds]), axis=1).astype(jnp.int32)
    assign = jnp.where(ready, out["cluster"], seeded_assign)
    fallback = jax.tree.map(lambda c, s: jnp.where(ready, c, s), state.shared["centers"], seeded)
    centers = base.per_cluster_mean(out["params"], jax.nn.one_hot(assign, cfg.num_clusters) * n[:, None], fallback)
    shared = {"centers": centers, "ready": ready | jnp.any(n > 0)}
    new_local = base.keep_if_empty({"params": out["params"], "cluster": assign}, base.take(state.local, batch.client_ids), n)
    metrics = {"n": n, "loss": out["loss"], "cluster": assign}
    new_state, metrics = base.finish_round(state, batch, shared, new_local, metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FeSEM round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics incl. the cluster."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: base.pick(shared["centers"], c["local"]["cluster"]))


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The centre of each client's cluster on its own test split: ``{client_ids, accuracy, n}``."
