"""The one place where pflax iterates over clients.

An algorithm writes what *one* client does, ``fn(client_inputs, shared) -> outputs``, and hands it to
:func:`map_clients` with inputs that carry a leading client axis. How the clients then run is an
:class:`Execution` choice, never the algorithm's business.

:func:`map_reduce_clients` is the same with a server-side sum fused in: ``fn`` returns ``(kept, summed)``,
``kept`` is stacked per client and ``summed`` is added up over the clients as they finish. Under
``map``, ``chunked`` and ``sharded`` the per-client ``summed`` values are never stacked, so a weighted
model average costs one model of memory instead of one per participant (at 10,000 clients of the FMNIST
CNN, 4.4 GiB). ``vmap`` materialises every client at once anyway and sums afterwards. The strategies:

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
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import aggregate

Array = jax.Array
PyTree = Any

STRATEGIES = ("auto", "vmap", "map", "chunked", "sharded")


@dataclasses.dataclass(frozen=True)
class Execution:
    """How :func:`map_clients` and :func:`map_reduce_clients` run the clients (see the module docstring).

    Attributes:
      strategy: one of :data:`STRATEGIES`: ``"auto"``, ``"vmap"``, ``"map"``, ``"chunked"``, ``"sharded"``.
      chunk_size: clients vmapped together per step of ``"chunked"``.
      inner: per-device strategy of ``"sharded"`` (``"auto"``, ``"vmap"``, ``"map"`` or ``"chunked"``).

    ``resolve()`` gives the concrete strategy (``"auto"`` chosen from the visible devices);
    ``resolve_inner()`` the one each device runs under ``"sharded"``.

    >>> Execution("chunked", chunk_size=2).resolve(), Execution().resolve() in STRATEGIES
    ('chunked', True)
    """

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


def _zero_invalid(tree: PyTree, valid: Array) -> PyTree:
    """Zero the contributions of padding slots (``where``, not a product, so a NaN there cannot leak)."""
    return jax.tree.map(lambda a: jnp.where(valid.reshape(valid.shape + (1,) * (a.ndim - valid.ndim)), a, 0), tree)


def _sum_valid(tree: PyTree, valid: Array) -> PyTree:
    """Sum over the leading (client) axis of the valid slots, written as a dot product with 0/1 weights.

    XLA:CPU runs a reduce over the major axis far slower than the equivalent matrix-vector product
    (measured, a [1000, 784, 200] float32 array: ``sum(0)`` 1.9 s, ``tensordot(ones, .)`` 0.03 s), and
    under ``vmap`` this sum adds up every client's model. ``where`` first, so that a NaN in a padding
    slot cannot leak into the sum (``0 * NaN`` is NaN).
    """

    def one(a):
        return jnp.tensordot(valid.astype(a.dtype), a, axes=(0, 0), precision=aggregate.EXACT)

    return jax.tree.map(one, _zero_invalid(tree, valid))


def _run_local_reduce(
    fn: Callable, per_client: PyTree, valid: Array, shared: PyTree, strategy: str, chunk_size: int
) -> tuple[PyTree, PyTree]:
    """``(stacked kept, sum of summed over valid slots)`` on one device."""
    if strategy == "vmap":
        kept, summed = jax.vmap(fn, in_axes=(0, None))(per_client, shared)
        return kept, _sum_valid(summed, valid)

    # Shapes only (no indexing), so zero clients give a zero sum rather than an index error.
    one = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), per_client)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(lambda c: fn(c, shared)[1], one))

    if strategy == "map":

        def step(total, client_and_valid):
            client, ok = client_and_valid
            kept, summed = fn(client, shared)
            return jax.tree.map(jnp.add, total, _zero_invalid(summed, ok)), kept

        total, kept = jax.lax.scan(step, zeros, (per_client, valid))
        return kept, total
    if strategy == "chunked":
        padded, n = _pad_clients(per_client, chunk_size)
        ok = jnp.concatenate([valid, jnp.zeros(_num_clients(padded) - n, bool)])
        blocks = jax.tree.map(lambda a: a.reshape((-1, chunk_size) + a.shape[1:]), (padded, ok))

        def chunk_step(total, block):
            clients, ok_block = block
            kept, summed = jax.vmap(fn, in_axes=(0, None))(clients, shared)
            return jax.tree.map(jnp.add, total, _sum_valid(summed, ok_block)), kept

        total, kept = jax.lax.scan(chunk_step, zeros, blocks)
        return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:])[:n], kept), total
    raise ValueError(f"not a single-device strategy: {strategy!r}")


def use_host_devices(count: int) -> int:
    """Split this process's CPU into ``count`` XLA devices, so that ``Execution("auto")`` (and
    ``"sharded"``) spread the clients over them, one device per core. It pays for many small clients:
    a 1000-client MLP FedAvg round took 1.11 s on 2 host devices against 2.37 s with ``map`` on one.
    For FedPAC's CNN acceptance round (20 clients x 600) the two were level on an idle 2-core CPU,
    so ``map`` on one device stays the default (``docs/performance.md``). On a busy machine the extra
    device only adds synchronisation.

    JAX fixes its CPU devices when it first runs something, so call this right after ``import
    jax``; ``pflax run --host-devices N`` does. The split changes the order of the server's sums
    over clients, so results agree with one device's to float round-off, not bit for bit.

    Args:
      count: the number of CPU devices, at least 1.

    Returns:
      ``count``.

    Raises:
      ValueError: ``count`` below 1.
      RuntimeError: JAX has already run something with another number of CPU devices.

    >>> use_host_devices(len(jax.devices("cpu")))  # already so: nothing to change
    1
    """
    count = int(count)
    if count < 1:
        raise ValueError(f"host devices must be at least 1, got {count}")
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # JAX has run something: its CPU devices are fixed
        have = len(jax.devices("cpu"))
        if have != count:
            raise RuntimeError(f"JAX already runs with {have} CPU device(s); ask for {count} before JAX "
                               "runs anything (right after `import jax`)") from None
    return count


def client_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``"clients"`` over ``devices`` (default: all visible devices, all hosts).

    Args:
      devices: a sequence of ``jax.Device``; ``None`` for ``jax.devices()``.

    Returns:
      A ``jax.sharding.Mesh`` with the one axis ``"clients"``.

    >>> client_mesh(jax.devices()[:1]).axis_names
    ('clients',)
    """
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), ("clients",))


