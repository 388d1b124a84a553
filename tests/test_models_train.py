"""Models (PyTorch-default init, conv formulations) and masked local training."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pflax.core import rng as flat_rng
from pflax.core.losses import cross_entropy, masked_mean
from pflax.core.optim import pytorch_sgd
from pflax.core.train import epoch_order, local_train
from pflax.models import conv_as_matmul, conv_native, fedpac_cnn, mlp
from pflax.models.bn import digits_cnn


def test_fedpac_cnn_shapes_and_torch_default_init():
    for dataset, shape, flat in [("fmnist", (2, 28, 28, 1), 800), ("cifar10", (2, 32, 32, 3), 576)]:
        model = fedpac_cnn(dataset)
        params = model.init(jax.random.PRNGKey(0), jnp.zeros(shape))
        z = model.features(params["body"], jnp.zeros(shape))
        assert z.shape == (2, 128)
        assert model.apply(params, jnp.zeros(shape)).shape == (2, 10)
        fc1 = params["body"]["TorchDense_0"]["kernel"]
        assert fc1.shape == (flat, 128)
        assert float(jnp.abs(fc1).max()) <= 1 / math.sqrt(flat) + 1e-7
        conv0 = params["body"]["TorchConv_0"]["kernel"]
        assert float(jnp.abs(conv0).max()) <= 1 / math.sqrt(conv0.shape[0] * conv0.shape[1] * conv0.shape[2]) + 1e-7


@settings(max_examples=12, deadline=None)  # each new shape compiles jax.random's slow version
@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=4), seed=st.integers(0, 2**31 - 1),
       partitionable=st.booleans())
def test_flat_draws_equal_jax_random(shape, seed, partitionable):
    """pflax.core.rng draws flat and reshapes (fast to compile); the values must be jax.random's."""
    key = jax.random.PRNGKey(seed)
    with jax.threefry_partitionable(partitionable):
        pairs = [
            (flat_rng.uniform(key, shape, jnp.float32, -0.3, 0.7), jax.random.uniform(key, shape, jnp.float32, -0.3, 0.7)),
            (flat_rng.normal(key, shape), jax.random.normal(key, shape)),
            (flat_rng.logistic(key, shape), jax.random.logistic(key, shape)),
        ]
    for ours, theirs in pairs:
        assert ours.shape == tuple(shape) and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("make, shape", [
    (lambda: mlp(4, hidden=(16, 8)), (1, 8, 8, 1)),
    (lambda: fedpac_cnn("fmnist"), (1, 28, 28, 1)),
    (lambda: digits_cnn(num_classes=10, width=0.0625, image_size=16), (1, 16, 16, 3)),
])
def test_compiled_init_equals_eager_init(make, shape):
    model = make()
    key, x = jax.random.PRNGKey(7), jnp.zeros(shape)
    compiled, eager = model.init(key, x), model.init_eagerly(key, x)
    assert jax.tree.structure(compiled) == jax.tree.structure(eager)
    for a, b in zip(jax.tree.leaves(compiled), jax.tree.leaves(eager)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("pad", [0, 1])
@pytest.mark.usefixtures("float32_matmuls")
def test_matmul_conv_equals_native_conv(pad):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 12, 12, 4)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(5, 5, 4, 6)), jnp.float32)
    np.testing.assert_allclose(conv_as_matmul(x, k, pad), conv_native(x, k, pad), rtol=1e-4, atol=1e-4)
    g1 = jax.grad(lambda kk: conv_as_matmul(x, kk, pad).sum())(k)
    g2 = jax.grad(lambda kk: conv_native(x, kk, pad).sum())(k)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-3)


def test_epoch_order_visits_every_real_sample_once_per_epoch():
    mask = jnp.array([True] * 7 + [False] * 3)
    idx, valid = epoch_order(jax.random.PRNGKey(0), mask, epochs=2, batch_size=4)
    assert idx.shape == (6, 4)  # ceil(10 / 4) = 3 steps per epoch
    for e in range(2):
        seen = np.asarray(idx[3 * e : 3 * e + 3])[np.asarray(valid[3 * e : 3 * e + 3])]
        np.testing.assert_array_equal(np.sort(seen), np.arange(7))


def _train(x, y, mask, key, epochs=2):
    model = mlp(3, hidden=(8,))
    params = model.init(jax.random.PRNGKey(1), x[:1])

    def loss(p, b, w):
        return masked_mean(cross_entropy(model.apply(p, b["x"]), b["y"]), w)

    return local_train(params, loss, {"x": x, "y": y}, mask, key, epochs=epochs, batch_size=4, optimizer=pytorch_sgd(0.1, 0.5, 5e-4))


def test_padding_content_never_matters():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(10, 5)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 3, 10), jnp.int32)
    mask = jnp.arange(10) < 6
    garbage = x.at[6:].set(jnp.nan)
    p1, l1 = _train(x, y, mask, jax.random.PRNGKey(2))
    p2, l2 = _train(garbage, y.at[6:].set(2), mask, jax.random.PRNGKey(2))
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.isfinite(float(l2))


def test_empty_client_training_is_a_no_op():
    x = jnp.ones((8, 5))
    y = jnp.zeros(8, jnp.int32)
    model = mlp(3, hidden=(8,))
    params = model.init(jax.random.PRNGKey(1), x[:1])
    p, loss = _train(x, y, jnp.zeros(8, bool), jax.random.PRNGKey(0))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(loss) == 0.0


def test_partial_last_batch_uses_mean_over_real_samples():
    # 5 real samples, batch 4: steps see 4 then 1 real sample; compare with a manual loop
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(8, 5)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 3, 8), jnp.int32)
    mask = jnp.arange(8) < 5
    key = jax.random.PRNGKey(4)
    p, _ = _train(x, y, mask, key, epochs=1)
    model = mlp(3, hidden=(8,))
    ref = model.init(jax.random.PRNGKey(1), x[:1])
    opt = pytorch_sgd(0.1, 0.5, 5e-4)
    s = opt.init(ref)
    idx, valid = epoch_order(key, mask, 1, 4)
    for b in range(idx.shape[0]):
        sel = np.asarray(idx[b])[np.asarray(valid[b])]
        if sel.size == 0:
            continue
        g = jax.grad(lambda q: jnp.mean(cross_entropy(model.apply(q, x[sel]), y[sel])))(ref)
        u, s = opt.update(g, s, ref)
        ref = jax.tree.map(lambda a, d: a + d, ref, u)
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
