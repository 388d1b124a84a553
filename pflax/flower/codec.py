"""Pytrees as named NumPy arrays, and back, without pickle.

A message between the server and a client is a pytree (a model, a per-client row, a PRNG key, an
upload). Both sides know its structure from the shared configuration (the algorithm, model, config and
data shapes; see :class:`pflax.flower.protocol.Plan`), so only the leaves travel: each leaf is named by
its path in the tree (``jax.tree_util.keystr``) and sent as a NumPy array, in Flower as an
``ArrayRecord`` (whose arrays Flower encodes with ``numpy.save`` and decodes with
``allow_pickle=False``). The receiver rebuilds the tree from its own template, and refuses a record
with a missing, extra or mis-shaped leaf. Typed PRNG keys travel as their raw key data.

>>> import jax.numpy as jnp
>>> tree = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
>>> arrays = to_arrays(tree)
>>> sorted(arrays)
["['b']", "['w']"]
>>> back = from_arrays(arrays, tree)
>>> back["w"].shape, back["b"].dtype.name
((2, 3), 'float32')
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

__all__ = ["CodecError", "to_arrays", "from_arrays"]

PyTree = Any


class CodecError(ValueError):
    """A record does not match the tree the receiver expects (a leaf missing, extra or mis-shaped).

    >>> issubclass(CodecError, ValueError)
    True
    """


def _is_key(dtype) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def to_arrays(tree: PyTree) -> dict[str, np.ndarray]:
    """Every leaf of ``tree`` as a host NumPy array, named by its path.

    Args:
      tree: a pytree of arrays (JAX or NumPy, typed PRNG keys included) or scalars.

    Returns:
      ``{keystr(path): array}``, in the tree's leaf order.

    >>> import jax.numpy as jnp
    >>> to_arrays({"a": [jnp.arange(2), 3.0]})
    {"['a'][0]": array([0, 1], dtype=int32), "['a'][1]": array(3.)}
    """
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if hasattr(leaf, "dtype") and _is_key(leaf.dtype):
            leaf = jax.random.key_data(leaf)
        out[jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def from_arrays(arrays: Mapping[str, np.ndarray], like: PyTree, what: str = "record") -> PyTree:
    """The tree shaped as ``like`` whose leaves are ``arrays`` (as :func:`to_arrays` named them).

    Args:
      arrays: ``{path: array}``.
      like: the template: a pytree of arrays or ``jax.ShapeDtypeStruct`` (for instance from
        ``jax.eval_shape``); it supplies the structure, and every leaf's shape and dtype are checked.
      what: a name for error messages.

    Returns:
      the tree, with JAX arrays as leaves (typed PRNG keys re-wrapped).

    Raises:
      CodecError: a leaf is missing, extra, or of another shape or dtype.

    >>> import jax, jax.numpy as jnp
    >>> like = {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}
    >>> from_arrays({"['w']": np.ones(2, np.float32)}, like)["w"].tolist()
    [1.0, 1.0]
    >>> from_arrays({"['w']": np.ones(3, np.float32)}, like)
    Traceback (most recent call last):
    ...
    pflax.flower.codec.CodecError: record: leaf ['w'] has shape (3,) float32, expected (2,) float32
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path(like)
    names = [jax.tree_util.keystr(path) for path, _ in flat]
    missing = [n for n in names if n not in arrays]
    extra = sorted(set(arrays) - set(names))
    if missing or extra:
        raise CodecError(f"{what}: leaves missing {missing[:5]}, unexpected {extra[:5]}")
    leaves = []
    for name, (_, spec) in zip(names, flat):
        value = np.asarray(arrays[name])
        key = _is_key(spec.dtype)
        want_dtype = np.dtype("uint32") if key else np.dtype(spec.dtype)
        want_shape = tuple(spec.shape) + ((value.shape[-1],) if key and value.ndim else ())
        if value.shape != want_shape or value.dtype != want_dtype:
            raise CodecError(f"{what}: leaf {name} has shape {value.shape} {value.dtype}, "
                             f"expected {want_shape} {np.dtype(want_dtype)}")
        leaf = jax.numpy.asarray(value)
        if key:
            leaf = jax.random.wrap_key_data(leaf, impl=getattr(spec.dtype, "_impl", None))
        leaves.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, leaves)
