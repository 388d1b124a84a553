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
    """SGD with coupled weight decay and heavy-ball momentum, exactly as ``torch.optim.SGD``.

    Args:
      learning_rate: step size ``lr >= 0``.
      momentum: heavy-ball coefficient in ``[0, 1)`` (0: none).
      weight_decay: L2 coefficient ``>= 0``, added to the gradient before momentum.

    Returns:
      An optax ``GradientTransformation``; raises ``ValueError`` on an out-of-range argument.

    >>> import jax.numpy as jnp
    >>> opt, w = pytorch_sgd(0.5, weight_decay=0.5), jnp.array([2.0])
    >>> opt.update(jnp.array([1.0]), opt.init(w), w)[0].tolist()  # -lr * (g + wd * w)
    [-1.0]
    """
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

    Args:
      optimizer: the transformation for the trainable leaves.
      trainable: a bool tree with the structure of the parameters (e.g. :func:`pflax.core.split.part_mask`).

    Returns:
      An optax ``GradientTransformation`` over the whole tree.

    >>> import jax.numpy as jnp
    >>> opt, p = freeze(optax.sgd(1.0), {"a": True, "b": False}), {"a": jnp.ones(1), "b": jnp.ones(1)}
    >>> jax.tree.map(lambda u: u.tolist(), opt.update(p, opt.init(p), p)[0])
    {'a': [-1.0], 'b': [0.0]}
    """
    labels = jax.tree.map(lambda t: "train" if t else "frozen", trainable)
    return optax.multi_transform({"train": optimizer, "frozen": optax.set_to_zero()}, labels)
