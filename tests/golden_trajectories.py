"""Golden trajectories: three rounds of every registry algorithm on one small fixed federation.

The digests in ``tests/golden/trajectories.json`` were recorded before the algorithm-contract
redesign; ``tests/test_contract.py`` replays every algorithm and asks for the same bits as one of the
recordings. The bits depend on the CPU as well as on the code: NumPy's float32 ``sin``/``cos`` (the
synthetic images) and XLA:CPU's kernels take other paths with AVX-512, and each path rounds its own way.
XLA's code generation options (``XLA_FLAGS``, such as the test suite's fast-compile flags) change the
rounding too. So the file keeps one recording per kind of CPU (``machine()``) and set of ``XLA_FLAGS``
(``xla_flags()``), each made from the same code. Each array is
reduced to its shape, dtype and SHA-256 of its bytes (plus its float64 sum, only to say how far a
mismatch is). State leaves are compared as a multiset of digests, so moving a tree inside the state
(a new layout) is allowed while changing any value is not.

Record again (only for a deliberate, documented change, which replaces every recording):
``python tests/golden_trajectories.py --record``. Add this machine's recording under this process's
``XLA_FLAGS`` (only when the code is unchanged since a recording that replayed bit for bit, and the replay
differs only because the CPU or the flags differ): ``python tests/golden_trajectories.py --add-machine``.
On a CPU with no recording, make its recordings from the code of a commit whose replay matched the
recordings it had (the commit that last changed them, say), not from today's code, whose bits are what the
new recordings must check; then replay today's code against them::

    git worktree add /tmp/golden-code "$(git log -1 --format=%H -- tests/golden/trajectories.json)"
    cd /tmp/golden-code
    PYTHONPATH=. python tests/golden_trajectories.py --add-machine
    XLA_FLAGS="--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false" \
        PYTHONPATH=. python tests/golden_trajectories.py --add-machine
    cp tests/golden/trajectories.json "$OLDPWD/tests/golden/" && cd - && python -m pytest tests/test_contract.py
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

GOLDEN = Path(__file__).with_name("golden") / "trajectories.json"
ROUNDS = 3
NUM_CLIENTS = 5
FRACTION = 0.8  # 4 of 5 clients per round: non-participants' rows must stay untouched

# Small and fast: one local epoch of batch 20 (every per-algorithm epoch count at 1).
COMMON = dict(lr=0.05, batch_size=20, local_epochs=1)
OVERRIDES = {
    "fedpac": dict(body_lr=0.05, head_lr=0.05, batch_size=20, body_epochs=1, head_epochs=1),
    "fedrep": dict(lr=0.05, batch_size=20, local_epochs=1, head_epochs=1),  # body_epochs=1 before the redesign
    "fedavg_ft": dict(COMMON, finetune_epochs=1),
    "fedbabu": dict(COMMON, finetune_epochs=1),
    "ditto": dict(COMMON, personal_epochs=1),
    "cfl": dict(COMMON, start_round=1),
    "pfedhn": dict(COMMON, inner_steps=2),
    "pfedme": dict(COMMON, inner_steps=2),
    "fedbn": dict(COMMON, batch_size=16),
    "fedpick": dict(COMMON, batch_size=16),
}
BN_ALGORITHMS = ("fedbn", "fedpick")


def federation(bn: bool):
    """Ragged synthetic clients (train 60, 53, 46, 60, 53; test 20 each), FedPAC's 20 % shards."""
    from pflax.data import fedpac_shards, from_partition, synthetic

    size = 16 if bn else 8
    ds = synthetic(num_classes=10, train_per_class=40, test_per_class=15, image_size=size, seed=3, noise=0.3)
    x_tr, x_te = ds.x_train, ds.x_test
    if bn:  # the digits CNN takes 3 channels
        x_tr, x_te = (np.repeat(np.asarray(a)[..., :1], 3, axis=-1) for a in (x_tr, x_te))
    tr = fedpac_shards(ds.y_train, NUM_CLIENTS, 60, 0.2, 10)
    tr = [idx[: 60 - 7 * (i % 3)] for i, idx in enumerate(tr)]
    te = fedpac_shards(ds.y_test, NUM_CLIENTS, 20, 0.2, 10)
    return from_partition(x_tr, ds.y_train, tr), from_partition(x_te, ds.y_test, te)


def model_for(name: str):
    if name in BN_ALGORITHMS:
        from pflax.models.bn import digits_cnn

        return digits_cnn(num_classes=10, width=0.0625, image_size=16)
    from pflax.models import mlp

    return mlp(10, hidden=(16,))


def config_for(name: str, module):
    from pflax.core.execution import Execution

    return module.Config(**OVERRIDES.get(name, COMMON), execution=Execution(strategy="map"))


def digest(a) -> dict:
    a = np.asarray(a)
    return {"shape": list(a.shape), "dtype": str(a.dtype), "sha": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16],
            "sum": float(np.asarray(a, np.float64).sum()) if a.dtype != bool else int(a.sum())}


