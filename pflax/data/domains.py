"""Cross-domain federations: one client per domain (FedPick's and FedBN's feature-shift setting).

Offline benchmark, "Digits-5 offline" (:func:`digit_domains`), built from the real MNIST and
Fashion-MNIST files. The five domains share MNIST's label space and differ in low-level statistics,
the way MNIST, MNIST-M, USPS, SynthDigits and SVHN do. Every image is RGB 32x32 (the 28x28 digit
zero-padded by 2 px), scaled to [0, 1] and normalised with mean 0.5 / std 0.5 per channel (FedBN's
transform). Each transform is seeded and deterministic:

* ``mnist``: the digit, white on black, in all three channels.
* ``mnistm``: MNIST-M's recipe with Fashion-MNIST as the texture source: a random Fashion-MNIST
  image (random flips), tinted with a random colour per channel and offset, is the background, and
  the output is ``|background - digit|`` per channel.
* ``inverse``: a digit in a random saturated colour on a light background (inverted contrast).
* ``rotated``: the digit rotated by +-[30, 60] degrees and scaled by [0.75, 1.0] (bilinear), on a
  dark background of a random colour.
* ``noisy``: low contrast (the digit mapped to [0.3, 0.7]), a 3x3 box blur and Gaussian pixel noise
  with std 0.15, clipped to [0, 1].

Training: ``train_per_domain`` (FedPick: 1000) images per domain, drawn from MNIST's training set
without overlap between domains. Test: each domain's transform of the *full* MNIST test set
(10,000 images), as FedPick evaluates on each domain's full test set.

Named Digits-Five through TensorFlow Datasets (:func:`digits_five_tfds`) needs a network and the
``tfds`` extra; MNIST and SVHN are in the TFDS catalogue, the other domains are read from
``<data_dir>/<domain>/data.npz`` (``x_train, y_train, x_test, y_test``, uint8 images) when given.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .clients import ClientData, from_partition
from .sources import DataError, load_idx_dir, load_tfds, read_idx, read_usps

DOMAINS = ("mnist", "mnistm", "inverse", "rotated", "noisy")
# Real digit datasets other than MNIST that the federation can take as a domain of their own.
REAL_DOMAINS = ("usps",)
IMAGE_SIZE = 32


def _raw_idx(directory: Path) -> dict[str, np.ndarray]:
    """uint8 images and int labels of an MNIST-style IDX directory (no normalisation)."""
    if not directory.is_dir():
        raise DataError(f"data directory {str(directory)!r} does not exist")
    out = {}
    for key, stem in (("x_train", "train-images"), ("y_train", "train-labels"), ("x_test", "t10k-images"),
                      ("y_test", "t10k-labels")):
        hits = sorted(p for p in directory.iterdir() if p.name.startswith(stem))
        if not hits:
            raise DataError(f"{directory}: missing IDX file {stem}-*-ubyte[.gz]")
        out[key] = read_idx(hits[0])
    return out


def _pad32(gray: np.ndarray) -> np.ndarray:
    """[n, 28, 28] in [0, 1] -> [n, 32, 32]."""
    pad = (IMAGE_SIZE - gray.shape[1]) // 2
    return np.pad(gray, ((0, 0), (pad, pad), (pad, pad)))


def _random_colours(rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, size=(n, 1, 1, 3)).astype(np.float32)


def _affine(gray: np.ndarray, angle: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Rotate by ``angle`` (radians) and scale about the centre, bilinear, zeros outside."""
    n, h, w = gray.shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float32) - cy, np.arange(w, dtype=np.float32) - cx, indexing="ij")
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    s = scale[:, None, None]
    # Inverse map: output pixel -> source coordinates.
    src_y = (cos * yy - sin * xx) / s + cy
    src_x = (sin * yy + cos * xx) / s + cx
    y0, x0 = np.floor(src_y).astype(int), np.floor(src_x).astype(int)
    fy, fx = src_y - y0, src_x - x0
    idx = np.arange(n)[:, None, None]

    def at(yi, xi):
        ok = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
        return np.where(ok, gray[idx, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)], 0.0)

    return ((1 - fy) * (1 - fx) * at(y0, x0) + (1 - fy) * fx * at(y0, x0 + 1)
            + fy * (1 - fx) * at(y0 + 1, x0) + fy * fx * at(y0 + 1, x0 + 1)).astype(np.float32)


