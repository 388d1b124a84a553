"""Data: sources, seeded partitions and padded client arrays."""
from .clients import ClientData, from_partition, validate
from .partition import class_counts, dirichlet, dominant_groups, fedpac_shards, fedpac_shards_sized
from .seed_tables import (
    PATHOLOGICAL_CLASSES, ROTATION_ANGLES, concept_shift, concept_shift_maps, data_scarce, dirichlet_matched,
    draw_sizes, imbalanced_sizes, pathological, pathological_class_sets, quantity_skew, relabel, relabel_clients,
    rotate_clients, rotate_images, rotation_angles, rotation_skew,
)
from .sources import NORMALIZATION, DataError, Dataset, load_dataset, load_idx_dir, load_tfds, read_idx, synthetic

__all__ = [
    "ClientData", "from_partition", "validate", "class_counts", "dirichlet", "dominant_groups", "fedpac_shards",
    "NORMALIZATION", "DataError", "Dataset", "load_dataset", "load_idx_dir", "load_tfds", "read_idx", "synthetic",
    "federate_fedpac", "fedpac_shards_sized",
    "PATHOLOGICAL_CLASSES", "ROTATION_ANGLES", "concept_shift", "concept_shift_maps", "data_scarce", "dirichlet_matched",
    "draw_sizes", "imbalanced_sizes", "pathological", "pathological_class_sets", "quantity_skew", "relabel",
    "relabel_clients", "rotate_clients", "rotate_images", "rotation_angles", "rotation_skew",
]


def federate_fedpac(dataset: Dataset, num_clients: int = 20, train_per_client: int = 600, test_per_client: int = 600,
                    s: float = 0.2, wrap: bool = True) -> tuple[ClientData, ClientData]:
    """FedPAC's setting: the s% partition on train and, with the same groups, on test."""
    tr = fedpac_shards(dataset.y_train, num_clients, train_per_client, s, dataset.num_classes, wrap=wrap)
    te = fedpac_shards(dataset.y_test, num_clients, test_per_client, s, dataset.num_classes, wrap=wrap)
    return from_partition(dataset.x_train, dataset.y_train, tr), from_partition(dataset.x_test, dataset.y_test, te)
