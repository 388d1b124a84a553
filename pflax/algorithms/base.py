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
from ..core.train import batched_apply, local_train
from ..data.clients import ClientData
from ..data.sources import DataError
from ..metrics import masked_accuracy
from ..models import SplitModel
from .common import check_batch

Array = jax.Array
PyTree = Any


@dataclasses.dataclass(frozen=True)
class SGDConfig:
    """The local-training setting every baseline shares (FedPAC's common setting, spec D)."""

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
        return pytorch_sgd(self.lr if lr is None else lr, self.momentum, self.weight_decay)


def require(condition: bool, message: str) -> None:
    """Config validation helper: raise ``ValueError(message)`` unless ``condition``."""
    if not condition:
        raise ValueError(message)


def num_samples(client: dict) -> Array:
    return client["mask"].sum().astype(jnp.float32)


def local_steps(mask: Array, cfg: SGDConfig) -> Array:
    """Optimiser steps one client takes in a round: minibatches with at least one real sample over
    ``local_epochs`` epochs, ``E * ceil(n_i / B)`` (0 for a client without data)."""
    n = mask.sum()
    return cfg.local_epochs * ((n + cfg.batch_size - 1) // cfg.batch_size)


def ce_loss(model: SplitModel) -> Callable:
    """Masked mean cross-entropy of the full model, in :func:`local_train`'s loss signature."""

    def loss(params, batch, w):
        return masked_mean(cross_entropy(model.apply(params, batch["x"]), batch["y"]), w)

    return loss


def proximity(params: PyTree, anchor: PyTree) -> Array:
    """``0.5 * ||params - anchor||^2`` over every leaf; the anchor is a constant (no gradient)."""
    anchor = jax.lax.stop_gradient(anchor)
    return 0.5 * sum(jnp.sum(jnp.square(p - a)) for p, a in zip(jax.tree.leaves(params), jax.tree.leaves(anchor)))


def train(params: PyTree, loss: Callable, client: dict, cfg: SGDConfig, *, key: Array | None = None,
          epochs: int | None = None, optimizer=None, data: dict | None = None) -> tuple[PyTree, Array]:
    """:func:`local_train` on one client's data with the config's defaults (fresh optimiser)."""
    return local_train(
        params, loss, {"x": client["x"], "y": client["y"]} if data is None else data, client["mask"],
        client["key"] if key is None else key,
        epochs=cfg.local_epochs if epochs is None else epochs, batch_size=cfg.batch_size,
        optimizer=cfg.optimizer() if optimizer is None else optimizer,
    )


def trainable(params: PyTree, parts: tuple[str, ...]) -> PyTree:
    """Boolean tree: True on the leaves of the named parts ("body", "head")."""
    masks = [part_mask(params, p) for p in parts]
    return jax.tree.map(lambda *m: any(m), *masks) if masks else jax.tree.map(lambda _: False, params)


def train_parts(params: PyTree, parts: tuple[str, ...], loss: Callable, client: dict, cfg: SGDConfig, *,
                key: Array | None = None, epochs: int | None = None, lr: float | None = None) -> tuple[PyTree, Array]:
    """Train only ``parts`` of a split model; the others are frozen by masked optimiser updates
    (no weight decay, no momentum on them, as when PyTorch leaves them out of the optimiser)."""
    opt = freeze(cfg.optimizer(lr), trainable(params, parts))
    return train(params, loss, client, cfg, key=key, epochs=epochs, optimizer=opt)


def accuracy_of(model: SplitModel, params: PyTree, client: dict, prefix: str = "") -> Array:
    logits = batched_apply(lambda xb: model.apply(params, xb), client[prefix + "x"])
    return masked_accuracy(logits, client[prefix + "y"], client[prefix + "mask"])


def check_inputs(state, batch: ClientData, test: ClientData | None = None) -> None:
    """Eager, readable validation of a round's (and optionally a test set's) inputs. ``test`` rows must
    be the same clients as ``batch``'s, in the same order: ``round(state, batch, test)`` and the
    evaluations that personalise on training data pair them row by row."""
    check_batch(state.num_clients, state.model.num_classes, batch, "batch")
    if test is not None:
        check_batch(state.num_clients, state.model.num_classes, test, "test")
        check_same_clients(batch, test)


def check_same_clients(a: ClientData, b: ClientData) -> None:
    if not np.array_equal(np.asarray(a.client_ids), np.asarray(b.client_ids)):
        raise DataError("train and test rows must be the same clients, in the same order")


# ---------------------------------------------------------------------------------------------------
# Several models in one state (IFCA, HypCluster, FeSEM, CFL, FedEM) and model-space geometry
# (FedFomo, FeSEM, CFL). A stack of models is one tree whose leaves have a leading model axis.

def stacked_models(key: Array, model: SplitModel, sample_x: Array, count: int) -> PyTree:
    """``count`` independently initialised models on a leading axis. Model 0 is the model
    :func:`init_state` draws from the same ``key`` (so it equals FedAvg's initialisation); model
    ``j > 0`` uses ``fold_in(k_model, j)``."""
    k_model = jax.random.split(key, 3)[0]
    keys = [k_model] + [jax.random.fold_in(k_model, j) for j in range(1, count)]
    return jax.tree.map(lambda *a: jnp.stack(a), *[model.init(k, sample_x[:1]) for k in keys])


def pick(stacked: PyTree, index: Array) -> PyTree:
    """Entry ``index`` (a traced integer is fine) of a stack of models."""
    return jax.tree.map(lambda a: a[index], stacked)


def per_cluster_mean(stacked: PyTree, weights: Array, fallback: PyTree) -> PyTree:
    """``k`` weighted means of the participants' trees: ``weights [m, k]`` (sample sizes, one-hot
    memberships times sizes, or soft responsibilities). Column ``j`` with no weight keeps
    ``fallback[j]`` (a cluster without members keeps its model)."""
    return jax.vmap(lambda w, f: aggregate.weighted_mean(stacked, w, fallback=f), in_axes=(1, 0))(weights, fallback)


def flat_rows(stacked: PyTree) -> Array:
    """``[m, P]``: every tree of a stack flattened to one float vector (``ravel_pytree`` order)."""
    return jax.vmap(lambda t: jax.flatten_util.ravel_pytree(t)[0])(stacked)


def data_loss(model: SplitModel, params: PyTree, x: Array, y: Array, mask: Array) -> Array:
    """Masked mean cross-entropy of ``params`` over a client's whole (padded) split; 0 without data."""
    logits = batched_apply(lambda xb: model.apply(params, xb), x)
    return masked_mean(cross_entropy(logits, y), mask)


def keep_if_empty(new_local: PyTree, old_local: PyTree, n: Array) -> PyTree:
    """Participants' new ``local`` rows, except that a participant without data (``n = 0``) keeps its
    old row (its cluster identity, its stored model): an empty client changes nothing of its own."""
    has = n > 0
    return jax.tree.map(lambda a, b: jnp.where(has.reshape(has.shape + (1,) * (a.ndim - 1)), a, b), new_local, old_local)
