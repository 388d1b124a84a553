"""Named federations: a dataset split over clients by one of pflax's partitioners, train and test alike.

This is what ``pflax run --partition NAME`` and a run file's ``[partition]`` table pick from. Every
entry of :data:`PARTITIONS` turns a :class:`~pflax.data.Dataset` into padded ``(train, test)``
:class:`~pflax.data.ClientData` with matching test splits (each client's test data follows its
training distribution, as FedPAC and FedCollab evaluate). The partitioners themselves live in
:mod:`pflax.data.partition`, :mod:`pflax.data.transforms` and :mod:`pflax.suites`; this module only
names them and fixes how their test splits are drawn.

=====================  ==========================================================  ===========================
name                   split                                                       parameters (defaults)
=====================  ==========================================================  ===========================
fedpac                 s % uniform + 80 % from a dominant class group (FedPAC)     ``s=0.2, wrap=True``
dirichlet              every class over clients with Dirichlet(beta) shares        ``beta=0.5, min_size=10``
pathological           each client sees a few classes, balanced                    ``classes_per_client=2``
quantity_skew          FedPAC's split, half the clients large and half small       ``large=1200, small=300``
client_sizes           FedPAC's split, each client's size drawn from ``sizes``     ``sizes=[300,600,1200]``
concept_shift          FedPAC's split, labels permuted per client group            ``s=0.2``
rotation               uniform labels, images rotated per client group             ``angles=[0,72,144,216,288]``
fedcollab_label_shift  FedCollab's label shift: 4 label groups, half small         ``decay=5.0``
domains                one client per digit domain (MNIST, MNIST-M, ...)           (dataset ``digits``)
=====================  ==========================================================  ===========================
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

from .clients import ClientData, from_partition
from .partition import check_count, dirichlet_matched, dominant_groups, fedpac_shards_sized, pathological
from .partition import quantity_skew as quantity_skew_indices
from .sources import DataError, Dataset, load_dataset
from .transforms import relabel_clients, rotate_clients

__all__ = ["Partition", "PARTITIONS", "federate", "load_federation"]


@dataclasses.dataclass(frozen=True)
class Partition:
    """A named partition: its one-line summary, its parameters with their defaults, and its builder.

    Attributes:
      name: the name used by ``--partition`` and run files.
      summary: one line for ``pflax list``.
      params: parameter name -> default value (the types the builder expects).
      build: ``(dataset, num_clients, train_per_client, test_per_client, seed, **params) -> (train, test)``.

    >>> PARTITIONS["dirichlet"].params
    {'beta': 0.5, 'min_size': 10}
    """

    name: str
    summary: str
    params: dict
    build: Callable[..., tuple[ClientData, ClientData]]


def _groups(dataset: Dataset) -> list[list[int]]:
    return dominant_groups(dataset.num_classes)


def _fedpac(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, s=0.2, wrap=True):
    from ..suites.fedpac import federate_fedpac

    return federate_fedpac(dataset, num_clients, train_per_client, test_per_client, s, wrap=wrap)


def _dirichlet(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, beta=0.5, min_size=10):
    # The whole dataset is split (NIID-Bench, FedPAC Table 8); one draw of shares for both splits.
    train_idx, test_idx = dirichlet_matched(dataset.y_train, dataset.y_test, num_clients, beta, seed=seed,
                                            min_size=min_size, num_classes=dataset.num_classes)
    return (from_partition(dataset.x_train, dataset.y_train, train_idx),
            from_partition(dataset.x_test, dataset.y_test, test_idx))


def _pathological(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, classes_per_client=2):
    classes_per_client = check_count(classes_per_client, "classes_per_client")
    train_idx, class_sets = pathological(dataset.y_train, num_clients, train_per_client, (classes_per_client,),
                                         num_classes=dataset.num_classes, seed=seed)
    # Test clients draw from the same classes; samples may repeat across clients (small test splits).
    test_idx, _ = pathological(dataset.y_test, num_clients, test_per_client, num_classes=dataset.num_classes,
                               seed=seed, class_sets=class_sets, disjoint=False)
    return (from_partition(dataset.x_train, dataset.y_train, train_idx),
            from_partition(dataset.x_test, dataset.y_test, test_idx))


def _quantity_skew(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, large=1200, small=300,
                   s=0.2):
    k = dataset.num_classes
    train_idx = quantity_skew_indices(dataset.y_train, large, small, num_clients, s=s, num_classes=k, groups=_groups(dataset))
    test_idx = fedpac_shards_sized(dataset.y_test, [test_per_client] * num_clients, s, k, groups=_groups(dataset))
    return (from_partition(dataset.x_train, dataset.y_train, train_idx),
            from_partition(dataset.x_test, dataset.y_test, test_idx))


def _client_sizes(dataset: Dataset, num_clients, train_per_client, test_per_client, seed,
                  sizes=(300, 600, 1200), s=0.2):
    # FedPAC Table 6 (App. C.6): each client's training size drawn uniformly from `sizes` with the seed;
    # every test split keeps test_per_client samples of the same label distribution.
    from ..suites.fedpac import imbalanced_sizes

    choices = []
    for size in sizes:
        if float(size) != int(size):
            raise DataError(f"partition 'client_sizes': sizes must be whole numbers, got {size!r}")
        choices.append(check_count(int(size), "sizes"))
    if not choices:
        raise DataError("partition 'client_sizes': sizes must name at least one size")
    k = dataset.num_classes
    train_idx = imbalanced_sizes(dataset.y_train, num_clients, choices, s, k, seed)
    test_idx = fedpac_shards_sized(dataset.y_test, [test_per_client] * num_clients, s, k, groups=_groups(dataset))
    return (from_partition(dataset.x_train, dataset.y_train, train_idx),
            from_partition(dataset.x_test, dataset.y_test, test_idx))


def _fedcollab_label_shift(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, decay=5.0):
    # FedCollab Sec. 5.1 (label shift): train and test pooled, 4 groups x 5 clients with the cluster4_0.25
    # label shares, 1/7 of each client's share held out for testing, clients 10-19 keep e^-decay of their
    # training part. The sizes are the setting's own; train_per_client and test_per_client are ignored.
    from ..suites.fedcollab import fmnist_label_shift

    if num_clients != 20:
        raise DataError(f"partition 'fedcollab_label_shift' has 20 clients (4 groups of 5), got {num_clients}")
    if dataset.num_classes != 10:
        raise DataError(f"partition 'fedcollab_label_shift' needs a 10-class dataset, got {dataset.num_classes}")
    x, y, train_idx, test_idx = fmnist_label_shift(dataset, seed=seed, decay=decay)
    return from_partition(x, y, train_idx), from_partition(x, y, test_idx)


def _concept_shift(dataset: Dataset, num_clients, train_per_client, test_per_client, seed, s=0.2):
    from ..suites.fedpac import concept_shift

    k = dataset.num_classes
    train_idx, maps = concept_shift(dataset.y_train, num_clients, train_per_client, s, k, seed)
    test_idx, test_maps = concept_shift(dataset.y_test, num_clients, test_per_client, s, k, seed)
    assert np.array_equal(maps, test_maps)  # same seed, same permutations: the test follows the train concept
    train = from_partition(dataset.x_train, dataset.y_train, train_idx)
    test = from_partition(dataset.x_test, dataset.y_test, test_idx)
    return relabel_clients(train, maps), relabel_clients(test, maps)


def _rotation(dataset: Dataset, num_clients, train_per_client, test_per_client, seed,
              angles=(0.0, 72.0, 144.0, 216.0, 288.0), s=1.0):
    from ..suites.fedpac import rotation_skew

    k = dataset.num_classes
    train_idx, per_client = rotation_skew(dataset.y_train, num_clients, train_per_client, s, tuple(angles), k)
    test_idx, _ = rotation_skew(dataset.y_test, num_clients, test_per_client, s, tuple(angles), k)
    train = from_partition(dataset.x_train, dataset.y_train, train_idx)
    test = from_partition(dataset.x_test, dataset.y_test, test_idx)
    return rotate_clients(train, per_client), rotate_clients(test, per_client)


def _domains(dataset, num_clients, train_per_client, test_per_client, seed):
    raise DataError("the domains partition needs dataset 'digits' (it builds its own clients, one per domain)")


PARTITIONS: dict[str, Partition] = {p.name: p for p in (
    Partition("fedpac", "FedPAC's default: s % of every client uniform, the rest from its group's dominant classes",
              {"s": 0.2, "wrap": True}, _fedpac),
    Partition("dirichlet", "the whole dataset, every class split over clients with Dirichlet(beta) shares "
              "(test shares matched)", {"beta": 0.5, "min_size": 10}, _dirichlet),
    Partition("pathological", "each client sees classes_per_client classes, its samples balanced across them",
              {"classes_per_client": 2}, _pathological),
    Partition("quantity_skew", "FedPAC's split with half the clients 'large' and half 'small'",
              {"large": 1200, "small": 300, "s": 0.2}, _quantity_skew),
    Partition("client_sizes", "FedPAC's split, each client's training size drawn from sizes (FedPAC Table 6)",
              {"sizes": [300, 600, 1200], "s": 0.2}, _client_sizes),
    Partition("concept_shift", "FedPAC's split, then each client group permutes its labels (FedPAC Table 3)",
              {"s": 0.2}, _concept_shift),
    Partition("rotation", "uniform labels, each client group's images rotated by its angle (FedPAC Table 10)",
              {"angles": [0.0, 72.0, 144.0, 216.0, 288.0], "s": 1.0}, _rotation),
    Partition("fedcollab_label_shift", "FedCollab's label shift: 20 clients in 4 label groups, clients 10-19 "
              "small (FedCollab Tables 1-3)", {"decay": 5.0}, _fedcollab_label_shift),
    Partition("domains", "one client per digit domain: mnist, mnistm, inverse, rotated, noisy (dataset 'digits')",
              {}, _domains),
)}


def _coerce(partition: Partition, params: dict) -> dict:
    unknown = sorted(set(params) - set(partition.params))
    if unknown:
        allowed = ", ".join(partition.params) or "none"
        raise DataError(f"partition {partition.name!r} has no parameter {', '.join(unknown)} (it takes: {allowed})")
    out = dict(partition.params)
    for name, value in params.items():
        default = partition.params[name]
        try:
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError
                out[name] = value
            elif isinstance(default, (int, float)):
                if isinstance(value, bool) or (isinstance(default, int) and float(value) != int(value)):
                    raise TypeError
                out[name] = type(default)(value)
            elif isinstance(default, list):
                out[name] = [float(v) for v in value]
            else:
                out[name] = value
        except (TypeError, ValueError):
            raise DataError(f"partition {partition.name!r}: {name} must be a {type(default).__name__}, "
                            f"got {value!r}") from None
    return out


def federate(dataset: Dataset, partition: str, num_clients: int, train_per_client: int = 600,
             test_per_client: int = 600, seed: int = 0, **params: Any) -> tuple[ClientData, ClientData]:
    """Split ``dataset`` over ``num_clients`` clients with the named partition, train and test alike.

    Args:
      dataset: a :class:`~pflax.data.Dataset`.
      partition: a name of :data:`PARTITIONS`.
      num_clients: clients in the federation.
      train_per_client, test_per_client: samples per client where the partition fixes them (FedPAC's
        splits, pathological); Dirichlet splits the whole dataset and ignores them.
      seed: seeds every random draw of the partition.
      **params: the partition's parameters (:attr:`Partition.params`); unknown names are refused.

    Returns:
      ``(train, test)`` :class:`~pflax.data.ClientData`, row ``i`` = client ``i`` in both.

    >>> from pflax.data import synthetic
    >>> train, test = federate(synthetic(train_per_class=30, test_per_class=10, image_size=8), "dirichlet", 4,
    ...                        beta=0.3, min_size=1)
    >>> train.num_clients, int(train.sizes.sum()), int(test.sizes.sum())
    (4, 300, 100)
    """
    if partition not in PARTITIONS:
        raise DataError(f"unknown partition {partition!r}; choose from {', '.join(PARTITIONS)}")
    entry = PARTITIONS[partition]
    num_clients = check_count(num_clients, "clients")
    train_per_client = check_count(train_per_client, "train_per_client")
    test_per_client = check_count(test_per_client, "test_per_client")
    return entry.build(dataset, num_clients, train_per_client, test_per_client, seed, **_coerce(entry, params))


def load_federation(dataset: str, partition: str, num_clients: int, train_per_client: int, test_per_client: int,
                    seed: int = 0, data_dir: str | os.PathLike | None = None, image_size: int | None = None,
                    **params: Any) -> tuple[str, int, ClientData, ClientData]:
    """Load a dataset by name and federate it: the data half of a run file.

    Args:
      dataset: ``"synthetic"``, ``"digits"`` (the cross-domain digits, from ``data_dir``'s MNIST and
        Fashion-MNIST), or a name for :func:`~pflax.data.load_dataset`.
      partition, num_clients, train_per_client, test_per_client, seed, **params: as :func:`federate`.
      data_dir: a folder with ``<dataset>/`` IDX files; None loads through TensorFlow Datasets.
      image_size: the side of ``synthetic``'s images (default 28); other datasets refuse it.

    Returns:
      ``(dataset name, number of classes, train, test)``.

    >>> name, k, train, test = load_federation("synthetic", "fedpac", 3, 20, 10)
    >>> name, k, train.x.shape
    ('synthetic', 10, (3, 20, 28, 28, 1))
    """
    if partition not in PARTITIONS:
        raise DataError(f"unknown partition {partition!r}; choose from {', '.join(PARTITIONS)}")
    if (dataset == "digits") != (partition == "domains"):
        raise DataError("dataset 'digits' goes with partition 'domains' (one client per domain), and only with it")
    if dataset == "digits":
        from .domains import DOMAINS, digit_domains

        _coerce(PARTITIONS["domains"], params)
        if data_dir is None:
            raise DataError("dataset 'digits' is built from MNIST and Fashion-MNIST IDX files: give data_dir")
        if not 1 <= num_clients <= len(DOMAINS):
            raise DataError(f"the digits federation has at most {len(DOMAINS)} clients (one per domain), "
                            f"got {num_clients}")
        train, test, _ = digit_domains(data_dir, DOMAINS[:num_clients], train_per_client, test_per_client, seed)
        return "digits", 10, train, test
    if image_size is not None and dataset != "synthetic":
        raise DataError(f"image_size applies to the synthetic dataset only, not {dataset!r}")
    if dataset == "synthetic" and image_size is not None:
        from .sources import synthetic

        source = synthetic(image_size=check_count(image_size, "image_size"), seed=seed)
    else:
        source = load_dataset(dataset, data_dir, seed=seed)
    train, test = federate(source, partition, num_clients, train_per_client, test_per_client, seed, **params)
    return source.name, source.num_classes, train, test
