"""FedPAC's classifier combination weights (Xu, Tong, Huang, ICLR 2023, Sec. 3.3 "classifier
collaboration" and Sec. 4.1, the optimal combination; official code: https://github.com/JianXu95/FedPAC, ``get_head_agg_weight``).

For every target participant ``i`` the server solves::

    minimise  a^T P_i a   subject to  sum(a) = 1,  a >= 0,
    P_i = diag(v) + D_i,   D_i[j, k] = <H_i - H_j, H_i - H_k>   (Frobenius inner product),

from the participants' statistics ``v_j`` (feature variance over sample count) and ``H_j`` (class
prior times class mean, :mod:`pflax.algorithms.fedpac.statistics`), with the generic exact simplex QP
solver :func:`pflax.core.qp.solve_simplex_qp` in float64. The result meets the KKT conditions to
round-off, far below the ~1e-4 of the OSQP solve behind the official cvxpy code, so no weight near
the 1e-3 threshold flips by accident.

On the CPU, above ``GRAM_SOLVER_ABOVE`` (64) participants, the ``[m, m, m]`` stack of ``P_i`` is never
built: every ``P_i`` is read from the one Gram matrix of the ``H_j`` and
:func:`pflax.core.qp.solve_gram_simplex_qps` solves all targets (:func:`gram_combination_alpha`),
with the same exactness (``combination_weights(..., solver=...)`` picks a path explicitly).

After solving, weights <= 1e-3 are zeroed and the rest renormalised: the official code zeroes in
``get_head_agg_weight`` and divides by the sum in ``agg_classifier_weighted_p``.

``mode="official"`` reproduces the official numerical path instead: ``P`` in float32, the "all
eigenvalues >= 0" test, the rebuild from eigenpairs with eigenvalue >= 0.01, and the fall-back to
the client's own head (``a = e_i``) when that rebuild still fails or would be empty (the official code
crashes there). The problem it then solves is exact, so only the pre-processing differs.

>>> import jax.numpy as jnp
>>> w = combination_weights(jnp.array([0.1, 0.1, 0.1]), jnp.ones((3, 2, 2)))
>>> w.shape, bool(jnp.allclose(w.sum(1), 1.0))
((3, 3), True)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...core.aggregate import EXACT
from ...core.qp import solve_gram_simplex_qps, solve_simplex_qp

Array = jax.Array

__all__ = ["WEIGHT_THRESHOLD", "EIGEN_FLOOR", "GRAM_SOLVER_ABOVE", "combination_matrices", "combination_weights",
           "gram_combination_alpha", "threshold_and_renormalize"]

WEIGHT_THRESHOLD = 1e-3
EIGEN_FLOOR = 0.01
GRAM_SOLVER_ABOVE = 64  # solver="auto" on the CPU: the dense per-target solver up to this many slots, Gram above
SOLVERS = ("auto", "dense", "gram")


def combination_matrices(v: Array, h: Array) -> Array:
    """``P_i`` for every target ``i``.

    Args:
      v: ``[m]`` the participants' variance terms ``v_j``.
      h: ``[m, K, d]`` the participants' ``H_j`` (any float dtype).

    Returns:
      ``[m, m, m]``: ``P[i] = diag(v) + D_i``, symmetrised.

    >>> import jax.numpy as jnp
    >>> combination_matrices(jnp.array([1.0, 2.0]), jnp.zeros((2, 1, 1)))[0].tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    flat = h.reshape(h.shape[0], -1)
    # Full precision: the "official" mode builds P in float32, which a GPU would otherwise do in TF32.
    gram = jnp.matmul(flat, flat.T, precision=EXACT)  # B[j, k] = <H_j, H_k>
    diag = jnp.sum(flat * flat, axis=1)  # ||H_j||^2 (not jnp.diag: its batching rule ignores the local x64 scope)
    # D_i[j, k] = B_ii - B_ik - B_ji + B_jk
    d = diag[:, None, None] - gram[:, None, :] - gram[:, :, None] + gram[None, :, :]
    p = d + v[None, :, None] * jnp.eye(v.shape[0], dtype=v.dtype)[None]
    return 0.5 * (p + jnp.swapaxes(p, 1, 2))


