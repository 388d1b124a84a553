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
    (:func:`pflax.core.execution.place_for`), so the first round's compilation serves every round."""

    @functools.wraps(init)
    def placed_init(*args, **kwargs):
        state = init(*args, **kwargs)
        return place_for(state.config.execution, state)

    return placed_init


def check_batch(num_clients: int, num_classes: int, data: ClientData, what: str) -> None:
    """Eager, readable validation of a round's batch against the federation."""
    validate(data, num_classes, what=what)
    ids = np.asarray(data.client_ids)
    if ids.size == 0:
        raise DataError(f"{what}: no clients in the batch (zero clients sampled)")
    if ids.min() < 0 or ids.max() >= num_clients:
        raise DataError(f"{what}: client ids must lie in [0, {num_clients}), found [{ids.min()}, {ids.max()}]")
