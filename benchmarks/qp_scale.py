"""Time FedPAC's combination weights for many participants on the CPU (all targets, exact float64).

For m = 100, 300 and 1000 participants, ``combination_weights(v, h)`` solves one simplex QP per
participant. Above 64 participants it uses the Gram solver (``pflax.core.qp.solve_gram_simplex_qps``),
which never builds the ``[m, m, m]`` stack of matrices. This script times it on FedPAC-shaped
statistics: the median of a few calls, with the first call's compilation reported apart. It checks
every target's solution against the KKT conditions of its explicit ``P_i``, the problem the dense
solver solves, and writes ``benchmarks/results/qp_scale.json``.

The statistics follow FedPAC's formulas (Xu, Tong, Huang, ICLR 2023, Sec. 4.1 and App. A, with the
feature covariance taken as the identity): K = 10 classes, d = 128 features, and clients in five
groups that share a label distribution (two dominant classes each, as in FedPAC's partitions). Client
j draws n_j samples; its class frequencies p_j(y), its class means mu_{j,y} (the class mean plus
sampling noise), ``H_j[y] = p_j(y) mu_{j,y}`` and ``v_j = V_j / n_j`` with
``V_j = sum_y p_j(y) E||f||^2 - p_j(y)^2 ||mu_{j,y}||^2``.

    nice -n 10 python benchmarks/qp_scale.py                  # m = 100, 300, 1000 (and the dense solver at 100)
    nice -n 10 python benchmarks/qp_scale.py --sizes 100 --repeats 3 --out /tmp/x.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from pflax.algorithms.fedpac import combination
from pflax.core import qp

CLASSES, FEATURES, GROUPS = 10, 128, 5


def fedpac_statistics(m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(v [m], h [m, K, d])`` float32, shaped like FedPAC's uploads (see the module docstring)."""
    rng = np.random.default_rng(seed)
    class_means = rng.standard_normal((CLASSES, FEATURES))
    noise = 1.0  # per-feature standard deviation within a class
    prior = np.full((GROUPS, CLASSES), 0.2 / (CLASSES - 2))
    for g in range(GROUPS):
        prior[g, [(2 * g) % CLASSES, (2 * g + 1) % CLASSES]] = 0.4
    n = rng.integers(200, 601, m)
    counts = np.stack([rng.multinomial(n[j], prior[j % GROUPS]) for j in range(m)])  # [m, K]
    p = counts / n[:, None]
    sampling = noise / np.sqrt(np.maximum(counts, 1))[..., None]  # the standard error of a class mean
    means = class_means[None] + rng.standard_normal((m, CLASSES, FEATURES)) * sampling
    present = counts > 0
    h = np.where(present[..., None], p[..., None] * means, 0.0)
    mean_sq = np.sum(means**2, axis=-1)  # ||mu_{j,y}||^2
    second_moment = mean_sq + FEATURES * noise**2  # E||f||^2 given the class
    variance = np.sum(np.where(present, p * second_moment - p**2 * mean_sq, 0.0), axis=1)
    return (variance / n).astype(np.float32), h.astype(np.float32)


def _kkt_residuals(v: np.ndarray, h: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """KKT residual of every target's solution for its ``P_i`` as the dense path builds it
    (``combination_matrices``: ``P_i[j, k] = v_j [j = k] + B_ii - B_ij - B_ik + B_jk``, ``B = H H^T``), one
    target at a time."""
    with jax.enable_x64(True):
        flat = jnp.asarray(h.reshape(h.shape[0], -1), jnp.float64)
        gram = jnp.matmul(flat, flat.T, precision=jax.lax.Precision.HIGHEST)
        norms = jnp.sum(flat * flat, axis=1)
        diag_v = jnp.diag(jnp.asarray(v, jnp.float64))

        def one(args):
            i, a = args
            p = diag_v + norms[i] - gram[i][:, None] - gram[i][None, :] + gram
            return qp.kkt_residual(p, a)

        residuals = jax.jit(lambda a: jax.lax.map(one, (jnp.arange(a.shape[0]), a)))
        return np.asarray(residuals(jnp.asarray(alpha, jnp.float64)))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _time_calls(fn, repeats: int) -> tuple[float, list[float], np.ndarray]:
    t0 = time.perf_counter()
    out = np.asarray(jax.block_until_ready(fn()))
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t0)
    return first, runs, out


