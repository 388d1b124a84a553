"""Masked per-class feature statistics (FedPAC spec A.4), as segment sums over one-hot labels.

All functions take one client's features ``[n, d]``, labels ``[n]`` and sample mask ``[n]``; padded
samples contribute nothing, and every division is guarded so an empty class or client gives zeros,
never NaN.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .aggregate import EXACT

Array = jax.Array


class ClassSums(NamedTuple):
    counts: Array  # [K]   n_{i,y}
    sums: Array  # [K, d] sum of f(x) over class y
    sq_norms: Array  # [K]   sum of ||f(x)||^2 over class y


def class_sums(features: Array, labels: Array, mask: Array, num_classes: int) -> ClassSums:
    onehot = jax.nn.one_hot(labels, num_classes, dtype=features.dtype) * mask[:, None].astype(features.dtype)
    features = jnp.where(mask[:, None], features, 0.0)  # padded rows may hold anything, even NaN
    counts = onehot.sum(0)
    sums = jnp.matmul(onehot.T, features, precision=EXACT)
    sq = jnp.matmul(onehot.T, jnp.sum(jnp.square(features), axis=-1), precision=EXACT)
    return ClassSums(counts, sums, sq)


def _safe_div(num: Array, den: Array) -> Array:
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def class_means(s: ClassSums) -> tuple[Array, Array]:
    """``(means [K, d], present [K])``; rows of absent classes are zero."""
    present = s.counts > 0
    return _safe_div(s.sums, s.counts[:, None]), present


class FedPACStatistics(NamedTuple):
    v: Array  # scalar V_i / n_i
    h: Array  # [K, d] H_i[y] = p_i(y) mu_{i,y}
    n: Array  # scalar n_i


def fedpac_statistics(s: ClassSums) -> FedPACStatistics:
    """FedPAC's (v_i, H_i) from class sums (paper eqs. (43)-(46) with Lambda = I; spec A.4).

    ``V_i = sum_y p(y) s_y - p(y)^2 ||mu_y||^2`` over present classes, where ``s_y`` is the class mean
    of ``||f||^2``; ``v_i = V_i / n_i``; ``H_i[y] = p(y) mu_y``. An empty client gives zeros.
    """
    n = s.counts.sum()
    prior = _safe_div(s.counts, n)
    mu, _ = class_means(s)
    mean_sq = _safe_div(s.sq_norms, s.counts)
    variance = jnp.sum(prior * mean_sq - jnp.square(prior) * jnp.sum(jnp.square(mu), axis=-1))
    return FedPACStatistics(v=_safe_div(variance, n), h=prior[:, None] * mu, n=n)
