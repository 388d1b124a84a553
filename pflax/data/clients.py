"""Client data as padded arrays with masks, client axis first."""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .sources import DataError

Array = jax.Array


@struct.dataclass
class ClientData:
    """Padded per-client arrays, client axis first (a ``flax.struct`` dataclass, so a pytree).

    Attributes:
      x: samples ``[m, n_max, ...]`` (zeros in padded slots).
      y: int labels ``[m, n_max]`` (0 in padded slots).
      mask: ``[m, n_max]``, True on real samples.
      client_ids: ``[m]``, which of the federation's clients these rows are.
      num_clients, n_max: ``m`` and ``n_max``; ``sizes``: real samples per row ``[m]``.

    >>> data = from_partition(np.zeros((3, 2)), np.array([0, 1, 1]), [np.array([0, 1]), np.array([2])])
    >>> data.num_clients, data.n_max, data.sizes.tolist(), data.take([1]).client_ids.tolist()
    (2, 2, [2, 1], [1])
    """

    x: Array
    y: Array
    mask: Array
    client_ids: Array

    @property
    def num_clients(self) -> int:
        return self.x.shape[0]

    @property
    def n_max(self) -> int:
        return self.x.shape[1]

    @property
    def sizes(self) -> Array:
        return self.mask.sum(axis=1)

    def take(self, ids) -> "ClientData":
        """Rows for the given client ids (positions in this array, which for a full federation are the ids).

        Args:
          ids: row positions (int sequence or array).

        Returns:
          A :class:`ClientData` with those rows, ``client_ids`` included.

        >>> train, _ = toy_federation(num_clients=3)
        >>> train.take([2, 0]).client_ids.tolist()
        [2, 0]
        """
        ids = jnp.asarray(ids, jnp.int32)
        return ClientData(self.x[ids], self.y[ids], self.mask[ids], self.client_ids[ids])


def from_partition(x: np.ndarray, y: np.ndarray, clients: Sequence[np.ndarray], n_max: int | None = None) -> ClientData:
    """Gather a partition (list of index arrays) into padded arrays. Padding repeats nothing: padded
    slots hold zeros and ``mask = False``.

    Args:
      x, y: the pooled samples ``[n, ...]`` and labels ``[n]``.
      clients: one index array into ``x``/``y`` per client.
      n_max: the padded length (default: the largest client); smaller than a client raises
        :class:`DataError`.

    Returns:
      :class:`ClientData` with rows ``0 .. len(clients) - 1`` and ``client_ids = arange(len(clients))``.

    >>> data = from_partition(np.arange(5.0)[:, None], np.arange(5) % 2, [np.array([0, 2]), np.array([4])])
    >>> data.x.shape, data.mask.tolist()
    ((2, 2, 1), [[True, True], [True, False]])
    """
    x, y = np.asarray(x), np.asarray(y)
    sizes = [len(c) for c in clients]
    if not sizes:
        raise DataError("a federation needs at least one client")
    n_max = max(max(sizes), 1) if n_max is None else n_max
    if max(sizes) > n_max:
        raise DataError(f"n_max={n_max} is smaller than the largest client ({max(sizes)} samples)")
    m = len(clients)
    xs = np.zeros((m, n_max) + x.shape[1:], x.dtype)
    ys = np.zeros((m, n_max), np.int32)
    mask = np.zeros((m, n_max), bool)
    for i, idx in enumerate(clients):
        n = len(idx)
        xs[i, :n] = x[idx]
        ys[i, :n] = y[idx]
        mask[i, :n] = True
    return ClientData(jnp.asarray(xs), jnp.asarray(ys), jnp.asarray(mask), jnp.arange(m, dtype=jnp.int32))


