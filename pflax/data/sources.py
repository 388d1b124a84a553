"""Where data comes from: a local IDX/npz directory (offline), TensorFlow Datasets, or a built-in
procedurally generated dataset. Every source returns a :class:`Dataset` of numpy arrays, images NHWC
float32 already normalised, labels int32.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import struct
from pathlib import Path

import numpy as np

__all__ = ["Dataset", "DataError", "load_idx_dir", "load_dataset", "load_tfds", "read_usps", "synthetic", "NORMALIZATION"]


class DataError(ValueError):
    """Raised for missing, corrupt or inconsistent data; a ``ValueError``, so callers may catch either.

    >>> issubclass(DataError, ValueError)
    True
    """


# Official FedPAC transforms (``data_loader.py`` of https://github.com/JianXu95/FedPAC): FMNIST/EMNIST
# use the MNIST statistics.
NORMALIZATION = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.1307,), (0.3081,)),
    "emnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
}


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A dataset's two splits as numpy arrays, checked on construction.

    Attributes:
      name: the dataset's name (picks :data:`NORMALIZATION` statistics in the loaders).
      x_train, x_test: images ``[n, H, W, C]``, float32, normalised.
      y_train, y_test: int labels ``[n]`` in ``[0, num_classes)``.
      num_classes: number of classes.

    Raises :class:`DataError` when a split's images and labels disagree in number, a label is out of
    range or an image holds NaN/Inf.

    >>> z = np.zeros((2, 2, 2, 1), np.float32)
    >>> Dataset("tiny", z, np.array([0, 1]), z[:1], np.array([1]), num_classes=2).x_test.shape
    (1, 2, 2, 1)
    """
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    def __post_init__(self):
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.shape[0] != y.shape[0]:
                raise DataError(f"{self.name}: {split} has {x.shape[0]} images but {y.shape[0]} labels")
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                raise DataError(
                    f"{self.name}: {split} labels must lie in [0, {self.num_classes}), found [{y.min()}, {y.max()}]"
                )
            if not np.all(np.isfinite(x)):
                raise DataError(f"{self.name}: {split} images contain NaN or Inf")


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (optionally gzipped), validating its header against its payload.

    Args:
      path: an IDX file of unsigned bytes (magic ``0x0000 08 <ndim>``), plain or ``.gz``.

    Returns:
      The uint8 array of the shape the header gives. Raises :class:`DataError` for a bad magic number
      or a header/payload mismatch, ``FileNotFoundError`` for a missing file.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "t.idx").write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9]))
    ...     print(read_idx(Path(folder) / "t.idx").tolist())
    [7, 8, 9]
    """
    path = Path(path)
    try:
        with _open(path) as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot read IDX file ({err}); is it truncated or corrupt?") from err
    if len(raw) < 4:
        raise DataError(f"{path}: too short to be an IDX file ({len(raw)} bytes)")
    zero, dtype_code, ndim = raw[0] * 256 + raw[1], raw[2], raw[3]
    if zero != 0 or dtype_code != 0x08:
        raise DataError(f"{path}: bad IDX magic number (expected unsigned-byte data, got 0x{raw[:4].hex()})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    shape = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise DataError(
            f"{path}: IDX header promises {expected} bytes for shape {shape} but the file holds {len(raw) - header}"
        )
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


_IDX_NAMES = {
    "x_train": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "y_train": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "x_test": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "y_test": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}


def _find(directory: Path, stems: tuple[str, ...]) -> Path | None:
    for stem in stems:
        for suffix in (".gz", ""):
            candidate = directory / f"{stem}{suffix}"
            if candidate.exists():
                return candidate
    return None


def _normalize(images: np.ndarray, name: str) -> np.ndarray:
    x = images.astype(np.float32) / 255.0
    if x.ndim == 3:
        x = x[..., None]
    mean, std = NORMALIZATION.get(name, ((0.5,) * x.shape[-1], (0.5,) * x.shape[-1]))
    return (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def load_idx_dir(directory: str | os.PathLike, name: str | None = None, num_classes: int | None = None) -> Dataset:
    """Load MNIST-style data from ``directory``: the four IDX files (``.gz`` or plain) or ``data.npz``
    with ``x_train, y_train, x_test, y_test`` (uint8 images). Images are scaled to [0, 1] and
    normalised with the dataset's statistics (FedPAC's transforms).

    Args:
      directory: the folder holding the files.
      name: the dataset's name (default: the folder's name); picks the :data:`NORMALIZATION` entry
        (mean/std 0.5 for names not in it).
      num_classes: default ``max label + 1``.

    Returns:
      A :class:`Dataset`, images NHWC float32. Raises :class:`DataError` for a missing folder or file.

    >>> import tempfile
    >>> img, labels = np.zeros((2, 3, 3), np.uint8), np.array([0, 1])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     np.savez(f"{folder}/data.npz", x_train=img, y_train=labels, x_test=img, y_test=labels)
    ...     print(load_idx_dir(folder, name="mnist").x_train.shape)
    (2, 3, 3, 1)
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"data directory {str(directory)!r} does not exist")
    name = name or directory.name
    npz = directory / "data.npz"
    arrays: dict[str, np.ndarray] = {}
    if npz.exists():
        try:
            with np.load(npz) as f:
                arrays = {k: f[k] for k in _IDX_NAMES}
        except KeyError as err:
            raise DataError(f"{npz}: missing array {err}; expected x_train, y_train, x_test, y_test") from err
        except Exception as err:  # zipfile / pickle errors on corrupt files
            raise DataError(f"{npz}: cannot read ({err})") from err
    else:
        missing = []
        for key, stems in _IDX_NAMES.items():
            path = _find(directory, stems)
            if path is None:
                missing.append(stems[0] + "[.gz]")
            else:
                arrays[key] = read_idx(path)
        if missing:
            raise DataError(f"{directory}: missing IDX files: {', '.join(missing)}")
    y_train = arrays["y_train"].astype(np.int32)
    y_test = arrays["y_test"].astype(np.int32)
    k = num_classes or int(max(y_train.max(), y_test.max())) + 1
    return Dataset(name, _normalize(arrays["x_train"], name), y_train, _normalize(arrays["x_test"], name), y_test, k)