def _box_blur(img: np.ndarray) -> np.ndarray:
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    h, w = img.shape[1:3]
    return sum(padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3)) / 9.0


def transform(domain: str, digits: np.ndarray, rng: np.random.Generator, textures: np.ndarray | None = None) -> np.ndarray:
    """Apply ``domain``'s transform (see the module docstring) to uint8 digits.

    Args:
      domain: one of :data:`DOMAINS`.
      digits: uint8 ``[n, 28, 28]``.
      rng: the generator of the domain's random colours, textures, angles and noise.
      textures: uint8 ``[m, 28, 28]`` (Fashion-MNIST), needed by ``mnistm``.

    Returns:
      Float32 RGB ``[n, 32, 32, 3]`` in [0, 1].

    >>> out = transform("mnist", np.full((2, 28, 28), 255, np.uint8), np.random.default_rng(0))
    >>> out.shape, float(out[0, 0, 0, 0]), float(out[0, 16, 16, 0])
    ((2, 32, 32, 3), 0.0, 1.0)
    """
    g = _pad32(digits.astype(np.float32) / 255.0)
    n = g.shape[0]
    if domain == "mnist":
        rgb = np.repeat(g[..., None], 3, axis=-1)
    elif domain == "mnistm":
        if textures is None or len(textures) == 0:
            raise DataError("the mnistm domain needs Fashion-MNIST images as its texture source")
        pick = rng.integers(0, len(textures), n)
        bg = _pad32(textures[pick].astype(np.float32) / 255.0)
        flip_h, flip_v = rng.random(n) < 0.5, rng.random(n) < 0.5
        bg[flip_h] = bg[flip_h, :, ::-1]
        bg[flip_v] = bg[flip_v, ::-1, :]
        bg = bg[..., None] * _random_colours(rng, n, 0.3, 1.0) + _random_colours(rng, n, 0.0, 0.4)
        rgb = np.abs(np.clip(bg, 0, 1) - g[..., None])
    elif domain == "inverse":
        colour = _random_colours(rng, n, 0.0, 0.8)
        rgb = 1.0 - g[..., None] * (1.0 - colour)
    elif domain == "rotated":
        angle = np.deg2rad(rng.uniform(30, 60, n) * rng.choice([-1.0, 1.0], n))
        moved = _affine(g, angle, rng.uniform(0.75, 1.0, n))
        background = _random_colours(rng, n, 0.0, 0.35)
        rgb = background + moved[..., None] * (1.0 - background)
    elif domain == "noisy":
        rgb = np.repeat((0.3 + 0.4 * g)[..., None], 3, axis=-1)
        rgb = _box_blur(rgb) + rng.normal(0.0, 0.15, rgb.shape)
    else:
        raise DataError(f"unknown domain {domain!r}; choose from {DOMAINS}")
    return np.clip(rgb, 0.0, 1.0).astype(np.float32)


def normalize(rgb01: np.ndarray) -> np.ndarray:
    """FedBN's ``Normalize((0.5,) * 3, (0.5,) * 3)``: [0, 1] -> [-1, 1].

    Args:
      rgb01: images in [0, 1].

    Returns:
      ``(rgb01 - 0.5) / 0.5`` as float32.

    >>> normalize(np.array([0.0, 0.5, 1.0])).tolist()
    [-1.0, 0.0, 1.0]
    """
    return ((rgb01 - 0.5) / 0.5).astype(np.float32)


