"""Ditto (Li, Hu, Beirami and Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021; official code: https://github.com/litian96/ditto): FedAvg for a global
model ``w`` plus a personal model ``v_i`` per client (:mod:`pflax.algorithms.personal`).

One round, for the participants (the paper's Algorithm 1): each one

1. trains a copy of the global model ``w^t`` for ``local_epochs`` (E = 5) epochs with plain CE, as
   FedAvg (fresh SGD), and uploads it;
2. trains its personal model for ``personal_epochs`` epochs (fresh SGD) on the paper's personal
   objective ``CE(v) + (prox_mu / 2) ||v - w^t||^2``, i.e.
   ``v <- v - lr (grad f_i(v) + prox_mu (v - w^t))``, anchored at the *received* global model ``w^t``,
   not at its own updated copy.

The server takes the sample-size weighted mean of the uploaded models. Evaluation: each client's
personal model ``v_i`` on its own test split.

Deliberate choices: ``prox_mu = 1`` (the paper's ``lambda``; FedPAC's tuned value, Xu et al., ICLR 2023,
Appendix B.3, searched over {0.1, 1, 10}); ``personal_epochs`` defaults to E; both phases use FedPAC's
common SGD setting (lr 0.01, momentum 0.5, weight decay 5e-4, batch 50; Appendix B.3); the two phases
use independent shuffling keys. Every ``v_i`` starts as the same initial model as ``w``.

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...              Config(local_epochs=1, personal_epochs=1))
>>> state, metrics = round(state, train)
>>> sorted(metrics)
['client_ids', 'loss', 'n', 'nonfinite', 'personal_loss']
"""
from __future__ import annotations

import dataclasses

import jax

from ..core.federated import State, sample_clients
from . import base, personal

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "personal_loss", "local_update"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """Ditto's setting on top of the common SGD setting.

    Attributes:
      prox_mu: the paper's ``lambda``, the pull ``(prox_mu / 2) ||v - w^t||^2`` of the personal model.
      personal_epochs: epochs of personal training per round.

    >>> Config().prox_mu, Config(personal_epochs=1).personal_epochs
    (1.0, 1)
    """

    prox_mu: float = 1.0
    personal_epochs: int = 5

    def __post_init__(self):
        super().__post_init__()
        base.require(self.prox_mu >= 0, f"Ditto prox_mu must be >= 0, got {self.prox_mu}")
        base.require(self.personal_epochs >= 0, "Ditto personal_epochs must be >= 0")


def personal_loss(model, global_params, prox_mu: float):
    """``CE(v) + (prox_mu / 2) ||v - w^t||^2`` in :func:`pflax.core.train.local_train`'s loss signature;
    its gradient is ``grad f_i(v) + prox_mu (v - w^t)``.

    Args:
      model: the split model.
      global_params: the anchor ``w^t`` (a constant: no gradient flows into it).
      prox_mu: the pull's coefficient.

    Returns:
      ``loss(v, batch, weights) -> scalar``.

    An all-zero ``v`` (CE ``log 3`` on 3 classes) 1 away from the anchor in each of its 19 parameters:

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,))
    >>> v = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0), jnp.ones((1, 4))))
    >>> loss = jax.jit(personal_loss(model, jax.tree.map(jnp.ones_like, v), prox_mu=2.0))
    >>> batch = {"x": jnp.ones((2, 4)), "y": jnp.array([0, 1])}
    >>> print(f"{float(loss(v, batch, jnp.ones(2))):.3f}")  # log 3 + (2 / 2) * 19
    20.099
    """
    ce = base.ce_loss(model)
    return lambda v, batch, w: ce(v, batch, w) + prox_mu * base.proximity(v, global_params)


def local_update(w, participant: dict, model, cfg: Config):
    """One participant's Ditto update.

    Args:
      w: the received global model ``w^t``.
      participant: ``x``, ``y``, ``mask``, ``key`` and ``client`` (its personal model ``v_i``).
      model, cfg: the split model and the config.

    Returns:
      ``(w_i, v_i, metrics)``: the FedAvg copy of ``w`` it uploads, its new personal model, and
      ``{"n", "loss", "personal_loss"}``.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation(); model = pflax.models.mlp(10, hidden=(8,))
    >>> one = {k: getattr(train, k)[0] for k in ("x", "y", "mask")}
    >>> w = jax.eval_shape(model.init, jax.random.PRNGKey(0), train.x[0, :1])
    >>> out = jax.eval_shape(lambda w, v: local_update(w, {**one, "key": jax.random.PRNGKey(1), "client": v},
    ...                                                model, Config()), w, w)
    >>> sorted(out[2]), out[1]["body"]["TorchDense_0"]["kernel"].shape
    (['loss', 'n', 'personal_loss'], (64, 8))
    """
    key_global, key_personal = jax.random.split(participant["key"])
    new_global, loss = base.train(w, base.ce_loss(model), participant, cfg, key=key_global)
    v, v_loss = base.train(participant["client"], personal_loss(model, w, cfg.prox_mu), participant, cfg,
                           key=key_personal, epochs=cfg.personal_epochs)
    return new_global, v, {"n": base.num_samples(participant), "loss": loss, "personal_loss": v_loss}


ALGORITHM = personal.algorithm("ditto", Config, local_update,
                               "Ditto: FedAvg global model plus personal models pulled towards it")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
