"""The Gram-structured simplex QP solver (``qp.solve_gram_simplex_qps``) and FedPAC's large-m path
(``combination_weights(..., solver="gram")``): the structured product equals the explicit ``P_i``, and
the solutions equal the dense exact solver's and the brute-force solver's on random and degenerate
instances, forced through the new path at small m."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pflax.algorithms.fedpac import combination
from pflax.core import qp
from test_qp import brute_force_simplex_qp

KKT = 1e-9


def _explicit(v, h):
    """Every target's P_i = diag(v) + Gram(H_i - H_j), built directly in numpy (independent of pflax)."""
    flat = np.asarray(h, np.float64).reshape(len(v), -1)
    u = flat[:, None, :] - flat[None, :, :]  # u[i, j] = H_i - H_j
    return np.diag(v)[None] + np.einsum("ijd,ikd->ijk", u, u)


def _gram_alpha(v, h, participating=None):
    with jax.enable_x64(True):
        mask = None if participating is None else jnp.asarray(participating)
        alpha = combination.gram_combination_alpha(jnp.asarray(v, jnp.float64), jnp.asarray(h, jnp.float64), mask)
        return np.asarray(alpha)


def _kkt(p, a):
    """qp.kkt_residual's measure, in numpy: feasibility, dual feasibility, complementarity, relative to max|P|."""
    grad = 2.0 * p @ a
    level = a @ grad
    scale = max(np.abs(p).max(), 1e-300)
    return max(abs(a.sum() - 1.0), np.clip(-a, 0, None).max(), np.clip(level - grad, 0, None).max() / scale,
               np.abs(a * (grad - level)).max() / scale)


def _ridged(p):
    m = p.shape[0]
    return p + 1e-12 * max(np.trace(p) / m, 1e-30) * np.eye(m)


def _instance(seed: int, m: int, family: str):
    """FedPAC statistics (v [m], h [m, K, d]) in float64, random or degenerate."""
    rng = np.random.default_rng(seed)
    k, d = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    v, h = rng.uniform(0, 1, m), rng.standard_normal((m, k, d))
    if family == "zero_variance":
        v = np.zeros(m)
    elif family == "identical":  # two groups of identical clients: ties
        h, v = h[np.arange(m) % 2], v[np.arange(m) % 2]
    elif family == "rank_deficient":
        h = (rng.standard_normal((m, 1)) @ rng.standard_normal((1, k * d))).reshape(m, k, d)
        v = v * (rng.uniform(size=m) < 0.5)
    elif family == "mixed_scales":
        v = 10 ** rng.uniform(-9, 2, m)
        h = h * 10 ** rng.uniform(-4, 3, (m, 1, 1))
    elif family == "common_offset":  # a large shared mean: the Gram matrix cancels it
        h = h + 1e3
    return v, h


FAMILIES = ("random", "zero_variance", "identical", "rank_deficient", "mixed_scales", "common_offset")