def load_usps(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The real USPS digits from ``usps.h5`` (``train/data`` [7291, 256] and ``test/data`` [2007, 256],
    16x16 greyscale in [0, 1], with ``train/target`` and ``test/target``), resized bilinearly to RGB 32x32
    in [0, 1], as FedBN and FedPick feed every domain. Needs the ``h5py`` package (the ``digits`` extra).

    Args:
      path: the ``usps.h5`` file.

    Returns:
      ``{"x_train", "y_train", "x_test", "y_test"}``: float32 images ``[n, 32, 32, 3]``, int32 labels.

    >>> load_usps("/no/such/usps.h5")
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: USPS file '/no/such/usps.h5' does not exist
    """
    import jax

    out = read_usps(path)
    for split in ("train", "test"):
        gray = out[f"x_{split}"]
        big = np.asarray(jax.image.resize(gray, (len(gray), IMAGE_SIZE, IMAGE_SIZE), "linear"))
        out[f"x_{split}"] = np.repeat(np.clip(big, 0.0, 1.0)[..., None], 3, axis=-1)
    return out


def digit_domains(data_dir: str | os.PathLike, domains: tuple[str, ...] = DOMAINS, train_per_domain: int = 1000,
                  test_per_domain: int | None = None, seed: int = 0) -> tuple[ClientData, ClientData, list[str]]:
    """The offline cross-domain federation: client ``i`` is domain ``domains[i]``.

    Args:
      data_dir: holds ``mnist/`` and ``fashion_mnist/`` IDX folders (the latter only for ``mnistm``).
      domains: names from :data:`DOMAINS` and :data:`REAL_DOMAINS`, in client order. ``usps`` is the real
        USPS (``<data_dir>/usps/usps.h5``, :func:`load_usps`), with its own training and test images.
      train_per_domain: training images per domain; the MNIST-based ones take disjoint MNIST images
        (FedPick: 1000).
      test_per_domain: test images per domain; None keeps the full 10,000-image test set.
      seed: seeds the image choice and every domain's transform.

    Returns:
      ``(train, test, names)``: padded :class:`~pflax.data.ClientData` and the domain names.

    >>> digit_domains("/no/such/folder")
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: data directory '/no/such/folder/mnist' does not exist
    """
    root = Path(data_dir)
    if not domains:
        raise DataError("at least one domain is needed")
    unknown = [d for d in domains if d not in DOMAINS + REAL_DOMAINS]
    if unknown:
        raise DataError(f"unknown domains {unknown}; choose from {DOMAINS + REAL_DOMAINS}")
    if train_per_domain < 1:
        raise DataError(f"train_per_domain must be >= 1, got {train_per_domain}")
    mnist = _raw_idx(root / "mnist")
    if train_per_domain * len(domains) > len(mnist["y_train"]):
        raise DataError(f"{len(domains)} domains x {train_per_domain} images exceed MNIST's training set")
    textures = _raw_idx(root / "fashion_mnist")["x_train"] if "mnistm" in domains else None
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(mnist["y_train"]))
    n_test = len(mnist["y_test"]) if test_per_domain is None else min(test_per_domain, len(mnist["y_test"]))
    test_idx = np.arange(len(mnist["y_test"])) if test_per_domain is None else rng.permutation(len(mnist["y_test"]))[:n_test]
    xs_tr, ys_tr, xs_te, ys_te = [], [], [], []
    for i, domain in enumerate(domains):
        if domain == "usps":  # a real domain: its own images, sampled like MNIST's
            usps = load_usps(root / "usps" / "usps.h5")
            r_usps = np.random.default_rng([seed, i, 2])
            if train_per_domain > len(usps["y_train"]):
                raise DataError(f"USPS has {len(usps['y_train'])} training images, asked for {train_per_domain}")
            pick = r_usps.permutation(len(usps["y_train"]))[:train_per_domain]
            tests = np.arange(len(usps["y_test"])) if test_per_domain is None else \
                r_usps.permutation(len(usps["y_test"]))[:min(test_per_domain, len(usps["y_test"]))]
            xs_tr.append(normalize(usps["x_train"][pick]))
            ys_tr.append(usps["y_train"][pick])
            xs_te.append(normalize(usps["x_test"][tests]))
            ys_te.append(usps["y_test"][tests])
            continue
        # One generator per (seed, domain, split): a domain's images do not depend on the others.
        idx = order[i * train_per_domain:(i + 1) * train_per_domain]
        r_train = np.random.default_rng([seed, i, 0])
        r_test = np.random.default_rng([seed, i, 1])
        xs_tr.append(normalize(transform(domain, mnist["x_train"][idx], r_train, textures)))
        ys_tr.append(mnist["y_train"][idx].astype(np.int32))
        xs_te.append(normalize(transform(domain, mnist["x_test"][test_idx], r_test, textures)))
        ys_te.append(mnist["y_test"][test_idx].astype(np.int32))
    train = _stack(xs_tr, ys_tr)
    test = _stack(xs_te, ys_te)
    return train, test, list(domains)


def _stack(xs: list[np.ndarray], ys: list[np.ndarray]) -> ClientData:
    x = np.concatenate(xs)
    y = np.concatenate(ys)
    offsets = np.cumsum([0] + [len(a) for a in ys])
    return from_partition(x, y, [np.arange(offsets[i], offsets[i + 1]) for i in range(len(ys))])


DIGITS_FIVE = ("mnistm", "mnist", "usps", "synth", "svhn")
TFDS_NAMES = {"mnist": "mnist", "svhn": "svhn_cropped"}


def _resize_rgb32(x: np.ndarray) -> np.ndarray:
    """uint8 [n, h, w(, c)] -> float [n, 32, 32, 3] in [0, 1] by nearest-neighbour resampling."""
    x = x.astype(np.float32) / 255.0
    if x.ndim == 3:
        x = x[..., None]
    if x.shape[-1] == 1:
        x = np.repeat(x, 3, axis=-1)
    h, w = x.shape[1:3]
    rows = (np.arange(IMAGE_SIZE) * h // IMAGE_SIZE)
    cols = (np.arange(IMAGE_SIZE) * w // IMAGE_SIZE)
    return x[:, rows][:, :, cols]


def digits_five_tfds(data_dir: str | None = None, train_per_domain: int = 1000, seed: int = 0,
                     domains: tuple[str, ...] = DIGITS_FIVE) -> tuple[ClientData, ClientData, list[str]]:
    """Digits-Five (FedPick, FedBN): MNIST and SVHN through TensorFlow Datasets (network on first use);
    MNIST-M, USPS and SynthDigits from ``<data_dir>/<domain>/data.npz``. Images RGB 32x32, normalised
    to [-1, 1]; ``train_per_domain`` training images per domain; full test sets.

    Args:
      data_dir: TFDS's folder and the parent of the ``<domain>/data.npz`` folders.
      train_per_domain: training images drawn per domain.
      seed: seeds the draw.
      domains: a subset of :data:`DIGITS_FIVE`, in client order.

    Returns:
      ``(train, test, names)``: padded :class:`~pflax.data.ClientData` and the domain names.

    >>> digits_five_tfds(domains=("usps",))
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: domain 'usps' is not in TensorFlow Datasets; pass data_dir with usps/data.npz
    """
    rng = np.random.default_rng(seed)
    xs_tr, ys_tr, xs_te, ys_te = [], [], [], []
    for domain in domains:
        if domain in TFDS_NAMES:
            ds = load_tfds(TFDS_NAMES[domain], data_dir)
            # load_tfds normalises with the dataset's statistics; map back to [0, 1] before FedBN's transform.
            raw = _denormalize(ds.x_train, domain), _denormalize(ds.x_test, domain)
            x_train, y_train, x_test, y_test = raw[0], ds.y_train, raw[1], ds.y_test
        else:
            if data_dir is None:
                raise DataError(f"domain {domain!r} is not in TensorFlow Datasets; pass data_dir with {domain}/data.npz")
            ds = load_idx_dir(Path(data_dir) / domain, name=domain, num_classes=10)
            x_train, y_train = _denormalize(ds.x_train, domain), ds.y_train
            x_test, y_test = _denormalize(ds.x_test, domain), ds.y_test
        if len(y_train) < train_per_domain:
            raise DataError(f"{domain}: {len(y_train)} training images, fewer than {train_per_domain}")
        pick = rng.permutation(len(y_train))[:train_per_domain]
        xs_tr.append(normalize(_resize_rgb32(_to_uint8(x_train[pick]))))
        ys_tr.append(y_train[pick].astype(np.int32))
        xs_te.append(normalize(_resize_rgb32(_to_uint8(x_test))))
        ys_te.append(y_test.astype(np.int32))
    return _stack(xs_tr, ys_tr), _stack(xs_te, ys_te), list(domains)


def _to_uint8(x01: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x01, 0.0, 1.0) * 255.0).astype(np.uint8)


def _denormalize(x: np.ndarray, domain: str) -> np.ndarray:
    from .sources import NORMALIZATION

    mean, std = NORMALIZATION.get(domain, ((0.5,) * x.shape[-1], (0.5,) * x.shape[-1]))
    return np.clip(x * np.asarray(std, np.float32) + np.asarray(mean, np.float32), 0.0, 1.0)
