"""Stress test of FedPAC's float64 simplex QP solvers (``pflax.core.qp``).

Solves 10^5 random and degenerate instances ``min a^T P a, sum(a) = 1, a >= 0`` and records the worst
KKT residual (``qp.kkt_residual``, relative to ``max|P|``), the number of failures (non-finite weights or
residual > 1e-6) and the time, in ``benchmarks/results/qp_stress.json``, for both solvers:

* ``dense``: ``solve_simplex_qp`` on the explicit ``[m, m]`` matrix, vmapped over a batch; the solver
  FedPAC's combination uses up to 64 participants. Run for m <= ``DENSE_UP_TO`` (200): each of its
  active-set iterations is an m x m solve, so m = 500 and 1000 would take hours.
* ``gram``: ``solve_gram_simplex_qps`` on the instance's shared-Gram form (``diag(v)``, the Gram matrix of
  the centred H, and the target's row of it), one instance after another; the solver FedPAC's
  combination uses above 64 participants. Run for every size. The residual is always that of the
  explicit ``P``.

Instances are FedPAC-shaped (``P = diag(v) + Gram(H_i - H_j)`` for one target ``i``) or generic PSD
matrices, in nine families: random, rank-deficient H, zero variances, identical clients, ties with
zero variance (non-unique minimisers), wildly mixed scales, tiny/huge overall scale, low-rank
``A A^T`` with zero diagonal entries, and near-zero variances (one-sample clients). Sizes go from
m = 1 to m = 1000; most instances have m <= 30 (FedPAC's setting), a smaller share is large.

    python benchmarks/qp_stress.py            # full run (10^5 instances, both solvers)
    python benchmarks/qp_stress.py --quick    # ~2,000 instances, for a smoke test
    python benchmarks/qp_stress.py --plan "500:8:2,1000:4:2"   # chosen sizes (m:instances:batch), not written
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
# The dense active-set method adds one index per iteration and each iteration is an m x m solve, so an
# instance costs O(support * m^3): it runs up to DENSE_UP_TO only; the Gram solver runs every size.
DENSE_UP_TO = 200
QUICK_PLAN = ((1, 20, 20), (5, 800, 400), (20, 800, 400), (100, 300, 100), (300, 20, 10), (1000, 4, 2))


def fedpac_matrix(v: np.ndarray, h: np.ndarray, target: int) -> np.ndarray:
    """``P_i = diag(v) + Gram(H_i - H_j)`` for one target ``i`` (float64)."""
    u = (h[target][None] - h).reshape(h.shape[0], -1)
    return np.diag(v) + u @ u.T


def _draw(rng: np.random.Generator, m: int, family: str):
    """One instance, as FedPAC statistics ``("fedpac", v, h, target, scale)`` or a matrix ``("psd", P)``.
    The random draws are those the stress run has always made (same seed, same instances)."""
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
        v, h = rng.uniform(0, 1, m), rng.standard_normal((m, k, d))
        return "fedpac", v, h, target, 10 ** rng.choice([-10.0, -6.0, 6.0, 8.0])
    elif family == "low_rank_psd":
        a = rng.standard_normal((m, int(rng.integers(1, m + 1))))
        p = a @ a.T
        zero = rng.uniform(size=m) < 0.2
        p[zero, :] = 0.0
        p[:, zero] = 0.0
        return "psd", p
    elif family == "near_zero_variance":
        v = np.where(rng.uniform(size=m) < 0.3, 1e-12, rng.uniform(0.01, 1, m))
        h = rng.standard_normal((m, k, d)) * 0.1
    else:
        raise ValueError(family)
    return "fedpac", v, h, target, 1.0


def make_instance(rng: np.random.Generator, m: int, family: str) -> np.ndarray:
    """The explicit ``[m, m]`` matrix of one instance."""
    return _explicit(_draw(rng, m, family))


def _explicit(drawn) -> np.ndarray:
    if drawn[0] == "psd":
        return drawn[1]
    _, v, h, target, scale = drawn
    return fedpac_matrix(v, h, target) * scale


def _gram_form(drawn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(v, G, r, c)`` with ``P = diag(v) + G - 1 r^T - r 1^T + c 1 1^T`` (``qp.gram_qp_matvec``): for FedPAC
    statistics the Gram matrix of the centred H (as FedPAC's combination builds it), else ``G = P``."""
    if drawn[0] == "psd":
        p = drawn[1]
        return np.zeros(p.shape[0]), p, np.zeros(p.shape[0]), 0.0
    _, v, h, target, scale = drawn
    flat = h.reshape(h.shape[0], -1)
    flat = flat - flat.mean(axis=0)
    g = flat @ flat.T
    return v * scale, g * scale, g[target] * scale, float(g[target, target] * scale)


def _solve_and_check(p):
    alpha = qp.solve_simplex_qp(p)
    return alpha, qp.kkt_residual(p, alpha), jnp.all(jnp.isfinite(alpha))


