"""FedFomo (Zhang et al., "Personalized Federated Learning with First Order Model Optimization", ICLR
2021; official code: https://github.com/NVlabs/FedFomo): each client combines the models of the others
that help it.

State: ``clients`` = every client's own model ``theta_i``; ``server`` = the server's affinity matrix
``{"affinity": [N, N]}`` and ``{"uploaded": [N]}`` (which clients have uploaded a model with data).

Validation split: from each client's real training samples, deterministically, every sample whose
rank ``r`` (0-based, in array order) has ``floor((r + 1) rho) > floor(r rho)`` is a validation sample
(``floor(n_i rho)`` of them, evenly spread, so class-sorted partitions do not give a one-class
validation set), ``rho = val_ratio = 0.2``; the rest is the training part. Without validation
samples every weight is 0.

One round, for the participants ``i``:

1. **Download** (server, ``broadcast``'s per-participant output): the ``M`` (default 5) models of
   other clients with the largest affinity ``P[i, n]`` among those that have uploaded (ties to the
   lowest id; fewer candidates than ``M`` leave slots empty). With ``epsilon > 0`` a participant
   instead downloads ``M`` uniformly random candidates with probability ``epsilon`` (off by default).
2. **Weights**: with ``L_i`` the masked mean cross-entropy on its validation part,
   ``w_n = max(0, (L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||)``, divided by their sum;
   a model at distance 0 or an empty slot gets 0, and if no downloaded model lowers the loss all
   weights are 0 (every division guarded).
3. **Update**: ``theta_i <- theta_i + sum_n w_n (theta_n - theta_i)``, then ``local_epochs`` (E = 5)
   epochs of CE training on the training part (fresh SGD, FedPAC's common setting); upload.
4. **Affinity** (server, ``server_update``): ``P[i, n] += s_n`` for the downloaded ``n``, with ``s_n``
   the signed, unnormalised score ``(L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||`` (0 for
   empty slots).

Evaluation: each client's own model on its own test split.

Defaults and sources: ``M = 5`` (FedPAC's baseline setting, Xu et al., ICLR 2023), ``val_ratio = 0.2``
(FL-bench, https://github.com/KarhouTam/FL-bench), ``epsilon = 0``; the affinity rule (top-``M`` by
``P`` row, ``P`` starting at the identity and increased by the signed scores) is FL-bench's.
Deliberate differences from FL-bench: candidates are all clients that have uploaded at least once
(their latest model), not only the previous round's participants (the same set under full
participation); the client itself is never one of the ``M`` (FL-bench adds it and its weight is 0
anyway); the distance is guarded (``0`` when ``||theta_n - theta_i|| = 0``) instead of
FL-bench's ``+ 1e-5``; the validation samples are spread over the client's data instead of its first
20%. Round 0 has no uploaded models, so every participant only trains locally. The original paper's
decaying epsilon-greedy exploration is available through ``epsilon`` (constant).

>>> import jax, pflax
>>> from pflax.data import from_partition, synthetic
>>> ds = synthetic(train_per_class=8, test_per_class=4, image_size=8)
>>> train = from_partition(ds.x_train, ds.y_train, [range(0, 30), range(30, 60), range(60, 80)])
>>> test = from_partition(ds.x_test, ds.y_test, [range(0, 10), range(10, 20), range(20, 40)])
>>> cfg = pflax.fedfomo.Config(local_epochs=1, num_downloads=2)
>>> state = pflax.fedfomo.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 3, cfg)
>>> state, metrics = pflax.fedfomo.round(state, train, test)  # round 0: nobody has uploaded yet
>>> state, metrics = pflax.fedfomo.round(state, train, test)
>>> metrics["downloaded"].shape, bool(metrics["download_valid"].all()), metrics["accuracy"].shape
((3, 2), True, (3,))
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..core import federated, rng
from ..core.aggregate import EXACT
from ..core.federated import State, sample_clients
from . import base
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "validation_split", "fomo_scores", "fomo_weights"]

EXPLORE_STREAM = 0xF0E0


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """FedFomo's download and validation setting on top of the common SGD setting.

    Attributes:
      num_downloads: ``M``, the models each participant downloads (FedPAC's baseline setting: 5).
      val_ratio: the share of a client's training samples held out for validation, in (0, 1).
      epsilon: the probability of downloading ``M`` random candidates instead (the paper's
        epsilon-greedy exploration, constant here), in [0, 1].

    >>> Config().num_downloads, Config().val_ratio, Config(epsilon=0.3).epsilon
    (5, 0.2, 0.3)
    """

    num_downloads: int = 5  # M
    val_ratio: float = 0.2
    epsilon: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        base.require(self.num_downloads >= 0, f"FedFomo num_downloads (M) must be >= 0, got {self.num_downloads}")
        base.require(0.0 < self.val_ratio < 1.0, f"FedFomo val_ratio must be in (0, 1), got {self.val_ratio}")
        base.require(0.0 <= self.epsilon <= 1.0, f"FedFomo epsilon must be in [0, 1], got {self.epsilon}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 FedFomo state.

    Args:
      key: PRNG key; the model comes from the first of ``split(key, 3)``, as for every algorithm.
      model: a split model.
      sample_x: one client's inputs (only the shape of ``sample_x[:1]`` is used).
      num_clients: ``N``.
      config: :class:`Config`.

    Returns:
      ``State`` with ``server = {"affinity": identity [N, N], "uploaded": False [N]}`` and ``clients`` =
      every client's copy of one initial model.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation(num_clients=3)
    >>> server = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 3).server
    >>> server["affinity"].astype(int).tolist(), bool(server["uploaded"].any())
    ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], False)
    """
    params = model.init(jax.random.split(key, 3)[0], sample_x[:1])
    server = {"affinity": jnp.eye(num_clients, dtype=jnp.float32), "uploaded": jnp.zeros((num_clients,), bool)}
    return State.create(key, server, params, num_clients, model, config)


def validation_split(mask, ratio: float):
    """A client's deterministic validation split (module docstring).

    Args:
      mask: the client's real samples ``[n]`` (bool); ratio: ``val_ratio``.

    Returns:
      ``(train_mask, val_mask)``: ``floor(n_i * ratio)`` real samples, evenly spread, for validation.

    >>> import jax.numpy as jnp
    >>> train_mask, val_mask = validation_split(jnp.arange(10) < 10, 0.2)
    >>> val_mask.nonzero()[0].tolist(), int(train_mask.sum())
    ([4, 9], 8)
    """
    rank = (jnp.cumsum(mask) - 1).astype(jnp.float32)
    # 1e-4 absorbs float error in (r + 1) * ratio for ratios such as 0.2 (exact multiples stay exact).
    val = mask & (jnp.floor((rank + 1.0) * ratio + 1e-4) > jnp.floor(rank * ratio + 1e-4))
    return mask & ~val, val


def fomo_scores(own_loss, losses, distances, valid):
    """FedFomo's signed scores ``(L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||``.

    Args:
      own_loss: ``L_i(theta_i)``; losses, distances, valid: ``[M]`` per downloaded model.

    Returns:
      ``[M]`` scores; 0 at distance 0 or for an invalid (empty) slot.

    >>> import jax.numpy as jnp
    >>> fomo_scores(2.0, jnp.array([1.0, 3.0]), jnp.array([2.0, 1.0]), jnp.array([True, True])).tolist()
    [0.5, -1.0]
    """
    ok = valid & (distances > 0)
    return jnp.where(ok, (own_loss - losses) / jnp.where(ok, distances, 1.0), 0.0)


def fomo_weights(scores):
    """FedFomo's combination weights ``max(0, s) / sum max(0, s)``.

    Args:
      scores: ``[M]`` signed scores (:func:`fomo_scores`).

    Returns:
      ``[M]`` weights; all zero when no downloaded model improves the loss.

    >>> import jax.numpy as jnp
    >>> fomo_weights(jnp.array([0.5, -1.0, 1.5])).tolist()
    [0.25, 0.0, 0.75]
    """
    positive = jnp.maximum(scores, 0.0)
    total = positive.sum()
    return jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0), 0.0)


