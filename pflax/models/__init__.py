"""Models used by the papers, split into a feature extractor ("body") and a linear head.

* :mod:`pflax.models.kernels`: the im2col + matmul convolution and the 2x2 max-pool with
  hand-written backward passes (fast on XLA:CPU, PyTorch's pooling gradient), and XLA's own conv.
* :mod:`pflax.models.layers`: ``nn.Linear``/``nn.Conv2d`` with PyTorch's default initialisation.
* :mod:`pflax.models.split`: :class:`SplitModel`, parameters ``{"body": ..., "head": ...}``.
* :mod:`pflax.models.zoo`: FedPAC's CNNs and FedCollab's MLP.
* :mod:`pflax.models.bn`: BatchNorm backbones (FedBN, FedPick), ``{"body", "head"}``.

>>> import jax, jax.numpy as jnp
>>> model = mlp(10, hidden=(8,))
>>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 4, 4, 1)))
>>> sorted(params), model.apply(params, jnp.zeros((2, 4, 4, 1))).shape
(['body', 'head'], (2, 10))
"""
from __future__ import annotations

from .kernels import conv_as_matmul, conv_native, default_conv_impl, max_pool2
from .layers import TorchConv, TorchDense, leaky_relu
from .split import SplitModel, jit_init
from .zoo import FedPACConvBody, LinearHead, MLPBody, fedpac_cifar_cnn, fedpac_cnn, fedpac_fmnist_cnn, mlp

__all__ = [
    "SplitModel",
    "TorchDense",
    "TorchConv",
    "fedpac_cnn",
    "fedpac_fmnist_cnn",
    "fedpac_cifar_cnn",
    "mlp",
    "leaky_relu",
    "max_pool2",
    "conv_as_matmul",
    "conv_native",
    "default_conv_impl",
    "jit_init",
    "FedPACConvBody",
    "MLPBody",
    "LinearHead",
]
