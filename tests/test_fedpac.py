"""FedPAC end to end: determinism, execution strategies, ablation switches, partial participation,
edge cases, and a short run on real Fashion-MNIST."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pflax
from pflax import fedpac
from pflax.core.execution import Execution

CFG = fedpac.Config(batch_size=16, body_epochs=2, body_lr=0.05)


def _init(model, train, cfg=CFG, n=None):
    return fedpac.init(jax.random.PRNGKey(0), model, train.x[0], n or train.num_clients, cfg)


def _leaves_equal(a, b, exact=True, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if exact:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-4)


def test_round_is_pure_and_deterministic(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    state = _init(small_mlp, train)
    s1, m1 = fedpac.round(state, train, test)
    s2, m2 = fedpac.round(state, train, test)
    _leaves_equal(s1, s2)
    _leaves_equal(m1, m2)
    assert int(s1.round) == 1 and int(state.round) == 0  # input state untouched


def test_learns_and_weights_are_stochastic(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    state = _init(small_mlp, train)
    for _ in range(6):
        state, m = fedpac.round(state, train, test)
    acc = float(fedpac.evaluate(state, test)["accuracy"].mean())
    assert acc > 0.5  # 10 classes: chance is 0.1
    w = np.asarray(m["combination_weights"])
    np.testing.assert_allclose(w.sum(1), 1, atol=1e-5)
    assert np.all(w >= 0) and np.all((w == 0) | (w > 1e-3))
    assert not bool(m["nonfinite"])


def test_vmapped_and_sequential_execution_agree(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    out = {}
    for strategy in ("map", "vmap", "chunked"):
        cfg = dataclasses.replace(CFG, execution=Execution(strategy, chunk_size=3))
        state = _init(small_mlp, train, cfg)
        for _ in range(2):
            state, m = fedpac.round(state, train, test)
        out[strategy] = (state.server["body"], state.clients["head"], m["combination_weights"])
    _leaves_equal(out["map"], out["vmap"], exact=False, atol=2e-5)
    _leaves_equal(out["map"], out["chunked"], exact=False, atol=2e-5)


def test_no_collaboration_keeps_local_heads(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    cfg = dataclasses.replace(CFG, classifier_collaboration=False)
    state, m = fedpac.round(_init(small_mlp, train, cfg), train, test)
    np.testing.assert_array_equal(np.asarray(m["combination_weights"]), np.eye(train.num_clients))
    heads = state.clients["head"]
    heads = np.asarray(heads["Dense_0" if "Dense_0" in heads else "TorchDense_0"]["kernel"])
    assert not np.allclose(heads[0], heads[1])  # personal heads diverge


def test_no_alignment_in_round_zero_official(tiny_federation, small_mlp):
    _, train, _ = tiny_federation
    base = _init(small_mlp, train)
    huge = base.replace(config=dataclasses.replace(CFG, lam=1e4))
    s_a, _ = fedpac.round(base, train)
    s_b, _ = fedpac.round(huge, train)
    _leaves_equal(s_a.server["body"], s_b.server["body"])  # lambda is irrelevant in round 0
    s_a2, _ = fedpac.round(s_a, train)
    s_b2, _ = fedpac.round(s_a.replace(config=huge.config), train)
    with pytest.raises(AssertionError):
        _leaves_equal(s_a2.server["body"], s_b2.server["body"])  # ... and matters from round 1 on


def test_feature_alignment_switch(tiny_federation, small_mlp):
    _, train, _ = tiny_federation
    s0, _ = fedpac.round(_init(small_mlp, train), train)
    on, _ = fedpac.round(s0, train)
    off, _ = fedpac.round(s0.replace(config=dataclasses.replace(CFG, feature_alignment=False)), train)
    with pytest.raises(AssertionError):
        _leaves_equal(on.server["body"], off.server["body"])


def test_partial_participation(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    state = _init(small_mlp, train)
    ids = fedpac.sample_clients(state, 0.5)
    assert ids.shape == (4,) and np.all(np.diff(np.asarray(ids)) > 0)
    new, m = fedpac.round(state, train.take(ids), test.take(ids))
    assert m["combination_weights"].shape == (4, 4)
    others = np.setdiff1d(np.arange(8), np.asarray(ids))
    for leaf_new, leaf_old in zip(jax.tree.leaves(new.clients), jax.tree.leaves(state.clients)):
        np.testing.assert_array_equal(np.asarray(leaf_new)[others], np.asarray(leaf_old)[others])
        assert not np.allclose(np.asarray(leaf_new)[np.asarray(ids)], np.asarray(leaf_old)[np.asarray(ids)])
    # sampling is its own stream: a different round gives another draw, same round the same draw
    np.testing.assert_array_equal(np.asarray(fedpac.sample_clients(state, 0.5)), np.asarray(ids))
    assert fedpac.sample_clients(new, 0.5).shape == (4,)


def test_empty_client_and_missing_classes_never_produce_nan(tiny_federation, small_mlp):
    _, train, test = tiny_federation
    mask = train.mask.at[2].set(False)  # client 2 has no data
    y = jnp.where(train.y == 9, 8, train.y)  # class 9 absent on every client
    data = train.replace(mask=mask, y=y)
    state = _init(small_mlp, train)
    for _ in range(2):
        state, m = fedpac.round(state, data, test)
    assert not bool(m["nonfinite"])
    assert all(np.all(np.isfinite(np.asarray(l))) for l in jax.tree.leaves(state))
    w = np.asarray(m["combination_weights"])
    np.testing.assert_array_equal(w[2], np.eye(8)[2])  # keeps its own head
    assert np.all(w[:, 2][np.arange(8) != 2] == 0)  # never a candidate
    assert not bool(state.server["centroid_valid"][9])  # never seen: stays undefined
    assert float(m["n"][2]) == 0


def test_absent_class_keeps_previous_centroid(tiny_federation, small_mlp):
    _, train, _ = tiny_federation
    state, _ = fedpac.round(_init(small_mlp, train), train)
    assert bool(state.server["centroid_valid"].all())
    y = jnp.where(train.y == 3, 4, train.y)
    state2, _ = fedpac.round(state, train.replace(y=y))
    np.testing.assert_array_equal(np.asarray(state2.server["centroids"][3]), np.asarray(state.server["centroids"][3]))
    assert not np.array_equal(np.asarray(state2.server["centroids"][4]), np.asarray(state.server["centroids"][4]))


def test_divergence_is_caught_and_state_kept(tiny_federation, small_mlp):
    _, train, _ = tiny_federation
    cfg = dataclasses.replace(CFG, body_lr=1e30, head_lr=1e30)
    state = _init(small_mlp, train, cfg)
    new, m = fedpac.round(state, train)
    assert bool(m["nonfinite"])
    _leaves_equal(new, state)


@pytest.mark.parametrize("field,value", [("body_lr", -1.0), ("lam", -0.5), ("momentum", 1.0), ("batch_size", 0), ("qp_mode", "fast")])
def test_config_rejects_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        fedpac.Config(**{field: value})


def test_short_real_fashion_mnist_run_learns(fmnist_dir):
    from pflax.data import load_idx_dir
    from pflax.suites.fedpac import federate_fedpac

    ds = load_idx_dir(fmnist_dir, "fashion_mnist")
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.num_classes == 10
    train, test = federate_fedpac(ds, num_clients=5, train_per_client=200, test_per_client=100)
    model = pflax.models.fedpac_cnn("fmnist")
    state = fedpac.init(jax.random.PRNGKey(0), model, train.x[0], 5, fedpac.Config(body_epochs=2))
    fedpac.check_inputs(state, train, test)
    for _ in range(3):
        state, m = fedpac.round(state, train, test)
    acc = float(fedpac.evaluate(state, test)["accuracy"].mean())
    assert acc > 0.6, acc  # chance is 0.1
