"""Seeded, pure partitioners: each returns a list of index arrays, one per client.

* :func:`fedpac_shards`: FedPAC's "s% uniform + dominant classes" partition (spec A.7), with the
  official wrap-around cursor (clients can share samples) or a variant that never reuses a sample.
* :func:`fedpac_shards_sized`: the same with one size per client (FedPAC Tables 6 and 9).
* :func:`dirichlet`: per-class Dirichlet(beta) proportions over clients.
"""
from __future__ import annotations

import numpy as np

from .sources import DataError

__all__ = ["fedpac_shards", "fedpac_shards_sized", "dominant_groups", "dirichlet", "class_counts"]

_TEN_CLASS_GROUPS = [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]]


def check_labels(labels, num_classes: int | None) -> tuple[np.ndarray, int]:
    """Validate a 1-D integer label array; returns it as numpy and the number of classes
    (``num_classes``, or ``max + 1`` when it is None). Every partitioner starts here."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise DataError(f"labels must be 1-D, got shape {labels.shape}")
    if labels.size == 0:
        raise DataError("labels is empty")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"labels must be integers, got {labels.dtype}")
    k = int(num_classes if num_classes is not None else labels.max() + 1)
    if k < 1:
        raise DataError(f"num_classes must be positive, got {k}")
    if labels.min() < 0 or labels.max() >= k:
        raise DataError(f"labels must lie in [0, {k}), found [{labels.min()}, {labels.max()}]")
    return labels, k


def dominant_groups(num_classes: int) -> list[list[int]]:
    """FedPAC's dominant-class sets: 5 overlapping triples for 10 classes; digits / upper / lower for
    EMNIST-byclass (62). Client ``i`` belongs to group ``i mod len(groups)``."""
    if num_classes == 10:
        return [list(g) for g in _TEN_CLASS_GROUPS]
    if num_classes == 62:
        return [list(range(0, 10)), list(range(10, 36)), list(range(36, 62))]
    raise ValueError(f"FedPAC defines dominant groups for 10 or 62 classes, not {num_classes}; pass groups=")


def _split_evenly(total: int, parts: int) -> list[int]:
    """``total`` over ``parts``: ``total // parts`` each, the remainder to the last (official rule)."""
    base = total // parts
    return [base] * (parts - 1) + [total - base * (parts - 1)]


def fedpac_shards(
    labels: np.ndarray,
    num_clients: int,
    samples_per_client: int,
    s: float = 0.2,
    num_classes: int | None = None,
    groups: list[list[int]] | None = None,
    start_cursor: int = 0,
    wrap: bool = True,
) -> list[np.ndarray]:
    """FedPAC's partition: ``floor(n*s)`` samples spread uniformly over all classes, the rest over the
    client's dominant classes (group ``i mod G``).

    Deterministic, as the official ``mnist_noniid_s``: indices sorted by label (numpy's default sort),
    one cursor per class starting at ``start_cursor`` (0 for FMNIST/EMNIST; 2000 for the CIFAR train
    set and 500 for its test set), consecutive slices per take. With ``wrap=True`` a take that would
    run past the end of its class block restarts at the block's beginning, so later clients re-use
    samples (official behaviour). With ``wrap=False`` that raises instead, so no sample is ever used
    twice. Call it on the test labels with the same arguments to get the matching test split.
    """
    if num_clients < 1 or samples_per_client < 1:
        raise ValueError("num_clients and samples_per_client must be positive")
    return fedpac_shards_sized(labels, [samples_per_client] * num_clients, s, num_classes, groups, start_cursor, wrap)