def _replicated() -> NamedSharding:
    """Whole on every device of the client mesh."""
    return NamedSharding(client_mesh(), PartitionSpec())


def place_for(execution: Execution, tree: PyTree) -> PyTree:
    """``tree`` put where rounds run with ``execution`` leave their state.

    Under ``sharded`` a round returns its state replicated over the client mesh. A state created on
    one device (``init``) therefore enters the first round with a different sharding than every later
    round, and ``jax.jit`` compiles the round twice. Placing the initial state replicated on the mesh
    keeps it to one compilation. Other strategies: ``tree`` unchanged. Works across hosts: each
    process supplies its own devices' copies (every process holds the same initial state).

    Args:
      execution: the strategy the rounds will run with.
      tree: the initial state (any pytree of arrays and PRNG keys).

    Returns:
      ``tree``, replicated on the client mesh under ``sharded``.

    >>> place_for(Execution("map"), {"a": jnp.ones(2)})["a"].tolist()
    [1.0, 1.0]
    """
    if execution.resolve() != "sharded":
        return tree
    sharding = _replicated()

    def put(leaf):
        if isinstance(leaf, jax.Array) and leaf.sharding == sharding:
            return leaf
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return jax.device_put(leaf, sharding)
        host = np.asarray(leaf)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def replicate(tree: PyTree, execution: Execution) -> PyTree:
    """``tree`` constrained to be whole on every device when ``execution`` runs ``sharded``.

    For small server-side computations on per-client outputs (FedPAC's QP): without the constraint,
    XLA's partitioner splits them along the client axis it inherits and then exchanges data inside
    their loops, one collective per iteration. Replicated, they cost one all-gather of the inputs.
    Other strategies: ``tree`` unchanged.

    Args:
      tree: arrays inside a traced (jitted) computation.
      execution: the round's strategy.

    Returns:
      ``tree``, with a replicated sharding constraint under ``sharded``.

    >>> replicate(jnp.arange(3), Execution("vmap")).tolist()
    [0, 1, 2]
    """
    if execution.resolve() != "sharded":
        return tree
    sharding = _replicated()
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def map_clients(
    fn: Callable[[PyTree, PyTree], PyTree],
    per_client: PyTree,
    shared: PyTree = (),
    execution: Execution = Execution(),
) -> PyTree:
    """Apply ``fn(client_slice, shared)`` to every client; outputs are stacked on a leading client axis.

    Args:
      fn: what one client computes, ``fn(client_slice, shared) -> outputs``.
      per_client: a tree whose leaves have the same leading client axis.
      shared: a tree passed whole to every client.
      execution: how the clients run.

    Returns:
      ``fn``'s outputs with a leading client axis.

    >>> map_clients(lambda c, s: c * s, jnp.arange(3.0), 2.0, Execution("map")).tolist()
    [0.0, 2.0, 4.0]
    """
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


