"""Pairwise distribution distances with federated (x, y)-discriminators (FedCollab, Bao et al., ICML 2023,
Section 4; official ``src/collab/disc_estimate.py`` in https://github.com/baowenxuan/FedCollab).

For every pair of clients (i, j) a small discriminator learns to tell client i's samples (domain 0)
from client j's (domain 1) on *(x, y) pairs*. The pair is trained federatedly: each round both clients
take one fresh random minibatch and one plain-SGD step from the current weights, and the server
averages the two models with weights 1/2. Every 10 rounds (round 0 included, after aggregation) both
validation sets are scored; ``acc_i + acc_j`` is the metric, the best value over all evaluations is
kept, and a pair stops after ``patience`` evaluations without strict improvement.
``D_ij = best - 1 = 2 * BalAcc - 1``.

All N(N-1)/2 pairs are independent, so they are trained together: the pairs are the mapped unit of
:func:`pflax.core.execution.map_clients`, early stopping is a per-pair mask inside one
``lax.while_loop``, and a stopped pair's weights are simply frozen.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...core import aggregate
from ...core.execution import Execution, map_clients
from ...core.losses import masked_mean
from ...core.optim import pytorch_sgd
from ...core.train import epoch_order, sgd_steps
from ...data.clients import ClientData
from ...data.sources import DataError
from ...models import TorchDense

Array = jax.Array

__all__ = ["DiscConfig", "Discriminator", "disc_splits", "estimate_distances", "pair_list"]


@dataclasses.dataclass(frozen=True)
class DiscConfig:
    """The discriminators' training setting (the official ``disc_estimate.py`` defaults).

    Attributes:
      lr: plain-SGD learning rate (0.05 for CIFAR-100 in the paper).
      batch_size: one minibatch per client per round.
      max_rounds: rounds at most per pair.
      eval_every: rounds between validation scores.
      patience: evaluations without strict improvement before a pair stops.
      hidden: the discriminator's width.
      execution: the mapping strategy of the pairs' evaluation.

    >>> DiscConfig().patience, DiscConfig(lr=0.05).lr
    (10, 0.05)
    >>> DiscConfig(eval_every=0)
    Traceback (most recent call last):
    ValueError: DiscConfig: lr >= 0 and batch_size, max_rounds, eval_every, patience >= 1 required
    """

    lr: float = 0.01  # 0.05 for CIFAR-100 in the paper
    batch_size: int = 32
    max_rounds: int = 2000
    eval_every: int = 10
    patience: int = 10  # evaluations without strict improvement before a pair stops
    hidden: int = 200
    # Pairs are the mapped unit. Training steps are tiny (two minibatches per pair), so they are
    # always vmapped; evaluation touches whole validation sets and follows this strategy.
    execution: Execution = Execution()

    def __post_init__(self):
        if self.lr < 0 or self.batch_size < 1 or self.max_rounds < 1 or self.eval_every < 1 or self.patience < 1:
            raise ValueError("DiscConfig: lr >= 0 and batch_size, max_rounds, eval_every, patience >= 1 required")


class Discriminator(nn.Module):
    """flatten(x) -> Linear(200); onehot(y) * L/sqrt(L-1) -> Linear(200) added twice; ReLU; Linear(1).

    Attributes:
      num_labels: L, the label count.
      hidden: the width (200 officially).

    >>> disc = Discriminator(num_labels=3, hidden=4)
    >>> params = disc.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 2)), jnp.zeros(1, int))
    >>> disc.apply(params, jnp.ones((5, 2, 2)), jnp.array([0, 1, 2, 0, 1])).shape  # one logit per (x, y)
    (5,)
    """

    num_labels: int
    hidden: int = 200

    @nn.compact
    def __call__(self, x: Array, y: Array) -> Array:
        big_l = max(2, self.num_labels)
        x_emb = TorchDense(self.hidden, name="x_embed")(x.reshape(x.shape[0], -1))
        y_hot = jax.nn.one_hot(y, big_l) * (big_l / math.sqrt(big_l - 1))
        y_emb = TorchDense(self.hidden, name="y_embed")(y_hot)
        h = jax.nn.relu(x_emb + 2.0 * y_emb)  # the official code adds the label embedding twice
        return TorchDense(1, name="out")(h)[:, 0]


def _cumulative_round(counts: np.ndarray, frac: float) -> np.ndarray:
    """Per-label take counts whose running total is ``floor(cumsum(counts * frac) + 0.49)``: the
    official rounding, which makes every client's total the same rounded target."""
    cum = np.floor(np.cumsum(counts * frac) + 0.49).astype(np.int64)
    return np.diff(np.concatenate([[0], cum]))


