"""Server-side aggregation over a participant axis (axis 0), honouring weights and validity."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
PyTree = Any

# Sums over clients and samples run at full float32 precision on every backend. On NVIDIA GPUs the
# default precision of a float32 contraction is TF32 (10 mantissa bits), which would round every
# aggregated parameter and statistic to ~1e-3 relative error, round after round. Model forward and
# backward passes keep JAX's default precision (README, "Precision on GPUs").
EXACT = jax.lax.Precision.HIGHEST


def _float32_weights(weights: Array) -> Array:
    """Weights as float32, with subnormal values (below 1.2e-38) set to zero.

    XLA flushes subnormal floats to zero on CPU and GPU, so such a weight already acted as zero in
    some operations and as positive in others; zeroing it first makes every rule (which weights
    count, whether any weight is left) agree, on every backend."""
    weights = weights.astype(jnp.float32)
    return jnp.where(jnp.abs(weights) >= jnp.finfo(jnp.float32).tiny, weights, 0.0)


def normalized_weights(weights: Array) -> Array:
    """``w / sum(w)``; all-zero weights give all-zero output rather than NaN. Weights below the
    smallest normal float32 (1.2e-38) count as zero.

    Args:
      weights: ``[m]`` non-negative weights, one per participant.

    Returns:
      ``[m]`` float32 weights summing to 1, or all zeros.

    >>> normalized_weights(jnp.array([1.0, 3.0])).tolist(), normalized_weights(jnp.zeros(2)).tolist()
    ([0.25, 0.75], [0.0, 0.0])
    """
    weights = _float32_weights(weights)
    total = weights.sum()
    return jnp.where(total > 0, weights / jnp.where(total > 0, total, 1.0), 0.0)


def weighted_mean(stacked: PyTree, weights: Array, fallback: PyTree | None = None) -> PyTree:
    """``sum_i w_i x_i / sum_i w_i`` over the leading axis of every leaf.

    If every weight is zero the result is ``fallback`` (for example the previous global model) when
    given, else zeros.

    Args:
      stacked: a tree whose leaves have a leading participant axis ``[m, ...]``.
      weights: ``[m]`` non-negative weights (normalised here).
      fallback: the result when no weight is positive; ``None`` gives zeros.

    Returns:
      A tree like one participant's, in each leaf's dtype.

    >>> weighted_mean({"w": jnp.array([[0.0], [4.0]])}, jnp.array([1.0, 3.0]))["w"].tolist()
    [3.0]
    >>> weighted_mean(jnp.ones((2, 1)), jnp.zeros(2), fallback=jnp.full(1, 5.0)).tolist()
    [5.0]
    """
    w = normalized_weights(weights)
    mean = jax.tree.map(lambda x: jnp.tensordot(w, x, axes=(0, 0), precision=EXACT).astype(x.dtype), stacked)
    return mean if fallback is None else unless_no_weight(mean, w, fallback)


def weighted_term(tree: PyTree, weight: Array) -> PyTree:
    """One client's term ``w_i * x_i`` of a weighted mean, in each leaf's dtype.

    With ``w = normalized_weights(...)`` computed before the clients run, the sum of these terms over
    clients (``pflax.core.execution.map_reduce_clients``) is the weighted mean, without ever stacking
    the clients' ``x_i``.

    Args:
      tree: one client's tree ``x_i``.
      weight: its scalar weight ``w_i``.

    Returns:
      ``w_i * x_i``, leaf by leaf.

    >>> weighted_term({"w": jnp.array([2.0, 4.0])}, 0.5)["w"].tolist()
    [1.0, 2.0]
    """
    return jax.tree.map(lambda x: (weight * x).astype(x.dtype), tree)


def grouped_term(stacked: PyTree, weights: Array) -> dict:
    """One client's terms of ``k`` weighted means at once (one per cluster or mixture component).

    ``stacked`` leaves are ``[k, ...]`` (the client's tree for each group, e.g. its ``k`` trained
    components, or one model broadcast ``k`` times); the term is ``weights[j] * stacked[j]``, and
    ``weight`` records ``weights [k]``. Summed over clients (:func:`pflax.core.execution.map_reduce_clients`),
    :func:`grouped_means` turns them into the means. For weights the client decides itself (the cluster
    it picks, its responsibilities), which cannot be normalised before the clients run.

    Args:
      stacked: the client's tree with leaves ``[k, ...]``.
      weights: ``[k]`` its weight for each group.

    Returns:
      ``{"sum": weights[j] * stacked[j] per leaf, "weight": weights}``.

    >>> t = grouped_term(jnp.array([[1.0], [2.0]]), jnp.array([0.0, 3.0]))
    >>> t["sum"].tolist(), t["weight"].tolist()
    ([[0.0], [6.0]], [0.0, 3.0])
    """
    weights = _float32_weights(weights)

    def term(x):
        return (weights.reshape((-1,) + (1,) * (x.ndim - 1)) * x).astype(x.dtype)

    return {"sum": jax.tree.map(term, stacked), "weight": weights}


def grouped_means(summed: dict, fallback: PyTree) -> PyTree:
    """``sum_i w_ij x_i / sum_i w_ij`` for every group ``j`` from summed :func:`grouped_term` outputs;
    a group with no weight keeps ``fallback[j]`` exactly (a cluster nobody chose keeps its model).

    Args:
      summed: :func:`grouped_term` outputs summed over clients: ``"sum"`` leaves ``[k, ...]``,
        ``"weight"`` ``[k]``.
      fallback: a tree like ``summed["sum"]``, the previous value of every group.

    Returns:
      The ``k`` group means, a tree like ``fallback``.

    >>> summed = {"sum": jnp.array([[6.0], [0.0]]), "weight": jnp.array([2.0, 0.0])}
    >>> grouped_means(summed, jnp.array([[1.0], [9.0]])).tolist()
    [[3.0], [9.0]]
    """
    total = summed["weight"]
    has = total > 0
    safe = jnp.where(has, total, 1.0)

    def mean(s, f):
        shape = (-1,) + (1,) * (s.ndim - 1)
        return jnp.where(has.reshape(shape), (s / safe.reshape(shape)).astype(s.dtype), f)

    return jax.tree.map(mean, summed["sum"], fallback)


def unless_no_weight(mean: PyTree, weights: Array, fallback: PyTree) -> PyTree:
    """``mean`` if any weight is positive, else ``fallback`` (e.g. the previous global model).

    Args:
      mean: the computed weighted mean (a tree).
      weights: ``[m]`` the weights it was computed with.
      fallback: a tree like ``mean``.

    Returns:
      ``mean`` or ``fallback``, chosen once for the whole tree.

    >>> unless_no_weight(jnp.ones(2), jnp.zeros(3), jnp.zeros(2)).tolist()
    [0.0, 0.0]
    """
    any_weight = jnp.sum(weights) > 0
    return jax.tree.map(lambda m, f: jnp.where(any_weight, m, f), mean, fallback)


def mix(stacked: PyTree, mixing: Array) -> PyTree:
    """Row-stochastic mixing: output ``i`` is ``sum_j mixing[i, j] * x_j`` (e.g. FedPAC heads).

    Args:
      stacked: a tree with leaves ``[m, ...]``, one ``x_j`` per participant.
      mixing: ``[n, m]`` mixing weights (rows usually sum to 1).

    Returns:
      A tree with leaves ``[n, ...]``.

    >>> mix(jnp.array([[1.0], [3.0]]), jnp.array([[0.5, 0.5], [0.0, 1.0]])).tolist()
    [[2.0], [3.0]]
    """
    return jax.tree.map(lambda x: jnp.tensordot(mixing.astype(x.dtype), x, axes=(1, 0), precision=EXACT), stacked)


def aggregate_centroids(
    local_means: Array, counts: Array, previous: Array, previous_valid: Array
) -> tuple[Array, Array]:
    """Class-count-weighted global centroids (FedPAC eq. (19)).

    ``local_means [m, K, d]``, ``counts [m, K]``. ``C[y] = sum_i n_{i,y} c_{i,y} / sum_i n_{i,y}`` over
    participants holding ``y``. A class held by no participant keeps its previous centroid and
    validity (the official code, ``protos_aggregation`` in ``tools.py`` of
    https://github.com/JianXu95/FedPAC, leaves such a class out of the global centroids and crashes there).

    Args:
      local_means: ``[m, K, d]`` each participant's class centroids.
      counts: ``[m, K]`` its samples per class.
      previous: ``[K, d]`` the centroids of the last round.
      previous_valid: ``[K]`` bool, which of them have ever been computed.

    Returns:
      ``(centroids [K, d], valid [K])``.

    >>> c, ok = aggregate_centroids(jnp.array([[[1.0], [0.0]], [[3.0], [0.0]]]), jnp.array([[1.0, 0.0], [3.0, 0.0]]),
    ...                             jnp.array([[0.0], [7.0]]), jnp.array([False, True]))
    >>> c.tolist(), ok.tolist()
    ([[2.5], [7.0]], [True, True])
    """
    total = counts.sum(0)
    fresh = jnp.einsum("mk,mkd->kd", counts, local_means, precision=EXACT) / jnp.where(total > 0, total, 1.0)[:, None]
    has = total > 0
    return jnp.where(has[:, None], fresh, previous), has | previous_valid
