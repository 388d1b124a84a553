"""Optimisers with PyTorch semantics, and freezing by masking.

``torch.optim.SGD(lr, momentum=mu, weight_decay=wd)`` does, per step:
``g <- g + wd * w``; ``buf <- mu * buf + g`` (``buf = g`` on the first step); ``w <- w - lr * buf``.
optax's ``trace`` starts from a zero buffer, so its first step is also ``buf = g``: the chain below
is the same update, step for step. Weight decay is *coupled* (added to the gradient before momentum),
not AdamW-style decoupled decay.
"""
from __future__ import annotations

from typing import Any

import jax
import optax

PyTree = Any


def pytorch_sgd(learning_rate: float, momentum: float = 0.0, weight_decay: float = 0.0) -> optax.GradientTransformation:
    """SGD with coupled weight decay and heavy-ball momentum, exactly as ``torch.optim.SGD``."""
    if learning_rate < 0:
        raise ValueError(f"learning_rate must be >= 0, got {learning_rate}")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    parts = []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(optax.sgd(learning_rate, momentum=momentum or None))
    return optax.chain(*parts)


def freeze(optimizer: optax.GradientTransformation, trainable: PyTree) -> optax.GradientTransformation:
    """Apply ``optimizer`` to leaves where ``trainable`` is True; frozen leaves get a zero update.

    Frozen leaves get neither weight decay nor momentum, as when PyTorch leaves them out of the
    optimiser. Because the zero update does not read the gradient, XLA drops the backward pass
    into frozen sub-trees entirely.
    """
    labels = jax.tree.map(lambda t: "train" if t else "frozen", trainable)
    return optax.multi_transform({"train": optimizer, "frozen": optax.set_to_zero()}, labels)
