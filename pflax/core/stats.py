"""Masked per-class feature statistics, as segment sums over one-hot labels.

All functions take one client's features ``[n, d]``, labels ``[n]`` and sample mask ``[n]``; padded
samples contribute nothing, and every division is guarded so an empty class or client gives zeros,
never NaN. Algorithm-specific statistics build on these (FedPAC's ``(v_i, H_i)``:
:mod:`pflax.algorithms.fedpac.statistics`).

>>> import jax.numpy as jnp
>>> s = class_sums(jnp.array([[1.0], [3.0], [5.0]]), jnp.array([0, 0, 1]), jnp.array([True, True, False]), 2)
>>> s.counts.tolist(), class_means(s)[0][:, 0].tolist()
([2.0, 0.0], [2.0, 0.0])
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .aggregate import EXACT

Array = jax.Array


class ClassSums(NamedTuple):
    """One client's per-class sample counts, feature sums and sums of squared feature norms.

    Attributes:
      counts: ``[K]`` real samples per class, ``n_{i,y}``.
      sums: ``[K, d]`` sum of the features ``f(x)`` over class ``y``.
      sq_norms: ``[K]`` sum of ``||f(x)||^2`` over class ``y``.

    >>> ClassSums(jnp.ones(2), jnp.zeros((2, 3)), jnp.ones(2)).sums.shape
    (2, 3)
    """

    counts: Array  # [K]   n_{i,y}
    sums: Array  # [K, d] sum of f(x) over class y
    sq_norms: Array  # [K]   sum of ||f(x)||^2 over class y


def class_sums(features: Array, labels: Array, mask: Array, num_classes: int) -> ClassSums:
    """Per-class sums of one client's real samples.

    Args:
      features: ``[n, d]`` features (padded rows may hold anything, even NaN).
      labels: ``[n]`` integer labels in ``[0, num_classes)``.
      mask: ``[n]`` bool, the real samples.
      num_classes: ``K``.

    Returns:
      :class:`ClassSums` ``(counts [K], sums [K, d], sq_norms [K])``, summed in full precision.

    >>> class_sums(jnp.array([[1.0, 2.0]]), jnp.array([1]), jnp.array([True]), 2).sq_norms.tolist()
    [0.0, 5.0]
    """
    onehot = jax.nn.one_hot(labels, num_classes, dtype=features.dtype) * mask[:, None].astype(features.dtype)
    features = jnp.where(mask[:, None], features, 0.0)  # padded rows may hold anything, even NaN
    counts = onehot.sum(0)
    sums = jnp.matmul(onehot.T, features, precision=EXACT)
    sq = jnp.matmul(onehot.T, jnp.sum(jnp.square(features), axis=-1), precision=EXACT)
    return ClassSums(counts, sums, sq)


def safe_div(num: Array, den: Array) -> Array:
    """``num / den`` where ``den > 0``, else 0 (no NaN for empty classes or clients).

    >>> safe_div(jnp.array([1.0, 2.0]), jnp.array([2.0, 0.0])).tolist()
    [0.5, 0.0]
    """
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def class_means(s: ClassSums) -> tuple[Array, Array]:
    """Class means from class sums.

    Args:
      s: :class:`ClassSums` of one client.

    Returns:
      ``(means [K, d], present [K])``; rows of absent classes are zero.

    >>> means, present = class_means(ClassSums(jnp.array([2.0, 0.0]), jnp.array([[4.0], [0.0]]), jnp.zeros(2)))
    >>> means.tolist(), present.tolist()
    ([[2.0], [0.0]], [True, False])
    """
    present = s.counts > 0
    return safe_div(s.sums, s.counts[:, None]), present
