"""FedPAC's per-client statistics ``(v_i, H_i)`` of the classifier combination (Xu, Tong, Huang, ICLR
2023, Sec. 4.1 and App. A.5 with ``Lambda = I``; official code:
https://github.com/JianXu95/FedPAC, ``statistics_extraction``), from the generic masked class sums of
:mod:`pflax.core.stats`.

>>> import jax.numpy as jnp
>>> from pflax.core import stats
>>> s = stats.class_sums(jnp.array([[1.0], [3.0]]), jnp.array([0, 0]), jnp.array([True, True]), 2)
>>> out = fedpac_statistics(s)
>>> float(out.v), out.h[:, 0].tolist(), float(out.n)
(0.5, [2.0, 0.0], 2.0)
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ...core.stats import ClassSums, class_means, safe_div

Array = jax.Array

__all__ = ["FedPACStatistics", "fedpac_statistics"]


class FedPACStatistics(NamedTuple):
    """One client's FedPAC statistics.

    Attributes:
      v: scalar ``V_i / n_i``, the feature variance term.
      h: ``[K, d]`` ``H_i[y] = p_i(y) mu_{i,y}``.
      n: scalar ``n_i``, the sample count.

    >>> FedPACStatistics(v=0.5, h=jnp.zeros((2, 1)), n=4.0).n
    4.0
    """

    v: Array  # scalar V_i / n_i
    h: Array  # [K, d] H_i[y] = p_i(y) mu_{i,y}
    n: Array  # scalar n_i


def fedpac_statistics(s: ClassSums) -> FedPACStatistics:
    """FedPAC's ``(v_i, H_i)`` from one client's class sums.

    ``V_i = sum_y p(y) s_y - p(y)^2 ||mu_y||^2`` over present classes, where ``s_y`` is the class mean
    of ``||f||^2``; ``v_i = V_i / n_i``; ``H_i[y] = p(y) mu_y``.

    Args:
      s: the client's :class:`pflax.core.stats.ClassSums` (counts, feature sums, squared norms).

    Returns:
      :class:`FedPACStatistics` ``(v, h [K, d], n)``; an empty client gives zeros.

    >>> from pflax.core.stats import class_sums
    >>> s = class_sums(jnp.array([[0.0], [2.0], [4.0]]), jnp.array([0, 0, 1]), jnp.ones(3, bool), 2)
    >>> [round(h, 3) for h in fedpac_statistics(s).h[:, 0].tolist()]  # priors (2/3, 1/3) times means (1, 4)
    [0.667, 1.333]
    """
    n = s.counts.sum()
    prior = safe_div(s.counts, n)
    mu, _ = class_means(s)
    mean_sq = safe_div(s.sq_norms, s.counts)
    variance = jnp.sum(prior * mean_sq - jnp.square(prior) * jnp.sum(jnp.square(mu), axis=-1))
    return FedPACStatistics(v=safe_div(variance, n), h=prior[:, None] * mu, n=n)
