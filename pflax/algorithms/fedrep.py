"""FedRep (Collins et al., 2021): shared body (representation), personal head, trained alternately.

One round, for the participants: each one assembles the global body with its own head, then

1. trains the head for ``head_epochs`` epochs with the body frozen (fresh SGD),
2. trains the body for ``body_epochs`` epochs with the head frozen (another fresh SGD),

and uploads its body. The server replaces the global body by the sample-size weighted mean of the
participants' bodies; heads are never averaged.

Deliberate choices: defaults follow the original paper, 10 head epochs then 1 body epoch (spec D;
FL-bench's ``train_body_epoch`` is also 1; FedPick used 4 + 1); both phases use FedPAC's common SGD
setting (lr 0.01, momentum 0.5, wd 5e-4, batch 50). Freezing is by masked optimiser updates, so the
frozen part gets neither weight decay nor momentum. ``local_epochs`` is not used. Evaluation: global
body + the client's own head on its own test split.
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
    head_epochs: int = 10
    body_epochs: int = 1

    def __post_init__(self):
        super().__post_init__()
        base.require(self.head_epochs >= 0 and self.body_epochs >= 0, "FedRep epochs must be >= 0")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, base.split_layout(("body",)))


def _train_alternating(params, client, model, cfg: Config):
    """Head phase on the frozen body, then body phase on the frozen (new) head; separate keys."""
    key_head, key_body = jax.random.split(client["key"])
    loss = base.ce_loss(model)
    params, head_loss = base.train_parts(params, ("head",), loss, client, cfg, key=key_head, epochs=cfg.head_epochs)
    params, body_loss = base.train_parts(params, ("body",), loss, client, cfg, key=key_body, epochs=cfg.body_epochs)
    return params, body_loss


def _round(state: State, batch, test=None):
    new_state, metrics = base.split_round(state, batch, _train_alternating, averaged=("body",))
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedRep round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, base.assembled)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Global body + each client's head on its own test split: ``{client_ids, accuracy, n}``."
