"""KMeans: clustering the clients' local models before federated training (Ghosh, Hong, Yin and
Ramchandran, "Robust Federated Learning in a Heterogeneous Environment", arXiv:1906.06629, 2019), the
parameter-based clustered-FL baseline of FedCollab's Table 2 (Bao et al., ICML 2023, Section 5.3).

Like FedCollab, it fixes a collaboration structure *before* FL (FedCollab, Section 5.3 and Appendix
B.5), then each cluster trains as a federation of its own (:mod:`.coalitions`, or a run file's
``[structure]``). The structure comes from:

1. **local models**: every client trains the same initial model alone, ``local_epochs`` epochs of its
   algorithm's SGD (one round of :mod:`pflax.algorithms.local_only`: fresh optimiser, the client's own
   minibatches);
2. **k-means** over the flattened models (all parameters, float64): k-means++ seeding, then Lloyd's
   iterations until the assignment no longer changes; an emptied cluster is dropped.

The paper names the method and its distance (model parameters) but neither ``k`` nor how long the
local models train; the run file states both. FedCollab's code has no implementation of it.

>>> import numpy as np
>>> points = np.array([[0.0], [0.2], [10.0], [10.1], [4.0]])  # labels name each cluster's first member
>>> kmeans(points, 2, seed=0).tolist()
[0, 0, 2, 2, 0]
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ...data import ClientData
from .solver import canonical, coalitions_of

__all__ = ["kmeans", "local_models", "structure"]


def _sq_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    # ||p||^2 - 2 p.c + ||c||^2, clipped at 0 against round-off.
    d = (points * points).sum(1)[:, None] - 2.0 * points @ centres.T + (centres * centres).sum(1)[None, :]
    return np.maximum(d, 0.0)


def kmeans(points, k: int, seed: int, max_iterations: int = 300) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding (Arthur and Vassilvitskii, 2007), in float64.

    Args:
      points: ``[n, d]`` rows to cluster.
      k: clusters (1 <= k <= n).
      seed: seeds the k-means++ draws (NumPy's generator).
      max_iterations: Lloyd's iterations at most (it stops when the assignment repeats).

    Returns:
      ``[n]`` cluster labels, relabelled by each cluster's smallest member (:func:`.solver.canonical`);
      a cluster that loses every member disappears, so fewer than ``k`` labels may remain.

    >>> kmeans(np.array([[0.0, 0.0], [0.0, 1.0], [9.0, 9.0]]), 2, seed=3).tolist()
    [0, 0, 2]
    >>> kmeans(np.zeros((2, 1)), 3, seed=0)
    Traceback (most recent call last):
      ...
    ValueError: k-means needs 1 <= k <= 2 points, got k = 3
    """
    points = np.asarray(points, np.float64)
    n = len(points)
    if not 1 <= k <= n:
        raise ValueError(f"k-means needs 1 <= k <= {n} points, got k = {k}")
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(n))]
    for _ in range(1, k):
        d = _sq_distances(points, points[chosen]).min(1)
        # D^2 sampling; when every point coincides with a centre, any unchosen point will do.
        p = d / d.sum() if d.sum() > 0 else np.isin(np.arange(n), chosen, invert=True) / (n - len(chosen))
        chosen.append(int(rng.choice(n, p=p)))
    centres = points[chosen]
    assign = np.full(n, -1)
    for _ in range(max_iterations):
        new = _sq_distances(points, centres).argmin(1)  # ties to the lowest centre
        if np.array_equal(new, assign):
            break
        assign = new
        centres = np.stack([points[assign == j].mean(0) if np.any(assign == j) else centres[j] for j in range(len(centres))])
    return canonical(assign)


def local_models(key, model, train: ClientData, sgd: dict, epochs: int) -> Any:
    """Every client's model after ``epochs`` epochs of training alone from one shared initial model.

    Args:
      key: PRNG key of the initial model and the minibatch order (:func:`pflax.local_only.init`'s).
      model: the split model.
      train: the clients' training data.
      sgd: the SGD setting, ``lr``, ``momentum``, ``weight_decay``, ``batch_size`` (other keys are ignored).
      epochs: local epochs (>= 1).

    Returns:
      the clients' parameters, stacked (leading axis: client).

    >>> import pflax
    >>> train, _ = pflax.data.toy_federation(num_clients=3)
    >>> params = local_models(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(4,)), train, {"lr": 0.1}, 1)
    >>> jax.tree.leaves(params)[0].shape[0]
    3
    """
    from .. import local_only

    if epochs < 1:
        raise ValueError(f"local_epochs of the local models must be >= 1, got {epochs}")
    fields = {k: v for k, v in sgd.items() if k in ("lr", "momentum", "weight_decay", "batch_size")}
    config = local_only.Config(local_epochs=epochs, **fields)
    state = local_only.init(key, model, train.x[0], train.num_clients, config)
    state, _ = local_only.round(state, train)
    return state.clients


def structure(key, model, train: ClientData, sgd: dict, clusters: int, local_epochs: int, seed: int) -> dict:
    """KMeans's collaboration structure: k-means over the clients' local models.

    Args:
      key: PRNG key of the local models (:func:`local_models`).
      model: the split model.
      train: the clients' training data.
      sgd: the local models' SGD setting (:func:`local_models`).
      clusters: ``k``.
      local_epochs: epochs of the local models.
      seed: the k-means++ seed.

    Returns:
      ``{"method": "kmeans", "assignment": [N], "coalitions": [[members], ...], "distances": [N, N]}``:
      the labels, the clusters as sorted member lists, and the squared L2 distances between the local
      models (for a plot like FedCollab's Figure 5).

    >>> import pflax
    >>> train, _ = pflax.data.toy_federation(num_clients=3)
    >>> found = structure(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(4,)), train, {"lr": 0.1}, 2, 1, 0)
    >>> sorted(sum(found["coalitions"], [])), len(found["distances"])
    ([0, 1, 2], 3)
    """
    from jax.flatten_util import ravel_pytree

    params = local_models(key, model, train, sgd, local_epochs)
    rows = np.stack([np.asarray(ravel_pytree(jax.tree.map(lambda a, i=i: a[i], params))[0], np.float64)
                     for i in range(train.num_clients)])
    assign = kmeans(rows, clusters, seed)
    return {"method": "kmeans", "assignment": assign.tolist(), "coalitions": coalitions_of(assign),
            "distances": _sq_distances(rows, rows).tolist()}
