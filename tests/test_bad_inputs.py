"""Bad-input matrix: every public entry point (library and CLI) rejects malformed input with a
message that names the problem, or shows its documented behaviour on degenerate-but-valid input;
never NaN in the state, never a half-written results file."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import _tiny_fedpac as T
from pflax import checkpoint, cli, fedpac
from pflax.algorithms.fedpac import combination
from pflax.core.execution import Execution
from pflax.data import DataError, dirichlet, fedpac_shards, load_dataset, load_idx_dir, read_idx
from pflax.models import mlp

GOOD = T.client_data(0)


def _state(**cfg):
    return T.init(0, T.config(**cfg) if cfg else None)


def _batch(**arrays):
    return T.with_arrays(GOOD, **arrays)


def _x_with(value, where=(0, 0)):
    x = np.array(GOOD.x)
    x[where] = value
    return x


def _check(data, state=None, test=None):
    fedpac.check_inputs(state or _state(), data, test)


def _damaged_idx_dir(src: Path, tmp: Path, how: str) -> Path:
    """A copy of the Fashion-MNIST folder ``src`` with its smallest file damaged (``how``)."""
    dst = tmp / "fashion_mnist"
    shutil.copytree(src, dst)
    victim = dst / "t10k-labels-idx1-ubyte.gz"
    raw = victim.read_bytes()
    if how == "truncated_gzip":
        victim.write_bytes(raw[: len(raw) // 2])
    elif how == "truncated_payload":  # a valid gzip whose IDX payload is cut short
        victim.write_bytes(gzip.compress(gzip.decompress(raw)[:-100]))
    elif how == "bad_magic":
        victim.write_bytes(gzip.compress(b"\x12\x34" + gzip.decompress(raw)[2:]))
    elif how == "missing_file":
        victim.unlink()
    return dst


# (id, thunk, exception, match). Each thunk raises on its own; shared fixtures are built lazily.
LIBRARY_CASES = [
    ("x_rank", lambda: _check(_batch(x=np.zeros((5,), np.float32))), DataError, r"expected x \[clients, n_max, \.\.\.\]"),
    ("x_without_sample_axes", lambda: _check(_batch(x=np.zeros((5, 12), np.float32))), DataError, r"samples of shape \(\) do not fit the model 'mlp'"),
    ("y_shape", lambda: _check(_batch(y=np.zeros((5, 11), np.int32))), DataError, r"disagree on \[clients, n_max\]"),
    ("mask_rank", lambda: _check(_batch(mask=np.ones((5, 12, 1), bool))), DataError, r"expected x \[clients, n_max, \.\.\.\]"),
    ("client_ids_shape", lambda: _check(_batch(client_ids=np.arange(4, dtype=np.int32))), DataError, r"client_ids must have shape \(5,\)"),
    ("x_integer_dtype", lambda: _check(_batch(x=np.zeros(GOOD.x.shape, np.int32))), DataError, r"x must be floating point"),
    ("y_float_dtype", lambda: _check(_batch(y=np.asarray(GOOD.y, np.float32))), DataError, r"y must hold integer class labels"),
    ("label_negative", lambda: _check(_batch(y=np.where(np.arange(12) == 3, -1, GOOD.y))), DataError, r"labels must lie in \[0, 4\), found \[-1, 3\]"),
    ("label_too_large", lambda: _check(_batch(y=np.where(np.arange(12) == 3, 4, GOOD.y))), DataError, r"labels must lie in \[0, 4\), found \[0, 4\]"),
    ("model_has_fewer_classes_than_data",
     lambda: _check(GOOD, fedpac.init(jax.random.PRNGKey(0), mlp(3, (8,)), GOOD.x[0], 5, T.config())),
     DataError, r"labels must lie in \[0, 3\), found \[0, 3\]"),
    ("nan_in_x", lambda: _check(_batch(x=_x_with(np.nan))), DataError, r"x contains NaN or Inf \(in real samples\)"),
    ("inf_in_x", lambda: _check(_batch(x=_x_with(np.inf))), DataError, r"x contains NaN or Inf \(in real samples\)"),
    ("nan_in_padding",
     lambda: _check(_batch(x=_x_with(np.nan, (1, 11)), mask=np.asarray(GOOD.mask).copy() & (np.arange(12) < 11))),
     DataError, r"x contains NaN or Inf \(in padded slots\)"),
    ("duplicate_client_ids", lambda: _check(_batch(client_ids=np.array([0, 1, 1, 2, 3], np.int32))), DataError, r"duplicate client ids \[1\]"),
    ("client_id_out_of_range", lambda: _check(_batch(client_ids=np.array([0, 1, 2, 3, 7], np.int32))), DataError, r"client ids must lie in \[0, 5\), found \[0, 7\]"),
    ("zero_clients_check", lambda: _check(GOOD.take(np.zeros((0,), np.int32))), DataError, r"no clients in the batch \(zero clients sampled\)"),
    ("zero_clients_round", lambda: fedpac.round(_state(), GOOD.take(np.zeros((0,), np.int32))), DataError, r"no clients in the batch"),
    ("test_rows_other_clients", lambda: _check(GOOD.take([0, 1]), test=GOOD.take([1, 0])), DataError, r"test: rows must be the same clients"),
    ("sample_shape_mismatch", lambda: _check(_batch(x=np.zeros((5, 12, 5, 5, 1), np.float32))), DataError, r"samples of shape \(5, 5, 1\) do not fit the model 'mlp'"),
    ("negative_body_lr", lambda: T.config(body_lr=-0.1), ValueError, r"FedPAC body_lr must be >= 0, got -0\.1"),
    ("negative_head_lr", lambda: T.config(head_lr=-1.0), ValueError, r"FedPAC head_lr must be >= 0"),
    ("negative_lam", lambda: T.config(lam=-1.0), ValueError, r"FedPAC lam must be >= 0, got -1\.0"),
    ("momentum_one", lambda: T.config(momentum=1.0), ValueError, r"momentum must be in \[0, 1\)"),
    ("batch_size_zero", lambda: fedpac.Config(batch_size=0), ValueError, r"batch_size must be >= 1"),
    ("qp_mode_unknown", lambda: T.config(qp_mode="fast"), ValueError, r"qp_mode must be 'exact' or 'official'"),
    ("execution_unknown", lambda: Execution("threads"), ValueError, r"unknown execution strategy 'threads'"),
    ("num_clients_zero", lambda: T.init(0, num_clients=0), ValueError, r"num_clients must be >= 1, got 0"),
    ("fraction_zero", lambda: fedpac.sample_clients(_state(), 0.0), ValueError, r"participation fraction must be in \(0, 1\], got 0\.0"),
    ("fraction_above_one", lambda: fedpac.sample_clients(_state(), 1.5), ValueError, r"participation fraction must be in \(0, 1\]"),
    ("s_above_one", lambda: fedpac_shards(np.arange(100) % 10, 4, 20, s=1.5), ValueError, r"s \(the uniform share\) must be in \[0, 1\], got 1\.5"),
    ("s_negative", lambda: fedpac_shards(np.arange(100) % 10, 4, 20, s=-0.1), ValueError, r"must be in \[0, 1\], got -0\.1"),
    ("dirichlet_beta_zero", lambda: dirichlet(np.arange(100) % 10, 4, 0.0), ValueError, r"Dirichlet beta must be > 0, got 0\.0"),
    ("dirichlet_beta_negative", lambda: dirichlet(np.arange(100) % 10, 4, -1.0), ValueError, r"Dirichlet beta must be > 0, got -1\.0"),
    ("qp_shape_mismatch", lambda: combination.combination_weights(jnp.ones(3), jnp.ones((4, 2, 2))), ValueError, r"v \[m\] and h \[m, K, d\]; got v \(3,\), h \(4, 2, 2\)"),
    ("qp_mask_shape", lambda: combination.combination_weights(jnp.ones(3), jnp.ones((3, 2, 2)), jnp.ones(4, bool)), ValueError, r"participating must have shape \(3,\)"),
    ("missing_data_directory", lambda: load_dataset("fashion_mnist", "/nonexistent/datasets"), DataError, r"data directory '/nonexistent/datasets' does not exist"),
    ("idx_not_found", lambda: read_idx("/nonexistent/train-images-idx3-ubyte.gz"), FileNotFoundError, r"No such file"),
]


@pytest.mark.parametrize("case, thunk, error, match", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_rejects(case, thunk, error, match):
    with pytest.raises(error, match=match):
        thunk()


@pytest.mark.parametrize(
    "how, match",
    [
        ("truncated_gzip", r"t10k-labels-idx1-ubyte\.gz: cannot read IDX file .*truncated or corrupt"),
        ("truncated_payload", r"t10k-labels-idx1-ubyte\.gz: IDX header promises 10000 bytes .* holds 9900"),
        ("bad_magic", r"bad IDX magic number"),
        ("missing_file", r"missing IDX files: t10k-labels-idx1-ubyte\[\.gz\]"),
    ],
)
def test_damaged_idx_files(fmnist_dir, tmp_path, how, match):
    directory = _damaged_idx_dir(fmnist_dir, tmp_path, how)
    with pytest.raises(DataError, match=match):
        load_idx_dir(directory)


def test_truncated_checkpoint_api(tmp_path):
    state = _state()
    checkpoint.save(tmp_path, state)
    for f in (tmp_path / "0" / "state").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:3])
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint step 0 in .* is truncated or corrupt"):
        checkpoint.restore(tmp_path, state)


# --------------------------------------------------------------------------- documented behaviours


def _round(data, state=None):
    state = state or _state()
    fedpac.check_inputs(state, data)  # valid input: no error
    new, metrics = fedpac.round(state, data)
    T.assert_all_finite(new)
    assert not bool(metrics["nonfinite"])
    return state, new, jax.device_get(metrics)


def test_empty_client_has_weight_zero_and_keeps_its_head():
    mask = np.asarray(GOOD.mask).copy()
    mask[2] = False
    before, after, metrics = _round(_batch(mask=mask, x=np.where(mask[..., None, None, None], GOOD.x, 0.0)))
    assert metrics["n"][2] == 0
    weights = metrics["combination_weights"]
    np.testing.assert_array_equal(weights[:, 2], np.eye(5)[:, 2])  # nobody mixes in client 2's head
    np.testing.assert_array_equal(weights[2], np.eye(5)[2])
    for old, new in zip(jax.tree.leaves(before.clients), jax.tree.leaves(after.clients)):
        np.testing.assert_array_equal(np.asarray(old)[2], np.asarray(new)[2])
    assert all(np.all(np.isfinite(v)) for v in jax.tree.leaves(metrics) if np.asarray(v).dtype.kind == "f")


def test_class_missing_on_one_client():
    y = np.asarray(GOOD.y).copy()
    y[1] = np.where(y[1] == 3, 0, y[1])  # client 1 has no class 3
    _, after, metrics = _round(_batch(y=y))
    assert bool(np.asarray(after.server["centroid_valid"])[3])  # the others still define it
    assert np.all(np.asarray(metrics["combination_weights"]).sum(1) > 0.999)


def test_class_missing_on_every_participant_keeps_previous_centroid():
    _, first, _ = _round(GOOD)
    y = np.where(np.asarray(GOOD.y) == 3, 0, np.asarray(GOOD.y))
    _, second, _ = _round(_batch(y=y), first)
    np.testing.assert_array_equal(np.asarray(second.server["centroids"])[3], np.asarray(first.server["centroids"])[3])
    assert bool(np.asarray(second.server["centroid_valid"])[3])
    # Never seen at all: stays undefined (zeros, invalid), no NaN.
    _, fresh, _ = _round(_batch(y=y))
    assert not bool(np.asarray(fresh.server["centroid_valid"])[3]) and not np.any(np.asarray(fresh.server["centroids"])[3])


def test_diverging_round_keeps_the_state_and_reports_nonfinite():
    state = _state()
    huge = _batch(x=np.asarray(GOOD.x) * 1e36)  # finite input, but the features overflow
    new, metrics = fedpac.round(state, huge)
    assert bool(metrics["nonfinite"])
    assert T.tree_equal(new, state)  # nothing was applied, NaN never entered the state


@pytest.mark.parametrize("group", [1, 7, 1 << 22])  # every leaf alone, several groups, one group per dtype
def test_all_finite_finds_any_nan_or_inf_in_any_leaf(monkeypatch, group):
    from pflax.core import federated

    monkeypatch.setattr(federated, "_FINITE_CHECK_GROUP", group)
    tree = {
        "a": np.zeros((3, 4), np.float32), "b": np.ones(5, np.float32), "n": np.arange(4),  # ints are skipped
        "big64": np.full(3, 1e300),  # finite in float64, would overflow if cast to float32
        "half": np.ones((2, 3), np.float16), "c": np.ones((2, 2), np.float32),
    }
    with jax.enable_x64(True):  # keep the float64 leaf float64 inside the check
        check = jax.jit(federated.all_finite)
        assert bool(check(tree))
        for name in ("a", "b", "big64", "half", "c"):
            for bad in (np.nan, np.inf, -np.inf):
                leaf = np.array(tree[name])
                leaf.flat[leaf.size - 1] = bad
                assert not bool(check({**tree, name: leaf})), (name, bad)
        assert bool(check({"n": np.arange(3)})) and bool(check({}))


def test_nan_statistics_give_own_head_not_nan():
    v = jnp.array([0.5, jnp.nan, 0.2])
    h = jnp.ones((3, 2, 2)) * jnp.arange(3.0)[:, None, None]
    w = np.asarray(combination.combination_weights(v, h))
    assert np.all(np.isfinite(w)) and np.allclose(w.sum(1), 1.0)


# --------------------------------------------------------------------------- CLI

TINY = ["run", "--model", "mlp", "--clients", "4", "--rounds", "1", "--train-per-client", "40", "--test-per-client", "40",
        "--quiet", "--no-plots"]

CLI_CASES = [
    ("clients_zero", ["--clients", "0"], r"pflax: --clients must be >= 1, got 0"),
    ("rounds_zero", ["--rounds", "0"], r"--rounds must be >= 1"),
    ("fraction_zero", ["--fraction", "0"], r"--fraction must be in \(0, 1\], got 0\.0"),
    ("s_above_one", ["--s", "1.5"], r"--s must be in \[0, 1\], got 1\.5"),
    ("checkpoint_every_negative", ["--checkpoint-every", "-1"], r"--checkpoint-every must be >= 0"),
    ("negative_lam", ["--set", "lam=-1"], r"pflax: FedPAC lam must be >= 0, got -1\.0"),
    ("negative_body_lr", ["--set", "body_lr=-0.01"], r"pflax: FedPAC body_lr must be >= 0"),
    ("momentum_one", ["--set", "momentum=1"], r"pflax: FedPAC momentum must be in \[0, 1\)"),
    ("unknown_config_field", ["--set", "mu=0.1"], r"pflax: fedpac has no config field 'mu'; its fields: "),
    ("wrong_config_type", ["--set", "body_epochs=2.5"], r"pflax: body_epochs must be a int, got 2\.5"),
    ("unknown_partition_parameter", ["--beta", "0.1"], r"pflax: partition 'fedpac' has no parameter beta"),
    ("bn_model_for_fedpac", ["--model", "bn_cnn"], r"pflax: fedpac needs model cnn or mlp, not 'bn_cnn'"),
    ("missing_run_file", ["--config", "/nonexistent/run.toml"], r"pflax: run file '/nonexistent/run\.toml' does not exist"),
    ("missing_data_dir", ["--dataset", "fashion_mnist", "--data-dir", "/nonexistent/data"], r"pflax: data directory '/nonexistent/data' does not exist"),
    ("resume_without_checkpoint", ["--resume"], r"pflax: cannot resume: no complete checkpoint in"),
]


def _assert_no_partial_files(out: Path) -> None:
    if out.exists():
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "temp file of an atomic write left"
        assert not (out / "results.json").exists()


@pytest.mark.parametrize("case, args, match", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_rejects(tmp_path, case, args, match):
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=match):
        cli.main(TINY + args + ["--out", str(out)])
    _assert_no_partial_files(out)


def test_cli_truncated_idx(fmnist_dir, tmp_path):
    directory = _damaged_idx_dir(fmnist_dir, tmp_path / "data", "truncated_gzip")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"pflax: .*t10k-labels-idx1-ubyte\.gz: cannot read IDX file .*truncated or corrupt"):
        cli.main(TINY + ["--dataset", "fashion_mnist", "--data-dir", str(directory.parent), "--out", str(out)])
    _assert_no_partial_files(out)
