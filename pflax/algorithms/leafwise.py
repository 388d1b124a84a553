"""Leaf-level partial sharing on BatchNorm backbones: one rule, and FedBN, FedAvg, FedProx, FedPer,
FedRep, LG-FedAvg and Local-only as presets of it (FedPick builds on it with its own objective).

Every client holds a full copy of the model's variables (``params`` and ``batch_stats``, leading
client axis, ``state.clients``); the server holds one copy (``state.server``). A :class:`Sharing` rule
marks which *leaves* the server averages: the leaves of the listed top-level parts (``"body"``,
``"head"``, FedPick's ``"pfsm"``), with or without their BatchNorm leaves (affine parameters and
running statistics). One round, for the participants:

1. each participant's model = the server's shared leaves + its own local leaves;
2. it trains with the algorithm's objective (a fresh PyTorch SGD per phase; FedRep-style
   ``head_epochs`` first train the head alone, then ``local_epochs`` train the rest with the head
   frozen; FedProx's ``prox_mu`` adds ``(mu / 2) ||w - w_start||^2``; BN running statistics update in
   every phase, as in PyTorch's ``train()`` mode);
3. the server replaces each shared leaf by the sample-size weighted mean over the participants; local
   leaves (BN under FedBN, FedPick's PFSM) are never averaged and stay with their client.

A client's personalized model, used for evaluation, is the server's shared leaves + its local ones.
The server's copy of the local leaves is never read (it keeps its initial values), and a client's
copy of the shared leaves is what it last trained (never read either): the layout every recorded
trajectory of FedBN and FedPick has.

FedBN is Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization",
ICLR 2021 (Algorithm 1; the official aggregation skips every ``bn`` key,
https://github.com/med-air/FedBN, ``federated/fed_digits.py``). The other presets are the baselines
of FedPick's Table II (Zhu et al., "Take Your Pick: Enabling Effective Personalized Federated
Learning within Low-dimensional Feature Space", arXiv:2307.13995, 2023) on BN backbones, with its
training setting: SGD lr 0.01, momentum 0.5, no weight decay, batch 64, one local epoch, FedProx
mu = 0.01, FedRep 4 head epochs + 1 body epoch. The BN-free modules (``fedavg``, ``fedper``, ...,
:mod:`pflax.algorithms.sharing`) are the same rules on ``{body, head}`` models without BatchNorm.

>>> import jax.numpy as jnp
>>> variables = {"params": {"body": {"conv0": {"kernel": jnp.ones(2)}, "bn0": {"scale": jnp.ones(2)}},
...                         "head": {"out": {"kernel": jnp.ones(2)}}},
...              "batch_stats": {"body": {"bn0": {"mean": jnp.zeros(2)}}, "head": {}}}
>>> rule("fedbn").sharing.mask(variables)["params"]["body"]
{'bn0': {'scale': False}, 'conv0': {'kernel': True}}
>>> rule("fedper").sharing.mask(variables)["params"]["head"]
{'out': {'kernel': False}}
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..core import aggregate, federated
from ..core.federated import State, sample_clients
from ..core.losses import cross_entropy, masked_mean
from ..core.optim import freeze
from ..core.train import batched_apply, local_train_stateful
from ..metrics import masked_accuracy
from ..models.bn import BNModel, is_bn_path
from . import base
from .common import init_on_execution_devices

Array = jax.Array
PyTree = Any

__all__ = ["Sharing", "TrainingConfig", "Config", "State", "RULES", "rule", "init", "init_from_variables", "round",
           "evaluate", "evaluate_with", "sample_clients", "check_inputs", "pieces_for", "local_train", "personal",
           "personal_variables", "preset", "cross_entropy_objective", "plain_predict"]


@dataclasses.dataclass(frozen=True)
class Sharing:
    """Which leaves the server averages: those under the top-level ``parts``; BatchNorm leaves (affine
    parameters and running statistics) only if ``bn`` is True.

    Attributes:
      parts: top-level parts of the variables (``"body"``, ``"head"``, FedPick's ``"pfsm"``).
      bn: average the BatchNorm leaves of those parts too (False: FedBN's rule).

    >>> Sharing(("body",), bn=True).parts, Sharing().bn
    (('body',), False)
    """

    parts: tuple[str, ...] = ("body", "head")
    bn: bool = False

    def mask(self, variables: PyTree) -> PyTree:
        """Boolean tree over ``{"params", "batch_stats"}`` variables: True where the server averages.

        Args:
          variables: a model's variables (only the tree's paths are read).
        Returns:
          a tree of Python bools with ``variables``' structure.

        >>> import jax.numpy as jnp
        >>> v = {"params": {"body": {"bn0": {"scale": jnp.ones(1)}}, "head": {"out": {"kernel": jnp.ones(1)}}}}
        >>> Sharing(("body", "head"), bn=True).mask(v)
        {'params': {'body': {'bn0': {'scale': True}}, 'head': {'out': {'kernel': True}}}}
        >>> Sharing(("head",)).mask(v)
        {'params': {'body': {'bn0': {'scale': False}}, 'head': {'out': {'kernel': True}}}}
        """

        def shared(path, _leaf):
            part = str(getattr(path[1], "key", path[1])) if len(path) > 1 else ""
            return part in self.parts and (self.bn or not is_bn_path(path))

        return jax.tree_util.tree_map_with_path(shared, variables)


@dataclasses.dataclass(frozen=True)
class TrainingConfig(base.SGDConfig):
    """FedPick's training setting on BN backbones (SGD lr 0.01, momentum 0.5, no weight decay, batch 64,
    one local epoch), FedRep's ``head_epochs`` (0: joint training) and FedProx's ``prox_mu``.

    A subclass says what the server averages with a ``sharing`` attribute (a :class:`Sharing`):
    :class:`Config` as a field, FedPick as a property of its switches.

    Attributes:
      head_epochs: FedRep's head-only epochs before the body phase (>= 0; 0: joint training).
      prox_mu: FedProx's proximal weight (>= 0).
      (and :class:`pflax.algorithms.base.SGDConfig`'s fields, with FedPick's defaults.)

    >>> TrainingConfig().batch_size, TrainingConfig().weight_decay
    (64, 0.0)
    >>> TrainingConfig(prox_mu=-1.0)
    Traceback (most recent call last):
    ValueError: prox_mu must be >= 0, got -1.0
    """

    weight_decay: float = 0.0
    batch_size: int = 64
    local_epochs: int = 1
    head_epochs: int = 0
    prox_mu: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.head_epochs >= 0, f"head_epochs must be >= 0, got {self.head_epochs}")
        base.require(self.prox_mu >= 0, f"prox_mu must be >= 0, got {self.prox_mu}")


@dataclasses.dataclass(frozen=True)
class Config(TrainingConfig):
    """The leaf-level rule: :class:`TrainingConfig` plus ``sharing``. The default is FedBN's rule
    (body and head averaged, BatchNorm local); :func:`rule` gives the other presets.

    Attributes:
      sharing: the :class:`Sharing` rule (what the server averages).

    >>> Config().sharing
    Sharing(parts=('body', 'head'), bn=False)
    """

    sharing: Sharing = Sharing()


# The presets of the rule, as Config fields (FedPick's Table II baselines on BN backbones).
RULES: dict[str, dict] = {
    "fedavg": {"sharing": Sharing(("body", "head"), bn=True)},  # everything averaged, BN included
    "fedprox": {"sharing": Sharing(("body", "head"), bn=True), "prox_mu": 0.01},  # FedPick's mu
    "fedper": {"sharing": Sharing(("body",), bn=True)},  # body averaged (its BN too), head local
    "fedrep": {"sharing": Sharing(("body",), bn=True), "head_epochs": 4},  # FedPer's sharing, head first
    "lg_fedavg": {"sharing": Sharing(("head",), bn=True)},  # head averaged, body local
    "local_only": {"sharing": Sharing((), bn=False)},  # nothing averaged
    "fedbn": {"sharing": Sharing(("body", "head"), bn=False)},  # everything but BatchNorm
}


def rule(name: str, **overrides) -> Config:
    """The :class:`Config` of preset ``name`` (a key of :data:`RULES`), with ``overrides``.

    Args:
      name: ``"fedavg"``, ``"fedprox"``, ``"fedper"``, ``"fedrep"``, ``"lg_fedavg"``, ``"local_only"``
        or ``"fedbn"``.
      overrides: other :class:`Config` fields (``prox_mu``, ``head_epochs``, ``lr``, ...).
    Returns:
      the config.

    >>> rule("fedprox").prox_mu, rule("fedrep", head_epochs=1).head_epochs
    (0.01, 1)
    """
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; choose from {sorted(RULES)}")
    return Config(**{**RULES[name], **overrides})


# objective(model, config, params, batch_stats, minibatch, weights, step_key) -> (loss, new_batch_stats)
Objective = Callable[..., tuple[Array, PyTree]]
# predict(model, config, variables, x) -> scores [B, K] (evaluation mode)
Predict = Callable[[Any, Any, PyTree, Array], Array]


def cross_entropy_objective(model: BNModel, config, params, stats, batch, w, key):
    """Masked mean cross-entropy of the model in training mode, and its new batch statistics.

    Args:
      model: a :class:`pflax.models.bn.BNModel`.
      config: unused (the :data:`Objective` signature).
      params, stats: the model's ``params`` and ``batch_stats``.
      batch: a minibatch ``{"x", "y"}``.
      w: ``[B]`` sample weights (0 on padding).
      key: unused (no noise).
    Returns:
      ``(loss, new batch_stats)``.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> model = BNModel(Linear(3), Linear(2), num_classes=2, feature_dim=3)  # linear body and head, no BN
    >>> zero = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))["params"])
    >>> loss, _ = cross_entropy_objective(model, None, zero, {"body": {}, "head": {}},
    ...                                   {"x": jnp.ones((3, 4)), "y": jnp.zeros(3, int)}, jnp.ones(3), None)
    >>> print(f"{float(loss):.3f}")  # zero logits: log 2
    0.693
    """
    logits, new_stats = model.logits({"params": params, "batch_stats": stats}, batch["x"], True, w)
    return masked_mean(cross_entropy(logits, batch["y"]), w), new_stats


def plain_predict(model: BNModel, config, variables, x):
    """The model's logits in evaluation mode (running statistics).

    Args:
      model: a :class:`pflax.models.bn.BNModel`.
      config: unused (the :data:`Predict` signature).
      variables: ``{"params", "batch_stats"}``.
      x: ``[B, ...]`` inputs.
    Returns:
      ``[B, num_classes]`` logits.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> model = BNModel(Linear(3), Linear(2), 2, 3)
    >>> plain_predict(model, None, model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4))), jnp.ones((5, 4))).shape
    (5, 2)
    """
    return model.logits(variables, x, False)[0]


def init_from_variables(key: Array, variables: PyTree, num_clients: int, model, config) -> State:
    """A round-0 state where the server and every client start from ``variables``.

    Args:
      key: split in two, the training and the sampling stream (the model key was drawn before).
      variables: ``{"params", "batch_stats"}``.
      num_clients, model, config: as :func:`init`.
    Returns:
      the :class:`pflax.core.federated.State`.

    >>> v = {"params": {"body": {"k": jnp.ones(2)}, "head": {"k": jnp.zeros(1)}}, "batch_stats": {}}
    >>> state = init_from_variables(jax.random.PRNGKey(0), v, 3, None, rule("fedper"))
    >>> state.clients["params"]["body"]["k"].shape, int(state.round)
    ((3, 2), 0)
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    k_train, k_sample = jax.random.split(key)
    return State(server=variables, clients=federated.broadcast_rows(variables, num_clients),
                 round=jnp.zeros((), jnp.int32), key=k_train, sampling_key=k_sample, num_clients=num_clients,
                 model=model, config=config)