def test_gram_matvec_equals_explicit_matrices():
    rng = np.random.default_rng(0)
    m = 6
    v, h = rng.uniform(0.1, 1, m), rng.standard_normal((m, 3, 2))
    a = rng.uniform(size=(m, m))  # any vectors: the formula does not need sum(a) = 1
    flat = h.reshape(m, -1)
    gram = flat @ flat.T
    with jax.enable_x64(True):
        args = (jnp.asarray(x) for x in (v, gram, gram, np.diag(gram).copy(), a))
        got = np.asarray(qp.gram_qp_matvec(*args))
    p = _explicit(v, h)
    np.testing.assert_allclose(got, np.einsum("ijk,ik->ij", p, a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [4, 7])  # the brute force enumerates 2^m supports
@pytest.mark.parametrize("family", FAMILIES)
def test_gram_solver_equals_dense_and_brute_force_solvers(family, m):
    v, h = _instance(m, m, family)
    alpha = _gram_alpha(v, h)
    p_all = _explicit(v, h)
    for i in range(m):
        p = _ridged(p_all[i])
        assert _kkt(p_all[i], alpha[i]) <= KKT
        ref, ref_val = brute_force_simplex_qp(p)
        value = alpha[i] @ p @ alpha[i]
        assert value <= ref_val + 1e-10 * max(1.0, abs(ref_val))
        with jax.enable_x64(True):
            dense = np.asarray(qp.solve_simplex_qp(jnp.asarray(p_all[i])))
        assert abs(value - dense @ p @ dense) <= 1e-10 * max(1.0, abs(value))
        if ref_val > 1e-9 * np.abs(p).max():  # strictly convex in practice: a unique minimiser
            np.testing.assert_allclose(alpha[i], ref, atol=1e-6)
            np.testing.assert_allclose(alpha[i], dense, atol=1e-8)


UNIQUE = ("random", "identical", "mixed_scales", "common_offset")  # v > 0: P_i positive definite


@pytest.mark.parametrize("family", FAMILIES)
def test_combination_weights_gram_path_equals_dense_path(family):
    v, h = _instance(7, 12, family)
    v32, h32 = jnp.asarray(v, jnp.float32), jnp.asarray(h, jnp.float32)
    dense = np.asarray(combination.combination_weights(v32, h32, solver="dense"))
    gram = np.asarray(combination.combination_weights(v32, h32, solver="gram"))
    np.testing.assert_allclose(gram.sum(1), 1.0, atol=1e-6)
    if family in UNIQUE:
        np.testing.assert_allclose(gram, dense, atol=1e-6)
    else:
        # Zero variances with rank-deficient H: a face of minimisers, on which the 1e-12 ridge's preference
        # is below the solvers' KKT tolerance, so each may stop at a different point of it. Same optimum.
        p_all = _explicit(np.asarray(v32, np.float64), np.asarray(h32, np.float64))
        for i in range(12):
            scale = np.abs(p_all[i]).max()
            assert abs(gram[i] @ p_all[i] @ gram[i] - dense[i] @ p_all[i] @ dense[i]) <= 1e-6 * scale


def test_gram_path_with_non_participants():
    rng = np.random.default_rng(3)
    m = 12
    v, h = rng.uniform(0.1, 1, m), rng.standard_normal((m, 2, 3))
    mask = np.ones(m, bool)
    mask[[2, 7]] = False
    h[7] = np.nan  # a non-participant's statistics are never read
    w = np.asarray(combination.combination_weights(jnp.asarray(v, jnp.float32), jnp.asarray(h, jnp.float32),
                                                   jnp.asarray(mask), solver="gram"))
    assert np.all(w[mask][:, ~mask] == 0)
    np.testing.assert_array_equal(w[~mask], np.eye(m)[~mask])
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-6)
    # Exact on the participants' problem. (The dense path's placeholder diagonal for non-participants
    # also enters its 1e-12 ridge, which moves its weights by ~1e-6: compared loosely.)
    alpha = _gram_alpha(v, np.where(mask[:, None, None], h, 0.0), mask)
    idx = np.flatnonzero(mask)
    p_all = _explicit(v[idx], h[idx])
    for row, i in enumerate(idx):
        assert _kkt(p_all[row], alpha[i][idx]) <= KKT
    # (Without nan_to_num the dense path would read the NaNs into its placeholder size and fall back everywhere.)
    dense = np.asarray(combination.combination_weights(jnp.asarray(v, jnp.float32), jnp.asarray(np.nan_to_num(h), jnp.float32),
                                                       jnp.asarray(mask), solver="dense"))
    np.testing.assert_allclose(w, dense, atol=1e-4)


def test_non_finite_participant_falls_back_to_own_head():
    rng = np.random.default_rng(4)
    v, h = rng.uniform(0.1, 1, 6), rng.standard_normal((6, 2, 2))
    h[3] = np.nan
    w = np.asarray(combination.combination_weights(jnp.asarray(v, jnp.float32), jnp.asarray(h, jnp.float32),
                                                   solver="gram"))
    np.testing.assert_array_equal(w, np.eye(6))  # every P_i holds the diverged client's NaNs, as on the dense path


def test_gram_path_is_deterministic_and_eager_equals_jitted():
    v, h = _instance(5, 12, "identical")  # ties: the tie-break must not vary
    v32, h32 = jnp.asarray(v, jnp.float32), jnp.asarray(h, jnp.float32)
    first = np.asarray(combination.combination_weights(v32, h32, solver="gram"))
    second = np.asarray(combination.combination_weights(v32, h32, solver="gram"))
    np.testing.assert_array_equal(first, second)
    jitted = np.asarray(jax.jit(lambda a, b: combination.combination_weights(a, b, solver="gram"))(v32, h32))
    np.testing.assert_array_equal(first, jitted)
    assert not jax.config.jax_enable_x64


