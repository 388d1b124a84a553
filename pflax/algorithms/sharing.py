"""Partial model sharing: one rule, and Local, FedAvg, FedAvg-FT, FedPer, LG-FedAvg, FedRep, FedBABU,
FedProx and kNN-Per as presets of it.

A split model's parameters are named parts (``{"body", "head"}``). The rule says:

* ``shared``: the parts the server holds and sends to every participant; the others stay with each
  client (``state.clients``) and are never sent;
* ``averaged``: the shared parts the server replaces by the sample-size weighted mean of the
  participants' trained copies (default: all of them; FedBABU keeps its random head fixed);
* ``trained``: the parts local SGD updates (FedBABU: the body only; the frozen parts get neither
  momentum nor weight decay, as when PyTorch leaves them out of the optimiser);
* ``alternating``: FedRep's schedule, ``head_epochs`` epochs of the head alone on the received body,
  then ``local_epochs`` epochs of the body with the new head frozen (either may be 0);
* ``prox_mu``: FedProx's ``(mu / 2) ||w - w_global||^2`` added to the local loss;
* ``finetune_epochs`` (or ``finetune_steps``): evaluation personalises by fine-tuning ``finetune_parts``
  of the client's model on its own training split for that many epochs (or minibatch steps: FedCollab's
  Finetune takes 2); nothing is written to the state (FedAvg-FT, FedBABU);
* ``knn_lam``: evaluation interpolates the model with a kNN over the client's training features
  (kNN-Per, Marfoq et al., 2022).

Every phase of every round uses a fresh PyTorch SGD of the common setting (FedPAC's: lr 0.01,
momentum 0.5, weight decay 5e-4, batch 50, E = 5). A client's personalized model is the server's
shared parts plus its own local parts.

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> state = pflax.fedper.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                           pflax.fedper.Config(local_epochs=1))
>>> sorted(state.server), sorted(state.clients)
(['body'], ['head'])
>>> state, metrics = pflax.fedper.round(state, train, test)
>>> metrics["accuracy"].shape
(2,)
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ..core import federated
from ..core.aggregate import EXACT
from ..core.federated import State, sample_clients
from ..core.train import batched_apply
from ..metrics import masked_accuracy
from . import base
from .common import init_on_execution_devices

Array = jax.Array
PyTree = Any

__all__ = ["Config", "State", "init", "round", "evaluate", "check_inputs", "sample_clients", "preset",
           "knn_probabilities"]

PARTS = ("body", "head")


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """The sharing rule (module docstring) on top of the common SGD setting. The defaults are FedAvg.

    Attributes:
      shared: parts the server holds and sends (the others stay with each client).
      averaged: shared parts the server averages (None: all of ``shared``; FedBABU: the body).
      trained: parts local SGD updates.
      alternating: FedRep's head-then-body schedule (``head_epochs``, then ``local_epochs``).
      head_epochs: FedRep's head epochs.
      prox_mu: FedProx's proximal weight (>= 0).
      finetune_epochs, finetune_parts: evaluation-time fine-tuning (FedAvg-FT, FedBABU).
      finetune_steps: fine-tune for this many minibatch steps instead (0: use ``finetune_epochs``;
        at most one of the two is positive).
      knn_lam, knn_k, knn_scale: kNN-Per's interpolation weight, neighbours and kernel scale.

    >>> Config(shared=("body",)).averaged_parts, Config(knn_lam=0.5).needs_train
    (('body',), True)
    >>> Config(shared=("body",), averaged=("head",))
    Traceback (most recent call last):
    ValueError: averaged parts ('head',) must be shared (('body',))
    """

    shared: tuple = ("body", "head")
    averaged: tuple | None = None  # None: every shared part
    trained: tuple = ("body", "head")
    alternating: bool = False
    head_epochs: int = 0
    prox_mu: float = 0.0
    finetune_epochs: int = 0
    finetune_parts: tuple = ("body", "head")
    finetune_steps: int = 0
    knn_lam: float = 0.0
    knn_k: int = 5
    knn_scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        for field in ("shared", "trained", "finetune_parts"):
            value = getattr(self, field)
            base.require(isinstance(value, tuple) and set(value) <= set(PARTS),
                         f"{field} must be a tuple of parts from {PARTS}, got {value!r}")
        base.require(self.averaged is None or set(self.averaged) <= set(self.shared),
                     f"averaged parts {self.averaged} must be shared ({self.shared})")
        base.require(len(self.trained) > 0, "trained must name at least one part")
        base.require(self.head_epochs >= 0, f"head_epochs must be >= 0, got {self.head_epochs}")
        base.require(not self.alternating or set(self.trained) == set(PARTS),
                     "the alternating schedule (FedRep) trains both parts")
        base.require(self.prox_mu >= 0, f"prox_mu must be >= 0, got {self.prox_mu}")
        base.require(self.finetune_epochs >= 0, f"finetune_epochs must be >= 0, got {self.finetune_epochs}")
        base.require(self.finetune_steps >= 0, f"finetune_steps must be >= 0, got {self.finetune_steps}")
        base.require(self.finetune_epochs == 0 or self.finetune_steps == 0,
                     f"fine-tune either for epochs or for steps: finetune_epochs={self.finetune_epochs} and "
                     f"finetune_steps={self.finetune_steps}; set one of them to 0")
        base.require(len(self.finetune_parts) > 0, "finetune_parts must name at least one part")
        base.require(0.0 <= self.knn_lam <= 1.0, f"knn_lam must be in [0, 1], got {self.knn_lam}")
        base.require(self.knn_k >= 1 and self.knn_scale > 0, "kNN needs knn_k >= 1 and knn_scale > 0")

    @property
    def averaged_parts(self) -> tuple:
        """The parts the server averages: ``averaged``, or every shared part."""
        return self.shared if self.averaged is None else self.averaged

    @property
    def needs_train(self) -> bool:
        """Evaluation personalises on the client's training split."""
        return self.finetune_epochs > 0 or self.finetune_steps > 0 or self.knn_lam > 0


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """One random model (from the first of ``split(key, 3)``, as every algorithm); the ``shared`` parts
    go to the server, the others to every client (all clients start from the same copy).

    Args:
      key: PRNG key.
      model: a :class:`pflax.models.SplitModel`.
      sample_x: input samples (the first fixes the shapes).
      num_clients: N.
      config: the rule.
    Returns:
      the round-0 :class:`pflax.core.federated.State`.

    >>> from pflax.models import mlp
    >>> state = init(jax.random.PRNGKey(0), mlp(3, hidden=(4,)), jnp.zeros((1, 6)), 5, Config(shared=("head",)))
    >>> sorted(state.server), state.clients["body"]["TorchDense_0"]["kernel"].shape
    (['head'], (5, 6, 4))
    """
    def layout(params):
        return ({p: v for p, v in params.items() if p in config.shared},
                {p: v for p, v in params.items() if p not in config.shared})

    return State.from_model(key, model, sample_x, num_clients, config, layout)


