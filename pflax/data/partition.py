"""Seeded, pure partitioners: each returns a list of index arrays, one per client.

* :func:`fedpac_shards`: the "s% uniform + dominant classes" label skew of FedPAC (Xu et al., ICLR
  2023, §6; official ``mnist_noniid_s``/``cifar_noniid_s`` in ``data_loader.py`` of
  https://github.com/JianXu95/FedPAC), with the official wrap-around cursor (clients can share
  samples) or a variant that never reuses a sample.
* :func:`fedpac_shards_sized`: the same with one size per client; :func:`quantity_skew` builds
  "large" and "small" clients on it.
* :func:`dirichlet`: per-class Dirichlet(beta) proportions over clients; :func:`dirichlet_matched`
  draws the proportions once and applies them to the train and the test labels.
* :func:`pathological` (:func:`pathological_class_sets`): every client sees only a few classes,
  balanced inside the client.

Every random draw comes from ``np.random.default_rng(seed)``, so the same arguments always give the
same partition. Invalid inputs raise :class:`~pflax.data.DataError` (a ``ValueError``) naming the
problem. The settings of FedPAC's tables built on these are in :mod:`pflax.suites.fedpac`.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .sources import DataError

__all__ = ["fedpac_shards", "fedpac_shards_sized", "dominant_groups", "dirichlet", "class_counts", "dirichlet_matched",
           "pathological", "pathological_class_sets", "quantity_skew"]

_TEN_CLASS_GROUPS = [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]]


def check_labels(labels, num_classes: int | None) -> tuple[np.ndarray, int]:
    """Validate a 1-D integer label array; every partitioner starts here.

    Args:
      labels: the labels (array-like).
      num_classes: the number of classes, or None for ``max + 1``.

    Returns:
      ``(labels as numpy, number of classes)``. Raises :class:`DataError` for a non-1-D, empty,
      non-integer or out-of-range array.

    >>> labels, k = check_labels([2, 0, 1], None)
    >>> labels.tolist(), k
    ([2, 0, 1], 3)
    """
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


def check_count(value, name: str, minimum: int = 1) -> int:
    """``value`` as a Python int after checking it is an integer (not a bool) ``>= minimum``; a
    :class:`DataError` naming ``name`` otherwise.

    Args:
      value: the count to check.
      name: the argument's name, for the message.
      minimum: the smallest allowed value.

    Returns:
      ``int(value)``.

    >>> check_count(3, "num_clients")
    3
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise DataError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def resolve_groups(num_classes: int, groups) -> list[list[int]]:
    """``groups`` as lists of classes, or :func:`dominant_groups` of ``num_classes`` when ``groups`` is
    None (a :class:`DataError` when FedPAC defines none for that many classes).

    Args:
      num_classes: the number of classes.
      groups: dominant-class groups (iterables of classes), or None.

    Returns:
      A list of lists of classes.

    >>> resolve_groups(10, [(0, 1)]), len(resolve_groups(62, None))
    ([[0, 1]], 3)
    """
    if groups is not None:
        return [list(g) for g in groups]
    try:
        return dominant_groups(num_classes)
    except ValueError as err:
        raise DataError(str(err)) from err


