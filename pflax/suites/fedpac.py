"""FedPAC's experimental protocol: the partitions of its main and supplementary tables.

Xu, Tong and Huang, "Personalized Federated Learning with Feature Alignment and Classifier
Collaboration", ICLR 2023 (§6 and App. C.6-C.10); official code https://github.com/JianXu95/FedPAC.
The official code ships only the default "s% uniform + dominant classes" partition
(``mnist_noniid_s``/``cifar_noniid_s`` in ``data_loader.py``, :func:`pflax.data.fedpac_shards`); every
other setting is described in words only. Each function here fixes a table's setting on top of the
generic partitioners of :mod:`pflax.data.partition` and transforms of :mod:`pflax.data.transforms`,
returning one index array per client, sometimes with per-client side information (a label map,
rotation angles, class sets). Wherever the paper leaves a detail open, the docstring says what was
chosen.

Common conventions:

* Client ``i`` belongs to group ``i mod G`` (the official code's interleaved groups, ``i % 5`` in
  ``mnist_noniid_s``).
* Invalid inputs raise :class:`~pflax.data.DataError` (a ``ValueError``) with a message naming the
  problem. No client is ever empty unless the caller asks for it (``min_size=0``).
* ``**layout`` passes :func:`pflax.data.fedpac_shards_sized`'s options (``groups``, ``start_cursor``,
  ``wrap``, ``order_seed``) through.
* The same arguments (seed included) always give the same partition; every random draw comes from
  ``np.random.default_rng(seed)``.
* Test splits: call the same function on the test labels with the same side information (the same
  ``label_maps``/``class_sets``/groups) and the table's test size, as FedPAC's test data "has the same
  distribution as the training data".

========  ==================================================  ======================================
table     setting                                             function
========  ==================================================  ======================================
1, 2      default s% uniform + dominant classes (s = 0.2)     :func:`federate_fedpac`
3         concept shift: per-group label permutation          :func:`concept_shift`
6         client sizes drawn from {300, 600, 1200}            :func:`imbalanced_sizes`
7         pathological 3/3/5/5/8 classes, random/clustered    :func:`pathological`
8         Dirichlet(1.0) over 100 clients                     :func:`dirichlet_matched`
9         1000 clients x 50 samples                           :func:`data_scarce`
10        rotation feature skew per group                     :func:`rotation_skew`
========  ==================================================  ======================================

The large/small quantity skew is generic (:func:`pflax.data.quantity_skew`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..data.clients import ClientData, from_partition
from ..data.partition import check_count, check_labels, fedpac_shards, fedpac_shards_sized, shard_layout
from ..data.partition import dirichlet_matched as _dirichlet_matched
from ..data.partition import pathological as _pathological
from ..data.partition import pathological_class_sets as _pathological_class_sets
from ..data.sources import Dataset, DataError
from ..data.transforms import concept_shift_maps, rotation_angles

__all__ = [
    "federate_fedpac",
    "concept_shift",
    "draw_sizes", "imbalanced_sizes",
    "PATHOLOGICAL_CLASSES", "pathological", "pathological_class_sets",
    "dirichlet_matched",
    "data_scarce",
    "ROTATION_ANGLES", "rotation_skew",
]

PATHOLOGICAL_CLASSES = (3, 3, 5, 5, 8)  # FedPAC Table 7: classes per client in groups 0..4
ROTATION_ANGLES = (0.0, 72.0, 144.0, 216.0, 288.0)  # Table 10 default (our choice; the paper gives none)


# ------------------------------------------------------------------ Tables 1 and 2: the default
def federate_fedpac(dataset: Dataset, num_clients: int = 20, train_per_client: int = 600, test_per_client: int = 600,
                    s: float = 0.2, wrap: bool = True) -> tuple[ClientData, ClientData]:
    """FedPAC's default setting: the s% partition (:func:`~pflax.data.fedpac_shards`) on the train split
    and, with the same dominant-class groups, on the test split.

    Args:
        dataset: a :class:`~pflax.data.Dataset` (its ``num_classes`` picks the dominant groups: 10 or 62).
        num_clients: number of clients (FedPAC's default: 20).
        train_per_client, test_per_client: samples per client in each split (FedPAC FMNIST: 600 / 600).
        s: the uniform share (FedPAC's default 0.2, i.e. 20 %).
        wrap: the official wrap-around cursor (clients may share samples); ``False`` raises instead.

    Returns:
        ``(train, test)`` padded :class:`~pflax.data.ClientData`. The cursors start at 0, as the
        official FMNIST/EMNIST loaders; for CIFAR's 2000/500 call ``fedpac_shards(start_cursor=...)``.

    >>> from pflax.data import synthetic
    >>> train, test = federate_fedpac(synthetic(10, 20, 10, 8), num_clients=4, train_per_client=20,
    ...                               test_per_client=10)
    >>> train.x.shape, test.y.shape
    ((4, 20, 8, 8, 1), (4, 10))
    """
    tr = fedpac_shards(dataset.y_train, num_clients, train_per_client, s, dataset.num_classes, wrap=wrap)
    te = fedpac_shards(dataset.y_test, num_clients, test_per_client, s, dataset.num_classes, wrap=wrap)
    return from_partition(dataset.x_train, dataset.y_train, tr), from_partition(dataset.x_test, dataset.y_test, te)


# ------------------------------------------------------------------------- Table 3: concept shift
def concept_shift(
    labels: np.ndarray,
    num_clients: int = 20,
    samples_per_client: int = 600,
    s: float = 0.2,
    num_classes: int | None = None,
    seed: int = 0,
    **layout,
) -> tuple[list[np.ndarray], np.ndarray]:
    """FedPAC Table 3 (concept shift): the default s% partition (s = 0.2, n = 600, dominant-class group
    ``i mod 5``), then every group relabels its data with its own permutation.

    The index arrays are :func:`~pflax.data.fedpac_shards_sized`'s (deterministic, as the official
    partition) and the maps :func:`~pflax.data.concept_shift_maps` drawn from ``seed``, one permutation
    per dominant-class group, so permutation groups coincide with FedPAC's groups (Local-only is 85.68 %
    on FMNIST in both Table 3 and Table 5, consistent with the same base partition). Apply the maps with
    :func:`~pflax.data.relabel` (numpy) or :func:`~pflax.data.relabel_clients` (padded
    :class:`~pflax.data.ClientData`); use the same ``label_maps`` for the test split.

    Args:
      labels: int labels ``[n]``.
      num_clients, samples_per_client: clients and samples per client (FedPAC: 20 x 600).
      s: the uniform share.
      num_classes: default ``max label + 1``.
      seed: seeds the permutations.
      **layout: :func:`~pflax.data.fedpac_shards_sized`'s ``groups``, ``start_cursor``, ``wrap``,
        ``order_seed``.

    Returns:
      ``(clients, label_maps)``: one index array per client and an int ``[num_clients, num_classes]``.

    >>> clients, maps = concept_shift(np.arange(200) % 10, num_clients=5, samples_per_client=10)
    >>> len(clients), maps.shape
    (5, (5, 10))
    """
    labels, k = check_labels(labels, num_classes)
    num_clients = check_count(num_clients, "num_clients")
    samples_per_client = check_count(samples_per_client, "samples_per_client")
    layout = shard_layout(k, layout)
    clients = fedpac_shards_sized(labels, [samples_per_client] * num_clients, s, k, **layout)
    return clients, concept_shift_maps(num_clients, k, len(layout["groups"]), seed)


# ------------------------------------------------------------------------ Table 6: imbalanced sizes
def draw_sizes(num_clients: int = 20, choices: Sequence[int] = (300, 600, 1200), seed: int = 0) -> np.ndarray:
    """Per-client sizes drawn independently and uniformly from ``choices`` (FedPAC Table 6: "we randomly
    choose the size from {300, 600, 1200} for each client regardless the local label distributions").

    Args:
      num_clients: number of clients.
      choices: the candidate sizes (positive ints).
      seed: seeds the draw.

    Returns:
      An int64 array ``[num_clients]``.

    >>> draw_sizes(4, choices=(10, 20), seed=0).tolist()
    [20, 20, 20, 10]
    """
    num_clients = check_count(num_clients, "num_clients")
    choices = np.asarray(choices)
    if choices.ndim != 1 or choices.size == 0 or not np.issubdtype(choices.dtype, np.integer) or np.any(choices < 1):
        raise DataError(f"choices must be a non-empty list of positive integers, got {choices!r}")
    return np.random.default_rng(seed).choice(choices, size=num_clients).astype(np.int64)


def imbalanced_sizes(
    labels: np.ndarray,
    num_clients: int = 20,
    choices: Sequence[int] = (300, 600, 1200),
    s: float = 0.2,
    num_classes: int | None = None,
    seed: int = 0,
    **layout,
) -> list[np.ndarray]:
    """FedPAC Table 6 (FMNIST / CIFAR-10, 20 clients, sampling rate 1.0): the s% + dominant-class
    partition (s = 0.2, group ``i mod 5``) with client ``i`` holding ``draw_sizes(...)[i]`` training
    samples, drawn from {300, 600, 1200} with ``seed``.

    ``floor(n_i * s)`` samples are uniform over the classes and the rest go to the dominant classes, so
    the label distribution does not depend on the size (up to rounding). The paper only varies the
    training size; build test sets with :func:`~pflax.data.fedpac_shards` at the table's fixed test
    size (600 FMNIST, 300 CIFAR). ``len(clients[i])`` gives the drawn sizes.

    Args:
      labels: int labels ``[n]``.
      num_clients, choices, seed: as in :func:`draw_sizes`.
      s, num_classes, **layout: as in :func:`concept_shift`.

    Returns:
      One int index array per client.

    >>> [c.size for c in imbalanced_sizes(np.arange(400) % 10, num_clients=4, choices=(10, 20))]
    [20, 20, 20, 10]
    """
    labels, k = check_labels(labels, num_classes)
    sizes = draw_sizes(num_clients, choices, seed)
    return fedpac_shards_sized(labels, sizes, s, k, **shard_layout(k, layout))


# ---------------------------------------------------------------------------- Table 7: pathological
def pathological_class_sets(
    num_clients: int = 20,
    classes_per_group: Sequence[int] = PATHOLOGICAL_CLASSES,
    mode: str = "random",
    num_classes: int = 10,
    seed: int = 0,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Each client's class set for FedPAC Table 7: :func:`pflax.data.pathological_class_sets` with
    the table's 20 clients and 3/3/5/5/8 classes in groups ``i mod 5``.

    Our reading of App. C.7: ``"random"``: "the class set is randomly selected for each client and could
    be varied even for clients in the same group": every client draws its own set uniformly without
    replacement. ``"clustered"``: "the class sets differ across groups but are shared for clients
    belonging to the same group": one uniform draw per group, redrawn until the groups' sets are pairwise
    different, and every member of the group uses it. The paper gives no seed or explicit sets.

    Args:
      num_clients, classes_per_group, mode, num_classes, seed, max_tries: as in
        :func:`pflax.data.pathological_class_sets`.

    Returns:
      One sorted int64 array of classes per client.

    >>> [s.size for s in pathological_class_sets(mode="clustered")][:6]
    [3, 3, 5, 5, 8, 3]
    """
    return _pathological_class_sets(num_clients, classes_per_group, mode, num_classes, seed, max_tries)


def pathological(
    labels: np.ndarray,
    num_clients: int = 20,
    samples_per_client: int = 600,
    classes_per_group: Sequence[int] = PATHOLOGICAL_CLASSES,
    **options,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """FedPAC Table 7 (CIFAR-10, 20 clients, 600 samples each, sampling rate 1.0): clients in group
    ``i mod 5`` see 3/3/5/5/8 classes, with samples "balanced across classes at each client"
    (600 = 3 x 200 = 5 x 120 = 8 x 75; for other sizes the remainder goes to its highest-numbered class, as in
    FedPAC's partition).

    Args:
      labels: int labels ``[n]`` (CIFAR-10's in the table).
      num_clients, samples_per_client, classes_per_group: the table's 20, 600 and 3/3/5/5/8 by default.
      **options: :func:`pflax.data.pathological`'s options. ``mode``: ``"random"`` or ``"clustered"``
        (our reading: :func:`pathological_class_sets`). ``seed``: the draw inside each class.
        ``class_sets``: fixed sets (e.g. the train split's), overriding ``mode`` and
        ``classes_per_group``. ``disjoint``: True hands each sample to at most one client (a
        :class:`DataError` when a class runs out); False draws each client independently (no repeats
        inside a client, clients may share), as test splits need (e.g. 300 test samples per client from
        CIFAR's 1000 per class). ``num_classes``: default ``max label + 1``.

    Returns:
      ``(clients, class_sets)``; :func:`pflax.data.pathological` with the table's defaults.

    >>> clients, sets = pathological(np.arange(1000) % 10, num_clients=5, samples_per_client=40)
    >>> [c.size for c in clients], [s.size for s in sets]
    ([40, 40, 40, 40, 40], [3, 3, 5, 5, 8])
    """
    return _pathological(labels, num_clients, samples_per_client, classes_per_group, **options)


# ------------------------------------------------------------------------------- Table 8: Dirichlet
def dirichlet_matched(
    y_train: np.ndarray,
    y_test: np.ndarray | None = None,
    num_clients: int = 100,
    beta: float = 1.0,
    seed: int = 0,
    min_size: int = 10,
    min_test_size: int = 1,
    num_classes: int | None = None,
    max_tries: int = 100,
):
    """FedPAC Table 8 (FMNIST / CIFAR-10, 100 clients, sampling rate 0.3): ``p_k ~ Dir_m(beta)`` with
    beta = 1.0 for every class ``k``, and a ``p_{k,i}`` share of class ``k``'s samples goes to client ``i``.

    :func:`pflax.data.dirichlet_matched` with the table's defaults: the scheme of
    :func:`~pflax.data.dirichlet` (each sample to exactly one client, seeded per-class shuffles, redraw
    until every client is large enough), except that one draw of the proportions is applied to both
    ``y_train`` and ``y_test``, so each client's test labels follow its training distribution (FedPAC:
    "the testing data on each client has the same distribution as the training data"). ``min_size``
    (train) defaults to 10, the usual NIID-Bench ``min_require_size``; the paper gives none.
    ``min_size=0`` / ``min_test_size=0`` allow empty clients.

    Args:
      y_train, y_test, num_clients, beta, seed, min_size, min_test_size, num_classes, max_tries: as in
        :func:`pflax.data.dirichlet_matched` (here 100 clients and beta = 1.0 by default).

    Returns:
      The train partition, or ``(train, test)`` when ``y_test`` is given.

    >>> train = dirichlet_matched(np.arange(100) % 10, num_clients=5, min_size=1)
    >>> len(train), sorted(np.concatenate(train).tolist()) == list(range(100))
    (5, True)
    """
    return _dirichlet_matched(y_train, y_test, num_clients, beta, seed, min_size, min_test_size, num_classes,
                              max_tries)


# -------------------------------------------------------------------------- Table 9: data scarcity
def data_scarce(labels: np.ndarray, num_clients: int = 1000, samples_per_client: int = 50, s: float = 0.2,
                num_classes: int | None = None, **layout) -> list[np.ndarray]:
    """FedPAC Table 9 (CIFAR-10, 1000 clients, 50 samples each = one mini-batch, sampling rate 0.03):
    "the default partition strategy", i.e. s = 0.2 with dominant-class group ``i mod 5``: per client 1
    sample of each class plus 13/13/14 of its three dominant classes.

    Deterministic like the official partition (``order_seed`` shuffles inside classes for repetitions);
    the official CIFAR loader starts the train cursors at 2000 (test: 500), pass ``start_cursor``. With
    1000 x 50 = 50,000 samples the cursors wrap, so clients share samples unless ``wrap=False`` (which
    then raises).

    Args:
      labels: int labels ``[n]``.
      num_clients, samples_per_client: the table's 1000 x 50 by default.
      s, num_classes, **layout: as in :func:`concept_shift`.

    Returns:
      One int index array per client.

    >>> clients = data_scarce(np.arange(1000) % 10, num_clients=30)
    >>> len(clients), {c.size for c in clients}
    (30, {50})
    """
    labels, k = check_labels(labels, num_classes)
    num_clients = check_count(num_clients, "num_clients")
    samples_per_client = check_count(samples_per_client, "samples_per_client")
    return fedpac_shards_sized(labels, [samples_per_client] * num_clients, s, k, **shard_layout(k, layout))


# ------------------------------------------------------------------------- Table 10: rotation skew
def rotation_skew(
    labels: np.ndarray,
    num_clients: int = 20,
    samples_per_client: int = 600,
    s: float = 1.0,
    angles: Sequence[float] = ROTATION_ANGLES,
    num_classes: int | None = None,
    **layout,
) -> tuple[list[np.ndarray], np.ndarray]:
    """FedPAC Table 10 (FMNIST, 20 clients): "we rotate the images in each group with a certain degree".

    The paper names neither the angles nor the label partition. Our choices:

    * groups are FedPAC's ``i mod 5``; group ``g`` is rotated by ``angles[g]``, by default
      0, 72, 144, 216, 288 degrees (evenly spread over the circle, counter-clockwise);
    * labels are uniform (``s = 1.0``: 60 samples of every class for n = 600), so the skew is in the
      features only. Table 10's Local-only accuracy (78.53 %) is far below the 85.68 % of the
      label-skewed default partition, which fits a harder 10-class local task. Pass ``s=0.2`` to put the
      rotation on top of the default dominant-class skew instead.

    Args:
      labels: int labels ``[n]``.
      num_clients, samples_per_client: the table's 20 x 600 by default.
      s: the uniform share (1.0: no label skew).
      angles: degrees per group (:data:`ROTATION_ANGLES`).
      num_classes, **layout: as in :func:`concept_shift`.

    Returns:
      ``(clients, angles_per_client)``; rotate with :func:`~pflax.data.rotate_images` or
      :func:`~pflax.data.rotate_clients` and use the same angles for the test split.

    >>> clients, angles = rotation_skew(np.arange(500) % 10, num_clients=6, samples_per_client=20)
    >>> [c.size for c in clients][:2], angles.tolist()
    ([20, 20], [0.0, 72.0, 144.0, 216.0, 288.0, 0.0])
    """
    labels, k = check_labels(labels, num_classes)
    num_clients = check_count(num_clients, "num_clients")
    samples_per_client = check_count(samples_per_client, "samples_per_client")
    per_client = rotation_angles(num_clients, angles)
    clients = fedpac_shards_sized(labels, [samples_per_client] * num_clients, s, k, **shard_layout(k, layout))
    return clients, per_client
