"""FedCollab's three data setups (Bao et al., ICML 2023, Section 5 and Appendix; official
``src/partition/`` and ``src/dataset/{rotate,swap}.py`` in https://github.com/baowenxuan/FedCollab)
as pure, seeded functions on given arrays.

* Label shift (FMNIST): 4 groups of 5 clients with the ``cluster4_0.25`` label fractions.
* Feature shift: rotate each group's images (symmetric padding, rotate, centre crop).
* Concept shift: a per-group permutation of the 20 CIFAR-100 coarse labels.

Common to all: train and test sets are concatenated and re-split per client into test (``holdout``)
and train, and "small" clients keep only a fraction ``q`` of their train part (test sizes unchanged).
"""
from __future__ import annotations

import math

import numpy as np

from ..data.sources import DataError

__all__ = ["CLUSTER4_025", "label_shift_partition", "quantity_factors", "fmnist_label_shift",
           "rotate_symmetric", "ROTATION_DEGREES", "permute_labels"]

# Share of each label's whole pool given to each group (rows: groups 0-3, columns: labels 0-9).
CLUSTER4_025 = np.zeros((4, 10))
CLUSTER4_025[0, 0], CLUSTER4_025[0, 1:4] = 0.25, 0.5
CLUSTER4_025[1, 1:4], CLUSTER4_025[1, 4] = 0.5, 0.25
CLUSTER4_025[2, 5], CLUSTER4_025[2, 6:9] = 0.25, 0.5
CLUSTER4_025[3, 6:9], CLUSTER4_025[3, 9] = 0.5, 0.25

FMNIST_FEDCOLLAB_NORM = (0.2860, 0.3530)
ROTATION_DEGREES = (-25.0, 25.0, 155.0, 205.0)  # per group of 5 clients (feature shift)


def quantity_factors(num_clients: int = 20, decay: float = 5.0) -> np.ndarray:
    """``clusterexp_2_<decay>``: q = 1 for the first half of the clients, e^-decay for the second.

    Args:
      num_clients: number of clients (the first ``num_clients // 2`` are large).
      decay: the exponent of the small clients' factor.

    Returns:
      A float array ``[num_clients]`` of train fractions ``q_i``.

    >>> quantity_factors(4, decay=1.0).round(3).tolist()
    [1.0, 1.0, 0.368, 0.368]
    """
    half = num_clients // 2
    return np.concatenate([np.ones(half), np.full(num_clients - half, math.exp(-decay))])


def _rounded_counts(total: int, shares: np.ndarray) -> np.ndarray:
    cum = np.floor(np.cumsum(shares) * total + 1e-9).astype(np.int64)
    return np.diff(np.concatenate([[0], cum]))


def label_shift_partition(labels: np.ndarray, fractions: np.ndarray = CLUSTER4_025, clients_per_group: int = 5,
                          holdout: float = 1 / 7, quantity: np.ndarray | None = None, seed: int = 0):
    """Per-client ``(train_indices, test_indices)`` into ``labels`` (the concatenated pool).

    Group g takes ``fractions[g, k]`` of label k's pool, split equally over its clients. Each client's
    label-k share is split into ``holdout`` test, ``(1 - holdout) * q_i`` train, the rest unused.

    Args:
      labels: int labels of the pooled train + test sets.
      fractions: ``[groups, labels]`` shares of each label's pool (default :data:`CLUSTER4_025`).
      clients_per_group: clients per group; client ``c`` is in group ``c // clients_per_group``.
      holdout: the test share of every client's data.
      quantity: train fractions ``q_i`` per client (:func:`quantity_factors`; default all 1).
      seed: seeds the per-label shuffles.

    Returns:
      ``(train, test)``: lists of index arrays, one per client.

    >>> train, test = label_shift_partition(np.arange(400) % 10, clients_per_group=1, quantity=[1, 1, .5, .5])
    >>> [c.size for c in train], [c.size for c in test]
    ([60, 60, 28, 28], [10, 10, 10, 10])
    """
    labels = np.asarray(labels)
    fractions = np.asarray(fractions, np.float64)
    num_groups, num_labels = fractions.shape
    if np.any(fractions.sum(0) > 1 + 1e-9):
        raise DataError("a label's group fractions sum to more than 1")
    n = num_groups * clients_per_group
    quantity = np.ones(n) if quantity is None else np.asarray(quantity, np.float64)
    if quantity.shape != (n,):
        raise ValueError(f"quantity needs {n} factors, got shape {quantity.shape}")
    rng = np.random.default_rng(seed)
    pools = [[[] for _ in range(num_labels)] for _ in range(n)]
    for k in range(num_labels):
        members = rng.permutation(np.flatnonzero(labels == k))
        shares = np.repeat(fractions[:, k] / clients_per_group, clients_per_group)
        counts = _rounded_counts(members.size, shares)
        starts = np.concatenate([[0], np.cumsum(counts)])
        for client in range(n):
            pools[client][k] = members[starts[client]: starts[client + 1]]
    train, test = [], []
    for client in range(n):
        tr, te = [], []
        for pool in pools[client]:
            n_test = int(round(pool.size * holdout))
            n_train = int(math.floor((pool.size - n_test) * quantity[client] + 0.49))
            te.append(pool[:n_test])
            tr.append(pool[n_test: n_test + n_train])
        train.append(np.concatenate(tr))
        test.append(np.concatenate(te))
    return train, test


