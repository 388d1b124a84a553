"""Checkpoints of an algorithm's whole state with orbax-checkpoint, safe to resume from.

    from pflax import checkpoint
    checkpoint.save("runs/x/checkpoints", state, extra={"history": rows})
    template = fedpac.init(key, model, sample_x, num_clients, config)   # same configuration
    restored = checkpoint.restore("runs/x/checkpoints", template)        # latest step
    state, step, extra = restored.state, restored.step, restored.extra

What is saved, per step (``<directory>/<step>/``, the step being the state's round counter):

* ``state``: every array of the state pytree (parameters, per-client heads, centroids, the round
  counter and both PRNG keys; typed PRNG keys are stored as their raw key data);
* ``meta`` (JSON): a fingerprint of everything that defines the run but is not an array (the
  algorithm's ``Config``, the model, the names, shapes and dtypes of the state's arrays, and an
  optional ``run`` dict such as the CLI's data settings), a SHA-256 checksum of every array, and the
  caller's ``extra`` JSON (the CLI keeps its results history there, so it resumes with the state).

The static fields (model, config) are not saved: :func:`restore` takes a freshly initialised
``template`` state that supplies them, and refuses, naming the differing fields, when the checkpoint
was written by a different configuration. The execution strategy (``Config.execution``) is left out
of the fingerprint on purpose: it says how clients are mapped, not what is computed, so a run may be
resumed on another machine with another strategy (results then agree to float round-off only, see
``tests/test_determinism.py``).

In a multi-process run (``jax.distributed``), every process calls :func:`save` and :func:`restore` with
the same directory, which all of them must see. Leaves sharded over several processes are gathered onto
every process first (so the state must fit in one host's memory), and orbax coordinates the write.
``tests/test_multiprocess.py`` saves and restores a state whose per-client heads span two processes.

Orbax writes every step into a temporary directory and renames it when complete, so a process killed
mid-save leaves no step that looks complete. A step whose files were truncated or altered afterwards
is detected (orbax read error or checksum mismatch) and reported as a :class:`CheckpointError`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .core.execution import place_for

__all__ = ["CheckpointError", "Restored", "save", "restore", "read", "latest_step", "all_steps", "fingerprint",
           "pack", "unpack", "packed_step"]

FORMAT_VERSION = 1
# Config fields that describe how the computation is mapped onto devices, not what it computes.
_NOT_FINGERPRINTED = ("execution",)


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated/corrupt, or was written by a different configuration.

    A ``ValueError``, with a message naming the directory, the step and what is wrong.

    >>> issubclass(CheckpointError, ValueError)
    True
    """


class Restored(NamedTuple):
    """What :func:`restore` returns.

    Attributes:
      state: the restored state, with the template's static fields.
      step: the restored step (the state's round counter).
      extra: the JSON dict passed to :func:`save` as ``extra``.

    >>> Restored(state=None, step=3, extra={"history": []}).step
    3
    """

    state: Any
    step: int
    extra: dict


# --------------------------------------------------------------------------- state <-> arrays


def _array_fields(state) -> list[str]:
    return [f.name for f in dataclasses.fields(state) if f.metadata.get("pytree_node", True)]


def _static_fields(state) -> list[str]:
    return [f.name for f in dataclasses.fields(state) if not f.metadata.get("pytree_node", True)]


def _is_typed_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _host_array(x) -> np.ndarray:
    """The whole value of ``x`` on this host, also when ``x`` spans several processes (multi-host runs).

    A per-client leaf sharded over the devices of several hosts is gathered onto every host, so every
    host computes the same checksums and hands orbax the full array: the state must fit in one host's
    memory (the clients' data need not, as it is not part of the state).
    """
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _to_storable(state) -> dict:
    """The state's array fields as a plain dict of host arrays (typed keys -> raw key data)."""
    arrays = {name: getattr(state, name) for name in _array_fields(state)}
    return jax.tree.map(lambda x: _host_array(jax.random.key_data(x) if _is_typed_key(x) else x), arrays)


