"""FedBABU (Oh et al., 2022): train and share only the body; the head stays at its random init.

One round, for the participants: each one trains the body for ``local_epochs`` (E = 5) epochs with
the head frozen (fresh SGD, FedPAC's common setting), and the server replaces the global body by the
sample-size weighted mean of the participants' bodies. The head is shared and never updated, nor
averaged: it stays bit-for-bit at its initialisation during training.

Evaluation (the personalisation): every evaluated client fine-tunes a copy of (global body,
initial head) on its own training split for ``finetune_epochs`` epochs and is scored on its own test
split; the copies are thrown away.

Deliberate choices: the head is frozen by masked optimiser updates (it gets neither gradient steps
nor weight decay), rather than FL-bench's zeroed gradients, which would still decay it. Fine-tuning
updates the whole model by default (``finetune_parts=("body", "head")``, the original paper's main
setting); ``("head",)`` gives head-only fine-tuning. ``finetune_epochs`` defaults to 5 (the
original uses a few epochs; FedPAC does not state it). Fine-tuning uses a PRNG stream of its own, so
evaluating never changes training. ``evaluate`` therefore needs the clients' training data.
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
    finetune_parts: tuple = ("body", "head")

    def __post_init__(self):
        super().__post_init__()
        base.require(self.finetune_epochs >= 0, "FedBABU finetune_epochs must be >= 0")
        base.require(
            len(self.finetune_parts) > 0 and set(self.finetune_parts) <= {"body", "head"},
            f"FedBABU finetune_parts must be a non-empty subset of ('body', 'head'), got {self.finetune_parts}",
        )


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body", "head")))


def _train_body(params, client, model, cfg: Config):
    return base.train_parts(params, ("body",), base.ce_loss(model), client, cfg)


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, _train_body, averaged=("body",))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test, batch)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedBABU round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test, train):
    cfg = state.config
    return base.evaluate_finetuned(state, test, train, base.assembled, tuple(cfg.finetune_parts), cfg.finetune_epochs)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train)``: accuracy on each client's test split after
fine-tuning (global body, initial head) for ``finetune_epochs`` epochs on its ``train`` split."""
