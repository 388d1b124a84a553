"""``map_reduce_clients``: the stacked part equals ``map_clients``, the summed part equals the sum over
real clients (padding slots never count), under every strategy; and under ``map``/``chunked`` a
FedAvg/FedPAC round's working memory does not grow with the number of clients."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pflax.core.execution import Execution, map_clients, map_reduce_clients


def _client_fn(client, shared):
    # Integer-valued float32 throughout, so every summation order gives the exact same sum.
    kept = {"double": 2.0 * client["a"], "label": client["i"] + shared["offset"]}
    summed = {"a": client["a"] * client["w"], "count": jnp.ones((), jnp.int32), "w": client["w"]}
    return kept, summed


def reduce_matches_reference(num_clients: int, execution: Execution) -> bool:
    rng = np.random.default_rng(num_clients)
    per_client = {
        "a": jnp.asarray(rng.integers(-50, 50, size=(num_clients, 3, 2)).astype(np.float32)),
        "w": jnp.asarray(rng.integers(0, 4, size=num_clients).astype(np.float32)),
        "i": jnp.arange(num_clients, dtype=jnp.int32),
    }
    shared = {"offset": jnp.asarray(100, jnp.int32)}
    kept, summed = jax.jit(lambda c, s: map_reduce_clients(_client_fn, c, s, execution))(per_client, shared)
    ref_kept = map_clients(lambda c, s: _client_fn(c, s)[0], per_client, shared, Execution("map"))
    a, w = np.asarray(per_client["a"]), np.asarray(per_client["w"])
    ok = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(kept), jax.tree.leaves(ref_kept)))
    ok &= np.array_equal(np.asarray(summed["a"]), (a * w[:, None, None]).sum(0))
    ok &= int(summed["count"]) == num_clients  # a padding slot would add 1 here
    ok &= float(summed["w"]) == w.sum()
    return bool(ok)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_clients=st.integers(0, 9),
    strategy=st.sampled_from(["map", "vmap", "chunked", "sharded"]),
    chunk_size=st.integers(1, 4),
    inner=st.sampled_from(["map", "vmap", "chunked"]),
)
def test_map_reduce_equals_stack_then_sum(num_clients, strategy, chunk_size, inner):
    assert reduce_matches_reference(num_clients, Execution(strategy, chunk_size=chunk_size, inner=inner))


def _round_temp_bytes(algorithm: str, strategy: str, num_clients: int) -> tuple[int, int]:
    """XLA's temporary-buffer size of one compiled round, and the bytes of one global model/body."""
    from pflax.algorithms import base, fedavg, fedem, fednova, fedpac, fedper, ifca, perfedavg, pfedhn
    from pflax.data import ClientData
    from pflax.models import mlp

    model = mlp(10, hidden=(256, 256))
    x = jnp.zeros((num_clients, 8, 64))
    batch = ClientData(x, jnp.zeros((num_clients, 8), jnp.int32), jnp.ones((num_clients, 8), bool),
                       jnp.arange(num_clients, dtype=jnp.int32))
    execution = Execution(strategy, chunk_size=4)
    if algorithm == "fedavg":
        algo, cfg = fedavg, fedavg.Config(execution=execution, batch_size=4, local_epochs=1)
    elif algorithm == "fedpac":  # no classifier collaboration: its QP tensor is [m, m, m] by definition
        algo = fedpac
        cfg = fedpac.Config(execution=execution, batch_size=4, body_epochs=1, classifier_collaboration=False)
    else:  # baselines on the shared helpers: split_round (FedPer), run_clients_and_average (Per-FedAvg,
        # FedNova with its own weights) and the grouped means (IFCA: clusters, FedEM: components)
        algo = {"fedper": fedper, "perfedavg": perfedavg, "fednova": fednova, "ifca": ifca, "fedem": fedem,
                "pfedhn": pfedhn}[algorithm]
        cfg = algo.Config(execution=execution, batch_size=4, local_epochs=1)
    state = algo.init(jax.random.PRNGKey(0), model, x[0], num_clients, cfg)
    # IFCA's and FedEM's shared state is k models; one of them is the unit of growth.
    global_model = {"fedavg": lambda: state.server, "fedpac": lambda: state.server["body"],
                    "ifca": lambda: base.pick(state.server, 0), "fedem": lambda: base.pick(state.server, 0),
                    "pfedhn": lambda: model.init(jax.random.PRNGKey(0), x[0]),  # the generated model
                    }.get(algorithm, lambda: state.server)()
    model_bytes = sum(a.nbytes for a in jax.tree.leaves(global_model))
    # Buffer sizes are fixed by XLA's buffer assignment, before LLVM code generation; skipping LLVM's
    # optimisations halves the compile time and leaves them unchanged (checked: identical temp sizes).
    compiled = algo.round.lower(state, batch).compile(compiler_options={"xla_backend_optimization_level": 0})
    analysis = compiled.memory_analysis()
    return analysis.temp_size_in_bytes, model_bytes


@pytest.mark.parametrize(("algorithm", "strategy"), [
    # chunked once (FedAvg): its reduction is the same code for every algorithm, and exact (hypothesis above)
    ("fedavg", "map"), ("fedavg", "chunked"), ("fedpac", "map"), ("fedper", "map"), ("perfedavg", "map"),
    ("fednova", "map"), ("ifca", "map"), ("fedem", "map"), ("pfedhn", "map"),
])
def test_round_memory_does_not_grow_with_clients(algorithm, strategy):
    """Stacking every participant's model before the mean costs at least one model per extra client.
    The streamed weighted sum leaves only what is per-client by definition (metrics; FedPAC's heads,
    centroids and statistics: ~0.1 model each here), so the growth per client stays far below a model."""
    small, model_bytes = _round_temp_bytes(algorithm, strategy, 4)
    large, _ = _round_temp_bytes(algorithm, strategy, 64)
    per_client_growth = (large - small) / (64 - 4)
    # pFedHN has nothing model-sized per client (its per-client output is an embedding gradient), and
    # XLA already avoided materialising part of the stacked generated models (measured with the
    # stacking code: 0.26 model per client), so it gets a bound that the stacking code fails.
    bound = 0.05 if algorithm == "pfedhn" else 0.5
    assert per_client_growth < bound * model_bytes, (small, large, model_bytes)
