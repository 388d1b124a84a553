"""FedCollab: objective, greedy solver vs exhaustive search, discriminator distances, pair vmapping,
coalition training with every registry algorithm, new-client placement, and the paper's data setups
(:mod:`pflax.suites.fedcollab`)."""
from __future__ import annotations

import dataclasses
import importlib
import math

import jax
import numpy as np
import pytest

from pflax.algorithms import REGISTRY, fedavg
from pflax.algorithms.fedcollab import (DiscConfig, ablate, all_partitions, assign_new_client, canonical,
                                        estimate_distances, objective, objectives, solve, train_coalitions)
from pflax.algorithms.fedcollab.distance import disc_splits
from pflax.data import DataError, from_partition, load_idx_dir, synthetic
from pflax.suites.fedcollab import fmnist_label_shift, label_shift_partition, permute_labels, rotate_symmetric


# ----------------------------------------------------------------------------------------- objective

def test_objective_matches_hand_computation():
    sizes = np.array([10.0, 30.0, 60.0])
    dist = np.array([[0.0, 0.2, 0.5], [0.2, 0.0, -0.1], [0.5, -0.1, 0.0]])
    c = 2.0
    p = np.array([0, 1, 1])  # client 0 alone, clients 1 and 2 together
    m = 100.0
    beta = sizes / m
    # client 0: alpha = (1, 0, 0) -> sqrt(1/beta_0); no distance term
    e0 = c / math.sqrt(m) * math.sqrt(1 / beta[0])
    # clients 1, 2: alpha = (0, 1/3, 2/3); the negative distance is clipped to 0
    a = np.array([0.0, 1 / 3, 2 / 3])
    gen = c / math.sqrt(m) * math.sqrt((a[1:] ** 2 / beta[1:]).sum())
    e1 = gen + a[2] * 0.0
    e2 = gen + a[1] * 0.0
    assert objective(p, dist, sizes, c) == pytest.approx((e0 + e1 + e2) / 3, rel=1e-12)
    # grand coalition: alpha_i = beta for everyone
    g = c / math.sqrt(m) * math.sqrt((beta**2 / beta).sum())
    grand = [g + beta[1] * 0.2 + beta[2] * 0.5, g + beta[0] * 0.2, g + beta[0] * 0.5]
    assert objective(np.zeros(3, int), dist, sizes, c) == pytest.approx(np.mean(grand), rel=1e-12)


def test_objective_rejects_empty_clients():
    with pytest.raises(DataError, match="no training samples"):
        objective([0, 0, 1], np.zeros((3, 3)), [5, 0, 3], 1.0)
    with pytest.raises(DataError, match="no training samples"):
        solve(np.zeros((3, 3)), [5, 0, 3], 1.0, restarts=1)


# -------------------------------------------------------------------------------------------- solver

def _random_instance(rng, n):
    raw = rng.uniform(-0.1, 1.0, (n, n)) * rng.choice([0.1, 1.0], (n, n))
    dist = (raw + raw.T) / 2
    np.fill_diagonal(dist, 0.0)
    sizes = rng.integers(1, 500, n).astype(float)
    return dist, sizes


@pytest.mark.parametrize("seed", range(6))
def test_solver_finds_exhaustive_optimum(seed):
    rng = np.random.default_rng(seed)
    n = 4 + seed % 4  # 4..7 clients
    dist, sizes = _random_instance(rng, n)
    c = float(rng.choice([1.0, 3.0, 10.0]))
    parts = np.array(list(all_partitions(n)))
    values = objectives(parts, dist, sizes, c)
    out = solve(dist, sizes, c, seed=seed)
    assert out["objective"] == pytest.approx(values.min(), rel=1e-12, abs=1e-12)
    assert objective(out["assignment"], dist, sizes, c) == pytest.approx(out["objective"], rel=1e-12)


def test_all_partitions_counts_bell_numbers():
    assert [len(list(all_partitions(n))) for n in range(1, 8)] == [1, 2, 5, 15, 52, 203, 877]


