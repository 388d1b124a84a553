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
    """``(body, head)`` of a split-model parameter tree."""
    try:
        return params[BODY], params[HEAD]
    except (KeyError, TypeError) as err:
        raise ValueError("expected parameters of the form {'body': ..., 'head': ...} (a pflax SplitModel)") from err


def merge(body: PyTree, head: PyTree) -> dict:
    return {BODY: body, HEAD: head}


def part_mask(params: PyTree, part: str) -> PyTree:
    """Boolean tree over ``params``: True on the leaves of ``part`` ("body" or "head")."""
    if part not in (BODY, HEAD):
        raise ValueError(f"part must be 'body' or 'head', got {part!r}")
    return {name: jax.tree.map(lambda _: name == part, sub) for name, sub in params.items()}