def fmnist_label_shift(dataset, seed: int = 0, decay: float = 5.0):
    """The paper's label-shift FMNIST federation from a loaded :class:`pflax.data.Dataset`: 4 groups of 5
    clients with the :data:`CLUSTER4_025` fractions, holdout 1/7 and :func:`quantity_factors`.

    Args:
      dataset: the loaded FMNIST (its normalisation is undone through ``NORMALIZATION[dataset.name]``).
      seed: seeds :func:`label_shift_partition`.
      decay: the small clients' factor ``e^-decay``.

    Returns:
      ``(x, y, train_indices, test_indices)`` with x re-normalised to FedCollab's FMNIST
      statistics (0.2860, 0.3530).

    >>> from pflax.data import synthetic
    >>> x, y, train, test = fmnist_label_shift(synthetic(10, 14, 14, image_size=4))
    >>> x.shape, len(train), len(test)
    ((280, 4, 4, 1), 20, 20)
    """
    from ..data.sources import NORMALIZATION

    (mean,), (std,) = NORMALIZATION.get(dataset.name, ((0.5,), (0.5,)))
    x = np.concatenate([dataset.x_train, dataset.x_test]) * std + mean  # back to [0, 1]
    x = ((x - FMNIST_FEDCOLLAB_NORM[0]) / FMNIST_FEDCOLLAB_NORM[1]).astype(np.float32)
    y = np.concatenate([dataset.y_train, dataset.y_test]).astype(np.int32)
    train, test = label_shift_partition(y, CLUSTER4_025, 5, 1 / 7, quantity_factors(20, decay), seed)
    return x, y, train, test


def rotate_symmetric(images: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate NHWC images about their centre: symmetric-pad by half the size, rotate with nearest
    neighbour sampling (torchvision's default), centre-crop back. Padding means corners are filled
    with mirrored content rather than zeros.

    Args:
      images: NHWC images.
      degrees: the angle, counter-clockwise (:data:`ROTATION_DEGREES` per group).

    Returns:
      The rotated images, same shape and dtype.

    >>> rotate_symmetric(np.array([[[[0.0], [1.0]], [[2.0], [3.0]]]]), 180)[0, ..., 0].tolist()
    [[3.0, 2.0], [1.0, 0.0]]
    """
    images = np.asarray(images)
    _, h, w, _ = images.shape
    ph, pw = h // 2, w // 2
    padded = np.pad(images, ((0, 0), (ph, ph), (pw, pw), (0, 0)), mode="symmetric")
    big_h, big_w = padded.shape[1:3]
    cy, cx = (big_h - 1) / 2.0, (big_w - 1) / 2.0
    rows, cols = np.meshgrid(np.arange(big_h), np.arange(big_w), indexing="ij")
    theta = math.radians(degrees)
    # Inverse map: output pixel -> source pixel (counter-clockwise rotation for positive angles).
    src_x = math.cos(theta) * (cols - cx) - math.sin(theta) * (rows - cy) + cx
    src_y = math.sin(theta) * (cols - cx) + math.cos(theta) * (rows - cy) + cy
    sx, sy = np.rint(src_x).astype(int), np.rint(src_y).astype(int)
    inside = (sx >= 0) & (sx < big_w) & (sy >= 0) & (sy < big_h)
    out = np.zeros_like(padded)
    out[:, inside] = padded[:, sy[inside], sx[inside]]
    return out[:, ph: ph + h, pw: pw + w]


def permute_labels(y: np.ndarray, group: int) -> np.ndarray:
    """Concept shift on the 20 CIFAR-100 coarse labels (``20client_6``), group 0..3.

    Args:
      y: coarse labels in [0, 20).
      group: 0 (identity), 1 (0-5 reversed), 2 (all reversed) or 3 (0-5 shifted to 14-19, 6-19 reversed
        onto 13-0).

    Returns:
      The permuted labels (a copy).

    >>> permute_labels(np.array([0, 5, 6, 19]), 3).tolist()
    [14, 19, 13, 0]
    """
    y = np.asarray(y)
    if group == 0:
        return y.copy()
    if group == 1:
        return np.where(y < 6, 5 - y, y)
    if group == 2:
        return 19 - y
    if group == 3:
        return np.where(y < 6, 14 + y, 19 - y)
    raise ValueError(f"concept-shift group must be 0..3, got {group}")
