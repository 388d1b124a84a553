"""Fed-RoD (Chen & Chao, 2022): a generic model trained for balance, plus a personal head.

Model: the shared body ``f``, the shared *generic* head ``g`` and a per-client *personal* head ``p``
(same shape as the model's head). The personal prediction is ``g(f(x)) + p(f(x))`` (the original
paper's residual form); the generic prediction is ``g(f(x))``.

One round, for the participants: each one runs ``local_epochs`` (E = 5) epochs of SGD (fresh
optimiser, FedPAC's common setting) on the sum of

* the **balanced softmax** loss of the generic path: CE of ``g(z) + gamma * log n_{i,y}``, where
  ``n_{i,y}`` is the client's number of training samples of class ``y`` (``gamma = 1``); classes the
  client lacks get a -1e9 offset (``log 0``), so they drop out of its softmax;
* plain CE of the personal path ``stop_gradient(g(z)) + p(stop_gradient(z))``.

The server takes the sample-size weighted mean of bodies and generic heads; personal heads are never
averaged. Evaluation: the personal path on each client's own test split.

Deliberate choices: the personal loss trains only the personal head (``z`` and ``g(z)`` are constants
there), so the shared body and generic head learn from the balanced objective alone, which is what
the server averages; the personal head starts at zero, so each client's personal model starts as the
generic one. One optimiser (per-leaf momentum and decay) serves all three parts.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core.losses import cross_entropy, masked_mean
from ..core.train import batched_apply
from ..metrics import masked_accuracy

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "personal_logits"]

ABSENT_CLASS_OFFSET = -1e9  # stands for log(0) without producing inf - inf = NaN anywhere


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    gamma: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.gamma >= 0, f"Fed-RoD gamma must be >= 0, got {self.gamma}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared = {"body", "head"}`` (generic); ``local = {"personal": zero head}`` per client."""
    zero_head = lambda params: jax.tree.map(jnp.zeros_like, params["head"])
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (params, {"personal": zero_head(params)}))


def personal_logits(model, shared, personal, x):
    z = model.features(shared["body"], x)
    return model.logits_from_features(shared["head"], z) + model.logits_from_features(personal, z)


def balanced_offsets(y, mask, num_classes: int, gamma: float):
    """``gamma * log n_{i,y}`` per class from the client's training labels."""
    counts = jnp.zeros((num_classes,), jnp.float32).at[y].add(mask.astype(jnp.float32))
    return jnp.where(counts > 0, gamma * jnp.log(jnp.maximum(counts, 1.0)), ABSENT_CLASS_OFFSET)


def _client_update(client, shared, model, cfg: Config):
    offsets = balanced_offsets(client["y"], client["mask"], model.num_classes, cfg.gamma)

    def loss(p, batch, w):
        z = model.features(p["body"], batch["x"])
        generic = model.logits_from_features(p["head"], z)
        balanced = masked_mean(cross_entropy(generic + offsets, batch["y"]), w)
        personal = jax.lax.stop_gradient(generic) + model.logits_from_features(p["personal"], jax.lax.stop_gradient(z))
        return balanced + masked_mean(cross_entropy(personal, batch["y"]), w)

    params, loss_value = base.train({**shared, **client["local"]}, loss, client, cfg)
    return {"shared": {k: params[k] for k in ("body", "head")}, "personal": params["personal"],
            "n": base.num_samples(client), "loss": loss_value}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, shared = base.run_clients_and_average(
        state, base.client_inputs(state, batch), lambda c, s: _client_update(c, s, model, cfg), "shared", state.shared)
    new_local = {"personal": out["personal"]}
    new_state, metrics = base.finish_round(state, batch, shared, new_local, {"n": out["n"], "loss": out["loss"]})
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One Fed-RoD round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    model = state.model

    def one(c, shared):
        logits = batched_apply(lambda xb: personal_logits(model, shared, c["local"]["personal"], xb), c["x"])
        return masked_accuracy(logits, c["y"], c["mask"])

    per_client = {"x": test.x, "y": test.y, "mask": test.mask, "local": base.take(state.local, test.client_ids)}
    acc = base.run_clients(state, per_client, one)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The personal path g(z) + p_i(z) on each client's test split: ``{client_ids, accuracy, n}``."