def _gram_solve_and_check(p, v, g, r, c):
    alpha = qp.solve_gram_simplex_qps(v, g, r[None], c[None])[0]
    return alpha, qp.kkt_residual(p, alpha), jnp.all(jnp.isfinite(alpha))


def _empty_stats() -> dict:
    return {"instances": 0, "worst_kkt_residual": 0.0, "failures": 0, "seconds_solving": 0.0}


def run(plan, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    per_size, per_family = [], {f: {"solves": 0, "worst_kkt_residual": 0.0, "failures": 0} for f in FAMILIES}
    solvers = {"dense": _empty_stats(), "gram": _empty_stats()}
    total = 0
    t_all = time.time()
    with jax.enable_x64(True):  # local float64 scope, never global
        dense = jax.jit(jax.vmap(_solve_and_check))
        # One instance after another: vmapped, the per-instance branches of the Gram solver would all run.
        gram = jax.jit(lambda *args: jax.lax.map(lambda one: _gram_solve_and_check(*one), args))
        for m, count, batch in plan:
            t_size, done = time.time(), 0
            size = {name: _empty_stats() for name in (("dense", "gram") if m <= DENSE_UP_TO else ("gram",))}
            while done < count:
                b = min(batch, count - done)
                fams = [FAMILIES[(done + j) % len(FAMILIES)] for j in range(b)]
                drawn = [_draw(rng, m, f) for f in fams]
                drawn += [drawn[0]] * (batch - b)  # keep one compiled shape per size: pad with copies, ignore them
                ps = jnp.asarray(np.stack([_explicit(x) for x in drawn]), jnp.float64)
                forms = [_gram_form(x) for x in drawn]
                structured = [jnp.asarray(np.stack([f[i] for f in forms]), jnp.float64) for i in range(4)]
                for name, stats in size.items():
                    t0 = time.time()
                    out = dense(ps) if name == "dense" else gram(ps, *structured)
                    _, res, finite = jax.device_get(out)
                    stats["seconds_solving"] += time.time() - t0
                    res, finite = res[:b], finite[:b]
                    bad = (~finite) | ~(res <= FAIL_RESIDUAL)
                    for f, r, is_bad in zip(fams, res, bad):
                        fam = per_family[f]
                        fam["solves"] += 1
                        fam["worst_kkt_residual"] = max(fam["worst_kkt_residual"], float(r) if np.isfinite(r) else float("inf"))
                        fam["failures"] += int(is_bad)
                    stats["instances"] += b
                    stats["worst_kkt_residual"] = max(stats["worst_kkt_residual"],
                                                      float(np.max(np.where(np.isfinite(res), res, np.inf))))
                    stats["failures"] += int(bad.sum())
                done += b
            for name, stats in size.items():
                for key in ("instances", "failures", "seconds_solving"):
                    solvers[name][key] += stats[key]
                solvers[name]["worst_kkt_residual"] = max(solvers[name]["worst_kkt_residual"], stats["worst_kkt_residual"])
            per_size.append({"m": m, "instances": count, "seconds_incl_compile": time.time() - t_size,
                             "worst_kkt_residual": max(s["worst_kkt_residual"] for s in size.values()),
                             "failures": sum(s["failures"] for s in size.values()), "solvers": size})
            total += count
            print(f"m={m:5d}: {count:6d} instances, " + ", ".join(
                f"{name}: worst KKT residual {s['worst_kkt_residual']:.2e}, failures {s['failures']}, {s['seconds_solving']:.1f} s"
                for name, s in size.items()) + f" ({time.time() - t_size:.1f} s with compilation)", flush=True)
    return {
        "instances": total,
        "solves": sum(s["instances"] for s in solvers.values()),
        "worst_kkt_residual": max(s["worst_kkt_residual"] for s in solvers.values()),
        "failures": sum(s["failures"] for s in solvers.values()),
        "failure_definition": f"non-finite weights or KKT residual > {FAIL_RESIDUAL:g} (relative to max|P|)",
        "solvers": solvers,
        "dense_up_to": DENSE_UP_TO,
        "seconds_total": time.time() - t_all,
        "per_size": per_size,
        "per_family": per_family,
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
    }


def _parse_plan(text: str):
    plan = []
    for item in text.split(","):
        m, count, batch = (int(x) for x in item.split(":"))
        plan.append((m, count, min(batch, count)))
    return tuple(plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~2,000 instances (smoke test); not written to results")
    parser.add_argument("--plan", help="sizes to run, as m:instances:batch,...; not written to results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "qp_stress.json"))
    args = parser.parse_args()
    plan = _parse_plan(args.plan) if args.plan else QUICK_PLAN if args.quick else PLAN
    result = run(plan, args.seed)
    print(json.dumps({k: result[k] for k in ("instances", "solves", "worst_kkt_residual", "failures", "seconds_total")}))
    if not (args.quick or args.plan):
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