def threshold_and_renormalize(alpha: Array, threshold: float = WEIGHT_THRESHOLD) -> Array:
    """Zero weights <= ``threshold`` and renormalise (the official post-processing).

    Args:
      alpha: ``[m]`` weights on the simplex.
      threshold: weights at or below it are dropped.

    Returns:
      ``[m]`` on the simplex; ``alpha`` itself when every weight is at or below the threshold.

    >>> import jax.numpy as jnp
    >>> [round(a, 3) for a in threshold_and_renormalize(jnp.array([0.6, 0.0005, 0.3995])).tolist()]
    [0.6, 0.0, 0.4]
    """
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
    solver: str = "auto",
) -> Array:
    """FedPAC combination weights for every participant: ``[m, m]``, row ``i`` sums to 1.

    Args:
      v: ``[m]`` the participants' ``v_j``.
      h: ``[m, K, d]`` the participants' ``H_j``.
      participating: ``[m]`` bool (optional), masks out padded or empty slots: they are never
        candidates, and their own row is ``e_i``.
      mode: ``"exact"`` (float64 throughout) or ``"official"`` (the official float32 PSD test and
        eigen-flooring before the exact solve).
      threshold: the post-solve cut of :func:`threshold_and_renormalize`.
      solver: how ``mode="exact"`` solves its ``m`` QPs. ``"dense"`` builds every ``P_i`` (``[m, m, m]``)
        and runs :func:`pflax.core.qp.solve_simplex_qp` per target; ``"gram"`` never builds them and
        solves all targets from one Gram matrix (:func:`gram_combination_alpha`), which scales to large
        ``m`` (1000 participants: about 2 s on a 2-core CPU). ``"auto"`` (default) is ``"gram"`` on the
        CPU above ``GRAM_SOLVER_ABOVE`` (64) slots and ``"dense"`` otherwise: on accelerators the dense
        path's targets run vmapped, in parallel, while the Gram path solves them one after another.
        Both give the exact solution (KKT residual at round-off). ``mode="official"`` always runs the
        dense path.

    Returns:
      ``[m, m]`` float32. Every row sums to 1: a row whose solve is not finite (NaN/Inf statistics)
      falls back to ``e_i`` (the client keeps its own head), as the official code does when its PSD
      check fails.

    Called on concrete arrays it runs one program compiled (and cached) per shape inside the local
    float64 scope. Called under a trace (a jitted round, ``vmap``, ``grad``) it is inlined instead: a
    jitted inner function would be traced once and could then be re-transformed (say, batched as
    part of a ``lax.scan`` body that is vmapped later) outside that scope, mixing dtypes.

    >>> import jax.numpy as jnp
    >>> w = combination_weights(jnp.array([1.0, 1.0]), jnp.zeros((2, 1, 1)))
    >>> w.round(3).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    if mode not in ("exact", "official"):
        raise ValueError(f"mode must be 'exact' or 'official', got {mode!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if mode == "official" and solver == "gram":
        raise ValueError("mode='official' rebuilds every P_i from its eigenpairs: it has no Gram solver "
                         "(use solver='auto')")
    if v.ndim != 1 or h.ndim != 3 or h.shape[0] != v.shape[0]:
        raise ValueError(f"combination_weights needs v [m] and h [m, K, d]; got v {tuple(v.shape)}, h {tuple(h.shape)}")
    if participating is not None and tuple(participating.shape) != tuple(v.shape):
        raise ValueError(f"participating must have shape {tuple(v.shape)}, got {tuple(participating.shape)}")
    m = v.shape[0]
    if participating is None:
        participating = jnp.ones((m,), bool)
    large = m > GRAM_SOLVER_ABOVE and jax.default_backend() == "cpu"
    gram = mode == "exact" and (solver == "gram" or (solver == "auto" and large))
    if any(isinstance(a, jax.core.Tracer) for a in (v, h, participating)):
        # Inside the caller's trace (a jitted round, vmap, grad): inline, in a local float64 scope.
        if gram:
            return _gram_weights(v, h, participating, threshold)
        return _weights(v, h, participating, mode, threshold)
    # An eager call: compile the whole computation as one program per shape, entered inside the
    # float64 scope so no later transformation can re-trace it outside that scope. Op by op it would
    # compile ~80 small float64 programs (measured for m = 6: 4.7 s on first call, against 1.5 s).
    with jax.enable_x64(True):
        if gram:
            return _gram_weights_compiled(v, h, participating, threshold)
        return _weights_compiled(v, h, participating, mode, threshold)


def gram_combination_alpha(v: Array, h: Array, participating: Array | None = None) -> Array:
    """The exact solutions of every target's QP (before the threshold), from one Gram matrix.

    ``P_i[j, k] = v_j [j = k] + B_ii - B_ij - B_ik + B_jk`` with ``B = H H^T`` the Gram matrix of the flattened
    ``H_j``, so every ``P_i`` is :func:`pflax.core.qp.gram_qp_matvec`'s structure with ``G = B``,
    ``r_i = B[i]`` and ``c_i = B_ii``; :func:`pflax.core.qp.solve_gram_simplex_qps` solves all targets
    without building the ``[m, m, m]`` stack. The ``H_j`` are centred on the participants' mean first:
    ``P_i`` depends on differences only, and centring keeps ``B``'s entries near the size of ``P_i``'s.
    Non-participants are never candidates (weight 0 in every row) and their statistics are not read.

    Float64 throughout when called inside ``jax.enable_x64(True)`` (as :func:`combination_weights` does);
    outside that scope it computes in the inputs' precision.

    Args:
      v: ``[m]`` the participants' ``v_j``.
      h: ``[m, K, d]`` the participants' ``H_j``.
      participating: ``[m]`` bool (optional), the candidates.

    Returns:
      ``[m, m]``: row ``i`` minimises ``a^T P_i a`` over the simplex (over the participants).

    >>> import jax, jax.numpy as jnp
    >>> with jax.enable_x64(True):
    ...     a = gram_combination_alpha(jnp.array([1.0, 1.0], jnp.float64), jnp.zeros((2, 1, 1), jnp.float64))
    >>> a.round(3).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    m = v.shape[0]
    if participating is None:
        participating = jnp.ones((m,), bool)
    flat = jnp.where(participating[:, None], h.reshape(m, -1), 0.0)  # a non-participant's NaNs never enter
    v = jnp.where(participating, v, 0.0)
    count = jnp.maximum(jnp.sum(participating), 1)
    flat = jnp.where(participating[:, None], flat - jnp.sum(flat, axis=0) / count, 0.0)
    gram = jnp.matmul(flat, flat.T, precision=EXACT)
    norms = jnp.sum(flat * flat, axis=1)  # B_ii
    return solve_gram_simplex_qps(v, gram, gram, norms, participating)


