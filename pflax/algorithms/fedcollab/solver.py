"""FedCollab's collaboration objective and its greedy solver with random restarts (Bao et al., ICML 2023,
Section 4; official ``src/collab/solver.py`` in https://github.com/baowenxuan/FedCollab).

A partition of the clients is an assignment vector ``p`` (``p[i]`` = coalition label of client i).
Client i's collaboration weights are ``alpha_ij = beta_j [p_j = p_i] / sum_{k: p_k = p_i} beta_k`` and
its bound proxy is ``e_i = C / sqrt(m) * sqrt(sum_j alpha_ij^2 / beta_j) + sum_j alpha_ij max(D_ij, 0)``.
The objective is the unweighted mean of ``e_i`` (the code's choice; the paper's sum has the same argmin).
"""
from __future__ import annotations

import numpy as np

from ...data.sources import DataError

__all__ = ["objective", "objectives", "solve", "canonical", "coalitions_of", "all_partitions", "ablate"]


def _check_inputs(dist: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dist, sizes = np.asarray(dist, np.float64), np.asarray(sizes, np.float64)
    n = sizes.shape[0]
    if dist.shape != (n, n):
        raise ValueError(f"distance matrix must be [{n}, {n}] to match {n} client sizes, got {dist.shape}")
    if np.any(sizes <= 0):
        # beta_j = 0 makes alpha_ij^2 / beta_j = 0/0: such clients cannot be placed.
        raise DataError(f"clients {np.flatnonzero(sizes <= 0).tolist()} have no training samples; "
                        "exclude empty clients before solving")
    if not np.all(np.isfinite(dist)):
        raise ValueError("distance matrix contains NaN or Inf")
    return dist, sizes


def objectives(assignments: np.ndarray, dist: np.ndarray, sizes: np.ndarray, c: float,
               beta: np.ndarray | None = None) -> np.ndarray:
    """Objective of every row of ``assignments [K, N]`` at once.

    ``beta`` defaults to ``sizes / sum(sizes)``; passing it separately allows the "ignore quantities"
    ablation (uniform beta, same total m).

    Args:
      assignments: ``[K, N]`` coalition labels (or one ``[N]``).
      dist: ``[N, N]`` estimated distances (negative entries count as 0).
      sizes: ``[N]`` sample counts (all > 0).
      c: the bound's constant ``C``.
      beta: ``[N]`` optional client weights.
    Returns:
      ``[K]`` objectives.

    >>> objectives(np.array([[0, 1], [0, 0]]), np.zeros((2, 2)), [1, 1], c=1.0).round(3).tolist()  # apart, together
    [1.0, 0.707]
    """
    dist, sizes = _check_inputs(dist, sizes)
    m = sizes.sum()
    beta = sizes / m if beta is None else np.asarray(beta, np.float64)
    d = np.maximum(dist, 0.0)  # negative estimates are noise; clipped in the solver only
    np.fill_diagonal(d, 0.0)
    p = np.atleast_2d(assignments)
    same = p[:, :, None] == p[:, None, :]
    weights = same * beta[None, None, :]
    alpha = weights / weights.sum(-1, keepdims=True)
    generalisation = c / np.sqrt(m) * np.sqrt((alpha**2 / beta).sum(-1))
    shift = (alpha * d).sum(-1)
    return (generalisation + shift).mean(-1)


def objective(assignment, dist, sizes, c: float, beta=None) -> float:
    """The objective of one assignment (:func:`objectives`).

    Args:
      assignment: ``[N]`` coalition labels.
      dist, sizes, c, beta: as :func:`objectives`.
    Returns:
      a float.

    >>> round(objective([0, 0], np.array([[0.0, 0.5], [0.5, 0.0]]), [1, 1], c=1.0), 3)  # 1/sqrt(2) + 0.5 * 0.5
    0.957
    """
    return float(objectives(np.asarray(assignment)[None], dist, sizes, c, beta)[0])


def canonical(assignment) -> np.ndarray:
    """Relabel coalitions by their smallest member's index (labels are otherwise arbitrary).

    Args:
      assignment: ``[N]`` coalition labels.
    Returns:
      ``[N]`` int64 labels.

    >>> canonical([5, 5, 2, 7, 2]).tolist()
    [0, 0, 2, 3, 2]
    """
    p = np.asarray(assignment)
    first = {}
    for i, label in enumerate(p):
        first.setdefault(label, i)
    return np.array([first[label] for label in p], np.int64)


def coalitions_of(assignment) -> list[list[int]]:
    """Coalitions as sorted member lists, ordered by smallest member.

    Args:
      assignment: ``[N]`` coalition labels.
    Returns:
      a list of member lists.

    >>> coalitions_of([1, 0, 1])
    [[0, 2], [1]]
    """
    p = canonical(assignment)
    return [np.flatnonzero(p == label).tolist() for label in sorted(set(p.tolist()))]


def _greedy(order_rng: np.random.Generator, dist, sizes, c, beta, max_sweeps: int) -> np.ndarray:
    """One run from local training: move one client at a time to the label that strictly lowers the
    objective most (smallest label on ties, current label kept unless strictly improved)."""
    n = len(sizes)
    p = np.arange(n)
    for _ in range(max_sweeps):
        changed = False
        for k in order_rng.permutation(n):
            candidates = np.repeat(p[None], n, 0)
            candidates[:, k] = np.arange(n)  # every label, empty ones included (a new singleton)
            values = objectives(candidates, dist, sizes, c, beta)
            best_label, best_value = p[k], values[p[k]]
            for label in range(n):  # scan in order: strict improvements only, so ties keep the smaller label
                if values[label] < best_value:
                    best_label, best_value = label, values[label]
            changed |= best_label != p[k]
            p[k] = best_label
        if not changed:
            break
    return p


def solve(dist, sizes, c: float, seed: int = 0, restarts: int = 100, max_sweeps: int = 100, beta=None) -> dict:
    """Greedy search with ``restarts`` runs that differ only in their random visit orders (one seeded
    generator for all runs). Keeps the lowest objective, the earliest run on ties.

    Args:
      dist: ``[N, N]`` estimated distances.
      sizes: ``[N]`` sample counts.
      c: the bound's constant ``C``.
      seed: the visit orders' seed.
      restarts: greedy runs (>= 1).
      max_sweeps: passes over the clients per run.
      beta: optional client weights (:func:`ablate`).
    Returns:
      ``{"assignment" (canonical), "coalitions", "objective"}``. Deterministic for a seed.

    >>> two_groups = np.kron(1.0 - np.eye(2), np.ones((2, 2)))  # distance 1 across groups, 0 inside
    >>> solve(two_groups, [10, 10, 10, 10], c=1.0, restarts=2)["coalitions"]
    [[0, 1], [2, 3]]
    """
    dist, sizes = _check_inputs(dist, sizes)
    if restarts < 1:
        raise ValueError("restarts must be >= 1")
    rng = np.random.default_rng(seed)
    best_p, best_value = None, np.inf
    for _ in range(restarts):
        p = _greedy(rng, dist, sizes, c, beta, max_sweeps)
        value = objective(p, dist, sizes, c, beta)
        if value < best_value:
            best_p, best_value = p, value
    p = canonical(best_p)
    return {"assignment": p, "coalitions": coalitions_of(p), "objective": float(best_value)}


def all_partitions(n: int):
    """Every set partition of n items as a restricted-growth assignment (for exhaustive checks).

    Args:
      n: the item count.
    Returns:
      a generator of ``[n]`` label arrays (the Bell number of them).

    >>> [p.tolist() for p in all_partitions(3)]
    [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    """
    def grow(prefix, top):
        if len(prefix) == n:
            yield np.array(prefix)
            return
        for label in range(top + 2):
            yield from grow(prefix + [label], max(top, label))

    yield from grow([0], 0) if n else iter(())


def ablate(dist, sizes, mode: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Inputs for the paper's Table 3 ablations: ``(dist, beta)``.

    * ``"ignore_quantities"``: beta replaced by the uniform 1/N (m unchanged).
    * ``"ignore_distances"``: every off-diagonal D_hat replaced by the off-diagonal average.

    Args:
      dist: ``[N, N]`` estimated distances.
      sizes: ``[N]`` sample counts.
      mode: ``"ignore_quantities"`` or ``"ignore_distances"``.
    Returns:
      ``(dist, beta)`` for :func:`solve` (``beta`` None: from the sizes).

    >>> ablate(np.array([[0.0, 0.2], [0.2, 0.0]]), [1, 3], "ignore_quantities")[1].tolist()
    [0.5, 0.5]
    """
    dist, sizes = _check_inputs(dist, sizes)
    n = len(sizes)
    if mode == "ignore_quantities":
        return dist, np.full(n, 1.0 / n)
    if mode == "ignore_distances":
        off = ~np.eye(n, dtype=bool)
        flat = np.where(off, dist[off].mean(), 0.0)
        return flat, None
    raise ValueError(f"unknown ablation {mode!r}; use 'ignore_quantities' or 'ignore_distances'")
