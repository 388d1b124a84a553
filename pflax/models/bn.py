"""Models with BatchNorm, split into a ``body`` and a ``head`` (FedBN's and FedPick's backbones).

Variables are kept as two trees with the same top-level parts (the parts of every pflax model)::

    {"params":      {"body": ..., "head": ...},
     "batch_stats": {"body": ..., "head": ...}}

so an optimiser only ever sees ``params`` and the running statistics are threaded through training
as model state. Every BatchNorm module is named ``bn<i>``; :func:`is_bn_path` uses that name (and the
``batch_stats`` collection) to tell BN leaves apart, which is what FedBN's "keep BN local" needs.

:class:`MaskedBatchNorm` is PyTorch's ``BatchNorm1d/2d`` (momentum 0.1, eps 1e-5, biased variance
to normalise, unbiased variance in the running estimate) with a per-sample mask, so padded slots of a
client's minibatch never enter the batch statistics.

Backbones:

* :func:`digits_cnn`: FedBN's ``DigitModel`` (Li et al., "FedBN: Federated Learning on Non-IID
  Features via Local Batch Normalization", ICLR 2021; ``DigitModel`` in
  https://github.com/med-air/FedBN, ``nets/models.py``), FedPick's Digits-Five backbone: three
  Conv5x5 (pad 2) layers with 64, 64 and 128 channels, each with BN and ReLU, max-pool after the
  first two; at 32x32x3 the body's output is ``128 * 8 * 8 = 8192``. Head: FC 2048 -> BN -> ReLU ->
  FC 512 -> BN -> ReLU -> FC K. ``width`` scales every channel/hidden count (``width=1`` is the
  paper's model).
* :func:`alexnet_bn`: FedBN's ``AlexNet`` with BN after every conv and FC layer, for Office-Caltech-10
  and DomainNet (256x256x3). The body ends after fc2 + BN + ReLU (k = 4096, the penultimate layer,
  where FedPick (Zhu et al., 2023, arXiv:2307.13995) picks features); the head is the final FC layer.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from .kernels import max_pool2
from .layers import TorchConv, TorchDense
from .split import jit_init

Array = jax.Array
PyTree = Any

__all__ = ["MaskedBatchNorm", "BNModel", "DigitsBody", "BNMLPHead", "AlexNetBNBody", "StatelessLinearHead",
           "digits_cnn", "alexnet_bn", "is_bn_path", "apply_part"]


class MaskedBatchNorm(nn.Module):
    """PyTorch-equivalent BatchNorm over the last axis, with an optional per-sample ``mask [B]``.

    Training: normalise with the masked batch mean and biased variance; update the running mean
    and the running *unbiased* variance with momentum 0.1 (PyTorch's convention). A batch without
    real samples leaves the running statistics untouched. Evaluation: use the running statistics.

    Attributes:
      momentum: the running-statistics momentum (PyTorch's 0.1).
      epsilon: added to the variance (PyTorch's 1e-5).

    Call ``(x, train, mask=None)``; parameters ``scale``/``bias`` and ``batch_stats`` ``mean``/``var``.

    >>> bn, x, mask = MaskedBatchNorm(), jnp.array([[1.0], [3.0], [100.0]]), jnp.array([True, True, False])
    >>> v = bn.init(jax.random.PRNGKey(0), x, False)
    >>> y, new = jax.jit(lambda v, x, m: bn.apply(v, x, True, m, mutable=["batch_stats"]))(v, x, mask)
    >>> y[:2, 0].round(2).tolist(), [round(float(new["batch_stats"][k][0]), 3) for k in ("mean", "var")]
    ([-1.0, 1.0], [0.2, 1.1])
    """

    momentum: float = 0.1
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: Array, train: bool, mask: Array | None = None) -> Array:
        c = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (c,))
        bias = self.param("bias", nn.initializers.zeros, (c,))
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((c,), jnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((c,), jnp.float32))
        if not train:
            mean, var = ra_mean.value, ra_var.value
        else:
            axes = tuple(range(x.ndim - 1))
            w = jnp.ones(x.shape[:1], x.dtype) if mask is None else mask.astype(x.dtype)
            w = jnp.broadcast_to(w.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape[:-1] + (1,))
            count = w.sum()
            safe = jnp.maximum(count, 1.0)
            mean = (x * w).sum(axes) / safe
            var = (jnp.square(x - mean) * w).sum(axes) / safe
            if not self.is_initializing():
                unbiased = var * count / jnp.maximum(count - 1.0, 1.0)
                has_data = count > 0
                m = self.momentum
                ra_mean.value = jnp.where(has_data, (1 - m) * ra_mean.value + m * mean, ra_mean.value)
                ra_var.value = jnp.where(has_data, (1 - m) * ra_var.value + m * unbiased, ra_var.value)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias


def is_bn_path(path) -> bool:
    """True for a leaf of a BatchNorm layer: running statistics and BN affine parameters.

    Args:
      path: a ``jax.tree_util`` key path (``DictKey``/``GetAttrKey`` entries or plain names).

    Returns:
      Whether the path is in ``batch_stats`` or passes through a module named ``bn*``.

    >>> is_bn_path(["params", "body", "bn0", "scale"]), is_bn_path(["params", "body", "conv0", "kernel"])
    (True, False)
    """
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    return "batch_stats" in names or any(n.startswith("bn") for n in names)


class DigitsBody(nn.Module):
    """FedBN's DigitModel up to the flattened conv features: (Conv5x5 -> BN -> ReLU [-> max-pool]) x 3.

    Attributes:
      channels: the three convolutions' channels (FedBN: 64, 64, 128).
      conv_impl: ``"auto"``, ``"matmul"`` or ``"native"``.

    Call ``(x, train=False, mask=None)`` on NHWC ``x``; output ``[B, channels[-1] * (H/4) * (W/4)]``.

    >>> body = DigitsBody((2, 2, 4))
    >>> jax.eval_shape(body.init_with_output, jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)))[0].shape
    (1, 16)
    """

    channels: Sequence[int] = (64, 64, 128)
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x: Array, train: bool = False, mask: Array | None = None) -> Array:
        for i, ch in enumerate(self.channels):
            x = TorchConv(ch, 5, 2, self.conv_impl, name=f"conv{i}")(x)
            x = jax.nn.relu(MaskedBatchNorm(name=f"bn{i}")(x, train, mask))
            if i < 2:
                x = max_pool2(x)
        return x.reshape(x.shape[0], -1)


class BNMLPHead(nn.Module):
    """FC -> BN -> ReLU blocks, then a linear classifier (FedBN's DigitModel head).

    Attributes:
      hidden: the widths of the FC -> BN -> ReLU blocks (FedBN: 2048, 512).
      num_classes: the classifier's width.

    >>> out, variables = jax.eval_shape(BNMLPHead((4,), 3).init_with_output, jax.random.PRNGKey(0), jnp.ones((2, 5)))
    >>> out.shape, sorted(variables["batch_stats"])
    ((2, 3), ['bn0'])
    """

    hidden: Sequence[int] = (2048, 512)
    num_classes: int = 10

    @nn.compact
    def __call__(self, z: Array, train: bool = False, mask: Array | None = None) -> Array:
        for i, width in enumerate(self.hidden):
            z = TorchDense(width, name=f"fc{i}")(z)
            z = jax.nn.relu(MaskedBatchNorm(name=f"bn{i}")(z, train, mask))
        return TorchDense(self.num_classes, name="out")(z)


def _max_pool(x: Array, window: int, stride: int) -> Array:
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, window, window, 1), (1, stride, stride, 1), "VALID")


def adaptive_avg_pool(x: Array, out: int) -> Array:
    """PyTorch's ``AdaptiveAvgPool2d(out)`` on NHWC: window i spans [floor(i*H/out), ceil((i+1)*H/out)).

    Args:
      x: ``[n, H, W, c]``.
      out: the output side.

    Returns:
      ``[n, out, out, c]``.

    >>> adaptive_avg_pool(jnp.arange(9.0).reshape(1, 3, 3, 1), 2)[0, ..., 0].tolist()
    [[2.0, 3.0], [5.0, 6.0]]
    """
    _, h, w, _ = x.shape
    rows = [(math.floor(i * h / out), math.ceil((i + 1) * h / out)) for i in range(out)]
    cols = [(math.floor(j * w / out), math.ceil((j + 1) * w / out)) for j in range(out)]
    return jnp.stack(
        [jnp.stack([x[:, r0:r1, c0:c1, :].mean(axis=(1, 2)) for c0, c1 in cols], axis=1) for r0, r1 in rows], axis=1
    )


class AlexNetBNBody(nn.Module):
    """FedBN's AlexNet up to fc2 + BN + ReLU (output 4096).

    Five convolutions (64, 192, 384, 256, 256 channels) with BN and ReLU, max-pools after the 1st,
    2nd and 5th, ``adaptive_avg_pool`` to 6x6, then two FC 4096 -> BN -> ReLU. No attributes; call
    ``(x, train=False, mask=None)`` on NHWC ``x`` (256x256x3 in FedBN).

    >>> body = AlexNetBNBody()
    >>> jax.eval_shape(body.init_with_output, jax.random.PRNGKey(0), jnp.zeros((1, 64, 64, 3)))[0].shape
    (1, 4096)
    """

    @nn.compact
    def __call__(self, x: Array, train: bool = False, mask: Array | None = None) -> Array:
        specs = [(64, 11, 4, 2), (192, 5, 1, 2), (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1)]
        for i, (ch, k, stride, pad) in enumerate(specs):
            x = TorchConv(ch, k, pad, "native", stride=stride, name=f"conv{i}")(x)
            x = jax.nn.relu(MaskedBatchNorm(name=f"bn{i}")(x, train, mask))
            if i in (0, 1, 4):
                x = _max_pool(x, 3, 2)
        x = adaptive_avg_pool(x, 6).reshape(x.shape[0], -1)
        for j in range(2):
            x = TorchDense(4096, name=f"fc{j}")(x)
            x = jax.nn.relu(MaskedBatchNorm(name=f"bn{5 + j}")(x, train, mask))
        return x


class StatelessLinearHead(nn.Module):
    """One linear layer with the part interface of a :class:`BNModel` (``train`` and ``mask`` are
    accepted and ignored: no BatchNorm, no batch statistics). AlexNet-BN's classifier; unlike
    :class:`pflax.models.LinearHead` (the head of a :class:`pflax.models.SplitModel`) it names its
    layer ``out``.

    Attributes:
      num_classes: the number of logits.

    >>> variables = jax.eval_shape(StatelessLinearHead(3).init, jax.random.PRNGKey(0), jnp.ones((2, 4)))
    >>> list(variables["params"]), variables["params"]["out"]["kernel"].shape
    (['out'], (4, 3))
    """

    num_classes: int = 10

    @nn.compact
    def __call__(self, z: Array, train: bool = False, mask: Array | None = None) -> Array:
        return TorchDense(self.num_classes, name="out")(z)


def apply_part(module: nn.Module, params: PyTree, stats: PyTree, x: Array, train: bool,
               mask: Array | None = None) -> tuple[Array, PyTree]:
    """Run one part (body or head) of a :class:`BNModel`.

    Args:
      module: the part (called as ``module(x, train, mask)``).
      params, stats: its ``params`` and ``batch_stats`` trees.
      x: its input.
      train: batch statistics and a running-statistics update when True.
      mask: per-sample mask ``[B]`` for the batch statistics.

    Returns:
      ``(output, new_batch_stats)`` (``stats`` itself, unchanged, at evaluation).

    >>> head, z = StatelessLinearHead(2), jnp.ones((1, 3))
    >>> v = jax.jit(head.init)(jax.random.PRNGKey(0), z)
    >>> out, stats = apply_part(head, v["params"], {}, z, train=False)
    >>> out.shape, stats
    ((1, 2), {})
    """
    variables = {"params": params, "batch_stats": stats}
    if not train:
        return module.apply(variables, x, False, mask), stats
    out, updated = module.apply(variables, x, True, mask, mutable=["batch_stats"])
    return out, updated.get("batch_stats", stats)


@dataclasses.dataclass(frozen=True)
class BNModel:
    """A body and a head, both possibly with BatchNorm. Hashable, so it can be a static field.

    Variables are ``{"params": {"body", "head"}, "batch_stats": {"body", "head"}}``.

    Attributes:
      body: flax module called as ``(x, train, mask)``, output ``[B, feature_dim]``.
      head: flax module called as ``(z, train, mask)``, output ``[B, num_classes]``.
      num_classes: the head's width.
      feature_dim: the body's output width.
      name: a label for logs and results.

    >>> model = BNModel(BNMLPHead((4,), 6), StatelessLinearHead(3), num_classes=3, feature_dim=6)
    >>> v = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.ones((2, 5)))
    >>> logits, stats = jax.eval_shape(lambda v, x: model.logits(v, x, train=True), v, jnp.ones((2, 5)))
    >>> logits.shape, sorted(stats)
    ((2, 3), ['body', 'head'])
    """

    body: nn.Module
    head: nn.Module
    num_classes: int
    feature_dim: int
    name: str = "bn_model"

    def init(self, key: Array, sample_x: Array) -> dict:
        """Fresh ``{"params", "batch_stats"}``, compiled as one program (:func:`pflax.models.jit_init`)."""
        return jit_init(self, key, sample_x)

    def init_eagerly(self, key: Array, sample_x: Array) -> dict:
        """Fresh ``{"params", "batch_stats"}``, op by op: ``key`` split in two, body first (on
        ``sample_x[:1]``), head on the body's output.
        """
        k_body, k_head = jax.random.split(key)
        body = self.body.init(k_body, sample_x[:1], False)
        z = self.body.apply(body, sample_x[:1], False)
        head = self.head.init(k_head, z, False)
        return {
            "params": {"body": body["params"], "head": head["params"]},
            "batch_stats": {"body": body.get("batch_stats", {}), "head": head.get("batch_stats", {})},
        }

    def init_head(self, key: Array) -> tuple[PyTree, PyTree]:
        """A fresh head (params, batch_stats) on ``feature_dim`` inputs (FedPick's extra heads)."""
        v = self.head.init(key, jnp.zeros((1, self.feature_dim), jnp.float32), False)
        return v["params"], v.get("batch_stats", {})

    def encode(self, params, stats, x, train=False, mask=None):
        """``(features [B, feature_dim], new body batch_stats)`` of the body, from the full
        ``params``/``stats`` trees."""
        return apply_part(self.body, params["body"], stats["body"], x, train, mask)

    def classify(self, head_params, head_stats, z, train=False, mask=None):
        """``(logits, new head batch_stats)`` of a head (``self.head``'s architecture) on features ``z``."""
        return apply_part(self.head, head_params, head_stats, z, train, mask)

    def logits(self, variables: dict, x: Array, train: bool = False, mask: Array | None = None) -> tuple[Array, dict]:
        """``(logits, new_batch_stats)``; the batch stats are unchanged when ``train`` is False."""
        p, s = variables["params"], variables["batch_stats"]
        z, s_body = self.encode(p, s, x, train, mask)
        out, s_head = self.classify(p["head"], s["head"], z, train, mask)
        return out, {**s, "body": s_body, "head": s_head}


def digits_cnn(num_classes: int = 10, width: float = 1.0, image_size: int = 32, conv_impl: str = "auto") -> BNModel:
    """FedBN's DigitModel (FedPick's Digits-Five backbone); ``width`` < 1 shrinks it for CPU runs.

    Args:
      num_classes: the head's width.
      width: scales every channel and hidden width (rounded, at least 1).
      image_size: the square input side (a multiple of 4).
      conv_impl: ``"auto"``, ``"matmul"`` or ``"native"``.

    Returns:
      A :class:`BNModel` (:class:`DigitsBody`, :class:`BNMLPHead`), feature dimension
      ``channels[-1] * (image_size // 4) ** 2``.

    >>> digits_cnn().feature_dim, digits_cnn(width=0.25).name
    (8192, 'digits_cnn_w0.25')
    """
    if width <= 0:
        raise ValueError(f"width must be positive, got {width}")
    if image_size % 4:
        raise ValueError(f"image_size must be a multiple of 4, got {image_size}")
    scale = lambda n: max(int(round(n * width)), 1)
    channels = (scale(64), scale(64), scale(128))
    k = channels[-1] * (image_size // 4) ** 2
    name = "digits_cnn" if width == 1.0 else f"digits_cnn_w{width:g}"
    return BNModel(DigitsBody(channels, conv_impl), BNMLPHead((scale(2048), scale(512)), num_classes),
                   num_classes, k, name)


def alexnet_bn(num_classes: int = 10) -> BNModel:
    """FedBN's AlexNet with BN (Office-Caltech-10, DomainNet; 256x256x3 input).

    Args:
      num_classes: the head's width.

    Returns:
      A :class:`BNModel` (:class:`AlexNetBNBody`, :class:`StatelessLinearHead`), feature dimension 4096.

    >>> alexnet_bn(31).feature_dim, alexnet_bn().name
    (4096, 'alexnet_bn')
    """
    return BNModel(AlexNetBNBody(), StatelessLinearHead(num_classes), num_classes, 4096, "alexnet_bn")