def _from_storable(template, arrays: dict):
    """Put restored arrays back into ``template`` (which supplies static fields and key types)."""
    def back(t, a):
        if _is_typed_key(t):
            return jax.random.wrap_key_data(jnp.asarray(a), impl=jax.random.key_impl(t))
        return jnp.asarray(a, dtype=t.dtype)

    fields = {name: jax.tree.map(back, getattr(template, name), arrays[name]) for name in _array_fields(template)}
    state = template.replace(**fields)
    # Where init would have put it (replicated over the client mesh under `sharded`), so that the first
    # round after a resume reuses the compilation of the others.
    execution = getattr(getattr(state, "config", None), "execution", None)
    return state if execution is None else place_for(execution, state)


def _path_name(path) -> str:
    """``heads/TorchDense_0/kernel`` rather than ``['heads']['TorchDense_0']['kernel']``."""
    parts = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
    return "/".join(parts)


def _leaf_paths(tree) -> list[tuple[str, Any]]:
    return [(_path_name(path), leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _checksums(arrays: dict) -> dict[str, str]:
    """SHA-256 of every leaf's dtype, shape and bytes: catches silently altered data."""
    out = {}
    for path, leaf in _leaf_paths(arrays):
        leaf = np.ascontiguousarray(leaf)
        digest = hashlib.sha256(f"{leaf.dtype.str}{leaf.shape}".encode())
        digest.update(leaf.tobytes())
        out[path] = digest.hexdigest()
    return out


# --------------------------------------------------------------------------- fingerprint


def _jsonable(value):
    """A JSON-stable description (tuples -> lists, objects -> repr), so saved and current compare equal."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else repr(value)
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return _jsonable(value.item())
    return repr(value)


def _describe_static(name: str, value) -> dict:
    if name == "config" and dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in _NOT_FINGERPRINTED}
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return {"repr": _jsonable(value)}


def fingerprint(state, run: dict | None = None) -> dict:
    """Everything that must match for a checkpoint to be resumed with ``state``'s configuration.

    Args:
      state: an algorithm state (a ``flax.struct`` dataclass).
      run: further settings that must match (e.g. the CLI's data arguments), JSON-able.

    Returns:
      A JSON-able dict: format, state type, static fields (``Config`` without ``execution``, model),
      the arrays' ``dtype[shape]`` by path, and ``run``.

    >>> from pflax.core.federated import State
    >>> fp = fingerprint(State.create(jax.random.PRNGKey(0), {"w": jnp.ones(2)}, {}, 2, None, None), run={"seed": 0})
    >>> fp["arrays"]["server/w"], fp["run"]
    ('float32[2]', {'seed': 0})
    """
    arrays = _to_storable(state)
    return {
        "format": FORMAT_VERSION,
        "state_type": f"{type(state).__module__}.{type(state).__qualname__}",
        **{name: _describe_static(name, getattr(state, name)) for name in _static_fields(state)},
        "arrays": {path: f"{leaf.dtype}{list(leaf.shape)}" for path, leaf in _leaf_paths(arrays)},
        "run": _jsonable(run or {}),
    }


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def differences(saved: dict, current: dict, added: dict | None = None) -> list[str]:
    """Human-readable ``field: checkpoint X, now Y`` lines for every differing fingerprint field.

    Args:
      saved: the fingerprint stored with a checkpoint.
      current: the fingerprint of the state being resumed (:func:`fingerprint`).
      added: ``{dot-separated field: value}`` of fields that may be absent from ``saved`` when
        ``current`` holds that value: ``Config`` fields added after the checkpoint was written, at
        the default that keeps the earlier behaviour.

    Returns:
      One line per differing (dot-separated) field, sorted; ``[]`` when they match.

    >>> differences({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": True})
    ['b.c: checkpoint 2, now 3', 'd: checkpoint <absent>, now true']
    >>> differences({"a": 1}, {"a": 1, "d": 0}, added={"d": 0}), differences({"a": 1}, {"a": 1, "d": 5}, added={"d": 0})
    ([], ['d: checkpoint <absent>, now 5'])
    """
    a, b = _flatten(saved), _flatten(current)
    added = added or {}
    missing = object()
    lines = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va is missing and key in added and vb == added[key]:
            continue
        if va != vb:
            show = lambda v: "<absent>" if v is missing else json.dumps(v)
            lines.append(f"{key}: checkpoint {show(va)}, now {show(vb)}")
    return lines


def _config_defaults(state) -> dict:
    """Every ``Config`` field's default, keyed as the fingerprint holds it: under ``config`` and under
    the run settings' ``config`` (:meth:`pflax.experiment.RunSpec.fingerprint` writes the whole Config
    there). A checkpoint written before a field existed may resume when the field is at its default."""
    config = getattr(state, "config", None)
    if not dataclasses.is_dataclass(config):
        return {}
    defaults = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            value = json.loads(json.dumps(_jsonable(f.default)))
            defaults[f"config.{f.name}"] = defaults[f"run.config.{f.name}"] = value
    return defaults


# --------------------------------------------------------------------------- orbax plumbing


def _manager(directory: Path, *, read_only: bool, max_to_keep: int | None = None):
    import orbax.checkpoint as ocp

    # orbax warns every time a read-only manager opens a directory, which is how this module reads
    # checkpoints (a run packing each checkpoint printed two warnings per save); only those are hidden.
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    if read_only:
        absl_logger.setLevel(logging.ERROR)
    try:
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            create=not read_only,
            read_only=read_only,
            # synchronous: save() returns only once the step is complete on disk
            enable_async_checkpointing=False,
            # a process killed mid-save leaves a temporary directory; drop it on the next save
            cleanup_tmp_directories=not read_only,
        )
        return ocp.CheckpointManager(directory, options=options, item_names=("state", "meta"))
    finally:
        absl_logger.setLevel(level)


def all_steps(directory) -> list[int]:
    """Complete steps in ``directory`` (ascending); ``[]`` when there is none or no directory.

    Args:
      directory: the checkpoint directory (str or path).

    Returns:
      A sorted list of step numbers.

    >>> all_steps("no/such/directory")
    []
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    with _manager(directory, read_only=True) as manager:
        return sorted(manager.all_steps())


def latest_step(directory) -> int | None:
    """The newest complete step in ``directory``, or ``None``.

    Args:
      directory: the checkpoint directory (str or path).

    Returns:
      The largest of :func:`all_steps`, or ``None`` when there is no checkpoint.

    >>> latest_step("no/such/directory") is None
    True
    """
    steps = all_steps(directory)
    return steps[-1] if steps else None


def save(directory, state, *, extra: dict | None = None, run: dict | None = None, max_to_keep: int | None = None) -> int:
    """Write ``state`` as step ``int(state.round)`` under ``directory``; returns the step.

    ``extra`` is any JSON-serialisable dict stored with the step (returned by :func:`restore`);
    ``run`` joins the fingerprint (settings outside the state's ``Config`` that must match on resume).
    An existing step of the same number is replaced. ``max_to_keep`` keeps only the newest steps.

    Args:
      directory: the checkpoint directory (created if missing).
      state: the algorithm state to save.
      extra: a JSON-serialisable dict stored with the step.
      run: settings outside ``Config`` that join the fingerprint.
      max_to_keep: how many of the newest steps to keep (``None``: all).

    Returns:
      The step written, ``int(state.round)``.

    >>> import tempfile
    >>> from pflax.core.federated import State
    >>> s = State.create(jax.random.PRNGKey(0), {"w": jnp.ones(2)}, {}, 2, None, None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save(d, s, extra={"note": "hi"}), all_steps(d), restore(d, s).extra
    (0, [0], {'note': 'hi'})
    """
    import orbax.checkpoint as ocp

    directory = Path(directory).absolute()
    arrays = _to_storable(state)
    step = int(_host_array(state.round))
    meta = {
        "fingerprint": fingerprint(state, run),
        "checksums": _checksums(arrays),
        "extra": _jsonable(extra or {}),
    }
    with _manager(directory, read_only=False, max_to_keep=max_to_keep) as manager:
        if step in manager.all_steps():
            manager.delete(step)
        manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)))
        manager.wait_until_finished()
    return step


def _corrupt(directory: Path, step: int, why: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint step {step} in {directory} is truncated or corrupt ({why}); delete {directory / str(step)} "
        "to resume from an earlier step, or start afresh"
    )


def restore(directory, template, *, step: int | None = None, run: dict | None = None) -> Restored:
    """Load step ``step`` (default: the latest) into ``template``'s structure.

    ``template`` is a state of the same configuration, e.g. a fresh ``init``: it supplies the static
    fields. Raises :class:`CheckpointError` when there is no checkpoint, when it was written by a
    different configuration (the message lists the differing fields), or when it is truncated/corrupt.

    Args:
      directory: the checkpoint directory.
      template: a state of the same configuration.
      step: the step to load; ``None`` for the latest.
      run: the settings given to :func:`save` as ``run`` (they must match).

    Returns:
      :class:`Restored` ``(state, step, extra)``.

    >>> import tempfile
    >>> from pflax.core import federated
    >>> two = federated.State.create(jax.random.PRNGKey(1), {}, {}, 2, None, None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = save(d, two)
    ...     restore(d, two.replace(num_clients=3))
    Traceback (most recent call last):
    ...
    pflax.checkpoint.CheckpointError: checkpoint step 0 in ... differing fields: num_clients.repr: checkpoint 2, now 3
    """
    import orbax.checkpoint as ocp

    directory = Path(directory).absolute()
    steps = all_steps(directory)
    if not steps:
        raise CheckpointError(f"no complete checkpoint in {directory}")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise CheckpointError(f"no checkpoint step {step} in {directory}; available: {steps}")

    with _manager(directory, read_only=True) as manager:
        try:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        except Exception as err:  # orbax/json errors on damaged files
            raise _corrupt(directory, step, f"cannot read its metadata: {type(err).__name__}: {err}") from err
        if not isinstance(meta, dict) or not {"fingerprint", "checksums", "extra"} <= set(meta):
            raise _corrupt(directory, step, "its metadata is incomplete")

        diff = differences(meta["fingerprint"], json.loads(json.dumps(fingerprint(template, run))),
                           added=_config_defaults(template))
        if diff:
            raise CheckpointError(
                f"checkpoint step {step} in {directory} was written by a different configuration; "
                "differing fields: " + "; ".join(diff)
            )

        abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), _to_storable(template))
        try:
            arrays = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))).state
        except Exception as err:
            raise _corrupt(directory, step, f"cannot read its arrays: {type(err).__name__}: {err}") from err

    arrays = jax.tree.map(np.asarray, arrays)
    sums = _checksums(arrays)
    bad = sorted(path for path in meta["checksums"] if sums.get(path) != meta["checksums"][path])
    if bad or set(sums) != set(meta["checksums"]):
        raise _corrupt(directory, step, f"arrays do not match their checksums: {', '.join(bad) or 'tree structure'}")
    return Restored(_from_storable(template, arrays), step, meta["extra"])