@init_on_execution_devices
def init(key: Array, model: BNModel, sample_x: Array, num_clients: int, config: Config = Config()) -> State:
    """One random model from the first half of ``split(key)``; the second half is split into the
    training and sampling streams (:func:`init_from_variables`).

    Args:
      key: PRNG key.
      model: a :class:`pflax.models.bn.BNModel`.
      sample_x: input samples (their shape fixes the model's).
      num_clients: N.
      config: the rule (:class:`Config`, e.g. ``rule("fedper")``).
    Returns:
      the round-0 state; every client starts from the same model.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> state = init(jax.random.PRNGKey(0), BNModel(Linear(3), Linear(2), 2, 3), jnp.zeros((1, 4)), 5)
    >>> state.clients["params"]["head"]["out"]["kernel"].shape
    (5, 3, 2)
    """
    k_model, k_rest = jax.random.split(key)
    return init_from_variables(k_rest, model.init(k_model, sample_x[:1]), num_clients, model, config)


def personal(server: PyTree, own: PyTree, share_mask: PyTree) -> PyTree:
    """A client's model: the server's shared leaves and its own local leaves.

    Args:
      server: the server's variables.
      own: the client's variables (same structure).
      share_mask: :meth:`Sharing.mask` of them.
    Returns:
      the client's personalized variables.

    >>> personal({"a": 1, "b": 2}, {"a": 10, "b": 20}, {"a": True, "b": False})
    {'a': 1, 'b': 20}
    """
    return jax.tree.map(lambda m, s, o: s if m else o, share_mask, server, own)


