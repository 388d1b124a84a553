"""Options that follow FedCollab's ports of the baselines (its Table 1): Finetune's fixed number of
fine-tuning steps, pFedMe restarting the personal model from the local one before every minibatch,
and Per-FedAvg's two halves of one minibatch. Each is checked against a hand computation.

Tiny federation: 10-class synthetic 12x12 images in FedPAC's s = 20% shards over 4 clients of 60, 37,
27 and 60 training samples (so minibatches of 8 end in 4, 5 and 3 samples), an MLP with one hidden
layer of 16 units.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pflax.algorithms import base, fedavg_ft, perfedavg, pfedme
from pflax.core import federated
from pflax.core.train import epoch_order, gather_minibatch, step_order
from pflax.data import fedpac_shards, from_partition, synthetic
from pflax.models import mlp

NUM_CLIENTS, NUM_CLASSES = 4, 10
MODEL = mlp(NUM_CLASSES, hidden=(16,))
KEY = jax.random.PRNGKey(3)
PLAIN = dict(momentum=0.0, weight_decay=0.0, local_epochs=1)


@pytest.fixture(scope="module")
def fed():
    d = synthetic(num_classes=NUM_CLASSES, train_per_class=24, test_per_class=12, image_size=12, seed=1, noise=0.3)
    train = from_partition(d.x_train, d.y_train, fedpac_shards(d.y_train, NUM_CLIENTS, 60, 0.2, NUM_CLASSES))
    test = from_partition(d.x_test, d.y_test, fedpac_shards(d.y_test, NUM_CLIENTS, 30, 0.2, NUM_CLASSES))
    return train.replace(mask=train.mask.at[1, 37:].set(False).at[2, 27:].set(False)), test


def row(tree, i):
    return jax.tree.map(lambda a: a[i], tree)


def assert_trees_close(got, want, rtol=1e-4, atol=1e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def real_minibatches(state, train, i: int, batch_size: int):
    """Client ``i``'s minibatches with real samples in its one-epoch round, in the round's order (the
    round's own key): ``(minibatch, valid)`` pairs."""
    key = federated.participant_keys(state, train.client_ids)[i]
    indices, valid = epoch_order(key, train.mask[i], 1, batch_size)
    data = {"x": train.x[i], "y": train.y[i]}
    for t in range(indices.shape[0]):
        if bool(valid[t].any()):
            yield gather_minibatch(data, indices[t], valid[t]), valid[t]


def weighted_mean(trees, train):
    """The server's sample-size weighted mean of the clients' models."""
    sizes = np.asarray(train.sizes, np.float64)
    return jax.tree.map(lambda *ws: sum(s * a for s, a in zip(sizes / sizes.sum(), ws)), *trees)


N_MAX = 10  # one padded size: only the batch size and the step count change the compiled shapes


@settings(max_examples=12, deadline=None)
@given(real=st.integers(0, N_MAX), batch_size=st.sampled_from([1, 3, 4]), steps=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_step_order_takes_real_minibatches_epoch_after_epoch(real, batch_size, steps, seed):
    mask = jnp.arange(N_MAX) < real
    indices, valid = step_order(jax.random.PRNGKey(seed), mask, steps, batch_size)
    assert indices.shape == valid.shape == (steps, batch_size)
    if real == 0:
        assert not bool(valid.any())  # no sample: only no-op steps
        return
    assert bool(valid.any(axis=1).all())  # every step trains
    per_epoch = -(-real // batch_size)
    taken = np.asarray(indices)[np.asarray(valid)]
    assert np.all(taken < real)  # never a padding slot
    for start in range(0, steps - per_epoch + 1, per_epoch):  # each whole epoch visits every sample once
        epoch = np.asarray(indices[start:start + per_epoch])[np.asarray(valid[start:start + per_epoch])]
        assert sorted(epoch.tolist()) == list(range(real))


def test_finetune_steps_equal_epochs_when_a_client_fits_one_minibatch(fed):
    train, test = fed
    whole = int(train.x.shape[1])  # the padded size: one minibatch per epoch for every client
    cfg = dict(PLAIN, lr=0.05, batch_size=whole, finetune_parts=("body", "head"))
    by_epochs = fedavg_ft.Config(**cfg, finetune_epochs=2)
    by_steps = fedavg_ft.Config(**cfg, finetune_epochs=0, finetune_steps=2)
    state = fedavg_ft.init(KEY, MODEL, train.x[0], NUM_CLIENTS, by_epochs)
    state, _ = fedavg_ft.round(state, train)
    acc_epochs = np.asarray(fedavg_ft.evaluate(state, test, train)["accuracy"])
    acc_steps = np.asarray(fedavg_ft.evaluate(state.replace(config=by_steps), test, train)["accuracy"])
    np.testing.assert_array_equal(acc_steps, acc_epochs)
    with pytest.raises(ValueError, match="either for epochs or for steps"):
        fedavg_ft.Config(finetune_epochs=1, finetune_steps=2)


def test_one_finetune_step_is_less_than_an_epoch(fed):
    """With batch 8 every client's epoch is 4 to 8 steps; fine-tuning for 1 step moves less."""
    train, test = fed
    cfg = dict(PLAIN, lr=0.05, batch_size=8)
    state = fedavg_ft.init(KEY, MODEL, train.x[0], NUM_CLIENTS, fedavg_ft.Config(**cfg, finetune_epochs=1))
    untuned = fedavg_ft.Config(**cfg, finetune_epochs=0)
    one_step = fedavg_ft.Config(**cfg, finetune_epochs=0, finetune_steps=1)
    acc = {name: np.asarray(fedavg_ft.evaluate(state.replace(config=c), test, train)["accuracy"]).mean()
           for name, c in [("none", untuned), ("step", one_step), ("epoch", state.config)]}
    assert acc["none"] < acc["step"] < acc["epoch"], acc  # from a random model, more local SGD fits more


def test_pfedme_restart_theta_starts_each_minibatch_from_the_local_model(fed):
    train, _ = fed
    cfg = pfedme.Config(**PLAIN, lr=0.05, batch_size=20, personal_lr=0.05, prox_mu=1.0, inner_steps=2,
                        restart_theta=True)
    state = pfedme.init(KEY, MODEL, train.x[0], NUM_CLIENTS, cfg)
    new, _ = pfedme.round(state, train)
    grad = jax.jit(jax.grad(base.ce_loss(MODEL)))
    locals_ = []
    for i in range(NUM_CLIENTS):
        w = theta = state.server
        for batch, valid in real_minibatches(state, train, i, cfg.batch_size):
            weights = valid.astype(jnp.float32)
            theta = w  # the restart
            for _ in range(cfg.inner_steps):
                g = grad(theta, batch, weights)
                theta = jax.tree.map(lambda a, g_, w_: a - cfg.personal_lr * (g_ + cfg.prox_mu * (a - w_)), theta, g, w)
            w = jax.tree.map(lambda w_, t_: w_ - cfg.lr * cfg.prox_mu * (w_ - t_), w, theta)
        assert_trees_close(row(new.clients, i), theta)
        locals_.append(w)
    assert_trees_close(new.server, weighted_mean(locals_, train))  # 2 or 3 minibatches: a warm start would differ


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_halves_split_the_real_slots_in_order(slots):
    valid = jnp.array(sorted(slots, reverse=True))  # real samples first, as epoch_order lays them out
    first, second = perfedavg.halves(valid)
    count = int(valid.sum())
    if count < perfedavg.MIN_HALVES_BATCH:
        assert not bool(first.any() or second.any())
        return
    assert int(first.sum()) == count // 2 and int(second.sum()) == count - count // 2
    assert not bool((first & second).any()) and bool(((first | second) == valid).all())
    assert np.flatnonzero(np.asarray(first)).max() < np.flatnonzero(np.asarray(second)).min()


def test_perfedavg_halves_meta_steps_by_hand(fed):
    """FedCollab's port: each minibatch's first half adapts, its second half gives the meta-gradient."""
    train, _ = fed
    cfg = perfedavg.Config(**PLAIN, batch_size=8, alpha=0.1, beta=0.1, pairing="halves")
    state = perfedavg.init(KEY, MODEL, train.x[0], NUM_CLIENTS, cfg)
    new, _ = perfedavg.round(state, train)
    grad = jax.jit(jax.grad(base.ce_loss(MODEL)))
    models = []
    for i in range(NUM_CLIENTS):
        w = state.server
        for batch, valid in real_minibatches(state, train, i, cfg.batch_size):
            real = np.flatnonzero(np.asarray(valid))
            if len(real) < 4:
                continue  # too small to halve
            pivot = len(real) // 2
            first = jnp.zeros(8, bool).at[real[:pivot]].set(True)
            second = jnp.zeros(8, bool).at[real[pivot:]].set(True)
            adapted = jax.tree.map(lambda a, g: a - cfg.alpha * g, w, grad(w, batch, first.astype(jnp.float32)))
            w = jax.tree.map(lambda a, g: a - cfg.beta * g, w, grad(adapted, batch, second.astype(jnp.float32)))
        models.append(w)
    assert_trees_close(new.server, weighted_mean(models, train))
    with pytest.raises(ValueError, match="needs version 'fo'"):
        perfedavg.Config(pairing="halves", version="hf")
