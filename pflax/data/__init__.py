"""Data: sources, seeded partitions, per-client transforms and padded client arrays.

The settings of a paper's experiments (FedPAC's tables, FedCollab's setups) are in :mod:`pflax.suites`.
"""
from .clients import ClientData, from_partition, toy_federation, validate
from .partition import (
    class_counts, dirichlet, dirichlet_matched, dominant_groups, fedpac_shards, fedpac_shards_sized, pathological,
    pathological_class_sets, quantity_skew,
)
from .sources import NORMALIZATION, DataError, Dataset, load_dataset, load_idx_dir, load_tfds, read_idx, synthetic
from .interop import from_flwr_partitioner
from .transforms import concept_shift_maps, relabel, relabel_clients, rotate_clients, rotate_images, rotation_angles

__all__ = [
    "toy_federation",
    "ClientData", "from_partition", "validate", "class_counts", "dirichlet", "dominant_groups", "fedpac_shards",
    "NORMALIZATION", "DataError", "Dataset", "load_dataset", "load_idx_dir", "load_tfds", "read_idx", "synthetic",
    "fedpac_shards_sized", "dirichlet_matched", "pathological", "pathological_class_sets", "quantity_skew",
    "from_flwr_partitioner",
    "concept_shift_maps", "relabel", "relabel_clients", "rotate_clients", "rotate_images", "rotation_angles",
]