def disc_splits(train: ClientData, num_labels: int, seed: int = 0) -> tuple[ClientData, ClientData]:
    """Stratified discriminator train/validation splits of every client's FL training data.

    Every client trains on the same number of samples, half the smallest client's size; the rest is
    its validation set.

    Args:
      train: the clients' FL training data.
      num_labels: the label count.
      seed: the split's random seed.
    Returns:
      ``(train, validation)`` :class:`ClientData` (train rows all real, validation padded).

    >>> from pflax.data import toy_federation
    >>> tr, va = disc_splits(toy_federation(train_per_client=10)[0], num_labels=10)
    >>> tr.sizes.tolist(), va.sizes.tolist()
    ([5, 5], [5, 5])
    """
    x, y, mask = np.asarray(train.x), np.asarray(train.y), np.asarray(train.mask).astype(bool)
    sizes = mask.sum(1)
    if np.any(sizes < 2):
        raise DataError(
            f"every client needs >= 2 training samples for a discriminator split; client(s) "
            f"{np.flatnonzero(sizes < 2).tolist()} have {sizes[sizes < 2].tolist()} (exclude empty clients)"
        )
    target = sizes.min() / 2.0
    rng = np.random.default_rng(seed)
    tr_idx, va_idx = [], []
    for c in range(x.shape[0]):
        real = np.flatnonzero(mask[c])
        labels = y[c, real]
        counts = np.bincount(labels, minlength=num_labels)
        takes = _cumulative_round(counts, target / sizes[c])
        tr, va = [], []
        for lab in range(num_labels):
            members = rng.permutation(real[labels == lab])
            tr.append(members[: takes[lab]])
            va.append(members[takes[lab]:])
        tr_idx.append(np.concatenate(tr))
        va_idx.append(np.concatenate(va))
    n_train = {len(t) for t in tr_idx}
    if len(n_train) != 1:  # cannot happen with the cumulative rounding; guards future edits
        raise DataError(f"discriminator train splits differ in size: {sorted(n_train)}")
    return _gather(x, y, tr_idx, train.client_ids), _gather(x, y, va_idx, train.client_ids)


def _gather(x: np.ndarray, y: np.ndarray, idx: list, ids) -> ClientData:
    n_max = max(max(len(i) for i in idx), 1)
    xs = np.zeros((len(idx), n_max) + x.shape[2:], x.dtype)
    ys = np.zeros((len(idx), n_max), np.int32)
    ms = np.zeros((len(idx), n_max), bool)
    for c, rows in enumerate(idx):
        xs[c, : len(rows)], ys[c, : len(rows)], ms[c, : len(rows)] = x[c, rows], y[c, rows], True
    return ClientData(jnp.asarray(xs), jnp.asarray(ys), jnp.asarray(ms), jnp.asarray(ids))


def pair_list(n: int) -> np.ndarray:
    """All unordered pairs (i < j), ``[N(N-1)/2, 2]``, row-major.

    Args:
      n: N, the client count.
    Returns:
      an int32 array.

    >>> pair_list(3).tolist()
    [[0, 1], [0, 2], [1, 2]]
    """
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], 1).astype(np.int32)


