"""Feature statistics, aggregation and the PyTorch-equivalent optimiser against numpy references."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from pflax.algorithms.fedpac.statistics import fedpac_statistics
from pflax.core import aggregate, stats
from pflax.core.optim import freeze, pytorch_sgd


def numpy_fedpac_stats(f, y, mask, k):
    f, y = f[mask], y[mask]
    n = len(y)
    v, h = 0.0, np.zeros((k, f.shape[1]))
    for c in range(k):
        fc = f[y == c]
        if len(fc) == 0:
            continue
        p = len(fc) / n
        mu = fc.mean(0)
        s = (np.linalg.norm(fc, axis=1) ** 2).mean()
        v += p * s - p**2 * (mu @ mu)
        h[c] = p * mu
    return (v / n if n else 0.0), h


@pytest.mark.parametrize("seed", range(5))
def test_fedpac_statistics_match_numpy(seed):
    rng = np.random.default_rng(seed)
    n, d, k = 40, 6, 5
    f = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k - 1, n)  # class k-1 absent
    mask = rng.random(n) < 0.8
    s = stats.class_sums(jnp.asarray(f), jnp.asarray(y), jnp.asarray(mask), k)
    out = fedpac_statistics(s)
    v_ref, h_ref = numpy_fedpac_stats(f, y, mask, k)
    np.testing.assert_allclose(float(out.v), v_ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.h), h_ref, rtol=1e-4, atol=1e-6)
    assert float(out.n) == mask.sum()
    means, present = stats.class_means(s)
    for c in range(k):
        sel = mask & (y == c)
        assert bool(present[c]) == bool(sel.any())
        np.testing.assert_allclose(np.asarray(means[c]), f[sel].mean(0) if sel.any() else 0.0, rtol=1e-4, atol=1e-6)


def test_empty_client_statistics_are_zero_not_nan():
    s = stats.class_sums(jnp.ones((5, 3)), jnp.zeros(5, jnp.int32), jnp.zeros(5, bool), 4)
    out = fedpac_statistics(s)
    assert float(out.v) == 0.0 and float(out.n) == 0.0
    assert np.all(np.asarray(out.h) == 0)
    means, present = stats.class_means(s)
    assert not np.any(np.asarray(present)) and np.all(np.isfinite(np.asarray(means)))


def test_variance_is_nonnegative_and_matches_definition():
    rng = np.random.default_rng(7)
    f = rng.normal(size=(100, 4)).astype(np.float32) + 3
    y = rng.integers(0, 3, 100)
    out = fedpac_statistics(stats.class_sums(jnp.asarray(f), jnp.asarray(y), jnp.ones(100, bool), 3))
    assert float(out.v) >= 0


def test_centroid_aggregation_is_count_weighted_and_keeps_missing_classes():
    means = jnp.asarray([[[1.0, 0.0], [0.0, 0.0], [5.0, 5.0]], [[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])
    counts = jnp.asarray([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    prev = jnp.asarray([[9.0, 9.0], [7.0, 7.0], [8.0, 8.0]])
    c, valid = aggregate.aggregate_centroids(means, counts, prev, jnp.array([False, True, False]))
    np.testing.assert_allclose(np.asarray(c), [[2.5, 0.0], [7.0, 7.0], [5.0, 5.0]])
    np.testing.assert_array_equal(np.asarray(valid), [True, True, True])


@settings(max_examples=40, deadline=None)
@given(
    weights=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_weighted_mean_properties(weights, seed):
    rng = np.random.default_rng(seed)
    given_w = np.asarray(weights, np.float32)
    x = rng.normal(size=(len(given_w), 3)).astype(np.float32)
    out = np.asarray(aggregate.weighted_mean({"a": jnp.asarray(x)}, jnp.asarray(given_w), fallback={"a": jnp.full(3, 42.0)})["a"])
    # Documented: subnormal weights (< 1.2e-38, which XLA flushes to zero) count as zero.
    w = np.where(given_w < np.finfo(np.float32).tiny, np.float32(0), given_w)
    if w.sum() == 0:
        np.testing.assert_array_equal(out, 42.0)  # no weight: the fallback, never NaN
        return
    np.testing.assert_allclose(out, (w[:, None] * x).sum(0) / w.sum(), rtol=1e-4, atol=1e-4)
    # a convex combination stays inside the per-coordinate hull of the participants
    support = w > 0
    assert np.all(out >= x[support].min(0) - 1e-4) and np.all(out <= x[support].max(0) + 1e-4)
    perm = rng.permutation(len(w))
    out_perm = np.asarray(aggregate.weighted_mean({"a": jnp.asarray(x[perm])}, jnp.asarray(given_w[perm]))["a"])
    np.testing.assert_allclose(out, out_perm, rtol=1e-4, atol=1e-5)


def test_subnormal_weights_count_as_zero():
    # Hypothesis found [1.4e-45]: XLA flushes subnormals, so such a weight must be treated as none at all
    # (the fallback), and next to a normal weight it must not count either.
    x = jnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    tiny = np.float32(1.401298464324817e-45)
    fallback = {"a": jnp.full(2, 42.0)}
    alone = aggregate.weighted_mean({"a": x}, jnp.asarray([tiny, 0.0]), fallback=fallback)["a"]
    np.testing.assert_array_equal(np.asarray(alone), [42.0, 42.0])
    beside = aggregate.weighted_mean({"a": x}, jnp.asarray([tiny, 2.0]), fallback=fallback)["a"]
    np.testing.assert_array_equal(np.asarray(beside), [3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(aggregate.normalized_weights(jnp.asarray([tiny, 2.0]))), [0.0, 1.0])
    term = aggregate.grouped_term(x, jnp.asarray([tiny, 2.0]))
    np.testing.assert_array_equal(np.asarray(term["weight"]), [0.0, 2.0])


@settings(max_examples=40, deadline=None)
@given(
    clients=st.integers(0, 7),
    groups=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    sparsity=st.floats(0, 1),
)
def test_grouped_terms_summed_give_per_group_weighted_means(clients, groups, seed, sparsity):
    """Summing each client's grouped_term and dividing (grouped_means) is, group by group, the weighted
    mean of the clients' trees; a group nobody weighs keeps its fallback exactly."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(clients, groups, 3)).astype(np.float32)  # client i's tree for group j
    w = rng.uniform(0, 10, size=(clients, groups)).astype(np.float32)
    w[rng.random((clients, groups)) < sparsity] = 0.0  # some groups get no weight at all
    fallback = rng.normal(size=(groups, 3)).astype(np.float32)
    total = {"sum": jnp.zeros((groups, 3)), "weight": jnp.zeros((groups,))}
    for i in range(clients):
        term = aggregate.grouped_term(jnp.asarray(x[i]), jnp.asarray(w[i]))
        total = jax.tree.map(jnp.add, total, term)
    out = np.asarray(aggregate.grouped_means(total, jnp.asarray(fallback)))
    for j in range(groups):
        if w[:, j].sum() == 0:
            np.testing.assert_array_equal(out[j], fallback[j])
        else:
            want = np.asarray(aggregate.weighted_mean(jnp.asarray(x[:, j]), jnp.asarray(w[:, j])))
            np.testing.assert_allclose(out[j], want, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), m=st.integers(1, 6))