def _downloads(state: State, ids):
    """``(selected [m, M], valid [m, M])`` for participants ``ids`` (M clipped to N - 1)."""
    n_all, cfg = state.num_clients, state.config
    m_eff = min(cfg.num_downloads, n_all - 1)
    candidate = state.server["uploaded"][None, :] & (jnp.arange(n_all)[None, :] != ids[:, None])
    scores = jnp.where(candidate, state.server["affinity"][ids], -jnp.inf)
    top_values, selected = jax.lax.top_k(scores, m_eff)
    if cfg.epsilon > 0:
        key = jax.random.fold_in(jax.random.fold_in(state.key, EXPLORE_STREAM), state.round)
        k_explore, k_rand = jax.random.split(key)
        rand_scores = jnp.where(candidate, rng.uniform(k_rand, candidate.shape), -jnp.inf)
        rand_values, rand_selected = jax.lax.top_k(rand_scores, m_eff)
        explore = rng.uniform(k_explore, (ids.shape[0], 1)) < cfg.epsilon
        selected = jnp.where(explore, rand_selected, selected)
        top_values = jnp.where(explore, rand_values, top_values)
    return selected, jnp.isfinite(top_values)


def _broadcast(state: State, ids):
    """Nothing common; each participant's ``M`` downloaded models and which slots hold one."""
    selected, valid = _downloads(state, ids)
    return (), {"downloads": federated.take(state.clients, selected), "valid": valid}


