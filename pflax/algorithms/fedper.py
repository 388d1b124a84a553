"""FedPer (Arivazhagan et al., 2019): shared body, personal head.

One round, for the participants: each one assembles the global body with its own head, trains body
and head *jointly* for ``local_epochs`` (E = 5) epochs with a fresh SGD (FedPAC's common setting,
spec D; C-PAC ``methods/fedper.py``), and uploads its body. The server replaces the global body by
the sample-size weighted mean of the participants' bodies; every client receives it. Heads are never
averaged: each participant keeps the head it trained; non-participants keep theirs.

Evaluation: global body + the client's own head, on the client's own test split. All clients start
from the same random initialisation. The state stores one global body and one head per client
(every client holds the same body after each round, so this equals per-client bodies).
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
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body",)))


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, base.train_full, averaged=("body",))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedPer round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Global body + each client's head on its own test split: ``{client_ids, accuracy, n}``."
