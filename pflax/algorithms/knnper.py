"""kNN-Per (Marfoq et al., 2022): FedAvg plus a local kNN memory interpolated at test time.

Training is exactly FedAvg (``local_epochs`` = 5 epochs of full-model SGD from the global model, fresh
optimiser, sample-size weighted mean). At evaluation each client builds a datastore of the global
body's features of its own training samples and, for a test sample with feature ``z``, predicts

    p(y | x) = lam * p_kNN(y | z) + (1 - lam) * softmax(model(x))_y,

where ``p_kNN`` puts on each of the ``k`` nearest training features (squared Euclidean distance) the
weight ``exp(-dist / (d * scale))``, normalised, and sums them per label (``d`` = feature dimension).

Deliberate choices (spec D): ``k = 5`` and ``scale = 1`` as FL-bench; ``lam = 0.5`` (FedPAC tuned it
over {0.5, 0.6, 0.7, 0.8} without reporting the choice; configurable). Padding samples never enter
the datastore (their distance is +inf); a client with fewer than ``k`` real training samples uses
all of them. Weights are computed relative to the nearest neighbour, which leaves the normalised
weights unchanged and cannot underflow to 0/0.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core.aggregate import EXACT
from ..core.train import batched_apply
from ..metrics import masked_accuracy

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "knn_probabilities"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    lam: float = 0.5
    k: int = 5
    scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        base.require(0.0 <= self.lam <= 1.0, f"kNN-Per lam must be in [0, 1], got {self.lam}")
        base.require(self.k >= 1 and self.scale > 0, "kNN-Per needs k >= 1 and scale > 0")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body", "head")))


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, base.train_full, averaged=("body", "head"))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test, batch)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One (FedAvg) round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def knn_probabilities(query, keys, labels, valid, num_classes: int, k: int, scale: float):
    """``p_kNN [q, K]`` from the ``k`` nearest valid ``keys`` of every query feature."""
    d = query.shape[-1]
    # ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b: no [q, n, d] intermediate (600 x 600 x 128 floats).
    sq = jnp.sum(query**2, -1)[:, None] + jnp.sum(keys**2, -1)[None, :] - 2.0 * jnp.matmul(query, keys.T, precision=EXACT)
    dist = jnp.maximum(sq, 0.0)
    dist = jnp.where(valid[None, :], dist, jnp.inf)
    k = min(k, keys.shape[0])
    neg, idx = jax.lax.top_k(-dist, k)
    near = -neg
    usable = jnp.isfinite(near)
    weights = jnp.where(usable, jnp.exp(-(near - near[:, :1]) / (d * scale)), 0.0)
    onehot = jax.nn.one_hot(labels[idx], num_classes)
    votes = jnp.einsum("qk,qkc->qc", weights, onehot, precision=EXACT)
    return votes / jnp.maximum(votes.sum(-1, keepdims=True), 1e-30)


def _evaluate(state: State, test, train):
    model, cfg = state.model, state.config

    def one(c, params):
        keys = batched_apply(lambda xb: model.features(params["body"], xb), c["x"])
        z = batched_apply(lambda xb: model.features(params["body"], xb), c["test_x"])
        p_model = jax.nn.softmax(model.logits_from_features(params["head"], z), axis=-1)
        p_knn = knn_probabilities(z, keys, c["y"], c["mask"], model.num_classes, cfg.k, cfg.scale)
        probs = cfg.lam * p_knn + (1.0 - cfg.lam) * p_model
        return masked_accuracy(probs, c["test_y"], c["test_mask"])

    per_client = {"x": train.x, "y": train.y, "mask": train.mask, "test_x": test.x, "test_y": test.y, "test_mask": test.mask}
    acc = base.run_clients(state, per_client, one)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train)``: accuracy of the kNN-interpolated global model on each
client's test split, with the client's ``train`` split as its datastore (same clients, same order)."""
