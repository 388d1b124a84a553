"""The FedPAC combination QP: KKT conditions, an independent exact solver, degenerate cases."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pflax.algorithms.fedpac import combination
from pflax.core import qp


def brute_force_simplex_qp(p: np.ndarray) -> tuple[np.ndarray, float]:
    """Independent exact solver: enumerate every support, solve its KKT system, keep the best
    feasible point (exponential, fine for m <= 7)."""
    m = p.shape[0]
    best, best_val = None, np.inf
    for size in range(1, m + 1):
        for support in itertools.combinations(range(m), size):
            s = list(support)
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size] = 2 * p[np.ix_(s, s)]
            kkt[:size, size] = 1
            kkt[size, :size] = 1
            rhs = np.zeros(size + 1)
            rhs[size] = 1
            try:
                sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:size]
            except np.linalg.LinAlgError:
                continue
            if np.any(sol < -1e-12) or abs(sol.sum() - 1) > 1e-9:
                continue
            a = np.zeros(m)
            a[s] = np.clip(sol, 0, None)
            val = a @ p @ a
            if val < best_val - 1e-15:
                best, best_val = a, val
    return best, best_val


def _p(v, h, i):
    with jax.enable_x64(True):
        return np.asarray(combination.combination_matrices(jnp.asarray(v, jnp.float64), jnp.asarray(h, jnp.float64))[i])


def _solve(p):
    with jax.enable_x64(True):
        p64 = jnp.asarray(p, jnp.float64)
        a = qp.solve_simplex_qp(p64)
        return np.asarray(a), float(qp.kkt_residual(p64, a))


def test_matrix_is_diag_v_plus_gram_of_h_differences():
    rng = np.random.default_rng(0)
    v, h = rng.uniform(0.1, 1, 4), rng.normal(size=(4, 3, 5))
    for i in range(4):
        u = (h[i] - h).reshape(4, -1)
        np.testing.assert_allclose(_p(v, h, i), np.diag(v) + u @ u.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose((_p(v, h, i) - np.diag(v))[i], 0, atol=1e-12)  # row i of D is zero


@pytest.mark.parametrize("seed", range(12))
def test_matches_independent_solver_and_kkt(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 7))
    h = rng.normal(size=(m, 3, 4)) * rng.uniform(0.05, 2)
    v = rng.uniform(0, 1, m) * [0, 1e-3, 1][seed % 3]
    if seed % 4 == 0:
        h[1] = h[0]  # identical statistics
    for i in range(m):
        p = _p(v, h, i) + 1e-12 * max(np.trace(_p(v, h, i)) / m, 1e-30) * np.eye(m)
        a, res = _solve(p)
        assert res <= 1e-9
        ref, ref_val = brute_force_simplex_qp(p)
        assert a @ p @ a <= ref_val + 1e-10 * max(1.0, abs(ref_val))
        if ref_val > 1e-9:  # unique minimiser (strictly convex in practice)
            np.testing.assert_allclose(a, ref, atol=1e-6)


def test_equal_h_gives_inverse_variance_weights():
    rng = np.random.default_rng(1)
    v = rng.uniform(0.2, 2.0, 6)
    h = np.repeat(rng.normal(size=(1, 4, 3)), 6, axis=0)
    w = np.asarray(combination.combination_weights(jnp.asarray(v, jnp.float32), jnp.asarray(h, jnp.float32), threshold=0.0))
    expected = (1 / v) / (1 / v).sum()
    np.testing.assert_allclose(w, np.broadcast_to(expected, (6, 6)), atol=1e-6)


def test_single_client_keeps_itself():
    w = combination.combination_weights(jnp.array([0.3]), jnp.ones((1, 2, 2)))
    np.testing.assert_array_equal(np.asarray(w), [[1.0]])


def test_zero_variance_identical_clients_deterministic_tie_break():
    v = jnp.zeros(4)
    h = jnp.ones((4, 3, 2))
    w1 = np.asarray(combination.combination_weights(v, h))
    w2 = np.asarray(combination.combination_weights(v, h))
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_allclose(w1, 0.25, atol=1e-6)  # the ridge breaks the tie uniformly
    assert np.all(np.isfinite(w1))


def test_zero_variance_distinct_client_prefers_itself():
    # v_i = 0 and a distinct H: self-weight 1 is optimal (objective 0)
    h = jnp.asarray(np.random.default_rng(2).normal(size=(3, 2, 2)), jnp.float32)
    w = np.asarray(combination.combination_weights(jnp.zeros(3), h))
    np.testing.assert_allclose(w, np.eye(3), atol=1e-6)


def test_threshold_then_renormalise():
    alpha = jnp.array([0.5, 0.4995, 0.0005])
    out = np.asarray(combination.threshold_and_renormalize(alpha, 1e-3))
    np.testing.assert_allclose(out, [0.5 / 0.9995, 0.4995 / 0.9995, 0.0], rtol=1e-6)


def test_non_participating_slots_get_no_weight_and_keep_themselves():
    rng = np.random.default_rng(3)
    v = jnp.asarray(rng.uniform(0.1, 1, 5), jnp.float32)
    h = jnp.asarray(rng.normal(size=(5, 2, 3)), jnp.float32)
    mask = jnp.array([True, True, False, True, True])
    w = np.asarray(combination.combination_weights(v, h, mask))
    assert np.all(w[[0, 1, 3, 4], 2] == 0)
    np.testing.assert_array_equal(w[2], np.eye(5)[2])
    np.testing.assert_allclose(w.sum(1), 1, atol=1e-6)


def test_official_mode_agrees_on_well_conditioned_problems():
    rng = np.random.default_rng(4)
    v = jnp.asarray(rng.uniform(0.5, 1, 5), jnp.float32)
    h = jnp.asarray(rng.normal(size=(5, 2, 3)), jnp.float32)
    exact = np.asarray(combination.combination_weights(v, h))
    official = np.asarray(combination.combination_weights(v, h, mode="official"))
    np.testing.assert_allclose(exact, official, atol=1e-4)


def test_solves_in_float64_without_touching_global_x64():
    assert not jax.config.jax_enable_x64
    # a problem whose answer needs float64: weights differ below float32 resolution of P's entries
    v = jnp.array([1.0, 1.0 + 1e-7])
    w = combination.combination_weights(v, jnp.zeros((2, 1, 1)), threshold=0.0)
    assert w.dtype == jnp.float32
    assert float(w[0, 0]) > float(w[0, 1])
    assert not jax.config.jax_enable_x64
    assert jnp.ones(2).dtype == jnp.float32


def test_jit_and_vmap_compatible():
    rng = np.random.default_rng(5)
    v = jnp.asarray(rng.uniform(0.1, 1, (3, 4)), jnp.float32)
    h = jnp.asarray(rng.normal(size=(3, 4, 2, 2)), jnp.float32)
    batched = jax.jit(jax.vmap(combination.combination_weights))(v, h)
    for b in range(3):
        np.testing.assert_allclose(batched[b], combination.combination_weights(v[b], h[b]), atol=1e-6)


def test_eager_call_is_one_compiled_program_equal_to_the_traced_one():
    # An eager call must not dispatch the float64 computation op by op (~80 small compilations,
    # 3 s for m = 6); it runs one program, which computes what the inlined (traced) path computes.
    rng = np.random.default_rng(9)
    v = jnp.asarray(rng.uniform(0.1, 1, 9), jnp.float32)  # m = 9: a shape no other test compiles
    h = jnp.asarray(rng.normal(size=(9, 3, 2)), jnp.float32)
    lowered = []

    def listen(event, _seconds, **_kwargs):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        eager = np.asarray(combination.combination_weights(v, h))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert len(lowered) <= 5, f"{len(lowered)} programs lowered for one eager call"  # op by op: ~80
    traced = np.asarray(jax.jit(combination.combination_weights)(v, h))
    np.testing.assert_allclose(eager, traced, atol=1e-6)
    np.testing.assert_allclose(eager.sum(1), 1.0, atol=1e-6)


def test_qp_on_two_cpu_devices_does_not_deadlock():
    # Regression: with the targets vmapped, jaxlib's batched LU kernels deadlocked on the shared CPU
    # thread pool when two host devices ran the solver at once (3 of 4 runs hung at m = 40).
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    script = Path(__file__).with_name("_qp_two_devices.py")
    try:
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the QP on two CPU devices did not finish in 240 s (deadlock)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) < 1e-5


def test_importing_pflax_does_not_surface_jaxopts_unmaintained_warning():
    """jaxopt warns on import; pflax silences that one warning around its own import (and nothing else)."""
    import subprocess
    import sys

    code = "import warnings; warnings.simplefilter('always'); import pflax; import pflax.core.qp"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "JAXopt is no longer maintained" not in out.stderr