def dominant_groups(num_classes: int) -> list[list[int]]:
    """FedPAC's dominant-class sets: 5 overlapping triples for 10 classes; digits / upper / lower for
    EMNIST-byclass (62). Client ``i`` belongs to group ``i mod len(groups)``.

    Args:
      num_classes: 10 or 62 (anything else raises ``ValueError``).

    Returns:
      A list of lists of classes, one per group.

    >>> dominant_groups(10)[:2], [len(g) for g in dominant_groups(62)]
    ([[0, 1, 2], [2, 3, 4]], [10, 26, 26])
    """
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

    Args:
      labels: int labels ``[n]``.
      num_clients, samples_per_client: ``m`` clients of ``n`` samples each.
      s: the uniform share (FedPAC's default 0.2).
      num_classes: default ``max label + 1``.
      groups: dominant-class groups (default :func:`dominant_groups`).
      start_cursor, wrap: see above.

    Returns:
      One int index array into ``labels`` per client. A take ``floor(t/K)`` per class, remainder to
      the last class (official rule).

    >>> y = np.arange(200) % 10
    >>> clients = fedpac_shards(y, num_clients=5, samples_per_client=10)
    >>> len(clients), np.bincount(y[clients[0]], minlength=10).tolist()
    (5, [2, 2, 4, 0, 0, 0, 0, 0, 0, 2])
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

    Args:
      labels: int labels ``[n]``.
      sizes: samples per client (non-empty int sequence).
      s, num_classes, groups, start_cursor, wrap: as in :func:`fedpac_shards`.
      order_seed: None (official order) or a seed for the within-class order.
      allow_empty: whether a size of 0 is allowed.

    Returns:
      One int index array into ``labels`` per client.

    >>> [c.size for c in fedpac_shards_sized(np.arange(200) % 10, [5, 20, 10])]
    [5, 20, 10]
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

    Args:
      labels: int labels ``[n]``.
      num_clients: number of clients.
      beta: the Dirichlet concentration (> 0; small = skewed).
      seed: seeds the shuffles and proportions.
      min_size, max_tries: the redraw rule above (:class:`DataError` when it never holds).

    Returns:
      One sorted int index array per client; together they cover every sample once.

    >>> clients = dirichlet(np.arange(100) % 10, num_clients=3, beta=0.5, seed=0)
    >>> len(clients), sum(c.size for c in clients)
    (3, 100)
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
    """``[num_clients, num_classes]`` label histogram of a partition.

    Args:
      labels: int labels ``[n]``.
      clients: one index array into ``labels`` per client.
      num_classes: the histogram's width.

    Returns:
      An int array ``[len(clients), num_classes]``.

    >>> class_counts(np.array([0, 1, 1, 2]), [np.array([0, 1]), np.array([2, 3])], 3).tolist()
    [[1, 1, 0], [0, 1, 1]]
    """
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[c], minlength=num_classes) for c in clients])


