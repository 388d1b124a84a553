"""FedAvg-FT: FedAvg training, evaluated after local fine-tuning of the whole model.

Training is exactly FedAvg: each participant runs ``local_epochs`` (E = 5) epochs of full-model SGD
from the global model with a fresh optimiser, and the server takes the sample-size weighted mean.

Evaluation (the personalisation): every evaluated client copies the *current* global model, fine-
tunes the whole model for ``finetune_epochs`` epochs on its own training split with a fresh SGD of
the same setting, and is scored on its own test split. The fine-tuned copies are thrown away; the
state is not changed.

Deliberate choices (spec D): the paper does not state the fine-tuning length; the official code's
``acc2`` is the accuracy after the 5 local epochs of the round, so the default is
``finetune_epochs = local_epochs = 5``. Fine-tuning starts from the *aggregated* model ``w^{t+1}``
(not the pre-aggregation local model) and uses a PRNG stream of its own, so evaluating never
changes the training trajectory. ``evaluate`` therefore needs the clients' training data.
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
    finetune_epochs: int = 5

    def __post_init__(self):
        super().__post_init__()
        base.require(self.finetune_epochs >= 0, "FedAvg-FT finetune_epochs must be >= 0")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body", "head")))


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, base.train_full, averaged=("body", "head"))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test, batch)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = """One FedAvg round: ``(state, batch[, test]) -> (state, metrics)``. With ``test`` (same
clients as ``batch``), ``metrics["accuracy"]`` is the fine-tuned accuracy of the new global model."""


def _evaluate(state: State, test, train):
    return base.evaluate_finetuned(
        state, test, train, base.assembled, ("body", "head"), state.config.finetune_epochs
    )


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train)``: accuracy on each client's test split of the global
model after ``finetune_epochs`` epochs of full-model fine-tuning on that client's ``train`` split
(rows of ``test`` and ``train`` must be the same clients)."""
