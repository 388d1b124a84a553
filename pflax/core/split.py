"""Body/head split of model parameters.

Models in :mod:`pflax.models` keep parameters as ``{"body": ..., "head": ...}``; these helpers name
that convention and build masks from it, so algorithms say *what* is shared or frozen, not *how*.
"""
from __future__ import annotations

from typing import Any

import jax

PyTree = Any

BODY, HEAD = "body", "head"


def split(params: PyTree) -> tuple[PyTree, PyTree]:
    """``(body, head)`` of a split-model parameter tree.

    Args:
      params: a tree ``{"body": ..., "head": ...}``.

    Returns:
      ``(params["body"], params["head"])``; ``ValueError`` for any other tree.

    >>> split({"body": {"w": 1}, "head": {"w": 2}})
    ({'w': 1}, {'w': 2})
    """
    try:
        return params[BODY], params[HEAD]
    except (KeyError, TypeError) as err:
        raise ValueError("expected parameters of the form {'body': ..., 'head': ...} (a pflax SplitModel)") from err


def merge(body: PyTree, head: PyTree) -> dict:
    """The split-model tree of a body and a head, the inverse of :func:`split`.

    Args:
      body: the feature extractor's parameters.
      head: the classifier's parameters.

    Returns:
      ``{"body": body, "head": head}``.

    >>> merge({"w": 1}, {"w": 2})
    {'body': {'w': 1}, 'head': {'w': 2}}
    """
    return {BODY: body, HEAD: head}


def part_mask(params: PyTree, part: str) -> PyTree:
    """Boolean tree over ``params``: True on the leaves of ``part`` ("body" or "head").

    Args:
      params: a split-model tree ``{"body": ..., "head": ...}``.
      part: ``"body"`` or ``"head"``.

    Returns:
      A tree like ``params`` of Python bools (e.g. the ``trainable`` mask of :func:`pflax.core.optim.freeze`).

    >>> part_mask({"body": {"w": 0.0}, "head": {"b": 0.0, "w": 0.0}}, "head")
    {'body': {'w': False}, 'head': {'b': True, 'w': True}}
    """
    if part not in (BODY, HEAD):
        raise ValueError(f"part must be 'body' or 'head', got {part!r}")
    return {name: jax.tree.map(lambda _: name == part, sub) for name, sub in params.items()}
