"""The local-training pieces every algorithm shares: the common SGD setting, training all or some
parts of a model, losses, input checks and the helpers of multi-model (clustered) methods.

The common setting is FedPAC's (Xu et al., ICLR 2023, Section 5.1, and the official
``JianXu95/FedPAC`` code): PyTorch SGD, lr 0.01, momentum 0.5, coupled weight decay 5e-4, batch 50,
E = 5 local epochs, with a fresh optimiser for every phase of every round. The state layout and the
round driver are in :mod:`pflax.core.federated`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from ..core import aggregate
from ..core.execution import Execution
from ..core.losses import cross_entropy, masked_mean
from ..core.optim import freeze, pytorch_sgd
from ..core.split import part_mask
from ..core.train import batched_apply, local_train, sgd_steps, step_order
from ..data.clients import ClientData
from ..data.sources import DataError
from ..metrics import masked_accuracy
from ..models import SplitModel
from .common import check_batch

Array = jax.Array
PyTree = Any


@dataclasses.dataclass(frozen=True)
class SGDConfig:
    """The local-training setting every baseline shares: FedPAC's common setting (Xu et al., ICLR 2023,
    Sec. 5.1; https://github.com/JianXu95/FedPAC), PyTorch SGD with a fresh optimiser per phase.

    Attributes:
      lr: learning rate (>= 0).
      momentum: PyTorch-style momentum, in [0, 1).
      weight_decay: coupled L2 weight decay (>= 0).
      batch_size: minibatch size (>= 1).
      local_epochs: local epochs per round, ``E`` (>= 0).
      execution: how clients are mapped (:class:`pflax.core.execution.Execution`).

    >>> SGDConfig().batch_size, SGDConfig(local_epochs=1).local_epochs
    (50, 1)
    >>> SGDConfig(momentum=1.0)
    Traceback (most recent call last):
    ValueError: momentum must be in [0, 1), got 1.0
    """

    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 5e-4
    batch_size: int = 50
    local_epochs: int = 5
    execution: Execution = Execution()

    def __post_init__(self):
        if self.lr < 0 or self.weight_decay < 0:
            raise ValueError(f"{type(self).__module__}: lr and weight_decay must be >= 0")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.batch_size < 1 or self.local_epochs < 0:
            raise ValueError("batch_size must be >= 1 and local_epochs >= 0")

    def optimizer(self, lr: float | None = None):
        """A fresh :func:`pflax.core.optim.pytorch_sgd` of this setting; ``lr`` overrides the rate."""
        return pytorch_sgd(self.lr if lr is None else lr, self.momentum, self.weight_decay)


def require(condition: bool, message: str) -> None:
    """Config validation helper: raise ``ValueError(message)`` unless ``condition``.

    Args:
      condition: what must hold.
      message: the error's text.
    Returns:
      None.

    >>> require(2 > 1, "unused")
    >>> require(2 < 1, "2 must be < 1")
    Traceback (most recent call last):
    ValueError: 2 must be < 1
    """
    if not condition:
        raise ValueError(message)


def num_samples(client: dict) -> Array:
    """A client's real sample count ``n_i`` (its aggregation weight).

    Args:
      client: a dict with a boolean ``mask`` over its padded samples.
    Returns:
      a float32 scalar.

    >>> float(num_samples({"mask": jnp.array([True, True, False])}))
    2.0
    """
    return client["mask"].sum().astype(jnp.float32)


def has_data(batch) -> Array:
    """1.0 for each client of a round's batch that has at least one real sample, else 0.0.

    Args:
      batch: a round's clients, with a ``[m, n_max]`` boolean ``mask``.
    Returns:
      a float32 ``[m]`` array; its sum is ``|S|``, the participants that train.

    >>> from types import SimpleNamespace
    >>> has_data(SimpleNamespace(mask=jnp.array([[True, False], [False, False]]))).tolist()
    [1.0, 0.0]
    """
    return (batch.mask.sum(1) > 0).astype(jnp.float32)


def local_steps(mask: Array, cfg: SGDConfig) -> Array:
    """Optimiser steps one client takes in a round: minibatches with at least one real sample over
    ``local_epochs`` epochs, ``E * ceil(n_i / B)`` (0 for a client without data).

    Args:
      mask: the client's ``[n_max]`` sample mask.
      cfg: the SGD setting (``local_epochs``, ``batch_size``).
    Returns:
      an integer scalar.

    >>> int(local_steps(jnp.ones(120, bool), SGDConfig()))  # 5 * ceil(120 / 50)
    15
    """
    n = mask.sum()
    return cfg.local_epochs * ((n + cfg.batch_size - 1) // cfg.batch_size)


def ce_loss(model: SplitModel) -> Callable:
    """Masked mean cross-entropy of the full model, in :func:`local_train`'s loss signature.

    Args:
      model: anything with ``apply(params, x) -> logits``.
    Returns:
      ``loss(params, batch, w)`` for a minibatch ``{"x", "y"}`` and sample weights ``w``.

    >>> from types import SimpleNamespace
    >>> loss = ce_loss(SimpleNamespace(apply=lambda params, x: x))  # the inputs are the logits
    >>> round(float(loss(None, {"x": jnp.zeros((2, 4)), "y": jnp.array([0, 3])}, jnp.ones(2))), 3)  # log 4
    1.386
    """

    def loss(params, batch, w):
        return masked_mean(cross_entropy(model.apply(params, batch["x"]), batch["y"]), w)

    return loss


def proximity(params: PyTree, anchor: PyTree) -> Array:
    """``0.5 * ||params - anchor||^2`` over every leaf; the anchor is a constant (no gradient).

    Args:
      params: a tree.
      anchor: a tree of the same structure (FedProx's received global model).
    Returns:
      a scalar.

    >>> float(proximity({"w": jnp.array([1.0, 2.0])}, {"w": jnp.zeros(2)}))
    2.5
    """
    anchor = jax.lax.stop_gradient(anchor)
    return 0.5 * sum(jnp.sum(jnp.square(p - a)) for p, a in zip(jax.tree.leaves(params), jax.tree.leaves(anchor)))


def train(params: PyTree, loss: Callable, client: dict, cfg: SGDConfig, *, key: Array | None = None,
          epochs: int | None = None, optimizer=None, data: dict | None = None,
          steps: int = 0) -> tuple[PyTree, Array]:
    """:func:`local_train` on one client's data with the config's defaults (fresh optimiser).

    Args:
      params: the starting parameters.
      loss: ``loss(params, minibatch, weights) -> scalar``.
      client: ``x``, ``y``, ``mask`` and ``key`` of one client.
      cfg: the SGD setting.
      key, epochs, optimizer, data: overrides of ``client["key"]``, ``cfg.local_epochs``,
        ``cfg.optimizer()`` and ``{"x", "y"}``.
      steps: if positive, exactly this many minibatch steps (:func:`pflax.core.train.step_order`)
        instead of ``epochs`` epochs.
    Returns:
      ``(trained params, mean training loss)``.

    >>> client = {"x": jnp.ones(4), "y": jnp.zeros(4, int), "mask": jnp.ones(4, bool), "key": jax.random.PRNGKey(0)}
    >>> fit = lambda p, batch, w: masked_mean((batch["x"] - p) ** 2, w)  # pulls p toward 1
    >>> p, loss = train(jnp.float32(0.0), fit, client, SGDConfig(lr=0.25, momentum=0.0, weight_decay=0.0))
    >>> float(p), round(float(loss), 3)  # 5 epochs of one step each; loss: the mean over the steps
    (0.96875, 0.266)
    """
    data = {"x": client["x"], "y": client["y"]} if data is None else data
    optimizer = cfg.optimizer() if optimizer is None else optimizer
    if steps > 0:
        indices, valid = step_order(client["key"] if key is None else key, client["mask"], steps, cfg.batch_size)
        return sgd_steps(params, loss, data, indices, valid, optimizer)
    return local_train(
        params, loss, data, client["mask"],
        client["key"] if key is None else key,
        epochs=cfg.local_epochs if epochs is None else epochs, batch_size=cfg.batch_size, optimizer=optimizer,
    )


def trainable(params: PyTree, parts: tuple[str, ...]) -> PyTree:
    """Boolean tree: True on the leaves of the named parts ("body", "head").

    Args:
      params: a split model's ``{"body", "head"}`` parameters.
      parts: the parts to mark.
    Returns:
      a tree of bools with ``params``' structure.

    >>> trainable({"body": {"w": 1.0}, "head": {"b": 2.0}}, ("head",))
    {'body': {'w': False}, 'head': {'b': True}}
    """
    masks = [part_mask(params, p) for p in parts]
    return jax.tree.map(lambda *m: any(m), *masks) if masks else jax.tree.map(lambda _: False, params)


def train_parts(params: PyTree, parts: tuple[str, ...], loss: Callable, client: dict, cfg: SGDConfig, *,
                key: Array | None = None, epochs: int | None = None, lr: float | None = None,
                steps: int = 0) -> tuple[PyTree, Array]:
    """Train only ``parts`` of a split model; the others are frozen by masked optimiser updates
    (no weight decay, no momentum on them, as when PyTorch leaves them out of the optimiser).

    Args:
      params: ``{"body", "head"}`` parameters.
      parts: the parts to train.
      loss, client, cfg, key, epochs, steps: as :func:`train`.
      lr: overrides ``cfg.lr``.
    Returns:
      ``(params, mean training loss)``; the other parts are unchanged.

    >>> client = {"x": jnp.ones(2), "y": jnp.zeros(2, int), "mask": jnp.ones(2, bool), "key": jax.random.PRNGKey(0)}
    >>> sq = lambda p, batch, w: (p["body"] + p["head"]) ** 2
    >>> p, _ = train_parts({"body": 1.0, "head": 1.0}, ("head",), sq, client, SGDConfig(local_epochs=1))
    >>> float(p["body"]), float(p["head"]) < 1.0
    (1.0, True)
    """
    opt = freeze(cfg.optimizer(lr), trainable(params, parts))
    return train(params, loss, client, cfg, key=key, epochs=epochs, optimizer=opt, steps=steps)


def accuracy_of(model: SplitModel, params: PyTree, client: dict, prefix: str = "") -> Array:
    """Masked accuracy of ``model.apply(params, .)`` on one client's split.

    Args:
      model: anything with ``apply(params, x) -> logits``.
      params: the model's parameters.
      client: ``{prefix}x``, ``{prefix}y`` and ``{prefix}mask`` of one client.
      prefix: ``""`` or, e.g., ``"train_"``.
    Returns:
      a scalar in [0, 1] (0 for a client without samples).

    >>> from types import SimpleNamespace
    >>> c = {"train_x": jnp.eye(3), "train_y": jnp.array([0, 1, 0]), "train_mask": jnp.ones(3, bool)}
    >>> round(float(accuracy_of(SimpleNamespace(apply=lambda p, x: x), None, c, "train_")), 3)
    0.667
    """
    logits = batched_apply(lambda xb: model.apply(params, xb), client[prefix + "x"])
    return masked_accuracy(logits, client[prefix + "y"], client[prefix + "mask"])


def check_inputs(state, batch: ClientData, test: ClientData | None = None) -> None:
    """Eager, readable validation of a round's (and optionally a test set's) inputs. ``test`` rows must
    be the same clients as ``batch``'s, in the same order: ``round(state, batch, test)`` and the
    evaluations that personalise on training data pair them row by row.

    Args:
      state: the state (its ``num_clients`` and ``model.num_classes`` are read).
      batch: the round's training data.
      test: optionally the same clients' test data.
    Returns:
      None; raises :class:`pflax.data.DataError` on bad inputs.

    >>> from types import SimpleNamespace
    >>> from pflax.data import toy_federation
    >>> train, test = toy_federation()
    >>> check_inputs(SimpleNamespace(num_clients=1, model=SimpleNamespace(num_classes=10)), train, test)
    Traceback (most recent call last):
    pflax.data.sources.DataError: batch: client ids must lie in [0, 1), found [0, 1]
    """
    check_batch(state.num_clients, state.model.num_classes, batch, "batch")
    if test is not None:
        check_batch(state.num_clients, state.model.num_classes, test, "test")
        check_same_clients(batch, test)


def check_same_clients(a: ClientData, b: ClientData) -> None:
    """Raise unless ``a`` and ``b`` hold the same clients in the same order.

    Args:
      a, b: two :class:`pflax.data.ClientData` (train and test).
    Returns:
      None; raises :class:`pflax.data.DataError` otherwise.

    >>> from pflax.data import toy_federation
    >>> train, test = toy_federation()
    >>> check_same_clients(train, test.take([1, 0]))
    Traceback (most recent call last):
    pflax.data.sources.DataError: train and test rows must be the same clients, in the same order
    """
    if not np.array_equal(np.asarray(a.client_ids), np.asarray(b.client_ids)):
        raise DataError("train and test rows must be the same clients, in the same order")


# ---------------------------------------------------------------------------------------------------
# Several models in one state (IFCA, HypCluster, FeSEM, CFL, FedEM) and model-space geometry
# (FedFomo, FeSEM, CFL). A stack of models is one tree whose leaves have a leading model axis.

def stacked_models(key: Array, model: SplitModel, sample_x: Array, count: int) -> PyTree:
    """``count`` independently initialised models on a leading axis. Model 0 is the model
    :func:`init_state` draws from the same ``key`` (so it equals FedAvg's initialisation); model
    ``j > 0`` uses ``fold_in(k_model, j)``.

    Args:
      key: the algorithm's ``init`` key.
      model: a :class:`pflax.models.SplitModel`.
      sample_x: input samples (the first fixes the shapes).
      count: how many models.
    Returns:
      a tree whose leaves are ``[count, ...]``.

    >>> from pflax.models import mlp
    >>> stack = stacked_models(jax.random.PRNGKey(0), mlp(2, hidden=(3,)), jnp.zeros((1, 4)), 5)
    >>> stack["head"]["TorchDense_0"]["kernel"].shape
    (5, 3, 2)
    """
    k_model = jax.random.split(key, 3)[0]
    keys = [k_model] + [jax.random.fold_in(k_model, j) for j in range(1, count)]
    return jax.tree.map(lambda *a: jnp.stack(a), *[model.init(k, sample_x[:1]) for k in keys])


def pick(stacked: PyTree, index: Array) -> PyTree:
    """Entry ``index`` (a traced integer is fine) of a stack of models.

    Args:
      stacked: a tree with a leading model axis.
      index: an integer (scalar array or Python int).
    Returns:
      the tree without that axis.

    >>> pick({"w": jnp.array([[1, 2], [3, 4]])}, 1)["w"].tolist()
    [3, 4]
    """
    return jax.tree.map(lambda a: a[index], stacked)


def per_cluster_mean(stacked: PyTree, weights: Array, fallback: PyTree) -> PyTree:
    """``k`` weighted means of the participants' trees: ``weights [m, k]`` (sample sizes, one-hot
    memberships times sizes, or soft responsibilities). Column ``j`` with no weight keeps
    ``fallback[j]`` (a cluster without members keeps its model).

    Args:
      stacked: ``[m, ...]`` participants' trees.
      weights: ``[m, k]`` weight of every participant in every mean.
      fallback: ``[k, ...]`` kept where a column has no weight.
    Returns:
      ``[k, ...]`` the means.

    >>> w = jnp.array([[1.0, 0.0], [3.0, 0.0]])  # both participants in cluster 0, cluster 1 empty
    >>> per_cluster_mean({"w": jnp.array([2.0, 6.0])}, w, {"w": jnp.array([0.0, -1.0])})["w"].tolist()
    [5.0, -1.0]
    """
    return jax.vmap(lambda w, f: aggregate.weighted_mean(stacked, w, fallback=f), in_axes=(1, 0))(weights, fallback)


def flat_rows(stacked: PyTree) -> Array:
    """``[m, P]``: every tree of a stack flattened to one float vector (``ravel_pytree`` order).

    Args:
      stacked: a tree whose leaves are ``[m, ...]``.
    Returns:
      ``[m, P]`` with ``P`` the parameters of one tree.

    >>> flat_rows({"a": jnp.ones((2, 3)), "b": jnp.zeros((2, 1, 2))}).shape
    (2, 5)
    """
    return jax.vmap(lambda t: jax.flatten_util.ravel_pytree(t)[0])(stacked)


def data_loss(model: SplitModel, params: PyTree, x: Array, y: Array, mask: Array) -> Array:
    """Masked mean cross-entropy of ``params`` over a client's whole (padded) split; 0 without data.

    Args:
      model: anything with ``apply(params, x) -> logits``.
      params: the model's parameters.
      x, y, mask: the client's padded split.
    Returns:
      a scalar.

    >>> from types import SimpleNamespace
    >>> scaled = SimpleNamespace(apply=lambda p, x: p * x)  # logits = p * x
    >>> float(data_loss(scaled, 1.0, jnp.zeros((3, 2)), jnp.array([0, 1, 1]), jnp.zeros(3, bool)))
    0.0
    """
    logits = batched_apply(lambda xb: model.apply(params, xb), x)
    return masked_mean(cross_entropy(logits, y), mask)


def keep_if_empty(new_local: PyTree, old_local: PyTree, n: Array) -> PyTree:
    """Participants' new ``local`` rows, except that a participant without data (``n = 0``) keeps its
    old row (its cluster identity, its stored model): an empty client changes nothing of its own.

    Args:
      new_local: the participants' new rows, ``[m, ...]`` leaves.
      old_local: their old rows.
      n: ``[m]`` sample counts.
    Returns:
      the rows to store.

    >>> keep_if_empty({"c": jnp.array([5, 6])}, {"c": jnp.array([1, 2])}, jnp.array([3, 0]))["c"].tolist()
    [5, 2]
    """
    has = n > 0
    return jax.tree.map(lambda a, b: jnp.where(has.reshape(has.shape + (1,) * (a.ndim - 1)), a, b), new_local, old_local)
