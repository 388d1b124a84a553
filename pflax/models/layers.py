"""Layers with PyTorch's default initialisation, so early training curves match the official
PyTorch code of the papers.

PyTorch initialises ``nn.Linear`` and ``nn.Conv2d`` weights with ``kaiming_uniform(a=sqrt(5))`` and
biases fan-in uniform, i.e. both ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
(``torch/nn/modules/linear.py``, ``reset_parameters``). :class:`TorchDense` and :class:`TorchConv`
draw exactly that; :class:`TorchConv` runs the convolution chosen by ``impl`` (see
:mod:`pflax.models.kernels`).
"""
from __future__ import annotations

import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from ..core import rng
from .kernels import conv_as_matmul, conv_native, default_conv_impl

Array = jax.Array

__all__ = ["TorchDense", "TorchConv", "leaky_relu"]


def leaky_relu(x: Array) -> Array:
    """LeakyReLU with PyTorch's default slope 0.01.

    Args:
      x: any array.

    Returns:
      ``x`` where positive, ``0.01 * x`` elsewhere.

    >>> leaky_relu(jnp.array([-100.0, 2.0])).tolist()
    [-1.0, 2.0]
    """
    return jnp.where(x > 0, x, 0.01 * x)


def _torch_uniform(fan_in: int) -> Callable:
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key, shape, dtype=jnp.float32):
        return rng.uniform(key, shape, dtype, -bound, bound)  # flat draw: fast compile, same values

    return init


class TorchDense(nn.Module):
    """``nn.Linear`` with PyTorch's default initialisation. Kernel layout is ``[in, out]``.

    Attributes:
      features: output width. Parameters ``kernel [in, features]`` and ``bias [features]``, both
        ``U(-1/sqrt(in), 1/sqrt(in))``.

    >>> params = jax.jit(TorchDense(3).init)(jax.random.PRNGKey(0), jnp.ones((1, 4)))["params"]
    >>> params["kernel"].shape, bool(jnp.abs(params["kernel"]).max() <= 0.5)
    ((4, 3), True)
    """

    features: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        fan_in = x.shape[-1]
        kernel = self.param("kernel", _torch_uniform(fan_in), (fan_in, self.features))
        bias = self.param("bias", _torch_uniform(fan_in), (self.features,))
        return x @ kernel + bias


class TorchConv(nn.Module):
    """``nn.Conv2d`` (symmetric zero padding) with PyTorch's default initialisation. NHWC.

    Attributes:
      features: output channels.
      kernel_size: side of the square kernel (HWIO ``kernel``, fan-in ``cin * kernel_size ** 2``).
      padding: zero padding on each side.
      impl: ``"auto"`` (:func:`~pflax.models.default_conv_impl`), ``"matmul"`` or ``"native"``.
      stride: the stride in both directions.

    >>> conv = TorchConv(2, 3, padding=1)
    >>> jax.eval_shape(conv.init_with_output, jax.random.PRNGKey(0), jnp.ones((1, 4, 4, 1)))[0].shape
    (1, 4, 4, 2)
    """

    features: int
    kernel_size: int
    padding: int = 0
    impl: str = "auto"  # "auto" | "matmul" | "native"
    stride: int = 1

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cin = x.shape[-1]
        fan_in = cin * self.kernel_size * self.kernel_size
        kernel = self.param(
            "kernel", _torch_uniform(fan_in), (self.kernel_size, self.kernel_size, cin, self.features)
        )
        bias = self.param("bias", _torch_uniform(fan_in), (self.features,))
        impl = default_conv_impl() if self.impl == "auto" else self.impl
        if impl == "matmul":
            y = conv_as_matmul(x, kernel, self.padding, self.stride)
        elif impl == "native":
            y = conv_native(x, kernel, self.padding, self.stride)
        else:
            raise ValueError(f"unknown conv impl {impl!r}; expected 'auto', 'matmul' or 'native'")
        return y + bias
