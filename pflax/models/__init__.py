"""Models used by the papers, split into a feature extractor ("body") and a linear head.

Every model is a :class:`SplitModel`: two flax modules whose parameters live side by side as
``{"body": ..., "head": ...}``. That split is the one FedPAC, FedPer, FedRep, LG-FedAvg, FedBABU
and friends reason about, so it is part of the model, not something each algorithm re-derives.

Initialisation replicates PyTorch's defaults (``kaiming_uniform(a=sqrt(5))`` weights and fan-in
uniform biases, i.e. both ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``) so early training curves match the
official PyTorch code.

Convolutions default to an im2col + matmul formulation on CPU. It gives the same numbers as
``lax.conv_general_dilated`` (to float round-off) but, unlike it, stays fast inside ``lax.scan``
and under ``vmap`` on XLA:CPU (see ``benchmarks/execution_strategies.py`` and
``../shared/reference/cpu-performance.md``). On GPU/TPU the native convolution is used.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from ..core import rng

Array = jax.Array
PyTree = Any

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
]


def leaky_relu(x: Array) -> Array:
    """LeakyReLU with PyTorch's default slope 0.01."""
    return jnp.where(x > 0, x, 0.01 * x)


def _pool_windows(x: Array) -> Array:
    """``x`` [n, h, w, c] cut into 2x2 windows [n, h//2, 2, w//2, 2, c] (odd last row/column dropped)."""
    n, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, : 2 * h2, : 2 * w2, :].reshape(n, h2, 2, w2, 2, c)


@jax.custom_vjp
def max_pool2(x: Array) -> Array:
    """2x2 max-pool, stride 2, NHWC, floor semantics (odd rows/cols dropped) as in PyTorch.

    The gradient goes to the *first* maximum of each window in row-major order, as PyTorch's
    ``max_pool2d`` does (JAX's own ``max`` splits it evenly between tied entries; ties are common on
    MNIST-like data, where blank regions give equal activations). Written as reshape + max with a
    hand-made backward because flax's ``max_pool`` differentiates through select-and-scatter, slow
    on XLA:CPU, and the generic gradient of ``max`` costs a compare, a count and a divide per entry.
    Reverse-mode only (``grad``, and ``jvp`` of a ``grad``); ``jax.jvp`` of the pool itself raises.
    """
    return _window_max(x)


def _window_max(x: Array) -> Array:
    return _pool_windows(x).max(axis=(2, 4))


def _max_pool2_fwd(x: Array):
    # The plain max, not max_pool2 itself: a custom_vjp call here would be invisible to an outer
    # jvp (as in jvp of grad, a Hessian-vector product), which cannot differentiate it.
    out = _window_max(x)
    return out, (x, out)


def _max_pool2_bwd(residuals, g: Array):
    x, out = residuals
    n, h, w, c = x.shape
    windows = _pool_windows(x)
    taken = jnp.zeros(out.shape, bool)
    rows = []
    for a in range(2):
        cols = []
        for b in range(2):
            v = windows[:, :, a, :, b, :]
            # NaN is a maximum too (PyTorch's kernel keeps the first NaN it meets).
            hit = ((v == out) | (jnp.isnan(v) & jnp.isnan(out))) & ~taken
            taken = taken | hit
            cols.append(jnp.where(hit, g, jnp.zeros((), g.dtype)))
        rows.append(jnp.stack(cols, axis=3))
    gx = jnp.stack(rows, axis=2).reshape(n, 2 * out.shape[1], 2 * out.shape[2], c)
    return (jnp.pad(gx, ((0, 0), (0, h - gx.shape[1]), (0, w - gx.shape[2]), (0, 0))),)


max_pool2.defvjp(_max_pool2_fwd, _max_pool2_bwd)


def _torch_uniform(fan_in: int) -> Callable:
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key, shape, dtype=jnp.float32):
        return rng.uniform(key, shape, dtype, -bound, bound)  # flat draw: fast compile, same values

    return init


class TorchDense(nn.Module):
    """``nn.Linear`` with PyTorch's default initialisation. Kernel layout is ``[in, out]``."""

    features: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        fan_in = x.shape[-1]
        kernel = self.param("kernel", _torch_uniform(fan_in), (fan_in, self.features))
        bias = self.param("bias", _torch_uniform(fan_in), (self.features,))
        return x @ kernel + bias


def _pad_hw(x: Array, padding: int) -> Array:
    return jnp.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0))) if padding else x


