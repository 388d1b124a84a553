"""Two pieces every algorithm's entry points share: placing the initial state and eager batch checks."""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np

from ..core.execution import place_for
from ..data.clients import ClientData, validate
from ..data.sources import DataError

Array = jax.Array
PyTree = Any


def init_on_execution_devices(init: Callable) -> Callable:
    """Decorator for an algorithm's ``init``: the state starts where its rounds will leave it
    (:func:`pflax.core.execution.place_for`), so the first round's compilation serves every round.

    Args:
      init: ``init(...) -> state`` whose ``state.config.execution`` says where rounds run.
    Returns:
      the same function, returning the placed state.

    >>> from types import SimpleNamespace
    >>> from pflax.core.execution import Execution
    >>> make = init_on_execution_devices(lambda n: SimpleNamespace(n=n, config=SimpleNamespace(execution=Execution("map"))))
    >>> make(3).n  # not sharded: the state comes back as it is
    3
    """

    @functools.wraps(init)
    def placed_init(*args, **kwargs):
        state = init(*args, **kwargs)
        return place_for(state.config.execution, state)

    return placed_init


def check_batch(num_clients: int, num_classes: int, data: ClientData, what: str) -> None:
    """Eager, readable validation of a round's batch against the federation.

    Args:
      num_clients: N, the federation's size.
      num_classes: the model's classes.
      data: the batch (:class:`pflax.data.ClientData`).
      what: its name in error messages.
    Returns:
      None; raises :class:`pflax.data.DataError` on a bad batch.

    >>> from pflax.data import toy_federation
    >>> train, _ = toy_federation()
    >>> check_batch(2, 10, train, "batch")  # valid: nothing happens
    >>> check_batch(2, 3, train, "batch")
    Traceback (most recent call last):
    pflax.data.sources.DataError: batch: labels must lie in [0, 3), found [0, 9]
    """
    validate(data, num_classes, what=what)
    ids = np.asarray(data.client_ids)
    if ids.size == 0:
        raise DataError(f"{what}: no clients in the batch (zero clients sampled)")
    if ids.min() < 0 or ids.max() >= num_clients:
        raise DataError(f"{what}: client ids must lie in [0, {num_clients}), found [{ids.min()}, {ids.max()}]")
