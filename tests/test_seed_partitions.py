"""Partitions for FedPAC's supplementary tables (3, 6-10), the large/small quantity skew, and the result
metrics (summaries, IPR/RSD, evaluation provenance). numpy only apart from two ClientData helpers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pflax.data import (
    DataError, class_counts, concept_shift_maps, dominant_groups, fedpac_shards, fedpac_shards_sized, from_partition,
    quantity_skew, relabel, relabel_clients, rotate_clients, rotate_images, rotation_angles,
)
from pflax.suites.fedpac import (
    PATHOLOGICAL_CLASSES, ROTATION_ANGLES, concept_shift, data_scarce, dirichlet_matched, draw_sizes, imbalanced_sizes,
    pathological, pathological_class_sets, rotation_skew,
)
from pflax.metrics import EVALUATION_STAGES, evaluated_model, ipr_rsd, summarize

FAST = settings(max_examples=25, deadline=None)
GROUPS = dominant_groups(10)


def shuffled_labels(per_class: int = 400, k: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(k), per_class))


Y = shuffled_labels()


def same_partition(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, z) for x, z in zip(a, b))


def expected_s_counts(n: int, s: float, group: list[int], k: int = 10) -> np.ndarray:
    """Hand rule of spec A.7: floor(n s) over all classes, the rest over the group, remainders last."""
    row = np.zeros(k, np.int64)
    n_iid = int(np.floor(n * s))
    if n_iid:
        row += n_iid // k
        row[k - 1] += n_iid - (n_iid // k) * k
    rest = n - n_iid
    if rest:
        base = rest // len(group)
        for c in group:
            row[c] += base
        row[group[-1]] += rest - base * len(group)
    return row


# ------------------------------------------------------------------------------- sized s% core
@FAST
@given(sizes=st.lists(st.integers(1, 150), min_size=1, max_size=25), s=st.floats(0, 1),
       order_seed=st.none() | st.integers(0, 99))
def test_sized_shards_follow_the_s_rule_per_client(sizes, s, order_seed):
    clients = fedpac_shards_sized(Y, sizes, s, 10, order_seed=order_seed)
    counts = class_counts(Y, clients, 10)
    for i, n in enumerate(sizes):
        np.testing.assert_array_equal(counts[i], expected_s_counts(n, s, GROUPS[i % 5]))
    if order_seed is None and len(set(sizes)) == 1:
        assert same_partition(clients, fedpac_shards(Y, len(sizes), sizes[0], s, 10))


def test_sized_shards_order_seed_changes_samples_not_counts():
    a = fedpac_shards_sized(Y, [100] * 4, 0.2, 10, order_seed=1)
    b = fedpac_shards_sized(Y, [100] * 4, 0.2, 10, order_seed=2)
    assert not same_partition(a, b)
    np.testing.assert_array_equal(class_counts(Y, a, 10), class_counts(Y, b, 10))
    assert same_partition(a, fedpac_shards_sized(Y, [100] * 4, 0.2, 10, order_seed=1))


@pytest.mark.parametrize("sizes, match", [
    ([], "non-empty"), ([10, 0], "positive"), ([10, -1], "positive"), ([1.5], "integers"),
])
def test_sized_shards_reject_bad_sizes(sizes, match):
    with pytest.raises(DataError, match=match):
        fedpac_shards_sized(Y, sizes, 0.2, 10)


def test_sized_shards_empty_client_only_when_asked():
    clients = fedpac_shards_sized(Y, [10, 0, 5], 0.2, 10, allow_empty=True)
    assert [c.size for c in clients] == [10, 0, 5]


# ------------------------------------------------------------------------ Table 3: concept shift
@FAST
@given(num_clients=st.integers(1, 30), seed=st.integers(0, 10_000))
def test_concept_shift_maps_are_per_group_permutations(num_clients, seed):
    clients, maps = concept_shift(Y, num_clients, 60, seed=seed)
    assert maps.shape == (num_clients, 10)
    for i in range(num_clients):
        np.testing.assert_array_equal(np.sort(maps[i]), np.arange(10))
        for j in range(num_clients):
            assert np.array_equal(maps[i], maps[j]) == (i % 5 == j % 5)  # same iff same group
    assert same_partition(clients, fedpac_shards(Y, num_clients, 60, 0.2, 10))  # base = default partition
    clients2, maps2 = concept_shift(Y, num_clients, 60, seed=seed)
    assert same_partition(clients, clients2) and np.array_equal(maps, maps2)
    if num_clients >= 5:
        assert not np.array_equal(maps, concept_shift_maps(num_clients, 10, 5, seed + 1))


def test_relabel_permutes_class_counts():
    clients, maps = concept_shift(Y, 10, 100, seed=3)
    for i, c in enumerate(clients):
        before = np.bincount(Y[c], minlength=10)
        after = np.bincount(relabel(Y[c], maps[i]), minlength=10)
        np.testing.assert_array_equal(after[maps[i]], before)


def test_relabel_clients_uses_client_ids_and_keeps_padding():
    x = np.zeros((6, 2, 2, 1), np.float32)
    y = np.array([0, 1, 2, 0, 1, 2])
    data = from_partition(x, y, [np.array([0, 1, 2]), np.array([3])])
    maps = np.array([[2, 0, 1], [1, 2, 0]])
    out = relabel_clients(data, maps)
    np.testing.assert_array_equal(np.asarray(out.y), [[2, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(np.asarray(out.mask), np.asarray(data.mask))


def test_concept_shift_errors():
    with pytest.raises(DataError, match="distinct permutations"):
        concept_shift_maps(4, 2, 5)
    with pytest.raises(DataError, match="label_map"):
        relabel(np.array([0, 1]), np.array([[0, 1]]))
    with pytest.raises(DataError, match=r"labels must lie in \[0, 2\)"):
        relabel(np.array([0, 2]), np.array([1, 0]))
    with pytest.raises(DataError, match="samples_per_client"):
        concept_shift(Y, 4, 0)


# ----------------------------------------------------------------------- Table 6: imbalanced sizes
@FAST
@given(num_clients=st.integers(1, 25), seed=st.integers(0, 10_000))
def test_imbalanced_sizes_draws_from_the_table_sizes(num_clients, seed):
    y = shuffled_labels(6000)
    clients = imbalanced_sizes(y, num_clients, seed=seed)
    sizes = np.array([c.size for c in clients])
    np.testing.assert_array_equal(sizes, draw_sizes(num_clients, (300, 600, 1200), seed))
    assert set(sizes.tolist()) <= {300, 600, 1200}
    counts = class_counts(y, clients, 10)
    for i, n in enumerate(sizes):
        np.testing.assert_array_equal(counts[i], expected_s_counts(int(n), 0.2, GROUPS[i % 5]))
    assert same_partition(clients, imbalanced_sizes(y, num_clients, seed=seed))


def test_imbalanced_sizes_seeds_differ_and_use_all_sizes():
    a, b = draw_sizes(20, seed=0), draw_sizes(20, seed=1)
    assert not np.array_equal(a, b)
    assert set(draw_sizes(200, seed=0).tolist()) == {300, 600, 1200}


@pytest.mark.parametrize("choices", [(), (300, 0), (1.5, 2.0)])
def test_imbalanced_sizes_rejects_bad_choices(choices):
    with pytest.raises(DataError, match="choices"):
        imbalanced_sizes(Y, 4, choices=choices)


# -------------------------------------------------------------------------- Table 7: pathological
@FAST
@given(num_clients=st.integers(1, 20), n=st.integers(8, 60), seed=st.integers(0, 10_000),
       mode=st.sampled_from(["random", "clustered"]))
def test_pathological_class_counts_balance_and_disjointness(num_clients, n, seed, mode):
    clients, sets = pathological(Y, num_clients, n, mode=mode, seed=seed)
    counts = class_counts(Y, clients, 10)
    for i, row in enumerate(counts):
        c = PATHOLOGICAL_CLASSES[i % 5]
        assert row.sum() == n and len(sets[i]) == c
        np.testing.assert_array_equal(np.flatnonzero(row), sets[i])  # exactly its classes, all non-empty
        base = n // c
        assert sorted(row[sets[i]].tolist()) == sorted([base] * (c - 1) + [n - base * (c - 1)])
    flat = np.concatenate(clients)
    assert np.unique(flat).size == flat.size  # disjoint across clients
    if mode == "clustered":
        for i in range(num_clients):
            for j in range(num_clients):
                assert np.array_equal(sets[i], sets[j]) == (i % 5 == j % 5)
    again = pathological(Y, num_clients, n, mode=mode, seed=seed)
    assert same_partition(clients, again[0]) and same_partition(sets, again[1])


def test_pathological_seeds_differ_and_random_sets_vary_inside_groups():
    a, sa = pathological(Y, 20, 60, mode="random", seed=0)
    b, sb = pathological(Y, 20, 60, mode="random", seed=1)
    assert not same_partition(sa, sb) and not same_partition(a, b)
    # random mode: clients of one group (same class count) need not share the class set
    assert any(not np.array_equal(sa[g], sa[g + 5]) for g in range(15))
    ca, _ = pathological(Y, 20, 60, mode="clustered", seed=0)
    cb, _ = pathological(Y, 20, 60, mode="clustered", seed=1)
    assert not same_partition(ca, cb)


def test_pathological_table7_sizes_and_matching_test_split():
    y_train, y_test = shuffled_labels(5000), shuffled_labels(1000, seed=1)
    train, sets = pathological(y_train, 20, 600, mode="clustered", seed=0)
    per_class = class_counts(y_train, train, 10)
    for i, c in enumerate([3, 3, 5, 5, 8] * 4):
        assert set(per_class[i][per_class[i] > 0].tolist()) == {600 // c}  # 200 / 120 / 75 each
    test, test_sets = pathological(y_test, 20, 300, class_sets=sets, disjoint=False, seed=1)
    assert same_partition(sets, test_sets)
    te = class_counts(y_test, test, 10)
    np.testing.assert_array_equal(te > 0, per_class > 0)
    assert all(np.unique(c).size == c.size for c in test)  # no repeats inside a client
    with pytest.raises(DataError, match="exhausted"):
        pathological(y_test, 20, 300, class_sets=sets, disjoint=True)


def test_pathological_table7_is_the_generic_partition_with_the_table_settings():
    from pflax import data

    for mode in ("random", "clustered"):
        table, table_sets = pathological(Y, 20, 60, mode=mode, seed=3)
        generic, generic_sets = data.pathological(Y, 20, 60, PATHOLOGICAL_CLASSES, mode, seed=3)
        assert same_partition(table, generic) and same_partition(table_sets, generic_sets)
    with pytest.raises(DataError, match="classes_per_group"):
        data.pathological(Y, 4, 60)
    train, test = dirichlet_matched(Y, Y[:500], seed=2)
    generic_train, generic_test = data.dirichlet_matched(Y, Y[:500], 100, 1.0, 2)
    assert same_partition(train, generic_train) and same_partition(test, generic_test)


def test_pathological_errors():
    with pytest.raises(DataError, match="mode"):
        pathological(Y, 5, 60, mode="iid")
    with pytest.raises(DataError, match="cannot cover 8 classes"):
        pathological(Y, 5, 7)
    with pytest.raises(DataError, match="class_sets has 1 entries"):
        pathological(Y, 2, 60, class_sets=[[0, 1]])
    with pytest.raises(DataError, match="distinct classes"):
        pathological(Y, 1, 60, class_sets=[[0, 0, 1]])
    with pytest.raises(DataError, match="pairwise different"):
        pathological_class_sets(2, (3, 3), "clustered", num_classes=3)
    with pytest.raises(DataError, match="classes_per_group"):
        pathological_class_sets(2, (3, 11), "random", num_classes=10)


# ----------------------------------------------------------------------------- Table 8: Dirichlet
@FAST
@given(num_clients=st.integers(1, 30), beta=st.floats(0.1, 10), seed=st.integers(0, 10_000))
def test_dirichlet_matched_partitions_train_and_test(num_clients, beta, seed):
    y_train, y_test = shuffled_labels(200), shuffled_labels(40, seed=1)
    train, test = dirichlet_matched(y_train, y_test, num_clients, beta, seed, min_size=1, min_test_size=0)
    np.testing.assert_array_equal(np.sort(np.concatenate(train)), np.arange(y_train.size))  # each sample once
    np.testing.assert_array_equal(np.sort(np.concatenate(test)), np.arange(y_test.size))
    assert min(c.size for c in train) >= 1
    again = dirichlet_matched(y_train, y_test, num_clients, beta, seed, min_size=1, min_test_size=0)
    assert same_partition(train, again[0]) and same_partition(test, again[1])
    # the test split never triggers a redraw here, so the train split is the same without y_test
    assert same_partition(train, dirichlet_matched(y_train, None, num_clients, beta, seed, min_size=1))


def test_dirichlet_table8_defaults_test_follows_train_and_seeds_differ():
    y_train, y_test = shuffled_labels(6000), shuffled_labels(1000, seed=1)
    train, test = dirichlet_matched(y_train, y_test)  # 100 clients, beta = 1, min 10 train / 1 test
    assert len(train) == 100 and min(c.size for c in train) >= 10 and min(c.size for c in test) >= 1
    tr, te = class_counts(y_train, train, 10), class_counts(y_test, test, 10)
    p_tr, p_te = tr / tr.sum(1, keepdims=True), te / te.sum(1, keepdims=True)
    assert np.corrcoef(p_tr.ravel(), p_te.ravel())[0, 1] > 0.8
    other = dirichlet_matched(y_train, None, seed=1)
    assert not same_partition(train, other)


@pytest.mark.parametrize("kwargs, match", [
    ({"beta": 0.0}, "beta"), ({"beta": -1.0}, "beta"), ({"beta": float("nan")}, "beta"),
    ({"min_size": 100}, "need more data"), ({"num_clients": 0}, "num_clients"), ({"min_size": -1}, "min_size"),
])
def test_dirichlet_matched_errors(kwargs, match):
    with pytest.raises(DataError, match=match):
        dirichlet_matched(shuffled_labels(10), None, **{"num_clients": 10, **kwargs})


def test_dirichlet_matched_gives_up_with_a_clear_error():
    with pytest.raises(DataError, match="could not draw"):
        dirichlet_matched(shuffled_labels(3), None, num_clients=10, beta=0.01, min_size=3, max_tries=3)


# ------------------------------------------------------------------------- Table 9: data scarcity
def test_data_scarce_table9_counts_and_wrap():
    y = shuffled_labels(5000)  # CIFAR-10 train: 50,000 samples
    clients = data_scarce(y, start_cursor=2000)
    assert len(clients) == 1000 and all(c.size == 50 for c in clients)
    counts = class_counts(y, clients, 10)
    for i in (0, 1, 7, 999):
        g = GROUPS[i % 5]
        expected = np.ones(10, np.int64)
        expected[g] += [13, 13, 14]
        np.testing.assert_array_equal(counts[i], expected)
    assert same_partition(clients, fedpac_shards(y, 1000, 50, 0.2, 10, start_cursor=2000))
    flat = np.concatenate(clients)
    assert np.unique(flat).size < flat.size  # official wrap-around re-uses samples
    with pytest.raises(DataError, match="exhausted"):
        data_scarce(y, start_cursor=2000, wrap=False)


@FAST
@given(num_clients=st.integers(1, 60), order_seed=st.none() | st.integers(0, 1000))
def test_data_scarce_property_sizes_and_determinism(num_clients, order_seed):
    clients = data_scarce(Y, num_clients, order_seed=order_seed)
    assert all(c.size == 50 for c in clients)
    assert all(np.unique(c).size == 50 for c in clients)  # no repeats inside a client
    assert same_partition(clients, data_scarce(Y, num_clients, order_seed=order_seed))


# ------------------------------------------------------------------------ Table 10: rotation skew
@FAST
@given(num_clients=st.integers(1, 30), n=st.integers(10, 120))
def test_rotation_skew_partition_and_angles(num_clients, n):
    clients, angles = rotation_skew(Y, num_clients, n)
    np.testing.assert_array_equal(angles, [ROTATION_ANGLES[i % 5] for i in range(num_clients)])
    counts = class_counts(Y, clients, 10)
    for i in range(num_clients):
        np.testing.assert_array_equal(counts[i], expected_s_counts(n, 1.0, GROUPS[i % 5]))  # labels uniform
    assert same_partition(clients, rotation_skew(Y, num_clients, n)[0])


def test_rotation_angles_custom_and_errors():
    np.testing.assert_array_equal(rotation_angles(5, (0, 90)), [0, 90, 0, 90, 0])
    with pytest.raises(DataError, match="angles"):
        rotation_angles(3, ())
    with pytest.raises(DataError, match="angles"):
        rotation_angles(3, (0.0, float("inf")))


def test_rotate_images_right_angles_are_exact():
    rng = np.random.default_rng(0)
    img = rng.normal(size=(3, 6, 6)).astype(np.float32)
    for interp in ("nearest", "bilinear"):
        np.testing.assert_allclose(rotate_images(img, 0, interpolation=interp), img, atol=1e-6)
        rot = lambda deg: rotate_images(img, deg, interpolation=interp)
        np.testing.assert_allclose(rot(90), np.rot90(img, 1, axes=(1, 2)), atol=1e-5)
        np.testing.assert_allclose(rotate_images(img, 180, interpolation=interp), img[:, ::-1, ::-1], atol=1e-5)
        np.testing.assert_allclose(rot(-90), np.rot90(img, -1, axes=(1, 2)), atol=1e-5)
        np.testing.assert_allclose(rotate_images(img, 360, interpolation=interp), img, atol=1e-5)
    nhwc = rng.normal(size=(2, 5, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(rotate_images(nhwc, 90), np.rot90(nhwc, 1, axes=(1, 2)), atol=1e-6)


def test_rotate_images_counter_clockwise_and_fill():
    img = np.zeros((1, 5, 5), np.float32)
    img[0, 2, 4] = 1.0  # a pixel right of the centre
    out = rotate_images(img, 90)
    assert out[0, 0, 2] == 1.0  # counter-clockwise: right of centre -> above centre
    ones = np.ones((1, 8, 8), np.float32)
    turned = rotate_images(ones, 45, fill=-2.0)
    assert turned[0, 0, 0] == -2.0 and turned[0, 4, 4] == 1.0  # corners come from outside the image
    assert rotate_images(ones - 1.5, 45)[0, 0, 0] == -0.5  # default fill: the image's minimum (background)


@FAST
@given(degrees=st.floats(-720, 720), seed=st.integers(0, 1000), interp=st.sampled_from(["nearest", "bilinear"]))
def test_rotate_images_property_shape_range_purity(degrees, seed, interp):
    x = np.random.default_rng(seed).uniform(-1, 1, size=(2, 7, 9, 2)).astype(np.float32)
    copy = x.copy()
    out = rotate_images(x, degrees, interpolation=interp)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(x, copy)  # input untouched
    lo, hi = x.min(axis=(1, 2, 3)), x.max(axis=(1, 2, 3))
    assert np.all(out.min(axis=(1, 2, 3)) >= lo - 1e-5) and np.all(out.max(axis=(1, 2, 3)) <= hi + 1e-5)
    np.testing.assert_array_equal(out, rotate_images(x, degrees, interpolation=interp))


def test_rotate_clients_uses_each_clients_angle_and_keeps_padding():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4, 4, 1)).astype(np.float32)
    data = from_partition(x, np.zeros(5, int), [np.array([0, 1, 2]), np.array([3])])
    out = rotate_clients(data, np.array([0.0, 90.0]))
    np.testing.assert_allclose(np.asarray(out.x[0]), x[:3], atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.x[1, 0]), np.rot90(x[3], 1, axes=(0, 1)), atol=1e-6)
    assert np.all(np.asarray(out.x[1, 1:]) == 0)
    with pytest.raises(DataError, match="angles"):
        rotate_clients(data, np.array([0.0]))


def test_rotate_images_errors():
    with pytest.raises(DataError, match="images"):
        rotate_images(np.zeros((4, 4)), 10)
    with pytest.raises(DataError, match="interpolation"):
        rotate_images(np.zeros((1, 4, 4)), 10, interpolation="cubic")
    with pytest.raises(DataError, match="finite"):
        rotate_images(np.zeros((1, 4, 4)), float("nan"))


# ---------------------------------------------------------------------------- large/small clients
@FAST
@given(num_clients=st.integers(1, 30), large=st.integers(2, 120), frac=st.floats(0.01, 1),
       num_large=st.none() | st.integers(0, 30))
def test_quantity_skew_sizes_and_labels(num_clients, large, frac, num_large):
    small = max(1, int(large * frac))
    num_large_eff = num_clients // 2 if num_large is None else min(num_large, num_clients)
    clients = quantity_skew(Y, large, small, num_clients, num_large_eff)
    sizes = [c.size for c in clients]
    assert sizes == [large] * num_large_eff + [small] * (num_clients - num_large_eff)
    counts = class_counts(Y, clients, 10)
    for i, n in enumerate(sizes):
        np.testing.assert_array_equal(counts[i], expected_s_counts(n, 0.2, GROUPS[i % 5]))
    assert same_partition(clients, quantity_skew(Y, large, small, num_clients, num_large_eff))


def test_quantity_skew_errors_and_empty_on_request():
    with pytest.raises(DataError, match="small"):
        quantity_skew(Y, 100, 0)
    assert [c.size for c in quantity_skew(Y, 100, 0, 4, allow_empty=True)] == [100, 100, 0, 0]
    with pytest.raises(DataError, match="must not exceed"):
        quantity_skew(Y, 10, 20)
    with pytest.raises(DataError, match="num_large"):
        quantity_skew(Y, 10, 5, 4, num_large=5)


@pytest.mark.parametrize("fn", [
    lambda y: concept_shift(y, 4, 10), lambda y: imbalanced_sizes(y, 4), lambda y: pathological(y, 4, 10),
    lambda y: dirichlet_matched(y, None, 4), lambda y: data_scarce(y, 4), lambda y: rotation_skew(y, 4, 10),
    lambda y: quantity_skew(y, 10, 5, 4),
])
@pytest.mark.parametrize("labels, match", [
    (np.zeros((2, 2), int), "1-D"), (np.zeros(0, int), "empty"), (np.array([0.0, 1.0]), "integers"),
    (np.array([-1, 0, 1]), "lie in"),
])
def test_every_partition_validates_labels(fn, labels, match):
    with pytest.raises(DataError, match=match):
        fn(labels)


# ------------------------------------------------------------------------------------- metrics
def test_summarize_hand_computed():
    out = summarize(np.array([0.2, 0.4, 0.6, 0.8, 1.0]), np.array([1, 1, 1, 1, 4]))
    assert out["num_clients"] == 5
    assert out["mean"] == pytest.approx(60.0)
    assert out["weighted_mean"] == pytest.approx(600.0 / 8)  # (20+40+60+80+4*100)/8 = 75
    assert out["std"] == pytest.approx(math.sqrt(800.0))  # deviations -40,-20,0,20,40 (population std)
    assert out["worst"] == pytest.approx(20.0) and out["best"] == pytest.approx(100.0)
    assert out["bottom_decile"] == pytest.approx(20.0)  # ceil(0.5) = 1 client
    assert "ipr" not in out


@pytest.mark.parametrize("num_clients, expected", [(20, (0.0 + 5.0) / 2), (11, 5.0 / 2), (100, np.mean(np.arange(10)))])
def test_bottom_decile_counts_ceil_tenth_of_clients(num_clients, expected):
    step = 5.0 if num_clients <= 20 else 1.0
    acc = np.random.default_rng(0).permutation(np.arange(num_clients) * step / 100.0)
    assert summarize(acc)["bottom_decile"] == pytest.approx(expected)


def test_ipr_rsd_hand_computed():
    fl, local = np.array([0.8, 0.6, 0.5, 0.9]), np.array([0.7, 0.6, 0.6, 0.5])
    # gains in %: +10, 0, -10, +40 -> IPR counts strictly positive gains: 2 of 4
    out = summarize(fl, None, local)
    assert out["ipr"] == pytest.approx(50.0)
    assert out["mean_gain"] == pytest.approx(10.0)
    assert out["rsd"] == pytest.approx(math.sqrt((0 + 100 + 400 + 900) / 4))  # deviations 0,-10,-20,30
    assert out["local_only_mean"] == pytest.approx(60.0)
    assert (out["ipr"], out["rsd"]) == pytest.approx(ipr_rsd(fl, local))
    assert ipr_rsd(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == (0.0, 0.0)  # ties do not count


def test_summarize_keeps_the_old_sizes_keyword_and_positional_form():
    acc, n = np.array([0.5, 1.0]), np.array([3, 1])
    assert summarize(acc, sizes=n) == summarize(acc, n)
    assert summarize(acc, sizes=n)["weighted_mean"] == pytest.approx(62.5)
    assert summarize(acc, np.zeros(2))["weighted_mean"] == 0.0
    with pytest.raises(TypeError, match="once"):
        summarize(acc, n, sizes=n)


@pytest.mark.parametrize("args, match", [
    (([],), "non-empty"), (([[0.5]],), "1-D"), (([0.5, 85.0],), "fractions"), (([0.5, float("nan")],), "NaN"),
    (([0.5, 0.6], [1]), "one count per client"), (([0.5, 0.6], [1, -1]), "non-negative"),
    (([0.5, 0.6], None, [0.5]), "one value per client"), (([0.5, 0.6], None, [0.5, 60.0]), "local_only_accuracy"),
])
def test_summarize_rejects_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        summarize(*[None if a is None else np.asarray(a, float) for a in args])


def test_evaluated_model_record():
    rec = evaluated_model("personalised: global body + combined head", 200, total_rounds=200, fine_tune_epochs=0)
    assert rec == {
        "model": "personalised: global body + combined head", "round": 200, "stage": "after_aggregation",
        "stage_meaning": EVALUATION_STAGES["after_aggregation"], "clients": "all", "split": "test",
        "total_rounds": 200, "fine_tune_epochs": 0,
    }
    rec = evaluated_model("global", 0, stage="after_local_training", clients="participants")
    assert rec["clients"] == "participants" and rec["round"] == 0
    for kwargs, match in [({"model": ""}, "model"), ({"round": -1}, "round"), ({"round": 1.5}, "round"),
                          ({"stage": "end"}, "stage"), ({"clients": "some"}, "clients"),
                          ({"total_rounds": 5, "round": 10}, "total_rounds"), ({"split": ""}, "split")]:
        args = {"model": "m", "round": 1, **kwargs}
        with pytest.raises(ValueError, match=match):
            evaluated_model(**args)
    with pytest.raises(ValueError, match="overwrite"):
        evaluated_model("m", 1, **{"stage_meaning": "x"})


# ----------------------------------------------- the named partitions of FedPAC Table 6 and FedCollab's label shift
def test_client_sizes_partition_draws_each_training_size_and_keeps_the_test_size():
    from pflax.data import synthetic
    from pflax.data.federations import federate

    data = synthetic(train_per_class=300, test_per_class=100, image_size=4)
    train, test = federate(data, "client_sizes", 8, test_per_client=30, seed=3, sizes=[20, 40])
    assert np.asarray(train.sizes).tolist() == draw_sizes(8, (20, 40), seed=3).tolist()
    assert np.asarray(test.sizes).tolist() == [30] * 8
    again, _ = federate(data, "client_sizes", 8, test_per_client=30, seed=3, sizes=[20, 40])
    assert np.array_equal(np.asarray(again.y), np.asarray(train.y))
    # the label skew is FedPAC's: a client's dominant group holds most of its samples
    counts = np.bincount(np.asarray(train.y[1])[: int(train.sizes[1])], minlength=10)
    assert counts[GROUPS[1]].sum() >= 0.75 * counts.sum()
    with pytest.raises(DataError, match="whole numbers"):
        federate(data, "client_sizes", 4, sizes=[20.5])
    with pytest.raises(DataError, match="at least one size"):
        federate(data, "client_sizes", 4, sizes=[])


def test_fedcollab_label_shift_partition_has_20_clients_half_of_them_small():
    from pflax.data import synthetic
    from pflax.data.federations import federate

    data = synthetic(train_per_class=120, test_per_class=20, image_size=4)
    train, test = federate(data, "fedcollab_label_shift", 20, seed=0, decay=1.0)
    sizes = np.asarray(train.sizes)
    assert train.num_clients == test.num_clients == 20
    assert sizes[:10].min() > sizes[10:].max() > 0  # clients 10-19 keep e^-1 of their training part
    assert np.asarray(test.sizes)[:10].tolist() == np.asarray(test.sizes)[10:].tolist()  # test parts unchanged
    with pytest.raises(DataError, match="20 clients"):
        federate(data, "fedcollab_label_shift", 10)
