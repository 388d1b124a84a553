"""SCAFFOLD (Karimireddy et al., 2020), option II control variates.

State: the global model ``w``, the server control variate ``c`` and one control variate ``c_i`` per
client (all start at zero). One round, for the participants: each one starts from ``w^t`` and runs
``local_epochs`` (E) epochs of minibatch SGD with the corrected gradient

    w <- w - lr * (grad f_i(w) - c_i + c),

implemented as the loss ``CE(w) + <w, c - c_i>`` (the correction is a constant, so it is exactly the
gradient above). With ``K_i`` its number of local steps, it then sets

    c_i+ = c_i - c + (w^t - w_i) / (K_i * lr)

and the server updates ``w <- w + global_lr * mean_i (w_i - w^t)`` and
``c <- c + (|S| / N) * mean_i (c_i+ - c_i)``.

Deliberate choices: ``global_lr = 1`` (FL-bench default, spec D). Both means are the paper's
*unweighted* means over the participants that have data (a client with no data takes no step,
``K_i = 0``, keeps its ``c_i`` and is left out; ``|S|`` counts participants with data).
``K_i = E * ceil(n_i / batch_size)``, the number of minibatches with data. The local optimiser is
FedPAC's common PyTorch SGD (momentum 0.5, wd 5e-4) applied to the corrected gradient; option II's
``(w^t - w_i) / (K lr)`` is exact for plain SGD and an approximation with momentum or weight decay
(set both to 0 for the textbook algorithm). Evaluation: the global model on each client's test split.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    global_lr: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.global_lr > 0, f"SCAFFOLD global_lr must be > 0, got {self.global_lr}")
        base.require(self.lr > 0, "SCAFFOLD needs lr > 0 (the control variates divide by it)")


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """``shared = {"params": w, "c": c}``; ``local`` = every client's ``c_i``; all controls are zero."""
    return base.init_state(
        key, model, sample_x, num_clients, config,
        lambda params: ({"params": params, "c": _zeros(params)}, _zeros(params)),
    )


def _client_update(client, shared, model, cfg: Config):
    w0, c, c_i = shared["params"], shared["c"], client["local"]
    ce = base.ce_loss(model)
    correction = jax.tree.map(lambda a, b: a - b, c, c_i)

    def loss(p, batch, w):
        drift = sum(jnp.vdot(x, d) for x, d in zip(jax.tree.leaves(p), jax.tree.leaves(correction)))
        return ce(p, batch, w) + drift

    w_i, loss_value = base.train(w0, loss, client, cfg)
    k = base.local_steps(client["mask"], cfg)
    scale = jnp.where(k > 0, 1.0 / (jnp.maximum(k, 1) * cfg.lr), 0.0)
    # A client with no step keeps its control variate (c_i+ = c_i).
    c_new = jax.tree.map(lambda ci, cc, a, b: jnp.where(k > 0, ci - cc + (a - b) * scale, ci), c_i, c, w0, w_i)
    return {
        "deltas": {
            "w": jax.tree.map(lambda a, b: a - b, w_i, w0),
            "c": jax.tree.map(lambda a, b: a - b, c_new, c_i),
        },
        "c_i": c_new,
        "n": base.num_samples(client),
        "loss": loss_value,
    }


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    # Unweighted means over the participants with data, summed as the clients finish (never stacked).
    active = (batch.mask.sum(1) > 0).astype(jnp.float32)
    no_update = {"w": _zeros(state.shared["params"]), "c": _zeros(state.shared["c"])}
    out, mean = base.run_clients_and_average(state, base.client_inputs(state, batch),
                                             lambda c, s: _client_update(c, s, model, cfg), "deltas", no_update,
                                             weights=active)
    share = active.sum() / state.num_clients
    shared = {
        "params": jax.tree.map(lambda w, d: w + cfg.global_lr * d, state.shared["params"], mean["w"]),
        "c": jax.tree.map(lambda c, d: c + share * d, state.shared["c"], mean["c"]),
    }
    new_state, metrics = base.finish_round(state, batch, shared, out["c_i"], {"n": out["n"], "loss": out["loss"]})
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One SCAFFOLD round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: shared["params"])


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The global model on each client's test split: ``{client_ids, accuracy, n}``."
