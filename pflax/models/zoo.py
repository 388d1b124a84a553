"""The model zoo: the papers' networks as :class:`~pflax.models.SplitModel` s.

* :func:`fedpac_cnn` (:func:`fedpac_fmnist_cnn`, :func:`fedpac_cifar_cnn`): the CNNs of FedPAC's
  official code (Xu et al., ICLR 2023; ``models/cnn.py`` of https://github.com/JianXu95/FedPAC),
  feature dimension 128.
* :func:`mlp`: FedCollab's "2NN" (Bao et al., ICML 2023), flatten -> 200 -> ReLU -> 200 -> ReLU -> K.

BatchNorm backbones (FedBN, FedPick) are in :mod:`pflax.models.bn`.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from .kernels import max_pool2
from .layers import TorchConv, TorchDense, leaky_relu
from .split import SplitModel

Array = jax.Array

__all__ = ["FedPACConvBody", "MLPBody", "LinearHead", "fedpac_cnn", "fedpac_fmnist_cnn", "fedpac_cifar_cnn", "mlp"]


class FedPACConvBody(nn.Module):
    """Feature extractor of the FedPAC CNNs (official ``models/cnn.py``), NHWC input.

    FMNIST/EMNIST (``conv_channels=(16, 32)``, 28x28x1): conv5 -> LReLU -> pool -> conv5 pad 1 -> LReLU
    -> pool -> flatten 800 -> FC 128 -> LReLU. CIFAR (``(16, 32, 64)``, 32x32x3) adds a conv3 pad 1
    block, giving flatten 576. The output (d = 128) is the feature FedPAC aligns.

    Attributes:
      conv_channels: channels of the conv blocks (two or three).
      feature_dim: width of the final FC layer (the feature).
      conv_impl: ``"auto"``, ``"matmul"`` or ``"native"`` (see :func:`~pflax.models.default_conv_impl`).

    >>> body, x = FedPACConvBody(), jax.numpy.zeros((2, 28, 28, 1))
    >>> jax.eval_shape(body.init_with_output, jax.random.PRNGKey(0), x)[0].shape
    (2, 128)
    """

    conv_channels: Sequence[int] = (16, 32)
    feature_dim: int = 128
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        specs = [(5, 0), (5, 1), (3, 1)]
        for channels, (k, pad) in zip(self.conv_channels, specs):
            x = max_pool2(leaky_relu(TorchConv(channels, k, pad, self.conv_impl)(x)))
        x = x.reshape(x.shape[0], -1)
        return leaky_relu(TorchDense(self.feature_dim)(x))


class MLPBody(nn.Module):
    """Flatten, then one ``TorchDense`` + activation (``"relu"`` or ``"leaky_relu"``) per ``hidden``
    width; the output (``hidden[-1]`` wide) is the feature.

    Attributes:
      hidden: the hidden widths.
      activation: ``"relu"`` or ``"leaky_relu"``.

    >>> jax.eval_shape(MLPBody((5, 3)).init_with_output, jax.random.PRNGKey(0), jax.numpy.ones((2, 2, 2)))[0].shape
    (2, 3)
    """

    hidden: Sequence[int] = (200, 200)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = {"relu": jax.nn.relu, "leaky_relu": leaky_relu}[self.activation]
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = act(TorchDense(width)(x))
        return x


class LinearHead(nn.Module):
    """One ``TorchDense`` from the feature to ``num_classes`` logits.

    Attributes:
      num_classes: the number of logits.

    >>> variables = jax.eval_shape(LinearHead(4).init, jax.random.PRNGKey(0), jax.numpy.ones((2, 3)))
    >>> variables["params"]["TorchDense_0"]["kernel"].shape
    (3, 4)
    """

    num_classes: int

    @nn.compact
    def __call__(self, z: Array) -> Array:
        return TorchDense(self.num_classes)(z)


def fedpac_cnn(dataset: str = "fmnist", num_classes: int | None = None, conv_impl: str = "auto") -> SplitModel:
    """The FedPAC CNN for ``dataset``.

    Args:
        dataset: ``"fmnist"``, ``"fashion_mnist"``, ``"mnist"``, ``"emnist"`` or ``"synthetic"``
            (two conv blocks, 28x28x1 input) or ``"cifar"``, ``"cifar10"``, ``"cinic"``, ``"cinic10"``
            (three blocks, 32x32x3); case and ``-``/``_`` are ignored.
        num_classes: the head's width; default 62 for EMNIST, 10 otherwise.
        conv_impl: ``"auto"``, ``"matmul"`` or ``"native"`` (see :func:`~pflax.models.default_conv_impl`).

    Returns:
        A :class:`SplitModel` with a :class:`FedPACConvBody` (feature dimension 128) and a
        :class:`LinearHead`. Raises ``ValueError`` for an unknown dataset.

    >>> fedpac_cnn("cifar10").name, fedpac_cnn("emnist").num_classes
    ('fedpac_cifar_cnn', 62)
    """
    dataset = dataset.lower().replace("-", "_")
    if dataset in ("fmnist", "fashion_mnist", "mnist", "emnist", "synthetic"):
        channels = (16, 32)
        default_k = 62 if dataset == "emnist" else 10
        name = "fedpac_fmnist_cnn"
    elif dataset in ("cifar", "cifar10", "cinic", "cinic10"):
        channels = (16, 32, 64)
        default_k = 10
        name = "fedpac_cifar_cnn"
    else:
        raise ValueError(f"no FedPAC CNN for dataset {dataset!r}")
    k = default_k if num_classes is None else num_classes
    return SplitModel(FedPACConvBody(channels, 128, conv_impl), LinearHead(k), k, 128, name)


def fedpac_fmnist_cnn(num_classes: int = 10, conv_impl: str = "auto") -> SplitModel:
    """``fedpac_cnn("fmnist", num_classes, conv_impl)``: the FMNIST/EMNIST CNN (28x28x1 input).

    Args:
      num_classes: the head's width.
      conv_impl: ``"auto"``, ``"matmul"`` or ``"native"``.

    Returns:
      A :class:`SplitModel` named ``"fedpac_fmnist_cnn"``.

    >>> model = fedpac_fmnist_cnn(62)
    >>> model.body.conv_channels, model.num_classes
    ((16, 32), 62)
    """
    return fedpac_cnn("fmnist", num_classes, conv_impl)


def fedpac_cifar_cnn(num_classes: int = 10, conv_impl: str = "auto") -> SplitModel:
    """``fedpac_cnn("cifar10", num_classes, conv_impl)``: the CIFAR-10/CINIC-10 CNN (32x32x3 input).

    Args:
      num_classes, conv_impl: as in :func:`fedpac_fmnist_cnn` (10 classes by default).

    Returns:
      A :class:`SplitModel` named ``"fedpac_cifar_cnn"``: three conv blocks (flatten 576), feature 128.

    >>> model = fedpac_cifar_cnn()
    >>> model.body.conv_channels, model.feature_dim
    ((16, 32, 64), 128)
    """
    return fedpac_cnn("cifar10", num_classes, conv_impl)


def mlp(num_classes: int = 10, hidden: Sequence[int] = (200, 200), activation: str = "relu") -> SplitModel:
    """FedCollab's "2NN" by default: flatten -> 200 -> ReLU -> 200 -> ReLU -> K.

    Args:
        num_classes: the head's width K.
        hidden: the hidden widths (at least one); the last is the feature dimension.
        activation: ``"relu"`` or ``"leaky_relu"``.

    Returns:
        A :class:`SplitModel` (:class:`MLPBody`, :class:`LinearHead`) named ``"mlp"``.

    >>> model = mlp(10, hidden=(8,))
    >>> model.feature_dim, model.num_classes
    (8, 10)
    """
    hidden = tuple(hidden)
    if not hidden:
        raise ValueError("mlp needs at least one hidden layer (the feature layer)")
    return SplitModel(MLPBody(hidden, activation), LinearHead(num_classes), num_classes, hidden[-1], "mlp")