def read(directory, step: int | None = None) -> tuple[dict, dict]:
    """``(arrays, meta)`` of a step (default: the latest) without a template, checksums verified:
    for inspecting checkpoints and comparing runs. ``arrays`` mirrors the state's array fields.

    Args:
      directory: the checkpoint directory.
      step: the step to read; ``None`` for the latest.

    Returns:
      ``(arrays, meta)``: a dict of numpy arrays, and the stored ``fingerprint``, ``checksums`` and
      ``extra``. Raises :class:`CheckpointError` when there is no checkpoint or it is corrupt.

    >>> read("no/such/directory")
    Traceback (most recent call last):
    ...
    pflax.checkpoint.CheckpointError: no complete checkpoint in .../no/such/directory
    """
    import orbax.checkpoint as ocp

    directory = Path(directory).absolute()
    steps = all_steps(directory)
    if not steps:
        raise CheckpointError(f"no complete checkpoint in {directory}")
    step = steps[-1] if step is None else step
    with _manager(directory, read_only=True) as manager:
        try:
            both = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
        except Exception as err:
            raise _corrupt(directory, step, f"{type(err).__name__}: {err}") from err
    arrays = jax.tree.map(np.asarray, both.state)
    if _checksums(arrays) != both.meta["checksums"]:
        raise _corrupt(directory, step, "arrays do not match their checksums")
    return arrays, both.meta


