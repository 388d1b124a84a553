"""FedFomo (Zhang et al., 2021): each client combines the models of the others that help it.

State: ``local`` = every client's own model ``theta_i``; ``shared`` = the server's affinity matrix
``{"affinity": [N, N]}`` and ``{"uploaded": [N]}`` (which clients have uploaded a model with data).

Validation split: from each client's real training samples, deterministically, every sample whose
rank ``r`` (0-based, in array order) has ``floor((r + 1) rho) > floor(r rho)`` is a validation sample
(``floor(n_i rho)`` of them, evenly spread, so class-sorted partitions do not give a one-class
validation set), ``rho = val_ratio = 0.2``; the rest is the training part. Without validation
samples every weight is 0.

One round, for the participants ``i``:

1. **Download** (server): the ``M`` (default 5) models of other clients with the largest affinity
   ``P[i, n]`` among those that have uploaded (ties to the lowest id; fewer candidates than ``M`` leave
   slots empty). With ``epsilon > 0`` a participant instead downloads ``M`` uniformly random
   candidates with probability ``epsilon`` (off by default).
2. **Weights**: with ``L_i`` the masked mean cross-entropy on its validation part,
   ``w_n = max(0, (L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||)``, divided by their sum;
   a model at distance 0 or an empty slot gets 0, and if no downloaded model lowers the loss all
   weights are 0 (every division guarded).
3. **Update**: ``theta_i <- theta_i + sum_n w_n (theta_n - theta_i)``, then ``local_epochs`` (E = 5)
   epochs of CE training on the training part (fresh SGD, FedPAC's common setting); upload.
4. **Affinity** (server): ``P[i, n] += s_n`` for the downloaded ``n``, with ``s_n`` the signed,
   unnormalised score ``(L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||`` (0 for empty slots).

Evaluation: each client's own model on its own test split.

Defaults and sources: ``M = 5`` (FedPAC, spec D), ``val_ratio = 0.2`` (FL-bench), ``epsilon = 0``;
the affinity rule (top-``M`` by ``P`` row, ``P`` starting at the identity and increased by the signed
scores) is FL-bench's. Deliberate differences from FL-bench: candidates are all clients that have
uploaded at least once (their latest model), not only the previous round's participants (the same set
under full participation); the client itself is never one of the ``M`` (FL-bench adds it and its
weight is 0 anyway); the distance is guarded (``0`` when ``||theta_n - theta_i|| = 0``) instead of
FL-bench's ``+ 1e-5``; the validation samples are spread over the client's data instead of its first
20%. Round 0 has no uploaded models, so every participant only trains locally. The original paper's
decaying epsilon-greedy exploration is available through ``epsilon`` (constant).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..core import rng
from ..core.aggregate import EXACT
from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "validation_split", "fomo_scores", "fomo_weights"]

EXPLORE_STREAM = 0xF0E0


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
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
    shared = {"affinity": jnp.eye(num_clients, dtype=jnp.float32), "uploaded": jnp.zeros((num_clients,), bool)}
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (shared, params))


def validation_split(mask, ratio: float):
    """``(train_mask, val_mask)``: ``floor(n_i * ratio)`` real samples, evenly spread, for validation."""
    rank = (jnp.cumsum(mask) - 1).astype(jnp.float32)
    # 1e-4 absorbs float error in (r + 1) * ratio for ratios such as 0.2 (exact multiples stay exact).
    val = mask & (jnp.floor((rank + 1.0) * ratio + 1e-4) > jnp.floor(rank * ratio + 1e-4))
    return mask & ~val, val


def fomo_scores(own_loss, losses, distances, valid):
    """Signed scores ``(L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||``; 0 at distance 0 or invalid."""
    ok = valid & (distances > 0)
    return jnp.where(ok, (own_loss - losses) / jnp.where(ok, distances, 1.0), 0.0)


def fomo_weights(scores):
    """``max(0, s) / sum max(0, s)``; all zero when no downloaded model improves the loss."""
    positive = jnp.maximum(scores, 0.0)
    total = positive.sum()
    return jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0), 0.0)


def _downloads(state: State, ids, key):
    """``(selected [m, M], valid [m, M])`` for participants ``ids`` (M clipped to N - 1)."""
    n_all, cfg = state.num_clients, state.config
    m_eff = min(cfg.num_downloads, n_all - 1)
    candidate = state.shared["uploaded"][None, :] & (jnp.arange(n_all)[None, :] != ids[:, None])
    scores = jnp.where(candidate, state.shared["affinity"][ids], -jnp.inf)
    top_values, selected = jax.lax.top_k(scores, m_eff)
    if cfg.epsilon > 0:
        k_explore, k_rand = jax.random.split(key)
        rand_scores = jnp.where(candidate, rng.uniform(k_rand, candidate.shape), -jnp.inf)
        rand_values, rand_selected = jax.lax.top_k(rand_scores, m_eff)
        explore = rng.uniform(k_explore, (ids.shape[0], 1)) < cfg.epsilon
        selected = jnp.where(explore, rand_selected, selected)
        top_values = jnp.where(explore, rand_values, top_values)
    return selected, jnp.isfinite(top_values)


def _client_update(client, _, model, cfg: Config):
    train_mask, val_mask = validation_split(client["mask"], cfg.val_ratio)
    own = client["local"]
    x, y = client["x"], client["y"]
    own_loss = base.data_loss(model, own, x, y, val_mask)
    losses = jax.lax.map(lambda p: base.data_loss(model, p, x, y, val_mask), client["downloads"])
    own_flat = ravel_pytree(own)[0]
    distances = jnp.linalg.norm(base.flat_rows(client["downloads"]) - own_flat[None, :], axis=-1)
    valid = client["download_valid"] & (val_mask.sum() > 0)
    scores = fomo_scores(own_loss, losses, distances, valid)
    weights = fomo_weights(scores)
    combined = jax.tree.map(lambda t, d: t + jnp.tensordot(weights, d - t[None], axes=(0, 0), precision=EXACT), own, client["downloads"])
    params, loss = base.train(combined, base.ce_loss(model), {**client, "mask": train_mask}, cfg)
    return {"params": params, "scores": scores, "weights": weights, "n": base.num_samples(client), "loss": loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    ids = batch.client_ids
    explore_key = jax.random.fold_in(jax.random.fold_in(state.key, EXPLORE_STREAM), state.round)
    selected, valid = _downloads(state, ids, explore_key)
    inputs = {**base.client_inputs(state, batch), "downloads": base.take(state.local, selected), "download_valid": valid}
    out = base.run_clients(state, inputs, lambda c, s: _client_update(c, s, model, cfg))
    affinity = state.shared["affinity"].at[ids[:, None], selected].add(out["scores"])
    uploaded = state.shared["uploaded"].at[ids].set(state.shared["uploaded"][ids] | (out["n"] > 0))
    metrics = {"n": out["n"], "loss": out["loss"], "downloaded": selected, "download_valid": valid, "weights": out["weights"]}
    new_state, metrics = base.finish_round(state, batch, {"affinity": affinity, "uploaded": uploaded}, out["params"], metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One FedFomo round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics incl. the weights."


def _evaluate(state: State, test):
    return base.evaluate_personal(state, test, lambda c, shared: c["local"])


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's own model on its own test split: ``{client_ids, accuracy, n}``."