def load_tfds(name: str, data_dir: str | None = None) -> Dataset:
    """Load a named dataset with TensorFlow Datasets (needs the ``tfds`` extra and a network on first use).

    Args:
      name: a TFDS name such as ``"mnist"``, ``"fashion_mnist"``, ``"emnist/byclass"``, ``"cifar10"``.
      data_dir: TFDS's download/cache folder (TFDS's default when None).

    Returns:
      A :class:`Dataset` normalised with :data:`NORMALIZATION`. Raises :class:`DataError` when TFDS
      is missing or cannot load the dataset (offline, use :func:`load_idx_dir`).

    >>> load_tfds("mnist").x_train.shape  # doctest: +SKIP
    (60000, 28, 28, 1)
    """
    try:
        import tensorflow_datasets as tfds  # type: ignore
    except ImportError as err:
        raise DataError(
            f"loading {name!r} by name needs TensorFlow Datasets: pip install 'pflax[tfds]'. "
            "Offline, point --data-dir at a folder of IDX/npz files instead."
        ) from err
    try:
        splits = tfds.as_numpy(tfds.load(name, split=["train", "test"], batch_size=-1, as_supervised=True, data_dir=data_dir))
    except Exception as err:
        raise DataError(
            f"TensorFlow Datasets could not load {name!r} ({type(err).__name__}: {err}). "
            "It downloads on first use, so it needs a network; offline, use --data-dir with IDX/npz files."
        ) from err
    (x_train, y_train), (x_test, y_test) = splits
    key = {"emnist/byclass": "emnist", "cifar10": "cifar10"}.get(name, name)
    k = int(max(y_train.max(), y_test.max())) + 1
    return Dataset(
        name, _normalize(x_train, key), y_train.astype(np.int32), _normalize(x_test, key), y_test.astype(np.int32), k
    )


