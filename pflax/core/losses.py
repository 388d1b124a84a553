"""Per-sample losses and masked reductions. Every mean in pflax goes through :func:`masked_mean`."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def masked_mean(values: Array, mask: Array) -> Array:
    """Mean of ``values`` over entries where ``mask`` is set; 0 when nothing is set (never NaN).

    ``values`` may have trailing dimensions beyond ``mask``'s; they are averaged too.
    """
    mask = mask.astype(values.dtype)
    extra = values.ndim - mask.ndim
    per_item = values.reshape(values.shape[: mask.ndim] + (-1,)).mean(-1) if extra else values
    total = jnp.sum(mask)
    return jnp.sum(jnp.where(mask > 0, per_item, 0.0) * mask) / jnp.maximum(total, 1.0)


def cross_entropy(logits: Array, labels: Array) -> Array:
    """Per-sample softmax cross-entropy with integer labels."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def correct(logits: Array, labels: Array) -> Array:
    return (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)


def squared_error_per_sample(a: Array, b: Array) -> Array:
    """Mean over feature dims of (a-b)^2, one value per sample (PyTorch ``MSELoss`` per row)."""
    return jnp.mean(jnp.square(a - b), axis=-1)
