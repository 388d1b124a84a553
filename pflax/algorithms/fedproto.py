"""FedProto (Tan et al., 2022): clients share class prototypes, never model parameters.

State: ``shared`` = the global prototypes ``{"protos": [K, d], "valid": [K]}`` (one per class, valid
once some participant has held the class); ``local`` = every client's whole model (body + head).

One round, for the participants: each one

1. trains its own model for ``local_epochs`` (E = 5) epochs (fresh SGD, FedPAC's common setting) on
   ``CE + lam * MSE(f(x), C_y)``, where ``f`` is the body's feature, ``C_y`` the global prototype of
   the sample's label and the MSE the mean over the minibatch's real samples *and* the feature
   dimensions (PyTorch ``MSELoss``); samples whose class has no valid global prototype contribute 0
   to the MSE (their target is the feature itself, as in the official code), so round 0 is plain CE;
2. computes its prototypes with the trained body: the masked class means of ``f(x)`` over its
   training split (``pflax.core.stats.class_sums`` / ``class_means``), and uploads them with the
   class counts ``n_{i,y}``.

The server sets ``C_y = sum_i n_{i,y} c_{i,y} / sum_i n_{i,y}`` over the participants holding class
``y``; a class no participant holds keeps its previous prototype (and validity)
(``pflax.core.aggregate.aggregate_centroids``). Evaluation: each client's own model on its own test
split.

Defaults and sources: ``lam = 1`` (FedProto's ``ld`` default); local training in FedPAC's common
setting. Deliberate differences from the paper/official code: the global prototype is
count-weighted (the official ``proto_aggregation`` takes the unweighted mean over clients holding the
class); prototypes are computed once after training with the trained body (the official code averages
the features seen during all local epochs' minibatches, i.e. with a moving model); evaluation uses the
model's head (the official code also reports nearest-prototype accuracy). All clients start from one
shared initialisation.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core import aggregate, stats
from ..core.losses import cross_entropy, masked_mean, squared_error_per_sample
from ..core.train import batched_apply

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "prototypes"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    lam: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.lam >= 0, f"FedProto lam must be >= 0, got {self.lam}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared`` = no valid prototypes yet; ``local`` = every client's copy of one initial model."""
    protos = {"protos": jnp.zeros((model.num_classes, model.feature_dim), jnp.float32),
              "valid": jnp.zeros((model.num_classes,), bool)}
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (protos, params))


def prototypes(model, body, x, y, mask):
    """``(means [K, d], counts [K])``: masked class means of the body's features over one client's data."""
    features = batched_apply(lambda xb: model.features(body, xb), x)
    sums = stats.class_sums(features, y, mask, model.num_classes)
    means, _ = stats.class_means(sums)
    return means, sums.counts


def proto_loss(model, global_protos, lam: float):
    """``CE + lam * MSE(f(x), C_y)``; classes without a valid prototype add nothing to the MSE."""
    protos, valid = global_protos["protos"], global_protos["valid"]

    def loss(params, batch, w):
        z = model.features(params["body"], batch["x"])
        ce = masked_mean(cross_entropy(model.logits_from_features(params["head"], z), batch["y"]), w)
        target = jnp.where(valid[batch["y"]][:, None], protos[batch["y"]], jax.lax.stop_gradient(z))
        return ce + lam * masked_mean(squared_error_per_sample(z, target), w)

    return loss


def _client_update(client, global_protos, model, cfg: Config):
    params, loss = base.train(client["local"], proto_loss(model, global_protos, cfg.lam), client, cfg)
    means, counts = prototypes(model, params["body"], client["x"], client["y"], client["mask"])
    return {"params": params, "protos": means, "counts": counts, "n": base.num_samples(client), "loss": loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out = base.run_clients(state, base.client_inputs(state, batch), lambda c, s: _client_update(c, s, model, cfg))
    protos, valid = aggregate.aggregate_centroids(out["protos"], out["counts"], state.shared["protos"], state.shared["valid"])
    metrics = {"n": out["n"], "loss": out["loss"]}
    new_state, metrics = base.finish_round(state, batch, {"protos": protos, "valid": valid}, out["params"], metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedProto round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: c["local"])


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's own model on its own test split: ``{client_ids, accuracy, n}``."
