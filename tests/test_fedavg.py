"""FedAvg: it learns, and a round is exactly "local SGD from the global model, then n_i-weighted mean"."""
import jax
import numpy as np
import pytest

from pflax.algorithms import fedavg
from pflax.data import from_partition, synthetic
from pflax.models import mlp


def _federation(num_clients=6, per_client=60, seed=0):
    data = synthetic(num_classes=4, train_per_class=num_clients * per_client // 4, test_per_class=40,
                     image_size=10, seed=seed, noise=0.3)
    order = np.random.default_rng(seed).permutation(len(data.y_train))
    parts = np.array_split(order[: num_clients * per_client], num_clients)
    train = from_partition(data.x_train, data.y_train, parts)
    test = from_partition(data.x_test, data.y_test, np.array_split(np.arange(len(data.y_test)), num_clients))
    return train, test


def test_fedavg_learns_synthetic():
    train, test = _federation()
    cfg = fedavg.Config(lr=0.05, local_epochs=5, batch_size=10)
    state = fedavg.init(jax.random.PRNGKey(0), mlp(4, hidden=(32,)), train.x[0], train.num_clients, cfg)
    fedavg.check_inputs(state, train, test)
    before = float(fedavg.evaluate(state, test)["accuracy"].mean())
    losses = []
    for _ in range(5):
        state, metrics = fedavg.round(state, train)
        losses.append(float(metrics["loss"].mean()))
        assert not bool(metrics["nonfinite"])
    after = float(fedavg.evaluate(state, test)["accuracy"].mean())
    assert losses[-1] < losses[0]
    # Chance is 0.25; this setting reaches ~0.89 after 5 rounds.
    assert after > max(before + 0.3, 0.8), (before, after)


def test_fedavg_round_is_weighted_mean_of_local_training():
    train, _ = _federation(num_clients=3, per_client=40)
    # Unequal client sizes: drop samples from client 1 so the weights are not uniform.
    mask = train.mask.at[1, 25:].set(False)
    train = train.replace(mask=mask)
    cfg = fedavg.Config(lr=0.05, local_epochs=2, batch_size=16)
    model = mlp(4, hidden=(16,))
    state = fedavg.init(jax.random.PRNGKey(1), model, train.x[0], 3, cfg)
    new_state, metrics = fedavg.round(state, train)

    round_key = jax.random.fold_in(state.key, state.round)
    locals_, sizes = [], []
    for i in range(3):
        client = {"x": train.x[i], "y": train.y[i], "mask": train.mask[i], "key": jax.random.fold_in(round_key, i)}
        out = fedavg.ALGORITHM.pieces(model, cfg).local_update(state.server, {**client, "client": {}})
        locals_.append(out["mean"])
        sizes.append(float(out["n"]))
    assert sizes == [40.0, 25.0, 40.0]
    w = np.array(sizes) / sum(sizes)
    expected = jax.tree.map(lambda *leaves: sum(wi * leaf for wi, leaf in zip(w, leaves)), *locals_)
    for got, want in zip(jax.tree.leaves(new_state.server), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert int(new_state.round) == 1
    np.testing.assert_array_equal(np.asarray(metrics["n"]), sizes)


def test_fedavg_sampling_and_validation():
    train, _ = _federation(num_clients=4, per_client=20)
    state = fedavg.init(jax.random.PRNGKey(0), mlp(4, hidden=(8,)), train.x[0], 10)
    ids = np.asarray(fedavg.sample_clients(state, 0.3))
    assert len(ids) == 3 and np.all(np.diff(ids) > 0) and ids.max() < 10
    np.testing.assert_array_equal(np.asarray(fedavg.sample_clients(state, 1.0)), np.arange(10))
    with pytest.raises(ValueError):
        fedavg.Config(momentum=1.0)
    with pytest.raises(ValueError):
        fedavg.init(jax.random.PRNGKey(0), mlp(4), train.x[0], 0)