def synthetic(
    num_classes: int = 10,
    train_per_class: int = 1200,
    test_per_class: int = 200,
    image_size: int = 28,
    seed: int = 0,
    noise: float = 0.6,
) -> Dataset:
    """A procedurally generated image dataset for offline demos and fast tests.

    Each class is a fixed random smooth pattern (a sum of a few oriented sinusoids); a sample is its
    class pattern, randomly shifted by up to 2 pixels and scaled in contrast, plus Gaussian noise.
    Hard enough that a linear model does not saturate, easy enough that the FedPAC CNN learns it in a
    few rounds. Fully determined by ``seed``.

    Args:
      num_classes: number of classes (patterns).
      train_per_class, test_per_class: samples per class in each split (labels shuffled).
      image_size: side of the square one-channel images.
      seed: seeds patterns, shifts, contrast and noise.
      noise: standard deviation of the Gaussian pixel noise.

    Returns:
      A :class:`Dataset` named ``"synthetic"``, images ``[n, image_size, image_size, 1]`` float32.

    >>> ds = synthetic(num_classes=3, train_per_class=2, test_per_class=1, image_size=4)
    >>> ds.x_train.shape, sorted(ds.y_test.tolist())
    ((6, 4, 4, 1), [0, 1, 2])
    """
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, image_size + 4, dtype=np.float32)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    patterns = []
    for _ in range(num_classes):
        img = np.zeros_like(yy)
        for _ in range(3):
            freq, angle, phase = rng.uniform(1.5, 4.0), rng.uniform(0, np.pi), rng.uniform(0, 2 * np.pi)
            img += np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + phase)
        patterns.append(img / 3.0)
    patterns = np.stack(patterns)

    def make(per_class: int):
        labels = np.repeat(np.arange(num_classes, dtype=np.int32), per_class)
        rng.shuffle(labels)
        shifts = rng.integers(0, 5, size=(labels.size, 2))
        contrast = rng.uniform(0.6, 1.4, size=(labels.size, 1, 1)).astype(np.float32)
        crops = np.stack(
            [patterns[c, dy : dy + image_size, dx : dx + image_size] for c, (dy, dx) in zip(labels, shifts)]
        )
        images = contrast * crops + noise * rng.standard_normal(crops.shape).astype(np.float32)
        return images[..., None].astype(np.float32), labels

    x_train, y_train = make(train_per_class)
    x_test, y_test = make(test_per_class)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, num_classes)


_DIR_NAMES = {"fashion_mnist": "fashion_mnist", "fmnist": "fashion_mnist", "mnist": "mnist"}


def read_usps(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The real USPS digits as ``usps.h5`` stores them (``train/data`` [7291, 256] and ``test/data``
    [2007, 256], 16x16 greyscale in [0, 1], with ``train/target`` and ``test/target``). Needs the
    ``h5py`` package (the ``digits`` extra).

    Args:
      path: the ``usps.h5`` file.

    Returns:
      ``{"x_train", "y_train", "x_test", "y_test"}``: float32 images ``[n, 16, 16]`` in [0, 1], int32 labels.

    >>> read_usps("/no/such/usps.h5")
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: USPS file '/no/such/usps.h5' does not exist
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"USPS file {str(path)!r} does not exist")
    try:
        import h5py
    except ImportError:
        raise DataError("reading usps.h5 needs h5py: pip install 'pflax[digits]'") from None
    out = {}
    with h5py.File(path, "r") as f:
        for split in ("train", "test"):
            out[f"x_{split}"] = np.asarray(f[f"{split}/data"], np.float32).reshape(-1, 16, 16)
            out[f"y_{split}"] = np.asarray(f[f"{split}/target"], np.int32)
    return out


def _usps_dataset(path: Path) -> Dataset:
    """USPS at its own 16x16 greyscale, normalised like every dataset without statistics of its own."""
    arrays = read_usps(path)
    mean, std = NORMALIZATION.get("usps", ((0.5,), (0.5,)))
    scale = lambda x: ((x[..., None] - np.float32(mean[0])) / np.float32(std[0])).astype(np.float32)  # noqa: E731
    return Dataset("usps", scale(arrays["x_train"]), arrays["y_train"], scale(arrays["x_test"]), arrays["y_test"], 10)


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, seed: int = 0) -> Dataset:
    """Resolve a dataset by name: ``synthetic`` (built in), a local directory when ``data_dir`` is
    given (``data_dir/<name>/`` or ``data_dir`` itself; for ``usps``, the ``usps.h5`` file there when it
    has one, at its own 16x16 greyscale), else TensorFlow Datasets.

    Args:
      name: ``"synthetic"``, or a dataset name (``"fmnist"``/``"fashion-mnist"`` map to
        ``fashion_mnist``); case and ``-``/``_`` are ignored.
      data_dir: a folder for :func:`load_idx_dir`; None loads through :func:`load_tfds`.
      seed: the seed of ``synthetic`` (ignored otherwise).

    Returns:
      A :class:`Dataset`. Raises :class:`DataError` when ``data_dir`` does not exist.

    >>> load_dataset("mnist", data_dir="/no/such/folder")
    Traceback (most recent call last):
      ...
    pflax.data.sources.DataError: data directory '/no/such/folder' does not exist
    """
    key = name.lower().replace("-", "_")
    if key == "synthetic":
        return synthetic(seed=seed)
    canonical = _DIR_NAMES.get(key, key)
    if data_dir is not None:
        root = Path(data_dir)
        if not root.is_dir():
            raise DataError(f"data directory {str(root)!r} does not exist")
        sub = root / canonical
        folder = sub if sub.is_dir() else root
        if canonical == "usps" and (folder / "usps.h5").is_file():
            return _usps_dataset(folder / "usps.h5")
        return load_idx_dir(folder, name=canonical)
    return load_tfds(canonical)
