"""Partitions shared with Flower: any ``flwr_datasets`` partitioner, turned into pflax client arrays.

Flower Datasets (https://flower.ai/docs/datasets/) publishes partitioners (IID, Dirichlet, pathological,
shard, size-based, ...) that many FL papers and Flower baselines use. :func:`from_flwr_partitioner`
applies one to a label array or to an in-memory Hugging Face ``datasets.Dataset`` and gathers the
partitions into padded :class:`~pflax.data.ClientData`, so a pflax run can use exactly the partition
a Flower experiment used. pflax's own partitioners (:mod:`pflax.data.partition`) stay the default.
Needs ``pip install "pflax[flower]"`` (``flwr-datasets``, which brings ``datasets``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .clients import ClientData, from_partition
from .sources import DataError

__all__ = ["from_flwr_partitioner"]

_ROW = "_pflax_row"  # the column that carries each sample's position through the partitioner


def from_flwr_partitioner(partitioner: Any, data: Any, x: np.ndarray | None = None, *, label: str = "label",
                          image: str = "image", n_max: int | None = None) -> ClientData:
    """Split ``data`` with a ``flwr_datasets`` partitioner; client ``i`` is the partitioner's partition ``i``.

    Args:
      partitioner: a fresh ``flwr_datasets.partitioner.Partitioner`` (one whose ``dataset`` is not set
        yet; it is given ``data`` here). Its ``partition_by`` column, if it has one, must be ``label``.
      data: the labels, an int array ``[n]`` (then ``x`` is required), or an in-memory
        ``datasets.Dataset`` with a ``label`` column (and an ``image`` column unless ``x`` is given).
      x: the samples ``[n, ...]``, row ``j`` for label ``j``; overrides the ``image`` column.
      label, image: the column names in ``data``.
      n_max: the padded length (default: the largest partition).

    Returns:
      :class:`~pflax.data.ClientData` with ``partitioner.num_partitions`` rows; every sample is in the
      partition the partitioner put it in, in the partitioner's order.

    >>> from flwr_datasets.partitioner import IidPartitioner
    >>> labels = np.arange(12) % 3
    >>> train = from_flwr_partitioner(IidPartitioner(num_partitions=3), labels, x=np.arange(12.0)[:, None])
    >>> train.num_clients, train.sizes.tolist(), sorted(np.asarray(train.x[train.mask]).ravel().tolist()) == list(range(12))
    (3, [4, 4, 4], True)
    """
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - the extra is missing
        raise ImportError("from_flwr_partitioner needs flwr-datasets: pip install 'pflax[flower]'") from err
    if isinstance(data, datasets.Dataset):
        if label not in data.column_names:
            raise DataError(f"the dataset has no {label!r} column (it has: {', '.join(data.column_names)})")
        labels = np.asarray(data[label])
        if x is None:
            if image not in data.column_names:
                raise DataError(f"give x, or a dataset with an {image!r} column")
            x = np.asarray(data.with_format("numpy")[image])
        table = data.select_columns([label])
    else:
        labels = np.asarray(data)
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"labels must be an int array [n], got {labels.dtype} {labels.shape}")
        if x is None:
            raise DataError("with a label array, give the samples x as well")
        table = datasets.Dataset.from_dict({label: labels})
    x = np.asarray(x)
    if x.shape[0] != labels.shape[0]:
        raise DataError(f"x has {x.shape[0]} samples but there are {labels.shape[0]} labels")
    partitioner.dataset = table.add_column(_ROW, np.arange(len(table)))
    clients = [np.asarray(partitioner.load_partition(i)[_ROW], np.int64) for i in range(partitioner.num_partitions)]
    return from_partition(x, labels, clients, n_max=n_max)
