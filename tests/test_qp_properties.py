"""Property tests of the float64 simplex QP over random and degenerate instances: the solution is
finite, on the simplex, and meets the KKT conditions to <= 1e-6 (relative to max|P|), with no
fall-back. The large stress run (10^5 instances, m up to 1000) is ``benchmarks/qp_stress.py``."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pflax.algorithms.fedpac import combination
from pflax.core import qp

TOL = 1e-6
SIZES = (1, 2, 3, 7, 24)  # few distinct sizes: each one is a separate compilation
FAMILIES = ("random", "rank_deficient", "zero_variance", "identical", "ties", "mixed_scales", "low_rank_psd")


def fedpac_p(v, h, target):
    u = (h[target][None] - h).reshape(h.shape[0], -1)
    return np.diag(v) + u @ u.T


def instance(seed: int, m: int, family: str, scale_exp: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k, d, target = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(m))
    h = rng.standard_normal((m, k, d))
    v = rng.uniform(0, 1, m)
    if family == "rank_deficient":
        h = (rng.standard_normal((m, 1)) @ rng.standard_normal((1, k * d))).reshape(m, k, d)
    elif family == "zero_variance":
        v = np.zeros(m)
    elif family == "identical":
        h, v = np.repeat(h[:1], m, axis=0), np.repeat(v[:1], m)
    elif family == "ties":  # identical clients with zero variance: non-unique minimisers
        h = np.repeat(h[:1], m, axis=0)
        v = np.where(rng.uniform(size=m) < 0.6, 0.0, v)
    elif family == "mixed_scales":
        v = 10 ** rng.uniform(-9, 2, m)
        h = h * 10 ** rng.uniform(-4, 3, (m, 1, 1))
    elif family == "low_rank_psd":
        a = rng.standard_normal((m, int(rng.integers(1, m + 1))))
        return (a @ a.T) * 10.0**scale_exp
    return fedpac_p(v, h, target) * 10.0**scale_exp


def solve_and_check(ps: np.ndarray):
    with jax.enable_x64(True):
        p = jnp.asarray(ps, jnp.float64)
        alpha = jax.vmap(qp.solve_simplex_qp)(p)
        residual = jax.vmap(qp.kkt_residual)(p, alpha)
        return np.asarray(alpha), np.asarray(residual)


def assert_solved(alpha: np.ndarray, residual: np.ndarray) -> None:
    assert np.all(np.isfinite(alpha)), "non-finite weights (combination_weights would fall back to e_i)"
    assert np.all(alpha >= -1e-12)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-9)
    assert np.all(residual <= TOL), f"KKT residual {residual.max():.3e}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.sampled_from(SIZES),
    family=st.sampled_from(FAMILIES),
    scale_exp=st.sampled_from([-8, 0, 6]),
)
def test_kkt_on_random_and_degenerate_instances(seed, m, family, scale_exp):
    assert_solved(*solve_and_check(instance(seed, m, family, scale_exp)[None]))


@settings(max_examples=30, deadline=None)
@given(
    v=st.lists(st.sampled_from([0.0, 1e-12, 1e-3, 0.5, 1.0]), min_size=7, max_size=7),
    group=st.lists(st.integers(0, 2), min_size=7, max_size=7),
)
def test_kkt_with_ties_and_zero_variances(v, group):
    """Hand-built ties: clients in the same group have identical H; variances from a few values."""
    protos = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]])
    h = protos[np.asarray(group)]
    ps = np.stack([fedpac_p(np.asarray(v), h, t) for t in range(7)])
    assert_solved(*solve_and_check(ps))


def test_identical_zero_variance_clients_tie_break_is_deterministic():
    ps = np.stack([fedpac_p(np.zeros(7), np.ones((7, 2, 3)), t) for t in range(7)])
    first, _ = solve_and_check(ps)
    second, _ = solve_and_check(ps)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("family", ["random", "zero_variance", "ties", "low_rank_psd"])
def test_kkt_at_m_200(family):
    assert_solved(*solve_and_check(instance(11, 200, family, 0)[None]))


def test_combination_weights_rows_on_simplex_without_fallback():
    rng = np.random.default_rng(0)
    v = jnp.asarray(rng.uniform(0.1, 1, 9), jnp.float32)  # positive: zero variance would rightly take weight 1
    h = jnp.asarray(np.repeat(rng.standard_normal((3, 2, 4)), 3, axis=0), jnp.float32)  # 3 groups of identical clients
    w = np.asarray(combination.combination_weights(v, h))
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-6)
    # Identical clients with positive variances always pool (inverse-variance weights): no row is e_i.
    assert not np.any(np.isclose(w, 1.0))