def test_solver_deterministic_and_canonical():
    dist, sizes = _random_instance(np.random.default_rng(3), 7)
    a, b = solve(dist, sizes, 3.0, seed=5), solve(dist, sizes, 3.0, seed=5)
    assert np.array_equal(a["assignment"], b["assignment"]) and a["objective"] == b["objective"]
    p = a["assignment"]
    assert np.array_equal(p, canonical(p)) and p[0] == 0
    assert sorted(i for g in a["coalitions"] for i in g) == list(range(7))


def test_solver_recovers_block_structure_and_extremes():
    # Two groups far apart: the solver must never mix them; C -> 0 gives local training (any
    # positive distance then outweighs the vanishing generalisation gain).
    n = 6
    dist = np.ones((n, n))
    dist[:3, :3] = dist[3:, 3:] = 0.05
    np.fill_diagonal(dist, 0.0)
    sizes = np.full(n, 50.0)
    assert solve(dist, sizes, 10.0)["coalitions"] == [[0, 1, 2], [3, 4, 5]]
    assert solve(dist, sizes, 1e-6)["coalitions"] == [[i] for i in range(n)]


def test_ablations():
    dist, sizes = _random_instance(np.random.default_rng(1), 5)
    d_flat, beta = ablate(dist, sizes, "ignore_distances")
    off = ~np.eye(5, dtype=bool)
    assert beta is None and np.allclose(d_flat[off], dist[off].mean()) and np.all(np.diag(d_flat) == 0)
    d_same, beta = ablate(dist, sizes, "ignore_quantities")
    assert np.array_equal(d_same, dist) and np.allclose(beta, 0.2)


def test_assign_new_client_joins_its_twin_group():
    n = 6
    dist = np.ones((n, n))
    dist[:3, :3] = dist[3:, 3:] = 0.0
    sizes = np.full(n, 50.0)
    p = np.array([0, 0, 0, 3, 3, 3])
    new_dist = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    out = assign_new_client(p, dist, sizes, new_dist, 20.0, 10.0)
    assert out["joined"] == [3, 4, 5]
    # Everyone far away and plenty of data: train locally.
    out = assign_new_client(p, dist, sizes, np.ones(n), 5000.0, 10.0)
    assert out["joined"] == []


# ----------------------------------------------------------------------------------------- distances

def _gauss_federation(rng, label_sets, n=400, d=6, shifts=None):
    xs, ys, idx, start = [], [], [], 0
    for c, labels in enumerate(label_sets):
        y = rng.choice(labels, n).astype(np.int32)
        centres = np.eye(d, dtype=np.float32)[y % d] * 2.0
        x = rng.normal(size=(n, d)).astype(np.float32) + centres + (0 if shifts is None else shifts[c])
        xs.append(x), ys.append(y), idx.append(np.arange(start, start + n))
        start += n
    return from_partition(np.concatenate(xs), np.concatenate(ys), idx)


def test_distance_near_zero_for_identical_and_one_for_disjoint_labels():
    rng = np.random.default_rng(0)
    fed = _gauss_federation(rng, [[0, 1], [0, 1], [2, 3]])
    out = estimate_distances(fed, 4, jax.random.key(0), DiscConfig(max_rounds=400))
    d = out["D"]
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0)
    assert abs(d[0, 1]) < 0.15  # same distribution: only the optimistic best-checkpoint bias remains
    assert d[0, 2] > 0.95 and d[1, 2] > 0.95  # disjoint label sets are perfectly separable
    assert np.all(out["rounds"] <= 400)


def test_vmapped_pairs_equal_pairs_one_by_one():
    rng = np.random.default_rng(1)
    fed = _gauss_federation(rng, [[0, 1], [0, 1, 2], [1, 3]], n=120, shifts=[0, 0.3, 1.0])
    cfg = DiscConfig(max_rounds=120)
    key = jax.random.key(3)
    together = estimate_distances(fed, 4, key, cfg)
    for k, (i, j) in enumerate(together["pairs"]):
        alone = estimate_distances(fed, 4, key, cfg, pairs=np.array([[i, j]]))
        assert alone["best"][0] == pytest.approx(together["best"][k], abs=1e-6)
        assert alone["rounds"][0] == together["rounds"][k]


