"""Every execution strategy computes the same rounds as the reference ("map"), on 1 and on 8 devices.

The 8-device part needs ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before jax is imported,
so it runs this file as a script in a subprocess and reads back the differences it prints.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

NUM_CLIENTS = 6  # not a multiple of the chunk size (4) nor of the device count (8): padding is exercised
TOL = 1e-5  # float32 round-off after two rounds of local SGD; a real difference is orders larger


def _problem():
    import jax

    from pflax.data import from_partition, synthetic

    data = synthetic(num_classes=4, train_per_class=NUM_CLIENTS * 10, test_per_class=10, image_size=8, seed=3)
    rng = np.random.default_rng(3)
    # Label-skewed clients of unequal size, so QP weights, centroid fallbacks and masks all matter.
    parts = []
    for i in range(NUM_CLIENTS):
        pool = np.flatnonzero(np.isin(data.y_train, [i % 4, (i + 1) % 4]))
        parts.append(rng.choice(pool, size=12 + 3 * i, replace=False))
    return from_partition(data.x_train, data.y_train, parts), jax.random.PRNGKey(0)


_TRACES = {"counting": False, "count": 0, "listening": False}


def _count_traces(event: str, _seconds: float, **_kwargs) -> None:
    # Fires on every jit cache miss, whether or not the persistent compilation cache then has the program.
    if _TRACES["counting"] and event == "/jax/core/compile/jaxpr_trace_duration":
        _TRACES["count"] += 1


def _run(algorithm: str, execution, rounds: int = 2):
    """Leaves of the state after ``rounds`` rounds plus the per-client metrics of the last one, and how
    many functions were traced (i.e. compiled again) in the rounds after the first."""
    import jax

    from pflax.algorithms import fedavg, fedpac
    from pflax.models import mlp

    batch, key = _problem()
    model = mlp(4, hidden=(16, 8))
    if algorithm == "fedpac":
        algo, cfg = fedpac, fedpac.Config(execution=execution, batch_size=8, body_epochs=2)
    else:
        algo, cfg = fedavg, fedavg.Config(execution=execution, batch_size=8, local_epochs=2, lr=0.05)
    state = algo.init(key, model, batch.x[0], NUM_CLIENTS, cfg)
    state, metrics = algo.round(state, batch)
    _TRACES.update(counting=True, count=0)
    try:
        for _ in range(rounds - 1):
            state, metrics = algo.round(state, batch)
    finally:
        _TRACES["counting"] = False
    drop = {"client_ids", "nonfinite", "v_floored"}
    leaves = [np.asarray(a) for a in jax.tree.leaves(state)] + [np.asarray(v) for k, v in sorted(metrics.items()) if k not in drop]
    return leaves, _TRACES["count"]


def _max_diff(a, b) -> float:
    assert len(a) == len(b)
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0)) for x, y in zip(a, b))


def strategy_differences(strategies) -> tuple[dict, dict]:
    """``{algorithm: {strategy label: max |difference| to "map"}}`` and ``{algorithm: {strategy label
    (incl. "map"): functions traced again after the first round}}``."""
    import jax

    from pflax.core.execution import Execution

    if not _TRACES["listening"]:  # once per process, or every trace would be counted twice
        jax.monitoring.register_event_duration_secs_listener(_count_traces)
        _TRACES["listening"] = True
    diffs, retraced = {}, {}
    for algorithm in ("fedpac", "fedavg"):
        reference, retraced_map = _run(algorithm, Execution("map"))
        diffs[algorithm], retraced[algorithm] = {}, {"map": retraced_map}
        for label, ex in strategies().items():
            leaves, retraced[algorithm][label] = _run(algorithm, ex)
            diffs[algorithm][label] = _max_diff(leaves, reference)
    return diffs, retraced


_COLLECTIVE = re.compile(r" (all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\(")


def collectives_inside_loops(hlo_text: str) -> int:
    """How many collectives of a compiled HLO module sit in a while loop (or a computation it calls):
    each of those runs once per iteration instead of once per round."""
    comps = {}
    for block in hlo_text.split("\n\n"):
        match = re.match(r"%?([\w.\-]+) ", block.strip())
        if match:
            comps[match.group(1)] = block
    inside: set = set()

    def visit(name):
        if name in inside or name not in comps:
            return
        inside.add(name)
        for callee in re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", comps[name]):
            visit(callee)
        for group in re.findall(r"branch_computations=\{([^}]*)\}", comps[name]):
            for callee in re.findall(r"%?([\w.\-]+)", group):
                visit(callee)

    for body in re.findall(r"body=%?([\w.\-]+)", hlo_text):
        visit(body)
    return sum(len(_COLLECTIVE.findall(comps[c])) for c in inside)


def sharded_fedpac_round_hlo() -> str:
    """The compiled FedPAC round (sharded over all devices), as HLO text."""
    from pflax.algorithms import fedpac
    from pflax.core.execution import Execution
    from pflax.models import mlp

    batch, key = _problem()
    cfg = fedpac.Config(execution=Execution("sharded", inner="map"), batch_size=8, body_epochs=2)
    state = fedpac.init(key, mlp(4, hidden=(16, 8)), batch.x[0], NUM_CLIENTS, cfg)
    return fedpac.round.lower(state, batch).compile().as_text()


def _single_device_strategies():
    from pflax.core.execution import Execution

    return {
        "vmap": Execution("vmap"),
        "chunked4": Execution("chunked", chunk_size=4),
        "sharded(1 device)": Execution("sharded", inner="vmap"),
    }


def _multi_device_strategies():
    from pflax.core.execution import Execution

    # "auto" resolves to sharded/map here (checked by the test); vmap and chunked run the same
    # single-device code as in the one-device test, which covers them.
    return {
        "sharded/map": Execution("sharded", inner="map"),
        "sharded/vmap": Execution("sharded", inner="vmap"),
    }


def test_strategies_agree_on_one_device():
    diffs, retraced = strategy_differences(_single_device_strategies)
    for algorithm, per_strategy in diffs.items():
        for label, d in per_strategy.items():
            assert d < TOL, f"{algorithm} with {label}: max difference {d:.3g} to 'map'"
    # The initial state is placed where rounds leave it, so the first round's compilation serves all.
    assert all(n == 0 for per in retraced.values() for n in per.values()), retraced


def test_strategies_agree_on_eight_forced_host_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["device_count"] == 8
    assert report["auto_resolves_to"] == "sharded"
    for algorithm, per_strategy in report["diffs"].items():
        for label, d in per_strategy.items():
            assert d < TOL, f"{algorithm} with {label} on 8 devices: max difference {d:.3g} to 'map'"
    assert all(n == 0 for per in report["retraced"].values() for n in per.values()), report["retraced"]
    # map_reduce_clients across 8 devices: padding slots (n = 1, 6, 11) never reach the psum.
    assert report["reduce_exact"] and all(report["reduce_exact"].values()), report["reduce_exact"]
    # The QP runs whole on every device: no collective inside its solver loops (there were 19).
    assert report["fedpac_collectives_inside_loops"] == 0


def test_execution_rejects_bad_settings():
    from pflax.core.execution import Execution

    with pytest.raises(ValueError):
        Execution("pmap")
    with pytest.raises(ValueError):
        Execution("sharded", inner="sharded")
    with pytest.raises(ValueError):
        Execution("chunked", chunk_size=0)


if __name__ == "__main__":
    import jax
    from test_map_reduce import reduce_matches_reference

    from pflax.core.execution import Execution

    diffs, retraced = strategy_differences(_multi_device_strategies)
    print(json.dumps({
        "device_count": jax.device_count(),
        "auto_resolves_to": Execution("auto").resolve(),
        "diffs": diffs,
        "retraced": retraced,
        "reduce_exact": {
            f"{n} clients, inner {inner}": reduce_matches_reference(n, Execution("sharded", chunk_size=4, inner=inner))
            for n in (1, 6, 11) for inner in ("map", "vmap", "chunked")
        },
        "fedpac_collectives_inside_loops": collectives_inside_loops(sharded_fedpac_round_hlo()),
    }))
