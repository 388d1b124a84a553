"""A tiny FedPAC setting shared by the robustness tests (one jit compilation serves them all)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pflax import fedpac
from pflax.core.execution import Execution
from pflax.data import ClientData
from pflax.models import mlp

NUM_CLIENTS, N_MAX, NUM_CLASSES, IMAGE = 5, 12, 4, (4, 4, 1)
MODEL = mlp(NUM_CLASSES, (8,))


def config(strategy: str = "map", **overrides) -> fedpac.Config:
    return fedpac.Config(batch_size=4, body_epochs=1, execution=Execution(strategy, chunk_size=2), **overrides)


def client_data(seed: int = 0, num_clients: int = NUM_CLIENTS) -> ClientData:
    """Class-dependent Gaussian blobs, every client holding every class."""
    rng = np.random.default_rng(seed)
    y = np.tile(np.arange(NUM_CLASSES, dtype=np.int32), (num_clients, N_MAX // NUM_CLASSES))
    centers = rng.standard_normal((NUM_CLASSES,) + IMAGE).astype(np.float32)
    x = centers[y] + 0.5 * rng.standard_normal(y.shape + IMAGE).astype(np.float32)
    return ClientData(jnp.asarray(x), jnp.asarray(y), jnp.ones(y.shape, bool), jnp.arange(num_clients, dtype=jnp.int32))


def with_arrays(data: ClientData, **arrays) -> ClientData:
    fields = {"x": data.x, "y": data.y, "mask": data.mask, "client_ids": data.client_ids}
    fields.update({k: jnp.asarray(v) for k, v in arrays.items()})
    return ClientData(**fields)


def init(seed: int = 0, cfg: fedpac.Config | None = None, num_clients: int = NUM_CLIENTS) -> fedpac.State:
    sample = jnp.zeros((1,) + IMAGE, jnp.float32)
    return fedpac.init(jax.random.PRNGKey(seed), MODEL, sample, num_clients, cfg or config())


def run(state: fedpac.State, data: ClientData, rounds: int, fraction: float = 1.0):
    """``rounds`` rounds with the state's own client sampling; returns (state, [metrics per round])."""
    history = []
    for _ in range(rounds):
        ids = fedpac.sample_clients(state, fraction)
        state, metrics = fedpac.round(state, data.take(ids))
        history.append(jax.device_get(metrics))
    return state, history


def assert_all_finite(tree) -> None:
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf))), "NaN/Inf in the state"


def tree_equal(a, b) -> bool:
    """Bit-identical pytrees (NaN-safe byte comparison)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(la, lb)
    )