def _patches(x: Array, kh: int, kw: int, stride: int = 1) -> Array:
    """im2col: [n, h, w, c] -> [n, oh, ow, kh*kw*c], columns ordered (kh, kw, c) like HWIO.

    Built in two stages (the kw shifts along w, then the kh shifts along h): XLA:CPU copies each
    stacked slice separately, so kh + kw slices cost less than the kh*kw of a one-stage stack.
    """
    n, h, w, c = x.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    span_h, span_w = (oh - 1) * stride + 1, (ow - 1) * stride + 1
    along_w = jnp.stack([x[:, :, j : j + span_w : stride, :] for j in range(kw)], axis=3)  # [n, h, ow, kw, c]
    patches = jnp.stack([along_w[:, i : i + span_h : stride] for i in range(kh)], axis=3)  # [n, oh, ow, kh, kw, c]
    return patches.reshape(n, oh, ow, kh * kw * c)


def _shift_sum(parts: list[Array], axis: int, length: int, offset: int) -> Array:
    """``out[t] = sum_j parts[j][t + offset - j]`` along ``axis`` for ``t < length`` (zero out of range)."""
    total = None
    for j, part in enumerate(parts):
        first = offset - j  # index in ``part`` of out[0]
        start, stop = max(first, 0), min(first + length, part.shape[axis])
        if stop <= start:
            continue
        piece = jax.lax.slice_in_dim(part, start, stop, axis=axis)
        widths = [(0, 0, 0)] * part.ndim
        widths[axis] = (start - first, length - (stop - first), 0)
        piece = jax.lax.pad(piece, jnp.zeros((), part.dtype), widths)
        total = piece if total is None else total + piece
    if total is None:
        shape = list(parts[0].shape)
        shape[axis] = length
        total = jnp.zeros(shape, parts[0].dtype)
    return total


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_stride1(x: Array, kernel: Array, padding: int) -> Array:
    return _conv_stride1_fwd(x, kernel, padding)[0]


def _conv_stride1_fwd(x: Array, kernel: Array, padding: int):
    k, _, cin, cout = kernel.shape
    patches = _patches(_pad_hw(x, padding), k, k)
    return patches @ kernel.reshape(k * k * cin, cout), (patches, kernel)


def _conv_stride1_bwd(padding: int, residuals, g: Array):
    patches, kernel = residuals
    k, _, cin, cout = kernel.shape
    n, oh, ow, _ = g.shape
    h, w = oh + k - 1 - 2 * padding, ow + k - 1 - 2 * padding  # x's size
    flat_g = g.reshape(-1, cout)
    # (g^T patches)^T rather than patches^T g: XLA:CPU hands this operand order to its fast GEMM.
    d_kernel = jax.lax.dot_general(flat_g, patches.reshape(-1, k * k * cin), (((0,), (0,)), ((), ()))).T
    # Input gradient (XLA drops it when x needs none): the patch gradient g @ kernel^T, one kernel
    # column kw at a time, each [n, oh, ow, kh, cin] a k-th of the whole (which would not stay in
    # cache), folded back along w, then along h, by shifted sums: the adjoint of how _patches builds.
    per_kw = [(g @ kernel[:, j].reshape(k * cin, cout).T).reshape(n, oh, ow, k, cin) for j in range(k)]
    along_w = _shift_sum(per_kw, 2, w, padding)  # [n, oh, w, kh, cin]
    d_x = _shift_sum([along_w[:, :, :, i, :] for i in range(k)], 1, h, padding)
    return d_x, d_kernel.reshape(kernel.shape)


_conv_stride1.defvjp(_conv_stride1_fwd, _conv_stride1_bwd)


def conv_as_matmul(x: Array, kernel: Array, padding: int, stride: int = 1) -> Array:
    """'valid' convolution (after symmetric zero padding) written as im2col + one matmul.

    ``x``: NHWC, ``kernel``: HWIO. Stride 1 with a square kernel (every pflax CNN) has a hand-written
    backward: the kernel gradient is one GEMM against the saved patches and the input gradient folds
    the patch gradients back in two shifted-sum stages, which XLA:CPU runs faster than the transpose
    of the patch gather that autodiff would produce. Same numbers as ``lax.conv_general_dilated`` to
    float round-off, forward and backward (tested). Reverse-mode only, like :func:`max_pool2`
    (``jvp`` of a ``grad`` works; ``jvp`` of the convolution itself raises). Other strides and
    kernels: the same patches, from strided slices, differentiated by JAX.
    """
    if stride == 1 and kernel.shape[0] == kernel.shape[1]:
        return _conv_stride1(x, kernel, padding)
    kh, kw, cin, cout = kernel.shape
    return _patches(_pad_hw(x, padding), kh, kw, stride) @ kernel.reshape(kh * kw * cin, cout)