def pathological_class_sets(
    num_clients: int,
    classes_per_group: Sequence[int],
    mode: str = "random",
    num_classes: int = 10,
    seed: int = 0,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Each client's class set for :func:`pathological` (sorted int arrays). Client ``i`` is in group
    ``g = i mod len(classes_per_group)`` and has ``classes_per_group[g]`` classes.

    ``"random"``: every client draws its own set uniformly without replacement, so sets vary even inside
    a group. ``"clustered"``: one uniform draw per group, redrawn until the groups' sets are pairwise
    different, and every member of the group uses it. (Our reading of FedPAC App. C.7, whose Table 7
    settings are :func:`pflax.suites.fedpac.pathological_class_sets`.)

    Args:
      num_clients: number of clients.
      classes_per_group: classes per client, one entry per group.
      mode: ``"random"`` or ``"clustered"``.
      num_classes: classes to draw from.
      seed: seeds the draws.
      max_tries: redraws allowed in ``"clustered"`` mode (:class:`DataError` after).

    Returns:
      One sorted int64 array of classes per client.

    >>> [s.size for s in pathological_class_sets(4, (2, 3), num_classes=5)]
    [2, 3, 2, 3]
    """
    num_clients = check_count(num_clients, "num_clients")
    num_classes = check_count(num_classes, "num_classes")
    sizes = [int(c) for c in classes_per_group]
    if not sizes or any(c < 1 or c > num_classes for c in sizes):
        raise DataError(f"classes_per_group must be non-empty with entries in [1, {num_classes}], "
                        f"got {list(classes_per_group)}")
    if mode not in ("random", "clustered"):
        raise DataError(f"mode must be 'random' or 'clustered', got {mode!r}")
    rng = np.random.default_rng(seed)
    draw = lambda c: np.sort(rng.choice(num_classes, size=c, replace=False)).astype(np.int64)
    if mode == "random":
        return [draw(sizes[i % len(sizes)]) for i in range(num_clients)]
    for _ in range(max_tries):
        sets = [draw(c) for c in sizes]
        keys = {tuple(x.tolist()) for x in sets}
        if len(keys) == len(sets):
            return [sets[i % len(sizes)].copy() for i in range(num_clients)]
    raise DataError(f"could not draw {len(sizes)} pairwise different class sets of sizes {sizes} "
                    f"from {num_classes} classes")


def pathological(
    labels: np.ndarray,
    num_clients: int,
    samples_per_client: int,
    classes_per_group: Sequence[int] | None = None,
    mode: str = "random",
    num_classes: int | None = None,
    seed: int = 0,
    class_sets: Sequence[Sequence[int]] | None = None,
    disjoint: bool = True,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Pathological label skew: client ``i`` in group ``i mod len(classes_per_group)`` sees
    ``classes_per_group[i mod G]`` classes with its ``samples_per_client`` samples balanced across them
    (the remainder goes to its highest-numbered class, as in :func:`fedpac_shards`).

    ``mode`` is ``"random"`` or ``"clustered"`` (see :func:`pathological_class_sets`); pass
    ``class_sets`` (e.g. the train split's) to fix the sets, which then overrides ``mode`` and
    ``classes_per_group``. Samples are drawn at random (``seed``) inside each class. ``disjoint=True``
    hands each sample to at most one client and raises :class:`DataError` when a class runs out;
    ``disjoint=False`` draws every client's samples independently (no repeats inside a client, clients
    may share), which test splits need (e.g. 300 test samples per client from CIFAR's 1000 per class).

    Args:
      labels: int labels ``[n]``.
      num_clients, samples_per_client: ``m`` clients of ``n`` samples each.
      classes_per_group, mode, seed: as in :func:`pathological_class_sets`.
      num_classes: default ``max label + 1``.
      class_sets: fixed per-client class sets (overrides the draw).
      disjoint: see above.

    Returns:
      ``(clients, class_sets)``: one sorted index array and one sorted class array per client.

    >>> clients, sets = pathological(np.arange(100) % 10, 2, 6, classes_per_group=(2, 3), seed=0)
    >>> [c.size for c in clients], [s.size for s in sets]
    ([6, 6], [2, 3])
    """
    labels, k = check_labels(labels, num_classes)
    num_clients = check_count(num_clients, "num_clients")
    n = check_count(samples_per_client, "samples_per_client")
    if class_sets is None:
        if classes_per_group is None:
            raise DataError("pass classes_per_group (classes per client, per group) or class_sets")
        sets = pathological_class_sets(num_clients, classes_per_group, mode, k, seed)
    else:
        sets = [np.asarray(c) for c in class_sets]
        if len(sets) != num_clients:
            raise DataError(f"class_sets has {len(sets)} entries for {num_clients} clients")
        for i, c in enumerate(sets):
            if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
                raise DataError(f"class_sets[{i}] must be a non-empty 1-D integer array, got {c!r}")
            if c.min() < 0 or c.max() >= k or np.unique(c).size != c.size:
                raise DataError(f"class_sets[{i}] must hold distinct classes in [0, {k}), got {c.tolist()}")
        sets = [np.sort(c).astype(np.int64) for c in sets]
    if n < max(c.size for c in sets):
        raise DataError(f"samples_per_client={n} cannot cover {max(c.size for c in sets)} classes with one sample each")
    rng = np.random.default_rng([seed, 1])  # independent of the class-set stream
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(k)]
    cursor = np.zeros(k, np.int64)
    clients = []
    for i, classes in enumerate(sets):
        chosen = []
        for cls, count in zip(classes.tolist(), _split_evenly(n, classes.size)):
            pool = pools[cls]
            if count > pool.size:
                raise DataError(f"client {i} needs {count} samples of class {cls}, which has only {pool.size}")
            if disjoint:
                if cursor[cls] + count > pool.size:
                    raise DataError(f"class {cls} is exhausted at client {i} ({pool.size} samples); "
                                    "use disjoint=False or fewer/smaller clients")
                chosen.append(pool[cursor[cls]: cursor[cls] + count])
                cursor[cls] += count
            else:
                chosen.append(rng.choice(pool, size=count, replace=False))
        clients.append(np.sort(np.concatenate(chosen)))
    return clients, sets


