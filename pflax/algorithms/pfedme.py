"""pFedMe (T. Dinh et al., 2020): personalized models as Moreau envelopes around a global model.

One round, for the participants: each one copies the global model ``w^t`` into a local ``w_i`` and
its personal model ``theta_i``, then, for every minibatch ``B`` of ``local_epochs`` (E = 5) epochs,

1. approximately solves ``min_theta f_i(theta; B) + (lam / 2) ||theta - w_i||^2`` with ``inner_steps``
   (K = 5) gradient steps of size ``personal_lr``, warm-started from the previous ``theta_i``;
2. moves the local model towards it: ``w_i <- w_i - lr * lam * (w_i - theta_i)``.

The server sets ``w^{t+1} = (1 - beta) w^t + beta * sum_i p_i w_i`` with ``p_i = n_i / sum_j n_j``.
Evaluation: each client's personal model ``theta_i`` (kept from its last round) on its own test split.

Deliberate choices: ``lam = 10`` and ``K = 5`` (FedPAC's search, spec D); ``beta = 1``;
``lr = personal_lr = 0.01`` (FedPAC's common lr). Both updates are pFedMe's own plain steps, so
the common setting's momentum and weight decay are not used. ``theta_i`` restarts from ``w^t`` in
every round (the personal model is not sent to the server, and the received global model is the
better warm start after aggregation); a minibatch without real samples changes nothing, so a
participant without data ends the round with ``theta_i = w^t`` (the minimiser of an empty objective
plus the proximal term).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core.train import epoch_order, gather_minibatch

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    lam: float = 10.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.lam > 0 and self.personal_lr > 0, "pFedMe lam and personal_lr must be > 0")
        base.require(self.inner_steps >= 1, "pFedMe inner_steps must be >= 1")
        base.require(0.0 < self.beta <= 2.0, f"pFedMe beta must be in (0, 2], got {self.beta}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared`` = the global model w; ``local`` = every client's personal model theta_i."""
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (params, params))


def moreau_step(theta, w, batch, valid, model, cfg: Config):
    """K gradient steps on ``f(theta; B) + (lam/2) ||theta - w||^2`` (``w`` constant)."""
    ce = base.ce_loss(model)
    grad = jax.grad(lambda t: ce(t, batch, valid) + cfg.lam * base.proximity(t, w))
    step = lambda _, t: jax.tree.map(lambda a, g: a - cfg.personal_lr * g, t, grad(t))
    return jax.lax.fori_loop(0, cfg.inner_steps, step, theta)


def _client_update(client, global_params, model, cfg: Config):
    indices, valid = epoch_order(client["key"], client["mask"], cfg.local_epochs, cfg.batch_size)
    data = {"x": client["x"], "y": client["y"]}

    def step(carry, plan):
        w, theta = carry
        idx, ok = plan
        batch = gather_minibatch(data, idx, ok)
        weights = ok.astype(jnp.float32)
        new_theta = moreau_step(theta, w, batch, weights, model, cfg)
        new_w = jax.tree.map(lambda a, t: a - cfg.lr * cfg.lam * (a - t), w, new_theta)
        keep = jnp.any(ok)  # a minibatch of padding only is a no-op
        pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, old)
        loss = base.ce_loss(model)(new_theta, batch, weights)
        return (pick(new_w, w), pick(new_theta, theta)), (loss, keep)

    (w, theta), (losses, active) = jax.lax.scan(step, (global_params, global_params), (indices, valid))
    mean_loss = jnp.sum(jnp.where(active, losses, 0.0)) / jnp.maximum(active.sum(), 1)
    return {"global": w, "personal": theta, "n": base.num_samples(client), "loss": mean_loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, mean_w = base.run_clients_and_average(
        state, base.client_inputs(state, batch), lambda c, w: _client_update(c, w, model, cfg), "global", state.shared)
    shared = jax.tree.map(lambda w, m: (1.0 - cfg.beta) * w + cfg.beta * m, state.shared, mean_w)
    new_state, metrics = base.finish_round(state, batch, shared, out["personal"], {"n": out["n"], "loss": out["loss"]})
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One pFedMe round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: c["local"])


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's personal model theta_i on its own test split: ``{client_ids, accuracy, n}``."