def _finish_row(alpha: Array, participating: Array, own: Array, usable: Array, threshold: float) -> Array:
    """One target's solved row made into its weights: non-candidates zeroed, renormalised, thresholded.
    Non-finite statistics (a diverged client) can make every weight NaN or 0: such a row, or one that is
    not ``usable``, falls back to ``own`` (the target keeps its own head rather than mixing garbage or an
    all-zero head)."""
    alpha = jnp.where(participating, alpha, 0.0)
    alpha = threshold_and_renormalize(alpha / jnp.maximum(alpha.sum(), 1e-300), threshold)
    valid = jnp.all(jnp.isfinite(alpha)) & (jnp.abs(alpha.sum() - 1.0) < 1e-6)
    return jnp.where(usable & valid, alpha, own)


def _gram_weights(v: Array, h: Array, participating: Array, threshold: float) -> Array:
    """``combination_weights`` with ``solver="gram"``: the rows finished as :func:`_weights` finishes them."""
    m = v.shape[0]
    with jax.enable_x64(True):
        alpha = gram_combination_alpha(v.astype(jnp.float64), h.astype(jnp.float64), participating)
        eye = jnp.eye(m, dtype=jnp.float64)
        finish = jax.vmap(lambda row, own, usable: _finish_row(row, participating, own, usable, threshold))
        return finish(alpha, eye, participating).astype(jnp.float32)


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
            return _finish_row(solve_simplex_qp(p), participating, eye[i], ok & participating[i], threshold)

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
_gram_weights_compiled = jax.jit(_gram_weights, static_argnums=(3,))