def dirichlet_matched(
    y_train: np.ndarray,
    y_test: np.ndarray | None,
    num_clients: int,
    beta: float,
    seed: int = 0,
    min_size: int = 10,
    min_test_size: int = 1,
    num_classes: int | None = None,
    max_tries: int = 100,
):
    """Dirichlet label skew with matching test splits: ``p_k ~ Dir_m(beta)`` for every class ``k``, and
    a ``p_{k,i}`` share of class ``k``'s samples goes to client ``i``.

    The scheme of :func:`dirichlet` (each sample to exactly one client, seeded per-class shuffles,
    redraw until every client is large enough), except that one draw of the proportions is applied to
    both ``y_train`` and ``y_test``, so each client's test labels follow its training distribution.
    ``min_size`` (train) defaults to 10, the usual NIID-Bench ``min_require_size``.
    ``min_size=0`` / ``min_test_size=0`` allow empty clients.

    Args:
      y_train, y_test: int labels of the two splits (``y_test`` may be None).
      num_clients, beta, seed: as in :func:`dirichlet`.
      min_size, min_test_size: the smallest allowed train / test client.
      num_classes: default ``max train label + 1``.
      max_tries: redraws before :class:`DataError`.

    Returns:
      The train partition, or ``(train, test)`` when ``y_test`` is given (lists of sorted index arrays).

    >>> train, test = dirichlet_matched(np.arange(200) % 10, np.arange(50) % 10, 4, 1.0, min_size=1)
    >>> len(train), sum(c.size for c in train), sum(c.size for c in test)
    (4, 200, 50)
    """
    y_train, k = check_labels(y_train, num_classes)
    if y_test is not None:
        y_test, _ = check_labels(y_test, k)
    num_clients = check_count(num_clients, "num_clients")
    if not (isinstance(beta, (int, float, np.integer, np.floating)) and math.isfinite(beta) and beta > 0):
        raise DataError(f"Dirichlet beta must be a finite number > 0, got {beta!r}")
    min_size = check_count(min_size, "min_size", 0)
    min_test_size = check_count(min_test_size, "min_test_size", 0)
    max_tries = check_count(max_tries, "max_tries")
    if min_size * num_clients > y_train.size or (y_test is not None and min_test_size * num_clients > y_test.size):
        raise DataError(f"{num_clients} clients with at least {min_size} train / {min_test_size} test samples "
                        "need more data than given")
    rng = np.random.default_rng(seed)

    def split(y: np.ndarray, props: np.ndarray) -> list[np.ndarray]:
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for cls in range(k):
            idx = rng.permutation(np.flatnonzero(y == cls))
            cuts = (np.cumsum(props[cls])[:-1] * idx.size).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                buckets[client].append(part)
        return [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets]

    for _ in range(max_tries):
        props = rng.dirichlet(np.full(num_clients, float(beta)), size=k)  # [k, m]
        train = split(y_train, props)
        if min(c.size for c in train) < min_size:
            continue
        if y_test is None:
            return train
        test = split(y_test, props)
        if min(c.size for c in test) >= min_test_size:
            return train, test
    raise DataError(f"could not draw a Dirichlet({beta}) partition over {num_clients} clients with >= {min_size} "
                    f"train / {min_test_size} test samples each in {max_tries} tries")


def shard_layout(k: int, layout: dict) -> dict:
    """``layout`` (the keyword options of :func:`fedpac_shards_sized`: ``groups``, ``start_cursor``,
    ``wrap``, ``order_seed``, ``allow_empty``) with ``groups`` checked and defaulted.

    Args:
      k: the number of classes.
      layout: the keyword options.

    Returns:
      A new dict with ``groups`` set (:func:`resolve_groups`).

    >>> shard_layout(10, {"wrap": False})
    {'wrap': False, 'groups': [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]]}
    """
    return {**layout, "groups": resolve_groups(k, layout.get("groups"))}


def quantity_skew(labels: np.ndarray, large: int, small: int, num_clients: int = 20, num_large: int | None = None,
                  s: float = 0.2, num_classes: int | None = None, **layout) -> list[np.ndarray]:
    """Quantity skew with "large" and "small" clients on top of FedPAC's s% + dominant-class partition.

    Clients ``0 .. num_large-1`` hold ``large`` samples and the rest ``small`` (``num_large`` defaults
    to half, rounded down), FedCollab's ``clusterexp_2`` layout (clients 0-9 large, 10-19 small;
    FedCollab's own FMNIST setting is 2100 vs ``floor(2100 e^-5 + 0.49) = 14`` training samples, built by
    :func:`pflax.suites.fedcollab.label_shift_partition`). Dominant-class groups are ``i mod 5``, so with 20
    clients every group has two large and two small members. ``small=0`` needs ``allow_empty=True``.

    Args:
      labels: int labels ``[n]``.
      large, small: samples of a large / small client.
      num_clients, num_large: clients in all / large ones.
      s, num_classes: as in :func:`fedpac_shards`.
      **layout: :func:`fedpac_shards_sized`'s ``groups``, ``start_cursor``, ``wrap``, ``order_seed``,
        ``allow_empty``.

    Returns:
      One int index array into ``labels`` per client.

    >>> [c.size for c in quantity_skew(np.arange(400) % 10, large=30, small=10, num_clients=4)]
    [30, 30, 10, 10]
    """
    labels, k = check_labels(labels, num_classes)
    num_clients = check_count(num_clients, "num_clients")
    large = check_count(large, "large")
    small = check_count(small, "small", 0 if layout.get("allow_empty", False) else 1)
    if small > large:
        raise DataError(f"small ({small}) must not exceed large ({large})")
    num_large = num_clients // 2 if num_large is None else check_count(num_large, "num_large", 0)
    if num_large > num_clients:
        raise DataError(f"num_large ({num_large}) exceeds num_clients ({num_clients})")
    sizes = np.array([large] * num_large + [small] * (num_clients - num_large), np.int64)
    return fedpac_shards_sized(labels, sizes, s, k, **shard_layout(k, layout))
