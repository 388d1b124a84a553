"""The simplex-constrained QP of FedPAC's classifier combination, solved exactly in float64.

For every target participant ``i`` (spec A.5)::

    minimise  a^T P_i a   subject to  sum(a) = 1,  a >= 0,
    P_i = diag(v) + D_i,   D_i[j, k] = <H_i - H_j, H_i - H_k>   (Frobenius inner product).

Solver: jaxopt's projected gradient (with the sort-based Euclidean projection onto the simplex)
gives a feasible starting point and its support; a primal active-set method then finishes the job
exactly (each iteration is one small linear solve of the KKT system on the current support). The
result meets the KKT conditions to round-off, far below OSQP's ~1e-4 that the official cvxpy code
gets, so no weight near the 1e-3 threshold flips by accident.

Everything runs in float64 inside a local ``jax.enable_x64(True)`` scope, so the caller's dtype
defaults are never changed. A tiny relative ridge (1e-12 * mean diagonal) makes the minimiser unique
and the tie-break deterministic when several clients have zero variance and identical statistics.

After solving, weights <= 1e-3 are zeroed and the rest renormalised: the official code zeroes in
``get_head_agg_weight`` and divides by the sum in ``agg_classifier_weighted_p``.

``mode="official"`` reproduces the official numerical path instead: ``P`` in float32, the "all
eigenvalues >= 0" test, the rebuild from eigenpairs with eigenvalue >= 0.01, and the fall-back to
the client's own head (``a = e_i``) when that rebuild still fails or would be empty (the official code
crashes there). The problem it then solves is exact, so only the pre-processing differs.
"""
from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp

with warnings.catch_warnings():
    # jaxopt warns on import that it is unmaintained; it is the QP solver this library is specified to use,
    # so the warning would only tell users about our choice. Scoped to this import, not to their code.
    warnings.filterwarnings("ignore", message="JAXopt is no longer maintained", category=DeprecationWarning)
    import jaxopt

from .aggregate import EXACT

Array = jax.Array

WEIGHT_THRESHOLD = 1e-3
EIGEN_FLOOR = 0.01


def combination_matrices(v: Array, h: Array) -> Array:
    """``P_i`` for every target ``i``: ``[m, m, m]`` from ``v [m]`` and ``h [m, K, d]`` (any float dtype)."""
    flat = h.reshape(h.shape[0], -1)
    # Full precision: the "official" mode builds P in float32, which a GPU would otherwise do in TF32.
    gram = jnp.matmul(flat, flat.T, precision=EXACT)  # B[j, k] = <H_j, H_k>
    diag = jnp.sum(flat * flat, axis=1)  # ||H_j||^2 (not jnp.diag: its batching rule ignores the local x64 scope)
    # D_i[j, k] = B_ii - B_ik - B_ji + B_jk
    d = diag[:, None, None] - gram[:, None, :] - gram[:, :, None] + gram[None, :, :]
    p = d + v[None, :, None] * jnp.eye(v.shape[0], dtype=v.dtype)[None]
    return 0.5 * (p + jnp.swapaxes(p, 1, 2))


def _first_argmin(x: Array) -> Array:
    """argmin written with min + where: ``jnp.argmin``'s lowering reads the global x64 flag, which is
    off outside our local float64 scope, and then mixes float32 and float64."""
    idx = jnp.arange(x.shape[0], dtype=jnp.int32)
    return jnp.min(jnp.where(x == jnp.min(x), idx, x.shape[0])).astype(jnp.int32)


def _solve_on_support(p: Array, support: Array) -> Array:
    """Minimiser of a^T P a with sum(a)=1 on ``support`` (zeros elsewhere); may have negative entries."""
    m = p.shape[0]
    eye = jnp.eye(m, dtype=p.dtype)
    both = support[:, None] & support[None, :]
    system = jnp.where(both, p, eye)
    z = jnp.linalg.solve(system, support.astype(p.dtype))
    z = jnp.where(support, z, 0.0)
    total = z.sum()
    return z / jnp.where(total != 0, total, 1.0)


