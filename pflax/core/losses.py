"""Per-sample losses and masked reductions. Every mean in pflax goes through :func:`masked_mean`."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def masked_mean(values: Array, mask: Array) -> Array:
    """Mean of ``values`` over entries where ``mask`` is set; 0 when nothing is set (never NaN).

    ``values`` may have trailing dimensions beyond ``mask``'s; they are averaged too.

    Args:
      values: ``[n, ...]`` per-item values.
      mask: ``[n]`` bool or 0/1 weights of the items that count.

    Returns:
      A scalar in ``values``' dtype.

    >>> float(masked_mean(jnp.array([1.0, 3.0, 100.0]), jnp.array([True, True, False])))
    2.0
    """
    mask = mask.astype(values.dtype)
    extra = values.ndim - mask.ndim
    per_item = values.reshape(values.shape[: mask.ndim] + (-1,)).mean(-1) if extra else values
    total = jnp.sum(mask)
    return jnp.sum(jnp.where(mask > 0, per_item, 0.0) * mask) / jnp.maximum(total, 1.0)


def cross_entropy(logits: Array, labels: Array) -> Array:
    """Per-sample softmax cross-entropy with integer labels.

    Args:
      logits: ``[..., C]`` unnormalised scores.
      labels: ``[...]`` integer classes in ``[0, C)``.

    Returns:
      ``[...]`` the negative log-probability of each label.

    >>> cross_entropy(jnp.zeros((1, 2)), jnp.array([0])).round(3).tolist()
    [0.693...]
    """
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def correct(logits: Array, labels: Array) -> Array:
    """Per-sample 0/1 correctness of the arg-max prediction.

    Args:
      logits: ``[..., C]`` scores.
      labels: ``[...]`` integer classes.

    Returns:
      ``[...]`` float32, 1.0 where ``argmax(logits) == label``.

    >>> correct(jnp.array([[0.0, 1.0], [2.0, 1.0]]), jnp.array([1, 1])).tolist()
    [1.0, 0.0]
    """
    return (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)


def squared_error_per_sample(a: Array, b: Array) -> Array:
    """Mean over feature dims of (a-b)^2, one value per sample (PyTorch ``MSELoss`` per row).

    Args:
      a, b: ``[n, d]`` arrays of the same shape.

    Returns:
      ``[n]`` mean squared differences.

    >>> squared_error_per_sample(jnp.array([[1.0, 3.0]]), jnp.zeros((1, 2))).tolist()
    [5.0]
    """
    return jnp.mean(jnp.square(a - b), axis=-1)