# --------------------------------------------------------------------------- one step as one file


def pack(directory, archive, *, step: int | None = None) -> int:
    """Write one step of ``directory`` (default: the latest) as one compressed file, ``archive`` (tar.gz).

    A checkpoint directory is many small files, usually kept out of version control. One packed step
    beside a run's results lets a machine that has only the results (a fresh clone, a preemptible
    worker) resume the run: :func:`unpack` it into an empty directory and :func:`restore` as usual,
    checksums and fingerprint included. The file is written atomically (a temporary file renamed).

    Args:
      directory: the checkpoint directory.
      archive: the file to write (replaced when it exists).
      step: the step to pack; ``None`` for the latest.

    Returns:
      The step packed. Raises :class:`CheckpointError` when there is no such step.

    >>> import tempfile
    >>> from pflax.core.federated import State
    >>> s = State.create(jax.random.PRNGKey(0), {"w": jnp.ones(2)}, {}, 2, None, None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = save(f"{d}/a", s, extra={"note": "hi"})
    ...     pack(f"{d}/a", f"{d}/a.tar.gz"), packed_step(f"{d}/a.tar.gz"), unpack(f"{d}/a.tar.gz", f"{d}/b")
    ...     restore(f"{d}/b", s).extra
    (0, 0, 0)
    {'note': 'hi'}
    """
    directory, archive = Path(directory).absolute(), Path(archive)
    steps = all_steps(directory)
    step = (steps[-1] if steps else None) if step is None else step
    if step not in steps:
        raise CheckpointError(f"no checkpoint step {step} in {directory}; available: {steps}")
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.add(directory / str(step), arcname=str(step))
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return step


