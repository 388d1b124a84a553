"""FedNova (Wang, Liu, Liang, Joshi and Poor, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020; official code: https://github.com/JYWa/FedNova):
FedAvg with normalised averaging of the local updates.

Clients take different numbers of local steps ``tau_i = E * ceil(n_i / B)``; plain averaging then
over-weights the clients that ran longest (objective inconsistency). One round, for the
participants: each one runs ``local_epochs`` (E = 5) epochs of SGD from ``w^t`` (fresh optimiser,
FedPAC's common setting, Xu et al., ICLR 2023, Appendix B.3) to ``w_i`` and the server sets (the
paper's normalised update, Section 4)

    d_i = (w^t - w_i) / ||a_i||_1,   tau_eff = sum_i p_i ||a_i||_1,   w^{t+1} = w^t - tau_eff * sum_i p_i d_i,

with ``p_i = n_i / sum_j n_j``. For SGD with heavy-ball momentum ``rho`` (PyTorch form),
``||a_i||_1 = [tau_i - rho (1 - rho^tau_i) / (1 - rho)] / (1 - rho)`` (``= tau_i`` without momentum).

Deliberate choices: weight decay is treated as part of the local gradient, as in the official code;
a client without data (``tau_i = 0``) has ``p_i = 0`` (the round's ``weights``). With equal ``tau_i``
this is exactly FedAvg. Evaluation: the global model on each client's own test split (FedNova is not
personalized).

>>> import jax, pflax
>>> from pflax.data import from_partition, synthetic
>>> ds = synthetic(train_per_class=8, test_per_class=4, image_size=8)
>>> train = from_partition(ds.x_train, ds.y_train, [range(0, 40), range(40, 70)])
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...              Config(local_epochs=1, batch_size=20))
>>> state, metrics = round(state, train)
>>> metrics["tau_norm"].tolist()  # 2 steps each; ||a||_1 = [2 - 0.5 (1 - 0.25) / 0.5] / 0.5
[2.5, 2.5]
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import federated
from ..core.federated import State, sample_clients
from . import base
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "momentum_norm", "pieces_for"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """FedNova adds no hyper-parameter to the common SGD setting (its momentum enters ``||a_i||_1``).

    Attributes:
      lr, momentum, weight_decay, batch_size, local_epochs, execution: as in the common setting
        (FedPAC, Xu et al., ICLR 2023, Appendix B.3).

    >>> Config().momentum, Config(momentum=0.0).momentum  # 0: ||a_i||_1 = tau_i, plain step counts
    (0.5, 0.0)
    """


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 state (:meth:`State.from_model`).

    Args:
      key, model, sample_x, num_clients, config: as :meth:`State.from_model` takes them (the model from
        ``split(key, 3)[0]``, its shapes from ``sample_x[:1]``, ``N`` clients, a :class:`Config`).

    Returns:
      ``State`` with ``server`` = the global model; clients keep nothing.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation()
    >>> state = init(jax.random.PRNGKey(1), pflax.models.mlp(10, hidden=(8,)), train.x[1], 2)
    >>> state.server["body"]["TorchDense_0"]["kernel"].shape, state.clients
    ((64, 8), {})
    """
    return State.from_model(key, model, sample_x, num_clients, config)


def momentum_norm(tau, rho: float):
    """``||a_i||_1``: how many "gradient units" ``tau`` heavy-ball steps with momentum ``rho`` add up to.

    Args:
      tau: the number of local steps (an integer array).
      rho: the momentum.

    Returns:
      ``[tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho)`` as float32 (``tau`` when ``rho = 0``).

    >>> import jax.numpy as jnp
    >>> float(momentum_norm(jnp.array(2), 0.5)), float(momentum_norm(jnp.array(3), 0.0))
    (2.5, 3.0)
    """
    tau = tau.astype(jnp.float32)
    if rho == 0.0:
        return tau
    return (tau - rho * (1.0 - rho**tau) / (1.0 - rho)) / (1.0 - rho)


def _norms(batch, cfg: Config) -> jax.Array:
    """Every participant's ``||a_i||_1`` (depends on its sample size only)."""
    return jax.vmap(lambda m: momentum_norm(base.local_steps(m, cfg), cfg.momentum))(batch.mask)


def _weights(state: State, batch) -> jax.Array:
    """``n_i``, or 0 for a participant that takes no step: known before training, so the directions
    are averaged as the clients finish (never stacked)."""
    return jnp.where(_norms(batch, state.config) > 0, batch.mask.sum(1).astype(jnp.float32), 0.0)


def _local_update(params, participant: dict, model, cfg: Config) -> dict:
    new, loss = base.train(params, base.ce_loss(model), participant, cfg)
    norm = momentum_norm(base.local_steps(participant["mask"], cfg), cfg.momentum)  # ||a_i||_1
    # d_i = (w^t - w_i) / ||a_i||_1, zero for a client that took no step.
    scale = jnp.where(norm > 0, 1.0 / jnp.maximum(norm, 1e-12), 0.0)
    direction = jax.tree.map(lambda a, b: (a - b) * scale, params, new)
    return {"mean": direction, "n": base.num_samples(participant), "loss": loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    norms = _norms(batch, state.config)
    weights = _weights(state, batch)
    p = weights / jnp.maximum(weights.sum(), 1.0)
    tau_eff = jnp.sum(p * norms)
    mean_direction = federated.mean_or(reduced, jax.tree.map(jnp.zeros_like, state.server))
    server = jax.tree.map(lambda w, d: w - tau_eff * d, state.server, mean_direction)
    return server, None, {"n": uploads["n"], "loss": uploads["loss"], "tau_norm": norms}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """FedNova's round: the global model to everyone, plain local SGD, normalised averaging.

    Args:
      model: the global model's architecture; cfg: :class:`Config` (its ``momentum`` sets ``||a_i||_1``).

    Returns:
      :class:`pflax.core.federated.RoundPieces`; its ``weights`` are ``n_i`` (0 for a client that takes no
      step), known before training.

    >>> pieces_for(None, Config()).weights.__name__  # the model is only used when the pieces run
    '_weights'
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda params, participant: _local_update(params, participant, model, cfg),
        server_update=_server_update,
        weights=_weights,
    )


ALGORITHM = federated.build(
    "fednova", Config, init, pieces_for,
    lambda c, server, model, cfg: base.accuracy_of(model, server, c),
    "FedNova: FedAvg with updates normalised by each client's local steps", base.check_inputs)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
