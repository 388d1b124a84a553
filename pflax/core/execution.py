"""The one place where pflax iterates over clients.

An algorithm writes what *one* client does, ``fn(client_inputs, shared) -> outputs``, and hands it to
:func:`map_clients` with inputs that carry a leading client axis. How the clients then run is an
:class:`Execution` choice, never the algorithm's business:

* ``"vmap"``: all clients at once (the default on GPU/TPU).
* ``"map"``: one client after another with ``lax.map`` inside the same jit (bounded memory).
* ``"chunked"``: ``lax.map`` over chunks of ``chunk_size`` vmapped clients (memory-bounded vmap).
* ``"sharded"``: the client axis split over a 1-D device mesh with ``shard_map``; each device runs its
  block with the per-device strategy (``inner``). Works for forced host devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=8``), several GPUs, and several hosts once
  ``jax.distributed.initialize()`` has made their devices visible (two processes over gloo are tested in
  ``tests/test_multiprocess.py``; each process passes only its clients' rows, assembled with
  ``jax.make_array_from_process_local_data``).
* ``"auto"``: ``sharded`` when more than one device is visible, else ``vmap`` on accelerators and
  ``map`` on CPU (measured in ``benchmarks/execution_strategies.py``; on XLA:CPU, vmapping per-client
  weights turns convolutions/matmuls into batched kernels that run slower per client than a sequential
  map).

Every strategy computes the same function; results agree to float round-off (``tests/test_execution.py``).
Runs are deterministic: the same seed and strategy give bit-identical states and metrics. Across
strategies, ``map`` and ``sharded`` with ``inner="map"`` run the same kernels and are bit-identical;
``chunked`` and ``vmap`` batch clients, and XLA:CPU's batched matmuls round differently from
unbatched ones (~1e-9 on parameters after a round), so they agree with ``map`` to round-off only
(``tests/test_determinism.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

Array = jax.Array
PyTree = Any

STRATEGIES = ("auto", "vmap", "map", "chunked", "sharded")


@dataclasses.dataclass(frozen=True)
class Execution:
    strategy: str = "auto"
    chunk_size: int = 4
    inner: str = "auto"  # per-device strategy used by "sharded" ("vmap", "map" or "auto")

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown execution strategy {self.strategy!r}; choose one of {STRATEGIES}")
        if self.inner not in ("auto", "vmap", "map", "chunked"):
            raise ValueError(f"inner strategy must be 'auto', 'vmap', 'map' or 'chunked', got {self.inner!r}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")

    def resolve(self) -> str:
        if self.strategy != "auto":
            return self.strategy
        if jax.device_count() > 1:
            return "sharded"
        return _single_device_default()

    def resolve_inner(self) -> str:
        return _single_device_default() if self.inner == "auto" else self.inner


def _single_device_default() -> str:
    return "map" if jax.default_backend() == "cpu" else "vmap"


def _num_clients(tree: PyTree) -> int:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("map_clients needs at least one per-client array")
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(f"per-client inputs disagree on the number of clients: {sorted(sizes)}")
    return sizes.pop()


def _pad_clients(tree: PyTree, multiple: int) -> tuple[PyTree, int]:
    n = _num_clients(tree)
    pad = (-n) % multiple
    if pad == 0:
        return tree, n
    # Padding slots repeat client 0; their outputs are dropped.
    return jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]), tree), n


def _run_local(fn: Callable, per_client: PyTree, shared: PyTree, strategy: str, chunk_size: int) -> PyTree:
    if strategy == "vmap":
        return jax.vmap(fn, in_axes=(0, None))(per_client, shared)
    if strategy == "map":
        return jax.lax.map(lambda c: fn(c, shared), per_client)
    if strategy == "chunked":
        padded, n = _pad_clients(per_client, chunk_size)
        blocks = jax.tree.map(lambda a: a.reshape((-1, chunk_size) + a.shape[1:]), padded)
        out = jax.lax.map(lambda b: jax.vmap(fn, in_axes=(0, None))(b, shared), blocks)
        return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:])[:n], out)
    raise ValueError(f"not a single-device strategy: {strategy!r}")


def client_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``"clients"`` over ``devices`` (default: all visible devices, all hosts)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), ("clients",))


def map_clients(
    fn: Callable[[PyTree, PyTree], PyTree],
    per_client: PyTree,
    shared: PyTree = (),
    execution: Execution = Execution(),
) -> PyTree:
    """Apply ``fn(client_slice, shared)`` to every client; outputs are stacked on a leading client axis."""
    strategy = execution.resolve()
    if strategy != "sharded":
        return _run_local(fn, per_client, shared, strategy, execution.chunk_size)

    mesh = client_mesh()
    ndev = mesh.devices.size
    padded, n = _pad_clients(per_client, ndev)
    inner = execution.resolve_inner()

    def block(local_clients, local_shared):
        return _run_local(fn, local_clients, local_shared, inner, execution.chunk_size)

    spec_clients = jax.tree.map(lambda _: PartitionSpec("clients"), padded)
    spec_shared = jax.tree.map(lambda _: PartitionSpec(), shared)
    out_shape = jax.eval_shape(lambda c, s: jax.vmap(fn, in_axes=(0, None))(c, s), padded, shared)
    spec_out = jax.tree.map(lambda _: PartitionSpec("clients"), out_shape)
    sharded = jax.shard_map(
        block, mesh=mesh, in_specs=(spec_clients, spec_shared), out_specs=spec_out, check_vma=False
    )
    out = sharded(padded, shared)
    return jax.tree.map(lambda a: a[:n], out)