def assembled(client: dict, server: PyTree) -> PyTree:
    """A client's full model: the server's shared parts plus its own local parts.

    Args:
      client: one participant's inputs (its local parts under ``"client"``).
      server: the server's shared parts.
    Returns:
      the ``{"body", "head"}`` parameters.

    >>> assembled({"client": {"head": 2}}, {"body": 1})
    {'body': 1, 'head': 2}
    """
    return {**server, **client["client"]}


def local_train(params: PyTree, participant: dict, model, cfg: Config) -> tuple[PyTree, Array]:
    """The rule's local training of the assembled model (one participant).

    Args:
      params: the assembled model (also FedProx's anchor).
      participant: ``x``, ``y``, ``mask`` and ``key``.
      model: anything with ``apply(params, x) -> logits``.
      cfg: the rule (``trained``, ``alternating``, ``prox_mu``, the SGD setting).
    Returns:
      ``(trained params, mean loss of the last phase)``.

    >>> from types import SimpleNamespace
    >>> linear = SimpleNamespace(apply=lambda p, x: x @ p["body"] + p["head"])
    >>> one = {"x": jnp.eye(2), "y": jnp.array([0, 1]), "mask": jnp.ones(2, bool), "key": jax.random.PRNGKey(0)}
    >>> new, loss = local_train({"body": jnp.zeros((2, 2)), "head": jnp.zeros(2)}, one, linear,
    ...                         Config(trained=("head",), local_epochs=1))
    >>> print(bool((new["body"] == 0).all()), f"{float(loss):.3f}")  # body frozen; loss log 2 at zero logits
    True 0.693
    """
    ce = base.ce_loss(model)
    if cfg.prox_mu > 0:
        anchor = params

        def loss(p, batch, w):
            return ce(p, batch, w) + cfg.prox_mu * base.proximity(p, anchor)
    else:
        loss = ce

    if cfg.alternating:  # FedRep: head first on the received body, then the body
        key_head, key_body = jax.random.split(participant["key"])
        params, _ = base.train_parts(params, ("head",), loss, participant, cfg, key=key_head, epochs=cfg.head_epochs)
        return base.train_parts(params, ("body",), loss, participant, cfg, key=key_body)
    if set(cfg.trained) == set(params):
        return base.train(params, loss, participant, cfg)
    return base.train_parts(params, tuple(cfg.trained), loss, participant, cfg)