def personal_variables(state: State, client_ids: Array) -> PyTree:
    """The personalized models of ``client_ids`` (leading axis), as evaluation uses them.

    Args:
      state: a leaf-level state.
      client_ids: ``[m]`` the clients.
    Returns:
      ``[m, ...]`` variables: the server's shared leaves (broadcast) and the clients' own leaves.

    >>> tiny = {"params": {"body": {"k": jnp.ones(2)}, "head": {"k": jnp.zeros(1)}}, "batch_stats": {}}
    >>> state = init_from_variables(jax.random.PRNGKey(0), tiny, 4, None, rule("lg_fedavg"))
    >>> jax.tree.map(jnp.shape, personal_variables(state, jnp.array([0, 3]))["params"])
    {'body': {'k': (2, 2)}, 'head': {'k': (2, 1)}}
    """
    share = state.config.sharing.mask(state.server)
    own = federated.take(state.clients, client_ids)
    return jax.tree.map(lambda m, s, o: jnp.broadcast_to(s, o.shape) if m else o, share, state.server, own)


def local_train(variables: PyTree, participant: dict, model, cfg: TrainingConfig,
                objective: Objective = cross_entropy_objective) -> tuple[PyTree, Array]:
    """One participant's local update of ``variables`` (a fresh optimiser per phase).

    Args:
      variables: its starting model ``{"params", "batch_stats"}`` (also FedProx's anchor).
      participant: ``x``, ``y``, ``mask`` (its data) and ``key`` (its round key).
      model, cfg: the model and the config (``head_epochs``, ``prox_mu``, the SGD setting).
      objective: the training loss (:data:`Objective`).
    Returns:
      ``(trained variables, mean loss of the last phase)``.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> model = BNModel(Linear(3), Linear(2), 2, 3)
    >>> v = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
    >>> one = {"x": jnp.ones((4, 4)), "y": jnp.zeros(4, int), "mask": jnp.ones(4, bool), "key": jax.random.PRNGKey(1)}
    >>> new, _ = local_train(v, one, model, rule("fedrep", head_epochs=1, local_epochs=0))  # the head phase only
    >>> same = jax.tree.map(lambda a, b: bool((a == b).all()), new["params"], v["params"])
    >>> same["body"]["out"]["kernel"], same["head"]["out"]["kernel"]
    (True, False)
    """
    anchor = variables["params"]

    def loss(p, s, batch, w, k):
        value, new_s = objective(model, cfg, p, s, batch, w, k)
        if cfg.prox_mu > 0:
            value = value + cfg.prox_mu * base.proximity(p, anchor)
        return value, new_s

    data = {"x": participant["x"], "y": participant["y"]}
    params, stats = variables["params"], variables["batch_stats"]
    k_head, k_body = jax.random.split(participant["key"])
    if cfg.head_epochs > 0:
        is_head = jax.tree_util.tree_map_with_path(lambda path, _: str(path[0].key) == "head", params)
        params, stats, _ = local_train_stateful(
            params, stats, loss, data, participant["mask"], k_head, epochs=cfg.head_epochs,
            batch_size=cfg.batch_size, optimizer=freeze(cfg.optimizer(), is_head))
        body_opt = freeze(cfg.optimizer(), jax.tree.map(lambda h: not h, is_head))
    else:
        body_opt = cfg.optimizer()
    params, stats, body_loss = local_train_stateful(
        params, stats, loss, data, participant["mask"], k_body, epochs=cfg.local_epochs,
        batch_size=cfg.batch_size, optimizer=body_opt)
    return {"params": params, "batch_stats": stats}, body_loss


