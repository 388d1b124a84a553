"""Local-only: every client trains its own full model and nothing is ever communicated.

One "round": each participant runs ``local_epochs`` (E = 5) epochs of full-model SGD on its own data,
from where its own model stopped, with a fresh optimiser (FedPAC's common setting, spec D); the
server does nothing. Evaluation: each client's own model on its own test split.

Deliberate choices: all clients start from the *same* random initialisation (as every FedPAC
baseline); the state's ``shared`` tree is empty, so there is nothing a server could send.
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
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(()))


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, base.train_full, averaged=())
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = "One Local-only round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's own model on its own test split: ``{client_ids, accuracy, n}``."