def _active_set(p: Array, start: Array, max_iter: int) -> Array:
    """Primal active-set method from a feasible ``start`` (on the simplex)."""
    scale = jnp.maximum(jnp.max(jnp.abs(p)), jnp.finfo(p.dtype).tiny)
    tol = 1e-13 * scale

    def cond(carry):
        _, _, done, it = carry
        return (~done) & (it < max_iter)

    def body(carry):
        alpha, support, _, it = carry
        target = _solve_on_support(p, support)
        direction = target - alpha
        blocking = support & (target < 0)

        # Case 1: the support's minimiser leaves the simplex -> step to the boundary, drop a blocker.
        ratios = jnp.where(blocking & (direction < 0), alpha / jnp.where(direction < 0, -direction, 1.0), jnp.inf)
        step = jnp.minimum(jnp.min(ratios), 1.0)
        moved = jnp.clip(alpha + step * direction, 0.0, None)
        drop = _first_argmin(ratios)
        support_drop = (support & (moved > 0)).at[drop].set(False)
        moved = jnp.where(support_drop, moved, 0.0)
        moved = moved / moved.sum()

        # Case 2: feasible -> check the multipliers of the excluded indices, add the most violated.
        grad = 2.0 * p @ target
        level = jnp.sum(target * grad)  # common gradient value on the support at its minimiser
        violation = jnp.where(support, jnp.inf, grad - level)
        enter = _first_argmin(violation)
        optimal = violation[enter] >= -tol

        feasible = ~jnp.any(blocking)
        new_alpha = jnp.where(feasible, target, moved)
        grown = jnp.where(optimal, support, support.at[enter].set(True))
        new_support = jnp.where(feasible, grown, support_drop)
        done = feasible & optimal
        return new_alpha, new_support, done, it + 1

    support = start > 0
    alpha, _, _, _ = jax.lax.while_loop(cond, body, (start, support, jnp.array(False), jnp.array(0)))
    return alpha


@functools.partial(jax.jit, static_argnames=("warm_iters", "max_active_set_iter"))
def solve_simplex_qp(p: Array, *, warm_iters: int = 200, max_active_set_iter: int | None = None) -> Array:
    """Exact minimiser of ``a^T P a`` over the probability simplex, for one PSD ``P [m, m]``.

    Call inside ``jax.enable_x64(True)`` with a float64 ``P`` for full accuracy (as
    :func:`combination_weights` does).
    """
    m = p.shape[0]
    if m == 1:
        return jnp.ones((1,), p.dtype)
    diag_mean = jnp.maximum(jnp.trace(p) / m, 1e-30)
    p = 0.5 * (p + p.T) + 1e-12 * diag_mean * jnp.eye(m, dtype=p.dtype)
    lipschitz = 2.0 * jnp.max(jnp.sum(jnp.abs(p), axis=1))  # >= 2 * lambda_max
    pg = jaxopt.ProjectedGradient(
        fun=lambda a, q: a @ q @ a,
        projection=jaxopt.projection.projection_simplex,
        stepsize=1.0,  # the objective below is pre-scaled by 1/L, so 1 is the 1/L step
        maxiter=warm_iters,
        tol=1e-12,
        acceleration=True,
        implicit_diff=False,
        jit=True,
    )
    start = pg.run(jnp.full((m,), 1.0 / m, p.dtype), q=p / lipschitz).params
    start = jnp.clip(start, 0.0, None)
    start = start / start.sum()
    iters = max_active_set_iter if max_active_set_iter is not None else 3 * m + 20
    return _active_set(p, start, iters)


@jax.jit
def kkt_residual(p: Array, alpha: Array) -> Array:
    """Largest violation of the KKT conditions of the simplex QP, relative to ``max|P|``.

    Checks primal feasibility (sum = 1, a >= 0), dual feasibility (every gradient entry >= the
    level ``a^T grad``) and complementarity (``a_j (grad_j - level) = 0``).
    """
    grad = 2.0 * p @ alpha
    level = jnp.sum(alpha * grad)
    scale = jnp.maximum(jnp.max(jnp.abs(p)), 1e-300)
    return jnp.max(
        jnp.stack(
            [
                jnp.abs(alpha.sum() - 1.0),
                jnp.max(jnp.clip(-alpha, 0.0, None)),
                jnp.max(jnp.clip(level - grad, 0.0, None)) / scale,
                jnp.max(jnp.abs(alpha * (grad - level))) / scale,
            ]
        )
    )


def threshold_and_renormalize(alpha: Array, threshold: float = WEIGHT_THRESHOLD) -> Array:
    """Zero weights <= ``threshold`` and renormalise (official post-processing, spec A.5)."""
    kept = jnp.where(alpha > threshold, alpha, 0.0)
    total = kept.sum()
    # With m > 1/threshold every weight could be tiny; keep the exact solution then.
    return jnp.where(total > 0, kept / jnp.where(total > 0, total, 1.0), alpha)


def _official_preprocess(p32: Array, self_index: Array) -> tuple[Array, Array]:
    """Official float32 PSD test + eigen-flooring; returns (P, ok)."""
    eigvals, eigvecs = jnp.linalg.eigh(p32)
    psd = jnp.min(eigvals) >= 0
    keep = eigvals >= EIGEN_FLOOR
    rebuilt = jnp.matmul(eigvecs * jnp.where(keep, eigvals, 0.0), eigvecs.T, precision=EXACT)
    rebuilt_ok = jnp.any(keep) & (jnp.min(jnp.linalg.eigvalsh(rebuilt)) >= 0)
    p = jnp.where(psd, p32, rebuilt)
    return p, psd | rebuilt_ok


