"""Local training: masked minibatch SGD over a client's padded data, one pure function.

A client's data is a dict of per-sample arrays with a leading sample axis of length ``n_max`` and a
``mask`` marking the ``n_i <= n_max`` real samples. One epoch is a fresh random order of the real
samples cut into ``ceil(n_max / batch_size)`` minibatches: as PyTorch's ``DataLoader(shuffle=True,
drop_last=False)``, the last real minibatch may be partial, and its loss is the mean over its real
samples only. Minibatches with no real sample (a client smaller than ``n_max``) are exact no-ops:
parameters and optimiser state are left untouched.

The optimiser state is created inside :func:`local_train`, so each call is a *fresh* optimiser, which
is what the official FedPAC code does for every phase of every round.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from .losses import masked_mean

Array = jax.Array
PyTree = Any
# loss_fn(params, minibatch: dict of arrays [B, ...], weights: [B] 0/1) -> scalar (already a masked mean)
LossFn = Callable[[PyTree, dict, Array], Array]
# stateful_loss_fn(params, model_state, minibatch, weights, step_key) -> (loss, new_model_state)
StatefulLossFn = Callable[[PyTree, PyTree, dict, Array, Any], tuple[Array, PyTree]]


def steps_per_epoch(n_max: int, batch_size: int) -> int:
    """Minibatches per epoch, ``ceil(n_max / batch_size)``.

    Args:
      n_max: the padded number of samples per client.
      batch_size: samples per minibatch (positive).

    Returns:
      The number of steps ``S`` of one epoch.

    >>> steps_per_epoch(5, 2)
    3
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return -(-n_max // batch_size)


def epoch_order(key: Array, mask: Array, epochs: int, batch_size: int) -> tuple[Array, Array]:
    """Minibatch index plan for ``epochs`` epochs: ``(indices, valid)``, both ``[epochs * S, batch_size]``.

    Real samples come first in a fresh uniform random order each epoch; padding slots are marked
    invalid. ``S = ceil(n_max / batch_size)``.

    Args:
      key: PRNG key of the shuffling.
      mask: ``[n_max]`` bool, the client's real samples.
      epochs: number of epochs.
      batch_size: samples per minibatch.

    Returns:
      ``(indices, valid)``: sample indices (int) and bool validity, both ``[epochs * S, batch_size]``.

    >>> idx, valid = epoch_order(jax.random.PRNGKey(0), jnp.array([True, True, False]), 2, 2)
    >>> idx.shape, valid.sum(1).tolist()
    ((4, 2), [2, 0, 2, 0])
    """
    n_max = mask.shape[0]
    per_epoch = steps_per_epoch(n_max, batch_size)
    slots = per_epoch * batch_size

    def one_epoch(k):
        # Real samples get a random key in [0, 1), padding sorts after them.
        priority = jnp.where(mask, jax.random.uniform(k, (n_max,)), 2.0)
        order = jnp.argsort(priority)
        order = jnp.concatenate([order, jnp.zeros((slots - n_max,), order.dtype)])
        valid = jnp.concatenate([mask[order[:n_max]], jnp.zeros((slots - n_max,), bool)])
        return order.reshape(per_epoch, batch_size), valid.reshape(per_epoch, batch_size)

    idx, valid = jax.vmap(one_epoch)(jax.random.split(key, epochs))
    return idx.reshape(-1, batch_size), valid.reshape(-1, batch_size)


def step_order(key: Array, mask: Array, steps: int, batch_size: int) -> tuple[Array, Array]:
    """Minibatch index plan for exactly ``steps`` optimiser steps: the first ``steps`` minibatches with
    real samples of successive freshly shuffled epochs, as a PyTorch loop that draws ``steps`` batches
    from a shuffling ``DataLoader`` and restarts it when it runs out.

    Args:
      key: PRNG key of the shuffling.
      mask: ``[n_max]`` bool, the client's real samples.
      steps: number of optimiser steps (positive).
      batch_size: samples per minibatch.

    Returns:
      ``(indices, valid)``, both ``[steps, batch_size]``. A client without samples gets ``steps``
      empty minibatches (no-ops in :func:`sgd_steps`).

    >>> idx, valid = step_order(jax.random.PRNGKey(0), jnp.array([True, True, True, False, False]), 3, 2)
    >>> idx.shape, valid.sum(1).tolist()  # 2 + 1 samples per epoch; the third step starts a new epoch
    ((3, 2), [2, 1, 2])
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    # A client with any sample has at least one real minibatch per epoch, so `steps` epochs suffice.
    indices, valid = epoch_order(key, mask, steps, batch_size)
    rows = jnp.argsort(jnp.logical_not(valid.any(axis=1)), stable=True)[:steps]  # real rows first, in order
    return indices[rows], valid[rows]


def _zero_invalid(a: Array, valid: Array) -> Array:
    return jnp.where(valid.reshape(valid.shape + (1,) * (a.ndim - 1)), a, jnp.zeros((), a.dtype))


def gather_minibatch(data: dict, idx: Array, valid: Array) -> dict:
    """Rows ``idx`` of every per-sample array, with padding slots zeroed (for custom step loops).

    Args:
      data: a dict of per-sample arrays ``[n_max, ...]``.
      idx: ``[B]`` sample indices (one row of :func:`epoch_order`'s ``indices``).
      valid: ``[B]`` bool, the real slots.

    Returns:
      A dict of ``[B, ...]`` arrays.

    >>> gather_minibatch({"x": jnp.array([5.0, 6.0, 7.0])}, jnp.array([2, 0]), jnp.array([True, False]))["x"].tolist()
    [7.0, 0.0]
    """
    return jax.tree.map(lambda a: _zero_invalid(a[idx], valid), data)


def sgd_steps(
    params: PyTree,
    loss_fn: LossFn,
    data: dict,
    indices: Array,
    valid: Array,
    optimizer: optax.GradientTransformation,
) -> tuple[PyTree, Array]:
    """Run one optimiser step per row of ``indices``; returns new params and the mean minibatch loss.

    Args:
      params: the parameters to train.
      loss_fn: ``loss_fn(params, minibatch, weights) -> scalar`` (a masked mean over the minibatch).
      data: a dict of per-sample arrays ``[n_max, ...]``.
      indices, valid: ``[steps, B]`` minibatch plan (:func:`epoch_order`).
      optimizer: an optax transformation, initialised fresh here.

    Returns:
      ``(params, mean loss over the steps that had real samples)``.

    >>> loss = lambda p, b, w: masked_mean((p - b["x"]) ** 2, w)
    >>> p, l = sgd_steps(0.0, loss, {"x": jnp.array([1.0, 3.0])}, jnp.array([[0, 1]]), jnp.ones((1, 2), bool),
    ...                  optax.sgd(0.5))
    >>> float(p), float(l)
    (2.0, 5.0)
    """
    stateless = lambda p, aux, batch, w, _key: (loss_fn(p, batch, w), aux)
    params, _, loss = sgd_steps_stateful(params, (), stateless, data, indices, valid, optimizer, None)
    return params, loss


def step_if(has_data: Array, step: Callable, carry: PyTree) -> tuple[PyTree, PyTree]:
    """``step(carry)`` if ``has_data``, else ``carry`` unchanged and zeros for the step's other outputs.

    A client padded to the largest one walks minibatches with no real sample. Skipping them, rather than
    computing the step and discarding it, is exact, and when clients run one at a time (``lax.map``) it
    saves their cost; under ``vmap`` the condition is per client, so JAX computes both branches and
    selects.

    Args:
      has_data: scalar bool, whether the step's minibatch holds a real sample.
      step: ``carry -> (new_carry, outputs)``.
      carry: the loop's carry.

    Returns:
      ``(new_carry, outputs)``, or ``(carry, zeros shaped as outputs)`` when the step is skipped.

    >>> step = lambda c: (c + 1.0, c * 10.0)
    >>> [tuple(map(float, step_if(jnp.array(ok), step, 2.0))) for ok in (True, False)]
    [(3.0, 20.0), (2.0, 0.0)]
    """
    outputs = jax.eval_shape(step, carry)[1]
    skip = lambda c: (c, jax.tree.map(lambda o: jnp.zeros(o.shape, o.dtype), outputs))
    return jax.lax.cond(has_data, step, skip, carry)


def sgd_steps_stateful(
    params: PyTree,
    model_state: PyTree,
    loss_fn: StatefulLossFn,
    data: dict,
    indices: Array,
    valid: Array,
    optimizer: optax.GradientTransformation,
    key: Array | None,
) -> tuple[PyTree, PyTree, Array]:
    """:func:`sgd_steps` for models with non-trainable state (BatchNorm running statistics) and
    per-step randomness (Gumbel noise, dropout).

    ``loss_fn(params, model_state, batch, weights, step_key) -> (loss, new_model_state)``; the step
    key is ``fold_in(key, step)``. Only ``params`` are optimised; ``model_state`` is threaded through
    the steps. A minibatch with no real sample changes neither.

    Args:
      params, model_state: the trained parameters and the threaded model state.
      loss_fn: ``(params, model_state, batch, weights, step_key) -> (loss, new_model_state)``.
      data, indices, valid, optimizer: as in :func:`sgd_steps`.
      key: PRNG key of the per-step randomness, or ``None`` (then ``step_key`` is ``None``).

    Returns:
      ``(params, model_state, mean_loss)``.

    >>> count = lambda p, s, b, w, k: (masked_mean((p - b["x"]) ** 2, w), s + 1)
    >>> p, s, l = sgd_steps_stateful(0.0, 0, count, {"x": jnp.array([1.0, 3.0])}, jnp.array([[0], [1]]),
    ...                              jnp.array([[True], [False]]), optax.sgd(0.5), None)
    >>> float(p), int(s), float(l)  # the second minibatch has no real sample: a no-op
    (1.0, 1, 1.0)
    """
    opt_state = optimizer.init(params)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    steps = jnp.arange(indices.shape[0])

    def step(carry, plan):
        idx, w, t = plan

        def train(carry):
            p, aux, s = carry
            step_key = jax.random.fold_in(key, t) if key is not None else None
            # Zero the padding slots so their content (even NaN) can never reach a loss or a gradient.
            batch = jax.tree.map(lambda a: _zero_invalid(a[idx], w), data)
            (loss, aux_new), grads = grad_fn(p, aux, batch, w.astype(jnp.float32), step_key)
            updates, s_new = optimizer.update(grads, s, p)
            return (optax.apply_updates(p, updates), aux_new, s_new), loss

        has_data = jnp.any(w)
        carry, loss = step_if(has_data, train, carry)
        return carry, (loss, has_data)

    (params, model_state, _), (losses, active) = jax.lax.scan(
        step, (params, model_state, opt_state), (indices, valid, steps))
    return params, model_state, masked_mean(losses, active)


def _trains(epochs: int) -> bool:
    """Whether a phase of ``epochs`` epochs trains at all (0: the parameters come back unchanged)."""
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    return epochs > 0


def local_train(params: PyTree, loss_fn: LossFn, data: dict, mask: Array, key: Array, *, epochs: int,
                batch_size: int, optimizer: optax.GradientTransformation) -> tuple[PyTree, Array]:
    """``epochs`` epochs of minibatch training of ``params`` on one client's masked data.

    Args:
      params: the parameters to train.
      loss_fn: ``loss_fn(params, minibatch, weights) -> scalar`` (a masked mean).
      data: a dict of per-sample arrays ``[n_max, ...]``.
      mask: ``[n_max]`` bool, the real samples.
      key: PRNG key of the shuffling.
      epochs, batch_size: the training length and minibatch size.
      optimizer: an optax transformation, initialised fresh for this call.

    Returns:
      ``(params, mean_loss)``. With ``epochs == 0`` the parameters come back unchanged.

    >>> p, l = local_train(0.0, lambda p, b, w: masked_mean((p - b["x"]) ** 2, w), {"x": jnp.array([2.0, 2.0, 9.0])},
    ...                    jnp.array([True, True, False]), jax.random.PRNGKey(0), epochs=2, batch_size=2,
    ...                    optimizer=optax.sgd(0.25))
    >>> float(p), float(l)  # 0 -> 1 -> 1.5 (losses 4, 1); the padded sample never counts
    (1.5, 2.5)
    """
    if not _trains(epochs):
        return params, jnp.zeros((), jnp.float32)
    indices, valid = epoch_order(key, mask, epochs, batch_size)
    return sgd_steps(params, loss_fn, data, indices, valid, optimizer)


def local_train_stateful(params: PyTree, model_state: PyTree, loss_fn: StatefulLossFn, data: dict, mask: Array,
                         key: Array, *, epochs: int, batch_size: int,
                         optimizer: optax.GradientTransformation) -> tuple[PyTree, PyTree, Array]:
    """:func:`local_train` for models with state (BatchNorm) and per-step noise: returns
    ``(params, model_state, mean_loss)``. The shuffling key and the per-step noise keys are
    independent streams split from ``key``.

    Args:
      params, model_state: the trained parameters and the threaded model state (e.g. BatchNorm statistics).
      loss_fn: ``(params, model_state, batch, weights, step_key) -> (loss, new_model_state)``.
      data, mask, key, epochs, batch_size, optimizer: as in :func:`local_train`.

    Returns:
      ``(params, model_state, mean_loss)``.

    >>> steps = lambda p, s, b, w, k: (masked_mean((p - b["x"]) ** 2, w), s + 1)
    >>> p, s, l = local_train_stateful(0.0, 0, steps, {"x": jnp.array([2.0, 2.0, 9.0])}, jnp.array([True, True, False]),
    ...                                jax.random.PRNGKey(0), epochs=2, batch_size=2, optimizer=optax.sgd(0.25))
    >>> float(p), int(s), float(l)  # two real minibatches counted; the empty ones change nothing
    (1.5, 2, 2.5)
    """
    if not _trains(epochs):
        return params, model_state, jnp.zeros((), jnp.float32)
    k_order, k_noise = jax.random.split(key)
    indices, valid = epoch_order(k_order, mask, epochs, batch_size)
    return sgd_steps_stateful(params, model_state, loss_fn, data, indices, valid, optimizer, k_noise)


def batched_apply(fn: Callable[[Array], Array], x: Array, chunk: int = 200) -> Array:
    """``fn`` over the leading axis of ``x`` in chunks (bounded memory for feature extraction).

    Args:
      fn: a function of a ``[chunk, ...]`` batch (row-wise, so the zero padding of the last chunk is harmless).
      x: ``[n, ...]`` inputs.
      chunk: rows per call of ``fn``.

    Returns:
      ``fn(x)``, computed ``chunk`` rows at a time.

    >>> batched_apply(lambda a: a * 2, jnp.arange(5.0), chunk=2).tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    n = x.shape[0]
    if n <= chunk:
        return fn(x)
    pad = (-n) % chunk
    xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
    out = jax.lax.map(fn, xp.reshape((-1, chunk) + x.shape[1:]))
    return out.reshape((-1,) + out.shape[2:])[:n]