def packed_step(archive) -> int:
    """The step held by a file written by :func:`pack` (read from its member names, nothing extracted).

    Args:
      archive: the packed file.

    Returns:
      The step number. Raises :class:`CheckpointError` when the file is not one packed step.

    >>> packed_step("no/such/file.tar.gz")
    Traceback (most recent call last):
    ...
    pflax.checkpoint.CheckpointError: cannot read packed checkpoint no/such/file.tar.gz: FileNotFoundError...
    """
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            tops = {Path(name).parts[0] for name in tar.getnames()}
    except (OSError, tarfile.TarError) as err:
        raise CheckpointError(f"cannot read packed checkpoint {archive}: {type(err).__name__}: {err}") from None
    if len(tops) != 1 or not next(iter(tops)).isdigit():
        raise CheckpointError(f"{archive} is not one packed checkpoint step (top-level entries: {sorted(tops)})")
    return int(next(iter(tops)))


def unpack(archive, directory) -> int:
    """Extract a file written by :func:`pack` into checkpoint directory ``directory`` (created).

    Only plain files and folders under the step's folder are extracted (tarfile's ``data`` filter), so
    a damaged or foreign archive cannot write elsewhere. The step is then read by :func:`restore`, which
    verifies it.

    Args:
      archive: the packed file.
      directory: the checkpoint directory to extract into; it must not hold that step already.

    Returns:
      The step extracted. Raises :class:`CheckpointError` on an unreadable archive or an existing step.

    >>> unpack("no/such/file.tar.gz", "anywhere")
    Traceback (most recent call last):
    ...
    pflax.checkpoint.CheckpointError: cannot read packed checkpoint no/such/file.tar.gz: FileNotFoundError...
    """
    step = packed_step(archive)
    directory = Path(directory)
    if (directory / str(step)).exists():
        raise CheckpointError(f"{directory} already holds step {step}; not overwriting it with {archive}")
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            tar.extractall(directory, filter="data")
    except (OSError, tarfile.TarError) as err:
        raise CheckpointError(f"cannot unpack {archive}: {type(err).__name__}: {err}") from None
    return step
