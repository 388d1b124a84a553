"""Shared machinery for the baselines: one state layout, local SGD, round bookkeeping, evaluation.

Every baseline keeps two trees:

* ``shared``: what the server holds and sends to every participant (for example FedPer's body,
  Ditto's global model, SCAFFOLD's model and server control variate);
* ``local``: what each client keeps for itself, with a leading axis over all ``N`` clients (FedPer's
  heads, Ditto's personal models, SCAFFOLD's client control variates). Non-participants' entries are
  never touched by a round.

A module then only says what one client does (a pure function mapped with
:func:`pflax.core.execution.map_clients`) and how the server combines the results. Where the server
takes a sample-size weighted mean, :func:`run_clients_and_average` (and :func:`split_round`, built on
it) accumulates the mean while the clients run, so the participants' models are never stacked. The
result equals stacking then averaging up to float round-off (summation order). The common SGD
setting is FedPAC's (spec D): PyTorch SGD, lr 0.01, momentum 0.5, coupled weight decay 5e-4,
batch 50, E = 5 local epochs, with a fresh optimiser for every phase of every round.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..core import aggregate
from ..core.execution import Execution, map_clients, map_clients_and_average
from ..core.losses import cross_entropy, masked_mean
from ..core.optim import freeze, pytorch_sgd
from ..core.split import part_mask
from ..core.train import batched_apply, local_train
from ..data.clients import ClientData
from ..data.sources import DataError
from ..metrics import masked_accuracy
from ..models import SplitModel
from .common import check_batch, guard_finite, init_heads, sample_clients, stack_heads_at  # noqa: F401 (sample_clients is part of the API)

Array = jax.Array
PyTree = Any

# Separate PRNG stream for evaluation-time fine-tuning, so evaluating never changes training randomness.
FINETUNE_STREAM = 0x5EED


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


@struct.dataclass
class State:
    shared: PyTree  # held by the server, broadcast to participants
    local: PyTree  # per-client trees, leading axis = all N clients
    round: Array  # int32 round counter
    key: Array  # PRNG key for local training (shuffling)
    sampling_key: Array  # separate PRNG stream for client sampling
    num_clients: int = struct.field(pytree_node=False)
    model: SplitModel = struct.field(pytree_node=False)
    config: Any = struct.field(pytree_node=False)


def init_state(
    key: Array,
    model: SplitModel,
    sample_x: Array,
    num_clients: int,
    config: Any,
    layout: Callable[[PyTree], tuple[PyTree, PyTree]],
) -> State:
    """One random model, split by ``layout(params) -> (shared, local_of_one_client)``; every client
    starts from the same local copy. The key split matches FedAvg's, so equal seeds give equal models."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    k_model, k_train, k_sample = jax.random.split(key, 3)
    shared, local = layout(model.init(k_model, sample_x[:1]))
    return State(
        shared=shared,
        local=init_heads(local, num_clients),
        round=jnp.zeros((), jnp.int32),
        key=k_train,
        sampling_key=k_sample,
        num_clients=num_clients,
        model=model,
        config=config,
    )


def take(tree: PyTree, ids: Array) -> PyTree:
    return jax.tree.map(lambda a: a[ids], tree)


def client_inputs(state: State, batch: ClientData) -> dict:
    """Per-participant inputs: data, its ``local`` tree and a training key ``fold_in(round key, id)``."""
    if batch.x.shape[0] == 0:
        raise DataError("batch: no clients in the batch (zero clients sampled)")
    round_key = jax.random.fold_in(state.key, state.round)
    return {
        "x": batch.x,
        "y": batch.y,
        "mask": batch.mask,
        "local": take(state.local, batch.client_ids),
        "key": jax.vmap(lambda i: jax.random.fold_in(round_key, i))(batch.client_ids),
    }


def run_clients(state: State, per_client: dict, fn: Callable[[dict, PyTree], dict], shared: PyTree = None) -> dict:
    """``fn(client, shared)`` for every participant, with the config's execution strategy."""
    shared = state.shared if shared is None else shared
    return map_clients(fn, per_client, shared, state.config.execution)


def run_clients_and_average(state: State, per_client: dict, fn: Callable[[dict, PyTree], dict], average: str,
                            fallback: PyTree, shared: PyTree = None, weights: Array | None = None) -> tuple[dict, PyTree]:
    """Run ``fn`` for every participant and average one of its outputs on the fly.

    Returns ``(fn's other outputs, stacked; the weighted mean of fn's output[average])``, the mean
    being ``fallback`` when every weight is zero. ``weights [m]`` must be known before training;
    the default is the sample sizes. The averaged output is added to a running sum as each client
    finishes (:func:`pflax.core.execution.map_clients_and_average`), so the participants' models are
    never stacked.
    """
    shared = state.shared if shared is None else shared
    weights = per_client["mask"].sum(1) if weights is None else weights
    return map_clients_and_average(fn, per_client, shared, state.config.execution, average, weights, fallback)


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


