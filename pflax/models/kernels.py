"""Convolution and pooling kernels with hand-written backward passes (``jax.custom_vjp``).

Convolutions default to an im2col + matmul formulation on CPU (:func:`conv_as_matmul`). It gives the
same numbers as ``lax.conv_general_dilated`` (:func:`conv_native`, to float round-off) but, unlike it,
stays fast inside ``lax.scan`` and under ``vmap`` on XLA:CPU, which runs a convolution inside a loop
body, or a vmapped per-client (grouped) convolution, far slower than PyTorch (see
``benchmarks/execution_strategies.py`` and the README's "Why ``map`` on CPU"). On GPU/TPU the native
convolution is used (:func:`default_conv_impl`).

:func:`max_pool2` is PyTorch's ``max_pool2d(2)`` (floor semantics, gradient to the first maximum of
each window). Both kernels are reverse-mode only: ``grad``, ``grad`` of ``grad`` and ``jvp`` of
``grad`` work; ``jax.jvp`` of the kernel itself raises.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["conv_as_matmul", "conv_native", "default_conv_impl", "max_pool2"]


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

    Args:
      x: ``[n, h, w, c]``.

    Returns:
      ``[n, h // 2, w // 2, c]``.

    >>> max_pool2(jnp.arange(16.0).reshape(1, 4, 4, 1))[0, ..., 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
    >>> jax.jit(jax.grad(lambda x: max_pool2(x).sum()))(jnp.ones((1, 2, 2, 1)))[0, ..., 0].tolist()
    [[1.0, 0.0], [0.0, 0.0]]
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

    Stride 1 with a square kernel (every pflax CNN) has a hand-written
    backward: the kernel gradient is one GEMM against the saved patches and the input gradient folds
    the patch gradients back in two shifted-sum stages, which XLA:CPU runs faster than the transpose
    of the patch gather that autodiff would produce. Same numbers as ``lax.conv_general_dilated`` to
    float round-off, forward and backward (tested). Reverse-mode only, like :func:`max_pool2`
    (``jvp`` of a ``grad`` works; ``jvp`` of the convolution itself raises). Other strides and
    kernels: the same patches, from strided slices, differentiated by JAX.

    Args:
      x: NHWC input.
      kernel: HWIO kernel.
      padding: zero padding on each side of H and W.
      stride: the stride in both directions.

    Returns:
      NHWC output, ``(H + 2 * padding - kh) // stride + 1`` rows (likewise columns).

    >>> out = conv_as_matmul(jnp.ones((1, 4, 4, 1)), jnp.ones((3, 3, 1, 2)), padding=1)
    >>> out.shape, out[0, 0, :, 0].tolist()
    ((1, 4, 4, 2), [4.0, 6.0, 6.0, 4.0])
    """
    if stride == 1 and kernel.shape[0] == kernel.shape[1]:
        return _conv_stride1(x, kernel, padding)
    kh, kw, cin, cout = kernel.shape
    return _patches(_pad_hw(x, padding), kh, kw, stride) @ kernel.reshape(kh * kw * cin, cout)


def conv_native(x: Array, kernel: Array, padding: int, stride: int = 1) -> Array:
    """XLA's own convolution (``lax.conv_general_dilated``), NHWC input, HWIO kernel, symmetric zero
    ``padding``; the reference :func:`conv_as_matmul` is tested against.

    Args:
      x, kernel, padding, stride: as in :func:`conv_as_matmul`.

    Returns:
      NHWC output.

    >>> import jax.numpy as jnp
    >>> conv_native(jnp.ones((1, 4, 4, 1)), jnp.ones((3, 3, 1, 2)), padding=1).shape
    (1, 4, 4, 2)
    """
    return jax.lax.conv_general_dilated(
        x, kernel, (stride, stride), [(padding, padding), (padding, padding)], dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def default_conv_impl() -> str:
    """The convolution a ``conv_impl="auto"`` layer uses on the default backend: ``"matmul"``
    (:func:`conv_as_matmul`) on CPU, ``"native"`` (:func:`conv_native`) elsewhere.

    Returns:
      ``"matmul"`` or ``"native"``.

    >>> default_conv_impl() == ("matmul" if jax.default_backend() == "cpu" else "native")
    True
    """
    return "matmul" if jax.default_backend() == "cpu" else "native"
