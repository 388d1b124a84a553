"""Speed-up of a 1000-client FedAvg round (MLP) from 1 to 2 forced host devices.

    python benchmarks/speed/multidevice.py [--clients 1000] [--samples 20] [--reps 3]

Each configuration runs in its own process, because ``--xla_force_host_platform_device_count`` must be
set before jax is imported. With 2 devices, ``Execution("sharded")`` splits the client axis over a
2-device mesh with ``shard_map`` and each device runs its half with the inner strategy. The same code
runs on several GPUs or several hosts (after ``jax.distributed.initialize()``), since the mesh is
simply built from ``jax.devices()``.

Writes ``benchmarks/results/speed/multidevice.json``. The machine may be shared with other jobs: the
configurations run back to back, in alternating order over ``--reps`` passes, and the medians are reported.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "speed"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import git_commit  # noqa: E402


def child(args) -> None:
    import jax
    import jax.numpy as jnp

    from pflax.algorithms import fedavg
    from pflax.experiment import loop
    from pflax.core.execution import Execution
    from pflax.data import ClientData
    from pflax.models import mlp

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((args.clients, args.samples, 28, 28, 1)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 10, (args.clients, args.samples)).astype(np.int32))
    batch = ClientData(x, y, jnp.ones(y.shape, bool), jnp.arange(args.clients, dtype=jnp.int32))
    execution = Execution(args.strategy, inner=args.inner)
    cfg = fedavg.Config(batch_size=10, local_epochs=5, execution=execution)
    state = fedavg.init(jax.random.PRNGKey(0), mlp(10), x[0], args.clients, cfg)
    # The experiment loop, every client every round on the same batch; evaluated only after the last
    # round, which ``seconds`` leaves out. The first round includes compilation.
    state, record = loop(fedavg, state, batch, batch, args.rounds + 1, eval_every=0)
    first, times = record.round_times[0], record.round_times[1:]
    print("RESULT " + json.dumps({
        "devices": jax.device_count(), "strategy": execution.resolve(),
        "inner": execution.resolve_inner() if execution.resolve() == "sharded" else None,
        "round_s": times, "first_round_s": first,
        "checksum": float(sum(float(jnp.sum(leaf)) for leaf in jax.tree.leaves(state.server))),
    }), flush=True)


def run_config(devices: int, strategy: str, inner: str, args) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    cmd = [sys.executable, __file__, "--child", "--strategy", strategy, "--inner", inner,
           "--clients", str(args.clients), "--samples", str(args.samples), "--rounds", str(args.rounds)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--inner", default="auto")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per process (after the compiling one)")
    p.add_argument("--reps", type=int, default=2, help="passes over all configurations")
    args = p.parse_args()
    if args.child:
        return child(args)

    configs = {  # label: (devices, strategy, inner)
        "1 device, map": (1, "map", "auto"),
        "1 device, vmap": (1, "vmap", "auto"),
        "2 devices, sharded/map": (2, "sharded", "map"),
        "2 devices, sharded/vmap": (2, "sharded", "vmap"),
    }
    times = {label: [] for label in configs}
    first = {label: [] for label in configs}
    checks = {}
    for rep in range(args.reps):
        order = list(configs) if rep % 2 == 0 else list(reversed(configs))
        for label in order:
            r = run_config(*configs[label], args)
            times[label] += r["round_s"]
            first[label].append(r["first_round_s"])
            checks[label] = r["checksum"]
            print(label, [round(t, 3) for t in r["round_s"]], flush=True)
    med = {label: float(np.median(ts)) for label, ts in times.items()}
    best1 = min(med["1 device, map"], med["1 device, vmap"])
    best2 = min(med["2 devices, sharded/map"], med["2 devices, sharded/vmap"])
    report = {
        "what": f"FedAvg round, MLP 784-200-200-10, {args.clients} clients x {args.samples} samples, "
                "batch 10, 5 local epochs, random data",
        "round_s_median": med, "round_s_all": times, "first_round_s": first, "param_checksums": checks,
        "speedup_same_inner_map": med["1 device, map"] / med["2 devices, sharded/map"],
        "speedup_same_inner_vmap": med["1 device, vmap"] / med["2 devices, sharded/vmap"],
        "speedup_best_vs_best": best1 / best2,
        "cpu_count": os.cpu_count(), "load_avg_1min": os.getloadavg()[0],
        "rounds_per_process": args.rounds, "reps": args.reps, "pflax_commit": git_commit(),
        "note": "medians over timed rounds after one compiling round per process (first_round_s); "
                "load_avg_1min says whether other jobs shared the CPU",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "multidevice.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("round_s_median", "speedup_same_inner_map", "speedup_same_inner_vmap",
                                             "speedup_best_vs_best")}, indent=1))


if __name__ == "__main__":
    main()
