"""APFL (Deng et al., 2020): a global model ``w`` and a local model ``v_i``, mixed for prediction.

Each client's personalized model is ``alpha * v_i + (1 - alpha) * w``. One round, for the
participants: starting from the global model ``w^t`` and its own ``v_i``, each one runs
``local_epochs`` (E = 5) epochs where every minibatch updates both

    w   <- w   - lr * grad_w f_i(w)
    v_i <- v_i - lr * grad_v f_i(alpha v_i + (1 - alpha) w) = v_i - lr * alpha * grad f_i(mixed)

(the mixed model's loss is differentiated with respect to ``v_i`` only; ``w`` is a constant there),
and uploads ``w``. The server takes the sample-size weighted mean of the uploaded ``w``.

Deliberate choices: ``alpha = 0.25`` fixed (FedPAC's tuned value, spec D; the paper's adaptive alpha
is not used); both updates share one fresh PyTorch SGD per round (per-leaf momentum and weight decay,
so it is the same as two optimisers) on the same minibatches. Every ``v_i`` starts as the initial
global model. Evaluation: the mixed model on each client's own test split.
"""
from __future__ import annotations

import dataclasses

import jax

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "mixed"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    alpha: float = 0.25

    def __post_init__(self):
        super().__post_init__()
        base.require(0.0 <= self.alpha <= 1.0, f"APFL alpha must be in [0, 1], got {self.alpha}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared`` = the global model w; ``local`` = every client's local model v_i."""
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (params, params))


def mixed(local, global_params, alpha: float):
    """The personalized model ``alpha * v + (1 - alpha) * w``."""
    return jax.tree.map(lambda v, w: alpha * v + (1.0 - alpha) * w, local, global_params)


def _client_update(client, global_params, model, cfg: Config):
    ce = base.ce_loss(model)

    def loss(p, batch, w):
        # w's gradient comes from its own loss only; v's from the mixed model with w held constant.
        personal = mixed(p["v"], jax.lax.stop_gradient(p["w"]), cfg.alpha)
        return ce(p["w"], batch, w) + ce(personal, batch, w)

    params, loss_value = base.train({"w": global_params, "v": client["local"]}, loss, client, cfg)
    return {"global": params["w"], "local": params["v"], "n": base.num_samples(client), "loss": loss_value}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, shared = base.run_clients_and_average(
        state, base.client_inputs(state, batch), lambda c, w: _client_update(c, w, model, cfg), "global", state.shared)
    new_state, metrics = base.finish_round(state, batch, shared, out["local"], {"n": out["n"], "loss": out["loss"]})
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One APFL round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    alpha = state.config.alpha
    return base.evaluate_personal(state, test, lambda c, w: mixed(c["local"], w, alpha))


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The mixed model alpha v_i + (1 - alpha) w on each client's test split."
