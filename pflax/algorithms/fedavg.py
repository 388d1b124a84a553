"""FedAvg (McMahan et al., 2017): the non-personalized baseline.

One round, for the participants ``S_t``: every participant starts from the global model, runs
``local_epochs`` epochs of minibatch SGD on the whole model with a fresh optimiser (the FedPAC papers'
common setting: lr 0.01, momentum 0.5, weight decay 5e-4, batch 50, E = 5), and the server replaces
the global model by the sample-size weighted mean of the participants' models. Evaluation uses the
global model on each client's test data.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ..core.execution import map_clients, map_clients_and_average
from ..core.losses import cross_entropy, masked_mean
from ..core.optim import pytorch_sgd
from ..core.train import batched_apply, local_train
from ..data.clients import ClientData
from ..metrics import masked_accuracy
from ..models import SplitModel
from .base import SGDConfig
from .common import check_batch, guard_finite, init_on_execution_devices, sample_clients  # noqa: F401 (sample_clients is part of the API)

Array = jax.Array
PyTree = Any

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients"]


class Config(SGDConfig):
    """FedAvg's hyper-parameters: exactly the shared local-SGD setting (FedPAC's common setting)."""


@struct.dataclass
class State:
    params: PyTree  # the global model {"body", "head"}
    round: Array
    key: Array  # PRNG key for local training (shuffling)
    sampling_key: Array  # separate PRNG stream for client sampling
    num_clients: int = struct.field(pytree_node=False)
    model: SplitModel = struct.field(pytree_node=False)
    config: Config = struct.field(pytree_node=False)


@init_on_execution_devices
def init(key: Array, model: SplitModel, sample_x: Array, num_clients: int, config: Config = Config()) -> State:
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    k_model, k_train, k_sample = jax.random.split(key, 3)
    return State(
        params=model.init(k_model, sample_x[:1]),
        round=jnp.zeros((), jnp.int32),
        key=k_train,
        sampling_key=k_sample,
        num_clients=num_clients,
        model=model,
        config=config,
    )


def _client_update(client: dict, params: PyTree, model: SplitModel, cfg: Config) -> dict:
    """E local epochs of full-model SGD from the global model. Pure; mapped over clients."""

    def loss(p, batch, w):
        return masked_mean(cross_entropy(model.apply(p, batch["x"]), batch["y"]), w)

    new_params, loss_value = local_train(
        params, loss, {"x": client["x"], "y": client["y"]}, client["mask"], client["key"],
        epochs=cfg.local_epochs, batch_size=cfg.batch_size,
        optimizer=pytorch_sgd(cfg.lr, cfg.momentum, cfg.weight_decay),
    )
    return {"params": new_params, "n": client["mask"].sum().astype(jnp.float32), "loss": loss_value}


def _round(state: State, batch: ClientData) -> tuple[State, dict]:
    cfg, model = state.config, state.model
    round_key = jax.random.fold_in(state.key, state.round)
    per_client = {
        "x": batch.x,
        "y": batch.y,
        "mask": batch.mask,
        "key": jax.vmap(lambda i: jax.random.fold_in(round_key, i))(batch.client_ids),
    }
    # Sample-size weighted mean, accumulated while the clients run (one model in memory, not m); a
    # round where nobody has data keeps the old model.
    out, params = map_clients_and_average(
        lambda c, p: _client_update(c, p, model, cfg), per_client, state.params, cfg.execution,
        "params", batch.mask.sum(1), fallback=state.params,
    )
    new_state, finite = guard_finite(state, state.replace(params=params, round=state.round + 1))
    return new_state, {"client_ids": batch.client_ids, "n": out["n"], "loss": out["loss"], "nonfinite": ~finite}


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = """One FedAvg round: ``(state, batch) -> (state, metrics)``; per-participant metrics. Jit-compiled."""


def _evaluate(state: State, test: ClientData) -> dict:
    model = state.model

    def one(c, params):
        logits = batched_apply(lambda xb: model.apply(params, xb), c["x"])
        return masked_accuracy(logits, c["y"], c["mask"])

    per_client = {"x": test.x, "y": test.y, "mask": test.mask}
    acc = map_clients(one, per_client, state.params, state.config.execution)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """Accuracy of the global model on each client's test data: ``{"client_ids", "accuracy", "n"}``."""


def check_inputs(state: State, batch: ClientData, test: ClientData | None = None) -> None:
    check_batch(state.num_clients, state.model.num_classes, batch, "batch")
    if test is not None:
        check_batch(state.num_clients, state.model.num_classes, test, "test")
