"""Compare the execution strategies on the real models: which one should ``Execution("auto")`` pick on CPU?

    python benchmarks/execution_strategies.py [--clients 20] [--samples 600] [--reps 2]

Times one round of FedPAC (FMNIST CNN, 1 + 5 epochs) and of FedAvg (CIFAR CNN, 5 epochs) for
``map``, ``vmap``, ``chunked`` (4) and ``sharded`` over 2 forced host devices (inner ``map``). The
sharded case needs ``--xla_force_host_platform_device_count=2`` before jax is imported, so every
strategy runs in its own subprocess, in alternating order over ``--reps`` passes (the machine may be
shared; compare the medians). Writes ``benchmarks/results/execution_strategies.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = {  # label: (forced host devices, strategy, chunk size)
    "map": (1, "map", 4),
    "vmap": (1, "vmap", 4),
    "chunked4": (1, "chunked", 4),
    "sharded2/map": (2, "sharded", 4),
}
WORKLOADS = (("fedpac", "fmnist"), ("fedavg", "cifar"))


def child(args) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))
    from run import PflaxRunner, random_clients

    out = {}
    for algorithm, dataset in WORKLOADS:
        x, y = random_clients(dataset, args.clients, args.samples)
        runner = PflaxRunner(algorithm, dataset, x, y, args.strategy, args.chunk_size)
        t0 = time.perf_counter()
        runner.step()
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            runner.step()
            times.append(time.perf_counter() - t0)
        out[f"{algorithm}/{dataset}"] = {"round_s": times, "first_round_s": first}
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="map")
    p.add_argument("--chunk-size", type=int, default=4)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--samples", type=int, default=600)
    p.add_argument("--rounds", type=int, default=1, help="timed rounds per process, after the compiling one")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--only", default=",".join(STRATEGIES), help="comma list of strategy labels")
    args = p.parse_args()
    if args.child:
        return child(args)

    labels = args.only.split(",")
    times = {label: {} for label in labels}
    for rep in range(args.reps):
        for label in labels if rep % 2 == 0 else labels[::-1]:
            devices, strategy, chunk = STRATEGIES[label]
            env = dict(os.environ, JAX_PLATFORMS="cpu")
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
            cmd = [sys.executable, __file__, "--child", "--strategy", strategy, "--chunk-size", str(chunk),
                   "--clients", str(args.clients), "--samples", str(args.samples), "--rounds", str(args.rounds)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                raise RuntimeError(f"{label}: {proc.stderr[-3000:]}")
            for workload, r in json.loads(lines[-1][len("RESULT "):]).items():
                times[label].setdefault(workload, []).extend(r["round_s"])
            print(label, {w: [round(t, 2) for t in ts] for w, ts in times[label].items()}, flush=True)
    medians = {label: {w: float(np.median(ts)) for w, ts in per.items()} for label, per in times.items()}
    report = {
        "what": f"one round, {args.clients} clients x {args.samples} random samples; FedPAC 1+5 epochs, FedAvg 5 epochs, batch 50",
        "round_s_median": medians, "round_s_all": times,
        "fastest": {w: min(medians, key=lambda label: medians[label][w]) for w in medians[labels[0]]},
        "cpu_count": os.cpu_count(), "load_avg_1min": os.getloadavg()[0],
        "note": "2-core CPU shared with other jobs during the measurement; compare medians, not absolute times",
    }
    out = ROOT / "benchmarks" / "results" / "execution_strategies.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("round_s_median", "fastest")}, indent=1))


if __name__ == "__main__":
    main()