def test_disc_splits_equal_train_size_stratified():
    rng = np.random.default_rng(2)
    fed = _gauss_federation(rng, [[0, 1], [0, 1, 2, 3]], n=60)
    fed = fed.replace(mask=fed.mask.at[1, 40:].set(False))  # client 1 has 40 samples
    tr, va = disc_splits(fed, 4)
    assert np.all(np.asarray(tr.mask).sum(1) == 20)
    assert np.asarray(va.mask).sum(1).tolist() == [40, 20]


def test_distances_reject_empty_clients():
    rng = np.random.default_rng(5)
    fed = _gauss_federation(rng, [[0, 1], [0, 1]], n=20)
    fed = fed.replace(mask=fed.mask.at[1].set(False))
    with pytest.raises(DataError, match="exclude empty clients"):
        estimate_distances(fed, 4, jax.random.key(0))


def test_encoder_hook_is_applied():
    rng = np.random.default_rng(4)
    fed = _gauss_federation(rng, [[0, 1], [0, 1]], n=60)
    # A frozen encoder that erases everything: the discriminator sees identical inputs.
    out = estimate_distances(fed, 4, jax.random.key(0), DiscConfig(max_rounds=20),
                             encoder=lambda x: x[:, :2] * 0.0)
    assert out["D"].shape == (2, 2)


# ----------------------------------------------------------------------------------------- coalitions

def test_train_coalitions_singletons_equal_local_fedavg(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    train, test = train.take([0, 1, 2]), test.take([0, 1, 2])
    cfg = fedavg.Config(lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=16, local_epochs=1)
    key = jax.random.key(0)
    acc = train_coalitions(fedavg, [0, 1, 2], small_mlp, train, test, key, cfg, rounds=2)
    # client 1 alone equals a one-client FedAvg run from the same key
    solo = fedavg.init(key, small_mlp, train.x[0, :1], 1, cfg)
    one = lambda d: d.take([1]).replace(client_ids=jax.numpy.zeros((1,), jax.numpy.int32))
    for _ in range(2):
        solo, _ = fedavg.round(solo, one(train))
    assert acc[1] == pytest.approx(float(fedavg.evaluate(solo, one(test))["accuracy"][0]), abs=1e-6)
    grand = train_coalitions(fedavg, [0, 0, 0], small_mlp, train, test, key, cfg, rounds=2)
    assert grand.shape == (3,) and np.all((grand >= 0) & (grand <= 1))


# Every algorithm runs inside coalitions through the contract (``init``, ``round(state, batch)``,
# ``evaluate(state, test, train)``): 4 clients in 2 interleaved coalitions, one round of one epoch.
ASSIGNMENT = [0, 1, 0, 1]
BN_ALGORITHMS = ("fedbn", "fedpick")
# Caps that keep one round small whatever the algorithm (only fields its Config has are touched).
_CAPS = {"local_epochs": 1, "body_epochs": 1, "head_epochs": 1, "finetune_epochs": 1, "personal_epochs": 1,
         "inner_steps": 2}


def _coalition_federation(bn: bool):
    """4 clients x 40 training / 20 test samples of 8x8 synthetic images (16x16 for the BN models).
    Each coalition is then 2 clients of 40 / 20 samples: the shapes of tests/test_cli.py's runs of
    every algorithm, so the two files share their compiled rounds through the compilation cache."""
    size = 16 if bn else 8
    ds = synthetic(num_classes=10, train_per_class=16, test_per_class=8, image_size=size, seed=2)
    train = from_partition(ds.x_train, ds.y_train, [range(40 * i, 40 * i + 40) for i in range(4)])
    test = from_partition(ds.x_test, ds.y_test, [range(20 * i, 20 * i + 20) for i in range(4)])
    return train, test


def _coalition_model(name: str):
    if name in BN_ALGORITHMS:
        from pflax.models.bn import digits_cnn

        return digits_cnn(num_classes=10, width=0.0625, image_size=16)
    from pflax.models import mlp

    return mlp(10, hidden=(8,))


def _entry(name: str):
    """The registry entry (a module's ``ALGORITHM`` where the registry still holds the module)."""
    return getattr(REGISTRY[name], "ALGORITHM", REGISTRY[name])


def _tiny_config(entry):
    cfg = entry.Config()
    names = {f.name for f in dataclasses.fields(cfg)}
    return dataclasses.replace(cfg, **{k: min(getattr(cfg, k), cap) for k, cap in _CAPS.items() if k in names})


@pytest.mark.parametrize("name", ["fedavg_ft", "knnper", "ditto", "pfedme", "perfedavg", "fedprox", "fednova"])
def test_train_coalitions_runs_other_algorithms(name):
    # FedAvg-FT, kNN-Per and Per-FedAvg personalise on the training split at evaluation: the coalition's
    # own training data must reach ``evaluate`` (a TypeError before). A coalition's accuracies equal
    # one run of the algorithm on its members alone, from the same key.
    entry = _entry(name)
    train, test = _coalition_federation(False)
    model, cfg, key = _coalition_model(name), _tiny_config(entry), jax.random.PRNGKey(0)
    acc = train_coalitions(entry, ASSIGNMENT, model, train, test, key, cfg, rounds=1)
    assert acc.shape == (4,) and np.all(np.isfinite(acc)) and np.all((acc >= 0) & (acc <= 1))
    members = [0, 2]
    own = lambda d: d.take(members).replace(client_ids=jax.numpy.arange(2, dtype=jax.numpy.int32))
    state = entry.init(key, model, train.x[0, :1], 2, cfg)
    state, _ = entry.round(state, own(train))
    expected = np.asarray(entry.evaluate(state, own(test), own(train))["accuracy"])
    np.testing.assert_allclose(acc[members], expected, atol=1e-6)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in BN_ALGORITHMS else n
                                  for n in sorted(REGISTRY)])  # the BN CNNs compile for ~10 s each
