"""APFL (Deng, Kamani and Mahdavi, "Adaptive Personalized Federated Learning", arXiv:2003.13461, 2020;
official code: https://github.com/MLOPTPSU/FedTorch): a global model ``w`` and a local model ``v_i``,
mixed for prediction (:mod:`pflax.algorithms.personal`).

Each client's personalized model is ``alpha * v_i + (1 - alpha) * w``: a mixture of the parameters, as
the paper writes it (``mixing = "parameters"``, the default), or of the two models' outputs
(logits), as the official code computes it (``mixing = "outputs"``: FedTorch's ``inference_personal``
returns ``alpha * v(x) + (1 - alpha) * w(x)``). One round, for the participants (the paper's
Algorithm 1 with a fixed ``alpha``): starting from the global model ``w^t`` and its own ``v_i``, each
one runs ``local_epochs`` (E = 5) epochs where every minibatch updates both

    w   <- w   - lr * grad_w f_i(w)
    v_i <- v_i - lr * grad_v f_i(alpha v_i + (1 - alpha) w) = v_i - lr * alpha * grad f_i(mixed)

(the mixed model's loss is differentiated with respect to ``v_i`` only; ``w`` is a constant there;
with ``mixing = "outputs"`` the loss is that of the mixed logits), and uploads ``w``. The server takes
the sample-size weighted mean of the uploaded ``w``.

Deliberate choices: ``alpha = 0.25`` fixed (FedPAC's tuned value, Xu et al., ICLR 2023, Appendix B.3,
searched over {0.25, 0.5, 0.75}; the paper's adaptive alpha is not used); both updates share one fresh
PyTorch SGD per round (FedPAC's common setting; per-leaf momentum and weight decay, so it is the same
as two optimisers) on the same minibatches, both steps taken from the same ``w`` (the official code
steps ``w`` first and then ``v_i`` through the updated ``w``, a difference of order ``lr``). Every
``v_i`` starts as the initial global model. Evaluation: the mixture on each client's own test split.

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, Config(local_epochs=1))
>>> state, metrics = round(state, train, test)
>>> evaluate(state, test)["accuracy"].shape
(2,)
"""
from __future__ import annotations

import dataclasses

import jax

from ..core.federated import State, sample_clients
from . import base, personal

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs", "mixed",
           "OutputMixture", "local_update", "MIXINGS"]

# What APFL's alpha mixes: the paper's parameters, or the official code's outputs.
MIXINGS = ("parameters", "outputs")


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """APFL's setting on top of the common SGD setting.

    Attributes:
      alpha: the personal model's share of the mixture ``alpha v_i + (1 - alpha) w``, in [0, 1].
      mixing: what the mixture mixes, one of ``MIXINGS``: ``"parameters"`` (the paper) or ``"outputs"``
        (the logits, as the official code does).

    >>> Config().alpha, Config(alpha=0.5, local_epochs=1).alpha, Config().mixing
    (0.25, 0.5, 'parameters')
    >>> Config(mixing="logits")
    Traceback (most recent call last):
    ValueError: APFL mixing must be one of parameters, outputs, got 'logits'
    """

    alpha: float = 0.25
    mixing: str = "parameters"

    def __post_init__(self):
        super().__post_init__()
        base.require(0.0 <= self.alpha <= 1.0, f"APFL alpha must be in [0, 1], got {self.alpha}")
        base.require(self.mixing in MIXINGS, f"APFL mixing must be one of {', '.join(MIXINGS)}, got {self.mixing!r}")


def mixed(local, global_params, alpha: float):
    """The personalized model ``alpha * v + (1 - alpha) * w``.

    Args:
      local: the local model ``v``.
      global_params: the global model ``w`` (same tree).
      alpha: the local model's share.

    Returns:
      The mixed tree.

    >>> import jax.numpy as jnp
    >>> mixed({"a": jnp.array(4.0)}, {"a": jnp.array(0.0)}, 0.25)["a"].tolist()
    1.0
    """
    return jax.tree.map(lambda v, w: alpha * v + (1.0 - alpha) * w, local, global_params)


@dataclasses.dataclass(frozen=True)
class OutputMixture:
    """A model whose logits are ``alpha * model(v) + (1 - alpha) * model(w)``, for parameters ``{"v", "w"}``:
    APFL's personalized model as the official code computes it.

    Attributes:
      model: anything with ``apply(params, x) -> logits``.
      alpha: the local model's share.

    >>> from types import SimpleNamespace
    >>> import jax.numpy as jnp
    >>> scale = SimpleNamespace(apply=lambda p, x: p * x)
    >>> OutputMixture(scale, 0.25).apply({"v": 4.0, "w": 0.0}, jnp.ones(2)).tolist()
    [1.0, 1.0]
    """

    model: object
    alpha: float

    def apply(self, params, x):
        return self.alpha * self.model.apply(params["v"], x) + (1.0 - self.alpha) * self.model.apply(params["w"], x)


def _personalized(local, global_params, cfg: Config):
    """What evaluation scores: the mixed parameters, or both models for :class:`OutputMixture`."""
    return mixed(local, global_params, cfg.alpha) if cfg.mixing == "parameters" else {"v": local, "w": global_params}


def _scoring_model(model, cfg: Config):
    """The model that scores :func:`_personalized`'s result."""
    return model if cfg.mixing == "parameters" else OutputMixture(model, cfg.alpha)


def local_update(w, participant: dict, model, cfg: Config):
    """One participant's APFL update: ``w`` and ``v_i`` trained together on the same minibatches.

    Args:
      w: the received global model ``w^t``.
      participant: ``x``, ``y``, ``mask``, ``key`` and ``client`` (its local model ``v_i``).
      model, cfg: the split model and the config.

    Returns:
      ``(w_i, v_i, {"n", "loss"})``: the trained global copy it uploads, its new local model, and its
      sample count and mean training loss.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,))
    >>> w = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((1, 4)))  # shapes only
    >>> p = dict(x=jnp.ones((4, 4)), y=jnp.zeros(4, int), mask=jnp.ones(4, bool), key=jax.random.PRNGKey(1))
    >>> w_i, v_i, m = jax.eval_shape(lambda w: local_update(w, {**p, "client": w}, model, Config(local_epochs=1)), w)
    >>> v_i["head"]["TorchDense_0"]["kernel"].shape, sorted(m)
    ((2, 3), ['loss', 'n'])
    """
    ce = base.ce_loss(model)
    personal_ce = base.ce_loss(_scoring_model(model, cfg))

    def loss(p, batch, weights):
        # w's gradient comes from its own loss only; v's from the mixture with w held constant.
        personal_model = _personalized(p["v"], jax.lax.stop_gradient(p["w"]), cfg)
        return ce(p["w"], batch, weights) + personal_ce(personal_model, batch, weights)

    params, loss_value = base.train({"w": w, "v": participant["client"]}, loss, participant, cfg)
    return params["w"], params["v"], {"n": base.num_samples(participant), "loss": loss_value}


ALGORITHM = personal.algorithm("apfl", Config, local_update,
                               "APFL: global and local models, scored as their fixed mixture",
                               personalized=_personalized, scoring_model=_scoring_model)
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
