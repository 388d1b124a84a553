"""FedProx (Li et al., 2020): FedAvg with a proximal term in the local objective.

One round, for the participants: each one starts from the global model ``w^t`` and runs
``local_epochs`` (E = 5) epochs of SGD (fresh optimiser, FedPAC's common setting) on

    CE(w) + (mu / 2) * ||w - w^t||^2        (every parameter, body and head),

then the server takes the sample-size weighted mean of the participants' models, as FedAvg.

Deliberate choices: ``mu`` defaults to 0.01, FedPick's value (FedPAC does not give it; FedCollab's
default is 0.1 and FL-bench's 1.0). Weight decay is kept on top of the proximal term (the common
setting). With ``mu = 0`` a round is exactly FedAvg's; partial work (FedProx's variable local
epochs) is not modelled: every participant runs E full epochs. Evaluation: the global model on each
client's own test split (FedProx is not personalized).
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
    mu: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        base.require(self.mu >= 0, f"FedProx mu must be >= 0, got {self.mu}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body", "head")))


def _train_proximal(params, client, model, cfg: Config):
    """Local SGD anchored at the received global model ``params`` (a constant)."""
    ce = base.ce_loss(model)

    def loss(p, batch, w):
        return ce(p, batch, w) + cfg.mu * base.proximity(p, params)

    return base.train(params, loss, client, cfg)


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, _train_proximal, averaged=("body", "head"))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedProx round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The global model on each client's test split: ``{client_ids, accuracy, n}``."
