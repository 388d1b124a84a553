"""One process of a multi-process (multi-host style) FedPAC run; driven by ``tests/test_multiprocess.py``.

Each process calls ``jax.distributed.initialize`` (CPU collectives over gloo), so ``jax.devices()``
lists the devices of every process, ``Execution("auto")`` resolves to ``sharded`` and the client axis
is split over the processes. Each process supplies only its own block of clients
(``jax.make_array_from_process_local_data``), exactly as separate hosts would. It runs three rounds,
checkpoints after the second, restores that checkpoint into a fresh state and runs the third round
again; process 0 writes the final state (gathered) and the restored run's difference to ``--out``.

    python tests/_multiprocess_worker.py --process-id 0 --num-processes 1 --port 0 --out a.npz --ckpt dir
"""
from __future__ import annotations

import argparse
import json

import numpy as np

CLIENTS, SAMPLES = 8, 24


def federation():
    """8 clients of different sizes (padding masked out), labels skewed per client."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((CLIENTS, SAMPLES, 28, 28, 1)).astype(np.float32)
    y = np.stack([(rng.integers(0, 4, SAMPLES) + 2 * i) % 10 for i in range(CLIENTS)]).astype(np.int32)
    sizes = np.array([24, 20, 17, 24, 12, 24, 9, 22])
    mask = np.arange(SAMPLES)[None, :] < sizes[:, None]
    return x, y, mask


def run(num_processes: int, out: str, ckpt: str, process_id: int = 0, port: int = 0) -> None:
    """The run; with ``num_processes=1`` it can also be called in-process (no ``jax.distributed``)."""
    import jax

    if num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"localhost:{port}", num_processes=num_processes, process_id=process_id)

    from jax.sharding import NamedSharding, PartitionSpec

    from pflax import checkpoint
    from pflax.algorithms import fedpac
    from pflax.core.execution import Execution, client_mesh
    from pflax.data import ClientData
    from pflax.models import mlp

    x, y, mask = federation()
    per_process = CLIENTS // jax.process_count()
    lo = jax.process_index() * per_process
    clients_axis = NamedSharding(client_mesh(), PartitionSpec("clients"))

    def global_array(a):  # this process holds only rows lo .. lo + per_process
        return jax.make_array_from_process_local_data(clients_axis, a[lo : lo + per_process], a.shape)

    batch = ClientData(global_array(x), global_array(y), global_array(mask), global_array(np.arange(CLIENTS, dtype=np.int32)))
    execution = Execution("auto")
    cfg = fedpac.Config(batch_size=8, body_epochs=2, execution=execution)
    fresh = fedpac.init(jax.random.PRNGKey(3), mlp(10, hidden=(32, 16)), x[0], CLIENTS, cfg)
    replicated = NamedSharding(client_mesh(), PartitionSpec())

    def place(state):
        """Per-client state lives with its clients (each process holds its clients' heads only); the
        rest is replicated. Placing every state the same way lets all rounds share one compilation."""
        state = jax.tree.map(lambda a: jax.device_put(a, replicated), state)
        return state.replace(clients=jax.tree.map(lambda h: global_array(np.asarray(h.addressable_data(0))), state.clients))

    fresh = place(fresh)

    state = fresh
    for _ in range(2):
        state, _ = fedpac.round(state, batch)
    heads_sharded_at_save = not jax.tree.leaves(state.clients)[0].is_fully_replicated
    checkpoint.save(ckpt, state)
    final, metrics = fedpac.round(state, batch)
    resumed = place(checkpoint.restore(ckpt, fresh).state)
    again, _ = fedpac.round(resumed, batch)

    host = checkpoint._host_array  # the whole array on this process, gathered across processes if need be

    def gathered(tree):
        return [host(leaf) for leaf in jax.tree.leaves(tree)]

    arrays = {"body": final.server["body"], "heads": final.clients["head"], "centroids": final.server["centroids"]}
    leaves = gathered(arrays)
    resume_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves, gathered({"body": again.server["body"], "heads": again.clients["head"], "centroids": again.server["centroids"]})))
    weights = gathered(metrics["combination_weights"])[0]
    if jax.process_index() == 0:
        np.savez(out, *leaves, combination_weights=weights)
        with open(out + ".json", "w") as f:
            json.dump({"devices": jax.device_count(), "processes": jax.process_count(), "strategy": execution.resolve(),
                       "resume_max_abs_diff": resume_diff, "round": int(host(final.round)),
                       "heads_sharded_at_save": heads_sharded_at_save}, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt", required=True)
    args = p.parse_args()
    run(args.num_processes, args.out, args.ckpt, args.process_id, args.port)


if __name__ == "__main__":
    main()