def test_auto_uses_gram_above_the_threshold_on_the_cpu():
    m = combination.GRAM_SOLVER_ABOVE + 1
    rng = np.random.default_rng(6)
    v, h = jnp.asarray(rng.uniform(0.1, 1, m), jnp.float32), jnp.asarray(rng.standard_normal((m, 2, 3)), jnp.float32)
    auto = np.asarray(combination.combination_weights(v, h))
    expected = "gram" if jax.default_backend() == "cpu" else "dense"  # accelerators keep the vmapped dense path
    np.testing.assert_array_equal(auto, np.asarray(combination.combination_weights(v, h, solver=expected)))
    np.testing.assert_allclose(auto.sum(1), 1.0, atol=1e-6)


def test_gram_path_under_vmap():
    rng = np.random.default_rng(8)
    v = jnp.asarray(rng.uniform(0.1, 1, (2, 6)), jnp.float32)
    h = jnp.asarray(rng.standard_normal((2, 6, 2, 2)), jnp.float32)
    batched = jax.jit(jax.vmap(lambda a, b: combination.combination_weights(a, b, solver="gram")))(v, h)
    for k in range(2):
        single = combination.combination_weights(v[k], h[k], solver="gram")
        np.testing.assert_allclose(np.asarray(batched[k]), np.asarray(single), atol=1e-6)


def test_solver_argument_is_checked():
    v, h = jnp.ones(3), jnp.ones((3, 2, 2))
    with pytest.raises(ValueError, match="solver must be one of"):
        combination.combination_weights(v, h, solver="fast")
    with pytest.raises(ValueError, match="no Gram solver"):
        combination.combination_weights(v, h, mode="official", solver="gram")


def _fedpac_shaped(m: int, seed: int):
    """Clients in five groups sharing a label distribution (FedPAC's partitions), K = 10, d = 16."""
    rng = np.random.default_rng(seed)
    k, d = 10, 16
    means = rng.standard_normal((k, d))
    prior = np.full((5, k), 0.2 / (k - 2))
    for g in range(5):
        prior[g, [2 * g, 2 * g + 1]] = 0.4
    n = rng.integers(200, 601, m)
    p = np.stack([rng.multinomial(n[j], prior[j % 5]) for j in range(m)]) / n[:, None]
    mu = means[None] + rng.standard_normal((m, k, d)) / np.sqrt(np.maximum(p * n[:, None], 1))[..., None]
    h = p[..., None] * mu
    sq = np.sum(mu**2, axis=-1)
    v = np.sum(p * (sq + d) - p**2 * sq, axis=1) / n
    return v, h


def test_kkt_at_m_200_on_fedpac_shaped_statistics():
    v, h = _fedpac_shaped(200, 0)
    alpha = _gram_alpha(v, h)
    flat = h.reshape(200, -1)
    gram = flat @ flat.T
    worst = 0.0
    for i in range(200):
        p = np.diag(v) + gram[i, i] - gram[i][:, None] - gram[i][None, :] + gram  # combination_matrices' P_i
        worst = max(worst, _kkt(p, alpha[i]))
    assert worst <= KKT
    assert np.all(np.sum(alpha > 0, axis=1) > 1)  # the groups pool: a real multi-index support


def test_single_candidate_and_all_equal():
    with jax.enable_x64(True):
        one = qp.solve_gram_simplex_qps(jnp.ones(1), jnp.ones((1, 1)), jnp.ones((2, 1)), jnp.ones(2))
        assert one.tolist() == [[1.0], [1.0]]
        m = 9  # identical candidates, zero variance: the ridge spreads the weight evenly
        flat = jnp.zeros((m, m), jnp.float64)
        a = qp.solve_gram_simplex_qps(jnp.zeros(m, jnp.float64), flat, flat, jnp.zeros(m, jnp.float64))
        np.testing.assert_allclose(np.asarray(a), 1.0 / m, atol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), family=st.sampled_from(FAMILIES), scale_exp=st.sampled_from([-8, 0, 6]))
def test_gram_solver_kkt_property(seed, family, scale_exp):
    """Every target of a 24-client instance (one compiled shape) meets the KKT conditions of its P_i."""
    v, h = _instance(seed, 24, family)
    v, h = v * 10.0**scale_exp, h * 10.0 ** (scale_exp / 2)
    alpha = _gram_alpha(v, h)
    assert np.all(np.isfinite(alpha)) and np.all(alpha >= 0)
    np.testing.assert_allclose(alpha.sum(1), 1.0, atol=1e-12)
    p_all = _explicit(v, h)
    assert max(_kkt(p_all[i], alpha[i]) for i in range(24)) <= KKT