def map_reduce_clients(
    fn: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]],
    per_client: PyTree,
    shared: PyTree = (),
    execution: Execution = Execution(),
) -> tuple[PyTree, PyTree]:
    """Apply ``fn(client_slice, shared) -> (kept, summed)`` to every client.

    Returns ``(kept stacked on a leading client axis, summed added up over the clients)``. Use it for
    server sums such as a weighted model average: let each client return ``weight_i * params_i`` as
    ``summed`` (weights normalised beforehand), and no per-client copy of the model is ever stacked
    (except under ``vmap``, which holds every client at once by design). Padding slots that
    ``chunked`` and ``sharded`` add never contribute to the sum.

    The sum is accumulated in client order within a device (``map``), per chunk then across chunks
    (``chunked``), or per device then across devices (``sharded``, a ``psum``), so strategies agree to
    float round-off; ``map`` and ``sharded`` on a one-device mesh with ``inner="map"`` are bit-identical.

    Args:
      fn: ``fn(client_slice, shared) -> (kept, summed)``.
      per_client: a tree whose leaves have the same leading client axis.
      shared: a tree passed whole to every client.
      execution: how the clients run.

    Returns:
      ``(kept, summed)``: ``kept`` with a leading client axis, ``summed`` added up over the clients.

    >>> kept, total = map_reduce_clients(lambda c, s: (c + s, c), jnp.arange(4.0), 1.0, Execution("chunked", 3))
    >>> kept.tolist(), float(total)
    ([1.0, 2.0, 3.0, 4.0], 6.0)
    """
    strategy = execution.resolve()
    n = _num_clients(per_client)
    if strategy != "sharded":
        return _run_local_reduce(fn, per_client, jnp.ones(n, bool), shared, strategy, execution.chunk_size)

    mesh = client_mesh()
    ndev = mesh.devices.size
    padded, _ = _pad_clients(per_client, ndev)
    valid = jnp.arange(_num_clients(padded)) < n
    inner = execution.resolve_inner()

    def block(local_clients, local_valid, local_shared):
        kept, summed = _run_local_reduce(fn, local_clients, local_valid, local_shared, inner, execution.chunk_size)
        return kept, jax.lax.psum(summed, "clients")

    spec_clients = jax.tree.map(lambda _: PartitionSpec("clients"), padded)
    spec_shared = jax.tree.map(lambda _: PartitionSpec(), shared)
    kept_shape, summed_shape = jax.eval_shape(lambda c, s: jax.vmap(fn, in_axes=(0, None))(c, s), padded, shared)
    spec_out = (
        jax.tree.map(lambda _: PartitionSpec("clients"), kept_shape),
        jax.tree.map(lambda _: PartitionSpec(), summed_shape),
    )
    sharded = jax.shard_map(
        block, mesh=mesh, in_specs=(spec_clients, PartitionSpec("clients"), spec_shared), out_specs=spec_out,
        check_vma=False,
    )
    kept, summed = sharded(padded, valid, shared)
    return jax.tree.map(lambda a: a[:n], kept), summed


def map_clients_and_average(
    fn: Callable[[PyTree, PyTree], dict],
    per_client: PyTree,
    shared: PyTree,
    execution: Execution,
    average: str,
    weights: Array,
    fallback: PyTree,
) -> tuple[dict, PyTree]:
    """Run ``fn(client, shared) -> dict`` for every client and average ``dict[average]`` on the fly.

    Returns ``(fn's other outputs, stacked; sum_i w_i * out_i[average] / sum_i w_i)``, or ``fallback``
    when every weight is zero. ``weights`` must be known before the clients run (e.g. sample sizes):
    each client adds its weighted term to a running sum (:func:`map_reduce_clients`), so the averaged
    outputs are never stacked.

    Args:
      fn: ``fn(client_slice, shared) -> dict``, one client's outputs.
      per_client, shared, execution: as in :func:`map_clients`.
      average: the key of ``fn``'s output to average.
      weights: ``[m]`` non-negative client weights (normalised here).
      fallback: the average when every weight is zero.

    Returns:
      ``(other outputs stacked on a client axis, weighted mean of out[average] or fallback)``.

    >>> kept, mean = map_clients_and_average(lambda c, s: {"p": c, "sq": c * c}, jnp.array([1.0, 3.0]), (),
    ...                                      Execution("map"), "p", jnp.array([1.0, 3.0]), jnp.zeros(()))
    >>> kept["sq"].tolist(), float(mean)
    ([1.0, 9.0], 2.5)
    """
    normalized = aggregate.normalized_weights(weights)

    def client(c, s):
        out = dict(fn(c["inputs"], s))
        part = out.pop(average)
        return out, aggregate.weighted_term(part, c["weight"])

    kept, mean = map_reduce_clients(client, {"inputs": per_client, "weight": normalized}, shared, execution)
    return kept, aggregate.unless_no_weight(mean, normalized, fallback)