def pieces_for(model, cfg: TrainingConfig, objective: Objective = cross_entropy_objective) -> federated.RoundPieces:
    """The round's pieces: the server's copy goes to every participant, which trains its personal
    model with ``objective`` and keeps the result as its row; the server averages the shared leaves.

    The mean is taken over the participants' stacked rows (they are the new client rows anyway) with
    :func:`pflax.core.aggregate.weighted_mean`, as in every recorded trajectory.

    Args:
      model: the BN model.
      cfg: the rule (its ``sharing`` and training setting).
      objective: the local loss (:data:`Objective`).
    Returns:
      the :class:`pflax.core.federated.RoundPieces`.

    >>> pieces_for(None, rule("fedbn")).broadcast is federated.no_broadcast
    True
    """

    def local_update(server: PyTree, participant: dict) -> dict:
        own = personal(server, participant["client"], cfg.sharing.mask(server))
        variables, loss = local_train(own, participant, model, cfg, objective)
        return {"client": variables, "n": base.num_samples(participant), "loss": loss}

    def server_update(state: State, batch, uploads: dict, reduced: dict):
        share = cfg.sharing.mask(state.server)
        averaged = aggregate.weighted_mean(uploads["client"], uploads["n"], fallback=state.server)
        server = jax.tree.map(lambda m, new, old: new if m else old, share, averaged, state.server)
        return server, None, {"n": uploads["n"], "loss": uploads["loss"]}

    return federated.RoundPieces(broadcast=federated.no_broadcast, local_update=local_update,
                                 server_update=server_update)


