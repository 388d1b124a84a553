"""Per-client transforms of partitioned data: label permutations (concept shift) and image rotations
(feature shift).

Each comes as a pure numpy function and a :class:`~pflax.data.ClientData` version that applies client
``r``'s setting to row ``r`` (by ``client_ids``), keeping padded slots at 0:

* :func:`concept_shift_maps` draws one label permutation per group of clients; :func:`relabel` /
  :func:`relabel_clients` apply them (FedPAC Table 3, Xu et al., ICLR 2023: "each group of clients
  will perform a specific permutation of labels").
* :func:`rotation_angles` gives client ``i`` the angle of its group; :func:`rotate_images` /
  :func:`rotate_clients` rotate (FedPAC Table 10: "we rotate the images in each group with a certain
  degree").

The FedPAC settings built on them are in :mod:`pflax.suites.fedpac`.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .partition import check_count
from .sources import DataError

__all__ = ["concept_shift_maps", "relabel", "relabel_clients", "rotation_angles", "rotate_images", "rotate_clients"]


def concept_shift_maps(num_clients: int, num_classes: int, num_groups: int, seed: int = 0) -> np.ndarray:
    """Per-client label maps for a concept shift: one permutation of the labels per group of clients.

    Row ``i`` is the permutation of group ``i mod num_groups`` and maps a true label ``y`` to
    ``row[y]``. The permutations are drawn uniformly at random from ``default_rng(seed)``, one per
    group, redrawn until all groups' permutations are pairwise different (group 0 is not forced to the
    identity).

    Args:
      num_clients: number of clients.
      num_classes: number of labels (>= 2).
      num_groups: number of distinct permutations.
      seed: seeds the draws.

    Returns:
      An int array ``[num_clients, num_classes]``.

    >>> maps = concept_shift_maps(4, 3, 2, seed=0)
    >>> maps.shape, bool((maps[0] == maps[2]).all()), bool((maps[0] == maps[1]).all())
    ((4, 3), True, False)
    """
    num_clients = check_count(num_clients, "num_clients")
    num_classes = check_count(num_classes, "num_classes", 2)
    num_groups = check_count(num_groups, "num_groups")
    if num_groups > math.factorial(min(num_classes, 20)):
        raise DataError(f"{num_groups} groups cannot have distinct permutations of {num_classes} labels")
    rng = np.random.default_rng(seed)
    perms: list[np.ndarray] = []
    while len(perms) < num_groups:
        p = rng.permutation(num_classes)
        if not any(np.array_equal(p, q) for q in perms):
            perms.append(p)
    return np.stack([perms[i % num_groups] for i in range(num_clients)]).astype(np.int64)


def relabel(y: np.ndarray, label_map: np.ndarray) -> np.ndarray:
    """``label_map[y]``: one client's labels under its concept-shift permutation.

    Args:
      y: int labels in ``[0, len(label_map))``.
      label_map: a 1-D int array, e.g. a row of :func:`concept_shift_maps`.

    Returns:
      The mapped labels, shaped like ``y``.

    >>> relabel(np.array([0, 2, 1]), np.array([2, 0, 1])).tolist()
    [2, 1, 0]
    """
    y, label_map = np.asarray(y), np.asarray(label_map)
    if label_map.ndim != 1 or not np.issubdtype(label_map.dtype, np.integer):
        raise DataError(f"label_map must be a 1-D integer array, got shape {label_map.shape}, dtype {label_map.dtype}")
    if y.size and (y.min() < 0 or y.max() >= label_map.size):
        raise DataError(f"labels must lie in [0, {label_map.size}), found [{y.min()}, {y.max()}]")
    return label_map[y]


def relabel_clients(data, label_maps: np.ndarray):
    """Apply per-client label maps to padded :class:`~pflax.data.ClientData` (row ``r`` uses
    ``label_maps[data.client_ids[r]]``); padded slots keep label 0. Eager numpy work, call outside jit.

    Args:
      data: the padded client data.
      label_maps: ``[num_clients, num_classes]`` (:func:`concept_shift_maps`), a row per client id.

    Returns:
      ``data`` with ``y`` replaced.

    >>> from pflax.data import from_partition
    >>> data = from_partition(np.zeros((3, 1)), np.array([0, 1, 2]), [np.array([0, 1]), np.array([2])])
    >>> relabel_clients(data, np.array([[1, 2, 0], [2, 0, 1]])).y.tolist()
    [[1, 2], [1, 0]]
    """
    import jax.numpy as jnp

    maps = np.asarray(label_maps)
    ids = np.asarray(data.client_ids)
    if maps.ndim != 2 or (ids.size and ids.max() >= maps.shape[0]):
        raise DataError(f"label_maps must be [num_clients, num_classes] with a row for every client id "
                        f"(max id {ids.max() if ids.size else None}), got shape {maps.shape}")
    y, mask = np.asarray(data.y), np.asarray(data.mask).astype(bool)
    real = y[mask]
    if real.size and (real.min() < 0 or real.max() >= maps.shape[1]):
        raise DataError(f"labels must lie in [0, {maps.shape[1]}), found [{real.min()}, {real.max()}]")
    mapped = np.take_along_axis(maps[ids], np.where(mask, y, 0), axis=1)
    return data.replace(y=jnp.asarray(np.where(mask, mapped, 0).astype(y.dtype)))


def rotation_angles(num_clients: int, angles: Sequence[float]) -> np.ndarray:
    """Per-client rotation angle in degrees: client ``i`` gets ``angles[i mod len(angles)]``.

    Args:
      num_clients: number of clients.
      angles: one finite angle (degrees) per group.

    Returns:
      A float64 array ``[num_clients]``.

    >>> rotation_angles(3, (0.0, 90.0)).tolist()
    [0.0, 90.0, 0.0]
    """
    num_clients = check_count(num_clients, "num_clients")
    angles = np.asarray(angles, np.float64)
    if angles.ndim != 1 or angles.size == 0 or not np.all(np.isfinite(angles)):
        raise DataError(f"angles must be a non-empty list of finite degrees, got {angles!r}")
    return angles[np.arange(num_clients) % angles.size]


def rotate_images(images: np.ndarray, degrees: float, fill: float | None = None,
                  interpolation: str = "nearest") -> np.ndarray:
    """Rotate ``[n, H, W]`` or ``[n, H, W, C]`` images counter-clockwise by ``degrees`` about their
    centre, keeping the size (torchvision's ``rotate`` convention; nearest is its default
    interpolation). Pixels whose source falls outside the image get ``fill``; ``None`` uses each
    image's per-channel minimum, i.e. the background of normalised (F)MNIST. Pure numpy; the input is
    not modified. Multiples of 90 degrees on square images are exact (``np.rot90``).

    Args:
      images: ``[n, H, W]`` or ``[n, H, W, C]``.
      degrees: the angle, counter-clockwise.
      fill: the value outside the source image (None: per-image, per-channel minimum).
      interpolation: ``"nearest"`` or ``"bilinear"``.

    Returns:
      The rotated images, same shape; float dtype (integer inputs become float32).

    >>> rotate_images(np.array([[[0.0, 1.0], [2.0, 3.0]]]), 90).tolist()
    [[[1.0, 3.0], [0.0, 2.0]]]
    """
    images = np.asarray(images)
    if images.ndim not in (3, 4):
        raise DataError(f"images must be [n, H, W] or [n, H, W, C], got shape {images.shape}")
    if not math.isfinite(degrees):
        raise DataError(f"degrees must be finite, got {degrees}")
    if interpolation not in ("nearest", "bilinear"):
        raise DataError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
    squeeze = images.ndim == 3
    x = images[..., None] if squeeze else images
    n, h, w, c = x.shape
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32
    x = x.astype(dtype, copy=False)
    if fill is None:
        background = x.min(axis=(1, 2), keepdims=True) if n else np.zeros((0, 1, 1, c), dtype)  # [n, 1, 1, c]
    else:
        background = np.full((n, 1, 1, c), fill, dtype)
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    theta = math.radians(degrees)
    cos, sin = math.cos(theta), math.sin(theta)
    # Inverse map (output pixel -> source pixel) for a counter-clockwise turn in image coordinates.
    src_x = cos * (cols - cx) - sin * (rows - cy) + cx
    src_y = sin * (cols - cx) + cos * (rows - cy) + cy

    def gather(sy: np.ndarray, sx: np.ndarray) -> np.ndarray:
        inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
        vals = x[:, np.clip(sy, 0, h - 1), np.clip(sx, 0, w - 1)]  # [n, h, w, c]
        return np.where(inside[None, :, :, None], vals, background)

    if interpolation == "nearest":
        out = gather(np.rint(src_y).astype(np.int64), np.rint(src_x).astype(np.int64))
    else:
        x0, y0 = np.floor(src_x).astype(np.int64), np.floor(src_y).astype(np.int64)
        fx, fy = (src_x - x0)[None, :, :, None], (src_y - y0)[None, :, :, None]
        out = ((1 - fy) * ((1 - fx) * gather(y0, x0) + fx * gather(y0, x0 + 1))
               + fy * ((1 - fx) * gather(y0 + 1, x0) + fx * gather(y0 + 1, x0 + 1)))
    out = out.astype(dtype)
    return out[..., 0] if squeeze else out


def rotate_clients(data, angles: np.ndarray, fill: float | None = None, interpolation: str = "nearest"):
    """Rotate each row of padded :class:`~pflax.data.ClientData` by ``angles[data.client_ids[r]]``
    (NHWC images); padded slots stay 0. Eager numpy work, call outside jit.

    Args:
      data: the padded client data (``x`` NHWC per client).
      angles: degrees per client id (:func:`rotation_angles`).
      fill, interpolation: as in :func:`rotate_images`.

    Returns:
      ``data`` with ``x`` replaced.

    >>> from pflax.data import from_partition
    >>> data = from_partition(np.arange(8.0).reshape(2, 2, 2, 1), np.array([0, 1]), [[0], [1]])
    >>> rotate_clients(data, np.array([0.0, 180.0])).x[..., 0].tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]], [[[7.0, 6.0], [5.0, 4.0]]]]
    """
    import jax.numpy as jnp

    angles = np.asarray(angles, np.float64)
    ids = np.asarray(data.client_ids)
    if angles.ndim != 1 or (ids.size and ids.max() >= angles.size):
        raise DataError(f"angles must be 1-D with an entry for every client id "
                        f"(max id {ids.max() if ids.size else None}), got shape {angles.shape}")
    x, mask = np.asarray(data.x), np.asarray(data.mask).astype(bool)
    out = np.zeros_like(x)
    for r, cid in enumerate(ids.tolist()):
        real = mask[r]
        if real.any():
            out[r, real] = rotate_images(x[r, real], float(angles[cid]), fill, interpolation)
    return data.replace(x=jnp.asarray(out))
