"""An exact solver of the simplex-constrained quadratic program, in float64::

    minimise  a^T P a   subject to  sum(a) = 1,  a >= 0      (P symmetric positive semi-definite).

Solver: jaxopt's projected gradient (with the sort-based Euclidean projection onto the simplex)
gives a feasible starting point and its support; a primal active-set method then finishes the job
exactly (each iteration is one small linear solve of the KKT system on the current support). The
result meets the KKT conditions (:func:`kkt_residual`) to round-off.

Call it inside a local ``jax.enable_x64(True)`` scope with a float64 ``P`` for full accuracy, so the
caller's dtype defaults are never changed. A tiny relative ridge (1e-12 * mean diagonal) makes the
minimiser unique and the tie-break deterministic when several candidates are identical.

FedPAC's classifier combination (Xu, Tong, Huang, ICLR 2023, Sec. 3.3 and 4.1, eqs. 10-11) is built on it:
:mod:`pflax.algorithms.fedpac.combination`.

>>> import jax, jax.numpy as jnp
>>> with jax.enable_x64(True):
...     a = solve_simplex_qp(jnp.diag(jnp.array([1.0, 3.0], jnp.float64)))
...     [round(float(x), 6) for x in a], float(kkt_residual(jnp.diag(jnp.array([1.0, 3.0], jnp.float64)), a)) < 1e-9
([0.75, 0.25], True)
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

Array = jax.Array

__all__ = ["solve_simplex_qp", "kkt_residual"]


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

    Args:
      p: ``[m, m]`` the (symmetric PSD) matrix; it is symmetrised and given a tiny ridge.
      warm_iters: projected-gradient iterations of the warm start.
      max_active_set_iter: active-set iterations (default ``3 m + 20``).

    Returns:
      ``[m]`` weights on the simplex, in ``p``'s dtype.

    Call inside ``jax.enable_x64(True)`` with a float64 ``P`` for full accuracy (as
    :func:`pflax.algorithms.fedpac.combination.combination_weights` does).

    >>> with jax.enable_x64(True):
    ...     solve_simplex_qp(jnp.eye(2, dtype=jnp.float64)).round(6).tolist()
    [0.5, 0.5]
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

    Args:
      p: ``[m, m]`` the QP's matrix.
      alpha: ``[m]`` a candidate solution.

    Returns:
      A scalar, 0 at an exact minimiser.

    >>> float(kkt_residual(jnp.eye(2), jnp.array([1.0, 0.0])))  # a vertex: the gradient favours the other one
    2.0
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
