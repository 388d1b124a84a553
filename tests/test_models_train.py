"""Models (PyTorch-default init, conv formulations) and masked local training."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pflax.core import rng as flat_rng
from pflax.core.losses import cross_entropy, masked_mean
from pflax.core.optim import pytorch_sgd
from pflax.core.train import epoch_order, local_train, sgd_steps_stateful
from pflax.models import conv_as_matmul, conv_native, fedpac_cnn, max_pool2, mlp
from pflax.models.bn import digits_cnn


def test_fedpac_cnn_shapes_and_torch_default_init():
    for dataset, shape, flat in [("fmnist", (2, 28, 28, 1), 800), ("cifar10", (2, 32, 32, 3), 576)]:
        model = fedpac_cnn(dataset)
        params = model.init(jax.random.PRNGKey(0), jnp.zeros(shape))
        z = jax.jit(model.features)(params["body"], jnp.zeros(shape))
        assert z.shape == (2, 128)
        assert jax.jit(model.apply)(params, jnp.zeros(shape)).shape == (2, 10)
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


@pytest.mark.parametrize("pad", [0, 1, 2])
@pytest.mark.parametrize("size", [(12, 12), (9, 11)])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.usefixtures("float32_matmuls")
def test_matmul_conv_equals_native_conv(pad, size, stride):
    """Forward, input gradient and kernel gradient, against XLA's convolution. Stride 1 runs the
    hand-written backward (odd sizes and paddings check its shifted sums at the borders); stride 2
    the autodiff path."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, *size, 4)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(5, 5, 4, 6)), jnp.float32)
    out, vjp = jax.vjp(lambda xx, kk: conv_as_matmul(xx, kk, pad, stride), x, k)
    ref, vjp_ref = jax.vjp(lambda xx, kk: conv_native(xx, kk, pad, stride), x, k)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    g = jnp.asarray(rng.normal(size=ref.shape), jnp.float32)
    for got, want in zip(vjp(g), vjp_ref(g)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_matmul_conv_input_gradient_counts_windows():
    """With unit kernel and output gradient, each pixel's gradient is the number of windows that
    read it: borders of the stride-1 shifted sums, and a row/column no stride-2 window reaches."""
    k = jnp.ones((5, 5, 1, 1))
    gx = jax.grad(lambda xx: conv_as_matmul(xx, k, 0).sum())(jnp.ones((1, 7, 7, 1)))
    counts = np.array([1, 2, 3, 3, 3, 2, 1], np.float32)  # 3 windows per axis, starting at 0, 1, 2
    np.testing.assert_array_equal(gx[0, :, :, 0], np.outer(counts, counts))
    gx = jax.grad(lambda xx: conv_as_matmul(xx, k, 1).sum())(jnp.ones((1, 5, 5, 1)))
    counts = np.array([2, 3, 3, 3, 2], np.float32)  # padded to 7: windows at 0, 1, 2 of the padded axis
    np.testing.assert_array_equal(gx[0, :, :, 0], np.outer(counts, counts))
    gx = jax.grad(lambda xx: conv_as_matmul(xx, k, 0, 2).sum())(jnp.ones((1, 8, 8, 1)))
    counts = np.array([1, 1, 2, 2, 2, 1, 1, 0], np.float32)  # windows at 0 and 2; index 7 unreached
    np.testing.assert_array_equal(gx[0, :, :, 0], np.outer(counts, counts))


def test_max_pool_gradient_goes_to_the_first_maximum_like_pytorch():
    x = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 3.0, 4.0]])[None, :, :, None]
    gx = jax.grad(lambda v: max_pool2(v).sum())(x)[0, :, :, 0]
    # One 2x2 window (the odd row and column are dropped): four tied maxima, the first takes it all.
    np.testing.assert_array_equal(gx, [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
    nan_window = jnp.array([[0.0, jnp.nan], [jnp.nan, 5.0]])[None, :, :, None]
    np.testing.assert_array_equal(jax.grad(lambda v: max_pool2(v).sum())(nan_window)[0, :, :, 0], [[0, 1], [0, 0]])


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 9), st.integers(2, 9), st.integers(0, 2**31 - 1))
def test_max_pool_matches_reduce_window_without_ties(h, w, seed):
    """Random (tie-free) inputs: values and gradients equal XLA's reduce-window max-pool."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(2, h, w, 3)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(2, h // 2, w // 2, 3)), jnp.float32)

    def reference(v):
        return jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    @jax.jit  # one program per shape instead of one per operation
    def values_and_gradients(v, cotangent):
        out, vjp = jax.vjp(max_pool2, v)
        ref, vjp_ref = jax.vjp(reference, v)
        return out, ref, vjp(cotangent)[0], vjp_ref(cotangent)[0]

    out, ref, grad, grad_ref = values_and_gradients(x, g)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(grad, grad_ref)


def test_max_pool_gradient_matches_torch_if_available():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = np.round(rng.normal(size=(2, 3, 7, 6)), 0).astype(np.float32)  # rounded: many ties
    tx = torch.tensor(x, requires_grad=True)
    g = rng.normal(size=(2, 3, 3, 3)).astype(np.float32)
    torch.nn.functional.max_pool2d(tx, 2).backward(torch.tensor(g))
    nhwc = jnp.asarray(x.transpose(0, 2, 3, 1))
    gx = jax.vjp(max_pool2, nhwc)[1](jnp.asarray(g.transpose(0, 2, 3, 1)))[0]
    np.testing.assert_array_equal(np.asarray(gx).transpose(0, 3, 1, 2), tx.grad.numpy())


@pytest.mark.usefixtures("float32_matmuls")
def test_cnn_hessian_vector_product_forward_over_reverse_equals_reverse_over_reverse():
    """The CNN's custom backward passes still allow ``jvp`` of a ``grad`` (Per-FedAvg HF's
    Hessian-vector product), and it agrees with differentiating the gradient in reverse mode."""
    model = fedpac_cnn("fmnist")
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 28, 28, 1))
    y = jnp.arange(4) % 10
    params = model.init(jax.random.PRNGKey(1), x[:1])
    loss = lambda p: masked_mean(cross_entropy(model.apply(p, x), y), jnp.ones(4))
    v = jax.tree.map(lambda a: jnp.full_like(a, 0.01), params)
    # Compiled, as Per-FedAvg runs it: op by op, the two second-order passes took 20 s of small compilations.
    forward = jax.jit(lambda p: jax.jvp(jax.grad(loss), (p,), (v,))[1])(params)
    reverse = jax.jit(jax.grad(lambda p: sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(jax.grad(loss)(p)), jax.tree.leaves(v)))))(params)
    for a, b in zip(jax.tree.leaves(forward), jax.tree.leaves(reverse)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


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


def _counting_loss(calls: list):
    """A squared-error loss that records, from inside the compiled program, each time it is evaluated, and
    counts the steps taken in its model state."""
    def loss(p, state, batch, w, key):
        jax.debug.callback(lambda: calls.append(1))
        return masked_mean((p - batch["x"]) ** 2, w), state + 1
    return loss


def test_a_minibatch_without_real_samples_is_skipped_not_computed():
    """A client padded to the largest one walks its plan; the steps with no real sample are skipped, so
    one client at a time (``lax.map``, the CPU default) pays only for its real minibatches."""
    data = {"x": jnp.array([1.0, 3.0, 5.0])}
    indices = jnp.array([[0], [1], [2], [0]])
    valid = jnp.array([[True], [False], [True], [False]])  # two real minibatches of four
    calls = []
    run = jax.jit(lambda p: sgd_steps_stateful(p, 0, _counting_loss(calls), data, indices, valid,
                                               optax.sgd(0.5), None))
    p, steps_taken, loss = jax.block_until_ready(run(0.0))
    assert len(calls) == 2  # computing the empty steps and discarding them would count 4
    # each step sets p to its sample (lr 0.5 on a squared error): 0 -> 1 -> 5, losses 1 and 16, whose mean
    # is over the real steps only
    assert (float(p), int(steps_taken), float(loss)) == (5.0, 2, 8.5)


def test_skipping_empty_minibatches_agrees_under_vmap_and_map():
    """Under ``vmap`` the skip is per client (both branches computed, one selected); the result is the
    same as one client at a time, for clients with and without empty minibatches."""
    data = {"x": jnp.array([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]])}
    indices = jnp.array([[[0], [1], [2]], [[2], [1], [0]]])
    valid = jnp.array([[[True], [False], [True]], [[True], [True], [True]]])

    def one(x, idx, ok):
        return sgd_steps_stateful(0.0, 0, _counting_loss([]), {"x": x}, idx, ok, optax.sgd(0.5), None)

    mapped = jax.lax.map(lambda args: one(*args), (data["x"], indices, valid))
    vmapped = jax.vmap(one)(data["x"], indices, valid)
    for a, b in zip(mapped, vmapped):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(mapped[1]).tolist() == [2, 3]


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


@pytest.mark.usefixtures("float32_matmuls")
def test_fmnist_cnn_gradients_match_pytorch_on_images_with_blank_regions():
    """pflax's FMNIST CNN and the benchmark's PyTorch model, same parameters, same images: equal loss,
    equal gradients for every parameter and for the input. Half of each image is blank, so max-pool
    windows tie there; the parameter gradients do not depend on which tied entry gets the gradient
    (their patches are equal too), but the input gradient does: it matches PyTorch only because
    max_pool2 sends it to the first maximum (with JAX's even split it does not; checked by hand)."""
    torch = pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "speed"))
    import torch_reference as tr

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(6, 28, 28, 1)).astype(np.float32)
    x[:, :, 14:] = 0.0  # blank right half: equal activations, tied pooling windows
    y = np.arange(6) % 10
    model = fedpac_cnn("fmnist")
    params = model.init(jax.random.PRNGKey(3), jnp.asarray(x[:1]))
    loss_fn = lambda p, xx: masked_mean(cross_entropy(model.apply(p, xx), jnp.asarray(y)), jnp.ones(6))
    loss, (grads, grad_x) = jax.value_and_grad(loss_fn, argnums=(0, 1))(params, jnp.asarray(x))

    net = tr.make_model("fmnist")
    tr.load_pflax_params(net, jax.tree.map(np.asarray, params))
    tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_(True)
    t_loss = torch.nn.functional.cross_entropy(net(tx)[1], torch.from_numpy(y))
    t_loss.backward()
    np.testing.assert_allclose(np.asarray(grad_x).transpose(0, 3, 1, 2), tx.grad.numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(loss), float(t_loss.detach()), rtol=1e-5)
    body = grads["body"]
    for i, conv in enumerate(net.convs):
        np.testing.assert_allclose(np.asarray(body[f"TorchConv_{i}"]["kernel"]).transpose(3, 2, 0, 1), conv.weight.grad.numpy(),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(body[f"TorchConv_{i}"]["bias"], conv.bias.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["head"]["TorchDense_0"]["kernel"].T, net.fc2.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