def combination_weights(
    v: Array,
    h: Array,
    participating: Array | None = None,
    *,
    mode: str = "exact",
    threshold: float = WEIGHT_THRESHOLD,
) -> Array:
    """FedPAC combination weights for every participant: ``[m, m]``, row ``i`` sums to 1.

    ``v [m]`` and ``h [m, K, d]`` are the participants' statistics. ``participating [m]`` (optional)
    masks out padded or empty slots: they are never candidates, and their own row is ``e_i``.
    Returned in float32. Every row sums to 1: a row whose solve is not finite (NaN/Inf statistics)
    falls back to ``e_i`` (the client keeps its own head), as the official code does when its PSD
    check fails.

    Called on concrete arrays it runs one program compiled (and cached) per shape inside the local
    float64 scope. Called under a trace (a jitted round, ``vmap``, ``grad``) it is inlined instead: a
    jitted inner function would be traced once and could then be re-transformed (say, batched as
    part of a ``lax.scan`` body that is vmapped later) outside that scope, mixing dtypes.
    """
    if mode not in ("exact", "official"):
        raise ValueError(f"mode must be 'exact' or 'official', got {mode!r}")
    if v.ndim != 1 or h.ndim != 3 or h.shape[0] != v.shape[0]:
        raise ValueError(f"combination_weights needs v [m] and h [m, K, d]; got v {tuple(v.shape)}, h {tuple(h.shape)}")
    if participating is not None and tuple(participating.shape) != tuple(v.shape):
        raise ValueError(f"participating must have shape {tuple(v.shape)}, got {tuple(participating.shape)}")
    m = v.shape[0]
    if participating is None:
        participating = jnp.ones((m,), bool)
    if any(isinstance(a, jax.core.Tracer) for a in (v, h, participating)):
        # Inside the caller's trace (a jitted round, vmap, grad): inline, in a local float64 scope.
        return _weights(v, h, participating, mode, threshold)
    # An eager call: compile the whole computation as one program per shape, entered inside the
    # float64 scope so no later transformation can re-trace it outside that scope. Op by op it would
    # compile ~80 small float64 programs (measured for m = 6: 4.7 s on first call, against 1.5 s).
    with jax.enable_x64(True):
        return _weights_compiled(v, h, participating, mode, threshold)


def _weights(v: Array, h: Array, participating: Array, mode: str, threshold: float) -> Array:
    m = v.shape[0]
    with jax.enable_x64(True):
        v64 = v.astype(jnp.float64)
        h64 = h.astype(jnp.float64)
        eye = jnp.eye(m, dtype=jnp.float64)
        if mode == "official":
            p_all = combination_matrices(v.astype(jnp.float32), h.astype(jnp.float32))
        else:
            p_all = combination_matrices(v64, h64)
        # Non-candidates: a huge diagonal and no coupling keeps them at weight 0 exactly.
        allowed = participating[:, None] & participating[None, :]
        big = 1e6 * (1.0 + jnp.max(jnp.abs(p_all)))

        def one(i, p):
            ok = jnp.array(True)
            if mode == "official":
                p, ok = _official_preprocess(p, i)
            p = p.astype(jnp.float64)
            p = jnp.where(allowed, p, jnp.where(eye > 0, big, 0.0))
            alpha = solve_simplex_qp(p)
            alpha = jnp.where(participating, alpha, 0.0)
            alpha = threshold_and_renormalize(alpha / jnp.maximum(alpha.sum(), 1e-300), threshold)
            fallback = eye[i]
            # Non-finite statistics (a diverged client) can make every weight NaN or 0: then the
            # target keeps its own head rather than mixing garbage or an all-zero head.
            valid = jnp.all(jnp.isfinite(alpha)) & (jnp.abs(alpha.sum() - 1.0) < 1e-6)
            use = ok & participating[i] & valid
            return jnp.where(use, alpha, fallback)

        if jax.default_backend() == "cpu":
            # Targets one after another on CPU: vmapped, the solver's LU factorisations run batched,
            # and jaxlib's batched CPU LAPACK kernels wait on the shared thread pool, which
            # deadlocks when several CPU devices run them at once (seen with 2 forced host devices
            # from m = 40 on). Sequential solves take the same time here (m = 100: 2.4-2.9 s).
            weights = jax.lax.map(lambda target: one(*target), (jnp.arange(m), p_all))
        else:
            weights = jax.vmap(one)(jnp.arange(m), p_all)
        return weights.astype(jnp.float32)


_weights_compiled = jax.jit(_weights, static_argnums=(3, 4))