def conv_native(x: Array, kernel: Array, padding: int, stride: int = 1) -> Array:
    return jax.lax.conv_general_dilated(
        x, kernel, (stride, stride), [(padding, padding), (padding, padding)], dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def default_conv_impl() -> str:
    return "matmul" if jax.default_backend() == "cpu" else "native"


class TorchConv(nn.Module):
    """``nn.Conv2d`` (symmetric zero padding) with PyTorch's default initialisation. NHWC."""

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


class FedPACConvBody(nn.Module):
    """Feature extractor of the FedPAC CNNs (official ``models/cnn.py``), NHWC input.

    FMNIST/EMNIST (``conv_channels=(16, 32)``, 28x28x1): conv5 -> LReLU -> pool -> conv5 pad 1 -> LReLU
    -> pool -> flatten 800 -> FC 128 -> LReLU. CIFAR (``(16, 32, 64)``, 32x32x3) adds a conv3 pad 1
    block, giving flatten 576. The output (d = 128) is the feature FedPAC aligns.
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
    num_classes: int

    @nn.compact
    def __call__(self, z: Array) -> Array:
        return TorchDense(self.num_classes)(z)


@functools.partial(jax.jit, static_argnums=0)
def jit_init(model, key: Array, sample_x: Array) -> PyTree:
    """``model.init_eagerly(key, sample_x)`` compiled as one program.

    Run eagerly, an initialisation compiles every operation on its own (30-80 small XLA programs,
    1.9-4.5 s for the test models on a 2-core CPU); compiled as one it takes 1.1-2.1 s. The values are
    bit-identical (tested)."""
    return model.init_eagerly(key, sample_x)


@dataclasses.dataclass(frozen=True)
class SplitModel:
    """A body (feature extractor) and a linear head. Hashable, so it can be a static field.

    ``params`` are always ``{"body": body_params, "head": head_params}``.
    """

    body: nn.Module
    head: nn.Module
    num_classes: int
    feature_dim: int
    name: str = "model"

    def init(self, key: Array, sample_x: Array) -> PyTree:
        """Fresh parameters; ``sample_x`` fixes the input shape. Compiled as one program (see
        :func:`jit_init`), with the same values as running the initialisers eagerly."""
        return jit_init(self, key, sample_x)

    def init_eagerly(self, key: Array, sample_x: Array) -> PyTree:
        k_body, k_head = jax.random.split(key)
        body = self.body.init(k_body, sample_x)["params"]
        z = self.body.apply({"params": body}, sample_x)
        head = self.head.init(k_head, z)["params"]
        return {"body": body, "head": head}

    def features(self, body_params: PyTree, x: Array) -> Array:
        return self.body.apply({"params": body_params}, x)

    def logits_from_features(self, head_params: PyTree, z: Array) -> Array:
        return self.head.apply({"params": head_params}, z)

    def apply(self, params: PyTree, x: Array) -> Array:
        return self.logits_from_features(params["head"], self.features(params["body"], x))


def fedpac_cnn(dataset: str = "fmnist", num_classes: int | None = None, conv_impl: str = "auto") -> SplitModel:
    """The FedPAC CNN for ``dataset`` in {"fmnist", "mnist", "emnist", "cifar10", "cinic10"}."""
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
    return fedpac_cnn("fmnist", num_classes, conv_impl)


def fedpac_cifar_cnn(num_classes: int = 10, conv_impl: str = "auto") -> SplitModel:
    return fedpac_cnn("cifar10", num_classes, conv_impl)


def mlp(num_classes: int = 10, hidden: Sequence[int] = (200, 200), activation: str = "relu") -> SplitModel:
    """FedCollab's "2NN" by default: flatten -> 200 -> ReLU -> 200 -> ReLU -> K."""
    hidden = tuple(hidden)
    if not hidden:
        raise ValueError("mlp needs at least one hidden layer (the feature layer)")
    return SplitModel(MLPBody(hidden, activation), LinearHead(num_classes), num_classes, hidden[-1], "mlp")