def _local_update(server: PyTree, participant: dict, model, cfg: Config) -> dict:
    params, loss = local_train(assembled(participant, server), participant, model, cfg)
    return {"mean": {p: params[p] for p in cfg.averaged_parts}, "client": {p: params[p] for p in participant["client"]},
            "n": base.num_samples(participant), "loss": loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    fallback = {p: state.server[p] for p in state.config.averaged_parts}
    server = {**state.server, **federated.mean_or(reduced, fallback)}
    return server, None, {"n": uploads["n"], "loss": uploads["loss"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """The rule's round as :class:`pflax.core.federated.RoundPieces`: no broadcast message, the
    participants train the assembled model, the server averages ``averaged_parts``.

    Args:
      model: the split model.
      cfg: the rule.
    Returns:
      the pieces :func:`pflax.core.federated.run_round` runs.

    >>> pieces_for(None, Config()).broadcast is federated.no_broadcast
    True
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda server, participant: _local_update(server, participant, model, cfg),
        server_update=_server_update,
    )


def knn_probabilities(query, keys, labels, valid, num_classes: int, k: int, scale: float):
    """``p_kNN [q, K]`` from the ``k`` nearest valid ``keys`` of every query feature, weighted by
    ``exp(-d / (dim * scale))`` relative to the nearest (kNN-Per's kernel; Marfoq et al., "Personalized
    Federated Learning through Local Memorization", ICML 2022).

    Args:
      query: ``[q, dim]`` features to classify.
      keys: ``[n, dim]`` the datastore's features (the client's training split).
      labels: ``[n]`` their labels.
      valid: ``[n]`` bool, False on padding.
      num_classes: K.
      k: neighbours (at most ``n``).
      scale: the kernel's temperature.
    Returns:
      ``[q, K]`` probabilities.

    >>> import jax.numpy as jnp
    >>> keys = jnp.array([[0.0], [1.0], [5.0]]); labels = jnp.array([0, 1, 1])
    >>> p = knn_probabilities(jnp.array([[0.1]]), keys, labels, jnp.array([True, True, False]), 2, 2, 1.0)
    >>> bool(p[0, 0] > p[0, 1])
    True
    """
    d = query.shape[-1]
    # ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b: no [q, n, d] intermediate (600 x 600 x 128 floats).
    sq = jnp.sum(query**2, -1)[:, None] + jnp.sum(keys**2, -1)[None, :] - 2.0 * jnp.matmul(query, keys.T, precision=EXACT)
    dist = jnp.maximum(sq, 0.0)
    dist = jnp.where(valid[None, :], dist, jnp.inf)
    k = min(k, keys.shape[0])
    neg, idx = jax.lax.top_k(-dist, k)
    near = -neg
    usable = jnp.isfinite(near)
    weights = jnp.where(usable, jnp.exp(-(near - near[:, :1]) / (d * scale)), 0.0)
    onehot = jax.nn.one_hot(labels[idx], num_classes)
    votes = jnp.einsum("qk,qkc->qc", weights, onehot, precision=EXACT)
    return votes / jnp.maximum(votes.sum(-1, keepdims=True), 1e-30)


def _score(c: dict, server: PyTree, model, cfg: Config) -> Array:
    params = assembled(c, server)
    train = {"x": c["train_x"], "y": c["train_y"], "mask": c["train_mask"]} if cfg.needs_train else None
    if cfg.knn_lam > 0:
        keys = batched_apply(lambda xb: model.features(params["body"], xb), train["x"])
        z = batched_apply(lambda xb: model.features(params["body"], xb), c["x"])
        p_model = jax.nn.softmax(model.logits_from_features(params["head"], z), axis=-1)
        p_knn = knn_probabilities(z, keys, train["y"], train["mask"], model.num_classes, cfg.knn_k, cfg.knn_scale)
        return masked_accuracy(cfg.knn_lam * p_knn + (1.0 - cfg.knn_lam) * p_model, c["y"], c["mask"])
    if cfg.finetune_epochs > 0 or cfg.finetune_steps > 0:
        params, _ = base.train_parts(params, tuple(cfg.finetune_parts), base.ce_loss(model), {**train, "key": c["key"]},
                                     cfg, epochs=cfg.finetune_epochs, steps=cfg.finetune_steps)
    return base.accuracy_of(model, params, c)


# One generic round and evaluation serve every preset; a preset is a Config class.
_RULE = federated.build("sharing", Config, init, pieces_for, _score, "the partial-sharing rule", base.check_inputs,
                        needs_train=lambda cfg: cfg.needs_train)
round, evaluate = _RULE.round, _RULE.evaluate  # noqa: A001 - the library's verb is `round`
check_inputs = base.check_inputs


def preset(name: str, summary: str, **defaults) -> federated.Algorithm:
    """The registry entry of one preset of the rule, as optax builds ``adamw`` from ``chain``: a
    ``Config`` subclass whose defaults are ``defaults``, with the rule's ``init``, ``round`` and
    ``evaluate``.

    Args:
      name: the registry (and module) name.
      summary: one line for ``pflax list``; also the ``Config``'s docstring.
      **defaults: the preset's values of :class:`Config` fields.

    Returns:
      a :class:`pflax.core.federated.Algorithm` whose ``Config()`` is the preset.

    >>> fedper = preset("fedper", "FedPer", shared=("body",))
    >>> fedper.Config().shared, fedper.Config(local_epochs=1).local_epochs
    (('body',), 1)
    """
    annotations = {f.name: f.type for f in dataclasses.fields(Config)}
    config_class = dataclasses.make_dataclass(
        "Config", [(field, annotations[field], dataclasses.field(default=value)) for field, value in defaults.items()],
        bases=(Config,), frozen=True)
    config_class.__module__ = f"pflax.algorithms.{name}"
    config_class.__doc__ = f"{summary}: the sharing rule with {defaults or 'its defaults'}."

    def preset_init(key, model, sample_x, num_clients: int, config=None):
        return init(key, model, sample_x, num_clients, config_class() if config is None else config)

    preset_init.__doc__ = f"{name}'s ``init(key, model, sample_x, num_clients, config=Config())``."
    return federated.Algorithm(
        name=name, Config=config_class, init=preset_init, round=round, evaluate=evaluate,
        pieces=pieces_for, check_inputs=check_inputs,
        needs_train=config_class().needs_train, summary=summary,
    )