def test_mixing_rows_are_convex_combinations(seed, m):
    rng = np.random.default_rng(seed)
    mix = rng.random((m, m)).astype(np.float32)
    mix /= mix.sum(1, keepdims=True)
    x = rng.normal(size=(m, 4)).astype(np.float32)
    out = np.asarray(aggregate.mix(jnp.asarray(x), jnp.asarray(mix)))
    np.testing.assert_allclose(out, mix @ x, rtol=1e-4, atol=1e-5)


def test_pytorch_sgd_matches_reference_formula():
    lr, mu, wd = 0.1, 0.5, 5e-4
    opt = pytorch_sgd(lr, mu, wd)
    w = jnp.array([1.0, -2.0])
    state = opt.init(w)
    w_ref, buf = np.array([1.0, -2.0]), None
    rng = np.random.default_rng(0)
    for _ in range(5):
        g = rng.normal(size=2).astype(np.float32)
        upd, state = opt.update(jnp.asarray(g), state, w)
        w = optax.apply_updates(w, upd)
        d = g + wd * w_ref  # torch: coupled decay, then momentum (first buf = d), then step
        buf = d if buf is None else mu * buf + d
        w_ref = w_ref - lr * buf
    np.testing.assert_allclose(np.asarray(w), w_ref, rtol=1e-5)


def test_pytorch_sgd_matches_torch_if_available():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=3).astype(np.float32)
    tw = torch.nn.Parameter(torch.tensor(w0))
    topt = torch.optim.SGD([tw], lr=0.05, momentum=0.5, weight_decay=5e-4)
    opt = pytorch_sgd(0.05, 0.5, 5e-4)
    w, s = jnp.asarray(w0), opt.init(jnp.asarray(w0))
    for _ in range(6):
        g = rng.normal(size=3).astype(np.float32)
        tw.grad = torch.tensor(g)
        topt.step()
        upd, s = opt.update(jnp.asarray(g), s, w)
        w = optax.apply_updates(w, upd)
    np.testing.assert_allclose(np.asarray(w), tw.detach().numpy(), rtol=1e-6)


def test_freeze_gives_frozen_leaves_no_update_no_decay():
    opt = freeze(pytorch_sgd(0.1, 0.5, 0.1), {"a": True, "b": False})
    p = {"a": jnp.ones(2), "b": jnp.ones(2)}
    upd, _ = opt.update({"a": jnp.ones(2), "b": jnp.ones(2)}, opt.init(p), p)
    assert np.all(np.asarray(upd["b"]) == 0) and np.all(np.asarray(upd["a"]) != 0)


@pytest.mark.parametrize("bad", [dict(learning_rate=-0.1), dict(learning_rate=0.1, momentum=1.0), dict(learning_rate=0.1, weight_decay=-1)])
def test_optimizer_rejects_out_of_range(bad):
    with pytest.raises(ValueError):
        pytorch_sgd(**bad)