def toy_federation(num_clients: int = 2, train_per_client: int = 40, test_per_client: int = 20,
                   image_size: int = 8, seed: int = 0) -> tuple[ClientData, ClientData]:
    """A tiny synthetic federation for examples and quick checks: client ``i`` holds the ``i``-th
    contiguous slice of :func:`pflax.data.synthetic`'s (shuffled) train and test sets.

    Args:
      num_clients: how many clients.
      train_per_client, test_per_client: samples per client (multiples of 10 keep classes balanced).
      image_size: side of the square one-channel images.
      seed: the dataset's seed.

    Returns:
      ``(train, test)`` :class:`ClientData`, rows = clients ``0 .. num_clients - 1``.

    >>> train, test = toy_federation()
    >>> train.x.shape, test.sizes.tolist()
    ((2, 40, 8, 8, 1), [20, 20])
    """
    from .sources import synthetic

    ds = synthetic(train_per_class=-(-num_clients * train_per_client // 10),
                   test_per_class=-(-num_clients * test_per_client // 10), image_size=image_size, seed=seed)
    train = from_partition(ds.x_train, ds.y_train,
                           [range(i * train_per_client, (i + 1) * train_per_client) for i in range(num_clients)])
    test = from_partition(ds.x_test, ds.y_test,
                          [range(i * test_per_client, (i + 1) * test_per_client) for i in range(num_clients)])
    return train, test


def validate(data: ClientData, num_classes: int, sample_shape: tuple | None = None, what: str = "data") -> None:
    """Eager checks with messages that name the problem. Call outside jit (it reads values).

    Raises :class:`DataError` for: inconsistent shapes, a sample shape other than ``sample_shape``,
    non-float ``x`` or non-integer ``y``, labels of real samples outside ``[0, num_classes)``, NaN/Inf
    anywhere in ``x`` (padded slots included), and duplicate client ids. An empty client (all-False
    mask row) is valid: algorithms give it weight 0 and leave its parameters unchanged.

    Args:
      data: the :class:`ClientData` to check.
      num_classes: labels of real samples must lie in ``[0, num_classes)``.
      sample_shape: the shape one sample must have (not checked when None).
      what: the name used in messages (e.g. ``"train"``).

    Returns:
      None.

    >>> train, _ = toy_federation()
    >>> validate(train, num_classes=5, what="train")
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: train: labels must lie in [0, 5), found [0, 9]
    """
    if data.x.ndim < 2 or data.y.ndim != 2 or data.mask.ndim != 2:
        raise DataError(
            f"{what}: expected x [clients, n_max, ...], y and mask [clients, n_max]; "
            f"got x {tuple(data.x.shape)}, y {tuple(data.y.shape)}, mask {tuple(data.mask.shape)}"
        )
    if data.x.shape[:2] != data.y.shape or data.y.shape != data.mask.shape:
        raise DataError(
            f"{what}: x {tuple(data.x.shape)}, y {tuple(data.y.shape)} and mask {tuple(data.mask.shape)} disagree on [clients, n_max]"
        )
    if data.client_ids.shape != (data.x.shape[0],):
        raise DataError(f"{what}: client_ids must have shape ({data.x.shape[0]},), got {tuple(data.client_ids.shape)}")
    if sample_shape is not None and tuple(data.x.shape[2:]) != tuple(sample_shape):
        raise DataError(f"{what}: samples have shape {tuple(data.x.shape[2:])}, the model expects {tuple(sample_shape)}")
    if not jnp.issubdtype(data.x.dtype, jnp.floating):
        raise DataError(f"{what}: x must be floating point (normalised images), got {data.x.dtype}")
    if not jnp.issubdtype(data.y.dtype, jnp.integer):
        raise DataError(f"{what}: y must hold integer class labels, got {data.y.dtype}")
    y = np.asarray(data.y)
    mask = np.asarray(data.mask).astype(bool)
    real = y[mask]
    if real.size and (real.min() < 0 or real.max() >= num_classes):
        raise DataError(f"{what}: labels must lie in [0, {num_classes}), found [{real.min()}, {real.max()}]")
    # Padded slots are checked too: a NaN there would reach the masked sums as 0 * NaN = NaN.
    if not np.all(np.isfinite(np.asarray(data.x))):
        where = "real samples" if not np.all(np.isfinite(np.asarray(data.x)[mask])) else "padded slots"
        raise DataError(f"{what}: x contains NaN or Inf (in {where})")
    ids = np.asarray(data.client_ids)
    unique, counts = np.unique(ids, return_counts=True)
    if np.any(counts > 1):
        raise DataError(f"{what}: duplicate client ids {unique[counts > 1].tolist()}")