def fedpac_shards_sized(
    labels: np.ndarray,
    sizes,
    s: float = 0.2,
    num_classes: int | None = None,
    groups: list[list[int]] | None = None,
    start_cursor: int = 0,
    wrap: bool = True,
    order_seed: int | None = None,
    allow_empty: bool = False,
) -> list[np.ndarray]:
    """:func:`fedpac_shards` with one size per client (``sizes[i]`` samples for client ``i``).

    Client ``i`` takes ``floor(sizes[i]*s)`` samples spread uniformly over all classes and the rest over
    its dominant classes (group ``i mod G``), from the same per-class cursors in client order, so
    ``fedpac_shards_sized(y, [n] * m, ...) == fedpac_shards(y, m, n, ...)``. ``order_seed=None`` keeps
    the official within-class order (numpy's default argsort); an integer replaces it by a seeded
    permutation inside every class block, so repetitions can draw different samples. A size of 0 is a
    :class:`DataError` unless ``allow_empty=True``.
    """
    labels, k = check_labels(labels, num_classes)
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"s (the uniform share) must be in [0, 1], got {s}")
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
        raise DataError(f"sizes must be a non-empty 1-D sequence of integers, got {sizes!r}")
    if np.any(sizes < 0) or (not allow_empty and np.any(sizes == 0)):
        bad = np.flatnonzero(sizes <= 0 if not allow_empty else sizes < 0).tolist()
        raise DataError(f"client sizes must be positive (pass allow_empty=True for empty clients); clients {bad} have "
                        f"{sizes[bad].tolist()}")
    groups = groups if groups is not None else dominant_groups(k)
    if not groups or any(len(g) == 0 for g in groups) or any(not 0 <= c < k for g in groups for c in g):
        raise DataError(f"groups must be non-empty lists of classes in [0, {k}), got {groups}")
    if start_cursor < 0:
        raise DataError(f"start_cursor must be >= 0, got {start_cursor}")
    counts = np.bincount(labels, minlength=k)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if order_seed is None:
        order = np.argsort(labels)  # official: default (quicksort) argsort
    else:
        rng = np.random.default_rng(order_seed)
        order = np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in range(k)])
    cursor = np.full(k, start_cursor, dtype=np.int64)

    clients = []
    for i, size in enumerate(sizes.tolist()):
        n_iid = int(np.floor(size * s))
        takes: list[tuple[int, int]] = list(zip(range(k), _split_evenly(n_iid, k))) if n_iid else []
        dominant = groups[i % len(groups)]
        rest = size - n_iid
        if rest:
            takes += list(zip(dominant, _split_evenly(rest, len(dominant))))
        chosen = []
        for cls, count in takes:
            if count == 0:
                continue
            if count > counts[cls]:
                raise DataError(f"client {i} needs {count} samples of class {cls}, which has only {counts[cls]}")
            if cursor[cls] + count > counts[cls]:
                if not wrap:
                    raise DataError(
                        f"class {cls} is exhausted at client {i} ({counts[cls]} samples); "
                        "use wrap=True (official behaviour) or fewer/smaller clients"
                    )
                cursor[cls] = 0
            chosen.append(order[starts[cls] + cursor[cls] : starts[cls] + cursor[cls] + count])
            cursor[cls] += count
        clients.append(np.concatenate(chosen) if chosen else np.zeros((0,), np.int64))
    return clients


def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    beta: float,
    seed: int = 0,
    min_size: int = 0,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Split every class over clients with proportions drawn from Dirichlet(beta * 1).

    Each sample goes to exactly one client. Redrawn (up to ``max_tries``) until every client holds at
    least ``min_size`` samples.
    """
    labels, _ = check_labels(labels, None)
    if beta <= 0:
        raise ValueError(f"Dirichlet beta must be > 0, got {beta}")
    if num_clients < 1:
        raise ValueError("num_clients must be positive")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(max_tries):
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for cls in classes:
            idx = rng.permutation(np.flatnonzero(labels == cls))
            shares = rng.dirichlet(np.full(num_clients, beta))
            cuts = (np.cumsum(shares)[:-1] * idx.size).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                buckets[client].append(part)
        clients = [np.sort(np.concatenate(b)) for b in buckets]
        if min(c.size for c in clients) >= min_size:
            return clients
    raise DataError(f"could not draw a Dirichlet({beta}) partition with >= {min_size} samples per client")


def class_counts(labels: np.ndarray, clients: list[np.ndarray], num_classes: int) -> np.ndarray:
    """``[num_clients, num_classes]`` label histogram of a partition."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[c], minlength=num_classes) for c in clients])