def time_size(m: int, repeats: int, seed: int, dense_up_to: int) -> dict:
    v_np, h_np = fedpac_statistics(m, seed)
    v, h = jnp.asarray(v_np), jnp.asarray(h_np)
    first, runs, weights = _time_calls(lambda: combination.combination_weights(v, h), repeats)
    with jax.enable_x64(True):  # the exact solutions, before the 1e-3 threshold, for the KKT check
        alpha, optimal, iterations = jax.block_until_ready(jax.jit(_alpha_and_info)(jnp.asarray(v_np, jnp.float64),
                                                                                   jnp.asarray(h_np, jnp.float64)))
    residuals = _kkt_residuals(v_np, h_np, np.asarray(alpha))
    support = np.sum(np.asarray(alpha) > 0, axis=1)
    median = float(np.median(runs))
    row = {
        "m": m, "solver": "gram" if m > combination.GRAM_SOLVER_ABOVE else "dense",
        "seconds_median": median, "seconds_runs": runs, "seconds_first_call_incl_compile": first,
        "seconds_compile_estimate": first - median,
        "worst_kkt_residual": float(residuals.max()), "all_optimal": bool(np.all(np.asarray(optimal))),
        "support_mean": float(support.mean()), "support_max": int(support.max()),
        "iterations_mean": float(np.mean(iterations)), "iterations_max": int(np.max(iterations)),
    }
    if m <= dense_up_to:  # the dense per-target solver on the same statistics, for comparison
        d_first, d_runs, dense = _time_calls(lambda: combination.combination_weights(v, h, solver="dense"), repeats)
        row["dense"] = {"seconds_median": float(np.median(d_runs)), "seconds_runs": d_runs,
                        "seconds_first_call_incl_compile": d_first,
                        "max_abs_weight_difference_to_gram": float(np.abs(dense - weights).max())}
        print(f"m={m:5d}: dense solver median {row['dense']['seconds_median']:.3f} s (first call {d_first:.1f} s), "
              f"largest weight difference to the Gram solver {row['dense']['max_abs_weight_difference_to_gram']:.1e}")
    print(f"m={m:5d}: median {median:.3f} s over {repeats} calls (first call {first:.1f} s with compilation), "
          f"worst KKT residual {row['worst_kkt_residual']:.1e}, support mean {row['support_mean']:.1f} "
          f"max {row['support_max']}, active-set iterations mean {row['iterations_mean']:.1f} max {row['iterations_max']}",
          flush=True)
    return row


def _alpha_and_info(v, h):
    m = v.shape[0]
    flat = h.reshape(m, -1)
    flat = flat - jnp.mean(flat, axis=0)
    gram = jnp.matmul(flat, flat.T, precision=jax.lax.Precision.HIGHEST)
    return qp._solve_gram_qps(v, gram, gram, jnp.sum(flat * flat, axis=1), jnp.ones((m,), bool))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dense-up-to", type=int, default=100, help="also time the dense solver up to this m")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "qp_scale.json"))
    args = parser.parse_args()
    rows = [time_size(m, args.repeats, args.seed, args.dense_up_to) for m in args.sizes]
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    result = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "what": "combination_weights(v, h) for all m targets, exact mode, float32 in and out, float64 inside",
        "statistics": f"FedPAC-shaped: K={CLASSES}, d={FEATURES}, {GROUPS} groups sharing label distributions",
        "sizes": rows,
        "device": str(jax.devices()[0]),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "load_average_at_end": load,
        "jax": jax.__version__,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
