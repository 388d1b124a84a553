"""KMeans, FedCollab's Table 2 baseline (k-means over the clients' local models before FL): the k-means
step, the structure it finds on label-skewed clients, and run files with a ``[structure]`` table."""
import json

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pflax import cli
from pflax.algorithms.fedcollab import kmeans as km
from pflax.data import from_partition, synthetic
from pflax.experiment import RunError, RunSpec, find_structure, run
from pflax.models import mlp

BASE = dict(algorithm="fedavg", rounds=2, eval_every=1, config={"local_epochs": 1, "lr": 0.1},
            data={"train_per_client": 20, "test_per_client": 20}, partition={"clients": 4},
            model={"name": "mlp", "hidden": [8]})


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=2, max_size=2), min_size=n, max_size=n),
    st.integers(1, n), st.integers(0, 2**31 - 1))))
def test_kmeans_ends_at_a_lloyd_fixed_point_with_canonical_labels(case):
    points, k, seed = case
    points = np.asarray(points, np.float64)
    labels = km.kmeans(points, k, seed)
    assert labels.shape == (len(points),) and len(set(labels.tolist())) <= k
    for label in set(labels.tolist()):  # a cluster is named by its first member
        assert np.flatnonzero(labels == label)[0] == label
    # Every point is (up to round-off) nearest to the mean of its own cluster.
    means = {label: points[labels == label].mean(0) for label in set(labels.tolist())}
    for p, label in zip(points, labels):
        own = np.sum((p - means[label]) ** 2)
        assert all(own <= np.sum((p - m) ** 2) + 1e-9 for m in means.values())


def test_kmeans_separates_far_apart_groups_for_every_seed():
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(c, 0.1, size=(5, 3)) for c in (0.0, 10.0, -10.0)])
    expected = np.repeat([0, 5, 10], 5)
    for seed in range(10):
        np.testing.assert_array_equal(km.kmeans(points, 3, seed), expected)


def test_kmeans_refuses_more_clusters_than_points():
    with pytest.raises(ValueError, match="1 <= k <= 2"):
        km.kmeans(np.zeros((2, 3)), 3, seed=0)


def _label_groups():
    """Six clients: 0-2 hold classes 0 and 1 only, 3-5 classes 2 and 3 only."""
    data = synthetic(num_classes=4, train_per_class=60, test_per_class=10, image_size=8, seed=1, noise=0.3)
    y = np.asarray(data.y_train)
    parts = []
    for i in range(6):
        pool = np.flatnonzero(np.isin(y, [0, 1] if i < 3 else [2, 3]))
        parts.append(pool[(i % 3)::3][:30])
    return from_partition(data.x_train, data.y_train, parts)


def test_structure_groups_the_clients_by_their_labels():
    train = _label_groups()
    found = km.structure(jax.random.PRNGKey(0), mlp(4, hidden=(16,)), train, {"lr": 0.1, "batch_size": 10}, 2, 5, 0)
    assert found["coalitions"] == [[0, 1, 2], [3, 4, 5]]
    d = np.asarray(found["distances"])
    assert d.shape == (6, 6) and np.allclose(d, d.T) and np.all(np.diag(d) < 1e-6 * d.max())
    within, across = d[:3, :3].max(), d[:3, 3:].min()
    assert within < across


def test_local_models_are_one_round_of_local_training_from_one_initial_model():
    from pflax.algorithms import local_only

    train = _label_groups()
    model, key = mlp(4, hidden=(16,)), jax.random.PRNGKey(3)
    got = km.local_models(key, model, train, {"lr": 0.1, "batch_size": 10, "num_clusters": 9}, 2)
    cfg = local_only.Config(lr=0.1, batch_size=10, local_epochs=2)
    state = local_only.init(key, model, train.x[0], train.num_clients, cfg)
    initial = jax.tree.leaves(state.clients)
    expected = jax.tree.leaves(local_only.round(state, train)[0].clients)
    for a, b, start in zip(jax.tree.leaves(got), expected, initial):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert np.all(np.asarray(start) == np.asarray(start)[:1])  # every client began from the same model
    with pytest.raises(ValueError, match="must be >= 1"):
        km.local_models(key, model, train, {}, 0)


@pytest.fixture(scope="module")
def structure_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kmeans")
    spec = RunSpec.from_dict({**BASE, "structure": {"method": "kmeans", "clusters": 2, "local_epochs": 2}})
    return out, run(spec, out, progress=False, plots=False)


def test_a_structure_run_trains_the_coalitions_it_found(structure_run, tmp_path):
    out, result = structure_run
    assert result["status"] == "finished"
    found = result["structure"]
    assert found["method"] == "kmeans" and result["coalitions"] == found["coalitions"]
    assert sorted(sum(found["coalitions"], [])) == [0, 1, 2, 3]
    # The same search again, and the same groups given as fixed coalitions: the same run.
    spec = RunSpec.from_file(out / "run.toml")
    assert spec.structure == {"method": "kmeans", "clusters": 2, "local_epochs": 2} and spec.coalitions is None
    assert find_structure(spec)["coalitions"] == found["coalitions"]
    fixed = run(RunSpec.from_dict({**BASE, "coalitions": found["coalitions"]}), tmp_path / "fixed",
                progress=False, plots=False)
    assert fixed["final_per_client"] == result["final_per_client"]


def test_a_structure_run_repeats_and_resumes_from_its_run_file(structure_run, tmp_path):
    out, result = structure_run
    again = run(RunSpec.from_file(out / "run.toml"), tmp_path / "again", progress=False, plots=False)
    assert again["final_per_client"] == result["final_per_client"] and again["structure"] == result["structure"]
    resumed = run(RunSpec.from_file(out / "run.toml"), out, resume=True, progress=False, plots=False)
    assert resumed["final_per_client"] == result["final_per_client"]


def test_the_cli_runs_a_structure_run_file(structure_run, tmp_path, capsys):
    out, result = structure_run
    assert cli.main(["run", "--config", str(out / "run.toml"), "--out", str(tmp_path / "cli"), "--quiet",
                     "--no-plots"]) == 0
    assert "s/round" in capsys.readouterr().out
    assert json.loads((tmp_path / "cli" / "results.json").read_text())["final_per_client"] == result["final_per_client"]


@pytest.mark.parametrize("structure, message", [
    ({"method": "spectral"}, "method must be one of kmeans"),
    ({"method": "kmeans", "k": 2}, "has no parameter k"),
    ({"method": "kmeans", "clusters": 0}, "clusters must be an integer >= 1"),
    ({"method": "kmeans", "local_epochs": 1.5}, "local_epochs must be an integer >= 1"),
    ({"method": "kmeans", "clusters": 5}, "more than the partition's 4 clients"),
])
def test_bad_structure_tables_are_refused(structure, message):
    with pytest.raises(RunError, match=message):
        RunSpec.from_dict({**BASE, "structure": structure}).resolved().check()


def test_a_structure_excludes_fixed_coalitions():
    with pytest.raises(RunError, match=r"either \[structure\] or members/coalitions"):
        RunSpec.from_dict({**BASE, "structure": {"method": "kmeans"}, "coalitions": [[0, 1], [2, 3]]}).check()
    with pytest.raises(RunError, match=r"\[structure\] must be a table"):
        RunSpec.from_dict({**BASE, "structure": "kmeans"})
