"""The speed benchmark's port of the official FedPAC loop computes what the tuned PyTorch loop computes.

The port (benchmarks/speed/torch_official.py) keeps the official code's per-sample Python work, so a
speed ratio against it is only meaningful if that work is the same algorithm: same inputs after the
per-sample transforms, same statistics, same centroids, same head weights, and a round that leaves
every client with the aggregated body.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cvxpy")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "speed"))
import torch_official as to  # noqa: E402
import torch_reference as tr  # noqa: E402


def _clients(num, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num, n, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=(num, n))
    y[:, :10] = np.arange(10)  # every class present on every client
    return x, y


def _normalised(images_u8):
    return (images_u8.astype(np.float32) / 255.0 - to.FMNIST_MEAN[0]) / to.FMNIST_STD[0]


def test_per_sample_pipeline_yields_the_normalised_images_in_a_shuffled_order():
    x, y = _clients(1, 60)
    u8 = to.quantize_images(x[0])
    # quantisation moves a value by at most half a grey level, unless it was clipped to [0, 255]
    inside = (u8 > 0) & (u8 < 255)
    assert np.abs(_normalised(u8) - x[0, ..., 0])[inside].max() <= 0.5 / 255 / to.FMNIST_STD[0] + 1e-6
    fed = to.OfficialFedPAC(tr.make_model("fmnist"), u8[None], y)
    batches = list(fed.clients[0].loader)
    assert [b[0].shape for b in batches] == [(50, 1, 28, 28), (10, 1, 28, 28)]
    images = torch.cat([b[0] for b in batches]).numpy()[:, 0]
    labels = torch.cat([b[1] for b in batches]).numpy()
    expected = _normalised(u8)
    order = [int(np.flatnonzero((expected == img).all(axis=(1, 2)))[0]) for img in images]
    assert sorted(order) != order and sorted(order) == list(range(60))  # shuffled, each sample once
    np.testing.assert_allclose(images, expected[order], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(labels, y[0][order])


def test_statistics_and_centroids_equal_the_tuned_loop():
    x, y = _clients(1, 120, seed=1)
    u8 = to.quantize_images(x[0])
    fed = to.OfficialFedPAC(tr.make_model("fmnist"), u8[None], y)
    client = fed.clients[0]
    v, h = client.statistics()
    xt = torch.from_numpy(_normalised(u8)[:, None].copy())
    yt = torch.from_numpy(y[0].astype(np.int64))
    with torch.no_grad():
        v_ref, h_ref, mu_ref, n_ref = tr.local_statistics(client.model, xt, yt, 10, 50)
    assert float(n_ref) == client.size == 120
    np.testing.assert_allclose(v, float(v_ref), rtol=1e-4)
    np.testing.assert_allclose(h.numpy(), h_ref.numpy(), rtol=1e-4, atol=1e-6)
    means = to._class_means(to._features_by_class(client.model, client.loader, grad=True))
    np.testing.assert_allclose(torch.stack([means[k] for k in range(10)]).numpy(), mu_ref.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(client.class_sizes.numpy(), np.bincount(y[0], minlength=10))


def test_head_weights_equal_the_tuned_loops_qp_solution():
    rng = np.random.default_rng(2)
    m = 6
    base = rng.standard_normal((10, 16)).astype(np.float32)
    hs = [torch.tensor(base + 0.05 * rng.standard_normal((10, 16)).astype(np.float32)) for _ in range(m)]
    variances = [float(a) for a in rng.uniform(0.5, 2.0, m)]
    official = to.head_weights(variances, hs)  # spread weights: no client takes more than 0.6
    tuned = tr.combination_weights(np.array(variances), np.stack([h.numpy() for h in hs]).astype(np.float64))
    for alpha, ref in zip(official, tuned):
        assert alpha is not None
        alpha = np.array(alpha, dtype=np.float64)
        assert alpha.min() >= 0.0 and (alpha[alpha > 0] > 1e-3).all()
        np.testing.assert_allclose(alpha / alpha.sum(), ref, atol=3e-3)


def test_a_round_leaves_every_client_with_the_aggregated_body_and_combined_heads():
    x, y = _clients(3, 100, seed=3)
    fed = to.OfficialFedPAC(tr.make_model("fmnist"), to.quantize_images(x), y)
    for _ in range(2):  # round 1 exercises the per-sample alignment targets
        fed.round_()
    states = [c.model.state_dict() for c in fed.clients]
    for key in states[0]:
        assert all(torch.isfinite(s[key]).all() for s in states)
        if not key.startswith("fc2."):
            for s in states[1:]:
                torch.testing.assert_close(s[key], states[0][key], rtol=0, atol=0)
    assert set(fed.clients[0].global_centroids) == set(range(10))
    assert fed.round == 2
    # the heads differ per client: each is its own convex combination of the trained heads
    assert not torch.equal(states[0]["fc2.weight"], states[1]["fc2.weight"])