def _local_update(_, participant, model, cfg: Config) -> dict:
    train_mask, val_mask = validation_split(participant["mask"], cfg.val_ratio)
    own = participant["client"]
    downloads = participant["personal"]["downloads"]
    x, y = participant["x"], participant["y"]
    own_loss = base.data_loss(model, own, x, y, val_mask)
    losses = jax.lax.map(lambda p: base.data_loss(model, p, x, y, val_mask), downloads)
    own_flat = ravel_pytree(own)[0]
    distances = jnp.linalg.norm(base.flat_rows(downloads) - own_flat[None, :], axis=-1)
    valid = participant["personal"]["valid"] & (val_mask.sum() > 0)
    scores = fomo_scores(own_loss, losses, distances, valid)
    weights = fomo_weights(scores)
    combined = jax.tree.map(lambda t, d: t + jnp.tensordot(weights, d - t[None], axes=(0, 0), precision=EXACT),
                            own, downloads)
    params, loss = base.train(combined, base.ce_loss(model), {**participant, "mask": train_mask}, cfg)
    return {"client": params, "scores": scores, "weights": weights, "n": base.num_samples(participant), "loss": loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    ids = batch.client_ids
    selected, valid = _downloads(state, ids)  # what broadcast sent (deterministic)
    server = {"affinity": state.server["affinity"].at[ids[:, None], selected].add(uploads["scores"]),
              "uploaded": state.server["uploaded"].at[ids].set(state.server["uploaded"][ids] | (uploads["n"] > 0))}
    metrics = {"n": uploads["n"], "loss": uploads["loss"], "downloaded": selected, "download_valid": valid,
               "weights": uploads["weights"]}
    return server, None, metrics


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """FedFomo's round: per-participant downloads, weighted first-order combination and local
    training, affinity update.

    Args:
      model: the split model; cfg: :class:`Config` (``num_downloads``, ``val_ratio``, ``epsilon``).

    Returns:
      :class:`pflax.core.federated.RoundPieces` whose ``broadcast`` sends each participant its own
      ``M`` downloads.

    >>> import pflax
    >>> pieces = pieces_for(pflax.models.mlp(10, hidden=(8,)), Config(num_downloads=2))
    >>> pieces.broadcast.__name__, pieces.weights.__name__
    ('_broadcast', 'sample_sizes')
    """
    return federated.RoundPieces(
        broadcast=_broadcast,
        local_update=lambda message, participant: _local_update(message, participant, model, cfg),
        server_update=_server_update,
    )


ALGORITHM = federated.build(
    "fedfomo", Config, init, pieces_for,
    lambda c, server, model, cfg: base.accuracy_of(model, c["client"], c),
    "FedFomo: each client combines the downloaded models that lower its validation loss", base.check_inputs)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
