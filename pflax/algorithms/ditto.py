"""Ditto (Li et al., 2021): FedAvg for a global model ``w`` plus a personal model ``v_i`` per client.

One round, for the participants: each one

1. trains a copy of the global model ``w^t`` for ``local_epochs`` (E = 5) epochs with plain CE, as
   FedAvg (fresh SGD), and uploads it;
2. trains its personal model for ``personal_epochs`` epochs (fresh SGD) on
   ``CE(v) + (lam / 2) ||v - w^t||^2``, i.e. ``v <- v - lr (grad f_i(v) + lam (v - w^t))``, anchored at
   the *received* global model ``w^t`` (the paper's Algorithm 1), not at its own updated copy.

The server takes the sample-size weighted mean of the uploaded models. Evaluation: each client's
personal model ``v_i`` on its own test split.

Deliberate choices: ``lam = 1`` (FedPAC's tuned value, spec D); ``personal_epochs`` defaults to E;
both phases use FedPAC's common SGD setting (momentum and weight decay included); the two phases use
independent shuffling keys. Every ``v_i`` starts as the same initial model as ``w``.
"""
from __future__ import annotations

import dataclasses

import jax

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    lam: float = 1.0
    personal_epochs: int = 5

    def __post_init__(self):
        super().__post_init__()
        base.require(self.lam >= 0, f"Ditto lam must be >= 0, got {self.lam}")
        base.require(self.personal_epochs >= 0, "Ditto personal_epochs must be >= 0")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared`` = the global model w; ``local`` = every client's personal model v_i."""
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (params, params))


def personal_loss(model, global_params, lam: float):
    """``CE(v) + (lam / 2) ||v - w^t||^2``; its gradient is ``grad f_i(v) + lam (v - w^t)``."""
    ce = base.ce_loss(model)
    return lambda v, batch, w: ce(v, batch, w) + lam * base.proximity(v, global_params)


def _client_update(client, global_params, model, cfg: Config):
    key_global, key_personal = jax.random.split(client["key"])
    new_global, loss = base.train(global_params, base.ce_loss(model), client, cfg, key=key_global)
    personal, personal_loss_value = base.train(
        client["local"], personal_loss(model, global_params, cfg.lam), client, cfg,
        key=key_personal, epochs=cfg.personal_epochs,
    )
    return {"global": new_global, "personal": personal, "n": base.num_samples(client),
            "loss": loss, "personal_loss": personal_loss_value}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, shared = base.run_clients_and_average(
        state, base.client_inputs(state, batch), lambda c, w: _client_update(c, w, model, cfg), "global", state.shared)
    metrics = {"n": out["n"], "loss": out["loss"], "personal_loss": out["personal_loss"]}
    new_state, metrics = base.finish_round(state, batch, shared, out["personal"], metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One Ditto round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: c["local"])


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's personal model v_i on its own test split: ``{client_ids, accuracy, n}``."