def _bce(model: Discriminator, params, batch: dict, w: Array) -> Array:
    logits = model.apply({"params": params}, batch["x"], batch["y"])
    return masked_mean(optax.sigmoid_binary_cross_entropy(logits, batch["d"]), w)


def _client_step(client: dict, params, model: Discriminator, cfg: DiscConfig):
    """One client's round: the first minibatch of a freshly shuffled split, one step of a new plain SGD."""
    idx, valid = epoch_order(client["key"], client["mask"], 1, min(cfg.batch_size, client["mask"].shape[0]))
    data = {"x": client["x"], "y": client["y"], "d": jnp.full(client["y"].shape, client["domain"], jnp.float32)}
    new, _ = sgd_steps(params, lambda p, b, w: _bce(model, p, b, w), data, idx[:1], valid[:1], pytorch_sgd(cfg.lr))
    return new


def _pair_round(pair: dict, tr: dict, model: Discriminator, cfg: DiscConfig, round_key: Array):
    """One federated round of one pair: both clients step from the same weights, then a 1/2-1/2 mean."""
    i, j = pair["ij"][0], pair["ij"][1]
    # Keys depend on the pair's client ids (not its position), so any subset of pairs reproduces.
    key = jax.random.fold_in(jax.random.fold_in(round_key, i), j)
    two = {
        "x": tr["x"][pair["ij"]], "y": tr["y"][pair["ij"]], "mask": tr["mask"][pair["ij"]],
        "domain": jnp.array([0.0, 1.0]), "key": jax.random.split(key, 2),
    }
    stepped = map_clients(lambda c, p: _client_step(c, p, model, cfg), two, pair["params"], Execution("vmap"))
    averaged = aggregate.weighted_mean(stepped, jnp.ones((2,)))
    return jax.tree.map(lambda new, old: jnp.where(pair["active"], new, old), averaged, pair["params"])


def _pair_metric(pair: dict, va: dict, model: Discriminator) -> Array:
    """acc_i + acc_j: each client's validation samples assigned to its own domain (= 2 * BalAcc)."""
    def own_domain_acc(side):
        c = pair["ij"][side]
        logits = model.apply({"params": pair["params"]}, va["x"][c], va["y"][c])
        predicted_j = logits >= 0
        hits = predicted_j if side == 1 else ~predicted_j
        return masked_mean(hits.astype(jnp.float32), va["mask"][c])

    return own_domain_acc(0) + own_domain_acc(1)


def _train_pairs(init_params, pairs: Array, tr: dict, va: dict, key: Array, model: Discriminator, cfg: DiscConfig):
    num_pairs = pairs.shape[0]
    stacked = jax.tree.map(lambda a: jnp.broadcast_to(a, (num_pairs,) + a.shape), init_params)

    def one_round(params, active, r):
        per_pair = {"ij": pairs, "params": params, "active": active}
        return map_clients(lambda p, s: _pair_round(p, s, model, cfg, jax.random.fold_in(key, r)),
                           per_pair, tr, Execution("vmap"))

    def evaluate(params):
        return map_clients(lambda p, s: _pair_metric(p, s, model), {"ij": pairs, "params": params}, va, cfg.execution)

    def update_best(state, metric):
        improved = state["active"] & (metric > state["best"])
        bad = jnp.where(improved, 0, state["bad"] + state["active"].astype(jnp.int32))
        return dict(state, best=jnp.where(improved, metric, state["best"]), bad=bad,
                    active=state["active"] & (bad < cfg.patience))

    all_active = jnp.ones((num_pairs,), bool)
    params = one_round(stacked, all_active, 0)  # round 0, evaluated after its aggregation
    state = {"params": params, "active": all_active, "best": jnp.full((num_pairs,), -jnp.inf),
             "bad": jnp.zeros((num_pairs,), jnp.int32), "rounds": jnp.zeros((num_pairs,), jnp.int32),
             "block": jnp.zeros((), jnp.int32)}
    state = update_best(state, evaluate(params))
    # Later evaluations happen at rounds 10, 20, ... < max_rounds; rounds after the last one cannot
    # change the estimate, so they are not run.
    num_blocks = (cfg.max_rounds - 1) // cfg.eval_every

    def block(state):
        first = 1 + state["block"] * cfg.eval_every

        def body(p, t):
            return one_round(p, state["active"], first + t), None

        params, _ = jax.lax.scan(body, state["params"], jnp.arange(cfg.eval_every))
        rounds = state["rounds"] + cfg.eval_every * state["active"].astype(jnp.int32)
        new = dict(state, params=params, rounds=rounds, block=state["block"] + 1)
        return update_best(new, evaluate(params))

    def more(state):
        return jnp.any(state["active"]) & (state["block"] < num_blocks)

    state = jax.lax.while_loop(more, block, state)
    return state["best"], state["rounds"] + 1


