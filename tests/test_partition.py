"""Partitioners: FedPAC's s% partition against the spec, Dirichlet properties, padded client arrays."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pflax.data import DataError, class_counts, dirichlet, dominant_groups, fedpac_shards, from_partition


def balanced_labels(per_class=6000, k=10):
    return np.repeat(np.arange(k), per_class)


def test_fedpac_fmnist_counts_match_spec():
    y = balanced_labels()
    clients = fedpac_shards(y, 20, 600, 0.2, 10)
    counts = class_counts(y, clients, 10)
    groups = dominant_groups(10)
    for i, row in enumerate(counts):
        assert row.sum() == 600
        expected = np.full(10, 12)
        expected[groups[i % 5]] += 160  # 480 over 3 classes: 160 each
        np.testing.assert_array_equal(row, expected)


def test_fedpac_test_split_has_train_distribution():
    y_train, y_test = balanced_labels(6000), balanced_labels(1000)
    tr = class_counts(y_train, fedpac_shards(y_train, 20, 600, 0.2, 10), 10)
    te = class_counts(y_test, fedpac_shards(y_test, 20, 600, 0.2, 10), 10)
    np.testing.assert_array_equal(tr, te)


def test_fedpac_remainders_go_to_last_class():
    y = balanced_labels(1000)
    counts = class_counts(y, fedpac_shards(y, 5, 101, 0.25, 10), 10)
    # n_iid = 25 -> 2 per class, class 9 gets 25 - 18 = 7; rest 76 over [0,1,2]: 25, 25, 26
    assert counts[0].tolist() == [2 + 25, 2 + 25, 2 + 26, 2, 2, 2, 2, 2, 2, 7]


def test_fedpac_groups_are_i_mod_5_and_interleaved():
    y = balanced_labels()
    counts = class_counts(y, fedpac_shards(y, 10, 600, 0.2, 10), 10)
    np.testing.assert_array_equal(counts[0], counts[5])
    assert not np.array_equal(counts[0], counts[1])


def test_fedpac_wraps_around_like_the_official_code():
    y = balanced_labels(1000)
    clients = fedpac_shards(y, 20, 600, 0.2, 10)
    all_idx = np.concatenate(clients)
    assert len(np.unique(all_idx)) < len(all_idx)  # samples re-used after wrap-around
    with pytest.raises(DataError, match="exhausted"):
        fedpac_shards(y, 20, 600, 0.2, 10, wrap=False)


def test_fedpac_no_wrap_never_reuses():
    y = balanced_labels()
    clients = fedpac_shards(y, 20, 600, 0.2, 10, wrap=False)
    all_idx = np.concatenate(clients)
    assert len(np.unique(all_idx)) == len(all_idx)


def test_fedpac_is_deterministic_and_takes_consecutive_label_blocks():
    rng = np.random.default_rng(0)
    y = rng.permutation(balanced_labels(100))
    a = fedpac_shards(y, 4, 50, 0.2, 10)
    b = fedpac_shards(y, 4, 50, 0.2, 10)
    for x, z in zip(a, b):
        np.testing.assert_array_equal(x, z)


def test_emnist_groups():
    groups = dominant_groups(62)
    assert [len(g) for g in groups] == [10, 26, 26]


@pytest.mark.parametrize("s", [-0.1, 1.5])
def test_fedpac_rejects_bad_s(s):
    with pytest.raises(ValueError, match="s"):
        fedpac_shards(balanced_labels(10), 2, 10, s, 10)


@settings(max_examples=30, deadline=None)
@given(
    n_clients=st.integers(1, 30),
    n=st.integers(1, 300),
    s=st.floats(0, 1),
)
def test_fedpac_property_sizes_and_label_shares(n_clients, n, s):
    y = balanced_labels(400)
    clients = fedpac_shards(y, n_clients, n, s, 10)
    counts = class_counts(y, clients, 10)
    assert np.all(counts.sum(1) == n)
    n_iid = int(np.floor(n * s))
    groups = dominant_groups(10)
    for i, row in enumerate(counts):
        outside = np.setdiff1d(np.arange(10), groups[i % 5])
        # non-dominant classes only get the uniform share
        assert np.all(row[outside[outside != 9]] == n_iid // 10)
    for c in clients:
        assert c.min() >= 0 and c.max() < len(y)


@settings(max_examples=30, deadline=None)
@given(n_clients=st.integers(1, 20), beta=st.floats(0.05, 10), seed=st.integers(0, 1000))
def test_dirichlet_property_partition_of_the_data(n_clients, beta, seed):
    y = np.random.default_rng(seed).integers(0, 5, 500)
    clients = dirichlet(y, n_clients, beta, seed=seed)
    all_idx = np.concatenate(clients)
    np.testing.assert_array_equal(np.sort(all_idx), np.arange(500))  # each sample exactly once
    again = dirichlet(y, n_clients, beta, seed=seed)
    for a, b in zip(clients, again):
        np.testing.assert_array_equal(a, b)


def test_dirichlet_small_beta_is_skewed_large_beta_is_balanced():
    y = np.repeat(np.arange(10), 1000)
    skew = class_counts(y, dirichlet(y, 10, 0.1, seed=0), 10)
    flat = class_counts(y, dirichlet(y, 10, 100.0, seed=0), 10)
    share = lambda c: (c / np.maximum(c.sum(1, keepdims=True), 1)).max(1).mean()
    assert share(skew) > 0.4 > 0.2 > share(flat)


@pytest.mark.parametrize("beta", [0.0, -1.0])
def test_dirichlet_rejects_nonpositive_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        dirichlet(np.zeros(10, int), 2, beta)


@pytest.mark.parametrize("labels, message", [
    (np.array([0, 1, -1, 2]), r"labels must lie in \[0, 3\), found \[-1, 2\]"),
    (np.array([0.0, 1.0, 2.0]), r"labels must be integers, got float64"),
    (np.zeros((3, 2), np.int64), r"labels must be 1-D, got shape \(3, 2\)"),
    (np.array([], np.int64), r"labels is empty"),
])
def test_dirichlet_validates_labels_like_the_other_partitioners(labels, message):
    with pytest.raises(DataError, match=message):
        dirichlet(labels, num_clients=2, beta=1.0)


def test_from_partition_pads_and_masks():
    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10) % 3
    data = from_partition(x, y, [np.array([0, 1, 2]), np.array([5])])
    assert data.x.shape == (2, 3, 1)
    np.testing.assert_array_equal(np.asarray(data.mask), [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(np.asarray(data.sizes), [3, 1])
    assert float(data.x[1, 1, 0]) == 0.0
