"""FedNova (Wang et al., 2020): FedAvg with normalised averaging of the local updates.

Clients take different numbers of local steps ``tau_i = E * ceil(n_i / B)``; plain averaging then
over-weights the clients that ran longest (objective inconsistency). One round, for the
participants: each one runs ``local_epochs`` (E = 5) epochs of SGD from ``w^t`` (fresh optimiser,
FedPAC's common setting) to ``w_i`` and the server sets

    d_i = (w^t - w_i) / ||a_i||_1,   tau_eff = sum_i p_i ||a_i||_1,   w^{t+1} = w^t - tau_eff * sum_i p_i d_i,

with ``p_i = n_i / sum_j n_j``. For SGD with heavy-ball momentum ``rho`` (PyTorch form),
``||a_i||_1 = [tau_i - rho (1 - rho^tau_i) / (1 - rho)] / (1 - rho)`` (``= tau_i`` without momentum).

Deliberate choices: weight decay is treated as part of the local gradient, as in the FedNova code;
a client without data (``tau_i = 0``) has ``p_i = 0``. With equal ``tau_i`` this is exactly FedAvg.
Evaluation: the global model on each client's own test split (FedNova is not personalized).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "momentum_norm"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    pass


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body", "head")))


def momentum_norm(tau, rho: float):
    """``||a_i||_1``: how many "gradient units" ``tau`` heavy-ball steps with momentum ``rho`` add up to."""
    tau = tau.astype(jnp.float32)
    if rho == 0.0:
        return tau
    return (tau - rho * (1.0 - rho**tau) / (1.0 - rho)) / (1.0 - rho)


def _client_update(client, params, model, cfg: Config):
    new, loss = base.train_full(params, client, model, cfg)
    norm = client["norm"]  # ||a_i||_1, computed once for all participants by the server
    # d_i = (w^t - w_i) / ||a_i||_1, zero for a client that took no step.
    scale = jnp.where(norm > 0, 1.0 / jnp.maximum(norm, 1e-12), 0.0)
    direction = jax.tree.map(lambda a, b: (a - b) * scale, params, new)
    return {"direction": direction, "n": base.num_samples(client), "loss": loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    # ||a_i||_1 and the weights depend on the sample sizes only, so they are known before training and
    # the directions are averaged as the clients finish (never stacked).
    norms = jax.vmap(lambda m: momentum_norm(base.local_steps(m, cfg), cfg.momentum))(batch.mask)
    weights = jnp.where(norms > 0, batch.mask.sum(1).astype(jnp.float32), 0.0)
    p = weights / jnp.maximum(weights.sum(), 1.0)
    tau_eff = jnp.sum(p * norms)
    per_client = {**base.client_inputs(state, batch), "norm": norms}
    out, mean_direction = base.run_clients_and_average(
        state, per_client, lambda c, s: _client_update(c, s, model, cfg), "direction",
        jax.tree.map(jnp.zeros_like, state.shared), weights=weights)
    shared = jax.tree.map(lambda w, d: w - tau_eff * d, state.shared, mean_direction)
    metrics = {"n": out["n"], "loss": out["loss"], "tau_norm": norms}
    new_state, metrics = base.finish_round(state, batch, shared, None, metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedNova round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The global model on each client's test split: ``{client_ids, accuracy, n}``."
