"""LG-FedAvg (Liang et al., 2020) as FedPAC ran it: personal body, shared head (the last linear layer).

One round, for the participants: each one assembles its own body with the global head, trains both
*jointly* for ``local_epochs`` (E = 5) epochs with a fresh SGD (FedPAC's common setting, spec D), and
uploads its head. The server replaces the global head by the sample-size weighted mean of the
participants' heads. Bodies are never averaged: each participant keeps the body it trained.

Deliberate choices (spec D): the shared part is exactly the head and the local part the body, as
in C-PAC ``methods/lg_fedavg.py`` (``w_local_keys = base_weight_keys``); the original paper's FedAvg
pre-training phase is not run (C-PAC does not run it either). All clients start from the same
random initialisation. Evaluation: the client's own body + the global head, on its own test split.
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
    """FedPAC's common SGD setting (lr 0.01, momentum 0.5, wd 5e-4, batch 50, E = 5)."""


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("head",)))


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, base.train_full, averaged=("head",))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One LG-FedAvg round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's body + the global head on its own test split: ``{client_ids, accuracy, n}``."