def leaves(tree) -> list[np.ndarray]:
    """``tree``'s leaves as NumPy arrays, typed PRNG keys as their key data."""
    return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree.leaves(tree)]


def state_digests(state) -> list[dict]:
    return sorted((digest(x) for x in leaves(state)), key=lambda d: (d["shape"], d["dtype"], d["sha"]))


def metric_digests(metrics: dict) -> dict:
    return {k: digest(v) for k, v in sorted(metrics.items())}


def trajectory(name: str, module, run_round, run_evaluate, sample) -> list[dict]:
    """``ROUNDS`` rounds: participants drawn by ``sample(state, FRACTION)``, ``run_round(state,
    batch, test)`` then ``run_evaluate(state, test_all, train_all)``; the digests of each round."""
    train, test = federation(name in BN_ALGORITHMS)
    model = model_for(name)
    state = module.init(jax.random.PRNGKey(7), model, train.x[0], NUM_CLIENTS, config_for(name, module))
    out = []
    for _ in range(ROUNDS):
        ids = np.asarray(sample(state, FRACTION))
        state, metrics = run_round(state, train.take(ids), test.take(ids))
        evaluation = run_evaluate(state, test, train)
        out.append({"state": state_digests(state), "metrics": metric_digests(metrics),
                    "evaluate": metric_digests(evaluation)})
    return out


def machine() -> dict:
    """What of this CPU changes the bits: the SIMD paths NumPy dispatches to, and the CPU's AVX-512 flags
    (which XLA:CPU's kernels use)."""
    from numpy._core._multiarray_umath import __cpu_features__

    flags = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = {f for f in line.split(":", 1)[1].split() if f.startswith("avx512")}
                break
    return {"numpy_simd": sorted(k for k, on in __cpu_features__.items() if on and k.startswith(("AVX512", "X86_V"))),
            "avx512": sorted(flags)}


def xla_flags() -> list[str]:
    """This process's ``XLA_FLAGS``, sorted: code generation options that change XLA:CPU's rounding."""
    return sorted(os.environ.get("XLA_FLAGS", "").split())


def recordings() -> list[dict]:
    """Every recording in GOLDEN: ``{"jax", "machine", "xla_flags", "algorithms"}`` each (``machine`` None for
    the first, made before machines were recorded; ``xla_flags`` missing where none were set)."""
    return [{"xla_flags": [], **r} for r in json.loads(GOLDEN.read_text())["recordings"]]


def recordings_of(cpu: dict | None, flags: list[str]) -> list[dict]:
    """The recordings made on the kind of CPU ``cpu`` (a :func:`machine`) with the sorted ``XLA_FLAGS``
    ``flags``."""
    return [r for r in recordings() if r["machine"] == cpu and r["xla_flags"] == flags]


def has_recording_here() -> bool:
    """Whether a recording was made on this kind of CPU with this process's ``XLA_FLAGS``, so that a replay
    in this process must match it."""
    return bool(recordings_of(machine(), xla_flags()))


def record(add_machine: bool = False) -> None:
    """Write this machine's trajectories of every registry algorithm (:func:`replay`) into GOLDEN: as the only
    recording, or with ``add_machine`` beside the recordings of other kinds of CPU or other ``XLA_FLAGS``."""
    golden = replay()
    this = {"jax": jax.__version__, "machine": machine(), "xla_flags": xla_flags(), "algorithms": golden}
    same = lambda r: r["machine"] == this["machine"] and r["xla_flags"] == this["xla_flags"]  # noqa: E731
    kept = [r for r in recordings() if not same(r)] if add_machine and GOLDEN.exists() else []
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({"recordings": kept + [this]}, indent=1) + "\n")


def replay(names=None) -> dict:
    """Today's trajectories of ``names`` (default: every registry algorithm), through the contract's
    ``round(state, batch, test)`` and ``evaluate(state, test, train)``, for comparison with GOLDEN."""
    from pflax.algorithms import REGISTRY

    out = {}
    for name in names or list(REGISTRY):
        module = REGISTRY[name]
        out[name] = trajectory(name, module, lambda state, batch, test, m=module: m.round(state, batch, test),
                               lambda state, test, train, m=module: m.evaluate(state, test, train),
                               module.sample_clients)
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line: one explicit action, so that a stray argument (``--help`` included) never rewrites
    GOLDEN."""
    import argparse

    parser = argparse.ArgumentParser(description="Record or replay the golden trajectories.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true",
                        help="replace every recording with this machine's (a deliberate, documented change only)")
    action.add_argument("--add-machine", action="store_true",
                        help="add this machine's recording (its CPU, its XLA_FLAGS) beside the others")
    action.add_argument("--replay", type=Path, metavar="OUT.json", help="write today's trajectories to OUT.json")
    args = parser.parse_args(argv)
    if args.replay:
        args.replay.write_text(json.dumps(replay()))
    else:
        record(add_machine=args.add_machine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