def test_train_coalitions_every_registry_algorithm(name):
    module = importlib.import_module(f"pflax.algorithms.{name}")  # a module works as well as its entry
    train, test = _coalition_federation(name in BN_ALGORITHMS)
    acc = train_coalitions(module, ASSIGNMENT, _coalition_model(name), train, test, jax.random.PRNGKey(0),
                           _tiny_config(module), rounds=1)
    assert acc.shape == (4,) and np.all(np.isfinite(acc)) and np.all((acc >= 0) & (acc <= 1))


# --------------------------------------------------------------------------------------------- setups

def test_label_shift_partition_synthetic():
    labels = np.repeat(np.arange(10), 700)
    q = np.concatenate([np.ones(10), np.full(10, math.exp(-5))])
    train, test = label_shift_partition(labels, quantity=q, seed=0)
    assert [len(t) for t in test] == [35] * 20
    all_idx = np.concatenate(train + test)
    assert np.unique(all_idx).size == all_idx.size  # no sample used twice
    assert set(labels[train[0]]) <= {0, 1, 2, 3} and set(labels[test[19]]) <= {6, 7, 8, 9}


def test_fmnist_label_shift_sizes(fmnist_dir):
    ds = load_idx_dir(fmnist_dir, "fashion_mnist")
    x, y, train, test = fmnist_label_shift(ds, seed=0)
    assert x.shape[0] == 70000
    assert [len(t) for t in train] == [2100] * 10 + [14] * 10
    assert [len(t) for t in test] == [350] * 20
    assert np.unique(np.concatenate(train + test)).size == 20 * 350 + 10 * 2100 + 10 * 14
    assert np.bincount(y[train[0]], minlength=10).tolist() == [300, 600, 600, 600] + [0] * 6
    assert abs(float(x.mean()) ) < 0.05  # FedCollab's FMNIST normalisation centres the pixels
    again = fmnist_label_shift(ds, seed=0)[2]
    assert all(np.array_equal(a, b) for a, b in zip(train, again))


def test_rotation_and_label_permutation():
    img = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype(np.float32)
    assert np.array_equal(rotate_symmetric(img, 0.0), img)
    assert np.allclose(rotate_symmetric(img, 90.0), np.rot90(img, k=1, axes=(1, 2)))
    y = np.arange(20)
    for g in range(4):
        assert sorted(permute_labels(y, g).tolist()) == list(range(20))  # a permutation
    assert permute_labels(y, 1)[:6].tolist() == [5, 4, 3, 2, 1, 0]
    assert permute_labels(y, 3)[:6].tolist() == [14, 15, 16, 17, 18, 19]
    assert (permute_labels(y, 0) == permute_labels(y, 2)).sum() == 0
