"""Partitions shared with Flower: flwr_datasets partitioners give pflax ClientData (offline, in memory)."""
from __future__ import annotations

import numpy as np
import pytest

from pflax.data import DataError, from_flwr_partitioner

NEEDS = "needs the flower extra: pip install 'pflax[flower]'"


# Imported by fixtures, not at the top: flwr_datasets loads Hugging Face datasets and pyarrow (about 4 s),
# which only the test worker that runs this file should pay for at collection.
@pytest.fixture(scope="module")
def partitioners():
    return pytest.importorskip("flwr_datasets.partitioner", reason=NEEDS)


@pytest.fixture(scope="module")
def datasets():
    return pytest.importorskip("datasets", reason=NEEDS)


def _labels(n=300, k=10, seed=0):
    return np.random.default_rng(seed).integers(0, k, n)


def _check_against_partitioner(datasets, data, partitioner_factory, x, labels):
    """The ClientData holds, row by row, exactly the samples of the partitioner's partitions."""
    got = from_flwr_partitioner(partitioner_factory(), data, x=x)
    reference = partitioner_factory()
    reference.dataset = datasets.Dataset.from_dict({"label": labels, "row": np.arange(labels.size)})
    for i in range(reference.num_partitions):
        rows = np.asarray(reference.load_partition(i)["row"])
        n = int(got.sizes[i])
        assert n == rows.size
        np.testing.assert_array_equal(np.asarray(got.x[i, :n]), x[rows])
        np.testing.assert_array_equal(np.asarray(got.y[i, :n]), labels[rows])
        assert not np.asarray(got.mask[i, n:]).any()
    return got


FACTORIES = {
    "iid": lambda p: p.IidPartitioner(num_partitions=5),
    "dirichlet": lambda p: p.DirichletPartitioner(num_partitions=6, partition_by="label", alpha=0.3, seed=1,
                                                  min_partition_size=0),
    "pathological": lambda p: p.PathologicalPartitioner(num_partitions=5, partition_by="label",
                                                        num_classes_per_partition=2, seed=2),
}


@pytest.mark.parametrize("kind", list(FACTORIES))
def test_label_array_partitions_match_flower(kind, partitioners, datasets):
    labels = _labels()
    x = np.arange(labels.size, dtype=np.float32)[:, None, None, None] * np.ones((1, 4, 4, 1), np.float32)
    got = _check_against_partitioner(datasets, labels, lambda: FACTORIES[kind](partitioners), x, labels)
    assert int(got.sizes.sum()) <= labels.size and got.client_ids.tolist() == list(range(got.num_clients))


def test_in_memory_hugging_face_dataset_with_image_column(partitioners, datasets):
    labels = _labels(120)
    images = np.random.default_rng(3).random((120, 6, 6, 1)).astype(np.float32)
    ds = datasets.Dataset.from_dict({"image": images, "label": labels})
    partitioner = partitioners.DirichletPartitioner(num_partitions=4, partition_by="label", alpha=1.0, seed=0,
                                                    min_partition_size=0)
    got = from_flwr_partitioner(partitioner, ds)
    assert got.x.shape[0] == 4 and got.x.shape[2:] == (6, 6, 1) and int(got.sizes.sum()) == 120
    flat = np.asarray(got.x)[np.asarray(got.mask)].reshape(120, -1)
    order = np.lexsort(flat.T[::-1])
    np.testing.assert_allclose(flat[order], images.reshape(120, -1)[np.lexsort(images.reshape(120, -1).T[::-1])])


def test_bad_inputs_are_refused_by_name(partitioners, datasets):
    with pytest.raises(DataError, match="give the samples x"):
        from_flwr_partitioner(partitioners.IidPartitioner(num_partitions=2), _labels(10))
    with pytest.raises(DataError, match="x has 9 samples but there are 10 labels"):
        from_flwr_partitioner(partitioners.IidPartitioner(num_partitions=2), _labels(10), x=np.zeros((9, 2)))
    with pytest.raises(DataError, match="no 'label' column"):
        from_flwr_partitioner(partitioners.IidPartitioner(num_partitions=2), datasets.Dataset.from_dict({"y": [0, 1]}))
