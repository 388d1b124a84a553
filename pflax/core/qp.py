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

For many QPs whose matrices share one Gram matrix, ``P_t = diag(v) + G - 1 r_t^T - r_t 1^T + c_t 1 1^T``
(FedPAC's m targets over m participants), :func:`solve_gram_simplex_qps` solves all of them exactly
without forming any ``P_t``: each target's active-set iterations only read the rows of ``G`` on its
current support, so the cost follows the support sizes instead of ``m^3`` per iteration.

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

Array = jax.Array

__all__ = ["solve_simplex_qp", "kkt_residual", "gram_qp_matvec", "solve_gram_simplex_qps"]


@functools.cache
def _jaxopt():
    """jaxopt, imported on first use: it pulls in scipy.optimize (about half a second), which processes
    that never solve a QP (a Flower client, most CLI runs) need not pay for."""
    with warnings.catch_warnings():
        # jaxopt warns on import that it is unmaintained; it is the QP solver this library is specified to
        # use, so the warning would only tell users about our choice. Scoped to this import, not their code.
        warnings.filterwarnings("ignore", message="JAXopt is no longer maintained", category=DeprecationWarning)
        import jaxopt
    return jaxopt


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


def _primal_step(alpha: Array, support: Array, target: Array, blocking: Array, violation: Array,
                 optimal: Array) -> tuple[Array, Array]:
    """One iteration of the primal active-set method from the feasible ``alpha``: ``(alpha, support)`` next.

    ``target`` is the minimiser on ``support``, ``blocking`` its negative entries on the support,
    ``violation`` the multipliers of the excluded indices (``inf`` where an index may not enter) and
    ``optimal`` whether none is below the tolerance."""
    # Case 1: the support's minimiser leaves the simplex -> step to the boundary, drop a blocker.
    direction = target - alpha
    ratios = jnp.where(blocking & (direction < 0), alpha / jnp.where(direction < 0, -direction, 1.0), jnp.inf)
    step = jnp.minimum(jnp.min(ratios), 1.0)
    moved = jnp.clip(alpha + step * direction, 0.0, None)
    support_drop = (support & (moved > 0)).at[_first_argmin(ratios)].set(False)
    moved = jnp.where(support_drop, moved, 0.0)
    moved = moved / moved.sum()
    # Case 2: feasible -> add the most violated excluded index, unless optimal.
    feasible = ~jnp.any(blocking)
    grown = jnp.where(optimal, support, support.at[_first_argmin(violation)].set(True))
    return jnp.where(feasible, target, moved), jnp.where(feasible, grown, support_drop)


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
        blocking = support & (target < 0)
        grad = 2.0 * p @ target
        level = jnp.sum(target * grad)  # common gradient value on the support at its minimiser
        violation = jnp.where(support, jnp.inf, grad - level)
        optimal = violation[_first_argmin(violation)] >= -tol
        new_alpha, new_support = _primal_step(alpha, support, target, blocking, violation, optimal)
        done = ~jnp.any(blocking) & optimal
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
    jaxopt = _jaxopt()
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


# ---------------------------------------------------------------------- many targets sharing one Gram matrix
#
# FedPAC solves one QP per participant, and every participant's matrix is the Gram matrix of the
# differences to its own statistics. Written as one shared matrix G with a rank-two correction per target,
#     P_t = diag(v) + G - 1 r_t^T - r_t 1^T + c_t 1 1^T,
# a target needs no [m, m] matrix of its own: any entry, row or block of P_t is read from G, r_t and c_t.
# The solver below works on each target's support only (a k x k system, k = support size), so its cost
# grows with the supports, not with m^3 per target as a dense active-set iteration does.

_FIRST_BUCKET = 32  # smallest working-set capacity (see _gram_buckets)
_BLOCK_ADD = 16  # at most this many indices enter per block-pivoting iteration
_BLOCK_ITER = 20  # block-pivoting iterations (plus 2 m / _BLOCK_ADD) before the primal fallback
_BLOCK_STALL = 8  # ... or block-pivoting iterations in a row without progress
_LEVELS = (0.9, 0.7, 0.5, 0.3, 0.15, 0.05, 0.0)  # candidate thresholds, as fractions of the worst violation


def gram_qp_matvec(v: Array, gram: Array, r: Array, c: Array, a: Array) -> Array:
    """``P_t a_t`` for every row ``t`` of ``a``, with ``P_t = diag(v) + G - 1 r_t^T - r_t 1^T + c_t 1 1^T``.

    With ``G = X X^T``, ``r_t = X x_t`` and ``c_t = x_t^T x_t`` this is
    ``P_t = diag(v) + (X - 1 x_t^T)(X - 1 x_t^T)^T``, the Gram matrix of the rows of ``X`` seen from
    ``x_t``: FedPAC's combination matrices (with ``x_t`` the target's own statistics), for all targets
    from one ``[T, m] x [m, m]`` product.

    Args:
      v: ``[m]`` the diagonal term.
      gram: ``[m, m]`` the shared symmetric matrix ``G``.
      r: ``[T, m]`` one row ``r_t`` per target.
      c: ``[T]`` one scalar ``c_t`` per target.
      a: ``[T, m]`` one vector per target.

    Returns:
      ``[T, m]``: row ``t`` is ``P_t a_t``.

    >>> x = jnp.array([[0.0], [1.0], [3.0]])  # three points on a line, seen from the first one
    >>> g = x @ x.T
    >>> gram_qp_matvec(jnp.zeros(3), g, g[:1], g[0, :1], jnp.array([[0.0, 1.0, 0.0]])).tolist()
    [[0.0, 1.0, 3.0]]
    """
    total = jnp.sum(a, axis=-1, keepdims=True)
    ga = jnp.matmul(a, gram, precision=jax.lax.Precision.HIGHEST)  # (G a_t)_j, G symmetric
    return v * a + ga - r * total - jnp.sum(r * a, axis=-1, keepdims=True) + c[:, None] * total


def _gram_buckets(m: int) -> tuple[int, ...]:
    """Working-set capacities: 32, 64, 128, then steps of 1.5x (a k x k solve costs k^3), and m."""
    sizes, b = [], _FIRST_BUCKET
    while b < 0.9 * m:  # a capacity just below m would save little over m itself
        sizes.append(b)
        b = 2 * b if b < 128 else b + b // 2
    return tuple(sizes) + (m,)


def _most_violated(score: Array, tol: Array, count: int) -> Array:
    """Mask of at most ``count`` indices with ``score < -tol``, the most negative first: the loosest of a few
    thresholds (fractions of the worst score) that keeps at most ``count``, then the lowest indices."""
    worst = jnp.min(score)
    thresholds = jnp.minimum(worst * jnp.asarray(_LEVELS, score.dtype), -tol)
    below = score[None, :] < thresholds[:, None]
    fits = jnp.sum(below, axis=1) <= count  # counts grow along the thresholds: a prefix fits
    level = jnp.maximum(jnp.sum(fits) - 1, 0)
    chosen = below[level]
    return chosen & (jnp.cumsum(chosen) <= count)


def _gram_polish(b, v_eps, gram, allowed, r, c, tol, max_iter, state):
    """Active-set iterations for one target with at most ``b`` indices in the working set.

    Block pivoting first: drop every negative weight and add the most violated multipliers (16, or up
    to half the support while no weight turns negative), which usually ends in a few iterations. When it
    makes no progress (neither fewer KKT violations nor a better feasible iterate) for ``_BLOCK_STALL``
    iterations, or after ``_BLOCK_ITER + 2 m / _BLOCK_ADD`` iterations, the
    primal active-set method of :func:`_active_set` (one index in or out per iteration, monotone, finite)
    takes over from the best feasible iterate. Stops when optimal, when the working set would outgrow ``b``
    (the caller goes on with a larger ``b``), on a non-finite iterate, or after ``max_iter`` iterations.
    """
    m = v_eps.shape[0]
    dtype = gram.dtype
    slots = jnp.arange(b)
    eye = (slots[:, None] == slots[None, :]).astype(dtype)
    block_iter = _BLOCK_ITER + 2 * (m // _BLOCK_ADD)

    def body(st):
        alpha, support, primal, it, best_obj, best_bad, stall, adds, _, _, _ = st
        idx = jnp.nonzero(support, size=b, fill_value=0)[0]
        valid = slots < jnp.sum(support)
        rows = gram[idx]  # [b, m]: rows of G on the working set (= its columns, G is symmetric)
        r_s = r[idx]
        block = rows[:, idx] - r_s[:, None] - r_s[None, :] + c + eye * v_eps[idx][:, None]
        block = jnp.where(valid[:, None] & valid[None, :], block, eye)
        z = jnp.where(valid, jnp.linalg.solve(block, valid.astype(dtype)), 0.0)
        total = jnp.sum(z)
        z = z / jnp.where(total != 0, total, 1.0)
        target = jnp.zeros((m,), dtype).at[idx].add(z)  # padded slots add 0
        z_sum = jnp.sum(z)
        grad = 2.0 * (v_eps * target + jnp.matmul(z, rows, precision=jax.lax.Precision.HIGHEST)
                      - r * z_sum - jnp.dot(r_s, z) + c * z_sum)
        level = jnp.dot(target, grad)  # = 2 * objective
        score = jnp.where(support | ~allowed, jnp.inf, grad - level)
        finite = jnp.all(jnp.isfinite(target)) & jnp.isfinite(level)
        neg = support & (target < 0)
        any_neg = jnp.any(neg)
        optimal = jnp.min(score) >= -tol
        now_done = finite & ~any_neg & optimal

        # Block pivoting, with its progress monitor.
        n_bad = (jnp.sum(neg) + jnp.sum(score < -tol)).astype(jnp.int32)
        better = ~any_neg & (level < best_obj)
        progress = better | (n_bad < best_bad)
        stall = jnp.where(progress, 0, stall + 1).astype(jnp.int32)
        best_bad = jnp.minimum(best_bad, n_bad)
        blk_alpha = jnp.where(better, target, alpha)  # the best feasible iterate
        best_obj = jnp.where(better, level, best_obj)
        blk_support = (support & ~neg) | _most_violated(score, tol, adds)
        # While no weight turns negative the support is still growing: let up to half its size in at once.
        adds = jnp.where(any_neg, _BLOCK_ADD, jnp.maximum(_BLOCK_ADD, jnp.sum(blk_support) // 2))
        adds = adds.astype(jnp.int32)
        switch = ~primal & ~now_done & ((it + 1 >= block_iter) | (stall >= _BLOCK_STALL))
        blk_support = jnp.where(switch, blk_alpha > 0, blk_support)

        pr_alpha, pr_support = _primal_step(alpha, support, target, neg, score, optimal)

        new_alpha = jnp.where(primal, pr_alpha, jnp.where(now_done, target, blk_alpha))
        new_support = jnp.where(primal, pr_support, blk_support)
        overflow = ~now_done & (jnp.sum(new_support) > b)
        return (new_alpha, new_support, primal | switch, it + 1, best_obj, best_bad, stall, adds,
                now_done, overflow, ~finite)

    def cond(st):
        it, done, overflow, broken = st[3], st[8], st[9], st[10]
        return ~done & ~overflow & ~broken & (it < max_iter)

    out = jax.lax.while_loop(cond, body, state + (jnp.array(False), jnp.array(False)))
    return out[:9]


def _solve_gram_qps(v, gram, r, c, allowed):
    """(weights [T, m], optimal [T] bool, iterations [T]) of :func:`solve_gram_simplex_qps`."""
    m = v.shape[0]
    dtype = gram.dtype
    gram = 0.5 * (gram + gram.T)
    eye = jnp.eye(m, dtype=dtype)
    gram_diag = jnp.sum(gram * eye, axis=1)  # not jnp.diagonal: keep to ops whose batching is plain
    diag = v[None, :] + gram_diag[None, :] - 2.0 * r + c[:, None]  # [T, m]: the diagonals of the P_t
    diag = jnp.where(allowed[None, :], diag, 0.0)
    n = jnp.maximum(jnp.sum(allowed), 1)
    ridge = 1e-12 * jnp.maximum(jnp.sum(diag, axis=1) / n, 1e-30)  # as solve_simplex_qp: 1e-12 * mean diagonal
    # A PSD matrix's largest entry is on its diagonal: max|P_t| without forming P_t.
    tol = 1e-13 * jnp.maximum(jnp.max(diag, axis=1) + ridge, jnp.finfo(dtype).tiny)
    max_iter = 3 * m + 20 + _BLOCK_ITER + 2 * (m // _BLOCK_ADD)
    big = jnp.iinfo(jnp.int32).max

    def one(args):
        diag_t, r_t, c_t, ridge_t, tol_t = args
        start = _first_argmin(jnp.where(allowed, diag_t, jnp.inf))  # the best single candidate
        alpha = jnp.zeros((m,), dtype).at[start].set(1.0)
        # (alpha, support, primal, iterations, best objective, fewest violations, stall, adds, optimal)
        state = (alpha, alpha > 0, jnp.array(False), jnp.array(0, jnp.int32), jnp.array(jnp.inf, dtype),
                 jnp.array(big, jnp.int32), jnp.array(0, jnp.int32), jnp.array(_BLOCK_ADD, jnp.int32),
                 jnp.array(False))
        for b in _gram_buckets(m):
            pending = ~state[8] & (state[3] < max_iter) & (jnp.sum(state[1]) <= b)
            polish = functools.partial(_gram_polish, b, v + ridge_t, gram, allowed, r_t, c_t, tol_t, max_iter)
            state = jax.lax.cond(pending, polish, lambda s: s, state)
        return jnp.where(allowed, state[0], 0.0), state[8], state[3]

    return jax.lax.map(one, (diag, r, c, ridge, tol))


@jax.jit
def solve_gram_simplex_qps(v: Array, gram: Array, r: Array, c: Array, allowed: Array | None = None) -> Array:
    """Exact minimisers of ``a^T P_t a`` over the simplex for many targets ``t`` that share one Gram matrix.

    ``P_t = diag(v) + G - 1 r_t^T - r_t 1^T + c_t 1 1^T`` (see :func:`gram_qp_matvec`), each given the tiny
    ridge of :func:`solve_simplex_qp` (``1e-12`` times the mean of its diagonal), so both solve the same
    problem. A target's iterations only touch its working set: the rows of ``G`` on it and a ``k x k``
    linear solve (``k`` the working-set size, held in capacities 32, 64, 128, 192, ... up to ``m``).
    Block pivoting from the best single candidate finds the support in a few iterations; if it stalls,
    the primal active-set method (as in :func:`solve_simplex_qp`) finishes from the best feasible
    iterate. The optimality check tests every candidate's multiplier, so the result meets the KKT
    conditions to round-off (:func:`kkt_residual` of ``P_t``); it is deterministic.

    Targets are solved one after another (``lax.map``), so each only pays for its own iterations and
    capacities. Call inside ``jax.enable_x64(True)`` with float64 inputs for full accuracy.

    Args:
      v: ``[m]`` the diagonal term (``v >= 0``).
      gram: ``[m, m]`` the shared matrix ``G`` (symmetric; ``P_t`` must be PSD, as it is for a Gram matrix of
        differences).
      r: ``[T, m]`` one row ``r_t`` per target.
      c: ``[T]`` one scalar ``c_t`` per target.
      allowed: ``[m]`` bool (optional), the candidates; the others get weight 0 in every solution.

    Returns:
      ``[T, m]``: row ``t`` is on the simplex (over the allowed candidates) and minimises ``a^T P_t a``.

    Three points on a line, each target seeing the others from its own position (``r_t = G[t]``,
    ``c_t = G[t, t]``):

    >>> with jax.enable_x64(True):
    ...     x = jnp.array([[0.0], [1.0], [3.0]], jnp.float64)
    ...     g = x @ x.T
    ...     a = solve_gram_simplex_qps(jnp.full(3, 0.5, jnp.float64), g, g, jnp.sum(x * x, axis=1))
    ...     a.round(4).tolist()
    [[0.75, 0.25, 0.0], [0.4194, 0.3548, 0.2258], [0.0, 0.1, 0.9]]
    """
    m = v.shape[0]
    if allowed is None:
        allowed = jnp.ones((m,), bool)
    if m == 1:
        return jnp.ones((r.shape[0], 1), gram.dtype)
    return _solve_gram_qps(v, gram, r, c, allowed)[0]
