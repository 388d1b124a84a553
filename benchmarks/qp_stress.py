"""Stress test of FedPAC's float64 simplex QP solver (``pflax.core.qp.solve_simplex_qp``).

Solves 10^5 random and degenerate instances ``min a^T P a, sum(a) = 1, a >= 0`` in vmapped
batches and records the worst KKT residual (``qp.kkt_residual``, relative to ``max|P|``), the number
of failures (non-finite weights or residual > 1e-6) and the time, in
``benchmarks/results/qp_stress.json``.

Instances are FedPAC-shaped (``P = diag(v) + Gram(H_i - H_j)`` for one target ``i``) or generic PSD
matrices, in nine families: random, rank-deficient H, zero variances, identical clients, ties with
zero variance (non-unique minimisers), wildly mixed scales, tiny/huge overall scale, low-rank
``A A^T`` with zero diagonal entries, and near-zero variances (one-sample clients). Sizes go from
m = 1 to m = 1000; most instances have m <= 30 (FedPAC's setting), a smaller share is large.

    python benchmarks/qp_stress.py            # full run (10^5 instances; ~15 min on 2 busy cores)
    python benchmarks/qp_stress.py --quick    # 2,000 instances, for a smoke test
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from pflax.core import qp

FAIL_RESIDUAL = 1e-6
FAMILIES = (
    "random", "rank_deficient", "zero_variance", "identical_clients", "ties_zero_variance",
    "mixed_scales", "extreme_scale", "low_rank_psd", "near_zero_variance",
)
# (m, number of instances, batch size): most mass at FedPAC's sizes, a tail up to m = 1000.
PLAN = (
    (1, 400, 400), (2, 12820, 2000), (3, 12800, 2000), (5, 12800, 2000), (8, 12800, 1600),
    (13, 12800, 1600), (20, 12800, 800), (30, 12800, 800), (50, 7000, 500), (100, 2836, 236),
    (200, 120, 20), (500, 16, 4), (1000, 8, 2),
)
# The active-set method adds one index per iteration and each iteration is an m x m solve, so an
# instance costs O(support * m^3): the large sizes get a small share to keep the run ~15 minutes.


def fedpac_matrix(v: np.ndarray, h: np.ndarray, target: int) -> np.ndarray:
    """``P_i = diag(v) + Gram(H_i - H_j)`` for one target ``i`` (float64)."""
    u = (h[target][None] - h).reshape(h.shape[0], -1)
    return np.diag(v) + u @ u.T


def make_instance(rng: np.random.Generator, m: int, family: str) -> np.ndarray:
    k, d = int(rng.integers(1, 6)), int(rng.integers(1, 9))
    target = int(rng.integers(m))
    if family == "random":
        v = rng.uniform(0, 1, m) * 10 ** rng.uniform(-3, 1)
        h = rng.standard_normal((m, k, d))
    elif family == "rank_deficient":
        r = int(rng.integers(1, max(m // 2, 1) + 1))
        basis = rng.standard_normal((r, k * d))
        h = (rng.standard_normal((m, r)) @ basis).reshape(m, k, d)
        v = rng.uniform(0, 1, m) * (rng.uniform() < 0.5)
    elif family == "zero_variance":
        v = np.zeros(m)
        h = rng.standard_normal((m, k, d))
    elif family == "identical_clients":
        groups = int(rng.integers(1, m + 1))
        proto_h, proto_v = rng.standard_normal((groups, k, d)), rng.uniform(0, 1, groups)
        member = rng.integers(groups, size=m)
        h, v = proto_h[member], proto_v[member]
    elif family == "ties_zero_variance":
        h = np.repeat(rng.standard_normal((1, k, d)), m, axis=0)
        h[rng.uniform(size=m) < 0.3] += rng.standard_normal((k, d))
        v = np.where(rng.uniform(size=m) < 0.7, 0.0, rng.uniform(0, 1, m))
    elif family == "mixed_scales":
        v = 10 ** rng.uniform(-8, 2, m)
        h = rng.standard_normal((m, k, d)) * 10 ** rng.uniform(-4, 3, (m, 1, 1))
    elif family == "extreme_scale":
        p = fedpac_matrix(rng.uniform(0, 1, m), rng.standard_normal((m, k, d)), target)
        return p * 10 ** rng.choice([-10.0, -6.0, 6.0, 8.0])
    elif family == "low_rank_psd":
        a = rng.standard_normal((m, int(rng.integers(1, m + 1))))
        p = a @ a.T
        zero = rng.uniform(size=m) < 0.2
        p[zero, :] = 0.0
        p[:, zero] = 0.0
        return p
    elif family == "near_zero_variance":
        v = np.where(rng.uniform(size=m) < 0.3, 1e-12, rng.uniform(0.01, 1, m))
        h = rng.standard_normal((m, k, d)) * 0.1
    else:
        raise ValueError(family)
    return fedpac_matrix(v, h, target)


def _solve_and_check(p):
    alpha = qp.solve_simplex_qp(p)
    return alpha, qp.kkt_residual(p, alpha), jnp.all(jnp.isfinite(alpha))


def run(plan, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    per_size, per_family = [], {f: {"instances": 0, "worst_kkt_residual": 0.0, "failures": 0} for f in FAMILIES}
    worst, failures, total, solve_s = 0.0, 0, 0, 0.0
    t_all = time.time()
    with jax.enable_x64(True):  # local float64 scope, never global
        solve = jax.jit(jax.vmap(_solve_and_check))
        for m, count, batch in plan:
            t_size, size_worst, size_fail, done = time.time(), 0.0, 0, 0
            while done < count:
                b = min(batch, count - done)
                fams = [FAMILIES[(done + j) % len(FAMILIES)] for j in range(b)]
                ps = np.stack([make_instance(rng, m, f) for f in fams])
                if b < batch:  # keep one compiled shape per size: pad with copies, ignore them
                    ps = np.concatenate([ps, np.repeat(ps[:1], batch - b, axis=0)])
                t0 = time.time()
                _, res, finite = jax.device_get(solve(jnp.asarray(ps, jnp.float64)))
                solve_s += time.time() - t0
                res, finite = res[:b], finite[:b]
                bad = (~finite) | ~(res <= FAIL_RESIDUAL)
                for f, r, is_bad in zip(fams, res, bad):
                    stats = per_family[f]
                    stats["instances"] += 1
                    stats["worst_kkt_residual"] = max(stats["worst_kkt_residual"], float(r) if np.isfinite(r) else float("inf"))
                    stats["failures"] += int(is_bad)
                size_worst = max(size_worst, float(np.max(np.where(np.isfinite(res), res, np.inf))))
                size_fail += int(bad.sum())
                done += b
            per_size.append({"m": m, "instances": count, "worst_kkt_residual": size_worst, "failures": size_fail,
                             "seconds_incl_compile": time.time() - t_size})
            worst, failures, total = max(worst, size_worst), failures + size_fail, total + count
            print(f"m={m:5d}: {count:6d} instances, worst KKT residual {size_worst:.2e}, failures {size_fail}, "
                  f"{time.time() - t_size:.1f} s", flush=True)
    return {
        "instances": total,
        "worst_kkt_residual": worst,
        "failures": failures,
        "failure_definition": f"non-finite weights or KKT residual > {FAIL_RESIDUAL:g} (relative to max|P|)",
        "seconds_total": time.time() - t_all,
        "seconds_solving_excl_instance_generation": solve_s,
        "per_size": per_size,
        "per_family": per_family,
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 instances (smoke test); not written to results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "qp_stress.json"))
    args = parser.parse_args()
    plan = ((1, 20, 20), (5, 800, 400), (20, 800, 400), (100, 300, 100), (300, 20, 10), (1000, 4, 2)) if args.quick else PLAN
    result = run(plan, args.seed)
    print(json.dumps({k: result[k] for k in ("instances", "worst_kkt_residual", "failures", "seconds_total")}))
    if not args.quick:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
