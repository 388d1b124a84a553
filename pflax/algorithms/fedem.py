"""FedEM (Marfoq et al., 2021): every client's data is a mixture of M shared components.

State: ``shared`` = ``M`` component models on a leading axis (default ``M = 3``); ``local`` = every
client's mixture weights ``{"pi": [M]}``, starting uniform (``1/M``).

One round, for the participants: each one

1. **E-step** with the received components: per training sample, the responsibilities
   ``q(m | x, y) = pi_m exp(-l_m(x, y)) / sum_m' pi_m' exp(-l_m'(x, y))``, with ``l_m`` the
   cross-entropy of component ``m`` (computed as a softmax over ``log pi_m - l_m``; padded samples get
   ``q = 0``);
2. **M-step** for the mixture weights: ``pi_m = mean over real samples of q(m | x, y)``;
3. trains every component ``m`` for ``local_epochs`` (E = 5) epochs (fresh SGD, FedPAC's common
   setting, its own shuffle) on the responsibility-weighted cross-entropy
   ``sum_b q_b(m) CE_m(b) / |B|`` (the masked minibatch mean of ``q * CE``, as FedEM's code).

The server replaces component ``m`` by the weighted mean of the participants' trained copies with
weight ``sum_samples q(m | x, y) = n_i pi_im`` (a component nobody has weight on is kept).

Prediction (evaluation): ``p(y | x) = sum_m pi_im softmax(h_m(x))_y`` with the client's own ``pi_i``.

Defaults and sources: ``M = 3`` (FedPAC Table 4 reports M = 3 and 5; FL-bench ``n_learners = 3``);
local training in FedPAC's common setting (E = 5 epochs, not FedEM's own local schedule). Deliberate
differences from the paper/official code: the components are ``M`` independent random initialisations
(model 0 equals FedAvg's); the server weight is the responsibility mass ``n_i pi_im`` (the paper's
Alg. 2 weights clients by ``n_i`` and lets the responsibilities act inside the local objective; this is
the brief's rule and reduces to the paper's when a client's responsibilities are one-hot); ``log pi``
is floored at ``log(1e-30)`` so a vanished component never produces ``-inf - (-inf)``. A participant
without data keeps its ``pi`` and contributes weight 0.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core import aggregate
from ..core.execution import map_reduce_clients
from ..core.losses import cross_entropy, masked_mean
from ..core.train import batched_apply
from ..metrics import masked_accuracy

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "responsibilities", "mixture_probabilities"]

LOG_FLOOR = 1e-30


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    num_components: int = 3

    def __post_init__(self):
        super().__post_init__()
        base.require(self.num_components >= 1, f"FedEM num_components must be >= 1, got {self.num_components}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    m = config.num_components
    state = base.init_state(key, model, sample_x, num_clients, config,
                            lambda params: ((), {"pi": jnp.full((m,), 1.0 / m, jnp.float32)}))
    return state.replace(shared=base.stacked_models(key, model, sample_x, m))


def component_logits(model, components, x):
    """``[M, n, K]`` logits of every component on ``x``."""
    return jax.lax.map(lambda params: batched_apply(lambda xb: model.apply(params, xb), x), components)


def responsibilities(model, components, pi, x, y, mask):
    """E-step: ``q [M, n]``, the posterior of each component per sample (columns sum to 1 on real
    samples, 0 on padding)."""
    losses = jax.vmap(lambda logits: cross_entropy(logits, y))(component_logits(model, components, x))  # [M, n]
    log_prior = jnp.log(jnp.maximum(pi, LOG_FLOOR))[:, None]
    q = jax.nn.softmax(log_prior - losses, axis=0)
    return jnp.where(mask[None, :], q, 0.0)


def mixture_probabilities(model, components, pi, x):
    """``[n, K]``: ``sum_m pi_m softmax(h_m(x))``."""
    probs = jax.nn.softmax(component_logits(model, components, x), axis=-1)
    return jnp.einsum("m,mnk->nk", pi, probs, precision=aggregate.EXACT)


def _client_update(client, components, model, cfg: Config):
    x, y, mask = client["x"], client["y"], client["mask"]
    pi = client["local"]["pi"]
    q = responsibilities(model, components, pi, x, y, mask)
    n = base.num_samples(client)
    new_pi = jnp.where(n > 0, q.sum(1) / jnp.maximum(n, 1.0), pi)

    def weighted_ce(params, batch, w):
        return masked_mean(batch["q"] * cross_entropy(model.apply(params, batch["x"]), batch["y"]), w)

    def train_component(args):
        params, q_m, key = args
        return base.train(params, weighted_ce, client, cfg, key=key, data={"x": x, "y": y, "q": q_m})

    keys = jax.random.split(client["key"], cfg.num_components)
    trained, losses = jax.lax.map(train_component, (components, q, keys))
    # Component m is averaged over clients with weights mass_m = sum of the client's q[m]; this
    # client's terms of the M means are summed as the clients finish.
    kept = {"pi": new_pi, "n": n, "loss": losses.sum()}
    return kept, aggregate.grouped_term(trained, q.sum(1))


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, summed = map_reduce_clients(lambda c, s: _client_update(c, s, model, cfg), base.client_inputs(state, batch),
                                     state.shared, cfg.execution)
    shared = aggregate.grouped_means(summed, fallback=state.shared)
    metrics = {"n": out["n"], "loss": out["loss"], "pi": out["pi"]}
    new_state, metrics = base.finish_round(state, batch, shared, {"pi": out["pi"]}, metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedEM round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics incl. the new pi."


def _evaluate(state: State, test):
    model = state.model

    def one(c, components):
        probs = mixture_probabilities(model, components, c["local"]["pi"], c["x"])
        return masked_accuracy(probs, c["y"], c["mask"])

    per_client = {"x": test.x, "y": test.y, "mask": test.mask, "local": base.take(state.local, test.client_ids)}
    acc = base.run_clients(state, per_client, one)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "The client's mixture ``sum_m pi_m softmax(h_m)`` on its own test split: ``{client_ids, accuracy, n}``."