def evaluate_with(state: State, test, train=None, predict: Predict = plain_predict) -> dict:
    """Each client's personalized model, scored by ``predict``, on its own test split:
    ``{"client_ids", "accuracy", "n"}`` (``train`` is accepted and not used). Not jitted.

    Args:
      state: a leaf-level state.
      test: the clients' test splits.
      train: unused.
      predict: the scores of a model (:data:`Predict`).
    Returns:
      the per-client metrics.

    >>> from pflax.data import ClientData
    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> state = init(jax.random.PRNGKey(0), BNModel(Linear(3), Linear(2), 2, 3), jnp.zeros((1, 4)), 2)
    >>> test = ClientData(jnp.ones((2, 5, 4)), jnp.zeros((2, 5), int), jnp.ones((2, 5), bool), jnp.arange(2))
    >>> evaluate_with(state, test)["accuracy"].shape
    (2,)
    """
    model, cfg = state.model, state.config
    share = cfg.sharing.mask(state.server)

    def score(c: dict, server: PyTree) -> Array:
        variables = personal(server, c["client"], share)
        logits = batched_apply(lambda xb: predict(model, cfg, variables, xb), c["x"])
        return masked_accuracy(logits, c["y"], c["mask"])

    return federated.evaluate_clients(state, test, train, score)


def _evaluate(state: State, test, train=None) -> dict:
    return evaluate_with(state, test, train)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train=None) -> {"client_ids", "accuracy", "n"}``: each client's
personalized model (the server's shared leaves + its own) on its own test split. Jit-compiled."""


def _round(state: State, batch, test=None):
    return federated.run_round(pieces_for(state.model, state.config), state, batch, test, evaluate=_evaluate)


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = """``round(state, batch, test=None) -> (state, metrics)``: one round of the configured rule
for the participants in ``batch`` (metrics ``n``, ``loss`` per participant); with ``test`` (same
clients), ``metrics["accuracy"]`` is ``evaluate`` of the new state. Jit-compiled."""


check_inputs = base.check_inputs


def preset(name: str, config_class: type, summary: str) -> federated.Algorithm:
    """The registry entry of one preset of the rule: this module's functions with ``config_class()``
    as the default config.

    Args:
      name: the registry name.
      config_class: a :class:`Config` subclass whose defaults are the preset.
      summary: one line for ``pflax list``.
    Returns:
      the :class:`pflax.core.federated.Algorithm`.

    >>> entry = preset("fedbn_again", Config, "FedBN once more")
    >>> entry.name, entry.Config().sharing.bn
    ('fedbn_again', False)
    """

    def preset_init(key, model, sample_x, num_clients: int, config=None):
        return init(key, model, sample_x, num_clients, config_class() if config is None else config)

    preset_init.__doc__ = f"{name}'s ``init(key, model, sample_x, num_clients, config=Config())``."
    return federated.Algorithm(name=name, Config=config_class, init=preset_init, round=round, evaluate=evaluate,
                               pieces=pieces_for, check_inputs=check_inputs, summary=summary, backbone="bn")