def finish_round(state: State, batch: ClientData, shared: PyTree, new_local: PyTree | None, metrics: dict) -> tuple[State, dict]:
    """Write participants' ``local`` trees, advance the round, and refuse non-finite updates."""
    local = state.local if new_local is None else stack_heads_at(state.local, batch.client_ids, new_local)
    candidate = state.replace(shared=shared, local=local, round=state.round + 1)
    new_state, finite = guard_finite(state, candidate)
    return new_state, {"client_ids": batch.client_ids, **metrics, "nonfinite": ~finite}


def accuracy_of(model: SplitModel, params: PyTree, client: dict, prefix: str = "") -> Array:
    logits = batched_apply(lambda xb: model.apply(params, xb), client[prefix + "x"])
    return masked_accuracy(logits, client[prefix + "y"], client[prefix + "mask"])


def evaluate_personal(state: State, test: ClientData, personal: Callable[[dict, PyTree], PyTree]) -> dict:
    """Accuracy of each client's personalized model ``personal(client, shared)`` on its own test data."""
    if test.x.shape[0] == 0:
        raise DataError("test: no clients in the batch")
    per_client = {"x": test.x, "y": test.y, "mask": test.mask, "local": take(state.local, test.client_ids)}
    acc = run_clients(state, per_client, lambda c, s: accuracy_of(state.model, personal(c, s), c))
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


def evaluate_finetuned(state: State, test: ClientData, train_data: ClientData,
                       personal: Callable[[dict, PyTree], PyTree], parts: tuple[str, ...], epochs: int) -> dict:
    """Accuracy after fine-tuning ``parts`` of ``personal(client, shared)`` for ``epochs`` epochs on the
    client's training data (a fresh SGD with the config's setting). Nothing is written to the state;
    the fine-tuning keys come from a stream of their own, per round and client."""
    if test.x.shape[0] == 0:
        raise DataError("test: no clients in the batch")
    cfg, model = state.config, state.model
    ft_key = jax.random.fold_in(jax.random.fold_in(state.key, FINETUNE_STREAM), state.round)
    per_client = {
        "x": train_data.x, "y": train_data.y, "mask": train_data.mask,
        "test_x": test.x, "test_y": test.y, "test_mask": test.mask,
        "local": take(state.local, test.client_ids),
        "key": jax.vmap(lambda i: jax.random.fold_in(ft_key, i))(test.client_ids),
    }

    def one(c, shared):
        tuned, _ = train_parts(personal(c, shared), parts, ce_loss(model), c, cfg, epochs=epochs)
        return accuracy_of(model, tuned, c, prefix="test_")

    acc = run_clients(state, per_client, one)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


def check_inputs(state: State, batch: ClientData, test: ClientData | None = None) -> None:
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
# Partial model sharing (Local-only, FedAvg-FT, FedPer, LG-FedAvg, FedRep, FedBABU): the model's parts
# ("body", "head") are either shared (in ``state.shared``) or local (in ``state.local``); a client
# trains the assembled model, and the server averages the shared parts named in ``averaged``.

def split_layout(shared_parts: tuple[str, ...]) -> Callable[[PyTree], tuple[PyTree, PyTree]]:
    """``layout`` for :func:`init_state`: the named parts are shared, the others local."""
    return lambda params: (
        {p: v for p, v in params.items() if p in shared_parts},
        {p: v for p, v in params.items() if p not in shared_parts},
    )


def assembled(client: dict, shared: PyTree) -> PyTree:
    """A client's full model: the server's shared parts plus its own local parts."""
    return {**shared, **client["local"]}


TrainFn = Callable[[PyTree, dict, SplitModel, Any], tuple[PyTree, Array]]


def split_round(state: State, batch: ClientData, train_fn: TrainFn, averaged: tuple[str, ...]) -> tuple[State, dict]:
    """One round of partial sharing: every participant trains its assembled model with ``train_fn``;
    the server replaces each part in ``averaged`` by the sample-size weighted mean over participants
    (every client then receives it); local parts are written back for participants only. Shared
    parts not in ``averaged`` (FedBABU's frozen head) are left exactly as they are."""
    model, cfg = state.model, state.config

    def client_update(c, shared):
        params, loss = train_fn(assembled(c, shared), c, model, cfg)
        return {"averaged": {p: params[p] for p in averaged}, "local": {p: params[p] for p in state.local},
                "n": num_samples(c), "loss": loss}

    fallback = {p: state.shared[p] for p in averaged}
    out, means = run_clients_and_average(state, client_inputs(state, batch), client_update, "averaged", fallback)
    shared = {**state.shared, **means}
    return finish_round(state, batch, shared, out["local"], {"n": out["n"], "loss": out["loss"]})


def train_full(params: PyTree, client: dict, model: SplitModel, cfg: SGDConfig) -> tuple[PyTree, Array]:
    """``local_epochs`` epochs of joint body+head SGD with cross-entropy (fresh optimiser)."""
    return train(params, ce_loss(model), client, cfg)


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
