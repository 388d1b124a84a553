"""Shared fixtures. Real datasets come from ``$PFLAX_DATASETS`` or ``../shared/datasets`` beside the
repository; without them those tests skip with the reason, except under CI (``CI=true``), where a
missing dataset is a failure."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

# One XLA compilation cache for the whole test run, shared by the pytest-xdist workers and the
# subprocesses tests start (8 forced devices, multi-process, CLI, notebook): many of them compile the
# same programs. Set before jax is imported, so every process of the run picks it up; a fresh directory
# per run, removed at the end, so no state leaks between runs.
_CACHE_CREATED_HERE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _CACHE_CREATED_HERE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="pflax-tests-xla-cache-")
    # Cache every program, not only those compiling for > 1 s: the CLI subprocesses compile many
    # small ones (measured: a repeated `pflax run` 13 s with the default threshold, 9 s with 0).
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# Test programs are tiny, so compiling them dominates the suite (measured with jax.monitoring: XLA's
# backend compile is about 70 % of the time of the doctests, CLI and FedCollab tests). Two XLA:CPU
# options make those compiles cheaper without changing semantics, only round-off:
# * LLVM optimisation level 0 (measured: 20 % less CPU for the doctests and FedPAC tests together,
#   training included);
# * the classic fused-loop emitters instead of the MLIR fusion emitters (measured: every registry
#   algorithm's FedCollab coalition test, 78 s -> 38 s on one core).
# Every check holds as before; the golden trajectories, recorded bit for bit with XLA's default code
# generation, are replayed in a subprocess with the default flags (tests/test_contract.py).
# PFLAX_TEST_DEFAULT_XLA=1 runs the whole suite at the default.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
if os.environ.get("PFLAX_TEST_DEFAULT_XLA", "") in ("", "0"):
    _flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(_flags + [f for f in FAST_COMPILE_FLAGS if f not in _flags])


def compiles_fast() -> bool:
    """Whether this process compiles with any of the suite's fast-compile flags (its round-off then
    differs from XLA's default code generation)."""
    return any(f in os.environ.get("XLA_FLAGS", "").split() for f in FAST_COMPILE_FLAGS)


import jax  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str):
    """The repository's script at ``path`` (relative to the repository root, e.g.
    ``"benchmarks/results_pages.py"``) as a freshly executed module, registered in ``sys.modules`` under
    its file name: the dataclasses a script defines look their module up there."""
    path = REPO / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _environ_without(flags: tuple) -> dict:
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in flags]
    return dict(os.environ, XLA_FLAGS=" ".join(kept))


def default_xla_environ() -> dict:
    """This process's environment without the fast-compile flags, for a subprocess that must compile as
    XLA does by default: the golden replay, recorded with the default code generation."""
    return _environ_without(FAST_COMPILE_FLAGS)


def optimising_xla_environ() -> dict:
    """This process's environment at XLA's default LLVM optimisation level (the classic emitters kept),
    for runs that train enough for optimised code to repay its longer compiles. Measured on one core:
    the CLI run that shares the quickstart notebook's programs, 26.4 s at level 0, 18.6 s with XLA's
    defaults, 13.7 s at the default level with the classic emitters."""
    return _environ_without(FAST_COMPILE_FLAGS[:1])


# Under `-n 2 --dist loadfile`, pytest-xdist queues files by number of tests, so files with one or two
# minute-long tests (8 devices, multi-process, notebook) started last and ran alone at the end. Queue the
# files that take longest first instead (longest-first keeps both workers busy to the end); the
# order is from `--durations` of full runs, the other files follow in their usual order.
_LONGEST_FIRST = (
    "test_flower.py", "test_contract.py", "test_fedcollab.py", "test_notebooks.py", "test_execution.py", "test_fedpick.py",
    "test_fedpac.py", "test_baselines_more.py", "test_baselines.py",
    "test_checkpoint.py", "test_notebook_cli.py", "test_multiprocess.py", "test_map_reduce.py",
    "test_doctests.py", "test_cli.py",  # after test_fedcollab.py, whose compiled rounds test_cli.py's runs reuse
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist present
        config.option.loadscopereorder = False
        # A worker that dies (a native crash) ends the run with that test failed. With restarts allowed,
        # `--dist loadfile` waited forever for the dead worker's files and CI ran into its time limit.
        if config.option.maxworkerrestart is None:
            config.option.maxworkerrestart = 0


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: test order within files kept


@pytest.fixture
def float32_matmuls():
    """Full float32 convolutions and matmuls, for tests that compare a model's own arithmetic with a
    NumPy reference or with a second implementation. The CPU computes in float32 anyway (and the
    compiled programs stay shared with the other tests); on an NVIDIA GPU JAX's default for float32
    is TF32 (~1e-3 relative error), a speed choice these tests do not examine."""
    if jax.default_backend() == "cpu":
        yield
        return
    with jax.default_matmul_precision("highest"):
        yield


def datasets_root() -> Path:
    return Path(os.environ.get("PFLAX_DATASETS", REPO.parent / "shared" / "datasets"))


def _require_dataset(name: str, file: str = "train-images-idx3-ubyte.gz") -> Path:
    """``$PFLAX_DATASETS/<name>``, holding ``file``; the test skips without it, and fails under CI."""
    path = datasets_root() / name
    if not (path / file).exists():
        reason = (f"real dataset {name!r} not found at {path} (set PFLAX_DATASETS to the folder holding "
                  f"{name}/{file})")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must not skip: {reason}")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def fmnist_dir() -> Path:
    return _require_dataset("fashion_mnist")


@pytest.fixture(scope="session")
def usps_file() -> Path:
    return _require_dataset("usps", "usps.h5") / "usps.h5"


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    return _require_dataset("mnist")


@pytest.fixture(scope="session")
def tiny_federation():
    """A small synthetic federation (8 clients, ragged sizes) for fast algorithm tests."""
    from pflax.data import fedpac_shards, from_partition, synthetic

    ds = synthetic(num_classes=10, train_per_class=120, test_per_class=40, image_size=12, seed=1, noise=0.2)
    tr = fedpac_shards(ds.y_train, 8, 80, 0.2, 10)
    te = fedpac_shards(ds.y_test, 8, 30, 0.2, 10)
    tr = [idx[: 80 - 7 * (i % 3)] for i, idx in enumerate(tr)]  # ragged: 80, 73, 66, ...
    return ds, from_partition(ds.x_train, ds.y_train, tr), from_partition(ds.x_test, ds.y_test, te)


@pytest.fixture(scope="session")
def small_mlp():
    from pflax.models import mlp

    return mlp(10, hidden=(32,))


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's in-memory caches after every test file. Each compiled CPU program holds ~10 memory
    mappings for as long as a cache (of a module-level ``jax.jit``, say) keeps it, and a worker that
    compiled every program of half the suite reached Linux's default limit of 65,530 mappings per
    process: the next compilation then segfaulted inside XLA. Programs used again are read back from
    the persistent compilation cache."""
    yield
    jax.clear_caches()


def pytest_unconfigure(config):
    # Only the process that created the cache directory removes it (the xdist controller, or a plain run).
    if _CACHE_CREATED_HERE and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
