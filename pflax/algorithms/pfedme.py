"""pFedMe (T. Dinh, Tran and Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS
2020; official code: https://github.com/CharlieDinh/pFedMe): personalized models as Moreau envelopes
around a global model (:mod:`pflax.algorithms.personal`).

One round, for the participants (the paper's Algorithm 1): each one copies the global model ``w^t``
into a local ``w_i`` and its personal model ``theta_i``, then, for every minibatch ``B`` of
``local_epochs`` (E = 5) epochs,

1. approximately solves ``min_theta f_i(theta; B) + (prox_mu / 2) ||theta - w_i||^2`` (the paper's
   ``lambda``) with ``inner_steps`` (K = 5) gradient steps of size ``personal_lr``, warm-started from
   the previous ``theta_i`` (with ``restart_theta``: from the current ``w_i``, as FedCollab's port of
   pFedMe does, https://github.com/baowenxuan/FedCollab, ``src/algorithm/pFedMe.py``);
2. moves the local model towards it: ``w_i <- w_i - lr * prox_mu * (w_i - theta_i)``.

The server sets ``w^{t+1} = (1 - beta) w^t + beta * sum_i p_i w_i`` with ``p_i = n_i / sum_j n_j``.
Evaluation: each client's personal model ``theta_i`` (kept from its last round) on its own test split.

Deliberate choices: ``prox_mu = 10`` and ``K = 5`` (FedPAC's search, Xu et al., ICLR 2023, Appendix
B.3: lambda over {0.1, 1, 10, 100}); ``beta = 1``; ``lr = personal_lr = 0.01`` (FedPAC's common lr).
Both updates are pFedMe's own plain steps, so the common setting's momentum and weight decay are not
used. ``theta_i`` restarts from ``w^t`` in every round (the personal model is not sent to the server,
and the received global model is the better warm start after aggregation); a minibatch without real
samples changes nothing, so a participant without data ends the round with ``theta_i = w^t`` (the
minimiser of an empty objective plus the proximal term).

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> cfg = Config(local_epochs=1, inner_steps=1)
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, cfg)
>>> state, metrics = round(state, train)
>>> metrics["loss"].shape
(2,)
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core.federated import State, sample_clients
from ..core.train import epoch_order, gather_minibatch, step_if
from . import base, personal

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "moreau_step", "local_update"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """pFedMe's setting on top of the common SGD setting (only ``lr``, ``batch_size`` and
    ``local_epochs`` of it are used).

    Attributes:
      prox_mu: the paper's ``lambda``, the Moreau envelope's ``(prox_mu / 2) ||theta - w||^2``.
      inner_steps: K, gradient steps on the inner problem per minibatch.
      personal_lr: the inner steps' size.
      beta: the server's step ``w <- (1 - beta) w + beta * mean``, in (0, 2].
      restart_theta: start every minibatch's inner problem from the local model ``w_i`` instead of
        the previous ``theta_i`` (FedCollab's port; the pFedMe code warm-starts).

    >>> Config().prox_mu, Config().inner_steps, Config().beta, Config().restart_theta
    (10.0, 5, 1.0, False)
    """

    prox_mu: float = 10.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: float = 1.0
    restart_theta: bool = False

    def __post_init__(self):
        super().__post_init__()
        base.require(self.prox_mu > 0 and self.personal_lr > 0, "pFedMe prox_mu and personal_lr must be > 0")
        base.require(self.inner_steps >= 1, "pFedMe inner_steps must be >= 1")
        base.require(0.0 < self.beta <= 2.0, f"pFedMe beta must be in (0, 2], got {self.beta}")


def moreau_step(theta, w, batch, valid, model, cfg: Config):
    """K gradient steps on ``f(theta; B) + (prox_mu/2) ||theta - w||^2`` (``w`` constant).

    Args:
      theta: the warm start.
      w: the local model ``w_i`` (the proximal anchor).
      batch: the minibatch ``{"x", "y"}``; valid: its 0/1 sample weights.
      model, cfg: the split model and the config.

    Returns:
      The approximate minimiser ``theta``.

    With zero sample weights only the pull acts: each step moves ``theta`` by ``personal_lr * prox_mu
    = 0.5`` of the way to ``w``.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> theta, w = jax.tree.map(jnp.zeros_like, w), jax.tree.map(jnp.ones_like, w)
    >>> batch = {"x": jnp.ones((2, 4)), "y": jnp.array([0, 1])}
    >>> new = moreau_step(theta, w, batch, jnp.zeros(2), model, Config(personal_lr=0.05, inner_steps=2))
    >>> new["head"]["TorchDense_0"]["bias"].tolist()
    [0.75, 0.75, 0.75]
    """
    ce = base.ce_loss(model)
    grad = jax.grad(lambda t: ce(t, batch, valid) + cfg.prox_mu * base.proximity(t, w))
    step = lambda _, t: jax.tree.map(lambda a, g: a - cfg.personal_lr * g, t, grad(t))
    return jax.lax.fori_loop(0, cfg.inner_steps, step, theta)


def local_update(global_params, participant: dict, model, cfg: Config):
    """One participant's pFedMe update.

    Args:
      global_params: the received global model ``w^t``.
      participant: ``x``, ``y``, ``mask`` and ``key`` (its old ``theta_i`` is not used: it restarts from ``w^t``).
      model, cfg: the split model and the config.

    Returns:
      ``(w_i, theta_i, {"n", "loss"})``; ``loss`` is the mean CE of the new ``theta`` over the
      minibatches with data.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(2, hidden=(3,))
    >>> w = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 5)))  # shapes only
    >>> one = dict(x=jnp.ones((6, 5)), y=jnp.zeros(6, jnp.int32), mask=jnp.arange(6) < 4, key=jax.random.PRNGKey(2))
    >>> w_i, theta, m = jax.eval_shape(lambda w: local_update(w, one, model, Config(local_epochs=2)), w)
    >>> theta["body"]["TorchDense_0"]["kernel"].shape, m["loss"].shape
    ((5, 3), ())
    """
    indices, valid = epoch_order(participant["key"], participant["mask"], cfg.local_epochs, cfg.batch_size)
    data = {"x": participant["x"], "y": participant["y"]}

    def step(carry, plan):
        idx, ok = plan

        def moreau(carry):
            w, theta = carry
            batch = gather_minibatch(data, idx, ok)
            weights = ok.astype(jnp.float32)
            new_theta = moreau_step(w if cfg.restart_theta else theta, w, batch, weights, model, cfg)
            new_w = jax.tree.map(lambda a, t: a - cfg.lr * cfg.prox_mu * (a - t), w, new_theta)
            return (new_w, new_theta), base.ce_loss(model)(new_theta, batch, weights)

        keep = jnp.any(ok)  # a minibatch of padding only is a no-op
        carry, loss = step_if(keep, moreau, carry)
        return carry, (loss, keep)

    (w, theta), (losses, active) = jax.lax.scan(step, (global_params, global_params), (indices, valid))
    mean_loss = jnp.sum(jnp.where(active, losses, 0.0)) / jnp.maximum(active.sum(), 1)
    return w, theta, {"n": base.num_samples(participant), "loss": mean_loss}


def server_step(w, mean, cfg: Config):
    """The paper's server update ``(1 - beta) w^t + beta * mean``.

    Args:
      w: the global model ``w^t``; mean: the participants' weighted mean ``sum_i p_i w_i``;
      cfg: :class:`Config` (``beta``).

    Returns:
      ``w^{t+1}``.

    >>> import jax.numpy as jnp
    >>> server_step({"w": jnp.array(0.0)}, {"w": jnp.array(4.0)}, Config(beta=0.5))["w"].tolist()
    2.0
    """
    return jax.tree.map(lambda a, m: (1.0 - cfg.beta) * a + cfg.beta * m, w, mean)


ALGORITHM = personal.algorithm("pfedme", Config, local_update,
                               "pFedMe: personal models as Moreau envelopes around the global model",
                               server_step=server_step)
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