@functools.partial(jax.jit, static_argnums=0)
def _initial_params(model: Discriminator, key: Array, x: Array, y: Array):
    """The discriminator's parameters as one compiled program (not one per initialiser operation),
    cached per discriminator configuration, so a second ``estimate_distances`` does not recompile it."""
    return model.init(key, x, y)["params"]


@functools.lru_cache(maxsize=8)
def _compiled(model: Discriminator, config: DiscConfig):
    """One jitted trainer per (model, config): repeated estimates (subsets of pairs) reuse it."""
    return jax.jit(functools.partial(_train_pairs, model=model, cfg=config))


def estimate_distances(
    train: ClientData,
    num_labels: int,
    key: Array,
    config: DiscConfig = DiscConfig(),
    encoder: Optional[Callable[[Array], Array]] = None,
    pairs: Optional[np.ndarray] = None,
    split_seed: int = 0,
) -> dict:
    """Estimate the pairwise distance matrix D_hat from the clients' FL training data.

    ``encoder`` is an optional *frozen* feature extractor (x -> features, e.g. a pretrained CNN for
    images); as it is frozen, features are computed once up front, which equals running it inside
    the discriminator. ``key`` gives the shared initial discriminator and every minibatch draw.

    Args:
      train: the clients' FL training data (every client with >= 2 samples).
      num_labels: the label count.
      key: PRNG key.
      config: :class:`DiscConfig`.
      encoder: optional frozen feature extractor.
      pairs: ``[P, 2]`` the pairs to estimate (default: :func:`pair_list`); the others stay 0.
      split_seed: :func:`disc_splits`' seed.
    Returns:
      ``{"D": [N, N] (symmetric, zero diagonal, unclipped), "pairs", "best" [P], "rounds" [P]}``.

    >>> from pflax.data import toy_federation
    >>> estimate_distances(toy_federation(num_clients=1)[0], 10, jax.random.PRNGKey(0))
    Traceback (most recent call last):
    ValueError: distance estimation needs at least two clients
    """
    n = train.num_clients
    if n < 2:
        raise ValueError("distance estimation needs at least two clients")
    tr, va = disc_splits(train, num_labels, split_seed)
    if encoder is not None:
        tr, va = (ClientData(jax.vmap(encoder)(d.x), d.y, d.mask, d.client_ids) for d in (tr, va))
    model = Discriminator(num_labels, config.hidden)
    k_init, k_train = jax.random.split(key)
    init_params = _initial_params(model, k_init, tr.x[0, :1], tr.y[0, :1])  # the same start for every pair
    pairs = pair_list(n) if pairs is None else np.asarray(pairs, np.int32)
    as_dict = lambda d: {"x": d.x, "y": d.y, "mask": d.mask}
    best, rounds = _compiled(model, config)(init_params, jnp.asarray(pairs), as_dict(tr), as_dict(va), k_train)
    best = np.asarray(best, np.float64)
    dist = np.zeros((n, n))
    dist[pairs[:, 0], pairs[:, 1]] = best - 1.0
    dist[pairs[:, 1], pairs[:, 0]] = best - 1.0
    return {"D": dist, "pairs": pairs, "best": best, "rounds": np.asarray(rounds)}
