"""Leaf-level partial sharing for models with BatchNorm: FedBN, FedPick, and the FedAvg / FedProx /
FedPer / FedRep / LG-FedAvg / Local-only rules on BN backbones.

Every client holds a full copy of the model's variables (``params`` and ``batch_stats``, leading
client axis). A :class:`Sharing` rule marks which *leaves* the server averages: the leaves of the
listed top-level parts (``"encoder"``, ``"head"``, FedPick's ``"pfsm"``), with or without their
BatchNorm leaves. One round, for the participants:

1. each participant's model = the server's shared leaves + its own local leaves;
2. it trains with the algorithm's objective (a fresh PyTorch SGD per phase; FedRep-style
   ``head_epochs`` first train the head alone, then ``local_epochs`` train the rest with the head
   frozen; BN running statistics update in every phase, as in PyTorch's ``train()`` mode);
3. the server replaces each shared leaf by the sample-size weighted mean over participants;
   local leaves (BN under FedBN, FedPick's PFSM) are never averaged and stay with their client.

A client's personalized model, used for evaluation, is the server's shared leaves + its local ones.
The BN-free FedPAC-family modules (``fedavg``, ``fedper``, ...) keep their ``{body, head}`` layout;
this module is their counterpart for BN backbones (FedPick's Table II), with the same rules. Their
common setting here is FedPick's (spec C.5): SGD lr 0.01, momentum 0.5, no weight decay, batch 64,
one local epoch.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from ..core import aggregate
from ..core.losses import cross_entropy, masked_mean
from ..core.optim import freeze
from ..core.train import batched_apply, local_train_stateful
from ..data.clients import ClientData
from ..data.sources import DataError
from ..metrics import masked_accuracy
from ..models.bn import BNModel, is_bn_path
from . import base
from .common import (check_batch, guard_finite, init_heads, init_on_execution_devices, sample_clients,  # noqa: F401
                     stack_heads_at)

Array = jax.Array
PyTree = Any

__all__ = ["Sharing", "Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "fedavg", "fedprox", "fedper", "fedrep", "lg_fedavg", "local_only", "fedbn"]


@dataclasses.dataclass(frozen=True)
class Sharing:
    """Which leaves the server averages: those under the top-level ``parts``; BatchNorm leaves (affine
    parameters and running statistics) only if ``bn`` is True."""

    parts: tuple[str, ...] = ("encoder", "head")
    bn: bool = False

    def mask(self, variables: PyTree) -> PyTree:
        """Boolean tree over ``{"params", "batch_stats"}`` variables: True where the server averages."""

        def shared(path, _leaf):
            part = str(getattr(path[1], "key", path[1])) if len(path) > 1 else ""
            return part in self.parts and (self.bn or not is_bn_path(path))

        return jax.tree_util.tree_map_with_path(shared, variables)


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """FedPick's common setting (lr 0.01, momentum 0.5, no weight decay, batch 64, 1 local epoch) plus
    the rule: ``sharing``, FedRep's ``head_epochs`` (0: joint training) and FedProx's ``prox_mu``."""

    weight_decay: float = 0.0
    batch_size: int = 64
    local_epochs: int = 1
    sharing: Sharing = Sharing()
    head_epochs: int = 0
    prox_mu: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.head_epochs >= 0, f"head_epochs must be >= 0, got {self.head_epochs}")
        base.require(self.prox_mu >= 0, f"prox_mu must be >= 0, got {self.prox_mu}")


def fedavg(**kw) -> Config:
    """Everything averaged, BN included (FedBN's FedAvg baseline)."""
    return Config(sharing=Sharing(("encoder", "head"), bn=True), **kw)


def fedprox(mu: float = 0.01, **kw) -> Config:
    """FedAvg plus (mu/2)||w - w_global||^2 locally; FedPick used mu = 0.01."""
    return Config(sharing=Sharing(("encoder", "head"), bn=True), prox_mu=mu, **kw)


def fedper(**kw) -> Config:
    """Encoder averaged (its BN included), head local."""
    return Config(sharing=Sharing(("encoder",), bn=True), **kw)


def fedrep(head_epochs: int = 4, **kw) -> Config:
    """FedPer's sharing, trained head-first: ``head_epochs`` head epochs then ``local_epochs`` encoder
    epochs (FedPick used 4 + 1)."""
    return Config(sharing=Sharing(("encoder",), bn=True), head_epochs=head_epochs, **kw)


def lg_fedavg(**kw) -> Config:
    """Head averaged, encoder local (C-PAC's LG-FedAvg)."""
    return Config(sharing=Sharing(("head",), bn=True), **kw)


def local_only(**kw) -> Config:
    """Nothing averaged: single-client training."""
    return Config(sharing=Sharing((), bn=False), **kw)


def fedbn(**kw) -> Config:
    """Everything but BatchNorm averaged (Li et al., 2021)."""
    return Config(sharing=Sharing(("encoder", "head"), bn=False), **kw)


@struct.dataclass
class State:
    clients: PyTree  # every client's full variables {"params", "batch_stats"}, leading axis N
    server: PyTree  # the server's copy; only its shared leaves are ever read
    round: Array
    key: Array  # PRNG key for local training (shuffling, noise)
    sampling_key: Array  # separate stream for client sampling
    num_clients: int = struct.field(pytree_node=False)
    model: Any = struct.field(pytree_node=False)
    config: Any = struct.field(pytree_node=False)


# objective(model, config, params, batch_stats, minibatch, weights, step_key) -> (loss, new_batch_stats)
Objective = Callable[..., tuple[Array, PyTree]]
# predict(model, config, variables, x) -> logits (evaluation mode)
Predict = Callable[[Any, Any, PyTree, Array], Array]


def cross_entropy_objective(model: BNModel, config, params, stats, batch, w, key):
    logits, new_stats = model.logits({"params": params, "batch_stats": stats}, batch["x"], True, w)
    return masked_mean(cross_entropy(logits, batch["y"]), w), new_stats


def plain_predict(model: BNModel, config, variables, x):
    return model.logits(variables, x, False)[0]


def init_from_variables(key: Array, variables: PyTree, num_clients: int, model, config) -> State:
    """Every client and the server start from ``variables``."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    k_train, k_sample = jax.random.split(key)
    return State(clients=init_heads(variables, num_clients), server=variables, round=jnp.zeros((), jnp.int32),
                 key=k_train, sampling_key=k_sample, num_clients=num_clients, model=model, config=config)


@init_on_execution_devices
def init(key: Array, model: BNModel, sample_x: Array, num_clients: int, config: Config = Config()) -> State:
    k_model, k_rest = jax.random.split(key)
    return init_from_variables(k_rest, model.init(k_model, sample_x[:1]), num_clients, model, config)


def personal(server: PyTree, own: PyTree, share_mask: PyTree) -> PyTree:
    """A client's model: the server's shared leaves and its own local leaves."""
    return jax.tree.map(lambda m, s, o: s if m else o, share_mask, server, own)


def _train(variables: PyTree, objective: Objective, model, cfg: Config, client: dict) -> tuple[PyTree, Array]:
    """One client's local update (fresh optimiser per phase); the FedProx anchor is the start point."""
    anchor = variables["params"]

    def loss(p, s, batch, w, k):
        value, new_s = objective(model, cfg, p, s, batch, w, k)
        if cfg.prox_mu > 0:
            value = value + cfg.prox_mu * base.proximity(p, anchor)
        return value, new_s

    data = {"x": client["x"], "y": client["y"]}
    params, stats = variables["params"], variables["batch_stats"]
    k_head, k_body = jax.random.split(client["key"])
    if cfg.head_epochs > 0:
        is_head = jax.tree_util.tree_map_with_path(lambda path, _: str(path[0].key) == "head", params)
        params, stats, _ = local_train_stateful(
            params, stats, loss, data, client["mask"], k_head, epochs=cfg.head_epochs,
            batch_size=cfg.batch_size, optimizer=freeze(cfg.optimizer(), is_head))
        body_opt = freeze(cfg.optimizer(), jax.tree.map(lambda h: not h, is_head))
    else:
        body_opt = cfg.optimizer()
    params, stats, body_loss = local_train_stateful(
        params, stats, loss, data, client["mask"], k_body, epochs=cfg.local_epochs,
        batch_size=cfg.batch_size, optimizer=body_opt)
    return {"params": params, "batch_stats": stats}, body_loss


def client_inputs(state: State, batch: ClientData) -> dict:
    """Participants' data, their own variables, and a training key ``fold_in(round key, id)``."""
    if batch.x.shape[0] == 0:
        raise DataError("batch: no clients in the batch (zero clients sampled)")
    round_key = jax.random.fold_in(state.key, state.round)
    return {"x": batch.x, "y": batch.y, "mask": batch.mask,
            "local": jax.tree.map(lambda a: a[batch.client_ids], state.clients),
            "key": jax.vmap(lambda i: jax.random.fold_in(round_key, i))(batch.client_ids)}


def run_round(state: State, batch: ClientData, objective: Objective = cross_entropy_objective) -> tuple[State, dict]:
    """One round of leaf-level partial sharing with ``objective`` (not jitted; callers jit)."""
    cfg, model = state.config, state.model
    share = cfg.sharing.mask(state.server)
    per_client = client_inputs(state, batch)

    def client_update(c, server):
        new, loss = _train(personal(server, c["local"], share), objective, model, cfg, c)
        return {"variables": new, "n": base.num_samples(c), "loss": loss}

    out = base.run_clients(state, per_client, client_update, shared=state.server)
    n = out["n"]
    averaged = aggregate.weighted_mean(out["variables"], n, fallback=state.server)
    server = jax.tree.map(lambda m, new, old: new if m else old, share, averaged, state.server)
    clients = stack_heads_at(state.clients, batch.client_ids, out["variables"])
    candidate = state.replace(clients=clients, server=server, round=state.round + 1)
    new_state, finite = guard_finite(state, candidate)
    return new_state, {"client_ids": batch.client_ids, "n": n, "loss": out["loss"], "nonfinite": ~finite}


def personal_variables(state: State, client_ids: Array) -> PyTree:
    """The personalized models of ``client_ids`` (leading axis), as evaluation uses them."""
    share = state.config.sharing.mask(state.server)
    own = jax.tree.map(lambda a: a[client_ids], state.clients)
    return jax.tree.map(lambda m, s, o: jnp.broadcast_to(s, o.shape) if m else o, share, state.server, own)


def run_evaluate(state: State, test: ClientData, predict: Predict = plain_predict) -> dict:
    """Each client's personalized model on its own test data: ``{client_ids, accuracy, n}``."""
    if test.x.shape[0] == 0:
        raise DataError("test: no clients in the batch")
    per_client = {"x": test.x, "y": test.y, "mask": test.mask,
                  "variables": personal_variables(state, test.client_ids)}

    def one(c, _):
        logits = batched_apply(lambda xb: predict(state.model, state.config, c["variables"], xb), c["x"])
        return masked_accuracy(logits, c["y"], c["mask"])

    acc = base.run_clients(state, per_client, one, shared=())
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


def _round(state: State, batch: ClientData, test: ClientData | None = None):
    new_state, metrics = run_round(state, batch)
    if test is not None:
        metrics["accuracy"] = run_evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One round of the configured rule: ``(state, batch[, test]) -> (state, metrics)``."
evaluate = jax.jit(run_evaluate, static_argnums=2)
evaluate.__doc__ = "Each client's personalized model on its own test split: ``{client_ids, accuracy, n}``."


def check_inputs(state: State, batch: ClientData, test: ClientData | None = None) -> None:
    """Eager, readable validation of a round's inputs (see :func:`pflax.algorithms.base.check_inputs`)."""
    check_batch(state.num_clients, state.model.num_classes, batch, "batch")
    if test is not None:
        check_batch(state.num_clients, state.model.num_classes, test, "test")
        base.check_same_clients(batch, test)
